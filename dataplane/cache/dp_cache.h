/*
 * dp_cache: the response cache's store (docs/cache.md): a byte-bounded LRU of
 * immutable blobs keyed by a 32-byte SHA-256 (dp_cache_key.h makes the key
 * and the blob), one per data-plane process, shared by its worker threads.
 *
 * Sharding: the key's first bytes pick one of `shards` (a power of two);
 * each shard has its own mutex, hash index, LRU list and an equal share of
 * max_bytes, so workers meet on a lock only when their keys share a shard.
 * No verb does I/O, allocates under a lock for longer than a table resize,
 * or calls out while holding one.
 *
 * Entries: dp_cache_put copies the blob into a new entry. Entries never
 * change; each has an atomic reference count. The index holds one
 * reference; dp_cache_get and a HIT from dp_cache_claim return another,
 * which the caller drops with dp_cache_release when done (after writing
 * it to a socket, say): a reader never holds a shard lock while it uses a
 * blob, and an entry evicted or replaced meanwhile stays valid for it. An
 * entry does not point back to the cache, so a reference may even outlive
 * dp_cache_free.
 *
 * Bytes: an entry is charged its blob length plus DP_CACHE_ENTRY_OVERHEAD
 * (its header), so many tiny entries are bounded too. A blob whose charge
 * passes max_entry_bytes (or a shard's share of max_bytes) is not stored
 * (rejected_too_large). After a store, least recently used entries leave
 * until the shard fits again: evictions, or expired when the one met had
 * already expired.
 *
 * Time: every entry has an absolute expiry (µs on the caller's clock, in
 * practice gw_now_us(), monotonic); every verb that judges freshness takes
 * `now_us`. Nothing here reads a clock, so tests drive time. An expired
 * entry is never returned; it is removed when met.
 *
 * Single flight: when a burst asks for the same missing answer, one caller
 * fetches it and the others wait for it:
 *
 *     struct dp_cache_entry *e;
 *     switch (dp_cache_claim(c, key, now, &x->waiter, &e)) {
 *     case DP_CACHE_HIT:    serve(e); dp_cache_release(e); break;
 *     case DP_CACHE_LEADER: fetch; then dp_cache_fill(...) or
 *                           dp_cache_abandon(c, key): exactly one of them;
 *     case DP_CACHE_JOINED: x->waiter.cb will be called once (or unjoin);
 *     case DP_CACHE_BYPASS: fetch without the cache's help;
 *     }
 *
 * A JOINED waiter's callback runs exactly once, ON THE LEADER'S THREAD,
 * inside dp_cache_fill or dp_cache_abandon, with no lock held: a real
 * caller posts the entry to its own event loop and returns. It receives a
 * reference it owns (release it) or NULL (the leader abandoned, or the
 * answer could not be kept in memory: fetch yourself). The callback may
 * free the waiter's memory; the cache does not touch a waiter after
 * calling it. A waiter leaves early with dp_cache_unjoin (its client went
 * away); when that says the callback is already on its way, the waiter
 * must stay valid until the callback has run.
 *
 * BYPASS is the overload valve: past max_waiters on one key, with no waiter
 * given, or when the flight is older than flight_max_us (a leader that
 * never reported must not hold callers forever), the caller fetches
 * itself; its answer may still be put (dp_cache_put).
 */
#ifndef DP_CACHE_H
#define DP_CACHE_H

#include <stddef.h>
#include <stdint.h>

/* The key: a SHA-256 digest (dp_cache_key.h). */
#define DP_CACHE_KEY_BYTES 32

struct dp_cache;
struct dp_cache_entry;

struct dp_cache_cfg {
    size_t max_bytes;       /* whole budget, split evenly over shards (default 64 MiB) */
    size_t max_entry_bytes; /* largest charge stored (default 1 MiB) */
    unsigned shards;        /* power of two, 1..256 (default 16) */
    unsigned max_waiters;   /* JOINED per key before BYPASS (default 64) */
    int64_t flight_max_us;  /* a flight older than this is not joined (default 5 min;
                               negative: no limit) */
};

/* The header an entry is charged on top of its blob's length. */
#define DP_CACHE_ENTRY_OVERHEAD 128

/* A new cache; cfg NULL or zero fields take the defaults. NULL without
 * memory or when shards is not a power of two up to 256. */
struct dp_cache *dp_cache_new(const struct dp_cache_cfg *cfg);
/* Drops the index's references (readers' references stay valid). Every
 * flight must have been filled or abandoned: waiters still joined are
 * forgotten, never called. c NULL is a no-op. */
void dp_cache_free(struct dp_cache *c);

/* A reference to the fresh entry for key (moved to the front of its LRU),
 * or NULL (a miss; an expired entry met is removed). */
struct dp_cache_entry *dp_cache_get(struct dp_cache *c, const unsigned char *key, int64_t now_us)
    __attribute__((warn_unused_result));
/* Drops a reference; the last one frees the entry. e NULL is a no-op.
 * Any thread. */
void dp_cache_release(struct dp_cache_entry *e);
/* Another reference to e (to hand it to another thread, say). */
struct dp_cache_entry *dp_cache_retain(struct dp_cache_entry *e);
/* The blob (valid while the reference is held) and its length. */
const unsigned char *dp_cache_entry_data(const struct dp_cache_entry *e, size_t *len);

/* Stores a copy of data[0..len) for key until expires_us, replacing an
 * entry of the same key. 0; GW_ELIMIT when it is too large (nothing
 * stored, nothing evicted); GW_EINVAL when expires_us <= now_us;
 * GW_ENOMEM. Opens no flight and closes none (dp_cache_fill does). */
int dp_cache_put(struct dp_cache *c, const unsigned char *key, const void *data, size_t len,
                 int64_t expires_us, int64_t now_us);

/* Removes key's entry (readers keep theirs); 1 when there was one. */
int dp_cache_remove(struct dp_cache *c, const unsigned char *key);

enum dp_cache_claim {
    DP_CACHE_HIT,    /* *hit is a reference */
    DP_CACHE_LEADER, /* a flight is open for the caller: fill or abandon it */
    DP_CACHE_JOINED, /* waiter registered */
    DP_CACHE_BYPASS, /* fetch alone */
};

struct dp_cache_waiter;
/* e: a reference the callee owns, or NULL. Runs on the leader's thread. */
typedef void (*dp_cache_waiter_cb)(struct dp_cache_waiter *w, struct dp_cache_entry *e);

/* Owned by the caller (embed it in the request); cb and arg are the
 * caller's, the rest is the cache's while joined. */
struct dp_cache_waiter {
    dp_cache_waiter_cb cb;
    void *arg;
    /* private */
    struct dp_cache_shard *shard;   /* set by claim, on the waiter's thread */
    struct dp_cache_flight *flight; /* NULL: not joined (or being called) */
    struct dp_cache_waiter *prev, *next;
};

/* See the top of this file. waiter may be NULL (then a flight in progress
 * gives BYPASS). *hit is set only for HIT. A miss opens a flight with the
 * caller as leader; an expired entry met is removed first. */
enum dp_cache_claim dp_cache_claim(struct dp_cache *c, const unsigned char *key, int64_t now_us,
                                   struct dp_cache_waiter *waiter, struct dp_cache_entry **hit)
    __attribute__((warn_unused_result));

/* The leader's answer: stored like dp_cache_put, and given to every waiter
 * of key's flight (which closes). Waiters get the answer even when it is
 * too large or too short-lived to store (they asked the same question);
 * only GW_ENOMEM gives them NULL. Returns what dp_cache_put would. Without
 * a flight it is dp_cache_put. */
int dp_cache_fill(struct dp_cache *c, const unsigned char *key, const void *data, size_t len,
                  int64_t expires_us, int64_t now_us);
/* The leader gives up (upstream failed, answer not cacheable, client
 * gone): key's flight closes, its waiters are called with NULL. No flight:
 * no-op. */
void dp_cache_abandon(struct dp_cache *c, const unsigned char *key);
/* Cancels a JOINED waiter. 0: it left, its callback will never run.
 * GW_ENOTFOUND: it was not joined, or its callback has run or is running
 * on the leader's thread (keep the waiter valid until it has). */
int dp_cache_unjoin(struct dp_cache *c, struct dp_cache_waiter *waiter);

struct dp_cache_stats {
    uint64_t hits, misses, expired, stores, evictions, rejected_too_large;
    uint64_t joined, bypassed;        /* single flight */
    uint64_t bytes, entries, flights; /* now */
};
/* Sums the shards (each read under its lock; the sum is not one instant). */
void dp_cache_stats(struct dp_cache *c, struct dp_cache_stats *out);

#endif
