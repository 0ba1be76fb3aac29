/*
 * cp_etcd: this control-plane replica's place in the fleet, kept in etcd
 * (docs/controlplane.md, "The fleet: etcd").
 *
 * A thread of its own, talking to etcd with the blocking gw_etcd client:
 *
 *   lease    one lease per replica (TTL --etcd-lease-ttl-s, default 5 s),
 *            renewed every TTL/3. Every key the replica writes is bound to
 *            it, so a replica that dies leaves nothing behind a TTL later.
 *   leader   a txn on /llmgw/leader: "if the key does not exist, put my id
 *            bound to my lease, else read it". The leader runs it every
 *            TTL/3 (at most every second) to confirm it still holds the key;
 *            a follower every 250 ms, learning who leads, and takes the key
 *            once a dead leader's lease has expired: a dead leader is
 *            replaced when its lease ends (at most a TTL after its last
 *            renewal), plus etcd's expiry sweep (0.5 s) and 250 ms. A leader whose renewal (or
 * check) fails steps down at once, before its lease can expire and another replica take over. blobs
 * publish: "/llmgw/<kind>/<name> = bytes", bound to the lease, written again whenever the replica
 * registers anew (a new lease after an expiry, etcd back after an outage). collect: every replica's
 * blobs of a kind, read with a range on the prefix every 250 ms; a watcher gets the set on the main
 * loop when it changes. Membership is one such kind: "cp", under this replica's id.
 *
 * Without endpoints there is no thread and no etcd: the replica is the
 * leader of itself, and each kind's set is what this replica published,
 * so code on top behaves the same on one machine and in a fleet.
 *
 * etcd unreachable: the replica steps down (if it led), keeps its last view
 * of the others' blobs (with its own always current), reports "down" in
 * cp_etcd_status, and keeps trying every second; when etcd answers again
 * it renews (or re-grants) its lease, writes its keys again and re-runs
 * the election.
 *
 * Singleton jobs (cp_etcd_job_add) run on the main loop, on the leader
 * only: once when it becomes leader, then at their interval while it
 * stays leader (sooner after a failure). controlplane/fleet/cp_jobs.c is
 * the list.
 *
 * Threading: the thread never touches the main loop's objects; it wakes
 * the loop (event_active; the daemon called evthread_use_pthreads) and
 * leadership callbacks, set watchers and jobs all run there. The verbs
 * say which thread they may be called from.
 */
#ifndef CP_ETCD_H
#define CP_ETCD_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

#define CP_ETCD_PREFIX "/llmgw/"
#define CP_ETCD_ID_MAX 64   /* replica ids and blob names: [A-Za-z0-9._:-], 1..63 */
#define CP_ETCD_KIND_MAX 32 /* kinds: [a-z0-9_-], 1..31, not "leader" */

struct cp_etcd_opts {
    const char *endpoints; /* "http://h:p,..." (gw_etcd_new); NULL or "": no etcd */
    /* TLS to https:// endpoints (gw_etcd_set_tls): CA, client cert, key;
     * each NULL when not given. */
    const char *tls_ca, *tls_cert, *tls_key;
    const char *replica_id; /* this replica; copied */
    int lease_ttl_s;        /* 0: 5; at least 2 (etcd's minimum) */
    /* Published under /llmgw/cp/<replica_id> (copied; NULL: "{}"). */
    const char *member;
};

struct cp_etcd;

/* Starts the fleet thread (with endpoints), which grants its lease,
 * registers and runs for leadership at once. NULL with a message in err
 * for bad options or no memory; an unreachable etcd is not an error here.
 * Call on the main loop's thread, before the loop runs or on it. */
struct cp_etcd *cp_etcd_new(struct event_base *base, const struct cp_etcd_opts *o, char *err,
                            size_t errlen);

/* Stops the thread and revokes the lease (bounded by the client's
 * timeout), so another replica takes the lead at once rather than a TTL
 * later. Stops the jobs. On the main loop; NULL is a no-op. */
void cp_etcd_free(struct cp_etcd *e);

/* --- State (any thread) --- */

/* 1 when this replica is the leader now (always, without etcd). */
int cp_etcd_is_leader(struct cp_etcd *e);
/* 1 with etcd configured and answering, 0 configured and not, -1 none. */
int cp_etcd_up(struct cp_etcd *e);
/* The leader's id as last seen into buf ("" when unknown). Returns buf. */
const char *cp_etcd_leader(struct cp_etcd *e, char *buf, size_t len);
const char *cp_etcd_replica_id(const struct cp_etcd *e);

/* {"replica_id", "leader":{"self":bool,"id":string|null,"since_ms"},
 *  "etcd":{"configured":bool,"state":"up"|"down"|"off","endpoints":[...],
 *          "lease_ttl_s","last_ok_ms","last_error","last_error_at_ms"},
 *  "members":[{"id", ...its member blob's members}],
 *  "jobs":[{"name","interval_ms","runs","failures","last_run_ms","last_ok",
 *           "last_error"}]}.
 * New reference or NULL (no memory). On the main loop (jobs live there). */
json_t *cp_etcd_status(struct cp_etcd *e);

/* --- Leadership and singleton jobs (main loop) --- */

/* Called on the main loop whenever this replica becomes or stops being the
 * leader (leader: 1 or 0); the first call comes once the state is first
 * known. One callback; NULL clears it. */
void cp_etcd_on_leader(struct cp_etcd *e, void (*cb)(void *arg, int leader), void *arg);

/* A job: 0 on success, or a GW_E code with a message in err. Runs on the
 * main loop; keep it short, or hand the work to a thread of its own. */
typedef int (*cp_etcd_job_fn)(void *arg, char *err, size_t errlen);

/* Adds a singleton job named name (copied; at most 31 characters, also the
 * metrics label): run when this replica becomes leader (or at once, when
 * it already is), then every interval_ms while it stays leader; after a
 * failure, again within retry_ms (0: interval_ms). 0, GW_EINVAL (a bad
 * name, a duplicate, a non-positive interval) or GW_ENOMEM. */
int cp_etcd_job_add(struct cp_etcd *e, const char *name, long interval_ms, long retry_ms,
                    cp_etcd_job_fn fn, void *arg) __attribute__((warn_unused_result));

/* --- Blobs (publish: any thread; watch and collect: see each) --- */

/* Publishes data (len bytes, copied) as /llmgw/<kind>/<name> bound to this
 * replica's lease; name NULL is this replica's id. A later publish of the
 * same kind and name replaces it. Written by the thread within a moment
 * (at once when etcd answers); kept and written again after any outage.
 * 0, GW_EINVAL (bad kind or name) or GW_ENOMEM. */
int cp_etcd_publish(struct cp_etcd *e, const char *kind, const char *name, const void *data,
                    size_t len) __attribute__((warn_unused_result));
/* Withdraws what this replica published as kind/name (deleted from etcd
 * within a moment). 0, GW_EINVAL or GW_ENOTFOUND. */
int cp_etcd_unpublish(struct cp_etcd *e, const char *kind, const char *name);

/* One blob of a kind, from any replica. data is NUL-terminated (not
 * counted in len). */
struct cp_etcd_blob {
    char name[CP_ETCD_ID_MAX];
    char *data;
    size_t len;
    int self;             /* published by this replica */
    int64_t mod_revision; /* etcd's, 0 for this replica's own or without etcd */
};

/* The set of kind now: the last range read from etcd, with this replica's
 * own blobs as it last published them (so they are there while etcd is
 * down, and without etcd). Sorted by name. *out (free with
 * cp_etcd_blobs_free) and *n; 0, GW_EINVAL (a kind nobody watches: call
 * cp_etcd_watch first) or GW_ENOMEM. Any thread. */
int cp_etcd_blobs(struct cp_etcd *e, const char *kind, struct cp_etcd_blob **out, size_t *n)
    __attribute__((warn_unused_result));
void cp_etcd_blobs_free(struct cp_etcd_blob *b, size_t n);

/* Reads kind from now on (a range every 250 ms) and calls cb (may be NULL:
 * collect with cp_etcd_blobs only) on the main loop with the whole set each
 * time it changes; b is valid during the call only. One watcher per kind.
 * 0, GW_EINVAL (bad kind, already watched) or GW_ENOMEM. Main loop. */
typedef void (*cp_etcd_blobs_cb)(void *arg, const char *kind, const struct cp_etcd_blob *b,
                                 size_t n);
int cp_etcd_watch(struct cp_etcd *e, const char *kind, cp_etcd_blobs_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* 1 when s is a valid replica id / blob name. */
int cp_etcd_name_ok(const char *s);

#endif
