/*
 * gw_codec: the one home of hex and base64, and of "a 32-byte key written
 * as text".
 *
 * Strictness, once for every caller:
 * - hex: digits of either case, an even number of them, nothing else (no
 *   "0x", no spaces). Encoding writes lowercase.
 * - base64: standard (RFC 4648 section 4: A-Z a-z 0-9 + /), padded with
 *   '=' to a multiple of four characters, the padding only as the last one
 *   or two characters; no whitespace, no line breaks, no URL-safe alphabet.
 *   The unused low bits of the last symbol are not checked (what etcd, data:
 *   URLs and OpenSSL's encoder send is canonical anyway). The empty string
 *   is zero bytes. OpenSSL's EVP_DecodeBlock does the arithmetic; it alone
 *   would accept surrounding whitespace and count padding as bytes, which
 *   gw_b64_decode checks and corrects.
 * - a 32-byte key (gw_key32_parse): see there.
 * - percent-encoding (RFC 3986): every byte but the unreserved
 *   (A-Z a-z 0-9 - . _ ~), and '/' when asked, as "%XX" in uppercase hex.
 *   Decoding is strict or lenient, as the caller says (gw_pct_decode).
 *
 * The scanners that are not decoders keep their own rules: the guard's
 * blob finder (either alphabet, wrapped lines) uses only the digit readers
 * below.
 */
#ifndef GW_CODEC_H
#define GW_CODEC_H

#include <stddef.h>
#include <stdint.h>

struct gw_buf;

/* The value of one hex digit (either case), or -1. */
static inline int gw_hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The value of one symbol of standard base64 (A-Z a-z 0-9 + /), or -1. */
static inline int gw_b64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* The n (at most 16) hex digits at s as a number into *out: 0, or -1 when
 * one is not a hex digit (*out untouched). */
static inline int gw_hex_value(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n && i < 16; i++) {
        int d = gw_hex_digit((unsigned char)s[i]);
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

/* s[0..n) appended to out percent-encoded (RFC 3986 unreserved bytes as
 * they are, '/' too with keep_slash). GW_OK, or GW_ENOMEM / GW_ELIMIT with
 * out as it was. */
int gw_pct_encode(struct gw_buf *out, const void *s, size_t n, int keep_slash)
    __attribute__((warn_unused_result));
/* s[0..n) percent-decoded into out (room for n bytes: never longer); its
 * length. Lenient (strict 0): a '%' not followed by two hex digits stays as
 * it is. Strict: such a '%', or "%00", fails: -1. */
long gw_pct_decode(const char *s, size_t n, char *out, int strict);

/* n bytes as 2 n lowercase hex digits and a NUL into out (2 n + 1 bytes). */
void gw_hex_encode(const void *in, size_t n, char *out);

/* n hex digits at s into n / 2 bytes at out. GW_OK, or GW_EINVAL when n is
 * odd or a character is not a hex digit (out then holds a prefix). */
int gw_hex_decode(const char *s, size_t n, unsigned char *out) __attribute__((warn_unused_result));

/* The length of the base64 of n bytes (padding included, NUL not). */
static inline size_t gw_b64_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

/* n bytes as padded standard base64 and a NUL into out (gw_b64_len(n) + 1
 * bytes). */
void gw_b64_encode(const void *in, size_t n, char *out);

/* The same appended to out: GW_OK, GW_ENOMEM or GW_ELIMIT. */
int gw_b64_append(struct gw_buf *out, const void *in, size_t n) __attribute__((warn_unused_result));

/* n characters of base64 at s (the strictness above) into out, which holds
 * cap bytes (n / 4 * 3 always suffices); *len gets the byte count. GW_OK,
 * or GW_EINVAL when the text is not base64 or the bytes do not fit. */
int gw_b64_decode(const char *s, size_t n, unsigned char *out, size_t cap, size_t *len)
    __attribute__((warn_unused_result));

#define GW_KEY32_LEN 32

/* A 32-byte key written as text (LLMGW_MASTER_KEY, LLMGW_CACHE_KEY), into
 * out: 64 hex digits (either case), or its 44 characters of padded standard
 * base64 with the last symbol's unused two bits zero (one spelling per key,
 * as 'openssl rand -base64 32' writes it). Surrounding ASCII whitespace
 * (space, tab, CR, LF: a trailing newline from a file) is ignored. GW_OK, or
 * GW_EINVAL with out zeroed. Whether all zero bytes are acceptable is the
 * caller's policy. */
int gw_key32_parse(const char *text, unsigned char out[GW_KEY32_LEN])
    __attribute__((warn_unused_result));

#endif
