/*
 * libFuzzer target for the non-allocating JSON scans of common/gw_json.c
 * that the data plane trusts with upstream and client bytes: gw_json_valid
 * and the span lookups (gw_json_span_member, gw_json_span_index,
 * gw_json_span_is_null, gw_json_span_string, gw_json_span_doc,
 * gw_json_span_first). jansson is the oracle; the
 * input sits in a heap block of exactly its size, so AddressSanitizer sees
 * any read past it. Checked:
 *  - validity: on input without NUL bytes, gw_json_valid (64 levels) and
 *    jansson agree, but where they differ by design: jansson refuses what
 *    RFC 8259's grammar allows (\u0000, a lone surrogate escape, a number
 *    past a double or a 64-bit integer), and gw_json_valid refuses nesting
 *    past its max_depth, which jansson accepts up to 2048 levels;
 *  - for text gw_json_valid accepts (the only text the spans are given),
 *    recursively, each object member and array element as a plain walk of
 *    the text finds it: gw_json_span_member answers for every key as
 *    written, every key as jansson decoded it and a few common keys
 *    exactly what the header's rule says (1 for a key written once, with
 *    the walk's span; 0 for an absent one; -1 when some key is written
 *    with an escape or this one twice), and a key jansson has is never
 *    absent; gw_json_span_index finds every element at the walk's span,
 *    and nothing past the last; each span parses with jansson to a value
 *    equal (json_equal) to jansson's, and is null exactly when it is;
 *  - gw_json_span_cut answers as gw_json_span_member for every key, and what
 *    is left after its cut is valid, no longer has the key, and parses
 *    with jansson to jansson's object without that member;
 *  - gw_json_span_string on a string span decodes to jansson's string, byte
 *    for byte, and returns GW_EINVAL exactly when jansson refuses the span
 *    on its own (it refuses \u0000 and lone surrogates); on any other span
 *    it is GW_EINVAL. Strings inside text jansson refuses as a whole are
 *    reached through gw_json_span_index and a few common keys.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

#define MAX_DEPTH 64
/* The depth the relay paths validate a client's body with before they look
 * up its members (dataplane/drivers: relay_build). */
#define RELAY_DEPTH 512
/* Members and elements checked per container, and span calls per input:
 * each lookup reads the whole container, so this keeps an input's cost
 * near linear in its length. */
#define PER_CONTAINER 32
#define BUDGET 4000

static int budget;

/* Keys the data plane looks up, for text jansson does not build. */
static const char *const common_keys[] = {"model", "choices", "delta",   "content", "text",
                                          "usage", "error",   "message", "type",    ""};

static int depth_of(const json_t *j)
{
    size_t i;
    const char *k;
    json_t *v;
    int d = 0;
    if (json_is_array(j))
        json_array_foreach(j, i, v)
        {
            int c = depth_of(v);
            d = c > d ? c : d;
        }
    else if (json_is_object(j))
        json_object_foreach((json_t *)j, k, v)
        {
            int c = depth_of(v);
            d = c > d ? c : d;
        }
    else
        return 0;
    return d + 1;
}

/* The span as a document of its own, parsed by jansson (NULL when refused). */
static json_t *load_span(const char *vp, size_t vn, int flags, json_error_t *err)
{
    return json_loadb(vp, vn, JSON_DECODE_ANY | flags, err);
}

static void check_string(const char *vp, size_t vn)
{
    struct gw_buf out;
    gw_buf_init(&out, 0);
    int rc = gw_json_span_string(vp, vn, &out);
    json_t *j = load_span(vp, vn, 0, NULL);
    if (vn == 0 || vp[0] != '"') {
        CHECK(rc == GW_EINVAL);
    } else if (j) {
        CHECK(json_is_string(j));
        CHECK(rc == GW_OK);
        CHECK(out.len == json_string_length(j));
        CHECK(memcmp(out.data, json_string_value(j), out.len) == 0);
    } else {
        CHECK(rc == GW_EINVAL);
    }
    json_decref(j);
    gw_buf_free(&out);
}

static int is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/*
 * The oracle for the rule the lookups answer by: keys are compared as
 * written. A plain walk over valid text (no checks: gw_json_valid passed)
 * gives each member's key as written and its value's span, or each
 * element's span.
 */
static const char *skip_string(const char *p)
{
    for (p++; *p != '"'; p++)
        if (*p == '\\')
            p++;
    return p + 1;
}

static const char *skip_value(const char *p, const char *end)
{
    if (*p == '"')
        return skip_string(p);
    if (*p != '{' && *p != '[') {
        while (p < end && !is_ws(*p) && *p != ',' && *p != ']' && *p != '}')
            p++;
        return p;
    }
    int depth = 0;
    for (;;) {
        if (*p == '"') {
            p = skip_string(p);
            continue;
        }
        if (*p == '{' || *p == '[')
            depth++;
        else if ((*p == '}' || *p == ']') && --depth == 0)
            return p + 1;
        p++;
    }
}

struct walk {
    const char *p, *end; /* inside the brackets */
    int object;
};

static void walk_init(struct walk *w, const char *vp, size_t vn)
{
    w->p = vp + 1;
    w->end = vp + vn - 1;
    w->object = vp[0] == '{';
}

/* The next member (its key as written, without the quotes, in k and kn) or
 * element, its value's span in v and vn; 0 after the last. */
static int walk_next(struct walk *w, const char **k, size_t *kn, const char **v, size_t *vn)
{
    const char *p = w->p;
    while (p < w->end && (is_ws(*p) || *p == ','))
        p++;
    if (p >= w->end)
        return 0;
    if (w->object) {
        const char *q = skip_string(p);
        *k = p + 1;
        *kn = (size_t)(q - p) - 2;
        for (p = q; is_ws(*p) || *p == ':'; p++)
            ;
    }
    *v = p;
    w->p = skip_value(p, w->end);
    *vn = (size_t)(w->p - p);
    return 1;
}

/* What gw_json_span_member must answer for key in the object vp[0..vn): -1
 * when some key is written with an escape or key is written twice, else
 * 1 or 0 as key is written once or not at all; the span of its value. */
static int expected_member(const char *vp, size_t vn, const char *key, const char **ev, size_t *evn)
{
    struct walk w;
    const char *k, *v;
    size_t kn, n, klen = strlen(key);
    int escaped = 0, count = 0;
    walk_init(&w, vp, vn);
    while (walk_next(&w, &k, &kn, &v, &n)) {
        escaped |= memchr(k, '\\', kn) != NULL;
        if (kn == klen && memcmp(k, key, kn) == 0) {
            count++;
            *ev = v;
            *evn = n;
        }
    }
    return escaped || count > 1 ? -1 : count;
}

/* gw_json_span_member for key against the oracle; 1 when found, with the
 * span in cp and cn. */
static int check_member(const char *vp, size_t vn, const char *key, const char **cp, size_t *cn)
{
    const char *ev = NULL;
    size_t evn = 0;
    int want = expected_member(vp, vn, key, &ev, &evn);
    int r = gw_json_span_member(vp, vn, key, cp, cn);
    CHECK(r == want);
    if (r == 1)
        CHECK(*cp == ev && *cn == evn);
    return r;
}

/* gw_json_span_cut for key, found (1) by gw_json_span_member: the text
 * without the cut is the object without the member. */
static void check_cut(const char *vp, size_t vn, const char *key, const json_t *jv)
{
    size_t at = 0, cut = 0;
    CHECK(gw_json_span_cut(vp, vn, key, &at, &cut) == 1);
    CHECK(at + cut <= vn && cut > 0);
    char *rest = malloc(vn - cut + 1);
    CHECK(rest != NULL);
    memcpy(rest, vp, at);
    memcpy(rest + at, vp + at + cut, vn - at - cut);
    size_t rn = vn - cut;
    const char *cp;
    size_t cn;
    CHECK(gw_json_valid(rest, rn, MAX_DEPTH));
    CHECK(gw_json_span_member(rest, rn, key, &cp, &cn) == 0);
    if (jv) {
        json_t *want = json_deep_copy(jv);
        CHECK(want && json_object_del(want, key) == 0);
        json_t *got = json_loadb(rest, rn, 0, NULL);
        CHECK(got && json_equal(got, want));
        json_decref(got);
        json_decref(want);
    }
    free(rest);
}

/* Checks the span vp[0..vn) of valid text against jv, jansson's value for
 * it (NULL when jansson refused the text it belongs to, or it is not
 * known which of two members it is). */
static void check_span(const char *vp, size_t vn, const json_t *jv, int level)
{
    const char *cp, *k, *v;
    size_t cn, kn, n;
    struct walk w;
    CHECK(level <= MAX_DEPTH);
    if (--budget < 0)
        return;
    CHECK(gw_json_valid(vp, vn, MAX_DEPTH));
    if (jv) {
        json_t *self = load_span(vp, vn, 0, NULL);
        CHECK(self != NULL && json_equal(self, jv));
        json_decref(self);
        CHECK(gw_json_span_is_null(vp, vn) == json_is_null(jv));
    }
    check_string(vp, vn);

    int object = vp[0] == '{', array = vp[0] == '[';
    if (!object) {
        CHECK(gw_json_span_member(vp, vn, "model", &cp, &cn) == 0);
        CHECK(gw_json_span_member(vp, vn, "", &cp, &cn) == 0);
    }
    if (!array)
        CHECK(gw_json_span_index(vp, vn, 0, &cp, &cn) == 0);

    if (object) {
        CHECK(!jv || json_is_object(jv));
        /* Each key as written (a key with an escape is looked up as
         * written too: the answer is -1 all the same). */
        walk_init(&w, vp, vn);
        for (size_t i = 0; i < PER_CONTAINER && budget > 0 && walk_next(&w, &k, &kn, &v, &n);
             i++, budget--) {
            char *key = malloc(kn + 1);
            CHECK(key != NULL);
            memcpy(key, k, kn);
            key[kn] = '\0';
            int r = check_member(vp, vn, key, &cp, &cn);
            size_t at, cut;
            if (r == 1)
                check_cut(vp, vn, key, jv);
            else
                CHECK(gw_json_span_cut(vp, vn, key, &at, &cut) == r);
            const json_t *child = NULL;
            if (r == 1 && jv) {
                /* Written once and without escapes: jansson's key is the
                 * same, and its value this one. */
                child = json_object_get(jv, key);
                CHECK(child != NULL);
            }
            free(key);
            check_span(v, n, child, level + 1);
        }
        /* Each key as jansson decoded it: never absent. */
        size_t seen = 0;
        json_t *jval;
        json_object_foreach((json_t *)jv, k, jval)
        {
            if (seen++ == PER_CONTAINER || --budget < 0)
                break;
            CHECK(check_member(vp, vn, k, &cp, &cn) != 0);
        }
        for (size_t i = 0; i < sizeof(common_keys) / sizeof(*common_keys) && budget-- > 0; i++) {
            int r = check_member(vp, vn, common_keys[i], &cp, &cn);
            if (jv && r != -1)
                CHECK(r == (json_object_get(jv, common_keys[i]) != NULL));
        }
    }
    if (array) {
        CHECK(!jv || json_is_array(jv));
        size_t i = 0;
        int more = 1;
        walk_init(&w, vp, vn);
        for (; i < PER_CONTAINER && budget > 0; i++, budget--) {
            more = walk_next(&w, &k, &kn, &v, &n);
            int r = gw_json_span_index(vp, vn, i, &cp, &cn);
            CHECK(r == more);
            if (!more)
                break;
            CHECK(cp == v && cn == n);
            check_span(v, n, jv ? json_array_get(jv, i) : NULL, level + 1);
        }
        if (!more && jv)
            CHECK(i == json_array_size(jv));
    }
}

/* Text valid only past 64 levels, as the relay paths validate it: the span
 * lookups scan a member's value only 64 levels deep (gw_json.h), so a
 * member lookup may be unsure (-1) where the rule says 1 or 0, but never
 * wrong. (An element nested past 64 levels below its array reads as
 * absent: gw_json_span_index has no "unsure"; not checked here.) */
static void check_deep(const char *s, size_t n)
{
    const char *k, *v, *cp, *ev = NULL;
    size_t kn, vn, cn, evn = 0;
    struct walk w;
    while (n && is_ws(*s)) {
        s++;
        n--;
    }
    while (n && is_ws(s[n - 1]))
        n--;
    if (s[0] != '{')
        return;
    walk_init(&w, s, n);
    for (size_t i = 0; i < PER_CONTAINER && walk_next(&w, &k, &kn, &v, &vn); i++) {
        char *key = malloc(kn + 1);
        CHECK(key != NULL);
        memcpy(key, k, kn);
        key[kn] = '\0';
        int want = expected_member(s, n, key, &ev, &evn);
        int r = gw_json_span_member(s, n, key, &cp, &cn);
        if (r != want && r != -1)
            fprintf(stderr,
                    "fuzz_json_span: member \"%s\" of text valid at %d levels: %d, not %d\n", key,
                    RELAY_DEPTH, r, want);
        CHECK(r == want || r == -1);
        if (r == 1)
            CHECK(cp == ev && cn == evn);
        free(key);
    }
    for (size_t i = 0; i < sizeof(common_keys) / sizeof(*common_keys); i++) {
        int want = expected_member(s, n, common_keys[i], &ev, &evn);
        int r = gw_json_span_member(s, n, common_keys[i], &cp, &cn);
        CHECK(r == want || r == -1);
    }
}

/* Where gw_json_valid accepts and jansson refuses: what RFC 8259 allows and
 * jansson does not (see the top of the file). */
static int jansson_stricter(const json_error_t *err)
{
    switch (json_error_code(err)) {
    case json_error_null_character:
    case json_error_null_byte_in_key:
    case json_error_numeric_overflow:
        return 1;
    case json_error_invalid_syntax:
        return strncmp(err->text, "invalid Unicode '\\u", 19) == 0;
    default:
        return 0;
    }
}

/* gw_json_span_doc reads an object's members and validates it in one
 * pass: on valid text (64 levels) it answers as gw_json_span_members, with
 * the same spans; it says 1 only for one valid object, 0 for anything not
 * valid JSON (a value one level deeper than gw_json_valid's 64 may pass).
 * gw_json_span_first agrees with gw_json_span_index's first two. */
static void check_doc(const char *buf, size_t size, int valid)
{
    static const char *const keys[] = {"model", "choices", "usage", "error", "id"};
    struct gw_json_span d[5], m[5];
    int rd = gw_json_span_doc(buf, size, keys, 5, d);
    size_t from = 0;
    while (from < size && is_ws(buf[from]))
        from++;
    int object = from < size && buf[from] == '{';
    if (rd == 1)
        CHECK(object && gw_json_valid(buf, size, MAX_DEPTH + 1));
    if (rd == 0 && valid)
        CHECK(!object);
    if (valid && object) {
        int rm = gw_json_span_members(buf, size, keys, 5, m);
        CHECK(rd == rm);
        for (size_t i = 0; rd == 1 && rm == 1 && i < 5; i++)
            CHECK(d[i].p == m[i].p && d[i].n == m[i].n);
    }
    if (valid && from < size && buf[from] == '[') {
        const char *f = NULL, *x, *y;
        size_t fn = 0, xn, yn;
        int rf = gw_json_span_first(buf, size, &f, &fn);
        int has0 = gw_json_span_index(buf, size, 0, &x, &xn);
        int has1 = has0 && gw_json_span_index(buf, size, 1, &y, &yn);
        CHECK(rf == (has1 ? 2 : has0 ? 1 : 0));
        if (rf)
            CHECK(f == x && fn == xn);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);

    int valid = gw_json_valid(buf, size, MAX_DEPTH);
    json_error_t err;
    json_t *any = json_loadb(buf, size, JSON_DECODE_ANY, &err);
    if (!memchr(buf, '\0', size)) {
        if (valid && !any) {
            if (!jansson_stricter(&err))
                fprintf(stderr, "fuzz_json_span: jansson refuses valid text: %s (code %d)\n",
                        err.text, (int)json_error_code(&err));
            CHECK(jansson_stricter(&err));
        }
        if (!valid && any)
            CHECK(depth_of(any) > MAX_DEPTH);
    }
    check_doc(buf, size, valid);
    if (valid) {
        /* jansson's document, duplicates and all (the last one wins): a
         * member lookup that answers 1 found the key written once and
         * no key with an escape, so jansson's value is the one to match.
         * A span starts and ends with its value: the whitespace around the
         * document is not part of it. */
        size_t from = 0, to = size;
        while (from < to && is_ws(buf[from]))
            from++;
        while (to > from && is_ws(buf[to - 1]))
            to--;
        budget = BUDGET;
        check_span(buf + from, to - from, any, 0);
    } else if (gw_json_valid(buf, size, RELAY_DEPTH)) {
        check_deep(buf, size);
    }
    json_decref(any);
    free(buf);
    return 0;
}
