/*
 * dp_snapshot_apply: a delta document onto a snapshot (docs/dataplane.md,
 * "Control plane", Deltas), and a snapshot back into a whole document.
 *
 * The new snapshot starts as a second owner of every map of the old one
 * (gw_pmap_share) and changes only the entries the delta names, so its
 * cost is the delta's size. The checks are the whole build's, narrowed to
 * what the change can affect:
 * - a provider changed or removed: the routes naming it are built again
 *   against the new provider (they point into it), and a removed one may
 *   not be named by the catalog;
 * - a route: its name, aliases and role against the others (the selector
 *   map and the role table);
 * - a team removed or a project changed: the keys and projects naming
 *   them are checked again (a scan of the keys: such writes are rare);
 * - a key: its team and project, its id and hash unique.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot_int.h"
#include "gw_error.h"

/* One kind's member of the delta: an object of resources by name (a value
 * null removes), or NULL when absent. */
static const json_t *section(struct build *b, const json_t *delta, const char *key)
{
    const json_t *o = json_object_get(delta, key);
    if (!o || json_is_null(o))
        return NULL;
    if (!json_is_object(o))
        dps_fail(b, "%s: must be an object of resources by name", key);
    return json_is_object(o) ? o : NULL;
}

/* A resource is filed under its own name. */
static int misnamed(struct build *b, const struct dps_item *it, const char *name, const char *where,
                    const char *field)
{
    if (strcmp(it->name, name) == 0)
        return 0;
    dps_fail(b, "%s.%s: '%s' is filed under '%s': a resource's member is its own %s", where, field,
             it->name, name, field);
    return 1;
}

static struct dp_snapshot *clone(const struct dp_snapshot *base)
{
    struct dp_snapshot *s = dps_snapshot_new();
    if (!s)
        return NULL;
    gw_pmap_share(&base->providers, &s->providers);
    gw_pmap_share(&base->routes, &s->routes);
    gw_pmap_share(&base->selectors, &s->selectors);
    gw_pmap_share(&base->keys, &s->keys);
    gw_pmap_share(&base->key_hashes, &s->key_hashes);
    gw_pmap_share(&base->teams, &s->teams);
    gw_pmap_share(&base->projects, &s->projects);
    gw_pmap_share(&base->limits, &s->limits);
    gw_pmap_share(&base->limit_scopes, &s->limit_scopes);
    memcpy(s->roles, base->roles, sizeof(s->roles));
    if ((s->catalog_item = base->catalog_item) != NULL)
        __atomic_add_fetch(&s->catalog_item->refs, 1, __ATOMIC_RELAXED);
    s->catalog = base->catalog;
    s->ncatalog = base->ncatalog;
    if ((s->guard_rules_item = base->guard_rules_item) != NULL)
        __atomic_add_fetch(&s->guard_rules_item->refs, 1, __ATOMIC_RELAXED);
    s->guard_rules = base->guard_rules;
    s->present = base->present;
    s->auth_open = base->auth_open;
    s->source = base->source;
    return s;
}

/* Removes or replaces the entries of a named section (providers, teams,
 * projects, limits). */
static void apply_named(struct build *b, struct dp_snapshot *s, const json_t *sec, const char *kind,
                        const char *field, struct gw_pmap *m)
{
    const char *name;
    json_t *v;
    char where[160];
    json_object_foreach((json_t *)sec, name, v)
    {
        if (b->failed)
            return;
        snprintf(where, sizeof(where), "%s['%.100s']", kind, name);
        /* A limit leaves its scope's entry whether replaced or removed. */
        struct dps_item *old = m == &s->limits ? dps_get(m, name, strlen(name)) : NULL;
        if (old && dps_scope_remove(s, old) != GW_OK) {
            dps_fail(b, "out of memory");
            return;
        }
        if (json_is_null(v)) {
            struct dps_name k = {name, strlen(name)};
            if (dps_del(m, dps_hash_name(k.s, k.n), &k, &dps_name_ops))
                dps_fail(b, "out of memory");
            continue;
        }
        struct dps_item *it = m == &s->providers  ? dps_build_provider(b, v, where)
                              : m == &s->teams    ? dps_build_team(b, v, where)
                              : m == &s->projects ? dps_build_project(b, s, v, where)
                                                  : dps_build_limit(b, v, where);
        if (it && !misnamed(b, it, name, where, field)) {
            struct dps_name k = {it->name, strlen(it->name)};
            if (dps_put(m, dps_hash_name(k.s, k.n), &k, it, &dps_name_ops) ||
                (m == &s->limits && dps_scope_add(s, it)))
                dps_fail(b, "out of memory");
        }
        dps_item_unref(it);
    }
}

/* Builds a route again from its text (a provider it names changed). */
static void rebuild_route(struct build *b, struct dp_snapshot *s, const struct dps_item *old)
{
    char where[160];
    snprintf(where, sizeof(where), "routes['%.100s']", old->name);
    json_t *o = json_loadb(old->src, old->srclen, 0, NULL);
    if (!o) {
        dps_fail(b, "%s: out of memory", where);
        return;
    }
    if (dps_remove_route(s, old->name) != GW_OK)
        dps_fail(b, "out of memory");
    struct dps_item *it = b->failed ? NULL : dps_build_route(b, s, o, where);
    if (it)
        dps_add_route(b, s, it, where);
    dps_item_unref(it);
    json_decref(o);
}

/* A route added by the delta against the roles: one route per role, and no
 * route named (or aliased) after a role another route holds. */
static void check_route_roles(struct build *b, const struct dp_snapshot *s,
                              const struct dp_route *r, const char *where)
{
    int role = r->role ? dps_role_index(r->role) : -1;
    if (role >= 0 && s->roles[role] != r) {
        dps_fail(b, "%s.role: '%s' is already the role of route '%s'", where, r->role,
                 s->roles[role]->name);
        return;
    }
    const struct dp_route *named = role >= 0 ? dps_find_route(s, r->role) : NULL;
    if (named) {
        dps_fail(b, "%s.role: '%s' is also the name or an alias of route '%s'", where, r->role,
                 named->name);
        return;
    }
    for (size_t j = 0; j <= r->naliases; j++) {
        const char *sel = j == 0 ? r->name : r->aliases[j - 1];
        int held = dps_role_index(sel);
        if (held >= 0 && s->roles[held]) {
            dps_fail(b, "routes['%.100s'].role: '%s' is also the name or an alias of route '%s'",
                     s->roles[held]->name, sel, r->name);
            return;
        }
    }
}

static void apply_routes(struct build *b, struct dp_snapshot *s, const json_t *sec,
                         const json_t *providers)
{
    const char *name;
    json_t *v;
    /* Every route the delta names leaves first, so that two routes trading
     * an alias in one delta do not collide. */
    if (sec) {
        json_object_foreach((json_t *)sec, name, v)
        {
            if (dps_remove_route(s, name) != GW_OK) {
                dps_fail(b, "out of memory");
                return;
            }
        }
    }
    /* The routes pointing into a changed provider are built again. */
    if (providers && json_object_size(providers)) {
        size_t n = 0, cap = 16;
        const struct dps_item **todo = malloc(cap * sizeof(*todo));
        struct gw_pmap_iter it;
        gw_pmap_iter_init(&s->routes, &it);
        for (struct dps_item *x; todo && (x = gw_pmap_next(&it)) != NULL;) {
            size_t k = 0;
            while (k < x->ndeps && !json_object_get(providers, x->deps[k]->name))
                k++;
            if (k == x->ndeps)
                continue;
            if (n == cap) {
                const struct dps_item **t = realloc(todo, 2 * cap * sizeof(*todo));
                if (!t) {
                    free(todo);
                    todo = NULL;
                    break;
                }
                todo = t;
                cap *= 2;
            }
            todo[n++] = x; /* held by the base snapshot meanwhile */
        }
        if (!todo)
            dps_fail(b, "out of memory");
        for (size_t i = 0; i < n && !b->failed; i++)
            rebuild_route(b, s, todo[i]);
        free(todo);
    }
    if (!sec || b->failed)
        return;
    char where[160];
    json_object_foreach((json_t *)sec, name, v)
    {
        if (json_is_null(v))
            continue;
        snprintf(where, sizeof(where), "routes['%.100s']", name);
        struct dps_item *it = dps_build_route(b, s, v, where);
        if (it && !misnamed(b, it, name, where, "name")) {
            dps_add_route(b, s, it, where);
            if (!b->failed)
                check_route_roles(b, s, &it->u.route, where);
        }
        dps_item_unref(it);
        if (b->failed)
            return;
    }
}

static int remove_key(struct dp_snapshot *s, const char *id)
{
    struct dps_item *old = dps_get(&s->keys, id, strlen(id));
    if (!old)
        return GW_OK;
    struct dps_name k = {id, strlen(id)};
    __atomic_add_fetch(&old->refs, 1, __ATOMIC_RELAXED);
    int rc = dps_del(&s->key_hashes, dps_key_slot(old->u.key.hash), old->u.key.hash, &dps_hash_ops);
    if (rc == GW_OK)
        rc = dps_del(&s->keys, dps_hash_name(k.s, k.n), &k, &dps_name_ops);
    dps_item_unref(old);
    return rc;
}

static void apply_keys(struct build *b, struct dp_snapshot *s, const json_t *sec)
{
    const char *id;
    json_t *v;
    char where[160];
    /* Every key the delta names leaves first, so that two keys trading
     * hashes in one delta do not collide. */
    json_object_foreach((json_t *)sec, id, v)
    {
        if (remove_key(s, id) != GW_OK) {
            dps_fail(b, "out of memory");
            return;
        }
    }
    json_object_foreach((json_t *)sec, id, v)
    {
        if (b->failed)
            return;
        if (json_is_null(v))
            continue;
        snprintf(where, sizeof(where), "keys['%.100s']", id);
        if (s->auth_open) {
            dps_fail(b, "%s: the snapshot serves without keys (\"auth\": \"none\")", where);
            return;
        }
        struct dps_item *it = dps_build_key(b, v, where);
        if (it && !misnamed(b, it, id, where, "id")) {
            dps_check_key(b, s, &it->u.key, where);
            if (!b->failed)
                dps_add_key(b, s, it, where);
        }
        dps_item_unref(it);
    }
}

/* What a removed provider, team or project leaves naming it. every: the
 * delta brought a teams or projects list the base had none of (a file's
 * snapshot): every project and key is checked against it. */
static void check_references(struct build *b, const struct dp_snapshot *s, const json_t *providers,
                             const json_t *teams, const json_t *projects, int every)
{
    const char *name;
    json_t *v;
    if (providers && s->catalog)
        for (size_t i = 0; i < s->ncatalog && !b->failed; i++) {
            const char *p = s->catalog[i].provider;
            if (p && !dps_find_provider(s, p, strlen(p)))
                dps_fail(b, "catalog[%zu].provider: no provider named '%s'", i, p);
        }
    int teams_gone = 0;
    if (teams) {
        json_object_foreach((json_t *)teams, name, v)
        {
            teams_gone |= json_is_null(v);
        }
    }
    if (b->failed || !(every || teams_gone || (projects && json_object_size(projects))))
        return;
    struct gw_pmap_iter it;
    char where[160];
    if ((every || teams_gone) && (s->present & DPS_HAS_TEAMS)) {
        const struct dp_project *p;
        for (dp_snapshot_iter(&s->projects, &it); !b->failed && (p = dp_snapshot_next(&it));)
            if (p->team && !dp_snapshot_team(s, p->team))
                dps_fail(b, "projects['%.100s'].team: no team named '%s' in teams", p->name,
                         p->team);
    }
    const struct dp_key *k;
    for (dp_snapshot_iter(&s->keys, &it); !b->failed && (k = dp_snapshot_next(&it));) {
        int named = every || (k->team && teams && json_object_get(teams, k->team)) ||
                    (k->project && projects && json_object_get(projects, k->project));
        if (!named)
            continue;
        snprintf(where, sizeof(where), "keys['%.100s']", k->id);
        dps_check_key(b, s, k, where);
    }
}

struct dp_snapshot *dp_snapshot_apply(const struct dp_snapshot *base, const json_t *delta,
                                      unsigned flags, char *err, size_t errlen)
{
    struct build b = {.err = err, .errlen = errlen, .flags = flags};
    if (!json_is_object(delta)) {
        snprintf(err, errlen, "delta: must be a JSON object");
        return NULL;
    }
    const json_t *ver = json_object_get(delta, "version");
    const json_t *bv = json_object_get(delta, "base_version");
    if (!json_is_integer(bv) || json_integer_value(bv) != base->version) {
        snprintf(err, errlen, "base_version: %lld is not this snapshot's version %lld",
                 json_is_integer(bv) ? (long long)json_integer_value(bv) : -1LL, base->version);
        return NULL;
    }
    if (!json_is_integer(ver) || json_integer_value(ver) <= base->version) {
        snprintf(err, errlen, "version: required, an integer above base_version");
        return NULL;
    }
    const json_t *providers = section(&b, delta, "providers");
    const json_t *routes = section(&b, delta, "routes");
    const json_t *keys = section(&b, delta, "keys");
    const json_t *teams = section(&b, delta, "teams");
    const json_t *projects = section(&b, delta, "projects");
    const json_t *limits = section(&b, delta, "limits");
    const json_t *catalog = json_object_get(delta, "catalog");
    if (catalog && !json_is_array(catalog))
        dps_fail(&b, "catalog: must be an array (the whole catalog)");
    const json_t *guard_rules = json_object_get(delta, "guard_rules");
    if (b.failed)
        return NULL;
    struct dp_snapshot *s = clone(base);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    s->version = json_integer_value(ver);
    s->present |= (keys ? DPS_HAS_KEYS : 0) | (catalog ? DPS_HAS_CATALOG : 0) |
                  (teams ? DPS_HAS_TEAMS : 0) | (projects ? DPS_HAS_PROJECTS : 0) |
                  (limits ? DPS_HAS_LIMITS : 0);
    if (providers)
        apply_named(&b, s, providers, "providers", "name", &s->providers);
    if (!b.failed)
        apply_routes(&b, s, routes, providers);
    if (!b.failed && catalog) {
        struct dps_item *c = dps_build_catalog(&b, s, catalog);
        if (c) {
            dps_item_unref(s->catalog_item);
            s->catalog_item = c;
            s->catalog = c->u.catalog.entries;
            s->ncatalog = c->u.catalog.n;
        }
    }
    if (!b.failed && guard_rules) { /* the whole set, as the catalog */
        struct dps_item *g = dps_build_guard_rules(&b, guard_rules);
        if (g) {
            dps_item_unref(s->guard_rules_item);
            s->guard_rules_item = g;
            s->guard_rules = g->u.guard.rules;
        }
    }
    if (!b.failed && teams)
        apply_named(&b, s, teams, "teams", "name", &s->teams);
    if (!b.failed && projects)
        apply_named(&b, s, projects, "projects", "name", &s->projects);
    if (!b.failed && limits)
        apply_named(&b, s, limits, "limits", "id", &s->limits);
    if (!b.failed && keys)
        apply_keys(&b, s, keys);
    if (!b.failed)
        check_references(&b, s, catalog ? NULL : providers, teams, projects,
                         (s->present & ~base->present & (DPS_HAS_TEAMS | DPS_HAS_PROJECTS)) != 0);
    if (b.failed) {
        dps_snapshot_free(s);
        return NULL;
    }
    dps_count(s);
    return s;
}

char *dp_snapshot_dump(const json_t *o, size_t flags, size_t *len)
{
    size_t n = json_dumpb(o, NULL, 0, flags);
    char *p = n ? malloc(n + 1) : NULL;
    if (!p)
        return NULL;
    if (json_dumpb(o, p, n, flags) != n) {
        explicit_bzero(p, n);
        free(p);
        return NULL;
    }
    p[n] = '\0';
    *len = n;
    return p;
}

static void wipe_string(json_t *v)
{
    if (json_is_string(v))
        explicit_bzero((char *)json_string_value(v), json_string_length(v));
}

static void wipe_credential(json_t *p)
{
    wipe_string(json_object_get(p, "credential"));
    const char *k;
    json_t *v;
    json_object_foreach(json_object_get(p, "headers"), k, v) wipe_string(v);
}

void dp_snapshot_wipe_json(json_t *doc)
{
    json_t *ps = json_object_get(doc, "providers"), *p;
    size_t i;
    const char *name;
    /* A whole document's providers are an array, a delta's an object. */
    json_array_foreach(ps, i, p) wipe_credential(p);
    json_object_foreach(ps, name, p) wipe_credential(p);
}

/* ---- Render ---- */

struct out {
    char *p;
    size_t len, cap;
    int failed;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->failed)
        return;
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap : 4096;
        while (o->len + n + 1 > cap)
            cap *= 2;
        /* Not realloc: the old buffer may hold credentials, wiped here. */
        char *q = malloc(cap);
        if (!q) {
            o->failed = 1;
            return;
        }
        if (o->p) {
            memcpy(q, o->p, o->len);
            explicit_bzero(o->p, o->len);
            free(o->p);
        }
        o->p = q;
        o->cap = cap;
    }
    memcpy(o->p + o->len, s, n);
    o->len += n;
    o->p[o->len] = '\0';
}

static void put_array(struct out *o, const char *key, const struct gw_pmap *m)
{
    put(o, ",\"", 2);
    put(o, key, strlen(key));
    put(o, "\":[", 3);
    struct gw_pmap_iter it;
    gw_pmap_iter_init(m, &it);
    int first = 1;
    for (const struct dps_item *x; (x = gw_pmap_next(&it)) != NULL; first = 0) {
        if (!first)
            put(o, ",", 1);
        put(o, x->src, x->srclen);
    }
    put(o, "]", 1);
}

char *dp_snapshot_render(const struct dp_snapshot *s, size_t *len)
{
    struct out o = {0};
    char head[64];
    int n = snprintf(head, sizeof(head), "{\"version\":%lld", s->version);
    put(&o, head, (size_t)n);
    put_array(&o, "providers", &s->providers);
    put_array(&o, "routes", &s->routes);
    if (s->present & DPS_HAS_KEYS)
        put_array(&o, "keys", &s->keys);
    if (s->present & DPS_HAS_TEAMS)
        put_array(&o, "teams", &s->teams);
    if (s->present & DPS_HAS_PROJECTS)
        put_array(&o, "projects", &s->projects);
    if (s->present & DPS_HAS_LIMITS)
        put_array(&o, "limits", &s->limits);
    if (s->catalog_item) {
        put(&o, ",\"catalog\":", 11);
        put(&o, s->catalog_item->src, s->catalog_item->srclen);
    }
    if (s->guard_rules_item) {
        put(&o, ",\"guard_rules\":", 15);
        put(&o, s->guard_rules_item->src, s->guard_rules_item->srclen);
    }
    if (s->auth_open)
        put(&o, ",\"auth\":\"none\"", 14);
    put(&o, "}", 1);
    if (o.failed) {
        if (o.p)
            explicit_bzero(o.p, o.len);
        free(o.p);
        return NULL;
    }
    *len = o.len;
    return o.p;
}
