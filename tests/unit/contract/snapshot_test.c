/* Tests for contract/snapshot/dp_snapshot.c: validation names the field, selectors
 * resolve by route, alias, role and provider/model, keys match by hash,
 * routes carry their entry flags and a fingerprint, the catalog answers per
 * provider then per model. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver_catalog.h"
#include "dp_guard_rules.h"
#include "dp_snapshot.h"
#include "dp_snapshot_int.h"
#include "gw_crypto.h"
#include "gw_error.h"

static const char GOOD[] =
    "{\"version\":3,"
    " \"providers\":["
    "  {\"name\":\"mock\",\"driver\":\"openai\",\"base_url\":\"http://127.0.0.1:9/v1/\","
    "   \"credential_ref\":\"env:SNAPSHOT_TEST_KEY\",\"headers\":{\"x-a\":\"1\"}},"
    "  {\"name\":\"off\",\"driver\":\"openai\",\"base_url\":\"https://x.invalid\","
    "   \"enabled\":false}],"
    " \"routes\":["
    "  {\"name\":\"fast\",\"aliases\":[\"default\",\"quick\"],"
    "   "
    "\"entries\":[{\"provider\":\"off\",\"model\":\"m0\"},{\"provider\":\"mock\",\"model\":\"m1\"}]"
    "},"
    "  {\"name\":\"dead\",\"entries\":[{\"provider\":\"off\",\"model\":\"m2\"}]}],"
    " \"keys\":[{\"id\":\"k1\",\"hash\":\"HASH\",\"team\":\"t\"}]}";

static struct dp_snapshot *build(const char *text, char *err, size_t errlen)
{
    json_t *j = json_loads(text, 0, NULL);
    if (!j)
        fprintf(stderr, "\n  not JSON: %s\n", text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    struct dp_snapshot *s = dp_snapshot_build(j, err, errlen);
    json_decref(j);
    return s;
}

static char *good_text(void)
{
    char hash[65];
    gw_sha256_hex("sk-test", 7, hash);
    char *t = malloc(sizeof(GOOD) + 64);
    const char *at = strstr(GOOD, "HASH");
    int n = snprintf(t, sizeof(GOOD) + 64, "%.*s%s%s", (int)(at - GOOD), GOOD, hash, at + 4);
    CU_ASSERT(n > 0);
    return t;
}

static void test_build_and_resolve(void)
{
    setenv("SNAPSHOT_TEST_KEY", "secret-1", 1);
    char err[256] = "";
    char *text = good_text();
    struct dp_snapshot *s = build(text, err, sizeof(err));
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->version, 3);
    const struct dp_provider *p0 = dp_snapshot_provider(s, "mock", 4);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p0);
    CU_ASSERT_STRING_EQUAL(p0->base_url, "http://127.0.0.1:9/v1");
    CU_ASSERT_STRING_EQUAL(p0->credential, "secret-1");
    CU_ASSERT_STRING_EQUAL(p0->headers[0], "x-a: 1");
    CU_ASSERT_PTR_NULL(dp_snapshot_provider(s, "off", 3)->credential);

    /* Selection itself is the router's (router_test.c); the snapshot
     * finds a route by name or alias. */
    const char *via = NULL;
    CU_ASSERT_PTR_NOT_NULL(dp_snapshot_route(s, "fast", &via));
    CU_ASSERT_STRING_EQUAL(via, "route");
    const struct dp_route *r = dp_snapshot_route(s, "quick", &via);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_STRING_EQUAL(r->name, "fast");
    CU_ASSERT_STRING_EQUAL(via, "alias");
    CU_ASSERT_PTR_NULL(dp_snapshot_route(s, "nope", NULL));
    CU_ASSERT_PTR_NULL(dp_snapshot_route(s, "mock/m1", NULL));

    const struct dp_key *k = dp_snapshot_find_key(s, "sk-test", 7);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_STRING_EQUAL(k->id, "k1");
    CU_ASSERT_STRING_EQUAL(k->status, "active");
    CU_ASSERT_PTR_NULL(dp_snapshot_find_key(s, "sk-tesT", 7));
    dp_snapshot_unref(s);
}

static void expect_error(const char *text, const char *want)
{
    char err[256] = "";
    struct dp_snapshot *s = build(text, err, sizeof(err));
    CU_ASSERT_PTR_NULL(s);
    if (!strstr(err, want)) {
        fprintf(stderr, "\n  got error: %s\n  wanted:    %s\n", err, want);
        CU_FAIL("error message does not name the field");
    }
    dp_snapshot_unref(s);
}

#define P "{\"name\":\"p\",\"driver\":\"openai\",\"base_url\":\"http://h\"}"
#define R(e) "{\"name\":\"r\",\"entries\":[" e "]}"

static void test_validation_names_the_field(void)
{
    expect_error("[]", "snapshot: must be a JSON object");
    expect_error("{\"providers\":[],\"routes\":[]}", "version: required");
    expect_error("{\"version\":1,\"routes\":[]}", "providers: required");
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"grpc\","
                 "\"base_url\":\"http://h\"}],\"routes\":[]}",
                 "providers[0].driver: unknown driver 'grpc'");
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"ftp://h\"}],\"routes\":[]}",
                 "providers[0].base_url: must start with http");
    /* No host (found by tests/fuzz/fuzz_snapshot: "http://" became "http:"). */
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"http://\"}],\"routes\":[]}",
                 "providers[0].base_url: must name a host");
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"https:///v1\"}],\"routes\":[]}",
                 "providers[0].base_url: must name a host");
    expect_error("{\"version\":1,\"providers\":[" P "," P "],\"routes\":[]}",
                 "providers[1].name: duplicate provider 'p'");
    expect_error("{\"version\":1,\"providers\":[" P
                 "],\"routes\":[" R("{\"provider\":\"q\",\"model\":\"m\"}") "]}",
                 "routes[0].entries[0].provider: no provider named 'q'");
    expect_error("{\"version\":1,\"providers\":[" P "],\"routes\":[" R("") "]}",
                 "routes[0].entries: required, a non-empty array");
    expect_error("{\"version\":1,\"providers\":[" P
                 "],\"routes\":[" R("{\"provider\":\"p\",\"model\":\"m\"}") "," R(
                     "{\"provider\":\"p\",\"model\":\"m\"}") "]}",
                 "routes[1].name: 'r' is already a route name or alias");
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"http://h\",\"first_byte_timeout_ms\":-5}],\"routes\":[]}",
                 "providers[0].first_byte_timeout_ms: must be an integer");
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"http://h\",\"headers\":{\"a\":\"x\\r\\ny: z\"}}],\"routes\":[]}",
                 "providers[0].headers.a: must be a single-line string");
    expect_error("{\"version\":1,\"providers\":[],\"routes\":[],\"keys\":[{\"id\":\"k\","
                 "\"hash\":\"abc\"}]}",
                 "keys[0].hash: must be 64 lowercase hex digits");
}

#define HASH64 "0000000000000000000000000000000000000000000000000000000000000000"
#define HASH64B "0000000000000000000000000000000000000000000000000000000000000001"
#define HASH64C "0000000000000000000000000000000000000000000000000000000000000002"
#define HASH64D "0000000000000000000000000000000000000000000000000000000000000003"
#define ROUTES_DOC(routes, extra)                                                                  \
    "{\"version\":1,\"providers\":[" P ",{\"name\":\"q\",\"driver\":\"openai\","                   \
    "\"base_url\":\"http://h\"}],\"routes\":[" routes "]" extra "}"
#define E(p, m) "{\"provider\":\"" p "\",\"model\":\"" m "\"}"
#define ONE_ROUTE "{\"name\":\"r\",\"entries\":[" E("p", "m") "]}"

/* "auth": "keys" (the default: closed, also with no key at all) or
 * "none" (opened on purpose, and then without keys to check). */
static void test_auth(void)
{
    char err[256] = "";
    struct dp_snapshot *s =
        build("{\"version\":1,\"providers\":[],\"routes\":[]}", err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->auth_open, 0);
    dp_snapshot_unref(s);
    s = build("{\"version\":1,\"providers\":[],\"routes\":[],\"auth\":\"keys\"}", err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->auth_open, 0);
    dp_snapshot_unref(s);
    s = build("{\"version\":1,\"providers\":[],\"routes\":[],\"auth\":\"none\"}", err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->auth_open, 1);
    dp_snapshot_unref(s);
    expect_error("{\"version\":1,\"providers\":[],\"routes\":[],\"auth\":\"off\"}",
                 "auth: must be \"keys\"");
    expect_error("{\"version\":1,\"providers\":[],\"routes\":[],\"auth\":false}",
                 "auth: must be \"keys\"");
    expect_error("{\"version\":1,\"providers\":[],\"routes\":[],\"auth\":\"none\",\"keys\":[{"
                 "\"id\":\"k\",\"hash\":\"" HASH64 "\"}]}",
                 "auth: \"none\" serves every request without a key");
}

/* Keys are found through the hash index: every one of many, by its
 * plaintext; a key that is not there, not. */
static void test_key_index(void)
{
    json_t *doc = json_pack("{s:i,s:[],s:[],s:[]}", "version", 1, "providers", "routes", "keys");
    json_t *keys = json_object_get(doc, "keys");
    char plain[32], hex[65];
    for (int i = 0; i < 3000; i++) {
        snprintf(plain, sizeof(plain), "llmgw-key-%d", i);
        gw_sha256_hex(plain, strlen(plain), hex);
        snprintf(plain, sizeof(plain), "k%d", i);
        json_array_append_new(keys, json_pack("{s:s,s:s}", "id", plain, "hash", hex));
    }
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build(doc, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->nkeys, 3000);
    int found = 0;
    for (int i = 0; i < 3000; i++) {
        snprintf(plain, sizeof(plain), "llmgw-key-%d", i);
        const struct dp_key *k = dp_snapshot_find_key(s, plain, strlen(plain));
        char id[32];
        snprintf(id, sizeof(id), "k%d", i);
        found += k && strcmp(k->id, id) == 0;
    }
    CU_ASSERT_EQUAL(found, 3000);
    CU_ASSERT_PTR_NULL(dp_snapshot_find_key(s, "llmgw-key-3000", 14));
    CU_ASSERT_PTR_NULL(dp_snapshot_find_key(s, "", 0));
    dp_snapshot_unref(s);
    /* No keys: nothing found, nothing indexed. */
    s = build("{\"version\":1,\"providers\":[],\"routes\":[]}", err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NULL(dp_snapshot_find_key(s, "x", 1));
    dp_snapshot_unref(s);
}

/* A snapshot's credentials and header lines are zeroed before its memory
 * goes back (dp_snapshot_unref, and a build that fails). */
static void test_secrets_wiped(void)
{
    json_t *doc = json_loads("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                             "\"base_url\":\"http://h\",\"credential\":\"sk-wipe-me\","
                             "\"headers\":{\"x-api-key\":\"hk-wipe-me\"}}],\"routes\":[]}",
                             0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const struct dp_provider *p = dp_snapshot_provider(s, "p", 1);
    const char *cred = p->credential;
    const char *hdr = p->headers[0];
    CU_ASSERT_STRING_EQUAL(cred, "sk-wipe-me");
    CU_ASSERT_PTR_NOT_NULL(strstr(hdr, "hk-wipe-me"));
    size_t cl = strlen(cred), hl = strlen(hdr);
    /* The provider's item is held here past the snapshot, and its wipe
     * (dps_item_unref) checked before its pool goes. */
    struct dps_item *it = DPS_ITEM(p);
    __atomic_add_fetch(&it->refs, 1, __ATOMIC_RELAXED);
    dp_snapshot_unref(s);
    CU_ASSERT_EQUAL(it->refs, 1);
    struct gw_pool *keep = it->pool;
    it->pool = gw_pool_new(64); /* the unref frees this one instead */
    dps_item_unref(it);
    for (size_t i = 0; i < cl; i++)
        CU_ASSERT_EQUAL(cred[i], 0);
    for (size_t i = 0; i < hl; i++)
        CU_ASSERT_EQUAL(hdr[i], 0);
    gw_pool_free(keep);
}

static void test_route_fields(void)
{
    char err[256] = "";
    struct dp_snapshot *s = build(
        ROUTES_DOC("{\"name\":\"emb\",\"role\":\"embedding\",\"capability\":\"embeddings\","
                   "\"strategy\":\"weighted\",\"entries\":[{\"provider\":\"p\",\"model\":\"e1\","
                   "\"weight\":0,\"high_cost\":true,\"tier\":9},{\"provider\":\"q\","
                   "\"model\":\"e1\",\"weight\":1000000}]},"
                   "{\"name\":\"chat\",\"entries\":[" E("p", "m") "]}",
                   ""),
        err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const struct dp_route *emb = dp_snapshot_route(s, "emb", NULL);
    const struct dp_route *chat = dp_snapshot_route(s, "chat", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(emb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(chat);
    const struct dp_route *r = emb;
    CU_ASSERT_STRING_EQUAL(r->role, "embedding");
    CU_ASSERT_STRING_EQUAL(r->capability, "embeddings");
    CU_ASSERT_EQUAL(r->strategy, DP_STRATEGY_WEIGHTED);
    CU_ASSERT_EQUAL(r->entries[0].weight, 0);
    CU_ASSERT_EQUAL(r->entries[0].high_cost, 1);
    CU_ASSERT_EQUAL(r->entries[0].tier, 9);
    CU_ASSERT_EQUAL(r->entries[1].weight, 1000000);
    /* Defaults. */
    r = chat;
    CU_ASSERT_PTR_NULL(r->role);
    CU_ASSERT_STRING_EQUAL(r->capability, "chat");
    CU_ASSERT_EQUAL(r->strategy, DP_STRATEGY_ORDERED);
    CU_ASSERT_EQUAL(r->entries[0].weight, 1);
    CU_ASSERT_EQUAL(r->entries[0].high_cost, 0);
    CU_ASSERT_EQUAL(r->entries[0].tier, 0);
    CU_ASSERT_NOT_EQUAL(emb->fingerprint, chat->fingerprint);

    const char *via = NULL;
    CU_ASSERT_PTR_EQUAL(dp_snapshot_route(s, "embedding", &via), emb);
    CU_ASSERT_STRING_EQUAL(via, "role");
    CU_ASSERT_PTR_EQUAL(dp_snapshot_route(s, "chat", &via), chat);
    CU_ASSERT_STRING_EQUAL(via, "route");
    CU_ASSERT_PTR_NULL(dp_snapshot_route(s, "vision", &via));
    dp_snapshot_unref(s);
}

/* The fingerprint of route "r" built from this route document. */
static uint64_t fingerprint_of(const char *route)
{
    char doc[1024], err[256] = "";
    snprintf(doc, sizeof(doc), ROUTES_DOC("%s", ""), route);
    struct dp_snapshot *s = build(doc, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct gw_pmap_iter it;
    dp_snapshot_iter(&s->routes, &it);
    const struct dp_route *r = dp_snapshot_next(&it); /* the only one */
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    uint64_t fp = r->fingerprint;
    dp_snapshot_unref(s);
    return fp;
}

static void test_fingerprint_follows_content(void)
{
    uint64_t base =
        fingerprint_of("{\"name\":\"r\",\"entries\":[" E("p", "m") "," E("q", "n") "]}");
    /* The same content, written again (aliases and roles do not matter). */
    CU_ASSERT_EQUAL(base, fingerprint_of("{\"name\":\"r\",\"aliases\":[\"x\"],\"entries\":[" E(
                              "p", "m") "," E("q", "n") "]}"));
    static const char *const edits[] = {
        "{\"name\":\"r2\",\"entries\":[" E("p", "m") "," E("q", "n") "]}",
        "{\"name\":\"r\",\"capability\":\"vision\",\"entries\":[" E("p", "m") "," E("q", "n") "]}",
        "{\"name\":\"r\",\"strategy\":\"price\",\"entries\":[" E("p", "m") "," E("q", "n") "]}",
        "{\"name\":\"r\",\"entries\":[" E("q", "n") "," E("p", "m") "]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") "," E("q", "n2") "]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") "," E("p", "n") "]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") "]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") ",{\"provider\":\"q\",\"model\":\"n\","
                                                    "\"weight\":2}]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") ",{\"provider\":\"q\",\"model\":\"n\","
                                                    "\"high_cost\":true}]}",
        "{\"name\":\"r\",\"entries\":[" E("p", "m") ",{\"provider\":\"q\",\"model\":\"n\","
                                                    "\"tier\":1}]}",
        /* Boundaries between strings count: "p"+"mq" is not "pm"+"q". */
        "{\"name\":\"r\",\"entries\":[" E("p", "mq") "," E("q", "n") "]}",
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(*edits); i++)
        if (fingerprint_of(edits[i]) == base) {
            fprintf(stderr, "\n  same fingerprint after an edit: %s\n", edits[i]);
            CU_FAIL("an edit left the fingerprint unchanged");
        }
}

/* A route's cache object, and the keys' and teams' TTL overrides
 * (docs/cache.md): parsed with their defaults, absent means off / the
 * route's setting. */
static void test_cache_fields(void)
{
    char err[256] = "";
    struct dp_snapshot *s = build(
        ROUTES_DOC("{\"name\":\"c\",\"cache\":{\"ttl_s\":300,\"scope\":\"project\","
                   "\"deterministic\":true},\"entries\":[" E(
                       "p", "m") "]},"
                                 "{\"name\":\"d\",\"cache\":{\"ttl_s\":2592000},\"entries\":[" E(
                                     "p", "m") "]},"
                                               "{\"name\":\"n\",\"cache\":null,\"entries\":[" E(
                                                   "p", "m") "]},"
                                                             "{\"name\":\"o\",\"entries\":[" E(
                                                                 "p", "m") "]}",
                   ",\"teams\":[{\"name\":\"t0\",\"cache_ttl_s\":0},{\"name\":\"t1\","
                   "\"cache_ttl_s\":60},{\"name\":\"t2\",\"cache_ttl_s\":null},{\"name\":\"t3\"}],"
                   "\"keys\":[{\"id\":\"a\",\"hash\":\"" HASH64 "\",\"cache_ttl_s\":0},"
                   "{\"id\":\"b\",\"hash\":\"" HASH64B "\",\"cache_ttl_s\":2592000},"
                   "{\"id\":\"c\",\"hash\":\"" HASH64C "\",\"cache_ttl_s\":null},"
                   "{\"id\":\"d\",\"hash\":\"" HASH64D "\"}]"),
        err, sizeof(err));
    if (!s)
        fprintf(stderr, "\n  refused: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const struct dp_route *c = dp_snapshot_route(s, "c", NULL);
    const struct dp_route *d = dp_snapshot_route(s, "d", NULL);
    const struct dp_route *n = dp_snapshot_route(s, "n", NULL);
    const struct dp_route *o = dp_snapshot_route(s, "o", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_EQUAL(c->cache.ttl_s, 300);
    CU_ASSERT_EQUAL(c->cache.scope, DP_CACHE_SCOPE_PROJECT);
    CU_ASSERT_EQUAL(c->cache.deterministic, 1);
    /* Defaults: scope team, not deterministic. */
    CU_ASSERT_EQUAL(d->cache.ttl_s, DP_CACHE_MAX_TTL_S);
    CU_ASSERT_EQUAL(d->cache.scope, DP_CACHE_SCOPE_TEAM);
    CU_ASSERT_EQUAL(d->cache.deterministic, 0);
    /* null and absent: off. */
    CU_ASSERT_EQUAL(n->cache.ttl_s, 0);
    CU_ASSERT_EQUAL(o->cache.ttl_s, 0);
    /* Every route has a content fingerprint, each its own. */
    CU_ASSERT_NOT_EQUAL(c->content_fp, 0);
    CU_ASSERT_NOT_EQUAL(c->content_fp, d->content_fp);
    CU_ASSERT_NOT_EQUAL(n->content_fp, o->content_fp);
    static const struct {
        const char *name;
        int has;
        long ttl;
    } teams[] = {{"t0", 1, 0}, {"t1", 1, 60}, {"t2", 0, 0}, {"t3", 0, 0}};
    for (size_t i = 0; i < sizeof(teams) / sizeof(*teams); i++) {
        const struct dp_team *t = dp_snapshot_team(s, teams[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(t->has_cache_ttl, teams[i].has);
        CU_ASSERT_EQUAL(t->cache_ttl_s, teams[i].ttl);
    }
    struct gw_pmap_iter it;
    const struct dp_key *k;
    int seen = 0;
    for (dp_snapshot_iter(&s->keys, &it); (k = dp_snapshot_next(&it)) != NULL; seen++) {
        int has = k->id[0] == 'a' || k->id[0] == 'b';
        CU_ASSERT_EQUAL(k->has_cache_ttl, has);
        CU_ASSERT_EQUAL(k->cache_ttl_s, k->id[0] == 'b' ? DP_CACHE_MAX_TTL_S : 0);
    }
    CU_ASSERT_EQUAL(seen, 4);

    /* The render writes the members back: built again from it, the same
     * settings and the same fingerprints. */
    size_t len = 0;
    char *text = dp_snapshot_render(s, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"cache\":{\"deterministic\":true,\"scope\":\"project\","
                                        "\"ttl_s\":300}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"cache_ttl_s\":60"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"cache_ttl_s\":2592000"));
    struct dp_snapshot *again = build(text, err, sizeof(err));
    free(text);
    CU_ASSERT_PTR_NOT_NULL_FATAL(again);
    const struct dp_route *c2 = dp_snapshot_route(again, "c", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c2);
    CU_ASSERT_EQUAL(c2->content_fp, c->content_fp);
    CU_ASSERT_EQUAL(c2->cache.ttl_s, 300);
    CU_ASSERT_EQUAL(c2->cache.scope, DP_CACHE_SCOPE_PROJECT);
    CU_ASSERT_EQUAL(c2->cache.deterministic, 1);
    CU_ASSERT_EQUAL(dp_snapshot_route(again, "n", NULL)->content_fp, n->content_fp);
    CU_ASSERT_EQUAL(dp_snapshot_team(again, "t1")->cache_ttl_s, 60);
    CU_ASSERT_EQUAL(dp_snapshot_team(again, "t0")->has_cache_ttl, 1);
    CU_ASSERT_EQUAL(dp_snapshot_team(again, "t3")->has_cache_ttl, 0);
    dp_snapshot_unref(again);
    dp_snapshot_unref(s);
}

#define CR(cache) "{\"name\":\"r\",\"cache\":" cache ",\"entries\":[" E("p", "m") "]}"

static void test_cache_fields_validated(void)
{
    expect_error(ROUTES_DOC(CR("300"), ""), "routes[0].cache: must be an object");
    expect_error(ROUTES_DOC(CR("[]"), ""), "routes[0].cache: must be an object");
    expect_error(ROUTES_DOC(CR("{}"), ""), "routes[0].cache.ttl_s: required");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":null}"), ""), "routes[0].cache.ttl_s: required");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":0}"), ""),
                 "routes[0].cache.ttl_s: must be an integer from 1 to 2592000");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":2592001}"), ""),
                 "routes[0].cache.ttl_s: must be an integer from 1 to 2592000");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":\"60\"}"), ""),
                 "routes[0].cache.ttl_s: must be an integer");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":1.5}"), ""),
                 "routes[0].cache.ttl_s: must be an integer");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":60,\"scope\":\"world\"}"), ""),
                 "routes[0].cache.scope: must be one of team, key, project, global");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":60,\"scope\":1}"), ""),
                 "routes[0].cache.scope: must be a string");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":60,\"deterministic\":\"yes\"}"), ""),
                 "routes[0].cache.deterministic: must be a boolean");
    expect_error(ROUTES_DOC(CR("{\"ttl_s\":60,\"ttl\":5}"), ""),
                 "routes[0].cache.ttl: unknown member");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64
                                       "\",\"cache_ttl_s\":-1}]"),
                 "keys[0].cache_ttl_s: must be an integer from 0 to 2592000");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64
                                       "\",\"cache_ttl_s\":\"60\"}]"),
                 "keys[0].cache_ttl_s: must be an integer from 0 to 2592000");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"teams\":[{\"name\":\"t\",\"cache_ttl_s\":2592001}]"),
                 "teams[0].cache_ttl_s: must be an integer from 0 to 2592000");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"teams\":[{\"name\":\"t\",\"cache_ttl_s\":true}]"),
                 "teams[0].cache_ttl_s: must be an integer from 0 to 2592000");
}

#define GR(guard) "{\"name\":\"r\",\"guard\":" guard ",\"entries\":[" E("p", "m") "]}"
#define JR(judge) "{\"name\":\"r\",\"judge\":" judge ",\"entries\":[" E("p", "m") "]}"
#define RUBRIC "{\"template\":\"{{prompt}} {{answer}}\"}"

/* A route's guard and judge, the keys' and teams' guard policies, and the
 * snapshot's rules (docs/guardrails.md): parsed with their defaults; the
 * rules replace the built-in ones, and render back. */
static void test_guard_fields(void)
{
    char err[256] = "";
    struct dp_snapshot *s = build(
        ROUTES_DOC(
            GR("{\"policy\":\"block\",\"inspect\":[\"user\",\"tool\"],"
               "\"min_severity\":\"medium\",\"classifier\":{\"route\":\"c\","
               "\"timeout_ms\":900,\"on_error\":\"fail_closed\"}}") ","
                                                                    "{\"name\":\"j\",\"judge\":{"
                                                                    "\"sample_rate\":0.25,"
                                                                    "\"route\":\"c\","
                                                                    "\"rubric\":{\"template\":\"{{"
                                                                    "prompt}}/"
                                                                    "{{answer}}\",\"scale_min\":0,"
                                                                    "\"scale_max\":10,\"pass_min\":"
                                                                    "7},\"keep_text\":true},"
                                                                    "\"entries\":[" E(
                                                                        "p", "m") "]},"
                                                                                  "{\"name\":\"c\","
                                                                                  "\"entries\":[" E(
                                                                                      "p",
                                                                                      "m") "]}",
            ",\"guard_rules\":[{\"id\":\"x\",\"severity\":\"low\",\"kind\":"
            "\"phrase\",\"pattern\":\"open sesame\"}],"
            "\"teams\":[{\"name\":\"t\",\"guard_policy\":\"log\"}],"
            "\"keys\":[{\"id\":\"a\",\"hash\":\"" HASH64 "\",\"guard_policy\":\"off\"},"
            "{\"id\":\"b\",\"hash\":\"" HASH64B "\"}]"),
        err, sizeof(err));
    if (!s)
        fprintf(stderr, "\n  refused: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const struct dp_route *r = dp_snapshot_route(s, "r", NULL);
    const struct dp_route *j = dp_snapshot_route(s, "j", NULL);
    const struct dp_route *c = dp_snapshot_route(s, "c", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(r->guard.set, 1);
    CU_ASSERT_EQUAL(r->guard.policy, DP_GUARD_BLOCK);
    CU_ASSERT_EQUAL(r->guard.inspect, DP_GUARD_INSPECT_USER | DP_GUARD_INSPECT_TOOL);
    CU_ASSERT_EQUAL(r->guard.rules, 1);
    CU_ASSERT_EQUAL(r->guard.min_severity, DP_GUARD_MEDIUM);
    CU_ASSERT_STRING_EQUAL(r->guard.classifier, "c");
    CU_ASSERT_EQUAL(r->guard.classifier_timeout_ms, 900);
    CU_ASSERT_EQUAL(r->guard.fail_closed, 1);
    /* Defaults: no guard, and a judge off. */
    CU_ASSERT_EQUAL(c->guard.set, 0);
    CU_ASSERT_EQUAL(c->guard.inspect, DP_GUARD_INSPECT_LAST_USER);
    CU_ASSERT_PTR_NULL(c->guard.classifier);
    CU_ASSERT_EQUAL(c->judge.sample_rate, 0);
    CU_ASSERT_EQUAL(j->judge.sample_rate, 0.25);
    CU_ASSERT_STRING_EQUAL(j->judge.route, "c");
    CU_ASSERT_STRING_EQUAL(j->judge.rubric, "{{prompt}}/{{answer}}");
    CU_ASSERT_EQUAL(j->judge.scale_min, 0);
    CU_ASSERT_EQUAL(j->judge.scale_max, 10);
    CU_ASSERT_EQUAL(j->judge.pass_min, 7);
    CU_ASSERT_EQUAL(j->judge.keep_text, 1);
    const struct dp_team *t = dp_snapshot_team(s, "t");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->has_guard_policy, 1);
    CU_ASSERT_EQUAL(t->guard_policy, DP_GUARD_LOG);
    struct gw_pmap_iter it;
    const struct dp_key *k;
    for (dp_snapshot_iter(&s->keys, &it); (k = dp_snapshot_next(&it)) != NULL;) {
        CU_ASSERT_EQUAL(k->has_guard_policy, k->id[0] == 'a');
        CU_ASSERT_EQUAL(k->guard_policy, DP_GUARD_OFF);
    }
    /* The document's one rule, not the defaults. */
    CU_ASSERT_EQUAL(dp_guard_rules_count(dp_snapshot_guard_rules(s)), 1);
    struct dp_guard_match m;
    CU_ASSERT_EQUAL(dp_guard_scan(dp_snapshot_guard_rules(s), "Open, SESAME!", 13, &m), 1);
    CU_ASSERT_STRING_EQUAL(m.rule_id, "x");
    size_t len = 0;
    char *text = dp_snapshot_render(s, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"guard_rules\":[{"));
    struct dp_snapshot *again = build(text, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(again);
    CU_ASSERT_EQUAL(dp_guard_rules_count(dp_snapshot_guard_rules(again)), 1);
    CU_ASSERT_EQUAL(dp_snapshot_route(again, "j", NULL)->judge.pass_min, 7);
    dp_snapshot_unref(again);
    free(text);
    dp_snapshot_unref(s);
    /* Without guard_rules: the built-in defaults. */
    s = build(ROUTES_DOC(ONE_ROUTE, ""), err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_EQUAL(dp_snapshot_guard_rules(s), dp_guard_rules_default());
    CU_ASSERT(dp_guard_rules_count(dp_snapshot_guard_rules(s)) >= 12);
    dp_snapshot_unref(s);
}

static void test_guard_fields_validated(void)
{
    expect_error(ROUTES_DOC(GR("\"block\""), ""), "routes[0].guard: must be an object");
    expect_error(ROUTES_DOC(GR("{}"), ""), "routes[0].guard.policy: required");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"deny\"}"), ""),
                 "routes[0].guard.policy: must be one of off, log, block");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"inspect\":[]}"), ""),
                 "routes[0].guard.inspect: must be a non-empty array");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"inspect\":[\"assistant\"]}"), ""),
                 "routes[0].guard.inspect[0]: must be one of last_user, user, tool, system");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"min_severity\":\"huge\"}"), ""),
                 "routes[0].guard.min_severity: must be one of low, medium, high");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"classifier\":{}}"), ""),
                 "routes[0].guard.classifier.route: required");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"classifier\":{\"route\":\"c\","
                               "\"timeout_ms\":60001}}"),
                            ""),
                 "routes[0].guard.classifier.timeout_ms: must be an integer from 1 to 60000");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"classifier\":{\"route\":\"c\","
                               "\"on_error\":\"retry\"}}"),
                            ""),
                 "routes[0].guard.classifier.on_error: must be one of fail_open, fail_closed");
    expect_error(ROUTES_DOC(GR("{\"policy\":\"log\",\"extra\":1}"), ""),
                 "routes[0].guard.extra: unknown member");
    expect_error(ROUTES_DOC(JR("{\"route\":\"c\",\"rubric\":" RUBRIC "}"), ""),
                 "routes[0].judge.sample_rate: required, a number from 0 to 1");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1.5,\"route\":\"c\",\"rubric\":" RUBRIC "}"), ""),
                 "routes[0].judge.sample_rate: required, a number from 0 to 1");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1,\"rubric\":" RUBRIC "}"), ""),
                 "routes[0].judge.route: required");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1,\"route\":\"c\"}"), ""),
                 "routes[0].judge.rubric: required");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1,\"route\":\"c\",\"rubric\":{\"template\":"
                               "\"{{prompt}} only\"}}"),
                            ""),
                 "routes[0].judge.rubric.template: must hold {{prompt}} and {{answer}}");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1,\"route\":\"c\",\"rubric\":{\"template\":"
                               "\"{{prompt}} {{answer}}\",\"scale_min\":5,\"scale_max\":5}}"),
                            ""),
                 "routes[0].judge.rubric.scale_max: must be above scale_min (5)");
    expect_error(ROUTES_DOC(JR("{\"sample_rate\":1,\"route\":\"c\",\"rubric\":{\"template\":"
                               "\"{{prompt}} {{answer}}\",\"pass_min\":9}}"),
                            ""),
                 "routes[0].judge.rubric.pass_min: must be an integer from 1 to 5");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64
                                       "\",\"guard_policy\":\"maybe\"}]"),
                 "keys[0].guard_policy: must be one of off, log, block");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"guard_rules\":{}"), "guard_rules: must be an array");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"guard_rules\":[{\"id\":\"x\",\"severity\":\"low\","
                                       "\"kind\":\"regex\",\"pattern\":\"(a\"}]"),
                 "guard_rules[0].pattern");
}

/* The content fingerprint of route "r" built from this route document. */
static uint64_t content_fp_of(const char *route)
{
    char doc[1024], err[256] = "";
    snprintf(doc, sizeof(doc), ROUTES_DOC("%s", ""), route);
    struct dp_snapshot *s = build(doc, err, sizeof(err));
    if (!s)
        fprintf(stderr, "\n  refused: %s\n", err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct gw_pmap_iter it;
    dp_snapshot_iter(&s->routes, &it);
    const struct dp_route *r = dp_snapshot_next(&it); /* the only one */
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    uint64_t fp = r->content_fp;
    dp_snapshot_unref(s);
    return fp;
}

/* content_fp follows every member of the route (the routing fingerprint
 * leaves out aliases, roles, timeouts and the cache settings), and only
 * its content: the same route written in another order or spacing keeps it. */
static void test_content_fp_follows_every_member(void)
{
#define BASE_ENTRIES "\"entries\":[" E("p", "m") "," E("q", "n") "]"
    uint64_t base = content_fp_of("{\"name\":\"r\",\"cache\":{\"ttl_s\":60}," BASE_ENTRIES "}");
    CU_ASSERT_EQUAL(base, content_fp_of("{ \"cache\" : { \"ttl_s\" : 60 } , " BASE_ENTRIES
                                        ", \"name\" : \"r\" }"));
    static const char *const edits[] = {
        "{\"name\":\"r\"," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":null," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":61}," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60,\"scope\":\"team\"}," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60,\"scope\":\"global\"}," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60,\"deterministic\":true}," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"aliases\":[\"x\"]," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"role\":\"summarize\"," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"max_duration_ms\":1000," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"fallback_timeout_ms\":1000," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"strategy\":\"price\"," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"capability\":\"vision\"," BASE_ENTRIES "}",
        "{\"name\":\"r2\",\"cache\":{\"ttl_s\":60}," BASE_ENTRIES "}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"entries\":[" E("q", "n") "," E("p", "m") "]}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"entries\":[" E("p", "m") "]}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"entries\":[" E(
            "p", "m") ",{\"provider\":\"q\",\"model\":\"n\",\"weight\":2}]}",
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60},\"entries\":[" E(
            "p", "m") ",{\"provider\":\"q\",\"model\":\"n\",\"tier\":1}]}",
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(*edits); i++)
        if (content_fp_of(edits[i]) == base) {
            fprintf(stderr, "\n  same content_fp after an edit: %s\n", edits[i]);
            CU_FAIL("an edit left content_fp unchanged");
        }
#undef BASE_ENTRIES
}

static void test_catalog(void)
{
    char err[256] = "";
    struct dp_snapshot *s = build(
        ROUTES_DOC(ONE_ROUTE,
                   ",\"catalog\":["
                   "{\"model\":\"m\",\"context_window\":8192,\"input_price\":1000,"
                   "\"output_price\":4000},"
                   "{\"provider\":\"q\",\"model\":\"m\",\"capabilities\":[\"chat\",\"tools\"],"
                   "\"input_price\":0},"
                   "{\"provider\":\"p\",\"model\":\"e\",\"capabilities\":[]}]"),
        err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(s->ncatalog, 3);
    /* A provider's own entry first, else the one for any provider. */
    const struct dp_catalog_entry *c = dp_snapshot_catalog(s, "q", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_STRING_EQUAL(c->provider, "q");
    CU_ASSERT_EQUAL(c->has_caps, 1);
    CU_ASSERT_EQUAL(c->caps, DRV_CAP_CHAT | DRV_CAP_TOOLS);
    CU_ASSERT_EQUAL(c->price.input, 0);
    CU_ASSERT_EQUAL(c->price.output, -1);
    CU_ASSERT_STRING_EQUAL(c->price.currency, "USD"); /* the default */
    CU_ASSERT_EQUAL(c->context_window, 0);
    c = dp_snapshot_catalog(s, "p", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NULL(c->provider);
    CU_ASSERT_EQUAL(c->has_caps, 0);
    CU_ASSERT_EQUAL(c->context_window, 8192);
    CU_ASSERT_EQUAL(c->price.input, 1000);
    CU_ASSERT_EQUAL(c->price.output, 4000);
    CU_ASSERT_EQUAL(c->price.cache_read, -1);
    CU_ASSERT_EQUAL(c->price.reasoning, -1);
    c = dp_snapshot_catalog(s, "p", "e");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(c->has_caps, 1);
    CU_ASSERT_EQUAL(c->caps, 0);
    CU_ASSERT_PTR_NULL(dp_snapshot_catalog(s, "q", "e"));
    CU_ASSERT_PTR_NULL(dp_snapshot_catalog(s, "p", "zzz"));
    dp_snapshot_unref(s);
}

/* Every price class and the currency travel with a catalog entry. */
static void test_catalog_prices(void)
{
    char err[256] = "";
    struct dp_snapshot *s = build(
        ROUTES_DOC(ONE_ROUTE, ",\"catalog\":["
                              "{\"model\":\"m\",\"input_price\":3000000,\"output_price\":15000000,"
                              "\"cache_read_price\":300000,\"cache_write_5m_price\":3750000,"
                              "\"cache_write_1h_price\":6000000,\"reasoning_price\":2500000,"
                              "\"currency\":\"EUR\"},"
                              "{\"provider\":\"p\",\"model\":\"m\",\"context_window\":100},"
                              "{\"provider\":\"q\",\"model\":\"m\",\"output_price\":7}]"),
        err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const struct dp_catalog_entry *c = dp_snapshot_catalog(s, "x", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(c->price.input, 3000000);
    CU_ASSERT_EQUAL(c->price.output, 15000000);
    CU_ASSERT_EQUAL(c->price.cache_read, 300000);
    CU_ASSERT_EQUAL(c->price.cache_write_5m, 3750000);
    CU_ASSERT_EQUAL(c->price.cache_write_1h, 6000000);
    CU_ASSERT_EQUAL(c->price.reasoning, 2500000);
    CU_ASSERT_STRING_EQUAL(c->price.currency, "EUR");
    /* The former names read the same storage. */
    CU_ASSERT_EQUAL(c->price.input, 3000000);
    CU_ASSERT_EQUAL(c->price.output, 15000000);
    /* dp_snapshot_price: the provider's own priced entry, else the
     * provider-less one (p's entry declares no price). */
    CU_ASSERT_PTR_EQUAL(dp_snapshot_price(s, "p", "m"), &c->price);
    const struct dp_price *q = dp_snapshot_price(s, "q", "m");
    CU_ASSERT_PTR_NOT_NULL_FATAL(q);
    CU_ASSERT_EQUAL(q->output, 7);
    CU_ASSERT_EQUAL(q->input, -1); /* never mixed with another entry's */
    CU_ASSERT_PTR_NULL(dp_snapshot_price(s, "q", "zzz"));
    dp_snapshot_unref(s);
}

static void test_key_allowlists(void)
{
    char err[256] = "";
    struct dp_snapshot *s =
        build(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"a\",\"hash\":\"" HASH64 "\","
                                    "\"allow_routes\":[\"r\",\"s\"],\"allow_providers\":[],"
                                    "\"allow_models\":[\"p/m\",\"n\"]},"
                                    "{\"id\":\"b\",\"hash\":\"" HASH64B "\"}]"),
              err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct gw_pmap_iter it;
    const struct dp_key *k, *ka = NULL, *kb = NULL;
    for (dp_snapshot_iter(&s->keys, &it); (k = dp_snapshot_next(&it)) != NULL;)
        *(strcmp(k->id, "a") == 0 ? &ka : &kb) = k;
    CU_ASSERT_PTR_NOT_NULL_FATAL(ka);
    CU_ASSERT_PTR_NOT_NULL_FATAL(kb);
    k = ka;
    CU_ASSERT_EQUAL(k->allow.nroutes, 2);
    CU_ASSERT_STRING_EQUAL(k->allow.routes[1], "s");
    /* An empty list allows nothing: it is not NULL. */
    CU_ASSERT_PTR_NOT_NULL(k->allow.providers);
    CU_ASSERT_EQUAL(k->allow.nproviders, 0);
    CU_ASSERT_EQUAL(k->allow.nmodels, 2);
    CU_ASSERT_STRING_EQUAL(k->allow.models[0], "p/m");
    k = kb;
    CU_ASSERT_PTR_NULL(k->allow.routes);
    CU_ASSERT_PTR_NULL(k->allow.providers);
    CU_ASSERT_PTR_NULL(k->allow.models);
    dp_snapshot_unref(s);
}

static void test_router_fields_validated(void)
{
    /* Roles. */
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"role\":\"boss\",\"entries\":[" E("p", "m") "]}", ""),
                 "routes[0].role: must be one of default, summarize, embedding, vision");
    expect_error(ROUTES_DOC("{\"name\":\"a\",\"role\":\"summarize\",\"entries\":[" E(
                                "p", "m") "]},"
                                          "{\"name\":\"b\",\"role\":\"summarize\",\"entries\":[" E(
                                              "p", "m") "]}",
                            ""),
                 "routes[1].role: 'summarize' is already the role of route 'a'");
    expect_error(
        ROUTES_DOC("{\"name\":\"a\",\"role\":\"default\",\"entries\":[" E(
                       "p", "m") "]},"
                                 "{\"name\":\"b\",\"aliases\":[\"default\"],\"entries\":[" E(
                                     "p", "m") "]}",
                   ""),
        "routes[0].role: 'default' is also the name or an alias of route 'b'");
    expect_error(ROUTES_DOC("{\"name\":\"summarize\",\"entries\":[" E(
                                "p", "m") "]},"
                                          "{\"name\":\"b\",\"role\":\"summarize\",\"entries\":[" E(
                                              "p", "m") "]}",
                            ""),
                 "routes[1].role: 'summarize' is also the name or an alias of route 'summarize'");
    /* Capability, and what a role needs of it. */
    expect_error(
        ROUTES_DOC("{\"name\":\"r\",\"capability\":\"audio\",\"entries\":[" E("p", "m") "]}", ""),
        "routes[0].capability: must be one of chat, embeddings, vision, transcription, speech, "
        "image");
    expect_error(
        ROUTES_DOC("{\"name\":\"r\",\"role\":\"embedding\",\"entries\":[" E("p", "m") "]}", ""),
        "routes[0].capability: the embedding role needs capability embeddings");
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"role\":\"vision\",\"capability\":\"chat\","
                            "\"entries\":[" E("p", "m") "]}",
                            ""),
                 "routes[0].capability: the vision role needs capability vision");
    /* Entries. */
    char doc[4096], entries[3072];
    for (int count = 33; count >= 32; count--) {
        size_t off = 0;
        for (int i = 0; i < count; i++)
            off += (size_t)snprintf(entries + off, sizeof(entries) - off,
                                    "%s{\"provider\":\"p\",\"model\":\"m%d\"}", i ? "," : "", i);
        snprintf(doc, sizeof(doc), ROUTES_DOC("{\"name\":\"r\",\"entries\":[%s]}", ""), entries);
        if (count == 33)
            expect_error(doc, "routes[0].entries: at most 32 entries");
    }
    char err[256] = "";
    struct dp_snapshot *s = build(doc, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(s);
    CU_ASSERT_EQUAL(s ? dp_snapshot_route(s, "r", NULL)->nentries : 0, 32);
    dp_snapshot_unref(s);
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"entries\":[" E(
                                "p", "m") ",{\"provider\":\"p\","
                                          "\"model\":\"n\",\"weight\":1000001}]}",
                            ""),
                 "routes[0].entries[1].weight: must be an integer from 0 to 1000000");
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"entries\":[{\"provider\":\"p\",\"model\":\"n\","
                            "\"weight\":1.5}]}",
                            ""),
                 "routes[0].entries[0].weight: must be an integer");
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"strategy\":\"weighted\",\"entries\":["
                            "{\"provider\":\"p\",\"model\":\"m\",\"weight\":0},"
                            "{\"provider\":\"q\",\"model\":\"m\",\"weight\":0}]}",
                            ""),
                 "routes[0].entries: a weighted route needs an entry with weight above 0");
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"entries\":[{\"provider\":\"p\",\"model\":\"n\","
                            "\"high_cost\":1}]}",
                            ""),
                 "routes[0].entries[0].high_cost: must be a boolean");
    expect_error(ROUTES_DOC("{\"name\":\"r\",\"entries\":[{\"provider\":\"p\",\"model\":\"n\","
                            "\"tier\":10}]}",
                            ""),
                 "routes[0].entries[0].tier: must be an integer from 0 to 9");
    expect_error(
        ROUTES_DOC("{\"name\":\"r\",\"entries\":[" E("p", "m") "," E("q", "m") "," E("p", "m") "]}",
                   ""),
        "routes[0].entries[2]: duplicate entry p/m (also entries[0])");
    /* Catalog. */
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":{}"), "catalog: must be an array");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"provider\":\"z\",\"model\":\"m\"}]"),
                 "catalog[0].provider: no provider named 'z'");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"provider\":\"p\"}]"),
                 "catalog[0].model: required, a non-empty string");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"context_window\":0}]"),
                 "catalog[0].context_window: must be an integer from 1");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\","
                                       "\"capabilities\":[\"chat\",\"telepathy\"]}]"),
                 "catalog[0].capabilities[1]: must be one of chat, embeddings, vision, tools, "
                 "json_mode, reasoning, transcription, speech, image");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"input_price\":1.5}]"),
                 "catalog[0].input_price: must be an integer count of picodollars per token");
    expect_error(
        ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"cache_write_1h_price\":6e-06}]"),
        "catalog[0].cache_write_1h_price: must be an integer count of picodollars per token");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"reasoning_price\":2.5}]"),
                 "catalog[0].reasoning_price: must be an integer count of picodollars per token");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"currency\":\"usd\"}]"),
                 "catalog[0].currency: must be three capital letters");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"currency\":5}]"),
                 "catalog[0].currency: must be a string");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"output_price\":-1}]"),
                 "catalog[0].output_price: must be an integer count of picodollars");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\",\"output_price\":\"3\"}]"),
                 "catalog[0].output_price: must be an integer count of picodollars");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"provider\":\"p\",\"model\":\"m\"},"
                                       "{\"model\":\"m\"},{\"provider\":\"p\",\"model\":\"m\"}]"),
                 "catalog[2]: duplicate entry for p/m (also catalog[0])");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"catalog\":[{\"model\":\"m\"},{\"model\":\"m\"}]"),
                 "catalog[1]: duplicate entry for model 'm' on any provider (also catalog[0])");
    /* Key allowlists. */
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64 "\","
                                       "\"allow_routes\":\"r\"}]"),
                 "keys[0].allow_routes: must be an array of non-empty strings");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64 "\","
                                       "\"allow_providers\":[\"p\",\"\"]}]"),
                 "keys[0].allow_providers[1]: must be a non-empty string");
    expect_error(ROUTES_DOC(ONE_ROUTE, ",\"keys\":[{\"id\":\"k\",\"hash\":\"" HASH64 "\","
                                       "\"allow_models\":[3]}]"),
                 "keys[0].allow_models[0]: must be a non-empty string");
    /* A provider's capability list names the offending element. */
    expect_error("{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"anthropic\","
                 "\"base_url\":\"http://h\",\"options\":{\"capabilities\":[\"chat\","
                 "\"embeddings\"]}}],\"routes\":[]}",
                 "providers[0].options.capabilities[1]: driver 'anthropic' does not support "
                 "'embeddings'");
}

static void test_current_swap(void)
{
    char err[256];
    struct dp_snapshot *a = build("{\"version\":1,\"providers\":[],\"routes\":[]}", err, 256);
    struct dp_snapshot *b = build("{\"version\":2,\"providers\":[],\"routes\":[]}", err, 256);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    dp_snapshot_publish(a);
    struct dp_snapshot *held = dp_snapshot_acquire();
    CU_ASSERT_EQUAL(held->version, 1);
    dp_snapshot_publish(b);
    /* A request that started on version 1 keeps it after the swap. */
    CU_ASSERT_EQUAL(held->version, 1);
    struct dp_snapshot *now = dp_snapshot_acquire();
    CU_ASSERT_EQUAL(now->version, 2);
    dp_snapshot_unref(held);
    dp_snapshot_unref(now);
    dp_snapshot_publish(NULL);
    CU_ASSERT_PTR_NULL(dp_snapshot_acquire());
}

static CU_TestInfo tests[] = {
    {"build and resolve selectors", test_build_and_resolve},
    {"validation errors name the field", test_validation_names_the_field},
    {"auth: keys by default, none only on purpose and without keys", test_auth},
    {"keys found through the hash index", test_key_index},
    {"credentials and header lines are wiped before the memory goes back", test_secrets_wiped},
    {"atomic swap keeps in-flight snapshots", test_current_swap},
    {"routes carry role, capability, strategy and entry flags", test_route_fields},
    {"a route's fingerprint follows its content", test_fingerprint_follows_content},
    {"catalog: every price class and the currency", test_catalog_prices},
    {"catalog: a provider's own entry first, then any provider's", test_catalog},
    {"key allowlists", test_key_allowlists},
    {"router fields are validated, naming the field", test_router_fields_validated},
    {"cache: a route's settings and the key and team TTLs, rendered back", test_cache_fields},
    {"cache: bad values are refused, naming the field", test_cache_fields_validated},
    {"guard and judge: parsed with their defaults, the rules replace the built-in ones",
     test_guard_fields},
    {"guard and judge: bad values are refused, naming the field", test_guard_fields_validated},
    {"a route's content_fp follows every member, not the spelling",
     test_content_fp_follows_every_member},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
