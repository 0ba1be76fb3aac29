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
 * conninfo is not kept beyond libpq's own copy and never logged. name says
 * which connection of the daemon this is ("admin api", "ledger writer"):
 * it is the connection's application_name (pg_stat_activity shows
 * "llmgw-controlplane <name>") and the "connection" field of its logs. */
struct cp_db *cp_db_connect(const char *conninfo, const char *name, struct cp_db_err *err);
void cp_db_free(struct cp_db *db);

/*
 * A connection's life after a loss. Every way of noticing one (a failed
 * statement, cp_db_check, cp_db_alive) logs "database connection lost;
 * reconnecting" once, and the first cp_db_check that reconnects logs
 * "database connection restored" with how long it was down: an outage is
 * two lines per connection, however many statements failed meanwhile.
 */

/* 0 when the connection is usable, resetting it first if it broke (a
 * restarted server); GW_EIO with err filled when it stays down. Blocking:
 * a round trip, and a reconnect (bounded by connect_timeout) when needed. */
int cp_db_check(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));

/* For a connection an event loop uses (the daemon's main one): after a
 * failed reconnect, cp_db_check fails at once, without trying, until a
 * wait that doubles from 1 s to 30 s has passed, so that the loop's callers
 * (the admin API, /healthz, a scrape) do not each block for a connect
 * timeout while the database is away. Threads that own their connection
 * (the ledger writer, the snapshot builder) retry on their own schedule. */
void cp_db_set_reconnect_backoff(struct cp_db *db, int on);

/* 1 while the connection looks alive, 0 once it is known broken. Never
 * blocks and sends nothing: it reads what the server sent (the closing
 * message and EOF of a restart or a terminated backend, or the error the
 * TCP keepalives left), so an idle connection's owner can call it from a
 * timer to notice a loss within a tick. Reconnecting is cp_db_check's. */
int cp_db_alive(struct cp_db *db);

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

/* COPY ... FROM STDIN (sql) fed with data[0..len), in the COPY format sql
 * names: 0, or GW_EIO with err filled (the server's SQLSTATE for data it
 * refused). */
int cp_db_copy_in(struct cp_db *db, const char *sql, const char *data, size_t len,
                  struct cp_db_err *err) __attribute__((warn_unused_result));

/* Transactions. cp_db_rollback never fails visibly: it is the cleanup path
 * (an error there means the connection broke, and the server rolls back). */
int cp_db_begin(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));
int cp_db_commit(struct cp_db *db, struct cp_db_err *err) __attribute__((warn_unused_result));
void cp_db_rollback(struct cp_db *db);

/* The first column of the first row, or NULL (no row, or SQL NULL). */
const char *cp_db_value(const PGresult *r);
/* Bytes from hex text (a column read as encode(x, 'hex')): a
 * malloc'd buffer in *out (free it) of *len bytes. GW_EINVAL on anything
 * but an even number of hex digits, GW_ENOMEM. */
int cp_db_hex_decode(const char *hex, unsigned char **out, size_t *len)
    __attribute__((warn_unused_result));
/* n bytes as bytea's hex input, "\\x..." and a NUL, into out (2 n + 3
 * bytes). */
void cp_db_bytea_hex(const unsigned char *b, size_t n, char *out);
/* The same in pool (NULL: no memory). */
char *cp_db_bytea_hex_in(struct gw_pool *pool, const unsigned char *b, size_t n);

#endif
