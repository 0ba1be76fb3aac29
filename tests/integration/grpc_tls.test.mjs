// The control-plane channel over TLS and mutual TLS: the data plane
// (--control-plane-ca, --control-plane-cert, --control-plane-key) against
// tests/cpfake/llmgw-snapshot-server (--tls-cert, --tls-key, --tls-client-ca),
// which serves through the same cp_grpc module as llmgw-controlplane.
// Certificates are made here with the openssl CLI, into a temp dir.
// Contract: docs/dataplane.md ("TLS and mutual TLS to the control plane").
//
// Each refusal must happen for the right reason: the data plane logs
// "control plane: cannot connect" with gRPC's last connection error, and the
// server side's handshake error (logged by gRPC) names what it rejected.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.mjs';
import * as certs from './certs.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [{ role: 'user', content: 'hello over tls' }];
const CANNOT_CONNECT = 'control plane: cannot connect';

let dir;
let mock;
let tlsSrv; // TLS: server certificate only
let mtlsSrv; // mutual TLS: client certificates required, from ca
const pem = (name) => path.join(dir, name);

const makeCa = (name) => certs.makeCa(dir, name);
const makeLeaf = (name, ca, ext) => certs.makeLeaf(dir, name, ca, ext);

function doc(version) {
  return {
    version,
    providers: [{ name: 'open', driver: 'openai', base_url: mock.v1 }],
    routes: [{ name: 'fast', entries: [{ provider: 'open', model: 'mock-gpt' }] }],
    keys: [{ id: 'key_demo', hash: h.DEMO_KEY_HASH, status: 'active', team: 'demo' }],
  };
}

const readyz = (gw) => h.request(gw.port, { method: 'GET', path: '/readyz' });
const chat = (gw) => h.request(gw.port, { body: { model: 'fast', messages: MESSAGES }, headers: { ...h.AUTH } });

function tlsArgs({ ca, cert, key } = {}) {
  const a = [];
  if (ca) a.push('--control-plane-ca', pem(`${ca}.crt`));
  if (cert) a.push('--control-plane-cert', pem(`${cert}.crt`));
  if (key) a.push('--control-plane-key', pem(`${key}.key`));
  return a;
}

/** A data plane that must get the snapshot and serve a chat through the mock. */
async function expectServes(srv, replicaId, tls) {
  const gw = await h.startGatewayCP({ controlPlane: srv.target, replicaId, args: tlsArgs(tls) });
  await h.waitFor(async () => (await readyz(gw)).status === 200, { timeoutMs: 15_000, what: `${replicaId}: /readyz 200` });
  assert.deepEqual((await readyz(gw)).json, { status: 'ready', snapshot_version: 1, source: 'control_plane', auth: 'keys', keys: 1 });
  const c = await chat(gw);
  assert.equal(c.status, 200, c.text);
  assert.equal(c.headers['x-llmgw-provider'], 'open');
  await srv.waitAck((a) => a.replica_id === replicaId && a.version === 1, `${replicaId} acks version 1`);
  assert.ok(!gw.proc.stderrText.includes(CANNOT_CONNECT), gw.proc.stderrText);
  assert.ok(!gw.proc.stderrText.includes('plaintext gRPC'), 'no plaintext warning with a CA');
  await gw.proc.stop();
}

/**
 * A data plane that must never get a snapshot: it logs why it cannot
 * connect (detail matching dpReason), the server's gRPC logs serverReason
 * (when given: a client that rejects the server leaves no trace there),
 * /readyz stays 503 and the server never hears from it.
 */
async function expectRefused(srv, replicaId, tls, { dpReason, serverReason }) {
  const serverErrFrom = srv.proc.stderrText.length;
  const gw = await h.startGatewayCP({ controlPlane: srv.target, replicaId, args: tlsArgs(tls) });
  const line = await h.waitFor(() => gw.proc.stderrLines.find((l) => l.includes(CANNOT_CONNECT)),
    { timeoutMs: 15_000, what: `${replicaId}: the "${CANNOT_CONNECT}" log line\n${gw.proc.stderrText}` });
  const j = JSON.parse(line);
  assert.equal(j.level, 'warn');
  assert.equal(j.status, 'UNAVAILABLE');
  assert.equal(j.control_plane, srv.target);
  assert.match(j.detail, dpReason, line);
  if (serverReason) {
    await h.waitFor(() => serverReason.test(srv.proc.stderrText.slice(serverErrFrom)),
      { timeoutMs: 10_000, what: `the server to log ${serverReason}\n${srv.proc.stderrText.slice(serverErrFrom)}` });
  }
  // Still nothing after more reconnect attempts.
  await h.sleep(1500);
  const r = await readyz(gw);
  assert.equal(r.status, 503, r.text);
  assert.equal(r.json.snapshot_version ?? 0, 0, r.text);
  assert.equal((await chat(gw)).status, 503);
  assert.ok(!gw.proc.stderrText.includes('snapshot loaded'), gw.proc.stderrText);
  assert.ok(!srv.acks().some((a) => a.replica_id === replicaId), 'the server never got an ack from it');
  // Rate-limited: at most one line per 5 s (plus the first).
  const n = gw.proc.stderrLines.filter((l) => l.includes(CANNOT_CONNECT)).length;
  assert.ok(n <= 2, `${n} "${CANNOT_CONNECT}" lines in a few seconds`);
  await gw.proc.stop();
  return gw;
}

before(async () => {
  h.requireBinaries([h.MOCK_BIN, h.DATAPLANE_BIN, h.SNAPSHOT_SERVER_BIN]);
  dir = h.makeTmpDir();
  makeCa('ca');
  makeCa('otherca'); // trusted by nobody
  makeLeaf('server', 'ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  makeLeaf('client', 'ca', 'extendedKeyUsage=clientAuth\n');
  makeLeaf('stranger', 'otherca', 'extendedKeyUsage=clientAuth\n');
  mock = await h.startMock();
  const serverTls = ['--tls-cert', pem('server.crt'), '--tls-key', pem('server.key')];
  tlsSrv = await h.startSnapshotServer({ snapshot: doc(1), args: serverTls });
  assert.equal(tlsSrv.proc.stdoutJson().find((l) => l.msg === 'listening').tls, 'server');
  mtlsSrv = await h.startSnapshotServer({
    snapshot: doc(1), args: [...serverTls, '--tls-client-ca', pem('ca.crt')],
  });
  assert.equal(mtlsSrv.proc.stdoutJson().find((l) => l.msg === 'listening').tls, 'mutual');
});

after(async () => {
  await h.stopAll();
});

describe('control plane over TLS (server certificate)', () => {
  test('a data plane trusting the CA gets the snapshot and serves', T, async () => {
    await expectServes(tlsSrv, 'dp-tls', { ca: 'ca' });
  });

  test('a plaintext data plane (no CA) gets nothing, and says why', T, async () => {
    const gw = await expectRefused(tlsSrv, 'dp-plain', {}, {
      dpReason: /Socket closed|Connection reset|handshake/i,
      serverReason: /Handshake failed.*wrong version number/,
    });
    assert.ok(gw.proc.stderrText.includes('plaintext gRPC'), 'the plaintext warning');
  });

  test('a data plane trusting another CA gets nothing: certificate verify failed', T, async () => {
    await expectRefused(tlsSrv, 'dp-wrongca', { ca: 'otherca' }, {
      // The data plane rejects the server's certificate; the server logs nothing.
      dpReason: /Ssl handshake failed.*certificate verify failed/,
    });
  });
});

describe('control plane over mutual TLS', () => {
  test('a data plane with a client certificate from the CA gets the snapshot and serves', T, async () => {
    await expectServes(mtlsSrv, 'dp-mtls', { ca: 'ca', cert: 'client', key: 'client' });
  });

  test('without a client certificate: refused (peer did not return a certificate)', T, async () => {
    await expectRefused(mtlsSrv, 'dp-nocert', { ca: 'ca' }, {
      dpReason: /Socket closed|Connection reset|handshake/i,
      serverReason: /peer did not return a certificate/,
    });
  });

  test('with a client certificate from an untrusted CA: refused (certificate verify failed)', T, async () => {
    await expectRefused(mtlsSrv, 'dp-stranger', { ca: 'ca', cert: 'stranger', key: 'stranger' }, {
      dpReason: /Socket closed|Connection reset|handshake/i,
      serverReason: /Handshake failed.*certificate verify failed/,
    });
  });
});
