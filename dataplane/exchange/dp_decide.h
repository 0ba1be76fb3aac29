/*
 * dp_decide: after an attempt failed before its answer started, what the
 * request does next: the same target again after a backoff, the next
 * candidate, or an answer with the failure. A pure function: the clock and
 * the random draw come in, so every branch is a unit test
 * (tests/unit/dataplane/decide_test.c).
 *
 * The failure's class decides whether a retry or a failover may help
 * (canon_failure_retries / canon_failure_advances); the candidate's position
 * sizes the retries (one while others remain, three on the last); the
 * provider's Retry-After is honoured up to 30 s, else the target is left;
 * and the failover budget bounds it all: a wait that would end past it is
 * not taken.
 */
#ifndef DP_DECIDE_H
#define DP_DECIDE_H

#include <stdint.h>

#include "canon.h"

#define DP_RETRIES_MIDDLE 1
#define DP_RETRIES_LAST 3
#define DP_MAX_RETRY_AFTER_US (30LL * 1000000)
#define DP_MAX_BACKOFF_US (10LL * 1000000)

enum dp_next {
    DP_NEXT_RETRY,   /* the same target again, after delay_us */
    DP_NEXT_ADVANCE, /* the next candidate, on the loop's next turn */
    DP_NEXT_GIVE_UP, /* no attempt left that could help: answer with the failure */
    DP_NEXT_BUDGET,  /* the failover budget is spent: answer with a timeout */
};

struct dp_failed {
    enum canon_failure failure; /* how the attempt failed */
    int tries;                  /* attempts on this target so far, that one included */
    int last;                   /* no candidate after this one */
    int budget_out;             /* the budget's own timer ended the attempt */
    int64_t now_us, deadline_us;
    const char *retry_after; /* the provider's Retry-After value, "" when none */
    long retry_base_ms;      /* the backoff's first step */
};

struct dp_decision {
    enum dp_next next;
    int64_t delay_us; /* DP_NEXT_RETRY: how long to wait */
};

struct dp_decision dp_decide(const struct dp_failed *f, uint64_t random);

/* A Retry-After value in seconds (fractions too), in microseconds; -1 when
 * it is not a number of seconds (an HTTP date is rare from these APIs, and
 * ignored) or beyond a day. */
int64_t dp_retry_after_us(const char *v);
/* Exponential backoff with equal jitter after `tries` attempts: the step
 * doubles from base_ms up to 10 s, half of it fixed, half drawn. */
int64_t dp_backoff_us(long base_ms, int tries, uint64_t random);

#endif
