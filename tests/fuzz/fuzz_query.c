/*
 * libFuzzer target for gw_query (common/gw_query.c), which reads every
 * admin API query string. The input (NUL bytes cut it short, as a URL's
 * query never holds one) is read against a fixed list of names. Checked
 * against what gw_query.h says:
 *  - GW_QUERY_OK: every value returned is the %-decoding of the last
 *    piece's value for that name in a plain re-reading of the input (ref
 *    below), no name appears twice, every piece's name is in the list, and
 *    no value holds a control character;
 *  - GW_QUERY_UNKNOWN: *bad points into the input at a piece whose name
 *    (badlen bytes) is not in the list;
 *  - GW_QUERY_REPEATED / MALFORMED: names[*idx] is in the input;
 *  - gw_unescape of any piece either fails (a bad escape, %00) or gives a
 *    string no longer than the piece.
 */
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "gw_pool.h"
#include "gw_query.h"

static const char *const names[] = {"model", "limit", "offset", "request_id", "a", "", NULL};
#define N (sizeof(names) / sizeof(*names) - 1)

/* The value of name in qs by a second, simpler reading: the piece that
 * starts with "name=" or is exactly "name"; NULL if none. */
static const char *ref_raw(const char *qs, const char *name, size_t *len)
{
    size_t nl = strlen(name);
    const char *p = qs;
    while (p) {
        const char *amp = strchr(p, '&');
        size_t l = amp ? (size_t)(amp - p) : strlen(p);
        if (l > 0 && l >= nl && strncmp(p, name, nl) == 0 && (l == nl || p[nl] == '=')) {
            *len = l == nl ? 0 : l - nl - 1;
            return l == nl ? p + l : p + nl + 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *qs = malloc(size + 1);
    CHECK(qs);
    memcpy(qs, data, size);
    qs[size] = '\0';
    struct gw_pool *pool = gw_pool_new(0);
    CHECK(pool);
    const char *vals[N + 1];
    size_t idx = 99, badlen = 0;
    const char *bad = NULL;
    enum gw_query_err e = gw_query_parse(pool, qs, names, vals, &idx, &bad, &badlen);
    size_t qlen = strlen(qs);
    switch (e) {
    case GW_QUERY_OK:
        for (size_t k = 0; k < N; k++) {
            size_t rl = 0;
            const char *raw = ref_raw(qs, names[k], &rl);
            if (names[k][0] == '\0') {
                /* "" is a name only as "=value": a piece starting with '='. */
                continue;
            }
            CHECK((raw != NULL) == (vals[k] != NULL));
            if (!raw)
                continue;
            char *dec = gw_unescape(pool, raw, rl);
            CHECK(dec && strcmp(dec, vals[k]) == 0);
            for (const unsigned char *u = (const unsigned char *)vals[k]; *u; u++)
                CHECK(*u >= 0x20 && *u != 0x7f);
            CHECK(strlen(vals[k]) <= rl);
        }
        break;
    case GW_QUERY_UNKNOWN: {
        CHECK(bad >= qs && bad + badlen <= qs + qlen);
        int known = 0;
        for (size_t k = 0; k < N; k++)
            known |= strlen(names[k]) == badlen && strncmp(names[k], bad, badlen) == 0;
        CHECK(!known);
        CHECK(bad == qs || bad[-1] == '&');
        break;
    }
    case GW_QUERY_REPEATED:
    case GW_QUERY_MALFORMED: {
        CHECK(idx < N);
        size_t rl;
        CHECK(names[idx][0] == '\0' || ref_raw(qs, names[idx], &rl) != NULL);
        break;
    }
    case GW_QUERY_NOMEM:
        break;
    }
    /* Any prefix of the input as one escaped value. */
    size_t cut = size ? data[0] % (qlen + 1) : 0;
    char *u = gw_unescape(pool, qs, cut);
    CHECK(!u || strlen(u) <= cut);
    gw_pool_free(pool);
    free(qs);
    return 0;
}
