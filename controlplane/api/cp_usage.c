/*
 * GET /v1/admin/usage: the ledger summed over a time range, grouped
 * (docs/ledger.md).
 *
 *   from, to   RFC 3339 times (default: the last 30 days); rows with
 *              from <= at < to, at being the attempt's start
 *   group_by   a comma list of key, team, project, route, provider, model,
 *              agent, purpose, day (UTC); currency is always a group: sums
 *              never mix currencies
 *
 * A group's cache_hits counts its rows served from the response cache
 * (cost and tokens 0), saved_picodollars sums what their originals cost
 * (a hit whose original cost was unknown adds nothing).
 * audio_ms, characters and images sum the media attempts' units (input
 * audio, speech characters, images answered; 0 on every other row).
 *
 * Every sum is exact: the database sums bigints as numerics, and a sum past
 * int64 picodollars is refused (422), never wrapped. totals (one per
 * currency) are the sums of the groups' figures, so they equal the sum of
 * the rows by construction.
 */
#include "cp_usage.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cp_call.h"
#include "cp_db.h"
#include "cp_leases.h"
#include "gw_http.h"

#define MAX_GROUPS 10000

static const struct {
    const char *name;
    const char *sql;
} dims[] = {
    {"key", "key_id"},
    {"team", "team"},
    {"project", "project"},
    {"route", "route"},
    {"provider", "provider"},
    {"model", "model"},
    {"agent", "agent"},
    {"purpose", "purpose"},
    {"day", "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"},
};
#define NDIMS (sizeof(dims) / sizeof(dims[0]))

/* The summed columns, after the group's dimensions and currency. */
static const char *const sums[] = {
    "attempts",
    "requests",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cost_picodollars",
    "unpriced_attempts",
    "estimated_attempts",
    "cache_hits",
    "saved_picodollars",
    "audio_ms",
    "characters",
    "images",
};
#define NSUMS (sizeof(sums) / sizeof(sums[0]))

/* The raw (still %-encoded) value of query parameter name, or NULL. */
static const char *param(const char *q, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    for (const char *p = q; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t l = amp ? (size_t)(amp - p) : strlen(p);
        if (l >= nl + 1 && strncmp(p, name, nl) == 0 && p[nl] == '=') {
            *len = l - nl - 1;
            return p + nl + 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return NULL;
}

/* A time parameter, %-decoded into out; 0, or -1 when it has characters no
 * RFC 3339 time has (the database checks the rest). */
static int time_param(const char *q, const char *name, char *out, size_t n)
{
    size_t len;
    const char *v = param(q, name, &len);
    out[0] = '\0';
    if (!v)
        return 0;
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = v[i];
        /* ':' and '+' may come %-encoded (%3A, %2B). */
        if (ch == '%' && i + 2 < len) {
            char hex[3] = {v[i + 1], v[i + 2], 0};
            ch = strcasecmp(hex, "3A") == 0 ? ':' : strcasecmp(hex, "2B") == 0 ? '+' : '%';
            i += 2;
        }
        if (!ch || !strchr("0123456789-:T.Z+tz", ch) || o + 1 >= n)
            return -1;
        out[o++] = ch;
    }
    out[o] = '\0';
    return o ? 0 : -1;
}

/* int64 from a sum's text; -1 past int64 (or not a number). */
static int to_i64(const char *s, long long *v)
{
    char *end;
    errno = 0;
    *v = strtoll(s && *s ? s : "0", &end, 10);
    return errno || *end ? -1 : 0;
}

void cp_usage_handle(struct cp_call *c, struct cp_db *db)
{
    if (!cp_call_method(c, "GET"))
        return;
    const char *q = gw_http_req_query(c->req);
    char from[64], to[64];
    if (time_param(q, "from", from, sizeof(from)))
        return cp_call_error(c, 400, "invalid_value", "from",
                             "from: must be an RFC 3339 time, e.g. 2026-11-01T00:00:00Z");
    if (time_param(q, "to", to, sizeof(to)))
        return cp_call_error(c, 400, "invalid_value", "to",
                             "to: must be an RFC 3339 time, e.g. 2026-12-01T00:00:00Z");
    /* The group list: known names, each once. */
    int on[NDIMS] = {0};
    size_t glen;
    const char *g = param(q, "group_by", &glen);
    for (size_t i = 0; g && i < glen;) {
        size_t j = i;
        while (j < glen && g[j] != ',' &&
               !(g[j] == '%' && j + 2 < glen && g[j + 1] == '2' &&
                 (g[j + 2] == 'C' || g[j + 2] == 'c')))
            j++;
        size_t k = 0;
        while (k < NDIMS &&
               !(strlen(dims[k].name) == j - i && strncmp(dims[k].name, g + i, j - i) == 0))
            k++;
        if (k == NDIMS || on[k])
            return cp_call_error(c, 400, "invalid_value", "group_by",
                                 "group_by: a comma list of key, team, project, route, provider, "
                                 "model, agent, purpose, day, each at most once");
        on[k] = 1;
        i = j + (j < glen && g[j] == '%' ? 3 : 1);
    }
    /* Each time is checked on its own, so a bad one is named. */
    const char *names[2] = {"from", "to"};
    const char *vals[2] = {from, to};
    for (int i = 0; i < 2; i++) {
        if (!vals[i][0])
            continue;
        struct cp_db_err err;
        const char *p[] = {vals[i]};
        PGresult *r = cp_db_exec(db, c->pool, "SELECT $1::timestamptz", 1, p, &err);
        if (!r) {
            if (err.sqlstate[0] == '2' && err.sqlstate[1] == '2')
                return cp_call_error(c, 400, "invalid_value", names[i],
                                     "%s: not a time PostgreSQL reads (use RFC 3339)", names[i]);
            return cp_call_db_error(c, &err);
        }
    }
    char sel[1024] = "", grp[1024] = "";
    size_t sl = 0, gl = 0;
    for (size_t k = 0; k < NDIMS; k++)
        if (on[k]) {
            sl += (size_t)snprintf(sel + sl, sizeof(sel) - sl, "%s, ", dims[k].sql);
            gl += (size_t)snprintf(grp + gl, sizeof(grp) - gl, "%s, ", dims[k].sql);
        }
    char sql[4096];
    snprintf(sql, sizeof(sql),
             "SELECT %scurrency, count(*)::text, count(DISTINCT request_id)::text, "
             "sum(input_tokens)::text, sum(cache_read_tokens)::text, "
             "sum(cache_write_5m_tokens)::text, sum(cache_write_1h_tokens)::text, "
             "sum(output_tokens)::text, sum(reasoning_tokens)::text, "
             "coalesce(sum(cost_picodollars), 0)::text, "
             "count(*) FILTER (WHERE cost_picodollars IS NULL)::text, "
             "count(*) FILTER (WHERE usage_estimated)::text, "
             "count(*) FILTER (WHERE cache_hit)::text, "
             "coalesce(sum(saved_picodollars) FILTER (WHERE cache_hit), 0)::text, "
             "sum(audio_ms)::text, sum(characters)::text, sum(images)::text "
             "FROM ledger WHERE at >= coalesce(nullif($1, '')::timestamptz, now() - interval "
             "'30 days') AND at < coalesce(nullif($2, '')::timestamptz, now()) "
             "GROUP BY %scurrency ORDER BY %scurrency LIMIT %d",
             sel, grp, grp, MAX_GROUPS + 1);
    const char *p[] = {from, to};
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, c->pool, sql, 2, p, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    int rows = PQntuples(r);
    if (rows > MAX_GROUPS)
        return cp_call_error(c, 422, "too_many_groups", "group_by",
                             "more than %d groups: narrow the time range or group by less",
                             MAX_GROUPS);
    size_t ndims = 0;
    for (size_t k = 0; k < NDIMS; k++)
        ndims += (size_t)on[k];
    json_t *groups = json_array();
    json_t *totals = json_object(); /* currency -> sums */
    for (int i = 0; groups && totals && i < rows; i++) {
        json_t *o = json_object();
        size_t col = 0;
        for (size_t k = 0; k < NDIMS; k++)
            if (on[k]) {
                json_object_set_new(o, dims[k].name,
                                    PQgetisnull(r, i, (int)col)
                                        ? json_null()
                                        : json_string(PQgetvalue(r, i, (int)col)));
                col++;
            }
        const char *cur = PQgetvalue(r, i, (int)ndims);
        json_object_set_new(o, "currency", json_string(cur));
        json_t *t = json_object_get(totals, cur);
        if (!t) {
            t = json_pack("{s:s}", "currency", cur);
            json_object_set_new(totals, cur, t);
        }
        for (size_t s = 0; s < NSUMS; s++) {
            long long v, acc;
            if (to_i64(PQgetvalue(r, i, (int)(ndims + 1 + s)), &v) ||
                __builtin_add_overflow(json_integer_value(json_object_get(t, sums[s])), v, &acc)) {
                json_decref(o);
                json_decref(groups);
                json_decref(totals);
                return cp_call_error(c, 422, "sum_overflow", NULL,
                                     "%s: a sum passes the int64 range; narrow the time range "
                                     "or group finer",
                                     sums[s]);
            }
            json_object_set_new(o, sums[s], json_integer(v));
            if (strcmp(sums[s], "requests") != 0) /* distinct per group: not additive */
                json_object_set_new(t, sums[s], json_integer(acc));
        }
        json_array_append_new(groups, o);
    }
    json_t *tot = json_array();
    const char *k;
    json_t *v;
    json_object_foreach(totals, k, v) json_array_append(tot, v);
    json_decref(totals);
    json_t *body =
        json_pack("{s:o,s:o,s:o,s:o}", "from", from[0] ? json_string(from) : json_null(), "to",
                  to[0] ? json_string(to) : json_null(), "groups", groups, "totals", tot);
    cp_call_json(c, 200, body, 0);
}

/* 1 when v is a request id: 1 to 128 of A-Z a-z 0-9 - _ . ~ : */
static int request_id_ok(const char *v)
{
    size_t len = strlen(v);
    int ok = len > 0 && len <= 128;
    for (size_t i = 0; ok && i < len; i++)
        ok = (v[i] >= '0' && v[i] <= '9') || (v[i] >= 'a' && v[i] <= 'z') ||
             (v[i] >= 'A' && v[i] <= 'Z') || strchr("-_.~:", v[i]);
    return ok;
}

void cp_usage_ledger_handle(struct cp_call *c, struct cp_db *db)
{
    if (!cp_call_method(c, "GET"))
        return;
    /* The filters first (each a column), then the paging. */
    static const char *const names[] = {"request_id", "key_id", "route",  "provider", "model",
                                        "status",     "limit",  "offset", NULL};
    enum { NFILTER = 6 };
    const char *v[sizeof(names) / sizeof(*names)];
    if (cp_call_query(c, names, v) != 0)
        return;
    if (v[0] && !request_id_ok(v[0]))
        return cp_call_error(c, 400, "invalid_value", "request_id",
                             "request_id: 1 to 128 of A-Z a-z 0-9 - _ . ~ :");
    for (int i = 1; i < 5; i++)
        if (v[i] && (!*v[i] || strlen(v[i]) > 256))
            return cp_call_error(c, 400, "invalid_value", names[i], "%s: 1 to 256 bytes", names[i]);
    long long status, limit, offset;
    if (cp_call_query_int(c, "status", v[5], 0, 100, 599, &status) ||
        cp_call_query_int(c, "limit", v[6], 100, 1, 1000, &limit) ||
        cp_call_query_int(c, "offset", v[7], 0, 0, 1LL << 40, &offset))
        return;
    char sql[2048], lim[24], off[24];
    snprintf(lim, sizeof(lim), "%lld", limit);
    snprintf(off, sizeof(off), "%lld", offset);
    const char *p[NFILTER + 2];
    int np = 0;
    size_t o = (size_t)snprintf(
        sql, sizeof(sql),
        "SELECT coalesce(json_agg(r ORDER BY %s), '[]')::text FROM ("
        "SELECT at, request_id, attempt, attempt_id, replica, key_id, team, project, route, "
        "provider, model, selector, agent, purpose, api, stream, status, failure_class, "
        "input_tokens, cache_read_tokens, cache_write_5m_tokens, cache_write_1h_tokens, "
        "output_tokens, reasoning_tokens, cost_picodollars, currency, usage_estimated, "
        "cache_hit, saved_picodollars, audio_ms, characters, images, latency_ms, ttfb_ms, "
        "ttfc_ms, snapshot_version FROM ledger WHERE true",
        /* One request: its attempts in order. Otherwise the newest first. */
        v[0] ? "r.attempt, r.at" : "r.at DESC, r.request_id, r.attempt");
    for (int i = 0; i < NFILTER; i++) {
        if (!v[i])
            continue;
        p[np++] = v[i];
        o += (size_t)snprintf(sql + o, sizeof(sql) - o, " AND %s = $%d%s", names[i], np,
                              i == 5 ? "::int" : "");
    }
    p[np++] = lim;
    p[np++] = off;
    snprintf(sql + o, sizeof(sql) - o, " ORDER BY %s LIMIT $%d OFFSET $%d) r",
             v[0] ? "attempt, at" : "at DESC, request_id, attempt", np - 1, np);
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, c->pool, sql, np, p, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    json_t *rows = json_loads(cp_db_value(r), 0, NULL);
    json_t *out = json_pack("{s:o}", "data", rows ? rows : json_array());
    if (out && v[0])
        json_object_set_new(out, "request_id", json_string(v[0]));
    cp_call_json(c, 200, out, 0);
}

void cp_usage_windows_handle(struct cp_call *c, struct cp_db *db)
{
    static const char *const names[] = {NULL};
    const char *v[1];
    if (!cp_call_method(c, "GET") || cp_call_query(c, names, v) != 0)
        return;
    struct cp_db_err err;
    PGresult *r = cp_db_exec(
        db, c->pool,
        "SELECT coalesce(json_agg(x ORDER BY x.id), '[]')::text FROM (SELECT l.id, l.scope_kind, "
        "l.scope, l.metric, l.period, l.amount, l.currency, l.enabled, "
        "l.offline, " CP_WINDOW_NOW_SQL(
            "l.period") " AS window_start, coalesce(w.spent, 0) AS spent "
                        "FROM limits l LEFT JOIN limit_windows w ON w.limit_id = l.id AND "
                        "w.window_start = " CP_WINDOW_NOW_SQL("l.period") ") x",
        0, NULL, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    json_t *rows = json_loads(cp_db_value(r), 0, NULL);
    cp_call_json(c, 200, json_pack("{s:o}", "data", rows ? rows : json_array()), 0);
}
