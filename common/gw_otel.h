/*
 * gw_otel: OpenTelemetry trace export over OTLP/HTTP (docs/observability.md,
 * "Traces"), configured the standard way from the environment:
 *
 *   OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none  off
 *   OTEL_EXPORTER_OTLP_TRACES_ENDPOINT                 the URL, as is
 *   OTEL_EXPORTER_OTLP_ENDPOINT                        base; /v1/traces appended
 *   OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL               http/protobuf (default), http/json
 *   OTEL_EXPORTER_OTLP_[TRACES_]HEADERS                k=v,k2=v2 (values percent-decoded)
 *   OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT                ms per export (10000)
 *   OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION            gzip, none
 *   OTEL_EXPORTER_OTLP_[TRACES_]CERTIFICATE            PEM roots for https
 *   OTEL_EXPORTER_OTLP_[TRACES_]CLIENT_CERTIFICATE/_KEY  mutual TLS
 *   OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES        the resource
 *   OTEL_TRACES_SAMPLER (+ OTEL_TRACES_SAMPLER_ARG)    always_on, always_off, traceidratio,
 *                                                      parentbased_* (default
 * parentbased_always_on) OTEL_BSP_MAX_QUEUE_SIZE (2048), OTEL_BSP_MAX_EXPORT_BATCH_SIZE (512),
 *   OTEL_BSP_SCHEDULE_DELAY (5000 ms), OTEL_BSP_EXPORT_TIMEOUT (30000 ms)
 *
 * Tracing is off without an endpoint. A value that is set but wrong stops
 * the daemon at start with a message naming the variable.
 *
 * Finished spans (gw_trace.h entries) are handed over in blocks
 * (gw_otel_submit, or a loop's gw_otel_batch) to a bounded queue counted
 * in spans: a block that does not fit is dropped and counted, never
 * waited for. One exporter thread sends a request when a batch's worth is
 * queued or the schedule delay passes; a retryable failure (a transport
 * error, 429, 502, 503, 504) is tried again after 1, 2 and 4 s, then the
 * spans are counted as failed. Stopping sends what is queued, once each,
 * within 5 s (or the export timeout, when shorter); what is left then
 * counts as failed.
 */
#ifndef GW_OTEL_H
#define GW_OTEL_H

#include <stddef.h>
#include <stdint.h>

#include "gw_buf.h"
#include "gw_trace.h"

struct event;
struct event_base;
struct gw_metrics;
struct gw_otel;

/* Reads the environment and starts the exporter thread: *out is the
 * exporter, or NULL when tracing is off. GW_OK, or GW_EINVAL / GW_ENOMEM
 * with a message in err. service is the default service.name, instance
 * the service.instance.id (NULL: host name and pid). */
int gw_otel_from_env(const char *service, const char *instance, struct gw_otel **out, char *err,
                     size_t errlen);
/* Exports what is queued (bounded by the export timeout), stops the
 * thread, frees. NULL is a no-op. */
void gw_otel_free(struct gw_otel *o);

/* The sampler's decision for a new span of trace_id: parent is the
 * caller's context (NULL: a root). 1: recorded and exported. */
int gw_otel_sampled(const struct gw_otel *o, const struct gw_trace_ctx *parent,
                    const uint8_t *trace_id);

/* Where a server span starts: the caller's context continued, or a new
 * trace. */
struct gw_trace_in {
    struct gw_trace_ctx ctx; /* the trace, this span's id, flags: sampled or not */
    uint8_t parent[GW_SPAN_ID_LEN];
    int has_parent;
    /* The caller's tracestate, when valid: its place in the header given. */
    size_t tracestate_at, tracestate_len;
};
/* A request's traceparent and tracestate header values (NULL: absent; an
 * invalid traceparent is ignored, an invalid tracestate dropped) into *in:
 * the ids drawn from *rng (a gw_rand state), the sampler asked. */
void gw_otel_continue(const struct gw_otel *o, uint64_t *rng, const char *traceparent,
                      const char *tracestate, struct gw_trace_in *in);

/* Takes the spans of entries (nspans gw_span_finish entries) into the
 * queue, leaving entries empty (its memory goes with them), or drops and
 * counts them when the queue is full. Any thread. */
void gw_otel_submit(struct gw_otel *o, struct gw_buf *entries, size_t nspans);

struct gw_otel_stats {
    uint64_t exported; /* spans a collector accepted */
    uint64_t dropped;  /* spans not queued: the queue was full */
    uint64_t failed;   /* spans whose export failed for good */
    uint64_t queued;   /* spans waiting now */
    uint64_t requests; /* export requests sent (retries included) */
};
void gw_otel_stats(struct gw_otel *o, struct gw_otel_stats *s);

/* llmgw_otel_spans_total{result="exported|dropped|failed"},
 * llmgw_otel_queue_spans and llmgw_otel_export_requests_total, read from
 * the exporter at each scrape. */
void gw_otel_metrics(struct gw_metrics *m, struct gw_otel *o);

/* Wall-clock nanoseconds (a span's times are these). */
uint64_t gw_otel_now_ns(void);
/* n random bytes from *rng (a gw_rand state), never all zero. */
void gw_trace_ids(uint64_t *rng, uint8_t *out, size_t n);

/* One event loop's spans: written into its scratch span, gathered as
 * they end and handed to the queue in one block when the loop's turn is
 * done (an event made active at the first), or at once past 256 KiB.
 * Not thread-safe: one loop's. */
struct gw_otel_batch {
    struct gw_otel *o;
    struct gw_span span; /* the span being written (gw_span_begin ...) */
    struct gw_buf spans;
    size_t n;
    struct event *flush;
};
int gw_otel_batch_init(struct gw_otel_batch *b, struct gw_otel *o, struct event_base *base);
/* Finishes b->span at end_ns into the batch (a span that could not be
 * written is counted as dropped). */
void gw_otel_batch_end(struct gw_otel_batch *b, uint64_t end_ns);
/* Hands over what is held and frees; safe on a zeroed batch. */
void gw_otel_batch_free(struct gw_otel_batch *b);

#endif
