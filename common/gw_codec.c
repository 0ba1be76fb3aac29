/*
 * gw_codec: hex and base64 (OpenSSL's block coder behind an explicit
 * strictness), and the 32-byte key parser. See gw_codec.h.
 */
#include "gw_codec.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"

void gw_hex_encode(const void *in, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    const unsigned char *b = in;
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[b[i] >> 4];
        out[2 * i + 1] = hx[b[i] & 15];
    }
    out[2 * n] = '\0';
}

int gw_hex_decode(const char *s, size_t n, unsigned char *out)
{
    if (n % 2)
        return GW_EINVAL;
    for (size_t i = 0; i < n / 2; i++) {
        int hi = gw_hex_digit((unsigned char)s[2 * i]),
            lo = gw_hex_digit((unsigned char)s[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return GW_EINVAL;
        out[i] = (unsigned char)(hi << 4 | lo);
    }
    return GW_OK;
}

/* EVP_EncodeBlock takes an int: whole groups of three bytes a chunk, so
 * the chunks' encodings join into the whole one's. */
#define B64_CHUNK ((size_t)3 << 20)

void gw_b64_encode(const void *in, size_t n, char *out)
{
    const unsigned char *p = in;
    *out = '\0';
    while (n) {
        size_t k = n < B64_CHUNK ? n : B64_CHUNK;
        int w = EVP_EncodeBlock((unsigned char *)out, p, (int)k);
        out += w;
        p += k;
        n -= k;
    }
}

int gw_b64_append(struct gw_buf *out, const void *in, size_t n)
{
    const unsigned char *p = in;
    char q[4 * 256 + 1];
    while (n) {
        size_t k = n < 3 * 256 ? n : 3 * 256;
        int w = EVP_EncodeBlock((unsigned char *)q, p, (int)k);
        int rc = gw_buf_append(out, q, (size_t)w);
        if (rc != GW_OK)
            return rc;
        p += k;
        n -= k;
    }
    return GW_OK;
}

/* The padding of n characters of strict base64 at s (0, 1 or 2), or -1. */
static int b64_padding(const char *s, size_t n)
{
    if (n % 4)
        return -1;
    int pad = n && s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
    for (size_t i = 0; i < n - (size_t)pad; i++)
        if (gw_b64_digit((unsigned char)s[i]) < 0)
            return -1;
    return pad;
}

int gw_b64_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *len)
{
    *len = 0;
    int pad = b64_padding(s, n);
    if (pad < 0 || n / 4 * 3 - (size_t)pad > cap)
        return GW_EINVAL;
    size_t o = 0;
    unsigned char tail[3];
    /* Whole quanta straight into out, in int-sized chunks; the last
     * quantum through tail, as EVP_DecodeBlock writes its padding too. */
    size_t body = n ? n - 4 : 0;
    while (o < body / 4 * 3) {
        size_t k = body - o / 3 * 4 < 4 * (B64_CHUNK / 3) ? body - o / 3 * 4 : 4 * (B64_CHUNK / 3);
        if (EVP_DecodeBlock(out + o, (const unsigned char *)s + o / 3 * 4, (int)k) < 0)
            return GW_EINVAL;
        o += k / 4 * 3;
    }
    if (n) {
        if (EVP_DecodeBlock(tail, (const unsigned char *)s + body, 4) != 3)
            return GW_EINVAL;
        memcpy(out + o, tail, (size_t)(3 - pad));
        o += (size_t)(3 - pad);
        OPENSSL_cleanse(tail, sizeof(tail));
    }
    *len = o;
    return GW_OK;
}

int gw_key32_parse(const char *text, unsigned char out[GW_KEY32_LEN])
{
    const char *s = text, *e = text + strlen(text);
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        e--;
    size_t n = (size_t)(e - s), len = 0;
    int rc = GW_EINVAL;
    if (n == 2 * GW_KEY32_LEN) {
        rc = gw_hex_decode(s, n, out);
    } else if (n == 44 && s[42] != '=' && s[43] == '=') {
        /* 43 symbols carry 258 bits: the last two must be zero. */
        int last = gw_b64_digit((unsigned char)s[42]);
        rc =
            last >= 0 && (last & 3) == 0 ? gw_b64_decode(s, n, out, GW_KEY32_LEN, &len) : GW_EINVAL;
        if (rc == GW_OK && len != GW_KEY32_LEN)
            rc = GW_EINVAL;
    }
    if (rc != GW_OK)
        OPENSSL_cleanse(out, GW_KEY32_LEN);
    return rc;
}

static int unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

int gw_pct_encode(struct gw_buf *out, const void *s, size_t n, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    const unsigned char *p = s;
    size_t start = out->len, i = 0;
    int rc = GW_OK;
    while (i < n && rc == GW_OK) {
        size_t j = i;
        while (j < n && (unreserved(p[j]) || (keep_slash && p[j] == '/')))
            j++;
        if (j > i)
            rc = gw_buf_append(out, p + i, j - i);
        if (j == n || rc != GW_OK)
            break;
        char e[3] = {'%', hex[p[j] >> 4], hex[p[j] & 15]};
        rc = gw_buf_append(out, e, 3);
        i = j + 1;
    }
    if (rc != GW_OK) {
        out->len = start;
        if (out->data)
            out->data[start] = '\0';
    }
    return rc;
}

long gw_pct_decode(const char *s, size_t n, char *out, int strict)
{
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        int hi = s[i] == '%' && n - i >= 3 ? gw_hex_digit((unsigned char)s[i + 1]) : -1;
        int lo = hi >= 0 ? gw_hex_digit((unsigned char)s[i + 2]) : -1;
        if (lo < 0) {
            if (strict && s[i] == '%')
                return -1;
            out[o++] = s[i];
            continue;
        }
        if (strict && hi == 0 && lo == 0)
            return -1;
        out[o++] = (char)(hi << 4 | lo);
        i += 2;
    }
    return (long)o;
}
