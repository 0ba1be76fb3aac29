#!/usr/bin/env node
// The judge benchmark (issue 23; docs/BENCHMARKS.md, "Judge"): does sampling
// answers for the LLM-as-judge change what the client waits for? The judge
// runs after the answer is delivered, off the hot path; this measures the
// client's latency with the judge sampling every request against the same
// route sampling none, at the same fixed request rate, legs interleaved.
//
// On 127.0.0.1: the mock provider (it plays the judge: docs/mockprovider.md,
// "The gateway's own calls") and one data plane on a snapshot file with
//   - route `judged`:   the mock, judge {sample_rate: 1, route: "judge",
//                       rubric: {template with {{prompt}} and {{answer}},
//                       scale 1..5, pass_min 4}};
//   - route `unjudged`: identical, sample_rate 0;
//   - route `judge`:    the mock (model mock-gpt-large, so the mock's usage
//                       log tells the judge's calls from the answers).
// Each leg is open loop: request i is due at start + i / JUDGE_RATE and its
// latency runs from that due time to the body's end (a stall cannot hide
// the requests queued behind it), on JUDGE_CONNS keep-alive connections.
// BENCH_ROUNDS rounds, each a leg on `judged` and one on `unjudged` (their
// order alternating), JUDGE_SECONDS each, after BENCH_WARMUP s of warm-up
// on each; between legs it waits for the judge queue to drain, so no leg
// pays for the one before. /metrics is scraped every 500 ms during every
// leg (the queue depth), the same for both.
//
// Reports per leg the median (p50) and p99 client latency, per round and
// over all rounds, the ratio judged / unjudged, and what the judge did over
// the measured rounds: llmgw_judge_total by route and result (deltas), the
// largest llmgw_judge_queue_depth seen, the mean normalized score
// (llmgw_judge_score_sum / _count; the mock scores 4 on 1..5, so 0.75), and
// the judge calls the mock received (its usage log).
//
// Not governed (no control plane, no ledger): a file snapshot with one key.
//
// Usage: node tests/bench/judge.mjs      or      tests/bench/run.sh --judge
// Environment (all optional):
//   LLMGW_BUILD_DIR       build tree (default <repo>/build)
//   BENCH_WORKERS         llmgw --threads (2)
//   BENCH_MOCK_THREADS    mock provider threads (1)
//   BENCH_ROUNDS          rounds (3)
//   BENCH_WARMUP          seconds of unrecorded warm-up per leg before round 1 (2; 0 none)
//   BENCH_OUT             also write the results as markdown to this file
//   BENCH_KEEP_TMP=1      keep the temp dirs (logs, snapshot)
//   JUDGE_RATE            requests per second in every leg (200)
//   JUDGE_SECONDS         seconds per leg (10)
//   JUDGE_CONNS           client keep-alive connections (32)
//   JUDGE_STREAM=1        stream the answers (SSE) instead of whole JSON
//   JUDGE_ANSWER_TTFB_MS  the served routes' mock waits this long before its status line (0)
//   JUDGE_JUDGE_TTFB_MS   the judge route's mock does (0): a slow judge
//   JUDGE_DRAIN_S         longest wait for the judge queue to drain between legs (60)
//   JUDGE_GW_ARGS         extra llmgw arguments, space-separated (e.g. a queue bound)
// Exit status: 0 when no request failed, the judged route's answers were
// scored and the unjudged route's were never sampled; 2 otherwise (the
// tables are printed anyway); 1 when the rig could not run (among others:
// the gateway refused the snapshot, or accepted it but runs no judge).

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import * as h from '../integration/harness.mjs';
import { parseExposition } from '../integration/exposition.mjs';
import { envInt } from './scale_lib.mjs';

const int = (name, def, min, max) => {
  try {
    return envInt(name, def, min, max);
  } catch (e) {
    console.error(`[judge] ${e.message}`);
    process.exit(1);
  }
};
const WORKERS = int('BENCH_WORKERS', 2, 1, 64);
const MOCK_THREADS = int('BENCH_MOCK_THREADS', 1, 1, 64);
const ROUNDS = int('BENCH_ROUNDS', 3, 1, 50);
const WARMUP = int('BENCH_WARMUP', 2, 0, 60);
const RATE = int('JUDGE_RATE', 200, 1, 100000);
const SECONDS = int('JUDGE_SECONDS', 10, 1, 600);
const CONNS = int('JUDGE_CONNS', 32, 1, 10000);
const ANSWER_TTFB_MS = int('JUDGE_ANSWER_TTFB_MS', 0, 0, 60000);
const JUDGE_TTFB_MS = int('JUDGE_JUDGE_TTFB_MS', 0, 0, 60000);
const DRAIN_S = int('JUDGE_DRAIN_S', 60, 1, 3600);
const STREAM = process.env.JUDGE_STREAM === '1';
const GW_ARGS = (process.env.JUDGE_GW_ARGS ?? '').split(/\s+/).filter(Boolean);
const OUT = process.env.BENCH_OUT || '';
if (process.env.BENCH_KEEP_TMP === '1') process.env.LLMGW_KEEP_TMP = '1'; // the harness's temp dirs

const CHUNKS = 8; // content chunks per answer
const RUN = randomBytes(4).toString('hex');
const log = (s) => console.error(`[judge] ${s}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
class RigError extends Error {} // the rig cannot measure: said plainly, no stack

// The routes. Both served routes are identical but for the sample rate.
const JUDGED = 'judged';
const UNJUDGED = 'unjudged';
const JUDGE_ROUTE = 'judge';
const JUDGE_MODEL = 'mock-gpt-large'; // tells the judge's calls apart in the mock's usage log
const withTtfb = (model, ms) => (ms > 0 ? `${model}#ttfb_ms=${ms}` : model);
const ANSWER_MODEL = withTtfb('mock-gpt', ANSWER_TTFB_MS);
const RUBRIC = {
  template: 'Rate how well the answer serves the prompt, from 1 (useless) to 5 (excellent).\n\nPrompt:\n{{prompt}}\n\nAnswer:\n{{answer}}',
  scale_min: 1,
  scale_max: 5,
  pass_min: 4,
};
const judgeOf = (rate) => ({ sample_rate: rate, route: JUDGE_ROUTE, rubric: RUBRIC });

function snapshotFor(mock) {
  const s = h.makeSnapshot({ mockV1: mock.v1 });
  const route = (name, model, extra = {}) => ({
    name, capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model }], ...extra,
  });
  s.routes.push(
    route(JUDGE_ROUTE, withTtfb(JUDGE_MODEL, JUDGE_TTFB_MS)),
    route(JUDGED, ANSWER_MODEL, { judge: judgeOf(1) }),
    route(UNJUDGED, ANSWER_MODEL, { judge: judgeOf(0) }),
  );
  return s;
}

// ---------------------------------------------------------------- metrics

async function scrape(gw) {
  const r = await h.request(gw.port, { method: 'GET', path: '/metrics' });
  if (r.status !== 200) throw new Error(`/metrics: ${r.status}`);
  const out = { judge: {}, queue: 0, scoreSum: {}, scoreCount: {}, pass: {}, seen: false };
  for (const s of parseExposition(r.text)) {
    if (s.name === 'llmgw_judge_total') {
      out.seen = true;
      out.judge[`${s.labels.route}|${s.labels.result}`] = s.value;
    } else if (s.name === 'llmgw_judge_queue_depth') {
      out.queue += s.value;
    } else if (s.name === 'llmgw_judge_score_sum') {
      out.scoreSum[s.labels.route] = s.value;
    } else if (s.name === 'llmgw_judge_score_count') {
      out.scoreCount[s.labels.route] = s.value;
    } else if (s.name === 'llmgw_judge_pass_total') {
      out.pass[`${s.labels.route}|${s.labels.pass}`] = s.value;
    }
  }
  return out;
}
const RESULTS = ['sampled', 'dropped', 'scored', 'invalid', 'failed'];
const judgeDelta = (a, b, route, result) => (b.judge[`${route}|${result}`] ?? 0) - (a.judge[`${route}|${result}`] ?? 0);
const finished = (m) => Object.entries(m.judge)
  .filter(([k]) => /\|(scored|invalid|failed)$/.test(k)).reduce((n, [, v]) => n + v, 0);

// Waits until the judge queue is empty and no judgement finished between
// two scrapes 300 ms apart: the judge is idle. Returns the seconds waited.
async function drain(gw) {
  const t0 = performance.now();
  let prev = await scrape(gw);
  for (;;) {
    await sleep(300);
    const m = await scrape(gw);
    if (m.queue === 0 && finished(m) === finished(prev)) return (performance.now() - t0) / 1000;
    if (performance.now() - t0 > DRAIN_S * 1000) {
      log(`the judge did not drain within ${DRAIN_S} s (queue ${m.queue}); going on`);
      return (performance.now() - t0) / 1000;
    }
    prev = m;
  }
}

// The judge's calls the mock received: usage-log lines with the judge's model.
const judgeCalls = (mock) => mock.readUsage().filter((l) => l.model === JUDGE_MODEL).length;

// ------------------------------------------------------------------ load

const pct = (sorted, q) => {
  if (!sorted.length) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))];
};

function ask(port, agent, body) {
  return new Promise((resolve) => {
    const payload = Buffer.from(body);
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', agent,
      headers: {
        'content-type': 'application/json', authorization: `Bearer ${h.DEMO_API_KEY}`,
        'content-length': payload.length, accept: STREAM ? 'text/event-stream' : 'application/json',
      },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        const ok = res.statusCode === 200 && (STREAM ? text.includes('data: [DONE]') : text.includes('"choices"'));
        resolve({ end: performance.now(), ok, status: res.statusCode, text });
      });
      res.on('error', (e) => resolve({ end: performance.now(), ok: false, status: res.statusCode, text: String(e) }));
    });
    req.setTimeout(30_000, () => req.destroy(new Error('timed out after 30 s')));
    req.on('error', (e) => resolve({ end: performance.now(), ok: false, status: 0, text: String(e) }));
    req.end(payload);
  });
}

const bodyOf = (route, i) => JSON.stringify({
  model: route, messages: [{ role: 'user', content: `judge bench ${RUN} request ${i}: what is ${i} + ${i}?` }],
  ...(STREAM ? { stream: true, stream_options: { include_usage: true } } : {}),
});

// One open-loop leg: secs at RATE on route. Latencies in ms from each
// request's due time to its body's end.
async function leg(gw, route, secs, tag) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONNS });
  const n = Math.max(1, Math.round(secs * RATE));
  const m0 = await scrape(gw);
  let maxQueue = m0.queue;
  let polling = true;
  const poller = (async () => {
    while (polling) {
      await sleep(500);
      if (!polling) break;
      try {
        maxQueue = Math.max(maxQueue, (await scrape(gw)).queue);
      } catch { /* a missed scrape is no result */ }
    }
  })();
  const lat = [];
  const bad = [];
  const inflight = [];
  const t0 = performance.now() + 20;
  let i = 0;
  while (i < n) {
    const now = performance.now();
    // Every request due by now goes out; then sleep until the next is due.
    while (i < n && t0 + (i * 1000) / RATE <= now) {
      const due = t0 + (i * 1000) / RATE;
      inflight.push(ask(gw.port, agent, bodyOf(route, `${tag}-${i}`)).then((r) => {
        if (r.ok) lat.push(r.end - due);
        else bad.push(r);
      }));
      i++;
    }
    if (i < n) await sleep(Math.max(0, t0 + (i * 1000) / RATE - performance.now()));
  }
  await Promise.all(inflight);
  const wall = (performance.now() - t0) / 1000;
  polling = false;
  await poller;
  agent.destroy();
  const sorted = lat.sort((a, b) => a - b);
  return {
    route, n, ok: lat.length, errors: bad.length, lat: sorted, wall,
    p50: pct(sorted, 0.5), p99: pct(sorted, 0.99), maxQueue,
    firstBad: bad[0] ? `${bad[0].status} ${bad[0].text.slice(0, 300)}` : '',
  };
}

// ---------------------------------------------------------------- report

const f = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const med = (a) => {
  const s = a.filter(Number.isFinite).sort((x, y) => x - y);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

function report(legs, m0, m1, calls, drains) {
  const rev = (() => { try { return execFileSync('git', ['-C', h.REPO_ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim(); } catch { return '?'; } })();
  const cpu = (/^model name\s*:\s*(.*)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown').trim();
  const L = [];
  L.push(`llmgw judge benchmark, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, rev ${rev}`);
  L.push(`machine: nproc ${os.cpus().length}, CPU ${cpu}, kernel ${os.release()}`);
  L.push(`setup: llmgw --threads ${WORKERS}${GW_ARGS.length ? ` ${GW_ARGS.join(' ')}` : ''} (file snapshot, not governed); mock provider --threads ${MOCK_THREADS}, ${CHUNKS} chunks; answers from model \`${ANSWER_MODEL}\`, the judge's from \`${withTtfb(JUDGE_MODEL, JUDGE_TTFB_MS)}\`; ${STREAM ? 'streamed (SSE)' : 'whole JSON'} chat`);
  L.push(`load: open loop, ${RATE} req/s, ${SECONDS} s a leg, ${CONNS} keep-alive connections; ${ROUNDS} rounds, legs interleaved (order alternating), ${WARMUP} s warm-up each; latency from each request's due time to the body's end; the judge drained between legs`);
  L.push('');
  L.push('| leg | route | judge sample_rate | requests | errors | p50 ms per round | p99 ms per round | p50 ms (all rounds) | p99 ms (all rounds) | largest judge queue |');
  L.push('| --- | --- | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: |');
  const all = {};
  for (const [name, route, rate] of [['judge every request', JUDGED, 1], ['judge none', UNJUDGED, 0]]) {
    const rs = legs.filter((l) => l.route === route);
    const lat = rs.flatMap((l) => l.lat).sort((a, b) => a - b);
    all[route] = { p50: pct(lat, 0.5), p99: pct(lat, 0.99) };
    L.push(`| ${name} | \`${route}\` | ${rate} | ${rs.reduce((a, l) => a + l.n, 0)} | ${rs.reduce((a, l) => a + l.errors, 0)} | ${rs.map((l) => f(l.p50)).join(' / ')} | ${rs.map((l) => f(l.p99)).join(' / ')} | ${f(all[route].p50)} | ${f(all[route].p99)} | ${Math.max(...rs.map((l) => l.maxQueue))} |`);
  }
  L.push('');
  L.push(`- judged / unjudged client latency: p50 ${f(all[JUDGED].p50 / all[UNJUDGED].p50)}x, p99 ${f(all[JUDGED].p99 / all[UNJUDGED].p99)}x (over all rounds); the median of the per-round ratios: p50 ${f(med(legs.filter((l) => l.route === JUDGED).map((l, k) => l.p50 / legs.filter((x) => x.route === UNJUDGED)[k]?.p50)))}x, p99 ${f(med(legs.filter((l) => l.route === JUDGED).map((l, k) => l.p99 / legs.filter((x) => x.route === UNJUDGED)[k]?.p99)))}x`);
  L.push(`- the judge drained between legs in ${f(Math.max(0, ...drains), 1)} s at most`);
  L.push('');
  L.push('What the judge did over the measured rounds (deltas of `llmgw_judge_total{route,result}` on /metrics):');
  L.push('');
  L.push(`| route | ${RESULTS.join(' | ')} | mean normalized score | pass rate |`);
  L.push(`| --- | ${RESULTS.map(() => '---:').join(' | ')} | ---: | ---: |`);
  for (const route of [JUDGED, UNJUDGED]) {
    const ds = (m) => (m.scoreSum[route] ?? 0);
    const dc = (m) => (m.scoreCount[route] ?? 0);
    const cnt = dc(m1) - dc(m0);
    const mean = cnt > 0 ? (ds(m1) - ds(m0)) / cnt : NaN;
    const pt = (m1.pass[`${route}|true`] ?? 0) - (m0.pass[`${route}|true`] ?? 0);
    const pf = (m1.pass[`${route}|false`] ?? 0) - (m0.pass[`${route}|false`] ?? 0);
    L.push(`| \`${route}\` | ${RESULTS.map((r) => judgeDelta(m0, m1, route, r)).join(' | ')} | ${f(mean, 3)} | ${pt + pf > 0 ? `${f((100 * pt) / (pt + pf), 1)}%` : '-'} |`);
  }
  L.push('');
  L.push(`- judge calls the mock received (model \`${JUDGE_MODEL}\`, its usage log) over the measured rounds: ${calls}; the mock scores 4 on the rubric's 1..5 (normalized 0.75, a pass)`);
  return L.join('\n');
}

// ------------------------------------------------------------------ main

async function startGateway(mock) {
  try {
    return await h.startGateway({
      snapshot: snapshotFor(mock), threads: WORKERS, args: ['--access-log', '/dev/null', ...GW_ARGS],
    });
  } catch (e) {
    throw new RigError('the gateway did not start on the benchmark\'s snapshot (did it refuse the routes\' '
      + '"judge" objects? the data plane\'s support for issue 23 may not be in this build). What it said:\n'
      + `${e?.message ?? e}`);
  }
}

async function main() {
  h.requireBinaries([h.MOCK_BIN, h.DATAPLANE_BIN]);
  const mock = await h.startMock({ args: ['--threads', String(MOCK_THREADS), '--chunks', String(CHUNKS), '--chunk-delay-ms', '0'] });
  const gw = await startGateway(mock);
  log(`mock on ${mock.port}, llmgw (pid ${gw.proc.pid}) on ${gw.port}`);

  // A first judged request: the gateway must run the judge, or there is
  // nothing to measure.
  const probe = await ask(gw.port, new http.Agent({ keepAlive: false }), bodyOf(JUDGED, 'probe'));
  if (!probe.ok) throw new RigError(`a request on route '${JUDGED}' failed: ${probe.status} ${probe.text.slice(0, 500)}`);
  let seen = null;
  for (let k = 0; k < 50 && !seen; k++) {
    const m = await scrape(gw);
    if (m.seen && judgeDelta({ judge: {} }, m, JUDGED, 'sampled') > 0) seen = m;
    else await sleep(100);
  }
  if (!seen) {
    throw new RigError(`the gateway accepted the snapshot but reports no llmgw_judge_total{route="${JUDGED}",result="sampled"} `
      + 'after a judged request: this build does not run the judge (issue 23\'s data plane support missing?)');
  }

  if (WARMUP > 0) {
    for (const route of [JUDGED, UNJUDGED]) {
      const w = await leg(gw, route, WARMUP, `warmup-${route}`);
      log(`warm-up ${route}: ${w.ok}/${w.n} ok, p50 ${f(w.p50)} ms, p99 ${f(w.p99)} ms`);
      await drain(gw);
    }
  }
  const m0 = await scrape(gw);
  const calls0 = judgeCalls(mock);
  const legs = [];
  const drains = [];
  for (let round = 1; round <= ROUNDS; round++) {
    const order = round % 2 ? [JUDGED, UNJUDGED] : [UNJUDGED, JUDGED];
    for (const route of order) {
      const r = await leg(gw, route, SECONDS, `r${round}-${route}`);
      r.round = round;
      legs.push(r);
      const waited = await drain(gw);
      drains.push(waited);
      log(`round ${round}/${ROUNDS} ${route}: ${r.ok}/${r.n} ok in ${f(r.wall, 1)} s, p50 ${f(r.p50)} ms, p99 ${f(r.p99)} ms, largest judge queue ${r.maxQueue}, drained in ${f(waited, 1)} s${r.firstBad ? `; first bad: ${r.firstBad}` : ''}`);
    }
  }
  // Legs in round order per route, so the per-round ratios pair up.
  legs.sort((a, b) => a.round - b.round);
  const m1 = await scrape(gw);
  const calls = judgeCalls(mock) - calls0;
  const text = report(legs, m0, m1, calls, drains);
  console.log(text);
  if (OUT) fs.writeFileSync(OUT, `${text}\n`);

  let bad = false;
  const errors = legs.reduce((a, l) => a + l.errors, 0);
  if (errors) {
    log(`PROBLEM: ${errors} requests failed; first: ${legs.find((l) => l.firstBad)?.firstBad}`);
    bad = true;
  }
  if (judgeDelta(m0, m1, JUDGED, 'scored') <= 0) {
    log(`PROBLEM: no answer on '${JUDGED}' was scored (llmgw_judge_total by result: ${RESULTS.map((r) => `${r} ${judgeDelta(m0, m1, JUDGED, r)}`).join(', ')})`);
    bad = true;
  }
  if (judgeDelta(m0, m1, UNJUDGED, 'sampled') !== 0) {
    log(`PROBLEM: '${UNJUDGED}' (sample_rate 0) had ${judgeDelta(m0, m1, UNJUDGED, 'sampled')} answers sampled`);
    bad = true;
  }
  return bad ? 2 : 0;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  log(e instanceof RigError ? `cannot measure: ${e.message}` : (e?.stack ?? String(e)));
  process.env.LLMGW_KEEP_TMP = '1';
}
try {
  await h.stopAll();
} catch (e) {
  log(String(e));
  if (code === 0) code = 1;
}
process.exit(code);
