/* Tests for dataplane/exchange/decide.c: the retry / failover / give-up
 * decision after a failed attempt, with the clock and the random draw
 * given, so every branch is exact. */
#include <CUnit/CUnit.h>
#include <stdint.h>

#include "dp_decide.h"

#define MS 1000LL
#define S 1000000LL

/* A failure on a middle candidate, at t = 1 s, with 120 s of budget. */
static struct dp_failed middle(enum canon_failure f, int tries)
{
    struct dp_failed d = {.failure = f,
                          .tries = tries,
                          .last = 0,
                          .now_us = 1 * S,
                          .deadline_us = 121 * S,
                          .retry_after = "",
                          .retry_base_ms = 200};
    return d;
}

static void test_retry_then_advance_on_a_middle_candidate(void)
{
    struct dp_failed f = middle(CANON_FAIL_PROVIDER_5XX, 1);
    struct dp_decision d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.next, DP_NEXT_RETRY);
    /* equal jitter: half the 200 ms step fixed, the draw adds none */
    CU_ASSERT_EQUAL(d.delay_us, 100 * MS);
    f.tries = DP_RETRIES_MIDDLE + 1; /* its retry is spent */
    d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.next, DP_NEXT_ADVANCE);
}

static void test_the_last_candidate_gets_three_retries(void)
{
    struct dp_failed f = middle(CANON_FAIL_TIMEOUT, 1);
    f.last = 1;
    for (int t = 1; t <= DP_RETRIES_LAST; t++) {
        f.tries = t;
        CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_RETRY);
    }
    f.tries = DP_RETRIES_LAST + 1;
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_GIVE_UP);
}

static void test_classes_that_do_not_retry(void)
{
    /* A spent quota or refused credentials: the next target, at once. */
    struct dp_failed f = middle(CANON_FAIL_QUOTA_EXHAUSTED, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_ADVANCE);
    f = middle(CANON_FAIL_AUTH_FAILED, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_ADVANCE);
    /* A request this model cannot take may suit the next one. */
    f = middle(CANON_FAIL_CONTEXT_OVERFLOW, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_ADVANCE);
    /* The client's own mistake: no other target would take it either. */
    f = middle(CANON_FAIL_BAD_REQUEST, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_GIVE_UP);
    f = middle(CANON_FAIL_CONTENT_FILTERED, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_GIVE_UP);
    f = middle(CANON_FAIL_CANCELED, 1);
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_GIVE_UP);
}

static void test_retry_after_is_honoured_within_bounds(void)
{
    struct dp_failed f = middle(CANON_FAIL_RATE_LIMITED, 1);
    f.retry_after = "2";
    struct dp_decision d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.next, DP_NEXT_RETRY);
    CU_ASSERT_EQUAL(d.delay_us, 2 * S);
    f.retry_after = "0.5";
    d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.delay_us, 500 * MS);
    /* a shorter Retry-After than the backoff: the backoff */
    f.retry_after = "0";
    d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.delay_us, 100 * MS);
    /* longer than we ever wait: the next candidate instead */
    f.retry_after = "31";
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_ADVANCE);
    f.last = 1;
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_GIVE_UP);
    /* an HTTP date is not a number of seconds: ignored, the backoff */
    f.last = 0;
    f.retry_after = "Wed, 21 Oct 2026 07:28:00 GMT";
    d = dp_decide(&f, 0);
    CU_ASSERT_EQUAL(d.next, DP_NEXT_RETRY);
    CU_ASSERT_EQUAL(d.delay_us, 100 * MS);
}

static void test_the_budget_bounds_every_wait(void)
{
    struct dp_failed f = middle(CANON_FAIL_RATE_LIMITED, 1);
    f.retry_after = "5";
    f.deadline_us = f.now_us + 4 * S; /* the wait would end past it */
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_ADVANCE);
    f.deadline_us = f.now_us; /* spent */
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_BUDGET);
    f.deadline_us = f.now_us + 100 * S;
    f.budget_out = 1; /* the budget's timer ended the attempt */
    CU_ASSERT_EQUAL(dp_decide(&f, 0).next, DP_NEXT_BUDGET);
}

static void test_backoff_doubles_with_jitter_and_a_cap(void)
{
    /* step 200, 400, 800 ms: in [step/2, step] */
    CU_ASSERT_EQUAL(dp_backoff_us(200, 1, 0), 100 * MS);
    CU_ASSERT_EQUAL(dp_backoff_us(200, 2, 0), 200 * MS);
    CU_ASSERT_EQUAL(dp_backoff_us(200, 3, 0), 400 * MS);
    CU_ASSERT_EQUAL(dp_backoff_us(200, 3, 400 * MS), 800 * MS);     /* the draw's top */
    CU_ASSERT_EQUAL(dp_backoff_us(200, 3, 400 * MS + 1), 400 * MS); /* modulo: wraps */
    for (uint64_t r = 0; r < 100000; r += 997) {
        int64_t b = dp_backoff_us(200, 2, r * 7919);
        CU_ASSERT(b >= 200 * MS && b <= 400 * MS);
    }
    /* capped at 10 s however many tries */
    CU_ASSERT_EQUAL(dp_backoff_us(200, 40, 0), DP_MAX_BACKOFF_US / 2);
    CU_ASSERT_EQUAL(dp_backoff_us(200, 40, DP_MAX_BACKOFF_US / 2), DP_MAX_BACKOFF_US);
    /* a zero base: no wait */
    CU_ASSERT_EQUAL(dp_backoff_us(0, 3, 12345), 0);
}

static void test_retry_after_values(void)
{
    CU_ASSERT_EQUAL(dp_retry_after_us("3"), 3 * S);
    CU_ASSERT_EQUAL(dp_retry_after_us("1.25"), 1250 * MS);
    CU_ASSERT_EQUAL(dp_retry_after_us(""), -1);
    CU_ASSERT_EQUAL(dp_retry_after_us(NULL), -1);
    CU_ASSERT_EQUAL(dp_retry_after_us("-1"), -1);
    CU_ASSERT_EQUAL(dp_retry_after_us("3s"), -1);
    CU_ASSERT_EQUAL(dp_retry_after_us("86401"), -1);
    CU_ASSERT_EQUAL(dp_retry_after_us("86400"), 86400 * S);
}

static CU_TestInfo tests[] = {
    {"retry, then advance, on a middle candidate", test_retry_then_advance_on_a_middle_candidate},
    {"the last candidate gets three retries", test_the_last_candidate_gets_three_retries},
    {"classes that do not retry", test_classes_that_do_not_retry},
    {"Retry-After is honoured within bounds", test_retry_after_is_honoured_within_bounds},
    {"the budget bounds every wait", test_the_budget_bounds_every_wait},
    {"backoff doubles, with jitter and a cap", test_backoff_doubles_with_jitter_and_a_cap},
    {"Retry-After values", test_retry_after_values},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
