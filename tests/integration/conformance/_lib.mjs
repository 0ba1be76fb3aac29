// Helpers for the conformance features' evidence functions.

/** The first value in o (depth first, o included) for which pred holds. */
export function deep(o, pred) {
  if (o === null || typeof o !== 'object') return undefined;
  if (pred(o)) return o;
  for (const v of Array.isArray(o) ? o : Object.values(o)) {
    const r = deep(v, pred);
    if (r !== undefined) return r;
  }
  return undefined;
}

/** Whether o holds an object with key k (at any depth). */
export const hasKey = (o, k) => deep(o, (x) => !Array.isArray(x) && Object.hasOwn(x, k)) !== undefined;

/** The value of the first member named k (at any depth), or undefined. */
export function keyValue(o, k) {
  const x = deep(o, (y) => !Array.isArray(y) && Object.hasOwn(y, k));
  return x === undefined ? undefined : x[k];
}

/** An evidence function: names `label` when pred(upstream body) holds. */
export const when = (label, pred) => (up) => (up && pred(up) ? label : null);

// A 1x1 PNG, for image features.
export const PNG_B64 =
  'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==';
