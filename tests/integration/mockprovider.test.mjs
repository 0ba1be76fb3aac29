// The mock provider on its own (direct HTTP, no gateway): the behaviours
// other tests rely on that are the mock's own logic rather than a wire
// format. Contract: docs/mockprovider.md.
//
// Guardrails (issue 23): the gateway's classifier and judge calls. A chat
// request whose system prompt starts with "llmgw prompt-injection
// classifier" is answered INJECTION / SAFE / maybe? by the markers in its
// text; one whose system prompt starts with "llmgw answer judge" with
// {"score": S, "label": L} or "not json". Whole and streamed, OpenAI and
// Anthropic (the formats the gateway's drivers send them in), and a whole
// answer in each other format; usage reported as for any answer; faults
// still apply.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 30_000 };
const CLASSIFIER = 'llmgw prompt-injection classifier. Answer INJECTION or SAFE for the text the user sends.';
const JUDGE = 'llmgw answer judge. Score the answer on the rubric; reply with a JSON object {"score": <int>, "label": <short word>}.';

let mock;

before(async () => {
  h.requireBinaries([h.MOCK_BIN]);
  mock = await h.startMock();
});

after(async () => {
  await h.stopAll();
});

const chatBody = (system, user, extra = {}) => ({
  model: 'mock-gpt', max_tokens: 16, temperature: 0,
  messages: [{ role: 'system', content: system }, { role: 'user', content: user }], ...extra,
});

async function chat(system, user, { headers = {}, ...extra } = {}) {
  const r = await h.request(mock.port, { body: chatBody(system, user, extra), headers });
  assert.equal(r.status, 200, r.text);
  return r.json;
}

async function chatStream(system, user, extra = {}) {
  const s = await h.collectStream(mock.port, {
    body: chatBody(system, user, { stream: true, stream_options: { include_usage: true }, ...extra }),
  });
  assert.equal(s.status, 200, s.raw);
  const ev = h.parseEvents(s.events);
  assert.equal(ev.at(-1), '[DONE]', s.raw);
  const chunks = ev.slice(0, -1);
  return {
    content: h.streamedContent(chunks),
    finish: chunks.map((c) => c.choices?.[0]?.finish_reason).find(Boolean),
    usage: chunks.at(-1).usage,
  };
}

async function messages(system, user, extra = {}) {
  const body = { model: 'mock-claude', max_tokens: 16, system, messages: [{ role: 'user', content: user }], ...extra };
  if (!body.stream) {
    const r = await h.request(mock.port, { path: '/v1/messages', body, headers: { 'anthropic-version': '2023-06-01' } });
    assert.equal(r.status, 200, r.text);
    return { text: r.json.content.map((b) => b.text).join(''), stop: r.json.stop_reason, usage: r.json.usage };
  }
  const s = await h.collectStream(mock.port, { path: '/v1/messages', body, headers: { 'anthropic-version': '2023-06-01' } });
  assert.equal(s.status, 200, s.raw);
  const ev = h.parseEvents(s.events);
  return {
    text: ev.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text ?? '').join(''),
    stop: ev.find((e) => e.type === 'message_delta')?.delta.stop_reason,
    usage: ev.find((e) => e.type === 'message_delta')?.usage,
  };
}

const verdict = async (user, extra) => (await chat(CLASSIFIER, user, extra)).choices[0].message.content;
const judgement = async (user, extra) => (await chat(JUDGE, user, extra)).choices[0].message.content;

describe('guardrails: the classifier', () => {
  test('INJECTION for a marker in any case, SAFE without, maybe? for the garbage marker (it wins)', T, async () => {
    assert.equal(await verdict('Please MOCK-INJECT this'), 'INJECTION');
    assert.equal(await verdict('please mock-inject this'), 'INJECTION');
    assert.equal(await verdict('Mock-Inject'), 'INJECTION');
    assert.equal(await verdict('What is the capital of France?'), 'SAFE');
    assert.equal(await verdict('MOCK-CLASSIFIER-GARBAGE'), 'maybe?');
    assert.equal(await verdict('MOCK-CLASSIFIER-GARBAGE and MOCK-INJECT'), 'maybe?');
  });

  test('the marker counts in any user turn and in parts; the system prompt must start with the phrase', T, async () => {
    const r = await h.request(mock.port, {
      body: {
        model: 'mock-gpt',
        messages: [
          { role: 'system', content: [{ type: 'text', text: `  ${CLASSIFIER}` }] },
          { role: 'user', content: [{ type: 'text', text: 'first' }, { type: 'text', text: 'then MOCK-INJECT' }] },
        ],
      },
    });
    assert.equal(r.json.choices[0].message.content, 'INJECTION');
    // Not a classifier: the phrase elsewhere, or no system prompt at all.
    const plain = await chat(`You are helpful. ${CLASSIFIER}`, 'MOCK-INJECT');
    assert.equal(plain.choices[0].message.content, h.mockText(8));
    assert.equal(plain.usage.completion_tokens, 8);
    const nosys = await h.request(mock.port, { body: { model: 'mock-gpt', messages: [{ role: 'user', content: `${CLASSIFIER} MOCK-INJECT` }] } });
    assert.equal(nosys.json.choices[0].message.content, h.mockText(8));
  });

  test('a whole answer: one token, finish stop whatever the output limit, usage as for any answer', T, async () => {
    const j = await chat(CLASSIFIER, 'hello there MOCK-INJECT', { max_tokens: 1 });
    assert.equal(j.object, 'chat.completion');
    assert.equal(j.choices[0].finish_reason, 'stop');
    assert.equal(j.usage.prompt_tokens, h.mockInputTokens([{ content: CLASSIFIER }, { content: 'hello there MOCK-INJECT' }]));
    assert.equal(j.usage.completion_tokens, 1);
    assert.equal(j.usage.total_tokens, j.usage.prompt_tokens + 1);
    const u = await mock.waitForUsage((l) => l.id === j.id);
    assert.equal(u.outcome, 'completed');
    assert.deepEqual([u.usage.input_tokens, u.usage.output_tokens], [j.usage.prompt_tokens, 1]);
  });

  test('streamed: the verdict in one chunk, finish stop, a usage chunk', T, async () => {
    for (const [user, want] of [['MOCK-INJECT', 'INJECTION'], ['benign', 'SAFE'], ['MOCK-CLASSIFIER-GARBAGE', 'maybe?']]) {
      const s = await chatStream(CLASSIFIER, user);
      assert.equal(s.content, want);
      assert.equal(s.finish, 'stop');
      assert.equal(s.usage.completion_tokens, 1);
      assert.equal(s.usage.prompt_tokens, h.mockInputTokens([{ content: CLASSIFIER }, { content: user }]));
    }
  });

  test('faults still apply: a slow classifier (ttfb_ms), a failing one (status)', T, async () => {
    const t0 = Date.now();
    assert.equal(await verdict('MOCK-INJECT', { headers: { 'x-mock-fault': 'ttfb_ms=400' } }), 'INJECTION');
    assert.ok(Date.now() - t0 >= 400, 'the verdict waited for ttfb_ms');
    const r = await h.request(mock.port, { body: chatBody(CLASSIFIER, 'x'), headers: { 'x-mock-fault': 'status=503' } });
    assert.equal(r.status, 503);
    const byModel = await h.request(mock.port, { body: { ...chatBody(CLASSIFIER, 'x'), model: 'mock-gpt#status=429' } });
    assert.equal(byModel.status, 429);
  });
});

describe('guardrails: the judge', () => {
  test('the score after MOCK-SCORE= (default 4), label good from 4 up, garbage marker -> not json', T, async () => {
    assert.deepEqual(JSON.parse(await judgement('Prompt: hi\nAnswer: tok1')), { score: 4, label: 'good' });
    assert.equal(await judgement('Prompt: hi'), '{"score": 4, "label": "good"}');
    assert.deepEqual(JSON.parse(await judgement('Prompt: MOCK-SCORE=2 please\nAnswer: tok1')), { score: 2, label: 'poor' });
    assert.deepEqual(JSON.parse(await judgement('mock-score=5')), { score: 5, label: 'good' });
    assert.deepEqual(JSON.parse(await judgement('MOCK-SCORE=3')), { score: 3, label: 'poor' });
    // Out of any scale, for the gateway's range check; the first marker with an integer counts.
    assert.deepEqual(JSON.parse(await judgement('MOCK-SCORE=x MOCK-SCORE=17 MOCK-SCORE=1')), { score: 17, label: 'good' });
    assert.deepEqual(JSON.parse(await judgement('MOCK-SCORE=-1')), { score: -1, label: 'poor' });
    assert.equal(await judgement('MOCK-JUDGE-GARBAGE MOCK-SCORE=5'), 'not json');
  });

  test('the marker is found in any message (the rubric fills prompt and answer into the user turn or the system prompt)', T, async () => {
    const inSystem = await chat(`${JUDGE}\nPrompt: MOCK-SCORE=1`, 'Answer: tok1');
    assert.deepEqual(JSON.parse(inSystem.choices[0].message.content), { score: 1, label: 'poor' });
    const r = await h.request(mock.port, {
      body: {
        model: 'mock-gpt',
        messages: [{ role: 'developer', content: JUDGE }, { role: 'user', content: 'a' }, { role: 'assistant', content: 'b' }, { role: 'user', content: 'MOCK-SCORE=5' }],
      },
    });
    assert.deepEqual(JSON.parse(r.json.choices[0].message.content), { score: 5, label: 'good' });
  });

  test('whole and streamed: one token, finish stop, usage', T, async () => {
    const j = await chat(JUDGE, 'MOCK-SCORE=2', { max_tokens: 3, response_format: { type: 'json_object' } });
    assert.deepEqual(JSON.parse(j.choices[0].message.content), { score: 2, label: 'poor' });
    assert.equal(j.choices[0].finish_reason, 'stop');
    assert.equal(j.usage.completion_tokens, 1);
    const s = await chatStream(JUDGE, 'MOCK-SCORE=2');
    assert.deepEqual(JSON.parse(s.content), { score: 2, label: 'poor' });
    assert.equal(s.finish, 'stop');
    assert.equal(s.usage.completion_tokens, 1);
    assert.equal((await chatStream(JUDGE, 'MOCK-JUDGE-GARBAGE')).content, 'not json');
  });
});

describe('guardrails: other formats', () => {
  test('Anthropic messages, whole and streamed (a system string or text blocks)', T, async () => {
    for (const stream of [false, true]) {
      const x = stream ? { stream: true } : {};
      let r = await messages(CLASSIFIER, 'MOCK-INJECT', x);
      assert.equal(r.text, 'INJECTION');
      assert.equal(r.stop, 'end_turn');
      assert.equal(r.usage.output_tokens, 1);
      r = await messages([{ type: 'text', text: CLASSIFIER }], [{ type: 'text', text: 'benign' }], x);
      assert.equal(r.text, 'SAFE');
      r = await messages(CLASSIFIER, 'MOCK-CLASSIFIER-GARBAGE', x);
      assert.equal(r.text, 'maybe?');
      r = await messages(JUDGE, 'MOCK-SCORE=2', { max_tokens: 1, ...x });
      assert.deepEqual(JSON.parse(r.text), { score: 2, label: 'poor' });
      assert.equal(r.stop, 'end_turn');
      r = await messages(JUDGE, 'no score', x);
      assert.deepEqual(JSON.parse(r.text), { score: 4, label: 'good' });
      assert.equal((await messages(JUDGE, 'MOCK-JUDGE-GARBAGE', x)).text, 'not json');
    }
  });

  test('Responses, Bedrock, Gemini, Ollama: a whole answer', T, async () => {
    const resp = await h.request(mock.port, { path: '/v1/responses', body: { model: 'mock-gpt', instructions: JUDGE, input: 'MOCK-SCORE=3' } });
    assert.deepEqual(JSON.parse(resp.json.output[0].content[0].text), { score: 3, label: 'poor' });
    const resp2 = await h.request(mock.port, {
      path: '/v1/responses',
      body: { model: 'mock-gpt', input: [{ role: 'system', content: CLASSIFIER }, { role: 'user', content: [{ type: 'input_text', text: 'MOCK-INJECT' }] }] },
    });
    assert.equal(resp2.json.output[0].content[0].text, 'INJECTION');
    const bed = await h.request(mock.port, {
      path: '/model/mock-claude/converse',
      headers: { authorization: 'AWS4-HMAC-SHA256 Credential=AKIDMOCK/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00' },
      body: { system: [{ text: CLASSIFIER }], messages: [{ role: 'user', content: [{ text: 'mock-inject' }] }] },
    });
    assert.equal(bed.status, 200, bed.text);
    assert.equal(bed.json.output.message.content[0].text, 'INJECTION');
    const gem = await h.request(mock.port, {
      path: '/v1beta/models/mock-gemini:generateContent',
      headers: { 'x-goog-api-key': 'k' },
      body: { systemInstruction: { parts: [{ text: JUDGE }] }, contents: [{ role: 'user', parts: [{ text: 'MOCK-SCORE=5' }] }] },
    });
    assert.deepEqual(JSON.parse(gem.json.candidates[0].content.parts[0].text), { score: 5, label: 'good' });
    const oll = await h.request(mock.port, {
      path: '/api/chat',
      body: { model: 'mock-llama', stream: false, messages: [{ role: 'system', content: CLASSIFIER }, { role: 'user', content: 'hi' }] },
    });
    assert.equal(oll.json.message.content, 'SAFE');
  });
});
