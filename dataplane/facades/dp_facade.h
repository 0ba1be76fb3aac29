/*
 * dp_facade: a client-side wire format. A facade parses the client's JSON
 * into a canonical request (canon.h), refusing with a 400 that names the
 * field whatever it cannot carry, and encodes the canonical event stream
 * back into its own format: SSE frames as events arrive, or one JSON body
 * rendered from the accumulated answer.
 *
 * One file per facade in dataplane/facades/. Facades hold no I/O: they
 * append bytes to a buffer, and the attempt loop decides when those bytes
 * reach the client (nothing is sent before the first content event, so a
 * failure before it can still become a plain HTTP error).
 */
#ifndef DP_FACADE_H
#define DP_FACADE_H

#include <stddef.h>

#include "canon.h"
#include "gw_buf.h"

/* What a facade needs to know about the answer it encodes. */
/* What the answer cost, for the stream's final usage event: the attempt's
 * ledger row id and its cost (docs/ledger.md). Owned by the exchange,
 * filled before the DONE event reaches the facade. */
struct fc_bill {
    int set;               /* 0: nothing to say (file mode, or not priced yet) */
    const char *ledger_id; /* NULL: no ledger (file mode) */
    long long cost_picodollars;
    int has_cost; /* 0: no price is known: the cost is null, never 0 */
    const char *currency;
    /* Served from the response cache: cost 0, and what the original
     * attempt cost (has_saved 0: unknown). */
    int cache_hit;
    int has_saved;
    long long saved_picodollars;
};

struct fc_ctx {
    const char *request_id;     /* the gateway's; response ids derive from it */
    const char *model;          /* the model to report (the answering one) */
    long long created;          /* unix seconds */
    const struct fc_bill *bill; /* may be NULL */
};

struct dp_facade {
    const char *name; /* "openai.chat", "anthropic.messages", "openai.responses" */
    /* The wire format a driver may speak too (dp_driver.h, wire): then the
     * request is passed through rather than translated. NULL: none. */
    const char *wire;

    /* r->body holds the client's JSON object. Fills r, or returns GW_EINVAL
     * with err (status 400 and the offending field) filled. */
    int (*parse)(struct canon_req *r, struct canon_err *err);

    /* Streaming: a per-answer encoder. stream_event appends the SSE bytes
     * for one event (possibly none) to out; on DONE and ERROR it appends
     * the stream's proper end (for ERROR: an in-band error event first).
     * Returns 0 or GW_ENOMEM/GW_ELIMIT. */
    void *(*stream_new)(const struct canon_req *r, const struct fc_ctx *ctx);
    int (*stream_event)(void *st, const struct canon_event *ev, struct gw_buf *out);
    void (*stream_free)(void *st);

    /* Non-streaming: the whole answer as one JSON body. */
    int (*render)(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out);

    /* An error answer in this format (malloc'd), for failures before the
     * answer started. type is the OpenAI-style error type
     * ("invalid_request_error", "authentication_error", "api_error", ...),
     * code the gateway's machine-readable code. */
    char *(*error_body)(int status, const char *type, const char *param, const char *code,
                        const char *message, size_t *len);
};

extern const struct dp_facade fc_openai_chat;
extern const struct dp_facade fc_anthropic;
extern const struct dp_facade fc_responses;

#endif
