/*
 * The exchange's own header: one request's state, its phases, and what the
 * phase files hand each other. Not for use outside dataplane/exchange/.
 *
 * Where a request is lives in one variable, x->phase, written only by
 * x_set_phase (admit.c), which refuses a transition the pipeline does not
 * have. How the current attempt ended is its verdict; how the request
 * ended (for its log line and metrics) is outcome and error_class, set
 * once by x_set_failure.
 */
#ifndef DP_EXCHANGE_INT_H
#define DP_EXCHANGE_INT_H

#include <event2/util.h>
#include <jansson.h>
#include <stdint.h>

#include "canon.h"
#include "dp_decide.h"
#include "dp_driver.h"
#include "dp_exchange.h"
#include "dp_facade.h"
#include "dp_router.h"
#include "gw_buf.h"
#include "gw_trace.h"
#include "gw_upc.h"

/* The failover budget: the whole pre-content phase, every attempt and
 * backoff included. A request may set its own (header), within bounds. */
#define X_DEFAULT_BUDGET_MS 120000L
#define X_MAX_BUDGET_MS DP_MAX_FALLBACK_TIMEOUT_MS
/* The body member that sets the failover budget (the header's twin). */
#define X_BODY_BUDGET "fallback_timeout_ms"
/* Header values the router keys on (session, affinity) are bounded. */
#define X_MAX_KEY_HEADER 128
/* Every failed attempt of a request is remembered for its error answer. */
#define X_MAX_FAILED (DP_MAX_CANDIDATES * (DP_RETRIES_MIDDLE + 1) + DP_RETRIES_LAST)

struct event;
struct gw_sse_event;
struct dp_metrics_target;
struct dp_limits_hold;
struct dp_cache_meta;
struct xcache;
struct xguard;
struct xjudge;
struct xsub;
struct xmedia;

enum xkind { KIND_CHAT, KIND_EMBED, KIND_MEDIA };

/* The phases, in the order a request moves through them (dp_exchange.h). */
enum xphase {
    XP_ADMIT,   /* the body and headers are being read */
    XP_PLAN,    /* the router orders the candidates */
    XP_GUARD,   /* the prompt-injection guard reads the request (may wait for its classifier) */
    XP_RESERVE, /* the limits reserve the request's need (may wait for a grant) */
    XP_CACHE,   /* the response cache is looked up (may wait for an identical request) */
    XP_ATTEMPT, /* an upstream transfer in flight, before its first content */
    XP_ANSWER,  /* the transfer in flight owns the answer (the bright line is crossed) */
    XP_WAIT,    /* between attempts: a backoff, or the next candidate's turn */
    XP_DONE,    /* ended; the exchange is being freed */
};

/* How an attempt ended, for its log line and its breaker. */
enum verdict {
    V_NONE,     /* still running */
    V_OK,       /* the whole answer reached the client */
    V_FAILED,   /* failed before its first content: the loop decides */
    V_BROKE,    /* failed after its first content: an in-band error */
    V_CANCELED, /* the client left, or the gateway stopped */
};

/* What a request keeps of its plan once it has candidates: the plan's skip
 * records and message (most of its 6 KiB) serve only a no-candidate reply,
 * so they live on the heap while planning and no longer; the candidates
 * are kept, as many as there are. */
struct choice {
    const struct dp_route *route;
    struct dp_candidate *cands; /* malloc'd, ncands */
    size_t ncands;
    const char *scored_by;            /* dp_plan's: for the request's line */
    uint8_t order[DP_MAX_CANDIDATES]; /* dp_plan's order, norder long */
    uint8_t norder;
};

/* A failed attempt, remembered for the request's error answer. */
struct failed_attempt {
    const char *provider;
    const char *model;
    enum canon_failure failure;
    int status;  /* the upstream's HTTP status, or 0 */
    int refused; /* the driver refused to build it: nothing was sent */
};

/* What a request keeps of its failures for its error answer: allocated at
 * its first (x_fails), since most requests have none. */
struct xfail {
    struct failed_attempt failed[X_MAX_FAILED];
    size_t nfailed;
    struct canon_err rerr;     /* the last refusal, when the last attempt was one */
    char fail_msg[384];        /* the current attempt's failure */
    char last_msg[384];        /* the last failed attempt's message */
    char last_retry_after[32]; /* and its Retry-After */
};

/* The request's place in its trace (trace.c): all zero when tracing is
 * off; on, the ids are drawn (and the caller's traceparent read) at the
 * start, and spans are written only when sampled. */
struct xtrace {
    uint8_t on, sampled, has_parent;
    uint8_t trace_id[16];
    uint8_t span_id[8];    /* the request's span */
    uint8_t parent_id[8];  /* the caller's span (has_parent) */
    uint8_t phase_id[8];   /* the current phase's span */
    uint8_t attempt_id[8]; /* the current attempt's span */
    char traceparent[56];  /* the current attempt's, sent upstream */
    int64_t wall_off_ns;   /* wall-clock ns = monotonic us * 1000 + this */
    int64_t phase_from;    /* the current phase's start (monotonic us) */
    int64_t last_end;      /* the last attempt span's end */
    long long max_tokens;  /* the client's, kept for the attempts' spans (-1: none) */
    char *tracestate;      /* the caller's, when valid (malloc'd); else NULL */
};

struct dp_exchange {
    struct dp_xloop *l;
    struct dp_exchange *prev, *next;
    enum xkind kind;
    enum xphase phase;       /* x_set_phase only */
    struct gw_http_req *req; /* NULL once the client side has ended */
    struct dp_snapshot *snap;
    const struct dp_key *key;
    char request_id[160];
    /* Attempt ids are the request id and the attempt's number; when the
     * client chose the id (two clients, or one on purpose, may send the
     * same X-Request-Id, and the ledger keys rows by attempt id) a random
     * salt between them makes it unique. 0: none. */
    unsigned id_salt;
    char cost_currency[4]; /* the currency of cost_total ("" before the first priced attempt) */
    char path[64];
    /* The request's labels, kept for its records: each "" when absent,
     * else in one exact-size block (labels). */
    const char *selector; /* the client's, cut to DP_MAX_MODEL_ID */
    const char *session;  /* X-LLMGW-Session-Id: stickiness */
    const char *agent;    /* X-LLMGW-Agent: ledger attribution */
    const char *purpose;  /* X-LLMGW-Purpose */
    char *labels;
    const char *affinity;       /* X-LLMGW-Affinity-Key or NULL; the plan only reads it */
    const struct dp_facade *fc; /* chat */
    struct canon_req *creq;     /* chat; NULL once a stream has started */
    json_t *eroot;              /* embeddings: the body; ereq points into it */
    struct canon_embed_req ereq;
    struct xmedia *media; /* media (media.c): the request and its answer's state */
    int client_stream;
    int include_usage; /* the client asked for usage in its stream (canon_req's, kept) */

    /* the loop */
    struct choice plan;
    struct dp_limits_hold *hold; /* what the request reserved of its limits (docs/budgets.md) */
    size_t ci;                   /* the current candidate */
    int tries;                   /* attempts on it so far */
    int nattempts, nretries, nfailovers;
    int64_t deadline_us; /* the failover budget's end */
    long budget_ms;      /* the header's, then (set_budget) the one in force */
    long body_budget_ms; /* fallback_timeout_ms of the body; 0: absent, -1: null */
    char *relay_body;    /* malloc'd: the client's body without it, for a relay */
    size_t relay_body_len;
    int budget_out;
    int budget_timer;    /* the watchdog is set for the budget's end, not the provider's */
    struct xfail *fails; /* NULL until the first failed or refused attempt */
    struct event *timer; /* XP_ATTEMPT, XP_ANSWER: the watchdog; XP_WAIT: the next attempt */
    int64_t wd_at;       /* the watchdog is set to fire then (0: not set) */
    int64_t wd_due;      /* the watchdog's deadline, which may be later */
    int64_t end_by_us;   /* the attempt's total deadline (route max_duration_ms) */

    /* the current attempt */
    const struct dp_provider *prov;
    const char *model; /* the snapshot's, the request's (an exact selector), or model_own */
    char *model_own;   /* malloc'd: the model kept when the request's document went */
    /* The pass-through (dp_driver.h): the driver whose relay this attempt
     * uses (the client's body went upstream; the answer's bytes come back
     * as they were), or NULL: translated. */
    const struct dp_driver *relay;
    struct gw_buf relay_held; /* a relayed stream's usage event, for its end */
    long long out_cap;        /* > 0: the output cap a worst-case reservation imposed */
    int64_t est_input;        /* the request's estimated input tokens (reserve) */
    struct drv_request dreq;
    struct drv_parser *parser;
    struct gw_upc_xfer *xf; /* the attempt's upstream transfer */
    int running;            /* xf is in flight (its on_done has not run) */
    int probe;              /* admitted as a half-open breaker's probe */
    int fleet_probe;        /* admitted as the fleet view's probe (dp_fleet) */
    int status;             /* upstream HTTP status */
    char retry_after[32];
    const char *hdr_tier; /* the served tier from dp_driver.tier_header (canonical), or NULL */
    struct gw_buf coll;   /* error bodies; embeddings answers */
    int paused;
    int nevents;   /* events the driver emitted */
    int finishing; /* inside the driver's finish() after a clean end */
    int terminal;  /* DONE or ERROR seen */
    enum verdict verdict;
    enum canon_failure failure; /* V_FAILED, V_BROKE */
    int fail_status;
    int64_t ta0, t_first_byte, t_first_content;
    int64_t at_ms;        /* the attempt's start, wall clock (its ledger row) */
    char attempt_id[176]; /* the ledger's key, sent upstream */
    int priced;           /* this attempt's cost is computed (at its usage's end) */
    int64_t out_bytes;    /* content bytes the provider sent in this attempt */
    int usage_estimated;  /* this attempt's usage is partly the gateway's estimate */
    struct fc_bill bill;  /* this attempt's ledger id and cost, for the client */
    const char *mmodel;   /* the model as a metric label: configured, or "other" */
    char *answer_model;   /* the model the provider said answered (malloc'd), or NULL */
    struct canon_usage usage;
    enum canon_stop stop;
    int have_stop;

    /* the answer */
    struct canon_sink sink;
    void *fstate; /* facade stream encoder, created at the first event */
    struct canon_acc acc;
    struct gw_buf out;  /* client bytes not yet written */
    struct gw_buf logb; /* a log line's members */
    struct gw_buf logs; /* whole lines held back, to go out with the request's */
    int committed;      /* a content event arrived: the answer is this attempt's */
    int64_t t0, t_client_first, t_client_end;
    /* For the overhead metric: time spent waiting on upstream attempts and
     * on retry backoffs, and when the current backoff began. */
    int64_t upstream_us, backoff_us, wait_from;
    int stream_counted; /* counted in llmgw_open_streams */
    int64_t cost_total; /* every attempt's cost so far; valid while cost_known */
    int cost_known;
    int final_status;
    const char *outcome;
    const char *error_class;

    /* the response cache (cache.c) */
    struct xcache *cache; /* NULL: the request does not use it */
    int cache_hit;        /* the answer is a cached one: no upstream call */

    /* the guard and the judge (guard.c, judge.c) */
    int internal;         /* the gateway's own call (subcall.c): neither applies */
    struct xguard *guard; /* while the classifier is asked, else NULL */
    struct xjudge *judge; /* sampled for the judge, else NULL */

    struct xtrace tr; /* trace.c */
};

/* admit.c: the lifetime */
void x_set_phase(struct dp_exchange *x, enum xphase p);
int x_in_flight(const struct dp_exchange *x); /* XP_ATTEMPT or XP_ANSWER */
void x_end(struct dp_exchange *x);            /* the request's line, then freed */
void x_free(struct dp_exchange *x);           /* freed: the line was written, or not wanted */
void x_set_failure(struct dp_exchange *x, const char *outcome, const char *cls);
/* A refusal before any attempt (a bad header, no model): the facade's
 * error answer, its status and class kept for the request's span. */
void x_refuse(struct dp_exchange *x, int status, const char *param, const char *code,
              const char *msg);

/* plan.c */
/* The client's selector (x->selector is its copy for the ledger, cut to
 * the longest model id): nonzero when answered (no candidate); the caller
 * frees x. */
int x_plan(struct dp_exchange *x, const char *selector, const struct dp_needs *n);
void x_reserve(struct dp_exchange *x);

/* guard.c: after the plan, before the reservation; goes on to x_reserve
 * or ends the request (blocked). */
void x_guard(struct dp_exchange *x);
void x_guard_free(struct dp_exchange *x);

/* judge.c: an answer longer than this is not judged */
#define X_JUDGE_MAX_ANSWER (64u << 10)
void x_judge_sample(struct dp_exchange *x); /* at the guard: this request is judged, or not */
int x_judge_accumulates(const struct dp_exchange *x);
void x_judge_give_up(struct dp_exchange *x);
void x_judge_submit(struct dp_exchange *x); /* at its end: a whole answer goes to the queue */
void x_judge_free(struct dp_exchange *x);
void x_judges_shutdown(struct dp_xloop *l);

/* subcall.c: the gateway's own calls */
struct xsub_call {
    const char *route;
    const char *request_id;
    const char *purpose; /* "guard", "judge": the ledger's purpose */
    const char *system;
    const char *user;
    long max_tokens;
    long timeout_ms;         /* the whole call's budget */
    const char *traceparent; /* the span it is made for (its trace's child), or NULL */
};
struct xsub_result {
    int ok;          /* content holds the answer's text */
    int timed_out;   /* the budget ran out */
    int status;      /* the answer's HTTP status (0: none) */
    char *content;   /* the cb's to read, freed after it */
    const char *why; /* not ok: what went wrong (no text of the call) */
};
typedef void (*xsub_cb)(void *arg, const struct xsub_result *r);
/* Starts the call; cb runs once, on a later turn of the loop, unless
 * x_sub_cancel comes first. snap is borrowed (the call takes a reference).
 * NULL when out of memory. */
struct xsub *x_sub_start(struct dp_xloop *l, struct dp_snapshot *snap, const struct dp_key *key,
                         const struct xsub_call *c, xsub_cb cb, void *arg);
void x_sub_cancel(struct xsub *s);

/* admit.c: the common start once a request is parsed (plan, guard, ...);
 * takes over x. */
void x_route_and_start(struct dp_exchange *x, const char *selector, const struct dp_needs *n);

/* media.c (docs/media.md) */
/* A media request's state: takes over store (fc_media's parts) and root
 * (its JSON), which r points into. NULL when out of memory. */
struct xmedia *x_media_new(const struct canon_media_req *r, void *store, json_t *root);
void x_media_release(struct xmedia *m); /* NULL: nothing */
void x_media_free(struct dp_exchange *x);
const char *x_media_selector(const struct dp_exchange *x);
unsigned x_media_cap(const struct dp_exchange *x);
int x_media_build(struct dp_exchange *x, const struct drv_target *t, struct canon_err *err);
void x_media_header(struct dp_exchange *x, const char *line, size_t len);
size_t x_media_body(struct dp_exchange *x, const char *buf, size_t len);
void x_media_done(struct dp_exchange *x);
void x_media_broke(struct dp_exchange *x, const struct canon_event *ev);
/* The reservation's bounds (plan.c) and the attempt's price (record.c). */
struct dp_limits_ask;
void x_media_ask(struct dp_exchange *x, struct dp_limits_ask *ask, int64_t *costs);
int x_media_cost(const struct dp_exchange *x, const struct dp_price *p, int64_t *cost);
void x_media_units(const struct dp_exchange *x, int64_t *audio_ms, int64_t *characters,
                   int64_t *images);
const char *x_media_api(const struct dp_exchange *x);
const char *x_media_operation(const struct dp_exchange *x);

/* cache.c */
void x_cache_phase(struct dp_exchange *x);
void x_cache_timeout(struct dp_exchange *x);
void x_cache_store(struct dp_exchange *x);
int x_cache_accumulates(const struct dp_exchange *x);
void x_cache_give_up_store(struct dp_exchange *x, int too_large);
const struct dp_cache_meta *x_cache_meta(const struct dp_exchange *x); /* a hit's, or NULL */
void x_cache_free(struct dp_exchange *x);

/* attempt.c */
void x_start_attempt(struct dp_exchange *x);
/* The attempt's target is candidate c (its provider, model, metric label). */
void x_set_target(struct dp_exchange *x, const struct dp_candidate *c);
/* The attempt's id (x->attempt_id) for attempt x->nattempts + 1. */
void x_name_attempt(struct dp_exchange *x);
void x_attempt_over(struct dp_exchange *x);
void x_release_upstream(struct dp_exchange *x);
void x_on_timer(evutil_socket_t fd, short what, void *arg);
/* The attempt in flight is watched for its idle timeout from now (the
 * answer started: the failover budget no longer bounds it). */
void x_watch_idle(struct dp_exchange *x);

/* answer.c */
int x_on_event(void *arg, const struct canon_event *ev);
int x_on_raw(void *arg, const struct gw_sse_event *ev);
void x_attempt_failed(struct dp_exchange *x, enum canon_failure f, int status, const char *msg);
void x_answer_broke(struct dp_exchange *x, const struct canon_event *ev);
void x_internal_failure(struct dp_exchange *x, const char *msg);
void x_reply_error(struct dp_exchange *x, int status, const char *param, const char *code,
                   const char *msg);
void x_give_up(struct dp_exchange *x);
void x_finish_embed(struct dp_exchange *x);
void x_commit(struct dp_exchange *x); /* a whole answer's bright line */
/* A streamed answer's bright line with its own Content-Type (media): the
 * head goes out. GW_OK or GW_ECLOSED. */
int x_commit_stream_as(struct dp_exchange *x, const char *content_type);
/* The stream's head could not go out at the bright line: the client has
 * gone; the request ends as canceled. */
void x_gone_at_commit(struct dp_exchange *x);
/* x_answer_whole with the provider's Content-Type. */
void x_answer_whole_as(struct dp_exchange *x, const char *content_type, const char *body,
                       size_t len);
/* A whole answer's body goes out (embeddings, a cached one): V_OK, with
 * the target's and the cost's headers. */
void x_answer_whole(struct dp_exchange *x, const char *body, size_t len);
int x_flush_out(struct dp_exchange *x);
void x_finish_stream(struct dp_exchange *x, int rc);
const struct dp_facade *x_facade(const struct dp_exchange *x);

/* trace.c (docs/observability.md, "Traces") */
void x_trace_start(struct dp_exchange *x); /* at the start: the caller's context, the ids */
void x_trace_phase(struct dp_exchange *x, enum xphase to); /* x_set_phase, when sampled */
/* The traceparent of the current phase's span (a call the gateway makes
 * for it: the guard's classifier) into out: 1, or 0 when tracing is off. */
int x_trace_phase_parent(const struct dp_exchange *x, char out[GW_TRACEPARENT_LEN + 1]);
/* The same for the request's span (its judge's call, made after it ended). */
int x_trace_request_parent(const struct dp_exchange *x, char out[GW_TRACEPARENT_LEN + 1]);
/* A new attempt's span id; its traceparent for the upstream request (held
 * by x), or NULL when tracing is off. */
const char *x_trace_attempt_begin(struct dp_exchange *x);
const char *x_trace_tracestate(const struct dp_exchange *x); /* the caller's, or NULL */
void x_trace_attempt(struct dp_exchange *x, const char *failure_class, int64_t end);
void x_trace_request(struct dp_exchange *x); /* at the end */

/* record.c */
struct xfail *x_fails(struct dp_exchange *x); /* NULL: out of memory */
void x_price(struct dp_exchange *x);
void x_record_attempt(struct dp_exchange *x, int64_t end);
void x_record_hit(struct dp_exchange *x); /* a cached answer's ledger row and charges */
void x_remember(struct dp_exchange *x, enum canon_failure f, int status, int refused);
int x_attempts_json(const struct dp_exchange *x, struct gw_buf *o);
void x_add_cost_headers(struct gw_http_req *req, struct dp_exchange *x);
void x_log_request(struct dp_exchange *x);
void x_metrics_target(const struct dp_exchange *x, struct dp_metrics_target *t);
/* The GenAI operation: "chat", "embeddings", or a media one. */
const char *x_operation(const struct dp_exchange *x);

#endif
