/* Tests for common/gw_sse.c: the same stream parses identically whether it
 * arrives whole, byte by byte, or in random splits. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_sse.h"

/* Parses `in` delivered in pieces of the given sizes (0-terminated list,
 * cycling; NULL = whole) and renders events as "event|data|id\n". */
static int parse_split(const char *in, size_t len, const size_t *sizes, struct gw_buf *out,
                       size_t max)
{
    struct gw_sse p;
    gw_sse_init(&p, max);
    size_t off = 0, k = 0;
    int rc = GW_EAGAIN;
    while (off < len) {
        size_t n = sizes ? sizes[k] : len;
        if (sizes && sizes[++k] == 0)
            k = 0;
        if (n > len - off)
            n = len - off;
        const char *s = in + off;
        size_t left = n;
        struct gw_sse_event ev;
        while ((rc = gw_sse_next(&p, &s, &left, &ev)) == GW_OK) {
            if (gw_buf_printf(out, "%s|%s|%s\n", ev.event, ev.data, ev.id ? ev.id : "-"))
                abort();
        }
        if (rc != GW_EAGAIN)
            break;
        CU_ASSERT_EQUAL(left, 0);
        off += n;
    }
    gw_sse_free(&p);
    return rc;
}

static const char STREAM[] =
    ": comment line\r\n"
    "data: {\"a\":1}\n\n"
    "event: message_start\r\n"
    "data: {\"type\":\"message_start\"}\r\n\r\n"
    "data:no-space\r"
    "\r"
    "data: line1\n"
    "data: line2\n"
    "id: 7\n\n"
    "retry: 100\n"
    "unknown: x\n"
    "event: ignored\n"
    "data\n\n" /* empty data: not dispatched, and the event name is dropped */
    "\n\n"
    "data: [DONE]\n\n"
    "data: incomplete-at-eof";

static const char EXPECTED[] = "|{\"a\":1}|-\n"
                               "message_start|{\"type\":\"message_start\"}|-\n"
                               "|no-space|-\n"
                               "|line1\nline2|7\n"
                               "|[DONE]|7\n";

static void test_whole(void)
{
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(parse_split(STREAM, strlen(STREAM), NULL, &out, 0), GW_EAGAIN);
    CU_ASSERT_STRING_EQUAL(out.data, EXPECTED);
    gw_buf_free(&out);
}

static void test_byte_by_byte(void)
{
    static const size_t one[] = {1, 0};
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(parse_split(STREAM, strlen(STREAM), one, &out, 0), GW_EAGAIN);
    CU_ASSERT_STRING_EQUAL(out.data, EXPECTED);
    gw_buf_free(&out);
}

static void test_random_splits(void)
{
    srand(12345);
    for (int round = 0; round < 500; round++) {
        size_t sizes[16];
        for (int i = 0; i < 15; i++)
            sizes[i] = 1 + (size_t)(rand() % 23);
        sizes[15] = 0;
        struct gw_buf out;
        gw_buf_init(&out, 0);
        CU_ASSERT_EQUAL(parse_split(STREAM, strlen(STREAM), sizes, &out, 0), GW_EAGAIN);
        CU_ASSERT_STRING_EQUAL(out.data, EXPECTED);
        gw_buf_free(&out);
    }
}

/* CR at the end of one piece and LF at the start of the next is one line
 * end, not an empty line that would dispatch early. */
static void test_crlf_split(void)
{
    static const char s[] = "data: a\r\ndata: b\r\n\r\n";
    static const size_t sizes[] = {8, 0}; /* splits right after the first CR */
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(parse_split(s, strlen(s), sizes, &out, 0), GW_EAGAIN);
    CU_ASSERT_STRING_EQUAL(out.data, "|a\nb|-\n");
    gw_buf_free(&out);
}

static void test_limit(void)
{
    char big[300];
    memset(big, 'x', sizeof(big));
    memcpy(big, "data: ", 6);
    big[sizeof(big) - 1] = '\n';
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(parse_split(big, sizeof(big), NULL, &out, 128), GW_ELIMIT);
    CU_ASSERT_EQUAL(out.len, 0);
    gw_buf_free(&out);
    /* Many short data lines can pass the ceiling on the event as a whole. */
    struct gw_buf many;
    gw_buf_init(&many, 0);
    for (int i = 0; i < 40; i++)
        if (gw_buf_appends(&many, "data: 0123456789\n"))
            abort();
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(parse_split(many.data, many.len, NULL, &out, 128), GW_ELIMIT);
    gw_buf_free(&out);
    gw_buf_free(&many);
}

static CU_TestInfo tests[] = {
    {"whole stream", test_whole},
    {"byte by byte", test_byte_by_byte},
    {"random splits", test_random_splits},
    {"CRLF split across pieces", test_crlf_split},
    {"line and event ceilings", test_limit},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
