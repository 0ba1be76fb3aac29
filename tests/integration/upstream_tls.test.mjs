// Providers over https: the data plane's upstream client (common/gw_upc.c)
// verifies the provider's certificate against the system's CA store, which
// SSL_CERT_FILE replaces here with a test CA, and the name or IP it
// connected to. The provider is a node https server in front of the mock
// (every request and answer piped through), so the answers are the mock's.
// Certificates are made with the openssl CLI, into a temp dir.
// Contract: docs/dataplane.md ("The upstream client").

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import path from 'node:path';
import * as h from './harness.mjs';
import * as certs from './certs.mjs';

const T = { timeout: 60_000 };
const MESSAGES = [{ role: 'user', content: 'hello over https' }];

let dir;
let mock;
const servers = [];
const pem = (name) => path.join(dir, name);

const makeCa = (name) => certs.makeCa(dir, name);
const makeLeaf = (name, ca, san) =>
  certs.makeLeaf(dir, name, ca, `subjectAltName=${san}\nextendedKeyUsage=serverAuth\n`);

/** An https server on host that pipes every request to the mock; counts
 * the TLS connections it accepted. */
async function startTlsProvider(host, cert) {
  const target = new URL(mock.v1);
  const srv = https.createServer({ cert: fs.readFileSync(pem(`${cert}.crt`)), key: fs.readFileSync(pem(`${cert}.key`)) },
    (req, res) => {
      const up = http.request({
        host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers,
      }, (ur) => {
        res.writeHead(ur.statusCode, ur.headers);
        ur.pipe(res);
      });
      up.on('error', () => res.destroy());
      req.pipe(up);
    });
  srv.tlsConnections = 0;
  srv.on('secureConnection', () => { srv.tlsConnections++; });
  await new Promise((resolve) => srv.listen(0, host, resolve));
  servers.push(srv);
  return srv;
}

function provider(name, base) {
  return {
    name, driver: 'openai', base_url: base, credential_ref: 'env:MOCK_API_KEY', headers: {},
    enabled: true, first_byte_timeout_ms: 10000, idle_timeout_ms: 10000,
  };
}

async function gateway({ providers, routes, caFile, threads = 2 }) {
  const saved = process.env.SSL_CERT_FILE;
  if (caFile) process.env.SSL_CERT_FILE = caFile;
  else delete process.env.SSL_CERT_FILE;
  try {
    return await h.startGateway({
      mock,
      threads,
      snapshot: {
        version: 1, providers, routes,
        keys: [{ id: 'key_demo', hash: h.DEMO_KEY_HASH, status: 'active', team: 'demo' }],
      },
    });
  } finally {
    if (saved === undefined) delete process.env.SSL_CERT_FILE;
    else process.env.SSL_CERT_FILE = saved;
  }
}

const chat = (gw, model, stream = false) => h.request(gw.port, {
  body: { model, messages: MESSAGES, ...(stream ? { stream: true } : {}) }, headers: { ...h.AUTH },
});

describe('providers over https', () => {
  let good; // cert for IP 127.0.0.1 and the name localhost
  let wrongName; // a cert for another name, served on 127.0.0.1

  before(async () => {
    h.requireBinaries();
    dir = h.makeTmpDir();
    makeCa('ca');
    makeLeaf('good', 'ca', 'IP:127.0.0.1,DNS:localhost');
    makeLeaf('other', 'ca', 'DNS:elsewhere.example');
    mock = await h.startMock();
    good = await startTlsProvider('127.0.0.1', 'good');
    wrongName = await startTlsProvider('127.0.0.1', 'other');
  });

  after(async () => {
    for (const s of servers) s.close();
    await h.stopAll();
  });

  test('by IP and by name, whole and streamed; one TLS connection carries them all', T, async () => {
    const gw = await gateway({
      caFile: pem('ca.crt'),
      threads: 1,
      providers: [
        provider('byip', `https://127.0.0.1:${good.address().port}/v1`),
        provider('byname', `https://localhost:${good.address().port}/v1`),
      ],
      routes: [
        { name: 'ip', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'byip', model: 'mock-gpt' }] },
        { name: 'name', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'byname', model: 'mock-gpt' }] },
      ],
    });
    const before = good.tlsConnections;
    for (let i = 0; i < 3; i++) {
      const r = await chat(gw, 'ip');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.choices[0].message.content, h.mockText(8));
    }
    const s = await h.collectStream(gw.port, {
      body: { model: 'name', messages: MESSAGES, stream: true }, headers: { ...h.AUTH },
    });
    assert.equal(s.status, 200, s.raw);
    assert.ok(s.complete, s.raw);
    assert.equal(h.streamedContent(h.parseEvents(s.events)), h.mockText(8), s.raw);
    assert.equal(s.events.at(-1), '[DONE]');
    await gw.accessLogFor(s.headers['x-request-id']);
    // One thread: the three answers by IP went on one kept connection,
    // the named one on its own (another destination).
    assert.equal(good.tlsConnections - before, 2);
    const lines = gw.attemptLog();
    assert.equal(lines.length, 4, JSON.stringify(lines));
    assert.ok(lines.every((l) => l.outcome === 'ok'), JSON.stringify(lines));
  });

  test('a certificate for another name fails the attempt, and the route fails over', T, async () => {
    const gw = await gateway({
      caFile: pem('ca.crt'),
      providers: [
        provider('wrong', `https://127.0.0.1:${wrongName.address().port}/v1`),
        provider('right', `https://127.0.0.1:${good.address().port}/v1`),
      ],
      routes: [
        {
          name: 'fo', capability: 'chat', strategy: 'ordered',
          entries: [{ provider: 'wrong', model: 'mock-gpt' }, { provider: 'right', model: 'mock-gpt' }],
        },
        { name: 'only', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'wrong', model: 'mock-gpt' }] },
      ],
    });
    const r = await chat(gw, 'fo');
    assert.equal(r.status, 200, r.text);
    const id = r.headers['x-request-id'];
    await gw.accessLogFor(id);
    const tries = gw.attemptLog(id);
    // The wrong one failed as a network failure (retried as one), then the
    // right one answered.
    const last = tries.pop();
    assert.deepEqual([last.provider, last.outcome], ['right', 'ok'], JSON.stringify(last));
    assert.ok(tries.length >= 1 && tries.every((l) => l.provider === 'wrong' && l.outcome === 'failed' &&
      l.error_class === 'network'), JSON.stringify(tries));
    const only = await chat(gw, 'only');
    assert.equal(only.status, 502, only.text);
    assert.match(only.json.error.message, /certificate verify failed: IP address mismatch/, only.text);
  });

  test('without the CA in the store, the provider is not trusted', T, async () => {
    fs.writeFileSync(path.join(dir, 'empty.pem'), '');
    const gw = await gateway({
      caFile: path.join(dir, 'empty.pem'),
      providers: [provider('byip', `https://127.0.0.1:${good.address().port}/v1`)],
      routes: [{ name: 'ip', capability: 'chat', strategy: 'ordered', entries: [{ provider: 'byip', model: 'mock-gpt' }] }],
    });
    const r = await chat(gw, 'ip');
    assert.equal(r.status, 502, r.text);
    assert.match(r.json.error.message, /certificate verify failed: (self-signed|unable to get local issuer)/, r.text);
  });
});
