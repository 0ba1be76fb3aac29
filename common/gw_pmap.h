/*
 * gw_pmap: a persistent (copy-on-write) hash map, a hash array mapped trie
 * over 64-bit hashes with 32-way nodes.
 *
 * A map is a value (a root and a count). Setting or deleting makes a new map
 * that shares every node the change does not touch with the old one: the
 * cost is the path to the entry, about log32(n) nodes, never the size of the
 * map. Neither map changes afterwards, and each can be read by any number of
 * threads; both must be released (gw_pmap_release) by their owners.
 *
 * Values are opaque pointers with a reference count the caller keeps: the
 * map retains a value when a node first holds it and releases it when the
 * last node holding it goes (ops). Entries are found by their hash and an
 * equality test against a caller key, so equal hashes are allowed (they
 * share a collision node at the bottom of the trie).
 *
 * Node references are atomic: two maps sharing nodes may be released on
 * different threads.
 */
#ifndef GW_PMAP_H
#define GW_PMAP_H

#include <stddef.h>
#include <stdint.h>

struct gw_pmap_node;

struct gw_pmap_ops {
    void (*retain)(void *value);
    void (*release)(void *value);
    /* Nonzero when value is the entry for key (a name, say). */
    int (*eq)(const void *value, const void *key);
};

struct gw_pmap {
    struct gw_pmap_node *root; /* NULL: empty */
    size_t count;
};

/* The value for (hash, key), or NULL. */
void *gw_pmap_get(const struct gw_pmap *m, uint64_t hash, const void *key,
                  const struct gw_pmap_ops *ops);

/* *out becomes m with (hash, key) mapped to value (added or replacing);
 * m is unchanged. 0, or -1 without memory (then *out is untouched). */
int gw_pmap_set(const struct gw_pmap *m, uint64_t hash, const void *key, void *value,
                const struct gw_pmap_ops *ops, struct gw_pmap *out);

/* Like gw_pmap_set, into m itself, for an owner that holds m alone (a map
 * being built): the nodes that no other map shares are changed in place,
 * the shared ones copied. Another map sharing m's nodes is unchanged.
 * 0, or -1 without memory (m is then still a valid map, the entry perhaps
 * not set). */
int gw_pmap_set_owned(struct gw_pmap *m, uint64_t hash, const void *key, void *value,
                      const struct gw_pmap_ops *ops);

/* *out becomes m without (hash, key) (m itself, shared, when it has no such
 * entry); m is unchanged. 0, or -1 without memory. */
int gw_pmap_del(const struct gw_pmap *m, uint64_t hash, const void *key,
                const struct gw_pmap_ops *ops, struct gw_pmap *out);

/* Another owner of the same map (m's nodes shared): *out = *m, retained. */
void gw_pmap_share(const struct gw_pmap *m, struct gw_pmap *out);

/* Drops this owner's hold on m's nodes (values released with the last
 * node holding them) and empties m. */
void gw_pmap_release(struct gw_pmap *m, const struct gw_pmap_ops *ops);

/* Iteration in hash order (not insertion order). The map must outlive the
 * iteration; nothing is allocated. */
struct gw_pmap_iter {
    const struct gw_pmap_node *stack[14];
    unsigned pos[14];
    int depth;
};
void gw_pmap_iter_init(const struct gw_pmap *m, struct gw_pmap_iter *it);
/* The next value, or NULL at the end. */
void *gw_pmap_next(struct gw_pmap_iter *it);

/* FNV-1a of a NUL-terminated name, mixed: the hash names are stored by. */
uint64_t gw_pmap_hash_str(const char *s);

#endif
