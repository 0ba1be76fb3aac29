/*
 * Glue the secret backends share: one synchronous libcurl exchange with
 * bounded time and size, JSON member lookup that decodes straight into a
 * buffer that is wiped after use, and error messages naming the ref.
 *
 * Buffers that may hold a secret (answers, decoded values, header lists
 * with tokens) are sized before they are filled, so no realloc leaves a
 * partial copy behind in freed memory, and are overwritten before free.
 */
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cp_secret_backend.h"
#include "gw_error.h"
#include "gw_json.h"

int cp_secret_fail(char *err, size_t errlen, const struct cp_secret_ref *ref, int rc,
                   const char *fmt, ...)
{
    if (!err || errlen == 0)
        return rc;
    int n = snprintf(err, errlen, "secret ref '%s': ", ref->text);
    if (n < 0 || (size_t)n >= errlen)
        return rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return rc;
}

void cp_secret_buf_wipe(struct gw_buf *b)
{
    if (b->data)
        OPENSSL_cleanse(b->data, b->cap);
    gw_buf_free(b);
}

void cp_secret_slist_wipe(struct curl_slist *l)
{
    for (struct curl_slist *i = l; i; i = i->next)
        if (i->data)
            OPENSSL_cleanse(i->data, strlen(i->data));
    curl_slist_free_all(l);
}

void cp_secret_excerpt(char *dst, size_t dstlen, const char *s, size_t n)
{
    if (dstlen == 0)
        return;
    size_t o = 0;
    for (size_t i = 0; i < n && o + 1 < dstlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch >= 0x20 && ch != 0x7f)
            dst[o++] = (char)ch;
    }
    dst[o] = '\0';
}

/* Grows b to hold n bytes without moving later (see the top comment). */
static int presize(struct gw_buf *b, size_t n)
{
    static const char zeros[1024];
    int rc = GW_OK;
    for (size_t left = n; rc == GW_OK && left > 0;) {
        size_t k = left < sizeof(zeros) ? left : sizeof(zeros);
        rc = gw_buf_append(b, zeros, k);
        left -= k;
    }
    gw_buf_reset(b);
    return rc;
}

struct sink {
    struct gw_buf *b;
    int over;
};

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    struct sink *s = arg;
    size_t n = size * nmemb;
    if (gw_buf_append(s->b, p, n) != GW_OK) {
        s->over = 1;
        return 0;
    }
    return n;
}

int cp_secret_http(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                   const char *backend, const char *method, const char *url,
                   const struct curl_slist *headers, const char *body, size_t body_len,
                   long *status, struct gw_buf *answer, char *err, size_t errlen)
{
    *status = 0;
    if (presize(answer, CP_SECRET_ANSWER_MAX) != GW_OK)
        return cp_secret_fail(err, errlen, ref, GW_ENOMEM, "out of memory");
    CURL *e = curl_easy_init();
    if (!e)
        return cp_secret_fail(err, errlen, ref, GW_ENOMEM, "out of memory (curl)");
    char cerr[CURL_ERROR_SIZE] = "";
    struct sink s = {answer, 0};
    curl_easy_setopt(e, CURLOPT_URL, url);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
    } else {
        curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.0/8,::1");
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
                     c->connect_timeout_ms > 0 ? c->connect_timeout_ms : 5000L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms > 0 ? c->timeout_ms : 10000L);
    CURLcode cc = curl_easy_perform(e);
    int rc = GW_OK;
    if (s.over) {
        rc = cp_secret_fail(err, errlen, ref, GW_ELIMIT, "%s answered more than %d bytes", backend,
                            CP_SECRET_ANSWER_MAX);
    } else if (cc != CURLE_OK) {
        rc = cp_secret_fail(err, errlen, ref, cc == CURLE_OUT_OF_MEMORY ? GW_ENOMEM : GW_EIO,
                            "%s cannot be reached: %s", backend,
                            cerr[0] ? cerr : curl_easy_strerror(cc));
    } else {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    }
    curl_easy_cleanup(e);
    return rc;
}

/* The jansson way, for text the span helpers are unsure about (a key spelled
 * with escapes, a duplicate key). jansson's copies are not wiped: this path
 * is for unusual answers only. */
static int json_string_slow(const char *s, size_t n, const char *const *keys, size_t nkeys,
                            struct gw_buf *out)
{
    json_t *doc = json_loadb(s, n, JSON_REJECT_DUPLICATES, NULL);
    if (!doc)
        return GW_EINVAL;
    json_t *v = doc;
    for (size_t i = 0; v && i < nkeys; i++)
        v = json_is_object(v) ? json_object_get(v, keys[i]) : NULL;
    int rc = !v || json_is_null(v) ? GW_ENOTFOUND : !json_is_string(v) ? GW_EINVAL : GW_OK;
    if (rc == GW_OK)
        rc = gw_buf_append(out, json_string_value(v), json_string_length(v));
    json_decref(doc);
    return rc;
}

int cp_secret_json_string(const char *s, size_t n, const char *const *keys, size_t nkeys,
                          struct gw_buf *out)
{
    if (out->len != 0 || !gw_json_valid(s, n, 64))
        return GW_EINVAL;
    const char *vp = s;
    size_t vn = n;
    for (size_t i = 0; i < nkeys; i++) {
        int found = gw_json_span_member(vp, vn, keys[i], &vp, &vn);
        if (found < 0)
            return json_string_slow(s, n, keys, nkeys, out);
        if (found == 0)
            return GW_ENOTFOUND;
    }
    if (gw_json_span_is_null(vp, vn))
        return GW_ENOTFOUND;
    if (vn < 2 || vp[0] != '"')
        return GW_EINVAL;
    /* The decoded string is no longer than its spelling. */
    int rc = presize(out, vn);
    return rc == GW_OK ? gw_json_span_string(vp, vn, out) : rc;
}
