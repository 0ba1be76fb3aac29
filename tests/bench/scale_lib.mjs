// Shared by the configuration-at-scale benchmarks (tests/bench/config_scale.mjs,
// tests/bench/watchload.mjs; docs/BENCHMARKS.md, "Configuration at scale"):
// the configuration generator, loaded into PostgreSQL with one COPY per
// table, and readings of a process's CPU time and memory from /proc.
//
// The generated configuration: `providers` providers (each with a built-in
// secret sealed under the control plane's master key, all pointing at the
// mock), `routes` routes of two entries each (providers i and i+1, models of
// the price catalog), `teams` teams, `keys` API keys spread over the teams
// (key i's plaintext is keyPlaintext(i), its hash the SHA-256 hex of it),
// and the LiteLLM price catalog the repository imports in its tests
// (tests/data/model_prices_sample.json), imported through the admin API.
// The SQL load is one transaction that ends as every admin write does:
// config_state.version bumped once, one audit row (action 'import'), one
// pg_notify.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as h from '../integration/harness.mjs';
import { seal } from '../integration/cpconfig.mjs';

export const CATALOG = path.join(h.REPO_ROOT, 'tests', 'data', 'model_prices_sample.json');

export const pad = (i, n = 6) => String(i).padStart(n, '0');
export const providerName = (i) => `prov-${pad(i, 4)}`;
export const routeName = (i) => `route-${pad(i)}`;
export const teamName = (i) => `team-${pad(i, 4)}`;
export const keyId = (i) => `key-${pad(i)}`;
export const keyPlaintext = (i) => `llmgw-bench-key-${pad(i)}`;

/** An integer environment setting within [lo, hi], or def. */
export function envInt(name, def, lo, hi) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < lo || v > hi) throw new Error(`${name} must be an integer in ${lo}..${hi}, got '${raw}'`);
  return v;
}

/** The catalog's chat models (route entries name them, so prices resolve). */
export function chatModels() {
  const cat = JSON.parse(fs.readFileSync(CATALOG, 'utf8'));
  return Object.keys(cat).filter((m) => cat[m].mode === 'chat').sort();
}

// COPY text format: tab-separated, \N for NULL, backslash escaped.
const cp = (v) => (v === null || v === undefined ? '\\N' : String(v).replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n'));
const row = (...cols) => `${cols.map(cp).join('\t')}\n`;

/**
 * Loads the generated configuration into the database of pg (through psql,
 * one COPY per table, one transaction). key: the master key the control
 * plane runs with. Returns {version, ms, sql_bytes, teams}.
 */
export function loadConfig(pg, { keys, routes, providers, teams, key, baseUrl, dbname = 'postgres' }) {
  const models = chatModels();
  const dir = h.makeTmpDir();
  const file = path.join(dir, 'load.sql');
  const fd = fs.openSync(file, 'w');
  const out = (s) => fs.writeSync(fd, s);
  out('BEGIN;\n');
  out('COPY secrets (name, backend, ciphertext, master_key_id) FROM STDIN;\n');
  for (let i = 0; i < providers; i++) {
    const name = `cred-${providerName(i)}`;
    out(row(name, 'builtin', `\\x${seal(key, name, `sk-mock-${pad(i, 4)}`).toString('hex')}`, key.id));
  }
  out('\\.\n');
  out('COPY providers (name, driver, base_url, credential_ref) FROM STDIN;\n');
  for (let i = 0; i < providers; i++) out(row(providerName(i), 'openai', baseUrl, `cred-${providerName(i)}`));
  out('\\.\n');
  out('COPY routes (name) FROM STDIN;\n');
  for (let i = 0; i < routes; i++) out(row(routeName(i)));
  out('\\.\n');
  out('COPY route_entries (route, position, provider, model) FROM STDIN;\n');
  for (let i = 0; i < routes; i++) {
    out(row(routeName(i), 0, providerName(i % providers), models[i % models.length]));
    out(row(routeName(i), 1, providerName((i + 1) % providers), models[(i + 1) % models.length]));
  }
  out('\\.\n');
  out('COPY teams (name) FROM STDIN;\n');
  for (let i = 0; i < teams; i++) out(row(teamName(i)));
  out('\\.\n');
  out('COPY api_keys (id, name, prefix, hash, status, team) FROM STDIN;\n');
  for (let i = 0; i < keys; i++) {
    const plain = keyPlaintext(i);
    out(row(keyId(i), `bench key ${i}`, plain.slice(0, 14), h.sha256hex(plain), 'active', teamName(i % teams)));
  }
  out('\\.\n');
  out(`UPDATE config_state SET version = version + 1, updated_at = now() WHERE id = 1;
INSERT INTO audit_log (actor, action, resource, resource_id, config_version)
  SELECT 'config_scale', 'import', 'bench', 'generated', version FROM config_state WHERE id = 1;
SELECT version FROM (SELECT version, pg_notify('llmgw_config', version::text) FROM config_state WHERE id = 1) s;
COMMIT;
ANALYZE;
`);
  fs.closeSync(fd);
  const sqlBytes = fs.statSync(file).size;
  const t0 = performance.now();
  const res = execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-At', '-d', pg.conninfoFor(dbname), '-f', file], {
    encoding: 'utf8', env: { ...process.env, PGCONNECT_TIMEOUT: '5' }, maxBuffer: 64 << 20, timeout: 600_000,
  });
  const ms = performance.now() - t0;
  fs.rmSync(file);
  return { version: Number(res.trim().split('\n').pop()), ms: +ms.toFixed(0), sql_bytes: sqlBytes };
}

// ---------------------------------------------------------------------------
// /proc readings

const CLK_TCK = 100; // getconf CLK_TCK on Linux

/**
 * CPU time of pid in ms: the sum of its threads' run time from
 * /proc/PID/task/TID/schedstat (nanoseconds) when the kernel has it, else
 * utime + stime from /proc/PID/stat (10 ms ticks). Threads that ended are
 * not in the first (every thread these programs run lives as long as they
 * do). null when the process is gone.
 */
export function cpuMs(pid) {
  try {
    let ns = 0;
    for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
      try {
        ns += Number(fs.readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0]);
      } catch {
        /* the thread ended in between */
      }
    }
    if (ns > 0) return ns / 1e6;
  } catch {
    /* no schedstat: stat below */
  }
  return statCpuMs(pid);
}

/** utime + stime of pid from /proc/PID/stat, in ms (10 ms resolution); null when gone. */
export function statCpuMs(pid) {
  try {
    const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
  } catch {
    return null;
  }
}

/** VmRSS of pid in KiB, or null. */
export function rssKiB(pid) {
  try {
    const m = /^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

/** The pids whose parent is ppid (PostgreSQL's backends under its postmaster). */
export function childPids(ppid) {
  const out = [];
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      if (Number(s.slice(s.lastIndexOf(')') + 2).split(' ')[1]) === ppid) out.push(Number(d));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** CPU ms of a postmaster and its backends now (a backend that ended since is not counted). */
export function pgCpuMs(pg) {
  return [pg.pid, ...childPids(pg.pid)].reduce((a, p) => a + (statCpuMs(p) ?? 0), 0);
}

export function pct(sorted, p) {
  if (!sorted.length) return null;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export const median = (xs) => pct([...xs].sort((a, b) => a - b), 50);
export const mean = (xs) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : null);
export const r1 = (x) => (x === null || x === undefined ? null : +x.toFixed(1));
export const r3 = (x) => (x === null || x === undefined ? null : +x.toFixed(3));

/** A least-squares slope of ys over xs (per unit of x). */
export function slope(xs, ys) {
  const n = xs.length;
  if (n < 2) return null;
  const mx = mean(xs);
  const my = mean(ys);
  let num = 0;
  let den = 0;
  for (let i = 0; i < n; i++) {
    num += (xs[i] - mx) * (ys[i] - my);
    den += (xs[i] - mx) ** 2;
  }
  return den ? num / den : null;
}

/** The control plane's snapshot builds (GET /metrics): the duration histogram's sum and count, and the version of the last good one. */
export async function buildStats(cp) {
  const r = await h.request(cp.port, { method: 'GET', path: '/metrics' });
  const get = (name) => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm').exec(r.text ?? '');
    return m ? Number(m[1]) : null;
  };
  return {
    sum_s: get('llmgw_cp_snapshot_build_duration_seconds_sum'),
    count: get('llmgw_cp_snapshot_build_duration_seconds_count'),
    version: get('llmgw_cp_snapshot_version'),
  };
}

/** Milliseconds since the epoch with sub-millisecond precision (comparable with another process's CLOCK_REALTIME). */
export const wallMs = () => performance.timeOrigin + performance.now();

/**
 * The benchmarks' admin writes, by number i: even ones a key write (a new
 * key, then its DELETE, so the configuration keeps its size), odd ones a
 * route edit (PATCH entries of route (i/2) mod routes: its two entries
 * trade places, and back on the next pass). Returns an async
 * write(i) -> {kind, res}.
 */
export function writer(cp, { routes, providers, teams }) {
  const models = chatModels();
  let lastKey = null;
  return async (i) => {
    if (i % 2 === 0) {
      if (lastKey === null) {
        lastKey = `bench-w-${pad(i)}`;
        return { kind: 'key create', res: await cp.admin('POST', '/v1/admin/keys', { id: lastKey, team: teamName(i % teams) }) };
      }
      const id = lastKey;
      lastKey = null;
      return { kind: 'key delete', res: await cp.admin('DELETE', `/v1/admin/keys/${id}`) };
    }
    const n = (i >> 1) % routes;
    const a = { provider: providerName(n % providers), model: models[n % models.length] };
    const b = { provider: providerName((n + 1) % providers), model: models[(n + 1) % models.length] };
    const flip = Math.floor((i >> 1) / routes) % 2 === 0;
    return { kind: 'route edit', res: await cp.admin('PATCH', `/v1/admin/routes/${routeName(n)}`, { entries: flip ? [b, a] : [a, b] }) };
  };
}

/** The git revision of the tree (with "+" when it has uncommitted changes). */
export function gitRev() {
  try {
    const rev = execFileSync('git', ['-C', h.REPO_ROOT, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
    const dirty = execFileSync('git', ['-C', h.REPO_ROOT, 'status', '--porcelain', '--untracked-files=no'], { encoding: 'utf8' }).trim();
    return dirty ? `${rev}+` : rev;
  } catch {
    return '?';
  }
}

/** Bounds a whole run: after maxS seconds everything started is stopped and the process exits 1. */
export function boundRun(maxS, tag) {
  const t = setTimeout(() => {
    console.error(`[${tag}] the run took longer than ${maxS} s; stopping`);
    setTimeout(() => process.exit(1), 30_000).unref(); // the harness's exit handler kills what is left
    h.stopAll().catch((e) => console.error(e.message)).finally(() => process.exit(1));
  }, maxS * 1000);
  t.unref();
}
