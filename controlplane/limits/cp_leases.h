/*
 * cp_leases: the control plane's side of budgets and rate limits: grants,
 * releases and expiry of the leases data-plane replicas reserve from
 * (docs/budgets.md).
 *
 * Postgres is the one authority, so any number of control-plane replicas
 * may serve leases without arbitrating among themselves. For one limit in
 * one window (limit_windows, limit_leases; cp_migrate.c, migrations 5, 7):
 *
 *   outstanding(lease) = settled ? max(charged - consumed, 0)
 *                                : max(granted - consumed - released, 0)
 *                        until the grace (grace_ms, below) past its expiry
 *   remaining          = amount - spent - sum(outstanding)
 *
 * computed under the window row's lock, so two grants (through any replica)
 * never both hand out the same allowance. The ledger trigger moves what a
 * request used from its lease's outstanding to the window's spent (consumed
 * and spent rise together), so remaining does not move when a charge lands.
 * A grant takes min(want, max(need, remaining / CP_LEASES_FRACTION)):
 * slices shrink as the window nears its end, so what the fleet holds but
 * has not used shrinks with it. A lease lives CP_LEASES_TTL_MS unless its
 * replica renews it; once expired nothing more is reserved from it, but
 * what it may still be charged stays outstanding until its replica's final
 * report says what it charged (settled), or until the grace has passed (a
 * replica that died keeps allowance away for that long, never for good).
 *
 * These are plain blocking database calls for the thread that owns the
 * connection (the ledger writer), in the order lease messages came. Each
 * runs its own transaction: call them outside one.
 */
#ifndef CP_LEASES_H
#define CP_LEASES_H

#include "llmgw/v1/control.pb-c.h"

struct cp_db;

/* SQL: the start of the current UTC window of a limit whose period column
 * is the expression period ('minute', 'day', 'month'), as limit_windows
 * keys it. */
#define CP_WINDOW_NOW_SQL(period)                                                                  \
    "(date_trunc(" period ", now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC')"

#define CP_LEASES_TTL_MS 60000
#define CP_LEASES_FRACTION 4
/* How long past its expiry an unsettled lease still counts: the default
 * of the control plane's --lease-grace-s (cp_ctx.lease_grace_ms), which
 * every call below that counts leases takes as grace_ms (a negative one
 * counts as 0). Set it the same on every replica. */
#define CP_LEASES_GRACE_MS 3600000

/* The strings a LeaseGrant points into: the caller's, alive until the
 * grant is packed. */
struct cp_lease_strings {
    char limit_id[64];
    char lease_id[40];
    char refusal[16];
};

/*
 * Answers rq from replica in g (initialized here; its strings point into
 * st). want > 0 asks for a new lease (the same one again when replica
 * already got one for rq->req); want 0 reports on rq->lease_id: the totals
 * it released (and, final, charged) are recorded, and unless final it is
 * renewed (g->ttl_ms 0: it could not be, it is over). want 0 without a
 * lease_id (older data planes) renews every live lease of the replica in
 * the window. Every answer reports the window. Refusals: "depleted"
 * (remaining < need), "unknown_limit" (no such enabled limit),
 * "invalid_window" (not the start of a current window of the limit's
 * period), "unknown_lease" (a report on a lease the replica does not
 * have), "unallocated" (the database failed: the replica's offline policy
 * decides; the function then returns GW_EIO). g->limit, spent and
 * remaining describe the window after the grant or report.
 */
int cp_leases_grant(struct cp_db *db, long long grace_ms, const char *replica,
                    const Llmgw__V1__LeaseRequest *rq, Llmgw__V1__LeaseGrant *g,
                    struct cp_lease_strings *st) __attribute__((warn_unused_result));

/* cp_ledger's grant handler (cp_ledger_set_leases; ctx: the daemon's
 * struct cp_ctx, for its lease_grace_ms): cp_leases_grant with strings of
 * the calling thread, valid until its next call; it also runs
 * cp_leases_expire every CP_LEASES_EXPIRE_EVERY_MS on that thread. */
#define CP_LEASES_EXPIRE_EVERY_MS 10000
int cp_leases_ledger_grant(void *ctx, struct cp_db *db, const char *replica,
                           const Llmgw__V1__LeaseRequest *rq, Llmgw__V1__LeaseGrant *g);

/* Gives back part of replica's lease rl->lease_id (at most what was
 * granted); a lease of another replica, or an unknown one, is left alone.
 * Additive: the unanswered LeaseRelease of older data planes. 0, or
 * GW_EIO. */
int cp_leases_release(struct cp_db *db, const char *replica, const Llmgw__V1__LeaseRelease *rl)
    __attribute__((warn_unused_result));

/* Periodic (every few seconds, on any replica): marks leases that no
 * longer count (settled with every charge landed, or unsettled past the
 * grace), and forgets such leases and minute windows over two days old.
 * The number of leases it marked, or GW_EIO. Correctness does not wait on
 * it: every grant counts leases by the same rule. */
int cp_leases_expire(struct cp_db *db, long long grace_ms) __attribute__((warn_unused_result));

#endif
