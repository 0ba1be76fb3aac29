/*
 * dp_router's order (dp_router.h, "Order"): the route's strategy, scored
 * from the catalog's prices and the breakers' stats; the affinity
 * rotation; the session's sticky provider in front. The plan (dp_router.c)
 * filters the targets in the order this leaves them.
 *
 * The sticky table, the router's one process-wide structure, lives here
 * behind its mutex.
 */
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dp_breaker.h"
#include "dp_router_int.h"
#include "gw_hash.h"

/* ---------------------------------------------------------------- sticky */

#define STICKY_MAX 16384
#define STICKY_BUCKETS 4096
#define STICKY_TTL_US (3600LL * 1000000)
#define STICKY_MAX_SESSION 256

/* One remembered session: key is the route name, a NUL, the session. */
struct sticky {
    struct sticky *next;          /* bucket chain */
    struct sticky *older, *newer; /* in the order they were set */
    uint64_t hash;
    uint64_t fingerprint;
    int64_t at_us;
    size_t keylen;
    char *key;
    char *provider;
};

static pthread_mutex_t sticky_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sticky *sticky_buckets[STICKY_BUCKETS];
static struct sticky *sticky_oldest, *sticky_newest;
static size_t sticky_count;

static uint64_t sticky_hash(const char *route, size_t rl, const char *session, size_t sl)
{
    return gw_fnv1a(gw_fnv1a(GW_FNV1A_INIT, route, rl + 1), session, sl);
}

static struct sticky *sticky_find(uint64_t h, const char *route, size_t rl, const char *session,
                                  size_t sl)
{
    for (struct sticky *e = sticky_buckets[h % STICKY_BUCKETS]; e; e = e->next)
        if (e->hash == h && e->keylen == rl + 1 + sl && memcmp(e->key, route, rl + 1) == 0 &&
            memcmp(e->key + rl + 1, session, sl) == 0)
            return e;
    return NULL;
}

static void sticky_drop(struct sticky *e)
{
    struct sticky **pp = &sticky_buckets[e->hash % STICKY_BUCKETS];
    while (*pp != e)
        pp = &(*pp)->next;
    *pp = e->next;
    if (e->older)
        e->older->newer = e->newer;
    else
        sticky_oldest = e->newer;
    if (e->newer)
        e->newer->older = e->older;
    else
        sticky_newest = e->older;
    sticky_count--;
    free(e);
}

static int sticky_expired(const struct sticky *e, int64_t now_us)
{
    return now_us - e->at_us >= STICKY_TTL_US;
}

void dp_router_sticky_set(const struct dp_route *route, const char *session,
                          const struct dp_provider *provider, int64_t now_us)
{
    if (!route || !session || !*session || !provider)
        return;
    size_t rl = strlen(route->name), sl = strlen(session), pl = strlen(provider->name);
    if (sl > STICKY_MAX_SESSION)
        return;
    uint64_t h = sticky_hash(route->name, rl, session, sl);
    pthread_mutex_lock(&sticky_lock);
    while (sticky_oldest && sticky_expired(sticky_oldest, now_us))
        sticky_drop(sticky_oldest);
    struct sticky *e = sticky_find(h, route->name, rl, session, sl);
    if (e)
        sticky_drop(e);
    if (sticky_count >= STICKY_MAX)
        sticky_drop(sticky_oldest);
    e = malloc(sizeof(*e) + rl + 1 + sl + pl + 1);
    if (e) {
        e->key = (char *)(e + 1);
        e->keylen = rl + 1 + sl;
        memcpy(e->key, route->name, rl + 1);
        memcpy(e->key + rl + 1, session, sl);
        e->provider = e->key + e->keylen;
        memcpy(e->provider, provider->name, pl + 1);
        e->hash = h;
        e->fingerprint = route->fingerprint;
        e->at_us = now_us;
        e->next = sticky_buckets[h % STICKY_BUCKETS];
        sticky_buckets[h % STICKY_BUCKETS] = e;
        e->older = sticky_newest;
        e->newer = NULL;
        if (sticky_newest)
            sticky_newest->newer = e;
        else
            sticky_oldest = e;
        sticky_newest = e;
        sticky_count++;
    }
    pthread_mutex_unlock(&sticky_lock);
}

/* ------------------------------------------------------------------ order */

/* Stable by construction: ties fall back to the written order. */
static void sort_slots(struct slot *v, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        struct slot x = v[i];
        size_t j = i;
        while (j > 0 &&
               (v[j - 1].k1 > x.k1 || (v[j - 1].k1 == x.k1 && v[j - 1].k2 > x.k2) ||
                (v[j - 1].k1 == x.k1 && v[j - 1].k2 == x.k2 && v[j - 1].written > x.written))) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
}

/* v[pick] to the front; the ones before it keep their order behind it. */
static void move_first(struct slot *v, size_t pick)
{
    struct slot first = v[pick];
    memmove(v + 1, v, pick * sizeof(*v));
    v[0] = first;
}

static uint64_t hash_str(const char *s)
{
    return gw_mix64(gw_fnv1a(GW_FNV1A_INIT, s, strlen(s)));
}

/* Success rate as a divisor: a target that fails often looks dearer and
 * slower; the floor of 5% keeps a failing target finite and ordered. */
static long long success_divisor(const struct dp_target_stats *st)
{
    return st->success_permil > 50 ? (long long)st->success_permil : 50;
}

/* Declared price per token pair in picodollars, -1 unknown. Embeddings
 * have no output, so their input price alone decides. */
static long long declared_price(const struct dp_snapshot *s, const struct slot *sl, int embeddings)
{
    const struct dp_catalog_entry *c = dp_snapshot_catalog(s, sl->provider->name, sl->model);
    if (!c || c->price.input < 0)
        return -1;
    if (embeddings)
        return c->price.input;
    return c->price.output < 0 ? -1 : c->price.input + c->price.output;
}

/* Price and latency scores (lower is better; LLONG_MAX for an unknown
 * price). Prices are at most 2e12 (dp_snapshot's ceiling), so price * 1000
 * cannot overflow; a time to first byte is far below that. */
static void score(const struct dp_snapshot *s, const struct dp_needs *n,
                  const struct dp_route_ctx *ctx, const struct slot *v, size_t nv, long long *price,
                  long long *latency)
{
    struct dp_target_stats st[DP_MAX_CANDIDATES];
    long long min_ttfb = 0;
    for (size_t i = 0; i < nv; i++) {
        memset(&st[i], 0, sizeof(st[i]));
        st[i].success_permil = 1000;
        if (ctx->breakers)
            dp_breaker_stats(ctx->breakers, v[i].provider->name, v[i].model, ctx->now_us, &st[i]);
        if (st[i].ttfb_ewma_us > 0 && (min_ttfb == 0 || st[i].ttfb_ewma_us < min_ttfb))
            min_ttfb = st[i].ttfb_ewma_us;
    }
    for (size_t i = 0; i < nv; i++) {
        long long p = declared_price(s, &v[i], n->embeddings);
        price[i] = p < 0 ? LLONG_MAX : p * 1000 / success_divisor(&st[i]);
        /* An unobserved target counts as fast as the fastest observed one,
         * so it gets tried; with no observation at all every score is 0
         * and the written order stands. */
        long long t = st[i].ttfb_ewma_us > 0 ? st[i].ttfb_ewma_us : min_ttfb;
        latency[i] = t * 1000 / success_divisor(&st[i]);
    }
}

/* 1 + how many scores are strictly better: equal scores share a rank. */
static long long rank_of(const long long *sc, size_t n, size_t i)
{
    long long r = 1;
    for (size_t j = 0; j < n; j++)
        r += sc[j] < sc[i];
    return r;
}

static void order_by_strategy(const struct dp_snapshot *s, const struct dp_route *r,
                              const struct dp_needs *n, const struct dp_route_ctx *ctx,
                              struct slot *v, size_t nv)
{
    long long price[DP_MAX_CANDIDATES], latency[DP_MAX_CANDIDATES];
    switch (r->strategy) {
    case DP_STRATEGY_ORDERED:
        return;
    case DP_STRATEGY_PRICE:
    case DP_STRATEGY_LATENCY:
    case DP_STRATEGY_AUTO:
        score(s, n, ctx, v, nv, price, latency);
        for (size_t i = 0; i < nv; i++) {
            if (r->strategy == DP_STRATEGY_PRICE) {
                v[i].k1 = price[i];
            } else if (r->strategy == DP_STRATEGY_LATENCY) {
                v[i].k1 = latency[i];
            } else {
                v[i].k1 = v[i].entry->tier;
                v[i].k2 = rank_of(price, nv, i) * rank_of(latency, nv, i);
            }
        }
        sort_slots(v, nv);
        return;
    case DP_STRATEGY_WEIGHTED: {
        unsigned long long total = 0;
        for (size_t i = 0; i < nv; i++)
            total += v[i].entry->weight;
        if (total == 0) /* dp_snapshot refuses it; written order */
            return;
        const char *in = ctx->affinity ? ctx->affinity : ctx->request_id ? ctx->request_id : "";
        unsigned long long draw = hash_str(in) % total;
        size_t pick = 0;
        while (draw >= v[pick].entry->weight) {
            draw -= v[pick].entry->weight;
            pick++;
        }
        move_first(v, pick);
        return;
    }
    }
}

/* The session's sticky provider, when still in the chain, goes first. */
static void apply_sticky(const struct dp_route *r, const struct dp_route_ctx *ctx, struct slot *v,
                         size_t nv)
{
    if (!ctx->session || !*ctx->session)
        return;
    size_t rl = strlen(r->name), sl = strlen(ctx->session);
    if (sl > STICKY_MAX_SESSION)
        return;
    uint64_t h = sticky_hash(r->name, rl, ctx->session, sl);
    size_t pick = nv;
    pthread_mutex_lock(&sticky_lock);
    const struct sticky *e = sticky_find(h, r->name, rl, ctx->session, sl);
    if (e && !sticky_expired(e, ctx->now_us) && e->fingerprint == r->fingerprint)
        for (size_t i = 0; i < nv && pick == nv; i++)
            if (strcmp(v[i].provider->name, e->provider) == 0)
                pick = i;
    pthread_mutex_unlock(&sticky_lock);
    if (pick < nv)
        move_first(v, pick);
}

void dpr_order(const struct dp_snapshot *s, const struct dp_route *r, const struct dp_needs *n,
               const struct dp_route_ctx *ctx, struct slot *v, size_t nv)
{
    order_by_strategy(s, r, n, ctx, v, nv);
    /* An affinity key keeps a conversation's requests on one start of the
     * chain (a provider's prompt cache). Weighted routes drew their primary
     * from it already. */
    if (ctx->affinity && r->strategy != DP_STRATEGY_WEIGHTED && nv > 1) {
        size_t k = (size_t)(hash_str(ctx->affinity) % nv);
        struct slot tmp[DP_MAX_CANDIDATES];
        for (size_t i = 0; i < nv; i++)
            tmp[i] = v[(i + k) % nv];
        memcpy(v, tmp, nv * sizeof(*v));
    }
    apply_sticky(r, ctx, v, nv);
}
