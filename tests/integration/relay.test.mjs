// The same-protocol pass-through (docs/relay.md): an OpenAI chat client and
// an `openai` provider. What the canonical model cannot carry (fields and
// content parts newer than the gateway, or only OpenAI's) reaches the
// provider byte for byte as the client wrote it: the mock records every
// body it receives, and each test compares it with the client's body with
// only the gateway's own edits applied (the model, stream_options for the
// ledger's usage). The answer reaches the client whole, streamed and not,
// with its usage counted. A translation refuses such a field, so a mixed
// chain skips that candidate with the reason, and a provider that asks for
// translation (options.passthrough false) gets the canonical request.

import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const PDF = Buffer.from('%PDF-1.4\n1 0 obj <<>> endobj\ntrailer <<>>\n%%EOF\n').toString('base64');
const WAV = Buffer.from('RIFF$\0\0\0WAVEfmt ').toString('base64');

let mock;
let gw;
let recordPath;

before(async () => {
  h.requireBinaries();
  recordPath = path.join(h.makeTmpDir(), 'bodies.jsonl');
  mock = await h.startMock({ args: ['--record-bodies', recordPath] });
  const claude = h.driverProviders(mock).find((p) => p.name === 'claude');
  const translated = {
    name: 'translated', driver: 'openai', base_url: mock.v1, credential_ref: 'env:MOCK_API_KEY',
    headers: {}, enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000,
    options: { passthrough: false },
  };
  gw = await h.startGateway({
    mock,
    extraProviders: [claude, translated],
    extraRoutes: [
      { name: 'mixed', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'claude', model: 'mock-claude' }, { provider: 'mock', model: 'mock-gpt' }] },
      { name: 'claude-only', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'claude', model: 'mock-claude' }] },
      { name: 'translated', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'translated', model: 'mock-gpt' }] },
    ],
  });
});

after(async () => {
  await h.stopAll();
});

/** The body the mock received whose text holds nonce (there is exactly one). */
async function received(nonce) {
  return h.recorded(recordPath, nonce);
}

// A request body as raw text, so that its bytes (number spellings, escapes,
// member order) are the client's own. extra: the members after messages.
function body(selector, nonce, extra, { stream = false } = {}) {
  const msgs = `[{"role":"user","content":"say hi \\u00e9 ${nonce}"}]`;
  return `{"model":${JSON.stringify(selector)},"messages":${msgs}${stream ? ',"stream":true' : ''}${extra ? `,${extra}` : ''}}`;
}

function messagesWith(part, nonce) {
  return `[{"role":"user","content":[{"type":"text","text":"read this ${nonce}"},${part}]}]`;
}

// The requests a new user found refused, though an OpenAI provider takes
// them: [name, extra members, messages (default: plain text)].
const CASES = [
  ['verbosity', '"verbosity":"low"'],
  ['service_tier', '"service_tier":"flex"'],
  ['logprobs with top_logprobs', '"logprobs":true,"top_logprobs":2'],
  ['prediction', '"prediction":{"type":"content","content":"hi there"}'],
  ['web_search_options', '"web_search_options":{"search_context_size":"low"}'],
  ['a field newer than the gateway', '"some_new_param":1,"temperature":1.0,"top_p":1e-1'],
  ['a file part (a PDF as file_data)', null, `{"type":"file","file":{"filename":"a.pdf","file_data":"data:application/pdf;base64,${PDF}"}}`],
  ['an input_audio part', null, `{"type":"input_audio","input_audio":{"data":"${WAV}","format":"wav"}}`],
];

function clientBody(c, nonce, stream) {
  const [, extra, part] = c;
  if (!part) return body('fast', nonce, extra, { stream });
  return `{"model":"fast","messages":${messagesWith(part, nonce)}${stream ? ',"stream":true' : ''}}`;
}

// What the provider must get: the client's bytes, but the model (the
// route's target) and, streamed, the usage the ledger needs.
function expectedUpstream(sent, stream) {
  let e = sent.replace('{"model":"fast"', '{"model":"mock-gpt"');
  if (stream) e = `${e.slice(0, -1)},"stream_options":{"include_usage":true}}`;
  return e;
}

describe('the same-protocol pass-through', () => {
  for (const c of CASES) {
    test(`${c[0]}: reaches the provider byte for byte, and the answer reaches the client whole`, T, async () => {
      const nonce = randomBytes(6).toString('hex');
      const sent = clientBody(c, nonce, false);
      const r = await h.request(gw.port, { body: sent, headers: { ...h.AUTH, 'content-type': 'application/json' } });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-llmgw-provider'], 'mock');
      assert.equal(r.json.object, 'chat.completion');
      assert.ok(r.json.choices[0].message.content.length > 0, r.text);
      assert.ok(r.json.usage.completion_tokens > 0, r.text);
      assert.equal((await received(nonce)).body, expectedUpstream(sent, false));

      const n2 = randomBytes(6).toString('hex');
      const sent2 = clientBody(c, n2, true);
      const s = await h.collectStream(gw.port, { body: sent2, headers: { ...h.AUTH, 'content-type': 'application/json' } });
      assert.equal(s.status, 200);
      assert.ok(s.complete, s.raw);
      assert.equal(s.events.at(-1), '[DONE]', s.raw);
      const chunks = s.events.slice(0, -1).map((e) => JSON.parse(e));
      const text = chunks.map((k) => k.choices?.[0]?.delta?.content ?? '').join('');
      assert.ok(text.length > 0, s.raw);
      // The client did not ask for usage: the chunk the gateway asked for stays with the gateway.
      assert.ok(chunks.every((k) => !k.usage), s.raw);
      assert.equal((await received(n2)).body, expectedUpstream(sent2, true));
    });
  }

  test('a streamed answer with include_usage: the usage chunk carries the bill; the upstream got the client\'s own stream_options', T, async () => {
    const nonce = randomBytes(6).toString('hex');
    const sent = body('fast', nonce, '"stream_options":{"include_usage":true,"some_future_option":7}', { stream: true });
    const s = await h.collectStream(gw.port, { body: sent, headers: { ...h.AUTH, 'content-type': 'application/json' } });
    assert.equal(s.status, 200);
    const chunks = s.events.slice(0, -1).map((e) => JSON.parse(e));
    const usage = chunks.filter((k) => k.usage);
    assert.equal(usage.length, 1, s.raw);
    assert.deepEqual(usage[0].choices, []);
    assert.ok(usage[0].usage.completion_tokens > 0);
    assert.equal(usage[0].llmgw.currency, 'USD');
    assert.ok('cost_picodollars' in usage[0].llmgw);
    // include_usage was already true: the body went up untouched but for the model.
    assert.equal((await received(nonce)).body, sent.replace('{"model":"fast"', '{"model":"mock-gpt"'));
  });

  test('the usage a relayed answer reports is the one counted (access log)', T, async () => {
    const nonce = randomBytes(6).toString('hex');
    const rid = `relay-${nonce}`;
    const r = await h.request(gw.port, {
      body: body('fast', nonce, '"some_new_param":true'),
      headers: { ...h.AUTH, 'content-type': 'application/json', 'x-request-id': rid },
    });
    assert.equal(r.status, 200, r.text);
    const line = await gw.accessLogFor(rid);
    assert.equal(line.tokens.output, r.json.usage.completion_tokens);
    assert.equal(line.tokens.input + line.tokens.cache_read, r.json.usage.prompt_tokens);
  });

  test('a mixed chain: the anthropic candidate cannot carry the field and is skipped with the reason; the openai one serves', T, async () => {
    const nonce = randomBytes(6).toString('hex');
    const r = await h.request(gw.port, { body: body('mixed', nonce, '"some_new_param":1'), headers: { ...h.AUTH, 'content-type': 'application/json' } });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'mock');
    assert.equal((await received(nonce)).body, body('mock-gpt', nonce, '"some_new_param":1'));
  });

  test('a relayed answer echoed back in the next turn still translates (a conversation can fail over)', T, async () => {
    const first = await h.request(gw.port, { body: body('fast', 'turn1', null), headers: { ...h.AUTH, 'content-type': 'application/json' } });
    assert.equal(first.status, 200, first.text);
    const echoed = first.json.choices[0].message; // the provider's own members: refusal, annotations
    assert.ok('annotations' in echoed || 'refusal' in echoed, first.text);
    const r = await h.request(gw.port, {
      body: { model: 'claude-only', messages: [{ role: 'user', content: 'hi' }, echoed, { role: 'user', content: 'and then?' }] },
      headers: h.AUTH,
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers['x-llmgw-provider'], 'claude');
  });

  test('a chain of translations only: a 400 naming the field, and nothing sent', T, async () => {
    for (const route of ['claude-only', 'translated']) {
      const nonce = randomBytes(6).toString('hex');
      const r = await h.request(gw.port, { body: body(route, nonce, '"some_new_param":1'), headers: { ...h.AUTH, 'content-type': 'application/json' } });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.param, 'some_new_param', r.text);
      assert.match(r.json.error.message, /some_new_param/);
      await h.sleep(100);
      assert.ok(!fs.readFileSync(recordPath, 'utf8').includes(nonce), `${route}: a body reached the provider`);
    }
  });

  test('an error event mid-stream is still the gateway\'s in-band error and [DONE]', T, async () => {
    const s = await h.collectStream(gw.port, {
      body: body('mock/mock-gpt#malformed=3', 'x', null, { stream: true }),
      headers: { ...h.AUTH, 'content-type': 'application/json' },
    });
    assert.equal(s.status, 200);
    assert.equal(s.events.at(-1), '[DONE]', s.raw);
    const err = JSON.parse(s.events.at(-2));
    assert.ok(err.error, s.raw);
    // What came before it is the provider's own chunks, relayed.
    assert.ok(s.events.slice(0, -2).every((e) => JSON.parse(e).id?.startsWith('chatcmpl-mock-')), s.raw);
  });
});

// Anthropic Messages to an `anthropic` provider: the same guarantee.
const ANTHROPIC_CASES = [
  ['context_management', '"context_management":{"edits":[{"type":"clear_tool_uses_20250919"}]}'],
  ['mcp_servers', '"mcp_servers":[{"type":"url","url":"https://mcp.example.invalid/sse","name":"example"}]'],
  ['a server tool (web_search_20250305)', '"tools":[{"type":"web_search_20250305","name":"web_search","max_uses":2}]'],
  ['a document block (a base64 PDF)', null, `{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"${PDF}"}}`],
];

function anthropicBody(c, nonce, stream) {
  const [, extra, block] = c;
  const content = block ? `[{"type":"text","text":"read this ${nonce}"},${block}]` : `"say hi \\u00e9 ${nonce}"`;
  return `{"model":"claude-only","max_tokens":64,"messages":[{"role":"user","content":${content}}]${stream ? ',"stream":true' : ''}${extra ? `,${extra}` : ''}}`;
}

describe('the same-protocol pass-through: Anthropic', () => {
  const post = (b) => h.request(gw.port, { path: '/v1/messages', body: b, headers: { ...h.AUTH, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' } });
  for (const c of ANTHROPIC_CASES) {
    test(`${c[0]}: reaches the provider byte for byte, and the answer reaches the client whole`, T, async () => {
      const nonce = randomBytes(6).toString('hex');
      const sent = anthropicBody(c, nonce, false);
      const r = await post(sent);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers['x-llmgw-provider'], 'claude');
      assert.equal(r.json.type, 'message');
      assert.ok(r.json.content.some((b) => b.type === 'text' && b.text.length > 0), r.text);
      assert.ok(r.json.usage.output_tokens > 0);
      assert.equal((await received(nonce)).body, sent.replace('"model":"claude-only"', '"model":"mock-claude"'));

      const n2 = randomBytes(6).toString('hex');
      const sent2 = anthropicBody(c, n2, true);
      const s = await h.collectStream(gw.port, { path: '/v1/messages', body: sent2, headers: { ...h.AUTH, 'content-type': 'application/json' } });
      assert.equal(s.status, 200);
      assert.ok(s.complete, s.raw);
      const evs = s.events.map((e) => JSON.parse(e));
      assert.equal(evs[0].type, 'message_start', s.raw);
      assert.equal(evs.at(-1).type, 'message_stop', s.raw);
      const delta = evs.find((e) => e.type === 'message_delta');
      assert.ok(delta.usage.output_tokens > 0, s.raw);
      assert.equal(delta.llmgw.currency, 'USD', s.raw);
      const text = evs.filter((e) => e.type === 'content_block_delta').map((e) => e.delta.text ?? '').join('');
      assert.ok(text.length > 0, s.raw);
      assert.equal((await received(n2)).body, sent2.replace('"model":"claude-only"', '"model":"mock-claude"'));
    });
  }

  test('a chain of OpenAI-format targets only: the Anthropic-only field is refused with a 400 naming it', T, async () => {
    const nonce = randomBytes(6).toString('hex');
    const r = await post(`{"model":"fast","max_tokens":64,"messages":[{"role":"user","content":"hi ${nonce}"}],"mcp_servers":[]}`);
    assert.equal(r.status, 400, r.text);
    assert.match(r.text, /mcp_servers/);
  });
});
