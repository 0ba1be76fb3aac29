#include "gw_json.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_codec.h"
#include "gw_error.h"

const char *gw_json_str(const json_t *obj, const char *key)
{
    if (!json_is_object(obj))
        return NULL;
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

int gw_json_int(const json_t *obj, const char *key, long long *out)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (!v || json_is_null(v))
        return GW_ENOTFOUND;
    if (!json_is_integer(v))
        return GW_EINVAL;
    *out = json_integer_value(v);
    return GW_OK;
}

int gw_json_bool(const json_t *obj, const char *key, int def, int *err)
{
    json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (err)
        *err = GW_OK;
    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        if (err)
            *err = GW_EINVAL;
        return def;
    }
    return json_is_true(v);
}

size_t gw_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* Reject overlong forms, surrogates and values past U+10FFFF. */
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

int gw_json_escape(struct gw_buf *b, const char *str, size_t n)
{
    const unsigned char *s = (const unsigned char *)str;
    int rc = gw_buf_append(b, "\"", 1);
    size_t run = 0; /* bytes copied verbatim, flushed in one append */
    for (size_t i = 0; i < n && !rc;) {
        unsigned char c = s[i];
        const char *esc = NULL;
        char ubuf[8];
        size_t adv = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c < 0x20) {
            snprintf(ubuf, sizeof(ubuf), "\\u%04x", c);
            esc = ubuf;
        } else if (c >= 0x80) {
            adv = gw_utf8_len(s + i, n - i);
            if (adv == 0) {
                esc = "\xEF\xBF\xBD";
                adv = 1;
            }
        }
        if (!esc) {
            run += adv;
            i += adv;
            continue;
        }
        if (run)
            rc = gw_buf_append(b, s + i - run, run);
        run = 0;
        if (!rc)
            rc = gw_buf_appends(b, esc);
        i += adv;
    }
    if (!rc && run)
        rc = gw_buf_append(b, s + n - run, run);
    if (!rc)
        rc = gw_buf_append(b, "\"", 1);
    return rc;
}

struct scan {
    const unsigned char *p, *end;
    /* Counting, for gw_json_count_values: every value is counted as it
     * starts, and the scan fails when the count reaches stop_at (0, as the
     * validators leave it, never stops it). top is the depth the scan began
     * with, so top - depth + 1 is the nesting a container opens at. */
    size_t values, stop_at;
    int top, deepest, too_deep;
};

static void skip_ws(struct scan *sc)
{
    while (sc->p < sc->end && (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
        sc->p++;
}

/* Whether none of 8 bytes ends or escapes a string or needs a check of its
 * own: each is printable ASCII (0x20-0x7f) and neither '"' nor '\\'. A
 * borrow from a byte rightly flagged may flag the bytes above it too: it
 * may say no to a word it could pass, never yes to one it must not. */
static int plain8(const unsigned char *p)
{
    const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
    uint64_t v;
    memcpy(&v, p, 8);
    uint64_t q = v ^ (ones * '"'), b = v ^ (ones * '\\');
    uint64_t hit = ((q - ones) & ~q) | ((b - ones) & ~b) | (v - ones * 0x20) | v;
    return (hit & highs) == 0;
}

static int scan_string(struct scan *sc)
{
    sc->p++; /* opening quote */
    while (sc->p < sc->end) {
        /* Plain text goes 8 bytes at a time; the rest a byte at a time. */
        while (sc->end - sc->p >= 8 && plain8(sc->p))
            sc->p += 8;
        if (sc->p >= sc->end)
            break;
        unsigned char c = *sc->p;
        if (c == '"') {
            sc->p++;
            return 1;
        }
        if (c < 0x20)
            return 0;
        if (c == '\\') {
            if (sc->end - sc->p < 2)
                return 0;
            unsigned char e = sc->p[1];
            if (e == 'u') {
                uint64_t cp;
                if (sc->end - sc->p < 6 || gw_hex_value((const char *)sc->p + 2, 4, &cp) != 0)
                    return 0;
                sc->p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0')
                return 0;
            sc->p += 2;
            continue;
        }
        if (c >= 0x80) {
            size_t l = gw_utf8_len(sc->p, (size_t)(sc->end - sc->p));
            if (!l)
                return 0;
            sc->p += l;
            continue;
        }
        sc->p++;
    }
    return 0;
}

static int scan_digits(struct scan *sc)
{
    const unsigned char *start = sc->p;
    while (sc->p < sc->end && *sc->p >= '0' && *sc->p <= '9')
        sc->p++;
    return sc->p > start;
}

static int scan_number(struct scan *sc)
{
    if (*sc->p == '-')
        sc->p++;
    if (sc->p < sc->end && *sc->p == '0')
        sc->p++;
    else if (!scan_digits(sc))
        return 0;
    if (sc->p < sc->end && *sc->p == '.') {
        sc->p++;
        if (!scan_digits(sc))
            return 0;
    }
    if (sc->p < sc->end && (*sc->p == 'e' || *sc->p == 'E')) {
        sc->p++;
        if (sc->p < sc->end && (*sc->p == '+' || *sc->p == '-'))
            sc->p++;
        if (!scan_digits(sc))
            return 0;
    }
    return 1;
}

static int scan_literal(struct scan *sc, const char *lit, size_t n)
{
    if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, lit, n) != 0)
        return 0;
    sc->p += n;
    return 1;
}

static int scan_value(struct scan *sc, int depth)
{
    skip_ws(sc);
    if (sc->p >= sc->end)
        return 0;
    if (++sc->values == sc->stop_at)
        return 0;
    switch (*sc->p) {
    case '"':
        return scan_string(sc);
    case 't':
        return scan_literal(sc, "true", 4);
    case 'f':
        return scan_literal(sc, "false", 5);
    case 'n':
        return scan_literal(sc, "null", 4);
    case '{':
    case '[': {
        unsigned char close = *sc->p == '{' ? '}' : ']';
        int object = close == '}';
        int level = sc->top - depth + 1;
        if (level > sc->deepest)
            sc->deepest = level;
        if (depth <= 0) {
            sc->too_deep = 1;
            return 0;
        }
        sc->p++;
        skip_ws(sc);
        if (sc->p < sc->end && *sc->p == close) {
            sc->p++;
            return 1;
        }
        for (;;) {
            if (object) {
                skip_ws(sc);
                if (sc->p >= sc->end || *sc->p != '"' || !scan_string(sc))
                    return 0;
                skip_ws(sc);
                if (sc->p >= sc->end || *sc->p != ':')
                    return 0;
                sc->p++;
            }
            if (!scan_value(sc, depth - 1))
                return 0;
            skip_ws(sc);
            if (sc->p >= sc->end)
                return 0;
            if (*sc->p == close) {
                sc->p++;
                return 1;
            }
            if (*sc->p != ',')
                return 0;
            sc->p++;
        }
    }
    default:
        return (*sc->p == '-' || (*sc->p >= '0' && *sc->p <= '9')) && scan_number(sc);
    }
}

int gw_json_valid(const char *s, size_t n, int max_depth)
{
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    if (!scan_value(&sc, max_depth))
        return 0;
    skip_ws(&sc);
    return sc.p == sc.end;
}

int gw_json_count_values(const char *s, size_t n, size_t max_values, int max_depth,
                         struct gw_json_count *c)
{
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    sc.stop_at = max_values + 1; /* SIZE_MAX wraps to 0: no bound */
    sc.top = max_depth;
    int ok = scan_value(&sc, max_depth);
    c->values = sc.values;
    c->depth = sc.deepest;
    c->stop = (size_t)(sc.p - (const unsigned char *)s);
    if ((sc.stop_at && sc.values >= sc.stop_at) || sc.too_deep)
        return GW_ELIMIT;
    if (!ok)
        return GW_EINVAL;
    skip_ws(&sc);
    c->stop = (size_t)(sc.p - (const unsigned char *)s);
    return sc.p == sc.end ? GW_OK : GW_EINVAL;
}

int gw_json_bound(const char *s, size_t n, const char *where, size_t *spent,
                  struct gw_json_count *out, char *msg, size_t size)
{
    size_t left = *spent < GW_JSON_MAX_VALUES ? GW_JSON_MAX_VALUES - *spent : 0;
    struct gw_json_count c;
    int rc = gw_json_count_values(s, n, left, GW_JSON_MAX_DEPTH, &c);
    if (out)
        *out = c;
    if (rc == GW_OK)
        *spent += c.values;
    else if (rc == GW_ELIMIT && size && c.depth > GW_JSON_MAX_DEPTH)
        snprintf(msg, size, "JSON nested deeper than %d levels in %s (the limit per request is %d)",
                 GW_JSON_MAX_DEPTH, where, GW_JSON_MAX_DEPTH);
    else if (rc == GW_ELIMIT && size)
        snprintf(msg, size, "more than %d JSON values in %s (the limit per request is %d)",
                 GW_JSON_MAX_VALUES, where, GW_JSON_MAX_VALUES);
    return rc;
}

int gw_json_quote_numbers(const char *s, size_t n, int max_depth, struct gw_buf *out)
{
    if (!gw_json_valid(s, n, max_depth))
        return GW_EINVAL;
    /* Valid JSON: outside strings, '-' or a digit can only start a number
     * (the literals hold neither). */
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    const unsigned char *run = sc.p; /* copied verbatim up to sc.p */
    int rc = GW_OK;
    while (rc == GW_OK && sc.p < sc.end) {
        unsigned char c = *sc.p;
        if (c == '"') {
            (void)scan_string(&sc);
            continue;
        }
        if (c != '-' && (c < '0' || c > '9')) {
            sc.p++;
            continue;
        }
        const unsigned char *num = sc.p;
        (void)scan_number(&sc);
        rc = gw_buf_append(out, run, (size_t)(num - run));
        if (rc == GW_OK)
            rc = gw_buf_append(out, "\"", 1);
        if (rc == GW_OK)
            rc = gw_buf_append(out, num, (size_t)(sc.p - num));
        if (rc == GW_OK)
            rc = gw_buf_append(out, "\"", 1);
        run = sc.p;
    }
    return rc == GW_OK ? gw_buf_append(out, run, (size_t)(sc.end - run)) : rc;
}

/* ------------------------------------------------------------- span lookups */

/* The lookups read text that passed gw_json_valid, so they skip values
 * without checking them again: a string to its closing quote, a container
 * to its matching bracket, a number or literal to the byte after it. Each
 * stays within sc->end whatever the text. */

/* The string at sc->p: after its closing quote (a quote is escaped when an
 * odd run of backslashes precedes it). 0 when the text ends first. */
static int skip_string(struct scan *sc)
{
    const unsigned char *open = sc->p++;
    for (;;) {
        const unsigned char *q = memchr(sc->p, '"', (size_t)(sc->end - sc->p));
        if (!q)
            return 0;
        size_t bs = 0;
        while (q - bs - 1 > open && q[-(ptrdiff_t)bs - 1] == '\\')
            bs++;
        sc->p = q + 1;
        if (bs % 2 == 0)
            return 1;
    }
}

/* One value; 0 when the text ends first, or a container nests past depth
 * levels (sc->too_deep), as scan_value would say. */
static int skip_value(struct scan *sc, int depth)
{
    skip_ws(sc);
    if (sc->p >= sc->end)
        return 0;
    unsigned char c = *sc->p;
    if (c == '"')
        return skip_string(sc);
    if (c != '{' && c != '[') {
        while (sc->p < sc->end && (c = *sc->p) != ',' && c != '}' && c != ']' && c != ' ' &&
               c != '\t' && c != '\n' && c != '\r')
            sc->p++;
        return 1;
    }
    int level = 0;
    while (sc->p < sc->end) {
        c = *sc->p;
        if (c == '"') {
            if (!skip_string(sc))
                return 0;
            continue;
        }
        if (c == '{' || c == '[') {
            if (++level > depth) {
                sc->too_deep = 1;
                return 0;
            }
        } else if ((c == '}' || c == ']') && --level == 0) {
            sc->p++;
            return 1;
        }
        sc->p++;
    }
    return 0;
}

/* The container at sc->p ('{' or '['): positions sc after the opening
 * bracket; 0 when sc is not at want. */
static int span_open(struct scan *sc, unsigned char want)
{
    skip_ws(sc);
    if (sc->p >= sc->end || *sc->p != want)
        return 0;
    sc->p++;
    skip_ws(sc);
    return 1;
}

/* How many of the keys asked for have their lengths measured once per call
 * rather than once per member read (every caller asks for fewer). */
enum { SPAN_KEYS_MEASURED = 8 };

/* gw_json_span_members, and with strict, gw_json_span_doc: the text is
 * checked as it is read (the closing brace, nothing after it), and a value
 * that does not scan is invalid (0) unless it nests too deep (-1). */
static int span_members(const char *s, size_t n, const char *const *keys, size_t nkeys,
                        struct gw_json_span *out, int strict)
{
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    int escaped = 0; /* a key spelled with escapes: it might have been one of keys */
    size_t klen[SPAN_KEYS_MEASURED]; /* the first keys' lengths, measured once */
    for (size_t i = 0; i < nkeys; i++) {
        out[i] = (struct gw_json_span){NULL, 0};
        if (i < SPAN_KEYS_MEASURED)
            klen[i] = strlen(keys[i]);
    }
    if (!span_open(&sc, '{'))
        return 0;
    if (sc.p < sc.end && *sc.p == '}') { /* {}: an object with no members */
        sc.p++;
        skip_ws(&sc);
        return !strict || sc.p == sc.end;
    }
    /* The whole object is read: a second key (or a disguised one) makes the
     * answer uncertain, as parsers disagree on which duplicate wins. */
    for (;;) {
        skip_ws(&sc);
        const unsigned char *k = sc.p;
        if (sc.p >= sc.end || *sc.p != '"' || !(strict ? scan_string(&sc) : skip_string(&sc)))
            return 0;
        size_t kl = (size_t)(sc.p - k) - 2;
        size_t match = nkeys;
        for (size_t i = 0; i < nkeys && match == nkeys; i++)
            if ((i < SPAN_KEYS_MEASURED ? klen[i] : strlen(keys[i])) == kl &&
                memcmp(k + 1, keys[i], kl) == 0)
                match = i;
        escaped |= memchr(k, '\\', (size_t)(sc.p - k)) != NULL;
        skip_ws(&sc);
        if (sc.p >= sc.end || *sc.p != ':')
            return 0;
        sc.p++;
        skip_ws(&sc);
        const unsigned char *v = sc.p;
        /* On text that passed gw_json_valid this fails only where a value
         * nests deeper than the 64 levels scanned here, which a caller that
         * validated with a larger max_depth can
         * pass: unsure, not absent, or a member present after it (even the
         * one found before it) would be reported missing. */
        if (!(strict ? scan_value(&sc, 64) : skip_value(&sc, 64)))
            return strict && !sc.too_deep ? 0 : -1;
        if (match < nkeys) {
            if (out[match].p)
                return -1;
            out[match] = (struct gw_json_span){(const char *)v, (size_t)(sc.p - v)};
        }
        skip_ws(&sc);
        if (sc.p >= sc.end || *sc.p != ',')
            break;
        sc.p++;
    }
    if (strict) {
        if (sc.p >= sc.end || *sc.p != '}')
            return 0;
        sc.p++;
        skip_ws(&sc);
        if (sc.p != sc.end)
            return 0;
    }
    return escaped ? -1 : 1;
}

int gw_json_span_members(const char *s, size_t n, const char *const *keys, size_t nkeys,
                         struct gw_json_span *out)
{
    return span_members(s, n, keys, nkeys, out, 0);
}

int gw_json_span_doc(const char *s, size_t n, const char *const *keys, size_t nkeys,
                     struct gw_json_span *out)
{
    return span_members(s, n, keys, nkeys, out, 1);
}

int gw_json_span_member(const char *s, size_t n, const char *key, const char **vp, size_t *vn)
{
    struct gw_json_span sp;
    int rc = gw_json_span_members(s, n, &key, 1, &sp);
    if (rc != 1 || !sp.p)
        return rc < 0 ? -1 : 0;
    *vp = sp.p;
    *vn = sp.n;
    return 1;
}

static int is_json_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

int gw_json_span_cut(const char *s, size_t n, const char *key, size_t *at, size_t *cut)
{
    const char *v;
    size_t vn;
    int rc = gw_json_span_member(s, n, key, &v, &vn);
    if (rc != 1)
        return rc;
    /* Found once, and no key of the object has an escape: what precedes
     * the value is whitespace, ':', whitespace and exactly "key". */
    size_t kl = strlen(key);
    const char *p = v;
    while (p > s && is_json_ws(p[-1]))
        p--;
    if (p == s || *--p != ':')
        return -1;
    while (p > s && is_json_ws(p[-1]))
        p--;
    if ((size_t)(p - s) < kl + 2 || p[-1] != '"' || *(p - kl - 2) != '"' ||
        memcmp(p - kl - 1, key, kl) != 0)
        return -1;
    const char *from = p - kl - 2, *to = v + vn;
    const char *before = from, *after = to, *end = s + n;
    while (before > s && is_json_ws(before[-1]))
        before--;
    while (after < end && is_json_ws(*after))
        after++;
    if (before > s && before[-1] == ',')
        from = before - 1; /* a member before it: its comma goes too */
    else if (after < end && *after == ',')
        to = after + 1; /* the first of several: the comma after it goes */
    *at = (size_t)(from - s);
    *cut = (size_t)(to - from);
    return 1;
}

int gw_json_span_index(const char *s, size_t n, size_t idx, const char **vp, size_t *vn)
{
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    if (!span_open(&sc, '[') || (sc.p < sc.end && *sc.p == ']'))
        return 0;
    for (size_t i = 0;; i++) {
        skip_ws(&sc);
        const unsigned char *v = sc.p;
        if (!skip_value(&sc, 64))
            return 0;
        if (i == idx) {
            *vp = (const char *)v;
            *vn = (size_t)(sc.p - v);
            return 1;
        }
        skip_ws(&sc);
        if (sc.p >= sc.end || *sc.p != ',')
            return 0;
        sc.p++;
    }
}

int gw_json_span_first(const char *s, size_t n, const char **vp, size_t *vn)
{
    struct scan sc = {.p = (const unsigned char *)s, .end = (const unsigned char *)s + n};
    if (!span_open(&sc, '[') || (sc.p < sc.end && *sc.p == ']'))
        return 0;
    const unsigned char *v = sc.p;
    if (!skip_value(&sc, 64))
        return 0;
    *vp = (const char *)v;
    *vn = (size_t)(sc.p - v);
    skip_ws(&sc);
    return sc.p < sc.end && *sc.p == ',' ? 2 : 1;
}

int gw_json_span_is_null(const char *vp, size_t vn)
{
    return vn == 4 && memcmp(vp, "null", 4) == 0;
}

static int put_utf8(struct gw_buf *out, unsigned cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return gw_buf_append(out, u, n);
}

int gw_json_span_string(const char *vp, size_t vn, struct gw_buf *out)
{
    if (vn < 2 || vp[0] != '"' || vp[vn - 1] != '"')
        return GW_EINVAL;
    const char *p = vp + 1, *end = vp + vn - 1;
    int rc = gw_buf_append(out, "", 0); /* data is never NULL after this */
    while (rc == GW_OK && p < end) {
        const char *bs = memchr(p, '\\', (size_t)(end - p));
        size_t run = bs ? (size_t)(bs - p) : (size_t)(end - p);
        if (run)
            rc = gw_buf_append(out, p, run);
        p += run;
        if (!bs || rc != GW_OK)
            break;
        /* Escapes were checked by gw_json_valid: \X or \uXXXX in bounds. */
        char e = p[1];
        p += 2;
        switch (e) {
        case 'b':
            rc = gw_buf_append(out, "\b", 1);
            break;
        case 'f':
            rc = gw_buf_append(out, "\f", 1);
            break;
        case 'n':
            rc = gw_buf_append(out, "\n", 1);
            break;
        case 'r':
            rc = gw_buf_append(out, "\r", 1);
            break;
        case 't':
            rc = gw_buf_append(out, "\t", 1);
            break;
        case 'u': {
            uint64_t cp = 0, lo = 0;
            if (gw_hex_value(p, 4, &cp) != 0)
                return GW_EINVAL;
            p += 4;
            if (cp >= 0xd800 && cp < 0xdc00 && end - p >= 6 && p[0] == '\\' && p[1] == 'u' &&
                gw_hex_value(p + 2, 4, &lo) == 0) {
                if (lo >= 0xdc00 && lo < 0xe000) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    p += 6;
                }
            }
            if ((cp >= 0xd800 && cp < 0xe000) || cp == 0)
                return GW_EINVAL; /* a lone surrogate or NUL: jansson refuses both */
            rc = put_utf8(out, (unsigned)cp);
            break;
        }
        default: /* " \ / */
            rc = gw_buf_append(out, &e, 1);
            break;
        }
    }
    return rc;
}

/* Appends "s" as a JSON string, or null for NULL. */
static int escape_or_null(struct gw_buf *b, const char *s)
{
    return s ? gw_json_escape(b, s, strlen(s)) : gw_buf_appends(b, "null");
}

char *gw_json_error_body(const char *message, const char *type, const char *param, const char *code,
                         size_t *len)
{
    /* Built with gw_json_escape rather than jansson: a message that quotes
     * client text cut at a byte limit may end in half a UTF-8 character,
     * which jansson would refuse and the escaper repairs. */
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = gw_buf_appends(&b, "{\"error\":{\"message\":");
    rc = rc ? rc : escape_or_null(&b, message ? message : "");
    rc = rc ? rc : gw_buf_appends(&b, ",\"type\":");
    rc = rc ? rc : escape_or_null(&b, type ? type : "api_error");
    rc = rc ? rc : gw_buf_appends(&b, ",\"param\":");
    rc = rc ? rc : escape_or_null(&b, param);
    rc = rc ? rc : gw_buf_appends(&b, ",\"code\":");
    rc = rc ? rc : escape_or_null(&b, code);
    rc = rc ? rc : gw_buf_appends(&b, "}}");
    if (rc) {
        gw_buf_free(&b);
        return NULL;
    }
    if (len)
        *len = b.len;
    return b.data;
}
