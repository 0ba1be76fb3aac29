/*
 * Internal interface of llmgw-mockprovider (see main.c and
 * docs/mockprovider.md), shared by its files:
 *
 *   main.c       command line, threads, signals, routing of simple endpoints
 *   call.c       one model call: body parsing common to all APIs, fault
 *                resolution, ttfb/hang, the streaming engine, the usage log
 *   fault.c      fault SPEC parsing and the deterministic-answer helpers
 *                (word counts, tool arguments, embedding vectors, CRC32)
 *   openai.c     OpenAI chat completions and embeddings wire format
 *   responses.c  OpenAI Responses API wire format
 *   anthropic.c  Anthropic messages wire format
 *   bedrock.c    AWS Bedrock Converse / ConverseStream (binary event stream)
 *   gemini.c     Google Gemini generateContent / streamGenerateContent / embed
 *   ollama.c     Ollama /api/chat (NDJSON stream) and /api/embed
 *   media.c      OpenAI audio (transcriptions, translations: multipart; speech:
 *                binary audio in pieces) and images (generations; edits:
 *                multipart), and the PNG its image URLs serve
 *
 * A call is described once (struct mock_call) in API-neutral terms; each API
 * file only knows how to parse its request into that description and how to
 * render it: a complete body, the next frame of a stream (an SSE event, an
 * NDJSON line or an event-stream message), an error body.
 */
#ifndef MOCK_H
#define MOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "gw_buf.h"
#include "gw_http.h"
#include "gw_pool.h"

struct event;
struct event_base;

/* Bounds on what a request or fault may ask for, so that one request can
 * never make the mock allocate without limit. */
#define MOCK_MAX_CHUNKS 100000
#define MOCK_MAX_PARALLEL 16
#define MOCK_MAX_MS 3600000
#define MOCK_MAX_DIMENSIONS 4096
#define MOCK_MAX_EMBED_INPUTS 2048
#define MOCK_ARG_PIECE 7         /* tool arguments are streamed in 7-byte pieces */
#define MOCK_OUT_MAX (64u << 20) /* ceiling of any answer being built */

/* A parsed fault SPEC. Unset optional values are -1 (or 0 where 0 is the
 * natural "off"). */
struct mock_fault {
    int status;         /* 0: answer normally */
    int retry_after;    /* seconds for Retry-After; -1: not given */
    int ttfb_ms;        /* 0: none */
    int chunks;         /* -1: the --chunks default */
    int chunk_delay_ms; /* -1: the --chunk-delay-ms default */
    int drop_after;     /* -1: never */
    int hang;
    int empty;
    int malformed; /* 0: never; N: the Nth content chunk */
    int cache_read;
    int cache_write;
    int parallel;     /* 0: not given */
    int interleave;   /* parallel calls' argument deltas alternate by index */
    int no_body;      /* a 200 whose body is empty */
    int multiline;    /* each SSE payload split over two data: lines */
    int blank_events; /* an empty event and a comment before each chunk */
    int tail_ms;      /* after the last event, wait before ending */
    int reasoning;    /* reasoning tokens before the answer */
    int cache_write_1h;
    int error;        /* enum mock_error_kind: the error body (and default status) */
    int times;        /* 0: always; N: the faults apply to the first N requests of this SPEC */
    int after;        /* 0: from the first; N: the faults apply from the (N+1)th request on */
    char only_id[65]; /* "": every request; else only those whose x-request-id starts so */
};

/* error=KIND: which provider error a status fault answers with. */
enum mock_error_kind {
    MOCK_ERR_NONE = 0,
    MOCK_ERR_CONTEXT_LENGTH,
    MOCK_ERR_INSUFFICIENT_QUOTA,
    MOCK_ERR_CONTENT_FILTER,
    MOCK_ERR_UNSUPPORTED,
    MOCK_ERR_MODEL_NOT_FOUND,
    MOCK_ERR_OVERLOADED,
    MOCK_ERR_NOT_FOUND,
    MOCK_ERR_COUNT
};

/* The error shape an API answers in. */
enum mock_family {
    MOCK_FAM_OPENAI = 0, /* chat, embeddings, Responses */
    MOCK_FAM_ANTHROPIC,
    MOCK_FAM_BEDROCK,
    MOCK_FAM_GEMINI,
    MOCK_FAM_OLLAMA,
    MOCK_FAM_COUNT
};

struct mock_call;

/* One error=KIND as one family answers it. fmt may hold one %s: the model. */
struct mock_error_text {
    int status;        /* the status when the SPEC gives none */
    const char *type;  /* OpenAI error.type, Anthropic error.type, Bedrock
                        * exception, Gemini status; NULL for Ollama */
    const char *code;  /* OpenAI error.code (NULL: null); Gemini: a QuotaFailure quotaId */
    const char *param; /* OpenAI error.param (NULL: null) */
    const char *fmt;
};
const struct mock_error_text *mock_error_text(int kind, enum mock_family fam);
/* The message of an error=KIND for the call's model, in pool memory. */
const char *mock_error_message(struct mock_call *c, const struct mock_error_text *t);

void mock_fault_clear(struct mock_fault *f);
/* Parses a comma-separated list of key=value (len bytes of spec). On
 * failure returns GW_EINVAL and writes a reason to err; *f is then
 * unspecified. */
int mock_fault_parse(const char *spec, size_t len, struct mock_fault *f, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* ---- process-wide state (immutable after start, except the counters) ---- */

/* times=N: how many requests each SPEC text has had (a hash table under a
 * mutex, since event-loop threads share it). */
struct mock_times;
struct mock_times *mock_times_new(void);
void mock_times_free(struct mock_times *t);
/* Counts one more request carrying spec; returns the count including it,
 * or -1 when the table is full. */
long long mock_times_take(struct mock_times *t, const char *spec);

struct mock_config {
    const char *host;
    int port;
    int threads;
    const char *usage_log;   /* NULL: no usage log */
    const char *record_log;  /* NULL: model-call bodies are not recorded */
    const char *fault_spec;  /* "" when none */
    struct mock_fault fault; /* fault_spec parsed */
    int chunks;
    int chunk_delay_ms;
};

struct mock_shared {
    const struct mock_config *cfg;
    int usage_fd;                 /* -1: no usage log; O_APPEND, shared */
    int record_fd;                /* -1: no body record; O_APPEND, shared */
    atomic_uint_fast64_t next_id; /* the <n> of chatcmpl-mock-<n> */
    struct mock_times *times;     /* times=N counters */
};

/* One event-loop thread. The buffers are reused by every request of the
 * thread, so the non-streaming hot path allocates nothing of its own. */
struct mock_thread {
    struct mock_shared *sh;
    struct event_base *base;
    struct gw_http_server *srv;
    int listen_fd;
    int wake_fd[2]; /* main thread writes a byte: stop the loop */
    struct event *wake_ev;
    pthread_t tid;
    struct gw_buf out;  /* complete bodies */
    struct gw_buf line; /* usage log lines */
};

/* ---- one model call ---- */

enum mock_frame {
    MOCK_FRAME_END,     /* nothing more: the stream is complete */
    MOCK_FRAME_PRE,     /* before the first content chunk */
    MOCK_FRAME_CONTENT, /* a content chunk: a token or an argument piece */
    MOCK_FRAME_MID,     /* between content chunks (tool block boundaries) */
    MOCK_FRAME_POST,    /* after the content: finish, usage, terminator */
};

enum mock_wait { MOCK_WAIT_TTFB, MOCK_WAIT_DELAY, MOCK_WAIT_TAIL };

enum mock_finish { MOCK_FINISH_STOP, MOCK_FINISH_LENGTH, MOCK_FINISH_TOOLS };

struct mock_tool {
    const char *name; /* jansson memory, alive as long as the call */
    const char *args; /* compact ASCII JSON, pool memory */
    size_t args_len;
    size_t sent; /* argument bytes streamed so far */
};

struct mock_call;

/* Where an API reads its stream flag from. */
enum mock_stream_mode {
    MOCK_STREAM_BODY,         /* "stream": true in the body, default false */
    MOCK_STREAM_BODY_DEFAULT, /* "stream" in the body, default true (Ollama) */
    MOCK_STREAM_NEVER,        /* the path says: a complete answer */
    MOCK_STREAM_ALWAYS,       /* the path says: a stream */
};

struct mock_api {
    const char *log_name;    /* "openai.chat", ... */
    enum mock_family family; /* whose error shapes (error=KIND) */
    const char *id_prefix;   /* "chatcmpl-mock-", NULL: no id */
    enum mock_stream_mode stream_mode;
    int cache_reads;         /* the wire has a cache-read field (else the log says 0) */
    int cache_writes;        /* the wire has a cache-write field (else the log says 0) */
    int retry_after_always;  /* Retry-After on every 429, not only when asked */
    const char *stream_type; /* content type of a stream; NULL: SSE */
    /* Checks credentials before the body is read. NULL: none. Returns NULL,
     * or a message for an error with status c->err_status. */
    const char *(*auth)(struct mock_call *c);
    /* For a body that is not JSON (multipart/form-data): reads the whole
     * body instead of call.c's JSON load and says the model (with any
     * "#SPEC" suffix; pool memory or the body's). NULL: the body is JSON.
     * Returns NULL, or an error message for a 400 (or c->err_status). */
    const char *(*parse_body)(struct mock_call *c, const char *body, size_t len,
                              const char **model);
    /* Reads the API's own fields (the model, stream flag and fault are
     * already in c; root is NULL after parse_body). Returns NULL, or an
     * error message for a 400 (or c->err_status when the API set one). */
    const char *(*parse)(struct mock_call *c, json_t *root);
    /* Appends the complete non-streaming body. 0 or a GW_E code. */
    int (*body)(struct mock_call *c, struct gw_buf *out);
    /* Appends the next frame and says what it is; MOCK_FRAME_END appends
     * nothing. A CONTENT frame worth more than one output token (a whole
     * tool call) sets c->frame_tokens. NULL for APIs that do not stream. */
    enum mock_frame (*frame)(struct mock_call *c, struct gw_buf *out);
    /* Makes a content frame unparseable (malformed=N). NULL: cut the JSON
     * of the SSE event's last data: line in half. */
    void (*malform)(struct mock_call *c, struct gw_buf *frame);
    /* Appends the error body for status (message NULL: the provider's usual
     * text) and adds the provider's error headers. 0 or a GW_E code. */
    int (*error)(struct mock_call *c, struct gw_buf *out, int status, const char *message);
    /* Appends extra usage-log members (",\"auth\":{...}"). NULL: none. */
    int (*log_extra)(const struct mock_call *c, struct gw_buf *out);
};

extern const struct mock_api mock_openai_chat;
extern const struct mock_api mock_openai_embeddings;
extern const struct mock_api mock_openai_responses;
extern const struct mock_api mock_anthropic_messages;
extern const struct mock_api mock_bedrock_converse;
extern const struct mock_api mock_bedrock_converse_stream;
extern const struct mock_api mock_gemini_generate;
extern const struct mock_api mock_gemini_stream;
extern const struct mock_api mock_gemini_embed;
extern const struct mock_api mock_gemini_batch_embed;
extern const struct mock_api mock_ollama_chat;
extern const struct mock_api mock_ollama_embed;
extern const struct mock_api mock_openai_transcriptions;
extern const struct mock_api mock_openai_translations;
extern const struct mock_api mock_openai_speech;
extern const struct mock_api mock_openai_images_generations;
extern const struct mock_api mock_openai_images_edits;
/* The 1x1 PNG every mock image is (media.c), for GET /v1/mock/images/... */
extern const unsigned char mock_png[];
extern const size_t mock_png_len;

/* What the request contained, in API-neutral terms, for the usage log's
 * "seen" object (so tests can check a gateway's translation). */
struct mock_seen {
    int messages; /* conversation turns, system messages not counted */
    int system;   /* a system prompt (field or system/developer message) */
    int images;
    int files; /* documents and audio input (file, input_file, document, ...) */
    int tool_results;
    int tool_calls;       /* tool calls in earlier assistant turns */
    int tail_tool_result; /* the last message (or input item) carries tool results */
    int tools;            /* tool definitions */
    long long max_tokens; /* -1: not given */
    int has_temperature;
    double temperature;
};

struct mock_call {
    struct gw_http_req *req;
    struct mock_thread *th;
    const struct mock_api *api;
    struct gw_pool *pool;

    /* what was asked */
    const char *model;        /* without the "#fault" suffix */
    const char *fault_spec;   /* the SPEC in force, "" when none */
    const char *x_request_id; /* NULL when absent */
    uint64_t conn_id;         /* the client connection, for reuse checks */
    struct mock_fault f;
    uint64_t n;
    long long created; /* unix seconds */
    int stream;
    int include_usage; /* OpenAI stream_options.include_usage */
    /* service tier and log probabilities (logprobs.c) */
    const char *tier;   /* the tier that serves, in the API's word; NULL: not said */
    int logprobs;       /* asked for */
    int top_logprobs;   /* alternatives per token */
    int lp_from, lp_to; /* Gemini: the tokens of the chunk being closed */
    int input_tokens;   /* total, cached ones included */
    int cache_read;     /* portions of input_tokens */
    int cache_write;    /* 5-minute cache writes */
    int cache_write_1h;
    struct mock_seen seen;
    int err_status;          /* status for a parse/auth error; 0: 400 */
    const char *path_model;  /* the model from the URL (decoded), or NULL */
    int auth_flags;          /* what auth() saw, for log_extra */
    void *api_state;         /* the API's own parsed request, pool memory */
    const char *stream_type; /* content type of this call's stream */
    const char *body_type;   /* content type of a complete 200 answer; NULL: JSON */
    int sse;                 /* the stream is SSE: multiline/blank_events apply */

    /* the answer */
    enum mock_finish finish;
    int reasoning; /* reasoning tokens before the answer */
    int ntext;     /* text tokens in the answer */
    int ntools;
    struct mock_tool tools[MOCK_MAX_PARALLEL];
    int delay_ms;
    const char *json_text; /* structured output: the answer's whole text (structured.c) */
    enum { MOCK_CITE_NONE, MOCK_CITE_WEB, MOCK_CITE_DOCUMENT } cite; /* citations asked for */

    /* embeddings */
    int dimensions;
    int base64;
    int ninputs;
    uint64_t *hashes;

    /* progress */
    int status;       /* status line sent; 0 before */
    int emitted;      /* content chunks written */
    int billed;       /* output tokens those chunks are worth */
    int frame_tokens; /* output tokens of the frame being built (1) */
    int phase;        /* the API's frame cursor */
    int idx;
    int seq; /* events rendered (Responses sequence_number) */
    size_t off;
    unsigned malformed_sent : 1;
    unsigned tail_done : 1;  /* the tail_ms wait after the last event is over */
    unsigned have_frame : 1; /* frame holds an unsent frame */
    unsigned delayed : 1;    /* the chunk delay for frame has elapsed */
    unsigned watching : 1;   /* close callback registered */
    enum mock_frame frame_kind;
    struct gw_buf frame;
    char *prefix; /* per-stream constant start of each chunk */
    size_t prefix_len;
    struct event *timer;
    enum mock_wait waiting;
};

/* Starts a call of the given API (call.c). Takes over req. For APIs whose
 * model is in the URL, model/model_len is its still percent-encoded text. */
void mock_call_start(struct mock_thread *th, struct gw_http_req *req, const struct mock_api *api,
                     const char *model, size_t model_len);

/* Output tokens of the answer: reasoning tokens plus text tokens or tool
 * argument pieces (7 bytes each). */
int mock_call_output_tokens(const struct mock_call *c);
/* interleave: the next call, from c->idx on in turn, with argument bytes
 * left to stream; -1 when none has. */
int mock_next_interleaved(const struct mock_call *c);
/* Tokens a tool call's arguments are worth (their 7-byte pieces). */
int mock_tool_tokens(const struct mock_tool *t);
/* Reasoning tokens among the output billed so far (they come first). */
int mock_call_reasoning_billed(const struct mock_call *c);
/* Sets ntext, reasoning and finish from the fault and the request's output
 * limit (max < 0: none). Tools, picked afterwards, override the finish. */
void mock_plan_answer(struct mock_call *c, long long max);
/* Reads obj[key] as a number into the seen temperature; -1 when present
 * but not a number. */
int mock_seen_temperature(struct mock_call *c, json_t *obj, const char *key);

/* ---- helpers (fault.c) ---- */

/* Whitespace-separated words in s. */
int mock_count_words(const char *s, size_t len);
/* Words in every text part under v: a string, an array of parts, a part's
 * "text", or a block's nested "content" (tool results). */
int mock_count_text(json_t *v);
/* Arguments for a tool whose JSON schema is schema (may be NULL), as compact
 * ASCII-only JSON in pool memory, so 7-byte pieces never split a UTF-8
 * sequence. NULL on allocation failure. */
char *mock_tool_args(struct gw_pool *pool, json_t *schema, size_t *len);
/* Appends the text tokens from..to-1 (0-based) of the answer "tok1 tok2
 * ...". Plain ASCII: it needs no JSON escaping. */
int mock_append_tokens(struct gw_buf *b, int from, int to) __attribute__((warn_unused_result));
/* The log probabilities of answer tokens [from, to) (logprobs.c), each
 * with c->top_logprobs alternatives, deterministic: OpenAI chat's
 * [{token, logprob, bytes, top_logprobs}] (the content array) or Gemini's
 * logprobsResult object. */
int mock_append_logprobs_openai(struct gw_buf *b, const struct mock_call *c, int from, int to)
    __attribute__((warn_unused_result));
int mock_append_logprobs_gemini(struct gw_buf *b, const struct mock_call *c, int from, int to)
    __attribute__((warn_unused_result));

/* Structured output and citations (structured.c): mock_plan_json makes the
 * answer the smallest JSON object with the schema's required keys (after
 * mock_plan_answer); mock_append_answer appends text tokens from..to, or
 * that JSON (escaped, no quotes) as token 0; mock_citation_json is the
 * citation object (Anthropic's shape) for c->cite, or NULL. */
void mock_plan_json(struct mock_call *c, const json_t *schema);
int mock_append_answer(struct gw_buf *b, const struct mock_call *c, int from, int to)
    __attribute__((warn_unused_result));
const char *mock_citation_json(const struct mock_call *c);
/* The gateway's own calls (roles.c): when the system prompt (system, or
 * when NULL the first system/developer message of the conversation, a
 * message list) starts with "llmgw prompt-injection classifier" or "llmgw
 * answer judge", the answer becomes the verdict or the score the markers in
 * the request's text ask for, as one text token (after mock_plan_answer
 * and mock_plan_json; docs/mockprovider.md, Guardrails). */
void mock_plan_role(struct mock_call *c, json_t *system, json_t *conversation);
/* The same for the reasoning text "reason1 reason2 ...". */
int mock_append_reasoning(struct gw_buf *b, int from, int to) __attribute__((warn_unused_result));
/* The signature every mock thinking block carries (base64 of
 * "mock-signature"). */
#define MOCK_SIGNATURE "bW9jay1zaWduYXR1cmU="
/* Reads one entry of a request's tools array: 0 when it is not a tool the
 * mock can call (a server tool, say), else 1 with its name and schema. */
typedef int (*mock_tool_get_fn)(json_t *tool, const char **name, json_t **schema);
/* A message (or input item) read: whether it carried tool results, given
 * c->seen.tool_results before it (the last one read decides). */
void mock_seen_turn(struct mock_call *c, int results_before);
/* Fills c->tools: the tool named by tool_choice (named, may be NULL), else
 * the first one, or the first f.parallel ones. As a model does, it answers
 * with text instead when the conversation ends in tool results, unless
 * tool_choice forces a call (forced, or named) or parallel= asks for
 * calls. NULL or a 400 message. */
const char *mock_pick_tools(struct mock_call *c, json_t *tools, const char *named, int forced,
                            mock_tool_get_fn get);
/* Reads an integer member in [lo, hi]. 1: found, 0: absent or null,
 * -1: present but not such an integer. */
int mock_json_int(json_t *obj, const char *key, long long lo, long long hi, long long *out);

/* Embeddings: a hash of one input, and the deterministic unit vector of
 * dims floats it gives (a JSON array, or base64 of little-endian float32s). */
uint64_t mock_embed_hash(const void *p, size_t len);
uint64_t mock_embed_hash_more(const void *p, size_t len, uint64_t h);
int mock_append_vector(struct gw_buf *b, int dims, uint64_t hash, int base64)
    __attribute__((warn_unused_result));
/* Standard base64 with padding of p[0..len), appended. 0 or a GW_E code. */
int mock_base64_append(struct gw_buf *b, const unsigned char *p, size_t len)
    __attribute__((warn_unused_result));
/* CRC-32 (IEEE 802.3, as zlib's crc32()), continuing from crc (0 to start). */
uint32_t mock_crc32(uint32_t crc, const void *p, size_t len);
/* Percent-decodes s[0..len) into pool memory. NULL when a %XX is invalid,
 * decodes to NUL, or on allocation failure. */
char *mock_url_decode(struct gw_pool *pool, const char *s, size_t len);
/* The value of name in a query string (not decoded; len in *vlen), or NULL. */
const char *mock_query_param(const char *query, const char *name, size_t *vlen);

/* Renders the error body for status in the API's shape, for errors outside
 * a call too (main.c). message NULL picks the provider's usual text (and,
 * for OpenAI, code) for status; otherwise the OpenAI code is code (NULL:
 * null). The Bedrock one also says its x-amzn-ErrorType through *type. */
int mock_openai_error_body(struct gw_buf *b, int status, const char *message, const char *code);
int mock_anthropic_error_body(struct gw_buf *b, int status, const char *message, uint64_t n);
/* Anthropic's stop_reason for the call (Bedrock's stopReason uses the same
 * words). */
const char *mock_anthropic_stop_reason(const struct mock_call *c);
int mock_bedrock_error_body(struct gw_buf *b, int status, const char *message, const char **type);
int mock_gemini_error_body(struct gw_buf *b, int status, const char *message, int retry_after);
int mock_ollama_error_body(struct gw_buf *b, int status, const char *message);
/* The OpenAI error of a call, with its x-request-id header (openai.c). */
int mock_openai_call_error(struct mock_call *c, struct gw_buf *b, int status, const char *message);

#endif
