/*
 * dp_snapshot's route builder: a route's entries (each a provider's model
 * with its weight and tier), its strategy, failover budget, cache, guard
 * and judge settings, checked field by field and against the providers the
 * snapshot holds. dp_snapshot.c makes the route's item around it
 * (dps_build_route).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver_catalog.h"
#include "dp_guard_rules.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "dp_snapshot_int.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_log.h"

static const char *const strategy_names[] = {
    [DP_STRATEGY_ORDERED] = "ordered",   [DP_STRATEGY_PRICE] = "price",
    [DP_STRATEGY_LATENCY] = "latency",   [DP_STRATEGY_AUTO] = "auto",
    [DP_STRATEGY_WEIGHTED] = "weighted", NULL};
const char *dp_strategy_name(enum dp_strategy st)
{
    return st <= DP_STRATEGY_WEIGHTED ? strategy_names[st] : "?";
}

static const char *const role_names[] = {"default", "summarize", "embedding", "vision", NULL};
static const char *const capability_names[] = {"chat",   "embeddings", "vision", "transcription",
                                               "speech", "image",      NULL};

/* Everything that decides where a route's requests go, so that a session
 * stuck to one of its providers comes loose when the route is edited.
 * Strings end with their NUL and integers have a fixed width, so two
 * different routes never feed the same bytes. */
static uint64_t route_fingerprint(const struct dp_route *r)
{
    uint64_t h = GW_FNV1A_INIT;
    uint32_t st = (uint32_t)r->strategy;
    h = gw_fnv1a(h, r->name, strlen(r->name) + 1);
    h = gw_fnv1a(h, r->capability, strlen(r->capability) + 1);
    h = gw_fnv1a(h, &st, sizeof(st));
    for (size_t i = 0; i < r->nentries; i++) {
        const struct dp_route_entry *e = &r->entries[i];
        uint32_t nums[3] = {e->weight, (uint32_t)e->high_cost, (uint32_t)e->tier};
        h = gw_fnv1a(h, e->provider->name, strlen(e->provider->name) + 1);
        h = gw_fnv1a(h, e->model, strlen(e->model) + 1);
        h = gw_fnv1a(h, nums, sizeof(nums));
    }
    return h;
}

static void build_entry(struct build *b, const struct dp_snapshot *s, struct dp_route *r,
                        const json_t *e, const char *ew)
{
    if (!json_is_object(e)) {
        dps_fail(b, "%s: must be an object", ew);
        return;
    }
    const char *pn = dps_req_str(b, e, "provider", ew);
    const char *model = dps_req_str(b, e, "model", ew);
    if (b->failed)
        return;
    const struct dp_provider *p = dps_find_provider(s, pn, strlen(pn));
    if (!p) {
        dps_fail(b, "%s.provider: no provider named '%s'", ew, pn);
        return;
    }
    for (size_t k = 0; k < r->nentries; k++)
        if (r->entries[k].provider == p && strcmp(r->entries[k].model, model) == 0) {
            dps_fail(b, "%s: duplicate entry %s/%s (also entries[%zu])", ew, pn, model, k);
            return;
        }
    struct dp_route_entry *en = &r->entries[r->nentries];
    en->provider = p;
    en->model = model;
    en->weight = (unsigned)dps_opt_int(b, e, "weight", ew, 0, 1000000, 1, "");
    en->high_cost = dps_opt_bool(b, e, "high_cost", ew, 0);
    en->tier = (int)dps_opt_int(b, e, "tier", ew, 0, 9, 0, "");
    if (!b->failed)
        r->nentries++;
}

static const char *const cache_scope_names[] = {[DP_CACHE_SCOPE_TEAM] = "team",
                                                [DP_CACHE_SCOPE_KEY] = "key",
                                                [DP_CACHE_SCOPE_PROJECT] = "project",
                                                [DP_CACHE_SCOPE_GLOBAL] = "global",
                                                NULL};

/* A route's "cache" object (docs/cache.md): absent or null, off; else
 * ttl_s (required), scope and deterministic, and no other member. */
static void build_route_cache(struct build *b, struct dp_route_cache *c, const json_t *o,
                              const char *where)
{
    const json_t *v = json_object_get(o, "cache");
    if (!v || json_is_null(v))
        return;
    char cw[200];
    snprintf(cw, sizeof(cw), "%s.cache", where);
    if (!json_is_object(v)) {
        dps_fail(b, "%s: must be an object (ttl_s, scope, deterministic) or null", cw);
        return;
    }
    const char *k;
    const json_t *m;
    json_object_foreach((json_t *)v, k, m)
    {
        if (strcmp(k, "ttl_s") && strcmp(k, "scope") && strcmp(k, "deterministic")) {
            dps_fail(b, "%s.%.64s: unknown member (ttl_s, scope, deterministic)", cw, k);
            return;
        }
    }
    if (!json_object_get(v, "ttl_s") || json_is_null(json_object_get(v, "ttl_s"))) {
        dps_fail(b, "%s.ttl_s: required, an integer from 1 to %ld (s)", cw, DP_CACHE_MAX_TTL_S);
        return;
    }
    long ttl = (long)dps_opt_int(b, v, "ttl_s", cw, 1, DP_CACHE_MAX_TTL_S, 0, " (s)");
    const char *scope = dps_opt_enum(b, v, "scope", cw, cache_scope_names, "team");
    int det = dps_opt_bool(b, v, "deterministic", cw, 0);
    if (b->failed)
        return;
    c->ttl_s = ttl;
    c->scope = (enum dp_cache_scope)dps_enum_index(cache_scope_names, scope);
    c->deterministic = det;
}

static const char *const severity_names[] = {
    [DP_GUARD_LOW] = "low", [DP_GUARD_MEDIUM] = "medium", [DP_GUARD_HIGH] = "high", NULL};

/* Fails when o has a member not in names (NULL-terminated). */
static int only_members(struct build *b, const json_t *o, const char *where,
                        const char *const *names, const char *list)
{
    const char *k;
    const json_t *m;
    json_object_foreach((json_t *)o, k, m)
    {
        const char *const *n = names;
        while (*n && strcmp(*n, k))
            n++;
        if (!*n) {
            dps_fail(b, "%s.%.64s: unknown member (%s)", where, k, list);
            return 0;
        }
    }
    return 1;
}

/* A route's "guard" object (docs/guardrails.md): absent or null, off. */
static void build_route_guard(struct build *b, struct dp_route_guard *g, const json_t *o,
                              const char *where)
{
    const json_t *v = json_object_get(o, "guard");
    g->inspect = DP_GUARD_INSPECT_LAST_USER;
    g->rules = 1;
    g->classifier_timeout_ms = 2000;
    if (!v || json_is_null(v))
        return;
    char gw[200];
    snprintf(gw, sizeof(gw), "%s.guard", where);
    static const char *const members[] = {"policy",       "inspect",    "rules",
                                          "min_severity", "classifier", NULL};
    if (!json_is_object(v)) {
        dps_fail(b,
                 "%s: must be an object (policy, inspect, rules, min_severity, classifier)"
                 " or null",
                 gw);
        return;
    }
    if (!only_members(b, v, gw, members, "policy, inspect, rules, min_severity, classifier"))
        return;
    if (!json_is_string(json_object_get(v, "policy"))) {
        dps_fail(b, "%s.policy: required, one of off, log, block", gw);
        return;
    }
    const char *pol = dps_opt_enum(b, v, "policy", gw, dps_guard_policy_names, "off");
    const char *sev = dps_opt_enum(b, v, "min_severity", gw, severity_names, "low");
    g->rules = dps_opt_bool(b, v, "rules", gw, 1);
    const json_t *in = json_object_get(v, "inspect");
    if (in && !json_is_null(in)) {
        static const char *const what[] = {"last_user", "user", "tool", "system"};
        if (!json_is_array(in) || json_array_size(in) == 0) {
            dps_fail(b, "%s.inspect: must be a non-empty array of last_user, user, tool, system",
                     gw);
            return;
        }
        g->inspect = 0;
        size_t i;
        const json_t *e;
        json_array_foreach(in, i, e)
        {
            const char *w = json_string_value(e);
            size_t k = 0;
            while (w && k < 4 && strcmp(what[k], w))
                k++;
            if (!w || k == 4) {
                dps_fail(b, "%s.inspect[%zu]: must be one of last_user, user, tool, system", gw, i);
                return;
            }
            g->inspect |= 1u << k;
        }
    }
    const json_t *c = json_object_get(v, "classifier");
    if (c && !json_is_null(c)) {
        char cw[240];
        snprintf(cw, sizeof(cw), "%s.classifier", gw);
        static const char *const cm[] = {"route", "timeout_ms", "on_error", NULL};
        static const char *const on_error[] = {"fail_open", "fail_closed", NULL};
        if (!json_is_object(c)) {
            dps_fail(b, "%s: must be an object (route, timeout_ms, on_error) or null", cw);
            return;
        }
        if (!only_members(b, c, cw, cm, "route, timeout_ms, on_error"))
            return;
        g->classifier = dps_req_str(b, c, "route", cw);
        g->classifier_timeout_ms =
            (long)dps_opt_int(b, c, "timeout_ms", cw, 1, DP_GUARD_MAX_CLASSIFIER_MS, 2000, " (ms)");
        const char *oe = dps_opt_enum(b, c, "on_error", cw, on_error, "fail_open");
        g->fail_closed = oe && strcmp(oe, "fail_closed") == 0;
    }
    if (b->failed)
        return;
    g->set = 1;
    g->policy = (enum dp_guard_policy)dps_enum_index(dps_guard_policy_names, pol);
    g->min_severity = dps_enum_index(severity_names, sev);
}

/* A route's "judge" object (docs/guardrails.md): absent or null, off. */
static void build_route_judge(struct build *b, struct dp_route_judge *j, const json_t *o,
                              const char *where)
{
    const json_t *v = json_object_get(o, "judge");
    if (!v || json_is_null(v))
        return;
    char jw[200];
    snprintf(jw, sizeof(jw), "%s.judge", where);
    static const char *const members[] = {"sample_rate", "route", "rubric", "keep_text", NULL};
    if (!json_is_object(v)) {
        dps_fail(b, "%s: must be an object (sample_rate, route, rubric, keep_text) or null", jw);
        return;
    }
    if (!only_members(b, v, jw, members, "sample_rate, route, rubric, keep_text"))
        return;
    const json_t *rate = json_object_get(v, "sample_rate");
    if (!json_is_number(rate) || json_number_value(rate) < 0 || json_number_value(rate) > 1) {
        dps_fail(b, "%s.sample_rate: required, a number from 0 to 1", jw);
        return;
    }
    const char *route = dps_req_str(b, v, "route", jw);
    j->keep_text = dps_opt_bool(b, v, "keep_text", jw, 0);
    const json_t *ru = json_object_get(v, "rubric");
    char rw[240];
    snprintf(rw, sizeof(rw), "%s.rubric", jw);
    static const char *const rm[] = {"template", "scale_min", "scale_max", "pass_min", NULL};
    if (b->failed)
        return;
    if (!json_is_object(ru)) {
        dps_fail(b, "%s: required, an object (template, scale_min, scale_max, pass_min)", rw);
        return;
    }
    if (!only_members(b, ru, rw, rm, "template, scale_min, scale_max, pass_min"))
        return;
    const char *t = dps_req_str(b, ru, "template", rw);
    if (b->failed)
        return;
    if (strlen(t) > DP_JUDGE_MAX_TEMPLATE || !strstr(t, "{{prompt}}") || !strstr(t, "{{answer}}")) {
        dps_fail(b, "%s.template: must hold {{prompt}} and {{answer}}, in at most %d bytes", rw,
                 DP_JUDGE_MAX_TEMPLATE);
        return;
    }
    int lo = (int)dps_opt_int(b, ru, "scale_min", rw, -100, 100, 1, "");
    int hi = (int)dps_opt_int(b, ru, "scale_max", rw, -100, 100, 5, "");
    if (!b->failed && hi <= lo) {
        dps_fail(b, "%s.scale_max: must be above scale_min (%d)", rw, lo);
        return;
    }
    int pass = (int)dps_opt_int(b, ru, "pass_min", rw, lo, hi, hi, " (within the scale)");
    if (b->failed)
        return;
    j->sample_rate = json_number_value(rate);
    j->route = route;
    j->rubric = t;
    j->scale_min = lo;
    j->scale_max = hi;
    j->pass_min = pass;
}

void dps_route_fill(struct build *b, const struct dp_snapshot *s, struct dp_route *r,
                    const json_t *o, const char *where)
{
    r->name = dps_req_str(b, o, "name", where);
    r->role = dps_opt_enum(b, o, "role", where, role_names, NULL);
    r->capability = dps_opt_enum(b, o, "capability", where, capability_names, "chat");
    const char *strategy = dps_opt_enum(b, o, "strategy", where, strategy_names, "ordered");
    if (b->failed)
        return;
    size_t si = 0;
    while (strategy_names[si] != strategy)
        si++;
    r->strategy = (enum dp_strategy)si;
    r->fallback_timeout_ms = (long)dps_opt_int(b, o, "fallback_timeout_ms", where, 1,
                                               DP_MAX_FALLBACK_TIMEOUT_MS, 0, " (ms)");
    r->max_duration_ms =
        (long)dps_opt_int(b, o, "max_duration_ms", where, 1, DP_MAX_DURATION_MS, 0, " (ms)");
    if (b->failed)
        return;
    if (strchr(r->name, '/')) {
        dps_fail(b, "%s.name: '%s' may not contain '/' (reserved for provider/model)", where,
                 r->name);
        return;
    }
    /* A role promises what its route serves. */
    if (r->role && strcmp(r->role, "embedding") == 0 && strcmp(r->capability, "embeddings")) {
        dps_fail(b, "%s.capability: the embedding role needs capability embeddings", where);
        return;
    }
    if (r->role && strcmp(r->role, "vision") == 0 && strcmp(r->capability, "vision")) {
        dps_fail(b, "%s.capability: the vision role needs capability vision", where);
        return;
    }
    json_t *al = json_object_get(o, "aliases");
    if (al && !json_is_null(al)) {
        if (!json_is_array(al)) {
            dps_fail(b, "%s.aliases: must be an array of strings", where);
            return;
        }
        r->aliases = gw_pool_calloc(b->pool, (json_array_size(al) + 1) * sizeof(char *));
        size_t j;
        json_t *v;
        json_array_foreach(al, j, v)
        {
            if (!json_is_string(v) || !json_string_length(v) || strchr(json_string_value(v), '/')) {
                dps_fail(b, "%s.aliases[%zu]: must be a non-empty string without '/'", where, j);
                return;
            }
            r->aliases[r->naliases++] = gw_pool_strdup(b->pool, json_string_value(v));
        }
    }
    json_t *en = json_object_get(o, "entries");
    if (!json_is_array(en) || json_array_size(en) == 0) {
        dps_fail(b, "%s.entries: required, a non-empty array", where);
        return;
    }
    if (json_array_size(en) > DP_MAX_CANDIDATES) {
        dps_fail(b, "%s.entries: at most %d entries", where, DP_MAX_CANDIDATES);
        return;
    }
    r->entries = gw_pool_calloc(b->pool, json_array_size(en) * sizeof(*r->entries));
    unsigned long long total_weight = 0;
    size_t j;
    json_t *e;
    json_array_foreach(en, j, e)
    {
        char ew[160];
        snprintf(ew, sizeof(ew), "%s.entries[%zu]", where, j);
        build_entry(b, s, r, e, ew);
        if (b->failed)
            return;
        total_weight += r->entries[j].weight;
    }
    if (r->strategy == DP_STRATEGY_WEIGHTED && total_weight == 0) {
        dps_fail(b, "%s.entries: a weighted route needs an entry with weight above 0", where);
        return;
    }
    r->fingerprint = route_fingerprint(r);
    build_route_cache(b, &r->cache, o, where);
    build_route_guard(b, &r->guard, o, where);
    build_route_judge(b, &r->judge, o, where);
}
