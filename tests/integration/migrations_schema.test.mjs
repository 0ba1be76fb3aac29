// The schema's migrations (controlplane/store/migrations/, docs/controlplane.md
// "Migrations"): a database migrated from empty and one upgraded from an
// older schema end identical. Database A is migrated fresh by
// `llmgw-controlplane migrate`; database B is first given migrations
// 1..UPGRADE_FROM from the .sql files, recorded in schema_migrations as the
// runner records them (as a release of that time left it), then `migrate`
// does the rest. pg_dump --schema-only of both must be equal, and so must the
// rows migrations seed.

import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import * as h from './harness.mjs';

const T = { timeout: 120_000 };
const MIGRATIONS = path.join(h.REPO_ROOT, 'controlplane', 'store', 'migrations');
// Before migration 17, whose seed (the default guard rules) the runner adds
// from the binary: B gets it from `migrate`, as an upgraded database did.
const UPGRADE_FROM = 10;
let pg;

before(async () => {
  h.requireBinaries([h.CONTROLPLANE_BIN]);
  pg = await h.startPostgres();
});

after(async () => {
  await h.stopAll();
});

const migrationsApplied = (proc) => proc.stderrLines
  .map(h.tryParseJson).filter((j) => j && j.msg === 'migration applied').map((j) => j.version);

function files() {
  return fs.readdirSync(MIGRATIONS).filter((f) => f.endsWith('.sql')).sort()
    .map((f) => ({ version: Number(f.slice(0, 4)), file: f, sql: fs.readFileSync(path.join(MIGRATIONS, f), 'utf8') }));
}

/** The schema as pg_dump writes it, less what names the dump rather than the schema. */
function schemaOf(dbname) {
  const r = spawnSync(path.join(h.postgresBinDir(), 'pg_dump'), ['--schema-only', '--no-owner', '-d', pg.conninfoFor(dbname)], {
    encoding: 'utf8', maxBuffer: 64 << 20, env: { ...process.env, PGCONNECT_TIMEOUT: '5' },
  });
  assert.equal(r.status, 0, `pg_dump ${dbname}: ${r.stderr}`);
  return r.stdout.split('\n')
    .filter((l) => !l.includes(dbname) && !/^\\(un)?restrict /.test(l)) // pg_dump 17.6+: a random key per dump
    .join('\n');
}

test('the migrations are the numbered files 1..N', T, () => {
  const all = files();
  assert.ok(all.length > UPGRADE_FROM);
  all.forEach((m, i) => {
    assert.match(m.file, /^\d{4}_[a-z0-9_]+\.sql$/);
    assert.equal(m.version, i + 1, m.file);
  });
});

test('a fresh database and an upgraded one end with the same schema', T, async () => {
  const all = files();
  const fresh = pg.createDatabase('mig_fresh');
  const a = await h.runMigrate({ conninfo: fresh });
  assert.equal(a.exitInfo.code, 0, a.describe());
  assert.deepEqual(migrationsApplied(a), all.map((m) => m.version));

  const upgraded = pg.createDatabase('mig_upgraded');
  pg.sql('CREATE TABLE schema_migrations (\n  version integer PRIMARY KEY,\n  applied_at timestamptz NOT NULL DEFAULT now())', 'mig_upgraded');
  for (const m of all.slice(0, UPGRADE_FROM)) {
    // One simple query, one transaction: as the runner sends a migration.
    pg.sql(`${m.sql}\nINSERT INTO schema_migrations (version) VALUES (${m.version});`, 'mig_upgraded');
  }
  const b = await h.runMigrate({ conninfo: upgraded });
  assert.equal(b.exitInfo.code, 0, b.describe());
  assert.deepEqual(migrationsApplied(b), all.slice(UPGRADE_FROM).map((m) => m.version));

  const sa = schemaOf('mig_fresh');
  const sb = schemaOf('mig_upgraded');
  assert.match(sa, /CREATE TABLE public\.guard_rules/);
  assert.equal(sb, sa);

  // What the migrations put in the tables (config_state's row, migration
  // 17's seeded rules) is the same too.
  const rows = (db) => [
    pg.sql('SELECT id, version FROM config_state', db),
    pg.sql('SELECT string_agg(format(\'%s|%s|%s|%s|%s|%s\', id, severity, kind, pattern, description, enabled), E\'\\n\' ORDER BY id) FROM guard_rules', db),
    pg.sql('SELECT string_agg(version::text, \',\' ORDER BY version) FROM schema_migrations', db),
  ];
  const ra = rows('mig_fresh');
  assert.ok(Number(pg.sql('SELECT count(*) FROM guard_rules', 'mig_fresh')) > 0, 'migration 17 seeded the default rules');
  assert.deepEqual(rows('mig_upgraded'), ra);
});
