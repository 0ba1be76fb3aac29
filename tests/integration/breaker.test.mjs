// Circuit breakers: one per (provider, model) per data-plane
// process. Only health-relevant failure classes move them: 10,000
// bad_request failures leave a target's breaker closed, sustained 5xx opens
// it (the target is skipped: the mock stops hearing from the gateway), and
// after the open interval one half-open probe decides: a failure reopens it
// for longer, a success closes it.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import * as h from './harness.mjs';

const MESSAGES = [{ role: 'user', content: 'hello there' }];

let mock;
let gw; // default open interval (5 s)
let gwFast; // --breaker-open-ms 300

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
  const extraRoutes = [
    { name: 'br-route', capability: 'chat', strategy: 'ordered',
      entries: [{ provider: 'mock', model: 'br5#status=503' }, { provider: 'mock', model: 'br5-b' }] },
    { name: 'ho-route', capability: 'chat', strategy: 'ordered',
      entries: [{ provider: 'mock', model: 'ho#status=503,times=5,tag=half-open' }, { provider: 'mock', model: 'ho-b' }] },
  ];
  gw = await h.startGateway({ mock, extraRoutes, args: ['--retry-base-ms', '10'] });
  gwFast = await h.startGateway({ mock, extraRoutes, args: ['--retry-base-ms', '10', '--breaker-open-ms', '300'] });
});

after(async () => {
  await h.stopAll();
});

const post = (g, body, headers = {}, agent) => h.request(g.port, { body, headers: { ...h.AUTH, ...headers }, agent });

/** The mock's usage lines for one model (the log holds 10,000+ lines: filter before parsing). */
function linesOf(model) {
  const needle = `"model":${JSON.stringify(model)},`;
  return fs.readFileSync(mock.usageLogPath, 'utf8').split('\n')
    .filter((l) => l.includes(needle)).map((l) => JSON.parse(l));
}

/** Runs n requests, `concurrency` at a time; fn(i) returns a promise. */
async function pool(n, concurrency, fn) {
  let next = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      await fn(i);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
}

describe('breakers', () => {
  test('10,000 bad_request failures leave the breaker closed', { timeout: 120_000 }, async (t) => {
    const N = 10_000;
    const model = 'mock/bk400#status=400,times=10000,tag=bk';
    const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
    const statuses = {};
    const codes = {};
    const t0 = Date.now();
    try {
      await pool(N, 32, async () => {
        const r = await post(gw, { model, messages: MESSAGES, max_tokens: 1 }, {}, agent);
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
        const code = r.json?.error?.code;
        codes[code] = (codes[code] ?? 0) + 1;
      });
    } finally {
      agent.destroy();
    }
    t.diagnostic(`10,000 bad_request failures in ${Date.now() - t0} ms`);
    assert.deepEqual(statuses, { 400: N }, `statuses ${JSON.stringify(statuses)}`);
    assert.deepEqual(codes, { bad_request: N }, `codes ${JSON.stringify(codes)}`);
    // The same target is still tried: the mock sees the next request, which
    // the times= counter now answers normally.
    const rid = h.randomId('after-10k');
    const r = await post(gw, { model, messages: MESSAGES }, { 'x-request-id': rid });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-attempts'], '1');
    const u = await mock.usageFor(rid);
    assert.equal(u.model, 'bk400');
    assert.equal(u.status, 200);
    assert.equal(linesOf('bk400').length, N + 1, 'every request reached the target, one attempt each');
  });

  test('other non-health classes (context_overflow) never open it either', { timeout: 60_000 }, async () => {
    const model = 'mock/bkctx#error=context_length,times=40,tag=bkctx';
    for (let i = 0; i < 40; i++) {
      const r = await post(gw, { model, messages: MESSAGES });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.code, 'context_overflow');
    }
    const r = await post(gw, { model, messages: MESSAGES });
    assert.equal(r.status, 200, r.text);
    assert.equal(linesOf('bkctx').length, 41);
  });

  test('sustained 503 opens it: the target is skipped, the exact selector says breaker_open', { timeout: 60_000 }, async () => {
    // Within the first open interval (5 s, -20% jitter at worst).
    const t0 = Date.now();
    const counts = [];
    for (let i = 0; i < 20; i++) {
      const r = await post(gw, { model: 'br-route', messages: MESSAGES });
      assert.equal(r.status, 200, `request ${i}: ${r.text}`);
      assert.equal(r.headers['x-llmgw-model'], 'br5-b');
      counts.push(linesOf('br5').length);
    }
    const opened = counts.findIndex((c, i) => i > 0 && c === counts[i - 1]);
    assert.ok(opened > 0, `the failing target was tried on every request: ${counts}`);
    assert.ok(counts.at(-1) <= 6, `the breaker opened after ${counts.at(-1)} failures: ${counts}`);
    assert.equal(counts.at(-1), counts[opened], `no attempt reached it once open: ${counts}`);
    const later = await post(gw, { model: 'br-route', messages: MESSAGES });
    assert.equal(later.headers['x-llmgw-attempts'], '1', 'only the backup is tried');

    const exact = await post(gw, { model: 'mock/br5#status=503', messages: MESSAGES });
    assert.equal(exact.status, 503, exact.text);
    assert.equal(exact.json.error.code, 'no_healthy_target');
    assert.equal(exact.json.error.param, 'model');
    assert.deepEqual(exact.json.error.candidates.map((c) => [c.provider, c.model, c.reason]),
      [['mock', 'br5#status=503', 'breaker_open']]);
    assert.ok(Date.now() - t0 < 4000, 'all of it within the open interval');
    assert.equal(linesOf('br5').length, counts.at(-1), 'the exact selector did not reach it either');
    // The other gateway process has its own breakers: the target is tried there.
    const other = await post(gwFast, { model: 'mock/br5#status=503', messages: MESSAGES });
    assert.equal(other.status, 502, other.text);
    assert.equal(other.json.error.code, 'provider_5xx');
  });

  test('a client\'s spent failover budget is not the provider\'s failure', { timeout: 60_000 }, async () => {
    // The target answers after 30 ms; a client allowing 5 ms gets its 504,
    // but the target did nothing wrong and must stay in rotation.
    const model = 'mock/bud#ttfb_ms=30';
    for (let i = 0; i < 5; i++) {
      const r = await post(gw, { model, messages: MESSAGES }, { 'x-llmgw-fallback-timeout-ms': '5' });
      assert.equal(r.status, 504, `impatient request ${i}: ${r.text}`);
      assert.equal(r.json.error.code, 'timeout');
    }
    const r = await post(gw, { model, messages: MESSAGES });
    assert.equal(r.status, 200, `a patient client afterwards: ${r.text}`);
  });

  test('half-open recovery: one probe per interval, a success closes it', { timeout: 60_000 }, async (t) => {
    const MODEL = 'ho';
    const FAILS = 5; // times=5: the target fails 5 times, then is healthy
    const served = [];
    const ask = async () => {
      const r = await post(gwFast, { model: 'ho-route', messages: MESSAGES });
      assert.equal(r.status, 200, r.text);
      served.push({ at: Date.now(), model: r.headers['x-llmgw-model'], attempts: Number(r.headers['x-llmgw-attempts']) });
      return r;
    };
    // Fail until the breaker opens: a request that does not reach the target.
    let before = linesOf(MODEL).length;
    for (let i = 0; i < 10; i++) {
      await ask();
      const now = linesOf(MODEL).length;
      if (now === before) break;
      before = now;
    }
    const consumed = linesOf(MODEL).length;
    assert.ok(consumed >= 3 && consumed < FAILS, `the breaker opened after ${consumed} failures`);

    // Then ask every 40 ms until the target answers again.
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline) {
      const r = await ask();
      if (r.headers['x-llmgw-model'] === 'ho#status=503,times=5,tag=half-open') break;
      await h.sleep(40);
    }
    assert.equal(served.at(-1).model, 'ho#status=503,times=5,tag=half-open', `never recovered: ${JSON.stringify(served)}`);
    const lines = linesOf(MODEL);
    assert.equal(lines.length, FAILS + 1, `one probe per interval: ${lines.map((l) => l.status)}`);
    assert.deepEqual(lines.map((l) => l.status), [...Array(FAILS).fill(503), 200]);
    // Probes are spaced by the open interval (300 ms -20%, doubling after a failed probe).
    const probes = lines.slice(consumed - 1);
    for (let i = 1; i < probes.length; i++) {
      const gap = probes[i].ts_ms - probes[i - 1].ts_ms;
      assert.ok(gap >= 230, `probe ${i} came ${gap} ms after the previous failure`);
    }
    t.diagnostic(`opened after ${consumed} failures; probes at +${probes.map((p) => p.ts_ms - probes[0].ts_ms).join(', +')} ms`);

    // Closed: the target serves again, first try.
    for (let i = 0; i < 5; i++) {
      const r = await ask();
      assert.equal(r.headers['x-llmgw-model'], 'ho#status=503,times=5,tag=half-open');
      assert.equal(r.headers['x-llmgw-attempts'], '1');
    }
  });
});
