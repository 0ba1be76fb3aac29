/* Tests for common/gw_etcd.c: the JSON gateway's encoding (int64 as
 * strings, prefix ranges; base64 keys and values are gw_codec's, tested in
 * codec_test.c) and the reading of its answers, taken from etcd 3.4.23. The calls themselves run
 * against a real etcd in tests/integration/etcd_leader.test.mjs. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_etcd.h"

static void test_prefix_end(void)
{
    char *e;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(gw_etcd_prefix_end("/llmgw/cp/", &e, &n), GW_OK);
    CU_ASSERT_STRING_EQUAL(e, "/llmgw/cp0");
    CU_ASSERT_EQUAL(n, 10);
    free(e);
    CU_ASSERT_EQUAL_FATAL(gw_etcd_prefix_end("a\xff\xff", &e, &n), GW_OK);
    CU_ASSERT_STRING_EQUAL(e, "b");
    CU_ASSERT_EQUAL(n, 1);
    free(e);
    /* Nothing to increment: every key, which etcd spells "\0". */
    CU_ASSERT_EQUAL_FATAL(gw_etcd_prefix_end("\xff", &e, &n), GW_OK);
    CU_ASSERT_EQUAL(n, 1);
    CU_ASSERT_EQUAL(e[0], '\0');
    free(e);
    CU_ASSERT_EQUAL_FATAL(gw_etcd_prefix_end("", &e, &n), GW_OK);
    CU_ASSERT_EQUAL(n, 1);
    free(e);
}

static void test_int64_strings(void)
{
    json_t *o = json_pack("{s:s,s:I,s:s,s:s,s:s,s:n}", "s", "2324035709884631558", "n",
                          (json_int_t)42, "neg", "-7", "junk", "12x", "empty", "", "null");
    int64_t v;
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "s", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 2324035709884631558LL);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "n", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 42);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "neg", &v), GW_OK);
    CU_ASSERT_EQUAL(v, -7);
    /* proto3 leaves out defaults: absent is 0. */
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "absent", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 0);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "junk", &v), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "empty", &v), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(o, "null", &v), GW_EINVAL);
    json_decref(o);
}

/* A range answer as etcd 3.4.23 sent it. */
static const char RANGE[] =
    "{\"header\":{\"cluster_id\":\"324952591200643719\",\"member_id\":\"3319814642761637952\","
    "\"revision\":\"2\",\"raft_term\":\"2\"},\"kvs\":[{\"key\":\"L2xsbWd3L2xlYWRlcg==\","
    "\"create_revision\":\"2\",\"mod_revision\":\"2\",\"version\":\"1\",\"value\":\"Y3AtYQ==\","
    "\"lease\":\"2324035709884631558\"}],\"count\":\"1\"}";

static void test_kv_decode(void)
{
    json_t *root;
    CU_ASSERT_EQUAL_FATAL(gw_etcd_answer_parse(RANGE, strlen(RANGE), &root, NULL), GW_OK);
    struct gw_etcd_kv kv;
    CU_ASSERT_EQUAL_FATAL(gw_etcd_kv_decode(json_array_get(json_object_get(root, "kvs"), 0), &kv),
                          GW_OK);
    CU_ASSERT_STRING_EQUAL(kv.key, "/llmgw/leader");
    CU_ASSERT_STRING_EQUAL(kv.value, "cp-a");
    CU_ASSERT_EQUAL(kv.value_len, 4);
    CU_ASSERT_EQUAL(kv.create_revision, 2);
    CU_ASSERT_EQUAL(kv.mod_revision, 2);
    CU_ASSERT_EQUAL(kv.version, 1);
    CU_ASSERT_EQUAL(kv.lease, 2324035709884631558LL);
    gw_etcd_kv_free(&kv);
    json_decref(root);
    /* A key with an empty value and no lease: both members left out. */
    json_t *o = json_pack("{s:s}", "key", "YQ==");
    CU_ASSERT_EQUAL_FATAL(gw_etcd_kv_decode(o, &kv), GW_OK);
    CU_ASSERT_STRING_EQUAL(kv.key, "a");
    CU_ASSERT_EQUAL(kv.value_len, 0);
    CU_ASSERT_STRING_EQUAL(kv.value, "");
    CU_ASSERT_EQUAL(kv.lease, 0);
    gw_etcd_kv_free(&kv);
    json_decref(o);
    o = json_pack("{s:s,s:s}", "key", "YQ==", "value", "not base64!");
    CU_ASSERT_EQUAL(gw_etcd_kv_decode(o, &kv), GW_EINVAL);
    json_decref(o);
    o = json_pack("{s:i}", "key", 1);
    CU_ASSERT_EQUAL(gw_etcd_kv_decode(o, &kv), GW_EINVAL);
    json_decref(o);
}

static void test_answers(void)
{
    json_t *root;
    struct gw_etcd_err err;
    int64_t v;
    /* A unary error (HTTP 404). */
    const char *e1 =
        "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver: "
        "requested lease not found\",\"code\":5}";
    memset(&err, 0, sizeof(err));
    CU_ASSERT_EQUAL(gw_etcd_answer_parse(e1, strlen(e1), &root, &err), GW_EINVAL);
    CU_ASSERT_PTR_NULL(root);
    CU_ASSERT_EQUAL(err.kind, GW_ETCD_REFUSED);
    CU_ASSERT_EQUAL(err.code, 5);
    CU_ASSERT_STRING_EQUAL(err.message, "etcdserver: requested lease not found");
    /* A streamed one. */
    const char *e2 = "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"no leader\"}}\n";
    CU_ASSERT_EQUAL(gw_etcd_answer_parse(e2, strlen(e2), &root, &err), GW_EINVAL);
    CU_ASSERT_EQUAL(err.kind, GW_ETCD_REFUSED);
    CU_ASSERT_EQUAL(err.code, 14);
    CU_ASSERT_STRING_EQUAL(err.message, "no leader");
    /* A keepalive: one line in a "result" wrapper... */
    const char *k1 = "{\"result\":{\"header\":{\"revision\":\"1\"},\"ID\":\"2324035709884631558\","
                     "\"TTL\":\"5\"}}\n";
    CU_ASSERT_EQUAL_FATAL(gw_etcd_answer_parse(k1, strlen(k1), &root, &err), GW_OK);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(root, "TTL", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 5);
    json_decref(root);
    /* ...and for an expired lease, HTTP 200 with no TTL. */
    const char *k2 = "{\"result\":{\"header\":{\"revision\":\"2\"},\"ID\":\"12345\"}}\n";
    CU_ASSERT_EQUAL_FATAL(gw_etcd_answer_parse(k2, strlen(k2), &root, &err), GW_OK);
    CU_ASSERT_EQUAL(gw_etcd_json_int64(root, "TTL", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 0);
    json_decref(root);
    static const char *const junk[] = {"", "[]", "\"x\"", "<html>bad gateway</html>", "{"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
        CU_ASSERT_EQUAL(gw_etcd_answer_parse(junk[i], strlen(junk[i]), &root, &err), GW_EINVAL);
        CU_ASSERT_EQUAL(err.kind, GW_ETCD_BADREPLY);
    }
    char buf[300];
    err.kind = GW_ETCD_UNREACHABLE;
    snprintf(err.message, sizeof(err.message), "http://127.0.0.1:1: Connection refused");
    CU_ASSERT_STRING_EQUAL(gw_etcd_strerror(&err, buf, sizeof(buf)),
                           "etcd unreachable: http://127.0.0.1:1: Connection refused");
}

static void test_endpoints(void)
{
    char msg[200];
    struct gw_etcd *c =
        gw_etcd_new(" 127.0.0.1:2379, https://e2:2379/ ,,http://e3", 500, msg, sizeof(msg));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(gw_etcd_endpoint_count(c), 3);
    CU_ASSERT_STRING_EQUAL(gw_etcd_endpoint(c, 0), "http://127.0.0.1:2379");
    CU_ASSERT_STRING_EQUAL(gw_etcd_endpoint(c, 1), "https://e2:2379");
    CU_ASSERT_STRING_EQUAL(gw_etcd_endpoint(c, 2), "http://e3");
    CU_ASSERT_PTR_NULL(gw_etcd_endpoint(c, 3));
    gw_etcd_free(c);
    CU_ASSERT_PTR_NULL(gw_etcd_new("", 500, msg, sizeof(msg)));
    CU_ASSERT_PTR_NULL(gw_etcd_new(" , ", 500, msg, sizeof(msg)));
    CU_ASSERT_PTR_NULL(gw_etcd_new("unix:///x", 500, msg, sizeof(msg)));
    CU_ASSERT_PTR_NULL(gw_etcd_new("a,b,c,d,e,f,g,h,i", 500, msg, sizeof(msg)));
}

/* Nothing listens on port 1: every verb says unreachable, quickly. */
static void test_unreachable(void)
{
    char msg[200];
    struct gw_etcd *c = gw_etcd_new("127.0.0.1:1,127.0.0.1:1", 500, msg, sizeof(msg));
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    struct gw_etcd_err err;
    int64_t id = 0;
    CU_ASSERT_EQUAL(gw_etcd_lease_grant(c, 5, &id, &err), GW_EIO);
    CU_ASSERT_EQUAL(err.kind, GW_ETCD_UNREACHABLE);
    CU_ASSERT_STRING_EQUAL(err.endpoint, "all 2 endpoints");
    struct gw_etcd_txn t;
    CU_ASSERT_EQUAL(gw_etcd_create_or_get(c, "/k", "v", 1, 0, &t, &err), GW_EIO);
    struct gw_etcd_range r;
    CU_ASSERT_EQUAL(gw_etcd_get(c, "/k/", 1, &r, &err), GW_EIO);
    CU_ASSERT_EQUAL(r.n, 0);
    gw_etcd_free(c);
}

static CU_TestInfo tests[] = {
    {"prefix range_end", test_prefix_end},
    {"int64 as strings, defaults left out", test_int64_strings},
    {"kv decoding", test_kv_decode},
    {"answers: errors, keepalive wrapper, junk", test_answers},
    {"endpoint list", test_endpoints},
    {"no endpoint reachable", test_unreachable},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
