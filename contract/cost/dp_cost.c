#include "dp_cost.h"

#include <stddef.h>
#include <string.h>

#include "canon.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_money.h"

static int priced(const struct dp_price *p)
{
    return p->input >= 0 || p->output >= 0 || p->cache_read >= 0 || p->cache_write_5m >= 0 ||
           p->cache_write_1h >= 0 || p->reasoning >= 0 || p->audio_second >= 0 ||
           p->character >= 0 || p->image >= 0 || p->media_input >= 0 || p->media_output >= 0 ||
           p->nimage_prices > 0;
}

const struct dp_price *dp_snapshot_price(const struct dp_snapshot *s, const char *provider,
                                         const char *model)
{
    if (!s || !model)
        return NULL;
    const struct dp_price *any = NULL;
    for (size_t i = 0; i < s->ncatalog; i++) {
        const struct dp_catalog_entry *c = &s->catalog[i];
        if (strcmp(c->model, model) != 0 || !priced(&c->price))
            continue;
        if (!c->provider)
            any = &c->price;
        else if (provider && strcmp(c->provider, provider) == 0)
            return &c->price;
    }
    return any;
}

/* The attempt's tokens by class, each with its price. */
struct part {
    const char *name;
    int64_t tokens;
    long long price;
};

static int parts(const struct dp_price *p, const struct canon_usage *u, struct part out[6])
{
    if (u->input < 0 || u->cache_read < 0 || u->cache_write_5m < 0 || u->cache_write_1h < 0 ||
        u->output < 0 || u->reasoning < 0)
        return GW_EINVAL;
    /* Reasoning is billed apart only where the price list says so. */
    int apart = p->reasoning >= 0 && u->reasoning > 0;
    if (apart && u->reasoning > u->output)
        return GW_EINVAL;
    out[0] = (struct part){"input", u->input, p->input};
    out[1] = (struct part){"cache_read", u->cache_read, p->cache_read};
    out[2] = (struct part){"cache_write_5m", u->cache_write_5m, p->cache_write_5m};
    out[3] = (struct part){"cache_write_1h", u->cache_write_1h, p->cache_write_1h};
    out[4] = (struct part){"output", apart ? u->output - u->reasoning : u->output, p->output};
    out[5] = (struct part){"reasoning", apart ? u->reasoning : 0, p->reasoning};
    return GW_OK;
}

const char *dp_cost_unpriced_class(const struct dp_price *p, const struct canon_usage *u)
{
    if (!p)
        return "all";
    struct part pt[6];
    if (parts(p, u, pt) != GW_OK)
        return NULL;
    for (size_t i = 0; i < 6; i++)
        if (pt[i].tokens > 0 && pt[i].price < 0)
            return pt[i].name;
    return NULL;
}

int dp_cost(const struct dp_price *p, const struct canon_usage *u, int64_t *cost)
{
    if (!p)
        return GW_ENOENT;
    struct part pt[6];
    int rc = parts(p, u, pt);
    if (rc != GW_OK)
        return rc;
    /* Unknown before overflow: a cost with an unpriced class is NULL
     * whatever its size. */
    for (size_t i = 0; i < 6; i++)
        if (pt[i].tokens > 0 && pt[i].price < 0)
            return GW_ENOENT;
    int64_t total = 0;
    for (size_t i = 0; i < 6; i++) {
        int64_t c;
        if (pt[i].tokens == 0)
            continue;
        if (gw_money_mul(pt[i].tokens, pt[i].price, &c) != GW_OK ||
            gw_money_add(total, c, &total) != GW_OK)
            return GW_ERANGE;
    }
    *cost = total;
    return GW_OK;
}

long long dp_price_image(const struct dp_price *p, const char *quality, const char *size)
{
    if (!p)
        return -1;
    char key[96];
    if (quality && size && (size_t)snprintf(key, sizeof(key), "%s/%s", quality, size) < sizeof(key))
        for (size_t i = 0; i < p->nimage_prices; i++)
            if (strcmp(p->image_prices[i].key, key) == 0)
                return p->image_prices[i].price;
    for (size_t i = 0; size && i < p->nimage_prices; i++)
        if (strcmp(p->image_prices[i].key, size) == 0)
            return p->image_prices[i].price;
    return p->image;
}

/* tokens * price added to *total; GW_ENOENT when tokens need a price that
 * is not there. */
static int add_tokens(int64_t tokens, long long price, int64_t *total)
{
    if (tokens == 0)
        return GW_OK;
    if (price < 0)
        return GW_ENOENT;
    int64_t c;
    if (gw_money_mul(tokens, price, &c) != GW_OK || gw_money_add(*total, c, total) != GW_OK)
        return GW_ERANGE;
    return GW_OK;
}

int dp_cost_media(const struct dp_price *p, const struct canon_usage *u,
                  const struct dp_media_units *m, int64_t *cost)
{
    if (!p)
        return GW_ENOENT;
    if (u->input < 0 || u->output < 0 || m->media_in < 0 || m->media_out < 0 ||
        m->media_in > u->input || m->media_out > u->output || m->audio_ms < 0 ||
        m->characters < 0 || m->images < 0)
        return GW_EINVAL;
    int64_t total = 0;
    int rc = GW_ENOENT;
    if (u->have && (u->input || u->output)) {
        rc = add_tokens(u->input - m->media_in, p->input, &total);
        if (rc == GW_OK)
            rc = add_tokens(m->media_in, p->media_input, &total);
        if (rc == GW_OK)
            rc = add_tokens(u->output - m->media_out, p->output, &total);
        if (rc == GW_OK)
            rc = add_tokens(m->media_out, p->media_output, &total);
        if (rc != GW_ENOENT) {
            if (rc == GW_OK)
                *cost = total;
            return rc;
        }
    }
    /* The units, when the tokens are not reported or not priced. */
    total = 0;
    if (m->audio_ms > 0 && p->audio_second >= 0)
        rc = gw_money_muldiv(p->audio_second, m->audio_ms, 1000, &total);
    else if (m->characters > 0 && p->character >= 0)
        rc = gw_money_mul(m->characters, p->character, &total);
    else if (m->images > 0 && dp_price_image(p, m->quality, m->size) >= 0)
        rc = gw_money_mul(m->images, dp_price_image(p, m->quality, m->size), &total);
    else
        return GW_ENOENT;
    if (rc != GW_OK)
        return GW_ERANGE;
    *cost = total;
    return GW_OK;
}

int dp_cost_media_bound(const struct dp_price *p, const struct canon_usage *u,
                        const struct dp_media_units *m, int64_t *cost)
{
    struct canon_usage t = *u;
    t.have = 1;
    struct dp_media_units tokens_only = {.media_in = m->media_in, .media_out = m->media_out};
    struct dp_media_units units_only = *m;
    units_only.media_in = units_only.media_out = 0;
    struct canon_usage none = {0};
    int64_t a = -1, b = -1;
    int ra = dp_cost_media(p, &t, &tokens_only, &a);
    int rb = dp_cost_media(p, &none, &units_only, &b);
    if (ra == GW_ERANGE || rb == GW_ERANGE)
        return GW_ERANGE;
    if (ra != GW_OK && rb != GW_OK)
        return ra == GW_EINVAL || rb == GW_EINVAL ? GW_EINVAL : GW_ENOENT;
    *cost = ra == GW_OK && (rb != GW_OK || a > b) ? a : b;
    return GW_OK;
}
