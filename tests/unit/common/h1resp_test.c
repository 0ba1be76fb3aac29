/*
 * gw_h1resp: where a response head ends, what it says, and the chunked
 * decoder, fed whole, byte by byte and in random pieces.
 */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_h1resp.h"

static void test_head_end(void)
{
    CU_ASSERT_EQUAL(gw_h1_head_end("HTTP/1.1 200 OK\r\n\r\nbody", 23), 19);
    CU_ASSERT_EQUAL(gw_h1_head_end("HTTP/1.1 200 OK\n\nbody", 21), 17);
    CU_ASSERT_EQUAL(gw_h1_head_end("HTTP/1.1 200 OK\r\nA: b\r\n", 24), 0);
    CU_ASSERT_EQUAL(gw_h1_head_end("HTTP/1.1 200 OK\r\nA: b\r\n\r", 25), 0);
    CU_ASSERT_EQUAL(gw_h1_head_end("", 0), 0);
}

static int parse(const char *s, struct gw_h1_head *h)
{
    const char *why = NULL;
    size_t n = gw_h1_head_end(s, strlen(s));
    CU_ASSERT_NOT_EQUAL_FATAL(n, 0);
    int rc = gw_h1_parse_head(s, n, h, NULL, NULL, &why);
    CU_ASSERT(rc == GW_OK || why != NULL);
    return rc;
}

struct lines {
    int n;
    char text[512];
};

static void on_line(const char *l, size_t len, void *arg)
{
    struct lines *ls = arg;
    ls->n++;
    size_t have = strlen(ls->text);
    if (have + len < sizeof(ls->text))
        memcpy(ls->text + have, l, len);
}

static void test_framing(void)
{
    struct gw_h1_head h;
    CU_ASSERT_EQUAL(parse("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", &h), GW_OK);
    CU_ASSERT_EQUAL(h.status, 200);
    CU_ASSERT_EQUAL(h.framing, GW_H1_LENGTH);
    CU_ASSERT_EQUAL(h.length, 12);
    CU_ASSERT_TRUE(h.keep_alive);

    CU_ASSERT_EQUAL(
        parse("HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\ncontent-length: 3\r\n\r\n", &h),
        GW_OK);
    CU_ASSERT_EQUAL(h.framing, GW_H1_CHUNKED); /* Transfer-Encoding wins */
    CU_ASSERT_FALSE(h.keep_alive);             /* but such a connection is not reused */
    CU_ASSERT_EQUAL(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", &h), GW_OK);
    CU_ASSERT_TRUE(h.keep_alive);

    CU_ASSERT_EQUAL(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", &h),
                    GW_OK);
    CU_ASSERT_EQUAL(h.framing, GW_H1_CLOSE);
    CU_ASSERT_FALSE(h.keep_alive);

    CU_ASSERT_EQUAL(parse("HTTP/1.1 200 OK\r\nX: y\r\n\r\n", &h), GW_OK);
    CU_ASSERT_EQUAL(h.framing, GW_H1_CLOSE);
    CU_ASSERT_FALSE(h.keep_alive);

    CU_ASSERT_EQUAL(parse("HTTP/1.1 204 No Content\r\n\r\n", &h), GW_OK);
    CU_ASSERT_EQUAL(h.framing, GW_H1_EMPTY);
    CU_ASSERT_EQUAL(parse("HTTP/1.1 100 Continue\r\n\r\n", &h), GW_OK);
    CU_ASSERT_EQUAL(h.status, 100);
    CU_ASSERT_EQUAL(h.framing, GW_H1_EMPTY);

    /* HTTP/1.0 closes unless it says keep-alive; Connection: close closes. */
    CU_ASSERT_EQUAL(parse("HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", &h), GW_OK);
    CU_ASSERT_FALSE(h.keep_alive);
    CU_ASSERT_EQUAL(
        parse("HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\n", &h), GW_OK);
    CU_ASSERT_TRUE(h.keep_alive);
    CU_ASSERT_EQUAL(
        parse("HTTP/1.1 429 Too Many\r\nConnection: foo, close\r\nContent-Length: 1\r\n\r\n", &h),
        GW_OK);
    CU_ASSERT_EQUAL(h.status, 429);
    CU_ASSERT_FALSE(h.keep_alive);

    /* No reason phrase; bare LF lines. */
    CU_ASSERT_EQUAL(parse("HTTP/1.1 503\nContent-Length: 0\n\n", &h), GW_OK);
    CU_ASSERT_EQUAL(h.status, 503);
    CU_ASSERT_EQUAL(h.length, 0);

    /* Each line reaches the callback as it came. */
    const char *s = "HTTP/1.1 200 OK\r\nRetry-After: 5\r\n\r\n";
    struct lines ls = {0};
    const char *why;
    CU_ASSERT_EQUAL(gw_h1_parse_head(s, strlen(s), &h, on_line, &ls, &why), GW_OK);
    CU_ASSERT_EQUAL(ls.n, 3);
    CU_ASSERT_STRING_EQUAL(ls.text, s);
}

static void test_refused(void)
{
    static const char *const bad[] = {
        "HTTP/2 200 OK\r\n\r\n",
        "HTTP/1.1 20 OK\r\n\r\n",
        "HTTP/1.1 2000 OK\r\n\r\n",
        "ICY 200 OK\r\n\r\n",
        "HTTP/1.1 099 x\r\n\r\n",
        "HTTP/1.1 200 OK\r\n folded\r\n\r\n",
        "HTTP/1.1 200 OK\r\nNo colon here\r\n\r\n",
        "HTTP/1.1 200 OK\r\nName : v\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length:\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 1234567890123456789\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX: a\x01 b\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct gw_h1_head h;
        const char *why = NULL;
        size_t n = gw_h1_head_end(bad[i], strlen(bad[i]));
        CU_ASSERT_NOT_EQUAL(n, 0);
        CU_ASSERT_EQUAL(gw_h1_parse_head(bad[i], n, &h, NULL, NULL, &why), GW_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(why);
    }
    /* Equal copies are one length. */
    struct gw_h1_head h;
    CU_ASSERT_EQUAL(parse("HTTP/1.1 200 OK\r\nContent-Length: 7\r\nContent-Length: 7\r\n\r\n", &h),
                    GW_OK);
    CU_ASSERT_EQUAL(h.length, 7);
}

/* Decodes in pieces of at most `step` bytes (0: random); the data into out.
 * Returns the bytes consumed, or -1 when refused. */
static long dechunk(const char *in, size_t n, size_t step, struct gw_buf *out, int *done)
{
    struct gw_h1_chunked c = {0};
    size_t off = 0;
    while (off < n && !c.done) {
        size_t piece = step ? step : 1 + (size_t)(rand() % 7);
        if (piece > n - off)
            piece = n - off;
        size_t used = 0;
        while (used < piece && !c.done) {
            const char *d;
            size_t dl;
            long r = gw_h1_chunked_feed(&c, in + off + used, piece - used, &d, &dl);
            if (r < 0)
                return -1;
            if (dl && gw_buf_append(out, d, dl) != GW_OK)
                abort();
            used += (size_t)r;
            if (r == 0)
                break;
        }
        off += used;
        if (used < piece && !c.done)
            return -1;
    }
    *done = c.done;
    return (long)off;
}

static void test_chunked(void)
{
    static const char msg[] = "5\r\nhello\r\n1;ext=\"x\"\r\n \r\n10\r\n0123456789abcdef\r\n"
                              "0\r\nTrailer: v\r\n\r\nNEXT";
    size_t n = sizeof(msg) - 1;
    srand(7);
    for (size_t step = 0; step <= n; step += (step < 4 ? 1 : 9)) {
        for (int round = 0; round < (step ? 1 : 50); round++) {
            struct gw_buf out;
            gw_buf_init(&out, 0);
            int done = 0;
            long used = dechunk(msg, n, step, &out, &done);
            CU_ASSERT_EQUAL(used, (long)n - 4); /* "NEXT" is not the message's */
            CU_ASSERT_TRUE(done);
            CU_ASSERT_EQUAL(out.len, 22);
            CU_ASSERT(out.data && memcmp(out.data, "hello 0123456789abcdef", 22) == 0);
            gw_buf_free(&out);
        }
    }
    /* Bare LF line ends are taken. */
    struct gw_buf out;
    gw_buf_init(&out, 0);
    int done = 0;
    CU_ASSERT_EQUAL(dechunk("3\nabc\n0\n\n", 9, 0, &out, &done), 9);
    CU_ASSERT_TRUE(done);
    CU_ASSERT_EQUAL(out.len, 3);
    gw_buf_free(&out);
    /* Unfinished: all consumed, not done. */
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(dechunk("5\r\nhel", 6, 0, &out, &done), 6);
    CU_ASSERT_FALSE(done);
    CU_ASSERT_EQUAL(out.len, 3);
    gw_buf_free(&out);
}

static void test_chunked_refused(void)
{
    static const char *const bad[] = {
        "x\r\n",                            /* not hex */
        "\r\n",                             /* no digits */
        "5\r\nhelloX\r\n",                  /* data not followed by CRLF */
        "5\r\nhello\rX",                    /* CR not followed by LF */
        "5\rX",                             /* size line CR without LF */
        "1000000000000000\r\n",             /* past 2^60 */
        "5 extension-ok\r\nhello\r\n0\r\r", /* final CR without LF */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
        struct gw_buf out;
        gw_buf_init(&out, 0);
        int done = 0;
        CU_ASSERT_EQUAL(dechunk(bad[i], strlen(bad[i]), 1, &out, &done), -1);
        gw_buf_free(&out);
    }
    /* An extension line passing 4 KiB is refused. */
    char big[5000];
    memset(big, 'e', sizeof(big));
    big[0] = '1';
    big[1] = ';';
    struct gw_buf out;
    gw_buf_init(&out, 0);
    int done = 0;
    CU_ASSERT_EQUAL(dechunk(big, sizeof(big), 0, &out, &done), -1);
    gw_buf_free(&out);
}

static CU_TestInfo tests[] = {
    {"where the head ends", test_head_end},
    {"status, framing and keep-alive", test_framing},
    {"malformed heads are refused", test_refused},
    {"chunked: every split gives the same data", test_chunked},
    {"chunked: malformed coding is refused", test_chunked_refused},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
