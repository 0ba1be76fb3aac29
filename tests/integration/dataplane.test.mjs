// Integration tests of llmgw-dataplane against llmgw-mockprovider (real processes).
// Contracts: docs/dataplane.md and docs/mockprovider.md.

import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import * as h from './harness.mjs';

const MESSAGES = [{ role: 'user', content: 'hello there' }];
const T = { timeout: 60_000 };

let mock;
let gw;

// A small body ceiling for the 413 test; every other request here is far below it.
const GW_ARGS = ['--max-body-bytes', '65536'];

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
  gw = await h.startGateway({ mock, args: GW_ARGS });
});

// A gateway crash fails the test during which it happened, not every test after it.
afterEach(async () => {
  const r = await h.replaceIfDead(gw, () => h.startGateway({ mock, args: GW_ARGS }));
  gw = r.gateway;
  if (r.error) throw r.error;
});

after(async () => {
  await h.stopAll();
});

function chat(body, { headers = {}, ...rest } = {}) {
  return h.request(gw.port, { body, headers: { ...h.AUTH, ...headers }, ...rest });
}

function mockChat(body, headers = {}) {
  return h.request(mock.port, { body, headers });
}

function assertError(res, status, code, param) {
  assert.equal(res.status, status, `status; body: ${res.text}`);
  assert.match(String(res.headers['content-type']), /application\/json/, 'content-type of an error');
  assert.ok(res.json && typeof res.json === 'object', `error body is not JSON: ${res.text}`);
  assert.ok(res.json.error && typeof res.json.error === 'object', `no error object: ${res.text}`);
  assert.equal(typeof res.json.error.message, 'string', `error.message: ${res.text}`);
  assert.ok(res.json.error.message.length > 0, 'error.message is empty');
  if (code !== undefined) assert.equal(res.json.error.code, code, `error.code; body: ${res.text}`);
  if (param !== undefined) assert.equal(res.json.error.param, param, `error.param; body: ${res.text}`);
  assert.ok(res.headers['x-request-id'], 'x-request-id on an error response');
}

function assertAlive(g) {
  assert.equal(g.proc.exitInfo, null, `the gateway exited: ${JSON.stringify(g.proc.exitInfo)}\n${g.proc.describe()}`);
}

function assertGatewayAlive() {
  assertAlive(gw);
}

/** Splits parsed events into [chunks..., error?, '[DONE]'] checks common to failed streams. */
function assertStreamEndsWithError(s, what) {
  assert.equal(s.status, 200, `${what}: the stream had started (status)`);
  assert.ok(s.complete, `${what}: the response must end cleanly, not with a silent EOF/reset; raw:\n${s.raw.slice(-1500)}`);
  assert.equal(s.error, null, `${what}: connection error ${s.error}`);
  const ev = h.parseEvents(s.events);
  assert.ok(ev.length >= 2, `${what}: too few events; raw:\n${s.raw}`);
  assert.equal(ev.at(-1), '[DONE]', `${what}: last event must be [DONE]; raw:\n${s.raw}`);
  const err = ev.at(-2);
  assert.ok(err && typeof err === 'object' && err.error && typeof err.error === 'object',
    `${what}: the event before [DONE] must be data: {"error":{...}}; raw:\n${s.raw}`);
  assert.equal(typeof err.error.message, 'string', `${what}: error.message`);
  assert.ok(err.error.message.length > 0);
  return ev;
}

describe('basic proxying', () => {
  test('GET /healthz', T, async () => {
    const r = await h.request(gw.port, { method: 'GET', path: '/healthz' });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { status: 'ok' });
  });

  test('non-streaming: the gateway\'s normalized answer carries the mock\'s direct answer', T, async () => {
    const rid = h.randomId('nonstream');
    const viaGw = await chat({ model: 'fast', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
    const direct = await mockChat({ model: 'mock-gpt', messages: MESSAGES });

    assert.equal(viaGw.status, 200, viaGw.text);
    assert.equal(direct.status, 200, direct.text);
    assert.match(String(viaGw.headers['content-type']), /application\/json/);
    assert.equal(viaGw.headers['x-request-id'], rid, 'the client\'s X-Request-Id is echoed');
    assert.ok(viaGw.json, `gateway body is not JSON: ${viaGw.text}`);

    assert.deepEqual(h.answerEssence(viaGw.json), h.answerEssence(direct.json));
    // Concrete values, so this can fail even if both sides were equally wrong.
    assert.equal(viaGw.json.object, 'chat.completion');
    assert.equal(viaGw.json.model, 'mock-gpt');
    assert.equal(typeof viaGw.json.id, 'string');
    assert.ok(viaGw.json.id.length > 0, 'an id');
    assert.equal(viaGw.json.choices[0].message.role, 'assistant');
    assert.equal(viaGw.json.choices[0].message.content, h.mockText(8));
    assert.equal(viaGw.json.choices[0].finish_reason, 'stop');
    assert.equal(viaGw.json.usage.prompt_tokens, h.mockInputTokens(MESSAGES));
    assert.equal(viaGw.json.usage.completion_tokens, 8);

    // The gateway sent the same id upstream.
    const u = await mock.usageFor(rid);
    assert.equal(u.outcome, 'completed');
    assert.equal(u.model, 'mock-gpt');
    assert.equal(u.stream, false);
  });

  test('the alias and the exact provider/model selector reach the same model', T, async () => {
    for (const model of ['default', 'mock/mock-gpt']) {
      const r = await chat({ model, messages: MESSAGES, max_tokens: 3 });
      assert.equal(r.status, 200, `${model}: ${r.text}`);
      assert.equal(r.json.model, 'mock-gpt', model);
      assert.equal(r.json.choices[0].message.content, h.mockText(3), model);
      assert.equal(r.json.choices[0].finish_reason, 'length', model);
    }
  });

  test('x-request-id: a generated one when absent or invalid', T, async () => {
    const a = await chat({ model: 'fast', messages: MESSAGES });
    assert.equal(a.status, 200);
    assert.match(String(a.headers['x-request-id']), /^[A-Za-z0-9._:-]{1,128}$/);
    const bad = 'has spaces and /slashes/';
    const b = await chat({ model: 'fast', messages: MESSAGES }, { headers: { 'x-request-id': bad } });
    assert.equal(b.status, 200);
    assert.ok(b.headers['x-request-id'], 'x-request-id present');
    assert.notEqual(b.headers['x-request-id'], bad, 'an invalid client id is replaced');
    assert.notEqual(b.headers['x-request-id'], a.headers['x-request-id'], 'generated ids differ');
  });

  test('keep-alive: sequential requests on one connection', T, async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await chat({ model: 'fast', messages: MESSAGES }, { agent });
        assert.equal(r.status, 200, `request ${i}: ${r.text}`);
        assert.equal(r.json.choices[0].message.content, h.mockText(8));
      }
    } finally {
      agent.destroy();
    }
  });

  test('upstream connections are reused across client connections', T, async () => {
    // Each request arrives on a new client connection; upstream, each worker
    // thread's curl multi handle keeps its connections, so the mock sees at
    // most one connection per gateway thread (sequential requests).
    const rids = [];
    for (let i = 0; i < 12; i++) {
      const rid = h.randomId(`reuse${i}`);
      rids.push(rid);
      const r = await chat({ model: 'fast', messages: MESSAGES }, { headers: { 'x-request-id': rid } });
      assert.equal(r.status, 200, r.text);
    }
    const lines = await Promise.all(rids.map((rid) => mock.usageFor(rid)));
    const conns = new Set(lines.map((l) => l.conn));
    assert.ok(lines.every((l) => Number.isInteger(l.conn) && l.conn > 0), JSON.stringify(lines[0]));
    assert.ok(conns.size <= gw.threads, `12 requests used ${conns.size} upstream connections `
      + `for ${gw.threads} gateway threads: ${[...conns].join(',')}`);
  });

  test('GET /v1/models lists the routes', T, async () => {
    const r = await h.request(gw.port, { method: 'GET', path: '/v1/models', headers: h.AUTH });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'list');
    assert.ok(Array.isArray(r.json.data));
    assert.ok(r.json.data.some((m) => m.id === 'fast'), `route "fast" missing: ${r.text}`);
  });
});

describe('streaming', () => {
  test('SSE events through the gateway carry the mock\'s direct stream (with usage)', T, async () => {
    const body = { stream: true, stream_options: { include_usage: true }, messages: MESSAGES };
    const rid = h.randomId('stream');
    const viaGw = await h.collectStream(gw.port, {
      body: { ...body, model: 'fast' }, headers: { ...h.AUTH, 'x-request-id': rid },
    });
    const direct = await h.collectStream(mock.port, { body: { ...body, model: 'mock-gpt' } });

    assert.equal(viaGw.status, 200, viaGw.raw);
    assert.match(String(viaGw.headers['content-type']), /text\/event-stream/);
    assert.equal(viaGw.headers['x-request-id'], rid);
    assert.ok(viaGw.complete, 'the gateway stream ended cleanly');
    assert.equal(direct.status, 200);

    const g = h.parseEvents(viaGw.events);
    const d = h.parseEvents(direct.events);
    assert.equal(g.at(-1), '[DONE]', `last event; raw:\n${viaGw.raw}`);
    assert.deepEqual(g.map(h.chunkEssence), d.map(h.chunkEssence));

    const chunks = g.slice(0, -1);
    for (const c of chunks) assert.equal(c.object, 'chat.completion.chunk', JSON.stringify(c));
    assert.equal(h.streamedContent(chunks), h.mockText(8));
    const usageChunk = chunks.at(-1);
    assert.deepEqual(usageChunk.choices, [], 'the usage chunk has "choices":[]');
    assert.equal(usageChunk.usage.prompt_tokens, h.mockInputTokens(MESSAGES));
    assert.equal(usageChunk.usage.completion_tokens, 8);
    assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === 'stop'), 'a chunk has finish_reason stop');

    const u = await mock.usageFor(rid);
    assert.equal(u.stream, true);
    assert.equal(u.outcome, 'completed');
    assert.equal(u.usage.output_tokens, 8);
  });

  test('SSE without include_usage has no usage chunk and carries the direct stream', T, async () => {
    const body = { stream: true, messages: MESSAGES };
    const viaGw = await h.collectStream(gw.port, { body: { ...body, model: 'fast' }, headers: h.AUTH });
    const direct = await h.collectStream(mock.port, { body: { ...body, model: 'mock-gpt' } });
    assert.equal(viaGw.status, 200, viaGw.raw);
    const g = h.parseEvents(viaGw.events);
    const d = h.parseEvents(direct.events);
    assert.deepEqual(g.map(h.chunkEssence), d.map(h.chunkEssence));
    assert.equal(g.at(-1), '[DONE]');
    assert.ok(!g.slice(0, -1).some((c) => Array.isArray(c.choices) && c.choices.length === 0 && c.usage),
      'no usage chunk without stream_options.include_usage');
    assert.equal(h.streamedContent(g.slice(0, -1)), h.mockText(8));
  });

  test('client disconnect mid-stream cancels the upstream request', T, async () => {
    const rid = h.randomId('disconnect');
    // 50 chunks x 200 ms: ~10 s if nobody cancels.
    const s = await h.openStream(gw.port, {
      body: { model: 'mock/mock-gpt#chunks=50,chunk_delay_ms=200', stream: true, messages: MESSAGES },
      headers: { ...h.AUTH, 'x-request-id': rid },
    });
    assert.equal(s.status, 200);
    assert.equal(s.headers['x-request-id'], rid);
    // Read until the first content chunk, then go away.
    let first;
    for (;;) {
      const e = await s.nextEvent(15_000);
      assert.ok(e !== null, `the stream ended before any content; raw:\n${s.raw}`);
      const j = h.tryParseJson(e);
      if (j?.choices?.[0]?.delta?.content) { first = j; break; }
    }
    assert.equal(first.choices[0].delta.content, 'tok1');
    const abortedAt = Date.now();
    s.destroy();

    // Either outcome is reported: a "completed" line ~10 s later means no cancel.
    const u = await mock.usageFor(rid, { timeoutMs: 20_000 });
    const afterAbortMs = Date.now() - abortedAt;
    assert.equal(u.outcome, 'client_closed', `mock usage line: ${JSON.stringify(u)}`);
    assert.ok(afterAbortMs < 6000, `upstream cancel took ${afterAbortMs} ms after the client left (stream would take 10 s)`);
    assert.ok(u.usage.output_tokens < 50, `output_tokens ${u.usage.output_tokens} (should be a partial answer)`);
    assertGatewayAlive();
  });
});

describe('malformed input', () => {
  test('body that is not JSON -> 400 invalid_json', T, async () => {
    assertError(await chat('{"model": "fast", oops', { headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
    assertError(await chat('[1,2,3]', { headers: { 'content-type': 'application/json' } }), 400, 'invalid_json');
  });

  test('missing model -> 400 param model', T, async () => {
    assertError(await chat({ messages: MESSAGES }), 400, 'invalid_request', 'model');
    assertError(await chat({ model: 42, messages: MESSAGES }), 400, 'invalid_request', 'model');
  });

  test('stream not a boolean -> 400 param stream', T, async () => {
    assertError(await chat({ model: 'fast', stream: 'yes', messages: MESSAGES }), 400, 'invalid_request', 'stream');
  });

  test('unknown model -> 404 model_not_found', T, async () => {
    assertError(await chat({ model: 'no-such-route', messages: MESSAGES }), 404, 'model_not_found', 'model');
    assertError(await chat({ model: 'no-such-provider/mock-gpt', messages: MESSAGES }), 404, 'model_not_found', 'model');
  });

  test('body above --max-body-bytes -> 413 request_too_large', T, async () => {
    const big = { model: 'fast', messages: [{ role: 'user', content: 'x'.repeat(100 * 1024) }] };
    assertError(await chat(big), 413, 'request_too_large');
  });

  test('missing or unknown key -> 401 invalid_api_key', T, async () => {
    assertError(await h.request(gw.port, { body: { model: 'fast', messages: MESSAGES } }), 401, 'invalid_api_key');
    assertError(await h.request(gw.port, {
      body: { model: 'fast', messages: MESSAGES }, headers: { authorization: 'Bearer not-the-key' },
    }), 401, 'invalid_api_key');
    // x-api-key is accepted as well as Authorization: Bearer.
    const ok = await h.request(gw.port, {
      body: { model: 'fast', messages: MESSAGES }, headers: { 'x-api-key': h.DEMO_API_KEY },
    });
    assert.equal(ok.status, 200, ok.text);
  });

  test('closed by default: a snapshot with no key refuses everything; "auth": "none" opens it, loudly', T, async () => {
    const keyless = { ...gw.snapshot, version: 2, keys: [] };
    const closed = await h.startGateway({ mock, snapshot: keyless });
    for (const headers of [{}, h.AUTH, { authorization: 'Bearer anything' }]) {
      const r = await h.request(closed.port, { body: { model: 'fast', messages: MESSAGES }, headers });
      assertError(r, 401, 'invalid_api_key');
      assert.match(r.json.error.message, /no API keys/);
    }
    assertError(await h.request(closed.port, { method: 'GET', path: '/v1/models' }), 401, 'invalid_api_key');
    assertError(await h.request(closed.port, {
      path: '/v1/embeddings', body: { model: 'fast', input: 'x' },
    }), 401, 'invalid_api_key');
    let ready = await h.request(closed.port, { method: 'GET', path: '/readyz' });
    assert.equal(ready.json.auth, 'keys');
    assert.equal(ready.json.keys, 0);
    assert.ok(closed.proc.stderrLines.some((l) => /no API key: every request is refused/.test(l)));
    // Opened on purpose: served without a key, and said at load, in
    // /readyz and in a metric.
    const open = await h.startGateway({ mock, snapshot: { ...keyless, auth: 'none' } });
    const r = await h.request(open.port, { body: { model: 'fast', messages: MESSAGES } });
    assert.equal(r.status, 200, r.text);
    ready = await h.request(open.port, { method: 'GET', path: '/readyz' });
    assert.equal(ready.json.auth, 'none');
    assert.ok(open.proc.stderrLines.some((l) => /snapshot opens the gateway/.test(l)));
    const m = await h.request(open.port, { method: 'GET', path: '/metrics' });
    assert.match(m.text, /^llmgw_auth_open 1$/m);
    const mc = await h.request(closed.port, { method: 'GET', path: '/metrics' });
    assert.match(mc.text, /^llmgw_auth_open 0$/m);
    await closed.proc.stop();
    await open.proc.stop();
  });

  test('unknown path -> 404 not_found, wrong method -> 405', T, async () => {
    assertError(await chat({ model: 'fast', messages: MESSAGES }, { path: '/v1/chat/completion' }), 404, 'not_found');
    assertError(await h.request(gw.port, { method: 'GET', path: '/nope', headers: h.AUTH }), 404, 'not_found');
    assertError(await h.request(gw.port, { method: 'GET', path: '/v1/chat/completions', headers: h.AUTH }), 405, 'method_not_allowed');
  });

  test('the gateway still serves a good request afterwards', T, async () => {
    assertGatewayAlive();
    const r = await chat({ model: 'fast', messages: MESSAGES });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, h.mockText(8));
  });
});

describe('upstream faults', () => {
  test('#status=500 is a 502 provider_5xx that quotes the provider\'s message', T, async () => {
    const viaGw = await chat({ model: 'mock/mock-gpt#status=500', messages: MESSAGES });
    const direct = await mockChat({ model: 'mock-gpt#status=500', messages: MESSAGES });
    assert.equal(direct.status, 500);
    assertError(viaGw, 502, 'provider_5xx');
    assert.ok(viaGw.json.error.message.includes(direct.json.error.message),
      `the provider's message is quoted: ${viaGw.text}`);
    assert.match(viaGw.json.error.message, /provider mock/);
  });

  test('#status=429 passes through with Retry-After', T, async () => {
    // 3 s is longer than this request's failover budget: no retry.
    const r = await chat({ model: 'mock/mock-gpt#status=429,retry_after=3', messages: MESSAGES },
      { headers: { 'x-llmgw-fallback-timeout-ms': '1000' } });
    assertError(r, 429);
    assert.equal(r.headers['retry-after'], '3');
    assert.equal(r.headers['x-llmgw-attempts'], '1');
  });

  test('#hang=1 with first_byte_timeout_ms 1500 -> 504 timeout', T, async () => {
    const t0 = Date.now();
    const r = await chat({ model: 'mockfast/mock-gpt#hang=1', messages: MESSAGES }, { timeoutMs: 20_000 });
    const ms = Date.now() - t0;
    assertError(r, 504, 'timeout');
    assert.ok(ms >= 1400, `answered after ${ms} ms, before the 1500 ms first-byte timeout`);
    assert.ok(ms < 15_000, `answered after ${ms} ms`);
  });

  test('upstream unreachable -> 502 network', T, async () => {
    assertError(await chat({ model: 'deadend/mock-gpt', messages: MESSAGES }), 502, 'network');
  });

  // These two run on a gateway of their own, so that a crash there cannot fail the tests after them.
  test('stream #drop_after=2 ends with an in-band error event and [DONE]', T, async (t) => {
    const own = await h.startGateway({ mock });
    t.after(() => own.proc.stop());
    const s = await h.collectStream(own.port, {
      body: { model: 'mock/mock-gpt#drop_after=2', stream: true, messages: MESSAGES }, headers: h.AUTH,
    }).catch(async (e) => assert.fail(`${e.message}; ${await h.exitNote(own.proc)}`));
    const ev = assertStreamEndsWithError(s, 'drop_after=2');
    assert.equal(h.streamedContent(ev.slice(0, -2)), h.mockText(2), 'the two chunks before the drop were forwarded');
    assertAlive(own);
  });

  test('a stream that stalls past the idle timeout ends with an in-band timeout error', T, async () => {
    // mockfast: idle_timeout_ms 1500; the mock waits 5 s between chunks.
    const rid = h.randomId('idle');
    const t0 = Date.now();
    const s = await h.collectStream(gw.port, {
      body: { model: 'mockfast/mock-gpt#chunks=3,chunk_delay_ms=5000', stream: true, messages: MESSAGES },
      headers: { ...h.AUTH, 'x-request-id': rid },
    });
    const took = Date.now() - t0;
    const evs = h.parseEvents(s.events);
    assert.equal(evs.at(-1), '[DONE]', s.raw);
    const err = evs.find((e) => e && e.error);
    assert.ok(err, `no error event: ${s.raw}`);
    assert.equal(err.error.code, 'timeout');
    assert.equal(h.streamedContent(evs.filter((e) => e && e.choices)), 'tok1', 'the content before the stall');
    assert.ok(took > 1200 && took < 4500, `ended after ${took} ms, not at the 1.5 s idle timeout`);
    const line = await gw.accessLogFor(rid);
    assert.equal(line.outcome, 'upstream_error');
    assert.equal(line.error_class, 'timeout');
  });

  test('a stream whose answer starts just before the failover budget ends is not cut by it', T, async () => {
    // The budget (300 ms) bounds the wait for the first content, which
    // comes at once; after it only the provider's idle timeout applies, so
    // the next chunks, 400 ms apart, run on past the budget's end to [DONE].
    const rid = h.randomId('budget-line');
    const t0 = Date.now();
    const s = await h.collectStream(gw.port, {
      body: { model: 'mock/mock-gpt#chunks=3,chunk_delay_ms=400', stream: true, messages: MESSAGES },
      headers: { ...h.AUTH, 'x-request-id': rid, 'x-llmgw-fallback-timeout-ms': '300' },
    });
    const took = Date.now() - t0;
    const evs = h.parseEvents(s.events);
    assert.equal(evs.at(-1), '[DONE]', s.raw);
    assert.ok(!evs.some((e) => e && e.error), `an error event: ${s.raw}`);
    assert.equal(h.streamedContent(evs.filter((e) => e && e.choices)), h.mockText(3));
    assert.ok(took > 700, `the answer took ${took} ms: the test needs it to outlast the budget`);
    const line = await gw.accessLogFor(rid);
    assert.equal(line.outcome, 'ok');
  });

  test('a client that stops reading is cut after the idle timeout, and the upstream canceled', T, async () => {
    // The client reads the head, then stops reading. The kernel buffers
    // fill, the gateway queues past its 1 MiB high mark and pauses the
    // upstream; mockfast's 1.5 s idle timeout then ends the request.
    const rid = h.randomId('stall');
    const body = JSON.stringify({
      model: 'mockfast/mock-gpt#chunks=100000', stream: true, messages: MESSAGES,
    });
    const sock = net.connect({ host: '127.0.0.1', port: gw.port });
    sock.on('error', () => {});
    sock.once('data', () => sock.pause());
    sock.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n`
      + `Authorization: Bearer ${h.DEMO_API_KEY}\r\nx-request-id: ${rid}\r\n`
      + `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    try {
      const line = await gw.accessLogFor(rid, 30_000);
      assert.equal(line.outcome, 'client_stalled', JSON.stringify(line));
      assert.equal(line.status, 499);
      const up = await mock.usageFor(rid, { timeoutMs: 10_000 });
      assert.equal(up.outcome, 'client_closed', 'the upstream transfer was not canceled');
      assert.ok(up.usage.output_tokens < 100000, 'the upstream ran to its end');
    } finally {
      sock.destroy();
    }
  });

  test('stream #malformed=2 ends with an in-band error event and [DONE]', T, async (t) => {
    const own = await h.startGateway({ mock });
    t.after(() => own.proc.stop());
    const s = await h.collectStream(own.port, {
      body: { model: 'mock/mock-gpt#malformed=2', stream: true, messages: MESSAGES }, headers: h.AUTH,
    }).catch(async (e) => assert.fail(`${e.message}; ${await h.exitNote(own.proc)}`));
    assertStreamEndsWithError(s, 'malformed=2');
    assertAlive(own);
  });
});

describe('unusual but valid upstream framing', () => {
  const streamOf = (model, rid) => h.collectStream(gw.port, {
    body: { model, stream: true, messages: MESSAGES }, headers: { ...h.AUTH, ...(rid ? { 'x-request-id': rid } : {}) },
  });

  test('SSE payloads split over several data: lines reach the client as valid events', T, async () => {
    const s = await streamOf('mock/mock-gpt#multiline=1');
    assert.equal(s.status, 200);
    const evs = h.parseEvents(s.events);
    assert.equal(evs.at(-1), '[DONE]');
    for (const e of evs.slice(0, -1)) assert.equal(typeof e, 'object', `an event is not JSON: ${JSON.stringify(e)}`);
    assert.equal(h.streamedContent(evs.slice(0, -1)), h.mockText(8));
  });

  test('empty events and comments between chunks are skipped, not fatal', T, async () => {
    const s = await streamOf('mock/mock-gpt#blank_events=1');
    const evs = h.parseEvents(s.events);
    assert.equal(evs.at(-1), '[DONE]');
    assert.ok(!evs.some((e) => e && e.error), `an error event: ${s.raw}`);
    assert.equal(h.streamedContent(evs.slice(0, -1)), h.mockText(8));
  });

  test('the client stream ends at [DONE] even when the upstream response goes on', T, async () => {
    const rid = h.randomId('tail');
    const t0 = Date.now();
    const s = await streamOf('mock/mock-gpt#tail_ms=4000', rid);
    const took = Date.now() - t0;
    assert.equal(h.parseEvents(s.events).at(-1), '[DONE]');
    assert.ok(s.complete, 'the response did not end cleanly');
    assert.ok(took < 3000, `the client waited ${took} ms for an answer complete at [DONE]`);
    // The attempt is logged once the upstream ends, as a success.
    const line = await gw.accessLogFor(rid, 15_000);
    assert.equal(line.outcome, 'ok', JSON.stringify(line));
    assert.ok(line.latency_ms < 3000, `latency is the client's: ${JSON.stringify(line)}`);
  });

  test('a 200 with an empty body or no content is a failure (502 empty_output), streamed or not', T, async () => {
    for (const stream of [false, true]) {
      for (const fault of ['no_body=1', 'empty=1']) {
        // A tag of its own per request: the retries of one request would
        // otherwise open the target's breaker for the next.
        const r = await chat({ model: `mock/mock-gpt#${fault},tag=${h.randomId('e')}`, stream, messages: MESSAGES });
        assertError(r, 502, 'empty_output');
        assert.equal(r.headers['x-llmgw-attempts'], '3', 'three consecutive failures open the breaker');
      }
    }
  });

  test('an exact selector must carry a plausible model id, and none reaches the logs', T, async () => {
    const canary = `CANARY${h.randomId('sel').replace(/-/g, '')}`;
    for (const model of [`mock/please summarise ${canary}`, `mock/${'x'.repeat(300)}${canary}`]) {
      const r = await chat({ model, messages: MESSAGES });
      assertError(r, 400, 'invalid_model');
      assert.equal(r.json.error.param, 'model');
    }
    await h.sleep(200);
    assert.ok(!gw.proc.stdoutText.includes(canary), 'the selector text appears in the access log');
    assert.ok(!gw.proc.stderrText.includes(canary), 'the selector text appears on stderr');
  });
});

describe('access log', () => {
  test('one JSON line per request with request_id and status; never the prompt', T, async () => {
    const canary = `CANARY${h.randomId('prompt').replace(/-/g, '')}`;
    const msgs = [{ role: 'user', content: `remember the secret word ${canary} please` }];
    const ridOk = h.randomId('log-ok');
    const ridStream = h.randomId('log-stream');
    const ridDenied = h.randomId('log-401');

    const ok = await chat({ model: 'fast', messages: msgs }, { headers: { 'x-request-id': ridOk } });
    assert.equal(ok.status, 200);
    const st = await h.collectStream(gw.port, {
      body: { model: 'fast', stream: true, stream_options: { include_usage: true }, messages: msgs },
      headers: { ...h.AUTH, 'x-request-id': ridStream },
    });
    assert.equal(st.status, 200);
    const denied = await h.request(gw.port, {
      body: { model: 'fast', messages: msgs }, headers: { 'x-request-id': ridDenied },
    });
    assert.equal(denied.status, 401);

    const lOk = await gw.accessLogFor(ridOk);
    const lStream = await gw.accessLogFor(ridStream);
    const lDenied = await gw.accessLogFor(ridDenied);
    assert.equal(lOk.status, 200);
    assert.equal(lStream.status, 200);
    assert.equal(lDenied.status, 401);
    // Tokens come from the provider's own usage, streamed or not, by class
    // (input excludes cache reads and writes).
    const okUsage = ok.json.usage;
    assert.deepEqual(lOk.tokens, {
      input: okUsage.prompt_tokens, cache_read: 0, cache_write_5m: 0, cache_write_1h: 0,
      output: okUsage.completion_tokens, reasoning: 0,
    });
    assert.equal(lOk.route, 'fast');
    assert.equal(lOk.provider, 'mock');
    assert.equal(lOk.model, 'mock-gpt');
    assert.equal(lOk.outcome, 'ok');
    assert.ok(lOk.ttfb_ms > 0 && lOk.latency_ms >= lOk.ttfb_ms, JSON.stringify(lOk));
    assert.deepEqual(lStream.tokens, lOk.tokens);
    assert.ok(lStream.ttfc_ms >= lStream.ttfb_ms, JSON.stringify(lStream));

    await h.sleep(300); // any duplicate line would have been written by now
    for (const rid of [ridOk, ridStream, ridDenied]) {
      assert.equal(gw.accessLog().filter((l) => l.request_id === rid).length, 1, `exactly one line for ${rid}`);
    }
    // Every stdout line is a JSON object (the listening line and access-log lines).
    for (const line of gw.proc.stdoutLines.filter((l) => l.trim() !== '')) {
      const j = h.tryParseJson(line);
      assert.ok(j && typeof j === 'object', `stdout line is not a JSON object: ${line}`);
    }
    assert.ok(!gw.proc.stdoutText.includes(canary), 'the prompt text appears on the gateway stdout');
    assert.ok(!gw.proc.stderrText.includes(canary), 'the prompt text appears on the gateway stderr');
  });
});

describe('shutdown', () => {
  test('SIGTERM: open streams finish, new connections are refused, exit code 0', { timeout: 90_000 }, async () => {
    const gw2 = await h.startGateway({ mock, args: ['--drain-timeout-ms', '30000'] });
    const CHUNKS = 20;
    const model = `mock/mock-gpt#chunks=${CHUNKS},chunk_delay_ms=150`; // ~3 s each
    const rids = [0, 1, 2].map((i) => h.randomId(`drain${i}`));
    const streams = await Promise.all(rids.map((rid) => h.openStream(gw2.port, {
      body: { model, stream: true, messages: MESSAGES }, headers: { ...h.AUTH, 'x-request-id': rid },
      timeoutMs: 60_000,
    })));
    for (const s of streams) {
      assert.equal(s.status, 200);
      const e = await s.nextEvent(15_000);
      assert.ok(e !== null, `a stream ended before its first chunk; raw:\n${s.raw}`);
    }

    gw2.proc.signal('SIGTERM');

    // New connections must be refused while the old streams are still draining.
    let refusedWhileOpen = null;
    const probes = [];
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const openBefore = streams.filter((s) => !s.done).length;
      const r = await h.tryConnect(gw2.port);
      probes.push(r);
      if (r === 'refused') {
        refusedWhileOpen = openBefore;
        break;
      }
      if (!gw2.proc.running) break;
      await h.sleep(25);
    }
    assert.ok(refusedWhileOpen !== null, `no connection was refused after SIGTERM; probes: ${probes.join(',')}`);
    assert.ok(refusedWhileOpen > 0,
      'the listener must close while streams are still open, but all had ended before the first refusal '
      + `(cleanly: ${streams.map((s) => s.complete).join(',')}; gateway exit: ${JSON.stringify(gw2.proc.exitInfo)})`);
    for (let i = 0; i < 3; i++) {
      assert.equal(await h.tryConnect(gw2.port), 'refused', 'connections stay refused');
    }

    await Promise.all(streams.map((s) => s.readAll(60_000)));
    const exit = await gw2.proc.waitExit(30_000);
    const note = `gateway exit: ${JSON.stringify(exit)}`;
    streams.forEach((s, i) => {
      const tail = `raw tail:\n${s.raw.slice(-600)}`;
      assert.ok(s.complete, `stream ${i} did not end cleanly (${note}); ${tail}`);
      const ev = h.parseEvents(s.events);
      assert.equal(ev.at(-1), '[DONE]', `stream ${i} ends with [DONE] (${note}); ${tail}`);
      assert.ok(!ev.some((e) => e && typeof e === 'object' && e.error), `stream ${i} has an error event; ${tail}`);
      assert.equal(h.streamedContent(ev.slice(0, -1)), h.mockText(CHUNKS), `stream ${i} has the full content`);
    });
    assert.deepEqual(exit, { code: 0, signal: null }, gw2.proc.describe());
    for (const rid of rids) {
      const u = await mock.usageFor(rid);
      assert.equal(u.outcome, 'completed', JSON.stringify(u));
    }
  });

  test('SIGTERM with --drain-delay-ms: unready at once, new connections served during the delay, exit 0', { timeout: 60_000 }, async () => {
    const DELAY = 1500;
    const gw2 = await h.startGateway({ mock, args: ['--drain-delay-ms', String(DELAY)] });
    const ready = await h.request(gw2.port, { method: 'GET', path: '/readyz' });
    assert.equal(ready.status, 200, ready.text);

    const t0 = Date.now();
    gw2.proc.signal('SIGTERM');
    // /readyz turns 503 before the delay ends (each request on a new connection).
    await h.waitFor(async () => {
      const r = await h.request(gw2.port, { method: 'GET', path: '/readyz' });
      return r.status === 503 && r.json && r.json.status === 'not_ready' && r.json.reason === 'draining';
    }, { timeoutMs: 1000, intervalMs: 25, what: '/readyz 503 right after SIGTERM' });
    // A chat request on a new connection still succeeds while the delay runs.
    const res = await h.request(gw2.port, {
      body: { model: 'mock/mock-gpt', messages: MESSAGES }, headers: h.AUTH,
    });
    const served = Date.now() - t0;
    assert.equal(res.status, 200, `chat during the drain delay; body: ${res.text}`);
    assert.ok(served < DELAY, `the chat answer came after the delay (${served} ms): the test proves nothing`);
    assert.ok(gw2.proc.running, 'the gateway exited during the drain delay');

    const exit = await gw2.proc.waitExit(30_000);
    assert.deepEqual(exit, { code: 0, signal: null }, gw2.proc.describe());
    assert.ok(Date.now() - t0 >= DELAY - 100, `the gateway exited before the delay ended (${Date.now() - t0} ms)`);
  });
});
