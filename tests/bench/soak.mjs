#!/usr/bin/env node
// The soak rig (docs/BENCHMARKS.md, "Soak"; not part of CI): a long run of
// mixed traffic through two data planes with faults injected upstream, the
// memory and descriptors of the data planes and the control plane sampled
// at a fixed interval, and a verdict on whether they stay flat.
//
// It starts, all on 127.0.0.1: a throwaway PostgreSQL (as the integration
// harness does), llmgw-controlplane, the mock provider, and two
// llmgw-dataplane processes that take their snapshot from the control
// plane over gRPC and spool their ledger rows to it. It configures them
// through the admin API: healthy providers `alpha` (the OpenAI pass-through),
// `beta` (OpenAI, translating) and `claude` (Anthropic); a provider `flaky`
// whose targets carry mock fault SPECs (5xx, 429, slow first byte, hangs,
// streams cut mid-way, malformed chunks, empty answers), each applying only
// to requests whose id starts with a given prefix (the mock's `only_id`);
// a provider `dead` on a port nothing listens on (connection refused);
// routes with failover (a faulty first target, a healthy second); a key
// with a $1,000,000/day cost budget (never reached, but every request
// reserves against it) and prices, so every attempt leaves a priced ledger
// row; and a second key with a 30 requests/minute limit that the traffic
// exceeds on purpose, so refusals (429) are part of the mix.
//
// Traffic is open-loop at SOAK_RPS (alternating between the two data
// planes), SOAK_RPS x SOAK_MINUTES x 60 requests in all, at most
// SOAK_MAX_INFLIGHT at once (beyond it a due request is skipped and
// counted). The mix: OpenAI chat (JSON and SSE), Anthropic messages (JSON
// and SSE), Responses, embeddings, slow streams read to the end, clients
// that leave mid-stream or before the first byte, malformed JSON, a bad
// key, an unknown model, the rate-limited key. Of the routed requests
// (chat, messages, Responses) a third go to a faulty route and 30% of those
// carry its fault id (about 10%), and about 5% go to the route whose first
// target is dead. The data planes run with --breaker-open-ms 2000, so the
// breakers that the faults open are probed again sooner. 15% of the
// requests use a fresh connection (Connection: close), the others
// keep-alive agents.
//
// Every SOAK_SAMPLE_S it samples each data plane, the control plane and
// (for reference, not in the verdict) the mock: RSS (VmRSS), open
// descriptors (/proc/PID/fd), threads, and the requests by outcome so far,
// plus a few of the gateways' own counters (/metrics: failovers, breaker
// openings, ledger rows). After the traffic it samples descriptors twice:
// 5 s later ("drained") and SOAK_IDLE_S later ("idle", default 65 s: past
// the data plane's 55 s close of idle upstream connections).
//
// Verdict, per process (dp-a, dp-b, cp), "flat" when both hold:
//   - RSS: the least-squares growth over the samples after the warm-up (the
//     first 10% of the samples, at least one) is below 5% of the fitted RSS
//     at the window's start, or below 1 MiB;
//   - descriptors: the idle count is within the pre-traffic baseline + 5.
// Otherwise "growing". The run is flat when all three are.
//
// Usage:
//   node tests/bench/soak.mjs                         (60 minutes)
//   SOAK_MINUTES=3 SOAK_SAMPLE_S=20 node tests/bench/soak.mjs
//
// Environment:
//   LLMGW_BUILD_DIR    build tree (default <repo>/build); the three binaries
//                      (dataplane, controlplane, mockprovider) are copied
//                      into the temp dir at start and the copies run, so a
//                      rebuild during the soak does not touch it
//   SOAK_MINUTES       traffic duration, minutes (default 60; fractions ok)
//   SOAK_RPS           requests per second over both data planes (default 50)
//   SOAK_SAMPLE_S      sampling interval, seconds (default 60)
//   SOAK_IDLE_S        wait after the traffic before the idle descriptor
//                      sample (default 65)
//   SOAK_MAX_INFLIGHT  bound on requests in flight (default 256)
//   SOAK_DP_THREADS    --threads of each data plane (default 1)
//   SOAK_SEED          seed of the traffic mix (default 1)
//   SOAK_ACCESS_LOG    1: the data planes' access logs go to files in the
//                      temp dir (default /dev/null; at 50 req/s they
//                      grow about 170 MB an hour together)
//   SOAK_OUT           also write the markdown table and summary here
//                      (rewritten after every sample)
//   SOAK_CSV           also write the samples as CSV here (likewise)
//   SOAK_KEEP_TMP      1: keep the temp dir (logs); it is kept on failure
//
// Exit status: 0 flat; 3 growing; 2 a process died during the run or did
// not stop cleanly (SIGTERM: exit 0 within 10 s); 1 the rig itself failed,
// or too few samples to decide (fewer than 3 during the traffic); 130/143
// interrupted (what was sampled is summarized first). Everything
// it started is stopped by pid, on every path.

import { execFileSync, spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..', '..');
const BUILD = process.env.LLMGW_BUILD_DIR ? path.resolve(ROOT, process.env.LLMGW_BUILD_DIR) : path.join(ROOT, 'build');
const SRC_BINS = {
  dataplane: path.join(BUILD, 'dataplane', 'llmgw-dataplane'),
  controlplane: path.join(BUILD, 'controlplane', 'llmgw-controlplane'),
  mockprovider: path.join(BUILD, 'tests', 'mockprovider', 'llmgw-mockprovider'),
};

function num(name, def, lo, hi) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const v = Number(raw);
  if (!Number.isFinite(v) || v < lo || v > hi) {
    console.error(`[soak] ${name} must be a number in [${lo}, ${hi}], got '${raw}'`);
    process.exit(1);
  }
  return v;
}
const MINUTES = num('SOAK_MINUTES', 60, 0.1, 24 * 60);
const RPS = num('SOAK_RPS', 50, 0.1, 2000);
const SAMPLE_S = num('SOAK_SAMPLE_S', 60, 1, 3600);
const IDLE_S = num('SOAK_IDLE_S', 65, 0, 600);
const MAX_INFLIGHT = Math.floor(num('SOAK_MAX_INFLIGHT', 256, 1, 10000));
const DP_THREADS = Math.floor(num('SOAK_DP_THREADS', 1, 1, 64));
const SEED = Math.floor(num('SOAK_SEED', 1, 0, 2 ** 31));
const ACCESS_LOG = process.env.SOAK_ACCESS_LOG === '1';
const OUT = process.env.SOAK_OUT || '';
const CSV = process.env.SOAK_CSV || '';
const KEEP_TMP = process.env.SOAK_KEEP_TMP === '1';
const TOTAL = Math.max(1, Math.floor(RPS * MINUTES * 60));
const CLIENT_TIMEOUT_MS = 60_000;
const STOP_GRACE_MS = 10_000;

const log = (s) => console.log(`[soak] ${s}`);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const t0wall = Date.now();

// ---------------------------------------------------------------------------
// Temp dir and the copied binaries

const TMP = fs.mkdtempSync(path.join(os.tmpdir(), 'llmgw-soak-'));
fs.chmodSync(TMP, 0o711);
const BIN_DIR = path.join(TMP, 'bin');
fs.mkdirSync(BIN_DIR);
const BINS = {};
const BIN_INFO = [];
for (const [k, src] of Object.entries(SRC_BINS)) {
  try {
    fs.accessSync(src, fs.constants.X_OK);
  } catch {
    console.error(`[soak] not built: ${src} (set LLMGW_BUILD_DIR)`);
    fs.rmSync(TMP, { recursive: true, force: true });
    process.exit(1);
  }
  const dst = path.join(BIN_DIR, path.basename(src));
  fs.copyFileSync(src, dst);
  fs.chmodSync(dst, 0o755);
  BINS[k] = dst;
  const st = fs.statSync(src);
  const sha = createHash('sha256').update(fs.readFileSync(dst)).digest('hex').slice(0, 12);
  BIN_INFO.push(`${path.basename(src)} (sha256 ${sha}, built ${st.mtime.toISOString().slice(0, 16)}Z)`);
}
// The harness reads these at import: it must see the copies, not the build.
process.env.LLMGW_DATAPLANE_BIN = BINS.dataplane;
process.env.LLMGW_CONTROLPLANE_BIN = BINS.controlplane;
process.env.LLMGW_MOCKPROVIDER_BIN = BINS.mockprovider;
const h = await import('../integration/harness.mjs');
const { Config, masterKey } = await import('../integration/cpconfig.mjs');
// The harness's own SIGINT/SIGTERM handlers kill at once and exit; ours
// stop the traffic, summarize, and stop everything in order (below).
process.removeAllListeners('SIGINT');
process.removeAllListeners('SIGTERM');

// ---------------------------------------------------------------------------
// Processes: stdout/stderr to files in TMP (a soak's logs would otherwise
// pile up in this process's memory), stopped by pid.

const procs = []; // every Proc started
let pg = null;

class Proc {
  constructor(name, bin, args, env) {
    this.name = name;
    this.outPath = path.join(TMP, `${name}.stdout`);
    this.errPath = path.join(TMP, `${name}.stderr`);
    this.out = fs.createWriteStream(this.outPath);
    this.exitInfo = null;
    this.stopping = false;
    this.child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', fs.openSync(this.errPath, 'w')] });
    this.pid = this.child.pid;
    procs.push(this);
    this._head = ''; // stdout until the listening line is found
    this._listening = null;
    this._waiters = [];
    this.child.stdout.on('data', (d) => {
      this.out.write(d);
      if (this._listening) return;
      this._head += d.toString('utf8');
      for (const line of this._head.split('\n')) {
        const j = h.tryParseJson(line);
        if (j && j.msg === 'listening' && Number.isInteger(j.port) && j.port > 0) {
          this._listening = j;
          this._head = '';
          break;
        }
      }
      if (this._head.length > 1 << 20) this._head = this._head.slice(-65536);
      this._wake();
    });
    this.exited = new Promise((resolve) => {
      this.child.on('error', (e) => {
        if (!this.exitInfo && this.pid === undefined) {
          this.exitInfo = { code: null, signal: null, error: e.message };
          this._wake();
          resolve(this.exitInfo);
        }
      });
      this.child.on('close', (code, signal) => {
        this.exitInfo = { code, signal };
        this.out.end();
        this._wake();
        resolve(this.exitInfo);
      });
    });
  }

  _wake() {
    const ws = this._waiters;
    this._waiters = [];
    for (const w of ws) w();
  }

  get running() {
    return this.exitInfo === null;
  }

  async waitListening(timeoutMs = h.START_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (!this._listening) {
      if (this.exitInfo) throw new Error(`${this.name} exited during start-up (${JSON.stringify(this.exitInfo)}): ${this.tail()}`);
      if (Date.now() > deadline) throw new Error(`${this.name} did not print its listening line within ${timeoutMs} ms: ${this.tail()}`);
      await Promise.race([new Promise((r) => this._waiters.push(r)), sleep(100)]);
    }
    return this._listening;
  }

  tail(n = 2000) {
    try {
      const t = fs.readFileSync(this.errPath, 'utf8');
      return t.length > n ? `...${t.slice(-n)}` : t;
    } catch {
      return '';
    }
  }

  /** SIGTERM, SIGKILL after STOP_GRACE_MS; resolves with {clean, exitInfo}. */
  async stop() {
    if (!this.running) return { clean: !this.diedEarly && this.exitInfo.code === 0, exitInfo: this.exitInfo };
    this.stopping = true;
    try {
      process.kill(this.pid, 'SIGTERM');
    } catch { /* gone */ }
    let killed = false;
    const timer = setTimeout(() => {
      if (this.running) {
        killed = true;
        try {
          process.kill(this.pid, 'SIGKILL');
        } catch { /* gone */ }
      }
    }, STOP_GRACE_MS);
    await this.exited;
    clearTimeout(timer);
    return { clean: !killed && this.exitInfo.code === 0, killed, exitInfo: this.exitInfo };
  }
}

function killAllNow() {
  for (const p of procs) {
    if (p.running && p.pid) {
      try {
        process.kill(p.pid, 'SIGKILL');
      } catch { /* gone */ }
    }
  }
}
process.on('exit', killAllNow); // the harness's own exit handler stops PostgreSQL

// ---------------------------------------------------------------------------
// /proc sampling

const CLK_TCK = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

function procStats(pid) {
  try {
    const st = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const rss = Number(/VmRSS:\s+(\d+)/.exec(st)?.[1] ?? NaN);
    const threads = Number(/Threads:\s+(\d+)/.exec(st)?.[1] ?? NaN);
    const fds = fs.readdirSync(`/proc/${pid}/fd`).length;
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const cpu = (Number(f[11]) + Number(f[12])) / CLK_TCK; // utime + stime, seconds
    return { rss, fds, threads, cpu };
  } catch {
    return { rss: NaN, fds: NaN, threads: NaN, cpu: NaN };
  }
}

// Prometheus text: the sum of a metric's series whose labels match every
// pair of `want` (a subset); NaN when the scrape failed.
function metricSum(text, name, want = {}) {
  if (text == null) return NaN;
  let sum = 0;
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const rest = line.slice(name.length);
    if (rest[0] !== '{' && rest[0] !== ' ') continue;
    let labels = '';
    let value = rest;
    if (rest[0] === '{') {
      const end = rest.lastIndexOf('}');
      labels = rest.slice(1, end);
      value = rest.slice(end + 1);
    }
    if (!Object.entries(want).every(([k, v]) => labels.includes(`${k}="${v}"`))) continue;
    const v = Number(value.trim().split(/\s+/)[0]);
    if (Number.isFinite(v)) sum += v;
  }
  return sum;
}

function scrape(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false, timeout: 5000 }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(res.statusCode === 200 ? t : null));
      res.on('error', () => resolve(null));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(null));
  });
}

// ---------------------------------------------------------------------------
// The traffic

const rand = h.rng(SEED);
function pick(weighted) {
  const total = weighted.reduce((a, [, w]) => a + w, 0);
  let x = rand() * total;
  for (const [v, w] of weighted) {
    x -= w;
    if (x < 0) return v;
  }
  return weighted[weighted.length - 1][0];
}

// Faulty routes: [flaky/<model with the SPEC>, beta/mock-gpt]. The SPEC
// applies only to request ids starting with its prefix (the gateway sends
// `<request id>~xxxxxxxx.<attempt>` upstream), so the same route also
// carries clean requests and its breaker sees a mix, as with a provider
// that fails for some requests only.
const FAULTS = {
  'f-5xx': { prefix: 'x5xx', spec: 'status=503' },
  'f-429': { prefix: 'x429', spec: 'status=429,retry_after=1' },
  'f-slow': { prefix: 'xslow', spec: 'ttfb_ms=2500' }, // past flaky's first_byte_timeout_ms 1000
  'f-hang': { prefix: 'xhang', spec: 'hang=1' },
  'f-cut': { prefix: 'xcut', spec: 'drop_after=3' },
  'f-mal': { prefix: 'xmal', spec: 'malformed=2' },
  'f-empty': { prefix: 'xempty', spec: 'empty=1' },
};
const FAULT_SHARE = 0.3; // of the requests on a faulty route, those with the fault's id
// Where the routed kinds go (weights).
const ROUTES = [
  ['chat', 40], ['claude', 10],
  ['f-5xx', 5], ['f-429', 4], ['f-slow', 4], ['f-hang', 3], ['f-cut', 5], ['f-mal', 4], ['f-empty', 4],
  ['f-dead', 4], // dead (connection refused) first: its breaker opens and probes; alpha serves
];
// The request kinds (relative weights; they sum to 92).
const KINDS = [
  ['chat', 26], ['stream', 20], ['anth', 6], ['anth_stream', 6], ['responses', 4], ['embed', 8],
  ['slow_full', 3], ['abort_mid', 4], ['abort_early', 3],
  ['bad_json', 3], ['bad_key', 3], ['unknown_model', 2], ['tight', 4],
];
const FRESH_CONN_SHARE = 0.15;
// The data planes' first breaker open interval (default 5000): shorter, so
// a faulty target is probed again sooner and more of the fault ids reach
// the mock instead of being skipped past an open breaker.
const BREAKER_OPEN_MS = 2000;

const counts = new Map(); // "kind result" -> n
const statusCounts = new Map(); // HTTP status (or a client-side result) -> n
let started = 0;
let done = 0;
let skipped = 0;
let inflight = 0;
let failedOver = 0; // answers whose x-llmgw-attempts > 1
let faultIds = 0;
let anomalies = 0; // results that should never happen, whatever the fault
const anomalyExamples = [];
const bump = (m, k, n = 1) => m.set(k, (m.get(k) ?? 0) + n);

function record(kind, result, status, rid) {
  bump(counts, `${kind} ${result}`);
  bump(statusCounts, status === 0 ? result : String(status));
  // Never a silent end, never a body that is not the format's, never a 5xx
  // (every faulty first target has a healthy second), never a lost socket
  // or a client timeout (the gateway answers every request).
  if (['truncated', 'bad_body', 'net_error', 'timeout'].includes(result) || status >= 500) {
    anomalies++;
    if (anomalyExamples.length < 10) anomalyExamples.push(`${kind} ${rid}: ${result} ${status}`);
  }
}

let API_KEY = '';
let TIGHT_KEY = '';
const BAD_KEY = `llmgw-${'0'.repeat(64)}`;
let agents = [];

function requestOnce(port, agent, { kind, rid, method = 'POST', p, headers, body, stream, abort }) {
  return new Promise((resolve) => {
    const payload = Buffer.from(body);
    const hdr = { 'content-type': 'application/json', 'content-length': String(payload.length), 'x-request-id': rid, ...headers };
    if (!agent) hdr.connection = 'close';
    let finished = false;
    const finish = (result, status) => {
      if (finished) return;
      finished = true;
      resolve({ result, status });
    };
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: hdr, agent: agent ?? false });
    req.setTimeout(CLIENT_TIMEOUT_MS, () => {
      finish('timeout', 0);
      req.destroy();
    });
    let early = null;
    if (abort === 'early') {
      early = setTimeout(() => {
        finish('aborted', 0);
        req.destroy();
      }, 100);
    }
    req.on('error', () => finish('net_error', 0));
    req.on('response', (res) => {
      const status = res.statusCode;
      if (Number(res.headers['x-llmgw-attempts'] ?? 1) > 1) failedOver++;
      let tail = '';
      let sawError = false;
      let sawContent = false;
      let whole = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (finished) return;
        const s = tail + d;
        if (stream) {
          if (/data: \{"error"|event: error|"type":"response\.failed"/.test(s)) sawError = true;
          if (!sawContent && /"content":"tok|"text":"tok|"delta":"tok/.test(s)) sawContent = true;
          tail = s.slice(-256);
          if (abort === 'mid' && sawContent) {
            clearTimeout(early);
            finish('aborted', 0);
            res.destroy();
            req.destroy();
          }
        } else if (whole.length < 1 << 20) {
          whole += d;
        }
      });
      res.on('error', () => finish('net_error', status));
      res.on('close', () => {
        clearTimeout(early);
        if (finished) return;
        if (!res.complete) return finish('net_error', status);
        if (status !== 200) return finish(`http_${status}`, status);
        if (stream) {
          if (sawError) return finish('inband_error', status);
          const end = /data: \[DONE\]|event: message_stop/.test(tail);
          return finish(end ? 'ok' : 'truncated', status);
        }
        const j = h.tryParseJson(whole);
        const good = j && (Array.isArray(j.choices) || Array.isArray(j.content) || Array.isArray(j.data) || Array.isArray(j.output));
        return finish(good ? 'ok' : 'bad_body', status);
      });
    });
    req.end(payload);
  });
}

function buildRequest(kind, seq) {
  const dpIdx = seq % 2;
  let route = 'chat';
  let rid = `ok-${dpIdx ? 'b' : 'a'}-${seq}`;
  const routed = ['chat', 'stream', 'anth', 'anth_stream', 'responses'].includes(kind);
  if (routed) {
    route = pick(ROUTES);
    const f = FAULTS[route];
    if (f && rand() < FAULT_SHARE) {
      rid = `${f.prefix}-${dpIdx ? 'b' : 'a'}-${seq}`;
      faultIds++;
    }
  }
  const msg = [{ role: 'user', content: `soak request ${seq} one two three` }];
  const auth = { authorization: `Bearer ${API_KEY}` };
  const r = { kind, rid, dpIdx, p: '/v1/chat/completions', headers: auth, stream: false };
  switch (kind) {
    case 'chat':
      r.body = JSON.stringify({ model: route, messages: msg, max_tokens: 64 });
      break;
    case 'stream':
      r.body = JSON.stringify({ model: route, messages: msg, max_tokens: 64, stream: true, stream_options: { include_usage: true } });
      r.stream = true;
      break;
    case 'anth':
    case 'anth_stream':
      r.p = '/v1/messages';
      r.headers = { 'x-api-key': API_KEY, 'anthropic-version': '2023-06-01' };
      r.stream = kind === 'anth_stream';
      r.body = JSON.stringify({ model: route, max_tokens: 64, messages: msg, ...(r.stream ? { stream: true } : {}) });
      break;
    case 'responses':
      r.p = '/v1/responses';
      r.body = JSON.stringify({ model: route, input: `soak request ${seq} one two three`, max_output_tokens: 64 });
      break;
    case 'embed':
      r.p = '/v1/embeddings';
      r.body = JSON.stringify({ model: 'embed', input: [`soak ${seq}`, 'one two three'] });
      break;
    case 'slow_full':
    case 'abort_mid':
      r.body = JSON.stringify({ model: 'slow', messages: msg, stream: true });
      r.stream = true;
      if (kind === 'abort_mid') r.abort = 'mid';
      break;
    case 'abort_early': // gone before the first byte (the slow route waits 300 ms)
      r.body = JSON.stringify({ model: 'slow', messages: msg, stream: rand() < 0.5 });
      r.stream = true;
      r.abort = 'early';
      break;
    case 'bad_json':
      r.body = `{"model":"chat","messages":[{"role":"user","content":"soak ${seq}"}`;
      break;
    case 'bad_key':
      r.headers = { authorization: `Bearer ${BAD_KEY}` };
      r.body = JSON.stringify({ model: 'chat', messages: msg });
      break;
    case 'unknown_model':
      r.body = JSON.stringify({ model: 'no-such-route', messages: msg });
      break;
    case 'tight':
      r.headers = { authorization: `Bearer ${TIGHT_KEY}` };
      r.body = JSON.stringify({ model: 'chat', messages: msg, max_tokens: 64 });
      break;
    default:
      throw new Error(`unknown kind ${kind}`);
  }
  return r;
}

async function fire(dps, seq) {
  const kind = pick(KINDS);
  const r = buildRequest(kind, seq);
  const fresh = rand() < FRESH_CONN_SHARE;
  inflight++;
  started++;
  try {
    const { result, status } = await requestOnce(dps[r.dpIdx].port, fresh ? null : agents[r.dpIdx], r);
    record(kind, result, status, r.rid);
  } catch (e) {
    record(kind, 'rig_error', 0, r.rid);
    console.error(`[soak] request ${r.rid}: ${e.message}`);
  } finally {
    inflight--;
    done++;
  }
}

// ---------------------------------------------------------------------------
// Samples and the summary

const samples = []; // {t_min, phase, procs: {name: {rss, fds, threads}}, req: {...}, gw: {...}}
let watched = []; // [{name, proc, port}] sampled each time
let dead = []; // names of processes found dead before the stop

async function takeSample(phase, tStart) {
  const s = {
    t_min: (Date.now() - tStart) / 60000, phase, procs: {},
    req: {
      done, started, skipped, inflight, failedOver, faultIds, anomalies,
      status: Object.fromEntries(statusCounts),
    },
    gw: {},
  };
  for (const w of watched) s.procs[w.name] = procStats(w.proc.pid);
  const texts = await Promise.all(watched.map((w) => (w.metrics ? scrape(w.port) : Promise.resolve(null))));
  // Summed over the data planes that answered the scrape (a dead one's
  // counters drop out: the run is reported as not valid anyway).
  const g = { failovers: 0, retries: 0, breaker_opens: 0, attempts_broke: 0, ledger_pending: 0 };
  const add = (k, v) => { if (Number.isFinite(v)) g[k] += v; };
  watched.forEach((w, i) => {
    if (!w.metrics) return;
    const t = texts[i];
    if (w.name === 'cp') {
      s.gw.ledger_rows = metricSum(t, 'llmgw_cp_ledger_rows_total', { result: 'inserted' });
      return;
    }
    add('failovers', metricSum(t, 'llmgw_failovers_total'));
    add('retries', metricSum(t, 'llmgw_retries_total'));
    add('breaker_opens', metricSum(t, 'llmgw_breaker_transitions_total', { to: 'open' }));
    add('attempts_broke', metricSum(t, 'llmgw_attempts_total', { outcome: 'broke' }));
    add('ledger_pending', metricSum(t, 'llmgw_ledger_pending_rows'));
  });
  Object.assign(s.gw, g);
  samples.push(s);
  return s;
}

const statusGroup = (st, test) => Object.entries(st).filter(([k]) => test(k)).reduce((a, [, v]) => a + v, 0);
const is2xx = (k) => /^2\d\d$/.test(k);
const is4xx = (k) => /^4\d\d$/.test(k);
const is5xx = (k) => /^5\d\d$/.test(k);
const isClient = (k) => !/^\d+$/.test(k);

function sampleLine(s) {
  const st = s.req.status;
  const parts = [`t=${s.t_min.toFixed(1)}m ${s.phase.padEnd(7)}`,
    `req ${s.req.done} (2xx ${statusGroup(st, is2xx)}, 4xx ${statusGroup(st, is4xx)}, 5xx ${statusGroup(st, is5xx)}, client-side ${statusGroup(st, isClient)}, anomalies ${s.req.anomalies}; in flight ${s.req.inflight}, skipped ${s.req.skipped})`];
  for (const [n, p] of Object.entries(s.procs)) parts.push(`${n} ${p.rss} KiB ${p.fds} fds ${p.threads} thr`);
  parts.push(`failovers ${s.gw.failovers} retries ${s.gw.retries} breaker opens ${s.gw.breaker_opens} ledger rows ${s.gw.ledger_rows}`);
  return parts.join(' | ');
}

function lsq(points) { // [[x, y]] -> {slope, intercept}
  const n = points.length;
  if (n < 2) return { slope: NaN, intercept: NaN };
  const mx = points.reduce((a, [x]) => a + x, 0) / n;
  const my = points.reduce((a, [, y]) => a + y, 0) / n;
  let sxy = 0;
  let sxx = 0;
  for (const [x, y] of points) {
    sxy += (x - mx) * (y - my);
    sxx += (x - mx) ** 2;
  }
  const slope = sxx > 0 ? sxy / sxx : NaN;
  return { slope, intercept: my - slope * mx };
}

const VERDICT_PROCS = ['dp-a', 'dp-b', 'cp'];
const RSS_GROWTH_PCT = 5;
const RSS_GROWTH_FLOOR_KIB = 1024;
const FD_SLACK = 5;
const RULE = `flat when, for each of ${VERDICT_PROCS.join(', ')}, the least-squares RSS growth over the traffic samples after the warm-up (the first 10%, at least one) is below ${RSS_GROWTH_PCT}% of the fitted RSS at the window's start or below ${RSS_GROWTH_FLOOR_KIB} KiB, and the descriptors ${IDLE_S} s after the traffic are at most the pre-traffic baseline + ${FD_SLACK}; otherwise growing`;

function summarize() {
  const traffic = samples.filter((s) => s.phase === 'traffic');
  const baseline = samples.find((s) => s.phase === 'baseline');
  const idle = [...samples].reverse().find((s) => s.phase === 'idle');
  const drained = samples.find((s) => s.phase === 'drained');
  const warm = Math.max(1, Math.ceil(traffic.length * 0.1));
  const window = traffic.slice(warm);
  const rows = [];
  let flat = true;
  let decided = true;
  const names = watched.map((w) => w.name);
  for (const n of names) {
    const first = traffic[0]?.procs[n];
    const last = traffic[traffic.length - 1]?.procs[n];
    const pts = window.map((s) => [s.t_min, s.procs[n].rss]).filter(([, y]) => Number.isFinite(y));
    const { slope, intercept } = lsq(pts);
    const span = pts.length >= 2 ? pts[pts.length - 1][0] - pts[0][0] : NaN;
    const growth = slope * span;
    const startRss = pts.length >= 2 ? intercept + slope * pts[0][0] : NaN;
    const peak = Math.max(...traffic.map((s) => s.procs[n].rss).filter(Number.isFinite));
    const fdBase = baseline?.procs[n]?.fds;
    const fdIdle = idle?.procs[n]?.fds;
    let verdict = '-';
    if (VERDICT_PROCS.includes(n)) {
      if (!Number.isFinite(growth) || !Number.isFinite(fdIdle) || !Number.isFinite(fdBase)) {
        verdict = 'undecided';
        decided = false;
      } else {
        const rssOk = growth < Math.max(startRss * RSS_GROWTH_PCT / 100, RSS_GROWTH_FLOOR_KIB);
        const fdOk = fdIdle <= fdBase + FD_SLACK;
        verdict = rssOk && fdOk ? 'flat' : `growing (${[!rssOk && 'RSS', !fdOk && 'fds'].filter(Boolean).join(', ')})`;
        if (!rssOk || !fdOk) flat = false;
      }
    }
    rows.push({
      n, first, last, slope, growth, startRss, peak, fdBase, fdDrained: drained?.procs[n]?.fds, fdIdle,
      thrFirst: first?.threads, thrLast: last?.threads, verdict,
    });
  }
  return { rows, flat, decided, warm, windowLen: window.length, trafficLen: traffic.length };
}

const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : '-');
const f0 = (x) => (Number.isFinite(x) ? String(Math.round(x)) : '-');

function summaryText(sum, meta) {
  const L = [];
  L.push(`soak summary: ${meta.title}`);
  L.push(`verdict rule: ${RULE}`);
  L.push(`samples: ${sum.trafficLen} during the traffic, warm-up ${sum.warm}, fit over ${sum.windowLen}`);
  L.push('');
  L.push(`${'process'.padEnd(8)} ${'RSS first'.padStart(10)} ${'RSS last'.padStart(10)} ${'RSS peak'.padStart(10)} ${'slope KiB/min'.padStart(14)} ${'fitted growth'.padStart(14)} ${'fds base'.padStart(9)} ${'first'.padStart(6)} ${'last'.padStart(6)} ${'drained'.padStart(8)} ${'idle'.padStart(6)} ${'threads'.padStart(8)}  verdict`);
  for (const r of sum.rows) {
    L.push(`${r.n.padEnd(8)} ${f0(r.first?.rss).padStart(10)} ${f0(r.last?.rss).padStart(10)} ${f0(r.peak).padStart(10)} ${f1(r.slope).padStart(14)} ${f0(r.growth).padStart(14)} ${f0(r.fdBase).padStart(9)} ${f0(r.first?.fds).padStart(6)} ${f0(r.last?.fds).padStart(6)} ${f0(r.fdDrained).padStart(8)} ${f0(r.fdIdle).padStart(6)} ${`${f0(r.thrFirst)}->${f0(r.thrLast)}`.padStart(8)}  ${r.verdict}`);
  }
  L.push('(RSS in KiB; fitted growth = slope x the fit window; fds: base before the traffic, first/last traffic samples, drained 5 s and idle ' + IDLE_S + ' s after it)');
  L.push('');
  const st = Object.entries(Object.fromEntries(statusCounts)).sort(([a], [b]) => a.localeCompare(b));
  L.push(`requests: ${done} answered or ended of ${started} sent, ${skipped} skipped (over ${MAX_INFLIGHT} in flight); by status: ${st.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  L.push(`faults: ${faultIds} requests carried a fault id; ${failedOver} answers took more than one attempt; gateways: ${meta.gw.failovers} failovers, ${meta.gw.retries} retries, ${meta.gw.breaker_opens} breaker openings, ${meta.gw.attempts_broke} attempts broke after content; ledger rows stored ${meta.gw.ledger_rows}`);
  const byKind = [...counts.entries()].sort(([a], [b]) => a.localeCompare(b));
  L.push(`by kind and result: ${byKind.map(([k, v]) => `${k} ${v}`).join(', ')}`);
  L.push(`anomalies (truncated streams, bodies not the format's, 5xx, lost sockets, client timeouts): ${anomalies}${anomalyExamples.length ? `; e.g. ${anomalyExamples.join('; ')}` : ''}`);
  if (meta.problems.length) L.push(`PROBLEMS: ${meta.problems.join('; ')}`);
  L.push(`verdict: ${meta.verdict}`);
  return L.join('\n');
}

function markdown(sum, meta) {
  const L = [];
  L.push(`${meta.title}`);
  L.push('');
  L.push('| t (min) | phase | requests | 2xx | 4xx | 5xx | client-side | anomalies | dp-a RSS KiB | dp-a fds | dp-b RSS KiB | dp-b fds | cp RSS KiB | cp fds | mock RSS KiB | mock fds | failovers | breaker openings | ledger rows |');
  L.push('| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |');
  for (const s of samples) {
    const st = s.req.status;
    const p = (n, k) => f0(s.procs[n]?.[k]);
    L.push(`| ${s.t_min.toFixed(1)} | ${s.phase} | ${s.req.done} | ${statusGroup(st, is2xx)} | ${statusGroup(st, is4xx)} | ${statusGroup(st, is5xx)} | ${statusGroup(st, isClient)} | ${s.req.anomalies} | ${p('dp-a', 'rss')} | ${p('dp-a', 'fds')} | ${p('dp-b', 'rss')} | ${p('dp-b', 'fds')} | ${p('cp', 'rss')} | ${p('cp', 'fds')} | ${p('mock', 'rss')} | ${p('mock', 'fds')} | ${f0(s.gw.failovers)} | ${f0(s.gw.breaker_opens)} | ${f0(s.gw.ledger_rows)} |`);
  }
  if (sum) {
    L.push('');
    L.push('| process | RSS first → last (KiB) | slope after warm-up (KiB/min) | fitted growth (KiB) | fds: before → first → last → drained → idle | threads | verdict |');
    L.push('| --- | ---: | ---: | ---: | ---: | ---: | --- |');
    for (const r of sum.rows) {
      L.push(`| ${r.n} | ${f0(r.first?.rss)} → ${f0(r.last?.rss)} | ${f1(r.slope)} | ${f0(r.growth)} | ${f0(r.fdBase)} → ${f0(r.first?.fds)} → ${f0(r.last?.fds)} → ${f0(r.fdDrained)} → ${f0(r.fdIdle)} | ${f0(r.thrFirst)} → ${f0(r.thrLast)} | ${r.verdict} |`);
    }
    L.push('');
    L.push('```');
    L.push(summaryText(sum, meta));
    L.push('```');
  }
  return `${L.join('\n')}\n`;
}

function csv() {
  const names = watched.map((w) => w.name);
  const head = ['t_min', 'phase', 'done', 'inflight', 'skipped', 'status_2xx', 'status_4xx', 'status_5xx', 'client_side',
    ...names.flatMap((n) => [`${n}_rss_kib`, `${n}_fds`, `${n}_threads`, `${n}_cpu_s`]),
    'anomalies', 'failovers', 'retries', 'breaker_opens', 'attempts_broke', 'ledger_pending', 'ledger_rows'];
  const lines = [head.join(',')];
  for (const s of samples) {
    const st = s.req.status;
    lines.push([s.t_min.toFixed(3), s.phase, s.req.done, s.req.inflight, s.req.skipped, statusGroup(st, is2xx), statusGroup(st, is4xx),
      statusGroup(st, is5xx), statusGroup(st, isClient),
      ...names.flatMap((n) => [s.procs[n]?.rss, s.procs[n]?.fds, s.procs[n]?.threads, s.procs[n]?.cpu?.toFixed(2)]),
      s.req.anomalies, s.gw.failovers, s.gw.retries, s.gw.breaker_opens, s.gw.attempts_broke, s.gw.ledger_pending, s.gw.ledger_rows]
      .map((x) => (x === undefined || (typeof x === 'number' && !Number.isFinite(x)) ? '' : x)).join(','));
  }
  return `${lines.join('\n')}\n`;
}

function writeOutputs(sum, meta) {
  try {
    if (OUT) fs.writeFileSync(OUT, markdown(sum, meta));
    if (CSV) fs.writeFileSync(CSV, csv());
  } catch (e) {
    console.error(`[soak] cannot write the outputs: ${e.message}`);
  }
}

// ---------------------------------------------------------------------------
// Set-up

async function setUp() {
  log(`temp dir ${TMP}; binaries copied from ${BUILD}: ${BIN_INFO.join(', ')}`);
  const key = masterKey();
  pg = await h.startPostgres();
  log(`postgres (pid ${pg.pid}) on 127.0.0.1:${pg.port}`);

  const mock = new Proc('mock', BINS.mockprovider, ['--listen', '127.0.0.1:0', '--threads', '2'], process.env);
  const mockPort = (await mock.waitListening()).port;
  const mockUrl = `http://127.0.0.1:${mockPort}`;
  log(`mock provider (pid ${mock.pid}) on ${mockUrl}`);

  const token = `llmgw-admin-${randomBytes(12).toString('hex')}`;
  const cpEnv = { ...process.env };
  for (const k of Object.keys(cpEnv)) if (k.startsWith('LLMGW_')) delete cpEnv[k];
  Object.assign(cpEnv, {
    LLMGW_DATABASE_URL: pg.conninfo, LLMGW_ADMIN_TOKEN: token, LLMGW_GRPC_INSECURE: '1', LLMGW_MASTER_KEY: key.hex,
  });
  const cpProc = new Proc('cp', BINS.controlplane, ['serve', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0'], cpEnv);
  const cpl = await cpProc.waitListening();
  const cp = {
    port: cpl.port,
    admin: (method, p, body) => h.request(cpl.port, { method, path: p, body, headers: { authorization: `Bearer ${token}` } }),
  };
  log(`control plane (pid ${cpProc.pid}) admin 127.0.0.1:${cpl.port}, gRPC 127.0.0.1:${cpl.grpc_port}`);

  // Configuration, through the admin API.
  const cfg = new Config(cp, pg, key);
  // The keys first: a snapshot with providers and no key is logged as a warning.
  API_KEY = await cfg.apiKey('key_soak');
  TIGHT_KEY = await cfg.apiKey('key_tight');
  await cfg.secret('mock-key', 'sk-mock-soak');
  const dead = await h.deadPort();
  const prov = (name, driver, base, extra = {}) => cfg.provider({ name, driver, base_url: base, credential_ref: 'mock-key', ...extra });
  await prov('alpha', 'openai', `${mockUrl}/v1`);
  await prov('beta', 'openai', `${mockUrl}/v1`, { options: { passthrough: false } });
  await prov('claude', 'anthropic', mockUrl);
  await prov('flaky', 'openai', `${mockUrl}/v1`, { first_byte_timeout_ms: 1000, idle_timeout_ms: 2000 });
  await prov('dead', 'openai', `http://127.0.0.1:${dead}/v1`, { first_byte_timeout_ms: 1000 });
  const targets = [['alpha', 'mock-gpt'], ['beta', 'mock-gpt'], ['claude', 'mock-claude'], ['dead', 'mock-gpt'],
    ['alpha', 'mock-embed'], ['beta', 'mock-embed']];
  await cfg.route('chat', [{ provider: 'alpha', model: 'mock-gpt' }, { provider: 'beta', model: 'mock-gpt' }], { aliases: ['default'] });
  await cfg.route('claude', [{ provider: 'claude', model: 'mock-claude' }, { provider: 'alpha', model: 'mock-gpt' }]);
  for (const [route, f] of Object.entries(FAULTS)) {
    const model = `mock-gpt#${f.spec},only_id=${f.prefix}`;
    targets.push(['flaky', model]);
    await cfg.route(route, [{ provider: 'flaky', model }, { provider: 'beta', model: 'mock-gpt' }]);
  }
  await cfg.route('f-dead', [{ provider: 'dead', model: 'mock-gpt' }, { provider: 'alpha', model: 'mock-gpt' }]);
  const slowModel = 'mock-gpt#ttfb_ms=300,chunk_delay_ms=200';
  targets.push(['alpha', slowModel]);
  await cfg.route('slow', [{ provider: 'alpha', model: slowModel }]);
  await cfg.api('POST', '/v1/admin/routes', {
    name: 'embed', capability: 'embeddings', entries: [{ provider: 'alpha', model: 'mock-embed' }, { provider: 'beta', model: 'mock-embed' }],
  }, 201);
  for (const [provider, model] of targets) {
    await cfg.api('POST', '/v1/admin/prices', { provider, model, input_price: '6e-7', output_price: '2.4e-6' }, 201);
  }
  await cfg.api('POST', '/v1/admin/limits', {
    id: 'soak-cost', scope_kind: 'key', scope: 'key_soak', metric: 'cost', period: 'day', amount: 1_000_000 * 1_000_000_000_000,
  }, 201);
  await cfg.api('POST', '/v1/admin/limits', {
    id: 'soak-tight', scope_kind: 'key', scope: 'key_tight', metric: 'requests', period: 'minute', amount: 30,
  }, 201);
  const version = cfg.version();

  const dps = [];
  for (const id of ['a', 'b']) {
    const spool = path.join(TMP, `spool-${id}`);
    const env = { ...process.env };
    for (const k of Object.keys(env)) if (k.startsWith('LLMGW_')) delete env[k];
    const args = ['--control-plane', `127.0.0.1:${cpl.grpc_port}`, '--replica-id', `soak-${id}`, '--listen', '127.0.0.1:0',
      '--threads', String(DP_THREADS), '--ledger-spool', spool, '--drain-timeout-ms', '5000',
      '--breaker-open-ms', String(BREAKER_OPEN_MS),
      '--access-log', ACCESS_LOG ? path.join(TMP, `dp-${id}.access.jsonl`) : '/dev/null'];
    const p = new Proc(`dp-${id}`, BINS.dataplane, args, env);
    const l = await p.waitListening();
    dps.push({ name: `dp-${id}`, proc: p, port: l.port });
    log(`data plane dp-${id} (pid ${p.pid}) on 127.0.0.1:${l.port}`);
  }
  for (const d of dps) {
    await h.waitFor(async () => {
      if (!d.proc.running) throw new Error(`${d.name} exited: ${d.proc.tail()}`);
      const r = await h.request(d.port, { method: 'GET', path: '/readyz' }).catch(() => null);
      return r?.status === 200 && r.json?.snapshot_version >= version;
    }, { timeoutMs: 30_000, intervalMs: 100, what: `${d.name} serving configuration version ${version}` });
  }
  // A smoke test per data plane: the healthy route answers, and a faulty
  // one fails over (fault id) to the healthy second target.
  for (const [i, d] of dps.entries()) {
    const ok = await h.request(d.port, { headers: { authorization: `Bearer ${API_KEY}` }, body: { model: 'chat', messages: [{ role: 'user', content: 'hi' }] } });
    if (ok.status !== 200) throw new Error(`${d.name}: smoke request ${ok.status} ${ok.text}`);
    const fo = await h.request(d.port, {
      headers: { authorization: `Bearer ${API_KEY}`, 'x-request-id': `x5xx-smoke-${i}` },
      body: { model: 'f-5xx', messages: [{ role: 'user', content: 'hi' }] },
    });
    if (fo.status !== 200 || Number(fo.headers['x-llmgw-attempts']) < 2 || fo.headers['x-llmgw-provider'] !== 'beta') {
      throw new Error(`${d.name}: the fault smoke request did not fail over: ${fo.status} attempts ${fo.headers['x-llmgw-attempts']} provider ${fo.headers['x-llmgw-provider']} ${fo.text.slice(0, 300)}`);
    }
  }
  log(`configuration version ${version} served by both data planes; smoke requests answered, the fault one after failover`);
  return { mock, cpProc, cp, dps };
}

// ---------------------------------------------------------------------------
// Main

let interrupted = null; // the signal, once one arrived
let wakeMain = () => {};
function onSignal(sig) {
  if (interrupted) {
    console.error(`[soak] second ${sig}: killing everything now; temp dirs left: ${TMP}${pg ? ` ${pg.dir}` : ''}`);
    killAllNow();
    process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
  }
  interrupted = sig;
  console.error(`[soak] ${sig}: stopping the traffic, then summarizing and stopping everything (again to kill at once)`);
  wakeMain();
}
process.on('SIGINT', () => onSignal('SIGINT'));
process.on('SIGTERM', () => onSignal('SIGTERM'));

function checkAlive() {
  for (const w of watched) {
    if (!w.proc.running && !w.proc.stopping && !dead.includes(w.name)) {
      dead.push(w.name);
      w.proc.diedEarly = true;
      console.error(`[soak] PROBLEM: ${w.name} (pid ${w.proc.pid}) died: ${JSON.stringify(w.proc.exitInfo)}; its stderr:\n${w.proc.tail()}`);
    }
  }
  if (pg && !pgAlive(pg.pid) && !dead.includes('postgres')) {
    dead.push('postgres');
    console.error(`[soak] PROBLEM: postgres (pid ${pg.pid}) died`);
  }
  return dead.length === 0;
}
function pgAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

async function main() {
  const env = await setUp();
  watched = [
    { name: 'dp-a', proc: env.dps[0].proc, port: env.dps[0].port, metrics: true },
    { name: 'dp-b', proc: env.dps[1].proc, port: env.dps[1].port, metrics: true },
    { name: 'cp', proc: env.cpProc, port: env.cp.port, metrics: true },
    { name: 'mock', proc: env.mock, port: 0, metrics: false },
  ];
  let rev = '?';
  try {
    rev = execFileSync('git', ['-C', ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch { /* not a checkout */ }
  const title = `Soak ${new Date(t0wall).toISOString().slice(0, 16)}Z, rig rev ${rev}: ${MINUTES} min at ${RPS} req/s over two data planes (--threads ${DP_THREADS}), sample every ${SAMPLE_S} s, seed ${SEED}; binaries copied from ${BUILD} (${BIN_INFO.join(', ')}); machine nproc ${os.cpus().length}, kernel ${os.release()}`;
  const meta = { title, gw: {}, problems: [], verdict: 'running' };
  agents = env.dps.map(() => new http.Agent({ keepAlive: true, maxSockets: 64 }));

  const tStart = Date.now();
  log(`baseline sample, then ${TOTAL} requests over ${MINUTES} min at ${RPS}/s`);
  console.log(`[soak] ${sampleLine(await takeSample('baseline', tStart))}`);
  writeOutputs(null, meta);

  // Open loop: request i is due at tStart + i / RPS; samples every SAMPLE_S.
  let nextSample = tStart + SAMPLE_S * 1000;
  const tEnd = tStart + (TOTAL / RPS) * 1000;
  let i = 0;
  let sampling = false;
  const doSample = async (phase) => {
    sampling = true;
    try {
      const s = await takeSample(phase, tStart);
      console.log(`[soak] ${sampleLine(s)}`);
      meta.gw = s.gw;
      writeOutputs(null, meta);
    } finally {
      sampling = false;
    }
  };
  while (i < TOTAL && !interrupted) {
    const now = Date.now();
    if (now >= nextSample && !sampling) {
      nextSample += SAMPLE_S * 1000;
      if (!checkAlive()) break;
      doSample('traffic').catch((e) => console.error(`[soak] sample: ${e.message}`));
    }
    while (i < TOTAL && tStart + (i * 1000) / RPS <= now) {
      if (inflight >= MAX_INFLIGHT) skipped++;
      else fire(env.dps, i);
      i++;
    }
    if (i >= TOTAL) break;
    const wait = Math.min(tStart + (i * 1000) / RPS, nextSample) - Date.now();
    if (wait > 0) await new Promise((r) => { wakeMain = r; setTimeout(r, Math.min(wait, 1000)); });
  }
  if (!interrupted && dead.length === 0) {
    // The last interval's sample, at the end of the schedule.
    const left = tEnd - Date.now();
    if (left > 0) await sleep(left);
  }
  log(`traffic ${interrupted ? 'interrupted' : 'sent'}: ${started} requests started, ${skipped} skipped; waiting for ${inflight} in flight`);
  // Every request has a client timeout; an interrupted run waits less.
  const drainDeadline = Date.now() + (interrupted ? 10_000 : CLIENT_TIMEOUT_MS + 5000);
  while (inflight > 0 && Date.now() < drainDeadline) await sleep(100);
  while (sampling) await sleep(50);
  checkAlive();
  await doSample('traffic');
  for (const a of agents) a.destroy();
  if (dead.length === 0 && !interrupted) {
    await sleep(5000);
    checkAlive();
    await doSample('drained');
    if (IDLE_S > 5) {
      log(`idle for ${IDLE_S - 5} s more (idle upstream connections close after 55 s), then the last descriptor sample`);
      const until = Date.now() + (IDLE_S - 5) * 1000;
      while (Date.now() < until && !interrupted) {
        await new Promise((r) => { wakeMain = r; setTimeout(r, Math.min(1000, until - Date.now())); });
      }
    }
    checkAlive();
    await doSample('idle');
  }
  checkAlive();

  // Stop in order: the data planes (they flush their ledger rows to the
  // control plane), the control plane, the mock, then PostgreSQL.
  const stops = [];
  for (const w of [watched[0], watched[1], watched[2], watched[3]]) {
    const r = await w.proc.stop();
    stops.push([w.name, r]);
  }
  const pgProblems = [];
  try {
    await h.stopAll();
  } catch (e) {
    pgProblems.push(e.message);
  }
  const problems = [];
  if (dead.length) problems.push(`died during the run: ${dead.join(', ')}`);
  for (const [n, r] of stops) {
    if (dead.includes(n)) continue;
    if (!r.clean) problems.push(`${n} did not stop cleanly on SIGTERM: ${JSON.stringify(r.exitInfo)}${r.killed ? ' (SIGKILLed after 10 s)' : ''}`);
  }
  problems.push(...pgProblems);
  meta.problems = problems;

  const sum = summarize();
  if (problems.length) meta.verdict = `not valid: ${problems.length} problem(s) (${sum.flat ? 'memory and descriptors flat' : 'growing'} as far as sampled)`;
  else if (interrupted) meta.verdict = `interrupted by ${interrupted}; ${sum.decided ? (sum.flat ? 'flat' : 'growing') : 'undecided'} as far as sampled`;
  else if (!sum.decided) meta.verdict = 'undecided (too few samples: at least 3 during the traffic are needed)';
  else meta.verdict = sum.flat ? 'flat' : 'growing';
  console.log('');
  console.log(summaryText(sum, meta));
  writeOutputs(sum, meta);
  if (OUT) log(`markdown written to ${OUT}`);
  if (CSV) log(`CSV written to ${CSV}`);
  if (problems.length) return 2;
  if (interrupted) return interrupted === 'SIGINT' ? 130 : 143;
  if (!sum.decided) return 1;
  return sum.flat ? 0 : 3;
}

let code = 1;
try {
  code = await main();
} catch (e) {
  console.error(`[soak] ${e.stack ?? e}`);
  for (const p of procs) {
    if (p.running) await p.stop();
  }
  try {
    await h.stopAll();
  } catch (e2) {
    console.error(`[soak] ${e2.message}`);
  }
  code = dead.length ? 2 : 1;
}
if (code === 0 && !KEEP_TMP) {
  fs.rmSync(TMP, { recursive: true, force: true });
} else {
  console.error(`[soak] logs kept in ${TMP}`);
}
process.exit(code);
