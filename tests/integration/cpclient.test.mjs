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

// Delta Watch (proto/README.md, docs/dataplane.md "Control plane"): after
// its first whole document a data plane is sent only what changed; older
// watchers, new ones and those behind get whole documents; a delta that
// does not apply makes the data plane watch again and get the whole one.
describe('delta watch', () => {
  let cp;
  let gw;
  const cache = () => path.join(dir, 'cache-delta.json');
  const route = (order) => ({ name: 'fast', strategy: 'ordered', entries: order.map((n) => ({ provider: n, model: 'mock-gpt' })) });
  const delta = (version, changes) => ({ version, base_version: version - 1, ...changes });
  // The data plane's "snapshot loaded" lines from the control plane, parsed.
  const loaded = (g, from = 0) => g.proc.stderrLines.slice(from).map(h.tryParseJson)
    .filter((j) => j && j.msg === 'snapshot loaded' && j.source === 'control_plane');
  const cacheVersion = () => {
    try {
      return JSON.parse(fs.readFileSync(cache(), 'utf8')).version;
    } catch {
      return undefined;
    }
  };

  before(async () => {
    cp = await h.startSnapshotServer({ snapshot: doc(1) });
    // The test control plane stores no ledger row: an exit waits for none
    // (so it comes before the cache's timer).
    gw = await h.startGatewayCP({
      controlPlane: cp.target, cache: cache(), cacheKey: CACHE_KEY, replicaId: 'dp-delta', args: ['--ledger-flush-timeout-ms', '0'],
    });
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 1, 'dp-delta acks version 1');
  });

  test('after the whole document, only deltas; acked per version; the cache follows, debounced', T, async () => {
    assert.deepEqual(loaded(gw).map((j) => [j.version, j.delta]), [[1, false]]);
    await cp.pushDelta(doc(2, ['beta', 'alpha']), delta(2, { routes: { fast: route(['beta', 'alpha']) } }));
    await waitServedBy(gw, 'beta');
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 2, 'dp-delta acks version 2');
    // A removal: the route "local" goes.
    const gone = doc(3, ['beta', 'alpha']);
    gone.routes = gone.routes.filter((r) => r.name !== 'local');
    assert.equal((await chat(gw, 'local')).status, 200);
    await cp.pushDelta(gone, delta(3, { routes: { local: null } }));
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 3, 'dp-delta acks version 3');
    assert.notEqual((await chat(gw, 'local')).status, 200, 'the route a delta removed is gone');
    assert.equal((await chat(gw)).headers['x-llmgw-provider'], 'beta');
    assert.deepEqual(loaded(gw).map((j) => [j.version, j.delta, j.base_version]),
      [[1, false, undefined], [2, true, 1], [3, true, 2]]);
    const st = await cp.stats();
    assert.equal(st.deltas_sent, 2, JSON.stringify(st));
    assert.equal(st.documents_sent, 1, JSON.stringify(st));
    // The cache is written from the snapshot served, not on every delta,
    // but within its interval (5 s); sealed like any other.
    await h.waitFor(() => cacheVersion() === 3, { timeoutMs: 10_000, what: 'the cache at version 3' });
    const text = fs.readFileSync(cache(), 'utf8');
    assert.ok(!text.includes(CRED_A) && !text.includes(CRED_B), 'no plaintext credential in the cache');
    assert.equal(JSON.parse(text).llmgw_cache.credentials, 'sealed');
    assert.ok(!JSON.parse(text).routes.some((r) => r.name === 'local'));
  });

  test('an older data plane (no accepts_delta) gets only whole documents, packed once for all', T, async () => {
    const olds = [
      await h.startWatchClient({ target: cp.target, replicaId: 'old-one' }),
      await h.startWatchClient({ target: cp.target, replicaId: 'old-two' }),
    ];
    for (const o of olds) await h.waitFor(() => o.snapshots().some((m) => m.version === 3), { what: 'version 3 whole' });
    const before = await cp.stats();
    await cp.pushDelta(doc(4, ['alpha', 'beta']), delta(4, { routes: { fast: route(['alpha', 'beta']) } }));
    await waitServedBy(gw, 'alpha');
    for (const o of olds) {
      await h.waitFor(() => o.snapshots().some((m) => m.version === 4), { what: 'version 4 whole' });
      assert.ok(o.snapshots().every((m) => !m.delta && m.document_bytes > 0 && m.base_version === 0), JSON.stringify(o.snapshots()));
    }
    assert.equal(loaded(gw).at(-1).delta, true, 'the new data plane got it as a delta');
    const after = await cp.stats();
    assert.equal(after.deltas_sent - before.deltas_sent, 1, JSON.stringify([before, after]));
    assert.equal(after.documents_sent - before.documents_sent, 2, JSON.stringify([before, after]));
    assert.equal(after.documents_packed - before.documents_packed, 1, 'one document packed for both');
    for (const o of olds) await o.proc.stop();
  });

  test('a restarted data plane gets a whole document, then deltas; what deltas changed is cached at exit', T, async () => {
    // Two deltas in a row: the second one is left for the cache's timer
    // (one write per interval), and the exit writes it.
    await cp.pushDelta(doc(5, ['beta', 'alpha']), delta(5, { routes: { fast: route(['beta', 'alpha']) } }));
    await cp.pushDelta(doc(6, ['alpha', 'beta']), delta(6, { routes: { fast: route(['alpha', 'beta']) } }));
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 6);
    await gw.proc.stop();
    assert.equal(cacheVersion(), 6, 'written at exit');
    gw = await h.startGatewayCP({ controlPlane: cp.target, cache: cache(), cacheKey: CACHE_KEY, replicaId: 'dp-delta' });
    assert.equal(gw.listening.source, 'cache');
    await h.waitFor(() => loaded(gw).length >= 1, { what: 'the whole document' });
    await cp.pushDelta(doc(7, ['beta', 'alpha']), delta(7, { routes: { fast: route(['beta', 'alpha']) } }));
    await waitServedBy(gw, 'beta');
    assert.deepEqual(loaded(gw).map((j) => [j.version, j.delta]), [[6, false], [7, true]]);
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 7);
  });

  test('a delta whose base is not the version served: the data plane watches again and recovers', T, async () => {
    // Version 8 is refused: the data plane serves 7, while the control
    // plane's last send to it was 8, so the delta 8 -> 9 reaches it.
    const bad = doc(8, ['alpha']);
    bad.routes[0].entries.push({ provider: 'nosuch', model: 'm' });
    await cp.push(bad);
    await h.waitFor(() => gw.proc.stderrText.includes('pushed snapshot refused'), { what: 'the refusal' });
    const mark = gw.proc.stderrLines.length;
    await cp.pushDelta(doc(9, ['alpha', 'beta']), delta(9, { routes: { fast: route(['alpha', 'beta']) } }));
    await waitServedBy(gw, 'alpha');
    const lines = gw.proc.stderrLines.slice(mark).map(h.tryParseJson).filter(Boolean);
    const miss = lines.find((j) => j.msg === 'pushed snapshot delta not applied; asking for the whole document');
    assert.ok(miss, gw.proc.stderrLines.slice(mark).join('\n'));
    assert.match(miss.error, /base_version 8 is not the version served, 7/);
    assert.deepEqual(loaded(gw, mark).map((j) => [j.version, j.delta]), [[9, false]], 'the whole document');
    assert.ok(!lines.some((j) => j.msg === 'control plane: stream ended; reconnecting'), 'the Report stream stays');
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 9);
    // Then deltas again.
    await cp.pushDelta(doc(10, ['beta', 'alpha']), delta(10, { routes: { fast: route(['beta', 'alpha']) } }));
    await waitServedBy(gw, 'beta');
    assert.deepEqual(loaded(gw, mark).map((j) => [j.version, j.delta]), [[9, false], [10, true]]);
  });

  test('a delta the data plane cannot apply: refused, then the whole document', T, async () => {
    const mark = gw.proc.stderrLines.length;
    await cp.pushDelta(doc(11, ['alpha', 'beta']), delta(11, { routes: { fast: { name: 'fast', entries: [{ provider: 'nosuch', model: 'm' }] } } }));
    await waitServedBy(gw, 'alpha');
    const miss = gw.proc.stderrLines.slice(mark).map(h.tryParseJson)
      .find((j) => j && j.msg === 'pushed snapshot delta not applied; asking for the whole document');
    assert.ok(miss, gw.proc.stderrLines.slice(mark).join('\n'));
    assert.match(miss.error, /nosuch/);
    assert.deepEqual(loaded(gw, mark).map((j) => [j.version, j.delta]), [[11, false]]);
    await cp.waitAck((a) => a.replica_id === 'dp-delta' && a.version === 11);
  });

  test('a watcher whose send is in flight catches up from the recent deltas, or gets the whole document', T, async () => {
    // A document large enough that the server's send waits for the
    // client to read (flow control), so publishes pile up behind it.
    const big = (version) => ({ version, padding: 'x'.repeat(8 << 20) });
    const lag = await h.startSnapshotServer({ snapshot: big(1) });
    const gate = path.join(h.makeTmpDir(), 'gate');
    const w = await h.startWatchClient({ target: lag.target, acceptsDelta: true, gate });
    for (let v = 2; v <= 4; v++) await lag.pushDelta(big(v), { version: v, base_version: v - 1 });
    fs.writeFileSync(gate, '');
    await h.waitFor(() => w.snapshots().some((m) => m.version === 4), { what: 'version 4' });
    assert.deepEqual(w.snapshots().map((m) => [m.version, m.delta]), [[1, false], [2, true], [3, true], [4, true]]);
    // Further behind than the ring of recent deltas (8): the whole document.
    const gate2 = path.join(h.makeTmpDir(), 'gate');
    const w2 = await h.startWatchClient({ target: lag.target, acceptsDelta: true, gate: gate2 });
    for (let v = 5; v <= 14; v++) await lag.pushDelta(big(v), { version: v, base_version: v - 1 });
    fs.writeFileSync(gate2, '');
    await h.waitFor(() => w2.snapshots().some((m) => m.version === 14), { what: 'version 14' });
    assert.deepEqual(w2.snapshots().map((m) => [m.version, m.delta]), [[4, false], [14, false]]);
    await w.proc.stop();
    await w2.proc.stop();
    await lag.proc.stop();
  });

  after(async () => {
    await gw?.proc.stop();
    await cp?.proc.stop();
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
