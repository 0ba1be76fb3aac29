// The Prometheus rules as code (deploy/prometheus): `promtool check rules`
// accepts them and `promtool test rules` proves each burn-rate alert fires
// on a burn fast enough for it and stays quiet on a slower one, the fleet
// breaker alert needs more than half of the replicas, the fleet view's
// down alert waits its 5 minutes, the stale-snapshot
// and disconnected alerts need a control plane, and the control plane's own
// alerts (stale build, Postgres down) wait their time. Also: the Grafana dashboard is valid JSON
// whose every panel has a query. promtool comes with the Debian package
// prometheus (deploy/deps.sh); without it these tests skip, loudly.

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

test('promtool test rules: burn rates, fleet breaker, stale snapshot, control plane', { skip: !haveProm && 'promtool not installed' }, () => {
  assert.match(promtool('test', 'rules', 'llmgw-rules.test.yml'), /SUCCESS/);
});

test('the Grafana dashboard: valid JSON, a query per panel, future panels marked', () => {
  const d = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy', 'grafana', 'llmgw-dashboard.json'), 'utf8'));
  assert.ok(d.title && Array.isArray(d.panels) && d.panels.length >= 8);
  const ids = new Set();
  for (const p of d.panels) {
    assert.ok(!ids.has(p.id), `duplicate panel id ${p.id}`);
    ids.add(p.id);
    if (p.type === 'row') continue;
    assert.ok(p.targets?.length && p.targets.every((t) => t.expr), `panel "${p.title}" has no query`);
    // A panel on a metric no code emits yet says which issue brings it.
    const future = p.targets.some((t) => /llmgw_(cost|budget|unpriced|ledger|cache)/.test(t.expr));
    if (future) assert.match(p.title, /\(arrives with (issue \d+|a later issue)\)/, p.title);
  }
});
