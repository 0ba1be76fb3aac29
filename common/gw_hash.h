/*
 * gw_hash: a small non-cryptographic hash for fingerprints and
 * deterministic choices (a route's content fingerprint, a weighted draw by
 * request id, an affinity rotation, the sticky table's buckets). Never for
 * anything an attacker must not be able to predict or collide.
 */
#ifndef GW_HASH_H
#define GW_HASH_H

#include <stddef.h>
#include <stdint.h>

#define GW_FNV1A_INIT 0xcbf29ce484222325ULL

/* FNV-1a (64-bit) over n bytes, continuing from h (GW_FNV1A_INIT to start). */
static inline uint64_t gw_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++) {
        h ^= c[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* A 64-bit finalizer (splitmix64's): FNV-1a's low bits depend only on the
 * inputs' low bits, so anything reduced modulo a small number is mixed
 * first. */
static inline uint64_t gw_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

#endif
