/*
 * dp_fleet: the fleet health view as this data plane holds it
 * (docs/fleet.md). The control plane merges every replica's outcomes and
 * pushes a FleetView on the Report stream; dp_cpclient applies it here.
 *
 *  - A target the view says is down is skipped by the router (fleet_down),
 *    even when this process's own breaker never saw it fail, unless this
 *    replica holds the target's probe: then one attempt at a time is
 *    admitted as the fleet's probe (like a half-open breaker), and its
 *    verdict goes back in the next OutcomeSummary, at once.
 *  - A view is trusted for its ttl_ms after it arrived: a control plane
 *    that is gone (and so stops refreshing it) never keeps a provider out
 *    of rotation; the local breakers alone decide then.
 *
 * The hot path takes no lock while no target is down in a live view (one
 * atomic load); with some down, a short mutex-held binary search. Views
 * are replaced whole; a probe slot taken survives the replacement.
 */
#ifndef DP_FLEET_H
#define DP_FLEET_H

#include <stddef.h>
#include <stdint.h>

#include "dp_breaker.h"
#include "llmgw/v1/control.pb-c.h"

enum dp_fleet_state {
    DP_FLEET_HEALTHY = 0, /* also: not in the view, or no live view */
    DP_FLEET_DEGRADED = 1,
    DP_FLEET_DOWN = 2,
};
const char *dp_fleet_state_name(enum dp_fleet_state s); /* "healthy", "degraded", "down" */

/* Replaces the view (copied) as received at now_us (gw_now_us); NULL
 * forgets it. Tells the gauge (below) each target's state. Any thread.
 * GW_OK or GW_ENOMEM (the previous view stays). */
int dp_fleet_apply(const Llmgw__V1__FleetView *v, int64_t now_us);

/* Who is told each target's state as views come, go and expire (a target
 * that left the view, or a view that expired, reads healthy): the data
 * plane's gauges (dp_metrics_fleet_gauge). NULL, as at start: no one. Set
 * before the first view is applied. */
typedef void (*dp_fleet_gauge_fn)(const char *provider, const char *model,
                                  enum dp_fleet_state state);
void dp_fleet_set_gauge(dp_fleet_gauge_fn fn);

/* For the router: 1 when the target is to be skipped now (the live view
 * says down and this replica may not probe it: not the holder, or its
 * probe is out), with the view's first reason in reason (may be NULL). */
int dp_fleet_skip(const char *provider, const char *model, int64_t now_us, char *reason,
                  size_t len);

/* What the whole fleet saw of a target (the view's FleetScore): the
 * figures the router's price, latency and auto strategies rank by, the same
 * on every replica (docs/router.md, "Scores from the fleet"). */
struct dp_fleet_score {
    uint64_t attempts;       /* health-relevant attempts in the last hour */
    unsigned success_permil; /* of them, the successful */
    uint64_t ttfb_samples;   /* successes of the last 5 minutes with a first byte */
    int64_t ttfb_mean_us;
    uint64_t ttfc_samples; /* ... with first content */
    int64_t ttfc_mean_us;
};
/* 1 with *out filled when the live view scores the target; 0 when there
 * is no live view or it does not name the target. Any thread. */
int dp_fleet_score(const char *provider, const char *model, int64_t now_us,
                   struct dp_fleet_score *out);

/* Right before an attempt: DP_ADMIT_YES (not down), DP_ADMIT_PROBE (down,
 * and this attempt is the fleet's probe: pass its verdict to
 * dp_fleet_record with probe set) or DP_ADMIT_NO (down). */
enum dp_admit dp_fleet_admit(const char *provider, const char *model, int64_t now_us);
/* Gives back a probe slot without a verdict (the attempt never started). */
void dp_fleet_unadmit(const char *provider, const char *model);

/* Every attempt's verdict, as dp_breaker_record gets it: counted for the
 * next OutcomeSummary (dp_outcomes), and a probe's slot given back. */
void dp_fleet_record(const struct dp_outcome *o, int probe);

/* The version of the live view (0: none, or it went stale). */
uint64_t dp_fleet_version(int64_t now_us);
/* Once a second or so: a view past its ttl resets the fleet gauges (the
 * router already ignores it). */
void dp_fleet_tick(int64_t now_us);

#endif
