/* Tests for contract/routing/dp_router.c: selectors of every kind, every skip
 * reason and no-route cause with a message naming each skipped target,
 * each strategy's order, affinity, stickiness, high-cost entries,
 * embeddings, allowlists. Breaker-dependent paths are in
 * router_breaker_test.c. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_breaker.h"
#include "dp_driver_catalog.h"
#include "dp_fleet.h"
#include "dp_router.h"
#include "dp_tokens.h"
#include "gw_buf.h"
#include "gw_error.h"

#define EN(p, m) "{'provider':'" p "','model':'" m "'}"

/* Single quotes stand for double quotes, to keep the documents readable. */
static const char DOC[] =
    "{'version':1,"
    " 'providers':["
    "  {'name':'mock','driver':'openai','base_url':'http://m'},"
    "  {'name':'claude','driver':'anthropic','base_url':'http://c',"
    /* Narrowed: the anthropic driver has json_mode (structured output);
     * these tests need a target without it. */
    "   'options':{'capabilities':['chat','vision','tools','reasoning']}},"
    "  {'name':'alt','driver':'openai','base_url':'http://a'},"
    "  {'name':'off','driver':'openai','base_url':'http://o','enabled':false},"
    "  {'name':'nocred','driver':'openai','base_url':'http://n',"
    "   'credential_ref':'env:ROUTER_TEST_NEVER_SET'},"
    "  {'name':'text','driver':'openai','base_url':'http://t',"
    "   'options':{'capabilities':['chat']}},"
    "  {'name':'vec','driver':'openai','base_url':'http://v'},"
    "  {'name':'vec2','driver':'ollama','base_url':'http://v2'}],"
    " 'routes':["
    "  {'name':'smart','aliases':['brainy'],'role':'default',"
    "   'entries':[" EN("mock", "gpt-x") "," EN(
        "claude",
        "mock-claude") "]},"
                       "  {'name':'vis','role':'vision','capability':'vision',"
                       "   'entries':[" EN("claude", "mock-claude") "," EN(
                           "text",
                           "small") "]},"
                                    "  {'name':'emb','role':'embedding','capability':'embeddings',"
                                    "   'entries':[" EN("vec", "e-large") "," EN("vec", "e-small") "," EN(
                                        "vec2",
                                        "e-large") "]},"
                                                   "  {'name':'emb2','capability':'embeddings',"
                                                   "   'entries':[" EN("off", "e-large") "," EN(
                                                       "vec", "e-small") "," EN("vec",
                                                                                "e-large") "]},"
                                                                                           "  "
                                                                                           "{'name'"
                                                                                           ":'"
                                                                                           "cheapes"
                                                                                           "t','"
                                                                                           "strateg"
                                                                                           "y':'"
                                                                                           "price',"
                                                                                           "'entrie"
                                                                                           "s':"
                                                                                           "[" EN("mock",
                                                                                                  "p-unknown") "," EN("mock", "p-dear") "," EN("alt", "p-cheap") "," EN("mock", "p-mid") "]},"
                                                                                                                                                                                         "  {'name':'fastest','strategy':'latency',"
                                                                                                                                                                                         "   'entries':[" EN("mock",
                                                                                                                                                                                                             "l1") "," EN("alt", "l2") "," EN("claude", "l3") "]},"
                                                                                                                                                                                                                                                              "  {'name':'mixed','strategy':'auto','entries':[{'provider':'mock','model':'a-x','tier':1},"
                                                                                                                                                                                                                                                              "   " EN(
                                                                                                                                                                                                                                                                  "mock",
                                                                                                                                                                                                                                                                  "a-dear") "," EN("alt", "a-cheap") "]},"
                                                                                                                                                                                                                                                                                                     "  {'name':'split','strategy':'weighted','entries':["
                                                                                                                                                                                                                                                                                                     "   {'provider':'mock','model':'w-a','weight':3},{'provider':'alt','model':'w-b','weight':1},"
                                                                                                                                                                                                                                                                                                     "   {'provider':'claude','model':'w-c','weight':0}]},"
                                                                                                                                                                                                                                                                                                     "  {'name':'ring','entries':[" EN("mock", "r1") "," EN("alt",
                                                                                                                                                                                                                                                                                                                                                            "r2") "," EN("claude",
                                                                                                                                                                                                                                                                                                                                                                         "r3") "," EN("vec",
                                                                                                                                                                                                                                                                                                                                                                                      "r4") "]},"
                                                                                                                                                                                                                                                                                                                                                                                            "  {'name':'sticky','entries':[" EN(
                                                                                                                                                                                                                                                                                                                                                                                                "mock",
                                                                                                                                                                                                                                                                                                                                                                                                "s1") "," EN("alt",
                                                                                                                                                                                                                                                                                                                                                                                                             "s2") "," EN("claude", "s3") "]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                          "  {'name':'hc','entries':[{'provider':'claude','model':'big','high_cost':true},"
                                                                                                                                                                                                                                                                                                                                                                                                                                          "   " EN("mock", "small") ",{'provider':'alt','model':'big2','high_cost':true}]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                    "  {'name':'hc2','entries':[" EN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                        "mock", "small") ","
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         "   {'provider':'claude','model':'big','high_cost':true}]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         "  {'name':'ctx','entries':[" EN("mock", "tiny") "," EN("alt", "roomy") "]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                 "  {'name':'cat','entries':[" EN("mock", "no-tools") "," EN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     "alt", "gpt-x") "]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                     "  {'name':'broken','entries':[" EN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                         "off", "m") "," EN("nocred", "m") "]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'name':'incap','entries':[" EN("claude", "mock-claude") "," EN(
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                               "text",
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                               "small") "]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                        "  {'name':'slashy','entries':[" EN("alt",
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                            "org/model-z") "]}],"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           " 'catalog':["
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'p-dear','input_price':10,'output_price':10},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'p-cheap','input_price':1,'output_price':1},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'p-mid','input_price':5,'output_price':5},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'provider':'mock','model':'p-unknown','input_price':1},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'a-dear','input_price':100,'output_price':100},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'a-cheap','input_price':1,'output_price':1},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'a-x','input_price':0,'output_price':0},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'provider':'mock','model':'tiny','context_window':10},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'model':'no-tools','capabilities':['chat']}],"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           " 'keys':["
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-routes','hash':'0000000000000000000000000000000000000000000000000000000000000065'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_routes':['smart']},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-routes-prov','hash':'0000000000000000000000000000000000000000000000000000000000000066'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_routes':['smart'],'allow_providers':['mock']},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-models','hash':'0000000000000000000000000000000000000000000000000000000000000067'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_models':['claude/mock-claude','gpt-x']},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-nothing','hash':'0000000000000000000000000000000000000000000000000000000000000068'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_providers':[]},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-alt','hash':'0000000000000000000000000000000000000000000000000000000000000069'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_providers':['alt']},"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           "  {'id':'k-claude','hash':'000000000000000000000000000000000000000000000000000000000000006a'"
                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                                           ",'allow_providers':['claude']}]}";

static struct dp_snapshot *snap;

static struct dp_snapshot *build(const char *text)
{
    char *t = strdup(text);
    for (char *c = t; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_error_t je;
    json_t *j = json_loads(t, 0, &je);
    if (!j)
        fprintf(stderr, "\n  not JSON (%s): %s\n", je.text, t);
    free(t);
    if (!j)
        return NULL;
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build(j, err, sizeof(err));
    json_decref(j);
    if (!s)
        fprintf(stderr, "\n  snapshot refused: %s\n", err);
    return s;
}

static int suite_init(void)
{
    snap = build(DOC);
    return snap ? 0 : 1;
}

static int suite_clean(void)
{
    dp_snapshot_unref(snap);
    return 0;
}

static const struct dp_key *key_in(const struct dp_snapshot *s, const char *id)
{
    struct gw_pmap_iter it;
    const struct dp_key *k;
    for (dp_snapshot_iter(&s->keys, &it); (k = dp_snapshot_next(&it)) != NULL;)
        if (strcmp(k->id, id) == 0)
            return k;
    CU_FAIL_FATAL("no such key");
    return NULL;
}

static const struct dp_key *key(const char *id)
{
    return key_in(snap, id);
}

static const struct dp_provider *provider(const struct dp_snapshot *s, const char *name)
{
    const struct dp_provider *p = dp_snapshot_provider(s, name, strlen(name));
    if (!p)
        CU_FAIL_FATAL("no such provider");
    return p;
}

static const struct dp_route *route(const struct dp_snapshot *s, const char *name)
{
    const struct dp_route *r = dp_snapshot_route(s, name, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    return r;
}

static const struct dp_needs CHAT = {0, 0, 0, 0};

static void plan_in(const struct dp_snapshot *s, const char *sel, const struct dp_needs *n,
                    const struct dp_route_ctx *ctx, struct dp_plan *p)
{
    CU_ASSERT_EQUAL(dp_router_plan(s, sel, n, ctx, p), GW_OK);
}

static void plan(const char *sel, const struct dp_needs *n, const struct dp_route_ctx *ctx,
                 struct dp_plan *p)
{
    plan_in(snap, sel, n, ctx, p);
}

/* "mock/gpt-x,claude/mock-claude": the candidates in order. */
static const char *cands(const struct dp_plan *p)
{
    static char out[1024];
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->ncands; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s/%s", i ? "," : "",
                                p->cands[i].provider->name, p->cands[i].model);
    return out;
}

/* "off/m:disabled,nocred/m:no_credential": the skips in order. */
static const char *skips(const struct dp_plan *p)
{
    static char out[1024];
    size_t off = 0;
    out[0] = '\0';
    for (size_t i = 0; i < p->nskips; i++)
        off += (size_t)snprintf(out + off, sizeof(out) - off, "%s%s/%s:%s", i ? "," : "",
                                p->skips[i].provider->name, p->skips[i].model,
                                dp_skip_name(p->skips[i].reason));
    return out;
}

#define EXPECT_STR(got, want)                                                                      \
    do {                                                                                           \
        const char *g_ = (got);                                                                    \
        if (strcmp(g_, (want)) != 0) {                                                             \
            fprintf(stderr, "\n  line %d: got '%s', wanted '%s'\n", __LINE__, g_, (want));         \
            CU_FAIL("unexpected value");                                                           \
        }                                                                                          \
    } while (0)

#define EXPECT_HAS(hay, needle)                                                                    \
    do {                                                                                           \
        const char *h_ = (hay);                                                                    \
        if (!strstr(h_, (needle))) {                                                               \
            fprintf(stderr, "\n  line %d: '%s' lacks '%s'\n", __LINE__, h_, (needle));             \
            CU_FAIL("message lacks a part");                                                       \
        }                                                                                          \
    } while (0)

/* A refusal: its cause, status, code, and every skip named in the message. */
static void expect_refusal(const struct dp_plan *p, enum dp_no_route cause, int status,
                           const char *code)
{
    CU_ASSERT_EQUAL(p->ncands, 0);
    CU_ASSERT_EQUAL(p->cause, cause);
    CU_ASSERT_EQUAL(dp_no_route_status(p->cause), status);
    CU_ASSERT_STRING_EQUAL(dp_no_route_code(p->cause), code);
    CU_ASSERT(strlen(p->message) > 0 && strlen(p->message) < sizeof(p->message));
    for (size_t i = 0; i < p->nskips; i++) {
        char named[512];
        snprintf(named, sizeof(named), "%s/%s: %s (", p->skips[i].provider->name, p->skips[i].model,
                 dp_skip_name(p->skips[i].reason));
        EXPECT_HAS(p->message, named);
        EXPECT_HAS(p->message, p->skips[i].detail);
    }
}

/* ------------------------------------------------------------ selectors */

static void test_selectors(void)
{
    struct dp_plan p;
    plan("smart", &CHAT, NULL, &p);
    EXPECT_STR(p.via, "route");
    CU_ASSERT_PTR_EQUAL(p.route, route(snap, "smart"));
    EXPECT_STR(cands(&p), "mock/gpt-x,claude/mock-claude");
    CU_ASSERT_PTR_EQUAL(p.cands[0].entry, &route(snap, "smart")->entries[0]);
    CU_ASSERT_EQUAL(p.cause, DP_NOROUTE_NONE);
    CU_ASSERT_EQUAL(p.nskips, 0);

    plan("brainy", &CHAT, NULL, &p);
    EXPECT_STR(p.via, "alias");
    CU_ASSERT_PTR_EQUAL(p.route, route(snap, "smart"));

    plan("default", &CHAT, NULL, &p);
    EXPECT_STR(p.via, "role");
    CU_ASSERT_PTR_EQUAL(p.route, route(snap, "smart"));
    struct dp_needs vision = {0, DRV_CAP_VISION, 0, 0};
    plan("vision", &vision, NULL, &p);
    EXPECT_STR(p.via, "role");
    CU_ASSERT_PTR_EQUAL(p.route, route(snap, "vis"));

    /* Exact: split at the first '/', the model keeps the rest. */
    const char *sel = "mock/meta-llama/Llama-3.3#x=1";
    plan(sel, &CHAT, NULL, &p);
    EXPECT_STR(p.via, "exact");
    CU_ASSERT_PTR_NULL(p.route);
    EXPECT_STR(cands(&p), "mock/meta-llama/Llama-3.3#x=1");
    CU_ASSERT_PTR_EQUAL(p.cands[0].model, sel + 5);
    CU_ASSERT_PTR_NULL(p.cands[0].entry);

    /* Bare model: one target, even when two routes carry it. */
    plan("mock-claude", &CHAT, NULL, &p);
    EXPECT_STR(p.via, "model");
    CU_ASSERT_PTR_NULL(p.route);
    EXPECT_STR(cands(&p), "claude/mock-claude");
    CU_ASSERT_PTR_NULL(p.cands[0].entry);
    /* A bare model id with a '/' that is no provider. */
    plan("org/model-z", &CHAT, NULL, &p);
    EXPECT_STR(p.via, "model");
    EXPECT_STR(cands(&p), "alt/org/model-z");

    /* Several targets carry gpt-x: a question back, never a guess. */
    plan("gpt-x", &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_AMBIGUOUS, 400, "ambiguous_model");
    EXPECT_HAS(p.message, "mock/gpt-x");
    EXPECT_HAS(p.message, "alt/gpt-x");
    /* ... unless only one of them is eligible. */
    struct dp_route_ctx ctx = {.key = key("k-alt")};
    plan("gpt-x", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x");
    EXPECT_STR(skips(&p), "mock/gpt-x:not_allowed");
    /* ... and nothing eligible is a refusal naming them. */
    struct dp_needs json = {0, DRV_CAP_JSON_MODE, 0, 0};
    plan("mock-claude", &json, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_CAPABLE, 400, "no_capable_target");

    plan("nothing-here", &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_NOT_CONFIGURED, 404, "model_not_found");
    EXPECT_HAS(p.message, "'nothing-here'");
    plan("nope/m", &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_NOT_CONFIGURED, 404, "model_not_found");
}

static void test_invalid_selectors(void)
{
    struct dp_plan p;
    char long_model[300], long_sel[600];
    memset(long_model, 'm', sizeof(long_model) - 1);
    long_model[sizeof(long_model) - 1] = '\0';
    const char *bad[] = {"", "mock/", "/m", "a\x01z", "caf\xc3\xa9", "mock/has space", "x\x7f"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        plan(bad[i], &CHAT, NULL, &p);
        expect_refusal(&p, DP_NOROUTE_INVALID, 400, "invalid_model");
    }
    plan(NULL, &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(p.cause, DP_NOROUTE_INVALID);
    /* Bytes that are not printable ASCII are never quoted back. */
    plan("caf\xc3\xa9", &CHAT, NULL, &p);
    CU_ASSERT_PTR_NULL(strstr(p.message, "caf"));
    /* A model part longer than DP_MAX_MODEL_ID. */
    snprintf(long_sel, sizeof(long_sel), "mock/%s", long_model);
    plan(long_sel, &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_INVALID, 400, "invalid_model");
    long_sel[5 + DP_MAX_MODEL_ID] = '\0'; /* exactly the limit */
    plan(long_sel, &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(p.ncands, 1);
    /* Over 512 bytes; the message quotes at most 100 of them. */
    memset(long_sel, 'a', 513);
    long_sel[513] = '\0';
    plan(long_sel, &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_INVALID, 400, "invalid_model");
    long_sel[100] = '\0';
    EXPECT_HAS(p.message, long_sel);
    long_sel[100] = 'a';
    long_sel[101] = '\0';
    CU_ASSERT_PTR_NULL(strstr(p.message, long_sel));
    /* 512 is still a selector (just an unknown one), quoted in part. */
    memset(long_sel, 'a', 512);
    long_sel[512] = '\0';
    plan(long_sel, &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_NOT_CONFIGURED, 404, "model_not_found");
    CU_ASSERT_PTR_NULL(strstr(p.message, long_sel + 411));
}

/* ---------------------------------------------------------- skip reasons */

static void test_skip_reasons(void)
{
    struct dp_plan p;
    /* not_allowed, for every candidate: none allowed. */
    struct dp_route_ctx ctx = {.key = key("k-nothing")};
    plan("smart", &CHAT, &ctx, &p);
    EXPECT_STR(skips(&p), "mock/gpt-x:not_allowed,claude/mock-claude:not_allowed");
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.message, "no candidate for 'smart': ");
    EXPECT_HAS(p.skips[0].detail, "k-nothing");

    /* incapable (the driver, and provider options narrowing it). */
    struct dp_needs json = {0, DRV_CAP_JSON_MODE, 0, 0};
    plan("incap", &json, NULL, &p);
    EXPECT_STR(skips(&p), "claude/mock-claude:incapable,text/small:incapable");
    CU_ASSERT_EQUAL(p.skips[0].missing, DRV_CAP_JSON_MODE);
    CU_ASSERT_EQUAL(p.skips[1].missing, DRV_CAP_JSON_MODE);
    EXPECT_HAS(p.skips[0].detail, "lacks json_mode");
    expect_refusal(&p, DP_NOROUTE_NONE_CAPABLE, 400, "no_capable_target");
    struct dp_needs many = {0, DRV_CAP_VISION | DRV_CAP_TOOLS, 0, 0};
    plan("incap", &many, NULL, &p);
    EXPECT_STR(cands(&p), "claude/mock-claude");
    EXPECT_HAS(p.skips[0].detail, "lacks vision, tools");

    /* catalog: the model lacks what the driver has. */
    struct dp_needs tools = {0, DRV_CAP_TOOLS, 0, 0};
    plan("cat", &tools, NULL, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x");
    EXPECT_STR(skips(&p), "mock/no-tools:catalog");
    CU_ASSERT_EQUAL(p.skips[0].missing, DRV_CAP_TOOLS);
    EXPECT_HAS(p.skips[0].detail, "tools");
    plan("cat", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/no-tools,alt/gpt-x");

    /* context: above the catalog's window (10 tokens for mock/tiny). */
    struct dp_needs big = {0, 0, 11, 0};
    plan("ctx", &big, NULL, &p);
    EXPECT_STR(cands(&p), "alt/roomy");
    EXPECT_STR(skips(&p), "mock/tiny:context");
    EXPECT_HAS(p.skips[0].detail, "11");
    struct dp_needs fits = {0, 0, 10, 0};
    plan("ctx", &fits, NULL, &p);
    EXPECT_STR(cands(&p), "mock/tiny,alt/roomy");

    /* disabled and no_credential: none healthy. */
    plan("broken", &CHAT, NULL, &p);
    EXPECT_STR(skips(&p), "off/m:disabled,nocred/m:no_credential");
    expect_refusal(&p, DP_NOROUTE_NONE_HEALTHY, 503, "no_healthy_target");
    /* The credential's ref name stays out of what clients read. */
    CU_ASSERT_PTR_NULL(strstr(p.message, "ROUTER_TEST_NEVER_SET"));
    plan("off/x", &CHAT, NULL, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_HEALTHY, 503, "no_healthy_target");
    EXPECT_STR(skips(&p), "off/x:disabled");

    /* The skips as JSON. */
    plan("broken", &CHAT, NULL, &p);
    struct gw_buf b;
    gw_buf_init(&b, 1 << 16);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "x="), GW_OK);
    CU_ASSERT_EQUAL(dp_plan_skips_json(&p, &b), GW_OK);
    json_t *j = json_loads(b.data + 2, 0, NULL);
    CU_ASSERT_FATAL(json_is_array(j) && json_array_size(j) == 2);
    EXPECT_STR(json_string_value(json_object_get(json_array_get(j, 1), "provider")), "nocred");
    EXPECT_STR(json_string_value(json_object_get(json_array_get(j, 1), "model")), "m");
    EXPECT_STR(json_string_value(json_object_get(json_array_get(j, 1), "reason")), "no_credential");
    EXPECT_STR(json_string_value(json_object_get(json_array_get(j, 0), "detail")),
               p.skips[0].detail);
    json_decref(j);
    gw_buf_reset(&b);
    plan("smart", &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(dp_plan_skips_json(&p, &b), GW_OK);
    EXPECT_STR(b.data, "[]");
    gw_buf_free(&b);
}

/* The furthest stage any target reached decides the cause. */
static void test_causes(void)
{
    struct dp_plan p;
    /* One not allowed, one allowed but incapable: none capable. */
    struct dp_route_ctx ctx = {.key = key("k-models")};
    struct dp_needs json = {0, DRV_CAP_JSON_MODE, 0, 0};
    plan("vis", &json, &ctx, &p);
    EXPECT_STR(skips(&p), "claude/mock-claude:incapable,text/small:not_allowed");
    expect_refusal(&p, DP_NOROUTE_NONE_CAPABLE, 400, "no_capable_target");
    /* Nothing allowed: none allowed, whatever else is wrong. */
    struct dp_needs emb = {1, 0, 0, 0};
    plan("emb2", &emb, &(struct dp_route_ctx){.key = key("k-nothing")}, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    /* Capable but disabled, next to incapable: none healthy. */
    const char *doc = "{'version':1,'providers':["
                      "{'name':'off','driver':'openai','base_url':'http://o','enabled':false},"
                      "{'name':'claude','driver':'anthropic','base_url':'http://c'}],"
                      "'routes':[{'name':'r','capability':'embeddings','entries':[" EN(
                          "claude", "e") "," EN("off", "e") "]}]}";
    struct dp_snapshot *s = build(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    plan_in(s, "r", &emb, NULL, &p);
    EXPECT_STR(skips(&p), "claude/e:incapable,off/e:disabled");
    expect_refusal(&p, DP_NOROUTE_NONE_HEALTHY, 503, "no_healthy_target");
    dp_snapshot_unref(s);
}

/* A message naming many skipped targets stays within its buffer. */
static void test_message_bounded(void)
{
    char doc[8192], entries[6000];
    size_t off = 0;
    for (int i = 0; i < 32; i++)
        off += (size_t)snprintf(entries + off, sizeof(entries) - off,
                                "%s{'provider':'off','model':'a-rather-long-model-name-"
                                "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9-%02d'}",
                                i ? "," : "", i);
    snprintf(doc, sizeof(doc),
             "{'version':1,'providers':[{'name':'off','driver':'openai','base_url':'http://o',"
             "'enabled':false}],'routes':[{'name':'many','entries':[%s]}]}",
             entries);
    struct dp_snapshot *s = build(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct dp_plan p;
    plan_in(s, "many", &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(p.nskips, 32);
    CU_ASSERT_EQUAL(p.cause, DP_NOROUTE_NONE_HEALTHY);
    size_t len = strlen(p.message);
    CU_ASSERT(len < sizeof(p.message));
    CU_ASSERT(len > 400);
    CU_ASSERT_STRING_EQUAL(p.message + len - 3, "\xe2\x80\xa6");
    /* Still valid UTF-8: a JSON string holds it as is. */
    json_t *js = json_string(p.message);
    CU_ASSERT_PTR_NOT_NULL(js);
    json_decref(js);
    dp_snapshot_unref(s);
}

/* ------------------------------------------------------------ strategies */

static void test_strategies(void)
{
    struct dp_plan p;
    plan("smart", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x,claude/mock-claude");
    /* price: ascending input + output, unknown (no output price) last. */
    plan("cheapest", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "alt/p-cheap,mock/p-mid,mock/p-dear,mock/p-unknown");
    /* Embeddings price by input alone; p-unknown's input price is 1. */
    const char *doc =
        "{'version':1,'providers':["
        "{'name':'mock','driver':'openai','base_url':'http://m'}],"
        "'routes':[{'name':'e','capability':'embeddings','strategy':'price',"
        "'entries':[" EN("mock", "e-dear") "," EN(
            "mock", "e-cheap") "]}],"
                               "'catalog':[{'model':'e-dear','input_price':20},"
                               "{'model':'e-cheap','input_price':2,'output_price':0}]}";
    struct dp_snapshot *s = build(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct dp_needs emb = {1, 0, 0, 0};
    plan_in(s, "e", &emb, NULL, &p);
    EXPECT_STR(cands(&p), "mock/e-cheap");
    EXPECT_STR(skips(&p), "mock/e-dear:other_model");
    dp_snapshot_unref(s);
    /* latency: nothing observed (no breakers), the written order. */
    plan("fastest", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/l1,alt/l2,claude/l3");
    /* auto: tier first, then price rank x latency rank. */
    plan("mixed", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "alt/a-cheap,mock/a-dear,mock/a-x");
}

/* A fleet view scoring targets "provider/model" with (attempts, success,
 * ttfb samples, ttfb mean us), received at now_us. */
struct fscore {
    const char *provider, *model;
    uint64_t attempts;
    uint32_t permil;
    uint64_t ttfb_n, ttfb_us;
};

static void apply_scores(const struct fscore *f, size_t n, int64_t now_us)
{
    Llmgw__V1__FleetTarget t[4], *tp[4];
    Llmgw__V1__FleetScore sc[4];
    for (size_t i = 0; i < n; i++) {
        llmgw__v1__fleet_target__init(&t[i]);
        llmgw__v1__fleet_score__init(&sc[i]);
        t[i].provider = (char *)f[i].provider;
        t[i].model = (char *)f[i].model;
        t[i].state = LLMGW__V1__FLEET_STATE__FLEET_STATE_HEALTHY;
        sc[i].attempts = f[i].attempts;
        sc[i].success_permil = f[i].permil;
        sc[i].ttfb_samples = f[i].ttfb_n;
        sc[i].ttfb_mean_us = f[i].ttfb_us;
        t[i].score = &sc[i];
        tp[i] = &t[i];
    }
    Llmgw__V1__FleetView v = LLMGW__V1__FLEET_VIEW__INIT;
    v.version = 1;
    v.ttl_ms = 5000;
    v.targets = tp;
    v.n_targets = n;
    CU_ASSERT_EQUAL(dp_fleet_apply(&v, now_us), GW_OK);
}

/* price, latency and auto rank from the fleet's figures where they rest on
 * enough samples (20 attempts, 10 latencies), from this process's where
 * they do not, or when the view is stale; the plan says which. */
static void test_fleet_scores(void)
{
    struct dp_snapshot *s =
        build("{'version':1,'providers':["
              "{'name':'mock','driver':'openai','base_url':'http://m'},"
              "{'name':'alt','driver':'openai','base_url':'http://a'}],"
              "'routes':[{'name':'by-price','strategy':'price','entries':["
              "{'provider':'mock','model':'f-cheap'},{'provider':'alt','model':'f-dear'}]},"
              "{'name':'by-latency','strategy':'latency','entries':["
              "{'provider':'mock','model':'f-cheap'},{'provider':'alt','model':'f-dear'}]},"
              "{'name':'by-auto','strategy':'auto','entries':["
              "{'provider':'mock','model':'f-cheap'},{'provider':'alt','model':'f-dear'}]},"
              "{'name':'in-order','entries':["
              "{'provider':'mock','model':'f-cheap'},{'provider':'alt','model':'f-dear'}]}],"
              "'catalog':[{'model':'f-cheap','input_price':1,'output_price':1},"
              "{'model':'f-dear','input_price':3,'output_price':3}]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    const int64_t now = 5000000000;
    struct dp_route_ctx ctx = {.now_us = now};
    struct dp_plan p;
    /* No view: this process's figures (none: all succeed). */
    dp_fleet_apply(NULL, now);
    plan_in(s, "by-price", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "mock/f-cheap,alt/f-dear");
    EXPECT_STR(p.scored_by, "local");
    CU_ASSERT_EQUAL(p.norder, 2);
    CU_ASSERT_EQUAL(p.order[0], 0);
    plan_in(s, "in-order", &CHAT, &ctx, &p);
    CU_ASSERT_PTR_NULL(p.scored_by);
    /* The fleet says the cheap one fails 3 times in 4 over the hour: its
     * price counts 4 times (8 > 6), and it falls behind; the dear one's
     * figures are the fleet's too. Its latency is also the worse. */
    const struct fscore failing[] = {{"mock", "f-cheap", 400, 250, 100, 300000},
                                     {"alt", "f-dear", 400, 1000, 100, 100000}};
    apply_scores(failing, 2, now);
    plan_in(s, "by-price", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "alt/f-dear,mock/f-cheap");
    EXPECT_STR(p.scored_by, "fleet");
    CU_ASSERT_EQUAL(p.order[0], 1);
    CU_ASSERT_EQUAL(p.order[1], 0);
    plan_in(s, "by-latency", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "alt/f-dear,mock/f-cheap");
    plan_in(s, "by-auto", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "alt/f-dear,mock/f-cheap");
    /* Stale (past its 5 s ttl): this process's figures again. */
    struct dp_route_ctx later = {.now_us = now + 5000001};
    plan_in(s, "by-price", &CHAT, &later, &p);
    EXPECT_STR(cands(&p), "mock/f-cheap,alt/f-dear");
    EXPECT_STR(p.scored_by, "local");
    /* A mean under a millisecond (the fleet's resolution) is an observed
     * 0, the fastest, not "never observed". */
    const struct fscore submilli[] = {{"mock", "f-cheap", 400, 1000, 100, 0},
                                      {"alt", "f-dear", 400, 1000, 100, 40000}};
    apply_scores(submilli, 2, now);
    plan_in(s, "by-latency", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "mock/f-cheap,alt/f-dear");
    EXPECT_STR(p.scored_by, "fleet");
    /* Thin: 19 attempts and 9 latencies are not enough; the dear one's
     * figures are (mixed). */
    const struct fscore thin[] = {{"mock", "f-cheap", 19, 0, 9, 900000},
                                  {"alt", "f-dear", 20, 1000, 10, 100000}};
    apply_scores(thin, 2, now);
    plan_in(s, "by-price", &CHAT, &ctx, &p);
    EXPECT_STR(cands(&p), "mock/f-cheap,alt/f-dear");
    EXPECT_STR(p.scored_by, "mixed");
    dp_fleet_apply(NULL, now);
    dp_snapshot_unref(s);
}

static void test_weighted(void)
{
    struct dp_plan p, q;
    struct dp_route_ctx ctx = {.request_id = "req-fixed"};
    plan("split", &CHAT, &ctx, &p);
    plan("split", &CHAT, &ctx, &q);
    EXPECT_STR(cands(&p), cands(&q));
    /* The others follow in written order. */
    if (strcmp(p.cands[0].provider->name, "mock") == 0)
        EXPECT_STR(cands(&p), "mock/w-a,alt/w-b,claude/w-c");
    else
        EXPECT_STR(cands(&p), "alt/w-b,mock/w-a,claude/w-c");

    /* The split follows the weights 3:1:0. */
    int counts[3] = {0, 0, 0};
    char id[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(id, sizeof(id), "req-%d", i);
        ctx.request_id = id;
        plan("split", &CHAT, &ctx, &p);
        CU_ASSERT_EQUAL_FATAL(p.ncands, 3);
        counts[strcmp(p.cands[0].model, "w-a") == 0   ? 0
               : strcmp(p.cands[0].model, "w-b") == 0 ? 1
                                                      : 2]++;
    }
    if (counts[0] < 7200 || counts[0] > 7800 || counts[1] < 2200 || counts[1] > 2800 ||
        counts[2] != 0) {
        fprintf(stderr, "\n  split %d/%d/%d\n", counts[0], counts[1], counts[2]);
        CU_FAIL("the weighted split does not follow the weights");
    }

    /* An affinity key replaces the request id: one primary for all. */
    int first_mock = -1, same = 1;
    for (int i = 0; i < 50; i++) {
        snprintf(id, sizeof(id), "req-%d", i);
        struct dp_route_ctx a = {.request_id = id, .affinity = "user-7"};
        plan("split", &CHAT, &a, &p);
        int m = strcmp(p.cands[0].provider->name, "mock") == 0;
        if (first_mock < 0)
            first_mock = m;
        same &= m == first_mock;
        /* No rotation on weighted routes: the rest stay as written. */
        CU_ASSERT_STRING_EQUAL(p.cands[2].model, "w-c");
    }
    CU_ASSERT(same);
}

static void test_affinity(void)
{
    struct dp_plan p, q;
    static const char *const written[] = {"mock/r1", "alt/r2", "claude/r3", "vec/r4"};
    int starts[4] = {0, 0, 0, 0};
    char k[32];
    for (int i = 0; i < 40; i++) {
        snprintf(k, sizeof(k), "conversation-%d", i);
        struct dp_route_ctx ctx = {.affinity = k};
        plan("ring", &CHAT, &ctx, &p);
        plan("ring", &CHAT, &ctx, &q);
        EXPECT_STR(cands(&p), cands(&q));
        CU_ASSERT_EQUAL_FATAL(p.ncands, 4);
        /* A rotation of the written order. */
        size_t s = 0;
        char first[64];
        snprintf(first, sizeof(first), "%s/%s", p.cands[0].provider->name, p.cands[0].model);
        while (s < 4 && strcmp(written[s], first) != 0)
            s++;
        CU_ASSERT_FATAL(s < 4);
        for (size_t j = 0; j < 4; j++) {
            char at[64];
            snprintf(at, sizeof(at), "%s/%s", p.cands[j].provider->name, p.cands[j].model);
            EXPECT_STR(at, written[(s + j) % 4]);
        }
        starts[s]++;
    }
    /* Different keys start in different places. */
    for (int s = 0; s < 4; s++)
        CU_ASSERT(starts[s] > 0);
    plan("ring", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/r1,alt/r2,claude/r3,vec/r4");
}

/* The providers of the session tests: four, one of them disabled in a
 * second snapshot of the same routes. */
#define SESSION_PROVIDERS(alt_enabled)                                                             \
    "{'version':1,'providers':["                                                                   \
    "{'name':'mock','driver':'openai','base_url':'http://m'},"                                     \
    "{'name':'alt','driver':'openai','base_url':'http://a','enabled':" alt_enabled "},"            \
    "{'name':'claude','driver':'anthropic','base_url':'http://c'},"                                \
    "{'name':'vec','driver':'openai','base_url':'http://v'}],"
#define SESSION_ROUTES                                                                             \
    "'routes':["                                                                                   \
    "{'name':'spread','strategy':'weighted','entries':["                                           \
    "{'provider':'mock','model':'s1','weight':1},{'provider':'alt','model':'s2','weight':1},"      \
    "{'provider':'claude','model':'s3','weight':1}]},"                                             \
    "{'name':'split','strategy':'weighted','entries':["                                            \
    "{'provider':'mock','model':'w-a','weight':3},{'provider':'alt','model':'w-b','weight':1},"    \
    "{'provider':'claude','model':'w-c','weight':0}]},"                                            \
    "{'name':'cheapest','strategy':'price','entries':["                                            \
    "{'provider':'vec','model':'dear'},{'provider':'mock','model':'c1'},"                          \
    "{'provider':'alt','model':'c2'}]},"                                                           \
    "{'name':'in-order','entries':["                                                               \
    "{'provider':'mock','model':'o1'},{'provider':'alt','model':'o2'}]}],"                         \
    "'catalog':[{'model':'dear','input_price':9,'output_price':9},"                                \
    "{'model':'c1','input_price':1,'output_price':2},"                                             \
    "{'model':'c2','input_price':2,'output_price':1}]}"

/* The first candidate's model for a session. */
static const char *head_of(const struct dp_snapshot *s, const char *route, const char *session)
{
    static char out[64];
    struct dp_plan p;
    plan_in(s, route, &CHAT, &(struct dp_route_ctx){.session = session}, &p);
    CU_ASSERT_FATAL(p.ncands > 0);
    snprintf(out, sizeof(out), "%s", p.cands[0].model);
    return out;
}

/* A session's members come from a rendezvous hash: the same order on
 * every replica (a pure function of the snapshot and the session, checked
 * against a second, separately built snapshot of the same document), a
 * skipped member moves only its own sessions, spread over the rest, and
 * only the members the strategy would lead with take sessions. */
static void test_session(void)
{
    struct dp_snapshot *a = build(SESSION_PROVIDERS("true") SESSION_ROUTES);
    struct dp_snapshot *a2 = build(SESSION_PROVIDERS("true") SESSION_ROUTES);
    struct dp_snapshot *b = build(SESSION_PROVIDERS("false") SESSION_ROUTES);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(route(a, "spread")->fingerprint, route(b, "spread")->fingerprint);
    char sess[32], first[64];
    struct dp_plan p, q;
    int heads[3] = {0, 0, 0}, moved_to[3] = {0, 0, 0}, stayed = 0;
    for (int i = 0; i < 600; i++) {
        snprintf(sess, sizeof(sess), "session-%d", i);
        /* Deterministic, whatever the request id. */
        plan_in(a, "spread", &CHAT, &(struct dp_route_ctx){.session = sess, .request_id = "r1"},
                &p);
        plan_in(a2, "spread", &CHAT, &(struct dp_route_ctx){.session = sess, .request_id = "r2"},
                &q);
        char order[256];
        snprintf(order, sizeof(order), "%s", cands(&p));
        EXPECT_STR(cands(&q), order);
        CU_ASSERT_EQUAL_FATAL(p.ncands, 3);
        snprintf(first, sizeof(first), "%s", p.cands[0].model);
        int h = first[1] - '1';
        heads[h]++;
        /* alt disabled: its sessions go to their second member; the
         * others keep theirs. */
        const char *now = head_of(b, "spread", sess);
        if (h == 1) {
            CU_ASSERT_STRING_EQUAL(now, p.cands[1].model);
            moved_to[now[1] - '1']++;
        } else {
            CU_ASSERT_STRING_EQUAL(now, first);
            stayed++;
        }
    }
    /* Equal weights: about a third each (binomial, n 600: 200 +- 60 is
     * over 5 standard deviations). */
    for (int i = 0; i < 3; i++)
        CU_ASSERT(heads[i] > 140 && heads[i] < 260);
    CU_ASSERT_EQUAL(moved_to[1], 0);
    CU_ASSERT(moved_to[0] > 0 && moved_to[2] > 0);
    CU_ASSERT_EQUAL(stayed + moved_to[0] + moved_to[2], 600);

    /* Weights 3:1:0 over sessions; a weight of 0 never leads. */
    int wa = 0;
    for (int i = 0; i < 2000; i++) {
        snprintf(sess, sizeof(sess), "user-%d", i);
        plan_in(a, "split", &CHAT, &(struct dp_route_ctx){.session = sess}, &p);
        CU_ASSERT_STRING_EQUAL(p.cands[2].model, "w-c");
        wa += strcmp(p.cands[0].model, "w-a") == 0;
    }
    CU_ASSERT(wa > 1350 && wa < 1650);

    /* price: the two cheapest tie (3 per token pair) and share the
     * sessions; the dear one is never first. ordered: the head alone. */
    int c1 = 0;
    for (int i = 0; i < 200; i++) {
        snprintf(sess, sizeof(sess), "s-%d", i);
        const char *h = head_of(a, "cheapest", sess);
        CU_ASSERT_STRING_NOT_EQUAL(h, "dear");
        c1 += strcmp(h, "c1") == 0;
        CU_ASSERT_STRING_EQUAL(head_of(a, "in-order", sess), "o1");
    }
    CU_ASSERT(c1 > 50 && c1 < 150);
    plan_in(a, "cheapest", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/c1,alt/c2,vec/dear");

    /* An edited route draws anew: some sessions change member; the same
     * content keeps every one. */
    struct dp_snapshot *e = build(
        "{'version':2,'providers':["
        "{'name':'mock','driver':'openai','base_url':'http://m'},"
        "{'name':'alt','driver':'openai','base_url':'http://a'},"
        "{'name':'claude','driver':'anthropic','base_url':'http://c'}],"
        "'routes':[{'name':'spread','strategy':'weighted','entries':["
        "{'provider':'mock','model':'s1','weight':1},{'provider':'alt','model':'s2','weight':1},"
        "{'provider':'claude','model':'s3','weight':1,'tier':1}]}]}");
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_NOT_EQUAL(route(a, "spread")->fingerprint, route(e, "spread")->fingerprint);
    int changed = 0;
    for (int i = 0; i < 100; i++) {
        snprintf(sess, sizeof(sess), "session-%d", i);
        snprintf(first, sizeof(first), "%s", head_of(a, "spread", sess));
        changed += strcmp(head_of(e, "spread", sess), first) != 0;
    }
    CU_ASSERT(changed > 10);
    dp_snapshot_unref(a);
    dp_snapshot_unref(a2);
    dp_snapshot_unref(b);
    dp_snapshot_unref(e);
}

static void test_high_cost(void)
{
    struct dp_plan p;
    /* First: allowed. After the head: skipped. */
    plan("hc", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "claude/big,mock/small");
    EXPECT_STR(skips(&p), "alt/big2:high_cost_fallback");
    plan("hc2", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/small");
    EXPECT_STR(skips(&p), "claude/big:high_cost_fallback");
    /* A position counts every entry ahead, skipped or not: with the head
     * not allowed, the high-cost entry behind it is still a fallback. */
    plan("hc2", &CHAT, &(struct dp_route_ctx){.key = key("k-claude")}, &p);
    EXPECT_STR(skips(&p), "mock/small:not_allowed,claude/big:high_cost_fallback");
    expect_refusal(&p, DP_NOROUTE_NONE_HEALTHY, 503, "no_healthy_target");
    /* Named exactly, it serves: the client asked for it. */
    plan("claude/big", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "claude/big");
}

/* Whatever reorders the chain, a high-cost entry not written first never
 * becomes a candidate: one case per cause (strategy, affinity rotation,
 * stickiness, weighted draw). */
static void test_high_cost_reordered(void)
{
    const char *doc =
        "{'version':1,'providers':["
        "{'name':'mock','driver':'openai','base_url':'http://m'},"
        "{'name':'alt','driver':'openai','base_url':'http://a'},"
        "{'name':'claude','driver':'anthropic','base_url':'http://c'}],"
        "'routes':["
        "{'name':'by-price','strategy':'price','entries':[" EN(
            "mock",
            "dear") ","
                    "{'provider':'alt','model':'cheap-hc','high_cost':true}]},"
                    "{'name':'by-price2','strategy':'price','entries':["
                    "{'provider':'mock','model':'dear-hc','high_cost':true}," EN(
                        "alt",
                        "cheap") "]},"
                                 "{'name':'ring','entries':[" EN(
                                     "mock",
                                     "r1") ","
                                           "{'provider':'alt','model':'r2-hc','high_cost':true}"
                                           "," EN(
                                               "claude",
                                               "r3") "]},"
                                                     "{'name':'sticky','entries':[" EN(
                                                         "mock",
                                                         "s1") ","
                                                               "{'provider':'claude','model':'s2-"
                                                               "hc','high_cost':true}]},"
                                                               "{'name':'split','strategy':'"
                                                               "weighted','entries':["
                                                               "{'provider':'mock','model':'w1','"
                                                               "weight':1},"
                                                               "{'provider':'alt','model':'w2-hc','"
                                                               "weight':3,'high_cost':true}]},"
                                                               "{'name':'split-first','strategy':'"
                                                               "weighted','entries':["
                                                               "{'provider':'alt','model':'w0-hc','"
                                                               "weight':1,'high_cost':true},"
                                                               "{'provider':'mock','model':'w1','"
                                                               "weight':1}]}],"
                                                               "'catalog':[{'model':'dear','input_"
                                                               "price':10,'output_price':10},"
                                                               "{'model':'cheap-hc','input_price':"
                                                               "1,'output_price':1},"
                                                               "{'model':'dear-hc','input_price':"
                                                               "10,'output_price':10},"
                                                               "{'model':'cheap','input_price':1,'"
                                                               "output_price':1}]}";
    struct dp_snapshot *s = build(doc);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct dp_plan p;
    /* Strategy: price would put the cheap high-cost entry first. */
    plan_in(s, "by-price", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "mock/dear");
    EXPECT_STR(skips(&p), "alt/cheap-hc:high_cost_fallback");
    CU_ASSERT_PTR_NOT_NULL(strstr(p.skips[0].detail, "written at position 2"));
    /* ... and a high-cost entry written first that the price moves behind
     * is a fallback. */
    plan_in(s, "by-price2", &CHAT, NULL, &p);
    EXPECT_STR(cands(&p), "alt/cheap");
    EXPECT_STR(skips(&p), "mock/dear-hc:high_cost_fallback");
    /* Affinity: every rotation, the high-cost member stays out. */
    char k[32];
    int rotated = 0;
    for (int i = 0; i < 60; i++) {
        snprintf(k, sizeof(k), "conversation-%d", i);
        plan_in(s, "ring", &CHAT, &(struct dp_route_ctx){.affinity = k}, &p);
        CU_ASSERT_EQUAL(p.ncands, 2);
        for (size_t j = 0; j < p.ncands; j++)
            CU_ASSERT_STRING_NOT_EQUAL(p.cands[j].model, "r2-hc");
        rotated += strcmp(p.cands[0].model, "r1") != 0;
    }
    CU_ASSERT(rotated > 0); /* the rotation did happen */
    /* A session does not promote it: not on an ordered route (the head
     * alone leads), nor on a weighted one where it weighs 3 of 4. */
    for (int i = 0; i < 60; i++) {
        snprintf(k, sizeof(k), "hc-session-%d", i);
        plan_in(s, "sticky", &CHAT, &(struct dp_route_ctx){.session = k}, &p);
        EXPECT_STR(cands(&p), "mock/s1");
        EXPECT_STR(skips(&p), "claude/s2-hc:high_cost_fallback");
        plan_in(s, "split", &CHAT, &(struct dp_route_ctx){.session = k}, &p);
        EXPECT_STR(cands(&p), "mock/w1");
    }
    /* Weighted draw: the high-cost entry drawn as primary (weight 3 of 4)
     * is skipped; written first, it serves when drawn, never behind. */
    char id[32];
    int served_first = 0;
    for (int i = 0; i < 200; i++) {
        snprintf(id, sizeof(id), "req-%d", i);
        struct dp_route_ctx ctx = {.request_id = id};
        plan_in(s, "split", &CHAT, &ctx, &p);
        EXPECT_STR(cands(&p), "mock/w1");
        plan_in(s, "split-first", &CHAT, &ctx, &p);
        if (strcmp(p.cands[0].model, "w0-hc") == 0) {
            served_first++;
            EXPECT_STR(cands(&p), "alt/w0-hc,mock/w1");
        } else {
            EXPECT_STR(cands(&p), "mock/w1");
        }
    }
    CU_ASSERT(served_first > 0 && served_first < 200);
    dp_snapshot_unref(s);
}

static void test_embeddings(void)
{
    struct dp_plan p;
    struct dp_needs emb = {1, 0, 0, 0};
    plan("emb", &emb, NULL, &p);
    EXPECT_STR(cands(&p), "vec/e-large,vec2/e-large");
    EXPECT_STR(skips(&p), "vec/e-small:other_model");
    plan("embedding", &emb, NULL, &p);
    EXPECT_STR(p.via, "role");
    EXPECT_STR(cands(&p), "vec/e-large,vec2/e-large");
    /* The first eligible candidate decides the model. */
    plan("emb2", &emb, NULL, &p);
    EXPECT_STR(cands(&p), "vec/e-small");
    EXPECT_STR(skips(&p), "off/e-large:disabled,vec/e-large:other_model");
    /* A chat route does not serve embeddings, nor the other way round. */
    plan("smart", &emb, NULL, &p);
    EXPECT_STR(skips(&p), "mock/gpt-x:incapable,claude/mock-claude:incapable");
    CU_ASSERT_EQUAL(p.skips[0].missing, DRV_CAP_EMBEDDINGS);
    EXPECT_HAS(p.skips[0].detail, "serves chat, not embeddings");
    expect_refusal(&p, DP_NOROUTE_NONE_CAPABLE, 400, "no_capable_target");
    plan("emb", &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(p.cause, DP_NOROUTE_NONE_CAPABLE);
    CU_ASSERT_EQUAL(p.skips[0].missing, DRV_CAP_CHAT);
    /* Exact: the driver decides. */
    plan("vec/any-embedder", &emb, NULL, &p);
    EXPECT_STR(cands(&p), "vec/any-embedder");
    plan("claude/x", &emb, NULL, &p);
    EXPECT_STR(skips(&p), "claude/x:incapable");
    CU_ASSERT_EQUAL(p.skips[0].missing, DRV_CAP_EMBEDDINGS);
}

static void test_allowlists(void)
{
    struct dp_plan p;
    struct dp_route_ctx routes = {.key = key("k-routes")};
    plan("smart", &CHAT, &routes, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x,claude/mock-claude");
    plan("brainy", &CHAT, &routes, &p);
    CU_ASSERT_EQUAL(p.ncands, 2);
    plan("default", &CHAT, &routes, &p);
    CU_ASSERT_EQUAL(p.ncands, 2);
    plan("cat", &CHAT, &routes, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "route 'cat'");
    /* A routes-only key may not go around its routes. */
    plan("mock/gpt-x", &CHAT, &routes, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    plan("mock-claude", &CHAT, &routes, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");

    /* Routes and providers: both apply; exact targets by provider. */
    struct dp_route_ctx rp = {.key = key("k-routes-prov")};
    plan("smart", &CHAT, &rp, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x");
    EXPECT_STR(skips(&p), "claude/mock-claude:not_allowed");
    plan("mock/anything", &CHAT, &rp, &p);
    EXPECT_STR(cands(&p), "mock/anything");
    plan("alt/anything", &CHAT, &rp, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");

    /* Models: "provider/model" or a bare id. */
    struct dp_route_ctx m = {.key = key("k-models")};
    plan("smart", &CHAT, &m, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x,claude/mock-claude");
    plan("cat", &CHAT, &m, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x");
    EXPECT_STR(skips(&p), "mock/no-tools:not_allowed");
    plan("alt/gpt-x", &CHAT, &m, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x");
    plan("alt/mock-claude", &CHAT, &m, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");

    /* No key: everything. */
    plan("alt/mock-claude", &CHAT, NULL, &p);
    CU_ASSERT_EQUAL(p.ncands, 1);
}

/* A key's allowlists and its team's intersect: a target must pass both,
 * the skip names the principal that refused it, and when nothing
 * survives the plan fails closed. */
static const char TEAM_DOC[] =
    "{'version':1,"
    " 'providers':[{'name':'mock','driver':'openai','base_url':'http://m'},"
    "  {'name':'alt','driver':'openai','base_url':'http://a'}],"
    " 'routes':[{'name':'smart','entries':[{'provider':'mock','model':'gpt-x'},"
    "   {'provider':'alt','model':'gpt-x'}]},"
    "  {'name':'cheap','entries':[{'provider':'alt','model':'mini'}]}],"
    " 'teams':[{'name':'t-mock','allow_providers':['mock']},"
    "  {'name':'t-routes','allow_routes':['smart']},"
    "  {'name':'t-none','allow_models':[]},{'name':'t-any'}],"
    " 'keys':["
    "  "
    "{'id':'k-both','hash':'0000000000000000000000000000000000000000000000000000000000000001','"
    "team':'t-mock'},"
    "  "
    "{'id':'k-alt','hash':'0000000000000000000000000000000000000000000000000000000000000002','team'"
    ":'t-mock','allow_providers':['alt']},"
    "  "
    "{'id':'k-cheap','hash':'0000000000000000000000000000000000000000000000000000000000000003','"
    "team':'t-routes','allow_routes':['smart','cheap']},"
    "  "
    "{'id':'k-none','hash':'0000000000000000000000000000000000000000000000000000000000000004','"
    "team':'t-none'},"
    "  "
    "{'id':'k-any','hash':'0000000000000000000000000000000000000000000000000000000000000005','team'"
    ":'t-any','allow_models':['alt/mini']}]}";

static void test_team_allowlists(void)
{
    struct dp_snapshot *s = build(TEAM_DOC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct dp_plan p;
    /* The team narrows a key that allows anything. */
    struct dp_route_ctx c = {.key = key_in(s, "k-both")};
    plan_in(s, "smart", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x");
    EXPECT_STR(skips(&p), "alt/gpt-x:not_allowed");
    EXPECT_HAS(p.skips[0].detail, "team 't-mock' may not use provider 'alt'");
    CU_ASSERT(dp_router_allows(s, c.key, route(s, "smart"), provider(s, "mock"), "gpt-x"));
    CU_ASSERT(!dp_router_allows(s, c.key, route(s, "smart"), provider(s, "alt"), "gpt-x"));
    /* Key alt, team mock: the intersection is empty, so it fails closed. */
    c.key = key_in(s, "k-alt");
    plan_in(s, "smart", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "key 'k-alt' may not use provider 'mock'");
    EXPECT_HAS(p.skips[1].detail, "team 't-mock' may not use provider 'alt'");
    plan_in(s, "alt/gpt-x", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    /* Team routes: a key's wider list does not widen them; a routes-only
     * team keeps its keys off direct selectors. */
    c.key = key_in(s, "k-cheap");
    plan_in(s, "smart", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x,alt/gpt-x");
    plan_in(s, "cheap", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "team 't-routes' may not use route 'cheap'");
    plan_in(s, "mock/gpt-x", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    /* An empty team list allows nothing. */
    c.key = key_in(s, "k-none");
    plan_in(s, "smart", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    /* A team without lists leaves the key's. */
    c.key = key_in(s, "k-any");
    plan_in(s, "cheap", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "alt/mini");
    plan_in(s, "smart", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    dp_snapshot_unref(s);
}

/* A project's allowlists intersect with its keys' and its team's: each of
 * the three can be the one that refuses, and the skip names it. */
static const char PROJECT_DOC[] =
    "{'version':1,"
    " 'providers':[{'name':'mock','driver':'openai','base_url':'http://m'},"
    "  {'name':'alt','driver':'openai','base_url':'http://a'}],"
    " 'routes':[{'name':'smart','entries':[{'provider':'mock','model':'gpt-x'},"
    "   {'provider':'alt','model':'gpt-x'},{'provider':'alt','model':'mini'}]},"
    "  {'name':'cheap','entries':[{'provider':'alt','model':'mini'}]}],"
    " 'teams':[{'name':'t','allow_routes':['smart','cheap']},{'name':'u'}],"
    " 'projects':[{'name':'p-alt','team':'t','allow_providers':['alt']},"
    "  {'name':'p-smart','team':'u','allow_routes':['smart']},"
    "  {'name':'p-none','allow_models':[]},{'name':'p-any','team':'t'}],"
    " 'keys':["
    "  "
    "{'id':'k-1','hash':'0000000000000000000000000000000000000000000000000000000000000006','team':'"
    "t','project':'p-alt'},"
    "  "
    "{'id':'k-2','hash':'0000000000000000000000000000000000000000000000000000000000000007','team':'"
    "t','project':'p-alt','allow_models':['gpt-x']},"
    "  "
    "{'id':'k-3','hash':'0000000000000000000000000000000000000000000000000000000000000008','team':'"
    "u','project':'p-smart'},"
    "  "
    "{'id':'k-4','hash':'0000000000000000000000000000000000000000000000000000000000000009','"
    "project':'p-none'},"
    "  "
    "{'id':'k-5','hash':'000000000000000000000000000000000000000000000000000000000000000a','team':'"
    "t','project':'p-any','allow_providers':['mock']}]}";

static void test_project_allowlists(void)
{
    struct dp_snapshot *s = build(PROJECT_DOC);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct dp_plan p;
    /* The project narrows what the key and the team allow. */
    struct dp_route_ctx c = {.key = key_in(s, "k-1")};
    CU_ASSERT_PTR_EQUAL(dp_snapshot_project(s, c.key->project), dp_snapshot_project(s, "p-alt"));
    plan_in(s, "smart", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x,alt/mini");
    EXPECT_STR(skips(&p), "mock/gpt-x:not_allowed");
    EXPECT_HAS(p.skips[0].detail, "project 'p-alt' may not use provider 'mock'");
    CU_ASSERT(!dp_router_allows(s, c.key, route(s, "smart"), provider(s, "mock"), "gpt-x"));
    CU_ASSERT(dp_router_allows(s, c.key, route(s, "smart"), provider(s, "alt"), "gpt-x"));
    /* Key, team and project together: only alt/gpt-x passes all three. */
    c.key = key_in(s, "k-2");
    plan_in(s, "smart", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "alt/gpt-x");
    EXPECT_HAS(p.skips[0].detail, "project 'p-alt' may not use provider 'mock'");
    EXPECT_HAS(p.skips[1].detail, "key 'k-2' may not use model 'mini'");
    /* The team's routes still hold for a project that allows any route. */
    c.key = key_in(s, "k-1");
    plan_in(s, "alt/mini", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "team 't' is limited to its routes");
    /* A project's route list: its keys stay on its routes. */
    c.key = key_in(s, "k-3");
    plan_in(s, "cheap", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "project 'p-smart' may not use route 'cheap'");
    plan_in(s, "mock/gpt-x", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    EXPECT_HAS(p.skips[0].detail, "project 'p-smart' is limited to its routes");
    /* An empty project list allows nothing, whatever the key allows. */
    c.key = key_in(s, "k-4");
    plan_in(s, "smart", &CHAT, &c, &p);
    expect_refusal(&p, DP_NOROUTE_NONE_ALLOWED, 403, "model_not_allowed");
    /* A project without lists leaves the key's and the team's. */
    c.key = key_in(s, "k-5");
    plan_in(s, "smart", &CHAT, &c, &p);
    EXPECT_STR(cands(&p), "mock/gpt-x");
    dp_snapshot_unref(s);
}

/* ------------------------------------------------------- needs and names */

static void test_needs_of(void)
{
    struct canon_part text = {.type = CANON_PART_TEXT, .text = "hello there, general"};
    struct canon_part img = {.type = CANON_PART_IMAGE, .url = "https://x/y.png"};
    struct canon_part result = {.type = CANON_PART_TOOL_RESULT, .content = &img, .ncontent = 1};
    struct canon_message msg = {.role = CANON_ROLE_USER, .parts = &text, .nparts = 1};
    struct canon_req r = {.messages = &msg, .nmessages = 1};
    struct dp_needs n;
    dp_needs_of(&r, &n);
    CU_ASSERT_EQUAL(n.embeddings, 0);
    CU_ASSERT_EQUAL(n.caps, 0);
    CU_ASSERT_EQUAL(n.est_tokens, dp_tokens_request(&r));
    CU_ASSERT(n.est_tokens > 0);
    /* An image inside a tool result needs vision too. */
    msg.parts = &result;
    dp_needs_of(&r, &n);
    CU_ASSERT_EQUAL(n.caps, DRV_CAP_VISION);
    msg.parts = &img;
    struct canon_tool tool = {.name = "f"};
    r.tools = &tool;
    r.ntools = 1;
    r.format = CANON_FMT_JSON_SCHEMA;
    r.reasoning_budget = 1024;
    dp_needs_of(&r, &n);
    CU_ASSERT_EQUAL(n.caps, DRV_CAP_VISION | DRV_CAP_TOOLS | DRV_CAP_JSON_MODE | DRV_CAP_REASONING);
    r.ntools = 0;
    r.format = CANON_FMT_JSON_OBJECT;
    r.reasoning_budget = 0;
    r.reasoning_effort = "low";
    msg.parts = &text;
    dp_needs_of(&r, &n);
    CU_ASSERT_EQUAL(n.caps, DRV_CAP_JSON_MODE | DRV_CAP_REASONING);
    r.format = CANON_FMT_TEXT;
    r.reasoning_effort = NULL;
    dp_needs_of(&r, &n);
    CU_ASSERT_EQUAL(n.caps, 0);
}

static void test_names(void)
{
    static const char *const names[DP_SKIP_COUNT] = {
        "not_allowed", "incapable",     "catalog",      "context",    "other_model",
        "disabled",    "no_credential", "breaker_open", "fleet_down", "high_cost_fallback"};
    for (int i = 0; i < DP_SKIP_COUNT; i++)
        EXPECT_STR(dp_skip_name((enum dp_skip_reason)i), names[i]);
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_NONE), 200);
    CU_ASSERT_PTR_NULL(dp_no_route_code(DP_NOROUTE_NONE));
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_NOT_CONFIGURED), 404);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_NOT_CONFIGURED), "model_not_found");
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_INVALID), 400);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_INVALID), "invalid_model");
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_AMBIGUOUS), 400);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_AMBIGUOUS), "ambiguous_model");
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_NONE_ALLOWED), 403);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_NONE_ALLOWED), "model_not_allowed");
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_NONE_CAPABLE), 400);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_NONE_CAPABLE), "no_capable_target");
    CU_ASSERT_EQUAL(dp_no_route_status(DP_NOROUTE_NONE_HEALTHY), 503);
    EXPECT_STR(dp_no_route_code(DP_NOROUTE_NONE_HEALTHY), "no_healthy_target");
}

static CU_TestInfo tests[] = {
    {"selectors: route, alias, role, exact, bare model", test_selectors},
    {"invalid selectors", test_invalid_selectors},
    {"every skip reason, named in the message", test_skip_reasons},
    {"the furthest stage reached decides the cause", test_causes},
    {"the message is bounded and stays UTF-8", test_message_bounded},
    {"strategies: ordered, price, latency, auto", test_strategies},
    {"price, latency, auto: the fleet's figures, else this process's", test_fleet_scores},
    {"weighted: deterministic, split by weight", test_weighted},
    {"affinity rotates the start, stable per key", test_affinity},
    {"sessions: rendezvous over the lead class, the same on every replica", test_session},
    {"high-cost entries: first yes, fallback no", test_high_cost},
    {"high-cost entries: never promoted by reordering", test_high_cost_reordered},
    {"embeddings keep one model", test_embeddings},
    {"key allowlists", test_allowlists},
    {"team allowlists intersect with the key's", test_team_allowlists},
    {"project allowlists intersect with the key's and the team's", test_project_allowlists},
    {"needs of a chat request", test_needs_of},
    {"skip and cause names", test_names},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
