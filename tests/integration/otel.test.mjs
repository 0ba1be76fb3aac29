// Traces (docs/observability.md, "Traces"): the data plane exports
// OpenTelemetry spans over OTLP/HTTP to a real receiver (otlp_receiver.mjs,
// decoding with the official protobuf definitions, or OTLP/JSON). Asserted:
// one trace per request under the caller's traceparent, a CLIENT span per
// attempt (a failover's with their classes) whose traceparent reached the
// provider, the GenAI attributes and the cost equal to the ledger row, the
// sampler, the queue bounded while the collector is down (requests
// unaffected), the JSON and gzip encodings, a configuration error at start,
// and no prompt or answer text anywhere.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';
import { startReceiver } from './otlp_receiver.mjs';
import { Config, masterKey } from './cpconfig.mjs';
import { makeCertSet } from './certs.mjs';

const T = { timeout: 120_000 };
const FAST = { OTEL_BSP_SCHEDULE_DELAY: '20' };

let mock;
let recv;

const hex = (n) => randomBytes(n).toString('hex');
const chat = (content, model = 'fast', extra = {}) => ({ model, messages: [{ role: 'user', content }], ...extra });

async function spansOf(r, traceId, pred, what) {
  return h.waitFor(() => {
    const s = r.trace(traceId);
    return pred(s) ? s : null;
  }, { timeoutMs: 15_000, what: `${what} (trace ${traceId}); spans so far: ${r.spans.length}` });
}

const server = (spans) => spans.find((s) => s.kind === 2);
const attempts = (spans) => spans.filter((s) => s.kind === 3).sort((a, b) => a.attrs['llmgw.attempt'] - b.attrs['llmgw.attempt']);

function metric(text, name, labels = '') {
  const re = new RegExp(`^${name}${labels.replace(/[{}]/g, '\\$&')}\\s+([0-9.e+]+)$`, 'm');
  const m = text.match(re);
  return m ? Number(m[1]) : undefined;
}

before(async () => {
  h.requireBinaries();
  mock = await h.startMock({ record: true });
  recv = await startReceiver();
});

after(async () => {
  await recv?.close();
  await h.stopAll();
});

describe('traces from the data plane', () => {
  let gw;
  before(async () => {
    gw = await h.startGateway({
      mock,
      threads: 1,
      extraRoutes: [{
        name: 'fo', capability: 'chat', strategy: 'ordered',
        entries: [{ provider: 'deadend', model: 'mock-gpt' }, { provider: 'mock', model: 'mock-gpt' }],
      }],
      env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: recv.url, OTEL_SERVICE_NAME: 'gw-under-test',
        OTEL_RESOURCE_ATTRIBUTES: 'deployment.environment=test,team=a%20b' },
    });
  });

  test('one trace per request under the caller\'s traceparent; the attempt\'s own traceparent goes upstream', T, async () => {
    const traceId = hex(16);
    const parent = hex(8);
    const nonce = h.randomId('tp');
    const r = await h.request(gw.port, {
      headers: { ...h.AUTH, traceparent: `00-${traceId}-${parent}-01`, tracestate: 'vendor=abc,other=1' },
      body: chat(`hello ${nonce}`, 'fast', { max_tokens: 50 }),
    });
    assert.equal(r.status, 200, r.text);
    const spans = await spansOf(recv, traceId, (s) => server(s) && attempts(s).length === 1, 'the request and attempt spans');
    const srv = server(spans);
    assert.equal(srv.parentSpanId, parent, 'the request span is the caller\'s child');
    assert.equal(srv.traceState, 'vendor=abc,other=1');
    assert.equal(srv.name, 'POST /v1/chat/completions');
    assert.equal(srv.attrs['http.response.status_code'], 200);
    assert.equal(srv.attrs['llmgw.request_id'], r.headers['x-request-id']);
    assert.equal(srv.attrs['llmgw.route'], 'fast');
    assert.equal(srv.attrs['llmgw.selector'], 'fast');
    assert.equal(srv.attrs['llmgw.outcome'], 'ok');
    assert.equal(srv.attrs['llmgw.attempts'], 1);
    assert.equal(srv.resource['service.name'], 'gw-under-test');
    assert.equal(srv.resource['deployment.environment'], 'test');
    assert.equal(srv.resource.team, 'a b', 'resource values are percent-decoded');
    assert.equal(srv.status.code, 0);
    // Every span of the request is in its trace, and nowhere else.
    assert.equal(recv.spans.filter((s) => s.attrs['llmgw.request_id'] === r.headers['x-request-id']).length, 1);
    const [at] = attempts(spans);
    assert.equal(at.parentSpanId, srv.spanId);
    assert.equal(at.name, 'chat mock-gpt');
    assert.ok(at.start >= srv.start && at.end <= srv.end, 'the attempt lies within the request');
    assert.equal(at.attrs['gen_ai.operation.name'], 'chat');
    assert.equal(at.attrs['gen_ai.provider.name'], 'openai');
    assert.equal(at.attrs['gen_ai.request.model'], 'mock-gpt');
    assert.equal(at.attrs['gen_ai.request.max_tokens'], 50);
    assert.equal(at.attrs['gen_ai.usage.input_tokens'], r.json.usage.prompt_tokens);
    assert.equal(at.attrs['gen_ai.usage.output_tokens'], r.json.usage.completion_tokens);
    assert.deepEqual(at.attrs['gen_ai.response.finish_reasons'], ['end']);
    assert.equal(at.attrs['llmgw.attempt'], 1);
    assert.equal(at.attrs['llmgw.retry'], false);
    assert.equal(at.attrs['llmgw.failover'], false);
    assert.equal(at.attrs['llmgw.breaker.state'], 'closed');
    assert.equal(at.attrs['llmgw.provider'], 'mock');
    assert.equal(at.attrs['llmgw.ledger.id'], `${r.headers['x-request-id']}.1`);
    assert.ok(at.attrs['llmgw.time_to_first_content_ms'] >= 0);
    assert.deepEqual(at.events.map((e) => e.name), ['llmgw.first_byte', 'llmgw.first_content', 'llmgw.bright_line']);
    // The phases that ran are the request's children.
    const plan = spans.find((s) => s.name === 'llmgw.plan');
    assert.ok(plan, spans.map((s) => s.name).join());
    assert.equal(plan.parentSpanId, srv.spanId);
    assert.equal(plan.attrs['llmgw.route'], 'fast');
    assert.ok(spans.find((s) => s.name === 'llmgw.limits'));
    assert.equal(spans.find((s) => s.name === 'llmgw.cache'), undefined, 'a route without the cache has no cache span');
    // The provider got the attempt's span as its parent, and the tracestate.
    const up = await h.recorded(mock.recordPath, nonce);
    assert.equal(up.traceparent, `00-${traceId}-${at.spanId}-01`);
    assert.equal(up.tracestate, 'vendor=abc,other=1');
  });

  test('a request without traceparent starts its own trace; an invalid one is ignored', T, async () => {
    for (const tp of [undefined, '00-00000000000000000000000000000000-0000000000000001-01', 'garbage', `00-${hex(16).toUpperCase()}-${hex(8)}-01`]) {
      const rid = h.randomId('root');
      const headers = { ...h.AUTH, 'x-request-id': rid };
      if (tp) headers.traceparent = tp;
      const r = await h.request(gw.port, { headers, body: chat('a root') });
      assert.equal(r.status, 200);
      const srv = await h.waitFor(() => recv.spans.find((s) => s.kind === 2 && s.attrs['llmgw.request_id'] === rid), { what: `the span of ${rid}` });
      assert.equal(srv.parentSpanId, '', `a root for ${tp}`);
      assert.match(srv.traceId, /^[0-9a-f]{32}$/);
      assert.notEqual(srv.traceId, '0'.repeat(32));
    }
  });

  test('a failover: a span per attempt, each with its class, the answering one marked a failover', T, async () => {
    const traceId = hex(16);
    const nonce = h.randomId('fo');
    const r = await h.request(gw.port, {
      headers: { ...h.AUTH, traceparent: `00-${traceId}-${hex(8)}-01` },
      body: chat(`fail over ${nonce}`, 'fo'),
    });
    assert.equal(r.status, 200, r.text);
    const spans = await spansOf(recv, traceId, (s) => server(s), 'the failover\'s spans');
    const srv = server(spans);
    const at = attempts(spans);
    assert.equal(at.length, srv.attrs['llmgw.attempts']);
    assert.ok(at.length >= 2, `${at.length} attempts`);
    const last = at[at.length - 1];
    for (const a of at.slice(0, -1)) {
      assert.equal(a.attrs['llmgw.provider'], 'deadend');
      assert.equal(a.attrs['error.type'], 'network', JSON.stringify(a.attrs));
      assert.equal(a.status.code, 2);
      assert.equal(a.status.message, 'network');
      assert.equal(a.parentSpanId, srv.spanId);
      assert.equal(a.events.length, 0, 'no content, no bright line');
    }
    assert.equal(last.attrs['llmgw.provider'], 'mock');
    assert.equal(last.attrs['llmgw.failover'], true);
    assert.equal(last.attrs['error.type'], undefined);
    assert.equal(srv.attrs['llmgw.failovers'], 1);
    assert.equal(new Set(at.map((a) => a.spanId)).size, at.length, 'each attempt its own span');
    const up = await h.recorded(mock.recordPath, nonce);
    assert.equal(up.traceparent, `00-${traceId}-${last.spanId}-01`, 'the answering attempt\'s span went upstream');
  });

  test('a stream: its attempt span carries the usage and the bright line', T, async () => {
    const traceId = hex(16);
    const s = await h.collectStream(gw.port, {
      headers: { ...h.AUTH, traceparent: `00-${traceId}-${hex(8)}-01` },
      body: chat('stream it', 'fast', { stream: true, stream_options: { include_usage: true } }),
    });
    assert.equal(s.status, 200);
    const spans = await spansOf(recv, traceId, (x) => server(x) && attempts(x).length === 1, 'the stream\'s spans');
    const [at] = attempts(spans);
    assert.ok(at.attrs['gen_ai.usage.output_tokens'] > 0);
    const bl = at.events.find((e) => e.name === 'llmgw.bright_line');
    assert.ok(bl && bl.attrs['llmgw.attempt'] === 1);
    assert.ok(bl.time >= at.start && bl.time <= at.end);
  });

  test('no prompt or answer text on any span, event or attribute', T, async () => {
    const canary = `CANARY-${hex(12)}`;
    const traceId = hex(16);
    const r = await h.request(gw.port, {
      headers: { ...h.AUTH, traceparent: `00-${traceId}-${hex(8)}-01` },
      body: { model: 'fast', messages: [{ role: 'system', content: `sys ${canary}` }, { role: 'user', content: `user ${canary}` }], max_tokens: 12 },
    });
    assert.equal(r.status, 200);
    const answer = r.json.choices[0].message.content;
    assert.ok(answer.length >= 10, answer);
    await spansOf(recv, traceId, (s) => server(s) && attempts(s).length === 1, 'the canary request\'s spans');
    for (const b of recv.bodies) {
      assert.equal(b.includes(canary), false, 'the prompt canary reached the collector');
      assert.equal(b.includes(answer), false, 'the answer reached the collector');
    }
    // A model field may hold anything: an unknown selector is not on the span.
    const t2 = hex(16);
    const bad = await h.request(gw.port, {
      headers: { ...h.AUTH, traceparent: `00-${t2}-${hex(8)}-01` }, body: { model: `no-such-${canary}`, messages: [{ role: 'user', content: 'x' }] },
    });
    assert.ok(bad.status >= 400 && bad.status < 500, bad.text);
    const srv2 = server(await spansOf(recv, t2, (s) => server(s), 'the refused request\'s span'));
    assert.equal(srv2.attrs['http.response.status_code'], bad.status, JSON.stringify(srv2.attrs));
    assert.equal(srv2.attrs['llmgw.selector'], undefined);
    assert.equal(srv2.attrs['llmgw.outcome'], 'no_route');
    assert.equal(srv2.attrs['llmgw.attempts'], 0);
    for (const b of recv.bodies) assert.equal(b.includes(canary), false, 'the selector canary reached the collector');
    assert.equal(JSON.stringify(recv.spans, (k, v) => (typeof v === 'bigint' ? v.toString() : v)).includes(canary), false);
    assert.deepEqual(recv.errors, []);
    assert.ok(recv.requests.every((q) => q.contentType === 'application/x-protobuf'));
  });

  test('the exporter\'s counters', T, async () => {
    const m = await h.request(gw.port, { method: 'GET', path: '/metrics' });
    assert.ok(metric(m.text, 'llmgw_otel_spans_total', '{result="exported"}') > 0, m.text.split('\n').filter((l) => l.includes('otel')).join('\n'));
    assert.equal(metric(m.text, 'llmgw_otel_spans_total', '{result="dropped"}') ?? 0, 0);
  });
});

describe('the gateway\'s own calls join the request\'s trace', () => {
  test('the guard\'s classifier call is the guard span\'s child; the judge\'s the request\'s', T, async () => {
    const r6 = await startReceiver();
    try {
      const route = (name, model, extra = {}) => ({ name, capability: 'chat', strategy: 'ordered', entries: [{ provider: 'mock', model }], ...extra });
      const snap = h.makeSnapshot({ mockV1: mock.v1 });
      snap.routes.push(
        route('classified', 'mock-gpt', { guard: { policy: 'block', rules: false, classifier: { route: 'classifier', timeout_ms: 5000 } } }),
        route('classifier', 'mock-gpt'),
        route('alljudged', 'mock-gpt', { judge: { sample_rate: 1, route: 'judge', rubric: {
          template: 'Rate it.\n{{prompt}}\n{{answer}}', scale_min: 1, scale_max: 5, pass_min: 4 } } }),
        route('judge', 'mock-gpt'),
      );
      const gw = await h.startGateway({ mock, snapshot: snap, threads: 1, env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r6.url } });
      const canary = `CANARY-${hex(10)}`;
      const t1 = hex(16);
      assert.equal((await h.request(gw.port, {
        headers: { ...h.AUTH, traceparent: `00-${t1}-${hex(8)}-01` }, body: chat(`guard me ${canary}`, 'classified'),
      })).status, 200);
      const s1 = await spansOf(r6, t1, (s) => s.filter((x) => x.attrs['llmgw.request_id']).length === 2 && s.find((x) => x.name === 'llmgw.guard'),
        'the request, its guard and the classifier call');
      const guard = s1.find((x) => x.name === 'llmgw.guard');
      const call = s1.find((x) => /\.guard$/.test(x.attrs['llmgw.request_id'] ?? ''));
      assert.ok(call, s1.map((x) => `${x.name} ${x.attrs['llmgw.request_id']}`).join('\n'));
      assert.equal(call.kind, 1, 'the gateway\'s own call is INTERNAL, not SERVER');
      assert.equal(call.parentSpanId, guard.spanId);
      assert.equal(guard.parentSpanId, server(s1).spanId);
      const t2 = hex(16);
      assert.equal((await h.request(gw.port, {
        headers: { ...h.AUTH, traceparent: `00-${t2}-${hex(8)}-01` }, body: chat(`judge me ${canary}`, 'alljudged'),
      })).status, 200);
      const s2 = await spansOf(r6, t2, (s) => s.filter((x) => x.attrs['llmgw.request_id']).length === 2, 'the request and its judge call');
      const jcall = s2.find((x) => /\.judge$/.test(x.attrs['llmgw.request_id'] ?? ''));
      assert.ok(jcall);
      assert.equal(jcall.parentSpanId, server(s2).spanId);
      assert.equal(attempts(s2).length, 2, 'the answer\'s attempt and the judge\'s');
      for (const b of r6.bodies) assert.equal(b.includes(canary), false, 'prompt text reached the collector');
    } finally {
      await r6.close();
    }
  });
});

describe('the sampler', () => {
  test('parentbased_traceidratio 0: roots are not sampled, a sampled parent is followed, an unsampled one propagated', T, async () => {
    const r2 = await startReceiver();
    try {
      const gw = await h.startGateway({
        mock, threads: 1,
        env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r2.url, OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: '0' },
      });
      const root = h.randomId('root');
      const unsampledTrace = hex(16);
      const nonce = h.randomId('unsampled');
      assert.equal((await h.request(gw.port, { headers: { ...h.AUTH, 'x-request-id': root }, body: chat('root') })).status, 200);
      assert.equal((await h.request(gw.port, {
        headers: { ...h.AUTH, traceparent: `00-${unsampledTrace}-${hex(8)}-00` }, body: chat(`no ${nonce}`),
      })).status, 200);
      const sampledTrace = hex(16);
      assert.equal((await h.request(gw.port, {
        headers: { ...h.AUTH, traceparent: `00-${sampledTrace}-${hex(8)}-01` }, body: chat('yes'),
      })).status, 200);
      // One worker, one queue: the sampled request's spans come after any
      // the earlier requests would have had.
      await spansOf(r2, sampledTrace, (s) => server(s), 'the sampled request');
      assert.equal(r2.trace(unsampledTrace).length, 0);
      assert.equal(r2.spans.filter((s) => s.attrs['llmgw.request_id'] === root).length, 0);
      assert.ok(r2.spans.every((s) => s.traceId === sampledTrace));
      // Not recorded, still propagated: the provider sees the caller's trace, unsampled.
      const up = await h.recorded(mock.recordPath, nonce);
      assert.match(up.traceparent, new RegExp(`^00-${unsampledTrace}-[0-9a-f]{16}-00$`));
    } finally {
      await r2.close();
    }
  });

  test('traceidratio 0.5 decides by the trace id (its last 8 bytes), whatever the parent says', T, async () => {
    const r3 = await startReceiver();
    try {
      const gw = await h.startGateway({
        mock, threads: 1,
        env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r3.url, OTEL_TRACES_SAMPLER: 'traceidratio', OTEL_TRACES_SAMPLER_ARG: '0.5' },
      });
      const low = `${hex(8)}00000000000000ff`; // below 2^62: sampled
      const high = `${hex(8)}7fffffffffffff00`; // above: not
      for (const t of [high, low]) {
        assert.equal((await h.request(gw.port, {
          headers: { ...h.AUTH, traceparent: `00-${t}-${hex(8)}-01` }, body: chat('ratio'),
        })).status, 200);
      }
      await spansOf(r3, low, (s) => server(s), 'the low trace id');
      assert.equal(r3.trace(high).length, 0);
    } finally {
      await r3.close();
    }
  });
});

describe('the exporter', () => {
  test('OTLP/JSON with gzip decodes to the same spans', T, async () => {
    const r4 = await startReceiver();
    try {
      const gw = await h.startGateway({
        mock, threads: 1,
        env: { ...FAST, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${r4.url}/v1/traces`, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
          OTEL_EXPORTER_OTLP_COMPRESSION: 'gzip', OTEL_EXPORTER_OTLP_HEADERS: 'x-tenant=t1,authorization=Bearer%20abc' },
      });
      const traceId = hex(16);
      const parent = hex(8);
      assert.equal((await h.request(gw.port, {
        headers: { ...h.AUTH, traceparent: `00-${traceId}-${parent}-01` }, body: chat('json please', 'fast', { max_tokens: 7 }),
      })).status, 200);
      const spans = await spansOf(r4, traceId, (s) => server(s) && attempts(s).length === 1, 'the JSON spans');
      const [at] = attempts(spans);
      assert.equal(server(spans).parentSpanId, parent);
      assert.equal(at.attrs['gen_ai.request.max_tokens'], 7);
      // The canonical stop reason (docs/observability.md): the cap was reached.
      assert.deepEqual(at.attrs['gen_ai.response.finish_reasons'], ['max_tokens']);
      assert.ok(typeof at.attrs['llmgw.time_to_first_content_ms'] === 'number');
      const q = r4.requests.find((x) => x.path === '/v1/traces');
      assert.equal(q.contentType, 'application/json');
      assert.equal(q.encoding, 'gzip');
      assert.equal(q.headers['x-tenant'], 't1');
      assert.equal(q.headers.authorization, 'Bearer abc');
      assert.deepEqual(r4.errors, []);
    } finally {
      await r4.close();
    }
  });

  test('a collector that is down: requests unaffected, the queue bounded, spans dropped and counted', T, async () => {
    const dead = await h.deadPort();
    const gw = await h.startGateway({
      mock, threads: 2,
      env: { OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${dead}`, OTEL_BSP_MAX_QUEUE_SIZE: '16',
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '8', OTEL_BSP_SCHEDULE_DELAY: '10', OTEL_EXPORTER_OTLP_TIMEOUT: '300',
        OTEL_BSP_EXPORT_TIMEOUT: '600' },
    });
    const N = 120;
    let next = 0;
    const statuses = [];
    await Promise.all(Array.from({ length: 8 }, async () => {
      while (next < N) {
        next++;
        const r = await h.request(gw.port, { headers: h.AUTH, body: chat('while the collector is down') });
        statuses.push(r.status);
      }
    }));
    assert.equal(statuses.length, N);
    assert.ok(statuses.every((s) => s === 200), JSON.stringify(statuses));
    const m = await h.request(gw.port, { method: 'GET', path: '/metrics' });
    const dropped = metric(m.text, 'llmgw_otel_spans_total', '{result="dropped"}');
    const queued = metric(m.text, 'llmgw_otel_queue_spans');
    assert.ok(dropped > 0, `dropped ${dropped}`);
    assert.ok(queued <= 16, `queued ${queued}`);
    assert.equal(metric(m.text, 'llmgw_otel_spans_total', '{result="exported"}') ?? 0, 0);
    // It stops within its bound (stopAll checks the exit).
    const t0 = Date.now();
    await gw.proc.stop();
    assert.ok(Date.now() - t0 < 8000, `stopped in ${Date.now() - t0} ms`);
  });

  test('https to the collector: its CA from OTEL_EXPORTER_OTLP_CERTIFICATE, a client certificate for mutual TLS', T, async () => {
    const dir = h.makeTmpDir();
    const c = makeCertSet(dir);
    const pem = (f) => fs.readFileSync(f, 'utf8');
    const r7 = await startReceiver({ tls: { key: pem(c.srvKey), cert: pem(c.srvCert), ca: pem(c.ca), requestCert: true } });
    try {
      const gw = await h.startGateway({
        mock, threads: 1,
        env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r7.url, OTEL_EXPORTER_OTLP_CERTIFICATE: c.ca,
          OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: c.cliCert, OTEL_EXPORTER_OTLP_CLIENT_KEY: c.cliKey },
      });
      const traceId = hex(16);
      assert.equal((await h.request(gw.port, { headers: { ...h.AUTH, traceparent: `00-${traceId}-${hex(8)}-01` }, body: chat('over tls') })).status, 200);
      await spansOf(r7, traceId, (s) => server(s), 'the spans over mutual TLS');
      assert.equal(r7.requests[0].peerCN, 'dp-tls', 'the data plane presented its client certificate');
      // Without the CA the collector's certificate is not trusted: nothing is
      // sent, the spans count as failed, the requests do not notice.
      const gw2 = await h.startGateway({
        mock, threads: 1,
        env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r7.url, OTEL_EXPORTER_OTLP_TIMEOUT: '2000', OTEL_BSP_EXPORT_TIMEOUT: '2000' },
      });
      const before = r7.spans.length;
      assert.equal((await h.request(gw2.port, { headers: h.AUTH, body: chat('untrusted') })).status, 200);
      const failed = await h.waitFor(async () => {
        const m = await h.request(gw2.port, { method: 'GET', path: '/metrics' });
        return metric(m.text, 'llmgw_otel_spans_total', '{result="failed"}') > 0 ? m : null;
      }, { timeoutMs: 15_000, what: 'the untrusted export counted as failed' });
      assert.ok(failed);
      assert.equal(r7.spans.length, before);
      assert.ok(r7.tlsErrors > 0);
    } finally {
      await r7.close();
    }
  });

  test('a wrong OTEL_* value stops the start, naming the variable', T, async () => {
    for (const [k, v] of [['OTEL_TRACES_SAMPLER', 'sometimes'], ['OTEL_EXPORTER_OTLP_PROTOCOL', 'grpc'],
      ['OTEL_EXPORTER_OTLP_ENDPOINT', 'ftp://x'], ['OTEL_TRACES_SAMPLER_ARG', '2']]) {
      const env = { ...h.withoutOtel(process.env), OTEL_EXPORTER_OTLP_ENDPOINT: recv.url, OTEL_TRACES_SAMPLER: 'traceidratio', [k]: v };
      const snap = path.join(h.makeTmpDir(), 'snap.json');
      const r = spawnSync(h.DATAPLANE_BIN, ['--check-config', '--snapshot', snap], { env, encoding: 'utf8', timeout: 20_000 });
      assert.equal(r.status, 2, `${k}=${v}: ${r.stdout}${r.stderr}`);
      assert.match(r.stderr, new RegExp(k), `${k}=${v}: ${r.stderr}`);
    }
  });
});

describe('the cost on the attempt span is the ledger row\'s', () => {
  const KEY = masterKey();
  let pg;
  let cp;
  let cfg;
  let gw;
  let apiKey;
  let r5;

  before(async () => {
    h.requireBinaries([h.CONTROLPLANE_BIN, h.DATAPLANE_BIN, h.MOCK_BIN]);
    r5 = await startReceiver();
    pg = await h.startPostgres();
    const grpcPort = await h.deadPort();
    cp = await h.startControlPlane({ pg, env: { LLMGW_MASTER_KEY: KEY.hex }, args: ['--grpc-listen', `127.0.0.1:${grpcPort}`] });
    cfg = new Config(cp, pg, KEY);
    await cfg.provider({ name: 'alpha', driver: 'openai', base_url: mock.v1 });
    await cfg.route('priced', [{ provider: 'alpha', model: 'mock-gpt' }]);
    await cfg.api('POST', '/v1/admin/prices', { provider: 'alpha', model: 'mock-gpt', input_price: 3_000_000, output_price: 15_000_000 }, 201);
    apiKey = await cfg.apiKey('key_otel');
    const v = cfg.version();
    gw = await h.startGatewayCP({
      controlPlane: `127.0.0.1:${grpcPort}`, replicaId: 'dp-otel',
      env: { ...FAST, OTEL_EXPORTER_OTLP_ENDPOINT: r5.url },
    });
    await h.waitFor(async () => (await h.request(gw.port, { method: 'GET', path: '/readyz' })).json?.snapshot_version === v,
      { what: `serving version ${v}` });
  });

  after(async () => {
    await r5?.close();
  });

  test('picodollars, currency and exactness match the row; key, team and ledger id on the request span', T, async () => {
    for (const stream of [false, true]) {
      const traceId = hex(16);
      const headers = { authorization: `Bearer ${apiKey}`, traceparent: `00-${traceId}-${hex(8)}-01` };
      const body = chat('price me', 'priced', stream ? { stream: true, stream_options: { include_usage: true } } : {});
      const r = stream ? await h.collectStream(gw.port, { headers, body }) : await h.request(gw.port, { headers, body });
      assert.equal(r.status, 200);
      const spans = await spansOf(r5, traceId, (s) => server(s) && attempts(s).length === 1, 'the priced request');
      const [at] = attempts(spans);
      const id = at.attrs['llmgw.ledger.id'];
      await h.waitFor(() => Number(pg.sql(`SELECT count(*) FROM ledger WHERE attempt_id = '${id}'`)) === 1, { what: `the row of ${id}` });
      const row = JSON.parse(pg.sql(`SELECT json_build_object('cost', cost_picodollars::text, 'currency', currency,
        'input', input_tokens, 'output', output_tokens, 'estimated', usage_estimated) FROM ledger WHERE attempt_id = '${id}'`));
      assert.equal(BigInt(at.attrs['llmgw.cost.picodollars']).toString(), row.cost, `stream ${stream}`);
      assert.ok(BigInt(row.cost) > 0n);
      assert.equal(at.attrs['llmgw.cost.currency'], row.currency);
      assert.equal(at.attrs['llmgw.cost.kind'], row.estimated ? 'estimated' : 'exact');
      assert.equal(at.attrs['gen_ai.usage.input_tokens'], row.input);
      assert.equal(at.attrs['gen_ai.usage.output_tokens'], row.output);
      const srv = server(spans);
      assert.equal(srv.attrs['llmgw.key.id'], 'key_otel');
      assert.equal(srv.attrs['llmgw.ledger.id'], id);
      assert.equal(BigInt(srv.attrs['llmgw.cost.picodollars']).toString(), row.cost);
      assert.ok(srv.attrs['llmgw.snapshot.version'] > 0);
      assert.equal(srv.resource['service.instance.id'], 'dp-otel');
    }
  });
});
