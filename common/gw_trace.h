/*
 * gw_trace: W3C Trace Context and OpenTelemetry spans, written as OTLP
 * protobuf (opentelemetry/proto/trace/v1/trace.proto).
 *
 * A span is written in one go when it ends (its ids and times were kept
 * by its owner): gw_span_begin, its attributes, events, links and status,
 * then gw_span_finish appends it to a batch as one ScopeSpans.spans entry
 * (field 2: tag, length, the Span's bytes). A batch of entries is what
 * gw_otel (gw_otel.h) queues and exports: it wraps entries in one
 * ExportTraceServiceRequest, or transcodes them to OTLP/JSON
 * (gw_trace_json).
 *
 * Nothing here allocates but the buffers it is given; not thread-safe per
 * span or batch (each has one owner).
 */
#ifndef GW_TRACE_H
#define GW_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gw_buf.h"

#define GW_TRACE_ID_LEN 16
#define GW_SPAN_ID_LEN 8
/* "00-" 32 hex "-" 16 hex "-" 2 hex */
#define GW_TRACEPARENT_LEN 55
/* W3C: at most 512 characters of tracestate are propagated. */
#define GW_TRACESTATE_MAX 512
#define GW_TRACE_SAMPLED 0x01

/* A span's place in a trace. */
struct gw_trace_ctx {
    uint8_t trace_id[GW_TRACE_ID_LEN];
    uint8_t span_id[GW_SPAN_ID_LEN];
    uint8_t flags; /* GW_TRACE_SAMPLED */
};

/* A traceparent header (len bytes at s, surrounding spaces and tabs
 * allowed): version 00 exactly as W3C writes it; a later version (not ff)
 * by its first four fields, followed by its end or '-'. Lowercase hex
 * only; an all-zero trace or span id is invalid. 0, or -1 (ignore it: the
 * request starts a trace of its own). */
int gw_traceparent_parse(const char *s, size_t len, struct gw_trace_ctx *out);

/* The traceparent of (trace id, span id, flags) into out (56 bytes). */
void gw_traceparent_format(const uint8_t *trace_id, const uint8_t *span_id, uint8_t flags,
                           char out[GW_TRACEPARENT_LEN + 1]);

/* The length of tracestate to propagate from len bytes at s: all of it
 * when it is a valid list (at most 32 members key=value, W3C's characters,
 * at most GW_TRACESTATE_MAX bytes after trimming); else 0 (dropped, as
 * W3C says). *start gets the offset past leading spaces. */
size_t gw_tracestate_check(const char *s, size_t len, size_t *start);

enum gw_span_kind {
    GW_SPAN_INTERNAL = 1,
    GW_SPAN_SERVER = 2,
    GW_SPAN_CLIENT = 3,
};

enum gw_span_status {
    GW_SPAN_UNSET = 0,
    GW_SPAN_OK = 1,
    GW_SPAN_ERROR = 2,
};

/* An attribute for an event (a span's own go through the gw_span_* calls). */
enum gw_attr_type { GW_ATTR_STR, GW_ATTR_INT, GW_ATTR_BOOL };
struct gw_attr {
    const char *key;
    enum gw_attr_type type;
    const char *s; /* GW_ATTR_STR */
    int64_t i;     /* GW_ATTR_INT, GW_ATTR_BOOL */
};

/* A span being written: its Span message's bytes. A failed append (no
 * memory, the buffer's ceiling) is remembered and the span is not
 * written (gw_span_finish says so). */
struct gw_span {
    struct gw_buf b;
    int rc;
};

void gw_span_init(struct gw_span *s); /* once; the buffer is reused span after span */
void gw_span_free(struct gw_span *s);

/* Starts a span (forgetting any unfinished one): trace and span ids,
 * the parent's span id (NULL: a root), its name, kind and start. */
void gw_span_begin(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id,
                   const uint8_t *parent_span_id, const char *name, enum gw_span_kind kind,
                   uint64_t start_ns);
/* The same, named "<name> <name2>" (a method and a path, an operation and
 * a model) without a formatter; name2 NULL: name alone. */
void gw_span_begin2(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id,
                    const uint8_t *parent_span_id, const char *name, const char *name2,
                    enum gw_span_kind kind, uint64_t start_ns);
void gw_span_tracestate(struct gw_span *s, const char *v, size_t len);
/* An attribute a (a->key klen bytes; a string's value slen bytes). The
 * wrappers below measure a literal key at compile time. */
void gw_span_kv(struct gw_span *s, size_t klen, const struct gw_attr *a, size_t slen);
static inline void gw_span_strn(struct gw_span *s, const char *key, const char *v, size_t len)
{
    struct gw_attr a = {.key = key, .type = GW_ATTR_STR, .s = v};
    gw_span_kv(s, strlen(key), &a, len);
}
static inline void gw_span_str(struct gw_span *s, const char *key, const char *v)
{
    gw_span_strn(s, key, v, strlen(v));
}
static inline void gw_span_int(struct gw_span *s, const char *key, int64_t v)
{
    struct gw_attr a = {.key = key, .type = GW_ATTR_INT, .i = v};
    gw_span_kv(s, strlen(key), &a, 0);
}
static inline void gw_span_bool(struct gw_span *s, const char *key, int v)
{
    struct gw_attr a = {.key = key, .type = GW_ATTR_BOOL, .i = v != 0};
    gw_span_kv(s, strlen(key), &a, 0);
}
void gw_span_double(struct gw_span *s, const char *key, double v);
/* A string array attribute (gen_ai.response.finish_reasons). */
void gw_span_strs(struct gw_span *s, const char *key, const char *const *v, size_t n);
void gw_span_event(struct gw_span *s, const char *name, uint64_t t_ns, const struct gw_attr *a,
                   size_t na);
void gw_span_link(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id);
/* The status; msg may be NULL. Never text of a request or an answer. */
void gw_span_status(struct gw_span *s, enum gw_span_status code, const char *msg);
/* Ends the span at end_ns and appends it to batch as a ScopeSpans.spans
 * entry. GW_OK, or the first error met while writing it (batch as it was). */
int gw_span_finish(struct gw_span *s, uint64_t end_ns, struct gw_buf *batch)
    __attribute__((warn_unused_result));

/* The head of an ExportTraceServiceRequest of one ResourceSpans:
 * resource (the Resource message's bytes), scope (the
 * InstrumentationScope's) and the lengths of what follows, entries_len
 * bytes of gw_span_finish entries, which the request is the head and then
 * those entries as they are (sent without being copied together). */
int gw_trace_request_head(struct gw_buf *out, const void *resource, size_t resource_len,
                          const void *scope, size_t scope_len, size_t entries_len)
    __attribute__((warn_unused_result));

/* A whole request of entries (each entries[i], lens[i] bytes) as OTLP/JSON (ids as lowercase hex,
 * 64-bit numbers as strings, enums as numbers). GW_OK, GW_ENOMEM, or GW_EINVAL when the bytes are
 * not what this module writes. */
int gw_trace_json(struct gw_buf *out, const void *resource, size_t resource_len, const void *scope,
                  size_t scope_len, const void *const *entries, const size_t *lens, size_t n)
    __attribute__((warn_unused_result));

/* Protobuf pieces for the Resource and InstrumentationScope messages. */
int gw_pb_kv_str(struct gw_buf *b, unsigned field, const char *key, const char *v, size_t vlen)
    __attribute__((warn_unused_result));
int gw_pb_bytes(struct gw_buf *b, unsigned field, const void *p, size_t n)
    __attribute__((warn_unused_result));

#endif
