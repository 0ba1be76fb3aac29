/*
 * gw_pool: a per-request arena. Allocations are carved from blocks and freed
 * all at once by gw_pool_free(); non-memory resources (curl handles, jansson
 * values) register a cleanup that runs then, newest first.
 */
#ifndef GW_POOL_H
#define GW_POOL_H

#include <stddef.h>

struct gw_pool;
typedef void (*gw_pool_cleanup_cb)(void *data);

/* NULL on allocation failure. */
struct gw_pool *gw_pool_new(size_t block_size);
/* Runs the cleanups (newest first), then frees every block. NULL is a no-op. */
void gw_pool_free(struct gw_pool *pool);
/* 16-byte aligned memory owned by the pool; NULL on allocation failure. */
void *gw_pool_alloc(struct gw_pool *pool, size_t size);
/* Zeroed allocation. */
void *gw_pool_calloc(struct gw_pool *pool, size_t size);
/* Copies len bytes and a NUL. */
char *gw_pool_strndup(struct gw_pool *pool, const char *s, size_t len);
char *gw_pool_strdup(struct gw_pool *pool, const char *s);
/* printf into pool memory; NULL on failure. */
char *gw_pool_printf(struct gw_pool *pool, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Registers fn(data) to run at gw_pool_free(). Returns 0 or GW_ENOMEM. */
int gw_pool_cleanup(struct gw_pool *pool, gw_pool_cleanup_cb fn, void *data)
    __attribute__((warn_unused_result));

#endif
