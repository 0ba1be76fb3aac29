/*
 * dp_outcomes: what this data-plane process saw of each (provider, model)
 * target since the last harvest, the input of the fleet health view
 * (docs/fleet.md). Every attempt's verdict (the dp_outcome the breaker gets)
 * and every breaker state change land here; about once a second the
 * control-plane client harvests it into one OutcomeSummary for the Report
 * stream.
 *
 * Lock-cheap: each thread that records has a shard of its own (a mutex that
 * only the harvest ever contends, once a second), so workers never wait on
 * each other. A shard holds at most DP_OUTCOMES_MAX_TARGETS targets per
 * interval; past that an outcome is dropped and counted (clients may name
 * any model of a provider). Breaker changes are rare and go to one table
 * under one mutex.
 *
 * Latency, time to first byte and time to first content are summarised as
 * count, sum, max and counts per fixed bucket (the bounds are part of the
 * wire contract, proto/llmgw/v1/control.proto DurationSummary), so
 * summaries from many replicas merge exactly and the control plane derives
 * percentiles.
 */
#ifndef DP_OUTCOMES_H
#define DP_OUTCOMES_H

#include <stdint.h>

#include "dp_breaker.h"
#include "llmgw/v1/control.pb-c.h"

#define DP_OUTCOMES_NBUCKETS 10
#define DP_OUTCOMES_MAX_TARGETS 1024
/* The buckets' upper bounds in ms (the last is +Inf): 50, 100, 250, 500,
 * 1000, 2500, 5000, 10000, 30000. */
extern const uint64_t dp_outcomes_bounds_ms[DP_OUTCOMES_NBUCKETS - 1];
/* The bucket a duration falls in. */
unsigned dp_outcomes_bucket(uint64_t ms);

/* One attempt's verdict (any thread). Canceled attempts (no verdict) are
 * not counted. fleet_probe: it was admitted as the fleet's probe
 * (dp_fleet_admit), so its verdict is also counted as the probe's. */
void dp_outcomes_record(const struct dp_outcome *o, int fleet_probe);

/* A candidate the router skipped because the fleet view says it is down
 * (any thread): the control plane picks probe holders among the replicas
 * that want the target. */
void dp_outcomes_skip(const char *provider, const char *model);

/* A breaker state change (any thread; at_us is gw_now_us time). */
void dp_outcomes_change(const char *provider, const char *model, enum dp_breaker_state from,
                        enum dp_breaker_state to, int64_t at_us);

/* fn(arg) is called (on the recording thread, after its locks are released)
 * when something the control plane should hear at once happened: a breaker
 * changed state, a fleet probe ended. NULL clears it. */
void dp_outcomes_set_notify(void (*fn)(void *arg), void *arg);

/* Takes everything recorded since the last harvest into a new summary for
 * the interval [since_ms, now_ms) (wall clock), with every target whose
 * breaker is not closed even when it saw nothing. NULL only when out of
 * memory (what was taken is lost). Free with dp_outcomes_summary_free. One
 * harvester at a time. */
Llmgw__V1__OutcomeSummary *dp_outcomes_harvest(int64_t since_ms, int64_t now_ms);
void dp_outcomes_summary_free(Llmgw__V1__OutcomeSummary *s);

/* Outcomes dropped because a shard was full, since start. */
uint64_t dp_outcomes_dropped(void);

/* Forgets everything (tests). Not while other threads record. */
void dp_outcomes_reset(void);

#endif
