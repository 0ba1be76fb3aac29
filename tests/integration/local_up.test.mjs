// deploy/local/up.sh and down.sh, and the README's five-minute tour, as a
// newcomer runs them: up.sh starts PostgreSQL, the control plane, a data
// plane and the mock, configured through the admin API; the tour's block
// (between <!-- tour:begin --> and <!-- tour:end --> in README.md) runs as
// printed, step by step, and each step's output is checked; demo.env sourced
// with `set -a` gives the values the scripts used; down.sh leaves no recorded
// process; a second up.sh keeps the database (the same key, the tour's
// route), `--fresh` starts empty. tools/llmgwctl is driven against every
// admin resource the OpenAPI document lists.
//
// The state dir and the ports are the test's own (LLMGW_RUN_DIR, LLMGW_*_PORT),
// so a developer's own up.sh is left alone; the tour's text is run with only
// those substituted (.run/, build/, the tour mock's port 9091).

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';

const T = { timeout: 240_000 };
const UP = path.join(h.REPO_ROOT, 'deploy/local/up.sh');
const DOWN = path.join(h.REPO_ROOT, 'deploy/local/down.sh');
const CTL = path.join(h.REPO_ROOT, 'tools/llmgwctl');
const run = h.makeTmpDir();
let env;
let ports;

function sh(args, opts = {}) {
  const r = spawnSync('bash', args, { env: { ...env, ...opts.env }, cwd: h.REPO_ROOT, encoding: 'utf8', timeout: opts.timeout ?? 120_000 });
  return { ...r, out: `${r.stdout}${r.stderr}${r.error ? `\n${r.error.message}` : ''}` };
}

const pids = () => h.pidFiles(run);
const { alive } = h;

/** What `set -a; source FILE` exports, as bash sees it. */
function sourced(file, names) {
  const r = sh(['-c', `set -a; source "$1"; set +a; for n in ${names.join(' ')}; do printf '%s=%s\\n' "$n" "\${!n}"; done`, 'x', file]);
  assert.equal(r.status, 0, r.out);
  return Object.fromEntries(r.stdout.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]));
}

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  ports = { gw: await h.deadPort(), admin: await h.deadPort(), grpc: await h.deadPort(), mock: await h.deadPort(), pg: await h.deadPort(), tour: await h.deadPort() };
  env = {
    ...process.env, LLMGW_RUN_DIR: run, LLMGW_BUILD_DIR: h.BUILD_DIR, LLMGW_SKIP_DEPS: '1',
    LLMGW_PORT: String(ports.gw), LLMGW_ADMIN_PORT: String(ports.admin), LLMGW_GRPC_PORT: String(ports.grpc),
    LLMGW_MOCK_PORT: String(ports.mock), LLMGW_PG_PORT: String(ports.pg),
  };
  // The tour reaches real providers only when asked: keep them out.
  delete env.OPENAI_API_KEY;
  delete env.ANTHROPIC_API_KEY;
});

after(() => {
  if (env && pids().length) sh([DOWN]);
  // down.sh keeps the database for the next up.sh: this one is the test's.
  // (As root its data may live under /var/tmp, .run/pg linking to it.)
  const pg = path.join(run, 'pg');
  if (fs.existsSync(pg)) fs.rmSync(fs.realpathSync(pg), { recursive: true, force: true });
  const tour = path.join(run, 'tour-mock.pid');
  if (fs.existsSync(tour)) {
    const pid = Number(fs.readFileSync(tour, 'utf8'));
    if (alive(pid)) process.kill(pid, 'SIGTERM');
  }
  // The state dir too (its logs, keys and pid files): nothing of the run is left behind.
  if (!process.env.LLMGW_KEEP_TMP) fs.rmSync(run, { recursive: true, force: true });
});

describe('up.sh, the tour, down.sh', { concurrency: false }, () => {
  let key;

  test('up.sh starts the system and prints what works; demo.env sources to the values it used', T, async () => {
    const t0 = Date.now();
    const r = sh([UP]);
    assert.equal(r.status, 0, r.out);
    console.log(`# up.sh (prebuilt) ready in ${Date.now() - t0} ms`);
    assert.match(r.stdout, new RegExp(`gateway: +http://127\\.0\\.0\\.1:${ports.gw}`));
    assert.match(r.stdout, new RegExp(`admin API: +http://127\\.0\\.0\\.1:${ports.admin}`));
    assert.match(r.stdout, /tools\/llmgwctl ledger/);
    // The console it prints is served, and its sign-in token is the one in admin.token.
    const consoleUrl = r.stdout.match(/web console: +(http:\/\/\S+\/console\/)/)?.[1];
    assert.equal(consoleUrl, `http://127.0.0.1:${ports.admin}/console/`, r.stdout);
    const page = await fetch(consoleUrl);
    assert.equal(page.status, 200);
    assert.match(page.headers.get('content-security-policy') ?? '', /script-src 'self'/);
    for (const n of ['postgres', 'controlplane', 'dataplane', 'mock']) {
      assert.ok(pids().some((p) => p.name === n && alive(p.pid)), `${n} runs`);
    }
    key = fs.readFileSync(path.join(run, 'api.key'), 'utf8').trim();
    const token = fs.readFileSync(path.join(run, 'admin.token'), 'utf8').trim();
    const e = sourced(path.join(run, 'demo.env'), ['LLMGW_BASE_URL', 'LLMGW_API_KEY', 'LLMGW_MODEL', 'LLMGW_ADMIN_URL', 'LLMGW_ADMIN_TOKEN', 'LLMGW_DATABASE_URL']);
    assert.deepEqual(e, {
      LLMGW_BASE_URL: `http://127.0.0.1:${ports.gw}`, LLMGW_API_KEY: key, LLMGW_MODEL: 'fast',
      LLMGW_ADMIN_URL: `http://127.0.0.1:${ports.admin}`, LLMGW_ADMIN_TOKEN: token,
      LLMGW_DATABASE_URL: `host=127.0.0.1 port=${ports.pg} user=postgres dbname=postgres connect_timeout=5`,
    });
    // What up.sh configured went through the admin API: the audit log says so.
    const audit = sh([CTL, 'audit', '100'], { env: { LLMGW_ADMIN_URL: e.LLMGW_ADMIN_URL, LLMGW_ADMIN_TOKEN: token } });
    assert.equal(audit.status, 0, audit.out);
    const actions = JSON.parse(audit.stdout).data.map((a) => `${a.action} ${a.resource} ${a.resource_id}`);
    for (const want of ['create secrets mock-key', 'create providers mock', 'create routes fast', 'create teams demo', 'create limits demo-daily']) {
      assert.ok(actions.includes(want), `${want} in ${actions.join(', ')}`);
    }
  });

  test('the guardrails demo runs as printed: a block, an answer, its judgement', T, async () => {
    const up = sh([UP]);
    assert.equal(up.status, 0, up.out);
    const lines = up.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith('Guardrails (route'));
    assert.ok(at > 0, `the guardrails demo in up.sh's output:\n${up.stdout}`);
    const run1 = (from, n) => {
      const r = sh(['-e', '-c', `set -a; source "${run}/demo.env"; set +a\n${lines.slice(from, from + n).join('\n')}`]);
      assert.equal(r.status, 0, r.out);
      return JSON.parse(r.stdout);
    };
    const blocked = run1(at + 2, 2);
    assert.equal(blocked.error.code, 'prompt_blocked');
    assert.match(blocked.error.guard.rule, /^(ignore-previous-instructions|reveal-system-prompt)$/);
    // The database outlives down.sh: the judgement must be a new one.
    const before = run1(at + 6, 1).judgements[0]?.request_id;
    const served = run1(at + 4, 2);
    assert.ok(served.choices[0].message.content.length > 0);
    // Newest first: the served answer's (the blocked one was never judged).
    const judged = await h.waitFor(() => {
      const j = run1(at + 6, 1).judgements[0];
      return j && j.request_id !== before ? j : null;
    }, { timeoutMs: 20_000, what: 'a new judgement of the guarded route' });
    assert.equal(judged.route, 'guarded');
    assert.equal(judged.score, 4);
    assert.equal(judged.pass, true);
  });

  test('the media demo runs as printed: speech, its transcript, an image, each priced in the ledger', T, async () => {
    const up = sh([UP]);
    assert.equal(up.status, 0, up.out);
    const lines = up.stdout.split('\n');
    const at = lines.findIndex((l) => l.startsWith('Media (routes'));
    assert.ok(at > 0, `the media demo in up.sh's output:\n${up.stdout}`);
    const wavPath = '/tmp/llmgw-hello.wav';
    fs.rmSync(wavPath, { force: true });
    const r = sh(['-e', '-c', `set -a; source "${run}/demo.env"; set +a\n${lines.slice(at + 1, at + 6).join('\n')}`]);
    assert.equal(r.status, 0, r.out);
    const wav = fs.readFileSync(wavPath);
    fs.rmSync(wavPath, { force: true });
    assert.equal(wav.subarray(0, 4).toString(), 'RIFF', 'speech came back as a WAV');
    const out = r.stdout.split('\n').filter(Boolean);
    const transcript = JSON.parse(out[0]);
    assert.match(transcript.text, new RegExp(`${wav.length}-byte`), r.stdout);
    assert.match(out[1], /"b64_json"/);
    // Each call's row has its units and a cost from up.sh's prices.
    const e = sourced(path.join(run, 'demo.env'), ['LLMGW_ADMIN_URL', 'LLMGW_ADMIN_TOKEN']);
    const usage = sh([CTL, 'usage', '--group-by', 'route'], { env: e });
    assert.equal(usage.status, 0, usage.out);
    const groups = JSON.parse(usage.stdout).groups;
    const tts = groups.find((g) => g.route === 'tts');
    const whisper = groups.find((g) => g.route === 'whisper');
    const images = groups.find((g) => g.route === 'images');
    assert.ok(tts && tts.characters >= 16 && tts.cost_picodollars >= 16 * 15_000_000, usage.stdout);
    assert.ok(whisper && whisper.audio_ms > 0 && whisper.cost_picodollars > 0, usage.stdout);
    assert.ok(images && images.images >= 1 && images.cost_picodollars > 0, usage.stdout);
  });

  test('the cache demo runs as printed; a hit\'s ledger row costs 0 and records what it saved', T, async () => {
    const e = { LLMGW_ADMIN_URL: `http://127.0.0.1:${ports.admin}`, LLMGW_ADMIN_TOKEN: fs.readFileSync(path.join(run, 'admin.token'), 'utf8').trim() };
    // The two lines up.sh printed, run as printed (demo.env sourced).
    const up = sh([UP]);
    assert.equal(up.status, 0, up.out);
    const lines = up.stdout.split('\n');
    const at = lines.findIndex((l) => l.includes('for i in 1 2; do curl'));
    assert.ok(at > 0, `the cache demo in up.sh's output:\n${up.stdout}`);
    const demo = `set -a; source "${run}/demo.env"; set +a\n${lines.slice(at, at + 2).join('\n')}`;
    const r = sh(['-e', '-c', demo]);
    assert.equal(r.status, 0, r.out);
    assert.deepEqual(r.stdout.trim().split('\n').map((l) => l.trim().toLowerCase()),
      ['x-llmgw-cache: miss', 'x-llmgw-cache: hit']);
    // The money: a miss and a hit of a new question, their ledger rows.
    const ask = async () => {
      const res = await fetch(`http://127.0.0.1:${ports.gw}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'cached', temperature: 0, messages: [{ role: 'user', content: `ledger ${run}` }] }),
      });
      await res.text();
      return { id: res.headers.get('x-request-id'), cache: res.headers.get('x-llmgw-cache'), cost: res.headers.get('x-llmgw-cost-picodollars') };
    };
    const miss = await ask();
    const hit = await ask();
    assert.deepEqual([miss.cache, hit.cache], ['miss', 'hit']);
    assert.equal(hit.cost, '0');
    const row = async (id) => h.waitFor(() => {
      const l = sh([CTL, 'ledger', id], { env: e });
      const rows = l.status === 0 ? JSON.parse(l.stdout).data : [];
      return rows.length ? rows : null;
    }, { timeoutMs: 20_000, what: `the ledger rows of ${id}` });
    const [m] = await row(miss.id);
    const hitRows = await row(hit.id);
    assert.equal(hitRows.length, 1, 'one row for a hit');
    assert.equal(m.cache_hit, false);
    assert.ok(m.cost_picodollars > 0, 'the mock is priced');
    assert.equal(hitRows[0].cache_hit, true);
    assert.equal(hitRows[0].cost_picodollars, 0);
    assert.equal(hitRows[0].input_tokens + hitRows[0].output_tokens, 0);
    assert.equal(hitRows[0].saved_picodollars, m.cost_picodollars);
    const usage = sh([CTL, 'usage', '--group-by', 'route'], { env: e });
    assert.equal(usage.status, 0, usage.out);
    const g = JSON.parse(usage.stdout).groups.find((x) => x.route === 'cached');
    assert.ok(g && g.cache_hits >= 2, usage.stdout);
    assert.ok(BigInt(g.saved_picodollars) > BigInt(m.cost_picodollars), usage.stdout); // both hits
  });

  test('the README tour runs as printed, and each step shows what it says', T, () => {
    const readme = fs.readFileSync(path.join(h.REPO_ROOT, 'README.md'), 'utf8');
    const block = /<!-- tour:begin -->\n```sh\n([\s\S]*?)```\n<!-- tour:end -->/.exec(readme);
    assert.ok(block, 'the tour block in README.md');
    // Only the state dir, the build dir and the tour mock's port differ
    // from what the README prints; each comment becomes a step marker.
    const script = block[1]
      .replaceAll('.run/', `${run}/`).replaceAll('build/tests/', `${h.BUILD_DIR}/tests/`).replaceAll('9091', String(ports.tour))
      .split('\n').map((l) => (l.startsWith('# ') ? `echo '### ${l.slice(2).replaceAll("'", '')}'` : l)).join('\n');
    const r = sh(['-e', '-o', 'pipefail', '-c', script], { timeout: 180_000 });
    assert.equal(r.status, 0, r.out);
    const steps = r.stdout.split('### ').slice(1).map((s) => ({ title: s.slice(0, s.indexOf('\n')), out: s.slice(s.indexOf('\n') + 1) }));
    const step = (re) => {
      const s = steps.find((x) => re.test(x.title));
      assert.ok(s, `a step titled ${re}: ${steps.map((x) => x.title).join(' | ')}`);
      return s.out;
    };
    const sealed = step(/sealed secret/);
    assert.match(sealed, /"name": "tour-key"/);
    assert.ok(!sealed.includes('sk-tour-any-value'), 'the secret value is never answered');
    assert.match(sealed, /"name": "tour-up"/);
    assert.match(step(/Its price/), /"input_price":150000,"output_price":600000/);
    assert.match(step(/fails over/), /"provider":"tour-up".*"provider":"mock-anthropic"/);
    assert.match(step(/budget of USD/), /"amount": 1000000000000/);
    const sdk = step(/official SDK/);
    assert.match(sdk, /^openai sdk: \S+/m);
    assert.match(sdk, /^anthropic sdk: \S+/m);
    const ledger = step(/ledger row/).trim().split('\n').map((l) => JSON.parse(l));
    assert.equal(ledger[0].attempt, 1);
    assert.equal(ledger[0].provider, 'tour-up');
    assert.equal(ledger[0].status, 200);
    // 150,000 pico a prompt token and 600,000 a completion token, exactly.
    assert.equal(ledger[0].cost_picodollars, ledger[0].input_tokens * 150000 + ledger[0].output_tokens * 600000);
    assert.ok(ledger.some((l) => l.requests === 3 && l.cost_picodollars > 0), 'usage: the tour key made 3 requests, priced');
    assert.match(step(/fleet view/), /\{"provider":"tour-up","model":"mock-gpt","state":"healthy"\}/);
    const fail = step(/Stop the tour/).trim().split('\n');
    const heads = fail.filter((l) => l.startsWith('HTTP/1.1'));
    assert.equal(heads.length, 5);
    for (const l of heads) assert.match(l, /^HTTP\/1\.1 200 OK x-llmgw-provider: mock-anthropic x-llmgw-attempts: \d$/);
    assert.ok(Number(/attempts: (\d)/.exec(heads[0])[1]) >= 2, `the first request tried tour-up first: ${heads[0]}`);
    assert.match(heads[4], /attempts: 1$/, 'the breaker is open: tour-up is not tried');
    assert.match(fail.find((l) => l.startsWith('llmgw_breaker_state')), /^llmgw_breaker_state\{provider="tour-up",model="mock-gpt"\} 2$/);
    const last = steps.at(-1).out.trim();
    assert.match(last, /"provider":"tour-up","model":"mock-gpt","state":"(down|degraded)"/, last);
  });

  test('llmgwctl covers every admin resource the OpenAPI document lists', T, () => {
    const e = { LLMGW_ADMIN_URL: `http://127.0.0.1:${ports.admin}`, LLMGW_ADMIN_TOKEN: fs.readFileSync(path.join(run, 'admin.token'), 'utf8').trim() };
    const ctl = (...a) => sh([CTL, ...a], { env: e });
    const spec = fs.readFileSync(path.join(h.REPO_ROOT, 'docs/openapi.yaml'), 'utf8');
    const tops = [...new Set([...spec.matchAll(/^ {2}\/v1\/admin\/([a-z-]+)/gm)].map((m) => m[1]))];
    const special = {
      openapi: null, // openapi.yaml: the document itself, public
      audit: ['audit', '5'], health: ['health'], snapshot: ['snapshot'], usage: ['usage', '--group-by', 'route,day'],
      ledger: ['ledger', 'req_nothing_here'],
      judgements: ['judgements', '--route', 'guarded', '--limit', '5'],
      whoami: ['whoami'], plan: ['plan', 'fast'], 'limit-windows': ['limit-windows'],
    };
    let n = 0;
    for (const res of tops) {
      if (special[res] === null) continue;
      const argv = special[res] ?? [res, 'list'];
      const r = ctl(...argv);
      assert.equal(r.status, 0, `llmgwctl ${argv.join(' ')}: ${r.out}`);
      JSON.parse(r.stdout);
      if (!special[res]) {
        const help = ctl(res, '--help');
        assert.equal(help.status, 0, help.out);
        assert.match(help.stdout, /operations: list/);
      }
      n++;
    }
    assert.ok(n >= 15, `${n} resources`);
    // The newer ones, a full round: projects and limits.
    assert.equal(ctl('projects', 'create', '{"name":"ctl-proj","team":"demo"}').status, 0);
    const lim = ctl('limits', 'create', '{"id":"ctl-lim","scope_kind":"project","scope":"ctl-proj","metric":"requests","period":"minute","amount":100}');
    assert.equal(lim.status, 0, lim.out);
    assert.equal(JSON.parse(ctl('limits', 'update', 'ctl-lim', '{"amount":50}').stdout).amount, 50);
    assert.equal(ctl('limits', 'delete', 'ctl-lim').status, 0);
    assert.equal(ctl('projects', 'delete', 'ctl-proj').status, 0);
    // Exit codes: 1 for an API refusal (the answer on stdout), 2 for a usage error.
    const missing = ctl('limits', 'get', 'no-such-limit');
    assert.equal(missing.status, 1);
    assert.match(missing.stderr, /HTTP 404/);
    assert.equal(ctl('nonsense').status, 2);
    assert.equal(ctl('usage', '--bogus').status, 2);
    // The catalog import by URL is refused before any fetch (https only).
    const imp = ctl('catalog', 'import', '--url', 'http://127.0.0.1:9/x.json');
    assert.equal(imp.status, 1);
    assert.match(imp.stdout, /must be an https/);
  });

  test('down.sh stops every process by pid; up.sh again keeps the database; --fresh starts empty', T, () => {
    const before = pids();
    let r = sh([DOWN]);
    assert.equal(r.status, 0, r.out);
    for (const p of before) assert.ok(!alive(p.pid), `${p.name} (${p.pid}) stopped`);
    r = sh([UP]);
    assert.equal(r.status, 0, r.out);
    assert.equal(fs.readFileSync(path.join(run, 'api.key'), 'utf8').trim(), key, 'the same key: the database was kept');
    const e = { LLMGW_ADMIN_URL: `http://127.0.0.1:${ports.admin}`, LLMGW_ADMIN_TOKEN: fs.readFileSync(path.join(run, 'admin.token'), 'utf8').trim() };
    assert.equal(sh([CTL, 'routes', 'get', 'tour'], { env: e }).status, 0, 'the tour route is still there');
    r = sh([UP, '--fresh']);
    assert.equal(r.status, 0, r.out);
    assert.notEqual(fs.readFileSync(path.join(run, 'api.key'), 'utf8').trim(), key, 'a new key in a new database');
    assert.equal(sh([CTL, 'routes', 'get', 'tour'], { env: e }).status, 1, 'the tour route is gone');
    const last = pids();
    r = sh([DOWN]);
    assert.equal(r.status, 0, r.out);
    for (const p of last) assert.ok(!alive(p.pid), `${p.name} (${p.pid}) stopped`);
  });
});
