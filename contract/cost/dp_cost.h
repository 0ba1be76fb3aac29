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

/* A price per output image of one size ("1024x1024") or of one quality
 * and size ("hd/1024x1024"). */
struct dp_image_price {
    const char *key;
    long long price;
};

struct dp_price {
    long long input, output, cache_read, cache_write_5m, cache_write_1h,
        reasoning;    /* picodollars per token, -1 unknown */
    char currency[4]; /* ISO 4217, "USD" unless the catalog says otherwise */
    /* Media (docs/media.md), picodollars, -1 unknown: per second of input
     * audio, per input character (speech), per output image (when
     * image_prices has none for the size and quality), and per input and
     * output token that is audio or image rather than text. */
    long long audio_second, character, image, media_input, media_output;
    const struct dp_image_price *image_prices; /* nimage_prices, owned by the snapshot */
    size_t nimage_prices;
};

/* What a media attempt is priced by, beside its tokens. */
struct dp_media_units {
    int64_t audio_ms;   /* input audio (transcriptions, translations) */
    int64_t characters; /* speech input */
    int64_t images;     /* images the answer holds */
    const char *size;   /* images: the request's size and quality, or NULL */
    const char *quality;
    /* Of the usage's input and output tokens, those that are audio or
     * image (the rest are text). */
    int64_t media_in, media_out;
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

/*
 * A media attempt's cost: from the provider's tokens when it reported them
 * (u->have) and every class they fall in has a price (text input at
 * input, audio or image input at media_input, text output at output,
 * audio or image output at media_output); else from the units: input
 * audio at audio_second per second (floor(price * ms / 1000)), speech at
 * character per character, images at the image price of their quality and
 * size, else of their size, else the image price. GW_ENOENT when neither
 * is priced; GW_ERANGE on overflow; GW_EINVAL on inconsistent counts.
 */
int dp_cost_media(const struct dp_price *p, const struct canon_usage *u,
                  const struct dp_media_units *m, int64_t *cost)
    __attribute__((warn_unused_result));
/* An upper bound on a media request's cost at p, for a reservation: the
 * dearer of its tokens at most u (with m's media_in and media_out) and its
 * units at most m, each where it is priced. GW_ENOENT when neither is,
 * GW_ERANGE on overflow. */
int dp_cost_media_bound(const struct dp_price *p, const struct canon_usage *u,
                        const struct dp_media_units *m, int64_t *cost)
    __attribute__((warn_unused_result));
/* The price of one image of that quality and size (either may be NULL),
 * or -1. */
long long dp_price_image(const struct dp_price *p, const char *quality, const char *size);

/* For the warning when dp_cost answers GW_ENOENT: the first token class
 * with tokens and no price ("input", "output", "cache_read",
 * "cache_write_5m", "cache_write_1h", "reasoning"), "all" when p is NULL,
 * NULL when every class with tokens is priced. */
const char *dp_cost_unpriced_class(const struct dp_price *p, const struct canon_usage *u);

#endif
