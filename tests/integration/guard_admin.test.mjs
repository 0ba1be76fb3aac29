// The control plane's guardrails configuration (issue 23) against a real
// PostgreSQL: migration 17's default rules, /v1/admin/guard-rules (CRUD,
// ETag / If-Match, audit rows, validation naming the field), a route's
// guard and judge objects and a key's and a team's guard_policy (stored
// with their defaults, refusals naming the member), and the snapshot
// document a data plane gets (read through a bare Watch client that dumps
// what it receives). Contract: docs/controlplane.md, docs/openapi.yaml,
// the shared spec.

import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const DEFAULTS = JSON.parse(fs.readFileSync(path.join(h.REPO_ROOT, 'common', 'guard_rules.json'), 'utf8')).rules;
const TEMPLATE = 'Rate the answer from 1 to 5.\nQuestion: {{prompt}}\nAnswer: {{answer}}';
let pg;
let cp;
let dumpDir; // what a whole-document watcher received, by version
let deltaDir; // what a delta watcher received

const byteOrder = (a, b) => (Buffer.from(a).compare(Buffer.from(b)));
const auditOf = (resource, id) => pg.sql(`SELECT string_agg(action, ',' ORDER BY id) FROM audit_log WHERE resource = '${resource}' AND resource_id = '${id}'`);

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.WATCH_CLIENT_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg });
  assert.equal((await cp.admin('POST', '/v1/admin/providers', { name: 'gp', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' })).status, 201);
  for (const [name, capability] of [['chat-a', 'chat'], ['classifier', 'chat'], ['judge', 'chat'], ['embed', 'embeddings']]) {
    const r = await cp.admin('POST', '/v1/admin/routes', { name, capability, entries: [{ provider: 'gp', model: `m-${name}` }] });
    assert.equal(r.status, 201, r.text);
  }
  dumpDir = h.makeTmpDir();
  deltaDir = h.makeTmpDir();
  const target = `127.0.0.1:${cp.listening.grpc_port}`;
  await h.startWatchClient({ target, replicaId: 'guard-whole', dump: dumpDir });
  await h.startWatchClient({ target, replicaId: 'guard-delta', acceptsDelta: true, dump: deltaDir });
});

after(async () => {
  await h.stopAll();
});

/** The configuration version of the last write. */
const configVersion = () => Number(pg.sql('SELECT version FROM config_state WHERE id = 1'));

/**
 * The document the watcher got for the builder's current snapshot, once the
 * builder has read every write so far (a write that changes nothing a data
 * plane sees makes no new version).
 */
async function documentNow() {
  const want = configVersion();
  let st;
  await h.waitFor(async () => {
    st = (await cp.admin('GET', '/v1/admin/snapshot')).json;
    return st.config_version >= want && st.published_version >= st.version;
  }, { timeoutMs: 20_000, what: `the builder to read config version ${want}` });
  assert.equal(st.last_error, null, JSON.stringify(st));
  const file = path.join(dumpDir, `${st.version}.json`);
  await h.waitFor(() => fs.existsSync(file), { timeoutMs: 20_000, what: `the watcher's document ${st.version}` });
  const doc = JSON.parse(fs.readFileSync(file, 'utf8'));
  assert.equal(doc.version, st.version);
  return doc;
}

/** The deltas the delta watcher got past version v (parsed, in order). */
function deltasAfter(v) {
  return fs.readdirSync(deltaDir).filter((f) => /^\d+\.delta\.json$/.test(f)).map((f) => Number(f.split('.')[0]))
    .filter((n) => n > v).sort((a, b) => a - b)
    .map((n) => JSON.parse(fs.readFileSync(path.join(deltaDir, `${n}.delta.json`), 'utf8')));
}

const enabledRules = async () => (await cp.admin('GET', '/v1/admin/guard-rules')).json.data
  .filter((r) => r.enabled).map(({ id, severity, description, kind, pattern }) => ({ id, severity, description, kind, pattern }))
  .sort((a, b) => byteOrder(a.id, b.id));

describe('guard rules', () => {
  test('migration 17 seeds the defaults of common/guard_rules.json (id, severity, description, kind, pattern), enabled', T, async () => {
    assert.ok(Number(pg.sql('SELECT max(version) FROM schema_migrations')) >= 17);
    assert.equal(pg.sql('SELECT count(*) FROM schema_migrations WHERE version = 17'), '1');
    assert.equal(DEFAULTS.length, 12);
    const r = await cp.admin('GET', '/v1/admin/guard-rules');
    assert.equal(r.status, 200, r.text);
    const rows = r.json.data;
    assert.deepEqual(rows.map((x) => x.id).sort(), DEFAULTS.map((x) => x.id).sort());
    for (const d of DEFAULTS) {
      const row = rows.find((x) => x.id === d.id);
      assert.deepEqual({ id: row.id, severity: row.severity, description: row.description, kind: row.kind, pattern: row.pattern },
        { id: d.id, severity: d.severity, description: d.description, kind: d.kind, pattern: d.pattern });
      assert.equal(row.enabled, true);
      assert.equal(row.version, 1);
      for (const k of ['example', 'near_miss']) assert.ok(!(k in row), `${k} is not stored`);
    }
    // The seed is data, not writes: no audit rows.
    assert.equal(pg.sql("SELECT count(*) FROM audit_log WHERE resource = 'guard-rules'"), '0');
    // One of them, by its id, with its ETag.
    const g = await cp.admin('GET', `/v1/admin/guard-rules/${DEFAULTS[0].id}`);
    assert.equal(g.status, 200);
    assert.equal(g.headers.etag, '"1"');
  });

  test('create, get, patch, replace, delete: ETag and If-Match, version in the body, an audit row per write', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/guard-rules', { id: 'acme-codeword', severity: 'medium', kind: 'regex', pattern: ' (open|say) sesame( now)? ' });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.headers.etag, '"1"');
    assert.deepEqual({ ...c.json, created_at: undefined, updated_at: undefined }, {
      id: 'acme-codeword', severity: 'medium', description: '', kind: 'regex', pattern: ' (open|say) sesame( now)? ', enabled: true, version: 1, created_at: undefined, updated_at: undefined,
    });
    h.assertError(await cp.admin('POST', '/v1/admin/guard-rules', { id: 'acme-codeword', severity: 'low', kind: 'phrase', pattern: 'x' }), 409, 'already_exists');
    const g = await cp.admin('GET', '/v1/admin/guard-rules/acme-codeword');
    assert.equal(g.headers.etag, '"1"');
    const p = await cp.admin('PATCH', '/v1/admin/guard-rules/acme-codeword', { description: 'the vault word', severity: 'high' }, { 'if-match': '"1"' });
    assert.equal(p.status, 200, p.text);
    assert.equal(p.headers.etag, '"2"');
    assert.equal(p.json.severity, 'high');
    assert.equal(p.json.pattern, ' (open|say) sesame( now)? ', 'a PATCH keeps what it does not name');
    h.assertError(await cp.admin('PATCH', '/v1/admin/guard-rules/acme-codeword', { enabled: false }, { 'if-match': '"1"' }), 412, 'precondition_failed');
    h.assertError(await cp.admin('PUT', '/v1/admin/guard-rules/acme-codeword', { severity: 'low', kind: 'phrase', pattern: 'open sesame', version: 1 }), 409, 'version_conflict', 'version');
    // PUT replaces: absent fields take their defaults, required ones are required.
    h.assertError(await cp.admin('PUT', '/v1/admin/guard-rules/acme-codeword', { kind: 'phrase', pattern: 'open sesame' }), 400, 'missing_field', 'severity');
    const u = await cp.admin('PUT', '/v1/admin/guard-rules/acme-codeword', { severity: 'low', kind: 'phrase', pattern: 'open sesame', version: 2 });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.description, '', 'PUT: the default again');
    assert.equal(u.json.version, 3);
    h.assertError(await cp.admin('PATCH', '/v1/admin/guard-rules/acme-codeword', { id: 'other' }), 400, 'immutable_field', 'id');
    h.assertError(await cp.admin('DELETE', '/v1/admin/guard-rules/acme-codeword', undefined, { 'if-match': '"2"' }), 412, 'precondition_failed');
    assert.equal((await cp.admin('DELETE', '/v1/admin/guard-rules/acme-codeword', undefined, { 'if-match': '"3"' })).status, 204);
    assert.equal((await cp.admin('GET', '/v1/admin/guard-rules/acme-codeword')).status, 404);
    h.assertError(await cp.admin('DELETE', '/v1/admin/guard-rules/acme-codeword'), 404, 'not_found');
    // Exactly one audit row per write that happened, none for the refusals.
    assert.equal(auditOf('guard-rules', 'acme-codeword'), 'create,update,update,delete');
    const [last] = (await cp.admin('GET', '/v1/admin/audit?limit=1')).json.data;
    assert.equal(last.resource, 'guard-rules');
    assert.equal(last.action, 'delete');
    assert.equal(last.before.pattern, 'open sesame');
    assert.equal(last.after, null);
    // Deleting a default is the operator's right.
    const id = DEFAULTS.at(-1).id;
    assert.equal((await cp.admin('DELETE', `/v1/admin/guard-rules/${id}`)).status, 204);
    assert.equal(auditOf('guard-rules', id), 'delete');
    const d = DEFAULTS.at(-1);
    assert.equal((await cp.admin('POST', '/v1/admin/guard-rules', { id: d.id, severity: d.severity, description: d.description, kind: d.kind, pattern: d.pattern })).status, 201);
  });

  test('validation: each refusal is a 400 naming its field, and writes nothing', T, async () => {
    const ok = { id: 'v-rule', severity: 'low', kind: 'regex', pattern: ' a+b ' };
    const cases = [
      [{ pattern: ' (unclosed ' }, 'invalid_value', 'pattern', /does not compile/],
      [{ pattern: 'a{2,1}' }, 'invalid_value', 'pattern', /does not compile/],
      [{ pattern: ' (a)\\1 ' }, 'invalid_value', 'pattern', /back-reference/],
      [{ pattern: '(x)(y)\\9' }, 'invalid_value', 'pattern', /back-reference/],
      // What every data plane would refuse (with the whole snapshot) the API refuses too.
      [{ kind: 'phrase', pattern: '!!! ???' }, 'invalid_value', 'pattern', /letter or a digit/],
      [{ pattern: '((a{0,100}){0,100}){0,100}' }, 'invalid_value', 'pattern', /too large/],
      [{ pattern: 'a'.repeat(1025) }, 'invalid_value', 'pattern', /at most 1024/],
      [{ pattern: '' }, 'invalid_value', 'pattern', /1 to 1024 bytes/],
      [{ pattern: 5 }, 'invalid_type', 'pattern', /string/],
      [{ pattern: undefined }, 'missing_field', 'pattern', /required/],
      [{ severity: 'critical' }, 'invalid_value', 'severity', /low, medium, high/],
      [{ severity: undefined }, 'missing_field', 'severity', /required/],
      [{ kind: 'glob' }, 'invalid_value', 'kind', /phrase/],
      [{ id: 'Bad_ID' }, 'invalid_value', 'id', /a-z, 0-9/],
      [{ id: '-lead' }, 'invalid_value', 'id', /starting/],
      [{ id: '_lead' }, 'invalid_value', 'id', /starting/],
      [{ id: 'a'.repeat(64) }, 'invalid_value', 'id', /1 to 63/],
      [{ id: 'has space' }, 'invalid_value', 'id', /a-z/],
      [{ id: 'a/b' }, 'invalid_value', 'id', /a-z/],
      [{ id: '' }, 'invalid_value', 'id', /a-z/],
      [{ description: 'd'.repeat(501) }, 'invalid_value', 'description', /at most 500/],
      [{ enabled: 'yes' }, 'invalid_type', 'enabled', /true or false/],
      [{ example: 'Ignore all previous instructions' }, 'unknown_field', 'example', /unknown field/],
    ];
    for (const [change, code, param, msg] of cases) {
      const body = { ...ok, ...change };
      for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
      const e = h.assertError(await cp.admin('POST', '/v1/admin/guard-rules', body), 400, code, param);
      assert.ok(e.message.startsWith(`${param}:`), `the message names the field: ${e.message}`);
      assert.match(e.message, msg);
    }
    assert.equal(pg.sql("SELECT count(*) FROM guard_rules WHERE id LIKE 'v-%' OR id NOT SIMILAR TO '[a-z0-9]%'"), '0');
    // At the bounds: accepted. A phrase may hold "\1" (it is no regex); a
    // regex may hold an escaped character other than a digit.
    for (const [id, extra] of [['v-1024', { pattern: 'a'.repeat(1024) }], ['v-phrase', { kind: 'phrase', pattern: 'say \\1 now' }],
      ['v-escape', { pattern: ' a\\.b[\\]1 ' }], [`v${'x'.repeat(61)}`, {}], ['0-digit_first', { description: 'd'.repeat(500) }]]) {
      const r = await cp.admin('POST', '/v1/admin/guard-rules', { ...ok, id, ...extra });
      assert.equal(r.status, 201, r.text);
      assert.equal((await cp.admin('DELETE', `/v1/admin/guard-rules/${id}`)).status, 204);
    }
    // On an existing rule: refused, the rule as it was.
    assert.equal((await cp.admin('POST', '/v1/admin/guard-rules', ok)).status, 201);
    h.assertError(await cp.admin('PATCH', '/v1/admin/guard-rules/v-rule', { pattern: '(b)\\1' }), 400, 'invalid_value', 'pattern');
    h.assertError(await cp.admin('PATCH', '/v1/admin/guard-rules/v-rule', { pattern: '[z-a]' }), 400, 'invalid_value', 'pattern');
    // The check is the pair's: turning the regex into a phrase makes it valid.
    assert.equal((await cp.admin('PATCH', '/v1/admin/guard-rules/v-rule', { kind: 'phrase', pattern: '(b)\\1' })).status, 200);
    h.assertError(await cp.admin('PATCH', '/v1/admin/guard-rules/v-rule', { kind: 'regex' }), 400, 'invalid_value', 'pattern');
    const row = (await cp.admin('GET', '/v1/admin/guard-rules/v-rule')).json;
    assert.equal(row.kind, 'phrase');
    assert.equal(row.version, 2);
    assert.equal((await cp.admin('DELETE', '/v1/admin/guard-rules/v-rule')).status, 204);
  });
});

const GUARD_DEFAULTS = { inspect: ['last_user'], rules: true, min_severity: 'low', classifier: null };

describe('route guard and judge, key and team guard_policy', () => {
  test('a route\'s guard and judge: stored with their defaults, round trip, replaced whole, null turns them off', T, async () => {
    const e1 = [{ provider: 'gp', model: 'm1' }];
    const c = await cp.admin('POST', '/v1/admin/routes', {
      name: 'guarded', entries: e1, guard: { policy: 'block' }, judge: { sample_rate: 1, route: 'judge', rubric: { template: TEMPLATE } },
    });
    assert.equal(c.status, 201, c.text);
    assert.deepEqual(c.json.guard, { policy: 'block', ...GUARD_DEFAULTS });
    assert.deepEqual(c.json.judge, { sample_rate: 1, route: 'judge', rubric: { template: TEMPLATE, scale_min: 1, scale_max: 5, pass_min: 5 }, keep_text: false });
    // Everything given.
    const full = {
      guard: { policy: 'log', inspect: ['user', 'tool', 'system'], rules: false, min_severity: 'medium', classifier: { route: 'classifier', timeout_ms: 60000, on_error: 'fail_closed' } },
      judge: { sample_rate: 0.25, route: 'judge', rubric: { template: TEMPLATE, scale_min: 0, scale_max: 10, pass_min: 7 }, keep_text: true },
    };
    const u = await cp.admin('PATCH', '/v1/admin/routes/guarded', full);
    assert.equal(u.status, 200, u.text);
    assert.deepEqual(u.json.guard, full.guard);
    assert.deepEqual(u.json.judge, full.judge);
    assert.deepEqual((await cp.admin('GET', '/v1/admin/routes/guarded')).json.guard, full.guard);
    // A classifier with its defaults; another PATCH keeps guard and judge.
    const g2 = await cp.admin('PATCH', '/v1/admin/routes/guarded', { guard: { policy: 'block', classifier: { route: 'classifier' } } });
    assert.deepEqual(g2.json.guard.classifier, { route: 'classifier', timeout_ms: 2000, on_error: 'fail_open' });
    assert.equal(g2.json.guard.rules, true, 'an update that carries guard replaces it whole');
    const kept = await cp.admin('PATCH', '/v1/admin/routes/guarded', { strategy: 'price' });
    assert.deepEqual(kept.json.guard, g2.json.guard);
    assert.deepEqual(kept.json.judge, full.judge);
    // The audit rows carry them.
    const [audit] = (await cp.admin('GET', '/v1/admin/audit?limit=1')).json.data;
    assert.deepEqual(audit.after.guard, g2.json.guard);
    // The columns.
    assert.equal(pg.sql("SELECT guard->>'policy' || ' ' || (judge->>'sample_rate') FROM routes WHERE name = 'guarded'"), 'block 0.25');
    // null: off; a route without them shows null.
    const off = await cp.admin('POST', '/v1/admin/routes', { name: 'plain', entries: e1 });
    assert.equal(off.json.guard, null);
    assert.equal(off.json.judge, null);
    const z = await cp.admin('PATCH', '/v1/admin/routes/guarded', { judge: null });
    assert.equal(z.json.judge, null);
    assert.equal(pg.sql("SELECT judge IS NULL FROM routes WHERE name = 'guarded'"), 't');
    assert.equal((await cp.admin('PATCH', '/v1/admin/routes/guarded', { judge: full.judge })).status, 200);
    // sample_rate 0 and 1 as integers, and a policy "off" guard, are fine.
    assert.equal((await cp.admin('PATCH', '/v1/admin/routes/plain', { guard: { policy: 'off' }, judge: { sample_rate: 0, route: 'judge', rubric: { template: TEMPLATE } } })).status, 200);
    assert.equal((await cp.admin('PATCH', '/v1/admin/routes/plain', { guard: null, judge: null })).status, 200);
  });

  test('a route\'s guard and judge: each refusal names its member (400), and the route stays as it was', T, async () => {
    const e1 = [{ provider: 'gp', model: 'm1' }];
    const judge = { sample_rate: 0.5, route: 'judge', rubric: { template: TEMPLATE } };
    const rubric = (r) => ({ judge: { ...judge, rubric: { template: TEMPLATE, ...r } } });
    const cases = [
      [{ guard: { policy: 'maybe' } }, 'invalid_value', 'guard.policy'],
      [{ guard: { policy: 5 } }, 'invalid_type', 'guard.policy'],
      [{ guard: {} }, 'missing_field', 'guard.policy'],
      [{ guard: 'block' }, 'invalid_type', 'guard'],
      [{ guard: { policy: 'block', mode: 'x' } }, 'unknown_field', 'guard.mode'],
      [{ guard: { policy: 'block', inspect: ['everything'] } }, 'invalid_value', 'guard.inspect'],
      [{ guard: { policy: 'block', inspect: [] } }, 'invalid_value', 'guard.inspect'],
      [{ guard: { policy: 'block', inspect: ['user', 'user'] } }, 'invalid_value', 'guard.inspect'],
      [{ guard: { policy: 'block', inspect: 'user' } }, 'invalid_type', 'guard.inspect'],
      [{ guard: { policy: 'block', rules: 'yes' } }, 'invalid_type', 'guard.rules'],
      [{ guard: { policy: 'block', min_severity: 'critical' } }, 'invalid_value', 'guard.min_severity'],
      [{ guard: { policy: 'block', classifier: 'classifier' } }, 'invalid_type', 'guard.classifier'],
      [{ guard: { policy: 'block', classifier: {} } }, 'missing_field', 'guard.classifier.route'],
      [{ guard: { policy: 'block', classifier: { route: 'nope' } } }, 'dangling_reference', 'guard.classifier.route'],
      [{ guard: { policy: 'block', classifier: { route: 'badroute' } } }, 'invalid_value', 'guard.classifier.route'],
      [{ guard: { policy: 'block', classifier: { route: 'embed' } } }, 'invalid_value', 'guard.classifier.route'],
      [{ guard: { policy: 'block', classifier: { route: 'classifier', timeout_ms: 0 } } }, 'invalid_value', 'guard.classifier.timeout_ms'],
      [{ guard: { policy: 'block', classifier: { route: 'classifier', timeout_ms: 60001 } } }, 'invalid_value', 'guard.classifier.timeout_ms'],
      [{ guard: { policy: 'block', classifier: { route: 'classifier', timeout_ms: 1.5 } } }, 'invalid_type', 'guard.classifier.timeout_ms'],
      [{ guard: { policy: 'block', classifier: { route: 'classifier', on_error: 'retry' } } }, 'invalid_value', 'guard.classifier.on_error'],
      [{ guard: { policy: 'block', classifier: { route: 'classifier', model: 'x' } } }, 'unknown_field', 'guard.classifier.model'],
      [{ judge: { ...judge, sample_rate: 1.5 } }, 'invalid_value', 'judge.sample_rate'],
      [{ judge: { ...judge, sample_rate: -0.1 } }, 'invalid_value', 'judge.sample_rate'],
      [{ judge: { ...judge, sample_rate: '0.5' } }, 'invalid_type', 'judge.sample_rate'],
      [{ judge: { route: 'judge', rubric: { template: TEMPLATE } } }, 'missing_field', 'judge.sample_rate'],
      [{ judge: { ...judge, route: undefined } }, 'missing_field', 'judge.route'],
      [{ judge: { ...judge, route: 'nope' } }, 'dangling_reference', 'judge.route'],
      [{ judge: { ...judge, route: 'badroute' } }, 'invalid_value', 'judge.route'],
      [{ judge: { ...judge, rubric: undefined } }, 'missing_field', 'judge.rubric'],
      [{ judge: { ...judge, keep_text: 'yes' } }, 'invalid_type', 'judge.keep_text'],
      [{ judge: { ...judge, extra: 1 } }, 'unknown_field', 'judge.extra'],
      [rubric({ template: 'Rate {{prompt}} well' }), 'invalid_value', 'judge.rubric.template'],
      [rubric({ template: 'Rate {{answer}} well' }), 'invalid_value', 'judge.rubric.template'],
      [rubric({ template: `{{prompt}} {{answer}} ${'x'.repeat(8192)}` }), 'invalid_value', 'judge.rubric.template'],
      [rubric({ template: undefined }), 'missing_field', 'judge.rubric.template'],
      [rubric({ scale_max: 101 }), 'invalid_value', 'judge.rubric.scale_max'],
      [rubric({ scale_min: 5, scale_max: 5 }), 'invalid_value', 'judge.rubric.scale_max'],
      [rubric({ scale_min: 6 }), 'invalid_value', 'judge.rubric.scale_max'],
      [rubric({ scale_min: -1 }), 'invalid_value', 'judge.rubric.scale_min'],
      [rubric({ pass_min: 6 }), 'invalid_value', 'judge.rubric.pass_min'],
      [rubric({ pass_min: 0 }), 'invalid_value', 'judge.rubric.pass_min'],
      [rubric({ scale_min: 2, scale_max: 4, pass_min: 1 }), 'invalid_value', 'judge.rubric.pass_min'],
      [rubric({ weights: [1] }), 'unknown_field', 'judge.rubric.weights'],
    ];
    for (const [extra, code, param] of cases) {
      const body = { name: 'badroute', entries: e1, ...extra };
      if (body.judge) for (const k of Object.keys(body.judge)) if (body.judge[k] === undefined) delete body.judge[k];
      if (body.judge?.rubric) for (const k of Object.keys(body.judge.rubric)) if (body.judge.rubric[k] === undefined) delete body.judge.rubric[k];
      const e = h.assertError(await cp.admin('POST', '/v1/admin/routes', body), 400, code, param);
      assert.ok(e.message.startsWith(param), `the message names the member: ${e.message}`);
    }
    assert.equal((await cp.admin('GET', '/v1/admin/routes/badroute')).status, 404);
    // On an existing route: refused, the route as it was.
    const before = (await cp.admin('GET', '/v1/admin/routes/guarded')).json;
    h.assertError(await cp.admin('PATCH', '/v1/admin/routes/guarded', { guard: { policy: 'block', classifier: { route: 'guarded' } } }), 400, 'invalid_value', 'guard.classifier.route');
    h.assertError(await cp.admin('PATCH', '/v1/admin/routes/guarded', { judge: { ...judge, route: 'guarded' } }), 400, 'invalid_value', 'judge.route');
    h.assertError(await cp.admin('PUT', '/v1/admin/routes/guarded', { entries: e1, judge: { ...judge, sample_rate: 1.5 } }), 400, 'invalid_value', 'judge.sample_rate');
    const now = (await cp.admin('GET', '/v1/admin/routes/guarded')).json;
    assert.deepEqual(now, before);
  });

  test('a route another route\'s guard or judge names cannot be deleted (409 naming them)', T, async () => {
    const e = h.assertError(await cp.admin('DELETE', '/v1/admin/routes/judge'), 409, 'in_use');
    assert.match(e.message, /guarded/);
    const e2 = h.assertError(await cp.admin('DELETE', '/v1/admin/routes/classifier'), 409, 'in_use');
    assert.match(e2.message, /guarded/);
    assert.equal((await cp.admin('GET', '/v1/admin/routes/judge')).status, 200);
    // Nor can it stop serving chat.
    const c = h.assertError(await cp.admin('PATCH', '/v1/admin/routes/judge', { capability: 'embeddings' }), 400, 'invalid_value', 'capability');
    assert.match(c.message, /guarded/);
    assert.equal((await cp.admin('GET', '/v1/admin/routes/judge')).json.capability, 'chat');
    // A route's own settings never hold it (it cannot name itself anyway);
    // unreferenced, it goes.
    assert.equal((await cp.admin('POST', '/v1/admin/routes', { name: 'spare', entries: [{ provider: 'gp', model: 'm' }], judge: { sample_rate: 0.1, route: 'judge', rubric: { template: TEMPLATE } } })).status, 201);
    assert.equal((await cp.admin('DELETE', '/v1/admin/routes/spare')).status, 204);
  });

  for (const [kind, table, col] of [['teams', 'teams', 'name'], ['keys', 'api_keys', 'id']]) {
    test(`${kind}: guard_policy null, off, log or block; round trip; "maybe" is a 400 naming it`, T, async () => {
      const id = `gp-${kind}`;
      const c = await cp.admin('POST', `/v1/admin/${kind}`, { [col === 'id' ? 'id' : 'name']: id });
      assert.equal(c.status, 201, c.text);
      assert.equal(c.json.guard_policy, null, 'absent: the route\'s');
      for (const v of ['off', 'log', 'block', null, 'block']) {
        const u = await cp.admin('PATCH', `/v1/admin/${kind}/${id}`, { guard_policy: v });
        assert.equal(u.status, 200, u.text);
        assert.equal(u.json.guard_policy, v);
        assert.equal(pg.sql(`SELECT coalesce(guard_policy, 'null') FROM ${table} WHERE ${col} = '${id}'`), v ?? 'null');
      }
      for (const [v, code] of [['maybe', 'invalid_value'], ['BLOCK', 'invalid_value'], [true, 'invalid_type'], [1, 'invalid_type']]) {
        const e = h.assertError(await cp.admin('PATCH', `/v1/admin/${kind}/${id}`, { guard_policy: v }), 400, code, 'guard_policy');
        assert.ok(e.message.startsWith('guard_policy:'), e.message);
        h.assertError(await cp.admin('POST', `/v1/admin/${kind}`, { [col === 'id' ? 'id' : 'name']: `${id}-bad`, guard_policy: v }), 400, code, 'guard_policy');
      }
      assert.equal(pg.sql(`SELECT guard_policy FROM ${table} WHERE ${col} = '${id}'`), 'block', 'refused writes changed nothing');
      assert.equal(pg.sql(`SELECT count(*) FROM ${table} WHERE ${col} = '${id}-bad'`), '0');
    });
  }
});

describe('the snapshot document', () => {
  test('carries the enabled guard rules in id order, a route\'s guard and judge and a key\'s and a team\'s guard_policy only where set', T, async () => {
    assert.equal((await cp.admin('POST', '/v1/admin/teams', { name: 'plain-team' })).status, 201);
    assert.equal((await cp.admin('PATCH', '/v1/admin/keys/gp-keys', { team: 'gp-teams', guard_policy: 'log' })).status, 200);
    assert.equal((await cp.admin('POST', '/v1/admin/keys', { id: 'plain-key' })).status, 201);
    const doc = await documentNow();
    assert.ok(Array.isArray(doc.guard_rules), 'guard_rules is always there');
    assert.deepEqual(doc.guard_rules, await enabledRules());
    assert.deepEqual(doc.guard_rules.map((r) => r.id), [...DEFAULTS.map((r) => r.id)].sort(byteOrder));
    for (const r of doc.guard_rules) assert.deepEqual(Object.keys(r).sort(), ['description', 'id', 'kind', 'pattern', 'severity']);
    const route = (n) => doc.routes.find((r) => r.name === n);
    const api = (await cp.admin('GET', '/v1/admin/routes/guarded')).json;
    assert.deepEqual(route('guarded').guard, api.guard);
    assert.deepEqual(route('guarded').judge, api.judge);
    for (const n of ['chat-a', 'plain', 'judge']) {
      assert.ok(route(n), n);
      assert.ok(!('guard' in route(n)) && !('judge' in route(n)), `${n}: no members when not set: ${JSON.stringify(route(n))}`);
    }
    const team = (n) => doc.teams.find((t) => t.name === n);
    const key = (n) => doc.keys.find((k) => k.id === n);
    assert.equal(team('gp-teams').guard_policy, 'block');
    assert.equal(key('gp-keys').guard_policy, 'log');
    assert.ok(!('guard_policy' in team('plain-team')), JSON.stringify(team('plain-team')));
    assert.ok(!('guard_policy' in key('plain-key')), JSON.stringify(key('plain-key')));
    // The rest of a key is as it was (the members appended, not reordered).
    assert.deepEqual(Object.keys(key('gp-keys')).slice(0, 3), ['id', 'hash', 'status']);
  });

  test('every change to the rules or the settings makes a new version; a delta carries guard_rules whole', T, async () => {
    let doc = await documentNow();
    const builds = () => cp.proc.stderrLines.map(h.tryParseJson).filter((j) => j?.msg === 'snapshot built');
    const builtBefore = builds().length;
    const id = DEFAULTS[0].id;
    const changes = [
      ['disable a rule', () => cp.admin('PATCH', `/v1/admin/guard-rules/${id}`, { enabled: false }), (d) => !d.guard_rules.some((r) => r.id === id)],
      ['enable it again', () => cp.admin('PATCH', `/v1/admin/guard-rules/${id}`, { enabled: true }), (d) => d.guard_rules.some((r) => r.id === id)],
      ['a new rule', () => cp.admin('POST', '/v1/admin/guard-rules', { id: '0-first', severity: 'low', kind: 'phrase', pattern: 'zebra crossing' }),
        (d) => d.guard_rules[0].id === '0-first'],
      ['its pattern', () => cp.admin('PATCH', '/v1/admin/guard-rules/0-first', { pattern: 'zebra stripes' }),
        (d) => d.guard_rules[0].pattern === 'zebra stripes'],
      ['its removal', () => cp.admin('DELETE', '/v1/admin/guard-rules/0-first'), (d) => d.guard_rules[0].id !== '0-first'],
      ['a route\'s guard', () => cp.admin('PATCH', '/v1/admin/routes/chat-a', { guard: { policy: 'log' } }),
        (d) => d.routes.find((r) => r.name === 'chat-a').guard?.policy === 'log'],
      ['a route\'s judge', () => cp.admin('PATCH', '/v1/admin/routes/chat-a', { judge: { sample_rate: 0.5, route: 'judge', rubric: { template: TEMPLATE } } }),
        (d) => d.routes.find((r) => r.name === 'chat-a').judge?.sample_rate === 0.5],
      ['its guard off', () => cp.admin('PATCH', '/v1/admin/routes/chat-a', { guard: null, judge: null }),
        (d) => !('guard' in d.routes.find((r) => r.name === 'chat-a'))],
      ['a team\'s policy', () => cp.admin('PATCH', '/v1/admin/teams/plain-team', { guard_policy: 'off' }),
        (d) => d.teams.find((t) => t.name === 'plain-team').guard_policy === 'off'],
      ['a key\'s policy gone', () => cp.admin('PATCH', '/v1/admin/keys/gp-keys', { guard_policy: null }),
        (d) => !('guard_policy' in d.keys.find((k) => k.id === 'gp-keys'))],
    ];
    for (const [what, write, holds] of changes) {
      const from = doc.version;
      const r = await write();
      assert.ok(r.status === 200 || r.status === 201 || r.status === 204, `${what}: ${r.status} ${r.text}`);
      doc = await documentNow();
      assert.ok(doc.version > from, `${what}: a new version (${doc.version} after ${from})`);
      assert.ok(holds(doc), `${what}: ${JSON.stringify(doc.guard_rules.slice(0, 2))}`);
      assert.deepEqual(doc.guard_rules, await enabledRules(), what);
    }
    // Each write was built incrementally (the builder knows the resource).
    const built = builds().slice(builtBefore);
    assert.ok(built.length >= changes.length, `${built.length} builds`);
    for (const b of built) assert.equal(b.incremental, true, JSON.stringify(b));
    // The delta watcher got the rule changes as deltas whose guard_rules is
    // the whole new array (and none for the route and key changes).
    let rulesDeltas;
    await h.waitFor(() => (rulesDeltas = deltasAfter(0).filter((d) => 'guard_rules' in d)).length >= 5, { what: 'the deltas' });
    for (const d of rulesDeltas) assert.ok(Array.isArray(d.guard_rules) && d.guard_rules.length >= DEFAULTS.length - 1, JSON.stringify(d).slice(0, 300));
    assert.ok(rulesDeltas.some((d) => d.guard_rules.length === DEFAULTS.length - 1), 'the one without the disabled rule');
    assert.ok(deltasAfter(0).some((d) => d.routes?.['chat-a'] && !('guard_rules' in d)), 'a route\'s change: no guard_rules');
  });

  test('a rule write that changes nothing a data plane sees publishes nothing new; a dangling classifier or judge route (written with SQL) still builds', T, async () => {
    const doc = await documentNow();
    const rules = JSON.stringify(doc.guard_rules);
    // A disabled rule's edits: audited, not in any snapshot.
    assert.equal((await cp.admin('POST', '/v1/admin/guard-rules', { id: 'zz-off', severity: 'high', kind: 'phrase', pattern: 'quiet', enabled: false })).status, 201);
    assert.equal((await cp.admin('PATCH', '/v1/admin/guard-rules/zz-off', { pattern: 'quieter' })).status, 200);
    await h.waitFor(async () => (await cp.admin('GET', '/v1/admin/snapshot')).json.config_version >= configVersion(), { what: 'the builder to read the writes' });
    const st = (await cp.admin('GET', '/v1/admin/snapshot')).json;
    assert.equal(st.version, doc.version, 'no new snapshot');
    assert.equal(auditOf('guard-rules', 'zz-off'), 'create,update');
    // Referenced routes removed behind the API's back.
    pg.sql(`BEGIN; UPDATE routes SET guard = jsonb_set(guard, '{classifier}', '{"route": "gone", "timeout_ms": 2000, "on_error": "fail_open"}'),
      judge = jsonb_set(judge, '{route}', '"gone-too"') WHERE name = 'guarded';
      UPDATE config_state SET version = version + 1 WHERE id = 1; SELECT pg_notify('llmgw_config', version::text) FROM config_state WHERE id = 1; COMMIT`);
    const d2 = await documentNow();
    assert.ok(d2.version > doc.version);
    const g = d2.routes.find((r) => r.name === 'guarded');
    assert.equal(g.guard.classifier.route, 'gone');
    assert.equal(g.judge.route, 'gone-too');
    assert.equal(JSON.stringify(d2.guard_rules), rules);
  });
});
