/*
 * The outcome shards and the breaker-change table (dp_outcomes.h). A shard
 * is a small chained hash of cells, one per target, each the target's
 * counts since the last harvest; the harvest steals every shard's cells
 * under its lock (a few pointer moves) and merges them outside it.
 */
#include "dp_outcomes.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "gw_target.h"
#include "gw_time.h"

#define SHARD_HEADS 64
#define MERGE_HEADS 256
#define MAX_CHANGES 16 /* per target per interval; later ones are dropped */
#define MAX_BREAKERS 4096

const uint64_t dp_outcomes_bounds_ms[DP_OUTCOMES_NBUCKETS - 1] = {50,   100,  250,   500,  1000,
                                                                  2500, 5000, 10000, 30000};

unsigned dp_outcomes_bucket(uint64_t ms)
{
    unsigned i = 0;
    while (i < DP_OUTCOMES_NBUCKETS - 1 && ms > dp_outcomes_bounds_ms[i])
        i++;
    return i;
}

struct dsum {
    uint64_t count, sum_ms, max_ms;
    uint64_t b[DP_OUTCOMES_NBUCKETS];
};

/* One target's counts in a shard (or, during a harvest, merged). */
struct cell {
    struct cell *next;
    uint64_t hash;
    uint64_t ok, probe_ok, probe_failed, skipped;
    uint64_t fail[CANON_FAIL_COUNT];
    struct dsum lat, ttfb, ttfc;
    struct gw_target_key tk; /* in key[] */
    char key[];
};

struct shard {
    pthread_mutex_t lock;
    struct shard *next;
    struct cell *heads[SHARD_HEADS];
    unsigned n;
};

struct change {
    enum dp_breaker_state from, to;
    int64_t at_ms;
};

/* A target whose breaker is not closed, or changed since the harvest. */
struct btarget {
    struct btarget *next;
    uint64_t hash;
    enum dp_breaker_state state;
    unsigned nchanges;
    int reported; /* during a harvest: already in the summary */
    struct change changes[MAX_CHANGES];
    struct gw_target_key tk; /* in key[] */
    char key[];
};

static pthread_mutex_t shards_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shard *shards;
static uint64_t generation = 1; /* bumped by reset: threads then take new shards */
static __thread struct shard *my_shard;
static __thread uint64_t my_generation;

static pthread_mutex_t btab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct btarget *btab;
static unsigned nbtab;

static void (*notify_fn)(void *);
static void *notify_arg;
static uint64_t dropped;

static void dsum_add(struct dsum *d, uint64_t ms)
{
    d->count++;
    d->sum_ms += ms;
    if (ms > d->max_ms)
        d->max_ms = ms;
    d->b[dp_outcomes_bucket(ms)]++;
}

static void dsum_merge(struct dsum *d, const struct dsum *s)
{
    d->count += s->count;
    d->sum_ms += s->sum_ms;
    if (s->max_ms > d->max_ms)
        d->max_ms = s->max_ms;
    for (int i = 0; i < DP_OUTCOMES_NBUCKETS; i++)
        d->b[i] += s->b[i];
}

static struct cell *cell_new(const char *provider, const char *model, uint64_t h)
{
    struct cell *c = calloc(1, sizeof(*c) + gw_target_key_size(provider, model));
    if (!c)
        return NULL;
    gw_target_key_copy(&c->tk, c->key, provider, model);
    c->hash = h;
    return c;
}

static struct cell *cell_find(struct cell **heads, size_t nheads, const char *provider,
                              const char *model, uint64_t h)
{
    for (struct cell *c = heads[h % nheads]; c; c = c->next)
        if (c->hash == h && gw_target_is(&c->tk, provider, model))
            return c;
    return NULL;
}

static struct shard *shard_get(void)
{
    uint64_t g = __atomic_load_n(&generation, __ATOMIC_ACQUIRE);
    if (my_shard && my_generation == g)
        return my_shard;
    struct shard *s = calloc(1, sizeof(*s));
    if (!s || pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&shards_lock);
    s->next = shards;
    shards = s;
    pthread_mutex_unlock(&shards_lock);
    my_shard = s;
    my_generation = g;
    return s;
}

static void notify(void)
{
    pthread_mutex_lock(&shards_lock);
    void (*fn)(void *) = notify_fn;
    void *arg = notify_arg;
    pthread_mutex_unlock(&shards_lock);
    if (fn)
        fn(arg);
}

void dp_outcomes_set_notify(void (*fn)(void *arg), void *arg)
{
    pthread_mutex_lock(&shards_lock);
    notify_fn = fn;
    notify_arg = arg;
    pthread_mutex_unlock(&shards_lock);
}

/* This thread's cell for a target, with the shard's lock held (the caller
 * unlocks *held); NULL (nothing held) when the shard is full. */
static struct cell *cell_get(const char *provider, const char *model, struct shard **held)
{
    struct shard *s = shard_get();
    *held = NULL;
    if (!s)
        return NULL;
    uint64_t h = gw_target_hash(provider, model);
    pthread_mutex_lock(&s->lock);
    struct cell *c = cell_find(s->heads, SHARD_HEADS, provider, model, h);
    if (!c && s->n < DP_OUTCOMES_MAX_TARGETS && (c = cell_new(provider, model, h))) {
        c->next = s->heads[h % SHARD_HEADS];
        s->heads[h % SHARD_HEADS] = c;
        s->n++;
    }
    if (!c) {
        pthread_mutex_unlock(&s->lock);
        __atomic_add_fetch(&dropped, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    *held = s;
    return c;
}

void dp_outcomes_skip(const char *provider, const char *model)
{
    if (!provider || !model)
        return;
    struct shard *s;
    struct cell *c = cell_get(provider, model, &s);
    if (c) {
        c->skipped++;
        pthread_mutex_unlock(&s->lock);
    }
}

void dp_outcomes_record(const struct dp_outcome *o, int fleet_probe)
{
    if (!o || !o->provider || !o->model || (!o->ok && o->failure == CANON_FAIL_CANCELED))
        return;
    if ((unsigned)o->failure >= CANON_FAIL_COUNT)
        return;
    struct shard *s;
    struct cell *c = cell_get(o->provider, o->model, &s);
    if (!c)
        return;
    if (o->ok) {
        c->ok++;
        dsum_add(&c->lat, o->latency_us > 0 ? (uint64_t)o->latency_us / 1000 : 0);
        if (o->ttfb_us > 0)
            dsum_add(&c->ttfb, (uint64_t)o->ttfb_us / 1000);
        if (o->ttfc_us > 0)
            dsum_add(&c->ttfc, (uint64_t)o->ttfc_us / 1000);
    } else {
        c->fail[o->failure]++;
    }
    if (fleet_probe) {
        if (o->ok)
            c->probe_ok++;
        else if (canon_failure_counts(o->failure))
            c->probe_failed++;
    }
    pthread_mutex_unlock(&s->lock);
    if (fleet_probe)
        notify();
}

void dp_outcomes_change(const char *provider, const char *model, enum dp_breaker_state from,
                        enum dp_breaker_state to, int64_t at_us)
{
    if (!provider || !model)
        return;
    int64_t at_ms = gw_wall_ms() - (gw_now_us() - at_us) / 1000;
    uint64_t h = gw_target_hash(provider, model);
    pthread_mutex_lock(&btab_lock);
    struct btarget *t = btab;
    while (t && !(t->hash == h && gw_target_is(&t->tk, provider, model)))
        t = t->next;
    if (!t && nbtab < MAX_BREAKERS) {
        if ((t = calloc(1, sizeof(*t) + gw_target_key_size(provider, model)))) {
            gw_target_key_copy(&t->tk, t->key, provider, model);
            t->hash = h;
            t->next = btab;
            btab = t;
            nbtab++;
        }
    }
    if (t) {
        t->state = to;
        if (t->nchanges < MAX_CHANGES)
            t->changes[t->nchanges++] = (struct change){from, to, at_ms};
    }
    pthread_mutex_unlock(&btab_lock);
    notify();
}

uint64_t dp_outcomes_dropped(void)
{
    return __atomic_load_n(&dropped, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ harvest */

/* One target of the summary, with everything its message points to. */
struct tout {
    Llmgw__V1__TargetOutcomes t; /* first: the summary's pointer frees the block */
    Llmgw__V1__DurationSummary lat, ttfb, ttfc;
    uint64_t latb[DP_OUTCOMES_NBUCKETS], ttfbb[DP_OUTCOMES_NBUCKETS], ttfcb[DP_OUTCOMES_NBUCKETS];
    Llmgw__V1__FailureCount fc[CANON_FAIL_COUNT];
    Llmgw__V1__FailureCount *fcp[CANON_FAIL_COUNT];
    Llmgw__V1__StateChange ch[MAX_CHANGES];
    Llmgw__V1__StateChange *chp[MAX_CHANGES];
    char key[];
};

static void dsum_out(Llmgw__V1__DurationSummary *m, uint64_t *b, const struct dsum *d)
{
    llmgw__v1__duration_summary__init(m);
    m->count = d->count;
    m->sum_ms = d->sum_ms;
    m->max_ms = d->max_ms;
    memcpy(b, d->b, sizeof(d->b));
    m->buckets = b;
    m->n_buckets = d->count ? DP_OUTCOMES_NBUCKETS : 0;
}

static struct tout *tout_new(const char *provider, const char *model, const struct cell *c,
                             const struct btarget *bt)
{
    struct tout *o = calloc(1, sizeof(*o) + gw_target_key_size(provider, model));
    if (!o)
        return NULL;
    struct gw_target_key k;
    gw_target_key_copy(&k, o->key, provider, model);
    llmgw__v1__target_outcomes__init(&o->t);
    o->t.provider = (char *)k.provider;
    o->t.model = (char *)k.model;
    o->t.breaker = (char *)dp_breaker_state_name(bt ? bt->state : DP_BREAKER_CLOSED);
    if (c) {
        o->t.ok = c->ok;
        o->t.probe_ok = c->probe_ok;
        o->t.probe_failed = c->probe_failed;
        o->t.fleet_skipped = c->skipped;
        for (int f = 0; f < CANON_FAIL_COUNT; f++) {
            if (!c->fail[f])
                continue;
            Llmgw__V1__FailureCount *fc = &o->fc[o->t.n_failures];
            llmgw__v1__failure_count__init(fc);
            fc->failure_class = (char *)canon_failure_name((enum canon_failure)f);
            fc->count = c->fail[f];
            o->fcp[o->t.n_failures++] = fc;
        }
        o->t.failures = o->fcp;
        dsum_out(&o->lat, o->latb, &c->lat);
        dsum_out(&o->ttfb, o->ttfbb, &c->ttfb);
        dsum_out(&o->ttfc, o->ttfcb, &c->ttfc);
        o->t.latency = &o->lat;
        o->t.ttfb = &o->ttfb;
        o->t.ttfc = &o->ttfc;
    }
    if (bt) {
        for (unsigned i = 0; i < bt->nchanges; i++) {
            Llmgw__V1__StateChange *ch = &o->ch[i];
            llmgw__v1__state_change__init(ch);
            ch->from = (char *)dp_breaker_state_name(bt->changes[i].from);
            ch->to = (char *)dp_breaker_state_name(bt->changes[i].to);
            ch->at_ms = bt->changes[i].at_ms;
            o->chp[i] = ch;
        }
        o->t.n_changes = bt->nchanges;
        o->t.changes = o->chp;
    }
    return o;
}

void dp_outcomes_summary_free(Llmgw__V1__OutcomeSummary *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n_targets; i++)
        free(s->targets[i]); /* the struct tout it begins */
    free(s->targets);
    free(s);
}

static void cells_free(struct cell **heads, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (struct cell *c = heads[i], *next; c; c = next) {
            next = c->next;
            free(c);
        }
}

Llmgw__V1__OutcomeSummary *dp_outcomes_harvest(int64_t since_ms, int64_t now_ms)
{
    /* Every shard's cells, merged by target. */
    struct cell *merged[MERGE_HEADS] = {0};
    size_t ncells = 0;
    pthread_mutex_lock(&shards_lock);
    struct shard *list = shards;
    pthread_mutex_unlock(&shards_lock);
    for (struct shard *s = list; s; s = s->next) {
        struct cell *taken[SHARD_HEADS];
        pthread_mutex_lock(&s->lock);
        memcpy(taken, s->heads, sizeof(taken));
        memset(s->heads, 0, sizeof(s->heads));
        s->n = 0;
        pthread_mutex_unlock(&s->lock);
        for (int i = 0; i < SHARD_HEADS; i++)
            for (struct cell *c = taken[i], *next; c; c = next) {
                next = c->next;
                struct cell *m =
                    cell_find(merged, MERGE_HEADS, c->tk.provider, c->tk.model, c->hash);
                if (!m) {
                    c->next = merged[c->hash % MERGE_HEADS];
                    merged[c->hash % MERGE_HEADS] = c;
                    ncells++;
                    continue;
                }
                m->ok += c->ok;
                m->probe_ok += c->probe_ok;
                m->probe_failed += c->probe_failed;
                m->skipped += c->skipped;
                for (int f = 0; f < CANON_FAIL_COUNT; f++)
                    m->fail[f] += c->fail[f];
                dsum_merge(&m->lat, &c->lat);
                dsum_merge(&m->ttfb, &c->ttfb);
                dsum_merge(&m->ttfc, &c->ttfc);
                free(c);
            }
    }

    Llmgw__V1__OutcomeSummary *sum = calloc(1, sizeof(*sum));
    pthread_mutex_lock(&btab_lock);
    size_t cap = ncells + nbtab;
    Llmgw__V1__TargetOutcomes **v = sum ? calloc(cap ? cap : 1, sizeof(*v)) : NULL;
    if (!v) {
        pthread_mutex_unlock(&btab_lock);
        free(sum);
        cells_free(merged, MERGE_HEADS);
        return NULL;
    }
    llmgw__v1__outcome_summary__init(sum);
    sum->interval_start_ms = since_ms;
    sum->interval_ms = now_ms > since_ms ? now_ms - since_ms : 0;
    sum->targets = v;
    /* Targets with outcomes, with their breaker's news when there is any. */
    for (int i = 0; i < MERGE_HEADS; i++)
        for (struct cell *c = merged[i]; c; c = c->next) {
            struct btarget *bt = btab;
            while (bt &&
                   !(bt->hash == c->hash && gw_target_is(&bt->tk, c->tk.provider, c->tk.model)))
                bt = bt->next;
            struct tout *o = tout_new(c->tk.provider, c->tk.model, c, bt);
            if (o)
                v[sum->n_targets++] = &o->t;
            if (bt)
                bt->reported = 1;
        }
    /* Breakers with news or not closed, and no outcome this interval. */
    for (struct btarget **pp = &btab, *bt; (bt = *pp);) {
        if (!bt->reported && (bt->nchanges || bt->state != DP_BREAKER_CLOSED)) {
            struct tout *o = tout_new(bt->tk.provider, bt->tk.model, NULL, bt);
            if (o)
                v[sum->n_targets++] = &o->t;
        }
        bt->nchanges = 0;
        bt->reported = 0;
        if (bt->state == DP_BREAKER_CLOSED) {
            *pp = bt->next;
            nbtab--;
            free(bt);
        } else {
            pp = &bt->next;
        }
    }
    pthread_mutex_unlock(&btab_lock);
    cells_free(merged, MERGE_HEADS);
    return sum;
}

void dp_outcomes_reset(void)
{
    pthread_mutex_lock(&shards_lock);
    struct shard *list = shards;
    shards = NULL;
    __atomic_add_fetch(&generation, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&shards_lock);
    for (struct shard *s = list, *next; s; s = next) {
        next = s->next;
        cells_free(s->heads, SHARD_HEADS);
        pthread_mutex_destroy(&s->lock);
        free(s);
    }
    pthread_mutex_lock(&btab_lock);
    for (struct btarget *t = btab, *next; t; t = next) {
        next = t->next;
        free(t);
    }
    btab = NULL;
    nbtab = 0;
    pthread_mutex_unlock(&btab_lock);
    __atomic_store_n(&dropped, 0, __ATOMIC_RELAXED);
}
