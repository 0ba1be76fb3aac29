// Translation fidelity (issue 21): structured output, reasoning, server
// tools and citations across formats, through the official SDKs, streamed
// and not. Each test asserts what reached the mock provider (its recorded
// body) and what the client got back (docs/canonical.md has the rules).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, days: { type: 'integer' }, note: { type: 'string' } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const WANT = { city: 'x', days: 0 }; // the mock's smallest object with the required keys

let mock;
let gw;

before(async () => {
  h.requireBinaries();
  mock = await h.startMock({ record: true });
  const provs = h.driverProviders(mock);
  const claude = provs.find((p) => p.name === 'claude');
  // An anthropic provider that translates even an Anthropic client's request.
  const claudex = { ...claude, name: 'claudex', options: { passthrough: false } };
  gw = await h.startGateway({ mock, extraProviders: [...provs, claudex] });
});

after(async () => {
  await h.stopAll();
});

/** The upstream body (parsed) that carries nonce. */
async function received(nonce) {
  return mock.recorded(nonce);
}

const oai = () => h.openaiClient(gw);
const ant = () => h.anthropicClient(gw);

async function oaiText(req, stream) {
  if (!stream) return (await oai().chat.completions.create(req)).choices[0].message.content;
  let text = '';
  for await (const ch of await oai().chat.completions.create({ ...req, stream: true })) text += ch.choices[0]?.delta?.content ?? '';
  return text;
}

async function antMessage(req, stream) {
  if (!stream) return ant().messages.create(req);
  return ant().messages.stream(req).finalMessage();
}

const antText = (m) => m.content.filter((b) => b.type === 'text').map((b) => b.text).join('');

/** What each driver's upstream body holds for a json_schema format. */
const SCHEMA_AT = {
  anthropic: (up) => up.output_config?.format?.type === 'json_schema' && up.output_config.format.schema,
  bedrock: (up) => up.outputConfig?.textFormat?.type === 'json_schema'
    && JSON.parse(up.outputConfig.textFormat.structure.jsonSchema.schema),
  gemini: (up) => up.generationConfig?.responseMimeType === 'application/json' && up.generationConfig.responseJsonSchema,
  openai: (up) => up.response_format?.type === 'json_schema' && up.response_format.json_schema.schema,
  'openai-responses': (up) => up.text?.format?.type === 'json_schema' && up.text.format.schema,
};

for (const stream of [false, true]) {
  const mode = stream ? 'streamed' : 'whole';

  describe(`structured output (${mode})`, () => {
    for (const [sel, drv] of [['claude/mock-claude', 'anthropic'], ['bed/mock-claude', 'bedrock'], ['gem/mock-gemini', 'gemini']]) {
      test(`OpenAI json_schema → ${drv}`, T, async () => {
        const nonce = h.randomId('js');
        const text = await oaiText({
          model: sel, messages: [{ role: 'user', content: `weather ${nonce}` }],
          response_format: { type: 'json_schema', json_schema: { name: 'weather', schema: SCHEMA, strict: true } },
        }, stream);
        assert.deepEqual(SCHEMA_AT[drv](await received(nonce)), SCHEMA);
        assert.deepEqual(JSON.parse(text), WANT);
      });
    }

    for (const [sel, drv] of [['mock/mock-gpt', 'openai'], ['resp/mock-gpt', 'openai-responses'], ['gem/mock-gemini', 'gemini'], ['bed/mock-claude', 'bedrock'], ['claudex/mock-claude', 'anthropic']]) {
      test(`Anthropic output_config.format → ${drv}`, T, async () => {
        const nonce = h.randomId('oc');
        const m = await antMessage({
          model: sel, max_tokens: 64, messages: [{ role: 'user', content: `weather ${nonce}` }],
          output_config: { format: { type: 'json_schema', schema: SCHEMA } },
        }, stream);
        assert.deepEqual(SCHEMA_AT[drv](await received(nonce)), SCHEMA);
        assert.deepEqual(JSON.parse(antText(m)), WANT);
      });
    }
  });

  describe(`citations (${mode})`, () => {
    test('Anthropic client, translating anthropic provider: citations on the cited text block', T, async () => {
      const nonce = h.randomId('ci');
      const m = await antMessage({ model: 'claudex/mock-claude', max_tokens: 32, messages: [{ role: 'user', content: `[cite] ${nonce}` }] }, stream);
      const cited = m.content.filter((b) => b.type === 'text' && b.citations?.length);
      assert.equal(cited.length, 1, JSON.stringify(m.content));
      assert.equal(cited[0].citations[0].type, 'web_search_result_location');
      assert.equal(cited[0].citations[0].url, 'https://example.com/mock');
      assert.ok(cited[0].text.length > 0);
      const up = await received(nonce);
      assert.equal(up.model, 'mock-claude');
    });

    test('OpenAI client on an anthropic provider: url_citation annotations', T, async () => {
      const nonce = h.randomId('cu');
      const req = { model: 'claude/mock-claude', messages: [{ role: 'user', content: `[cite] ${nonce}` }], max_tokens: 32 };
      let ann;
      let text = '';
      if (!stream) {
        const msg = (await oai().chat.completions.create(req)).choices[0].message;
        ann = msg.annotations;
        text = msg.content;
      } else {
        ann = [];
        for await (const ch of await oai().chat.completions.create({ ...req, stream: true })) {
          text += ch.choices[0]?.delta?.content ?? '';
          ann.push(...(ch.choices[0]?.delta?.annotations ?? []));
        }
      }
      assert.equal(ann.length, 1, JSON.stringify(ann));
      assert.equal(ann[0].type, 'url_citation');
      assert.deepEqual(ann[0].url_citation, { url: 'https://example.com/mock', title: 'Mock source', start_index: 0, end_index: [...text].length });
    });

    test('Responses client on an anthropic provider: url_citation annotations on output_text', T, async () => {
      const nonce = h.randomId('cr');
      const req = { model: 'claude/mock-claude', input: `[cite] ${nonce}`, max_output_tokens: 32 };
      let resp;
      const added = [];
      if (!stream) {
        resp = await oai().responses.create(req);
      } else {
        for await (const e of await oai().responses.create({ ...req, stream: true })) {
          if (e.type === 'response.output_text.annotation.added') added.push(e.annotation);
          if (e.type === 'response.completed') resp = e.response;
        }
      }
      const part = resp.output.find((o) => o.type === 'message').content[0];
      const want = { type: 'url_citation', url: 'https://example.com/mock', title: 'Mock source', start_index: 0, end_index: [...part.text].length };
      assert.deepEqual(part.annotations, [want]);
      if (stream) assert.deepEqual(added, [want]);
    });
  });

  describe(`reasoning across formats (${mode})`, () => {
    test('OpenAI reasoning_effort → Anthropic thinking budget', T, async () => {
      const nonce = h.randomId('re');
      await oaiText({ model: 'claude/mock-claude', messages: [{ role: 'user', content: `think ${nonce}` }], reasoning_effort: 'medium' }, stream);
      assert.deepEqual((await received(nonce)).thinking, { type: 'enabled', budget_tokens: 8192 });
    });

    test('Anthropic thinking budget → OpenAI reasoning_effort', T, async () => {
      const nonce = h.randomId('rb');
      await antMessage({ model: 'mock/mock-gpt', max_tokens: 8000, thinking: { type: 'enabled', budget_tokens: 5000 }, messages: [{ role: 'user', content: `think ${nonce}` }] }, stream);
      assert.equal((await received(nonce)).reasoning_effort, 'medium');
    });

    test('OpenAI reasoning_effort → Gemini thinkingConfig', T, async () => {
      const nonce = h.randomId('rg');
      await oaiText({ model: 'gem/mock-gemini', messages: [{ role: 'user', content: `think ${nonce}` }], reasoning_effort: 'high' }, stream);
      assert.deepEqual((await received(nonce)).generationConfig.thinkingConfig, { thinkingBudget: 24576, includeThoughts: true });
    });

    test('Anthropic output_config.effort → OpenAI reasoning_effort', T, async () => {
      const nonce = h.randomId('ef');
      await antMessage({ model: 'mock/mock-gpt', max_tokens: 64, output_config: { effort: 'low' }, messages: [{ role: 'user', content: `think ${nonce}` }] }, stream);
      assert.equal((await received(nonce)).reasoning_effort, 'low');
    });
  });
}

describe('refusals name the field and the target', () => {
  test('json_object to anthropic: no schema-less JSON mode', T, async () => {
    await assert.rejects(oai().chat.completions.create({
      model: 'claude/mock-claude', messages: [{ role: 'user', content: 'x' }], response_format: { type: 'json_object' },
    }), (e) => e.status === 400 && e.param === 'response_format' && /anthropic/.test(e.message));
  });

  for (const [sel, drv] of [['mock/mock-gpt', 'openai'], ['gem/mock-gemini', 'gemini'], ['claudex/mock-claude', 'anthropic']]) {
    test(`Anthropic server tool on ${drv} (translating)`, T, async () => {
      await assert.rejects(ant().messages.create({
        model: sel, max_tokens: 32, messages: [{ role: 'user', content: 'search' }],
        tools: [{ type: 'web_search_20250305', name: 'web_search', max_uses: 1 }],
      }), (e) => e.status === 400 && /tools\[0\]\.type/.test(e.message) && /web_search_20250305/.test(e.message)
        && /server tools/.test(e.message) && e.message.includes(`driver '${drv}'`));
    });
  }

  test('OpenAI web_search_options on anthropic', T, async () => {
    await assert.rejects(oai().chat.completions.create({
      model: 'claude/mock-claude', messages: [{ role: 'user', content: 'x' }], web_search_options: {},
    }), (e) => e.status === 400 && e.param === 'web_search_options' && /driver 'anthropic'/.test(e.message));
  });
});
