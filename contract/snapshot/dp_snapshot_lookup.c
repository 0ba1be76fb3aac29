/*
 * dp_snapshot's lookups and lifetime: a built snapshot's references, the
 * published one every request starts from, and the finds: by name (routes
 * with their aliases and roles, catalog entries, teams) and by key hash.
 * The build (dp_snapshot.c) finds providers and routes with these too.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "dp_guard_rules.h"
#include "dp_snapshot_int.h"
#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_log.h"
#include "gw_time.h"

/* ---- Items and the maps that hold them ---- */

uint64_t dps_hash_name(const char *s, size_t n)
{
    return gw_mix64(gw_fnv1a(GW_FNV1A_INIT, s, n));
}

static int name_is(const char *name, const struct dps_name *k)
{
    return strncmp(name, k->s, k->n) == 0 && name[k->n] == '\0';
}

static void item_retain(void *v)
{
    __atomic_add_fetch(&((struct dps_item *)v)->refs, 1, __ATOMIC_RELAXED);
}

static void item_release(void *v)
{
    dps_item_unref(v);
}

static int eq_name(const void *v, const void *key)
{
    return name_is(((const struct dps_item *)v)->name, key);
}

static int eq_selector(const void *v, const void *key)
{
    const struct dp_route *r = &((const struct dps_item *)v)->u.route;
    if (name_is(r->name, key))
        return 1;
    for (size_t i = 0; i < r->naliases; i++)
        if (name_is(r->aliases[i], key))
            return 1;
    return 0;
}

/* Constant time: the stored hash is compared whole, whatever it holds. */
static int eq_hash(const void *v, const void *key)
{
    return gw_ct_equal(((const struct dps_item *)v)->u.key.hash, key, 64);
}

const struct gw_pmap_ops dps_name_ops = {item_retain, item_release, eq_name};
const struct gw_pmap_ops dps_selector_ops = {item_retain, item_release, eq_selector};
const struct gw_pmap_ops dps_hash_ops = {item_retain, item_release, eq_hash};

struct dps_item *dps_get(const struct gw_pmap *m, const char *name, size_t n)
{
    struct dps_name k = {name, n};
    return gw_pmap_get(m, dps_hash_name(name, n), &k, &dps_name_ops);
}

int dps_put(struct gw_pmap *m, uint64_t hash, const void *key, struct dps_item *it,
            const struct gw_pmap_ops *ops)
{
    /* The snapshot being made holds m alone: the nodes it shares with the
     * snapshot it came from are copied, its own changed in place. */
    return gw_pmap_set_owned(m, hash, key, it, ops) ? GW_ENOMEM : GW_OK;
}

int dps_del(struct gw_pmap *m, uint64_t hash, const void *key, const struct gw_pmap_ops *ops)
{
    struct gw_pmap next;
    if (gw_pmap_del(m, hash, key, ops, &next))
        return GW_ENOMEM;
    gw_pmap_release(m, ops);
    *m = next;
    return GW_OK;
}

struct dps_item *dps_item_new(enum dps_kind kind, size_t block)
{
    struct gw_pool *pool = gw_pool_new(block);
    struct dps_item *it = pool ? gw_pool_calloc(pool, sizeof(*it)) : NULL;
    if (!it) {
        gw_pool_free(pool);
        return NULL;
    }
    it->refs = 1;
    it->kind = kind;
    it->pool = pool;
    it->name = "";
    return it;
}

int dps_item_keep_src(struct dps_item *it, const json_t *o)
{
    it->src = dp_snapshot_dump(o, JSON_COMPACT | JSON_SORT_KEYS, &it->srclen);
    return it->src ? GW_OK : GW_ENOMEM;
}

/* A provider's secrets are zeroed in place (explicit_bzero) before its
 * memory is freed: its credential, its header lines and its text. */
static void wipe_provider(struct dps_item *it)
{
    struct dp_provider *p = &it->u.provider;
    if (p->credential)
        explicit_bzero((char *)p->credential, strlen(p->credential));
    for (size_t j = 0; j < p->nheaders; j++)
        if (p->headers[j])
            explicit_bzero((char *)p->headers[j], strlen(p->headers[j]));
    if (it->src)
        explicit_bzero(it->src, it->srclen);
}

void dps_item_unref(struct dps_item *it)
{
    if (!it || __atomic_sub_fetch(&it->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    if (it->kind == DPS_PROVIDER)
        wipe_provider(it);
    for (size_t i = 0; i < it->ndeps; i++)
        dps_item_unref(it->deps[i]);
    free(it->src);
    gw_pool_free(it->pool);
}

struct dp_snapshot *dps_snapshot_new(void)
{
    struct dp_snapshot *s = calloc(1, sizeof(*s));
    if (s)
        s->refs = 1;
    return s;
}

void dps_snapshot_free(struct dp_snapshot *s)
{
    if (!s)
        return;
    gw_pmap_release(&s->providers, &dps_name_ops);
    gw_pmap_release(&s->routes, &dps_name_ops);
    gw_pmap_release(&s->selectors, &dps_selector_ops);
    gw_pmap_release(&s->keys, &dps_name_ops);
    gw_pmap_release(&s->key_hashes, &dps_hash_ops);
    gw_pmap_release(&s->teams, &dps_name_ops);
    gw_pmap_release(&s->projects, &dps_name_ops);
    gw_pmap_release(&s->limits, &dps_name_ops);
    gw_pmap_release(&s->limit_scopes, &dps_name_ops);
    dps_item_unref(s->catalog_item);
    dps_item_unref(s->guard_rules_item);
    free(s);
}

void dps_count(struct dp_snapshot *s)
{
    s->nproviders = s->providers.count;
    s->nroutes = s->routes.count;
    s->nkeys = s->keys.count;
    s->nteams = s->teams.count;
    s->nprojects = s->projects.count;
    s->nlimits = s->limits.count;
}

void dp_snapshot_iter(const struct gw_pmap *collection, struct gw_pmap_iter *it)
{
    gw_pmap_iter_init(collection, it);
}

const void *dp_snapshot_next(struct gw_pmap_iter *it)
{
    struct dps_item *x = gw_pmap_next(it);
    return x ? (const void *)&x->u : NULL;
}

/* ---- Finds ---- */

const struct dp_provider *dps_find_provider(const struct dp_snapshot *s, const char *name,
                                            size_t len)
{
    struct dps_item *it = dps_get(&s->providers, name, len);
    return it ? &it->u.provider : NULL;
}

const struct dp_provider *dp_snapshot_provider(const struct dp_snapshot *s, const char *name,
                                               size_t len)
{
    return dps_find_provider(s, name, len);
}

const struct dp_route *dps_find_route(const struct dp_snapshot *s, const char *name)
{
    struct dps_name k = {name, strlen(name)};
    struct dps_item *it =
        gw_pmap_get(&s->selectors, dps_hash_name(k.s, k.n), &k, &dps_selector_ops);
    return it ? &it->u.route : NULL;
}

void dp_snapshot_ref(struct dp_snapshot *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void dp_snapshot_unref(struct dp_snapshot *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    dps_snapshot_free(s);
}

static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dp_snapshot *current;
static int64_t current_published_ms; /* wall clock, for the snapshot age metric */

void dp_snapshot_publish(struct dp_snapshot *s)
{
    /* Said at every load, wherever the snapshot came from. */
    if (s && s->auth_open)
        gw_logf(GW_LOG_WARN,
                "snapshot opens the gateway: \"auth\": \"none\", every request is served "
                "without an API key",
                "{s:I}", "version", (json_int_t)s->version);
    else if (s && s->nkeys == 0 && s->nproviders > 0)
        gw_logf(GW_LOG_WARN,
                "snapshot has no API key: every request is refused (401) until one is created",
                "{s:I}", "version", (json_int_t)s->version);
    pthread_mutex_lock(&current_lock);
    struct dp_snapshot *old = current;
    current = s;
    current_published_ms = s ? gw_wall_ms() : 0;
    pthread_mutex_unlock(&current_lock);
    dp_snapshot_unref(old);
}

int64_t dp_snapshot_published_ms(void)
{
    pthread_mutex_lock(&current_lock);
    int64_t t = current_published_ms;
    pthread_mutex_unlock(&current_lock);
    return t;
}

struct dp_snapshot *dp_snapshot_acquire(void)
{
    pthread_mutex_lock(&current_lock);
    struct dp_snapshot *s = current;
    if (s)
        dp_snapshot_ref(s);
    pthread_mutex_unlock(&current_lock);
    return s;
}

static const char *const role_names[DP_NROLES] = {"default", "summarize", "embedding", "vision"};

int dps_role_index(const char *role)
{
    for (int i = 0; i < DP_NROLES; i++)
        if (strcmp(role_names[i], role) == 0)
            return i;
    return -1;
}

static const struct dp_route *find_role(const struct dp_snapshot *s, const char *role)
{
    int i = dps_role_index(role);
    return i >= 0 ? s->roles[i] : NULL;
}

const struct dp_route *dp_snapshot_route(const struct dp_snapshot *s, const char *selector,
                                         const char **via)
{
    const struct dp_route *r = dps_find_route(s, selector);
    if (r) {
        if (via)
            *via = strcmp(r->name, selector) == 0 ? "route" : "alias";
        return r;
    }
    r = find_role(s, selector);
    if (r && via)
        *via = "role";
    return r;
}

const struct dp_catalog_entry *dp_snapshot_catalog(const struct dp_snapshot *s,
                                                   const char *provider, const char *model)
{
    const struct dp_catalog_entry *any = NULL;
    if (!s->catalog_item)
        return NULL;
    const uint32_t *index = s->catalog_item->u.catalog.index;
    size_t mask = s->catalog_item->u.catalog.mask;
    for (size_t at = (size_t)dps_hash_name(model, strlen(model)) & mask; index[at];
         at = (at + 1) & mask) {
        const struct dp_catalog_entry *c = &s->catalog[index[at] - 1];
        if (strcmp(c->model, model) != 0)
            continue;
        if (!c->provider) {
            any = c;
            continue;
        }
        if (provider && strcmp(c->provider, provider) == 0)
            return c;
    }
    return any;
}

const struct dp_team *dp_snapshot_team(const struct dp_snapshot *s, const char *name)
{
    struct dps_item *it = dps_get(&s->teams, name, strlen(name));
    return it ? &it->u.team : NULL;
}

const struct dp_key *dp_snapshot_key(const struct dp_snapshot *s, const char *id)
{
    struct dps_item *it = dps_get(&s->keys, id, strlen(id));
    return it ? &it->u.key : NULL;
}

const struct dp_project *dp_snapshot_project(const struct dp_snapshot *s, const char *name)
{
    struct dps_item *it = dps_get(&s->projects, name, strlen(name));
    return it ? &it->u.project : NULL;
}

const struct dp_limit *dp_snapshot_limit(const struct dp_snapshot *s, const char *id)
{
    struct dps_item *it = dps_get(&s->limits, id, strlen(id));
    return it ? &it->u.limit : NULL;
}

const struct dp_key *dp_snapshot_find_key(const struct dp_snapshot *s, const char *plaintext,
                                          size_t len)
{
    char hex[65];
    gw_sha256_hex(plaintext, len, hex);
    /* The trie's path depends on the presented key's hash only, and the
     * stored hash is compared in constant time: nothing about a stored key
     * shows in the timing. */
    struct dps_item *it = gw_pmap_get(&s->key_hashes, dps_key_slot(hex), hex, &dps_hash_ops);
    return it ? &it->u.key : NULL;
}

uint64_t dps_key_slot(const char *hex)
{
    uint64_t v = 0;
    return gw_hex_value(hex, 16, &v) == 0 ? v : 0; /* checked at build: 64 hex digits */
}

const struct dp_guard_rules *dp_snapshot_guard_rules(const struct dp_snapshot *s)
{
    return s->guard_rules ? s->guard_rules : dp_guard_rules_default();
}
