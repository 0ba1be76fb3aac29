/*
 * cp_trace: the control plane's trace spans, exported by gw_otel (gw_otel.h;
 * main.c configures it from the OTEL_* environment, service.name
 * "llmgw-controlplane"). Three kinds make one chain an operator follows
 * from a change to every data plane that took it:
 *
 *   "<METHOD> <route>"    SERVER: an admin API write (POST, PUT, PATCH or
 *                         DELETE under /v1/admin/, refused or not), e.g.
 *                         "POST /v1/admin/providers", "PATCH
 *                         /v1/admin/routes/{name}". It continues the
 *                         caller's traceparent (and tracestate). Attributes:
 *                         http.request.method, url.path, http.route (when
 *                         the path is one of the API's), http.response.
 *                         status_code, llmgw.resource (the metrics' route
 *                         label), and when the write committed one:
 *                         llmgw.audit.id (the audit_log row) and
 *                         llmgw.config.version (the config_state.version it
 *                         made). Status ERROR "http 4xx" / "http 5xx" on
 *                         an answer >= 400. Never a body's text.
 *   llmgw.snapshot.build  INTERNAL: a build that produced a publish.
 *                         llmgw.snapshot.version, llmgw.snapshot.base_version
 *                         (0: a whole document), llmgw.snapshot.kind ("full"
 *                         or "delta"), llmgw.snapshot.result ("ok"). Its parent is the
 *                         newest admin write it includes (the configuration
 *                         versions it read past the last build's) that this
 *                         process served; the others it includes are its
 *                         links (at most CP_TRACE_MAX_LINKS). Without one it
 *                         is a root.
 *   llmgw.snapshot.push   INTERNAL: one per data-plane replica connected
 *                         (a Watch open) at the publish, child of the build
 *                         span, from the publish to that replica's Ack of a
 *                         version at or past it. llmgw.replica.id,
 *                         llmgw.snapshot.version, and llmgw.snapshot.
 *                         acked_version once acked. Ends with status ERROR
 *                         "superseded" when a newer publish's push for the
 *                         same replica starts first, "not acknowledged"
 *                         when the replica's last Watch ends or the daemon
 *                         stops.
 *
 * Admin writes remember their span context per configuration version in a
 * small ring (CP_TRACE_RING, process-local, under a mutex): the builder's
 * thread reads it to find a build's parent and links. A write remembers
 * its version before its COMMIT (the builder may hear the notification
 * first) and forgets it when the COMMIT fails. Writes that were not sampled
 * are remembered too (flags 0), so that a parent-based sampler keeps or
 * drops the whole chain alike.
 *
 * The pending pushes are a table on the main loop, bounded by
 * CP_TRACE_MAX_PUSHES: a push past it gets no span, and is counted
 * (llmgw_cp_push_spans_dropped_total).
 *
 * Threading: cp_trace_new, _free, the admin and push calls run on the main
 * loop (their spans go out in the loop's gw_otel_batch); cp_trace_build
 * runs on the builder's thread (its span goes to the exporter directly);
 * the ring is shared, under its mutex. Every call takes a NULL cp_trace
 * (tracing off) as "do nothing".
 */
#ifndef CP_TRACE_H
#define CP_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "gw_trace.h"

#define CP_TRACE_RING 256
#define CP_TRACE_MAX_LINKS 32
#define CP_TRACE_MAX_PUSHES 4096

struct event_base;
struct gw_http_req;
struct gw_otel;
struct cp_grpc;
struct cp_trace;

/* The tracing state for exporter o, its loop spans batched on base. NULL
 * when o is NULL (tracing off) or without memory (*failed set then). */
struct cp_trace *cp_trace_new(struct gw_otel *o, struct event_base *base, int *failed);
/* Ends the pending pushes ("not acknowledged") and hands the loop's spans
 * to the exporter. Before gw_otel_free, after the builder stopped. */
void cp_trace_free(struct cp_trace *t);

/* ---- admin writes (main loop) ---- */

/* One admin request's span, kept by value (the request's strings are gone
 * once it is answered; a deferred answer reads a copy in the pool). */
struct cp_trace_admin {
    int write;    /* a write under /v1/admin/: the rest is set */
    int recorded; /* sampled: a span is written at its end */
    struct gw_trace_ctx ctx;
    uint8_t parent[GW_SPAN_ID_LEN];
    int has_parent;
    uint64_t start_ns;
    const char *resource; /* a static label */
    char method[8];
    char route[96]; /* "" when the path is none of the API's */
    char path[256];
    char tracestate[GW_TRACESTATE_MAX + 1];
    size_t tracestate_len;
};

/* Starts a's span when req writes under /v1/admin/ (resource: its metrics
 * label; route: its template, or NULL when the path is none of the API's):
 * the caller's traceparent continued, or a new trace. 1 when it does
 * (a->ctx is the span's context, sampled or not), else 0. */
int cp_trace_admin_begin(struct cp_trace *t, struct cp_trace_admin *a,
                         const struct gw_http_req *req, const char *resource, const char *route);
/* Ends a's span with the answer's status, and what the write committed
 * (audit_id and config_version 0: none). */
void cp_trace_admin_end(struct cp_trace *t, const struct cp_trace_admin *a, int status,
                        long long audit_id, long long config_version);

/* The ring: the write of configuration version (span ctx) is remembered,
 * or forgotten again (its transaction rolled back). */
void cp_trace_remember(struct cp_trace *t, long long version, const struct gw_trace_ctx *ctx);
void cp_trace_forget(struct cp_trace *t, long long version, const struct gw_trace_ctx *ctx);

/* ---- snapshot builds (the builder's thread) ---- */

struct cp_trace_build {
    int64_t version;      /* the snapshot's */
    int64_t base_version; /* the delta's base; 0: a whole document */
    const char *kind;     /* "full" or "delta" */
    const char *result;   /* "ok" */
    /* The configuration versions the build took in: (from, to]. */
    int64_t from_config, to_config;
    uint64_t start_ns, end_ns;
};

/* Writes the build span; *out gets its context (flags: sampled or not),
 * for the publish's pushes. 1, or 0 when tracing is off. */
int cp_trace_build(struct cp_trace *t, const struct cp_trace_build *b, struct gw_trace_ctx *out);

/* ---- pushes (main loop) ---- */

/* A publish of version, whose build's span is build: a push span starts
 * for every replica grpc has connected. */
void cp_trace_publish(struct cp_trace *t, struct cp_grpc *grpc, const struct gw_trace_ctx *build,
                      int64_t version);
/* replica acknowledged serving version: its pending push ends if version
 * covers it. */
void cp_trace_ack(struct cp_trace *t, const char *replica, int64_t version);
/* replica's last Watch ended: its pending push ends, not acknowledged. */
void cp_trace_replica_gone(struct cp_trace *t, const char *replica);
/* Pushes pending now (for tests). */
size_t cp_trace_pending(const struct cp_trace *t);

#endif
