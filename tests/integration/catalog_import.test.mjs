// Integration tests of the LiteLLM catalog import against a real
// PostgreSQL: `llmgw-controlplane import-catalog --file`, POST
// /v1/admin/catalog/import with the document or {"url"} (a loopback HTTP
// server), exact picodollar prices, entries with inexact prices rejected
// whole and named, and what a data plane receives: every price class and
// currency, an operator's override winning, currencies never mixed.
// Contract: docs/pricing.md, docs/controlplane.md, docs/openapi.yaml.

import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 60_000 };
const SAMPLE = path.join(h.REPO_ROOT, 'tests', 'data', 'model_prices_sample.json');
const SAMPLE_TEXT = fs.readFileSync(SAMPLE, 'utf8');
const SAMPLE_COUNT = Object.keys(JSON.parse(SAMPLE_TEXT)).length;
// The sample's entries an import rejects (docs/pricing.md), in document order.
const SAMPLE_REJECTIONS = [
  {
    model: 'gemini-3.1-flash-live-preview', field: 'input_cost_per_image_token',
    message: 'gemini-3.1-flash-live-preview: input_cost_per_image_token: 1e-06 differs from input_cost_per_audio_token: one media input price a model',
  },
  {
    model: 'gpt-realtime-whisper', field: 'input_cost_per_second',
    message: 'gpt-realtime-whisper: input_cost_per_second: 0.0002833333333333333 is not an exact number of picodollars',
  },
];
const SAMPLE_OK = SAMPLE_COUNT - SAMPLE_REJECTIONS.length;

let pg;
let cp;
let docs; // the loopback server the URL imports fetch from
const slowSockets = []; // /slow requests: open until the control plane lets go

// The documents' server is plain http on loopback: allowed explicitly
// (closed by default: https to public addresses only).
const LOOPBACK_HTTP = 'http,loopback';

const importBody = (body, opts = {}) => cp.admin('POST', '/v1/admin/catalog/import', body, opts.headers);

/** Runs `llmgw-controlplane import-catalog ...args` to its end. */
async function importCli(args, extraEnv = { LLMGW_CATALOG_FETCH_ALLOW: LOOPBACK_HTTP }) {
  const env = { ...process.env, LLMGW_DATABASE_URL: pg.conninfo };
  for (const k of Object.keys(env)) if (k.startsWith('LLMGW_') && k !== 'LLMGW_DATABASE_URL') delete env[k];
  Object.assign(env, extraEnv);
  const proc = new h.ManagedProcess('import-catalog', h.CONTROLPLANE_BIN, ['import-catalog', ...args], { env });
  proc.exitExpected = true;
  proc.nonZeroExitExpected = true;
  await proc.waitExit(30_000);
  return proc;
}

/** One row's media prices (provider NULL), as psql prints them. */
const mediaRow = (model) => pg.sql(`SELECT audio_second_price, character_price, image_price, media_input_price,
    media_output_price, image_prices, array_to_string(capabilities, ',') FROM model_catalog WHERE provider IS NULL AND model = '${model}'`);
/** One row of model_catalog (provider NULL), as psql prints it. */
const catalogRow = (model) => pg.sql(`SELECT input_price, output_price, cache_read_price, cache_write_5m_price,
    cache_write_1h_price, reasoning_price, context_window, max_output_tokens, array_to_string(capabilities, ','),
    mode, source, litellm_provider, currency FROM model_catalog WHERE provider IS NULL AND model = '${model}'`);
const configVersion = () => Number(pg.sql('SELECT version FROM config_state'));
const lastAudit = () => pg.sql('SELECT action, resource, resource_id, actor FROM audit_log ORDER BY id DESC LIMIT 1');

let docsConns = 0;
const docsConnections = () => docsConns;

function startDocs() {
  const srv = http.createServer((req, res) => {
    if (req.url === '/catalog.json') {
      // The sample with gpt-4o-mini's input price changed, written as LiteLLM might.
      const old = '"input_cost_per_token": 1.5e-07,';
      const at = SAMPLE_TEXT.indexOf(old, SAMPLE_TEXT.indexOf('"gpt-4o-mini": {'));
      const text = `${SAMPLE_TEXT.slice(0, at)}"input_cost_per_token": 1.6E-7,${SAMPLE_TEXT.slice(at + old.length)}`;
      res.writeHead(200, { 'content-type': 'application/json' });
      return res.end(text);
    }
    if (req.url === '/notjson') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      return res.end('hello, not a catalog');
    }
    if (req.url === '/big') {
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(20 << 20) });
      return res.end();
    }
    if (req.url === '/moved') {
      res.writeHead(302, { location: '/catalog.json' });
      return res.end();
    }
    if (req.url === '/slow') {
      slowSockets.push(req.socket);
      return; // never answers
    }
    res.writeHead(404);
    res.end();
  });
  srv.on('connection', () => { docsConns++; });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve({ srv, url: `http://127.0.0.1:${srv.address().port}` })));
}

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN]);
  pg = await h.startPostgres();
  cp = await h.startControlPlane({ pg, env: { LLMGW_CATALOG_FETCH_ALLOW: LOOPBACK_HTTP } });
  docs = await startDocs();
  const p = await cp.admin('POST', '/v1/admin/providers', { name: 'openai', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' });
  assert.equal(p.status, 201, p.text);
});

after(async () => {
  for (const s of slowSockets) s.destroy();
  docs?.srv.close();
  await h.stopAll();
});

describe('LiteLLM catalog import', () => {
  test('import-catalog --file: every entry exact or rejected naming it, exact picodollar prices, one audit row, a new config version', T, async () => {
    const v0 = configVersion();
    const proc = await importCli(['--file', SAMPLE]);
    assert.equal(proc.exitInfo.code, 0, proc.describe());
    const answer = JSON.parse(proc.stdoutLines.at(-1));
    assert.deepEqual(answer, {
      imported: SAMPLE_OK, unchanged: 0, rejected: 2, ignored: 0, config_version: v0 + 1, rejections: SAMPLE_REJECTIONS,
    });
    assert.equal(configVersion(), v0 + 1);
    // 3e-06, 1.5e-05, 3e-07, 3.75e-06, 6e-06 USD per token.
    assert.equal(catalogRow('claude-3-7-sonnet-20250219'),
      '3000000|15000000|300000|3750000|6000000||200000|64000|chat,vision,tools,json_mode,reasoning|chat|litellm|anthropic|USD');
    // 2.5e-06 and 1e-05, with cache reads at 1.25e-06; no 1h cache-write price.
    assert.equal(catalogRow('gpt-4o'), '2500000|10000000|1250000||||128000|16384|chat,vision,tools,json_mode|chat|litellm|openai|USD');
    // A distinct reasoning price (2.5e-06); 3e-07 input.
    assert.equal(catalogRow('gemini-2.5-flash'),
      '300000|2500000|30000|||2500000|1048576|65535|chat,vision,tools,json_mode,reasoning|chat|litellm|vertex_ai-language-models|USD');
    // "responses" models are chat models; embeddings.
    assert.equal(catalogRow('o1-pro'), '150000000|600000000|||||200000|100000|chat,vision,tools,json_mode,reasoning|responses|litellm|openai|USD');
    assert.equal(catalogRow('gemini-embedding-001'), '150000|0|||||2048||embeddings|embedding|litellm|vertex_ai-embedding-models|USD');
    // Media: audio tokens in (1.25e-06) for a transcription model; audio
    // tokens out (1.2e-05) for speech (its output_cost_per_second is
    // ignored); 0.039 an image, audio in and image tokens out (3e-05); image
    // tokens both ways; a character price of 0. image_prices: never imported.
    assert.equal(mediaRow('gpt-4o-mini-transcribe'), '|||1250000|||transcription');
    assert.equal(mediaRow('gpt-4o-mini-tts'), '||||12000000||speech');
    assert.equal(mediaRow('gemini-2.5-flash-image'), '||39000000000|1000000|30000000||image,vision,tools,json_mode');
    assert.equal(mediaRow('gpt-image-1'), '|||10000000|40000000||image');
    assert.equal(mediaRow('gemini-flash-experimental'), '|0|||||embeddings');
    assert.match(catalogRow('gpt-4o-mini-transcribe'), /\|audio_transcription\|litellm\|openai\|USD$/);
    // Rejected whole: nothing of them is written.
    assert.equal(pg.sql("SELECT count(*) FROM model_catalog WHERE model IN ('gpt-realtime-whisper', 'gemini-3.1-flash-live-preview')"), '0');
    assert.equal(lastAudit(), `import|catalog|file:${SAMPLE}|import-catalog`);
    const after = JSON.parse(pg.sql('SELECT after FROM audit_log ORDER BY id DESC LIMIT 1'));
    assert.equal(after.created, SAMPLE_OK);
    assert.equal(after.models.length, SAMPLE_OK);
    assert.deepEqual(after.rejected_models, ['gemini-3.1-flash-live-preview', 'gpt-realtime-whisper']);
    // The admin API shows the new columns.
    const list = await cp.admin('GET', '/v1/admin/catalog');
    const row = list.json.data.find((r) => r.model === 'gemini-2.5-flash' && r.provider === null);
    assert.equal(row.reasoning_price, 2500000);
    assert.equal(row.source, 'litellm');
    assert.equal(row.litellm_provider, 'vertex_ai-language-models');
    assert.equal(row.mode, 'chat');
  });

  test('POST the document: a second import changes nothing; a changed price is imported alone', T, async () => {
    const v0 = configVersion();
    const again = await importBody(SAMPLE_TEXT);
    assert.equal(again.status, 200, again.text);
    assert.equal(again.json.imported, 0);
    assert.equal(again.json.unchanged, SAMPLE_OK);
    assert.equal(again.json.config_version, v0 + 1, 'an import is a write: audited, versioned');
    const doc = JSON.parse(SAMPLE_TEXT);
    doc['gpt-4o'].input_cost_per_token = 2.6e-6; // serialized as 0.0000026
    const changed = await importBody(doc);
    assert.equal(changed.status, 200, changed.text);
    assert.equal(changed.json.imported, 1);
    assert.equal(changed.json.unchanged, SAMPLE_OK - 1);
    assert.match(catalogRow('gpt-4o'), /^2600000\|/);
    assert.equal(pg.sql("SELECT version FROM model_catalog WHERE provider IS NULL AND model = 'gpt-4o'"), '2');
    assert.equal(lastAudit(), 'import|catalog|body|bootstrap');
    // An operator's edit makes the row theirs until the next import.
    const id = pg.sql("SELECT id FROM model_catalog WHERE provider IS NULL AND model = 'gpt-4o'");
    const e = await cp.admin('PATCH', `/v1/admin/catalog/${id}`, { context_window: 100000 });
    assert.equal(e.status, 200, e.text);
    assert.equal(e.json.source, 'admin');
    const back = await importBody(doc);
    assert.equal(back.json.imported, 1);
    assert.match(catalogRow('gpt-4o'), /\|128000\|16384\|.*\|litellm\|openai\|USD$/);
  });

  test('an inexact price rejects its entry whole, naming model and field; the others import', T, async () => {
    // Raw text: the numbers are read as written, never through a double.
    const body = `{
      "sample_spec": {"input_cost_per_token": 0.0, "max_input_tokens": "max input tokens"},
      "note": "not an entry",
      "gpt-x": {"input_cost_per_token": 1.234567891234567e-07, "output_cost_per_token": 2e-06, "mode": "chat"},
      "ok-a": {"input_cost_per_token": 1.5E-5, "output_cost_per_token": 0.000075, "mode": "chat",
               "max_input_tokens": 32000, "supports_function_calling": true},
      "bad-b": {"input_cost_per_token": 1e-06, "cache_creation_input_token_cost_above_1hr": 0.0000000000001},
      "bad-c": {"input_cost_per_token": 1e-06, "supports_vision": "yes"},
      "bad-d": {"output_cost_per_audio_token": 2e-05, "output_cost_per_image_token": 4e-05, "mode": "chat"},
      "media-ok": {"input_cost_per_audio_token": 1e-06, "input_cost_per_image_token": 0.000001,
                   "input_cost_per_second": 0.0001, "output_cost_per_image": 0.04, "input_cost_per_pixel": 1.9e-08,
                   "mode": "image_edit"}
    }`;
    const r = await importBody(body);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.imported, 2);
    assert.equal(r.json.rejected, 4);
    assert.equal(r.json.ignored, 2);
    assert.deepEqual(r.json.rejections, [
      { model: 'gpt-x', field: 'input_cost_per_token', message: 'gpt-x: input_cost_per_token: 1.234567891234567e-07 is not an exact number of picodollars' },
      { model: 'bad-b', field: 'cache_creation_input_token_cost_above_1hr', message: 'bad-b: cache_creation_input_token_cost_above_1hr: 0.0000000000001 is not an exact number of picodollars' },
      { model: 'bad-c', field: 'supports_vision', message: 'bad-c: supports_vision: must be true or false' },
      {
        model: 'bad-d', field: 'output_cost_per_image_token',
        message: 'bad-d: output_cost_per_image_token: 4e-05 differs from output_cost_per_audio_token: one media output price a model',
      },
    ]);
    // One media input price written twice the same; per pixel ignored.
    assert.equal(mediaRow('media-ok'), '100000000||40000000000|1000000|||image');
    assert.equal(catalogRow('ok-a'), '15000000|75000000|||||32000||chat,tools|chat|litellm||USD');
    assert.equal(pg.sql("SELECT count(*) FROM model_catalog WHERE model IN ('gpt-x', 'bad-b', 'bad-c', 'bad-d', 'sample_spec', 'note')"), '0');
    // One warning line per rejected entry, naming model and field.
    await h.waitFor(() => cp.proc.stderrLines.filter((l) => l.includes('catalog entry rejected')).length >= 4,
      { what: 'four rejection warnings' });
    const warn = cp.proc.stderrLines.map((l) => h.tryParseJson(l)).find((j) => j?.msg === 'catalog entry rejected' && j.model === 'gpt-x');
    assert.equal(warn.level, 'warn');
    assert.equal(warn.field, 'input_cost_per_token');
    assert.equal(warn.source, 'body');
  });

  test('{"url"}: fetched from a loopback server; fetch failures are 502 naming the URL, never its secrets', T, async () => {
    const before = pg.sql("SELECT input_price FROM model_catalog WHERE provider IS NULL AND model = 'gpt-4o-mini'");
    assert.equal(before, '150000');
    const r = await importBody({ url: `${docs.url}/catalog.json` });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.rejected, 2);
    assert.ok(r.json.imported >= 1, r.text); // gpt-4o-mini's new price, and gpt-4o back to the sample's
    assert.match(catalogRow('gpt-4o-mini'), /^160000\|/); // 1.6E-7
    assert.equal(lastAudit(), `import|catalog|url:${docs.url}/catalog.json|bootstrap`);

    const secret = await importBody({ url: `http://user:hunter2@127.0.0.1:${new URL(docs.url).port}/missing?token=abc123` });
    const e = h.assertError(secret, 502, 'fetch_failed', 'url');
    assert.match(e.message, new RegExp(`${docs.url}/missing: answered HTTP 404`));
    assert.ok(!secret.text.includes('hunter2') && !secret.text.includes('abc123'), secret.text);
    assert.match(h.assertError(await importBody({ url: `http://127.0.0.1:${await h.deadPort()}/x` }), 502, 'fetch_failed', 'url').message, /url: http:\/\/127\.0\.0\.1:\d+\/x: /);
    assert.match(h.assertError(await importBody({ url: `${docs.url}/notjson` }), 502, 'invalid_document', 'url').message, /not valid JSON/);
    assert.match(h.assertError(await importBody({ url: `${docs.url}/big` }), 502, 'fetch_failed', 'url').message, /larger than 16777216 bytes/);
  });

  test('bad bodies: 400 naming the field', T, async () => {
    h.assertError(await importBody(''), 400, 'invalid_json');
    assert.match(h.assertError(await importBody('{"a": {'), 400, 'invalid_json').message, /line 1, column/);
    h.assertError(await importBody({ url: 5 }), 400, 'invalid_type', 'url');
    h.assertError(await importBody({ url: 'ftp://127.0.0.1/x.json' }), 400, 'invalid_value', 'url');
    h.assertError(await importBody({ url: 'not a url' }), 400, 'invalid_value', 'url');
    h.assertError(await importBody({ url: `${docs.url}/catalog.json`, force: true }), 400, 'unknown_field', 'force');
    h.assertError(await importBody('[]'), 400, 'invalid_document');
    h.assertError(await importBody('{}'), 400, 'invalid_document');
    h.assertError(await importBody('{"a": {}, "a": {}}'), 400, 'invalid_json');
    const g = await cp.admin('GET', '/v1/admin/catalog/import');
    h.assertError(g, 405, 'method_not_allowed');
    assert.equal(g.headers.allow, 'POST');
    // Refusals changed nothing.
    assert.equal(pg.sql("SELECT count(*) FROM model_catalog WHERE model = 'a'"), '0');
  });

  test('a slow URL does not hold the admin API; a client that leaves cancels the fetch', T, async () => {
    const v0 = configVersion();
    const pending = importBody({ url: `${docs.url}/slow` }, {}).catch((err) => err);
    await h.waitFor(() => slowSockets.length === 1, { what: 'the control plane fetching /slow' });
    const t0 = Date.now();
    const hz = await h.request(cp.port, { method: 'GET', path: '/healthz' });
    assert.equal(hz.status, 200);
    assert.ok(Date.now() - t0 < 2000, 'the loop answered while the fetch waits');
    // The client goes away: the control plane drops its transfer.
    const leaving = h.request(cp.port, {
      method: 'POST', path: '/v1/admin/catalog/import', headers: { authorization: `Bearer ${cp.token}` },
      body: { url: `${docs.url}/slow` }, timeoutMs: 300,
    }).catch((err) => err);
    await h.waitFor(() => slowSockets.length === 2, { what: 'the second fetch of /slow' });
    assert.match(String((await leaving).message), /timed out/);
    await h.waitFor(() => slowSockets[1].destroyed || slowSockets[1].readableEnded,
      { timeoutMs: 5000, what: 'the cancelled fetch closing its connection' });
    slowSockets[0].destroy(); // the first fetch fails now
    const first = await pending;
    h.assertError(first, 502, 'fetch_failed', 'url');
    assert.equal(configVersion(), v0, 'nothing was imported');
  });

  test('the pushed snapshot: every price class and currency; an override wins, in its own currency alone', T, async () => {
    // USD over the catalog's USD: class by class.
    const o1 = await cp.admin('POST', '/v1/admin/prices', { provider: 'openai', model: 'gpt-4o', input_price: '1e-6', reasoning_price: '4e-6' });
    assert.equal(o1.status, 201, o1.text);
    assert.equal(o1.json.reasoning_price, 4000000);
    // EUR over a USD catalog row: the override's classes only.
    const o2 = await cp.admin('POST', '/v1/admin/prices', { provider: 'openai', model: 'claude-3-7-sonnet-20250219', input_price: 2000000, currency: 'EUR' });
    assert.equal(o2.status, 201, o2.text);
    // Media: an override with no catalog row of its own over the imported
    // gpt-image-1 (image tokens 1e-05 in, 4e-05 out): class by class.
    const o3 = await cp.admin('POST', '/v1/admin/prices', {
      provider: 'openai', model: 'gpt-image-1', media_output_price: '5e-5', image_price: '0.011',
      image_prices: { 'low/1024x1024': '0.011', '1024x1024': 42000000000 },
    });
    assert.equal(o3.status, 201, o3.text);
    assert.deepEqual(o3.json.image_prices, { 'low/1024x1024': 11000000000, '1024x1024': 42000000000 });
    // A provider's catalog row priced by size; its override's image_prices
    // replaces the row's whole, its other classes kept.
    const d3 = await cp.admin('POST', '/v1/admin/catalog', {
      provider: 'openai', model: 'dall-e-3', capabilities: ['image'], image_price: '0.04',
      image_prices: { '1024x1024': '0.04', 'hd/1024x1024': '0.08', 'hd/1792x1024': '0.12' },
    });
    assert.equal(d3.status, 201, d3.text);
    const o4 = await cp.admin('POST', '/v1/admin/prices', { provider: 'openai', model: 'dall-e-3', image_prices: { '1792x1024': '0.1' } });
    assert.equal(o4.status, 201, o4.text);
    // EUR over a USD media row: its own classes only.
    const o5 = await cp.admin('POST', '/v1/admin/prices', { provider: 'openai', model: 'gpt-4o-mini-transcribe', audio_second_price: '0.0001', currency: 'EUR' });
    assert.equal(o5.status, 201, o5.text);
    // Speech by character on the provider-less row, through the API.
    const tts = await cp.admin('POST', '/v1/admin/catalog', { model: 'tts-1', capabilities: ['speech'], character_price: '0.000015' });
    assert.equal(tts.status, 201, tts.text);
    const v = configVersion();
    const dir = h.makeTmpDir();
    const cache = path.join(dir, 'dp.cache.json');
    await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp.listening.grpc_port}`, cache, replicaId: 'dp-money' });
    const cached = await h.waitFor(() => {
      try {
        const j = JSON.parse(fs.readFileSync(cache, 'utf8'));
        return j.version >= v ? j : null;
      } catch {
        return null;
      }
    }, { timeoutMs: 15_000, what: `the data plane's cache on version ${v}` });
    const entry = (provider, model) => cached.catalog.find((c) => c.model === model && (c.provider ?? null) === provider);
    assert.deepEqual(entry(null, 'claude-3-7-sonnet-20250219'), {
      model: 'claude-3-7-sonnet-20250219', context_window: 200000, max_output_tokens: 64000,
      capabilities: ['chat', 'vision', 'tools', 'json_mode', 'reasoning'],
      input_price: 3000000, output_price: 15000000, cache_read_price: 300000,
      cache_write_5m_price: 3750000, cache_write_1h_price: 6000000, currency: 'USD',
    });
    assert.deepEqual(entry('openai', 'gpt-4o'), {
      provider: 'openai', model: 'gpt-4o', context_window: 128000, max_output_tokens: 16384,
      capabilities: ['chat', 'vision', 'tools', 'json_mode'],
      input_price: 1000000, output_price: 10000000, cache_read_price: 1250000, reasoning_price: 4000000, currency: 'USD',
    });
    assert.deepEqual(entry('openai', 'claude-3-7-sonnet-20250219'), {
      provider: 'openai', model: 'claude-3-7-sonnet-20250219', context_window: 200000, max_output_tokens: 64000,
      capabilities: ['chat', 'vision', 'tools', 'json_mode', 'reasoning'],
      input_price: 2000000, currency: 'EUR',
    });
    assert.equal(entry(null, 'gemini-2.5-flash').reasoning_price, 2500000);
    // The media prices, merged as the token prices; the data plane took them.
    assert.deepEqual(entry('openai', 'gpt-image-1'), {
      provider: 'openai', model: 'gpt-image-1', capabilities: ['image'], input_price: 5000000, cache_read_price: 1250000,
      media_input_price: 10000000, media_output_price: 50000000, image_price: 11000000000,
      image_prices: { 'low/1024x1024': 11000000000, '1024x1024': 42000000000 }, currency: 'USD',
    });
    assert.deepEqual(entry('openai', 'dall-e-3'), {
      provider: 'openai', model: 'dall-e-3', capabilities: ['image'], image_price: 40000000000,
      image_prices: { '1792x1024': 100000000000 }, currency: 'USD',
    });
    assert.deepEqual(entry('openai', 'gpt-4o-mini-transcribe'), {
      provider: 'openai', model: 'gpt-4o-mini-transcribe', context_window: 16000, max_output_tokens: 2000,
      capabilities: ['transcription'], audio_second_price: 100000000, currency: 'EUR',
    });
    assert.deepEqual(entry(null, 'gpt-4o-mini-transcribe'), {
      model: 'gpt-4o-mini-transcribe', context_window: 16000, max_output_tokens: 2000, capabilities: ['transcription'],
      input_price: 1250000, output_price: 5000000, media_input_price: 1250000, currency: 'USD',
    });
    assert.deepEqual(entry(null, 'tts-1'), { model: 'tts-1', capabilities: ['speech'], character_price: 15000000, currency: 'USD' });
    assert.equal(cached.catalog.filter((c) => c.provider === undefined).length >= SAMPLE_OK, true);
    // A new import leaves the overrides alone: they keep winning.
    const again = await importBody(SAMPLE_TEXT);
    assert.equal(again.status, 200, again.text);
    const still = await cp.admin('GET', '/v1/admin/prices/openai/gpt-4o');
    assert.equal(still.json.input_price, 1000000);
    assert.equal(still.json.version, 1);
  });

  test('the leader\'s catalog_sync job imports --catalog-sync-url on its own, with an audit row', T, async () => {
    // gpt-4o-mini's input price differs in /catalog.json (1.6E-7): the sync's mark.
    pg.sql("UPDATE model_catalog SET input_price = 1 WHERE provider IS NULL AND model = 'gpt-4o-mini'");
    const leader = await h.startControlPlane({
      pg, args: ['--catalog-sync-url', `${docs.url}/catalog.json`, '--catalog-sync-interval-s', '60'],
      env: { LLMGW_CATALOG_FETCH_ALLOW: LOOPBACK_HTTP },
    });
    await h.waitFor(() => pg.sql("SELECT input_price FROM model_catalog WHERE provider IS NULL AND model = 'gpt-4o-mini'") === '160000',
      { timeoutMs: 15_000, what: 'the synced price' });
    assert.match(pg.sql("SELECT actor || ' ' || resource_id FROM audit_log WHERE actor = 'catalog-sync' ORDER BY id DESC LIMIT 1"),
      new RegExp(`^catalog-sync url:${docs.url}/catalog.json$`));
    const m = await h.request(leader.port, { method: 'GET', path: '/metrics' });
    assert.match(m.text, /llmgw_cp_singleton_job_runs_total\{job="catalog_sync",result="ok"\} 1/);
    assert.match(m.text, /llmgw_cp_singleton_job_runs_total\{job="limit_rollover",result="ok"\} [1-9]/);
    const bad = new h.ManagedProcess('cp-badsync', h.CONTROLPLANE_BIN, ['serve', '--check-config', '--grpc-insecure', '--catalog-sync-url', 'ftp://x'],
      { env: { ...process.env, LLMGW_DATABASE_URL: pg.conninfo } });
    bad.exitExpected = true;
    bad.nonZeroExitExpected = true;
    assert.equal((await bad.waitExit(h.START_TIMEOUT_MS)).code, 2);
    assert.match(bad.stderrText, /--catalog-sync-url/);
    // Plain http only when allowed.
    const plain = new h.ManagedProcess('cp-httpsync', h.CONTROLPLANE_BIN, ['serve', '--check-config', '--grpc-insecure', '--catalog-sync-url', `${docs.url}/catalog.json`],
      { env: { ...process.env, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_CATALOG_FETCH_ALLOW: '' } });
    plain.exitExpected = true;
    plain.nonZeroExitExpected = true;
    assert.equal((await plain.waitExit(h.START_TIMEOUT_MS)).code, 2);
    assert.match(plain.stderrText, /--catalog-sync-url: must be an https:\/\/ URL \(plain http only with --catalog-fetch-allow http\)/);
    await leader.proc.stop();
  });

  test('closed by default: https only, public addresses only (loopback, private, link-local and metadata refused before any connection), no redirect followed', T, async () => {
    const strict = await h.startControlPlane({ pg, env: { LLMGW_CATALOG_FETCH_ALLOW: '' } });
    const imp = (url) => strict.admin('POST', '/v1/admin/catalog/import', { url });
    const before = configVersion();
    let e = h.assertError(await imp(`${docs.url}/catalog.json`), 400, 'invalid_value', 'url');
    assert.match(e.message, /must be an https:\/\/ URL \(plain http only with --catalog-fetch-allow http\)/);
    // The documents' port, over https: refused as loopback when the socket
    // would open, so the server never sees a connection.
    const seen = docsConnections();
    const port = new URL(docs.url).port;
    for (const [host, cls, allow] of [
      ['127.0.0.1', 'loopback', 'loopback'], ['[::1]', 'loopback', 'loopback'], ['localhost', 'loopback', 'loopback'],
      ['10.1.2.3', 'private', 'private'], ['192.168.0.1', 'private', 'private'],
      ['169.254.169.254', 'link-local', 'link-local'], ['[fe80::1]', 'link-local', 'link-local'],
      ['[::ffff:169.254.169.254]', 'link-local', 'link-local'],
    ]) {
      e = h.assertError(await imp(`https://${host}:${port}/latest/meta-data`), 400, 'invalid_value', 'url');
      assert.match(e.message, new RegExp(`is ${cls}: not fetched from unless allowed \\(--catalog-fetch-allow ${allow}\\)`), `${host}: ${e.message}`);
    }
    e = h.assertError(await imp(`https://255.255.255.255:${port}/x`), 400, 'invalid_value', 'url');
    assert.match(e.message, /never fetched from/);
    assert.equal(docsConnections(), seen, 'no connection reached the loopback server');
    assert.equal(configVersion(), before, 'nothing imported');
    // The CLI under the same policy.
    const cli = await importCli(['--url', `https://127.0.0.1:${port}/catalog.json`], {});
    assert.equal(cli.exitInfo.code, 1, cli.describe());
    assert.match(cli.stderrText + cli.stdoutText, /is loopback: not fetched from unless allowed/);
    // A redirect is an error naming it, not followed (even where allowed).
    e = h.assertError(await importBody({ url: `${docs.url}/moved` }), 502, 'fetch_failed', 'url');
    assert.match(e.message, /answered HTTP 302: redirects are not followed/);
    assert.equal(configVersion(), before);
    await strict.proc.stop();
  });
});
