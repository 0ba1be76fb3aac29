// The fleet health view (docs/fleet.md) on a local fleet: PostgreSQL, etcd,
// two control planes, three data planes (each given both control planes,
// in different orders), a healthy mock and a mock that serves AFTER
// requests and then answers 503 to everything. The route "fleet" has the
// dying provider first and the healthy one second, so clients never see
// the outage: only the gateway's own bookkeeping does.
//
//  1. Under load through all three data planes (one of them slow), the
//     dying provider starts failing: every data plane stops sending it
//     traffic (but the fleet's probe) within 2 s of the first failure. The
//     requests the dead provider received are counted and printed (the
//     figure in docs/BENCHMARKS.md), as is each data plane's share.
//  2. Both control planes' GET /v1/admin/health agree on the target: down,
//     with one probe holder, and the same view version; every data plane
//     is listed with its control plane and snapshot.
//  3. kill -9 the leader under load: the other leads within the lease TTL
//     (plus etcd's expiry sweep and the follower's retry), runs the
//     singleton job, every data plane reconnects to it, and clients see 0
//     errors throughout.
//  4. etcd stopped under load, then restarted: 0 client errors, each
//     control plane says etcd is down and decides alone meanwhile, and the
//     two views agree again once it is back.
//
// Bounded: every wait has a deadline; the whole file takes about a minute.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import { randomBytes } from 'node:crypto';
import * as h from './harness.mjs';
import { metricValue, scrapeMetrics } from './exposition.mjs';

const TTL_S = 5; // the control planes' lease (the default)
const AFTER = 150; // requests the dying mock serves before it fails
const T = { timeout: 60_000 };

let pg;
let etcd;
let token;
let apiKey;
let healthy;
let dying;
const cps = {}; // id -> ControlPlane
const dps = []; // [{id, gw}]
let load;

function startCp(id) {
  return h.startControlPlane({
    pg, token,
    args: ['--etcd-endpoints', etcd.endpoint, '--replica-id', id, '--etcd-lease-ttl-s', String(TTL_S)],
    env: { LLMGW_SNAPSHOT_POLL_MS: '1000' },
  }).then((cp) => { cps[id] = cp; return cp; });
}

async function health(cp) {
  const r = await cp.admin('GET', '/v1/admin/health');
  assert.equal(r.status, 200, r.text);
  return r.json;
}

const target = (hl) => hl.fleet?.targets?.find((t) => t.provider === 'dying' && t.model === 'mock-gpt');

/** Client load: one sequential client per data plane with its own pace;
 * every answer must be a 200. Request ids say which data plane sent it. */
function startLoad(gapsMs) {
  const st = { stop: false, sent: 0, errors: [], byDp: dps.map(() => 0) };
  const body = { model: 'fleet', messages: [{ role: 'user', content: 'hello fleet' }], max_tokens: 8 };
  st.done = Promise.all(dps.map(async ({ id, gw }, i) => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    for (let n = 0; !st.stop; n++) {
      const rid = `${id}-${randomBytes(3).toString('hex')}-${n}`;
      try {
        const r = await h.request(gw.port, {
          body, agent, timeoutMs: 20_000,
          headers: { authorization: `Bearer ${apiKey}`, 'x-request-id': rid },
        });
        if (r.status !== 200) st.errors.push(`${rid}: ${r.status} ${r.text.slice(0, 300)}`);
      } catch (e) {
        st.errors.push(`${rid}: ${e.message}`);
      }
      st.sent++;
      st.byDp[i]++;
      await h.sleep(gapsMs[i]);
    }
    agent.destroy();
  }));
  st.finish = async () => { st.stop = true; await st.done; return st; };
  return st;
}

/** The data plane (index in dps) a usage-log line's request came from. */
const dpOf = (line) => dps.findIndex(({ id }) => (line.x_request_id ?? '').startsWith(`${id}-`));

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  pg = await h.startPostgres();
  etcd = await h.startEtcd();
  token = `llmgw-admin-${randomBytes(12).toString('hex')}`;
  await startCp('cp-1');
  await startCp('cp-2');
  healthy = await h.startMock();
  dying = await h.startMock({ args: ['--fault', `status=503,after=${AFTER}`] });
  const cp = cps['cp-1'];
  const ok = async (r, want) => { const x = await r; assert.equal(x.status, want, x.text); return x.json; };
  await ok(cp.admin('POST', '/v1/admin/providers', { name: 'dying', driver: 'openai', base_url: dying.v1 }), 201);
  await ok(cp.admin('POST', '/v1/admin/providers', { name: 'healthy', driver: 'openai', base_url: healthy.v1 }), 201);
  await ok(cp.admin('POST', '/v1/admin/routes', {
    name: 'fleet',
    entries: [{ provider: 'dying', model: 'mock-gpt' }, { provider: 'healthy', model: 'mock-gpt' }],
  }), 201);
  apiKey = (await ok(cp.admin('POST', '/v1/admin/keys', { name: 'fleet-test' }), 201)).key;
  const g = (p) => `127.0.0.1:${cps[p].listening.grpc_port}`;
  const orders = [['cp-1', 'cp-2'], ['cp-2', 'cp-1'], ['cp-1', 'cp-2']];
  for (const [i, order] of orders.entries()) {
    const id = `dp-${i + 1}`;
    const gw = await h.startGatewayCP({ controlPlane: order.map(g).join(','), replicaId: id, threads: 1 });
    dps.push({ id, gw });
  }
  // Every data plane serves the route before the load starts.
  for (const { gw } of dps) {
    await h.waitFor(async () => (await h.request(gw.port, {
      body: { model: 'fleet', messages: [{ role: 'user', content: 'warm' }] },
      headers: { authorization: `Bearer ${apiKey}` },
    })).status === 200, { timeoutMs: 20_000, intervalMs: 100, what: 'the route served' });
  }
});

after(async () => {
  if (load && !load.stop) await load.finish();
  await h.stopAll();
});

describe('the fleet health view', () => {
  test('a provider that starts failing under load: every data plane stops within 2 s', T, async () => {
    // dp-1 and dp-2 busy, dp-3 slow (one request every 400 ms).
    load = startLoad([15, 15, 400]);
    const first = await h.waitFor(() => dying.readUsage().find((l) => l.status === 503),
      { timeoutMs: 30_000, intervalMs: 20, what: 'the first 503 of the dying provider' });
    const t0 = first.ts_ms;
    // Until the fleet agrees and everyone skips it, then a few seconds more.
    await h.waitFor(async () => target(await health(cps['cp-1']))?.state === 'down',
      { timeoutMs: 10_000, intervalMs: 50, what: 'the fleet view says down' });
    const downMs = Date.now() - t0;
    await h.sleep(Math.max(0, 8000 - (Date.now() - t0)));

    const usage = dying.readUsage();
    const dead = usage.filter((l) => l.status === 503);
    const probeIds = new Set(dps.flatMap(({ gw }) => gw.attemptLog()
      .filter((a) => a.fleet_probe && a.provider === 'dying').map((a) => a.attempt_id)));
    const perDp = dps.map(() => ({ total: 0, last: 0, afterTwo: [] }));
    for (const l of dead) {
      const d = perDp[dpOf(l)];
      if (!d) continue;
      d.total++;
      if (probeIds.has(l.x_request_id)) continue;
      d.last = Math.max(d.last, l.ts_ms);
      if (l.ts_ms > t0 + 2000) d.afterTwo.push(l.x_request_id);
    }
    const probes = dead.filter((l) => probeIds.has(l.x_request_id)).length;
    console.log(`# dead provider: ${dead.length} requests in the 8 s after its first failure `
      + `(${perDp.map((d, i) => `${dps[i].id} ${d.total}`).join(', ')}; fleet probes ${probes}); `
      + `each data plane's last non-probe request: ${perDp.map((d, i) => `${dps[i].id} +${d.last ? d.last - t0 : 0} ms`).join(', ')}; `
      + `fleet view down after ${downMs} ms; client requests ${load.sent}`);
    for (const [i, d] of perDp.entries()) {
      assert.deepEqual(d.afterTwo, [], `${dps[i].id} still sent to the dead provider more than 2 s after its first failure`);
    }
    assert.ok(probes <= 2, `at most one probe at a time, every 5 s or more: ${probes}`);
    assert.deepEqual(load.errors, [], 'no client error');
    // The data planes' own word: the view says down, with the reason.
    for (const { gw } of dps) {
      const m = await scrapeMetrics(gw.port);
      assert.equal(metricValue(m.samples, 'llmgw_fleet_target_state', { provider: 'dying', model: 'mock-gpt' }), 2);
    }
    const noRoute = await h.request(dps[0].gw.port, {
      body: { model: 'dying/mock-gpt', messages: [{ role: 'user', content: 'x' }] },
      headers: { authorization: `Bearer ${apiKey}` },
    });
    assert.equal(noRoute.status, 503, noRoute.text);
    assert.ok(noRoute.json.error.candidates.some((c) => c.reason === 'fleet_down' || c.reason === 'breaker_open'),
      noRoute.text);
  });

  test('both control planes agree on the view; every data plane is listed', T, async () => {
    let seen;
    await h.waitFor(async () => {
      seen = await Promise.all(['cp-1', 'cp-2'].map((id) => health(cps[id])));
      const ts = seen.map(target);
      return ts.every((t) => t?.state === 'down') && seen[0].fleet.version === seen[1].fleet.version;
    }, { timeoutMs: 10_000, intervalMs: 100, what: `both views agree: ${JSON.stringify(seen?.map((s) => [s.fleet?.version, target(s)?.state, target(s)?.probe]))}` });
    const [a, b] = seen.map(target);
    assert.deepEqual(a.probe?.replica_id, b.probe?.replica_id);
    assert.ok(a.reasons.length > 0 && a.reasons[0].length > 0, JSON.stringify(a.reasons));
    assert.deepEqual(new Set(seen.map((s) => s.fleet.decided_by)), new Set(['leader', 'follower']));
    // The contributions: all three data planes tried it, through both control planes.
    assert.deepEqual(a.replicas.map((r) => r.replica_id).sort(), ['dp-1', 'dp-2', 'dp-3']);
    assert.ok(a.window.failures.provider_5xx > 0 || a.replicas.some((r) => r.breaker !== 'closed'), JSON.stringify(a));
    for (const s of seen) {
      assert.deepEqual(s.replicas.map((r) => r.replica_id).sort(), ['dp-1', 'dp-2', 'dp-3']);
      for (const r of s.replicas) assert.ok(r.snapshot_version > 0 && ['cp-1', 'cp-2'].includes(r.control_plane), JSON.stringify(r));
    }
    const m = await scrapeMetrics(cps['cp-2'].port);
    assert.equal(metricValue(m.samples, 'llmgw_fleet_target_state', { provider: 'dying', model: 'mock-gpt' }), 2);
    assert.equal(metricValue(m.samples, 'llmgw_cp_fleet_replicas'), 3);
  });

  test('kill -9 the leader: the other takes over within the lease, data planes reconnect, 0 client errors', T, async () => {
    const hs = await Promise.all(['cp-1', 'cp-2'].map((id) => health(cps[id])));
    const leaderId = hs.find((x) => x.leader.self).replica_id;
    const otherId = leaderId === 'cp-1' ? 'cp-2' : 'cp-1';
    const other = cps[otherId];
    const runsBefore = (await health(other)).jobs[0].runs;
    const t0 = Date.now();
    cps[leaderId].proc.nonZeroExitExpected = true;
    cps[leaderId].proc.signal('SIGKILL');
    await cps[leaderId].proc.waitExit(5000);
    // Every data plane is connected to the survivor (those of the dead one
    // moved), and the survivor leads: each time is taken when first seen.
    let reps;
    let takeover;
    let reconnected;
    await h.waitFor(async () => {
      const hl = await health(other);
      const now = Date.now() - t0;
      reps = hl.replicas;
      if (!reconnected && reps.length === 3 && reps.every((r) => r.control_plane === otherId)) reconnected = now;
      if (!takeover && hl.leader.self) takeover = now;
      return takeover && reconnected;
    }, { timeoutMs: (TTL_S + 5) * 1000, intervalMs: 25, what: `${otherId} leads, every data plane on it: ${JSON.stringify(reps)}` });
    await h.waitFor(async () => (await health(other)).jobs[0].runs > runsBefore,
      { timeoutMs: 5000, intervalMs: 50, what: 'the new leader ran the singleton job' });
    await h.sleep(1000);
    console.log(`# kill -9 ${leaderId}: ${otherId} led after ${takeover} ms (lease TTL ${TTL_S} s), `
      + `every data plane on it after ${reconnected} ms; client errors ${load.errors.length} of ${load.sent}`);
    assert.ok(takeover <= TTL_S * 1000 + 1500, `takeover in ${takeover} ms`);
    assert.deepEqual(load.errors, [], 'no client error');
    // The survivor alone decides the view now; it still says down.
    assert.equal(target(await health(other))?.state, 'down');
    // The dead one comes back (same id) for the next test.
    await startCp(leaderId);
  });

  test('etcd stopped under load, then restarted: serving never stops, the views converge again', T, async () => {
    const t0 = Date.now();
    await etcd.stop();
    await h.waitFor(async () => {
      const hs = await Promise.all(['cp-1', 'cp-2'].map((id) => health(cps[id])));
      return hs.every((x) => x.etcd.state === 'down' && x.fleet.etcd === 'down' && x.fleet.decided_by === 'alone');
    }, { timeoutMs: 10_000, intervalMs: 100, what: 'both control planes decide alone' });
    await h.sleep(2000);
    await etcd.start();
    let seen;
    await h.waitFor(async () => {
      seen = await Promise.all(['cp-1', 'cp-2'].map((id) => health(cps[id])));
      return seen.every((x) => x.etcd.state === 'up' && x.fleet.etcd === 'up')
        && new Set(seen.map((x) => x.fleet.decided_by)).size === 2
        && seen[0].fleet.version === seen[1].fleet.version
        && seen.every((x) => x.replicas.length === 3);
    }, { timeoutMs: 20_000, intervalMs: 100, what: `the views agree again: ${JSON.stringify(seen?.map((x) => [x.fleet?.decided_by, x.fleet?.version, x.etcd?.state, x.replicas?.length]))}` });
    const converged = Date.now() - t0;
    const st = await load.finish();
    console.log(`# etcd stopped and restarted: views agree again ${converged} ms after the stop; `
      + `client errors ${st.errors.length} of ${st.sent}; the dead provider got ${dying.readUsage().filter((l) => l.status === 503).length} requests in all`);
    assert.deepEqual(st.errors, [], 'no client error');
    assert.equal(target(seen[0]).state, target(seen[1]).state);
  });
});
