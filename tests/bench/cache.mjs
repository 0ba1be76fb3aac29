#!/usr/bin/env node
// The response cache benchmark (issue 22; docs/BENCHMARKS.md, "Response
// cache"). On 127.0.0.1: the mock provider, one data plane on a snapshot
// file whose routes turn the cache on ({"ttl_s": 600, "scope": "team"}),
// and nginx as a plain keepalive proxy to the same mock (run.sh's config).
//
// 1. Passes, once per mock latency (CACHE_MOCKS):
//    - instant: the mock answers at once (8 chunks, no delay);
//    - latency: the route's model is `mock-gpt#ttfb_ms=N,chunk_delay_ms=M`
//      (docs/mockprovider.md, Faults): the mock waits N ms before its
//      status line and, on a stream, M ms between its content chunks, as
//      a provider generating the answer would (a whole JSON answer comes
//      all at once after the N ms).
//    cold: CACHE_PROMPTS distinct prompts (temperature 0), each a miss;
//    warm: the same prompts again, each a hit. CACHE_PASS_CONC clients
//    (node http, keep-alive) share each pass. Per pass: the results by
//    the answer's x-llmgw-cache header and by the deltas of
//    llmgw_response_cache_requests_total{route,result} on /metrics, the
//    hit rate (hit / (hit + miss)) by each, p50 and p99 latency (send to
//    the body's end); the median speedup is cold p50 / warm p50.
// 2. Hit throughput: wrk (tests/bench/chat.lua) at BENCH_CONNS
//    connections, BENCH_SECONDS per leg, BENCH_ROUNDS rounds, legs
//    interleaved: one cached prompt on llmgw (every request a hit, checked
//    on /metrics) against the same request through nginx to the instant
//    mock (worker_processes = llmgw --threads = BENCH_WORKERS), and, for
//    reference, the uncached pass-through (route `fast`). Reports req/s,
//    latency, the proxy's CPU and the ratio llmgw-hit / nginx.
//
// Not governed (no control plane, no budget, no ledger): a file snapshot
// with one key, as run.sh with BENCH_GOVERNANCE=0.
//
// Usage: node tests/bench/cache.mjs      or      tests/bench/run.sh --cache
// Environment (all optional):
//   LLMGW_BUILD_DIR      build tree (default <repo>/build)
//   NGINX_BIN, WRK_BIN   (default /usr/sbin/nginx, wrk on PATH)
//   BENCH_WORKERS        llmgw --threads and nginx worker_processes (2)
//   BENCH_MOCK_THREADS   mock provider threads (1)
//   BENCH_CONNS          wrk connections (64)
//   BENCH_SECONDS        seconds per throughput leg (5)
//   BENCH_ROUNDS         throughput rounds (3)
//   BENCH_WARMUP         seconds of unrecorded wrk warm-up per leg (1; 0 none)
//   BENCH_WRK_THREADS    wrk threads (1)
//   BENCH_OUT            also write the results as markdown to this file
//   BENCH_KEEP_TMP=1     keep the temp dirs (logs, configs, wrk output)
//   CACHE_PROMPTS        distinct prompts per pass (400)
//   CACHE_PASS_CONC      concurrent clients in the cold and warm passes (8)
//   CACHE_MOCKS          comma list of instant,latency (both)
//   CACHE_TTFB_MS        the latency mock's time to first byte (300)
//   CACHE_CHUNK_DELAY_MS the latency mock's delay between chunks (20)
//   CACHE_STREAM=1       stream the answers (SSE) instead of whole JSON
//   CACHE_THROUGHPUT=0   skip the throughput legs
//   CACHE_MAX_MB         llmgw --cache-max-mb (64)
// Exit status: 0 when every cold request missed, every warm one hit and
// no throughput leg had an error; 2 otherwise (the tables are printed
// anyway); 1 when the rig could not run.

import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import * as h from '../integration/harness.mjs';
import { parseExposition } from '../integration/exposition.mjs';
import { envInt } from './scale_lib.mjs';

const HERE = path.dirname(new URL(import.meta.url).pathname);
const int = (name, def, min, max) => {
  try {
    return envInt(name, def, min, max);
  } catch (e) {
    console.error(`[cache] ${e.message}`);
    process.exit(1);
  }
};
const WORKERS = int('BENCH_WORKERS', 2, 1, 64);
const MOCK_THREADS = int('BENCH_MOCK_THREADS', 1, 1, 64);
const CONNS = int('BENCH_CONNS', 64, 1, 10000);
const SECONDS = int('BENCH_SECONDS', 5, 1, 600);
const ROUNDS = int('BENCH_ROUNDS', 3, 1, 50);
const WARMUP = int('BENCH_WARMUP', 1, 0, 60);
const WRK_THREADS = int('BENCH_WRK_THREADS', 1, 1, 64);
const PROMPTS = int('CACHE_PROMPTS', 400, 1, 100000);
const PASS_CONC = int('CACHE_PASS_CONC', 8, 1, 1000);
const TTFB_MS = int('CACHE_TTFB_MS', 300, 0, 60000);
const CHUNK_DELAY_MS = int('CACHE_CHUNK_DELAY_MS', 20, 0, 10000);
const MAX_MB = int('CACHE_MAX_MB', 64, 1, 1 << 20);
const STREAM = process.env.CACHE_STREAM === '1';
const THROUGHPUT = process.env.CACHE_THROUGHPUT !== '0';
const MOCKS = (process.env.CACHE_MOCKS ?? 'instant,latency').split(',').filter(Boolean);
const NGINX = process.env.NGINX_BIN || '/usr/sbin/nginx';
const WRK = process.env.WRK_BIN || 'wrk';
const OUT = process.env.BENCH_OUT || '';
const KEEP = process.env.BENCH_KEEP_TMP === '1';
if (KEEP) process.env.LLMGW_KEEP_TMP = '1'; // the harness's own temp dirs
for (const m of MOCKS) {
  if (m !== 'instant' && m !== 'latency') {
    console.error(`[cache] CACHE_MOCKS: unknown '${m}' (instant, latency)`);
    process.exit(1);
  }
}
if (CONNS < WRK_THREADS) {
  console.error('[cache] BENCH_CONNS must be >= BENCH_WRK_THREADS');
  process.exit(1);
}

const CHUNKS = 8; // run.sh's mock: one content chunk per token
const TTL_S = 600; // longer than any run: the warm pass finds every entry
const RUN = randomBytes(4).toString('hex'); // prompts of this run only
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
const log = (s) => console.error(`[cache] ${s}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The routes: the cache on for each mock latency and the hot prompt; the
// pass-through without it (`fast`, from the harness's snapshot).
const LATENCY_MODEL = `mock-gpt#ttfb_ms=${TTFB_MS},chunk_delay_ms=${CHUNK_DELAY_MS}`;
const ROUTE = { instant: 'cached', latency: 'cached-slow' };
const MOCK_DESC = {
  instant: `instant (the mock answers at once: ${CHUNKS} chunks, no delay)`,
  latency: STREAM
    ? `latency (model \`${LATENCY_MODEL}\`: ${TTFB_MS} ms to the first byte, then ${CHUNK_DELAY_MS} ms between ${CHUNKS} chunks)`
    : `latency (model \`${LATENCY_MODEL}\`: the whole answer after ${TTFB_MS} ms; the chunk delay paces streams only)`,
};

// ------------------------------------------------------------- processes

const tmp = h.makeTmpDir();
fs.chmodSync(tmp, 0o711); // nginx workers run as nobody when started as root
let nginxWorkers = [];
process.on('exit', () => {
  // A master killed by the harness's exit handler leaves its workers.
  for (const pid of nginxWorkers) {
    try {
      if (fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'nginx') process.kill(pid, 'SIGKILL');
    } catch { /* gone */ }
  }
});

async function startMock() {
  const proc = new h.ManagedProcess('mockprovider', h.MOCK_BIN, [
    '--listen', '127.0.0.1:0', '--threads', String(MOCK_THREADS), '--chunks', String(CHUNKS),
    '--chunk-delay-ms', '0',
  ]);
  const { port } = await proc.waitListening();
  return new h.Mock(proc, port, null);
}

function snapshotFor(mock) {
  const s = h.makeSnapshot({ mockV1: mock.v1 });
  s.keys[0].team = 'bench';
  const cache = { ttl_s: TTL_S, scope: 'team', deterministic: false };
  s.routes.push(
    { name: ROUTE.instant, capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mock-gpt' }], cache },
    { name: ROUTE.latency, capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: LATENCY_MODEL }], cache },
  );
  return s;
}

function children(pid) {
  try {
    return execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' })
      .split('\n').map((x) => Number(x.trim())).filter(Boolean);
  } catch {
    return [];
  }
}

// nginx as tests/bench/run.sh writes it: a plain keepalive reverse proxy.
async function startNginx(mockPort) {
  const nd = path.join(tmp, 'nginx');
  fs.mkdirSync(nd, { mode: 0o755 });
  fs.chmodSync(nd, 0o755);
  const nv = spawnSync(NGINX, ['-V'], { encoding: 'utf8' });
  if (nv.error) throw new Error(`nginx not found at ${NGINX} (apt-get install nginx-light; NGINX_BIN)`);
  const v = `${nv.stdout}${nv.stderr}`;
  const extra = ['fastcgi', 'uwsgi', 'scgi'].filter((m) => !v.includes(`--without-http_${m}_module`))
    .map((m) => `    ${m}_temp_path ${nd}/${m}_temp;`).join('\n');
  for (let attempt = 1; attempt <= 5; attempt++) {
    const port = await freePort();
    fs.writeFileSync(path.join(nd, 'nginx.conf'), `# generated by tests/bench/cache.mjs (as tests/bench/run.sh)
daemon off;
master_process on;
worker_processes ${WORKERS};
pid ${nd}/nginx.pid;
error_log ${nd}/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    client_body_temp_path ${nd}/client_body_temp;
    proxy_temp_path ${nd}/proxy_temp;
${extra}
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    upstream mock {
        server 127.0.0.1:${mockPort};
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:${port};
        location / {
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
`);
    const proc = new h.ManagedProcess('nginx', NGINX, ['-p', `${nd}/`, '-c', `${nd}/nginx.conf`, '-e', `${nd}/error.log`]);
    for (let i = 0; i < 50 && proc.running; i++) {
      const r = await h.request(port, { method: 'GET', path: '/healthz', timeoutMs: 2000 }).catch(() => null);
      if (r?.status === 200) {
        nginxWorkers = children(proc.pid);
        return { proc, port };
      }
      await sleep(100);
    }
    log(`nginx did not come up on port ${port} (attempt ${attempt})`);
    await proc.stop();
  }
  throw new Error('nginx did not start');
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = http.createServer();
    s.on('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

// ---------------------------------------------------------------- metrics

async function cacheCounts(gw) {
  const r = await h.request(gw.port, { method: 'GET', path: '/metrics' });
  if (r.status !== 200) throw new Error(`/metrics: ${r.status}`);
  const out = { req: {}, joined: {}, g: {} };
  for (const s of parseExposition(r.text)) {
    if (s.name === 'llmgw_response_cache_requests_total') {
      out.req[`${s.labels.route}|${s.labels.result}`] = s.value;
    } else if (s.name === 'llmgw_response_cache_joined_total') {
      out.joined[s.labels.route] = s.value;
    } else if (s.name.startsWith('llmgw_response_cache_')) {
      out.g[s.name.slice('llmgw_response_cache_'.length)] = s.value;
    }
  }
  return out;
}
const delta = (a, b, route, result) => (b.req[`${route}|${result}`] ?? 0) - (a.req[`${route}|${result}`] ?? 0);

// ------------------------------------------------------------------ passes

const pct = (a, q) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))];
};

function ask(port, agent, body) {
  return new Promise((resolve) => {
    const payload = Buffer.from(body);
    const t0 = performance.now();
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
        const ms = performance.now() - t0;
        const ok = res.statusCode === 200 && (STREAM ? text.includes('data: [DONE]') : text.includes('"choices"'));
        resolve({ ms, ok, status: res.statusCode, cache: res.headers['x-llmgw-cache'] ?? 'none', age: Number(res.headers.age ?? NaN), text });
      });
      res.on('error', () => resolve({ ms: NaN, ok: false, status: 0, cache: 'none', text: '' }));
    });
    req.setTimeout(60_000, () => req.destroy(new Error('timed out')));
    req.on('error', (e) => resolve({ ms: NaN, ok: false, status: 0, cache: 'none', text: String(e) }));
    req.end(payload);
  });
}

const bodyOf = (route, content) => JSON.stringify({
  model: route, temperature: 0, messages: [{ role: 'user', content }],
  ...(STREAM ? { stream: true, stream_options: { include_usage: true } } : {}),
});

async function pass(gw, route, prompts) {
  const agent = new http.Agent({ keepAlive: true, maxSockets: PASS_CONC });
  const res = new Array(prompts.length);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(PASS_CONC, prompts.length) }, async () => {
    while (next < prompts.length) {
      const i = next++;
      res[i] = await ask(gw.port, agent, bodyOf(route, prompts[i]));
    }
  }));
  const wall = performance.now() - t0;
  agent.destroy();
  const by = { hit: 0, miss: 0, bypass: 0, none: 0 };
  for (const r of res) by[r.cache in by ? r.cache : 'none']++;
  const bad = res.filter((r) => !r.ok);
  const ms = res.filter((r) => r.ok).map((r) => r.ms);
  return {
    n: res.length, by, errors: bad.length, firstBad: bad[0] ? `${bad[0].status} ${bad[0].text.slice(0, 200)}` : '',
    p50: pct(ms, 0.5), p99: pct(ms, 0.99), wall_s: wall / 1000,
    maxAge: Math.max(0, ...res.map((r) => r.age).filter(Number.isFinite)),
  };
}

async function passes(gw, mock) {
  const route = ROUTE[mock];
  const prompts = Array.from({ length: PROMPTS }, (_, i) => `cache bench ${RUN} ${mock} prompt ${i}: what is ${i} + ${i}?`);
  const rows = [];
  for (const name of ['cold', 'warm']) {
    const m0 = await cacheCounts(gw);
    const p = await pass(gw, route, prompts);
    const m1 = await cacheCounts(gw);
    const mh = delta(m0, m1, route, 'hit');
    const mm = delta(m0, m1, route, 'miss');
    const mb = delta(m0, m1, route, 'bypass');
    const row = {
      mock, pass: name, ...p,
      metrics: { hit: mh, miss: mm, bypass: mb },
      joined: (m1.joined[route] ?? 0) - (m0.joined[route] ?? 0),
      hitRateHeader: p.by.hit / Math.max(1, p.by.hit + p.by.miss),
      hitRateMetrics: mh / Math.max(1, mh + mm),
      entries: m1.g.entries, bytes: m1.g.bytes,
    };
    rows.push(row);
    log(`${mock} ${name}: ${JSON.stringify({ ...row, firstBad: undefined })}${row.firstBad ? `; first bad: ${row.firstBad}` : ''}`);
  }
  return rows;
}

// -------------------------------------------------------------- throughput

const stat = (pid) => {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return Number(f[11]) + Number(f[12]);
  } catch {
    return 0;
  }
};
const ticks = (pids) => pids.reduce((a, p) => a + stat(p), 0);

function wrk(url, body, secs, outFile) {
  return new Promise((resolve, reject) => {
    const p = spawn(WRK, [`-t${WRK_THREADS}`, `-c${CONNS}`, `-d${secs}s`, '--timeout', '5s', '-s', path.join(HERE, 'chat.lua'), url], {
      env: { ...process.env, BENCH_BODY: body, BENCH_KEY: h.DEMO_API_KEY, BENCH_STREAM: STREAM ? '1' : '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { out += d; });
    const kill = setTimeout(() => p.kill('SIGKILL'), (secs + 60) * 1000);
    p.on('error', (e) => { clearTimeout(kill); reject(new Error(`${WRK}: ${e.message}`)); });
    p.on('close', (code) => {
      clearTimeout(kill);
      fs.writeFileSync(outFile, out);
      const line = /^BENCH_RESULT (.*)$/m.exec(out);
      if (code !== 0 || !line) {
        reject(new Error(`wrk exited ${code} without a result:\n${out.slice(-2000)}`));
        return;
      }
      const r = {};
      for (const kv of line[1].split(' ')) {
        const [k, v] = kv.split('=');
        r[k] = Number(v);
      }
      r.firstBad = /^BENCH_FIRST_BAD (.*)$/m.exec(out)?.[1] ?? '';
      resolve(r);
    });
  });
}

async function throughput(gw, ngx) {
  const hot = `cache bench ${RUN} the hot prompt`;
  const legs = [
    { name: 'nginx', desc: 'nginx → instant mock', port: ngx.port, body: JSON.stringify({ model: 'mock-gpt', temperature: 0, messages: [{ role: 'user', content: hot }], ...(STREAM ? { stream: true, stream_options: { include_usage: true } } : {}) }), pids: () => children(ngx.proc.pid) },
    { name: 'llmgw-hit', desc: `llmgw, every request a cache hit (route \`${ROUTE.instant}\`)`, port: gw.port, body: bodyOf(ROUTE.instant, hot), pids: () => [gw.proc.pid], route: ROUTE.instant },
    { name: 'llmgw-pass', desc: 'llmgw pass-through, no cache (route `fast`), for reference', port: gw.port, body: bodyOf('fast', hot), pids: () => [gw.proc.pid] },
  ];
  // The hot prompt stored: a miss, then a hit.
  const agent = new http.Agent({ keepAlive: false });
  const a = await ask(gw.port, agent, legs[1].body);
  const b = await ask(gw.port, agent, legs[1].body);
  if (!a.ok || a.cache !== 'miss' || !b.ok || b.cache !== 'hit') {
    throw new Error(`the hot prompt: first ${a.status}/${a.cache}, then ${b.status}/${b.cache} (want miss, then hit): ${b.text.slice(0, 300)}`);
  }
  const smoke = await ask(ngx.port, agent, legs[0].body);
  if (!smoke.ok) throw new Error(`nginx smoke request: ${smoke.status} ${smoke.text.slice(0, 300)}`);
  const runLeg = async (leg, secs, tag) => {
    const pids = leg.pids();
    const m0 = leg.route ? await cacheCounts(gw) : null;
    const c0 = ticks(pids);
    const w0 = performance.now();
    const r = await wrk(`http://127.0.0.1:${leg.port}/v1/chat/completions`, leg.body, secs, path.join(tmp, `wrk.${tag}.${leg.name}.txt`));
    const wall = (performance.now() - w0) / 1000;
    r.cpu = (100 * (ticks(pids) - c0)) / CLK_TCK / wall;
    if (m0) {
      const m1 = await cacheCounts(gw);
      r.hits = delta(m0, m1, leg.route, 'hit');
      r.notHits = delta(m0, m1, leg.route, 'miss') + delta(m0, m1, leg.route, 'bypass');
    }
    return r;
  };
  if (WARMUP > 0) {
    for (const leg of legs) log(`warm-up ${leg.name}: ${(await runLeg(leg, WARMUP, 'warmup')).rps} req/s`);
  }
  const res = Object.fromEntries(legs.map((l) => [l.name, []]));
  for (let round = 1; round <= ROUNDS; round++) {
    for (const leg of legs) {
      const r = await runLeg(leg, SECONDS, `r${round}`);
      res[leg.name].push(r);
      log(`round ${round}/${ROUNDS} ${leg.name}: ${r.rps} req/s, p50 ${(r.p50_us / 1000).toFixed(2)} ms, p99 ${(r.p99_us / 1000).toFixed(2)} ms, non-2xx ${r.non2xx}, bad ${r.bad}, socket errors ${r.connect + r.read + r.write + r.timeout}, proxy CPU ${r.cpu.toFixed(0)}%${leg.route ? `, hits ${r.hits}, not hits ${r.notHits}` : ''}`);
    }
  }
  return { legs, res };
}

// ------------------------------------------------------------------ report

const med = (a) => {
  const s = a.filter(Number.isFinite).sort((x, y) => x - y);
  if (!s.length) return NaN;
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const f = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '-');
const pctS = (x) => (Number.isFinite(x) ? `${(100 * x).toFixed(1)}%` : '-');

function report(passRows, tp) {
  const rev = (() => { try { return execFileSync('git', ['-C', h.REPO_ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim(); } catch { return '?'; } })();
  const cpu = (/^model name\s*:\s*(.*)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8'))?.[1] ?? 'unknown').trim();
  const L = [];
  L.push(`llmgw response cache benchmark, ${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC, rev ${rev}`);
  L.push(`machine: nproc ${os.cpus().length}, CPU ${cpu}, kernel ${os.release()}`);
  L.push(`setup: llmgw --threads ${WORKERS} --cache-max-mb ${MAX_MB} (file snapshot, not governed; route cache {"ttl_s": ${TTL_S}, "scope": "team"}); mock provider --threads ${MOCK_THREADS}; ${STREAM ? 'streamed (SSE)' : 'whole JSON'} chat, temperature 0`);
  L.push(`passes: ${PROMPTS} distinct prompts, cold then warm, ${PASS_CONC} concurrent node http clients (keep-alive); latency from send to the body's end`);
  L.push('');
  L.push('| mock | pass | requests | errors | x-llmgw-cache hit/miss/bypass | metrics hit/miss/bypass | hit rate (header) | hit rate (metrics) | joined | p50 ms | p99 ms | pass wall s |');
  L.push('| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const r of passRows) {
    L.push(`| ${r.mock} | ${r.pass} | ${r.n} | ${r.errors} | ${r.by.hit}/${r.by.miss}/${r.by.bypass}${r.by.none ? ` (+${r.by.none} without)` : ''} | ${r.metrics.hit}/${r.metrics.miss}/${r.metrics.bypass} | ${pctS(r.hitRateHeader)} | ${pctS(r.hitRateMetrics)} | ${r.joined} | ${f(r.p50)} | ${f(r.p99)} | ${f(r.wall_s, 1)} |`);
  }
  L.push('');
  for (const m of MOCKS) {
    const c = passRows.find((r) => r.mock === m && r.pass === 'cold');
    const w = passRows.find((r) => r.mock === m && r.pass === 'warm');
    if (c && w) L.push(`- ${MOCK_DESC[m]}: median speedup cold/warm ${f(c.p50 / w.p50, 1)}x (p99 ${f(c.p99 / w.p99, 1)}x); warm hit rate ${pctS(w.hitRateHeader)} by header, ${pctS(w.hitRateMetrics)} by metrics; the cache then held ${w.entries} entries, ${w.bytes} bytes`);
  }
  if (tp) {
    L.push('');
    L.push(`Hit throughput: wrk -t${WRK_THREADS} -c${CONNS} -d${SECONDS}s, ${ROUNDS} rounds, legs interleaved, ${WARMUP}s warm-up each; nginx worker_processes ${WORKERS} (run.sh's config), llmgw --threads ${WORKERS}; one prompt`);
    L.push('');
    L.push('| leg | req/s per round | req/s median | p50 ms | p99 ms | errors | proxy CPU | hits / all the route counted (metrics) |');
    L.push('| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |');
    for (const leg of tp.legs) {
      const rs = tp.res[leg.name];
      const errs = rs.reduce((a, r) => a + r.non2xx + r.bad + r.connect + r.read + r.write + r.timeout, 0);
      const nh = rs.reduce((a, r) => a + r.hits, 0);
      const hits = leg.route ? `${nh} / ${nh + rs.reduce((a, r) => a + r.notHits, 0)}` : '-';
      L.push(`| ${leg.desc} | ${rs.map((r) => r.rps.toFixed(0)).join(' / ')} | ${f(med(rs.map((r) => r.rps)), 0)} | ${f(med(rs.map((r) => r.p50_us)) / 1000)} | ${f(med(rs.map((r) => r.p99_us)) / 1000)} | ${errs} | ${f(med(rs.map((r) => r.cpu)), 0)}% | ${hits} |`);
    }
    const rps = (n) => med(tp.res[n].map((r) => r.rps));
    L.push('');
    L.push(`- llmgw-hit / nginx: ${f(rps('llmgw-hit') / rps('nginx'))}x req/s; llmgw-hit / llmgw pass-through: ${f(rps('llmgw-hit') / rps('llmgw-pass'))}x`);
    L.push('- proxy CPU: the llmgw process or the nginx workers, CPU time over wall time (100% = one core); the nginx leg also keeps the mock busy, the hit leg does not. wrk, the proxy and the mock share the machine\'s cores');
  }
  return L.join('\n');
}

// ------------------------------------------------------------------- main

async function main() {
  h.requireBinaries([h.MOCK_BIN, h.DATAPLANE_BIN]);
  const mock = await startMock();
  const gw = await h.startGateway({
    snapshot: snapshotFor(mock), threads: WORKERS,
    args: ['--access-log', '/dev/null', '--cache-max-mb', String(MAX_MB)],
  });
  log(`mock on ${mock.port}, llmgw (pid ${gw.proc.pid}) on ${gw.port}, temp ${tmp}`);
  const rows = [];
  for (const m of MOCKS) rows.push(...await passes(gw, m));
  let tp = null;
  if (THROUGHPUT) {
    const ngx = await startNginx(mock.port);
    log(`nginx (master pid ${ngx.proc.pid}) on ${ngx.port} -> mock`);
    tp = await throughput(gw, ngx);
  }
  const text = report(rows, tp);
  console.log(text);
  if (OUT) fs.writeFileSync(OUT, `${text}\n`);
  let bad = false;
  for (const r of rows) {
    const want = r.pass === 'cold' ? 'miss' : 'hit';
    if (r.errors || r.by[want] !== r.n || r.metrics[want] !== r.n) {
      log(`PROBLEM: ${r.mock} ${r.pass}: ${r.errors} errors, ${r.by[want]} of ${r.n} answered ${want} by header, ${r.metrics[want]} by metrics${r.firstBad ? `; first bad: ${r.firstBad}` : ''}`);
      bad = true;
    }
  }
  if (tp) {
    for (const [name, rs] of Object.entries(tp.res)) {
      for (const r of rs) {
        if (r.non2xx + r.bad + r.connect + r.read + r.write + r.timeout > 0 || (name === 'llmgw-hit' && r.notHits > 0)) {
          log(`PROBLEM: ${name}: errors or requests that were not hits${r.firstBad ? `; first bad: ${r.firstBad}` : ''}`);
          bad = true;
          break;
        }
      }
    }
  }
  return bad ? 2 : 0;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  log(e?.stack ?? String(e));
  process.env.LLMGW_KEEP_TMP = '1';
}
try {
  await h.stopAll();
} catch (e) {
  log(String(e));
  if (code === 0) code = 1;
}
if (process.env.LLMGW_KEEP_TMP) log(`temp dirs kept (${tmp})`);
process.exit(code);
