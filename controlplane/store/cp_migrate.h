/*
 * cp_migrate: the schema, as embedded, ordered, numbered migrations.
 *
 * Each migration runs once, in its own transaction, holding a transaction-
 * scoped advisory lock: several control-plane replicas (or a Helm hook and
 * a replica) starting together serialize on the lock, and each one that
 * gets it after another applied a migration sees the schema_migrations row
 * and skips it. A migration that fails rolls back whole, and the ones
 * before it stay applied.
 *
 * The migrations are the files of controlplane/store/migrations/, named
 * NNNN_<slug>.sql and numbered 1, 2, 3, ... with no gap: the build embeds
 * them in number order (controlplane/embed_dir.cmake writes cp_migrations)
 * and fails on any other name, a gap or a duplicate. Adding one is adding
 * the next file. Migrations are append-only: a released one is never
 * edited; a change is a new number. Data a migration loads from what is
 * compiled in (migration 17's guard rules) is a seed in cp_migrate.c, run
 * after the file in the same transaction. docs/controlplane.md describes
 * the schema.
 */
#ifndef CP_MIGRATE_H
#define CP_MIGRATE_H

#include <stddef.h>

struct cp_db;
struct cp_db_err;

/* One embedded migration. */
struct cp_migration {
    int version;      /* 1, 2, 3, ...: the file's number */
    const char *name; /* the file's slug, '_' as ' ' ("initial schema"): for logs */
    const char *file; /* "0001_initial_schema.sql" */
    const char *sql;  /* the file, NUL-terminated: statements run in one transaction */
    size_t len;       /* the file's length */
};

/* Every migration, in number order; the table ends with a row whose
 * version is 0. */
extern const struct cp_migration cp_migrations[];

/* The advisory-lock key every replica takes ("llmgw" in ASCII). */
#define CP_MIGRATE_LOCK_KEY 0x6c6c6d6777LL

/* Applies every pending migration, logging each one applied. *applied (may
 * be NULL) receives how many this call applied. 0, or GW_EIO with err
 * filled (the failing migration's number is in the message). */
int cp_migrate_run(struct cp_db *db, int *applied, struct cp_db_err *err)
    __attribute__((warn_unused_result));

/* The highest migration version in this binary. */
int cp_migrate_latest(void);

#endif
