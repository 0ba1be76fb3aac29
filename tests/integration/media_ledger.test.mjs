// The money of the media endpoints (docs/media.md), end to end: PostgreSQL +
// llmgw-controlplane + a data plane + the mock, configured through the
// admin API with media prices (per second of audio, per character, per
// image by quality and size, per audio or image token). Every request made
// with the official `openai` SDK leaves one ledger row per attempt with its
// units beside its tokens and a cost equal, to the picodollar, to what the
// prices and the provider's answer say; /v1/admin/usage sums the units; a
// key whose budget cannot hold a request's bound is refused before any
// upstream call, with the limit's own explanation.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI, { toFile } from 'openai';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';

const T = { timeout: 120_000 };
const KEY = masterKey();

const FLAKY = 'whisper-1#status=503,times=1,tag=ledger-flaky';
const PRICES = [
  { provider: 'mock', model: 'whisper-1', audio_second_price: 100_000_000 },
  { provider: 'mock', model: FLAKY, audio_second_price: 100_000_000 },
  { provider: 'mock', model: 'gpt-4o-transcribe', input_price: 2_500_000, media_input_price: 2_500_000, output_price: 10_000_000 },
  { provider: 'mock', model: 'tts-1', character_price: 15_000_000 },
  { provider: 'mock', model: 'gpt-image-1', input_price: 5_000_000, media_input_price: 10_000_000, media_output_price: 40_000_000 },
  {
    provider: 'mock', model: 'dall-e-3', image_price: 40_000_000_000,
    image_prices: { '1024x1024': 40_000_000_000, 'hd/1024x1024': 80_000_000_000 },
  },
];

let pg;
let cp;
let cfg;
let mock;
let dp;
let client;
let poorKey;

function wav(ms) {
  const n = Math.round(8 * ms);
  const b = Buffer.alloc(44 + n * 2);
  b.write('RIFF', 0);
  b.writeUInt32LE(36 + n * 2, 4);
  b.write('WAVEfmt ', 8);
  b.writeUInt32LE(16, 16);
  b.writeUInt16LE(1, 20);
  b.writeUInt16LE(1, 22);
  b.writeUInt32LE(8000, 24);
  b.writeUInt32LE(16000, 28);
  b.writeUInt16LE(2, 32);
  b.writeUInt16LE(16, 34);
  b.write('data', 36);
  b.writeUInt32LE(n * 2, 40);
  return b;
}

const PNG = Buffer.from(
  '89504e470d0a1a0a0000000d4948445200000001000000010806000000' +
  '1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082', 'hex');

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  pg = await h.startPostgres();
  mock = await h.startMock();
  cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY.hex } });
  cfg = new Config(cp, pg, KEY);
  await cfg.provider({ name: 'mock', driver: 'openai', base_url: mock.v1 });
  for (const [name, capability, model] of [['whisper', 'transcription', 'whisper-1'],
    ['whisper4o', 'transcription', 'gpt-4o-transcribe'], ['tts', 'speech', 'tts-1'],
    ['images', 'image', 'gpt-image-1'], ['dalle', 'image', 'dall-e-3'], ['flaky', 'transcription', FLAKY]]) {
    await cfg.api('POST', '/v1/admin/routes', { name, capability, strategy: 'ordered', entries: [{ provider: 'mock', model }] }, 201);
  }
  for (const p of PRICES) await cfg.api('POST', '/v1/admin/prices', p, 201);
  const key = await cfg.apiKey('k-media');
  poorKey = await cfg.apiKey('k-poor');
  await cfg.api('POST', '/v1/admin/limits', {
    id: 'poor-day', scope_kind: 'key', scope: 'k-poor', metric: 'cost', period: 'day', amount: 1_000_000_000,
  }, 201);
  dp = await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-media' });
  const v = cfg.version();
  await h.waitFor(async () => (await h.request(dp.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v,
    { what: `the data plane serving version ${v}` });
  client = new OpenAI({ baseURL: dp.v1, apiKey: key, maxRetries: 0, timeout: 30_000 });
});

after(async () => {
  await h.stopAll();
});

/** The request's ledger rows, once the control plane has them. */
async function rows(rid, n = 1) {
  return h.waitFor(async () => {
    const r = await cp.admin('GET', `/v1/admin/ledger?request_id=${encodeURIComponent(rid)}`);
    return r.status === 200 && r.json.data.length >= n ? r.json.data : null;
  }, { what: `${n} ledger row(s) of ${rid}`, timeoutMs: 20_000 });
}

test('transcription priced per second of audio: the provider\'s billed seconds', T, async () => {
  const rid = h.randomId('led-whisper');
  const { data, response } = await client.audio.transcriptions.create({
    file: await toFile(wav(1500), 'a.wav', { type: 'audio/wav' }), model: 'whisper', response_format: 'json',
  }, { headers: { 'x-request-id': rid } }).withResponse();
  const [row] = await rows(rid);
  const seconds = data.usage.seconds; // whisper-1 bills whole seconds
  assert.ok(seconds >= 2, JSON.stringify(data));
  assert.equal(row.api, 'openai.audio.transcriptions');
  assert.equal(row.audio_ms, seconds * 1000);
  assert.equal(row.cost_picodollars, seconds * 100_000_000);
  assert.equal(row.characters, 0);
  assert.equal(row.images, 0);
  assert.equal(response.headers.get('x-llmgw-cost-picodollars'), String(row.cost_picodollars));
  assert.equal(response.headers.get('x-llmgw-ledger-id'), row.attempt_id);
});

test('a translation, and a retried transcription: one row per attempt, the failed one free', T, async () => {
  const rid = h.randomId('led-translate');
  const t = await client.audio.translations.create({
    file: await toFile(wav(1200), 'a.wav', { type: 'audio/wav' }), model: 'whisper',
  }, { headers: { 'x-request-id': rid } });
  assert.match(t.text, /translation/i);
  const [row] = await rows(rid);
  assert.equal(row.api, 'openai.audio.translations');
  assert.equal(row.audio_ms, 2000); // the provider's billed seconds
  assert.equal(row.cost_picodollars, 200_000_000);

  const rid2 = h.randomId('led-flaky');
  const { response } = await client.audio.transcriptions.create({
    file: await toFile(wav(500), 'a.wav', { type: 'audio/wav' }), model: 'flaky',
  }, { headers: { 'x-request-id': rid2 } }).withResponse();
  assert.equal(response.headers.get('x-llmgw-attempts'), '2');
  const two = (await rows(rid2, 2)).sort((a, b) => a.attempt - b.attempt);
  assert.equal(two.length, 2);
  assert.equal(two[0].status, 503);
  assert.ok(two[0].failure_class, JSON.stringify(two[0]));
  assert.equal(two[0].cost_picodollars, 0);
  assert.equal(two[0].audio_ms, 0);
  assert.equal(two[1].model, FLAKY, 'the retry stayed on the target');
  assert.equal(two[1].audio_ms, 1000);
  assert.equal(two[1].cost_picodollars, 100_000_000);
});

test('a text answer has no usage: the file\'s own duration prices it', T, async () => {
  const rid = h.randomId('led-text');
  await client.audio.transcriptions.create({
    file: await toFile(wav(2200), 'a.wav', { type: 'audio/wav' }), model: 'whisper', response_format: 'text',
  }, { headers: { 'x-request-id': rid } });
  const [row] = await rows(rid);
  assert.equal(row.audio_ms, 2200);
  assert.equal(row.cost_picodollars, 220_000_000);
});

test('a token-priced transcription (gpt-4o-transcribe): its audio and text tokens', T, async () => {
  const rid = h.randomId('led-4o');
  const data = await client.audio.transcriptions.create({
    file: await toFile(wav(1000), 'a.wav', { type: 'audio/wav' }), model: 'whisper4o', prompt: 'names: Ada',
  }, { headers: { 'x-request-id': rid } });
  const u = data.usage;
  const [row] = await rows(rid);
  assert.equal(row.input_tokens, u.input_tokens);
  assert.equal(row.output_tokens, u.output_tokens);
  const text = u.input_tokens - u.input_token_details.audio_tokens;
  assert.equal(row.cost_picodollars,
    text * 2_500_000 + u.input_token_details.audio_tokens * 2_500_000 + u.output_tokens * 10_000_000);
  assert.equal(row.audio_ms, 1000);
});

test('speech priced per character of its input', T, async () => {
  const rid = h.randomId('led-tts');
  const input = 'Grüße from the gateway.'; // 23 characters, 25 bytes
  const r = await client.audio.speech.create({ model: 'tts', voice: 'alloy', input, response_format: 'wav' },
    { headers: { 'x-request-id': rid } });
  await r.arrayBuffer();
  const [row] = await rows(rid);
  assert.equal(row.api, 'openai.audio.speech');
  assert.equal(row.stream, true);
  assert.equal(row.characters, [...input].length);
  assert.equal(row.cost_picodollars, [...input].length * 15_000_000);
});

test('images priced per image by quality and size, or by their tokens', T, async () => {
  const rid = h.randomId('led-dalle');
  await client.images.generate({ model: 'dalle', prompt: 'a red square', n: 2, size: '1024x1024', quality: 'hd' },
    { headers: { 'x-request-id': rid } });
  const [row] = await rows(rid);
  assert.equal(row.images, 2);
  assert.equal(row.cost_picodollars, 2 * 80_000_000_000);

  const rid2 = h.randomId('led-gptimage');
  const e = await client.images.edit({
    model: 'images', prompt: 'make it blue', image: await toFile(PNG, 'a.png', { type: 'image/png' }),
    mask: await toFile(PNG, 'm.png', { type: 'image/png' }),
  }, { headers: { 'x-request-id': rid2 } });
  const [r2] = await rows(rid2);
  const u = e.usage;
  assert.equal(r2.api, 'openai.images.edits');
  assert.equal(r2.images, 1);
  assert.equal(r2.input_tokens, u.input_tokens);
  assert.equal(r2.output_tokens, u.output_tokens);
  assert.equal(r2.cost_picodollars, u.input_tokens_details.text_tokens * 5_000_000 +
    u.input_tokens_details.image_tokens * 10_000_000 + u.output_tokens * 40_000_000);

  const usage = await cp.admin('GET', '/v1/admin/usage?group_by=route');
  assert.equal(usage.status, 200, usage.text);
  const dalle = usage.json.groups.find((g) => g.route === 'dalle');
  assert.equal(dalle.images, 2);
});

test('a cost-limited key: refused with the limit when the bound exceeds what remains', T, async () => {
  const poor = new OpenAI({ baseURL: dp.v1, apiKey: poorKey, maxRetries: 0, timeout: 30_000 });
  const rid = h.randomId('led-poor');
  const before = mock.readUsage().length;
  const err = await poor.images.generate({ model: 'dalle', prompt: 'x', n: 1, size: '1024x1024', quality: 'hd' },
    { headers: { 'x-request-id': rid } }).then(() => null, (e) => e);
  assert.ok(err, 'refused');
  assert.equal(err.status, 402);
  assert.equal(err.error.code, 'budget_exceeded');
  assert.equal(err.error.limit.id, 'poor-day');
  assert.equal(err.error.limit.amount, 1_000_000_000);
  assert.match(err.error.message, /.+/);
  assert.equal(err.headers['x-llmgw-attempts'] ?? err.headers.get?.('x-llmgw-attempts'), '0');
  assert.equal(mock.readUsage().length, before, 'no upstream call');
  // What it can afford goes through: speech of a few characters.
  const ok = await poor.audio.speech.create({ model: 'tts', voice: 'alloy', input: 'Hi.', response_format: 'wav' });
  assert.equal(ok.status, 200);
});
