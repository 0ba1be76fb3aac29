/* Tests for common/gw_json.c. */
#include <CUnit/CUnit.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

static void test_typed_getters(void)
{
    json_t *o = json_loads("{\"s\":\"x\",\"i\":42,\"f\":1.5,\"b\":true,\"n\":null}", 0, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(o);
    CU_ASSERT_STRING_EQUAL(gw_json_str(o, "s"), "x");
    CU_ASSERT_PTR_NULL(gw_json_str(o, "i"));
    CU_ASSERT_PTR_NULL(gw_json_str(o, "missing"));
    CU_ASSERT_PTR_NULL(gw_json_str(NULL, "s"));
    long long v = 0;
    CU_ASSERT_EQUAL(gw_json_int(o, "i", &v), GW_OK);
    CU_ASSERT_EQUAL(v, 42);
    CU_ASSERT_EQUAL(gw_json_int(o, "f", &v), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_json_int(o, "n", &v), GW_ENOTFOUND);
    int err;
    CU_ASSERT_EQUAL(gw_json_bool(o, "b", 0, &err), 1);
    CU_ASSERT_EQUAL(err, GW_OK);
    CU_ASSERT_EQUAL(gw_json_bool(o, "n", 1, &err), 1);
    CU_ASSERT_EQUAL(gw_json_bool(o, "s", 0, &err), 0);
    CU_ASSERT_EQUAL(err, GW_EINVAL);
    json_decref(o);
}

static void check_escape(const char *in, size_t n, const char *want)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_json_escape(&b, in, n), GW_OK);
    CU_ASSERT_STRING_EQUAL(b.data, want);
    /* Whatever the input, the output is a JSON string that parses. */
    json_t *j = json_loadb(b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    CU_ASSERT_TRUE(json_is_string(j));
    json_decref(j);
    gw_buf_free(&b);
}

static void test_escape(void)
{
    check_escape("plain", 5, "\"plain\"");
    check_escape("q\"b\\n\n\t\r", 8, "\"q\\\"b\\\\n\\n\\t\\r\"");
    check_escape("\x01\x1f", 2, "\"\\u0001\\u001f\"");
    check_escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14,
                 "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
    /* Invalid UTF-8: a lone continuation byte, an overlong '/', a surrogate,
     * a truncated sequence. Each invalid byte becomes U+FFFD. */
    check_escape("a\x80z", 3, "\"a\xef\xbf\xbdz\"");
    check_escape("\xc0\xaf", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xed\xa0\x80", 3, "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("\xe2\x82", 2, "\"\xef\xbf\xbd\xef\xbf\xbd\"");
    check_escape("nul\0in", 6, "\"nul\\u0000in\"");
}

static void test_escape_ceiling(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 8);
    CU_ASSERT_EQUAL(gw_json_escape(&b, "0123456789", 10), GW_ELIMIT);
    gw_buf_free(&b);
}

static void test_error_body(void)
{
    size_t n = 0;
    char *s = gw_json_error_body("bad \"model\"", "invalid_request_error", "model",
                                 "model_not_found", &n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(n, strlen(s));
    json_t *j = json_loads(s, 0, NULL);
    json_t *e = json_object_get(j, "error");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "message"), "bad \"model\"");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "type"), "invalid_request_error");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "param"), "model");
    CU_ASSERT_STRING_EQUAL(gw_json_str(e, "code"), "model_not_found");
    json_decref(j);
    free(s);
    s = gw_json_error_body("m", NULL, NULL, NULL, NULL);
    j = json_loads(s, 0, NULL);
    e = json_object_get(j, "error");
    CU_ASSERT_TRUE(json_is_null(json_object_get(e, "param")));
    CU_ASSERT_TRUE(json_is_null(json_object_get(e, "code")));
    json_decref(j);
    free(s);
}

static CU_TestInfo tests[] = {
    {"typed getters", test_typed_getters},
    {"string escaping", test_escape},
    {"escaping respects the ceiling", test_escape_ceiling},
    {"OpenAI error body", test_error_body},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
