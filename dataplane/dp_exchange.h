/*
 * dp_exchange: one client request served through one upstream attempt:
 * the facade parses the client's format into a canonical request, the
 * target's driver builds the upstream request, libcurl sends it, the driver
 * turns the answer into canonical events, and the facade encodes them for
 * the client (see canon.h for the event contract).
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

struct dp_worker;
struct dp_snapshot;
struct dp_key;
struct dp_exchange;
struct dp_facade;
struct gw_http_req;

/* Each takes over the caller's snapshot reference and ends req, now or
 * later. */
void dp_exchange_chat(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                      const struct dp_key *key, const char *request_id, const struct dp_facade *fc);
void dp_exchange_embed(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                       const struct dp_key *key, const char *request_id);
/* POST /v1/messages/count_tokens: parsed with fc (max_tokens may be
 * absent) and answered with an estimate, marked as one. */
void dp_exchange_count_tokens(struct dp_worker *w, struct gw_http_req *req,
                              struct dp_snapshot *snap, const struct dp_key *key,
                              const char *request_id, const struct dp_facade *fc);

/* Ends a request at once (drain deadline passed): an open stream gets an
 * in-band error event and its terminator. */
void dp_exchange_shutdown(struct dp_exchange *x);

/* The next request in the worker's list (for iteration while ending). */
struct dp_exchange *dp_exchange_next(struct dp_exchange *x);

#endif
