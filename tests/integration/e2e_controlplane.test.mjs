// End to end: PostgreSQL + llmgw-controlplane + two data planes fed by it
// over gRPC + the mock provider. Configuration is written through the admin
// API where this branch has it, else with SQL as the API writes it
// (cpconfig.mjs). Then: a chat request through each data plane; a built-in
// secret reaches the upstream as the provider's credential; a new route
// order reaches every data plane and both acknowledge it
// (/v1/admin/snapshot); with the control plane stopped both keep serving; a
// data plane restarted meanwhile serves from its snapshot cache; the
// restarted control plane gets both back. Contracts: docs/controlplane.md
// ("Snapshots"), docs/dataplane.md ("Control plane").

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { makeCertSet } from './certs.mjs';
import { Config, masterKey } from './cpconfig.mjs';

const T = { timeout: 90_000 };
const KEY = masterKey();
const OTHER_KEY = masterKey();
const CACHE_KEY = randomBytes(32).toString('hex');
const UPSTREAM_SECRET = `sk-upstream-${randomBytes(10).toString('hex')}`;

let pg;
let cp;
let cfg;
let mock;
let grpcPort;
let dir;
let capture;
const dps = {}; // replica id -> Gateway

// An OpenAI-compatible upstream that records the Authorization it receives.
function startCapture() {
  const seen = [];
  const srv = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      seen.push(req.headers.authorization ?? null);
      const answer = JSON.stringify({
        id: 'chatcmpl-capture', object: 'chat.completion', created: 1, model: 'cap-model',
        choices: [{ index: 0, message: { role: 'assistant', content: 'captured' }, finish_reason: 'stop' }],
        usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
      });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(answer) });
      res.end(answer);
    });
  });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, seen, port: srv.address().port })));
}

async function startCP() {
  return h.startControlPlane({
    pg, env: { LLMGW_MASTER_KEY: KEY.hex }, args: ['--grpc-listen', `127.0.0.1:${grpcPort}`],
  });
}

async function startDP(id) {
  const g = await h.startGatewayCP({
    controlPlane: `127.0.0.1:${grpcPort}`,
    cache: path.join(dir, `${id}.cache.json`),
    cacheKey: id === 'dp-a' ? CACHE_KEY : undefined, // dp-b keeps its cache without credentials
    replicaId: id,
  });
  dps[id] = g;
  return g;
}

// The API key the tests create through the admin API (its plaintext is
// shown once, at creation).
let apiKey;
const chat = (g, model = 'fast') => h.request(g.port, {
  headers: { authorization: `Bearer ${apiKey}` }, body: { model, messages: [{ role: 'user', content: 'hello' }] },
});
const readyz = async (g) => (await h.request(g.port, { method: 'GET', path: '/readyz' })).json;
const snapshot = async () => {
  const r = await cp.admin('GET', '/v1/admin/snapshot');
  assert.equal(r.status, 200, r.text);
  return r.json;
};

async function waitServedBy(g, provider, model = 'fast') {
  await h.waitFor(async () => {
    const r = await chat(g, model);
    return r.status === 200 && r.headers['x-llmgw-provider'] === provider;
  }, { timeoutMs: 15_000, intervalMs: 20, what: `${model} served by ${provider} on ${g.url}` });
}

async function waitAcked(version, ids = ['dp-a', 'dp-b']) {
  return h.waitFor(async () => {
    const s = await snapshot();
    const ok = ids.every((id) => s.replicas.some((r) => r.replica_id === id && r.acked_version >= version && r.connected));
    return ok ? s : null;
  }, { timeoutMs: 15_000, what: `replicas ${ids} acking version ${version}` });
}

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  dir = h.makeTmpDir();
  pg = await h.startPostgres();
  mock = await h.startMock();
  capture = await startCapture();
  grpcPort = await h.deadPort();
  cp = await startCP();
  cfg = new Config(cp, pg, KEY);
});

after(async () => {
  capture?.srv.close();
  await h.stopAll();
});

describe('control plane + two data planes', () => {
  test('the daemon reports its bound gRPC port and refuses to start without TLS or --grpc-insecure', T, async () => {
    assert.equal(cp.listening.grpc_port, grpcPort);
    assert.equal(cp.listening.grpc_tls, false);
    const p = new h.ManagedProcess('controlplane-notls', h.CONTROLPLANE_BIN, ['serve', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0'],
      { env: { ...process.env, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_GRPC_INSECURE: '' } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 2, p.describe());
    assert.match(p.stderrText, /--grpc-tls-cert.*--grpc-insecure/s);
  });

  test('configure: provider, secret, route and key; a chat request through each data plane', T, async () => {
    await cfg.secret('capture-key', UPSTREAM_SECRET);
    await cfg.secret('wrong-key', 'never-opens', OTHER_KEY); // sealed under another master key (SQL)
    await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mock.v1 });
    await cfg.provider({ name: 'beta', driver: 'openai', base_url: mock.v1 });
    await cfg.provider({ name: 'keyed', driver: 'openai', base_url: `http://127.0.0.1:${capture.port}/v1`, credential_ref: 'capture-key' });
    await cfg.provider({ name: 'broken', driver: 'openai', base_url: mock.v1, credential_ref: 'wrong-key' });
    await cfg.route('fast', [{ provider: 'alpha', model: 'mock-gpt' }, { provider: 'beta', model: 'mock-gpt' }]);
    await cfg.route('captured', [{ provider: 'keyed', model: 'cap-model' }]);
    apiKey = await cfg.apiKey('key_e2e');
    const v = cfg.version();

    await startDP('dp-a');
    await startDP('dp-b');
    for (const g of Object.values(dps)) {
      await h.waitFor(async () => (await readyz(g))?.snapshot_version === v, { what: `${g.url} serving version ${v}` });
      assert.equal((await readyz(g)).source, 'control_plane');
      const r = await chat(g);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-llmgw-provider'], 'alpha');
      const n = await chat(g, 'nosuchroute');
      assert.equal(n.status, 404, 'only configured routes');
      const bad = await h.request(g.port, { headers: { authorization: 'Bearer nope' }, body: { model: 'fast', messages: [{ role: 'user', content: 'x' }] } });
      assert.equal(bad.status, 401, 'only configured keys');
    }
    const s = await waitAcked(v);
    assert.equal(s.version, v);
    assert.equal(s.published_version, v);
    assert.equal(s.last_error, null);
    assert.equal(typeof s.built_at_ms, 'number');
    // The provider whose secret does not open goes out without a credential, and says why.
    assert.equal(s.unresolved.length, 1, JSON.stringify(s.unresolved));
    assert.equal(s.unresolved[0].provider, 'broken');
    assert.equal(s.unresolved[0].credential_ref, 'wrong-key');
    assert.match(s.unresolved[0].reason, /does not open under the master key/);
  });

  test('a built-in secret reaches the upstream as the provider\'s credential, from each data plane', T, async () => {
    for (const g of Object.values(dps)) {
      const before = capture.seen.length;
      const r = await chat(g, 'captured');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-llmgw-provider'], 'keyed');
      assert.equal(capture.seen[before], `Bearer ${UPSTREAM_SECRET}`);
    }
    for (const p of [cp.proc, ...Object.values(dps).map((g) => g.proc)]) {
      assert.ok(!p.stderrText.includes(UPSTREAM_SECRET) && !p.stdoutText.includes(UPSTREAM_SECRET), `${p.name}: never logged`);
    }
    assert.ok(!fs.readFileSync(path.join(dir, 'dp-a.cache.json'), 'utf8').includes(UPSTREAM_SECRET), 'sealed in the cache');
    assert.ok(!fs.readFileSync(path.join(dir, 'dp-b.cache.json'), 'utf8').includes(UPSTREAM_SECRET), 'omitted from the cache');
  });

  test('a new route order reaches every data plane, and both acknowledge it', T, async () => {
    await cfg.routeEntries('fast', [{ provider: 'beta', model: 'mock-gpt' }, { provider: 'alpha', model: 'mock-gpt' }]);
    const v = cfg.version();
    for (const g of Object.values(dps)) await waitServedBy(g, 'beta');
    const s = await waitAcked(v);
    assert.equal(s.version, v);
    for (const id of ['dp-a', 'dp-b']) {
      assert.equal(s.replicas.find((r) => r.replica_id === id).acked_version, v);
    }
  });

  test('after its first whole document a data plane gets each write as a delta: the control plane sends the same delta to both', T, async () => {
    const sent = async (kind) => {
      const r = await h.request(cp.port, { method: 'GET', path: '/metrics' });
      const m = r.text.match(new RegExp(`^llmgw_cp_watch_snapshots_sent_total\\{kind="${kind}"\\} (\\d+)`, 'm'));
      return m ? Number(m[1]) : 0;
    };
    const deltas0 = await sent('delta');
    const docs0 = await sent('document');
    const marks = Object.fromEntries(Object.entries(dps).map(([id, g]) => [id, g.proc.stderrLines.length]));
    /* Two writes: alpha first, then back to beta first (the later tests
     * expect beta). */
    for (const first of ['alpha', 'beta']) {
      const second = first === 'alpha' ? 'beta' : 'alpha';
      await cfg.routeEntries('fast', [{ provider: first, model: 'mock-gpt' }, { provider: second, model: 'mock-gpt' }]);
      const v = cfg.version();
      for (const g of Object.values(dps)) await waitServedBy(g, first);
      await waitAcked(v);
      for (const [id, g] of Object.entries(dps)) {
        const loaded = g.proc.stderrLines.slice(marks[id]).map(h.tryParseJson)
          .filter((j) => j && j.msg === 'snapshot loaded' && j.version === v);
        assert.equal(loaded.length, 1, g.proc.describe());
        assert.equal(loaded[0].delta, true, `${id} took version ${v} whole: ${JSON.stringify(loaded[0])}`);
      }
    }
    assert.equal(await sent('delta') - deltas0, 4); /* one per data plane and write */
    assert.equal(await sent('document') - docs0, 0);
  });

  test('a route\'s fallback_timeout_ms from the admin API bounds each data plane\'s pre-content phase', T, async () => {
    await cfg.api('POST', '/v1/admin/routes', {
      name: 'bounded', fallback_timeout_ms: 400,
      entries: [{ provider: 'alpha', model: 'bd-1#hang=1' }, { provider: 'beta', model: 'bd-2#ttfb_ms=1500' }],
    }, 201);
    const v = cfg.version();
    await waitAcked(v);
    for (const g of Object.values(dps)) {
      const t0 = Date.now();
      const r = await chat(g, 'bounded');
      const ms = Date.now() - t0;
      assert.equal(r.status, 504, r.text);
      assert.equal(r.json.error.code, 'timeout', r.text);
      assert.ok(ms >= 350 && ms < 1400, `${g.url}: gave up after ${ms} ms with the route's 400 ms`);
    }
  });

  test('with the control plane stopped, both data planes keep serving', T, async () => {
    const e = await cp.proc.stop();
    assert.equal(e.code, 0, cp.proc.describe());
    for (const g of Object.values(dps)) {
      const r = await chat(g);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-llmgw-provider'], 'beta');
      assert.equal((await readyz(g)).source, 'control_plane');
    }
  });

  test('a data plane restarted while the control plane is down serves from its cache', T, async () => {
    const v = Number((await readyz(dps['dp-a'])).snapshot_version);
    await dps['dp-a'].proc.stop();
    const g = await startDP('dp-a');
    await h.waitFor(async () => (await readyz(g))?.status === 'ready', { what: 'dp-a ready from its cache' });
    assert.deepEqual(await readyz(g), { status: 'ready', snapshot_version: v, source: 'cache', auth: 'keys', keys: 1 });
    const r = await chat(g);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'beta');
    // Its cache is sealed with LLMGW_CACHE_KEY: the credential survives the restart.
    const before = capture.seen.length;
    const c = await chat(g, 'captured');
    assert.equal(c.status, 200, c.text);
    assert.equal(capture.seen[before], `Bearer ${UPSTREAM_SECRET}`);
  });

  test('the restarted control plane gets both data planes back, and they take new versions', T, async () => {
    cp = await startCP();
    cfg.cp = cp;
    const v = cfg.version();
    const s = await waitAcked(v);
    assert.equal(s.version, v);
    assert.equal((await readyz(dps['dp-a'])).source, 'control_plane');
    await cfg.routeEntries('fast', [{ provider: 'alpha', model: 'mock-gpt' }]);
    for (const g of Object.values(dps)) await waitServedBy(g, 'alpha');
    await waitAcked(cfg.version());
  });

  // Every long-lived database connection of the control plane (the
  // snapshot builder's, the ledger writer's, the admin API's) comes back
  // after each way PostgreSQL goes away, logs the loss once, and a route
  // change made once the database is back reaches every data plane within
  // 2 s; a chat's ledger row lands (the ledger writer is back too).
  describe('PostgreSQL goes away and comes back', () => {
    const APP = 'llmgw-controlplane ';
    const CONNS = ['snapshot builder', 'ledger writer', 'admin api'];
    let next = 'beta'; // the route 'fast' is on alpha when this starts
    const logs = () => cp.proc.stderrText.split('\n').filter((l) => l.startsWith('{')).map((l) => {
      try { return JSON.parse(l); } catch { return {}; }
    });
    const count = (msg) => {
      const c = Object.fromEntries(CONNS.map((k) => [k, 0]));
      for (const l of logs()) if (l.msg === msg && l.connection in c) c[l.connection]++;
      return c;
    };
    const pgCtl = (...args) => {
      const ctl = path.join(pg.bin, 'pg_ctl');
      const a = ['-D', path.join(pg.dir, 'data'), ...args];
      if (process.getuid && process.getuid() === 0) execFileSync('runuser', ['-u', 'postgres', '--', ctl, ...a], { stdio: 'ignore' });
      else execFileSync(ctl, a, { stdio: 'ignore' });
      pg.pid = Number(fs.readFileSync(path.join(pg.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    };
    const terminate = (conns) => Number(pg.sql(`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
      WHERE application_name IN (${conns.map((c) => `'${APP}${c}'`).join(', ')})`));

    // disrupt() does the damage and resolves to the time the database was
    // back; lost lists the connections that must have noticed.
    async function outage(t, disrupt, lost) {
      const lostBefore = count('database connection lost; reconnecting');
      const backBefore = count('database connection restored');
      const back = await disrupt();
      const provider = next;
      next = next === 'beta' ? 'alpha' : 'beta';
      // A client of the admin API retries a 503 (the database unreachable).
      let v;
      await h.waitFor(async () => {
        const r = await cp.admin('PATCH', '/v1/admin/routes/fast', { entries: [{ provider, model: 'mock-gpt' }] });
        if (r.status === 200) return true;
        assert.equal(r.status, 503, r.text);
        return false;
      }, { intervalMs: 20, what: 'the route change accepted' });
      v = cfg.version();
      for (const g of Object.values(dps)) await waitServedBy(g, provider);
      const took = Date.now() - back;
      assert.ok(took <= 2000, `the route change reached every data plane ${took} ms after the database was back`);
      t.diagnostic(`route change on every data plane ${took} ms after the database was back`);
      await waitAcked(v);
      assert.equal((await snapshot()).database, 'ok');
      // A chat now, and its ledger row in PostgreSQL.
      const r = await chat(dps['dp-a']);
      assert.equal(r.status, 200, r.text);
      const id = r.headers['x-llmgw-ledger-id'];
      assert.ok(id);
      await h.waitFor(() => pg.sql(`SELECT count(*) FROM ledger WHERE attempt_id = '${id}'`) === '1', { what: `ledger row ${id}` });
      // Each connection that lost its backend said so once, and once that it was back.
      await h.waitFor(() => lost.every((c) => count('database connection restored')[c] === backBefore[c] + 1),
        { what: `${lost} restored` });
      const l = count('database connection lost; reconnecting');
      const b = count('database connection restored');
      for (const c of CONNS) {
        const want = lost.includes(c) ? 1 : 0;
        assert.equal(l[c] - lostBefore[c], want, `"${c}" logged the loss ${l[c] - lostBefore[c]} times`);
        assert.equal(b[c] - backBefore[c], want, `"${c}" logged its return ${b[c] - backBefore[c]} times`);
      }
      return r;
    }

    test('every connection is named in pg_stat_activity', T, async () => {
      const names = pg.sql(`SELECT DISTINCT application_name FROM pg_stat_activity WHERE application_name LIKE '${APP}%' ORDER BY 1`).split('\n');
      for (const c of CONNS) assert.ok(names.includes(APP + c), `${c} in ${names}`);
    });

    test('a restart (-m fast)', T, async (t) => {
      await outage(t, async () => {
        pgCtl('-m', 'fast', '-w', '-t', '30', 'restart');
        return Date.now();
      }, CONNS);
    });

    test('an immediate stop and start (-m immediate: no goodbye, crash recovery)', T, async (t) => {
      await outage(t, async () => {
        pgCtl('-m', 'immediate', '-w', '-t', '30', 'restart');
        return Date.now();
      }, CONNS);
    });

    test("the snapshot builder's backend terminated (pg_terminate_backend)", T, async (t) => {
      await outage(t, async () => {
        assert.equal(terminate(['snapshot builder']), 1);
        return Date.now();
      }, ['snapshot builder']);
    });

    test("the ledger writer's and the admin API's backends terminated", T, async (t) => {
      await outage(t, async () => {
        assert.equal(terminate(['ledger writer', 'admin api']), 2);
        return Date.now();
      }, ['ledger writer', 'admin api']);
    });

    test('stopped for 3 s, with writes and traffic meanwhile: the writes are refused, the traffic is served and recorded', T, async (t) => {
      let during;
      await outage(t, async () => {
        await pg.stop();
        const w = await cp.admin('PATCH', '/v1/admin/routes/fast', { entries: [{ provider: 'alpha', model: 'mock-gpt' }] });
        assert.equal(w.status, 503, w.text);
        assert.ok(w.json?.error, w.text);
        // The data planes serve from their snapshot; the row waits for the database.
        during = await chat(dps['dp-b']);
        assert.equal(during.status, 200, during.text);
        await h.sleep(3000);
        await pg.start();
        return Date.now();
      }, CONNS);
      const id = during.headers['x-llmgw-ledger-id'];
      await h.waitFor(() => pg.sql(`SELECT count(*) FROM ledger WHERE attempt_id = '${id}'`) === '1', { what: `the outage's ledger row ${id}` });
    });
  });

  test('a configuration the data plane would refuse is never published: the last good one stays, and the status says why', T, async () => {
    const good = (await snapshot()).version;
    // The schema allows it; the snapshot format does not (the embedding role needs capability embeddings).
    const bad = cfg.write(`INSERT INTO routes (name, role, capability) VALUES ('embed', 'embedding', 'chat');
      INSERT INTO route_entries (route, position, provider, model) VALUES ('embed', 0, 'alpha', 'mock-emb')`);
    const s = await h.waitFor(async () => {
      const j = await snapshot();
      return j.last_error ? j : null;
    }, { what: 'the failed build in /v1/admin/snapshot' });
    assert.match(s.last_error, /the embedding role needs capability embeddings/);
    assert.equal(s.version, good);
    assert.equal(s.published_version, good);
    assert.ok(s.failed_builds >= 1);
    // The log line may reach us after the status does (another pipe).
    await h.waitFor(() => cp.proc.stderrText.includes('snapshot build failed'), { what: 'the failed build logged' });
    for (const g of Object.values(dps)) {
      assert.equal((await readyz(g)).snapshot_version, good);
      assert.equal((await chat(g)).status, 200);
    }
    // Fixed: the next build goes out, and the error is cleared.
    const fixed = cfg.write("UPDATE routes SET capability = 'embeddings' WHERE name = 'embed'");
    assert.ok(fixed > bad);
    const s2 = await waitAcked(fixed);
    assert.equal(s2.last_error, null);
    assert.equal(s2.version, fixed);
  });

  test('the catalog goes out with price overrides applied (seen in a data plane\'s snapshot cache)', T, async () => {
    const v = cfg.write(`INSERT INTO model_catalog (provider, model, context_window, capabilities, input_price, output_price)
        VALUES (NULL, 'mock-gpt', 128000, ARRAY['chat','tools'], 100, 200);
      INSERT INTO model_catalog (provider, model, input_price) VALUES ('alpha', 'mock-gpt', 300);
      INSERT INTO price_overrides (provider, model, input_price) VALUES ('alpha', 'mock-gpt', 50);
      INSERT INTO price_overrides (provider, model, input_price, output_price) VALUES ('beta', 'mock-gpt', 70, 80)`);
    // The cache file is written after the snapshot is published: wait for
    // the file itself, not /readyz, to carry the version.
    const cached = await h.waitFor(() => {
      try {
        const j = JSON.parse(fs.readFileSync(path.join(dir, 'dp-b.cache.json'), 'utf8'));
        return j.version === v ? j : null;
      } catch {
        return null; // being replaced (rename) or not written yet
      }
    }, { what: `dp-b's cache file on version ${v}` });
    assert.deepEqual(cached.catalog, [
      { model: 'mock-gpt', context_window: 128000, capabilities: ['chat', 'tools'], input_price: 100, output_price: 200, currency: 'USD' },
      { provider: 'alpha', model: 'mock-gpt', input_price: 50, currency: 'USD' },
      { provider: 'beta', model: 'mock-gpt', context_window: 128000, capabilities: ['chat', 'tools'], input_price: 70, output_price: 80, currency: 'USD' },
    ]);
    assert.equal(cached.keys.length, 1);
    assert.equal(cached.keys[0].hash, h.sha256hex(apiKey));
    assert.equal(cached.keys[0].status, 'active');
  });

  test('the response cache settings from the admin API reach a data plane\'s snapshot, only where set', T, async () => {
    const cacheFile = (v) => h.waitFor(() => {
      try {
        const j = JSON.parse(fs.readFileSync(path.join(dir, 'dp-b.cache.json'), 'utf8'));
        return j.version >= v ? j : null;
      } catch {
        return null;
      }
    }, { timeoutMs: 20_000, what: `dp-b's cache file on version ${v}` });
    await cfg.api('POST', '/v1/admin/teams', { name: 'cache-team', cache_ttl_s: 0 }, 201);
    await cfg.api('POST', '/v1/admin/teams', { name: 'plain-team' }, 201);
    await cfg.api('POST', '/v1/admin/routes', {
      name: 'cached', cache: { ttl_s: 600, scope: 'key', deterministic: true },
      entries: [{ provider: 'alpha', model: 'mock-gpt' }],
    }, 201);
    await cfg.api('PATCH', '/v1/admin/keys/key_e2e', { team: 'cache-team', cache_ttl_s: 120 }, 200);
    const v = cfg.version();
    await waitAcked(v);
    let doc = await cacheFile(v);
    const route = (d, n) => d.routes.find((r) => r.name === n);
    assert.deepEqual(route(doc, 'cached').cache, { ttl_s: 600, scope: 'key', deterministic: true });
    assert.ok(!('cache' in route(doc, 'fast')), 'a route without a cache carries no member');
    const team = (d, n) => d.teams.find((t) => t.name === n);
    assert.equal(team(doc, 'cache-team').cache_ttl_s, 0, '0 (off) is carried');
    assert.ok(!('cache_ttl_s' in team(doc, 'plain-team')), 'null is left out');
    assert.equal(doc.keys[0].cache_ttl_s, 120);
    // The route still serves (the data plane took the document).
    for (const g of Object.values(dps)) assert.equal((await chat(g, 'cached')).status, 200);
    // Turned off again: the members leave the snapshot.
    await cfg.api('PATCH', '/v1/admin/routes/cached', { cache: null }, 200);
    await cfg.api('PATCH', '/v1/admin/keys/key_e2e', { team: null, cache_ttl_s: null }, 200);
    await cfg.api('DELETE', '/v1/admin/teams/cache-team', undefined, 204);
    await cfg.api('DELETE', '/v1/admin/teams/plain-team', undefined, 204);
    const v2 = cfg.version();
    await waitAcked(v2);
    doc = await cacheFile(v2);
    assert.ok(!('cache' in route(doc, 'cached')), JSON.stringify(route(doc, 'cached')));
    assert.ok(!('cache_ttl_s' in doc.keys[0]), JSON.stringify(doc.keys[0]));
    assert.equal(doc.keys.length, 1);
  });
});

describe('TLS between the planes (a second control-plane replica on the same database)', () => {
  let certs;
  before(() => { certs = makeCertSet(h.makeTmpDir()); });

  test('server TLS without a client CA is refused unless explicitly opted out of', T, async () => {
    const p = new h.ManagedProcess('controlplane-tls-noca', h.CONTROLPLANE_BIN, ['serve', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0'],
      { env: { ...process.env, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_GRPC_INSECURE: '', LLMGW_GRPC_TLS_NO_CLIENT_AUTH: '',
        LLMGW_GRPC_TLS_CLIENT_CA: '', LLMGW_GRPC_TLS_CERT: certs.srvCert, LLMGW_GRPC_TLS_KEY: certs.srvKey } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 2, p.describe());
    assert.match(p.stderrText, /--grpc-tls-client-ca/);
    assert.match(p.stderrText, /--grpc-tls-no-client-auth/);
  });

  test('server TLS without client certificates needs a fleet token: refused without one; with one, only a data plane that presents it is served', T, async () => {
    const tlsEnv = { LLMGW_MASTER_KEY: KEY.hex, LLMGW_GRPC_INSECURE: '', LLMGW_GRPC_TLS_CERT: certs.srvCert, LLMGW_GRPC_TLS_KEY: certs.srvKey };
    // No token: anyone reaching the port could read every credential and
    // write ledger rows, so the control plane does not start.
    const p = new h.ManagedProcess('controlplane-tls-notoken', h.CONTROLPLANE_BIN,
      ['serve', '--grpc-tls-no-client-auth', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0'],
      { env: { ...process.env, ...tlsEnv, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_GRPC_TLS_CLIENT_CA: '', LLMGW_FLEET_TOKEN: '' } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 2, p.describe());
    assert.match(p.stderrText, /--grpc-tls-no-client-auth needs LLMGW_FLEET_TOKEN/);

    const token = `llmgw-fleet-${randomBytes(16).toString('hex')}`;
    const c = await h.startControlPlane({ pg, args: ['--grpc-tls-no-client-auth'], env: { ...tlsEnv, LLMGW_FLEET_TOKEN: token } });
    assert.equal(c.listening.grpc_tls, true);
    await h.waitFor(() => /whoever holds the fleet token/.test(c.proc.stdoutText + c.proc.stderrText),
      { what: 'the no-client-auth warning' });
    const target = `127.0.0.1:${c.listening.grpc_port}`;
    const anon = await h.startGatewayCP({ controlPlane: target, replicaId: 'dp-notoken', args: ['--control-plane-ca', certs.ca] });
    const wrong = await h.startGatewayCP({
      controlPlane: target, replicaId: 'dp-wrongtoken', args: ['--control-plane-ca', certs.ca],
      env: { LLMGW_FLEET_TOKEN: `${token}x` },
    });
    const g = await h.startGatewayCP({
      controlPlane: target, replicaId: 'dp-tls', args: ['--control-plane-ca', certs.ca], env: { LLMGW_FLEET_TOKEN: token },
    });
    const v = cfg.version();
    await h.waitFor(async () => (await readyz(g))?.snapshot_version === v, { what: 'dp-tls serving over TLS' });
    assert.equal((await chat(g)).status, 200);
    await h.waitFor(async () => {
      const r = (await c.admin('GET', '/v1/admin/snapshot')).json;
      return r.replicas.some((x) => x.replica_id === 'dp-tls' && x.acked_version === v);
    }, { what: 'the ack over TLS' });
    // Neither the data plane without the token nor the one with a wrong
    // token got a snapshot, was counted as a replica, or reported anything.
    await h.waitFor(() => /missing or wrong fleet token/.test(anon.proc.stdoutText + anon.proc.stderrText) &&
      /missing or wrong fleet token/.test(wrong.proc.stdoutText + wrong.proc.stderrText), { what: 'the refusals, as the data planes see them' });
    for (const d of [anon, wrong]) {
      assert.equal((await h.request(d.port, { method: 'GET', path: '/readyz' })).status, 503);
      assert.match(d.proc.stdoutText + d.proc.stderrText, /UNAUTHENTICATED/);
    }
    const reps = (await c.admin('GET', '/v1/admin/snapshot')).json.replicas;
    assert.ok(!reps.some((x) => x.replica_id === 'dp-notoken' || x.replica_id === 'dp-wrongtoken'), JSON.stringify(reps));
    assert.match(c.proc.stdoutText + c.proc.stderrText, /"msg":"grpc: call refused"/);
    for (const d of [anon, wrong, g]) await d.proc.stop();
    await c.proc.stop();
  });

  test('mutual TLS: without a client certificate no snapshot; with one, served; a replica id stays with the certificate that first used it', T, async () => {
    const c = await h.startControlPlane({
      pg,
      env: {
        LLMGW_MASTER_KEY: KEY.hex, LLMGW_GRPC_INSECURE: '', LLMGW_GRPC_TLS_CERT: certs.srvCert,
        LLMGW_GRPC_TLS_KEY: certs.srvKey, LLMGW_GRPC_TLS_CLIENT_CA: certs.ca,
      },
    });
    const target = `127.0.0.1:${c.listening.grpc_port}`;
    const anon = await h.startGatewayCP({ controlPlane: target, replicaId: 'dp-anon', args: ['--control-plane-ca', certs.ca] });
    const authed = await h.startGatewayCP({
      controlPlane: target, replicaId: 'dp-mtls',
      args: ['--control-plane-ca', certs.ca, '--control-plane-cert', certs.cliCert, '--control-plane-key', certs.cliKey],
    });
    const v = cfg.version();
    await h.waitFor(async () => (await readyz(authed))?.snapshot_version === v, { what: 'dp-mtls serving' });
    await h.sleep(1000);
    const r = await h.request(anon.port, { method: 'GET', path: '/readyz' });
    assert.equal(r.status, 503, 'no client certificate, no snapshot');
    let reps = (await c.admin('GET', '/v1/admin/snapshot')).json.replicas;
    assert.ok(!reps.some((x) => x.replica_id === 'dp-anon'), JSON.stringify(reps));
    // The name dp-mtls is now bound to the certificate that claimed it (CN
    // dp-tls): a data plane with another valid certificate cannot use it,
    // even after the first one has gone, but is served under its own name.
    assert.equal(reps.find((x) => x.replica_id === 'dp-mtls')?.cert_identity, 'dp-tls', JSON.stringify(reps));
    await authed.proc.stop();
    const other = ['--control-plane-ca', certs.ca, '--control-plane-cert', certs.cli2Cert, '--control-plane-key', certs.cli2Key];
    const impostor = await h.startGatewayCP({ controlPlane: target, replicaId: 'dp-mtls', args: other });
    const own = await h.startGatewayCP({ controlPlane: target, replicaId: 'dp-own', args: other });
    await h.waitFor(async () => (await readyz(own))?.snapshot_version === v, { what: 'dp-own serving' });
    await h.waitFor(() => /PERMISSION_DENIED/.test(impostor.proc.stdoutText + impostor.proc.stderrText),
      { what: 'the impostor refused' });
    assert.match(impostor.proc.stdoutText + impostor.proc.stderrText, /bound to another client certificate/);
    assert.equal((await h.request(impostor.port, { method: 'GET', path: '/readyz' })).status, 503);
    reps = (await c.admin('GET', '/v1/admin/snapshot')).json.replicas;
    assert.equal(reps.find((x) => x.replica_id === 'dp-own')?.cert_identity, 'dp-other', JSON.stringify(reps));
    const bound = reps.find((x) => x.replica_id === 'dp-mtls');
    assert.equal(bound?.cert_identity, 'dp-tls', JSON.stringify(reps));
    assert.equal(bound.connected, false, 'the impostor holds no Watch under the name');
    await impostor.proc.stop();
    await own.proc.stop();
    await anon.proc.stop();
    await c.proc.stop();
  });
});

describe('credentials from Vault (a fake KV v2 server)', () => {
  const VAULT_VALUE = `sk-vault-${randomBytes(8).toString('hex')}`;
  const VAULT_TOKEN = `hvs.${randomBytes(8).toString('hex')}`;
  let vault;
  let vcp;
  let vcfg;
  let g;

  before(async () => {
    const calls = [];
    const srv = http.createServer((req, res) => {
      calls.push({ url: req.url, token: req.headers['x-vault-token'] });
      if (vault.failing) {
        res.writeHead(503, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ errors: ['Vault is sealed'] }));
        return;
      }
      const ok = req.headers['x-vault-token'] === VAULT_TOKEN && req.url === '/v1/secret/data/llm/openai';
      const body = ok
        ? JSON.stringify({ data: { data: { api_key: VAULT_VALUE }, metadata: { version: 1 } } })
        : JSON.stringify({ errors: [] });
      res.writeHead(ok ? 200 : 404, { 'content-type': 'application/json' });
      res.end(body);
    });
    await new Promise((r) => srv.listen(0, '127.0.0.1', r));
    vault = { srv, calls, failing: false, url: `http://127.0.0.1:${srv.address().port}` };
    const conninfo = pg.createDatabase('vaultdb');
    vcp = await h.startControlPlane({
      conninfo, env: { LLMGW_MASTER_KEY: KEY.hex, VAULT_ADDR: vault.url, VAULT_TOKEN },
    });
    vcfg = new Config(vcp, pg, KEY, 'vaultdb');
  });
  after(() => vault?.srv.close());

  test('a vault: ref resolves to the provider\'s credential; a missing one is listed as unresolved', T, async () => {
    await vcfg.externalSecret('vault-openai', 'vault', 'vault:secret/llm/openai#api_key');
    await vcfg.externalSecret('vault-gone', 'vault', 'vault:secret/llm/gone#api_key');
    await vcfg.provider({ name: 'vp', driver: 'openai', base_url: `http://127.0.0.1:${capture.port}/v1`, credential_ref: 'vault-openai' });
    await vcfg.provider({ name: 'gone', driver: 'openai', base_url: mock.v1, credential_ref: 'vault-gone' });
    await vcfg.route('vroute', [{ provider: 'vp', model: 'cap-model' }]);
    apiKey = await vcfg.apiKey('key_vault');
    const v = vcfg.version();
    g = await h.startGatewayCP({ controlPlane: `127.0.0.1:${vcp.listening.grpc_port}`, replicaId: 'dp-vault' });
    await h.waitFor(async () => (await readyz(g))?.snapshot_version === v, { what: 'dp-vault on the first version' });
    const before = capture.seen.length;
    const r = await chat(g, 'vroute');
    assert.equal(r.status, 200, r.text);
    assert.equal(capture.seen[before], `Bearer ${VAULT_VALUE}`);
    const s = (await vcp.admin('GET', '/v1/admin/snapshot')).json;
    assert.deepEqual(s.unresolved.map((u) => u.provider), ['gone']);
    assert.match(s.unresolved[0].reason, /vault:secret\/llm\/gone#api_key/);
    assert.ok(vault.calls.every((c) => c.token === VAULT_TOKEN));
    assert.ok(!vcp.proc.stderrText.includes(VAULT_VALUE) && !vcp.proc.stderrText.includes(VAULT_TOKEN), 'never logged');
  });

  test('a rebuild reuses the fetched value instead of calling Vault again', T, async () => {
    const fetched = () => vault.calls.filter((c) => c.url === '/v1/secret/data/llm/openai').length;
    const n = fetched();
    assert.equal(n, 1);
    const v = await vcfg.route('vroute2', [{ provider: 'vp', model: 'cap-model' }]);
    await h.waitFor(async () => (await readyz(g))?.snapshot_version === v, { what: 'dp-vault on the next version' });
    assert.equal(fetched(), 1, 'served from the builder\'s cache');
    const before = capture.seen.length;
    assert.equal((await chat(g, 'vroute2')).status, 200);
    assert.equal(capture.seen[before], `Bearer ${VAULT_VALUE}`);
  });

  test('a Vault that fails after a fetch: the last resolved value stays, the failure is not refetched for 30 s', T, async () => {
    // A replica of its own whose cached values expire after 1 s.
    const fetched = () => vault.calls.filter((c) => c.url === '/v1/secret/data/llm/openai').length;
    const cp2 = await h.startControlPlane({
      conninfo: pg.conninfoFor('vaultdb'),
      env: { LLMGW_MASTER_KEY: KEY.hex, VAULT_ADDR: vault.url, VAULT_TOKEN, LLMGW_SECRET_CACHE_TTL_MS: '1000' },
    });
    const g2 = await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp2.listening.grpc_port}`, replicaId: 'dp-vault-2' });
    try {
      let v = vcfg.version();
      await h.waitFor(async () => (await readyz(g2))?.snapshot_version === v, { what: 'dp-vault-2 on the current version' });
      vault.failing = true;
      await h.sleep(1200); // past the cache TTL: the next build refetches, and fails
      const n = fetched();
      v = await vcfg.route('vroute3', [{ provider: 'vp', model: 'cap-model' }]);
      await h.waitFor(async () => (await readyz(g2))?.snapshot_version === v, { what: 'dp-vault-2 after the failed refetch' });
      await h.waitFor(async () => fetched() > n, { what: 'the refetch' });
      let before = capture.seen.length;
      let r = await chat(g2, 'vroute3');
      assert.equal(r.status, 200, r.text);
      assert.equal(capture.seen[before], `Bearer ${VAULT_VALUE}`, 'the last resolved value');
      const s = (await cp2.admin('GET', '/v1/admin/snapshot')).json;
      const u = s.unresolved.find((x) => x.credential_ref === 'vault-openai');
      assert.ok(u, JSON.stringify(s.unresolved));
      assert.match(u.reason, /^using the last resolved value: .*503/);
      assert.ok(!s.unresolved.find((x) => x.credential_ref === 'vault-gone').reason.includes('last resolved'));
      // A second rebuild within 30 s does not call Vault again.
      const m = fetched();
      v = await vcfg.route('vroute4', [{ provider: 'vp', model: 'cap-model' }]);
      await h.waitFor(async () => (await readyz(g2))?.snapshot_version === v, { what: 'dp-vault-2 on the second rebuild' });
      assert.equal(fetched(), m, 'the failure is cached');
      before = capture.seen.length;
      r = await chat(g2, 'vroute4');
      assert.equal(r.status, 200, r.text);
      assert.equal(capture.seen[before], `Bearer ${VAULT_VALUE}`);
      assert.ok(!cp2.proc.stderrText.includes(VAULT_VALUE), 'never logged');
    } finally {
      vault.failing = false;
      await g2.proc.stop();
      await cp2.proc.stop();
    }
  });
});
