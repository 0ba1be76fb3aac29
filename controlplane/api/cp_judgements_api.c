#include "cp_judgements_api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cp_call.h"
#include "cp_db.h"
#include "cp_judgement.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_pool.h"
#include "gw_str.h"

#define LIMIT_DEFAULT 100
#define LIMIT_MAX 1000
/* With the text (up to 64 KiB each of prompt and answer), fewer a page:
 * the answer is built whole in memory. */
#define LIMIT_MAX_TEXT LIMIT_DEFAULT
#define MAX_GROUPS 10000
#define MAX_NAME 256       /* a route, model or provider (the writer cuts there) */
#define MAX_REQUEST_ID 512 /* as the writer takes them */

/* The string filters: each an exact match on its column. */
enum { F_ROUTE, F_MODEL, F_PROVIDER, F_REQUEST_ID, NFILTERS };
static const char *const filter_names[NFILTERS] = {"route", "model", "provider", "request_id"};

static const struct {
    const char *name;
    const char *sql;
} dims[] = {
    {"route", "route"},
    {"model", "model"},
    {"provider", "provider"},
    {"day", "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD')"},
};
#define NDIMS (sizeof(dims) / sizeof(dims[0]))

struct query {
    const char *filter[NFILTERS]; /* decoded, in the pool; NULL when absent */
    char from[48], to[48];        /* RFC 3339 (Unix ms converted); "" when absent */
    long long limit, offset;
    int include_text;
    int on[NDIMS]; /* summary: group by dims[i] */
};

static int digits(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

/* A time as RFC 3339 text into out: RFC 3339 as given (the shape checked
 * here, the values by PostgreSQL), or Unix milliseconds converted. 0, or
 * -1 when it is neither. */
static int parse_time(const char *v, char *out, size_t n)
{
    size_t len = strlen(v);
    if (len >= 1 && len <= 15 && digits(v, len)) {
        long long ms = strtoll(v, NULL, 10);
        time_t t = (time_t)(ms / 1000);
        struct tm tm;
        if (!gmtime_r(&t, &tm))
            return -1;
        snprintf(out, n, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
        return 0;
    }
    /* YYYY-MM-DD(T|t| )HH:MM:SS(.d+)?(Z|z|(+|-)HH:MM) */
    if (len < 20 || len >= n || !digits(v, 4) || v[4] != '-' || !digits(v + 5, 2) || v[7] != '-' ||
        !digits(v + 8, 2) || !strchr("Tt ", v[10]) || !digits(v + 11, 2) || v[13] != ':' ||
        !digits(v + 14, 2) || v[16] != ':' || !digits(v + 17, 2))
        return -1;
    size_t i = 19;
    if (v[i] == '.') {
        size_t j = i + 1;
        while (j < len && v[j] >= '0' && v[j] <= '9')
            j++;
        if (j == i + 1)
            return -1;
        i = j;
    }
    int zone = (len == i + 1 && (v[i] == 'Z' || v[i] == 'z')) ||
               (len == i + 6 && (v[i] == '+' || v[i] == '-') && digits(v + i + 1, 2) &&
                v[i + 3] == ':' && digits(v + i + 4, 2));
    if (!zone)
        return -1;
    memcpy(out, v, len + 1);
    return 0;
}

/* The group list of the summary: known names, each once. */
static int parse_group_by(const char *g, int on[NDIMS])
{
    for (const char *p = g; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        size_t k = 0;
        while (k < NDIMS && !(strlen(dims[k].name) == n && strncmp(dims[k].name, p, n) == 0))
            k++;
        if (k == NDIMS || on[k])
            return -1;
        on[k] = 1;
        p = comma ? comma + 1 : p + n;
    }
    return 0;
}

/* Reads the query string into q, or answers 400 naming the parameter and
 * returns -1. summary: the summary's parameters (group_by; no paging, no
 * text). */
static int parse_query(struct cp_call *c, int summary, struct query *q)
{
    memset(q, 0, sizeof(*q));
    q->limit = LIMIT_DEFAULT;
    /* The filters first, in filter_names' order, then the rest. */
    static const char *const list[] = {"route", "model", "provider", "request_id",   "from",
                                       "to",    "limit", "offset",   "include_text", NULL};
    static const char *const summ[] = {"route", "model", "provider", "request_id",
                                       "from",  "to",    "group_by", NULL};
    const char *v[sizeof(list) / sizeof(*list)];
    if (cp_call_query(c, summary ? summ : list, v) != 0)
        return -1;
    for (int k = 0; k < NFILTERS; k++) {
        size_t max = k == F_REQUEST_ID ? MAX_REQUEST_ID : MAX_NAME;
        /* Text already (cp_call_query): its length is left to check. */
        if (v[k] && (!*v[k] || strlen(v[k]) > max)) {
            cp_call_error(c, 400, "invalid_value", filter_names[k],
                          "%s: 1 to %zu bytes of UTF-8 without control characters", filter_names[k],
                          max);
            return -1;
        }
        q->filter[k] = v[k];
    }
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "to" : "from";
        char *out = i ? q->to : q->from;
        if (v[NFILTERS + i] && parse_time(v[NFILTERS + i], out, sizeof(q->from)) != 0) {
            out[0] = '\0';
            cp_call_error(c, 400, "invalid_value", name,
                          "%s: an RFC 3339 time (2026-12-04T00:00:00Z) or Unix milliseconds", name);
            return -1;
        }
    }
    if (summary) {
        if (v[6] && parse_group_by(v[6], q->on) != 0) {
            cp_call_error(c, 400, "invalid_value", "group_by",
                          "group_by: a comma list of route, model, provider, day, each at most "
                          "once");
            return -1;
        }
    } else {
        if (cp_call_query_int(c, "limit", v[6], LIMIT_DEFAULT, 1, LIMIT_MAX, &q->limit) != 0 ||
            cp_call_query_int(c, "offset", v[7], 0, 0, 999999999999LL, &q->offset) != 0)
            return -1;
        if (v[8] && strcmp(v[8], "true") && strcmp(v[8], "false")) {
            cp_call_error(c, 400, "invalid_value", "include_text", "include_text: true or false");
            return -1;
        }
        q->include_text = v[8] && v[8][0] == 't';
    }
    if (q->include_text && q->limit > LIMIT_MAX_TEXT) {
        cp_call_error(c, 400, "invalid_value", "limit", "limit: at most %d with include_text=true",
                      LIMIT_MAX_TEXT);
        return -1;
    }
    /* Each time is checked by the database on its own, so a bad one (the
     * 31st of February) is named. */
    const char *tn[2] = {"from", "to"};
    const char *tv[2] = {q->from, q->to};
    for (int i = 0; i < 2; i++) {
        if (!tv[i][0])
            continue;
        struct cp_db_err err;
        const char *p[] = {tv[i]};
        PGresult *r = cp_db_exec(c->db, c->pool, "SELECT $1::timestamptz", 1, p, &err);
        if (!r) {
            if (err.sqlstate[0] == '2' && err.sqlstate[1] == '2')
                cp_call_error(c, 400, "invalid_value", tn[i], "%s: not a valid time", tn[i]);
            else
                cp_call_db_error(c, &err);
            return -1;
        }
    }
    return 0;
}

/* The WHERE clause of q's filters into sql (appended), its parameters into
 * p from *np on. */
static void where(const struct query *q, char *sql, size_t n, const char **p, int *np)
{
    size_t l = strlen(sql);
    l += (size_t)snprintf(sql + l, n - l, " WHERE true");
    for (int i = 0; i < NFILTERS; i++)
        if (q->filter[i]) {
            p[*np] = q->filter[i];
            ++*np;
            l += (size_t)snprintf(sql + l, n - l, " AND %s = $%d", filter_names[i], *np);
        }
    if (q->from[0]) {
        p[(*np)++] = q->from;
        l += (size_t)snprintf(sql + l, n - l, " AND at >= $%d::timestamptz", *np);
    }
    if (q->to[0]) {
        p[(*np)++] = q->to;
        snprintf(sql + l, n - l, " AND at < $%d::timestamptz", *np);
    }
}

static json_t *text_or_null(const PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? json_null() : json_string(PQgetvalue(r, row, col));
}

/* A kept text opened into o[member]. 0; GW_EINVAL when it does not open
 * with this key (the row says so); GW_ENOMEM. */
static int open_text(json_t *o, const char *member, const struct cp_master_key *key,
                     const char *request_id, const char *part, const char *hex)
{
    char ref[MAX_REQUEST_ID + 32];
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    if (cp_judgement_ref(ref, sizeof(ref), request_id, part) != 0)
        return GW_EINVAL;
    int rc = cp_db_hex_decode(hex, &blob, &bloblen);
    if (rc != GW_OK)
        return rc == GW_ENOMEM ? rc : GW_EINVAL;
    char *pt = NULL;
    size_t n = 0;
    rc = cp_secret_open(key, ref, blob, bloblen, &pt, &n);
    free(blob);
    if (rc != GW_OK)
        return rc == GW_ENOMEM ? rc : GW_EINVAL;
    json_t *s = json_stringn(pt, n);
    cp_secret_free(pt, n);
    if (!s)
        return GW_EINVAL; /* not UTF-8: the writer stores only valid text */
    json_object_set_new(o, member, s);
    return GW_OK;
}

#define LIST_COLUMNS                                                                               \
    "request_id, attempt_id, judge_request_id, route, provider, model, key_id, team, project, "    \
    "judge_route, score, scale_min, scale_max, pass, label, "                                      \
    "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), snapshot_version"

void cp_judgements_list(struct cp_call *c, struct cp_db *db)
{
    if (!cp_call_method(c, "GET"))
        return;
    struct query q;
    if (parse_query(c, 0, &q) != 0)
        return;
    /* The judged text is the users' own words: only an admin token reads
     * it, and only with the key that sealed it. */
    if (q.include_text && c->scope != CP_SCOPE_ADMIN)
        return cp_call_error(c, 403, "forbidden", "include_text",
                             "include_text: the kept text needs a token of scope admin");
    if (q.include_text && !c->master_key)
        return cp_call_error(c, 503, "master_key_not_configured", "include_text",
                             "include_text: the kept text cannot be opened: the master key is "
                             "not configured (LLMGW_MASTER_KEY)");
    char sql[2048];
    snprintf(sql, sizeof(sql), "SELECT " LIST_COLUMNS "%s FROM judgements",
             q.include_text ? ", encode(prompt_enc, 'hex'), encode(answer_enc, 'hex')" : "");
    const char *p[NFILTERS + 4];
    int np = 0;
    where(&q, sql, sizeof(sql), p, &np);
    char lim[24], off[24];
    snprintf(lim, sizeof(lim), "%lld", q.limit);
    snprintf(off, sizeof(off), "%lld", q.offset);
    p[np++] = lim;
    p[np++] = off;
    size_t l = strlen(sql);
    snprintf(sql + l, sizeof(sql) - l, " ORDER BY at DESC, request_id DESC LIMIT $%d OFFSET $%d",
             np - 1, np);
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, c->pool, sql, np, p, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    json_t *arr = json_array();
    static const char *const texts[] = {"request_id", "attempt_id", "judge_request_id", "route",
                                        "provider",   "model",      "key_id",           "team",
                                        "project",    "judge_route"};
    for (int i = 0; arr && i < PQntuples(r); i++) {
        json_t *o = json_object();
        if (!o)
            break;
        int col = 0;
        for (size_t t = 0; t < sizeof(texts) / sizeof(*texts); t++, col++)
            json_object_set_new(o, texts[t], text_or_null(r, i, col));
        static const char *const ints[] = {"score", "scale_min", "scale_max"};
        for (size_t t = 0; t < 3; t++, col++)
            json_object_set_new(o, ints[t], json_integer(atoll(PQgetvalue(r, i, col))));
        json_object_set_new(o, "pass", json_boolean(PQgetvalue(r, i, col++)[0] == 't'));
        json_object_set_new(o, "label", text_or_null(r, i, col++));
        json_object_set_new(o, "at", json_string(PQgetvalue(r, i, col++)));
        json_object_set_new(o, "snapshot_version", json_integer(atoll(PQgetvalue(r, i, col++))));
        for (int t = 0; q.include_text && t < 2; t++, col++) {
            if (PQgetisnull(r, i, col))
                continue;
            int rc = open_text(o, t ? "answer_text" : "prompt_text", c->master_key,
                               PQgetvalue(r, i, 0), t ? "answer" : "prompt", PQgetvalue(r, i, col));
            if (rc == GW_ENOMEM) {
                json_decref(o);
                json_decref(arr);
                return cp_call_error(c, 500, "internal", NULL, "out of memory");
            }
            if (rc != GW_OK)
                json_object_set_new(o, "text_error",
                                    json_string("the kept text does not open with this master "
                                                "key (sealed under another, or altered)"));
        }
        json_array_append_new(arr, o);
    }
    if (!arr)
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    cp_call_json(c, 200, json_pack("{s:o}", "judgements", arr), 0);
}

void cp_judgements_summary(struct cp_call *c, struct cp_db *db)
{
    if (!cp_call_method(c, "GET"))
        return;
    struct query q;
    if (parse_query(c, 1, &q) != 0)
        return;
    char grp[512] = "";
    size_t gl = 0, ndims = 0;
    for (size_t k = 0; k < NDIMS; k++)
        if (q.on[k]) {
            gl += (size_t)snprintf(grp + gl, sizeof(grp) - gl, "%s%s", ndims ? ", " : "",
                                   dims[k].sql);
            ndims++;
        }
    char sql[2048];
    snprintf(sql, sizeof(sql),
             "SELECT %s%scount(*), avg(score)::float8, avg(pass::int)::float8, "
             "avg((score - scale_min)::float8 / (scale_max - scale_min)) "
             "FROM judgements",
             grp, ndims ? ", " : "");
    const char *p[NFILTERS + 2];
    int np = 0;
    where(&q, sql, sizeof(sql), p, &np);
    size_t l = strlen(sql);
    if (ndims)
        snprintf(sql + l, sizeof(sql) - l, " GROUP BY %s ORDER BY %s LIMIT %d", grp, grp,
                 MAX_GROUPS + 1);
    else
        snprintf(sql + l, sizeof(sql) - l, " HAVING count(*) > 0");
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, c->pool, sql, np, p, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    int rows = PQntuples(r);
    if (rows > MAX_GROUPS)
        return cp_call_error(c, 422, "too_many_groups", "group_by",
                             "more than %d groups: narrow the time range or group by less",
                             MAX_GROUPS);
    json_t *groups = json_array();
    for (int i = 0; groups && i < rows; i++) {
        json_t *o = json_object();
        if (!o)
            break;
        int col = 0;
        for (size_t k = 0; k < NDIMS; k++)
            if (q.on[k])
                json_object_set_new(o, dims[k].name, text_or_null(r, i, col++));
        json_object_set_new(o, "count", json_integer(atoll(PQgetvalue(r, i, col++))));
        static const char *const means[] = {"mean_score", "pass_rate", "mean_normalized"};
        for (size_t m = 0; m < 3; m++, col++)
            json_object_set_new(o, means[m], json_real(strtod(PQgetvalue(r, i, col), NULL)));
        json_array_append_new(groups, o);
    }
    if (!groups)
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    cp_call_json(c, 200, json_pack("{s:o}", "groups", groups), 0);
}
