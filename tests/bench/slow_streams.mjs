#!/usr/bin/env node
// The slow-stream rig (docs/BENCHMARKS.md): the real LLM workload is many
// open streams, each pacing its chunks. A mock provider sends 8 chunks
// 800 ms apart; N streams are opened (ramped over RAMP_MS) through each
// target in turn: the mock directly, nginx as a plain proxy, and llmgw
// (the same-protocol pass-through). For each target and N it reports:
//   - RSS per open stream: the proxy's resident memory with all N open,
//     minus its idle RSS before, over N;
//   - CPU per stream: the proxy's CPU time (utime + stime) over the whole
//     run, over N, and its ratio to nginx's;
//   - first content: from each request's send to its first content chunk,
//     p50 and p99 (direct is the floor);
//   - errors: streams that did not end with [DONE].
// Loopback only; bounded in count (STREAMS) and time (each run ends when
// its streams do, or after RUN_TIMEOUT_MS).
//
//   node tests/bench/slow_streams.mjs            (STREAMS=1000,3000,9000)
//   STREAMS=1000 WORKERS=2 node tests/bench/slow_streams.mjs
//
// Environment: LLMGW_BUILD_DIR (default build/), NGINX_BIN, STREAMS (comma
// list), WORKERS (llmgw --threads = nginx worker_processes, default 2),
// CHUNKS (8), CHUNK_DELAY_MS (800), RAMP_MS (3000), TARGETS (comma list of
// direct,nginx,llmgw), OUT (also write the markdown table there).
// Each stream takes a descriptor here, two in a proxy and one in the mock:
// 9,000 streams need an open-file limit near 20,000 (ulimit -n; llmgw
// raises its soft limit to the hard one by itself).

import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const BUILD = process.env.LLMGW_BUILD_DIR ? path.resolve(ROOT, process.env.LLMGW_BUILD_DIR) : path.join(ROOT, 'build');
const MOCK = path.join(BUILD, 'tests/mockprovider/llmgw-mockprovider');
const DP = path.join(BUILD, 'dataplane/llmgw-dataplane');
const NGINX = process.env.NGINX_BIN || '/usr/sbin/nginx';
const STREAMS = (process.env.STREAMS || '1000,3000,9000').split(',').map(Number);
const WORKERS = Number(process.env.WORKERS || 2);
const CHUNKS = Number(process.env.CHUNKS || 8);
const DELAY = Number(process.env.CHUNK_DELAY_MS || 800);
const RAMP_MS = Number(process.env.RAMP_MS || 3000);
const TARGETS = (process.env.TARGETS || 'direct,nginx,llmgw').split(',');
const RUN_TIMEOUT_MS = RAMP_MS + CHUNKS * DELAY + 60_000;
const KEY = 'sk-llmgw-slow-bench';
const CLK_TCK = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;


const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'llmgw-slow-'));
fs.chmodSync(tmp, 0o711);
const procs = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function start(name, cmd, args, env = {}) {
  const p = spawn(cmd, args, {
    env: { ...process.env, ...env }, stdio: ['ignore', fs.openSync(path.join(tmp, `${name}.out`), 'w'), fs.openSync(path.join(tmp, `${name}.err`), 'w')],
  });
  procs.push(p);
  return p;
}

async function waitHttp(port, p = '/healthz') {
  for (let i = 0; i < 100; i++) {
    const ok = await new Promise((resolve) => {
      const r = http.get({ host: '127.0.0.1', port, path: p, agent: false }, (res) => { res.resume(); resolve(res.statusCode === 200); });
      r.on('error', () => resolve(false));
    });
    if (ok) return;
    await sleep(100);
  }
  throw new Error(`nothing answers on ${port}`);
}

const stat = (pid) => {
  const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
  return { ticks: Number(f[11]) + Number(f[12]) };
};
const rssKiB = (pid) => Number(/VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))[1]);
const children = (pid) => execFileSync('ps', ['-o', 'pid=', '--ppid', String(pid)], { encoding: 'utf8' }).split('\n').map((x) => Number(x.trim())).filter(Boolean);
const sum = (pids, f) => pids.reduce((a, p) => a + f(p), 0);
const pct = (a, q) => {
  if (!a.length) return NaN;
  const s = [...a].sort((x, y) => x - y);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
};

// One stream: resolves {ttfc_ms, ok}.
function stream(port, body, t0) {
  return new Promise((resolve) => {
    let first = 0;
    let raw = '';
    const req = http.request({
      host: '127.0.0.1', port, method: 'POST', path: '/v1/chat/completions', agent: false,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}`, 'content-length': Buffer.byteLength(body) },
    }, (res) => {
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (!first && d.includes('"content":"tok')) first = performance.now();
        raw += d;
        if (raw.length > 8192) raw = raw.slice(-64);
      });
      res.on('end', () => resolve({ ttfc_ms: first ? first - t0 : NaN, ok: res.statusCode === 200 && raw.includes('[DONE]') }));
      res.on('error', () => resolve({ ttfc_ms: NaN, ok: false }));
    });
    req.setTimeout(RUN_TIMEOUT_MS, () => req.destroy());
    req.on('error', () => resolve({ ttfc_ms: NaN, ok: false }));
    req.end(body);
  });
}

async function run(target, port, pids, n) {
  const model = target === 'llmgw' ? 'fast' : 'mock-gpt';
  const body = JSON.stringify({ model, messages: [{ role: 'user', content: 'hello there' }], stream: true, stream_options: { include_usage: true } });
  const rss0 = pids.length ? sum(pids, rssKiB) : 0;
  const cpu0 = pids.length ? sum(pids, (p) => stat(p).ticks) : 0;
  const all = [];
  let peak = 0;
  const gap = RAMP_MS / n;
  const t00 = performance.now();
  const sampler = setInterval(() => { if (pids.length) peak = Math.max(peak, sum(pids, rssKiB)); }, 100);
  for (let i = 0; i < n; i++) {
    const due = t00 + i * gap;
    const wait = due - performance.now();
    if (wait > 1) await sleep(wait);
    all.push(stream(port, body, due)); // latency from the scheduled send
  }
  const res = await Promise.all(all);
  clearInterval(sampler);
  const cpu = pids.length ? (sum(pids, (p) => stat(p).ticks) - cpu0) / CLK_TCK : NaN;
  const ttfc = res.filter((r) => r.ok).map((r) => r.ttfc_ms);
  return {
    target, n, errors: res.filter((r) => !r.ok).length,
    rss_per_stream_kib: pids.length ? (peak - rss0) / n : NaN,
    cpu_ms_per_stream: pids.length ? (cpu * 1000) / n : NaN,
    ttfc_p50: pct(ttfc, 0.5), ttfc_p99: pct(ttfc, 0.99),
  };
}

async function main() {
  for (const b of [MOCK, DP]) if (!fs.existsSync(b)) throw new Error(`not built: ${b}`);
  const mockPort = await freePort();
  start('mock', MOCK, ['--listen', `127.0.0.1:${mockPort}`, '--threads', '2', '--chunks', String(CHUNKS), '--chunk-delay-ms', String(DELAY)]);
  await waitHttp(mockPort);

  const hash = createHash('sha256').update(KEY).digest('hex');
  const snap = {
    version: 1,
    providers: [{ name: 'mock', driver: 'openai', base_url: `http://127.0.0.1:${mockPort}/v1`, credential_ref: 'env:SLOW_MOCK_KEY', enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000 }],
    routes: [{ name: 'fast', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model: 'mock-gpt' }] }],
    keys: [{ id: 'key_slow', hash, status: 'active', team: 'bench' }],
  };
  fs.writeFileSync(path.join(tmp, 'snapshot.json'), JSON.stringify(snap));
  const gwPort = await freePort();
  const gw = start('llmgw', DP, ['--snapshot', path.join(tmp, 'snapshot.json'), '--listen', `127.0.0.1:${gwPort}`, '--threads', String(WORKERS), '--access-log', '/dev/null'], { SLOW_MOCK_KEY: 'x' });
  await waitHttp(gwPort);

  const ngxPort = await freePort();
  const nd = path.join(tmp, 'nginx');
  fs.mkdirSync(nd, { mode: 0o755 });
  fs.writeFileSync(path.join(nd, 'nginx.conf'), `daemon off; master_process on; worker_processes ${WORKERS};
worker_rlimit_nofile 20000; pid ${nd}/nginx.pid; error_log ${nd}/error.log warn;
events { worker_connections 30000; }
http { access_log off; client_body_temp_path ${nd}/cb; proxy_temp_path ${nd}/pt; fastcgi_temp_path ${nd}/f; uwsgi_temp_path ${nd}/u; scgi_temp_path ${nd}/s;
  upstream mock { server 127.0.0.1:${mockPort}; keepalive 64; }
  server { listen 127.0.0.1:${ngxPort};
    location / { proxy_pass http://mock; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; proxy_read_timeout 120s; } } }
`);
  const ngx = start('nginx', NGINX, ['-p', `${nd}/`, '-c', `${nd}/nginx.conf`, '-e', `${nd}/error.log`]);
  await waitHttp(ngxPort);
  const ngxWorkers = children(ngx.pid);

  const rows = [];
  for (const n of STREAMS) {
    for (const t of TARGETS) {
      const port = t === 'direct' ? mockPort : t === 'nginx' ? ngxPort : gwPort;
      const pids = t === 'direct' ? [] : t === 'nginx' ? ngxWorkers : [gw.pid];
      await sleep(1000);
      const r = await run(t, port, pids, n);
      rows.push(r);
      console.error(`[slow] ${t} ${n}: ${JSON.stringify(r)}`);
    }
  }
  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : '-');
  const lines = [
    `Slow streams: ${CHUNKS} chunks ${DELAY} ms apart, N opened over ${RAMP_MS} ms; llmgw --threads ${WORKERS}, nginx worker_processes ${WORKERS}; rev ${execFileSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim()}; ${new Date().toISOString().slice(0, 16)}Z`,
    '',
    '| target | streams | errors | RSS per open stream (KiB) | CPU per stream (ms) | CPU vs nginx | first content p50 (ms) | p99 (ms) |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    const ng = rows.find((x) => x.target === 'nginx' && x.n === r.n);
    const vs = r.target === 'direct' || !ng ? '-' : `${f(r.cpu_ms_per_stream / ng.cpu_ms_per_stream, 2)}x`;
    lines.push(`| ${r.target} | ${r.n} | ${r.errors} | ${f(r.rss_per_stream_kib)} | ${f(r.cpu_ms_per_stream, 3)} | ${vs} | ${f(r.ttfc_p50)} | ${f(r.ttfc_p99)} |`);
  }
  const table = lines.join('\n');
  console.log(table);
  if (process.env.OUT) fs.writeFileSync(process.env.OUT, `${table}\n`);
  return rows.some((r) => r.errors) ? 2 : 0;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  console.error(`[slow] ${e.stack}`);
} finally {
  for (const p of procs.reverse()) {
    try { p.kill('SIGTERM'); } catch { /* gone */ }
  }
  await sleep(500);
  for (const p of procs) {
    try { p.kill('SIGKILL'); } catch { /* gone */ }
  }
  if (!process.env.KEEP_TMP) fs.rmSync(tmp, { recursive: true, force: true });
}
process.exit(code);
