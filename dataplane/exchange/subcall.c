/*
 * The gateway's own calls (its guard's classifier, its judge): a chat
 * request in OpenAI's format to a route the operator named, made on a local
 * request (gw_http_local_new) and served by an exchange as a client's is:
 * routing, failover, the limits of the key whose request caused it, and a
 * ledger row per attempt (purpose "guard" or "judge"). Only the answer's
 * text comes back; a time budget bounds the whole call.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
#include "exchange.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"

/* The most of an answer kept (a verdict or a score is a few bytes). */
#define SUB_MAX_ANSWER (256u << 10)

struct xsub {
    struct dp_xloop *l;
    struct gw_http_req *req; /* NULL once the answer came or the call was given up */
    struct event *timer;
    xsub_cb cb;
    void *arg;
};

static void sub_free(struct xsub *s)
{
    if (s->timer)
        event_free(s->timer);
    free(s);
}

/* The answer's content, or why there is none. */
static void read_answer(const struct gw_http_answer *a, struct xsub_result *r, char *why,
                        size_t whylen)
{
    r->status = a->status;
    json_t *root = a->len ? json_loadb(a->body, a->len, 0, NULL) : NULL;
    if (a->status == 200 && !a->aborted) {
        json_t *msg =
            json_object_get(json_array_get(json_object_get(root, "choices"), 0), "message");
        const char *content = json_string_value(json_object_get(msg, "content"));
        if (content) {
            r->content = strdup(content);
            r->ok = r->content != NULL;
            if (!r->ok)
                snprintf(why, whylen, "out of memory");
        } else {
            snprintf(why, whylen, "the answer has no text content");
        }
    } else {
        /* The error's code only: its message may quote the request. */
        const char *code =
            json_string_value(json_object_get(json_object_get(root, "error"), "code"));
        snprintf(why, whylen, "HTTP %d%s%.64s", a->status, code ? " " : "", code ? code : "");
        if (a->aborted)
            snprintf(why, whylen, "the call was cut");
    }
    json_decref(root);
}

static void on_answer(const struct gw_http_answer *a, void *arg)
{
    struct xsub *s = arg;
    s->req = NULL;
    struct xsub_result r = {0};
    char why[128] = "";
    read_answer(a, &r, why, sizeof(why));
    r.why = why;
    xsub_cb cb = s->cb;
    void *cbarg = s->arg;
    sub_free(s);
    cb(cbarg, &r);
    free(r.content);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct xsub *s = arg;
    struct gw_http_req *req = s->req;
    s->req = NULL;
    if (req)
        gw_http_local_cancel(req); /* the call's exchange ends, as for a client that left */
    struct xsub_result r = {.timed_out = 1, .why = "the time budget ran out"};
    xsub_cb cb = s->cb;
    void *cbarg = s->arg;
    sub_free(s);
    cb(cbarg, &r);
}

struct xsub *x_sub_start(struct dp_xloop *l, struct dp_snapshot *snap, const struct dp_key *key,
                         const struct xsub_call *c, xsub_cb cb, void *arg)
{
    struct xsub *s = calloc(1, sizeof(*s));
    json_t *body =
        json_pack("{s:s,s:[{s:s,s:s},{s:s,s:s}],s:i,s:I,s:b}", "model", c->route, "messages",
                  "role", "system", "content", c->system, "role", "user", "content", c->user,
                  "temperature", 0, "max_tokens", (json_int_t)c->max_tokens, "stream", 0);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char budget[24];
    snprintf(budget, sizeof(budget), "%ld", c->timeout_ms);
    const char *headers[] = {"content-type",
                             "application/json",
                             "x-llmgw-purpose",
                             c->purpose,
                             "x-llmgw-fallback-timeout-ms",
                             budget,
                             c->traceparent ? "traceparent" : NULL,
                             c->traceparent,
                             NULL};
    if (s && text)
        s->req = gw_http_local_new(l->base, "POST", "/v1/chat/completions", headers, text,
                                   strlen(text), SUB_MAX_ANSWER, on_answer, s);
    free(text);
    if (s && s->req)
        s->timer = evtimer_new(l->base, on_timeout, s);
    /* json_pack refuses text that is not UTF-8 (the callers cut theirs on
     * a character's start): no call, as when memory runs out. */
    if (!s || !s->req || !s->timer) {
        if (s && s->req) { /* no owner yet: ended here, and so freed */
            gw_http_local_cancel(s->req);
            gw_http_abort(s->req);
        }
        if (s)
            sub_free(s);
        return NULL;
    }
    s->l = l;
    s->cb = cb;
    s->arg = arg;
    struct timeval tv = {(time_t)(c->timeout_ms / 1000),
                         (suseconds_t)(c->timeout_ms % 1000 * 1000)};
    evtimer_add(s->timer, &tv);
    dp_snapshot_ref(snap);
    dp_exchange_internal(l, s->req, snap, key, c->request_id);
    return s;
}

void x_sub_cancel(struct xsub *s)
{
    if (!s)
        return;
    struct gw_http_req *req = s->req;
    s->req = NULL;
    sub_free(s);
    if (req)
        gw_http_local_cancel(req);
}
