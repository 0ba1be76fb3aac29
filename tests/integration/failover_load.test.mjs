// A bounded loopback load test of failover: two mock processes,
// a primary and a backup, in one route; 3000 requests (half streaming, with
// a small chunk delay so streams are in flight) at concurrency 32; after a
// third of them completed the primary is SIGKILLed. Every request whose
// answer had not begun when the primary died (no response byte at the
// client, no content from the primary at the gateway) must succeed (0
// client-visible errors); streams already under way may end with an in-band
// error. Reported: how many attempts reached the dead primary (the
// gateway's attempt log) before its breaker opened, the in-band errors, the
// time taken.

import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import * as h from './harness.mjs';

const N = 3000;
const CONCURRENCY = 32;
const KILL_AFTER = 1000;
const CHUNKS = 8;
const MESSAGES = [{ role: 'user', content: 'hello there' }];

let primary;
let backup;
let gw;

before(async () => {
  h.requireBinaries();
  const mockArgs = ['--chunks', String(CHUNKS), '--chunk-delay-ms', '3'];
  primary = await h.startMock({ args: mockArgs });
  backup = await h.startMock({ args: mockArgs });
  const p = (name, m) => ({
    name, driver: 'openai', base_url: m.v1, credential_ref: 'env:MOCK_API_KEY', headers: {},
    enabled: true, first_byte_timeout_ms: 10000, idle_timeout_ms: 10000,
  });
  const snapshot = h.makeSnapshot({
    mockV1: backup.v1,
    extraProviders: [p('primary', primary), p('backup', backup)],
    extraRoutes: [{
      name: 'ha', capability: 'chat', strategy: 'ordered',
      entries: [{ provider: 'primary', model: 'mock-gpt' }, { provider: 'backup', model: 'mock-gpt' }],
    }],
  });
  gw = await h.startGateway({ mock: backup, snapshot, args: ['--retry-base-ms', '10'] });
});

after(async () => {
  await h.stopAll();
});

/** One request; records when the response began and how it ended. */
function send(agent, i, rec) {
  const streaming = i % 2 === 1;
  const body = JSON.stringify({ model: 'ha', messages: MESSAGES, stream: streaming });
  rec.stream = streaming;
  rec.startAt = performance.now();
  return new Promise((resolve) => {
    const req = http.request({
      host: '127.0.0.1', port: gw.port, method: 'POST', path: '/v1/chat/completions', agent,
      headers: { ...h.AUTH, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'x-request-id': `load-${i}` },
    });
    req.setTimeout(30_000, () => req.destroy(new Error('request timed out')));
    req.on('error', (e) => {
      rec.error = `connection: ${e.message}`;
      rec.endAt = performance.now();
      resolve();
    });
    req.on('response', (res) => {
      rec.responseAt = performance.now();
      rec.status = res.statusCode;
      rec.provider = res.headers['x-llmgw-provider'];
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('error', (e) => { rec.error = `response: ${e.message}`; });
      res.on('end', () => {
        rec.endAt = performance.now();
        if (!res.complete) rec.error ??= 'response cut short';
        check(rec, text);
        resolve();
      });
    });
    req.end(body);
  });
}

function check(rec, text) {
  if (rec.status !== 200) {
    rec.error ??= `status ${rec.status}: ${text.slice(0, 300)}`;
    return;
  }
  if (!rec.stream) {
    const j = h.tryParseJson(text);
    if (j?.choices?.[0]?.message?.content !== h.mockText(CHUNKS)) rec.error ??= `answer: ${text.slice(0, 300)}`;
    return;
  }
  const events = text.split(/\r?\n\r?\n/).map((b) => b.replace(/^data: ?/, '')).filter((d) => d.length);
  const parsed = h.parseEvents(events);
  if (parsed.some((e) => e && typeof e === 'object' && e.error)) {
    rec.inBand = true;
    rec.error ??= 'in-band error';
    return;
  }
  if (parsed.at(-1) !== '[DONE]') rec.error ??= `stream did not end with [DONE]: ${text.slice(-200)}`;
  else if (h.streamedContent(parsed.slice(0, -1)) !== h.mockText(CHUNKS)) rec.error ??= 'stream content';
}

test('killing the primary under load: no errors for requests not yet answered', { timeout: 180_000 }, async (t) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const recs = Array.from({ length: N }, (_, i) => ({ i }));
  let completed = 0;
  let killAt = null;
  let deadAt = null;
  let killWall = null; // the kill on the wall clock (the gateway's log timestamps)
  let killing = null;
  const t0 = performance.now();

  let next = 0;
  const worker = async () => {
    while (next < N) {
      const i = next++;
      await send(agent, i, recs[i]);
      completed++;
      if (completed >= KILL_AFTER && killing === null) {
        killAt = performance.now();
        killWall = Date.now();
        primary.proc.nonZeroExitExpected = true;
        primary.proc.signal('SIGKILL');
        killing = primary.proc.exited.then(() => { deadAt = performance.now(); });
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  } finally {
    agent.destroy();
  }
  await killing;
  const totalMs = Math.round(performance.now() - t0);

  // The strict set: answers that had not begun when the primary died. An
  // answer began if the client had a response byte before the death was
  // observed, or if the gateway's attempt on the primary got content: a
  // dead process sends nothing, so that content was sent before it died,
  // however late a loaded gateway read it from the socket and passed it on.
  const attemptsSeen = gw.attemptLog();
  const contentFromPrimary = new Set(attemptsSeen
    .filter((l) => l.provider === 'primary' && l.ttfc_ms !== undefined).map((l) => l.request_id));
  const began = (r) => r.responseAt !== undefined &&
    (r.responseAt < deadAt || contentFromPrimary.has(`load-${r.i}`));
  const strict = recs.filter((r) => !began(r));
  const early = recs.filter(began);
  const strictErrors = strict.filter((r) => r.error);
  const earlyErrors = early.filter((r) => r.error);
  const inBand = recs.filter((r) => r.inBand);
  const inFlightAtKill = recs.filter((r) => r.startAt < killAt && (r.endAt === undefined || r.endAt > killAt));

  // The gateway's attempt log: attempts on the primary that failed (it
  // never failed while alive). "broke": streams under way when it died (an
  // in-band error); "failed": before content (failed over, invisible).
  const attempts = attemptsSeen;
  const primaryFailures = attempts.filter((l) => l.provider === 'primary' && l.error_class);
  const broke = primaryFailures.filter((l) => l.outcome === 'broke');
  const failedBefore = primaryFailures.filter((l) => l.outcome === 'failed');
  const startedMs = (l) => Date.parse(l.ts) - (l.latency_ms ?? 0);
  // The breaker's state changes (JSON lines on stderr).
  const changes = gw.proc.stderrLines.map(h.tryParseJson)
    .filter((j) => j && j.msg === 'breaker state change' && j.provider === 'primary');
  const opened = changes.find((j) => j.to === 'open');
  const openedWall = opened ? Date.parse(opened.ts) : Infinity;
  // Attempts started after the kill and before the breaker opened: new
  // requests the dead primary cost (each then failed over). The others
  // were under way when it died.
  const reachedDead = failedBefore.filter((l) => startedMs(l) >= killWall && startedMs(l) <= openedWall);
  const lateSkips = gw.proc.stderrLines.filter((l) => l.includes('"candidate skipped"') && l.includes('"primary"')).length;
  const servedByBackupAfterKill = recs.filter((r) => r.startAt > deadAt && r.provider === 'backup').length;
  const statusCounts = {};
  for (const r of recs) statusCounts[r.status ?? 'none'] = (statusCounts[r.status ?? 'none'] ?? 0) + 1;

  const figures = {
    test: 'failover_load',
    requests: N,
    concurrency: CONCURRENCY,
    total_ms: totalMs,
    kill_after_completed: KILL_AFTER,
    kill_at_ms: Math.round(killAt - t0),
    dead_observed_ms: Math.round(deadAt - killAt),
    in_flight_at_kill: inFlightAtKill.length,
    strict_set: strict.length,
    strict_errors: strictErrors.length,
    responded_before_death: early.length,
    errors_among_those: earlyErrors.length,
    in_band_stream_errors: inBand.length,
    primary_attempts_failed_after_kill: primaryFailures.length,
    of_them_streams_broken_mid_answer: broke.length,
    of_them_failed_before_content: failedBefore.length,
    new_attempts_to_dead_primary_before_breaker_open: reachedDead.length,
    breaker_opened_ms_after_kill: opened ? openedWall - killWall : null,
    breaker_changes: changes.map((j) => `${j.from}->${j.to}`),
    planned_retries_refused_by_open_breaker: lateSkips,
    served_by_backup_after_kill: servedByBackupAfterKill,
    statuses: statusCounts,
    attempt_lines: attempts.length,
  };
  console.log(JSON.stringify(figures));
  t.diagnostic(JSON.stringify(figures));

  assert.ok(recs.every((r) => r.endAt !== undefined), 'every request ended');
  assert.equal(strictErrors.length, 0,
    `client-visible errors among requests with no response byte before the primary died: ${JSON.stringify(strictErrors.slice(0, 5))}`);
  assert.ok(earlyErrors.every((r) => r.inBand), `errors after the answer began are in-band stream errors: ${JSON.stringify(earlyErrors.filter((r) => !r.inBand).slice(0, 5))}`);
  assert.ok(inBand.length <= CONCURRENCY, `at most the streams in flight get an in-band error (${inBand.length})`);
  assert.ok(primaryFailures.length > 0, 'the primary failed at least once (the kill happened under load)');
  assert.ok(opened, `the primary's breaker opened: ${JSON.stringify(changes)}`);
  assert.ok(servedByBackupAfterKill > N / 3, `the backup served the rest (${servedByBackupAfterKill})`);
  assert.ok(reachedDead.length <= 4 * CONCURRENCY, `attempts to the dead primary before its breaker opened: ${reachedDead.length}`);
});
