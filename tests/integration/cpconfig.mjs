// Configuration helpers for tests that drive a real control plane: one small
// function per resource. Providers go through the admin API; the resources
// whose API is not on this branch yet (secrets with values, routes with
// entries, API keys) are written with SQL exactly as the API writes them: in
// one transaction that also bumps config_state.version and sends
// pg_notify('llmgw_config', version). When their endpoints land, each helper
// switches to the API without its callers changing.

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

  /** A built-in secret holding value (sealed with key; default: the control plane's). */
  secret(name, value, key = this.key) {
    const blob = seal(key, name, value).toString('hex');
    return this.write(`INSERT INTO secrets (name, backend, ciphertext, master_key_id)
      VALUES (${lit(name)}, 'builtin', '\\x${blob}'::bytea, ${lit(key.id)})`);
  }

  /** A secret kept in Vault or AWS Secrets Manager: backend 'vault' or 'aws', ref in cp_secret_ref syntax. */
  externalSecret(name, backend, ref) {
    return this.write(`INSERT INTO secrets (name, backend, backend_ref) VALUES (${lit(name)}, ${lit(backend)}, ${lit(ref)})`);
  }

  /** POST /v1/admin/providers; throws unless 201. */
  async provider(body) {
    const r = await this.cp.admin('POST', '/v1/admin/providers', body);
    if (r.status !== 201) throw new Error(`provider ${body.name}: ${r.status} ${r.text}`);
    return r.json;
  }

  /** A route with entries [{provider, model, ...}] in order. */
  route(name, entries, { aliases = [], strategy = 'ordered' } = {}) {
    return this.write(`INSERT INTO routes (name, aliases, strategy) VALUES (${lit(name)}, ${arr(aliases)}, ${lit(strategy)});
      ${entries.map((e, i) => `INSERT INTO route_entries (route, position, provider, model)
        VALUES (${lit(name)}, ${i}, ${lit(e.provider)}, ${lit(e.model)})`).join(';\n')}`);
  }

  /** Replaces a route's entries (a new order). */
  routeEntries(name, entries) {
    return this.write(`DELETE FROM route_entries WHERE route = ${lit(name)};
      ${entries.map((e, i) => `INSERT INTO route_entries (route, position, provider, model)
        VALUES (${lit(name)}, ${i}, ${lit(e.provider)}, ${lit(e.model)})`).join(';\n')};
      UPDATE routes SET version = version + 1, updated_at = now() WHERE name = ${lit(name)}`);
  }

  /** An API key with plaintext sha256 hash. */
  apiKey(id, hash, { team = null, allowRoutes = null } = {}) {
    return this.write(`INSERT INTO api_keys (id, name, prefix, hash, team, allow_routes)
      VALUES (${lit(id)}, ${lit(id)}, ${lit(id.slice(0, 8))}, ${lit(hash)}, ${lit(team)}, ${arr(allowRoutes)})`);
  }
}
