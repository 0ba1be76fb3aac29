/*
 * dp_breaker: one circuit breaker per (provider, model) target per
 * data-plane process, shared by its worker threads (one mutex).
 *
 * closed: every attempt is admitted. Outcomes go into a sliding window (10
 * buckets over window_us). When a failure is recorded, the breaker opens if
 * EITHER the window holds at least min_samples health-relevant outcomes and
 * failures reach failure_pct of them, OR the last min_samples
 * health-relevant outcomes were all failures (so a provider that dies after
 * hours of successes is cut within min_samples failures, not when the
 * ratio catches up).
 * open: nothing is admitted for a jittered interval (open_us, doubled on
 * each reopening without a close in between, capped at max_open_us; the
 * jitter applies to the capped value).
 * half-open: after the interval, at most `probes` attempts at a time are
 * admitted as probes; close_after successful probes close it (the window
 * starts empty, the interval starts again from open_us), one failed probe
 * reopens it. Only probes decide: a late outcome of an attempt admitted
 * before the breaker opened is counted in the window and nothing more. A
 * probe slot not given back within 5 minutes is taken back, so a lost
 * outcome cannot hold a target half-open forever.
 *
 * Only health-relevant failure classes count (canon_failure_counts); the
 * others, and canceled attempts, are no verdict: they change nothing but
 * give back a probe slot.
 *
 * The outcome record is what the fleet view (control plane) will receive:
 * target, class, latency, time to first byte, time. State changes go to a
 * callback (by default one JSON log line each: WARN for open, INFO else).
 *
 * Times are gw_now_us() (monotonic) values passed in, so tests drive the
 * clock. The table is bounded (max_targets), since clients can name any
 * "provider/model": when full, the least recently used closed target with
 * no probe out is forgotten; when every target is open, half-open or
 * probing, a new one is not tracked (admitted, its outcomes dropped).
 * Targets are created by the first outcome with a verdict; admit, peek
 * and stats never create one. Every verb takes b NULL as an empty table
 * (dp_breakers_new() is NULL when its allocation failed).
 */
#ifndef DP_BREAKER_H
#define DP_BREAKER_H

#include <stdint.h>

#include "canon.h"

struct dp_breaker_cfg {
    int64_t window_us;    /* sliding window (default 30 s), in 10 buckets */
    unsigned min_samples; /* outcomes in the window before it may open; also the
                             failures in a row that open it (default 3) */
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
    int64_t ttfc_us;            /* attempt start to its first content event; 0 if none */
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

typedef void (*dp_breaker_change_fn)(void *arg, const char *provider, const char *model,
                                     enum dp_breaker_state from, enum dp_breaker_state to,
                                     int64_t at_us);
/* Replaces the default (a log line); fn NULL restores it. Set before use.
 * The callback runs outside the table's lock, one change at a time, in
 * the order the changes happened (possibly on another thread than the one
 * that caused the change); it may call back into the table. provider and
 * model are only valid during the call; at_us is when the change took
 * effect (for open -> half_open, the end of the open interval). Changes
 * queue while it runs; past 4096 waiting, later ones are dropped. */
void dp_breakers_on_change(struct dp_breakers *b, dp_breaker_change_fn fn, void *arg);
/* The default callback (one JSON log line), for callbacks that add to it. */
void dp_breaker_log_change(void *arg, const char *provider, const char *model,
                           enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us);

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
