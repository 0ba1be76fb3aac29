/* Tests for contract/routing/dp_breaker.c: which outcomes count, the two opening
 * rules, the window sliding, half-open probes and the doubling interval,
 * jitter, the change callback, the table bound, stats, and locking. The
 * clock is driven by hand. The .c is included to check the table's size
 * and open intervals directly. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_breaker.c"

#define SEC INT64_C(1000000)
#define MS INT64_C(1000)

/* ------------------------------------------------------------- helpers */

/* Defaults, but no jitter. */
static struct dp_breaker_cfg cfg0(void)
{
    struct dp_breaker_cfg c = {.jitter_pct = 0};
    return c;
}

/* The change callback's record. */
struct seen {
    pthread_mutex_t lock;
    size_t n, cap;
    struct {
        char provider[32], model[32];
        enum dp_breaker_state from, to;
        int64_t at_us;
    } * ev;
};

static void seen_init(struct seen *s)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
}

static void seen_free(struct seen *s)
{
    free(s->ev);
    pthread_mutex_destroy(&s->lock);
}

static void on_change(void *arg, const char *provider, const char *model,
                      enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us)
{
    struct seen *s = arg;
    pthread_mutex_lock(&s->lock);
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->ev = realloc(s->ev, s->cap * sizeof(*s->ev));
    }
    snprintf(s->ev[s->n].provider, sizeof(s->ev[s->n].provider), "%s", provider);
    snprintf(s->ev[s->n].model, sizeof(s->ev[s->n].model), "%s", model);
    s->ev[s->n].from = from;
    s->ev[s->n].to = to;
    s->ev[s->n].at_us = at_us;
    s->n++;
    pthread_mutex_unlock(&s->lock);
}

static void quiet(void *arg, const char *provider, const char *model, enum dp_breaker_state from,
                  enum dp_breaker_state to, int64_t at_us)
{
}

static struct dp_breakers *mk(const struct dp_breaker_cfg *c)
{
    struct dp_breakers *b = dp_breakers_new(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    dp_breakers_on_change(b, quiet, NULL);
    return b;
}

static void out(struct dp_breakers *b, const char *model, int ok, enum canon_failure f, int64_t at,
                int probe)
{
    struct dp_outcome o = {.provider = "p",
                           .model = model,
                           .ok = ok,
                           .failure = f,
                           .latency_us = 10 * MS,
                           .ttfb_us = ok ? 5 * MS : 0,
                           .at_us = at};
    dp_breaker_record(b, &o, probe);
}

static void ok_at(struct dp_breakers *b, const char *model, int64_t at)
{
    out(b, model, 1, CANON_FAIL_COUNT, at, 0);
}

static void fail_at(struct dp_breakers *b, const char *model, enum canon_failure f, int64_t at)
{
    out(b, model, 0, f, at, 0);
}

static enum dp_breaker_state peek(struct dp_breakers *b, const char *model, int64_t at)
{
    return dp_breaker_peek(b, "p", model, at);
}

static enum dp_admit admit(struct dp_breakers *b, const char *model, int64_t at)
{
    return dp_breaker_admit(b, "p", model, at);
}

static struct target *target_of(struct dp_breakers *b, const char *model)
{
    return find(b, "p", model);
}

/* The breaker reads open until exactly until, half-open from then on. */
static void expect_open_until(struct dp_breakers *b, const char *model, int64_t until)
{
    CU_ASSERT_EQUAL(peek(b, model, until - 1), DP_BREAKER_OPEN);
    CU_ASSERT_EQUAL(admit(b, model, until - 1), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(peek(b, model, until), DP_BREAKER_HALF_OPEN);
}

/* ------------------------------------------------------ what counts */

static void test_no_verdict_never_opens(void)
{
    struct dp_breaker_cfg c = cfg0();
    for (int f = 0; f < CANON_FAIL_COUNT; f++) {
        if (canon_failure_counts(f))
            continue;
        struct dp_breakers *b = mk(&c);
        for (int i = 0; i < 10000; i++)
            fail_at(b, "m", f, SEC + i);
        CU_ASSERT_EQUAL(peek(b, "m", 2 * SEC), DP_BREAKER_CLOSED);
        CU_ASSERT_EQUAL(admit(b, "m", 2 * SEC), DP_ADMIT_YES);
        struct dp_target_stats st;
        dp_breaker_stats(b, "p", "m", 2 * SEC, &st);
        CU_ASSERT_EQUAL(st.samples, 0);
        CU_ASSERT_EQUAL(st.success_permil, 1000);
        /* Not even tracked. */
        CU_ASSERT_EQUAL(b->count, 0);
        /* Nor do they break a run of counting failures. */
        fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 3 * SEC);
        fail_at(b, "m", f, 3 * SEC);
        fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 3 * SEC);
        fail_at(b, "m", f, 3 * SEC);
        CU_ASSERT_EQUAL(peek(b, "m", 3 * SEC), DP_BREAKER_CLOSED);
        fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 3 * SEC);
        CU_ASSERT_EQUAL(peek(b, "m", 3 * SEC), DP_BREAKER_OPEN);
        dp_breakers_free(b);
    }
}

static void test_bad_request_flood(void)
{
    struct dp_breakers *b = mk(NULL);
    ok_at(b, "m", SEC);
    for (int i = 0; i < 10000; i++) {
        CU_ASSERT_EQUAL(admit(b, "m", SEC + i), DP_ADMIT_YES);
        fail_at(b, "m", CANON_FAIL_BAD_REQUEST, SEC + i);
    }
    CU_ASSERT_EQUAL(peek(b, "m", 2 * SEC), DP_BREAKER_CLOSED);
    struct dp_target_stats st;
    dp_breaker_stats(b, "p", "m", 2 * SEC, &st);
    CU_ASSERT_EQUAL(st.samples, 1);
    CU_ASSERT_EQUAL(st.failures, 0);
    dp_breakers_free(b);
}

/* Every class: the breaker agrees with canon_failure_counts. */
static void test_taxonomy(void)
{
    struct dp_breaker_cfg c = cfg0();
    for (int f = 0; f < CANON_FAIL_COUNT; f++) {
        struct dp_breakers *b = mk(&c);
        for (int i = 0; i < 3; i++)
            fail_at(b, "m", f, SEC);
        enum dp_breaker_state want = canon_failure_counts(f) ? DP_BREAKER_OPEN : DP_BREAKER_CLOSED;
        CU_ASSERT_EQUAL(peek(b, "m", SEC), want);
        if (peek(b, "m", SEC) != want)
            fprintf(stderr, "\nclass %s\n", canon_failure_name(f));
        dp_breakers_free(b);
    }
}

static void test_sustained_5xx(void)
{
    struct dp_breakers *b = mk(NULL);
    int admitted = 0;
    for (int i = 0; i < 100; i++) {
        int64_t now = SEC + i * 10 * MS;
        enum dp_admit a = admit(b, "m", now);
        if (a == DP_ADMIT_NO)
            continue;
        admitted++;
        fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, now);
    }
    /* The reference figure to beat: 3 requests to a dead provider. */
    CU_ASSERT_EQUAL(admitted, 3);
    CU_ASSERT_EQUAL(peek(b, "m", 2 * SEC), DP_BREAKER_OPEN);
    dp_breakers_free(b);
}

/* ------------------------------------------------------ opening rules */

static void test_ratio(void)
{
    struct dp_breaker_cfg c = cfg0();
    c.min_samples = 4;
    c.failure_pct = 50;
    c.window_us = 10 * SEC;
    struct dp_breakers *b = mk(&c);
    /* Below min_samples nothing opens, whatever the ratio. */
    fail_at(b, "a", CANON_FAIL_TIMEOUT, SEC);
    ok_at(b, "a", SEC);
    fail_at(b, "a", CANON_FAIL_TIMEOUT, SEC);
    CU_ASSERT_EQUAL(peek(b, "a", SEC), DP_BREAKER_CLOSED);
    /* The fourth sample: 3/4 failures. */
    fail_at(b, "a", CANON_FAIL_TIMEOUT, SEC);
    CU_ASSERT_EQUAL(peek(b, "a", SEC), DP_BREAKER_OPEN);

    /* Below 50% stays closed; exactly 50% opens. */
    ok_at(b, "b", SEC);
    ok_at(b, "b", SEC);
    ok_at(b, "b", SEC);
    fail_at(b, "b", CANON_FAIL_NETWORK, SEC); /* 1/4 */
    ok_at(b, "b", SEC);
    fail_at(b, "b", CANON_FAIL_NETWORK, SEC); /* 2/6 */
    fail_at(b, "b", CANON_FAIL_NETWORK, SEC); /* 3/7 */
    CU_ASSERT_EQUAL(peek(b, "b", SEC), DP_BREAKER_CLOSED);
    fail_at(b, "b", CANON_FAIL_NETWORK, SEC); /* 4/8 */
    CU_ASSERT_EQUAL(peek(b, "b", SEC), DP_BREAKER_OPEN);

    /* Old outcomes leave the window (10 buckets of 1 s). */
    fail_at(b, "c", CANON_FAIL_RATE_LIMITED, 0);
    fail_at(b, "c", CANON_FAIL_RATE_LIMITED, 0);
    fail_at(b, "c", CANON_FAIL_RATE_LIMITED, 500 * MS);
    ok_at(b, "c", 500 * MS);
    struct dp_target_stats st;
    dp_breaker_stats(b, "p", "c", 9 * SEC + 999 * MS, &st);
    CU_ASSERT_EQUAL(st.samples, 4);
    CU_ASSERT_EQUAL(st.failures, 3);
    /* 3/4 is over 50% but the breaker decides when a failure comes. */
    CU_ASSERT_EQUAL(peek(b, "c", 9 * SEC), DP_BREAKER_CLOSED);
    dp_breaker_stats(b, "p", "c", 10 * SEC, &st);
    CU_ASSERT_EQUAL(st.samples, 0);
    CU_ASSERT_EQUAL(st.success_permil, 1000);
    /* Had they stayed, this failure would make 4/5. */
    fail_at(b, "c", CANON_FAIL_RATE_LIMITED, 11 * SEC);
    CU_ASSERT_EQUAL(peek(b, "c", 11 * SEC), DP_BREAKER_CLOSED);
    dp_breakers_free(b);
}

static void test_consecutive(void)
{
    struct dp_breaker_cfg c = cfg0();
    struct seen s;
    seen_init(&s);
    struct dp_breakers *b = mk(&c);
    dp_breakers_on_change(b, on_change, &s);
    for (int i = 0; i < 10000; i++)
        ok_at(b, "m", SEC + i);
    fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    ok_at(b, "m", 2 * SEC); /* a success breaks the run */
    fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    CU_ASSERT_EQUAL(peek(b, "m", 2 * SEC), DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(s.n, 0);
    fail_at(b, "m", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    CU_ASSERT_EQUAL(peek(b, "m", 2 * SEC), DP_BREAKER_OPEN);
    CU_ASSERT_EQUAL_FATAL(s.n, 1);
    CU_ASSERT_EQUAL(s.ev[0].from, DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(s.ev[0].to, DP_BREAKER_OPEN);
    CU_ASSERT_EQUAL(s.ev[0].at_us, 2 * SEC);
    /* The window still says mostly successes. */
    struct dp_target_stats st;
    dp_breaker_stats(b, "p", "m", 2 * SEC, &st);
    CU_ASSERT_EQUAL(st.samples, 10006);
    CU_ASSERT_EQUAL(st.failures, 5);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_OPEN);
    dp_breakers_free(b);
    seen_free(&s);
}

/* ------------------------------------------------------------ half-open */

static void open_at(struct dp_breakers *b, const char *model, int64_t at)
{
    for (int i = 0; i < 3; i++)
        fail_at(b, model, CANON_FAIL_PROVIDER_5XX, at);
    CU_ASSERT_EQUAL(peek(b, model, at), DP_BREAKER_OPEN);
}

static void test_probes(void)
{
    struct dp_breaker_cfg c = cfg0();
    c.probes = 2;
    struct dp_breakers *b = mk(&c);
    open_at(b, "m", SEC);
    CU_ASSERT_EQUAL(admit(b, "m", SEC), DP_ADMIT_NO);
    expect_open_until(b, "m", 6 * SEC);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(b, "m", 7 * SEC), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(peek(b, "m", 7 * SEC), DP_BREAKER_HALF_OPEN);
    /* A late outcome of an attempt admitted before the opening decides
     * nothing. */
    ok_at(b, "m", 7 * SEC);
    fail_at(b, "m", CANON_FAIL_TIMEOUT, 7 * SEC);
    CU_ASSERT_EQUAL(peek(b, "m", 7 * SEC), DP_BREAKER_HALF_OPEN);
    /* A probe with no verdict gives its slot back. */
    out(b, "m", 0, CANON_FAIL_CANCELED, 7 * SEC, 1);
    CU_ASSERT_EQUAL(peek(b, "m", 7 * SEC), DP_BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(admit(b, "m", 7 * SEC), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 7 * SEC), DP_ADMIT_NO);
    /* One successful probe closes it, with an empty window. */
    out(b, "m", 1, CANON_FAIL_COUNT, 8 * SEC, 1);
    CU_ASSERT_EQUAL(peek(b, "m", 8 * SEC), DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(admit(b, "m", 8 * SEC), DP_ADMIT_YES);
    struct dp_target_stats st;
    dp_breaker_stats(b, "p", "m", 8 * SEC, &st);
    CU_ASSERT_EQUAL(st.samples, 0);
    /* The other probe ends later, failed: it counts, as in closed. */
    CU_ASSERT_EQUAL(target_of(b, "m")->probes_out, 1);
    out(b, "m", 0, CANON_FAIL_TIMEOUT, 8 * SEC, 1);
    CU_ASSERT_EQUAL(target_of(b, "m")->probes_out, 0);
    CU_ASSERT_EQUAL(peek(b, "m", 8 * SEC), DP_BREAKER_CLOSED);
    dp_breakers_free(b);
}

static void test_close_after(void)
{
    struct dp_breaker_cfg c = cfg0();
    c.close_after = 2;
    struct dp_breakers *b = mk(&c);
    open_at(b, "m", SEC);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_NO);
    out(b, "m", 1, CANON_FAIL_COUNT, 6 * SEC, 1);
    CU_ASSERT_EQUAL(peek(b, "m", 6 * SEC), DP_BREAKER_HALF_OPEN);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    out(b, "m", 1, CANON_FAIL_COUNT, 6 * SEC, 1);
    CU_ASSERT_EQUAL(peek(b, "m", 6 * SEC), DP_BREAKER_CLOSED);
    dp_breakers_free(b);
}

static void test_doubling(void)
{
    struct dp_breaker_cfg c = cfg0();
    struct dp_breakers *b = mk(&c);
    int64_t now = SEC;
    open_at(b, "m", now);
    int64_t want[] = {5, 10, 20, 40, 60, 60, 60};
    for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
        int64_t until = now + want[i] * SEC;
        expect_open_until(b, "m", until);
        now = until + 123;
        CU_ASSERT_EQUAL(admit(b, "m", now), DP_ADMIT_PROBE);
        if (i + 1 < sizeof(want) / sizeof(*want))
            out(b, "m", 0, CANON_FAIL_NETWORK, now, 1);
    }
    /* A success closes it and the interval starts again from open_us. */
    out(b, "m", 1, CANON_FAIL_COUNT, now, 1);
    CU_ASSERT_EQUAL(peek(b, "m", now), DP_BREAKER_CLOSED);
    open_at(b, "m", now);
    expect_open_until(b, "m", now + 5 * SEC);
    dp_breakers_free(b);
}

static void test_probe_lease(void)
{
    struct dp_breakers *b = mk(&(struct dp_breaker_cfg){.jitter_pct = 0});
    open_at(b, "m", SEC);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    /* Its outcome is never recorded. */
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC + PROBE_LEASE_US - 1), DP_ADMIT_NO);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC + PROBE_LEASE_US), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC + PROBE_LEASE_US), DP_ADMIT_NO);
    dp_breakers_free(b);
}

static void test_jitter(void)
{
    struct dp_breaker_cfg c = {.jitter_pct = 20};
    struct dp_breakers *b = mk(&c);
    int64_t now = SEC, lo = INT64_MAX, hi = 0, sum = 0;
    const int n = 500;
    for (int i = 0; i < n; i++) {
        open_at(b, "m", now);
        int64_t d = target_of(b, "m")->open_until - now;
        CU_ASSERT(d >= 4 * SEC && d <= 6 * SEC);
        lo = d < lo ? d : lo;
        hi = d > hi ? d : hi;
        sum += d;
        now += d;
        CU_ASSERT_EQUAL(admit(b, "m", now), DP_ADMIT_PROBE);
        out(b, "m", 1, CANON_FAIL_COUNT, now, 1);
        CU_ASSERT_EQUAL(peek(b, "m", now), DP_BREAKER_CLOSED);
    }
    /* Spread over the whole range, centred on open_us. */
    CU_ASSERT(lo < 4200 * MS);
    CU_ASSERT(hi > 5800 * MS);
    CU_ASSERT(sum / n > 4800 * MS && sum / n < 5200 * MS);

    /* At the cap, the jitter applies to max_open_us. */
    open_at(b, "m", now);
    for (int i = 0; i < 20; i++) {
        now = target_of(b, "m")->open_until;
        CU_ASSERT_EQUAL(admit(b, "m", now), DP_ADMIT_PROBE);
        out(b, "m", 0, CANON_FAIL_NETWORK, now, 1);
        int64_t d = target_of(b, "m")->open_until - now;
        if (i >= 4)
            CU_ASSERT(d >= 48 * SEC && d <= 72 * SEC);
    }
    dp_breakers_free(b);
}

/* ------------------------------------------------------------ callback */

static void test_callback_order(void)
{
    struct dp_breaker_cfg c = cfg0();
    struct seen s;
    seen_init(&s);
    struct dp_breakers *b = mk(&c);
    dp_breakers_on_change(b, on_change, &s);
    open_at(b, "m", SEC);                                     /* closed -> open at 1 s */
    CU_ASSERT_EQUAL(admit(b, "m", 7 * SEC), DP_ADMIT_PROBE);  /* -> half_open at 6 s */
    out(b, "m", 0, CANON_FAIL_TIMEOUT, 8 * SEC, 1);           /* -> open at 8 s, for 10 s */
    CU_ASSERT_EQUAL(admit(b, "m", 18 * SEC), DP_ADMIT_PROBE); /* -> half_open at 18 s */
    out(b, "m", 1, CANON_FAIL_COUNT, 19 * SEC, 1);            /* -> closed at 19 s */
    static const struct {
        enum dp_breaker_state from, to;
        int64_t at;
    } want[] = {
        {DP_BREAKER_CLOSED, DP_BREAKER_OPEN, SEC},
        {DP_BREAKER_OPEN, DP_BREAKER_HALF_OPEN, 6 * SEC},
        {DP_BREAKER_HALF_OPEN, DP_BREAKER_OPEN, 8 * SEC},
        {DP_BREAKER_OPEN, DP_BREAKER_HALF_OPEN, 18 * SEC},
        {DP_BREAKER_HALF_OPEN, DP_BREAKER_CLOSED, 19 * SEC},
    };
    CU_ASSERT_EQUAL_FATAL(s.n, sizeof(want) / sizeof(*want));
    for (size_t i = 0; i < s.n; i++) {
        CU_ASSERT_STRING_EQUAL(s.ev[i].provider, "p");
        CU_ASSERT_STRING_EQUAL(s.ev[i].model, "m");
        CU_ASSERT_EQUAL(s.ev[i].from, want[i].from);
        CU_ASSERT_EQUAL(s.ev[i].to, want[i].to);
        CU_ASSERT_EQUAL(s.ev[i].at_us, want[i].at);
    }
    dp_breakers_free(b);
    seen_free(&s);
}

/* A callback that calls back into the table (the lock is not held). */
struct reenter {
    struct dp_breakers *b;
    int calls;
    enum dp_breaker_state seen;
};

static void on_change_reenter(void *arg, const char *provider, const char *model,
                              enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us)
{
    struct reenter *r = arg;
    r->calls++;
    r->seen = dp_breaker_peek(r->b, provider, model, at_us);
    /* A change made from inside the callback is delivered after this one. */
    if (r->calls == 1)
        open_at(r->b, "other", at_us);
}

static void test_callback_reenters(void)
{
    struct reenter r = {0};
    r.b = mk(NULL);
    dp_breakers_on_change(r.b, on_change_reenter, &r);
    open_at(r.b, "m", SEC);
    CU_ASSERT_EQUAL(r.calls, 2);
    CU_ASSERT_EQUAL(r.seen, DP_BREAKER_OPEN);
    CU_ASSERT_EQUAL(peek(r.b, "other", SEC), DP_BREAKER_OPEN);
    dp_breakers_free(r.b);
}

/* The default callback (a log line), on a table with the defaults. */
static void test_default_log(void)
{
    struct dp_breakers *g = dp_breakers_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    struct dp_outcome o = {.provider = "breaker-test",
                           .model = "log",
                           .ok = 0,
                           .failure = CANON_FAIL_PROVIDER_5XX,
                           .at_us = SEC};
    for (int i = 0; i < 3; i++)
        dp_breaker_record(g, &o, 0);
    CU_ASSERT_EQUAL(dp_breaker_peek(g, "breaker-test", "log", SEC), DP_BREAKER_OPEN);
    /* A NULL table is an empty one. */
    CU_ASSERT_EQUAL(dp_breaker_admit(NULL, "p", "m", SEC), DP_ADMIT_YES);
    CU_ASSERT_EQUAL(dp_breaker_peek(NULL, "p", "m", SEC), DP_BREAKER_CLOSED);
    dp_breaker_record(NULL, &o, 0);
    struct dp_target_stats st;
    dp_breaker_stats(NULL, "p", "m", SEC, &st);
    CU_ASSERT_EQUAL(st.success_permil, 1000);
    CU_ASSERT_STRING_EQUAL(dp_breaker_state_name(DP_BREAKER_HALF_OPEN), "half_open");
    CU_ASSERT_STRING_EQUAL(dp_breaker_state_name(DP_BREAKER_OPEN), "open");
    CU_ASSERT_STRING_EQUAL(dp_breaker_state_name(DP_BREAKER_CLOSED), "closed");
    dp_breakers_free(g);
}

/* ---------------------------------------------------------------- bound */

static unsigned lru_len(const struct dp_breakers *b)
{
    unsigned n = 0;
    for (const struct target *t = b->newest; t; t = t->older)
        n++;
    return n;
}

static void test_bound(void)
{
    struct dp_breaker_cfg c = cfg0();
    c.max_targets = 4;
    struct dp_breakers *b = mk(&c);
    open_at(b, "open", SEC);
    char model[32];
    for (int i = 0; i < 100; i++) {
        snprintf(model, sizeof(model), "m%d", i);
        ok_at(b, model, SEC);
        fail_at(b, model, CANON_FAIL_TIMEOUT, SEC);
        CU_ASSERT(b->count <= 4);
        CU_ASSERT_EQUAL(lru_len(b), b->count);
    }
    CU_ASSERT_EQUAL(b->count, 4);
    CU_ASSERT_EQUAL(peek(b, "open", 2 * SEC), DP_BREAKER_OPEN);
    CU_ASSERT_PTR_NOT_NULL(target_of(b, "m99"));
    CU_ASSERT_PTR_NULL(target_of(b, "m0"));

    /* Least recently used goes first: m97 was used last of the three. */
    CU_ASSERT_EQUAL(peek(b, "m97", 2 * SEC), DP_BREAKER_CLOSED);
    ok_at(b, "new", 2 * SEC);
    CU_ASSERT_PTR_NULL(target_of(b, "m98"));
    CU_ASSERT_PTR_NOT_NULL(target_of(b, "m97"));

    /* Every slot open: a new target is not tracked, never opens. */
    open_at(b, "m97", 2 * SEC);
    open_at(b, "m99", 2 * SEC);
    open_at(b, "new", 2 * SEC);
    CU_ASSERT_EQUAL(b->count, 4);
    for (int i = 0; i < 100; i++) {
        CU_ASSERT_EQUAL(admit(b, "x", 2 * SEC), DP_ADMIT_YES);
        fail_at(b, "x", CANON_FAIL_PROVIDER_5XX, 2 * SEC);
    }
    CU_ASSERT_EQUAL(peek(b, "x", 2 * SEC), DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(b->count, 4);
    CU_ASSERT_EQUAL(peek(b, "open", 2 * SEC), DP_BREAKER_OPEN);
    dp_breakers_free(b);
}

/* A closed target with a probe still out is not forgotten. */
static void test_bound_probe_out(void)
{
    struct dp_breaker_cfg c = cfg0();
    c.max_targets = 2;
    c.probes = 2;
    struct dp_breakers *b = mk(&c);
    open_at(b, "m", SEC);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    CU_ASSERT_EQUAL(admit(b, "m", 6 * SEC), DP_ADMIT_PROBE);
    out(b, "m", 1, CANON_FAIL_COUNT, 6 * SEC, 1);
    CU_ASSERT_EQUAL(peek(b, "m", 6 * SEC), DP_BREAKER_CLOSED);
    ok_at(b, "a", 6 * SEC);
    ok_at(b, "b", 6 * SEC); /* "m" is the LRU but probing: "a" goes */
    CU_ASSERT_PTR_NOT_NULL(target_of(b, "m"));
    CU_ASSERT_PTR_NULL(target_of(b, "a"));
    out(b, "m", 1, CANON_FAIL_COUNT, 6 * SEC, 1);
    ok_at(b, "b", 6 * SEC);
    ok_at(b, "c", 6 * SEC); /* now it may go */
    CU_ASSERT_PTR_NULL(target_of(b, "m"));
    CU_ASSERT_EQUAL(b->count, 2);
    dp_breakers_free(b);
}

/* ---------------------------------------------------------------- stats */

static void test_stats(void)
{
    struct dp_breakers *b = mk(NULL);
    struct dp_target_stats st;
    dp_breaker_stats(b, "p", "unknown", SEC, &st);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(st.samples, 0);
    CU_ASSERT_EQUAL(st.success_permil, 1000);
    CU_ASSERT_EQUAL(st.ttfb_ewma_us, 0);

    struct dp_outcome o = {.provider = "p", .model = "m", .ok = 1, .at_us = SEC};
    o.ttfb_us = 100 * MS;
    dp_breaker_record(b, &o, 0);
    dp_breaker_stats(b, "p", "m", SEC, &st);
    CU_ASSERT_EQUAL(st.ttfb_ewma_us, 100 * MS);
    o.ttfb_us = 200 * MS;
    dp_breaker_record(b, &o, 0); /* 100 + 0.2 * 100 */
    o.ttfb_us = 50 * MS;
    dp_breaker_record(b, &o, 0); /* 120 + 0.2 * -70 */
    o.ttfb_us = 0;
    dp_breaker_record(b, &o, 0); /* no first byte seen: unchanged */
    o.ok = 0;
    o.failure = CANON_FAIL_TIMEOUT;
    o.ttfb_us = 9 * SEC; /* failures do not move it */
    dp_breaker_record(b, &o, 0);
    dp_breaker_stats(b, "p", "m", SEC, &st);
    CU_ASSERT_EQUAL(st.ttfb_ewma_us, 106 * MS);
    CU_ASSERT_EQUAL(st.samples, 5);
    CU_ASSERT_EQUAL(st.failures, 1);
    CU_ASSERT_EQUAL(st.success_permil, 800);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_CLOSED);
    dp_breaker_record(b, &o, 0);
    dp_breaker_stats(b, "p", "m", SEC, &st);
    CU_ASSERT_EQUAL(st.success_permil, 666);
    dp_breaker_record(b, &o, 0);
    dp_breaker_stats(b, "p", "m", 2 * SEC, &st);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_OPEN);
    CU_ASSERT_EQUAL(st.success_permil, 571);
    dp_breaker_stats(b, "p", "m", 7 * SEC, &st);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_HALF_OPEN);
    dp_breakers_free(b);
}

/* -------------------------------------------------------------- threads */

#define NTHREADS 4
#define NITER 10000

struct worker {
    struct dp_breakers *b;
    int id;
};

static void *run(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < NITER; i++) {
        /* A healthy target, all at one instant: every outcome stays. */
        if (dp_breaker_admit(w->b, "t", "ok", SEC) != DP_ADMIT_YES)
            return w; /* the healthy target was refused */
        struct dp_outcome o = {
            .provider = "t", .model = "ok", .ok = 1, .ttfb_us = MS, .at_us = SEC};
        dp_breaker_record(w->b, &o, 0);

        /* A flapping target and a few quiet ones, the clock moving on. */
        int64_t now = SEC + (int64_t)i * 100;
        const char *model = i % 3 == 0 ? "flap" : (w->id % 2 ? "q1" : "q2");
        enum dp_admit a = dp_breaker_admit(w->b, "t", model, now);
        if (a == DP_ADMIT_NO)
            continue;
        o.model = model;
        o.at_us = now;
        o.ok = (i + w->id) % 5 == 0;
        o.failure = i % 7 == 0 ? CANON_FAIL_CANCELED : CANON_FAIL_PROVIDER_5XX;
        dp_breaker_record(w->b, &o, a == DP_ADMIT_PROBE);
    }
    return NULL;
}

static void test_threads(void)
{
    struct dp_breaker_cfg c = {
        .open_us = MS, .max_open_us = 8 * MS, .jitter_pct = 20, .probes = 2, .max_targets = 8};
    struct seen s;
    seen_init(&s);
    struct dp_breakers *b = mk(&c);
    dp_breakers_on_change(b, on_change, &s);
    pthread_t th[NTHREADS];
    struct worker w[NTHREADS];
    for (int i = 0; i < NTHREADS; i++) {
        w[i] = (struct worker){b, i};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, run, &w[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) {
        void *r;
        pthread_join(th[i], &r);
        CU_ASSERT_PTR_NULL(r);
    }
    struct dp_target_stats st;
    dp_breaker_stats(b, "t", "ok", SEC, &st);
    CU_ASSERT_EQUAL(st.samples, NTHREADS * NITER);
    CU_ASSERT_EQUAL(st.failures, 0);
    CU_ASSERT_EQUAL(st.ttfb_ewma_us, MS);
    CU_ASSERT_EQUAL(st.state, DP_BREAKER_CLOSED);
    CU_ASSERT_EQUAL(b->count, 4);
    CU_ASSERT_EQUAL(lru_len(b), 4);
    /* Every probe handed out was given back. */
    for (const struct target *t = b->newest; t; t = t->older)
        CU_ASSERT_EQUAL(t->probes_out, 0);
    /* Each target's changes form one chain from closed. */
    CU_ASSERT(s.n > 3);
    const char *models[] = {"flap", "q1", "q2"};
    for (size_t m = 0; m < 3; m++) {
        enum dp_breaker_state at = DP_BREAKER_CLOSED;
        for (size_t i = 0; i < s.n; i++) {
            if (strcmp(s.ev[i].model, models[m]) != 0)
                continue;
            CU_ASSERT_EQUAL(s.ev[i].from, at);
            CU_ASSERT_NOT_EQUAL(s.ev[i].from, s.ev[i].to);
            at = s.ev[i].to;
        }
        CU_ASSERT_EQUAL(at, find(b, "t", models[m])->state);
    }
    dp_breakers_free(b);
    seen_free(&s);
}

static CU_TestInfo tests[] = {
    {"non-counting classes never open it", test_no_verdict_never_opens},
    {"10,000 bad requests leave it closed", test_bad_request_flood},
    {"every class: the breaker agrees with canon", test_taxonomy},
    {"sustained 5xx: open after 3 attempts", test_sustained_5xx},
    {"ratio rule and the sliding window", test_ratio},
    {"consecutive failures after many successes", test_consecutive},
    {"half-open probes, no-verdict probe, close", test_probes},
    {"close_after probes", test_close_after},
    {"open interval doubles, capped, resets", test_doubling},
    {"lost probe slot comes back", test_probe_lease},
    {"jitter within +-jitter_pct", test_jitter},
    {"callback sees every change in order", test_callback_order},
    {"callback may call back in", test_callback_reenters},
    {"the default log line; a NULL table is an empty one", test_default_log},
    {"max_targets bound, open never forgotten", test_bound},
    {"bound: a probing target stays", test_bound_probe_out},
    {"stats: success_permil and ttfb EWMA", test_stats},
    {"threads: counts consistent, changes chained", test_threads},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
