/*
 * gw_pmap: the persistent hash trie (gw_pmap.h).
 *
 * A node has up to 32 slots, one per 5 bits of the hash at its depth
 * (level 12 takes the last 4); a present slot holds a value (a leaf, with
 * its full hash) or a child node. Entries are packed in slot order (the
 * bitmap says which slots are present, popcount finds the position). Below
 * the last level, values whose hashes are equal share a collision node: an
 * unordered list.
 *
 * Copy on write: a change copies the nodes on its path; a copied node holds
 * a new reference to everything it shares with the original (children and
 * values), so either map can be released first.
 */
#include "gw_pmap.h"

#include <stdlib.h>
#include <string.h>

#include "gw_hash.h"

struct ent {
    uint64_t hash; /* a leaf's full hash (unused for a child) */
    void *p;       /* a value, or a struct gw_pmap_node * when child */
    int child;
};

struct gw_pmap_node {
    int refs;        /* atomic */
    int collision;   /* a list of equal-hash leaves, no bitmap */
    uint32_t bitmap; /* present slots */
    unsigned n;      /* entries */
    struct ent e[];
};

#define BITS 5
#define SLOT(h, shift) ((unsigned)((h) >> (shift)) & 31u)

static struct gw_pmap_node *node_new(unsigned n)
{
    struct gw_pmap_node *x = malloc(sizeof(*x) + n * sizeof(struct ent));
    if (!x)
        return NULL;
    x->refs = 1;
    x->collision = 0;
    x->bitmap = 0;
    x->n = n;
    return x;
}

static void node_ref(const struct gw_pmap_node *x)
{
    __atomic_add_fetch(&((struct gw_pmap_node *)x)->refs, 1, __ATOMIC_RELAXED);
}

static void node_unref(const struct gw_pmap_node *cx, const struct gw_pmap_ops *ops)
{
    struct gw_pmap_node *x = (struct gw_pmap_node *)cx;
    if (!x || __atomic_sub_fetch(&x->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    for (unsigned i = 0; i < x->n; i++) {
        if (x->e[i].child)
            node_unref(x->e[i].p, ops);
        else
            ops->release(x->e[i].p);
    }
    free(x);
}

static void ent_ref(const struct ent *e, const struct gw_pmap_ops *ops)
{
    if (e->child)
        node_ref(e->p);
    else
        ops->retain(e->p);
}

static void ent_unref(const struct ent *e, const struct gw_pmap_ops *ops)
{
    if (e->child)
        node_unref(e->p, ops);
    else
        ops->release(e->p);
}

/* A copy of x with room for x->n + grow entries (grow is 1, 0 or -1): with
 * 1, entry at is a hole the caller fills; with -1, entry at is left out.
 * Every entry copied is referenced again. */
static struct gw_pmap_node *node_copy(const struct gw_pmap_node *x, int grow, unsigned at,
                                      const struct gw_pmap_ops *ops)
{
    unsigned n = (unsigned)((int)x->n + grow);
    struct gw_pmap_node *y = node_new(n);
    if (!y)
        return NULL;
    y->collision = x->collision;
    y->bitmap = x->bitmap;
    unsigned j = 0;
    for (unsigned i = 0; i < x->n; i++) {
        if (i == at && grow < 0)
            continue;
        if (i == at && grow > 0)
            j++;
        y->e[j] = x->e[i];
        ent_ref(&y->e[j], ops);
        j++;
    }
    return y;
}

static unsigned pos_of(uint32_t bitmap, uint32_t bit)
{
    return (unsigned)__builtin_popcount(bitmap & (bit - 1));
}

void *gw_pmap_get(const struct gw_pmap *m, uint64_t hash, const void *key,
                  const struct gw_pmap_ops *ops)
{
    const struct gw_pmap_node *x = m->root;
    unsigned shift = 0;
    while (x) {
        if (x->collision) {
            for (unsigned i = 0; i < x->n; i++)
                if (x->e[i].hash == hash && ops->eq(x->e[i].p, key))
                    return x->e[i].p;
            return NULL;
        }
        uint32_t bit = 1u << SLOT(hash, shift);
        if (!(x->bitmap & bit))
            return NULL;
        const struct ent *e = &x->e[pos_of(x->bitmap, bit)];
        if (!e->child)
            return e->hash == hash && ops->eq(e->p, key) ? e->p : NULL;
        x = e->p;
        shift += BITS;
    }
    return NULL;
}

/* A node holding two leaves whose hashes agree below shift (values
 * retained). */
static struct gw_pmap_node *pair(unsigned shift, uint64_t h1, void *v1, uint64_t h2, void *v2,
                                 const struct gw_pmap_ops *ops)
{
    struct gw_pmap_node *x;
    if (shift >= 64) {
        if (!(x = node_new(2)))
            return NULL;
        x->collision = 1;
        x->e[0] = (struct ent){h1, v1, 0};
        x->e[1] = (struct ent){h2, v2, 0};
        ops->retain(v1);
        ops->retain(v2);
        return x;
    }
    unsigned s1 = SLOT(h1, shift), s2 = SLOT(h2, shift);
    if (s1 == s2) {
        struct gw_pmap_node *c = pair(shift + BITS, h1, v1, h2, v2, ops);
        if (!c || !(x = node_new(1))) {
            node_unref(c, ops);
            return NULL;
        }
        x->bitmap = 1u << s1;
        x->e[0] = (struct ent){0, c, 1};
        return x;
    }
    if (!(x = node_new(2)))
        return NULL;
    x->bitmap = (1u << s1) | (1u << s2);
    x->e[s1 < s2 ? 0 : 1] = (struct ent){h1, v1, 0};
    x->e[s1 < s2 ? 1 : 0] = (struct ent){h2, v2, 0};
    ops->retain(v1);
    ops->retain(v2);
    return x;
}

/* x (may be NULL) with (hash, key) -> value; *added when it is new. */
static struct gw_pmap_node *set_in(const struct gw_pmap_node *x, unsigned shift, uint64_t hash,
                                   const void *key, void *value, const struct gw_pmap_ops *ops,
                                   int *added)
{
    struct gw_pmap_node *y;
    if (!x) {
        if (!(y = node_new(1)))
            return NULL;
        y->bitmap = 1u << SLOT(hash, shift);
        y->e[0] = (struct ent){hash, value, 0};
        ops->retain(value);
        *added = 1;
        return y;
    }
    if (x->collision) {
        unsigned i = 0;
        while (i < x->n && !ops->eq(x->e[i].p, key))
            i++;
        int grow = i == x->n;
        if (!(y = node_copy(x, grow, i, ops)))
            return NULL;
        if (!grow)
            ops->release(y->e[i].p);
        y->e[i] = (struct ent){hash, value, 0};
        ops->retain(value);
        *added = grow;
        return y;
    }
    uint32_t bit = 1u << SLOT(hash, shift);
    unsigned at = pos_of(x->bitmap, bit);
    if (!(x->bitmap & bit)) {
        if (!(y = node_copy(x, 1, at, ops)))
            return NULL;
        y->bitmap |= bit;
        y->e[at] = (struct ent){hash, value, 0};
        ops->retain(value);
        *added = 1;
        return y;
    }
    const struct ent *e = &x->e[at];
    struct ent repl;
    if (e->child) {
        struct gw_pmap_node *c = set_in(e->p, shift + BITS, hash, key, value, ops, added);
        if (!c)
            return NULL;
        repl = (struct ent){0, c, 1};
    } else if (e->hash == hash && ops->eq(e->p, key)) {
        ops->retain(value);
        repl = (struct ent){hash, value, 0};
    } else {
        struct gw_pmap_node *c = pair(shift + BITS, e->hash, e->p, hash, value, ops);
        if (!c)
            return NULL;
        repl = (struct ent){0, c, 1};
        *added = 1;
    }
    if (!(y = node_copy(x, 0, at, ops))) {
        ent_unref(&repl, ops);
        return NULL;
    }
    ent_unref(&y->e[at], ops);
    y->e[at] = repl;
    return y;
}

int gw_pmap_set(const struct gw_pmap *m, uint64_t hash, const void *key, void *value,
                const struct gw_pmap_ops *ops, struct gw_pmap *out)
{
    int added = 0;
    struct gw_pmap_node *r = set_in(m->root, 0, hash, key, value, ops, &added);
    if (!r)
        return -1;
    out->root = r;
    out->count = m->count + (size_t)added;
    return 0;
}

/* set_in, changing in place the nodes only this path reaches (refs 1 all
 * the way from an exclusively owned root); a shared node is copied as
 * set_in does, and below it everything is. */
static int set_owned(struct gw_pmap_node **slot, unsigned shift, uint64_t hash, const void *key,
                     void *value, const struct gw_pmap_ops *ops, int *added)
{
    struct gw_pmap_node *x = *slot;
    /* Only this owner can bring a node's count to 1; another thread may
     * be releasing an older map that shares it (seeing 2 costs a copy). */
    if (!x || __atomic_load_n(&x->refs, __ATOMIC_ACQUIRE) != 1) {
        struct gw_pmap_node *y = set_in(x, shift, hash, key, value, ops, added);
        if (!y)
            return -1;
        node_unref(x, ops);
        *slot = y;
        return 0;
    }
    unsigned at;
    uint32_t bit = 0;
    if (x->collision) {
        at = 0;
        while (at < x->n && !ops->eq(x->e[at].p, key))
            at++;
    } else {
        bit = 1u << SLOT(hash, shift);
        at = pos_of(x->bitmap, bit);
    }
    int present = x->collision ? at < x->n : (x->bitmap & bit) != 0;
    if (!present) {
        struct gw_pmap_node *y = realloc(x, sizeof(*x) + (x->n + 1) * sizeof(struct ent));
        if (!y)
            return -1;
        memmove(&y->e[at + 1], &y->e[at], (y->n - at) * sizeof(struct ent));
        y->n++;
        y->bitmap |= bit;
        y->e[at] = (struct ent){hash, value, 0};
        ops->retain(value);
        *added = 1;
        *slot = y;
        return 0;
    }
    struct ent *e = &x->e[at];
    if (e->child)
        return set_owned((struct gw_pmap_node **)&e->p, shift + BITS, hash, key, value, ops, added);
    if (x->collision || (e->hash == hash && ops->eq(e->p, key))) {
        ops->retain(value);
        ops->release(e->p);
        e->p = value;
        return 0;
    }
    struct gw_pmap_node *c = pair(shift + BITS, e->hash, e->p, hash, value, ops);
    if (!c)
        return -1;
    ops->release(e->p); /* the pair holds it now */
    *e = (struct ent){0, c, 1};
    *added = 1;
    return 0;
}

int gw_pmap_set_owned(struct gw_pmap *m, uint64_t hash, const void *key, void *value,
                      const struct gw_pmap_ops *ops)
{
    int added = 0;
    if (set_owned(&m->root, 0, hash, key, value, ops, &added))
        return -1;
    m->count += (size_t)added;
    return 0;
}

/* 0: no such entry; 1: removed, *out the new node (NULL when empty); -1: no
 * memory. */
static int del_in(const struct gw_pmap_node *x, unsigned shift, uint64_t hash, const void *key,
                  const struct gw_pmap_ops *ops, struct gw_pmap_node **out)
{
    unsigned at;
    uint32_t bit = 0;
    if (x->collision) {
        at = 0;
        while (at < x->n && !(x->e[at].hash == hash && ops->eq(x->e[at].p, key)))
            at++;
        if (at == x->n)
            return 0;
    } else {
        bit = 1u << SLOT(hash, shift);
        if (!(x->bitmap & bit))
            return 0;
        at = pos_of(x->bitmap, bit);
        const struct ent *e = &x->e[at];
        if (e->child) {
            struct gw_pmap_node *c;
            int r = del_in(e->p, shift + BITS, hash, key, ops, &c);
            if (r <= 0)
                return r;
            if (c) {
                struct gw_pmap_node *y = node_copy(x, 0, at, ops);
                if (!y) {
                    node_unref(c, ops);
                    return -1;
                }
                node_unref(y->e[at].p, ops);
                y->e[at] = (struct ent){0, c, 1};
                *out = y;
                return 1;
            }
        } else if (!(e->hash == hash && ops->eq(e->p, key))) {
            return 0;
        }
    }
    if (x->n == 1) {
        *out = NULL;
        return 1;
    }
    struct gw_pmap_node *y = node_copy(x, -1, at, ops);
    if (!y)
        return -1;
    y->bitmap &= ~bit;
    *out = y;
    return 1;
}

int gw_pmap_del(const struct gw_pmap *m, uint64_t hash, const void *key,
                const struct gw_pmap_ops *ops, struct gw_pmap *out)
{
    struct gw_pmap_node *r = NULL;
    int d = m->root ? del_in(m->root, 0, hash, key, ops, &r) : 0;
    if (d < 0)
        return -1;
    if (d == 0) {
        gw_pmap_share(m, out);
        return 0;
    }
    out->root = r;
    out->count = m->count - 1;
    return 0;
}

void gw_pmap_share(const struct gw_pmap *m, struct gw_pmap *out)
{
    if (m->root)
        node_ref(m->root);
    *out = *m;
}

void gw_pmap_release(struct gw_pmap *m, const struct gw_pmap_ops *ops)
{
    node_unref(m->root, ops);
    m->root = NULL;
    m->count = 0;
}

void gw_pmap_iter_init(const struct gw_pmap *m, struct gw_pmap_iter *it)
{
    it->depth = m->root ? 0 : -1;
    it->stack[0] = m->root;
    it->pos[0] = 0;
}

void *gw_pmap_next(struct gw_pmap_iter *it)
{
    while (it->depth >= 0) {
        const struct gw_pmap_node *x = it->stack[it->depth];
        if (it->pos[it->depth] >= x->n) {
            it->depth--;
            continue;
        }
        const struct ent *e = &x->e[it->pos[it->depth]++];
        if (!e->child)
            return e->p;
        it->depth++;
        it->stack[it->depth] = e->p;
        it->pos[it->depth] = 0;
    }
    return NULL;
}

uint64_t gw_pmap_hash_str(const char *s)
{
    return gw_mix64(gw_fnv1a(GW_FNV1A_INIT, s, strlen(s)));
}
