/* Tests for common/gw_codec.c: hex, base64 (one strictness for every
 * caller) and the 32-byte key parser. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"

static void test_hex(void)
{
    static const unsigned char b[] = {0x00, 0x01, 0x7f, 0x80, 0xab, 0xff};
    char s[2 * sizeof(b) + 1];
    gw_hex_encode(b, sizeof(b), s);
    CU_ASSERT_STRING_EQUAL(s, "00017f80abff");
    gw_hex_encode(b, 0, s);
    CU_ASSERT_STRING_EQUAL(s, "");
    unsigned char d[sizeof(b)];
    CU_ASSERT_EQUAL(gw_hex_decode("00017F80abFF", 12, d), GW_OK);
    CU_ASSERT_EQUAL(memcmp(d, b, sizeof(b)), 0);
    CU_ASSERT_EQUAL(gw_hex_decode("", 0, d), GW_OK);
    static const char *const bad[] = {"0", "abc", "0g", "0x00", " 00", "00 ", "-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(gw_hex_decode(bad[i], strlen(bad[i]), d), GW_EINVAL);
    /* Digits and values. */
    CU_ASSERT_EQUAL(gw_hex_digit('0'), 0);
    CU_ASSERT_EQUAL(gw_hex_digit('F'), 15);
    CU_ASSERT_EQUAL(gw_hex_digit('f'), 15);
    CU_ASSERT_EQUAL(gw_hex_digit('g'), -1);
    uint64_t v = 7;
    CU_ASSERT_EQUAL(gw_hex_value("D83d", 4, &v), 0);
    CU_ASSERT_EQUAL(v, 0xd83d);
    CU_ASSERT_EQUAL(gw_hex_value("ffffffffffffffff", 16, &v), 0);
    CU_ASSERT_EQUAL(v, UINT64_MAX);
    v = 7;
    CU_ASSERT_EQUAL(gw_hex_value("12z4", 4, &v), -1);
    CU_ASSERT_EQUAL(v, 7); /* untouched */
}

static void test_b64_vectors(void)
{
    /* RFC 4648, section 10. */
    static const char *const v[][2] = {{"", ""},
                                       {"f", "Zg=="},
                                       {"fo", "Zm8="},
                                       {"foo", "Zm9v"},
                                       {"foob", "Zm9vYg=="},
                                       {"fooba", "Zm9vYmE="},
                                       {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
        size_t n = strlen(v[i][0]);
        CU_ASSERT_EQUAL(gw_b64_len(n), strlen(v[i][1]));
        char s[16];
        gw_b64_encode(v[i][0], n, s);
        CU_ASSERT_STRING_EQUAL(s, v[i][1]);
        struct gw_buf b;
        gw_buf_init(&b, 0);
        CU_ASSERT_EQUAL_FATAL(gw_b64_append(&b, v[i][0], n), GW_OK);
        CU_ASSERT_EQUAL(b.len, strlen(v[i][1]));
        CU_ASSERT(b.len == 0 || memcmp(b.data, v[i][1], b.len) == 0);
        gw_buf_free(&b);
        unsigned char d[8];
        size_t len = 99;
        CU_ASSERT_EQUAL_FATAL(gw_b64_decode(v[i][1], strlen(v[i][1]), d, sizeof(d), &len), GW_OK);
        CU_ASSERT_EQUAL(len, n);
        CU_ASSERT_EQUAL(memcmp(d, v[i][0], n), 0);
        /* Exactly the decoded length is room enough (padding is not written). */
        CU_ASSERT_EQUAL(gw_b64_decode(v[i][1], strlen(v[i][1]), d, n, &len), GW_OK);
        if (n)
            CU_ASSERT_EQUAL(gw_b64_decode(v[i][1], strlen(v[i][1]), d, n - 1, &len), GW_EINVAL);
    }
    /* A key etcd's gateway sent back. */
    unsigned char d[32];
    size_t len = 0;
    CU_ASSERT_EQUAL(gw_b64_decode("L2xsbWd3L2xlYWRlcg==", 20, d, sizeof(d), &len), GW_OK);
    CU_ASSERT_EQUAL(len, 13);
    CU_ASSERT_EQUAL(memcmp(d, "/llmgw/leader", 13), 0);
    /* Unused low bits of the last symbol are not checked ("Zh==" is 'f'). */
    CU_ASSERT_EQUAL(gw_b64_decode("Zh==", 4, d, sizeof(d), &len), GW_OK);
    CU_ASSERT_EQUAL(len, 1);
    CU_ASSERT_EQUAL(d[0], 'f');
}

static void test_b64_binary_roundtrip(void)
{
    unsigned char all[4096];
    for (size_t i = 0; i < sizeof(all); i++)
        all[i] = (unsigned char)(255 - i * 7);
    char *s = malloc(gw_b64_len(sizeof(all)) + 1);
    unsigned char *d = malloc(sizeof(all));
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (size_t len = 0; len <= sizeof(all); len += 1 + len / 3) {
        gw_b64_encode(all, len, s);
        CU_ASSERT_EQUAL(strlen(s), gw_b64_len(len));
        struct gw_buf b; /* the appending form writes the same text */
        gw_buf_init(&b, 0);
        CU_ASSERT_EQUAL_FATAL(gw_b64_append(&b, all, len), GW_OK);
        CU_ASSERT_EQUAL(b.len, strlen(s));
        CU_ASSERT(b.len == 0 || memcmp(b.data, s, b.len) == 0);
        gw_buf_free(&b);
        size_t n = 0;
        CU_ASSERT_EQUAL_FATAL(gw_b64_decode(s, strlen(s), d, len, &n), GW_OK);
        CU_ASSERT_EQUAL(n, len);
        CU_ASSERT_EQUAL(memcmp(d, all, len), 0);
    }
    free(s);
    free(d);
    /* A buffer's limit is reported. */
    struct gw_buf b;
    gw_buf_init(&b, 10);
    CU_ASSERT_EQUAL(gw_b64_append(&b, all, 30), GW_ELIMIT);
    gw_buf_free(&b);
}

static void test_b64_refusals(void)
{
    /* Not padded, misplaced padding, other alphabets, whitespace (which
     * EVP_DecodeBlock alone would skip at the ends). */
    static const char *const bad[] = {"Zg=",   "Zg",   "Z===",       "====",    "Zg==Zg==", "Zm9v!",
                                      "Zm9*",  "=Zm9", "Zm=v",       "Zm9v\n",  " Zm9v",    "Zm9v ",
                                      "Zm 9v", "Zm-_", "Zm9v\nZm9v", "Zm9vZ==="};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        unsigned char d[16];
        size_t n = 7;
        CU_ASSERT_EQUAL(gw_b64_decode(bad[i], strlen(bad[i]), d, sizeof(d), &n), GW_EINVAL);
        CU_ASSERT_EQUAL(n, 0);
    }
}

#define HEX_A "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
#define B64_A "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

static void test_key32(void)
{
    unsigned char a[GW_KEY32_LEN], b[GW_KEY32_LEN];
    CU_ASSERT_EQUAL_FATAL(gw_key32_parse(HEX_A, a), GW_OK);
    CU_ASSERT_EQUAL(a[0], 0);
    CU_ASSERT_EQUAL(a[31], 0x1f);
    CU_ASSERT_EQUAL_FATAL(gw_key32_parse(B64_A, b), GW_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    /* Either case; surrounding whitespace (a file's newline) is ignored. */
    CU_ASSERT_EQUAL(
        gw_key32_parse(" \t000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F\r\n",
                       b),
        GW_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    CU_ASSERT_EQUAL(gw_key32_parse("  " B64_A "  \n", b), GW_OK);
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof(a)), 0);
    /* All zero bytes parse: refusing a placeholder is the caller's policy. */
    CU_ASSERT_EQUAL(gw_key32_parse("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=", b), GW_OK);

    static const char *const bad[] = {
        "",
        "short",
        "AAEC",
        "00",
        HEX_A "00",                                                         /* 33 bytes */
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e",   /* 31 bytes */
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1g", /* not hex */
        "zz0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", /* not hex */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",                      /* no padding */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh9=",                     /* non-canonical bits */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh*=",                     /* not base64 */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh==",                     /* 31 bytes */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8fHw==",                 /* 34 bytes */
        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh-=",                     /* base64url */
        "AAECAwQFBgcICQoLDA0ODxAREh MUFRYXGBkaGxwdHh8=",                    /* inner space */
        "0001020304050607 08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "correct horse battery staple correct horse battery staple12345",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(b, 0x55, sizeof(b));
        CU_ASSERT_EQUAL(gw_key32_parse(bad[i], b), GW_EINVAL);
        CU_ASSERT_EQUAL(b[0], 0); /* zeroed on failure */
        CU_ASSERT_EQUAL(b[31], 0);
    }
}

/* Percent-encoding: unreserved bytes kept ('/' when asked), every other
 * byte as %XX uppercase; decoding strict (a stray '%' or %00 fails) or
 * lenient (a stray '%' stays), and every byte round-trips. */
static void test_pct(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_pct_encode(&b, "a-Z_0.~/ b:\xc3\xa9", 13, 0), GW_OK);
    CU_ASSERT_STRING_EQUAL(b.data, "a-Z_0.~%2F%20b%3A%C3%A9");
    gw_buf_reset(&b);
    CU_ASSERT_EQUAL(gw_pct_encode(&b, "/m/x y", 6, 1), GW_OK);
    CU_ASSERT_STRING_EQUAL(b.data, "/m/x%20y");
    static const struct {
        const char *in;
        long strict, lenient; /* lengths; -1: refused */
        const char *out;      /* the lenient decoding */
    } c[] = {
        {"a%20b", 3, 3, "a b"},         {"%2f%2F", 2, 2, "//"},
        {"100%", -1, 4, "100%"},        {"%4", -1, 2, "%4"},
        {"%zz", -1, 3, "%zz"},          {"%00", -1, 1, ""},
        {"x%C3%A9", 3, 3, "x\xc3\xa9"}, {"", 0, 0, ""},
    };
    for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
        char out[16];
        size_t n = strlen(c[i].in);
        CU_ASSERT_EQUAL(gw_pct_decode(c[i].in, n, out, 1), c[i].strict);
        long l = gw_pct_decode(c[i].in, n, out, 0);
        CU_ASSERT_EQUAL(l, c[i].lenient);
        CU_ASSERT(l >= 0 && memcmp(out, c[i].out, (size_t)l) == 0);
    }
    /* Every byte but NUL round-trips strictly. */
    unsigned char all[255];
    for (int i = 0; i < 255; i++)
        all[i] = (unsigned char)(i + 1);
    gw_buf_reset(&b);
    CU_ASSERT_EQUAL(gw_pct_encode(&b, all, sizeof(all), 0), GW_OK);
    char back[255];
    CU_ASSERT_EQUAL(gw_pct_decode(b.data, b.len, back, 1), 255);
    CU_ASSERT_EQUAL(memcmp(back, all, 255), 0);
    gw_buf_free(&b);
}

static CU_TestInfo tests[] = {
    {"hex: lowercase out, either case in, odd or foreign digits refused", test_hex},
    {"base64: RFC 4648 vectors, exact room", test_b64_vectors},
    {"base64: every length round-trips, appended or not", test_b64_binary_roundtrip},
    {"base64: unpadded, misplaced padding, other alphabets, whitespace refused", test_b64_refusals},
    {"a 32-byte key: 64 hex digits or 44 of canonical base64, nothing else", test_key32},
    {"percent-encoding: RFC 3986 out, strict or lenient in", test_pct},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
