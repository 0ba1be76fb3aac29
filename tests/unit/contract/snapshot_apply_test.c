/*
 * Tests for dp_snapshot_apply: random write sequences, each applied as a
 * delta to the last snapshot and built whole from the document it makes;
 * the two must agree (both refuse, or both give the same snapshot: the
 * same rendered document, the same keys, selectors and roles), and the
 * snapshots before stay as they were.
 */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
#include "gw_crypto.h"

enum { KPROV, KROUTE, KKEY, KTEAM, KPROJ, KLIMIT, NKINDS };
static const char *const kind_name[NKINDS] = {"providers", "routes",   "keys",
                                              "teams",     "projects", "limits"};
static const char *const id_field[NKINDS] = {"name", "name", "id", "name", "name", "id"};
static const int kind_count[NKINDS] = {6, 24, 120, 4, 4, 10};

static unsigned rnd(unsigned n)
{
    return (unsigned)rand() % n;
}

static void key_hash(int i, char hex[65])
{
    char plain[32];
    snprintf(plain, sizeof(plain), "sk-test-%d", i);
    gw_sha256_hex(plain, strlen(plain), hex);
}

/* A random resource of kind k numbered i (a few are invalid on purpose:
 * a route on a provider that may be gone, a key on a team that may be). */
static json_t *random_resource(int k, int i)
{
    char name[32];
    snprintf(name, sizeof(name), "%c%d", "prktjl"[k], i);
    json_t *o = json_object();
    json_object_set_new(o, id_field[k], json_string(name));
    char ref[32];
    switch (k) {
    case KPROV:
        json_object_set_new(o, "driver", json_string(rnd(2) ? "openai" : "anthropic"));
        json_object_set_new(o, "base_url", json_string(rnd(2) ? "http://a/v1" : "http://b"));
        json_object_set_new(o, "credential", json_string(rnd(2) ? "sk-1" : "sk-2"));
        if (rnd(3) == 0)
            json_object_set_new(o, "enabled", json_false());
        break;
    case KROUTE: {
        json_t *e = json_array();
        unsigned n = 1 + rnd(3);
        for (unsigned j = 0; j < n; j++) {
            snprintf(ref, sizeof(ref), "p%u", rnd(kind_count[KPROV]));
            char model[16];
            snprintf(model, sizeof(model), "m%u", j);
            json_array_append_new(e, json_pack("{s:s,s:s,s:i}", "provider", ref, "model", model,
                                               "weight", (int)rnd(3) + 1));
        }
        json_object_set_new(o, "entries", e);
        if (rnd(4) == 0) {
            snprintf(ref, sizeof(ref), "alias%u", rnd(30)); /* may collide */
            json_object_set_new(o, "aliases", json_pack("[s]", ref));
        }
        if (rnd(10) == 0)
            json_object_set_new(o, "role", json_string(rnd(2) ? "default" : "summarize"));
        if (rnd(3) == 0)
            json_object_set_new(o, "strategy", json_string("weighted"));
        if (rnd(3) == 0) {
            int ttl = 1 + (int)rnd(600);
            const char *scope = rnd(2) ? "team" : "key";
            json_object_set_new(o, "cache",
                                json_pack("{s:i,s:s,s:b}", "ttl_s", ttl, "scope", scope,
                                          "deterministic", (int)rnd(2)));
        }
        break;
    }
    case KKEY: {
        char hex[65];
        key_hash(i, hex);
        json_object_set_new(o, "hash", json_string(hex));
        json_object_set_new(o, "status", json_string(rnd(5) ? "active" : "disabled"));
        if (rnd(2)) {
            snprintf(ref, sizeof(ref), "t%u", rnd(kind_count[KTEAM]));
            json_object_set_new(o, "team", json_string(ref));
            if (rnd(3) == 0) {
                snprintf(ref, sizeof(ref), "j%u", rnd(kind_count[KPROJ]));
                json_object_set_new(o, "project", json_string(ref));
            }
        }
        if (rnd(4) == 0)
            json_object_set_new(o, "allow_routes", json_pack("[s]", "r1"));
        if (rnd(4) == 0)
            json_object_set_new(o, "cache_ttl_s", json_integer(rnd(3) * 60));
        break;
    }
    case KTEAM:
        json_object_set_new(o, "require_budget", json_boolean(rnd(2)));
        if (rnd(2))
            json_object_set_new(o, "cache_ttl_s", rnd(2) ? json_null() : json_integer(rnd(100)));
        break;
    case KPROJ:
        if (rnd(2)) {
            snprintf(ref, sizeof(ref), "t%u", rnd(kind_count[KTEAM]));
            json_object_set_new(o, "team", json_string(ref));
        }
        break;
    case KLIMIT:
        json_object_set_new(o, "scope_kind", json_string("key"));
        snprintf(ref, sizeof(ref), "k%u", rnd(kind_count[KKEY]));
        json_object_set_new(o, "scope", json_string(ref));
        json_object_set_new(o, "metric", json_string("requests"));
        json_object_set_new(o, "period", json_string("minute"));
        json_object_set_new(o, "amount", json_integer(1 + rnd(100)));
        break;
    }
    return o;
}

/* The whole document of a model (per kind, an object of resources by
 * name) and a catalog. */
static json_t *document(json_t *const model[NKINDS], const json_t *catalog, long long version)
{
    json_t *doc = json_pack("{s:I}", "version", (json_int_t)version);
    for (int k = 0; k < NKINDS; k++) {
        json_t *a = json_array();
        const char *name;
        json_t *v;
        json_object_foreach(model[k], name, v) json_array_append(a, v);
        json_object_set_new(doc, kind_name[k], a);
    }
    json_object_set(doc, "catalog", (json_t *)catalog);
    return doc;
}

static json_t *random_catalog(void)
{
    json_t *a = json_array();
    unsigned n = rnd(4);
    for (unsigned i = 0; i < n; i++) {
        char p[16], m[16];
        snprintf(p, sizeof(p), "p%u", rnd(kind_count[KPROV]));
        snprintf(m, sizeof(m), "cm%u", i);
        json_array_append_new(a, json_pack("{s:s,s:s,s:i}", "provider", p, "model", m,
                                           "input_price", (int)rnd(1000)));
    }
    return a;
}

/* Two snapshots agree: the same document, the same finds. */
static void expect_same(const struct dp_snapshot *a, const struct dp_snapshot *b)
{
    size_t la = 0, lb = 0;
    char *ta = dp_snapshot_render(a, &la), *tb = dp_snapshot_render(b, &lb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ta);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tb);
    CU_ASSERT_EQUAL(la, lb);
    if (strcmp(ta, tb) != 0) {
        CU_FAIL("the applied and the built snapshot render differently");
        fprintf(stderr, "\napplied: %.400s\nbuilt:   %.400s\n", ta, tb);
    }
    free(ta);
    free(tb);
    CU_ASSERT_EQUAL(a->nproviders, b->nproviders);
    CU_ASSERT_EQUAL(a->nroutes, b->nroutes);
    CU_ASSERT_EQUAL(a->nkeys, b->nkeys);
    CU_ASSERT_EQUAL(a->nlimits, b->nlimits);
    CU_ASSERT_EQUAL(a->ncatalog, b->ncatalog);
    for (int i = 0; i < kind_count[KKEY]; i++) {
        char plain[32];
        snprintf(plain, sizeof(plain), "sk-test-%d", i);
        const struct dp_key *ka = dp_snapshot_find_key(a, plain, strlen(plain));
        const struct dp_key *kb = dp_snapshot_find_key(b, plain, strlen(plain));
        CU_ASSERT((ka == NULL) == (kb == NULL));
        if (ka && kb) {
            CU_ASSERT_STRING_EQUAL(ka->id, kb->id);
            CU_ASSERT_EQUAL(ka->has_cache_ttl, kb->has_cache_ttl);
            CU_ASSERT_EQUAL(ka->cache_ttl_s, kb->cache_ttl_s);
        }
    }
    for (int i = 0; i < 30; i++) {
        char sel[32];
        snprintf(sel, sizeof(sel), i < 24 ? "r%d" : "alias%d", i < 24 ? i : i - 24);
        const struct dp_route *ra = dp_snapshot_route(a, sel, NULL);
        const struct dp_route *rb = dp_snapshot_route(b, sel, NULL);
        CU_ASSERT((ra == NULL) == (rb == NULL));
        if (ra && rb) {
            CU_ASSERT_STRING_EQUAL(ra->name, rb->name);
            CU_ASSERT_EQUAL(ra->fingerprint, rb->fingerprint);
            CU_ASSERT_EQUAL(ra->content_fp, rb->content_fp);
            CU_ASSERT_EQUAL(ra->cache.ttl_s, rb->cache.ttl_s);
            CU_ASSERT_EQUAL(ra->cache.scope, rb->cache.scope);
            CU_ASSERT_EQUAL(ra->cache.deterministic, rb->cache.deterministic);
            /* Entries point into this snapshot's own providers. */
            for (size_t j = 0; j < ra->nentries; j++)
                CU_ASSERT_PTR_EQUAL(ra->entries[j].provider,
                                    dp_snapshot_provider(a, ra->entries[j].provider->name,
                                                         strlen(ra->entries[j].provider->name)));
        }
    }
    for (int r = 0; r < DP_NROLES; r++)
        CU_ASSERT((a->roles[r] == NULL) == (b->roles[r] == NULL));
    for (int i = 0; i < kind_count[KTEAM]; i++) {
        char name[32];
        snprintf(name, sizeof(name), "t%d", i);
        const struct dp_team *tea = dp_snapshot_team(a, name), *teb = dp_snapshot_team(b, name);
        CU_ASSERT((tea == NULL) == (teb == NULL));
        if (tea && teb) {
            CU_ASSERT_EQUAL(tea->has_cache_ttl, teb->has_cache_ttl);
            CU_ASSERT_EQUAL(tea->cache_ttl_s, teb->cache_ttl_s);
        }
    }
    /* The index by scope holds exactly the limits naming each key. */
    for (int i = 0; i < kind_count[KKEY]; i++) {
        char id[32];
        snprintf(id, sizeof(id), "k%d", i);
        size_t want = 0;
        struct gw_pmap_iter it;
        const struct dp_limit *l;
        for (dp_snapshot_iter(&a->limits, &it); (l = dp_snapshot_next(&it)) != NULL;)
            want += strcmp(l->scope, id) == 0;
        const struct dp_limit *const *xa, *const *xb;
        size_t na = dp_snapshot_limits_of(a, DP_LIMIT_KEY, id, &xa);
        size_t nb = dp_snapshot_limits_of(b, DP_LIMIT_KEY, id, &xb);
        CU_ASSERT_EQUAL(na, want);
        CU_ASSERT_EQUAL(nb, want);
        for (size_t j = 0; j < na; j++) {
            CU_ASSERT_STRING_EQUAL(xa[j]->scope, id);
            CU_ASSERT_PTR_EQUAL(dp_snapshot_limit(a, xa[j]->id), xa[j]);
        }
    }
}

static void test_random_deltas_agree_with_whole_builds(void)
{
    srand(20261203);
    json_t *model[NKINDS];
    for (int k = 0; k < NKINDS; k++)
        model[k] = json_object();
    /* A valid start: the providers, teams and projects without teams. */
    for (int i = 0; i < kind_count[KPROV]; i++) {
        json_t *p = random_resource(KPROV, i);
        json_object_set_new(model[KPROV], json_string_value(json_object_get(p, "name")), p);
    }
    for (int i = 0; i < kind_count[KTEAM]; i++) {
        json_t *t = random_resource(KTEAM, i);
        json_object_set_new(model[KTEAM], json_string_value(json_object_get(t, "name")), t);
    }
    json_t *catalog = json_array();
    long long version = 1;
    json_t *doc = document(model, catalog, version);
    char err[512] = "";
    struct dp_snapshot *cur = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cur);
    int applied = 0, refused = 0, multi = 0;
    for (int step = 0; step < 1500; step++) {
        /* One to three writes in one delta, each of a random kind. */
        json_t *delta = json_pack("{s:I,s:I}", "version", (json_int_t)(version + 1), "base_version",
                                  (json_int_t)version);
        json_t *next[NKINDS];
        for (int k = 0; k < NKINDS; k++)
            next[k] = json_deep_copy(model[k]);
        json_t *next_catalog = json_incref(catalog);
        unsigned writes = 1 + (rnd(4) == 0 ? rnd(3) : 0);
        multi += writes > 1;
        for (unsigned w = 0; w < writes; w++) {
            if (rnd(40) == 0) {
                json_decref(next_catalog);
                next_catalog = random_catalog();
                json_object_set(delta, "catalog", next_catalog);
                continue;
            }
            static const int weights[] = {KPROV, KROUTE, KROUTE, KROUTE, KKEY,  KKEY,
                                          KKEY,  KKEY,   KTEAM,  KPROJ,  KLIMIT};
            int k = weights[rnd(sizeof(weights) / sizeof(weights[0]))];
            int i = (int)rnd((unsigned)kind_count[k]);
            char name[32];
            snprintf(name, sizeof(name), "%c%d", "prktjl"[k], i);
            json_t *sec = json_object_get(delta, kind_name[k]);
            if (!sec) {
                sec = json_object();
                json_object_set_new(delta, kind_name[k], sec);
            }
            if (json_object_get(next[k], name) && rnd(4) == 0) {
                json_object_del(next[k], name);
                json_object_set_new(sec, name, json_null());
            } else {
                json_t *o = random_resource(k, i);
                json_object_set(next[k], name, o);
                json_object_set_new(sec, name, o);
            }
        }
        doc = document(next, next_catalog, version + 1);
        char e1[512] = "", e2[512] = "";
        struct dp_snapshot *whole = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, e1, sizeof(e1));
        size_t before_len = 0;
        char *before = dp_snapshot_render(cur, &before_len);
        struct dp_snapshot *inc = dp_snapshot_apply(cur, delta, DP_SNAPSHOT_PUSHED, e2, sizeof(e2));
        /* The base is untouched either way. */
        size_t after_len = 0;
        char *after = dp_snapshot_render(cur, &after_len);
        CU_ASSERT_STRING_EQUAL(before, after);
        free(before);
        free(after);
        if ((whole == NULL) != (inc == NULL)) {
            CU_FAIL("the delta and the whole build disagree on refusing");
            fprintf(stderr, "\nstep %d: whole: %s\n  delta: %s\n", step, whole ? "ok" : e1,
                    inc ? "ok" : e2);
        }
        if (whole && inc) {
            expect_same(inc, whole);
            dp_snapshot_unref(cur);
            cur = inc;
            inc = NULL;
            for (int k = 0; k < NKINDS; k++) {
                json_decref(model[k]);
                model[k] = json_incref(next[k]);
            }
            json_decref(catalog);
            catalog = json_incref(next_catalog);
            version++;
            applied++;
        } else {
            refused++;
        }
        dp_snapshot_unref(whole);
        dp_snapshot_unref(inc);
        for (int k = 0; k < NKINDS; k++)
            json_decref(next[k]);
        json_decref(next_catalog);
        json_decref(doc);
        json_decref(delta);
    }
    /* The sequence did both. */
    CU_ASSERT(applied > 300);
    CU_ASSERT(refused > 50);
    CU_ASSERT(multi > 100);
    CU_ASSERT(cur->nkeys > 20 && cur->nroutes > 5);
    dp_snapshot_unref(cur);
    for (int k = 0; k < NKINDS; k++)
        json_decref(model[k]);
    json_decref(catalog);
}

static void test_refusals_name_the_field(void)
{
    json_t *doc = json_loads(
        "{\"version\":5,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\",\"base_url\":"
        "\"http://h\"}],\"routes\":[{\"name\":\"r\",\"entries\":[{\"provider\":\"p\",\"model\":"
        "\"m\"}]}],\"keys\":[],\"teams\":[],\"projects\":[],\"limits\":[]}",
        0, NULL);
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    static const struct {
        const char *delta, *err;
    } cases[] = {
        {"{\"version\":7,\"base_version\":4}", "base_version: 4 is not this snapshot's version 5"},
        {"{\"version\":5,\"base_version\":5}", "version: required, an integer above base_version"},
        {"{\"version\":6,\"base_version\":5,\"providers\":{\"p\":null}}",
         "routes['r'].entries[0].provider: no provider named 'p'"},
        {"{\"version\":6,\"base_version\":5,\"keys\":{\"k\":{\"id\":\"k\",\"hash\":\"00\"}}}",
         "keys['k'].hash: must be 64 lowercase hex digits (sha256 of the key)"},
        {"{\"version\":6,\"base_version\":5,\"keys\":{\"k\":{\"id\":\"other\",\"hash\":"
         "\"0000000000000000000000000000000000000000000000000000000000000000\"}}}",
         "keys['k'].id: 'other' is filed under 'k': a resource's member is its own id"},
        {"{\"version\":6,\"base_version\":5,\"keys\":{\"k\":{\"id\":\"k\",\"team\":\"t\",\"hash\":"
         "\"0000000000000000000000000000000000000000000000000000000000000000\"}}}",
         "keys['k'].team: no team named 't' in teams"},
        {"{\"version\":6,\"base_version\":5,\"routes\":{\"s\":{\"name\":\"s\",\"aliases\":[\"r\"],"
         "\"entries\":[{\"provider\":\"p\",\"model\":\"m\"}]}}}",
         "routes['s'].aliases[0]: 'r' is already a route name or alias"},
        {"{\"version\":6,\"base_version\":5,\"routes\":[]}",
         "routes: must be an object of resources by name"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        json_t *d = json_loads(cases[i].delta, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        err[0] = '\0';
        struct dp_snapshot *n = dp_snapshot_apply(s, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
        CU_ASSERT_PTR_NULL(n);
        if (strcmp(err, cases[i].err) != 0)
            fprintf(stderr, "\n  case %zu: got '%s'\n", i, err);
        CU_ASSERT_STRING_EQUAL(err, cases[i].err);
        dp_snapshot_unref(n);
        json_decref(d);
    }
    dp_snapshot_unref(s);
}

/* What an apply shares: a key write leaves every route (and the provider
 * items they point into) the very same memory. */
static void test_unchanged_resources_are_shared(void)
{
    json_t *doc = json_loads(
        "{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\",\"base_url\":"
        "\"http://h\"}],\"routes\":[{\"name\":\"r\",\"entries\":[{\"provider\":\"p\",\"model\":"
        "\"m\"}]}],\"keys\":[]}",
        0, NULL);
    char err[256] = "";
    struct dp_snapshot *a = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    json_t *d = json_loads("{\"version\":2,\"base_version\":1,\"keys\":{\"k\":{\"id\":\"k\","
                           "\"hash\":\"" /* sha256("x") */
                           "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881\"}}}",
                           0, NULL);
    struct dp_snapshot *b = dp_snapshot_apply(a, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_PTR_EQUAL(dp_snapshot_route(a, "r", NULL), dp_snapshot_route(b, "r", NULL));
    CU_ASSERT_PTR_NULL(dp_snapshot_find_key(a, "x", 1));
    CU_ASSERT_PTR_NOT_NULL(dp_snapshot_find_key(b, "x", 1));
    dp_snapshot_unref(a); /* b keeps what it shares */
    CU_ASSERT_STRING_EQUAL(dp_snapshot_route(b, "r", NULL)->entries[0].provider->name, "p");
    dp_snapshot_unref(b);
}

static struct dp_snapshot *apply_text(const struct dp_snapshot *base, const char *delta)
{
    char err[256] = "";
    json_t *d = json_loads(delta, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    struct dp_snapshot *n = dp_snapshot_apply(base, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(d);
    if (!n)
        fprintf(stderr, "\n  refused: %s\n", err);
    return n;
}

/* A route's content_fp (and its cache settings) through deltas: kept by
 * an apply that touches other resources (a key, a team, another route,
 * the provider it names: that one builds the route again from its
 * text), changed by an apply that edits it, and the same as a whole
 * build of the same route gives. */
static void test_content_fp_across_applies(void)
{
#define RT_R(extra) "{\"name\":\"r\"," extra "\"entries\":[{\"provider\":\"p\",\"model\":\"m\"}]}"
    json_t *doc = json_loads(
        "{\"version\":1,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\",\"base_url\":"
        "\"http://h\"}],\"routes\":[" RT_R(
            "\"cache\":{\"ttl_s\":60,\"scope\":\"key\"},") ","
                                                           "{\"name\":\"s\",\"entries\":[{"
                                                           "\"provider\":\"p\",\"model\":\"m\"}]}],"
                                                           "\"keys\":[],\"teams\":[{\"name\":\"t\"}"
                                                           "]}",
        0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    char err[256] = "";
    struct dp_snapshot *a = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    const struct dp_route *ra = dp_snapshot_route(a, "r", NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ra);
    uint64_t fp = ra->content_fp;
    CU_ASSERT_EQUAL(ra->cache.ttl_s, 60);
    CU_ASSERT_EQUAL(ra->cache.scope, DP_CACHE_SCOPE_KEY);

    /* Another resource each time: r's content_fp stays. */
    struct dp_snapshot *b =
        apply_text(a, "{\"version\":2,\"base_version\":1,\"keys\":{\"k\":{\"id\":\"k\","
                      "\"cache_ttl_s\":0,\"hash\":\"" /* sha256("x") */
                      "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881\"}},"
                      "\"teams\":{\"t\":{\"name\":\"t\",\"cache_ttl_s\":120}},"
                      "\"routes\":{\"s\":{\"name\":\"s\",\"cache\":{\"ttl_s\":5},"
                      "\"entries\":[{\"provider\":\"p\",\"model\":\"m2\"}]}}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(dp_snapshot_route(b, "r", NULL)->content_fp, fp);
    CU_ASSERT_NOT_EQUAL(dp_snapshot_route(b, "s", NULL)->content_fp,
                        dp_snapshot_route(a, "s", NULL)->content_fp);
    CU_ASSERT_EQUAL(dp_snapshot_route(b, "s", NULL)->cache.ttl_s, 5);
    CU_ASSERT_EQUAL(dp_snapshot_team(b, "t")->has_cache_ttl, 1);
    CU_ASSERT_EQUAL(dp_snapshot_team(b, "t")->cache_ttl_s, 120);
    const struct dp_key *k = dp_snapshot_find_key(b, "x", 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(k);
    CU_ASSERT_EQUAL(k->has_cache_ttl, 1);
    CU_ASSERT_EQUAL(k->cache_ttl_s, 0);

    /* The provider r names changes: r is built again, its text unchanged. */
    struct dp_snapshot *c = apply_text(
        b, "{\"version\":3,\"base_version\":2,\"providers\":{\"p\":{\"name\":\"p\",\"driver\":"
           "\"openai\",\"base_url\":\"http://h2\"}}}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_PTR_NOT_EQUAL(dp_snapshot_route(c, "r", NULL), dp_snapshot_route(b, "r", NULL));
    CU_ASSERT_EQUAL(dp_snapshot_route(c, "r", NULL)->content_fp, fp);
    CU_ASSERT_EQUAL(dp_snapshot_route(c, "r", NULL)->cache.ttl_s, 60);

    /* Each edit of r changes it, and agrees with a whole build of r. */
    static const char *const edits[] = {
        RT_R("\"cache\":{\"ttl_s\":61,\"scope\":\"key\"},"),
        RT_R("\"cache\":{\"ttl_s\":60,\"scope\":\"team\"},"),
        RT_R("\"cache\":{\"ttl_s\":60,\"scope\":\"key\",\"deterministic\":true},"),
        RT_R("\"cache\":null,"),
        RT_R(""),
        RT_R("\"cache\":{\"ttl_s\":60,\"scope\":\"key\"},\"max_duration_ms\":5000,"),
        "{\"name\":\"r\",\"cache\":{\"ttl_s\":60,\"scope\":\"key\"},"
        "\"entries\":[{\"provider\":\"p\",\"model\":\"m\",\"weight\":3}]}",
    };
    for (size_t i = 0; i < sizeof(edits) / sizeof(*edits); i++) {
        char delta[512];
        snprintf(delta, sizeof(delta), "{\"version\":4,\"base_version\":3,\"routes\":{\"r\":%s}}",
                 edits[i]);
        struct dp_snapshot *d = apply_text(c, delta);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        const struct dp_route *rd = dp_snapshot_route(d, "r", NULL);
        CU_ASSERT_NOT_EQUAL(rd->content_fp, fp);
        char whole[768];
        snprintf(whole, sizeof(whole),
                 "{\"version\":4,\"providers\":[{\"name\":\"p\",\"driver\":\"openai\","
                 "\"base_url\":\"http://h2\"}],\"routes\":[%s]}",
                 edits[i]);
        json_t *wd = json_loads(whole, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(wd);
        struct dp_snapshot *w = dp_snapshot_build_ex(wd, DP_SNAPSHOT_PUSHED, err, sizeof(err));
        json_decref(wd);
        CU_ASSERT_PTR_NOT_NULL_FATAL(w);
        const struct dp_route *rw = dp_snapshot_route(w, "r", NULL);
        CU_ASSERT_EQUAL(rd->content_fp, rw->content_fp);
        CU_ASSERT_EQUAL(rd->cache.ttl_s, rw->cache.ttl_s);
        CU_ASSERT_EQUAL(rd->cache.scope, rw->cache.scope);
        CU_ASSERT_EQUAL(rd->cache.deterministic, rw->cache.deterministic);
        dp_snapshot_unref(w);
        dp_snapshot_unref(d);
    }
    /* A bad cache member in a delta is refused, naming it. */
    static const struct {
        const char *delta, *err;
    } bad[] = {
        {"{\"version\":4,\"base_version\":3,\"routes\":{\"r\":" RT_R(
             "\"cache\":{\"ttl_s\":60,\"scope\":\"org\"},") "}}",
         "routes['r'].cache.scope: must be one of team, key, project, global"},
        {"{\"version\":4,\"base_version\":3,\"routes\":{\"r\":" RT_R(
             "\"cache\":{\"ttl_s\":0},") "}}",
         "routes['r'].cache.ttl_s: must be an integer from 1 to 2592000 (s)"},
        {"{\"version\":4,\"base_version\":3,\"teams\":{\"t\":{\"name\":\"t\",\"cache_ttl_s\":-5}}}",
         "teams['t'].cache_ttl_s: must be an integer from 0 to 2592000"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        json_t *d = json_loads(bad[i].delta, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        err[0] = '\0';
        struct dp_snapshot *n = dp_snapshot_apply(c, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
        json_decref(d);
        CU_ASSERT_PTR_NULL(n);
        if (!strstr(err, bad[i].err))
            fprintf(stderr, "\n  case %zu: got '%s'\n", i, err);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, bad[i].err));
        dp_snapshot_unref(n);
    }
    dp_snapshot_unref(c);
    dp_snapshot_unref(b);
    dp_snapshot_unref(a);
#undef RT_R
}

/* Two keys trading hashes in one delta: the whole build takes the result,
 * so the apply does too. */
static void test_keys_trade_hashes(void)
{
#define HA "0000000000000000000000000000000000000000000000000000000000000001"
#define HB "0000000000000000000000000000000000000000000000000000000000000002"
    json_t *doc =
        json_loads("{\"version\":1,\"providers\":[],\"routes\":[],\"keys\":["
                   "{\"id\":\"a\",\"hash\":\"" HA "\"},{\"id\":\"b\",\"hash\":\"" HB "\"}]}",
                   0, NULL);
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    json_t *d = json_loads("{\"version\":2,\"base_version\":1,\"keys\":{"
                           "\"a\":{\"id\":\"a\",\"hash\":\"" HB "\"},"
                           "\"b\":{\"id\":\"b\",\"hash\":\"" HA "\"}}}",
                           0, NULL);
    struct dp_snapshot *n = dp_snapshot_apply(s, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    json_decref(d);
    CU_ASSERT_PTR_NOT_NULL(n);
    if (!n)
        fprintf(stderr, "\n  refused: %s\n", err);
    dp_snapshot_unref(n);
    dp_snapshot_unref(s);
#undef HA
#undef HB
}

/* A document's and a delta's credentials are zeroed in place. */
static void test_wipe_json(void)
{
    json_t *doc =
        json_loads("{\"providers\":[{\"name\":\"p\",\"credential\":\"sk-doc\"}]}", 0, NULL);
    json_t *delta = json_loads(
        "{\"providers\":{\"p\":{\"name\":\"p\",\"credential\":\"sk-delta\"},\"q\":null}}", 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(delta);
    const char *a = json_string_value(
        json_object_get(json_array_get(json_object_get(doc, "providers"), 0), "credential"));
    const char *b = json_string_value(
        json_object_get(json_object_get(json_object_get(delta, "providers"), "p"), "credential"));
    dp_snapshot_wipe_json(doc);
    dp_snapshot_wipe_json(delta);
    dp_snapshot_wipe_json(NULL);
    for (int i = 0; i < 6; i++)
        CU_ASSERT_EQUAL(a[i], 0);
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(b[i], 0);
    json_decref(doc);
    json_decref(delta);
}

static CU_TestInfo tests[] = {
    {"random deltas agree with whole builds", test_random_deltas_agree_with_whole_builds},
    {"refused deltas name the field", test_refusals_name_the_field},
    {"unchanged resources are shared, not copied", test_unchanged_resources_are_shared},
    {"a document's and a delta's credentials are wiped in place", test_wipe_json},
    {"two keys trade hashes in one delta", test_keys_trade_hashes},
    {"a route's content_fp and cache settings through deltas", test_content_fp_across_applies},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
