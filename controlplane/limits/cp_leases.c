#include "cp_leases.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_ctx.h"
#include "cp_db.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

#define STR(x) #x
#define XSTR(x) STR(x)

/* The limit, and whether the window is one of its period's starts and at
 * most one period from the current one (clocks differ a little at a
 * boundary; a replica asking for a far window is refused). The limit's row
 * is locked FOR KEY SHARE: a delete of it waits for this grant, whose
 * window row would otherwise outlive it (the lock order every writer
 * keeps: limit, window, leases; cp_migrate.c, migration 7). */
static const char SQL_LIMIT[] =
    "SELECT l.amount, x.w = p.aligned AND x.w BETWEEN (p.cur - p.step) AND (p.cur + p.step) "
    "FROM limits l, (SELECT timestamptz 'epoch' + $2::bigint * interval '1 millisecond' AS w) x, "
    "LATERAL (SELECT (date_trunc(l.period, x.w AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS "
    "aligned, " CP_WINDOW_NOW_SQL("l.period") " AS cur, CASE "
                                              "l.period WHEN 'minute' THEN interval '1 minute' "
                                              "WHEN 'day' THEN interval '1 day' ELSE "
                                              "interval '1 month' END AS step) p "
                                              "WHERE l.id = $1 AND l.enabled FOR KEY SHARE OF l";
#define WINDOW_TS "timestamptz 'epoch' + $2::bigint * interval '1 millisecond'"
#define TTL "interval '" XSTR(CP_LEASES_TTL_MS) " milliseconds'"
static const char SQL_WINDOW_ROW[] = "INSERT INTO limit_windows (limit_id, window_start) VALUES "
                                     "($1, " WINDOW_TS ") ON CONFLICT DO NOTHING";
static const char SQL_WINDOW_LOCK[] =
    "SELECT spent FROM limit_windows WHERE limit_id = $1 AND window_start = " WINDOW_TS
    " FOR UPDATE";
/* A settled lease owes only the charges its replica said it made and that
 * have not landed; an unsettled one all it was granted and did not use or
 * give back, expired or not, for the grace ($3 ms) past its expiry. */
static const char SQL_OUTSTANDING[] =
    "SELECT coalesce(sum(CASE WHEN settled THEN greatest(charged::numeric - consumed, 0) ELSE "
    "greatest(granted::numeric - consumed - released, 0) END), 0), "
    "(extract(epoch FROM now()) * 1000)::bigint FROM limit_leases WHERE limit_id = $1 AND "
    "window_start = " WINDOW_TS " AND NOT expired AND expires_at > now() - $3::bigint * "
    "interval '1 millisecond'";
/* Older data planes' renewal: every live lease of the replica in the window. */
static const char SQL_RENEW_ALL[] =
    "UPDATE limit_leases SET expires_at = now() + " TTL " WHERE limit_id = $1 AND window_start = "
    "" WINDOW_TS " AND replica = $3 AND NOT settled AND NOT expired AND expires_at > now()";
/* A report on one lease: totals, so a report applied twice changes nothing.
 * Renewed when not final and still live. */
static const char SQL_REPORT[] =
    "UPDATE limit_leases SET released = greatest(released, least($5::bigint, granted)), "
    "charged = CASE WHEN $6::boolean THEN greatest(charged, $7::bigint) ELSE charged END, "
    "settled = settled OR $6::boolean, "
    "expires_at = CASE WHEN NOT $6::boolean AND NOT settled AND NOT expired AND expires_at > "
    "now() THEN now() + " TTL " ELSE expires_at END "
    "WHERE id = $4 AND limit_id = $1 AND window_start = " WINDOW_TS " AND replica = $3 "
    "RETURNING expires_at = now() + " TTL ", (extract(epoch FROM expires_at) * 1000)::bigint";
/* The lease this replica already got for this request (its reply lost). */
static const char SQL_SAME_REQ[] =
    "SELECT id, granted, greatest((extract(epoch FROM expires_at - now()) * 1000)::bigint, 0), "
    "(extract(epoch FROM expires_at) * 1000)::bigint FROM limit_leases WHERE replica = $3 AND "
    "req = $4::bigint AND limit_id = $1 AND window_start = " WINDOW_TS;
static const char SQL_INSERT[] =
    "INSERT INTO limit_leases (id, limit_id, window_start, replica, granted, expires_at, req) "
    "VALUES ('ls_' || replace(gen_random_uuid()::text, '-', ''), $1, " WINDOW_TS ", $3, $4, "
    "now() + " TTL ", nullif($5::bigint, 0)) RETURNING id, (extract(epoch FROM expires_at) * "
    "1000)::bigint";

/* A bigint (or a sum of them) as text; saturated, never wrapped. */
static int64_t num(const PGresult *r, int row, int col)
{
    if (!r || PQntuples(r) <= row || PQgetisnull(r, row, col))
        return 0;
    errno = 0;
    long long v = strtoll(PQgetvalue(r, row, col), NULL, 10);
    if (errno == ERANGE || v > INT64_MAX / 4 || v < INT64_MIN / 4)
        return v < 0 ? INT64_MIN / 4 : INT64_MAX / 4;
    return (int64_t)v;
}

static void refuse(Llmgw__V1__LeaseGrant *g, struct cp_lease_strings *st, const char *why)
{
    snprintf(st->refusal, sizeof(st->refusal), "%s", why);
    g->refusal = st->refusal;
    g->lease_id = st->lease_id;
    st->lease_id[0] = '\0';
    g->amount = 0;
    g->ttl_ms = 0;
}

/* The window's spent and outstanding, and the database's clock (ms). */
static int window_state(struct cp_db *db, long long grace_ms, const char *const *p, int64_t *spent,
                        int64_t *outstanding, int64_t *now_ms, struct cp_db_err *err)
{
    char grace[24];
    snprintf(grace, sizeof(grace), "%lld", grace_ms >= 0 ? grace_ms : 0);
    const char *q[] = {p[0], p[1], grace};
    PGresult *r = cp_db_exec(db, NULL, SQL_WINDOW_LOCK, 2, p, err);
    if (!r)
        return GW_EIO;
    *spent = num(r, 0, 0);
    PQclear(r);
    if (!(r = cp_db_exec(db, NULL, SQL_OUTSTANDING, 3, q, err)))
        return GW_EIO;
    *outstanding = num(r, 0, 0);
    *now_ms = num(r, 0, 1);
    PQclear(r);
    return GW_OK;
}

int cp_leases_grant(struct cp_db *db, long long grace_ms, const char *replica,
                    const Llmgw__V1__LeaseRequest *rq, Llmgw__V1__LeaseGrant *g,
                    struct cp_lease_strings *st)
{
    llmgw__v1__lease_grant__init(g);
    memset(st, 0, sizeof(*st));
    snprintf(st->limit_id, sizeof(st->limit_id), "%s", rq->limit_id ? rq->limit_id : "");
    g->req = rq->req;
    g->limit_id = st->limit_id;
    g->window_start_ms = rq->window_start_ms;
    g->lease_id = st->lease_id;
    g->refusal = st->refusal;

    /* A request is answered once per (replica, req): req is unique per
     * data-plane process start (a random start in [2^62, 2^63)). Numbers
     * below 2^32, which older data planes count from 1 at every start, and
     * past a bigint, are not remembered. */
    int remember = rq->req >= (1ULL << 32) && rq->req <= INT64_MAX;
    char ws[24], amount_s[24] = "0", req_s[24], released_s[24], charged_s[24];
    snprintf(ws, sizeof(ws), "%lld", (long long)rq->window_start_ms);
    snprintf(req_s, sizeof(req_s), "%lld", remember ? (long long)rq->req : 0LL);
    snprintf(released_s, sizeof(released_s), "%lld",
             (long long)(rq->released > 0 ? rq->released : 0));
    snprintf(charged_s, sizeof(charged_s), "%lld", (long long)(rq->charged > 0 ? rq->charged : 0));
    const char *lease_in = rq->lease_id ? rq->lease_id : "";
    const char *p[] = {st->limit_id, ws, replica, amount_s, req_s};
    struct cp_db_err err;
    PGresult *r = NULL;
    if (rq->window_start_ms < 0 || rq->window_start_ms > 1000000000000000LL) {
        refuse(g, st, "invalid_window");
        return GW_OK;
    }
    if (cp_db_begin(db, &err))
        goto dberr;
    if (!(r = cp_db_exec(db, NULL, SQL_LIMIT, 2, p, &err)))
        goto dberr;
    if (PQntuples(r) == 0) {
        PQclear(r);
        cp_db_rollback(db);
        refuse(g, st, "unknown_limit");
        return GW_OK;
    }
    int64_t amount = num(r, 0, 0);
    int window_ok = strcmp(PQgetvalue(r, 0, 1), "t") == 0;
    PQclear(r);
    r = NULL;
    g->limit = amount;
    if (!window_ok) {
        cp_db_rollback(db);
        refuse(g, st, "invalid_window");
        return GW_OK;
    }
    /* The window row's lock serializes every grant and report of the
     * window. */
    if (cp_db_cmd(db, SQL_WINDOW_ROW, 2, p, &err))
        goto dberr;
    int64_t spent, outstanding, now_ms;
    int64_t want = rq->want > 0 ? rq->want : 0, need = rq->need > 0 ? rq->need : 0;
    if (want == 0) {
        /* A report on a lease (or, from an older data plane, a renewal of
         * all the replica's leases in the window). */
        const char *rp[] = {st->limit_id, ws,         replica,
                            lease_in,     released_s, rq->final ? "true" : "false",
                            charged_s};
        int known = 1, renewed = 0;
        int64_t expires = 0;
        if (cp_db_cmd(db, SQL_WINDOW_LOCK, 2, p, &err))
            goto dberr;
        if (lease_in[0]) {
            if (!(r = cp_db_exec(db, NULL, SQL_REPORT, 7, rp, &err)))
                goto dberr;
            known = PQntuples(r) > 0;
            renewed = known && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
            expires = num(r, 0, 1);
            PQclear(r);
            r = NULL;
        } else {
            if (!(r = cp_db_exec(db, NULL, SQL_RENEW_ALL, 3, p, &err)))
                goto dberr;
            renewed = atoi(PQcmdTuples(r)) > 0;
            PQclear(r);
            r = NULL;
        }
        if (window_state(db, grace_ms, p, &spent, &outstanding, &now_ms, &err) ||
            cp_db_commit(db, &err))
            goto dberr;
        g->spent = spent;
        g->remaining = amount - spent - outstanding;
        if (!known) {
            refuse(g, st, "unknown_lease");
            return GW_OK;
        }
        if (lease_in[0])
            snprintf(st->lease_id, sizeof(st->lease_id), "%s", lease_in);
        if (renewed)
            g->expires_at_ms = lease_in[0] ? expires : now_ms + CP_LEASES_TTL_MS;
        g->ttl_ms = renewed ? CP_LEASES_TTL_MS : 0;
        return GW_OK;
    }
    if (window_state(db, grace_ms, p, &spent, &outstanding, &now_ms, &err))
        goto dberr;
    int64_t remaining = amount - spent - outstanding;
    g->spent = spent;
    if (remember) {
        /* Asked again (its answer was lost with a stream): the same lease. */
        const char *q[] = {st->limit_id, ws, replica, req_s};
        if (!(r = cp_db_exec(db, NULL, SQL_SAME_REQ, 4, q, &err)))
            goto dberr;
        if (PQntuples(r) > 0) {
            snprintf(st->lease_id, sizeof(st->lease_id), "%s", PQgetvalue(r, 0, 0));
            g->amount = num(r, 0, 1);
            g->ttl_ms = num(r, 0, 2);
            g->expires_at_ms = num(r, 0, 3);
            g->remaining = remaining;
            PQclear(r);
            r = NULL;
            if (cp_db_commit(db, &err))
                goto dberr;
            return GW_OK;
        }
        PQclear(r);
        r = NULL;
    }
    if (want < need)
        want = need;
    if (remaining <= 0 || remaining < need) {
        cp_db_rollback(db);
        g->remaining = remaining;
        refuse(g, st, "depleted");
        return GW_OK;
    }
    int64_t slice = remaining / CP_LEASES_FRACTION;
    if (slice < need)
        slice = need;
    if (slice < 1)
        slice = 1;
    int64_t grant = want < slice ? want : slice;
    if (grant > remaining)
        grant = remaining;
    snprintf(amount_s, sizeof(amount_s), "%lld", (long long)grant);
    if (!(r = cp_db_exec(db, NULL, SQL_INSERT, 5, p, &err)))
        goto dberr;
    snprintf(st->lease_id, sizeof(st->lease_id), "%s", PQgetvalue(r, 0, 0));
    g->expires_at_ms = num(r, 0, 1);
    PQclear(r);
    r = NULL;
    if (cp_db_commit(db, &err))
        goto dberr;
    g->amount = grant;
    g->ttl_ms = CP_LEASES_TTL_MS;
    g->remaining = remaining - grant;
    return GW_OK;
dberr:
    PQclear(r);
    cp_db_rollback(db);
    gw_logf(GW_LOG_WARN, "lease grant failed: the replica's offline policy decides",
            "{s:s,s:s,s:s}", "limit", st->limit_id, "replica", replica, "error", err.message);
    refuse(g, st, "unallocated");
    return GW_EIO;
}

int cp_leases_ledger_grant(void *ctx, struct cp_db *db, const char *replica,
                           const Llmgw__V1__LeaseRequest *rq, Llmgw__V1__LeaseGrant *g)
{
    long long grace_ms = ((const struct cp_ctx *)ctx)->lease_grace_ms;
    static __thread struct cp_lease_strings st;
    static __thread int64_t last_expire_us;
    int64_t now = gw_now_us();
    if (now - last_expire_us > (int64_t)CP_LEASES_EXPIRE_EVERY_MS * 1000) {
        last_expire_us = now;
        int expired = cp_leases_expire(db, grace_ms); /* a failure is logged; tried again later */
        (void)expired;
    }
    return cp_leases_grant(db, grace_ms, replica, rq, g, &st);
}

int cp_leases_release(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRelease *rl)
{
    if (!rl->lease_id || !rl->lease_id[0] || rl->amount <= 0)
        return GW_OK;
    char amount[24];
    snprintf(amount, sizeof(amount), "%lld", (long long)rl->amount);
    const char *p[] = {rl->lease_id, replica, amount};
    struct cp_db_err err;
    if (cp_db_cmd(db,
                  "UPDATE limit_leases SET released = least(released + $3::bigint, granted) "
                  "WHERE id = $1 AND replica = $2",
                  3, p, &err)) {
        gw_logf(GW_LOG_WARN, "lease release failed: the lease's expiry gives it back", "{s:s,s:s}",
                "replica", replica, "error", err.message);
        return GW_EIO;
    }
    return GW_OK;
}

/* Rows are locked in key order, as the ledger trigger locks them, so the
 * sweep and a ledger batch never wait on each other in a cycle. */
int cp_leases_expire(struct cp_db *db, long long grace_ms)
{
    struct cp_db_err err;
    char grace[24];
    snprintf(grace, sizeof(grace), "%lld", grace_ms >= 0 ? grace_ms : 0);
    const char *p[] = {grace};
    PGresult *r = cp_db_exec(
        db, NULL,
        "UPDATE limit_leases SET expired = true WHERE id IN (SELECT id FROM limit_leases WHERE "
        "NOT expired AND (expires_at <= now() - $1::bigint * interval '1 millisecond' OR "
        "(settled AND consumed >= charged)) ORDER BY id FOR UPDATE)",
        1, p, &err);
    if (!r)
        goto fail;
    int n = atoi(PQcmdTuples(r));
    PQclear(r);
    if (cp_db_cmd(db,
                  "DELETE FROM limit_leases WHERE id IN (SELECT id FROM limit_leases WHERE expired "
                  "AND expires_at < now() - interval '2 days' ORDER BY id FOR UPDATE)",
                  0, NULL, &err) ||
        cp_db_cmd(db,
                  "DELETE FROM limit_windows WHERE (limit_id, window_start) IN (SELECT "
                  "w.limit_id, w.window_start FROM limit_windows w JOIN limits l ON l.id = "
                  "w.limit_id WHERE l.period = 'minute' AND w.window_start < now() - interval "
                  "'2 days' ORDER BY 1, 2 FOR UPDATE OF w)",
                  0, NULL, &err))
        goto fail;
    return n;
fail:
    gw_logf(GW_LOG_WARN, "lease expiry failed", "{s:s}", "error", err.message);
    return GW_EIO;
}
