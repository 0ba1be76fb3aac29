// Integration tests of llmgw-controlplane against a real PostgreSQL that this
// file starts (and stops): migrations, the admin REST API's providers and
// teams, optimistic concurrency, validation, the audit log, authentication.
// Contract: docs/controlplane.md, docs/openapi.yaml.

import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
let pg;
let cp;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg });
});

after(async () => {
  await h.stopAll();
});

function assertError(res, status, code, param) {
  assert.equal(res.status, status, `status; body: ${res.text}`);
  assert.match(String(res.headers['content-type']), /application\/json/);
  const e = res.json?.error;
  assert.ok(e && typeof e.message === 'string' && e.message.length > 0, `error body: ${res.text}`);
  assert.equal(typeof e.type, 'string');
  if (code !== undefined) assert.equal(e.code, code, `error.code; body: ${res.text}`);
  if (param !== undefined) assert.equal(e.param, param, `error.param; body: ${res.text}`);
  return e;
}

const migrationsApplied = (proc) => proc.stderrLines
  .map(h.tryParseJson).filter((j) => j && j.msg === 'migration applied');

describe('migrations', () => {
  test('from empty, then a re-run is a no-op', T, async () => {
    const conninfo = pg.createDatabase('mig_empty');
    const first = await h.runMigrate({ conninfo });
    assert.equal(first.exitInfo.code, 0, first.describe());
    assert.ok(migrationsApplied(first).length >= 1, first.describe());
    const versions = pg.sql('SELECT string_agg(version::text, \',\' ORDER BY version) FROM schema_migrations', 'mig_empty');
    assert.equal(versions.split(',').length, migrationsApplied(first).length);
    for (const t of ['providers', 'secrets', 'routes', 'route_entries', 'teams', 'projects', 'api_keys',
      'price_overrides', 'model_catalog', 'admin_tokens', 'audit_log', 'config_state']) {
      assert.equal(pg.sql(`SELECT to_regclass('public.${t}') IS NOT NULL`, 'mig_empty'), 't', `table ${t}`);
    }
    const again = await h.runMigrate({ conninfo });
    assert.equal(again.exitInfo.code, 0, again.describe());
    assert.equal(migrationsApplied(again).length, 0, again.describe());
    assert.equal(pg.sql('SELECT string_agg(version::text, \',\' ORDER BY version) FROM schema_migrations', 'mig_empty'), versions);
  });

  test('two migrate processes at once on a fresh database: each migration applied exactly once', T, async () => {
    const conninfo = pg.createDatabase('mig_race');
    const [a, b] = await Promise.all([h.runMigrate({ conninfo }), h.runMigrate({ conninfo })]);
    assert.equal(a.exitInfo.code, 0, a.describe());
    assert.equal(b.exitInfo.code, 0, b.describe());
    const applied = [...migrationsApplied(a), ...migrationsApplied(b)].map((j) => j.version).sort((x, y) => x - y);
    const rows = pg.sql('SELECT string_agg(version::text, \',\' ORDER BY version) FROM schema_migrations', 'mig_race');
    assert.deepEqual(applied.map(String), rows.split(','), 'every migration applied by exactly one of the two');
    assert.equal(pg.sql('SELECT count(*) - count(DISTINCT version) FROM schema_migrations', 'mig_race'), '0');
  });

  test('an unreachable database: migrate exits 1 and says why', T, async () => {
    const port = await h.deadPort();
    const p = await h.runMigrate({ conninfo: `host=127.0.0.1 port=${port} user=postgres dbname=x connect_timeout=2` });
    assert.equal(p.exitInfo.code, 1, p.describe());
    assert.match(p.stderrText, /cannot connect to the database/);
  });

  test('a database that accepts but never answers: the default connect_timeout (5 s) ends the wait', T, async () => {
    const sockets = [];
    const silent = net.createServer((c) => { sockets.push(c); });
    await new Promise((r) => silent.listen(0, '127.0.0.1', r));
    try {
      const t0 = Date.now();
      const p = await h.runMigrate({ conninfo: `host=127.0.0.1 port=${silent.address().port} user=postgres dbname=x`, timeoutMs: 20_000 });
      assert.equal(p.exitInfo.code, 1, p.describe());
      assert.match(p.stderrText, /cannot connect to the database/);
      assert.ok(Date.now() - t0 < 15_000, `took ${Date.now() - t0} ms`);
    } finally {
      for (const c of sockets) c.destroy();
      await new Promise((r) => silent.close(r));
    }
  });
});

describe('daemon', () => {
  test('serve disables core dumps (it holds the master key and plaintext credentials)', T, async () => {
    const limits = readFileSync(`/proc/${cp.proc.pid}/limits`, 'utf8');
    assert.match(limits, /^Max core file size\s+0\s+0\s/m, limits);
  });

  test('a guessable bootstrap token (under 24 characters) is refused at start', T, async () => {
    const p = new h.ManagedProcess('cp-shorttoken', h.CONTROLPLANE_BIN, ['serve', '--check-config', '--grpc-insecure'],
      { env: { ...process.env, LLMGW_DATABASE_URL: 'host=127.0.0.1', LLMGW_ADMIN_TOKEN: 'admin123' } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    assert.equal((await p.waitExit(h.START_TIMEOUT_MS)).code, 2);
    assert.match(p.stderrText, /LLMGW_ADMIN_TOKEN must be at least 24 characters/);
    assert.doesNotMatch(p.stderrText, /admin123/);
  });

  test('listening line and /healthz without a token', T, async () => {
    assert.equal(cp.listening.admin_port, cp.port);
    assert.ok(Number.isInteger(cp.listening.grpc_port));
    const r = await h.request(cp.port, { method: 'GET', path: '/healthz' });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, { status: 'ok', postgres: 'ok' });
  });

  test('GET /v1/admin/openapi.yaml serves docs/openapi.yaml', T, async () => {
    const r = await h.request(cp.port, { method: 'GET', path: '/v1/admin/openapi.yaml' });
    assert.equal(r.status, 200);
    assert.match(String(r.headers['content-type']), /yaml/);
    const fs = await import('node:fs');
    assert.equal(r.text, fs.readFileSync(`${h.REPO_ROOT}/docs/openapi.yaml`, 'utf8'));
  });

  test('the admin token never reaches the logs', T, async () => {
    await cp.admin('GET', '/v1/admin/providers');
    assert.ok(!cp.proc.stderrText.includes(cp.token));
    assert.ok(!cp.proc.stdoutText.includes(cp.token));
  });

  test('SIGTERM stops a second daemon cleanly (exit 0)', T, async () => {
    const other = await h.startControlPlane({ pg });
    const r = await other.admin('GET', '/v1/admin/teams');
    assert.equal(r.status, 200, r.text);
    other.proc.signal('SIGTERM');
    const e = await other.proc.waitExit(10_000);
    assert.deepEqual(e, { code: 0, signal: null }, other.proc.describe());
  });
});

describe('authentication', () => {
  test('no token, a wrong token, a malformed header: 401', T, async () => {
    const none = await h.request(cp.port, { method: 'GET', path: '/v1/admin/providers' });
    assertError(none, 401, 'unauthorized');
    assert.match(String(none.headers['www-authenticate']), /Bearer/);
    assertError(await cp.admin('GET', '/v1/admin/providers', undefined, { authorization: 'Bearer nope' }), 401, 'unauthorized');
    assertError(await cp.admin('GET', '/v1/admin/providers', undefined, { authorization: `Basic ${cp.token}` }), 401, 'unauthorized');
    assertError(await cp.admin('GET', '/v1/admin/providers', undefined, { authorization: `Bearer ${cp.token}x` }), 401, 'unauthorized');
  });

  test('a token from admin_tokens (stored as sha256 hex) works and is the audit actor', T, async () => {
    const tok = h.randomId('adm');
    pg.sql(`INSERT INTO admin_tokens (id, name, hash, scope) VALUES ('tok1', 'ci-robot', '${h.sha256hex(tok)}', 'operator')`);
    const r = await cp.admin('POST', '/v1/admin/teams', { name: 'robots' }, { authorization: `Bearer ${tok}` });
    assert.equal(r.status, 201, r.text);
    const audit = await cp.admin('GET', '/v1/admin/audit?limit=1');
    assert.equal(audit.json.data[0].actor, 'ci-robot');
    assert.equal(audit.json.data[0].resource_id, 'robots');
  });
});

describe('providers', () => {
  const base = (name, extra = {}) => ({ name, driver: 'openai', base_url: 'http://127.0.0.1:9/v1', ...extra });

  test('create, list, get', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/providers', base('p1', { headers: { 'x-extra': '1' } }));
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.name, 'p1');
    assert.equal(c.json.version, 1);
    assert.equal(c.json.enabled, true);
    assert.equal(c.json.first_byte_timeout_ms, 60000);
    assert.deepEqual(c.json.headers, { 'x-extra': '1' });
    assert.deepEqual(c.json.options, {});
    assert.equal(c.json.credential_ref, null);
    assert.equal(c.headers.etag, '"1"');

    const dup = await cp.admin('POST', '/v1/admin/providers', base('p1'));
    assertError(dup, 409, 'already_exists', 'name');

    const l = await cp.admin('GET', '/v1/admin/providers');
    assert.equal(l.status, 200);
    assert.ok(l.json.data.some((p) => p.name === 'p1'));

    const g = await cp.admin('GET', '/v1/admin/providers/p1');
    assert.equal(g.status, 200);
    assert.equal(g.json.base_url, 'http://127.0.0.1:9/v1');
    assert.equal(g.headers.etag, '"1"');

    assertError(await cp.admin('GET', '/v1/admin/providers/nope'), 404, 'not_found');
  });

  test('update with the right version, a stale version (409), If-Match (412), PUT and PATCH', T, async () => {
    await cp.admin('POST', '/v1/admin/providers', base('p2'));
    const u = await cp.admin('PATCH', '/v1/admin/providers/p2', { enabled: false, version: 1 });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.version, 2);
    assert.equal(u.json.enabled, false);
    assert.equal(u.json.driver, 'openai', 'PATCH keeps what it does not name');

    const stale = await cp.admin('PATCH', '/v1/admin/providers/p2', { enabled: true, version: 1 });
    const e = assertError(stale, 409, 'version_conflict', 'version');
    assert.equal(e.current_version, 2);

    const pre = await cp.admin('PATCH', '/v1/admin/providers/p2', { enabled: true }, { 'if-match': '"1"' });
    assert.equal(assertError(pre, 412, 'precondition_failed').current_version, 2);

    const ok = await cp.admin('PUT', '/v1/admin/providers/p2', { driver: 'anthropic', base_url: 'https://a.example' }, { 'if-match': '"2"' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.version, 3);
    assert.equal(ok.json.enabled, true, 'PUT resets what it does not name to the default');
    assert.equal(ok.headers.etag, '"3"');

    assertError(await cp.admin('PATCH', '/v1/admin/providers/p2', { name: 'other' }), 400, 'immutable_field', 'name');
    assertError(await cp.admin('PATCH', '/v1/admin/providers/p2', { enabled: true }, { 'if-match': 'garbage' }), 400, 'invalid_value', 'If-Match');
    assertError(await cp.admin('PATCH', '/v1/admin/providers/nope', { enabled: true }), 404, 'not_found');
    assert.equal((await cp.admin('GET', '/v1/admin/providers/p2')).json.version, 3, 'refused writes changed nothing');
  });

  test('validation failures name the field and the rule', T, async () => {
    const cases = [
      [{ driver: 'openai', base_url: 'http://x' }, 'name', 'missing_field'],
      [base('has/slash'), 'name', 'invalid_value'],
      [base('has space'), 'name', 'invalid_value'],
      [base('p3', { base_url: 'ftp://x' }), 'base_url', 'invalid_value'],
      [{ name: 'p3', driver: 'openai' }, 'base_url', 'missing_field'],
      [base('p3', { enabled: 'yes' }), 'enabled', 'invalid_type'],
      [base('p3', { first_byte_timeout_ms: 0 }), 'first_byte_timeout_ms', 'invalid_value'],
      [base('p3', { idle_timeout_ms: 1.5 }), 'idle_timeout_ms', 'invalid_type'],
      [base('p3', { headers: { 'bad name': 'v' } }), 'headers', 'invalid_value'],
      [base('p3', { headers: [] }), 'headers', 'invalid_type'],
      [base('p3', { options: { capabilities: ['telepathy'] } }), 'options.capabilities', 'invalid_value'],
      [base('p3', { colour: 'red' }), 'colour', 'unknown_field'],
      [base('p3', { driver: 'carrier-pigeon' }), 'driver', 'unknown_driver'],
    ];
    for (const [body, param, code] of cases) {
      const r = await cp.admin('POST', '/v1/admin/providers', body);
      const e = assertError(r, 400, code, param);
      assert.ok(e.message.startsWith(param.split('.')[0]), `message names the field: ${e.message}`);
    }
    const unknown = await cp.admin('POST', '/v1/admin/providers', base('p3', { driver: 'carrier-pigeon' }));
    assert.match(unknown.json.error.message, /supported: .*openai.*anthropic/);
    const notJson = await cp.admin('POST', '/v1/admin/providers', '{"name":');
    assertError(notJson, 400, 'invalid_json');
    assert.equal((await cp.admin('GET', '/v1/admin/providers/p3')).status, 404, 'nothing was created');
  });

  test('credential_ref must name an existing secret', T, async () => {
    const r = await cp.admin('POST', '/v1/admin/providers', base('p4', { credential_ref: 'openai-key' }));
    const e = assertError(r, 400, 'dangling_reference', 'credential_ref');
    assert.match(e.message, /no secret named 'openai-key'/);
    pg.sql("INSERT INTO secrets (name) VALUES ('openai-key')");
    const ok = await cp.admin('POST', '/v1/admin/providers', base('p4', { credential_ref: 'openai-key' }));
    assert.equal(ok.status, 201, ok.text);
    assert.equal(ok.json.credential_ref, 'openai-key');
  });

  test('delete is refused while a route uses the provider, naming the routes', T, async () => {
    await cp.admin('POST', '/v1/admin/providers', base('p5'));
    pg.sql("INSERT INTO routes (name) VALUES ('fast'), ('cheap')");
    pg.sql("INSERT INTO route_entries (route, position, provider, model) VALUES ('fast', 0, 'p5', 'm'), ('cheap', 0, 'p5', 'm')");
    const r = await cp.admin('DELETE', '/v1/admin/providers/p5');
    const e = assertError(r, 409, 'in_use');
    assert.match(e.message, /cheap, fast/);
    pg.sql("DELETE FROM route_entries WHERE provider = 'p5'");
    assertError(await cp.admin('DELETE', '/v1/admin/providers/p5', undefined, { 'if-match': '"7"' }), 412, 'precondition_failed');
    const d = await cp.admin('DELETE', '/v1/admin/providers/p5');
    assert.equal(d.status, 204, d.text);
    assertError(await cp.admin('GET', '/v1/admin/providers/p5'), 404, 'not_found');
    assertError(await cp.admin('DELETE', '/v1/admin/providers/p5'), 404, 'not_found');
  });

  test('405 with Allow', T, async () => {
    const r = await cp.admin('DELETE', '/v1/admin/providers');
    assertError(r, 405, 'method_not_allowed');
    assert.equal(r.headers.allow, 'GET, POST');
    const r2 = await cp.admin('POST', '/v1/admin/providers/p1', {});
    assert.equal(r2.headers.allow, 'GET, PUT, PATCH, DELETE');
    assertError(await cp.admin('GET', '/v1/admin/nothing'), 404, 'not_found');
  });
});

describe('audit log and notifications', () => {
  test('every write: one audit row with before/after, config version bumped, in one transaction', T, async () => {
    const v0 = Number(pg.sql('SELECT version FROM config_state'));
    const c = await cp.admin('POST', '/v1/admin/providers', base6());
    assert.equal(c.status, 201, c.text);
    await cp.admin('PATCH', '/v1/admin/providers/audited', { enabled: false });
    await cp.admin('DELETE', '/v1/admin/providers/audited');
    const rows = (await cp.admin('GET', '/v1/admin/audit?limit=3')).json.data;
    assert.deepEqual(rows.map((r) => r.action), ['delete', 'update', 'create']);
    for (const r of rows) {
      assert.equal(r.resource, 'providers');
      assert.equal(r.resource_id, 'audited');
      assert.equal(r.actor, 'bootstrap');
    }
    const [del, upd, cre] = rows;
    assert.equal(cre.before, null);
    assert.equal(cre.after.enabled, true);
    assert.equal(upd.before.enabled, true);
    assert.equal(upd.after.enabled, false);
    assert.equal(del.before.enabled, false);
    assert.equal(del.after, null);
    assert.deepEqual([cre, upd, del].map((r) => r.config_version), [v0 + 1, v0 + 2, v0 + 3]);
    assert.equal(Number(pg.sql('SELECT version FROM config_state')), v0 + 3);
    // A refused write leaves no trace.
    await cp.admin('POST', '/v1/admin/providers', { name: 'x', driver: 'nope', base_url: 'http://x' });
    assert.equal(Number(pg.sql('SELECT version FROM config_state')), v0 + 3);

    const page = (await cp.admin('GET', '/v1/admin/audit?limit=1&offset=1')).json.data;
    assert.equal(page[0].id, upd.id);
    assertError(await cp.admin('GET', '/v1/admin/audit?limit=0'), 400, 'invalid_value', 'limit');
  });

  function base6() {
    return { name: 'audited', driver: 'ollama', base_url: 'http://127.0.0.1:11434' };
  }
});

describe('notifications', () => {
  test('a write sends pg_notify(llmgw_config, <config version>) at commit', T, async () => {
    // psql reports notifications after each command it runs.
    const psql = spawn('psql', ['-X', '-q', '-At', '-d', pg.conninfo], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    psql.stdout.on('data', (d) => { out += d; });
    psql.stderr.on('data', (d) => { out += d; });
    const closed = new Promise((r) => psql.on('close', r));
    try {
      psql.stdin.write('LISTEN llmgw_config;\nSELECT \'listening\';\n');
      await h.waitFor(() => out.includes('listening'), { what: 'psql to LISTEN' });
      const r = await cp.admin('POST', '/v1/admin/teams', { name: 'notified' });
      assert.equal(r.status, 201, r.text);
      const v = pg.sql('SELECT version FROM config_state');
      const want = `Asynchronous notification "llmgw_config" with payload "${v}"`;
      await h.waitFor(() => {
        psql.stdin.write('SELECT 1;\n');
        return out.includes(want);
      }, { what: `"${want}" in psql's output`, intervalMs: 100 });
    } finally {
      psql.stdin.end();
      await closed;
    }
  });
});

describe('teams', () => {
  test('create, update, delete', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/teams', { name: 'search', description: 'the search team' });
    assert.equal(c.status, 201, c.text);
    const u = await cp.admin('PATCH', '/v1/admin/teams/search', { description: 'search', version: 1 });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.description, 'search');
    assert.equal((await cp.admin('DELETE', '/v1/admin/teams/search')).status, 204);
  });
});
