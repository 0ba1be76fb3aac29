// The control-plane fleet through etcd (docs/controlplane.md, "The fleet:
// etcd"), against a real etcd and a real PostgreSQL:
//  - without etcd, one control plane is the leader of itself and runs the
//    singleton job (ledger partitions);
//  - two control planes on one etcd (one of them given a dead endpoint
//    first): exactly one leader, and both say which
//    one (health, metrics, the /llmgw/leader key); both are members;
//  - kill -9 the leader: the other takes over within the lease TTL (plus
//    the time etcd takes to expire the lease and the follower's next try;
//    printed) and runs the singleton job again (a dropped partition is back);
//  - etcd stopped: both keep answering admin reads and writes, keep building
//    and publishing snapshots, stay ready, and say etcd is down (health
//    degraded, llmgw_cp_etcd_up 0) with no leader;
//  - etcd back: both recover, and again exactly one leads;
//  - etcd over TLS with client certificates: a control plane with the CA and
//    a client certificate leads and registers; one without a certificate,
//    or with plain http, never reaches it and says why.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { makeCertSet } from './certs.mjs';
import { metricValue, promtoolCheck, scrapeMetrics } from './exposition.mjs';

const TTL_S = 5; // the default
const T = { timeout: 120_000 };

let pg;
let etcd;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  pg = await h.startPostgres();
  etcd = await h.startEtcd();
});

after(async () => {
  await h.stopAll();
});

async function health(cp) {
  const r = await cp.admin('GET', '/v1/admin/health');
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function gauges(cp) {
  const { text, samples } = await scrapeMetrics(cp.port);
  return {
    text,
    leader: metricValue(samples, 'llmgw_cp_leader'),
    etcdUp: metricValue(samples, 'llmgw_cp_etcd_up'),
    jobOk: metricValue(samples, 'llmgw_cp_singleton_job_runs_total', { job: 'ledger_partitions', result: 'ok' }),
  };
}

function startCp(id, conninfo, endpoints = etcd.endpoint) {
  return h.startControlPlane({
    conninfo,
    args: ['--etcd-endpoints', endpoints, '--replica-id', id],
    env: { LLMGW_SNAPSHOT_POLL_MS: '500' },
  });
}

/** Waits until every cp in cps is up in etcd and they agree on one leader
 * among them; returns {leader, followers}. */
async function oneLeader(cps, timeoutMs = 20_000) {
  let seen;
  await h.waitFor(async () => {
    const hs = await Promise.all(cps.map(health));
    seen = hs;
    const ids = new Set(hs.map((x) => x.leader.id));
    return hs.every((x) => x.etcd.state === 'up') && ids.size === 1 && !ids.has(null)
      && hs.filter((x) => x.leader.self).length === 1;
  }, { timeoutMs, intervalMs: 100, what: `one leader among ${cps.length}: ${JSON.stringify(seen?.map((x) => [x.replica_id, x.leader, x.etcd.state]))}` });
  const leader = cps[seen.findIndex((x) => x.leader.self)];
  return { leader, followers: cps.filter((c) => c !== leader), id: seen[0].leader.id };
}

function nextPartition(conninfo) {
  return pg.sql("SELECT 'ledger_' || to_char((now() + interval '1 month') AT TIME ZONE 'UTC', 'YYYY_MM')", dbOf(conninfo));
}
function dbOf(conninfo) {
  return /dbname=(\S+)/.exec(conninfo)[1];
}

describe('without etcd', () => {
  test('a single control plane is the leader of itself and runs the singleton job', T, async () => {
    const conninfo = pg.createDatabase('solo');
    const cp = await h.startControlPlane({ conninfo, args: ['--replica-id', 'solo-1'] });
    assert.equal(cp.listening.replica_id, 'solo-1');
    assert.equal(cp.listening.etcd, false);
    await h.waitFor(async () => (await health(cp)).jobs[0]?.runs >= 1, { what: 'the job ran' });
    const hl = await health(cp);
    assert.equal(hl.status, 'ok');
    assert.deepEqual(hl.leader.self, true);
    assert.equal(hl.leader.id, 'solo-1');
    assert.equal(hl.replica_id, 'solo-1');
    assert.equal(hl.etcd.configured, false);
    assert.equal(hl.etcd.state, 'off');
    assert.deepEqual(hl.members.map((m) => m.id), ['solo-1']);
    assert.equal(hl.jobs[0].name, 'ledger_partitions');
    assert.equal(hl.jobs[0].last_ok, true, JSON.stringify(hl.jobs));
    const g = await gauges(cp);
    promtoolCheck(g.text);
    assert.equal(g.leader, 1);
    assert.equal(g.etcdUp, undefined, 'llmgw_cp_etcd_up is absent without etcd');
    assert.equal(g.jobOk, 1);
    const next = nextPartition(conninfo);
    assert.notEqual(pg.sql(`SELECT to_regclass('${next}')`, 'solo'), '');
    await cp.proc.stop();
    assert.equal(cp.proc.exitInfo.code, 0);
  });
});

describe('two control planes on one etcd', { concurrency: false }, () => {
  let conninfo;
  let a;
  let b;
  let c;

  before(async () => {
    conninfo = pg.createDatabase('fleet');
    // One first: it migrates; the second then finds the schema in place.
    a = await startCp('cp-a', conninfo);
    // cp-b's first endpoint is dead: endpoints are tried in turn.
    b = await startCp('cp-b', conninfo, `http://127.0.0.1:${await h.deadPort()},${etcd.endpoint}`);
  });

  test('exactly one leader, and both say which', T, async () => {
    const { leader, followers, id } = await oneLeader([a, b]);
    assert.equal((await health(leader)).replica_id, id);
    assert.equal((await etcd.getPrefix('/llmgw/leader'))['/llmgw/leader'], id);
    const members = await etcd.getPrefix('/llmgw/cp/');
    assert.deepEqual(Object.keys(members).sort(), ['/llmgw/cp/cp-a', '/llmgw/cp/cp-b']);
    assert.equal(JSON.parse(members[`/llmgw/cp/${id}`]).admin, `127.0.0.1:${leader.port}`);
    for (const cp of [a, b]) {
      await h.waitFor(async () => (await health(cp)).members.length === 2, { what: 'both members seen' });
      const hl = await health(cp);
      assert.equal(hl.status, 'ok');
      assert.deepEqual(hl.members.map((m) => m.id), ['cp-a', 'cp-b']);
      assert.equal(hl.etcd.endpoints.at(-1), etcd.endpoint);
      assert.equal(hl.etcd.lease_ttl_s, TTL_S);
    }
    await h.waitFor(async () => (await gauges(leader)).jobOk === 1, { what: 'the leader ran the job' });
    const gl = await gauges(leader);
    const gf = await gauges(followers[0]);
    promtoolCheck(gl.text);
    assert.deepEqual([gl.leader, gl.etcdUp, gf.leader, gf.etcdUp], [1, 1, 0, 1]);
    assert.equal(gf.jobOk, 0, 'a follower does not run singleton jobs');
    assert.equal((await health(followers[0])).jobs[0].runs, 0);
  });

  test('kill -9 the leader: the other takes over within the lease TTL and runs the job', T, async () => {
    const { leader, followers } = await oneLeader([a, b]);
    const follower = followers[0];
    const next = nextPartition(conninfo);
    pg.sql(`DROP TABLE ${next}`, 'fleet');
    const t0 = Date.now();
    leader.proc.nonZeroExitExpected = true;
    leader.proc.signal('SIGKILL');
    await h.waitFor(async () => (await health(follower)).leader.self, {
      timeoutMs: 3 * TTL_S * 1000, intervalMs: 25, what: 'the follower to take over',
    });
    const takeover = Date.now() - t0;
    console.log(`# leader takeover after kill -9: ${takeover} ms (lease TTL ${TTL_S} s)`);
    // The etcd lease is the TTL less 2 s; it outlives its holder by up to
    // its length, then etcd's expiry sweep (every 0.5 s) and the follower's
    // next try (every 250 ms) follow: within the TTL.
    assert.ok(takeover <= TTL_S * 1000, `takeover took ${takeover} ms`);
    await h.waitFor(() => pg.sql(`SELECT to_regclass('${next}') IS NOT NULL`, 'fleet') === 't', {
      what: 'the new leader to recreate the partition',
    });
    const hf = await health(follower);
    assert.ok(hf.jobs[0].runs >= 1 && hf.jobs[0].last_ok, JSON.stringify(hf.jobs));
    assert.equal((await gauges(follower)).leader, 1);
    // The dead one's membership went with its lease.
    const gone = leader === a ? 'cp-a' : 'cp-b';
    await h.waitFor(async () => !(await health(follower)).members.some((m) => m.id === gone), { what: 'the dead member to go' });
    // A third replica joins as a follower.
    c = await startCp('cp-c', conninfo);
    const again = await oneLeader([follower, c]);
    assert.equal(again.leader, follower);
    if (leader === a) a = c; else b = c;
  });

  test('etcd stopped: both keep serving, say etcd is down, and nobody leads', T, async () => {
    await oneLeader([a, b]);
    await etcd.stop();
    for (const cp of [a, b]) {
      // A stopping etcd may first answer with errors of its own; then its
      // port refuses, and health says unreachable.
      await h.waitFor(async () => {
        const e = (await health(cp)).etcd;
        return e.state === 'down' && /unreachable/.test(e.last_error ?? '');
      }, { what: 'etcd down (unreachable) in health' });
      const hl = await health(cp);
      assert.equal(hl.status, 'degraded');
      assert.equal(hl.leader.self, false);
      assert.match(hl.etcd.last_error, /unreachable/);
      const g = await gauges(cp);
      assert.deepEqual([g.leader, g.etcdUp], [0, 0]);
      assert.equal((await h.request(cp.port, { method: 'GET', path: '/readyz' })).status, 200);
      assert.equal((await cp.admin('GET', '/v1/admin/providers')).status, 200);
      // Its own membership stays in its local view.
      assert.ok(hl.members.some((m) => m.id === hl.replica_id));
    }
    // Writes go on, and each replica builds and publishes the new snapshot.
    const before = (await a.admin('GET', '/v1/admin/snapshot')).json.published_version;
    const w = await a.admin('POST', '/v1/admin/providers', { name: 'during-outage', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' });
    assert.equal(w.status, 201, w.text);
    for (const cp of [a, b]) {
      await h.waitFor(async () => (await cp.admin('GET', '/v1/admin/snapshot')).json.published_version > before, {
        what: 'a snapshot built and published while etcd is down',
      });
    }
  });

  test('etcd back: both recover, and again exactly one leads', T, async () => {
    const t0 = Date.now();
    await etcd.start();
    const { id } = await oneLeader([a, b], 30_000);
    console.log(`# recovered with leader ${id} ${Date.now() - t0} ms after etcd was started again`);
    for (const cp of [a, b]) {
      const hl = await health(cp);
      assert.equal(hl.status, 'ok');
      assert.equal(hl.etcd.last_error, null);
      assert.equal((await gauges(cp)).etcdUp, 1);
    }
    await h.waitFor(async () => Object.keys(await etcd.getPrefix('/llmgw/cp/')).length === 2, { what: 'both registered again' });
    // A graceful stop resigns: the other leads at once, not a TTL later.
    const { leader, followers } = await oneLeader([a, b]);
    const t1 = Date.now();
    await leader.proc.stop();
    assert.equal(leader.proc.exitInfo.code, 0);
    await h.waitFor(async () => (await health(followers[0])).leader.self, { timeoutMs: 10_000, intervalMs: 25, what: 'takeover after a resign' });
    console.log(`# leader takeover after SIGTERM (resign): ${Date.now() - t1} ms`);
    assert.ok(Date.now() - t1 < TTL_S * 1000, 'a resignation is faster than an expiry');
  });
});

describe('etcd over TLS (client certificates required)', () => {
  test('with --etcd-ca/--etcd-cert/--etcd-key a control plane leads and registers; without a certificate it is refused and says etcd is down', T, async () => {
    const certs = makeCertSet(h.makeTmpDir());
    const tetcd = await h.startEtcd({
      tls: { ca: certs.ca, cert: certs.cliCert, key: certs.cliKey, serverCert: certs.srvCert, serverKey: certs.srvKey },
    });
    assert.match(tetcd.endpoint, /^https:/);
    const conninfo = pg.createDatabase('etcdtls');
    const good = await h.startControlPlane({
      conninfo,
      args: ['--etcd-endpoints', tetcd.endpoint, '--replica-id', 'cp-tls', '--etcd-ca', certs.ca,
        '--etcd-cert', certs.cliCert, '--etcd-key', certs.cliKey],
    });
    await h.waitFor(async () => {
      const hl = await health(good);
      return hl.etcd.state === 'up' && hl.leader.self;
    }, { timeoutMs: 20_000, what: 'cp-tls leads through etcd over TLS' }).catch(async (err) => {
      throw new Error(`${err.message}; its etcd: ${JSON.stringify((await health(good)).etcd)}`);
    });
    await h.waitFor(async () => Object.keys(await tetcdPrefix(tetcd, certs)).includes('/llmgw/cp/cp-tls'), { what: 'cp-tls registered' });
    // No client certificate: etcd refuses the handshake.
    const anon = await h.startControlPlane({
      conninfo, args: ['--etcd-endpoints', tetcd.endpoint, '--replica-id', 'cp-anon', '--etcd-ca', certs.ca],
    });
    await h.waitFor(async () => (await health(anon)).etcd.last_error?.length > 0, { what: 'cp-anon\'s etcd error' });
    const ha = await health(anon);
    assert.equal(ha.etcd.state, 'down', JSON.stringify(ha.etcd));
    assert.equal(ha.leader.self, false);
    assert.ok(!Object.keys(await tetcdPrefix(tetcd, certs)).includes('/llmgw/cp/cp-anon'));
    // TLS flags with a plain http endpoint: refused at start, naming the flag.
    const p = new h.ManagedProcess('cp-etcd-http', h.CONTROLPLANE_BIN, ['serve', '--check-config', '--grpc-insecure',
      '--etcd-endpoints', `http://127.0.0.1:${tetcd.clientPort}`, '--etcd-ca', certs.ca],
    { env: { ...process.env, LLMGW_DATABASE_URL: conninfo } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    assert.equal((await p.waitExit(h.START_TIMEOUT_MS)).code, 2);
    assert.match(p.stderrText, /--etcd-endpoints URL to be https:\/\//);
    await anon.proc.stop();
    await good.proc.stop();
    await tetcd.stop();
  });
});

/** {key: value} under /llmgw/cp/ on a TLS etcd, through etcdctl-free HTTPS. */
async function tetcdPrefix(e, certs) {
  const { default: https } = await import('node:https');
  const fs = await import('node:fs');
  const b64 = (x) => Buffer.from(x).toString('base64');
  const body = JSON.stringify({ key: b64('/llmgw/cp/'), range_end: b64('/llmgw/cp0') });
  const j = await new Promise((resolve, reject) => {
    const q = https.request({
      host: '127.0.0.1', port: e.clientPort, path: '/v3/kv/range', method: 'POST',
      ca: fs.readFileSync(certs.ca), cert: fs.readFileSync(certs.cliCert), key: fs.readFileSync(certs.cliKey),
      headers: { 'content-type': 'application/json' },
    }, (res) => {
      let t = '';
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(JSON.parse(t)));
    });
    q.on('error', reject);
    q.end(body);
  });
  const out = {};
  for (const kv of j.kvs ?? []) out[Buffer.from(kv.key, 'base64').toString()] = Buffer.from(kv.value ?? '', 'base64').toString();
  return out;
}
