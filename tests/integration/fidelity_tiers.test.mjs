// Service tiers, the end user's identity and log probabilities across
// formats (docs/canonical.md, "Service tiers", "End-user identity", "Log
// probabilities"), through the official SDKs, streamed and not: what
// reached the mock (its recorded body) and what came back (the served
// tier in the client's shape, the mock's logprobs), and the refusals (a
// 400 naming the client's field and the target).

import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
let mock;
let gw;

before(async () => {
  h.requireBinaries();
  mock = await h.startMock({ record: true });
  const translated = {
    name: 'oait', driver: 'openai', base_url: mock.v1, credential_ref: 'env:MOCK_API_KEY',
    headers: {}, enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000,
    options: { passthrough: false },
  };
  gw = await h.startGateway({ mock, extraProviders: [...h.driverProviders(mock), translated] });
});

after(async () => {
  await h.stopAll();
});

const oai = () => h.openaiClient(gw);
const ant = () => h.anthropicClient(gw);
const nonce = () => randomBytes(6).toString('hex');

async function received(n) {
  return mock.recorded(n);
}

async function chat(model, extra, stream) {
  const n = nonce();
  const req = { model, messages: [{ role: 'user', content: `hi ${n}` }], max_tokens: 16, ...extra };
  if (!stream) return { n, ans: await oai().chat.completions.create(req) };
  const chunks = [];
  for await (const c of await oai().chat.completions.create({ ...req, stream: true })) chunks.push(c);
  return { n, chunks };
}

async function messages(model, extra, stream) {
  const n = nonce();
  const req = { model, max_tokens: 16, messages: [{ role: 'user', content: `hi ${n}` }], ...extra };
  if (!stream) return { n, ans: await ant().messages.create(req) };
  const s = ant().messages.stream(req);
  const events = [];
  s.on('streamEvent', (e) => events.push(e));
  return { n, ans: await s.finalMessage(), events };
}

async function responses(model, extra, stream) {
  const n = nonce();
  const req = { model, input: `hi ${n}`, max_output_tokens: 16, ...extra };
  if (!stream) return { n, ans: await oai().responses.create(req) };
  const events = [];
  for await (const e of await oai().responses.create({ ...req, stream: true })) events.push(e);
  return { n, ans: events.find((e) => e.type === 'response.completed').response, events };
}

async function refused(p, field, target) {
  await assert.rejects(p, (e) => {
    assert.equal(e.status, 400, String(e));
    assert.match(String(e.message) + JSON.stringify(e.error ?? {}), new RegExp(field.replace('.', '\\.')));
    if (target) assert.match(String(e.message), new RegExp(target));
    return true;
  });
}

for (const stream of [false, true]) {
  const how = stream ? 'streamed' : 'whole';
  describe(`service tiers (${how})`, () => {
    test('OpenAI chat flex to a translating openai provider: sent as flex, served flex reported', T, async () => {
      const { n, ans, chunks } = await chat('oait/mock-gpt', { service_tier: 'flex' }, stream);
      assert.equal((await received(n)).service_tier, 'flex');
      if (stream) assert.equal(chunks.at(-1).service_tier, 'flex');
      else assert.equal(ans.service_tier, 'flex');
    });
    test('OpenAI chat "default" to bedrock: serviceTier default, served tier reported', T, async () => {
      const { n, ans, chunks } = await chat('bed/mock-claude', { service_tier: 'default' }, stream);
      assert.deepEqual((await received(n)).serviceTier, { type: 'default' });
      if (stream) assert.equal(chunks.at(-1).service_tier, 'default');
      else assert.equal(ans.service_tier, 'default');
    });
    test('OpenAI chat priority to gemini: serviceTier priority, the header\'s tier reported', T, async () => {
      const { n, ans, chunks } = await chat('gem/mock-gemini', { service_tier: 'priority' }, stream);
      assert.equal((await received(n)).serviceTier, 'priority');
      if (stream) assert.ok(chunks.every((c) => c.service_tier === 'priority'), JSON.stringify(chunks.map((c) => c.service_tier)));
      else assert.equal(ans.service_tier, 'priority');
    });
    test('Anthropic standard_only to gemini: serviceTier standard, usage.service_tier standard', T, async () => {
      const r = await messages('gem/mock-gemini', { service_tier: 'standard_only' }, stream);
      assert.equal((await received(r.n)).serviceTier, 'standard');
      assert.equal(r.ans.usage.service_tier, 'standard', JSON.stringify(r.ans.usage));
    });
    test('OpenAI chat "default" to anthropic: standard_only, usage tier back as default', T, async () => {
      const { n, ans, chunks } = await chat('claude/mock-claude', { service_tier: 'default' }, stream);
      assert.equal((await received(n)).service_tier, 'standard_only');
      if (stream) assert.equal(chunks.at(-1).service_tier, 'default');
      else assert.equal(ans.service_tier, 'default');
    });
    test('refusals: flex to anthropic, scale to bedrock, priority to ollama name service_tier', T, async () => {
      await refused(chat('claude/mock-claude', { service_tier: 'flex' }, stream), 'service_tier', 'anthropic');
      await refused(chat('bed/mock-claude', { service_tier: 'scale' }, stream), 'service_tier', 'bedrock');
      await refused(chat('olla/mock-llama', { service_tier: 'priority' }, stream), 'service_tier', 'ollama');
      await refused(chat('oait/mock-gpt', { service_tier: 'fastest' }, stream), 'service_tier');
    });
    test('Anthropic standard_only to openai: default sent, usage.service_tier standard back', T, async () => {
      const { n, ans } = await messages('oait/mock-gpt', { service_tier: 'standard_only' }, stream);
      assert.equal((await received(n)).service_tier, 'default');
      assert.equal(ans.usage.service_tier, 'standard');
    });
    test('Anthropic auto to bedrock: no serviceTier sent', T, async () => {
      const { n } = await messages('bed/mock-claude', { service_tier: 'auto' }, stream);
      assert.equal((await received(n)).serviceTier, undefined);
    });
    test('Responses flex to openai-responses and priority to openai', T, async () => {
      const r1 = await responses('resp/mock-gpt', { service_tier: 'flex' }, stream);
      assert.equal((await received(r1.n)).service_tier, 'flex');
      const r2 = await responses('oait/mock-gpt', { service_tier: 'priority' }, stream);
      assert.equal((await received(r2.n)).service_tier, 'priority');
      assert.equal(r2.ans.service_tier, 'priority');
    });
  });

  describe(`end-user identity (${how})`, () => {
    test('OpenAI safety_identifier and user to openai; safety_identifier to anthropic metadata', T, async () => {
      const a = await chat('oait/mock-gpt', { safety_identifier: 'sid-1', user: 'u-1' }, stream);
      const up = await received(a.n);
      assert.equal(up.safety_identifier, 'sid-1');
      assert.equal(up.user, 'u-1');
      const b = await chat('claude/mock-claude', { safety_identifier: 'sid-2', user: 'u-2' }, stream);
      assert.deepEqual((await received(b.n)).metadata, { user_id: 'sid-2' });
    });
    test('Anthropic metadata.user_id to openai as safety_identifier, to bedrock as requestMetadata', T, async () => {
      const a = await messages('oait/mock-gpt', { metadata: { user_id: 'end-7' } }, stream);
      const up = await received(a.n);
      assert.equal(up.safety_identifier, 'end-7');
      assert.equal(up.user, undefined);
      const b = await messages('bed/mock-claude', { metadata: { user_id: 'end-8' } }, stream);
      assert.deepEqual((await received(b.n)).requestMetadata, { user: 'end-8' });
    });
  });

  describe(`logprobs (${how})`, () => {
    const check = (lp) => {
      assert.ok(lp.length > 0, 'logprobs present');
      assert.equal(lp[0].token, 'tok1');
      assert.equal(lp[0].logprob, -0.1);
      assert.deepEqual(lp[0].bytes, [...Buffer.from('tok1')]);
      assert.equal(lp[0].top_logprobs.length, 2);
      assert.equal(lp[0].top_logprobs[0].token, 'alt1');
    };
    for (const model of ['oait/mock-gpt', 'gem/mock-gemini']) {
      test(`OpenAI chat logprobs + top_logprobs 2 to ${model}`, T, async () => {
        const { n, ans, chunks } = await chat(model, { logprobs: true, top_logprobs: 2 }, stream);
        const up = await received(n);
        if (model.startsWith('gem')) {
          assert.equal(up.generationConfig.responseLogprobs, true);
          assert.equal(up.generationConfig.logprobs, 2);
        } else {
          assert.equal(up.logprobs, true);
          assert.equal(up.top_logprobs, 2);
        }
        const lp = stream ? chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []) : ans.choices[0].logprobs.content;
        check(lp);
      });
    }
    test('Responses top_logprobs + include to openai: output_text logprobs', T, async () => {
      const { n, ans } = await responses('oait/mock-gpt', { top_logprobs: 2, include: ['message.output_text.logprobs'] }, stream);
      assert.equal((await received(n)).top_logprobs, 2);
      check(ans.output.find((o) => o.type === 'message').content[0].logprobs);
    });
    test('OpenAI chat logprobs to openai-responses: top_logprobs + include, the text\'s logprobs back', T, async () => {
      const { n, ans, chunks } = await chat('resp/mock-gpt', { logprobs: true, top_logprobs: 2 }, stream);
      const up = await received(n);
      assert.equal(up.top_logprobs, 2);
      assert.deepEqual(up.include, ['message.output_text.logprobs']);
      check(stream ? chunks.flatMap((c) => c.choices[0]?.logprobs?.content ?? []) : ans.choices[0].logprobs.content);
    });
    test('Responses top_logprobs + include to openai-responses: output_text logprobs', T, async () => {
      const { n, ans } = await responses('resp/mock-gpt', { top_logprobs: 2, include: ['message.output_text.logprobs'] }, stream);
      assert.equal((await received(n)).top_logprobs, 2);
      check(ans.output.find((o) => o.type === 'message').content[0].logprobs);
    });
    test('refusals: logprobs to anthropic, bedrock, ollama name the field', T, async () => {
      for (const [m, d] of [['claude/mock-claude', 'anthropic'], ['bed/mock-claude', 'bedrock'], ['olla/mock-llama', 'ollama']])
        await refused(chat(m, { logprobs: true }, stream), 'logprobs', d);
    });
  });
}
