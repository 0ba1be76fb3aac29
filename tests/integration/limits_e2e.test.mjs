// Budgets, rate limits and the governance path end to end (docs/budgets.md):
// PostgreSQL + llmgw-controlplane + two data planes + the mock provider,
// configured through the admin API. Refusal bodies for each cause (a
// depleted daily budget, requests and tokens per minute, a budget that
// cannot be allocated while the control plane is away, a budget never
// configured), allowlist denials (key and team intersect; nothing left
// fails closed), a refused request consumes nothing, and the race: 50
// concurrent streams over two data planes against a small budget, with
// the overshoot printed (estimate) and asserted 0 (worst case).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { overshootPct, runRace, settledSpent } from './limits_race.mjs';

const T = { timeout: 180_000 };
const KEY = masterKey();
const IN_PRICE = 1_000_000; // picodollars per token: $1 per million
const OUT_PRICE = 2_000_000;
// Answers of min(max_tokens, 40) tokens, max_tokens drawn from 1..64: some
// clients' caps bind, others' do not, so estimates miss both ways.
const RACE_MODEL = 'mock-gpt#chunks=40,chunk_delay_ms=3';

let pg;
let cp;
let cfg;
let mock;
let grpcPort;
const dps = [];
const keys = {}; // id -> plaintext

async function startCP() {
  return h.startControlPlane({
    pg, env: { LLMGW_MASTER_KEY: KEY.hex }, args: ['--grpc-listen', `127.0.0.1:${grpcPort}`],
  });
}

/** Both data planes serve the configuration as it is now. */
async function propagated() {
  const v = cfg.version();
  for (const g of dps) {
    await h.waitFor(async () => (await h.request(g.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v,
      { what: `${g.url} serving version ${v}` });
  }
}

async function key(id, body = {}) {
  const j = await cfg.api('POST', '/v1/admin/keys', { id, ...body }, 201);
  keys[id] = j.key;
  return j.key;
}

async function limit(body) {
  return cfg.api('POST', '/v1/admin/limits', body, 201);
}

function chat(port, keyId, { model = 'fast', maxTokens = 8, stream = false, content = 'hello there' } = {}) {
  return h.request(port, {
    headers: { authorization: `Bearer ${keys[keyId]}` },
    body: { model, max_tokens: maxTokens, stream, messages: [{ role: 'user', content }] },
  });
}

/** Sends until a refusal (at most n); resolves with the refusal and the successes. */
async function untilRefused(keyId, opts = {}, n = 40) {
  let ok = 0;
  for (let i = 0; i < n; i++) {
    const r = await chat(dps[i % dps.length].port, keyId, opts);
    if (r.status === 200) {
      ok++;
      continue;
    }
    return { ok, r };
  }
  throw new Error(`${keyId}: no refusal after ${n} requests`);
}

function assertRefusal(r, status, code, state) {
  assert.equal(r.status, status, r.text);
  const e = r.json?.error;
  assert.ok(e, r.text);
  assert.equal(e.code, code, r.text);
  assert.equal(typeof e.message, 'string');
  assert.equal(r.headers['x-llmgw-attempts'], '0');
  if (state) assert.equal(e.limit.state, state, r.text);
  return e;
}

const secondsToUtcMidnight = () => {
  const now = Date.now();
  const next = Math.floor(now / 86_400_000) * 86_400_000 + 86_400_000;
  return Math.ceil((next - now) / 1000);
};

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  pg = await h.startPostgres();
  mock = await h.startMock();
  grpcPort = await h.deadPort();
  cp = await startCP();
  cfg = new Config(cp, pg, KEY);
  await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mock.v1 });
  await cfg.provider({ name: 'beta', driver: 'openai', base_url: mock.v1 });
  await cfg.route('fast', [{ provider: 'alpha', model: 'mock-gpt' }]);
  await cfg.route('both', [{ provider: 'alpha', model: 'mock-gpt' }, { provider: 'beta', model: 'mock-gpt' }]);
  await cfg.route('race', [{ provider: 'alpha', model: RACE_MODEL }]);
  for (const [provider, model] of [['alpha', 'mock-gpt'], ['beta', 'mock-gpt'], ['alpha', RACE_MODEL]]) {
    await cfg.api('POST', '/v1/admin/prices', { provider, model, input_price: IN_PRICE, output_price: OUT_PRICE }, 201);
  }
  await cfg.api('POST', '/v1/admin/teams', { name: 'budgeted', require_budget: true }, 201);
  await cfg.api('POST', '/v1/admin/teams', { name: 'beta-only', allow_providers: ['beta'] }, 201);
  await cfg.api('POST', '/v1/admin/projects', { name: 'proj', team: 'budgeted' }, 201);
  dps.push(await h.startGatewayCP({ controlPlane: `127.0.0.1:${grpcPort}`, replicaId: 'dp-a' }));
  dps.push(await h.startGatewayCP({ controlPlane: `127.0.0.1:${grpcPort}`, replicaId: 'dp-b' }));
});

after(async () => {
  await h.stopAll();
});

describe('refusals', () => {
  test('a depleted daily budget: 402 budget_exceeded, the limit, Retry-After to UTC midnight', T, async () => {
    await key('k-day');
    // One answer: ~4 input and 8 output tokens = ~20 micro-dollars.
    await limit({ id: 'day-small', scope_kind: 'key', scope: 'k-day', metric: 'cost', period: 'day', amount: 60_000_000 });
    await propagated();
    const { ok, r } = await untilRefused('k-day');
    assert.ok(ok >= 1 && ok <= 4, `${ok} answers before the refusal`);
    const e = assertRefusal(r, 402, 'budget_exceeded', 'depleted');
    assert.equal(e.type, 'billing_error');
    assert.deepEqual(Object.keys(e.limit).sort(),
      ['amount', 'currency', 'id', 'metric', 'period', 'remaining', 'scope', 'scope_kind', 'spent', 'state', 'unit'].sort());
    assert.equal(e.limit.id, 'day-small');
    assert.equal(e.limit.scope_kind, 'key');
    assert.equal(e.limit.scope, 'k-day');
    assert.equal(e.limit.metric, 'cost');
    assert.equal(e.limit.period, 'day');
    assert.equal(e.limit.amount, 60_000_000);
    assert.equal(e.limit.unit, 'picodollars');
    assert.equal(e.limit.currency, 'USD');
    assert.ok(Number.isInteger(e.limit.spent) && Number.isInteger(e.limit.remaining), r.text);
    assert.ok(e.limit.remaining < 60_000_000);
    const ra = Number(r.headers['retry-after']);
    assert.ok(Math.abs(ra - secondsToUtcMidnight()) <= 5, `Retry-After ${ra}`);
    assert.equal(e.retry_after_s, ra);
  });

  test('requests per minute: 429 rate_limited, depleted, Retry-After within the minute', T, async () => {
    await key('k-rpm');
    await limit({ id: 'rpm-2', scope_kind: 'key', scope: 'k-rpm', metric: 'requests', period: 'minute', amount: 2 });
    await propagated();
    // Near a minute's end the window may turn between requests: start early in one.
    if (Date.now() % 60_000 > 50_000) await h.sleep(60_000 - (Date.now() % 60_000) + 200);
    const { ok, r } = await untilRefused('k-rpm');
    assert.equal(ok, 2);
    const e = assertRefusal(r, 429, 'rate_limited', 'depleted');
    assert.equal(e.type, 'rate_limit_error');
    assert.equal(e.limit.metric, 'requests');
    assert.equal(e.limit.period, 'minute');
    assert.equal(e.limit.unit, 'requests');
    assert.equal(e.limit.amount, 2);
    const ra = Number(r.headers['retry-after']);
    assert.ok(ra >= 1 && ra <= 60, `Retry-After ${ra}`);
  });

  test('tokens per minute: 429 rate_limited, depleted', T, async () => {
    await key('k-tpm');
    await limit({ id: 'tpm-100', scope_kind: 'key', scope: 'k-tpm', metric: 'tokens', period: 'minute', amount: 100 });
    await propagated();
    if (Date.now() % 60_000 > 50_000) await h.sleep(60_000 - (Date.now() % 60_000) + 200);
    // An answer: 3 input and 8 output tokens (the mock's 8 chunks).
    const { ok, r } = await untilRefused('k-tpm', { maxTokens: 20 });
    assert.ok(ok >= 5 && ok <= 9, `${ok} answers`);
    const e = assertRefusal(r, 429, 'rate_limited', 'depleted');
    assert.equal(e.limit.metric, 'tokens');
    assert.equal(e.limit.unit, 'tokens');
    assert.ok(e.limit.remaining < 100);
  });

  test('a team that requires a budget and has none: 402 budget_not_configured', T, async () => {
    await key('k-nobudget', { team: 'budgeted' });
    await propagated();
    const r = await chat(dps[0].port, 'k-nobudget');
    const e = assertRefusal(r, 402, 'budget_not_configured', 'never_configured');
    assert.equal(e.limit.scope_kind, 'team');
    assert.equal(e.limit.scope, 'budgeted');
    assert.equal(e.limit.metric, 'cost');
    assert.equal(e.limit.id, null);
    assert.equal(r.headers['retry-after'], undefined);
    // A budget on the key's project satisfies the team.
    await key('k-proj', { team: 'budgeted', project: 'proj' });
    await limit({ id: 'proj-month', scope_kind: 'project', scope: 'proj', metric: 'cost', period: 'month', amount: 1_000_000_000_000 });
    await propagated();
    assert.equal((await chat(dps[1].port, 'k-proj')).status, 200);
  });

  test('a cost limit keeps unpriced targets out by default, fail_open or not; "unpriced": "allow" lets them in', T, async () => {
    await cfg.route('unpriced', [{ provider: 'alpha', model: 'mock-gpt#tag=no-price' }]);
    await key('k-unpriced');
    const l = await limit({ id: 'unpriced-day', scope_kind: 'key', scope: 'k-unpriced', metric: 'cost', period: 'day', amount: 1_000_000_000_000 });
    assert.equal(l.unpriced, 'refuse');
    assert.equal(l.offline, 'fail_open');
    await propagated();
    const r = await chat(dps[0].port, 'k-unpriced', { model: 'unpriced' });
    const e = assertRefusal(r, 402, 'budget_unpriced', 'unpriced');
    assert.equal(e.limit.id, 'unpriced-day');
    assert.match(e.message, /"unpriced" to "allow"/);
    // Also named exactly (an exact selector is not a way round it).
    assertRefusal(await chat(dps[1].port, 'k-unpriced', { model: 'beta/some-model-nobody-priced' }), 402, 'budget_unpriced');
    // A priced route still serves.
    assert.equal((await chat(dps[0].port, 'k-unpriced')).status, 200);
    // The operator's choice, through the API.
    const bad = await cp.admin('PATCH', '/v1/admin/limits/unpriced-day', { unpriced: 'sometimes' });
    assert.equal(bad.status, 400, bad.text);
    assert.equal(bad.json.error.param, 'unpriced');
    await cfg.api('PATCH', '/v1/admin/limits/unpriced-day', { unpriced: 'allow' }, 200);
    await propagated();
    assert.equal((await chat(dps[0].port, 'k-unpriced', { model: 'unpriced' })).status, 200);
  });

  test('worst-case reservation without max_tokens or a catalog cap: 400 naming max_tokens', T, async () => {
    await key('k-worst');
    await limit({ id: 'worst-day', scope_kind: 'key', scope: 'k-worst', metric: 'cost', period: 'day', amount: 1_000_000_000_000, reservation: 'worst_case' });
    await propagated();
    const r = await h.request(dps[0].port, {
      headers: { authorization: `Bearer ${keys['k-worst']}` },
      body: { model: 'fast', messages: [{ role: 'user', content: 'hi' }] },
    });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, 'max_tokens_required');
    assert.equal(r.json.error.param, 'max_tokens');
    assert.equal((await chat(dps[0].port, 'k-worst', { maxTokens: 5 })).status, 200);
  });
});

describe('what is reserved is what can be spent', () => {
  test('worst case without max_tokens: the catalog cap it reserved is the cap the provider gets', T, async () => {
    const model = 'mock-gpt#tag=capped';
    await cfg.route('capped', [{ provider: 'alpha', model }]);
    await cfg.api('POST', '/v1/admin/catalog', { provider: 'alpha', model, max_output_tokens: 5 }, 201);
    await cfg.api('POST', '/v1/admin/prices', { provider: 'alpha', model, input_price: IN_PRICE, output_price: OUT_PRICE }, 201);
    await key('k-capped');
    await limit({ id: 'capped-day', scope_kind: 'key', scope: 'k-capped', metric: 'cost', period: 'day', amount: 1_000_000_000_000, reservation: 'worst_case', offline: 'fail_closed' });
    await propagated();
    const r = await h.request(dps[0].port, {
      headers: { authorization: `Bearer ${keys['k-capped']}`, 'x-request-id': 'capped-1' },
      body: { model: 'capped', messages: [{ role: 'user', content: 'hello there' }] },
    });
    assert.equal(r.status, 200, r.text);
    const seen = (await mock.usageFor('capped-1')).seen;
    assert.equal(seen.max_tokens, 5); // the mock would answer 8 tokens uncapped
    assert.ok(r.json.usage.completion_tokens <= 5, r.text);
  });

  test('an attempt with a class that has no price: its budget charge is an upper bound, its ledger cost NULL', T, async () => {
    // Anthropic reports 1-hour cache writes; the price has input and output only.
    await cfg.provider({ name: 'anth', driver: 'anthropic', base_url: mock.url });
    const model = 'mock-claude#cache_write_1h=3';
    await cfg.route('claude1h', [{ provider: 'anth', model }]);
    await cfg.api('POST', '/v1/admin/prices', { provider: 'anth', model, input_price: IN_PRICE, output_price: OUT_PRICE }, 201);
    await key('k-1h');
    await limit({ id: 'onehour-day', scope_kind: 'key', scope: 'k-1h', metric: 'cost', period: 'day', amount: 1_000_000_000_000, reservation: 'worst_case', offline: 'fail_closed' });
    await propagated();
    for (let i = 0; i < 4; i++) assert.equal((await chat(dps[i % 2].port, 'k-1h', { model: 'claude1h' })).status, 200);
    const spent = await settledSpent(pg, 'onehour-day', 'k-1h', 4);
    const rows = pg.sql("SELECT count(*) FILTER (WHERE cost_picodollars IS NULL) || ',' || sum(cache_write_1h_tokens) || ',' || "
      + `sum(input_tokens * ${IN_PRICE} + (cache_write_1h_tokens + output_tokens) * ${OUT_PRICE}) FROM ledger WHERE key_id = 'k-1h'`).split(',');
    assert.equal(rows[0], '4'); // money is never guessed in the ledger
    assert.ok(Number(rows[1]) > 0, 'the mock reported 1h cache writes');
    // Each attempt is charged its priced classes and the 1h writes at the
    // dearest price of the entry (output's): exactly this sum here.
    assert.equal(spent, BigInt(rows[2]));
    // A request that asks for a 1h cache write cannot be priced at all:
    // under a fail_closed budget it is refused.
    const r = await h.request(dps[0].port, {
      path: '/v1/messages',
      headers: { authorization: `Bearer ${keys['k-1h']}`, 'anthropic-version': '2023-06-01' },
      body: { model: 'claude1h', max_tokens: 8, messages: [{ role: 'user', content: [{ type: 'text', text: 'hi', cache_control: { type: 'ephemeral', ttl: '1h' } }] }] },
    });
    assert.equal(r.status, 402, r.text);
    assert.equal(r.json.type, 'error', r.text); // Anthropic's error shape
    assert.equal(r.json.error.limit.state, 'unpriced', r.text);
  });

  test('a cached answer: the requests limit counts it, the budget is not charged, its ledger row saves the cost', T, async () => {
    await cfg.api('POST', '/v1/admin/routes', {
      name: 'cachedr', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'alpha', model: 'mock-gpt' }],
      cache: { ttl_s: 600 },
    }, 201);
    await key('k-cache');
    await limit({ id: 'cache-cost', scope_kind: 'key', scope: 'k-cache', metric: 'cost', period: 'day', amount: 1_000_000_000_000 });
    await limit({ id: 'cache-tok', scope_kind: 'key', scope: 'k-cache', metric: 'tokens', period: 'day', amount: 1_000_000 });
    await limit({ id: 'cache-req', scope_kind: 'key', scope: 'k-cache', metric: 'requests', period: 'minute', amount: 5 });
    await propagated();
    const ask = () => h.request(dps[0].port, {
      headers: { authorization: `Bearer ${keys['k-cache']}` },
      body: { model: 'cachedr', temperature: 0, max_tokens: 8, messages: [{ role: 'user', content: 'cache and budgets' }] },
    });
    const results = [];
    for (let i = 0; i < 5; i++) {
      const r = await ask();
      assert.equal(r.status, 200, r.text);
      results.push(r.headers['x-llmgw-cache']);
    }
    assert.deepEqual(results, ['miss', 'hit', 'hit', 'hit', 'hit']);
    // The sixth is a hit too, but past the requests limit: refused.
    assertRefusal(await ask(), 429, 'rate_limited');
    await settledSpent(pg, 'cache-cost', 'k-cache', 5);
    const [missCost, missTokens, hits, saved, hitCost, hitTokens] = pg.sql(
      "SELECT (SELECT cost_picodollars || ',' || (input_tokens + output_tokens) FROM ledger WHERE key_id = 'k-cache' AND NOT cache_hit) || ',' || "
      + "count(*) || ',' || sum(saved_picodollars) || ',' || sum(cost_picodollars) || ',' || sum(input_tokens + output_tokens) "
      + "FROM ledger WHERE key_id = 'k-cache' AND cache_hit").split(',').map(Number);
    assert.ok(missCost > 0 && missTokens > 0);
    assert.deepEqual([hits, saved, hitCost, hitTokens], [4, 4 * missCost, 0, 0]);
    const spent = (id) => Number(pg.sql(`SELECT coalesce(sum(spent), 0) FROM limit_windows WHERE limit_id = '${id}'`));
    assert.equal(spent('cache-cost'), missCost, 'the budget is charged the miss only');
    assert.equal(spent('cache-tok'), missTokens, 'the tokens limit too');
    assert.equal(spent('cache-req'), 5, 'every request counts');
  });

  test('a data plane that stops settles its leases: what it gave back and charged', T, async () => {
    const dp = await h.startGatewayCP({ controlPlane: `127.0.0.1:${grpcPort}`, replicaId: 'dp-settle' });
    await key('k-settle');
    await limit({ id: 'settle-day', scope_kind: 'key', scope: 'k-settle', metric: 'cost', period: 'day', amount: 1_000_000_000_000 });
    await propagated();
    await h.waitFor(async () => (await h.request(dp.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= cfg.version(), { what: 'dp-settle ready' });
    for (let i = 0; i < 3; i++) assert.equal((await chat(dp.port, 'k-settle')).status, 200);
    await settledSpent(pg, 'settle-day', 'k-settle', 3);
    await dp.proc.stop();
    const leases = pg.sql("SELECT count(*) || ',' || count(*) FILTER (WHERE settled AND charged = consumed AND released = granted - charged) FROM limit_leases WHERE replica = 'dp-settle'").split(',');
    assert.ok(Number(leases[0]) >= 1, 'a lease was granted');
    assert.equal(leases[1], leases[0], 'every lease settled at shutdown');
    // Settled, they hold nothing back: the window's remaining is amount - spent.
    const [amount, spent, outstanding] = pg.sql("SELECT l.amount || ',' || w.spent || ',' || coalesce((SELECT sum(CASE WHEN settled THEN greatest(charged - consumed, 0) ELSE greatest(granted - consumed - released, 0) END) FROM limit_leases s WHERE s.limit_id = l.id AND NOT expired), 0) FROM limits l JOIN limit_windows w ON w.limit_id = l.id WHERE l.id = 'settle-day'").split(',').map(Number);
    assert.ok(amount > spent && spent > 0);
    assert.equal(outstanding, 0);
  });
});

describe('governance path', () => {
  test('allowlists: key and team intersect; nothing left fails closed', T, async () => {
    await key('k-team-beta', { team: 'beta-only' });
    await key('k-alpha-in-beta', { team: 'beta-only', allow_providers: ['alpha'] });
    await propagated();
    // The team leaves beta of the route's two entries.
    let r = await chat(dps[0].port, 'k-team-beta', { model: 'both' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'beta');
    r = await chat(dps[0].port, 'k-team-beta', { model: 'fast' });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.error.code, 'model_not_allowed');
    assert.match(r.json.error.candidates[0].detail, /team 'beta-only' may not use provider 'alpha'/);
    // Key alpha, team beta: nothing passes both.
    r = await chat(dps[1].port, 'k-alpha-in-beta', { model: 'both' });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.error.code, 'model_not_allowed');
    const details = r.json.error.candidates.map((c) => c.detail).join(' | ');
    assert.match(details, /key 'k-alpha-in-beta' may not use provider 'beta'/);
    assert.match(details, /team 'beta-only' may not use provider 'alpha'/);
    // /v1/models agrees with routing.
    r = await h.request(dps[0].port, { method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${keys['k-team-beta']}` } });
    const ids = r.json.data.map((m) => m.id);
    assert.ok(ids.includes('both') && ids.includes('beta/mock-gpt'), ids.join());
    assert.ok(!ids.includes('fast') && !ids.includes('alpha/mock-gpt'), ids.join());
    r = await h.request(dps[0].port, { method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${keys['k-alpha-in-beta']}` } });
    assert.deepEqual(r.json.data, []);
  });

  test('allowlists: a project narrows its keys and its team; editing it takes effect', T, async () => {
    await cfg.api('POST', '/v1/admin/teams', { name: 'open-team' }, 201);
    const made = await cfg.api('POST', '/v1/admin/projects', { name: 'proj-beta', team: 'open-team', allow_providers: ['beta'] }, 201);
    assert.deepEqual(made.allow_providers, ['beta']);
    assert.equal(made.allow_routes, null);
    await key('k-pb', { team: 'open-team', project: 'proj-beta' });
    await key('k-pb-alpha', { team: 'open-team', project: 'proj-beta', allow_providers: ['alpha'] });
    await propagated();
    let r = await chat(dps[0].port, 'k-pb', { model: 'both' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'beta');
    r = await chat(dps[1].port, 'k-pb', { model: 'alpha/mock-gpt' });
    assert.equal(r.status, 403, r.text);
    assert.match(r.json.error.candidates[0].detail, /project 'proj-beta' may not use provider 'alpha'/);
    // Key alpha, project beta: the intersection is empty.
    r = await chat(dps[0].port, 'k-pb-alpha', { model: 'both' });
    assert.equal(r.status, 403, r.text);
    assert.equal(r.json.error.code, 'model_not_allowed');
    r = await h.request(dps[0].port, { method: 'GET', path: '/v1/models', headers: { authorization: `Bearer ${keys['k-pb']}` } });
    const ids = r.json.data.map((m) => m.id);
    assert.ok(ids.includes('beta/mock-gpt') && !ids.includes('alpha/mock-gpt') && !ids.includes('fast'), ids.join());
    // A bad list is a 400 naming the field; nothing changes.
    const bad = await cfg.api('PATCH', '/v1/admin/projects/proj-beta', { allow_models: ['ok', ''] }, 400);
    assert.match(JSON.stringify(bad), /allow_models/);
    // Routes only: the project's keys keep to its routes.
    await cfg.api('PATCH', '/v1/admin/projects/proj-beta', { allow_providers: null, allow_routes: ['fast'] }, 200);
    await propagated();
    r = await chat(dps[1].port, 'k-pb', { model: 'fast' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'alpha');
    r = await chat(dps[1].port, 'k-pb', { model: 'beta/mock-gpt' });
    assert.equal(r.status, 403, r.text);
    assert.match(r.json.error.candidates[0].detail, /project 'proj-beta' is limited to its routes/);
  });

  test('a request refused before the quota step consumes no quota', T, async () => {
    await key('k-count', { allow_routes: ['fast'] });
    await limit({ id: 'count-3', scope_kind: 'key', scope: 'k-count', metric: 'requests', period: 'day', amount: 3 });
    await propagated();
    const port = dps[0].port;
    const auth = { authorization: `Bearer ${keys['k-count']}` };
    assert.equal((await chat(port, 'k-count', { model: 'nope' })).status, 404); // no such model
    assert.equal((await chat(port, 'k-count', { model: 'both' })).status, 403); // not allowed
    assert.equal((await h.request(port, { headers: auth, body: '{"model":' })).status, 400); // not JSON
    assert.equal((await h.request(port, { headers: auth, body: { model: 'fast', messages: 'x' } })).status, 400);
    assert.equal((await h.request(port, { headers: { authorization: 'Bearer llmgw-wrong' }, body: { model: 'fast', messages: [] } })).status, 401);
    const { ok, r } = await untilRefused('k-count');
    assert.equal(ok, 3);
    assertRefusal(r, 429, 'rate_limited', 'depleted');
    const spent = await settledSpent(pg, 'count-3', 'k-count', 3);
    assert.equal(spent, 3n);
  });
});

describe('the race', () => {
  test('50 concurrent streams over two data planes against a small budget', T, async () => {
    await key('k-race-est');
    await key('k-race-worst');
    // About 60 answers' worth (10 in + 28 out tokens each, on average):
    // a budget that 50 streams in flight at once run out together.
    const amount = 4_000_000_000;
    await limit({ id: 'race-est', scope_kind: 'key', scope: 'k-race-est', metric: 'cost', period: 'day', amount, offline: 'fail_closed' });
    await limit({ id: 'race-worst', scope_kind: 'key', scope: 'k-race-worst', metric: 'cost', period: 'day', amount, offline: 'fail_closed', reservation: 'worst_case' });
    await propagated();
    const ports = dps.map((g) => g.port);
    const results = {};
    for (const [mode, keyId, limitId] of [['estimate', 'k-race-est', 'race-est'], ['worst_case', 'k-race-worst', 'race-worst']]) {
      const t0 = Date.now();
      const c = await runRace({ ports, apiKey: keys[keyId], route: 'race', clients: 50 });
      const spent = await settledSpent(pg, limitId, keyId, c.ok);
      const pct = overshootPct(spent, amount);
      results[mode] = { ...c, spent, pct, ms: Date.now() - t0 };
      console.log(`# race ${mode}: ${c.ok} answers, ${c.refused} refused (${JSON.stringify(c.codes)}), spent ${spent} of ${amount} picodollars (${(Number(spent) * 100 / amount).toFixed(2)}%), overshoot ${pct.toFixed(3)}%, ${Date.now() - t0} ms`);
      assert.equal(c.other, 0, JSON.stringify(c));
      assert.equal(c.refused, 50, JSON.stringify(c)); // every client ends refused
      assert.deepEqual(Object.keys(c.codes), ['budget_exceeded']);
    }
    assert.ok(results.worst_case.spent <= BigInt(amount), `worst case spent ${results.worst_case.spent} > ${amount}`);
    assert.equal(results.worst_case.pct, 0);
    // The estimate's overshoot is bounded by the estimate error of the
    // requests in flight: a few percent at most here.
    assert.ok(results.estimate.pct < 5, `estimate overshoot ${results.estimate.pct}%`);
    // And the budget is used, not just refused: most of it is spent.
    assert.ok(results.estimate.spent > BigInt(amount) * 7n / 10n, `estimate spent ${results.estimate.spent}`);
  });
});

describe('control plane away', () => {
  test('fail_closed: 402 budget_unallocated with a short Retry-After; fail_open: served', T, async () => {
    await key('k-closed');
    await key('k-open');
    await limit({ id: 'closed-day', scope_kind: 'key', scope: 'k-closed', metric: 'cost', period: 'day', amount: 1_000_000_000_000, offline: 'fail_closed' });
    await limit({ id: 'open-day', scope_kind: 'key', scope: 'k-open', metric: 'cost', period: 'day', amount: 1_000_000_000_000, offline: 'fail_open' });
    await propagated();
    await cp.proc.stop();
    const r = await chat(dps[0].port, 'k-closed');
    const e = assertRefusal(r, 402, 'budget_unallocated', 'unallocated');
    assert.equal(e.limit.id, 'closed-day');
    assert.equal(r.headers['retry-after'], '5');
    assert.equal(e.retry_after_s, 5);
    assert.equal((await chat(dps[0].port, 'k-open')).status, 200);
    // Back: allocated again.
    cp = await startCP();
    await h.waitFor(async () => (await chat(dps[0].port, 'k-closed')).status === 200, { timeoutMs: 20_000, what: 'allocation after the control plane is back' });
  });
});
