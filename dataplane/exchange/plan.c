/*
 * The plan and reserve phases: the router orders the request's candidates
 * (dp_router.h), and every limit of the key, its team and its project
 * reserves the request's need, or the request is refused having consumed
 * nothing (docs/budgets.md). A request with no candidate, or refused by a
 * limit, is answered here with every candidate the router skipped, or the
 * limit that refused it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_limits.h"
#include "dp_metrics.h"
#include "dp_reply.h"
#include "dp_tokens.h"
#include "exchange.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_time.h"

/* The field a no-capable-target error names: the one in the request that
 * no candidate can take, when there is one such capability; else model. */
static const char *missing_param(const struct dp_exchange *x, const struct dp_plan *p)
{
    unsigned m = 0;
    for (size_t i = 0; i < p->nskips; i++)
        m |= p->skips[i].missing;
    if (p->cause != DP_NOROUTE_NONE_CAPABLE || x->kind != KIND_CHAT)
        return "model";
    static const struct {
        unsigned cap;
        enum canon_field field;
    } fields[] = {{DRV_CAP_VISION, CANON_F_MESSAGES},
                  {DRV_CAP_TOOLS, CANON_F_TOOLS},
                  {DRV_CAP_JSON_MODE, CANON_F_RESPONSE_FORMAT},
                  {DRV_CAP_REASONING, CANON_F_REASONING}};
    for (size_t i = 0; i < sizeof(fields) / sizeof(*fields); i++)
        if (m == fields[i].cap)
            return canon_field_name(x->creq, fields[i].field);
    return "model";
}

/* Plans the request; with no candidate, replies with every skipped one and
 * returns nonzero. */
int x_plan(struct dp_exchange *x, const char *selector, const struct dp_needs *n)
{
    x_set_phase(x, XP_PLAN);
    if (!selector || !*selector) {
        x_refuse(x, 400, "model", "missing_required_parameter",
                 "you must provide a model parameter (a route, an alias, a role, or "
                 "provider/model)");
        return 1;
    }
    /* The gateway's own call goes where the operator said, whatever the
     * key's allowlists (its limits still apply: x_reserve). */
    struct dp_route_ctx ctx = {.key = x->internal ? NULL : x->key,
                               .request_id = x->request_id,
                               .session = x->session[0] ? x->session : NULL,
                               .affinity = x->affinity,
                               .breakers = x->l->breakers,
                               .now_us = gw_now_us()};
    struct dp_plan *p = malloc(sizeof(*p));
    if (!p || dp_router_plan(x->snap, selector, n, &ctx, p) != GW_OK) {
        free(p);
        x_refuse(x, 500, NULL, "internal_error", "out of memory");
        return 1;
    }
    if (p->ncands > 0) {
        x->plan.cands = malloc(p->ncands * sizeof(p->cands[0]));
        if (!x->plan.cands) {
            free(p);
            x_refuse(x, 500, NULL, "internal_error", "out of memory");
            return 1;
        }
        x->plan.route = p->route;
        /* Media: the first eligible member serves, and only it (two models
         * do not give interchangeable audio or images); retries stay on it. */
        x->plan.ncands = x->kind == KIND_MEDIA ? 1 : p->ncands;
        memcpy(x->plan.cands, p->cands, p->ncands * sizeof(p->cands[0]));
        x->plan.scored_by = p->scored_by;
        x->plan.norder = (uint8_t)p->norder;
        memcpy(x->plan.order, p->order, p->norder);
        free(p);
        return 0;
    }
    int status = dp_no_route_status(p->cause);
    const char *code = dp_no_route_code(p->cause);
    dp_metrics_no_route(code);
    x->final_status = status; /* for the request's span */
    x_set_failure(x, "no_route", code);
    dp_log_simple(x->req, x->request_id, status, code);
    (void)gw_http_add_header(x->req, "x-llmgw-attempts", "0");
    struct gw_buf skips;
    gw_buf_init(&skips, 0);
    int with = p->nskips && dp_plan_skips_json(p, &skips) == GW_OK;
    dp_respond_error(x->req, x_facade(x), status, dp_error_type(status), missing_param(x, p), code,
                     p->message, "candidates", with ? &skips : NULL);
    gw_buf_free(&skips);
    free(p);
    return 1;
}

/* A refusal of the quota step: the facade's error with the limit, its
 * state and when to retry (docs/budgets.md). Ends the client side. */
static void reply_quota(struct dp_exchange *x, const struct dp_limits_refusal *r)
{
    struct gw_http_req *req = x->req;
    if (!req)
        return;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = r->status;
    x_set_failure(x, "limit", r->code);
    dp_metrics_limit_refusal(r);
    char v[24];
    if (r->retry_after_s > 0) {
        snprintf(v, sizeof(v), "%lld", (long long)r->retry_after_s);
        (void)gw_http_add_header(req, "retry-after", v);
    }
    (void)gw_http_add_header(req, "x-llmgw-attempts", "0");
    size_t n = 0;
    char *body = x_facade(x)->error_body(r->status, r->type, r->param, r->code, r->message, &n);
    json_t *root = body ? json_loadb(body, n, 0, NULL) : NULL;
    json_t *err = json_object_get(root, "error");
    struct gw_buf lim;
    gw_buf_init(&lim, 0);
    if (json_is_object(err) && r->has_limit && dp_limits_refusal_json(r, &lim) == GW_OK)
        json_object_set_new(err, "limit", json_loadb(lim.data, lim.len, 0, NULL));
    if (json_is_object(err))
        json_object_set_new(err, "retry_after_s",
                            r->retry_after_s > 0 ? json_integer(r->retry_after_s) : json_null());
    char *full = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    if (full) {
        free(body);
        body = full;
        n = strlen(full);
    }
    gw_http_respond(req, r->status, "application/json", body ? body : "", body ? n : 0);
    free(body);
    json_decref(root);
    gw_buf_free(&lim);
}

/* Candidates no price can be put on under a fail_closed budget leave the
 * plan (dp_limits marked them). */
static void drop_candidates(struct dp_exchange *x, const unsigned char *drop)
{
    size_t k = 0;
    for (size_t i = 0; i < x->plan.ncands; i++)
        if (!drop[i])
            x->plan.cands[k++] = x->plan.cands[i];
    x->plan.ncands = k;
}

static void on_reserved(void *arg, const struct dp_limits_refusal *r)
{
    struct dp_exchange *x = arg;
    if (r) {
        reply_quota(x, r);
        x_end(x);
        return;
    }
    x_cache_phase(x);
}

/* The quota step, after routing and before the first dispatch: every limit
 * of the key, its team and its project reserves the request's need (an
 * estimate, or the worst case), or the request is refused having consumed
 * nothing. A reservation may wait for a grant: on_reserved goes on. */
void x_reserve(struct dp_exchange *x)
{
    x_set_phase(x, XP_RESERVE);
    unsigned char drop[DP_MAX_CANDIDATES] = {0};
    int64_t media_cost[DP_MAX_CANDIDATES];
    int64_t out_cap = 0;
    struct dp_limits_ask ask = {.snap = x->snap,
                                .key = x->key,
                                .cands = x->plan.cands,
                                .ncands = x->plan.ncands,
                                .drop = drop,
                                .embeddings = x->kind == KIND_EMBED,
                                .out_cap = &out_cap};
    if (x->kind == KIND_CHAT) {
        size_t body_len = 0;
        (void)gw_http_req_body(x->req, &body_len);
        ask.est_input_tokens = x->est_input; /* the plan's needs (x_route_and_start) */
        ask.max_input_tokens = dp_limits_input_bound(x->creq, body_len);
        ask.max_tokens = x->creq->has_max_tokens ? x->creq->max_tokens : 0;
        ask.max_tokens_param = canon_field_name(x->creq, CANON_F_MAX_TOKENS);
        ask.reasoning_budget = x->creq->reasoning_off ? 0 : x->creq->reasoning_budget;
        ask.cache_marks = dp_limits_cache_marks(x->creq);
    } else if (x->kind == KIND_MEDIA) {
        x_media_ask(x, &ask, media_cost);
    } else {
        for (size_t i = 0; i < x->ereq.ninputs; i++) {
            int64_t len = (int64_t)strlen(x->ereq.inputs[i]);
            ask.est_input_tokens += dp_tokens_text((size_t)len);
            ask.max_input_tokens += len;
        }
    }
    x->est_input = ask.est_input_tokens;
    struct dp_limits_refusal r;
    enum dp_limits_verdict v = dp_limits_reserve(&ask, x->l->base, on_reserved, x, &x->hold, &r);
    if (v == DP_LIMITS_REFUSED) {
        reply_quota(x, &r);
        x_end(x);
        return;
    }
    drop_candidates(x, drop);
    /* A worst case was sized with this output cap: the providers get it,
     * so no answer can be longer than what was reserved. */
    if (out_cap > 0 && x->kind == KIND_CHAT) {
        x->creq->has_max_tokens = 1;
        x->creq->max_tokens = out_cap;
        x->out_cap = out_cap;
    }
    if (v == DP_LIMITS_GO)
        x_cache_phase(x);
}
