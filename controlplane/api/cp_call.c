#include "cp_call.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_pool.h"
#include "gw_query.h"
#include "gw_str.h"

int cp_verr_set(struct cp_verr *e, int status, const char *code, const char *param, const char *fmt,
                ...)
{
    e->status = status;
    e->code = code;
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
    va_end(ap);
    return GW_EINVAL;
}

static const char *type_for(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 404:
        return "not_found_error";
    case 409:
    case 412:
        return "conflict_error";
    case 503:
        return "unavailable_error";
    default:
        return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

struct cp_call *cp_call_defer(struct cp_call *c)
{
    struct cp_call *d = gw_pool_alloc(c->pool, sizeof(*d));
    if (!d)
        return NULL;
    *d = *c;
    c->deferred = d->deferred = 1;
    return d;
}

/* A deferred call's bookkeeping, before the answer ends the request (and
 * frees the pool the copy lives in). */
static void answered(struct cp_call *c)
{
    if (c->deferred && c->done)
        c->done(c, c->done_arg);
}

void cp_call_json(struct cp_call *c, int status, json_t *body, long long etag_version)
{
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":"
                                  "\"server_error\",\"param\":null,\"code\":\"internal\"}}";
        c->status = 500;
        answered(c);
        gw_http_respond(c->req, 500, "application/json", oom, sizeof(oom) - 1);
        return;
    }
    if (etag_version > 0) {
        char etag[32];
        snprintf(etag, sizeof(etag), "\"%lld\"", etag_version);
        (void)gw_http_add_header(c->req, "ETag", etag);
    }
    c->status = status;
    answered(c);
    gw_http_respond(c->req, status, "application/json", text, strlen(text));
    free(text);
}

static void respond_error(struct cp_call *c, int status, const char *code, const char *param,
                          const char *message, long long current_version)
{
    json_t *err = json_pack("{s:s,s:s,s:s?,s:s?}", "message", message, "type", type_for(status),
                            "param", param && *param ? param : NULL, "code", code);
    if (err && current_version > 0)
        json_object_set_new(err, "current_version", json_integer(current_version));
    cp_call_json(c, status, err ? json_pack("{s:o}", "error", err) : NULL, 0);
}

void cp_call_error(struct cp_call *c, int status, const char *code, const char *param,
                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    respond_error(c, status, code, param, msg, 0);
}

void cp_call_fail(struct cp_call *c, const struct cp_verr *e)
{
    respond_error(c, e->status ? e->status : 400, e->code ? e->code : "invalid_value", e->param,
                  e->message, e->current_version);
}

void cp_call_db_error(struct cp_call *c, const struct cp_db_err *err)
{
    const char *s = err->sqlstate;
    if (!*s || strncmp(s, "08", 2) == 0 || strncmp(s, "57P", 3) == 0) {
        /* libpq's words name hosts and ports: the log has them, the
         * caller gets the fact. */
        gw_logf(GW_LOG_ERROR, "database unavailable", "{s:s}", "error", err->message);
        (void)gw_http_add_header(c->req, "Retry-After", "1");
        cp_call_error(c, 503, "database_unavailable", NULL,
                      "the database is unavailable; the control plane is reconnecting (its log "
                      "says why)");
    } else if (strncmp(s, "22", 2) == 0 || strcmp(s, "23514") == 0) {
        /* A data exception (a date that does not exist, a number out of
         * range) or a CHECK constraint: the request's values, not a
         * conflict with other rows. */
        cp_call_error(c, 400, "invalid_value", NULL, "a value was refused by the database: %s",
                      err->message);
    } else if (strncmp(s, "23", 2) == 0 || strcmp(s, "40001") == 0 || strcmp(s, "40P01") == 0) {
        cp_call_error(c, 409, "conflict", NULL, "refused by the database: %s", err->message);
    } else {
        gw_logf(GW_LOG_ERROR, "database error", "{s:s,s:s}", "sqlstate", s, "error", err->message);
        cp_call_error(c, 500, "internal", NULL, "database error %s: %s", s, err->message);
    }
}

json_t *cp_call_body_object(struct cp_call *c)
{
    size_t len;
    const char *body = gw_http_req_body(c->req, &len);
    json_error_t je;
    json_t *j = len ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &je) : NULL;
    if (!j) {
        /* Only the position: jansson's text can quote part of the body,
         * which may be a secret value. */
        if (len)
            cp_call_error(c, 400, "invalid_json", NULL,
                          "the body must be a JSON object: malformed JSON at line %d, column %d",
                          je.line, je.column);
        else
            cp_call_error(c, 400, "invalid_json", NULL,
                          "the body must be a JSON object (it is empty)");
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        cp_call_error(c, 400, "invalid_json", NULL, "the body must be a JSON object");
        return NULL;
    }
    return j;
}

int cp_call_method(struct cp_call *c, const char *allowed)
{
    const char *m = gw_http_req_method(c->req);
    if (strcmp(m, allowed) == 0)
        return 1;
    (void)gw_http_add_header(c->req, "Allow", allowed);
    cp_call_error(c, 405, "method_not_allowed", NULL, "%s is not allowed on this path", m);
    return 0;
}

int cp_call_query(struct cp_call *c, const char *const *names, const char **vals)
{
    size_t idx = 0, badlen = 0;
    const char *bad = NULL;
    switch (gw_query_parse(c->pool, gw_http_req_query(c->req), names, vals, &idx, &bad, &badlen)) {
    case GW_QUERY_OK:
        return 0;
    case GW_QUERY_UNKNOWN: {
        char list[512] = "";
        for (size_t i = 0, o = 0; names[i] && o < sizeof(list); i++)
            o += (size_t)snprintf(list + o, sizeof(list) - o, "%s%s", i ? ", " : "", names[i]);
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(badlen < 60 ? badlen : 60), bad);
        cp_call_error(c, 400, "unknown_parameter", name,
                      "%s: not a parameter of this endpoint (%s)", name, list);
        return -1;
    }
    case GW_QUERY_REPEATED:
        cp_call_error(c, 400, "invalid_value", names[idx], "%s: given more than once", names[idx]);
        return -1;
    case GW_QUERY_MALFORMED:
        cp_call_error(c, 400, "invalid_value", names[idx],
                      "%s: a malformed percent-escape, or not UTF-8 text without control "
                      "characters",
                      names[idx]);
        return -1;
    case GW_QUERY_NOMEM:
        break;
    }
    cp_call_error(c, 500, "internal_error", NULL, "out of memory");
    return -1;
}

int cp_call_query_int(struct cp_call *c, const char *name, const char *v, long long def,
                      long long lo, long long hi, long long *out)
{
    *out = def;
    if (!v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    /* strtoll would take leading spaces and a '+'. */
    int shape = (*v >= '0' && *v <= '9') || (*v == '-' && lo < 0);
    if (!shape || *end || errno || x < lo || x > hi) {
        cp_call_error(c, 400, "invalid_value", name, "%s: an integer from %lld to %lld", name, lo,
                      hi);
        return -1;
    }
    *out = x;
    return 0;
}
