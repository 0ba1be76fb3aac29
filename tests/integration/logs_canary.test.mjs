// No prompt, completion, tool or credential text in any log. A
// unique canary string goes everywhere a client or an operator could put
// secret text: system, user and assistant messages, tool-call arguments,
// tool results, tool names and descriptions, embeddings input, the model
// selector of a request that matches nothing, refused bodies (bad JSON, an
// unsupported parameter's name), a bad API key, headers that are not
// logged by design (user-agent, a custom header, the session and affinity
// keys), and the provider credential the gateway reads from its
// environment. Then every code path that logs is driven: success on every
// facade (streamed and not) and embeddings, count_tokens, each failure class
// the mock can provoke, a failover, a mid-stream error, a client that
// leaves mid-stream, no route, a breaker opening and the skip it causes, the
// refusals. Finally the canary must appear in no line of the data plane's
// stdout (access log) and stderr (diagnostics), nor of the mock's stdout,
// stderr and usage log (the mock logs no request text, so nothing of it is
// excepted).
//
// The paths above run from a snapshot file. Budgets, rate limits and the
// ledger need a control plane, so a second part runs PostgreSQL,
// llmgw-controlplane (the provider credential is a built-in secret holding
// the canary) and a data plane fed by it, configured through the admin API,
// and drives, with the canary in the prompts, tool arguments and headers:
// answers whose ledger rows (with their limit charges) the control plane's
// writer stores, each refusal of the quota step (a budget used up: 402; a
// request and a token rate limit used up: 429; a budget never configured;
// no price under a fail_closed budget), then, with the control plane gone,
// fail_closed budgets and rate limits that cannot be allocated. No line of
// that data plane, the control plane, Postgres's server log or the mock
// may hold it either.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { metricValue, scrapeMetrics } from './exposition.mjs';

const CANARY = `CNRY${randomBytes(8).toString('hex')}`;
const TOOL = `tool_${CANARY}`;
const KEY_ENV = 'LLMGW_IT_CANARY_PROVIDER_KEY';
const T = { timeout: 120_000 };

let mock;
let gw;

function provider(name, driver, base, extra = {}) {
  return {
    name, driver, base_url: base, credential_ref: `env:${KEY_ENV}`, headers: {},
    enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000, ...extra,
  };
}

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
  process.env[KEY_ENV] = `sk-${CANARY}`;
  try {
    gw = await h.startGateway({
      mock,
      args: ['--retry-base-ms', '10'],
      extraProviders: [
        provider('cnp', 'openai', mock.v1),
        provider('cna', 'anthropic', mock.url),
        provider('cnhang', 'openai', mock.v1, { first_byte_timeout_ms: 300, idle_timeout_ms: 300 }),
      ],
      extraRoutes: [
        { name: 'cn-ok', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'cnp', model: 'cn-ok' }] },
        { name: 'cn-ant', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'cna', model: 'cn-ant' }] },
        {
          name: 'cn-fo', capability: 'chat', strategy: 'ordered',
          entries: [{ provider: 'cnp', model: 'cn-fo-1#status=500' }, { provider: 'cna', model: 'cn-fo-2' }],
        },
        { name: 'cn-emb', capability: 'embeddings', strategy: 'ordered', entries: [{ provider: 'cnp', model: 'cn-emb' }] },
      ],
    });
  } finally {
    delete process.env[KEY_ENV];
  }
});

after(async () => {
  await h.stopAll();
});

const HEADERS = {
  ...h.AUTH,
  'user-agent': `canary-agent/${CANARY}`,
  'x-canary-note': CANARY,
  'x-llmgw-session-id': CANARY,
  'x-llmgw-affinity-key': CANARY,
};

const PARAMS = { type: 'object', properties: { q: { type: 'string', description: CANARY } } };

function chatBody(model, extra = {}) {
  return {
    model,
    messages: [
      { role: 'system', content: `system ${CANARY}` },
      { role: 'user', content: `user ${CANARY}` },
      {
        role: 'assistant', content: `assistant ${CANARY}`,
        tool_calls: [{ id: 'call_1', type: 'function', function: { name: TOOL, arguments: JSON.stringify({ q: CANARY }) } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: `result ${CANARY}` },
      { role: 'user', content: `again ${CANARY}` },
    ],
    tools: [{ type: 'function', function: { name: TOOL, description: `describes ${CANARY}`, parameters: PARAMS } }],
    ...extra,
  };
}

function messagesBody(model, extra = {}) {
  return {
    model,
    max_tokens: 64,
    system: `system ${CANARY}`,
    messages: [
      { role: 'user', content: `user ${CANARY}` },
      { role: 'assistant', content: [{ type: 'text', text: `assistant ${CANARY}` }, { type: 'tool_use', id: 'toolu_1', name: TOOL, input: { q: CANARY } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: `result ${CANARY}` }, { type: 'text', text: CANARY }] },
    ],
    tools: [{ name: TOOL, description: `describes ${CANARY}`, input_schema: PARAMS }],
    ...extra,
  };
}

function responsesBody(model, extra = {}) {
  return {
    model,
    instructions: `system ${CANARY}`,
    input: [
      { role: 'user', content: `user ${CANARY}` },
      { type: 'function_call', call_id: 'call_1', name: TOOL, arguments: JSON.stringify({ q: CANARY }) },
      { type: 'function_call_output', call_id: 'call_1', output: `result ${CANARY}` },
    ],
    tools: [{ type: 'function', name: TOOL, description: `describes ${CANARY}`, parameters: PARAMS }],
    ...extra,
  };
}

async function post(path, body, { headers = HEADERS, stream = false } = {}) {
  if (stream) return h.collectStream(gw.port, { path, headers, body });
  return h.request(gw.port, { path, headers, body });
}

// Every path that logs; each with the status that shows it was taken.
const CASES = [];
const add = (name, status, run) => CASES.push({ name, status, run });
for (const stream of [false, true]) {
  const s = stream ? 'stream' : 'whole';
  add(`chat ${s}`, 200, () => post('/v1/chat/completions', chatBody('cn-ok', { stream }), { stream }));
  add(`messages ${s}`, 200, () => post('/v1/messages', messagesBody('cn-ant', { stream }), { stream }));
  add(`responses ${s}`, 200, () => post('/v1/responses', responsesBody('cn-ok', { stream }), { stream }));
  add(`failover ${s}`, 200, () => post('/v1/chat/completions', chatBody('cn-fo', { stream }), { stream }));
}
add('embeddings', 200, () => post('/v1/embeddings', { model: 'cn-emb', input: [`embed ${CANARY}`, CANARY] }));
add('count_tokens', 200, () => post('/v1/messages/count_tokens', messagesBody('cn-ant', { max_tokens: undefined })));
// failure classes, through exact selectors (retried, never failed over)
for (const [fault, status] of [
  ['status=500', 502], ['status=429,retry_after=0', 429], ['status=401', 502], ['status=400', 400],
  ['status=413', 413], ['empty=1', 502], ['error=context_length', 400], ['error=content_filter', 400],
  ['error=model_not_found', 503], ['error=insufficient_quota', 429], ['error=unsupported', 400],
  ['error=not_found', 404], ['malformed=1', 502], ['drop_after=0', 502],
]) {
  add(`failure ${fault}`, status, () => post('/v1/chat/completions', chatBody(`cnp/cn-f#${fault}`)));
}
add('failure timeout', 504, () => post('/v1/chat/completions', chatBody('cnhang/cn-hang#hang=1')));
add('failure anthropic 500', 502, () => post('/v1/messages', messagesBody('cna/cn-a#status=500')));
add('mid-stream error', 200, () => post('/v1/chat/completions', chatBody('cnp/cn-mid#drop_after=2', { stream: true }), { stream: true }));
add('no route (the selector holds the canary)', 404, () => post('/v1/chat/completions', chatBody(`cn-nope-${CANARY}`)));
add('no route, exact selector', 404, () => post('/v1/chat/completions', chatBody(`nosuchprovider/${CANARY}`)));
add('breaker opens', 502, () => post('/v1/chat/completions', chatBody('cnp/cn-br#status=503')));
add('breaker open: skipped', 503, () => post('/v1/chat/completions', chatBody('cnp/cn-br#status=503')));
add('bad JSON', 400, () => post('/v1/chat/completions', `{"model":"cn-ok","messages":[${CANARY}`));
// Refused by a translation (an OpenAI client, an Anthropic provider); passed
// through, unknown, to a provider of the client's own format.
add('unsupported parameter', 400, () => post('/v1/chat/completions', chatBody('cn-ant', { [`x_${CANARY}`]: CANARY })));
add('passed-through parameter', 200, () => post('/v1/chat/completions', chatBody('cn-ok', { [`x_${CANARY}`]: CANARY })));
add('bad API key', 401, () => post('/v1/chat/completions', chatBody('cn-ok'), { headers: { ...HEADERS, authorization: `Bearer sk-${CANARY}` } }));
add('bad x-api-key', 401, () => post('/v1/messages', messagesBody('cn-ant'), { headers: { 'x-api-key': CANARY, 'x-canary-note': CANARY } }));
add('bad session header', 400, () => post('/v1/chat/completions', chatBody('cn-ok'), { headers: { ...HEADERS, 'x-llmgw-session-id': `${CANARY} with spaces` } }));

describe('the canary reaches no log', () => {
  const results = [];

  before(async () => {
    for (const c of CASES) {
      const r = await c.run();
      results.push({ c, r });
    }
    // The client that leaves mid-stream.
    const s = await h.openStream(gw.port, {
      headers: HEADERS, body: chatBody('cnp/cn-slow#chunks=50,chunk_delay_ms=20', { stream: true }),
    });
    await s.nextEvent();
    s.destroy();
    // Every request's line is out (the one that left included).
    await h.waitFor(() => gw.accessLog().length >= CASES.length + 1, { what: 'every access line' });
    await h.sleep(200);
  });

  test('each path was taken (by its status)', T, () => {
    for (const { c, r } of results) {
      assert.equal(r.status, c.status, `${c.name}: ${r.text ?? r.raw}`);
    }
    // The canary did reach the gateway: a refusal quotes the bad JSON's
    // text back to the client (never to a log).
    const bad = results.find(({ c }) => c.name === 'bad JSON').r;
    assert.ok(bad.text.includes(CANARY) || bad.json?.error, bad.text);
    const breaker = gw.proc.stderrJson?.() ?? gw.proc.stderrLines.map(h.tryParseJson).filter(Boolean);
    assert.ok(breaker.some((j) => j.msg === 'breaker state change' && j.to === 'open'), 'the breaker opened');
  });

  test('no line of the data plane or the mock holds it', T, () => {
    const sources = [
      ['dataplane stdout', gw.proc.stdoutText],
      ['dataplane stderr', gw.proc.stderrText],
      ['mock stdout', mock.proc.stdoutText],
      ['mock stderr', mock.proc.stderrText],
      ['mock usage log', fs.readFileSync(mock.usageLogPath, 'utf8')],
    ];
    for (const [what, text] of sources) {
      const hits = text.split('\n').filter((l) => l.includes(CANARY));
      assert.deepEqual(hits, [], `${what} holds the canary`);
    }
    // and the logs are there to be searched
    assert.ok(gw.accessLog().length >= CASES.length, 'access lines');
    assert.ok(gw.attemptLog().length >= 20, `attempt lines: ${gw.attemptLog().length}`);
    assert.ok(mock.readUsage().length >= 20, 'usage lines');
  });
});

describe('through a control plane: the ledger, budget and rate-limit refusals', () => {
  const MKEY = masterKey();
  let pg;
  let cp;
  let cfg;
  let dp;
  const keys = {}; // id -> plaintext
  const results = [];

  async function key(id, body = {}) {
    keys[id] = (await cfg.api('POST', '/v1/admin/keys', { id, ...body }, 201)).key;
  }
  const limit = (body) => cfg.api('POST', '/v1/admin/limits', { period: 'day', ...body }, 201);
  const as = (id) => ({ ...HEADERS, authorization: `Bearer ${keys[id]}` });
  async function run(name, status, id, body, stream = false) {
    const r = stream
      ? await h.collectStream(dp.port, { headers: as(id), body })
      : await h.request(dp.port, { headers: as(id), body });
    results.push({ name, status, r });
    return r;
  }

  before(async () => {
    h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
    pg = await h.startPostgres();
    cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: MKEY.hex } });
    cfg = new Config(cp, pg, MKEY);
    await cfg.secret('cn-provider-key', `sk-${CANARY}`);
    await cfg.provider({ name: 'cnp', driver: 'openai', base_url: mock.v1, credential_ref: 'cn-provider-key' });
    await cfg.route('cn-ok', [{ provider: 'cnp', model: 'cn-ok' }]);
    await cfg.route('cn-unpriced', [{ provider: 'cnp', model: 'cn-unpriced' }]);
    await cfg.api('POST', '/v1/admin/prices', { provider: 'cnp', model: 'cn-ok', input_price: 1_000_000, output_price: 2_000_000 }, 201);
    await cfg.api('POST', '/v1/admin/teams', { name: 'cn-budgeted', require_budget: true }, 201);
    await key('k-ok');
    // unpriced: allow, so the mid-stream attempt's unpriced model goes through.
    await limit({ id: 'cn-ok-day', scope_kind: 'key', scope: 'k-ok', metric: 'cost', amount: 1_000_000_000_000, unpriced: 'allow' });
    await key('k-budget');
    await limit({ id: 'cn-budget-day', scope_kind: 'key', scope: 'k-budget', metric: 'cost', amount: 1 });
    await key('k-rpd');
    await limit({ id: 'cn-rpd', scope_kind: 'key', scope: 'k-rpd', metric: 'requests', amount: 1 });
    await key('k-tpd');
    await limit({ id: 'cn-tpd', scope_kind: 'key', scope: 'k-tpd', metric: 'tokens', amount: 1 });
    await key('k-nobudget', { team: 'cn-budgeted' });
    await key('k-unpriced');
    await limit({ id: 'cn-unpriced-day', scope_kind: 'key', scope: 'k-unpriced', metric: 'cost', amount: 1_000_000_000_000, offline: 'fail_closed' });
    await key('k-closed');
    await limit({ id: 'cn-closed-day', scope_kind: 'key', scope: 'k-closed', metric: 'cost', amount: 1_000_000_000_000, offline: 'fail_closed' });
    await key('k-rclosed');
    await limit({ id: 'cn-rclosed-day', scope_kind: 'key', scope: 'k-rclosed', metric: 'requests', amount: 1000, offline: 'fail_closed' });
    dp = await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-canary' });
    const v = cfg.version();
    await h.waitFor(async () => (await h.request(dp.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v,
      { what: `the data plane serving version ${v}` });

    await run('answer under a budget', 200, 'k-ok', chatBody('cn-ok'));
    await run('streamed answer under a budget', 200, 'k-ok', chatBody('cn-ok', { stream: true, stream_options: { include_usage: true } }), true);
    await run('mid-stream error under a budget', 200, 'k-ok', chatBody('cnp/cn-ok#drop_after=2', { stream: true }), true);
    await run('the one request of a daily request limit', 200, 'k-rpd', chatBody('cn-ok'));
    await run('budget used up', 402, 'k-budget', chatBody('cn-ok'));
    await run('requests per day used up', 429, 'k-rpd', chatBody('cn-ok', { stream: true }));
    await run('tokens per day used up', 429, 'k-tpd', chatBody('cn-ok'));
    await run('budget never configured', 402, 'k-nobudget', chatBody('cn-ok'));
    await run('no price under a fail_closed budget', 402, 'k-unpriced', chatBody('cn-unpriced'));
    // The control plane's writer stores every attempt's row (charges and all).
    await h.waitFor(() => Number(pg.sql('SELECT count(*) FROM ledger')) >= 4, { what: 'four ledger rows stored' });
    await h.waitFor(async () => metricValue((await scrapeMetrics(dp.port)).samples, 'llmgw_ledger_pending_rows') === 0,
      { what: 'every ledger row acknowledged' });
    // The control plane gone: fail_closed limits cannot be allocated.
    await cp.proc.stop();
    await run('budget unallocated', 402, 'k-closed', chatBody('cn-ok'));
    await run('rate limit unallocated', 429, 'k-rclosed', chatBody('cn-ok'));
  });

  test('each path was taken (by its status and code)', T, async () => {
    for (const { name, status, r } of results) assert.equal(r.status, status, `${name}: ${r.text ?? r.raw}`);
    const code = (name) => results.find((x) => x.name === name).r.json?.error?.code;
    assert.equal(code('budget used up'), 'budget_exceeded');
    assert.equal(code('requests per day used up'), 'rate_limited');
    assert.equal(code('tokens per day used up'), 'rate_limited');
    assert.equal(code('budget never configured'), 'budget_not_configured');
    assert.equal(code('no price under a fail_closed budget'), 'budget_unpriced');
    assert.equal(code('budget unallocated'), 'budget_unallocated');
    assert.equal(code('rate limit unallocated'), 'rate_limited');
    // The rows carry the charges, and the limits' windows hold them.
    // (the mid-stream attempt's model has no price: a budget that allows
    // unpriced targets lets it through and charges it nothing)
    assert.equal(pg.sql('SELECT count(*) FROM ledger'), '4');
    // The writer handled rows that carry the canary (the session header).
    assert.equal(pg.sql(`SELECT count(*) FROM ledger WHERE session = '${CANARY}'`), '4');
    assert.equal(pg.sql("SELECT count(*) FROM ledger WHERE charges <> '[]'::jsonb"), '3');
    assert.equal(pg.sql("SELECT spent FROM limit_windows WHERE limit_id = 'cn-rpd'"), '1');
    const { samples } = await scrapeMetrics(dp.port);
    const refusals = (cause, metric) => metricValue(samples, 'llmgw_limit_refusals_total', { cause, metric, period: metric === 'cost' && cause === 'budget_not_configured' ? '' : 'day' });
    assert.equal(refusals('budget_exceeded', 'cost'), 1);
    assert.equal(refusals('rate_limited', 'requests'), 1);
    assert.equal(refusals('rate_limited', 'tokens'), 1);
    assert.equal(refusals('budget_not_configured', 'cost'), 1);
    assert.equal(refusals('budget_unpriced', 'cost'), 1);
    assert.equal(refusals('budget_unallocated', 'cost'), 1);
    assert.equal(refusals('rate_unallocated', 'requests'), 1);
  });

  test('no line of the data plane, the control plane, Postgres or the mock holds it', T, () => {
    const sources = [
      ['dataplane stdout', dp.proc.stdoutText],
      ['dataplane stderr', dp.proc.stderrText],
      ['controlplane stdout', cp.proc.stdoutText],
      ['controlplane stderr', cp.proc.stderrText],
      ['postgres log', fs.readFileSync(`${pg.dir}/log`, 'utf8')],
      ['mock stdout', mock.proc.stdoutText],
      ['mock stderr', mock.proc.stderrText],
      ['mock usage log', fs.readFileSync(mock.usageLogPath, 'utf8')],
    ];
    for (const [what, text] of sources) {
      const hits = text.split('\n').filter((l) => l.includes(CANARY));
      assert.deepEqual(hits, [], `${what} holds the canary`);
    }
    // and the logs are there to be searched
    assert.ok(dp.accessLog().length >= results.length, 'access lines');
    assert.ok(cp.proc.stdoutLines.length + cp.proc.stderrLines.length > 0, 'control plane lines');
  });
});
