#include "dp_snapshot.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_log.h"

struct build {
    struct gw_pool *pool;
    char *err;
    size_t errlen;
    int failed;
};

__attribute__((format(printf, 2, 3))) static void fail(struct build *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    b->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
}

/* A required non-empty string field. */
static const char *req_str(struct build *b, const json_t *o, const char *key, const char *where)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) == 0) {
        fail(b, "%s.%s: required, a non-empty string", where, key);
        return NULL;
    }
    return gw_pool_strdup(b->pool, json_string_value(v));
}

static const char *opt_str(struct build *b, const json_t *o, const char *key, const char *where,
                           const char *def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_string(v)) {
        fail(b, "%s.%s: must be a string", where, key);
        return def;
    }
    return gw_pool_strdup(b->pool, json_string_value(v));
}

static long opt_ms(struct build *b, const json_t *o, const char *key, const char *where, long def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 3600 * 1000) {
        fail(b, "%s.%s: must be an integer from 1 to 3600000 (milliseconds)", where, key);
        return def;
    }
    return (long)json_integer_value(v);
}

static int opt_bool(struct build *b, const json_t *o, const char *key, const char *where, int def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        fail(b, "%s.%s: must be a boolean", where, key);
        return def;
    }
    return json_is_true(v);
}

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

static void build_provider(struct build *b, struct dp_provider *p, const json_t *o, size_t i)
{
    char where[48];
    snprintf(where, sizeof(where), "providers[%zu]", i);
    if (!json_is_object(o)) {
        fail(b, "%s: must be an object", where);
        return;
    }
    p->name = req_str(b, o, "name", where);
    p->driver = req_str(b, o, "driver", where);
    const char *url = req_str(b, o, "base_url", where);
    if (b->failed)
        return;
    if (p->name[strcspn(p->name, "/ \t")] != '\0') {
        fail(b, "%s.name: '%s' may not contain '/' or spaces", where, p->name);
        return;
    }
    p->drv = dp_driver_find(p->driver);
    if (!p->drv) {
        char names[256] = "";
        size_t off = 0;
        for (const struct dp_driver *const *d = dp_drivers; *d; d++)
            off += (size_t)snprintf(names + off, off < sizeof(names) ? sizeof(names) - off : 0,
                                    "%s%s", off ? ", " : "", (*d)->name);
        fail(b, "%s.driver: unknown driver '%s' (supported: %s)", where, p->driver, names);
        return;
    }
    json_t *opts = json_object_get(o, "options");
    if (opts && !json_is_null(opts) && !json_is_object(opts)) {
        fail(b, "%s.options: must be an object", where);
        return;
    }
    p->options = opts && json_is_object(opts) ? json_deep_copy(opts) : json_object();
    if (!p->options || gw_pool_cleanup(b->pool, decref_json, p->options)) {
        json_decref(p->options);
        fail(b, "%s.options: out of memory", where);
        return;
    }
    p->caps = p->drv->caps;
    json_t *caps = json_object_get(p->options, "capabilities");
    if (caps) {
        static const struct {
            const char *name;
            unsigned bit;
        } names[] = {{"chat", DRV_CAP_CHAT},           {"embeddings", DRV_CAP_EMBEDDINGS},
                     {"vision", DRV_CAP_VISION},       {"tools", DRV_CAP_TOOLS},
                     {"json_mode", DRV_CAP_JSON_MODE}, {"reasoning", DRV_CAP_REASONING}};
        size_t ci;
        json_t *c;
        if (!json_is_array(caps)) {
            fail(b, "%s.options.capabilities: must be an array of capability names", where);
            return;
        }
        p->caps = 0;
        json_array_foreach(caps, ci, c)
        {
            unsigned bit = 0;
            for (size_t k = 0; k < sizeof(names) / sizeof(*names); k++)
                if (json_is_string(c) && strcmp(json_string_value(c), names[k].name) == 0)
                    bit = names[k].bit;
            if (!bit) {
                fail(b,
                     "%s.options.capabilities[%zu]: must be one of chat, embeddings, vision, "
                     "tools, json_mode, reasoning",
                     where, i);
                return;
            }
            if (!(p->drv->caps & bit)) {
                fail(b, "%s.options.capabilities[%zu]: driver '%s' does not support '%s'", where, i,
                     p->driver, json_string_value(c));
                return;
            }
            p->caps |= bit;
        }
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0) {
        fail(b, "%s.base_url: must start with http:// or https://", where);
        return;
    }
    size_t ul = strlen(url);
    while (ul > 0 && url[ul - 1] == '/')
        ul--;
    p->base_url = gw_pool_strndup(b->pool, url, ul);
    p->credential_ref = opt_str(b, o, "credential_ref", where, NULL);
    p->credential = p->credential_ref ? resolve_credential(p->credential_ref, p->name) : NULL;
    if (p->credential)
        p->credential = gw_pool_strdup(b->pool, p->credential);
    p->enabled = opt_bool(b, o, "enabled", where, 1);
    p->first_byte_timeout_ms = opt_ms(b, o, "first_byte_timeout_ms", where, 60000);
    p->idle_timeout_ms = opt_ms(b, o, "idle_timeout_ms", where, 60000);
    json_t *h = json_object_get(o, "headers");
    if (h && !json_is_null(h)) {
        if (!json_is_object(h)) {
            fail(b, "%s.headers: must be an object of strings", where);
            return;
        }
        p->headers = gw_pool_calloc(b->pool, (json_object_size(h) + 1) * sizeof(char *));
        const char *k;
        json_t *v;
        json_object_foreach(h, k, v)
        {
            const char *sv = json_string_value(v);
            if (!sv || strpbrk(k, "\r\n: ") || strpbrk(sv, "\r\n") || !*k) {
                fail(b, "%s.headers.%s: must be a single-line string with a valid name", where, k);
                return;
            }
            p->headers[p->nheaders++] = gw_pool_printf(b->pool, "%s: %s", k, sv);
        }
    }
}

static const struct dp_provider *find_provider(const struct dp_snapshot *s, const char *name,
                                               size_t len)
{
    for (size_t i = 0; i < s->nproviders; i++)
        if (strlen(s->providers[i].name) == len && memcmp(s->providers[i].name, name, len) == 0)
            return &s->providers[i];
    return NULL;
}

static const struct dp_route *find_route(const struct dp_snapshot *s, const char *name)
{
    for (size_t i = 0; i < s->nroutes; i++) {
        const struct dp_route *r = &s->routes[i];
        if (strcmp(r->name, name) == 0)
            return r;
        for (size_t j = 0; j < r->naliases; j++)
            if (strcmp(r->aliases[j], name) == 0)
                return r;
    }
    return NULL;
}

static void build_route(struct build *b, struct dp_snapshot *s, struct dp_route *r, const json_t *o,
                        size_t i)
{
    char where[48];
    snprintf(where, sizeof(where), "routes[%zu]", i);
    if (!json_is_object(o)) {
        fail(b, "%s: must be an object", where);
        return;
    }
    r->name = req_str(b, o, "name", where);
    r->capability = opt_str(b, o, "capability", where, "chat");
    const char *strategy = opt_str(b, o, "strategy", where, "ordered");
    if (b->failed)
        return;
    static const char *const strategies[] = {[DP_STRATEGY_ORDERED] = "ordered",
                                             [DP_STRATEGY_PRICE] = "price",
                                             [DP_STRATEGY_LATENCY] = "latency",
                                             [DP_STRATEGY_AUTO] = "auto",
                                             [DP_STRATEGY_WEIGHTED] = "weighted"};
    size_t si = 0;
    while (si < sizeof(strategies) / sizeof(*strategies) && strcmp(strategies[si], strategy))
        si++;
    if (si == sizeof(strategies) / sizeof(*strategies)) {
        fail(b, "%s.strategy: must be one of ordered, price, latency, auto, weighted", where);
        return;
    }
    r->strategy = (enum dp_strategy)si;
    if (strchr(r->name, '/')) {
        fail(b, "%s.name: '%s' may not contain '/' (reserved for provider/model)", where, r->name);
        return;
    }
    json_t *al = json_object_get(o, "aliases");
    if (al && !json_is_null(al)) {
        if (!json_is_array(al)) {
            fail(b, "%s.aliases: must be an array of strings", where);
            return;
        }
        r->aliases = gw_pool_calloc(b->pool, (json_array_size(al) + 1) * sizeof(char *));
        size_t j;
        json_t *v;
        json_array_foreach(al, j, v)
        {
            if (!json_is_string(v) || !json_string_length(v) || strchr(json_string_value(v), '/')) {
                fail(b, "%s.aliases[%zu]: must be a non-empty string without '/'", where, j);
                return;
            }
            r->aliases[r->naliases++] = gw_pool_strdup(b->pool, json_string_value(v));
        }
    }
    json_t *en = json_object_get(o, "entries");
    if (!json_is_array(en) || json_array_size(en) == 0) {
        fail(b, "%s.entries: required, a non-empty array", where);
        return;
    }
    r->entries = gw_pool_calloc(b->pool, json_array_size(en) * sizeof(*r->entries));
    size_t j;
    json_t *e;
    json_array_foreach(en, j, e)
    {
        char ew[80];
        snprintf(ew, sizeof(ew), "%s.entries[%zu]", where, j);
        if (!json_is_object(e)) {
            fail(b, "%s: must be an object", ew);
            return;
        }
        const char *pn = req_str(b, e, "provider", ew);
        const char *model = req_str(b, e, "model", ew);
        if (b->failed)
            return;
        const struct dp_provider *p = find_provider(s, pn, strlen(pn));
        if (!p) {
            fail(b, "%s.provider: no provider named '%s'", ew, pn);
            return;
        }
        r->entries[r->nentries].provider = p;
        r->entries[r->nentries].model = model;
        r->nentries++;
    }
}

static void build_key(struct build *b, struct dp_key *k, const json_t *o, size_t i)
{
    char where[48];
    snprintf(where, sizeof(where), "keys[%zu]", i);
    if (!json_is_object(o)) {
        fail(b, "%s: must be an object", where);
        return;
    }
    k->id = req_str(b, o, "id", where);
    const char *h = req_str(b, o, "hash", where);
    k->status = opt_str(b, o, "status", where, "active");
    k->team = opt_str(b, o, "team", where, NULL);
    if (b->failed)
        return;
    if (strlen(h) != 64 || h[strspn(h, "0123456789abcdef")] != '\0') {
        fail(b, "%s.hash: must be 64 lowercase hex digits (sha256 of the key)", where);
        return;
    }
    memcpy(k->hash, h, 65);
}

static const json_t *req_array(struct build *b, const json_t *root, const char *key, int required)
{
    json_t *a = json_object_get(root, key);
    if (!a || json_is_null(a)) {
        if (required)
            fail(b, "%s: required, an array", key);
        return NULL;
    }
    if (!json_is_array(a)) {
        fail(b, "%s: must be an array", key);
        return NULL;
    }
    return a;
}

struct dp_snapshot *dp_snapshot_build(const json_t *root, char *err, size_t errlen)
{
    struct build b = {.err = err, .errlen = errlen};
    if (!json_is_object(root)) {
        snprintf(err, errlen, "snapshot: must be a JSON object");
        return NULL;
    }
    b.pool = gw_pool_new(16384);
    if (!b.pool) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    struct dp_snapshot *s = gw_pool_calloc(b.pool, sizeof(*s));
    s->pool = b.pool;
    s->refs = 1;
    json_t *ver = json_object_get(root, "version");
    if (!json_is_integer(ver) || json_integer_value(ver) < 0)
        fail(&b, "version: required, a non-negative integer");
    else
        s->version = json_integer_value(ver);
    const json_t *prov = req_array(&b, root, "providers", 1);
    const json_t *routes = req_array(&b, root, "routes", 1);
    const json_t *keys = req_array(&b, root, "keys", 0);
    if (b.failed)
        goto bad;
    s->providers = gw_pool_calloc(b.pool, (json_array_size(prov) + 1) * sizeof(*s->providers));
    for (size_t i = 0; i < json_array_size(prov) && !b.failed; i++) {
        build_provider(&b, &s->providers[i], json_array_get(prov, i), i);
        if (!b.failed && find_provider(s, s->providers[i].name, strlen(s->providers[i].name)))
            fail(&b, "providers[%zu].name: duplicate provider '%s'", i, s->providers[i].name);
        s->nproviders = i + 1;
    }
    s->routes = gw_pool_calloc(b.pool, (json_array_size(routes) + 1) * sizeof(*s->routes));
    for (size_t i = 0; i < json_array_size(routes) && !b.failed; i++) {
        struct dp_route *r = &s->routes[i];
        build_route(&b, s, r, json_array_get(routes, i), i);
        if (b.failed)
            break;
        /* Names and aliases share one namespace: a selector is never ambiguous. */
        if (find_route(s, r->name))
            fail(&b, "routes[%zu].name: '%s' is already a route name or alias", i, r->name);
        for (size_t j = 0; j < r->naliases && !b.failed; j++) {
            if (find_route(s, r->aliases[j]) || strcmp(r->aliases[j], r->name) == 0)
                fail(&b, "routes[%zu].aliases[%zu]: '%s' is already a route name or alias", i, j,
                     r->aliases[j]);
            for (size_t k = 0; k < j && !b.failed; k++)
                if (strcmp(r->aliases[k], r->aliases[j]) == 0)
                    fail(&b, "routes[%zu].aliases[%zu]: duplicate alias '%s'", i, j, r->aliases[j]);
        }
        s->nroutes = i + 1;
    }
    if (keys) {
        s->keys = gw_pool_calloc(b.pool, (json_array_size(keys) + 1) * sizeof(*s->keys));
        for (size_t i = 0; i < json_array_size(keys) && !b.failed; i++) {
            build_key(&b, &s->keys[i], json_array_get(keys, i), i);
            s->nkeys = i + 1;
        }
    }
    if (!b.failed)
        return s;
bad:
    gw_pool_free(b.pool);
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

void dp_snapshot_ref(struct dp_snapshot *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void dp_snapshot_unref(struct dp_snapshot *s)
{
    if (s && __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
        gw_pool_free(s->pool);
}

static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dp_snapshot *current;

void dp_snapshot_publish(struct dp_snapshot *s)
{
    pthread_mutex_lock(&current_lock);
    struct dp_snapshot *old = current;
    current = s;
    pthread_mutex_unlock(&current_lock);
    dp_snapshot_unref(old);
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

int dp_snapshot_resolve(const struct dp_snapshot *s, const char *selector, struct dp_target *t)
{
    memset(t, 0, sizeof(*t));
    const struct dp_route *r = find_route(s, selector);
    if (r) {
        t->route = r;
        /* Failover across the chain is the router's (a later cut): this
         * cut serves the first enabled entry. */
        for (size_t i = 0; i < r->nentries; i++) {
            if (r->entries[i].provider->enabled) {
                t->provider = r->entries[i].provider;
                t->model = r->entries[i].model;
                return GW_OK;
            }
        }
        return GW_EAGAIN;
    }
    const char *slash = strchr(selector, '/');
    if (!slash || slash == selector || !slash[1])
        return GW_ENOTFOUND;
    const struct dp_provider *p = find_provider(s, selector, (size_t)(slash - selector));
    if (!p)
        return GW_ENOTFOUND;
    /* The model part is client text sent upstream and logged: it must look
     * like a model id (visible ASCII, bounded), never like a prompt. */
    size_t ml = strlen(slash + 1);
    if (ml > DP_MAX_MODEL_ID)
        return GW_EINVAL;
    for (const unsigned char *m = (const unsigned char *)slash + 1; *m; m++)
        if (*m < 0x21 || *m > 0x7e)
            return GW_EINVAL;
    t->provider = p;
    t->model = slash + 1;
    return p->enabled ? GW_OK : GW_EAGAIN;
}

const struct dp_key *dp_snapshot_find_key(const struct dp_snapshot *s, const char *plaintext,
                                          size_t len)
{
    char hex[65];
    gw_sha256_hex(plaintext, len, hex);
    for (size_t i = 0; i < s->nkeys; i++)
        if (gw_ct_equal(s->keys[i].hash, hex, 64))
            return &s->keys[i];
    return NULL;
}
