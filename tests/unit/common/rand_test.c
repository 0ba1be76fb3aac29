/* Tests for common/gw_rand.h: the one xorshift64* source. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <string.h>

#include "gw_rand.h"

static void test_known_sequence(void)
{
    /* xorshift64* (12, 25, 27; multiplier 0x2545F4914F6CDD1D) from state 1:
     * the first outputs, worked by hand from the definition. */
    uint64_t s = 1;
    uint64_t v = 1;
    v ^= v >> 12;
    v ^= v << 25;
    v ^= v >> 27;
    CU_ASSERT_EQUAL(gw_rand_next(&s), v * 0x2545F4914F6CDD1DULL);
    CU_ASSERT_EQUAL(s, v);
    CU_ASSERT_EQUAL(s, 0x2000001ULL ^ (0x2000001ULL >> 27));
    /* The same state gives the same stream. */
    uint64_t a = 0x0123456789abcdefULL, b = a;
    for (int i = 0; i < 1000; i++)
        CU_ASSERT_EQUAL_FATAL(gw_rand_next(&a), gw_rand_next(&b));
}

static void test_seed(void)
{
    uint64_t s[8];
    for (int i = 0; i < 8; i++) {
        s[i] = 0;
        gw_rand_seed(&s[i]);
        CU_ASSERT_NOT_EQUAL(s[i], 0);
    }
    /* Eight seeds from the OS's random bytes do not repeat. */
    for (int i = 0; i < 8; i++)
        for (int j = i + 1; j < 8; j++)
            CU_ASSERT_NOT_EQUAL(s[i], s[j]);
    /* The state never reaches zero (xorshift's fixed point). */
    uint64_t x = s[0];
    for (int i = 0; i < 100000; i++) {
        (void)gw_rand_next(&x);
        CU_ASSERT_NOT_EQUAL_FATAL(x, 0);
    }
}

static void test_ranges_and_spread(void)
{
    uint64_t s = 42;
    int buckets[10];
    memset(buckets, 0, sizeof(buckets));
    for (int i = 0; i < 100000; i++) {
        uint64_t k = gw_rand_below(&s, 10);
        CU_ASSERT_FATAL(k < 10);
        buckets[k]++;
    }
    /* 10,000 expected in each; 5 sigma is about 475. */
    for (int i = 0; i < 10; i++)
        CU_ASSERT(buckets[i] > 9500 && buckets[i] < 10500);
    CU_ASSERT_EQUAL(gw_rand_below(&s, 1), 0);
    double lo = 1, hi = 0, sum = 0;
    for (int i = 0; i < 100000; i++) {
        double u = gw_rand_unit(&s);
        CU_ASSERT_FATAL(u >= 0 && u < 1);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    CU_ASSERT(lo < 0.001 && hi > 0.999);
    CU_ASSERT(sum / 100000 > 0.49 && sum / 100000 < 0.51);
    /* Every bit of the output moves: no bit stuck over 64 draws. */
    uint64_t ones = 0, zeros = 0;
    for (int i = 0; i < 64; i++) {
        uint64_t v = gw_rand_next(&s);
        ones |= v;
        zeros |= ~v;
    }
    CU_ASSERT_EQUAL(ones, UINT64_MAX);
    CU_ASSERT_EQUAL(zeros, UINT64_MAX);
}

static CU_TestInfo tests[] = {
    {"xorshift64*: the definition's sequence, reproducible from a state", test_known_sequence},
    {"seeds: nonzero, distinct, and the state never reaches zero", test_seed},
    {"below(n) and unit(): in range and evenly spread", test_ranges_and_spread},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
