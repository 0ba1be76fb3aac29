#include "cp_db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_pool.h"

struct cp_db {
    PGconn *conn;
};

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

struct cp_db *cp_db_connect(const char *conninfo, struct cp_db_err *err)
{
    struct cp_db *db = calloc(1, sizeof(*db));
    if (!db) {
        set_err(err, "", "out of memory");
        return NULL;
    }
    /* Defaults first, the user's conninfo (expanded from dbname) last: a
     * keyword repeated there wins. Without them a Postgres that stops
     * answering would block the main loop (and SIGTERM) forever. */
    static const char *const keys[] = {"connect_timeout",
                                       "keepalives",
                                       "keepalives_idle",
                                       "keepalives_interval",
                                       "keepalives_count",
                                       "tcp_user_timeout",
                                       "options",
                                       "dbname",
                                       NULL};
    const char *vals[] = {
        "5",      "1", "10", "5", "3", "15000", "-c statement_timeout=30000 -c lock_timeout=5000",
        conninfo, NULL};
    db->conn = PQconnectdbParams(keys, vals, 1);
    if (!db->conn || PQstatus(db->conn) != CONNECTION_OK) {
        set_err(err, "", db->conn ? PQerrorMessage(db->conn) : "out of memory");
        cp_db_free(db);
        return NULL;
    }
    PQsetNoticeProcessor(db->conn, quiet_notice, NULL);
    return db;
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
    }
    PQreset(db->conn);
    if (PQstatus(db->conn) == CONNECTION_OK)
        return GW_OK;
    set_err(err, "", PQerrorMessage(db->conn));
    return GW_EIO;
}

static void clear_result(void *r)
{
    PQclear(r);
}

PGresult *cp_db_exec(struct cp_db *db, struct gw_pool *pool, const char *sql, int n,
                     const char *const *params, struct cp_db_err *err)
{
    PGresult *r = PQexecParams(db->conn, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
        const char *state = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
        const char *msg = r ? PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY) : NULL;
        set_err(err, state, msg ? msg : PQerrorMessage(db->conn));
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

static int hexval(char ch)
{
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    return -1;
}

int cp_db_hex_decode(const char *hex, unsigned char **out, size_t *len)
{
    size_t hl = strlen(hex);
    if (hl % 2)
        return GW_EINVAL;
    unsigned char *b = malloc(hl / 2 ? hl / 2 : 1);
    if (!b)
        return GW_ENOMEM;
    for (size_t i = 0; i < hl / 2; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            free(b);
            return GW_EINVAL;
        }
        b[i] = (unsigned char)(hi << 4 | lo);
    }
    *out = b;
    *len = hl / 2;
    return GW_OK;
}
