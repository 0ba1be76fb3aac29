// Configuration helpers for tests that drive a real control plane: one small
// function per resource, each through the admin API, as an operator would.
// SQL (write) stays for what the API refuses on purpose: a secret sealed
// under another master key, or a row the snapshot format would refuse, to
// test what the control plane does with them.

import { createCipheriv, createHash, randomBytes } from 'node:crypto';

/** A fresh master key: {hex (for LLMGW_MASTER_KEY), buf, id}. */
export function masterKey() {
  const buf = randomBytes(32);
  return { buf, hex: buf.toString('hex'), id: createHash('sha256').update(buf).digest('hex').slice(0, 8) };
}

/**
 * Seals value for the built-in secret `name` as cp_secret_seal does
 * (docs/secrets.md, "Blob format"): 0x01 | nonce(12) | AES-256-GCM
 * ciphertext | tag(16), AAD = 0x01 followed by the name.
 */
export function seal(key, name, value) {
  const nonce = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key.buf, nonce);
  c.setAAD(Buffer.concat([Buffer.from([1]), Buffer.from(name, 'utf8')]));
  const ct = Buffer.concat([c.update(value, 'utf8'), c.final()]);
  return Buffer.concat([Buffer.from([1]), nonce, ct, c.getAuthTag()]);
}

const lit = (s) => (s === null || s === undefined ? 'NULL' : `'${String(s).replace(/'/g, "''")}'`);
const arr = (a) => (a ? `ARRAY[${a.map(lit).join(',')}]::text[]` : 'NULL');

export class Config {
  /** cp: a ControlPlane (for the API); pg: the Postgres (for SQL) and its database dbname. */
  constructor(cp, pg, key, dbname = 'postgres') {
    this.cp = cp;
    this.pg = pg;
    this.key = key;
    this.dbname = dbname;
  }

  /** Runs statements as one configuration write, as the admin API does;
   * returns the configuration version it made. */
  write(sql) {
    const out = this.pg.sql(`BEGIN; ${sql};
      UPDATE config_state SET version = version + 1, updated_at = now() WHERE id = 1;
      SELECT version FROM (SELECT version, pg_notify('llmgw_config', version::text)
        FROM config_state WHERE id = 1) s;
      COMMIT;`, this.dbname);
    return Number(out.split('\n').pop());
  }

  version() {
    return Number(this.pg.sql('SELECT version FROM config_state WHERE id = 1', this.dbname));
  }

  /** The configuration version now (after a write: the one it made). */
  async api(method, path, body, want) {
    const r = await this.cp.admin(method, path, body);
    if (r.status !== want) throw new Error(`${method} ${path}: ${r.status} ${r.text}`);
    return r.json;
  }

  /** A built-in secret holding value, through the API (sealed by the control
   * plane). With another key, sealed here and written with SQL: the API
   * cannot make such a row, which is the point of the tests that use it. */
  async secret(name, value, key = this.key) {
    if (key !== this.key) {
      const blob = seal(key, name, value).toString('hex');
      return this.write(`INSERT INTO secrets (name, backend, ciphertext, master_key_id)
        VALUES (${lit(name)}, 'builtin', '\\x${blob}'::bytea, ${lit(key.id)})`);
    }
    await this.api('POST', '/v1/admin/secrets', { name, value }, 201);
    return this.version();
  }

  /** A secret kept in Vault or AWS Secrets Manager: backend 'vault' or 'aws', ref in cp_secret_ref syntax. */
  async externalSecret(name, backend, ref) {
    await this.api('POST', '/v1/admin/secrets', { name, backend, backend_ref: ref }, 201);
    return this.version();
  }

  /** POST /v1/admin/providers; throws unless 201. */
  async provider(body) {
    return this.api('POST', '/v1/admin/providers', body, 201);
  }

  /** A route with entries [{provider, model, ...}] in order. */
  async route(name, entries, { aliases = [], strategy = 'ordered' } = {}) {
    await this.api('POST', '/v1/admin/routes', { name, aliases, strategy, entries }, 201);
    return this.version();
  }

  /** Replaces a route's entries (a new order). */
  async routeEntries(name, entries) {
    await this.api('PATCH', `/v1/admin/routes/${encodeURIComponent(name)}`, { entries }, 200);
    return this.version();
  }

  /** A new API key (optionally limited to routes); returns its plaintext,
   * which the API shows only once. */
  async apiKey(id, { team = null, allowRoutes = null } = {}) {
    const body = { id };
    if (team) body.team = team;
    if (allowRoutes) body.allow_routes = allowRoutes;
    const j = await this.api('POST', '/v1/admin/keys', body, 201);
    return j.key;
  }
}
