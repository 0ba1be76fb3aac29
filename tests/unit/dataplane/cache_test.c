/* Tests for the response cache's store (dataplane/cache/dp_cache.c): LRU order,
 * the byte bound, TTL on an injected clock, replace, the per-entry cap,
 * references that outlive eviction and the cache itself, single flight
 * (claim / join / fill / abandon / unjoin, the bypass valve), and a
 * multi-threaded stress whose end state is checked against the shards'
 * books. The .c is included to reach the shards and the live-entry count. */
#define DP_CACHE_TEST_HOOKS 1
#include "dp_cache.c"

#include <CUnit/CUnit.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_time.h"

static void mkkey(unsigned char key[DP_CACHE_KEY_BYTES], unsigned id)
{
    /* Spread over shards and buckets the way a digest would. */
    uint64_t x = id * 0x9E3779B97F4A7C15ull + 0x12345;
    for (int i = 0; i < DP_CACHE_KEY_BYTES; i += 8) {
        x ^= x >> 31;
        x *= 0xBF58476D1CE4E5B9ull;
        memcpy(key + i, &x, 8);
    }
}

/* Every book of every shard against a walk of its index and LRU: bytes and
 * entries match the live entries, the index and the list hold the same
 * entries, each shard fits its budget, and (refs_one) nobody but the index
 * holds a reference. The caller is the only thread. */
static void check_books(struct dp_cache *c, int refs_one)
{
    for (unsigned i = 0; i <= c->mask; i++) {
        struct dp_cache_shard *s = &c->shards[i];
        size_t bytes = 0, n = 0, indexed = 0;
        struct dp_cache_entry *prev = NULL;
        for (struct dp_cache_entry *e = s->lru_head; e; prev = e, e = e->lnext) {
            CU_ASSERT_PTR_EQUAL(e->lprev, prev);
            CU_ASSERT_EQUAL(e->indexed, 1);
            CU_ASSERT_PTR_EQUAL(*find_slot(s, e->key), e);
            if (refs_one)
                CU_ASSERT_EQUAL(atomic_load(&e->refs), 1);
            bytes += charge(e->len);
            n++;
        }
        CU_ASSERT_PTR_EQUAL(s->lru_tail, prev);
        for (size_t b = 0; b < s->nbuckets; b++)
            for (struct dp_cache_entry *e = s->buckets[b]; e; e = e->hnext)
                indexed++;
        CU_ASSERT_EQUAL(bytes, s->bytes);
        CU_ASSERT_EQUAL(n, s->entries);
        CU_ASSERT_EQUAL(indexed, n);
        CU_ASSERT(s->bytes <= s->budget);
    }
}

static int get_is(struct dp_cache *c, unsigned id, int64_t now, const char *want)
{
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, id);
    struct dp_cache_entry *e = dp_cache_get(c, k, now);
    if (!e)
        return want == NULL;
    size_t len;
    const unsigned char *d = dp_cache_entry_data(e, &len);
    int ok = want && len == strlen(want) && memcmp(d, want, len) == 0;
    dp_cache_release(e);
    return ok;
}

static int put_s(struct dp_cache *c, unsigned id, const char *v, int64_t exp, int64_t now)
{
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, id);
    return dp_cache_put(c, k, v, strlen(v), exp, now);
}

#define FAR 1000000000LL

static void test_lru_order(void)
{
    /* One shard that holds exactly three one-byte entries. */
    struct dp_cache_cfg cfg = {.max_bytes = 3 * charge(1), .shards = 1};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(put_s(c, 1, "a", FAR, 0), 0);
    CU_ASSERT_EQUAL(put_s(c, 2, "b", FAR, 0), 0);
    CU_ASSERT_EQUAL(put_s(c, 3, "c", FAR, 0), 0);
    CU_ASSERT(get_is(c, 1, 1, "a")); /* 1 is now the most recent: 2 is oldest */
    CU_ASSERT_EQUAL(put_s(c, 4, "d", FAR, 1), 0);
    CU_ASSERT(get_is(c, 2, 2, NULL));
    CU_ASSERT(get_is(c, 1, 2, "a"));
    CU_ASSERT(get_is(c, 3, 2, "c"));
    CU_ASSERT(get_is(c, 4, 2, "d"));
    /* Now 1 is the oldest touched before 3 and 4. */
    CU_ASSERT_EQUAL(put_s(c, 5, "e", FAR, 3), 0);
    CU_ASSERT(get_is(c, 1, 3, NULL));
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.evictions, 2);
    CU_ASSERT_EQUAL(st.entries, 3);
    CU_ASSERT_EQUAL(st.bytes, 3 * charge(1));
    CU_ASSERT_EQUAL(st.stores, 5);
    CU_ASSERT_EQUAL(st.hits, 4);
    CU_ASSERT_EQUAL(st.misses, 2);
    check_books(c, 1);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static void test_byte_bound_many(void)
{
    struct dp_cache_cfg cfg = {.max_bytes = 256 * 1024, .shards = 16};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static unsigned char blob[3000];
    memset(blob, 'x', sizeof(blob));
    unsigned seed = 7;
    unsigned char k[DP_CACHE_KEY_BYTES];
    struct dp_cache_stats st;
    for (unsigned i = 0; i < 20000; i++) {
        mkkey(k, i);
        size_t len = rand_r(&seed) % sizeof(blob);
        CU_ASSERT_EQUAL(dp_cache_put(c, k, blob, len, FAR, i), 0);
        if (i % 997 == 0) {
            dp_cache_stats(c, &st);
            CU_ASSERT(st.bytes <= cfg.max_bytes);
        }
    }
    dp_cache_stats(c, &st);
    CU_ASSERT(st.bytes <= cfg.max_bytes);
    CU_ASSERT(st.bytes > cfg.max_bytes / 2); /* shards are kept nearly full */
    CU_ASSERT_EQUAL(st.stores, 20000);
    CU_ASSERT_EQUAL(st.evictions + st.entries, 20000);
    /* The newest entries are the ones kept (each shard evicts its oldest). */
    mkkey(k, 19999);
    struct dp_cache_entry *e = dp_cache_get(c, k, 20000);
    CU_ASSERT_PTR_NOT_NULL(e);
    dp_cache_release(e);
    mkkey(k, 0);
    CU_ASSERT_PTR_NULL(dp_cache_get(c, k, 20000));
    check_books(c, 1);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static void test_ttl(void)
{
    struct dp_cache_cfg cfg = {.max_bytes = 2 * charge(1), .shards = 1};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(put_s(c, 1, "a", 100, 0), 0);
    CU_ASSERT(get_is(c, 1, 99, "a"));
    CU_ASSERT(get_is(c, 1, 100, NULL)); /* expiry is exclusive */
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.expired, 1);
    CU_ASSERT_EQUAL(st.entries, 0);
    CU_ASSERT_EQUAL(st.bytes, 0);
    /* Already expired: refused. */
    CU_ASSERT_EQUAL(put_s(c, 2, "b", 100, 100), GW_EINVAL);
    /* An expired entry met by eviction counts as expired, not evicted. */
    CU_ASSERT_EQUAL(put_s(c, 3, "c", 200, 100), 0);
    CU_ASSERT_EQUAL(put_s(c, 4, "d", FAR, 100), 0);
    CU_ASSERT_EQUAL(put_s(c, 5, "e", FAR, 300), 0); /* 3 (expired at 200) leaves */
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.expired, 2);
    CU_ASSERT_EQUAL(st.evictions, 0);
    CU_ASSERT(get_is(c, 4, 300, "d"));
    CU_ASSERT(get_is(c, 5, 300, "e"));
    check_books(c, 1);
    dp_cache_free(c);
}

static void test_replace(void)
{
    struct dp_cache *c = dp_cache_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 9);
    CU_ASSERT_EQUAL(dp_cache_put(c, k, "one", 3, FAR, 0), 0);
    struct dp_cache_entry *old = dp_cache_get(c, k, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(old);
    CU_ASSERT_EQUAL(dp_cache_put(c, k, "second", 6, FAR, 1), 0);
    CU_ASSERT(get_is(c, 9, 2, "second"));
    size_t len;
    const unsigned char *d = dp_cache_entry_data(old, &len);
    CU_ASSERT_EQUAL(len, 3);
    CU_ASSERT_EQUAL(memcmp(d, "one", 3), 0); /* the reader's copy is intact */
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.entries, 1);
    CU_ASSERT_EQUAL(st.bytes, charge(6));
    CU_ASSERT_EQUAL(dp_cache_remove(c, k), 1);
    CU_ASSERT_EQUAL(dp_cache_remove(c, k), 0);
    CU_ASSERT(get_is(c, 9, 2, NULL));
    dp_cache_release(old);
    check_books(c, 1);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static void test_too_large(void)
{
    struct dp_cache_cfg cfg = {.max_bytes = 1 << 20, .max_entry_bytes = 1000, .shards = 4};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    static unsigned char blob[2000];
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 1);
    size_t fit = 1000 - DP_CACHE_ENTRY_OVERHEAD;
    CU_ASSERT_EQUAL(dp_cache_put(c, k, blob, fit, FAR, 0), 0);
    mkkey(k, 2);
    CU_ASSERT_EQUAL(dp_cache_put(c, k, blob, fit + 1, FAR, 0), GW_ELIMIT);
    CU_ASSERT_PTR_NULL(dp_cache_get(c, k, 0));
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.rejected_too_large, 1);
    CU_ASSERT_EQUAL(st.entries, 1);
    CU_ASSERT_EQUAL(st.evictions, 0);
    dp_cache_free(c);
    /* A shard's share of the budget caps an entry too. */
    struct dp_cache_cfg small = {.max_bytes = 4 * 300, .max_entry_bytes = 1000, .shards = 4};
    c = dp_cache_new(&small);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(dp_cache_put(c, k, blob, 300 - DP_CACHE_ENTRY_OVERHEAD + 1, FAR, 0), GW_ELIMIT);
    CU_ASSERT_EQUAL(dp_cache_put(c, k, blob, 300 - DP_CACHE_ENTRY_OVERHEAD, FAR, 0), 0);
    dp_cache_free(c);
    /* Bad shard counts. */
    struct dp_cache_cfg bad = {.shards = 3};
    CU_ASSERT_PTR_NULL(dp_cache_new(&bad));
    bad.shards = 512;
    CU_ASSERT_PTR_NULL(dp_cache_new(&bad));
}

static void test_refs_outlive_eviction(void)
{
    struct dp_cache_cfg cfg = {.max_bytes = 2 * charge(5), .shards = 1};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(put_s(c, 1, "first", FAR, 0), 0);
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 1);
    struct dp_cache_entry *e = dp_cache_get(c, k, 0);
    struct dp_cache_entry *e2 = dp_cache_retain(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(put_s(c, 2, "secnd", FAR, 0), 0);
    CU_ASSERT_EQUAL(put_s(c, 3, "third", FAR, 0), 0); /* evicts 1 */
    CU_ASSERT(get_is(c, 1, 0, NULL));
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 3);
    dp_cache_free(c); /* the entries of 2 and 3 go; 1 is still held twice */
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 1);
    size_t len;
    const unsigned char *d = dp_cache_entry_data(e, &len);
    CU_ASSERT_EQUAL(len, 5);
    CU_ASSERT_EQUAL(memcmp(d, "first", 5), 0);
    dp_cache_release(e);
    CU_ASSERT_EQUAL(memcmp(dp_cache_entry_data(e2, &len), "first", 5), 0);
    dp_cache_release(e2);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

/* Single flight. */

struct rec {
    struct dp_cache_waiter w;
    int calls;
    char got[32]; /* "" for NULL */
};

static void rec_cb(struct dp_cache_waiter *w, struct dp_cache_entry *e)
{
    struct rec *r = (struct rec *)w;
    r->calls++;
    r->got[0] = 0;
    if (e) {
        size_t len;
        const unsigned char *d = dp_cache_entry_data(e, &len);
        snprintf(r->got, sizeof(r->got), "%.*s", (int)len, (const char *)d);
        dp_cache_release(e);
    }
}

static void test_claim_join_fill(void)
{
    struct dp_cache *c = dp_cache_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 5);
    struct rec a = {.w = {.cb = rec_cb}}, b = {.w = {.cb = rec_cb}};
    struct dp_cache_entry *hit = NULL;
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, &a.w, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 1, &a.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 1, &b.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 1, NULL, &hit), DP_CACHE_BYPASS);
    CU_ASSERT_PTR_NULL(hit);
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.flights, 1);
    CU_ASSERT_EQUAL(st.joined, 2);
    CU_ASSERT_EQUAL(st.bypassed, 1);
    CU_ASSERT_EQUAL(a.calls + b.calls, 0);
    CU_ASSERT_EQUAL(dp_cache_fill(c, k, "answer", 6, FAR, 2), 0);
    CU_ASSERT_EQUAL(a.calls, 1);
    CU_ASSERT_EQUAL(b.calls, 1);
    CU_ASSERT_STRING_EQUAL(a.got, "answer");
    CU_ASSERT_STRING_EQUAL(b.got, "answer");
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 3, &a.w, &hit), DP_CACHE_HIT);
    CU_ASSERT_PTR_NOT_NULL_FATAL(hit);
    dp_cache_release(hit);
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &a.w), GW_ENOTFOUND); /* already called */
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.flights, 0);
    CU_ASSERT_EQUAL(st.entries, 1);
    /* A second fill with no flight is a put; abandon with none, a no-op. */
    CU_ASSERT_EQUAL(dp_cache_fill(c, k, "again", 5, FAR, 4), 0);
    dp_cache_abandon(c, k);
    CU_ASSERT(get_is(c, 5, 5, "again"));
    CU_ASSERT_EQUAL(a.calls + b.calls, 2);
    /* Expired: the claimer becomes the leader again. */
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, FAR, &a.w, &hit), DP_CACHE_LEADER);
    dp_cache_abandon(c, k);
    check_books(c, 1);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static void test_abandon_and_unjoin(void)
{
    struct dp_cache *c = dp_cache_new(NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 6);
    struct rec a = {.w = {.cb = rec_cb}}, b = {.w = {.cb = rec_cb}}, d = {.w = {.cb = rec_cb}};
    struct dp_cache_entry *hit = NULL;
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &a.w), GW_ENOTFOUND); /* never joined */
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, NULL, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, &a.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, &b.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, &d.w, &hit), DP_CACHE_JOINED);
    /* The middle one, then the head, leave: the list stays whole. */
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &b.w), 0);
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &d.w), 0);
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &d.w), GW_ENOTFOUND);
    dp_cache_abandon(c, k);
    CU_ASSERT_EQUAL(a.calls, 1);
    CU_ASSERT_STRING_EQUAL(a.got, "");
    CU_ASSERT_EQUAL(b.calls + d.calls, 0);
    CU_ASSERT(get_is(c, 6, 0, NULL));
    /* Abandoned: the next claimer leads. A too-large answer still reaches
     * the waiters, and is not stored. */
    struct dp_cache_cfg cfg = {.max_entry_bytes = 200};
    struct dp_cache *s = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static char big[300];
    memset(big, 'z', sizeof(big) - 1);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, NULL, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, &b.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_fill(s, k, big, 20, FAR, 0), 0);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, NULL, &hit), DP_CACHE_HIT);
    dp_cache_release(hit);
    CU_ASSERT_EQUAL(dp_cache_remove(s, k), 1);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, NULL, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, &d.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_fill(s, k, big, 299, FAR, 0), GW_ELIMIT);
    CU_ASSERT_EQUAL(d.calls, 1);
    CU_ASSERT_EQUAL(strlen(d.got), 31); /* got the (truncated to 31) answer */
    CU_ASSERT(get_is(s, 6, 0, NULL));
    /* And a short-lived one. */
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, NULL, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(s, k, 0, &d.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_fill(s, k, "x", 1, 10, 10), GW_EINVAL);
    CU_ASSERT_EQUAL(d.calls, 2);
    CU_ASSERT_STRING_EQUAL(d.got, "x");
    struct dp_cache_stats st;
    dp_cache_stats(s, &st);
    CU_ASSERT_EQUAL(st.flights, 0);
    CU_ASSERT_EQUAL(st.entries, 0);
    CU_ASSERT_EQUAL(st.rejected_too_large, 1);
    dp_cache_free(s);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static void free_cb(struct dp_cache_waiter *w, struct dp_cache_entry *e)
{
    int *called = w->arg;
    (*called)++;
    dp_cache_release(e);
    free(w); /* the cache must not touch w afterwards (ASan) */
}

static void test_bypass_valves(void)
{
    struct dp_cache_cfg cfg = {.max_waiters = 2, .flight_max_us = 1000};
    struct dp_cache *c = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    unsigned char k[DP_CACHE_KEY_BYTES];
    mkkey(k, 7);
    struct dp_cache_entry *hit = NULL;
    int called = 0;
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, NULL, &hit), DP_CACHE_LEADER);
    for (int i = 0; i < 3; i++) {
        struct dp_cache_waiter *w = calloc(1, sizeof(*w));
        w->cb = free_cb;
        w->arg = &called;
        enum dp_cache_claim r = dp_cache_claim(c, k, 10, w, &hit);
        CU_ASSERT_EQUAL(r, i < 2 ? DP_CACHE_JOINED : DP_CACHE_BYPASS);
        if (r != DP_CACHE_JOINED)
            free(w);
    }
    /* A flight past flight_max_us is not joined. */
    struct rec late = {.w = {.cb = rec_cb}};
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &late.w), GW_ENOTFOUND);
    mkkey(k, 8);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 0, NULL, &hit), DP_CACHE_LEADER);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 1000, &late.w, &hit), DP_CACHE_JOINED);
    CU_ASSERT_EQUAL(dp_cache_unjoin(c, &late.w), 0);
    CU_ASSERT_EQUAL(dp_cache_claim(c, k, 1001, &late.w, &hit), DP_CACHE_BYPASS);
    dp_cache_abandon(c, k);
    CU_ASSERT_EQUAL(late.calls, 0);
    mkkey(k, 7);
    CU_ASSERT_EQUAL(dp_cache_fill(c, k, "v", 1, FAR, 20), 0);
    CU_ASSERT_EQUAL(called, 2);
    struct dp_cache_stats st;
    dp_cache_stats(c, &st);
    CU_ASSERT_EQUAL(st.bypassed, 2);
    CU_ASSERT_EQUAL(st.joined, 3);
    dp_cache_free(c);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

/* Stress: threads doing random get / put / claim (leading, joining,
 * unjoining) over a small key space in a cache small enough to evict all
 * the time. Every blob read is checked against its key; at the end the
 * books must match the entries and no reference may be left. */

#define ST_THREADS 4
#define ST_OPS 40000
#define ST_KEYS 256

static struct dp_cache *st_cache;
static atomic_long st_bad, st_waits, st_callbacks;

/* A blob for key id: its length and every byte say which key it is. */
static size_t st_blob(unsigned id, unsigned salt, unsigned char *buf)
{
    size_t len = 1 + (id * 37 + salt) % 900;
    memset(buf, (int)(id & 0xff), len);
    return len;
}

static void st_check(unsigned id, struct dp_cache_entry *e)
{
    size_t len;
    const unsigned char *d = dp_cache_entry_data(e, &len);
    if (len < 1 || len > 900 || d[0] != (id & 0xff) || d[len - 1] != (id & 0xff))
        atomic_fetch_add(&st_bad, 1);
}

struct st_waiter {
    struct dp_cache_waiter w;
    unsigned id;
    atomic_int done;
};

static void st_cb(struct dp_cache_waiter *w, struct dp_cache_entry *e)
{
    struct st_waiter *sw = (struct st_waiter *)w;
    if (e) {
        st_check(sw->id, e);
        dp_cache_release(e);
    }
    atomic_fetch_add(&st_callbacks, 1);
    atomic_store(&sw->done, 1); /* last touch: the owner may free it now */
}

static void *st_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned char k[DP_CACHE_KEY_BYTES];
    unsigned char buf[1024];
    struct st_waiter *sw = malloc(sizeof(*sw));
    for (int i = 0; i < ST_OPS; i++) {
        unsigned id = rand_r(&seed) % ST_KEYS;
        int64_t now = i;
        mkkey(k, id);
        unsigned op = rand_r(&seed) % 10;
        if (op < 4) {
            struct dp_cache_entry *e = dp_cache_get(st_cache, k, now);
            if (e) {
                st_check(id, e);
                dp_cache_release(e);
            }
        } else if (op < 6) {
            size_t len = st_blob(id, (unsigned)i, buf);
            (void)dp_cache_put(st_cache, k, buf, len, now + 1 + rand_r(&seed) % 5000, now);
        } else if (op == 6) {
            (void)dp_cache_remove(st_cache, k);
        } else {
            struct dp_cache_entry *hit = NULL;
            memset(sw, 0, sizeof(*sw));
            sw->w.cb = st_cb;
            sw->id = id;
            switch (dp_cache_claim(st_cache, k, now, &sw->w, &hit)) {
            case DP_CACHE_HIT:
                st_check(id, hit);
                dp_cache_release(hit);
                break;
            case DP_CACHE_LEADER:
                /* A leader takes a moment (so others join) but never
                 * waits for anyone. */
                for (unsigned y = rand_r(&seed) % 4; y > 0; y--)
                    sched_yield();
                if (rand_r(&seed) % 4 == 0) {
                    dp_cache_abandon(st_cache, k);
                } else {
                    size_t len = st_blob(id, (unsigned)i, buf);
                    (void)dp_cache_fill(st_cache, k, buf, len, now + 1 + rand_r(&seed) % 5000, now);
                }
                break;
            case DP_CACHE_JOINED:
                atomic_fetch_add(&st_waits, 1);
                if (rand_r(&seed) % 2 == 0 && dp_cache_unjoin(st_cache, &sw->w) == 0)
                    break;
                while (!atomic_load(&sw->done))
                    sched_yield();
                break;
            case DP_CACHE_BYPASS:
                break;
            }
        }
    }
    free(sw);
    return NULL;
}

static void test_stress(void)
{
    struct dp_cache_cfg cfg = {.max_bytes = 128 * 1024, .shards = 8, .max_waiters = 1};
    st_cache = dp_cache_new(&cfg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st_cache);
    pthread_t t[ST_THREADS];
    int64_t t0 = gw_now_us();
    for (uintptr_t i = 0; i < ST_THREADS; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&t[i], NULL, st_thread, (void *)(i + 1)), 0);
    for (int i = 0; i < ST_THREADS; i++)
        pthread_join(t[i], NULL);
    int64_t dt = gw_now_us() - t0;
    struct dp_cache_stats st;
    dp_cache_stats(st_cache, &st);
    printf("\n    stress: %d threads x %d ops in %.1f ms (%.2f Mops/s); hits %llu misses %llu "
           "stores %llu evictions %llu expired %llu joined %llu (%ld waited, %ld called) "
           "bypassed %llu entries %llu bytes %llu\n    ",
           ST_THREADS, ST_OPS, dt / 1000.0, (double)ST_THREADS * ST_OPS / (dt ? dt : 1),
           (unsigned long long)st.hits, (unsigned long long)st.misses,
           (unsigned long long)st.stores, (unsigned long long)st.evictions,
           (unsigned long long)st.expired, (unsigned long long)st.joined, atomic_load(&st_waits),
           atomic_load(&st_callbacks), (unsigned long long)st.bypassed,
           (unsigned long long)st.entries, (unsigned long long)st.bytes);
    CU_ASSERT_EQUAL(atomic_load(&st_bad), 0);
    CU_ASSERT_EQUAL(st.flights, 0);
    CU_ASSERT(st.bytes <= cfg.max_bytes);
    CU_ASSERT(st.evictions > 0);
    CU_ASSERT(st.hits > 0);
    CU_ASSERT(st.joined > 0);
    CU_ASSERT_EQUAL(st.joined, (uint64_t)atomic_load(&st_waits));
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), (long)st.entries);
    check_books(st_cache, 1);
    dp_cache_free(st_cache);
    CU_ASSERT_EQUAL(atomic_load(&cache_entries_alive), 0);
}

static CU_TestInfo tests[] = {
    {"lru order", test_lru_order},
    {"byte bound with many entries", test_byte_bound_many},
    {"ttl on an injected clock", test_ttl},
    {"replace keeps the reader's copy", test_replace},
    {"too large is refused", test_too_large},
    {"references outlive eviction and the cache", test_refs_outlive_eviction},
    {"claim, join, fill", test_claim_join_fill},
    {"abandon, unjoin, unstorable fills", test_abandon_and_unjoin},
    {"bypass valves", test_bypass_valves},
    {"threads: random get/put/claim, then the books", test_stress},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
