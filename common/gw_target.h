/*
 * gw_target: a target, the (provider, model) pair that the breakers, the
 * outcome counts, the limits' learned sizes and both fleet views are keyed
 * by; its one hash, equality and order. Header-only.
 *
 * A table that keeps a target copies both names into one block, "provider
 * NUL model NUL" (gw_target_key_size, gw_target_key_copy), and keeps the
 * hash beside it. The hash lives in memory only: no table sends it or
 * stores it, so it may change with this file.
 */
#ifndef GW_TARGET_H
#define GW_TARGET_H

#include <stdint.h>
#include <string.h>

#include "gw_hash.h"

struct gw_target_key {
    const char *provider;
    const char *model;
};

/* FNV-1a over provider, its NUL (so "ab"+"c" and "a"+"bc" differ) and
 * model, mixed (tables reduce it modulo a power of two). */
static inline uint64_t gw_target_hash(const char *provider, const char *model)
{
    uint64_t h = gw_fnv1a(GW_FNV1A_INIT, provider, strlen(provider) + 1);
    return gw_mix64(gw_fnv1a(h, model, strlen(model)));
}

/* Whether k is (provider, model). */
static inline int gw_target_is(const struct gw_target_key *k, const char *provider,
                               const char *model)
{
    return strcmp(k->provider, provider) == 0 && strcmp(k->model, model) == 0;
}

/* Order by provider, then model (strcmp's): <0, 0 or >0. */
static inline int gw_target_cmp(const struct gw_target_key *a, const struct gw_target_key *b)
{
    int c = strcmp(a->provider, b->provider);
    return c ? c : strcmp(a->model, b->model);
}

/* The bytes a copy of (provider, model) takes: both names and their NULs. */
static inline size_t gw_target_key_size(const char *provider, const char *model)
{
    return strlen(provider) + strlen(model) + 2;
}

/* Copies provider NUL model NUL into block (gw_target_key_size bytes) and
 * points *k at the copies. */
static inline void gw_target_key_copy(struct gw_target_key *k, char *block, const char *provider,
                                      const char *model)
{
    size_t pl = strlen(provider) + 1;
    memcpy(block, provider, pl);
    memcpy(block + pl, model, strlen(model) + 1);
    k->provider = block;
    k->model = block + pl;
}

#endif
