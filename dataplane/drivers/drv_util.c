#include "drv_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

#define MAX_EMBED_VALUES (16u << 20)

/* ---------------------------------------------------------------- parsers */

void drv_parser_init(struct drv_parser *p, const struct dp_driver *drv, int stream)
{
    p->drv = drv;
    p->stream = stream;
    gw_buf_init(&p->body, DRV_MAX_BODY);
}

void drv_parser_fini(struct drv_parser *p)
{
    gw_buf_free(&p->body);
}

int drv_fail(struct drv_parser *p, const struct canon_sink *s, enum canon_failure f,
             const char *msg)
{
    p->terminal = 1;
    canon_emit_error(s, f, 0, msg);
    return 1;
}

int drv_start(struct drv_parser *p, const char *id, const char *name, const struct canon_sink *s)
{
    if (p->started)
        return 0;
    p->started = 1;
    struct canon_event ev = {.type = CANON_EV_START, .id = id, .name = name};
    return canon_emit(s, &ev);
}

int drv_parse(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s,
              drv_stream_fn stream_fn)
{
    if (p->terminal)
        return 1;
    if (p->stream)
        return stream_fn(p, buf, len, s);
    if (gw_buf_append(&p->body, buf, len) != GW_OK)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, "the provider's answer is too large");
    return 0;
}

int drv_finish(struct drv_parser *p, const struct canon_sink *s, drv_whole_fn whole_fn)
{
    if (p->terminal)
        return 1;
    if (p->stream)
        return 0;
    json_t *doc =
        json_loadb(p->body.data ? p->body.data : "", p->body.len, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(doc))
        whole_fn(p, doc, s);
    else
        drv_fail(p, s, p->body.len ? CANON_FAIL_PROVIDER_5XX : CANON_FAIL_EMPTY_OUTPUT,
                 p->body.len ? "the provider's answer is not JSON"
                             : "the provider's answer is empty");
    json_decref(doc);
    return 1;
}

int drv_sse_feed(struct drv_parser *p, struct gw_sse *sse, const char *buf, size_t len,
                 const struct canon_sink *s, drv_sse_raw_fn raw_fn, drv_sse_doc_fn doc_fn)
{
    struct gw_sse_event ev;
    int rc;
    while ((rc = gw_sse_next(sse, &buf, &len, &ev)) == GW_OK) {
        enum drv_sse_step step = raw_fn ? raw_fn(p, &ev, s) : DRV_SSE_JSON;
        if (step == DRV_SSE_STOP)
            return 1;
        if (step == DRV_SSE_SKIP)
            continue;
        json_t *doc = json_loadb(ev.data, ev.data_len, JSON_REJECT_DUPLICATES, NULL);
        if (!json_is_object(doc)) {
            json_decref(doc);
            return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent a malformed stream event");
        }
        int stop = doc_fn(p, &ev, doc, s);
        json_decref(doc);
        if (stop)
            return 1;
    }
    if (rc != GW_EAGAIN)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX,
                        "a stream event from the provider is too large");
    return 0;
}

enum drv_sse_step drv_sse_skip_empty(struct drv_parser *p, const struct gw_sse_event *ev,
                                     const struct canon_sink *s)
{
    (void)p;
    (void)s;
    return ev->data_len == 0 ? DRV_SSE_SKIP : DRV_SSE_JSON;
}

int drv_emit_text(const struct canon_sink *s, enum canon_ev_type type, const char *text)
{
    if (!text || !*text)
        return 0;
    struct canon_event ev = {.type = type, .text = text, .len = strlen(text)};
    return canon_emit(s, &ev);
}

int drv_emit_signature(const struct canon_sink *s, const char *sig)
{
    if (!sig || !*sig)
        return 0;
    struct canon_event ev = {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = sig};
    return canon_emit(s, &ev);
}

int drv_emit_redacted(const struct canon_sink *s, const char *data)
{
    struct canon_event ev = {
        .type = CANON_EV_REASONING, .text = data, .len = strlen(data), .redacted = 1};
    return canon_emit(s, &ev);
}

/* -------------------------------------------------------------- tool calls */

int drv_tools_close(struct drv_tools *t, const struct canon_sink *s)
{
    if (!t->open)
        return 0;
    t->open = 0;
    int idx = t->count - 1;
    if (!t->open_args) {
        struct canon_event d = {.type = CANON_EV_TOOL_DELTA, .index = idx, .text = "{}", .len = 2};
        if (canon_emit(s, &d))
            return 1;
    }
    struct canon_event ev = {.type = CANON_EV_TOOL_END, .index = idx};
    return canon_emit(s, &ev) ? 1 : 0;
}

int drv_tools_delta(struct drv_tools *t, long long key, const char *id, const char *name,
                    const char *args, const struct canon_sink *s)
{
    if (!t->open || key != t->open_key) {
        for (int i = 0; i < t->count; i++)
            if (t->keys[i] == key)
                return GW_EINVAL;
        if (t->count >= DRV_MAX_TOOL_CALLS)
            return GW_EINVAL;
        if (drv_tools_close(t, s))
            return 1;
        char gen[32];
        if (!id || !*id) {
            snprintf(gen, sizeof(gen), "call_%d", t->count);
            id = gen;
        }
        t->keys[t->count] = key;
        struct canon_event ev = {
            .type = CANON_EV_TOOL_START, .index = t->count, .id = id, .name = name ? name : ""};
        t->count++;
        t->open = 1;
        t->open_key = key;
        t->open_args = 0;
        if (canon_emit(s, &ev))
            return 1;
    }
    if (args && *args) {
        t->open_args = 1;
        struct canon_event ev = {
            .type = CANON_EV_TOOL_DELTA, .index = t->count - 1, .text = args, .len = strlen(args)};
        if (canon_emit(s, &ev))
            return 1;
    }
    return 0;
}

int drv_tools_check(struct drv_parser *p, const struct canon_sink *s, int rc, const char *what)
{
    if (rc == GW_EINVAL)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, what);
    return rc ? 1 : 0;
}

int drv_tools_whole(struct drv_parser *p, struct drv_tools *t, const char *id, const char *name,
                    const char *args, const struct canon_sink *s)
{
    int rc = drv_tools_delta(t, t->count, id, name, args ? args : "{}", s);
    if (rc)
        return drv_tools_check(p, s, rc, "the provider made too many tool calls");
    return drv_tools_close(t, s);
}

/* ------------------------------------------------------------- embeddings */

int drv_embed_vectors(const json_t *items, const char *key, struct canon_embed_resp *out, char *msg,
                      size_t msglen)
{
    if (!json_is_array(items) || json_array_size(items) == 0) {
        snprintf(msg, msglen, "the provider's answer has no embeddings");
        return GW_EINVAL;
    }
    size_t nvec = json_array_size(items), dim = 0;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        if (!json_is_array(v) || json_array_size(v) == 0 || (i > 0 && json_array_size(v) != dim)) {
            snprintf(msg, msglen, "the provider's embedding %zu is not a vector of the same size",
                     i);
            return GW_EINVAL;
        }
        dim = json_array_size(v);
        if (dim > MAX_EMBED_VALUES / nvec) {
            snprintf(msg, msglen, "the provider's embeddings are too large");
            return GW_EINVAL;
        }
    }
    double *vals = malloc(nvec * dim * sizeof(double));
    if (!vals)
        return GW_ENOMEM;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        for (size_t j = 0; j < dim; j++) {
            json_t *x = json_array_get(v, j);
            if (!json_is_number(x)) {
                free(vals);
                snprintf(msg, msglen, "the provider's embedding %zu has a non-number", i);
                return GW_EINVAL;
            }
            vals[i * dim + j] = json_number_value(x);
        }
    }
    out->values = vals;
    out->nvec = nvec;
    out->dim = dim;
    return GW_OK;
}
