#include "dp_chat.h"

#include <curl/curl.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_snapshot.h"
#include "dp_worker.h"
#include "gw_buf.h"
#include "gw_curlev.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_sse.h"
#include "gw_time.h"

/* Pause the upstream when this much is queued for a slow client; resume
 * when it has drained to the low mark. */
#define OUT_HIGH_WATER (1u << 20)
#define OUT_LOW_WATER (256u << 10)
/* Upstream SSE events and the usage copy of a JSON body are bounded. */
#define MAX_EVENT_BYTES (4u << 20)
#define MAX_USAGE_COPY (8u << 20)

struct dp_attempt {
    struct dp_worker *w;
    struct dp_attempt *prev, *next;
    struct gw_http_req *req; /* NULL once the client side has ended */
    struct dp_snapshot *snap;
    struct dp_target t; /* t.model points at model[] */
    const struct dp_key *key;
    char request_id[160];
    char *model;
    int client_stream;
    CURL *easy;
    int running; /* easy is in the multi handle */
    struct curl_slist *hdrs;
    char *body;
    int status; /* upstream HTTP status */
    char ctype[128];
    char retry_after[32];
    int is_sse;
    int started; /* client response head sent */
    int paused;
    int saw_done;
    int usage_overflow;
    struct gw_sse sse;
    struct gw_buf acc;      /* copy of a JSON body, for usage */
    struct gw_buf out;      /* client bytes batched per callback */
    struct event *watchdog; /* first byte, then idle gaps (see arm_watchdog) */
    int64_t t0, t_first_byte, t_first_content, t_client_end;
    long long in_tok, out_tok, total_tok;
    int have_usage;
    int final_status;
    const char *outcome;
    const char *error_class;
};

struct dp_attempt *dp_chat_next(struct dp_attempt *a)
{
    return a->next;
}

/* ---------------------------------------------------------------- lifetime */

static void log_access(struct dp_attempt *a)
{
    json_t *f = json_pack("{s:s,s:s,s:s,s:i,s:s,s:s,s:s,s:b}", "request_id", a->request_id,
                          "method", "POST", "path", "/v1/chat/completions", "status",
                          a->final_status, "route", a->t.route ? a->t.route->name : "", "provider",
                          a->t.provider->name, "model", a->t.model, "stream", a->client_stream);
    if (!f)
        return;
    /* Latency is what the client saw: until its response ended. */
    int64_t end = a->t_client_end ? a->t_client_end : gw_now_us();
    json_object_set_new(f, "latency_ms", json_real((double)(end - a->t0) / 1000.0));
    if (a->t_first_byte)
        json_object_set_new(f, "ttfb_ms", json_real((double)(a->t_first_byte - a->t0) / 1000.0));
    if (a->t_first_content)
        json_object_set_new(f, "ttfc_ms", json_real((double)(a->t_first_content - a->t0) / 1000.0));
    if (a->status)
        json_object_set_new(f, "upstream_status", json_integer(a->status));
    if (a->have_usage)
        json_object_set_new(f, "tokens",
                            json_pack("{s:I,s:I,s:I}", "input", a->in_tok, "output", a->out_tok,
                                      "total", a->total_tok));
    json_object_set_new(f, "outcome", json_string(a->outcome ? a->outcome : "ok"));
    if (a->error_class)
        json_object_set_new(f, "error_class", json_string(a->error_class));
    if (a->key)
        json_object_set_new(f, "key_id", json_string(a->key->id));
    json_object_set_new(f, "snapshot_version", json_integer(a->snap->version));
    gw_log_access(f);
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
    curl_slist_free_all(a->hdrs);
    free(a->body);
    free(a->model);
    if (a->watchdog)
        event_free(a->watchdog);
    gw_sse_free(&a->sse);
    gw_buf_free(&a->acc);
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

/* ---------------------------------------------------------------- client side */

static void set_failure(struct dp_attempt *a, const char *outcome, const char *cls)
{
    if (!a->outcome) {
        a->outcome = outcome;
        a->error_class = cls;
    }
}

/* Queues an in-band OpenAI error event followed by the stream terminator. */
static void queue_stream_error(struct dp_attempt *a, const char *code, const char *msg)
{
    size_t n = 0;
    char *body = gw_json_error_body(msg, "upstream_error", NULL, code, &n);
    if (!body || gw_buf_appends(&a->out, "data: ") || gw_buf_append(&a->out, body, n) ||
        gw_buf_appends(&a->out, "\n\ndata: [DONE]\n\n")) {
        /* Out of memory: the terminator alone still ends the stream. */
        gw_buf_reset(&a->out);
        if (gw_buf_appends(&a->out, "data: [DONE]\n\n") != GW_OK)
            gw_buf_reset(&a->out);
    }
    free(body);
}

static int flush_out(struct dp_attempt *a, struct gw_http_req *req)
{
    if (!a->out.len)
        return GW_OK;
    int rc = gw_http_write(req, a->out.data, a->out.len);
    gw_buf_reset(&a->out);
    return rc;
}

/* Ends the client side. For a started stream: an error event when asked,
 * then the proper end; a started non-stream body that failed can only be
 * cut (the client sees an incomplete response). */
static void client_end(struct dp_attempt *a, int ok, int http_status, const char *code,
                       const char *msg)
{
    struct gw_http_req *req = a->req;
    if (!req)
        return;
    a->req = NULL;
    a->t_client_end = gw_now_us();
    if (!a->started) {
        a->final_status = http_status;
        dp_reply_error(req, http_status, "upstream_error", NULL, code, msg);
        return;
    }
    a->final_status = a->status;
    if (a->is_sse) {
        if (!ok)
            queue_stream_error(a, code, msg);
        if (flush_out(a, req) == GW_OK) {
            gw_http_finish(req);
            return;
        }
    } else if (ok) {
        gw_http_finish(req);
        return;
    }
    gw_http_abort(req);
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

static int start_client(struct dp_attempt *a)
{
    if (a->retry_after[0])
        (void)gw_http_add_header(a->req, "retry-after", a->retry_after);
    const char *ctype = a->ctype[0] ? a->ctype : "application/json";
    if (a->is_sse) {
        (void)gw_http_add_header(a->req, "cache-control", "no-cache");
        ctype = "text/event-stream; charset=utf-8";
    }
    a->started = 1;
    return gw_http_start(a->req, a->status, ctype);
}

/* ---------------------------------------------------------------- upstream */

static void arm_watchdog(struct dp_attempt *a, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(a->watchdog, &tv);
}

static void read_usage(struct dp_attempt *a, const json_t *usage)
{
    long long v;
    if (!json_is_object(usage))
        return;
    a->have_usage = 1;
    if (gw_json_int(usage, "prompt_tokens", &v) == GW_OK)
        a->in_tok = v;
    if (gw_json_int(usage, "completion_tokens", &v) == GW_OK)
        a->out_tok = v;
    if (gw_json_int(usage, "total_tokens", &v) == GW_OK)
        a->total_tok = v;
}

/* Content is anything a model produced for the client: text, reasoning,
 * tool calls. The first one marks the bright line later cuts build on. */
static int has_content(const json_t *chunk)
{
    json_t *choices = json_object_get(chunk, "choices");
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c)
    {
        json_t *d = json_object_get(c, "delta");
        const char *s = gw_json_str(d, "content");
        if ((s && *s) || json_array_size(json_object_get(d, "tool_calls")) > 0)
            return 1;
        s = gw_json_str(d, "reasoning_content");
        if (s && *s)
            return 1;
    }
    return 0;
}

/* Where the value of a member "key" starts in JSON text, when that value
 * is an object (want '{') or anything but null (want 0); NULL when no such
 * member. A cheap scan, not a parse: a quote inside a JSON string is
 * escaped, so "key" can only be a key or a whole string, and a nested
 * member of the same name would match too, which OpenAI-format documents
 * never have for "usage" and "error". */
static const char *member_value(const char *s, size_t n, const char *key, char want)
{
    size_t kl = strlen(key);
    const char *end = s + n;
    for (const char *p = s; (p = memmem(p, (size_t)(end - p), key, kl)); p += kl) {
        const char *v = p + kl;
        while (v < end && (*v == ' ' || *v == ':' || *v == '\t' || *v == '\n' || *v == '\r'))
            v++;
        if (v < end && (want ? *v == want : *v != 'n'))
            return v;
    }
    return NULL;
}

/* One upstream event: check it, note usage and content, queue it. Every
 * event is checked to be well-formed JSON; only the few that can matter
 * (before the first content, a usage object, an error) are fully parsed. */
static int relay_event(struct dp_attempt *a, const struct gw_sse_event *ev)
{
    if (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0) {
        a->saw_done = 1;
        return gw_buf_appends(&a->out, "data: [DONE]\n\n");
    }
    if (!gw_json_valid(ev->data, ev->data_len, 64) || ev->data[0] != '{')
        return GW_EINVAL;
    if (!a->t_first_content || member_value(ev->data, ev->data_len, "\"usage\"", '{') ||
        member_value(ev->data, ev->data_len, "\"error\"", 0)) {
        json_t *j = json_loadb(ev->data, ev->data_len, 0, NULL);
        if (!json_is_object(j)) {
            json_decref(j);
            return GW_EINVAL;
        }
        read_usage(a, json_object_get(j, "usage"));
        if (!a->t_first_content && has_content(j))
            a->t_first_content = gw_now_us();
        if (json_object_get(j, "error"))
            set_failure(a, "upstream_error", "provider_stream_error");
        json_decref(j);
    }
    int rc = GW_OK;
    if (ev->event_len)
        rc = gw_buf_printf(&a->out, "event: %s\n", ev->event);
    /* JSON may contain raw newlines between tokens (the upstream then sent
     * several data: lines): each line goes out as a data: line again. */
    const char *p = ev->data, *end = ev->data + ev->data_len;
    while (!rc) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        rc = gw_buf_appends(&a->out, "data: ");
        if (!rc)
            rc = gw_buf_append(&a->out, p, (size_t)(stop - p));
        if (!rc)
            rc = gw_buf_append(&a->out, "\n", 1);
        if (!nl)
            break;
        p = nl + 1;
    }
    if (!rc)
        rc = gw_buf_append(&a->out, "\n", 1);
    return rc;
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
        a->ctype[0] = a->retry_after[0] = '\0';
        return n;
    }
    const char *colon = memchr(buf, ':', n);
    if (!colon)
        return n;
    size_t nl = (size_t)(colon - buf);
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && (*v == ' ' || *v == '\t')) {
        v++;
        vl--;
    }
    while (vl && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' '))
        vl--;
    char *dst = NULL;
    size_t cap = 0;
    if (nl == 12 && strncasecmp(buf, "content-type", 12) == 0) {
        dst = a->ctype;
        cap = sizeof(a->ctype);
    } else if (nl == 11 && strncasecmp(buf, "retry-after", 11) == 0) {
        dst = a->retry_after;
        cap = sizeof(a->retry_after);
    }
    /* Values are copied into our own response head: any control byte (a
     * bare CR could start a header of the provider's choosing) drops them. */
    int clean = 1;
    for (size_t i = 0; i < vl; i++)
        clean &= (unsigned char)v[i] >= 0x20 && v[i] != 0x7f;
    if (dst && vl < cap && clean) {
        memcpy(dst, v, vl);
        dst[vl] = '\0';
    }
    return n;
}

static size_t on_body(char *buf, size_t size, size_t nmemb, void *arg)
{
    struct dp_attempt *a = arg;
    size_t n = size * nmemb;
    if (!a->req)
        return a->saw_done ? n : 0; /* after [DONE], drain; else stop */
    arm_watchdog(a, a->t.provider->idle_timeout_ms);
    if (gw_http_pending(a->req) > OUT_HIGH_WATER) {
        a->paused = 1;
        gw_http_on_drain(a->req, OUT_LOW_WATER, on_client_drain, a);
        return CURL_WRITEFUNC_PAUSE;
    }
    if (a->saw_done)
        return n; /* the client's stream is complete: ignore the rest */
    if (!a->started) {
        a->is_sse = a->status >= 200 && a->status < 300 &&
                    strncasecmp(a->ctype, "text/event-stream", 17) == 0;
        if (start_client(a) != GW_OK)
            return 0;
    }
    if (!a->is_sse) {
        if (!a->usage_overflow && gw_buf_append(&a->acc, buf, n) != GW_OK)
            a->usage_overflow = 1;
        return gw_http_write(a->req, buf, n) == GW_OK ? n : 0;
    }
    const char *p = buf;
    size_t left = n;
    struct gw_sse_event ev;
    int rc = GW_EAGAIN;
    while (!a->saw_done && (rc = gw_sse_next(&a->sse, &p, &left, &ev)) == GW_OK) {
        rc = relay_event(a, &ev);
        if (rc == GW_EINVAL) {
            set_failure(a, "upstream_malformed", "provider_5xx");
            client_end(a, 0, 502, "upstream_malformed",
                       "the upstream provider sent a malformed stream event");
            return 0;
        }
        if (rc != GW_OK)
            break;
    }
    if (a->saw_done) {
        /* The answer is complete: end the client's stream now, and let the
         * upstream response finish on its own so its connection is reused
         * (the watchdog bounds it). */
        client_end(a, 1, a->status, NULL, NULL);
        return n;
    }
    if (rc != GW_EAGAIN) {
        set_failure(a, "upstream_malformed", "provider_5xx");
        client_end(a, 0, 502, "upstream_event_too_large",
                   "an upstream stream event exceeded the gateway's limit");
        return 0;
    }
    return flush_out(a, a->req) == GW_OK ? n : 0;
}

/* Usage of a JSON answer: only the "usage" member is parsed, from where its
 * value starts (jansson stops at the end of that value). */
static void read_body_usage(struct dp_attempt *a)
{
    if (a->is_sse || a->usage_overflow || !a->acc.len || a->status != 200)
        return;
    const char *v = member_value(a->acc.data, a->acc.len, "\"usage\"", '{');
    if (!v)
        return;
    json_t *u = json_loadb(v, a->acc.len - (size_t)(v - a->acc.data), JSON_DISABLE_EOF_CHECK, NULL);
    read_usage(a, u);
    json_decref(u);
}

static void on_done(CURL *easy, CURLcode rc, void *arg)
{
    (void)easy;
    struct dp_attempt *a = arg;
    a->running = 0;
    read_body_usage(a);
    if (!a->req) { /* the client side ended from on_body */
        attempt_end(a);
        return;
    }
    if (rc == CURLE_OK) {
        if (!a->started && a->status >= 200 && a->status < 300) {
            /* A success with no body is no answer at all (empty_output). */
            set_failure(a, "upstream_empty", "empty_output");
            client_end(a, 0, 502, "upstream_empty",
                       "the upstream provider answered with an empty body");
        } else if (!a->started) {
            /* An error status with no body: relay the status. */
            struct gw_http_req *req = a->req;
            a->req = NULL;
            a->t_client_end = gw_now_us();
            a->final_status = a->status;
            set_failure(a, "upstream_error", a->status >= 500 ? "provider_5xx" : NULL);
            gw_http_respond(req, a->status, a->ctype[0] ? a->ctype : "application/json", "", 0);
        } else if (a->is_sse && !a->saw_done) {
            set_failure(a, "upstream_incomplete", "network");
            client_end(a, 0, 502, "upstream_incomplete",
                       "the upstream provider ended the stream before it was complete");
        } else {
            if (a->status >= 400)
                set_failure(a, "upstream_error", a->status >= 500 ? "provider_5xx" : NULL);
            client_end(a, 1, a->status, NULL, NULL);
        }
    } else if (rc == CURLE_OPERATION_TIMEDOUT) {
        /* Only the connect timeout is curl's; the watchdog times the rest. */
        set_failure(a, "upstream_timeout", "timeout");
        client_end(a, 0, 504, "upstream_timeout",
                   "the connection to the upstream provider timed out");
    } else {
        set_failure(a, "upstream_network", "network");
        char msg[256];
        snprintf(msg, sizeof(msg), "the upstream provider could not be reached or broke off: %s",
                 curl_easy_strerror(rc));
        client_end(a, 0, 502, "upstream_network", msg);
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
    if (a->saw_done && !a->req) {
        /* The client has its whole answer; only the upstream's tail
         * stalled. Nothing failed that the client could see. */
    } else if (a->paused) {
        /* The client stopped reading: it cannot be told anything. */
        set_failure(a, "client_stalled", "canceled");
        struct gw_http_req *req = a->req;
        a->req = NULL;
        a->final_status = 499;
        if (req)
            gw_http_abort(req);
    } else if (!a->t_first_byte) {
        set_failure(a, "upstream_timeout", "timeout");
        client_end(a, 0, 504, "upstream_timeout",
                   "the upstream provider did not answer within its first-byte timeout");
    } else {
        set_failure(a, "upstream_timeout", "timeout");
        client_end(a, 0, 504, "upstream_timeout",
                   "the upstream provider stopped sending before the answer was complete");
    }
    attempt_end(a);
}

void dp_chat_shutdown(struct dp_attempt *a)
{
    set_failure(a, "shutdown", "canceled");
    if (a->running) {
        gw_curlev_remove(a->w->curl, a->easy);
        a->running = 0;
    }
    client_end(a, 0, 503, "gateway_shutdown", "the gateway is shutting down");
    attempt_end(a);
}

/* ---------------------------------------------------------------- setup */

static int build_upstream(struct dp_attempt *a, size_t body_len)
{
    const struct dp_provider *p = a->t.provider;
    char line[512];
    struct curl_slist *h = NULL;
#define ADD(s)                                                                                     \
    do {                                                                                           \
        struct curl_slist *nh = curl_slist_append(h, (s));                                         \
        if (!nh)                                                                                   \
            goto nomem;                                                                            \
        h = nh;                                                                                    \
    } while (0)
    ADD("Content-Type: application/json");
    ADD("Expect:"); /* no 100-continue round trip on large prompts */
    ADD(a->client_stream ? "Accept: text/event-stream" : "Accept: application/json");
    snprintf(line, sizeof(line), "x-request-id: %s", a->request_id);
    ADD(line);
    if (p->credential) {
        char *auth = NULL;
        size_t need = strlen(p->credential) + 24;
        auth = malloc(need);
        if (!auth)
            goto nomem;
        snprintf(auth, need, "Authorization: Bearer %s", p->credential);
        struct curl_slist *nh = curl_slist_append(h, auth);
        free(auth);
        if (!nh)
            goto nomem;
        h = nh;
    }
    for (size_t i = 0; i < p->nheaders; i++)
        ADD(p->headers[i]);
#undef ADD
    a->hdrs = h;
    a->easy = a->w->nidle_easy > 0 ? a->w->idle_easy[--a->w->nidle_easy] : curl_easy_init();
    if (!a->easy)
        return GW_ENOMEM;
    char url[2048];
    int ul = snprintf(url, sizeof(url), "%s/chat/completions", p->base_url);
    if (ul < 0 || (size_t)ul >= sizeof(url))
        return GW_EINVAL;
    CURL *e = a->easy;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, a->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, a->hdrs);
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
    return GW_OK;
nomem:
    curl_slist_free_all(h);
    return GW_ENOMEM;
}

static void reply_bad_request(struct gw_http_req *req, struct dp_snapshot *snap, int status,
                              const char *param, const char *code, const char *msg,
                              const char *request_id)
{
    dp_reply_error_logged(req, request_id, status, "invalid_request_error", param, code, msg);
    dp_snapshot_unref(snap);
}

void dp_chat_handle(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                    const struct dp_key *key, const char *request_id)
{
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    json_error_t je;
    /* Duplicate keys are refused: parsers disagree on which one wins, and
     * the gateway must route on the same model the provider will read. */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    char msg[512];
    if (!json_is_object(root)) {
        if (root)
            snprintf(msg, sizeof(msg), "the request body must be a JSON object");
        else
            snprintf(msg, sizeof(msg),
                     "the request body is not valid JSON: %s (line %d, column %d)", je.text,
                     je.line, je.column);
        json_decref(root);
        reply_bad_request(req, snap, 400, NULL, "invalid_json", msg, request_id);
        return;
    }
    const char *selector = gw_json_str(root, "model");
    int err;
    int stream = gw_json_bool(root, "stream", 0, &err);
    if (!selector || !*selector) {
        json_decref(root);
        reply_bad_request(req, snap, 400, "model", "missing_required_parameter",
                          "you must provide a model parameter (a route, an alias, or "
                          "provider/model)",
                          request_id);
        return;
    }
    if (err) {
        json_decref(root);
        reply_bad_request(req, snap, 400, "stream", "invalid_type", "'stream' must be a boolean",
                          request_id);
        return;
    }
    struct dp_target t;
    int rc = dp_snapshot_resolve(snap, selector, &t);
    if (rc != GW_OK) {
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
        json_decref(root);
        reply_bad_request(req, snap, status, "model", code, msg, request_id);
        return;
    }
    struct dp_attempt *a = calloc(1, sizeof(*a));
    if (!a) {
        json_decref(root);
        reply_bad_request(req, snap, 500, NULL, "internal_error", "out of memory", request_id);
        return;
    }
    a->w = w;
    a->req = req;
    a->snap = snap;
    a->t = t;
    /* An exact selector's model points into the request JSON, which is
     * freed below; the attempt keeps its own copy. */
    a->model = strdup(t.model);
    a->t.model = a->model ? a->model : "";
    a->key = key;
    a->client_stream = stream;
    a->t0 = gw_http_req_start_us(req);
    snprintf(a->request_id, sizeof(a->request_id), "%s", request_id);
    gw_sse_init(&a->sse, MAX_EVENT_BYTES);
    gw_buf_init(&a->acc, MAX_USAGE_COPY);
    gw_buf_init(&a->out, 0);
    a->next = w->attempts;
    if (w->attempts)
        w->attempts->prev = a;
    w->attempts = a;

    json_object_set_new(root, "model", json_string(a->t.model));
    a->body = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    a->watchdog = evtimer_new(w->base, on_watchdog, a);
    if (!a->model || !a->body || !a->watchdog || build_upstream(a, strlen(a->body)) != GW_OK ||
        gw_curlev_add(w->curl, a->easy, on_done, a) != GW_OK) {
        set_failure(a, "internal_error", NULL);
        client_end(a, 0, 500, "internal_error", "the gateway could not start the upstream request");
        attempt_end(a);
        return;
    }
    a->running = 1;
    arm_watchdog(a, t.provider->first_byte_timeout_ms);
    gw_http_req_on_close(req, on_client_close, a);
}
