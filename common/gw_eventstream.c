#include "gw_eventstream.h"

#include <string.h>

#include "gw_error.h"

/* CRC-32, polynomial 0xEDB88320 (reflected IEEE 802.3): crc_table[i] is the
 * CRC of the single byte i. */
static const uint32_t crc_table[256] = {
    0x00000000u, 0x77073096u, 0xee0e612cu, 0x990951bau, 0x076dc419u, 0x706af48fu, 0xe963a535u,
    0x9e6495a3u, 0x0edb8832u, 0x79dcb8a4u, 0xe0d5e91eu, 0x97d2d988u, 0x09b64c2bu, 0x7eb17cbdu,
    0xe7b82d07u, 0x90bf1d91u, 0x1db71064u, 0x6ab020f2u, 0xf3b97148u, 0x84be41deu, 0x1adad47du,
    0x6ddde4ebu, 0xf4d4b551u, 0x83d385c7u, 0x136c9856u, 0x646ba8c0u, 0xfd62f97au, 0x8a65c9ecu,
    0x14015c4fu, 0x63066cd9u, 0xfa0f3d63u, 0x8d080df5u, 0x3b6e20c8u, 0x4c69105eu, 0xd56041e4u,
    0xa2677172u, 0x3c03e4d1u, 0x4b04d447u, 0xd20d85fdu, 0xa50ab56bu, 0x35b5a8fau, 0x42b2986cu,
    0xdbbbc9d6u, 0xacbcf940u, 0x32d86ce3u, 0x45df5c75u, 0xdcd60dcfu, 0xabd13d59u, 0x26d930acu,
    0x51de003au, 0xc8d75180u, 0xbfd06116u, 0x21b4f4b5u, 0x56b3c423u, 0xcfba9599u, 0xb8bda50fu,
    0x2802b89eu, 0x5f058808u, 0xc60cd9b2u, 0xb10be924u, 0x2f6f7c87u, 0x58684c11u, 0xc1611dabu,
    0xb6662d3du, 0x76dc4190u, 0x01db7106u, 0x98d220bcu, 0xefd5102au, 0x71b18589u, 0x06b6b51fu,
    0x9fbfe4a5u, 0xe8b8d433u, 0x7807c9a2u, 0x0f00f934u, 0x9609a88eu, 0xe10e9818u, 0x7f6a0dbbu,
    0x086d3d2du, 0x91646c97u, 0xe6635c01u, 0x6b6b51f4u, 0x1c6c6162u, 0x856530d8u, 0xf262004eu,
    0x6c0695edu, 0x1b01a57bu, 0x8208f4c1u, 0xf50fc457u, 0x65b0d9c6u, 0x12b7e950u, 0x8bbeb8eau,
    0xfcb9887cu, 0x62dd1ddfu, 0x15da2d49u, 0x8cd37cf3u, 0xfbd44c65u, 0x4db26158u, 0x3ab551ceu,
    0xa3bc0074u, 0xd4bb30e2u, 0x4adfa541u, 0x3dd895d7u, 0xa4d1c46du, 0xd3d6f4fbu, 0x4369e96au,
    0x346ed9fcu, 0xad678846u, 0xda60b8d0u, 0x44042d73u, 0x33031de5u, 0xaa0a4c5fu, 0xdd0d7cc9u,
    0x5005713cu, 0x270241aau, 0xbe0b1010u, 0xc90c2086u, 0x5768b525u, 0x206f85b3u, 0xb966d409u,
    0xce61e49fu, 0x5edef90eu, 0x29d9c998u, 0xb0d09822u, 0xc7d7a8b4u, 0x59b33d17u, 0x2eb40d81u,
    0xb7bd5c3bu, 0xc0ba6cadu, 0xedb88320u, 0x9abfb3b6u, 0x03b6e20cu, 0x74b1d29au, 0xead54739u,
    0x9dd277afu, 0x04db2615u, 0x73dc1683u, 0xe3630b12u, 0x94643b84u, 0x0d6d6a3eu, 0x7a6a5aa8u,
    0xe40ecf0bu, 0x9309ff9du, 0x0a00ae27u, 0x7d079eb1u, 0xf00f9344u, 0x8708a3d2u, 0x1e01f268u,
    0x6906c2feu, 0xf762575du, 0x806567cbu, 0x196c3671u, 0x6e6b06e7u, 0xfed41b76u, 0x89d32be0u,
    0x10da7a5au, 0x67dd4accu, 0xf9b9df6fu, 0x8ebeeff9u, 0x17b7be43u, 0x60b08ed5u, 0xd6d6a3e8u,
    0xa1d1937eu, 0x38d8c2c4u, 0x4fdff252u, 0xd1bb67f1u, 0xa6bc5767u, 0x3fb506ddu, 0x48b2364bu,
    0xd80d2bdau, 0xaf0a1b4cu, 0x36034af6u, 0x41047a60u, 0xdf60efc3u, 0xa867df55u, 0x316e8eefu,
    0x4669be79u, 0xcb61b38cu, 0xbc66831au, 0x256fd2a0u, 0x5268e236u, 0xcc0c7795u, 0xbb0b4703u,
    0x220216b9u, 0x5505262fu, 0xc5ba3bbeu, 0xb2bd0b28u, 0x2bb45a92u, 0x5cb36a04u, 0xc2d7ffa7u,
    0xb5d0cf31u, 0x2cd99e8bu, 0x5bdeae1du, 0x9b64c2b0u, 0xec63f226u, 0x756aa39cu, 0x026d930au,
    0x9c0906a9u, 0xeb0e363fu, 0x72076785u, 0x05005713u, 0x95bf4a82u, 0xe2b87a14u, 0x7bb12baeu,
    0x0cb61b38u, 0x92d28e9bu, 0xe5d5be0du, 0x7cdcefb7u, 0x0bdbdf21u, 0x86d3d2d4u, 0xf1d4e242u,
    0x68ddb3f8u, 0x1fda836eu, 0x81be16cdu, 0xf6b9265bu, 0x6fb077e1u, 0x18b74777u, 0x88085ae6u,
    0xff0f6a70u, 0x66063bcau, 0x11010b5cu, 0x8f659effu, 0xf862ae69u, 0x616bffd3u, 0x166ccf45u,
    0xa00ae278u, 0xd70dd2eeu, 0x4e048354u, 0x3903b3c2u, 0xa7672661u, 0xd06016f7u, 0x4969474du,
    0x3e6e77dbu, 0xaed16a4au, 0xd9d65adcu, 0x40df0b66u, 0x37d83bf0u, 0xa9bcae53u, 0xdebb9ec5u,
    0x47b2cf7fu, 0x30b5ffe9u, 0xbdbdf21cu, 0xcabac28au, 0x53b39330u, 0x24b4a3a6u, 0xbad03605u,
    0xcdd70693u, 0x54de5729u, 0x23d967bfu, 0xb3667a2eu, 0xc4614ab8u, 0x5d681b02u, 0x2a6f2b94u,
    0xb40bbe37u, 0xc30c8ea1u, 0x5a05df1bu, 0x2d02ef8du,
};

uint32_t gw_es_crc32(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    crc = ~crc;
    while (len--)
        crc = crc_table[(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Value bytes of the fixed-size types (0 for the booleans); -1 for the others. */
static int int_width(unsigned type)
{
    switch (type) {
    case GW_ES_TRUE:
    case GW_ES_FALSE:
        return 0;
    case GW_ES_BYTE:
        return 1;
    case GW_ES_INT16:
        return 2;
    case GW_ES_INT32:
        return 4;
    case GW_ES_INT64:
    case GW_ES_TIMESTAMP:
        return 8;
    default:
        return -1;
    }
}

void gw_es_init(struct gw_es *p, size_t max)
{
    if (!max)
        max = GW_ES_DEFAULT_MAX;
    if (max > GW_ES_HARD_MAX)
        max = GW_ES_HARD_MAX;
    if (max < GW_ES_MIN_MESSAGE)
        max = GW_ES_MIN_MESSAGE;
    gw_buf_init(&p->msg, max);
    p->total = 0;
    p->headers_len = 0;
    p->err = 0;
    p->why = NULL;
    p->dispatched = 0;
}

void gw_es_free(struct gw_es *p)
{
    gw_buf_free(&p->msg);
}

const char *gw_es_why(const struct gw_es *p)
{
    return p->why;
}

static int die(struct gw_es *p, int err, const char *why)
{
    p->err = err;
    p->why = why;
    return err;
}

/* The first 12 bytes are in: trust the lengths only once their CRC matches. */
static int check_prelude(struct gw_es *p)
{
    const unsigned char *b = (const unsigned char *)p->msg.data;
    uint32_t total = get32(b), hlen = get32(b + 4);
    if (gw_es_crc32(0, b, 8) != get32(b + 8))
        return die(p, GW_EINVAL, "prelude CRC mismatch");
    if (total < GW_ES_MIN_MESSAGE)
        return die(p, GW_EINVAL, "total length below the 16-byte minimum");
    if (total > p->msg.max)
        return die(p, GW_ELIMIT, "message longer than the ceiling");
    if (hlen > total - GW_ES_MIN_MESSAGE)
        return die(p, GW_EINVAL, "headers length beyond the message");
    if (hlen > GW_ES_MAX_HEADERS_LEN)
        return die(p, GW_EINVAL, "headers length above the format's 128 KiB limit");
    p->total = total;
    p->headers_len = hlen;
    return GW_OK;
}

/*
 * Decodes the headers of the verified message in place: each name slides one
 * byte left over its length byte and gets a NUL where its last byte was; each
 * BYTES/STRING value slides two bytes left over its length and gets a NUL
 * the same way. Every byte written belongs to the header being decoded and
 * has already been read, so names and values come out NUL-terminated without
 * a copy.
 */
static int decode_headers(struct gw_es *p, size_t *count)
{
    unsigned char *b = (unsigned char *)p->msg.data + GW_ES_PRELUDE_LEN;
    size_t n = p->headers_len, o = 0, k = 0;
    while (o < n) {
        if (k == GW_ES_MAX_HEADERS)
            return die(p, GW_EINVAL, "more headers than the decoder keeps");
        size_t nl = b[o];
        if (n - o < 2 + nl)
            return die(p, GW_EINVAL, "header name or type truncated");
        unsigned type = b[o + 1 + nl];
        struct gw_es_header *h = &p->hdr[k];
        memmove(b + o, b + o + 1, nl);
        b[o + nl] = '\0';
        h->name = (const char *)b + o;
        h->name_len = nl;
        size_t v = o + 2 + nl, left = n - v, used;
        int w = int_width(type);
        if (w >= 0) {
            used = (size_t)w;
            if (left < used)
                return die(p, GW_EINVAL, "header value truncated");
            uint64_t u = type == GW_ES_TRUE;
            for (int j = 0; j < w; j++)
                u = u << 8 | b[v + j];
            if (w > 0 && w < 8 && (u >> (8 * w - 1)) & 1)
                u |= ~(uint64_t)0 << (8 * w); /* sign-extend */
            h->v.i = (int64_t)u;
        } else if (type == GW_ES_BYTES || type == GW_ES_STRING) {
            if (left < 2)
                return die(p, GW_EINVAL, "header value length truncated");
            size_t vl = get16(b + v);
            used = 2 + vl;
            if (left < used)
                return die(p, GW_EINVAL, "header value truncated");
            memmove(b + v, b + v + 2, vl);
            b[v + vl] = '\0';
            h->v.b.p = (const char *)b + v;
            h->v.b.len = vl;
        } else if (type == GW_ES_UUID) {
            used = 16;
            if (left < used)
                return die(p, GW_EINVAL, "header value truncated");
            h->v.b.p = (const char *)b + v;
            h->v.b.len = 16;
        } else {
            return die(p, GW_EINVAL, "unknown header value type");
        }
        h->type = (enum gw_es_type)type;
        o = v + used;
        k++;
    }
    *count = k;
    return GW_OK;
}

/* The whole message is in: verify it and hand it out. */
static int finish(struct gw_es *p, struct gw_es_message *msg)
{
    unsigned char *b = (unsigned char *)p->msg.data;
    size_t total = p->total, hlen = p->headers_len, k = 0;
    if (gw_es_crc32(0, b, total - 4) != get32(b + total - 4))
        return die(p, GW_EINVAL, "message CRC mismatch");
    int rc = decode_headers(p, &k);
    if (rc)
        return rc;
    b[total - 4] = '\0'; /* the CRC has been checked: its first byte ends the payload */
    msg->headers = p->hdr;
    msg->nheaders = k;
    msg->payload = (const char *)b + GW_ES_PRELUDE_LEN + hlen;
    msg->payload_len = total - GW_ES_MIN_MESSAGE - hlen;
    p->dispatched = 1;
    return GW_OK;
}

int gw_es_next(struct gw_es *p, const char **buf, size_t *len, struct gw_es_message *msg)
{
    if (p->err)
        return p->err;
    if (p->dispatched) {
        gw_buf_reset(&p->msg);
        p->total = 0;
        p->headers_len = 0;
        p->dispatched = 0;
    }
    const char *s = *buf;
    size_t n = *len;
    int rc;
    for (;;) {
        /* Take no more than the prelude, then no more than the message. */
        size_t want = p->total ? p->total : GW_ES_PRELUDE_LEN;
        size_t take = want - p->msg.len;
        if (take > n)
            take = n;
        if (take) {
            rc = gw_buf_append(&p->msg, s, take);
            if (rc) {
                rc = die(p, rc, rc == GW_ENOMEM ? "out of memory" : "message passes the ceiling");
                break;
            }
            s += take;
            n -= take;
        }
        if (p->msg.len < want) {
            rc = GW_EAGAIN;
            break;
        }
        if (!p->total) {
            rc = check_prelude(p);
            if (rc)
                break;
            continue;
        }
        rc = finish(p, msg);
        break;
    }
    *buf = s;
    *len = n;
    return rc;
}

const struct gw_es_header *gw_es_find(const struct gw_es_message *m, const char *name)
{
    size_t nl = strlen(name);
    for (size_t i = 0; i < m->nheaders; i++)
        if (m->headers[i].name_len == nl && memcmp(m->headers[i].name, name, nl) == 0)
            return &m->headers[i];
    return NULL;
}

const char *gw_es_header(const struct gw_es_message *m, const char *name)
{
    const struct gw_es_header *h = gw_es_find(m, name);
    return h && h->type == GW_ES_STRING ? h->v.b.p : NULL;
}

/* Bytes a header takes on the wire, or 0 when it cannot be encoded. */
static size_t header_size(const struct gw_es_header *h)
{
    size_t nl = h->name ? strlen(h->name) : 0;
    if (nl == 0 || nl > 255)
        return 0;
    int w = int_width(h->type);
    if (w >= 0)
        return 2 + nl + (size_t)w;
    if (h->type == GW_ES_BYTES || h->type == GW_ES_STRING) {
        if (h->v.b.len > 0xffff || (h->v.b.len && !h->v.b.p))
            return 0;
        return 2 + nl + 2 + h->v.b.len;
    }
    if (h->type == GW_ES_UUID && h->v.b.len == 16 && h->v.b.p)
        return 2 + nl + 16;
    return 0;
}

int gw_es_encode(struct gw_buf *out, const struct gw_es_header *headers, size_t nheaders,
                 const void *payload, size_t payload_len)
{
    size_t hlen = 0;
    for (size_t i = 0; i < nheaders; i++) {
        size_t sz = header_size(&headers[i]);
        if (!sz || sz > GW_ES_MAX_HEADERS_LEN - hlen)
            return GW_EINVAL;
        hlen += sz;
    }
    if (payload_len > GW_ES_HARD_MAX - GW_ES_MIN_MESSAGE - hlen || (payload_len && !payload))
        return GW_EINVAL;
    size_t total = GW_ES_MIN_MESSAGE + hlen + payload_len, start = out->len;
    /* Zeros stand in for the prelude and the CRC until every byte is there;
     * a failed append truncates out back to where it was. */
    static const unsigned char zero[GW_ES_PRELUDE_LEN];
    int rc = gw_buf_append(out, zero, GW_ES_PRELUDE_LEN);
    for (size_t i = 0; !rc && i < nheaders; i++) {
        const struct gw_es_header *h = &headers[i];
        unsigned char t[1 + 255 + 1 + 8];
        size_t nl = strlen(h->name), tn = 0;
        t[tn++] = (unsigned char)nl;
        memcpy(t + tn, h->name, nl);
        tn += nl;
        t[tn++] = (unsigned char)h->type;
        int w = int_width(h->type);
        for (int j = w - 1; j >= 0; j--)
            t[tn++] = (unsigned char)((uint64_t)h->v.i >> (8 * j));
        if (h->type == GW_ES_BYTES || h->type == GW_ES_STRING) {
            t[tn++] = (unsigned char)(h->v.b.len >> 8);
            t[tn++] = (unsigned char)h->v.b.len;
        }
        rc = gw_buf_append(out, t, tn);
        if (!rc && w < 0)
            rc = gw_buf_append(out, h->v.b.p, h->v.b.len);
    }
    if (!rc)
        rc = gw_buf_append(out, payload, payload_len);
    if (!rc)
        rc = gw_buf_append(out, zero, 4);
    if (rc) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
        return rc;
    }
    unsigned char *b = (unsigned char *)out->data + start;
    put32(b, (uint32_t)total);
    put32(b + 4, (uint32_t)hlen);
    put32(b + 8, gw_es_crc32(0, b, 8));
    put32(b + total - 4, gw_es_crc32(0, b, total - 4));
    return GW_OK;
}
