/*
 * drv_util: pieces every driver needs: the common part of a parser (the
 * parse / finish dispatch between a stream and a whole body, the whole-body
 * loader, the SSE event loop, failing an answer), keeping tool calls in the
 * canonical order (one open call at a time, indexes 0, 1, ... in order of
 * appearance) whatever indexes or ids the provider uses, request-building
 * pieces several wire formats share, and embeddings.
 */
#ifndef DRV_UTIL_H
#define DRV_UTIL_H

#include <jansson.h>

#include "canon.h"
#include "dp_driver.h"
#include "gw_buf.h"
#include "gw_sse.h"

/* ------------------------------------------------------------------ build */

/* drv_common_headers, then the provider's credential, when it has one,
 * after prefix ("Authorization: Bearer ", "x-api-key: "). 0 or GW_ENOMEM. */
int drv_auth_headers(struct drv_request *out, const struct drv_target *t, const char *prefix);
int drv_auth_headers_as(struct drv_request *out, const struct drv_target *t, const char *prefix,
                        const char *content_type);

/* Completes a JSON request: url (taken; NULL: out of memory), doc as its
 * body (released), then drv_auth_headers with auth. 0 or GW_ENOMEM. */
int drv_json_request(struct drv_request *out, const struct drv_target *t, char *url, json_t *doc,
                     const char *auth);

/* The reasoning effort asked for, or a token budget as an effort (below
 * 4096 low, below 16384 medium, else high) for providers that take only
 * efforts; NULL when neither was given. */
const char *drv_effort_of(const struct canon_req *r);

/* A provider's token budgets for the reasoning efforts. */
struct drv_budgets {
    long long minimal, low, medium, high;
    long long other; /* for an effort that is none of those */
};
/* The budget for an effort; 0 for none (NULL). */
long long drv_effort_budget(const char *effort, const struct drv_budgets *b);

/* A 400 unsupported_content about message mi, under the client's name for
 * the messages: "message <mi>: <what>". GW_EINVAL. */
int drv_refuse_message(const struct canon_req *r, size_t mi, const char *what,
                       struct canon_err *err);

/* Refuses a request for one tool call per turn (parallel_tool_calls
 * false, Anthropic's disable_parallel_tool_use) to a provider that cannot
 * forbid several: "<field> asks for one tool call per turn, which <who>
 * cannot enforce: <why>". Returns GW_EINVAL. */
int drv_refuse_parallel_off(const struct canon_req *r, const char *who, const char *why,
                            struct canon_err *err);

/* "a" or "an" before a driver's name in a refusal ("an ollama provider"). */
static inline const char *drv_a(const char *driver)
{
    return driver[0] == 'a' || driver[0] == 'e' || driver[0] == 'i' || driver[0] == 'o' ? "an"
                                                                                        : "a";
}

/* The name of the call that tool result p in message mi answers, for
 * providers that match results to calls by name: the latest tool call with
 * p's id in an assistant message before mi. NULL when there is none, with
 * err set (drv_refuse_message; why says why the provider needs the name). */
const char *drv_result_name(const struct canon_req *r, size_t mi, const struct canon_part *p,
                            const char *why, struct canon_err *err);

/* A tool call's arguments (none or "": {}) parsed with flags; NULL when they
 * are not a JSON object. Unbounded itself: the facade's fc_args_check has
 * counted every client's arguments against the request's limit. */
json_t *drv_call_args(const struct canon_part *p, size_t flags);

/* An IMAGE part's URL as a JSON string: its own, or its data as a
 * "data:<media type>;base64," URL. NULL when out of memory. */
json_t *drv_image_url(const struct canon_part *p);

/* The text of a tool result for providers that take only text: prefix
 * (NULL: none), then the result's TEXT parts as they are, into b (set up
 * here; the caller frees it, and b->data may stay NULL for no text). GW_OK,
 * GW_EINVAL when a part is not text (the caller says so in its terms), or
 * GW_ENOMEM. */
int drv_result_text(const struct canon_part *p, const char *prefix, struct gw_buf *b);

/* How an OpenAI-style wire format writes message content. */
struct drv_content_fmt {
    const char *text_type; /* a text part's "type": "text", "input_text" */
    json_t *(*image)(const struct canon_part *p);
    /* A DOCUMENT or AUDIO part (user content only), or NULL with err set
     * when the format cannot take it (NULL alone: out of memory). A format
     * without it refuses them as neither text nor an image. */
    json_t *(*media)(const struct canon_req *r, const char *where, const struct canon_part *p,
                     struct canon_err *err);
    /* Sets err for a part at where that is neither (images: nor an image). */
    void (*refuse)(const struct canon_req *r, const char *where, int images, struct canon_err *err);
};
/* TEXT and, where images, IMAGE (and, with fmt->media, DOCUMENT and AUDIO)
 * parts as content: a string when it is one text part, else an array of
 * {type: text_type, text}, image and media parts. NULL
 * with err set when a part does not fit, NULL alone when out of memory. */
json_t *drv_content(const struct canon_req *r, const struct canon_part *parts, size_t n, int images,
                    const char *where, const struct drv_content_fmt *fmt, struct canon_err *err);
/* The parts of user message m (number mi) that are not tool results, as
 * drv_content with images (where "message <mi>"): GW_OK with *out (NULL
 * when there are none), GW_EINVAL with err set, or GW_ENOMEM. */
int drv_user_content(const struct canon_req *r, const struct canon_message *m, size_t mi,
                     const struct drv_content_fmt *fmt, json_t **out, struct canon_err *err);

/* The stop sequences as a JSON array of strings; NULL when out of memory. */
json_t *drv_stop_array(const struct canon_req *r);

/* A sampling parameter's name on a provider's wire. field is one of
 * TEMPERATURE, TOP_P, TOP_K, MAX_TOKENS, SEED, PRESENCE_PENALTY,
 * FREQUENCY_PENALTY and STOP. */
struct drv_param {
    enum canon_field field;
    const char *key;
};
#define DRV_NPARAMS(ps) (sizeof(ps) / sizeof((ps)[0]))
/* Sets on o, in the order listed, each of the n parameters the request
 * has. 0, or nonzero when one could not be set (out of memory). */
int drv_params(json_t *o, const struct canon_req *r, const struct drv_param *ps, size_t n);

/* What a tool declaration says when the tool has no parameter schema. */
enum drv_no_schema {
    DRV_SCHEMA_OMIT,  /* nothing */
    DRV_SCHEMA_NULL,  /* null */
    DRV_SCHEMA_EMPTY, /* {"type":"object","properties":{}} */
};
/* Fills a tool declaration o (which the caller began with the name): the
 * tool's description when it has one, then its parameters' schema under
 * key. Returns o. */
json_t *drv_tool_decl(json_t *o, const struct canon_tool *tl, const char *key,
                      enum drv_no_schema none);

/* OpenAI's names for the tool choices "auto", "none" and "required"; NULL
 * for a named choice or none. */
const char *drv_tool_choice_word(enum canon_tool_choice tc);

/* ---------------------------------------------------------------- parsers */

/* A driver's parser of size bytes (its own struct, which starts with
 * struct drv_parser), zeroed, with the common part set up: drv, stream, an
 * empty body and SSE parser. NULL when out of memory. */
void *drv_parser_new(size_t size, const struct dp_driver *drv, int stream);
/* Releases the common part and the parser: a driver's parser_free, or what
 * it ends with when its parser holds more. */
void drv_parser_free(struct drv_parser *p);

/* Ends the answer with an ERROR of class f (no HTTP status); returns 1, what
 * a parser returns once it has emitted a terminal event. */
int drv_fail(struct drv_parser *p, const struct canon_sink *s, enum canon_failure f,
             const char *msg);

/* START with the provider's id and model (either may be NULL), once: 0
 * when it went out before, else canon_emit's answer. */
int drv_start(struct drv_parser *p, const char *id, const char *name, const struct canon_sink *s);
/* START with the served tier (NULL: not said), once (drv_start's rule). */
int drv_start_tier(struct drv_parser *p, const char *id, const char *name, const char *tier,
                   const struct canon_sink *s);

/* A driver's parse: nothing after a terminal event (1); a stream's bytes go
 * to stream_fn; a whole body is kept in p->body until finish (a body past
 * DRV_MAX_BODY fails the answer). */
typedef int (*drv_stream_fn)(struct drv_parser *p, const char *buf, size_t len,
                             const struct canon_sink *s);
int drv_parse(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s,
              drv_stream_fn stream_fn);

/* A driver's finish, common part: nothing after a terminal event; a whole
 * body is read as one JSON object (JSON_REJECT_DUPLICATES) and handed to
 * whole_fn, an empty body failing with empty_output and anything else that
 * is not an object with provider_5xx. Returns 1 when that is all there is
 * to do, 0 when the parser is streaming and the driver must end the stream
 * itself. */
typedef void (*drv_whole_fn)(struct drv_parser *p, const json_t *doc, const struct canon_sink *s);
int drv_finish(struct drv_parser *p, const struct canon_sink *s, drv_whole_fn whole_fn);

/* What an SSE driver does with one raw event before it is read as JSON. */
enum drv_sse_step {
    DRV_SSE_JSON, /* read its data as a JSON object and hand it to doc_fn */
    DRV_SSE_SKIP, /* nothing: go on to the next event */
    DRV_SSE_STOP, /* the parser emitted a terminal event or the sink stopped */
};
typedef enum drv_sse_step (*drv_sse_raw_fn)(struct drv_parser *p, const struct gw_sse_event *ev,
                                            const struct canon_sink *s);
/* One event whose data is a JSON object; nonzero stops. */
typedef int (*drv_sse_doc_fn)(struct drv_parser *p, const struct gw_sse_event *ev,
                              const json_t *doc, const struct canon_sink *s);
/* drv_parse for a provider that streams SSE, read with p->sse: every
 * complete event goes to raw_fn (NULL: every event is JSON), then, parsed,
 * to doc_fn. Data that is not a JSON object fails the answer ("malformed
 * stream event"), and so does an event past DRV_MAX_EVENT ("too large").
 * Returns 0 to go on or 1. */
int drv_parse_sse(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s,
                  drv_sse_raw_fn raw_fn, drv_sse_doc_fn doc_fn);
/* A raw_fn that skips events without data. */
enum drv_sse_step drv_sse_skip_empty(struct drv_parser *p, const struct gw_sse_event *ev,
                                     const struct canon_sink *s);

/* Text of an event type (CHUNK, REASONING), nothing when NULL or empty;
 * nonzero when the sink stopped. */
int drv_emit_text(const struct canon_sink *s, enum canon_ev_type type, const char *text);
/* A reasoning block's signature (nothing when NULL or empty). */
int drv_emit_signature(const struct canon_sink *s, const char *sig);
/* A redacted reasoning block: the provider's opaque data, whole. */
int drv_emit_redacted(const struct canon_sink *s, const char *data);

/* -------------------------------------------------------------- tool calls */

#define DRV_MAX_TOOL_CALLS 128

/* A call that waits behind the one being emitted (drv_tools.interleave). */
struct drv_tool_held {
    long long key;
    int ended;       /* the provider said it is complete (drv_tools_end) */
    char *id, *name; /* as first given; NULL: none */
    struct gw_buf args;
};

struct drv_tools {
    /* 0: a new key closes the open call (formats whose calls are blocks
     * with a start and a stop). 1: a new key may interleave with the open
     * one (OpenAI chat and Responses, where every delta names its call):
     * the later call is held, whole, until the open one ends. */
    int interleave;
    int open;           /* 1 while a call is open (being emitted) */
    long long open_key; /* the provider's key of the open call */
    int open_args;      /* the open call has had argument bytes */
    int count;          /* calls started (emitted) */
    long long keys[DRV_MAX_TOOL_CALLS];
    struct drv_tool_held *held; /* in the order the provider started them */
    int nheld, held_cap;
    size_t held_bytes; /* argument bytes held, at most DRV_MAX_BODY */
};

/*
 * A piece of the tool call the provider identifies by key (its index). A
 * call emitted is TOOL_START (id: the provider's, or "call_<n>"), its
 * arguments as TOOL_DELTAs, TOOL_END; calls are emitted one after another,
 * in the order the provider started them, with canonical indexes 0, 1, ...
 * A new key closes the open call, or with interleave is held until the
 * open one ends. args, when non-empty, is emitted (or held). Returns 0, 1
 * when the sink stopped, GW_EINVAL when the key belongs to a call already
 * closed, or GW_ELIMIT past DRV_MAX_TOOL_CALLS calls or DRV_MAX_BODY held
 * bytes.
 */
int drv_tools_delta(struct drv_tools *t, long long key, const char *id, const char *name,
                    const char *args, const struct canon_sink *s);
/* The provider says call key is complete: the open one is closed and the
 * next held call (if any) emitted with what it has so far; a held one is
 * emitted closed when its turn comes. Unknown keys are ignored. Returns
 * nonzero when the sink stopped. */
int drv_tools_end(struct drv_tools *t, long long key, const struct canon_sink *s);
/* 1 when key is a call started and not yet ended (open or held). */
int drv_tools_live(const struct drv_tools *t, long long key);
/* 1 when call key (open or held) has had argument bytes. */
int drv_tools_has_args(const struct drv_tools *t, long long key);
/* Ends every call: the open one (a call that had no arguments gets "{}"),
 * then each held call whole, in order. Returns nonzero when the sink
 * stopped. */
int drv_tools_close(struct drv_tools *t, const struct canon_sink *s);
/* Frees what is held (a parser's end). */
void drv_tools_free(struct drv_tools *t);

/* drv_tools_delta's answer, rc, as a parser's: GW_EINVAL fails the answer
 * with what (provider_5xx), GW_ELIMIT with "too many tool calls", both
 * returning 1; any other nonzero is 1; 0 is 0. */
int drv_tools_check(struct drv_parser *p, const struct canon_sink *s, int rc, const char *what);

/* A call that arrives whole (its own key: the next number), with its
 * arguments (NULL: "{}"), closed at once. Too many calls fail the answer. */
int drv_tools_whole(struct drv_parser *p, struct drv_tools *t, const char *id, const char *name,
                    const char *args, const struct canon_sink *s);

/* ------------------------------------------------------------- embeddings */

/* Reads an array of vectors: each element is an object whose member key is
 * an array of numbers (or, with key NULL, the array itself). All must have
 * the same length. Fills out->values/nvec/dim. 0 or GW_EINVAL (msg says
 * why) or GW_ENOMEM. */
int drv_embed_vectors(const json_t *items, const char *key, struct canon_embed_resp *out, char *msg,
                      size_t msglen);

/* OpenAI's embeddings endpoint, POST {base_url}/embeddings with Bearer auth
 * (float encoding, dimensions, user), and its answer (data[].embedding,
 * usage.prompt_tokens, model): the openai and openai-responses drivers
 * both serve embeddings with these (defined in openai.c). */
int drv_openai_build_embed(const struct drv_target *t, const struct canon_embed_req *r,
                           struct drv_request *out, struct canon_err *err);
/* OpenAI's media endpoints (openai_media.c): the openai and
 * openai-responses drivers both serve them. */
int drv_openai_build_media(const struct drv_target *t, const struct canon_media_req *r,
                           struct drv_request *out, struct canon_err *err);
void drv_openai_media_usage(const struct canon_media_req *r, const char *body, size_t len,
                            struct canon_media_usage *u);
int drv_openai_parse_embed(const char *body, size_t len, struct canon_embed_resp *out, char *msg,
                           size_t msglen);

/* ------------------------------------------------------- the pass-through */

/* One edit of a JSON text: bytes [at, at + cut) become ins[0..ins_len). */
struct drv_edit {
    size_t at, cut;
    const char *ins;
    size_t ins_len;
};

/* The body src[0..n) with edits applied (any order; none overlap) into
 * out->body (malloc'd). 0 or GW_ENOMEM. */
int drv_edit_body(struct drv_request *out, const char *src, size_t n, struct drv_edit *e,
                  size_t ne);

/* Where a member appended to the object src[0..n) goes: the offset of its
 * closing brace; *comma says whether a comma must come first (the object
 * has members). GW_EINVAL when src is not an object. */
int drv_edit_append_at(const char *src, size_t n, size_t *at, int *comma);

/* The edit that makes member key's value buf's bytes (a JSON value), or
 * appends the member when body has none (buf then holds the member, head
 * included). buf must outlive the edit. GW_EINVAL with err when key cannot
 * be located for sure (gw_json_span_member's -1) or body is no object. */
int drv_edit_member(const char *body, size_t len, const char *key, struct gw_buf *buf,
                    struct drv_edit *e, size_t *ne, struct canon_err *err);

/* "event: <name>\n" (when the event has one) "data: <data>\n\n": an upstream
 * event as the client gets it. 0 or GW_ENOMEM/GW_ELIMIT. */
int drv_relay_frame(struct gw_buf *out, const struct gw_sse_event *ev);

/* The held usage event (its data: a JSON object) as the client gets it:
 * "event: <event>\n" (event non-NULL), then its data with the gateway's
 * "llmgw" member (bill_json; NULL: none) before the closing brace. */
int drv_relay_billed(struct gw_buf *out, const char *event, const struct gw_buf *held,
                     const char *bill_json);

#endif
