/*
 * gw_json: small helpers over jansson used on every request path: typed
 * lookups that never crash on a wrong type, JSON string escaping into a
 * bounded buffer (for answers built by hand on hot paths), non-allocating
 * scans (validity, the values and nesting a document from outside holds,
 * checked before it is parsed; spans of members), and the OpenAI error
 * body every facade answers with.
 */
#ifndef GW_JSON_H
#define GW_JSON_H

#include <jansson.h>
#include <stddef.h>

#include "gw_buf.h"

/* The string at obj[key], or NULL when obj is not an object, the key is
 * absent, or the value is not a string. The result is owned by obj. */
const char *gw_json_str(const json_t *obj, const char *key);
/* obj[key] as an integer into *out; GW_ENOTFOUND when absent or null,
 * GW_EINVAL when not an integer. */
int gw_json_int(const json_t *obj, const char *key, long long *out);
/* obj[key] as a boolean; def when absent or null; GW_EINVAL when another
 * type (returned through *err when err is not NULL). */
int gw_json_bool(const json_t *obj, const char *key, int def, int *err);

/* Length of the valid UTF-8 sequence starting at s (at most n bytes;
 * n > 0), or 0: overlong forms, surrogates and values past U+10FFFF are
 * not valid. */
size_t gw_utf8_len(const unsigned char *s, size_t n);

/* Appends s (n bytes) as a quoted JSON string, escaping as RFC 8259 needs.
 * Invalid UTF-8 bytes are replaced with U+FFFD, so the output always
 * parses. Returns 0 or GW_ELIMIT/GW_ENOMEM. */
int gw_json_escape(struct gw_buf *b, const char *s, size_t n) __attribute__((warn_unused_result));

/* Checks that s[0..n) is one complete JSON value (RFC 8259: strings with
 * valid escapes, numbers, literals, nesting up to max_depth) with nothing
 * but whitespace around it, without allocating. 1 when valid. Used on hot
 * paths where a relayed document only needs to be well-formed. */
int gw_json_valid(const char *s, size_t n, int max_depth);

/*
 * What one document from outside (a request body; a request's tool call
 * arguments, all calls together) may hold, checked before a parser builds
 * it: jansson spends 40 to 230 bytes on each value (an empty object holds
 * a hash table already), so 1 MiB of "[{},{},...]" became 84 MiB of tree.
 * 100,000 values bound that tree to about 22 MiB in the worst shape (empty
 * objects; 4 MiB for numbers), while real requests stay far below: by
 * our estimate a long agent conversation with its tool schemas is of the
 * order of 10,000 values, 2,048 embedding inputs are 2,050, and 1 MiB of
 * message text is a handful. (Should embeddings accept token arrays, up
 * to 300,000 tokens a request at OpenAI, this must grow.) 64 levels of
 * nesting is far deeper than requests nest (structured-output schemas,
 * among the deepest, are held to 10 levels by OpenAI), and keeps every
 * recursive walk of the tree shallow.
 */
#define GW_JSON_MAX_VALUES 100000
#define GW_JSON_MAX_DEPTH 64

/* What gw_json_count_values saw. */
struct gw_json_count {
    size_t values; /* objects, arrays, strings, numbers, literals (keys are not values) */
    int depth;     /* the deepest nesting: a scalar is 0, {} 1, [[1]] 2 */
    size_t stop;   /* where the scan stopped: n, or the offset of the byte it stopped at */
};

/* Counts the values in the JSON text s[0..n) and its nesting, without
 * allocating and without reading past s + n, and stops as soon as either
 * passes its bound. GW_OK: s is one valid JSON value (as gw_json_valid
 * decides) within both bounds, and *c says what it holds. GW_ELIMIT: the
 * scan stopped at the first value past max_values (c->values is
 * max_values + 1) or the first container past max_depth (c->depth is
 * max_depth + 1), at c->stop; nothing after it was read, so whether s is
 * valid is not known. GW_EINVAL: s is not JSON; c->stop is the byte that
 * makes it so (n when s ends too early), and *c counts what came before,
 * within both bounds. Past that byte nothing was counted: a parser may
 * have s only up to it (c->stop + 1 bytes, at most n), as jansson accepts
 * bytes the scan refuses (a NUL after a number). */
int gw_json_count_values(const char *s, size_t n, size_t max_values, int max_depth,
                         struct gw_json_count *c) __attribute__((warn_unused_result));

/* A document from a client, about to be parsed, against GW_JSON_MAX_VALUES
 * and GW_JSON_MAX_DEPTH. *spent: the values the same request has already
 * spent of GW_JSON_MAX_VALUES in documents of this kind (0 for a request
 * body). GW_OK: within both, and *spent has grown by this document's
 * values. GW_ELIMIT: past one; msg (size bytes, NUL-terminated) names the
 * limit and where, which is how "in %s" reads ("the request body"); the
 * answer is a 413. GW_EINVAL: s is not JSON; the parser's own error should
 * explain it, given s only up to c->stop + 1 (see gw_json_count_values).
 * *spent is left alone on both failures. c, when not NULL, receives the
 * scan's count. */
int gw_json_bound(const char *s, size_t n, const char *where, size_t *spent,
                  struct gw_json_count *c, char *msg, size_t size)
    __attribute__((warn_unused_result));

/* Copies the JSON text s[0..n) to out with every number written as a string
 * of its exact source text (3e-06 becomes "3e-06"; strings, escapes and
 * all, are copied as they are). jansson reads numbers into doubles; a
 * document that carries money goes through this first, so each number
 * reaches an exact parser (gw_money_parse) as the text it was written as.
 * GW_EINVAL when s is not valid JSON (gw_json_valid with max_depth);
 * GW_ELIMIT or GW_ENOMEM from out (what was appended stays). */
int gw_json_quote_numbers(const char *s, size_t n, int max_depth, struct gw_buf *out)
    __attribute__((warn_unused_result));

/*
 * Lookups in JSON text without building a document, for hot paths that need
 * a few members of small, frequent documents (streamed chunks). The text
 * must have passed gw_json_valid. A value is returned as a span of the text
 * (a string value with its quotes and escapes as written).
 *
 * gw_json_span_member: the value of member key of an object (keys compared
 * as written). 1 when found, 0 when absent or s is not an object, -1 when
 * unsure: the key appears twice, some key is spelled with escapes (it may
 * be key in disguise), or a member's value nests more than 64 levels deep
 * (text validated with a larger max_depth). On -1 the caller must use a
 * real parser.
 * gw_json_span_index: the idx-th element of an array; 1 or 0 (also 0 when
 * an element before it, or it, nests more than 64 levels deep).
 * gw_json_span_is_null: the span is the literal null.
 * gw_json_span_string: appends the decoded string value (escapes resolved,
 * \u surrogate pairs joined) to out. GW_EINVAL when the span is not a
 * string, or holds what jansson refuses (\u0000, a lone surrogate), so the
 * two never disagree.
 */
int gw_json_span_member(const char *s, size_t n, const char *key, const char **vp, size_t *vn);

/* Several members in one pass: out[i] is keys[i]'s value ({NULL, 0} when
 * absent). 1 when s is an object, 0 when not, -1 when unsure (a requested
 * key twice, any key spelled with escapes, or a value nesting past the 64
 * levels scanned), as gw_json_span_member. */
struct gw_json_span {
    const char *p;
    size_t n;
};
int gw_json_span_members(const char *s, size_t n, const char *const *keys, size_t nkeys,
                         struct gw_json_span *out);
/* gw_json_span_members on text not yet validated: 1 when s is exactly one
 * valid JSON object (whitespace around it allowed; {} has no members),
 * its members read in the same one pass; 0 when s is not valid JSON or
 * not an object; -1 when unsure, as gw_json_span_members (a value nesting
 * past 64 levels among them). The spans it returns are valid JSON. */
int gw_json_span_doc(const char *s, size_t n, const char *const *keys, size_t nkeys,
                     struct gw_json_span *out);
int gw_json_span_index(const char *s, size_t n, size_t idx, const char **vp, size_t *vn);
/* What removes member key from object s, with one comma that separated it
 * from a neighbour (the one before it, or after it when it is the first),
 * so that the rest is the same object without it: s[*at .. *at + *cut).
 * 1 when found, 0 when absent or s is not an object, -1 when unsure, as
 * gw_json_span_member. */
int gw_json_span_cut(const char *s, size_t n, const char *key, size_t *at, size_t *cut);
/* The first element of array s (*vp, *vn) and whether others follow: 0
 * when s is not an array or is empty, 1 when it holds exactly one element,
 * 2 when more. */
int gw_json_span_first(const char *s, size_t n, const char **vp, size_t *vn);
int gw_json_span_is_null(const char *vp, size_t vn);
int gw_json_span_string(const char *vp, size_t vn, struct gw_buf *out)
    __attribute__((warn_unused_result));

/* Renders an OpenAI-style error body:
 *   {"error":{"message":M,"type":T,"param":P|null,"code":C|null}}
 * into a malloc'd NUL-terminated string (caller frees), or NULL. */
char *gw_json_error_body(const char *message, const char *type, const char *param, const char *code,
                         size_t *len);

#endif
