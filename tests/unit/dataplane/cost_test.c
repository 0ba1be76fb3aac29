/* Tests for contract/cost/dp_cost.c (an attempt's cost from its snapshot's
 * prices) and the money metrics of dataplane/serve/dp_metrics.c (cost, unpriced
 * usage, limit refusals). */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <string.h>

#include "canon.h"
#include "dp_cost.h"
#include "dp_limits.h"
#include "dp_metrics.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_money.h"

/* Claude 3.7 Sonnet's list prices, in picodollars per token. */
static const struct dp_price SONNET = {.input = 3000000,
                                       .output = 15000000,
                                       .cache_read = 300000,
                                       .cache_write_5m = 3750000,
                                       .cache_write_1h = 6000000,
                                       .reasoning = -1,
                                       .currency = "USD"};

static void test_every_class(void)
{
    struct canon_usage u = {.input = 1000,
                            .cache_read = 2000,
                            .cache_write_5m = 300,
                            .cache_write_1h = 40,
                            .output = 500,
                            .reasoning = 100,
                            .have = 1};
    int64_t cost = -1;
    CU_ASSERT_EQUAL(dp_cost(&SONNET, &u, &cost), GW_OK);
    /* No distinct reasoning price: reasoning is output at the output price. */
    int64_t want =
        1000 * 3000000LL + 2000 * 300000LL + 300 * 3750000LL + 40 * 6000000LL + 500 * 15000000LL;
    CU_ASSERT_EQUAL(cost, want);
    char s[GW_MONEY_STRMAX];
    gw_money_format(cost, s, sizeof(s));
    CU_ASSERT_STRING_EQUAL(s, "0.012465"); /* $0.003 + 0.0006 + 0.001125 + 0.00024 + 0.0075 */
    CU_ASSERT_PTR_NULL(dp_cost_unpriced_class(&SONNET, &u));
    /* Nothing used costs nothing. */
    struct canon_usage none = {0};
    CU_ASSERT_EQUAL(dp_cost(&SONNET, &none, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 0);
}

static void test_missing_class(void)
{
    struct dp_price p = SONNET;
    p.cache_read = -1;
    struct canon_usage u = {.input = 10, .cache_read = 5, .output = 1, .have = 1};
    int64_t cost = 42;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ENOENT);
    CU_ASSERT_EQUAL(cost, 42); /* untouched: the cost is NULL */
    CU_ASSERT_STRING_EQUAL(dp_cost_unpriced_class(&p, &u), "cache_read");
    /* A class without a price is fine when none of its tokens were used. */
    u.cache_read = 0;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 10 * 3000000LL + 15000000LL);
    /* No price at all. */
    CU_ASSERT_EQUAL(dp_cost(NULL, &u, &cost), GW_ENOENT);
    CU_ASSERT_STRING_EQUAL(dp_cost_unpriced_class(NULL, &u), "all");
    p.output = -1;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ENOENT);
    CU_ASSERT_STRING_EQUAL(dp_cost_unpriced_class(&p, &u), "output");
}

static void test_1h_without_1h_price(void)
{
    struct dp_price p = SONNET;
    p.cache_write_1h = -1; /* the 5-minute price exists */
    struct canon_usage u = {.input = 10, .cache_write_5m = 100, .cache_write_1h = 1, .have = 1};
    int64_t cost = 42;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ENOENT);
    CU_ASSERT_EQUAL(cost, 42); /* never 2x (or any multiple of) the 5-minute price */
    CU_ASSERT_STRING_EQUAL(dp_cost_unpriced_class(&p, &u), "cache_write_1h");
    u.cache_write_1h = 0;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 10 * 3000000LL + 100 * 3750000LL);
}

static void test_distinct_reasoning(void)
{
    struct dp_price p = SONNET;
    p.output = 600000;     /* 6e-07 */
    p.reasoning = 3500000; /* 3.5e-06 */
    struct canon_usage u = {.input = 100, .output = 1000, .reasoning = 800, .have = 1};
    int64_t cost;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 100 * 3000000LL + 200 * 600000LL + 800 * 3500000LL);
    /* All output was reasoning: no output price needed. */
    p.output = -1;
    u.reasoning = 1000;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 100 * 3000000LL + 1000 * 3500000LL);
    /* More reasoning than output is not a usage dp_cost can price. */
    u.reasoning = 1001;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_EINVAL);
    struct canon_usage neg = {.input = -1};
    CU_ASSERT_EQUAL(dp_cost(&SONNET, &neg, &cost), GW_EINVAL);
    /* Without a distinct price, reasoning tokens are output tokens. */
    p = SONNET;
    u = (struct canon_usage){.output = 10, .reasoning = 4, .have = 1};
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 10 * 15000000LL);
}

static void test_overflow(void)
{
    struct dp_price p = SONNET;
    p.output = 1000000000000LL; /* a dollar a token: the ceiling */
    int64_t cost = 42;
    /* Ten million tokens at $1: 10^19 picodollars does not fit. */
    struct canon_usage u = {.output = 10000000, .have = 1};
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ERANGE);
    CU_ASSERT_EQUAL(cost, 42);
    /* Each product fits; their sum does not. */
    p.input = 1000000000000LL;
    u = (struct canon_usage){.input = 5000000, .output = 5000000, .have = 1};
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ERANGE);
    u.output = 4000000;
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 9000000LL * 1000000000000LL);
    /* Unknown wins over overflow: the cost is NULL either way. */
    p.cache_read = -1;
    u = (struct canon_usage){.output = 10000000, .cache_read = 1, .have = 1};
    CU_ASSERT_EQUAL(dp_cost(&p, &u, &cost), GW_ENOENT);
}

static const char *find_line(const struct gw_buf *b, const char *line)
{
    return b->data ? strstr(b->data, line) : NULL;
}

static void test_metrics(void)
{
    CU_ASSERT_EQUAL_FATAL(dp_metrics_init(), GW_OK);
    struct dp_metrics_target t = {.route = "r",
                                  .provider = "anthropic",
                                  .driver = "anthropic",
                                  .model = "m",
                                  .operation = "chat"};
    dp_metrics_cost(&t, "USD", 12870000000LL);
    dp_metrics_cost(&t, "USD", 1);
    dp_metrics_cost(&t, "EUR", 5);
    dp_metrics_cost(&t, "USD", -3); /* not counted */
    dp_metrics_unpriced(&t, "cache_write_1h");
    dp_metrics_unpriced(&t, "all");
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL_FATAL(dp_metrics_render(&b), GW_OK);
    CU_ASSERT_PTR_NOT_NULL(find_line(&b,
                                     "llmgw_cost_picodollars_total{route=\"r\",provider="
                                     "\"anthropic\",model=\"m\",currency=\"USD\"} 12870000001\n"));
    CU_ASSERT_PTR_NOT_NULL(find_line(&b, "llmgw_cost_picodollars_total{route=\"r\",provider="
                                         "\"anthropic\",model=\"m\",currency=\"EUR\"} 5\n"));
    CU_ASSERT_PTR_NOT_NULL(
        find_line(&b, "llmgw_unpriced_usage_total{provider=\"anthropic\",model=\"m\"} 2\n"));
    CU_ASSERT_PTR_NOT_NULL(find_line(&b, "# TYPE llmgw_cost_picodollars_total counter"));
    /* Counters are integers to the picodollar, past 2^53 too. */
    dp_metrics_cost(&t, "JPY", 9007199254740993LL);
    gw_buf_reset(&b);
    CU_ASSERT_EQUAL_FATAL(dp_metrics_render(&b), GW_OK);
    CU_ASSERT_PTR_NOT_NULL(find_line(&b, "currency=\"JPY\"} 9007199254740993\n"));
    gw_buf_free(&b);
    dp_metrics_shutdown();
    /* Without a registry the verbs do nothing (and do not crash). */
    dp_metrics_cost(&t, "USD", 1);
    dp_metrics_unpriced(&t, "input");
}

static void test_limit_refusals(void)
{
    CU_ASSERT_EQUAL_FATAL(dp_metrics_init(), GW_OK);
    struct dp_limits_refusal r = {.status = 402,
                                  .code = "budget_exceeded",
                                  .state = "depleted",
                                  .has_limit = 1,
                                  .metric = DP_LIMIT_COST,
                                  .has_period = 1,
                                  .period = DP_LIMIT_DAY};
    dp_metrics_limit_refusal(&r);
    dp_metrics_limit_refusal(&r);
    /* A rate limit refused for want of an allowance is told apart from a
     * depleted one, though the client sees rate_limited for both. */
    r = (struct dp_limits_refusal){.status = 429,
                                   .code = "rate_limited",
                                   .state = "unallocated",
                                   .has_limit = 1,
                                   .metric = DP_LIMIT_REQUESTS,
                                   .has_period = 1,
                                   .period = DP_LIMIT_MINUTE};
    dp_metrics_limit_refusal(&r);
    r.state = "depleted";
    dp_metrics_limit_refusal(&r);
    /* never_configured names no period; max_tokens_required no limit. */
    r = (struct dp_limits_refusal){.status = 402,
                                   .code = "budget_not_configured",
                                   .state = "never_configured",
                                   .has_limit = 1,
                                   .metric = DP_LIMIT_COST};
    dp_metrics_limit_refusal(&r);
    r = (struct dp_limits_refusal){.status = 400, .code = "max_tokens_required"};
    dp_metrics_limit_refusal(&r);
    dp_metrics_limit_refusal(NULL);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL_FATAL(dp_metrics_render(&b), GW_OK);
    static const char *const want[] = {
        "llmgw_limit_refusals_total{cause=\"budget_exceeded\",metric=\"cost\",period=\"day\"} "
        "2\n",
        "llmgw_limit_refusals_total{cause=\"rate_unallocated\",metric=\"requests\",period="
        "\"minute\"} 1\n",
        "llmgw_limit_refusals_total{cause=\"rate_limited\",metric=\"requests\",period="
        "\"minute\"} 1\n",
        "llmgw_limit_refusals_total{cause=\"budget_not_configured\",metric=\"cost\",period="
        "\"\"} 1\n",
        "llmgw_limit_refusals_total{cause=\"max_tokens_required\",metric=\"\",period=\"\"} "
        "1\n",
        "# TYPE llmgw_limit_refusals_total counter\n",
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++)
        CU_ASSERT_PTR_NOT_NULL(find_line(&b, want[i]));
    gw_buf_free(&b);
    dp_metrics_shutdown();
    dp_metrics_limit_refusal(&r); /* no registry: nothing, no crash */
}

/* Media prices (docs/media.md): whisper-1 per second, tts-1 per character,
 * dall-e-3 per image by quality and size, gpt-image-1 per token. */
static const struct dp_image_price DALLE[] = {{"1024x1024", 40000000000LL},
                                              {"hd/1024x1024", 80000000000LL}};
static const struct dp_price MEDIA = {.input = 5000000,
                                      .output = -1,
                                      .cache_read = -1,
                                      .cache_write_5m = -1,
                                      .cache_write_1h = -1,
                                      .reasoning = -1,
                                      .currency = "USD",
                                      .audio_second = 100000000,
                                      .character = 15000000,
                                      .image = 20000000000LL,
                                      .media_input = 10000000,
                                      .media_output = 40000000,
                                      .image_prices = DALLE,
                                      .nimage_prices = 2};

static void test_media(void)
{
    struct canon_usage none = {0};
    int64_t cost = -1;
    /* Audio: floor(price * ms / 1000). */
    struct dp_media_units a = {.audio_ms = 1501};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &a, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 150100000);
    /* Characters. */
    struct dp_media_units c = {.characters = 23};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &c, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 23 * 15000000LL);
    /* Images: quality/size, then size, then the default. */
    struct dp_media_units i = {.images = 2, .size = "1024x1024", .quality = "hd"};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &i, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 160000000000LL);
    i.quality = "standard";
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &i, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 80000000000LL);
    i.size = "512x512";
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &i, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 40000000000LL);
    CU_ASSERT_EQUAL(dp_price_image(&MEDIA, NULL, NULL), 20000000000LL);
    /* Reported tokens win over the units when they are priced: text input,
     * image input, image output. */
    struct canon_usage t = {.input = 100, .output = 272, .have = 1};
    struct dp_media_units ti = {.images = 1, .media_in = 60, .media_out = 272};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &t, &ti, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 40 * 5000000LL + 60 * 10000000LL + 272 * 40000000LL);
    /* Text output tokens without an output price: the units price it. */
    ti.media_out = 0;
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &t, &ti, &cost), GW_OK);
    CU_ASSERT_EQUAL(cost, 20000000000LL);
    /* Neither priced: unknown, never 0. */
    struct dp_price bare = MEDIA;
    bare.image = -1;
    bare.nimage_prices = 0;
    cost = -7;
    CU_ASSERT_EQUAL(dp_cost_media(&bare, &t, &ti, &cost), GW_ENOENT);
    CU_ASSERT_EQUAL(cost, -7);
    CU_ASSERT_EQUAL(dp_cost_media(NULL, &none, &a, &cost), GW_ENOENT);
    /* Inconsistent counts. */
    struct dp_media_units bad = {.media_in = 101};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &t, &bad, &cost), GW_EINVAL);
    /* Overflow. */
    struct dp_media_units huge = {.characters = INT64_MAX / 2};
    CU_ASSERT_EQUAL(dp_cost_media(&MEDIA, &none, &huge, &cost), GW_ERANGE);
}

static void test_media_bound(void)
{
    /* The dearer of the token bound and the unit bound. */
    struct canon_usage t = {.input = 10, .output = 10000, .have = 1};
    struct dp_media_units u = {.images = 1, .media_out = 10000, .size = "1024x1024"};
    int64_t b = -1;
    CU_ASSERT_EQUAL(dp_cost_media_bound(&MEDIA, &t, &u, &b), GW_OK);
    CU_ASSERT_EQUAL(b, 10 * 5000000LL + 10000 * 40000000LL); /* 400.05e9 > 40e9 */
    u.images = 20;
    CU_ASSERT_EQUAL(dp_cost_media_bound(&MEDIA, &t, &u, &b), GW_OK);
    CU_ASSERT_EQUAL(b, 20 * 40000000000LL);
    /* Only the units priced. */
    struct dp_price units = MEDIA;
    units.input = units.media_output = -1;
    CU_ASSERT_EQUAL(dp_cost_media_bound(&units, &t, &u, &b), GW_OK);
    CU_ASSERT_EQUAL(b, 20 * 40000000000LL);
    units.image = -1;
    units.nimage_prices = 0;
    CU_ASSERT_EQUAL(dp_cost_media_bound(&units, &t, &u, &b), GW_ENOENT);
}

static CU_TestInfo tests[] = {
    {"media: per second, character, image by quality and size, tokens first", test_media},
    {"media: the reservation's bound is the dearer way", test_media_bound},
    {"every token class at its price", test_every_class},
    {"a class with tokens and no price: ENOENT (cost NULL)", test_missing_class},
    {"1h cache writes without a 1h price: ENOENT, though 5m exists", test_1h_without_1h_price},
    {"a distinct reasoning price: (output - reasoning) * output + reasoning * reasoning",
     test_distinct_reasoning},
    {"overflow is detected, not wrapped", test_overflow},
    {"cost and unpriced-usage counters", test_metrics},
    {"limit refusals by cause, metric and period", test_limit_refusals},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
