// The official `openai` SDK against llmgw-dataplane (in front of llmgw-mockprovider).

import { after, afterEach, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'Say hello to the gateway' },
];
const TOOLS = [{
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather forecast for a city',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string' }, days: { type: 'integer' } },
      required: ['city', 'days'],
    },
  },
}];

let mock;
let gw;
let client; // through the gateway
let direct; // straight to the mock

function gatewayClient(g) {
  return new OpenAI({ baseURL: g.v1, apiKey: h.DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
}

before(async () => {
  h.requireBinaries();
  mock = await h.startMock();
  gw = await h.startGateway({ mock });
  client = gatewayClient(gw);
  direct = new OpenAI({ baseURL: mock.v1, apiKey: 'unused-by-the-mock', maxRetries: 0, timeout: 30_000 });
});

// A gateway crash fails the test during which it happened, not every test after it.
afterEach(async () => {
  const r = await h.replaceIfDead(gw, () => h.startGateway({ mock }));
  if (r.gateway !== gw) {
    gw = r.gateway;
    client = gatewayClient(gw);
  }
  if (r.error) throw r.error;
});

after(async () => {
  await h.stopAll();
});

test('SDK: non-streaming chat completion', T, async () => {
  const rid = h.randomId('sdk-chat');
  const { data, response } = await client.chat.completions
    .create({ model: 'fast', messages: MESSAGES }, { headers: { 'X-Request-Id': rid } })
    .withResponse();
  assert.equal(response.status, 200);
  assert.equal(response.headers.get('x-request-id'), rid);
  assert.equal(data.object, 'chat.completion');
  assert.equal(data.model, 'mock-gpt');
  assert.equal(data.choices.length, 1);
  assert.equal(data.choices[0].message.role, 'assistant');
  assert.equal(data.choices[0].message.content, h.mockText(8));
  assert.equal(data.choices[0].finish_reason, 'stop');
  assert.equal(data.usage.prompt_tokens, h.mockInputTokens(MESSAGES));
  assert.equal(data.usage.completion_tokens, 8);
  assert.equal(data.usage.total_tokens, data.usage.prompt_tokens + 8);

  const d = await direct.chat.completions.create({ model: 'mock-gpt', messages: MESSAGES });
  assert.deepEqual(h.answerEssence(data), h.answerEssence(d));

  const u = await mock.usageFor(rid);
  assert.equal(u.usage.input_tokens, data.usage.prompt_tokens);
  assert.equal(u.usage.output_tokens, data.usage.completion_tokens);
});

test('SDK: streaming chat with include_usage; the final chunk carries the mock\'s usage', T, async () => {
  const rid = h.randomId('sdk-stream');
  const stream = await client.chat.completions.create({
    model: 'fast', messages: MESSAGES, stream: true, stream_options: { include_usage: true },
  }, { headers: { 'X-Request-Id': rid } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);

  assert.ok(chunks.length >= 3, `only ${chunks.length} chunks`);
  assert.equal(h.streamedContent(chunks), h.mockText(8));
  assert.ok(chunks.some((c) => c.choices[0]?.finish_reason === 'stop'), 'finish_reason stop');
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, []);
  assert.ok(last.usage, `final chunk without usage: ${JSON.stringify(last)}`);
  assert.ok(chunks.slice(0, -1).every((c) => !c.usage), 'only the final chunk carries usage');

  const u = await mock.usageFor(rid);
  assert.equal(u.stream, true);
  assert.equal(u.outcome, 'completed');
  assert.equal(last.usage.prompt_tokens, u.usage.input_tokens);
  assert.equal(last.usage.completion_tokens, u.usage.output_tokens);
  assert.equal(last.usage.prompt_tokens, h.mockInputTokens(MESSAGES));
  assert.equal(last.usage.completion_tokens, 8);

  const d = await direct.chat.completions.create({
    model: 'mock-gpt', messages: MESSAGES, stream: true, stream_options: { include_usage: true },
  });
  const dchunks = [];
  for await (const c of d) dchunks.push(c);
  const pick = (u) => ({ p: u.prompt_tokens, c: u.completion_tokens, t: u.total_tokens, cached: u.prompt_tokens_details?.cached_tokens ?? 0 });
  assert.deepEqual(pick(last.usage), pick(dchunks.at(-1).usage));
});

test('SDK: streamed tool call arguments accumulate to {city:"mock",days:42}', T, async () => {
  const stream = await client.chat.completions.create({
    model: 'fast', messages: [{ role: 'user', content: 'weather in mock for 42 days?' }],
    tools: TOOLS, stream: true,
  });
  const calls = new Map(); // index -> {id, type, name, args, fragments}
  let finish = null;
  for await (const c of stream) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.finish_reason) finish = ch.finish_reason;
    for (const tc of ch.delta?.tool_calls ?? []) {
      const cur = calls.get(tc.index) ?? { id: undefined, type: undefined, name: '', args: '', fragments: 0 };
      if (tc.id) cur.id = tc.id;
      if (tc.type) cur.type = tc.type;
      if (tc.function?.name) cur.name += tc.function.name;
      if (tc.function?.arguments) {
        cur.args += tc.function.arguments;
        cur.fragments += 1;
      }
      calls.set(tc.index, cur);
    }
  }
  assert.equal(calls.size, 1, `tool calls: ${JSON.stringify([...calls])}`);
  const call = calls.get(0);
  assert.ok(call, 'tool call index 0');
  assert.equal(call.name, 'get_weather');
  assert.equal(call.type, 'function');
  assert.ok(call.id, 'tool call id');
  assert.deepEqual(JSON.parse(call.args), { city: 'mock', days: 42 });
  assert.ok(call.fragments > 1, `arguments arrived in ${call.fragments} fragment(s), expected several`);
  assert.equal(finish, 'tool_calls');
});

test('SDK: upstream 429 surfaces as OpenAI.RateLimitError', T, async () => {
  await assert.rejects(
    // The provider's Retry-After (1 s) is longer than this request's failover
    // budget (500 ms): no retry, the 429 at once, its Retry-After passed on.
    client.chat.completions.create({ model: 'mock/mock-gpt#status=429,retry_after=1', messages: MESSAGES },
      { headers: { 'x-llmgw-fallback-timeout-ms': '500' } }),
    (err) => {
      assert.ok(err instanceof OpenAI.RateLimitError, `got ${err?.constructor?.name}: ${err?.message}`);
      assert.equal(err.status, 429);
      assert.equal(err.headers.get('retry-after'), '1');
      return true;
    },
  );
});

test('SDK: a stream that breaks upstream surfaces as an APIError', T, async (t) => {
  // A gateway of its own, so that a crash here cannot fail the tests after it.
  const own = await h.startGateway({ mock });
  t.after(() => own.proc.stop());
  const ownClient = gatewayClient(own);
  const stream = await ownClient.chat.completions.create({
    model: 'mock/mock-gpt#drop_after=2', messages: MESSAGES, stream: true,
  });
  const got = [];
  await assert.rejects(
    (async () => { for await (const c of stream) got.push(c); })(),
    (err) => {
      assert.ok(err instanceof OpenAI.APIError, `got ${err?.constructor?.name}: ${err?.message}`);
      return true;
    },
  );
  assert.equal(h.streamedContent(got), h.mockText(2));
});

test('SDK: models.list() shows the route', T, async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.ok(ids.includes('fast'), `models: ${ids.join(', ')}`);
});
