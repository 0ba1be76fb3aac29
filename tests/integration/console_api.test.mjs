// The control plane's side of the web console (docs/console.md): the
// assets served at /console/ from the copy built into the binary, with
// their security headers, and the admin API's answers the console needs
// beyond the resources: GET /v1/admin/whoami, the ledger listed and
// filtered, and GET /v1/admin/plan (the router on the last snapshot built:
// what a request would try, and what it would skip and why). The browser
// test (console.test.mjs) drives the pages themselves.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';

const T = { timeout: 60_000 };
const KEY = masterKey();

let pg;
let cp;
let cfg;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY.hex } });
  cfg = new Config(cp, pg, KEY);
});

after(async () => {
  await h.stopAll();
});

const get = (p, headers = {}) => h.request(cp.port, { method: 'GET', path: p, headers });

describe('the console\'s assets', () => {
  test('/console/ is the embedded index.html; every file it names is served with its type; strict headers on each', T, async () => {
    const r = await get('/console/');
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers['content-type'], /^text\/html; charset=utf-8$/);
    const csp = r.headers['content-security-policy'];
    assert.ok(csp, 'a Content-Security-Policy');
    for (const d of ["default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
      "frame-ancestors 'none'", "form-action 'none'", "base-uri 'none'"]) assert.ok(csp.includes(d), `${d} in ${csp}`);
    assert.ok(!/unsafe-inline|unsafe-eval|\*/.test(csp), csp);
    assert.equal(r.headers['x-frame-options'], 'DENY');
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
    assert.equal(r.headers['referrer-policy'], 'no-referrer');
    // No inline script or handler in the page: the policy would block it.
    assert.ok(!/<script(?![^>]*\bsrc=)[^>]*>/i.test(r.text), 'no inline <script>');
    assert.ok(!/\son[a-z]+\s*=/i.test(r.text), 'no inline event handler');
    assert.ok(!/\sstyle\s*=/i.test(r.text), 'no style attribute');
    const refs = [...r.text.matchAll(/(?:src|href)="([^"#]+)"/g)].map((m) => m[1]);
    assert.ok(refs.some((x) => x.endsWith('.js')) && refs.some((x) => x.endsWith('.css')), `scripts and styles: ${refs}`);
    for (const ref of refs) {
      assert.ok(!/^[a-z]+:|^\/\//i.test(ref), `${ref}: same origin, relative`);
      const a = await get(`/console/${ref.replace(/^\.?\//, '')}`);
      assert.equal(a.status, 200, `${ref}: ${a.status}`);
      const want = ref.endsWith('.js') ? /^text\/javascript/ : ref.endsWith('.css') ? /^text\/css/ : /./;
      assert.match(a.headers['content-type'], want, ref);
      assert.equal(a.headers['x-frame-options'], 'DENY', ref);
      assert.ok(a.headers['content-security-policy'], ref);
    }
  });

  test('/console redirects to /console/; unknown names, other folders and other methods are refused', T, async () => {
    const r = await get('/console');
    assert.equal(r.status, 308);
    assert.equal(r.headers.location, '/console/');
    for (const p of ['/console/nope.js', '/console/..%2Fmain.c', '/console/sub/app.js', '/console/.hidden.js',
      '/console/app.exe', '/consoles/']) {
      const x = await get(p);
      assert.equal(x.status, 404, `${p}: ${x.status} ${x.text}`);
    }
    const post = await h.request(cp.port, { method: 'POST', path: '/console/', body: {} });
    assert.equal(post.status, 405);
  });

  test('a path with bytes that are not text: a 404 (or 400) with a JSON body, never a 500', T, async () => {
    const net = await import('node:net');
    for (const p of [Buffer.from('/console/\xff.js', 'latin1'), Buffer.from('/nowhere/\xff\x01', 'latin1')]) {
      const answer = await new Promise((resolve, reject) => {
        const s = net.connect(cp.port, '127.0.0.1');
        const chunks = [];
        s.on('data', (d) => chunks.push(d));
        s.on('end', () => resolve(Buffer.concat(chunks).toString('latin1')));
        s.on('error', reject);
        s.write(Buffer.concat([Buffer.from('GET '), p, Buffer.from(' HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')]));
      });
      const status = Number(answer.slice(9, 12));
      assert.ok(status === 404 || status === 400, answer.slice(0, 200));
      const body = answer.slice(answer.indexOf('\r\n\r\n') + 4);
      assert.ok(JSON.parse(body).error.message.length > 0, body);
    }
  });

  test('the assets need no token; the API behind them does', T, async () => {
    assert.equal((await get('/console/')).status, 200);
    assert.equal((await get('/v1/admin/whoami')).status, 401);
  });
});

describe('whoami', () => {
  test('the token\'s name and scope', T, async () => {
    const r = await cp.admin('GET', '/v1/admin/whoami');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, { actor: 'bootstrap', scope: 'admin' });
    const t = await cfg.api('POST', '/v1/admin/admin-tokens', { name: 'console-reader', scope: 'read' }, 201);
    const w = await get('/v1/admin/whoami', { authorization: `Bearer ${t.token}` });
    assert.equal(w.status, 200, w.text);
    assert.deepEqual(w.json, { actor: 'console-reader', scope: 'read' });
    const bad = await get('/v1/admin/whoami', { authorization: 'Bearer not-a-token' });
    assert.equal(bad.status, 401);
  });
});

describe('the ledger, listed', () => {
  const rows = [
    // request, attempt, key, route, provider, model, status, seconds ago
    ['lq-1', 1, 'k-a', 'fast', 'alpha', 'm1', 503, 50],
    ['lq-1', 2, 'k-a', 'fast', 'beta', 'm2', 200, 49],
    ['lq-2', 1, 'k-b', 'slow', 'alpha', 'm1', 200, 30],
    ['lq-3', 1, 'k-a', 'slow', 'beta', 'm2', 429, 10],
  ];
  before(() => {
    const values = rows.map(([rid, n, key, route, prov, model, st, ago]) =>
      `(now() - interval '${ago} seconds', '${rid}.${n}', '${rid}', ${n}, 'test', '${key}', '${route}', '${prov}', '${model}', 5, ${st}, 1, ${n * 1000})`);
    pg.sql(`SELECT llmgw_ledger_partition(now()); INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, key_id,
      route, provider, model, latency_ms, status, snapshot_version, cost_picodollars) VALUES ${values.join(',')}`);
  });
  after(() => {
    pg.sql("DELETE FROM ledger WHERE request_id LIKE 'lq-%'");
  });
  const ids = (j) => j.data.map((r) => `${r.request_id}.${r.attempt}`);

  test('without request_id: the newest first; each filter narrows; limit and offset page', T, async () => {
    const all = await cfg.api('GET', '/v1/admin/ledger', undefined, 200);
    assert.deepEqual(ids(all), ['lq-3.1', 'lq-2.1', 'lq-1.2', 'lq-1.1']);
    assert.equal(all.request_id, undefined);
    assert.deepEqual(ids(await cfg.api('GET', '/v1/admin/ledger?key_id=k-a', undefined, 200)), ['lq-3.1', 'lq-1.2', 'lq-1.1']);
    assert.deepEqual(ids(await cfg.api('GET', '/v1/admin/ledger?route=slow&status=200', undefined, 200)), ['lq-2.1']);
    assert.deepEqual(ids(await cfg.api('GET', '/v1/admin/ledger?provider=beta&model=m2', undefined, 200)), ['lq-3.1', 'lq-1.2']);
    assert.deepEqual(ids(await cfg.api('GET', '/v1/admin/ledger?limit=2&offset=1', undefined, 200)), ['lq-2.1', 'lq-1.2']);
    assert.deepEqual(ids(await cfg.api('GET', '/v1/admin/ledger?status=404', undefined, 200)), []);
  });

  test('with request_id: that request\'s attempts in order, side by side', T, async () => {
    const one = await cfg.api('GET', '/v1/admin/ledger?request_id=lq-1', undefined, 200);
    assert.equal(one.request_id, 'lq-1');
    assert.deepEqual(ids(one), ['lq-1.1', 'lq-1.2']);
    assert.deepEqual(one.data.map((r) => [r.provider, r.status, r.cost_picodollars]), [['alpha', 503, 1000], ['beta', 200, 2000]]);
  });

  test('a bad parameter is a 400 naming it', T, async () => {
    for (const [q, param, code] of [['status=abc', 'status'], ['status=99', 'status'], ['limit=0', 'limit'],
      ['limit=1001', 'limit'], ['offset=-1', 'offset'], ['request_id=a%20b', 'request_id'],
      ['route=', 'route'], ['colour=red', 'colour', 'unknown_parameter'], ['route=a&route=b', 'route'],
      ['key_id=%zz', 'key_id'], ['route=%c3%28', 'route'], ['provider=%01', 'provider']]) {
      const r = await cp.admin('GET', `/v1/admin/ledger?${q}`);
      h.assertError(r, 400, code ?? 'invalid_value', param);
    }
  });
});

describe('limit-windows: every limit with its current window\'s spend', () => {
  test('spent is the current window\'s; a limit without a window has spent 0; exact past 2^53', T, async () => {
    await cfg.api('POST', '/v1/admin/keys', { id: 'k-spend' }, 201);
    await cfg.api('POST', '/v1/admin/limits', {
      id: 'lw-day', scope_kind: 'key', scope: 'k-spend', metric: 'cost', period: 'day', amount: 4_000_000_000_000_000_000,
    }, 201);
    await cfg.api('POST', '/v1/admin/limits', {
      id: 'lw-min', scope_kind: 'key', scope: 'k-spend', metric: 'requests', period: 'minute', amount: 60, offline: 'fail_closed',
    }, 201);
    // The window a data plane's charges would have made, and an old one that no longer counts.
    pg.sql(`INSERT INTO limit_windows (limit_id, window_start, spent) VALUES
      ('lw-day', date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', 9007199254740993),
      ('lw-day', (date_trunc('day', now() AT TIME ZONE 'UTC') - interval '1 day') AT TIME ZONE 'UTC', 5)`);
    const r = await cp.admin('GET', '/v1/admin/limit-windows');
    assert.equal(r.status, 200, r.text);
    // Read the text: JSON.parse would round 2^53 + 1.
    assert.match(r.text, /"id": ?"lw-day"[^}]*"spent": ?9007199254740993/);
    const day = r.json.data.find((l) => l.id === 'lw-day');
    const min = r.json.data.find((l) => l.id === 'lw-min');
    assert.equal(day.period, 'day');
    assert.equal(day.metric, 'cost');
    assert.equal(new Date(day.window_start).getTime() % 86_400_000, 0, day.window_start);
    assert.equal(min.spent, 0);
    assert.equal(min.offline, 'fail_closed');
    h.assertError(await cp.admin('GET', '/v1/admin/limit-windows?id=x'), 400, 'unknown_parameter', 'id');
    pg.sql("DELETE FROM limit_windows WHERE limit_id = 'lw-day'");
  });
});

describe('plan: the router on the last snapshot', () => {
  before(async () => {
    await cfg.provider({ name: 'p-one', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' });
    await cfg.provider({ name: 'p-two', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' });
    await cfg.provider({ name: 'p-off', driver: 'openai', base_url: 'http://127.0.0.1:9/v1', enabled: false });
    await cfg.api('POST', '/v1/admin/routes', {
      name: 'plan-route', aliases: ['plan-alias'], strategy: 'ordered',
      entries: [{ provider: 'p-off', model: 'mo' }, { provider: 'p-one', model: 'm1' }, { provider: 'p-two', model: 'm2' }],
    }, 201);
    await cfg.api('POST', '/v1/admin/routes', {
      name: 'plan-dead', strategy: 'ordered', entries: [{ provider: 'p-off', model: 'mo' }],
    }, 201);
    await cfg.api('POST', '/v1/admin/keys', { id: 'k-plan', allow_providers: ['p-two'] }, 201);
    const v = cfg.version();
    await h.waitFor(async () => (await cp.admin('GET', '/v1/admin/snapshot')).json?.config_version >= v,
      { what: 'a snapshot with the plan routes' });
  });

  test('a route: its order, the candidates, the disabled provider skipped with its reason', T, async () => {
    const p = await cfg.api('GET', '/v1/admin/plan?model=plan-route', undefined, 200);
    assert.equal(p.via, 'route');
    assert.equal(p.route, 'plan-route');
    assert.equal(p.strategy, 'ordered');
    assert.equal(p.status, 200);
    assert.equal(p.code, null);
    assert.ok(p.snapshot_version >= 1);
    assert.deepEqual(p.order.map((t) => `${t.provider}/${t.model}`), ['p-off/mo', 'p-one/m1', 'p-two/m2']);
    assert.deepEqual(p.candidates.map((t) => `${t.provider}/${t.model}`), ['p-one/m1', 'p-two/m2']);
    assert.deepEqual(p.skips.map((s) => [s.provider, s.reason]), [['p-off', 'disabled']]);
    assert.ok(p.skips[0].detail.length > 0);
    assert.match(p.note, /breakers/);
    const alias = await cfg.api('GET', '/v1/admin/plan?model=plan-alias', undefined, 200);
    assert.equal(alias.via, 'alias');
    assert.equal(alias.route, 'plan-route');
  });

  test('a key\'s allowlist and a capability narrow it; nothing left is what a request would get', T, async () => {
    const k = await cfg.api('GET', '/v1/admin/plan?model=plan-route&key_id=k-plan', undefined, 200);
    assert.deepEqual(k.candidates.map((t) => t.provider), ['p-two']);
    assert.ok(k.skips.some((s) => s.provider === 'p-one' && s.reason === 'not_allowed'), JSON.stringify(k.skips));
    const dead = await cfg.api('GET', '/v1/admin/plan?model=plan-dead', undefined, 200);
    assert.equal(dead.status, 503);
    assert.equal(dead.code, 'no_healthy_target');
    assert.match(dead.message, /p-off/);
    assert.deepEqual(dead.candidates, []);
    const none = await cfg.api('GET', '/v1/admin/plan?model=no-such-route', undefined, 200);
    assert.equal(none.status, 404);
    assert.equal(none.code, 'model_not_found');
    const exact = await cfg.api('GET', '/v1/admin/plan?model=p-one/anything', undefined, 200);
    assert.equal(exact.via, 'exact');
    assert.equal(exact.route, null);
    assert.deepEqual(exact.candidates.map((t) => `${t.provider}/${t.model}`), ['p-one/anything']);
    // Embeddings through a chat route: the route serves its kind only.
    const emb = await cfg.api('GET', '/v1/admin/plan?model=plan-route&capabilities=embeddings', undefined, 200);
    assert.notEqual(emb.status, 200, JSON.stringify(emb));
  });

  test('a bad parameter is a 400 naming it', T, async () => {
    for (const [q, param, code] of [['', 'model'], ['model=plan-route&capabilities=telepathy', 'capabilities'],
      ['model=plan-route&input_tokens=x', 'input_tokens'], ['model=plan-route&key_id=nobody', 'key_id'],
      ['model=plan-route&colour=red', 'colour', 'unknown_parameter'], ['model=%ff', 'model'],
      ['model=plan-route&key_id=a%0Ab', 'key_id']]) {
      const r = await cp.admin('GET', `/v1/admin/plan?${q}`);
      h.assertError(r, 400, code ?? 'invalid_value', param);
    }
  });

  test('llmgwctl plan, ledger with filters, whoami', T, async () => {
    const { spawnSync } = await import('node:child_process');
    const ctl = (args) => {
      const r = spawnSync(`${h.REPO_ROOT}/tools/llmgwctl`, args, {
        encoding: 'utf8', env: { ...process.env, LLMGW_ADMIN_URL: cp.url, LLMGW_ADMIN_TOKEN: cp.token },
      });
      assert.equal(r.status, 0, `${args}: ${r.stderr}`);
      return JSON.parse(r.stdout);
    };
    const p = ctl(['plan', 'plan-route', 'tools']);
    assert.deepEqual(p.candidates.map((t) => t.provider), ['p-one', 'p-two']);
    assert.equal(ctl(['whoami']).scope, 'admin');
    assert.ok(Array.isArray(ctl(['ledger', '--route', 'nowhere', '--limit', '5']).data));
  });

  test('a read token may preview; no token may not', T, async () => {
    const t = await cfg.api('POST', '/v1/admin/admin-tokens', { name: 'plan-reader', scope: 'read' }, 201);
    assert.equal((await get('/v1/admin/plan?model=plan-route', { authorization: `Bearer ${t.token}` })).status, 200);
    assert.equal((await get('/v1/admin/plan?model=plan-route')).status, 401);
  });
});
