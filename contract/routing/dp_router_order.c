/*
 * dp_router's order (dp_router.h, "Order"): the route's strategy, scored
 * from the catalog's prices and the breakers' stats; the affinity
 * rotation; a session's members by rendezvous hash in front. The plan
 * (dp_router.c) filters the targets in the order this leaves them.
 *
 * Nothing here keeps state between requests: every replica given the same
 * snapshot, session and scores orders the same way.
 */
#include <limits.h>
#include <math.h>
#include <string.h>

#include "dp_breaker.h"
#include "dp_fleet.h"
#include "dp_router_int.h"
#include "gw_hash.h"

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

/* The fleet's figures (dp_fleet_score) replace this process's where they
 * rest on this many samples: every replica then ranks alike. */
#define FLEET_MIN_ATTEMPTS 20
#define FLEET_MIN_LATENCY 10

enum { FROM_LOCAL = 1, FROM_FLEET = 2 };

/* A target's success rate and time to first byte: the fleet's where it is
 * thick enough, else this process's breaker window. Returns FROM_* bits. */
static int target_stats(const struct dp_route_ctx *ctx, const struct slot *v,
                        struct dp_target_stats *st)
{
    memset(st, 0, sizeof(*st));
    st->success_permil = 1000;
    if (ctx->breakers)
        dp_breaker_stats(ctx->breakers, v->provider->name, v->model, ctx->now_us, st);
    struct dp_fleet_score f;
    if (!dp_fleet_score(v->provider->name, v->model, ctx->now_us, &f))
        return FROM_LOCAL;
    int from = 0;
    if (f.attempts >= FLEET_MIN_ATTEMPTS) {
        st->success_permil = f.success_permil;
        from |= FROM_FLEET;
    } else {
        from |= FROM_LOCAL;
    }
    if (f.ttfb_samples >= FLEET_MIN_LATENCY) {
        /* The fleet measures in whole milliseconds: a mean of 0 is under
         * one, observed all the same (0 here means never observed). */
        st->ttfb_ewma_us = f.ttfb_mean_us > 0 ? f.ttfb_mean_us : 1;
        from |= FROM_FLEET;
    } else {
        from |= FROM_LOCAL;
    }
    return from;
}

/* Price and latency scores (lower is better; LLONG_MAX for an unknown
 * price). Prices are at most 2e12 (dp_snapshot's ceiling), so price * 1000
 * cannot overflow; a time to first byte is far below that. Returns the
 * FROM_* bits of every figure used. */
static int score(const struct dp_snapshot *s, const struct dp_needs *n,
                 const struct dp_route_ctx *ctx, const struct slot *v, size_t nv, long long *price,
                 long long *latency)
{
    struct dp_target_stats st[DP_MAX_CANDIDATES];
    long long min_ttfb = 0;
    int from = 0;
    for (size_t i = 0; i < nv; i++) {
        from |= target_stats(ctx, &v[i], &st[i]);
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
    return from;
}

/* 1 + how many scores are strictly better: equal scores share a rank. */
static long long rank_of(const long long *sc, size_t n, size_t i)
{
    long long r = 1;
    for (size_t j = 0; j < n; j++)
        r += sc[j] < sc[i];
    return r;
}

/* Returns where the scores came from: "fleet", "local", "mixed", or NULL
 * for a strategy that scores nothing. */
static const char *order_by_strategy(const struct dp_snapshot *s, const struct dp_route *r,
                                     const struct dp_needs *n, const struct dp_route_ctx *ctx,
                                     struct slot *v, size_t nv)
{
    long long price[DP_MAX_CANDIDATES], latency[DP_MAX_CANDIDATES];
    int from;
    switch (r->strategy) {
    case DP_STRATEGY_ORDERED:
        return NULL;
    case DP_STRATEGY_PRICE:
    case DP_STRATEGY_LATENCY:
    case DP_STRATEGY_AUTO:
        from = score(s, n, ctx, v, nv, price, latency);
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
        return from == FROM_FLEET ? "fleet" : from == FROM_LOCAL ? "local" : "mixed";
    case DP_STRATEGY_WEIGHTED: {
        unsigned long long total = 0;
        for (size_t i = 0; i < nv; i++)
            total += v[i].entry->weight;
        if (total == 0) /* dp_snapshot refuses it; written order */
            return NULL;
        /* A session orders the members itself (apply_session). */
        if (ctx->session && *ctx->session)
            return NULL;
        const char *in = ctx->affinity ? ctx->affinity : ctx->request_id ? ctx->request_id : "";
        unsigned long long draw = hash_str(in) % total;
        size_t pick = 0;
        while (draw >= v[pick].entry->weight) {
            draw -= v[pick].entry->weight;
            pick++;
        }
        move_first(v, pick);
        return NULL;
    }
    }
    return NULL;
}

/* A session's rendezvous weight for one member: a hash of the session, the
 * route's fingerprint (an edit reshuffles) and the member, as a draw u in
 * (0, 1), turned into -weight / ln(u): the member with the largest wins,
 * each in proportion to its weight, and removing one member moves only the
 * sessions it won. The same on every replica: no state, no clock. */
static double rendezvous(const char *session, size_t sl, uint64_t fingerprint, const struct slot *v,
                         unsigned weight)
{
    uint64_t h = gw_fnv1a(GW_FNV1A_INIT, session, sl);
    h = gw_fnv1a(h, &fingerprint, sizeof(fingerprint));
    h = gw_fnv1a(h, v->provider->name, strlen(v->provider->name) + 1);
    h = gw_fnv1a(h, v->model, strlen(v->model));
    /* 53 bits, never 0 or 1. */
    double u = ((double)(gw_mix64(h) >> 11) + 0.5) / 9007199254740992.0;
    return -(double)weight / log(u);
}

/* How many members, from the front of the strategy's order, a session may
 * be spread over: those the strategy would as soon make primary. ordered:
 * the head alone (as written, or as the affinity rotation left it); price
 * and auto: the members tied with the head's score; latency: those within
 * 25% of the head's (measured latencies are never equal, and a session
 * should not hop for noise); weighted: every member with a weight. */
static size_t lead_class(const struct dp_route *r, const struct slot *v, size_t nv)
{
    size_t m = 1;
    switch (r->strategy) {
    case DP_STRATEGY_ORDERED:
        break;
    case DP_STRATEGY_PRICE:
    case DP_STRATEGY_AUTO:
        while (m < nv && v[m].k1 == v[0].k1 && v[m].k2 == v[0].k2)
            m++;
        break;
    case DP_STRATEGY_LATENCY:
        while (m < nv && v[m].k1 <= v[0].k1 + v[0].k1 / 4)
            m++;
        break;
    case DP_STRATEGY_WEIGHTED:
        m = nv;
        break;
    }
    return m;
}

/* A session (X-LLMGW-Session-Id) orders its route's lead class by
 * rendezvous weight, highest first: every replica sends the session's turns
 * to the same member, and when that member is skipped (its breaker, the
 * fleet view) the next by weight serves, the same one everywhere. Weighted
 * routes weigh each member by its weight (members of weight 0 follow as
 * written); the others weigh the class equally. A preference among the
 * members the strategy would lead with, never an expansion. */
static void apply_session(const struct dp_route *r, const struct dp_route_ctx *ctx, struct slot *v,
                          size_t nv)
{
    if (!ctx->session || !*ctx->session || nv < 2)
        return;
    size_t sl = strlen(ctx->session);
    size_t m = lead_class(r, v, nv);
    double w[DP_MAX_CANDIDATES];
    for (size_t i = 0; i < m; i++) {
        unsigned weight = r->strategy == DP_STRATEGY_WEIGHTED ? v[i].entry->weight : 1;
        w[i] = weight ? rendezvous(ctx->session, sl, r->fingerprint, &v[i], weight) : -1;
    }
    /* Insertion sort, highest weight first; ties (and weight 0) keep the
     * order they had. */
    for (size_t i = 1; i < m; i++) {
        struct slot x = v[i];
        double wx = w[i];
        size_t j = i;
        while (j > 0 && w[j - 1] < wx) {
            v[j] = v[j - 1];
            w[j] = w[j - 1];
            j--;
        }
        v[j] = x;
        w[j] = wx;
    }
}

const char *dpr_order(const struct dp_snapshot *s, const struct dp_route *r,
                      const struct dp_needs *n, const struct dp_route_ctx *ctx, struct slot *v,
                      size_t nv)
{
    const char *scored_by = order_by_strategy(s, r, n, ctx, v, nv);
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
    apply_session(r, ctx, v, nv);
    return scored_by;
}
