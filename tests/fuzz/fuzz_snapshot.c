/*
 * libFuzzer target for the snapshot build (contract/snapshot/dp_snapshot*.c): the
 * JSON document the control plane pushes, or a file, into the immutable
 * configuration the data plane serves from. The first byte's low bit
 * chooses the rules (a file's, or a pushed document's: DP_SNAPSHOT_PUSHED);
 * the rest is the document, loaded as dp_cpclient.c loads it (jansson,
 * duplicate keys refused). Checked, from dp_snapshot.h and the build:
 *  - a refused document gives NULL and a message, NUL-terminated in the
 *    error buffer; nothing stays allocated (LeakSanitizer), on refusal as
 *    after the last unref of an accepted one;
 *  - an accepted one: the document's version, one reference, the source
 *    its rules say; providers with distinct names without '/' or spaces,
 *    a driver found by its name, an options object, capabilities within
 *    the driver's, an http(s) base URL without a trailing slash, timeouts
 *    of 1 to 3600000 ms, header lines "Name: value", a credential only
 *    where the rules allow one (a pushed document's inline one, a file's
 *    resolved from the environment); routes with 1 to DP_MAX_CANDIDATES
 *    entries, each a provider of this snapshot, a weight and a tier in
 *    range, no entry twice, a weighted route with some weight, a known
 *    strategy and capability; names, aliases and roles that each select
 *    their route through dp_snapshot_route; catalog entries found by
 *    dp_snapshot_catalog, with prices of -1 (unknown) or 0 to 10^12 and a
 *    three-letter currency; teams and projects found by name; limits with
 *    distinct ids of at most 63 bytes and an amount of 1 to 4 x 10^18;
 *    keys with 64 lowercase hex digits, their team and project resolved
 *    when the snapshot lists them, each found by its id once;
 *  - the build is a function of the document: a second build of the same
 *    document gives the same routes' fingerprints, and the snapshot's
 *    rendered document builds into one that renders the same;
 *  - a "delta" member of the document (the build ignores it) is applied to
 *    the built snapshot (dp_snapshot_apply): refused with a message, or a
 *    snapshot that passes the same checks and renders stably, the base
 *    left as it was.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver_catalog.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "fuzz.h"
#include "gw_log.h"

#define MAX_PRICE 1000000000000LL
#define MAX_LIMIT_AMOUNT 4000000000000000000LL

static int is_hex64(const char *h)
{
    return strlen(h) == 64 && strspn(h, "0123456789abcdef") == 64;
}

static void check_provider(const struct dp_snapshot *s, const struct dp_provider *p,
                           const json_t *doc, unsigned flags)
{
    CHECK(p->name && p->name[0] && !strpbrk(p->name, "/ \t"));
    CHECK(p->driver && p->drv && dp_driver_info_find(p->driver) == p->drv);
    CHECK(json_is_object(p->options));
    CHECK((p->caps & ~p->drv->caps) == 0);
    CHECK(strncmp(p->base_url, "http://", 7) == 0 || strncmp(p->base_url, "https://", 8) == 0);
    size_t ul = strlen(p->base_url);
    CHECK(ul > 0 && p->base_url[ul - 1] != '/');
    CHECK(p->enabled == 0 || p->enabled == 1);
    CHECK(p->first_byte_timeout_ms >= 1 && p->first_byte_timeout_ms <= 3600000);
    CHECK(p->idle_timeout_ms >= 1 && p->idle_timeout_ms <= 3600000);
    CHECK(p->nheaders == 0 || p->headers != NULL);
    for (size_t j = 0; j < p->nheaders; j++) {
        const char *colon = strstr(p->headers[j], ": ");
        CHECK(colon && colon > p->headers[j] && !strpbrk(p->headers[j], "\r\n"));
    }
    /* Which document entry: the one with this name (names are distinct). */
    const json_t *o = NULL;
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(doc, "providers"), i, v)
    {
        if (strcmp(json_string_value(json_object_get(v, "name")), p->name) == 0)
            o = v;
    }
    CHECK(o != NULL);
    const json_t *cred = json_object_get(o, "credential");
    if (flags & DP_SNAPSHOT_PUSHED) {
        CHECK(!p->credential == !json_is_string(cred));
        if (p->credential)
            CHECK(strcmp(p->credential, json_string_value(cred)) == 0);
    } else {
        CHECK(cred == NULL); /* a file never holds a key */
        const char *ref = p->credential_ref;
        const char *env = ref && strncmp(ref, "env:", 4) == 0 ? getenv(ref + 4) : NULL;
        CHECK(!p->credential == !(env && *env));
    }
    (void)s;
}

static void check_route(const struct dp_snapshot *s, const struct dp_route *r)
{
    CHECK(r->name && r->name[0] && !strchr(r->name, '/'));
    CHECK(r->strategy >= DP_STRATEGY_ORDERED && r->strategy <= DP_STRATEGY_WEIGHTED);
    CHECK(r->capability &&
          (strcmp(r->capability, "chat") == 0 || strcmp(r->capability, "embeddings") == 0 ||
           strcmp(r->capability, "vision") == 0));
    CHECK(r->nentries >= 1 && r->nentries <= DP_MAX_CANDIDATES);
    CHECK(r->fallback_timeout_ms >= 0 && r->fallback_timeout_ms <= DP_MAX_FALLBACK_TIMEOUT_MS);
    CHECK(r->max_duration_ms >= 0 && r->max_duration_ms <= DP_MAX_DURATION_MS);
    unsigned long long weight = 0;
    for (size_t k = 0; k < r->nentries; k++) {
        const struct dp_route_entry *e = &r->entries[k];
        CHECK(dp_snapshot_provider(s, e->provider->name, strlen(e->provider->name)) == e->provider);
        CHECK(e->model && e->model[0]);
        CHECK(e->weight <= 1000000 && e->tier >= 0 && e->tier <= 9);
        CHECK(e->high_cost == 0 || e->high_cost == 1);
        for (size_t m = 0; m < k; m++)
            CHECK(r->entries[m].provider != e->provider || strcmp(r->entries[m].model, e->model));
        weight += e->weight;
    }
    if (r->strategy == DP_STRATEGY_WEIGHTED)
        CHECK(weight > 0);
    const char *via = NULL;
    CHECK(dp_snapshot_route(s, r->name, &via) == r && strcmp(via, "route") == 0);
    for (size_t j = 0; j < r->naliases; j++) {
        CHECK(r->aliases[j][0] && !strchr(r->aliases[j], '/'));
        CHECK(dp_snapshot_route(s, r->aliases[j], &via) == r && strcmp(via, "alias") == 0);
    }
    if (r->role)
        CHECK(dp_snapshot_route(s, r->role, &via) == r && strcmp(via, "role") == 0);
}

/* doc: the document s was built from, or NULL (s came from a delta). */
static void check_snapshot(const struct dp_snapshot *s, const json_t *doc, unsigned flags)
{
    CHECK(s->refs == 1);
    if (doc) {
        CHECK(s->version == json_integer_value(json_object_get(doc, "version")));
        CHECK(strcmp(s->source, (flags & DP_SNAPSHOT_PUSHED) ? "control_plane" : "file") == 0);
        CHECK(s->nproviders == json_array_size(json_object_get(doc, "providers")));
        CHECK(s->nroutes == json_array_size(json_object_get(doc, "routes")));
    }
    struct gw_pmap_iter it;
    size_t n = 0;
    const struct dp_provider *p;
    for (dp_snapshot_iter(&s->providers, &it); (p = dp_snapshot_next(&it)) != NULL; n++) {
        if (doc)
            check_provider(s, p, doc, flags);
        CHECK(dp_snapshot_provider(s, p->name, strlen(p->name)) == p);
    }
    CHECK(n == s->nproviders);
    n = 0;
    const struct dp_route *r;
    for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL; n++)
        check_route(s, r);
    CHECK(n == s->nroutes);
    for (size_t i = 0; i < s->ncatalog; i++) {
        const struct dp_catalog_entry *c = &s->catalog[i];
        CHECK(c->model && c->model[0]);
        const struct dp_catalog_entry *f = dp_snapshot_catalog(s, c->provider, c->model);
        CHECK(f == c); /* (provider, model) pairs are distinct */
        if (c->provider)
            CHECK(dp_snapshot_provider(s, c->provider, strlen(c->provider)) != NULL);
        const long long prices[] = {c->price.input,          c->price.output,
                                    c->price.cache_read,     c->price.cache_write_5m,
                                    c->price.cache_write_1h, c->price.reasoning};
        for (size_t k = 0; k < sizeof(prices) / sizeof(prices[0]); k++)
            CHECK(prices[k] == -1 || (prices[k] >= 0 && prices[k] <= MAX_PRICE));
        CHECK(strlen(c->price.currency) == 3);
        CHECK(c->context_window >= 0 && c->max_output_tokens >= 0);
    }
    const struct dp_team *t;
    for (dp_snapshot_iter(&s->teams, &it); (t = dp_snapshot_next(&it)) != NULL;)
        CHECK(dp_snapshot_team(s, t->name) == t);
    const struct dp_project *pr;
    for (dp_snapshot_iter(&s->projects, &it); (pr = dp_snapshot_next(&it)) != NULL;)
        CHECK(dp_snapshot_project(s, pr->name) == pr);
    const struct dp_limit *l;
    for (dp_snapshot_iter(&s->limits, &it); (l = dp_snapshot_next(&it)) != NULL;) {
        CHECK(l->id && strlen(l->id) <= 63 && l->scope && l->currency);
        CHECK(l->amount >= 1 && l->amount <= MAX_LIMIT_AMOUNT);
        CHECK(dp_snapshot_limit(s, l->id) == l);
    }
    CHECK(!s->auth_open || s->nkeys == 0);
    n = 0;
    const struct dp_key *k;
    for (dp_snapshot_iter(&s->keys, &it); (k = dp_snapshot_next(&it)) != NULL; n++) {
        CHECK(k->id && k->id[0] && is_hex64(k->hash) && k->status);
        CHECK(k->expires_at_ms >= 0);
        if (k->team && doc && json_object_get(doc, "teams"))
            CHECK(dp_snapshot_team(s, k->team) != NULL);
        if (k->project && doc && json_object_get(doc, "projects"))
            CHECK(dp_snapshot_project(s, k->project) != NULL);
    }
    CHECK(n == s->nkeys);
}

/* A snapshot's rendered document builds into one that renders the same. */
static void check_render(const struct dp_snapshot *s, unsigned flags)
{
    size_t len = 0, len2 = 0;
    char *text = dp_snapshot_render(s, &len);
    CHECK(text != NULL && strlen(text) == len);
    json_t *doc = json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL);
    CHECK(doc != NULL);
    char err[512];
    struct dp_snapshot *again = dp_snapshot_build_ex(doc, flags, err, sizeof(err));
    CHECK(again != NULL);
    char *text2 = dp_snapshot_render(again, &len2);
    CHECK(text2 != NULL && len == len2 && memcmp(text, text2, len) == 0);
    free(text);
    free(text2);
    json_decref(doc);
    dp_snapshot_unref(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int once;
    if (!once) {
        once = 1;
        gw_log_set_level(GW_LOG_ERROR); /* unresolved refs are warnings */
        setenv("LLMGW_FUZZ_KEY", "sk-fuzz", 1);
    }
    if (size < 1)
        return 0;
    unsigned flags = (data[0] & 1) ? DP_SNAPSHOT_PUSHED : 0;
    json_t *doc = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!doc)
        return 0;
    char err[512];
    memset(err, 'x', sizeof(err));
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, flags, err, sizeof(err));
    if (!s) {
        CHECK(memchr(err, '\0', sizeof(err)) != NULL && err[0] != '\0');
    } else {
        check_snapshot(s, doc, flags);
        char err2[512];
        struct dp_snapshot *again = dp_snapshot_build_ex(doc, flags, err2, sizeof(err2));
        CHECK(again != NULL && again->nroutes == s->nroutes);
        struct gw_pmap_iter it;
        const struct dp_route *r;
        for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL;)
            CHECK(dp_snapshot_route(again, r->name, NULL)->fingerprint == r->fingerprint);
        dp_snapshot_unref(again);
        check_render(s, flags);
        /* A "delta" member (which the build ignores) is applied to it. */
        const json_t *delta = json_object_get(doc, "delta");
        if (delta) {
            memset(err2, 'x', sizeof(err2));
            struct dp_snapshot *n = dp_snapshot_apply(s, delta, flags, err2, sizeof(err2));
            if (!n) {
                CHECK(memchr(err2, '\0', sizeof(err2)) != NULL && err2[0] != '\0');
            } else {
                check_snapshot(n, NULL, flags);
                check_render(n, flags);
                dp_snapshot_unref(n);
            }
            check_snapshot(s, doc, flags); /* the base is unchanged */
        }
        dp_snapshot_ref(s);
        dp_snapshot_unref(s);
        CHECK(s->refs == 1);
        dp_snapshot_unref(s);
    }
    json_decref(doc);
    return 0;
}
