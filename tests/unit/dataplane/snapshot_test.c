/* Tests for dataplane/dp_snapshot.c: validation names the field, selectors
 * resolve by route, alias and provider/model, keys match by hash. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
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
    CU_ASSERT_STRING_EQUAL(s->providers[0].base_url, "http://127.0.0.1:9/v1");
    CU_ASSERT_STRING_EQUAL(s->providers[0].credential, "secret-1");
    CU_ASSERT_STRING_EQUAL(s->providers[0].headers[0], "x-a: 1");
    CU_ASSERT_PTR_NULL(s->providers[1].credential);

    struct dp_target t;
    /* A route skips its disabled first entry in this cut. */
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "fast", &t), GW_OK);
    CU_ASSERT_STRING_EQUAL(t.provider->name, "mock");
    CU_ASSERT_STRING_EQUAL(t.model, "m1");
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "quick", &t), GW_OK);
    CU_ASSERT_STRING_EQUAL(t.route->name, "fast");
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "mock/anything#x=1", &t), GW_OK);
    CU_ASSERT_PTR_NULL(t.route);
    CU_ASSERT_STRING_EQUAL(t.model, "anything#x=1");
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "dead", &t), GW_EAGAIN);
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "off/m", &t), GW_EAGAIN);
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "nope", &t), GW_ENOTFOUND);
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "nope/m", &t), GW_ENOTFOUND);
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "mock/", &t), GW_ENOTFOUND);
    CU_ASSERT_EQUAL(dp_snapshot_resolve(s, "/m", &t), GW_ENOTFOUND);

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
    {"atomic swap keeps in-flight snapshots", test_current_swap},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
