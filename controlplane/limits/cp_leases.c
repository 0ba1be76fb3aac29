#include "cp_leases.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

#define STR(x) #x
#define XSTR(x) STR(x)

/* The limit, and whether the window is one of its period's starts and at
 * most one period from the current one (clocks differ a little at a
 * boundary; a replica asking for a far window is refused). */
static const char SQL_LIMIT[] =
    "SELECT l.amount, x.w = p.aligned AND x.w BETWEEN (p.cur - p.step) AND (p.cur + p.step) "
    "FROM limits l, (SELECT timestamptz 'epoch' + $2::bigint * interval '1 millisecond' AS w) x, "
    "LATERAL (SELECT (date_trunc(l.period, x.w AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS "
    "aligned, (date_trunc(l.period, now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') AS cur, CASE "
    "l.period WHEN 'minute' THEN interval '1 minute' WHEN 'day' THEN interval '1 day' ELSE "
    "interval '1 month' END AS step) p "
    "WHERE l.id = $1 AND l.enabled";
#define WINDOW_TS "timestamptz 'epoch' + $2::bigint * interval '1 millisecond'"
static const char SQL_WINDOW_ROW[] = "INSERT INTO limit_windows (limit_id, window_start) VALUES "
                                     "($1, " WINDOW_TS ") ON CONFLICT DO NOTHING";
static const char SQL_WINDOW_LOCK[] =
    "SELECT spent FROM limit_windows WHERE limit_id = $1 AND window_start = " WINDOW_TS
    " FOR UPDATE";
static const char SQL_OUTSTANDING[] =
    "SELECT coalesce(sum(greatest(granted - consumed - released, 0)), 0), "
    "(extract(epoch FROM now()) * 1000)::bigint FROM limit_leases WHERE limit_id = $1 AND "
    "window_start = " WINDOW_TS " AND NOT expired AND expires_at > now()";
static const char SQL_RENEW[] = "UPDATE limit_leases SET expires_at = now() + interval '" XSTR(
    CP_LEASES_TTL_MS) " milliseconds' WHERE limit_id = $1 AND window_start = " WINDOW_TS
                      " AND replica = $3 AND NOT expired AND expires_at > now()";
static const char SQL_INSERT[] =
    "INSERT INTO limit_leases (id, limit_id, window_start, replica, granted, expires_at) VALUES "
    "('ls_' || replace(gen_random_uuid()::text, '-', ''), $1, " WINDOW_TS ", $3, $4, now() + "
    "interval '" XSTR(CP_LEASES_TTL_MS) " milliseconds') RETURNING id, (extract(epoch FROM "
                                        "expires_at) * 1000)::bigint";

/* A bigint (or a sum of them) as text; saturated, never wrapped. */
static int64_t num(const PGresult *r, int row, int col)
{
    if (!r || PQntuples(r) <= row || PQgetisnull(r, row, col))
        return 0;
    errno = 0;
    long long v = strtoll(PQgetvalue(r, row, col), NULL, 10);
    return errno == ERANGE ? (v < 0 ? INT64_MIN / 4 : INT64_MAX / 4) : (int64_t)v;
}

static void refuse(Llmgw__V1__LeaseGrant *g, struct cp_lease_strings *st, const char *why)
{
    snprintf(st->refusal, sizeof(st->refusal), "%s", why);
    g->refusal = st->refusal;
    g->lease_id = st->lease_id;
    st->lease_id[0] = '\0';
    g->amount = 0;
}

int cp_leases_grant(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRequest *rq,
                    Llmgw__V1__LeaseGrant *g, struct cp_lease_strings *st)
{
    llmgw__v1__lease_grant__init(g);
    memset(st, 0, sizeof(*st));
    snprintf(st->limit_id, sizeof(st->limit_id), "%s", rq->limit_id ? rq->limit_id : "");
    g->req = rq->req;
    g->limit_id = st->limit_id;
    g->window_start_ms = rq->window_start_ms;
    g->lease_id = st->lease_id;
    g->refusal = st->refusal;

    char ws[24], amount_s[24];
    snprintf(ws, sizeof(ws), "%lld", (long long)rq->window_start_ms);
    const char *p[] = {st->limit_id, ws, replica, amount_s};
    struct cp_db_err err;
    PGresult *r = NULL, *out = NULL;
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
    /* The window row's lock serializes every grant of the window. */
    if (cp_db_cmd(db, SQL_WINDOW_ROW, 2, p, &err) ||
        !(r = cp_db_exec(db, NULL, SQL_WINDOW_LOCK, 2, p, &err)) ||
        !(out = cp_db_exec(db, NULL, SQL_OUTSTANDING, 2, p, &err)))
        goto dberr;
    int64_t spent = num(r, 0, 0), outstanding = num(out, 0, 0), now_ms = num(out, 0, 1);
    PQclear(r);
    PQclear(out);
    r = out = NULL;
    int64_t remaining = amount - spent - outstanding;
    g->spent = spent;
    int64_t want = rq->want > 0 ? rq->want : 0, need = rq->need > 0 ? rq->need : 0;
    if (want == 0) {
        /* A renewal: the replica's live leases in the window live on. */
        if (cp_db_cmd(db, SQL_RENEW, 3, p, &err) || cp_db_commit(db, &err))
            goto dberr;
        g->remaining = remaining;
        g->expires_at_ms = now_ms + CP_LEASES_TTL_MS;
        return GW_OK;
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
    if (!(r = cp_db_exec(db, NULL, SQL_INSERT, 4, p, &err)))
        goto dberr;
    snprintf(st->lease_id, sizeof(st->lease_id), "%s", PQgetvalue(r, 0, 0));
    g->expires_at_ms = num(r, 0, 1);
    PQclear(r);
    r = NULL;
    if (cp_db_commit(db, &err))
        goto dberr;
    g->amount = grant;
    g->remaining = remaining - grant;
    return GW_OK;
dberr:
    PQclear(r);
    PQclear(out);
    cp_db_rollback(db);
    gw_logf(GW_LOG_WARN, "lease grant failed: the replica's offline policy decides",
            "{s:s,s:s,s:s}", "limit", st->limit_id, "replica", replica, "error", err.message);
    refuse(g, st, "unallocated");
    return GW_EIO;
}

int cp_leases_ledger_grant(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRequest *rq,
                           Llmgw__V1__LeaseGrant *g)
{
    static __thread struct cp_lease_strings st;
    static __thread int64_t last_expire_us;
    int64_t now = gw_now_us();
    if (now - last_expire_us > (int64_t)CP_LEASES_EXPIRE_EVERY_MS * 1000) {
        last_expire_us = now;
        int expired = cp_leases_expire(db); /* a failure is logged; tried again later */
        (void)expired;
    }
    return cp_leases_grant(db, replica, rq, g, &st);
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

int cp_leases_expire(struct cp_db *db)
{
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, NULL,
                             "UPDATE limit_leases SET expired = true WHERE NOT expired AND "
                             "expires_at <= now()",
                             0, NULL, &err);
    if (!r)
        goto fail;
    int n = atoi(PQcmdTuples(r));
    PQclear(r);
    if (cp_db_cmd(db,
                  "DELETE FROM limit_leases WHERE expired AND expires_at < now() - interval "
                  "'2 days'",
                  0, NULL, &err) ||
        cp_db_cmd(db,
                  "DELETE FROM limit_windows w USING limits l WHERE l.id = w.limit_id AND "
                  "l.period = 'minute' AND w.window_start < now() - interval '2 days'",
                  0, NULL, &err))
        goto fail;
    return n;
fail:
    gw_logf(GW_LOG_WARN, "lease expiry failed", "{s:s}", "error", err.message);
    return GW_EIO;
}
