#!/usr/bin/env node
// Propagation benchmark: how long an admin write takes to be served by every
// data plane. PostgreSQL + llmgw-controlplane + two data planes (Watch over
// gRPC) + the mock provider, all on 127.0.0.1. Each of N writes changes the
// route `fast` (the primary alternates between two providers); for each we
// measure from the moment the write returned (committed, NOTIFY sent) until
// BOTH data planes report the new version on /readyz (snapshot_version),
// polled every ~2 ms over keep-alive connections. See docs/BENCHMARKS.md.
//
// Usage: node tests/bench/propagation.mjs        (or tests/bench/run.sh --propagation)
// Environment: LLMGW_BUILD_DIR (as the integration tests; default <repo>/build),
//   PROP_WRITES (default 100), PROP_GAP_MS (pause between writes, default 50),
//   PROP_OUT (also write the result as JSON to this file).
//
// The writes are SQL in one transaction that bumps config_state.version and
// sends pg_notify('llmgw_config', version), exactly what every admin API
// write does: the route-entries endpoint is not on this branch yet. The time
// of psql itself (process start, connect) is before t0 and not measured.

import http from 'node:http';
import { performance } from 'node:perf_hooks';
import fs from 'node:fs';
import * as h from '../integration/harness.mjs';
import { Config, masterKey } from '../integration/cpconfig.mjs';

const N = Number(process.env.PROP_WRITES ?? 100);
const GAP_MS = Number(process.env.PROP_GAP_MS ?? 50);
const POLL_MS = 2;
const DEADLINE_MS = 10_000;

const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

function readyVersion(port) {
  return new Promise((resolve, reject) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/readyz', agent }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(h.tryParseJson(t)?.snapshot_version ?? -1));
    });
    req.on('error', reject);
  });
}

function pct(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function main() {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  const key = masterKey();
  const pg = await h.startPostgres();
  const mock = await h.startMock();
  const cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: key.hex } });
  const cfg = new Config(cp, pg, key);
  await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mock.v1 });
  await cfg.provider({ name: 'beta', driver: 'openai', base_url: mock.v1 });
  await cfg.route('fast', [{ provider: 'alpha', model: 'mock-gpt' }, { provider: 'beta', model: 'mock-gpt' }]);
  const apiKey = await cfg.apiKey('key_bench');
  const target = `127.0.0.1:${cp.listening.grpc_port}`;
  const dps = [
    await h.startGatewayCP({ controlPlane: target, replicaId: 'bench-a', threads: 1 }),
    await h.startGatewayCP({ controlPlane: target, replicaId: 'bench-b', threads: 1 }),
  ];
  const v0 = cfg.version();
  await h.waitFor(async () => (await Promise.all(dps.map((g) => readyVersion(g.port)))).every((v) => v >= v0),
    { timeoutMs: 20_000, what: 'both data planes on the first version' });

  const samples = [];
  for (let i = 0; i < N; i++) {
    const order = i % 2 === 0 ? ['beta', 'alpha'] : ['alpha', 'beta'];
    const v = await cfg.routeEntries('fast', order.map((p) => ({ provider: p, model: 'mock-gpt' })));
    const t0 = performance.now();
    for (;;) {
      const vs = await Promise.all(dps.map((g) => readyVersion(g.port)));
      if (vs.every((x) => x >= v)) break;
      if (performance.now() - t0 > DEADLINE_MS) throw new Error(`write ${i} (version ${v}) not served after ${DEADLINE_MS} ms: ${vs}`);
      await h.sleep(POLL_MS);
    }
    samples.push(performance.now() - t0);
    await h.sleep(GAP_MS);
  }
  // The last order is served, not only acknowledged.
  const last = (N - 1) % 2 === 0 ? 'beta' : 'alpha';
  for (const g of dps) {
    const r = await h.request(g.port, { headers: { authorization: `Bearer ${apiKey}` }, body: { model: 'fast', messages: [{ role: 'user', content: 'hi' }] } });
    if (r.status !== 200 || r.headers['x-llmgw-provider'] !== last) throw new Error(`served by ${r.headers['x-llmgw-provider']} (${r.status}), want ${last}`);
  }
  const snap = (await cp.admin('GET', '/v1/admin/snapshot')).json;
  const sorted = [...samples].sort((a, b) => a - b);
  const result = {
    writes: N,
    p50_ms: +pct(sorted, 50).toFixed(1),
    p90_ms: +pct(sorted, 90).toFixed(1),
    p99_ms: +pct(sorted, 99).toFixed(1),
    max_ms: +sorted[sorted.length - 1].toFixed(1),
    min_ms: +sorted[0].toFixed(1),
    mean_ms: +(samples.reduce((a, b) => a + b, 0) / N).toFixed(1),
    goal_p99_ms: 500,
    replicas_acked: snap.replicas.map((r) => ({ id: r.replica_id, acked_version: r.acked_version })),
    final_version: snap.version,
    build_dir: h.BUILD_DIR,
  };
  console.log(JSON.stringify(result));
  console.log(`\n| writes | p50 | p90 | p99 | max | mean |\n| ---: | ---: | ---: | ---: | ---: | ---: |\n`
    + `| ${N} | ${result.p50_ms} ms | ${result.p90_ms} ms | ${result.p99_ms} ms | ${result.max_ms} ms | ${result.mean_ms} ms |`);
  if (process.env.PROP_OUT) fs.writeFileSync(process.env.PROP_OUT, `${JSON.stringify(result, null, 2)}\n`);
  agent.destroy();
  await h.stopAll();
  return result.p99_ms <= 500 ? 0 : 3;
}

main().then((code) => process.exit(code), async (e) => {
  console.error(e.stack ?? String(e));
  agent.destroy();
  try {
    await h.stopAll();
  } catch (e2) {
    console.error(e2.message);
  }
  process.exit(1);
});
