/*
 * dp_limits' private part: the module's state and structures, shared by
 * the holds (dp_limits.c), the leases and accounts (dp_limits_lease.c) and
 * the sizing (dp_limits_sizing.c). Not for other modules.
 */
#ifndef DP_LIMITS_INT_H
#define DP_LIMITS_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dp_limits.h"

/* A lease request asks for this many times what its waiters need: enough
 * for the next few requests, so most reserve from the local balance. The
 * control plane caps the slice at a fraction of what remains. */
#define WANT_FACTOR 8
#define NLEARN 256

enum istate { I_WAIT, I_HELD, I_OPEN };

struct account;
struct dp_limits_hold;

#define LEASE_ID_MAX 40

/* A lease this replica was granted, kept until the control plane has its
 * final report: what was given back of it and charged under it (totals,
 * so a report sent twice changes nothing). It is current while its
 * account reserves from it; retired (replaced, expired, idle, its window
 * over), it is final once no request holds part of it. */
struct lease {
    struct lease *next;
    char id[LEASE_ID_MAX];
    char limit_id[64];
    int64_t window_start_ms;
    int64_t granted;
    int64_t released;  /* given back so far */
    int64_t charged;   /* charged under it so far */
    int holders;       /* items that reserved from it and have not ended */
    int current;       /* its account reserves from it */
    int renew;         /* a renewal is wanted */
    int dirty;         /* a report is due */
    int gone;          /* the control plane does not know it: nothing more to say */
    uint64_t sent_req; /* the report in flight (0: none) */
    int64_t sent_at;   /* monotonic ms it was sent */
    int sent_final;
    int sent_renew;
    int64_t retry_at; /* monotonic ms: not before (after an "unallocated") */
};

/* One limit's part of one request. */
struct item {
    struct dp_limits_hold *h;
    struct account *a;
    int64_t need;        /* reserved (HELD); wanted (WAIT) */
    int64_t used;        /* charged so far */
    struct lease *lease; /* HELD: the lease it reserved from */
    enum istate st;
    struct item *next_wait;
};

struct dp_limits_hold {
    struct item items[DP_MAX_CHARGES];
    size_t n;
    size_t waiting;
    int building;  /* dp_limits_reserve is still adding items */
    int done;      /* decided */
    int delivered; /* the callback ran (or was not wanted) */
    int refused;
    struct dp_limits_refusal refusal;
    struct event *ev;
    dp_limits_cb cb;
    void *arg;
    uint64_t target;    /* the primary target's hash: what its output teaches */
    int64_t max_tokens; /* the request's cap (0: none) */
    int64_t rough_in;   /* the rough input estimate it was sized with */
    int64_t input;      /* the provider's count of the input (the last attempt's) */
    int64_t output;     /* output tokens charged */
    int answered;       /* an attempt reported usage */
};

/* One limit in one window, on this replica. */
struct account {
    struct account *next;
    char limit_id[64];
    int64_t window_start_ms, window_end_ms;
    /* The limit as the last reservation's snapshot had it. */
    enum dp_limit_scope scope_kind;
    char scope[129];
    enum dp_limit_metric metric;
    enum dp_limit_period period;
    int64_t amount;
    int fail_closed;
    char currency[4];
    /* The current lease. */
    struct lease *lease;               /* NULL: none */
    int64_t balance;                   /* granted and not reserved here (may go below 0) */
    int64_t lease_until;               /* monotonic ms it may be used until */
    int64_t lease_life;                /* ms it had at its grant: renewed at half of it */
    int64_t last_grant, last_grant_at; /* the last new lease's amount, when (monotonic ms) */
    int holders;                       /* items that point here */
    int64_t last_used;                 /* monotonic ms */
    /* The control plane's last word on the window. */
    int has_status;
    int64_t st_amount, st_spent, st_remaining;
    int64_t depleted_at; /* monotonic ms of a "depleted" refusal; 0 none */
    /* The lease request in flight (req 0: none). */
    uint64_t req;
    int req_sent;
    int64_t req_sent_at; /* monotonic ms */
    int64_t req_want, req_need;
    struct item *wait_head, *wait_tail;
};

/* What a target's answers have been like: exponential averages of the
 * output tokens of requests without max_tokens (× 16), and of the share
 * of max_tokens used by requests with one (× 1024). */
struct learned {
    uint64_t target;
    int64_t out16;
    int64_t share1024;
    int64_t in1024; /* the provider's input count over the estimate */
    int has_out, has_share, has_in;
};

/* The module's state, defined in dp_limits.c. */
struct dpl_state {
    pthread_mutex_t mu;
    struct account *accounts;
    size_t naccounts;
    struct lease *leases;
    uint64_t next_req; /* from a random start: unique per process start */
    int up;
    int64_t down_since; /* monotonic ms; 0: never connected (no control plane) */
    void (*notify)(void *);
    void *notify_arg;
    int64_t (*wall)(void);
    int64_t (*mono)(void);
    int64_t warned_at;
    int64_t housekept_at; /* monotonic ms */
    struct learned learned[NLEARN];
};
extern struct dpl_state dpl;

/* The holds (dp_limits.c). */
void dpl_refusal_for(struct dp_limits_refusal *r, const struct account *a, int depleted,
                     int64_t need, int64_t wall);
void dpl_unwait(struct item *it);
void dpl_refuse_hold(struct dp_limits_hold *h, const struct dp_limits_refusal *r, int64_t now);
void dpl_item_ready(struct item *it);
void dpl_offline_decide(struct item *it, int64_t now, int64_t wall);
void dpl_serve_waiters(struct account *a, int64_t now);
int64_t dpl_waiting_need(const struct account *a);

/* The leases and accounts (dp_limits_lease.c). */
int dpl_lease_valid(const struct account *a, int64_t now);
void dpl_lease_give_back(struct lease *l, int64_t amount);
void dpl_lease_unhold(struct lease *l);
int64_t dpl_lease_want(const struct account *a, int64_t now, int64_t base);
void dpl_request_lease(struct account *a, int64_t want, int64_t need);
struct account *dpl_account_get(const struct dp_limit *l, int64_t wall, int64_t now);
void dpl_housekeep(int64_t now, int64_t wall);
void dpl_unlock_notify(void);

/* The sizing (dp_limits_sizing.c). */
int64_t dpl_add_sat(int64_t a, int64_t b);
int64_t dpl_mul_sat(int64_t a, int64_t b);
uint64_t dpl_target_hash(const char *provider, const char *model);
void dpl_learn_answer(uint64_t target, int64_t out, int64_t max_tokens, int64_t in, int64_t rough);
void dpl_drop_unpriced(const struct dp_limits_ask *ask, const struct dp_limit *const *ls, size_t n);
int64_t dpl_worst_output_cap(const struct dp_limits_ask *ask);
int64_t dpl_size_need(const struct dp_limits_ask *ask, const struct dp_limit *l, int64_t out_cap);

#endif
