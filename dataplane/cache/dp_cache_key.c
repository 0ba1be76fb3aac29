#include "dp_cache_key.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"

/* ------------------------------------------------------------ cacheable */

int dp_cache_cacheable(const struct canon_req *r, int route_deterministic, const char **why)
{
    const char *no = NULL;
    if (r->opaque.status != 0)
        no = "the request has fields the canonical model does not carry";
    else if (r->logprobs || r->top_logprobs > 0)
        no = "logprobs asked";
    else if (r->has_temperature && !(r->temperature <= 0))
        no = "temperature > 0";
    else if (!r->has_temperature && !route_deterministic)
        no = r->has_top_p && r->top_p < 1 ? "top_p < 1 without temperature"
                                          : "temperature unset on a non-deterministic route";
    if (why)
        *why = no;
    return no == NULL;
}

/* ------------------------------------------------------------------ key */

/* SHA-256 fetched once, as common/gw_crypto.c does (EVP_sha256() looks the
 * algorithm up at every digest under a shared lock). */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

/* The hashed encoding, fed through a small buffer. Errors stick. */
struct hw {
    EVP_MD_CTX *ctx;
    unsigned char buf[4096];
    size_t n;
    int rc;
};

static void hw_flush(struct hw *h)
{
    if (h->n && h->rc == GW_OK && EVP_DigestUpdate(h->ctx, h->buf, h->n) != 1)
        h->rc = GW_ENOMEM;
    h->n = 0;
}

static void hw_raw(struct hw *h, const void *p, size_t n)
{
    if (n == 0)
        return;
    if (n > sizeof(h->buf) - h->n) {
        hw_flush(h);
        if (n > sizeof(h->buf)) {
            if (h->rc == GW_OK && EVP_DigestUpdate(h->ctx, p, n) != 1)
                h->rc = GW_ENOMEM;
            return;
        }
    }
    memcpy(h->buf + h->n, p, n);
    h->n += n;
}

static void hw_u64(struct hw *h, uint64_t v)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    hw_raw(h, b, 8);
}

static void hw_int(struct hw *h, long long v)
{
    hw_u64(h, (uint64_t)v);
}

/* A double by its bits; -0 is 0. */
static void hw_dbl(struct hw *h, double d)
{
    uint64_t v;
    if (d == 0)
        d = 0;
    memcpy(&v, &d, sizeof(v));
    hw_u64(h, v);
}

static void hw_bytes(struct hw *h, const void *p, size_t n)
{
    hw_u64(h, n);
    hw_raw(h, p, n);
}

/* A string: its length then its bytes; NULL has a length no string has. */
static void hw_str(struct hw *h, const char *s)
{
    if (!s)
        hw_u64(h, UINT64_MAX);
    else
        hw_bytes(h, s, strlen(s));
}

/* A JSON value as canonical text (compact, keys sorted); NULL as NULL. */
static void hw_json(struct hw *h, const json_t *j)
{
    if (!j) {
        hw_str(h, NULL);
        return;
    }
    char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    if (!s) {
        h->rc = h->rc ? h->rc : GW_EINVAL;
        return;
    }
    hw_str(h, s);
    free(s);
}

static int hw_begin(struct hw *h, const char *domain)
{
    pthread_once(&sha256_once, sha256_fetch);
    memset(h, 0, sizeof(*h));
    if (!(h->ctx = EVP_MD_CTX_new()))
        return GW_ENOMEM;
    if (EVP_DigestInit_ex(h->ctx, sha256_md ? sha256_md : EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        return GW_ENOMEM;
    }
    hw_str(h, domain);
    return GW_OK;
}

static int hw_end(struct hw *h, unsigned char out[DP_CACHE_KEY_BYTES])
{
    unsigned int mdlen = 0;
    hw_flush(h);
    int rc = h->rc;
    if (rc == GW_OK && (EVP_DigestFinal_ex(h->ctx, out, &mdlen) != 1 || mdlen != 32))
        rc = GW_ENOMEM;
    EVP_MD_CTX_free(h->ctx);
    return rc;
}

/* Every field of a part, whatever its type: a field a type does not use is
 * NULL / 0 and costs a few bytes. */
static void hw_parts(struct hw *h, const struct canon_part *p, size_t n, int depth)
{
    hw_u64(h, n);
    for (size_t i = 0; i < n; i++) {
        hw_int(h, p[i].type);
        hw_str(h, p[i].text);
        hw_str(h, p[i].url);
        hw_str(h, p[i].media_type);
        hw_str(h, p[i].data);
        hw_str(h, p[i].detail);
        hw_str(h, p[i].id);
        hw_str(h, p[i].name);
        hw_str(h, p[i].arguments);
        hw_int(h, p[i].is_error);
        hw_str(h, p[i].signature);
        hw_str(h, p[i].filename);
        hw_str(h, p[i].title);
        hw_str(h, p[i].context);
        hw_int(h, p[i].citations);
        hw_int(h, p[i].cache);
        /* A tool result's content is one level deep (TEXT and IMAGE). */
        if (depth < 2)
            hw_parts(h, p[i].content, p[i].content ? p[i].ncontent : 0, depth + 1);
        else
            hw_u64(h, 0);
    }
}

int dp_cache_digest(const struct canon_req *r, unsigned char out[DP_CACHE_KEY_BYTES])
{
    struct hw h;
    int rc = hw_begin(&h, "llmgw cache chat v1");
    if (rc != GW_OK)
        return rc;
    hw_parts(&h, r->system, r->nsystem, 0);
    hw_u64(&h, r->nmessages);
    for (size_t i = 0; i < r->nmessages; i++) {
        hw_int(&h, r->messages[i].role);
        hw_parts(&h, r->messages[i].parts, r->messages[i].nparts, 0);
    }
    hw_u64(&h, r->ntools);
    for (size_t i = 0; i < r->ntools; i++) {
        hw_str(&h, r->tools[i].name);
        hw_str(&h, r->tools[i].description);
        hw_json(&h, r->tools[i].parameters);
        hw_int(&h, r->tools[i].strict);
        hw_int(&h, r->tools[i].cache);
    }
    hw_int(&h, r->tool_choice);
    hw_str(&h, r->tool_choice == CANON_TC_NAMED ? r->tool_choice_name : NULL);
    hw_int(&h, r->parallel_tool_calls);
    /* Each sampling parameter with its flag; an unset one hashes as 0 so
     * a stale value behind a cleared flag cannot split the key. */
    hw_int(&h, r->has_temperature);
    hw_dbl(&h, r->has_temperature ? r->temperature : 0);
    hw_int(&h, r->has_top_p);
    hw_dbl(&h, r->has_top_p ? r->top_p : 0);
    hw_int(&h, r->has_top_k);
    hw_int(&h, r->has_top_k ? r->top_k : 0);
    hw_int(&h, r->has_max_tokens);
    hw_int(&h, r->has_max_tokens ? r->max_tokens : 0);
    hw_int(&h, r->has_seed);
    hw_int(&h, r->has_seed ? r->seed : 0);
    hw_int(&h, r->has_presence_penalty);
    hw_dbl(&h, r->has_presence_penalty ? r->presence_penalty : 0);
    hw_int(&h, r->has_frequency_penalty);
    hw_dbl(&h, r->has_frequency_penalty ? r->frequency_penalty : 0);
    hw_u64(&h, r->stop ? r->nstop : 0);
    for (size_t i = 0; r->stop && i < r->nstop; i++)
        hw_str(&h, r->stop[i]);
    hw_int(&h, r->format);
    hw_str(&h, r->format_name);
    hw_json(&h, r->format_schema);
    hw_int(&h, r->format_strict);
    hw_str(&h, r->reasoning_effort);
    hw_int(&h, r->reasoning_budget);
    hw_int(&h, r->reasoning_off);
    hw_str(&h, r->service_tier);
    hw_int(&h, r->logprobs);
    hw_int(&h, r->top_logprobs);
    return hw_end(&h, out);
}

int dp_cache_digest_embed(const struct canon_embed_req *r, unsigned char out[DP_CACHE_KEY_BYTES])
{
    struct hw h;
    int rc = hw_begin(&h, "llmgw cache embed v1");
    if (rc != GW_OK)
        return rc;
    hw_u64(&h, r->inputs ? r->ninputs : 0);
    for (size_t i = 0; r->inputs && i < r->ninputs; i++)
        hw_str(&h, r->inputs[i]);
    hw_int(&h, r->dimensions);
    hw_int(&h, r->base64);
    return hw_end(&h, out);
}

int dp_cache_key_at(const struct dp_cache_where *w, const unsigned char digest[DP_CACHE_KEY_BYTES],
                    unsigned char out[DP_CACHE_KEY_BYTES])
{
    struct hw h;
    int rc = hw_begin(&h, "llmgw cache key v1");
    if (rc != GW_OK)
        return rc;
    hw_int(&h, w->scope);
    hw_str(&h, w->scope == DP_CACHE_SCOPE_GLOBAL ? NULL : w->scope_id);
    hw_str(&h, w->route);
    hw_bytes(&h, w->route_fp, w->route_fp ? w->route_fp_len : 0);
    hw_str(&h, w->provider);
    hw_str(&h, w->model);
    hw_bytes(&h, digest, DP_CACHE_KEY_BYTES);
    return hw_end(&h, out);
}

int dp_cache_key(const struct dp_cache_where *w, const struct canon_req *r,
                 unsigned char out[DP_CACHE_KEY_BYTES])
{
    unsigned char d[DP_CACHE_KEY_BYTES];
    int rc = dp_cache_digest(r, d);
    return rc != GW_OK ? rc : dp_cache_key_at(w, d, out);
}

int dp_cache_key_embed(const struct dp_cache_where *w, const struct canon_embed_req *r,
                       unsigned char out[DP_CACHE_KEY_BYTES])
{
    unsigned char d[DP_CACHE_KEY_BYTES];
    int rc = dp_cache_digest_embed(r, d);
    return rc != GW_OK ? rc : dp_cache_key_at(w, d, out);
}

/* ---------------------------------------------------------------- blob */

#define BLOB_MAGIC "LGWC"
#define BLOB_VERSION 2
#define BLOB_NULL 0xffffffffu
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static uint64_t fnv1a(const unsigned char *p, size_t n)
{
    uint64_t h = FNV_OFFSET;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * FNV_PRIME;
    return h;
}

static int put_u8(struct gw_buf *b, unsigned v)
{
    unsigned char c = (unsigned char)v;
    return gw_buf_append(b, &c, 1);
}

static int put_le(struct gw_buf *b, uint64_t v, int n)
{
    unsigned char x[8];
    for (int i = 0; i < n; i++)
        x[i] = (unsigned char)(v >> (8 * i));
    return gw_buf_append(b, x, (size_t)n);
}

static int put_mem(struct gw_buf *b, const char *p, size_t n)
{
    if (n >= BLOB_NULL)
        return GW_ELIMIT;
    int rc = put_le(b, n, 4);
    return rc == GW_OK && n ? gw_buf_append(b, p, n) : rc;
}

static int put_str(struct gw_buf *b, const char *s)
{
    return s ? put_mem(b, s, strlen(s)) : put_le(b, BLOB_NULL, 4);
}

/* A gw_buf of the accumulator (NULL when nothing was appended) as a
 * string: never NULL, so a replay always has something to emit. */
static int put_buf(struct gw_buf *b, const struct gw_buf *v)
{
    return put_mem(b, v && v->data ? v->data : "", v && v->data ? v->len : 0);
}

static int put_meta(struct gw_buf *b, const struct dp_cache_meta *m)
{
    static const struct dp_cache_meta none;
    if (!m)
        m = &none;
    int rc = put_le(b, (uint64_t)m->created_ms, 8);
    rc = rc ? rc : put_le(b, (uint64_t)m->cost_picodollars, 8);
    rc = rc ? rc : put_u8(b, m->has_cost != 0);
    return rc ? rc : put_str(b, m->currency);
}

static int encode(const struct canon_acc *a, const struct dp_cache_meta *m, struct gw_buf *b)
{
    int rc = gw_buf_append(b, BLOB_MAGIC, 4);
    rc = rc ? rc : put_u8(b, BLOB_VERSION);
    rc = rc ? rc : put_meta(b, m);
    rc = rc ? rc : put_str(b, a->model);
    rc = rc ? rc : put_str(b, a->service_tier);
    rc = rc ? rc : put_u8(b, a->stop);
    rc = rc ? rc : put_u8(b, a->usage.have != 0);
    const int64_t u[6] = {a->usage.input,          a->usage.cache_read, a->usage.cache_write_5m,
                          a->usage.cache_write_1h, a->usage.output,     a->usage.reasoning};
    for (int i = 0; rc == GW_OK && i < 6; i++)
        rc = put_le(b, (uint64_t)u[i], 8);
    rc = rc ? rc : put_buf(b, a->text);
    rc = rc ? rc : put_le(b, a->nthinks, 4);
    for (size_t i = 0; rc == GW_OK && i < a->nthinks; i++) {
        rc = put_u8(b, a->thinks[i].redacted != 0);
        rc = rc ? rc : put_buf(b, a->thinks[i].text);
        rc = rc ? rc : put_str(b, a->thinks[i].redacted ? NULL : a->thinks[i].signature);
    }
    rc = rc ? rc : put_le(b, a->ntools, 4);
    for (size_t i = 0; rc == GW_OK && i < a->ntools; i++) {
        rc = put_str(b, a->tools[i].id ? a->tools[i].id : "");
        rc = rc ? rc : put_str(b, a->tools[i].name ? a->tools[i].name : "");
        rc = rc ? rc : put_buf(b, a->tools[i].args);
    }
    size_t nc = json_array_size(a->citations);
    rc = rc ? rc : put_le(b, nc, 4);
    for (size_t i = 0; rc == GW_OK && i < nc; i++) {
        json_t *c = json_array_get(a->citations, i);
        json_int_t at = json_integer_value(json_object_get(c, "at"));
        char *s = json_dumps(json_object_get(c, "citation"), JSON_COMPACT);
        size_t tl = a->text && a->text->data ? a->text->len : 0;
        rc = !s || at < 0 || (uint64_t)at > tl ? GW_EINVAL : put_le(b, (uint64_t)at, 8);
        rc = rc ? rc : put_str(b, s);
        free(s);
    }
    return rc ? rc : put_le(b, fnv1a((const unsigned char *)b->data, b->len), 8);
}

int dp_cache_encode(const struct canon_acc *acc, const struct dp_cache_meta *meta, size_t max,
                    unsigned char **blob, size_t *len)
{
    *blob = NULL;
    *len = 0;
    if (!acc->done || acc->logprobs)
        return GW_EINVAL;
    struct gw_buf b;
    gw_buf_init(&b, max);
    int rc = encode(acc, meta, &b);
    if (rc != GW_OK) {
        gw_buf_free(&b);
        return rc;
    }
    *blob = (unsigned char *)b.data; /* gw_buf's memory is malloc'd */
    *len = b.len;
    return GW_OK;
}

/* The reader: every read checks what is left; the first failure sticks and
 * every later read returns zeros. */
struct rd {
    const unsigned char *p;
    size_t left;
    int bad;
};

static uint64_t get_le(struct rd *r, int n)
{
    if (r->bad || r->left < (size_t)n) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += n;
    r->left -= (size_t)n;
    return v;
}

/* A string view: ptr (NULL for the NULL string), len. Its bytes are not
 * NUL-terminated in the blob; replay copies the few that must be. */
struct sv {
    const char *p;
    size_t len;
};

static struct sv get_str(struct rd *r)
{
    struct sv v = {NULL, 0};
    uint64_t n = get_le(r, 4);
    if (r->bad || n == BLOB_NULL)
        return v;
    if (n > r->left) {
        r->bad = 1;
        return v;
    }
    v.p = (const char *)r->p;
    v.len = (size_t)n;
    r->p += n;
    r->left -= (size_t)n;
    return v;
}

/* A NUL-terminated copy of a view for an event field (NULL stays NULL).
 * Strings in the blob may hold a NUL byte; the copy then ends there, as
 * the original C string did. */
static int cstr(const struct sv *v, char **out)
{
    *out = NULL;
    if (!v->p)
        return GW_OK;
    if (!(*out = malloc(v->len + 1)))
        return GW_ENOMEM;
    memcpy(*out, v->p, v->len);
    (*out)[v->len] = '\0';
    return GW_OK;
}

/* Walks the blob (after its checksum was checked); with s NULL only
 * checks it, else emits it. Returns 0, GW_EINVAL (malformed), GW_ENOMEM
 * or GW_ECLOSED (the sink stopped). */
/* The meta-data at the blob's start (after magic and version). */
static void get_meta(struct rd *r, struct dp_cache_meta *m)
{
    memset(m, 0, sizeof(*m));
    m->created_ms = (int64_t)get_le(r, 8);
    m->cost_picodollars = (int64_t)get_le(r, 8);
    unsigned has = (unsigned)get_le(r, 1);
    struct sv cur = get_str(r);
    if (has > 1 || cur.len >= sizeof(m->currency)) {
        r->bad = 1;
        return;
    }
    m->has_cost = (int)has;
    if (cur.p)
        memcpy(m->currency, cur.p, cur.len);
}

static int walk(const unsigned char *blob, size_t len, const struct canon_sink *s)
{
    struct rd r = {blob + 5, len - 5 - 8, 0};
    struct dp_cache_meta meta;
    get_meta(&r, &meta);
    struct sv model = get_str(&r), tier = get_str(&r);
    unsigned stop = (unsigned)get_le(&r, 1);
    unsigned have = (unsigned)get_le(&r, 1);
    int64_t u[6];
    for (int i = 0; i < 6; i++)
        u[i] = (int64_t)get_le(&r, 8);
    if (r.bad || stop > CANON_STOP_REFUSAL || have > 1)
        return GW_EINVAL;
    struct canon_usage usage = {u[0], u[1], u[2], u[3], u[4], u[5], (int)have};
    char *m = NULL, *t = NULL;
    int rc = GW_OK;
    if (s && ((rc = cstr(&model, &m)) != GW_OK || (rc = cstr(&tier, &t)) != GW_OK)) {
        free(m);
        return rc;
    }
    struct canon_event ev = {.type = CANON_EV_START, .name = m, .service_tier = t};
    if (s && canon_emit(s, &ev) != 0)
        rc = GW_ECLOSED;
    struct canon_event ue = {.type = CANON_EV_USAGE, .usage = &usage, .service_tier = t};
    if (rc == GW_OK && s && have && canon_emit(s, &ue) != 0)
        rc = GW_ECLOSED;
    struct sv text = get_str(&r);
    uint64_t nthinks = get_le(&r, 4);
    for (uint64_t i = 0; rc == GW_OK && !r.bad && i < nthinks; i++) {
        unsigned red = (unsigned)get_le(&r, 1);
        struct sv tx = get_str(&r), sig = get_str(&r);
        if (r.bad || red > 1 || !tx.p || (red && sig.p) || (red && !tx.len)) {
            rc = GW_EINVAL;
            break;
        }
        if (!s)
            continue;
        struct canon_event e = {.type = CANON_EV_REASONING, .redacted = (int)red};
        if (tx.len) {
            e.text = tx.p;
            e.len = tx.len;
            if (canon_emit(s, &e) != 0)
                rc = GW_ECLOSED;
        }
        if (rc == GW_OK && sig.p) {
            char *sg = NULL;
            if ((rc = cstr(&sig, &sg)) != GW_OK)
                break;
            struct canon_event se = {.type = CANON_EV_REASONING, .text = "", .signature = sg};
            if (canon_emit(s, &se) != 0)
                rc = GW_ECLOSED;
            free(sg);
        }
    }
    /* The tools come after the text in the blob; the text (and its
     * citations, which follow the tools) is emitted after them are read,
     * so the blob is walked in order and the events still go text first. */
    const unsigned char *tools_at = r.p;
    size_t tools_left = r.left;
    uint64_t ntools = get_le(&r, 4);
    for (uint64_t i = 0; !r.bad && i < ntools; i++) {
        struct sv id = get_str(&r), name = get_str(&r), args = get_str(&r);
        if (!id.p || !name.p || !args.p)
            r.bad = 1;
    }
    uint64_t ncit = get_le(&r, 4);
    size_t done = 0; /* text emitted so far */
    for (uint64_t i = 0; rc == GW_OK && !r.bad && i < ncit; i++) {
        uint64_t at = get_le(&r, 8);
        struct sv c = get_str(&r);
        if (r.bad || !c.p || !text.p || at < done || at > text.len) {
            rc = GW_EINVAL;
            break;
        }
        if (!s)
            continue;
        struct canon_event ce = {.type = CANON_EV_CHUNK, .text = text.p + done, .len = at - done};
        if (at > done && canon_emit(s, &ce) != 0) {
            rc = GW_ECLOSED;
            break;
        }
        done = at;
        char *cj = NULL;
        if ((rc = cstr(&c, &cj)) != GW_OK)
            break;
        struct canon_event ci = {.type = CANON_EV_CITATION, .citation = cj};
        if (canon_emit(s, &ci) != 0)
            rc = GW_ECLOSED;
        free(cj);
    }
    if (rc == GW_OK && (r.bad || r.left != 0 || !text.p))
        rc = GW_EINVAL;
    if (rc == GW_OK && s && text.len > done) {
        struct canon_event ce = {
            .type = CANON_EV_CHUNK, .text = text.p + done, .len = text.len - done};
        if (canon_emit(s, &ce) != 0)
            rc = GW_ECLOSED;
    }
    /* The tools, read again from where they start. */
    struct rd tr = {tools_at, tools_left, 0};
    ntools = get_le(&tr, 4);
    for (uint64_t i = 0; rc == GW_OK && s && i < ntools; i++) {
        struct sv id = get_str(&tr), name = get_str(&tr), args = get_str(&tr);
        char *ids = NULL, *names = NULL;
        if ((rc = cstr(&id, &ids)) != GW_OK || (rc = cstr(&name, &names)) != GW_OK) {
            free(ids);
            break;
        }
        struct canon_event e = {
            .type = CANON_EV_TOOL_START, .index = (int)i, .id = ids, .name = names};
        if (canon_emit(s, &e) != 0)
            rc = GW_ECLOSED;
        free(ids);
        free(names);
        struct canon_event d = {
            .type = CANON_EV_TOOL_DELTA, .index = (int)i, .text = args.p, .len = args.len};
        if (rc == GW_OK && args.len && canon_emit(s, &d) != 0)
            rc = GW_ECLOSED;
        struct canon_event en = {.type = CANON_EV_TOOL_END, .index = (int)i};
        if (rc == GW_OK && canon_emit(s, &en) != 0)
            rc = GW_ECLOSED;
    }
    if (rc == GW_OK && s && have && canon_emit(s, &ue) != 0)
        rc = GW_ECLOSED;
    struct canon_event de = {.type = CANON_EV_DONE, .stop = (enum canon_stop)stop};
    if (rc == GW_OK && s)
        (void)canon_emit(s, &de); /* a sink may well stop at the end */
    free(m);
    free(t);
    return rc;
}

/* The blob's frame: its magic and version, and its checksum. */
#define BODY_MAGIC "LGWB"
#define BODY_VERSION 1

static int framed(const unsigned char *blob, size_t len, const char *magic, unsigned version)
{
    if (!blob || len < 5 + 8 || memcmp(blob, magic, 4) != 0 || blob[4] != version)
        return 0;
    uint64_t sum = 0;
    for (int i = 0; i < 8; i++)
        sum |= (uint64_t)blob[len - 8 + (size_t)i] << (8 * i);
    return sum == fnv1a(blob, len - 8);
}

int dp_cache_meta_read(const unsigned char *blob, size_t len, struct dp_cache_meta *m)
{
    if (!framed(blob, len, BLOB_MAGIC, BLOB_VERSION) &&
        !framed(blob, len, BODY_MAGIC, BODY_VERSION))
        return GW_EINVAL;
    struct rd r = {blob + 5, len - 5 - 8, 0};
    get_meta(&r, m);
    return r.bad ? GW_EINVAL : GW_OK;
}

int dp_cache_encode_body(const void *body, size_t n, const struct dp_cache_meta *meta, size_t max,
                         unsigned char **blob, size_t *len)
{
    *blob = NULL;
    *len = 0;
    struct gw_buf b;
    gw_buf_init(&b, max);
    int rc = gw_buf_append(&b, BODY_MAGIC, 4);
    rc = rc ? rc : put_u8(&b, BODY_VERSION);
    rc = rc ? rc : put_meta(&b, meta);
    rc = rc ? rc : put_mem(&b, body, n);
    rc = rc ? rc : put_le(&b, fnv1a((const unsigned char *)b.data, b.len), 8);
    if (rc != GW_OK) {
        gw_buf_free(&b);
        return rc;
    }
    *blob = (unsigned char *)b.data;
    *len = b.len;
    return GW_OK;
}

int dp_cache_body(const unsigned char *blob, size_t len, const char **body, size_t *n)
{
    if (!framed(blob, len, BODY_MAGIC, BODY_VERSION))
        return GW_EINVAL;
    struct rd r = {blob + 5, len - 5 - 8, 0};
    struct dp_cache_meta m;
    get_meta(&r, &m);
    struct sv v = get_str(&r);
    if (r.bad || !v.p || r.left != 0)
        return GW_EINVAL;
    *body = v.p;
    *n = v.len;
    return GW_OK;
}

int dp_cache_replay(const unsigned char *blob, size_t len, const struct canon_sink *s)
{
    if (!framed(blob, len, BLOB_MAGIC, BLOB_VERSION))
        return GW_EINVAL;
    int rc = walk(blob, len, NULL);
    return rc != GW_OK ? rc : walk(blob, len, s);
}
