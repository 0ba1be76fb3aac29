/*
 * Arena allocator for per-request memory. Small allocations come from the
 * current block; one larger than a block gets a block of its own. Cleanups
 * are a singly linked list run newest first, so a resource registered after
 * another (a curl handle after its header list) is released before it.
 */
#include "gw_pool.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

struct block {
    struct block *next;
    size_t size;
    size_t used;
    _Alignas(16) unsigned char data[];
};

struct cleanup {
    struct cleanup *next;
    gw_pool_cleanup_cb fn;
    void *data;
};

struct gw_pool {
    struct block *head;
    struct cleanup *cleanups;
    size_t block_size;
};

static struct block *block_new(size_t size)
{
    struct block *b = malloc(sizeof(*b) + size);
    if (!b)
        return NULL;
    b->next = NULL;
    b->size = size;
    b->used = 0;
    return b;
}

struct gw_pool *gw_pool_new(size_t block_size)
{
    struct gw_pool *p = malloc(sizeof(*p));
    if (!p)
        return NULL;
    p->block_size = block_size ? block_size : 4096;
    p->cleanups = NULL;
    p->head = block_new(p->block_size);
    if (!p->head) {
        free(p);
        return NULL;
    }
    return p;
}

void gw_pool_free(struct gw_pool *pool)
{
    if (!pool)
        return;
    struct cleanup *c = pool->cleanups;
    while (c) {
        struct cleanup *next = c->next;
        c->fn(c->data);
        c = next;
    }
    struct block *b = pool->head;
    while (b) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    free(pool);
}

void *gw_pool_alloc(struct gw_pool *pool, size_t size)
{
    size_t need = (size + 15) & ~(size_t)15;
    if (need < size)
        return NULL;
    struct block *b = pool->head;
    if (b->size - b->used >= need) {
        void *p = b->data + b->used;
        b->used += need;
        return p;
    }
    if (need > pool->block_size / 4) {
        /* A big allocation gets its own block behind the current one, so
         * the current block keeps serving small allocations. */
        struct block *nb = block_new(need);
        if (!nb)
            return NULL;
        nb->used = need;
        nb->next = b->next;
        b->next = nb;
        return nb->data;
    }
    struct block *nb = block_new(pool->block_size);
    if (!nb)
        return NULL;
    nb->next = b;
    pool->head = nb;
    nb->used = need;
    return nb->data;
}

void *gw_pool_calloc(struct gw_pool *pool, size_t size)
{
    void *p = gw_pool_alloc(pool, size);
    if (p)
        memset(p, 0, size);
    return p;
}

char *gw_pool_strndup(struct gw_pool *pool, const char *s, size_t len)
{
    if (len == SIZE_MAX)
        return NULL;
    char *d = gw_pool_alloc(pool, len + 1);
    if (!d)
        return NULL;
    memcpy(d, s, len);
    d[len] = '\0';
    return d;
}

char *gw_pool_strdup(struct gw_pool *pool, const char *s)
{
    return gw_pool_strndup(pool, s, strlen(s));
}

char *gw_pool_printf(struct gw_pool *pool, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *d = gw_pool_alloc(pool, (size_t)n + 1);
    if (!d)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(d, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return d;
}

int gw_pool_cleanup(struct gw_pool *pool, gw_pool_cleanup_cb fn, void *data)
{
    struct cleanup *c = gw_pool_alloc(pool, sizeof(*c));
    if (!c)
        return GW_ENOMEM;
    c->fn = fn;
    c->data = data;
    c->next = pool->cleanups;
    pool->cleanups = c;
    return GW_OK;
}
