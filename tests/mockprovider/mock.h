/*
 * Internal interface of llmgw-mockprovider (see main.c and
 * docs/mockprovider.md), shared by its five files:
 *
 *   main.c       command line, threads, signals, routing of simple endpoints
 *   call.c       one model call: body parsing common to both APIs, fault
 *                resolution, ttfb/hang, the streaming engine, the usage log
 *   fault.c      fault SPEC parsing and the deterministic-answer helpers
 *                (word counts, tool arguments, JSON string escaping)
 *   openai.c     OpenAI chat completions and embeddings wire format
 *   anthropic.c  Anthropic messages wire format
 *
 * A call is described once (struct mock_call) in API-neutral terms; each API
 * file only knows how to parse its request into that description and how to
 * render it: a complete body, the next SSE frame of a stream, an error body.
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
    int no_body;      /* a 200 whose body is empty */
    int multiline;    /* each SSE payload split over two data: lines */
    int blank_events; /* an empty event and a comment before each chunk */
    int tail_ms;      /* after the last event, wait before ending */
};

void mock_fault_clear(struct mock_fault *f);
/* Parses a comma-separated list of key=value (len bytes of spec). On
 * failure returns GW_EINVAL and writes a reason to err; *f is then
 * unspecified. */
int mock_fault_parse(const char *spec, size_t len, struct mock_fault *f, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* ---- process-wide state (immutable after start, except the counter) ---- */

struct mock_config {
    const char *host;
    int port;
    int threads;
    const char *usage_log;   /* NULL: no usage log */
    const char *fault_spec;  /* "" when none */
    struct mock_fault fault; /* fault_spec parsed */
    int chunks;
    int chunk_delay_ms;
};

struct mock_shared {
    const struct mock_config *cfg;
    int usage_fd;                 /* -1: no usage log; O_APPEND, shared */
    atomic_uint_fast64_t next_id; /* the <n> of chatcmpl-mock-<n> */
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
};

struct mock_call;

struct mock_api {
    const char *log_name;  /* "openai.chat", ... */
    const char *id_prefix; /* "chatcmpl-mock-", NULL: no id */
    int anthropic_errors;  /* error body shape */
    /* Reads the API's own fields (the model, stream flag and fault are
     * already in c). Returns NULL, or an error message for a 400. */
    const char *(*parse)(struct mock_call *c, json_t *root);
    /* Appends the complete non-streaming body. 0 or a GW_E code. */
    int (*body)(struct mock_call *c, struct gw_buf *out);
    /* Appends the next SSE frame and says what it is; MOCK_FRAME_END
     * appends nothing. NULL for APIs that do not stream. */
    enum mock_frame (*frame)(struct mock_call *c, struct gw_buf *out);
};

extern const struct mock_api mock_openai_chat;
extern const struct mock_api mock_openai_embeddings;
extern const struct mock_api mock_anthropic_messages;

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
    int input_tokens;  /* total, cached ones included */
    int cache_read;    /* portions of input_tokens */
    int cache_write;

    /* the answer */
    enum mock_finish finish;
    int ntext; /* text tokens in the answer */
    int ntools;
    struct mock_tool tools[MOCK_MAX_PARALLEL];
    int delay_ms;

    /* embeddings */
    int dimensions;
    int base64;
    int ninputs;
    uint64_t *hashes;

    /* progress */
    int status;  /* status line sent; 0 before */
    int emitted; /* content chunks written */
    int phase;   /* the API's frame cursor */
    int idx;
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

/* Starts a call of the given API (call.c). Takes over req. */
void mock_call_start(struct mock_thread *th, struct gw_http_req *req, const struct mock_api *api);

/* Output tokens of the answer (text tokens, or argument pieces). */
int mock_call_output_tokens(const struct mock_call *c);

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
/* Reads one entry of a request's tools array: 0 when it is not a tool the
 * mock can call (a server tool, say), else 1 with its name and schema. */
typedef int (*mock_tool_get_fn)(json_t *tool, const char **name, json_t **schema);
/* Fills c->tools: the tool named by tool_choice (named, may be NULL), else
 * the first one, or the first f.parallel ones. NULL or a 400 message. */
const char *mock_pick_tools(struct mock_call *c, json_t *tools, const char *named,
                            mock_tool_get_fn get);
/* Reads an integer member in [lo, hi]. 1: found, 0: absent or null,
 * -1: present but not such an integer. */
int mock_json_int(json_t *obj, const char *key, long long lo, long long hi, long long *out);

/* Renders the error body for status in the API's shape (openai.c /
 * anthropic.c). message NULL picks the provider's usual text (and, for
 * OpenAI, code) for status; otherwise the OpenAI code is code (NULL: null). */
int mock_openai_error_body(struct gw_buf *b, int status, const char *message, const char *code);
int mock_anthropic_error_body(struct gw_buf *b, int status, const char *message, uint64_t n);

#endif
