/*
 * The attempt phase: a candidate's driver builds the upstream request,
 * the loop's upstream client (gw_upc.h) sends it, and its bytes go to the
 * driver's parser (whose events reach answer.c); a watchdog bounds each
 * wait. When the transfer is over its record is written (record.c) and
 * the decision (dp_decide.h) picks what follows.
 */
#include <ctype.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_breaker.h"
#include "dp_decide.h"
#include "dp_fleet.h"
#include "dp_metrics.h"
#include "dp_snapshot.h"
#include "exchange.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_rand.h"
#include "gw_time.h"
#include "gw_upc.h"

/* Pause the upstream when this much is queued for a slow client; resume
 * when 128 KiB of it has drained, so a client that keeps reading, however
 * slowly, keeps the upstream (and the idle watchdog) going: only one that
 * stops reading for an idle timeout is cut as stalled. */
#define OUT_HIGH_WATER (1u << 20)
#define OUT_LOW_WATER (896u << 10)

/* Gives back the current attempt's upstream resources. */
void x_release_upstream(struct dp_exchange *x)
{
    if (x->running) {
        gw_upc_cancel(x->xf);
        x->running = 0;
    }
    x->xf = NULL;
    drv_request_free(&x->dreq);
    memset(&x->dreq, 0, sizeof(x->dreq));
    if (x->parser) {
        x->parser->drv->parser_free(x->parser);
        x->parser = NULL;
    }
    gw_buf_reset(&x->coll);
    if (x->timer)
        evtimer_del(x->timer);
    x->wd_at = 0;
    x->paused = 0;
}

static void on_client_drain(struct gw_http_req *req, void *arg)
{
    (void)req;
    struct dp_exchange *x = arg;
    if (x->paused && x->running) {
        x->paused = 0;
        gw_upc_resume(x->xf);
    }
}

/* The watchdog: ms from now, but before the answer started never past the
 * failover budget. */
static void arm_watchdog(struct dp_exchange *x, long ms)
{
    int64_t now = gw_now_us();
    int64_t us = (int64_t)ms * 1000;
    x->budget_timer = 0;
    if (!x->committed) {
        int64_t left = x->deadline_us - now;
        if (left <= us) {
            us = left > 1000 ? left : 1000;
            x->budget_timer = 1;
        }
    }
    /* Every piece of body moves the deadline later: the timer set for an
     * earlier one stays, and when it fires it is moved on to the deadline
     * (watchdog). Re-arming a timer per event would cost a heap operation
     * among every open stream's timers, per event. */
    /* No wait runs past the attempt's total deadline. */
    if (x->end_by_us && now + us > x->end_by_us) {
        int64_t left = x->end_by_us - now;
        us = left > 1000 ? left : 1000;
    }
    x->wd_due = now + us;
    if (x->wd_at && x->wd_at <= x->wd_due)
        return;
    x->wd_at = x->wd_due;
    struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
    evtimer_add(x->timer, &tv);
}

void x_watch_idle(struct dp_exchange *x)
{
    if (x->running)
        arm_watchdog(x, x->prov->idle_timeout_ms);
}

static void on_header(const char *buf, size_t n, void *arg)
{
    struct dp_exchange *x = arg;
    if (x->kind == KIND_MEDIA)
        x_media_header(x, buf, n);
    if (!x->t_first_byte) {
        x->t_first_byte = gw_now_us();
        arm_watchdog(x, x->prov->idle_timeout_ms);
    }
    if (n > 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new status line (after 100 Continue or a redirect) resets. */
        const char *sp = memchr(buf, ' ', n), *end = buf + n;
        int st = 0;
        for (const char *d = sp ? sp + 1 : end; d < end && *d >= '0' && *d <= '9' && st < 1000; d++)
            st = st * 10 + (*d - '0');
        x->status = st;
        x->retry_after[0] = '\0';
        x->hdr_tier = NULL;
        return;
    }
    const char *th = dp_driver_of(x->prov)->tier_header;
    size_t tl = th ? strlen(th) : 0;
    if (tl && n > tl + 1 && strncasecmp(buf, th, tl) == 0 && buf[tl] == ':') {
        char v[16];
        size_t i = tl + 1, k = 0;
        while (i < n && (buf[i] == ' ' || buf[i] == '\t'))
            i++;
        while (i < n && k + 1 < sizeof(v) && buf[i] > ' ')
            v[k++] = (char)tolower((unsigned char)buf[i++]);
        v[k] = '\0';
        x->hdr_tier = canon_tier_served(v); /* a static word, or NULL */
        return;
    }
    if (n > 12 && strncasecmp(buf, "retry-after:", 12) == 0) {
        const char *v = buf + 12;
        size_t vl = n - 12;
        while (vl && (*v == ' ' || *v == '\t')) {
            v++;
            vl--;
        }
        while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
            vl--;
        /* Copied into our own response head: only plain values. */
        int clean = vl < sizeof(x->retry_after);
        for (size_t i = 0; clean && i < vl; i++)
            clean = (unsigned char)v[i] > 0x20 && v[i] != 0x7f;
        if (clean) {
            memcpy(x->retry_after, v, vl);
            x->retry_after[vl] = '\0';
        }
    }
}

static int ok_status(const struct dp_exchange *x)
{
    return x->status >= 200 && x->status < 300;
}

static size_t on_body(const char *buf, size_t n, void *arg)
{
    struct dp_exchange *x = arg;
    if (!x->req)
        return x->terminal && x->verdict == V_OK ? n : 0; /* after the answer, drain; else stop */
    arm_watchdog(x, x->prov->idle_timeout_ms);
    if (x->committed && x->client_stream && gw_http_pending(x->req) > OUT_HIGH_WATER) {
        x->paused = 1;
        gw_http_on_drain(x->req, OUT_LOW_WATER, on_client_drain, x);
        return GW_UPC_PAUSE;
    }
    if (x->terminal)
        return 0; /* a failed attempt: nothing more is wanted from it */
    if (x->kind == KIND_MEDIA && ok_status(x))
        return x_media_body(x, buf, n);
    if (x->kind == KIND_EMBED || !ok_status(x)) {
        /* Kept whole (error bodies only up to a bound, to classify). */
        if (gw_buf_append(&x->coll, buf, n) != GW_OK && x->kind == KIND_EMBED) {
            x_attempt_failed(x, CANON_FAIL_PROVIDER_5XX, x->status,
                             "the provider's answer is too large");
            return 0;
        }
        return n;
    }
    x->parser->drv->parse(x->parser, buf, n, &x->sink);
    if (x->terminal)
        return x->verdict == V_OK || x->verdict == V_BROKE ? n : 0;
    if (!x->req)
        return 0;
    return x_flush_out(x) == GW_OK ? n : 0;
}

static void emit_failure(struct dp_exchange *x, enum canon_failure f, int status, const char *msg)
{
    struct canon_event ev = {
        .type = CANON_EV_ERROR, .failure = f, .status = status, .message = msg};
    x_on_event(x, &ev);
}

static void upstream_error_status(struct dp_exchange *x)
{
    enum canon_failure f;
    char msg[384];
    const struct dp_driver *d = dp_driver_of(x->prov);
    (d->classify ? d->classify : drv_classify_default)(x->status, x->coll.data, x->coll.len, &f,
                                                       msg, sizeof(msg));
    if (!msg[0])
        snprintf(msg, sizeof(msg), "the provider answered HTTP %d", x->status);
    if (!x->retry_after[0] && d->retry_after)
        (void)d->retry_after(x->coll.data, x->coll.len, x->retry_after, sizeof(x->retry_after));
    emit_failure(x, f, x->status, msg);
}

static void on_done(enum gw_upc_result rc, const char *why, void *arg)
{
    struct dp_exchange *x = arg;
    x->running = 0;
    x->xf = NULL; /* gw_upc frees it after this returns */
    if (x->terminal) {
        /* decided already */
    } else if (rc == GW_UPC_OK && !ok_status(x)) {
        upstream_error_status(x);
    } else if (rc == GW_UPC_OK && x->kind == KIND_EMBED) {
        x_finish_embed(x);
    } else if (rc == GW_UPC_OK && x->kind == KIND_MEDIA) {
        x_media_done(x);
    } else if (rc == GW_UPC_OK) {
        x->finishing = 1;
        x->parser->drv->finish(x->parser, &x->sink);
        if (!x->terminal)
            emit_failure(x, CANON_FAIL_PROVIDER_5XX, 0,
                         "the provider's answer ended without a terminator");
    } else {
        char msg[256];
        snprintf(msg, sizeof(msg), "the provider could not be reached or broke off: %s",
                 why ? why : gw_upc_strerror(rc));
        emit_failure(x, canon_classify_transport(rc), 0, msg);
    }
    x_attempt_over(x);
}

/* The watchdog of an attempt in flight: until the first byte it is the
 * provider's first-byte timeout; after it, the idle timeout, re-armed by
 * every piece of body; before the answer started, never past the failover
 * budget; while the upstream is paused for a slow client, the same idle
 * timeout bounds how long that client may stall. */
static void watchdog(struct dp_exchange *x)
{
    int64_t early = x->wd_due - gw_now_us();
    if (early > 1000) { /* the deadline moved on since the timer was set */
        x->wd_at = x->wd_due;
        struct timeval tv = {(time_t)(early / 1000000), (suseconds_t)(early % 1000000)};
        evtimer_add(x->timer, &tv);
        return;
    }
    if (x->running) {
        gw_upc_cancel(x->xf);
        x->xf = NULL;
        x->running = 0;
    }
    if (x->terminal && !x->req) {
        /* The client has its whole answer; only the upstream's tail
         * stalled. Nothing failed that the client could see. */
    } else if (x->paused) {
        /* The client stopped reading: it cannot be told anything. */
        x_set_failure(x, "client_stalled", "canceled");
        struct gw_http_req *req = x->req;
        x->req = NULL;
        x->final_status = 499;
        x->terminal = 1;
        x->verdict = V_CANCELED;
        if (req)
            gw_http_abort(req);
    } else if (x->end_by_us && gw_now_us() >= x->end_by_us - 1000) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "the attempt ran past the route's max_duration_ms (%lld ms) and was ended",
                 (long long)((x->end_by_us - x->ta0) / 1000));
        emit_failure(x, CANON_FAIL_TIMEOUT, 0, msg);
    } else if (!x->committed && (x->budget_timer || gw_now_us() >= x->deadline_us)) {
        /* The timer may fire a little before the deadline it was set for:
         * which wait it was set for decides, not the clock. */
        char msg[160];
        snprintf(msg, sizeof(msg), "the failover budget (%ld ms) ran out before an answer started",
                 x->budget_ms);
        x->budget_out = 1;
        emit_failure(x, CANON_FAIL_TIMEOUT, 0, msg);
    } else {
        emit_failure(x, CANON_FAIL_TIMEOUT, 0,
                     x->t_first_byte ? "the provider stopped sending before the answer was complete"
                                     : "the provider did not answer within its first-byte timeout");
    }
    x_attempt_over(x);
}

void x_on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_exchange *x = arg;
    x->wd_at = 0;               /* the timer is no longer pending */
    if (x->phase == XP_CACHE) { /* a wait for an identical request's answer */
        x_cache_timeout(x);
        return;
    }
    if (x->phase == XP_WAIT && x->wait_from) {
        x->backoff_us += gw_now_us() - x->wait_from;
        x->wait_from = 0;
    }
    if (x->phase == XP_WAIT)
        x_start_attempt(x);
    else
        watchdog(x);
}

static void schedule(struct dp_exchange *x, int64_t delay_us)
{
    x_set_phase(x, XP_WAIT);
    x->wd_at = 0; /* the timer now waits for the next attempt */
    x->wait_from = delay_us > 0 ? gw_now_us() : 0;
    struct timeval tv = {(time_t)(delay_us / 1000000), (suseconds_t)(delay_us % 1000000)};
    evtimer_add(x->timer, &tv);
}

/* After a failed attempt: the decision (dp_decide.h), carried out. */
static void decide_next(struct dp_exchange *x)
{
    struct dp_failed f = {.failure = x->failure,
                          .tries = x->tries,
                          .last = x->ci + 1 >= x->plan.ncands,
                          .budget_out = x->budget_out,
                          .now_us = gw_now_us(),
                          .deadline_us = x->deadline_us,
                          .retry_after = x->retry_after,
                          .retry_base_ms = x->l->retry_base_ms};
    struct dp_decision d = dp_decide(&f, gw_rand_next(&x->l->rng));
    switch (d.next) {
    case DP_NEXT_RETRY:
        schedule(x, d.delay_us);
        return;
    case DP_NEXT_ADVANCE:
        x->ci++;
        x->tries = 0;
        /* On the next turn of the loop, not inside the transfer's callback. */
        schedule(x, 0);
        return;
    case DP_NEXT_BUDGET:
        if (!x->budget_out) {
            x->budget_out = 1;
            struct xfail *fl = x_fails(x);
            if (fl)
                snprintf(fl->last_msg, sizeof(fl->last_msg),
                         "the failover budget (%ld ms) ran out before an answer started",
                         x->budget_ms);
        }
        break;
    case DP_NEXT_GIVE_UP:
        break;
    }
    x_give_up(x);
}

/* An attempt's transfer is over: its record is written, its resources go
 * back to the loop; then the request ends, or the decision goes on. */
void x_attempt_over(struct dp_exchange *x)
{
    int64_t now = gw_now_us();
    x_record_attempt(x, now);
    /* Upstream time: until the transfer ended, or the client's answer did
     * when the upstream's tail outlived it. */
    int64_t upto = x->t_client_end > x->ta0 && x->t_client_end < now ? x->t_client_end : now;
    x->upstream_us += upto - x->ta0;
    x_release_upstream(x);
    if (x->verdict == V_FAILED) {
        x_remember(x, x->failure, x->fail_status, 0);
        if (x->req) {
            decide_next(x);
            return;
        }
    }
    x_end(x);
}

static int start_upstream(struct dp_exchange *x)
{
    /* No total timeout on streams: a stall between bytes is the failure,
     * and the watchdog measures it exactly. */
    struct gw_upc_opts o = {.url = x->dreq.url,
                            .headers = x->dreq.headers,
                            .body = x->dreq.body,
                            .body_len = x->dreq.body_len,
                            .body_iov = x->dreq.niov ? x->dreq.iov : NULL,
                            .body_iovcnt = x->dreq.niov,
                            .connect_timeout_ms = 10000,
                            .on_header = on_header,
                            .on_body = on_body,
                            .on_done = on_done,
                            .arg = x};
    x->xf = gw_upc_start(x->l->upc, &o);
    if (!x->xf)
        return GW_ENOMEM;
    x->running = 1;
    x_set_phase(x, XP_ATTEMPT);
    arm_watchdog(x, x->prov->first_byte_timeout_ms);
    return GW_OK;
}

/* Forgets the previous attempt's partial answer: nothing of it reached
 * the client (it failed before its first content event). */
void x_set_target(struct dp_exchange *x, const struct dp_candidate *c)
{
    x->prov = c->provider;
    x->model = c->model;
    x->mmodel = c->entry ? c->model : dp_metrics_model(x->snap, c->provider->name, c->model);
}

static void reset_attempt(struct dp_exchange *x, const struct dp_candidate *c)
{
    x_set_target(x, c);
    x->relay = NULL;
    gw_buf_reset(&x->relay_held);
    x->status = 0;
    x->retry_after[0] = '\0';
    x->probe = 0;
    x->fleet_probe = 0;
    x->nevents = x->finishing = x->terminal = 0;
    x->verdict = V_NONE;
    x->fail_status = 0;
    if (x->fails)
        x->fails->fail_msg[0] = '\0';
    x->t_first_byte = x->t_first_content = 0;
    free(x->answer_model);
    x->answer_model = NULL;
    memset(&x->usage, 0, sizeof(x->usage));
    x->have_stop = 0;
    x->priced = 0;
    x->out_bytes = 0;
    x->usage_estimated = 0;
    memset(&x->bill, 0, sizeof(x->bill));
    if (x->fstate) {
        x->fc->stream_free(x->fstate);
        x->fstate = NULL;
    }
    canon_acc_free(&x->acc);
    canon_acc_init(&x->acc, 0);
    gw_buf_reset(&x->out);
}

/* Whether the current attempt passes the client's request through: the
 * driver speaks the client's wire format, and the provider has not asked
 * for translation (options.passthrough false). */
static int relays(const struct dp_exchange *x, const struct dp_driver *d)
{
    return x->kind == KIND_CHAT && d->relay_build && d->info->wire && x->fc->wire &&
           strcmp(d->info->wire, x->fc->wire) == 0 &&
           !json_is_false(json_object_get(x->prov->options, "passthrough"));
}

/* The client's body as a relay forwards it: as it came, but for the
 * gateway's own fallback_timeout_ms (take_body_budget), cut out once. */
static const char *relay_body(struct dp_exchange *x, size_t *len, struct canon_err *err)
{
    const char *body = gw_http_req_body(x->req, len);
    if (!x->body_budget_ms)
        return body;
    if (!x->relay_body) {
        size_t at, cut;
        if (gw_json_span_cut(body, *len, X_BODY_BUDGET, &at, &cut) != 1) {
            canon_err_set(err, 400, X_BODY_BUDGET, "invalid_request",
                          "'%s' could not be located in the request body (a key spelled with "
                          "escapes?)",
                          X_BODY_BUDGET);
            return NULL;
        }
        if (!(x->relay_body = malloc(*len - cut + 1))) {
            canon_err_set(err, 500, NULL, "internal_error", "out of memory");
            return NULL;
        }
        memcpy(x->relay_body, body, at);
        memcpy(x->relay_body + at, body + at + cut, *len - at - cut);
        x->relay_body_len = *len - cut;
        x->relay_body[x->relay_body_len] = '\0';
    }
    *len = x->relay_body_len;
    return x->relay_body;
}

void x_name_attempt(struct dp_exchange *x)
{
    if (x->id_salt)
        snprintf(x->attempt_id, sizeof(x->attempt_id), "%.128s~%08x.%d", x->request_id, x->id_salt,
                 x->nattempts + 1);
    else
        snprintf(x->attempt_id, sizeof(x->attempt_id), "%.149s.%d", x->request_id,
                 x->nattempts + 1);
}

/* The driver's upstream request for the current candidate. */
static int build(struct dp_exchange *x, struct canon_err *err)
{
    /* The attempt's id goes upstream as its x-request-id: the provider's
     * own log then names the ledger row. */
    x_name_attempt(x);
    struct drv_target dt = {.provider = x->prov,
                            .model = x->model,
                            .request_id = x->attempt_id,
                            .traceparent = x_trace_attempt_begin(x),
                            .tracestate = x_trace_tracestate(x)};
    const struct dp_driver *d = dp_driver_of(x->prov);
    if (x->kind == KIND_EMBED) {
        x->ereq.model = x->model;
        return d->build_embed(&dt, &x->ereq, &x->dreq, err);
    }
    if (x->kind == KIND_MEDIA)
        return x_media_build(x, &dt, err);
    int rc;
    if (relays(x, d)) {
        size_t len;
        const char *body = relay_body(x, &len, err);
        if (!body)
            return err->status == 500 ? GW_ENOMEM : GW_EINVAL;
        struct drv_relay_edits ed = {.stream = x->client_stream, .max_tokens = x->out_cap};
        x->relay = d;
        dt.client_beta = gw_http_req_header(x->req, "anthropic-beta");
        rc = d->relay_build(&dt, body, len, &ed, &x->dreq, err);
    } else if (x->creq->opaque.status) {
        *err = x->creq->opaque; /* what only the client's own format can carry */
        /* The refusal names the target that cannot take it. */
        char msg[sizeof(err->message)];
        if (snprintf(msg, sizeof(msg),
                     "%s (target: provider '%s', driver '%s', which "
                     "translates the request)",
                     x->creq->opaque.message, x->prov->name, d->info->name) > 0)
            memcpy(err->message, msg, sizeof(msg));
        rc = GW_EINVAL;
    } else {
        rc = d->build_chat(&dt, x->creq, &x->dreq, err);
    }
    if (rc == GW_OK && !(x->parser = d->parser_new(x->dreq.stream)))
        rc = GW_ENOMEM;
    return rc;
}

/* The fleet view (dp_fleet) may have turned the target down while the
 * request waited: 0 skips it. When this replica holds its probe, the
 * attempt becomes the probe (x->fleet_probe). */
static int fleet_admit(struct dp_exchange *x, int64_t now)
{
    enum dp_admit ad = dp_fleet_admit(x->prov->name, x->model, now);
    if (ad == DP_ADMIT_NO)
        gw_logf(GW_LOG_INFO, "candidate skipped", "{s:s,s:s,s:s,s:s}", "request_id", x->request_id,
                "provider", x->prov->name, "model", x->model, "reason", "fleet_down");
    x->fleet_probe = ad == DP_ADMIT_PROBE;
    return ad != DP_ADMIT_NO;
}

/* The fleet's probe slot back when the local breaker refused the attempt. */
static void fleet_unadmit(struct dp_exchange *x)
{
    if (x->fleet_probe)
        dp_fleet_unadmit(x->prov->name, x->model);
    x->fleet_probe = 0;
}

/* Starts the current candidate, moving past those that cannot be tried:
 * a driver that refuses the request (the next one may take it), a breaker
 * that opened while the request waited. */
void x_start_attempt(struct dp_exchange *x)
{
    for (; x->ci < x->plan.ncands; x->ci++, x->tries = 0) {
        reset_attempt(x, &x->plan.cands[x->ci]);
        struct canon_err err = {0};
        int rc = build(x, &err);
        if (rc == GW_EINVAL) {
            /* Nothing was sent: a refusal names the client's field (4xx),
             * or the provider's configuration (5xx). */
            struct xfail *fl = x_fails(x);
            if (fl)
                fl->rerr = err;
            x_remember(x, err.status >= 500 ? CANON_FAIL_AUTH_FAILED : CANON_FAIL_UNSUPPORTED_INPUT,
                       0, 1);
            x_release_upstream(x);
            continue;
        }
        if (rc != GW_OK) {
            x_release_upstream(x);
            x_internal_failure(x, "the gateway could not build the upstream request");
            x_end(x);
            return;
        }
        int64_t now = gw_now_us();
        if (!fleet_admit(x, now)) {
            x_release_upstream(x);
            continue;
        }
        enum dp_admit ad = dp_breaker_admit(x->l->breakers, x->prov->name, x->model, now);
        if (ad == DP_ADMIT_NO) {
            fleet_unadmit(x);
            gw_logf(GW_LOG_INFO, "candidate skipped", "{s:s,s:s,s:s,s:s}", "request_id",
                    x->request_id, "provider", x->prov->name, "model", x->model, "reason",
                    "breaker_open");
            x_release_upstream(x);
            continue;
        }
        x->probe = ad == DP_ADMIT_PROBE;
        /* Counted when they happen: a retry or a failover that a breaker
         * or a refusal prevented is none. */
        struct dp_metrics_target mt;
        x_metrics_target(x, &mt);
        if (x->tries > 0) {
            x->nretries++;
            dp_metrics_retry(&mt);
        } else if (x->nattempts > 0) {
            x->nfailovers++;
            dp_metrics_failover(mt.route);
        }
        x->tries++;
        x->nattempts++;
        x->ta0 = now;
        x->at_ms = gw_wall_ms();
        long max_ms = x->plan.route && x->plan.route->max_duration_ms
                          ? x->plan.route->max_duration_ms
                          : DP_DEFAULT_DURATION_MS;
        x->end_by_us = now + (int64_t)max_ms * 1000;
        if (start_upstream(x) != GW_OK) {
            x->verdict = V_CANCELED;
            x_record_attempt(x, now);
            x_release_upstream(x);
            x_internal_failure(x, "the gateway could not start the upstream request");
            x_end(x);
        }
        return;
    }
    x_give_up(x);
}
