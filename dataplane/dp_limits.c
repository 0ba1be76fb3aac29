#include "dp_limits.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "canon.h"
#include "dp_cost.h"
#include "dp_router.h"
#include "gw_buf.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_time.h"

/* A lease request asks for this many times what its waiters need: enough
 * for the next few requests, so most reserve from the local balance. The
 * control plane caps the slice at a fraction of what remains. */
#define WANT_FACTOR 8
/* A lease is used until this long before its life, counted from when its
 * request was sent, runs out (the control plane starts counting later). */
#define EXPIRY_MARGIN_MS 2000
/* A report the control plane could not take (its database away) goes
 * again after this long. */
#define REPORT_RETRY_MS 1000
/* After a "depleted" refusal, requests needing more than was left are
 * refused here for this long, without asking again. */
#define DEPLETED_MEMORY_MS 1000
/* Retry-After for a refusal that is no verdict on the budget. */
#define UNALLOCATED_RETRY_S 5
/* Estimate mode, before a target's answers were seen: output tokens, and
 * the factor on the rough input count (characters / 4 undercounts dense
 * scripts by half and more; leaning high until the target's own counts are
 * known keeps a cold start from overshooting). */
#define DEFAULT_OUTPUT_ESTIMATE 256
#define COLD_INPUT_FACTOR 2
/* Accounts (limit × window) kept at most; an idle one is forgotten. */
#define MAX_ACCOUNTS 4096
#define IDLE_FORGET_MS 600000
#define NLEARN 256
#define SAT_MAX (INT64_MAX / 4)

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
    struct lease *lease; /* NULL: none */
    int64_t balance;     /* granted and not reserved here (may go below 0) */
    int64_t lease_until; /* monotonic ms it may be used until */
    int64_t lease_life;  /* ms it had at its grant: renewed at half of it */
    int holders;         /* items that point here */
    int64_t last_used;   /* monotonic ms */
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

static int64_t mono_ms_default(void)
{
    return gw_now_us() / 1000;
}

static struct {
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
} L = {.mu = PTHREAD_MUTEX_INITIALIZER, .wall = gw_wall_ms, .mono = mono_ms_default};

/* ---------------------------------------------------------------- arithmetic */

static int64_t add_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) || r > SAT_MAX ? SAT_MAX : r;
}

static int64_t mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) || r > SAT_MAX ? SAT_MAX : r;
}

/* ---------------------------------------------------------------- windows */

/* The UTC window of period holding wall (Unix ms). */
static void window_of(enum dp_limit_period p, int64_t wall, int64_t *start, int64_t *end)
{
    if (p == DP_LIMIT_MINUTE || p == DP_LIMIT_DAY) {
        int64_t len = p == DP_LIMIT_MINUTE ? 60000 : 86400000;
        *start = wall - wall % len;
        *end = *start + len;
        return;
    }
    time_t t = (time_t)(wall / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    tm.tm_mday = 1;
    tm.tm_hour = tm.tm_min = tm.tm_sec = 0;
    *start = (int64_t)timegm(&tm) * 1000;
    tm.tm_mon += 1; /* timegm normalizes December + 1 */
    *end = (int64_t)timegm(&tm) * 1000;
}

/* ---------------------------------------------------------------- leases */

/* A request number unique to this process start: a random start in
 * [2^62, 2^63) (the control plane keeps it in a bigint, and remembers none
 * below 2^32: older data planes count from 1 at every start), then one by
 * one. */
#define REQ_LOW (1ULL << 62)
static uint64_t new_req(void)
{
    if (!L.next_req && gw_random_bytes(&L.next_req, sizeof(L.next_req)) != GW_OK)
        L.next_req = (uint64_t)gw_now_us();
    L.next_req = ((L.next_req + 1) & (REQ_LOW - 1)) | REQ_LOW;
    return L.next_req;
}

static struct lease *lease_find(const char *id)
{
    for (struct lease *l = L.leases; l; l = l->next)
        if (strcmp(l->id, id) == 0)
            return l;
    return NULL;
}

static struct lease *lease_new(const char *id, const char *limit_id, int64_t ws, int64_t granted)
{
    struct lease *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL; /* the control plane counts it held for its grace */
    snprintf(l->id, sizeof(l->id), "%s", id);
    snprintf(l->limit_id, sizeof(l->limit_id), "%s", limit_id);
    l->window_start_ms = ws;
    l->granted = granted;
    l->next = L.leases;
    L.leases = l;
    return l;
}

static int lease_final(const struct lease *l)
{
    return !l->current && l->holders == 0;
}

/* Something to tell the control plane about l: its totals, its end. */
static void lease_touch(struct lease *l)
{
    if (!l->gone)
        l->dirty = 1;
}

/* Gives back amount of l (to the control plane, in its next report). */
static void lease_give_back(struct lease *l, int64_t amount)
{
    if (amount <= 0)
        return;
    int64_t r = add_sat(l->released, amount);
    l->released = r > l->granted ? l->granted : r;
    lease_touch(l);
}

/* The account stops reserving from its lease: its balance goes back. */
static void retire(struct account *a)
{
    struct lease *l = a->lease;
    if (!l)
        return;
    lease_give_back(l, a->balance);
    l->current = 0;
    l->renew = 0;
    if (lease_final(l))
        lease_touch(l);
    a->lease = NULL;
    a->balance = 0;
    a->lease_until = a->lease_life = 0;
}

/* An item lets go of its lease (its request ended or was refused). */
static void lease_unhold(struct lease *l)
{
    if (--l->holders == 0 && !l->current)
        lease_touch(l);
}

static void lease_free(struct lease *l)
{
    for (struct lease **pp = &L.leases; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            free(l);
            return;
        }
}

static int lease_valid(const struct account *a, int64_t now)
{
    return a->lease && now < a->lease_until;
}

/* Asks for a slice (want > 0). */
static void request_lease(struct account *a, int64_t want, int64_t need)
{
    a->req = new_req();
    a->req_sent = 0;
    a->req_want = want;
    a->req_need = need;
}

/* ---------------------------------------------------------------- holds */

static void set_limit_fields(struct dp_limits_refusal *r, const struct account *a)
{
    r->has_limit = 1;
    snprintf(r->limit_id, sizeof(r->limit_id), "%s", a->limit_id);
    snprintf(r->scope, sizeof(r->scope), "%s", a->scope);
    r->scope_kind = a->scope_kind;
    r->metric = a->metric;
    r->has_period = 1;
    r->period = a->period;
    r->amount = a->has_status ? a->st_amount : a->amount;
    r->spent = a->has_status ? a->st_spent : -1;
    r->remaining = a->has_status ? a->st_remaining : -1;
    snprintf(r->currency, sizeof(r->currency), "%s", a->currency);
}

static const char *what_of(const struct account *a)
{
    static const char *const names[3][3] = {
        {"per-minute budget", "daily budget", "monthly budget"},
        {"requests-per-minute limit", "daily request limit", "monthly request limit"},
        {"tokens-per-minute limit", "daily token limit", "monthly token limit"}};
    return names[a->metric][a->period];
}

/* A refusal for the limit behind a: depleted (the control plane refused,
 * or did a moment ago) or unallocated (no allowance could be had). */
static void refusal_for(struct dp_limits_refusal *r, const struct account *a, int depleted,
                        int64_t need, int64_t wall)
{
    memset(r, 0, sizeof(*r));
    int money = a->metric == DP_LIMIT_COST;
    r->status = money ? 402 : 429;
    r->type = money ? "billing_error" : "rate_limit_error";
    set_limit_fields(r, a);
    const char *scope = dp_limit_scope_name(a->scope_kind);
    if (depleted) {
        r->code = money ? "budget_exceeded" : "rate_limited";
        r->state = "depleted";
        int64_t s = (a->window_end_ms - wall + 999) / 1000;
        r->retry_after_s = s > 0 ? s : 1;
        snprintf(r->message, sizeof(r->message),
                 "the %s '%s' of %s '%s' is used up for this window: %lld of %lld left, this "
                 "request needs %lld; retry after %lld s",
                 what_of(a), a->limit_id, scope, a->scope,
                 (long long)(r->remaining >= 0 ? r->remaining : 0), (long long)r->amount,
                 (long long)need, (long long)r->retry_after_s);
    } else {
        r->code = money ? "budget_unallocated" : "rate_limited";
        r->state = "unallocated";
        r->retry_after_s = UNALLOCATED_RETRY_S;
        snprintf(r->message, sizeof(r->message),
                 "the %s '%s' of %s '%s' could not be allocated to this gateway (the control "
                 "plane is unreachable and the limit fails closed); retry shortly",
                 what_of(a), a->limit_id, scope, a->scope);
    }
}

/* Gives back what item reserved and did not use, and lets go of its
 * lease. */
static void give_back(struct item *it, int64_t now)
{
    struct account *a = it->a;
    int64_t left = it->need - it->used;
    struct lease *l = it->lease;
    if (it->st == I_HELD && l) {
        if (lease_valid(a, now) && a->lease == l)
            a->balance += left; /* below 0 when the answer cost more than reserved */
        else
            lease_give_back(l, left); /* a retired lease: back to the control plane */
        it->lease = NULL;
        lease_unhold(l);
    }
    it->need = it->used;
}

static void unwait(struct item *it)
{
    struct account *a = it->a;
    struct item **pp = &a->wait_head, *prev = NULL;
    while (*pp && *pp != it) {
        prev = *pp;
        pp = &(*pp)->next_wait;
    }
    if (!*pp)
        return;
    *pp = it->next_wait;
    if (a->wait_tail == it)
        a->wait_tail = prev;
    it->next_wait = NULL;
}

static void wake(struct dp_limits_hold *h)
{
    h->done = 1;
    if (h->ev && !h->delivered)
        event_active(h->ev, EV_READ, 1);
}

/* An item lets go of its limit: its wait ends, or what it reserved and did
 * not use goes back. */
static void let_go(struct item *it, int64_t now)
{
    if (it->st == I_WAIT)
        unwait(it);
    else
        give_back(it, now);
}

/* The hold is refused: everything it reserved goes back, its waits end. */
static void refuse_hold(struct dp_limits_hold *h, const struct dp_limits_refusal *r, int64_t now)
{
    if (h->done)
        return;
    h->refused = 1;
    h->refusal = *r;
    for (size_t i = 0; i < h->n; i++) {
        struct item *it = &h->items[i];
        let_go(it, now);
        it->st = I_OPEN;
        it->need = it->used = 0;
    }
    h->waiting = 0;
    wake(h);
}

static void item_ready(struct item *it)
{
    struct dp_limits_hold *h = it->h;
    if (--h->waiting == 0 && !h->done && !h->building)
        wake(h);
}

/* Decides a waiting item by its limit's offline policy. */
static void offline_decide(struct item *it, int64_t now, int64_t wall)
{
    struct account *a = it->a;
    unwait(it);
    if (a->fail_closed) {
        struct dp_limits_refusal r;
        refusal_for(&r, a, 0, it->need, wall);
        refuse_hold(it->h, &r, now);
        return;
    }
    it->st = I_OPEN; /* charged without a lease */
    it->need = 0;
    item_ready(it);
}

/* Serves the account's waiters from its balance, first come first. */
static void serve_waiters(struct account *a, int64_t now)
{
    while (a->wait_head && lease_valid(a, now) && a->balance >= a->wait_head->need) {
        struct item *it = a->wait_head;
        unwait(it);
        a->balance -= it->need;
        it->st = I_HELD;
        it->lease = a->lease;
        a->lease->holders++;
        item_ready(it);
    }
}

static int64_t waiting_need(const struct account *a)
{
    int64_t n = 0;
    for (const struct item *it = a->wait_head; it; it = it->next_wait)
        n = add_sat(n, it->need);
    return n;
}

/* ---------------------------------------------------------------- accounts */

static struct account *account_find(const char *limit_id, int64_t window_start)
{
    for (struct account *a = L.accounts; a; a = a->next)
        if (a->window_start_ms == window_start && strcmp(a->limit_id, limit_id) == 0)
            return a;
    return NULL;
}

static struct account *account_get(const struct dp_limit *l, int64_t wall, int64_t now)
{
    int64_t start, end;
    window_of(l->period, wall, &start, &end);
    struct account *a = account_find(l->id, start);
    if (!a) {
        if (L.naccounts >= MAX_ACCOUNTS || !(a = calloc(1, sizeof(*a))))
            return NULL;
        snprintf(a->limit_id, sizeof(a->limit_id), "%s", l->id);
        a->window_start_ms = start;
        a->window_end_ms = end;
        a->next = L.accounts;
        L.accounts = a;
        L.naccounts++;
    }
    a->scope_kind = l->scope_kind;
    snprintf(a->scope, sizeof(a->scope), "%s", l->scope);
    a->metric = l->metric;
    a->period = l->period;
    a->amount = l->amount;
    a->fail_closed = l->fail_closed;
    snprintf(a->currency, sizeof(a->currency), "%s", l->currency ? l->currency : "USD");
    a->last_used = now;
    return a;
}

/* The periodic work: expired leases retired, live ones renewed while in
 * use or retired when idle, ended and idle accounts forgotten (their
 * leases retired: reported on, then forgotten too). */
static void housekeep(int64_t now, int64_t wall)
{
    struct account **pp = &L.accounts;
    while (*pp) {
        struct account *a = *pp;
        if (a->lease && now >= a->lease_until)
            retire(a); /* nothing more is reserved from it; its report settles it */
        int half = a->lease && a->lease_until - now < a->lease_life / 2;
        if (half && !a->lease->renew && !a->lease->sent_renew && L.up) {
            if (a->holders > 0 || a->wait_head || now - a->last_used < a->lease_life / 2) {
                a->lease->renew = 1;
                lease_touch(a->lease);
            } else {
                retire(a);
            }
        }
        int over = a->window_end_ms <= wall || now - a->last_used > IDLE_FORGET_MS;
        if (over && a->holders == 0 && !a->wait_head && !a->req) {
            retire(a);
            *pp = a->next;
            L.naccounts--;
            free(a);
            continue;
        }
        pp = &a->next;
    }
    /* A lease the control plane does not know is forgotten once done. */
    for (struct lease **lp = &L.leases; *lp;) {
        struct lease *l = *lp;
        if (l->gone && lease_final(l) && !l->sent_req) {
            *lp = l->next;
            free(l);
            continue;
        }
        lp = &l->next;
    }
}

static int report_due(const struct lease *l, int64_t now)
{
    return l->dirty && !l->sent_req && now >= l->retry_at;
}

static int has_outgoing(void)
{
    if (!L.up)
        return 0;
    int64_t now = L.mono();
    for (const struct lease *l = L.leases; l; l = l->next)
        if (report_due(l, now))
            return 1;
    for (struct account *a = L.accounts; a; a = a->next)
        if (a->req && !a->req_sent)
            return 1;
    return 0;
}

/* Unlocks, then tells the client thread when there is something to send. */
static void unlock_notify(void)
{
    int send = has_outgoing();
    void (*fn)(void *) = L.notify;
    void *arg = L.notify_arg;
    pthread_mutex_unlock(&L.mu);
    if (send && fn)
        fn(arg);
}

/* ---------------------------------------------------------------- client thread */

int dp_limits_next_out(Llmgw__V1__ReportMessage *m, struct dp_limits_out *st)
{
    pthread_mutex_lock(&L.mu);
    int64_t now = L.mono();
    housekeep(now, L.wall());
    if (!L.up) {
        pthread_mutex_unlock(&L.mu);
        return 0;
    }
    llmgw__v1__lease_request__init(&st->request);
    for (struct lease *l = L.leases; l; l = l->next) {
        if (!report_due(l, now))
            continue;
        /* A report on a lease: its totals; final when it is done with. */
        l->dirty = 0;
        l->sent_req = new_req();
        l->sent_at = now;
        l->sent_final = lease_final(l);
        l->sent_renew = l->renew && l->current;
        l->renew = 0;
        snprintf(st->limit_id, sizeof(st->limit_id), "%s", l->limit_id);
        snprintf(st->lease_id, sizeof(st->lease_id), "%s", l->id);
        st->request.req = l->sent_req;
        st->request.limit_id = st->limit_id;
        st->request.window_start_ms = l->window_start_ms;
        st->request.lease_id = st->lease_id;
        st->request.released = l->released;
        st->request.final = l->sent_final;
        st->request.charged = l->sent_final ? l->charged : 0;
        m->body_case = LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST;
        m->lease_request = &st->request;
        pthread_mutex_unlock(&L.mu);
        return 1;
    }
    for (struct account *a = L.accounts; a; a = a->next) {
        if (!a->req || a->req_sent)
            continue;
        a->req_sent = 1;
        a->req_sent_at = now;
        snprintf(st->limit_id, sizeof(st->limit_id), "%s", a->limit_id);
        st->request.req = a->req;
        st->request.limit_id = st->limit_id;
        st->request.window_start_ms = a->window_start_ms;
        st->request.want = a->req_want;
        st->request.need = a->req_need;
        m->body_case = LLMGW__V1__REPORT_MESSAGE__BODY_LEASE_REQUEST;
        m->lease_request = &st->request;
        pthread_mutex_unlock(&L.mu);
        return 1;
    }
    pthread_mutex_unlock(&L.mu);
    return 0;
}

size_t dp_limits_pending(void)
{
    size_t n = 0;
    pthread_mutex_lock(&L.mu);
    for (const struct lease *l = L.leases; l; l = l->next)
        n += l->dirty || l->sent_req;
    pthread_mutex_unlock(&L.mu);
    return n;
}

void dp_limits_set_notify(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&L.mu);
    L.notify = fn;
    L.notify_arg = arg;
    pthread_mutex_unlock(&L.mu);
}

/* Until when (monotonic ms) a lease answered by g may be used, its request
 * sent at sent_at: its life counted on our clock from the sending (the
 * control plane's starts later). An older control plane says only when it
 * expires, on its own clock; 0: it is over. */
static int64_t usable_until(const Llmgw__V1__LeaseGrant *g, int64_t sent_at, int64_t now,
                            int64_t wall)
{
    if (g->ttl_ms > 0)
        return sent_at + g->ttl_ms - EXPIRY_MARGIN_MS;
    if (g->expires_at_ms > 0)
        return now + (g->expires_at_ms - wall) - EXPIRY_MARGIN_MS;
    return 0;
}

static void set_status(struct account *a, const Llmgw__V1__LeaseGrant *g)
{
    a->has_status = 1;
    a->st_amount = g->limit;
    a->st_spent = g->spent;
    a->st_remaining = g->remaining;
}

/* The answer to a report on l. */
static void on_report_answer(struct lease *l, const Llmgw__V1__LeaseGrant *g, int64_t now,
                             int64_t wall)
{
    const char *refusal = g->refusal ? g->refusal : "";
    int final = l->sent_final, renew = l->sent_renew;
    int64_t sent_at = l->sent_at;
    l->sent_req = 0;
    l->sent_final = l->sent_renew = 0;
    struct account *a = account_find(l->limit_id, l->window_start_ms);
    if (strcmp(refusal, "unallocated") == 0) {
        /* Not taken (the control plane's database is away): again later. */
        l->dirty = 1;
        l->renew |= renew;
        l->retry_at = now + REPORT_RETRY_MS;
        return;
    }
    if (refusal[0]) {
        /* unknown_lease, unknown_limit, invalid_window: it will never take
         * one; nothing more is reserved from the lease or said of it. */
        l->gone = 1;
        l->dirty = 0;
        if (a && a->lease == l)
            retire(a);
    } else {
        if (a)
            set_status(a, g);
        if (renew && a && a->lease == l) {
            int64_t until = usable_until(g, sent_at, now, wall);
            if (until > now) {
                a->lease_until = until;
                a->lease_life = until - sent_at;
            } else {
                retire(a); /* not renewed: it is over at the control plane */
            }
        }
    }
    if ((final || l->gone) && lease_final(l) && !l->dirty)
        lease_free(l);
}

void dp_limits_on_grant(const Llmgw__V1__LeaseGrant *g)
{
    pthread_mutex_lock(&L.mu);
    int64_t now = L.mono(), wall = L.wall();
    const char *lease = g->lease_id ? g->lease_id : "";
    const char *refusal = g->refusal ? g->refusal : "";
    for (struct lease *l = L.leases; g->req && l; l = l->next)
        if (l->sent_req == g->req) {
            on_report_answer(l, g, now, wall);
            unlock_notify();
            return;
        }
    struct account *a = g->limit_id ? account_find(g->limit_id, g->window_start_ms) : NULL;
    if (!a || a->req != g->req) {
        /* Nobody asked for it (any more): not ours to keep. */
        if (lease[0] && g->amount > 0 && strlen(lease) < LEASE_ID_MAX && !lease_find(lease)) {
            struct lease *l =
                lease_new(lease, g->limit_id ? g->limit_id : "", g->window_start_ms, g->amount);
            if (l) {
                lease_give_back(l, g->amount);
                lease_touch(l);
            }
        }
        unlock_notify();
        return;
    }
    a->req = 0;
    set_status(a, g);
    int64_t until = usable_until(g, a->req_sent_at, now, wall);
    if (!refusal[0]) {
        struct lease *known = lease[0] ? lease_find(lease) : NULL;
        if (known) {
            /* The same lease again (asked twice): nothing new. */
        } else if (lease[0] && g->amount > 0 && strlen(lease) < LEASE_ID_MAX) {
            struct lease *l = lease_new(lease, a->limit_id, a->window_start_ms, g->amount);
            if (l && until > now) {
                /* A new lease replaces the current one, whose balance goes
                 * back (its reservations still settle against it). */
                retire(a);
                l->current = 1;
                a->lease = l;
                a->balance = g->amount;
                a->lease_until = until;
                a->lease_life = until - a->req_sent_at;
            } else if (l) {
                lease_give_back(l, g->amount); /* unusable: already expired */
                lease_touch(l);
            }
        }
        serve_waiters(a, now);
        if (a->wait_head) {
            int64_t need = a->wait_head->need;
            int64_t want = mul_sat(waiting_need(a), WANT_FACTOR);
            request_lease(a, want > need ? want : need, need);
        }
    } else if (strcmp(refusal, "depleted") == 0) {
        a->depleted_at = now;
        while (a->wait_head) {
            struct item *it = a->wait_head;
            struct dp_limits_refusal r;
            refusal_for(&r, a, 1, it->need, wall);
            refuse_hold(it->h, &r, now); /* unwaits it, and the hold's others */
            if (a->wait_head == it)
                unwait(it);
        }
    } else {
        /* "unallocated" (the control plane cannot decide: its database is
         * away) and anything else: each limit's offline policy.
         * "unknown_limit" (deleted there, still in our snapshot) counts as
         * open: the snapshot without it is on its way. */
        int unknown = strcmp(refusal, "unknown_limit") == 0;
        while (a->wait_head) {
            struct item *it = a->wait_head;
            if (unknown) {
                unwait(it);
                it->st = I_OPEN;
                it->need = 0;
                item_ready(it);
            } else {
                offline_decide(it, now, wall);
            }
            if (a->wait_head == it)
                unwait(it);
        }
    }
    unlock_notify();
}

void dp_limits_on_stream(int up)
{
    pthread_mutex_lock(&L.mu);
    int64_t now = L.mono();
    if (!up && (L.up || !L.down_since))
        L.down_since = now;
    L.up = up;
    /* Requests and reports sent on the lost stream go again on the next
     * (a request with its number: the control plane answers it with the
     * lease it may already have granted); requests not sent yet wait for
     * it. Their waiters keep their own deadlines. */
    if (!up) {
        for (struct account *a = L.accounts; a; a = a->next)
            if (a->req)
                a->req_sent = 0;
        for (struct lease *l = L.leases; l; l = l->next)
            if (l->sent_req) {
                l->sent_req = 0;
                l->renew |= l->sent_renew;
                l->sent_final = l->sent_renew = 0;
                lease_touch(l);
            }
    }
    unlock_notify();
}

void dp_limits_release_all(void)
{
    pthread_mutex_lock(&L.mu);
    for (struct account *a = L.accounts; a; a = a->next)
        retire(a);
    unlock_notify();
}

/* ---------------------------------------------------------------- estimates */

static struct learned *learned_slot(uint64_t target)
{
    return &L.learned[gw_mix64(target) % NLEARN];
}

static uint64_t target_hash(const char *provider, const char *model)
{
    uint64_t h = gw_fnv1a(GW_FNV1A_INIT, provider, strlen(provider) + 1);
    return gw_fnv1a(h, model, strlen(model) + 1) | 1;
}

/* Estimate mode's output tokens for a target. With the request's
 * max_tokens: that cap times the share of their cap this target's answers
 * have used; without: what its answers have been. Before any answer was
 * seen: a default. Never above the request's cap or the catalog's. */
static int64_t output_estimate(uint64_t target, int64_t max_tokens, int64_t catalog_cap)
{
    const struct learned *l = learned_slot(target);
    int known = l->target == target;
    int64_t e;
    if (max_tokens > 0 && known && l->has_share)
        e = (mul_sat(max_tokens, l->share1024) + 1023) / 1024;
    else if (max_tokens <= 0 && known && l->has_out)
        e = (l->out16 + 15) / 16;
    else
        e = DEFAULT_OUTPUT_ESTIMATE;
    if (max_tokens > 0 && e > max_tokens)
        e = max_tokens;
    if (catalog_cap > 0 && e > catalog_cap)
        e = catalog_cap;
    return e;
}

/* Estimate mode's input tokens for a target: the request's rough count
 * (characters / 4), corrected by how the target's own counts have
 * compared with it (a dense script, a tokenizer of its own). */
static int64_t input_estimate(uint64_t target, int64_t rough)
{
    const struct learned *l = learned_slot(target);
    if (l->target != target || !l->has_in)
        return mul_sat(rough, COLD_INPUT_FACTOR);
    return (mul_sat(rough, l->in1024) + 1023) / 1024;
}

static void ewma(int64_t *avg, int *has, int64_t x)
{
    *avg = *has ? *avg + (x - *avg) / 8 : x;
    *has = 1;
}

/* One request's answer: out tokens, under max_tokens (0: none); the
 * provider counted in input tokens where the rough estimate said rough. */
static void learn_answer(uint64_t target, int64_t out, int64_t max_tokens, int64_t in,
                         int64_t rough)
{
    struct learned *l = learned_slot(target);
    if (l->target != target)
        *l = (struct learned){.target = target};
    if (in > 0 && rough > 0) {
        int64_t r = mul_sat(in, 1024) / rough;
        ewma(&l->in1024, &l->has_in, r < 64 ? 64 : r > 16 * 1024 ? 16 * 1024 : r);
    }
    if (max_tokens > 0)
        ewma(&l->share1024, &l->has_share, out >= max_tokens ? 1024 : out * 1024 / max_tokens);
    else
        ewma(&l->out16, &l->has_out, mul_sat(out, 16));
}

/* The dearest price p names for any class; -1 when it names none. */
static int64_t dearest(const struct dp_price *p)
{
    long long v[] = {p->input,          p->output,         p->cache_read,
                     p->cache_write_5m, p->cache_write_1h, p->reasoning};
    int64_t m = -1;
    for (size_t i = 0; i < sizeof(v) / sizeof(*v); i++)
        if (v[i] > m)
            m = v[i];
    return m;
}

int dp_limits_price(const struct dp_snapshot *s, const char *provider, const char *model,
                    struct dp_limits_price *p)
{
    const struct dp_catalog_entry *c = dp_snapshot_catalog(s, provider, model);
    p->max_output_tokens = c ? c->max_output_tokens : 0;
    const struct dp_price *pr = dp_snapshot_price(s, provider, model);
    /* Budgets are in USD: a price in another currency cannot count
     * against one (nothing is ever converted). */
    if (!pr || pr->input < 0 || strcmp(pr->currency, "USD") != 0)
        return GW_ENOTFOUND;
    p->input = pr->input;
    if (pr->cache_write_5m > p->input)
        p->input = pr->cache_write_5m;
    if (pr->cache_write_1h > p->input)
        p->input = pr->cache_write_1h;
    if (pr->cache_read > p->input)
        p->input = pr->cache_read;
    p->input_bound = p->input;
    if (pr->cache_read < 0 || pr->cache_write_5m < 0 || pr->cache_write_1h < 0)
        p->input_bound = dearest(pr); /* as dp_limits_cost_bound charges it */
    p->cache_unpriced = (pr->cache_write_5m < 0 ? DP_LIMITS_CACHE_5M : 0) |
                        (pr->cache_write_1h < 0 ? DP_LIMITS_CACHE_1H : 0);
    p->output = pr->output;
    if (pr->output >= 0 && pr->reasoning > p->output)
        p->output = pr->reasoning;
    return GW_OK;
}

int64_t dp_limits_cost_bound(const struct dp_price *p, const struct canon_usage *u)
{
    if (!p || strcmp(p->currency, "USD") != 0)
        return -1;
    int64_t top = dearest(p);
    if (top < 0)
        return -1;
#define RATE(x) ((x) >= 0 ? (int64_t)(x) : top)
    int64_t out_rate = RATE(p->output);
    if (p->reasoning > out_rate)
        out_rate = p->reasoning; /* reasoning is part of output */
    int64_t out = u->output > u->reasoning ? u->output : u->reasoning;
    int64_t c = 0;
    c = add_sat(c, mul_sat(u->input > 0 ? u->input : 0, RATE(p->input)));
    c = add_sat(c, mul_sat(u->cache_read > 0 ? u->cache_read : 0, RATE(p->cache_read)));
    c = add_sat(c, mul_sat(u->cache_write_5m > 0 ? u->cache_write_5m : 0, RATE(p->cache_write_5m)));
    c = add_sat(c, mul_sat(u->cache_write_1h > 0 ? u->cache_write_1h : 0, RATE(p->cache_write_1h)));
    c = add_sat(c, mul_sat(out > 0 ? out : 0, out_rate));
#undef RATE
    return c;
}

static int64_t part_images(const struct canon_part *p, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].type == CANON_PART_IMAGE)
            k++;
        else if (p[i].type == CANON_PART_TOOL_RESULT)
            k += part_images(p[i].content, p[i].ncontent);
    }
    return k;
}

int64_t dp_limits_input_bound(const struct canon_req *r, size_t body_len)
{
    int64_t images = 0;
    for (size_t i = 0; i < r->nmessages; i++)
        images += part_images(r->messages[i].parts, r->messages[i].nparts);
    return add_sat((int64_t)body_len, mul_sat(images, DP_LIMITS_IMAGE_TOKENS));
}

static int cache_mark(enum canon_cache c)
{
    return c == CANON_CACHE_5M ? DP_LIMITS_CACHE_5M : c == CANON_CACHE_1H ? DP_LIMITS_CACHE_1H : 0;
}

static int part_marks(const struct canon_part *p, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++)
        m |= cache_mark(p[i].cache) | part_marks(p[i].content, p[i].ncontent);
    return m;
}

int dp_limits_cache_marks(const struct canon_req *r)
{
    int m = part_marks(r->system, r->nsystem);
    for (size_t i = 0; i < r->nmessages; i++)
        m |= part_marks(r->messages[i].parts, r->messages[i].nparts);
    for (size_t i = 0; i < r->ntools; i++)
        m |= cache_mark(r->tools[i].cache);
    return m;
}

/* Whether a cost limit can hold a request on candidate i to account: it
 * has a USD price for its input and (chat) output, and (*strict) for the
 * cache writes the request asks for. */
static int priced_for(const struct dp_limits_ask *ask, size_t i, struct dp_limits_price *p,
                      int *strict)
{
    const struct dp_candidate *c = &ask->cands[i];
    *p = (struct dp_limits_price){0, 0, -1, 0, 0};
    int ok = dp_limits_price(ask->snap, c->provider->name, c->model, p) == GW_OK &&
             (ask->embeddings || p->output >= 0);
    *strict = ok && !(p->cache_unpriced & ask->cache_marks);
    return ok;
}

/* Candidates a fail_closed cost limit cannot price leave the plan (marked
 * in ask->drop): a gateway that cannot price a request cannot hold it to
 * a budget. Under fail_open they stay, with a warning. */
static void drop_unpriced(const struct dp_limits_ask *ask, const struct dp_limit *const *ls,
                          size_t n)
{
    int closed = 0, open = 0;
    for (size_t k = 0; k < n; k++)
        if (ls[k]->metric == DP_LIMIT_COST)
            *(ls[k]->fail_closed ? &closed : &open) = 1;
    for (size_t i = 0; i < ask->ncands && (closed || open); i++) {
        if (ask->drop && ask->drop[i])
            continue;
        struct dp_limits_price p;
        int strict;
        int ok = priced_for(ask, i, &p, &strict);
        if (closed && !strict && ask->drop) {
            ask->drop[i] = 1;
        } else if (!ok) {
            int64_t now = L.mono();
            if (now - L.warned_at > 60000) {
                L.warned_at = now;
                gw_logf(GW_LOG_WARN, "cost limit: a target has no price; fail_open lets it through",
                        "{s:s,s:s}", "provider", ask->cands[i].provider->name, "model",
                        ask->cands[i].model);
            }
        }
    }
}

/* The output cap a worst_case limit reserves, and the request will be
 * sent with: the client's, else the smallest catalog max_output_tokens of
 * the candidates left (each of them can take it); 0 when there is none. */
static int64_t worst_output_cap(const struct dp_limits_ask *ask)
{
    if (ask->max_tokens > 0)
        return ask->max_tokens;
    int64_t cap = 0;
    for (size_t i = 0; i < ask->ncands; i++) {
        if (ask->drop && ask->drop[i])
            continue;
        const struct dp_catalog_entry *ce =
            dp_snapshot_catalog(ask->snap, ask->cands[i].provider->name, ask->cands[i].model);
        if (ce && ce->max_output_tokens > 0 && (cap == 0 || ce->max_output_tokens < cap))
            cap = ce->max_output_tokens;
    }
    return cap;
}

/* The need of limit l for the request: 1 request; estimated or worst-case
 * tokens (the worst case's output: out_cap, plus the thinking budget a
 * provider may bill beside it); their cost at the dearest kept
 * candidate's prices (a worst case at input_bound: every class, priced or
 * not, as a charge counts it). */
static int64_t size_need(const struct dp_limits_ask *ask, const struct dp_limit *l, int64_t out_cap)
{
    if (l->metric == DP_LIMIT_REQUESTS)
        return 1;
    int64_t need = 0;
    for (size_t i = 0; i < ask->ncands; i++) {
        const struct dp_candidate *c = &ask->cands[i];
        if (ask->drop && ask->drop[i])
            continue;
        uint64_t target = target_hash(c->provider->name, c->model);
        int64_t in =
            l->worst_case ? ask->max_input_tokens : input_estimate(target, ask->est_input_tokens);
        struct dp_limits_price p;
        int strict;
        int priced = priced_for(ask, i, &p, &strict);
        int64_t out = 0;
        if (!ask->embeddings && l->worst_case)
            out = add_sat(out_cap, ask->reasoning_budget > 0 ? ask->reasoning_budget : 0);
        else if (!ask->embeddings)
            out = output_estimate(target, ask->max_tokens, p.max_output_tokens);
        int64_t n;
        if (l->metric == DP_LIMIT_TOKENS)
            n = add_sat(in, out);
        else if (priced)
            n = add_sat(mul_sat(in, l->worst_case ? p.input_bound : p.input),
                        mul_sat(out, p.output > 0 ? p.output : 0));
        else
            continue; /* fail_open and unpriced: unmetered by this limit */
        if (n > need)
            need = n;
    }
    return need;
}

/* ---------------------------------------------------------------- request path */

static int applies(const struct dp_limit *l, const struct dp_key *k)
{
    const char *who = l->scope_kind == DP_LIMIT_KEY    ? k->id
                      : l->scope_kind == DP_LIMIT_TEAM ? k->team
                                                       : k->project;
    return who && strcmp(who, l->scope) == 0;
}

static void never_configured(struct dp_limits_refusal *r, const struct dp_key *k)
{
    memset(r, 0, sizeof(*r));
    r->status = 402;
    r->type = "billing_error";
    r->code = "budget_not_configured";
    r->has_limit = 1;
    r->scope_kind = DP_LIMIT_TEAM;
    snprintf(r->scope, sizeof(r->scope), "%s", k->team);
    r->metric = DP_LIMIT_COST;
    r->amount = r->spent = r->remaining = -1;
    snprintf(r->currency, sizeof(r->currency), "USD");
    r->state = "never_configured";
    snprintf(r->message, sizeof(r->message),
             "team '%s' requires a budget, and no cost limit applies to key '%s' (set one on "
             "the key, the team or the key's project)",
             k->team, k->id);
}

static void internal(struct dp_limits_refusal *r, const char *msg)
{
    memset(r, 0, sizeof(*r));
    r->status = 500;
    r->type = "api_error";
    r->code = "internal_error";
    snprintf(r->message, sizeof(r->message), "%s", msg);
}

static void on_hold_event(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct dp_limits_hold *h = arg;
    pthread_mutex_lock(&L.mu);
    if (h->delivered) {
        pthread_mutex_unlock(&L.mu);
        return;
    }
    if (!h->done) { /* the deadline: every limit still waiting meets its policy */
        int64_t now = L.mono(), wall = L.wall();
        for (size_t i = 0; i < h->n && !h->done; i++)
            if (h->items[i].st == I_WAIT)
                offline_decide(&h->items[i], now, wall);
    }
    (void)what;
    h->delivered = 1;
    struct dp_limits_refusal r = h->refusal;
    int refused = h->refused;
    dp_limits_cb cb = h->cb;
    void *cbarg = h->arg;
    unlock_notify();
    cb(cbarg, refused ? &r : NULL); /* may end h */
}

enum dp_limits_verdict dp_limits_reserve(const struct dp_limits_ask *ask, struct event_base *base,
                                         dp_limits_cb cb, void *arg, struct dp_limits_hold **hold,
                                         struct dp_limits_refusal *r)
{
    *hold = NULL;
    if (ask->out_cap)
        *ask->out_cap = 0;
    const struct dp_key *k = ask->key;
    if (!k)
        return DP_LIMITS_GO;
    const struct dp_limit *ls[DP_MAX_CHARGES];
    size_t n = 0;
    int cost_limit = 0;
    for (size_t i = 0; i < ask->snap->nlimits; i++) {
        const struct dp_limit *l = &ask->snap->limits[i];
        if (!applies(l, k))
            continue;
        if (n == DP_MAX_CHARGES) {
            internal(r, "more than 8 limits apply to this key; the gateway holds at most 8 per "
                        "request (remove some limits)");
            return DP_LIMITS_REFUSED;
        }
        ls[n++] = l;
        cost_limit |= l->metric == DP_LIMIT_COST;
    }
    if (k->team_ref && k->team_ref->require_budget && !cost_limit) {
        never_configured(r, k);
        return DP_LIMITS_REFUSED;
    }
    if (n == 0) {
        /* Nothing to hold, but where limits are in use every answer
         * teaches the estimates (a hold with no items). */
        if (ask->snap->nlimits == 0 || ask->ncands == 0 || !(*hold = calloc(1, sizeof(**hold))))
            return DP_LIMITS_GO;
        (*hold)->target = target_hash(ask->cands[0].provider->name, ask->cands[0].model);
        (*hold)->max_tokens = ask->embeddings ? 0 : ask->max_tokens;
        (*hold)->rough_in = ask->est_input_tokens;
        (*hold)->done = (*hold)->delivered = 1;
        return DP_LIMITS_GO;
    }

    /* Sizing reads no shared state but the learned estimates (racy reads
     * of a hint are harmless, but the lock keeps them exact). */
    pthread_mutex_lock(&L.mu);
    drop_unpriced(ask, ls, n);
    pthread_mutex_unlock(&L.mu);
    size_t kept = 0;
    for (size_t i = 0; i < ask->ncands; i++)
        kept += !(ask->drop && ask->drop[i]);
    if (kept == 0) {
        memset(r, 0, sizeof(*r));
        r->status = 402;
        r->type = "billing_error";
        r->code = "budget_unpriced";
        r->state = "unpriced";
        for (size_t i = 0; i < n; i++)
            if (ls[i]->metric == DP_LIMIT_COST && ls[i]->fail_closed) {
                r->has_limit = 1;
                snprintf(r->limit_id, sizeof(r->limit_id), "%s", ls[i]->id);
                snprintf(r->scope, sizeof(r->scope), "%s", ls[i]->scope);
                r->scope_kind = ls[i]->scope_kind;
                r->metric = ls[i]->metric;
                r->has_period = 1;
                r->period = ls[i]->period;
                r->amount = ls[i]->amount;
                r->spent = r->remaining = -1;
                snprintf(r->currency, sizeof(r->currency), "%s", ls[i]->currency);
                break;
            }
        snprintf(r->message, sizeof(r->message),
                 "no candidate for this request has a price for what it may use (input, "
                 "output%s), and budget '%s' fails closed: a gateway that cannot price a request "
                 "cannot hold it to a budget",
                 ask->cache_marks ? ", the cache writes it asks for" : "", r->limit_id);
        return DP_LIMITS_REFUSED;
    }
    /* A worst case bounds the output with the cap the request will be
     * sent with. */
    int64_t cap = 0;
    for (size_t i = 0; i < n && !ask->embeddings; i++)
        if (ls[i]->worst_case && ls[i]->metric != DP_LIMIT_REQUESTS) {
            if ((cap = worst_output_cap(ask)) > 0)
                break;
            memset(r, 0, sizeof(*r));
            r->status = 400;
            r->type = "invalid_request_error";
            r->code = "max_tokens_required";
            r->param = ask->max_tokens_param ? ask->max_tokens_param : "max_tokens";
            size_t c = 0;
            while (c + 1 < ask->ncands && ask->drop && ask->drop[c])
                c++;
            snprintf(r->message, sizeof(r->message),
                     "%s: required: limit '%s' reserves the worst case, and the catalog gives no "
                     "max_output_tokens for %s/%s",
                     r->param, ls[i]->id, ask->cands[c].provider->name, ask->cands[c].model);
            return DP_LIMITS_REFUSED;
        }
    if (ask->out_cap)
        *ask->out_cap = cap;
    int64_t needs[DP_MAX_CHARGES];
    pthread_mutex_lock(&L.mu);
    for (size_t i = 0; i < n; i++)
        needs[i] = size_need(ask, ls[i], cap);
    pthread_mutex_unlock(&L.mu);

    struct dp_limits_hold *h = calloc(1, sizeof(*h));
    struct event *ev = h && base ? event_new(base, -1, 0, on_hold_event, h) : NULL;
    if (!h || !ev) {
        free(h);
        internal(r, "out of memory");
        return DP_LIMITS_REFUSED;
    }
    h->cb = cb;
    h->arg = arg;
    h->building = 1;
    if (ask->ncands > 0)
        h->target = target_hash(ask->cands[0].provider->name, ask->cands[0].model);
    h->max_tokens = ask->embeddings ? 0 : ask->max_tokens;
    h->rough_in = ask->est_input_tokens;

    pthread_mutex_lock(&L.mu);
    int64_t now = L.mono(), wall = L.wall();
    /* The client thread does it too, but not without a Report stream (file
     * mode, the control plane away): ended windows must still go. */
    if (now - L.housekept_at >= 1000) {
        L.housekept_at = now;
        housekeep(now, wall);
    }
    int stream_lost = !L.up && (!L.down_since || now - L.down_since >= DP_LIMITS_WAIT_MS);
    for (size_t i = 0; i < n && !h->refused; i++) {
        struct account *a = account_get(ls[i], wall, now);
        if (!a) {
            struct dp_limits_refusal e;
            internal(&e, "too many limit windows are open on this gateway");
            refuse_hold(h, &e, now);
            break;
        }
        struct item *it = &h->items[h->n++];
        it->h = h;
        it->a = a;
        it->need = needs[i];
        a->holders++;
        if (it->need <= 0) {
            it->st = I_OPEN;
            it->need = 0;
        } else if (lease_valid(a, now) && a->balance >= it->need) {
            a->balance -= it->need;
            it->st = I_HELD;
            it->lease = a->lease;
            a->lease->holders++;
        } else if (a->depleted_at && now - a->depleted_at < DEPLETED_MEMORY_MS && a->has_status &&
                   it->need > a->st_remaining) {
            struct dp_limits_refusal e;
            refusal_for(&e, a, 1, it->need, wall);
            it->st = I_OPEN;
            it->need = 0;
            refuse_hold(h, &e, now);
        } else if (stream_lost) {
            it->st = I_WAIT;
            h->waiting++;
            offline_decide(it, now, wall);
        } else {
            it->st = I_WAIT;
            h->waiting++;
            it->next_wait = NULL;
            if (a->wait_tail)
                a->wait_tail->next_wait = it;
            else
                a->wait_head = it;
            a->wait_tail = it;
            if (!a->req) {
                int64_t want = mul_sat(waiting_need(a), WANT_FACTOR);
                request_lease(a, want, it->need);
            }
        }
    }
    if (h->refused) {
        *r = h->refusal;
        for (size_t i = 0; i < h->n; i++)
            h->items[i].a->holders--;
        unlock_notify();
        event_free(ev);
        free(h);
        return DP_LIMITS_REFUSED;
    }
    *hold = h;
    h->building = 0;
    if (h->waiting == 0) {
        h->done = h->delivered = 1;
        unlock_notify();
        event_free(ev);
        return DP_LIMITS_GO;
    }
    /* Only now can a grant wake it (under the lock, which it holds). */
    h->ev = ev;
    struct timeval tv = {DP_LIMITS_WAIT_MS / 1000, (DP_LIMITS_WAIT_MS % 1000) * 1000};
    event_add(ev, &tv);
    unlock_notify();
    return DP_LIMITS_WAIT;
}

size_t dp_limits_charges(struct dp_limits_hold *h, int attempt, const struct canon_usage *u,
                         int64_t cost, int has_cost, const struct dp_price *price,
                         struct dp_charge *out, size_t max)
{
    if (!h)
        return 0;
    /* An attempt whose exact cost is unknown is charged what it cannot
     * have cost more than (its ledger row's cost stays NULL). */
    int64_t money = has_cost ? cost : u ? dp_limits_cost_bound(price, u) : 0;
    size_t k = 0;
    pthread_mutex_lock(&L.mu);
    if (u && u->have) {
        h->output = add_sat(h->output, u->output);
        h->input = canon_usage_prompt(u);
        h->answered = 1;
    }
    for (size_t i = 0; i < h->n && k < max; i++) {
        struct item *it = &h->items[i];
        if (it->st == I_WAIT)
            continue;
        int64_t amount = 0;
        switch (it->a->metric) {
        case DP_LIMIT_REQUESTS:
            amount = attempt == 1;
            break;
        case DP_LIMIT_TOKENS:
            amount = u ? add_sat(canon_usage_prompt(u), u->output) : 0;
            break;
        case DP_LIMIT_COST:
            amount = money > 0 ? money : 0;
            break;
        }
        if (amount <= 0)
            continue;
        it->used = add_sat(it->used, amount);
        struct dp_charge *c = &out[k++];
        memset(c, 0, sizeof(*c));
        snprintf(c->limit_id, sizeof(c->limit_id), "%s", it->a->limit_id);
        c->window_start_ms = it->a->window_start_ms;
        if (it->lease) {
            snprintf(c->lease_id, sizeof(c->lease_id), "%s", it->lease->id);
            it->lease->charged = add_sat(it->lease->charged, amount);
        }
        c->amount = amount;
    }
    pthread_mutex_unlock(&L.mu);
    return k;
}

void dp_limits_end(struct dp_limits_hold *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&L.mu);
    int64_t now = L.mono();
    h->delivered = 1; /* no callback from here on */
    for (size_t i = 0; i < h->n; i++) {
        struct item *it = &h->items[i];
        let_go(it, now);
        it->a->holders--;
        it->a->last_used = now;
    }
    if (h->target && h->answered)
        learn_answer(h->target, h->output, h->max_tokens, h->input, h->rough_in);
    unlock_notify();
    if (h->ev) {
        event_del(h->ev);
        event_free(h->ev);
    }
    free(h);
}

/* ---------------------------------------------------------------- refusal body */

static int num_or_null(struct gw_buf *o, const char *name, int64_t v)
{
    return v >= 0 ? gw_buf_printf(o, ",\"%s\":%lld", name, (long long)v)
                  : gw_buf_printf(o, ",\"%s\":null", name);
}

int dp_limits_refusal_json(const struct dp_limits_refusal *r, struct gw_buf *o)
{
    int rc = gw_buf_appends(o, "{\"id\":");
    if (rc == GW_OK && r->limit_id[0])
        rc = gw_json_escape(o, r->limit_id, strlen(r->limit_id));
    else if (rc == GW_OK)
        rc = gw_buf_appends(o, "null");
    if (rc == GW_OK)
        rc = gw_buf_printf(o,
                           ",\"scope_kind\":\"%s\",\"scope\":", dp_limit_scope_name(r->scope_kind));
    if (rc == GW_OK)
        rc = gw_json_escape(o, r->scope, strlen(r->scope));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"metric\":\"%s\"", dp_limit_metric_name(r->metric));
    if (rc == GW_OK)
        rc = r->has_period ? gw_buf_printf(o, ",\"period\":\"%s\"", dp_limit_period_name(r->period))
                           : gw_buf_appends(o, ",\"period\":null");
    if (rc == GW_OK)
        rc = num_or_null(o, "amount", r->amount);
    if (rc == GW_OK)
        rc = num_or_null(o, "spent", r->spent);
    if (rc == GW_OK)
        rc = num_or_null(o, "remaining", r->remaining);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, ",\"unit\":\"%s\",\"currency\":\"%s\",\"state\":\"%s\"}",
                           r->metric == DP_LIMIT_COST       ? "picodollars"
                           : r->metric == DP_LIMIT_REQUESTS ? "requests"
                                                            : "tokens",
                           r->currency, r->state ? r->state : "");
    return rc;
}
