/*
 * libFuzzer target for gw_money (common/gw_money.c), the one place where
 * money is parsed from decimal text, printed and computed. Checked against
 * what gw_money.h says:
 *  - gw_money_parse on the whole input agrees with a plain reading of it
 *    (ref_parse below: the JSON number grammar the header gives, then the
 *    value as a string of digits and a power of ten, never an integer that
 *    could overflow): the same verdict (GW_OK, GW_EINVAL for "not a decimal
 *    number" or "not an exact number of picodollars", GW_ERANGE), the
 *    header's phrase in *why, *out untouched on a refusal; and when it
 *    parses, gw_money_format of the value is the reference's shortest
 *    decimal text of it, which parses back to the same value;
 *  - any int64 amount (the input's first 8 bytes) formats within
 *    GW_MONEY_STRMAX and parses back to itself; a buffer too small (a size
 *    drawn from the input) gets the text's prefix, NUL-terminated, and the
 *    same returned length, like snprintf;
 *  - add, sub and mul are exact or GW_ERANGE with *out untouched;
 *    muldiv and percent are floor(a * num / den) exactly (checked in 128
 *    bits: q * den <= a * num < (q + 1) * den), GW_EINVAL for den <= 0,
 *    GW_ERANGE when it does not fit.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_error.h"
#include "gw_money.h"

#define NOT_A_NUMBER "is not a decimal number"
#define INEXACT "is not an exact number of picodollars"
#define OUT_OF_RANGE "is out of range (more than 9223372.036854775807)"
#define SENTINEL 0x5a5a5a5a5a5a5a5aLL

static int digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The reference: GW_OK with the amount's shortest text in text (the
 * picodollars as digits, cut into units and fraction), or the refusal and
 * its phrase. */
static int ref_parse(const char *s, size_t n, char *text, size_t textlen, const char **why)
{
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    size_t ib = i;
    while (i < n && digit(s[i]))
        i++;
    size_t ie = i, fb = i, fe = i;
    if (i < n && s[i] == '.') {
        fb = ++i;
        while (i < n && digit(s[i]))
            i++;
        fe = i;
        if (fe == fb) {
            *why = NOT_A_NUMBER;
            return GW_EINVAL;
        }
    }
    if (ie == ib) {
        *why = NOT_A_NUMBER;
        return GW_EINVAL;
    }
    long long exp = 0; /* saturates far past anything that could fit */
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        i++;
        int eneg = 0;
        if (i < n && (s[i] == '+' || s[i] == '-'))
            eneg = s[i++] == '-';
        size_t eb = i;
        for (; i < n && digit(s[i]); i++)
            exp = exp > 1000000000000000LL ? exp : exp * 10 + (s[i] - '0');
        if (i == eb) {
            *why = NOT_A_NUMBER;
            return GW_EINVAL;
        }
        exp = eneg ? -exp : exp;
    }
    if (i != n) {
        *why = NOT_A_NUMBER;
        return GW_EINVAL;
    }
    /* The digits without the point; the value is digits x 10^(exp - nfrac)
     * units, so x 10^(exp - nfrac + 12) picodollars. */
    char *d = malloc(n + 1);
    CHECK(d != NULL);
    size_t nd = 0;
    for (size_t k = ib; k < ie; k++)
        d[nd++] = s[k];
    for (size_t k = fb; k < fe; k++)
        d[nd++] = s[k];
    long long pow10 = exp - (long long)(fe - fb) + 12;
    size_t first = 0;
    while (first < nd && d[first] == '0')
        first++;
    if (first == nd) {
        free(d);
        snprintf(text, textlen, "0");
        return GW_OK;
    }
    size_t last = nd;
    while (d[last - 1] == '0') {
        last--;
        pow10++;
    }
    if (pow10 < 0) {
        free(d);
        *why = INEXACT;
        return GW_EINVAL;
    }
    /* Picodollars: the significant digits, then pow10 zeros. */
    long long len = (long long)(last - first) + pow10;
    char pico[21];
    const char *max = neg ? "9223372036854775808" : "9223372036854775807";
    int over = len > 19;
    if (!over) {
        memcpy(pico, d + first, last - first);
        memset(pico + (last - first), '0', (size_t)pow10);
        pico[len] = '\0';
        over = len == 19 && strcmp(pico, max) > 0;
    }
    free(d);
    if (over) {
        *why = OUT_OF_RANGE;
        return GW_ERANGE;
    }
    /* Units and the fraction's 12 digits, trailing zeros cut. */
    char units[21] = "0", frac[13];
    size_t pl = (size_t)len;
    if (pl > 12) {
        memcpy(units, pico, pl - 12);
        units[pl - 12] = '\0';
    }
    memset(frac, '0', 12);
    memcpy(frac + 12 - (pl < 12 ? pl : 12), pico + (pl > 12 ? pl - 12 : 0), pl < 12 ? pl : 12);
    size_t fl = 12;
    while (fl > 0 && frac[fl - 1] == '0')
        fl--;
    frac[fl] = '\0';
    snprintf(text, textlen, "%s%s%s%s", neg ? "-" : "", units, fl ? "." : "", frac);
    return GW_OK;
}

static int64_t get64(const uint8_t *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | p[i];
    return (int64_t)u;
}

/* Formats v, checks the text, parses it back. */
static void round_trip(int64_t v, size_t small)
{
    char buf[GW_MONEY_STRMAX];
    size_t len = gw_money_format(v, buf, sizeof(buf));
    CHECK(len < GW_MONEY_STRMAX && strlen(buf) == len);
    int64_t back = SENTINEL;
    const char *why = NULL;
    CHECK(gw_money_parse(buf, len, &back, &why) == GW_OK && back == v);
    /* A short buffer: the prefix, NUL-terminated; the whole length back. */
    char tiny[GW_MONEY_STRMAX + 1];
    memset(tiny, 'x', sizeof(tiny));
    small %= GW_MONEY_STRMAX + 1;
    CHECK(gw_money_format(v, tiny, small) == len);
    if (small) {
        size_t keep = len < small - 1 ? len : small - 1;
        CHECK(memcmp(tiny, buf, keep) == 0 && tiny[keep] == '\0');
    }
    CHECK(tiny[small] == 'x'); /* nothing written past size */
}

static void arithmetic(int64_t a, int64_t b, int64_t c)
{
    int64_t r = SENTINEL, want;
    int over = __builtin_add_overflow(a, b, &want);
    CHECK(gw_money_add(a, b, &r) == (over ? GW_ERANGE : GW_OK));
    CHECK(r == (over ? SENTINEL : want));
    r = SENTINEL;
    over = __builtin_sub_overflow(a, b, &want);
    CHECK(gw_money_sub(a, b, &r) == (over ? GW_ERANGE : GW_OK));
    CHECK(r == (over ? SENTINEL : want));
    r = SENTINEL;
    over = __builtin_mul_overflow(a, b, &want);
    CHECK(gw_money_mul(a, b, &r) == (over ? GW_ERANGE : GW_OK));
    CHECK(r == (over ? SENTINEL : want));

    r = SENTINEL;
    int rc = gw_money_muldiv(a, b, c, &r);
    if (c <= 0) {
        CHECK(rc == GW_EINVAL && r == SENTINEL);
    } else {
        __int128 p = (__int128)a * b;
        if (rc == GW_OK) {
            CHECK((__int128)r * c <= p && p < ((__int128)r + 1) * c);
        } else {
            CHECK(rc == GW_ERANGE && r == SENTINEL);
            /* The floor does not fit: the quotient is out of int64's range. */
            CHECK(p < (__int128)INT64_MIN * c || p >= ((__int128)INT64_MAX + 1) * c);
        }
    }
    int64_t pct = b % 1000;
    r = SENTINEL;
    rc = gw_money_percent(a, pct, &r);
    int64_t r2 = SENTINEL;
    CHECK(rc == gw_money_muldiv(a, pct, 100, &r2) && r == r2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* The whole input as a decimal amount. */
    const char *s = (const char *)data;
    int64_t v = SENTINEL;
    const char *why = NULL, *rwhy = NULL;
    char text[64];
    int rc = gw_money_parse(s, size, &v, &why);
    int rrc = ref_parse(s, size, text, sizeof(text), &rwhy);
    if (rc != rrc || (rc != GW_OK && strcmp(why, rwhy) != 0)) {
        fprintf(stderr, "fuzz_money: '%.*s': %d (%s) vs the reference's %d (%s)\n", (int)size, s,
                rc, rc ? why : "-", rrc, rrc ? rwhy : "-");
        abort();
    }
    if (rc == GW_OK) {
        char buf[GW_MONEY_STRMAX];
        size_t len = gw_money_format(v, buf, sizeof(buf));
        if (strcmp(buf, text) != 0) {
            fprintf(stderr, "fuzz_money: '%.*s' formats as %s, the reference says %s\n", (int)size,
                    s, buf, text);
            abort();
        }
        int64_t back = SENTINEL;
        CHECK(gw_money_parse(buf, len, &back, NULL) == GW_OK && back == v);
    } else {
        CHECK(v == SENTINEL);                           /* untouched */
        CHECK(gw_money_parse(s, size, &v, NULL) == rc); /* why may be NULL */
    }

    /* The input's bytes as amounts. */
    if (size >= 24) {
        int64_t a = get64(data), b = get64(data + 8), c = get64(data + 16);
        round_trip(a, (size_t)data[size - 1]);
        round_trip(b, (size_t)data[size - 2]);
        arithmetic(a, b, c);
        arithmetic(a % 1000000000000000LL, b % 100000, c % 1000000 + 1);
    }
    return 0;
}
