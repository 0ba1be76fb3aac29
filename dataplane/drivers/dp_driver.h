/*
 * dp_driver: a provider-side wire adapter. A driver turns a canonical
 * request into one upstream HTTP request (URL, headers, body) and the
 * upstream's answer back into canonical events (canon.h). It holds no
 * routing, retry or timing logic: the attempt loop (dp_exchange) sends the
 * request with libcurl, feeds the body in whatever pieces arrive, and
 * decides what a failure means for the chain.
 *
 * One file per driver in dataplane/drivers/. Every parser is resumable (its
 * state lives in the parser object, so a body split anywhere parses the same
 * as one delivered whole) and bounded (ceilings on line, event and body
 * size; passing one is an ERROR, never an unbounded allocation).
 */
#ifndef DP_DRIVER_H
#define DP_DRIVER_H

#include <stddef.h>
#include <sys/uio.h>

#include "canon.h"
#include "dp_driver_catalog.h"
#include "gw_buf.h"
#include "gw_sse.h"

struct dp_provider;
struct curl_slist;

/* Ceilings shared by the parsers. */
#define DRV_MAX_EVENT (4u << 20) /* one SSE event, NDJSON line or frame */
#define DRV_MAX_BODY (32u << 20) /* a whole non-streamed body */

/* Where one attempt goes: the provider (base URL, credential, headers,
 * options) and the provider-native model id. */
struct drv_target {
    const struct dp_provider *provider;
    const char *model;
    const char *request_id; /* sent upstream as x-request-id */
    /* The attempt's W3C trace context (traceparent, and the caller's
     * tracestate), sent upstream when set. */
    const char *traceparent, *tracestate;
    /* The pass-through only: the client's own anthropic-beta header (the
     * betas its request's fields need), or NULL. */
    const char *client_beta;
};

/* The upstream request a driver builds. The caller frees it with
 * drv_request_free. The method is always POST. */
struct drv_request {
    char *url;
    struct curl_slist *headers;
    char *body;
    size_t body_len;
    /* Or, when niov > 0, the body in pieces (gw_upc's body_iov): the
     * driver's own bytes in body, between borrowed ones (an upload's parts
     * point into the client's request, which outlives the transfer). */
    struct iovec *iov;
    size_t niov;
    int stream; /* the answer will be streamed */
};

void drv_request_free(struct drv_request *r);
/* Appends a header line ("Name: value"); 0 or GW_ENOMEM. */
int drv_header(struct drv_request *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The provider's own configured headers, then Content-Type JSON and
 * x-request-id: every driver calls it. */
int drv_common_headers(struct drv_request *r, const struct drv_target *t);
/* The same with another Content-Type (a multipart body's). */
int drv_common_headers_as(struct drv_request *r, const struct drv_target *t,
                          const char *content_type);

/* A parser's common part: every driver parser starts with this struct
 * (drv_parser_new and drv_parser_free in drivers/drv_util.h allocate a
 * driver's parser with it and release both). */
struct drv_parser {
    const struct dp_driver *drv;
    int stream;
    int terminal;       /* a DONE or ERROR was emitted */
    int started;        /* START was emitted */
    struct gw_buf body; /* not streamed: the body so far (at most DRV_MAX_BODY) */
    struct gw_sse sse;  /* streamed as SSE (drv_parse_sse): the event parser,
                           bounded by DRV_MAX_EVENT */
};

/*
 * The same-protocol pass-through (docs/relay.md). When a client's wire
 * format is the one this driver speaks, the upstream request is the
 * client's own body with the few edits the gateway owns, and the answer
 * goes back as the provider sent it: the driver's parser still reads every
 * event (first content, usage, finish, errors), but nothing is re-encoded.
 */
struct drv_relay_edits {
    int stream;           /* the client streams: the answer must carry usage */
    long long max_tokens; /* > 0: the output cap the gateway imposes (a worst-case reservation) */
};

struct dp_driver {
    /* Its name, capabilities and wire: the catalog's entry (the control
     * plane and the snapshot read the catalog alone). */
    const struct dp_driver_info *info;

    /* The pass-through, or NULL where the driver has none (info->wire
     * names the client format it speaks, a facade's wire). relay_build makes the
     * upstream request from the client's body (body[0..len): it passed
     * gw_json_bound and jansson with unique keys, so the span lookups may
     * read it without another scan): GW_OK, GW_EINVAL (err filled: the body cannot be
     * edited, or names what this provider refuses), GW_ENOMEM.
     * relay_event appends what the client gets of one upstream event to
     * out, keeps it in held instead (the usage event, which gets the bill
     * at the end), or drops it (the terminator, which the end writes).
     * relay_end appends the held usage event with bill_json (the gateway's
     * "llmgw" member: ledger id and cost; NULL for none) when with_usage,
     * and the stream's terminator. Both return 0 or a GW_E code. */
    int (*relay_build)(const struct drv_target *t, const char *body, size_t len,
                       const struct drv_relay_edits *ed, struct drv_request *out,
                       struct canon_err *err);
    int (*relay_event)(const struct gw_sse_event *ev, struct gw_buf *out, struct gw_buf *held);
    int (*relay_end)(const struct gw_buf *held, const char *bill_json, int with_usage,
                     struct gw_buf *out);

    /* Builds the upstream chat request. r->stream says whether the client
     * streams; the driver may stream upstream either way but says so in
     * out->stream. Returns 0, or GW_EINVAL with err naming the client field
     * this provider cannot honor (unsupported parameters are refused, never
     * dropped), or GW_ENOMEM. */
    int (*build_chat)(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err);

    /* A parser for a 2xx answer's body, streamed or whole. */
    struct drv_parser *(*parser_new)(int stream);
    /* Body bytes as they arrive. Emits events; returns 0 to go on, or
     * nonzero when it has emitted a terminal event or the sink stopped. */
    int (*parse)(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s);
    /* The body ended cleanly. Emits what remains, ending with DONE, or an
     * ERROR when the answer was incomplete (no terminator, empty body). */
    void (*finish)(struct drv_parser *p, const struct canon_sink *s);
    void (*parser_free)(struct drv_parser *p);

    /* A non-2xx answer: the failure class and a message from its body.
     * NULL: canon_classify_http and the body's error message. */
    void (*classify)(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                     size_t msglen);

    /* A retry delay carried in an error body rather than a Retry-After
     * header (Google's RetryInfo), as whole seconds into out. 0 when found,
     * else nonzero. NULL: providers that only use the header. */
    int (*retry_after)(const char *body, size_t len, char *out, size_t outlen);
    /* The response header that names the tier that served (Gemini's
     * x-gemini-service-tier), for providers that say it only there; the
     * exchange puts it on START when the answer's body says none. NULL:
     * none. */
    const char *tier_header;

    /* Embeddings, when DRV_CAP_EMBEDDINGS. */
    int (*build_embed)(const struct drv_target *t, const struct canon_embed_req *r,
                       struct drv_request *out, struct canon_err *err);
    int (*parse_embed)(const char *body, size_t len, struct canon_embed_resp *out, char *msg,
                       size_t msglen);

    /* Media (docs/media.md), when the driver declares any of DRV_CAP_MEDIA:
     * the upstream request for r (its fields as the client sent them, the
     * model the target's), and what an answer says it used: u from a whole
     * JSON body, or from one event of a streamed answer (its data), left
     * as it is for a body that says nothing. The answer itself goes to the
     * client as the provider sent it. */
    int (*build_media)(const struct drv_target *t, const struct canon_media_req *r,
                       struct drv_request *out, struct canon_err *err);
    void (*media_usage)(const struct canon_media_req *r, const char *body, size_t len,
                        struct canon_media_usage *u);
};

/* The driver registered under name, or NULL. */
const struct dp_driver *dp_driver_find(const char *name);
/* Every driver, by its catalog id. */
extern const struct dp_driver *const dp_drivers[DRV_ID_COUNT];
/* The driver of a provider of the snapshot (its catalog entry's). */
const struct dp_driver *dp_driver_of(const struct dp_provider *p);

/* Classification with the default rules, plus the message extracted from a
 * JSON error body ({"error":{"message"}}, {"error":"..."}, {"message"}),
 * cut to msglen. */
void drv_classify_default(int status, const char *body, size_t len, enum canon_failure *f,
                          char *msg, size_t msglen);

/* Joins base URL and path (which starts with '/'); malloc'd. */
char *drv_url(const struct drv_target *t, const char *path);
/* A provider option (snapshot providers[].options) as string / integer. */
const char *drv_opt_str(const struct drv_target *t, const char *key, const char *def);
long long drv_opt_int(const struct drv_target *t, const char *key, long long def);

/* Dumps a JSON document into out (malloc'd, compact); 0 or GW_ENOMEM. */
int drv_body_json(struct drv_request *out, json_t *doc);

/* The shared driver instances. */
extern const struct dp_driver drv_openai;
extern const struct dp_driver drv_openai_responses;
extern const struct dp_driver drv_anthropic;
extern const struct dp_driver drv_bedrock;
extern const struct dp_driver drv_gemini;
extern const struct dp_driver drv_ollama;

#endif
