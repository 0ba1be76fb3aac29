#include "gw_query.h"

#include <string.h>

#include "gw_codec.h"
#include "gw_json.h"
#include "gw_pool.h"

char *gw_unescape(struct gw_pool *pool, const char *s, size_t n)
{
    char *out = gw_pool_alloc(pool, n + 1);
    long o = out ? gw_pct_decode(s, n, out, 1) : -1;
    if (o < 0)
        return NULL;
    out[o] = '\0';
    return out;
}

/* 1 when s is UTF-8 text without control characters. */
static int text_ok(const char *s)
{
    size_t n = strlen(s);
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = gw_utf8_len(u + i, n - i);
        if (!k || u[i] < 0x20 || u[i] == 0x7f)
            return 0;
        i += k;
    }
    return 1;
}

enum gw_query_err gw_query_parse(struct gw_pool *pool, const char *qs, const char *const *names,
                                 const char **vals, size_t *idx, const char **bad, size_t *badlen)
{
    size_t n = 0;
    while (names[n])
        vals[n++] = NULL;
    for (const char *p = qs; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        size_t nl = eq ? (size_t)(eq - p) : len;
        const char *next = amp ? amp + 1 : NULL;
        if (len == 0) {
            p = next;
            continue;
        }
        size_t k = 0;
        while (k < n && !(strlen(names[k]) == nl && strncmp(names[k], p, nl) == 0))
            k++;
        if (k == n) {
            *bad = p;
            *badlen = nl;
            return GW_QUERY_UNKNOWN;
        }
        *idx = k;
        if (vals[k])
            return GW_QUERY_REPEATED;
        char *v = eq ? gw_unescape(pool, eq + 1, len - nl - 1) : gw_pool_strdup(pool, "");
        if (!v)
            return eq ? GW_QUERY_MALFORMED : GW_QUERY_NOMEM;
        if (!text_ok(v))
            return GW_QUERY_MALFORMED;
        vals[k] = v;
        p = next;
    }
    return GW_QUERY_OK;
}
