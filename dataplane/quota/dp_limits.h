/*
 * dp_limits: budgets and rate limits on the data plane (docs/budgets.md).
 *
 * A limit (dp_snapshot.h, struct dp_limit) caps one metric of a key, team
 * or project per UTC window; it holds across every replica because the
 * control plane is its only authority. This module is the replica's side:
 * per (limit, window) an account holds a lease, a slice of the window's
 * remaining allowance that the control plane granted this replica. A
 * request reserves its estimated (or worst-case) need from the leases of
 * every limit that applies to it before its first upstream attempt, and at
 * its end gives back what it reserved but did not use; what it used
 * travels as charges in its ledger rows, which the control plane applies
 * to the window exactly once. When a lease runs short the account asks for
 * another (LeaseRequest on the Report stream) and the request waits for
 * the grant on its worker's loop, at most DP_LIMITS_WAIT_MS; without an
 * answer, or with no stream for longer than that, each limit's offline
 * policy decides: fail_open lets the request through unmetered by leases
 * (its charges still count), fail_closed refuses it as "unallocated".
 *
 * A lease is kept here until the control plane has this replica's final
 * report on it (a LeaseRequest with want 0, answered like a grant): what
 * was given back and charged under it, as totals, sent again on every new
 * stream until answered. A lease's life is measured on this replica's
 * monotonic clock from when its request was sent (LeaseGrant.ttl_ms).
 *
 * Threads: process-wide state under one mutex. The control-plane client's
 * thread calls the first group of functions, workers the second. A waiting
 * request is woken with event_active on its worker's event_base (libevent
 * must be thread-enabled: evthread_use_pthreads). Lock order: this
 * module's mutex, then an event_base's lock; nothing here is called with
 * an event_base's lock held.
 */
#ifndef DP_LIMITS_H
#define DP_LIMITS_H

#include <stddef.h>
#include <stdint.h>

#include "dp_ledger.h"
#include "dp_snapshot.h"
#include "llmgw/v1/control.pb-c.h"

struct event_base;
struct canon_req;
struct canon_usage;
struct dp_candidate;
struct dp_price;
struct gw_buf;

/* The longest a request waits for a grant (or for the stream to come back)
 * before the offline policy decides. */
#define DP_LIMITS_WAIT_MS 2000

/* ---- the control-plane client's side ---------------------------------- */

/* Storage a ReportMessage filled by dp_limits_next_out points into; the
 * caller owns it and keeps it until the message is packed. */
struct dp_limits_out {
    Llmgw__V1__LeaseRequest request;
    char limit_id[64];
    char lease_id[40];
};

/* The next message to send: a report on a lease (first), or a request
 * for one; both are LeaseRequests. Fills m's body (body_case and the
 * member; not replica_id) with pointers into st and returns 1, or returns
 * 0 when there is nothing to send. It also does the periodic work (leases
 * renewed before they expire, idle ones given back, ended windows
 * forgotten): call it whenever notified and about once a second while the
 * Report stream is up. */
int dp_limits_next_out(Llmgw__V1__ReportMessage *m, struct dp_limits_out *st);

/* Lease reports not yet answered (at shutdown: wait for them). */
size_t dp_limits_pending(void);

/* fn(arg) is called (from any thread, without this module's lock held)
 * when there is something to send. NULL: none. */
void dp_limits_set_notify(void (*fn)(void *), void *arg);

/* A LeaseGrant from a ReportReply. */
void dp_limits_on_grant(const Llmgw__V1__LeaseGrant *g);

/* The Report stream is up (1) or lost (0). Call with 0 at start when a
 * control plane is configured (requests then wait up to DP_LIMITS_WAIT_MS
 * for the stream rather than meet the offline policy at once). Lease
 * requests in flight when the stream is lost are sent again once it is
 * back; their requests keep waiting until their own deadline. */
void dp_limits_on_stream(int up);

/* Gives back every unreserved balance (at shutdown): every lease is
 * retired, its final report queued, and the client notified. */
void dp_limits_release_all(void);

/* ---- the request path ------------------------------------------------- */

/* What the reserve step needs to know of a request. */
struct dp_limits_ask {
    const struct dp_snapshot *snap;
    const struct dp_key *key; /* NULL: no key, no limits */
    const struct dp_candidate *cands;
    size_t ncands;
    /* ncands flags, zeroed by the caller: set for each candidate that a
     * cost limit refusing unpriced targets (the default) cannot price; the
     * caller drops them. */
    unsigned char *drop;
    int embeddings;
    /* Media (docs/media.md): ncands upper bounds on what the request may
     * cost on each candidate (-1: it cannot be priced), which cost limits
     * reserve; token limits reserve max_input_tokens + max_tokens. NULL for
     * chat and embeddings. */
    const int64_t *media_cost;
    int64_t est_input_tokens;     /* an estimate of the input */
    int64_t max_input_tokens;     /* an upper bound on it (dp_limits_input_bound) */
    int64_t max_tokens;           /* the request's output cap; 0 when it set none */
    const char *max_tokens_param; /* its name in the client's terms */
    int64_t reasoning_budget;     /* its thinking budget in tokens; 0 none */
    /* Cache writes the request asks for (DP_LIMITS_CACHE_5M, _1H: see
     * dp_limits_cache_marks): a cost limit refusing unpriced targets drops
     * candidates with no price for them. */
    int cache_marks;
    /* Set by dp_limits_reserve (when not NULL): the output cap a
     * worst_case limit was sized with, 0 when none applies. The caller
     * sends it upstream as the request's max tokens, so what the provider
     * may answer is what was reserved. */
    int64_t *out_cap;
};

#define DP_LIMITS_CACHE_5M 1
#define DP_LIMITS_CACHE_1H 2
/* The cache writes a chat request marks (cache_control on its system,
 * messages or tools): DP_LIMITS_CACHE_5M | DP_LIMITS_CACHE_1H. */
int dp_limits_cache_marks(const struct canon_req *r);

/* Why a request is refused (the error body's "limit" member, the status,
 * the code and Retry-After). */
struct dp_limits_refusal {
    int status;        /* 402 money, 429 rate, 400 a request that cannot be bounded, 500 */
    const char *type;  /* the error body's type */
    const char *code;  /* budget_exceeded, rate_limited, budget_unallocated,
                          budget_not_configured, budget_unpriced, max_tokens_required */
    const char *param; /* 400: the field */
    char message[400];
    int has_limit; /* the fields below describe the limit */
    char limit_id[64];
    char scope[129];
    enum dp_limit_scope scope_kind;
    enum dp_limit_metric metric;
    int has_period; /* never_configured names no period */
    enum dp_limit_period period;
    int64_t amount, spent, remaining; /* -1: not known */
    char currency[4];
    const char *state;     /* "depleted", "unallocated", "never_configured", "unpriced" */
    int64_t retry_after_s; /* 0: do not say */
};

struct dp_limits_hold;

enum dp_limits_verdict {
    DP_LIMITS_GO,      /* reserved (or no limit applies): dispatch */
    DP_LIMITS_WAIT,    /* waiting for grants: cb will say */
    DP_LIMITS_REFUSED, /* *r says why; nothing is held */
};

/* Called once on the worker's loop when a waiting reservation is decided:
 * r NULL to dispatch, else why it was refused (valid during the call). The
 * hold stays the caller's either way: end it with dp_limits_end. */
typedef void (*dp_limits_cb)(void *arg, const struct dp_limits_refusal *r);

/*
 * The reserve step, after routing planned the candidates and before the
 * first dispatch: every limit that applies to the key (its own, its
 * team's, its project's) reserves the request's need in its current
 * window, all or none. GO: *hold (NULL when no limit applies) is the
 * caller's until dp_limits_end. WAIT: *hold is set, and cb(arg, ...) runs
 * on base's loop when the reservation is decided (dp_limits_end before
 * that cancels it, and cb is not called). REFUSED: *r is filled, *hold is
 * NULL, nothing is held.
 */
enum dp_limits_verdict dp_limits_reserve(const struct dp_limits_ask *ask, struct event_base *base,
                                         dp_limits_cb cb, void *arg, struct dp_limits_hold **hold,
                                         struct dp_limits_refusal *r);

/*
 * What one attempt took from each limit the request holds, as ledger
 * charges, written to out (at most max); returns how many. requests count
 * 1 on attempt 1 only; tokens are the attempt's prompt and output tokens;
 * cost is the attempt's cost (has_cost, in USD), else, when its exact cost
 * is unknown (a class without a price, an overflow), an upper bound from
 * price, the attempt's price entry (dp_limits_cost_bound), and nothing
 * only when there is none to bound it with. The ledger's cost stays NULL
 * then: only the budget's charge is conservative. Zero amounts are left
 * out. Call it for every attempt's ledger row, before dp_limits_end. h may
 * be NULL (returns 0). Worker thread.
 */
size_t dp_limits_charges(struct dp_limits_hold *h, int attempt, const struct canon_usage *u,
                         int64_t cost, int has_cost, const struct dp_price *price,
                         struct dp_charge *out, size_t max);

/* An upper bound on what usage u costs at price p, for budgets only: each
 * class at its price, a class without one at p's dearest price of any
 * class, every output token at the dearer of output and reasoning;
 * saturated. -1 when p is NULL, not in USD, or has no price at all. */
int64_t dp_limits_cost_bound(const struct dp_price *p, const struct canon_usage *u);

/* The request is over: what each limit reserved and the charges did not
 * use goes back to its lease (or, the lease replaced, back to the control
 * plane); a reservation still waiting is canceled. Frees h (NULL: no-op). */
void dp_limits_end(struct dp_limits_hold *h);

/* The refusal's "limit" object as JSON text appended to out. */
int dp_limits_refusal_json(const struct dp_limits_refusal *r, struct gw_buf *out);

/* An upper bound on a chat request's input tokens: no token is shorter
 * than a byte, so the body's length bounds its text (and a document or
 * audio sent as bytes), each image adds at most DP_LIMITS_IMAGE_TOKENS,
 * and each document sent by URL, whose size the body does not show, at most
 * DP_LIMITS_URL_DOCUMENT_TOKENS (a 100-page PDF, the most Anthropic reads,
 * at some 3,000 tokens a page). */
#define DP_LIMITS_IMAGE_TOKENS 10000
#define DP_LIMITS_URL_DOCUMENT_TOKENS 300000
int64_t dp_limits_input_bound(const struct canon_req *r, size_t body_len);

/* A target's prices for reservations, picodollars per token, from
 * dp_snapshot_price: the dearest input-side class (cache writes cost more
 * than plain input) and the dearer of output and reasoning, so that a
 * worst case bounds every mix of classes; input_bound also counts an
 * input-side class without a price at the entry's dearest price, as a
 * budget charges it (dp_limits_cost_bound). 0, or GW_ENOTFOUND when the
 * target has no input price or is priced in another currency than USD
 * (max_output_tokens is set either way). */
struct dp_limits_price {
    int64_t input;             /* the highest price of an input-side token */
    int64_t input_bound;       /* the same, an unpriced class at the dearest price */
    int64_t output;            /* -1: unknown (embeddings need none) */
    int cache_unpriced;        /* DP_LIMITS_CACHE_5M, _1H: cache writes without a price */
    int64_t max_output_tokens; /* the catalog's, 0 unknown */
};
int dp_limits_price(const struct dp_snapshot *s, const char *provider, const char *model,
                    struct dp_limits_price *p);

#endif
