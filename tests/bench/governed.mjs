#!/usr/bin/env node
// The governance side of tests/bench/run.sh (BENCH_GOVERNANCE=1, the
// default): PostgreSQL and llmgw-controlplane on 127.0.0.1, configured
// through the admin API as the file-mode rig is (providers `mock` and
// `mock-xlate` on the given mock, routes `fast` and `xlate`, a key), plus
// a cost budget on the key, so that every benchmarked request is
// authenticated, reserves against a leased allowance and leaves a ledger
// row (spooled by the data plane, stored by the control plane).
//
// Usage: BENCH_MOCK_V1=http://127.0.0.1:PORT/v1 BENCH_GOV_OUT=FILE \
//          node tests/bench/governed.mjs
// Writes {"grpc":"127.0.0.1:N","key":"sk-..."} to BENCH_GOV_OUT once ready,
// then waits; SIGTERM stops the control plane and PostgreSQL (by pid) and
// prints the number of ledger rows stored, as a check that the benchmark's
// requests were governed: {"msg":"ledger","rows":N}.

import fs from 'node:fs';
import * as h from '../integration/harness.mjs';
import { Config, masterKey } from '../integration/cpconfig.mjs';

const MOCK_V1 = process.env.BENCH_MOCK_V1;
const OUT = process.env.BENCH_GOV_OUT;
if (!MOCK_V1 || !OUT) {
  console.error('governed.mjs: BENCH_MOCK_V1 and BENCH_GOV_OUT are required');
  process.exit(1);
}

async function main() {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  const key = masterKey();
  const pg = await h.startPostgres();
  const cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: key.hex } });
  const cfg = new Config(cp, pg, key);
  await cfg.secret('mock-key', 'sk-mock-bench');
  const common = { driver: 'openai', base_url: MOCK_V1, credential_ref: 'mock-key' };
  await cfg.provider({ name: 'mock', ...common });
  await cfg.provider({ name: 'mock-xlate', ...common, options: { passthrough: false } });
  await cfg.route('fast', [{ provider: 'mock', model: 'mock-gpt' }], { aliases: ['default'] });
  await cfg.route('xlate', [{ provider: 'mock-xlate', model: 'mock-gpt' }]);
  const apiKey = await cfg.apiKey('key_bench');
  // $1,000,000 a day: never reached, but every request reserves against it
  // (BENCH_GOV_BUDGET=0 leaves it out, to tell its cost from the ledger's).
  if (process.env.BENCH_GOV_BUDGET !== '0') await cfg.api('POST', '/v1/admin/limits', {
    id: 'bench-cost', scope_kind: 'key', scope: 'key_bench', metric: 'cost', period: 'day',
    amount: 1_000_000 * 1_000_000_000_000,
  }, 201);
  // A price, so every ledger row carries a cost.
  for (const provider of ['mock', 'mock-xlate']) {
    await cfg.api('POST', '/v1/admin/prices', {
      provider, model: 'mock-gpt', input_price: '6e-7', output_price: '2.4e-6',
    }, 201);
  }
  fs.writeFileSync(OUT, JSON.stringify({ grpc: `127.0.0.1:${cp.listening.grpc_port}`, key: apiKey }));

  let stopping = false;
  const stop = async () => {
    if (stopping) return;
    stopping = true;
    let rows = -1;
    try {
      rows = Number(pg.sql('SELECT count(*) FROM ledger', cfg.dbname));
    } catch { /* reported as -1 */ }
    console.log(JSON.stringify({ msg: 'ledger', rows }));
    await h.stopAll().catch((e) => console.error(String(e)));
    process.exit(0);
  };
  // The harness's own handlers kill everything and exit at once; this one
  // counts the rows first, then stops the processes the same way.
  for (const sig of ['SIGTERM', 'SIGINT']) {
    process.removeAllListeners(sig);
    process.on(sig, stop);
  }
  setInterval(() => {}, 1 << 30);
}

main().catch(async (e) => {
  console.error(e?.stack ?? String(e));
  await h.stopAll().catch(() => {});
  process.exit(1);
});
