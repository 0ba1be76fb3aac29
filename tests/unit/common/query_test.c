/* Tests for common/gw_query.c: a query string read against an endpoint's names. */
#include <CUnit/CUnit.h>
#include <string.h>

#include "gw_pool.h"
#include "gw_query.h"

static const char *const names[] = {"model", "limit", "capabilities", NULL};

static enum gw_query_err parse(struct gw_pool *p, const char *qs, const char **v, size_t *idx,
                               const char **bad, size_t *badlen)
{
    return gw_query_parse(p, qs, names, v, idx, bad, badlen);
}

static void test_values(void)
{
    struct gw_pool *p = gw_pool_new(0);
    const char *v[4], *bad = NULL;
    size_t idx = 0, bl = 0;
    CU_ASSERT_EQUAL(parse(p, "model=a%2Fb&&capabilities=tools%2Cvision&limit", v, &idx, &bad, &bl),
                    GW_QUERY_OK);
    CU_ASSERT_STRING_EQUAL(v[0], "a/b");
    CU_ASSERT_STRING_EQUAL(v[1], ""); /* a name alone */
    CU_ASSERT_STRING_EQUAL(v[2], "tools,vision");
    CU_ASSERT_EQUAL(parse(p, NULL, v, &idx, &bad, &bl), GW_QUERY_OK);
    CU_ASSERT_PTR_NULL(v[0]);
    CU_ASSERT_EQUAL(parse(p, "model=x+y", v, &idx, &bad, &bl), GW_QUERY_OK);
    CU_ASSERT_STRING_EQUAL(v[0], "x+y"); /* '+' is not a space here */
    gw_pool_free(p);
}

static void test_refusals(void)
{
    struct gw_pool *p = gw_pool_new(0);
    const char *v[4], *bad = NULL;
    size_t idx = 9, bl = 0;
    const char *qs = "model=a&colour=red";
    CU_ASSERT_EQUAL(parse(p, qs, v, &idx, &bad, &bl), GW_QUERY_UNKNOWN);
    CU_ASSERT_PTR_EQUAL(bad, qs + 8);
    CU_ASSERT_EQUAL(bl, 6);
    CU_ASSERT_EQUAL(parse(p, "limit=1&model=b&limit=2", v, &idx, &bad, &bl), GW_QUERY_REPEATED);
    CU_ASSERT_EQUAL(idx, 1);
    CU_ASSERT_EQUAL(parse(p, "model=%zz", v, &idx, &bad, &bl), GW_QUERY_MALFORMED);
    CU_ASSERT_EQUAL(idx, 0);
    CU_ASSERT_EQUAL(parse(p, "model=a%00b", v, &idx, &bad, &bl), GW_QUERY_MALFORMED);
    CU_ASSERT_EQUAL(parse(p, "model=%4", v, &idx, &bad, &bl), GW_QUERY_MALFORMED);
    /* Not text: invalid UTF-8, a control character. */
    CU_ASSERT_EQUAL(parse(p, "limit=1&model=%ff", v, &idx, &bad, &bl), GW_QUERY_MALFORMED);
    CU_ASSERT_EQUAL(idx, 0);
    CU_ASSERT_EQUAL(parse(p, "model=a%0Ab", v, &idx, &bad, &bl), GW_QUERY_MALFORMED);
    CU_ASSERT_EQUAL(parse(p, "model=caf%C3%A9", v, &idx, &bad, &bl), GW_QUERY_OK);
    CU_ASSERT_STRING_EQUAL(v[0], "caf\xc3\xa9");
    /* A prefix of a name is not the name. */
    CU_ASSERT_EQUAL(parse(p, "mode=a", v, &idx, &bad, &bl), GW_QUERY_UNKNOWN);
    CU_ASSERT_EQUAL(parse(p, "models=a", v, &idx, &bad, &bl), GW_QUERY_UNKNOWN);
    CU_ASSERT_PTR_NULL(gw_unescape(p, "%", 1));
    CU_ASSERT_STRING_EQUAL(gw_unescape(p, "%41%62c", 7), "Abc");
    gw_pool_free(p);
}

static CU_TestInfo tests[] = {
    {"values: decoded, a name alone is \"\", empty pieces skipped", test_values},
    {"refusals: unknown (where), repeated, malformed escapes", test_refusals},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
