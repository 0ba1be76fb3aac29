/* The gRPC server's table of data-plane replicas (cp_grpc.c): what each
 * acked and when it was last seen. Ids are chosen by clients, so the table
 * is bounded: when full, the entry without open streams that was seen
 * longest ago makes room; when every entry has an open stream, a new
 * replica is not tracked. */
#ifndef CP_REPLICAS_H
#define CP_REPLICAS_H

#include <stddef.h>
#include <stdint.h>

#define CP_REPLICA_ID_MAX 128
#define CP_REPLICAS_CAP 1000

struct cp_replica {
    struct cp_replica *next;
    char id[CP_REPLICA_ID_MAX + 1];
    int64_t acked_version;
    int64_t acked_at_ms;
    int64_t seen_ms;
    int watches; /* open Watch calls */
    int streams; /* open calls (Watch or Report) holding it: not evictable */
    /* Under mutual TLS, the client certificate's identity (its first
     * subject alternative name, else its common name) that first claimed
     * this name: a call under another certificate cannot use it while the
     * entry lives. "" when the transport has no client certificates. */
    char identity[CP_REPLICA_ID_MAX + 1];
};

struct cp_replicas {
    struct cp_replica *head;
    size_t n, cap;
    int full_logged; /* the "table full" warning went out (reset on success) */
};

void cp_replicas_init(struct cp_replicas *t, size_t cap);

/* The entry named id (cut to CP_REPLICA_ID_MAX), created if new, seen_ms set
 * to now_ms. NULL when out of memory or when the table is full and every
 * entry has an open stream (logged once per such episode). */
struct cp_replica *cp_replicas_get(struct cp_replicas *t, const char *id, int64_t now_ms);

/* The name of a replica that gave no id: "peer:" and its address without the
 * port (a reconnect from another port is the same replica). */
void cp_replicas_peer_name(const char *peer, char *out, size_t outlen);

void cp_replicas_clear(struct cp_replicas *t);

#endif
