/*
 * dp_chat: POST /v1/chat/completions in this first cut: validate the OpenAI
 * request, resolve its model selector against the snapshot, and run one
 * upstream attempt to an OpenAI-compatible provider, streaming the answer
 * back as it arrives.
 *
 * Streams are forwarded event by event: every upstream SSE event is parsed
 * and checked (a malformed one ends the stream with an in-band error), usage
 * is read from the usage chunk, and a stream that ends or breaks without
 * its "[DONE]" gets an explicit error event and "[DONE]" (never a silent
 * EOF). Non-streaming bodies are relayed as they arrive, and a bounded copy
 * is kept to read usage for the access log.
 */
#ifndef DP_CHAT_H
#define DP_CHAT_H

struct dp_worker;
struct dp_snapshot;
struct dp_key;
struct dp_attempt;
struct gw_http_req;

/* Takes over the caller's snapshot reference. Ends req, now or later. */
void dp_chat_handle(struct dp_worker *w, struct gw_http_req *req, struct dp_snapshot *snap,
                    const struct dp_key *key, const char *request_id);

/* Ends an attempt at once (drain deadline passed): an open stream gets an
 * in-band error event and its terminator. */
void dp_chat_shutdown(struct dp_attempt *a);

/* The next attempt in the worker's list (for iteration while ending). */
struct dp_attempt *dp_chat_next(struct dp_attempt *a);

#endif
