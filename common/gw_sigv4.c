#include "gw_sigv4.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"

/* RFC 9110 tchar: the bytes a header name may hold. */
static int tchar(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* Credentials, region and service: visible ASCII, no '/' in the scope parts. */
static int valid_word(const char *s, int scope_part)
{
    if (!s || !*s)
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s <= 0x20 || (unsigned char)*s >= 0x7f || (scope_part && *s == '/'))
            return 0;
    return 1;
}

static int valid_amz_date(const char *d)
{
    if (strlen(d) != 16 || d[8] != 'T' || d[15] != 'Z')
        return 0;
    for (int i = 0; i < 15; i++)
        if (i != 8 && (d[i] < '0' || d[i] > '9'))
            return 0;
    return 1;
}

/* ---- canonical query string ---- */

/* Bytes in a scratch buffer: off while the buffer may still move, then p. */
struct span {
    size_t off, n;
    const char *p;
};

struct qparam {
    struct span k, v;
};

static int span_cmp(struct span a, struct span b)
{
    int c = memcmp(a.p, b.p, a.n < b.n ? a.n : b.n);
    return c ? c : (a.n > b.n) - (a.n < b.n);
}

static int qparam_cmp(const void *a, const void *b)
{
    const struct qparam *x = a, *y = b;
    int c = span_cmp(x->k, y->k);
    return c ? c : span_cmp(x->v, y->v);
}

/* Decodes then re-encodes s[0..n) into enc, recording where it went. */
static int requery(struct gw_buf *enc, struct gw_buf *tmp, const char *s, size_t n,
                   struct span *out)
{
    gw_buf_reset(tmp);
    int rc = gw_buf_append(tmp, s, n); /* room for the decoded form */
    if (!rc)
        tmp->len = (size_t)gw_pct_decode(s, n, tmp->data, 0);
    size_t start = enc->len;
    if (!rc)
        rc = gw_pct_encode(enc, tmp->data, tmp->len, 0);
    out->off = start;
    out->n = enc->len - start;
    return rc;
}

static int canonical_query(struct gw_buf *cr, const char *query)
{
    if (!query || !*query)
        return GW_OK;
    size_t count = 1;
    for (const char *q = query; *q; q++)
        count += *q == '&';
    struct qparam *params = calloc(count, sizeof(*params));
    if (!params)
        return GW_ENOMEM;
    struct gw_buf enc, tmp;
    gw_buf_init(&enc, 0);
    gw_buf_init(&tmp, 0);
    size_t np = 0;
    int rc = GW_OK;
    for (const char *q = query; *q && !rc;) {
        const char *amp = strchr(q, '&');
        size_t len = amp ? (size_t)(amp - q) : strlen(q);
        if (len) {
            const char *eq = memchr(q, '=', len);
            size_t kl = eq ? (size_t)(eq - q) : len;
            rc = requery(&enc, &tmp, q, kl, &params[np].k);
            if (!rc)
                rc = requery(&enc, &tmp, eq ? eq + 1 : q + len, eq ? len - kl - 1 : 0,
                             &params[np].v);
            np++;
        }
        q += len + (amp != NULL);
    }
    if (!rc) {
        /* enc is complete: turn offsets into pointers, sort, emit. */
        const char *base = enc.data ? enc.data : ""; /* NULL when all are empty */
        for (size_t i = 0; i < np; i++) {
            params[i].k.p = base + params[i].k.off;
            params[i].v.p = base + params[i].v.off;
        }
        qsort(params, np, sizeof(*params), qparam_cmp);
        for (size_t i = 0; i < np && !rc; i++) {
            if (i)
                rc = gw_buf_append(cr, "&", 1);
            if (!rc)
                rc = gw_buf_append(cr, params[i].k.p, params[i].k.n);
            if (!rc)
                rc = gw_buf_append(cr, "=", 1);
            if (!rc)
                rc = gw_buf_append(cr, params[i].v.p, params[i].v.n);
        }
    }
    gw_buf_free(&enc);
    gw_buf_free(&tmp);
    free(params);
    return rc;
}

/* ---- canonical headers ---- */

struct hentry {
    struct span name, value;
    size_t order; /* keeps repeated names in the order given */
};

static int hentry_cmp(const void *a, const void *b)
{
    const struct hentry *x = a, *y = b;
    int c = span_cmp(x->name, y->name);
    return c ? c : (x->order > y->order) - (x->order < y->order);
}

/* Appends the lowercased name and the trimmed, space-collapsed value to
 * store, recording offsets. GW_EINVAL for a bad name or value. */
static int add_header(struct gw_buf *store, struct hentry *e, const char *name, const char *value,
                      size_t order)
{
    size_t nl = name ? strlen(name) : 0;
    if (!nl || !value)
        return GW_EINVAL;
    size_t start = store->len;
    for (size_t i = 0; i < nl; i++) {
        unsigned char c = (unsigned char)name[i];
        if (!tchar(c))
            return GW_EINVAL;
        if (c >= 'A' && c <= 'Z')
            c = (unsigned char)(c - 'A' + 'a');
        int rc = gw_buf_append(store, &c, 1);
        if (rc)
            return rc;
    }
    e->name.off = start;
    e->name.n = nl;
    start = store->len;
    int pending_space = 0;
    for (const unsigned char *v = (const unsigned char *)value; *v; v++) {
        if (*v == ' ' || *v == '\t') {
            pending_space = store->len > start;
            continue;
        }
        if (*v < 0x20 || *v == 0x7f)
            return GW_EINVAL;
        int rc = pending_space ? gw_buf_append(store, " ", 1) : GW_OK;
        if (!rc)
            rc = gw_buf_append(store, v, 1);
        if (rc)
            return rc;
        pending_space = 0;
    }
    e->value.off = start;
    e->value.n = store->len - start;
    e->order = order;
    return GW_OK;
}

static int span_is(struct span s, const char *lit)
{
    return s.n == strlen(lit) && memcmp(s.p, lit, s.n) == 0;
}

/* Appends the canonical headers and then the signed-headers list to cr, and
 * the list alone to signed_headers. */
static int canonical_headers(struct gw_buf *cr, struct gw_buf *signed_headers,
                             const struct gw_sigv4_params *p, const struct gw_sigv4_result *out,
                             const struct gw_sigv4_header *headers, size_t nheaders)
{
    int token = p->session_token && *p->session_token;
    int sha = (p->flags & GW_SIGV4_CONTENT_SHA256) != 0;
    size_t n = nheaders + 1 + (size_t)token + (size_t)sha;
    struct hentry *e = calloc(n, sizeof(*e));
    if (!e)
        return GW_ENOMEM;
    struct gw_buf store;
    gw_buf_init(&store, 0);
    int rc = GW_OK;
    for (size_t i = 0; i < nheaders && !rc; i++)
        rc = add_header(&store, &e[i], headers[i].name, headers[i].value, i);
    size_t k = nheaders;
    if (!rc)
        rc = add_header(&store, &e[k], "x-amz-date", out->amz_date, k);
    if (!rc && token) {
        k++;
        rc = add_header(&store, &e[k], "x-amz-security-token", p->session_token, k);
    }
    if (!rc && sha) {
        k++;
        rc = add_header(&store, &e[k], "x-amz-content-sha256", out->payload_sha256, k);
    }
    if (rc)
        goto done;
    for (size_t i = 0; i < n; i++) {
        e[i].name.p = store.data + e[i].name.off;
        e[i].value.p = store.data + e[i].value.off;
    }
    /* The caller may not supply what the signer adds, and must sign host. */
    int have_host = 0;
    for (size_t i = 0; i < nheaders; i++) {
        if (span_is(e[i].name, "authorization") || span_is(e[i].name, "x-amz-date") ||
            span_is(e[i].name, "x-amz-security-token") ||
            (sha && span_is(e[i].name, "x-amz-content-sha256"))) {
            rc = GW_EINVAL;
            goto done;
        }
        have_host |= span_is(e[i].name, "host");
    }
    if (!have_host) {
        rc = GW_EINVAL;
        goto done;
    }
    qsort(e, n, sizeof(*e), hentry_cmp);
    for (size_t i = 0; i < n && !rc; i++) {
        int repeat = i > 0 && span_cmp(e[i].name, e[i - 1].name) == 0;
        if (repeat) {
            rc = gw_buf_append(cr, ",", 1);
        } else {
            if (i > 0)
                rc = gw_buf_append(cr, "\n", 1);
            if (!rc && i > 0)
                rc = gw_buf_append(signed_headers, ";", 1);
            if (!rc)
                rc = gw_buf_append(signed_headers, e[i].name.p, e[i].name.n);
            if (!rc)
                rc = gw_buf_append(cr, e[i].name.p, e[i].name.n);
            if (!rc)
                rc = gw_buf_append(cr, ":", 1);
        }
        if (!rc)
            rc = gw_buf_append(cr, e[i].value.p, e[i].value.n);
    }
    /* The last header's line end, the blank line, the signed-headers line. */
    if (!rc)
        rc = gw_buf_append(cr, "\n\n", 2);
    if (!rc)
        rc = gw_buf_append(cr, signed_headers->data, signed_headers->len);
done:
    gw_buf_free(&store);
    free(e);
    return rc;
}

/* ---- signing ---- */

static int hmac(const void *key, size_t klen, const void *data, size_t dlen, unsigned char out[32])
{
    unsigned int len = 0;
    if (!HMAC(EVP_sha256(), key, (int)klen, data, dlen, out, &len) || len != 32)
        return GW_EINVAL;
    return GW_OK;
}

/* signature = hex(HMAC(kSigning, string_to_sign)), where kSigning chains
 * HMAC over "AWS4"+secret, the date, region, service and "aws4_request". */
static int sign_string(const struct gw_sigv4_params *p, const char *date8, const struct gw_buf *sts,
                       char sig[65])
{
    unsigned char secret[4 + GW_SIGV4_MAX_SECRET], k[32];
    size_t sl = strlen(p->secret_key);
    memcpy(secret, "AWS4", 4);
    memcpy(secret + 4, p->secret_key, sl);
    int rc = hmac(secret, 4 + sl, date8, 8, k);
    if (!rc)
        rc = hmac(k, 32, p->region, strlen(p->region), k);
    if (!rc)
        rc = hmac(k, 32, p->service, strlen(p->service), k);
    if (!rc)
        rc = hmac(k, 32, "aws4_request", 12, k);
    unsigned char s[32];
    if (!rc)
        rc = hmac(k, 32, sts->data, sts->len, s);
    if (!rc)
        gw_hex_encode(s, 32, sig);
    OPENSSL_cleanse(secret, sizeof(secret));
    OPENSSL_cleanse(k, sizeof(k));
    return rc;
}

void gw_sigv4_result_init(struct gw_sigv4_result *r)
{
    memset(r, 0, sizeof(*r));
    gw_buf_init(&r->authorization, 0);
    gw_buf_init(&r->canonical_request, 0);
    gw_buf_init(&r->string_to_sign, 0);
}

void gw_sigv4_result_free(struct gw_sigv4_result *r)
{
    gw_buf_free(&r->authorization);
    gw_buf_free(&r->canonical_request);
    gw_buf_free(&r->string_to_sign);
    r->nadd = 0;
}

int gw_sigv4_sign(const struct gw_sigv4_params *p, const char *method, const char *path,
                  const char *query, const struct gw_sigv4_header *headers, size_t nheaders,
                  const void *payload, size_t payload_len, struct gw_sigv4_result *out)
{
    gw_buf_reset(&out->authorization);
    gw_buf_reset(&out->canonical_request);
    gw_buf_reset(&out->string_to_sign);
    out->nadd = 0;
    out->signature[0] = '\0';
    if (!valid_word(p->access_key, 0) || !valid_word(p->secret_key, 0) ||
        strlen(p->secret_key) > GW_SIGV4_MAX_SECRET || !valid_word(p->region, 1) ||
        !valid_word(p->service, 1) ||
        (p->session_token && *p->session_token && !valid_word(p->session_token, 0)))
        return GW_EINVAL;
    if (!method || !*method || !path || (*path && *path != '/') || (nheaders && !headers) ||
        (payload_len && !payload))
        return GW_EINVAL;
    for (const char *m = method; *m; m++)
        if (!tchar((unsigned char)*m))
            return GW_EINVAL;
    if (p->amz_date) {
        if (!valid_amz_date(p->amz_date))
            return GW_EINVAL;
        memcpy(out->amz_date, p->amz_date, 17);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        if (!gmtime_r(&now, &tm) ||
            strftime(out->amz_date, sizeof(out->amz_date), "%Y%m%dT%H%M%SZ", &tm) != 16)
            return GW_EINVAL;
    }
    char date8[9];
    memcpy(date8, out->amz_date, 8);
    date8[8] = '\0';
    gw_sha256_hex(payload_len ? payload : "", payload_len, out->payload_sha256);

    /* Canonical request. */
    struct gw_buf *cr = &out->canonical_request, signed_headers;
    gw_buf_init(&signed_headers, 0);
    int rc = gw_buf_printf(cr, "%s\n", method);
    if (!rc) {
        if (!*path)
            rc = gw_buf_append(cr, "/", 1);
        else if (p->flags & GW_SIGV4_S3)
            rc = gw_buf_appends(cr, path);
        else
            rc = gw_pct_encode(cr, path, strlen(path), 1);
    }
    if (!rc)
        rc = gw_buf_append(cr, "\n", 1);
    if (!rc)
        rc = canonical_query(cr, query);
    if (!rc)
        rc = gw_buf_append(cr, "\n", 1);
    if (!rc)
        rc = canonical_headers(cr, &signed_headers, p, out, headers, nheaders);
    if (!rc)
        rc = gw_buf_printf(cr, "\n%s", out->payload_sha256);

    /* String to sign. */
    char crhash[65];
    if (!rc) {
        gw_sha256_hex(cr->data, cr->len, crhash);
        rc = gw_buf_printf(&out->string_to_sign, "AWS4-HMAC-SHA256\n%s\n%s/%s/%s/aws4_request\n%s",
                           out->amz_date, date8, p->region, p->service, crhash);
    }
    if (!rc)
        rc = sign_string(p, date8, &out->string_to_sign, out->signature);
    if (!rc)
        rc = gw_buf_printf(&out->authorization,
                           "AWS4-HMAC-SHA256 Credential=%s/%s/%s/%s/aws4_request, "
                           "SignedHeaders=%s, Signature=%s",
                           p->access_key, date8, p->region, p->service, signed_headers.data,
                           out->signature);
    gw_buf_free(&signed_headers);
    if (rc) {
        gw_buf_reset(&out->authorization);
        out->signature[0] = '\0';
        return rc;
    }
    out->add[out->nadd++] = (struct gw_sigv4_header){"Authorization", out->authorization.data};
    out->add[out->nadd++] = (struct gw_sigv4_header){"X-Amz-Date", out->amz_date};
    if (p->session_token && *p->session_token)
        out->add[out->nadd++] = (struct gw_sigv4_header){"X-Amz-Security-Token", p->session_token};
    if (p->flags & GW_SIGV4_CONTENT_SHA256)
        out->add[out->nadd++] =
            (struct gw_sigv4_header){"X-Amz-Content-SHA256", out->payload_sha256};
    return GW_OK;
}
