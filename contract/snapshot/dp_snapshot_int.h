/*
 * dp_snapshot's private part: what the element builders (dp_snapshot.c),
 * the whole build (dp_snapshot_build.c), a delta's apply
 * (dp_snapshot_apply.c), the field readers (dp_snapshot_fields.c) and the
 * lookups (dp_snapshot_lookup.c) share. Not for other modules.
 */
#ifndef DP_SNAPSHOT_INT_H
#define DP_SNAPSHOT_INT_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "dp_snapshot.h"

/* One resource of a snapshot, counted: the maps of every snapshot holding
 * it, and the routes pointing into it (a provider), keep it alive. */
enum dps_kind {
    DPS_PROVIDER,
    DPS_ROUTE,
    DPS_KEY,
    DPS_TEAM,
    DPS_PROJECT,
    DPS_LIMIT,
    DPS_CATALOG,
    DPS_SCOPE,       /* an index entry: the limits of one scope */
    DPS_GUARD_RULES, /* the guard's rules, compiled (replaced whole) */
};

struct dps_item {
    int refs; /* atomic */
    enum dps_kind kind;
    const char *name; /* the name (keys and limits: the id); "" for the catalog */
    char *src;        /* the resource's JSON as given, compact: what render writes */
    size_t srclen;
    struct gw_pool *pool;   /* owns the item and all it points to but deps */
    struct dps_item **deps; /* the items it points into (a route's providers) */
    size_t ndeps;
    union {
        struct dp_provider provider;
        struct dp_route route;
        struct dp_key key;
        struct dp_team team;
        struct dp_project project;
        struct dp_limit limit;
        struct {
            struct dp_catalog_entry *entries;
            size_t n;
            /* By model: open addressing over the model id's hash, entry
             * index + 1 per slot (0: empty), mask + 1 slots, at least twice
             * n; a model's entries (one per provider, and one for any)
             * share its probe sequence. */
            uint32_t *index;
            size_t mask;
        } catalog;
        struct {
            struct dp_guard_rules *rules; /* freed with the item's pool */
        } guard;
        struct {
            /* The limits of one scope ("k:<key id>", "t:<team>",
             * "p:<project>"), each a limit item held in deps. */
            const struct dp_limit **limits;
            size_t n;
        } scope;
    } u;
};

/* The item an object (&item->u.route, say) belongs to. */
#define DPS_ITEM(obj) ((struct dps_item *)(void *)((char *)(obj)-offsetof(struct dps_item, u)))

/* DP_SNAPSHOT present bits: the optional arrays the document had. */
enum {
    DPS_HAS_KEYS = 1,
    DPS_HAS_CATALOG = 2,
    DPS_HAS_TEAMS = 4,
    DPS_HAS_PROJECTS = 8,
    DPS_HAS_LIMITS = 16,
};

/* A name that need not end in NUL: the maps' lookup key. */
struct dps_name {
    const char *s;
    size_t n;
};

extern const struct gw_pmap_ops dps_name_ops;     /* providers, routes, keys, teams, ... */
extern const struct gw_pmap_ops dps_selector_ops; /* a route under its name and aliases */
extern const struct gw_pmap_ops dps_hash_ops;     /* keys by hash (key: 64 hex digits) */

uint64_t dps_hash_name(const char *s, size_t n);
/* The item of collection m named name, or NULL. */
struct dps_item *dps_get(const struct gw_pmap *m, const char *name, size_t n);
/* m with item under its name (ops: which map), or removed: 0, -1 without
 * memory. m's old root is released: the caller owns m alone. */
int dps_put(struct gw_pmap *m, uint64_t hash, const void *key, struct dps_item *it,
            const struct gw_pmap_ops *ops);
int dps_del(struct gw_pmap *m, uint64_t hash, const void *key, const struct gw_pmap_ops *ops);

/* A new item (one reference) with a pool of its own of block bytes; NULL
 * without memory. */
struct dps_item *dps_item_new(enum dps_kind kind, size_t block);
void dps_item_unref(struct dps_item *it);
/* The snapshot's empty shell (one reference), and its release. */
struct dp_snapshot *dps_snapshot_new(void);
void dps_snapshot_free(struct dp_snapshot *s);

/* Keeps the JSON of o (compact, keys sorted) in it->src; GW_ENOMEM. */
int dps_item_keep_src(struct dps_item *it, const json_t *o);

struct build {
    struct gw_pool *pool;
    unsigned flags; /* DP_SNAPSHOT_* */
    char *err;
    size_t errlen;
    int failed;
};

/* The field readers (dp_snapshot_fields.c). A wrong field fails the build
 * with an error naming it; the first failure is the one kept. */
__attribute__((format(printf, 2, 3))) void dps_fail(struct build *b, const char *fmt, ...);
const char *dps_req_str(struct build *b, const json_t *o, const char *key, const char *where);
const char *dps_opt_str(struct build *b, const json_t *o, const char *key, const char *where,
                        const char *def);
long dps_opt_ms(struct build *b, const json_t *o, const char *key, const char *where, long def);
int dps_opt_bool(struct build *b, const json_t *o, const char *key, const char *where, int def);
long long dps_opt_int(struct build *b, const json_t *o, const char *key, const char *where,
                      long long min, long long max, long long def, const char *what);
const char *dps_opt_enum(struct build *b, const json_t *o, const char *key, const char *where,
                         const char *const *names, const char *def);
unsigned dps_parse_caps(struct build *b, const json_t *a, const char *where,
                        const struct dp_driver_info *drv);
void dps_opt_str_list(struct build *b, const json_t *o, const char *key, const char *where,
                      const char ***out, size_t *n);
/* A route's and a key's or team's guard_policy words, in enum order. */
extern const char *const dps_guard_policy_names[];
/* The index of v in names, v being one of them (dps_opt_enum's answer). */
int dps_enum_index(const char *const *names, const char *v);
/* A route's fields into r (dp_snapshot_route.c); a failure sets b's. */
void dps_route_fill(struct build *b, const struct dp_snapshot *s, struct dp_route *r,
                    const json_t *o, const char *where);

/* Finds by name (dp_snapshot_lookup.c), for the build as for the lookups:
 * a provider by the first len bytes of name; a route by name or alias. */
const struct dp_provider *dps_find_provider(const struct dp_snapshot *s, const char *name,
                                            size_t len);
const struct dp_route *dps_find_route(const struct dp_snapshot *s, const char *name);
/* The first 64 bits of a key hash (64 lowercase hex digits): its place in
 * the snapshot's key map. */
uint64_t dps_key_slot(const char *hex);
/* The index of a role's name in DP_NROLES order, or -1. */
int dps_role_index(const char *role);

/* The element builders (dp_snapshot.c), shared by the whole build and the
 * delta's apply: each makes one item (NULL when b failed), named where in
 * errors ("keys[3]", "keys['k1']"). A route's providers and a catalog's are
 * looked up in s; a project's team too. */
struct dps_item *dps_build_provider(struct build *b, const json_t *o, const char *where);
struct dps_item *dps_build_route(struct build *b, const struct dp_snapshot *s, const json_t *o,
                                 const char *where);
struct dps_item *dps_build_catalog(struct build *b, const struct dp_snapshot *s, const json_t *a);
/* "guard_rules": the whole array, compiled (dp_guard_rules.h). */
struct dps_item *dps_build_guard_rules(struct build *b, const json_t *a);
struct dps_item *dps_build_team(struct build *b, const json_t *o, const char *where);
struct dps_item *dps_build_project(struct build *b, const struct dp_snapshot *s, const json_t *o,
                                   const char *where);
struct dps_item *dps_build_limit(struct build *b, const json_t *o, const char *where);
struct dps_item *dps_build_key(struct build *b, const json_t *o, const char *where);
/* A key's team and project against s's lists (when the document has them). */
void dps_check_key(struct build *b, const struct dp_snapshot *s, const struct dp_key *k,
                   const char *where);
/* Adds a route to s: its name and aliases into the selectors (none may be
 * taken) and its role (one route per role, and no route may be named
 * after a role another holds). */
void dps_add_route(struct build *b, struct dp_snapshot *s, struct dps_item *it, const char *where);
/* Adds a key to s, by id and by hash (neither may be taken). */
void dps_add_key(struct build *b, struct dp_snapshot *s, struct dps_item *it, const char *where);
/* The scope index (s->limit_scopes): a limit added to or removed from its
 * scope's entry. 0, or GW_ENOMEM. */
int dps_scope_add(struct dp_snapshot *s, struct dps_item *limit);
int dps_scope_remove(struct dp_snapshot *s, const struct dps_item *limit);
/* Removes the route named name (its selectors and role) from s. */
int dps_remove_route(struct dp_snapshot *s, const char *name);
/* s's counts from its maps. */
void dps_count(struct dp_snapshot *s);

#endif
