/*
 * canon: the gateway's one internal language. Every facade (the client-side
 * wire format: OpenAI chat, Anthropic messages, OpenAI Responses) parses its
 * request into a struct canon_req, and every driver (the provider-side wire
 * format) turns its upstream answer into a stream of struct canon_event. A
 * facade never sees a provider's bytes and a driver never sees a client's, so
 * any facade can be served by any chat driver.
 *
 * The event channel (the contract every driver keeps and every facade and
 * the attempt loop rely on):
 *
 *     START  (content | USAGE)*  DONE
 *     START? ... ERROR                      (ERROR may come at any point)
 *
 *   START        once, first: the upstream's response id and the model that
 *                answered (either may be NULL when the provider says none).
 *   CHUNK        a text delta (UTF-8, never empty).
 *   REASONING    a reasoning ("thinking") text delta, or, with len 0 and a
 *                signature, the signature that closes a thinking block
 *                (Anthropic/Bedrock need it to accept the block back), or,
 *                with redacted set, one whole redacted-thinking block: text
 *                is the provider's opaque data, to be handed back verbatim
 *                by facades that can carry it (Anthropic) and never shown
 *                as reasoning text by those that cannot.
 *   TOOL_START   a tool call begins: index (0, 1, ... in order of first
 *                appearance), call id and function name (never NULL; a
 *                driver invents "call_<n>" when the provider gives no id).
 *   TOOL_DELTA   a piece of that call's arguments, JSON text. The pieces of
 *                one call concatenated are one JSON object ("{}" when the
 *                provider gave no arguments).
 *   TOOL_END     the call's arguments are complete.
 *   USAGE        the usage so far; each USAGE replaces the previous one
 *                (fields are cumulative totals, never increments). It may
 *                come between blocks (providers that report usage in every
 *                chunk) but never inside an open tool call. A driver emits
 *                one as early as the provider reports input usage, so a
 *                facade that must announce input tokens first (Anthropic
 *                message_start) can.
 *   CITATION     a citation of the text block that is open (or just
 *                ended), as the provider's JSON object; not content.
 *   DONE         terminal, with the stop reason.
 *   ERROR        terminal, with a failure class from the closed set, the
 *                upstream HTTP status (0 when none) and a message that never
 *                contains prompt or completion text.
 *
 * Content events are CHUNK, REASONING and TOOL_*. The first one is the
 * bright line: before it, an attempt's failure can still be hidden and the
 * next candidate tried; from it, the answer belongs to this attempt.
 *
 * Blocks do not interleave: text, reasoning and each tool call arrive as
 * contiguous runs, TOOL_DELTA always belongs to the most recent TOOL_START,
 * and TOOL_END comes before anything that is not that call's TOOL_DELTA. A
 * driver whose provider interleaves (an OpenAI stream may, in principle)
 * fails the stream with an ERROR rather than reorder or splice.
 *
 * Every string in an event is only valid during the callback.
 */
#ifndef CANON_H
#define CANON_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct gw_pool;
struct gw_buf;

/* ------------------------------------------------------------------ usage */

/*
 * Usage normalized once, for every driver and the ledger:
 *   input           prompt tokens billed at the plain input rate: cache
 *                   reads and cache writes are NOT in it
 *   cache_read      prompt tokens served from the provider's cache
 *   cache_write_5m  prompt tokens written to a 5-minute cache
 *   cache_write_1h  prompt tokens written to a 1-hour cache
 *   output          every generated token, reasoning included
 *   reasoning       the part of output that was reasoning (<= output)
 * So the prompt size is input + cache_read + cache_write_5m + cache_write_1h.
 * A provider that reports a cache write without its tier is counted as 5m
 * (the default TTL everywhere); see docs/canonical.md.
 */
struct canon_usage {
    int64_t input;
    int64_t cache_read;
    int64_t cache_write_5m;
    int64_t cache_write_1h;
    int64_t output;
    int64_t reasoning;
    int have; /* nonzero once a provider reported anything */
};

/* input + cache reads + cache writes: what OpenAI calls prompt_tokens. */
int64_t canon_usage_prompt(const struct canon_usage *u);

/* No answer has a trillion tokens: every count a provider reports is
 * brought into [0, CANON_MAX_TOKENS] the same way (negative: 0), so that a
 * driver may add a handful of them without overflow, and what reaches the
 * ledger, the budgets and the metrics is sane whatever the provider said. */
#define CANON_MAX_TOKENS 1000000000000LL
static inline long long canon_tokens(long long v)
{
    return v < 0 ? 0 : v > CANON_MAX_TOKENS ? CANON_MAX_TOKENS : v;
}
/* canon_tokens on every count of u (reasoning at most output). */
void canon_usage_clamp(struct canon_usage *u);

/* ----------------------------------------------------------- stop, failure */

enum canon_stop {
    CANON_STOP_END,            /* natural end of turn */
    CANON_STOP_MAX_TOKENS,     /* the output limit cut it */
    CANON_STOP_TOOL_USE,       /* the model called tools and waits */
    CANON_STOP_SEQUENCE,       /* a stop sequence matched */
    CANON_STOP_CONTENT_FILTER, /* the provider's filter ended it */
    CANON_STOP_REFUSAL,        /* the model refused */
};

/* The closed failure taxonomy (docs/canonical.md has the table of what each
 * one does to the chain and to provider health). */
enum canon_failure {
    CANON_FAIL_TIMEOUT,
    CANON_FAIL_NETWORK,
    CANON_FAIL_PROVIDER_5XX,
    CANON_FAIL_RATE_LIMITED,
    CANON_FAIL_MODEL_UNAVAILABLE,
    CANON_FAIL_QUOTA_EXHAUSTED,
    CANON_FAIL_AUTH_FAILED,
    CANON_FAIL_EMPTY_OUTPUT,
    CANON_FAIL_CONTEXT_OVERFLOW,
    CANON_FAIL_UNSUPPORTED_INPUT,
    CANON_FAIL_BAD_REQUEST,
    CANON_FAIL_NOT_FOUND,
    CANON_FAIL_PAYLOAD_TOO_LARGE,
    CANON_FAIL_CONTENT_FILTERED,
    CANON_FAIL_CANCELED,
    CANON_FAIL_COUNT
};

const char *canon_stop_name(enum canon_stop s);       /* "end", "max_tokens", ... */
const char *canon_failure_name(enum canon_failure f); /* "timeout", ... */
/* The class a name names (canon_failure_name's inverse); -1 for NULL or a
 * name that is not a class. */
int canon_failure_from_name(const char *name);
/* The HTTP status a client gets for a failure before its answer started. */
int canon_failure_status(enum canon_failure f);
/* What the class decides (ARCHITECTURE's table, docs/canonical.md):
 * whether the next candidate may succeed where this one failed; whether it
 * counts against the target's health (its breaker); whether trying the
 * same target again may help. */
int canon_failure_advances(enum canon_failure f);
int canon_failure_counts(enum canon_failure f);
int canon_failure_retries(enum canon_failure f);

/* --------------------------------------------------------------- events */

enum canon_ev_type {
    CANON_EV_START,
    CANON_EV_CHUNK,
    CANON_EV_REASONING,
    CANON_EV_TOOL_START,
    CANON_EV_TOOL_DELTA,
    CANON_EV_TOOL_END,
    CANON_EV_USAGE,
    CANON_EV_DONE,
    CANON_EV_ERROR,
    CANON_EV_CITATION, /* a citation of the open text block (not content) */
};

struct canon_logprob;

struct canon_event {
    enum canon_ev_type type;
    int index;        /* TOOL_*: the call's index */
    const char *text; /* CHUNK, REASONING, TOOL_DELTA: the delta */
    size_t len;
    const char *id;                  /* START: response id; TOOL_START: call id */
    const char *name;                /* START: model; TOOL_START: function name */
    const char *signature;           /* REASONING: block signature, or NULL */
    int redacted;                    /* REASONING: text is a redacted block's opaque data */
    const struct canon_usage *usage; /* USAGE */
    enum canon_stop stop;            /* DONE */
    enum canon_failure failure;      /* ERROR */
    int status;                      /* ERROR: upstream HTTP status or 0 */
    const char *message;             /* ERROR */
    const char *retry_after;         /* ERROR: the provider's Retry-After, or NULL */
    /* START, USAGE: the tier that served the request, in canonical words
     * ("standard", "priority", "flex", "batch", "scale"), or NULL when the
     * provider did not say (yet). A facade reports the last one it saw. */
    const char *service_tier;
    /* CHUNK: the log probabilities of the tokens of this delta, when the
     * request asked for them and the provider gave them (else NULL / 0). */
    const struct canon_logprob *logprobs;
    size_t nlogprobs;
    /* CITATION: one citation of the text delivered so far, as the
     * provider's JSON object (Anthropic's citation shape: type,
     * cited_text, url / document_index, ...). */
    const char *citation;
};

/* One output token's log probability, with its most likely alternatives
 * (top, ntop; each with ntop 0). */
struct canon_logprob {
    const char *token;
    size_t len;
    double logprob;
    const struct canon_logprob *top;
    size_t ntop;
};

static inline int canon_is_content(enum canon_ev_type t)
{
    return t == CANON_EV_CHUNK || t == CANON_EV_REASONING || t == CANON_EV_TOOL_START ||
           t == CANON_EV_TOOL_DELTA || t == CANON_EV_TOOL_END;
}

/* Where events go. Returns 0 to go on, nonzero to stop (the consumer has
 * failed or is gone); a producer that gets nonzero stops emitting and
 * returns GW_ECLOSED. */
typedef int (*canon_emit_fn)(void *arg, const struct canon_event *ev);
struct gw_sse_event;
struct canon_sink {
    canon_emit_fn emit;
    void *arg;
    /* Optional, for the pass-through (dp_driver.h, relay_event): each
     * upstream SSE event as it came, after its canonical events were
     * emitted. Nonzero stops the parser, as emit's does. */
    int (*raw)(void *arg, const struct gw_sse_event *ev);
};

/* Small helpers for producers: each fills an event and emits it. */
int canon_emit(const struct canon_sink *s, const struct canon_event *ev);
int canon_emit_error(const struct canon_sink *s, enum canon_failure f, int status,
                     const char *message);

/* A served tier in OpenAI's words (chat, Responses: "default", "flex",
 * "priority", "scale") or Anthropic's ("standard", "priority", "batch") or
 * Bedrock's and Gemini's ("default", "standard", "flex", "priority") as a
 * canonical word (a static string); NULL when s is NULL or unknown. */
const char *canon_tier_served(const char *s);

/* The canonical words a request may ask for (canon_req.service_tier), in
 * this order: auto, standard, flex, priority, scale. Facades and drivers
 * index their own words by it. */
#define CANON_TIER_COUNT 5
extern const char *const canon_tier_words[CANON_TIER_COUNT];

/* ---------------------------------------------------------------- request */

enum canon_role {
    CANON_ROLE_USER, /* also carries tool results */
    CANON_ROLE_ASSISTANT,
    CANON_ROLE_SYSTEM, /* only for a system message in the middle of a
                          conversation (OpenAI allows it); leading system
                          text goes to canon_req.system */
};

enum canon_part_type {
    CANON_PART_TEXT,
    CANON_PART_IMAGE,
    CANON_PART_TOOL_CALL,   /* in an assistant message */
    CANON_PART_TOOL_RESULT, /* in a user message */
    CANON_PART_THINKING,    /* in an assistant message: reasoning to send back */
    CANON_PART_REDACTED_THINKING,
    CANON_PART_DOCUMENT, /* in a user message (or a tool result): a file */
    CANON_PART_AUDIO,    /* in a user message: audio input */
};

enum canon_cache { CANON_CACHE_NONE, CANON_CACHE_5M, CANON_CACHE_1H };

struct canon_part {
    enum canon_part_type type;
    const char *text; /* TEXT, THINKING; REDACTED_THINKING: the opaque data */
    /* IMAGE: either url (http/https) or media_type + data (base64) */
    const char *url;
    const char *media_type;
    const char *data;
    const char *detail; /* OpenAI image detail, or NULL */
    /* TOOL_CALL: id, name, arguments (one JSON object as text).
     * TOOL_RESULT: id (the call it answers), content, is_error. */
    const char *id;
    const char *name;
    const char *arguments;
    struct canon_part *content; /* TOOL_RESULT: TEXT and IMAGE parts */
    size_t ncontent;
    int is_error;
    const char *signature; /* THINKING */
    /* DOCUMENT: exactly one source:
     *   data + media_type   base64 bytes ("application/pdf", "text/plain", ...)
     *   url                 an http(s) URL to the file (media_type may say
     *                       what it is, or be NULL)
     *   text                plain text (media_type "text/plain")
     * and, all optional: filename (OpenAI's file name), title and context
     * (Anthropic's), citations (1: the client asked that the model may cite
     * the document in its answer).
     * AUDIO: data (base64) + media_type ("audio/wav", "audio/mp3"). */
    const char *filename;
    const char *title;
    const char *context;
    int citations;
    enum canon_cache cache;
};

struct canon_message {
    enum canon_role role;
    struct canon_part *parts;
    size_t nparts;
};

struct canon_tool {
    const char *name;
    const char *description; /* or NULL */
    json_t *parameters;      /* a JSON-schema object (borrowed from the request) */
    int strict;              /* -1 unset */
    enum canon_cache cache;
};

enum canon_tool_choice {
    CANON_TC_UNSET,
    CANON_TC_AUTO,
    CANON_TC_NONE,
    CANON_TC_REQUIRED,
    CANON_TC_NAMED
};

enum canon_format { CANON_FMT_UNSET, CANON_FMT_TEXT, CANON_FMT_JSON_OBJECT, CANON_FMT_JSON_SCHEMA };

/*
 * One chat request, whatever facade it came from. Strings and arrays live in
 * req->pool or in req->body (the client's parsed JSON, kept alive with the
 * request). Optional numbers have a has_ flag.
 */
/* A request refusal: HTTP status (400 unless said otherwise), the parameter
 * it is about (client's terms, may be a path like "messages[2].content[0]"),
 * a code and a message. Used by facades (parse) and drivers (build). */
struct canon_err {
    int status;
    char param[128];
    char code[48];
    char message[384];
};

struct canon_req {
    struct gw_pool *pool;
    json_t *body;      /* the client's document; owned (decref'd by canon_req_free) */
    const char *model; /* the selector, as the client wrote it */
    int stream;
    int include_usage; /* OpenAI stream_options.include_usage */

    struct canon_part *system; /* TEXT parts */
    size_t nsystem;
    struct canon_message *messages;
    size_t nmessages;

    struct canon_tool *tools;
    size_t ntools;
    enum canon_tool_choice tool_choice;
    const char *tool_choice_name; /* NAMED */
    int parallel_tool_calls;      /* -1 unset, 0 no, 1 yes */

    int has_temperature, has_top_p, has_top_k, has_max_tokens, has_seed;
    int has_presence_penalty, has_frequency_penalty;
    double temperature, top_p, presence_penalty, frequency_penalty;
    long long top_k, max_tokens, seed;
    const char **stop; /* stop sequences */
    size_t nstop;

    enum canon_format format;
    const char *format_name; /* JSON_SCHEMA */
    json_t *format_schema;   /* JSON_SCHEMA, borrowed */
    int format_strict;       /* -1 unset */

    /* Reasoning: an effort ("minimal", "low", "medium", "high") or a token
     * budget; reasoning_off is an explicit "no thinking". */
    const char *reasoning_effort;
    long long reasoning_budget; /* 0: unset */
    int reasoning_off;

    const char *user; /* end-user id (OpenAI user, Anthropic metadata.user_id) */
    /* OpenAI's safety_identifier (the successor of user): a stable id of the
     * end user for the provider's abuse monitoring. Anthropic's
     * metadata.user_id takes it when user is unset. */
    const char *safety_identifier;

    /* The processing tier asked for, in canonical words: "auto" (the
     * provider decides), "standard", "flex", "priority", or "scale"
     * (OpenAI's Scale Tier); NULL when unset. docs/canonical.md has each
     * provider's word for each. */
    const char *service_tier;

    /* Log probabilities of the output tokens: logprobs (0 unset/off, 1 on)
     * and how many alternatives per token (top_logprobs, -1 unset). */
    int logprobs;
    int top_logprobs;

    /* The lenient parse (set before parse by a caller that may pass the
     * body through unchanged): a field or content part the canonical model
     * cannot carry is noted in opaque (the first one, as the 400 a strict
     * parse would have answered) and left out of the canonical request,
     * instead of refused. A target that needs the translation refuses the
     * request with opaque; one of the client's own wire format takes it. */
    int lenient;
    struct canon_err opaque; /* status 0: nothing opaque */

    /* Values the tool calls' arguments (JSON in strings, parsed once by the
     * facade's check and again by drivers that send objects) have spent of
     * GW_JSON_MAX_VALUES: the body's bound does not see inside strings. */
    size_t args_values;

    /* Where the client's fields were, for error messages that name them in
     * the client's own terms ("max_tokens" vs "max_output_tokens"). */
    const char *const *field_names; /* indexed by enum canon_field, or NULL */
};

/* The canonical fields a driver may be unable to honor; a facade maps each
 * to its own parameter name so a refusal names what the client sent. */
enum canon_field {
    CANON_F_MESSAGES,
    CANON_F_SYSTEM,
    CANON_F_TOOLS,
    CANON_F_TOOL_CHOICE,
    CANON_F_PARALLEL_TOOL_CALLS,
    CANON_F_TEMPERATURE,
    CANON_F_TOP_P,
    CANON_F_TOP_K,
    CANON_F_MAX_TOKENS,
    CANON_F_SEED,
    CANON_F_PRESENCE_PENALTY,
    CANON_F_FREQUENCY_PENALTY,
    CANON_F_STOP,
    CANON_F_RESPONSE_FORMAT,
    CANON_F_REASONING,
    CANON_F_USER,
    CANON_F_SERVICE_TIER,
    CANON_F_LOGPROBS,
    CANON_F_COUNT
};

/* The client's name for a canonical field (falls back to the OpenAI chat
 * name). */
const char *canon_field_name(const struct canon_req *r, enum canon_field f);

void canon_err_set(struct canon_err *e, int status, const char *param, const char *code,
                   const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Allocates an empty request with its pool; takes the body reference. */
struct canon_req *canon_req_new(json_t *body);
void canon_req_free(struct canon_req *r);

/* ------------------------------------------------------------- embeddings */

struct canon_embed_req {
    const char *model;
    const char **inputs; /* strings */
    size_t ninputs;
    long long dimensions; /* 0: unset */
    int base64;           /* encoding_format "base64" */
    const char *user;
};

/* A driver's embeddings answer: nvec vectors of dim floats each. */
struct canon_embed_resp {
    double *values; /* nvec * dim, malloc'd */
    size_t nvec;
    size_t dim;
    struct canon_usage usage;
    char model[128]; /* the model that answered, "" when not said */
};

void canon_embed_resp_free(struct canon_embed_resp *e);

/* ------------------------------------------------------------------ media */

/* The OpenAI media endpoints (docs/media.md). */
enum canon_media_op {
    CANON_MEDIA_TRANSCRIBE, /* POST /v1/audio/transcriptions (multipart) */
    CANON_MEDIA_TRANSLATE,  /* POST /v1/audio/translations (multipart) */
    CANON_MEDIA_SPEECH,     /* POST /v1/audio/speech (JSON in, audio out) */
    CANON_MEDIA_IMAGE,      /* POST /v1/images/generations (JSON) */
    CANON_MEDIA_IMAGE_EDIT, /* POST /v1/images/edits (multipart) */
};

/* One part of a multipart request: its bytes point into the client's body. */
struct canon_media_field {
    const char *name;
    const char *filename; /* NULL: a plain field */
    const char *content_type;
    const char *data;
    size_t len;
};

/* A media request as the gateway reads it. Media requests are in OpenAI's
 * format only, and go to drivers that speak it: the client's own fields
 * travel as they came (a multipart body's parts in order, or the JSON
 * body), but for the model, which is the target's. */
struct canon_media_req {
    enum canon_media_op op;
    const char *selector;                   /* the client's model field */
    const char *model;                      /* the target's, set for each attempt */
    const struct canon_media_field *fields; /* multipart: nfields parts */
    size_t nfields;
    const char *json; /* JSON: the body (json_len bytes) */
    size_t json_len;
    int stream;                  /* the client asked for a streamed answer */
    const char *response_format; /* as given, or NULL */
    /* What the reservation bounds and the price reads. */
    int64_t file_bytes;         /* the upload's bytes (audio, or every image) */
    int64_t audio_ms;           /* transcriptions: the duration read from the file, 0 unread */
    int64_t prompt_bytes;       /* text the request carries (a prompt, speech input) */
    int64_t characters;         /* speech: the input's characters */
    int64_t images;             /* images: n (1 by default); edits: the input images too */
    int64_t input_images;       /* edits: images sent */
    const char *size, *quality; /* images, as given, or NULL */
};

/* What a media answer says it used: tokens (usage.have) when the provider
 * reports them, and the units it states (seconds of audio, images). */
struct canon_media_usage {
    struct canon_usage tokens;
    int64_t media_in, media_out; /* of the tokens, those that are audio or image */
    int64_t audio_ms;            /* the provider's billed duration, 0 unsaid */
    int64_t images;              /* images in the answer, -1 unsaid */
};

/* --------------------------------------------------------------- accumulator */

/*
 * Collects an event stream into one complete answer, for non-streaming
 * clients: the facade renders it when DONE arrives, in the order reasoning,
 * text, tool calls (all text deltas join into one text). Bounded: a text or
 * argument buffer beyond max_bytes (0: 32 MiB) fails the append.
 */
struct canon_acc_tool {
    char *id;
    char *name;
    struct gw_buf *args;
};

/* One reasoning block, as the provider delimited it. */
struct canon_acc_think {
    struct gw_buf *text; /* redacted: the opaque data */
    char *signature;     /* NULL until signed */
    int redacted;
};

struct canon_acc {
    char *response_id;
    char *model;
    struct gw_buf *text;
    struct gw_buf *reasoning;       /* every block's readable text, joined */
    char *signature;                /* the last signature */
    struct canon_acc_think *thinks; /* the blocks in order (Anthropic keeps them) */
    size_t nthinks;
    struct canon_acc_tool *tools;
    size_t ntools;
    size_t tools_cap;
    struct canon_usage usage;
    enum canon_stop stop;
    int done;
    size_t max_bytes;
    char *service_tier; /* the last one reported, or NULL */
    /* Every CHUNK's log probabilities in order, as
     * [{"token", "logprob", "top": [{"token", "logprob"}, ...]}, ...],
     * or NULL when none came. */
    json_t *logprobs;
    /* Every CITATION in order, as [{"at": bytes of text before it,
     * "citation": the provider's object}, ...], or NULL. */
    json_t *citations;
};

void canon_acc_init(struct canon_acc *a, size_t max_bytes);
void canon_acc_free(struct canon_acc *a);
/* A CHUNK's log probabilities as the JSON array canon_acc keeps
 * (new reference; NULL when the event has none or memory ran out). */
json_t *canon_logprobs_json(const struct canon_logprob *lp, size_t n);

/* Applies one event (not ERROR). 0 or GW_ELIMIT/GW_ENOMEM/GW_EINVAL. */
int canon_acc_add(struct canon_acc *a, const struct canon_event *ev);

/* ---------------------------------------------------------------- helpers */

/* Stop reason from a provider's finish string, per wire format. Unknown
 * strings map to CANON_STOP_END. */
enum canon_stop canon_stop_from_openai(const char *s);
enum canon_stop canon_stop_from_anthropic(const char *s);
const char *canon_stop_to_openai(enum canon_stop s);
const char *canon_stop_to_anthropic(enum canon_stop s);

/* The failure class of an upstream HTTP error from its status and body
 * (provider-neutral: status first, then well-known phrases in the error
 * text such as "context length"). */
enum canon_failure canon_classify_http(int status, const char *body, size_t len);
/* The failure class of a transfer that ended without a whole HTTP answer,
 * from its upstream client's result (enum gw_upc_result): the connect
 * timeout is a timeout, everything else a network failure (the attempt's
 * watchdog, not the client, times the rest). */
enum canon_failure canon_classify_transport(int upc_result);

/* A JSON string value as the parts of a data: URL ("data:<type>;base64,<data>"):
 * returns 0 and fills media_type/data (pool copies), GW_EINVAL when url is
 * not a base64 data URL. */
int canon_parse_data_url(struct gw_pool *pool, const char *url, const char **media_type,
                         const char **data);

#endif
