/*
 * gw_money: money as a signed 64-bit count of picodollars (10^-12 of a
 * currency unit: picodollars for USD, the same scale for any currency, which
 * is always stored next to the amount and never converted). No float holds
 * money anywhere in llmgw; this module is the one place where amounts are
 * added, multiplied, scaled, parsed from decimal text and printed.
 *
 * Range: INT64_MAX picodollars is about 9.2 million units (USD). Every
 * operation that would leave that range returns GW_ERANGE instead of
 * wrapping, and leaves *out unchanged. docs/pricing.md has the rules.
 */
#ifndef GW_MONEY_H
#define GW_MONEY_H

#include <stddef.h>
#include <stdint.h>

/* Picodollars in one unit of the currency (one dollar). */
#define GW_PICO_PER_UNIT 1000000000000LL
/* A buffer of this size holds any formatted amount ("-9223372.036854775808"). */
#define GW_MONEY_STRMAX 32

/* *out = a + b, a - b, a * b; GW_OK, or GW_ERANGE on overflow (*out is
 * then untouched). mul is for tokens x price per token. */
int gw_money_add(int64_t a, int64_t b, int64_t *out) __attribute__((warn_unused_result));
int gw_money_sub(int64_t a, int64_t b, int64_t *out) __attribute__((warn_unused_result));
int gw_money_mul(int64_t a, int64_t b, int64_t *out) __attribute__((warn_unused_result));

/*
 * *out = floor(a * num / den), computed exactly (the product is held in 128
 * bits, so it never overflows on the way). Rounding is floor, toward minus
 * infinity: a share of a positive amount is never rounded up (a threshold
 * or a budget's part is never more than its exact value). GW_EINVAL when
 * den <= 0; GW_ERANGE when the result does not fit.
 */
int gw_money_muldiv(int64_t a, int64_t num, int64_t den, int64_t *out)
    __attribute__((warn_unused_result));
/* pct percent of a: gw_money_muldiv(a, pct, 100). 80% of $5,000 is exactly
 * $4,000; 33% of 1 picodollar is 0 (floor). */
int gw_money_percent(int64_t a, int64_t pct, int64_t *out) __attribute__((warn_unused_result));

/*
 * Parses s[0..n), a decimal amount of the currency unit (USD, say), into
 * picodollars, exactly: digit by digit, never through a double. The grammar
 * is a JSON number's: an optional '-', digits (leading zeros allowed), an
 * optional '.' followed by at least one digit, an optional exponent
 * ('e' or 'E', an optional sign, digits). "0.000002", "2e-6", "1.5E-5",
 * "3e-06" and "-0.25" parse; "", ".5", "1.", "+1", " 1", "1e", "0x10" and
 * "NaN" do not.
 *
 * GW_OK with *out; otherwise *out is untouched and *why (when why is not
 * NULL) is a static phrase that completes "<field>: <text> ...":
 *   GW_EINVAL "is not a decimal number"
 *   GW_EINVAL "is not an exact number of picodollars" (a nonzero digit
 *             below 10^-12: "0.0000000000001", "1.234567891234567e-07")
 *   GW_ERANGE "is out of range (more than 9223372.036854775807)"
 */
int gw_money_parse(const char *s, size_t n, int64_t *out, const char **why)
    __attribute__((warn_unused_result));

/*
 * Formats v picodollars as an exact decimal amount of the unit, the
 * shortest that reads back as v: "0.000003", "4000", "-0.5", "0". Writes at
 * most size bytes including the NUL (size GW_MONEY_STRMAX always suffices)
 * and returns the length of the whole text, like snprintf.
 */
size_t gw_money_format(int64_t v, char *buf, size_t size);

#endif
