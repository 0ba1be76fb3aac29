/*
 * dp_exchange: one client request served, through as many upstream attempts
 * as it takes. A request moves through its phases one way (exchange.h has
 * the phase variable and its one setter):
 *
 *   admit    the body is bounded and parsed by the client's facade, the
 *            routing headers checked                      (admit.c)
 *   plan     the router orders the candidates             (plan.c)
 *   reserve  every limit of the key reserves the request's need, or the
 *            request is refused having consumed nothing   (plan.c)
 *   cache    a deterministic request on a route with the response cache
 *            on is answered from it, or waits for an identical request
 *            already upstream, or goes on and stores its answer (cache.c)
 *   attempt  a candidate's driver builds the upstream request and gw_upc
 *            sends it; its answer arrives as canonical events, or as the
 *            provider's own bytes on the pass-through     (attempt.c)
 *   answer   from the first content event the answer is this attempt's
 *            (the bright line) and reaches the client     (answer.c)
 *   wait     after a failed attempt, the pure decision (dp_decide.h):
 *            retry after a backoff, the next candidate, or give up
 *   done     every attempt's record went to the breaker, the fleet view,
 *            the log, the ledger, the limits and the metrics (record.c)
 *
 * Nothing reaches a streaming client before the first content event: a
 * failure before it becomes a plain HTTP error in the facade's format (and,
 * with the router, the next candidate). After it, a failure is an in-band
 * error event and the stream's proper end, never a silent EOF. A
 * non-streaming client gets its answer, or an error, only when the attempt
 * is over.
 */
#ifndef DP_EXCHANGE_H
#define DP_EXCHANGE_H

#include <stdint.h>

#include "canon.h"

struct event_base;
struct gw_upc;
struct dp_cache;
struct gw_log_batch;
struct gw_otel_batch;
struct dp_breakers;
struct dp_snapshot;
struct dp_key;
struct dp_exchange;
struct dp_facade;
struct gw_http_req;
struct xjudges;

/* What the exchanges of one event loop share, owned by the loop's thread:
 * its owner (a worker) fills it and never looks inside an exchange. */
struct dp_xloop {
    struct event_base *base;
    struct gw_upc *upc;            /* the loop's upstream client (gw_upc.h) */
    struct dp_breakers *breakers;  /* the process's, shared by every loop */
    struct dp_cache *cache;        /* the process's response cache, or NULL (off) */
    size_t cache_max_entry;        /* its largest entry (bytes of a blob) */
    size_t judge_queue_max;        /* sampled answers waiting for the judge; 0: no judge */
    size_t judge_concurrency;      /* judge calls in flight at once (at least 1) */
    struct xjudges *judges;        /* the loop's judge queue (judge.c), made at first use */
    int judges_closed;             /* the loop is stopping: no sample is queued */
    long retry_base_ms;            /* the backoff's first step */
    uint64_t rng;                  /* gw_rand state (request ids, jitter, draws): this loop only */
    struct gw_log_batch *access;   /* the loop's access lines; NULL: each written at once */
    struct gw_otel_batch *otel;    /* the loop's trace spans; NULL: tracing is off */
    struct dp_exchange *exchanges; /* in flight, for drain and shutdown */
};

/* Each takes over the caller's snapshot reference and ends req, now or
 * later. */
void dp_exchange_chat(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                      const struct dp_key *key, const char *request_id, const struct dp_facade *fc);
void dp_exchange_embed(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id);
/* The media endpoints (docs/media.md): op's request, an upload's file part
 * bounded by max_upload bytes. */
void dp_exchange_media(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id, enum canon_media_op op,
                       size_t max_upload);
/* The gateway's own call (its guard's classifier, its judge: subcall.c)
 * on a local request (gw_http_local_new): an OpenAI chat request, served
 * as a client's is but for the guard, the judge and the key's allowlists
 * (the operator named the route); key is the one whose request caused it
 * (its limits, its ledger attribution). */
void dp_exchange_internal(struct dp_xloop *l, struct gw_http_req *req, struct dp_snapshot *snap,
                          const struct dp_key *key, const char *request_id);
/* POST /v1/messages/count_tokens: parsed with fc (max_tokens may be
 * absent) and answered at once with an estimate, marked as one. */
void dp_exchange_count_tokens(struct gw_http_req *req, struct dp_snapshot *snap,
                              const struct dp_key *key, const char *request_id,
                              const struct dp_facade *fc);

/* Ends every request of the loop at once (drain deadline passed, or the
 * loop stops): an open stream gets an in-band error event and its
 * terminator. */
void dp_exchange_shutdown_all(struct dp_xloop *l);

#endif
