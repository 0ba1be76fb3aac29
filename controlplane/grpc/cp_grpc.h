/*
 * cp_grpc: the control plane's gRPC server (service llmgw.v1.Control in
 * proto/llmgw/v1/control.proto), built on gw_grpc.
 *
 * Watch: every open Watch receives the whole current document at once (or
 * as soon as the first one is published), then each newer version. A Watch
 * that takes deltas (WatchRequest.accepts_delta) and was last sent exactly
 * a delta's base gets only the delta; any other (new, an older data plane,
 * behind, or after a full build) gets the whole document. Each delta is
 * packed once, and the whole document once per version (asked of the
 * document source only when a Watch needs it): every Watch is sent the same
 * shared bytes, so a publish costs O(1) per Watch. A call has at most one
 * message in flight; when it completes the Watch gets what it is missing:
 * the next of the recent deltas (a ring of DELTA_RING) from its version, or
 * else the whole document, so a slow replica skips versions rather than
 * queueing them.
 *
 * Report: each data plane streams ReportMessages. Acks record which version
 * each replica serves (cp_grpc_replicas, for the admin API's snapshot
 * resource); every message is also handed to the owner's on_report.
 *
 * Threading: every function runs on the thread of the event base given to
 * cp_grpc_new, which also runs every callback. The module does not know
 * Postgres or the daemon: the daemon publishes what its builder produced.
 */
#ifndef CP_GRPC_H
#define CP_GRPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;
struct Llmgw__V1__ReportMessage;
struct Llmgw__V1__LeaseGrant;

struct cp_grpc_opts {
    const char *listen; /* "HOST:PORT"; port 0 picks one (cp_grpc_port) */
    /* Plaintext is served only when insecure is set; otherwise TLS with a
     * PEM certificate chain and key, and, with client_ca_file, client
     * certificates are required and verified against it. */
    int insecure;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_client_ca_file;
    /* When set, every Watch and Report call must carry "authorization:
     * Bearer <fleet_token>" or is ended UNAUTHENTICATED. Under mutual TLS a
     * replica id is also bound to the certificate identity that first used
     * it (cp_replicas.h): a call naming it under another is ended
     * PERMISSION_DENIED. */
    const char *fleet_token;
    /* Called for each Ack after the replica table is updated (may be NULL). */
    void (*on_ack)(void *arg, const char *replica_id, int64_t version);
    /* Called when a replica's last open Watch ends (may be NULL), also as
     * cp_grpc_free cancels them. */
    void (*on_disconnect)(void *arg, const char *replica_id);
    /* Called for every Report message, acks included (may be NULL): ledger
     * rows, lease requests and outcome summaries go to the daemon this way.
     * stream_id names the stream for cp_grpc_report_reply; replica_id is
     * the name the stream's first message gave ("" when the replica table
     * was full). Nonzero: the message was not taken, and the stream is
     * cancelled (its sender sends what was not acknowledged again). */
    int (*on_report)(void *arg, uint64_t stream_id, const char *replica_id,
                     const struct Llmgw__V1__ReportMessage *m);
    void *arg;
    /* Told to every data plane in each ReportReply: the rows it may send in
     * one LedgerBatch (on_report takes them); 0: one LedgerRow a message. */
    uint32_t ledger_batch_max;
};

struct cp_grpc;

/* Starts serving on base. NULL on failure, with a message in err (an
 * address that does not bind, a missing certificate, neither TLS nor
 * insecure configured). */
struct cp_grpc *cp_grpc_new(struct event_base *base, const struct cp_grpc_opts *o, char *err,
                            size_t errlen);
/* The bound port. */
int cp_grpc_port(const struct cp_grpc *s);

/* Where whole documents come from: document(arg, &version, &len) returns
 * the newest good build's document (malloc'd; it holds credentials: the
 * server wipes and frees it), its version and length, or NULL (none yet, no
 * memory). Called on the loop, at most once per publish, and only when some
 * Watch needs a whole document. Set once, before the first
 * cp_grpc_publish_version (the daemon passes cp_snapshot_document). */
void cp_grpc_set_document(struct cp_grpc *s,
                          char *(*document)(void *arg, int64_t *version, size_t *len), void *arg);

/* Publishes version: the fields of the builder's struct cp_snapshot_pub.
 * base_version > 0 with delta (the delta JSON, delta_len bytes, copied):
 * the change from base_version, sent to every Watch that takes deltas and
 * was last sent base_version; the rest get the whole document. base_version
 * 0 (delta ignored): a full build, every Watch gets the whole document.
 * Needs the document source (cp_grpc_set_document). 0, or GW_ENOMEM
 * (nothing published). */
int cp_grpc_publish_version(struct cp_grpc *s, int64_t version, int64_t built_at_ms,
                            int64_t base_version, const void *delta, size_t delta_len)
    __attribute__((warn_unused_result));

/* What the Watches were sent since start: messages carrying a delta, and a
 * whole document; and the whole documents packed (at most one per publish
 * whatever the number of Watches). */
struct cp_grpc_stats {
    uint64_t deltas_sent, documents_sent, documents_packed;
};
void cp_grpc_stats(const struct cp_grpc *s, struct cp_grpc_stats *out);

/* The newest published version; 0 before the first publish. */
int64_t cp_grpc_version(const struct cp_grpc *s);

/* {"version":N,"replicas":[{"replica_id","acked_version","acked_at_ms",
 * "connected","watches","last_seen_ms","cert_identity"?}]}: each replica seen since start,
 * connected while it has a Watch open. New reference, or NULL (no memory). */
json_t *cp_grpc_replicas(const struct cp_grpc *s);

/* Stops accepting, cancels every open call, drains the completion queue
 * and frees everything. NULL is a no-op. */
/* Replies on a Report stream: every ledger row it carried with seq <=
 * acked_through is stored (0: no ack news), and lease grants. Coalesced
 * with what is not sent yet. GW_ECLOSED when the stream is gone (the data
 * plane sends its rows again on the next one). Main loop only. */
int cp_grpc_report_reply(struct cp_grpc *s, uint64_t stream_id, uint64_t acked_through,
                         const struct Llmgw__V1__LeaseGrant *const *grants, size_t ngrants);

/* Sends a FleetView (view: its encoding, len bytes, copied) on a Report
 * stream, in a ReportReply of its own or with the acks and grants waiting;
 * a view not yet sent is replaced (the newest wins). GW_ECLOSED when the
 * stream is gone. Main loop only. */
int cp_grpc_report_view(struct cp_grpc *s, uint64_t stream_id, const void *view, size_t len);

void cp_grpc_free(struct cp_grpc *s);

#endif
