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
import fs from 'node:fs';
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

// Media (issue 24): OpenAI's audio and images endpoints, multipart uploads
// read with common/gw_multipart, a WAV's duration with common/gw_audio.

const base = () => `http://127.0.0.1:${mock.port}`;

/** A PCM WAV: 16-bit mono at rate Hz, ms milliseconds of silence. */
function wav(ms, rate = 8000) {
  const data = Math.round((rate * 2 * ms) / 1000);
  const b = Buffer.alloc(44 + data);
  b.write('RIFF', 0); b.writeUInt32LE(36 + data, 4); b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16); b.writeUInt16LE(1, 20); b.writeUInt16LE(1, 22);
  b.writeUInt32LE(rate, 24); b.writeUInt32LE(rate * 2, 28); b.writeUInt16LE(2, 32); b.writeUInt16LE(16, 34);
  b.write('data', 36); b.writeUInt32LE(data, 40);
  return b;
}
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAAC0lEQVR4nGNgAAIAAAUAAXpeqz8AAAAASUVORK5CYII=', 'base64');

function form(fields) {
  const f = new FormData();
  for (const [k, v] of fields) {
    if (Buffer.isBuffer(v)) f.append(k, new Blob([v]), k.startsWith('image') || k === 'mask' ? 'x.png' : 'audio.wav');
    else f.append(k, v);
  }
  return f;
}

async function post(path, body, headers = {}) {
  const json = !(body instanceof FormData);
  const r = await fetch(base() + path, {
    method: 'POST', body: json ? JSON.stringify(body) : body,
    headers: json ? { 'content-type': 'application/json', ...headers } : headers,
  });
  const buf = Buffer.from(await r.arrayBuffer());
  const text = buf.toString('utf8');
  return { status: r.status, type: r.headers.get('content-type'), headers: r.headers, buf, text, json: h.tryParseJson(text) };
}

const transcribe = (fields, headers) => post('/v1/audio/transcriptions', form(fields), headers);
const errMessage = (r) => r.json?.error?.message;

describe('media: transcriptions and translations', () => {
  test('json: the text from the byte length; duration usage for whisper, tokens for gpt-4o (WAV duration)', T, async () => {
    const file = wav(2500);
    let r = await transcribe([['file', file], ['model', 'whisper-1']]);
    assert.equal(r.status, 200, r.text);
    assert.match(r.type, /^application\/json/);
    const text = `Mock transcript of a ${file.length}-byte recording.`;
    assert.deepEqual(r.json, { text, usage: { type: 'duration', seconds: 3 } });
    r = await transcribe([['file', file], ['model', 'gpt-4o-transcribe'], ['prompt', 'twelve chars'], ['language', 'en'], ['temperature', '0.2']]);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, {
      text,
      usage: { type: 'tokens', input_tokens: 28, input_token_details: { text_tokens: 3, audio_tokens: 25 }, output_tokens: 6, total_tokens: 34 },
    });
    // not a WAV: 4 bytes a millisecond (32 kbps)
    r = await transcribe([['file', Buffer.alloc(10_000, 7)], ['model', 'gpt-4o-mini-transcribe']]);
    assert.equal(r.json.usage.input_token_details.audio_tokens, 25);
    assert.equal(r.json.text, 'Mock transcript of a 10000-byte recording.');
    r = await post('/v1/audio/translations', form([['file', file], ['model', 'whisper-1']]));
    assert.deepEqual(r.json, { text: `Mock translation of a ${file.length}-byte recording.`, usage: { type: 'duration', seconds: 3 } });
  });

  test('every response_format: text, srt, vtt (text/plain), verbose_json with words', T, async () => {
    const file = wav(3723);
    const text = `Mock transcript of a ${file.length}-byte recording.`;
    let r = await transcribe([['file', file], ['model', 'whisper-1'], ['response_format', 'text']]);
    assert.equal(r.type, 'text/plain; charset=utf-8');
    assert.equal(r.text, `${text}\n`);
    r = await transcribe([['file', file], ['model', 'whisper-1'], ['response_format', 'srt']]);
    assert.equal(r.type, 'text/plain; charset=utf-8');
    assert.equal(r.text, `1\n00:00:00,000 --> 00:00:03,723\n${text}\n\n`);
    r = await transcribe([['file', file], ['model', 'whisper-1'], ['response_format', 'vtt']]);
    assert.equal(r.text, `WEBVTT\n\n00:00:00.000 --> 00:00:03.723\n${text}\n\n`);
    r = await transcribe([['file', file], ['model', 'whisper-1'], ['response_format', 'verbose_json']]);
    assert.equal(r.json.task, 'transcribe');
    assert.equal(r.json.language, 'english');
    assert.equal(r.json.duration, 3.723);
    assert.equal(r.json.segments.length, 1);
    assert.equal(r.json.segments[0].end, 3.723);
    assert.equal(r.json.words, undefined);
    assert.deepEqual(r.json.usage, { type: 'duration', seconds: 4 });
    r = await transcribe([['file', file], ['model', 'whisper-1'], ['response_format', 'verbose_json'],
      ['timestamp_granularities[]', 'word'], ['timestamp_granularities[]', 'segment']]);
    assert.deepEqual(r.json.words.map((w) => w.word), text.split(' '));
    assert.equal(r.json.words.at(-1).end, 3.723);
    r = await post('/v1/audio/translations', form([['file', file], ['model', 'whisper-1'], ['response_format', 'verbose_json']]));
    assert.equal(r.json.task, 'translate');
  });

  test('stream=true: a delta a word, then done with token usage; whisper-1 refuses it', T, async () => {
    const file = wav(1000);
    const r = await transcribe([['file', file], ['model', 'gpt-4o-transcribe'], ['stream', 'true']]);
    assert.equal(r.status, 200, r.text);
    assert.match(r.type, /^text\/event-stream/);
    const ev = h.parseEvents(r.text.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, '')));
    const deltas = ev.filter((e) => e.type === 'transcript.text.delta');
    const done = ev.at(-1);
    assert.equal(done.type, 'transcript.text.done');
    assert.equal(deltas.length, 6);
    assert.equal(deltas.map((d) => d.delta).join(''), done.text);
    assert.deepEqual(done.usage, { type: 'tokens', input_tokens: 10, input_token_details: { text_tokens: 0, audio_tokens: 10 }, output_tokens: 6, total_tokens: 16 });
    assert.ok(!r.text.includes('[DONE]'));
    const bad = await transcribe([['file', file], ['model', 'whisper-1'], ['stream', 'true']]);
    assert.equal(bad.status, 400);
    assert.equal(errMessage(bad), 'streaming is not supported for whisper-1');
  });

  test('refusals: unknown part, missing file or model, bad response_format, not multipart', T, async () => {
    const file = wav(100);
    const cases = [
      [[['file', file], ['model', 'whisper-1'], ['foo', 'bar']], 'Unrecognized request argument supplied: foo'],
      [[['model', 'whisper-1']], 'file: field required'],
      [[['file', file]], 'model: field required'],
      [[['file', file], ['model', 'whisper-1'], ['response_format', 'mp3']], 'response_format: one of json, text, srt, verbose_json, vtt'],
      [[['file', file], ['model', 'whisper-1'], ['temperature', 'hot']], 'temperature: a number between 0 and 1'],
    ];
    for (const [fields, message] of cases) {
      const r = await transcribe(fields);
      assert.equal(r.status, 400, r.text);
      assert.equal(errMessage(r), message);
    }
    // translations take no language
    let r = await post('/v1/audio/translations', form([['file', file], ['model', 'whisper-1'], ['language', 'de']]));
    assert.equal(errMessage(r), 'Unrecognized request argument supplied: language');
    r = await post('/v1/audio/transcriptions', { model: 'whisper-1' });
    assert.equal(r.status, 400);
    assert.equal(errMessage(r), 'the Content-Type is not multipart/form-data');
    r = await fetch(base() + '/v1/audio/transcriptions', {
      method: 'POST', headers: { 'content-type': 'multipart/form-data; boundary=zz' },
      body: '--zz\r\nContent-Disposition: form-data; name="model"\r\n\r\nwhisper-1\r\n',
    });
    assert.equal(r.status, 400);
    assert.equal((await r.json()).error.message, 'the multipart body is truncated: no closing boundary');
  });

  test('a 20 MiB upload is accepted', T, async () => {
    const big = Buffer.alloc(20 << 20, 1);
    const r = await transcribe([['file', big], ['model', 'whisper-1']]);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.text, `Mock transcript of a ${big.length}-byte recording.`);
  });
});

describe('media: speech', () => {
  const speech = (body, headers) => post('/v1/audio/speech', { model: 'tts-1', voice: 'alloy', ...body }, headers);

  test('wav: 8 kHz 16-bit mono, 20 ms a character, capped at 5 s; pcm the same samples', T, async () => {
    const r = await speech({ input: 'hello', response_format: 'wav' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.type, 'audio/wav');
    assert.equal(r.headers.get('transfer-encoding'), 'chunked');
    assert.equal(r.buf.toString('latin1', 0, 4), 'RIFF');
    assert.equal(r.buf.readUInt32LE(24), 8000);
    assert.equal(r.buf.readUInt16LE(34), 16);
    assert.equal(r.buf.readUInt32LE(40), 5 * 160 * 2);
    assert.equal(r.buf.length, 44 + 1600);
    const again = await speech({ input: 'hello', response_format: 'wav' });
    assert.deepEqual(again.buf, r.buf, 'deterministic');
    const other = await speech({ input: 'hellp', response_format: 'wav' });
    assert.notDeepEqual(other.buf, r.buf);
    const pcm = await speech({ input: 'hello', response_format: 'pcm' });
    assert.equal(pcm.type, 'audio/pcm');
    assert.deepEqual(pcm.buf, r.buf.subarray(44));
    const long = await speech({ input: 'x'.repeat(1000), response_format: 'wav' });
    assert.equal(long.buf.length, 44 + 80_000);
  });

  test('mp3 (default): silent MPEG-1 Layer III frames; opus, aac, flac: the WAV bytes under their type', T, async () => {
    const r = await speech({ input: 'hello' });
    assert.equal(r.type, 'audio/mpeg');
    assert.equal(r.buf.length % 144, 0);
    assert.equal(r.buf.length / 144, 3); // 100 ms in 36 ms frames
    assert.deepEqual([...r.buf.subarray(0, 4)], [0xff, 0xfb, 0x18, 0xc0]);
    const wavBytes = (await speech({ input: 'hello', response_format: 'wav' })).buf;
    for (const [fmt, type] of [['opus', 'audio/opus'], ['aac', 'audio/aac'], ['flac', 'audio/flac']]) {
      const f = await speech({ input: 'hello', response_format: fmt });
      assert.equal(f.type, type);
      assert.deepEqual(f.buf, wavBytes);
    }
  });

  test('8 pieces, the chunk delay between them', T, async () => {
    const t0 = Date.now();
    const res = await fetch(base() + '/v1/audio/speech', {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-mock-fault': 'chunk_delay_ms=40' },
      body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: 'hello', response_format: 'wav' }),
    });
    let reads = 0, bytes = 0;
    for await (const piece of res.body) {
      reads++;
      bytes += piece.length;
    }
    assert.equal(bytes, 1644);
    assert.ok(reads >= 2, `${reads} reads`);
    assert.ok(Date.now() - t0 >= 7 * 40 - 10, `${Date.now() - t0} ms`);
  });

  test('refusals: input, voice, response_format, speed', T, async () => {
    const cases = [
      [{ input: '' }, 'input: field required (a non-empty string)'],
      [{ input: 'é'.repeat(4097) }, 'input: at most 4096 characters'],
      [{ input: 'hi', voice: undefined }, 'voice: field required (a voice name, or an object with an id)'],
      [{ input: 'hi', response_format: 'ogg' }, 'response_format: one of mp3, opus, aac, flac, wav, pcm'],
      [{ input: 'hi', speed: 5 }, 'speed: a number between 0.25 and 4.0'],
    ];
    for (const [body, message] of cases) {
      const r = await speech(body);
      assert.equal(r.status, 400, r.text);
      assert.equal(errMessage(r), message);
    }
    assert.equal((await speech({ input: 'é'.repeat(4096), voice: { id: 'v1' } })).status, 200);
  });
});

describe('media: images', () => {
  test('generations: url (served) or b64_json, n images; gpt-image usage, b64 only', T, async () => {
    let r = await post('/v1/images/generations', { model: 'dall-e-3', prompt: 'a red fox', n: 2 });
    assert.equal(r.status, 200, r.text);
    assert.equal(typeof r.json.created, 'number');
    assert.equal(r.json.data.length, 2);
    assert.equal(r.json.usage, undefined);
    assert.equal(r.json.data[0].revised_prompt, 'a red fox');
    const img = await fetch(r.json.data[1].url);
    assert.equal(img.status, 200);
    assert.equal(img.headers.get('content-type'), 'image/png');
    assert.deepEqual(Buffer.from(await img.arrayBuffer()), PNG);
    r = await post('/v1/images/generations', { model: 'dall-e-2', prompt: 'a red fox', response_format: 'b64_json', size: '256x256' });
    assert.deepEqual(Buffer.from(r.json.data[0].b64_json, 'base64'), PNG);
    r = await post('/v1/images/generations', { model: 'gpt-image-1', prompt: 'a red fox', n: 3, quality: 'low' });
    assert.equal(r.json.data.length, 3);
    assert.ok(r.json.data.every((d) => d.b64_json && !d.url));
    assert.deepEqual(r.json.usage, { input_tokens: 3, input_tokens_details: { text_tokens: 3, image_tokens: 0 }, output_tokens: 816, total_tokens: 819 });
    r = await post('/v1/images/generations', { model: 'gpt-image-1', prompt: 'a red fox', quality: 'high' });
    assert.equal(r.json.usage.output_tokens, 4160);
    r = await post('/v1/images/generations', { model: 'gpt-image-1', prompt: 'a', response_format: 'url' });
    assert.equal(r.status, 400);
    assert.equal(errMessage(r), "response_format: 'url' is not supported for gpt-image-1 (it always answers b64_json)");
    for (const [body, message] of [
      [{ model: 'dall-e-3' }, 'prompt: field required (a non-empty string)'],
      [{ model: 'dall-e-3', prompt: 'a', n: 11 }, 'n: an integer in [1, 10]'],
      [{ model: 'dall-e-3', prompt: 'a', size: '100x100' }, 'size: one of auto, 256x256, 512x512, 1024x1024, 1536x1024, 1024x1536, 1792x1024, 1024x1792'],
      [{ model: 'dall-e-3', prompt: 'a', quality: 'ultra' }, 'quality: one of auto, standard, hd, low, medium, high'],
      [{ model: 'dall-e-3', prompt: 'a', style: 'odd' }, "style: 'vivid' or 'natural'"],
    ]) {
      const e = await post('/v1/images/generations', body);
      assert.equal(e.status, 400, e.text);
      assert.equal(errMessage(e), message);
    }
  });

  test('edits: image (or image[]) parts and a mask, PNG only; 65 image tokens an input image', T, async () => {
    let r = await post('/v1/images/edits', form([['image[]', PNG], ['image[]', PNG], ['mask', PNG], ['prompt', 'add a hat'], ['model', 'gpt-image-1'], ['n', '2']]));
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.data.length, 2);
    assert.deepEqual(r.json.usage, { input_tokens: 133, input_tokens_details: { text_tokens: 3, image_tokens: 130 }, output_tokens: 544, total_tokens: 677 });
    r = await post('/v1/images/edits', form([['image', PNG], ['prompt', 'add a hat'], ['model', 'dall-e-2'], ['response_format', 'b64_json']]));
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(Buffer.from(r.json.data[0].b64_json, 'base64'), PNG);
    for (const [fields, message] of [
      [[['image', wav(10)], ['prompt', 'x'], ['model', 'dall-e-2']], 'image: not a PNG file'],
      [[['image', PNG], ['mask', wav(10)], ['prompt', 'x'], ['model', 'dall-e-2']], 'mask: not a PNG file'],
      [[['prompt', 'x'], ['model', 'dall-e-2']], 'image: field required'],
      [[['image', PNG], ['model', 'dall-e-2']], 'prompt: field required (a non-empty string)'],
      [[['image', PNG], ['prompt', 'x'], ['model', 'dall-e-2'], ['style', 'vivid']], 'Unrecognized request argument supplied: style'],
    ]) {
      const e = await post('/v1/images/edits', form(fields));
      assert.equal(e.status, 400, e.text);
      assert.equal(errMessage(e), message);
    }
  });
});

describe('media: faults, the usage log and the body record', () => {
  test('faults on a media path: status with Retry-After, model#spec, ttfb, a cut connection', T, async () => {
    const file = wav(100);
    let r = await transcribe([['file', file], ['model', 'whisper-1']], { 'x-mock-fault': 'status=429,retry_after=7' });
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '7');
    assert.equal(r.json.error.code, 'rate_limit_exceeded');
    r = await transcribe([['file', file], ['model', 'whisper-1#status=503']]);
    assert.equal(r.status, 503);
    assert.equal(r.json.error.type, 'server_error');
    const t0 = Date.now();
    r = await transcribe([['file', file], ['model', 'whisper-1']], { 'x-mock-fault': 'ttfb_ms=300' });
    assert.equal(r.status, 200);
    assert.ok(Date.now() - t0 >= 290);
    // speech cut after 3 of its 8 pieces
    const res = await fetch(base() + '/v1/audio/speech', {
      method: 'POST', headers: { 'content-type': 'application/json', 'x-mock-fault': 'drop_after=3' },
      body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: 'hello', response_format: 'wav' }),
    });
    assert.equal(res.status, 200);
    await assert.rejects(res.arrayBuffer());
    r = await post('/v1/images/generations', { model: 'gpt-image-1', prompt: 'x' }, { 'x-mock-fault': 'error=content_filter' });
    assert.equal(r.status, 400);
  });

  test('usage log lines: api names, tokens and the media member', T, async () => {
    const id = h.randomId('media');
    const file = wav(1500);
    await transcribe([['file', file], ['model', 'gpt-4o-transcribe']], { 'x-request-id': `${id}.t` });
    await transcribe([['file', file], ['model', 'whisper-1']], { 'x-request-id': `${id}.w` });
    await post('/v1/audio/speech', { model: 'tts-1', voice: 'alloy', input: 'two words', response_format: 'wav' }, { 'x-request-id': `${id}.s` });
    await post('/v1/images/generations', { model: 'gpt-image-1', prompt: 'a b c', n: 2 }, { 'x-request-id': `${id}.i` });
    const line = (s) => mock.waitForUsage((l) => l.x_request_id === `${id}.${s}`);
    let l = await line('t');
    assert.equal(l.api, 'openai.audio.transcriptions');
    assert.equal(l.model, 'gpt-4o-transcribe');
    assert.deepEqual([l.usage.input_tokens, l.usage.output_tokens], [15, 6]);
    assert.deepEqual(l.media, { bytes: file.length, wav: true, audio_ms: 1500, seconds: 2 });
    l = await line('w');
    assert.deepEqual([l.usage.input_tokens, l.usage.output_tokens], [0, 0]);
    assert.equal(l.media.seconds, 2);
    l = await line('s');
    assert.equal(l.api, 'openai.audio.speech');
    assert.equal(l.outcome, 'completed');
    assert.deepEqual(l.media, { characters: 9, format: 'wav', audio_ms: 180, bytes: 44 + 2880 });
    l = await line('i');
    assert.equal(l.api, 'openai.images.generations');
    assert.deepEqual([l.usage.input_tokens, l.usage.output_tokens], [3, 544]);
    assert.deepEqual(l.media, { images: 2, size: 'auto', quality: 'auto', input_images: 0 });
  });

  test('--record-bodies: multipart as content_type and body_b64, JSON as before', T, async () => {
    const rec = await h.startMock({ record: true });
    const nonce = h.randomId('nonce');
    const file = Buffer.concat([wav(50), Buffer.from([0, 255, 13, 10])]);
    const f = form([['file', file], ['model', 'whisper-1'], ['prompt', nonce]]);
    let r = await fetch(`http://127.0.0.1:${rec.port}/v1/audio/transcriptions`, { method: 'POST', body: f });
    assert.equal(r.status, 200);
    r = await fetch(`http://127.0.0.1:${rec.port}/v1/audio/speech`, {
      method: 'POST', headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'tts-1', voice: 'alloy', input: nonce }),
    });
    await r.arrayBuffer();
    const lines = await h.waitFor(() => {
      const all = (fs.existsSync(rec.recordPath) ? fs.readFileSync(rec.recordPath, 'utf8') : '').split('\n').filter(Boolean).map((x) => JSON.parse(x));
      return all.length >= 2 ? all : null;
    }, { what: 'two recorded bodies' });
    const mp = lines.find((x) => x.path === '/v1/audio/transcriptions');
    assert.match(mp.content_type, /^multipart\/form-data; boundary=/);
    assert.equal(mp.body, undefined);
    const raw = Buffer.from(mp.body_b64, 'base64');
    assert.ok(raw.includes(nonce));
    assert.ok(raw.includes(file), 'the file bytes exactly');
    const js = lines.find((x) => x.path === '/v1/audio/speech');
    assert.equal(JSON.parse(js.body).input, nonce);
    assert.equal(js.body_b64, undefined);
  });
});
