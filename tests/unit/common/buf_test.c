/* Tests for common/gw_buf.c and common/gw_pool.c. */
#include <CUnit/CUnit.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_pool.h"

static void test_append_and_ceiling(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 10);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "hello"), GW_OK);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "world"), GW_OK);
    CU_ASSERT_EQUAL(b.len, 10);
    /* One more byte would pass the ceiling: refused, buffer unchanged. */
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "!"), GW_ELIMIT);
    CU_ASSERT_EQUAL(b.len, 10);
    CU_ASSERT_STRING_EQUAL(b.data, "helloworld");
    CU_ASSERT_EQUAL(gw_buf_printf(&b, "%d", 1), GW_ELIMIT);
    gw_buf_consume(&b, 5);
    CU_ASSERT_STRING_EQUAL(b.data, "world");
    CU_ASSERT_EQUAL(gw_buf_printf(&b, "-%03d", 7), GW_OK);
    CU_ASSERT_STRING_EQUAL(b.data, "world-007");
    gw_buf_consume(&b, 100);
    CU_ASSERT_EQUAL(b.len, 0);
    CU_ASSERT_STRING_EQUAL(b.data, "");
    gw_buf_free(&b);
}

static void test_growth(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    for (int i = 0; i < 10000; i++)
        CU_ASSERT_EQUAL_FATAL(gw_buf_append(&b, "abc", 3), GW_OK);
    CU_ASSERT_EQUAL(b.len, 30000);
    CU_ASSERT_EQUAL(memcmp(b.data + 29997, "abc", 3), 0);
    CU_ASSERT_EQUAL(b.data[30000], '\0');
    gw_buf_free(&b);
}

static int cleaned[3];
static int order;
static void cleanup(void *p)
{
    *(int *)p = ++order;
}

static void test_pool(void)
{
    struct gw_pool *p = gw_pool_new(256);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    char *small = gw_pool_strdup(p, "small");
    void *big = gw_pool_alloc(p, 10000); /* larger than a block */
    CU_ASSERT_PTR_NOT_NULL(big);
    memset(big, 1, 10000);
    for (int i = 0; i < 100; i++) {
        char *s = gw_pool_printf(p, "item-%d", i);
        CU_ASSERT_PTR_NOT_NULL(s);
        CU_ASSERT_EQUAL((uintptr_t)s % 16, 0);
    }
    CU_ASSERT_STRING_EQUAL(small, "small");
    order = 0;
    CU_ASSERT_EQUAL(gw_pool_cleanup(p, cleanup, &cleaned[0]), GW_OK);
    CU_ASSERT_EQUAL(gw_pool_cleanup(p, cleanup, &cleaned[1]), GW_OK);
    gw_pool_free(p);
    /* Newest first. */
    CU_ASSERT_EQUAL(cleaned[1], 1);
    CU_ASSERT_EQUAL(cleaned[0], 2);
}

/* gw_buf_append_int writes what "%lld" does, at both ends of the range. */
static void test_append_int(void)
{
    static const long long vals[] = {0, 7, -7, 10, 1234567890123LL, -1000, LLONG_MAX, LLONG_MIN};
    for (size_t i = 0; i < sizeof(vals) / sizeof(*vals); i++) {
        struct gw_buf b;
        gw_buf_init(&b, 0);
        char want[32];
        snprintf(want, sizeof(want), "x%lld", vals[i]);
        CU_ASSERT_EQUAL(gw_buf_appends(&b, "x"), GW_OK);
        CU_ASSERT_EQUAL(gw_buf_append_int(&b, vals[i]), GW_OK);
        CU_ASSERT_STRING_EQUAL(b.data, want);
        gw_buf_free(&b);
    }
    struct gw_buf small;
    gw_buf_init(&small, 3);
    CU_ASSERT_EQUAL(gw_buf_append_int(&small, 1234), GW_ELIMIT);
    gw_buf_free(&small);
}

static CU_TestInfo tests[] = {
    {"append_int is %lld", test_append_int},
    {"append respects the ceiling", test_append_and_ceiling},
    {"growth", test_growth},
    {"pool allocations and cleanups", test_pool},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
