/*
 * gw_query: a URL query string read against the names an endpoint takes.
 *
 * "a=1&b=x%2Cy" against {"a", "b", "c"} gives vals {"1", "x,y", NULL}. A
 * value is %-decoded ('+' stays a '+'); a name alone ("a") has the value "".
 * Empty pieces ("a=1&&b=2") are skipped. The first piece that is not
 * acceptable stops the reading: a name not in the list, a name given twice,
 * or a value with a malformed escape, or that decodes to anything but UTF-8
 * text without control characters (a NUL byte, a newline, 0xff).
 * Everything returned lives in the pool.
 */
#ifndef GW_QUERY_H
#define GW_QUERY_H

#include <stddef.h>

struct gw_pool;

enum gw_query_err {
    GW_QUERY_OK = 0,
    GW_QUERY_UNKNOWN,   /* a name not in the list: *bad points at it, *badlen its length */
    GW_QUERY_REPEATED,  /* names[*idx] given twice */
    GW_QUERY_MALFORMED, /* names[*idx]'s value has a bad escape or is not text */
    GW_QUERY_NOMEM,
};

/* Reads qs (NULL or "" : nothing) against names (NULL-terminated; vals has
 * a slot for each). On an error, *idx or (*bad, *badlen) say where. */
enum gw_query_err gw_query_parse(struct gw_pool *pool, const char *qs, const char *const *names,
                                 const char **vals, size_t *idx, const char **bad, size_t *badlen);

/* Percent-decodes s[0..n) into the pool ('+' stays a '+'); NULL when an
 * escape is malformed, when one decodes to a NUL byte, or out of memory. */
char *gw_unescape(struct gw_pool *pool, const char *s, size_t n);

#endif
