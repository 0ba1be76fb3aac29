/*
 * dp_cache: the sharded LRU store and its single flight (dp_cache.h).
 *
 * Per shard, under its mutex: a chained hash index of entries (grown by
 * doubling when it holds more entries than buckets), a doubly linked LRU
 * list (head: most recently used), a chained table of open flights (few:
 * one per key being fetched), the bytes charged and the counters.
 * Reference counts are atomic and are the only thing touched without the
 * lock: an entry's links belong to its shard, its blob to nobody (it never
 * changes).
 */
#include "dp_cache.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

struct dp_cache_entry {
    atomic_uint refs;
    int indexed; /* in its shard's index and LRU (shard lock) */
    struct dp_cache_entry *hnext, *lprev, *lnext;
    int64_t expires_us;
    size_t len;
    unsigned char key[DP_CACHE_KEY_BYTES];
    unsigned char data[];
};

struct dp_cache_flight {
    struct dp_cache_flight *hnext;
    struct dp_cache_waiter *waiters; /* head of a doubly linked list */
    unsigned nwaiters;
    int64_t started_us;
    unsigned char key[DP_CACHE_KEY_BYTES];
};

#define FLIGHT_BUCKETS 64

struct dp_cache_shard {
    pthread_mutex_t lock;
    struct dp_cache_entry **buckets;
    size_t nbuckets; /* power of two */
    struct dp_cache_entry *lru_head, *lru_tail;
    struct dp_cache_flight *flights[FLIGHT_BUCKETS];
    size_t bytes, budget;
    uint64_t entries, nflights;
    uint64_t hits, misses, expired, stores, evictions, rejected, joined, bypassed;
};

struct dp_cache {
    struct dp_cache_cfg cfg;
    unsigned mask;
    struct dp_cache_shard *shards;
};

#ifdef DP_CACHE_TEST_HOOKS
/* Entries alive in the process (tests: every reference dropped). */
static atomic_long cache_entries_alive;
#define ALIVE_ADD(n) atomic_fetch_add(&cache_entries_alive, (n))
#else
#define ALIVE_ADD(n) ((void)0)
#endif

static uint64_t key_hash(const unsigned char *key)
{
    uint64_t h;
    memcpy(&h, key, sizeof(h)); /* a SHA-256: already uniform */
    return h;
}

static size_t charge(size_t len)
{
    return len + DP_CACHE_ENTRY_OVERHEAD;
}

static struct dp_cache_shard *shard_of(struct dp_cache *c, const unsigned char *key)
{
    return &c->shards[key_hash(key) & c->mask];
}

/* The bucket bits: above the shard bits, so one shard's keys spread. */
static size_t bucket_of(const struct dp_cache_shard *s, const unsigned char *key)
{
    return (size_t)(key_hash(key) >> 8) & (s->nbuckets - 1);
}

struct dp_cache *dp_cache_new(const struct dp_cache_cfg *cfg)
{
    struct dp_cache_cfg d = {64u << 20, 1u << 20, 16, 64, 300 * 1000000LL};
    if (cfg) {
        if (cfg->max_bytes)
            d.max_bytes = cfg->max_bytes;
        if (cfg->max_entry_bytes)
            d.max_entry_bytes = cfg->max_entry_bytes;
        if (cfg->shards)
            d.shards = cfg->shards;
        if (cfg->max_waiters)
            d.max_waiters = cfg->max_waiters;
        if (cfg->flight_max_us)
            d.flight_max_us = cfg->flight_max_us;
    }
    if (d.shards > 256 || (d.shards & (d.shards - 1)) != 0)
        return NULL;
    struct dp_cache *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->cfg = d;
    c->mask = d.shards - 1;
    c->shards = calloc(d.shards, sizeof(*c->shards));
    if (!c->shards) {
        free(c);
        return NULL;
    }
    for (unsigned i = 0; i < d.shards; i++) {
        struct dp_cache_shard *s = &c->shards[i];
        s->nbuckets = 64;
        s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
        s->budget = d.max_bytes / d.shards;
        if (!s->buckets || pthread_mutex_init(&s->lock, NULL) != 0) {
            free(s->buckets);
            while (i-- > 0) {
                pthread_mutex_destroy(&c->shards[i].lock);
                free(c->shards[i].buckets);
            }
            free(c->shards);
            free(c);
            return NULL;
        }
    }
    return c;
}

struct dp_cache_entry *dp_cache_retain(struct dp_cache_entry *e)
{
    atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
    return e;
}

void dp_cache_release(struct dp_cache_entry *e)
{
    if (!e)
        return;
    if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) == 1) {
        ALIVE_ADD(-1);
        free(e);
    }
}

const unsigned char *dp_cache_entry_data(const struct dp_cache_entry *e, size_t *len)
{
    *len = e->len;
    return e->data;
}

/* Index and LRU (shard lock held). */

static struct dp_cache_entry **find_slot(struct dp_cache_shard *s, const unsigned char *key)
{
    struct dp_cache_entry **p = &s->buckets[bucket_of(s, key)];
    while (*p && memcmp((*p)->key, key, DP_CACHE_KEY_BYTES) != 0)
        p = &(*p)->hnext;
    return p;
}

static void lru_unlink(struct dp_cache_shard *s, struct dp_cache_entry *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        s->lru_head = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    else
        s->lru_tail = e->lprev;
    e->lprev = e->lnext = NULL;
}

static void lru_push_front(struct dp_cache_shard *s, struct dp_cache_entry *e)
{
    e->lprev = NULL;
    e->lnext = s->lru_head;
    if (s->lru_head)
        s->lru_head->lprev = e;
    else
        s->lru_tail = e;
    s->lru_head = e;
}

/* Takes e out of the index (its slot given) and drops the index's
 * reference. The caller must not hold the last reference in a way that
 * needs the lock: release only frees memory. */
static void unindex(struct dp_cache_shard *s, struct dp_cache_entry **slot)
{
    struct dp_cache_entry *e = *slot;
    *slot = e->hnext;
    e->hnext = NULL;
    lru_unlink(s, e);
    e->indexed = 0;
    s->bytes -= charge(e->len);
    s->entries--;
    dp_cache_release(e);
}

static void unindex_entry(struct dp_cache_shard *s, struct dp_cache_entry *e)
{
    unindex(s, find_slot(s, e->key));
}

/* Doubles the index when it holds more entries than buckets; a failed
 * allocation leaves longer chains, nothing worse. */
static void maybe_grow(struct dp_cache_shard *s)
{
    if (s->entries <= s->nbuckets || s->nbuckets >= ((size_t)1 << 24))
        return;
    size_t n = s->nbuckets * 2;
    struct dp_cache_entry **nb = calloc(n, sizeof(*nb));
    if (!nb)
        return;
    for (size_t i = 0; i < s->nbuckets; i++) {
        struct dp_cache_entry *e = s->buckets[i], *next;
        for (; e; e = next) {
            next = e->hnext;
            size_t b = (size_t)(key_hash(e->key) >> 8) & (n - 1);
            e->hnext = nb[b];
            nb[b] = e;
        }
    }
    free(s->buckets);
    s->buckets = nb;
    s->nbuckets = n;
}

/* Inserts e (its reference passes to the index), replacing key's entry,
 * then evicts from the tail until the shard fits. The caller checked that
 * e alone fits. */
static void insert(struct dp_cache_shard *s, struct dp_cache_entry *e, int64_t now_us)
{
    struct dp_cache_entry **slot = find_slot(s, e->key);
    if (*slot)
        unindex(s, slot);
    e->hnext = s->buckets[bucket_of(s, e->key)];
    s->buckets[bucket_of(s, e->key)] = e;
    lru_push_front(s, e);
    e->indexed = 1;
    s->bytes += charge(e->len);
    s->entries++;
    s->stores++;
    while (s->bytes > s->budget && s->lru_tail && s->lru_tail != e) {
        struct dp_cache_entry *victim = s->lru_tail;
        if (victim->expires_us <= now_us)
            s->expired++;
        else
            s->evictions++;
        unindex_entry(s, victim);
    }
    maybe_grow(s);
}

/* A fresh entry for key, or NULL (an expired one is removed). */
static struct dp_cache_entry *lookup(struct dp_cache_shard *s, const unsigned char *key,
                                     int64_t now_us)
{
    struct dp_cache_entry **slot = find_slot(s, key);
    if (!*slot)
        return NULL;
    if ((*slot)->expires_us <= now_us) {
        s->expired++;
        unindex(s, slot);
        return NULL;
    }
    struct dp_cache_entry *e = *slot;
    lru_unlink(s, e);
    lru_push_front(s, e);
    return e;
}

struct dp_cache_entry *dp_cache_get(struct dp_cache *c, const unsigned char *key, int64_t now_us)
{
    struct dp_cache_shard *s = shard_of(c, key);
    pthread_mutex_lock(&s->lock);
    struct dp_cache_entry *e = lookup(s, key, now_us);
    if (e) {
        s->hits++;
        dp_cache_retain(e);
    } else {
        s->misses++;
    }
    pthread_mutex_unlock(&s->lock);
    return e;
}

static struct dp_cache_entry *entry_new(const unsigned char *key, const void *data, size_t len,
                                        int64_t expires_us)
{
    struct dp_cache_entry *e = malloc(sizeof(*e) + len);
    if (!e)
        return NULL;
    atomic_init(&e->refs, 1);
    e->indexed = 0;
    e->hnext = e->lprev = e->lnext = NULL;
    e->expires_us = expires_us;
    e->len = len;
    memcpy(e->key, key, DP_CACHE_KEY_BYTES);
    if (len)
        memcpy(e->data, data, len);
    ALIVE_ADD(1);
    return e;
}

/* Whether a blob of len may be stored at all. */
static int storable(const struct dp_cache *c, const struct dp_cache_shard *s, size_t len)
{
    return len <= c->cfg.max_entry_bytes && charge(len) <= c->cfg.max_entry_bytes &&
           charge(len) <= s->budget;
}

int dp_cache_put(struct dp_cache *c, const unsigned char *key, const void *data, size_t len,
                 int64_t expires_us, int64_t now_us)
{
    struct dp_cache_shard *s = shard_of(c, key);
    if (expires_us <= now_us)
        return GW_EINVAL;
    if (!storable(c, s, len)) {
        pthread_mutex_lock(&s->lock);
        s->rejected++;
        pthread_mutex_unlock(&s->lock);
        return GW_ELIMIT;
    }
    struct dp_cache_entry *e = entry_new(key, data, len, expires_us);
    if (!e)
        return GW_ENOMEM;
    pthread_mutex_lock(&s->lock);
    insert(s, e, now_us);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

int dp_cache_remove(struct dp_cache *c, const unsigned char *key)
{
    struct dp_cache_shard *s = shard_of(c, key);
    pthread_mutex_lock(&s->lock);
    struct dp_cache_entry **slot = find_slot(s, key);
    int had = *slot != NULL;
    if (had)
        unindex(s, slot);
    pthread_mutex_unlock(&s->lock);
    return had;
}

/* Single flight (shard lock held for the table). */

static struct dp_cache_flight **flight_slot(struct dp_cache_shard *s, const unsigned char *key)
{
    struct dp_cache_flight **p = &s->flights[(key_hash(key) >> 8) & (FLIGHT_BUCKETS - 1)];
    while (*p && memcmp((*p)->key, key, DP_CACHE_KEY_BYTES) != 0)
        p = &(*p)->hnext;
    return p;
}

enum dp_cache_claim dp_cache_claim(struct dp_cache *c, const unsigned char *key, int64_t now_us,
                                   struct dp_cache_waiter *waiter, struct dp_cache_entry **hit)
{
    struct dp_cache_shard *s = shard_of(c, key);
    enum dp_cache_claim r;
    pthread_mutex_lock(&s->lock);
    struct dp_cache_entry *e = lookup(s, key, now_us);
    if (e) {
        s->hits++;
        *hit = dp_cache_retain(e);
        pthread_mutex_unlock(&s->lock);
        return DP_CACHE_HIT;
    }
    s->misses++;
    struct dp_cache_flight **fs = flight_slot(s, key);
    struct dp_cache_flight *f = *fs;
    if (!f) {
        f = calloc(1, sizeof(*f));
        if (!f) {
            r = DP_CACHE_BYPASS;
            s->bypassed++;
        } else {
            f->started_us = now_us;
            memcpy(f->key, key, DP_CACHE_KEY_BYTES);
            *fs = f;
            s->nflights++;
            r = DP_CACHE_LEADER;
        }
    } else if (!waiter || f->nwaiters >= c->cfg.max_waiters ||
               (c->cfg.flight_max_us >= 0 && now_us - f->started_us > c->cfg.flight_max_us)) {
        r = DP_CACHE_BYPASS;
        s->bypassed++;
    } else {
        waiter->shard = s;
        waiter->flight = f;
        waiter->prev = NULL;
        waiter->next = f->waiters;
        if (f->waiters)
            f->waiters->prev = waiter;
        f->waiters = waiter;
        f->nwaiters++;
        s->joined++;
        r = DP_CACHE_JOINED;
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}

/* Closes key's flight (shard lock held) and returns its waiters, each
 * marked as no longer joined, so unjoin refuses them from now on. */
static struct dp_cache_waiter *close_flight(struct dp_cache_shard *s, const unsigned char *key)
{
    struct dp_cache_flight **fs = flight_slot(s, key);
    struct dp_cache_flight *f = *fs;
    if (!f)
        return NULL;
    *fs = f->hnext;
    s->nflights--;
    struct dp_cache_waiter *w = f->waiters;
    for (struct dp_cache_waiter *i = w; i; i = i->next)
        i->flight = NULL;
    free(f);
    return w;
}

/* Calls each waiter once, no lock held. Reads next before the call: the
 * callback may free its waiter. */
static void wake(struct dp_cache_waiter *w, struct dp_cache_entry *e)
{
    while (w) {
        struct dp_cache_waiter *next = w->next;
        w->prev = w->next = NULL;
        w->cb(w, e ? dp_cache_retain(e) : NULL);
        w = next;
    }
}

int dp_cache_fill(struct dp_cache *c, const unsigned char *key, const void *data, size_t len,
                  int64_t expires_us, int64_t now_us)
{
    struct dp_cache_shard *s = shard_of(c, key);
    int rc = 0;
    struct dp_cache_entry *e = entry_new(key, data, len, expires_us);
    pthread_mutex_lock(&s->lock);
    struct dp_cache_waiter *w = close_flight(s, key);
    if (!e) {
        rc = GW_ENOMEM;
    } else if (expires_us <= now_us) {
        rc = GW_EINVAL;
    } else if (!storable(c, s, len)) {
        s->rejected++;
        rc = GW_ELIMIT;
    } else {
        insert(s, dp_cache_retain(e), now_us);
    }
    pthread_mutex_unlock(&s->lock);
    wake(w, e);
    dp_cache_release(e);
    return rc;
}

void dp_cache_abandon(struct dp_cache *c, const unsigned char *key)
{
    struct dp_cache_shard *s = shard_of(c, key);
    pthread_mutex_lock(&s->lock);
    struct dp_cache_waiter *w = close_flight(s, key);
    pthread_mutex_unlock(&s->lock);
    wake(w, NULL);
}

int dp_cache_unjoin(struct dp_cache *c, struct dp_cache_waiter *waiter)
{
    (void)c;
    /* waiter->shard was set by the claim on this thread; waiter->flight is
     * read and cleared only under that shard's lock. */
    struct dp_cache_shard *s = waiter->shard;
    if (!s)
        return GW_ENOTFOUND;
    pthread_mutex_lock(&s->lock);
    struct dp_cache_flight *f = waiter->flight;
    if (!f) {
        pthread_mutex_unlock(&s->lock);
        return GW_ENOTFOUND;
    }
    if (waiter->prev)
        waiter->prev->next = waiter->next;
    else
        f->waiters = waiter->next;
    if (waiter->next)
        waiter->next->prev = waiter->prev;
    waiter->prev = waiter->next = NULL;
    waiter->flight = NULL;
    f->nwaiters--;
    pthread_mutex_unlock(&s->lock);
    return 0;
}

void dp_cache_stats(struct dp_cache *c, struct dp_cache_stats *out)
{
    memset(out, 0, sizeof(*out));
    for (unsigned i = 0; i <= c->mask; i++) {
        struct dp_cache_shard *s = &c->shards[i];
        pthread_mutex_lock(&s->lock);
        out->hits += s->hits;
        out->misses += s->misses;
        out->expired += s->expired;
        out->stores += s->stores;
        out->evictions += s->evictions;
        out->rejected_too_large += s->rejected;
        out->joined += s->joined;
        out->bypassed += s->bypassed;
        out->bytes += s->bytes;
        out->entries += s->entries;
        out->flights += s->nflights;
        pthread_mutex_unlock(&s->lock);
    }
}

void dp_cache_free(struct dp_cache *c)
{
    if (!c)
        return;
    for (unsigned i = 0; i <= c->mask; i++) {
        struct dp_cache_shard *s = &c->shards[i];
        while (s->lru_head)
            unindex_entry(s, s->lru_head);
        for (size_t b = 0; b < FLIGHT_BUCKETS; b++) {
            while (s->flights[b]) {
                struct dp_cache_flight *f = s->flights[b];
                s->flights[b] = f->hnext;
                for (struct dp_cache_waiter *w = f->waiters; w; w = w->next)
                    w->flight = NULL;
                free(f);
            }
        }
        free(s->buckets);
        pthread_mutex_destroy(&s->lock);
    }
    free(c->shards);
    free(c);
}
