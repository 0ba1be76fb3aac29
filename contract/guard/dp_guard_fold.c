/*
 * The guard's normalizer (dp_guard_rules.h, dp_guard_int.h): what a text
 * is matched as. Two linear passes over one buffer: the first folds each
 * code point (case, accents, look-alike letters, invisible characters) and
 * writes words separated by one "gap" byte each (the width, in code
 * points, of the separators it stands for, 1 to 31: bytes that the folded
 * text never holds); the second joins runs of spaced-out letters, in place
 * (it never writes past what it has read), turns every gap into one space
 * and pads the ends.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dp_guard_int.h"
#include "dp_guard_rules.h"
#include "gw_buf.h"
#include "gw_error.h"

#define MAX_GAP 31 /* the widest gap the first pass records */

/* ---- folding ---------------------------------------------------------- */

#define FOLD_DROP (-1)   /* invisible: as if it were not there */
#define FOLD_HIDDEN (-2) /* invisible too, or (in the second form) a separator */
#define FOLD_SEP 0       /* separates words */

static inline char ascii_fold(unsigned char c)
{
    unsigned char small = c | 0x20;
    if ((unsigned)(small - 'a') < 26)
        return (char)small;
    if ((unsigned)(c - '0') < 10)
        return (char)c;
    return 0;
}

/* U+00C0..U+00FF and U+0100..U+017F to their base letters. A space is a
 * separator (the multiplication and division signs); a capital stands for
 * two letters: A "ae", T "th", S "ss", I "ij", O "oe". */
static const char latin1[] = "aaaaaaAceeeeiiiidnooooo ouuuuyTS"
                             "aaaaaaAceeeeiiiidnooooo ouuuuyTy";
static const char latin_ext_a[] = "aaaaaaccccccccddddeeeeeeeeeegggggggghhhhiiiiiiiiiiIIjjkkk"
                                  "llllllllllnnnnnnnnnooooooOOrrrrrrssssssssttttttuuuuuuuuuuu"
                                  "uwwyyyzzzzzzs";
_Static_assert(sizeof(latin1) == 64 + 1, "latin1: U+00C0..U+00FF");
_Static_assert(sizeof(latin_ext_a) == 128 + 1, "latin_ext_a: U+0100..U+017F");

/* Letters from other blocks that pass for ASCII ones, sorted by code point. */
static const struct {
    uint32_t cp;
    char c;
} lookalikes[] = {
    {0x00AA, 'a'}, {0x00B2, '2'},  {0x00B3, '3'},  {0x00B9, '1'}, {0x00BA, 'o'}, {0x0251, 'a'},
    {0x0261, 'g'}, {0x0269, 'i'},  {0x0386, 'a'},  {0x0388, 'e'}, {0x0389, 'h'}, {0x038A, 'i'},
    {0x038C, 'o'}, {0x038E, 'y'},  {0x0391, 'a'},  {0x0392, 'b'}, {0x0395, 'e'}, {0x0396, 'z'},
    {0x0397, 'h'}, {0x0399, 'i'},  {0x039A, 'k'},  {0x039C, 'm'}, {0x039D, 'n'}, {0x039F, 'o'},
    {0x03A1, 'p'}, {0x03A4, 't'},  {0x03A5, 'y'},  {0x03A7, 'x'}, {0x03AA, 'i'}, {0x03AB, 'y'},
    {0x03AC, 'a'}, {0x03AD, 'e'},  {0x03AF, 'i'},  {0x03B1, 'a'}, {0x03B5, 'e'}, {0x03B9, 'i'},
    {0x03BA, 'k'}, {0x03BD, 'v'},  {0x03BF, 'o'},  {0x03C1, 'p'}, {0x03C4, 't'}, {0x03C5, 'u'},
    {0x03C7, 'x'}, {0x03CA, 'i'},  {0x03CB, 'u'},  {0x03CC, 'o'}, {0x03CD, 'u'}, {0x03F2, 'c'},
    {0x03F3, 'j'}, {0x03F9, 'c'},  {0x0400, 'e'},  {0x0401, 'e'}, {0x0405, 's'}, {0x0406, 'i'},
    {0x0407, 'i'}, {0x0408, 'j'},  {0x0410, 'a'},  {0x0412, 'b'}, {0x0415, 'e'}, {0x041A, 'k'},
    {0x041C, 'm'}, {0x041D, 'h'},  {0x041E, 'o'},  {0x0420, 'p'}, {0x0421, 'c'}, {0x0422, 't'},
    {0x0423, 'y'}, {0x0425, 'x'},  {0x0430, 'a'},  {0x0435, 'e'}, {0x043E, 'o'}, {0x0440, 'p'},
    {0x0441, 'c'}, {0x0443, 'y'},  {0x0445, 'x'},  {0x0450, 'e'}, {0x0451, 'e'}, {0x0455, 's'},
    {0x0456, 'i'}, {0x0457, 'i'},  {0x0458, 'j'},  {0x04AE, 'y'}, {0x04AF, 'y'}, {0x04BA, 'h'},
    {0x04BB, 'h'}, {0x04C0, 'l'},  {0x04CF, 'l'},  {0x0500, 'd'}, {0x0501, 'd'}, {0x051A, 'q'},
    {0x051B, 'q'}, {0x051C, 'w'},  {0x051D, 'w'},  {0x2102, 'c'}, {0x210A, 'g'}, {0x210B, 'h'},
    {0x210C, 'h'}, {0x210D, 'h'},  {0x210E, 'h'},  {0x2110, 'i'}, {0x2111, 'i'}, {0x2112, 'l'},
    {0x2113, 'l'}, {0x2115, 'n'},  {0x2119, 'p'},  {0x211A, 'q'}, {0x211B, 'r'}, {0x211C, 'r'},
    {0x211D, 'r'}, {0x2124, 'z'},  {0x2128, 'z'},  {0x212A, 'k'}, {0x212C, 'b'}, {0x212D, 'c'},
    {0x212F, 'e'}, {0x2130, 'e'},  {0x2131, 'f'},  {0x2133, 'm'}, {0x2134, 'o'}, {0x2139, 'i'},
    {0x24EA, '0'}, {0x1D6A4, 'i'}, {0x1D6A5, 'j'},
};

/* Invisible characters, as inclusive ranges sorted by code point: marks
 * that belong to the letter before them (FOLD_DROP), and format characters
 * that stand between letters unseen (FOLD_HIDDEN). */
static const struct {
    uint32_t lo, hi;
    int fold;
} invisible[] = {
    {0x00AD, 0x00AD, FOLD_HIDDEN},   /* soft hyphen */
    {0x0300, 0x036F, FOLD_DROP},     /* combining diacritical marks, grapheme joiner */
    {0x061C, 0x061C, FOLD_HIDDEN},   /* Arabic letter mark */
    {0x115F, 0x1160, FOLD_HIDDEN},   /* Hangul fillers */
    {0x17B4, 0x17B5, FOLD_HIDDEN},   /* Khmer inherent vowels */
    {0x180B, 0x180D, FOLD_DROP},     /* Mongolian variation selectors */
    {0x180E, 0x180E, FOLD_HIDDEN},   /* Mongolian vowel separator */
    {0x180F, 0x180F, FOLD_DROP},     /* Mongolian variation selector */
    {0x1AB0, 0x1AFF, FOLD_DROP},     /* combining marks, extended */
    {0x1DC0, 0x1DFF, FOLD_DROP},     /* combining marks, supplement */
    {0x200B, 0x200F, FOLD_HIDDEN},   /* zero-width space, (non-)joiner, direction marks */
    {0x202A, 0x202E, FOLD_HIDDEN},   /* bidirectional embeddings and overrides */
    {0x2060, 0x206F, FOLD_HIDDEN},   /* word joiner, invisible operators, isolates */
    {0x20D0, 0x20FF, FOLD_DROP},     /* combining marks for symbols */
    {0x3164, 0x3164, FOLD_HIDDEN},   /* Hangul filler */
    {0xFE00, 0xFE0F, FOLD_DROP},     /* variation selectors */
    {0xFE20, 0xFE2F, FOLD_DROP},     /* combining half marks */
    {0xFEFF, 0xFEFF, FOLD_HIDDEN},   /* zero-width no-break space (BOM) */
    {0xFFA0, 0xFFA0, FOLD_HIDDEN},   /* half-width Hangul filler */
    {0x1D173, 0x1D17A, FOLD_HIDDEN}, /* musical formatting */
    {0xE0000, 0xE007F, FOLD_HIDDEN}, /* tags */
    {0xE0100, 0xE01EF, FOLD_DROP},   /* variation selectors, supplement */
};

/* FOLD_DROP or FOLD_HIDDEN for an invisible character, else FOLD_SEP. */
static int invisible_fold(uint32_t cp)
{
    size_t lo = 0, hi = sizeof(invisible) / sizeof(*invisible);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < invisible[mid].lo)
            hi = mid;
        else if (cp > invisible[mid].hi)
            lo = mid + 1;
        else
            return invisible[mid].fold;
    }
    return FOLD_SEP;
}

static char lookalike(uint32_t cp)
{
    size_t lo = 0, hi = sizeof(lookalikes) / sizeof(*lookalikes);
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < lookalikes[mid].cp)
            hi = mid;
        else if (cp > lookalikes[mid].cp)
            lo = mid + 1;
        else
            return lookalikes[mid].c;
    }
    return 0;
}

/* A letter from a table above: its one or two letters in out. */
static int table_letter(char t, char out[2])
{
    static const char *const pairs[] = {"ae", "th", "ss", "ij", "oe"};
    static const char caps[] = "ATSIO";
    if (t == ' ')
        return FOLD_SEP;
    const char *p = strchr(caps, t);
    if (p && *p) {
        memcpy(out, pairs[p - caps], 2);
        return 2;
    }
    out[0] = t;
    return 1;
}

/* What one code point above ASCII becomes: FOLD_DROP, FOLD_HIDDEN, FOLD_SEP, or one or
 * two ASCII letters or digits in out (their count). */
static int fold_cp(uint32_t cp, char out[2])
{
    if (cp >= 0xC0 && cp <= 0xFF)
        return table_letter(latin1[cp - 0xC0], out);
    if (cp >= 0x100 && cp <= 0x17F)
        return table_letter(latin_ext_a[cp - 0x100], out);
    if (cp >= 0xFF01 && cp <= 0xFF5E) { /* full-width ASCII */
        out[0] = ascii_fold((unsigned char)(cp - 0xFEE0));
        return out[0] ? 1 : FOLD_SEP;
    }
    if (cp >= 0x1D400 && cp <= 0x1D6A3) { /* 13 mathematical alphabets of 52 */
        uint32_t k = (cp - 0x1D400) % 52;
        out[0] = (char)('a' + (k < 26 ? k : k - 26));
        return 1;
    }
    if (cp >= 0x1D7CE && cp <= 0x1D7FF) { /* mathematical digits, 5 sets */
        out[0] = (char)('0' + (cp - 0x1D7CE) % 10);
        return 1;
    }
    /* Parenthesized, circled (capital, small), squared, negative circled,
     * negative squared and regional-indicator letters: runs of 26. */
    static const uint32_t runs26[] = {0x249C, 0x24B6, 0x24D0, 0x1F130, 0x1F150, 0x1F170, 0x1F1E6};
    for (size_t i = 0; i < sizeof(runs26) / sizeof(*runs26); i++)
        if (cp >= runs26[i] && cp < runs26[i] + 26) {
            out[0] = (char)('a' + (cp - runs26[i]));
            return 1;
        }
    if (cp >= 0x2460 && cp <= 0x2468) { /* circled 1..9 */
        out[0] = (char)('1' + (cp - 0x2460));
        return 1;
    }
    if ((out[0] = lookalike(cp)) != 0)
        return 1;
    return invisible_fold(cp);
}

/* One UTF-8 sequence at s (n > 0 bytes): the bytes it takes and *cp, or 1
 * and BAD_CP for a byte that does not start a well-formed one (overlong
 * forms, surrogates and code points past U+10FFFF included). */
size_t dpg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned char c = s[0];
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        *cp = BAD_CP;
        return 1;
    }
    if (n < len) {
        *cp = BAD_CP;
        return 1;
    }
    for (size_t k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) {
            *cp = BAD_CP;
            return 1;
        }
        v = v << 6 | (s[k] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        *cp = BAD_CP;
        return 1;
    }
    *cp = v;
    return len;
}

/* ---- normalizing -------------------------------------------------------- */

/* The first pass: words of folded letters at d[1..], one gap byte between
 * two words, nothing before the first or after the last. Returns the end.
 * Every input byte gives at most one output byte, so d needs n + 1.
 * Format characters (FOLD_HIDDEN) vanish, or with hidden_sep separate
 * words; *hidden (when not NULL) is set to 1 when there was one. */
static size_t fold_text(const unsigned char *s, size_t n, char *d, int hidden_sep, int *hidden)
{
    size_t w = 1;
    unsigned gap = 0;
    int any = 0;
    for (size_t i = 0; i < n;) {
        /* ASCII, most of most texts, in a loop of its own. */
        for (; i < n && s[i] < 0x80; i++) {
            char a = ascii_fold(s[i]);
            if (!a) {
                gap += gap < MAX_GAP;
                continue;
            }
            if (gap && any)
                d[w++] = (char)gap;
            gap = 0;
            any = 1;
            d[w++] = a;
        }
        if (i == n)
            break;
        char f[2];
        uint32_t cp;
        i += dpg_utf8_next(s + i, n - i, &cp);
        int k = cp == BAD_CP ? FOLD_SEP : fold_cp(cp, f);
        if (k == FOLD_HIDDEN) {
            if (hidden)
                *hidden = 1;
            k = hidden_sep ? FOLD_SEP : FOLD_DROP;
        }
        if (k == FOLD_DROP)
            continue;
        if (k == FOLD_SEP) {
            if (gap < MAX_GAP)
                gap++;
            continue;
        }
        if (gap && any)
            d[w++] = (char)gap;
        gap = 0;
        any = 1;
        d[w++] = f[0];
        if (k == 2)
            d[w++] = f[1];
    }
    return w;
}

static inline int is_gap(char c)
{
    return c > 0 && c <= MAX_GAP;
}

/* The length of the word at d[r..end). */
static inline size_t word_len(const char *d, size_t r, size_t end)
{
    size_t k = r;
    while (k < end && !is_gap(d[k]))
        k++;
    return k - r;
}

#define JOINED 0x7F /* a gap decided to join two letters (decide_run) */

/* 1 when the letter at p, in the run of letters d[r], d[r+2], ..., d[last],
 * is a word of its own so far (no joined gap on either side). */
static inline int single(const char *d, size_t r, size_t last, size_t p)
{
    return (p == r || d[p - 1] != JOINED) && (p == last || d[p + 1] != JOINED);
}

/*
 * Which gaps of a run of one-letter words (d[r], d[r+2], ..., d[last],
 * gaps between) join letters: in each stretch of at least three letters
 * that are still words of their own, the narrowest gaps join, then the
 * same again in what is left, so "i  g  n  o  r  e  a l l" (two spaces,
 * one) gives "all" and then "ignore". A gap left undecided separates words
 * (it becomes ' '). Each round settles at least the narrowest width of
 * every stretch, and what is left of a stretch has only wider gaps, so
 * there are at most MAX_GAP rounds over the run.
 */
static void decide_run(char *d, size_t r, size_t last)
{
    for (int undecided = 1; undecided;) {
        undecided = 0;
        for (size_t p = r; p <= last;) {
            if (!single(d, r, last, p)) {
                if (p < last && is_gap(d[p + 1]))
                    d[p + 1] = ' '; /* next to a word: wider than what joined it */
                p += 2;
                continue;
            }
            size_t q = p;
            while (q < last && is_gap(d[q + 1]) && single(d, r, last, q + 2))
                q += 2;
            char narrowest = MAX_GAP + 1;
            for (size_t k = p + 1; k < q; k += 2)
                if (d[k] < narrowest)
                    narrowest = d[k];
            for (size_t k = p + 1; k < q; k += 2) {
                if (q - p < 4)
                    d[k] = ' '; /* two letters are no spelled-out word */
                else if (d[k] == narrowest)
                    d[k] = JOINED;
                else
                    undecided = 1;
            }
            if (q < last && is_gap(d[q + 1]))
                d[q + 1] = ' '; /* the next letter is part of a word */
            p = q + 2;
        }
    }
}

/* The second pass, in place over fold_text's output d[1..end): spaced-out
 * letters joined, gaps made spaces, a space at each end. Returns the
 * length (at most end + 1). Writing never overtakes reading: w <= r holds
 * before each word is copied, and a run of letters writes at most two
 * bytes (a space and a letter) for every two it reads. */
static size_t join_and_pad(char *d, size_t end)
{
    size_t r = 1, w = 0;
    d[w++] = ' ';
    while (r < end) {
        if (w > 1)
            d[w++] = ' ';
        size_t len = word_len(d, r, end);
        if (len != 1) {
            memmove(d + w, d + r, len);
            w += len, r += len;
        } else {
            /* A run of one-letter words: d[r], d[r+2], ..., d[last]. */
            size_t last = r;
            while (last + 2 < end && word_len(d, last + 2, end) == 1)
                last += 2;
            decide_run(d, r, last);
            for (size_t p = r; p <= last; p += 2) {
                char c = d[p], gap = p > r ? d[p - 1] : JOINED;
                if (gap != JOINED)
                    d[w++] = ' ';
                d[w++] = c;
            }
            r = last + 1;
        }
        if (r < end)
            r++; /* the gap after the word */
    }
    if (w > 1)
        d[w++] = ' ';
    d[w] = 0;
    return w;
}

/* The normalized form of n bytes at s into d (room for n + 3 bytes: the
 * form is at most n + 2, and a NUL). Returns its length. The second form
 * (hidden_sep) takes format characters for separators, not for nothing:
 * "ignore<U+200B>all" is "ignoreall" in the first and "ignore all" in the
 * second, which the scan matches as well when *hidden says there were any
 * (so that zero-width spaces between words hide nothing either). */
size_t dpg_normalize_form(const char *s, size_t n, char *d, int hidden_sep, int *hidden)
{
    size_t end = n ? fold_text((const unsigned char *)s, n, d, hidden_sep, hidden) : 1;
    return join_and_pad(d, end);
}

size_t dpg_normalize_into(const char *s, size_t n, char *d)
{
    return dpg_normalize_form(s, n, d, 0, NULL);
}

int dp_guard_normalize(const char *text, size_t len, struct gw_buf *out)
{
    if (len > SIZE_MAX - 3)
        return GW_EINVAL;
    char *d = malloc(len + 3);
    if (!d)
        return GW_ENOMEM;
    size_t n = dpg_normalize_into(text, len, d);
    int rc = gw_buf_append(out, d, n);
    free(d);
    return rc;
}
