// deploy/local/fleet-up.sh and fleet-down.sh (README, "Try the distributed
// setup on one machine"): one command starts PostgreSQL, etcd, two control
// planes, three data planes and two mocks on loopback and configures them
// through the admin API; a chat (the official OpenAI SDK) then works through
// every data plane, both control planes agree on one leader, and
// fleet-down.sh leaves none of the recorded processes behind. Bounded: each
// script gets two minutes.

import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import OpenAI from 'openai';
import * as h from './harness.mjs';

const UP = path.join(h.REPO_ROOT, 'deploy/local/fleet-up.sh');
const DOWN = path.join(h.REPO_ROOT, 'deploy/local/fleet-down.sh');
const OFFSETS = [0, 1, 2, 10, 11, 20, 21, 30, 31, 40, 41, 50];
const state = h.makeTmpDir();
let env;

function free(port) {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

async function freeBase() {
  for (let i = 0; i < 20; i++) {
    const base = 20000 + 100 * Math.floor(Math.random() * 400);
    if ((await Promise.all(OFFSETS.map((o) => free(base + o)))).every(Boolean)) return base;
  }
  throw new Error('no free range of ports');
}

function run(script) {
  const r = spawnSync('bash', [script], { env, encoding: 'utf8', timeout: 120_000 });
  return { ...r, out: `${r.stdout}${r.stderr}${r.error ? `\n${r.error.message}` : ''}` };
}

const pids = () => h.pidFiles(state);
const { alive } = h;

after(async () => {
  if (env && pids().length) run(DOWN); // a failed test leaves nothing either
  await h.stopAll();
});

test('fleet-up.sh starts the fleet, a chat works through each data plane, fleet-down.sh stops it all', { timeout: 300_000 }, async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  env = { ...process.env, LLMGW_BUILD_DIR: h.BUILD_DIR, LLMGW_SKIP_DEPS: '1', LLMGW_FLEET_DIR: state, LLMGW_FLEET_PORT: String(await freeBase()) };
  for (const k of ['LLMGW_DATABASE_URL', 'LLMGW_ADMIN_TOKEN', 'LLMGW_ETCD_ENDPOINTS', 'LLMGW_REPLICA_ID']) delete env[k];
  const t0 = Date.now();
  const up = run(UP);
  assert.equal(up.status, 0, up.out);
  console.log(`# fleet-up.sh: ${Date.now() - t0} ms`);
  const started = pids();
  assert.deepEqual(started.map((p) => p.name).sort(),
    ['cp-1', 'cp-2', 'dp-1', 'dp-2', 'dp-3', 'etcd', 'mock-0', 'mock-1', 'postgres']);
  assert.ok(started.every((p) => alive(p.pid)), JSON.stringify(started));

  // The README's way to read it: `set -a; source fleet.env` (values are
  // quoted: the conninfo has spaces).
  const names = ['LLMGW_ADMIN_URL', 'LLMGW_ADMIN_URLS', 'LLMGW_ADMIN_TOKEN', 'LLMGW_API_KEY', 'LLMGW_BASE_URLS',
    'LLMGW_BASE_URL', 'LLMGW_MODEL', 'LLMGW_ETCD_ENDPOINTS', 'LLMGW_DATABASE_URL'];
  const src = spawnSync('bash', ['-c', `set -a; source "$1"; set +a; for n in ${names.join(' ')}; do printf '%s=%s\\n' "$n" "\${!n}"; done`,
    'x', path.join(state, 'fleet.env')], { encoding: 'utf8', env: {} });
  assert.equal(src.status, 0, src.stderr);
  const lines = src.stdout.trim().split('\n');
  const conf = Object.fromEntries(lines.slice(0, names.length).map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
  const port = Number(env.LLMGW_FLEET_PORT);
  assert.equal(conf.LLMGW_DATABASE_URL, `host=127.0.0.1 port=${port + 50} user=postgres dbname=postgres connect_timeout=5`);
  assert.equal(conf.LLMGW_ADMIN_TOKEN, fs.readFileSync(path.join(state, 'admin.token'), 'utf8').trim());
  assert.equal(conf.LLMGW_API_KEY, fs.readFileSync(path.join(state, 'api.key'), 'utf8').trim());
  assert.equal(conf.LLMGW_ETCD_ENDPOINTS, `http://127.0.0.1:${port + 40}`);
  const bases = conf.LLMGW_BASE_URLS.split(',');
  assert.equal(bases.length, 3);
  for (const [i, base] of bases.entries()) {
    const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: conf.LLMGW_API_KEY, maxRetries: 0, timeout: 20_000 });
    for (const model of ['fast', 'smart']) {
      const r = await client.chat.completions.create({ model, messages: [{ role: 'user', content: `hello ${i}` }] });
      assert.ok(r.choices[0].message.content.length > 0, JSON.stringify(r));
      assert.equal(r.model, model === 'fast' ? 'mock-gpt' : 'mock-claude');
    }
  }
  // Both control planes: one leader, the same for both, etcd up, both members.
  const views = [];
  for (const url of conf.LLMGW_ADMIN_URLS.split(',')) {
    const port = Number(new URL(url).port);
    const r = await h.request(port, { method: 'GET', path: '/v1/admin/health', headers: { authorization: `Bearer ${conf.LLMGW_ADMIN_TOKEN}` } });
    assert.equal(r.status, 200, r.text);
    views.push(r.json);
  }
  assert.equal(views.filter((v) => v.leader.self).length, 1, JSON.stringify(views.map((v) => v.leader)));
  assert.equal(views[0].leader.id, views[1].leader.id);
  for (const v of views) {
    assert.equal(v.etcd.state, 'up');
    assert.deepEqual(v.members.map((m) => m.id), ['cp-1', 'cp-2']);
  }

  const t1 = Date.now();
  const down = run(DOWN);
  assert.equal(down.status, 0, down.out);
  console.log(`# fleet-down.sh: ${Date.now() - t1} ms`);
  const left = started.filter((p) => alive(p.pid));
  assert.deepEqual(left, [], `still running after fleet-down.sh:\n${down.out}`);
  assert.deepEqual(pids(), [], 'no pid file left');
  assert.ok(!/killed/.test(down.out), `every process stopped on its signal:\n${down.out}`);
  // Their logs (a sanitizer build reports at exit): nothing to report.
  for (const f of fs.readdirSync(state).filter((n) => n.endsWith('.log'))) {
    const text = fs.readFileSync(path.join(state, f), 'utf8');
    assert.ok(!/ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:/.test(text), `${f}:\n${text.slice(-4000)}`);
  }
});
