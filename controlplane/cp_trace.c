#include "cp_trace.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_grpc.h"
#include "cp_metrics.h"
#include "cp_replicas.h"
#include "gw_buf.h"
#include "gw_hash.h"
#include "gw_http.h"
#include "gw_otel.h"
#include "gw_rand.h"
#include "gw_time.h"

#define ADMIN_PREFIX "/v1/admin/"
#define PUSH_BUCKETS 1024

/* An admin write's span, remembered for the build that takes its version
 * in. version 0: an empty slot. */
struct written {
    long long version;
    struct gw_trace_ctx ctx;
};

/* A push waiting for its replica's Ack. */
struct push {
    struct push *next; /* the bucket's chain */
    char replica[CP_REPLICA_ID_MAX + 1];
    int64_t version;
    uint8_t trace_id[GW_TRACE_ID_LEN], span_id[GW_SPAN_ID_LEN], parent[GW_SPAN_ID_LEN];
    uint64_t start_ns;
};

struct cp_trace {
    struct gw_otel *o;

    /* The ring, shared with the builder's thread. */
    pthread_mutex_t mu;
    struct written ring[CP_TRACE_RING];
    size_t ring_next;

    /* The main loop's. */
    uint64_t rng;
    struct gw_otel_batch batch;
    struct push *pushes[PUSH_BUCKETS];
    size_t npushes;

    /* The builder's thread's (one builder). */
    uint64_t build_rng;
};

struct cp_trace *cp_trace_new(struct gw_otel *o, struct event_base *base, int *failed)
{
    *failed = 0;
    if (!o)
        return NULL;
    struct cp_trace *t = calloc(1, sizeof(*t));
    if (!t || gw_otel_batch_init(&t->batch, o, base) != GW_OK) {
        if (t)
            gw_otel_batch_free(&t->batch);
        free(t);
        *failed = 1;
        return NULL;
    }
    t->o = o;
    pthread_mutex_init(&t->mu, NULL);
    gw_rand_seed(&t->rng);
    gw_rand_seed(&t->build_rng);
    return t;
}

/* ------------------------------------------------------------ admin writes */

/* The status's class: "http 4xx", "http 5xx". */
static void status_class(int status, char *out, size_t n)
{
    snprintf(out, n, "http %dxx", status / 100 % 10);
}

static int is_write(const char *m)
{
    return !strcmp(m, "POST") || !strcmp(m, "PUT") || !strcmp(m, "PATCH") || !strcmp(m, "DELETE");
}

int cp_trace_admin_begin(struct cp_trace *t, struct cp_trace_admin *a,
                         const struct gw_http_req *req, const char *resource, const char *route)
{
    a->write = 0;
    a->recorded = 0;
    const char *method = gw_http_req_method(req);
    const char *path = gw_http_req_path(req);
    if (!t || !is_write(method) || strncmp(path, ADMIN_PREFIX, sizeof(ADMIN_PREFIX) - 1) != 0)
        return 0;
    a->write = 1;
    /* The request's start: its head's arrival (monotonic), on the wall clock. */
    int64_t waited_us = gw_now_us() - gw_http_req_start_us(req);
    a->start_ns = gw_otel_now_ns() - (uint64_t)(waited_us > 0 ? waited_us : 0) * 1000u;
    const char *ts = gw_http_req_header(req, "tracestate");
    struct gw_trace_in in;
    gw_otel_continue(t->o, &t->rng, gw_http_req_header(req, "traceparent"), ts, &in);
    a->ctx = in.ctx;
    a->has_parent = in.has_parent;
    memcpy(a->parent, in.parent, GW_SPAN_ID_LEN);
    a->recorded = (in.ctx.flags & GW_TRACE_SAMPLED) != 0;
    a->tracestate_len = in.tracestate_len;
    if (in.tracestate_len)
        memcpy(a->tracestate, ts + in.tracestate_at, in.tracestate_len);
    a->resource = resource;
    snprintf(a->method, sizeof(a->method), "%s", method);
    snprintf(a->route, sizeof(a->route), "%s", route ? route : "");
    snprintf(a->path, sizeof(a->path), "%s", path);
    return 1;
}

void cp_trace_admin_end(struct cp_trace *t, const struct cp_trace_admin *a, int status,
                        long long audit_id, long long config_version)
{
    if (!t || !a->write || !a->recorded)
        return;
    char name[sizeof(a->method) + sizeof(a->route) + 1];
    /* Without a route of the API's, the method alone (a path is no name). */
    snprintf(name, sizeof(name), a->route[0] ? "%s %s" : "%s", a->method, a->route);
    struct gw_span *s = &t->batch.span;
    gw_span_begin(s, a->ctx.trace_id, a->ctx.span_id, a->has_parent ? a->parent : NULL, name,
                  GW_SPAN_SERVER, a->start_ns);
    if (a->tracestate_len)
        gw_span_tracestate(s, a->tracestate, a->tracestate_len);
    gw_span_str(s, "http.request.method", a->method);
    gw_span_str(s, "url.path", a->path);
    if (a->route[0])
        gw_span_str(s, "http.route", a->route);
    gw_span_int(s, "http.response.status_code", status);
    gw_span_str(s, "llmgw.resource", a->resource ? a->resource : "unknown");
    if (audit_id > 0)
        gw_span_int(s, "llmgw.audit.id", audit_id);
    if (config_version > 0)
        gw_span_int(s, "llmgw.config.version", config_version);
    if (status >= 400) {
        char cls[16];
        status_class(status, cls, sizeof(cls));
        gw_span_status(s, GW_SPAN_ERROR, cls);
    }
    gw_otel_batch_end(&t->batch, gw_otel_now_ns());
}

void cp_trace_remember(struct cp_trace *t, long long version, const struct gw_trace_ctx *ctx)
{
    if (!t || version <= 0)
        return;
    pthread_mutex_lock(&t->mu);
    struct written *w = &t->ring[t->ring_next];
    t->ring_next = (t->ring_next + 1) % CP_TRACE_RING;
    w->version = version;
    w->ctx = *ctx;
    pthread_mutex_unlock(&t->mu);
}

void cp_trace_forget(struct cp_trace *t, long long version, const struct gw_trace_ctx *ctx)
{
    if (!t || version <= 0)
        return;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < CP_TRACE_RING; i++) {
        struct written *w = &t->ring[i];
        if (w->version == version && !memcmp(w->ctx.span_id, ctx->span_id, GW_SPAN_ID_LEN))
            w->version = 0;
    }
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------------ builds */

/* The writes of versions (from, to] in the ring: the newest into *parent
 * (1 when there is one), up to max others into links (*nlinks). */
static int included(struct cp_trace *t, int64_t from, int64_t to, struct gw_trace_ctx *parent,
                    struct gw_trace_ctx *links, size_t max, size_t *nlinks)
{
    long long best = 0;
    size_t bi = 0;
    *nlinks = 0;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < CP_TRACE_RING; i++) {
        const struct written *w = &t->ring[i];
        if (w->version > from && w->version <= to && w->version > best) {
            best = w->version;
            bi = i;
        }
    }
    if (best) {
        *parent = t->ring[bi].ctx;
        /* Newest first: every slot, from the last written backwards. */
        for (size_t k = 1; k <= CP_TRACE_RING && *nlinks < max; k++) {
            const struct written *w = &t->ring[(t->ring_next + CP_TRACE_RING - k) % CP_TRACE_RING];
            if (w != &t->ring[bi] && w->version > from && w->version <= to)
                links[(*nlinks)++] = w->ctx;
        }
    }
    pthread_mutex_unlock(&t->mu);
    return best != 0;
}

int cp_trace_build(struct cp_trace *t, const struct cp_trace_build *b, struct gw_trace_ctx *out)
{
    if (!t)
        return 0;
    struct gw_trace_ctx parent, links[CP_TRACE_MAX_LINKS];
    size_t nlinks;
    int has_parent =
        included(t, b->from_config, b->to_config, &parent, links, CP_TRACE_MAX_LINKS, &nlinks);
    if (has_parent)
        memcpy(out->trace_id, parent.trace_id, GW_TRACE_ID_LEN);
    else
        gw_trace_ids(&t->build_rng, out->trace_id, GW_TRACE_ID_LEN);
    gw_trace_ids(&t->build_rng, out->span_id, GW_SPAN_ID_LEN);
    int sampled = gw_otel_sampled(t->o, has_parent ? &parent : NULL, out->trace_id);
    out->flags = sampled ? GW_TRACE_SAMPLED : 0;
    if (!sampled)
        return 1;
    struct gw_span s;
    struct gw_buf batch;
    gw_span_init(&s);
    gw_buf_init(&batch, 0);
    gw_span_begin(&s, out->trace_id, out->span_id, has_parent ? parent.span_id : NULL,
                  "llmgw.snapshot.build", GW_SPAN_INTERNAL, b->start_ns);
    gw_span_int(&s, "llmgw.snapshot.version", b->version);
    gw_span_int(&s, "llmgw.snapshot.base_version", b->base_version);
    gw_span_str(&s, "llmgw.snapshot.kind", b->kind);
    gw_span_str(&s, "llmgw.snapshot.result", b->result);
    for (size_t i = 0; i < nlinks; i++)
        gw_span_link(&s, links[i].trace_id, links[i].span_id);
    if (gw_span_finish(&s, b->end_ns, &batch) == GW_OK)
        gw_otel_submit(t->o, &batch, 1);
    gw_buf_free(&batch);
    gw_span_free(&s);
    return 1;
}

/* ------------------------------------------------------------------ pushes */

static size_t bucket(const char *replica)
{
    return (size_t)(gw_mix64(gw_fnv1a(GW_FNV1A_INIT, replica, strlen(replica))) % PUSH_BUCKETS);
}

/* The pending push of replica: the link that points at it, or NULL. */
static struct push **find(struct cp_trace *t, const char *replica)
{
    struct push **pp = &t->pushes[bucket(replica)];
    while (*pp && strcmp((*pp)->replica, replica) != 0)
        pp = &(*pp)->next;
    return *pp ? pp : NULL;
}

/* Ends *pp's span (error: its status message, NULL when acked at
 * acked_version) and frees it. */
static void push_end(struct cp_trace *t, struct push **pp, const char *error, int64_t acked)
{
    struct push *p = *pp;
    *pp = p->next;
    t->npushes--;
    struct gw_span *s = &t->batch.span;
    gw_span_begin(s, p->trace_id, p->span_id, p->parent, "llmgw.snapshot.push", GW_SPAN_INTERNAL,
                  p->start_ns);
    gw_span_str(s, "llmgw.replica.id", p->replica);
    gw_span_int(s, "llmgw.snapshot.version", p->version);
    if (error)
        gw_span_status(s, GW_SPAN_ERROR, error);
    else
        gw_span_int(s, "llmgw.snapshot.acked_version", acked);
    gw_otel_batch_end(&t->batch, gw_otel_now_ns());
    free(p);
}

void cp_trace_publish(struct cp_trace *t, struct cp_grpc *grpc, const struct gw_trace_ctx *build,
                      int64_t version)
{
    if (!t || !grpc || !gw_otel_sampled(t->o, build, build->trace_id))
        return;
    json_t *reps = cp_grpc_replicas(grpc);
    size_t i;
    json_t *r;
    uint64_t now = gw_otel_now_ns();
    json_array_foreach(json_object_get(reps, "replicas"), i, r)
    {
        const char *id = json_string_value(json_object_get(r, "replica_id"));
        if (!id || !json_is_true(json_object_get(r, "connected")))
            continue;
        struct push **old = find(t, id);
        if (old)
            push_end(t, old, "superseded", 0);
        struct push *p = t->npushes < CP_TRACE_MAX_PUSHES ? calloc(1, sizeof(*p)) : NULL;
        if (!p) {
            cp_metrics_push_spans_dropped(1);
            continue;
        }
        snprintf(p->replica, sizeof(p->replica), "%s", id);
        p->version = version;
        memcpy(p->trace_id, build->trace_id, GW_TRACE_ID_LEN);
        memcpy(p->parent, build->span_id, GW_SPAN_ID_LEN);
        gw_trace_ids(&t->rng, p->span_id, GW_SPAN_ID_LEN);
        p->start_ns = now;
        struct push **head = &t->pushes[bucket(p->replica)];
        p->next = *head;
        *head = p;
        t->npushes++;
        /* Already serving it (a whole document newer than the publish
         * went out before): acked at once. */
        int64_t acked = json_integer_value(json_object_get(r, "acked_version"));
        if (acked >= version)
            push_end(t, head, NULL, acked);
    }
    json_decref(reps);
}

void cp_trace_ack(struct cp_trace *t, const char *replica, int64_t version)
{
    struct push **pp = t ? find(t, replica) : NULL;
    if (pp && (*pp)->version <= version)
        push_end(t, pp, NULL, version);
}

void cp_trace_replica_gone(struct cp_trace *t, const char *replica)
{
    struct push **pp = t ? find(t, replica) : NULL;
    if (pp)
        push_end(t, pp, "not acknowledged", 0);
}

size_t cp_trace_pending(const struct cp_trace *t)
{
    return t ? t->npushes : 0;
}

void cp_trace_free(struct cp_trace *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < PUSH_BUCKETS; i++)
        while (t->pushes[i])
            push_end(t, &t->pushes[i], "not acknowledged", 0);
    gw_otel_batch_free(&t->batch);
    pthread_mutex_destroy(&t->mu);
    free(t);
}
