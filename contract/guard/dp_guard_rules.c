/*
 * dp_guard_rules: the prompt-injection rules, compiled, and the scan of a
 * text against them (dp_guard_rules.h says what is matched and how). The
 * text is matched in its normalized forms (dp_guard_fold.c).
 */
#include "dp_guard_rules.h"

#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_guard_int.h"
#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"

/* common/guard_rules.json, written into a C array at build time
 * (dataplane/CMakeLists.txt, controlplane/embed.cmake). */
extern const char dp_guard_rules_json[];
extern const size_t dp_guard_rules_json_len;

#define MIN_BLOB 24       /* base64 symbols in a run worth decoding */
#define MAX_DECODED 65536 /* bytes decoded from one text's blobs, in all */
#define MAX_EXPANDED 4096 /* an expression's size once {m,n}, *, + and ? are expanded */
#define MAX_NESTING 64    /* parentheses in an expression */
#define STACK_NORM 4096   /* a text this short is normalized on the stack */
#define RE_FLAGS (REG_EXTENDED | REG_NOSUB | REG_NEWLINE) /* REG_ICASE: re_flags() */
#define COPIES 8 /* copies of the combined expression, for threads in parallel */

struct rule {
    char *id;
    enum dp_guard_severity severity;
    int is_regex;
    int flags;      /* an expression's regcomp flags */
    int combinable; /* 1: part of the combined expression (below) */
    char *needle;   /* a phrase's normalized form, " word word " */
    size_t needle_len;
    regex_t re; /* an expression's, compiled when is_regex */
};

/*
 * Most texts match no rule, so a scan first runs one expression that is
 * every rule's alternated, "(rule 1)|(rule 2)|...", which glibc's matcher
 * runs in about the time of one rule; only when it matches are the rules
 * run one by one, to name the match (rules that cannot be put in it, see
 * expression_shape, always run on their own). glibc serializes the threads that run
 * one compiled expression (its matcher state has a lock), so the combined
 * one has COPIES copies, each thread using one (the first compiled with
 * the set, the others when a thread first needs them, published with a
 * compare-and-swap): the one part of a set that changes after it is made.
 */
struct dp_guard_rules {
    size_t n;
    struct rule *rules; /* in the array's order */
    size_t *order;      /* indexes by severity, highest first, else in the array's order */
    char *any_src;      /* the combined expression; NULL: none (every rule runs) */
    int any_flags;
    _Atomic(regex_t *) any[COPIES];
};

const char *dp_guard_severity_name(enum dp_guard_severity s)
{
    return s == DP_GUARD_HIGH ? "high" : s == DP_GUARD_MEDIUM ? "medium" : "low";
}

int dp_guard_severity_parse(const char *s)
{
    if (!s)
        return -1;
    if (!strcmp(s, "low"))
        return DP_GUARD_LOW;
    if (!strcmp(s, "medium"))
        return DP_GUARD_MEDIUM;
    if (!strcmp(s, "high"))
        return DP_GUARD_HIGH;
    return -1;
}

/* ---- compiling ---------------------------------------------------------- */

#define SHAPE_UNMATCHED 1 /* a ')' closes nothing */
#define SHAPE_RUNAWAY 2   /* an unbounded repetition of something not literal */

/*
 * What regcomp and glibc's matcher will make of an expression, read ahead
 * of them (malformed expressions are regcomp's to refuse):
 *  - its size once the repetitions are expanded (roughly: a bounded one
 *    copies its operand), so that "((a{0,100}){0,100}){0,100}" is refused
 *    before regcomp builds a million nodes and every scan walks them: -1
 *    past MAX_EXPANDED or MAX_NESTING;
 *  - SHAPE_UNMATCHED: a ')' that closes nothing, which glibc reads as
 *    itself, so the expression cannot be put in parentheses (it stays out
 *    of the combined one; it can never match a normalized text anyway);
 *  - SHAPE_RUNAWAY: an unbounded repetition (*, +, {m,}) of an operand
 *    holding anything but literal characters (".*", "[a-z]+", "\w+",
 *    "( [a-z]+)*"). glibc tries an unanchored expression from every place
 *    it could start, each try running as far as it can, so such an
 *    expression takes time quadratic in a hostile text (" ignore .*
 *    instructions " over 64 KiB of " ignore": 2.3 s). Such a rule is run on
 *    its own as "^.*(rule)", which glibc matches in one pass (6 ms there),
 *    though about four times slower on ordinary text than the rule itself.
 * Returns the SHAPE_ flags, or -1.
 */
static int expression_shape(const char *p, size_t n)
{
    size_t cur[MAX_NESTING + 1], alt[MAX_NESTING + 1], depth = 0, last = 0;
    int wide[MAX_NESTING + 1], last_wide = 0, shape = 0;
    cur[0] = alt[0] = 0;
    wide[0] = 0;
    for (size_t i = 0; i < n; i++) {
        size_t times = 0;
        int unbounded = 0;
        switch (p[i]) {
        case '(':
            if (depth == MAX_NESTING)
                return -1;
            depth++;
            cur[depth] = alt[depth] = 0;
            wide[depth] = 0;
            last = 0, last_wide = 0;
            continue;
        case ')':
            if (depth == 0) {
                last = 1, last_wide = 0;
                shape |= SHAPE_UNMATCHED;
                break;
            }
            last = cur[depth] + alt[depth] + 1;
            last_wide = wide[depth];
            depth--;
            cur[depth] += last;
            wide[depth] |= last_wide;
            goto check;
        case '|':
            alt[depth] += cur[depth];
            cur[depth] = 0;
            last = 0, last_wide = 0;
            continue;
        case '[':
            /* A bracket expression is one node: skip to its ']' (a ']'
             * first, after an optional '^', is a member; so are the
             * brackets of [:class:], [=x=] and [.x.]). */
            i++;
            if (i < n && p[i] == '^')
                i++;
            if (i < n && p[i] == ']')
                i++;
            while (i < n && p[i] != ']') {
                if (p[i] == '[' && i + 1 < n && strchr(":=.", p[i + 1]) && p[i + 1]) {
                    char close = p[i + 1];
                    i += 2;
                    while (i + 1 < n && !(p[i] == close && p[i + 1] == ']'))
                        i++;
                    i++;
                }
                i++;
            }
            last = 1, last_wide = 1;
            break;
        case '.':
            last = 1, last_wide = 1;
            break;
        case '\\':
            i++;
            last = 1;
            last_wide = i < n && strchr("wWsS", p[i]) && p[i];
            break;
        case '*':
        case '+':
            unbounded = 1;
            times = 2;
            break;
        case '?':
            times = 2;
            break;
        case '{': {
            size_t j = i + 1, lo = 0, hi = 0;
            int digits = 0, comma = 0, hidigits = 0;
            while (j < n && p[j] >= '0' && p[j] <= '9' && lo <= 100000)
                lo = lo * 10 + (size_t)(p[j++] - '0'), digits++;
            if (j < n && p[j] == ',') {
                comma = 1, j++;
                while (j < n && p[j] >= '0' && p[j] <= '9' && hi <= 100000)
                    hi = hi * 10 + (size_t)(p[j++] - '0'), hidigits++;
            }
            if (j < n && p[j] == '}' && (digits || hidigits)) {
                times = comma ? (hidigits ? hi : lo + 1) : lo;
                if (times < 1)
                    times = 1;
                unbounded = comma && !hidigits;
                i = j;
                break;
            }
            last = 1, last_wide = 0; /* a '{' that opens no bound is itself */
            break;
        }
        default:
            last = 1, last_wide = 0;
            break;
        }
        if (unbounded && last_wide)
            shape |= SHAPE_RUNAWAY;
        if (times) {
            /* The operand (last) is already counted once; times - 1 more. */
            if (last && times - 1 > (MAX_EXPANDED + 1) / last)
                return -1;
            cur[depth] += last * (times - 1);
            last *= times;
        } else {
            cur[depth] += last;
            wide[depth] |= last_wide;
        }
    check:
        if (cur[depth] + alt[depth] > MAX_EXPANDED || last > MAX_EXPANDED)
            return -1;
    }
    return shape;
}

/* REG_ICASE only where it could change something: the normalized text has
 * no capitals, so an expression of small letters, digits, spaces and
 * operators matches it the same without, and glibc's matcher runs about
 * twice as fast. glibc folds to capitals under REG_ICASE, text and
 * expression alike, which changes more than capitals: a bracket's range
 * ("[r-^]" compiles only with it, "[_-z]" only without) and an escaped
 * letter ("\t" matches a 't' only without). So it stays for an expression
 * with a capital, a bracket or a backslash before a letter. */
static int re_flags(const char *p)
{
    for (const char *c = p; *c; c++)
        if ((*c >= 'A' && *c <= 'Z') || *c == '[' ||
            (*c == '\\' && ((c[1] >= 'a' && c[1] <= 'z') || (c[1] >= 'A' && c[1] <= 'Z'))))
            return RE_FLAGS | REG_ICASE;
    return RE_FLAGS;
}

/* The check of one rule's pattern, and the compiled rule: 0, or -1 with a
 * message (no field name) in err. */
static int compile_pattern(struct rule *u, int is_regex, const char *pattern, char *err,
                           size_t errlen)
{
    size_t n = strlen(pattern);
    if (n == 0 || n > DP_GUARD_MAX_PATTERN) {
        snprintf(err, errlen, "must be 1 to %d bytes", DP_GUARD_MAX_PATTERN);
        return -1;
    }
    if (!is_regex) {
        char *d = malloc(n + 3);
        if (!d) {
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        size_t len = dpg_normalize_into(pattern, n, d);
        if (len < 3) {
            free(d);
            snprintf(err, errlen, "a phrase needs a letter or a digit");
            return -1;
        }
        if (u) {
            u->needle = d, u->needle_len = len;
            u->combinable = 1;
        } else {
            free(d);
        }
        return 0;
    }
    for (size_t i = 0; i + 1 < n; i++)
        if (pattern[i] == '\\') {
            if (pattern[i + 1] >= '1' && pattern[i + 1] <= '9') {
                snprintf(err, errlen, "may not hold a back-reference (\\%c)", pattern[i + 1]);
                return -1;
            }
            i++; /* an escaped character, "\\\\" too */
        }
    int shape = expression_shape(pattern, n);
    if (shape < 0) {
        snprintf(err, errlen, "too large once its repetitions are expanded (at most %d nodes)",
                 MAX_EXPANDED);
        return -1;
    }
    /* Whether it compiles is regcomp's word with the flags the admin API
     * checks it with; what runs is compiled below, with the scan's flags. */
    regex_t re;
    int rc = regcomp(&re, pattern, REG_EXTENDED | REG_ICASE | REG_NOSUB);
    if (rc != 0) {
        char msg[128];
        regerror(rc, &re, msg, sizeof(msg));
        snprintf(err, errlen, "does not compile: %s", msg);
        return -1;
    }
    regfree(&re);
    if (!u)
        return 0;
    int flags = re_flags(pattern);
    rc = -1;
    if (shape == SHAPE_RUNAWAY) {
        /* Matched in one pass (expression_shape); as it is if that fails. */
        char *once = malloc(n + 8);
        if (once) {
            snprintf(once, n + 8, "^.*(%s)", pattern);
            rc = regcomp(&re, once, flags);
            free(once);
        }
    }
    if (rc != 0)
        rc = regcomp(&re, pattern, flags);
    if (rc != 0 && !(flags & REG_ICASE)) /* not expected: as it was checked */
        rc = regcomp(&re, pattern, flags |= REG_ICASE);
    if (rc != 0) {
        char msg[128];
        regerror(rc, &re, msg, sizeof(msg));
        snprintf(err, errlen, "does not compile: %s", msg);
        return -1;
    }
    u->re = re;
    u->flags = flags;
    u->combinable = shape == 0;
    return 0;
}

int dp_guard_pattern_check(const char *kind, const char *pattern, char *err, size_t errlen)
{
    int is_regex = kind && !strcmp(kind, "regex");
    if (!is_regex && !(kind && !strcmp(kind, "phrase"))) {
        snprintf(err, errlen, "kind must be \"phrase\" or \"regex\"");
        return -1;
    }
    if (!pattern) {
        snprintf(err, errlen, "required, a string");
        return -1;
    }
    return compile_pattern(NULL, is_regex, pattern, err, errlen);
}

int dp_guard_rule_id_valid(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > 63)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || (i && (c == '_' || c == '-'));
        if (!ok)
            return 0;
    }
    return 1;
}

static void rule_free(struct rule *u)
{
    free(u->id);
    free(u->needle);
    if (u->is_regex)
        regfree(&u->re);
}

void dp_guard_rules_free(struct dp_guard_rules *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        rule_free(&r->rules[i]);
    free(r->rules);
    free(r->order);
    for (size_t k = 0; k < COPIES; k++) {
        regex_t *re = atomic_load(&r->any[k]);
        if (re) {
            regfree(re);
            free(re);
        }
    }
    free(r->any_src);
    free(r);
}

size_t dp_guard_rules_count(const struct dp_guard_rules *r)
{
    return r ? r->n : 0;
}

/* One element of the array into *u (zeroed): 0, or -1 with the message. */
static int compile_rule(const json_t *o, size_t i, const struct dp_guard_rules *r, struct rule *u,
                        char *err, size_t errlen)
{
    if (!json_is_object(o)) {
        snprintf(err, errlen, "guard_rules[%zu]: must be an object", i);
        return -1;
    }
    const json_t *v = json_object_get(o, "id");
    if (!json_is_string(v) || !dp_guard_rule_id_valid(json_string_value(v))) {
        snprintf(err, errlen, "guard_rules[%zu].id: required, [a-z0-9][a-z0-9_-]{0,62}", i);
        return -1;
    }
    const char *id = json_string_value(v);
    for (size_t k = 0; k < i; k++)
        if (!strcmp(r->rules[k].id, id)) {
            snprintf(err, errlen, "guard_rules[%zu].id: '%s' is also guard_rules[%zu]", i, id, k);
            return -1;
        }
    v = json_object_get(o, "severity");
    int sev = dp_guard_severity_parse(json_is_string(v) ? json_string_value(v) : NULL);
    if (sev < 0) {
        snprintf(err, errlen,
                 "guard_rules[%zu].severity: required, low, medium or high (rule '%s')", i, id);
        return -1;
    }
    v = json_object_get(o, "description");
    if (v && !json_is_string(v) && !json_is_null(v)) {
        snprintf(err, errlen, "guard_rules[%zu].description: must be a string (rule '%s')", i, id);
        return -1;
    }
    v = json_object_get(o, "kind");
    const char *kind = json_is_string(v) ? json_string_value(v) : "";
    int is_regex = !strcmp(kind, "regex");
    if (!is_regex && strcmp(kind, "phrase")) {
        snprintf(err, errlen, "guard_rules[%zu].kind: required, phrase or regex (rule '%s')", i,
                 id);
        return -1;
    }
    v = json_object_get(o, "pattern");
    if (!json_is_string(v)) {
        snprintf(err, errlen, "guard_rules[%zu].pattern: required, a string (rule '%s')", i, id);
        return -1;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        snprintf(err, errlen, "guard_rules[%zu].pattern: may not hold a NUL (rule '%s')", i, id);
        return -1;
    }
    char why[200];
    if (compile_pattern(u, is_regex, json_string_value(v), why, sizeof(why)) < 0) {
        snprintf(err, errlen, "guard_rules[%zu].pattern: %s (rule '%s')", i, why, id);
        return -1;
    }
    u->is_regex = is_regex;
    u->severity = (enum dp_guard_severity)sev;
    if (!(u->id = strdup(id))) {
        u->is_regex ? regfree(&u->re) : free(u->needle);
        u->needle = NULL, u->is_regex = 0;
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    return 0;
}

/* The combined expression of r's rules (arr's, compiled): its source and
 * first copy. 0, also when it does not compile (then every rule runs on
 * its own), or -1 when out of memory. */
static int combine(struct dp_guard_rules *r, const json_t *arr)
{
    struct gw_buf src;
    gw_buf_init(&src, 0);
    int flags = RE_FLAGS;
    for (size_t i = 0; i < r->n; i++) {
        const struct rule *u = &r->rules[i];
        if (!u->combinable)
            continue;
        const char *p = u->is_regex
                            ? json_string_value(json_object_get(json_array_get(arr, i), "pattern"))
                            : u->needle;
        if (gw_buf_appends(&src, src.len ? "|(" : "(") || gw_buf_appends(&src, p) ||
            gw_buf_appends(&src, ")")) {
            gw_buf_free(&src);
            return -1;
        }
        flags |= u->is_regex ? u->flags : 0;
    }
    if (!src.len)
        return 0;
    regex_t *re = malloc(sizeof(*re));
    if (!re) {
        gw_buf_free(&src);
        return -1;
    }
    if (regcomp(re, src.data, flags) != 0) {
        free(re);
        gw_buf_free(&src);
        return 0;
    }
    r->any_src = src.data;
    r->any_flags = flags;
    atomic_store(&r->any[0], re);
    return 0;
}

struct dp_guard_rules *dp_guard_rules_compile(const json_t *arr, char *err, size_t errlen)
{
    if (!json_is_array(arr)) {
        snprintf(err, errlen, "guard_rules: must be an array");
        return NULL;
    }
    size_t n = json_array_size(arr);
    struct dp_guard_rules *r = calloc(1, sizeof(*r));
    if (!r || !(r->rules = calloc(n ? n : 1, sizeof(*r->rules))) ||
        !(r->order = calloc(n ? n : 1, sizeof(*r->order)))) {
        dp_guard_rules_free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        if (compile_rule(json_array_get(arr, i), i, r, &r->rules[i], err, errlen) < 0) {
            dp_guard_rules_free(r);
            return NULL;
        }
        r->n++;
    }
    size_t k = 0;
    for (int s = DP_GUARD_HIGH; s >= DP_GUARD_LOW; s--)
        for (size_t i = 0; i < n; i++)
            if ((int)r->rules[i].severity == s)
                r->order[k++] = i;
    if (combine(r, arr) < 0) {
        dp_guard_rules_free(r);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return r;
}

static struct dp_guard_rules *defaults;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void defaults_init(void)
{
    json_t *doc =
        json_loadb(dp_guard_rules_json, dp_guard_rules_json_len, JSON_REJECT_DUPLICATES, NULL);
    char err[256];
    defaults = dp_guard_rules_compile(json_object_get(doc, "rules"), err, sizeof(err));
    json_decref(doc);
}

const struct dp_guard_rules *dp_guard_rules_default(void)
{
    pthread_once(&defaults_once, defaults_init);
    return defaults;
}

const char *dp_guard_rules_default_json(size_t *len)
{
    if (len)
        *len = dp_guard_rules_json_len;
    return dp_guard_rules_json;
}

/* ---- scanning ----------------------------------------------------------- */

/* Whether c is a base64 symbol (either alphabet), as one bit of a map: the
 * test the run finder makes on every byte of the text. */
static inline int is_b64(unsigned char c)
{
    static const uint64_t map[2] = {1ull << '+' | 1ull << '-' | 1ull << '/' | 0x3FFull << '0',
                                    0x3FFFFFFull << ('A' - 64) | 1ull << ('_' - 64) |
                                        0x3FFFFFFull << ('a' - 64)};
    return c < 128 && (map[c >> 6] >> (c & 63) & 1);
}

static inline int b64_value(unsigned char c)
{
    if (c == '-')
        return 62;
    if (c == '_')
        return 63;
    return gw_b64_digit(c);
}

/* Mostly printable UTF-8: at least nine code points in ten are neither
 * control characters nor bytes outside a well-formed sequence. */
static int mostly_printable(const unsigned char *s, size_t n)
{
    size_t total = 0, bad = 0;
    for (size_t i = 0; i < n; total++) {
        uint32_t cp = s[i];
        if (cp < 0x80)
            i++;
        else
            i += dpg_utf8_next(s + i, n - i, &cp);
        if (cp == BAD_CP || (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r') ||
            (cp >= 0x7F && cp < 0xA0))
            bad++;
    }
    return total > 0 && bad * 10 <= total;
}

/* The decoded base64 blobs of a text, each normalized, one after another
 * with a newline between them (which no expression's '.' or [^...] crosses,
 * as they are compiled with REG_NEWLINE, and no phrase holds). */
struct blobs {
    unsigned char *dec; /* one blob's decoded bytes */
    char *text;
    size_t len, cap, decoded;
};

/* Finds, decodes and normalizes the blobs in the n bytes at s into *b:
 * 0 (b->text NULL when there are none), or GW_ENOMEM. */
static int find_blobs(const unsigned char *s, size_t n, struct blobs *b)
{
    int kept = 0;
    size_t i = 0;
    while (i < n && kept < DP_GUARD_MAX_BLOBS) {
        if (!is_b64(s[i])) {
            i++;
            continue;
        }
        size_t start = i, symbols = 0;
        for (;;) {
            size_t from = i;
            while (i < n && is_b64(s[i]))
                i++;
            symbols += i - from;
            /* A line break after whole quanta, then more symbols: wrapped. */
            size_t j = i;
            if (j < n && s[j] == '\r')
                j++;
            if (j < n && s[j] == '\n')
                j++;
            if (j == i || symbols % 4 || j == n || !is_b64(s[j]))
                break;
            i = j;
        }
        size_t stop = i;
        for (int pad = 0; pad < 2 && i < n && s[i] == '='; pad++)
            i++;
        if (symbols < MIN_BLOB)
            continue;
        size_t room = symbols / 4 * 3 + 3;
        if (b->decoded + room > MAX_DECODED)
            break;
        if (!b->text) {
            b->cap = n / 4 * 3 + 3 + DP_GUARD_MAX_BLOBS * 4 + 1;
            b->dec = malloc(n / 4 * 3 + 3);
            b->text = malloc(b->cap);
            if (!b->dec || !b->text)
                return GW_ENOMEM;
        }
        size_t o = 0;
        uint32_t acc = 0;
        int bits = 0;
        for (size_t k = start; k < stop; k++) {
            int v = b64_value(s[k]);
            if (v < 0)
                continue; /* a line break */
            acc = acc << 6 | (uint32_t)v;
            bits += 6;
            if (bits >= 8) {
                bits -= 8;
                b->dec[o++] = (unsigned char)(acc >> bits);
                acc &= (1u << bits) - 1;
            }
        }
        b->decoded += o;
        if (!mostly_printable(b->dec, o))
            continue;
        kept++;
        /* normalize_into writes o + 3 at most; the NUL's place takes the
         * newline. b->cap holds every blob: sum(o) <= n * 3 / 4. */
        b->len += dpg_normalize_into((const char *)b->dec, o, b->text + b->len);
        b->text[b->len++] = '\n';
        b->text[b->len] = 0;
    }
    return 0;
}

/* This thread's copy of the combined expression; NULL when r has none. */
static regex_t *combined(const struct dp_guard_rules *r)
{
    static atomic_uint slots;
    static __thread unsigned slot; /* 0: none yet */
    if (!r->any_src)
        return NULL;
    if (!slot)
        slot = atomic_fetch_add(&slots, 1) % COPIES + 1;
    /* The copies are the one part of the set that changes (above). */
    _Atomic(regex_t *) *at = (_Atomic(regex_t *) *)&r->any[slot - 1];
    regex_t *re = atomic_load_explicit(at, memory_order_acquire);
    if (re)
        return re;
    re = malloc(sizeof(*re));
    if (!re || regcomp(re, r->any_src, r->any_flags) != 0) {
        free(re);
        return atomic_load_explicit((_Atomic(regex_t *) *)&r->any[0], memory_order_acquire);
    }
    regex_t *had = NULL;
    if (!atomic_compare_exchange_strong_explicit(at, &had, re, memory_order_acq_rel,
                                                 memory_order_acquire)) {
        regfree(re);
        free(re);
        return had;
    }
    return re;
}

/* 0 when the combined expression says no rule it holds matches t, else 1
 * (a match, or the matcher's failure: then the rules say). */
static int maybe(const regex_t *any, const char *t)
{
    return regexec(any, t, 0, NULL, 0) != REG_NOMATCH;
}

/* 1 when the rule matches the NUL-terminated t of n bytes, 0 when not,
 * GW_ENOMEM when the matcher runs out of memory. */
static int rule_match(const struct rule *u, const char *t, size_t n)
{
    if (!u->is_regex)
        return memmem(t, n, u->needle, u->needle_len) != NULL;
    int rc = regexec(&u->re, t, 0, NULL, 0);
    return rc == 0 ? 1 : rc == REG_NOMATCH ? 0 : GW_ENOMEM;
}

/* One form of a text the rules are matched against. */
struct form {
    const char *t;
    size_t n;
    int maybe; /* the combined expression matched it (or there is none) */
    int via_base64;
};

int dp_guard_scan(const struct dp_guard_rules *r, const char *text, size_t len,
                  struct dp_guard_match *m)
{
    if (!r || !r->n)
        return 0;
    if (!text)
        len = 0;
    if (len > DP_GUARD_MAX_SCAN)
        len = DP_GUARD_MAX_SCAN;
    char small[STACK_NORM];
    char *norm = len + 3 <= sizeof(small) ? small : malloc(len + 3), *alt = NULL;
    if (!norm)
        return GW_ENOMEM;
    int hidden = 0, rc = 0;
    struct form forms[3];
    size_t nforms = 0;
    forms[nforms++] = (struct form){norm, dpg_normalize_form(text, len, norm, 0, &hidden), 1, 0};
    if (hidden) {
        if (!(alt = malloc(len + 3)))
            rc = GW_ENOMEM;
        else
            forms[nforms++] = (struct form){alt, dpg_normalize_form(text, len, alt, 1, NULL), 1, 0};
    }
    struct blobs b = {0};
    if (rc == 0)
        rc = find_blobs((const unsigned char *)text, len, &b);
    if (b.len)
        forms[nforms++] = (struct form){b.text, b.len, 1, 1};
    /* Which forms a rule in the combined expression may match. */
    const regex_t *any = rc == 0 ? combined(r) : NULL;
    for (size_t f = 0; any && f < nforms; f++)
        forms[f].maybe = maybe(any, forms[f].t);
    for (size_t k = 0; rc == 0 && k < r->n; k++) {
        const struct rule *u = &r->rules[r->order[k]];
        for (size_t f = 0; rc == 0 && f < nforms; f++) {
            if (any && u->combinable && !forms[f].maybe)
                continue;
            int hit = rule_match(u, forms[f].t, forms[f].n);
            if (hit < 0) {
                rc = hit;
            } else if (hit) {
                m->rule_id = u->id;
                m->severity = u->severity;
                m->via_base64 = forms[f].via_base64;
                rc = 1;
            }
        }
    }
    free(b.dec);
    free(b.text);
    free(alt);
    if (norm != small)
        free(norm);
    return rc;
}
