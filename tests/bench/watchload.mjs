#!/usr/bin/env node
// Watch load (issue 20): one control plane fanning every version out to many
// watchers. See docs/BENCHMARKS.md, "Configuration at scale".
//
// Starts a throwaway PostgreSQL, the mock provider and one
// llmgw-controlplane, loads the generated configuration (as
// tests/bench/config_scale.mjs: SCALE_KEYS, SCALE_ROUTES, SCALE_PROVIDERS,
// SCALE_TEAMS), then llmgw-watchload (tests/bench/watchload.c) with WATCHERS
// simulated replicas: each opens a Watch and a Report stream and acknowledges
// every Snapshot, without parsing the document. Then SCALE_WRITES admin
// writes (the same alternation of key and route writes), one at a time; for
// each:
//   - fan-out: ms from the admin API's answer until each watcher received a
//     snapshot of that version or newer (p50 and p99 over the watchers, and
//     the last one), from watchload's wall-clock receipt times;
//   - the control plane's CPU from just before the request until
//     SCALE_GAP_MS after the last watcher had it (the acks included), per
//     write and per watcher; watchload's own CPU alongside (it shares the
//     machine's cores).
//
// Usage: node tests/bench/watchload.mjs   (or tests/bench/run.sh --watchload)
// Environment: LLMGW_BUILD_DIR; WATCHERS (default 200); WL_NO_DELTA=1 (the
//   watchers do not offer accepts_delta); SCALE_KEYS (default 10000) and the
//   other SCALE_* settings of config_scale.mjs; SCALE_WRITES (default 20),
//   SCALE_GAP_MS (default 200), SCALE_OUT (the JSON summary), SCALE_MAX_S.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as h from '../integration/harness.mjs';
import { Config, masterKey } from '../integration/cpconfig.mjs';
import * as L from './scale_lib.mjs';

// WATCHERS: a count, or counts separated by commas ("1,200"): one phase
// of writes each, in order; with two or more, the control plane's marginal
// CPU per watcher is the difference of the last and the first over the
// difference of their counts.
const WATCHER_COUNTS = (process.env.WATCHERS || '200').split(',').map((x) => {
  const n = Number(x);
  if (!Number.isInteger(n) || n < 1 || n > 10_000) throw new Error(`WATCHERS: '${x}' is not a count in 1..10000`);
  return n;
});
const KEYS = L.envInt('SCALE_KEYS', 10_000, 1, 1_000_000);
const ROUTES = L.envInt('SCALE_ROUTES', Math.max(1, Math.floor(KEYS / 10)), 1, 1_000_000);
const PROVIDERS = L.envInt('SCALE_PROVIDERS', 500, 2, 100_000);
const TEAMS = L.envInt('SCALE_TEAMS', Math.max(10, Math.floor(KEYS / 1000)), 1, 100_000);
const WRITES = L.envInt('SCALE_WRITES', 20, 1, 100_000);
const GAP_MS = L.envInt('SCALE_GAP_MS', 200, 0, 60_000);
const DEADLINE_MS = L.envInt('SCALE_DEADLINE_MS', 60_000, 1000, 3_600_000);
const MAX_S = L.envInt('SCALE_MAX_S', 3600, 60, 86400);
const WATCHLOAD_BIN = process.env.LLMGW_WATCHLOAD_BIN || path.join(h.BUILD_DIR, 'tests', 'bench', 'llmgw-watchload');

const lineOf = (pred) => (l) => {
  const j = h.tryParseJson(l);
  return j && pred(j);
};

async function main() {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.MOCK_BIN, WATCHLOAD_BIN]);
  const t00 = performance.now();
  const key = masterKey();
  const pg = await h.startPostgres();
  const mock = await h.startMock();
  const cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: key.hex } });
  const cfg = new Config(cp, pg, key);
  const imp = await cp.admin('POST', '/v1/admin/catalog/import', fs.readFileSync(L.CATALOG, 'utf8'));
  if (imp.status !== 200) throw new Error(`catalog import: ${imp.status} ${imp.text}`);
  const load = L.loadConfig(pg, { keys: KEYS, routes: ROUTES, providers: PROVIDERS, teams: TEAMS, key, baseUrl: mock.v1 });
  console.error(`[watchload] loaded ${KEYS} keys, ${ROUTES} routes, ${PROVIDERS} providers, ${TEAMS} teams in ${load.ms} ms (version ${load.version})`);
  await h.waitFor(async () => (await L.buildStats(cp)).version >= load.version, { timeoutMs: 120_000, what: 'the build of the loaded configuration' });

  const write = L.writer(cp, { routes: ROUTES, providers: PROVIDERS, teams: TEAMS });
  const state = { v: cfg.version(), i: 0 };
  const phases = [];
  for (const [n, WATCHERS] of WATCHER_COUNTS.entries()) {
    phases.push(await phase(cp, pg, write, state, WATCHERS, `wl${n}`));
  }
  const finalVersion = cfg.version();
  if (finalVersion !== state.v) throw new Error(`config_state.version is ${finalVersion}, expected ${state.v}: another writer?`);
  const first = phases[0];
  const last = phases[phases.length - 1];
  const result = {
    bench: 'watchload',
    at: new Date().toISOString(),
    rev: L.gitRev(),
    machine: `${os.cpus().length} cores, ${os.cpus()[0]?.model ?? '?'}, kernel ${os.release()}`,
    build_dir: h.BUILD_DIR,
    accepts_delta: process.env.WL_NO_DELTA !== '1',
    config: { keys: KEYS, routes: ROUTES, providers: PROVIDERS, teams: TEAMS, catalog_models: imp.json.imported },
    load: { sql_ms: load.ms, version: load.version },
    writes_per_phase: WRITES,
    gap_ms: GAP_MS,
    marginal_cp_cpu_per_write_per_watcher_us: phases.length > 1 && last.watchers !== first.watchers
      ? L.r1(((last.cp_cpu_per_write_ms.mean - first.cp_cpu_per_write_ms.mean) * 1000) / (last.watchers - first.watchers)) : null,
    phases,
    final_version: finalVersion,
    total_s: 0,
  };
  result.total_s = +((performance.now() - t00) / 1000).toFixed(1);
  console.log(JSON.stringify({ ...result, phases: phases.map(({ samples: _s, ...p }) => p) })); // eslint-disable-line no-unused-vars
  console.log(`\n| watchers | keys | writes | message | fan-out p50 (watchers' p50) | fan-out p99 (watchers' p99, median over writes) | last watcher p50 / max | CP CPU/write | CP CPU/write/watcher | watchload CPU/write |`
    + '\n| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |'
    + phases.map((p) => `\n| ${p.watchers} | ${KEYS} | ${WRITES} | ${p.message_bytes.deltas ? `${p.message_bytes.deltas} deltas, ` : 'whole document, '}${p.message_bytes.min}–${p.message_bytes.max} B`
      + ` | ${p.fanout_ms.p50_of_watcher_p50} ms | ${p.fanout_ms.p50_of_watcher_p99} ms | ${p.fanout_ms.p50_of_last} / ${p.fanout_ms.max_of_last} ms | ${p.cp_cpu_per_write_ms.mean} ms | ${p.cp_cpu_per_write_per_watcher_us} µs | ${p.watchload_cpu_per_write_ms} ms |`).join(''));
  if (result.marginal_cp_cpu_per_write_per_watcher_us !== null) {
    console.log(`\nmarginal control-plane CPU per write per watcher (${first.watchers} → ${last.watchers} watchers): ${result.marginal_cp_cpu_per_write_per_watcher_us} µs`);
  }
  if (process.env.SCALE_OUT) fs.writeFileSync(process.env.SCALE_OUT, `${JSON.stringify(result, null, 2)}\n`);
  await h.stopAll();
  return 0;
}

/** One phase: llmgw-watchload with WATCHERS watchers, then WRITES writes. */
async function phase(cp, pg, write, state, WATCHERS, prefix) {
  const args = ['--target', `127.0.0.1:${cp.listening.grpc_port}`, '--watchers', String(WATCHERS), '--max-seconds', String(MAX_S)];
  if (process.env.WL_NO_DELTA === '1') args.push('--no-delta');
  args.push('--prefix', prefix);
  const wl = new h.ManagedProcess('watchload', WATCHLOAD_BIN, args);
  const tConn = performance.now();
  const ready = JSON.parse(await wl.waitForStdoutLine(lineOf((j) => j.msg === 'ready'), 120_000, 'every watcher with a snapshot'));
  const connectMs = performance.now() - tConn;
  if (ready.version < state.v) {
    await wl.waitForStdoutLine(lineOf((j) => j.msg === 'fanout' && j.version >= state.v && j.watchers === WATCHERS), 120_000, 'the current version at every watcher');
  }
  console.error(`[watchload] ${WATCHERS} watchers have version ${state.v} ${connectMs.toFixed(0)} ms after watchload started`);
  await h.sleep(1000);

  // The control plane's idle cost with every watcher connected.
  const i0 = L.cpuMs(cp.proc.pid);
  await h.sleep(1000);
  const idleCpPerS = L.cpuMs(cp.proc.pid) - i0;

  const samples = [];
  for (let w = 0; w < WRITES; w++) {
    const i = state.i++;
    const c0 = L.cpuMs(cp.proc.pid);
    const w0 = L.cpuMs(wl.pid);
    const pg0 = L.pgCpuMs(pg);
    const { kind, res } = await write(i);
    const t0 = L.wallMs();
    if (res.status < 200 || res.status > 299) throw new Error(`write ${i} (${kind}): ${res.status} ${res.text}`);
    state.v += 1;
    const v = state.v;
    const want = v;
    const line = JSON.parse(await wl.waitForStdoutLine(lineOf((j) => j.msg === 'fanout' && j.version === want), DEADLINE_MS, `version ${want} at every watcher`));
    if (line.watchers !== WATCHERS) throw new Error(`version ${want} reached ${line.watchers} of ${WATCHERS} watchers`);
    await h.sleep(GAP_MS);
    const s = {
      i, kind, version: v, delta: line.delta, bytes: line.bytes,
      first_ms: line.first_ms - t0, p50_ms: line.p50_ms - t0, p99_ms: line.p99_ms - t0, last_ms: line.last_ms - t0,
      cp_cpu_ms: L.cpuMs(cp.proc.pid) - c0, wl_cpu_ms: L.cpuMs(wl.pid) - w0, pg_cpu_ms: L.pgCpuMs(pg) - pg0,
      cp_rss_kib: L.rssKiB(cp.proc.pid),
    };
    samples.push(s);
    console.error(`[watchload] ${WATCHERS} watchers, write ${w + 1}/${WRITES} ${kind} v${v} (${s.delta ? 'delta' : 'document'} ${s.bytes} B): fan-out first ${s.first_ms.toFixed(1)} p50 ${s.p50_ms.toFixed(1)} p99 ${s.p99_ms.toFixed(1)} last ${s.last_ms.toFixed(1)} ms; CPU cp ${s.cp_cpu_ms.toFixed(1)} ms, watchload ${s.wl_cpu_ms.toFixed(1)} ms, pg ${s.pg_cpu_ms.toFixed(0)} ms`);
  }
  const snap = (await cp.admin('GET', '/v1/admin/snapshot')).json;
  const acked = (snap?.replicas ?? []).filter((r) => r.replica_id.startsWith(`${prefix}-`) && r.acked_version === state.v).length;
  await wl.stop();
  const done = wl.stdoutJson().find((j) => j.msg === 'done') ?? null;
  const col = (f) => samples.map(f);
  const sorted = (xs) => [...xs].sort((a, b) => a - b);
  const p50s = sorted(col((s) => s.p50_ms));
  const p99s = sorted(col((s) => s.p99_ms));
  const lasts = sorted(col((s) => s.last_ms));
  const cpu = col((s) => s.cp_cpu_ms);
  return {
    watchers: WATCHERS,
    all_watchers_have_loaded_ms: +connectMs.toFixed(0),
    message_bytes: { min: Math.min(...col((s) => s.bytes)), max: Math.max(...col((s) => s.bytes)), deltas: col((s) => s.delta).filter(Boolean).length },
    fanout_ms: {
      // per write: the median and p99 over the watchers; then over the writes
      p50_of_watcher_p50: L.r1(L.pct(p50s, 50)),
      p50_of_watcher_p99: L.r1(L.pct(p99s, 50)),
      p99_of_watcher_p99: L.r1(L.pct(p99s, 99)),
      p50_of_last: L.r1(L.pct(lasts, 50)),
      max_of_last: L.r1(lasts[lasts.length - 1]),
      p50_of_first: L.r1(L.median(col((s) => s.first_ms))),
    },
    cp_cpu_per_write_ms: { mean: L.r1(L.mean(cpu)), p50: L.r1(L.median(cpu)), max: L.r1(Math.max(...cpu)) },
    cp_cpu_per_write_per_watcher_us: L.r1((L.mean(cpu) * 1000) / WATCHERS),
    cp_idle_cpu_ms_per_s: L.r1(idleCpPerS),
    watchload_cpu_per_write_ms: L.r1(L.mean(col((s) => s.wl_cpu_ms))),
    pg_cpu_per_write_ms: L.r1(L.mean(col((s) => s.pg_cpu_ms))),
    cp_rss_kib: { first: samples[0].cp_rss_kib, last: samples[samples.length - 1].cp_rss_kib },
    replicas_acked_last: acked,
    watchload: done,
    samples: samples.map((s) => Object.fromEntries(Object.entries(s).map(([k, x]) => [k, typeof x === 'number' && !Number.isInteger(x) ? L.r1(x) : x]))),
  };
}

L.boundRun(MAX_S, 'watchload');

main().then((code) => process.exit(code), async (e) => {
  console.error(e.stack ?? String(e));
  try {
    await h.stopAll();
  } catch (e2) {
    console.error(e2.message);
  }
  process.exit(1);
});
