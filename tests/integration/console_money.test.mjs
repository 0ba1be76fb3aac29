// money.js, the console's exact money rendering (controlplane/console/):
// picodollars (10^-12 of the currency unit) as decimal currency with
// BigInt arithmetic only, and operator-typed amounts back to picodollars.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  formatMoney, parseMoney, toBigInt, decimalText, fraction, sum, groupThousands,
} from '../../controlplane/console/money.js';

test('USD amounts render exactly: at least two decimals, trailing zeros trimmed past them', () => {
  assert.equal(formatMoney(1234567, 'USD'), '$0.000001234567');
  assert.equal(formatMoney(2_500_000_000_000, 'USD'), '$2.50');
  assert.equal(formatMoney(2_500_000_000_000n), '$2.50', 'USD by default');
  assert.equal(formatMoney(0), '$0.00');
  assert.equal(formatMoney(1), '$0.000000000001', 'one picodollar');
  assert.equal(formatMoney(10_000_000_000), '$0.01');
  assert.equal(formatMoney(12_345_000_000_000), '$12.345');
  assert.equal(formatMoney(85_000_000), '$0.000085');
  assert.equal(formatMoney(1_000_000_000_000_000n), '$1,000.00', 'thousands separated');
  assert.equal(formatMoney(1_234_567_891_234_567_891n), '$1,234,567.891234567891');
  assert.equal(formatMoney('999999999999'), '$0.999999999999', 'a string of digits');
});

test('sums past 2^53 stay exact (BigInt in, every digit out)', () => {
  const big = 2n ** 53n + 1n; // 9007199254740993: not representable as a Number
  assert.equal(formatMoney(big), '$9,007.199254740993');
  const total = sum([big, big, 1n, null, 7]);
  assert.equal(total, 18014398509481994n);
  assert.equal(formatMoney(total), '$18,014.398509481994');
  const int64max = 9_223_372_036_854_775_807n; // the API's bound: a usage sum past it is a 422
  assert.equal(formatMoney(int64max), '$9,223,372.036854775807');
  assert.equal(formatMoney(int64max * 1000n), '$9,223,372,036.854775807');
  // An unsafe Number has already lost digits: refused rather than shown wrong.
  assert.throws(() => formatMoney(2 ** 53 + 2), RangeError);
  assert.throws(() => formatMoney(1.5), RangeError);
  assert.throws(() => toBigInt('1.5'), TypeError);
});

test('null is "unpriced"; other currencies are written after the amount', () => {
  assert.equal(formatMoney(null, 'USD'), 'unpriced');
  assert.equal(formatMoney(undefined), 'unpriced');
  assert.equal(formatMoney(12_500_000_000_000n, 'EUR'), '12.50 EUR');
  assert.equal(formatMoney(1_234_000_000_000_000n, 'JPY'), '1,234.00 JPY');
  assert.equal(formatMoney(3, 'GBP'), '0.000000000003 GBP');
  assert.equal(formatMoney(null, 'EUR'), 'unpriced');
});

test('negative amounts (a correction) keep their sign in front', () => {
  assert.equal(formatMoney(-1_500_000_000_000n), '-$1.50');
  assert.equal(formatMoney(-1), '-$0.000000000001');
  assert.equal(formatMoney(-12_500_000_000_000n, 'EUR'), '-12.50 EUR');
  assert.equal(decimalText(-1_000_000_000_000_000n), '-1,000.00');
});

test('typed amounts parse to exact picodollars; more than 12 decimals or junk is refused', () => {
  assert.equal(parseMoney('10'), 10_000_000_000_000n);
  assert.equal(parseMoney('2.5'), 2_500_000_000_000n);
  assert.equal(parseMoney('$1,000.000000000001'), 1_000_000_000_000_001n);
  assert.equal(parseMoney(' 0.001 '), 1_000_000_000n);
  assert.equal(parseMoney('4000000'), 4_000_000_000_000_000_000n, 'the limits API maximum');
  for (const bad of ['', 'abc', '1.0000000000001', '-1', '1e3', '1.2.3']) {
    assert.throws(() => parseMoney(bad), RangeError, bad);
  }
  // Round trip through the rendering.
  for (const pd of [1n, 85_000_000n, 2_500_000_000_000n, 2n ** 60n]) {
    assert.equal(parseMoney(formatMoney(pd)), pd);
  }
});

test('helpers: thousands, fractions for bars, sums', () => {
  assert.equal(groupThousands('1234567'), '1,234,567');
  assert.equal(groupThousands('123'), '123');
  assert.equal(fraction(1n, 4n), 0.25);
  assert.equal(fraction(5n, 4n), 1, 'over the amount: a full bar');
  assert.equal(fraction(0, 0), 0);
  assert.equal(fraction(2n ** 62n, 2n ** 63n), 0.5, 'exact ratio of values past 2^53');
  assert.equal(sum([]), 0n);
});
