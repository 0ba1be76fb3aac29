// TLS on the listeners (docs/security.md): the data plane's API port
// (--tls-cert/--tls-key) and the control plane's admin port
// (--admin-tls-cert/--admin-tls-key), both through bufferevent_openssl:
//  - the official OpenAI SDK, over TLS, gets a whole answer and a stream;
//  - plain HTTP to a TLS port gets no HTTP answer; a client offering only
//    h2 in ALPN is refused in the handshake; TLS below 1.2 is refused;
//  - SIGHUP reads the certificate again: new connections get the new one
//    while a connection made before keeps working; a reload from broken
//    files keeps the current certificate and says so;
//  - the admin API answers over TLS, with the same reload.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import tls from 'node:tls';
import { Readable } from 'node:stream';
import OpenAI from 'openai';
import * as h from './harness.mjs';
import { makeCertSet } from './certs.mjs';

const T = { timeout: 60_000 };

let mock;
let certs;
let certs2; // a second CA and server certificate, for the reload
let dir;

before(async () => {
  h.requireBinaries([h.DATAPLANE_BIN, h.MOCK_BIN, h.CONTROLPLANE_BIN]);
  mock = await h.startMock();
  certs = makeCertSet(h.makeTmpDir());
  certs2 = makeCertSet(h.makeTmpDir());
  dir = h.makeTmpDir();
});

after(async () => {
  await h.stopAll();
});

/** A fetch for the SDK that trusts ca (node's https, as a web Response). */
function fetchTrusting(ca) {
  return (url, init = {}) => new Promise((resolve, reject) => {
    const req = https.request(new URL(url), {
      method: init.method ?? 'GET', headers: Object.fromEntries(new Headers(init.headers ?? {})), ca: fs.readFileSync(ca),
    }, (res) => {
      const headers = new Headers();
      for (const [k, v] of Object.entries(res.headers)) headers.set(k, Array.isArray(v) ? v.join(', ') : String(v));
      resolve(new Response(Readable.toWeb(res), { status: res.statusCode, headers }));
    });
    req.on('error', reject);
    init.signal?.addEventListener('abort', () => req.destroy(new Error('aborted')));
    req.end(init.body ?? undefined);
  });
}

/** The certificate a fresh TLS connection to port is shown (its PEM-less
 * fingerprint), trusting ca; rejects when the handshake fails. */
function peerCert(port, ca, extra = {}) {
  return new Promise((resolve, reject) => {
    const s = tls.connect({ host: '127.0.0.1', port, ca: fs.readFileSync(ca), ...extra }, () => {
      const c = s.getPeerCertificate();
      const alpn = s.alpnProtocol;
      s.end();
      resolve({ fingerprint: c.fingerprint256, alpn });
    });
    s.on('error', reject);
  });
}

/** The process's log lines (JSON, on stderr) with msg. */
const logged = (proc, msg) => proc.stderrLines.map(h.tryParseJson).filter((j) => j?.msg === msg);

const fingerprintOf = (pemFile) => new X509Certificate(fs.readFileSync(pemFile)).fingerprint256;

/** Plain HTTP to port: what comes back before the server closes (maybe nothing). */
function plainHttp(port) {
  return new Promise((resolve) => {
    const chunks = [];
    const s = new net.Socket();
    s.connect(port, '127.0.0.1', () => s.write('GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.on('data', (d) => chunks.push(d));
    s.on('close', () => resolve(Buffer.concat(chunks).toString('latin1')));
    s.on('error', () => {});
    s.setTimeout(5000, () => s.destroy());
  });
}

describe('the data plane over TLS', () => {
  let g;
  let cert;
  let key;
  before(async () => {
    cert = path.join(dir, 'dp.pem');
    key = path.join(dir, 'dp.key');
    fs.copyFileSync(certs.srvCert, cert);
    fs.copyFileSync(certs.srvKey, key);
    g = await h.startGateway({ mock, args: ['--tls-cert', cert, '--tls-key', key] });
    assert.equal(g.proc.stdoutJson().find((j) => j.msg === 'listening')?.tls, true);
  });

  test('the official SDK gets a whole answer and a stream over TLS', T, async () => {
    const client = new OpenAI({ apiKey: h.DEMO_API_KEY, baseURL: `https://127.0.0.1:${g.port}/v1`, fetch: fetchTrusting(certs.ca), maxRetries: 0 });
    const r = await client.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'hi over tls' }] });
    assert.ok(r.choices[0].message.content.length > 0);
    assert.ok(r.usage.total_tokens > 0);
    const stream = await client.chat.completions.create({ model: 'fast', messages: [{ role: 'user', content: 'stream over tls' }], stream: true, stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    for await (const ev of stream) {
      text += ev.choices[0]?.delta?.content ?? '';
      if (ev.usage) usage = ev.usage;
    }
    assert.ok(text.length > 0);
    assert.ok(usage?.completion_tokens > 0);
  });

  test('plain HTTP, h2-only ALPN and TLS 1.1 get no answer', T, async () => {
    const got = await plainHttp(g.port);
    assert.ok(!got.startsWith('HTTP/1.1 200'), `plain HTTP answered: ${JSON.stringify(got.slice(0, 80))}`);
    const ok = await peerCert(g.port, certs.ca, { ALPNProtocols: ['h2', 'http/1.1'] });
    assert.equal(ok.alpn, 'http/1.1');
    await assert.rejects(peerCert(g.port, certs.ca, { ALPNProtocols: ['h2'] }));
    await assert.rejects(peerCert(g.port, certs.ca, { minVersion: 'TLSv1', maxVersion: 'TLSv1.1' }));
    // The server still serves after all that.
    assert.equal((await peerCert(g.port, certs.ca)).fingerprint, fingerprintOf(certs.srvCert));
  });

  test('SIGHUP: new connections get the renewed certificate, an open one keeps working; broken files keep the current one', T, async () => {
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: [fs.readFileSync(certs.ca), fs.readFileSync(certs2.ca)] });
    const get = () => new Promise((resolve, reject) => {
      https.get({ host: '127.0.0.1', port: g.port, path: '/healthz', agent }, (res) => {
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode, socket: res.socket }));
      }).on('error', reject);
    });
    const first = await get();
    assert.equal(first.status, 200);
    fs.copyFileSync(certs2.srvCert, cert);
    fs.copyFileSync(certs2.srvKey, key);
    process.kill(g.proc.pid, 'SIGHUP');
    await h.waitFor(() => logged(g.proc, 'TLS certificate reloaded').length > 0, { what: 'the reload' });
    assert.equal((await peerCert(g.port, certs2.ca)).fingerprint, fingerprintOf(certs2.srvCert));
    await assert.rejects(peerCert(g.port, certs.ca), 'the old CA no longer verifies new connections');
    const again = await get();
    assert.equal(again.status, 200);
    assert.equal(again.socket, first.socket, 'the same keep-alive connection, made before the reload');
    agent.destroy();
    // A key that does not match the certificate: the reload is refused.
    fs.copyFileSync(certs.srvKey, key);
    process.kill(g.proc.pid, 'SIGHUP');
    await h.waitFor(() => logged(g.proc, 'TLS reload failed; keeping the current certificate').length > 0, { what: 'the failed reload' });
    assert.match(JSON.stringify(logged(g.proc, 'TLS reload failed; keeping the current certificate')), /does not match the certificate/);
    assert.equal((await peerCert(g.port, certs2.ca)).fingerprint, fingerprintOf(certs2.srvCert));
  });

  test('a data plane whose certificate and key do not match does not start', T, async () => {
    const p = new h.ManagedProcess('dataplane-badtls', h.DATAPLANE_BIN, ['--snapshot', g.snapshotPath, '--listen', '127.0.0.1:0',
      '--tls-cert', certs.srvCert, '--tls-key', certs.cliKey], { env: { ...process.env } });
    p.exitExpected = true;
    p.nonZeroExitExpected = true;
    const e = await p.waitExit(h.START_TIMEOUT_MS);
    assert.equal(e.code, 1, p.describe());
    assert.match(p.stdoutText + p.stderrText, /does not match the certificate/);
  });
});

describe('the admin port over TLS', () => {
  test('the admin API answers over TLS only, and SIGHUP reloads its certificate', T, async () => {
    const pg = await h.startPostgres();
    const cert = path.join(dir, 'admin.pem');
    const key = path.join(dir, 'admin.key');
    fs.copyFileSync(certs.srvCert, cert);
    fs.copyFileSync(certs.srvKey, key);
    const cp = await h.startControlPlane({ pg, args: ['--admin-tls-cert', cert, '--admin-tls-key', key] });
    assert.equal(cp.listening.admin_tls, true);
    const admin = (p) => new Promise((resolve, reject) => {
      https.get({ host: '127.0.0.1', port: cp.port, path: p, ca: fs.readFileSync(certs.ca), headers: { authorization: `Bearer ${cp.token}` } }, (res) => {
        let t = '';
        res.on('data', (d) => { t += d; });
        res.on('end', () => resolve({ status: res.statusCode, json: JSON.parse(t) }));
      }).on('error', reject);
    });
    assert.equal((await admin('/v1/admin/providers')).status, 200);
    assert.ok(!(await plainHttp(cp.port)).startsWith('HTTP/1.1 200'));
    fs.copyFileSync(certs2.srvCert, cert);
    fs.copyFileSync(certs2.srvKey, key);
    process.kill(cp.proc.pid, 'SIGHUP');
    await h.waitFor(() => logged(cp.proc, 'TLS certificate reloaded').length > 0, { what: 'the admin reload' });
    assert.equal((await peerCert(cp.port, certs2.ca)).fingerprint, fingerprintOf(certs2.srvCert));
    assert.ok(cp.proc.running, 'SIGHUP does not stop the control plane');
    await cp.proc.stop();
    assert.equal(cp.proc.exitInfo.code, 0);
  });
});
