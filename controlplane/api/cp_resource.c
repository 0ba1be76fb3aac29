#include "cp_resource.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_metrics.h"
#include "cp_trace.h"
#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_money.h"
#include "gw_pool.h"

/* Members a client may send back unchanged (a GET's body, edited) and that
 * the server alone sets. "version" is read as the expected version. */
static const char *const server_fields[] = {"version", "created_at", "updated_at"};

#define SQL_MAX (16u << 10)

static void decref(void *j)
{
    json_decref(j);
}

/* Hands j to the request's pool (released when the request ends). */
static json_t *own(struct cp_call *c, json_t *j)
{
    if (j && gw_pool_cleanup(c->pool, decref, j) != GW_OK) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static const struct cp_field *find_field(const struct cp_resource *r, const char *name)
{
    for (size_t i = 0; i < r->nfields; i++)
        if (strcmp(r->fields[i].name, name) == 0)
            return &r->fields[i];
    return NULL;
}

static int is_server_field(const char *name)
{
    for (size_t i = 0; i < sizeof(server_fields) / sizeof(*server_fields); i++)
        if (strcmp(server_fields[i], name) == 0)
            return 1;
    return 0;
}

/* ---- SQL text, from the declarations only (never from request data) ---- */

/* "(to_jsonb(t) - 'hidden1' - ...) || extra": the row as the API shows it. */
static const char *projection(struct cp_call *c, const struct cp_resource *r)
{
    struct gw_buf b;
    gw_buf_init(&b, SQL_MAX);
    int rc = gw_buf_appends(&b, "(to_jsonb(t)");
    for (size_t i = 0; rc == GW_OK && i < r->nfields; i++)
        if (r->fields[i].flags & CP_F_HIDDEN)
            rc = gw_buf_printf(&b, " - '%s'", r->fields[i].name);
    if (rc == GW_OK)
        rc = gw_buf_appends(&b, ")");
    if (rc == GW_OK && r->extra_sql)
        rc = gw_buf_printf(&b, " || (%s)", r->extra_sql);
    const char *s = rc == GW_OK ? gw_pool_strndup(c->pool, b.data, b.len) : NULL;
    gw_buf_free(&b);
    return s;
}

/* The row's key as SQL over t. */
static const char *key_sql(struct cp_call *c, const struct cp_resource *r)
{
    return r->key_sql ? r->key_sql : gw_pool_printf(c->pool, "t.%s", r->fields[0].name);
}

/* The key of a row (or composed object): its CP_F_KEY fields joined by '/'. */
static const char *row_key(struct cp_call *c, const struct cp_resource *r, const json_t *row)
{
    const char *k = NULL;
    for (size_t i = 0; i < r->nfields; i++) {
        if (!(r->fields[i].flags & CP_F_KEY))
            continue;
        json_t *v = json_object_get(row, r->fields[i].name);
        const char *part = json_is_string(v) ? json_string_value(v)
                           : json_is_integer(v)
                               ? gw_pool_printf(c->pool, "%lld", (long long)json_integer_value(v))
                               : "";
        k = k ? gw_pool_printf(c->pool, "%s/%s", k, part) : part;
    }
    return k ? k : "";
}

/* The columns a write sets: every stored field, hidden and server ones
 * only when obj carries them, the key only when with_key. */
static const char *columns(struct cp_call *c, const struct cp_resource *r, const json_t *obj,
                           int with_key)
{
    struct gw_buf b;
    gw_buf_init(&b, SQL_MAX);
    int rc = GW_OK;
    for (size_t i = 0; rc == GW_OK && i < r->nfields; i++) {
        const struct cp_field *f = &r->fields[i];
        if (((f->flags & CP_F_KEY) && !with_key) || (f->flags & CP_F_VIRTUAL))
            continue;
        if ((f->flags & (CP_F_HIDDEN | CP_F_SERVER)) && !json_object_get(obj, f->name))
            continue;
        rc = gw_buf_printf(&b, "%s%s", b.len ? ", " : "", f->name);
    }
    const char *s = rc == GW_OK && b.len ? gw_pool_strndup(c->pool, b.data, b.len) : NULL;
    gw_buf_free(&b);
    return s;
}

static const char *dump(struct cp_call *c, const json_t *j)
{
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!s)
        return NULL;
    char *p = gw_pool_strdup(c->pool, s);
    free(s);
    return p;
}

/* The first column of the first row as JSON (owned by the request), or
 * NULL when there is no row. */
static json_t *row_json(struct cp_call *c, PGresult *res)
{
    const char *v = cp_db_value(res);
    return v ? own(c, json_loads(v, JSON_DECODE_ANY, NULL)) : NULL;
}

/* ---- validation ---- */

static int name_ok(const char *s, size_t n)
{
    if (n == 0 || n > 128)
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '/' || ch <= ' ' || ch == 0x7f)
            return 0;
    }
    return 1;
}

/* A price per token: an integer count of picodollars, or a decimal string
 * of USD that is an exact number of them (gw_money_parse: "0.000002",
 * "2e-6"), 0 to 10^12 (a dollar a token) either way. GW_EINVAL otherwise. */
int cp_money_value(const json_t *v, long long *out)
{
    int64_t pico;
    if (json_is_integer(v))
        pico = json_integer_value(v);
    else if (!json_is_string(v) ||
             gw_money_parse(json_string_value(v), json_string_length(v), &pico, NULL) != GW_OK)
        return GW_EINVAL;
    if (pico < 0 || pico > GW_PICO_PER_UNIT)
        return GW_EINVAL;
    *out = pico;
    return GW_OK;
}

static int check_field(struct cp_call *c, const struct cp_field *f, const json_t *v,
                       struct cp_verr *e)
{
    const char *n = f->name;
    if (json_is_null(v)) {
        if (f->flags & CP_F_NULLABLE)
            return GW_OK;
        return cp_verr_set(e, 400, "invalid_value", n, "%s: must not be null", n);
    }
    switch (f->type) {
    case CP_T_STRING: {
        if (!json_is_string(v))
            return cp_verr_set(e, 400, "invalid_type", n, "%s: must be a string", n);
        const char *s = json_string_value(v);
        size_t len = json_string_length(v);
        size_t max = f->max > 0 ? (size_t)f->max : 2048;
        if ((f->flags & CP_F_NAME) && !name_ok(s, len))
            return cp_verr_set(e, 400, "invalid_value", n,
                               "%s: must be 1 to 128 characters without '/', spaces or control "
                               "characters",
                               n);
        if (len > max)
            return cp_verr_set(e, 400, "invalid_value", n, "%s: must be at most %zu characters", n,
                               max);
        if (f->choices) {
            const char *const *ch = f->choices;
            for (; *ch; ch++)
                if (strcmp(*ch, s) == 0)
                    break;
            if (!*ch)
                return cp_verr_set(e, 400, "invalid_value", n, "%s: '%s' is not allowed: %s", n, s,
                                   f->rule ? f->rule : "not one of the allowed values");
        }
        break;
    }
    case CP_T_BOOL:
        if (!json_is_boolean(v))
            return cp_verr_set(e, 400, "invalid_type", n, "%s: must be true or false", n);
        break;
    case CP_T_INT:
        if (!json_is_integer(v) || json_integer_value(v) < f->min || json_integer_value(v) > f->max)
            return cp_verr_set(e, 400, json_is_integer(v) ? "invalid_value" : "invalid_type", n,
                               "%s: must be an integer from %lld to %lld", n, f->min, f->max);
        break;
    case CP_T_OBJECT:
        if (!json_is_object(v))
            return cp_verr_set(e, 400, "invalid_type", n, "%s: must be an object", n);
        break;
    case CP_T_ARRAY:
        if (!json_is_array(v))
            return cp_verr_set(e, 400, "invalid_type", n, "%s: must be an array", n);
        break;
    case CP_T_MONEY: {
        long long pico;
        if (cp_money_value(v, &pico) == GW_OK)
            break;
        const char *unit = f->rule ? f->rule : "token";
        return cp_verr_set(
            e, 400, json_is_integer(v) || json_is_string(v) ? "invalid_value" : "invalid_type", n,
            "%s: must be an integer number of picodollars per %s from 0 to "
            "10^12, or a decimal string of USD per %s that is an exact number "
            "of picodollars (\"0.000002\", \"2e-6\"); floats are refused",
            n, unit, unit);
    }
    case CP_T_STRLIST: {
        size_t i;
        json_t *s;
        if (!json_is_array(v))
            return cp_verr_set(e, 400, "invalid_type", n,
                               "%s: must be an array of non-empty strings", n);
        json_array_foreach(v, i, s)
        {
            if (!json_is_string(s) || json_string_length(s) == 0 || json_string_length(s) > 2048)
                return cp_verr_set(e, 400, "invalid_value", n,
                                   "%s[%zu]: must be a non-empty string (at most 2048 bytes)", n,
                                   i);
        }
        break;
    }
    }
    return f->check ? f->check(c, n, v, e) : GW_OK;
}

/*
 * The object a create or update writes: base (the current row, for PATCH)
 * or the declared defaults (create, PUT), then the body's members. The key
 * comes from key (updates) or the body (create). Fills e on a refusal.
 */
static json_t *compose(struct cp_call *c, const struct cp_resource *r, const json_t *body,
                       const json_t *base, const char *key, struct cp_verr *e)
{
    json_t *obj = own(c, json_object());
    if (!obj) {
        cp_verr_set(e, 500, "internal", NULL, "out of memory");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        const struct cp_field *f = find_field(r, k);
        if (is_server_field(k) || (f && (f->flags & CP_F_SERVER)))
            continue;
        if (!f || (f->flags & CP_F_HIDDEN)) {
            cp_verr_set(e, 400, "unknown_field", k, "%s: unknown field for a %s", k, r->singular);
            return NULL;
        }
    }
    for (size_t i = 0; i < r->nfields; i++) {
        const struct cp_field *f = &r->fields[i];
        json_t *val = json_object_get(body, f->name);
        if (f->flags & (CP_F_HIDDEN | CP_F_SERVER))
            continue;
        if ((f->flags & CP_F_KEY) && key) {
            /* Two key fields: "<first>/<second>", split at the first '/'. */
            const char *part = key;
            const char *slash = r->key_sql ? strchr(key, '/') : NULL;
            if (slash)
                part = f == &r->fields[0] ? gw_pool_strndup(c->pool, key, (size_t)(slash - key))
                                          : slash + 1;
            if (!part) {
                cp_verr_set(e, 500, "internal", NULL, "out of memory");
                return NULL;
            }
            if (val && !(json_is_string(val) && strcmp(json_string_value(val), part) == 0)) {
                cp_verr_set(e, 400, "immutable_field", f->name,
                            "%s: cannot be changed (it names the %s; create a new one instead)",
                            f->name, r->singular);
                return NULL;
            }
            json_object_set_new(obj, f->name, json_string(part));
            continue;
        }
        if (val)
            json_object_set(obj, f->name, val);
        else if (base && json_object_get(base, f->name))
            json_object_set(obj, f->name, json_object_get(base, f->name));
        else if (f->def)
            json_object_set_new(obj, f->name, json_loads(f->def, JSON_DECODE_ANY, NULL));
        else if (f->flags & CP_F_REQUIRED) {
            cp_verr_set(e, 400, "missing_field", f->name, "%s: is required", f->name);
            return NULL;
        } else
            json_object_set_new(obj, f->name, json_null());
    }
    return obj;
}

static int validate(struct cp_call *c, const struct cp_resource *r, json_t *obj, struct cp_verr *e)
{
    for (size_t i = 0; i < r->nfields; i++) {
        const struct cp_field *f = &r->fields[i];
        json_t *v = json_object_get(obj, f->name);
        if (v && check_field(c, f, v, e) != GW_OK)
            return GW_EINVAL;
        long long pico;
        /* Money is stored as the integer the decimal string names exactly. */
        if (v && f->type == CP_T_MONEY && json_is_string(v) && cp_money_value(v, &pico) == GW_OK)
            json_object_set_new(obj, f->name, json_integer(pico));
    }
    return r->check ? r->check(c, obj, e) : GW_OK;
}

/* ---- bookkeeping ---- */

int cp_resource_record(struct cp_call *c, const char *resource, const char *action, const char *id,
                       const json_t *before, const json_t *after, long long *version,
                       struct cp_db_err *err)
{
    PGresult *res = cp_db_exec(c->db, c->pool,
                               "UPDATE config_state SET version = version + 1, updated_at = now() "
                               "WHERE id = 1 RETURNING version",
                               0, NULL, err);
    const char *ver = cp_db_value(res);
    if (!ver)
        return GW_EIO;
    const char *p[] = {c->actor, action, resource, id, ver, dump(c, before), dump(c, after)};
    res = cp_db_exec(c->db, c->pool,
                     "INSERT INTO audit_log (actor, action, resource, resource_id, "
                     "config_version, before, after) VALUES ($1, $2, $3, $4, $5, $6::jsonb, "
                     "$7::jsonb) RETURNING id",
                     7, p, err);
    const char *audit_id = cp_db_value(res);
    if (!audit_id)
        return GW_EIO;
    /* Delivered at COMMIT, to every listening replica, or not at all. */
    if (cp_db_cmd(c->db, "SELECT pg_notify('llmgw_config', $1)", 1, p + 4, err))
        return GW_EIO;
    *version = strtoll(ver, NULL, 10);
    /* The request's span names them; the build that takes the version in
     * finds the span (before the COMMIT: the builder may hear it first). */
    c->audit_id = strtoll(audit_id, NULL, 10);
    c->config_version = *version;
    if (c->tracer)
        cp_trace_remember(c->tracer, *version, &c->span);
    gw_logf(GW_LOG_INFO, "admin write", "{s:s,s:s,s:s,s:s,s:I}", "actor", c->actor, "action",
            action, "resource", resource, "id", id, "config_version", (json_int_t)*version);
    return GW_OK;
}

void cp_resource_rolled_back(struct cp_call *c)
{
    if (c->tracer && c->config_version)
        cp_trace_forget(c->tracer, c->config_version, &c->span);
    c->audit_id = c->config_version = 0;
}

/* The end of every write: its audit row, version bump and notification,
 * then the commit. Returns nonzero after rolling back and answering. */
static int record_and_commit(struct cp_call *c, const struct cp_resource *r, const char *action,
                             const char *key, const json_t *before, const json_t *after)
{
    struct cp_db_err err;
    long long version;
    if (cp_resource_record(c, r->name, action, key, before, after, &version, &err) ||
        cp_db_commit(c->db, &err)) {
        cp_db_rollback(c->db);
        cp_resource_rolled_back(c);
        cp_call_db_error(c, &err);
        return 1;
    }
    cp_metrics_audit_rows(1);
    return 0;
}

/* ---- handlers ---- */

static long long row_version(const json_t *row)
{
    json_t *v = json_object_get(row, "version");
    return json_is_integer(v) ? (long long)json_integer_value(v) : 0;
}

/* If-Match: absent or "*": 0 with *v = 0; "N", W/"N" or N: 0 with *v = N;
 * anything else GW_EINVAL. */
static int if_match(struct cp_call *c, long long *v)
{
    const char *h = gw_http_req_header(c->req, "If-Match");
    *v = 0;
    if (!h)
        return GW_OK;
    while (*h == ' ')
        h++;
    if (strcmp(h, "*") == 0)
        return GW_OK;
    if (strncmp(h, "W/", 2) == 0)
        h += 2;
    int quoted = *h == '"';
    h += quoted;
    char *end;
    errno = 0;
    long long n = strtoll(h, &end, 10);
    if (errno || end == h || n <= 0)
        return GW_EINVAL;
    if (quoted && *end++ != '"')
        return GW_EINVAL;
    while (*end == ' ')
        end++;
    if (*end)
        return GW_EINVAL;
    *v = n;
    return GW_OK;
}

static void not_found(struct cp_call *c, const struct cp_resource *r, const char *key)
{
    cp_call_error(c, 404, "not_found", NULL, "no %s named '%s'", r->singular, key);
}

static void list(struct cp_call *c, const struct cp_resource *r)
{
    struct cp_db_err err;
    const char *proj = projection(c, r);
    const char *sql = proj ? gw_pool_printf(c->pool,
                                            "SELECT coalesce(jsonb_agg(%s ORDER BY %s), "
                                            "'[]'::jsonb) FROM %s t",
                                            proj, key_sql(c, r), r->table)
                           : NULL;
    if (!sql)
        return cp_call_error(c, 500, "internal", NULL, "out of memory");
    PGresult *res = cp_db_exec(c->db, c->pool, sql, 0, NULL, &err);
    if (!res)
        return cp_call_db_error(c, &err);
    json_t *rows = row_json(c, res);
    cp_call_json(c, 200, json_pack("{s:O}", "data", rows ? rows : json_array()), 0);
}

/* The row (owned by the request) or NULL; *failed set on a database error
 * (already answered). lock adds FOR UPDATE. */
static json_t *fetch(struct cp_call *c, const struct cp_resource *r, const char *key, int lock,
                     int *failed)
{
    struct cp_db_err err;
    const char *proj = projection(c, r);
    const char *sql = proj ? gw_pool_printf(c->pool, "SELECT %s FROM %s t WHERE %s = $1%s", proj,
                                            r->table, key_sql(c, r), lock ? " FOR UPDATE" : "")
                           : NULL;
    *failed = 0;
    if (!sql) {
        *failed = 1;
        cp_call_error(c, 500, "internal", NULL, "out of memory");
        return NULL;
    }
    const char *p[] = {key};
    PGresult *res = cp_db_exec(c->db, c->pool, sql, 1, p, &err);
    if (!res) {
        *failed = 1;
        cp_call_db_error(c, &err);
        return NULL;
    }
    return row_json(c, res);
}

static void get_one(struct cp_call *c, const struct cp_resource *r, const char *key)
{
    int failed;
    json_t *row = fetch(c, r, key, 0, &failed);
    if (failed)
        return;
    if (!row)
        return not_found(c, r, key);
    cp_call_json(c, 200, json_incref(row), row_version(row));
}

/* The hooks after validation and the write, then the row as written
 * (re-read when children or extra members make RETURNING incomplete).
 * NULL after answering. */
static json_t *finish_write(struct cp_call *c, const struct cp_resource *r, json_t *obj,
                            json_t *after, const char *key)
{
    struct cp_verr e = {0};
    if (r->after_write && r->after_write(c, obj, key, &e) != GW_OK) {
        cp_db_rollback(c->db);
        cp_call_fail(c, &e);
        return NULL;
    }
    if (r->after_write || r->extra_sql) {
        int failed;
        after = fetch(c, r, key, 0, &failed);
        if (!after) {
            cp_db_rollback(c->db);
            if (!failed)
                cp_call_error(c, 500, "internal", NULL, "the %s vanished while written",
                              r->singular);
            return NULL;
        }
    }
    return after;
}

/* BEGIN, then the resource's write lock (r->write_lock), if it has one. */
static int begin_write(struct cp_call *c, const struct cp_resource *r, struct cp_db_err *err)
{
    if (cp_db_begin(c->db, err))
        return GW_EIO;
    if (!r->write_lock)
        return GW_OK;
    char key[32];
    snprintf(key, sizeof(key), "%lld", r->write_lock);
    const char *p[] = {key};
    if (cp_db_cmd(c->db, "SELECT pg_advisory_xact_lock($1::bigint)", 1, p, err)) {
        cp_db_rollback(c->db);
        return GW_EIO;
    }
    return GW_OK;
}

static void create(struct cp_call *c, const struct cp_resource *r)
{
    struct cp_verr e = {0};
    struct cp_db_err err;
    json_t *body = own(c, cp_call_body_object(c));
    if (!body)
        return;
    if (r->key_prefix && !json_object_get(body, r->fields[0].name)) {
        unsigned char rnd[8];
        char hex[17];
        if (gw_random_bytes(rnd, sizeof(rnd)) != GW_OK)
            return cp_call_error(c, 500, "internal", NULL, "the random generator failed");
        gw_hex_encode(rnd, sizeof(rnd), hex);
        json_object_set_new(body, r->fields[0].name,
                            json_string(gw_pool_printf(c->pool, "%s%s", r->key_prefix, hex)));
    }
    json_t *obj = compose(c, r, body, NULL, NULL, &e);
    if (!obj)
        return cp_call_fail(c, &e);
    if (begin_write(c, r, &err))
        return cp_call_db_error(c, &err);
    if (validate(c, r, obj, &e) != GW_OK || (r->prepare && r->prepare(c, obj, NULL, &e))) {
        cp_db_rollback(c->db);
        return cp_call_fail(c, &e);
    }
    const char *cols = columns(c, r, obj, 1);
    const char *proj = projection(c, r);
    const char *sql =
        cols && proj ? gw_pool_printf(c->pool,
                                      "INSERT INTO %s AS t (%s) SELECT %s FROM "
                                      "jsonb_populate_record(NULL::%s, $1::jsonb) RETURNING %s",
                                      r->table, cols, cols, r->table, proj)
                     : NULL;
    const char *p[] = {dump(c, obj)};
    PGresult *res = sql && p[0] ? cp_db_exec(c->db, c->pool, sql, 1, p, &err) : NULL;
    json_t *after = res ? row_json(c, res) : NULL;
    if (!after) {
        cp_db_rollback(c->db);
        if (!sql || !p[0])
            return cp_call_error(c, 500, "internal", NULL, "out of memory");
        if (strcmp(err.sqlstate, CP_SQLSTATE_UNIQUE) == 0)
            return cp_call_error(c, 409, "already_exists", r->fields[0].name,
                                 "a %s '%s' already exists (%s)", r->singular, row_key(c, r, obj),
                                 err.message);
        return cp_call_db_error(c, &err);
    }
    const char *key = row_key(c, r, after);
    if (!(after = finish_write(c, r, obj, after, key)))
        return;
    if (record_and_commit(c, r, "create", key, NULL, after))
        return;
    json_t *answer = json_deep_copy(after);
    if (answer && c->reveal_field && c->reveal_value)
        json_object_set_new(answer, c->reveal_field, json_string(c->reveal_value));
    cp_call_json(c, 201, answer, row_version(after));
}

/* Checks If-Match and the body's version against the locked row. */
static int preconditions(struct cp_call *c, const json_t *body, const json_t *row,
                         struct cp_verr *e)
{
    long long want;
    long long have = row_version(row);
    if (if_match(c, &want) != GW_OK)
        return cp_verr_set(e, 400, "invalid_value", "If-Match",
                           "If-Match: must be the ETag of the row (\"<version>\") or *");
    if (want && want != have) {
        cp_verr_set(e, 412, "precondition_failed", "If-Match",
                    "If-Match: the row is at version %lld, not %lld; read it again and retry", have,
                    want);
        e->current_version = have;
        return GW_EINVAL;
    }
    json_t *bv = body ? json_object_get(body, "version") : NULL;
    if (bv && !json_is_null(bv)) {
        if (!json_is_integer(bv) || json_integer_value(bv) < 1)
            return cp_verr_set(e, 400, "invalid_type", "version",
                               "version: must be a positive integer (the version you read)");
        if (json_integer_value(bv) != have) {
            cp_verr_set(e, 409, "version_conflict", "version",
                        "version: the row is at version %lld, not %lld; someone changed it since "
                        "you read it; read it again and retry",
                        have, (long long)json_integer_value(bv));
            e->current_version = have;
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

static void update(struct cp_call *c, const struct cp_resource *r, const char *key, int merge)
{
    struct cp_verr e = {0};
    struct cp_db_err err;
    int failed;
    json_t *body = own(c, cp_call_body_object(c));
    if (!body)
        return;
    if (begin_write(c, r, &err))
        return cp_call_db_error(c, &err);
    json_t *before = fetch(c, r, key, 1, &failed);
    json_t *obj = NULL;
    if (!before) {
        cp_db_rollback(c->db);
        return failed ? (void)0 : not_found(c, r, key);
    }
    if (preconditions(c, body, before, &e) != GW_OK ||
        !(obj = compose(c, r, body, merge ? before : NULL, key, &e)) ||
        validate(c, r, obj, &e) != GW_OK || (r->prepare && r->prepare(c, obj, before, &e))) {
        cp_db_rollback(c->db);
        return cp_call_fail(c, &e);
    }
    const char *cols = columns(c, r, obj, 0);
    const char *proj = projection(c, r);
    const char *sql = cols && proj
                          ? gw_pool_printf(c->pool,
                                           "UPDATE %s AS t SET (%s) = (SELECT %s FROM "
                                           "jsonb_populate_record(NULL::%s, $1::jsonb)), "
                                           "version = t.version + 1, updated_at = now() "
                                           "WHERE %s = $2 RETURNING %s",
                                           r->table, cols, cols, r->table, key_sql(c, r), proj)
                          : NULL;
    const char *p[] = {dump(c, obj), key};
    PGresult *res = sql && p[0] ? cp_db_exec(c->db, c->pool, sql, 2, p, &err) : NULL;
    json_t *after = res ? row_json(c, res) : NULL;
    if (!after) {
        cp_db_rollback(c->db);
        if (!sql || !p[0])
            return cp_call_error(c, 500, "internal", NULL, "out of memory");
        return cp_call_db_error(c, &err);
    }
    if (!(after = finish_write(c, r, obj, after, key)))
        return;
    if (record_and_commit(c, r, "update", key, before, after))
        return;
    cp_call_json(c, 200, json_incref(after), row_version(after));
}

static void delete_one(struct cp_call *c, const struct cp_resource *r, const char *key)
{
    struct cp_verr e = {0};
    struct cp_db_err err;
    int failed;
    if (begin_write(c, r, &err))
        return cp_call_db_error(c, &err);
    json_t *before = fetch(c, r, key, 1, &failed);
    if (!before) {
        cp_db_rollback(c->db);
        return failed ? (void)0 : not_found(c, r, key);
    }
    if (preconditions(c, NULL, before, &e) != GW_OK ||
        (r->before_delete && r->before_delete(c, key, &e) != GW_OK)) {
        cp_db_rollback(c->db);
        return cp_call_fail(c, &e);
    }
    const char *sql =
        gw_pool_printf(c->pool, "DELETE FROM %s t WHERE %s = $1", r->table, key_sql(c, r));
    const char *p[] = {key};
    if (!sql || cp_db_cmd(c->db, sql, 1, p, &err)) {
        cp_db_rollback(c->db);
        if (!sql)
            return cp_call_error(c, 500, "internal", NULL, "out of memory");
        return cp_call_db_error(c, &err);
    }
    if (record_and_commit(c, r, "delete", key, before, NULL))
        return;
    c->status = 204;
    gw_http_respond(c->req, 204, NULL, "", 0);
}

void cp_resource_handle(struct cp_call *c, const struct cp_resource *r, const char *key)
{
    const char *m = gw_http_req_method(c->req);
    if (!key) {
        if (strcmp(m, "GET") == 0)
            return list(c, r);
        if (strcmp(m, "POST") == 0)
            return create(c, r);
        (void)gw_http_add_header(c->req, "Allow", "GET, POST");
    } else {
        if (strcmp(m, "GET") == 0)
            return get_one(c, r, key);
        if (strcmp(m, "PUT") == 0 || strcmp(m, "PATCH") == 0)
            return update(c, r, key, m[1] == 'A');
        if (strcmp(m, "DELETE") == 0)
            return delete_one(c, r, key);
        (void)gw_http_add_header(c->req, "Allow", "GET, PUT, PATCH, DELETE");
    }
    cp_call_error(c, 405, "method_not_allowed", NULL, "%s is not allowed on this path", m);
}
