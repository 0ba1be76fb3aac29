#include "cp_migrate.h"

#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "dp_guard_rules.h"
#include "gw_error.h"
#include "gw_log.h"

/* Migration 17's seed: the default prompt-injection rules
 * (docs/guardrails.md), inserted once from common/guard_rules.json as
 * compiled in, after 0017_guard.sql created guard_rules. */
static const char m17_seed[] =
    "INSERT INTO guard_rules (id, severity, description, kind, pattern)\n"
    "SELECT r->>'id', r->>'severity', coalesce(r->>'description', ''), r->>'kind', "
    "r->>'pattern'\n"
    "FROM jsonb_array_elements($1::jsonb -> 'rules') AS r";

/* common/guard_rules.json as the data plane's rule engine embeds it. */
static const char *guard_rules_json(void)
{
    return dp_guard_rules_default_json(NULL);
}

/* Data a migration loads once its statements ran, in its transaction: sql
 * with param as $1 (data compiled in, too big or too structured for the
 * migration's text). */
static const struct {
    int version;
    const char *sql;
    const char *(*param)(void);
} seeds[] = {{17, m17_seed, guard_rules_json}};

int cp_migrate_latest(void)
{
    int latest = 0;
    for (const struct cp_migration *m = cp_migrations; m->version; m++)
        latest = m->version;
    return latest;
}

/* Takes the lock inside the current transaction; released at its end. The
 * connection's statement and lock timeouts (cp_db_connect) are lifted for
 * this transaction: another replica may hold the lock through a long
 * migration, and a migration may rewrite a big table. */
static int lock(struct cp_db *db, struct cp_db_err *err)
{
    char key[32];
    snprintf(key, sizeof(key), "%lld", CP_MIGRATE_LOCK_KEY);
    const char *p[] = {key};
    if (cp_db_cmd(db, "SET LOCAL statement_timeout = 0", 0, NULL, err) ||
        cp_db_cmd(db, "SET LOCAL lock_timeout = 0", 0, NULL, err))
        return GW_EIO;
    return cp_db_cmd(db, "SELECT pg_advisory_xact_lock($1::bigint)", 1, p, err);
}

static int apply_one(struct cp_db *db, const struct cp_migration *m, int *applied,
                     struct cp_db_err *err)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", m->version);
    const char *p[] = {v};
    if (cp_db_begin(db, err) || lock(db, err))
        goto fail;
    PGresult *r =
        cp_db_exec(db, NULL, "SELECT 1 FROM schema_migrations WHERE version = $1", 1, p, err);
    if (!r)
        goto fail;
    int done = PQntuples(r) > 0;
    PQclear(r);
    if (done) {
        cp_db_rollback(db);
        return GW_OK;
    }
    /* The simple-query protocol: a migration may hold several statements. */
    r = PQexec(cp_db_conn(db), m->sql);
    ExecStatusType st = PQresultStatus(r); /* the last statement's: it may be a SELECT */
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        char msg[400];
        snprintf(msg, sizeof(msg), "%s", PQerrorMessage(cp_db_conn(db)));
        snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
        snprintf(err->message, sizeof(err->message), "migration %d (%s): %s", m->version, m->name,
                 msg);
        PQclear(r);
        cp_db_rollback(db);
        return GW_EIO;
    }
    PQclear(r);
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        const char *seed[] = {seeds[i].param()};
        if (seeds[i].version != m->version || !cp_db_cmd(db, seeds[i].sql, 1, seed, err))
            continue;
        char msg[sizeof(err->message)];
        snprintf(msg, sizeof(msg), "%s", err->message);
        snprintf(err->message, sizeof(err->message), "migration %d (%s), its seed: %.400s",
                 m->version, m->name, msg);
        goto fail;
    }
    if (cp_db_cmd(db, "INSERT INTO schema_migrations (version) VALUES ($1)", 1, p, err) ||
        cp_db_commit(db, err))
        goto fail;
    gw_logf(GW_LOG_INFO, "migration applied", "{s:i,s:s}", "version", m->version, "name", m->name);
    (*applied)++;
    return GW_OK;
fail:
    cp_db_rollback(db);
    return GW_EIO;
}

int cp_migrate_run(struct cp_db *db, int *applied, struct cp_db_err *err)
{
    int n = 0;
    if (applied)
        *applied = 0;
    /* CREATE TABLE IF NOT EXISTS races with itself (a duplicate pg_type
     * row), so even the bookkeeping table is created under the lock. */
    if (cp_db_begin(db, err) || lock(db, err) ||
        cp_db_cmd(db,
                  "CREATE TABLE IF NOT EXISTS schema_migrations (\n"
                  "  version integer PRIMARY KEY,\n"
                  "  applied_at timestamptz NOT NULL DEFAULT now())",
                  0, NULL, err) ||
        cp_db_commit(db, err)) {
        cp_db_rollback(db);
        return GW_EIO;
    }
    for (const struct cp_migration *m = cp_migrations; m->version; m++)
        if (apply_one(db, m, &n, err) != GW_OK) {
            if (applied)
                *applied = n;
            return GW_EIO;
        }
    if (applied)
        *applied = n;
    return GW_OK;
}
