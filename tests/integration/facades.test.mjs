// Every facade through every driver, over real HTTP against the mock, and
// the bad input each must refuse with a clear 400 naming the field.

import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' } },
  required: ['city', 'days'],
};
const TIME = { type: 'object', properties: { verbose: { type: 'boolean' } } };
const OAI_TOOLS = [
  { type: 'function', function: { name: 'get_weather', parameters: WEATHER } },
  { type: 'function', function: { name: 'get_time', parameters: TIME } },
];
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

// Every chat driver, as an exact selector on the mock.
const TARGETS = [
  ['openai', 'mock/mock-gpt'],
  ['anthropic', 'claude/mock-claude'],
  ['openai-responses', 'resp/mock-gpt'],
  ['gemini', 'gem/mock-gemini'],
  ['ollama', 'olla/mock-llama'],
  ['bedrock', 'bed/mock-claude'],
];

let mock;
let gw;
const start = () => h.startGateway({ mock, extraProviders: h.driverProviders(mock) });

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
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

const post = (path, body, headers = {}) => h.request(gw.port, { path, body, headers: { ...h.AUTH, ...headers } });
const stream = (path, body, headers = {}) => h.collectStream(gw.port, { path, body, headers: { ...h.AUTH, ...headers } });

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
    if (event || data.length) out.push({ event, data: h.tryParseJson(data.join('\n')) ?? data.join('\n') });
  }
  return out;
}

function assert400(r, param, code) {
  assert.equal(r.status, 400, r.text);
  if (r.json?.type === 'error') { // Anthropic shape: the field is named in the message
    assert.equal(r.json.error.type, 'invalid_request_error', r.text);
    if (param) assert.ok(r.json.error.message.includes(param), `message names ${param}: ${r.text}`);
    return;
  }
  if (param) assert.equal(r.json?.error?.param, param, r.text);
  if (code) assert.equal(r.json?.error?.code, code, r.text);
  assert.ok(r.json.error.message.length > 10, r.text);
}

describe('OpenAI chat facade through every driver', () => {
  for (const [driver, model] of TARGETS) {
    test(`${driver}: text, streamed text, usage`, T, async () => {
      const body = { model, messages: [{ role: 'user', content: 'one two three' }], max_tokens: 100 };
      const r = await post('/v1/chat/completions', body);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, h.mockText(8));
      assert.equal(r.json.choices[0].finish_reason, 'stop');
      assert.equal(r.json.usage.completion_tokens, 8);
      assert.ok(r.json.usage.prompt_tokens > 0, r.text);
      assert.equal(r.headers['x-llmgw-provider'], model.split('/')[0]);

      const s = await stream('/v1/chat/completions', { ...body, stream: true, stream_options: { include_usage: true } });
      assert.equal(s.status, 200, s.raw);
      const ev = h.parseEvents(s.events);
      assert.equal(ev.at(-1), '[DONE]');
      assert.equal(h.streamedContent(ev.slice(0, -1)), r.json.choices[0].message.content);
      assert.equal(ev.at(-2).usage.completion_tokens, 8);
    });

    test(`${driver}: two parallel tool calls, streamed and whole`, T, async () => {
      const body = {
        model: `${model}#parallel=2`, messages: [{ role: 'user', content: 'weather and time' }],
        tools: OAI_TOOLS, max_tokens: 100,
      };
      const r = await post('/v1/chat/completions', body);
      assert.equal(r.status, 200, r.text);
      const calls = r.json.choices[0].message.tool_calls;
      assert.equal(calls.length, 2, r.text);
      assert.deepEqual(JSON.parse(calls[0].function.arguments), { city: 'mock', days: 42 });
      assert.deepEqual(JSON.parse(calls[1].function.arguments), { verbose: true });
      assert.equal(r.json.choices[0].finish_reason, 'tool_calls');

      const s = await stream('/v1/chat/completions', { ...body, stream: true });
      const args = ['', ''];
      for (const c of h.parseEvents(s.events).slice(0, -1)) {
        for (const tc of c.choices?.[0]?.delta?.tool_calls ?? []) args[tc.index] += tc.function?.arguments ?? '';
      }
      assert.deepEqual(args.map((a) => JSON.parse(a)), [{ city: 'mock', days: 42 }, { verbose: true }]);
    });

    test(`${driver}: an image and a tool-result round trip reach the provider`, T, async () => {
      const rid = h.randomId(`img-${driver}`);
      const r = await post('/v1/chat/completions', {
        model,
        max_tokens: 100,
        tools: OAI_TOOLS,
        messages: [
          { role: 'system', content: 'Be terse.' },
          { role: 'user', content: [{ type: 'text', text: 'what is this' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }] },
          { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":1}' } }] },
          { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
        ],
      }, { 'x-request-id': rid });
      assert.equal(r.status, 200, r.text);
      // The conversation ends in a tool result: the mock answers it in text.
      assert.equal(r.json.choices[0].message.content, h.mockText(8), r.text);
      assert.equal(r.json.choices[0].finish_reason, 'stop', r.text);
      const u = await mock.usageFor(rid);
      assert.equal(u.seen.images, 1, JSON.stringify(u.seen));
      assert.equal(u.seen.tool_results, 1, JSON.stringify(u.seen));
      assert.equal(u.seen.tool_calls, 1, JSON.stringify(u.seen));
      assert.equal(u.seen.system, true, JSON.stringify(u.seen));
    });

    test(`${driver}: a stream that breaks after content ends with an in-band error`, T, async () => {
      const s = await stream('/v1/chat/completions', {
        model: `${model}#drop_after=2`, stream: true, messages: [{ role: 'user', content: 'x' }],
      });
      assert.equal(s.status, 200, s.raw);
      const ev = h.parseEvents(s.events);
      assert.equal(ev.at(-1), '[DONE]', s.raw);
      assert.ok(ev.at(-2).error, s.raw);
      assert.equal(h.streamedContent(ev.slice(0, -2)), h.mockText(2));
    });

    test(`${driver}: upstream 429 before content is a 429 with the failure class`, T, async () => {
      const r = await post('/v1/chat/completions', {
        model: `${model}#status=429,retry_after=2`, messages: [{ role: 'user', content: 'x' }],
      });
      assert.equal(r.status, 429, r.text);
      assert.equal(r.json.error.code, 'rate_limited', r.text);
    });
  }

  test('a retry delay carried in a Google error body becomes Retry-After', T, async () => {
    // The delay (1 s) is longer than this request's failover budget, so the
    // 429 comes back at once rather than after a retry.
    const r = await post('/v1/chat/completions', {
      model: 'gem/mock-gemini#status=429', messages: [{ role: 'user', content: 'x' }],
    }, { 'x-llmgw-fallback-timeout-ms': '500' });
    assert.equal(r.status, 429, r.text);
    assert.equal(r.json.error.code, 'rate_limited', r.text);
    assert.equal(r.headers['retry-after'], '1', JSON.stringify(r.headers));
    assert.equal(r.headers['x-llmgw-attempts'], '1', JSON.stringify(r.headers));
  });

  test('ollama honours tool_choice none by offering no tools', T, async () => {
    const rid = h.randomId('olla-none');
    const r = await post('/v1/chat/completions', {
      model: 'olla/mock-llama', messages: [{ role: 'user', content: 'x' }], tools: OAI_TOOLS, tool_choice: 'none',
    }, { 'x-request-id': rid });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.choices[0].message.content, h.mockText(8));
    assert.equal((await mock.usageFor(rid)).seen.tools, 0);
  });

  test('reasoning reaches the client as reasoning_content, with reasoning tokens', T, async () => {
    const r = await post('/v1/chat/completions', {
      model: 'claude/mock-claude#reasoning=3', messages: [{ role: 'user', content: 'think' }], max_tokens: 100,
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.choices[0].message.reasoning_content?.length > 0, r.text);
    assert.equal(r.json.choices[0].message.content, h.mockText(8));
  });
});

describe('Anthropic messages facade', () => {
  for (const [driver, model] of TARGETS) {
    test(`${driver}: the exact SSE event sequence, and the same text unstreamed`, T, async () => {
      const body = { model, max_tokens: 100, messages: [{ role: 'user', content: 'one two three' }] };
      const r = await post('/v1/messages', body);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.type, 'message');
      assert.equal(r.json.content[0].text, h.mockText(8));
      assert.equal(r.json.stop_reason, 'end_turn');
      const s = await stream('/v1/messages', { ...body, stream: true });
      const fr = sseFrames(s.raw);
      const names = fr.map((f) => f.event).filter((e) => e !== 'ping');
      assert.deepEqual(names, ['message_start', 'content_block_start', ...Array(8).fill('content_block_delta'),
        'content_block_stop', 'message_delta', 'message_stop'], s.raw);
      const text = fr.filter((f) => f.event === 'content_block_delta').map((f) => f.data.delta.text).join('');
      assert.equal(text, r.json.content[0].text);
      const md = fr.find((f) => f.event === 'message_delta').data;
      assert.equal(md.delta.stop_reason, 'end_turn');
      assert.equal(md.usage.output_tokens, 8);
    });
  }

  test('a mid-stream failure ends with event: error', T, async () => {
    const s = await stream('/v1/messages', {
      model: 'mock/mock-gpt#drop_after=2', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'x' }],
    });
    const fr = sseFrames(s.raw);
    assert.equal(fr.at(-1).event, 'error', s.raw);
    assert.equal(fr.at(-1).data.type, 'error');
  });

  test('count_tokens answers an estimate marked as such', T, async () => {
    const r = await post('/v1/messages/count_tokens', {
      model: 'claude/mock-claude', messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
    });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.input_tokens > 0);
    assert.equal(r.json.estimated, true);
    assert.equal(r.headers['x-llmgw-estimate'], 'true');
  });

  test('errors are in Anthropic\'s shape', T, async () => {
    const r = await post('/v1/messages', { model: 'claude/mock-claude', messages: [{ role: 'user', content: 'x' }] });
    assert400(r, 'max_tokens');
    const u = await h.request(gw.port, { path: '/v1/messages', body: { model: 'x', max_tokens: 1, messages: [] } });
    assert.equal(u.status, 401);
    assert.equal(u.json.type, 'error');
    assert.equal(u.json.error.type, 'authentication_error');
  });
});

describe('Responses facade', () => {
  for (const [driver, model] of TARGETS) {
    test(`${driver}: text and a tool call, streamed and whole`, T, async () => {
      const r = await post('/v1/responses', { model, input: 'one two three', max_output_tokens: 100 });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.object, 'response');
      assert.equal(r.json.status, 'completed');
      const msg = r.json.output.find((o) => o.type === 'message');
      assert.equal(msg.content[0].text, h.mockText(8));
      const s = await stream('/v1/responses', { model, input: 'one two three', stream: true });
      const fr = sseFrames(s.raw);
      assert.equal(fr[0].event, 'response.created', s.raw);
      assert.equal(fr.at(-1).event, 'response.completed', s.raw);
      const text = fr.filter((f) => f.event === 'response.output_text.delta').map((f) => f.data.delta).join('');
      assert.equal(text, h.mockText(8));
      const seq = fr.map((f) => f.data.sequence_number);
      assert.deepEqual(seq, seq.map((_, i) => seq[0] + i), 'sequence numbers count up');

      const t = await post('/v1/responses', {
        model, input: 'weather', tools: [{ type: 'function', name: 'get_weather', parameters: WEATHER }],
      });
      assert.equal(t.status, 200, t.text);
      const fc = t.json.output.find((o) => o.type === 'function_call');
      assert.deepEqual(JSON.parse(fc.arguments), { city: 'mock', days: 42 });
    });
  }

  test('server-side state is refused', T, async () => {
    assert400(await post('/v1/responses', { model: 'mock/mock-gpt', input: 'x', store: true }), 'store');
    assert400(await post('/v1/responses', { model: 'mock/mock-gpt', input: 'x', previous_response_id: 'resp_1' }), 'previous_response_id');
  });
});

describe('embeddings', () => {
  for (const model of ['mock/mock-embed', 'gem/mock-embed', 'olla/mock-embed']) {
    test(`${model}: float and base64 agree`, T, async () => {
      const f = await post('/v1/embeddings', { model, input: ['a', 'b'], dimensions: 4 });
      assert.equal(f.status, 200, f.text);
      assert.equal(f.json.data.length, 2);
      assert.equal(f.json.data[0].embedding.length, 4);
      const b = await post('/v1/embeddings', { model, input: ['a', 'b'], dimensions: 4, encoding_format: 'base64' });
      assert.equal(b.status, 200, b.text);
      const buf = Buffer.from(b.json.data[1].embedding, 'base64');
      const floats = Array.from({ length: buf.length / 4 }, (_, i) => buf.readFloatLE(i * 4));
      floats.forEach((x, i) => assert.ok(Math.abs(x - f.json.data[1].embedding[i]) < 1e-6));
    });
  }

  test('bad input and a driver without embeddings', T, async () => {
    assert400(await post('/v1/embeddings', { model: 'mock/mock-embed', input: [] }), 'input');
    assert400(await post('/v1/embeddings', { model: 'mock/mock-embed', input: 'a', dimensions: 0 }), 'dimensions');
    assert400(await post('/v1/embeddings', { model: 'claude/mock-claude', input: 'a' }), 'model', 'no_capable_target');
  });
});

describe('bad input is a clear 400 naming the field', () => {
  const msgs = [{ role: 'user', content: 'x' }];
  const chat = (extra) => post('/v1/chat/completions', { model: 'mock/mock-gpt', messages: msgs, ...extra });

  test('unsupported parameters', T, async () => {
    // What the canonical model cannot carry passes through to a provider of
    // the client's own format (relay.test.mjs), and a translation refuses it.
    const claude = (extra) => post('/v1/chat/completions', { model: 'claude/mock-claude', messages: msgs, ...extra });
    assert400(await claude({ logit_bias: { 1: 1 } }), 'logit_bias', 'unsupported_parameter');
    assert400(await chat({ n: 3 }), 'n', 'unsupported_parameter');
    assert400(await claude({ logprobs: true }), 'logprobs', 'unsupported_parameter');
    assert.equal((await chat({ logit_bias: { 1: 1 } })).status, 200);
    // Translations the target cannot honor.
    assert400(await post('/v1/chat/completions', { model: 'claude/mock-claude', messages: msgs, seed: 1 }), 'seed');
    assert400(await post('/v1/chat/completions', {
      model: 'claude/mock-claude', messages: msgs, response_format: { type: 'json_object' },
    }), 'response_format');
    assert400(await post('/v1/messages', { model: 'mock/mock-gpt', max_tokens: 10, messages: msgs, top_k: 5 }), 'top_k');
    assert400(await post('/v1/chat/completions', {
      model: 'olla/mock-llama', messages: msgs, tools: OAI_TOOLS, tool_choice: 'required',
    }), 'tool_choice');
  });

  test('images to a target without vision, or by URL to one that takes bytes only', T, async () => {
    const img = [{ role: 'user', content: [{ type: 'text', text: 'x' }, { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } }] }];
    assert400(await post('/v1/chat/completions', { model: 'textonly/mock-gpt', messages: img }), 'messages', 'no_capable_target');
    const url = [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://example.invalid/cat.png' } }] }];
    for (const model of ['bed/mock-claude', 'gem/mock-gemini', 'olla/mock-llama']) {
      const r = await post('/v1/chat/completions', { model, messages: url });
      assert.equal(r.status, 400, `${model}: ${r.text}`);
    }
    assert400(await chat({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x/y.png' } }] }] }),
      'messages[0].content[0].image_url.url');
  });

  test('malformed tool schemas and tool choices', T, async () => {
    const bad = (parameters) => chat({ tools: [{ type: 'function', function: { name: 'f', parameters } }] });
    assert400(await bad({ type: 'array' }), 'tools[0].function.parameters', 'invalid_tool_schema');
    assert400(await bad('not an object'), 'tools[0].function.parameters', 'invalid_tool_schema');
    assert400(await bad({ type: 'object', properties: [] }), 'tools[0].function.parameters', 'invalid_tool_schema');
    assert400(await bad({ type: 'object', required: [1] }), 'tools[0].function.parameters', 'invalid_tool_schema');
    assert400(await chat({ tools: [{ type: 'function', function: { name: 'bad name!' } }] }), 'tools[0].function.name');
    assert400(await chat({ tools: OAI_TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }), 'tool_choice');
    assert400(await post('/v1/messages', {
      model: 'mock/mock-gpt', max_tokens: 10, messages: msgs, tools: [{ name: 'f', input_schema: { type: 'string' } }],
    }), 'input_schema');
  });

  test('malformed messages', T, async () => {
    assert400(await chat({ messages: [] }), 'messages');
    assert400(await chat({ messages: [{ role: 'wizard', content: 'x' }] }), 'messages[0]');
    assert400(await chat({ messages: [{ role: 'tool', content: 'x' }] }), 'messages[0]');
    assert400(await chat({
      messages: [{ role: 'assistant', tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '[1]' } }] }],
    }), 'messages[0].tool_calls[0]');
    assert400(await chat({ temperature: 7 }), 'temperature');
  });
});

describe('models', () => {
  test('GET /v1/models lists routes, aliases and provider/model targets', T, async () => {
    const r = await h.request(gw.port, { method: 'GET', path: '/v1/models', headers: h.AUTH });
    const ids = r.json.data.map((m) => m.id);
    for (const id of ['fast', 'default', 'mock/mock-gpt']) assert.ok(ids.includes(id), ids.join(','));
  });
});

describe('a key with allowlists', () => {
  const KEY = `llmgw-limited-${h.randomId('k')}`;
  let g;
  before(async () => {
    const snap = h.makeSnapshot({
      mockV1: mock.v1,
      extraProviders: h.driverProviders(mock),
      extraRoutes: [{ name: 'smart', entries: [{ provider: 'claude', model: 'mock-claude' }] }],
    });
    snap.keys.push({ id: 'key_limited', hash: h.sha256hex(KEY), allow_routes: ['fast'] });
    g = await h.startGateway({ mock, snapshot: snap });
  });
  after(async () => { await g?.proc.stop(); });
  const as = (key, opts) => h.request(g.port, { ...opts, headers: { authorization: `Bearer ${key}` } });

  test('GET /v1/models lists only what the key may use', T, async () => {
    const limited = (await as(KEY, { method: 'GET', path: '/v1/models' })).json.data.map((m) => m.id);
    assert.deepEqual(limited.sort(), ['default', 'fast'], limited.join(','));
    const demo = (await as(h.DEMO_API_KEY, { method: 'GET', path: '/v1/models' })).json.data.map((m) => m.id);
    for (const id of ['fast', 'smart', 'claude/mock-claude', 'mock/mock-gpt']) assert.ok(demo.includes(id), demo.join(','));
  });

  test("a route or target outside the key's lists is 403 model_not_allowed, naming the candidate", T, async () => {
    const messages = [{ role: 'user', content: 'hi' }];
    for (const model of ['smart', 'claude/mock-claude']) {
      const r = await as(KEY, { path: '/v1/chat/completions', body: { model, messages } });
      assert.equal(r.status, 403, r.text);
      assert.equal(r.json.error.code, 'model_not_allowed', r.text);
      assert.equal(r.json.error.param, 'model', r.text);
      assert.deepEqual(r.json.error.candidates.map((c) => [c.provider, c.model, c.reason]),
        [['claude', 'mock-claude', 'not_allowed']], r.text);
    }
    const ok = await as(KEY, { path: '/v1/chat/completions', body: { model: 'fast', messages } });
    assert.equal(ok.status, 200, ok.text);
  });
});
