// Reading Prometheus text exposition in tests: both planes' /metrics are
// scraped, parsed into samples, looked up by exact label set, and checked
// with `promtool check metrics` (the Debian package prometheus, installed
// by deploy/deps.sh).

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as h from './harness.mjs';

/** Parses the text exposition into [{name, labels, value}]. */
export function parseExposition(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(m, `exposition line does not parse: ${line}`);
    const labels = {};
    if (m[2]) {
      const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/g;
      let l;
      while ((l = re.exec(m[2]))) labels[l[1]] = l[2].replace(/\\n/g, '\n').replace(/\\"/g, '"').replace(/\\\\/g, '\\');
    }
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

/** The value of the one sample name{labels} (exact label set); undefined when absent. */
export function metricValue(samples, name, labels = {}) {
  const want = JSON.stringify(Object.entries(labels).sort());
  const hits = samples.filter((s) => s.name === name && JSON.stringify(Object.entries(s.labels).sort()) === want);
  assert.ok(hits.length <= 1, `${name} ${want} appears ${hits.length} times`);
  return hits[0]?.value;
}

/** GET /metrics on port: {text, samples}. */
export async function scrapeMetrics(port, headers = {}) {
  const r = await h.request(port, { method: 'GET', path: '/metrics', headers });
  assert.equal(r.status, 200, r.text);
  assert.match(r.headers['content-type'], /^text\/plain; version=0\.0\.4/);
  return { text: r.text, samples: parseExposition(r.text) };
}

/** promtool check metrics on text; says so loudly when promtool is absent. */
export function promtoolCheck(text) {
  const which = spawnSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' });
  if (which.status !== 0) {
    console.error('#'.repeat(70));
    console.error('# promtool NOT FOUND: the exposition is NOT checked (deploy/deps.sh installs the Debian package prometheus)');
    console.error('#'.repeat(70));
    return;
  }
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.status, 0, `promtool check metrics failed:\n${r.stdout}${r.stderr}\n--- exposition:\n${text}`);
}
