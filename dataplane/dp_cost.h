/*
 * dp_cost: what an upstream attempt cost, from the prices in the snapshot
 * the attempt ran under (docs/pricing.md). Money is int64 picodollars
 * (10^-12 of the price's currency), computed with gw_money's checked
 * arithmetic: never a float, never a wrapped sum.
 *
 * The cost is frozen when the attempt's usage arrives: a later snapshot
 * with other prices never changes it. When a class of tokens the attempt
 * used has no price, the cost is unknown (NULL in the ledger), never
 * guessed: a one-hour cache write without a declared one-hour price is not
 * priced as some multiple of the five-minute one.
 */
#ifndef DP_COST_H
#define DP_COST_H

#include <stdint.h>

struct dp_snapshot;
struct canon_usage;

struct dp_price {
    long long input, output, cache_read, cache_write_5m, cache_write_1h,
        reasoning;    /* picodollars per token, -1 unknown */
    char currency[4]; /* ISO 4217, "USD" unless the catalog says otherwise */
};

/* The price for provider/model in this snapshot (the provider's own entry,
 * else a provider-less one); NULL: unpriced. An entry that declares no
 * price at all does not count (a provider's entry that only says the
 * context window leaves the provider-less entry's prices in force). The
 * result is owned by the snapshot. */
const struct dp_price *dp_snapshot_price(const struct dp_snapshot *s, const char *provider,
                                         const char *model);

/*
 * GW_OK and *cost; GW_ENOENT when a class that has tokens has no price
 * (the cost is NULL, e.g. 1h cache writes with no 1h price: never a guessed
 * multiple; p NULL: unpriced); GW_ERANGE on overflow; GW_EINVAL when the
 * usage is inconsistent (a negative count, more reasoning than output
 * tokens with a distinct reasoning price). *cost is set only on GW_OK.
 *
 * Reasoning tokens are part of output tokens (docs/canonical.md): with a
 * distinct reasoning price,
 *   cost = input*in + cache_read*cr + cache_write_5m*cw5 + cache_write_1h*cw1
 *        + (output - reasoning)*out + reasoning*reasoning_price
 * and without one, output*out.
 */
int dp_cost(const struct dp_price *p, const struct canon_usage *u, int64_t *cost)
    __attribute__((warn_unused_result));

/* For the warning when dp_cost answers GW_ENOENT: the first token class
 * with tokens and no price ("input", "output", "cache_read",
 * "cache_write_5m", "cache_write_1h", "reasoning"), "all" when p is NULL,
 * NULL when every class with tokens is priced. */
const char *dp_cost_unpriced_class(const struct dp_price *p, const struct canon_usage *u);

#endif
