/*
 * dp_snapshot's lookups and lifetime: a built snapshot's references, the
 * published one every request starts from, and the finds: by name (routes
 * with their aliases and roles, catalog entries, teams) and by key hash.
 * The build (dp_snapshot.c) finds providers and routes with these too.
 */
#include <pthread.h>
#include <string.h>

#include "dp_snapshot_int.h"
#include "gw_crypto.h"
#include "gw_log.h"
#include "gw_str.h"
#include "gw_time.h"

const struct dp_provider *dps_find_provider(const struct dp_snapshot *s, const char *name,
                                            size_t len)
{
    for (size_t i = 0; i < s->nproviders; i++)
        if (strlen(s->providers[i].name) == len && memcmp(s->providers[i].name, name, len) == 0)
            return &s->providers[i];
    return NULL;
}

const struct dp_route *dps_find_route(const struct dp_snapshot *s, const char *name)
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

void dp_snapshot_ref(struct dp_snapshot *s)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void dps_wipe_secrets(struct dp_snapshot *s)
{
    for (size_t i = 0; s->providers && i < s->nproviders; i++) {
        struct dp_provider *p = &s->providers[i];
        if (p->credential)
            explicit_bzero((char *)p->credential, strlen(p->credential));
        for (size_t j = 0; j < p->nheaders; j++)
            if (p->headers[j])
                explicit_bzero((char *)p->headers[j], strlen(p->headers[j]));
    }
}

void dp_snapshot_unref(struct dp_snapshot *s)
{
    if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    dps_wipe_secrets(s);
    gw_pool_free(s->pool);
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

static const struct dp_route *find_role(const struct dp_snapshot *s, const char *role)
{
    for (size_t i = 0; i < s->nroutes; i++)
        if (s->routes[i].role && strcmp(s->routes[i].role, role) == 0)
            return &s->routes[i];
    return NULL;
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
    for (size_t i = 0; i < s->ncatalog; i++) {
        const struct dp_catalog_entry *c = &s->catalog[i];
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
    for (size_t i = 0; i < s->nteams; i++)
        if (strcmp(s->teams[i].name, name) == 0)
            return &s->teams[i];
    return NULL;
}

const struct dp_project *dp_snapshot_project(const struct dp_snapshot *s, const char *name)
{
    for (size_t i = 0; i < s->nprojects; i++)
        if (strcmp(s->projects[i].name, name) == 0)
            return &s->projects[i];
    return NULL;
}

const struct dp_key *dp_snapshot_find_key(const struct dp_snapshot *s, const char *plaintext,
                                          size_t len)
{
    if (!s->key_index)
        return NULL;
    char hex[65];
    gw_sha256_hex(plaintext, len, hex);
    /* The probe sequence depends on the presented key's hash only, and
     * each candidate is compared in constant time: nothing about a stored
     * key shows in the timing. */
    for (size_t at = (size_t)dps_key_slot(hex) & s->key_mask; s->key_index[at];
         at = (at + 1) & s->key_mask) {
        const struct dp_key *k = &s->keys[s->key_index[at] - 1];
        if (gw_ct_equal(k->hash, hex, 64))
            return k;
    }
    return NULL;
}

uint64_t dps_key_slot(const char *hex)
{
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        int d = gw_hex_digit((unsigned char)hex[i]);
        v = v << 4 | (uint64_t)(d < 0 ? 0 : d);
    }
    return v;
}
