// The honest router, end to end: the fault matrix (every failure
// class the mock can provoke x its position in a 3-entry chain x streaming
// or not), retries and Retry-After, the failover budget, the bright line
// (no failover after the first content event), no_route errors for every
// cause, sessions across three data planes, affinity, the weighted split, the embeddings
// same-model rule and the response headers.
//
// Which upstream requests were made is read from the mock's usage log: the
// gateway sends its request id upstream as x-request-id on every attempt,
// and every chain entry here has its own model name, so the log says which
// target was contacted and how often. The gateway's own account is its
// access log (one "attempt" line per attempt, one "request" line).

import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [{ role: 'user', content: 'hello there' }];
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';
const IMAGE_MESSAGES = [{
  role: 'user',
  content: [{ type: 'text', text: 'what is this' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }],
}];
// Retries back off from 10 ms instead of 200 ms, so the matrix stays fast.
const GW_ARGS = ['--retry-base-ms', '10'];
// A second API key, restricted by allowlists.
const KEY2 = `llmgw-it-key2-${h.randomId('k')}`;
const AUTH2 = { authorization: `Bearer ${KEY2}` };
const UNSET_ENV = 'LLMGW_IT_ROUTER_UNSET_CREDENTIAL';

// ---------------------------------------------------------------------------
// The fault matrix: one row per failure class.
//   kind retry:   retried on the target (1 retry while entries remain, 3 on the last), then advance
//   kind advance: no retry, advance
//   kind stop:    no retry, no other target: the client gets the error at once
// status: what the client gets when the loop gives up on this class.

const CLASSES = [
  { name: 'timeout', cls: 'timeout', provider: 'hangy', fault: 'hang=1', kind: 'retry', status: 504 },
  { name: 'network', cls: 'network', provider: 'deadend', fault: '', kind: 'retry', status: 502 },
  { name: 'network_drop', cls: 'network', fault: 'drop_after=0', kind: 'retry', status: 502 },
  { name: 'provider_5xx', cls: 'provider_5xx', fault: 'status=500', kind: 'retry', status: 502 },
  { name: 'rate_limited', cls: 'rate_limited', fault: 'status=429,retry_after=0', kind: 'retry', status: 429 },
  { name: 'model_unavailable', cls: 'model_unavailable', fault: 'error=model_not_found', kind: 'retry', status: 503 },
  { name: 'quota_exhausted', cls: 'quota_exhausted', fault: 'error=insufficient_quota', kind: 'advance', status: 429 },
  { name: 'auth_failed', cls: 'auth_failed', fault: 'status=401', kind: 'advance', status: 502 },
  { name: 'empty_output', cls: 'empty_output', fault: 'empty=1', kind: 'retry', status: 502 },
  { name: 'context_overflow', cls: 'context_overflow', fault: 'error=context_length', kind: 'advance', status: 400 },
  { name: 'unsupported_input', cls: 'unsupported_input', fault: 'error=unsupported', kind: 'advance', status: 400 },
  { name: 'bad_request', cls: 'bad_request', fault: 'status=400', kind: 'stop', status: 400 },
  { name: 'not_found', cls: 'not_found', fault: 'error=not_found', kind: 'stop', status: 404 },
  { name: 'payload_too_large', cls: 'payload_too_large', fault: 'status=413', kind: 'stop', status: 413 },
  { name: 'content_filtered', cls: 'content_filtered', fault: 'error=content_filter', kind: 'stop', status: 400 },
];

const CASES = [];
for (const row of CLASSES) {
  for (const pos of [1, 2, 3]) {
    for (const stream of [false, true]) {
      const tag = `mx-${row.name}-p${pos}-${stream ? 's' : 'n'}`;
      const entries = [1, 2, 3].map((i) => {
        if (i < pos) return { provider: 'mock', model: `${tag}-${i}#status=503` };
        if (i > pos) return { provider: 'mock', model: `${tag}-${i}` };
        return { provider: row.provider ?? 'mock', model: row.fault ? `${tag}-${i}#${row.fault}` : `${tag}-${i}` };
      });
      // Retries: 1 while entries remain; on the last entry up to 3, but its
      // breaker opens after 3 consecutive health failures (docs/router.md)
      // and is consulted before every attempt, so a target that fails every
      // time gets 3 attempts there, not 4.
      const atFailing = row.kind === 'retry' ? (pos < 3 ? 2 : 3) : 1;
      const success = row.kind !== 'stop' && pos < 3;
      const classes = [...Array(2 * (pos - 1)).fill('provider_5xx'), ...Array(atFailing).fill(row.cls)];
      // Upstream requests the mock sees, per entry (a dead port is never reached).
      const perEntry = [1, 2, 3].map((i) => {
        if (i < pos) return 2;
        if (i === pos) return row.provider === 'deadend' ? 0 : atFailing;
        return success && i === pos + 1 ? 1 : 0;
      });
      CASES.push({ row, pos, stream, tag, route: tag, entries, atFailing, success, classes, perEntry });
    }
  }
}

// ---------------------------------------------------------------------------
// The snapshot

function provider(name, base, extra = {}) {
  return {
    name, driver: 'openai', base_url: base, credential_ref: 'env:MOCK_API_KEY', headers: {},
    enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000, ...extra,
  };
}

function route(name, entries, extra = {}) {
  return { name, capability: 'chat', strategy: 'ordered', entries, ...extra };
}

async function buildSnapshot(m) {
  const deadV1 = `http://127.0.0.1:${await h.deadPort()}/v1`;
  const providers = [
    provider('mockB', m.v1),
    provider('mockC', m.v1),
    // timeout: a short time to first byte, against hang=1
    provider('hangy', m.v1, { first_byte_timeout_ms: 300, idle_timeout_ms: 300 }),
    provider('off', m.v1, { enabled: false }),
    provider('nocred', m.v1, { credential_ref: `env:${UNSET_ENV}` }),
    provider('textonly', m.v1, { options: { capabilities: ['chat', 'tools'] } }),
  ];
  const routes = [
    ...CASES.map((c) => route(c.route, c.entries)),
    // the Anthropic facade
    route('ant-fo', [{ provider: 'mock', model: 'antfo-1#status=500' }, { provider: 'mock', model: 'antfo-2' }]),
    route('ant-fail', [{ provider: 'mock', model: 'antfl-1#status=500' }, { provider: 'mock', model: 'antfl-2#status=429,retry_after=0' }]),
    // retries and Retry-After
    route('retries-count', [{ provider: 'mock', model: 'rc-1#status=500' }]),
    route('retry-ok', [{ provider: 'mock', model: 'ro-1#status=503,times=1,tag=retry-ok' }, { provider: 'mock', model: 'ro-2' }]),
    route('ra-budget', [{ provider: 'mock', model: 'rb-1#status=429,retry_after=2' }, { provider: 'mock', model: 'rb-2' }]),
    // the failover budget
    // (the backup is slow to answer: a budget that ran out must stop it too)
    route('budget', [{ provider: 'mock', model: 'bu-1#hang=1' }, { provider: 'mock', model: 'bu-2#ttfb_ms=150' }]),
    // (one route per run: three budget timeouts would open the primary's breaker)
    ...Array.from({ length: 10 }, (_, i) => route(`budget-edge-${i}`,
      [{ provider: 'mock', model: `be${i}-1#hang=1` }, { provider: 'mock', model: `be${i}-2` }])),
    route('budget-slow', [{ provider: 'mock', model: 'bs-1#chunks=8,chunk_delay_ms=100' }, { provider: 'mock', model: 'bs-2' }]),
    // An answer that runs for 4 s under a route that allows 700 ms.
    route('maxdur', [{ provider: 'mock', model: 'md-1#chunks=40,chunk_delay_ms=100' }], { max_duration_ms: 700 }),
    // A provider that takes 3 s to say anything, under 400 ms.
    route('maxdur-wait', [{ provider: 'mock', model: 'md-2#ttfb_ms=3000' }], { max_duration_ms: 400 }),
    // fallback_timeout_ms in the body, and a route's own default
    ...['n', 's', 'min'].map((t) => route(`bbody-${t}`,
      [{ provider: 'mock', model: `bb${t}-1#hang=1` }, { provider: 'mock', model: `bb${t}-2#ttfb_ms=150` }])),
    route('broute', [{ provider: 'mock', model: 'br-1#hang=1' }, { provider: 'mock', model: 'br-2#ttfb_ms=150' }],
      { fallback_timeout_ms: 400 }),
    route('broute-hdr', [{ provider: 'mock', model: 'brh-1#hang=1' }, { provider: 'mock', model: 'brh-2#ttfb_ms=150' }],
      { fallback_timeout_ms: 300 }),
    // the bright line
    route('bl-drop', [{ provider: 'mock', model: 'bld-1#drop_after=2' }, { provider: 'mock', model: 'bld-2' }]),
    route('bl-malformed', [{ provider: 'mock', model: 'blm-1#malformed=3' }, { provider: 'mock', model: 'blm-2' }]),
    route('bl-sdk', [{ provider: 'mock', model: 'blsdk-1#drop_after=2' }, { provider: 'mock', model: 'blsdk-2' }]),
    route('bl-ant', [{ provider: 'mock', model: 'blant-1#drop_after=2' }, { provider: 'mock', model: 'blant-2' }]),
    route('bl-antsdk', [{ provider: 'mock', model: 'blas-1#malformed=3' }, { provider: 'mock', model: 'blas-2' }]),
    // no_route
    route('nr-capable', [
      { provider: 'textonly', model: 'nc-driver' },
      { provider: 'mock', model: 'nc-catalog' },
      { provider: 'mock', model: 'nc-context' },
    ]),
    route('nr-healthy', [
      { provider: 'off', model: 'nh-disabled' },
      { provider: 'nocred', model: 'nh-nocred' },
      { provider: 'mock', model: 'nh-breaker#status=503' },
      { provider: 'mock', model: 'nh-costly', high_cost: true },
    ]),
    route('nr-allowed', [{ provider: 'mock', model: 'na-1' }, { provider: 'mockB', model: 'na-2' }]),
    route('amb-1', [{ provider: 'mock', model: 'amb-model' }]),
    route('amb-2', [{ provider: 'mockB', model: 'amb-model' }]),
    // affinity, weighted
    route('aff', [{ provider: 'mock', model: 'af-a' }, { provider: 'mockB', model: 'af-b' }, { provider: 'mockC', model: 'af-c' }]),
    route('wt', [{ provider: 'mock', model: 'wt-a', weight: 50 }, { provider: 'mockB', model: 'wt-b', weight: 50 }],
      { strategy: 'weighted' }),
    route('wt-skew', [{ provider: 'mock', model: 'ws-a', weight: 90 }, { provider: 'mockB', model: 'ws-b', weight: 10 }],
      { strategy: 'weighted' }),
    // embeddings
    route('emb-r1', [
      { provider: 'mock', model: 'emb1#status=503,times=2,tag=emb-r1' },
      { provider: 'mock', model: 'emb-other1' },
      { provider: 'mockB', model: 'emb1#status=503,times=2,tag=emb-r1' },
    ], { capability: 'embeddings' }),
    route('emb-r2', [
      { provider: 'mock', model: 'emb2#status=503' },
      { provider: 'mock', model: 'emb-other2' },
    ], { capability: 'embeddings' }),
  ];
  // One provider per driver (claude, resp, gem, olla, bed), all on the mock.
  providers.push(...h.driverProviders(m).filter((p) => p.name !== 'textonly'));
  const snap = h.makeSnapshot({ mockV1: m.v1, deadV1, extraProviders: providers, extraRoutes: routes });
  snap.catalog = [
    { provider: 'mock', model: 'nc-catalog', capabilities: ['chat', 'tools'] },
    { provider: 'mock', model: 'nc-context', capabilities: ['chat', 'tools', 'vision'], context_window: 100 },
  ];
  snap.keys.push({ id: 'key_narrow', hash: h.sha256hex(KEY2), status: 'active', team: 'demo', allow_providers: ['mockfast'] });
  return snap;
}

// ---------------------------------------------------------------------------

let mock;
let gw;
let snapshot;
const start = () => h.startGateway({ mock, snapshot, args: GW_ARGS });

before(async () => {
  h.requireBinaries();
  delete process.env[UNSET_ENV];
  mock = await h.startMock();
  snapshot = await buildSnapshot(mock);
  gw = await start();
});

afterEach(async () => {
  const r = await h.replaceIfDead(gw, start);
  gw = r.gateway;
  if (r.error) throw r.error;
});

after(async () => {
  await h.stopAll();
});

// ---------------------------------------------------------------------------
// Helpers

function post(body, { headers = {}, path = '/v1/chat/completions', auth = h.AUTH, ...rest } = {}) {
  return h.request(gw.port, { path, body, headers: { ...auth, ...headers }, ...rest });
}

function stream(body, { headers = {}, path = '/v1/chat/completions', auth = h.AUTH } = {}) {
  return h.collectStream(gw.port, { path, body: { ...body, stream: true }, headers: { ...auth, ...headers } });
}

const attemptsHeader = (r) => Number(r.headers['x-llmgw-attempts']);

/** The mock's usage lines of one gateway request (every attempt carries its id). */
function upstreamOf(m, rid) {
  return m.readUsage().filter((l) => typeof l.x_request_id === 'string' && l.x_request_id.startsWith(rid));
}

/** Waits until the mock logged at least n lines for rid (and a little longer for stragglers). */
async function upstreamLines(m, rid, n, settleMs = 60) {
  if (n > 0) {
    await h.waitFor(() => upstreamOf(m, rid).length >= n, { timeoutMs: 10_000, what: `${n} mock lines for ${rid}` })
      .catch(() => {});
  }
  await h.sleep(settleMs);
  return upstreamOf(m, rid);
}

function countBy(lines, key) {
  const out = {};
  for (const l of lines) out[l[key]] = (out[l[key]] ?? 0) + 1;
  return out;
}

/** The gateway's log lines of one request: {attempts: [msg "attempt" lines], request: its msg "access" line}. */
async function gatewayLog(rid, nAttempts) {
  const get = () => ({ attempts: gw.attemptLog(rid), request: gw.accessLog().find((l) => l.request_id === rid) });
  await h.waitFor(() => { const g = get(); return g.request && g.attempts.length >= nAttempts; },
    { timeoutMs: 5000, what: `the access log of ${rid}` }).catch(() => {});
  return get();
}

function assertErrorBody(r, status, code, what) {
  assert.equal(r.status, status, `${what}: status; body: ${r.text ?? r.raw}`);
  const j = r.json ?? h.tryParseJson(r.raw ?? '');
  assert.ok(j && j.error && typeof j.error === 'object', `${what}: an error object; body: ${r.text ?? r.raw}`);
  assert.equal(j.error.code, code, `${what}: error.code; body: ${r.text ?? r.raw}`);
  assert.equal(typeof j.error.message, 'string');
  assert.ok(r.headers['x-request-id'], `${what}: x-request-id on an error`);
  return j.error;
}

/** SSE text as [{event, data}] (data parsed when JSON). */
function sseFrames(raw) {
  const out = [];
  for (const block of raw.split(/\r?\n\r?\n/)) {
    let event = null;
    const data = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    if (event === null && data.length === 0) continue;
    const text = data.join('\n');
    out.push({ event, data: text === '[DONE]' ? text : (h.tryParseJson(text) ?? text) });
  }
  return out;
}

/** Names every skipped candidate: provider and model appear in the message and in candidates. */
function assertNamesCandidates(err, expected, what) {
  assert.ok(Array.isArray(err.candidates), `${what}: error.candidates is an array: ${JSON.stringify(err)}`);
  const got = err.candidates.map((c) => `${c.provider}/${c.model}:${c.reason}`).sort();
  const want = expected.map((c) => `${c.provider}/${c.model}:${c.reason}`).sort();
  assert.deepEqual(got, want, `${what}: candidates ${JSON.stringify(err.candidates)}`);
  for (const c of err.candidates) {
    assert.equal(typeof c.detail, 'string', `${what}: detail of ${JSON.stringify(c)}`);
    assert.ok(err.message.includes(c.provider), `${what}: the message names provider ${c.provider}: ${err.message}`);
    assert.ok(err.message.includes(c.model), `${what}: the message names model ${c.model}: ${err.message}`);
  }
}

// ---------------------------------------------------------------------------

describe('fault matrix: class x position x streaming', () => {
  for (const c of CASES) {
    const what = `${c.row.name} at position ${c.pos}, ${c.stream ? 'streaming' : 'non-streaming'}`;
    test(what, T, async () => {
      const rid = h.randomId(c.tag);
      const body = { model: c.route, messages: MESSAGES };
      const headers = { 'x-request-id': rid };
      const r = c.stream ? await stream(body, { headers }) : await post(body, { headers });
      const total = c.classes.length + (c.success ? 1 : 0);

      if (c.success) {
        assert.equal(r.status, 200, `${what}: ${r.text ?? r.raw}`);
        if (c.stream) {
          const ev = h.parseEvents(r.events);
          assert.ok(r.complete, `${what}: the stream ended cleanly`);
          assert.equal(ev.at(-1), '[DONE]', `${what}: raw\n${r.raw}`);
          assert.equal(h.streamedContent(ev.slice(0, -1)), h.mockText(8));
        } else {
          assert.equal(r.json.choices[0].message.content, h.mockText(8));
        }
        assert.equal(r.headers['x-llmgw-provider'], 'mock');
        assert.equal(r.headers['x-llmgw-model'], c.entries[c.pos].model, `${what}: the entry after the failing one answered`);
        assert.equal(r.headers['x-llmgw-route'], c.route);
      } else {
        // Before any content the client gets a plain HTTP error, stream or not.
        assert.match(String(r.headers['content-type']), /application\/json/, `${what}: an error, not a stream`);
        const err = assertErrorBody(r, c.row.status, c.row.cls, what);
        assert.ok(Array.isArray(err.attempts), `${what}: error.attempts: ${JSON.stringify(err)}`);
        assert.deepEqual(err.attempts.map((a) => a.class), c.classes, `${what}: error.attempts ${JSON.stringify(err.attempts)}`);
        for (const a of err.attempts) {
          assert.equal(typeof a.provider, 'string');
          assert.equal(typeof a.model, 'string');
        }
        assert.equal(err.attempts.at(-1).model, c.entries[c.pos - 1].model, `${what}: the last attempt was the failing entry`);
        if (c.row.cls === 'rate_limited' || c.row.cls === 'quota_exhausted') {
          assert.ok(r.headers['retry-after'] !== undefined, `${what}: Retry-After passed on`);
        }
      }
      assert.equal(r.headers['x-request-id'], rid);
      assert.equal(attemptsHeader(r), total, `${what}: x-llmgw-attempts`);

      // Upstream: which entries were contacted, how often.
      const expectedLines = c.perEntry.reduce((a, b) => a + b, 0);
      const lines = await upstreamLines(mock, rid, expectedLines);
      const counts = countBy(lines, 'model');
      const want = {};
      c.perEntry.forEach((n, i) => { if (n) want[`${c.tag}-${i + 1}`] = n; });
      assert.deepEqual(counts, want, `${what}: upstream requests per entry (mock log)`);

      // The gateway's attempt log.
      const g = await gatewayLog(rid, total);
      assert.equal(g.attempts.length, total, `${what}: attempt lines ${JSON.stringify(g.attempts)}`);
      const logged = g.attempts.sort((a, b) => a.attempt - b.attempt);
      assert.deepEqual(logged.map((a) => a.attempt), Array.from({ length: total }, (_, i) => i + 1));
      assert.deepEqual(logged.slice(0, c.classes.length).map((a) => a.error_class), c.classes,
        `${what}: classes in the attempt log`);
      if (c.success) assert.ok(!logged.at(-1).error_class, `${what}: the last attempt succeeded: ${JSON.stringify(logged.at(-1))}`);
      for (const a of logged) {
        assert.equal(typeof a.provider, 'string');
        assert.equal(typeof a.latency_ms, 'number', `${what}: latency_ms: ${JSON.stringify(a)}`);
        // A provider that answered has a status and a time to first byte.
        if (a.upstream_status !== undefined) assert.equal(typeof a.ttfb_ms, 'number', `${what}: ttfb_ms: ${JSON.stringify(a)}`);
      }
      if (c.success) {
        const ok = logged.at(-1);
        assert.equal(ok.upstream_status, 200);
        assert.ok(ok.ttfc_ms >= ok.ttfb_ms, `${what}: first content after first byte: ${JSON.stringify(ok)}`);
      }
      assert.ok(g.request, `${what}: a request line`);
      assert.equal(g.request.attempts, total);
      const targets = c.pos + (c.success ? 1 : 0);
      assert.equal(g.request.failovers, targets - 1, `${what}: failovers ${JSON.stringify(g.request)}`);
      assert.equal(logged.filter((a) => a.retry === true).length, total - targets, `${what}: attempts flagged retry`);
      // (the access line's "retries" count: its own test under "retries")
    });
  }
});

// error=KIND through every upstream format: the class the gateway
// reads from each provider's own error shape (docs/mockprovider.md). A
// kind a provider has no sensible counterpart for is left out (null).
const KIND_CLASSES = {
  //                 context_length      insufficient_quota  content_filter       unsupported           model_not_found      overloaded           not_found
  'mock/mock-gpt': ['context_overflow', 'quota_exhausted', 'content_filtered', 'unsupported_input', 'model_unavailable', 'model_unavailable', 'not_found'],
  'resp/mock-gpt': ['context_overflow', 'quota_exhausted', 'content_filtered', 'unsupported_input', 'model_unavailable', 'model_unavailable', 'not_found'],
  'claude/mock-claude': ['context_overflow', 'quota_exhausted', 'content_filtered', 'unsupported_input', 'model_unavailable', 'provider_5xx', 'not_found'],
  'gem/mock-gemini': ['context_overflow', 'quota_exhausted', 'content_filtered', 'unsupported_input', 'model_unavailable', 'model_unavailable', 'not_found'],
  'olla/mock-llama': ['context_overflow', null, 'content_filtered', 'unsupported_input', 'model_unavailable', 'provider_5xx', 'not_found'],
  'bed/mock-claude': ['context_overflow', null, null, 'unsupported_input', 'model_unavailable', 'provider_5xx', 'model_unavailable'],
};
const KINDS = ['context_length', 'insufficient_quota', 'content_filter', 'unsupported', 'model_not_found', 'overloaded', 'not_found'];
const CLASS_STATUS = {
  context_overflow: 400, quota_exhausted: 429, content_filtered: 400, unsupported_input: 400,
  model_unavailable: 503, provider_5xx: 502, not_found: 404,
};

describe('error kinds through every upstream format', () => {
  for (const [target, classes] of Object.entries(KIND_CLASSES)) {
    test(`${target.split('/')[0]}: each provider error maps to its class`, T, async () => {
      const got = {};
      const want = {};
      for (const [i, kind] of KINDS.entries()) {
        if (!classes[i]) continue;
        const r = await post({ model: `${target}#error=${kind}`, messages: MESSAGES, max_tokens: 20 });
        got[kind] = `${r.status} ${r.json?.error?.code}`;
        want[kind] = `${CLASS_STATUS[classes[i]]} ${classes[i]}`;
      }
      assert.deepEqual(got, want);
    });
  }
});

describe('the fault matrix through the Anthropic facade', () => {
  test('a failover before content is invisible; a give-up is an Anthropic error with attempts', T, async () => {
    const ok = await post({ model: 'ant-fo', max_tokens: 50, messages: MESSAGES },
      { path: '/v1/messages' });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.json.type, 'message');
    assert.equal(ok.json.content[0].text, h.mockText(8));
    assert.equal(attemptsHeader(ok), 3);

    const bad = await post({ model: 'ant-fail', max_tokens: 50, messages: MESSAGES }, { path: '/v1/messages' });
    assert.equal(bad.status, 429, bad.text);
    assert.equal(bad.json.type, 'error', bad.text);
    assert.equal(typeof bad.json.error.type, 'string');
    assert.ok(Array.isArray(bad.json.error.attempts), `error.attempts in the Anthropic shape: ${bad.text}`);
    assert.equal(bad.json.error.attempts.at(-1).class, 'rate_limited');
  });
});

describe('retries', () => {
  test('a 503 then success on the same target: one retry, the same target answers', T, async () => {
    const rid = h.randomId('retry-ok');
    const r = await post({ model: 'retry-ok', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-model'], 'ro-1#status=503,times=1,tag=retry-ok');
    assert.equal(attemptsHeader(r), 2);
    const lines = await upstreamLines(mock, rid, 2);
    assert.deepEqual(lines.map((l) => [l.model, l.status]), [['ro-1', 503], ['ro-1', 200]]);
  });

  test('the access line counts the retries made, not one the breaker refused', T, async () => {
    // The last entry fails 3 times; its breaker opens and refuses the 3rd retry.
    const rid2 = h.randomId('retries-count-last');
    const r2 = await post({ model: 'retries-count', messages: MESSAGES }, { headers: { 'x-request-id': rid2 } });
    assertErrorBody(r2, 502, 'provider_5xx', 'retries count');
    const g = await gatewayLog(rid2, 3);
    const made = g.attempts.filter((a) => a.retry === true).length;
    assert.equal(g.attempts.length, 3, JSON.stringify(g.attempts));
    assert.equal(made, 2);
    assert.equal(g.request.attempts, 3);
    assert.equal(g.request.retries, made,
      `access line ${JSON.stringify(g.request)}: retries + failovers + 1 should equal attempts`);
  });

  test('a rate_limited give-up on the last entry passes Retry-After on', T, async () => {
    // Three 429s (Retry-After: 0); the breaker refuses the 3rd retry.
    const r = await post({ model: 'mock/ra-last#status=429,retry_after=0', messages: MESSAGES });
    assertErrorBody(r, 429, 'rate_limited', 'rate_limited give-up');
    assert.equal(r.headers['x-llmgw-attempts'], '3');
    assert.equal(r.headers['retry-after'], '0', `Retry-After of the last 429: headers ${JSON.stringify(r.headers)}`);
    // With a single attempt it is there.
    const one = await post({ model: 'mock/ra-one#status=429,retry_after=40', messages: MESSAGES });
    assert.equal(one.headers['retry-after'], '40');
  });

  test('Retry-After: 1 is honoured before the retry', T, async () => {
    const rid = h.randomId('retry-after');
    const t0 = Date.now();
    const r = await post({ model: 'mock/ra-1#status=429,retry_after=1,times=1,tag=honour', messages: MESSAGES },
      { headers: { 'x-request-id': rid } });
    const ms = Date.now() - t0;
    assert.equal(r.status, 200, r.text);
    assert.equal(attemptsHeader(r), 2);
    assert.ok(ms >= 950, `the retry came after ${ms} ms (Retry-After: 1)`);
    const lines = await upstreamLines(mock, rid, 2);
    assert.ok(lines[1].ts_ms - lines[0].ts_ms >= 950, `upstream requests ${lines[1].ts_ms - lines[0].ts_ms} ms apart`);
  });

  test('Retry-After above 30 s: no retry on that target, the error passes it on', T, async () => {
    const rid = h.randomId('ra-long');
    const t0 = Date.now();
    const r = await post({ model: 'mock/ra-2#status=429,retry_after=40', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
    assert.ok(Date.now() - t0 < 5000, 'no wait for the Retry-After');
    assertErrorBody(r, 429, 'rate_limited', 'long Retry-After');
    assert.equal(r.headers['retry-after'], '40');
    assert.equal(attemptsHeader(r), 1);
    assert.equal((await upstreamLines(mock, rid, 1)).length, 1);
  });

  test('Retry-After beyond the failover budget: advance at once', T, async () => {
    const rid = h.randomId('ra-budget');
    const t0 = Date.now();
    const r = await post({ model: 'ra-budget', messages: MESSAGES },
      { headers: { 'x-request-id': rid, 'x-llmgw-fallback-timeout-ms': '1000' } });
    const ms = Date.now() - t0;
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-model'], 'rb-2');
    assert.equal(attemptsHeader(r), 2);
    assert.ok(ms < 1000, `answered after ${ms} ms: no wait for a 2 s Retry-After`);
    assert.deepEqual(countBy(await upstreamLines(mock, rid, 2), 'model'), { 'rb-1': 1, 'rb-2': 1 });
  });
});

describe('the failover budget (X-LLMGW-Fallback-Timeout-Ms)', () => {
  test('a valid value is accepted', T, async () => {
    const r = await post({ model: 'fast', messages: MESSAGES }, { headers: { 'x-llmgw-fallback-timeout-ms': '5000' } });
    assert.equal(r.status, 200, r.text);
    const r2 = await post({ model: 'fast', messages: MESSAGES }, { headers: { 'x-llmgw-fallback-timeout-ms': '600000' } });
    assert.equal(r2.status, 200, r2.text);
  });

  test('an invalid value is a 400 naming the header', T, async () => {
    for (const v of ['0', '600001', 'abc', '-5', '12ms', '1.5']) {
      const r = await post({ model: 'fast', messages: MESSAGES }, { headers: { 'x-llmgw-fallback-timeout-ms': v } });
      assertErrorBody(r, 400, 'invalid_header', `value ${v}`);
      assert.match(String(r.json.error.param), /x-llmgw-fallback-timeout-ms/i, `value ${v}: ${r.text}`);
      assert.match(r.json.error.message, /x-llmgw-fallback-timeout-ms/i, `value ${v}: ${r.text}`);
    }
  });

  for (const streaming of [false, true]) {
    test(`running out before content is a 504 timeout (${streaming ? 'streaming' : 'non-streaming'})`, T, async () => {
      const rid = h.randomId('budget');
      const headers = { 'x-request-id': rid, 'x-llmgw-fallback-timeout-ms': '400' };
      const t0 = Date.now();
      const body = { model: 'budget', messages: MESSAGES };
      const r = streaming ? await stream(body, { headers }) : await post(body, { headers });
      const ms = Date.now() - t0;
      assertErrorBody(r, 504, 'timeout', 'budget');
      assert.ok(ms >= 350 && ms < 3000, `gave up after ${ms} ms with a 400 ms budget`);
      const lines = await upstreamLines(mock, rid, 1, 200);
      const counts = countBy(lines, 'model');
      assert.equal(counts['bu-1'], 1, `the primary once: ${JSON.stringify(counts)}`);
      assert.ok(!lines.some((l) => l.model === 'bu-2' && l.status === 200 && l.outcome === 'completed'),
        `the backup did not answer: ${JSON.stringify(lines)}`);
    });
  }

  test('no attempt delivers content after the budget ran out (a fast backup at the budget\'s edge)', T, async () => {
    // The primary hangs until the budget's end; the backup answers in a
    // few ms. Whatever the timers' slack, content that arrives after the
    // budget must not become the answer: every run is a 504.
    const got = [];
    for (let i = 0; i < 10; i++) {
      const rid = h.randomId('budget-edge');
      const r = await stream({ model: `budget-edge-${i}`, messages: MESSAGES },
        { headers: { 'x-request-id': rid, 'x-llmgw-fallback-timeout-ms': '300' } });
      got.push(`${r.status}${r.status === 200 ? `(answered by ${r.headers['x-llmgw-model']})` : ''}`);
    }
    assert.ok(got.every((s) => s === '504'), `10 runs with a 300 ms budget: ${got.join(', ')}`);
  });

  /** A 504 timeout after about budgetMs (the primary hangs, the backup is slower than what is left). */
  async function expectBudgetTimeout(body, headers, budgetMs, streaming) {
    const t0 = Date.now();
    const r = streaming ? await stream(body, { headers }) : await post(body, { headers });
    const ms = Date.now() - t0;
    assertErrorBody(r, 504, 'timeout', body.model);
    assert.ok(ms >= budgetMs - 50 && ms < budgetMs + 2500, `${body.model}: gave up after ${ms} ms with a ${budgetMs} ms budget`);
  }

  for (const streaming of [false, true]) {
    test(`fallback_timeout_ms in the body bounds the pre-content phase (${streaming ? 'streaming' : 'non-streaming'})`, T, async () => {
      await expectBudgetTimeout({ model: `bbody-${streaming ? 's' : 'n'}`, messages: MESSAGES, fallback_timeout_ms: 400 }, {}, 400, streaming);
    });
  }

  test('with both the header and the body set, the smaller budget holds', T, async () => {
    await expectBudgetTimeout({ fallback_timeout_ms: 400, model: 'bbody-min', messages: MESSAGES },
      { 'x-llmgw-fallback-timeout-ms': '5000' }, 400, false);
  });

  test('a route\'s fallback_timeout_ms is the default; the request\'s own wins over it', T, async () => {
    await expectBudgetTimeout({ model: 'broute', messages: MESSAGES }, {}, 400, false);
    await expectBudgetTimeout({ model: 'broute-hdr', messages: MESSAGES }, { 'x-llmgw-fallback-timeout-ms': '1500' }, 1500, true);
  });

  test('fallback_timeout_ms never reaches a provider: relayed or translated, first, middle or last member', T, async () => {
    // The mock refuses it as a real API refuses an unknown argument.
    const direct = await h.request(mock.port, { path: '/v1/chat/completions', headers: { authorization: `Bearer ${h.MOCK_UPSTREAM_KEY}` },
      body: { model: 'mock-gpt', messages: MESSAGES, fallback_timeout_ms: 5000 } });
    assert.equal(direct.status, 400, direct.text);
    const at = {
      first: (b) => ({ fallback_timeout_ms: 5000, ...b }),
      middle: (b) => { const [k0, ...rest] = Object.keys(b); return { [k0]: b[k0], fallback_timeout_ms: 5000, ...Object.fromEntries(rest.map((k) => [k, b[k]])) }; },
      last: (b) => ({ ...b, fallback_timeout_ms: 5000 }),
    };
    const cases = [
      ['OpenAI client, OpenAI upstream (relayed)', '/v1/chat/completions', { model: 'mock/mock-gpt', messages: MESSAGES }],
      ['OpenAI client, Anthropic upstream (translated)', '/v1/chat/completions', { model: 'claude/mock-claude', messages: MESSAGES }],
      ['Anthropic client, Anthropic upstream (relayed)', '/v1/messages', { model: 'claude/mock-claude', max_tokens: 50, messages: MESSAGES }],
      ['Anthropic client, OpenAI upstream (translated)', '/v1/messages', { model: 'mock/mock-gpt', max_tokens: 50, messages: MESSAGES }],
      ['Responses client, Responses upstream (relayed)', '/v1/responses', { model: 'resp/mock-resp', input: 'hello' }],
    ];
    for (const [what, path, body] of cases) {
      for (const [where, place] of Object.entries(at)) {
        for (const streaming of [false, true]) {
          const b = place(body);
          const r = streaming
            ? await h.collectStream(gw.port, { path, body: { ...b, stream: true }, headers: h.AUTH })
            : await post(b, { path });
          assert.equal(r.status, 200, `${what}, ${where}${streaming ? ', streamed' : ''}: ${r.text ?? r.raw}`);
        }
      }
    }
    const emb = await post({ model: 'mock/mock-embed', input: 'hi', fallback_timeout_ms: 5000 }, { path: '/v1/embeddings' });
    assert.equal(emb.status, 200, emb.text);
  });

  test('an invalid fallback_timeout_ms in the body is a 400 naming the field; null is none', T, async () => {
    for (const v of [0, 600001, -5, 1.5, '500', true, [], {}]) {
      for (const path of ['/v1/chat/completions', '/v1/messages', '/v1/embeddings', '/v1/messages/count_tokens']) {
        const body = path === '/v1/embeddings' ? { model: 'mock/mock-embed', input: 'hi' } : { model: 'fast', max_tokens: 50, messages: MESSAGES };
        const r = await post({ ...body, fallback_timeout_ms: v }, { path });
        assert.equal(r.status, 400, `${path} value ${JSON.stringify(v)}: ${r.text}`);
        const e = r.json.error;
        assert.equal(e.param ?? null, path.startsWith('/v1/messages') ? null : 'fallback_timeout_ms', r.text);
        assert.match(e.message, /fallback_timeout_ms/, r.text);
      }
    }
    const ok = await post({ model: 'fast', messages: MESSAGES, fallback_timeout_ms: null });
    assert.equal(ok.status, 200, ok.text);
  });

  test('it never cuts an answer that has begun', T, async () => {
    const t0 = Date.now();
    const s = await stream({ model: 'budget-slow', messages: MESSAGES }, { headers: { 'x-llmgw-fallback-timeout-ms': '200' } });
    assert.ok(Date.now() - t0 >= 600, 'the stream took longer than the budget');
    assert.equal(s.status, 200);
    const ev = h.parseEvents(s.events);
    assert.equal(ev.at(-1), '[DONE]', s.raw);
    assert.equal(h.streamedContent(ev.slice(0, -1)), h.mockText(8));
    assert.ok(!ev.some((e) => e && e.error), `no error event: ${s.raw}`);
  });
});

describe('a route\'s max_duration_ms: a total deadline for an attempt, answer included', () => {
  test('a stream that runs past it ends with an in-band timeout and [DONE]; an attempt with no answer by then is a timeout', T, async () => {
    const t0 = Date.now();
    const s = await stream({ model: 'maxdur', messages: MESSAGES });
    const ms = Date.now() - t0;
    assert.equal(s.status, 200);
    assert.ok(s.complete, `a proper end; raw:\n${s.raw.slice(-500)}`);
    const ev = h.parseEvents(s.events);
    assert.equal(ev.at(-1), '[DONE]');
    assert.match(ev.at(-2)?.error?.message ?? '', /max_duration_ms \(700 ms\)/, s.raw.slice(-500));
    assert.ok(h.streamedContent(ev.slice(0, -2)).length > 0, 'content came first');
    assert.ok(ms >= 600 && ms < 3000, `ended after ${ms} ms (the answer alone takes 4 s)`);
    const t1 = Date.now();
    const r = await post({ model: 'maxdur-wait', messages: MESSAGES });
    assert.equal(r.status, 504, r.text);
    assert.equal(r.json.error.code, 'timeout');
    assert.match(r.json.error.message, /max_duration_ms \(400 ms\)/);
    // Each attempt (the last candidate is retried) ends at 400 ms, not at 3 s.
    const n = attemptsHeader(r);
    assert.ok(Date.now() - t1 < n * 400 + 2000, `${Date.now() - t1} ms for ${n} attempts`);
  });
});

describe('the bright line: no failover after the first content event', () => {
  for (const [routeName, fault, primary, backup] of [
    ['bl-drop', 'drop_after=2', 'bld-1', 'bld-2'],
    ['bl-malformed', 'malformed=3', 'blm-1', 'blm-2'],
  ]) {
    test(`OpenAI stream, ${fault} on the primary: in-band error, [DONE], the backup never contacted`, T, async () => {
      const rid = h.randomId(routeName);
      const s = await stream({ model: routeName, messages: MESSAGES }, { headers: { 'x-request-id': rid } });
      assert.equal(s.status, 200);
      assert.ok(s.complete, `the response ends properly, not with a silent EOF; raw:\n${s.raw}`);
      const ev = h.parseEvents(s.events);
      assert.equal(ev.at(-1), '[DONE]', `last event; raw:\n${s.raw}`);
      const err = ev.at(-2);
      assert.ok(err && err.error && typeof err.error.message === 'string', `data: {"error":...} before [DONE]; raw:\n${s.raw}`);
      const content = h.streamedContent(ev.slice(0, -2));
      assert.equal(content, 'tok1 tok2', 'the content before the fault reached the client');
      assert.equal(s.headers['x-llmgw-model'], `${primary}#${fault}`);
      const lines = await upstreamLines(mock, rid, 1, 300);
      assert.deepEqual(countBy(lines, 'model'), { [primary]: 1 }, `the mock saw only the primary, once: ${JSON.stringify(lines)}`);
      assert.ok(!lines.some((l) => l.model === backup));
    });
  }

  test('OpenAI SDK streaming sees an error after the first content', T, async () => {
    const rid = h.randomId('bl-sdk');
    const oai = new OpenAI({ baseURL: gw.v1, apiKey: h.DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
    const s = await oai.chat.completions.create({ model: 'bl-sdk', messages: MESSAGES, stream: true },
      { headers: { 'x-request-id': rid } });
    let text = '';
    await assert.rejects(async () => {
      for await (const chunk of s) text += chunk.choices[0]?.delta?.content ?? '';
    }, (e) => e instanceof OpenAI.APIError, 'the SDK raises the in-band error');
    assert.equal(text, 'tok1 tok2');
    const lines = await upstreamLines(mock, rid, 1, 300);
    assert.deepEqual(countBy(lines, 'model'), { 'blsdk-1': 1 });
  });

  test('Anthropic format, raw SSE: event: error is the last event', T, async () => {
    const rid = h.randomId('bl-ant');
    const s = await stream({ model: 'bl-ant', max_tokens: 50, messages: MESSAGES },
      { path: '/v1/messages', headers: { 'x-request-id': rid } });
    assert.equal(s.status, 200);
    assert.ok(s.complete, `the response ends properly; raw:\n${s.raw}`);
    const frames = sseFrames(s.raw);
    assert.equal(frames.at(-1).event, 'error', `last event; raw:\n${s.raw}`);
    assert.equal(frames.at(-1).data.type, 'error');
    assert.equal(typeof frames.at(-1).data.error.message, 'string');
    assert.ok(frames.some((f) => f.event === 'content_block_delta'), 'content came first');
    assert.ok(!frames.some((f) => f.event === 'message_stop'), 'no message_stop after a failure');
    const lines = await upstreamLines(mock, rid, 1, 300);
    assert.deepEqual(countBy(lines, 'model'), { 'blant-1': 1 });
  });

  test('Anthropic SDK streaming sees an error after the first content', T, async () => {
    const rid = h.randomId('bl-antsdk');
    const ant = new Anthropic({ baseURL: gw.url, apiKey: h.DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
    let text = '';
    await assert.rejects(async () => {
      const s = await ant.messages.create({ model: 'bl-antsdk', max_tokens: 50, messages: MESSAGES, stream: true },
        { headers: { 'x-request-id': rid } });
      for await (const e of s) {
        if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
      }
    }, (e) => e instanceof Anthropic.APIError, 'the SDK raises the in-band error');
    assert.equal(text, 'tok1 tok2');
    const lines = await upstreamLines(mock, rid, 1, 300);
    assert.deepEqual(countBy(lines, 'model'), { 'blas-1': 1 });
  });
});

describe('no_route: every cause names every skipped candidate', () => {
  test('not configured: 404 model_not_found', T, async () => {
    const r = await post({ model: 'no-such-route-xyz', messages: MESSAGES });
    const err = assertErrorBody(r, 404, 'model_not_found', 'not configured');
    assert.equal(err.param, 'model');
  });

  test('none capable: 400 no_capable_target (driver, catalog, context)', T, async () => {
    const r = await post({ model: 'nr-capable', messages: IMAGE_MESSAGES });
    const err = assertErrorBody(r, 400, 'no_capable_target', 'none capable');
    // param names the field when one capability is missing (the images), else model.
    assert.ok(['messages', 'model'].includes(String(err.param).split(/[.[]/)[0]), `param ${err.param}`);
    assertNamesCandidates(err, [
      { provider: 'textonly', model: 'nc-driver', reason: 'incapable' },
      { provider: 'mock', model: 'nc-catalog', reason: 'catalog' },
      { provider: 'mock', model: 'nc-context', reason: 'context' },
    ], 'none capable');
    // Without the image every entry can serve it.
    const ok = await post({ model: 'nr-capable', messages: MESSAGES });
    assert.equal(ok.status, 200, ok.text);
  });

  test('none healthy: 503 no_healthy_target (disabled, no credential, breaker open, high-cost fallback)', T, async () => {
    // Open the breaker of the third entry first (an exact selector: retries, no failover).
    for (let i = 0; i < 3; i++) await post({ model: 'mock/nh-breaker#status=503', messages: MESSAGES });
    const r = await post({ model: 'nr-healthy', messages: MESSAGES });
    const err = assertErrorBody(r, 503, 'no_healthy_target', 'none healthy');
    assert.equal(err.param, 'model');
    assertNamesCandidates(err, [
      { provider: 'off', model: 'nh-disabled', reason: 'disabled' },
      { provider: 'nocred', model: 'nh-nocred', reason: 'no_credential' },
      { provider: 'mock', model: 'nh-breaker#status=503', reason: 'breaker_open' },
      { provider: 'mock', model: 'nh-costly', reason: 'high_cost_fallback' },
    ], 'none healthy');
  });

  test('none allowed: 403 model_not_allowed', T, async () => {
    const r = await post({ model: 'nr-allowed', messages: MESSAGES }, { auth: AUTH2 });
    const err = assertErrorBody(r, 403, 'model_not_allowed', 'none allowed');
    assert.equal(err.param, 'model');
    assertNamesCandidates(err, [
      { provider: 'mock', model: 'na-1', reason: 'not_allowed' },
      { provider: 'mockB', model: 'na-2', reason: 'not_allowed' },
    ], 'none allowed');
    // The same key may use what it is allowed.
    const ok = await post({ model: 'mockfast/mock-gpt', messages: MESSAGES }, { auth: AUTH2 });
    assert.equal(ok.status, 200, ok.text);
  });

  test('ambiguous: a bare model id two targets carry is a 400 ambiguous_model', T, async () => {
    const r = await post({ model: 'amb-model', messages: MESSAGES });
    const err = assertErrorBody(r, 400, 'ambiguous_model', 'ambiguous');
    assert.equal(err.param, 'model');
    assert.match(err.message, /mock\b/);
    assert.match(err.message, /mockB/);
    // A bare id only one target carries resolves.
    const ok = await post({ model: 'af-b', messages: MESSAGES });
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.headers['x-llmgw-provider'], 'mockB');
  });

  test('invalid: a malformed exact selector is a 400 invalid_model', T, async () => {
    for (const model of ['mock/', 'mock/has space', `mock/${'x'.repeat(300)}`]) {
      const r = await post({ model, messages: MESSAGES });
      const err = assertErrorBody(r, 400, 'invalid_model', `invalid ${model.slice(0, 20)}`);
      assert.equal(err.param, 'model');
    }
  });
});

describe('sessions across three data planes: rendezvous', () => {
  // Three members, each its own mock process, so a member can be killed
  // for real; three data planes on the same snapshot, sharing nothing.
  const mocks = [];
  const dps = [];
  let ssnap;
  const SESSIONS = Array.from({ length: 30 }, (_, i) => `conv-${i}`);
  const ROUTE = (extra = []) => ({
    name: 'sessions', capability: 'chat', strategy: 'weighted',
    entries: [0, 1, 2].map((i) => ({ provider: `member${i}`, model: `sm-${i}`, weight: 1 })).concat(extra),
  });

  before(async () => {
    for (let i = 0; i < 3; i++) mocks.push(await h.startMock());
    ssnap = structuredClone(snapshot);
    for (let i = 0; i < 3; i++) ssnap.providers.push(provider(`member${i}`, mocks[i].v1));
    ssnap.routes.push(ROUTE());
    for (let i = 0; i < 3; i++) dps.push(await h.startGateway({ mock, snapshot: ssnap, args: GW_ARGS }));
  });

  // Each session's member through each data plane: [[p, p, p], ...].
  async function members() {
    const out = [];
    for (const sess of SESSIONS) {
      const row = [];
      for (const gw of dps) {
        const r = await h.request(gw.port, {
          body: { model: 'sessions', messages: MESSAGES },
          headers: { ...h.AUTH, 'x-llmgw-session-id': sess },
        });
        assert.equal(r.status, 200, r.text);
        row.push(r.headers['x-llmgw-provider']);
      }
      out.push(row);
    }
    return out;
  }

  test('one session, one member on every data plane; a dead member moves only its own sessions', T, async () => {
    const first = await members();
    for (const [i, row] of first.entries()) {
      assert.deepEqual(row, [row[0], row[0], row[0]], `session ${SESSIONS[i]} on every data plane`);
    }
    const count = (rows, p) => rows.filter((row) => row[0] === p).length;
    for (let i = 0; i < 3; i++) assert.ok(count(first, `member${i}`) > 0, `sessions spread: ${JSON.stringify(first)}`);
    // A request without a session is a weighted draw per request id, as before.
    const victim = first[0][0];
    const v = Number(victim.slice(-1));
    await mocks[v].proc.stop();
    const after = await members();
    const moved = new Set();
    for (const [i, row] of after.entries()) {
      assert.deepEqual(row, [row[0], row[0], row[0]], `session ${SESSIONS[i]} agrees after the kill`);
      if (first[i][0] === victim) {
        assert.notEqual(row[0], victim);
        moved.add(row[0]);
      } else {
        assert.equal(row[0], first[i][0], `session ${SESSIONS[i]} was not on ${victim}: it stays`);
      }
    }
    assert.ok(moved.size >= 1);
    // Editing the route draws anew (on every data plane alike).
    ssnap.version = (ssnap.version ?? 1) + 1;
    ssnap.routes = ssnap.routes.map((rt) => (rt.name === 'sessions'
      ? ROUTE([{ provider: 'mock', model: 'sm-3', weight: 1 }]) : rt));
    for (const gw of dps) {
      fs.writeFileSync(gw.snapshotPath, JSON.stringify(ssnap, null, 2));
      const mark = gw.proc.stderrLines.length;
      gw.proc.signal('SIGHUP');
      await h.waitFor(() => gw.proc.stderrLines.slice(mark).some((l) => /snapshot loaded/.test(l)),
        { timeoutMs: 5000, what: 'the snapshot reload' });
    }
    const edited = await members();
    for (const [i, row] of edited.entries()) {
      assert.deepEqual(row, [row[0], row[0], row[0]], `session ${SESSIONS[i]} agrees after the edit`);
    }
    assert.ok(edited.some((row, i) => row[0] !== after[i][0]), 'the edit moved some sessions');
  });
});

describe('affinity, weighted split', () => {
  test('an affinity key rotates the start: one key, one provider; keys spread', T, async () => {
    const seen = new Set();
    for (let k = 0; k < 24; k++) {
      const key = `tenant-${k}`;
      const a = await post({ model: 'aff', messages: MESSAGES }, { headers: { 'x-llmgw-affinity-key': key } });
      const b = await post({ model: 'aff', messages: MESSAGES }, { headers: { 'x-llmgw-affinity-key': key } });
      assert.equal(a.status, 200, a.text);
      assert.equal(a.headers['x-llmgw-provider'], b.headers['x-llmgw-provider'], `key ${key} starts at one member`);
      seen.add(a.headers['x-llmgw-provider']);
    }
    assert.ok(seen.size >= 2, `24 keys all started at ${[...seen]}`);
    const none = await post({ model: 'aff', messages: MESSAGES });
    assert.equal(none.headers['x-llmgw-provider'], 'mock', 'no key: the route order');
  });

  test('weighted: the primary is a deterministic draw from the request id', T, async () => {
    const by = {};
    for (let i = 0; i < 30; i++) {
      const rid = `wt-split-${i}`;
      const a = await post({ model: 'wt', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
      const b = await post({ model: 'wt', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
      assert.equal(a.status, 200, a.text);
      assert.equal(a.headers['x-llmgw-provider'], b.headers['x-llmgw-provider'], `request id ${rid}: the same draw`);
      by[a.headers['x-llmgw-provider']] = (by[a.headers['x-llmgw-provider']] ?? 0) + 1;
    }
    assert.ok(by.mock > 0 && by.mockB > 0, `a 50/50 split over 30 ids: ${JSON.stringify(by)}`);
    // A 90/10 split leans as weighted.
    let heavy = 0;
    const n = 200;
    for (let i = 0; i < n; i++) {
      const r = await post({ model: 'wt-skew', messages: MESSAGES }, { headers: { 'x-request-id': `wt-skew-${i}` } });
      if (r.headers['x-llmgw-provider'] === 'mock') heavy++;
    }
    assert.ok(heavy >= 0.75 * n && heavy < n, `90/10 weights gave ${heavy}/${n} to the heavy entry`);
  });
});

describe('embeddings never fail over to another model', () => {
  test('the same model on another provider serves; another model is skipped', T, async () => {
    const rid = h.randomId('emb1');
    const r = await post({ model: 'emb-r1', input: 'hello' }, { path: '/v1/embeddings', headers: { 'x-request-id': rid } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'mockB');
    assert.equal(r.headers['x-llmgw-model'], 'emb1#status=503,times=2,tag=emb-r1');
    assert.equal(attemptsHeader(r), 3);
    const lines = await upstreamLines(mock, rid, 3);
    assert.deepEqual(countBy(lines, 'model'), { emb1: 3 }, 'emb-other1 never contacted');
  });

  test('with no same-model fallback the error comes from the one model', T, async () => {
    const rid = h.randomId('emb2');
    const r = await post({ model: 'emb-r2', input: 'hello' }, { path: '/v1/embeddings', headers: { 'x-request-id': rid } });
    const err = assertErrorBody(r, 502, 'provider_5xx', 'embeddings');
    assert.ok(err.attempts.every((a) => a.model === 'emb2#status=503'), JSON.stringify(err.attempts));
    const lines = await upstreamLines(mock, rid, 1);
    assert.ok(!lines.some((l) => l.model === 'emb-other2'), 'emb-other2 never contacted');
  });
});

describe('response headers', () => {
  test('a routed success says who answered', T, async () => {
    const rid = h.randomId('hdr');
    for (const r of [
      await post({ model: 'fast', messages: MESSAGES }, { headers: { 'x-request-id': rid } }),
      await stream({ model: 'fast', messages: MESSAGES }, { headers: { 'x-request-id': rid } }),
    ]) {
      assert.equal(r.status, 200);
      assert.equal(r.headers['x-request-id'], rid);
      assert.equal(r.headers['x-llmgw-attempts'], '1');
      assert.equal(r.headers['x-llmgw-provider'], 'mock');
      assert.equal(r.headers['x-llmgw-model'], 'mock-gpt');
      assert.equal(r.headers['x-llmgw-route'], 'fast');
    }
    const alias = await post({ model: 'default', messages: MESSAGES });
    assert.equal(alias.headers['x-llmgw-route'], 'fast', 'an alias names its route');
  });

  test('an exact selector has no route; a failure still counts its attempts', T, async () => {
    const ok = await post({ model: 'mock/mock-gpt', messages: MESSAGES });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['x-llmgw-provider'], 'mock');
    assert.equal(ok.headers['x-llmgw-model'], 'mock-gpt');
    assert.equal(ok.headers['x-llmgw-route'], undefined);
    const bad = await post({ model: 'mock/hdr-fail#status=400', messages: MESSAGES });
    assert.equal(bad.status, 400);
    assert.ok(bad.headers['x-request-id']);
    assert.equal(bad.headers['x-llmgw-attempts'], '1');
  });
});
