// Strategies scored from the fleet (docs/router.md, "Scores from the
// fleet"), end to end: PostgreSQL, one control plane, three data planes,
// two mock providers.
//
// Two targets: `cheap/sa`, cheap and fast, and `dear/sb`, dear and slow
// (40 ms to first byte). The cheap one's provider answers 503 to every
// attempt dp-1 sends it (the mock's only_id fault: the data plane sends its
// request id upstream, and dp-1's all start "dp-1-"), and serves dp-2 and
// dp-3: a target failing on one replica only, as when that replica's path
// to it breaks. Three routes order the two by price, latency and auto.
//
// Every attempt dp-1 makes at the cheap target fails: from its own figures
// (a success rate of 0) it would rank it last under every strategy, while
// dp-2 and dp-3 rank it first: one request, two orders, depending on which
// replica the load balancer picked. From the fleet's figures (every
// replica's outcomes merged by the control plane, pushed in the view every
// 2 s) all three rank alike. The test first runs dp-2 and dp-3 alone (a
// fleet in steady state), then adds dp-1, reads each request's order from
// the data planes' request lines ("order", "scored_by"), and checks that
// once the control plane holds enough samples of both targets, all three
// agree within two view periods and keep agreeing, dp-1 included, whose
// own attempts at the cheap target all failed.
//
// Bounded: every wait has a deadline; the file takes about 20 s.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import * as h from './harness.mjs';

const T = { timeout: 90_000 };
const ROUTES = ['by-price', 'by-latency', 'by-auto'];
const VIEW_PERIOD_MS = 2000; // the control plane sends the view at least this often

let pg;
let cp;
let apiKey;
const dps = []; // [{id, gw, agent}]

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg });
  const cheapMock = await h.startMock({ args: ['--fault', 'status=503,only_id=dp-1-'] });
  const dearMock = await h.startMock({ args: ['--fault', 'ttfb_ms=40'] });
  const ok = async (r, want) => { const x = await r; assert.equal(x.status, want, x.text); return x.json; };
  await ok(cp.admin('POST', '/v1/admin/providers',
    { name: 'cheap', driver: 'openai', base_url: cheapMock.v1 }), 201);
  await ok(cp.admin('POST', '/v1/admin/providers', { name: 'dear', driver: 'openai', base_url: dearMock.v1 }), 201);
  await ok(cp.admin('POST', '/v1/admin/catalog', { provider: 'cheap', model: 'sa', input_price: 1, output_price: 1 }), 201);
  await ok(cp.admin('POST', '/v1/admin/catalog', { provider: 'dear', model: 'sb', input_price: 3, output_price: 3 }), 201);
  for (const [name, strategy] of [['by-price', 'price'], ['by-latency', 'latency'], ['by-auto', 'auto']]) {
    await ok(cp.admin('POST', '/v1/admin/routes', {
      name, strategy, entries: [{ provider: 'cheap', model: 'sa' }, { provider: 'dear', model: 'sb' }],
    }), 201);
  }
  apiKey = (await ok(cp.admin('POST', '/v1/admin/keys', { name: 'fleet-scores' }), 201)).key;
  const grpc = `127.0.0.1:${cp.listening.grpc_port}`;
  for (let i = 1; i <= 3; i++) {
    const gw = await h.startGatewayCP({
      controlPlane: grpc, replicaId: `dp-${i}`, threads: 1, args: ['--retry-base-ms', '10'],
    });
    dps.push({ id: `dp-${i}`, gw, agent: new http.Agent({ keepAlive: true, maxSockets: 1 }) });
  }
});

/** Waits until a data plane serves the routes (its snapshot came), with
 * its own request ids: dp-1's first attempts at the cheap target fail, and
 * the dear one answers. */
async function warm({ id, gw }) {
  await h.waitFor(async () => (await h.request(gw.port, {
    body: { model: 'by-price', messages: [{ role: 'user', content: 'warm' }] },
    headers: { authorization: `Bearer ${apiKey}`, 'x-request-id': `${id}-warm-${randomBytes(3).toString('hex')}` },
  })).status === 200, { timeoutMs: 20_000, intervalMs: 100, what: `${id} serves the routes` });
}

after(async () => {
  for (const d of dps) d.agent.destroy();
  await h.stopAll();
});

/** One request per route through each data plane of `which`; resolves
 * with their request lines: {route: [line, ...]} in the order of `which`. */
async function round(which = dps) {
  const out = {};
  for (const route of ROUTES) {
    out[route] = await Promise.all(which.map(async ({ id, gw, agent }) => {
      const rid = `${id}-${route}-${randomBytes(4).toString('hex')}`;
      const r = await h.request(gw.port, {
        agent, body: { model: route, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 },
        headers: { authorization: `Bearer ${apiKey}`, 'x-request-id': rid },
      });
      assert.equal(r.status, 200, `${rid}: ${r.text}`);
      return gw.accessLogFor(rid);
    }));
  }
  return out;
}

const orderOf = (line) => (line.order ?? []).join(' > ');
const agree = (lines) => lines.every((l) => orderOf(l) === orderOf(lines[0]) && l.scored_by === 'fleet');

async function score(provider) {
  const r = await cp.admin('GET', '/v1/admin/health');
  assert.equal(r.status, 200, r.text);
  return r.json.fleet.targets.find((t) => t.provider === provider && t.model === (provider === 'cheap' ? 'sa' : 'sb'))?.score;
}

describe('strategies scored from the fleet', () => {
  test('a target failing on one data plane only: price, latency and auto rank alike on all three', T, async () => {
    // A fleet in steady state: dp-2 and dp-3 serve for a while first.
    await warm(dps[1]);
    await warm(dps[2]);
    const steadyUntil = Date.now() + 2500;
    while (Date.now() < steadyUntil) await round(dps.slice(1));
    await warm(dps[0]);
    let thickAt = 0;
    let agreedAt = 0;
    let last;
    const deadline = Date.now() + 45_000;
    while (Date.now() < deadline) {
      last = await round();
      if (!thickAt) {
        const [a, b] = await Promise.all([score('cheap'), score('dear')]);
        if (a && b && a.attempts_1h >= 20 && b.attempts_1h >= 20 && a.ttfb_samples_5m >= 10 && b.ttfb_samples_5m >= 10) {
          thickAt = Date.now();
        }
      }
      if (thickAt && ROUTES.every((route) => agree(last[route]))) {
        agreedAt = Date.now();
        break;
      }
    }
    const [a, b] = await Promise.all([score('cheap'), score('dear')]);
    console.log(`# fleet scores: cheap ${JSON.stringify(a)}, dear ${JSON.stringify(b)}; `
      + `all three agree ${agreedAt - thickAt} ms after the control plane had enough of both`);
    assert.ok(thickAt, `the control plane gathered 20 attempts and 10 latencies of each target: ${JSON.stringify([a, b])}`);
    assert.ok(agreedAt, `the three data planes agree on every route: ${JSON.stringify(Object.fromEntries(
      ROUTES.map((route) => [route, last[route].map((l) => `${orderOf(l)} (${l.scored_by})`)])))}`);
    assert.ok(agreedAt - thickAt <= 2 * VIEW_PERIOD_MS + 1000,
      `agreement ${agreedAt - thickAt} ms after the fleet's figures were enough (two view periods: ${2 * VIEW_PERIOD_MS} ms)`);
    // The fleet's verdict: failing on one replica of three, the cheap
    // target is still cheaper and faster for the fleet as a whole.
    assert.ok(a.success_permil_1h < 1000 && a.success_permil_1h > 500, JSON.stringify(a));
    assert.equal(b.success_permil_1h, 1000);
    // It holds: five more rounds, every route, every data plane alike.
    for (let i = 0; i < 5; i++) {
      const r = await round();
      for (const route of ROUTES) {
        assert.ok(agree(r[route]), `${route}: ${r[route].map((l) => `${orderOf(l)} (${l.scored_by})`).join(' | ')}`);
        assert.equal(orderOf(r[route][0]), 'cheap/sa > dear/sb', route);
        // dp-1 is served by the dear target (the cheap one fails it, and
        // its own breaker skips it); dp-2 and dp-3 by the cheap one.
        assert.equal(r[route][0].provider, 'dear');
        assert.equal(r[route][1].provider, 'cheap');
        assert.equal(r[route][2].provider, 'cheap');
      }
    }
    // dp-1 ranks the cheap target first although every attempt it made at
    // it failed: from its own figures (a success rate of 0) it would rank
    // it last (tests/unit/contract/router_test.c pins the arithmetic).
    const own = dps[0].gw.attemptLog().filter((l) => l.provider === 'cheap');
    assert.ok(own.length >= 2, JSON.stringify(own));
    assert.deepEqual([...new Set(own.map((l) => l.outcome))], ['failed']);
    // The fleet view itself never called the target down: one replica's
    // breaker of three is degraded at worst.
    for (const { gw } of dps) {
      assert.ok(!gw.proc.stdoutLines.concat(gw.proc.stderrLines)
        .some((l) => /"fleet view: target state".*"provider":"cheap".*"to":"down"/.test(l)));
    }
  });
});
