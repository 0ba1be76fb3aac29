// The data plane fed by a control plane over gRPC (--control-plane): pushed
// snapshots, acks, refusal of bad documents, the snapshot cache, /readyz.
// tests/cpfake/llmgw-snapshot-server stands in for llmgw-controlplane: it
// serves a JSON file over Watch through the same cp_grpc module.
// Contracts: docs/dataplane.md ("Control plane", "Snapshot cache").

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [{ role: 'user', content: 'hello there' }];
// Inline credentials as the control plane pushes them, resolved.
const CRED_A = `alpha-secret-${randomBytes(8).toString('hex')}`;
const CRED_B = `beta-secret-${randomBytes(8).toString('hex')}`;
const CACHE_KEY = randomBytes(32).toString('hex');

let mock;
let fake;
let fakePort;
let dir;

function doc(version, order = ['alpha', 'beta'], extra = {}) {
  const p = (name, credential) => ({
    name, driver: 'openai', base_url: mock.v1, credential_ref: `secret/${name}`, credential,
    headers: {}, enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000,
  });
  return {
    version,
    providers: [
      p('alpha', CRED_A), p('beta', CRED_B),
      // A keyless provider (a local model server, say): serves without a credential.
      { name: 'open', driver: 'openai', base_url: mock.v1 },
    ],
    routes: [
      { name: 'fast', strategy: 'ordered', entries: order.map((n) => ({ provider: n, model: 'mock-gpt' })) },
      { name: 'local', entries: [{ provider: 'open', model: 'mock-gpt' }] },
    ],
    keys: [{ id: 'key_demo', hash: h.DEMO_KEY_HASH, status: 'active', team: 'demo' }],
    ...extra,
  };
}

function chat(gw, model = 'fast') {
  return h.request(gw.port, { body: { model, messages: MESSAGES }, headers: { ...h.AUTH } });
}

async function readyz(gw) {
  return h.request(gw.port, { method: 'GET', path: '/readyz' });
}

/** Polls until the gateway's route `fast` is served by provider; returns the ms it took. */
async function waitServedBy(gw, provider, timeoutMs = 5000) {
  const t0 = Date.now();
  await h.waitFor(async () => {
    const r = await chat(gw);
    return r.status === 200 && r.headers['x-llmgw-provider'] === provider;
  }, { timeoutMs, intervalMs: 20, what: `route fast served by ${provider}` });
  return Date.now() - t0;
}

before(async () => {
  h.requireBinaries();
  dir = h.makeTmpDir();
  mock = await h.startMock();
  fake = await h.startSnapshotServer({ snapshot: doc(1) });
  fakePort = fake.port;
});

after(async () => {
  await h.stopAll();
});

describe('a data plane fed by the control plane', () => {
  let gw1;
  let gw2;
  const cache1 = () => path.join(dir, 'cache1.json');
  const cache2 = () => path.join(dir, 'cache2.json');

  test('not ready while no snapshot is loaded (control plane unreachable, no cache)', T, async () => {
    const gw = await h.startGatewayCP({ controlPlane: `127.0.0.1:${await h.deadPort()}` });
    const r = await readyz(gw);
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.status, 'not_ready');
    const c = await chat(gw);
    assert.equal(c.status, 503, c.text);
    assert.equal(c.json.error.code, 'not_ready');
    const hz = await h.request(gw.port, { method: 'GET', path: '/healthz' });
    assert.equal(hz.status, 200, 'alive, though not ready');
    await gw.proc.stop();
  });

  test('serves chat through a pushed snapshot carrying inline credentials; /readyz; ack', T, async () => {
    gw1 = await h.startGatewayCP({ controlPlane: fake.target, cache: cache1(), cacheKey: CACHE_KEY, replicaId: 'dp-one' });
    await h.waitFor(async () => (await readyz(gw1)).status === 200, { what: '/readyz 200' });
    const r = await readyz(gw1);
    assert.deepEqual(r.json, { status: 'ready', snapshot_version: 1, source: 'control_plane', auth: 'keys', keys: 1 });
    const c = await chat(gw1);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.headers['x-llmgw-provider'], 'alpha');
    await fake.waitAck((a) => a.replica_id === 'dp-one' && a.version === 1, 'dp-one acks version 1');
    assert.ok(!gw1.proc.stderrText.includes(CRED_A), 'the credential never reaches a log');
  });

  test('a new version is served within a second and acknowledged', T, async () => {
    const t0 = Date.now();
    await fake.push(doc(2, ['beta', 'alpha']));
    await waitServedBy(gw1, 'beta');
    const took = Date.now() - t0;
    assert.ok(took < 1000, `the new route order took ${took} ms to be served`);
    await fake.waitAck((a) => a.replica_id === 'dp-one' && a.version === 2, 'dp-one acks version 2');
    assert.equal((await readyz(gw1)).json.snapshot_version, 2);
  });

  test('an invalid pushed document is refused and the last good one keeps serving', T, async () => {
    const bad = doc(3, ['alpha']);
    bad.routes[0].entries.push({ provider: 'nosuch', model: 'm' });
    await fake.push(bad);
    await h.waitFor(() => gw1.proc.stderrText.includes('pushed snapshot refused'), { what: 'the refusal log line' });
    const line = gw1.proc.stderrLines.find((l) => l.includes('pushed snapshot refused'));
    assert.match(line, /routes\[0\]\.entries\[1\]\.provider/, 'the reason names the field');
    assert.ok(!line.includes(CRED_A), 'never the document');
    assert.equal((await readyz(gw1)).json.snapshot_version, 2);
    const c = await chat(gw1);
    assert.equal(c.headers['x-llmgw-provider'], 'beta', 'still version 2');
    assert.ok(!fake.acks().some((a) => a.version === 3), 'a refused version is never acknowledged');
    // Not JSON at all (published as version 4): refused too, and said so without quoting it.
    await fake.push(`{"version":4, "providers": [{"credential":"${CRED_A}"`);
    await h.waitFor(() => gw1.proc.stderrLines.some((l) => l.includes('not JSON')), { what: 'the not-JSON refusal' });
    assert.ok(!gw1.proc.stderrText.includes(CRED_A), 'never the document');
    assert.equal((await readyz(gw1)).json.snapshot_version, 2);
    // The next good version is served.
    await fake.push(doc(5, ['beta', 'alpha']));
    await h.waitFor(async () => (await readyz(gw1)).json.snapshot_version === 5, { what: 'version 5' });
    assert.equal((await chat(gw1)).headers['x-llmgw-provider'], 'beta');
  });

  test('two data planes against one control plane both get updates', T, async () => {
    gw2 = await h.startGatewayCP({ controlPlane: fake.target, cache: cache2(), replicaId: 'dp-two' });
    await fake.waitAck((a) => a.replica_id === 'dp-two' && a.version === 5, 'dp-two acks version 5');
    await fake.push(doc(6, ['alpha', 'beta']));
    await waitServedBy(gw1, 'alpha');
    await waitServedBy(gw2, 'alpha');
    await fake.waitAck((a) => a.replica_id === 'dp-one' && a.version === 6);
    await fake.waitAck((a) => a.replica_id === 'dp-two' && a.version === 6);
    await h.waitFor(() => gw2.proc.stderrText.includes('without credentials'), { what: 'the no-cache-key warning' });
  });

  test('the control plane going away does not stop serving', T, async () => {
    await fake.proc.stop();
    for (const gw of [gw1, gw2]) {
      const c = await chat(gw);
      assert.equal(c.status, 200, c.text);
      assert.equal(c.headers['x-llmgw-provider'], 'alpha');
      assert.equal((await readyz(gw)).status, 200);
    }
    await h.sleep(300);
    assert.equal((await chat(gw1)).status, 200);
  });

  test('restarted while the control plane is down, it serves from the encrypted cache', T, async () => {
    const text = fs.readFileSync(cache1(), 'utf8');
    assert.ok(!text.includes(CRED_A) && !text.includes(CRED_B), 'no plaintext credential in the cache');
    assert.equal(fs.statSync(cache1()).mode & 0o777, 0o600);
    assert.equal(JSON.parse(text).llmgw_cache.credentials, 'sealed');
    await gw1.proc.stop();
    gw1 = await h.startGatewayCP({ controlPlane: fake.target, cache: cache1(), cacheKey: CACHE_KEY, replicaId: 'dp-one' });
    assert.equal(gw1.listening.source, 'cache');
    assert.deepEqual((await readyz(gw1)).json, { status: 'ready', snapshot_version: 6, source: 'cache', auth: 'keys', keys: 1 });
    const c = await chat(gw1);
    assert.equal(c.status, 200, c.text);
    assert.equal(c.headers['x-llmgw-provider'], 'alpha', 'the sealed credential opened');
  });

  test('without LLMGW_CACHE_KEY the cache holds no credential, and says so', T, async () => {
    const text = fs.readFileSync(cache2(), 'utf8');
    assert.ok(!text.includes(CRED_A) && !text.includes(CRED_B), 'no plaintext credential in the cache');
    assert.equal(JSON.parse(text).llmgw_cache.credentials, 'omitted');
    await gw2.proc.stop();
    gw2 = await h.startGatewayCP({ controlPlane: fake.target, cache: cache2(), replicaId: 'dp-two' });
    assert.deepEqual((await readyz(gw2)).json, { status: 'ready', snapshot_version: 6, source: 'cache', auth: 'keys', keys: 1 });
    // Providers whose credential was left out are skipped, honestly.
    const c = await chat(gw2);
    assert.equal(c.status, 503, c.text);
    assert.equal(c.json.error.code, 'no_healthy_target');
    assert.ok(c.json.error.candidates.every((k) => k.reason === 'no_credential'), c.text);
    // A keyless provider serves from the cache.
    const l = await chat(gw2, 'local');
    assert.equal(l.status, 200, l.text);
  });

  test('a cache written under one key is not served under another, nor once changed', T, async () => {
    const gw = await h.startGatewayCP({
      controlPlane: fake.target, cache: cache1(), cacheKey: randomBytes(32).toString('base64'),
    });
    assert.equal((await readyz(gw)).status, 503);
    assert.equal((await chat(gw)).status, 503);
    await h.waitFor(() => gw.proc.stderrText.includes('fails its integrity check'), { what: 'says why' });
    await gw.proc.stop();
    // The right key, but a provider pointed elsewhere by whoever can write
    // the file: its credential would follow the base_url. Not served.
    const c = JSON.parse(fs.readFileSync(cache1(), 'utf8'));
    c.providers[0].base_url = 'http://127.0.0.1:9/v1';
    const moved = path.join(dir, 'cache-moved.json');
    fs.writeFileSync(moved, JSON.stringify(c), { mode: 0o600 });
    const gw2b = await h.startGatewayCP({ controlPlane: fake.target, cache: moved, cacheKey: CACHE_KEY });
    assert.equal((await readyz(gw2b)).status, 503);
    await h.waitFor(() => gw2b.proc.stderrText.includes('fails its integrity check'), { what: 'says why' });
    await gw2b.proc.stop();
  });

  test('a cache older than --snapshot-cache-max-age-ms is not served at start', T, async () => {
    // The control plane is still down: a stale cache must not keep serving
    // revoked keys and removed routes; the data plane waits instead. (The
    // cache is aged by hand, so these data planes run without the key: with
    // it, any hand edit fails the cache's MAC, the test above.)
    const c = JSON.parse(fs.readFileSync(cache1(), 'utf8'));
    assert.equal(typeof c.llmgw_cache.received_ms, 'number');
    assert.ok(Math.abs(Date.now() - c.llmgw_cache.received_ms) < 10 * 60_000, 'received_ms is wall-clock ms');
    const aged = path.join(dir, 'cache-aged.json');
    c.llmgw_cache.received_ms -= 8 * 24 * 3600 * 1000; // past the 7-day default
    fs.writeFileSync(aged, JSON.stringify(c), { mode: 0o600 });
    const gw = await h.startGatewayCP({ controlPlane: fake.target, cache: aged });
    const r = await readyz(gw);
    assert.equal(r.status, 503, r.text);
    assert.equal(r.json.status, 'not_ready');
    assert.equal((await chat(gw)).status, 503);
    await h.waitFor(() => gw.proc.stderrText.includes('snapshot cache too old'), { what: 'the too-old log line' });
    await gw.proc.stop();
    // A short maximum age makes a fresh-enough cache stale too.
    const gw3 = await h.startGatewayCP({
      controlPlane: fake.target, cache: cache1(),
      args: ['--snapshot-cache-max-age-ms', '1'],
    });
    assert.equal((await readyz(gw3)).status, 503);
    await h.waitFor(() => gw3.proc.stderrText.includes('snapshot cache too old'), { what: 'the too-old log line' });
    await gw3.proc.stop();
    // A cache without the timestamp (written before it was recorded) is not trusted.
    delete c.llmgw_cache.received_ms;
    fs.writeFileSync(aged, JSON.stringify(c), { mode: 0o600 });
    const gw4 = await h.startGatewayCP({ controlPlane: fake.target, cache: aged });
    assert.equal((await readyz(gw4)).status, 503);
    await h.waitFor(() => gw4.proc.stderrText.includes('received_ms'), { what: 'the missing-timestamp log line' });
    await gw4.proc.stop();
    // 0 lifts the limit: even the 8-day-old cache serves.
    c.llmgw_cache.received_ms = Date.now() - 8 * 24 * 3600 * 1000;
    fs.writeFileSync(aged, JSON.stringify(c), { mode: 0o600 });
    const gw5 = await h.startGatewayCP({
      controlPlane: fake.target, cache: aged, args: ['--snapshot-cache-max-age-ms', '0'],
    });
    assert.equal((await readyz(gw5)).json.source, 'cache');
    await gw5.proc.stop();
  });

  test('the control plane back on its address: the data plane reconnects and updates', T, async () => {
    fake = await h.startSnapshotServer({ snapshot: doc(7, ['beta', 'alpha']), port: fakePort });
    await waitServedBy(gw1, 'beta', 15_000);
    await fake.waitAck((a) => a.replica_id === 'dp-one' && a.version === 7);
    assert.deepEqual((await readyz(gw1)).json, { status: 'ready', snapshot_version: 7, source: 'control_plane', auth: 'keys', keys: 1 });
    // Pushed credentials replace the ones the cache had left out.
    await waitServedBy(gw2, 'beta', 15_000);
  });

  test('/readyz turns 503 while draining', T, async () => {
    // A slow answer keeps the drain open while /readyz is asked on a kept-alive connection.
    const agent = new (await import('node:http')).Agent({ keepAlive: true, maxSockets: 1 });
    assert.equal((await h.request(gw2.port, { method: 'GET', path: '/readyz', agent })).status, 200);
    gw2.proc.signal('SIGTERM');
    await h.waitFor(async () => {
      try {
        return (await h.request(gw2.port, { method: 'GET', path: '/readyz', agent })).status === 503;
      } catch {
        return true; // the connection closed: not ready either
      }
    }, { what: '/readyz 503 during drain' });
    agent.destroy();
    await gw2.proc.waitExit(h.STOP_GRACE_MS);
  });
});

describe('file mode keeps its rules', () => {
  test('a snapshot file with an inline credential is refused, naming the field', T, async () => {
    const d = h.makeTmpDir();
    const f = path.join(d, 'snap.json');
    const s = doc(1);
    fs.writeFileSync(f, JSON.stringify(s));
    const p = new h.ManagedProcess('dataplane', h.DATAPLANE_BIN, ['--snapshot', f, '--listen', '127.0.0.1:0']);
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 2);
    assert.match(p.stderrText, /providers\[0\]\.credential: inline credentials are refused/);
    assert.ok(!p.stderrText.includes(CRED_A));
  });

  test('--snapshot and --control-plane together are refused', T, async () => {
    const p = new h.ManagedProcess('dataplane', h.DATAPLANE_BIN, ['--snapshot', '/nonexistent', '--control-plane', '127.0.0.1:1']);
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 2);
    assert.match(p.stderrText, /mutually exclusive/);
  });
});
