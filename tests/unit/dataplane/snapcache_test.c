/* Tests for the pushed-versus-file credential rule (contract/snapshot/dp_snapshot.c)
 * and the snapshot cache (dataplane/sync/dp_snapcache.c): a file may not hold an
 * inline credential, a pushed document may; the cache holds credentials
 * sealed under the cache key (bound to the provider's name) or not at all,
 * never in plaintext, and is written atomically with mode 0600. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp_snapcache.h"
#include "dp_snapshot.h"
#include "gw_error.h"

#define SECRET "sk-unit-secret-0123456789"

static const char DOC[] =
    "{\"version\":7,\"providers\":["
    " {\"name\":\"a\",\"driver\":\"openai\",\"base_url\":\"http://127.0.0.1:9/v1\","
    "  \"credential_ref\":\"secret/a\",\"credential\":\"" SECRET "\"},"
    " {\"name\":\"b\",\"driver\":\"openai\",\"base_url\":\"http://127.0.0.1:9/v1\","
    "  \"credential\":\"other\"},"
    " {\"name\":\"c\",\"driver\":\"ollama\",\"base_url\":\"http://127.0.0.1:9\"}],"
    " \"routes\":[{\"name\":\"r\",\"entries\":[{\"provider\":\"a\",\"model\":\"m\"}]}]}";

static const unsigned char KEY[DP_CACHE_KEY_LEN] = "0123456789abcdef0123456789abcdef";

static json_t *doc(void)
{
    json_t *j = json_loads(DOC, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    return j;
}

static const struct dp_provider *prov(const struct dp_snapshot *s, const char *name)
{
    return dp_snapshot_provider(s, name, strlen(name));
}

static void test_file_refuses_inline_credential(void)
{
    json_t *j = doc();
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build(j, err, sizeof(err));
    CU_ASSERT_PTR_NULL(s);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "providers[0].credential"));
    CU_ASSERT_PTR_NULL(strstr(err, SECRET));
    json_decref(j);
}

static void test_pushed_accepts_inline_credential(void)
{
    json_t *j = doc();
    char err[256] = "";
    struct dp_snapshot *s = dp_snapshot_build_ex(j, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(s->source, "control_plane");
    CU_ASSERT_STRING_EQUAL(prov(s, "a")->credential, SECRET);
    CU_ASSERT_STRING_EQUAL(prov(s, "b")->credential, "other");
    CU_ASSERT_PTR_NULL(prov(s, "c")->credential);
    dp_snapshot_unref(s);
    json_decref(j);
}

static void test_pushed_ignores_environment_refs(void)
{
    /* A pushed ref is a name: never read from this process's environment. */
    setenv("SNAPCACHE_TEST_KEY", "from-env", 1);
    json_t *j =
        json_loads("{\"version\":1,\"providers\":[{\"name\":\"a\",\"driver\":\"openai\","
                   "\"base_url\":\"http://x/v1\",\"credential_ref\":\"env:SNAPCACHE_TEST_KEY\""
                   "}],\"routes\":[]}",
                   0, NULL);
    char err[256];
    struct dp_snapshot *s = dp_snapshot_build_ex(j, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NULL(prov(s, "a")->credential);
    dp_snapshot_unref(s);
    s = dp_snapshot_build(j, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(prov(s, "a")->credential, "from-env");
    dp_snapshot_unref(s);
    json_decref(j);
}

static void test_pushed_credential_must_be_string(void)
{
    json_t *j = doc();
    json_object_set_new(json_array_get(json_object_get(j, "providers"), 1), "credential",
                        json_integer(5));
    char err[256] = "";
    CU_ASSERT_PTR_NULL(dp_snapshot_build_ex(j, DP_SNAPSHOT_PUSHED, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "providers[1].credential"));
    json_decref(j);
}

static void test_sealed_round_trip(void)
{
    json_t *j = doc();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char *text = json_dumps(c, 0);
    CU_ASSERT_PTR_NULL(strstr(text, SECRET));
    CU_ASSERT_PTR_NULL(strstr(text, "\"credential\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "credential_sealed"));
    free(text);
    json_t *back = dp_snapcache_decode(c, KEY, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    json_t *p0 = json_array_get(json_object_get(back, "providers"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(p0, "credential")), SECRET);
    CU_ASSERT_PTR_NULL(json_object_get(back, "llmgw_cache"));
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

static void test_sealed_bound_to_provider_and_key(void)
{
    json_t *j = doc();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    json_t *ps = json_object_get(c, "providers");
    /* Move a's sealed credential onto b: the AAD (provider name) refuses it. */
    json_object_set(json_array_get(ps, 1), "credential_sealed",
                    json_object_get(json_array_get(ps, 0), "credential_sealed"));
    json_t *back = dp_snapcache_decode(c, KEY, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    json_t *pb = json_array_get(json_object_get(back, "providers"), 1);
    CU_ASSERT_PTR_NULL(json_object_get(pb, "credential"));
    CU_ASSERT_PTR_NOT_NULL(json_object_get(pb, "credential_ref")); /* skipped, not keyless */
    json_decref(back);
    /* Another key opens nothing. */
    unsigned char other[DP_CACHE_KEY_LEN];
    memcpy(other, KEY, sizeof(other));
    other[0] ^= 1;
    back = dp_snapcache_decode(c, other, err, sizeof(err));
    CU_ASSERT_PTR_NULL(
        json_object_get(json_array_get(json_object_get(back, "providers"), 0), "credential"));
    json_decref(back);
    /* No key at all: the same. */
    back = dp_snapcache_decode(c, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NULL(
        json_object_get(json_array_get(json_object_get(back, "providers"), 0), "credential"));
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

/* With a key the whole document is authenticated: whoever can write the
 * file cannot point a provider at another host (its credential would
 * follow), add a route, or pass a cache written without the key or under
 * another one. */
static void test_whole_document_authenticated(void)
{
    json_t *j = doc();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(dp_snapcache_verify(c, KEY, err, sizeof(err)), GW_OK);
    /* Key order in the file does not matter: the MAC is over sorted keys. */
    char *text = json_dumps(c, JSON_COMPACT | JSON_SORT_KEYS);
    json_t *reordered = json_loads(text, 0, NULL);
    free(text);
    CU_ASSERT_EQUAL(dp_snapcache_verify(reordered, KEY, err, sizeof(err)), GW_OK);
    json_decref(reordered);
    /* A changed base_url. */
    json_t *bad = json_deep_copy(c);
    json_object_set_new(json_array_get(json_object_get(bad, "providers"), 0), "base_url",
                        json_string("http://attacker.invalid/v1"));
    CU_ASSERT_EQUAL(dp_snapcache_verify(bad, KEY, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "integrity"));
    json_decref(bad);
    /* The MAC removed, or the document checked under another key. */
    bad = json_deep_copy(c);
    json_object_del(json_object_get(bad, "llmgw_cache"), "mac");
    CU_ASSERT_EQUAL(dp_snapcache_verify(bad, KEY, err, sizeof(err)), GW_EINVAL);
    json_decref(bad);
    unsigned char other[DP_CACHE_KEY_LEN];
    memcpy(other, KEY, sizeof(other));
    other[31] ^= 0x80;
    CU_ASSERT_EQUAL(dp_snapcache_verify(c, other, err, sizeof(err)), GW_EINVAL);
    /* Written without a key: a data plane with one does not take it. */
    json_t *plain = dp_snapcache_encode(j, NULL, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(plain);
    CU_ASSERT_EQUAL(dp_snapcache_verify(plain, KEY, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_EQUAL(dp_snapcache_verify(plain, NULL, err, sizeof(err)), GW_OK);
    json_decref(plain);
    json_decref(c);
    json_decref(j);
}

static void test_omitted_without_key(void)
{
    json_t *j = doc();
    char err[256] = "";
    int omitted = -1;
    json_t *c = dp_snapcache_encode(j, NULL, &omitted, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(omitted, 2);
    char *text = json_dumps(c, 0);
    CU_ASSERT_PTR_NULL(strstr(text, SECRET));
    CU_ASSERT_PTR_NULL(strstr(text, "\"other\""));
    free(text);
    json_t *back = dp_snapcache_decode(c, NULL, err, sizeof(err));
    struct dp_snapshot *s = dp_snapshot_build_ex(back, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    /* Each provider whose credential was left out has a ref and no value:
     * the router reports it as no_credential instead of calling it bare. */
    CU_ASSERT_PTR_NULL(prov(s, "a")->credential);
    CU_ASSERT_PTR_NOT_NULL(prov(s, "b")->credential_ref);
    CU_ASSERT_PTR_NULL(prov(s, "b")->credential);
    CU_ASSERT_PTR_NULL(prov(s, "c")->credential_ref); /* keyless: untouched */
    dp_snapshot_unref(s);
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

static void test_save_and_load(void)
{
    char dir[] = "/tmp/snapcache-test-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/cache.json", dir);
    json_t *j = doc();
    char err[256] = "";
    int missing = 0;
    CU_ASSERT_PTR_NULL(dp_snapcache_load(path, KEY, 0, &missing, NULL, err, sizeof(err)));
    CU_ASSERT_EQUAL(missing, 1);
    CU_ASSERT_EQUAL(dp_snapcache_save(path, j, KEY, err, sizeof(err)), GW_OK);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0600);
    FILE *f = fopen(path, "rb");
    char buf[8192] = "";
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    CU_ASSERT_PTR_NULL(strstr(buf, SECRET));
    struct dp_snapshot *s = dp_snapcache_load(path, KEY, 0, &missing, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_STRING_EQUAL(s->source, "cache");
    CU_ASSERT_EQUAL(s->version, 7);
    CU_ASSERT_STRING_EQUAL(prov(s, "a")->credential, SECRET);
    dp_snapshot_unref(s);
    /* A second save replaces the file and leaves no temporary behind. */
    CU_ASSERT_EQUAL(dp_snapcache_save(path, j, NULL, err, sizeof(err)), GW_OK);
    unlink(path);
    CU_ASSERT_EQUAL(rmdir(dir), 0); /* empty: no temporary file left over */
    json_decref(j);
}

#define HDR_SECRET "hdr-secret-9876543210"

/* Provider a carries auth-bearing headers next to a harmless one. */
static json_t *doc_with_headers(void)
{
    json_t *j = doc();
    json_t *a = json_array_get(json_object_get(j, "providers"), 0);
    json_object_set_new(
        a, "headers",
        json_pack("{s:s,s:s,s:s,s:s,s:s,s:s}", "Authorization", "Bearer " HDR_SECRET, "x-api-key",
                  HDR_SECRET "-1", "x-goog-api-key", HDR_SECRET "-2", "X-Custom-Token",
                  HDR_SECRET "-3", "x-client-secret", HDR_SECRET "-4", "x-extra", "harmless"));
    /* c has no credential, only a header: it is cached the same way. */
    json_object_set_new(json_array_get(json_object_get(j, "providers"), 2), "headers",
                        json_pack("{s:s}", "api-key", HDR_SECRET "-5"));
    return j;
}

static void test_auth_header_names(void)
{
    const char *yes[] = {"authorization",  "Proxy-Authorization", "x-api-key",       "api-key",
                         "X-Goog-Api-Key", "x-auth-token",        "x-client-secret", "apikey"};
    const char *no[] = {"x-extra", "anthropic-version", "openai-organization", "user-agent"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        CU_ASSERT_EQUAL(dp_snapcache_auth_header(yes[i]), 1);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        CU_ASSERT_EQUAL(dp_snapcache_auth_header(no[i]), 0);
}

static void test_headers_sealed_with_key(void)
{
    json_t *j = doc_with_headers();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char *text = json_dumps(c, 0);
    CU_ASSERT_PTR_NULL(strstr(text, HDR_SECRET));
    CU_ASSERT_PTR_NULL(strstr(text, "harmless")); /* the whole object is sealed */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "headers_sealed"));
    free(text);
    CU_ASSERT_PTR_NULL(
        json_object_get(json_array_get(json_object_get(c, "providers"), 0), "headers"));
    json_t *back = dp_snapcache_decode(c, KEY, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    json_t *ps = json_object_get(back, "providers");
    CU_ASSERT_TRUE(
        json_equal(json_object_get(json_array_get(ps, 0), "headers"),
                   json_object_get(json_array_get(json_object_get(j, "providers"), 0), "headers")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               json_object_get(json_array_get(ps, 2), "headers"), "api-key")),
                           HDR_SECRET "-5");
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(ps, 0), "headers_sealed"));
    struct dp_snapshot *s = dp_snapshot_build_ex(back, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(s);
    dp_snapshot_unref(s);
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

static void test_headers_sealed_bound_to_provider(void)
{
    json_t *j = doc_with_headers();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    json_t *ps = json_object_get(c, "providers");
    json_t *a = json_array_get(ps, 0), *b = json_array_get(ps, 1);
    /* a's sealed headers moved onto b do not open (AAD "<name>\0headers"). */
    json_object_set(b, "headers_sealed", json_object_get(a, "headers_sealed"));
    /* Nor does a's sealed credential opened as a's headers, or the reverse. */
    json_t *swap_h = json_incref(json_object_get(a, "headers_sealed"));
    json_object_set(a, "headers_sealed", json_object_get(a, "credential_sealed"));
    json_t *back = dp_snapcache_decode(c, KEY, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    json_t *bps = json_object_get(back, "providers");
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(bps, 1), "headers"));
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(bps, 1), "headers_sealed"));
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(bps, 0), "headers"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(bps, 0), "credential")),
                           SECRET);
    json_decref(back);
    json_object_set(a, "credential_sealed", swap_h);
    json_object_del(a, "headers_sealed");
    back = dp_snapcache_decode(c, KEY, err, sizeof(err));
    CU_ASSERT_PTR_NULL(
        json_object_get(json_array_get(json_object_get(back, "providers"), 0), "credential"));
    json_decref(back);
    json_decref(swap_h);
    /* Without the key the headers are left out, not kept sealed. */
    back = dp_snapcache_decode(c, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NULL(
        json_object_get(json_array_get(json_object_get(back, "providers"), 2), "headers"));
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

static void test_auth_headers_omitted_without_key(void)
{
    json_t *j = doc_with_headers();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, NULL, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    char *text = json_dumps(c, 0);
    CU_ASSERT_PTR_NULL(strstr(text, HDR_SECRET));
    CU_ASSERT_PTR_NULL(strstr(text, "headers_sealed"));
    free(text);
    json_t *ps = json_object_get(c, "providers");
    json_t *h = json_object_get(json_array_get(ps, 0), "headers");
    CU_ASSERT_EQUAL(json_object_size(h), 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(h, "x-extra")), "harmless");
    CU_ASSERT_EQUAL(json_object_size(json_object_get(json_array_get(ps, 2), "headers")), 0);
    /* The document passed in is untouched. */
    CU_ASSERT_EQUAL(json_object_size(json_object_get(
                        json_array_get(json_object_get(j, "providers"), 0), "headers")),
                    6);
    json_t *back = dp_snapcache_decode(c, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    struct dp_snapshot *s = dp_snapshot_build_ex(back, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(s);
    dp_snapshot_unref(s);
    json_decref(back);
    json_decref(c);
    json_decref(j);
}

static void test_save_seals_headers(void)
{
    char dir[] = "/tmp/snapcache-test-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/cache.json", dir);
    json_t *j = doc_with_headers();
    char err[256] = "";
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL(dp_snapcache_save(path, j, k ? KEY : NULL, err, sizeof(err)), GW_OK);
        FILE *f = fopen(path, "rb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        char buf[16384] = "";
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        CU_ASSERT_PTR_NULL(strstr(buf, HDR_SECRET));
    }
    int missing = 0;
    struct dp_snapshot *s = dp_snapcache_load(path, KEY, 0, &missing, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(s);
    dp_snapshot_unref(s);
    unlink(path);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
    json_decref(j);
}

static void test_cache_age(void)
{
    json_t *j = doc();
    char err[256] = "";
    json_t *c = dp_snapcache_encode(j, KEY, NULL, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    json_t *t = json_object_get(json_object_get(c, "llmgw_cache"), "received_ms");
    CU_ASSERT_FATAL(json_is_integer(t));
    int64_t at = (int64_t)json_integer_value(t);
    CU_ASSERT(at > 0);
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at, 1000, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at + 1000, 1000, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at + 1001, 1000, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "too old"));
    /* No limit. */
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at + 1000000000, 0, err, sizeof(err)), GW_OK);
    /* A clock moved back a little is fine; far into the future is not. */
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at - 500, 1000, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at - 5000, 1000, err, sizeof(err)), GW_EINVAL);
    /* Without the timestamp (an older cache file) it is not trusted. */
    json_object_del(json_object_get(c, "llmgw_cache"), "received_ms");
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at, 1000, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "received_ms"));
    CU_ASSERT_EQUAL(dp_snapcache_check_age(c, at, 0, err, sizeof(err)), GW_OK);
    json_decref(c);
    json_decref(j);
}

static void test_load_refuses_stale(void)
{
    char dir[] = "/tmp/snapcache-test-XXXXXX";
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof(path), "%s/cache.json", dir);
    json_t *j = doc();
    char err[256] = "";
    /* Written without a key (nothing to sign with), then made a minute
     * older by hand. */
    CU_ASSERT_EQUAL(dp_snapcache_save(path, j, NULL, err, sizeof(err)), GW_OK);
    json_t *c = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    json_t *t = json_object_get(json_object_get(c, "llmgw_cache"), "received_ms");
    json_integer_set(t, json_integer_value(t) - 60000);
    CU_ASSERT_EQUAL(json_dump_file(c, path, JSON_COMPACT), 0);
    json_decref(c);
    int missing = 0, stale = 0;
    CU_ASSERT_PTR_NULL(dp_snapcache_load(path, NULL, 30000, &missing, &stale, err, sizeof(err)));
    CU_ASSERT_EQUAL(stale, 1);
    CU_ASSERT_EQUAL(missing, 0);
    struct dp_snapshot *s =
        dp_snapcache_load(path, NULL, 120000, &missing, &stale, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL(s);
    CU_ASSERT_EQUAL(stale, 0);
    dp_snapshot_unref(s);
    /* With a key the same hand edit is a change the MAC refuses. */
    CU_ASSERT_EQUAL(dp_snapcache_save(path, j, KEY, err, sizeof(err)), GW_OK);
    c = json_load_file(path, 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    t = json_object_get(json_object_get(c, "llmgw_cache"), "received_ms");
    json_integer_set(t, json_integer_value(t) - 60000);
    CU_ASSERT_EQUAL(json_dump_file(c, path, JSON_COMPACT), 0);
    json_decref(c);
    CU_ASSERT_PTR_NULL(dp_snapcache_load(path, KEY, 120000, &missing, &stale, err, sizeof(err)));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "integrity"));
    unlink(path);
    CU_ASSERT_EQUAL(rmdir(dir), 0);
    json_decref(j);
}

static CU_TestInfo tests[] = {
    {"a file refuses an inline credential", test_file_refuses_inline_credential},
    {"with a key the whole cached document is authenticated", test_whole_document_authenticated},
    {"a pushed document accepts one", test_pushed_accepts_inline_credential},
    {"pushed refs never read the environment", test_pushed_ignores_environment_refs},
    {"a pushed credential is a non-empty string", test_pushed_credential_must_be_string},
    {"sealed credentials round-trip", test_sealed_round_trip},
    {"sealed credentials bound to provider and key", test_sealed_bound_to_provider_and_key},
    {"without a key credentials are omitted", test_omitted_without_key},
    {"save is atomic, 0600, and loads back", test_save_and_load},
    {"auth-bearing header names", test_auth_header_names},
    {"with a key provider headers are sealed", test_headers_sealed_with_key},
    {"sealed headers bound to provider, apart from the credential",
     test_headers_sealed_bound_to_provider},
    {"without a key auth-bearing headers are omitted", test_auth_headers_omitted_without_key},
    {"the saved file never holds a header credential", test_save_seals_headers},
    {"cache age: received_ms against the maximum", test_cache_age},
    {"load refuses a cache older than the maximum", test_load_refuses_stale},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
