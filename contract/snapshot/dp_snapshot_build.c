/*
 * dp_snapshot_build: a whole document into a snapshot, section by section
 * (providers, routes, catalog, teams, projects, limits, keys), each item
 * built by dp_snapshot.c's element builders and checked against what came
 * before it; and the additions to a snapshot's maps that the build and a
 * delta's apply (dp_snapshot_apply.c) share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot_int.h"
#include "gw_error.h"

/* Roles and route names share the selector namespace; each role names one
 * route. Checked once every route is known. */
static void check_roles(struct build *b, const struct dp_snapshot *s,
                        const struct dp_route *const *routes, size_t n)
{
    for (size_t i = 0; i < n && !b->failed; i++) {
        const struct dp_route *r = routes[i];
        if (!r->role)
            continue;
        for (size_t k = 0; k < i && !b->failed; k++)
            if (routes[k]->role && strcmp(routes[k]->role, r->role) == 0)
                dps_fail(b,
                         "routes[%zu].role: '%s' is already the role of route '%s' (routes[%zu])",
                         i, r->role, routes[k]->name, k);
        const struct dp_route *named = dps_find_route(s, r->role);
        if (named && !b->failed)
            dps_fail(b, "routes[%zu].role: '%s' is also the name or an alias of route '%s'", i,
                     r->role, named->name);
    }
}

static int put_named(struct build *b, struct gw_pmap *m, struct dps_item *it)
{
    struct dps_name k = {it->name, strlen(it->name)};
    if (dps_put(m, dps_hash_name(k.s, k.n), &k, it, &dps_name_ops) == 0)
        return GW_OK;
    dps_fail(b, "out of memory");
    return GW_ENOMEM;
}

void dps_add_route(struct build *b, struct dp_snapshot *s, struct dps_item *it, const char *where)
{
    const struct dp_route *r = &it->u.route;
    /* Names and aliases share one namespace: a selector is never ambiguous. */
    if (dps_find_route(s, r->name)) {
        dps_fail(b, "%s.name: '%s' is already a route name or alias", where, r->name);
        return;
    }
    for (size_t j = 0; j < r->naliases; j++) {
        if (dps_find_route(s, r->aliases[j]) || strcmp(r->aliases[j], r->name) == 0) {
            dps_fail(b, "%s.aliases[%zu]: '%s' is already a route name or alias", where, j,
                     r->aliases[j]);
            return;
        }
        for (size_t k = 0; k < j; k++)
            if (strcmp(r->aliases[k], r->aliases[j]) == 0) {
                dps_fail(b, "%s.aliases[%zu]: duplicate alias '%s'", where, j, r->aliases[j]);
                return;
            }
    }
    if (put_named(b, &s->routes, it))
        return;
    for (size_t j = 0; j <= r->naliases; j++) {
        const char *sel = j == 0 ? r->name : r->aliases[j - 1];
        struct dps_name k = {sel, strlen(sel)};
        if (dps_put(&s->selectors, dps_hash_name(k.s, k.n), &k, it, &dps_selector_ops)) {
            dps_fail(b, "out of memory");
            return;
        }
    }
    int role = r->role ? dps_role_index(r->role) : -1;
    if (role >= 0 && !s->roles[role])
        s->roles[role] = r;
}

int dps_remove_route(struct dp_snapshot *s, const char *name)
{
    struct dps_item *it = dps_get(&s->routes, name, strlen(name));
    if (!it)
        return GW_OK;
    const struct dp_route *r = &it->u.route;
    __atomic_add_fetch(&it->refs, 1, __ATOMIC_RELAXED); /* held while the maps let go */
    int rc = GW_OK;
    for (size_t j = 0; j <= r->naliases && rc == GW_OK; j++) {
        const char *sel = j == 0 ? r->name : r->aliases[j - 1];
        struct dps_name k = {sel, strlen(sel)};
        rc = dps_del(&s->selectors, dps_hash_name(k.s, k.n), &k, &dps_selector_ops);
    }
    struct dps_name k = {r->name, strlen(r->name)};
    if (rc == GW_OK)
        rc = dps_del(&s->routes, dps_hash_name(k.s, k.n), &k, &dps_name_ops);
    for (int i = 0; i < DP_NROLES; i++)
        if (s->roles[i] == r)
            s->roles[i] = NULL;
    dps_item_unref(it);
    return rc;
}

/* The index of the element of a (before upto) whose field is name: where a
 * duplicate's first appearance was. */
static size_t first_named(const json_t *a, size_t upto, const char *field, const char *name)
{
    for (size_t k = 0; k < upto; k++) {
        const char *v = json_string_value(json_object_get(json_array_get(a, k), field));
        if (v && strcmp(v, name) == 0)
            return k;
    }
    return upto;
}

/* Adds the items of one array (teams, projects, limits) to m, refusing a
 * duplicate name. */
static void build_named(struct build *b, struct dp_snapshot *s, const json_t *a,
                        const char *section, const char *field, const char *what, struct gw_pmap *m)
{
    char where[48];
    for (size_t i = 0; i < json_array_size(a) && !b->failed; i++) {
        const json_t *o = json_array_get(a, i);
        snprintf(where, sizeof(where), "%s[%zu]", section, i);
        struct dps_item *it = m == &s->teams      ? dps_build_team(b, o, where)
                              : m == &s->projects ? dps_build_project(b, s, o, where)
                                                  : dps_build_limit(b, o, where);
        if (!it)
            return;
        if (dps_get(m, it->name, strlen(it->name)))
            dps_fail(b, "%s.%s: duplicate %s '%s' (also %s[%zu])", where, field, what, it->name,
                     section, first_named(a, i, field, it->name));
        else
            put_named(b, m, it);
        dps_item_unref(it);
    }
}

/* Adds a key to s: by id and by hash, each once. */
void dps_add_key(struct build *b, struct dp_snapshot *s, struct dps_item *it, const char *where)
{
    const struct dp_key *k = &it->u.key;
    struct dps_item *dup = dps_get(&s->keys, k->id, strlen(k->id));
    if (dup) {
        dps_fail(b, "%s.id: duplicate key '%s'", where, k->id);
        return;
    }
    if (gw_pmap_get(&s->key_hashes, dps_key_slot(k->hash), k->hash, &dps_hash_ops)) {
        dps_fail(b, "%s.hash: another key has the same hash", where);
        return;
    }
    if (put_named(b, &s->keys, it))
        return;
    if (dps_put(&s->key_hashes, dps_key_slot(k->hash), k->hash, it, &dps_hash_ops))
        dps_fail(b, "out of memory");
}

/* ---- The whole document ---- */

static const json_t *req_array(struct build *b, const json_t *root, const char *key, int required)
{
    json_t *a = json_object_get(root, key);
    if (!a || json_is_null(a)) {
        if (required)
            dps_fail(b, "%s: required, an array", key);
        return NULL;
    }
    if (!json_is_array(a)) {
        dps_fail(b, "%s: must be an array", key);
        return NULL;
    }
    return a;
}

struct dp_snapshot *dp_snapshot_build(const json_t *root, char *err, size_t errlen)
{
    return dp_snapshot_build_ex(root, 0, err, errlen);
}

static void build_routes(struct build *b, struct dp_snapshot *s, const json_t *routes)
{
    size_t n = json_array_size(routes);
    const struct dp_route **order = calloc(n + 1, sizeof(*order));
    if (!order) {
        dps_fail(b, "out of memory");
        return;
    }
    char where[48];
    size_t done = 0;
    for (size_t i = 0; i < n && !b->failed; i++) {
        snprintf(where, sizeof(where), "routes[%zu]", i);
        struct dps_item *it = dps_build_route(b, s, json_array_get(routes, i), where);
        if (!it)
            break;
        dps_add_route(b, s, it, where);
        order[done++] = &it->u.route;
        dps_item_unref(it); /* the maps hold it */
    }
    if (!b->failed)
        check_roles(b, s, order, done);
    free(order);
}

struct dp_snapshot *dp_snapshot_build_ex(const json_t *root, unsigned flags, char *err,
                                         size_t errlen)
{
    struct build b = {.err = err, .errlen = errlen, .flags = flags};
    if (!json_is_object(root)) {
        snprintf(err, errlen, "snapshot: must be a JSON object");
        return NULL;
    }
    struct dp_snapshot *s = dps_snapshot_new();
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->source = (flags & DP_SNAPSHOT_PUSHED) ? "control_plane" : "file";
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) < 0)
        dps_fail(&b, "version: required, a non-negative integer");
    else
        s->version = json_integer_value(ver);
    const json_t *prov = req_array(&b, root, "providers", 1);
    const json_t *routes = req_array(&b, root, "routes", 1);
    const json_t *keys = req_array(&b, root, "keys", 0);
    const json_t *catalog = req_array(&b, root, "catalog", 0);
    const json_t *teams = req_array(&b, root, "teams", 0);
    const json_t *projects = req_array(&b, root, "projects", 0);
    const json_t *limits = req_array(&b, root, "limits", 0);
    const json_t *guard_rules = req_array(&b, root, "guard_rules", 0);
    const json_t *auth = json_object_get(root, "auth");
    const char *av = json_is_null(auth) ? "keys" : json_string_value(auth);
    if (auth && !(av && (strcmp(av, "keys") == 0 || strcmp(av, "none") == 0)))
        dps_fail(&b, "auth: must be \"keys\" (the default: every request needs an API key) or "
                     "\"none\" (the gateway serves anyone)");
    s->auth_open = av && strcmp(av, "none") == 0;
    if (!b.failed && s->auth_open && json_array_size(keys))
        dps_fail(&b, "auth: \"none\" serves every request without a key, so keys would not be "
                     "checked: remove the keys or the auth field");
    s->present = (keys ? DPS_HAS_KEYS : 0) | (catalog ? DPS_HAS_CATALOG : 0) |
                 (teams ? DPS_HAS_TEAMS : 0) | (projects ? DPS_HAS_PROJECTS : 0) |
                 (limits ? DPS_HAS_LIMITS : 0);
    if (b.failed)
        goto bad;
    char where[48];
    for (size_t i = 0; i < json_array_size(prov) && !b.failed; i++) {
        snprintf(where, sizeof(where), "providers[%zu]", i);
        struct dps_item *it = dps_build_provider(&b, json_array_get(prov, i), where);
        if (!it)
            break;
        if (dps_get(&s->providers, it->name, strlen(it->name)))
            dps_fail(&b, "%s.name: duplicate provider '%s'", where, it->name);
        else
            put_named(&b, &s->providers, it);
        dps_item_unref(it);
    }
    if (!b.failed)
        build_routes(&b, s, routes);
    if (catalog && !b.failed && (s->catalog_item = dps_build_catalog(&b, s, catalog))) {
        s->catalog = s->catalog_item->u.catalog.entries;
        s->ncatalog = s->catalog_item->u.catalog.n;
    }
    if (guard_rules && !b.failed && (s->guard_rules_item = dps_build_guard_rules(&b, guard_rules)))
        s->guard_rules = s->guard_rules_item->u.guard.rules;
    if (!b.failed)
        build_named(&b, s, teams, "teams", "name", "team", &s->teams);
    if (!b.failed)
        build_named(&b, s, projects, "projects", "name", "project", &s->projects);
    if (!b.failed)
        build_named(&b, s, limits, "limits", "id", "limit", &s->limits);
    struct gw_pmap_iter li;
    gw_pmap_iter_init(&s->limits, &li);
    for (struct dps_item *l; !b.failed && (l = gw_pmap_next(&li)) != NULL;)
        if (dps_scope_add(s, l) != GW_OK)
            dps_fail(&b, "out of memory");
    for (size_t i = 0; i < json_array_size(keys) && !b.failed; i++) {
        snprintf(where, sizeof(where), "keys[%zu]", i);
        struct dps_item *it = dps_build_key(&b, json_array_get(keys, i), where);
        if (!it)
            break;
        dps_check_key(&b, s, &it->u.key, where);
        if (!b.failed)
            dps_add_key(&b, s, it, where);
        dps_item_unref(it);
    }
    if (!b.failed) {
        dps_count(s);
        return s;
    }
bad:
    dps_snapshot_free(s);
    return NULL;
}

struct dp_snapshot *dp_snapshot_load(const char *path, char *err, size_t errlen)
{
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        snprintf(err, errlen, "%s: line %d column %d: %s", path, je.line, je.column, je.text);
        return NULL;
    }
    struct dp_snapshot *s = dp_snapshot_build(root, err, errlen);
    json_decref(root);
    return s;
}

/* ---- The limits by scope ---- */

/* A scope's name in the index: its kind's letter, ':', the scope. */
static char *scope_name(enum dp_limit_scope kind, const char *scope)
{
    size_t n = strlen(scope);
    char *v = malloc(n + 3);
    if (!v)
        return NULL;
    v[0] = kind == DP_LIMIT_KEY ? 'k' : kind == DP_LIMIT_TEAM ? 't' : 'p';
    v[1] = ':';
    memcpy(v + 2, scope, n + 1);
    return v;
}

/* Puts a new entry for name holding old's limits (old may be NULL), less
 * drop and plus add (either may be NULL); removes the entry when none are
 * left. */
static int scope_set(struct dp_snapshot *s, const char *name, const struct dps_item *old,
                     const struct dps_item *drop, struct dps_item *add)
{
    struct dps_name k = {name, strlen(name)};
    uint64_t h = dps_hash_name(k.s, k.n);
    size_t n = (old ? old->ndeps : 0) + (add ? 1 : 0);
    if (n == (drop ? 1u : 0u))
        return dps_del(&s->limit_scopes, h, &k, &dps_name_ops);
    struct dps_item *it = dps_item_new(DPS_SCOPE, 256);
    char *nm = it ? gw_pool_strdup(it->pool, name) : NULL;
    it = nm ? it : (dps_item_unref(it), NULL);
    if (it) {
        it->name = nm;
        it->deps = gw_pool_calloc(it->pool, n * sizeof(*it->deps));
        it->u.scope.limits = gw_pool_calloc(it->pool, n * sizeof(*it->u.scope.limits));
    }
    if (!it || !it->deps || !it->u.scope.limits) {
        dps_item_unref(it);
        return GW_ENOMEM;
    }
    for (size_t i = 0; old && i < old->ndeps; i++)
        if (old->deps[i] != drop)
            it->deps[it->ndeps++] = old->deps[i];
    if (add)
        it->deps[it->ndeps++] = add;
    for (size_t i = 0; i < it->ndeps; i++) {
        __atomic_add_fetch(&it->deps[i]->refs, 1, __ATOMIC_RELAXED);
        it->u.scope.limits[i] = &it->deps[i]->u.limit;
    }
    it->u.scope.n = it->ndeps;
    int rc = dps_put(&s->limit_scopes, h, &k, it, &dps_name_ops);
    dps_item_unref(it);
    return rc;
}

int dps_scope_add(struct dp_snapshot *s, struct dps_item *limit)
{
    char *name = scope_name(limit->u.limit.scope_kind, limit->u.limit.scope);
    if (!name)
        return GW_ENOMEM;
    int rc = scope_set(s, name, dps_get(&s->limit_scopes, name, strlen(name)), NULL, limit);
    free(name);
    return rc;
}

int dps_scope_remove(struct dp_snapshot *s, const struct dps_item *limit)
{
    char *name = scope_name(limit->u.limit.scope_kind, limit->u.limit.scope);
    if (!name)
        return GW_ENOMEM;
    struct dps_item *old = dps_get(&s->limit_scopes, name, strlen(name));
    int rc = old ? scope_set(s, name, old, limit, NULL) : GW_OK;
    free(name);
    return rc;
}

size_t dp_snapshot_limits_of(const struct dp_snapshot *s, enum dp_limit_scope kind,
                             const char *scope, const struct dp_limit *const **out)
{
    char stack[128], *name = stack;
    size_t n = strlen(scope);
    if (n + 3 > sizeof(stack) && !(name = malloc(n + 3)))
        return 0;
    name[0] = kind == DP_LIMIT_KEY ? 'k' : kind == DP_LIMIT_TEAM ? 't' : 'p';
    name[1] = ':';
    memcpy(name + 2, scope, n + 1);
    struct dps_item *it = dps_get(&s->limit_scopes, name, n + 2);
    if (name != stack)
        free(name);
    *out = it ? it->u.scope.limits : NULL;
    return it ? it->u.scope.n : 0;
}
