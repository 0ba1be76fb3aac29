// Tool choice in every form, parallel tool use, stop sequences, seeds and
// penalties across formats (docs/canonical.md, "Tool choice, parallel
// tools, stop, seed, penalties, top_k"), through the official SDKs, streamed
// and not: what reached the mock (its recorded body), that an answer came
// back in the client's shape, and the refusals (a 400 naming the client's
// field and the target).

import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] };
const OAI_TOOLS = [
  { type: 'function', function: { name: 'get_weather', parameters: SCHEMA } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object' } } },
];
const ANT_TOOLS = [
  { name: 'get_weather', input_schema: SCHEMA },
  { name: 'get_time', input_schema: { type: 'object' } },
];

let mock;
let gw;

before(async () => {
  h.requireBinaries();
  mock = await h.startMock({ record: true });
  gw = await h.startGateway({ mock, extraProviders: h.driverProviders(mock) });
});

after(async () => {
  await h.stopAll();
});

const oai = () => h.openaiClient(gw);
const ant = () => h.anthropicClient(gw);
const upstream = async (n) => mock.recorded(n);

/** An OpenAI chat request through the SDK: {n, calls, text, finish}. */
async function chat(model, extra, stream) {
  const n = randomBytes(6).toString('hex');
  const req = { model, messages: [{ role: 'user', content: `weather ${n}` }], max_tokens: 64, ...extra };
  if (!stream) {
    const r = await oai().chat.completions.create(req);
    const m = r.choices[0].message;
    return { n, calls: (m.tool_calls ?? []).map((c) => c.function.name), text: m.content ?? '', finish: r.choices[0].finish_reason };
  }
  const calls = new Map();
  let text = '';
  let finish = null;
  for await (const c of await oai().chat.completions.create({ ...req, stream: true })) {
    const c0 = c.choices[0];
    if (!c0) continue;
    finish = c0.finish_reason ?? finish;
    text += c0.delta?.content ?? '';
    for (const tc of c0.delta?.tool_calls ?? []) if (tc.function?.name) calls.set(tc.index, tc.function.name);
  }
  return { n, calls: [...calls.values()], text, finish };
}

/** An Anthropic Messages request through the SDK: {n, calls, text, finish}. */
async function messages(model, extra, stream) {
  const n = randomBytes(6).toString('hex');
  const req = { model, messages: [{ role: 'user', content: `weather ${n}` }], max_tokens: 64, ...extra };
  const m = stream ? await ant().messages.stream(req).finalMessage() : await ant().messages.create(req);
  return {
    n,
    calls: m.content.filter((b) => b.type === 'tool_use').map((b) => b.name),
    text: m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''),
    finish: m.stop_reason,
  };
}

async function refused(p, field, driver) {
  await assert.rejects(p, (e) => {
    assert.equal(e.status, 400, String(e));
    assert.ok(String(e.message).includes(field) || e.param === field, `${field} not named: ${e.message}`);
    if (driver) assert.match(String(e.message), new RegExp(driver, 'i'));
    return true;
  });
}

for (const stream of [false, true]) {
  const how = stream ? 'streamed' : 'whole';

  describe(`tool choice from an OpenAI client (${how})`, () => {
    const cases = [
      ['claude/mock-claude', 'none', (u) => assert.deepEqual(u.tool_choice, { type: 'none' })],
      ['claude/mock-claude', 'required', (u) => assert.equal(u.tool_choice.type, 'any')],
      ['claude/mock-claude', { type: 'function', function: { name: 'get_time' } },
        (u) => assert.deepEqual(u.tool_choice, { type: 'tool', name: 'get_time' })],
      ['gem/mock-gemini', 'none', (u) => assert.equal(u.toolConfig.functionCallingConfig.mode, 'NONE')],
      ['gem/mock-gemini', 'required', (u) => assert.equal(u.toolConfig.functionCallingConfig.mode, 'ANY')],
      ['gem/mock-gemini', { type: 'function', function: { name: 'get_time' } }, (u) => {
        assert.equal(u.toolConfig.functionCallingConfig.mode, 'ANY');
        assert.deepEqual(u.toolConfig.functionCallingConfig.allowedFunctionNames, ['get_time']);
      }],
      ['bed/mock-claude', 'required', (u) => assert.deepEqual(u.toolConfig.toolChoice, { any: {} })],
      ['bed/mock-claude', { type: 'function', function: { name: 'get_time' } },
        (u) => assert.deepEqual(u.toolConfig.toolChoice, { tool: { name: 'get_time' } })],
      ['resp/mock-gpt', 'required', (u) => assert.equal(u.tool_choice, 'required')],
    ];
    for (const [model, tc, check] of cases) {
      test(`${JSON.stringify(tc)} to ${model}`, T, async () => {
        const r = await chat(model, { tools: OAI_TOOLS, tool_choice: tc }, stream);
        check(await upstream(r.n));
        if (tc === 'none') {
          assert.deepEqual(r.calls, []);
          assert.ok(r.text.length > 0);
        } else {
          assert.deepEqual(r.calls, [typeof tc === 'string' ? 'get_weather' : 'get_time']);
          assert.equal(r.finish, 'tool_calls');
        }
      });
    }
    test('refusals: none to bedrock, required and a named tool to ollama', T, async () => {
      await refused(chat('bed/mock-claude', { tools: OAI_TOOLS, tool_choice: 'none' }, stream), 'tool_choice', 'bedrock');
      await refused(chat('olla/mock-llama', { tools: OAI_TOOLS, tool_choice: 'required' }, stream), 'tool_choice', 'ollama');
      await refused(chat('olla/mock-llama', {
        tools: OAI_TOOLS, tool_choice: { type: 'function', function: { name: 'get_time' } },
      }, stream), 'tool_choice', 'ollama');
    });
  });

  describe(`tool choice from an Anthropic client (${how})`, () => {
    const cases = [
      ['mock/mock-gpt', { type: 'none' }, (u) => assert.equal(u.tool_choice, 'none')],
      ['mock/mock-gpt', { type: 'any' }, (u) => assert.equal(u.tool_choice, 'required')],
      ['mock/mock-gpt', { type: 'tool', name: 'get_time' },
        (u) => assert.deepEqual(u.tool_choice, { type: 'function', function: { name: 'get_time' } })],
      ['gem/mock-gemini', { type: 'any' }, (u) => assert.equal(u.toolConfig.functionCallingConfig.mode, 'ANY')],
      ['bed/mock-claude', { type: 'tool', name: 'get_time' },
        (u) => assert.deepEqual(u.toolConfig.toolChoice, { tool: { name: 'get_time' } })],
    ];
    for (const [model, tc, check] of cases) {
      test(`${JSON.stringify(tc)} to ${model}`, T, async () => {
        const r = await messages(model, { tools: ANT_TOOLS, tool_choice: tc }, stream);
        check(await upstream(r.n));
        if (tc.type === 'none') {
          assert.deepEqual(r.calls, []);
          assert.ok(r.text.length > 0);
        } else {
          assert.deepEqual(r.calls, [tc.name ?? 'get_weather']);
          assert.equal(r.finish, 'tool_use');
        }
      });
    }
  });

  describe(`one tool call per turn (${how})`, () => {
    test('OpenAI parallel_tool_calls false → anthropic disable_parallel_tool_use, openai-responses', T, async () => {
      const a = await chat('claude/mock-claude', { tools: OAI_TOOLS, parallel_tool_calls: false }, stream);
      assert.deepEqual((await upstream(a.n)).tool_choice, { type: 'auto', disable_parallel_tool_use: true });
      assert.deepEqual(a.calls, ['get_weather']);
      const r = await chat('resp/mock-gpt', { tools: OAI_TOOLS, parallel_tool_calls: false }, stream);
      assert.equal((await upstream(r.n)).parallel_tool_calls, false);
      assert.deepEqual(r.calls, ['get_weather']);
    });
    test('Anthropic disable_parallel_tool_use → OpenAI parallel_tool_calls false', T, async () => {
      const r = await messages('mock/mock-gpt', {
        tools: ANT_TOOLS, tool_choice: { type: 'auto', disable_parallel_tool_use: true },
      }, stream);
      const u = await upstream(r.n);
      assert.equal(u.parallel_tool_calls, false);
      assert.equal(u.tool_choice, 'auto');
      assert.deepEqual(r.calls, ['get_weather']);
    });
    test('refused where the provider cannot forbid several calls: gemini, bedrock, ollama', T, async () => {
      for (const [m, d] of [['gem/mock-gemini', 'gemini'], ['bed/mock-claude', 'bedrock'], ['olla/mock-llama', 'ollama']]) {
        await refused(chat(m, { tools: OAI_TOOLS, parallel_tool_calls: false }, stream), 'parallel_tool_calls', d);
        await refused(messages(m, {
          tools: ANT_TOOLS, tool_choice: { type: 'auto', disable_parallel_tool_use: true },
        }, stream), 'disable_parallel_tool_use', d);
      }
    });
  });

  describe(`stop sequences, seed, penalties (${how})`, () => {
    test('OpenAI stop → anthropic stop_sequences, gemini stopSequences, bedrock, ollama', T, async () => {
      const checks = [
        ['claude/mock-claude', (u) => assert.deepEqual(u.stop_sequences, ['END', 'STOP'])],
        ['gem/mock-gemini', (u) => assert.deepEqual(u.generationConfig.stopSequences, ['END', 'STOP'])],
        ['bed/mock-claude', (u) => assert.deepEqual(u.inferenceConfig.stopSequences, ['END', 'STOP'])],
        ['olla/mock-llama', (u) => assert.deepEqual(u.options.stop, ['END', 'STOP'])],
      ];
      for (const [m, check] of checks) {
        const r = await chat(m, { stop: ['END', 'STOP'] }, stream);
        check(await upstream(r.n));
        assert.ok(r.text.length > 0);
      }
    });
    test('Anthropic stop_sequences → OpenAI stop; refused by openai-responses', T, async () => {
      const r = await messages('mock/mock-gpt', { stop_sequences: ['END'] }, stream);
      assert.deepEqual((await upstream(r.n)).stop, ['END']);
      assert.ok(r.text.length > 0);
      await refused(messages('resp/mock-gpt', { stop_sequences: ['END'] }, stream), 'stop_sequences', 'Responses');
    });
    test('seed → gemini, ollama; refused by anthropic and bedrock', T, async () => {
      const g = await chat('gem/mock-gemini', { seed: 7 }, stream);
      assert.equal((await upstream(g.n)).generationConfig.seed, 7);
      const o = await chat('olla/mock-llama', { seed: 7 }, stream);
      assert.equal((await upstream(o.n)).options.seed, 7);
      await refused(chat('claude/mock-claude', { seed: 7 }, stream), 'seed', 'anthropic');
      await refused(chat('bed/mock-claude', { seed: 7 }, stream), 'seed', 'bedrock');
    });
    test('presence and frequency penalties → gemini, ollama; refused by anthropic', T, async () => {
      const g = await chat('gem/mock-gemini', { presence_penalty: 0.5, frequency_penalty: 0.25 }, stream);
      const gu = (await upstream(g.n)).generationConfig;
      assert.equal(gu.presencePenalty, 0.5);
      assert.equal(gu.frequencyPenalty, 0.25);
      const o = await chat('olla/mock-llama', { presence_penalty: 0.5, frequency_penalty: 0.25 }, stream);
      const ou = (await upstream(o.n)).options;
      assert.equal(ou.presence_penalty, 0.5);
      assert.equal(ou.frequency_penalty, 0.25);
      await refused(chat('claude/mock-claude', { presence_penalty: 0.5 }, stream), 'presence_penalty', 'anthropic');
    });
  });
}

// Thinking from an earlier turn, with its signature, in a tool loop: carried
// to the targets that need it back (Bedrock's reasoningContent, Responses'
// reasoning item), not sent where the API takes no reasoning back (OpenAI
// chat), and for Gemini the documented thought-signature sentinel on the
// replayed call (docs/canonical.md).
const SIG = Buffer.from('sig-of-turn-1').toString('base64');
function thinkingLoop(n) {
  return {
    tools: ANT_TOOLS,
    thinking: { type: 'enabled', budget_tokens: 1024 },
    max_tokens: 2048,
    messages: [
      { role: 'user', content: `weather ${n}` },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: 'the tool knows', signature: SIG },
          { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } },
        ],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ],
  };
}

for (const stream of [false, true]) {
  describe(`thinking across turns from an Anthropic client (${stream ? 'streamed' : 'whole'})`, () => {
    const cases = [
      ['bed/mock-claude', (u) => {
        const rc = u.messages[1].content.find((b) => b.reasoningContent)?.reasoningContent;
        assert.deepEqual(rc, { reasoningText: { text: 'the tool knows', signature: SIG } });
      }],
      ['resp/mock-gpt', (u) => {
        const it = u.input.find((i) => i.type === 'reasoning');
        assert.equal(it?.encrypted_content, SIG, JSON.stringify(u.input));
      }],
      ['mock/mock-gpt', (u) => {
        assert.ok(!JSON.stringify(u).includes('the tool knows'), 'no reasoning replayed to chat completions');
        assert.equal(u.messages[1].tool_calls[0].function.name, 'get_weather');
      }],
      // A Gemini 3 model refuses a replayed call without a thought signature.
      ['gem/gemini-3-pro-preview', (u) => {
        const fc = u.contents[1].parts.find((p) => p.functionCall);
        assert.equal(fc.functionCall.name, 'get_weather');
        assert.equal(fc.thoughtSignature, 'skip_thought_signature_validator');
        assert.ok(!JSON.stringify(u).includes('the tool knows'));
      }],
    ];
    for (const [model, check] of cases) {
      test(`signed thinking and a tool call, then its result, to ${model}`, T, async () => {
        const n = randomBytes(6).toString('hex');
        const req = { model, ...thinkingLoop(n) };
        const m = stream ? await ant().messages.stream(req).finalMessage() : await ant().messages.create(req);
        check(await upstream(n));
        assert.ok(m.content.some((b) => b.type === 'text' && b.text.length > 0), JSON.stringify(m.content));
      });
    }
  });
}
