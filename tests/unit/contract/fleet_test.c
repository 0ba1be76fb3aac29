/* Tests for contract/routing/dp_outcomes.c (the summaries' input: shards merged,
 * classes, buckets, breaker changes) and contract/routing/dp_fleet.c (the view:
 * skip, the probe slot, expiry), and the router's fleet_down skip. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_fleet.h"
#include "dp_outcomes.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_time.h"

static const Llmgw__V1__TargetOutcomes *find(const Llmgw__V1__OutcomeSummary *s,
                                             const char *provider, const char *model)
{
    for (size_t i = 0; i < s->n_targets; i++)
        if (!strcmp(s->targets[i]->provider, provider) && !strcmp(s->targets[i]->model, model))
            return s->targets[i];
    return NULL;
}

static uint64_t fails(const Llmgw__V1__TargetOutcomes *t, const char *cls)
{
    for (size_t i = 0; i < t->n_failures; i++)
        if (!strcmp(t->failures[i]->failure_class, cls))
            return t->failures[i]->count;
    return 0;
}

static void test_buckets(void)
{
    CU_ASSERT_EQUAL(dp_outcomes_bucket(0), 0);
    CU_ASSERT_EQUAL(dp_outcomes_bucket(50), 0);
    CU_ASSERT_EQUAL(dp_outcomes_bucket(51), 1);
    CU_ASSERT_EQUAL(dp_outcomes_bucket(30000), 8);
    CU_ASSERT_EQUAL(dp_outcomes_bucket(30001), 9);
    CU_ASSERT_EQUAL(dp_outcomes_bucket(UINT64_MAX), 9);
}

static void test_record_and_harvest(void)
{
    dp_outcomes_reset();
    struct dp_outcome ok = {
        .provider = "p", .model = "m", .ok = 1, .latency_us = 120000, .ttfb_us = 40000};
    struct dp_outcome f5 = {.provider = "p", .model = "m", .failure = CANON_FAIL_PROVIDER_5XX};
    struct dp_outcome br = {.provider = "p", .model = "m", .failure = CANON_FAIL_BAD_REQUEST};
    struct dp_outcome cx = {.provider = "p", .model = "m", .failure = CANON_FAIL_CANCELED};
    for (int i = 0; i < 3; i++)
        dp_outcomes_record(&ok, 0);
    dp_outcomes_record(&f5, 0);
    dp_outcomes_record(&f5, 1); /* a fleet probe that failed */
    dp_outcomes_record(&br, 0);
    dp_outcomes_record(&cx, 0); /* no verdict: not counted */
    dp_outcomes_skip("p", "m");
    dp_outcomes_skip("q", "m");
    Llmgw__V1__OutcomeSummary *s = dp_outcomes_harvest(1000, 2000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->interval_start_ms, 1000);
    CU_ASSERT_EQUAL(s->interval_ms, 1000);
    CU_ASSERT_EQUAL(s->n_targets, 2);
    const Llmgw__V1__TargetOutcomes *t = find(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->ok, 3);
    CU_ASSERT_EQUAL(fails(t, "provider_5xx"), 2);
    CU_ASSERT_EQUAL(fails(t, "bad_request"), 1);
    CU_ASSERT_EQUAL(fails(t, "canceled"), 0);
    CU_ASSERT_EQUAL(t->probe_failed, 1);
    CU_ASSERT_EQUAL(t->probe_ok, 0);
    CU_ASSERT_EQUAL(t->fleet_skipped, 1);
    CU_ASSERT_STRING_EQUAL(t->breaker, "closed");
    CU_ASSERT_EQUAL(t->latency->count, 3);
    CU_ASSERT_EQUAL(t->latency->sum_ms, 360);
    CU_ASSERT_EQUAL(t->latency->max_ms, 120);
    CU_ASSERT_EQUAL(t->latency->n_buckets, DP_OUTCOMES_NBUCKETS);
    CU_ASSERT_EQUAL(t->latency->buckets[2], 3); /* 100 < 120 <= 250 */
    CU_ASSERT_EQUAL(t->ttfb->buckets[0], 3);    /* 40 <= 50 */
    CU_ASSERT_EQUAL(find(s, "q", "m")->fleet_skipped, 1);
    dp_outcomes_summary_free(s);
    /* Taken: the next interval starts empty. */
    s = dp_outcomes_harvest(2000, 3000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->n_targets, 0);
    dp_outcomes_summary_free(s);
}

static void *recorder(void *arg)
{
    struct dp_outcome o = {.provider = "p", .model = (const char *)arg, .ok = 1};
    for (int i = 0; i < 10000; i++)
        dp_outcomes_record(&o, 0);
    return NULL;
}

static void test_threads_merge(void)
{
    dp_outcomes_reset();
    pthread_t th[4];
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(pthread_create(&th[i], NULL, recorder, i % 2 ? "a" : "b"), 0);
    /* Harvests while they record: nothing is lost or counted twice. */
    uint64_t a = 0, b = 0;
    for (int round = 0; round < 50; round++) {
        Llmgw__V1__OutcomeSummary *s = dp_outcomes_harvest(0, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(s);
        const Llmgw__V1__TargetOutcomes *ta = find(s, "p", "a"), *tb = find(s, "p", "b");
        a += ta ? ta->ok : 0;
        b += tb ? tb->ok : 0;
        dp_outcomes_summary_free(s);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    Llmgw__V1__OutcomeSummary *s = dp_outcomes_harvest(0, 1);
    const Llmgw__V1__TargetOutcomes *ta = find(s, "p", "a"), *tb = find(s, "p", "b");
    a += ta ? ta->ok : 0;
    b += tb ? tb->ok : 0;
    dp_outcomes_summary_free(s);
    CU_ASSERT_EQUAL(a, 20000);
    CU_ASSERT_EQUAL(b, 20000);
    CU_ASSERT_EQUAL(dp_outcomes_dropped(), 0);
}

static int notified;
static void on_notify(void *arg)
{
    (void)arg;
    notified++;
}

static void test_breaker_changes(void)
{
    dp_outcomes_reset();
    notified = 0;
    dp_outcomes_set_notify(on_notify, NULL);
    int64_t now = gw_now_us();
    dp_outcomes_change("p", "m", DP_BREAKER_CLOSED, DP_BREAKER_OPEN, now);
    CU_ASSERT_EQUAL(notified, 1);
    Llmgw__V1__OutcomeSummary *s = dp_outcomes_harvest(0, 1);
    const Llmgw__V1__TargetOutcomes *t = find(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->breaker, "open");
    CU_ASSERT_EQUAL(t->n_changes, 1);
    CU_ASSERT_STRING_EQUAL(t->changes[0]->from, "closed");
    CU_ASSERT_STRING_EQUAL(t->changes[0]->to, "open");
    int64_t wall = gw_wall_ms();
    CU_ASSERT(t->changes[0]->at_ms > wall - 5000 && t->changes[0]->at_ms <= wall);
    CU_ASSERT_EQUAL(t->ok, 0);
    dp_outcomes_summary_free(s);
    /* Still open: reported with no news. */
    s = dp_outcomes_harvest(1, 2);
    t = find(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->breaker, "open");
    CU_ASSERT_EQUAL(t->n_changes, 0);
    dp_outcomes_summary_free(s);
    /* Closed again: said once, then forgotten. */
    dp_outcomes_change("p", "m", DP_BREAKER_OPEN, DP_BREAKER_HALF_OPEN, now);
    dp_outcomes_change("p", "m", DP_BREAKER_HALF_OPEN, DP_BREAKER_CLOSED, now);
    s = dp_outcomes_harvest(2, 3);
    t = find(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_STRING_EQUAL(t->breaker, "closed");
    CU_ASSERT_EQUAL(t->n_changes, 2);
    dp_outcomes_summary_free(s);
    s = dp_outcomes_harvest(3, 4);
    CU_ASSERT_EQUAL(s->n_targets, 0);
    dp_outcomes_summary_free(s);
    /* A fleet probe's verdict notifies too. */
    struct dp_outcome ok = {.provider = "p", .model = "m", .ok = 1};
    dp_outcomes_record(&ok, 0);
    CU_ASSERT_EQUAL(notified, 3);
    dp_outcomes_record(&ok, 1);
    CU_ASSERT_EQUAL(notified, 4);
    dp_outcomes_set_notify(NULL, NULL);
    dp_outcomes_reset();
}

/* ---------------------------------------------------------------- view */

/* A view of one target (provider "p") in state st, probe for this replica. */
static int apply(const char *model, Llmgw__V1__FleetState st, int probe, int64_t ttl_ms,
                 int64_t now_us)
{
    Llmgw__V1__FleetTarget t = LLMGW__V1__FLEET_TARGET__INIT;
    Llmgw__V1__FleetTarget other = LLMGW__V1__FLEET_TARGET__INIT;
    char *reasons[] = {"breakers opened on 2 of 3 replicas"};
    t.provider = "p";
    t.model = (char *)model;
    t.state = st;
    t.probe = probe;
    t.reasons = reasons;
    t.n_reasons = 1;
    other.provider = "p";
    other.model = "other";
    other.state = LLMGW__V1__FLEET_STATE__FLEET_STATE_HEALTHY;
    Llmgw__V1__FleetTarget *ts[] = {&other, &t};
    Llmgw__V1__FleetView v = LLMGW__V1__FLEET_VIEW__INIT;
    v.version = 42;
    v.ttl_ms = ttl_ms;
    v.targets = ts;
    v.n_targets = 2;
    return dp_fleet_apply(&v, now_us);
}

static void test_view_skip_and_probe(void)
{
    dp_outcomes_reset();
    int64_t now = gw_now_us();
    char why[96];
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now, why, sizeof(why)), 0); /* no view */
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_YES);

    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN, 0, 5000, now), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_version(now), 42);
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now, why, sizeof(why)), 1);
    CU_ASSERT_STRING_EQUAL(why, "breakers opened on 2 of 3 replicas");
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "other", now, NULL, 0), 0);
    CU_ASSERT_EQUAL(dp_fleet_skip("q", "m", now, NULL, 0), 0);
    /* Past its ttl the view is ignored: a gone control plane blackholes nothing. */
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now + 5000 * 1000, NULL, 0), 0);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now + 5000 * 1000), DP_ADMIT_YES);
    CU_ASSERT_EQUAL(dp_fleet_version(now + 5000 * 1000), 0);

    /* This replica holds the probe: one attempt at a time. */
    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN, 1, 5000, now), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now, NULL, 0), 0);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now, NULL, 0), 1);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_NO);
    /* A refreshed view keeps the slot taken. */
    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN, 1, 5000, now), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_NO);
    /* Its verdict gives it back, and goes to the next summary as the probe's. */
    struct dp_outcome o = {.provider = "p", .model = "m", .ok = 1};
    dp_fleet_record(&o, 1);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_PROBE);
    dp_fleet_unadmit("p", "m"); /* the breaker refused it after all */
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_PROBE);
    /* A lost verdict: the slot is taken back after a minute. */
    int64_t later = now + 59 * INT64_C(1000000);
    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN, 1, 5000, later), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", later), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", later + 2 * INT64_C(1000000)), DP_ADMIT_PROBE);
    Llmgw__V1__OutcomeSummary *s = dp_outcomes_harvest(0, 1);
    const Llmgw__V1__TargetOutcomes *t = find(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->probe_ok, 1);
    CU_ASSERT(t->fleet_skipped >= 2);
    dp_outcomes_summary_free(s);

    /* Degraded and healthy route as usual. */
    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DEGRADED, 0, 5000, now), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_skip("p", "m", now, NULL, 0), 0);
    CU_ASSERT_EQUAL(dp_fleet_admit("p", "m", now), DP_ADMIT_YES);
    CU_ASSERT_EQUAL(dp_fleet_apply(NULL, now), GW_OK);
    CU_ASSERT_EQUAL(dp_fleet_version(now), 0);
    dp_outcomes_reset();
}

static void test_router_fleet_down(void)
{
    const char *doc =
        "{\"version\":1,\"providers\":["
        "{\"name\":\"p\",\"driver\":\"openai\",\"base_url\":\"http://p\"},"
        "{\"name\":\"b\",\"driver\":\"openai\",\"base_url\":\"http://b\"}],"
        "\"routes\":[{\"name\":\"r\",\"entries\":["
        "{\"provider\":\"p\",\"model\":\"m\"},{\"provider\":\"b\",\"model\":\"m\"}]}]}";
    json_t *j = json_loads(doc, 0, NULL);
    char err[256] = "";
    struct dp_snapshot *snap = dp_snapshot_build(j, err, sizeof(err));
    json_decref(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(snap);
    int64_t now = gw_now_us();
    CU_ASSERT_EQUAL(apply("m", LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN, 0, 5000, now), GW_OK);
    struct dp_route_ctx ctx = {.now_us = now};
    struct dp_plan plan;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "r", NULL, &ctx, &plan), GW_OK);
    CU_ASSERT_EQUAL(plan.ncands, 1);
    CU_ASSERT_STRING_EQUAL(plan.cands[0].provider->name, "b");
    CU_ASSERT_EQUAL(plan.nskips, 1);
    CU_ASSERT_EQUAL(plan.skips[0].reason, DP_SKIP_FLEET_DOWN);
    CU_ASSERT_PTR_NOT_NULL(strstr(plan.skips[0].detail, "breakers opened on 2 of 3"));
    /* Only it: 503 no_healthy_target, naming fleet_down. */
    CU_ASSERT_EQUAL(dp_router_plan(snap, "p/m", NULL, &ctx, &plan), GW_OK);
    CU_ASSERT_EQUAL(plan.ncands, 0);
    CU_ASSERT_EQUAL(plan.cause, DP_NOROUTE_NONE_HEALTHY);
    CU_ASSERT_PTR_NOT_NULL(strstr(plan.message, "fleet_down"));
    /* The view expired: it is a candidate again. */
    ctx.now_us = now + 6000 * 1000;
    CU_ASSERT_EQUAL(dp_router_plan(snap, "r", NULL, &ctx, &plan), GW_OK);
    CU_ASSERT_EQUAL(plan.ncands, 2);
    CU_ASSERT_EQUAL(dp_fleet_apply(NULL, now), GW_OK);
    dp_snapshot_unref(snap);
    dp_outcomes_reset();
}

static CU_TestInfo tests[] = {
    {"duration buckets", test_buckets},
    {"record and harvest: classes, summaries, probes, skips", test_record_and_harvest},
    {"four threads, harvests while they record: every outcome once", test_threads_merge},
    {"breaker changes: reported, kept while not closed, notified", test_breaker_changes},
    {"the view: skip, one probe at a time, expiry", test_view_skip_and_probe},
    {"the router skips a target the fleet sees down (fleet_down)", test_router_fleet_down},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
