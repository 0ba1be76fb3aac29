// The ledger, end to end: PostgreSQL + llmgw-controlplane + two data planes
// (each with an on-disk spool) + two mock providers, each writing its own
// usage log. Every attempt the gateway makes is one ledger row, keyed by
// the attempt id the gateway sends upstream as x-request-id; the mock
// providers' logs are the independent record the ledger is reconciled
// against, in tokens and in cost (BigInt picodollars). Contracts:
// docs/ledger.md.

import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';

const T = { timeout: 240_000 };
const KEY = masterKey();
// Prices in picodollars per token (what /v1/admin/prices stores).
const PRICE = {
  alpha: { input: 3_000_000n, output: 15_000_000n, cache_read: 300_000n, reasoning: 20_000_000n },
  beta: { input: 250_000n, output: 1_250_000n, cache_read: 25_000n, reasoning: 2_000_000n },
};

// Faults ride in the model name after '#' (docs/mockprovider.md).
const ROUTES = {
  fast: [{ provider: 'alpha', model: 'mock-gpt' }, { provider: 'beta', model: 'mock-gpt' }],
  // The first 300 attempts on alpha fail (each retried once, then failed over).
  flaky: [{ provider: 'alpha', model: 'mock-gpt#status=503,times=300,tag=flaky' }, { provider: 'beta', model: 'mock-gpt' }],
  down: [{ provider: 'alpha', model: 'mock-gpt#status=503' }, { provider: 'beta', model: 'mock-gpt#error=overloaded' }],
  // Cache reads and reasoning tokens: each class at its own price.
  cached: [{ provider: 'beta', model: 'mock-gpt#cache_read=3,reasoning=4' }],
  // A long, paced stream, for a client that leaves halfway.
  long: [{ provider: 'alpha', model: 'mock-gpt#chunks=201,chunk_delay_ms=4' }],
};

let pg;
let cp;
let cfg;
let mocks; // name -> Mock
let grpcPort;
let dir;
let apiKey;
const dps = {}; // replica id -> Gateway

async function startCP() {
  return h.startControlPlane({
    pg, env: { LLMGW_MASTER_KEY: KEY.hex }, args: ['--grpc-listen', `127.0.0.1:${grpcPort}`],
  });
}

async function startDP(id) {
  const g = await h.startGatewayCP({
    controlPlane: `127.0.0.1:${grpcPort}`,
    cache: path.join(dir, `${id}.cache.json`),
    replicaId: id,
    args: ['--ledger-spool', path.join(dir, `${id}.spool`), '--ledger-flush-timeout-ms', '3000'],
  });
  dps[id] = g;
  return g;
}

const auth = () => ({ authorization: `Bearer ${apiKey}` });

function ledgerRows(where = 'true') {
  const out = pg.sql(`SELECT coalesce(json_agg(l ORDER BY attempt_id), '[]') FROM (SELECT attempt_id, request_id,
    attempt, replica, key_id, route, provider, model, selector, session, agent, purpose, api, stream,
    input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, status, failure_class,
    cost_picodollars::text AS cost, currency, snapshot_version, usage_estimated, cache_hit,
    saved_picodollars::text AS saved FROM ledger WHERE ${where}) l`);
  return JSON.parse(out);
}

const ledgerCount = () => Number(pg.sql('SELECT count(*) FROM ledger'));

function usageLines() {
  const all = [];
  for (const [name, m] of Object.entries(mocks)) {
    for (const l of m.readUsage()) all.push({ ...l, mock: name });
  }
  return all;
}

// The provider's usage (the mock's log: input counts cache reads; output
// counts reasoning) priced per class, exactly.
function expectedCost(provider, input, output, cacheRead = 0, reasoning = 0) {
  const p = PRICE[provider];
  return (BigInt(input - cacheRead) * p.input + BigInt(cacheRead) * p.cache_read
    + BigInt(output - reasoning) * p.output + BigInt(reasoning) * p.reasoning).toString();
}

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  dir = h.makeTmpDir();
  pg = await h.startPostgres();
  mocks = { alpha: await h.startMock(), beta: await h.startMock() };
  grpcPort = await h.deadPort();
  cp = await startCP();
  cfg = new Config(cp, pg, KEY);
  await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mocks.alpha.v1 });
  await cfg.provider({ name: 'beta', driver: 'openai', base_url: mocks.beta.v1 });
  for (const [route, entries] of Object.entries(ROUTES)) await cfg.route(route, entries);
  const priced = new Set();
  for (const e of Object.values(ROUTES).flat()) {
    const k = `${e.provider}/${e.model}`;
    if (priced.has(k)) continue;
    priced.add(k);
    await cfg.api('POST', '/v1/admin/prices', {
      provider: e.provider,
      model: e.model,
      input_price: Number(PRICE[e.provider].input),
      output_price: Number(PRICE[e.provider].output),
      cache_read_price: Number(PRICE[e.provider].cache_read),
      reasoning_price: Number(PRICE[e.provider].reasoning),
    }, 201);
  }
  apiKey = await cfg.apiKey('key_ledger');
  const v = cfg.version();
  await startDP('dp-a');
  await startDP('dp-b');
  for (const g of Object.values(dps)) {
    await h.waitFor(async () => (await h.request(g.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version === v,
      { what: `${g.url} serving version ${v}` });
  }
});

after(async () => {
  await h.stopAll();
});

describe('ledger', () => {
  test('a non-streaming answer: headers name the ledger row and its exact cost; the row matches the provider log', T, async () => {
    const g = dps['dp-a'];
    const r = await h.request(g.port, {
      headers: { ...auth(), 'x-llmgw-agent': 'plan\\ner', 'x-llmgw-purpose': 'unit"test', 'x-llmgw-session-id': 'sess-1' },
      body: { model: 'fast', messages: [{ role: 'user', content: 'one two three' }] },
    });
    assert.equal(r.status, 200, r.text);
    const id = r.headers['x-llmgw-ledger-id'];
    assert.match(id, /\.1$/, 'attempt 1 of the request');
    assert.equal(id, `${r.headers['x-request-id']}.1`);
    const u = r.json.usage;
    const cost = expectedCost('alpha', u.prompt_tokens, u.completion_tokens);
    assert.equal(r.headers['x-llmgw-cost-picodollars'], cost);
    assert.equal(r.headers['x-llmgw-cost-currency'], 'USD');
    await h.waitFor(() => ledgerRows(`attempt_id = '${id}'`).length === 1, { what: 'the row stored' });
    const [row] = ledgerRows(`attempt_id = '${id}'`);
    assert.equal(row.cost, cost);
    assert.equal(row.input_tokens, u.prompt_tokens);
    assert.equal(row.output_tokens, u.completion_tokens);
    assert.deepEqual([row.key_id, row.route, row.provider, row.model, row.selector, row.replica, row.api, row.stream],
      ['key_ledger', 'fast', 'alpha', 'mock-gpt', 'fast', 'dp-a', 'openai.chat', false]);
    // A backslash and a quote reach the row as sent (COPY and JSON escaping).
    assert.deepEqual([row.session, row.agent, row.purpose], ['sess-1', 'plan\\ner', 'unit"test']);
    assert.equal(row.status, 200);
    assert.equal(row.failure_class, null);
    // An upstream attempt is no cache hit and saved nothing (NULL, not 0).
    assert.deepEqual([row.cache_hit, row.saved], [false, null]);
    const line = usageLines().find((l) => l.x_request_id === id);
    assert.ok(line, 'the provider saw the attempt id');
    assert.equal(line.usage.input_tokens, row.input_tokens);
    assert.equal(line.usage.output_tokens, row.output_tokens);
  });

  test('a stream: the final usage event carries the ledger id and the cost (official SDK)', T, async () => {
    const g = dps['dp-b'];
    const client = new OpenAI({ apiKey, baseURL: `${g.url}/v1`, maxRetries: 0 });
    const stream = await client.chat.completions.create({
      model: 'fast', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'stream me please' }],
    });
    let last;
    for await (const c of stream) if (c.usage) last = c;
    assert.ok(last?.llmgw, JSON.stringify(last));
    const cost = expectedCost('alpha', last.usage.prompt_tokens, last.usage.completion_tokens);
    assert.equal(String(last.llmgw.cost_picodollars), cost);
    assert.equal(last.llmgw.currency, 'USD');
    await h.waitFor(() => ledgerRows(`attempt_id = '${last.llmgw.ledger_id}'`).length === 1, { what: 'the streamed row' });
    const [row] = ledgerRows(`attempt_id = '${last.llmgw.ledger_id}'`);
    assert.equal(row.cost, cost);
    assert.equal(row.stream, true);
  });

  test('a client that leaves mid-stream pays for what it received: an estimated row, never 0', T, async () => {
    const g = dps['dp-a'];
    const body = { model: 'long', stream: true, messages: [{ role: 'user', content: 'a long answer please' }] };
    // The whole answer, for comparison.
    const full = await h.collectStream(g.port, { body, headers: { ...auth(), 'x-request-id': h.randomId('whole') } });
    assert.equal(full.status, 200);
    const fullId = full.headers['x-request-id'];
    // The same request, left after 100 content chunks.
    const rid = h.randomId('cut');
    const s = await h.openStream(g.port, { body, headers: { ...auth(), 'x-request-id': rid } });
    assert.equal(s.status, 200);
    let seen = 0;
    while (seen < 100) {
      const e = await s.nextEvent(15_000);
      assert.ok(e !== null, `the stream ended early; raw:\n${s.raw.slice(-500)}`);
      if (h.tryParseJson(e)?.choices?.[0]?.delta?.content) seen++;
    }
    s.destroy();
    const mockLine = await mocks.alpha.usageFor(rid, { timeoutMs: 20_000 });
    assert.equal(mockLine.outcome, 'client_closed', JSON.stringify(mockLine));
    const generated = mockLine.usage.output_tokens;
    assert.ok(generated >= 100 && generated < 201, `the provider generated ${generated}`);
    await h.waitFor(() => ledgerRows(`request_id LIKE '${rid}%'`).length === 1
      && ledgerRows(`request_id LIKE '${fullId}%'`).length === 1, { what: 'both rows stored' });
    const [row] = ledgerRows(`request_id LIKE '${rid}%'`);
    const [whole] = ledgerRows(`request_id LIKE '${fullId}%'`);
    console.log(`# cut after 100 of 201 chunks: the provider generated ${generated} output tokens; the row says `
      + `${row.input_tokens} in, ${row.output_tokens} out (estimated), ${row.cost} picodollars; the whole answer `
      + `${whole.input_tokens} in, ${whole.output_tokens} out, ${whole.cost} picodollars`);
    assert.equal(row.failure_class, 'canceled');
    assert.equal(row.usage_estimated, true);
    assert.equal(whole.usage_estimated, false);
    // What the provider bills is about what it generated: the estimate is
    // of that order (four bytes a token, the mock's words "tokN " are 5 to
    // 7 bytes), never 0, and below the whole answer's.
    assert.ok(row.output_tokens >= generated / 2 && row.output_tokens <= generated * 2,
      `estimated ${row.output_tokens} output tokens for ${generated} generated`);
    assert.ok(row.input_tokens > 0, JSON.stringify(row));
    assert.ok(BigInt(row.cost) > 0n && BigInt(row.cost) < BigInt(whole.cost), `${row.cost} vs ${whole.cost}`);
    assert.equal(row.cost, expectedCost('alpha', row.input_tokens, row.output_tokens));
    // The request's log line says so too.
    const line = await g.accessLogFor(rid);
    assert.equal(line.usage_estimated, true);
    // And the usage API counts it.
    const u = await cfg.api('GET', '/v1/admin/usage?group_by=route', undefined, 200);
    const grp = u.groups.find((x) => x.route === 'long');
    assert.ok(grp && grp.estimated_attempts >= 1, JSON.stringify(u));
  });

  test('the table refuses a negative cost (a check of its own, behind the writer\'s)', T, async () => {
    const insert = (cost) => pg.sql(`SELECT llmgw_ledger_partition(now()); INSERT INTO ledger (at, attempt_id, request_id,
      attempt, replica, provider, model, latency_ms, status, snapshot_version, cost_picodollars)
      VALUES (now(), 'neg-${cost}', 'neg', 1, 'test', 'alpha', 'm', 1, 200, 1, ${cost})`);
    assert.throws(() => insert(-1), /ledger_cost_nonnegative/);
    insert(0);
    assert.equal(pg.sql("SELECT count(*) FROM ledger WHERE attempt_id LIKE 'neg-%'"), '1');
    pg.sql("DELETE FROM ledger WHERE attempt_id LIKE 'neg-%'");
  });

  test('a failover: one row per attempt, the failed one with its class and no cost beyond its usage', T, async () => {
    const g = dps['dp-a'];
    const r = await h.request(g.port, {
      headers: auth(), body: { model: 'down', messages: [{ role: 'user', content: 'fail over' }] },
    });
    // Both targets fail: alpha retried once, beta (the last) up to three times.
    assert.equal(r.status, 503, r.text);
    const rid = r.headers['x-request-id'];
    const n = Number(r.headers['x-llmgw-attempts']);
    assert.ok(n >= 2);
    await h.waitFor(() => ledgerRows(`request_id = '${rid}'`).length === n, { what: `${n} rows` });
    const rows = ledgerRows(`request_id = '${rid}'`);
    assert.deepEqual(rows.map((x) => x.attempt).sort(), [...Array(n).keys()].map((i) => i + 1));
    for (const row of rows) {
      assert.equal(row.status, 503);
      assert.equal(row.failure_class, row.provider === 'alpha' ? 'provider_5xx' : 'model_unavailable');
      assert.equal(row.cost, '0');
    }
    assert.ok(rows.some((x) => x.provider === 'alpha') && rows.some((x) => x.provider === 'beta'));
  });

  test('reconciliation: 2,000 requests over two data planes, mixed streams, failovers and tool calls: 0 mismatches, 0 orphans', T, async () => {
    const before = new Set(ledgerRows().map((r) => r.attempt_id));
    const beforeLines = new Set(usageLines().map((l) => l.x_request_id));
    const tools = [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: { q: { type: 'string' }, n: { type: 'integer' } } } } }];
    const N = 2000;
    let next = 0;
    const statuses = {};
    async function worker() {
      while (next < N) {
        const i = next++;
        const g = i % 2 ? dps['dp-a'] : dps['dp-b'];
        const stream = i % 3 === 0;
        // Every 4th goes to a route whose primary fails its first 300
        // attempts (retried, then failed over).
        const model = i % 4 === 0 ? 'flaky' : i % 6 === 1 ? 'cached' : 'fast';
        const body = { model, messages: [{ role: 'user', content: `request ${i} ${'w '.repeat(i % 17)}` }] };
        if (i % 5 === 0) body.tools = tools;
        if (stream) body.stream = true;
        if (stream && i % 2) body.stream_options = { include_usage: true };
        const headers = auth();
        const r = stream ? await h.collectStream(g.port, { headers, body }) : await h.request(g.port, { headers, body });
        statuses[r.status] = (statuses[r.status] ?? 0) + 1;
      }
    }
    await Promise.all(Array.from({ length: 16 }, worker));
    const lines = usageLines().filter((l) => !beforeLines.has(l.x_request_id));
    await h.waitFor(() => ledgerCount() - before.size >= lines.length,
      { timeoutMs: 60_000, what: `${lines.length} rows stored (have ${ledgerCount() - before.size})` });
    const rows = ledgerRows().filter((r) => !before.has(r.attempt_id));
    const byId = new Map(rows.map((r) => [r.attempt_id, r]));
    const mismatches = [];
    const seen = new Set();
    for (const l of lines) {
      const row = byId.get(l.x_request_id);
      if (!row) { mismatches.push({ orphan: 'provider', id: l.x_request_id }); continue; }
      seen.add(row.attempt_id);
      const billed = l.status === 200;
      const u = billed ? l.usage : { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, reasoning_tokens: 0 };
      const cost = expectedCost(l.mock, u.input_tokens, u.output_tokens, u.cache_read_tokens, u.reasoning_tokens);
      if (row.provider !== l.mock || row.input_tokens !== u.input_tokens - u.cache_read_tokens
        || row.cache_read_tokens !== u.cache_read_tokens || row.output_tokens !== u.output_tokens
        || row.reasoning_tokens !== u.reasoning_tokens || row.cost !== cost) {
        mismatches.push({ id: l.x_request_id, line: l, row });
      }
    }
    for (const r of rows) if (!seen.has(r.attempt_id)) mismatches.push({ orphan: 'ledger', row: r });
    console.log(`# reconciliation: ${N} requests, ${lines.length} provider attempts, ${rows.length} ledger rows, statuses ${JSON.stringify(statuses)}, ${mismatches.length} mismatches`);
    assert.deepEqual(mismatches.slice(0, 5), []);
    assert.equal(rows.length, lines.length);
    assert.ok(lines.length > N, 'failovers and retries made extra attempts');
    assert.ok(rows.some((r) => r.stream) && rows.some((r) => !r.stream));
    assert.ok(rows.some((r) => r.failure_class === 'provider_5xx'));
    assert.ok(rows.some((r) => r.cache_read_tokens > 0 && r.reasoning_tokens > 0), 'every price class used');
  });

  test('the control plane stopped mid-load and restarted: every attempt\'s row arrives exactly once', T, async () => {
    const before = ledgerCount();
    const beforeLines = new Set(usageLines().map((l) => l.x_request_id));
    let stop = false;
    let sent = 0;
    const errors = [];
    async function load(g) {
      while (!stop) {
        const r = await h.request(g.port, { headers: auth(), body: { model: 'fast', messages: [{ role: 'user', content: `outage ${sent++}` }] } });
        if (r.status !== 200) errors.push(r.status);
      }
    }
    const loads = Object.values(dps).flatMap((g) => [load(g), load(g)]);
    await h.sleep(500);
    assert.equal((await cp.proc.stop()).code, 0);
    await h.sleep(1500);
    cp = await startCP();
    cfg = new Config(cp, pg, KEY);
    await h.sleep(500);
    stop = true;
    await Promise.all(loads);
    assert.deepEqual(errors, [], 'serving never stopped');
    const lines = usageLines().filter((l) => !beforeLines.has(l.x_request_id));
    await h.waitFor(() => ledgerCount() - before >= lines.length,
      { timeoutMs: 60_000, what: `${lines.length} rows after the outage (have ${ledgerCount() - before})` });
    await h.sleep(500);
    const ids = new Set(lines.map((l) => l.x_request_id));
    const rows = ledgerRows().filter((r) => ids.has(r.attempt_id));
    assert.equal(rows.length, ids.size, 'each attempt exactly once');
    assert.equal(ledgerCount() - before, lines.length, 'no extra rows');
    console.log(`# outage: ${lines.length} attempts during a control-plane restart, ${rows.length} rows, 0 duplicates`);
  });

  test('PostgreSQL stopped under load and restarted: every attempt\'s row arrives exactly once', T, async () => {
    const before = ledgerCount();
    const beforeLines = new Set(usageLines().map((l) => l.x_request_id));
    let stop = false;
    let n = 0;
    const errors = [];
    async function load(g) {
      while (!stop) {
        const r = await h.request(g.port, { headers: auth(), body: { model: 'fast', messages: [{ role: 'user', content: `pg down ${n++}` }] } });
        if (r.status !== 200) errors.push(r.status);
      }
    }
    const loads = Object.values(dps).map((g) => load(g));
    await h.sleep(300);
    await pg.stop();
    await h.sleep(2000);
    const pending = async (g) => Number((await h.request(g.port, { method: 'GET', path: '/metrics' })).text.match(/^llmgw_ledger_pending_rows (\d+)/m)?.[1]);
    const held = (await Promise.all(Object.values(dps).map(pending))).reduce((a, b) => a + b, 0);
    await pg.start();
    await h.sleep(300);
    stop = true;
    await Promise.all(loads);
    assert.deepEqual(errors, [], 'serving never stopped');
    assert.ok(held > 0, 'rows were held while PostgreSQL was away');
    const lines = usageLines().filter((l) => !beforeLines.has(l.x_request_id));
    await h.waitFor(() => ledgerCount() - before >= lines.length,
      { timeoutMs: 60_000, what: `${lines.length} rows after PostgreSQL came back (have ${ledgerCount() - before})` });
    await h.sleep(500);
    assert.equal(ledgerCount() - before, lines.length, 'each attempt exactly once');
    console.log(`# postgres outage: ${lines.length} attempts, ${held} rows held at the low point, all stored once`);
  });

  test('a data plane restarted while the control plane is down replays its spool', T, async () => {
    assert.equal((await cp.proc.stop()).code, 0);
    const g = dps['dp-b'];
    const ids = [];
    for (let i = 0; i < 20; i++) {
      const r = await h.request(g.port, { headers: auth(), body: { model: 'fast', messages: [{ role: 'user', content: `spooled ${i}` }] } });
      assert.equal(r.status, 200, r.text);
      ids.push(r.headers['x-llmgw-ledger-id']);
    }
    const spool = path.join(dir, 'dp-b.spool');
    assert.ok(fs.readdirSync(spool).some((f) => f.endsWith('.spool')), 'rows on disk');
    assert.equal((await g.proc.stop()).code, 0);
    await startDP('dp-b');
    cp = await startCP();
    cfg = new Config(cp, pg, KEY);
    const list = ids.map((x) => `'${x}'`).join(',');
    await h.waitFor(() => ledgerRows(`attempt_id IN (${list})`).length === ids.length,
      { timeoutMs: 30_000, what: 'the spooled rows stored' });
    await h.waitFor(() => fs.readdirSync(spool).filter((f) => f.endsWith('.spool')).length === 0,
      { timeoutMs: 10_000, what: 'the spool emptied once acknowledged' });
    // The new control plane's replies say it takes batches: the 20 replayed
    // rows came in LedgerBatch messages, not one message each.
    const m = (await h.request(cp.port, { method: 'GET', path: '/metrics' })).text;
    const msgs = (body) => Number(m.match(new RegExp(`^llmgw_cp_ledger_messages_total\\{body="${body}"\\} (\\d+)`, 'm'))?.[1]);
    assert.ok(msgs('ledger_batch') >= 1, m);
    assert.ok(msgs('ledger_batch') + msgs('ledger_row') < ids.length, `${msgs('ledger_batch')} batches, ${msgs('ledger_row')} single rows`);
  });

  test('clients that send the same X-Request-Id at once: one row per attempt all the same; team and project attributed', T, async () => {
    await cfg.api('POST', '/v1/admin/teams', { name: 'finance' }, 201);
    await cfg.api('POST', '/v1/admin/projects', { name: 'forecast', team: 'finance' }, 201);
    const j = await cfg.api('POST', '/v1/admin/keys', { id: 'key_proj', team: 'finance', project: 'forecast' }, 201);
    const v = cfg.version();
    for (const g of Object.values(dps)) {
      await h.waitFor(async () => (await h.request(g.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v,
        { what: `${g.url} serving version ${v}` });
    }
    const rid = h.randomId('dup');
    const rs = await Promise.all(Array.from({ length: 40 }, (_, i) => h.request(dps[i % 2 ? 'dp-a' : 'dp-b'].port, {
      headers: { authorization: `Bearer ${j.key}`, 'x-request-id': rid },
      body: { model: 'fast', messages: [{ role: 'user', content: `same id ${i}` }] },
    })));
    for (const r of rs) {
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-request-id'], rid, 'the client\'s id is echoed');
      assert.match(r.headers['x-llmgw-ledger-id'], new RegExp(`^${rid}~[0-9a-f]{8}\\.1$`));
    }
    assert.equal(new Set(rs.map((r) => r.headers['x-llmgw-ledger-id'])).size, 40, 'unique attempt ids');
    await h.waitFor(() => ledgerRows(`request_id = '${rid}'`).length === 40, { what: '40 rows for one client id' });
    const rows = pg.sql(`SELECT DISTINCT coalesce(team, '-') || '/' || coalesce(project, '-') FROM ledger WHERE request_id = '${rid}'`);
    assert.equal(rows, 'finance/forecast');
  });

  test('a row the table refuses (its month\'s partition detached) is kept in ledger_rejects, not lost', T, async () => {
    const part = pg.sql("SELECT 'ledger_' || to_char(now() AT TIME ZONE 'UTC', 'YYYY_MM')");
    const bounds = pg.sql(`SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = '${part}'`);
    pg.sql(`ALTER TABLE ledger DETACH PARTITION ${part}`);
    try {
      const r = await h.request(dps['dp-a'].port, { headers: auth(), body: { model: 'fast', messages: [{ role: 'user', content: 'detached' }] } });
      assert.equal(r.status, 200, r.text);
      const id = r.headers['x-llmgw-ledger-id'];
      await h.waitFor(() => pg.sql(`SELECT count(*) FROM ledger_rejects WHERE attempt_id = '${id}'`) === '1',
        { timeoutMs: 15_000, what: 'the row in ledger_rejects' });
      assert.equal(pg.sql(`SELECT sqlstate FROM ledger_rejects WHERE attempt_id = '${id}'`), '23514');
      assert.equal(pg.sql(`SELECT row->>'provider' FROM ledger_rejects WHERE attempt_id = '${id}'`), 'alpha');
      // Acknowledged: the data plane's spool lets it go.
      await h.waitFor(async () => {
        const m = await h.request(dps['dp-a'].port, { method: 'GET', path: '/metrics' });
        return /^llmgw_ledger_pending_rows 0$/m.test(m.text);
      }, { timeoutMs: 10_000, what: 'nothing pending on dp-a' });
    } finally {
      pg.sql(`ALTER TABLE ledger ATTACH PARTITION ${part} ${bounds}`);
    }
  });

  test('GET /v1/admin/usage: groups over a time range, totals equal the sum of rows', T, async () => {
    const from = new Date(Date.now() - 3600_000).toISOString();
    const to = new Date(Date.now() + 60_000).toISOString();
    const r = await cp.admin('GET', `/v1/admin/usage?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}&group_by=provider,model,day`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.totals.length, 1, 'one currency');
    const [tot] = r.json.totals;
    assert.equal(tot.currency, 'USD');
    const sum = (k) => r.json.groups.reduce((a, g) => a + BigInt(g[k]), 0n);
    for (const k of ['attempts', 'cost_picodollars', 'input_tokens', 'output_tokens']) assert.equal(sum(k).toString(), String(tot[k]), k);
    const db = pg.sql(`SELECT count(*) || ' ' || coalesce(sum(cost_picodollars), 0) FROM ledger WHERE at >= '${from}' AND at < '${to}'`);
    assert.equal(`${tot.attempts} ${tot.cost_picodollars}`, db);
    assert.ok(r.json.groups.length >= 2, 'alpha and beta');
    assert.ok(r.json.groups.every((g) => 'provider' in g && 'model' in g && 'day' in g && !('key' in g)));
    const bad = await cp.admin('GET', '/v1/admin/usage?group_by=prompt');
    assert.equal(bad.status, 400);
    assert.equal(bad.json.error.param, 'group_by');
    const badt = await cp.admin('GET', '/v1/admin/usage?from=yesterday');
    assert.equal(badt.status, 400);
    assert.equal(badt.json.error.param, 'from');
  });
});
