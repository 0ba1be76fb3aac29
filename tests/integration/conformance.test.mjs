// The conformance matrix: every feature of tests/integration/conformance/*.mjs
// (files starting with _ are helpers)
// sent from every client format (OpenAI chat, Anthropic Messages, OpenAI
// Responses) to every driver (all against the mock provider, which records
// the bodies it receives). Each cell is one of:
//   passed   the client's own wire format: the body went through as written
//   mapped   another format: the feature reached the provider in that
//            format's form (the feature's evidence function, given the body
//            the mock recorded, its path and the cell's nonce, names the form)
//   refused  a 400 that names the field (in param, or in the message)
//   omitted  a documented deliberate translation (docs/canonical.md): the
//            provider has no such field and the field cannot change the
//            answer's content (an end-user id for abuse monitoring, the
//            standard tier of a provider with one tier); the evidence
//            function answers "omitted: <why>" after checking it is absent
// Anything else fails the test: a 200 whose upstream body lacks the feature
// (dropped), a 5xx, a 400 naming nothing, an answer without what the feature
// promises. The matrix is written as markdown and compared with the
// checked-in docs/conformance.md, so the document cannot drift from the code;
// LLMGW_UPDATE_CONFORMANCE=1 rewrites it.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';

const T = { timeout: 600_000 };
const DOC = path.join(h.REPO_ROOT, 'docs', 'conformance.md');
const FEATURE_DIR = path.join(h.HERE, 'conformance');

export const CLIENTS = [
  {
    name: 'openai', label: 'OpenAI chat completions (`POST /v1/chat/completions`)', path: '/v1/chat/completions',
    base: (model, nonce) => ({ model, messages: [{ role: 'user', content: `hi ${nonce}` }], max_tokens: 64 }),
  },
  {
    name: 'anthropic', label: 'Anthropic Messages (`POST /v1/messages`)', path: '/v1/messages',
    base: (model, nonce) => ({ model, messages: [{ role: 'user', content: `hi ${nonce}` }], max_tokens: 64 }),
  },
  {
    name: 'responses', label: 'OpenAI Responses (`POST /v1/responses`)', path: '/v1/responses',
    base: (model, nonce) => ({ model, input: `hi ${nonce}`, max_output_tokens: 64 }),
  },
];

// Every driver, by the provider of h.driverProviders (or the default
// 'mock') that uses it; its model at the mock.
export const DRIVERS = [
  { name: 'openai', sel: 'mock/mock-gpt' },
  { name: 'openai-responses', sel: 'resp/mock-gpt' },
  { name: 'anthropic', sel: 'claude/mock-claude' },
  { name: 'gemini', sel: 'gem/mock-gemini' },
  { name: 'bedrock', sel: 'bed/mock-claude' },
  { name: 'ollama', sel: 'olla/mock-llama' },
];

// The driver that speaks each client's own wire format: the pass-through
// (docs/relay.md). A Responses client is translated even to an
// openai-responses provider (its facade has no pass-through).
const SAME = { openai: 'openai', anthropic: 'anthropic' };

let mock;
let gw;
let records = [];
let recordsRead = 0;

before(async () => {
  h.requireBinaries();
  mock = await h.startMock({ record: true });
  gw = await h.startGateway({ mock, extraProviders: h.driverProviders(mock) });
});

after(async () => {
  await h.stopAll();
});

async function loadFeatures() {
  const files = fs.readdirSync(FEATURE_DIR).filter((f) => f.endsWith('.mjs') && !f.startsWith('_')).sort();
  const all = [];
  for (const f of files) {
    const mod = await import(path.join(FEATURE_DIR, f));
    for (const feat of mod.default) all.push({ ...feat, file: f });
  }
  const ids = new Set();
  for (const f of all) {
    assert.ok(!ids.has(f.id), `feature id ${f.id} is defined twice`);
    ids.add(f.id);
  }
  return all;
}

/** The recorded upstream request whose body carries nonce, or null. The
 * record is read incrementally (h.recorded re-reads the whole file, which
 * over some 800 cells would be quadratic). */
function upstreamOf(nonce) {
  if (fs.existsSync(mock.recordPath)) {
    const text = fs.readFileSync(mock.recordPath, 'utf8');
    const lines = text.slice(recordsRead).split('\n');
    const last = lines.pop(); // '' or a line still being written
    recordsRead = text.length - last.length;
    for (const l of lines) if (l) records.push(JSON.parse(l));
  }
  const hits = records.filter((r) => r.body.includes(nonce));
  if (hits.length === 0) return null;
  assert.equal(hits.length, 1, `${hits.length} upstream bodies carry ${nonce}`);
  return { path: hits[0].path, body: h.tryParseJson(hits[0].body), raw: hits[0].body };
}

/** The refusal's text: "param: message" in every client format. */
function refusalText(client, j) {
  if (!j) return null;
  if (client === 'anthropic') return j.error?.message ?? null;
  const e = j.error;
  if (!e || typeof e.message !== 'string') return null;
  return e.param ? `${e.param}: ${e.message}` : e.message;
}

let seq = 0;

/** One cell: {kind: 'passed'|'mapped'|'refused'|'n/a', text}, or {fail}. */
async function cell(feature, client, driver) {
  const build = feature.request?.[client.name];
  if (!build) return { kind: 'n/a' };
  if (feature.skip?.[driver.name]) return { kind: 'n/a', text: feature.skip[driver.name] };
  const nonce = `cf${(++seq).toString(36)}x${Math.random().toString(36).slice(2, 8)}`;
  const sel = feature.selector ? feature.selector(driver.sel, driver.name) : driver.sel;
  const body = build(client.base(sel, nonce), nonce);
  const res = await fetch(`${gw.url}${client.path}`, {
    method: 'POST',
    headers: { ...h.AUTH, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(30_000),
  });
  const text = await res.text();
  const json = h.tryParseJson(text);
  const where = `${feature.id} from ${client.name} to ${driver.name}`;
  if (res.status === 400) {
    const why = refusalText(client.name, json);
    if (!why || !/\S+: \S/.test(why))
      return { fail: `${where}: a 400 that names no field: ${text.slice(0, 300)}` };
    if (upstreamOf(nonce))
      return { fail: `${where}: refused, yet a body reached the provider` };
    return { kind: 'refused', text: why };
  }
  if (res.status !== 200) return { fail: `${where}: HTTP ${res.status}: ${text.slice(0, 300)}` };
  const up = await h.waitFor(() => upstreamOf(nonce), { timeoutMs: 5000, what: `the upstream body of ${where}` })
    .catch(() => null);
  if (!up) return { fail: `${where}: answered 200 but no upstream body carries the nonce` };
  if (feature.answer) {
    const bad = feature.answer(client.name, driver.name, body.stream ? text : json);
    if (bad) return { fail: `${where}: the answer: ${bad}` };
  }
  if (SAME[client.name] === driver.name) return { kind: 'passed' };
  const ev = feature.evidence?.[driver.name];
  if (!ev) {
    if (feature.kind === 'answer') return { kind: 'mapped', text: feature.mapped };
    return { fail: `${where}: 200, and the feature has no evidence function for ${driver.name}` };
  }
  const found = ev(up.body, up.path, nonce);
  if (!found) return { fail: `${where}: dropped: the upstream body lacks it: ${up.raw.slice(0, 400)}` };
  if (found.startsWith('omitted: ')) return { kind: 'omitted', text: found.slice(9) };
  return { kind: 'mapped', text: found };
}

/** Runs fn over items, at most n at a time, in order of results. */
async function pool(items, n, fn) {
  const out = new Array(items.length);
  let next = 0;
  await Promise.all(Array.from({ length: n }, async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  }));
  return out;
}

function escapeCell(s) {
  return s.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

export function render(features, results) {
  const lines = [
    '# Conformance matrix',
    '',
    'Generated by `tests/integration/conformance.test.mjs` from the features in',
    '`tests/integration/conformance/*.mjs`; the suite fails when this file differs',
    'from what the code does (`LLMGW_UPDATE_CONFORMANCE=1` rewrites it). Each',
    'feature was sent from each client format to a provider of each driver (the',
    'mock provider, which records what it receives):',
    '',
    '- **passed**: the client\'s own wire format; the body reached the provider as the client wrote it (docs/relay.md; OpenAI chat to `openai`, Anthropic to `anthropic`: a Responses client is translated even to `openai-responses`);',
    '- **mapped**: translated; what reached the provider is named (the form in the provider\'s format);',
    '- **refused**: a 400 naming the field, before anything reached the provider; the numbered message follows each table;',
    '- **omitted**: a documented deliberate translation (docs/canonical.md): the provider has no such field, and the field cannot change the answer (an end-user id kept for abuse monitoring, the standard tier of a provider that has one tier);',
    '- **–**: the client format has no way to express the feature.',
    '',
    'No cell is a silent drop: a 200 whose upstream body lacks the feature fails the suite.',
    'The rules behind each mapping are in docs/canonical.md.',
  ];
  for (const client of CLIENTS) {
    lines.push('', `## ${client.label}`, '');
    lines.push(`| feature | ${DRIVERS.map((d) => `\`${d.name}\``).join(' | ')} |`);
    lines.push(`| --- | ${DRIVERS.map(() => '---').join(' | ')} |`);
    const notes = [];
    for (const f of features) {
      const cells = DRIVERS.map((d) => {
        const r = results.get(`${f.id}|${client.name}|${d.name}`);
        if (r.kind === 'n/a') return r.text ? `– (${escapeCell(r.text)})` : '–';
        if (r.kind === 'passed') return 'passed';
        if (r.kind === 'mapped') return `mapped: ${escapeCell(r.text)}`;
        if (r.kind === 'omitted') return `omitted: ${escapeCell(r.text)}`;
        let i = notes.indexOf(r.text);
        if (i < 0) i = notes.push(r.text) - 1;
        return `refused [${i + 1}]`;
      });
      if (cells.every((c) => c === '–')) continue;
      lines.push(`| ${escapeCell(f.label)} | ${cells.join(' | ')} |`);
    }
    if (notes.length) {
      lines.push('', 'Refusals:', '');
      notes.forEach((n, i) => lines.push(`${i + 1}. ${escapeCell(n)}`));
    }
  }
  return `${lines.join('\n')}\n`;
}

test('every feature, from every client format to every driver: passed, mapped or refused by name', T, async () => {
  const features = await loadFeatures();
  assert.ok(features.length > 0);
  const jobs = [];
  for (const f of features)
    for (const c of CLIENTS)
      for (const d of DRIVERS) jobs.push({ f, c, d });
  const out = await pool(jobs, 6, ({ f, c, d }) => cell(f, c, d));
  const results = new Map();
  const failures = [];
  jobs.forEach(({ f, c, d }, i) => {
    if (out[i].fail) failures.push(out[i].fail);
    results.set(`${f.id}|${c.name}|${d.name}`, out[i]);
  });
  assert.deepEqual(failures, [], `${failures.length} cells failed:\n${failures.join('\n')}`);
  const doc = render(features, results);
  if (process.env.LLMGW_UPDATE_CONFORMANCE === '1') fs.writeFileSync(DOC, doc);
  const checked = fs.existsSync(DOC) ? fs.readFileSync(DOC, 'utf8') : '';
  assert.equal(checked, doc,
    'docs/conformance.md differs from what the code does; rerun with LLMGW_UPDATE_CONFORMANCE=1 and review the diff');
});
