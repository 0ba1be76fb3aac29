/*
 * dp_router's private part: what the plan (dp_router.c: the selector, the
 * filters, the skips) and the order (dp_router_order.c) share. Not for
 * other modules.
 */
#ifndef DP_ROUTER_INT_H
#define DP_ROUTER_INT_H

#include <stddef.h>

#include "dp_router.h"

/* A target on its way through ordering and filtering. */
struct slot {
    const struct dp_provider *provider;
    const char *model;
    const struct dp_route_entry *entry; /* NULL: exact or bare selector */
    size_t written;                     /* index in the route as written */
    long long k1, k2;                   /* sort keys, ascending */
};

/* Orders the nv targets of route r in v: the route's strategy, then an
 * affinity rotation, then a session's lead class by rendezvous hash. */
/* Returns where the strategy's scores came from ("fleet", "local",
 * "mixed"; NULL when it scores nothing). */
const char *dpr_order(const struct dp_snapshot *s, const struct dp_route *r,
                      const struct dp_needs *n, const struct dp_route_ctx *ctx, struct slot *v,
                      size_t nv);

#endif
