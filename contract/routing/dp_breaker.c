/*
 * The breaker table: a chained hash of targets keyed by (provider, model),
 * threaded on an LRU list so the table can stay within max_targets, all
 * under one mutex (every verb is a few dozen instructions). State changes
 * are queued under the lock and handed to the callback after it.
 */
#include "dp_breaker.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_target.h"

#define NBUCKETS 10
/* A probe slot not given back within this long is taken back, so a caller
 * that loses a probe's outcome cannot keep its target half-open forever. */
#define PROBE_LEASE_US (300 * INT64_C(1000000))
/* State changes waiting for the callback; beyond this they are dropped
 * (only a callback that blocks for long could fill it). */
#define MAX_PENDING 4096

static const struct dp_breaker_cfg defaults = {
    .window_us = 30 * INT64_C(1000000),
    .min_samples = 3,
    .failure_pct = 50,
    .open_us = 5 * INT64_C(1000000),
    .max_open_us = 60 * INT64_C(1000000),
    .jitter_pct = 20,
    .probes = 1,
    .close_after = 1,
    .max_targets = 4096,
};

/* One slice of the sliding window: the outcomes whose time fell in slice
 * number `slot` (time / bucket length). */
struct bucket {
    int64_t slot;
    unsigned ok, fail;
};

struct target {
    struct target *next;          /* hash chain */
    struct target *newer, *older; /* LRU list */
    uint64_t hash;
    struct gw_target_key tk;     /* in key[] */
    enum dp_breaker_state state; /* OPEN also after its interval, until an admit sees it */
    int64_t open_until;          /* OPEN: when it turns half-open */
    int64_t backoff_us;          /* the last un-jittered interval; 0 after a close */
    unsigned probes_out;         /* probes admitted and not yet recorded */
    int64_t probe_at;            /* when the last probe slot was taken */
    unsigned probe_ok;           /* successful probes in this half-open period */
    unsigned consec_fail;        /* health-relevant failures in a row */
    int64_t ttfb_ewma_us;
    struct bucket win[NBUCKETS];
    char key[]; /* provider NUL model NUL */
};

/* A state change to hand to the callback once the lock is released. */
struct change {
    struct change *next;
    enum dp_breaker_state from, to;
    int64_t at_us;
    struct gw_target_key tk; /* in key[] */
    char key[];
};

struct dp_breakers {
    pthread_mutex_t lock;
    struct dp_breaker_cfg cfg;
    int64_t bucket_us;
    struct target **heads;
    size_t mask;
    unsigned count;
    struct target *newest, *oldest;

    dp_breaker_change_fn on_change;
    void *on_change_arg;
    struct change *pending, **pending_tail;
    unsigned npending;
    int delivering; /* one thread at a time drains pending, in order */
};

static const char *const state_names[] = {
    [DP_BREAKER_CLOSED] = "closed",
    [DP_BREAKER_OPEN] = "open",
    [DP_BREAKER_HALF_OPEN] = "half_open",
};

const char *dp_breaker_state_name(enum dp_breaker_state s)
{
    return (unsigned)s < sizeof(state_names) / sizeof(*state_names) ? state_names[s] : "closed";
}

/* The default callback: one log line per change, never request content. */
void dp_breaker_log_change(void *arg, const char *provider, const char *model,
                           enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us)
{
    gw_logf(to == DP_BREAKER_OPEN ? GW_LOG_WARN : GW_LOG_INFO, "breaker state change",
            "{s:s,s:s,s:s,s:s}", "provider", provider, "model", model, "from",
            dp_breaker_state_name(from), "to", dp_breaker_state_name(to));
}

/* ------------------------------------------------------------ lifecycle */

struct dp_breakers *dp_breakers_new(const struct dp_breaker_cfg *cfg)
{
    struct dp_breakers *b = calloc(1, sizeof(*b));
    if (!b)
        return NULL;
    b->cfg = defaults;
    if (cfg) {
        if (cfg->window_us > 0)
            b->cfg.window_us = cfg->window_us;
        if (cfg->min_samples)
            b->cfg.min_samples = cfg->min_samples;
        if (cfg->failure_pct)
            b->cfg.failure_pct = cfg->failure_pct;
        if (cfg->open_us > 0)
            b->cfg.open_us = cfg->open_us;
        if (cfg->max_open_us > 0)
            b->cfg.max_open_us = cfg->max_open_us;
        b->cfg.jitter_pct = cfg->jitter_pct;
        if (cfg->probes)
            b->cfg.probes = cfg->probes;
        if (cfg->close_after)
            b->cfg.close_after = cfg->close_after;
        if (cfg->max_targets)
            b->cfg.max_targets = cfg->max_targets;
    }
    if (b->cfg.jitter_pct > 100)
        b->cfg.jitter_pct = 100;
    if (b->cfg.max_open_us < b->cfg.open_us)
        b->cfg.max_open_us = b->cfg.open_us;
    b->bucket_us = b->cfg.window_us / NBUCKETS;
    if (b->bucket_us < 1)
        b->bucket_us = 1;

    size_t n = 16;
    while (n < b->cfg.max_targets && n < ((size_t)1 << 20))
        n <<= 1;
    b->heads = calloc(n, sizeof(*b->heads));
    if (!b->heads || pthread_mutex_init(&b->lock, NULL) != 0) {
        free(b->heads);
        free(b);
        return NULL;
    }
    b->mask = n - 1;
    b->on_change = dp_breaker_log_change;
    b->pending_tail = &b->pending;
    return b;
}

void dp_breakers_free(struct dp_breakers *b)
{
    if (!b)
        return;
    for (struct target *t = b->newest, *next; t; t = next) {
        next = t->older;
        free(t);
    }
    for (struct change *c = b->pending, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    pthread_mutex_destroy(&b->lock);
    free(b->heads);
    free(b);
}

void dp_breakers_on_change(struct dp_breakers *b, dp_breaker_change_fn fn, void *arg)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->lock);
    b->on_change = fn ? fn : dp_breaker_log_change;
    b->on_change_arg = fn ? arg : NULL;
    pthread_mutex_unlock(&b->lock);
}

/* ---------------------------------------------------------------- table */

static void lru_unlink(struct dp_breakers *b, struct target *t)
{
    if (t->newer)
        t->newer->older = t->older;
    else
        b->newest = t->older;
    if (t->older)
        t->older->newer = t->newer;
    else
        b->oldest = t->newer;
    t->newer = t->older = NULL;
}

static void lru_push(struct dp_breakers *b, struct target *t)
{
    t->newer = NULL;
    t->older = b->newest;
    if (b->newest)
        b->newest->newer = t;
    else
        b->oldest = t;
    b->newest = t;
}

/* The target, made the most recently used; NULL when not tracked. */
static struct target *find(struct dp_breakers *b, const char *provider, const char *model)
{
    uint64_t h = gw_target_hash(provider, model);
    for (struct target *t = b->heads[h & b->mask]; t; t = t->next)
        if (t->hash == h && gw_target_is(&t->tk, provider, model)) {
            if (b->newest != t) {
                lru_unlink(b, t);
                lru_push(b, t);
            }
            return t;
        }
    return NULL;
}

static void forget(struct dp_breakers *b, struct target *t)
{
    struct target **pp = &b->heads[t->hash & b->mask];
    while (*pp != t)
        pp = &(*pp)->next;
    *pp = t->next;
    lru_unlink(b, t);
    b->count--;
    free(t);
}

/* A new closed target with an empty window. When the table is full, the
 * least recently used closed target with no probe out makes room; when
 * none may go (every one is open, half-open or probing), NULL: the caller
 * does not track this target. */
static struct target *add(struct dp_breakers *b, const char *provider, const char *model)
{
    if (b->count >= b->cfg.max_targets) {
        struct target *victim = b->oldest;
        while (victim && (victim->state != DP_BREAKER_CLOSED || victim->probes_out))
            victim = victim->newer;
        if (!victim)
            return NULL;
        forget(b, victim);
    }
    struct target *t = calloc(1, sizeof(*t) + gw_target_key_size(provider, model));
    if (!t)
        return NULL;
    gw_target_key_copy(&t->tk, t->key, provider, model);
    t->hash = gw_target_hash(provider, model);
    t->state = DP_BREAKER_CLOSED;
    for (int i = 0; i < NBUCKETS; i++)
        t->win[i].slot = -1;
    struct target **head = &b->heads[t->hash & b->mask];
    t->next = *head;
    *head = t;
    lru_push(b, t);
    b->count++;
    return t;
}

/* --------------------------------------------------------------- window */

static int64_t slot_of(const struct dp_breakers *b, int64_t at_us)
{
    return at_us > 0 ? at_us / b->bucket_us : 0;
}

static void window_add(const struct dp_breakers *b, struct target *t, int ok, int64_t at_us)
{
    int64_t slot = slot_of(b, at_us);
    struct bucket *k = &t->win[slot % NBUCKETS];
    if (k->slot > slot)
        return; /* older than the whole window (a late report) */
    if (k->slot != slot) {
        k->slot = slot;
        k->ok = k->fail = 0;
    }
    if (ok)
        k->ok++;
    else
        k->fail++;
}

static void window_sum(const struct dp_breakers *b, const struct target *t, int64_t now_us,
                       unsigned *samples, unsigned *failures)
{
    int64_t slot = slot_of(b, now_us);
    *samples = *failures = 0;
    for (int i = 0; i < NBUCKETS; i++)
        if (t->win[i].slot > slot - NBUCKETS && t->win[i].slot <= slot) {
            *samples += t->win[i].ok + t->win[i].fail;
            *failures += t->win[i].fail;
        }
}

static void window_clear(struct target *t)
{
    for (int i = 0; i < NBUCKETS; i++) {
        t->win[i].slot = -1;
        t->win[i].ok = t->win[i].fail = 0;
    }
}

/* ---------------------------------------------------------- transitions */

/* Queues a state change for the callback (called with the lock held). */
static void set_state(struct dp_breakers *b, struct target *t, enum dp_breaker_state to,
                      int64_t at_us)
{
    enum dp_breaker_state from = t->state;
    t->state = to;
    if (b->npending >= MAX_PENDING)
        return;
    struct change *c = malloc(sizeof(*c) + gw_target_key_size(t->tk.provider, t->tk.model));
    if (!c)
        return;
    gw_target_key_copy(&c->tk, c->key, t->tk.provider, t->tk.model);
    c->from = from;
    c->to = to;
    c->at_us = at_us;
    c->next = NULL;
    *b->pending_tail = c;
    b->pending_tail = &c->next;
    b->npending++;
}

/* Hands queued changes to the callback outside the lock. One thread
 * delivers at a time and takes every change queued meanwhile, so the
 * callback sees them one by one in the order they happened, and may call
 * back into the table. */
static void deliver(struct dp_breakers *b)
{
    pthread_mutex_lock(&b->lock);
    if (b->delivering) {
        pthread_mutex_unlock(&b->lock);
        return;
    }
    b->delivering = 1;
    struct change *c;
    while ((c = b->pending) != NULL) {
        b->pending = c->next;
        if (!b->pending)
            b->pending_tail = &b->pending;
        b->npending--;
        dp_breaker_change_fn fn = b->on_change;
        void *arg = b->on_change_arg;
        pthread_mutex_unlock(&b->lock);
        fn(arg, c->tk.provider, c->tk.model, c->from, c->to, c->at_us);
        free(c);
        pthread_mutex_lock(&b->lock);
    }
    b->delivering = 0;
    pthread_mutex_unlock(&b->lock);
}

/* base +- jitter_pct %, uniformly. */
static int64_t jittered(const struct dp_breakers *b, int64_t base)
{
    int64_t span = (int64_t)((double)base * b->cfg.jitter_pct / 100.0);
    uint64_t r;
    if (span <= 0 || gw_random_bytes(&r, sizeof(r)) != GW_OK)
        return base;
    return base - span + (int64_t)(r % (uint64_t)(2 * span + 1));
}

/* Opens t: the first interval after a close is open_us, each reopening
 * doubles it up to max_open_us; jitter applies to the capped value. */
static void open_target(struct dp_breakers *b, struct target *t, int64_t at_us)
{
    if (!t->backoff_us)
        t->backoff_us = b->cfg.open_us;
    else if (t->backoff_us > b->cfg.max_open_us / 2)
        t->backoff_us = b->cfg.max_open_us;
    else
        t->backoff_us *= 2;
    if (t->backoff_us > b->cfg.max_open_us)
        t->backoff_us = b->cfg.max_open_us;
    t->open_until = at_us + jittered(b, t->backoff_us);
    t->probe_ok = 0;
    set_state(b, t, DP_BREAKER_OPEN, at_us);
}

static void close_target(struct dp_breakers *b, struct target *t, int64_t at_us)
{
    t->backoff_us = 0;
    t->probe_ok = 0;
    t->consec_fail = 0;
    window_clear(t);
    set_state(b, t, DP_BREAKER_CLOSED, at_us);
}

static enum dp_breaker_state state_at(const struct target *t, int64_t now_us)
{
    if (t->state == DP_BREAKER_OPEN && now_us >= t->open_until)
        return DP_BREAKER_HALF_OPEN;
    return t->state;
}

/* ---------------------------------------------------------------- verbs */

enum dp_admit dp_breaker_admit(struct dp_breakers *b, const char *provider, const char *model,
                               int64_t now_us)
{
    if (!b || !provider || !model)
        return DP_ADMIT_YES;
    enum dp_admit r = DP_ADMIT_YES;
    int changed = 0;
    pthread_mutex_lock(&b->lock);
    struct target *t = find(b, provider, model);
    if (t && t->state != DP_BREAKER_CLOSED) {
        r = DP_ADMIT_NO;
        if (state_at(t, now_us) == DP_BREAKER_HALF_OPEN && t->state == DP_BREAKER_OPEN) {
            set_state(b, t, DP_BREAKER_HALF_OPEN, t->open_until);
            changed = 1;
        }
        if (t->state == DP_BREAKER_HALF_OPEN) {
            if (t->probes_out >= b->cfg.probes && now_us - t->probe_at >= PROBE_LEASE_US)
                t->probes_out = 0; /* lost probes: their outcomes never came */
            if (t->probes_out < b->cfg.probes) {
                t->probes_out++;
                t->probe_at = now_us;
                r = DP_ADMIT_PROBE;
            }
        }
    }
    pthread_mutex_unlock(&b->lock);
    if (changed)
        deliver(b);
    return r;
}

enum dp_breaker_state dp_breaker_peek(struct dp_breakers *b, const char *provider,
                                      const char *model, int64_t now_us)
{
    if (!b || !provider || !model)
        return DP_BREAKER_CLOSED;
    pthread_mutex_lock(&b->lock);
    struct target *t = find(b, provider, model);
    enum dp_breaker_state s = t ? state_at(t, now_us) : DP_BREAKER_CLOSED;
    pthread_mutex_unlock(&b->lock);
    return s;
}

/* Whether a closed target's window now says open: the failure ratio over
 * enough samples, or the last min_samples outcomes all failures. */
static int should_open(const struct dp_breakers *b, const struct target *t, int64_t now_us)
{
    if (t->consec_fail >= b->cfg.min_samples)
        return 1;
    unsigned samples, failures;
    window_sum(b, t, now_us, &samples, &failures);
    return samples >= b->cfg.min_samples &&
           (uint64_t)failures * 100 >= (uint64_t)b->cfg.failure_pct * samples;
}

void dp_breaker_record(struct dp_breakers *b, const struct dp_outcome *o, int probe)
{
    if (!b || !o || !o->provider || !o->model)
        return;
    int verdict = o->ok || canon_failure_counts(o->failure);
    int changed = 0;
    pthread_mutex_lock(&b->lock);
    struct target *t = find(b, o->provider, o->model);
    if (!t && verdict)
        t = add(b, o->provider, o->model);
    if (!t)
        goto out;
    if (probe && t->probes_out)
        t->probes_out--;
    if (!verdict)
        goto out;

    window_add(b, t, o->ok, o->at_us);
    if (o->ok) {
        t->consec_fail = 0;
        if (o->ttfb_us > 0)
            t->ttfb_ewma_us =
                t->ttfb_ewma_us ? t->ttfb_ewma_us + (o->ttfb_us - t->ttfb_ewma_us) / 5 : o->ttfb_us;
    } else {
        t->consec_fail++;
    }

    switch (t->state) {
    case DP_BREAKER_CLOSED:
        if (!o->ok && should_open(b, t, o->at_us)) {
            open_target(b, t, o->at_us);
            changed = 1;
        }
        break;
    case DP_BREAKER_HALF_OPEN:
        /* Only probes decide; an attempt admitted before the breaker
         * opened that ends now says nothing about the target's recovery. */
        if (!probe)
            break;
        if (!o->ok)
            open_target(b, t, o->at_us);
        else if (++t->probe_ok >= b->cfg.close_after)
            close_target(b, t, o->at_us);
        else
            break;
        changed = 1;
        break;
    case DP_BREAKER_OPEN:
        break; /* a late outcome: it already counted in the window */
    }
out:
    pthread_mutex_unlock(&b->lock);
    if (changed)
        deliver(b);
}

void dp_breaker_stats(struct dp_breakers *b, const char *provider, const char *model,
                      int64_t now_us, struct dp_target_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->state = DP_BREAKER_CLOSED;
    st->success_permil = 1000;
    if (!b || !provider || !model)
        return;
    pthread_mutex_lock(&b->lock);
    struct target *t = find(b, provider, model);
    if (t) {
        st->state = state_at(t, now_us);
        window_sum(b, t, now_us, &st->samples, &st->failures);
        if (st->samples)
            st->success_permil =
                (unsigned)((uint64_t)(st->samples - st->failures) * 1000 / st->samples);
        st->ttfb_ewma_us = t->ttfb_ewma_us;
    }
    pthread_mutex_unlock(&b->lock);
}
