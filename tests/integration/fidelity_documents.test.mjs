// Documents and audio input across formats (issue 21; docs/canonical.md,
// "Documents and audio"): through the official SDKs, streamed and not, each
// mapping is checked in the body the mock recorded upstream (the exact
// base64 and media type in the target's own block) and in the answer the
// client got; each refusal is a 400 naming the target and the format.

import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { PDF, WAV, PDF_URL, TEXT, mediaPart } from './conformance/documents.mjs';

const T = { timeout: 60_000 };
const PDF_DATA_URL = `data:application/pdf;base64,${PDF}`;

// Exact provider/model selectors of every driver against the mock.
const TARGETS = {
  anthropic: 'claude/mock-claude',
  'openai-responses': 'resp/mock-gpt',
  gemini: 'gem/mock-gemini',
  ollama: 'olla/mock-llama',
  bedrock: 'bed/mock-claude',
  openai: 'mock/mock-gpt',
};

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
const nonceOf = () => randomBytes(6).toString('hex');
const opts = (nonce) => ({ headers: { 'x-request-id': `doc-${nonce}` } });

/** The upstream body (parsed) the mock received whose text holds nonce;
 * the mock's own reading of it (its usage log) counts the one file. */
async function upstream(nonce) {
  const seen = (await mock.usageFor(`doc-${nonce}`)).seen;
  assert.equal(seen.files, 1, JSON.stringify(seen));
  return mock.recorded(nonce);
}

async function nothingSent(nonce) {
  await h.sleep(100);
  assert.ok(!fs.existsSync(mock.recordPath) || !fs.readFileSync(mock.recordPath, 'utf8').includes(nonce), 'a body reached the provider');
}

// --------------------------------------------------------------- clients

async function openaiChat(model, part, stream) {
  const nonce = nonceOf();
  const req = { model, max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, part] }] };
  if (!stream) {
    const r = await oai().chat.completions.create(req, opts(nonce));
    assert.ok(r.choices[0].message.content.length > 0, JSON.stringify(r));
    assert.equal(r.choices[0].finish_reason, 'stop');
    return nonce;
  }
  const s = await oai().chat.completions.create({ ...req, stream: true }, opts(nonce));
  let text = '';
  let finish = null;
  for await (const ch of s) {
    text += ch.choices[0]?.delta?.content ?? '';
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  assert.ok(text.length > 0);
  assert.equal(finish, 'stop');
  return nonce;
}

async function anthropicMsg(model, block, stream) {
  const nonce = nonceOf();
  const req = { model, max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, block] }] };
  if (!stream) {
    const r = await ant().messages.create(req, opts(nonce));
    assert.ok(r.content.some((b) => b.type === 'text' && b.text.length > 0), JSON.stringify(r));
    assert.equal(r.stop_reason, 'end_turn');
    return nonce;
  }
  const m = await ant().messages.stream(req, opts(nonce)).finalMessage();
  assert.ok(m.content.some((b) => b.type === 'text' && b.text.length > 0), JSON.stringify(m));
  assert.equal(m.stop_reason, 'end_turn');
  return nonce;
}

async function responsesCall(model, part, stream) {
  const nonce = nonceOf();
  const req = { model, max_output_tokens: 64, input: [{ role: 'user', content: [{ type: 'input_text', text: `read this ${nonce}` }, part] }] };
  if (!stream) {
    const r = await oai().responses.create(req, opts(nonce));
    assert.ok(r.output_text.length > 0, JSON.stringify(r));
    assert.equal(r.status, 'completed');
    return nonce;
  }
  const s = await oai().responses.create({ ...req, stream: true }, opts(nonce));
  let text = '';
  let done = null;
  for await (const ev of s) {
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.ok(text.length > 0);
  assert.equal(done?.status, 'completed');
  return nonce;
}

/** A call expected to be refused: the SDK's 400, whose message names what
 * it must (the target, the format or the field). */
async function refused(call, ...patterns) {
  const nonce = nonceOf();
  await assert.rejects(call(nonce), (e) => {
    assert.equal(e.status, 400, String(e));
    for (const p of patterns) assert.match(e.message, p);
    return true;
  });
  await nothingSent(nonce);
}

const oaiRefused = (model, part) => (nonce) => oai().chat.completions.create({
  model, max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, part] }],
});
const antRefused = (model, block) => (nonce) => ant().messages.create({
  model, max_tokens: 64, messages: [{ role: 'user', content: [{ type: 'text', text: `read this ${nonce}` }, block] }],
});

const FILE_PART = { type: 'file', file: { filename: 'paper.pdf', file_data: PDF_DATA_URL } };
const AUDIO_PART = { type: 'input_audio', input_audio: { data: WAV, format: 'wav' } };
const DOC_B64 = { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF } };
const DOC_URL = { type: 'document', source: { type: 'url', url: PDF_URL } };
const DOC_TEXT = { type: 'document', source: { type: 'text', media_type: 'text/plain', data: TEXT } };
const b64 = (s) => Buffer.from(s).toString('base64');

// ------------------------------------------------------ OpenAI chat client

describe('OpenAI chat client: a PDF file part', () => {
  const expect = {
    anthropic: (p) => {
      assert.deepEqual(p.source, { type: 'base64', media_type: 'application/pdf', data: PDF });
      assert.equal(p.title, 'paper.pdf'); // the file name is the document's title
    },
    gemini: (p) => assert.deepEqual(p, { inlineData: { mimeType: 'application/pdf', data: PDF } }),
    bedrock: (d) => assert.deepEqual(d, { format: 'pdf', name: 'paper', source: { bytes: PDF } }),
    'openai-responses': (p) => assert.deepEqual(p, { type: 'input_file', filename: 'paper.pdf', file_data: PDF_DATA_URL }),
  };
  for (const [driver, check] of Object.entries(expect)) {
    for (const stream of [false, true]) {
      test(`→ ${driver}${stream ? ', streamed' : ''}: mapped`, T, async () => {
        const nonce = await openaiChat(TARGETS[driver], FILE_PART, stream);
        check(mediaPart(driver, await upstream(nonce)));
      });
    }
  }

  test('→ openai: passed through as written', T, async () => {
    const nonce = await openaiChat(TARGETS.openai, FILE_PART, false);
    assert.deepEqual(mediaPart('openai', await upstream(nonce)), FILE_PART);
  });

  test('→ ollama: refused naming the target', T, async () => {
    await refused(oaiRefused(TARGETS.ollama, FILE_PART), /ollama/, /document \(application\/pdf\)/);
  });

  test('a file_id cannot be translated: refused naming it; an OpenAI provider still gets it', T, async () => {
    const part = { type: 'file', file: { file_id: 'file-abc123' } };
    await refused(oaiRefused(TARGETS.anthropic, part), /file_id/);
    const nonce = await openaiChat(TARGETS.openai, part, false);
    assert.deepEqual(mediaPart('openai', await upstream(nonce)), part);
  });

  test('a text/plain file to anthropic becomes a text source', T, async () => {
    const part = { type: 'file', file: { filename: 'notes.txt', file_data: `data:text/plain;base64,${b64(TEXT)}` } };
    const nonce = await openaiChat(TARGETS.anthropic, part, false);
    const p = mediaPart('anthropic', await upstream(nonce));
    assert.deepEqual(p.source, { type: 'text', media_type: 'text/plain', data: TEXT });
  });

  test('a document type Bedrock does not take is refused naming the format', T, async () => {
    const part = { type: 'file', file: { filename: 'a.bin', file_data: `data:application/octet-stream;base64,${PDF}` } };
    await refused(oaiRefused(TARGETS.bedrock, part), /bedrock/, /application\/octet-stream/);
  });
});

describe('OpenAI chat client: input_audio (wav)', () => {
  for (const stream of [false, true]) {
    test(`→ gemini${stream ? ', streamed' : ''}: inline audio`, T, async () => {
      const nonce = await openaiChat(TARGETS.gemini, AUDIO_PART, stream);
      assert.deepEqual(mediaPart('gemini', await upstream(nonce)), { inlineData: { mimeType: 'audio/wav', data: WAV } });
    });
  }
  for (const driver of ['anthropic', 'bedrock', 'ollama', 'openai-responses']) {
    test(`→ ${driver}: refused naming the target`, T, async () => {
      await refused(oaiRefused(TARGETS[driver], AUDIO_PART), new RegExp(`${driver} provider`), /audio input \(audio\/wav\)/);
    });
  }
});

// ------------------------------------------------------- Anthropic client

describe('Anthropic client: document blocks', () => {
  const cases = [
    // [source, driver, check of the mapped part]
    ['base64', DOC_B64, 'openai', (p) => assert.deepEqual(p, { type: 'file', file: { file_data: PDF_DATA_URL, filename: 'document.pdf' } })],
    ['base64', DOC_B64, 'gemini', (p) => assert.deepEqual(p, { inlineData: { mimeType: 'application/pdf', data: PDF } })],
    ['base64', DOC_B64, 'bedrock', (d) => assert.deepEqual(d, { format: 'pdf', name: 'document', source: { bytes: PDF } })],
    ['base64', DOC_B64, 'openai-responses', (p) => assert.deepEqual(p, { type: 'input_file', filename: 'document.pdf', file_data: PDF_DATA_URL })],
    ['url', DOC_URL, 'gemini', (p) => assert.deepEqual(p, { fileData: { mimeType: 'application/pdf', fileUri: PDF_URL } })],
    ['url', DOC_URL, 'openai-responses', (p) => assert.deepEqual(p, { type: 'input_file', file_url: PDF_URL })],
    ['text', DOC_TEXT, 'gemini', (p) => assert.deepEqual(p, { inlineData: { mimeType: 'text/plain', data: b64(TEXT) } })],
    ['text', DOC_TEXT, 'bedrock', (d) => assert.deepEqual(d, { format: 'txt', name: 'document', source: { text: TEXT } })],
  ];
  for (const [src, block, driver, check] of cases) {
    for (const stream of [false, true]) {
      test(`${src} source → ${driver}${stream ? ', streamed' : ''}: mapped`, T, async () => {
        const nonce = await anthropicMsg(TARGETS[driver], block, stream);
        check(mediaPart(driver, await upstream(nonce)));
      });
    }
  }

  const refusals = [
    ['url', DOC_URL, 'openai', /openai provider/, /by URL/],
    ['text', DOC_TEXT, 'openai', /openai provider/, /\(text\)/],
    ['url', DOC_URL, 'bedrock', /bedrock provider/, /by URL/],
    ['text', DOC_TEXT, 'openai-responses', /openai-responses provider/, /\(text\)/],
    ['base64', DOC_B64, 'ollama', /ollama provider/, /document/],
    ['url', DOC_URL, 'ollama', /ollama provider/, /document/],
  ];
  for (const [src, block, driver, ...patterns] of refusals) {
    test(`${src} source → ${driver}: refused naming the target and the format`, T, async () => {
      await refused(antRefused(TARGETS[driver], block), ...patterns);
    });
  }

  test('title, context and citations → bedrock: name, context and citations.enabled', T, async () => {
    const block = { ...DOC_TEXT, title: 'Sky report (v2).txt', context: 'from the weather desk', citations: { enabled: true } };
    const nonce = await anthropicMsg(TARGETS.bedrock, block, false);
    assert.deepEqual(mediaPart('bedrock', await upstream(nonce)), {
      format: 'txt', name: 'Sky report (v2)-txt', source: { text: TEXT },
      context: 'from the weather desk', citations: { enabled: true },
    });
  });

  test('a title → openai: the file name', T, async () => {
    const nonce = await anthropicMsg(TARGETS.openai, { ...DOC_B64, title: 'Annual report' }, true);
    assert.equal(mediaPart('openai', await upstream(nonce)).file.filename, 'Annual report.pdf');
  });

  test('a document\'s context, citations or title where the target has no such field: refused naming it', T, async () => {
    await refused(antRefused(TARGETS.openai, { ...DOC_B64, context: 'c' }), /'context'/, /openai provider/);
    await refused(antRefused(TARGETS['openai-responses'], { ...DOC_B64, citations: { enabled: true } }), /'citations'/, /openai-responses provider/);
    await refused(antRefused(TARGETS.gemini, { ...DOC_B64, title: 'T' }), /'title'/, /gemini provider/);
    await refused(antRefused(TARGETS.gemini, { ...DOC_TEXT, citations: { enabled: true } }), /'citations'/, /gemini provider/);
  });

  test('a content source stays the Anthropic provider\'s: refused elsewhere, passed through to anthropic', T, async () => {
    const block = { type: 'document', source: { type: 'content', content: [{ type: 'text', text: 'chunk one' }] } };
    await refused(antRefused(TARGETS.gemini, block), /source/);
    const nonce = await anthropicMsg(TARGETS.anthropic, block, false);
    assert.deepEqual(mediaPart('anthropic', await upstream(nonce)), block);
  });
});

// ------------------------------------------------------- Responses client

describe('Responses client: input_file', () => {
  const FILE = { type: 'input_file', filename: 'paper.pdf', file_data: PDF_DATA_URL };
  const cases = [
    [FILE, 'anthropic', (p) => assert.deepEqual(p, { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF }, title: 'paper.pdf' })],
    [FILE, 'gemini', (p) => assert.deepEqual(p, { inlineData: { mimeType: 'application/pdf', data: PDF } })],
    [FILE, 'bedrock', (d) => assert.deepEqual(d, { format: 'pdf', name: 'paper', source: { bytes: PDF } })],
    [FILE, 'openai-responses', (p) => assert.deepEqual(p, FILE)],
    [FILE, 'openai', (p) => assert.deepEqual(p, { type: 'file', file: { file_data: PDF_DATA_URL, filename: 'paper.pdf' } })],
    [{ type: 'input_file', file_url: PDF_URL }, 'anthropic', (p) => assert.deepEqual(p, { type: 'document', source: { type: 'url', url: PDF_URL } })],
  ];
  for (const [part, driver, check] of cases) {
    for (const stream of [false, true]) {
      test(`${part.file_url ? 'file_url' : 'file_data'} → ${driver}${stream ? ', streamed' : ''}: mapped`, T, async () => {
        const nonce = await responsesCall(TARGETS[driver], part, stream);
        check(mediaPart(driver, await upstream(nonce)));
      });
    }
  }

  test('file_url → gemini: refused (no media type to give fileData)', T, async () => {
    await refused((nonce) => oai().responses.create({
      model: TARGETS.gemini, input: [{ role: 'user', content: [{ type: 'input_text', text: nonce }, { type: 'input_file', file_url: 'https://example.com/x' }] }],
    }), /gemini provider/, /by URL/);
  });

  test('a file_id: refused naming it (the gateway stores no files)', T, async () => {
    await refused((nonce) => oai().responses.create({
      model: TARGETS.anthropic, input: [{ role: 'user', content: [{ type: 'input_text', text: nonce }, { type: 'input_file', file_id: 'file-abc' }] }],
    }), /file_id/);
  });
});
