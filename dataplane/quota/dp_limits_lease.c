/*
 * dp_limits' leases and accounts: what this replica was granted of each
 * limit in each window, kept until the control plane has its final report,
 * and the account (limit, window) reserving from the current one; the
 * periodic work; and the control-plane client's side (dp_limits.h): the
 * lease messages out, the grants and answers in, the stream's state.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_limits_int.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_time.h"

/* A lease is used until this long before its life, counted from when its
 * request was sent, runs out (the control plane starts counting later). */
#define EXPIRY_MARGIN_MS 2000
/* A report the control plane could not take (its database away) goes
 * again after this long. */
#define REPORT_RETRY_MS 1000
/* Accounts (limit × window) kept at most; an idle one is forgotten. */
#define MAX_ACCOUNTS 4096
#define IDLE_FORGET_MS 600000
/* A lease asked for this soon after the last one came is at least as
 * large; sooner than LEASE_FAST_MS, twice as large (dpl_lease_want). */
#define LEASE_RECENT_MS 30000
#define LEASE_FAST_MS 5000

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
    if (!dpl.next_req && gw_random_bytes(&dpl.next_req, sizeof(dpl.next_req)) != GW_OK)
        dpl.next_req = (uint64_t)gw_now_us();
    dpl.next_req = ((dpl.next_req + 1) & (REQ_LOW - 1)) | REQ_LOW;
    return dpl.next_req;
}

static struct lease *lease_find(const char *id)
{
    for (struct lease *l = dpl.leases; l; l = l->next)
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
    l->next = dpl.leases;
    dpl.leases = l;
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
void dpl_lease_give_back(struct lease *l, int64_t amount)
{
    if (amount <= 0)
        return;
    int64_t r = dpl_add_sat(l->released, amount);
    l->released = r > l->granted ? l->granted : r;
    lease_touch(l);
}

/* The account stops reserving from its lease: its balance goes back. */
static void retire(struct account *a)
{
    struct lease *l = a->lease;
    if (!l)
        return;
    dpl_lease_give_back(l, a->balance);
    l->current = 0;
    l->renew = 0;
    if (lease_final(l))
        lease_touch(l);
    a->lease = NULL;
    a->balance = 0;
    a->lease_until = a->lease_life = 0;
}

/* An item lets go of its lease (its request ended or was refused). */
void dpl_lease_unhold(struct lease *l)
{
    if (--l->holders == 0 && !l->current)
        lease_touch(l);
}

static void lease_free(struct lease *l)
{
    for (struct lease **pp = &dpl.leases; *pp; pp = &(*pp)->next)
        if (*pp == l) {
            *pp = l->next;
            free(l);
            return;
        }
}

int dpl_lease_valid(const struct account *a, int64_t now)
{
    return a->lease && now < a->lease_until;
}

/* How much to ask for: WANT_FACTOR times base (what waits, or the
 * request at hand), and no less than the last lease when it came within
 * LEASE_RECENT_MS, twice it when within LEASE_FAST_MS (it went that fast:
 * the account spends more than it held). The control plane grants at
 * most a share of what remains (cp_leases.h). */
int64_t dpl_lease_want(const struct account *a, int64_t now, int64_t base)
{
    int64_t want = dpl_mul_sat(base, WANT_FACTOR);
    if (a->last_grant > 0 && now - a->last_grant_at < LEASE_RECENT_MS) {
        int64_t again =
            now - a->last_grant_at < LEASE_FAST_MS ? dpl_mul_sat(a->last_grant, 2) : a->last_grant;
        if (again > want)
            want = again;
    }
    return want;
}

/* Asks for a slice (want > 0). */
void dpl_request_lease(struct account *a, int64_t want, int64_t need)
{
    a->req = new_req();
    a->req_sent = 0;
    a->req_want = want;
    a->req_need = need;
}

/* ---------------------------------------------------------------- accounts */

static struct account *account_find(const char *limit_id, int64_t window_start)
{
    for (struct account *a = dpl.accounts; a; a = a->next)
        if (a->window_start_ms == window_start && strcmp(a->limit_id, limit_id) == 0)
            return a;
    return NULL;
}

struct account *dpl_account_get(const struct dp_limit *l, int64_t wall, int64_t now)
{
    int64_t start, end;
    window_of(l->period, wall, &start, &end);
    struct account *a = account_find(l->id, start);
    if (!a) {
        if (dpl.naccounts >= MAX_ACCOUNTS || !(a = calloc(1, sizeof(*a))))
            return NULL;
        snprintf(a->limit_id, sizeof(a->limit_id), "%s", l->id);
        a->window_start_ms = start;
        a->window_end_ms = end;
        a->next = dpl.accounts;
        dpl.accounts = a;
        dpl.naccounts++;
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
void dpl_housekeep(int64_t now, int64_t wall)
{
    struct account **pp = &dpl.accounts;
    while (*pp) {
        struct account *a = *pp;
        if (a->lease && now >= a->lease_until)
            retire(a); /* nothing more is reserved from it; its report settles it */
        int half = a->lease && a->lease_until - now < a->lease_life / 2;
        if (half && !a->lease->renew && !a->lease->sent_renew && dpl.up) {
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
            dpl.naccounts--;
            free(a);
            continue;
        }
        pp = &a->next;
    }
    /* A lease the control plane does not know is forgotten once done. */
    for (struct lease **lp = &dpl.leases; *lp;) {
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
    if (!dpl.up)
        return 0;
    int64_t now = dpl.mono();
    for (const struct lease *l = dpl.leases; l; l = l->next)
        if (report_due(l, now))
            return 1;
    for (struct account *a = dpl.accounts; a; a = a->next)
        if (a->req && !a->req_sent)
            return 1;
    return 0;
}

/* Unlocks, then tells the client thread when there is something to send. */
void dpl_unlock_notify(void)
{
    int send = has_outgoing();
    void (*fn)(void *) = dpl.notify;
    void *arg = dpl.notify_arg;
    pthread_mutex_unlock(&dpl.mu);
    if (send && fn)
        fn(arg);
}

/* ---------------------------------------------------------------- client thread */

int dp_limits_next_out(Llmgw__V1__ReportMessage *m, struct dp_limits_out *st)
{
    pthread_mutex_lock(&dpl.mu);
    int64_t now = dpl.mono();
    dpl_housekeep(now, dpl.wall());
    if (!dpl.up) {
        pthread_mutex_unlock(&dpl.mu);
        return 0;
    }
    llmgw__v1__lease_request__init(&st->request);
    for (struct lease *l = dpl.leases; l; l = l->next) {
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
        pthread_mutex_unlock(&dpl.mu);
        return 1;
    }
    for (struct account *a = dpl.accounts; a; a = a->next) {
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
        pthread_mutex_unlock(&dpl.mu);
        return 1;
    }
    pthread_mutex_unlock(&dpl.mu);
    return 0;
}

size_t dp_limits_pending(void)
{
    size_t n = 0;
    pthread_mutex_lock(&dpl.mu);
    for (const struct lease *l = dpl.leases; l; l = l->next)
        n += l->dirty || l->sent_req;
    pthread_mutex_unlock(&dpl.mu);
    return n;
}

void dp_limits_set_notify(void (*fn)(void *), void *arg)
{
    pthread_mutex_lock(&dpl.mu);
    dpl.notify = fn;
    dpl.notify_arg = arg;
    pthread_mutex_unlock(&dpl.mu);
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
    pthread_mutex_lock(&dpl.mu);
    int64_t now = dpl.mono(), wall = dpl.wall();
    const char *lease = g->lease_id ? g->lease_id : "";
    const char *refusal = g->refusal ? g->refusal : "";
    for (struct lease *l = dpl.leases; g->req && l; l = l->next)
        if (l->sent_req == g->req) {
            on_report_answer(l, g, now, wall);
            dpl_unlock_notify();
            return;
        }
    struct account *a = g->limit_id ? account_find(g->limit_id, g->window_start_ms) : NULL;
    if (!a || a->req != g->req) {
        /* Nobody asked for it (any more): not ours to keep. */
        if (lease[0] && g->amount > 0 && strlen(lease) < LEASE_ID_MAX && !lease_find(lease)) {
            struct lease *l =
                lease_new(lease, g->limit_id ? g->limit_id : "", g->window_start_ms, g->amount);
            if (l) {
                dpl_lease_give_back(l, g->amount);
                lease_touch(l);
            }
        }
        dpl_unlock_notify();
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
                a->last_grant = g->amount;
                a->last_grant_at = now;
                a->lease_until = until;
                a->lease_life = until - a->req_sent_at;
            } else if (l) {
                dpl_lease_give_back(l, g->amount); /* unusable: already expired */
                lease_touch(l);
            }
        }
        dpl_serve_waiters(a, now);
        if (a->wait_head && !a->req) {
            int64_t need = a->wait_head->need;
            int64_t want = dpl_lease_want(a, now, dpl_waiting_need(a));
            dpl_request_lease(a, want > need ? want : need, need);
        }
    } else if (strcmp(refusal, "depleted") == 0) {
        a->depleted_at = now;
        while (a->wait_head) {
            struct item *it = a->wait_head;
            struct dp_limits_refusal r;
            dpl_refusal_for(&r, a, 1, it->need, wall);
            dpl_refuse_hold(it->h, &r, now); /* unwaits it, and the hold's others */
            if (a->wait_head == it)
                dpl_unwait(it);
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
                dpl_unwait(it);
                it->st = I_OPEN;
                it->need = 0;
                dpl_item_ready(it);
            } else {
                dpl_offline_decide(it, now, wall);
            }
            if (a->wait_head == it)
                dpl_unwait(it);
        }
    }
    dpl_unlock_notify();
}

void dp_limits_on_stream(int up)
{
    pthread_mutex_lock(&dpl.mu);
    int64_t now = dpl.mono();
    if (!up && (dpl.up || !dpl.down_since))
        dpl.down_since = now;
    dpl.up = up;
    /* Requests and reports sent on the lost stream go again on the next
     * (a request with its number: the control plane answers it with the
     * lease it may already have granted); requests not sent yet wait for
     * it. Their waiters keep their own deadlines. */
    if (!up) {
        for (struct account *a = dpl.accounts; a; a = a->next)
            if (a->req)
                a->req_sent = 0;
        for (struct lease *l = dpl.leases; l; l = l->next)
            if (l->sent_req) {
                l->sent_req = 0;
                l->renew |= l->sent_renew;
                l->sent_final = l->sent_renew = 0;
                lease_touch(l);
            }
    }
    dpl_unlock_notify();
}

void dp_limits_release_all(void)
{
    pthread_mutex_lock(&dpl.mu);
    for (struct account *a = dpl.accounts; a; a = a->next)
        retire(a);
    dpl_unlock_notify();
}
