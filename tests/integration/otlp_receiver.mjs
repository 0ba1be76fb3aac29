// A real OTLP/HTTP trace receiver for the tests: POST /v1/traces with
// application/x-protobuf (decoded by the official OpenTelemetry protobuf
// definitions, @opentelemetry/otlp-transformer's generated root) or
// application/json (OTLP/JSON), gzip or not. Every span is kept, flattened:
//
//   { traceId, spanId, parentSpanId (hex, '' for a root), traceState, name,
//     kind, start, end (BigInt ns), attrs: { key: string | number | bigint |
//     boolean | array }, events: [{ name, time, attrs }], links: [{ traceId,
//     spanId }], status: { code, message }, resource: { key: value } }
//
// The receiver can answer with a status of the test's choosing (to see the
// exporter retry or give up), and counts requests and their content types.
// It listens on 127.0.0.1 only, port 0, and is closed by close().

import http from 'node:http';
import https from 'node:https';
import zlib from 'node:zlib';
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root.js');
const ExportTraceServiceRequest = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
const ExportTraceServiceResponse = root.opentelemetry.proto.collector.trace.v1.ExportTraceServiceResponse;

const hex = (v) => (v == null ? '' : Buffer.from(v).toString('hex'));
const big = (v) => (v == null ? 0n : BigInt(v.toString()));

function anyValue(v) {
  if (!v) return undefined;
  if (v.stringValue != null) return v.stringValue;
  if (v.boolValue != null) return v.boolValue;
  if (v.intValue != null) {
    const b = BigInt(v.intValue.toString());
    return b >= BigInt(Number.MIN_SAFE_INTEGER) && b <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(b) : b;
  }
  if (v.doubleValue != null) return Number(v.doubleValue);
  if (v.arrayValue) return (v.arrayValue.values || []).map(anyValue);
  if (v.kvlistValue) return attrs(v.kvlistValue.values);
  if (v.bytesValue != null) return Buffer.from(v.bytesValue);
  return undefined;
}

function attrs(list) {
  const o = {};
  for (const kv of list || []) o[kv.key] = anyValue(kv.value);
  return o;
}

// OTLP/JSON: ids are hex strings already; 64-bit numbers may be strings.
function fromJson(doc) {
  const idHex = (s) => s || '';
  const conv = (list) => (list || []).map((kv) => ({ key: kv.key, value: convAny(kv.value) }));
  function convAny(v) {
    if (!v) return v;
    if (v.arrayValue) return { arrayValue: { values: (v.arrayValue.values || []).map(convAny) } };
    return v;
  }
  const spans = [];
  for (const rs of doc.resourceSpans || []) {
    const resource = attrs(conv(rs.resource?.attributes));
    for (const ss of rs.scopeSpans || []) {
      for (const s of ss.spans || []) {
        spans.push({
          traceId: idHex(s.traceId), spanId: idHex(s.spanId), parentSpanId: idHex(s.parentSpanId),
          traceState: s.traceState || '', name: s.name, kind: s.kind,
          start: big(s.startTimeUnixNano), end: big(s.endTimeUnixNano),
          attrs: attrs(conv(s.attributes)),
          events: (s.events || []).map((e) => ({ name: e.name, time: big(e.timeUnixNano), attrs: attrs(conv(e.attributes)) })),
          links: (s.links || []).map((l) => ({ traceId: idHex(l.traceId), spanId: idHex(l.spanId) })),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
          resource, scope: ss.scope?.name ?? '',
        });
      }
    }
  }
  return spans;
}

function fromProtobuf(buf) {
  const req = ExportTraceServiceRequest.decode(buf);
  const spans = [];
  for (const rs of req.resourceSpans || []) {
    const resource = attrs(rs.resource?.attributes);
    for (const ss of rs.scopeSpans || []) {
      for (const s of ss.spans || []) {
        spans.push({
          traceId: hex(s.traceId), spanId: hex(s.spanId),
          parentSpanId: s.parentSpanId && s.parentSpanId.length ? hex(s.parentSpanId) : '',
          traceState: s.traceState || '', name: s.name, kind: s.kind,
          start: big(s.startTimeUnixNano), end: big(s.endTimeUnixNano),
          attrs: attrs(s.attributes),
          events: (s.events || []).map((e) => ({ name: e.name, time: big(e.timeUnixNano), attrs: attrs(e.attributes) })),
          links: (s.links || []).map((l) => ({ traceId: hex(l.traceId), spanId: hex(l.spanId) })),
          status: { code: s.status?.code ?? 0, message: s.status?.message ?? '' },
          resource, scope: ss.scope?.name ?? '',
        });
      }
    }
  }
  return spans;
}

export class OtlpReceiver {
  constructor() {
    this.spans = [];
    this.requests = [];      // { contentType, encoding, bytes, status, headers }
    this.bodies = [];        // every raw body, decompressed (for canary scans)
    this.answer = 200;       // the status to answer with
    this.errors = [];        // decode failures (a test asserts none)
  }

  /** tls: {key, cert, ca?, requestCert?} (PEM text): an https receiver;
   * with requestCert, a client certificate is required and verified. */
  async start({ tls } = {}) {
    const handler = (req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        let body = Buffer.concat(chunks);
        const rec = {
          path: req.url, contentType: req.headers['content-type'] || '',
          peerCN: req.socket.getPeerCertificate?.()?.subject?.CN ?? '',
          encoding: req.headers['content-encoding'] || '', bytes: body.length,
          headers: req.headers, status: this.answer,
        };
        this.requests.push(rec);
        if (req.method !== 'POST' || req.url !== '/v1/traces') {
          res.writeHead(404).end();
          return;
        }
        if (this.answer !== 200) {
          res.writeHead(this.answer, { 'content-type': 'application/json' }).end('{}');
          return;
        }
        try {
          if (rec.encoding === 'gzip') body = zlib.gunzipSync(body);
          this.bodies.push(body);
          const json = rec.contentType.startsWith('application/json');
          this.spans.push(...(json ? fromJson(JSON.parse(body.toString('utf8'))) : fromProtobuf(body)));
        } catch (e) {
          this.errors.push(String(e && e.stack || e));
          res.writeHead(400).end();
          return;
        }
        if (rec.contentType.startsWith('application/json')) {
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } else {
          const out = ExportTraceServiceResponse.encode({}).finish();
          res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(Buffer.from(out));
        }
      });
    };
    this.server = tls
      ? https.createServer({ key: tls.key, cert: tls.cert, ca: tls.ca, requestCert: !!tls.requestCert, rejectUnauthorized: !!tls.requestCert }, handler)
      : http.createServer(handler);
    this.tlsErrors = 0;
    this.server.on('tlsClientError', () => { this.tlsErrors++; });
    await new Promise((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    this.port = this.server.address().port;
    this.url = `${tls ? 'https' : 'http'}://127.0.0.1:${this.port}`;
    return this;
  }

  /** Spans of one trace. */
  trace(traceId) {
    return this.spans.filter((s) => s.traceId === traceId);
  }

  async close() {
    if (!this.server) return;
    this.server.closeAllConnections?.();
    await new Promise((resolve) => this.server.close(resolve));
    this.server = null;
  }
}

export async function startReceiver(opts) {
  return new OtlpReceiver().start(opts);
}
