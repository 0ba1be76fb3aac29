/*
 * gw_json: small helpers over jansson used on every request path: typed
 * lookups that never crash on a wrong type, JSON string escaping into a
 * bounded buffer (for answers built by hand on hot paths), and the OpenAI
 * error body every facade answers with.
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

/* Appends s (n bytes) as a quoted JSON string, escaping as RFC 8259 needs.
 * Invalid UTF-8 bytes are replaced with U+FFFD, so the output always
 * parses. Returns 0 or GW_ELIMIT/GW_ENOMEM. */
int gw_json_escape(struct gw_buf *b, const char *s, size_t n) __attribute__((warn_unused_result));

/* Checks that s[0..n) is one complete JSON value (RFC 8259: strings with
 * valid escapes, numbers, literals, nesting up to max_depth) with nothing
 * but whitespace around it, without allocating. 1 when valid. Used on hot
 * paths where a relayed document only needs to be well-formed. */
int gw_json_valid(const char *s, size_t n, int max_depth);

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
 * unsure: the key appears twice, or some key is spelled with escapes (it
 * may be key in disguise). On -1 the caller must use a real parser.
 * gw_json_span_index: the idx-th element of an array; 1 or 0.
 * gw_json_span_is_null: the span is the literal null.
 * gw_json_span_string: appends the decoded string value (escapes resolved,
 * \u surrogate pairs joined) to out. GW_EINVAL when the span is not a
 * string, or holds what jansson refuses (\u0000, a lone surrogate), so the
 * two never disagree.
 */
int gw_json_span_member(const char *s, size_t n, const char *key, const char **vp, size_t *vn);
int gw_json_span_index(const char *s, size_t n, size_t idx, const char **vp, size_t *vn);
int gw_json_span_is_null(const char *vp, size_t vn);
int gw_json_span_string(const char *vp, size_t vn, struct gw_buf *out)
    __attribute__((warn_unused_result));

/* Renders an OpenAI-style error body:
 *   {"error":{"message":M,"type":T,"param":P|null,"code":C|null}}
 * into a malloc'd NUL-terminated string (caller frees), or NULL. */
char *gw_json_error_body(const char *message, const char *type, const char *param, const char *code,
                         size_t *len);

#endif
