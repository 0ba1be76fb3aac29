// Test certificates, made with the openssl CLI into a test's temp dir: a
// self-signed CA and leaves it signs (EC P-256, valid two days). Used by
// grpc_tls.test.mjs (the control-plane channel) and upstream_tls.test.mjs
// (providers over https).

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
