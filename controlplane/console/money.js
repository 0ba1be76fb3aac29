// Exact money for the console. The admin API counts money in integer
// picodollars (10^-12 of the currency unit) with a currency beside them;
// sums can pass 2^53, so amounts arrive as BigInt (api.js parses them so)
// and are rendered with BigInt arithmetic only: never a float.

export const PICO = 10n ** 12n;

/** An amount as a BigInt: a BigInt, a safe integer Number, or a string of
 * digits; null/undefined stay null. Anything else (a fraction, an unsafe
 * Number that has already lost digits) is refused. */
export function toBigInt(v) {
  if (v === null || v === undefined) return null;
  if (typeof v === 'bigint') return v;
  if (typeof v === 'number') {
    if (!Number.isSafeInteger(v)) throw new RangeError(`${v} is not an exact integer amount`);
    return BigInt(v);
  }
  if (typeof v === 'string' && /^-?[0-9]+$/.test(v)) return BigInt(v);
  throw new TypeError(`not an integer amount: ${String(v)}`);
}

/** Digits with a comma every three from the right: "1234567" → "1,234,567". */
export function groupThousands(digits) {
  return digits.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
}

/** The decimal text of a picodollar amount: thousands separated, at least
 * two decimals, trailing zeros past them trimmed ("2.50", "0.000001234567"). */
export function decimalText(pd) {
  const a = pd < 0n ? -pd : pd;
  const whole = a / PICO;
  let frac = (a % PICO).toString().padStart(12, '0').replace(/0+$/, '');
  if (frac.length < 2) frac = frac.padEnd(2, '0');
  return `${pd < 0n ? '-' : ''}${groupThousands(whole.toString())}.${frac}`;
}

/**
 * Renders an amount of picodollars in its currency: USD as "$2.50",
 * "$0.000001234567", "-$1.25"; another currency as "12.50 EUR"; null as
 * "unpriced" (the ledger's NULL cost: no price for a token class used).
 */
export function formatMoney(value, currency = 'USD') {
  const pd = toBigInt(value);
  if (pd === null) return 'unpriced';
  const text = decimalText(pd);
  const cur = currency || 'USD';
  if (cur === 'USD') return text.startsWith('-') ? `-$${text.slice(1)}` : `$${text}`;
  return `${text} ${cur}`;
}

/** A decimal amount typed by an operator ("10", "2.5", "1,000.000001")
 * as exact picodollars; throws on anything else or more than 12 decimals. */
export function parseMoney(text) {
  const s = String(text).trim().replace(/^\$/, '').replace(/,/g, '');
  const m = /^([0-9]+)(?:\.([0-9]{0,12}))?$/.exec(s);
  if (!m) throw new RangeError('an amount like 10 or 2.50, with at most 12 decimals');
  return BigInt(m[1]) * PICO + BigInt((m[2] || '').padEnd(12, '0'));
}

/** part/whole as a Number in [0, 1] for drawing (bars); geometry only,
 * never shown as money. */
export function fraction(part, whole) {
  const p = toBigInt(part) ?? 0n;
  const w = toBigInt(whole) ?? 0n;
  if (w <= 0n || p <= 0n) return 0;
  if (p >= w) return 1;
  return Number((p * 1000000n) / w) / 1000000;
}

/** Sums amounts exactly (null entries are skipped). */
export function sum(values) {
  let s = 0n;
  for (const v of values) {
    const b = toBigInt(v);
    if (b !== null) s += b;
  }
  return s;
}
