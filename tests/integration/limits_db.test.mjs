// Budgets and rate limits against a real PostgreSQL (docs/budgets.md):
//  - controlplane_leases_test (tests/unit/controlplane/leases_test.c): the
//    lease authority (cp_leases) and the ledger trigger of migration 5;
//  - the admin API's /v1/admin/limits, /v1/admin/projects and the teams'
//    allowlists, and what the snapshot builder pushes from them.

import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 120_000 };
const LEASES_TEST = path.join(h.BUILD_DIR, 'tests', 'unit', 'controlplane_leases_test');
let pg;
let cp;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, LEASES_TEST]);
  pg = await h.startPostgres();
});

after(async () => {
  await h.stopAll();
});

describe('lease authority (cp_leases) and the ledger trigger', () => {
  test('controlplane_leases_test passes against PostgreSQL', T, () => {
    const conninfo = pg.createDatabase('leases');
    const r = spawnSync(LEASES_TEST, [], {
      encoding: 'utf8', env: { ...process.env, LLMGW_TEST_DATABASE_URL: conninfo }, timeout: 100_000,
    });
    const out = `${r.stdout}\n${r.stderr}`;
    assert.equal(r.status, 0, out);
    const m = out.match(/asserts\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/);
    assert.ok(m && Number(m[4]) === 0 && Number(m[3]) > 30, out);
    console.log(out.split('\n').filter((l) => /grants by|Test:|asserts|tests /.test(l)).join('\n'));
  });
});

describe('admin API: limits, projects, team allowlists', () => {
  before(async () => {
    cp = await h.startControlPlane({ pg, conninfo: pg.createDatabase('api') });
  });

  const post = (p, body) => cp.admin('POST', p, body);

  test('teams carry allowlists and require_budget; projects are a resource', T, async () => {
    let r = await post('/v1/admin/teams', { name: 'eng', allow_providers: ['mock'], require_budget: true });
    assert.equal(r.status, 201, r.text);
    assert.deepEqual(r.json.allow_providers, ['mock']);
    assert.equal(r.json.allow_routes, null);
    assert.equal(r.json.require_budget, true);
    h.assertError(await post('/v1/admin/teams', { name: 'x', allow_models: [''] }), 400, 'invalid_value', 'allow_models');
    h.assertError(await post('/v1/admin/teams', { name: 'y', require_budget: 'yes' }), 400, 'invalid_type', 'require_budget');
    assert.equal((await post('/v1/admin/teams', { name: 'ops' })).status, 201);

    r = await post('/v1/admin/projects', { name: 'search', team: 'eng', description: 'the search app' });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.team, 'eng');
    h.assertError(await post('/v1/admin/projects', { name: 'p2' }), 400, 'missing_field', 'team');
    h.assertError(await post('/v1/admin/projects', { name: 'p2', team: 'nope' }), 400, 'dangling_reference', 'team');
    r = await cp.admin('GET', '/v1/admin/projects');
    assert.deepEqual(r.json.data.map((p) => p.name), ['search']);
    // A key of the project pins its team.
    r = await post('/v1/admin/keys', { id: 'k1', team: 'eng', project: 'search' });
    assert.equal(r.status, 201, r.text);
    h.assertError(await cp.admin('PATCH', '/v1/admin/projects/search', { team: 'ops' }), 409, 'in_use', 'team');
    h.assertError(await cp.admin('DELETE', '/v1/admin/projects/search'), 409, 'in_use');
  });

  test('limits: fields, defaults, scope checks, immutability, deletes', T, async () => {
    let r = await post('/v1/admin/limits', {
      id: 'eng-daily', scope_kind: 'team', scope: 'eng', metric: 'cost', period: 'day', amount: 5_000_000_000_000,
    });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.reservation, 'estimate');
    assert.equal(r.json.offline, 'fail_open');
    assert.equal(r.json.currency, 'USD');
    assert.equal(r.json.enabled, true);
    assert.equal(r.json.version, 1);
    r = await post('/v1/admin/limits', { scope_kind: 'key', scope: 'k1', metric: 'requests', period: 'minute', amount: 60, offline: 'fail_closed' });
    assert.equal(r.status, 201, r.text);
    assert.match(r.json.id, /^lim_[0-9a-f]{16}$/);
    const rpm = r.json.id;
    r = await post('/v1/admin/limits', { id: 'search-tpm', scope_kind: 'project', scope: 'search', metric: 'tokens', period: 'minute', amount: 100000, reservation: 'worst_case' });
    assert.equal(r.status, 201, r.text);

    const base = { scope_kind: 'team', scope: 'eng', metric: 'cost', period: 'day', amount: 1 };
    h.assertError(await post('/v1/admin/limits', { ...base, amount: 0 }), 400, 'invalid_value', 'amount');
    h.assertError(await post('/v1/admin/limits', { ...base, amount: 1.5 }), 400, 'invalid_type', 'amount');
    h.assertError(await post('/v1/admin/limits', { ...base, amount: '5' }), 400, 'invalid_type', 'amount');
    h.assertError(await post('/v1/admin/limits', { ...base, period: 'week' }), 400, 'invalid_value', 'period');
    h.assertError(await post('/v1/admin/limits', { ...base, metric: 'dollars' }), 400, 'invalid_value', 'metric');
    h.assertError(await post('/v1/admin/limits', { ...base, scope_kind: 'org' }), 400, 'invalid_value', 'scope_kind');
    h.assertError(await post('/v1/admin/limits', { ...base, reservation: 'max' }), 400, 'invalid_value', 'reservation');
    h.assertError(await post('/v1/admin/limits', { ...base, offline: 'open' }), 400, 'invalid_value', 'offline');
    h.assertError(await post('/v1/admin/limits', { ...base, scope: 'nope' }), 400, 'dangling_reference', 'scope');
    h.assertError(await post('/v1/admin/limits', { ...base, scope_kind: 'key', scope: 'eng' }), 400, 'dangling_reference', 'scope');
    h.assertError(await post('/v1/admin/limits', { ...base, currency: 'EUR' }), 400, 'invalid_value', 'currency');
    h.assertError(await post('/v1/admin/limits', { ...base, id: 'x'.repeat(64) }), 400, 'invalid_value', 'id');
    const { amount, ...noAmount } = base;
    h.assertError(await post('/v1/admin/limits', noAmount), 400, 'missing_field', 'amount');
    h.assertError(await post('/v1/admin/limits', { ...base, id: 'eng-daily' }), 409, 'already_exists');

    // What a limit counts is fixed; how much, how and whether are not.
    h.assertError(await cp.admin('PATCH', '/v1/admin/limits/eng-daily', { period: 'month' }), 400, 'immutable_field', 'period');
    h.assertError(await cp.admin('PATCH', '/v1/admin/limits/eng-daily', { scope: 'ops' }), 400, 'immutable_field', 'scope');
    r = await cp.admin('PATCH', '/v1/admin/limits/eng-daily', { amount: 7_000_000_000_000, reservation: 'worst_case', offline: 'fail_closed', version: 1 });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.amount, 7_000_000_000_000);
    assert.equal(r.json.version, 2);
    r = await cp.admin('PATCH', `/v1/admin/limits/${rpm}`, { enabled: false });
    assert.equal(r.status, 200, r.text);

    r = await cp.admin('GET', '/v1/admin/limits');
    assert.deepEqual(r.json.data.map((l) => l.id).sort(), ['eng-daily', 'search-tpm', rpm].sort());
    r = await cp.admin('GET', '/v1/admin/audit?limit=3');
    assert.equal(r.json.data[0].resource, 'limits');

    // A team or project with limits is not deleted from under them.
    assert.equal((await post('/v1/admin/limits', { ...base, id: 'ops-day', scope: 'ops' })).status, 201);
    h.assertError(await cp.admin('DELETE', '/v1/admin/teams/ops'), 409, 'in_use');
    assert.equal((await cp.admin('DELETE', '/v1/admin/limits/ops-day')).status, 204);
    assert.equal((await cp.admin('DELETE', '/v1/admin/teams/ops')).status, 204);
  });

  test('the snapshot carries teams, enabled limits, key projects and catalog output caps', T, async () => {
    h.assertError(await cp.admin('DELETE', '/v1/admin/projects/search'), 409, 'in_use');
    let r = await post('/v1/admin/catalog', { model: 'm1', max_output_tokens: 4096, input_price: 1, output_price: 2 });
    assert.equal(r.status, 201, r.text);
    // The builder's document, as a data plane gets it, through a Watch is
    // tested end to end (limits_e2e); here through the SQL it runs.
    await h.waitFor(async () => (await cp.admin('GET', '/v1/admin/snapshot')).json?.last_error === null
      && (await cp.admin('GET', '/v1/admin/snapshot')).json?.version > 0, { what: 'a good build' });
    r = await cp.admin('GET', '/v1/admin/snapshot');
    assert.equal(r.json.last_error, null, r.text);
  });
});
