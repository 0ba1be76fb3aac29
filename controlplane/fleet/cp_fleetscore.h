/*
 * cp_fleetscore: what the whole fleet saw of one target over the last hour,
 * the figures the data planes' price, latency and auto strategies rank by
 * (FleetScore in the view; docs/router.md, "Scores from the fleet").
 *
 * A ring of one-minute buckets per target holds what the data planes
 * connected to this control plane reported (OutcomeSummary): successes,
 * health-relevant failures, and the count and sum of times to first byte
 * and to first content of the successes. Another control plane publishes
 * its own ring's sums in its blob; the fleet's figures are this ring's sums
 * plus theirs. A data plane reports to one control plane at a time and each
 * summary once, so nothing is counted twice.
 *
 * Success over the last hour (60 buckets); latency over the last 5 (a
 * provider's speed changes within the hour, its reliability less so).
 * Pure: times are passed in (wall-clock ms).
 */
#ifndef CP_FLEETSCORE_H
#define CP_FLEETSCORE_H

#include <jansson.h>
#include <stdint.h>

#include "llmgw/v1/control.pb-c.h"

#define CP_FLEETSCORE_MINUTES 60
#define CP_FLEETSCORE_RECENT 5

/* Sums: ok and failed over the hour, the latencies over the recent
 * minutes (sums in ms). */
struct cp_fleetscore_sums {
    uint64_t ok, failed;
    uint64_t ttfb_n, ttfb_ms, ttfc_n, ttfc_ms;
};

struct cp_fleetscore_minute {
    int64_t minute; /* wall minute; 0: empty */
    struct cp_fleetscore_sums s;
};

struct cp_fleetscore {
    struct cp_fleetscore_minute m[CP_FLEETSCORE_MINUTES];
};

/* Adds one target's outcomes of a summary received at now_ms: its
 * successes, its health-relevant failures (the breaker's classes) and the
 * successes' time summaries (NULL: none). */
void cp_fleetscore_add(struct cp_fleetscore *f, int64_t now_ms, const Llmgw__V1__TargetOutcomes *o);

/* This ring's sums at now_ms, added to *out. Returns 1 when any bucket is
 * still in the hour (the target has figures to keep). */
int cp_fleetscore_sum(const struct cp_fleetscore *f, int64_t now_ms,
                      struct cp_fleetscore_sums *out);

/* Sums as a blob member and back (a member that does not parse adds
 * nothing). */
json_t *cp_fleetscore_json(const struct cp_fleetscore_sums *s);
void cp_fleetscore_from_json(struct cp_fleetscore_sums *out, const json_t *j);

/* The FleetScore message of sums (success 1000 with no attempts; means in
 * microseconds). */
void cp_fleetscore_pb(const struct cp_fleetscore_sums *s, Llmgw__V1__FleetScore *out);

/* GET /v1/admin/health's "score" of a target. */
json_t *cp_fleetscore_health(const struct cp_fleetscore_sums *s);

#endif
