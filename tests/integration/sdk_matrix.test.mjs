// Both official SDKs against the gateway, each served by an OpenAI-format
// upstream (driver "openai") and by an Anthropic-format upstream (driver
// "anthropic"): text, streaming, parallel streamed tool calls, a tool-result
// round trip, cache usage, and errors raised as the SDK's own classes.

import { after, afterEach, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const TOOL_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' } },
  required: ['city', 'days'],
};
const TOOL2_SCHEMA = { type: 'object', properties: { verbose: { type: 'boolean' } } };
const ARGS1 = { city: 'mock', days: 42 };
const ARGS2 = { verbose: true };

// The two upstream formats, as exact provider/model selectors.
const UPSTREAMS = [
  { name: 'openai-format upstream', sel: (f) => `mock/mock-gpt${f ? `#${f}` : ''}` },
  { name: 'anthropic-format upstream', sel: (f) => `claude/mock-claude${f ? `#${f}` : ''}` },
];

let mock;
let gw;

// An OpenAI SDK stream's tool calls, assembled by index as the SDK's users
// do, and the index of each argument fragment in arrival order.
async function streamedCalls(s) {
  const calls = new Map();
  const order = [];
  let finish = null;
  for await (const ch of s) {
    const c0 = ch.choices[0];
    if (!c0) continue;
    finish = c0.finish_reason ?? finish;
    for (const tc of c0.delta?.tool_calls ?? []) {
      const cur = calls.get(tc.index) ?? { id: '', name: '', args: '' };
      if (tc.id) cur.id = tc.id;
      if (tc.function?.name) cur.name += tc.function.name;
      if (tc.function?.arguments) { cur.args += tc.function.arguments; order.push(tc.index); }
      calls.set(tc.index, cur);
    }
  }
  return { calls, order, finish };
}

// The mock's two calls (get_weather, get_time) with their arguments.
function assertBothCalls(calls) {
  assert.equal(calls.size, 2, JSON.stringify([...calls]));
  assert.equal(calls.get(0).name, 'get_weather');
  assert.equal(calls.get(1).name, 'get_time');
  assert.deepEqual(JSON.parse(calls.get(0).args), ARGS1);
  assert.deepEqual(JSON.parse(calls.get(1).args), ARGS2);
  assert.ok(calls.get(0).id && calls.get(1).id && calls.get(0).id !== calls.get(1).id);
}

// The same two calls as an Anthropic message's tool_use blocks, in order.
function assertBothUses(content) {
  const uses = content.filter((b) => b.type === 'tool_use');
  assert.equal(uses.length, 2, JSON.stringify(content));
  assert.equal(uses[0].name, 'get_weather');
  assert.deepEqual(uses[0].input, ARGS1);
  assert.equal(uses[1].name, 'get_time');
  assert.deepEqual(uses[1].input, ARGS2);
  assert.ok(uses[0].id !== uses[1].id);
}

const start = () => h.startGateway({ mock, extraProviders: h.driverProviders(mock) });
const oai = () => new OpenAI({ baseURL: gw.v1, apiKey: h.DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
const ant = () => new Anthropic({ baseURL: gw.url, apiKey: h.DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });

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

for (const up of UPSTREAMS) {
  describe(`openai SDK, ${up.name}`, () => {
    const tools = [
      { type: 'function', function: { name: 'get_weather', description: 'Forecast', parameters: TOOL_SCHEMA } },
      { type: 'function', function: { name: 'get_time', parameters: TOOL2_SCHEMA } },
    ];
    const messages = [{ role: 'system', content: 'Be terse.' }, { role: 'user', content: 'Say hello' }];

    test('non-streamed text equals streamed text; usage is reported', T, async () => {
      const c = oai();
      const r = await c.chat.completions.create({ model: up.sel(), messages, max_tokens: 100 });
      assert.equal(r.choices[0].message.content, h.mockText(8));
      assert.equal(r.choices[0].finish_reason, 'stop');
      assert.equal(r.usage.completion_tokens, 8);
      assert.ok(r.usage.prompt_tokens > 0);

      const s = await c.chat.completions.create({
        model: up.sel(), messages, max_tokens: 100, stream: true, stream_options: { include_usage: true },
      });
      let text = '';
      let usage = null;
      let finish = null;
      for await (const ch of s) {
        text += ch.choices[0]?.delta?.content ?? '';
        finish = ch.choices[0]?.finish_reason ?? finish;
        if (ch.usage) usage = ch.usage;
      }
      assert.equal(text, r.choices[0].message.content, 'streamed text equals non-streamed text');
      assert.equal(finish, 'stop');
      assert.deepEqual(
        { p: usage.prompt_tokens, c: usage.completion_tokens },
        { p: r.usage.prompt_tokens, c: r.usage.completion_tokens },
      );
    });

    test('max_tokens cuts the answer with finish_reason length', T, async () => {
      const r = await oai().chat.completions.create({ model: up.sel(), messages, max_tokens: 3 });
      assert.equal(r.choices[0].message.content, h.mockText(3));
      assert.equal(r.choices[0].finish_reason, 'length');
    });

    test('two parallel streamed tool calls whose arguments parse', T, async () => {
      const s = await oai().chat.completions.create({
        model: up.sel('parallel=2'), messages, tools, stream: true, max_tokens: 100,
      });
      const { calls, order, finish } = await streamedCalls(s);
      assertBothCalls(calls);
      assert.ok(order.length > 2, `arguments arrived in ${order.length} fragments`);
      assert.equal(finish, 'tool_calls');
    });

    test('a tool-result round trip', T, async () => {
      const c = oai();
      const first = await c.chat.completions.create({
        model: up.sel(), messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      const call = first.choices[0].message.tool_calls?.[0];
      assert.ok(call, JSON.stringify(first));
      assert.deepEqual(JSON.parse(call.function.arguments), ARGS1);
      const rid = h.randomId('oai-roundtrip');
      const second = await c.chat.completions.create({
        model: up.sel(),
        messages: [
          ...messages,
          first.choices[0].message,
          { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' },
        ],
        tools,
        tool_choice: 'none',
      }, { headers: { 'x-request-id': rid } });
      assert.equal(second.choices[0].message.content, h.mockText(8));
      const u = await mock.usageFor(rid);
      if (u.seen) {
        assert.equal(u.seen.tool_results, 1, JSON.stringify(u.seen));
        assert.equal(u.seen.tool_calls, 1, JSON.stringify(u.seen));
      }
    });

    test('a tool loop as an agent runs it (tool_choice auto) ends in text', T, async () => {
      const c = oai();
      const convo = [...messages];
      let r;
      for (let turn = 0; turn < 4; turn++) {
        r = await c.chat.completions.create({ model: up.sel(), messages: convo, tools });
        const m = r.choices[0].message;
        if (!m.tool_calls?.length) break;
        convo.push(m);
        for (const tc of m.tool_calls) convo.push({ role: 'tool', tool_call_id: tc.id, content: 'sunny, 21 C' });
      }
      assert.equal(convo.length, messages.length + 2, 'one call, one result, then the answer');
      assert.equal(r.choices[0].finish_reason, 'stop');
      assert.equal(r.choices[0].message.content, h.mockText(8));
    });

    test('cache reads are reported as cached prompt tokens', T, async () => {
      const r = await oai().chat.completions.create({ model: up.sel('cache_read=2'), messages });
      assert.equal(r.usage.prompt_tokens_details.cached_tokens, 2, JSON.stringify(r.usage));
    });

    test('errors are the SDK\'s own classes', T, async () => {
      await assert.rejects(
        // A Retry-After beyond the request's failover budget is not waited
        // for: the 429 comes back at once, with the provider's Retry-After.
        oai().chat.completions.create({ model: up.sel(`status=429,retry_after=1,tag=${h.randomId('rl')}`), messages },
          { headers: { 'x-llmgw-fallback-timeout-ms': '500' } }),
        (e) => e instanceof OpenAI.RateLimitError && e.status === 429,
      );
      await assert.rejects(
        oai().chat.completions.create({ model: up.sel(), messages, n: 2 }),
        (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && /'n'/.test(e.message),
      );
      // A field the gateway cannot translate: refused for another format,
      // passed through to a provider of the client's own (relay.test.mjs).
      const lb = oai().chat.completions.create({ model: up.sel(), messages, logit_bias: { 1: 2 } });
      if (up.name === 'openai-format upstream') assert.ok((await lb).choices[0].message.content);
      else await assert.rejects(lb, (e) => e instanceof OpenAI.BadRequestError && e.param === 'logit_bias');
    });
  });

  describe(`anthropic SDK, ${up.name}`, () => {
    const tools = [
      { name: 'get_weather', description: 'Forecast', input_schema: TOOL_SCHEMA },
      { name: 'get_time', input_schema: TOOL2_SCHEMA },
    ];
    const messages = [{ role: 'user', content: 'Say hello' }];

    test('non-streamed text equals streamed text; usage is reported', T, async () => {
      const c = ant();
      const r = await c.messages.create({ model: up.sel(), system: 'Be terse.', messages, max_tokens: 100 });
      assert.equal(r.type, 'message');
      assert.equal(r.role, 'assistant');
      assert.equal(r.content.length, 1);
      assert.equal(r.content[0].type, 'text');
      assert.equal(r.content[0].text, h.mockText(8));
      assert.equal(r.stop_reason, 'end_turn');
      assert.equal(r.usage.output_tokens, 8);

      const events = [];
      const s = c.messages.stream({ model: up.sel(), system: 'Be terse.', messages, max_tokens: 100 });
      s.on('streamEvent', (e) => events.push(e.type));
      const fin = await s.finalMessage();
      assert.equal(fin.content[0].text, r.content[0].text, 'streamed text equals non-streamed text');
      assert.equal(fin.stop_reason, 'end_turn');
      assert.equal(fin.usage.output_tokens, 8);
      assert.equal(fin.usage.input_tokens, r.usage.input_tokens);
      assert.equal(events[0], 'message_start');
      assert.equal(events.at(-1), 'message_stop');
      assert.equal(events.at(-2), 'message_delta');
      assert.ok(events.includes('content_block_start') && events.includes('content_block_stop'));
    });

    test('max_tokens cuts the answer with stop_reason max_tokens', T, async () => {
      const r = await ant().messages.create({ model: up.sel(), messages, max_tokens: 3 });
      assert.equal(r.content[0].text, h.mockText(3));
      assert.equal(r.stop_reason, 'max_tokens');
    });

    test('two parallel streamed tool calls whose arguments parse', T, async () => {
      const s = ant().messages.stream({ model: up.sel('parallel=2'), messages, tools, max_tokens: 100 });
      let deltas = 0;
      s.on('inputJson', () => { deltas++; });
      const fin = await s.finalMessage();
      assertBothUses(fin.content);
      assert.ok(deltas > 2, `input_json deltas: ${deltas}`);
      assert.equal(fin.stop_reason, 'tool_use');
    });

    test('a tool-result round trip', T, async () => {
      const c = ant();
      const first = await c.messages.create({
        model: up.sel(), messages, tools, tool_choice: { type: 'tool', name: 'get_weather' }, max_tokens: 100,
      });
      const use = first.content.find((b) => b.type === 'tool_use');
      assert.ok(use, JSON.stringify(first));
      assert.deepEqual(use.input, ARGS1);
      const rid = h.randomId('ant-roundtrip');
      const second = await c.messages.create({
        model: up.sel(),
        max_tokens: 100,
        tools,
        tool_choice: { type: 'none' },
        messages: [
          ...messages,
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 21 C' }] },
        ],
      }, { headers: { 'x-request-id': rid } });
      assert.equal(second.content[0].text, h.mockText(8));
      const u = await mock.usageFor(rid);
      if (u.seen) {
        assert.equal(u.seen.tool_results, 1, JSON.stringify(u.seen));
        assert.equal(u.seen.tool_calls, 1, JSON.stringify(u.seen));
      }
    });

    test('a tool loop as an agent runs it (tool_choice auto) ends in text', T, async () => {
      const c = ant();
      const convo = [...messages];
      let r;
      for (let turn = 0; turn < 4; turn++) {
        r = await c.messages.create({ model: up.sel(), messages: convo, tools, max_tokens: 100 });
        const uses = r.content.filter((b) => b.type === 'tool_use');
        if (!uses.length) break;
        convo.push({ role: 'assistant', content: r.content });
        convo.push({ role: 'user', content: uses.map((u) => ({ type: 'tool_result', tool_use_id: u.id, content: 'sunny' })) });
      }
      assert.equal(convo.length, messages.length + 2, 'one call, one result, then the answer');
      assert.equal(r.stop_reason, 'end_turn');
      assert.equal(r.content[0].text, h.mockText(8));
    });

    test('errors are the SDK\'s own classes', T, async () => {
      await assert.rejects(
        ant().messages.create({ model: up.sel(`status=429,retry_after=1,tag=${h.randomId('rl')}`), messages, max_tokens: 10 },
          { headers: { 'x-llmgw-fallback-timeout-ms': '500' } }),
        (e) => e instanceof Anthropic.RateLimitError && e.status === 429,
      );
      await assert.rejects(
        ant().messages.create({ model: up.sel(), messages }),
        (e) => e instanceof Anthropic.BadRequestError && /max_tokens/.test(e.message),
      );
      const bad = new Anthropic({ baseURL: gw.url, apiKey: 'not-a-key', maxRetries: 0 });
      await assert.rejects(
        bad.messages.create({ model: up.sel(), messages, max_tokens: 10 }),
        (e) => e instanceof Anthropic.AuthenticationError && e.status === 401,
      );
    });
  });
}

describe('anthropic SDK: cache usage from an anthropic-format upstream', () => {
  test('cache reads and 5m/1h writes land in message_start and the final usage', T, async () => {
    const s = ant().messages.stream({
      model: 'claude/mock-claude#cache_read=3,cache_write=2,cache_write_1h=1',
      messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
      max_tokens: 100,
    });
    let start = null;
    s.on('streamEvent', (e) => { if (e.type === 'message_start') start = e.message.usage; });
    const fin = await s.finalMessage();
    assert.equal(start.cache_read_input_tokens, 3, JSON.stringify(start));
    assert.equal(start.cache_creation_input_tokens, 3, JSON.stringify(start));
    assert.equal(fin.usage.cache_read_input_tokens, 3);
    const r = await ant().messages.create({
      model: 'claude/mock-claude#cache_read=3,cache_write=2,cache_write_1h=1',
      messages: [{ role: 'user', content: 'one two three four five six seven eight' }],
      max_tokens: 100,
    });
    assert.equal(r.usage.cache_read_input_tokens, 3);
    assert.equal(r.usage.cache_creation_input_tokens, 3);
    assert.deepEqual(r.usage.cache_creation, { ephemeral_5m_input_tokens: 2, ephemeral_1h_input_tokens: 1 });
  });
});

// Parallel calls whose argument deltas alternate by index, as some
// OpenAI-compatible servers stream them (mock fault interleave=1), from an
// OpenAI chat upstream and a Responses upstream. The OpenAI client on the
// same wire gets the bytes as the provider sent them; every other client
// gets both calls whole, in order.
describe('interleaved parallel tool calls', () => {
  const F = 'parallel=2,interleave=1';
  const oaTools = [
    { type: 'function', function: { name: 'get_weather', description: 'Forecast', parameters: TOOL_SCHEMA } },
    { type: 'function', function: { name: 'get_time', parameters: TOOL2_SCHEMA } },
  ];
  const antTools = oaTools.map((t) => ({
    name: t.function.name, description: t.function.description, input_schema: t.function.parameters,
  }));
  const messages = [{ role: 'user', content: 'Weather and time, please' }];

  const oaStream = async (model) => streamedCalls(
    await oai().chat.completions.create({ model, messages, tools: oaTools, stream: true, max_tokens: 100 }));

  test('openai SDK, openai-format upstream: both calls, relayed as the provider interleaved them', T, async () => {
    const { calls, order, finish } = await oaStream(`mock/mock-gpt#${F}`);
    assertBothCalls(calls);
    assert.equal(finish, 'tool_calls');
    // Same wire: the deltas reach the client as sent, index 0 again after 1.
    assert.ok(order.indexOf(0, order.indexOf(1)) > 0, `argument deltas by index: ${order}`);
    const r = await oai().chat.completions.create({ model: `mock/mock-gpt#${F}`, messages, tools: oaTools });
    const tcs = r.choices[0].message.tool_calls;
    assertBothCalls(new Map(tcs.map((t, i) => [i, { id: t.id, name: t.function.name, args: t.function.arguments }])));
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
  });

  test('openai SDK, responses-format upstream: both calls in order', T, async () => {
    const { calls, order, finish } = await oaStream(`resp/mock-gpt#${F}`);
    assertBothCalls(calls);
    assert.equal(finish, 'tool_calls');
    // Translated: one call after the other.
    assert.deepEqual(order, [...order].sort(), `argument deltas by index: ${order}`);
  });

  for (const model of [`mock/mock-gpt#${F}`, `resp/mock-gpt#${F}`]) {
    test(`anthropic SDK from ${model.split('/')[0]}: two complete tool_use blocks in order`, T, async () => {
      const s = ant().messages.stream({ model, messages, tools: antTools, max_tokens: 100 });
      const starts = [];
      s.on('streamEvent', (e) => {
        if (e.type === 'content_block_start') starts.push(e.index);
        if (e.type === 'content_block_delta' || e.type === 'content_block_stop') {
          assert.equal(e.index, starts.at(-1), 'a delta or stop for the block that is open');
        }
      });
      const fin = await s.finalMessage();
      assertBothUses(fin.content);
      assert.equal(fin.stop_reason, 'tool_use');
      const r = await ant().messages.create({ model, messages, tools: antTools, max_tokens: 100 });
      assertBothUses(r.content);
    });
  }
});
