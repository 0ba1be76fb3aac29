/*
 * cp_leases: the control plane's side of budgets and rate limits: grants,
 * releases and expiry of the leases data-plane replicas reserve from
 * (docs/budgets.md).
 *
 * Postgres is the one authority, so any number of control-plane replicas
 * may serve leases without arbitrating among themselves. For one limit in
 * one window (limit_windows, limit_leases; cp_migrate.c, migration 5):
 *
 *   outstanding(lease) = max(granted - consumed - released, 0)  while live
 *   remaining          = amount - spent - sum(outstanding)
 *
 * computed under the window row's lock, so two grants (through any replica)
 * never both hand out the same allowance. The ledger trigger moves what a
 * request used from its lease's outstanding to the window's spent (consumed
 * and spent rise together), so remaining does not move when a charge lands.
 * A grant takes min(want, max(need, remaining / CP_LEASES_FRACTION)):
 * slices shrink as the window nears its end, so what the fleet holds but
 * has not used shrinks with it. A lease lives CP_LEASES_TTL_MS unless its
 * replica renews it; an expired lease's outstanding part goes back to the
 * pool (a replica that died does not keep allowance hostage).
 *
 * These are plain blocking database calls for the thread that owns the
 * connection (the ledger writer), called in the Report stream's order. Each
 * runs its own transaction: call them outside one.
 */
#ifndef CP_LEASES_H
#define CP_LEASES_H

#include "llmgw/v1/control.pb-c.h"

struct cp_db;

#define CP_LEASES_TTL_MS 60000
#define CP_LEASES_FRACTION 4

/* The strings a LeaseGrant points into: the caller's, alive until the
 * grant is packed. */
struct cp_lease_strings {
    char limit_id[64];
    char lease_id[40];
    char refusal[16];
};

/*
 * Answers rq from replica in g (initialized here; its strings point into
 * st). want > 0 asks for a new lease; want 0 renews every live lease the
 * replica holds in the window and only reports the window. Refusals:
 * "depleted" (remaining < need), "unknown_limit" (no such enabled limit),
 * "invalid_window" (not the start of a current window of the limit's
 * period), "unallocated" (the database failed: the replica's offline policy
 * decides; the function then returns GW_EIO). g->limit, spent and
 * remaining describe the window after the grant.
 */
int cp_leases_grant(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRequest *rq,
                    Llmgw__V1__LeaseGrant *g, struct cp_lease_strings *st)
    __attribute__((warn_unused_result));

/* cp_ledger's grant handler (cp_ledger_set_leases): cp_leases_grant with
 * strings of the calling thread, valid until its next call; it also runs
 * cp_leases_expire every CP_LEASES_EXPIRE_EVERY_MS on that thread. */
#define CP_LEASES_EXPIRE_EVERY_MS 10000
int cp_leases_ledger_grant(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRequest *rq,
                           Llmgw__V1__LeaseGrant *g);

/* Gives back part of replica's lease rl->lease_id (at most what was
 * granted); a lease of another replica, or an unknown one, is left alone.
 * 0, or GW_EIO. */
int cp_leases_release(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRelease *rl)
    __attribute__((warn_unused_result));

/* Periodic (every few seconds, on any replica): marks leases past their
 * expiry, and forgets expired leases and minute windows over two days old.
 * The number of leases it marked, or GW_EIO. Correctness does not wait on
 * it: every grant counts only leases whose expiry is still ahead. */
int cp_leases_expire(struct cp_db *db) __attribute__((warn_unused_result));

#endif
