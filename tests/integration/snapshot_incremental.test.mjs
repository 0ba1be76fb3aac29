// The snapshot builder's incremental path (issue 20) against a real
// PostgreSQL: controlplane_snapshot_inc_test
// (tests/unit/controlplane/snapshot_inc_test.c) makes random writes to every
// kind of resource and checks, after every few, that the builder's model
// and the deltas it published equal a full build of the same configuration.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const INC_TEST = path.join(h.BUILD_DIR, 'tests', 'unit', 'controlplane_snapshot_inc_test');
let pg;

before(async () => {
  h.requireBinaries([INC_TEST]);
  pg = await h.startPostgres();
});

after(async () => {
  await h.stopAll();
});

test('controlplane_snapshot_inc_test passes against PostgreSQL', { timeout: 300_000 }, () => {
  const conninfo = pg.createDatabase('snapinc');
  const r = spawnSync(INC_TEST, [], {
    encoding: 'utf8', env: { ...process.env, LLMGW_TEST_DATABASE_URL: conninfo, LLMGW_LOG_LEVEL: process.env.LLMGW_LOG_LEVEL ?? 'warn' }, timeout: 280_000,
  });
  const out = `${r.stdout}\n${r.stderr}`;
  if (process.env.LLMGW_TEST_LOG) fs.writeFileSync(process.env.LLMGW_TEST_LOG, out); // the whole run, to read
  assert.equal(r.status, 0, out.slice(-20000));
  const m = out.match(/asserts\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/);
  assert.ok(m && Number(m[4]) === 0, out.slice(-20000));
  console.log(out.split('\n').filter((l) => /SEED|writes, |Test:|asserts|tests /.test(l)).join('\n'));
});
