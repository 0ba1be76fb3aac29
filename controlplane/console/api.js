// The admin API from the browser: the bearer token (sessionStorage only),
// JSON parsed with exact big integers, ETag / If-Match, and errors mapped
// to what an operator should read.

const TOKEN_KEY = 'llmgw.console.token';

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}
export function setToken(t) {
  sessionStorage.setItem(TOKEN_KEY, t);
}
export function clearToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** JSON.parse keeping integers exact: every integer that is not a safe
 * Number, and every *picodollars* field, becomes a BigInt (the reviver's
 * third argument carries the number's source text). */
export function parseExact(text) {
  return JSON.parse(text, (key, value, context) => {
    if (typeof value !== 'number' || !context || typeof context.source !== 'string') return value;
    if (!/^-?[0-9]+$/.test(context.source)) return value;
    if (!Number.isSafeInteger(value) || /picodollars/.test(key)) return BigInt(context.source);
    return value;
  });
}

/** JSON.stringify writing BigInts as bare integers. */
export function stringifyExact(obj, indent) {
  const mark = `\u2063big${Math.random().toString(36).slice(2)}:`;
  const text = JSON.stringify(obj, (k, v) => (typeof v === 'bigint' ? `${mark}${v}` : v), indent);
  return text.replace(new RegExp(`"${mark}(-?[0-9]+)"`, 'g'), '$1');
}

let scope = null;
export function setScope(s) {
  scope = s;
}

let unauthorizedHandler = () => {};
let forbiddenHandler = () => {};
/** fn(err) runs on every 403: the console reads its scope again. */
export function onForbidden(fn) {
  forbiddenHandler = fn;
}
/** fn(err) runs on every 401: the console goes back to its sign-in screen. */
export function onUnauthorized(fn) {
  unauthorizedHandler = fn;
}

export class ApiError extends Error {
  constructor(status, body, headers) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || null;
    this.param = e.param || null;
    this.apiMessage = e.message || null;
    this.currentVersion = e.current_version ?? null;
    this.retryAfter = headers ? headers.get('Retry-After') : null;
  }

  /** What the operator reads. */
  get display() {
    switch (this.status) {
      case 401:
        return `Signed out: ${this.apiMessage || 'the admin token is not valid'}.`;
      case 403:
        return `Not allowed with this token's scope: ${this.apiMessage || `scope ${scope || 'unknown'} may not do this`}.`;
      case 412:
        return `Changed by someone else since you loaded it${this.currentVersion ? ` (it is at version ${this.currentVersion} now)` : ''}: reload to see the current version, then redo your change.`;
      case 429:
        return `Too many failed authentications from this address: retry after ${this.retryAfter || 'a minute'} s.`;
      default:
        return this.apiMessage || `The control plane answered HTTP ${this.status}.`;
    }
  }

  get isConflict() {
    return this.status === 412 || this.code === 'version_conflict';
  }
}

/** A network failure (no answer at all). */
export class NetworkError extends Error {
  get display() {
    return `The control plane did not answer: ${this.message}`;
  }
}

/**
 * One admin API call. opts: query (object of strings, empty values
 * dropped), body (JSON), etag (sent as If-Match). Resolves with
 * {status, json, etag}; rejects with ApiError (401 also signs out).
 */
export async function call(method, path, opts = {}) {
  const headers = { Accept: 'application/json' };
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  if (opts.etag) headers['If-Match'] = opts.etag;
  let body;
  if (opts.body !== undefined) {
    headers['Content-Type'] = 'application/json';
    body = stringifyExact(opts.body);
  }
  let url = path;
  if (opts.query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(opts.query)) {
      if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
    }
    const s = q.toString();
    if (s) url += `?${s}`;
  }
  let res;
  try {
    res = await fetch(url, {
      method, headers, body, credentials: 'omit', cache: 'no-store', redirect: 'error', referrerPolicy: 'no-referrer',
    });
  } catch (e) {
    throw new NetworkError(e.message);
  }
  const text = await res.text();
  let json = null;
  if (text) {
    try {
      json = parseExact(text);
    } catch {
      json = null;
    }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, json, res.headers);
    if (res.status === 401) unauthorizedHandler(err);
    if (res.status === 403) forbiddenHandler(err);
    throw err;
  }
  return { status: res.status, json, etag: res.headers.get('ETag') };
}

export const get = (path, query) => call('GET', path, { query });

/** The list under {data: [...]} of a collection. */
export async function list(path, query) {
  const r = await get(path, query);
  return (r.json && r.json.data) || [];
}

/** One item and its ETag. */
export async function one(path) {
  const r = await get(path);
  return { item: r.json, etag: r.etag };
}

export const enc = encodeURIComponent;
