#!/usr/bin/env node
// Budget race benchmark (docs/budgets.md, docs/BENCHMARKS.md): how far a
// fleet-wide budget overshoots when many streams race for its last dollar.
// PostgreSQL + llmgw-controlplane + two data planes + the mock provider, on
// 127.0.0.1. Each round creates two fresh daily cost budgets (one reserving
// estimates, one the worst case, both fail_closed) for two keys, and for
// each runs CLIENTS concurrent streaming clients, spread over both data
// planes, each sending requests (max_tokens drawn from 1..64, answers of
// min(max_tokens, 40) tokens) until refused; then, once every attempt's
// ledger row has landed, the window's spent is compared with the budget.
// A third case, estimate_mislearned, first teaches both data planes that
// answers use 1% of max_tokens (20 requests each with max_tokens 4000,
// through a key with no limit), so the race starts with estimates far too
// low: the overshoot an estimator that is wrong at the worst moment gives.
// A fourth, estimate_dense, sends prompts of 150 one-letter words, which the
// rough estimate (characters / 4) puts at half what the provider counts,
// as a dense script would, until the data plane learns the target's ratio.
//
// Usage: node tests/bench/limits_race.mjs
// Environment: LLMGW_BUILD_DIR (as the integration tests), RACE_ROUNDS
//   (default 5), RACE_CLIENTS (default 50), RACE_AMOUNT (picodollars,
//   default 20000000000: about 300 answers), RACE_MODES (a comma list of
//   the cases below, default all), RACE_OUT (also write the
//   result as JSON to this file), RACE_CHUNKS (the mock's answer length,
//   default 40: answers are min(max_tokens, RACE_CHUNKS) tokens).

import fs from 'node:fs';
import * as h from '../integration/harness.mjs';
import { Config, masterKey } from '../integration/cpconfig.mjs';
import { overshootPct, runRace, settledSpent } from '../integration/limits_race.mjs';

const ROUNDS = Number(process.env.RACE_ROUNDS ?? 5);
const CLIENTS = Number(process.env.RACE_CLIENTS ?? 50);
const AMOUNT = Number(process.env.RACE_AMOUNT ?? 20_000_000_000);
const CHUNKS = Number(process.env.RACE_CHUNKS ?? 40);
const MODEL = `mock-gpt#chunks=${CHUNKS},chunk_delay_ms=3`;

async function main() {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  const key = masterKey();
  const pg = await h.startPostgres();
  const mock = await h.startMock();
  const cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: key.hex } });
  const cfg = new Config(cp, pg, key);
  await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mock.v1 });
  // Estimates are learned per target: 'race' is shared by the estimate and
  // worst-case runs (warm after the first); the mislearned and dense runs
  // get a target of their own each round (a tag in the model: nothing
  // learned yet).
  const target = async (route, model) => {
    await cfg.route(route, [{ provider: 'alpha', model }]);
    await cfg.api('POST', '/v1/admin/prices', { provider: 'alpha', model, input_price: 1_000_000, output_price: 2_000_000 }, 201);
  };
  await target('race', MODEL);
  const grpcTarget = `127.0.0.1:${cp.listening.grpc_port}`;
  const dps = [
    await h.startGatewayCP({ controlPlane: grpcTarget, replicaId: 'dp-a' }),
    await h.startGatewayCP({ controlPlane: grpcTarget, replicaId: 'dp-b' }),
  ];
  const trainer = (await cfg.api('POST', '/v1/admin/keys', { id: 'k-trainer' }, 201)).key;
  const MODES = (process.env.RACE_MODES ?? 'estimate,estimate_mislearned,estimate_dense,worst_case').split(',');
  const rows = [];
  for (let round = 1; round <= ROUNDS; round++) {
    for (const mode of MODES) {
      const id = `race-${mode}-${round}`.replace(/_/g, '-');
      const reservation = mode === 'worst_case' ? 'worst_case' : 'estimate';
      let route = 'race';
      if (mode === 'estimate_mislearned' || mode === 'estimate_dense') {
        route = `${mode === 'estimate_dense' ? 'dense' : 'mis'}${round}`;
        await target(route, `${MODEL},tag=${route}`);
      }
      const k = await cfg.api('POST', '/v1/admin/keys', { id: `k-${id}` }, 201);
      await cfg.api('POST', '/v1/admin/limits', {
        id, scope_kind: 'key', scope: `k-${id}`, metric: 'cost', period: 'day', amount: AMOUNT, reservation, offline: 'fail_closed',
      }, 201);
      const v = cfg.version();
      for (const g of dps) {
        await h.waitFor(async () => (await h.request(g.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v, { what: 'propagation' });
      }
      if (mode === 'estimate_mislearned') {
        for (const g of dps) {
          for (let i = 0; i < 20; i++) {
            const r = await h.request(g.port, {
              headers: { authorization: `Bearer ${trainer}` },
              body: { model: route, max_tokens: 4000, messages: [{ role: 'user', content: 'teach' }] },
            });
            if (r.status !== 200) throw new Error(`training: ${r.status} ${r.text}`);
          }
        }
      }
      const t0 = Date.now();
      const c = await runRace({
        ports: dps.map((g) => g.port), apiKey: k.key, route, clients: CLIENTS,
        prompt: mode === 'estimate_dense' ? 'a '.repeat(150) : null,
      });
      const ms = Date.now() - t0;
      const spent = await settledSpent(pg, id, `k-${id}`, c.ok);
      const row = {
        round, mode, answers: c.ok, refused: c.refused, other: c.other, spent: spent.toString(),
        used_pct: Number(spent * 10000n / BigInt(AMOUNT)) / 100, overshoot_pct: overshootPct(spent, AMOUNT), ms,
      };
      rows.push(row);
      console.log(JSON.stringify(row));
    }
  }
  const summary = {};
  for (const mode of MODES) {
    const r = rows.filter((x) => x.mode === mode);
    const os = r.map((x) => x.overshoot_pct);
    const used = r.map((x) => x.used_pct);
    summary[mode] = {
      rounds: r.length,
      overshoot_mean_pct: Number((os.reduce((a, b) => a + b, 0) / os.length).toFixed(3)),
      overshoot_max_pct: Math.max(...os),
      used_mean_pct: Number((used.reduce((a, b) => a + b, 0) / used.length).toFixed(2)),
      used_min_pct: Math.min(...used),
      answers_mean: Math.round(r.reduce((a, b) => a + b.answers, 0) / r.length),
    };
  }
  console.log(JSON.stringify({ clients: CLIENTS, amount: AMOUNT, chunks: CHUNKS, summary }));
  if (process.env.RACE_OUT) fs.writeFileSync(process.env.RACE_OUT, JSON.stringify({ rows, summary }, null, 2));
  await h.stopAll();
}

main().catch(async (e) => {
  console.error(e);
  await h.stopAll().catch(() => {});
  process.exit(1);
});
