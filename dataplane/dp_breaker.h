/*
 * dp_breaker: one circuit breaker per (provider, model) target per
 * data-plane process, shared by its worker threads.
 *
 * closed: every attempt is admitted. Outcomes go into a sliding window
 * (buckets over window_us); when the window holds at least min_samples
 * health-relevant outcomes and the failure ratio reaches failure_ratio, the
 * breaker opens.
 * open: nothing is admitted for a jittered interval (open_us, doubled on
 * each reopening without a close in between, capped at max_open_us).
 * half-open: after the interval, at most `probes` attempts at a time are
 * admitted as probes; close_after successful probes close it (the window
 * starts empty), one failed probe reopens it.
 *
 * Only health-relevant failure classes count (canon_failure_counts); the
 * others, and canceled attempts, are no verdict: they change nothing but
 * give back a probe slot.
 *
 * The outcome record is what the fleet view (control plane) will receive:
 * target, class, latency, time to first byte, time. State changes go to a
 * callback (by default one JSON log line each).
 *
 * Times are gw_now_us() (monotonic) values passed in, so tests drive the
 * clock. The table is bounded (max_targets): when full, the least recently
 * used closed target with nothing in flight is forgotten.
 */
#ifndef DP_BREAKER_H
#define DP_BREAKER_H

#include <stdint.h>

#include "canon.h"

struct dp_breaker_cfg {
    int64_t window_us;    /* sliding window (default 30 s), in 10 buckets */
    unsigned min_samples; /* outcomes in the window before it may open (default 5) */
    unsigned failure_pct; /* opens at >= this % failures (default 50) */
    int64_t open_us;      /* first open interval (default 5 s) */
    int64_t max_open_us;  /* cap for the doubling (default 60 s) */
    unsigned jitter_pct;  /* open interval +- this % (default 20; 0 in tests) */
    unsigned probes;      /* concurrent half-open probes (default 1) */
    unsigned close_after; /* successful probes that close it (default 1) */
    unsigned max_targets; /* table bound (default 4096) */
};

enum dp_breaker_state { DP_BREAKER_CLOSED, DP_BREAKER_OPEN, DP_BREAKER_HALF_OPEN };
const char *dp_breaker_state_name(enum dp_breaker_state s); /* "closed", "open", "half_open" */

/* One attempt's verdict. */
struct dp_outcome {
    const char *provider;
    const char *model;
    int ok;                     /* the attempt delivered a whole answer */
    enum canon_failure failure; /* when !ok */
    int64_t latency_us;         /* attempt start to its end */
    int64_t ttfb_us;            /* attempt start to the provider's first byte; 0 if none */
    int64_t at_us;              /* when it ended (gw_now_us) */
};

enum dp_admit {
    DP_ADMIT_NO,    /* open, or half-open with every probe slot taken */
    DP_ADMIT_YES,   /* closed */
    DP_ADMIT_PROBE, /* half-open: this attempt is a probe; its outcome must be recorded */
};

struct dp_breakers;

/* cfg NULL: the defaults above. Zero fields of cfg also take defaults,
 * except jitter_pct, which is taken as given. */
struct dp_breakers *dp_breakers_new(const struct dp_breaker_cfg *cfg);
void dp_breakers_free(struct dp_breakers *b);
/* The process-wide table (defaults), created on first use. Thread-safe. */
struct dp_breakers *dp_breakers_global(void);

typedef void (*dp_breaker_change_fn)(void *arg, const char *provider, const char *model,
                                     enum dp_breaker_state from, enum dp_breaker_state to,
                                     int64_t at_us);
/* Replaces the default (a log line). Set before use. */
void dp_breakers_on_change(struct dp_breakers *b, dp_breaker_change_fn fn, void *arg);

/* Takes an attempt slot: call once per attempt, right before it starts. */
enum dp_admit dp_breaker_admit(struct dp_breakers *b, const char *provider, const char *model,
                               int64_t now_us);
/* The state now, without taking anything (an open breaker whose interval
 * has passed reads half-open). Unknown targets are closed. */
enum dp_breaker_state dp_breaker_peek(struct dp_breakers *b, const char *provider,
                                      const char *model, int64_t now_us);
/* The verdict of an admitted attempt; probe says it was admitted as one. */
void dp_breaker_record(struct dp_breakers *b, const struct dp_outcome *o, int probe);

/* What the router scores targets by. */
struct dp_target_stats {
    enum dp_breaker_state state;
    unsigned samples;        /* health-relevant outcomes in the window */
    unsigned failures;       /* of them, failures */
    unsigned success_permil; /* 1000 * successes / samples; 1000 with no samples */
    int64_t ttfb_ewma_us;    /* over successful attempts; 0 = never observed */
};
/* Fills st (an unknown target: closed, no samples). */
void dp_breaker_stats(struct dp_breakers *b, const char *provider, const char *model,
                      int64_t now_us, struct dp_target_stats *st);

#endif
