/*
 * cp_db: a thin wrapper over one libpq connection.
 *
 * Calls are synchronous. The admin API runs them on its event loop: admin
 * traffic is a few requests a minute, and one short query blocking the
 * loop for a millisecond is cheaper than an asynchronous state machine per
 * handler. The snapshot builder and LISTEN (later) get their own
 * connections, so a slow admin query never delays a data plane.
 *
 * Errors come back as a cp_db_err: the SQLSTATE (five characters, "" when
 * the failure was not the server's: a lost connection, out of memory) and
 * the server's message. Messages may quote values from a statement's
 * parameters; callers never pass secret plaintext as a parameter.
 */
#ifndef CP_DB_H
#define CP_DB_H

#include <libpq-fe.h>
#include <stddef.h>

struct gw_pool;

struct cp_db_err {
    char sqlstate[6];
    char message[512];
};

/* SQLSTATEs the callers distinguish. */
#define CP_SQLSTATE_UNIQUE "23505"
#define CP_SQLSTATE_FOREIGN_KEY "23503"
#define CP_SQLSTATE_CHECK "23514"
#define CP_SQLSTATE_NOT_NULL "23502"

struct cp_db;

/* Connects (blocking). Returns the handle, or NULL with err filled. The
 * conninfo is not kept beyond libpq's own copy and never logged. */
struct cp_db *cp_db_connect(const char *conninfo, struct cp_db_err *err);
void cp_db_free(struct cp_db *db);

/* 0 when the connection is usable, resetting it first if it broke (a
 * restarted server); GW_EIO with err filled when it stays down. */
int cp_db_check(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));

/* The libpq connection (for PQescape*, PQsocket). */
PGconn *cp_db_conn(struct cp_db *db);

/*
 * Runs sql with n text parameters ($1..$n; a NULL element is SQL NULL).
 * Returns the result of a successful command (PGRES_COMMAND_OK or
 * PGRES_TUPLES_OK), or NULL with err filled. With pool, the result is
 * cleared when the pool is freed; without, the caller PQclear()s it.
 */
PGresult *cp_db_exec(struct cp_db *db, struct gw_pool *pool, const char *sql, int n,
                     const char *const *params, struct cp_db_err *err)
    __attribute__((warn_unused_result));

/* cp_db_exec for statements whose result is not needed: 0 or GW_EIO. */
int cp_db_cmd(struct cp_db *db, const char *sql, int n, const char *const *params,
              struct cp_db_err *err) __attribute__((warn_unused_result));

/* Transactions. cp_db_rollback never fails visibly: it is the cleanup path
 * (an error there means the connection broke, and the server rolls back). */
int cp_db_begin(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));
int cp_db_commit(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));
void cp_db_rollback(struct cp_db *db);

/* The first column of the first row, or NULL (no row, or SQL NULL). */
const char *cp_db_value(const PGresult *r);
/* Bytes from lowercase hex text (a column read as encode(x, 'hex')): a
 * malloc'd buffer in *out (free it) of *len bytes. GW_EINVAL on anything
 * but an even number of hex digits, GW_ENOMEM. */
int cp_db_hex_decode(const char *hex, unsigned char **out, size_t *len)
    __attribute__((warn_unused_result));

#endif
