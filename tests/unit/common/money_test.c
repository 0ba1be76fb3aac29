/* Tests for common/gw_money.c: exact money in picodollars. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <string.h>

#include "gw_error.h"
#include "gw_money.h"

#define PICO GW_PICO_PER_UNIT

static int64_t parse_ok(const char *s)
{
    int64_t v = -42;
    const char *why = NULL;
    int rc = gw_money_parse(s, strlen(s), &v, &why);
    if (rc != GW_OK)
        CU_FAIL_FATAL(s);
    return v;
}

static void expect_refused(const char *s, int want_rc, const char *want_why)
{
    int64_t v = 77;
    const char *why = NULL;
    int rc = gw_money_parse(s, strlen(s), &v, &why);
    CU_ASSERT_EQUAL(rc, want_rc);
    CU_ASSERT_EQUAL(v, 77); /* untouched */
    CU_ASSERT_PTR_NOT_NULL_FATAL(why);
    CU_ASSERT_STRING_EQUAL(why, want_why);
    if (rc != want_rc)
        CU_FAIL(s);
}

static void test_budget_threshold_exact(void)
{
    /* A $5,000 budget's 80% threshold is exactly $4,000. */
    int64_t budget = parse_ok("5000"), t = 0;
    CU_ASSERT_EQUAL(budget, 5000 * PICO);
    CU_ASSERT_EQUAL(gw_money_percent(budget, 80, &t), GW_OK);
    CU_ASSERT_EQUAL(t, 4000 * PICO);
    char s[GW_MONEY_STRMAX];
    gw_money_format(t, s, sizeof(s));
    CU_ASSERT_STRING_EQUAL(s, "4000");
    /* The same from a budget written with decimals and an exponent. */
    CU_ASSERT_EQUAL(parse_ok("5.000e3"), budget);
    CU_ASSERT_EQUAL(gw_money_percent(parse_ok("0.05"), 80, &t), GW_OK);
    CU_ASSERT_EQUAL(t, parse_ok("0.04"));
    CU_ASSERT_EQUAL(gw_money_percent(budget, 100, &t), GW_OK);
    CU_ASSERT_EQUAL(t, budget);
}

static void test_percent_floor(void)
{
    int64_t v = 99;
    CU_ASSERT_EQUAL(gw_money_percent(1, 33, &v), GW_OK);
    CU_ASSERT_EQUAL(v, 0); /* 0.33 picodollars: floor */
    CU_ASSERT_EQUAL(gw_money_percent(199, 50, &v), GW_OK);
    CU_ASSERT_EQUAL(v, 99);
    CU_ASSERT_EQUAL(gw_money_percent(-1, 33, &v), GW_OK);
    CU_ASSERT_EQUAL(v, -1); /* floor is toward minus infinity */
    CU_ASSERT_EQUAL(gw_money_percent(-200, 50, &v), GW_OK);
    CU_ASSERT_EQUAL(v, -100); /* exact: no adjustment */
    /* The product passes 64 bits on the way; the result does not. */
    CU_ASSERT_EQUAL(gw_money_muldiv(INT64_MAX, 3, 3, &v), GW_OK);
    CU_ASSERT_EQUAL(v, INT64_MAX);
    CU_ASSERT_EQUAL(gw_money_muldiv(INT64_MAX, 99, 100, &v), GW_OK);
    CU_ASSERT_EQUAL(v, (int64_t)(((__int128)INT64_MAX * 99) / 100));
    v = 5;
    CU_ASSERT_EQUAL(gw_money_percent(INT64_MAX, 101, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_muldiv(INT64_MIN, -1, 1, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_muldiv(1, 1, 0, &v), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_money_muldiv(1, 1, -3, &v), GW_EINVAL);
    CU_ASSERT_EQUAL(v, 5);
}

/* A million small costs (tokens x a price per token) summed with the
 * checked operations equal the closed form computed independently. */
static void test_million_small_costs(void)
{
    const int64_t n = 1000000, m = 997;
    int64_t price = parse_ok("1.5e-6"); /* $1.50 per million tokens */
    CU_ASSERT_EQUAL(price, 1500000);
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t cost;
        CU_ASSERT_EQUAL_FATAL(gw_money_mul(i % m + 1, price, &cost), GW_OK);
        CU_ASSERT_EQUAL_FATAL(gw_money_add(total, cost, &total), GW_OK);
    }
    /* sum over i < n of (i mod m) + 1 = q * m(m+1)/2 + r(r+1)/2, n = q*m + r */
    int64_t q = n / m, r = n % m;
    int64_t tokens = q * (m * (m + 1) / 2) + r * (r + 1) / 2;
    CU_ASSERT_EQUAL(total, tokens * price);
    CU_ASSERT_EQUAL(tokens, 498995554); /* 1003 * 497503 + 45 */
    char s[GW_MONEY_STRMAX];
    gw_money_format(total, s, sizeof(s));
    CU_ASSERT_STRING_EQUAL(s, "748.493331");
    /* The smallest cost, a million times: exactly a millionth of a dollar. */
    int64_t tiny = 0;
    for (int i = 0; i < 1000000; i++)
        CU_ASSERT_EQUAL_FATAL(gw_money_add(tiny, 1, &tiny), GW_OK);
    CU_ASSERT_EQUAL(tiny, parse_ok("0.000001"));
}

static void test_overflow_detected(void)
{
    int64_t v = 123;
    CU_ASSERT_EQUAL(gw_money_add(INT64_MAX, 1, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_add(INT64_MIN, -1, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_sub(INT64_MIN, 1, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_sub(0, INT64_MIN, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_mul(INT64_MAX, 2, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(gw_money_mul(INT64_MIN, -1, &v), GW_ERANGE);
    /* Ten million tokens at a dollar a token: 10^19 picodollars. */
    CU_ASSERT_EQUAL(gw_money_mul(10000000, PICO, &v), GW_ERANGE);
    CU_ASSERT_EQUAL(v, 123); /* untouched on every refusal */
    CU_ASSERT_EQUAL(gw_money_add(INT64_MAX - 1, 1, &v), GW_OK);
    CU_ASSERT_EQUAL(v, INT64_MAX);
    CU_ASSERT_EQUAL(gw_money_mul(9223372, PICO, &v), GW_OK);
    CU_ASSERT_EQUAL(v, 9223372 * PICO);
    CU_ASSERT_EQUAL(gw_money_sub(5, 7, &v), GW_OK);
    CU_ASSERT_EQUAL(v, -2);
    /* A sum that would wrap stops at the step that overflows. */
    int64_t sum = 0;
    int steps = 0;
    while (gw_money_add(sum, PICO * 1000000, &sum) == GW_OK)
        steps++;
    CU_ASSERT_EQUAL(steps, 9); /* $9M fits, $10M does not */
    CU_ASSERT_EQUAL(sum, 9 * PICO * 1000000);
}

static void test_parse(void)
{
    static const struct {
        const char *s;
        int64_t v;
    } ok[] = {
        {"0.000002", 2000000},
        {"3e-06", 3000000},
        {"1.5E-5", 15000000},
        {"1.5e-05", 15000000},
        {"3.75e-06", 3750000},
        {"2.5e-07", 250000},
        {"0.000000000001", 1},
        {"1e-12", 1},
        {"10e-13", 1},
        {"1", PICO},
        {"1E+2", 100 * PICO},
        {"0.100e1", PICO},
        {"00.5", PICO / 2},
        {"1.000000000000000000000", PICO},
        {"0.0000015000000000", 1500000},
        {"0", 0},
        {"-0", 0},
        {"-0.0", 0},
        {"0e999999999999999999", 0},
        {"0.000e-999999999999", 0},
        {"-0.25", -PICO / 4},
        {"9223372.036854775807", INT64_MAX},
        {"-9223372.036854775808", INT64_MIN},
        {"9.223372036854775807e6", INT64_MAX},
        {"1e6", 1000000 * PICO},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(*ok); i++) {
        int64_t v = 0;
        int rc = gw_money_parse(ok[i].s, strlen(ok[i].s), &v, NULL);
        CU_ASSERT_EQUAL(rc, GW_OK);
        CU_ASSERT_EQUAL(v, ok[i].v);
        if (rc != GW_OK || v != ok[i].v)
            CU_FAIL(ok[i].s);
    }
    const char *nan = "is not a decimal number";
    const char *bad[] = {"",      "-",     ".5",   "1.",  "+1",  " 1",    "1 ",    "1e",
                         "1e+",   "e5",    "0x10", "NaN", "inf", "1.5.5", "1,5",   "--1",
                         "1e5.5", "1_000", "١",    "1\n", "$1",  "1-",    "1e--1", "0.0.0"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
        expect_refused(bad[i], GW_EINVAL, nan);
    const char *inexact = "is not an exact number of picodollars";
    expect_refused("0.0000000000001", GW_EINVAL, inexact);
    expect_refused("1e-13", GW_EINVAL, inexact);
    expect_refused("1.234567891234567e-07", GW_EINVAL, inexact);
    expect_refused("-0.0000000000015", GW_EINVAL, inexact);
    expect_refused("3.3333333333333335e-05", GW_EINVAL, inexact);
    expect_refused("1e-999999999999999", GW_EINVAL, inexact);
    const char *range = "is out of range (more than 9223372.036854775807)";
    expect_refused("9223372.036854775808", GW_ERANGE, range);
    expect_refused("-9223372.036854775809", GW_ERANGE, range);
    expect_refused("1e7", GW_ERANGE, range);
    expect_refused("10000000", GW_ERANGE, range);
    expect_refused("12345678901234567890e-12", GW_ERANGE, range);
    expect_refused("1e999999999999999", GW_ERANGE, range);
    /* Only n bytes are read. */
    int64_t v = 0;
    CU_ASSERT_EQUAL(gw_money_parse("12abc", 2, &v, NULL), GW_OK);
    CU_ASSERT_EQUAL(v, 12 * PICO);
    CU_ASSERT_EQUAL(gw_money_parse("3e-06", 3, &v, NULL), GW_EINVAL); /* "3e-" */
}

static void test_format(void)
{
    static const struct {
        int64_t v;
        const char *s;
    } t[] = {
        {0, "0"},
        {1, "0.000000000001"},
        {3000000, "0.000003"},
        {15000000, "0.000015"},
        {4000 * PICO, "4000"},
        {-PICO / 2, "-0.5"},
        {PICO + 1, "1.000000000001"},
        {INT64_MAX, "9223372.036854775807"},
        {INT64_MIN, "-9223372.036854775808"},
    };
    char s[GW_MONEY_STRMAX];
    for (size_t i = 0; i < sizeof(t) / sizeof(*t); i++) {
        size_t n = gw_money_format(t[i].v, s, sizeof(s));
        CU_ASSERT_STRING_EQUAL(s, t[i].s);
        CU_ASSERT_EQUAL(n, strlen(t[i].s));
    }
    /* A short buffer: cut, NUL-terminated, the whole length returned. */
    char small[4];
    CU_ASSERT_EQUAL(gw_money_format(3000000, small, sizeof(small)), 8);
    CU_ASSERT_STRING_EQUAL(small, "0.0");
    /* Round trips over a spread of values. */
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 100000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int64_t v = (int64_t)(x >> (i % 64)) * ((i & 1) ? -1 : 1), back = 0;
        if (v == INT64_MIN)
            continue;
        size_t n = gw_money_format(v, s, sizeof(s));
        CU_ASSERT_EQUAL_FATAL(gw_money_parse(s, n, &back, NULL), GW_OK);
        CU_ASSERT_EQUAL_FATAL(back, v);
    }
}

static CU_TestInfo tests[] = {
    {"a $5,000 budget's 80% threshold is exactly $4,000", test_budget_threshold_exact},
    {"percentages round down (floor), exactly, with a 128-bit product", test_percent_floor},
    {"a million small costs sum exactly (closed form)", test_million_small_costs},
    {"overflow is detected in add, sub and mul, never wrapped", test_overflow_detected},
    {"parsing: exponents, exactness, range, malformed text", test_parse},
    {"formatting: shortest exact decimal, round trips", test_format},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
