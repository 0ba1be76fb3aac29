/* Tests for controlplane/fleet/cp_fleetview.c: the merge of summaries in
 * the sliding window, the state rules (down by breakers or by failure
 * rate, degraded, healthy), the latch and its probe (assignment, round
 * robin, hand-over, backoff, recovery), the view packed per replica, the
 * blobs between control planes (leader and follower agree), membership. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_fleetview.h"
#include "gw_error.h"

#define T0 INT64_C(1800000000000) /* a wall-clock ms, on a second */

/* One target's outcomes in a summary; changes: "c>o" style pairs. */
struct tgt {
    const char *provider, *model;
    unsigned ok, fail5xx, bad_request;
    const char *breaker;
    const char *changes[4]; /* "closed>open", ... */
    int64_t change_at;
    unsigned probe_ok, probe_failed, skipped;
    unsigned ttfb_ms; /* each ok attempt's */
};

static int add(struct cp_fleetview *fv, const char *replica, const struct tgt *t, size_t n,
               int64_t now)
{
    Llmgw__V1__OutcomeSummary s = LLMGW__V1__OUTCOME_SUMMARY__INIT;
    Llmgw__V1__TargetOutcomes to[8], *tp[8];
    Llmgw__V1__FailureCount fc[8][2], *fcp[8][2];
    Llmgw__V1__StateChange ch[8][4], *chp[8][4];
    Llmgw__V1__DurationSummary ttfb[8];
    uint64_t b[8][10];
    char fromto[8][4][2][16];
    for (size_t i = 0; i < n; i++) {
        llmgw__v1__target_outcomes__init(&to[i]);
        to[i].provider = (char *)t[i].provider;
        to[i].model = (char *)t[i].model;
        to[i].ok = t[i].ok;
        to[i].breaker = (char *)(t[i].breaker ? t[i].breaker : "closed");
        size_t nf = 0;
        if (t[i].fail5xx) {
            llmgw__v1__failure_count__init(&fc[i][nf]);
            fc[i][nf].failure_class = "provider_5xx";
            fc[i][nf].count = t[i].fail5xx;
            fcp[i][nf] = &fc[i][nf];
            nf++;
        }
        if (t[i].bad_request) {
            llmgw__v1__failure_count__init(&fc[i][nf]);
            fc[i][nf].failure_class = "bad_request";
            fc[i][nf].count = t[i].bad_request;
            fcp[i][nf] = &fc[i][nf];
            nf++;
        }
        to[i].failures = fcp[i];
        to[i].n_failures = nf;
        size_t nc = 0;
        for (; nc < 4 && t[i].changes[nc]; nc++) {
            llmgw__v1__state_change__init(&ch[i][nc]);
            sscanf(t[i].changes[nc], "%15[^>]>%15s", fromto[i][nc][0], fromto[i][nc][1]);
            ch[i][nc].from = fromto[i][nc][0];
            ch[i][nc].to = fromto[i][nc][1];
            ch[i][nc].at_ms = t[i].change_at ? t[i].change_at : now;
            chp[i][nc] = &ch[i][nc];
        }
        to[i].changes = chp[i];
        to[i].n_changes = nc;
        to[i].probe_ok = t[i].probe_ok;
        to[i].probe_failed = t[i].probe_failed;
        to[i].fleet_skipped = t[i].skipped;
        if (t[i].ttfb_ms && t[i].ok) {
            llmgw__v1__duration_summary__init(&ttfb[i]);
            memset(b[i], 0, sizeof(b[i]));
            unsigned k = t[i].ttfb_ms <= 50      ? 0
                         : t[i].ttfb_ms <= 100   ? 1
                         : t[i].ttfb_ms <= 250   ? 2
                         : t[i].ttfb_ms <= 500   ? 3
                         : t[i].ttfb_ms <= 1000  ? 4
                         : t[i].ttfb_ms <= 2500  ? 5
                         : t[i].ttfb_ms <= 5000  ? 6
                         : t[i].ttfb_ms <= 10000 ? 7
                                                 : 8;
            b[i][k] = t[i].ok;
            ttfb[i].count = t[i].ok;
            ttfb[i].sum_ms = (uint64_t)t[i].ok * t[i].ttfb_ms;
            ttfb[i].max_ms = t[i].ttfb_ms;
            ttfb[i].buckets = b[i];
            ttfb[i].n_buckets = 10;
            to[i].ttfb = &ttfb[i];
        }
        tp[i] = &to[i];
    }
    s.targets = tp;
    s.n_targets = n;
    return cp_fleetview_add(fv, replica, &s, now);
}

static void members(struct cp_fleetview *fv, int64_t now, const char *const *ids)
{
    struct cp_fleetview_member m[8];
    size_t n = 0;
    for (; ids[n]; n++)
        m[n] =
            (struct cp_fleetview_member){.id = ids[n], .snapshot_version = 7, .last_seen_ms = now};
    cp_fleetview_set_members(fv, m, n, now);
}

static const char *const ABC[] = {"dp-a", "dp-b", "dp-c", NULL};

/* The target's state and probe holder from the health document. */
static const char *state_of(struct cp_fleetview *fv, int64_t now, const char *provider,
                            char *holder, size_t hlen, char *reason, size_t rlen)
{
    static char st[16];
    st[0] = '\0';
    if (holder)
        holder[0] = '\0';
    if (reason)
        reason[0] = '\0';
    json_t *h = cp_fleetview_health(fv, now);
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(json_object_get(h, "fleet"), "targets"), i, t)
    {
        if (strcmp(json_string_value(json_object_get(t, "provider")), provider) != 0)
            continue;
        snprintf(st, sizeof(st), "%s", json_string_value(json_object_get(t, "state")));
        json_t *p = json_object_get(t, "probe");
        if (holder && json_is_object(p))
            snprintf(holder, hlen, "%s", json_string_value(json_object_get(p, "replica_id")));
        json_t *r = json_array_get(json_object_get(t, "reasons"), 0);
        if (reason && r)
            snprintf(reason, rlen, "%s", json_string_value(r));
    }
    json_decref(h);
    return st;
}

#define STATE(fv, now, p) state_of(fv, now, p, NULL, 0, NULL, 0)

static void test_healthy(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    for (int r = 0; r < 3; r++) {
        struct tgt t = {"p", "m", .ok = 20, .ttfb_ms = 80};
        CU_ASSERT_EQUAL(add(fv, ABC[r], &t, 1, T0), 1); /* a new replica is news */
    }
    struct tgt t = {"p", "m", .ok = 20, .ttfb_ms = 80};
    CU_ASSERT_EQUAL(add(fv, "dp-a", &t, 1, T0 + 100), 0);
    cp_fleetview_compute(fv, T0 + 200, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 200, "p"), "healthy");
    CU_ASSERT_EQUAL(cp_fleetview_version(fv), 1);
    CU_ASSERT_EQUAL(cp_fleetview_replicas(fv, T0 + 200), 3);
    /* Bad requests say nothing about the provider. */
    struct tgt br = {"q", "m", .bad_request = 50};
    add(fv, "dp-a", &br, 1, T0 + 300);
    cp_fleetview_compute(fv, T0 + 400, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 400, "q"), "healthy");
    cp_fleetview_free(fv);
}

static void test_down_by_breakers(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    struct tgt ok = {"p", "m", .ok = 10};
    for (int r = 0; r < 3; r++)
        add(fv, ABC[r], &ok, 1, T0);
    /* One replica's breaker opens: degraded (it may be that replica's own
     * path), not down. */
    struct tgt opened = {"p", "m", .fail5xx = 3, .breaker = "open", .changes = {"closed>open"}};
    CU_ASSERT_EQUAL(add(fv, "dp-a", &opened, 1, T0 + 500), 1);
    cp_fleetview_compute(fv, T0 + 500, 1, "cp-1", -1);
    char reason[200];
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 500, "p", NULL, 0, reason, sizeof(reason)),
                           "degraded");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "breaker open on 1 of 3"));
    /* A second one: most replicas that tried it. */
    add(fv, "dp-b", &opened, 1, T0 + 600);
    CU_ASSERT_EQUAL(cp_fleetview_compute(fv, T0 + 600, 1, "cp-1", -1), 1);
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 600, "p", NULL, 0, reason, sizeof(reason)), "down");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "breakers opened on 2 of 3"));
    CU_ASSERT(cp_fleetview_version(fv) > 1);
    /* Latched: long after the evidence aged out, still down. */
    cp_fleetview_compute(fv, T0 + 30000, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 30000, "p"), "down");
    cp_fleetview_free(fv);
}

/* One replica's breaker opens before the others' summaries came (they
 * report once a second, a breaker change at once): the verdict waits for
 * them, up to the grace, and is theirs to outvote. With nobody else
 * connected, or nobody else reporting attempts, it is down after all. */
static void test_breaker_waits_for_reports(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    struct tgt opened = {"p", "m", .fail5xx = 3, .breaker = "open", .changes = {"closed>open"}};
    add(fv, "dp-a", &opened, 1, T0 + 100);
    cp_fleetview_compute(fv, T0 + 100, 1, "cp-1", -1);
    char reason[200];
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 100, "p", NULL, 0, reason, sizeof(reason)),
                           "degraded");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "waiting for 2 more replicas' reports"));
    /* Their summaries: both served it. One of three: degraded, and it
     * stays so past the grace. */
    struct tgt ok = {"p", "m", .ok = 10};
    add(fv, "dp-b", &ok, 1, T0 + 900);
    add(fv, "dp-c", &ok, 1, T0 + 1000);
    members(fv, T0 + 1000, ABC);
    cp_fleetview_compute(fv, T0 + 1000, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 1000, "p", NULL, 0, reason, sizeof(reason)),
                           "degraded");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "breaker open on 1 of 3"));
    cp_fleetview_compute(fv, T0 + 2000, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 2000, "p"), "degraded");
    cp_fleetview_free(fv);

    /* The others connected but not using it: down once the grace is over. */
    fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    add(fv, "dp-a", &opened, 1, T0 + 100);
    cp_fleetview_compute(fv, T0 + 100, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 100, "p"), "degraded");
    members(fv, T0 + 1700, ABC);
    cp_fleetview_compute(fv, T0 + 1700, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 1700, "p", NULL, 0, reason, sizeof(reason)), "down");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "breakers opened on 1 of 1"));
    cp_fleetview_free(fv);

    /* A fleet of one: at once. */
    fv = cp_fleetview_new("cp-1", NULL);
    const char *const a[] = {"dp-a", NULL};
    members(fv, T0, a);
    add(fv, "dp-a", &opened, 1, T0 + 100);
    cp_fleetview_compute(fv, T0 + 100, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 100, "p"), "down");
    cp_fleetview_free(fv);
}

static void test_down_by_failure_rate(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    /* 4 of 4: below the minimum of 5 failures, degraded. */
    struct tgt f4 = {"p", "m", .fail5xx = 4};
    add(fv, "dp-a", &f4, 1, T0);
    cp_fleetview_compute(fv, T0, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0, "p"), "degraded");
    /* 9 of 10 across two replicas: down. */
    struct tgt f5 = {"p", "m", .fail5xx = 5, .ok = 1};
    add(fv, "dp-b", &f5, 1, T0 + 1000);
    cp_fleetview_compute(fv, T0 + 1000, 1, "cp-1", -1);
    char reason[200];
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 1000, "p", NULL, 0, reason, sizeof(reason)), "down");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "9 of 10 attempts failed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "provider_5xx 9"));
    /* 6 of 30: degraded only (20% or more), never down. */
    struct tgt mix = {"q", "m", .fail5xx = 6, .ok = 24};
    add(fv, "dp-c", &mix, 1, T0 + 1000);
    cp_fleetview_compute(fv, T0 + 1000, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 1000, "q"), "degraded");
    /* The window slides: 4 s later, with successes since, healthy again. */
    struct tgt fine = {"q", "m", .ok = 30};
    add(fv, "dp-c", &fine, 1, T0 + 4000);
    cp_fleetview_compute(fv, T0 + 4000, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, T0 + 4000, "q"), "healthy");
    cp_fleetview_free(fv);
}

static void test_latency_degraded(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    for (int s = 0; s < 6; s++) {
        struct tgt t = {"p", "m", .ok = 10, .ttfb_ms = 80};
        add(fv, "dp-a", &t, 1, T0 + s * 1000);
    }
    struct tgt slow = {"p", "m", .ok = 10, .ttfb_ms = 3000};
    add(fv, "dp-a", &slow, 1, T0 + 7000);
    cp_fleetview_compute(fv, T0 + 7000, 1, "cp-1", -1);
    char reason[200];
    CU_ASSERT_STRING_EQUAL(state_of(fv, T0 + 7000, "p", NULL, 0, reason, sizeof(reason)),
                           "degraded");
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "time to first byte p90 3000 ms"));
    CU_ASSERT_PTR_NOT_NULL(strstr(reason, "80 ms before"));
    cp_fleetview_free(fv);
}

/* Down at T0 + 1000 with dp-a and dp-b wanting the target. */
static struct cp_fleetview *down_fleet(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    members(fv, T0, ABC);
    struct tgt opened = {"p", "m", .fail5xx = 3, .breaker = "open", .changes = {"closed>open"}};
    add(fv, "dp-a", &opened, 1, T0 + 1000);
    add(fv, "dp-b", &opened, 1, T0 + 1000);
    cp_fleetview_compute(fv, T0 + 1000, 1, "cp-1", -1);
    return fv;
}

static int probe_for(struct cp_fleetview *fv, const char *replica, int64_t now)
{
    uint8_t *b;
    size_t n;
    if (cp_fleetview_pack(fv, replica, now, &b, &n) != GW_OK)
        return -1;
    Llmgw__V1__FleetView *v = llmgw__v1__fleet_view__unpack(NULL, n, b);
    free(b);
    int probe = -1;
    for (size_t i = 0; v && i < v->n_targets; i++)
        if (!strcmp(v->targets[i]->provider, "p")) {
            CU_ASSERT_EQUAL(v->targets[i]->state, LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN);
            probe = v->targets[i]->probe;
        }
    if (v) {
        CU_ASSERT_EQUAL(v->ttl_ms, 5000);
        llmgw__v1__fleet_view__free_unpacked(v, NULL);
    }
    return probe;
}

static void test_probe_round_robin_and_recovery(void)
{
    struct cp_fleetview *fv = down_fleet();
    char holder[64];
    int64_t now = T0 + 1000;
    CU_ASSERT_STRING_EQUAL(state_of(fv, now, "p", holder, sizeof(holder), NULL, 0), "down");
    CU_ASSERT_STRING_EQUAL(holder, ""); /* no probe before probe_first_ms */
    CU_ASSERT_EQUAL(probe_for(fv, "dp-a", now), 0);
    /* 5 s later: the first of the replicas that wanted it, in id order. */
    now = T0 + 6000;
    members(fv, now, ABC);
    CU_ASSERT_EQUAL(cp_fleetview_compute(fv, now, 1, "cp-1", -1), 1);
    state_of(fv, now, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "dp-a");
    CU_ASSERT_EQUAL(probe_for(fv, "dp-a", now), 1);
    CU_ASSERT_EQUAL(probe_for(fv, "dp-b", now), 0);
    CU_ASSERT_EQUAL(probe_for(fv, "dp-c", now), 0);
    /* dp-a does not probe within the hold (no traffic): dp-b's turn; dp-c
     * never wanted it, so it is not picked. */
    now = T0 + 11000;
    members(fv, now, ABC);
    cp_fleetview_compute(fv, now, 1, "cp-1", -1);
    state_of(fv, now, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "dp-b");
    /* dp-b's probe fails: no holder for twice the first wait (10 s). */
    struct tgt failed = {"p", "m", .fail5xx = 1, .probe_failed = 1, .breaker = "open"};
    CU_ASSERT_EQUAL(add(fv, "dp-b", &failed, 1, now + 200), 1);
    cp_fleetview_compute(fv, now + 200, 1, "cp-1", -1);
    state_of(fv, now + 200, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "");
    now += 200 + 9000;
    members(fv, now, ABC);
    cp_fleetview_compute(fv, now, 1, "cp-1", -1);
    state_of(fv, now, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "");
    now += 1100;
    members(fv, now, ABC);
    cp_fleetview_compute(fv, now, 1, "cp-1", -1);
    state_of(fv, now, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "dp-a"); /* round robin goes on */
    /* dp-a's probe succeeds: healthy at once. */
    struct tgt okp = {
        "p", "m", .ok = 1, .probe_ok = 1, .breaker = "closed", .changes = {"half_open>closed"}};
    CU_ASSERT_EQUAL(add(fv, "dp-a", &okp, 1, now + 100), 1);
    CU_ASSERT_EQUAL(cp_fleetview_compute(fv, now + 100, 1, "cp-1", -1), 1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, now + 100, "p"), "healthy");
    CU_ASSERT_EQUAL(cp_fleetview_version(fv), 1);
    /* dp-b's breaker is still open from before: old evidence, not a new
     * outage. */
    struct tgt stale = {"p", "m", .breaker = "open"};
    add(fv, "dp-b", &stale, 1, now + 200);
    cp_fleetview_compute(fv, now + 200, 1, "cp-1", -1);
    CU_ASSERT_STRING_EQUAL(STATE(fv, now + 200, "p"), "healthy");
    cp_fleetview_free(fv);
}

static void test_probe_needs_connected(void)
{
    struct cp_fleetview *fv = down_fleet();
    /* dp-a and dp-b left; only dp-c is connected: it gets the probe (no
     * one with demand is there). */
    const char *const c[] = {"dp-c", NULL};
    members(fv, T0 + 6000, c);
    cp_fleetview_compute(fv, T0 + 6000, 1, "cp-1", -1);
    char holder[64];
    state_of(fv, T0 + 6000, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "dp-c");
    /* Demand shown by skips counts: dp-d skipped it (fleet_down). */
    const char *const cd[] = {"dp-c", "dp-d", NULL};
    struct tgt sk = {"p", "m", .skipped = 4};
    add(fv, "dp-d", &sk, 1, T0 + 6500);
    members(fv, T0 + 12000, cd);
    cp_fleetview_compute(fv, T0 + 12000, 1, "cp-1", -1);
    state_of(fv, T0 + 12000, "p", holder, sizeof(holder), NULL, 0);
    CU_ASSERT_STRING_EQUAL(holder, "dp-d");
    cp_fleetview_free(fv);
}

static void test_version_independent_of_order(void)
{
    struct cp_fleetview *a = cp_fleetview_new("cp-1", NULL), *b = cp_fleetview_new("cp-1", NULL);
    struct tgt f = {"p", "m", .fail5xx = 9};
    struct tgt g = {"q", "m", .fail5xx = 9};
    add(a, "dp-a", &f, 1, T0);
    add(a, "dp-a", &g, 1, T0);
    add(b, "dp-a", &g, 1, T0);
    add(b, "dp-a", &f, 1, T0);
    cp_fleetview_compute(a, T0, 1, "cp-1", -1);
    cp_fleetview_compute(b, T0, 1, "cp-1", -1);
    CU_ASSERT_EQUAL(cp_fleetview_version(a), cp_fleetview_version(b));
    CU_ASSERT_NOT_EQUAL(cp_fleetview_version(a), 1);
    cp_fleetview_free(a);
    cp_fleetview_free(b);
}

/* Blobs of one control plane into another. */
static void exchange(struct cp_fleetview *from, const char *from_id, struct cp_fleetview *to,
                     int64_t now)
{
    char *o = cp_fleetview_outcomes_blob(from, now);
    char *d = cp_fleetview_members_blob(from, now);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    cp_fleetview_remote_begin(to, "outcomes");
    CU_ASSERT_EQUAL(cp_fleetview_remote(to, "outcomes", from_id, o, strlen(o), now), 1);
    cp_fleetview_remote_end(to, "outcomes");
    cp_fleetview_remote_begin(to, "dp");
    CU_ASSERT_EQUAL(cp_fleetview_remote(to, "dp", from_id, d, strlen(d), now), 1);
    cp_fleetview_remote_end(to, "dp");
    free(o);
    free(d);
}

static void test_two_control_planes_agree(void)
{
    /* dp-a on cp-1 (the leader), dp-b and dp-c on cp-2. */
    struct cp_fleetview *l = cp_fleetview_new("cp-1", NULL), *f = cp_fleetview_new("cp-2", NULL);
    const char *const a[] = {"dp-a", NULL}, *const bc[] = {"dp-b", "dp-c", NULL};
    int64_t now = T0;
    members(l, now, a);
    members(f, now, bc);
    struct tgt ok = {"p", "m", .ok = 10};
    add(l, "dp-a", &ok, 1, now);
    add(f, "dp-b", &ok, 1, now);
    add(f, "dp-c", &ok, 1, now);
    struct tgt opened = {"p", "m", .fail5xx = 3, .breaker = "open", .changes = {"closed>open"}};
    now += 500;
    add(f, "dp-b", &opened, 1, now);
    add(f, "dp-c", &opened, 1, now);
    /* The follower sees it first (2 of its 2), before the leader: its own
     * "down", unconfirmed. */
    exchange(l, "cp-1", f, now);
    cp_fleetview_compute(f, now, 0, "cp-1", 1);
    char reason[200];
    json_t *hj = cp_fleetview_health(f, now);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(hj, "fleet"), "decided_by")), "follower");
    json_decref(hj);
    CU_ASSERT_STRING_EQUAL(state_of(f, now, "p", NULL, 0, reason, sizeof(reason)), "down");
    /* The leader hears of it through cp-2's blob: 2 of 3 opened. */
    exchange(f, "cp-2", l, now + 100);
    cp_fleetview_compute(l, now + 100, 1, "cp-1", 1);
    CU_ASSERT_STRING_EQUAL(STATE(l, now + 100, "p"), "down");
    json_t *lh = cp_fleetview_health(l, now + 100);
    json_t *rs = json_object_get(lh, "replicas");
    CU_ASSERT_EQUAL(json_array_size(rs), 3);
    json_decref(lh);
    CU_ASSERT_EQUAL(cp_fleetview_replicas(l, now + 100), 3);
    /* The probe: the leader picks it among all; the follower adopts it. */
    now += 6000;
    members(l, now, a);
    members(f, now, bc);
    exchange(f, "cp-2", l, now);
    cp_fleetview_compute(l, now, 1, "cp-1", 1);
    exchange(l, "cp-1", f, now);
    cp_fleetview_compute(f, now, 0, "cp-1", 1);
    char hl[64], hf[64];
    state_of(l, now, "p", hl, sizeof(hl), NULL, 0);
    state_of(f, now, "p", hf, sizeof(hf), NULL, 0);
    CU_ASSERT_STRING_EQUAL(hl, "dp-a");
    CU_ASSERT_STRING_EQUAL(hf, "dp-a");
    CU_ASSERT_EQUAL(cp_fleetview_version(l), cp_fleetview_version(f));
    /* The follower's view: dp-b does not probe; the leader's: dp-a does. */
    CU_ASSERT_EQUAL(probe_for(f, "dp-b", now), 0);
    CU_ASSERT_EQUAL(probe_for(l, "dp-a", now), 1);
    /* The leader's blob goes stale (etcd down): the follower decides
     * alone, probing only among its own data planes. */
    now += 6000;
    members(f, now, bc);
    cp_fleetview_compute(f, now, 0, "", 0);
    hj = cp_fleetview_health(f, now);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(hj, "fleet"), "decided_by")), "alone");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(hj, "fleet"), "etcd")),
                           "down");
    json_decref(hj);
    state_of(f, now, "p", hf, sizeof(hf), NULL, 0);
    CU_ASSERT(strcmp(hf, "dp-b") == 0 || strcmp(hf, "dp-c") == 0);
    /* A recovery seen by the leader's data plane resets both. */
    struct tgt okp = {"p", "m", .ok = 1, .probe_ok = 1, .changes = {"half_open>closed"}};
    add(l, "dp-a", &okp, 1, now);
    members(l, now, a);
    cp_fleetview_compute(l, now, 1, "cp-1", 1);
    CU_ASSERT_STRING_EQUAL(STATE(l, now, "p"), "healthy");
    exchange(l, "cp-1", f, now + 100);
    cp_fleetview_compute(f, now + 100, 0, "cp-1", 1);
    CU_ASSERT_STRING_EQUAL(STATE(f, now + 100, "p"), "healthy");
    CU_ASSERT_EQUAL(cp_fleetview_version(l), cp_fleetview_version(f));
    cp_fleetview_free(l);
    cp_fleetview_free(f);
}

static void test_remote_blobs_checked(void)
{
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    CU_ASSERT_EQUAL(cp_fleetview_remote(fv, "outcomes", "cp-2", "not json", 8, T0), 0);
    CU_ASSERT_EQUAL(cp_fleetview_remote(fv, "outcomes", "cp-2", "[]", 2, T0), 0);
    const char *old = "{\"at_ms\":1,\"targets\":[]}";
    CU_ASSERT_EQUAL(cp_fleetview_remote(fv, "outcomes", "cp-2", old, strlen(old), T0), 0);
    /* Its own blob, read back from etcd, is not someone else's. */
    const char *own = "{\"at_ms\":1800000000000,\"targets\":[]}";
    CU_ASSERT_EQUAL(cp_fleetview_remote(fv, "outcomes", "cp-1", own, strlen(own), T0), 0);
    /* Garbage inside a well-formed blob is skipped, not trusted. */
    const char *odd = "{\"at_ms\":1800000000000,\"targets\":[{\"provider\":\"\",\"model\":1},"
                      "{\"provider\":\"p\",\"model\":\"m\",\"replicas\":[{\"id\":\"\"},"
                      "{\"id\":\"x\",\"buckets\":[{\"s\":5,\"ok\":3},{\"s\":1800000000,"
                      "\"f\":{\"provider_5xx\":2,\"nonsense\":9}}]}]}]}";
    CU_ASSERT_EQUAL(cp_fleetview_remote(fv, "outcomes", "cp-2", odd, strlen(odd), T0), 1);
    cp_fleetview_compute(fv, T0, 1, "cp-1", 1);
    json_t *h = cp_fleetview_health(fv, T0);
    json_t *t = json_array_get(json_object_get(json_object_get(h, "fleet"), "targets"), 0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_object_get(h, "fleet"), "targets")), 1);
    json_t *w = json_object_get(t, "window");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(w, "ok")), 0); /* slot 5: outside */
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(w, "failed")), 2);
    json_decref(h);
    cp_fleetview_free(fv);
}

static void test_bounds(void)
{
    struct cp_fleetview_cfg cfg = {.max_targets = 3};
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", &cfg);
    char model[16];
    for (int i = 0; i < 10; i++) {
        snprintf(model, sizeof(model), "m%d", i);
        struct tgt t = {"p", model, .ok = 1};
        add(fv, "dp-a", &t, 1, T0);
    }
    cp_fleetview_compute(fv, T0, 1, "cp-1", -1);
    json_t *h = cp_fleetview_health(fv, T0);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_object_get(h, "fleet"), "targets")), 3);
    json_decref(h);
    /* Nothing reported for a minute: no replica's part is left, but the
     * hour of figures keeps the target... */
    cp_fleetview_compute(fv, T0 + 61000, 1, "cp-1", -1);
    h = cp_fleetview_health(fv, T0 + 61000);
    json_t *ts = json_object_get(json_object_get(h, "fleet"), "targets");
    CU_ASSERT_EQUAL(json_array_size(ts), 3);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_array_get(ts, 0), "replicas")), 0);
    json_decref(h);
    /* ... which gives way to a target someone reports now, at the cap. */
    struct tgt fresh = {"p", "fresh", .ok = 1};
    add(fv, "dp-a", &fresh, 1, T0 + 62000);
    cp_fleetview_compute(fv, T0 + 62000, 1, "cp-1", -1);
    h = cp_fleetview_health(fv, T0 + 62000);
    ts = json_object_get(json_object_get(h, "fleet"), "targets");
    CU_ASSERT_EQUAL(json_array_size(ts), 3);
    int have_fresh = 0;
    size_t i;
    json_t *t;
    json_array_foreach(ts, i, t) have_fresh |=
        !strcmp(json_string_value(json_object_get(t, "model")), "fresh");
    CU_ASSERT(have_fresh);
    json_decref(h);
    /* An hour later: forgotten. */
    cp_fleetview_compute(fv, T0 + 62000 + 3601000, 1, "cp-1", -1);
    h = cp_fleetview_health(fv, T0 + 62000 + 3601000);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_object_get(h, "fleet"), "targets")), 0);
    json_decref(h);
    cp_fleetview_free(fv);
}

static void test_large_fleet(void)
{
    /* 300 targets on 60 data planes: past the contribution cap, and a blob
     * too large for etcd whole. */
    struct cp_fleetview *fv = cp_fleetview_new("cp-1", NULL);
    static char models[300][8];
    for (int i = 0; i < 300; i++)
        snprintf(models[i], sizeof(models[i]), "m%d", i);
    char rid[16];
    for (int sec = 8; sec < 10; sec++)
        for (int r = 0; r < 60; r++) {
            snprintf(rid, sizeof(rid), "dp-%d", r);
            for (int i = 0; i < 300; i += 8) {
                struct tgt t[8];
                size_t n = 0;
                for (int k = i; k < i + 8 && k < 300; k++)
                    t[n++] = (struct tgt){"p", models[k], .ok = 5, .fail5xx = 1, .ttfb_ms = 90};
                add(fv, rid, t, n, T0 + sec * 1000);
            }
        }
    /* One target down, by failure rate. */
    struct tgt bad = {"p", "m0", .fail5xx = 5000};
    add(fv, "dp-0", &bad, 1, T0 + 9500);
    cp_fleetview_compute(fv, T0 + 9500, 1, "cp-1", 1);
    json_t *h = cp_fleetview_health(fv, T0 + 9500);
    json_t *fl = json_object_get(h, "fleet");

    CU_ASSERT(json_integer_value(json_object_get(fl, "dropped_contributions")) > 0);
    json_decref(h);
    char *b = cp_fleetview_outcomes_blob(fv, T0 + 9500);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT(strlen(b) <= CP_FLEETVIEW_BLOB_MAX);
    json_t *j = json_loads(b, 0, NULL);
    CU_ASSERT(json_integer_value(json_object_get(j, "trimmed")) > 0);
    /* The latch is in it: a follower still follows. */
    struct cp_fleetview *f = cp_fleetview_new("cp-2", NULL);
    cp_fleetview_remote_begin(f, "outcomes");
    CU_ASSERT_EQUAL(cp_fleetview_remote(f, "outcomes", "cp-1", b, strlen(b), T0 + 9500), 1);
    cp_fleetview_compute(f, T0 + 9500, 0, "cp-1", 1);
    h = cp_fleetview_health(f, T0 + 9500);
    size_t i;
    json_t *t;
    int down = 0;
    json_array_foreach(json_object_get(json_object_get(h, "fleet"), "targets"), i, t) down +=
        !strcmp(json_string_value(json_object_get(t, "state")), "down");
    CU_ASSERT_EQUAL(down, 1);
    json_decref(h);
    json_decref(j);
    free(b);
    cp_fleetview_free(f);
    cp_fleetview_free(fv);
}

/* The score a replica's view carries for provider p. */
static int score_for(struct cp_fleetview *fv, int64_t now, const char *provider,
                     Llmgw__V1__FleetScore *out)
{
    uint8_t *b;
    size_t n;
    if (cp_fleetview_pack(fv, "dp-a", now, &b, &n) != GW_OK)
        return -1;
    Llmgw__V1__FleetView *v = llmgw__v1__fleet_view__unpack(NULL, n, b);
    free(b);
    int found = 0;
    for (size_t i = 0; v && i < v->n_targets; i++)
        if (!strcmp(v->targets[i]->provider, provider) && v->targets[i]->score) {
            *out = *v->targets[i]->score;
            found = 1;
        }
    if (v)
        llmgw__v1__fleet_view__free_unpacked(v, NULL);
    return found;
}

/* Scores: every replica's outcomes over the hour, health-relevant failures
 * only, latencies over the last 5 minutes, through a second control plane
 * too. */
static void test_scores(void)
{
    struct cp_fleetview *l = cp_fleetview_new("cp-1", NULL), *f = cp_fleetview_new("cp-2", NULL);
    int64_t now = T0;
    /* dp-a (on cp-1): 30 fine at 100 ms; dp-b (on cp-2): 10 failures and
     * 5 bad requests (the client's fault: not counted). */
    struct tgt good = {"p", "m", .ok = 30, .ttfb_ms = 100};
    struct tgt bad = {"p", "m", .fail5xx = 10, .bad_request = 5};
    add(l, "dp-a", &good, 1, now);
    add(f, "dp-b", &bad, 1, now);
    Llmgw__V1__FleetScore sc;
    cp_fleetview_compute(l, now, 1, "cp-1", 1);
    CU_ASSERT_EQUAL_FATAL(score_for(l, now, "p", &sc), 1);
    CU_ASSERT_EQUAL(sc.attempts, 30);
    CU_ASSERT_EQUAL(sc.success_permil, 1000);
    CU_ASSERT_EQUAL(sc.ttfb_samples, 30);
    CU_ASSERT_EQUAL(sc.ttfb_mean_us, 100000);
    /* Both control planes see the fleet's figures, the same. */
    exchange(f, "cp-2", l, now + 100);
    exchange(l, "cp-1", f, now + 100);
    Llmgw__V1__FleetScore sl, sf;
    CU_ASSERT_EQUAL_FATAL(score_for(l, now + 100, "p", &sl), 1);
    CU_ASSERT_EQUAL_FATAL(score_for(f, now + 100, "p", &sf), 1);
    CU_ASSERT_EQUAL(sl.attempts, 40);
    CU_ASSERT_EQUAL(sl.success_permil, 750);
    CU_ASSERT_EQUAL(sl.ttfb_mean_us, 100000);
    CU_ASSERT_EQUAL(sf.attempts, sl.attempts);
    CU_ASSERT_EQUAL(sf.success_permil, sl.success_permil);
    CU_ASSERT_EQUAL(sf.ttfb_samples, sl.ttfb_samples);
    /* A blob read again replaces what it said (no double count). */
    exchange(f, "cp-2", l, now + 200);
    CU_ASSERT_EQUAL_FATAL(score_for(l, now + 200, "p", &sl), 1);
    CU_ASSERT_EQUAL(sl.attempts, 40);
    /* Later minutes add up; latency leaves after 5 minutes, success after
     * the hour. */
    struct tgt slow = {"p", "m", .ok = 10, .ttfb_ms = 300};
    add(l, "dp-a", &slow, 1, now + 120000);
    CU_ASSERT_EQUAL_FATAL(score_for(l, now + 120000, "p", &sc), 1);
    CU_ASSERT_EQUAL(sc.ttfb_samples, 40);
    CU_ASSERT_EQUAL(sc.ttfb_mean_us, (30 * 100 + 10 * 300) * 1000 / 40);
    CU_ASSERT_EQUAL_FATAL(score_for(l, now + 6 * 60000, "p", &sc), 1);
    CU_ASSERT_EQUAL(sc.ttfb_samples, 10);
    CU_ASSERT_EQUAL(sc.ttfb_mean_us, 300000);
    CU_ASSERT_EQUAL(sc.attempts, 50); /* cp-2's 10 and cp-1's 40 */
    exchange(f, "cp-2", l, now + 63 * 60000);
    cp_fleetview_compute(l, now + 63 * 60000, 1, "cp-1", 1);
    CU_ASSERT_EQUAL(score_for(l, now + 63 * 60000, "p", &sc), 0);
    /* The health document shows the figures. */
    add(l, "dp-a", &good, 1, now + 64 * 60000);
    json_t *h = cp_fleetview_health(l, now + 64 * 60000);
    json_t *t = json_array_get(json_object_get(json_object_get(h, "fleet"), "targets"), 0);
    json_t *s = json_object_get(t, "score");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(s, "attempts_1h")), 30);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(s, "success_permil_1h")), 1000);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(s, "ttfb_mean_us_5m")), 100000);
    json_decref(h);
    cp_fleetview_free(l);
    cp_fleetview_free(f);
}

static CU_TestInfo tests[] = {
    {"healthy; bad requests do not count", test_healthy},
    {"breakers: one open degraded, most open down, latched", test_down_by_breakers},
    {"one replica's breaker waits for the others' reports, up to the grace",
     test_breaker_waits_for_reports},
    {"failure rate: down at 80% with 5, degraded at 20%, the window slides",
     test_down_by_failure_rate},
    {"time to first byte far above the window's earlier part: degraded", test_latency_degraded},
    {"the probe: after 5 s, round robin, hand-over, backoff, recovery resets",
     test_probe_round_robin_and_recovery},
    {"the probe goes to a connected replica, demand first", test_probe_needs_connected},
    {"the version does not depend on the order targets were seen",
     test_version_independent_of_order},
    {"two control planes: the follower reacts first, adopts the leader's probe, decides alone "
     "without it, and agrees again",
     test_two_control_planes_agree},
    {"other control planes' blobs: checked, stale ones and its own ignored",
     test_remote_blobs_checked},
    {"bounded targets; kept an hour for their figures, evicted for a new one at the cap",
     test_bounds},
    {"scores: the fleet's hour, through a second control plane, latencies over 5 minutes",
     test_scores},
    {"a large fleet: contributions capped, the blob trimmed for etcd, the latch kept",
     test_large_fleet},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
