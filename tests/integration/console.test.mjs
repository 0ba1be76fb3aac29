// The web console (/console/) in a real browser: Debian's chromium driven
// headless by puppeteer-core against PostgreSQL + llmgw-controlplane + a
// data plane + the mock provider. An operator signs in, creates a secret,
// providers, routes and a key in the console, sends a chat through the
// data plane with that key, finds its ledger row and exact cost in the
// Ledger page and in the Usage chart and table, reorders a route and sees
// the data plane answer from the new first entry, meets a conflicting edit
// from a second browser session, a read-scope token, and the router's plan
// preview skipping a disabled provider. Every request a page made stays on
// the console's origin; no console error, page error or CSP violation.
//
// LLMGW_CONSOLE_DIR (optional): serve the console from that folder
// (--console-dir) instead of the copy built into the binary.
// LLMGW_CHROMIUM (optional): the browser (default /usr/bin/chromium).
// Screenshots go under a temp dir (kept with LLMGW_KEEP_TMP=1).

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import puppeteer from 'puppeteer-core';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { formatMoney } from '../../controlplane/console/money.js';

const T = { timeout: 120_000 };
const KEY = masterKey();
const CHROMIUM = process.env.LLMGW_CHROMIUM || '/usr/bin/chromium';
const WAIT = 15_000; // every browser wait is bounded by this
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
  + "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

let pg;
let mock;
let cp;
let cfg;
let dp;
let browser;
let page; // the main session
let shots;
let apiKey; // the key the console created (its plaintext, read from the page)
let firstCost; // the first chat's cost in picodollars (BigInt)
const requests = []; // every request any page made: {url, page}
const problems = []; // console errors, page errors, CSP violations
const expectedFailures = new Map(); // HTTP status -> how many failed loads the flow causes on purpose

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  if (!fs.existsSync(CHROMIUM)) {
    throw new Error(`chromium not found at ${CHROMIUM}: install Debian's chromium (tools/deps.sh) or set LLMGW_CHROMIUM`);
  }
  pg = await h.startPostgres();
  mock = await h.startMock();
  const args = process.env.LLMGW_CONSOLE_DIR ? ['--console-dir', path.resolve(process.env.LLMGW_CONSOLE_DIR)] : [];
  cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY.hex }, args });
  cfg = new Config(cp, pg, KEY);
  dp = await h.startGatewayCP({ controlPlane: `127.0.0.1:${cp.listening.grpc_port}`, replicaId: 'dp-console' });
  shots = h.makeTmpDir();
  console.log(`console screenshots: ${shots}${process.env.LLMGW_KEEP_TMP ? '' : ' (removed at the end; LLMGW_KEEP_TMP=1 keeps them)'}`);
  browser = await h.withTimeout(puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--no-default-browser-check', '--disable-extensions',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--metrics-recording-only'],
  }), 30_000, 'chromium to start');
  page = await newPage(browser);
});

after(async () => {
  try {
    if (browser) await h.withTimeout(browser.close(), 10_000, 'chromium to close');
  } finally {
    await h.stopAll();
  }
});

/** A page with the watchers every page gets. */
async function newPage(ctx) {
  const p = await ctx.newPage();
  p.setDefaultTimeout(WAIT);
  await p.setViewport({ width: 1280, height: 800 });
  p.on('request', (r) => requests.push(r.url()));
  p.on('console', (m) => {
    if (m.type() !== 'error' && !/Content.Security.Policy|Refused to/i.test(m.text())) return;
    const status = /the server responded with a status of (\d+)/.exec(m.text());
    if (status && expectedFailures.get(Number(status[1])) > 0) {
      expectedFailures.set(Number(status[1]), expectedFailures.get(Number(status[1])) - 1);
      return;
    }
    problems.push(`console ${m.type()}: ${m.text()} (${m.location()?.url ?? ''})`);
  });
  p.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  return p;
}

/** The flow makes some API calls fail on purpose: Chromium logs each failed load. */
function expectFailure(status) {
  expectedFailures.set(status, (expectedFailures.get(status) ?? 0) + 1);
}

/** Navigates by hash (the same hash: renders it again) and waits for the page to have rendered. */
async function go(p, hash) {
  const before = await p.evaluate((x) => {
    const seq = Number(document.querySelector('#main .page')?.dataset.seq ?? 0);
    if (location.hash === x) window.dispatchEvent(new HashChangeEvent('hashchange'));
    else location.hash = x;
    return seq;
  }, hash);
  await p.waitForFunction((x, s) => {
    const pg2 = document.querySelector('#main .page');
    return location.hash === x && pg2 && Number(pg2.dataset.seq) > s && pg2.dataset.hash === x && pg2.dataset.ready === 'true';
  }, { timeout: WAIT }, hash, before);
}

async function waitText(p, selector, text, what) {
  try {
    await p.waitForFunction((s, t) => [...document.querySelectorAll(s)].some((e) => e.textContent.includes(t)),
      { timeout: WAIT }, selector, text);
  } catch (e) {
    const seen = await p.$$eval(selector, (es) => es.map((x) => x.textContent).join(' | ')).catch(() => '');
    throw new Error(`${what ?? `"${text}" in ${selector}`}: ${e.message}; saw: ${seen.slice(0, 2000)}`);
  }
}

async function fill(p, selector, value) {
  await p.$eval(selector, (e) => { e.value = ''; });
  await p.type(selector, value);
}

async function shot(p, name) {
  await p.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true });
}

async function signIn(p, token) {
  await p.goto(`${cp.url}/console/`, { waitUntil: 'load' });
  await p.waitForSelector('#token', { visible: true });
  await fill(p, '#token', token);
  await p.click('#signin-form button[type=submit]');
  await p.waitForSelector('#main .page[data-ready="true"]', { visible: true });
}

/** The data plane serving the configuration as it is now. */
async function dpCurrent() {
  const v = cfg.version();
  await h.waitFor(async () => (await h.request(dp.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version >= v,
    { what: `the data plane serving version ${v}`, timeoutMs: 20_000 });
}

async function chat(model = 'chat') {
  const res = await h.request(dp.port, {
    path: '/v1/chat/completions',
    headers: { authorization: `Bearer ${apiKey}` },
    body: { model, messages: [{ role: 'user', content: 'hello from the console test' }] },
  });
  assert.equal(res.status, 200, res.text);
  return res;
}

/** Creates a route in the console's route editor; entries [[provider, model]]. */
async function createRoute(p, name, entries) {
  await go(p, '#/routes/~new');
  const f = 'form[aria-label="New route"]';
  await fill(p, `${f} [name="name"]`, name);
  for (let i = 0; i < entries.length; i++) {
    if (i > 0) {
      await p.$$eval(`${f} button`, (bs) => bs.find((b) => b.textContent === 'Add entry').click());
      await p.waitForSelector(`${f} [name="entries[${i}].model"]`);
    }
    await p.select(`${f} [name="entries[${i}].provider"]`, entries[i][0]);
    await fill(p, `${f} [name="entries[${i}].model"]`, entries[i][1]);
  }
  await p.click(`${f} button[type=submit]`);
  await p.waitForFunction((x) => location.hash === `#/routes/${x}`
    && document.querySelector('#main .page')?.dataset.ready === 'true', { timeout: WAIT }, name);
}

test('the console is served with its security headers', T, async () => {
  const redirect = await h.request(cp.port, { method: 'GET', path: '/console' });
  assert.equal(redirect.status, 308);
  assert.equal(redirect.headers.location, '/console/');
  for (const p of ['/console/', '/console/app.js', '/console/console.css', '/console/money.js']) {
    const r = await h.request(cp.port, { method: 'GET', path: p });
    assert.equal(r.status, 200, p);
    assert.equal(r.headers['content-security-policy'], CSP, p);
    assert.equal(r.headers['x-frame-options'], 'DENY', p);
    assert.equal(r.headers['x-content-type-options'], 'nosniff', p);
    assert.equal(r.headers['referrer-policy'], 'no-referrer', p);
    assert.equal(r.headers['cross-origin-opener-policy'], 'same-origin', p);
    assert.equal(r.headers['cross-origin-resource-policy'], 'same-origin', p);
    assert.equal(r.headers['cache-control'], 'no-cache', p);
  }
  const html = await h.request(cp.port, { method: 'GET', path: '/console/' });
  assert.match(html.headers['content-type'], /^text\/html; charset=utf-8/);
  assert.doesNotMatch(html.text, /<script(?![^>]*\bsrc=)[^>]*>|\sstyle=|\son[a-z]+=/i, 'no inline script, style or handler');
  assert.match((await h.request(cp.port, { method: 'GET', path: '/console/app.js' })).headers['content-type'], /^text\/javascript/);
  assert.equal((await h.request(cp.port, { method: 'GET', path: '/console/nope.js' })).status, 404);
  // The browser sees the same headers.
  const res = await page.goto(`${cp.url}/console/`, { waitUntil: 'load' });
  assert.equal(res.headers()['content-security-policy'], CSP);
  assert.equal(res.headers()['x-frame-options'], 'DENY');
});

test('sign-in: a bad token is refused with a message; the bootstrap token signs in', T, async () => {
  await page.waitForSelector('#token', { visible: true });
  expectFailure(401);
  await fill(page, '#token', 'llmgw-admin-not-a-real-token');
  await page.click('#signin-form button[type=submit]');
  await waitText(page, '#signin-error', 'not valid');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('llmgw.console.token')), null);
  await fill(page, '#token', cp.token);
  await page.click('#signin-form button[type=submit]');
  await page.waitForSelector('#main .page[data-ready="true"]', { visible: true });
  await waitText(page, '#who', 'bootstrap');
  await waitText(page, '#who', 'scope admin');
  assert.equal(await page.evaluate(() => location.hash), '#/overview');
  assert.equal(await page.evaluate(() => sessionStorage.getItem('llmgw.console.token')), cp.token);
  await waitText(page, '#main', 'dp-console', 'the data plane on the Overview');
  await shot(page, 'overview');
});

test('a secret, two providers (one then disabled), the field of a bad value', T, async () => {
  await go(page, '#/secrets');
  const sf = 'form[aria-label="New secret"]';
  await fill(page, `${sf} [name="name"]`, 'mock-key');
  await fill(page, `${sf} [name="value"]`, 'sk-mock-upstream');
  await page.click(`${sf} button[type=submit]`);
  await waitText(page, '#main table', 'mock-key');
  assert.ok(!(await page.content()).includes('sk-mock-upstream'), 'a secret value is never shown');
  await shot(page, 'secrets');

  await go(page, '#/providers');
  const pf = 'form[aria-label="New provider"]';
  // A name the API refuses: its message shows by the name field.
  expectFailure(400);
  await fill(page, `${pf} [name="name"]`, 'bad name');
  await fill(page, `${pf} [name="base_url"]`, mock.v1);
  await page.click(`${pf} button[type=submit]`);
  await waitText(page, `${pf} [data-field="name"] .field-error`, 'name');
  assert.equal(await page.$eval(`${pf} [name="name"]`, (e) => e.getAttribute('aria-invalid')), 'true');

  await fill(page, `${pf} [name="name"]`, 'mock');
  await page.select(`${pf} [name="driver"]`, 'openai');
  await page.select(`${pf} [name="credential_ref"]`, 'mock-key');
  await page.click(`${pf} button[type=submit]`);
  await page.waitForSelector('tr[data-name="mock"]');
  await go(page, '#/providers');
  await fill(page, `${pf} [name="name"]`, 'mockoff');
  await fill(page, `${pf} [name="base_url"]`, mock.v1);
  await page.click(`${pf} button[type=submit]`);
  await page.waitForSelector('tr[data-name="mockoff"]');
  await page.click('button[aria-label="Disable provider mockoff"]');
  await waitText(page, 'tr[data-name="mockoff"]', 'disabled');
  const api = await cp.admin('GET', '/v1/admin/providers/mock');
  assert.equal(api.json.base_url, mock.v1);
  assert.equal(api.json.credential_ref, 'mock-key');
  assert.equal((await cp.admin('GET', '/v1/admin/providers/mockoff')).json.enabled, false);
  await shot(page, 'providers');
  // Prices, so the chat has a cost (the console has no prices page).
  await cfg.api('POST', '/v1/admin/prices', { provider: 'mock', model: 'm1', input_price: 1_234_567, output_price: 10_000_001 }, 201);
  await cfg.api('POST', '/v1/admin/prices', { provider: 'mock', model: 'm2', input_price: 3_000_000, output_price: 7_000_003 }, 201);
});

test('routes and a key made in the console; a chat with that key', T, async () => {
  await createRoute(page, 'chat', [['mock', 'm1'], ['mock', 'm2']]);
  await createRoute(page, 'mixed', [['mockoff', 'm3'], ['mock', 'm1']]);
  const r = (await cp.admin('GET', '/v1/admin/routes/chat')).json;
  assert.deepEqual(r.entries.map((e) => e.model), ['m1', 'm2']);
  await go(page, '#/routes');
  await page.waitForSelector('tr[data-name="chat"]');
  await shot(page, 'routes');

  await go(page, '#/keys');
  const kf = 'form[aria-label="New key"]';
  await fill(page, `${kf} [name="id"]`, 'k-console');
  await fill(page, `${kf} [name="name"]`, 'console test');
  await page.click(`${kf} button[type=submit]`);
  await page.waitForSelector('input.secret-once');
  apiKey = await page.$eval('input.secret-once', (e) => e.value);
  assert.match(apiKey, /^llmgw-[0-9a-f]{64}$/);
  await page.waitForSelector('tr[data-id="k-console"]');
  await shot(page, 'keys');
  assert.ok(!requests.some((u) => u.includes(apiKey) || u.includes(cp.token)), 'no secret in any URL');

  await dpCurrent();
  const res = await chat();
  assert.equal(res.headers['x-llmgw-model'], 'm1');
  firstCost = BigInt(res.headers['x-llmgw-cost-picodollars']);
  assert.ok(firstCost > 0n);
  const rid = res.headers['x-request-id'];

  // The Ledger page: the row among the recent attempts, its cost rendered exactly.
  const row = await h.waitFor(async () => {
    const l = await cp.admin('GET', `/v1/admin/ledger?request_id=${encodeURIComponent(rid)}`);
    return l.json?.data?.[0];
  }, { what: `the ledger row of ${rid}`, timeoutMs: 20_000 });
  assert.equal(BigInt(row.cost_picodollars), firstCost);
  const money = formatMoney(firstCost, row.currency);
  // Independently of money.js: the text read back as a decimal is the API's integer, to the picodollar.
  const m = /^\$([0-9,]+)\.([0-9]{2,12})$/.exec(money);
  assert.ok(m, money);
  assert.equal(BigInt(m[1].replace(/,/g, '')) * 10n ** 12n + BigInt(m[2].padEnd(12, '0')), firstCost, money);
  await go(page, '#/ledger');
  const sel = `tr[data-request="${rid}"]`;
  await page.waitForSelector(sel);
  assert.equal(await page.$eval(`${sel} td[data-col="Cost"]`, (e) => e.textContent), money);
  assert.equal(await page.$eval(`${sel} td[data-col="Route"]`, (e) => e.textContent), 'chat');
  // Filtered by key and status.
  await fill(page, 'form[aria-label="Ledger filters"] [name="key_id"]', 'k-console');
  await fill(page, 'form[aria-label="Ledger filters"] [name="status"]', '200');
  await page.click('form[aria-label="Ledger filters"] button[type=submit]');
  await page.waitForFunction((s) => document.querySelectorAll('.ledger-results tbody tr').length === 1
    && document.querySelector(s), { timeout: WAIT }, sel);
  await shot(page, 'ledger');
  await page.click(`${sel} a`);
  await page.waitForSelector('article.attempt[data-attempt="1"]');
  await waitText(page, 'article.attempt[data-attempt="1"]', money);
  await waitText(page, 'article.attempt[data-attempt="1"]', 'mock/m1');
  await shot(page, 'ledger-request');

  // The Usage page: a bar for the route and the same amount in the table.
  const usage = await cp.admin('GET', '/v1/admin/usage?group_by=route');
  const g = usage.json.groups.find((x) => x.route === 'chat');
  assert.equal(BigInt(g.cost_picodollars), firstCost);
  await go(page, '#/usage');
  await page.waitForSelector('svg.chart rect.col[data-label^="chat"]');
  const bar = await page.$eval('svg.chart rect.col[data-label^="chat"]', (e) => ({
    value: e.dataset.value, text: e.dataset.text, height: Number(e.getAttribute('height')),
  }));
  assert.equal(bar.value, firstCost.toString());
  assert.equal(bar.text, money);
  assert.ok(bar.height > 0);
  assert.equal(await page.$eval('tr[data-group^="chat"] td[data-col="Cost"]', (e) => e.textContent), money);
  await shot(page, 'usage');

  // A failover's story: the first target fails (the mock answers 503 for
  // this model), the second serves; the request's page shows every attempt,
  // the failed ones with their status and class, the last one's answer.
  await cfg.api('POST', '/v1/admin/routes', {
    name: 'failover', entries: [{ provider: 'mock', model: 'm1#status=503' }, { provider: 'mock', model: 'm2' }],
  }, 201);
  await dpCurrent();
  const fo = await chat('failover');
  const foId = fo.headers['x-request-id'];
  const foRows = await h.waitFor(async () => {
    const l = await cp.admin('GET', `/v1/admin/ledger?request_id=${encodeURIComponent(foId)}`);
    const d = l.json?.data ?? [];
    return d.length >= 2 && d[d.length - 1].status === 200 ? d : null;
  }, { what: `the ledger rows of ${foId}`, timeoutMs: 20_000 });
  await go(page, `#/ledger/${encodeURIComponent(foId)}`);
  await page.waitForSelector(`article.attempt[data-attempt="${foRows.length}"]`);
  const cards = await page.$$eval('article.attempt', (as) => as.map((a) => ({
    n: a.dataset.attempt, failed: a.classList.contains('failed'), text: a.textContent,
  })));
  assert.equal(cards.length, foRows.length);
  for (const [i, r] of foRows.entries()) {
    assert.equal(cards[i].n, String(r.attempt));
    assert.equal(cards[i].failed, r.status !== 200, JSON.stringify(cards[i]));
    assert.ok(cards[i].text.includes(String(r.status)), cards[i].text);
    if (r.failure_class) assert.ok(cards[i].text.includes(r.failure_class), `${r.failure_class} in ${cards[i].text}`);
  }
  assert.ok(cards[0].text.includes('mock/m1#status=503'), cards[0].text);
  assert.ok(cards[cards.length - 1].text.includes('mock/m2'));
  // Side by side: the cards share a row at 1280 px.
  const tops = await page.$$eval('article.attempt', (as) => as.map((a) => Math.round(a.getBoundingClientRect().top)));
  assert.equal(tops[0], tops[1], `cards side by side: ${tops}`);
  await shot(page, 'ledger-failover');
});

test('reordering a route in the console changes what the data plane serves', T, async () => {
  await go(page, '#/routes/chat');
  await page.click('button[aria-label="Move mock/m1 down"]');
  const order = await page.$$eval('li.entry', (ls) => ls.map((l) => l.dataset.target));
  assert.deepEqual(order, ['mock/m2', 'mock/m1']);
  // The moved entry's button keeps the focus (keyboard users stay in place).
  assert.equal(await page.evaluate(() => document.activeElement?.getAttribute('aria-label')), 'Move mock/m1 up');
  await page.click('form[aria-label="Edit route chat"] button[type=submit]');
  await waitText(page, '#main h2', 'Route chat (version 2)');
  assert.deepEqual((await cp.admin('GET', '/v1/admin/routes/chat')).json.entries.map((e) => e.model), ['m2', 'm1']);
  await shot(page, 'route-editor');
  await dpCurrent();
  const res = await chat();
  assert.equal(res.headers['x-llmgw-model'], 'm2', 'the new first entry answers');
});

test('a conflicting edit from a second session says "changed by someone else" and reloads', T, async () => {
  const other = await browser.createBrowserContext();
  try {
    const p2 = await newPage(other);
    await signIn(p2, cp.token);
    await go(p2, '#/routes/chat');
    await go(page, '#/routes/chat');
    // The first session saves a change...
    await page.click('button[aria-label="Move mock/m1 up"]');
    await page.click('form[aria-label="Edit route chat"] button[type=submit]');
    await waitText(page, '#main h2', 'Route chat (version 3)');
    // ...the second, still on version 2, saves its own.
    expectFailure(412);
    await fill(p2, 'form[aria-label="Edit route chat"] [name="aliases"]', 'chat-alias');
    await p2.click('form[aria-label="Edit route chat"] button[type=submit]');
    await waitText(p2, 'form[aria-label="Edit route chat"] .form-error', 'Changed by someone else');
    await shot(p2, 'conflict');
    assert.deepEqual((await cp.admin('GET', '/v1/admin/routes/chat')).json.aliases, [], 'the stale write was refused');
    await p2.click('form[aria-label="Edit route chat"] .form-error button.reload');
    await waitText(p2, '#main h2', 'Route chat (version 3)');
    assert.deepEqual(await p2.$$eval('li.entry', (ls) => ls.map((l) => l.dataset.target)), ['mock/m1', 'mock/m2']);
  } finally {
    await other.close();
  }
});

test('a read-scope token: writes hidden, and a 403 shows the scope message', T, async () => {
  const ro = await cfg.api('POST', '/v1/admin/admin-tokens', { name: 'console-ro', scope: 'read' }, 201);
  const op = await cfg.api('POST', '/v1/admin/admin-tokens', { name: 'console-op', scope: 'operator' }, 201);
  const other = await browser.createBrowserContext();
  try {
    const p3 = await newPage(other);
    await signIn(p3, ro.token);
    await waitText(p3, '#who', 'console-ro');
    await waitText(p3, '#who', 'scope read');
    await go(p3, '#/providers');
    await waitText(p3, '#main .notice', 'scope read');
    assert.equal(await p3.$eval('form[aria-label="New provider"] button[type=submit]', (b) => b.offsetParent === null), true,
      'the create button is hidden for a read token');
    await shot(p3, 'read-scope');

    // An operator's session whose token is narrowed to read meanwhile: the write gets the API's 403, shown.
    await p3.click('#signout');
    await p3.waitForSelector('#token', { visible: true });
    assert.equal(await p3.evaluate(() => sessionStorage.getItem('llmgw.console.token')), null);
    await signIn(p3, op.token);
    await waitText(p3, '#who', 'scope operator');
    await go(p3, '#/keys');
    await cfg.api('PATCH', `/v1/admin/admin-tokens/${op.id}`, { scope: 'read' }, 200);
    expectFailure(403);
    await p3.click('button[aria-label="Disable key k-console"]');
    await waitText(p3, '#banner', 'scope');
    const text = await p3.$eval('#banner', (e) => e.textContent);
    assert.match(text, /Not allowed with this token's scope: .*read/, text);
    await waitText(p3, '#who', 'scope read'); // the console read its scope again
    assert.equal((await cp.admin('GET', '/v1/admin/keys/k-console')).json.status, 'active');
    await shot(p3, 'forbidden');
  } finally {
    await other.close();
  }
});

test('the plan preview shows the disabled provider skipped, with its reason; drag reorders', T, async () => {
  await go(page, '#/routes/mixed');
  const pf = 'form[aria-label="Preview the plan"]';
  assert.equal(await page.$eval(`${pf} [name="model"]`, (e) => e.value), 'mixed');
  await page.click(`${pf} button[type=submit]`);
  await page.waitForSelector('.plan');
  const plan = await page.$eval('.plan', (e) => ({
    status: e.dataset.status,
    candidates: [...e.querySelectorAll('ol.candidates li')].map((li) => li.textContent),
    skips: [...e.querySelectorAll('tbody tr')].map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
  }));
  assert.equal(plan.status, '200');
  assert.deepEqual(plan.candidates, ['mock/m1']);
  assert.equal(plan.skips.length, 1, JSON.stringify(plan.skips));
  assert.equal(plan.skips[0][0], 'mockoff/m3');
  assert.equal(plan.skips[0][1], 'disabled');
  assert.match(plan.skips[0][2], /disabled/);
  await shot(page, 'plan-preview');

  // The same editor reorders by drag: the second entry's handle dropped on the first (both in view
  // first: puppeteer scrolling the page in the middle of a drag cancels it).
  await page.evaluate(() => document.querySelector('ol.entries').scrollIntoView({ block: 'center' }));
  const handle = await page.$('li.entry[data-index="1"] .handle');
  const first = await page.$('li.entry[data-index="0"]');
  await handle.drag(first);
  await first.drop(handle);
  await page.waitForFunction(() => document.querySelector('li.entry[data-index="0"]')?.dataset.target === 'mock/m1',
    { timeout: WAIT });
  await page.click('form[aria-label="Edit route mixed"] button[type=submit]');
  await waitText(page, '#main h2', 'Route mixed (version 2)');
  assert.deepEqual((await cp.admin('GET', '/v1/admin/routes/mixed')).json.entries.map((e) => `${e.provider}/${e.model}`),
    ['mock/m1', 'mockoff/m3']);
});

test('every other page renders; screenshots at 1280x800 and narrow', T, async () => {
  await cfg.api('POST', '/v1/admin/teams', { name: 'team-a' }, 201);
  await go(page, '#/teams');
  await waitText(page, '#main table', 'team-a');
  await shot(page, 'teams');
  await go(page, '#/projects');
  const pf = 'form[aria-label="New project"]';
  await fill(page, `${pf} [name="name"]`, 'proj-a');
  await page.click(`${pf} button[type=submit]`);
  await waitText(page, '#main table', 'proj-a');
  await shot(page, 'projects');

  await go(page, '#/limits');
  const lf = 'form[aria-label="New limit"]';
  await fill(page, `${lf} [name="id"]`, 'lim-console');
  await fill(page, `${lf} [name="scope"]`, 'k-console');
  await page.select(`${lf} [name="period"]`, 'month');
  await fill(page, `${lf} [name="amount"]`, '0.25');
  await page.click(`${lf} button[type=submit]`);
  await page.waitForSelector('tr[data-id="lim-console"]');
  const lim = (await cp.admin('GET', '/v1/admin/limits/lim-console')).json;
  assert.equal(lim.amount, 250_000_000_000, '$0.25 is 2.5 * 10^11 picodollars');
  // The bar: what the limit's window has been charged (a chat under it, once
  // its ledger row lands) against the amount.
  await dpCurrent();
  await chat();
  const spentPd = await h.waitFor(async () => {
    const w = (await cp.admin('GET', '/v1/admin/limit-windows')).json.data.find((x) => x.id === 'lim-console');
    return w && w.spent > 0 ? BigInt(w.spent) : null;
  }, { what: 'the chat charged to lim-console\'s window', timeoutMs: 20_000 });
  await page.reload();
  await page.waitForSelector('tr[data-id="lim-console"]');
  await waitText(page, 'tr[data-id="lim-console"]', `${formatMoney(spentPd, 'USD')} of $0.25`);
  const meter = await page.$eval('tr[data-id="lim-console"] [role="meter"]', (e) => Number(e.getAttribute('aria-valuenow')));
  // The bar's share, as the page rounds it (one decimal of a percent).
  const share = Number((spentPd * 100_000n) / 250_000_000_000n) / 1000;
  assert.ok(Math.abs(meter - share) <= 0.05, `meter ${meter}, spent ${spentPd} of 2.5e11 is ${share}%`);
  await shot(page, 'limits');
  // Edited in the console (the editor reads the item with its ETag and
  // saves with If-Match): a new amount, exact.
  await page.click('button[aria-label="Edit limit lim-console"]');
  const ef = 'form[aria-label="Edit limit lim-console"]';
  await page.waitForSelector(ef);
  assert.equal(await page.$eval(`${ef} [name="amount"]`, (e) => e.value), '0.25');
  await fill(page, `${ef} [name="amount"]`, '0.500000000001');
  await page.click(`${ef} button[type=submit]`);
  await page.waitForSelector('tr[data-id="lim-console"]');
  assert.equal((await cp.admin('GET', '/v1/admin/limits/lim-console')).json.amount, 500_000_000_001);
  // A team edited, a project deleted (the button asks once more).
  await go(page, '#/teams/team-a');
  const tf = 'form[aria-label="Edit team team-a"]';
  await fill(page, `${tf} [name="description"]`, 'edited in the console');
  await page.click(`${tf} button[type=submit]`);
  await page.waitForSelector('#main table');
  assert.equal((await cp.admin('GET', '/v1/admin/teams/team-a')).json.description, 'edited in the console');
  await go(page, '#/projects');
  await page.click('button[aria-label="Delete project proj-a"]');
  await page.click('button[aria-label="Confirm: delete project proj-a"]');
  await h.waitFor(async () => (await cp.admin('GET', '/v1/admin/projects/proj-a')).status === 404,
    { what: 'proj-a deleted' });

  await go(page, '#/audit');
  await waitText(page, '#main table', 'routes chat');
  await shot(page, 'audit');

  for (const [hash, name] of [['#/overview', 'overview-2'], ['#/secrets', 'secrets-2'], ['#/providers', 'providers-2']]) {
    await go(page, hash);
    await shot(page, name);
  }
  // Narrow: the layout folds; nothing forces a horizontal scroll of the page.
  await page.setViewport({ width: 420, height: 800 });
  for (const [hash, name] of [['#/overview', 'narrow-overview'], ['#/routes/chat', 'narrow-route'], ['#/usage', 'narrow-usage']]) {
    await go(page, hash);
    await shot(page, name);
    const w = await page.evaluate(() => document.documentElement.scrollWidth);
    assert.ok(w <= 420, `${hash}: page is ${w}px wide at 420`);
  }
  await page.setViewport({ width: 1280, height: 800 });
  const files = fs.readdirSync(shots).filter((f) => f.endsWith('.png'));
  assert.ok(files.length >= 15, files.join(' '));
});

test('API answers are parsed with exact big integers (the reviver\'s source text)', T, async () => {
  const r = await page.evaluate(async () => {
    const api = await import('./api.js');
    const j = api.parseExact('{"n":9007199254740993,"cost_picodollars":5,"small":7,"f":1.5,"saved_picodollars":null,'
      + '"list":[{"cost_picodollars":123}]}');
    return {
      n: typeof j.n === 'bigint' ? j.n.toString() : `not a BigInt: ${j.n}`,
      cost: typeof j.cost_picodollars, small: typeof j.small, f: j.f, saved: j.saved_picodollars,
      nested: typeof j.list[0].cost_picodollars,
      out: api.stringifyExact({ amount: 4000000000000000000n, x: [1n, 'a'] }),
    };
  });
  assert.deepEqual(r, {
    n: '9007199254740993', cost: 'bigint', small: 'number', f: 1.5, saved: null, nested: 'bigint',
    out: '{"amount":4000000000000000000,"x":[1,"a"]}',
  });
});

test('keyboard: the navigation and a form are operable without a mouse', T, async () => {
  await go(page, '#/overview');
  await page.focus('#nav a[href="#/routes"]');
  await page.keyboard.press('Enter');
  await page.waitForFunction(() => document.querySelector('#main .page')?.dataset.hash === '#/routes'
    && document.querySelector('#main .page')?.dataset.ready === 'true', { timeout: WAIT });
  // Every control on every form has a label.
  for (const hash of ['#/providers', '#/secrets', '#/routes/chat', '#/keys', '#/limits', '#/usage', '#/ledger']) {
    await go(page, hash);
    const unlabeled = await page.$$eval('#main input, #main select, #main textarea',
      (cs) => cs.filter((c) => !(c.labels && c.labels.length) && !c.getAttribute('aria-label')).map((c) => c.name || c.id));
    assert.deepEqual(unlabeled, [], `${hash}: controls without a label`);
  }
  // A button's text stays readable when hovered and when focused (WCAG AA:
  // a contrast of at least 4.5 between its text and its background).
  await go(page, '#/routes/chat');
  const contrast = () => page.$eval('form[aria-label="Edit route chat"] button[type=submit]', (b) => {
    const rgb = (c) => c.match(/[0-9.]+/g).slice(0, 3).map(Number);
    const lum = ([r, g, bl]) => [r, g, bl].map((v) => {
      const x = v / 255;
      return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4;
    }).reduce((a, v, i) => a + v * [0.2126, 0.7152, 0.0722][i], 0);
    const st = getComputedStyle(b);
    const [l1, l2] = [lum(rgb(st.color)), lum(rgb(st.backgroundColor))].sort((a, z) => z - a);
    return (l1 + 0.05) / (l2 + 0.05);
  });
  assert.ok(await contrast() >= 4.5, `at rest: ${await contrast()}`);
  await page.hover('form[aria-label="Edit route chat"] button[type=submit]');
  assert.ok(await contrast() >= 4.5, `hovered: ${await contrast()}`);
  await page.focus('form[aria-label="Edit route chat"] button[type=submit]');
  assert.ok(await contrast() >= 4.5, `focused: ${await contrast()}`);
  await page.mouse.move(0, 0);
});

test('no request left the origin; no console error, page error or CSP violation', T, async () => {
  assert.ok(requests.length > 20, `${requests.length} requests seen`);
  // data: URLs are not requests to anywhere (Chromium's own icons of date inputs); only images, as the CSP allows.
  const foreign = requests.filter((u) => !u.startsWith(`${cp.url}/`) && !u.startsWith('data:image/'));
  assert.deepEqual(foreign, [], 'requests to another origin');
  assert.ok(requests.some((u) => u.startsWith(`${cp.url}/v1/admin/`)), 'the API calls were seen');
  assert.deepEqual(problems, []);
  assert.deepEqual([...expectedFailures.entries()].filter(([, n]) => n !== 0), [],
    'every failure the flow provoked was seen in the browser');
});
