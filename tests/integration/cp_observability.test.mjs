// The control plane's observability (docs/observability.md, "Control
// plane"): PostgreSQL + llmgw-controlplane + one data plane fed by it.
// After a known set of admin requests (writes, a failed validation, a
// version-less duplicate: 409, an unauthenticated one), the control
// plane's GET /metrics passes `promtool check metrics` and counts exactly
// those requests; /readyz is 200 once ready; the data plane's
// llmgw_controlplane_connected is 1 and the control plane sees the replica
// and its acked version. Money: a limit's amount and spend, lease grants,
// the ledger's cost by team and route, a refusal counted on the data plane.
// A canary goes into a secret value, a provider's
// header value and the admin token (and a created API key's plaintext is a
// second one): no line any process prints may hold either. Last, Postgres
// stops (readyz 503, llmgw_cp_postgres_up 0), then the control plane stops
// (the data plane's gauge turns 0).

import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { metricValue, promtoolCheck, scrapeMetrics } from './exposition.mjs';

const T = { timeout: 90_000 };
const KEY = masterKey();
const CANARY = `CNRY${randomBytes(8).toString('hex')}`;

let pg;
let cp;
let cfg;
let mock;
let dp;
let apiKey; // the created key's plaintext: a second canary

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  pg = await h.startPostgres();
  mock = await h.startMock();
  cp = await h.startControlPlane({ pg, token: `adm-${CANARY}`, env: { LLMGW_MASTER_KEY: KEY.hex, LLMGW_SNAPSHOT_POLL_MS: '500' } });
  cfg = new Config(cp, pg, KEY);
});

after(async () => {
  await h.stopAll();
});

// The control plane's business series (team costs, limits) come with an
// admin token only; the data plane's /metrics needs none.
const scrape = (port) => scrapeMetrics(port, port === cp.port ? { authorization: `Bearer ${cp.token}` } : {});
const value = metricValue;

const readyz = (port) => h.request(port, { method: 'GET', path: '/readyz' });

describe('control plane observability', () => {
  test('/readyz is 200 once a first snapshot is built; /metrics needs no token', T, async () => {
    await h.waitFor(async () => (await readyz(cp.port)).status === 200, { what: 'control plane ready' });
    const r = await readyz(cp.port);
    assert.equal(r.json.status, 'ready');
    const { samples } = await scrapeMetrics(cp.port);
    assert.equal(value(samples, 'llmgw_cp_postgres_up'), 1);
    assert.equal(value(samples, 'llmgw_cp_snapshot_version'), 0);
    assert.equal(value(samples, 'llmgw_cp_snapshot_builds_total', { result: 'ok' }), 1);
  });

  test('admin writes, a failed validation, a 409 and a 401: exact counters, promtool accepts the exposition', T, async () => {
    await cfg.secret('canary-secret', `sk-${CANARY}`);
    await cfg.provider({ name: 'mockp', driver: 'openai', base_url: mock.v1, credential_ref: 'canary-secret', headers: { 'x-canary': CANARY } });
    const bad = await cp.admin('POST', '/v1/admin/providers', { name: 'bad', driver: 'no-such-driver', base_url: mock.v1 });
    assert.equal(bad.status, 400, bad.text);
    const dup = await cp.admin('POST', '/v1/admin/providers', { name: 'mockp', driver: 'openai', base_url: mock.v1 });
    assert.equal(dup.status, 409, dup.text);
    const unauth = await cp.admin('GET', '/v1/admin/providers', undefined, { authorization: `Bearer wrong-${CANARY}` });
    assert.equal(unauth.status, 401, unauth.text);
    await cfg.route('obs', [{ provider: 'mockp', model: 'mock-gpt' }]);
    apiKey = await cfg.apiKey('key_obs');
    const list = await cp.admin('GET', '/v1/admin/providers');
    assert.equal(list.status, 200, list.text);
    const v = cfg.version();
    assert.equal(v, 4);

    await h.waitFor(async () => value((await scrape(cp.port)).samples, 'llmgw_cp_snapshot_version') === v,
      { what: `snapshot version ${v} built` });
    const { text, samples } = await scrape(cp.port);
    promtoolCheck(text);
    const req = (resource, method, status) => value(samples, 'llmgw_cp_admin_requests_total', { resource, method, status });
    assert.equal(req('secrets', 'POST', '201'), 1);
    assert.equal(req('providers', 'POST', '201'), 1);
    assert.equal(req('providers', 'POST', '400'), 1);
    assert.equal(req('providers', 'POST', '409'), 1);
    assert.equal(req('providers', 'GET', '401'), 1);
    assert.equal(req('providers', 'GET', '200'), 1);
    assert.equal(req('routes', 'POST', '201'), 1);
    assert.equal(req('keys', 'POST', '201'), 1);
    assert.ok(req('readyz', 'GET', '200') >= 1);
    assert.equal(value(samples, 'llmgw_cp_admin_request_duration_seconds_count', { resource: 'providers' }), 5);
    assert.equal(value(samples, 'llmgw_cp_audit_rows_total'), 4, 'one audit row per committed write');
    assert.equal(value(samples, 'llmgw_cp_unresolved_credentials'), 0);
    assert.equal(value(samples, 'llmgw_cp_postgres_up'), 1);
    assert.ok(value(samples, 'llmgw_cp_snapshot_builds_total', { result: 'ok' }) >= 2);
    assert.equal(value(samples, 'llmgw_cp_snapshot_builds_total', { result: 'failed' }), 0);
    const age = value(samples, 'llmgw_cp_snapshot_last_success_age_seconds');
    assert.ok(age >= 0 && age < 30, `last success age ${age}`);
    // Labels come from the route table: an unknown path is "unknown", not itself.
    const nf = await cp.admin('GET', `/v1/admin/nosuch-${CANARY}`);
    assert.equal(nf.status, 404);
    const after = (await scrape(cp.port)).text;
    assert.ok(!after.includes(CANARY), 'no path in a label');
    assert.match(after, /llmgw_cp_admin_requests_total\{resource="unknown",method="GET",status="404"\} 1/);
  });

  test('a data plane: llmgw_controlplane_connected 1, the replica and its acked version on the control plane', T, async () => {
    dp = await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-obs' });
    const v = cfg.version();
    await h.waitFor(async () => value((await scrape(dp.port)).samples, 'llmgw_controlplane_connected') === 1,
      { what: 'data plane connected' });
    const d = (await scrape(dp.port)).samples;
    assert.equal(value(d, 'llmgw_controlplane_configured'), 1);
    await h.waitFor(async () => value((await scrape(cp.port)).samples, 'llmgw_cp_replica_acked_version', { replica: 'dp-obs' }) === v,
      { what: `dp-obs acking version ${v}` });
    const { text, samples } = await scrape(cp.port);
    promtoolCheck(text);
    assert.equal(value(samples, 'llmgw_cp_replicas_connected'), 1);
    // Its Watch began with the whole document; the delta series is there
    // from the start (proto/README.md, Delta Watch).
    assert.ok(value(samples, 'llmgw_cp_watch_snapshots_sent_total', { kind: 'document' }) >= 1);
    assert.ok(value(samples, 'llmgw_cp_watch_snapshots_sent_total', { kind: 'delta' }) >= 0);
    // The credential reaches the data plane and is used (in memory only).
    const r = await h.request(dp.port, {
      headers: { authorization: `Bearer ${apiKey}` }, body: { model: 'obs', messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(r.status, 200, r.text);
  });

  test('money: a limit\'s amount and spend, lease grants, cost by team and route, a refusal on the data plane', T, async () => {
    await cfg.api('POST', '/v1/admin/teams', { name: 'obs-team' }, 201);
    const teamKey = await cfg.apiKey('key_obs_team', { team: 'obs-team' });
    await cfg.api('POST', '/v1/admin/prices', { provider: 'mockp', model: 'mock-gpt', input_price: 1_000_000, output_price: 2_000_000 }, 201);
    await cfg.api('POST', '/v1/admin/limits', { id: 'obs-rpd', scope_kind: 'key', scope: 'key_obs_team', metric: 'requests', period: 'day', amount: 2 }, 201);
    await cfg.api('POST', '/v1/admin/limits', { id: 'obs-off', scope_kind: 'team', scope: 'obs-team', metric: 'cost', period: 'month', amount: 1_000_000_000_000, enabled: false }, 201);
    // The last write (a disabled limit) changes nothing a data plane sees:
    // no new snapshot version. Wait for the builder to have read it, then
    // for the data plane to serve what it published.
    const v = cfg.version();
    const snap = async () => (await cp.admin('GET', '/v1/admin/snapshot')).json;
    await h.waitFor(async () => (await snap())?.config_version >= v, { what: `the builder at configuration version ${v}` });
    const pv = (await snap()).version;
    await h.waitFor(async () => (await readyz(dp.port)).json?.snapshot_version >= pv, { what: `data plane serving version ${pv}` });
    const chat = () => h.request(dp.port, {
      headers: { authorization: `Bearer ${teamKey}` }, body: { model: 'obs', messages: [{ role: 'user', content: 'hi' }] },
    });
    let cost = 0n;
    for (let i = 0; i < 2; i++) {
      const r = await chat();
      assert.equal(r.status, 200, r.text);
      cost += BigInt(r.headers['x-llmgw-cost-picodollars']);
    }
    const refused = await chat();
    assert.equal(refused.status, 429, refused.text);
    assert.equal(refused.json.error.code, 'rate_limited');

    const d = await scrape(dp.port);
    promtoolCheck(d.text);
    assert.equal(value(d.samples, 'llmgw_limit_refusals_total', { cause: 'rate_limited', metric: 'requests', period: 'day' }), 1);
    assert.ok(value(d.samples, 'llmgw_cost_picodollars_total', { route: 'obs', provider: 'mockp', model: 'mock-gpt', currency: 'USD' }) > 0);

    const lim = { limit: 'obs-rpd', scope_kind: 'key', scope: 'key_obs_team', metric: 'requests', period: 'day' };
    const { text, samples } = await h.waitFor(async () => {
      const r = await scrape(cp.port);
      return value(r.samples, 'llmgw_limit_spent', lim) === 2 ? r : null;
    }, { what: 'the two charges in llmgw_limit_spent' });
    promtoolCheck(text);
    assert.equal(value(samples, 'llmgw_limit_amount', lim), 2);
    // a disabled limit is not exported
    assert.ok(!samples.some((x) => x.labels.limit === 'obs-off'), 'disabled limit exported');
    assert.ok(value(samples, 'llmgw_cp_lease_grants_total', { result: 'granted' }) >= 1);
    assert.ok(value(samples, 'llmgw_cp_lease_grants_total', { result: 'depleted' }) >= 1);
    assert.equal(value(samples, 'llmgw_cp_lease_grants_total', { result: 'unallocated' }), 0);
    // exactly the two answers' cost, from the rows the writer stored
    assert.equal(BigInt(value(samples, 'llmgw_cp_ledger_cost_picodollars_total', { team: 'obs-team', route: 'obs', currency: 'USD' })), cost);
    assert.ok(value(samples, 'llmgw_cp_ledger_rows_total', { result: 'inserted' }) >= 3);
    assert.equal(value(samples, 'llmgw_cp_ledger_batch_errors_total'), 0);
    // Without a token, the operations' series only: no team's spend, no
    // limit's amount or spend; a wrong token is a 401.
    const anon = await scrapeMetrics(cp.port);
    assert.ok(value(anon.samples, 'llmgw_cp_ledger_rows_total', { result: 'inserted' }) >= 3);
    assert.doesNotMatch(anon.text, /^(llmgw_cp_ledger_cost_picodollars_total|llmgw_limit_amount|llmgw_limit_spent)\b|obs-team/m);
    const wrong = await h.request(cp.port, { method: 'GET', path: '/metrics', headers: { authorization: 'Bearer not-a-token' } });
    assert.equal(wrong.status, 401, wrong.text);
    // a deleted limit disappears (the limits are read at most every 5 s)
    await cfg.api('DELETE', '/v1/admin/limits/obs-rpd', undefined, 204);
    await h.waitFor(async () => value((await scrape(cp.port)).samples, 'llmgw_limit_amount', lim) === undefined,
      { timeoutMs: 10_000, what: 'the deleted limit gone from the scrape' });
  });

  test('Postgres down: /readyz 503 and llmgw_cp_postgres_up 0', T, async () => {
    await pg.stop();
    await h.waitFor(async () => (await readyz(cp.port)).status === 503, { what: 'control plane unready' });
    const r = await readyz(cp.port);
    assert.equal(r.json.status, 'unready');
    assert.match(r.json.reason, /postgres/);
    const { text, samples } = await scrape(cp.port);
    promtoolCheck(text);
    assert.equal(value(samples, 'llmgw_cp_postgres_up'), 0);
    // the limits are read from the database: absent while it is away
    assert.ok(!samples.some((x) => x.name === 'llmgw_limit_amount' || x.name === 'llmgw_limit_spent'));
    // The Watch stream does not need Postgres: the data plane stays connected.
    assert.equal(value((await scrape(dp.port)).samples, 'llmgw_controlplane_connected'), 1);
    // The admin API authenticates before it touches the database: an
    // anonymous caller gets 401, whatever the database's state, and no
    // caller reads libpq's words (hosts, ports, sockets) in an answer.
    const anon = await h.request(cp.port, { method: 'GET', path: '/v1/admin/providers' });
    assert.equal(anon.status, 401, anon.text);
    const bad = await cp.admin('GET', '/v1/admin/providers', undefined, { authorization: 'Bearer not-a-token' });
    assert.equal(bad.status, 503, bad.text);
    const ok = await cp.admin('GET', '/v1/admin/providers');
    assert.equal(ok.status, 503, ok.text);
    assert.equal(ok.json.error.code, 'database_unavailable');
    assert.equal(ok.headers['retry-after'], '1');
    for (const r of [anon, bad, ok]) {
      assert.doesNotMatch(r.text, /127\.0\.0\.1|\/tmp|socket|port \d|connection to server/i, r.text);
    }
  });

  test('control plane stopped: the data plane\'s llmgw_controlplane_connected turns 0', T, async () => {
    const e = await cp.proc.stop();
    assert.equal(e.code, 0, cp.proc.describe());
    await h.waitFor(async () => value((await scrape(dp.port)).samples, 'llmgw_controlplane_connected') === 0,
      { what: 'data plane disconnected' });
  });

  test('no canary (secret value, header value, admin token, API key plaintext) in any line either process printed', T, async () => {
    for (const p of [cp.proc, dp.proc]) {
      for (const line of [...p.stdoutLines, ...p.stderrLines]) {
        assert.ok(!line.includes(CANARY), `${p.name} printed the canary: ${line}`);
        assert.ok(!line.includes(apiKey), `${p.name} printed the API key: ${line}`);
      }
      assert.ok(p.stdoutLines.length > 0, `${p.name} printed something (the check is not vacuous)`);
    }
  });
});
