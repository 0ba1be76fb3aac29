/*
 * gw_rand: the one fast pseudo-random source, xorshift64* (Vigna) over a
 * state seeded from the OS's random bytes. For jitter, request ids,
 * sampling and draws that must not line up across threads or replicas;
 * never for anything an attacker must not predict (gw_random_bytes is for
 * that). A state belongs to one thread: each loop keeps its own.
 */
#ifndef GW_RAND_H
#define GW_RAND_H

#include <stdint.h>

#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_time.h"

/* Seeds *s (never zero: xorshift's one fixed point). From gw_random_bytes;
 * should that fail, from the clock, which is still unlikely to repeat. */
static inline void gw_rand_seed(uint64_t *s)
{
    if (gw_random_bytes(s, sizeof(*s)) != GW_OK || *s == 0)
        *s = (uint64_t)gw_now_us() * 0x9e3779b97f4a7c15ULL | 1;
}

/* The next 64 bits from *s (nonzero). */
static inline uint64_t gw_rand_next(uint64_t *s)
{
    uint64_t v = *s;
    v ^= v >> 12;
    v ^= v << 25;
    v ^= v >> 27;
    *s = v;
    return v * 0x2545F4914F6CDD1DULL;
}

/* A number in [0, n) (n > 0); the modulo's bias is below n / 2^64. */
static inline uint64_t gw_rand_below(uint64_t *s, uint64_t n)
{
    return gw_rand_next(s) % n;
}

/* A double in [0, 1): 53 random bits. */
static inline double gw_rand_unit(uint64_t *s)
{
    return (double)(gw_rand_next(s) >> 11) * (1.0 / 9007199254740992.0);
}

#endif
