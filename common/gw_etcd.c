#include "gw_etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"

struct gw_etcd {
    char *endpoints[GW_ETCD_MAX_ENDPOINTS];
    size_t n;
    size_t current; /* the endpoint that answered last */
    long timeout_ms;
    CURL *easy;                        /* kept: its connection to etcd is reused */
    char *tls_ca, *tls_cert, *tls_key; /* gw_etcd_set_tls (NULL: not given) */
    struct curl_slist *headers;
    struct gw_buf answer;
};

/* ---------------------------------------------------------------------- */
/* Encoding */

/* n characters of base64 at s into a malloc'd, NUL-terminated buffer (*out,
 * *len without the NUL): GW_OK, GW_EINVAL or GW_ENOMEM. */
static int b64_dup(const char *s, size_t n, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    unsigned char *d = malloc(n / 4 * 3 + 1);
    if (!d)
        return GW_ENOMEM;
    int rc = gw_b64_decode(s, n, d, n / 4 * 3, len);
    if (rc != GW_OK) {
        free(d);
        return rc;
    }
    d[*len] = '\0';
    *out = (char *)d;
    return GW_OK;
}

int gw_etcd_prefix_end(const char *key, char **end, size_t *len)
{
    size_t n = strlen(key);
    while (n > 0 && (unsigned char)key[n - 1] == 0xff)
        n--;
    char *e = malloc(n ? n + 1 : 2);
    if (!e)
        return GW_ENOMEM;
    if (n == 0) { /* every key: etcd's "\0" */
        e[0] = e[1] = '\0';
        *end = e;
        *len = 1;
        return GW_OK;
    }
    memcpy(e, key, n);
    e[n - 1] = (char)((unsigned char)e[n - 1] + 1);
    e[n] = '\0';
    *end = e;
    *len = n;
    return GW_OK;
}

int gw_etcd_json_int64(const json_t *obj, const char *name, int64_t *out)
{
    *out = 0;
    json_t *v = json_object_get(obj, name);
    if (!v)
        return GW_OK;
    if (json_is_integer(v)) {
        *out = json_integer_value(v);
        return GW_OK;
    }
    const char *s = json_string_value(v);
    if (!s || !*s)
        return GW_EINVAL;
    char *e;
    errno = 0;
    long long x = strtoll(s, &e, 10);
    if (*e || errno)
        return GW_EINVAL;
    *out = x;
    return GW_OK;
}

void gw_etcd_kv_free(struct gw_etcd_kv *kv)
{
    free(kv->key);
    free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

/* A base64 member (absent: empty) into *out. */
static int b64_member(const json_t *obj, const char *name, char **out, size_t *len)
{
    json_t *v = json_object_get(obj, name);
    if (v && !json_is_string(v))
        return GW_EINVAL;
    const char *s = v ? json_string_value(v) : "";
    return b64_dup(s, v ? json_string_length(v) : 0, out, len);
}

int gw_etcd_kv_decode(const json_t *obj, struct gw_etcd_kv *kv)
{
    memset(kv, 0, sizeof(*kv));
    size_t klen;
    int rc = json_is_object(obj) ? GW_OK : GW_EINVAL;
    if (rc == GW_OK)
        rc = b64_member(obj, "key", &kv->key, &klen);
    if (rc == GW_OK)
        rc = b64_member(obj, "value", &kv->value, &kv->value_len);
    if (rc == GW_OK)
        rc = gw_etcd_json_int64(obj, "create_revision", &kv->create_revision);
    if (rc == GW_OK)
        rc = gw_etcd_json_int64(obj, "mod_revision", &kv->mod_revision);
    if (rc == GW_OK)
        rc = gw_etcd_json_int64(obj, "version", &kv->version);
    if (rc == GW_OK)
        rc = gw_etcd_json_int64(obj, "lease", &kv->lease);
    if (rc != GW_OK)
        gw_etcd_kv_free(kv);
    return rc == GW_ENOMEM ? GW_ENOMEM : rc;
}

static int fail(struct gw_etcd_err *err, enum gw_etcd_kind kind, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(struct gw_etcd_err *err, enum gw_etcd_kind kind, int code, const char *fmt, ...)
{
    if (err) {
        err->kind = kind;
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof(err->message), fmt, ap);
        va_end(ap);
    }
    return kind == GW_ETCD_UNREACHABLE ? GW_EIO : kind == GW_ETCD_NOMEM ? GW_ENOMEM : GW_EINVAL;
}

int gw_etcd_answer_parse(const char *body, size_t len, json_t **root, struct gw_etcd_err *err)
{
    *root = NULL;
    json_error_t je;
    json_t *j = json_loadb(body, len, JSON_DISABLE_EOF_CHECK, &je);
    if (!json_is_object(j)) {
        json_decref(j);
        return fail(err, GW_ETCD_BADREPLY, 0, "the answer is not a JSON object");
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        /* Unary calls: {"error":"...","message":"...","code":N}; streamed
         * ones (keepalive): {"error":{"grpc_code":N,"message":"..."}}. */
        const json_t *o = json_is_object(e) ? e : j;
        json_t *code = json_object_get(o, json_is_object(e) ? "grpc_code" : "code");
        const char *msg = json_string_value(json_object_get(o, "message"));
        if (!msg)
            msg = json_string_value(e);
        int rc = fail(err, GW_ETCD_REFUSED, (int)json_integer_value(code), "%s",
                      msg ? msg : "(no message)");
        json_decref(j);
        return rc;
    }
    json_t *r = json_object_get(j, "result");
    if (json_is_object(r)) {
        json_incref(r);
        json_decref(j);
        j = r;
    }
    *root = j;
    return GW_OK;
}

const char *gw_etcd_strerror(const struct gw_etcd_err *err, char *buf, size_t len)
{
    switch (err->kind) {
    case GW_ETCD_NONE:
        snprintf(buf, len, "no error");
        break;
    case GW_ETCD_UNREACHABLE:
        snprintf(buf, len, "etcd unreachable: %s", err->message);
        break;
    case GW_ETCD_REFUSED:
        snprintf(buf, len, "etcd error %d at %s: %s", err->code, err->endpoint, err->message);
        break;
    case GW_ETCD_BADREPLY:
        snprintf(buf, len, "unreadable etcd answer from %s: %s", err->endpoint, err->message);
        break;
    case GW_ETCD_NOMEM:
        snprintf(buf, len, "out of memory");
        break;
    }
    return buf;
}

/* ---------------------------------------------------------------------- */
/* The client */

struct gw_etcd *gw_etcd_new(const char *endpoints, long timeout_ms, char *err, size_t errlen)
{
    struct gw_etcd *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    gw_buf_init(&c->answer, GW_ETCD_ANSWER_MAX);
    const char *p = endpoints ? endpoints : "";
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *s = p;
        p += n + (p[n] == ',');
        while (n && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '/'))
            n--;
        if (!n)
            continue;
        if (c->n == GW_ETCD_MAX_ENDPOINTS || n > 200 || memchr(s, ' ', n)) {
            snprintf(err, errlen, "at most %d endpoints, each a URL (http://host:port)",
                     GW_ETCD_MAX_ENDPOINTS);
            gw_etcd_free(c);
            return NULL;
        }
        int scheme = (n > 7 && !strncmp(s, "http://", 7)) || (n > 8 && !strncmp(s, "https://", 8));
        if (!scheme && memmem(s, n, "://", 3)) {
            snprintf(err, errlen, "'%.*s': only http:// and https:// endpoints", (int)n, s);
            gw_etcd_free(c);
            return NULL;
        }
        char *u = malloc(n + 8);
        if (!u) {
            snprintf(err, errlen, "out of memory");
            gw_etcd_free(c);
            return NULL;
        }
        snprintf(u, n + 8, "%s%.*s", scheme ? "" : "http://", (int)n, s);
        c->endpoints[c->n++] = u;
    }
    if (!c->n) {
        snprintf(err, errlen, "no etcd endpoint given");
        gw_etcd_free(c);
        return NULL;
    }
    c->easy = curl_easy_init();
    c->headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!c->easy || !c->headers) {
        snprintf(err, errlen, "out of memory (curl)");
        gw_etcd_free(c);
        return NULL;
    }
    return c;
}

int gw_etcd_set_tls(struct gw_etcd *c, const char *ca_file, const char *cert_file,
                    const char *key_file)
{
    if (!cert_file != !key_file)
        return GW_EINVAL;
    char *ca = ca_file ? strdup(ca_file) : NULL, *cert = cert_file ? strdup(cert_file) : NULL,
         *key = key_file ? strdup(key_file) : NULL;
    if ((ca_file && !ca) || (cert_file && !cert) || (key_file && !key)) {
        free(ca);
        free(cert);
        free(key);
        return GW_ENOMEM;
    }
    free(c->tls_ca);
    free(c->tls_cert);
    free(c->tls_key);
    c->tls_ca = ca;
    c->tls_cert = cert;
    c->tls_key = key;
    return GW_OK;
}

void gw_etcd_free(struct gw_etcd *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        free(c->endpoints[i]);
    free(c->tls_ca);
    free(c->tls_cert);
    free(c->tls_key);
    if (c->easy)
        curl_easy_cleanup(c->easy);
    curl_slist_free_all(c->headers);
    gw_buf_free(&c->answer);
    free(c);
}

size_t gw_etcd_endpoint_count(const struct gw_etcd *c)
{
    return c->n;
}

const char *gw_etcd_endpoint(const struct gw_etcd *c, size_t i)
{
    return i < c->n ? c->endpoints[i] : NULL;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *arg)
{
    struct gw_buf *b = arg;
    size_t n = size * nmemb;
    return gw_buf_append(b, p, n) == GW_OK ? n : 0;
}

/* One POST to one endpoint: 1 when it was reached (the answer is in
 * c->answer, *status set), 0 when not (err says why). */
static int post_one(struct gw_etcd *c, size_t i, const char *path, const char *body, long *status,
                    struct gw_etcd_err *err)
{
    char url[300], cerr[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof(url), "%s%s", c->endpoints[i], path);
    gw_buf_reset(&c->answer);
    CURL *e = c->easy;
    curl_easy_reset(e);
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &c->answer);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.0/8,::1");
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, c->timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
    if (c->tls_ca)
        curl_easy_setopt(e, CURLOPT_CAINFO, c->tls_ca);
    if (c->tls_cert) {
        curl_easy_setopt(e, CURLOPT_SSLCERT, c->tls_cert);
        curl_easy_setopt(e, CURLOPT_SSLKEY, c->tls_key);
    }
    CURLcode cc = curl_easy_perform(e);
    *status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
    if (err) {
        err->http_status = *status;
        snprintf(err->endpoint, sizeof(err->endpoint), "%s", c->endpoints[i]);
    }
    if (cc != CURLE_OK) {
        fail(err, GW_ETCD_UNREACHABLE, 0, "%s: %s", c->endpoints[i],
             cerr[0] ? cerr : curl_easy_strerror(cc));
        return 0;
    }
    if (*status == 502 || *status == 503 || *status == 504) {
        /* A proxy in front, or a member without quorum (code 14): another
         * endpoint may do better. */
        fail(err, GW_ETCD_UNREACHABLE, 14, "%s: HTTP %ld", c->endpoints[i], *status);
        return 0;
    }
    return 1;
}

/* POSTs body (stolen) to path on the endpoints in turn, from the one that
 * answered last. GW_OK with *root: the answer object. */
static int call(struct gw_etcd *c, const char *path, json_t *body, json_t **root,
                struct gw_etcd_err *err)
{
    *root = NULL;
    if (err)
        memset(err, 0, sizeof(*err));
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    if (!text)
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    long status = 0;
    int reached = 0;
    for (size_t k = 0; k < c->n && !reached; k++) {
        size_t i = (c->current + k) % c->n;
        reached = post_one(c, i, path, text, &status, err);
        if (reached)
            c->current = i;
    }
    free(text);
    if (!reached) {
        if (c->n > 1 && err)
            snprintf(err->endpoint, sizeof(err->endpoint), "all %zu endpoints", c->n);
        return GW_EIO;
    }
    int rc = gw_etcd_answer_parse(c->answer.data ? c->answer.data : "", c->answer.len, root, err);
    if (rc == GW_OK && (status < 200 || status > 299)) {
        json_decref(*root);
        *root = NULL;
        return fail(err, GW_ETCD_BADREPLY, 0, "HTTP %ld without an error body", status);
    }
    if (rc != GW_OK && err && err->kind == GW_ETCD_REFUSED && err->code == 14)
        err->kind = GW_ETCD_UNREACHABLE, rc = GW_EIO; /* unavailable: no quorum */
    return rc;
}

/* A string member holding base64 of p (n bytes) into obj; 0 or GW_ENOMEM. */
static int set_b64(json_t *obj, const char *name, const void *p, size_t n)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = gw_b64_append(&b, p, n);
    if (rc == GW_OK &&
        json_object_set_new(obj, name, json_stringn(b.data ? b.data : "", b.len)) != 0)
        rc = GW_ENOMEM;
    gw_buf_free(&b);
    return rc;
}

static int set_i64(json_t *obj, const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    return json_object_set_new(obj, name, json_string(s)) ? GW_ENOMEM : GW_OK;
}

/* {"key": b64(key)} plus, for a prefix, its range_end. NULL: no memory. */
static json_t *key_obj(const char *key, int prefix)
{
    json_t *o = json_object();
    int rc = o ? set_b64(o, "key", key, strlen(key)) : GW_ENOMEM;
    if (rc == GW_OK && prefix) {
        char *end;
        size_t n;
        rc = gw_etcd_prefix_end(key, &end, &n);
        if (rc == GW_OK) {
            rc = set_b64(o, "range_end", end, n);
            free(end);
        }
    }
    if (rc != GW_OK) {
        json_decref(o);
        return NULL;
    }
    return o;
}

static json_t *put_obj(const char *key, const void *value, size_t len, int64_t lease)
{
    json_t *o = key_obj(key, 0);
    if (o && (set_b64(o, "value", value, len) || (lease && set_i64(o, "lease", lease)))) {
        json_decref(o);
        return NULL;
    }
    return o;
}

int gw_etcd_lease_grant(struct gw_etcd *c, int64_t ttl_s, int64_t *id, struct gw_etcd_err *err)
{
    json_t *root;
    int rc = call(c, "/v3/lease/grant", json_pack("{s:I}", "TTL", (json_int_t)ttl_s), &root, err);
    if (rc != GW_OK)
        return rc;
    if (gw_etcd_json_int64(root, "ID", id) != GW_OK || *id == 0)
        rc = fail(err, GW_ETCD_BADREPLY, 0, "a lease grant without an ID");
    json_decref(root);
    return rc;
}

int gw_etcd_lease_keepalive(struct gw_etcd *c, int64_t id, int64_t *ttl_s, struct gw_etcd_err *err)
{
    json_t *root, *body = json_object();
    *ttl_s = 0;
    if (!body || set_i64(body, "ID", id)) {
        json_decref(body);
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    }
    int rc = call(c, "/v3/lease/keepalive", body, &root, err);
    if (rc != GW_OK)
        return rc;
    if (gw_etcd_json_int64(root, "TTL", ttl_s) != GW_OK)
        rc = fail(err, GW_ETCD_BADREPLY, 0, "a keepalive answer with an unreadable TTL");
    json_decref(root);
    if (*ttl_s < 0)
        *ttl_s = 0;
    return rc;
}

int gw_etcd_lease_revoke(struct gw_etcd *c, int64_t id, struct gw_etcd_err *err)
{
    json_t *root, *body = json_object();
    if (!body || set_i64(body, "ID", id)) {
        json_decref(body);
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    }
    int rc = call(c, "/v3/lease/revoke", body, &root, err);
    if (rc == GW_EINVAL && err && err->kind == GW_ETCD_REFUSED && err->code == 5)
        return GW_OK; /* gone already */
    json_decref(root);
    return rc;
}

int gw_etcd_put(struct gw_etcd *c, const char *key, const void *value, size_t len, int64_t lease,
                struct gw_etcd_err *err)
{
    json_t *body = put_obj(key, value, len, lease), *root;
    if (!body)
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    int rc = call(c, "/v3/kv/put", body, &root, err);
    json_decref(root);
    return rc;
}

void gw_etcd_range_free(struct gw_etcd_range *r)
{
    for (size_t i = 0; i < r->n; i++)
        gw_etcd_kv_free(&r->kvs[i]);
    free(r->kvs);
    memset(r, 0, sizeof(*r));
}

/* The kvs of a range answer (or a txn's response_range) into out. */
static int decode_range(const json_t *o, struct gw_etcd_range *out, struct gw_etcd_err *err)
{
    memset(out, 0, sizeof(*out));
    json_t *kvs = json_object_get(o, "kvs");
    if (kvs && !json_is_array(kvs))
        return fail(err, GW_ETCD_BADREPLY, 0, "kvs is not an array");
    size_t n = json_array_size(kvs);
    if (n && !(out->kvs = calloc(n, sizeof(*out->kvs))))
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    for (size_t i = 0; i < n; i++) {
        int rc = gw_etcd_kv_decode(json_array_get(kvs, i), &out->kvs[out->n]);
        if (rc != GW_OK) {
            gw_etcd_range_free(out);
            return rc == GW_ENOMEM ? fail(err, GW_ETCD_NOMEM, 0, "out of memory")
                                   : fail(err, GW_ETCD_BADREPLY, 0, "an unreadable kv");
        }
        out->n++;
    }
    if (gw_etcd_json_int64(json_object_get(o, "header"), "revision", &out->revision) != GW_OK) {
        gw_etcd_range_free(out);
        return fail(err, GW_ETCD_BADREPLY, 0, "an unreadable revision");
    }
    return GW_OK;
}

int gw_etcd_get(struct gw_etcd *c, const char *key, int prefix, struct gw_etcd_range *out,
                struct gw_etcd_err *err)
{
    memset(out, 0, sizeof(*out));
    json_t *body = key_obj(key, prefix), *root;
    if (!body)
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    int rc = call(c, "/v3/kv/range", body, &root, err);
    if (rc != GW_OK)
        return rc;
    rc = decode_range(root, out, err);
    json_decref(root);
    return rc;
}

int gw_etcd_delete(struct gw_etcd *c, const char *key, int prefix, int64_t *deleted,
                   struct gw_etcd_err *err)
{
    json_t *body = key_obj(key, prefix), *root;
    int64_t d = 0;
    if (!body)
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    int rc = call(c, "/v3/kv/deleterange", body, &root, err);
    if (rc == GW_OK && gw_etcd_json_int64(root, "deleted", &d) != GW_OK)
        rc = fail(err, GW_ETCD_BADREPLY, 0, "an unreadable deleted count");
    json_decref(root);
    if (deleted)
        *deleted = d;
    return rc;
}

void gw_etcd_txn_free(struct gw_etcd_txn *t)
{
    gw_etcd_kv_free(&t->kv);
    memset(t, 0, sizeof(*t));
}

int gw_etcd_create_or_get(struct gw_etcd *c, const char *key, const void *value, size_t len,
                          int64_t lease, struct gw_etcd_txn *out, struct gw_etcd_err *err)
{
    memset(out, 0, sizeof(*out));
    json_t *cmp = key_obj(key, 0), *put = put_obj(key, value, len, lease), *get = key_obj(key, 0);
    json_t *body = NULL, *root;
    if (cmp && put && get && !json_object_set_new(cmp, "result", json_string("EQUAL")) &&
        !json_object_set_new(cmp, "target", json_string("CREATE")) &&
        !set_i64(cmp, "create_revision", 0))
        body = json_pack("{s:[O],s:[{s:O}],s:[{s:O}]}", "compare", cmp, "success", "request_put",
                         put, "failure", "request_range", get);
    json_decref(cmp);
    json_decref(put);
    json_decref(get);
    if (!body)
        return fail(err, GW_ETCD_NOMEM, 0, "out of memory");
    int rc = call(c, "/v3/kv/txn", body, &root, err);
    if (rc != GW_OK)
        return rc;
    json_t *ok = json_object_get(root, "succeeded");
    out->succeeded = json_is_true(ok);
    if (gw_etcd_json_int64(json_object_get(root, "header"), "revision", &out->revision) != GW_OK)
        rc = fail(err, GW_ETCD_BADREPLY, 0, "an unreadable revision");
    if (rc == GW_OK && !out->succeeded) {
        json_t *rr = json_object_get(json_array_get(json_object_get(root, "responses"), 0),
                                     "response_range");
        struct gw_etcd_range r;
        if (!json_is_object(rr))
            rc = fail(err, GW_ETCD_BADREPLY, 0, "a failed txn without its range");
        else if ((rc = decode_range(rr, &r, err)) == GW_OK) {
            if (r.n) {
                out->found = 1;
                out->kv = r.kvs[0];
                memset(&r.kvs[0], 0, sizeof(r.kvs[0]));
            }
            gw_etcd_range_free(&r);
        }
    }
    json_decref(root);
    if (rc != GW_OK)
        gw_etcd_txn_free(out);
    return rc;
}
