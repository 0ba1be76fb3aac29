/*
 * dp_limits' holds: the quota step of a request (dp_limits_reserve), its
 * items waiting for a grant or decided by their offline policy, its
 * charges and its end; the refusals and their JSON. The leases and the
 * accounts they are reserved from are dp_limits_lease.c; how much a
 * request reserves, dp_limits_sizing.c.
 */
#include "dp_limits.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_limits_int.h"
#include "dp_router.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_time.h"

/* After a "depleted" refusal, requests needing more than was left are
 * refused here for this long, without asking again. */
#define DEPLETED_MEMORY_MS 1000
/* A lease is asked for ahead of need only while the window has more than
 * this many leases' worth left (hold_from_lease). */
#define PREFETCH_ROOM 16
/* Retry-After for a refusal that is no verdict on the budget. */
#define UNALLOCATED_RETRY_S 5

static int64_t mono_ms_default(void)
{
    return gw_now_us() / 1000;
}

struct dpl_state dpl = {
    .mu = PTHREAD_MUTEX_INITIALIZER, .wall = gw_wall_ms, .mono = mono_ms_default};

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
void dpl_refusal_for(struct dp_limits_refusal *r, const struct account *a, int depleted,
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
        if (dpl_lease_valid(a, now) && a->lease == l)
            a->balance += left; /* below 0 when the answer cost more than reserved */
        else
            dpl_lease_give_back(l, left); /* a retired lease: back to the control plane */
        it->lease = NULL;
        dpl_lease_unhold(l);
    }
    it->need = it->used;
}

void dpl_unwait(struct item *it)
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
        dpl_unwait(it);
    else
        give_back(it, now);
}

/* The hold is refused: everything it reserved goes back, its waits end. */
void dpl_refuse_hold(struct dp_limits_hold *h, const struct dp_limits_refusal *r, int64_t now)
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

void dpl_item_ready(struct item *it)
{
    struct dp_limits_hold *h = it->h;
    if (--h->waiting == 0 && !h->done && !h->building)
        wake(h);
}

/* Decides a waiting item by its limit's offline policy. */
void dpl_offline_decide(struct item *it, int64_t now, int64_t wall)
{
    struct account *a = it->a;
    dpl_unwait(it);
    if (a->fail_closed) {
        struct dp_limits_refusal r;
        dpl_refusal_for(&r, a, 0, it->need, wall);
        dpl_refuse_hold(it->h, &r, now);
        return;
    }
    it->st = I_OPEN; /* charged without a lease */
    it->need = 0;
    dpl_item_ready(it);
}

/* it reserves its need from the account's current lease (valid, with
 * the balance). Once the balance is below a quarter of the lease, the next
 * one is asked for ahead of need, so that reservations go on from the
 * balance while the control plane answers instead of waiting on it; the
 * new lease replaces this one when it comes, and what is left of this one
 * goes back. Only while the window has far more left than the lease
 * (PREFETCH_ROOM leases by the control plane's last word): near a limit,
 * two leases held at once would split what is left into slices too small
 * for a request, and refuse one the window could still pay for. */
static void hold_from_lease(struct account *a, struct item *it, int64_t now)
{
    a->balance -= it->need;
    it->st = I_HELD;
    it->lease = a->lease;
    a->lease->holders++;
    int64_t granted = a->lease->granted;
    int room = a->has_status && a->st_remaining / PREFETCH_ROOM > granted;
    if (!a->req && dpl.up && room && a->balance < granted / 4)
        dpl_request_lease(a, dpl_lease_want(a, now, it->need), it->need);
}

/* Serves the account's waiters from its balance, first come first. */
void dpl_serve_waiters(struct account *a, int64_t now)
{
    while (a->wait_head && dpl_lease_valid(a, now) && a->balance >= a->wait_head->need) {
        struct item *it = a->wait_head;
        dpl_unwait(it);
        hold_from_lease(a, it, now);
        dpl_item_ready(it);
    }
}

int64_t dpl_waiting_need(const struct account *a)
{
    int64_t n = 0;
    for (const struct item *it = a->wait_head; it; it = it->next_wait)
        n = dpl_add_sat(n, it->need);
    return n;
}

/* ---------------------------------------------------------------- request path */

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
    pthread_mutex_lock(&dpl.mu);
    if (h->delivered) {
        pthread_mutex_unlock(&dpl.mu);
        return;
    }
    if (!h->done) { /* the deadline: every limit still waiting meets its policy */
        int64_t now = dpl.mono(), wall = dpl.wall();
        for (size_t i = 0; i < h->n && !h->done; i++)
            if (h->items[i].st == I_WAIT)
                dpl_offline_decide(&h->items[i], now, wall);
    }
    (void)what;
    h->delivered = 1;
    struct dp_limits_refusal r = h->refusal;
    int refused = h->refused;
    dp_limits_cb cb = h->cb;
    void *cbarg = h->arg;
    dpl_unlock_notify();
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
    /* The key's own limits, its team's and its project's, from the
     * snapshot's index by scope. */
    const struct {
        enum dp_limit_scope kind;
        const char *scope;
    } scopes[] = {{DP_LIMIT_KEY, k->id}, {DP_LIMIT_TEAM, k->team}, {DP_LIMIT_PROJECT, k->project}};
    for (size_t si = 0; si < sizeof(scopes) / sizeof(scopes[0]); si++) {
        const struct dp_limit *const *of = NULL;
        size_t nof = scopes[si].scope
                         ? dp_snapshot_limits_of(ask->snap, scopes[si].kind, scopes[si].scope, &of)
                         : 0;
        for (size_t li = 0; li < nof; li++) {
            const struct dp_limit *l = of[li];
            if (n == DP_MAX_CHARGES) {
                internal(r, "more than 8 limits apply to this key; the gateway holds at most 8 per "
                            "request (remove some limits)");
                return DP_LIMITS_REFUSED;
            }
            /* In id order, whatever order the snapshot keeps them in: the
             * hold's items (and so its charges) come out the same on every
             * data plane and every build. */
            size_t at = n++;
            while (at > 0 && strcmp(ls[at - 1]->id, l->id) > 0) {
                ls[at] = ls[at - 1];
                at--;
            }
            ls[at] = l;
            cost_limit |= l->metric == DP_LIMIT_COST;
        }
    }
    const struct dp_team *team = k->team ? dp_snapshot_team(ask->snap, k->team) : NULL;
    if (team && team->require_budget && !cost_limit) {
        never_configured(r, k);
        return DP_LIMITS_REFUSED;
    }
    if (n == 0) {
        /* Nothing to hold, but where limits are in use every answer
         * teaches the estimates (a hold with no items). */
        if (ask->snap->nlimits == 0 || ask->ncands == 0 || !(*hold = calloc(1, sizeof(**hold))))
            return DP_LIMITS_GO;
        (*hold)->target = dpl_target_hash(ask->cands[0].provider->name, ask->cands[0].model);
        (*hold)->max_tokens = ask->embeddings ? 0 : ask->max_tokens;
        (*hold)->rough_in = ask->est_input_tokens;
        (*hold)->done = (*hold)->delivered = 1;
        return DP_LIMITS_GO;
    }

    /* Sizing reads no shared state but the learned estimates (racy reads
     * of a hint are harmless, but the lock keeps them exact). */
    pthread_mutex_lock(&dpl.mu);
    dpl_drop_unpriced(ask, ls, n);
    pthread_mutex_unlock(&dpl.mu);
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
            if (ls[i]->metric == DP_LIMIT_COST && !ls[i]->unpriced_allow) {
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
                 "output%s), and budget '%s' refuses unpriced targets: a gateway that cannot "
                 "price a request cannot hold it to a budget (price the target, or set the "
                 "limit's \"unpriced\" to \"allow\")",
                 ask->cache_marks ? ", the cache writes it asks for" : "", r->limit_id);
        return DP_LIMITS_REFUSED;
    }
    /* A worst case bounds the output with the cap the request will be
     * sent with. */
    int64_t cap = 0;
    for (size_t i = 0; i < n && !ask->embeddings; i++)
        if (ls[i]->worst_case && ls[i]->metric != DP_LIMIT_REQUESTS) {
            if ((cap = dpl_worst_output_cap(ask)) > 0)
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
    pthread_mutex_lock(&dpl.mu);
    for (size_t i = 0; i < n; i++)
        needs[i] = dpl_size_need(ask, ls[i], cap);
    pthread_mutex_unlock(&dpl.mu);

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
        h->target = dpl_target_hash(ask->cands[0].provider->name, ask->cands[0].model);
    h->max_tokens = ask->embeddings ? 0 : ask->max_tokens;
    h->rough_in = ask->est_input_tokens;

    pthread_mutex_lock(&dpl.mu);
    int64_t now = dpl.mono(), wall = dpl.wall();
    /* The client thread does it too, but not without a Report stream (file
     * mode, the control plane away): ended windows must still go. */
    if (now - dpl.housekept_at >= 1000) {
        dpl.housekept_at = now;
        dpl_housekeep(now, wall);
    }
    int stream_lost = !dpl.up && (!dpl.down_since || now - dpl.down_since >= DP_LIMITS_WAIT_MS);
    for (size_t i = 0; i < n && !h->refused; i++) {
        struct account *a = dpl_account_get(ls[i], wall, now);
        if (!a) {
            struct dp_limits_refusal e;
            internal(&e, "too many limit windows are open on this gateway");
            dpl_refuse_hold(h, &e, now);
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
        } else if (dpl_lease_valid(a, now) && a->balance >= it->need) {
            hold_from_lease(a, it, now);
        } else if (a->depleted_at && now - a->depleted_at < DEPLETED_MEMORY_MS && a->has_status &&
                   it->need > a->st_remaining) {
            struct dp_limits_refusal e;
            dpl_refusal_for(&e, a, 1, it->need, wall);
            it->st = I_OPEN;
            it->need = 0;
            dpl_refuse_hold(h, &e, now);
        } else if (stream_lost) {
            it->st = I_WAIT;
            h->waiting++;
            dpl_offline_decide(it, now, wall);
        } else {
            it->st = I_WAIT;
            h->waiting++;
            it->next_wait = NULL;
            if (a->wait_tail)
                a->wait_tail->next_wait = it;
            else
                a->wait_head = it;
            a->wait_tail = it;
            if (!a->req)
                dpl_request_lease(a, dpl_lease_want(a, now, dpl_waiting_need(a)), it->need);
        }
    }
    if (h->refused) {
        *r = h->refusal;
        for (size_t i = 0; i < h->n; i++)
            h->items[i].a->holders--;
        dpl_unlock_notify();
        event_free(ev);
        free(h);
        return DP_LIMITS_REFUSED;
    }
    *hold = h;
    h->building = 0;
    if (h->waiting == 0) {
        h->done = h->delivered = 1;
        dpl_unlock_notify();
        event_free(ev);
        return DP_LIMITS_GO;
    }
    /* Only now can a grant wake it (under the lock, which it holds). */
    h->ev = ev;
    struct timeval tv = {DP_LIMITS_WAIT_MS / 1000, (DP_LIMITS_WAIT_MS % 1000) * 1000};
    event_add(ev, &tv);
    dpl_unlock_notify();
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
    pthread_mutex_lock(&dpl.mu);
    if (u && u->have) {
        h->output = dpl_add_sat(h->output, u->output);
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
            amount = u ? dpl_add_sat(canon_usage_prompt(u), u->output) : 0;
            break;
        case DP_LIMIT_COST:
            amount = money > 0 ? money : 0;
            break;
        }
        if (amount <= 0)
            continue;
        it->used = dpl_add_sat(it->used, amount);
        struct dp_charge *c = &out[k++];
        memset(c, 0, sizeof(*c));
        snprintf(c->limit_id, sizeof(c->limit_id), "%s", it->a->limit_id);
        c->window_start_ms = it->a->window_start_ms;
        if (it->lease) {
            snprintf(c->lease_id, sizeof(c->lease_id), "%s", it->lease->id);
            it->lease->charged = dpl_add_sat(it->lease->charged, amount);
        }
        c->amount = amount;
    }
    pthread_mutex_unlock(&dpl.mu);
    return k;
}

void dp_limits_end(struct dp_limits_hold *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&dpl.mu);
    int64_t now = dpl.mono();
    h->delivered = 1; /* no callback from here on */
    for (size_t i = 0; i < h->n; i++) {
        struct item *it = &h->items[i];
        let_go(it, now);
        it->a->holders--;
        it->a->last_used = now;
    }
    if (h->target && h->answered)
        dpl_learn_answer(h->target, h->output, h->max_tokens, h->input, h->rough_in);
    dpl_unlock_notify();
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
