/*
 * W3C Trace Context, and OTLP spans as protobuf (gw_trace.h). The wire
 * format is protobuf's: a field is its tag (number << 3 | wire type) then
 * a varint (type 0), 8 little-endian bytes (type 1) or a length and bytes
 * (type 2). Fields may come in any order and repeated ones interleave, so
 * a span's attributes are appended as the caller names them.
 */
#include "gw_trace.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gw_codec.h"
#include "gw_error.h"
#include "gw_json.h"

/* ------------------------------------------------------------- context */

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

/* n lowercase hex digits at s into n / 2 bytes; -1 when one is not. */
static int lower_hex(const char *s, size_t n, uint8_t *out)
{
    for (size_t i = 0; i < n; i++)
        if ((s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f'))
            return -1;
    return gw_hex_decode(s, n, out) == GW_OK ? 0 : -1;
}

static int all_zero(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

int gw_traceparent_parse(const char *s, size_t len, struct gw_trace_ctx *out)
{
    while (len && ows(*s))
        s++, len--;
    while (len && ows(s[len - 1]))
        len--;
    if (len < GW_TRACEPARENT_LEN)
        return -1;
    uint8_t version, flags;
    if (lower_hex(s, 2, &version) || version == 0xff)
        return -1;
    /* Version 00 is exactly its 55 characters; a later one may go on. */
    if (version == 0 ? len != GW_TRACEPARENT_LEN
                     : len > GW_TRACEPARENT_LEN && s[GW_TRACEPARENT_LEN] != '-')
        return -1;
    if (s[2] != '-' || s[35] != '-' || s[52] != '-')
        return -1;
    struct gw_trace_ctx c;
    if (lower_hex(s + 3, 32, c.trace_id) || lower_hex(s + 36, 16, c.span_id) ||
        lower_hex(s + 53, 2, &flags))
        return -1;
    if (all_zero(c.trace_id, sizeof(c.trace_id)) || all_zero(c.span_id, sizeof(c.span_id)))
        return -1;
    c.flags = flags;
    *out = c;
    return 0;
}

void gw_traceparent_format(const uint8_t *trace_id, const uint8_t *span_id, uint8_t flags,
                           char out[GW_TRACEPARENT_LEN + 1])
{
    memcpy(out, "00-", 3);
    gw_hex_encode(trace_id, GW_TRACE_ID_LEN, out + 3);
    out[35] = '-';
    gw_hex_encode(span_id, GW_SPAN_ID_LEN, out + 36);
    out[52] = '-';
    gw_hex_encode(&flags, 1, out + 53);
}

static int key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '*' ||
           c == '/' || c == '@';
}

/* One list member "key=value" (trimmed, not empty): W3C's characters. */
static int member_ok(const char *m, size_t n)
{
    const char *eq = memchr(m, '=', n);
    if (!eq || eq == m || eq - m > 256)
        return 0;
    if (!((m[0] >= 'a' && m[0] <= 'z') || (m[0] >= '0' && m[0] <= '9')))
        return 0;
    for (const char *k = m; k < eq; k++)
        if (!key_char(*k))
            return 0;
    size_t vn = n - (size_t)(eq - m) - 1;
    if (vn == 0 || vn > 256 || eq[vn] == ' ')
        return 0;
    for (size_t i = 1; i <= vn; i++)
        if (eq[i] < 0x20 || eq[i] > 0x7e || eq[i] == ',' || eq[i] == '=')
            return 0;
    return 1;
}

size_t gw_tracestate_check(const char *s, size_t len, size_t *start)
{
    size_t a = 0;
    while (a < len && ows(s[a]))
        a++;
    while (len > a && ows(s[len - 1]))
        len--;
    *start = a;
    if (len - a > GW_TRACESTATE_MAX)
        return 0;
    int members = 0;
    for (size_t i = a; i < len;) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        size_t m = i, e = j;
        while (m < e && ows(s[m]))
            m++;
        while (e > m && ows(s[e - 1]))
            e--;
        if (e > m && (!member_ok(s + m, e - m) || ++members > 32))
            return 0;
        i = j + 1;
    }
    return members ? len - a : 0;
}

/* ------------------------------------------------------------- writing */

/* A span's fields are written straight into reserved room: each piece's
 * size is known first (protobuf's lengths come before what they measure),
 * room for it is made once, and the bytes go in without further checks. */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2 };

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

/* Field numbers here are below 16: a tag is one byte. */
static uint8_t *put_tag(uint8_t *p, unsigned field, unsigned wt)
{
    *p++ = (uint8_t)(field << 3 | wt);
    return p;
}

static uint8_t *put_len(uint8_t *p, unsigned field, size_t n)
{
    return put_varint(put_tag(p, field, WT_LEN), n);
}

static uint8_t *put_bytes(uint8_t *p, unsigned field, const void *d, size_t n)
{
    p = put_len(p, field, n);
    if (n)
        memcpy(p, d, n);
    return p + n;
}

static uint8_t *put_fixed64(uint8_t *p, unsigned field, uint64_t v)
{
    p = put_tag(p, field, WT_I64);
    for (int i = 0; i < 8; i++)
        *p++ = (uint8_t)(v >> (8 * i));
    return p;
}

/* A length-delimited field's whole size, its one-byte tag included. */
static size_t lenfield(size_t n)
{
    return 1 + varint_len(n) + n;
}

/* Room for n more bytes at b's end (and its NUL): where to write, or NULL
 * (GW_ENOMEM / GW_ELIMIT in *rc). */
static uint8_t *room(struct gw_buf *b, size_t n, int *rc)
{
    if (*rc != GW_OK)
        return NULL;
    if ((*rc = gw_buf_reserve(b, n)) != GW_OK)
        return NULL;
    return (uint8_t *)b->data + b->len;
}

static void wrote(struct gw_buf *b, const uint8_t *end)
{
    b->len = (size_t)(end - (const uint8_t *)b->data);
    b->data[b->len] = '\0';
}

/* An AnyValue's size (its fields, not its own tag and length). */
static size_t any_len(const struct gw_attr *a, size_t slen)
{
    switch (a->type) {
    case GW_ATTR_STR:
        return lenfield(slen);
    case GW_ATTR_INT:
        return 1 + varint_len((uint64_t)a->i);
    default:
        return 2;
    }
}

static uint8_t *put_any(uint8_t *p, const struct gw_attr *a, size_t slen)
{
    switch (a->type) {
    case GW_ATTR_STR:
        return put_bytes(p, 1, a->s, slen);
    case GW_ATTR_INT:
        return put_varint(put_tag(p, 3, WT_VARINT), (uint64_t)a->i);
    default:
        return put_varint(put_tag(p, 2, WT_VARINT), a->i != 0);
    }
}

/* A KeyValue's size, its tag and length included. */
static size_t kv_len(size_t klen, const struct gw_attr *a, size_t slen)
{
    return lenfield(lenfield(klen) + lenfield(any_len(a, slen)));
}

/* A KeyValue as field `field` of the message being written (room made). */
static uint8_t *put_kv(uint8_t *p, unsigned field, size_t klen, const struct gw_attr *a,
                       size_t slen)
{
    size_t al = any_len(a, slen);
    p = put_len(p, field, lenfield(klen) + lenfield(al));
    p = put_bytes(p, 1, a->key, klen);
    p = put_len(p, 2, al);
    return put_any(p, a, slen);
}

static int kv_into(struct gw_buf *b, unsigned field, size_t klen, const struct gw_attr *a,
                   size_t slen)
{
    int rc = GW_OK;
    uint8_t *p = room(b, kv_len(klen, a, slen), &rc);
    if (p)
        wrote(b, put_kv(p, field, klen, a, slen));
    return rc;
}

int gw_pb_kv_str(struct gw_buf *b, unsigned field, const char *key, const char *v, size_t vlen)
{
    struct gw_attr a = {.key = key, .type = GW_ATTR_STR, .s = v};
    return kv_into(b, field, strlen(key), &a, vlen);
}

int gw_pb_bytes(struct gw_buf *b, unsigned field, const void *d, size_t n)
{
    int rc = GW_OK;
    uint8_t *p = room(b, lenfield(n), &rc);
    if (p)
        wrote(b, put_bytes(p, field, d, n));
    return rc;
}

void gw_span_init(struct gw_span *s)
{
    gw_buf_init(&s->b, 0);
    s->rc = GW_OK;
}

void gw_span_free(struct gw_span *s)
{
    gw_buf_free(&s->b);
}

/* Span's fields (trace.proto) */
enum {
    F_TRACE_ID = 1,
    F_SPAN_ID = 2,
    F_TRACE_STATE = 3,
    F_PARENT = 4,
    F_NAME = 5,
    F_KIND = 6,
    F_START = 7,
    F_END = 8,
    F_ATTR = 9,
    F_EVENT = 11,
    F_LINK = 13,
    F_STATUS = 15,
};

void gw_span_begin2(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id,
                    const uint8_t *parent_span_id, const char *name, const char *name2,
                    enum gw_span_kind kind, uint64_t start_ns)
{
    gw_buf_reset(&s->b);
    s->rc = GW_OK;
    size_t n1 = strlen(name), n2 = name2 ? strlen(name2) : 0;
    size_t nl = name2 ? n1 + 1 + n2 : n1;
    size_t need = lenfield(GW_TRACE_ID_LEN) + lenfield(GW_SPAN_ID_LEN) +
                  (parent_span_id ? lenfield(GW_SPAN_ID_LEN) : 0) + lenfield(nl) + 2 + 9;
    uint8_t *p = room(&s->b, need, &s->rc);
    if (!p)
        return;
    p = put_bytes(p, F_TRACE_ID, trace_id, GW_TRACE_ID_LEN);
    p = put_bytes(p, F_SPAN_ID, span_id, GW_SPAN_ID_LEN);
    if (parent_span_id)
        p = put_bytes(p, F_PARENT, parent_span_id, GW_SPAN_ID_LEN);
    p = put_len(p, F_NAME, nl);
    memcpy(p, name, n1);
    p += n1;
    if (name2) {
        *p++ = ' ';
        memcpy(p, name2, n2);
        p += n2;
    }
    p = put_varint(put_tag(p, F_KIND, WT_VARINT), (uint64_t)kind);
    wrote(&s->b, put_fixed64(p, F_START, start_ns));
}

void gw_span_begin(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id,
                   const uint8_t *parent_span_id, const char *name, enum gw_span_kind kind,
                   uint64_t start_ns)
{
    gw_span_begin2(s, trace_id, span_id, parent_span_id, name, NULL, kind, start_ns);
}

void gw_span_tracestate(struct gw_span *s, const char *v, size_t len)
{
    if (len && s->rc == GW_OK)
        s->rc = gw_pb_bytes(&s->b, F_TRACE_STATE, v, len);
}

void gw_span_kv(struct gw_span *s, size_t klen, const struct gw_attr *a, size_t slen)
{
    if (s->rc == GW_OK)
        s->rc = kv_into(&s->b, F_ATTR, klen, a, slen);
}

void gw_span_double(struct gw_span *s, const char *key, double v)
{
    size_t kl = strlen(key);
    uint64_t bits;
    memcpy(&bits, &v, sizeof(bits));
    uint8_t *p = room(&s->b, lenfield(lenfield(kl) + lenfield(9)), &s->rc);
    if (!p)
        return;
    p = put_len(p, F_ATTR, lenfield(kl) + lenfield(9));
    p = put_bytes(p, 1, key, kl);
    p = put_len(p, 2, 9);
    wrote(&s->b, put_fixed64(p, 4, bits));
}

void gw_span_strs(struct gw_span *s, const char *key, const char *const *v, size_t n)
{
    /* KeyValue{key, AnyValue{array_value: ArrayValue{values: AnyValue{string}...}}} */
    size_t arr = 0;
    for (size_t i = 0; i < n; i++)
        arr += lenfield(lenfield(strlen(v[i])));
    size_t kl = strlen(key), any = lenfield(arr);
    uint8_t *p = room(&s->b, lenfield(lenfield(kl) + lenfield(any)), &s->rc);
    if (!p)
        return;
    p = put_len(p, F_ATTR, lenfield(kl) + lenfield(any));
    p = put_bytes(p, 1, key, kl);
    p = put_len(p, 2, any);
    p = put_len(p, 5, arr);
    for (size_t i = 0; i < n; i++) {
        size_t l = strlen(v[i]);
        p = put_len(p, 1, lenfield(l));
        p = put_bytes(p, 1, v[i], l);
    }
    wrote(&s->b, p);
}

static size_t attr_slen(const struct gw_attr *a)
{
    return a->type == GW_ATTR_STR ? strlen(a->s) : 0;
}

void gw_span_event(struct gw_span *s, const char *name, uint64_t t_ns, const struct gw_attr *a,
                   size_t na)
{
    size_t nl = strlen(name), len = 9 + lenfield(nl);
    for (size_t i = 0; i < na; i++)
        len += kv_len(strlen(a[i].key), &a[i], attr_slen(&a[i]));
    uint8_t *p = room(&s->b, lenfield(len), &s->rc);
    if (!p)
        return;
    p = put_len(p, F_EVENT, len);
    p = put_fixed64(p, 1, t_ns);
    p = put_bytes(p, 2, name, nl);
    for (size_t i = 0; i < na; i++)
        p = put_kv(p, 3, strlen(a[i].key), &a[i], attr_slen(&a[i]));
    wrote(&s->b, p);
}

void gw_span_link(struct gw_span *s, const uint8_t *trace_id, const uint8_t *span_id)
{
    size_t len = lenfield(GW_TRACE_ID_LEN) + lenfield(GW_SPAN_ID_LEN);
    uint8_t *p = room(&s->b, lenfield(len), &s->rc);
    if (!p)
        return;
    p = put_len(p, F_LINK, len);
    p = put_bytes(p, 1, trace_id, GW_TRACE_ID_LEN);
    wrote(&s->b, put_bytes(p, 2, span_id, GW_SPAN_ID_LEN));
}

void gw_span_status(struct gw_span *s, enum gw_span_status code, const char *msg)
{
    size_t ml = msg ? strlen(msg) : 0;
    size_t len = (ml ? lenfield(ml) : 0) + 2;
    uint8_t *p = room(&s->b, lenfield(len), &s->rc);
    if (!p)
        return;
    p = put_len(p, F_STATUS, len);
    if (ml)
        p = put_bytes(p, 2, msg, ml);
    wrote(&s->b, put_varint(put_tag(p, 3, WT_VARINT), (uint64_t)code));
}

int gw_span_finish(struct gw_span *s, uint64_t end_ns, struct gw_buf *batch)
{
    uint8_t *p = room(&s->b, 9, &s->rc);
    if (!p)
        return s->rc;
    wrote(&s->b, put_fixed64(p, F_END, end_ns));
    return gw_pb_bytes(batch, 2, s->b.data, s->b.len);
}

int gw_trace_request_head(struct gw_buf *out, const void *resource, size_t resource_len,
                          const void *scope, size_t scope_len, size_t entries_len)
{
    size_t ss = lenfield(scope_len) + entries_len;
    size_t rs = lenfield(resource_len) + 1 + varint_len(ss) + ss;
    int rc = GW_OK;
    uint8_t *p = room(
        out, 1 + varint_len(rs) + lenfield(resource_len) + 1 + varint_len(ss) + lenfield(scope_len),
        &rc);
    if (!p)
        return rc;
    p = put_len(p, 1, rs);                       /* ExportTraceServiceRequest.resource_spans */
    p = put_bytes(p, 1, resource, resource_len); /* ResourceSpans.resource */
    p = put_len(p, 2, ss);                       /* ResourceSpans.scope_spans */
    p = put_bytes(p, 1, scope, scope_len);       /* ScopeSpans.scope; its spans follow */
    wrote(out, p);
    return GW_OK;
}

/* ------------------------------------------------------------ OTLP/JSON */

/* A field read from a message this module wrote. */
struct pbf {
    unsigned field, wt;
    uint64_t v;       /* a varint's or a fixed64's value */
    const uint8_t *p; /* WT_LEN: the bytes */
    size_t n;
};

struct pbr {
    const uint8_t *p, *end;
};

static int rd_varint(struct pbr *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int sh = 0; sh < 64 && r->p < r->end; sh += 7) {
        uint8_t c = *r->p++;
        x |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* The next field: 1, 0 at the end, -1 when malformed. */
static int rd_field(struct pbr *r, struct pbf *f)
{
    if (r->p >= r->end)
        return 0;
    uint64_t tag;
    if (rd_varint(r, &tag) || tag >> 3 == 0 || tag >> 3 > 0xffff)
        return -1;
    f->field = (unsigned)(tag >> 3);
    f->wt = (unsigned)(tag & 7);
    switch (f->wt) {
    case WT_VARINT:
        return rd_varint(r, &f->v) ? -1 : 1;
    case WT_I64:
        if (r->end - r->p < 8)
            return -1;
        f->v = 0;
        for (int i = 0; i < 8; i++)
            f->v |= (uint64_t)r->p[i] << (8 * i);
        r->p += 8;
        return 1;
    case WT_LEN:
        if (rd_varint(r, &f->v) || f->v > (uint64_t)(r->end - r->p))
            return -1;
        f->p = r->p;
        f->n = (size_t)f->v;
        r->p += f->n;
        return 1;
    default:
        return -1;
    }
}

static struct pbr reader(const void *p, size_t n)
{
    struct pbr r = {p, (const uint8_t *)p + n};
    return r;
}

static int j_str(struct gw_buf *o, const uint8_t *p, size_t n)
{
    return gw_json_escape(o, (const char *)p, n);
}

static int j_hex(struct gw_buf *o, const uint8_t *p, size_t n)
{
    char h[2 * GW_TRACE_ID_LEN + 1];
    if (n > GW_TRACE_ID_LEN)
        return GW_EINVAL;
    gw_hex_encode(p, n, h);
    int rc = gw_buf_appends(o, "\"");
    if (rc == GW_OK)
        rc = gw_buf_append(o, h, 2 * n);
    return rc == GW_OK ? gw_buf_appends(o, "\"") : rc;
}

static int j_u64(struct gw_buf *o, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "\"%llu\"", (unsigned long long)v);
    return gw_buf_append(o, t, (size_t)n);
}

/* Arrays in arrays: this module writes one level; a reader stops at 8. */
#define J_MAX_DEPTH 8
static int j_any(struct gw_buf *o, const uint8_t *p, size_t n, int depth);

/* The lead of an object's next member: a comma after the first. */
static const char *lead(int *members)
{
    return (*members)++ ? "," : "";
}

/* "name":[ each field `field` of the message p as a KeyValue ], as the
 * object's next member (*members counts them), or nothing when it has none. */
static int j_kvs(struct gw_buf *o, int *members, const char *name, const uint8_t *p, size_t n,
                 unsigned field)
{
    struct pbr r = reader(p, n);
    struct pbf f;
    int rc = GW_OK, k, count = 0;
    while (rc == GW_OK && (k = rd_field(&r, &f)) == 1) {
        if (f.field != field || f.wt != WT_LEN)
            continue;
        rc = count++ ? gw_buf_appends(o, ",{")
                     : gw_buf_printf(o, "%s\"%s\":[{", lead(members), name);
        struct pbr kr = reader(f.p, f.n);
        struct pbf kf;
        int kk, kvm = 0;
        while (rc == GW_OK && (kk = rd_field(&kr, &kf)) == 1) {
            if (kf.wt != WT_LEN || (kf.field != 1 && kf.field != 2))
                continue;
            rc = gw_buf_appends(o, lead(&kvm));
            if (rc == GW_OK)
                rc = gw_buf_appends(o, kf.field == 1 ? "\"key\":" : "\"value\":");
            if (rc == GW_OK)
                rc = kf.field == 1 ? j_str(o, kf.p, kf.n) : j_any(o, kf.p, kf.n, 0);
        }
        if (rc == GW_OK && kk < 0)
            rc = GW_EINVAL;
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    if (rc == GW_OK && k < 0)
        rc = GW_EINVAL;
    return rc == GW_OK && count ? gw_buf_appends(o, "]") : rc;
}

static int j_any(struct gw_buf *o, const uint8_t *p, size_t n, int depth)
{
    if (depth > J_MAX_DEPTH)
        return GW_EINVAL;
    struct pbr r = reader(p, n);
    struct pbf f;
    int k = rd_field(&r, &f), rc;
    if (k == 0)
        return gw_buf_appends(o, "{}");
    if (k < 0)
        return GW_EINVAL;
    if (f.field == 1 && f.wt == WT_LEN) {
        rc = gw_buf_appends(o, "{\"stringValue\":");
        if (rc == GW_OK)
            rc = j_str(o, f.p, f.n);
    } else if (f.field == 2 && f.wt == WT_VARINT) {
        rc = gw_buf_appends(o, f.v ? "{\"boolValue\":true" : "{\"boolValue\":false");
    } else if (f.field == 3 && f.wt == WT_VARINT) {
        rc = gw_buf_printf(o, "{\"intValue\":\"%lld\"", (long long)f.v);
    } else if (f.field == 4 && f.wt == WT_I64) {
        double d;
        memcpy(&d, &f.v, sizeof(d));
        rc = gw_buf_printf(o, "{\"doubleValue\":%.17g", isfinite(d) ? d : 0.0);
    } else if (f.field == 5 && f.wt == WT_LEN) {
        rc = gw_buf_appends(o, "{\"arrayValue\":{\"values\":[");
        struct pbr ar = reader(f.p, f.n);
        struct pbf af;
        int ak, i = 0;
        while (rc == GW_OK && (ak = rd_field(&ar, &af)) == 1) {
            if (af.field != 1 || af.wt != WT_LEN)
                continue;
            if (i++)
                rc = gw_buf_appends(o, ",");
            if (rc == GW_OK)
                rc = j_any(o, af.p, af.n, depth + 1);
        }
        if (rc == GW_OK && ak < 0)
            rc = GW_EINVAL;
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "]}");
    } else {
        return GW_EINVAL;
    }
    return rc == GW_OK ? gw_buf_appends(o, "}") : rc;
}

/* The fields of message p that are not repeated messages, as JSON
 * members after "{": each a table row (field, wire type, name, how). */
enum jhow { J_HEX, J_STR, J_NUM, J_U64 };
struct jfield {
    unsigned field, wt;
    const char *name;
    enum jhow how;
};

static int j_scalars(struct gw_buf *o, const uint8_t *p, size_t n, const struct jfield *t,
                     size_t nt, int *members)
{
    struct pbr r = reader(p, n);
    struct pbf f;
    int k, rc = GW_OK;
    while (rc == GW_OK && (k = rd_field(&r, &f)) == 1) {
        for (size_t i = 0; i < nt && rc == GW_OK; i++) {
            if (t[i].field != f.field || t[i].wt != f.wt)
                continue;
            rc = gw_buf_printf(o, "%s\"%s\":", lead(members), t[i].name);
            if (rc != GW_OK)
                break;
            switch (t[i].how) {
            case J_HEX:
                rc = j_hex(o, f.p, f.n);
                break;
            case J_STR:
                rc = j_str(o, f.p, f.n);
                break;
            case J_NUM:
                rc = gw_buf_append_int(o, (long long)f.v);
                break;
            case J_U64:
                rc = j_u64(o, f.v);
                break;
            }
        }
    }
    return rc == GW_OK && k < 0 ? GW_EINVAL : rc;
}

/* "name":[ each field `field` of p as an object of table t's members and
 * its attributes (field attr_field) ], as the next member (*members), or
 * nothing when there is none. */
static int j_objects(struct gw_buf *o, int *members, const char *name, const uint8_t *p, size_t n,
                     unsigned field, const struct jfield *t, size_t nt, unsigned attr_field)
{
    struct pbr r = reader(p, n);
    struct pbf f;
    int k, rc = GW_OK, count = 0;
    while (rc == GW_OK && (k = rd_field(&r, &f)) == 1) {
        if (f.field != field || f.wt != WT_LEN)
            continue;
        rc = count++ ? gw_buf_appends(o, ",{")
                     : gw_buf_printf(o, "%s\"%s\":[{", lead(members), name);
        int om = 0;
        if (rc == GW_OK)
            rc = j_scalars(o, f.p, f.n, t, nt, &om);
        if (rc == GW_OK && attr_field)
            rc = j_kvs(o, &om, "attributes", f.p, f.n, attr_field);
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    if (rc == GW_OK && k < 0)
        rc = GW_EINVAL;
    return rc == GW_OK && count ? gw_buf_appends(o, "]") : rc;
}

static const struct jfield span_fields[] = {
    {F_TRACE_ID, WT_LEN, "traceId", J_HEX},
    {F_SPAN_ID, WT_LEN, "spanId", J_HEX},
    {F_TRACE_STATE, WT_LEN, "traceState", J_STR},
    {F_PARENT, WT_LEN, "parentSpanId", J_HEX},
    {F_NAME, WT_LEN, "name", J_STR},
    {F_KIND, WT_VARINT, "kind", J_NUM},
    {F_START, WT_I64, "startTimeUnixNano", J_U64},
    {F_END, WT_I64, "endTimeUnixNano", J_U64},
};
static const struct jfield event_fields[] = {
    {1, WT_I64, "timeUnixNano", J_U64},
    {2, WT_LEN, "name", J_STR},
};
static const struct jfield link_fields[] = {
    {1, WT_LEN, "traceId", J_HEX},
    {2, WT_LEN, "spanId", J_HEX},
};
static const struct jfield status_fields[] = {
    {2, WT_LEN, "message", J_STR},
    {3, WT_VARINT, "code", J_NUM},
};
static const struct jfield scope_fields[] = {
    {1, WT_LEN, "name", J_STR},
    {2, WT_LEN, "version", J_STR},
};

#define NF(t) (sizeof(t) / sizeof((t)[0]))

static int j_span(struct gw_buf *o, const uint8_t *p, size_t n)
{
    int members = 0;
    int rc = gw_buf_appends(o, "{");
    if (rc == GW_OK)
        rc = j_scalars(o, p, n, span_fields, NF(span_fields), &members);
    if (rc == GW_OK)
        rc = j_kvs(o, &members, "attributes", p, n, F_ATTR);
    if (rc == GW_OK)
        rc = j_objects(o, &members, "events", p, n, F_EVENT, event_fields, NF(event_fields), 3);
    if (rc == GW_OK)
        rc = j_objects(o, &members, "links", p, n, F_LINK, link_fields, NF(link_fields), 4);
    /* One status: an object, not a list. */
    struct pbr r = reader(p, n);
    struct pbf f;
    int k;
    while (rc == GW_OK && (k = rd_field(&r, &f)) == 1) {
        if (f.field != F_STATUS || f.wt != WT_LEN)
            continue;
        int sm = 0;
        rc = gw_buf_printf(o, "%s\"status\":{", lead(&members));
        if (rc == GW_OK)
            rc = j_scalars(o, f.p, f.n, status_fields, NF(status_fields), &sm);
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "}");
    }
    return rc == GW_OK ? gw_buf_appends(o, "}") : rc;
}

int gw_trace_json(struct gw_buf *out, const void *resource, size_t resource_len, const void *scope,
                  size_t scope_len, const void *const *entries, const size_t *lens, size_t n)
{
    int rc = gw_buf_appends(out, "{\"resourceSpans\":[{\"resource\":{");
    if (rc == GW_OK)
        rc = j_kvs(out, &(int){0}, "attributes", resource, resource_len, 1);
    int sm = 0;
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "},\"scopeSpans\":[{\"scope\":{");
    if (rc == GW_OK)
        rc = j_scalars(out, scope, scope_len, scope_fields, NF(scope_fields), &sm);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "},\"spans\":[");
    int count = 0;
    for (size_t i = 0; rc == GW_OK && i < n; i++) {
        struct pbr r = reader(entries[i], lens[i]);
        struct pbf f;
        int k;
        while (rc == GW_OK && (k = rd_field(&r, &f)) == 1) {
            if (f.field != 2 || f.wt != WT_LEN)
                return GW_EINVAL;
            if (count++)
                rc = gw_buf_appends(out, ",");
            if (rc == GW_OK)
                rc = j_span(out, f.p, f.n);
        }
        if (rc == GW_OK && k < 0)
            rc = GW_EINVAL;
    }
    return rc == GW_OK ? gw_buf_appends(out, "]}]}]}") : rc;
}
