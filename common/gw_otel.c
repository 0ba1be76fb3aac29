/*
 * OTLP/HTTP trace export (gw_otel.h): the configuration from the
 * environment, the sampler, the bounded queue and its exporter thread.
 */
#include "gw_otel.h"

#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "gw_codec.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_metrics.h"
#include "gw_rand.h"
#include "gw_time.h"

#define BATCH_FLUSH_BYTES (256u << 10)
#define MAX_RETRIES 3
/* At stop, what is queued gets this long at most (or the export timeout,
 * when shorter): a stopping pod has a grace period to keep. */
#define STOP_BUDGET_MS 5000

enum sampler { S_ON, S_OFF, S_RATIO };

struct block {
    struct block *next;
    char *data;
    size_t len, nspans;
};

struct gw_otel {
    /* the configuration (read-only once the thread runs) */
    char *url;
    int json;
    int gzip;
    long timeout_ms;
    char *ca_file, *client_cert, *client_key;
    struct curl_slist *headers;
    enum sampler root;
    int parent_based;
    uint64_t ratio_bound; /* traceidratio: sampled when the id's low 63 bits are below it */
    size_t max_queue, max_batch;
    long delay_ms, export_timeout_ms;
    struct gw_buf resource, scope;

    /* the queue */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct block *head, **tail;
    size_t queued;
    int stop;
    int64_t stop_until_us; /* set with stop: the last exports' deadline */
    uint64_t exported, dropped, failed, requests;
    pthread_t thread;
    int started;
    int64_t last_warn_us;
};

uint64_t gw_otel_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void gw_trace_ids(uint64_t *rng, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = gw_rand_next(rng); /* never zero: nor is the id */
        size_t k = n - i < 8 ? n - i : 8;
        memcpy(out + i, &v, k);
    }
}

/* ------------------------------------------------------- configuration */

/* The traces-specific variable when set, else the generic one. */
static const char *env2(const char *specific, const char *generic, const char **which)
{
    const char *v = getenv(specific);
    if (v && *v) {
        *which = specific;
        return v;
    }
    v = getenv(generic);
    *which = generic;
    return v && *v ? v : NULL;
}

static int fail(char *err, size_t n, const char *var, const char *why)
{
    snprintf(err, n, "%s: %s", var, why);
    return GW_EINVAL;
}

static int env_long(const char *var, long def, long min, long max, long *out, char *err,
                    size_t errlen)
{
    const char *v = getenv(var);
    if (!v || !*v) {
        *out = def;
        return GW_OK;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || x < min || x > max) {
        char why[96];
        snprintf(why, sizeof(why), "expected a whole number from %ld to %ld", min, max);
        return fail(err, errlen, var, why);
    }
    *out = x;
    return GW_OK;
}

static void trim(const char **s, size_t *n)
{
    while (*n && (**s == ' ' || **s == '\t'))
        (*s)++, (*n)--;
    while (*n && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
        (*n)--;
}

/* A "k=v,k2=v2" list (W3C baggage's shape: values percent-encoded): each
 * pair to cb. GW_EINVAL on a member without a key or '='. */
static int each_pair(const char *list,
                     int (*cb)(void *arg, const char *k, size_t kn, const char *v, size_t vn),
                     void *arg)
{
    for (const char *p = list; *p;) {
        const char *c = strchr(p, ',');
        size_t n = c ? (size_t)(c - p) : strlen(p);
        const char *m = p;
        trim(&m, &n);
        if (n) {
            const char *eq = memchr(m, '=', n);
            if (!eq || eq == m)
                return GW_EINVAL;
            const char *k = m, *v = eq + 1;
            size_t kn = (size_t)(eq - m), vn = n - kn - 1;
            trim(&k, &kn);
            trim(&v, &vn);
            if (!kn)
                return GW_EINVAL;
            char dec[1024];
            if (vn >= sizeof(dec))
                return GW_EINVAL;
            long dn = gw_pct_decode(v, vn, dec, 0);
            dec[dn] = '\0';
            int rc = cb(arg, k, kn, dec, (size_t)dn);
            if (rc != GW_OK)
                return rc;
        }
        p = c ? c + 1 : p + strlen(p);
    }
    return GW_OK;
}

static int add_header(void *arg, const char *k, size_t kn, const char *v, size_t vn)
{
    struct gw_otel *o = arg;
    for (size_t i = 0; i < kn; i++)
        if (k[i] <= ' ' || k[i] == ':' || k[i] > '~')
            return GW_EINVAL;
    for (size_t i = 0; i < vn; i++)
        if (v[i] == '\r' || v[i] == '\n' || v[i] == '\0')
            return GW_EINVAL;
    char line[1200];
    snprintf(line, sizeof(line), "%.*s: %.*s", (int)kn, k, (int)vn, v);
    struct curl_slist *l = curl_slist_append(o->headers, line);
    if (!l)
        return GW_ENOMEM;
    o->headers = l;
    return GW_OK;
}

struct resource_ctx {
    struct gw_buf *b;
    int has_name, has_instance;
};

static int add_resource(void *arg, const char *k, size_t kn, const char *v, size_t vn)
{
    struct resource_ctx *r = arg;
    char key[256];
    if (kn >= sizeof(key))
        return GW_EINVAL;
    memcpy(key, k, kn);
    key[kn] = '\0';
    if (strcmp(key, "service.name") == 0) {
        if (r->has_name)
            return GW_OK; /* OTEL_SERVICE_NAME wins */
        r->has_name = 1;
    }
    if (strcmp(key, "service.instance.id") == 0)
        r->has_instance = 1;
    return gw_pb_kv_str(r->b, 1, key, v, vn);
}

static int parse_sampler(struct gw_otel *o, char *err, size_t errlen)
{
    const char *s = getenv("OTEL_TRACES_SAMPLER");
    if (!s || !*s)
        s = "parentbased_always_on";
    const char *base = s;
    o->parent_based = strncmp(s, "parentbased_", 12) == 0;
    if (o->parent_based)
        base = s + 12;
    if (strcmp(base, "always_on") == 0) {
        o->root = S_ON;
    } else if (strcmp(base, "always_off") == 0) {
        o->root = S_OFF;
    } else if (strcmp(base, "traceidratio") == 0) {
        o->root = S_RATIO;
        const char *a = getenv("OTEL_TRACES_SAMPLER_ARG");
        double r = 1.0;
        if (a && *a) {
            char *end;
            r = strtod(a, &end);
            if (*end || !(r >= 0.0 && r <= 1.0))
                return fail(err, errlen, "OTEL_TRACES_SAMPLER_ARG",
                            "expected a probability from 0 to 1");
        }
        /* 2^63 * r, exactly 2^63 for 1 (every id's low 63 bits are below). */
        o->ratio_bound = r >= 1.0 ? UINT64_C(1) << 63 : (uint64_t)(r * 9223372036854775808.0);
    } else {
        return fail(err, errlen, "OTEL_TRACES_SAMPLER",
                    "expected always_on, always_off, traceidratio, parentbased_always_on, "
                    "parentbased_always_off or parentbased_traceidratio");
    }
    return GW_OK;
}

static int parse_endpoint(struct gw_otel *o, int *off, char *err, size_t errlen)
{
    const char *var, *url = env2("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", &var);
    int whole = url != NULL;
    if (!url)
        url = env2("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT", &var);
    if (!url) {
        *off = 1;
        return GW_OK;
    }
    if (strncmp(url, "http://", 7) != 0 && strncmp(url, "https://", 8) != 0)
        return fail(err, errlen, var, "expected an http:// or https:// URL");
    size_t n = strlen(url);
    while (!whole && n && url[n - 1] == '/')
        n--;
    size_t cap = n + sizeof("/v1/traces");
    o->url = malloc(cap);
    if (!o->url)
        return GW_ENOMEM;
    snprintf(o->url, cap, "%.*s%s", (int)n, url, whole ? "" : "/v1/traces");
    return GW_OK;
}

static char *dup_env(const char *specific, const char *generic)
{
    const char *which, *v = env2(specific, generic, &which);
    return v ? strdup(v) : NULL;
}

static int configure(struct gw_otel *o, const char *service, const char *instance, int *off,
                     char *err, size_t errlen)
{
    const char *v = getenv("OTEL_SDK_DISABLED");
    if (v && strcasecmp(v, "true") == 0) {
        *off = 1;
        return GW_OK;
    }
    v = getenv("OTEL_TRACES_EXPORTER");
    if (v && *v && strcmp(v, "otlp") != 0) {
        if (strcmp(v, "none") == 0) {
            *off = 1;
            return GW_OK;
        }
        return fail(err, errlen, "OTEL_TRACES_EXPORTER", "expected otlp or none");
    }
    int rc = parse_endpoint(o, off, err, errlen);
    if (rc != GW_OK || *off)
        return rc;
    const char *var;
    v = env2("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL", &var);
    if (v && strcmp(v, "http/json") == 0)
        o->json = 1;
    else if (v && strcmp(v, "http/protobuf") != 0)
        return fail(err, errlen, var,
                    "expected http/protobuf or http/json (this build exports over HTTP only)");
    v = env2("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "OTEL_EXPORTER_OTLP_COMPRESSION", &var);
    if (v && strcmp(v, "gzip") == 0)
        o->gzip = 1;
    else if (v && strcmp(v, "none") != 0)
        return fail(err, errlen, var, "expected gzip or none");
    v = env2("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT", &var);
    rc = env_long(v ? var : "OTEL_EXPORTER_OTLP_TIMEOUT", 10000, 1, 600000, &o->timeout_ms, err,
                  errlen);
    if (rc != GW_OK)
        return rc;
    o->headers = curl_slist_append(NULL, o->json ? "Content-Type: application/json"
                                                 : "Content-Type: application/x-protobuf");
    if (o->headers && o->gzip)
        o->headers = curl_slist_append(o->headers, "Content-Encoding: gzip");
    if (o->headers) /* libcurl's own Expect: 100-continue would wait a second */
        o->headers = curl_slist_append(o->headers, "Expect:");
    if (!o->headers)
        return GW_ENOMEM;
    v = env2("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS", &var);
    if (v && (rc = each_pair(v, add_header, o)) != GW_OK)
        return rc == GW_ENOMEM ? rc : fail(err, errlen, var, "expected key=value,key=value");
    o->ca_file = dup_env("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", "OTEL_EXPORTER_OTLP_CERTIFICATE");
    o->client_cert = dup_env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
                             "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE");
    o->client_key =
        dup_env("OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY", "OTEL_EXPORTER_OTLP_CLIENT_KEY");
    if (!o->client_cert != !o->client_key)
        return fail(err, errlen, "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                    "set with OTEL_EXPORTER_OTLP_CLIENT_KEY, or neither");
    if ((rc = parse_sampler(o, err, errlen)) != GW_OK)
        return rc;
    long q, b;
    if ((rc = env_long("OTEL_BSP_MAX_QUEUE_SIZE", 2048, 1, 10000000, &q, err, errlen)) ||
        (rc = env_long("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512, 1, 10000000, &b, err, errlen)) ||
        (rc = env_long("OTEL_BSP_SCHEDULE_DELAY", 5000, 0, 3600000, &o->delay_ms, err, errlen)) ||
        (rc = env_long("OTEL_BSP_EXPORT_TIMEOUT", 30000, 1, 3600000, &o->export_timeout_ms, err,
                       errlen)))
        return rc;
    if (b > q)
        return fail(err, errlen, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                    "must not exceed OTEL_BSP_MAX_QUEUE_SIZE");
    o->max_queue = (size_t)q;
    o->max_batch = (size_t)b;

    /* The resource: service.name first (OTEL_SERVICE_NAME, else the
     * attributes', else ours), the attributes, then what is still missing. */
    struct resource_ctx r = {.b = &o->resource};
    v = getenv("OTEL_SERVICE_NAME");
    if (v && *v) {
        rc = gw_pb_kv_str(&o->resource, 1, "service.name", v, strlen(v));
        r.has_name = 1;
    }
    v = getenv("OTEL_RESOURCE_ATTRIBUTES");
    if (rc == GW_OK && v && (rc = each_pair(v, add_resource, &r)) != GW_OK)
        return rc == GW_ENOMEM
                   ? rc
                   : fail(err, errlen, "OTEL_RESOURCE_ATTRIBUTES", "expected key=value,key=value");
    if (rc == GW_OK && !r.has_name)
        rc = gw_pb_kv_str(&o->resource, 1, "service.name", service, strlen(service));
    char inst[320];
    if (!instance) {
        char host[256] = "";
        gethostname(host, sizeof(host) - 1);
        snprintf(inst, sizeof(inst), "%s:%ld", host, (long)getpid());
        instance = inst;
    }
    if (rc == GW_OK && !r.has_instance)
        rc = gw_pb_kv_str(&o->resource, 1, "service.instance.id", instance, strlen(instance));
    if (rc == GW_OK)
        rc = gw_pb_kv_str(&o->resource, 1, "telemetry.sdk.name", "llmgw", 5);
    if (rc == GW_OK)
        rc = gw_pb_kv_str(&o->resource, 1, "telemetry.sdk.language", "c", 1);
    if (rc == GW_OK)
        rc = gw_pb_bytes(&o->scope, 1, "llmgw", 5);
    return rc;
}

/* --------------------------------------------------------------- sampler */

int gw_otel_sampled(const struct gw_otel *o, const struct gw_trace_ctx *parent,
                    const uint8_t *trace_id)
{
    if (!o)
        return 0;
    if (parent && o->parent_based)
        return parent->flags & GW_TRACE_SAMPLED;
    switch (o->root) {
    case S_ON:
        return 1;
    case S_OFF:
        return 0;
    default: {
        /* The id's last 8 bytes, big-endian, low 63 bits: the same
         * decision for a trace in every process that samples it. */
        uint64_t v = 0;
        for (int i = 8; i < 16; i++)
            v = v << 8 | trace_id[i];
        return (v & ~(UINT64_C(1) << 63)) < o->ratio_bound;
    }
    }
}

void gw_otel_continue(const struct gw_otel *o, uint64_t *rng, const char *traceparent,
                      const char *tracestate, struct gw_trace_in *in)
{
    struct gw_trace_ctx parent;
    memset(in, 0, sizeof(*in));
    in->has_parent =
        traceparent && gw_traceparent_parse(traceparent, strlen(traceparent), &parent) == 0;
    if (in->has_parent) {
        memcpy(in->ctx.trace_id, parent.trace_id, GW_TRACE_ID_LEN);
        memcpy(in->parent, parent.span_id, GW_SPAN_ID_LEN);
        if (tracestate)
            in->tracestate_len =
                gw_tracestate_check(tracestate, strlen(tracestate), &in->tracestate_at);
    } else {
        gw_trace_ids(rng, in->ctx.trace_id, GW_TRACE_ID_LEN);
    }
    gw_trace_ids(rng, in->ctx.span_id, GW_SPAN_ID_LEN);
    in->ctx.flags = gw_otel_sampled(o, in->has_parent ? &parent : NULL, in->ctx.trace_id)
                        ? GW_TRACE_SAMPLED
                        : 0;
}

/* ----------------------------------------------------------------- queue */

/* Queues data (len bytes of nspans spans, malloc'd: taken), or drops and
 * counts them. */
static void submit_block(struct gw_otel *o, char *data, size_t len, size_t nspans)
{
    struct block *bl = data ? malloc(sizeof(*bl)) : NULL;
    pthread_mutex_lock(&o->mu);
    if (!bl || o->stop || o->queued + nspans > o->max_queue) {
        o->dropped += nspans;
        pthread_mutex_unlock(&o->mu);
        free(bl);
        free(data);
        return;
    }
    bl->next = NULL;
    bl->data = data;
    bl->len = len;
    bl->nspans = nspans;
    *o->tail = bl;
    o->tail = &bl->next;
    size_t before = o->queued;
    o->queued += nspans;
    if (before < o->max_batch && o->queued >= o->max_batch)
        pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

void gw_otel_submit(struct gw_otel *o, struct gw_buf *entries, size_t nspans)
{
    if (!entries->len)
        return;
    char *data = entries->data; /* taken: the buffer's next append allocates anew */
    size_t len = entries->len;
    entries->data = NULL;
    entries->len = entries->cap = 0;
    submit_block(o, data, len, nspans);
}

void gw_otel_stats(struct gw_otel *o, struct gw_otel_stats *s)
{
    memset(s, 0, sizeof(*s));
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    s->exported = o->exported;
    s->dropped = o->dropped;
    s->failed = o->failed;
    s->queued = o->queued;
    s->requests = o->requests;
    pthread_mutex_unlock(&o->mu);
}

/* ----------------------------------------------------------------- export */

static int gzip_into(struct gw_buf *out, const char *p, size_t n)
{
    z_stream z = {0};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return GW_ENOMEM;
    uLong bound = deflateBound(&z, (uLong)n) + 32;
    char *dst = malloc(bound);
    if (!dst) {
        deflateEnd(&z);
        return GW_ENOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)p;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)dst;
    z.avail_out = (uInt)bound;
    int zr = deflate(&z, Z_FINISH);
    size_t got = bound - z.avail_out;
    deflateEnd(&z);
    int rc = zr == Z_STREAM_END ? gw_buf_append(out, dst, got) : GW_ENOMEM;
    free(dst);
    return rc;
}

static size_t discard(char *p, size_t size, size_t n, void *arg)
{
    return size * n; /* a partial success's message is not read */
}

/* A request body in pieces (the protobuf request's head and the queued
 * blocks as they are; or one piece), read by libcurl in order. */
struct body {
    const struct iovec *piece;
    size_t npieces, i, off, len;
};

static size_t read_body(char *dst, size_t size, size_t n, void *arg)
{
    struct body *b = arg;
    size_t room = size * n, got = 0;
    while (got < room && b->i < b->npieces) {
        const struct iovec *v = &b->piece[b->i];
        size_t k = v->iov_len - b->off < room - got ? v->iov_len - b->off : room - got;
        memcpy(dst + got, (const char *)v->iov_base + b->off, k);
        got += k;
        b->off += k;
        if (b->off == v->iov_len) {
            b->i++;
            b->off = 0;
        }
    }
    return got;
}

/* One POST: 0 accepted, 1 retryable, -1 not. */
static int post(struct gw_otel *o, CURL *c, struct body *body, long timeout_ms)
{
    body->i = body->off = 0; /* from the start: a retry sends it all again */
    curl_easy_setopt(c, CURLOPT_URL, o->url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_READFUNCTION, read_body);
    curl_easy_setopt(c, CURLOPT_READDATA, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body->len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, o->headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 5000 ? timeout_ms : 5000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    if (o->ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, o->ca_file);
    if (o->client_cert) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, o->client_cert);
        curl_easy_setopt(c, CURLOPT_SSLKEY, o->client_key);
    }
    pthread_mutex_lock(&o->mu);
    o->requests++;
    pthread_mutex_unlock(&o->mu);
    CURLcode cr = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (cr == CURLE_OK && status >= 200 && status < 300)
        return 0;
    int retry = cr != CURLE_OK || status == 429 || status == 502 || status == 503 || status == 504;
    int64_t now = gw_now_us();
    if (now - o->last_warn_us > 60000000 || !o->last_warn_us) { /* a line a minute at most */
        o->last_warn_us = now;
        gw_logf(GW_LOG_WARN, "otel: a trace export failed", "{s:s,s:i,s:s,s:b}", "endpoint", o->url,
                "status", (int)status, "error",
                cr == CURLE_OK ? "http status" : curl_easy_strerror(cr), "retrying",
                retry && !o->stop);
    }
    return retry ? 1 : -1;
}

/* The body of blocks (n of them): protobuf, as the head and the blocks;
 * JSON or gzip, made whole in out. GW_OK, or an error (nothing to send). */
static int make_body(struct gw_otel *o, struct block *bl, size_t n, struct iovec *piece,
                     struct gw_buf *head, struct gw_buf *out, struct body *b)
{
    size_t entries = 0, i = 0;
    for (struct block *k = bl; k; k = k->next)
        entries += k->len;
    int rc = gw_trace_request_head(head, o->resource.data, o->resource.len, o->scope.data,
                                   o->scope.len, entries);
    piece[i++] = (struct iovec){head->data, head->len};
    for (struct block *k = bl; k; k = k->next)
        piece[i++] = (struct iovec){k->data, k->len};
    *b = (struct body){.piece = piece, .npieces = n + 1, .len = head->len + entries};
    if (rc != GW_OK || (!o->json && !o->gzip))
        return rc;
    /* JSON is transcoded from the blocks; gzip compresses the whole. */
    struct gw_buf whole;
    gw_buf_init(&whole, 0);
    if (o->json) {
        const void **ents = malloc(n * sizeof(*ents));
        size_t *lens = malloc(n * sizeof(*lens));
        rc = ents && lens ? GW_OK : GW_ENOMEM;
        i = 0;
        for (struct block *k = bl; rc == GW_OK && k; k = k->next, i++) {
            ents[i] = k->data;
            lens[i] = k->len;
        }
        if (rc == GW_OK)
            rc = gw_trace_json(&whole, o->resource.data, o->resource.len, o->scope.data,
                               o->scope.len, ents, lens, n);
        free(ents);
        free(lens);
    } else {
        for (i = 0; rc == GW_OK && i <= n; i++)
            rc = gw_buf_append(&whole, piece[i].iov_base, piece[i].iov_len);
    }
    if (rc == GW_OK && o->gzip)
        rc = gzip_into(out, whole.data, whole.len);
    else if (rc == GW_OK) {
        *out = whole; /* taken */
        gw_buf_init(&whole, 0);
    }
    gw_buf_free(&whole);
    piece[0] = (struct iovec){out->data, out->len};
    *b = (struct body){.piece = piece, .npieces = 1, .len = out->len};
    return rc;
}

/* Sends blocks (nspans spans); retries while not stopping. */
static void export_blocks(struct gw_otel *o, CURL *c, struct block *bl, size_t nspans)
{
    size_t n = 0;
    for (struct block *b = bl; b; b = b->next)
        n++;
    struct iovec *piece = malloc((n + 1) * sizeof(*piece));
    struct gw_buf head, whole;
    gw_buf_init(&head, 0);
    gw_buf_init(&whole, 0);
    struct body body;
    int r = -1;
    if (piece && make_body(o, bl, n, piece, &head, &whole, &body) == GW_OK) {
        int64_t until = gw_now_us() + o->export_timeout_ms * 1000;
        pthread_mutex_lock(&o->mu);
        if (o->stop && o->stop_until_us < until)
            until = o->stop_until_us;
        pthread_mutex_unlock(&o->mu);
        for (int attempt = 0; gw_now_us() < until; attempt++) {
            int64_t left_ms = (until - gw_now_us()) / 1000;
            r = post(o, c, &body,
                     left_ms < o->timeout_ms ? (left_ms > 0 ? left_ms : 1) : o->timeout_ms);
            if (r <= 0 || attempt == MAX_RETRIES)
                break;
            /* 1, 2, 4 s, cut short when the daemon stops */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1L << attempt;
            pthread_mutex_lock(&o->mu);
            while (!o->stop && pthread_cond_timedwait(&o->cv, &o->mu, &ts) != ETIMEDOUT)
                ;
            int stopping = o->stop;
            pthread_mutex_unlock(&o->mu);
            if (stopping || gw_now_us() >= until)
                break;
        }
    }
    pthread_mutex_lock(&o->mu);
    if (r == 0)
        o->exported += nspans;
    else
        o->failed += nspans;
    pthread_mutex_unlock(&o->mu);
    gw_buf_free(&head);
    gw_buf_free(&whole);
    free(piece);
}

static void free_blocks(struct block *b)
{
    while (b) {
        struct block *n = b->next;
        free(b->data);
        free(b);
        b = n;
    }
}

/* Takes up to a batch's worth of blocks off the queue (one at least). */
static struct block *take(struct gw_otel *o, size_t *nspans)
{
    struct block *first = o->head, **end = &o->head;
    size_t n = 0;
    while (*end && (n == 0 || n + (*end)->nspans <= o->max_batch)) {
        n += (*end)->nspans;
        end = &(*end)->next;
    }
    o->head = *end;
    *end = NULL;
    if (!o->head)
        o->tail = &o->head;
    o->queued -= n;
    *nspans = n;
    return n ? first : NULL;
}

static void *exporter(void *arg)
{
    struct gw_otel *o = arg;
    CURL *c = curl_easy_init();
    pthread_mutex_lock(&o->mu);
    for (;;) {
        if (!o->stop && o->queued < o->max_batch) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += o->delay_ms / 1000;
            ts.tv_nsec += o->delay_ms % 1000 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            while (!o->stop && o->queued < o->max_batch &&
                   pthread_cond_timedwait(&o->cv, &o->mu, &ts) != ETIMEDOUT)
                ;
        }
        size_t n;
        struct block *bl = take(o, &n);
        int stopping = o->stop;
        pthread_mutex_unlock(&o->mu);
        if (bl) {
            if (c)
                export_blocks(o, c, bl, n);
            else {
                pthread_mutex_lock(&o->mu);
                o->failed += n;
                pthread_mutex_unlock(&o->mu);
            }
            free_blocks(bl);
        }
        pthread_mutex_lock(&o->mu);
        if (stopping && !o->head)
            break;
    }
    pthread_mutex_unlock(&o->mu);
    curl_easy_cleanup(c);
    return NULL;
}

/* ----------------------------------------------------------- lifecycle */

static void otel_free(struct gw_otel *o)
{
    free_blocks(o->head);
    free(o->url);
    free(o->ca_file);
    free(o->client_cert);
    free(o->client_key);
    curl_slist_free_all(o->headers);
    gw_buf_free(&o->resource);
    gw_buf_free(&o->scope);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

int gw_otel_from_env(const char *service, const char *instance, struct gw_otel **out, char *err,
                     size_t errlen)
{
    *out = NULL;
    struct gw_otel *o = calloc(1, sizeof(*o));
    if (!o) {
        snprintf(err, errlen, "out of memory");
        return GW_ENOMEM;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_cond_init(&o->cv, &ca);
    pthread_condattr_destroy(&ca);
    o->tail = &o->head;
    gw_buf_init(&o->resource, 0);
    gw_buf_init(&o->scope, 0);
    int off = 0;
    int rc = configure(o, service, instance, &off, err, errlen);
    if (rc == GW_ENOMEM)
        snprintf(err, errlen, "out of memory");
    if (rc != GW_OK || off) {
        otel_free(o);
        return rc;
    }
    if (pthread_create(&o->thread, NULL, exporter, o) != 0) {
        snprintf(err, errlen, "could not start the trace exporter's thread");
        otel_free(o);
        return GW_ENOMEM;
    }
    o->started = 1;
    *out = o;
    return GW_OK;
}

void gw_otel_free(struct gw_otel *o)
{
    if (!o)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = 1;
    long budget = o->export_timeout_ms < STOP_BUDGET_MS ? o->export_timeout_ms : STOP_BUDGET_MS;
    o->stop_until_us = gw_now_us() + (int64_t)budget * 1000;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
    if (o->started)
        pthread_join(o->thread, NULL);
    otel_free(o);
}

/* --------------------------------------------------------------- metrics */

struct otel_metrics {
    struct gw_otel *o;
    struct gw_metric *spans, *queue, *requests;
    struct gw_otel_stats seen; /* what the counters were given so far */
};

static void add_delta(struct gw_metric *m, const char *label, uint64_t now, uint64_t *seen)
{
    const char *v[] = {label};
    if (now > *seen)
        gw_metric_inc(m, label ? v : NULL, now - *seen);
    *seen = now;
}

static void collect(struct gw_metrics *m, void *arg)
{
    struct otel_metrics *om = arg;
    struct gw_otel_stats s;
    gw_otel_stats(om->o, &s);
    add_delta(om->spans, "exported", s.exported, &om->seen.exported);
    add_delta(om->spans, "dropped", s.dropped, &om->seen.dropped);
    add_delta(om->spans, "failed", s.failed, &om->seen.failed);
    add_delta(om->requests, NULL, s.requests, &om->seen.requests);
    gw_metric_set(om->queue, NULL, (double)s.queued);
}

void gw_otel_metrics(struct gw_metrics *m, struct gw_otel *o)
{
    static struct otel_metrics om; /* one exporter per process */
    if (!m || !o)
        return;
    static const char *const result[] = {"result", NULL};
    om.o = o;
    om.spans = gw_metrics_counter(m, "llmgw_otel_spans_total",
                                  "Trace spans by fate: exported (a collector took them), dropped "
                                  "(the queue was full), failed (the export failed for good)",
                                  result);
    om.queue =
        gw_metrics_gauge(m, "llmgw_otel_queue_spans", "Trace spans waiting for the exporter", NULL);
    om.requests = gw_metrics_counter(m, "llmgw_otel_export_requests_total",
                                     "OTLP export requests sent, retries included", NULL);
    gw_metrics_on_collect(m, collect, &om);
}

/* ----------------------------------------------------------- loop batch */

/* The turn's spans go to the queue as one block of their exact size; the
 * batch keeps its buffer for the next turn. */
static void batch_flush(evutil_socket_t fd, short what, void *arg)
{
    struct gw_otel_batch *b = arg;
    if (!b->n)
        return;
    char *data = malloc(b->spans.len);
    if (data)
        memcpy(data, b->spans.data, b->spans.len);
    submit_block(b->o, data, b->spans.len, b->n);
    gw_buf_reset(&b->spans);
    b->n = 0;
}

int gw_otel_batch_init(struct gw_otel_batch *b, struct gw_otel *o, struct event_base *base)
{
    memset(b, 0, sizeof(*b));
    b->o = o;
    gw_span_init(&b->span);
    gw_buf_init(&b->spans, 0);
    if (!o)
        return GW_OK;
    b->flush = event_new(base, -1, 0, batch_flush, b);
    return b->flush ? GW_OK : GW_ENOMEM;
}

void gw_otel_batch_end(struct gw_otel_batch *b, uint64_t end_ns)
{
    if (!b->o)
        return;
    if (gw_span_finish(&b->span, end_ns, &b->spans) != GW_OK) {
        pthread_mutex_lock(&b->o->mu);
        b->o->dropped++;
        pthread_mutex_unlock(&b->o->mu);
        return;
    }
    if (b->n++ == 0 && b->flush)
        event_active(b->flush, 0, 0);
    if (b->spans.len >= BATCH_FLUSH_BYTES)
        batch_flush(-1, 0, b); /* the active event then finds nothing */
}

void gw_otel_batch_free(struct gw_otel_batch *b)
{
    if (b->o)
        batch_flush(-1, 0, b);
    if (b->flush)
        event_free(b->flush);
    b->flush = NULL;
    gw_buf_free(&b->spans);
    gw_span_free(&b->span);
}
