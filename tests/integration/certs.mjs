// Test certificates, made with the openssl CLI into a test's temp dir: a
// self-signed CA and leaves it signs (EC P-256, valid two days). Used by
// grpc_tls.test.mjs (the control-plane channel), upstream_tls.test.mjs
// (providers over https), and through makeCertSet by the control plane's,
// etcd's and the listeners' TLS tests.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

function openssl(dir, ...args) {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

/** A self-signed CA in dir: NAME.crt, NAME.key. */
export function makeCa(dir, name) {
  openssl(dir, 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '2', '-subj', `/CN=${name}`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign');
}

/** A leaf certificate NAME.crt (key NAME.key) in dir, signed by ca, with the extensions in ext. */
export function makeLeaf(dir, name, ca, ext) {
  fs.writeFileSync(path.join(dir, `${name}.ext`), ext);
  openssl(dir, 'req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
    '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', `/CN=${name}`);
  openssl(dir, 'x509', '-req', '-in', `${name}.csr`, '-CA', `${ca}.crt`, '-CAkey', `${ca}.key`,
    '-CAcreateserial', '-days', '2', '-out', `${name}.crt`, '-extfile', `${name}.ext`);
}

/**
 * A CA and the leaves most TLS tests need, in dir: a server certificate for
 * 127.0.0.1 (also good as a client certificate, as etcd's gateway dials
 * etcd with its server's), and two client certificates (CN dp-tls and
 * dp-other). Paths: {ca, srvCert, srvKey, cliCert, cliKey, cli2Cert, cli2Key}.
 */
export function makeCertSet(dir) {
  makeCa(dir, 'ca');
  makeLeaf(dir, 'srv', 'ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n');
  makeLeaf(dir, 'dp-tls', 'ca', 'extendedKeyUsage=clientAuth\n');
  makeLeaf(dir, 'dp-other', 'ca', 'extendedKeyUsage=clientAuth\n');
  const f = (n) => path.join(dir, n);
  return {
    ca: f('ca.crt'), srvCert: f('srv.crt'), srvKey: f('srv.key'), cliCert: f('dp-tls.crt'), cliKey: f('dp-tls.key'),
    cli2Cert: f('dp-other.crt'), cli2Key: f('dp-other.key'),
  };
}
