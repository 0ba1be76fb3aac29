// Test harness for the llmgw integration tests.
//
// Starts the real binaries (the mock provider and the data plane) on loopback
// with port 0, learns their ports from the `{"msg":"listening",...}` JSON line
// they print on stdout, writes a temporary snapshot pointing the gateway at the
// mock, collects every process's stdout/stderr, and stops every process by pid
// (SIGTERM, then SIGKILL after a bound). Nothing is left running: `stopAll()`
// is meant for an `after` hook, and an exit handler SIGKILLs any straggler.
//
// Binaries: $LLMGW_BUILD_DIR/tests/mockprovider/llmgw-mockprovider,
// $LLMGW_BUILD_DIR/dataplane/llmgw-dataplane and
// $LLMGW_BUILD_DIR/controlplane/llmgw-controlplane, LLMGW_BUILD_DIR defaulting
// to <repo>/build. LLMGW_MOCKPROVIDER_BIN / LLMGW_DATAPLANE_BIN /
// LLMGW_CONTROLPLANE_BIN override each.
//
// PostgreSQL (for the control plane) is started by the test itself with
// startPostgres(): initdb + pg_ctl in a temp dir on a free loopback port, as
// the postgres user when the tests run as root; stopAll() stops it. etcd
// likewise with startEtcd(): one member on free loopback ports, a temp data
// dir, stopped by pid.

import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const REPO_ROOT = path.resolve(HERE, '..', '..');
export const BUILD_DIR = process.env.LLMGW_BUILD_DIR
  ? path.resolve(REPO_ROOT, process.env.LLMGW_BUILD_DIR) // a relative value is taken from the repo root
  : path.join(REPO_ROOT, 'build');
export const MOCK_BIN = process.env.LLMGW_MOCKPROVIDER_BIN
  || path.join(BUILD_DIR, 'tests', 'mockprovider', 'llmgw-mockprovider');
export const DATAPLANE_BIN = process.env.LLMGW_DATAPLANE_BIN
  || path.join(BUILD_DIR, 'dataplane', 'llmgw-dataplane');
export const CONTROLPLANE_BIN = process.env.LLMGW_CONTROLPLANE_BIN
  || path.join(BUILD_DIR, 'controlplane', 'llmgw-controlplane');
export const SNAPSHOT_SERVER_BIN = process.env.LLMGW_SNAPSHOT_SERVER_BIN
  || path.join(BUILD_DIR, 'tests', 'cpfake', 'llmgw-snapshot-server');
export const WATCH_CLIENT_BIN = process.env.LLMGW_WATCH_CLIENT_BIN
  || path.join(BUILD_DIR, 'tests', 'cpfake', 'llmgw-watch-client');
export const REPORT_CLIENT_BIN = process.env.LLMGW_REPORT_CLIENT_BIN
  || path.join(BUILD_DIR, 'tests', 'cpfake', 'llmgw-report-client');

// Bounds. They are sanity bounds ("finished within N"), sized for an
// AddressSanitizer build (~3x slower), never performance assertions.
export const START_TIMEOUT_MS = 20_000;
export const STOP_GRACE_MS = 10_000;
export const REQUEST_TIMEOUT_MS = 30_000;

// The demo API key (plaintext) whose sha256 hex goes into the snapshot's keys.
export const DEMO_API_KEY = `llmgw-demo-${randomBytes(12).toString('hex')}`;
export const DEMO_KEY_HASH = sha256hex(DEMO_API_KEY);
export const AUTH = Object.freeze({ authorization: `Bearer ${DEMO_API_KEY}` });
// AWS-style credentials for the bedrock driver (credential_ref env:MOCK_AWS_CRED).
export const MOCK_AWS_CRED = 'AKIDMOCKEXAMPLE:mock/secret/key';

/** Providers of every driver, all pointing at the mock (name → provider). */
export function driverProviders(m) {
  const p = (name, driver, base_url, extra = {}) => ({
    name, driver, base_url, credential_ref: 'env:MOCK_API_KEY', headers: {},
    enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000, ...extra,
  });
  return [
    p('claude', 'anthropic', m.url),
    p('resp', 'openai-responses', m.v1),
    p('gem', 'gemini', `${m.url}/v1beta`),
    p('olla', 'ollama', m.url),
    p('bed', 'bedrock', m.url, { credential_ref: 'env:MOCK_AWS_CRED', options: { region: 'us-east-1' } }),
    p('textonly', 'openai', m.v1, { options: { capabilities: ['chat', 'tools'] } }),
  ];
}

// The upstream credential the gateway reads via credential_ref env:MOCK_API_KEY.
export const MOCK_UPSTREAM_KEY = `mock-upstream-${randomBytes(6).toString('hex')}`;

export function sha256hex(s) {
  return createHash('sha256').update(s, 'utf8').digest('hex');
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

export function randomId(prefix = 'it') {
  return `${prefix}-${randomBytes(8).toString('hex')}`;
}

/** Polls fn() until it returns a truthy value; returns that value or throws after timeoutMs. */
export async function waitFor(fn, { timeoutMs = 10_000, intervalMs = 50, what = 'condition' } = {}) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(intervalMs);
  }
}

/** Rejects after ms with a message, so a hung await fails a test with context. */
export function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export function requireBinaries(bins = [MOCK_BIN, DATAPLANE_BIN]) {
  const missing = bins.filter((p) => {
    try {
      fs.accessSync(p, fs.constants.X_OK);
      return false;
    } catch {
      return true;
    }
  });
  if (missing.length) {
    throw new Error(
      `integration binaries not found (build first, or set LLMGW_BUILD_DIR): ${missing.join(', ')}`,
    );
  }
}

// ---------------------------------------------------------------------------
// Processes

const live = new Set(); // ManagedProcess still running
const everyProcess = []; // every ManagedProcess started, for the crash report in stopAll()
const tmpDirs = new Set();

function killAllNow() {
  for (const p of live) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
}
process.on('exit', () => {
  killAllNow();
  stopPostgresNow(); // eslint-disable-line no-use-before-define
});
for (const sig of ['SIGINT', 'SIGTERM']) {
  process.once(sig, () => {
    killAllNow();
    process.exit(128 + (sig === 'SIGINT' ? 2 : 15));
  });
}

export function makeTmpDir() {
  const d = fs.mkdtempSync(path.join(os.tmpdir(), 'llmgw-it-'));
  tmpDirs.add(d);
  return d;
}

export class ManagedProcess {
  constructor(name, bin, args, { env } = {}) {
    this.name = name;
    this.bin = bin;
    this.args = args;
    this.stdoutText = '';
    this.stderrText = '';
    this.stdoutLines = [];
    this.stderrLines = [];
    this.exitInfo = null; // {code, signal} once exited
    this._outTail = '';
    this._errTail = '';
    this._lineWaiters = [];

    this.child = spawn(bin, args, { env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] });
    this.pid = this.child.pid;
    this.exitExpected = false; // set once the test signals it / stops it
    live.add(this);
    everyProcess.push(this);
    this.child.stdout.setEncoding('utf8');
    this.child.stderr.setEncoding('utf8');
    this.child.stdout.on('data', (d) => {
      this.stdoutText += d;
      this._outTail = this._split(this._outTail + d, this.stdoutLines);
      this._checkWaiters();
    });
    this.child.stderr.on('data', (d) => {
      this.stderrText += d;
      this._errTail = this._split(this._errTail + d, this.stderrLines);
    });
    this.exited = new Promise((resolve) => {
      this.child.on('error', (err) => {
        // spawn failure (e.g. ENOENT): there will be no process to wait for
        this.spawnError = err;
        this.stderrText += `spawn error: ${err.message}\n`;
        if (this.pid === undefined && !this.exitInfo) {
          this.exitInfo = { code: null, signal: null, error: err.message };
          live.delete(this);
          this._checkWaiters();
          resolve(this.exitInfo);
        }
      });
      this.child.on('close', (code, signal) => {
        if (this._outTail) this.stdoutLines.push(this._outTail);
        if (this._errTail) this.stderrLines.push(this._errTail);
        this._outTail = this._errTail = '';
        this.exitInfo = { code, signal };
        live.delete(this);
        this._checkWaiters();
        resolve(this.exitInfo);
      });
    });
  }

  _split(text, into) {
    const parts = text.split('\n');
    const tail = parts.pop();
    for (const l of parts) into.push(l.replace(/\r$/, ''));
    return tail;
  }

  _checkWaiters() {
    this._lineWaiters = this._lineWaiters.filter((w) => {
      const hit = this.stdoutLines.find(w.pred);
      if (hit !== undefined) {
        w.resolve(hit);
        return false;
      }
      if (this.exitInfo) {
        w.reject(new Error(`${this.name} exited (${JSON.stringify(this.exitInfo)}) before the expected stdout line\n${this.describe()}`));
        return false;
      }
      return true;
    });
  }

  /** Resolves with the first stdout line for which pred(line) is true. */
  waitForStdoutLine(pred, timeoutMs = START_TIMEOUT_MS, what = 'stdout line') {
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => {
        this._lineWaiters = this._lineWaiters.filter((x) => x !== w);
        reject(new Error(`${this.name}: timed out after ${timeoutMs} ms waiting for ${what}\n${this.describe()}`));
      }, timeoutMs);
      const w = {
        pred,
        resolve: (v) => { clearTimeout(t); resolve(v); },
        reject: (e) => { clearTimeout(t); reject(e); },
      };
      this._lineWaiters.push(w);
      this._checkWaiters();
    });
  }

  /** Waits for the `{"msg":"listening",...,"port":N}` line and returns it parsed. */
  async waitListening(timeoutMs = START_TIMEOUT_MS) {
    const line = await this.waitForStdoutLine((l) => {
      const j = tryParseJson(l);
      return j && j.msg === 'listening' && Number.isInteger(j.port) && j.port > 0;
    }, timeoutMs, 'the {"msg":"listening"} line');
    return JSON.parse(line);
  }

  /** stdout lines that parse as JSON objects. */
  stdoutJson() {
    return this.stdoutLines.map(tryParseJson).filter((j) => j && typeof j === 'object');
  }

  get running() {
    return this.exitInfo === null;
  }

  signal(sig) {
    if (sig === 'SIGTERM' || sig === 'SIGINT' || sig === 'SIGKILL') this.exitExpected = true;
    process.kill(this.pid, sig);
  }

  async waitExit(timeoutMs) {
    return withTimeout(this.exited, timeoutMs, `${this.name} (pid ${this.pid}) to exit`);
  }

  /** SIGTERM, then SIGKILL after graceMs; resolves with {code, signal}. */
  async stop(graceMs = STOP_GRACE_MS) {
    if (!this.running) return this.exitInfo;
    this.exitExpected = true;
    try {
      process.kill(this.pid, 'SIGTERM');
    } catch {
      /* gone */
    }
    let timer;
    const killed = new Promise((resolve) => {
      timer = setTimeout(() => {
        if (this.running) {
          this.killedAfterGrace = true;
          try {
            process.kill(this.pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        resolve();
      }, graceMs);
    });
    await Promise.race([this.exited, killed]);
    clearTimeout(timer);
    return this.exited;
  }

  describe() {
    const cut = (s) => (s.length > 4000 ? `...${s.slice(-4000)}` : s);
    return `--- ${this.name} ${this.bin} ${this.args.join(' ')}\n--- stdout:\n${cut(this.stdoutText)}\n--- stderr:\n${cut(this.stderrText)}`;
  }
}

export function tryParseJson(s) {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

/**
 * For an afterEach hook: if the gateway died during the test just run, starts a
 * new one (so that one crash does not fail every later test) and returns it with
 * an error for the hook to throw, which fails that test with the exit status and
 * the tail of the dead gateway's stderr. Returns {gateway, error}.
 */
export async function replaceIfDead(gateway, restart) {
  await sleep(30); // a crash right after the last response
  if (!gateway || gateway.proc.running) return { gateway, error: null };
  const dead = gateway.proc;
  dead.reported = true;
  const next = await restart();
  const tail = dead.stderrText.length > 6000 ? `...${dead.stderrText.slice(-6000)}` : dead.stderrText;
  return {
    gateway: next,
    error: new Error(`the gateway (pid ${dead.pid}) died during this test: ${JSON.stringify(dead.exitInfo)}; `
      + `a new one serves the tests after it. Its stderr:\n${tail}`),
  };
}

/** For a failed request: waits up to 1 s for the process to exit and describes how it ended. */
export async function exitNote(proc) {
  await Promise.race([proc.exited, sleep(1000)]);
  return proc.exitInfo ? `${proc.name} exited: ${JSON.stringify(proc.exitInfo)}` : `${proc.name} still running`;
}

/** Starts a process and waits for its listening line; returns {proc, port}. */
async function startListening(name, bin, args, opts) {
  const proc = new ManagedProcess(name, bin, args, opts);
  try {
    const l = await proc.waitListening();
    return { proc, port: l.port, listening: l };
  } catch (e) {
    await proc.stop(2000);
    throw e;
  }
}

// ---------------------------------------------------------------------------
// The mock provider

export class Mock {
  constructor(proc, port, usageLogPath) {
    this.proc = proc;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.v1 = `${this.url}/v1`;
    this.usageLogPath = usageLogPath;
  }

  /** Complete lines of the usage log, parsed (a partially written last line is skipped). */
  readUsage() {
    let text;
    try {
      text = fs.readFileSync(this.usageLogPath, 'utf8');
    } catch (e) {
      if (e.code === 'ENOENT') return [];
      throw e;
    }
    const lines = text.split('\n');
    lines.pop(); // '' after the last newline, or an incomplete line
    return lines.filter((l) => l.trim() !== '').map((l) => {
      const j = tryParseJson(l);
      if (j === undefined) throw new Error(`usage log line is not JSON: ${l}`);
      return j;
    });
  }

  /** The one recorded request whose body holds nonce (startMock({record})):
   * its body, parsed. */
  async recorded(nonce) {
    return JSON.parse((await recorded(this.recordPath, nonce)).body);
  }

  /** Polls the usage log until a line matches pred; returns it. */
  async waitForUsage(pred, { timeoutMs = 10_000, what = 'a usage log line' } = {}) {
    try {
      return await waitFor(() => this.readUsage().find(pred), { timeoutMs, intervalMs: 25, what });
    } catch (e) {
      e.message += `\nusage log so far:\n${this.readUsage().map((j) => JSON.stringify(j)).join('\n')}`;
      throw e;
    }
  }

  /** The line of the request's first attempt: the gateway sends each
   * attempt's id as x-request-id: the request id (made unique with
   * "~" and 8 hex digits when the client chose it), "." and the attempt
   * number (docs/ledger.md). */
  usageFor(requestId, opts = {}) {
    const re = new RegExp(`^${requestId.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}(~[0-9a-f]{8})?\\.1$`);
    return this.waitForUsage((l) => typeof l.x_request_id === 'string' && re.test(l.x_request_id), {
      what: `the usage log line of the first attempt of ${requestId}`,
      ...opts,
    });
  }
}

/** The official SDKs' clients on a gateway, the demo key, no retries. */
export function openaiClient(gw) {
  return new OpenAI({ baseURL: gw.v1, apiKey: DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
}
export function anthropicClient(gw) {
  return new Anthropic({ baseURL: gw.url, apiKey: DEMO_API_KEY, maxRetries: 0, timeout: 30_000 });
}

/** The one request the mock recorded (--record-bodies FILE) whose body
 * holds nonce, as {path, body} with the body's text as received; waits
 * for it, and fails when more than one carries the nonce. */
export async function recorded(recordPath, nonce) {
  return waitFor(() => {
    if (!fs.existsSync(recordPath)) return null;
    const hits = fs.readFileSync(recordPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
      .filter((r) => r.body.includes(nonce));
    assert.ok(hits.length <= 1, `${hits.length} upstream bodies carry ${nonce}`);
    return hits[0] ?? null;
  }, { what: `the upstream body carrying ${nonce}` });
}

/** record: the mock records every request body (--record-bodies) in
 * mock.recordPath, and mock.recorded(nonce) finds one. */
export async function startMock({ args = [], record = false } = {}) {
  const dir = makeTmpDir();
  const usageLog = path.join(dir, 'usage.jsonl');
  const recordPath = record ? path.join(dir, 'bodies.jsonl') : null;
  const { proc, port } = await startListening('mockprovider', MOCK_BIN, [
    '--listen', '127.0.0.1:0', '--usage-log', usageLog,
    ...(recordPath ? ['--record-bodies', recordPath] : []), ...args,
  ]);
  const m = new Mock(proc, port, usageLog);
  m.recordPath = recordPath;
  return m;
}

// ---------------------------------------------------------------------------
// The data plane

/** A loopback port on which nothing listens (bound, then closed). */
/** mulberry32: a small seeded generator (a uniform [0, 1) per call), so a
 * run of random choices can be replayed from its seed. */
export function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The NAME.pid files a local script left in dir: [{name, pid}]. */
export function pidFiles(dir) {
  return fs.readdirSync(dir).filter((f) => f.endsWith('.pid'))
    .map((f) => ({ name: f.slice(0, -4), pid: Number(fs.readFileSync(path.join(dir, f), 'utf8')) }));
}

/** Whether a process with this pid exists. */
export function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function deadPort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/**
 * The snapshot used by the tests. Providers:
 *  - mock:     the mock, generous timeouts (the route `fast` / alias `default` maps to mock-gpt)
 *  - mockfast: the same mock with first_byte_timeout_ms 1500 (for the upstream timeout test)
 *  - deadend:  a loopback port nothing listens on (upstream unreachable)
 */
export function makeSnapshot({ mockV1, deadV1, extraProviders = [], extraRoutes = [] }) {
  const providers = [
    {
      name: 'mock', driver: 'openai', base_url: mockV1,
      credential_ref: 'env:MOCK_API_KEY', headers: { 'x-extra': '1' },
      enabled: true, first_byte_timeout_ms: 60000, idle_timeout_ms: 60000,
    },
    {
      name: 'mockfast', driver: 'openai', base_url: mockV1,
      credential_ref: 'env:MOCK_API_KEY', headers: {},
      enabled: true, first_byte_timeout_ms: 1500, idle_timeout_ms: 1500,
    },
  ];
  if (deadV1) {
    providers.push({
      name: 'deadend', driver: 'openai', base_url: deadV1,
      credential_ref: 'env:MOCK_API_KEY', headers: {},
      enabled: true, first_byte_timeout_ms: 5000, idle_timeout_ms: 5000,
    });
  }
  return {
    version: 1,
    providers: [...providers, ...extraProviders],
    routes: [
      {
        name: 'fast', aliases: ['default'], capability: 'chat', strategy: 'ordered',
        entries: [{ provider: 'mock', model: 'mock-gpt' }],
      },
      ...extraRoutes,
    ],
    keys: [{ id: 'key_demo', hash: DEMO_KEY_HASH, status: 'active', team: 'demo' }],
  };
}

export class Gateway {
  constructor(proc, port, snapshotPath, snapshot) {
    this.proc = proc;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.v1 = `${this.url}/v1`;
    this.snapshotPath = snapshotPath;
    this.snapshot = snapshot;
  }

  /** Access-log lines, one per request (JSON objects on stdout with msg "access"). */
  accessLog() {
    return this.proc.stdoutJson().filter((j) => j && j.msg === 'access' && j.request_id !== undefined);
  }

  /** Attempt lines (msg "attempt"), one per upstream attempt, optionally of one request. */
  attemptLog(requestId) {
    return this.proc.stdoutJson().filter((j) => j && j.msg === 'attempt' &&
      (requestId === undefined || j.request_id === requestId));
  }

  async accessLogFor(requestId, timeoutMs = 10_000) {
    try {
      return await waitFor(() => this.accessLog().find((j) => j.request_id === requestId), {
        timeoutMs, intervalMs: 25, what: `the access log line with request_id ${requestId}`,
      });
    } catch (e) {
      e.message += `\n${this.proc.describe()}`;
      throw e;
    }
  }
}

const GATEWAY_ENV_VARS = [
  'LLMGW_SNAPSHOT', 'LLMGW_CONTROL_PLANE', 'LLMGW_SNAPSHOT_CACHE', 'LLMGW_SNAPSHOT_CACHE_MAX_AGE_MS',
  'LLMGW_REPLICA_ID',
  'LLMGW_CONTROL_PLANE_CA', 'LLMGW_CONTROL_PLANE_CERT', 'LLMGW_CONTROL_PLANE_KEY', 'LLMGW_CACHE_KEY',
  'LLMGW_LISTEN', 'LLMGW_THREADS', 'LLMGW_MAX_BODY_BYTES', 'LLMGW_HEAD_TIMEOUT_MS', 'LLMGW_CLIENT_IDLE_TIMEOUT_MS', 'LLMGW_MAX_CONNECTIONS',
  'LLMGW_DRAIN_TIMEOUT_MS', 'LLMGW_ACCESS_LOG', 'LLMGW_RETRY_BASE_MS', 'LLMGW_BREAKER_OPEN_MS',
];

/** env without the OpenTelemetry SDK's variables (OTEL_*): a daemon a test
 * starts traces only when the test says so. */
export function withoutOtel(env) {
  const out = { ...env };
  for (const k of Object.keys(out)) if (k.startsWith('OTEL_')) delete out[k];
  return out;
}

/** wrap: a command the data plane runs under, which must exec it (so the
 * process's pid is the data plane's), e.g. ['prlimit', '--nofile=64:64']. */
export async function startGateway({
  mock, args = [], snapshot, threads = 2, extraProviders = [], extraRoutes = [], wrap = [], env: extraEnv = {},
} = {}) {
  const dir = makeTmpDir();
  const snap = snapshot ?? makeSnapshot({
    mockV1: mock.v1,
    deadV1: `http://127.0.0.1:${await deadPort()}/v1`,
    extraProviders,
    extraRoutes,
  });
  const snapshotPath = path.join(dir, 'snapshot.json');
  fs.writeFileSync(snapshotPath, JSON.stringify(snap, null, 2));
  const env = withoutOtel({ ...process.env, MOCK_API_KEY: MOCK_UPSTREAM_KEY, MOCK_AWS_CRED: MOCK_AWS_CRED });
  for (const k of GATEWAY_ENV_VARS) delete env[k];
  Object.assign(env, extraEnv);
  const argv = [
    '--snapshot', snapshotPath, '--listen', '127.0.0.1:0', '--threads', String(threads), ...args,
  ];
  const { proc, port, listening } = wrap.length
    ? await startListening('dataplane', wrap[0], [...wrap.slice(1), DATAPLANE_BIN, ...argv], { env })
    : await startListening('dataplane', DATAPLANE_BIN, argv, { env });
  const gw = new Gateway(proc, port, snapshotPath, snap);
  gw.threads = listening.threads; // as the gateway reports it
  return gw;
}

// ---------------------------------------------------------------------------
// The test-only control plane (tests/cpfake/llmgw-snapshot-server)

export class SnapshotServer {
  constructor(proc, port, snapshotPath, deltaPath) {
    this.proc = proc;
    this.port = port;
    this.target = `127.0.0.1:${port}`;
    this.snapshotPath = snapshotPath;
    this.deltaPath = deltaPath;
  }

  /** Writes a new document (an object, or raw text) and publishes it (SIGHUP): a full build. */
  async push(doc) {
    fs.rmSync(this.deltaPath, { force: true });
    fs.writeFileSync(this.snapshotPath, typeof doc === 'string' ? doc : JSON.stringify(doc));
    const n = this.published().length;
    this.proc.signal('SIGHUP');
    await waitFor(() => this.published().length > n, { what: 'the snapshot server to publish' });
  }

  /**
   * Publishes a delta (an object with version and base_version, or raw text)
   * whose result is doc: watchers current at its base get the delta, the
   * others doc whole.
   */
  async pushDelta(doc, delta) {
    fs.writeFileSync(this.snapshotPath, typeof doc === 'string' ? doc : JSON.stringify(doc));
    fs.writeFileSync(this.deltaPath, typeof delta === 'string' ? delta : JSON.stringify(delta));
    const n = this.published().length;
    this.proc.signal('SIGHUP');
    await waitFor(() => this.published().length > n, { what: 'the snapshot server to publish' });
  }

  /** What its watches were sent: {deltas_sent, documents_sent, documents_packed} (SIGUSR1). */
  async stats() {
    const n = this.proc.stdoutJson().filter((j) => j.msg === 'stats').length;
    this.proc.signal('SIGUSR1');
    let st;
    await waitFor(() => (st = this.proc.stdoutJson().filter((j) => j.msg === 'stats')[n]), { what: 'the stats line' });
    return st;
  }

  published() {
    return this.proc.stdoutJson().filter((j) => j.msg === 'published');
  }

  /** {"msg":"ack","replica_id","version"} lines so far. */
  acks() {
    return this.proc.stdoutJson().filter((j) => j.msg === 'ack');
  }

  waitAck(pred, what = 'an ack') {
    return waitFor(() => this.acks().find(pred), { what: `${what}; acks so far: ${JSON.stringify(this.acks())}` });
  }
}

/**
 * Starts the snapshot server on 127.0.0.1:port (0: any) serving doc. args:
 * extra flags (--tls-cert, --tls-key, --tls-client-ca).
 */
export async function startSnapshotServer({ snapshot, port = 0, snapshotPath, args = [] } = {}) {
  const file = snapshotPath ?? path.join(makeTmpDir(), 'pushed.json');
  if (snapshot !== undefined) fs.writeFileSync(file, JSON.stringify(snapshot));
  const deltaFile = `${file}.delta`;
  fs.rmSync(deltaFile, { force: true });
  const { proc, port: p } = await startListening('snapshot-server', SNAPSHOT_SERVER_BIN, [
    '--snapshot', file, '--delta', deltaFile, '--listen', `127.0.0.1:${port}`, ...args,
  ]);
  return new SnapshotServer(proc, p, file, deltaFile);
}

/**
 * A bare Watch client (tests/cpfake/llmgw-watch-client) on target: an
 * older data plane unless acceptsDelta; with gate (a path), it reads
 * nothing until that file exists; with dump (a directory), it writes each
 * document it gets to <version>.json there, each delta to
 * <version>.delta.json. snapshots(): what it received.
 */
export async function startWatchClient({ target, replicaId = 'watch-client', acceptsDelta = false, gate, dump } = {}) {
  const a = ['--target', target, '--replica-id', replicaId];
  if (acceptsDelta) a.push('--accepts-delta');
  if (gate) a.push('--gate', gate);
  if (dump) a.push('--dump', dump);
  const { proc } = await startListening('watch-client', WATCH_CLIENT_BIN, a);
  return { proc, snapshots: () => proc.stdoutJson().filter((j) => j.msg === 'snapshot') };
}

/**
 * Sends messages (ReportMessages as JSON, in the proto's field names) on
 * one Report stream to target with tests/cpfake/llmgw-report-client, which
 * waits for acked_through to reach their highest seq. Resolves with
 * {code, acked, replies, proc} once it exited (code 0: every seq acked).
 */
export async function runReportClient({ target, messages, replicaId = 'report-client', waitMs = 10_000 }) {
  const file = path.join(makeTmpDir(), 'messages.json');
  fs.writeFileSync(file, JSON.stringify(messages));
  const proc = new ManagedProcess('report-client', REPORT_CLIENT_BIN, [
    '--target', target, '--messages', file, '--replica-id', replicaId, '--wait-ms', String(waitMs),
  ]);
  proc.exitExpected = true; // a one-shot command
  proc.nonZeroExitExpected = true; // the caller checks the status
  await proc.waitExit(waitMs + 10_000);
  const out = proc.stdoutJson();
  return {
    code: proc.exitInfo.code,
    acked: out.find((j) => j.msg === 'done')?.acked_through,
    replies: out.filter((j) => j.msg === 'reply'),
    proc,
  };
}

/**
 * A data plane fed by a control plane (--control-plane target) instead of a
 * file. cache: the --snapshot-cache path (or none); cacheKey: LLMGW_CACHE_KEY.
 */
export async function startGatewayCP({
  controlPlane, cache, cacheKey, replicaId, args = [], threads = 2, env: extraEnv = {},
} = {}) {
  const env = { ...withoutOtel(process.env), ...extraEnv };
  for (const k of GATEWAY_ENV_VARS) delete env[k];
  if (cacheKey) env.LLMGW_CACHE_KEY = cacheKey;
  const a = ['--control-plane', controlPlane, '--listen', '127.0.0.1:0', '--threads', String(threads)];
  if (cache) a.push('--snapshot-cache', cache);
  if (replicaId) a.push('--replica-id', replicaId);
  const { proc, port, listening } = await startListening('dataplane', DATAPLANE_BIN, [...a, ...args], { env });
  const gw = new Gateway(proc, port, null, null);
  gw.listening = listening;
  return gw;
}

// What a sanitizer build prints when it finds a bug (leaks are reported at exit).
const SANITIZER_REPORT = /ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|WARNING: ThreadSanitizer/;

/**
 * Stops every process still running (SIGTERM, SIGKILL after a bound) and
 * removes temp dirs. Throws, failing the calling `after` hook, when any
 * process crashed, ignored SIGTERM, exited non-zero, or printed a
 * sanitizer report: a test file passes only if every process it started
 * stayed clean to its end.
 */
export async function stopAll() {
  const problems = [];
  const report = (p, what) => {
    p.reported = true;
    const msg = `${p.name} (pid ${p.pid}) ${what}`;
    problems.push(msg);
    console.error(`# ${msg}\n${p.describe()}`);
  };
  // A process that died on its own (a crash) is reported with its output.
  for (const p of everyProcess) {
    const e = p.exitInfo;
    if (e && !p.reported && (!p.exitExpected || (e.signal && e.signal !== 'SIGTERM' && e.signal !== 'SIGKILL'))) {
      report(p, `exited unexpectedly: ${JSON.stringify(p.exitInfo)}`);
    }
  }
  await Promise.all([...live].map((p) => p.stop()));
  for (const pg of [...postgresInstances]) {
    try {
      await pg.stop();
    } catch (e) {
      problems.push(`postgres (pid ${pg.pid}): ${e.message}`);
    }
  }
  for (const p of everyProcess) {
    if (SANITIZER_REPORT.test(p.stderrText)) {
      problems.push(`${p.name} (pid ${p.pid}) printed a sanitizer report`);
      console.error(`# ${p.name} (pid ${p.pid}) printed a sanitizer report:\n${p.stderrText.slice(-8000)}`);
    }
    if (p.reported) continue;
    if (p.killedAfterGrace) {
      report(p, `ignored SIGTERM for ${STOP_GRACE_MS} ms and was SIGKILLed`);
    } else if (p.exitInfo && p.exitInfo.code !== 0 && p.exitInfo.signal !== 'SIGTERM' && !p.nonZeroExitExpected) {
      report(p, `exited with ${JSON.stringify(p.exitInfo)} when stopped`);
    }
  }
  if (!process.env.LLMGW_KEEP_TMP) {
    for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true });
    tmpDirs.clear();
  }
  if (problems.length) throw new Error(`processes did not stay clean:\n  ${problems.join('\n  ')}`);
}

// ---------------------------------------------------------------------------
// HTTP helpers (node:http; a fresh connection per request unless an agent is given)

function buildRequest(port, { method = 'POST', path: p = '/v1/chat/completions', headers = {}, body, agent }) {
  let payload;
  const h = { ...headers };
  if (body !== undefined) {
    if (typeof body === 'string' || Buffer.isBuffer(body)) {
      payload = Buffer.from(body);
    } else {
      payload = Buffer.from(JSON.stringify(body));
      if (!Object.keys(h).some((k) => k.toLowerCase() === 'content-type')) h['content-type'] = 'application/json';
    }
    h['content-length'] = String(payload.length);
  }
  const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: h, agent: agent ?? false });
  return { req, payload };
}

/**
 * One request; resolves with {status, headers, text, json} once the body ended.
 * `json` is the parsed body or undefined.
 */
export function request(port, opts = {}) {
  return new Promise((resolve, reject) => {
    const { req, payload } = buildRequest(port, opts);
    req.setTimeout(opts.timeoutMs ?? REQUEST_TIMEOUT_MS, () => req.destroy(new Error('request timed out')));
    req.on('error', reject);
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('error', reject);
      res.on('end', () => {
        resolve({ status: res.statusCode, headers: res.headers, text, json: tryParseJson(text) });
      });
    });
    req.end(payload);
  });
}

/** Incremental server-sent-events reader over an http.IncomingMessage. */
export class SSEStream {
  constructor(req, res) {
    this.req = req;
    this.res = res;
    this.status = res.statusCode;
    this.headers = res.headers;
    this.raw = '';
    this.events = []; // every event's data (string), in order
    this.done = false; // the response ended or the connection closed
    this.complete = false; // the response ended cleanly (chunked terminator / full length)
    this.error = null;
    this._buf = '';
    this._read = 0; // index of the next event nextEvent() returns
    this._waiters = [];
    res.setEncoding('utf8');
    res.on('data', (d) => {
      this.raw += d;
      this._buf += d;
      this._parse();
      this._wake();
    });
    res.on('end', () => {
      this.complete = res.complete;
      this._finish();
    });
    res.on('error', (e) => {
      this.error = e;
      this._finish();
    });
    res.on('close', () => {
      this.complete = this.complete || res.complete;
      this._finish();
    });
  }

  _parse() {
    for (;;) {
      let buf = this._buf.replace(/\r\n/g, '\n');
      if (buf.endsWith('\r')) buf = buf.slice(0, -1); // wait for the '\n' that may follow
      const i = buf.indexOf('\n\n');
      if (i < 0) return;
      const block = buf.slice(0, i);
      // consume from the original buffer: find the same point there
      this._buf = this._buf.replace(/\r\n/g, '\n').slice(i + 2);
      const data = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const c = line.indexOf(':');
        const field = c < 0 ? line : line.slice(0, c);
        let value = c < 0 ? '' : line.slice(c + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'data') data.push(value);
      }
      if (data.length) this.events.push(data.join('\n'));
    }
  }

  _finish() {
    if (this.done) return;
    this.done = true;
    this.trailing = this._buf; // bytes after the last complete event (should be '')
    this._wake();
  }

  _wake() {
    const ws = this._waiters;
    this._waiters = [];
    for (const w of ws) w();
  }

  _changed() {
    return new Promise((r) => this._waiters.push(r));
  }

  /** The next event's data, or null when the stream ended first. */
  async nextEvent(timeoutMs = REQUEST_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (this._read >= this.events.length) {
      if (this.done) return null;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for an SSE event; raw so far:\n${this.raw}`);
      await withTimeout(this._changed(), left, 'an SSE event').catch(() => {});
    }
    return this.events[this._read++];
  }

  /** Waits for the end of the stream; resolves with this. */
  async readAll(timeoutMs = REQUEST_TIMEOUT_MS) {
    const deadline = Date.now() + timeoutMs;
    while (!this.done) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for the stream to end; raw so far:\n${this.raw}`);
      await withTimeout(this._changed(), left, 'the end of the stream').catch(() => {});
    }
    return this;
  }

  /** Closes the connection (the client going away). */
  destroy() {
    this.res.destroy();
    this.req.destroy();
  }
}

/** Sends a request and resolves with an SSEStream once the response headers arrived. */
export function openStream(port, opts = {}) {
  return new Promise((resolve, reject) => {
    const { req, payload } = buildRequest(port, opts);
    req.setTimeout(opts.timeoutMs ?? REQUEST_TIMEOUT_MS, () => req.destroy(new Error('request timed out')));
    req.on('error', (e) => reject(e));
    req.on('response', (res) => resolve(new SSEStream(req, res)));
    req.end(payload);
  });
}

/** Opens a stream and reads it to the end. */
export async function collectStream(port, opts = {}) {
  const s = await openStream(port, opts);
  return s.readAll(opts.timeoutMs);
}

/** Tries a TCP connect: 'connected', 'refused', or another error code. */
export function tryConnect(port, timeoutMs = 2000) {
  return new Promise((resolve) => {
    const sock = net.connect({ host: '127.0.0.1', port });
    const t = setTimeout(() => { sock.destroy(); resolve('timeout'); }, timeoutMs);
    sock.once('connect', () => { clearTimeout(t); sock.destroy(); resolve('connected'); });
    sock.once('error', (e) => { clearTimeout(t); resolve(e.code === 'ECONNREFUSED' ? 'refused' : e.code || String(e)); });
  });
}

// ---------------------------------------------------------------------------
// OpenAI payload helpers

/** Parses SSE data payloads: JSON objects, or the string '[DONE]'. Non-JSON payloads stay strings. */
export function parseEvents(events) {
  return events.map((d) => (d === '[DONE]' ? d : (tryParseJson(d) ?? d)));
}

/** A copy without the top-level fields that legitimately differ per request (id, created). */
export function stripVolatile(obj) {
  if (!obj || typeof obj !== 'object') return obj;
  const { id, created, ...rest } = obj; // eslint-disable-line no-unused-vars
  return rest;
}

/** What a chat.completion says, without the fields a gateway may
 * normalize (ids, timestamps, provider-specific extras). */
export function answerEssence(j) {
  if (!j || typeof j !== 'object') return j;
  const c = j.choices?.[0];
  const u = j.usage;
  return {
    object: j.object,
    model: j.model,
    role: c?.message?.role,
    content: c?.message?.content ?? null,
    tool_calls: (c?.message?.tool_calls ?? []).map((t) => ({ name: t.function?.name, arguments: t.function?.arguments })),
    finish_reason: c?.finish_reason,
    usage: u ? { prompt: u.prompt_tokens, completion: u.completion_tokens, total: u.total_tokens } : null,
  };
}

/** The same for one streamed chunk (or the [DONE] string). */
export function chunkEssence(j) {
  if (!j || typeof j !== 'object') return j;
  const c = j.choices?.[0];
  const u = j.usage;
  return {
    object: j.object,
    model: j.model,
    nchoices: j.choices?.length,
    role: c?.delta?.role ?? null,
    content: c?.delta?.content ?? null,
    tool_calls: c?.delta?.tool_calls ?? null,
    finish_reason: c?.finish_reason ?? null,
    usage: u ? { prompt: u.prompt_tokens, completion: u.completion_tokens, total: u.total_tokens } : null,
  };
}

/** The concatenated delta.content of chat.completion.chunk objects. */
export function streamedContent(chunks) {
  return chunks
    .filter((c) => c && typeof c === 'object' && Array.isArray(c.choices))
    .map((c) => c.choices.map((ch) => ch.delta?.content ?? '').join(''))
    .join('');
}

/** The mock's deterministic answer text for n chunks. */
export function mockText(n) {
  return Array.from({ length: n }, (_, i) => `tok${i + 1}`).join(' ');
}

/** The mock's input token count for OpenAI messages with string content. */
export function mockInputTokens(messages) {
  return messages.reduce((n, m) => n + 1 + m.content.split(/\s+/).filter(Boolean).length, 0);
}

// ---------------------------------------------------------------------------
// PostgreSQL (docs: /STACK.md "PostgreSQL for tests, started as root")

const postgresInstances = new Set();

/** The PostgreSQL server binaries: $LLMGW_PG_BIN, else the newest /usr/lib/postgresql/N/bin. */
export function postgresBinDir() {
  if (process.env.LLMGW_PG_BIN) return process.env.LLMGW_PG_BIN;
  const root = '/usr/lib/postgresql';
  let versions = [];
  try {
    versions = fs.readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => b - a);
  } catch {
    /* none */
  }
  for (const v of versions) {
    const d = path.join(root, v, 'bin');
    if (fs.existsSync(path.join(d, 'pg_ctl'))) return d;
  }
  throw new Error('PostgreSQL server binaries not found (install postgresql, or set LLMGW_PG_BIN)');
}

// The server refuses to run as root: as root, every pg_* command runs as postgres.
function pgCommand(bin, args) {
  return process.getuid && process.getuid() === 0
    ? ['runuser', ['-u', 'postgres', '--', bin, ...args]]
    : [bin, args];
}

function pidAlive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

// For the exit handler: immediate shutdown of every server still up.
function stopPostgresNow() {
  for (const pg of postgresInstances) {
    try {
      process.kill(pg.pid, 'SIGQUIT');
    } catch {
      /* gone */
    }
  }
}

export class Postgres {
  constructor(dir, port, pid, bin) {
    this.dir = dir;
    this.port = port;
    this.pid = pid; // the postmaster
    this.bin = bin;
    this.conninfo = this.conninfoFor('postgres');
  }

  conninfoFor(dbname) {
    return `host=127.0.0.1 port=${this.port} user=postgres dbname=${dbname} connect_timeout=5`;
  }

  /** Runs SQL with psql; returns its unaligned, tuples-only output (trimmed). */
  sql(query, dbname = 'postgres') {
    return execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-At', '-d', this.conninfoFor(dbname), '-c', query], {
      encoding: 'utf8', env: { ...process.env, PGCONNECT_TIMEOUT: '5' }, maxBuffer: 256 << 20,
    }).trim();
  }

  /** Creates an empty database; returns its conninfo. */
  createDatabase(name) {
    this.sql(`CREATE DATABASE "${name.replace(/"/g, '')}"`);
    return this.conninfoFor(name);
  }

  /** pg_ctl stop -m fast, then checks that the postmaster is gone (SIGKILL after a bound). */
  async stop() {
    if (!postgresInstances.has(this)) return;
    postgresInstances.delete(this);
    const [cmd, args] = pgCommand(path.join(this.bin, 'pg_ctl'), ['-D', path.join(this.dir, 'data'), '-m', 'fast', '-w', '-t', '20', 'stop']);
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    const deadline = Date.now() + 10_000;
    while (pidAlive(this.pid) && Date.now() < deadline) await sleep(50);
    if (pidAlive(this.pid)) {
      try {
        process.kill(this.pid, 'SIGKILL');
      } catch {
        /* gone */
      }
      throw new Error(`postgres did not stop (pg_ctl: ${r.stdout}${r.stderr}); SIGKILLed`);
    }
  }

  /** Starts it again, on the same port and data (after stop()). */
  async start() {
    if (postgresInstances.has(this)) return;
    const [cmd, args] = pgCommand(path.join(this.bin, 'pg_ctl'), ['-D', path.join(this.dir, 'data'), '-l', path.join(this.dir, 'log'), '-w', '-t', '30', '-o',
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`, 'start']);
    const r = spawnSync(cmd, args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`pg_ctl start failed (${r.status}): ${r.stdout}${r.stderr}`);
    this.pid = Number(fs.readFileSync(path.join(this.dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    postgresInstances.add(this);
  }
}

/** Starts a throwaway PostgreSQL on a free loopback port; stopAll() stops it. */
export async function startPostgres() {
  const bin = postgresBinDir();
  const dir = makeTmpDir();
  if (process.getuid && process.getuid() === 0) {
    const pw = execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim();
    const gr = execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim();
    fs.chownSync(dir, Number(pw), Number(gr));
  }
  fs.chmodSync(dir, 0o700);
  const run = (tool, args) => {
    const [cmd, a] = pgCommand(path.join(bin, tool), args);
    const r = spawnSync(cmd, a, { encoding: 'utf8' });
    if (r.status !== 0) {
      let log = '';
      try {
        log = fs.readFileSync(path.join(dir, 'log'), 'utf8');
      } catch {
        /* none */
      }
      throw new Error(`${tool} failed (${r.status}): ${r.stdout}${r.stderr}\n${log}`);
    }
  };
  run('initdb', ['-D', path.join(dir, 'data'), '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--no-locale', '--no-sync']);
  for (let attempt = 0; ; attempt++) {
    const port = await deadPort();
    try {
      run('pg_ctl', ['-D', path.join(dir, 'data'), '-l', path.join(dir, 'log'), '-w', '-t', '30', '-o',
        `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`, 'start']);
    } catch (e) {
      if (attempt < 2) continue; // the free port was taken in between
      throw e;
    }
    const pid = Number(fs.readFileSync(path.join(dir, 'data', 'postmaster.pid'), 'utf8').split('\n')[0]);
    const pg = new Postgres(dir, port, pid, bin);
    postgresInstances.add(pg);
    return pg;
  }
}

// ---------------------------------------------------------------------------
// The control plane

const CONTROLPLANE_ENV_VARS = ['LLMGW_DATABASE_URL', 'LLMGW_ADMIN_LISTEN', 'LLMGW_GRPC_LISTEN', 'LLMGW_ADMIN_TOKEN',
  'LLMGW_GRPC_TLS_CERT', 'LLMGW_GRPC_TLS_KEY', 'LLMGW_GRPC_TLS_CLIENT_CA', 'LLMGW_GRPC_TLS_NO_CLIENT_AUTH', 'LLMGW_GRPC_INSECURE',
  'LLMGW_SNAPSHOT_POLL_MS', 'LLMGW_MASTER_KEY', 'LLMGW_ETCD_ENDPOINTS', 'LLMGW_ETCD_LEASE_TTL_S', 'LLMGW_REPLICA_ID'];

function controlPlaneEnv(conninfo, env) {
  const e = withoutOtel(process.env); // tracing only where a test passes it in env
  for (const k of CONTROLPLANE_ENV_VARS) delete e[k];
  return { ...e, LLMGW_DATABASE_URL: conninfo, ...env };
}

export class ControlPlane {
  constructor(proc, port, token, listening) {
    this.proc = proc;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this.token = token;
    this.listening = listening;
  }

  /** An admin API request with the bootstrap token (headers may override it). */
  admin(method, p, body, headers = {}) {
    return request(this.port, {
      method, path: p, body, headers: { authorization: `Bearer ${this.token}`, ...headers },
    });
  }
}

/**
 * Starts `llmgw-controlplane serve` against pg (or conninfo) on a free port,
 * with a fresh bootstrap admin token and a plaintext gRPC server on a free
 * port (LLMGW_GRPC_INSECURE=1; env may override it); returns a ControlPlane
 * (listening.grpc_port is the bound gRPC port).
 */
export async function startControlPlane({ pg, conninfo, env = {}, args = [], token } = {}) {
  const tok = token ?? `llmgw-admin-${randomBytes(12).toString('hex')}`;
  const { proc, port, listening } = await startListening('controlplane', CONTROLPLANE_BIN,
    ['serve', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0', ...args],
    { env: controlPlaneEnv(conninfo ?? pg.conninfo, { LLMGW_ADMIN_TOKEN: tok, LLMGW_GRPC_INSECURE: '1', ...env }) });
  return new ControlPlane(proc, port, tok, listening);
}

/** Runs `llmgw-controlplane migrate` to its end; resolves with the ManagedProcess (exitInfo set). */
export async function runMigrate({ pg, conninfo, env = {}, timeoutMs = START_TIMEOUT_MS } = {}) {
  const proc = new ManagedProcess('controlplane-migrate', CONTROLPLANE_BIN, ['migrate'],
    { env: controlPlaneEnv(conninfo ?? pg.conninfo, env) });
  proc.exitExpected = true; // a one-shot command
  proc.nonZeroExitExpected = true; // the caller checks the status
  await proc.waitExit(timeoutMs);
  return proc;
}

// ---------------------------------------------------------------------------
// etcd (docs: /STACK.md "etcd 3.4 through its JSON gateway")

export const ETCD_BIN = process.env.LLMGW_ETCD_BIN ?? 'etcd';

/** One etcd member: endpoint is its client URL. stop() and start() keep the
 * data dir and ports, so a restart finds its leases and keys again. */
export class Etcd {
  /** tls: {ca, cert, key, serverCert, serverKey} (certs.mjs, makeCertSet): clients
   * must present a certificate from ca (--client-cert-auth); cert/key is
   * the one health() uses. */
  constructor(dir, clientPort, peerPort, tls = null) {
    this.dir = dir;
    this.clientPort = clientPort;
    this.peerPort = peerPort;
    this.tls = tls;
    this.endpoint = `${tls ? 'https' : 'http'}://127.0.0.1:${clientPort}`;
    this.proc = null;
  }

  async start(timeoutMs = START_TIMEOUT_MS) {
    const client = this.endpoint;
    const peer = `http://127.0.0.1:${this.peerPort}`;
    this.proc = new ManagedProcess('etcd', ETCD_BIN, ['--name', 'n1', '--data-dir', path.join(this.dir, 'data'),
      '--listen-client-urls', client, '--advertise-client-urls', client,
      '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
      '--initial-cluster', `n1=${peer}`, '--listen-metrics-urls', '',
      ...(this.tls ? ['--cert-file', this.tls.serverCert, '--key-file', this.tls.serverKey,
        '--trusted-ca-file', this.tls.ca, '--client-cert-auth'] : [])]);
    await waitFor(async () => {
      if (!this.proc.running) throw new Error(`etcd exited: ${JSON.stringify(this.proc.exitInfo)}\n${this.proc.describe()}`);
      return (await this.health()) === true;
    }, { timeoutMs, intervalMs: 50, what: `etcd healthy at ${client}` });
    return this;
  }

  /** true when GET /health says so; false when it answers otherwise or not at all. */
  async health() {
    try {
      if (this.tls) {
        const t = this.tls;
        const r = await new Promise((resolve, reject) => {
          const q = https.request({
            host: '127.0.0.1', port: this.clientPort, path: '/health', method: 'GET',
            ca: fs.readFileSync(t.ca), cert: fs.readFileSync(t.cert), key: fs.readFileSync(t.key), timeout: 2000,
          }, (res) => {
            let text = '';
            res.on('data', (d) => { text += d; });
            res.on('end', () => resolve({ status: res.statusCode, json: tryParseJson(text) }));
          });
          q.on('error', reject);
          q.on('timeout', () => q.destroy(new Error('timeout')));
          q.end();
        });
        return r.status === 200 && r.json?.health === 'true';
      }
      const r = await request(this.clientPort, { method: 'GET', path: '/health' });
      return r.status === 200 && r.json?.health === 'true';
    } catch {
      return false;
    }
  }

  /** One JSON gateway call (POST /v3/...), keys and values already base64. */
  async call(p, body) {
    const r = await request(this.clientPort, { method: 'POST', path: p, body });
    if (r.status !== 200) throw new Error(`etcd ${p}: ${r.status} ${r.text}`);
    return r.json;
  }

  /** {key: value} of every key under prefix, decoded. */
  async getPrefix(prefix) {
    const b64 = (x) => Buffer.from(x).toString('base64');
    const end = Buffer.from(prefix);
    end[end.length - 1] += 1;
    const j = await this.call('/v3/kv/range', { key: b64(prefix), range_end: end.toString('base64') });
    const out = {};
    for (const kv of j.kvs ?? []) {
      out[Buffer.from(kv.key, 'base64').toString()] = Buffer.from(kv.value ?? '', 'base64').toString();
    }
    return out;
  }

  /** SIGTERM and wait for the exit (etcd takes ~1.6 s). */
  async stop() {
    if (this.proc?.running) await this.proc.stop();
  }
}

/** Starts etcd on two free loopback ports with a temp data dir; stopAll()
 * stops it. With tls (see Etcd), its client port speaks TLS only. */
export async function startEtcd({ tls = null } = {}) {
  const dir = makeTmpDir();
  for (let attempt = 0; ; attempt++) {
    const e = new Etcd(dir, await deadPort(), await deadPort(), tls);
    try {
      return await e.start();
    } catch (err) {
      if (e.proc) {
        e.proc.exitExpected = true;
        e.proc.reported = true; // a lost port race, not a crash
      }
      await e.stop();
      fs.rmSync(path.join(dir, 'data'), { recursive: true, force: true });
      if (attempt >= 2) throw err; // a free port was taken in between
    }
  }
}

/** An admin API error answer: the status, a message, and the code and param when given; returns error. */
export function assertError(res, status, code, param) {
  assert.equal(res.status, status, `status; body: ${res.text}`);
  const e = res.json?.error;
  assert.ok(e && typeof e.message === 'string' && e.message.length > 0, `error body: ${res.text}`);
  if (code !== undefined) assert.equal(e.code, code, `error.code; body: ${res.text}`);
  if (param !== undefined) assert.equal(e.param, param, `error.param; body: ${res.text}`);
  return e;
}
