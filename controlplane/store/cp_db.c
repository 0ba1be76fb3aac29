#include "cp_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_codec.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_pool.h"
#include "gw_time.h"

struct cp_db {
    PGconn *conn;
    char name[48];         /* the role, in logs and as application_name */
    int down;              /* a loss was logged; no reconnect has worked since */
    int64_t down_since_ms; /* monotonic */
    /* A failed reconnect is not tried again before retry_us (monotonic):
     * a connect can block for its timeout, and the main loop's callers
     * (the admin API, /healthz, a scrape) must not each pay it. The wait
     * doubles from 1 s to 30 s while the database stays away. */
    int backoff; /* cp_db_set_reconnect_backoff */
    int64_t retry_us;
    int64_t backoff_ms;
    char last_error[600];
};

#define RECONNECT_FIRST_MS 1000
#define RECONNECT_MAX_MS 30000

static void set_err(struct cp_db_err *err, const char *state, const char *msg)
{
    if (!err)
        return;
    snprintf(err->sqlstate, sizeof(err->sqlstate), "%s", state ? state : "");
    snprintf(err->message, sizeof(err->message), "%s", msg && *msg ? msg : "database error");
    /* libpq messages end with a newline; a JSON field should not. */
    size_t n = strlen(err->message);
    while (n > 0 && (err->message[n - 1] == '\n' || err->message[n - 1] == ' '))
        err->message[--n] = '\0';
}

/* Server notices (NOTICE: relation already exists, skipping) are not errors;
 * libpq would print them to stderr as free text, which breaks JSON lines. */
static void quiet_notice(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* The first sign that the connection broke: logged once, until a reconnect
 * works (note_back). */
static void note_lost(struct cp_db *db, const char *why)
{
    if (db->down)
        return;
    db->down = 1;
    db->down_since_ms = gw_now_us() / 1000;
    char msg[256];
    snprintf(msg, sizeof(msg), "%s", why && *why ? why : "connection lost");
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == ' '))
        msg[--n] = '\0';
    gw_logf(GW_LOG_WARN, "database connection lost; reconnecting", "{s:s,s:s}", "connection",
            db->name, "error", msg);
}

static void note_back(struct cp_db *db)
{
    if (!db->down)
        return;
    db->down = 0;
    gw_logf(GW_LOG_INFO, "database connection restored", "{s:s,s:I}", "connection", db->name,
            "down_ms", (json_int_t)(gw_now_us() / 1000 - db->down_since_ms));
}

struct cp_db *cp_db_connect(const char *conninfo, const char *name, struct cp_db_err *err)
{
    struct cp_db *db = calloc(1, sizeof(*db));
    if (!db) {
        set_err(err, "", "out of memory");
        return NULL;
    }
    snprintf(db->name, sizeof(db->name), "%s", name ? name : "main");
    char app[80];
    snprintf(app, sizeof(app), "llmgw-controlplane %s", db->name);
    /* Defaults first, the user's conninfo (expanded from dbname) next: a
     * keyword repeated there wins. Without a timeout a Postgres that stops
     * answering would block the main loop (and SIGTERM) forever; the
     * keepalives notice a silent peer (a partition, a host gone) in about
     * 3 + 3 x 1 s even on a connection nothing is written to, and
     * tcp_user_timeout bounds a write nobody acknowledges. application_name
     * comes last, so that pg_stat_activity always says which connection of
     * which daemon a backend serves. */
    static const char *const keys[] = {"connect_timeout",  "keepalives",
                                       "keepalives_idle",  "keepalives_interval",
                                       "keepalives_count", "tcp_user_timeout",
                                       "options",          "dbname",
                                       "application_name", NULL};
    const char *vals[] = {
        "5",      "1", "3", "1", "3", "6000", "-c statement_timeout=30000 -c lock_timeout=5000",
        conninfo, app, NULL};
    db->conn = PQconnectdbParams(keys, vals, 1);
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK) {
        set_err(err, "", db->conn ? PQerrorMessage(db->conn) : "out of memory");
        cp_db_free(db);
        return NULL;
    }
    PQsetNoticeProcessor(db->conn, quiet_notice, NULL);
    return db;
}

void cp_db_set_reconnect_backoff(struct cp_db *db, int on)
{
    db->backoff = on;
}

void cp_db_free(struct cp_db *db)
{
    if (!db)
        return;
    if (db->conn)
        PQfinish(db->conn);
    free(db);
}

PGconn *cp_db_conn(struct cp_db *db)
{
    return db->conn;
}

int cp_db_check(struct cp_db *db, struct cp_db_err *err)
{
    if (PQstatus(db->conn) == CONNECTION_OK) {
        /* A server restart is seen only by the next statement. */
        PGresult *r = PQexec(db->conn, "SELECT 1");
        int ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (ok)
            return GW_OK;
        note_lost(db, PQerrorMessage(db->conn));
    } else {
        note_lost(db, PQerrorMessage(db->conn));
    }
    int64_t now = gw_now_us();
    if (db->backoff && db->retry_us && now < db->retry_us) {
        set_err(err, "", db->last_error);
        return GW_EIO;
    }
    PQreset(db->conn);
    if (PQstatus(db->conn) == CONNECTION_OK) {
        db->retry_us = 0;
        db->backoff_ms = 0;
        note_back(db);
        return GW_OK;
    }
    db->backoff_ms = db->backoff_ms ? db->backoff_ms * 2 : RECONNECT_FIRST_MS;
    if (db->backoff_ms > RECONNECT_MAX_MS)
        db->backoff_ms = RECONNECT_MAX_MS;
    db->retry_us = gw_now_us() + db->backoff_ms * 1000;
    set_err(err, "", PQerrorMessage(db->conn));
    snprintf(db->last_error, sizeof(db->last_error), "%s (the next reconnect in %lld ms)",
             err ? err->message : "connection failed", (long long)db->backoff_ms);
    return GW_EIO;
}

int cp_db_alive(struct cp_db *db)
{
    /* PQconsumeInput reads whatever the server sent (libpq's sockets are
     * non-blocking): a restart's or a terminated backend's closing message
     * and EOF, or the error the keepalives left on the socket. */
    if (PQstatus(db->conn) == CONNECTION_OK && PQconsumeInput(db->conn) &&
        PQstatus(db->conn) == CONNECTION_OK)
        return 1;
    note_lost(db, PQerrorMessage(db->conn));
    return 0;
}

static void clear_result(void *r)
{
    PQclear(r);
}

/* err from the connection's last result r (NULL: its error message). */
static void result_err(struct cp_db *db, PGresult *r, struct cp_db_err *err)
{
    const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    set_err(err, state, msg ? msg : PQerrorMessage(db->conn));
    if (PQstatus(db->conn) != CONNECTION_OK)
        note_lost(db, err ? err->message : PQerrorMessage(db->conn));
}

PGresult *cp_db_exec(struct cp_db *db, struct gw_pool *pool, const char *sql, int n,
                     const char *const *params, struct cp_db_err *err)
{
    PGresult *r = PQexecParams(db->conn, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        result_err(db, r, err);
        PQclear(r);
        return NULL;
    }
    if (pool && gw_pool_cleanup(pool, clear_result, r) != GW_OK) {
        PQclear(r);
        set_err(err, "", "out of memory");
        return NULL;
    }
    return r;
}

int cp_db_copy_in(struct cp_db *db, const char *sql, const char *data, size_t len,
                  struct cp_db_err *err)
{
    PGresult *r = PQexec(db->conn, sql);
    if (PQresultStatus(r) != PGRES_COPY_IN) {
        result_err(db, r, err);
        PQclear(r);
        return GW_EIO;
    }
    PQclear(r);
    int sent = 1;
    for (size_t off = 0; sent && off < len;) {
        int n = len - off > (1u << 20) ? 1 << 20 : (int)(len - off);
        sent = PQputCopyData(db->conn, data + off, n) == 1;
        off += (size_t)n;
    }
    /* Ended either way: the server's result says what happened. */
    (void)PQputCopyEnd(db->conn, sent ? NULL : "the client could not send the rows");
    int rc = GW_OK;
    while ((r = PQgetResult(db->conn)) != NULL) {
        if (rc == GW_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
            result_err(db, r, err);
            rc = GW_EIO;
        }
        PQclear(r);
        if (PQstatus(db->conn) != CONNECTION_OK)
            break;
    }
    if (rc == GW_OK && !sent) {
        result_err(db, NULL, err);
        rc = GW_EIO;
    }
    return rc;
}

int cp_db_cmd(struct cp_db *db, const char *sql, int n, const char *const *params,
              struct cp_db_err *err)
{
    PGresult *r = cp_db_exec(db, NULL, sql, n, params, err);
    if (!r)
        return GW_EIO;
    PQclear(r);
    return GW_OK;
}

int cp_db_begin(struct cp_db *db, struct cp_db_err *err)
{
    return cp_db_cmd(db, "BEGIN", 0, NULL, err);
}

int cp_db_commit(struct cp_db *db, struct cp_db_err *err)
{
    return cp_db_cmd(db, "COMMIT", 0, NULL, err);
}

void cp_db_rollback(struct cp_db *db)
{
    PGresult *r = PQexec(db->conn, "ROLLBACK");
    PQclear(r);
}

const char *cp_db_value(const PGresult *r)
{
    if (!r || PQntuples(r) < 1 || PQnfields(r) < 1 || PQgetisnull(r, 0, 0))
        return NULL;
    return PQgetvalue(r, 0, 0);
}

int cp_db_hex_decode(const char *hex, unsigned char **out, size_t *len)
{
    size_t hl = strlen(hex);
    if (hl % 2)
        return GW_EINVAL;
    unsigned char *b = malloc(hl / 2 ? hl / 2 : 1);
    if (!b)
        return GW_ENOMEM;
    if (gw_hex_decode(hex, hl, b) != GW_OK) {
        free(b);
        return GW_EINVAL;
    }
    *out = b;
    *len = hl / 2;
    return GW_OK;
}

void cp_db_bytea_hex(const unsigned char *b, size_t n, char *out)
{
    out[0] = '\\';
    out[1] = 'x';
    gw_hex_encode(b, n, out + 2);
}

char *cp_db_bytea_hex_in(struct gw_pool *pool, const unsigned char *b, size_t n)
{
    char *s = gw_pool_alloc(pool, 2 * n + 3);
    if (s)
        cp_db_bytea_hex(b, n, s);
    return s;
}
