#include "gw_money.h"

#include <stdio.h>
#include <string.h>

#include "gw_error.h"

int gw_money_add(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r))
        return GW_ERANGE;
    *out = r;
    return GW_OK;
}

int gw_money_sub(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r))
        return GW_ERANGE;
    *out = r;
    return GW_OK;
}

int gw_money_mul(int64_t a, int64_t b, int64_t *out)
{
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return GW_ERANGE;
    *out = r;
    return GW_OK;
}

int gw_money_muldiv(int64_t a, int64_t num, int64_t den, int64_t *out)
{
    if (den <= 0)
        return GW_EINVAL;
    /* |a * num| < 2^126: the product is exact in 128 bits. */
    __int128 p = (__int128)a * num;
    __int128 q = p / den; /* C truncates toward zero ... */
    if (p % den != 0 && p < 0)
        q -= 1; /* ... floor goes one further down for a negative inexact quotient */
    if (q > INT64_MAX || q < INT64_MIN)
        return GW_ERANGE;
    *out = (int64_t)q;
    return GW_OK;
}

int gw_money_percent(int64_t a, int64_t pct, int64_t *out)
{
    return gw_money_muldiv(a, pct, 100, out);
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int refuse(const char **why, int rc, const char *phrase)
{
    if (why)
        *why = phrase;
    return rc;
}

#define NOT_A_NUMBER "is not a decimal number"
#define INEXACT "is not an exact number of picodollars"
#define OUT_OF_RANGE "is out of range (more than 9223372.036854775807)"
/* An exponent is read up to this magnitude; past it, any nonzero amount
 * is out of range or inexact either way. */
#define EXP_CAP 1000000000LL

int gw_money_parse(const char *s, size_t n, int64_t *out, const char **why)
{
    const char *p = s, *end = s + n;
    int neg = 0;
    if (p < end && *p == '-') {
        neg = 1;
        p++;
    }
    const char *ip = p; /* integer digits */
    while (p < end && is_digit(*p))
        p++;
    size_t nint = (size_t)(p - ip);
    const char *fp = p; /* fraction digits */
    size_t nfrac = 0;
    if (p < end && *p == '.') {
        fp = ++p;
        while (p < end && is_digit(*p))
            p++;
        nfrac = (size_t)(p - fp);
        if (nfrac == 0)
            return refuse(why, GW_EINVAL, NOT_A_NUMBER);
    }
    if (nint == 0)
        return refuse(why, GW_EINVAL, NOT_A_NUMBER);
    long long exp = 0;
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        int eneg = 0;
        if (p < end && (*p == '+' || *p == '-'))
            eneg = *p++ == '-';
        const char *ep = p;
        for (; p < end && is_digit(*p); p++)
            if (exp < EXP_CAP)
                exp = exp * 10 + (*p - '0');
        if (p == ep)
            return refuse(why, GW_EINVAL, NOT_A_NUMBER);
        if (eneg)
            exp = -exp;
    }
    if (p != end)
        return refuse(why, GW_EINVAL, NOT_A_NUMBER);

    /* The digits, integer part then fraction, as one sequence D; the value
     * is D x 10^(exp - nfrac) units, D x 10^(exp - nfrac + 12) picodollars. */
    size_t nd = nint + nfrac;
#define DIGIT(i) ((i) < nint ? ip[(i)] : fp[(i)-nint])
    size_t first = 0, last = nd;
    while (first < nd && DIGIT(first) == '0')
        first++;
    if (first == nd) {
        *out = 0; /* "0", "-0.000", "0e999" */
        return GW_OK;
    }
    for (last = nd - 1; DIGIT(last) == '0'; last--)
        ;
    /* Significant digits first..last, then (nd - 1 - last) zeros, then the
     * scale: the power of ten the significant digits are multiplied by. */
    long long scale = exp - (long long)nfrac + 12 + (long long)(nd - 1 - last);
    if (scale < 0)
        return refuse(why, GW_EINVAL, INEXACT); /* the last nonzero digit is below 10^-12 */
    if ((long long)(last - first + 1) + scale > 19)
        return refuse(why, GW_ERANGE, OUT_OF_RANGE); /* 20 digits or more */
    uint64_t u = 0;
    for (size_t i = first; i <= last; i++)
        if (__builtin_mul_overflow(u, 10u, &u) ||
            __builtin_add_overflow(u, (uint64_t)(DIGIT(i) - '0'), &u))
            return refuse(why, GW_ERANGE, OUT_OF_RANGE);
    for (long long i = 0; i < scale; i++)
        if (__builtin_mul_overflow(u, 10u, &u))
            return refuse(why, GW_ERANGE, OUT_OF_RANGE);
#undef DIGIT
    if (u > (uint64_t)INT64_MAX + (neg ? 1u : 0u))
        return refuse(why, GW_ERANGE, OUT_OF_RANGE);
    *out = !neg ? (int64_t)u : u == (uint64_t)INT64_MAX + 1u ? INT64_MIN : -(int64_t)u;
    return GW_OK;
}

size_t gw_money_format(int64_t v, char *buf, size_t size)
{
    char t[GW_MONEY_STRMAX];
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t whole = u / (uint64_t)GW_PICO_PER_UNIT, frac = u % (uint64_t)GW_PICO_PER_UNIT;
    int len = snprintf(t, sizeof(t), "%s%llu", v < 0 ? "-" : "", (unsigned long long)whole);
    if (frac) {
        char f[16];
        int fl = snprintf(f, sizeof(f), "%012llu", (unsigned long long)frac);
        while (fl > 0 && f[fl - 1] == '0')
            f[--fl] = '\0';
        len += snprintf(t + len, sizeof(t) - (size_t)len, ".%s", f);
    }
    if (size)
        snprintf(buf, size, "%s", t);
    return (size_t)len;
}
