// The control plane's traces (controlplane/cp_trace.h): PostgreSQL +
// llmgw-controlplane exporting to a real OTLP/HTTP receiver
// (otlp_receiver.mjs) + two data planes fed by it over gRPC. An admin write
// carrying the test's own traceparent makes one trace an operator follows:
// the write's SERVER span (the caller's parent, the audit row's id and the
// config version it made), the build span under it, and one push span per
// data plane under that, each ending at its replica's Ack. A Watch that
// never acks (the bare watch client) shows the push's other ends: a newer
// publish supersedes it, and its Watch's end leaves the last one not
// acknowledged. Writes that one build takes in together: the newest is its
// parent, the others its links. A refused write is an ERROR span naming no
// audit row. A bad OTEL_TRACES_SAMPLER stops the control plane at start,
// naming the variable.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { startReceiver } from './otlp_receiver.mjs';

const T = { timeout: 90_000 };
const KEY = masterKey();
const SERVER = 2; // SpanKind
const INTERNAL = 1;
const ERROR = 2; // StatusCode

let pg;
let cp;
let cfg;
let rx;
let grpcTarget;

const hex = (n) => randomBytes(n).toString('hex');
const traceparent = (traceId, spanId) => `00-${traceId}-${spanId}-01`;

const snapshot = async () => (await cp.admin('GET', '/v1/admin/snapshot')).json;

/** Waits until every replica of ids is connected and serves version or later. */
async function allAcked(ids, version) {
  await h.waitFor(async () => {
    const s = await snapshot();
    return ids.every((id) => s.replicas.some((r) => r.replica_id === id && r.connected && r.acked_version >= version));
  }, { timeoutMs: 20_000, what: `${ids.join(', ')} at version ${version}` });
}

/** The spans of traceId once pred(spans) holds. */
async function traceWhere(traceId, pred, what) {
  try {
    return await h.waitFor(() => {
      const spans = rx.trace(traceId);
      return pred(spans) ? spans : null;
    }, { timeoutMs: 20_000, what });
  } catch (e) {
    e.message += `\nspans of ${traceId}: ${JSON.stringify(rx.trace(traceId), (k, v) => (typeof v === 'bigint' ? String(v) : v), 1)}`;
    throw e;
  }
}

const pushesOf = (spans, build) => spans.filter((s) => s.name === 'llmgw.snapshot.push' && s.parentSpanId === build.spanId);

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.WATCH_CLIENT_BIN]);
  pg = await h.startPostgres();
  rx = await startReceiver();
  cp = await h.startControlPlane({
    pg,
    env: {
      LLMGW_MASTER_KEY: KEY.hex,
      OTEL_EXPORTER_OTLP_ENDPOINT: rx.url,
      OTEL_BSP_SCHEDULE_DELAY: '100',
    },
  });
  cfg = new Config(cp, pg, KEY);
  grpcTarget = `127.0.0.1:${cp.listening.grpc_port}`;
  // A first write, so that the traced one's build is a delta.
  await cfg.api('POST', '/v1/admin/teams', { name: 'setup' }, 201);
  for (const id of ['dp-a', 'dp-b']) {
    await h.startGatewayCP({ controlPlane: grpcTarget, replicaId: id });
  }
  await allAcked(['dp-a', 'dp-b'], cfg.version());
});

after(async () => {
  await h.stopAll();
  await rx?.close();
});

describe('control plane traces', () => {
  let write; // the traced write's span, for the later tests

  test('an admin write, its build and one push per data plane make one trace', T, async () => {
    const traceId = hex(16);
    const callerSpan = hex(8);
    const r = await cp.admin('POST', '/v1/admin/providers',
      { name: 'traced', driver: 'openai', base_url: 'http://127.0.0.1:9/v1' },
      { traceparent: traceparent(traceId, callerSpan), tracestate: 'tst=abc,other=1' });
    assert.equal(r.status, 201, r.text);
    const version = cfg.version();

    const spans = await traceWhere(traceId, (ss) => {
      const w = ss.find((s) => s.kind === SERVER);
      const b = w && ss.find((s) => s.name === 'llmgw.snapshot.build' && s.parentSpanId === w.spanId);
      return b && pushesOf(ss, b).length >= 2;
    }, 'the write, build and push spans');

    // The write: the caller's child, named by its route.
    const writes = spans.filter((s) => s.kind === SERVER);
    assert.equal(writes.length, 1);
    write = writes[0];
    assert.equal(write.name, 'POST /v1/admin/providers');
    assert.equal(write.parentSpanId, callerSpan);
    assert.equal(write.traceState, 'tst=abc,other=1');
    assert.equal(write.attrs['http.request.method'], 'POST');
    assert.equal(write.attrs['url.path'], '/v1/admin/providers');
    assert.equal(write.attrs['http.route'], '/v1/admin/providers');
    assert.equal(write.attrs['http.response.status_code'], 201);
    assert.equal(write.attrs['llmgw.resource'], 'providers');
    assert.notEqual(write.status.code, ERROR);
    assert.ok(write.end >= write.start);
    // The audit row it wrote, and the configuration version it made.
    const audit = await cp.admin('GET', '/v1/admin/audit?limit=1');
    assert.equal(audit.status, 200, audit.text);
    const row = audit.json.data[0];
    assert.equal(row.resource, 'providers');
    assert.equal(row.resource_id, 'traced');
    assert.equal(write.attrs['llmgw.audit.id'], row.id);
    assert.equal(write.attrs['llmgw.config.version'], row.config_version);
    assert.equal(write.attrs['llmgw.config.version'], version);

    // The build that took it in, under it.
    const builds = spans.filter((s) => s.name === 'llmgw.snapshot.build');
    assert.equal(builds.length, 1);
    const build = builds[0];
    assert.equal(build.parentSpanId, write.spanId);
    assert.equal(build.kind, INTERNAL);
    assert.equal(build.attrs['llmgw.snapshot.version'], version);
    assert.equal(build.attrs['llmgw.snapshot.kind'], 'delta');
    assert.equal(build.attrs['llmgw.snapshot.base_version'], version - 1);
    assert.equal(build.attrs['llmgw.snapshot.result'], 'ok');
    assert.ok(build.start >= write.start, 'the build starts after the write did');
    assert.ok(build.end >= build.start);

    // One push per data plane, under the build, each ending at its Ack.
    await allAcked(['dp-a', 'dp-b'], version);
    const pushes = pushesOf(rx.trace(traceId), build);
    assert.deepEqual(pushes.map((p) => p.attrs['llmgw.replica.id']).sort(), ['dp-a', 'dp-b']);
    for (const p of pushes) {
      assert.equal(p.kind, INTERNAL);
      assert.equal(p.attrs['llmgw.snapshot.version'], version);
      assert.ok(p.attrs['llmgw.snapshot.acked_version'] >= version);
      assert.notEqual(p.status.code, ERROR, JSON.stringify(p.status));
      assert.ok(p.start >= build.start, 'a push starts after its build did');
      assert.ok(p.end >= p.start, 'a push ends no earlier than it started');
    }
    for (const s of [write, build, ...pushes]) {
      assert.equal(s.resource['service.name'], 'llmgw-controlplane');
      assert.ok(s.resource['service.instance.id']);
    }
    assert.deepEqual(rx.errors, []);
  });

  test('a refused write is an ERROR span with no audit row, and no build follows it', T, async () => {
    const traceId = hex(16);
    const r = await cp.admin('PATCH', '/v1/admin/providers/traced', { driver: 'no-such-driver' },
      { traceparent: traceparent(traceId, hex(8)) });
    assert.equal(r.status, 400, r.text);
    const [span] = await traceWhere(traceId, (ss) => ss.length >= 1, 'the refused write span');
    assert.equal(span.name, 'PATCH /v1/admin/providers/{name}');
    assert.equal(span.attrs['url.path'], '/v1/admin/providers/traced');
    assert.equal(span.attrs['http.response.status_code'], 400);
    assert.equal(span.status.code, ERROR);
    assert.equal(span.status.message, 'http 4xx');
    assert.equal(span.attrs['llmgw.audit.id'], undefined);
    assert.equal(span.attrs['llmgw.config.version'], undefined);
    // No request text on a span.
    assert.ok(!JSON.stringify(span.attrs).includes('no-such-driver'));
    await h.sleep(500);
    assert.equal(rx.trace(traceId).length, 1);
  });

  test('a replica that never acks: its push is superseded, then not acknowledged', T, async () => {
    const silent = await h.startWatchClient({ target: grpcTarget, replicaId: 'silent' });
    await h.waitFor(async () => (await snapshot()).replicas.some((r) => r.replica_id === 'silent' && r.connected),
      { what: 'the silent replica connected' });

    const first = hex(16);
    let r = await cp.admin('POST', '/v1/admin/teams', { name: 'first' }, { traceparent: traceparent(first, hex(8)) });
    assert.equal(r.status, 201, r.text);
    const v1 = cfg.version();
    await allAcked(['dp-a', 'dp-b'], v1);
    await h.waitFor(() => silent.snapshots().some((m) => m.version >= v1), { what: 'the silent replica got v1' });

    const second = hex(16);
    r = await cp.admin('DELETE', '/v1/admin/teams/first', undefined, { traceparent: traceparent(second, hex(8)) });
    assert.equal(r.status, 204, r.text);
    const v2 = cfg.version();
    await allAcked(['dp-a', 'dp-b'], v2);
    await h.waitFor(() => silent.snapshots().some((m) => m.version >= v2), { what: 'the silent replica got v2' });

    // v1's push to the silent replica ended when v2's started.
    const s1 = await traceWhere(first, (ss) => ss.some((s) => s.name === 'llmgw.snapshot.push' &&
      s.attrs['llmgw.replica.id'] === 'silent'), "v1's push to the silent replica");
    const b1 = s1.find((s) => s.name === 'llmgw.snapshot.build');
    const p1 = pushesOf(s1, b1).find((s) => s.attrs['llmgw.replica.id'] === 'silent');
    assert.equal(p1.status.code, ERROR);
    assert.equal(p1.status.message, 'superseded');
    assert.equal(p1.attrs['llmgw.snapshot.version'], v1);

    // v2's ends when the silent replica's Watch does.
    await silent.proc.stop();
    const s2 = await traceWhere(second, (ss) => ss.some((s) => s.name === 'llmgw.snapshot.push' &&
      s.attrs['llmgw.replica.id'] === 'silent'), "v2's push to the silent replica");
    const b2 = s2.find((s) => s.name === 'llmgw.snapshot.build');
    assert.equal(b2.parentSpanId, s2.find((s) => s.kind === SERVER).spanId);
    const pushes2 = pushesOf(s2, b2);
    const p2 = pushes2.find((s) => s.attrs['llmgw.replica.id'] === 'silent');
    assert.equal(p2.status.code, ERROR);
    assert.equal(p2.status.message, 'not acknowledged');
    // The data planes acked theirs.
    for (const id of ['dp-a', 'dp-b']) {
      const p = pushes2.find((s) => s.attrs['llmgw.replica.id'] === id);
      assert.ok(p, `${id}'s push of v2`);
      assert.notEqual(p.status.code, ERROR);
    }
  });

  test('writes one build takes in: the newest is its parent, the others its links', T, async () => {
    // The builder blocks on api_keys (every incremental build reads its
    // expiries; team writes do not touch it) while three writes commit:
    // the first's build holds the first, the next build takes in the two
    // others.
    const locker = spawn('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', pg.conninfo, '-f', '-'],
      { stdio: ['pipe', 'ignore', 'inherit'], env: { ...process.env, PGCONNECT_TIMEOUT: '5' } });
    const lockerDone = new Promise((resolve) => locker.on('close', resolve));
    locker.stdin.write('BEGIN;\nLOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE;\n');
    const q = (sql) => Number(pg.sql(sql));
    await h.waitFor(() => q(`SELECT count(*) FROM pg_locks WHERE relation = 'api_keys'::regclass
      AND mode = 'AccessExclusiveLock' AND granted`) === 1, { what: 'api_keys locked' });
    const ids = [hex(16), hex(16), hex(16)];
    const versions = [];
    try {
      for (let i = 0; i < 3; i++) {
        const r = await cp.admin('POST', '/v1/admin/teams', { name: `coalesced-${i}` },
          { traceparent: traceparent(ids[i], hex(8)) });
        assert.equal(r.status, 201, r.text);
        versions.push(cfg.version());
        if (i === 0) {
          await h.waitFor(() => q(`SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE
            '%snapshot builder' AND wait_event_type = 'Lock'`) === 1, { what: 'the builder waiting for api_keys' });
        }
      }
    } finally {
      locker.stdin.end('COMMIT;\n');
      await lockerDone;
    }
    await allAcked(['dp-a', 'dp-b'], versions[2]);
    const spansOf = async (i) => traceWhere(ids[i], (ss) => ss.some((s) => s.kind === SERVER),
      `write ${i}'s span`);
    const writes = [];
    for (let i = 0; i < 3; i++) writes.push((await spansOf(i)).find((s) => s.kind === SERVER));
    writes.forEach((w, i) => assert.equal(w.attrs['llmgw.config.version'], versions[i]));

    // The first's build: its own, no links.
    const [b1] = (await traceWhere(ids[0], (ss) => ss.some((s) => s.name === 'llmgw.snapshot.build'),
      'the first build')).filter((s) => s.name === 'llmgw.snapshot.build');
    assert.equal(b1.parentSpanId, writes[0].spanId);
    assert.equal(b1.attrs['llmgw.snapshot.version'], versions[0]);
    assert.deepEqual(b1.links, []);
    // The second: under the newest write, linked to the other; none in the middle trace.
    const s3 = await traceWhere(ids[2], (ss) => {
      const b = ss.find((s) => s.name === 'llmgw.snapshot.build');
      return b && pushesOf(ss, b).length === 2;
    }, 'the second build and its pushes');
    const b2 = s3.find((s) => s.name === 'llmgw.snapshot.build');
    assert.equal(b2.parentSpanId, writes[2].spanId);
    assert.equal(b2.attrs['llmgw.snapshot.version'], versions[2]);
    assert.equal(b2.attrs['llmgw.snapshot.base_version'], versions[0]);
    assert.deepEqual(b2.links, [{ traceId: ids[1], spanId: writes[1].spanId }]);
    assert.deepEqual(rx.trace(ids[1]).map((s) => s.name), ['POST /v1/admin/teams']);
  });

  test('the exporter counts what it sent on /metrics', T, async () => {
    const m = await h.request(cp.port, { method: 'GET', path: '/metrics' });
    assert.equal(m.status, 200);
    const exported = Number(/^llmgw_otel_spans_total\{result="exported"\} (\d+)/m.exec(m.text)?.[1]);
    assert.ok(exported >= 5, m.text);
    assert.match(m.text, /^llmgw_cp_push_spans_dropped_total 0$/m);
  });
});

describe('control plane tracing configuration', () => {
  const env = (extra) => {
    const e = { ...process.env };
    for (const k of Object.keys(e)) if (k.startsWith('OTEL_') || k.startsWith('LLMGW_')) delete e[k];
    return {
      ...e, LLMGW_DATABASE_URL: pg.conninfo, LLMGW_ADMIN_TOKEN: `llmgw-admin-${hex(12)}`,
      LLMGW_GRPC_INSECURE: '1', OTEL_EXPORTER_OTLP_ENDPOINT: rx.url, ...extra,
    };
  };

  test('--check-config says whether it would trace', T, async () => {
    for (const [extra, traces] of [[{}, true], [{ OTEL_SDK_DISABLED: 'true' }, false]]) {
      const p = new h.ManagedProcess('cp-checkconfig', h.CONTROLPLANE_BIN, ['serve', '--check-config'], { env: env(extra) });
      p.exitExpected = true;
      assert.equal((await p.waitExit(h.START_TIMEOUT_MS)).code, 0, p.describe());
      const line = JSON.parse(p.stdoutText.trim().split('\n').pop());
      assert.equal(line.msg, 'config ok');
      assert.equal(line.traces, traces, JSON.stringify(extra));
    }
  });

  for (const check of [false, true]) {
    test(`a bad OTEL_TRACES_SAMPLER stops the control plane at start${check ? ' (--check-config)' : ''}`, T, async () => {
      const p = new h.ManagedProcess('cp-badsampler', h.CONTROLPLANE_BIN,
        ['serve', '--admin-listen', '127.0.0.1:0', '--grpc-listen', '127.0.0.1:0', ...(check ? ['--check-config'] : [])],
        { env: env({ OTEL_TRACES_SAMPLER: 'sometimes' }) });
      p.exitExpected = true;
      p.nonZeroExitExpected = true;
      assert.equal((await p.waitExit(h.START_TIMEOUT_MS)).code, 2, p.describe());
      assert.match(p.stderrText, /OTEL_TRACES_SAMPLER/);
      assert.doesNotMatch(p.stdoutText, /"listening"/);
    });
  }
});
