/*
 * The answer phase: the canonical events (or, on the pass-through, the
 * provider's own bytes) become the client's answer. The first content
 * event commits the answer to this attempt (the bright line); before it a
 * failure is held for the decision (x_attempt_failed), after it the client
 * learns of it in-band (x_answer_broke). The loop's end without an answer
 * (x_give_up) is here too: it is the client's answer as well.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_ledger.h"
#include "dp_metrics.h"
#include "dp_reply.h"
#include "exchange.h"
#include "fc_embed.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_sse.h"
#include "gw_time.h"

const struct dp_facade *x_facade(const struct dp_exchange *x)
{
    return x->fc ? x->fc : &fc_openai_chat;
}

static void add_loop_headers(struct gw_http_req *req, const struct dp_exchange *x)
{
    char n[16];
    snprintf(n, sizeof(n), "%d", x->nattempts);
    (void)gw_http_add_header(req, "x-llmgw-attempts", n);
    if (x->plan.route)
        (void)gw_http_add_header(req, "x-llmgw-route", x->plan.route->name);
}

/* A plain HTTP error that ends the client side, with the attempts made. */
void x_reply_error(struct dp_exchange *x, int status, const char *param, const char *code,
                   const char *msg)
{
    struct gw_http_req *req = x->req;
    if (!req)
        return;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = status;
    const struct xfail *fl = x->fails;
    if (fl && fl->last_retry_after[0] && (status == 429 || status == 503))
        (void)gw_http_add_header(req, "retry-after", fl->last_retry_after);
    add_loop_headers(req, x);
    struct gw_buf extra;
    gw_buf_init(&extra, 0);
    int with = fl && fl->nfailed && x_attempts_json(x, &extra) == GW_OK;
    dp_respond_error(req, x_facade(x), status, dp_error_type(status), param, code, msg, "attempts",
                     with ? &extra : NULL);
    gw_buf_free(&extra);
}

int x_flush_out(struct dp_exchange *x)
{
    if (!x->out.len || !x->req || !x->committed || !x->client_stream)
        return GW_OK;
    int rc = gw_http_write(x->req, x->out.data, x->out.len);
    gw_buf_reset(&x->out);
    return rc;
}

/* A committed stream's end: what is in x->out (its last events, encoded
 * with result rc) and the terminator leave together; an encoding failure
 * cuts the connection instead, since a clean end without the last events
 * would look like a whole answer. */
void x_finish_stream(struct dp_exchange *x, int rc)
{
    struct gw_http_req *req = x->req;
    x->req = NULL;
    if (rc == GW_OK)
        (void)gw_http_finish_with(req, x->out.data, x->out.len);
    else
        gw_http_abort(req);
    gw_buf_reset(&x->out);
}

/* Which provider and model answered, and how many attempts it took:
 * operators and clients both ask. */
static void add_answer_headers(struct gw_http_req *req, const struct dp_exchange *x)
{
    (void)gw_http_add_header(req, "x-llmgw-provider", x->prov->name);
    (void)gw_http_add_header(req, "x-llmgw-model", x->model);
    add_loop_headers(req, x);
}

/* The first content event: the answer is this attempt's from now on (the
 * bright line), and a stream's head goes out. */
static int commit_answer_as(struct dp_exchange *x, const char *content_type)
{
    x->committed = 1;
    x_set_phase(x, XP_ANSWER);
    /* The chunk that got here was watched under the failover budget; the
     * budget ends at the bright line. */
    x_watch_idle(x);
    /* No attempt follows the bright line: the request's document (its
     * jansson tree and canonical form, often many times the body's size)
     * is given back for the rest of a stream, which encodes from its own
     * state (or relays); a whole body is short-lived, and a translated one
     * renders from it at the end. */
    if (x->client_stream && x->creq) {
        /* The target's model may be the client's own words (an exact
         * selector): it is kept, for the record. The failed attempts'
         * records (x->fails) and the plan's candidates may still point into
         * the request: after a stream's bright line nothing reads them (a
         * failure is in-band, without the attempts). */
        char *m = strdup(x->model);
        if (m) {
            if (x->mmodel == x->model) /* its metric label, when configured */
                x->mmodel = m;
            x->model = x->model_own = m;
            canon_req_free(x->creq);
            x->creq = NULL;
        }
    }
    x->t_first_content = x->t_client_first = gw_now_us();
    if (!x->client_stream)
        return GW_OK;
    x->stream_counted = 1;
    dp_metrics_open_streams(1);
    add_answer_headers(x->req, x);
    if (dp_ledger_enabled()) /* the cost follows in the stream's last usage event */
        (void)gw_http_add_header(x->req, "x-llmgw-ledger-id", x->attempt_id);
    (void)gw_http_add_header(x->req, "cache-control", "no-cache");
    return gw_http_start(x->req, 200, content_type);
}

static int commit_answer(struct dp_exchange *x)
{
    return commit_answer_as(x, "text/event-stream; charset=utf-8");
}

void x_gone_at_commit(struct dp_exchange *x)
{
    x->terminal = 1;
    x->verdict = V_CANCELED;
    x_set_failure(x, "client_closed", "canceled");
    struct gw_http_req *req = x->req;
    x->req = NULL;
    gw_http_abort(req);
}

int x_commit_stream_as(struct dp_exchange *x, const char *content_type)
{
    return commit_answer_as(x, content_type);
}

/* A whole (embeddings) answer crosses the bright line: nothing goes out
 * yet. */
void x_commit(struct dp_exchange *x)
{
    (void)commit_answer(x);
}

/* ---------------------------------------------------------------- events */

static struct fc_ctx make_ctx(struct dp_exchange *x)
{
    struct fc_ctx ctx = {.request_id = x->request_id,
                         .model = x->answer_model ? x->answer_model : x->model,
                         .created = (long long)time(NULL),
                         .bill = &x->bill};
    return ctx;
}

/* A failure before the first content event: held back, for the loop to
 * decide on once the transfer is over. */
void x_attempt_failed(struct dp_exchange *x, enum canon_failure f, int status, const char *msg)
{
    x->terminal = 1;
    x->verdict = V_FAILED;
    x->failure = f;
    x->fail_status = status;
    struct xfail *fl = x_fails(x);
    if (fl)
        snprintf(fl->fail_msg, sizeof(fl->fail_msg), "%s",
                 msg && *msg ? msg : "the upstream provider failed");
}

/* A failure after the first content event: the answer is this attempt's,
 * so the client learns of it in-band. A non-streaming client still has
 * seen nothing and gets the HTTP error. */
void x_answer_broke(struct dp_exchange *x, const struct canon_event *ev)
{
    x->terminal = 1;
    x->verdict = V_BROKE;
    x->failure = ev->failure;
    x->fail_status = ev->status;
    const char *cls = canon_failure_name(ev->failure);
    x_set_failure(x, ev->failure == CANON_FAIL_CANCELED ? "canceled" : "upstream_error", cls);
    if (!x->req)
        return;
    if (x->kind == KIND_MEDIA && x->client_stream) {
        x_media_broke(x, ev);
        return;
    }
    if (!x->client_stream) {
        char msg[512];
        snprintf(msg, sizeof(msg), "%s (provider %s, %s, after the answer started)",
                 ev->message && *ev->message ? ev->message : "the upstream provider failed",
                 x->prov->name, cls);
        x_reply_error(x, canon_failure_status(ev->failure), NULL, cls, msg);
        return;
    }
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    /* The error event and the stream's end, after what is still queued. If
     * the event cannot be encoded, the connection is cut rather than ended
     * cleanly: a clean end without the error would look like a whole
     * answer. */
    int rc = x->fc->stream_event(x->fstate, ev, &x->out);
    x_finish_stream(x, rc);
}

static void fail(struct dp_exchange *x, const struct canon_event *ev)
{
    if (x->committed)
        x_answer_broke(x, ev);
    else
        x_attempt_failed(x, ev->failure, ev->status, ev->message);
}

/* An error the gateway itself hit while answering: the client's answer
 * ends (500 or in-band), and no other target is tried. */
void x_internal_failure(struct dp_exchange *x, const char *msg)
{
    x_set_failure(x, "internal_error", NULL);
    x->terminal = 1;
    x->verdict = V_CANCELED;
    if (x->committed && x->client_stream) {
        struct canon_event e = {
            .type = CANON_EV_ERROR, .failure = CANON_FAIL_PROVIDER_5XX, .message = msg};
        x_answer_broke(x, &e);
        x->verdict = V_CANCELED; /* the provider did nothing wrong */
        return;
    }
    x_reply_error(x, 500, NULL, "internal_error", msg);
}

/* A relayed stream's end: the held usage event, with the gateway's bill
 * when the client asked for usage, and the terminator. */
static int relay_end(struct dp_exchange *x)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = fc_bill_text(&x->bill, &b);
    if (rc == GW_OK)
        rc = x->relay->relay_end(&x->relay_held, b.len ? b.data : NULL, x->include_usage, &x->out);
    gw_buf_free(&b);
    return rc;
}

/* One upstream event of a relayed stream, after its canonical events (which
 * committed the answer at its first content): the client's bytes. Nonzero
 * stops the parser. */
int x_on_raw(void *arg, const struct gw_sse_event *ev)
{
    struct dp_exchange *x = arg;
    if (!x->relay || x->terminal || !x->req || !x->client_stream)
        return x->terminal || !x->req;
    if (x->relay->relay_event(ev, &x->out, &x->relay_held) == GW_OK)
        return 0;
    struct canon_event e = {.type = CANON_EV_ERROR,
                            .failure = CANON_FAIL_PROVIDER_5XX,
                            .message = "the provider's answer is too large"};
    fail(x, &e);
    return 1;
}

static void finish_answer(struct dp_exchange *x, const struct canon_event *ev)
{
    x->terminal = 1;
    x->stop = ev->stop;
    x->have_stop = 1;
    if (!x->committed) { /* no content event: no answer */
        x_attempt_failed(x, CANON_FAIL_EMPTY_OUTPUT, 0, "the provider's answer had no content");
        return;
    }
    x->verdict = V_OK;
    if (!x->req)
        return;
    struct gw_http_req *req = x->req;
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    if (x->client_stream) {
        x_finish_stream(x, x->relay ? relay_end(x) : x->fc->stream_event(x->fstate, ev, &x->out));
        return;
    }
    if (x->relay) { /* the provider's whole body, as it came */
        x->req = NULL;
        add_answer_headers(req, x);
        x_add_cost_headers(req, x);
        const struct gw_buf *b = &x->parser->body;
        gw_http_respond(req, 200, "application/json", b->data ? b->data : "", b->len);
        return;
    }
    struct fc_ctx ctx = make_ctx(x);
    gw_buf_reset(&x->out);
    if (canon_acc_add(&x->acc, ev) != GW_OK ||
        x->fc->render(x->creq, &ctx, &x->acc, &x->out) != GW_OK) {
        x_internal_failure(x, "could not build the answer");
        return;
    }
    x->req = NULL;
    add_answer_headers(req, x);
    x_add_cost_headers(req, x);
    gw_http_respond(req, 200, "application/json", x->out.data ? x->out.data : "", x->out.len);
}

/* The sink every driver emits into. Returns nonzero once the attempt is
 * over (terminal event, or the client is gone), which stops the parser. */
int x_on_event(void *arg, const struct canon_event *ev)
{
    struct dp_exchange *x = arg;
    if (x->terminal)
        return 1;
    struct canon_event with_tier;
    if (ev->type == CANON_EV_START && !ev->service_tier && x->hdr_tier) {
        /* The tier a header named (dp_driver.tier_header). */
        with_tier = *ev;
        with_tier.service_tier = x->hdr_tier;
        ev = &with_tier;
    }
    if (ev->type == CANON_EV_ERROR) {
        if (x->finishing && x->nevents == 0 && ev->failure == CANON_FAIL_NETWORK) {
            /* A success status and a body that ended cleanly with nothing
             * in it: no answer at all, not a broken connection. */
            struct canon_event e = *ev;
            e.failure = CANON_FAIL_EMPTY_OUTPUT;
            e.message = "the provider's answer is empty";
            fail(x, &e);
            return 1;
        }
        fail(x, ev);
        return 1;
    }
    x->nevents++;
    /* Usage is kept even when the client has left: the provider bills it;
     * so is what content cost, for an answer cut before its usage came
     * (record.c estimates it). */
    if (ev->type == CANON_EV_USAGE) {
        x->usage = *ev->usage;
        canon_usage_clamp(&x->usage);
    } else if (canon_is_content(ev->type))
        x->out_bytes += (int64_t)ev->len + (ev->name ? (int64_t)strlen(ev->name) : 0);
    /* A stream or a relay keeps the answer for the response cache and
     * the judge too, each within its bound. */
    int for_cache = x_cache_accumulates(x), for_judge = x_judge_accumulates(x);
    if (for_cache && x->out_bytes > (int64_t)x->l->cache_max_entry) {
        x_cache_give_up_store(x, 1);
        for_cache = 0;
    }
    if (for_judge && x->out_bytes > (int64_t)X_JUDGE_MAX_ANSWER) {
        x_judge_give_up(x);
        for_judge = 0;
    }
    if ((for_cache || for_judge) && canon_acc_add(&x->acc, ev) != GW_OK) {
        if (for_cache)
            x_cache_give_up_store(x, 0);
        if (for_judge)
            x_judge_give_up(x);
    }
    if (ev->type == CANON_EV_DONE) {
        x_price(x); /* the usage is final: the stream's last event carries the cost */
        finish_answer(x, ev);
        if (x->verdict == V_OK)
            x_cache_store(x);
        return 1;
    }
    if (!x->req)
        return 1;
    if (ev->type == CANON_EV_START && ev->name) {
        free(x->answer_model);
        x->answer_model = strndup(ev->name, 127); /* NULL: the target's name stands */
    }
    if (x->client_stream && !x->fstate) {
        struct fc_ctx ctx = make_ctx(x);
        x->fstate = x->fc->stream_new(x->creq, &ctx);
        if (!x->fstate) {
            x_internal_failure(x, "out of memory");
            return 1;
        }
    }
    if (canon_is_content(ev->type) && !x->committed && commit_answer(x) != GW_OK) {
        x_gone_at_commit(x);
        return 1;
    }
    /* Relayed, the provider's own bytes are the answer (on_raw). */
    int rc = x->relay           ? GW_OK
             : x->client_stream ? x->fc->stream_event(x->fstate, ev, &x->out)
                                : canon_acc_add(&x->acc, ev);
    if (rc != GW_OK) {
        struct canon_event e = {.type = CANON_EV_ERROR,
                                .failure = CANON_FAIL_PROVIDER_5XX,
                                .message = rc == GW_ELIMIT
                                               ? "the provider's answer is too large"
                                               : "the provider's answer broke the event order"};
        fail(x, &e);
        return 1;
    }
    return 0;
}

/* The loop is over without an answer: the client gets the last attempt's
 * failure (or the refusal, or the budget's end), with every attempt. */
void x_give_up(struct dp_exchange *x)
{
    char msg[640];
    const struct xfail *fl = x->fails;
    const struct failed_attempt *last = fl && fl->nfailed ? &fl->failed[fl->nfailed - 1] : NULL;
    const char *last_msg = fl && fl->last_msg[0] ? fl->last_msg : "the upstream provider failed";
    if (x->budget_out) {
        x_set_failure(x, "upstream_error", "timeout");
        snprintf(msg, sizeof(msg), "%s (after %d attempts)", last_msg, x->nattempts);
        x_reply_error(x, 504, NULL, "timeout", msg);
    } else if (last && last->refused) {
        const struct canon_err *re = &fl->rerr;
        x_set_failure(x, re->status >= 500 ? "provider_misconfigured" : "refused",
                      canon_failure_name(last->failure));
        int status = re->status ? re->status : 400;
        x_reply_error(x, status, re->param[0] ? re->param : NULL, re->code, re->message);
    } else if (last) {
        enum canon_failure f = last->failure;
        const char *cls = canon_failure_name(f);
        x_set_failure(x, "upstream_error", cls);
        int status = canon_failure_status(f);
        /* A provider's 4xx about the request is the client's to see. */
        if ((f == CANON_FAIL_BAD_REQUEST || f == CANON_FAIL_NOT_FOUND) && last->status >= 400 &&
            last->status < 500)
            status = last->status;
        if (x->nattempts > 1)
            snprintf(msg, sizeof(msg), "%s (provider %s, %s; %d attempts, all failed)", last_msg,
                     last->provider, cls, x->nattempts);
        else
            snprintf(msg, sizeof(msg), "%s (provider %s, %s)", last_msg, last->provider, cls);
        x_reply_error(x, status, NULL, cls, msg);
    } else {
        /* Every candidate's breaker opened while this request waited. */
        x_set_failure(x, "no_route", NULL);
        dp_metrics_no_route("no_healthy_target");
        snprintf(msg, sizeof(msg), "no candidate is healthy for '%.100s' any more", x->selector);
        x_reply_error(x, 503, "model", "no_healthy_target", msg);
    }
    x_end(x);
}

void x_finish_embed(struct dp_exchange *x)
{
    struct canon_embed_resp e = {0};
    char msg[256] = "";
    int rc = dp_driver_of(x->prov)->parse_embed(x->coll.data ? x->coll.data : "", x->coll.len, &e,
                                                msg, sizeof(msg));
    if (rc != GW_OK || e.nvec != x->ereq.ninputs) {
        x_attempt_failed(x, CANON_FAIL_PROVIDER_5XX, x->status,
                         rc != GW_OK
                             ? (msg[0] ? msg : "the provider's embeddings answer is malformed")
                             : "the provider returned a different number of embeddings "
                               "than inputs");
        canon_embed_resp_free(&e);
        return;
    }
    x->terminal = 1;
    x_commit(x);
    x->usage = e.usage;
    canon_usage_clamp(&x->usage);
    gw_buf_reset(&x->out);
    rc = fc_embed_render(&e, x->ereq.base64, x->model, &x->out);
    canon_embed_resp_free(&e);
    if (rc != GW_OK) {
        x_internal_failure(x, "could not build the answer");
        return;
    }
    x_price(x);
    x_cache_store(x); /* x->out: the whole answer */
    x_answer_whole(x, x->out.data, x->out.len);
}

void x_answer_whole(struct dp_exchange *x, const char *body, size_t len)
{
    x_answer_whole_as(x, "application/json", body, len);
}

void x_answer_whole_as(struct dp_exchange *x, const char *content_type, const char *body,
                       size_t len)
{
    x->verdict = V_OK;
    struct gw_http_req *req = x->req;
    x->req = NULL;
    x->t_client_end = gw_now_us();
    x->final_status = 200;
    add_answer_headers(req, x);
    x_add_cost_headers(req, x);
    gw_http_respond(req, 200, content_type, body, len);
}
