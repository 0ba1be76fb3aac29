/*
 * /v1/admin/routes: a route and its entries as one object,
 *
 *   {name, aliases, role, capability, strategy, fallback_timeout_ms,
 *    max_duration_ms, cache: {ttl_s, scope, deterministic} or null,
 *    guard: {...} or null, judge: {...} or null,
 *    entries: [{provider, model, weight, high_cost, tier}]}
 *
 * stored in routes and route_entries by one transaction (an edit replaces
 * the entries; one that carries cache, guard or judge replaces it whole;
 * guard and judge are checked and stored, defaults filled, by
 * cp_res_guard.c). The rules are
 * the data plane's snapshot loader's (docs/dataplane.md, "Snapshot file"),
 * checked here so a route the API accepts is one every data plane loads.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "gw_error.h"
#include "gw_pool.h"

#define MAX_ENTRIES 32

/* The advisory-lock key every route write takes ("llmgwrt" in ASCII). */
#define CP_ROUTES_LOCK_KEY 0x6c6c6d67777274LL

static const char *const roles[] = {"default", "summarize", "embedding", "vision", NULL};
static const char *const capabilities[] = {"chat",   "embeddings", "vision", "transcription",
                                           "speech", "image",      NULL};
static const char *const strategies[] = {"ordered", "price", "latency", "auto", "weighted", NULL};

static const char *const cache_scopes[] = {"team", "key", "project", "global", NULL};

/* The data plane's bound on a cached answer's life (DP_CACHE_MAX_TTL_S). */
#define MAX_CACHE_TTL_S 2592000

static int cache_field(struct cp_verr *e, const char *m, const char *code, const char *rule)
{
    char param[64];
    snprintf(param, sizeof(param), "cache.%.40s", m);
    return cp_verr_set(e, 400, code, param, "%s: %s", param, rule);
}

/* The response cache (docs/cache.md): null (off), or {ttl_s (required),
 * scope, deterministic}, nothing else: the data plane's rules. */
static int check_cache(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    (void)field;
    if (json_is_null(v))
        return GW_OK;
    const char *k;
    json_t *m;
    json_object_foreach((json_t *)v, k, m)
    {
        if (strcmp(k, "ttl_s") && strcmp(k, "scope") && strcmp(k, "deterministic"))
            return cache_field(e, k, "unknown_field",
                               "unknown field for a route's cache (ttl_s, scope, deterministic)");
    }
    json_t *ttl = json_object_get(v, "ttl_s");
    json_t *scope = json_object_get(v, "scope");
    json_t *det = json_object_get(v, "deterministic");
    if (!ttl || json_is_null(ttl))
        return cache_field(e, "ttl_s", "missing_field",
                           "is required: how long an answer is kept, 1 to 2592000 (s); "
                           "\"cache\": null turns the cache off");
    if (!json_is_integer(ttl) || json_integer_value(ttl) < 1 ||
        json_integer_value(ttl) > MAX_CACHE_TTL_S)
        return cache_field(e, "ttl_s", json_is_integer(ttl) ? "invalid_value" : "invalid_type",
                           "must be an integer from 1 to 2592000 (s)");
    if (scope && !json_is_null(scope)) {
        const char *const *sc = cache_scopes;
        while (*sc && !(json_is_string(scope) && strcmp(*sc, json_string_value(scope)) == 0))
            sc++;
        if (!*sc)
            return cache_field(e, "scope", json_is_string(scope) ? "invalid_value" : "invalid_type",
                               "must be one of team, key, project, global");
    }
    if (det && !json_is_null(det) && !json_is_boolean(det))
        return cache_field(e, "deterministic", "invalid_type", "must be true or false");
    return GW_OK;
}

/* The cache's columns from the object (checked): cache_ttl_s NULL when
 * off, the scope and the mark with their defaults; guard and judge with
 * theirs. */
static int prepare_route(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    (void)c;
    (void)before;
    json_t *v = json_object_get(obj, "cache");
    int on = json_is_object(v);
    json_t *scope = on ? json_object_get(v, "scope") : NULL;
    json_t *det = on ? json_object_get(v, "deterministic") : NULL;
    json_object_set_new(obj, "cache_ttl_s",
                        on ? json_integer(json_integer_value(json_object_get(v, "ttl_s")))
                           : json_null());
    json_object_set_new(obj, "cache_scope",
                        json_string(json_is_string(scope) ? json_string_value(scope) : "team"));
    json_object_set_new(obj, "cache_deterministic", json_boolean(json_is_true(det)));
    json_t *guard = cp_res_guard_normalize(json_object_get(obj, "guard"));
    json_t *judge = cp_res_judge_normalize(json_object_get(obj, "judge"));
    if (!guard || !judge || json_object_set_new(obj, "guard", guard) ||
        json_object_set_new(obj, "judge", judge))
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    return GW_OK;
}

static int check_aliases(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    size_t i, k;
    json_t *a, *b;
    json_array_foreach(v, i, a)
    {
        const char *s = json_string_value(a);
        if (strchr(s, '/') || json_string_length(a) > 128)
            return cp_verr_set(e, 400, "invalid_value", field,
                               "%s[%zu]: must be at most 128 characters without '/'", field, i);
        json_array_foreach(v, k, b)
        {
            if (k < i && strcmp(s, json_string_value(b)) == 0)
                return cp_verr_set(e, 400, "invalid_value", field, "%s[%zu]: '%s' is listed twice",
                                   field, i, s);
        }
    }
    return GW_OK;
}

static int entry_field(struct cp_verr *e, size_t i, const char *m, const char *rule)
{
    char param[64];
    snprintf(param, sizeof(param), "entries[%zu].%s", i, m);
    return cp_verr_set(e, 400, "invalid_value", param, "%s: %s", param, rule);
}

static int check_entries(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    size_t n = json_array_size(v);
    if (n < 1 || n > MAX_ENTRIES)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must have 1 to %d entries (it has %zu)", field, MAX_ENTRIES, n);
    size_t i;
    json_t *en;
    json_array_foreach(v, i, en)
    {
        if (!json_is_object(en))
            return cp_verr_set(e, 400, "invalid_type", gw_pool_printf(c->pool, "entries[%zu]", i),
                               "entries[%zu]: must be an object {provider, model, weight, "
                               "high_cost, tier}",
                               i);
        const char *k;
        json_t *m;
        json_object_foreach(en, k, m)
        {
            if (strcmp(k, "provider") && strcmp(k, "model") && strcmp(k, "weight") &&
                strcmp(k, "high_cost") && strcmp(k, "tier")) {
                char param[96];
                snprintf(param, sizeof(param), "entries[%zu].%.40s", i, k);
                return cp_verr_set(e, 400, "unknown_field", param,
                                   "%s: unknown field for a route entry (provider, model, weight, "
                                   "high_cost, tier)",
                                   param);
            }
        }
        json_t *prov = json_object_get(en, "provider");
        json_t *model = json_object_get(en, "model");
        json_t *w = json_object_get(en, "weight");
        json_t *hc = json_object_get(en, "high_cost");
        json_t *tier = json_object_get(en, "tier");
        if (!json_is_string(prov) || json_string_length(prov) == 0)
            return entry_field(e, i, "provider", "is required: the name of a provider");
        if (!json_is_string(model) || json_string_length(model) == 0 ||
            json_string_length(model) > 256)
            return entry_field(e, i, "model", "is required: a non-empty string (at most 256)");
        if (w &&
            (!json_is_integer(w) || json_integer_value(w) < 0 || json_integer_value(w) > 1000000))
            return entry_field(e, i, "weight", "must be an integer from 0 to 1000000");
        if (hc && !json_is_boolean(hc))
            return entry_field(e, i, "high_cost", "must be true or false");
        if (tier && (!json_is_integer(tier) || json_integer_value(tier) < 0 ||
                     json_integer_value(tier) > 9))
            return entry_field(e, i, "tier", "must be an integer from 0 to 9");
        for (size_t k2 = 0; k2 < i; k2++) {
            json_t *o = json_array_get(v, k2);
            if (strcmp(json_string_value(json_object_get(o, "provider")),
                       json_string_value(prov)) == 0 &&
                strcmp(json_string_value(json_object_get(o, "model")), json_string_value(model)) ==
                    0)
                return entry_field(e, i, "model",
                                   gw_pool_printf(c->pool,
                                                  "provider '%s' with model '%s' is already "
                                                  "entries[%zu]: a pair appears once",
                                                  json_string_value(prov), json_string_value(model),
                                                  k2));
        }
        struct cp_db_err err;
        const char *p[] = {json_string_value(prov)};
        PGresult *r =
            cp_db_exec(c->db, c->pool, "SELECT 1 FROM providers WHERE name = $1", 1, p, &err);
        if (!r)
            return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check providers: %s",
                               err.message);
        if (PQntuples(r) == 0) {
            char param[64];
            snprintf(param, sizeof(param), "entries[%zu].provider", i);
            return cp_verr_set(e, 400, "dangling_reference", param,
                               "%s: no provider named '%s'; create the provider first", param,
                               p[0]);
        }
    }
    return GW_OK;
}

/* Names, aliases and roles share the selector namespace; a role names one
 * route. Reads the other routes: no constraint covers aliases, so every
 * route write holds CP_ROUTES_LOCK_KEY (cp_resource.write_lock) and two
 * writes (through two replicas, say) cannot both claim one alias or role. */
static int check_route(struct cp_call *c, const json_t *obj, struct cp_verr *e)
{
    const char *name = json_string_value(json_object_get(obj, "name"));
    json_t *role = json_object_get(obj, "role");
    const char *cap = json_string_value(json_object_get(obj, "capability"));
    const char *strategy = json_string_value(json_object_get(obj, "strategy"));
    json_t *aliases = json_object_get(obj, "aliases");
    json_t *entries = json_object_get(obj, "entries");
    const char *rl = json_is_string(role) ? json_string_value(role) : NULL;
    if (rl && strcmp(rl, "embedding") == 0 && strcmp(cap, "embeddings") != 0)
        return cp_verr_set(e, 400, "invalid_value", "capability",
                           "capability: the embedding role needs capability embeddings");
    if (rl && strcmp(rl, "vision") == 0 && strcmp(cap, "vision") != 0)
        return cp_verr_set(e, 400, "invalid_value", "capability",
                           "capability: the vision role needs capability vision");
    if (strcmp(strategy, "weighted") == 0) {
        json_int_t total = 0;
        size_t i;
        json_t *en;
        json_array_foreach(entries, i, en)
        {
            json_t *w = json_object_get(en, "weight");
            total += w ? json_integer_value(w) : 1;
        }
        if (total == 0)
            return cp_verr_set(e, 400, "invalid_value", "entries",
                               "entries: a weighted route needs an entry with weight above 0");
    }
    size_t i;
    json_t *a;
    json_array_foreach(aliases, i, a)
    {
        if (strcmp(json_string_value(a), name) == 0)
            return cp_verr_set(e, 400, "invalid_value", "aliases",
                               "aliases[%zu]: '%s' is the route's own name", i, name);
    }
    json_t *mine = json_array();
    json_array_append_new(mine, json_string(name));
    json_array_extend(mine, aliases);
    char *mine_s = json_dumps(mine, JSON_COMPACT);
    json_decref(mine);
    const char *p[] = {name, mine_s ? gw_pool_strdup(c->pool, mine_s) : NULL, rl};
    free(mine_s);
    if (!p[1])
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    struct cp_db_err err;
    /* Another route whose name or an alias is one of ours. */
    PGresult *r =
        cp_db_exec(c->db, c->pool,
                   "WITH mine AS (SELECT jsonb_array_elements_text($2::jsonb) AS n) "
                   "SELECT r.name || chr(9) || m.n FROM routes r, mine m WHERE r.name <> $1 AND "
                   "(r.name = m.n OR m.n = ANY (r.aliases)) ORDER BY r.name LIMIT 1",
                   2, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check routes: %s",
                           err.message);
    const char *hit = cp_db_value(r);
    if (hit) {
        const char *tab = strchr(hit, '\t');
        const char *n = tab ? tab + 1 : hit;
        return cp_verr_set(e, 409, "name_collision", strcmp(n, name) == 0 ? "name" : "aliases",
                           "%s: '%s' is already the name or an alias of route '%.*s'; names and "
                           "aliases share one namespace",
                           strcmp(n, name) == 0 ? "name" : "aliases", n, (int)(tab ? tab - hit : 0),
                           hit);
    }
    /* A name or alias that is a role some route holds (ours included). */
    r = cp_db_exec(c->db, c->pool,
                   "WITH mine AS (SELECT jsonb_array_elements_text($2::jsonb) AS n) "
                   "SELECT m.n FROM mine m WHERE m.n = $3 OR EXISTS (SELECT 1 FROM routes r "
                   "WHERE r.name <> $1 AND r.role = m.n) LIMIT 1",
                   3, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check routes: %s",
                           err.message);
    if ((hit = cp_db_value(r)))
        return cp_verr_set(e, 409, "name_collision", strcmp(hit, name) == 0 ? "name" : "aliases",
                           "%s: '%s' is a role held by a route; a role may not also be a route "
                           "name or alias",
                           strcmp(hit, name) == 0 ? "name" : "aliases", hit);
    /* A guard's classifier and a judge name another chat route. */
    if (cp_res_guard_refs(c, obj, e))
        return GW_EINVAL;
    if (!rl)
        return GW_OK;
    r = cp_db_exec(c->db, c->pool,
                   "SELECT name FROM routes WHERE name <> $1 AND (role = $2 OR name = $2 OR "
                   "$2 = ANY (aliases)) ORDER BY role = $2 DESC, name LIMIT 1",
                   2, (const char *const[]){name, rl}, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check routes: %s",
                           err.message);
    if ((hit = cp_db_value(r)))
        return cp_verr_set(e, 409, "duplicate_role", "role",
                           "role: '%s' is already held by (or is the name or an alias of) route "
                           "'%s'; a role names one route",
                           rl, hit);
    return GW_OK;
}

/* Replaces the route's entries, in order, defaults filled. */
static int write_entries(struct cp_call *c, const json_t *obj, const char *key, struct cp_verr *e)
{
    char *ents = json_dumps(json_object_get(obj, "entries"), JSON_COMPACT);
    const char *p[] = {key, ents ? gw_pool_strdup(c->pool, ents) : NULL};
    free(ents);
    if (!p[1])
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    struct cp_db_err err;
    if (cp_db_cmd(c->db, "DELETE FROM route_entries WHERE route = $1", 1, p, &err) ||
        cp_db_cmd(c->db,
                  "INSERT INTO route_entries (route, position, provider, model, weight, "
                  "high_cost, tier) SELECT $1, (a.o - 1)::int, a.x->>'provider', a.x->>'model', "
                  "coalesce((a.x->>'weight')::int, 1), coalesce((a.x->>'high_cost')::boolean, "
                  "false), coalesce((a.x->>'tier')::smallint, 0) "
                  "FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS a(x, o)",
                  2, p, &err))
        return cp_verr_set(e, strncmp(err.sqlstate, "23", 2) == 0 ? 409 : 503,
                           strncmp(err.sqlstate, "23", 2) == 0 ? "conflict"
                                                               : "database_unavailable",
                           "entries", "entries: refused by the database: %s", err.message);
    return GW_OK;
}

static const struct cp_field route_fields[] = {
    {.name = "name", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "aliases", .type = CP_T_STRLIST, .def = "[]", .check = check_aliases},
    {.name = "role",
     .type = CP_T_STRING,
     .flags = CP_F_NULLABLE,
     .choices = roles,
     .rule = "one of default, summarize, embedding, vision (or null)"},
    {.name = "capability",
     .type = CP_T_STRING,
     .def = "\"chat\"",
     .choices = capabilities,
     .rule = "one of chat, embeddings, vision, transcription, speech, image"},
    {.name = "strategy",
     .type = CP_T_STRING,
     .def = "\"ordered\"",
     .choices = strategies,
     .rule = "one of ordered, price, latency, auto, weighted"},
    /* The failover budget of a request that sets none (null: the data
     * plane's default, 120 s); the data plane's bound. */
    {.name = "fallback_timeout_ms",
     .type = CP_T_INT,
     .flags = CP_F_NULLABLE,
     .min = 1,
     .max = 600000},
    /* How long one attempt may run, answer included (null: the data
     * plane's default, 1 h); the data plane's bound, 24 h. */
    {.name = "max_duration_ms",
     .type = CP_T_INT,
     .flags = CP_F_NULLABLE,
     .min = 1,
     .max = 86400000},
    /* The response cache: null (off) or {ttl_s, scope, deterministic},
     * stored in the three columns below (prepare_route) and shown as one
     * object again (extra_sql). */
    {.name = "cache",
     .type = CP_T_OBJECT,
     .flags = CP_F_VIRTUAL | CP_F_NULLABLE,
     .check = check_cache},
    {.name = "cache_ttl_s", .type = CP_T_INT, .flags = CP_F_HIDDEN | CP_F_NULLABLE},
    {.name = "cache_scope", .type = CP_T_STRING, .flags = CP_F_HIDDEN},
    {.name = "cache_deterministic", .type = CP_T_BOOL, .flags = CP_F_HIDDEN},
    /* The prompt-injection guard and the answer judge (docs/guardrails.md):
     * null (off) or an object, stored with its defaults filled in. */
    {.name = "guard", .type = CP_T_OBJECT, .flags = CP_F_NULLABLE, .check = cp_res_check_guard},
    {.name = "judge", .type = CP_T_OBJECT, .flags = CP_F_NULLABLE, .check = cp_res_check_judge},
    {.name = "entries",
     .type = CP_T_ARRAY,
     .flags = CP_F_VIRTUAL | CP_F_REQUIRED,
     .check = check_entries},
};

const struct cp_resource cp_res_routes = {
    .name = "routes",
    .singular = "route",
    .table = "routes",
    .fields = route_fields,
    .nfields = sizeof(route_fields) / sizeof(route_fields[0]),
    .check = check_route,
    .before_delete = cp_res_guard_route_in_use,
    .prepare = prepare_route,
    .after_write = write_entries,
    .write_lock = CP_ROUTES_LOCK_KEY,
    .extra_sql = "jsonb_build_object('entries', (SELECT coalesce(jsonb_agg(jsonb_build_object("
                 "'provider', e.provider, 'model', e.model, 'weight', e.weight, 'high_cost', "
                 "e.high_cost, 'tier', e.tier) ORDER BY e.position), '[]'::jsonb) "
                 "FROM route_entries e WHERE e.route = t.name), 'cache', CASE WHEN t.cache_ttl_s "
                 "IS NULL THEN NULL ELSE jsonb_build_object('ttl_s', t.cache_ttl_s, 'scope', "
                 "t.cache_scope, 'deterministic', t.cache_deterministic) END)",
};
