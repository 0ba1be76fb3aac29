#!/usr/bin/env node
// Configuration at scale (issue 20): how a write propagates, and what it
// costs, when the configuration is large. See docs/BENCHMARKS.md,
// "Configuration at scale".
//
// Starts a throwaway PostgreSQL, the mock provider and llmgw-controlplane
// (SCALE_CPS=2: two, on the same database), loads a generated configuration
// with SQL (tests/bench/scale_lib.mjs: SCALE_KEYS keys, SCALE_ROUTES routes,
// SCALE_PROVIDERS providers with sealed credentials, the price catalog
// through the admin API), then starts three data planes (1 worker thread
// each) and waits until all three serve the loaded version. Then
// SCALE_WRITES writes through the admin API, one at a time, alternating a
// key write (a new key, then its DELETE: the configuration keeps its size)
// and a route edit (PATCH entries: the order of a route's two entries
// flips). For each write:
//   - propagation: ms from the API's answer until all three data planes'
//     /readyz say snapshot_version >= the write's version (polled every
//     2 ms, keep-alive); with one writer, the write's version is the one
//     before plus one (checked at the end against config_state);
//   - CPU of each control plane, each data plane and PostgreSQL (postmaster
//     and backends), from just before the request until SCALE_GAP_MS after
//     the last data plane served it (so the work that trails the swap, the
//     old snapshot's release and the ack, is in it): per-thread run time
//     from /proc/PID/task/*/schedstat (ns), PostgreSQL from /proc/PID/stat;
//   - RSS (VmRSS) of every process after it.
// Before the writes, the data planes' cost of the /readyz polling itself is
// measured (1 s of polling with no write) and reported, so the per-write DP
// figure can be read net of it.
//
// Usage: node tests/bench/config_scale.mjs   (or tests/bench/run.sh --config-scale)
// Environment: LLMGW_BUILD_DIR (default <repo>/build); SCALE_KEYS (default
//   1000), SCALE_ROUTES (default keys/10), SCALE_PROVIDERS (default 500),
//   SCALE_TEAMS (default max(10, keys/1000)), SCALE_WRITES (default 20),
//   SCALE_GAP_MS (default 200), SCALE_CPS (1 or 2), SCALE_OUT (also write
//   the JSON summary there), SCALE_DEADLINE_MS (one write's bound, default
//   60000), SCALE_MAX_S (the whole run's bound, default 3600).
// Exit status 0, or 1 when the run could not complete (a data plane not
// serving a write within the bound, a process that died).

import http from 'node:http';
import fs from 'node:fs';
import os from 'node:os';
import * as h from '../integration/harness.mjs';
import { Config, masterKey } from '../integration/cpconfig.mjs';
import * as L from './scale_lib.mjs';

const KEYS = L.envInt('SCALE_KEYS', 1000, 1, 1_000_000);
const ROUTES = L.envInt('SCALE_ROUTES', Math.max(1, Math.floor(KEYS / 10)), 1, 1_000_000);
const PROVIDERS = L.envInt('SCALE_PROVIDERS', 500, 2, 100_000);
const TEAMS = L.envInt('SCALE_TEAMS', Math.max(10, Math.floor(KEYS / 1000)), 1, 100_000);
const WRITES = L.envInt('SCALE_WRITES', 20, 1, 100_000);
const GAP_MS = L.envInt('SCALE_GAP_MS', 200, 0, 60_000);
const CPS = L.envInt('SCALE_CPS', 1, 1, 2);
const DEADLINE_MS = L.envInt('SCALE_DEADLINE_MS', 60_000, 1000, 3_600_000);
const POLL_MS = 2;
const NDP = 3;

const agent = new http.Agent({ keepAlive: true, maxSockets: 8 });

function readyVersion(port) {
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/readyz', agent }, (res) => {
      let t = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { t += d; });
      res.on('end', () => resolve(h.tryParseJson(t)?.snapshot_version ?? -1));
    });
    req.on('error', () => resolve(-1));
    req.setTimeout(5000, () => req.destroy());
  });
}

/** Polls every data plane until each serves >= v; returns each one's ms after t0. */
async function waitServed(dps, v, t0, deadlineMs) {
  const at = dps.map(() => null);
  let polls = 0;
  for (;;) {
    const vs = await Promise.all(dps.map((g, i) => (at[i] === null ? readyVersion(g.port) : v)));
    polls += at.filter((x) => x === null).length;
    const now = performance.now();
    vs.forEach((x, i) => { if (at[i] === null && x >= v) at[i] = now - t0; });
    if (at.every((x) => x !== null)) return { at, polls };
    if (now - t0 > deadlineMs) throw new Error(`version ${v} not served by every data plane after ${deadlineMs} ms: ${vs}`);
    for (const g of dps) if (!g.proc.running) throw new Error(`data plane pid ${g.proc.pid} died\n${g.proc.describe()}`);
    await h.sleep(POLL_MS);
  }
}

function sample(procs, pg) {
  return { cpu: procs.map((p) => L.cpuMs(p.pid)), pg: L.pgCpuMs(pg) };
}

async function main() {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
  const t00 = performance.now();
  const key = masterKey();
  const pg = await h.startPostgres();
  const mock = await h.startMock();
  const cps = [];
  for (let i = 0; i < CPS; i++) {
    cps.push(await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: key.hex, LLMGW_REPLICA_ID: `cp-${i + 1}` } }));
  }
  const cp = cps[0];
  const cfg = new Config(cp, pg, key);
  // The price catalog, through the importer the repository has.
  const imp = await cp.admin('POST', '/v1/admin/catalog/import', fs.readFileSync(L.CATALOG, 'utf8'));
  if (imp.status !== 200) throw new Error(`catalog import: ${imp.status} ${imp.text}`);
  const load = L.loadConfig(pg, { keys: KEYS, routes: ROUTES, providers: PROVIDERS, teams: TEAMS, key, baseUrl: mock.v1 });
  console.error(`[scale] loaded ${KEYS} keys, ${ROUTES} routes, ${PROVIDERS} providers, ${TEAMS} teams, ${imp.json.imported} catalog models in ${load.ms} ms (version ${load.version})`);

  // The data planes, started on the loaded configuration.
  const tStart = performance.now();
  const grpc = cps.map((c) => `127.0.0.1:${c.listening.grpc_port}`);
  const dps = [];
  for (let i = 0; i < NDP; i++) {
    // With two control planes, the data planes start on different ones.
    const list = CPS === 1 ? grpc[0] : [grpc[i % 2], grpc[1 - (i % 2)]].join(',');
    dps.push(await h.startGatewayCP({ controlPlane: list, replicaId: `scale-dp-${i + 1}`, threads: 1 }));
  }
  const first = await waitServed(dps, load.version, tStart, Math.max(DEADLINE_MS, 120_000));
  const firstMs = Math.max(...first.at);
  console.error(`[scale] ${NDP} data planes serve version ${load.version} ${firstMs.toFixed(0)} ms after their start`);

  // The generated configuration serves: key 0 on route 0 through each data plane.
  for (const g of dps) {
    const r = await h.request(g.port, {
      headers: { authorization: `Bearer ${L.keyPlaintext(0)}` },
      body: { model: L.routeName(0), messages: [{ role: 'user', content: 'hi' }] },
    });
    if (r.status !== 200) throw new Error(`a chat through the generated configuration: ${r.status} ${r.text}`);
  }

  const procs = [...cps.map((c) => c.proc), ...dps.map((g) => g.proc)];
  const names = [...cps.map((_, i) => `cp-${i + 1}`), ...dps.map((_, i) => `dp-${i + 1}`)];
  await h.sleep(1000); // the first snapshot's trailing work (cache, acks) settles

  // The cost of the polling alone: 1 s of /readyz at the benchmark's pace.
  const p0 = sample(procs, pg);
  const tp = performance.now();
  let idlePolls = 0;
  while (performance.now() - tp < 1000) {
    await Promise.all(dps.map((g) => readyVersion(g.port)));
    idlePolls += NDP;
    await h.sleep(POLL_MS);
  }
  const p1 = sample(procs, pg);
  const pollWall = performance.now() - tp;
  const pollCpuPerPoll = dps.map((_, i) => (p1.cpu[CPS + i] - p0.cpu[CPS + i]) / (idlePolls / NDP));
  const idleCpPerS = cps.map((_, i) => ((p1.cpu[i] - p0.cpu[i]) * 1000) / pollWall);
  const rssLoaded = procs.map((p) => L.rssKiB(p.pid));

  const write = L.writer(cp, { routes: ROUTES, providers: PROVIDERS, teams: TEAMS });
  const b0 = await L.buildStats(cp);
  const samples = [];
  let v = cfg.version();
  for (let i = 0; i < WRITES; i++) {
    const s0 = sample(procs, pg);
    const tReq = performance.now();
    const { kind, res: r } = await write(i);
    const t0 = performance.now();
    if (r.status < 200 || r.status > 299) throw new Error(`write ${i} (${kind}): ${r.status} ${r.text}`);
    v += 1;
    const { at, polls } = await waitServed(dps, v, t0, DEADLINE_MS);
    await h.sleep(GAP_MS);
    const s1 = sample(procs, pg);
    const rss = procs.map((p) => L.rssKiB(p.pid));
    samples.push({
      i, kind, version: v, api_ms: t0 - tReq, all_ms: Math.max(...at), per_dp_ms: at, polls,
      cpu_ms: s1.cpu.map((c, k) => c - s0.cpu[k]), pg_cpu_ms: s1.pg - s0.pg, rss_kib: rss,
    });
    console.error(`[scale] write ${i + 1}/${WRITES} ${kind} v${v}: api ${(t0 - tReq).toFixed(1)} ms, all DPs ${Math.max(...at).toFixed(1)} ms; CPU ${names.map((nm, k) => `${nm} ${(s1.cpu[k] - s0.cpu[k]).toFixed(1)}`).join(', ')}, pg ${(s1.pg - s0.pg).toFixed(0)} ms`);
  }
  const b1 = await L.buildStats(cp);
  const finalVersion = cfg.version();
  if (finalVersion !== v) throw new Error(`config_state.version is ${finalVersion}, expected ${v}: another writer?`);

  // Summary
  const col = (f) => samples.map(f);
  const sorted = (xs) => [...xs].sort((a, b) => a - b);
  const prop = sorted(col((s) => s.all_ms));
  const cpuOf = (k) => col((s) => s.cpu_ms[k]);
  const dpIdx = dps.map((_, i) => CPS + i);
  const dpCpuAll = dpIdx.flatMap((k) => cpuOf(k));
  const dpNet = dpIdx.flatMap((k, j) => samples.map((s) => s.cpu_ms[k] - s.polls / NDP * pollCpuPerPoll[j]));
  const rssSeries = procs.map((_, k) => samples.map((s) => s.rss_kib[k]));
  const result = {
    bench: 'config_scale',
    at: new Date().toISOString(),
    rev: L.gitRev(),
    machine: `${os.cpus().length} cores, ${os.cpus()[0]?.model ?? '?'}, kernel ${os.release()}`,
    build_dir: h.BUILD_DIR,
    config: { keys: KEYS, routes: ROUTES, route_entries: 2 * ROUTES, providers: PROVIDERS, teams: TEAMS, catalog_models: imp.json.imported, control_planes: CPS, data_planes: NDP },
    load: { sql_ms: load.ms, sql_bytes: load.sql_bytes, version: load.version, first_snapshot_all_dps_ms: +firstMs.toFixed(0) },
    writes: WRITES,
    gap_ms: GAP_MS,
    propagation_ms: { p50: L.r1(L.pct(prop, 50)), p90: L.r1(L.pct(prop, 90)), p99: L.r1(L.pct(prop, 99)), max: L.r1(prop[prop.length - 1]), min: L.r1(prop[0]), mean: L.r1(L.mean(prop)) },
    api_ms: { p50: L.r1(L.median(col((s) => s.api_ms))), max: L.r1(Math.max(...col((s) => s.api_ms))) },
    build_s: b1.count > b0.count ? { builds: b1.count - b0.count, mean: L.r3((b1.sum_s - b0.sum_s) / (b1.count - b0.count)) } : null,
    cpu_per_write_ms: {
      ...Object.fromEntries(cps.map((_, k) => [`cp-${k + 1}`, { mean: L.r1(L.mean(cpuOf(k))), p50: L.r1(L.median(cpuOf(k))), max: L.r1(Math.max(...cpuOf(k))) }])),
      dp: { mean: L.r1(L.mean(dpCpuAll)), p50: L.r1(L.median(dpCpuAll)), max: L.r1(Math.max(...dpCpuAll)), mean_net_of_polling: L.r1(L.mean(dpNet)) },
      postgres: { mean: L.r1(L.mean(col((s) => s.pg_cpu_ms))), p50: L.r1(L.median(col((s) => s.pg_cpu_ms))) },
    },
    polling: { dp_cpu_ms_per_poll: pollCpuPerPoll.map(L.r3), polls_per_write_per_dp: L.r1(L.mean(col((s) => s.polls / NDP))) },
    idle_cp_cpu_ms_per_s: idleCpPerS.map(L.r1),
    rss_kib: Object.fromEntries(names.map((nm, k) => [nm, {
      loaded: rssLoaded[k], first_write: rssSeries[k][0], last_write: rssSeries[k][rssSeries[k].length - 1],
      max: Math.max(...rssSeries[k]), slope_kib_per_write: L.r1(L.slope(samples.map((s) => s.i), rssSeries[k])),
    }])),
    by_kind: Object.fromEntries(['key create', 'key delete', 'route edit'].map((kd) => {
      const ss = sorted(samples.filter((s) => s.kind === kd).map((s) => s.all_ms));
      return [kd, { n: ss.length, p50_ms: L.r1(L.pct(ss, 50)), max_ms: L.r1(ss[ss.length - 1] ?? null) }];
    })),
    final_version: finalVersion,
    samples: samples.map((s) => ({ ...s, api_ms: L.r1(s.api_ms), all_ms: L.r1(s.all_ms), per_dp_ms: s.per_dp_ms.map(L.r1), cpu_ms: s.cpu_ms.map(L.r1), pg_cpu_ms: L.r1(s.pg_cpu_ms) })),
    total_s: 0,
  };
  result.total_s = +((performance.now() - t00) / 1000).toFixed(1);
  const { samples: _s, ...brief } = result; // eslint-disable-line no-unused-vars
  console.log(JSON.stringify(brief));
  const c = result.cpu_per_write_ms;
  console.log(`\n| keys | routes | providers | writes | p50 | p99 | max | CPU/write ${cps.map((_, k) => `cp-${k + 1}`).join(', ')} | CPU/write DP (mean of ${NDP}) | PG CPU/write | DP RSS loaded → last write | first snapshot (all DPs) |`
    + '\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |'
    + `\n| ${KEYS} | ${ROUTES} | ${PROVIDERS} | ${WRITES} | ${result.propagation_ms.p50} ms | ${result.propagation_ms.p99} ms | ${result.propagation_ms.max} ms`
    + ` | ${cps.map((_, k) => `${c[`cp-${k + 1}`].mean} ms`).join(', ')} | ${c.dp.mean} ms (net of polling ${c.dp.mean_net_of_polling}) | ${c.postgres.mean} ms`
    + ` | ${dps.map((_, i) => `${(rssLoaded[CPS + i] / 1024).toFixed(1)} → ${(rssSeries[CPS + i][WRITES - 1] / 1024).toFixed(1)}`).join(', ')} MiB | ${result.load.first_snapshot_all_dps_ms} ms |`);
  if (process.env.SCALE_OUT) fs.writeFileSync(process.env.SCALE_OUT, `${JSON.stringify(result, null, 2)}\n`);
  agent.destroy();
  await h.stopAll();
  return 0;
}

// The whole run is bounded: a hung step fails it instead of holding the machine.
L.boundRun(L.envInt('SCALE_MAX_S', 3600, 60, 86400), 'scale');

main().then((code) => process.exit(code), async (e) => {
  console.error(e.stack ?? String(e));
  agent.destroy();
  try {
    await h.stopAll();
  } catch (e2) {
    console.error(e2.message);
  }
  process.exit(1);
});
