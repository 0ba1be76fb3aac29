/*
 * The admit phase and the exchange's lifetime: a request's body is bounded
 * and parsed by its facade (or, for embeddings, fc_embed), its routing
 * headers checked, and the exchange created; the phase setter, the end of
 * a request (its line, then its memory) and the loop's shutdown live here.
 * count_tokens is answered here at once: it never goes upstream.
 */
#include <assert.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_limits.h"
#include "dp_metrics.h"
#include "dp_reply.h"
#include "dp_snapshot.h"
#include "dp_tokens.h"
#include "exchange.h"
#include "fc_embed.h"
#include "fc_media.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_rand.h"
#include "gw_time.h"
#include "gw_upc.h"

/* An error answer's body is kept up to this much, to classify it. */
#define MAX_ERROR_BODY (64u << 10)

/* ---------------------------------------------------------------- phases */

static const char *const phase_names[] = {
    [XP_ADMIT] = "admit",     [XP_PLAN] = "plan",   [XP_GUARD] = "guard",
    [XP_RESERVE] = "reserve", [XP_CACHE] = "cache", [XP_ATTEMPT] = "attempt",
    [XP_ANSWER] = "answer",   [XP_WAIT] = "wait",   [XP_DONE] = "done",
};

#define TO(p) (1u << (p))
/* The pipeline's transitions: each phase may hand over to these. Every
 * phase may end (the client left, the gateway stopped, a refusal). */
static const unsigned next_phases[] = {
    [XP_ADMIT] = TO(XP_PLAN) | TO(XP_DONE),
    [XP_PLAN] = TO(XP_GUARD) | TO(XP_RESERVE) | TO(XP_DONE),
    [XP_GUARD] = TO(XP_RESERVE) | TO(XP_DONE),
    [XP_RESERVE] = TO(XP_CACHE) | TO(XP_DONE),
    /* A hit's replay crosses the bright line without an attempt. */
    [XP_CACHE] = TO(XP_ATTEMPT) | TO(XP_ANSWER) | TO(XP_DONE),
    [XP_ATTEMPT] = TO(XP_ANSWER) | TO(XP_WAIT) | TO(XP_DONE),
    [XP_ANSWER] = TO(XP_DONE),
    [XP_WAIT] = TO(XP_ATTEMPT) | TO(XP_DONE),
    [XP_DONE] = 0,
};

void x_set_phase(struct dp_exchange *x, enum xphase p)
{
    if (!(next_phases[x->phase] & TO(p))) {
        /* A bug in the pipeline, never the client's doing: said loudly,
         * and fatal where the tests run (debug builds). */
        gw_logf(GW_LOG_ERROR, "exchange: a phase change the pipeline does not have",
                "{s:s,s:s,s:s}", "request_id", x->request_id, "from", phase_names[x->phase], "to",
                phase_names[p]);
        assert(!"exchange phase transition");
    }
    if (x->tr.sampled)
        x_trace_phase(x, p);
    x->phase = p;
}

int x_in_flight(const struct dp_exchange *x)
{
    return x->phase == XP_ATTEMPT || x->phase == XP_ANSWER;
}

/* ---------------------------------------------------------------- lifetime */

void x_free(struct dp_exchange *x)
{
    x_set_phase(x, XP_DONE);
    x_trace_request(x);
    free(x->tr.tracestate);
    /* A classifier still asked is given up; a judge's sample goes. */
    x_guard_free(x);
    x_judge_free(x);
    /* A flight this request leads is abandoned, a wait left. */
    x_cache_free(x);
    /* The quota step's end: unused reservations go back (a wait is
     * canceled). Every attempt's charges were taken by then. */
    dp_limits_end(x->hold);
    x->hold = NULL;
    if (x->stream_counted)
        dp_metrics_open_streams(-1);
    x_release_upstream(x);
    if (x->fstate)
        x->fc->stream_free(x->fstate);
    canon_acc_free(&x->acc);
    canon_req_free(x->creq);
    json_decref(x->eroot);
    free(x->ereq.inputs);
    x_media_free(x);
    free(x->fails);
    free(x->answer_model);
    free(x->labels);
    free(x->model_own);
    free(x->relay_body);
    free(x->plan.cands);
    if (x->timer)
        event_free(x->timer);
    gw_buf_free(&x->coll);
    gw_buf_free(&x->relay_held);
    gw_buf_free(&x->out);
    gw_buf_free(&x->logb);
    gw_buf_free(&x->logs);
    dp_snapshot_unref(x->snap);
    if (x->prev)
        x->prev->next = x->next;
    else
        x->l->exchanges = x->next;
    if (x->next)
        x->next->prev = x->prev;
    free(x);
}

void x_end(struct dp_exchange *x)
{
    x_log_request(x);
    x_judge_submit(x);
    x_free(x);
}

void x_refuse(struct dp_exchange *x, int status, const char *param, const char *code,
              const char *msg)
{
    x->final_status = status;
    x_set_failure(x, "refused", code);
    dp_reply_fc(x->req, x->fc, x->request_id, status, param, code, msg);
}

void x_set_failure(struct dp_exchange *x, const char *outcome, const char *cls)
{
    if (!x->outcome) {
        x->outcome = outcome;
        x->error_class = cls;
    }
}

static void shutdown_one(struct dp_exchange *x)
{
    if (x->running) {
        gw_upc_cancel(x->xf);
        x->xf = NULL;
        x->running = 0;
    }
    if (x->req) {
        x_set_failure(x, "shutdown", "canceled");
        if (!x->committed || !x->client_stream) {
            x_reply_error(x, 503, NULL, "gateway_shutdown", "the gateway is shutting down");
        } else {
            struct canon_event ev = {.type = CANON_EV_ERROR,
                                     .failure = CANON_FAIL_CANCELED,
                                     .message = "the gateway is shutting down"};
            x_answer_broke(x, &ev);
        }
    }
    x->terminal = 1;
    if (x->verdict == V_NONE)
        x->verdict = V_CANCELED;
    if (x_in_flight(x))
        x_attempt_over(x); /* the client side has ended: no loop after it */
    else
        x_end(x);
}

void dp_exchange_shutdown_all(struct dp_xloop *l)
{
    x_judges_shutdown(l); /* its calls first: they are the loop's own */
    while (l->exchanges)
        shutdown_one(l->exchanges);
}

/* Parses the body as one JSON object with unique keys. NULL after replying. */
static json_t *load_body(struct gw_http_req *req, const struct dp_facade *fc, const char *id)
{
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    /* What the tree may cost is bounded before it is built: a small body of
     * many tiny values is tens of times its size in jansson (gw_json.h). A
     * malformed body goes to jansson, for its error, only as far as the
     * scan counted: jansson would skip a NUL after a number and parse on. */
    char lim[256];
    size_t spent = 0;
    struct gw_json_count c;
    int rc = gw_json_bound(body, len, "the request body", &spent, &c, lim, sizeof(lim));
    if (rc == GW_ELIMIT) {
        dp_reply_fc(req, fc, id, 413, NULL, "request_too_complex", lim);
        return NULL;
    }
    if (rc == GW_EINVAL && c.stop < len)
        len = c.stop + 1;
    json_error_t je;
    /* Duplicate keys are refused: parsers disagree on which one wins, and
     * the gateway must route on the same model the provider will read. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(root) && rc == GW_OK)
        return root;
    char msg[512];
    if (json_is_object(root)) /* not expected: jansson took what the scan refused */
        snprintf(msg, sizeof(msg), "the request body is not valid JSON (byte %zu)", c.stop);
    else if (root)
        snprintf(msg, sizeof(msg), "the request body must be a JSON object");
    else
        snprintf(msg, sizeof(msg), "the request body is not valid JSON: %s (line %d, column %d)",
                 je.text, je.line, je.column);
    json_decref(root);
    dp_reply_fc(req, fc, id, 400, NULL, "invalid_json", msg);
    return NULL;
}

/* fallback_timeout_ms in the body: the failover budget, as the header sets
 * it. It is the gateway's, never the provider's: it leaves the document
 * here (a relayed body loses it when the attempt is built). *ms gets it, 0
 * when absent, -1 when null (none, but still to be cut from a relayed
 * body). Nonzero after replying (400 naming the field). */
static int take_body_budget(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                            json_t *root, long *ms)
{
    json_t *v = json_object_get(root, X_BODY_BUDGET);
    *ms = 0;
    if (!v)
        return 0;
    if (json_is_null(v)) { /* as SDKs send an unset field: none */
        *ms = -1;
        json_object_del(root, X_BODY_BUDGET);
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > X_MAX_BUDGET_MS) {
        char msg[160];
        snprintf(msg, sizeof(msg), "'%s' must be an integer from 1 to %ld (milliseconds)",
                 X_BODY_BUDGET, X_MAX_BUDGET_MS);
        dp_reply_fc(req, fc, id, 400, X_BODY_BUDGET, "invalid_request", msg);
        return 1;
    }
    *ms = (long)json_integer_value(v);
    json_object_del(root, X_BODY_BUDGET);
    return 0;
}

/* The failover budget, once the plan knows the route: the request's (the
 * smaller of the header's and the body's when both are set: each is a
 * bound the client asked for), else the route's, else the default. */
static void set_budget(struct dp_exchange *x)
{
    long ms = x->budget_ms;
    if (x->body_budget_ms > 0 && (!ms || x->body_budget_ms < ms))
        ms = x->body_budget_ms;
    if (!ms)
        ms = x->plan.route && x->plan.route->fallback_timeout_ms
                 ? x->plan.route->fallback_timeout_ms
                 : X_DEFAULT_BUDGET_MS;
    x->budget_ms = ms;
    x->deadline_us = x->t0 + (int64_t)ms * 1000;
}

/* The selector and the routing headers: a session id (stickiness), an
 * affinity key, attribution labels and a failover budget. Each header is
 * checked; returns nonzero after replying. */
static int read_route_headers(struct dp_exchange *x, const char *selector)
{
    static const char *const keyed[] = {"x-llmgw-session-id", "x-llmgw-affinity-key",
                                        "x-llmgw-agent", "x-llmgw-purpose"};
    const char *val[4];
    size_t len[4];
    for (size_t i = 0; i < 4; i++) {
        const char *v = gw_http_req_header(x->req, keyed[i]);
        size_t n = v ? strlen(v) : 0;
        int ok = n <= X_MAX_KEY_HEADER;
        for (size_t j = 0; ok && j < n; j++)
            ok = (unsigned char)v[j] > 0x20 && (unsigned char)v[j] < 0x7f;
        if (!ok) {
            char msg[160];
            snprintf(msg, sizeof(msg), "the %s header must be 1 to %d visible ASCII characters",
                     keyed[i], X_MAX_KEY_HEADER);
            x_refuse(x, 400, keyed[i], "invalid_header", msg);
            return 1;
        }
        val[i] = v;
        len[i] = n;
        if (i == 1)
            x->affinity = n ? v : NULL;
    }
    /* The labels outlive the request (its records are written at its end):
     * one block, as long as they are. */
    len[1] = selector ? strnlen(selector, DP_MAX_MODEL_ID) : 0;
    val[1] = selector;
    size_t total = len[0] + len[1] + len[2] + len[3];
    if (total && !(x->labels = malloc(total + 4))) {
        x_refuse(x, 500, NULL, "internal_error", "out of memory");
        return 1;
    }
    const char **dest[] = {&x->session, &x->selector, &x->agent, &x->purpose};
    char *at = x->labels;
    for (size_t i = 0; i < 4; i++) {
        if (!len[i])
            continue;
        memcpy(at, val[i], len[i]);
        at[len[i]] = '\0';
        *dest[i] = at;
        at += len[i] + 1;
    }
    x->budget_ms = 0; /* set_budget decides */
    const char *b = gw_http_req_header(x->req, "x-llmgw-fallback-timeout-ms");
    if (b) {
        char *end;
        long v = b[0] >= '0' && b[0] <= '9' ? strtol(b, &end, 10) : 0;
        if (v < 1 || v > X_MAX_BUDGET_MS || *end) {
            char msg[160];
            snprintf(msg, sizeof(msg),
                     "the x-llmgw-fallback-timeout-ms header must be an integer from 1 to %ld",
                     X_MAX_BUDGET_MS);
            x_refuse(x, 400, "x-llmgw-fallback-timeout-ms", "invalid_header", msg);
            return 1;
        }
        x->budget_ms = v;
    }
    return 0;
}

static struct dp_exchange *exchange_new(struct dp_xloop *l, struct gw_http_req *req,
                                        struct dp_snapshot *snap, const struct dp_key *key,
                                        const char *request_id, enum xkind kind,
                                        const struct dp_facade *fc)
{
    struct dp_exchange *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->l = l;
    x->req = req;
    x->snap = snap;
    x->key = key;
    x->kind = kind;
    x->fc = fc;
    x->phase = XP_ADMIT;
    x->selector = x->session = x->agent = x->purpose = "";
    x->cost_known = 1;
    x->t0 = gw_http_req_start_us(req);
    snprintf(x->request_id, sizeof(x->request_id), "%s", request_id);
    const char *given = gw_http_req_header(req, "x-request-id");
    if (given && strcmp(given, request_id) == 0)
        x->id_salt = (unsigned)(gw_rand_next(&l->rng) >> 32) | 1;
    snprintf(x->path, sizeof(x->path), "%s", gw_http_req_path(req));
    x->sink.emit = x_on_event;
    x->sink.raw = x_on_raw;
    x->sink.arg = x;
    gw_buf_init(&x->relay_held, DRV_MAX_EVENT);
    canon_acc_init(&x->acc, 0);
    gw_buf_init(&x->out, 0);
    gw_buf_init(&x->logb, 0);
    gw_buf_init(&x->logs, 0);
    gw_buf_init(&x->coll, kind == KIND_CHAT ? MAX_ERROR_BODY : DRV_MAX_BODY);
    x->next = l->exchanges;
    if (l->exchanges)
        l->exchanges->prev = x;
    l->exchanges = x;
    x->timer = evtimer_new(l->base, x_on_timer, x);
    if (!x->timer) {
        x->snap = NULL; /* the caller still holds it, and releases it */
        x_free(x);
        return NULL;
    }
    x_trace_start(x);
    return x;
}

static void on_client_close(struct gw_http_req *req, void *arg)
{
    struct dp_exchange *x = arg;
    x->req = NULL;
    gw_http_abort(req);
    x_set_failure(x, "client_closed", "canceled");
    x->final_status = 499;
    if (x_in_flight(x)) {
        /* Removing the transfer closes it: the upstream sees the close. */
        x->terminal = 1;
        if (x->verdict == V_NONE)
            x->verdict = V_CANCELED;
        x_attempt_over(x);
    } else {
        x_end(x);
    }
}

/* The common start of every request once it is parsed: plan, then the
 * guard, the quota step, the cache and the first attempt. Takes over x. */
void x_route_and_start(struct dp_exchange *x, const char *selector, const struct dp_needs *n)
{
    if (read_route_headers(x, selector) || x_plan(x, selector, n)) {
        x->req = NULL;
        x_free(x);
        return;
    }
    x->est_input = n->est_tokens;
    set_budget(x);
    gw_http_req_on_close(x->req, on_client_close, x);
    x_guard(x);
}

static void chat(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                 const struct dp_key *key, const char *request_id, const struct dp_facade *fc,
                 int internal)
{
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    struct canon_req *cr = canon_req_new(root);
    struct dp_exchange *x = cr ? exchange_new(l, req, snap, key, request_id, KIND_CHAT, fc) : NULL;
    if (!x) {
        dp_reply_fc(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        canon_req_free(cr);
        dp_snapshot_unref(snap);
        return;
    }
    x->creq = cr;
    x->internal = internal;
    /* A facade whose format a driver speaks parses leniently: what only
     * that format carries goes to such a target untouched (build). */
    cr->lenient = fc->wire != NULL;
    if (take_body_budget(req, fc, request_id, root, &x->body_budget_ms)) {
        x->req = NULL;
        x_free(x);
        return;
    }
    struct canon_err err = {0};
    if (fc->parse(cr, &err) != GW_OK) {
        if (!err.status)
            canon_err_set(&err, 500, NULL, "internal_error", "out of memory");
        dp_reply_fc(req, fc, request_id, err.status, err.param[0] ? err.param : NULL, err.code,
                    err.message);
        x->req = NULL;
        x_free(x);
        return;
    }
    x->client_stream = cr->stream;
    x->include_usage = cr->include_usage;
    struct dp_needs n;
    dp_needs_of(cr, &n);
    x_route_and_start(x, cr->model, &n);
}

void dp_exchange_chat(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                      const struct dp_key *key, const char *request_id, const struct dp_facade *fc)
{
    chat(l, req, snap, key, request_id, fc, 0);
}

void dp_exchange_internal(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                          const struct dp_key *key, const char *request_id)
{
    chat(l, req, snap, key, request_id, &fc_openai_chat, 1);
}

void dp_exchange_embed(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id)
{
    json_t *root = load_body(req, NULL, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    struct dp_exchange *x = exchange_new(l, req, snap, key, request_id, KIND_EMBED, NULL);
    if (!x) {
        json_decref(root);
        dp_reply_fc(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        dp_snapshot_unref(snap);
        return;
    }
    /* The inputs point into the body, which every attempt's build reads. */
    x->eroot = root;
    if (take_body_budget(req, NULL, request_id, root, &x->body_budget_ms)) {
        x->req = NULL;
        x_free(x);
        return;
    }
    struct canon_err err = {0};
    int rc = fc_embed_parse(root, &x->ereq, &err);
    if (rc != GW_OK) {
        if (rc == GW_EINVAL)
            dp_reply_fc(req, NULL, request_id, err.status, err.param[0] ? err.param : NULL,
                        err.code, err.message);
        else
            dp_reply_fc(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        x->req = NULL;
        x_free(x);
        return;
    }
    struct dp_needs n = {.embeddings = 1};
    x_route_and_start(x, gw_json_str(root, "model"), &n);
}

void dp_exchange_media(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id, enum canon_media_op op,
                       size_t max_upload)
{
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    struct canon_media_req r;
    struct canon_err err = {0};
    void *store = NULL;
    json_t *root = NULL;
    int rc;
    if (op == CANON_MEDIA_SPEECH || op == CANON_MEDIA_IMAGE) {
        if (!(root = load_body(req, NULL, request_id))) {
            dp_snapshot_unref(snap);
            return;
        }
        rc = fc_media_parse_json(op, root, body, len, &r, &err);
    } else {
        rc = fc_media_parse_multipart(op, gw_http_req_header(req, "content-type"), body, len,
                                      max_upload, &r, &store, &err);
    }
    struct xmedia *m = rc == GW_OK ? x_media_new(&r, store, root) : NULL;
    struct dp_exchange *x =
        m ? exchange_new(l, req, snap, key, request_id, KIND_MEDIA, NULL) : NULL;
    if (!x) {
        if (rc == GW_EINVAL)
            dp_reply_fc(req, NULL, request_id, err.status, err.param[0] ? err.param : NULL,
                        err.code, err.message);
        else
            dp_reply_fc(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        if (m) {
            x_media_release(m);
        } else {
            free(store);
            json_decref(root);
        }
        dp_snapshot_unref(snap);
        return;
    }
    x->media = m;
    x->client_stream = r.stream;
    struct dp_needs n = {.media = x_media_cap(x)};
    x_route_and_start(x, x_media_selector(x), &n);
}

void dp_exchange_count_tokens(struct gw_http_req *req, struct dp_snapshot *snap,
                              const struct dp_key *key, const char *request_id,
                              const struct dp_facade *fc)
{
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    /* count_tokens takes a messages request without max_tokens, and no
     * failover budget (checked all the same: the same body may be sent to
     * messages). */
    long unused;
    if (take_body_budget(req, fc, request_id, root, &unused)) {
        json_decref(root);
        dp_snapshot_unref(snap);
        return;
    }
    if (!json_object_get(root, "max_tokens"))
        json_object_set_new(root, "max_tokens", json_integer(1));
    struct canon_req *cr = canon_req_new(root);
    struct canon_err err = {0};
    struct dp_plan *p = calloc(1, sizeof(*p));
    if (!cr || !p) {
        dp_reply_fc(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
    } else if (fc->parse(cr, &err) != GW_OK) {
        dp_reply_fc(req, fc, request_id, err.status ? err.status : 500,
                    err.param[0] ? err.param : NULL, err.code[0] ? err.code : "internal_error",
                    err.message[0] ? err.message : "out of memory");
    } else {
        /* The selector must name something this key may use; health does
         * not matter to an estimate. */
        struct dp_needs n;
        dp_needs_of(cr, &n);
        struct dp_route_ctx ctx = {.key = key, .request_id = request_id, .now_us = gw_now_us()};
        if (!cr->model || !*cr->model) {
            dp_reply_fc(req, fc, request_id, 400, "model", "missing_required_parameter",
                        "you must provide a model parameter");
        } else if (dp_router_plan(snap, cr->model, &n, &ctx, p) != GW_OK) {
            dp_reply_fc(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        } else if (p->ncands == 0) {
            dp_reply_fc(req, fc, request_id, dp_no_route_status(p->cause), "model",
                        dp_no_route_code(p->cause), p->message);
        } else {
            char body[160];
            /* No provider counts for us: this is the gateway's estimate, and
             * says so, rather than a number that looks exact. */
            int len = snprintf(body, sizeof(body), "{\"input_tokens\":%lld,\"estimated\":true}",
                               (long long)dp_tokens_request(cr));
            (void)gw_http_add_header(req, "x-llmgw-estimate", "true");
            dp_log_simple(req, request_id, 200, NULL);
            gw_http_respond(req, 200, "application/json", body, (size_t)len);
        }
    }
    free(p);
    canon_req_free(cr);
    dp_snapshot_unref(snap);
}
