/*
 * cp_snapshot: the snapshot builder. It turns the configuration in
 * PostgreSQL into the data plane's snapshot document (docs/dataplane.md,
 * "Snapshot file", with resolved credentials inline as pushed documents
 * carry them) and hands every good build to the daemon, which publishes it
 * over gRPC (cp_grpc.h).
 *
 * The first build (and the one after a reconnect) reads every table in one
 * REPEATABLE READ READ ONLY transaction on the builder's own connection, so
 * a build sees one committed state and its "version" is that state's
 * config_state.version. It becomes the builder's model of the document
 * (cp_snapshot_model.h). After that a build is incremental: the audit rows
 * of the versions since the model's (every admin write has one,
 * cp_resource_record) name what changed, and only those rows are read
 * again, in one such transaction; the change is validated by applying it
 * to the data plane's snapshot of the model (dp_snapshot_apply) and handed
 * out as a delta (docs/dataplane.md, "Control plane": Deltas). A version without an
 * audit row (a direct SQL write), a write the builder does not know (the
 * master key's rotation) and a reconnect make a full build instead; so
 * does the slow poll every CHECK_POLLS polls (or 5 minutes), which also
 * compares the model with the full result and logs an error (and counts
 * llmgw_cp_snapshot_builds_total{result="mismatch"}) if they differ.
 * Credentials are
 * resolved after the transaction: a built-in ref opens its sealed row with
 * the master key (AAD = the row's name), a vault:/awssm: ref goes to its
 * backend (cp_secret_resolve; values are cached for a TTL, failures for
 * 30 s, and one build spends at most 20 s fetching). A ref that does not
 * resolve keeps the last value it resolved to in this process (held in the
 * builder's memory, wiped when replaced or no longer referenced) and is
 * listed in the status with the reason "using the last resolved value:
 * <cause>"; a ref that never resolved leaves its provider without
 * "credential" (the data plane skips it as no_credential) and is listed,
 * with the reason. The
 * document is validated by the data plane's own validator
 * (dp_snapshot_build_ex, DP_SNAPSHOT_PUSHED; a delta by dp_snapshot_apply)
 * before it is handed out; a build that fails keeps the last good snapshot
 * and records why.
 *
 * Triggers: LISTEN llmgw_config (every admin write notifies in its
 * transaction, through any replica), coalesced (one build at a time; the
 * notifications that arrive meanwhile make one more build, and only when
 * they carry a version newer than the last good build); a slow poll of
 * config_state.version (also retrying a build that failed or left refs
 * unresolved, and re-reading the keys that expired when an API key
 * expires).
 * A lost connection is re-established with backoff.
 *
 * Threading: the builder runs on a thread of its own (database and secret
 * backend calls are synchronous). The publish callback runs on the event
 * base given to cp_snapshot_new (the daemon's loop), never on the builder's
 * thread. The daemon must have called evthread_use_pthreads() and
 * curl_global_init() before cp_snapshot_new.
 */
#ifndef CP_SNAPSHOT_H
#define CP_SNAPSHOT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "cp_secret_ref.h"
#include "cp_secrets.h"
#include "gw_trace.h"

struct event_base;
struct cp_trace;

/* One good build, as the daemon's loop gets it. */
struct cp_snapshot_pub {
    int64_t version, built_at_ms;
    int64_t base_version; /* 0: a full build; every watcher needs the whole document */
    const char *delta;    /* the delta JSON (serialized), or NULL when base_version is 0 */
    size_t delta_len;
    /* traced: the span of the build that made this version
     * (llmgw.snapshot.build, cp_trace.h), whose children its pushes are. */
    int traced;
    struct gw_trace_ctx trace;
};

struct cp_snapshot_opts {
    const char *conninfo; /* copied; never logged */
    long poll_ms;         /* 0: 30000 */
    /* Opens built-in secrets (copied, wiped on free). NULL: built-in refs do
     * not resolve ("LLMGW_MASTER_KEY is not set"). */
    const struct cp_master_key *master_key;
    /* Vault and AWS Secrets Manager (copied; its strings are borrowed and
     * must outlive the builder). NULL: from the environment. */
    const struct cp_secret_backend_config *backends;
    long secret_cache_ttl_ms; /* external values are reused this long; 0: 300000, <0: never */
    /* A full build checks the incremental model every this many polls (and
     * every 5 minutes); 0: 10; <0: never (a test of the incremental path). */
    long check_polls;
    /* Called on base for each good build whose document differs from the
     * last one handed out: a delta from base_version, or (base_version 0)
     * a whole new document (cp_snapshot_document). A build the loop did not
     * take before the next one is merged into it: one delta from the
     * earlier build's base (the later build's resources winning), or a
     * whole document when either was whole.
     * The delta holds credentials: it is valid during the call only, and
     * wiped after it. The builder runs on meanwhile: cp_snapshot_document
     * may return a newer build than p's, and then a later delta whose
     * version is not past that document's is already in it. */
    void (*publish)(void *arg, const struct cp_snapshot_pub *p);
    void *arg;
    /* Tracing (not owned; NULL: off): each build that makes a publish
     * writes its span (cp_trace_build), under the admin writes it took
     * in. */
    struct cp_trace *trace;
};

struct cp_snapshot;

/* Starts the builder thread (which connects, LISTENs and builds at once).
 * NULL with a message in err when the thread or its events cannot be made;
 * an unreachable database is not an error here: the builder retries. */
struct cp_snapshot *cp_snapshot_new(struct event_base *base, const struct cp_snapshot_opts *o,
                                    char *err, size_t errlen);

/* The whole document of the newest good build, serialized (malloc'd; it
 * holds credentials: the caller wipes and frees it), its version in
 * *version and length in *len. NULL before the first good build or without
 * memory. Thread-safe; costs O(configuration) and is called only when a
 * watcher needs a whole document. */
char *cp_snapshot_document(struct cp_snapshot *b, int64_t *version, size_t *len);

/* {"version","config_version","built_at_ms","last_error","last_error_at_ms","unresolved":
 * [{"provider","credential_ref","reason"}],"skipped_routes":[names],
 * "builds","failed_builds","database":"ok"|"down"}: the last good build
 * (version 0 before the first), the configuration version it reflects
 * (config_version: writes that changed nothing the data planes see do not
 * make a new version), and the last attempt's error (null when it
 * succeeded). Thread-safe. New reference, or NULL (no memory). */
json_t *cp_snapshot_status(struct cp_snapshot *b);

/* Stops the builder thread (a build in progress finishes first), frees
 * everything and wipes what held credentials. NULL is a no-op. */
/* The data plane's snapshot of the last good build, a new reference
 * (dp_snapshot_unref it), or NULL before the first. Any thread. */
struct dp_snapshot;
struct dp_snapshot *cp_snapshot_acquire(struct cp_snapshot *b);

void cp_snapshot_free(struct cp_snapshot *b);

#endif
