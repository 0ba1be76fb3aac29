#include "dp_exchange.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "canon.h"
#include "dp_driver.h"
#include "dp_facade.h"
#include "dp_snapshot.h"
#include "dp_worker.h"
#include "gw_buf.h"
#include "gw_curlev.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_time.h"

/* Pause the upstream when this much is queued for a slow client; resume
 * when 128 KiB of it has drained, so a client that keeps reading, however
 * slowly, keeps the upstream (and the idle watchdog) going: only one that
 * stops reading for an idle timeout is cut as stalled. */
#define OUT_HIGH_WATER (1u << 20)
#define OUT_LOW_WATER (896u << 10)
/* An error answer's body is kept up to this much, to classify it. */
#define MAX_ERROR_BODY (64u << 10)

enum kind { KIND_CHAT, KIND_EMBED };

struct dp_attempt {
    struct dp_worker *w;
    struct dp_attempt *prev, *next;
    enum kind kind;
    struct gw_http_req *req; /* NULL once the client side has ended */
    struct dp_snapshot *snap;
    struct dp_target t; /* t.model points at model */
    char *model;
    const struct dp_key *key;
    char request_id[160];
    char path[64];
    const struct dp_facade *fc; /* chat */
    struct canon_req *creq;     /* chat */
    struct canon_embed_req ereq;
    int embed_base64;
    int client_stream;

    /* upstream */
    struct drv_request dreq;
    struct drv_parser *parser;
    CURL *easy;
    int running; /* easy is in the multi handle */
    int status;  /* upstream HTTP status */
    char retry_after[32];
    struct gw_buf coll; /* error bodies; embeddings answers */
    int paused;
    struct event *watchdog; /* first byte, then idle gaps (see arm_watchdog) */

    /* the answer */
    struct canon_sink sink;
    void *fstate; /* facade stream encoder, created at the first event */
    struct canon_acc acc;
    struct gw_buf out; /* client bytes not yet written */
    int committed;     /* a content event arrived: the answer is this attempt's */
    int nevents;       /* events the driver emitted */
    int finishing;     /* inside the driver's finish() after a clean end */
    int terminal;      /* DONE or ERROR seen */
    char answer_model[128];
    struct canon_usage usage;
    enum canon_stop stop;
    int have_stop;

    int64_t t0, t_first_byte, t_first_content, t_client_end;
    int final_status;
    const char *outcome;
    const char *error_class;
};

struct dp_attempt *dp_exchange_next(struct dp_attempt *a)
{
    return a->next;
}

/* ---------------------------------------------------------------- lifetime */

static const char *api_name(const struct dp_attempt *a)
{
    return a->kind == KIND_EMBED ? "openai.embeddings" : a->fc->name;
}

/* "name":<escaped string> after a comma. */
static int field_str(struct gw_buf *o, const char *name, const char *v)
{
    int rc = gw_buf_printf(o, ",\"%s\":", name);
    return rc == GW_OK ? gw_json_escape(o, v, strlen(v)) : rc;
}

static int field_ms(struct gw_buf *o, const char *name, int64_t from, int64_t to)
{
    return gw_buf_printf(o, ",\"%s\":%.3f", name, (double)(to - from) / 1000.0);
}

/* The access line, written by hand (every request pays for it): fields
 * only, never request or answer text. */
static void log_access(struct dp_attempt *a)
{
    struct gw_buf *o = &a->out;
    gw_buf_reset(o);
    int64_t end = a->t_client_end ? a->t_client_end : gw_now_us();
    int rc = gw_buf_appends(o, "\"request_id\":");
    if (rc == GW_OK)
        rc = gw_json_escape(o, a->request_id, strlen(a->request_id));
    if (rc == GW_OK)
        rc = gw_buf_appends(o, ",\"method\":\"POST\"");
    if (rc == GW_OK)
        rc = field_str(o, "path", a->path);
    if (rc == GW_OK)
        rc = field_str(o, "api", api_name(a));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"status\":%d", a->final_status);
    if (rc == GW_OK)
        rc = field_str(o, "route", a->t.route ? a->t.route->name : "");
    if (rc == GW_OK)
        rc = field_str(o, "provider", a->t.provider->name);
    if (rc == GW_OK)
        rc = field_str(o, "driver", a->t.provider->driver);
    if (rc == GW_OK)
        rc = field_str(o, "model", a->t.model);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"stream\":%s", a->client_stream ? "true" : "false");
    /* Latency is what the client saw: until its response ended. */
    if (rc == GW_OK)
        rc = field_ms(o, "latency_ms", a->t0, end);
    if (rc == GW_OK && a->t_first_byte)
        rc = field_ms(o, "ttfb_ms", a->t0, a->t_first_byte);
    if (rc == GW_OK && a->t_first_content)
        rc = field_ms(o, "ttfc_ms", a->t0, a->t_first_content);
    if (rc == GW_OK && a->status)
        rc = gw_buf_printf(o, ",\"upstream_status\":%d", a->status);
    if (rc == GW_OK && a->usage.have) {
        const struct canon_usage *u = &a->usage;
        rc = gw_buf_printf(
            o,
            ",\"tokens\":{\"input\":%lld,\"cache_read\":%lld,\"cache_write_5m\":%lld,"
            "\"cache_write_1h\":%lld,\"output\":%lld,\"reasoning\":%lld}",
            (long long)u->input, (long long)u->cache_read, (long long)u->cache_write_5m,
            (long long)u->cache_write_1h, (long long)u->output, (long long)u->reasoning);
    }
    if (rc == GW_OK && a->have_stop)
        rc = field_str(o, "stop_reason", canon_stop_name(a->stop));
    if (rc == GW_OK)
        rc = field_str(o, "outcome", a->outcome ? a->outcome : "ok");
    if (rc == GW_OK && a->error_class)
        rc = field_str(o, "error_class", a->error_class);
    if (rc == GW_OK && a->key)
        rc = field_str(o, "key_id", a->key->id);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"snapshot_version\":%lld", (long long)a->snap->version);
    if (rc == GW_OK)
        gw_log_access_fields(o->data, o->len);
}

static void attempt_free(struct dp_attempt *a)
{
    if (a->running)
        gw_curlev_remove(a->w->curl, a->easy);
    if (a->easy) {
        struct dp_worker *w = a->w;
        if (w->nidle_easy < DP_IDLE_EASY) {
            curl_easy_reset(a->easy);
            w->idle_easy[w->nidle_easy++] = a->easy;
        } else {
            curl_easy_cleanup(a->easy);
        }
    }
    drv_request_free(&a->dreq);
    if (a->parser)
        a->parser->drv->parser_free(a->parser);
    if (a->fstate)
        a->fc->stream_free(a->fstate);
    canon_acc_free(&a->acc);
    canon_req_free(a->creq);
    free(a->ereq.inputs);
    free(a->model);
    if (a->watchdog)
        event_free(a->watchdog);
    gw_buf_free(&a->coll);
    gw_buf_free(&a->out);
    dp_snapshot_unref(a->snap);
    if (a->prev)
        a->prev->next = a->next;
    else
        a->w->attempts = a->next;
    if (a->next)
        a->next->prev = a->prev;
    free(a);
}

static void attempt_end(struct dp_attempt *a)
{
    log_access(a);
    attempt_free(a);
}

static void set_failure(struct dp_attempt *a, const char *outcome, const char *cls)
{
    if (!a->outcome) {
        a->outcome = outcome;
        a->error_class = cls;
    }
}

/* ---------------------------------------------------------------- client side */

static const struct dp_facade *facade_of(const struct dp_attempt *a)
{
    return a->fc ? a->fc : &fc_openai_chat;
}

/* A plain HTTP error in the facade's format; ends the client side. */
static void reply_error(struct dp_attempt *a, int status, const char *type, const char *param,
                        const char *code, const char *msg)
{
    struct gw_http_req *req = a->req;
    if (!req)
        return;
    a->req = NULL;
    a->t_client_end = gw_now_us();
    a->final_status = status;
    if (a->retry_after[0] && (status == 429 || status == 503))
        (void)gw_http_add_header(req, "retry-after", a->retry_after);
    size_t n = 0;
    char *body = facade_of(a)->error_body(status, type, param, code, msg, &n);
    gw_http_respond(req, status, "application/json", body ? body : "", body ? n : 0);
    free(body);
}

static int flush_out(struct dp_attempt *a)
{
    if (!a->out.len || !a->req || !a->committed || !a->client_stream)
        return GW_OK;
    int rc = gw_http_write(a->req, a->out.data, a->out.len);
    gw_buf_reset(&a->out);
    return rc;
}

static void on_client_close(struct gw_http_req *req, void *arg)
{
    struct dp_attempt *a = arg;
    a->req = NULL;
    gw_http_abort(req);
    set_failure(a, "client_closed", "canceled");
    a->final_status = 499;
    attempt_end(a); /* removes the transfer: the upstream sees the close */
}

static void on_client_drain(struct gw_http_req *req, void *arg)
{
    (void)req;
    struct dp_attempt *a = arg;
    if (a->paused && a->running) {
        a->paused = 0;
        curl_easy_pause(a->easy, CURLPAUSE_CONT);
    }
}

/* Which provider and model answered: operators and clients both ask. */
static void add_answer_headers(struct gw_http_req *req, const struct dp_attempt *a)
{
    (void)gw_http_add_header(req, "x-llmgw-provider", a->t.provider->name);
    (void)gw_http_add_header(req, "x-llmgw-model", a->t.model);
}

/* The stream's head goes out with the first content event. */
static int commit_stream(struct dp_attempt *a)
{
    a->committed = 1;
    a->t_first_content = gw_now_us();
    if (!a->client_stream)
        return GW_OK;
    add_answer_headers(a->req, a);
    (void)gw_http_add_header(a->req, "cache-control", "no-cache");
    return gw_http_start(a->req, 200, "text/event-stream; charset=utf-8");
}

/* ---------------------------------------------------------------- events */

static struct fc_ctx make_ctx(struct dp_attempt *a)
{
    struct fc_ctx ctx = {.request_id = a->request_id,
                         .model = a->answer_model[0] ? a->answer_model : a->t.model,
                         .created = (long long)time(NULL)};
    return ctx;
}

/* Before the answer started: the failure is an HTTP error. After: an
 * in-band error and the stream's end. */
static void fail_answer(struct dp_attempt *a, const struct canon_event *ev)
{
    a->terminal = 1;
    const char *cls = canon_failure_name(ev->failure);
    set_failure(a, ev->failure == CANON_FAIL_CANCELED ? "canceled" : "upstream_error", cls);
    if (!a->req)
        return;
    if (!a->committed || !a->client_stream) {
        int status = canon_failure_status(ev->failure);
        /* A provider's 4xx about the request is the client's to see. */
        if ((ev->failure == CANON_FAIL_BAD_REQUEST || ev->failure == CANON_FAIL_NOT_FOUND) &&
            ev->status >= 400 && ev->status < 500)
            status = ev->status;
        char msg[512];
        snprintf(msg, sizeof(msg), "%s (provider %s, %s)",
                 ev->message && *ev->message ? ev->message : "the upstream provider failed",
                 a->t.provider->name, cls);
        const char *type = status == 429  ? "rate_limit_error"
                           : status < 500 ? "invalid_request_error"
                                          : "api_error";
        reply_error(a, status, type, NULL, cls, msg);
        return;
    }
    a->t_client_end = gw_now_us();
    a->final_status = 200;
    /* The error event and the stream's end, after what is still queued. If
     * the event cannot be encoded, the connection is cut rather than ended
     * cleanly: a clean end without the error would look like a whole
     * answer. */
    int rc = a->fc->stream_event(a->fstate, ev, &a->out);
    if (rc == GW_OK)
        rc = flush_out(a);
    struct gw_http_req *req = a->req;
    a->req = NULL;
    if (rc == GW_OK)
        gw_http_finish(req);
    else
        gw_http_abort(req);
}

static void finish_answer(struct dp_attempt *a, const struct canon_event *ev)
{
    a->terminal = 1;
    a->stop = ev->stop;
    a->have_stop = 1;
    if (!a->req)
        return;
    if (!a->committed) { /* no content event: no answer */
        struct canon_event e = {.type = CANON_EV_ERROR,
                                .failure = CANON_FAIL_EMPTY_OUTPUT,
                                .message = "the provider's answer had no content"};
        a->terminal = 0;
        fail_answer(a, &e);
        return;
    }
    struct gw_http_req *req = a->req;
    a->t_client_end = gw_now_us();
    a->final_status = 200;
    if (a->client_stream) {
        int rc = a->fc->stream_event(a->fstate, ev, &a->out);
        if (rc == GW_OK)
            rc = flush_out(a);
        a->req = NULL;
        if (rc == GW_OK)
            gw_http_finish(req);
        else
            gw_http_abort(req);
        return;
    }
    if (canon_acc_add(&a->acc, ev) != GW_OK) {
        reply_error(a, 500, "api_error", NULL, "internal_error", "could not build the answer");
        return;
    }
    struct fc_ctx ctx = make_ctx(a);
    gw_buf_reset(&a->out);
    if (a->fc->render(a->creq, &ctx, &a->acc, &a->out) != GW_OK) {
        reply_error(a, 500, "api_error", NULL, "internal_error", "could not build the answer");
        return;
    }
    a->req = NULL;
    add_answer_headers(req, a);
    gw_http_respond(req, 200, "application/json", a->out.data ? a->out.data : "", a->out.len);
}

/* The sink every driver emits into. Returns nonzero once the answer is
 * over (terminal event, or the client is gone), which stops the parser. */
static int on_event(void *arg, const struct canon_event *ev)
{
    struct dp_attempt *a = arg;
    if (a->terminal)
        return 1;
    if (ev->type == CANON_EV_ERROR) {
        if (a->finishing && a->nevents == 0 && ev->failure == CANON_FAIL_NETWORK) {
            /* A success status and a body that ended cleanly with nothing
             * in it: no answer at all, not a broken connection. */
            struct canon_event e = *ev;
            e.failure = CANON_FAIL_EMPTY_OUTPUT;
            e.message = "the provider's answer is empty";
            fail_answer(a, &e);
            return 1;
        }
        fail_answer(a, ev);
        return 1;
    }
    a->nevents++;
    if (ev->type == CANON_EV_DONE) {
        finish_answer(a, ev);
        return 1;
    }
    if (!a->req)
        return 1;
    if (ev->type == CANON_EV_START && ev->name)
        snprintf(a->answer_model, sizeof(a->answer_model), "%s", ev->name);
    if (ev->type == CANON_EV_USAGE)
        a->usage = *ev->usage;
    if (a->client_stream && !a->fstate) {
        struct fc_ctx ctx = make_ctx(a);
        a->fstate = a->fc->stream_new(a->creq, &ctx);
        if (!a->fstate) {
            a->terminal = 1;
            set_failure(a, "internal_error", NULL);
            reply_error(a, 500, "api_error", NULL, "internal_error", "out of memory");
            return 1;
        }
    }
    if (canon_is_content(ev->type) && !a->committed && commit_stream(a) != GW_OK) {
        a->terminal = 1;
        set_failure(a, "client_closed", "canceled");
        struct gw_http_req *req = a->req;
        a->req = NULL;
        gw_http_abort(req);
        return 1;
    }
    int rc =
        a->client_stream ? a->fc->stream_event(a->fstate, ev, &a->out) : canon_acc_add(&a->acc, ev);
    if (rc != GW_OK) {
        struct canon_event e = {.type = CANON_EV_ERROR,
                                .failure = CANON_FAIL_PROVIDER_5XX,
                                .message = rc == GW_ELIMIT
                                               ? "the provider's answer is too large"
                                               : "the provider's answer broke the event order"};
        fail_answer(a, &e);
        return 1;
    }
    return 0;
}

/* ---------------------------------------------------------------- upstream */

static void arm_watchdog(struct dp_attempt *a, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(a->watchdog, &tv);
}

static size_t on_header(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct dp_attempt *a = arg;
    size_t n = size * nmemb;
    if (!a->t_first_byte) {
        a->t_first_byte = gw_now_us();
        arm_watchdog(a, a->t.provider->idle_timeout_ms);
    }
    if (n > 5 && strncmp(buf, "HTTP/", 5) == 0) {
        /* A new status line (after 100 Continue or a redirect) resets. */
        const char *sp = memchr(buf, ' ', n);
        a->status = sp ? atoi(sp + 1) : 0;
        a->retry_after[0] = '\0';
        return n;
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
        int clean = vl < sizeof(a->retry_after);
        for (size_t i = 0; clean && i < vl; i++)
            clean = (unsigned char)v[i] > 0x20 && v[i] != 0x7f;
        if (clean) {
            memcpy(a->retry_after, v, vl);
            a->retry_after[vl] = '\0';
        }
    }
    return n;
}

static int ok_status(const struct dp_attempt *a)
{
    return a->status >= 200 && a->status < 300;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct dp_attempt *a = arg;
    size_t n = size * nmemb;
    if (!a->req)
        return a->terminal ? n : 0; /* after the answer, drain; else stop */
    arm_watchdog(a, a->t.provider->idle_timeout_ms);
    if (a->committed && a->client_stream && gw_http_pending(a->req) > OUT_HIGH_WATER) {
        a->paused = 1;
        gw_http_on_drain(a->req, OUT_LOW_WATER, on_client_drain, a);
        return CURL_WRITEFUNC_PAUSE;
    }
    if (a->terminal)
        return n;
    if (a->kind == KIND_EMBED || !ok_status(a)) {
        /* Kept whole (error bodies only up to a bound, to classify). */
        if (gw_buf_append(&a->coll, buf, n) != GW_OK && a->kind == KIND_EMBED) {
            set_failure(a, "upstream_error", "provider_5xx");
            reply_error(a, 502, "api_error", NULL, "provider_5xx",
                        "the provider's answer is too large");
            return 0;
        }
        return n;
    }
    a->parser->drv->parse(a->parser, buf, n, &a->sink);
    if (a->terminal)
        return n; /* drain the tail so the connection is reused */
    if (!a->req)
        return 0;
    return flush_out(a) == GW_OK ? n : 0;
}

static void emit_failure(struct dp_attempt *a, enum canon_failure f, int status, const char *msg)
{
    struct canon_event ev = {
        .type = CANON_EV_ERROR, .failure = f, .status = status, .message = msg};
    on_event(a, &ev);
}

static void upstream_error_status(struct dp_attempt *a)
{
    enum canon_failure f;
    char msg[384];
    const struct dp_driver *d = a->t.provider->drv;
    (d->classify ? d->classify : drv_classify_default)(a->status, a->coll.data, a->coll.len, &f,
                                                       msg, sizeof(msg));
    if (!msg[0])
        snprintf(msg, sizeof(msg), "the provider answered HTTP %d", a->status);
    if (!a->retry_after[0] && d->retry_after)
        (void)d->retry_after(a->coll.data, a->coll.len, a->retry_after, sizeof(a->retry_after));
    emit_failure(a, f, a->status, msg);
}

static void finish_embed(struct dp_attempt *a);

static void on_done(CURL *easy, CURLcode rc, void *arg)
{
    (void)easy;
    struct dp_attempt *a = arg;
    a->running = 0;
    if (rc == CURLE_OK && !ok_status(a)) {
        upstream_error_status(a);
    } else if (rc == CURLE_OK && a->kind == KIND_EMBED) {
        finish_embed(a);
    } else if (rc == CURLE_OK) {
        a->finishing = 1;
        if (!a->terminal)
            a->parser->drv->finish(a->parser, &a->sink);
        if (!a->terminal)
            emit_failure(a, CANON_FAIL_PROVIDER_5XX, 0,
                         "the provider's answer ended without a terminator");
    } else if (!a->terminal) {
        char msg[256];
        snprintf(msg, sizeof(msg), "the provider could not be reached or broke off: %s",
                 curl_easy_strerror(rc));
        /* Only the connect timeout is curl's; the watchdog times the rest. */
        emit_failure(a, rc == CURLE_OPERATION_TIMEDOUT ? CANON_FAIL_TIMEOUT : CANON_FAIL_NETWORK, 0,
                     msg);
    }
    attempt_end(a);
}

/* One timer guards the attempt: until the first byte it is the provider's
 * first-byte timeout; after it, the idle timeout, re-armed by every piece of
 * body; while the upstream is paused for a slow client, the same idle
 * timeout bounds how long that client may stall. */
static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_attempt *a = arg;
    if (a->running) {
        gw_curlev_remove(a->w->curl, a->easy);
        a->running = 0;
    }
    if (a->terminal && !a->req) {
        /* The client has its whole answer; only the upstream's tail
         * stalled. Nothing failed that the client could see. */
    } else if (a->paused) {
        /* The client stopped reading: it cannot be told anything. */
        set_failure(a, "client_stalled", "canceled");
        struct gw_http_req *req = a->req;
        a->req = NULL;
        a->final_status = 499;
        a->terminal = 1;
        if (req)
            gw_http_abort(req);
    } else {
        emit_failure(a, CANON_FAIL_TIMEOUT, 0,
                     a->t_first_byte ? "the provider stopped sending before the answer was complete"
                                     : "the provider did not answer within its first-byte timeout");
    }
    attempt_end(a);
}

void dp_exchange_shutdown(struct dp_attempt *a)
{
    if (a->running) {
        gw_curlev_remove(a->w->curl, a->easy);
        a->running = 0;
    }
    if (!a->terminal) {
        set_failure(a, "shutdown", "canceled");
        struct canon_event ev = {.type = CANON_EV_ERROR,
                                 .failure = CANON_FAIL_CANCELED,
                                 .message = "the gateway is shutting down"};
        if (!a->committed || !a->client_stream) {
            a->terminal = 1;
            reply_error(a, 503, "api_error", NULL, "gateway_shutdown",
                        "the gateway is shutting down");
        } else {
            fail_answer(a, &ev);
        }
    }
    attempt_end(a);
}

/* ---------------------------------------------------------------- setup */

static int start_upstream(struct dp_attempt *a)
{
    a->easy = a->w->nidle_easy > 0 ? a->w->idle_easy[--a->w->nidle_easy] : curl_easy_init();
    a->watchdog = evtimer_new(a->w->base, on_watchdog, a);
    if (!a->easy || !a->watchdog)
        return GW_ENOMEM;
    CURL *e = a->easy;
    curl_easy_setopt(e, CURLOPT_URL, a->dreq.url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->dreq.body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)a->dreq.body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->dreq.headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, a);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    /* Loopback never goes through a proxy; other hosts follow the usual
     * proxy environment, which operators may rely on. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.0/8,::1");
    curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    /* No total timeout on streams: a stall between bytes is the failure,
     * and the attempt's watchdog timer measures it exactly. */
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    if (gw_curlev_add(a->w->curl, e, on_done, a) != GW_OK)
        return GW_ENOMEM;
    a->running = 1;
    arm_watchdog(a, a->t.provider->first_byte_timeout_ms);
    gw_http_req_on_close(a->req, on_client_close, a);
    return GW_OK;
}

static void reply_early(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                        int status, const char *param, const char *code, const char *msg)
{
    dp_reply_error_fc(req, fc, id, status,
                      status == 404  ? "not_found_error"
                      : status < 500 ? "invalid_request_error"
                                     : "api_error",
                      param, code, msg);
}

/* Parses the body as one JSON object with unique keys. NULL after replying. */
static json_t *load_body(struct gw_http_req *req, const struct dp_facade *fc, const char *id)
{
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    json_error_t je;
    /* Duplicate keys are refused: parsers disagree on which one wins, and
     * the gateway must route on the same model the provider will read. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    if (json_is_object(root))
        return root;
    char msg[512];
    if (root)
        snprintf(msg, sizeof(msg), "the request body must be a JSON object");
    else
        snprintf(msg, sizeof(msg), "the request body is not valid JSON: %s (line %d, column %d)",
                 je.text, je.line, je.column);
    json_decref(root);
    reply_early(req, fc, id, 400, NULL, "invalid_json", msg);
    return NULL;
}

/* Resolves the selector; replies and returns nonzero when it cannot. */
static int resolve(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                   const struct dp_snapshot *snap, const char *selector, struct dp_target *t)
{
    char msg[512];
    if (!selector || !*selector) {
        reply_early(req, fc, id, 400, "model", "missing_required_parameter",
                    "you must provide a model parameter (a route, an alias, or provider/model)");
        return 1;
    }
    int rc = dp_snapshot_resolve(snap, selector, t);
    if (rc == GW_OK)
        return 0;
    /* The selector is client text; quote a bounded piece of it. */
    int status = 404;
    const char *code = "model_not_found";
    if (rc == GW_EINVAL) {
        status = 400;
        code = "invalid_model";
        snprintf(msg, sizeof(msg),
                 "the model id in '%.100s' must be 1 to %d visible ASCII characters", selector,
                 DP_MAX_MODEL_ID);
    } else if (rc == GW_EAGAIN) {
        status = 503;
        code = "no_enabled_target";
        snprintf(msg, sizeof(msg), "the model '%.100s' has no enabled provider", selector);
    } else {
        snprintf(msg, sizeof(msg),
                 "the model '%.100s' does not exist: use a route name, an alias, or "
                 "provider/model",
                 selector);
    }
    reply_early(req, fc, id, status, "model", code, msg);
    return 1;
}

static struct dp_attempt *attempt_new(struct dp_worker *w, struct gw_http_req *req,
                                      struct dp_snapshot *snap, const struct dp_key *key,
                                      const char *request_id, const struct dp_target *t)
{
    struct dp_attempt *a = calloc(1, sizeof(*a));
    if (!a)
        return NULL;
    a->w = w;
    a->req = req;
    a->snap = snap;
    a->t = *t;
    /* An exact selector's model points into the request JSON; the attempt
     * keeps its own copy. */
    a->model = strdup(t->model);
    a->t.model = a->model ? a->model : "";
    a->key = key;
    a->t0 = gw_http_req_start_us(req);
    snprintf(a->request_id, sizeof(a->request_id), "%s", request_id);
    snprintf(a->path, sizeof(a->path), "%s", gw_http_req_path(req));
    a->sink.emit = on_event;
    a->sink.arg = a;
    canon_acc_init(&a->acc, 0);
    gw_buf_init(&a->out, 0);
    gw_buf_init(&a->coll, MAX_ERROR_BODY);
    a->next = w->attempts;
    if (w->attempts)
        w->attempts->prev = a;
    w->attempts = a;
    if (!a->model) {
        attempt_free(a);
        return NULL;
    }
    return a;
}

/* What the request needs that the driver may not declare. */
static int check_caps(const struct canon_req *r, const struct dp_provider *p, struct canon_err *err)
{
    unsigned caps = p->caps;
    int images = 0;
    for (size_t i = 0; i < r->nmessages; i++)
        for (size_t j = 0; j < r->messages[i].nparts; j++) {
            const struct canon_part *pt = &r->messages[i].parts[j];
            images |= pt->type == CANON_PART_IMAGE;
            for (size_t k = 0; pt->type == CANON_PART_TOOL_RESULT && k < pt->ncontent; k++)
                images |= pt->content[k].type == CANON_PART_IMAGE;
        }
    if (!(caps & DRV_CAP_CHAT)) {
        canon_err_set(err, 400, "model", "unsupported_input",
                      "provider '%s' (driver %s) does not serve chat", p->name, p->driver);
        return GW_EINVAL;
    }
    if (images && !(caps & DRV_CAP_VISION)) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_input",
                      "the request has images, and provider '%s' (driver %s) does not take "
                      "images",
                      p->name, p->driver);
        return GW_EINVAL;
    }
    if (r->ntools && !(caps & DRV_CAP_TOOLS)) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_TOOLS), "unsupported_input",
                      "provider '%s' (driver %s) does not take tools", p->name, p->driver);
        return GW_EINVAL;
    }
    if ((r->format == CANON_FMT_JSON_OBJECT || r->format == CANON_FMT_JSON_SCHEMA) &&
        !(caps & DRV_CAP_JSON_MODE)) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_RESPONSE_FORMAT), "unsupported_input",
                      "provider '%s' (driver %s) has no JSON mode", p->name, p->driver);
        return GW_EINVAL;
    }
    if ((r->reasoning_effort || r->reasoning_budget) && !(caps & DRV_CAP_REASONING)) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_REASONING), "unsupported_input",
                      "provider '%s' (driver %s) has no reasoning settings", p->name, p->driver);
        return GW_EINVAL;
    }
    return GW_OK;
}

/* The end of starting an attempt: its upstream request built (rc GW_OK) is
 * sent; refused (GW_EINVAL: err, the client's 400, counted as refused for
 * reason cls, or, with a 5xx status, the provider's configuration at fault);
 * anything else is the gateway's 500. */
static void launch(struct dp_attempt *a, int rc, const char *cls, const struct canon_err *err)
{
    if (rc == GW_EINVAL && err->status >= 500) {
        set_failure(a, "provider_misconfigured", NULL);
        a->terminal = 1;
        reply_error(a, err->status, "api_error", NULL, err->code, err->message);
        attempt_end(a);
        return;
    }
    if (rc == GW_EINVAL) {
        set_failure(a, "refused", cls);
        a->terminal = 1;
        reply_error(a, err->status ? err->status : 400, "invalid_request_error",
                    err->param[0] ? err->param : NULL, err->code, err->message);
        attempt_end(a);
        return;
    }
    if (rc == GW_OK)
        rc = start_upstream(a);
    if (rc != GW_OK) {
        set_failure(a, "internal_error", NULL);
        a->terminal = 1;
        reply_error(a, 500, "api_error", NULL, "internal_error",
                    "the gateway could not start the upstream request");
        attempt_end(a);
    }
}

void dp_exchange_chat(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                      const struct dp_key *key, const char *request_id, const struct dp_facade *fc)
{
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    struct canon_req *cr = canon_req_new(root);
    struct canon_err err = {0};
    if (!cr) {
        reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        dp_snapshot_unref(snap);
        return;
    }
    int rc = fc->parse(cr, &err);
    struct dp_target t;
    if (rc != GW_OK) {
        if (!err.status)
            canon_err_set(&err, 500, NULL, "internal_error", "out of memory");
        reply_early(req, fc, request_id, err.status, err.param[0] ? err.param : NULL, err.code,
                    err.message);
    } else if (resolve(req, fc, request_id, snap, cr->model, &t)) {
        rc = GW_EINVAL;
    }
    if (rc != GW_OK) {
        canon_req_free(cr);
        dp_snapshot_unref(snap);
        return;
    }
    struct dp_attempt *a = attempt_new(w, req, snap, key, request_id, &t);
    if (!a) {
        reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
        canon_req_free(cr);
        dp_snapshot_unref(snap);
        return;
    }
    a->kind = KIND_CHAT;
    a->fc = fc;
    a->creq = cr;
    a->client_stream = cr->stream;
    struct drv_target dt = {
        .provider = t.provider, .model = a->t.model, .request_id = a->request_id};
    const struct dp_driver *d = t.provider->drv;
    rc = check_caps(cr, t.provider, &err);
    if (rc == GW_OK)
        rc = d->build_chat(&dt, cr, &a->dreq, &err);
    if (rc == GW_OK && !(a->parser = d->parser_new(a->dreq.stream)))
        rc = GW_ENOMEM;
    launch(a, rc, "unsupported_input", &err);
}

/* -------------------------------------------------------------- embeddings */

static int parse_embed_req(struct dp_attempt *a, json_t *root, struct canon_err *err)
{
    static const char *const keys[] = {"model",           "input", "dimensions",
                                       "encoding_format", "user",  NULL};
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v)
    {
        int ok = json_is_null(v);
        for (const char *const *x = keys; *x && !ok; x++)
            ok = strcmp(*x, k) == 0;
        if (!ok) {
            canon_err_set(err, 400, k, "unsupported_parameter", "'%s' is not supported", k);
            return GW_EINVAL;
        }
    }
    json_t *in = json_object_get(root, "input");
    size_t n = json_is_string(in) ? 1 : json_is_array(in) ? json_array_size(in) : 0;
    if (n == 0 || n > 2048) {
        canon_err_set(err, 400, "input", "invalid_request",
                      "'input' must be a string or an array of 1 to 2048 strings");
        return GW_EINVAL;
    }
    a->ereq.inputs = calloc(n, sizeof(char *));
    if (!a->ereq.inputs)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_string(in) ? in : json_array_get(in, i);
        if (!json_is_string(s) || json_string_length(s) == 0) {
            canon_err_set(err, 400, "input", "invalid_request",
                          "'input' must hold non-empty strings (token arrays are not supported)");
            return GW_EINVAL;
        }
        a->ereq.inputs[a->ereq.ninputs++] = json_string_value(s);
    }
    json_t *dim = json_object_get(root, "dimensions");
    if (dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1 ||
            json_integer_value(dim) > 65536) {
            canon_err_set(err, 400, "dimensions", "invalid_request",
                          "'dimensions' must be an integer from 1 to 65536");
            return GW_EINVAL;
        }
        a->ereq.dimensions = json_integer_value(dim);
    }
    const char *ef = gw_json_str(root, "encoding_format");
    if (ef && strcmp(ef, "float") && strcmp(ef, "base64")) {
        canon_err_set(err, 400, "encoding_format", "invalid_request",
                      "'encoding_format' must be float or base64");
        return GW_EINVAL;
    }
    a->embed_base64 = ef && strcmp(ef, "base64") == 0;
    a->ereq.user = gw_json_str(root, "user");
    return GW_OK;
}

static int b64_floats(struct gw_buf *out, const double *v, size_t n)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t len = n * 4;
    unsigned char *raw = malloc(len ? len : 1);
    if (!raw)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        float f = (float)v[i];
        memcpy(raw + i * 4, &f, 4); /* little-endian, as OpenAI sends it */
    }
    int rc = GW_OK;
    for (size_t i = 0; rc == GW_OK && i < len; i += 3) {
        unsigned x = (unsigned)raw[i] << 16;
        if (i + 1 < len)
            x |= (unsigned)raw[i + 1] << 8;
        if (i + 2 < len)
            x |= raw[i + 2];
        char q[4] = {tbl[(x >> 18) & 63], tbl[(x >> 12) & 63],
                     i + 1 < len ? tbl[(x >> 6) & 63] : '=', i + 2 < len ? tbl[x & 63] : '='};
        rc = gw_buf_append(out, q, 4);
    }
    free(raw);
    return rc;
}

static int render_embed(struct dp_attempt *a, const struct canon_embed_resp *e, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; rc == GW_OK && i < e->nvec; i++) {
        rc = gw_buf_printf(
            o, "%s{\"object\":\"embedding\",\"index\":%zu,\"embedding\":", i ? "," : "", i);
        const double *v = e->values + i * e->dim;
        if (rc == GW_OK && a->embed_base64) {
            rc = gw_buf_appends(o, "\"");
            if (rc == GW_OK)
                rc = b64_floats(o, v, e->dim);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "\"");
        } else {
            for (size_t j = 0; rc == GW_OK && j < e->dim; j++)
                rc = gw_buf_printf(o, "%s%.9g", j ? "," : "[", v[j]);
            if (rc == GW_OK)
                rc = gw_buf_appends(o, "]");
        }
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(o, "],\"model\":");
    /* The model that answered, as for chat; the target's when the provider
     * does not say. */
    const char *model = e->model[0] ? e->model : a->t.model;
    if (rc == GW_OK)
        rc = gw_json_escape(o, model, strlen(model));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld}}",
                           (long long)e->usage.input, (long long)e->usage.input);
    return rc;
}

static void finish_embed(struct dp_attempt *a)
{
    a->terminal = 1;
    struct canon_embed_resp e = {0};
    char msg[256] = "";
    int rc = a->t.provider->drv->parse_embed(a->coll.data ? a->coll.data : "", a->coll.len, &e, msg,
                                             sizeof(msg));
    if (rc != GW_OK) {
        set_failure(a, "upstream_error", "provider_5xx");
        reply_error(a, 502, "api_error", NULL, "provider_5xx",
                    msg[0] ? msg : "the provider's embeddings answer is malformed");
        return;
    }
    if (e.nvec != a->ereq.ninputs) {
        set_failure(a, "upstream_error", "provider_5xx");
        reply_error(a, 502, "api_error", NULL, "provider_5xx",
                    "the provider returned a different number of embeddings than inputs");
        canon_embed_resp_free(&e);
        return;
    }
    a->usage = e.usage;
    gw_buf_reset(&a->out);
    if (render_embed(a, &e, &a->out) != GW_OK) {
        canon_embed_resp_free(&e);
        reply_error(a, 500, "api_error", NULL, "internal_error", "could not build the answer");
        return;
    }
    canon_embed_resp_free(&e);
    struct gw_http_req *req = a->req;
    a->req = NULL;
    a->t_client_end = gw_now_us();
    a->final_status = 200;
    add_answer_headers(req, a);
    gw_http_respond(req, 200, "application/json", a->out.data, a->out.len);
}

void dp_exchange_embed(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id)
{
    json_t *root = load_body(req, NULL, request_id);
    struct dp_target t;
    if (!root || resolve(req, NULL, request_id, snap, gw_json_str(root, "model"), &t)) {
        json_decref(root);
        dp_snapshot_unref(snap);
        return;
    }
    struct dp_attempt *a = attempt_new(w, req, snap, key, request_id, &t);
    if (!a) {
        json_decref(root);
        reply_early(req, NULL, request_id, 500, NULL, "internal_error", "out of memory");
        dp_snapshot_unref(snap);
        return;
    }
    a->kind = KIND_EMBED;
    gw_buf_init(&a->coll, DRV_MAX_BODY);
    struct canon_err err = {0};
    const struct dp_driver *d = t.provider->drv;
    int rc = parse_embed_req(a, root, &err);
    if (rc == GW_OK && !(t.provider->caps & DRV_CAP_EMBEDDINGS)) {
        canon_err_set(&err, 400, "model", "unsupported_input",
                      "provider '%s' (driver %s) does not serve embeddings", t.provider->name,
                      t.provider->driver);
        rc = GW_EINVAL;
    }
    struct drv_target dt = {
        .provider = t.provider, .model = a->t.model, .request_id = a->request_id};
    a->ereq.model = a->t.model;
    if (rc == GW_OK)
        rc = d->build_embed(&dt, &a->ereq, &a->dreq, &err);
    /* The inputs point into root, and build_embed has copied them: only
     * their count is kept, to check the answer against. */
    json_decref(root);
    free(a->ereq.inputs);
    a->ereq.inputs = NULL;
    a->ereq.user = NULL;
    launch(a, rc, "bad_request", &err);
}

/* ------------------------------------------------------------ count_tokens */

void dp_exchange_count_tokens(struct dp_worker *w, struct gw_http_req *req,
                              struct dp_snapshot *snap, const char *request_id,
                              const struct dp_facade *fc)
{
    (void)w;
    json_t *root = load_body(req, fc, request_id);
    if (!root) {
        dp_snapshot_unref(snap);
        return;
    }
    /* count_tokens takes a messages request without max_tokens. */
    if (!json_object_get(root, "max_tokens"))
        json_object_set_new(root, "max_tokens", json_integer(1));
    struct canon_req *cr = canon_req_new(root);
    struct canon_err err = {0};
    struct dp_target t;
    if (!cr) {
        reply_early(req, fc, request_id, 500, NULL, "internal_error", "out of memory");
    } else if (fc->parse(cr, &err) != GW_OK) {
        reply_early(req, fc, request_id, err.status ? err.status : 500,
                    err.param[0] ? err.param : NULL, err.code[0] ? err.code : "internal_error",
                    err.message[0] ? err.message : "out of memory");
    } else if (!resolve(req, fc, request_id, snap, cr->model, &t)) {
        char body[160];
        /* No provider counts for us: this is the gateway's estimate, and
         * says so, rather than a number that looks exact. */
        int n = snprintf(body, sizeof(body), "{\"input_tokens\":%lld,\"estimated\":true}",
                         canon_estimate_tokens(cr));
        (void)gw_http_add_header(req, "x-llmgw-estimate", "true");
        dp_log_simple(req, request_id, 200, NULL);
        gw_http_respond(req, 200, "application/json", body, (size_t)n);
    }
    canon_req_free(cr);
    dp_snapshot_unref(snap);
}
