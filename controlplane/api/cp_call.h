/*
 * cp_call: one admin API request being served, and the answers it can get.
 *
 * Every admin handler receives a cp_call: the HTTP request, its pool (freed
 * when the request ends; libpq results hang off it), the database and the
 * authenticated actor. A handler ends the request exactly once, through
 * cp_call_json, cp_call_error or cp_call_fail.
 *
 * Errors have the data plane's shape, {"error":{"message","type","param",
 * "code"}}, sometimes with extra members (a version conflict adds
 * "current_version").
 */
#ifndef CP_CALL_H
#define CP_CALL_H

#include <jansson.h>

#include "gw_trace.h"

struct gw_http_req;
struct gw_pool;
struct cp_db;
struct cp_db_err;
struct cp_master_key;
struct cp_trace;

struct cp_call {
    struct gw_http_req *req;
    struct gw_pool *pool;
    struct cp_db *db;
    const char *actor; /* the admin token's name, or "bootstrap" */
    enum cp_scope { CP_SCOPE_READ, CP_SCOPE_OPERATOR, CP_SCOPE_ADMIN } scope; /* the token's */
    /* LLMGW_MASTER_KEY, parsed; NULL when not configured (secret writes
     * then answer 503). */
    const struct cp_master_key *master_key;
    /* Set by a create's prepare hook: a member added to the 201 answer only
     * (a key's plaintext, shown exactly once; never stored or audited). */
    const char *reveal_field;
    const char *reveal_value;
    int status; /* the answer's status, once answered (for metrics) */
    /* A handler that answers after it returns (an import waiting on its
     * URL) continues with cp_call_defer's copy; the dispatcher then leaves
     * the request's bookkeeping to done, which the answer runs. */
    int deferred;
    void (*done)(struct cp_call *c, void *arg);
    void *done_arg;
    /* An admin write being traced (cp_trace.h; NULL tracer: not one): its
     * span's context, which cp_resource_record remembers for the version
     * it makes; and what the write committed, for its span: the audit
     * row's id and the config version (0: none). */
    struct cp_trace *tracer;
    struct gw_trace_ctx span;
    long long audit_id, config_version;
};

/* A copy of c in its request's pool, for answering later (from a transfer's
 * completion, say): marks both deferred. The request stays open until the
 * copy answers; NULL when out of memory (c is then unchanged). */
struct cp_call *cp_call_defer(struct cp_call *c);

/* A refusal being built by a check: status, code, the field it names
 * (param, "" for none) and a message naming the field and the rule. */
struct cp_verr {
    int status;
    const char *code;
    char param[96];
    char message[480];
    long long current_version; /* > 0: added to the error body */
};

/* Fills e and returns GW_EINVAL, so checks can `return cp_verr_set(...)`. */
int cp_verr_set(struct cp_verr *e, int status, const char *code, const char *param, const char *fmt,
                ...) __attribute__((format(printf, 5, 6)));

/* Answers with body (stolen) as JSON; etag_version > 0 adds ETag: "N". */
void cp_call_json(struct cp_call *c, int status, json_t *body, long long etag_version);
/* Answers with an error body. param may be NULL. */
void cp_call_error(struct cp_call *c, int status, const char *code, const char *param,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* 1 when the request's method is allowed; else answers 405 with an Allow
 * header of allowed and returns 0. */
int cp_call_method(struct cp_call *c, const char *allowed);
/* Answers with the refusal in e. */
void cp_call_fail(struct cp_call *c, const struct cp_verr *e);
/* Answers a database failure: 503 when the connection is gone, 409 for a
 * constraint the checks did not catch (a concurrent write), else 500. The
 * message is the server's, which never holds secret values. */
void cp_call_db_error(struct cp_call *c, const struct cp_db_err *err);

/* The request body as a JSON object, or NULL after answering 400. */
json_t *cp_call_body_object(struct cp_call *c);

/* Reads the request's query string against names (NULL-terminated): the
 * value of names[i], %-decoded into the pool, in vals[i] (NULL when
 * absent). An unknown parameter (400 unknown_parameter), a repeated one,
 * a malformed escape or a value that is not UTF-8 text without control
 * characters (400 invalid_value) is answered naming it, and -1
 * returned; else 0. */
int cp_call_query(struct cp_call *c, const char *const *names, const char **vals);
/* An integer query value in [lo, hi] into *out (absent: def); -1 after
 * answering 400 naming it. */
int cp_call_query_int(struct cp_call *c, const char *name, const char *v, long long def,
                      long long lo, long long hi, long long *out);

#endif
