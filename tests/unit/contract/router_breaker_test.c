/* Tests for contract/routing/dp_router.c with real breakers (contract/routing/dp_breaker.c):
 * an open breaker skips its target, a half-open one stays a candidate, and
 * the price, latency and auto strategies weigh in what the breakers saw. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_breaker.h"
#include "dp_router.h"
#include "gw_error.h"

#define EN(p, m) "{'provider':'" p "','model':'" m "'}"

/* Single quotes stand for double quotes. */
static const char DOC[] =
    "{'version':1,"
    " 'providers':["
    "  {'name':'mock','driver':'openai','base_url':'http://m'},"
    "  {'name':'claude','driver':'anthropic','base_url':'http://c'},"
    "  {'name':'alt','driver':'openai','base_url':'http://a'}],"
    " 'routes':["
    "  {'name':'smart','entries':[" EN("mock", "gpt-x") "," EN(
        "claude",
        "mock-claude") "]},"
                       "  {'name':'fastest','strategy':'latency',"
                       "   'entries':[" EN("mock", "l1") "," EN("alt", "l2") "," EN(
                           "claude",
                           "l3") "]},"
                                 "  "
                                 "{'name':'cheapest','strategy':'price','entries':"
                                 "[" EN("mock", "p-a") "," EN(
                                     "alt",
                                     "p-b") "]},"
                                            "  {'name':'mixed','strategy':'auto',"
                                            "   'entries':[" EN(
                                                "mock",
                                                "x-slow-"
                                                "cheap") "," EN("alt",
                                                                "x-fast-dear") "," EN("claude",
                                                                                      "x-fast-"
                                                                                      "cheap") "]}]"
                                                                                               ","
                                                                                               " '"
                                                                                               "cat"
                                                                                               "alo"
                                                                                               "g':"
                                                                                               "["
                                                                                               "  "
                                                                                               "{'"
                                                                                               "mod"
                                                                                               "el'"
                                                                                               ":'"
                                                                                               "p-"
                                                                                               "a',"
                                                                                               "'in"
                                                                                               "put"
                                                                                               "_pr"
                                                                                               "ice"
                                                                                               "':"
                                                                                               "5,'"
                                                                                               "out"
                                                                                               "put"
                                                                                               "_pr"
                                                                                               "ice"
                                                                                               "':"
                                                                                               "5},"
                                                                                               "  "
                                                                                               "{'"
                                                                                               "mod"
                                                                                               "el'"
                                                                                               ":'"
                                                                                               "p-"
                                                                                               "b',"
                                                                                               "'in"
                                                                                               "put"
                                                                                               "_pr"
                                                                                               "ice"
                                                                                               "':"
                                                                                               "6,'"
                                                                                               "out"
                                                                                               "put"
                                                                                               "_pr"
                                                                                               "ice"
                                                                                               "':"
                                                                                               "6},"
                                                                                               "  "
                                                                                               "{'"
                                                                                               "mod"
                                                                                               "el'"
                                                                                               ":'"
                                                                                               "x-"
                                                                                               "slo"
                                                                                               "w-"
                                                                                               "che"
                                                                                               "ap'"
                                                                                               ",'"
                                                                                               "inp"
                                                                                               "ut_"
                                                                                               "pri"
                                                                                               "ce'"
                                                                                               ":1,"
                                                                                               "'ou"
                                                                                               "tpu"
                                                                                               "t_"
                                                                                               "pri"
                                                                                               "ce'"
                                                                                               ":1}"
                                                                                               ","
                                                                                               "  "
                                                                                               "{'"
                                                                                               "mod"
                                                                                               "el'"
                                                                                               ":'"
                                                                                               "x-"
                                                                                               "fas"
                                                                                               "t-"
                                                                                               "dea"
                                                                                               "r',"
                                                                                               "'in"
                                                                                               "put"
                                                                                               "_pr"
                                                                                               "ice"
                                                                                               "':"
                                                                                               "50,"
                                                                                               "'ou"
                                                                                               "tpu"
                                                                                               "t_"
                                                                                               "pri"
                                                                                               "ce'"
                                                                                               ":50"
                                                                                               "},"
                                                                                               "  "
                                                                                               "{'"
                                                                                               "mod"
                                                                                               "el'"
                                                                                               ":'"
                                                                                               "x-"
                                                                                               "fas"
                                                                                               "t-"
                                                                                               "che"
                                                                                               "ap'"
                                                                                               ",'"
                                                                                               "inp"
                                                                                               "ut_"
                                                                                               "pri"
                                                                                               "ce'"
                                                                                               ":1,"
                                                                                               "'ou"
                                                                                               "tpu"
                                                                                               "t_"
                                                                                               "pri"
                                                                                               "ce'"
                                                                                               ":1}"
                                                                                               "]}";

static struct dp_snapshot *snap;

static int suite_init(void)
{
    char *t = strdup(DOC);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_t *j = json_loads(t, 0, NULL);
    free(t);
    if (!j)
        return 1;
    char err[256] = "";
    snap = dp_snapshot_build(j, err, sizeof(err));
    json_decref(j);
    if (!snap)
        fprintf(stderr, "\n  snapshot refused: %s\n", err);
    return snap ? 0 : 1;
}

static int suite_clean(void)
{
    dp_snapshot_unref(snap);
    return 0;
}

static const struct dp_breaker_cfg CFG = {
    .window_us = 30000000,
    .min_samples = 5,
    .failure_pct = 50,
    .open_us = 5000000,
    .max_open_us = 60000000,
    .jitter_pct = 0,
    .probes = 1,
    .close_after = 1,
    .max_targets = 64,
};

/* One admitted attempt and its verdict. */
static void attempt(struct dp_breakers *b, const char *provider, const char *model, int ok,
                    int64_t ttfb_us, int64_t now_us)
{
    enum dp_admit a = dp_breaker_admit(b, provider, model, now_us);
    CU_ASSERT_NOT_EQUAL(a, DP_ADMIT_NO);
    struct dp_outcome o = {
        .provider = provider,
        .model = model,
        .ok = ok,
        .failure = CANON_FAIL_PROVIDER_5XX,
        .latency_us = ttfb_us * 2,
        .ttfb_us = ok ? ttfb_us : 0,
        .at_us = now_us,
    };
    dp_breaker_record(b, &o, a == DP_ADMIT_PROBE);
}

static const char *cands(const struct dp_plan *p)
{
    static char out[512];
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->ncands; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s/%s", i ? "," : "",
                                p->cands[i].provider->name, p->cands[i].model);
    return out;
}

static void test_open_breaker_skips(void)
{
    struct dp_breakers *b = dp_breakers_new(&CFG);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const int64_t t0 = 1000000000;
    for (int i = 0; i < 5; i++)
        attempt(b, "mock", "gpt-x", 0, 0, t0 + i);
    CU_ASSERT_EQUAL(dp_breaker_peek(b, "mock", "gpt-x", t0 + 10), DP_BREAKER_OPEN);

    struct dp_route_ctx ctx = {.breakers = b, .now_us = t0 + 10};
    struct dp_plan p;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "smart", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "claude/mock-claude");
    CU_ASSERT_EQUAL_FATAL(p.nskips, 1);
    CU_ASSERT_EQUAL(p.skips[0].reason, DP_SKIP_BREAKER_OPEN);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.skips[0].detail, "breaker open"));

    /* Every target open: none healthy, each named. */
    for (int i = 0; i < 5; i++)
        attempt(b, "claude", "mock-claude", 0, 0, t0 + i);
    CU_ASSERT_EQUAL(dp_router_plan(snap, "smart", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_EQUAL(p.ncands, 0);
    CU_ASSERT_EQUAL(p.cause, DP_NOROUTE_NONE_HEALTHY);
    CU_ASSERT_EQUAL(dp_no_route_status(p.cause), 503);
    CU_ASSERT_PTR_NOT_NULL(strstr(p.message, "mock/gpt-x: breaker_open ("));
    CU_ASSERT_PTR_NOT_NULL(strstr(p.message, "claude/mock-claude: breaker_open ("));

    /* After the open interval the breaker is half-open: a candidate again
     * (the attempt loop takes the probe slot). */
    ctx.now_us = t0 + 10 + CFG.open_us;
    CU_ASSERT_EQUAL(dp_breaker_peek(b, "mock", "gpt-x", ctx.now_us), DP_BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(dp_router_plan(snap, "smart", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "mock/gpt-x,claude/mock-claude");
    dp_breakers_free(b);
}

static void test_latency_order(void)
{
    struct dp_breakers *b = dp_breakers_new(&CFG);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const int64_t t0 = 1000000000;
    for (int i = 0; i < 5; i++) {
        attempt(b, "mock", "l1", 1, 300000, t0 + i);
        attempt(b, "alt", "l2", 1, 100000, t0 + i);
    }
    /* claude/l3 is unobserved: it counts as fast as the fastest (alt/l2)
     * and the written order breaks the tie. */
    struct dp_route_ctx ctx = {.breakers = b, .now_us = t0 + 10};
    struct dp_plan p;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "fastest", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "alt/l2,claude/l3,mock/l1");

    /* Failures weigh in without opening the breaker (3 of 8 < 50%): */
    attempt(b, "alt", "l2", 0, 0, t0 + 20);
    attempt(b, "alt", "l2", 0, 0, t0 + 21);
    attempt(b, "alt", "l2", 0, 0, t0 + 22);
    ctx.now_us = t0 + 30;
    struct dp_target_stats st;
    dp_breaker_stats(b, "alt", "l2", ctx.now_us, &st);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(dp_router_plan(snap, "fastest", NULL, &ctx, &p), GW_OK);
    /* alt/l2: 100 ms / 0.625 = 160 ms, behind claude/l3 (unobserved, so
     * the smallest observed 100 ms at full success), ahead of mock/l1. */
    CU_ASSERT_STRING_EQUAL(cands(&p), "claude/l3,alt/l2,mock/l1");
    dp_breakers_free(b);
}

static void test_price_weighs_success(void)
{
    struct dp_breakers *b = dp_breakers_new(&CFG);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const int64_t t0 = 1000000000;
    struct dp_route_ctx ctx = {.breakers = b, .now_us = t0 + 10};
    struct dp_plan p;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "cheapest", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "mock/p-a,alt/p-b");
    /* p-a (10 per token pair) at 60% success scores 16, p-b (12) at 100%
     * scores 12: p-b first. The breaker stays closed (40% < 50%). */
    for (int i = 0; i < 3; i++)
        attempt(b, "mock", "p-a", 1, 1000, t0 + i);
    for (int i = 0; i < 2; i++)
        attempt(b, "mock", "p-a", 0, 0, t0 + 3 + i);
    CU_ASSERT_EQUAL(dp_breaker_peek(b, "mock", "p-a", ctx.now_us), DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(dp_router_plan(snap, "cheapest", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "alt/p-b,mock/p-a");
    dp_breakers_free(b);
}

static void test_auto_order(void)
{
    struct dp_breakers *b = dp_breakers_new(&CFG);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    const int64_t t0 = 1000000000;
    for (int i = 0; i < 5; i++) {
        attempt(b, "mock", "x-slow-cheap", 1, 900000, t0 + i);
        attempt(b, "alt", "x-fast-dear", 1, 100000, t0 + i);
        attempt(b, "claude", "x-fast-cheap", 1, 100000, t0 + i);
    }
    /* Price ranks 1, 3, 1; latency ranks 3, 1, 1: products 3, 3, 1. */
    struct dp_route_ctx ctx = {.breakers = b, .now_us = t0 + 10};
    struct dp_plan p;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "mixed", NULL, &ctx, &p), GW_OK);
    CU_ASSERT_STRING_EQUAL(cands(&p), "claude/x-fast-cheap,mock/x-slow-cheap,alt/x-fast-dear");
    dp_breakers_free(b);
}

static CU_TestInfo tests[] = {
    {"an open breaker skips, half-open does not", test_open_breaker_skips},
    {"latency: observed ttfb over success", test_latency_order},
    {"price: success rate weighs in", test_price_weighs_success},
    {"auto: price rank x latency rank", test_auto_order},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
