/*
 * cp_fleetview: the fleet health view (docs/fleet.md). Every data plane
 * sends an OutcomeSummary about once a second; this merges them per
 * (provider, model) target and per replica into a sliding window of
 * one-second buckets, adds what the other control-plane replicas merged
 * (their blobs through etcd), and derives one state per target:
 *
 *   down      the breakers of most replicas that tried the target opened in
 *             the last few seconds, or nearly every recent attempt across
 *             the fleet failed. Latched: it stays down until a probe
 *             succeeds. One replica at a time holds the probe (round robin
 *             over the replicas with demand for the target; assigned by
 *             the leader), first after probe_first_ms, then with the
 *             breakers' doubling backoff after each failed probe.
 *   degraded  a minority of breakers open, an elevated failure rate, or a
 *             time to first byte far above the window's earlier part.
 *             Informational: data planes still route to it.
 *   healthy   otherwise.
 *
 * Each target also carries a score (cp_fleetscore): the fleet's success
 * rate over the last hour and mean times to first byte and content over the
 * last 5 minutes, this replica's figures plus the other control planes'
 * (from their blobs), for the data planes' price, latency and auto
 * strategies. A target is kept while its hour has figures.
 *
 * Every replica computes the view from the same merged data. The latch
 * (down, since, the probe holder) is the leader's: a follower adopts the
 * leader's decisions from its blob and may only add a fresh "down" of its
 * own (so its data planes react before the leader's blob arrives). A
 * replica that cannot see a current leader blob (etcd down, no leader)
 * decides alone, with probes among its own data planes.
 *
 * Pure logic: no thread, no I/O, times passed in (wall-clock ms), so the
 * unit tests drive it. cp_fleet is the glue to gRPC, etcd and the loop.
 */
#ifndef CP_FLEETVIEW_H
#define CP_FLEETVIEW_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "llmgw/v1/control.pb-c.h"

#define CP_FLEETVIEW_ID_MAX 129 /* data-plane replica ids: up to 128 bytes */
/* The largest "outcomes" blob published whole (etcd's default request
 * limit is 1.5 MiB); past it the blob leaves out the buckets, then every
 * contribution, keeping the latches. */
#define CP_FLEETVIEW_BLOB_MAX (1024 * 1024)

struct cp_fleetview_cfg {
    int window_s;            /* the sliding window, in 1 s buckets (10) */
    int recent_s;            /* what the rules call recent (3) */
    int64_t open_horizon_ms; /* a breaker opening counts this long (5000) */
    unsigned min_failures;   /* the failure-rate rule's minimum (5) */
    unsigned down_pct;       /* recent failures at or above this % of attempts: down (80) */
    unsigned degraded_pct;   /* ... degraded (20) */
    int64_t probe_first_ms;  /* down to the first probe (5000) */
    int64_t probe_max_ms;    /* the backoff's cap after failed probes (60000) */
    int64_t probe_hold_ms;   /* a holder that has not probed by then hands over (5000) */
    int64_t demand_ms;       /* a replica with attempts or skips this recent may probe (60000) */
    int64_t member_ttl_ms;   /* a replica not heard from this long is gone (5000) */
    int64_t remote_ttl_ms;   /* another control plane's blob older than this is ignored (15000) */
    int64_t leader_fresh_ms; /* a leader blob younger than this is followed (3500) */
    int64_t view_ttl_ms;     /* sent with each view: data planes ignore it after (5000) */
    unsigned max_targets;    /* (1024) */
    int64_t report_grace_ms; /* a breakers' verdict waits this long for unheard replicas (1500) */
};

/* A data plane connected to this control plane (from cp_grpc's table). */
struct cp_fleetview_member {
    const char *id;
    int64_t snapshot_version;
    int64_t last_seen_ms;
};

struct cp_fleetview;

/* self_id: this control plane's replica id (copied). cfg NULL or zero
 * fields: the defaults above. NULL when out of memory. */
struct cp_fleetview *cp_fleetview_new(const char *self_id, const struct cp_fleetview_cfg *cfg);
void cp_fleetview_free(struct cp_fleetview *fv);

/* A summary from a data plane connected here, received at now_ms. Returns
 * 1 when it carries news to act on at once (a breaker change, a probe's
 * verdict, a new replica), else 0. */
int cp_fleetview_add(struct cp_fleetview *fv, const char *replica,
                     const Llmgw__V1__OutcomeSummary *s, int64_t now_ms);

/* The data planes connected here now (replaces the last list). */
void cp_fleetview_set_members(struct cp_fleetview *fv, const struct cp_fleetview_member *m,
                              size_t n, int64_t now_ms);

/* Another control plane's blob: kind "outcomes" (what it merged) or "dp"
 * (its data planes), name its replica id. Call cp_fleetview_remote_begin,
 * then this for each blob of the set, then cp_fleetview_remote_end: blobs
 * of the kind not given again are forgotten. A blob that does not parse is
 * ignored (0 returned; 1 when taken). */
void cp_fleetview_remote_begin(struct cp_fleetview *fv, const char *kind);
int cp_fleetview_remote(struct cp_fleetview *fv, const char *kind, const char *name,
                        const char *json, size_t len, int64_t now_ms);
void cp_fleetview_remote_end(struct cp_fleetview *fv, const char *kind);

/* Recomputes every target's state at now_ms. leader: this replica leads
 * (or has no etcd); leader_id: the leader's id ("" unknown); etcd: 1 up,
 * 0 down, -1 not configured. Returns 1 when the decisions changed (a new
 * version). */
int cp_fleetview_compute(struct cp_fleetview *fv, int64_t now_ms, int leader, const char *leader_id,
                         int etcd);

/* The version of the decisions: a hash of every target's state and probe
 * holder (0: nothing to say), so two control planes that agree have the
 * same version. */
uint64_t cp_fleetview_version(const struct cp_fleetview *fv);

/* The FleetView for one data plane (probe set where it holds it), packed;
 * *out is malloc'd. 0 or GW_ENOMEM. */
int cp_fleetview_pack(const struct cp_fleetview *fv, const char *replica, int64_t now_ms,
                      uint8_t **out, size_t *len) __attribute__((warn_unused_result));

/* The blobs to publish: "outcomes" (this replica's contributions and, from
 * the leader, its decisions) and "dp" (its data planes). New strings, or
 * NULL when out of memory. */
char *cp_fleetview_outcomes_blob(const struct cp_fleetview *fv, int64_t now_ms);
char *cp_fleetview_members_blob(const struct cp_fleetview *fv, int64_t now_ms);

/* GET /v1/admin/health's "fleet" and "replicas" members, as one object
 * {"fleet":{...},"replicas":[...]}. New reference or NULL. */
json_t *cp_fleetview_health(const struct cp_fleetview *fv, int64_t now_ms);

/* Every target's state (0 healthy, 1 degraded, 2 down), for the gauges. */
void cp_fleetview_each(const struct cp_fleetview *fv,
                       void (*fn)(void *arg, const char *provider, const char *model, int state),
                       void *arg);
/* Data planes connected anywhere in the fleet. */
size_t cp_fleetview_replicas(const struct cp_fleetview *fv, int64_t now_ms);

#endif
