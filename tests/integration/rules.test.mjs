// The Prometheus rules as code (deploy/prometheus): `promtool check rules`
// accepts them and `promtool test rules` proves each burn-rate alert fires
// on a burn fast enough for it and stays quiet on a slower one, the fleet
// breaker alert needs more than half of the replicas, the fleet view's
// down alert waits its 5 minutes, the stale-snapshot and disconnected
// alerts need a control plane, the control plane's own alerts (stale
// build, Postgres down) wait their time, and the money alerts (unpriced
// usage, the ledger spool growing, rows dropped, sustained ledger insert
// errors, rows rejected, a budget nearly spent) and the guardrail alerts (a
// route's judge score dropping, the judge queue dropping) fire where they
// should and only there. Also: the Grafana dashboard is valid JSON whose every panel
// has a query, a panel reading a metric no code emits yet says which issue
// brings it (and only such a panel), and the alert rules read only metrics
// the code emits. promtool comes with the Debian package prometheus
// (deploy/deps.sh); without it these tests skip, loudly.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from './harness.mjs';

const PROM = path.join(REPO_ROOT, 'deploy', 'prometheus');
const haveProm = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).status === 0;
if (!haveProm) {
  console.error('#'.repeat(70));
  console.error('# promtool NOT FOUND: the rules are NOT checked (deploy/deps.sh installs the Debian package prometheus)');
  console.error('#'.repeat(70));
}

function promtool(...args) {
  const r = spawnSync('promtool', args, { cwd: PROM, encoding: 'utf8' });
  assert.equal(r.status, 0, `promtool ${args.join(' ')}:\n${r.stdout}${r.stderr}`);
  return r.stdout;
}

test('promtool check rules', { skip: !haveProm && 'promtool not installed' }, () => {
  assert.match(promtool('check', 'rules', 'llmgw-rules.yml'), /SUCCESS/);
});

test('promtool test rules: burn rates, fleet breaker, stale snapshot, control plane, money and the ledger', { skip: !haveProm && 'promtool not installed' }, () => {
  assert.match(promtool('test', 'rules', 'llmgw-rules.test.yml'), /SUCCESS/);
});

// The metric names the code registers (a string literal "llmgw_..." or
// "gen_ai_..." in a C source of either plane or common/).
function emittedMetrics() {
  const names = new Set();
  for (const dir of ['common', 'dataplane', 'controlplane']) {
    for (const f of fs.readdirSync(path.join(REPO_ROOT, dir), { recursive: true })) {
      if (!f.endsWith('.c')) continue;
      for (const m of fs.readFileSync(path.join(REPO_ROOT, dir, f), 'utf8').matchAll(/"((?:llmgw|gen_ai)_[a-z0-9_]+)"/g)) names.add(m[1]);
    }
  }
  return names;
}

// The metrics an expression reads (histogram series named by their family).
const metricsIn = (expr) => [...expr.matchAll(/\b((?:llmgw|gen_ai)_[a-z0-9_]+)/g)].map((m) => m[1].replace(/_(bucket|count|sum)$/, ''));

test('the Grafana dashboard: valid JSON, a query per panel, a panel on a metric no code emits says which issue brings it', () => {
  const d = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy', 'grafana', 'llmgw-dashboard.json'), 'utf8'));
  assert.ok(d.title && Array.isArray(d.panels) && d.panels.length >= 8);
  const emitted = emittedMetrics();
  assert.ok(emitted.has('llmgw_requests_total') && emitted.has('llmgw_cp_leader') && emitted.has('gen_ai_server_request_duration_seconds'));
  const ids = new Set();
  for (const p of d.panels) {
    assert.ok(!ids.has(p.id), `duplicate panel id ${p.id}`);
    ids.add(p.id);
    if (p.type === 'row') continue;
    assert.ok(p.targets?.length && p.targets.every((t) => t.expr), `panel "${p.title}" has no query`);
    const future = p.targets.flatMap((t) => metricsIn(t.expr)).filter((n) => !emitted.has(n));
    const marked = /\(arrives with (issue \d+|a later issue)\)/.test(p.title);
    if (future.length) assert.ok(marked, `"${p.title}" reads ${future.join(', ')}, which no code emits`);
    else assert.ok(!marked, `"${p.title}" is marked as arriving, but every metric it reads exists`);
  }
});

test('every metric the alert rules read is one the code emits', () => {
  const emitted = emittedMetrics();
  const rules = fs.readFileSync(path.join(PROM, 'llmgw-rules.yml'), 'utf8').split('\n').filter((l) => !l.trim().startsWith('#')).join('\n');
  const missing = [...new Set(metricsIn(rules))].filter((n) => !emitted.has(n));
  assert.deepEqual(missing, []);
});
