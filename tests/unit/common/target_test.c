/* Tests for common/gw_target.h: the (provider, model) key, its hash,
 * equality, order and copy. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_hash.h"
#include "gw_target.h"

static void test_hash(void)
{
    /* Defined as FNV-1a over provider NUL model, mixed. */
    uint64_t want = gw_mix64(gw_fnv1a(GW_FNV1A_INIT, "openai\0gpt-4o", 13));
    CU_ASSERT_EQUAL(gw_target_hash("openai", "gpt-4o"), want);
    /* The NUL separates: moving a byte across the boundary changes it. */
    CU_ASSERT_NOT_EQUAL(gw_target_hash("ab", "c"), gw_target_hash("a", "bc"));
    CU_ASSERT_NOT_EQUAL(gw_target_hash("a", "b"), gw_target_hash("b", "a"));
    CU_ASSERT_NOT_EQUAL(gw_target_hash("", "x"), gw_target_hash("x", ""));
    /* Spread over a power-of-two table's low bits. */
    int heads[64];
    memset(heads, 0, sizeof(heads));
    char p[16], m[16];
    for (int i = 0; i < 6400; i++) {
        snprintf(p, sizeof(p), "prov%d", i % 80);
        snprintf(m, sizeof(m), "model-%d", i / 80);
        heads[gw_target_hash(p, m) & 63]++;
    }
    for (int i = 0; i < 64; i++)
        CU_ASSERT(heads[i] > 50 && heads[i] < 150);
}

static void test_eq_cmp(void)
{
    struct gw_target_key a = {"openai", "gpt-4o"}, b = {"openai", "gpt-4o-mini"},
                         c = {"anthropic", "gpt-4o"};
    CU_ASSERT(gw_target_is(&a, "openai", "gpt-4o"));
    CU_ASSERT(!gw_target_is(&a, "openai", "gpt-4o-mini"));
    CU_ASSERT(!gw_target_is(&a, "anthropic", "gpt-4o"));
    CU_ASSERT_EQUAL(gw_target_cmp(&a, &a), 0);
    CU_ASSERT(gw_target_cmp(&a, &b) < 0); /* same provider: by model */
    CU_ASSERT(gw_target_cmp(&b, &a) > 0);
    CU_ASSERT(gw_target_cmp(&c, &a) < 0); /* provider first */
    CU_ASSERT(gw_target_cmp(&c, &b) < 0);
}

static void test_copy(void)
{
    size_t n = gw_target_key_size("openai", "gpt-4o");
    CU_ASSERT_EQUAL(n, 6 + 1 + 6 + 1);
    char *block = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(block);
    char p[] = "openai", m[] = "gpt-4o";
    struct gw_target_key k;
    gw_target_key_copy(&k, block, p, m);
    p[0] = m[0] = 'X'; /* the copy does not follow the originals */
    CU_ASSERT_PTR_EQUAL(k.provider, block);
    CU_ASSERT_STRING_EQUAL(k.provider, "openai");
    CU_ASSERT_STRING_EQUAL(k.model, "gpt-4o");
    CU_ASSERT_EQUAL(memcmp(block, "openai\0gpt-4o", n), 0);
    CU_ASSERT_EQUAL(gw_target_hash(k.provider, k.model), gw_target_hash("openai", "gpt-4o"));
    free(block);
}

static CU_TestInfo tests[] = {
    {"hash: FNV-1a over provider NUL model, mixed; the separator counts", test_hash},
    {"equality and order: provider, then model", test_eq_cmp},
    {"copy: one block, provider NUL model NUL", test_copy},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
