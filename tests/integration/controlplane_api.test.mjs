// Integration tests of the rest of llmgw-controlplane's admin API against a
// real PostgreSQL: secrets (sealed, write-only, AAD-bound), master-key
// rotation, routes with entries, keys and admin tokens (plaintext once),
// prices and catalog (exact money), health. Contract: docs/controlplane.md,
// docs/openapi.yaml.

import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const KEY1 = randomBytes(32).toString('hex');
const KEY2 = randomBytes(32).toString('base64');
const SECRET_VALUES = []; // every plaintext sent: none may appear anywhere
const PROCS = []; // every control-plane process started: their logs are searched
let pg;
let cp;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY1 } });
  PROCS.push(cp.proc);
});

after(async () => {
  await h.stopAll();
});

const secretValue = (tag) => {
  const v = `sk-${tag}-${randomBytes(12).toString('hex')}`;
  SECRET_VALUES.push(v);
  return v;
};

async function provider(c, name, extra = {}) {
  const r = await c.admin('POST', '/v1/admin/providers', {
    name, driver: 'openai', base_url: 'http://127.0.0.1:9/v1', ...extra,
  });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

async function health(c) {
  const r = await c.admin('GET', '/v1/admin/health');
  assert.equal(r.status, 200, r.text);
  return r.json;
}

const credOf = (hl, name) => hl.providers.find((p) => p.name === name);

describe('secrets', () => {
  test('a malformed body: the 400 names the position, never quotes the body (it may hold a secret)', T, async () => {
    const canary = secretValue('canary');
    const r = await cp.admin('POST', '/v1/admin/secrets', `{"name":"malformed","value":"${canary}\u0001"}`);
    const e = h.assertError(r, 400, 'invalid_json');
    assert.match(e.message, /line \d+, column \d+/);
    assert.ok(!r.text.includes(canary.slice(-12)), `the canary is not in the answer: ${r.text}`);
    assert.equal((await cp.admin('GET', '/v1/admin/secrets/malformed')).status, 404, 'nothing was created');
  });

  test('create: value sealed, never returned; ciphertext in the row is not the plaintext', T, async () => {
    const v = secretValue('openai');
    const c = await cp.admin('POST', '/v1/admin/secrets', { name: 'openai-prod', value: v });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.name, 'openai-prod');
    assert.equal(c.json.backend, 'builtin');
    assert.equal(c.json.version, 1);
    assert.match(c.json.master_key_id, /^[0-9a-f]{8}$/);
    for (const k of ['value', 'ciphertext']) assert.ok(!(k in c.json), `${k} not in the answer`);
    const g = await cp.admin('GET', '/v1/admin/secrets/openai-prod');
    assert.equal(g.status, 200);
    assert.ok(!('value' in g.json) && !('ciphertext' in g.json));
    assert.ok(g.json.created_at && g.json.updated_at);
    const l = await cp.admin('GET', '/v1/admin/secrets');
    assert.ok(l.json.data.some((s) => s.name === 'openai-prod'));
    const hex = pg.sql("SELECT encode(ciphertext, 'hex') FROM secrets WHERE name = 'openai-prod'");
    assert.equal(hex.length / 2, Buffer.byteLength(v) + 29, 'version + nonce + ciphertext + tag');
    assert.ok(!Buffer.from(hex, 'hex').toString('latin1').includes(v), 'not the plaintext');
    assert.ok(!hex.includes(Buffer.from(v).toString('hex')));

    // Update with a new value: a fresh ciphertext; without one: kept.
    const v2 = secretValue('openai2');
    const u = await cp.admin('PATCH', '/v1/admin/secrets/openai-prod', { value: v2, version: 1 });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.version, 2);
    const hex2 = pg.sql("SELECT encode(ciphertext, 'hex') FROM secrets WHERE name = 'openai-prod'");
    assert.notEqual(hex2, hex);
    const keep = await cp.admin('PATCH', '/v1/admin/secrets/openai-prod', {});
    assert.equal(keep.status, 200, keep.text);
    assert.equal(pg.sql("SELECT encode(ciphertext, 'hex') FROM secrets WHERE name = 'openai-prod'"), hex2);
    h.assertError(await cp.admin('PATCH', '/v1/admin/secrets/openai-prod', { value: 'x', version: 1 }), 409, 'version_conflict', 'version');
    h.assertError(await cp.admin('PATCH', '/v1/admin/secrets/openai-prod', { value: 'x' }, { 'if-match': '"1"' }), 412, 'precondition_failed');
  });

  test('validation names the field', T, async () => {
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1' }), 400, 'missing_field', 'value');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', value: '' }), 400, 'invalid_value', 'value');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', value: 5 }), 400, 'invalid_type', 'value');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 'a/b', value: 'x' }), 400, 'invalid_value', 'name');
    // A name is what a credential_ref names: one with ':' would be taken for a backend ref.
    for (const name of ['awssm:x', 'vault:x', 'gcpsm:x', 'a:b', '-lead', 'a+b']) {
      const e = h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name, value: 'x' }), 400, 'invalid_value', 'name');
      assert.match(e.message, /built-in secret name/);
    }
    assert.equal(pg.sql("SELECT count(*) FROM secrets WHERE name LIKE '%:%'"), '0');
    for (const ref of ['awssm:x', 'vault:secret/x#k', 'gcpsm:x']) {
      const r = await cp.admin('POST', '/v1/admin/providers', { name: 'refp', driver: 'openai', base_url: 'http://127.0.0.1:9/v1', credential_ref: ref });
      h.assertError(r, 400, 'invalid_value', 'credential_ref');
    }
    assert.equal((await cp.admin('GET', '/v1/admin/providers/refp')).status, 404);
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', value: 'x', backend: 'gcp' }), 400, 'invalid_value', 'backend');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', backend: 'vault' }), 400, 'missing_field', 'backend_ref');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', backend: 'vault', backend_ref: 'awssm:x' }), 400, 'invalid_value', 'backend_ref');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', backend: 'vault', backend_ref: 'vault:secret/x#k', value: 'v' }), 400, 'invalid_value', 'value');
    h.assertError(await cp.admin('POST', '/v1/admin/secrets', { name: 's1', value: 'x', ciphertext: 'ab' }), 400, 'unknown_field', 'ciphertext');
    assert.equal((await cp.admin('GET', '/v1/admin/secrets/s1')).status, 404);
    const v = await cp.admin('POST', '/v1/admin/secrets', { name: 'vault-one', backend: 'vault', backend_ref: 'vault:secret/llm/openai#api_key' });
    assert.equal(v.status, 201, v.text);
    assert.equal(v.json.master_key_id, null);
  });

  test('delete refused while a provider uses it, naming the providers', T, async () => {
    await cp.admin('POST', '/v1/admin/secrets', { name: 'shared', value: secretValue('shared') });
    await provider(cp, 'sp-b', { credential_ref: 'shared' });
    await provider(cp, 'sp-a', { credential_ref: 'shared' });
    const e = h.assertError(await cp.admin('DELETE', '/v1/admin/secrets/shared'), 409, 'in_use');
    assert.match(e.message, /sp-a, sp-b/);
    await cp.admin('PATCH', '/v1/admin/providers/sp-a', { credential_ref: null });
    await cp.admin('PATCH', '/v1/admin/providers/sp-b', { credential_ref: null });
    assert.equal((await cp.admin('DELETE', '/v1/admin/secrets/shared')).status, 204);
  });

  test('AAD binding: a ciphertext copied onto another row does not open (health says so)', T, async () => {
    await cp.admin('POST', '/v1/admin/secrets', { name: 'victim', value: secretValue('victim') });
    await cp.admin('POST', '/v1/admin/secrets', { name: 'attacker', value: secretValue('attacker') });
    await provider(cp, 'good', { credential_ref: 'victim' });
    await provider(cp, 'evil', { credential_ref: 'attacker' });
    let hl = await health(cp);
    assert.equal(credOf(hl, 'good').credential, 'ok');
    assert.equal(credOf(hl, 'evil').credential, 'ok');
    pg.sql("UPDATE secrets SET ciphertext = (SELECT ciphertext FROM secrets WHERE name = 'victim') WHERE name = 'attacker'");
    hl = await health(cp);
    assert.equal(credOf(hl, 'good').credential, 'ok');
    assert.equal(credOf(hl, 'evil').credential, 'unresolved');
    assert.match(credOf(hl, 'evil').reason, /does not open/);
    assert.equal(hl.status, 'degraded');
    await cp.admin('PATCH', '/v1/admin/providers/evil', { credential_ref: null });
  });

  test('without LLMGW_MASTER_KEY: the daemon serves, secret writes answer 503', T, async () => {
    const other = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: '' } });
    PROCS.push(other.proc);
    const e = h.assertError(await other.admin('POST', '/v1/admin/secrets', { name: 'nokey', value: 'v' }), 503, 'master_key_not_configured');
    assert.match(e.message, /master key is not configured/);
    assert.equal((await other.admin('GET', '/v1/admin/secrets')).status, 200);
    const hl = await health(other);
    assert.deepEqual(hl.master_key, { configured: false });
    assert.equal(credOf(hl, 'good').credential, 'unresolved');
    assert.match(credOf(hl, 'good').reason, /master key is not configured/);
    other.proc.signal('SIGTERM');
    assert.deepEqual(await other.proc.waitExit(10_000), { code: 0, signal: null }, other.proc.describe());
  });
});

describe('routes', () => {
  before(async () => {
    await provider(cp, 'rp1');
    await provider(cp, 'rp2');
  });

  test('create with entries, get, replace entries, delete', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/routes', {
      name: 'fast', aliases: ['quick'], role: 'default',
      entries: [{ provider: 'rp1', model: 'm1' }, { provider: 'rp2', model: 'm2', high_cost: true, tier: 2 }],
    });
    assert.equal(c.status, 201, c.text);
    assert.deepEqual(c.json.entries, [
      { provider: 'rp1', model: 'm1', weight: 1, high_cost: false, tier: 0 },
      { provider: 'rp2', model: 'm2', weight: 1, high_cost: true, tier: 2 },
    ]);
    assert.equal(c.json.capability, 'chat');
    assert.equal(c.json.strategy, 'ordered');
    assert.equal(c.json.fallback_timeout_ms, null, 'no budget of its own: the data plane default');
    assert.equal(c.json.version, 1);
    const u = await cp.admin('PATCH', '/v1/admin/routes/fast', {
      version: 1, entries: [{ provider: 'rp2', model: 'm2' }, { provider: 'rp1', model: 'm1' }],
    });
    assert.equal(u.status, 200, u.text);
    assert.deepEqual(u.json.entries.map((e) => e.provider), ['rp2', 'rp1']);
    assert.equal(pg.sql("SELECT string_agg(provider, ',' ORDER BY position) FROM route_entries WHERE route = 'fast'"), 'rp2,rp1');
    const p = await cp.admin('PATCH', '/v1/admin/routes/fast', { aliases: ['quick', 'speedy'], fallback_timeout_ms: 15000 });
    assert.equal(p.status, 200, p.text);
    assert.equal(p.json.fallback_timeout_ms, 15000);
    assert.equal(pg.sql("SELECT fallback_timeout_ms FROM routes WHERE name = 'fast'"), '15000');
    assert.equal(p.json.entries.length, 2, 'PATCH without entries keeps them');
    h.assertError(await cp.admin('PATCH', '/v1/admin/routes/fast', { aliases: [] }, { 'if-match': '"1"' }), 412, 'precondition_failed');
    h.assertError(await cp.admin('PATCH', '/v1/admin/routes/fast', { aliases: [], version: 2 }), 409, 'version_conflict');
    // The audit rows carry the entries before and after.
    const audit = (await cp.admin('GET', '/v1/admin/audit?limit=2')).json.data;
    assert.equal(audit[0].resource, 'routes');
    assert.deepEqual(audit[1].before.entries.map((e) => e.provider), ['rp1', 'rp2']);
    assert.deepEqual(audit[1].after.entries.map((e) => e.provider), ['rp2', 'rp1']);
    h.assertError(await cp.admin('DELETE', '/v1/admin/providers/rp1'), 409, 'in_use');
    const d = await cp.admin('DELETE', '/v1/admin/routes/fast');
    assert.equal(d.status, 204);
    assert.equal(pg.sql("SELECT count(*) FROM route_entries WHERE route = 'fast'"), '0');
  });

  test('validation: field named, nothing written', T, async () => {
    const e1 = { provider: 'rp1', model: 'm1' };
    const many = Array.from({ length: 33 }, (_, i) => ({ provider: 'rp1', model: `m${i}` }));
    const cases = [
      [{ name: 'r' }, 400, 'missing_field', 'entries'],
      [{ name: 'r', entries: [] }, 400, 'invalid_value', 'entries'],
      [{ name: 'r', entries: many }, 400, 'invalid_value', 'entries'],
      [{ name: 'r', entries: [e1, e1] }, 400, 'invalid_value', 'entries[1].model'],
      [{ name: 'r', entries: [e1, { provider: 'ghost', model: 'x' }] }, 400, 'dangling_reference', 'entries[1].provider'],
      [{ name: 'r', entries: [{ provider: 'rp1' }] }, 400, 'invalid_value', 'entries[0].model'],
      [{ name: 'r', entries: [{ ...e1, weight: -1 }] }, 400, 'invalid_value', 'entries[0].weight'],
      [{ name: 'r', entries: [{ ...e1, tier: 10 }] }, 400, 'invalid_value', 'entries[0].tier'],
      [{ name: 'r', entries: [{ ...e1, colour: 1 }] }, 400, 'unknown_field', 'entries[0].colour'],
      [{ name: 'r', role: 'boss', entries: [e1] }, 400, 'invalid_value', 'role'],
      [{ name: 'r', strategy: 'random', entries: [e1] }, 400, 'invalid_value', 'strategy'],
      [{ name: 'r', fallback_timeout_ms: 0, entries: [e1] }, 400, 'invalid_value', 'fallback_timeout_ms'],
      [{ name: 'r', fallback_timeout_ms: 600001, entries: [e1] }, 400, 'invalid_value', 'fallback_timeout_ms'],
      [{ name: 'r', fallback_timeout_ms: '500', entries: [e1] }, 400, 'invalid_type', 'fallback_timeout_ms'],
      [{ name: 'r', strategy: 'weighted', entries: [{ ...e1, weight: 0 }] }, 400, 'invalid_value', 'entries'],
      [{ name: 'r', role: 'embedding', entries: [e1] }, 400, 'invalid_value', 'capability'],
      [{ name: 'r', role: 'vision', capability: 'chat', entries: [e1] }, 400, 'invalid_value', 'capability'],
      [{ name: 'r', aliases: ['a/b'], entries: [e1] }, 400, 'invalid_value', 'aliases'],
      [{ name: 'r', aliases: ['r'], entries: [e1] }, 400, 'invalid_value', 'aliases'],
    ];
    for (const [body, status, code, param] of cases) {
      const e = h.assertError(await cp.admin('POST', '/v1/admin/routes', body), status, code, param);
      assert.ok(e.message.startsWith(param), `message names the field: ${e.message}`);
    }
    assert.equal((await cp.admin('GET', '/v1/admin/routes/r')).status, 404);
  });

  test('the media capabilities: a route may serve transcription, speech or image', T, async () => {
    for (const cap of ['transcription', 'speech', 'image']) {
      const r = await cp.admin('POST', '/v1/admin/routes', { name: `media-${cap}`, capability: cap, entries: [{ provider: 'rp1', model: `m-${cap}` }] });
      assert.equal(r.status, 201, r.text);
      assert.equal(r.json.capability, cap);
    }
    const bad = h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'media-video', capability: 'video', entries: [{ provider: 'rp1', model: 'v' }] }), 400, 'invalid_value', 'capability');
    assert.match(bad.message, /transcription, speech, image/);
    // Neither the guard's classifier nor a judge may be a media route.
    const g = h.assertError(await cp.admin('POST', '/v1/admin/routes', {
      name: 'media-guarded', entries: [{ provider: 'rp1', model: 'g' }], guard: { policy: 'block', classifier: { route: 'media-speech' } },
    }), 400, 'invalid_value', 'guard.classifier.route');
    assert.match(g.message, /serves speech; name a chat route/);
    for (const cap of ['transcription', 'speech', 'image']) {
      assert.equal((await cp.admin('DELETE', `/v1/admin/routes/media-${cap}`)).status, 204);
    }
  });

  test('roles unique; names, aliases and roles share a namespace', T, async () => {
    const e1 = [{ provider: 'rp1', model: 'm1' }];
    assert.equal((await cp.admin('POST', '/v1/admin/routes', { name: 'main', aliases: ['primary'], role: 'summarize', entries: e1 })).status, 201);
    let e = h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'other', role: 'summarize', entries: e1 }), 409, 'duplicate_role', 'role');
    assert.match(e.message, /route 'main'/);
    e = h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'primary', entries: e1 }), 409, 'name_collision', 'name');
    assert.match(e.message, /route 'main'/);
    h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'x2', aliases: ['main'], entries: e1 }), 409, 'name_collision', 'aliases');
    h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'summarize', entries: e1 }), 409, 'name_collision', 'name');
    // Re-saving the route itself is no collision.
    assert.equal((await cp.admin('PUT', '/v1/admin/routes/main', { aliases: ['primary'], role: 'summarize', entries: e1 })).status, 200);
    assert.equal((await cp.admin('POST', '/v1/admin/routes', { name: 'emb', role: 'embedding', capability: 'embeddings', entries: e1 })).status, 201);
  });

  test('concurrent writes through two replicas: one alias, one winner', T, async () => {
    const other = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY1 } });
    PROCS.push(other.proc);
    const e1 = [{ provider: 'rp1', model: 'm1' }];
    const rs = await Promise.all(Array.from({ length: 10 }, (_, i) =>
      (i % 2 ? other : cp).admin('POST', '/v1/admin/routes', { name: `race-${i}`, aliases: ['contested'], entries: e1 })));
    const statuses = rs.map((r) => r.status).sort();
    assert.deepEqual(statuses, [201, ...Array(9).fill(409)], rs.map((r) => r.text).join('\n'));
    for (const r of rs) if (r.status === 409) assert.equal(r.json.error.code, 'name_collision', r.text);
    assert.equal(pg.sql("SELECT count(*) FROM routes WHERE 'contested' = ANY (aliases)"), '1');
    // The same for a role.
    const rr = await Promise.all(Array.from({ length: 10 }, (_, i) =>
      (i % 2 ? other : cp).admin('POST', '/v1/admin/routes', { name: `vis-${i}`, role: 'vision', capability: 'vision', entries: e1 })));
    assert.deepEqual(rr.map((r) => r.status).sort(), [201, ...Array(9).fill(409)], rr.map((r) => r.text).join('\n'));
    other.proc.signal('SIGTERM');
    assert.deepEqual(await other.proc.waitExit(10_000), { code: 0, signal: null }, other.proc.describe());
  });
});

describe('keys and admin tokens', () => {
  test('key: plaintext once, sha256 stored, never returned; disable with PATCH', T, async () => {
    pg.sql("INSERT INTO teams (name) VALUES ('kt')");
    const c = await cp.admin('POST', '/v1/admin/keys', { name: 'ci', team: 'kt', allow_routes: ['main'], expires_at: '2031-01-02T03:04:05Z' });
    assert.equal(c.status, 201, c.text);
    const plain = c.json.key;
    assert.match(plain, /^llmgw-[0-9a-f]{64}$/);
    SECRET_VALUES.push(plain);
    assert.match(c.json.id, /^key_[0-9a-f]{16}$/);
    assert.equal(c.json.prefix, plain.slice(0, 14));
    assert.ok(!('hash' in c.json));
    assert.equal(c.json.status, 'active');
    assert.deepEqual(c.json.allow_routes, ['main']);
    assert.equal(pg.sql(`SELECT hash FROM api_keys WHERE id = '${c.json.id}'`), h.sha256hex(plain));
    const g = await cp.admin('GET', `/v1/admin/keys/${c.json.id}`);
    assert.ok(!('key' in g.json) && !('hash' in g.json), g.text);
    assert.ok(!(await cp.admin('GET', '/v1/admin/keys')).text.includes(plain));
    const d = await cp.admin('PATCH', `/v1/admin/keys/${c.json.id}`, { status: 'disabled', version: 1 });
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.status, 'disabled');
    assert.ok(!('key' in d.json));
    assert.equal(pg.sql(`SELECT hash FROM api_keys WHERE id = '${c.json.id}'`), h.sha256hex(plain), 'hash kept');
    h.assertError(await cp.admin('PATCH', `/v1/admin/keys/${c.json.id}`, { status: 'active', version: 1 }), 409, 'version_conflict');
    const two = await cp.admin('POST', '/v1/admin/keys', { id: 'named-key' });
    assert.equal(two.status, 201, two.text);
    assert.notEqual(two.json.key, plain);
    SECRET_VALUES.push(two.json.key);
  });

  test('key validation', T, async () => {
    h.assertError(await cp.admin('POST', '/v1/admin/keys', { status: 'paused' }), 400, 'invalid_value', 'status');
    h.assertError(await cp.admin('POST', '/v1/admin/keys', { expires_at: 'tomorrow' }), 400, 'invalid_value', 'expires_at');
    // Well formed, but no such day: Postgres refuses it (SQLSTATE 22008), a 400 not a 500.
    const feb30 = h.assertError(await cp.admin('POST', '/v1/admin/keys', { expires_at: '2030-02-30T00:00:00Z' }), 400, 'invalid_value');
    assert.match(feb30.message, /out of range|invalid/i, feb30.message);
    h.assertError(await cp.admin('POST', '/v1/admin/keys', { team: 'nobody' }), 400, 'dangling_reference', 'team');
    h.assertError(await cp.admin('POST', '/v1/admin/keys', { allow_models: [''] }), 400, 'invalid_value', 'allow_models');
    h.assertError(await cp.admin('POST', '/v1/admin/keys', { hash: 'ab' }), 400, 'unknown_field', 'hash');
  });

  test('admin token: plaintext once, works, hashed, deleted', T, async () => {
    h.assertError(await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'noscope' }), 400, 'missing_field', 'scope');
    h.assertError(await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'noscope', scope: 'root' }), 400, 'invalid_value', 'scope');
    const c = await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'deployer', scope: 'operator' });
    assert.equal(c.status, 201, c.text);
    const tok = c.json.token;
    SECRET_VALUES.push(tok);
    assert.ok(!('hash' in c.json));
    assert.equal(c.json.scope, 'operator');
    assert.equal(pg.sql(`SELECT hash FROM admin_tokens WHERE id = '${c.json.id}'`), h.sha256hex(tok));
    const r = await cp.admin('POST', '/v1/admin/teams', { name: 'by-deployer' }, { authorization: `Bearer ${tok}` });
    assert.equal(r.status, 201, r.text);
    assert.equal((await cp.admin('GET', '/v1/admin/audit?limit=1')).json.data[0].actor, 'deployer');
    assert.ok(!(await cp.admin('GET', '/v1/admin/admin-tokens')).text.includes(tok));
    h.assertError(await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'bootstrap', scope: 'read' }), 400, 'invalid_value', 'name');
    h.assertError(await cp.admin('POST', '/v1/admin/admin-tokens', { name: 'deployer', scope: 'read' }), 409, 'already_exists');
    assert.equal((await cp.admin('DELETE', `/v1/admin/admin-tokens/${c.json.id}`)).status, 204);
    h.assertError(await cp.admin('GET', '/v1/admin/teams', undefined, { authorization: `Bearer ${tok}` }), 401, 'unauthorized');
  });

  test('admin token scopes: read only reads; operator writes all but admin tokens; admin does all', T, async () => {
    const made = {};
    for (const scope of ['read', 'operator', 'admin']) {
      const c = await cp.admin('POST', '/v1/admin/admin-tokens', { name: `scoped-${scope}`, scope });
      assert.equal(c.status, 201, c.text);
      SECRET_VALUES.push(c.json.token);
      made[scope] = { id: c.json.id, auth: { authorization: `Bearer ${c.json.token}` } };
    }
    const as = (scope, method, p, body) => cp.admin(method, p, body, made[scope].auth);
    // read: every GET but the admin tokens; no write anywhere.
    for (const p of ['/v1/admin/teams', '/v1/admin/providers', '/v1/admin/audit?limit=1', '/v1/admin/snapshot', '/v1/admin/usage']) {
      assert.equal((await as('read', 'GET', p)).status, 200, `read GET ${p}`);
    }
    const denied = h.assertError(await as('read', 'POST', '/v1/admin/teams', { name: 'by-reader' }), 403, 'forbidden');
    assert.match(denied.message, /scope read may only read/);
    h.assertError(await as('read', 'DELETE', '/v1/admin/teams/by-deployer'), 403, 'forbidden');
    h.assertError(await as('read', 'GET', '/v1/admin/admin-tokens'), 403, 'forbidden');
    assert.equal(pg.sql("SELECT count(*) FROM teams WHERE name = 'by-reader'"), '0');
    // operator: writes, but cannot see or mint admin tokens (no escalation).
    assert.equal((await as('operator', 'POST', '/v1/admin/teams', { name: 'by-operator' })).status, 201);
    const esc = h.assertError(await as('operator', 'POST', '/v1/admin/admin-tokens', { name: 'escalated', scope: 'admin' }), 403, 'forbidden');
    assert.match(esc.message, /scope admin/);
    h.assertError(await as('operator', 'GET', '/v1/admin/admin-tokens'), 403, 'forbidden');
    assert.equal(pg.sql("SELECT count(*) FROM admin_tokens WHERE name = 'escalated'"), '0');
    // admin: admin tokens too.
    assert.equal((await as('admin', 'GET', '/v1/admin/admin-tokens')).status, 200);
    for (const scope of ['read', 'operator']) {
      assert.equal((await as('admin', 'DELETE', `/v1/admin/admin-tokens/${made[scope].id}`)).status, 204);
    }
    assert.equal((await cp.admin('DELETE', `/v1/admin/admin-tokens/${made.admin.id}`)).status, 204);
  });

  test('failed authentications are logged (never the token) and, past 20 a minute from one address, refused with 429 before any lookup; the bootstrap token still works', T, async () => {
    const other = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY1 } });
    try {
      const good = await other.admin('POST', '/v1/admin/admin-tokens', { name: 'behind-proxy', scope: 'read' });
      assert.equal(good.status, 201, good.text);
      SECRET_VALUES.push(good.json.token);
      const guess = (i) => ({ authorization: `Bearer guess-${i}-${'z'.repeat(30)}` });
      for (let i = 0; i < 20; i++) {
        h.assertError(await other.admin('GET', '/v1/admin/providers', undefined, guess(i)), 401, 'unauthorized');
      }
      const limited = await other.admin('GET', '/v1/admin/providers', undefined, guess(20));
      h.assertError(limited, 429, 'too_many_failed_authentications');
      const ra = Number(limited.headers['retry-after']);
      assert.ok(ra >= 1 && ra <= 60, `Retry-After ${limited.headers['retry-after']}`);
      // A stored token from the limited address waits too (no lookup is
      // made); the bootstrap token, checked without the database, does not.
      h.assertError(await other.admin('GET', '/v1/admin/providers', undefined, { authorization: `Bearer ${good.json.token}` }), 429, 'too_many_failed_authentications');
      assert.equal((await other.admin('GET', '/v1/admin/providers')).status, 200);
      const out = other.proc.stdoutText + other.proc.stderrText;
      const lines = out.split('\n').filter((l) => l.includes('"msg":"admin authentication failed'));
      assert.equal(lines.length, 6, `5 failures, then one line saying the address is limited:\n${lines.join('\n')}`);
      assert.match(lines[5], /refused \(429\)/);
      assert.ok(lines.every((l) => l.includes('"peer":"127.0.0.1"')), lines.join('\n'));
      assert.ok(!out.includes('guess-'), 'a token guess is never logged');
    } finally {
      await other.proc.stop();
    }
  });
});

// The response cache's settings (issue 22, docs/cache.md): a route's cache
// object, a key's and a team's cache_ttl_s. What reaches a data plane's
// snapshot is checked end to end in e2e_controlplane.test.mjs.
describe('response cache settings', () => {
  const e1 = [{ provider: 'rp1', model: 'm1' }];
  const cacheCols = (name) => pg.sql(`SELECT coalesce(cache_ttl_s::text, 'null') || ' ' || cache_scope || ' ' || cache_deterministic::text FROM routes WHERE name = '${name}'`);

  test('a route\'s cache: created, read, patched, replaced, turned off; stored in three columns, shown as one object', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/routes', { name: 'cached', cache: { ttl_s: 300 }, entries: e1 });
    assert.equal(c.status, 201, c.text);
    assert.deepEqual(c.json.cache, { ttl_s: 300, scope: 'team', deterministic: false }, 'defaults filled');
    for (const k of ['cache_ttl_s', 'cache_scope', 'cache_deterministic']) assert.ok(!(k in c.json), `${k} is not a member of its own`);
    assert.equal(cacheCols('cached'), '300 team false');
    const g = await cp.admin('GET', '/v1/admin/routes/cached');
    assert.deepEqual(g.json.cache, { ttl_s: 300, scope: 'team', deterministic: false });
    assert.deepEqual((await cp.admin('GET', '/v1/admin/routes')).json.data.find((r) => r.name === 'cached').cache, g.json.cache);
    // A PATCH without cache keeps it; one with cache replaces it whole.
    let p = await cp.admin('PATCH', '/v1/admin/routes/cached', { aliases: ['cached-too'] });
    assert.equal(p.status, 200, p.text);
    assert.deepEqual(p.json.cache, { ttl_s: 300, scope: 'team', deterministic: false });
    p = await cp.admin('PATCH', '/v1/admin/routes/cached', { cache: { ttl_s: 2592000, scope: 'global', deterministic: true } });
    assert.equal(p.status, 200, p.text);
    assert.deepEqual(p.json.cache, { ttl_s: 2592000, scope: 'global', deterministic: true });
    assert.equal(cacheCols('cached'), '2592000 global true');
    p = await cp.admin('PATCH', '/v1/admin/routes/cached', { cache: { ttl_s: 1, scope: 'key' } });
    assert.deepEqual(p.json.cache, { ttl_s: 1, scope: 'key', deterministic: false });
    p = await cp.admin('PATCH', '/v1/admin/routes/cached', { cache: { ttl_s: 60, scope: 'project', deterministic: false } });
    assert.deepEqual(p.json.cache, { ttl_s: 60, scope: 'project', deterministic: false });
    // The audit rows carry it before and after.
    const [audit] = (await cp.admin('GET', '/v1/admin/audit?limit=1')).json.data;
    assert.deepEqual(audit.before.cache, { ttl_s: 1, scope: 'key', deterministic: false });
    assert.deepEqual(audit.after.cache, { ttl_s: 60, scope: 'project', deterministic: false });
    // null turns it off (the scope and mark go back to their defaults).
    p = await cp.admin('PATCH', '/v1/admin/routes/cached', { cache: null });
    assert.equal(p.status, 200, p.text);
    assert.equal(p.json.cache, null);
    assert.equal(cacheCols('cached'), 'null team false');
    // A PUT without cache is a route without one.
    p = await cp.admin('PUT', '/v1/admin/routes/cached', { cache: { ttl_s: 5 }, entries: e1 });
    assert.deepEqual(p.json.cache, { ttl_s: 5, scope: 'team', deterministic: false });
    p = await cp.admin('PUT', '/v1/admin/routes/cached', { entries: e1 });
    assert.equal(p.json.cache, null);
    assert.equal(cacheCols('cached'), 'null team false');
    const off = await cp.admin('POST', '/v1/admin/routes', { name: 'uncached', entries: e1 });
    assert.equal(off.status, 201, off.text);
    assert.equal(off.json.cache, null, 'off unless asked for');
    assert.equal(cacheCols('uncached'), 'null team false');
  });

  test('a route\'s cache: each bad value a 400 naming the field, nothing written', T, async () => {
    const cases = [
      [{ cache: 300 }, 'invalid_type', 'cache'],
      [{ cache: [60] }, 'invalid_type', 'cache'],
      [{ cache: {} }, 'missing_field', 'cache.ttl_s'],
      [{ cache: { ttl_s: null } }, 'missing_field', 'cache.ttl_s'],
      [{ cache: { ttl_s: 0 } }, 'invalid_value', 'cache.ttl_s'],
      [{ cache: { ttl_s: -1 } }, 'invalid_value', 'cache.ttl_s'],
      [{ cache: { ttl_s: 2592001 } }, 'invalid_value', 'cache.ttl_s'],
      [{ cache: { ttl_s: '60' } }, 'invalid_type', 'cache.ttl_s'],
      [{ cache: { ttl_s: 1.5 } }, 'invalid_type', 'cache.ttl_s'],
      [{ cache: { ttl_s: 60, scope: 'org' } }, 'invalid_value', 'cache.scope'],
      [{ cache: { ttl_s: 60, scope: 3 } }, 'invalid_type', 'cache.scope'],
      [{ cache: { ttl_s: 60, deterministic: 'yes' } }, 'invalid_type', 'cache.deterministic'],
      [{ cache: { ttl_s: 60, ttl: 5 } }, 'unknown_field', 'cache.ttl'],
      [{ cache_ttl_s: 60 }, 'unknown_field', 'cache_ttl_s'],
      [{ cache_scope: 'key' }, 'unknown_field', 'cache_scope'],
      [{ cache_deterministic: true }, 'unknown_field', 'cache_deterministic'],
    ];
    for (const [extra, code, param] of cases) {
      const e = h.assertError(await cp.admin('POST', '/v1/admin/routes', { name: 'badcache', entries: e1, ...extra }), 400, code, param);
      assert.ok(e.message.startsWith(param), `message names the field: ${e.message}`);
    }
    assert.equal((await cp.admin('GET', '/v1/admin/routes/badcache')).status, 404);
    // On an existing route: refused, the route as it was.
    assert.equal((await cp.admin('POST', '/v1/admin/routes', { name: 'keepcache', cache: { ttl_s: 90, scope: 'key' }, entries: e1 })).status, 201);
    h.assertError(await cp.admin('PATCH', '/v1/admin/routes/keepcache', { cache: { ttl_s: 90, scope: 'everyone' } }), 400, 'invalid_value', 'cache.scope');
    h.assertError(await cp.admin('PUT', '/v1/admin/routes/keepcache', { cache: { scope: 'key' }, entries: e1 }), 400, 'missing_field', 'cache.ttl_s');
    assert.deepEqual((await cp.admin('GET', '/v1/admin/routes/keepcache')).json.cache, { ttl_s: 90, scope: 'key', deterministic: false });
    assert.equal(cacheCols('keepcache'), '90 key false');
  });

  for (const [kind, table, keyOf] of [['teams', 'teams', (j) => j.name], ['keys', 'api_keys', (j) => j.id]]) {
    test(`${kind}: cache_ttl_s null, 0 or a TTL; round trip; bad values a 400 naming it`, T, async () => {
      const col = (k) => pg.sql(`SELECT coalesce(cache_ttl_s::text, 'null') FROM ${table} WHERE ${kind === 'teams' ? 'name' : 'id'} = '${k}'`);
      const body = (extra) => (kind === 'teams' ? { name: `cache-team-${extra.tag}`, ...extra.b } : { id: `cache-key-${extra.tag}`, ...extra.b });
      const c = await cp.admin('POST', `/v1/admin/${kind}`, body({ tag: 'a', b: {} }));
      assert.equal(c.status, 201, c.text);
      if (c.json.key) SECRET_VALUES.push(c.json.key);
      const k = keyOf(c.json);
      assert.equal(c.json.cache_ttl_s, null, 'absent: follow the routes');
      assert.equal(col(k), 'null');
      for (const v of [0, 1, 3600, 2592000, null]) {
        const u = await cp.admin('PATCH', `/v1/admin/${kind}/${k}`, { cache_ttl_s: v });
        assert.equal(u.status, 200, u.text);
        assert.equal(u.json.cache_ttl_s, v);
        assert.equal(col(k), v === null ? 'null' : String(v));
        assert.equal((await cp.admin('GET', `/v1/admin/${kind}/${k}`)).json.cache_ttl_s, v);
      }
      const z = await cp.admin('POST', `/v1/admin/${kind}`, body({ tag: 'b', b: { cache_ttl_s: 0 } }));
      assert.equal(z.status, 201, z.text);
      if (z.json.key) SECRET_VALUES.push(z.json.key);
      assert.equal(z.json.cache_ttl_s, 0, '0: off for it');
      // Another PATCH keeps it.
      const kz = keyOf(z.json);
      assert.equal((await cp.admin('PATCH', `/v1/admin/${kind}/${kz}`, kind === 'teams' ? { description: 'x' } : { name: 'x' })).json.cache_ttl_s, 0);
      for (const [v, code] of [[-1, 'invalid_value'], [2592001, 'invalid_value'], ['60', 'invalid_type'], [1.5, 'invalid_type'], [true, 'invalid_type'], [{}, 'invalid_type']]) {
        const e = h.assertError(await cp.admin('POST', `/v1/admin/${kind}`, body({ tag: 'bad', b: { cache_ttl_s: v } })), 400, code, 'cache_ttl_s');
        assert.match(e.message, /^cache_ttl_s: must be an integer from 0 to 2592000/);
        h.assertError(await cp.admin('PATCH', `/v1/admin/${kind}/${kz}`, { cache_ttl_s: v }), 400, code, 'cache_ttl_s');
      }
      assert.equal(col(kz), '0', 'refused writes changed nothing');
      assert.equal(pg.sql(`SELECT count(*) FROM ${table} WHERE ${kind === 'teams' ? 'name' : 'id'} LIKE 'cache-%-bad'`), '0');
    });
  }

  test('/v1/admin/usage: cache_hits and saved_picodollars per group and in the totals; /v1/admin/ledger shows them per row', T, async () => {
    // Rows as the ledger writer stores them (a data plane's hits: tokens
    // and cost 0, the saved cost beside; NULL when the original's was
    // unknown). Big figures: the sums must be exact past 2^53.
    const row = (id, route, cost, hit, saved, tokens = 0) => `(now() - interval '1 minute', 'uc-${id}', 'uc-req-${id}', 1, 'test', 'ucteam', '${route}', 'p', 'm', 1, 200, 1, ${cost}, ${hit}, ${saved}, ${tokens})`;
    pg.sql(`SELECT llmgw_ledger_partition(now()); INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, team,
      route, provider, model, latency_ms, status, snapshot_version, cost_picodollars, cache_hit, saved_picodollars, input_tokens) VALUES
      ${[row(1, 'uc-a', 9000000000000001n, false, 'NULL', 100), row(2, 'uc-a', 0, true, 9000000000000001n),
    row(3, 'uc-a', 0, true, 'NULL'), row(4, 'uc-a', 0, true, 7), row(5, 'uc-b', 5, false, 'NULL', 3)].join(',\n')}`);
    // The table's own checks.
    assert.throws(() => pg.sql(`INSERT INTO ledger (at, attempt_id, request_id, attempt, replica, provider, model, latency_ms, status,
      snapshot_version, cache_hit, saved_picodollars) VALUES (now(), 'uc-neg', 'uc-neg', 1, 't', 'p', 'm', 1, 200, 1, true, -1)`), /saved_picodollars/);
    assert.equal(pg.sql("SELECT cache_hit::text || coalesce(saved_picodollars::text, 'null') FROM ledger WHERE attempt_id = 'uc-1'"), 'falsenull', 'the defaults');
    const r = await cp.admin('GET', '/v1/admin/usage?group_by=route');
    assert.equal(r.status, 200, r.text);
    // JSON.parse loses precision past 2^53: read the exact figures from the text.
    const a = r.json.groups.find((g) => g.route === 'uc-a');
    const b = r.json.groups.find((g) => g.route === 'uc-b');
    assert.ok(a && b, r.text);
    assert.equal(a.attempts, 4);
    assert.equal(a.cache_hits, 3);
    assert.equal(a.input_tokens, 100, 'hits add no tokens');
    assert.match(r.text, /"saved_picodollars":\s*9000000000000008\b/, 'the saved sum, exact');
    assert.match(r.text, /"cost_picodollars":\s*9000000000000001\b/, 'the cost sum, exact: hits cost 0');
    assert.equal(b.cache_hits, 0);
    assert.equal(b.saved_picodollars, 0);
    const [tot] = r.json.totals;
    assert.equal(tot.cache_hits, r.json.groups.reduce((n, g) => n + g.cache_hits, 0));
    const byTeam = await cp.admin('GET', '/v1/admin/usage?group_by=team');
    const t = byTeam.json.groups.find((g) => g.team === 'ucteam');
    assert.equal(t.cache_hits, 3);
    assert.equal(t.attempts, 5);
    // One request's rows.
    const l = await cp.admin('GET', '/v1/admin/ledger?request_id=uc-req-2');
    assert.equal(l.status, 200, l.text);
    assert.equal(l.json.data.length, 1);
    assert.equal(l.json.data[0].cache_hit, true);
    assert.match(l.text, /"saved_picodollars":\s*9000000000000001\b/);
    const l3 = (await cp.admin('GET', '/v1/admin/ledger?request_id=uc-req-3')).json.data[0];
    assert.equal(l3.cache_hit, true);
    assert.equal(l3.saved_picodollars, null, 'unknown, not 0');
    const l1 = (await cp.admin('GET', '/v1/admin/ledger?request_id=uc-req-1')).json.data[0];
    assert.equal(l1.cache_hit, false);
    assert.equal(l1.saved_picodollars, null);
    pg.sql("DELETE FROM ledger WHERE attempt_id LIKE 'uc-%'");
  });
});

describe('prices and catalog', () => {
  before(async () => {
    await provider(cp, 'pp');
  });

  test('price overrides: integers, exact decimal strings, refusals', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'org/model-x', input_price: 2000000, output_price: '0.000008' });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.input_price, 2000000);
    assert.equal(c.json.output_price, 8000000);
    assert.equal(c.json.cache_read_price, null);
    assert.equal(c.json.reasoning_price, null);
    assert.equal(c.json.currency, 'USD');
    const g = await cp.admin('GET', '/v1/admin/prices/pp/org%2Fmodel-x');
    assert.equal(g.status, 200, g.text);
    const g2 = await cp.admin('GET', '/v1/admin/prices/pp/org/model-x');
    assert.equal(g2.status, 200, g2.text);
    const u = await cp.admin('PATCH', '/v1/admin/prices/pp/org/model-x', { input_price: '0.0000015000000000', version: 1 });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.input_price, 1500000);
    h.assertError(await cp.admin('PATCH', '/v1/admin/prices/pp/org/model-x', { input_price: 1, version: 1 }), 409, 'version_conflict');
    for (const bad of ['0.0000000000001', '1e-13', '1.234567891234567e-07', '-1', '-1e-6', '1.5', '.5', '2', '1e1', 'abc', '', '0x10', ' 1']) {
      h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', input_price: bad }), 400, 'invalid_value', 'input_price');
    }
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', output_price: 1.5 }), 400, 'invalid_type', 'output_price');
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', output_price: 1000000000001 }), 400, 'invalid_value', 'output_price');
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'ghost', model: 'm' }), 400, 'dangling_reference', 'provider');
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', currency: 'usd' }), 400, 'invalid_value', 'currency');
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'org/model-x' }), 409, 'already_exists');
    const ok1 = await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'one', input_price: '1' });
    assert.equal(ok1.json.input_price, 1000000000000);
    // Exponent forms (LiteLLM writes prices so) are exact decimals too.
    const ok2 = await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'two', input_price: '3e-06', output_price: '1.5E-5' });
    assert.equal(ok2.status, 201, ok2.text);
    assert.equal(ok2.json.input_price, 3000000);
    assert.equal(ok2.json.output_price, 15000000);
    h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', input_price: 3e-6 }), 400, 'invalid_type', 'input_price');
    assert.equal((await cp.admin('DELETE', '/v1/admin/prices/pp/org/model-x')).status, 204);
  });

  test('catalog: by id, money rule, capabilities', T, async () => {
    const c = await cp.admin('POST', '/v1/admin/catalog', { provider: 'pp', model: 'cm', context_window: 128000, capabilities: ['chat', 'vision'], input_price: '0.000001' });
    assert.equal(c.status, 201, c.text);
    assert.equal(c.json.input_price, 1000000);
    const id = c.json.id;
    assert.ok(Number.isInteger(id));
    const any = await cp.admin('POST', '/v1/admin/catalog', { model: 'cm', context_window: 64000 });
    assert.equal(any.status, 201, any.text);
    assert.equal(any.json.provider, null);
    h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'cm' }), 409, 'already_exists');
    const u = await cp.admin('PATCH', `/v1/admin/catalog/${id}`, { context_window: 200000 }, { 'if-match': '"1"' });
    assert.equal(u.status, 200, u.text);
    assert.equal(u.json.context_window, 200000);
    h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'z', capabilities: ['telepathy'] }), 400, 'invalid_value', 'capabilities');
    h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'z', input_price: '0.1234567890123' }), 400, 'invalid_value', 'input_price');
    // Reasoning priced apart, LiteLLM's mode; source and litellm_provider are the server's.
    const r = await cp.admin('POST', '/v1/admin/catalog', { model: 'rz', mode: 'chat', output_price: '6e-7', reasoning_price: '3.5E-6', source: 'litellm', litellm_provider: 'x' });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.reasoning_price, 3500000);
    assert.equal(r.json.output_price, 600000);
    assert.equal(r.json.mode, 'chat');
    assert.equal(r.json.source, 'admin');
    assert.equal(r.json.litellm_provider, null);
    h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'z', mode: '' }), 400, 'invalid_value', 'mode');
    h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'z', reasoning_price: 3.5e-6 }), 400, 'invalid_type', 'reasoning_price');
    assert.equal((await cp.admin('DELETE', `/v1/admin/catalog/${id}`)).status, 204);
  });

  test('media prices: per second, character, image, by size and quality, media tokens; each refusal names its field', T, async () => {
    const MEDIA = ['audio_second_price', 'character_price', 'image_price', 'media_input_price', 'media_output_price'];
    const c = await cp.admin('POST', '/v1/admin/prices', {
      provider: 'pp', model: 'whisper-1', audio_second_price: '0.0001', character_price: 15000000,
      image_price: '0.04', media_input_price: '2.5e-6', media_output_price: '1E-5',
      image_prices: { '1024x1024': '0.04', 'hd/1024x1024': 80000000000, auto: '0', 'medium/1536x1024': '0.063' },
    });
    assert.equal(c.status, 201, c.text);
    assert.deepEqual(MEDIA.map((k) => c.json[k]), [100000000, 15000000, 40000000000, 2500000, 10000000]);
    assert.deepEqual(c.json.image_prices, { '1024x1024': 40000000000, 'hd/1024x1024': 80000000000, auto: 0, 'medium/1536x1024': 63000000000 });
    // Stored as integers (jsonb), exactly.
    assert.equal(pg.sql("SELECT image_prices->>'medium/1536x1024' || ' ' || audio_second_price FROM price_overrides WHERE model = 'whisper-1'"), '63000000000 100000000');
    // PATCH keeps what it does not name; null clears; image_prices goes whole.
    const u = await cp.admin('PATCH', '/v1/admin/prices/pp/whisper-1', { image_prices: { '512x512': 18000000000 }, character_price: null });
    assert.equal(u.status, 200, u.text);
    assert.deepEqual(u.json.image_prices, { '512x512': 18000000000 });
    assert.equal(u.json.character_price, null);
    assert.equal(u.json.audio_second_price, 100000000);
    const cleared = await cp.admin('PATCH', '/v1/admin/prices/pp/whisper-1', { image_prices: null });
    assert.equal(cleared.json.image_prices, null);
    const before = pg.sql("SELECT version FROM price_overrides WHERE model = 'whisper-1'");
    // Each price: the money rule, in its unit.
    for (const k of MEDIA) {
      for (const bad of ['0.0002833333333333333', '-1', '2', 'x']) {
        h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', [k]: bad }), 400, 'invalid_value', k);
      }
      h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', [k]: 1e-4 }), 400, 'invalid_type', k);
      h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'm', [k]: 1000000000001 }), 400, 'invalid_value', k);
    }
    const unit = h.assertError(await cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', audio_second_price: '1e-13' }), 400, 'invalid_value', 'audio_second_price');
    assert.match(unit.message, /picodollars per second of input audio/);
    // image_prices: an object of at most 64 prices, keys a size or quality/size, values money.
    const ip = (v) => cp.admin('POST', '/v1/admin/prices', { provider: 'pp', model: 'm', image_prices: v });
    h.assertError(await ip([1]), 400, 'invalid_type', 'image_prices');
    h.assertError(await ip('0.04'), 400, 'invalid_type', 'image_prices');
    for (const key of ['1024', '1024x', 'x1024', '1024X1024', 'HD/1024x1024', '/1024x1024', 'hd/', 'hd/big', 'h d/1024x1024', '123456x1',
      'abcdefghijklmnopq/1024x1024', 'hd/1024x1024/x', '']) {
      const e = h.assertError(await ip({ [key]: 1 }), 400, 'invalid_value', `image_prices.${key}`);
      assert.match(e.message, /not a size/);
    }
    h.assertError(await ip({ '1024x1024': 0.04 }), 400, 'invalid_type', 'image_prices.1024x1024');
    h.assertError(await ip({ 'hd/1024x1024': '0.0000000000001' }), 400, 'invalid_value', 'hd/1024x1024'.replace(/^/, 'image_prices.'));
    h.assertError(await ip({ '1024x1024': -1 }), 400, 'invalid_value', 'image_prices.1024x1024');
    h.assertError(await ip({ '1024x1024': null }), 400, 'invalid_type', 'image_prices.1024x1024');
    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`${i + 1}x1`, i]));
    h.assertError(await ip(many), 400, 'invalid_value', 'image_prices');
    delete many['65x1'];
    const ok64 = await cp.admin('POST', '/v1/admin/catalog', { model: 'img-64', capabilities: ['image'], image_prices: many });
    assert.equal(ok64.status, 201, ok64.text);
    assert.equal(Object.keys(ok64.json.image_prices).length, 64);
    assert.equal(pg.sql("SELECT version FROM price_overrides WHERE model = 'whisper-1'"), before, 'refusals changed nothing');
    assert.equal(pg.sql("SELECT count(*) FROM price_overrides WHERE model = 'm'"), '0');
    // The catalog: the same prices, and the media capabilities.
    const cat = await cp.admin('POST', '/v1/admin/catalog', {
      provider: 'pp', model: 'gpt-image-1', capabilities: ['image'], media_input_price: '1e-5', media_output_price: '4e-5',
      image_prices: { 'low/1024x1024': '0.011' },
    });
    assert.equal(cat.status, 201, cat.text);
    assert.equal(cat.json.media_output_price, 40000000);
    assert.deepEqual(cat.json.image_prices, { 'low/1024x1024': 11000000000 });
    for (const cap of ['transcription', 'speech', 'image']) {
      const r = await cp.admin('POST', '/v1/admin/catalog', { model: `cap-${cap}`, capabilities: [cap, 'chat'] });
      assert.equal(r.status, 201, r.text);
    }
    const bad = h.assertError(await cp.admin('POST', '/v1/admin/catalog', { model: 'z', capabilities: ['video'] }), 400, 'invalid_value', 'capabilities');
    assert.match(bad.message, /transcription, speech, image/);
    // The audit row has the new prices.
    const audit = JSON.parse(pg.sql("SELECT after FROM audit_log WHERE resource = 'catalog' ORDER BY id DESC LIMIT 1"));
    assert.equal(audit.model, 'cap-image');
    assert.ok('image_prices' in audit && 'audio_second_price' in audit, JSON.stringify(audit));
  });
});

describe('media units in the ledger', () => {
  test('a LedgerRow\'s audio_ms, characters and images: stored, shown by /v1/admin/ledger, summed exactly by /v1/admin/usage', T, async () => {
    h.requireBinaries([h.REPORT_CLIENT_BIN]);
    const at = Date.now() - 60_000;
    const row = (seq, id, units) => ({
      seq, request_id: id, attempt_id: `${id}.1`, attempt: 1, provider: 'mock', model: 'm-media', route: 'media-r',
      team: 'media-team', api: 'openai.audio', at_ms: at, latency_ms: 5, status: 200, snapshot_version: 1,
      cost_picodollars: 7, has_cost: true, ...units,
    });
    const r = await h.runReportClient({
      target: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-media',
      messages: [
        { ledger_row: row(1, 'mu-1', { audio_ms: 61_500 }) },
        { ledger_batch: { rows: [row(2, 'mu-2', { characters: 4096 }), row(3, 'mu-3', { images: 3 }), row(4, 'mu-4', { audio_ms: 500, images: 1 })] } },
        // Refused by the writer (negative units): kept in ledger_rejects, acked.
        { ledger_row: row(5, 'mu-neg', { images: -1 }) },
      ],
    });
    assert.equal(r.code, 0, r.proc.describe());
    assert.equal(r.acked, 5);
    assert.equal(pg.sql("SELECT string_agg(request_id || ':' || audio_ms || '/' || characters || '/' || images, ' ' ORDER BY request_id) FROM ledger WHERE model = 'm-media'"),
      'mu-1:61500/0/0 mu-2:0/4096/0 mu-3:0/0/3 mu-4:500/0/1');
    const rej = pg.sql("SELECT error || ' ' || (row->>'images') FROM ledger_rejects WHERE attempt_id = 'mu-neg.1'");
    assert.match(rej, /media units .* must not be negative -1$/);
    const l = await cp.admin('GET', '/v1/admin/ledger?request_id=mu-4');
    assert.equal(l.status, 200, l.text);
    assert.equal(l.json.data.length, 1);
    assert.equal(l.json.data[0].audio_ms, 500);
    assert.equal(l.json.data[0].characters, 0);
    assert.equal(l.json.data[0].images, 1);
    const u = await cp.admin('GET', '/v1/admin/usage?group_by=model');
    assert.equal(u.status, 200, u.text);
    const g = u.json.groups.find((x) => x.model === 'm-media');
    assert.ok(g, u.text);
    assert.equal(g.attempts, 4);
    assert.equal(g.audio_ms, 62_000);
    assert.equal(g.characters, 4096);
    assert.equal(g.images, 4);
    assert.equal(g.cost_picodollars, 28);
    const [tot] = u.json.totals;
    assert.equal(tot.images, u.json.groups.reduce((n, x) => n + x.images, 0));
    // At most 10^12 of each unit a row, as the token counts; sums of such rows exact.
    const MAX = 1_000_000_000_000;
    const r2 = await h.runReportClient({
      target: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-media-2',
      messages: [
        ...[1, 2, 3].map((i) => ({ ledger_row: row(i, `mu-big-${i}`, { audio_ms: MAX, characters: MAX, images: 1 }) })),
        { ledger_row: row(4, 'mu-past', { audio_ms: MAX + 1 }) },
      ],
    });
    assert.equal(r2.code, 0, r2.proc.describe());
    assert.equal(r2.acked, 4);
    assert.equal(pg.sql("SELECT count(*) FROM ledger WHERE request_id LIKE 'mu-big-%'"), '3');
    assert.match(pg.sql("SELECT error FROM ledger_rejects WHERE attempt_id = 'mu-past.1'"), /media units out of range/);
    const big = await cp.admin('GET', '/v1/admin/usage?group_by=model');
    const gb = big.json.groups.find((x) => x.model === 'm-media');
    assert.equal(gb.audio_ms, 3 * MAX + 62_000);
    assert.equal(gb.characters, 3 * MAX + 4096);
    assert.equal(gb.images, 7);
    pg.sql("DELETE FROM ledger WHERE model = 'm-media'");
  });
});

describe('health', () => {
  test('postgres, config version, master key, credentials per provider', T, async () => {
    await cp.admin('POST', '/v1/admin/secrets', { name: 'aws-one', backend: 'aws', backend_ref: 'awssm:prod/openai#key' });
    await provider(cp, 'hp-ext', { credential_ref: 'aws-one' });
    await provider(cp, 'hp-none');
    const hl = await health(cp);
    assert.equal(hl.postgres, 'ok');
    assert.equal(hl.config_version, Number(pg.sql('SELECT version FROM config_state')));
    assert.equal(hl.master_key.configured, true);
    assert.match(hl.master_key.id, /^[0-9a-f]{8}$/);
    assert.equal(credOf(hl, 'hp-ext').credential, 'external');
    assert.match(credOf(hl, 'hp-ext').reason, /external, checked by the snapshot builder/);
    assert.equal(credOf(hl, 'hp-none').credential, 'none');
    assert.equal(credOf(hl, 'good').credential, 'ok');
  });
});

describe('master-key rotation', () => {
  function rotate(conninfo, oldKey, newKey) {
    const env = { ...process.env, LLMGW_DATABASE_URL: conninfo, LLMGW_MASTER_KEY: oldKey, LLMGW_NEW_MASTER_KEY: newKey };
    const p = new h.ManagedProcess('rotate', h.CONTROLPLANE_BIN, ['rotate-master-key'], { env });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    PROCS.push(p);
    return p.waitExit(30_000).then(() => p);
  }

  test('all secrets rewrapped in one transaction; a wrong old key changes nothing', T, async () => {
    const conninfo = pg.createDatabase('rot');
    const a = await h.startControlPlane({ conninfo, env: { LLMGW_MASTER_KEY: KEY1 } });
    PROCS.push(a.proc);
    for (const n of ['r1', 'r2', 'r3']) {
      assert.equal((await a.admin('POST', '/v1/admin/secrets', { name: n, value: secretValue(n) })).status, 201);
      await provider(a, `p-${n}`, { credential_ref: n });
    }
    const snap = () => pg.sql("SELECT string_agg(name || ':' || version || ':' || master_key_id || ':' || encode(ciphertext, 'hex'), ',' ORDER BY name) FROM secrets", 'rot');
    const before0 = snap();
    const cfg0 = pg.sql('SELECT version FROM config_state', 'rot');

    // A wrong old key: exit 1, nothing changed.
    const wrong = await rotate(conninfo, randomBytes(32).toString('hex'), KEY2);
    assert.equal(wrong.exitInfo.code, 1, wrong.describe());
    assert.match(wrong.stderrText, /does not open with the old key/);
    assert.equal(snap(), before0);
    assert.equal(pg.sql('SELECT version FROM config_state', 'rot'), cfg0);

    // A row that does not open (tampered) mid-way: all or nothing.
    pg.sql("UPDATE secrets SET ciphertext = (SELECT ciphertext FROM secrets WHERE name = 'r1') WHERE name = 'r2'", 'rot');
    const tampered = snap();
    const mid = await rotate(conninfo, KEY1, KEY2);
    assert.equal(mid.exitInfo.code, 1, mid.describe());
    assert.match(mid.stderrText, /'r2'/);
    assert.equal(snap(), tampered, 'r1 was not rewrapped either');
    await a.admin('PUT', '/v1/admin/secrets/r2', { value: secretValue('r2b') });
    const before1 = snap();

    const ok = await rotate(conninfo, KEY1, KEY2);
    assert.equal(ok.exitInfo.code, 0, ok.describe());
    const after1 = snap();
    assert.notEqual(after1, before1);
    const rows = pg.sql("SELECT string_agg(DISTINCT master_key_id, ',') FROM secrets WHERE backend = 'builtin'", 'rot');
    const hlOld = await health(a); // still on the old key
    assert.ok(!rows.includes(hlOld.master_key.id), 'no row carries the old key id');
    for (const n of ['r1', 'r2', 'r3']) {
      assert.equal(credOf(hlOld, `p-${n}`).credential, 'unresolved', 'none opens with the old key');
      assert.match(credOf(hlOld, `p-${n}`).reason, /another master key/);
    }
    assert.equal(pg.sql("SELECT string_agg(version::text, ',' ORDER BY name) FROM secrets", 'rot'), '2,3,2');
    const audit = (await a.admin('GET', '/v1/admin/audit?limit=1')).json.data[0];
    assert.equal(audit.actor, 'rotate-master-key');
    assert.equal(audit.resource, 'secrets');
    assert.deepEqual(audit.after.secrets, ['r1', 'r2', 'r3']);
    assert.equal(pg.sql("SELECT count(*) FROM audit_log WHERE actor = 'rotate-master-key'", 'rot'), '1');

    // Restart with the new key: every secret opens.
    const b = await h.startControlPlane({ conninfo, env: { LLMGW_MASTER_KEY: KEY2 } });
    PROCS.push(b.proc);
    const hlNew = await health(b);
    for (const n of ['r1', 'r2', 'r3']) assert.equal(credOf(hlNew, `p-${n}`).credential, 'ok', JSON.stringify(hlNew));
    assert.equal(hlNew.status, 'ok');
    // Re-running is a no-op (rows already carry the new key id).
    const again = await rotate(conninfo, KEY1, KEY2);
    assert.equal(again.exitInfo.code, 0, again.describe());
    assert.equal(snap(), after1);
    for (const p of [a, b]) {
      p.proc.signal('SIGTERM');
      assert.deepEqual(await p.proc.waitExit(10_000), { code: 0, signal: null }, p.proc.describe());
    }
  });
});

describe('llmgwctl', () => {
  test('every verb over curl; a secret value read from stdin', T, async () => {
    const { spawnSync } = await import('node:child_process');
    const ctl = (args, input) => {
      const r = spawnSync(`${h.REPO_ROOT}/tools/llmgwctl`, args, {
        input, encoding: 'utf8', env: { ...process.env, LLMGW_ADMIN_URL: cp.url, LLMGW_ADMIN_TOKEN: cp.token },
      });
      return { code: r.status, out: r.stdout, err: r.stderr };
    };
    let r = ctl(['teams', 'create', '{"name":"ctl-team"}']);
    assert.equal(r.code, 0, r.err);
    assert.equal(JSON.parse(r.out).name, 'ctl-team');
    r = ctl(['teams', 'update', 'ctl-team', '{"description":"d"}', '1']);
    assert.equal(r.code, 0, r.err);
    r = ctl(['teams', 'update', 'ctl-team', '{"description":"e"}', '1']);
    assert.equal(r.code, 1);
    assert.match(r.out + r.err, /precondition_failed/);
    r = ctl(['teams', 'replace', 'ctl-team', '-', '2'], '{"description":"f"}');
    assert.equal(r.code, 0, r.err);
    assert.equal(JSON.parse(ctl(['teams', 'get', 'ctl-team']).out).description, 'f');
    assert.ok(JSON.parse(ctl(['teams', 'list']).out).data.some((t) => t.name === 'ctl-team'));
    assert.equal(ctl(['teams', 'delete', 'ctl-team', '3']).code, 0);
    const v = secretValue('ctl');
    r = ctl(['secrets', 'create', '-'], JSON.stringify({ name: 'ctl-secret', value: v }));
    assert.equal(r.code, 0, r.err);
    assert.ok(!r.out.includes(v));
    r = ctl(['keys', 'create', '{"id":"ctl-key"}']);
    assert.equal(r.code, 0, r.err);
    SECRET_VALUES.push(JSON.parse(r.out).key);
    assert.equal(JSON.parse(ctl(['keys', 'disable', 'ctl-key']).out).status, 'disabled');
    assert.equal(JSON.parse(ctl(['health']).out).postgres, 'ok');
    assert.equal(JSON.parse(ctl(['audit', '1']).out).data[0].resource, 'keys');
    r = ctl(['teams', 'get', 'nope']);
    assert.equal(r.code, 1);
  });
});

describe('no secret value anywhere', () => {
  test('not in audit rows, not in any answer, not in the logs', T, async () => {
    assert.ok(SECRET_VALUES.length >= 5);
    const audit = pg.sql('SELECT coalesce(string_agg(before::text || after::text, chr(10)), \'\') FROM audit_log');
    const auditRot = pg.sql('SELECT coalesce(string_agg(coalesce(before::text, \'\') || coalesce(after::text, \'\'), chr(10)), \'\') FROM audit_log', 'rot');
    const answers = [];
    for (const r of ['secrets', 'keys', 'admin-tokens', 'providers', 'health', 'audit?limit=1000']) {
      answers.push((await cp.admin('GET', `/v1/admin/${r}`)).text);
    }
    const logs = PROCS.map((p) => p.stdoutText + p.stderrText).join('\n');
    assert.ok(PROCS.length >= 5);
    for (const v of SECRET_VALUES) {
      assert.ok(!audit.includes(v) && !auditRot.includes(v), 'audit rows');
      for (const a of answers) assert.ok(!a.includes(v), 'answers');
      assert.ok(!logs.includes(v), 'daemon logs');
    }
    for (const p of PROCS) assert.ok(!/AddressSanitizer|runtime error:/.test(p.stderrText), p.describe());
    cp.proc.signal('SIGTERM');
    assert.deepEqual(await cp.proc.waitExit(10_000), { code: 0, signal: null }, 'exits clean (no leak reports)');
    assert.ok(!/AddressSanitizer|LeakSanitizer|runtime error:/.test(cp.proc.stderrText));
    for (const v of SECRET_VALUES) assert.ok(!cp.proc.stderrText.includes(v) && !cp.proc.stdoutText.includes(v));
    const hashes = pg.sql('SELECT string_agg(hash, \',\') FROM api_keys');
    for (const hs of hashes.split(',')) for (const a of answers) assert.ok(!a.includes(hs), 'no key hash in answers');
  });
});
