/*
 * dp_snapshot: the element builders. Each turns one resource of a document
 * (a provider, a route, the catalog, a team, a project, a limit, a key)
 * into an item of its own (dp_snapshot_int.h), checking its fields and
 * what it names; a route's fields, dp_snapshot_route.c. The whole build is
 * dp_snapshot_build.c; a delta's apply,
 * dp_snapshot_apply.c; the field readers, dp_snapshot_fields.c; the
 * lookups, items' lifetime and the published snapshot,
 * dp_snapshot_lookup.c.
 */
#include "dp_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver_catalog.h"
#include "dp_guard_rules.h"
#include "dp_router.h"
#include "dp_snapshot_int.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_log.h"

static void decref_json(void *j)
{
    json_decref(j);
}

static const char *resolve_credential(const char *ref, const char *provider)
{
    if (!ref)
        return NULL;
    if (strncmp(ref, "env:", 4) == 0) {
        const char *v = getenv(ref + 4);
        if (v && *v)
            return v;
    }
    /* Never fatal: the provider stays, without credentials, and says so. */
    gw_logf(GW_LOG_WARN, "credential_ref does not resolve", "{s:s,s:s}", "provider", provider,
            "credential_ref", ref);
    return NULL;
}

static void build_provider(struct build *b, struct dp_provider *p, const json_t *o,
                           const char *where)
{
    p->name = dps_req_str(b, o, "name", where);
    p->driver = dps_req_str(b, o, "driver", where);
    const char *url = dps_req_str(b, o, "base_url", where);
    if (b->failed)
        return;
    if (p->name[strcspn(p->name, "/ \t")] != '\0') {
        dps_fail(b, "%s.name: '%s' may not contain '/' or spaces", where, p->name);
        return;
    }
    p->drv = dp_driver_info_find(p->driver);
    if (!p->drv) {
        char names[256];
        dp_driver_catalog_names(names, sizeof(names));
        dps_fail(b, "%s.driver: unknown driver '%s' (supported: %s)", where, p->driver, names);
        return;
    }
    json_t *opts = json_object_get(o, "options");
    if (opts && !json_is_null(opts) && !json_is_object(opts)) {
        dps_fail(b, "%s.options: must be an object", where);
        return;
    }
    p->options = opts && json_is_object(opts) ? json_deep_copy(opts) : json_object();
    if (!p->options || gw_pool_cleanup(b->pool, decref_json, p->options)) {
        json_decref(p->options);
        dps_fail(b, "%s.options: out of memory", where);
        return;
    }
    p->caps = p->drv->caps;
    json_t *caps = json_object_get(p->options, "capabilities");
    if (caps) {
        char cw[80];
        snprintf(cw, sizeof(cw), "%s.options.capabilities", where);
        p->caps = dps_parse_caps(b, caps, cw, p->drv);
        if (b->failed)
            return;
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        dps_fail(b, "%s.base_url: must start with http:// or https://", where);
        return;
    }
    /* A host after the scheme: "http://" alone lost its slashes below and
     * became "http:". */
    size_t hl = url[4] == 's' ? 8 : 7;
    if (url[hl] == '\0' || url[hl] == '/') {
        dps_fail(b, "%s.base_url: must name a host after the scheme", where);
        return;
    }
    size_t ul = strlen(url);
    while (ul > 0 && url[ul - 1] == '/')
        ul--;
    p->base_url = gw_pool_strndup(b->pool, url, ul);
    p->credential_ref = dps_opt_str(b, o, "credential_ref", where, NULL);
    json_t *inline_cred = json_object_get(o, "credential");
    if (inline_cred && !(b->flags & DP_SNAPSHOT_PUSHED)) {
        /* A file must never hold a key (ARCHITECTURE invariant 8). */
        dps_fail(
            b,
            "%s.credential: inline credentials are refused in a snapshot file (files must never "
            "hold keys): name one with credential_ref, e.g. \"env:NAME\"",
            where);
        return;
    }
    if (b->flags & DP_SNAPSHOT_PUSHED) {
        /* The control plane resolved the ref: the value is inline or absent. */
        if (inline_cred && !json_is_null(inline_cred) &&
            (!json_is_string(inline_cred) || json_string_length(inline_cred) == 0)) {
            dps_fail(b, "%s.credential: must be a non-empty string", where);
            return;
        }
        p->credential = json_is_string(inline_cred)
                            ? gw_pool_strdup(b->pool, json_string_value(inline_cred))
                            : NULL;
    } else {
        p->credential = p->credential_ref ? resolve_credential(p->credential_ref, p->name) : NULL;
        if (p->credential)
            p->credential = gw_pool_strdup(b->pool, p->credential);
    }
    p->enabled = dps_opt_bool(b, o, "enabled", where, 1);
    p->first_byte_timeout_ms = dps_opt_ms(b, o, "first_byte_timeout_ms", where, 60000);
    p->idle_timeout_ms = dps_opt_ms(b, o, "idle_timeout_ms", where, 60000);
    json_t *h = json_object_get(o, "headers");
    if (h && !json_is_null(h)) {
        if (!json_is_object(h)) {
            dps_fail(b, "%s.headers: must be an object of strings", where);
            return;
        }
        p->headers = gw_pool_calloc(b->pool, (json_object_size(h) + 1) * sizeof(char *));
        const char *k;
        json_t *v;
        json_object_foreach(h, k, v)
        {
            const char *sv = json_string_value(v);
            if (!sv || strpbrk(k, "\r\n: ") || strpbrk(sv, "\r\n") || !*k) {
                dps_fail(b, "%s.headers.%s: must be a single-line string with a valid name", where,
                         k);
                return;
            }
            p->headers[p->nheaders++] = gw_pool_printf(b->pool, "%s: %s", k, sv);
        }
    }
}

/* money: an integer count of picodollars, never a float. The ceiling (one
 * dollar a token) keeps every sum and product the router makes far from
 * overflow. */
#define MAX_PRICE 1000000000000LL

static long long opt_price_of(struct build *b, const json_t *v, const char *where, const char *key,
                              const char *unit)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > MAX_PRICE) {
        dps_fail(b,
                 "%s.%s: must be an integer count of picodollars per %s, 0 to %lld (money is "
                 "never a float)",
                 where, key, unit, MAX_PRICE);
        return -1;
    }
    return json_integer_value(v);
}

static long long opt_price_per(struct build *b, const json_t *o, const char *key, const char *where,
                               const char *unit)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return -1;
    return opt_price_of(b, v, where, key, unit);
}

static long long opt_price(struct build *b, const json_t *o, const char *key, const char *where)
{
    return opt_price_per(b, o, key, where, "token");
}

int dp_snapshot_image_key_ok(const char *k)
{
    const char *slash = strchr(k, '/');
    const char *size = slash ? slash + 1 : k;
    if (slash) {
        if (slash == k || slash - k > 16)
            return 0;
        for (const char *c = k; c < slash; c++)
            if (*c < 'a' || *c > 'z')
                return 0;
    }
    if (strcmp(size, "auto") == 0)
        return 1;
    size_t n = strlen(size), w = strspn(size, "0123456789");
    return w >= 1 && w <= 5 && size[w] == 'x' && n - w - 1 >= 1 && n - w - 1 <= 5 &&
           strspn(size + w + 1, "0123456789") == n - w - 1;
}

/* "image_prices": {"1024x1024": N, "hd/1024x1024": N, ...}. */
static void opt_image_prices(struct build *b, const json_t *o, const char *where,
                             struct dp_price *p)
{
    const json_t *v = json_object_get(o, "image_prices");
    if (!v || json_is_null(v))
        return;
    char w[80];
    snprintf(w, sizeof(w), "%s.image_prices", where);
    if (!json_is_object(v) || json_object_size(v) > DP_MAX_IMAGE_PRICES) {
        dps_fail(b, "%s: must be an object of at most %d prices by size or quality/size", w,
                 DP_MAX_IMAGE_PRICES);
        return;
    }
    struct dp_image_price *ip = gw_pool_calloc(b->pool, (json_object_size(v) + 1) * sizeof(*ip));
    if (!ip) {
        dps_fail(b, "out of memory");
        return;
    }
    const char *k;
    json_t *pv;
    size_t n = 0;
    json_object_foreach((json_t *)v, k, pv)
    {
        if (!dp_snapshot_image_key_ok(k)) {
            dps_fail(b,
                     "%s: '%.40s' is not a size (\"1024x1024\", \"auto\") or a quality and a "
                     "size (\"hd/1024x1024\")",
                     w, k);
            return;
        }
        ip[n].price = opt_price_of(b, pv, w, k, "image");
        if (b->failed || !(ip[n].key = gw_pool_strdup(b->pool, k))) {
            if (!b->failed)
                dps_fail(b, "out of memory");
            return;
        }
        n++;
    }
    p->image_prices = ip;
    p->nimage_prices = n;
}

static void build_catalog_entry(struct build *b, const struct dp_snapshot *s,
                                struct dp_catalog_entry *entries, const json_t *o, size_t i)
{
    struct dp_catalog_entry *c = &entries[i];
    char where[48];
    snprintf(where, sizeof(where), "catalog[%zu]", i);
    if (!json_is_object(o)) {
        dps_fail(b, "%s: must be an object", where);
        return;
    }
    c->provider = dps_opt_str(b, o, "provider", where, NULL);
    c->model = dps_req_str(b, o, "model", where);
    if (b->failed)
        return;
    if (c->provider && !dps_find_provider(s, c->provider, strlen(c->provider))) {
        dps_fail(b, "%s.provider: no provider named '%s'", where, c->provider);
        return;
    }
    c->context_window = dps_opt_int(b, o, "context_window", where, 1, 1LL << 40, 0, " (tokens)");
    json_t *caps = json_object_get(o, "capabilities");
    if (caps && !json_is_null(caps)) {
        char cw[80];
        snprintf(cw, sizeof(cw), "%s.capabilities", where);
        c->caps = dps_parse_caps(b, caps, cw, NULL);
        c->has_caps = 1;
    }
    struct dp_price *p = &c->price;
    p->input = opt_price(b, o, "input_price", where);
    p->output = opt_price(b, o, "output_price", where);
    p->cache_read = opt_price(b, o, "cache_read_price", where);
    p->cache_write_5m = opt_price(b, o, "cache_write_5m_price", where);
    p->cache_write_1h = opt_price(b, o, "cache_write_1h_price", where);
    p->reasoning = opt_price(b, o, "reasoning_price", where);
    p->audio_second = opt_price_per(b, o, "audio_second_price", where, "second of audio");
    p->character = opt_price_per(b, o, "character_price", where, "character");
    p->image = opt_price_per(b, o, "image_price", where, "image");
    p->media_input = opt_price(b, o, "media_input_price", where);
    p->media_output = opt_price(b, o, "media_output_price", where);
    opt_image_prices(b, o, where, p);
    /* The currency goes with the prices, never converted. */
    const char *cur = dps_opt_str(b, o, "currency", where, "USD");
    c->max_output_tokens =
        dps_opt_int(b, o, "max_output_tokens", where, 1, 1LL << 40, 0, " (tokens)");
    if (b->failed)
        return;
    if (strlen(cur) != 3 || cur[0] < 'A' || cur[0] > 'Z' || cur[1] < 'A' || cur[1] > 'Z' ||
        cur[2] < 'A' || cur[2] > 'Z') {
        dps_fail(b, "%s.currency: must be three capital letters (ISO 4217), e.g. USD", where);
        return;
    }
    memcpy(p->currency, cur, 4);
}

/* allow_routes, allow_providers and allow_models of a key, team or project. */
static void build_allowlists(struct build *b, const json_t *o, const char *where,
                             struct dp_allowlists *a)
{
    dps_opt_str_list(b, o, "allow_routes", where, &a->routes, &a->nroutes);
    dps_opt_str_list(b, o, "allow_providers", where, &a->providers, &a->nproviders);
    dps_opt_str_list(b, o, "allow_models", where, &a->models, &a->nmodels);
}

/* A key's or team's "cache_ttl_s": absent or null, the route decides
 * (*has 0); 0, off for it; N, on with TTL N on every route. */
static void opt_cache_ttl(struct build *b, const json_t *o, const char *where, int *has, long *ttl)
{
    const json_t *v = json_object_get(o, "cache_ttl_s");
    if (!v || json_is_null(v))
        return;
    long t = (long)dps_opt_int(b, o, "cache_ttl_s", where, 0, DP_CACHE_MAX_TTL_S, 0,
                               " (s; 0: off, null: the route's setting)");
    if (b->failed)
        return;
    *has = 1;
    *ttl = t;
}

/* A key's or team's "guard_policy": absent or null, the route decides. */
static void opt_guard_policy(struct build *b, const json_t *o, const char *where, int *has,
                             enum dp_guard_policy *p)
{
    const json_t *v = json_object_get(o, "guard_policy");
    if (!v || json_is_null(v))
        return;
    const char *name = dps_opt_enum(b, o, "guard_policy", where, dps_guard_policy_names, NULL);
    if (b->failed || !name)
        return;
    *has = 1;
    *p = (enum dp_guard_policy)dps_enum_index(dps_guard_policy_names, name);
}

static void build_key(struct build *b, struct dp_key *k, const json_t *o, const char *where)
{
    k->id = dps_req_str(b, o, "id", where);
    const char *h = dps_req_str(b, o, "hash", where);
    k->status = dps_opt_str(b, o, "status", where, "active");
    k->team = dps_opt_str(b, o, "team", where, NULL);
    k->project = dps_opt_str(b, o, "project", where, NULL);
    k->expires_at_ms = dps_opt_int(b, o, "expires_at_ms", where, 0, 1LL << 52, 0, " (Unix ms)");
    if (b->failed)
        return;
    if (strlen(h) != 64 || h[strspn(h, "0123456789abcdef")] != '\0') {
        dps_fail(b, "%s.hash: must be 64 lowercase hex digits (sha256 of the key)", where);
        return;
    }
    memcpy(k->hash, h, 65);
    build_allowlists(b, o, where, &k->allow);
    opt_cache_ttl(b, o, where, &k->has_cache_ttl, &k->cache_ttl_s);
    opt_guard_policy(b, o, where, &k->has_guard_policy, &k->guard_policy);
}

static void build_team(struct build *b, struct dp_team *t, const json_t *o, const char *where)
{
    t->name = dps_req_str(b, o, "name", where);
    if (b->failed)
        return;
    build_allowlists(b, o, where, &t->allow);
    t->require_budget = dps_opt_bool(b, o, "require_budget", where, 0);
    opt_cache_ttl(b, o, where, &t->has_cache_ttl, &t->cache_ttl_s);
    opt_guard_policy(b, o, where, &t->has_guard_policy, &t->guard_policy);
}

static void build_project(struct build *b, const struct dp_snapshot *s, struct dp_project *p,
                          const json_t *o, const char *where)
{
    p->name = dps_req_str(b, o, "name", where);
    p->team = dps_opt_str(b, o, "team", where, NULL);
    if (b->failed)
        return;
    if (p->team && (s->present & DPS_HAS_TEAMS) && !dp_snapshot_team(s, p->team)) {
        dps_fail(b, "%s.team: no team named '%s' in teams", where, p->team);
        return;
    }
    build_allowlists(b, o, where, &p->allow);
}

/* A key's team and project resolved against the teams and projects lists,
 * when the snapshot has them: a key naming one the list lacks would have
 * its allowlists and budget rule silently skipped. */
void dps_check_key(struct build *b, const struct dp_snapshot *s, const struct dp_key *k,
                   const char *where)
{
    if (k->team && (s->present & DPS_HAS_TEAMS) && !dp_snapshot_team(s, k->team)) {
        dps_fail(b, "%s.team: no team named '%s' in teams", where, k->team);
        return;
    }
    if (!k->project || !(s->present & DPS_HAS_PROJECTS))
        return;
    const struct dp_project *p = dp_snapshot_project(s, k->project);
    if (!p) {
        dps_fail(b, "%s.project: no project named '%s' in projects", where, k->project);
        return;
    }
    const char *owner = p->team;
    if (owner && (!k->team || strcmp(owner, k->team) != 0))
        dps_fail(b, "%s.project: '%s' belongs to team '%s', the key to %s%s%s", where, k->project,
                 owner, k->team ? "'" : "", k->team ? k->team : "none", k->team ? "'" : "");
}

static const char *const scope_names[] = {
    [DP_LIMIT_KEY] = "key", [DP_LIMIT_TEAM] = "team", [DP_LIMIT_PROJECT] = "project", NULL};
static const char *const metric_names[] = {
    [DP_LIMIT_COST] = "cost", [DP_LIMIT_REQUESTS] = "requests", [DP_LIMIT_TOKENS] = "tokens", NULL};
static const char *const period_names[] = {
    [DP_LIMIT_MINUTE] = "minute", [DP_LIMIT_DAY] = "day", [DP_LIMIT_MONTH] = "month", NULL};
static const char *const reservation_names[] = {"estimate", "worst_case", NULL};
static const char *const offline_names[] = {"fail_open", "fail_closed", NULL};
static const char *const unpriced_names[] = {"refuse", "allow", NULL};

const char *dp_limit_scope_name(enum dp_limit_scope k)
{
    return scope_names[k];
}

const char *dp_limit_metric_name(enum dp_limit_metric m)
{
    return metric_names[m];
}

const char *dp_limit_period_name(enum dp_limit_period p)
{
    return period_names[p];
}

/* The admin API's bound (cp_res_limits.c). */
#define MAX_LIMIT_AMOUNT 4000000000000000000LL

static void build_limit(struct build *b, struct dp_limit *l, const json_t *o, const char *where)
{
    l->id = dps_req_str(b, o, "id", where);
    const char *kind = dps_opt_enum(b, o, "scope_kind", where, scope_names, NULL);
    l->scope = dps_req_str(b, o, "scope", where);
    const char *metric = dps_opt_enum(b, o, "metric", where, metric_names, NULL);
    const char *period = dps_opt_enum(b, o, "period", where, period_names, NULL);
    const char *res = dps_opt_enum(b, o, "reservation", where, reservation_names, "estimate");
    const char *off = dps_opt_enum(b, o, "offline", where, offline_names, "fail_open");
    const char *unp = dps_opt_enum(b, o, "unpriced", where, unpriced_names, "refuse");
    l->currency = dps_opt_str(b, o, "currency", where, "USD");
    if (b->failed)
        return;
    if (!kind || !metric || !period) {
        dps_fail(b, "%s.%s: required", where, !kind ? "scope_kind" : !metric ? "metric" : "period");
        return;
    }
    if (strlen(l->id) > 63) {
        dps_fail(b, "%s.id: at most 63 bytes", where);
        return;
    }
    json_t *amount = json_object_get(o, "amount");
    if (!json_is_integer(amount) || json_integer_value(amount) < 1 ||
        json_integer_value(amount) > MAX_LIMIT_AMOUNT) {
        dps_fail(b, "%s.amount: required, an integer from 1 to %lld (picodollars for cost)", where,
                 MAX_LIMIT_AMOUNT);
        return;
    }
    l->amount = json_integer_value(amount);
    l->scope_kind = (enum dp_limit_scope)dps_enum_index(scope_names, kind);
    l->metric = (enum dp_limit_metric)dps_enum_index(metric_names, metric);
    l->period = (enum dp_limit_period)dps_enum_index(period_names, period);
    l->worst_case = strcmp(res, "worst_case") == 0;
    l->fail_closed = strcmp(off, "fail_closed") == 0;
    l->unpriced_allow = strcmp(unp, "allow") == 0;
}

/* ---- Items: one resource each, built on a pool of its own ---- */

/* Pool blocks sized so most items fit their first (a route with several
 * entries, or a provider with headers and options, takes another). */
enum { KEY_BLOCK = 448, ITEM_BLOCK = 768, CATALOG_BLOCK = 65536 };

/* Starts an item of o; its pool becomes b's. NULL when o is not an object
 * (b failed). */
static struct dps_item *item_begin(struct build *b, enum dps_kind kind, size_t block,
                                   const json_t *o, const char *where)
{
    if (kind != DPS_CATALOG && kind != DPS_GUARD_RULES && !json_is_object(o)) {
        dps_fail(b, "%s: must be an object", where);
        return NULL;
    }
    struct dps_item *it = dps_item_new(kind, block);
    if (!it) {
        dps_fail(b, "out of memory");
        return NULL;
    }
    b->pool = it->pool;
    return it;
}

/* Ends it with its name and text; NULL (and the item freed) when b failed. */
static struct dps_item *item_end(struct build *b, struct dps_item *it, const json_t *o,
                                 const char *name)
{
    b->pool = NULL;
    if (!b->failed && dps_item_keep_src(it, o) != GW_OK)
        dps_fail(b, "out of memory");
    if (b->failed) {
        dps_item_unref(it);
        return NULL;
    }
    it->name = name ? name : "";
    return it;
}

struct dps_item *dps_build_provider(struct build *b, const json_t *o, const char *where)
{
    struct dps_item *it = item_begin(b, DPS_PROVIDER, ITEM_BLOCK, o, where);
    if (it)
        build_provider(b, &it->u.provider, o, where);
    return it ? item_end(b, it, o, it->u.provider.name) : NULL;
}

struct dps_item *dps_build_route(struct build *b, const struct dp_snapshot *s, const json_t *o,
                                 const char *where)
{
    struct dps_item *it = item_begin(b, DPS_ROUTE, ITEM_BLOCK, o, where);
    if (!it)
        return NULL;
    struct dp_route *r = &it->u.route;
    dps_route_fill(b, s, r, o, where);
    /* The route points into its providers' items: it holds them. */
    if (!b->failed && !(it->deps = gw_pool_calloc(it->pool, r->nentries * sizeof(*it->deps))))
        dps_fail(b, "out of memory");
    for (size_t i = 0; !b->failed && i < r->nentries; i++) {
        struct dps_item *p = DPS_ITEM(r->entries[i].provider);
        size_t k = 0;
        while (k < it->ndeps && it->deps[k] != p)
            k++;
        if (k == it->ndeps) {
            __atomic_add_fetch(&p->refs, 1, __ATOMIC_RELAXED);
            it->deps[it->ndeps++] = p;
        }
    }
    it = item_end(b, it, o, r->name);
    /* The route's text as kept (compact, keys sorted): any edit of it,
     * cache settings and timeouts included, changes the cache's keys. */
    if (it)
        it->u.route.content_fp = gw_fnv1a(GW_FNV1A_INIT, it->src, it->srclen);
    return it;
}

static void free_guard_rules(void *rules)
{
    dp_guard_rules_free(rules);
}

struct dps_item *dps_build_guard_rules(struct build *b, const json_t *a)
{
    if (!json_is_array(a)) {
        dps_fail(b, "guard_rules: must be an array (the whole set)");
        return NULL;
    }
    struct dps_item *it = item_begin(b, DPS_GUARD_RULES, 1024, a, "guard_rules");
    if (!it)
        return NULL;
    char msg[400];
    struct dp_guard_rules *r = dp_guard_rules_compile(a, msg, sizeof(msg));
    if (!r)
        dps_fail(b, "%s", msg);
    else if (gw_pool_cleanup(it->pool, free_guard_rules, r) != GW_OK) {
        dp_guard_rules_free(r);
        dps_fail(b, "out of memory");
    } else
        it->u.guard.rules = r;
    return item_end(b, it, a, "");
}

struct dps_item *dps_build_catalog(struct build *b, const struct dp_snapshot *s, const json_t *a)
{
    struct dps_item *it = item_begin(b, DPS_CATALOG, CATALOG_BLOCK, a, "catalog");
    if (!it)
        return NULL;
    size_t n = json_array_size(a), slots = 4;
    while (slots < 2 * n)
        slots *= 2;
    struct dp_catalog_entry *e = gw_pool_calloc(it->pool, (n + 1) * sizeof(*e));
    uint32_t *index = gw_pool_calloc(it->pool, slots * sizeof(*index));
    it->u.catalog.entries = e;
    it->u.catalog.index = index;
    it->u.catalog.mask = slots - 1;
    if (!e || !index)
        dps_fail(b, "out of memory");
    for (size_t i = 0; i < n && !b->failed; i++) {
        build_catalog_entry(b, s, e, json_array_get(a, i), i);
        if (b->failed)
            break;
        /* Each (provider, model) once; found by its model's probe. */
        size_t at = (size_t)dps_hash_name(e[i].model, strlen(e[i].model)) & (slots - 1);
        for (; index[at]; at = (at + 1) & (slots - 1)) {
            const struct dp_catalog_entry *o = &e[index[at] - 1];
            int same_provider =
                (!o->provider && !e[i].provider) ||
                (o->provider && e[i].provider && !strcmp(o->provider, e[i].provider));
            if (!same_provider || strcmp(o->model, e[i].model) != 0)
                continue;
            if (e[i].provider)
                dps_fail(b, "catalog[%zu]: duplicate entry for %s/%s (also catalog[%u])", i,
                         e[i].provider, e[i].model, index[at] - 1);
            else
                dps_fail(b,
                         "catalog[%zu]: duplicate entry for model '%s' on any provider (also "
                         "catalog[%u])",
                         i, e[i].model, index[at] - 1);
            break;
        }
        index[at] = (uint32_t)i + 1;
        it->u.catalog.n = i + 1;
    }
    return item_end(b, it, a, "");
}

struct dps_item *dps_build_team(struct build *b, const json_t *o, const char *where)
{
    struct dps_item *it = item_begin(b, DPS_TEAM, ITEM_BLOCK, o, where);
    if (it)
        build_team(b, &it->u.team, o, where);
    return it ? item_end(b, it, o, it->u.team.name) : NULL;
}

struct dps_item *dps_build_project(struct build *b, const struct dp_snapshot *s, const json_t *o,
                                   const char *where)
{
    struct dps_item *it = item_begin(b, DPS_PROJECT, ITEM_BLOCK, o, where);
    if (it)
        build_project(b, s, &it->u.project, o, where);
    return it ? item_end(b, it, o, it->u.project.name) : NULL;
}

struct dps_item *dps_build_limit(struct build *b, const json_t *o, const char *where)
{
    struct dps_item *it = item_begin(b, DPS_LIMIT, ITEM_BLOCK, o, where);
    if (it)
        build_limit(b, &it->u.limit, o, where);
    return it ? item_end(b, it, o, it->u.limit.id) : NULL;
}

struct dps_item *dps_build_key(struct build *b, const json_t *o, const char *where)
{
    struct dps_item *it = item_begin(b, DPS_KEY, KEY_BLOCK, o, where);
    if (it)
        build_key(b, &it->u.key, o, where);
    return it ? item_end(b, it, o, it->u.key.id) : NULL;
}
