/* Tests for common/gw_multipart.c: every split of several bodies parses the
 * same; each refusal with its status, field and message; limits; the
 * Content-Type's boundary; gw_mp_parse_all; the writer's output parsed back. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_multipart.h"

/* What the callbacks saw, rendered: "P<i>|name|filename|ctype\n" then the
 * data, then "\nE\n" per part ("-" for an absent filename or type). */
struct rec {
    struct gw_buf out;
    size_t parts, ends, bytes;
    int stop_at_part; /* stop when on_part sees this index (-1: never) */
};

static int r_part(const struct gw_mp_part *p, void *arg)
{
    struct rec *r = arg;
    if ((int)p->index == r->stop_at_part)
        return 1;
    CU_ASSERT_EQUAL(p->index, r->parts);
    r->parts++;
    if (gw_buf_printf(&r->out, "P%zu|%s|%s|%s\n", p->index, p->name,
                      p->filename ? p->filename : "-", p->content_type ? p->content_type : "-"))
        abort();
    return 0;
}

static int r_data(const char *b, size_t n, void *arg)
{
    struct rec *r = arg;
    CU_ASSERT(n > 0);
    r->bytes += n;
    if (gw_buf_append(&r->out, b, n))
        abort();
    return 0;
}

static int r_end(void *arg)
{
    struct rec *r = arg;
    r->ends++;
    if (gw_buf_appends(&r->out, "\nE\n"))
        abort();
    return 0;
}

static const char B[] = "XyZ-boundary";

/* Feeds body in pieces (sizes cycling, 0-terminated; NULL: whole; a single
 * split at `at` when sizes is NULL and at < len). Returns the first error
 * or finish's result; *fed: the bytes fed when it stopped. */
static int run(const char *body, size_t len, const size_t *sizes, size_t at,
               const struct gw_mp_limits *lim, struct rec *r, struct gw_mp_err *err, size_t *fed)
{
    struct gw_mp_cbs cbs = {r_part, r_data, r_end, r};
    struct gw_mp *m = gw_mp_new(B, lim, &cbs);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    size_t off = 0, k = 0;
    int rc = GW_OK;
    while (off < len) {
        size_t n;
        if (sizes) {
            n = sizes[k];
            if (sizes[++k] == 0)
                k = 0;
        } else {
            n = off < at ? at - off : len - off;
        }
        if (n > len - off)
            n = len - off;
        /* each piece in a heap block of its own size: ASan sees any overread */
        char *piece = malloc(n ? n : 1);
        memcpy(piece, body + off, n);
        rc = gw_mp_feed(m, piece, n);
        free(piece);
        off += n;
        if (rc != GW_OK)
            break;
    }
    if (rc == GW_OK)
        rc = gw_mp_finish(m);
    if (err)
        *err = *gw_mp_error(m);
    if (fed)
        *fed = off;
    if (rc != GW_OK) {
        /* sticky */
        CU_ASSERT_EQUAL(gw_mp_feed(m, "x", 1), rc);
        CU_ASSERT_EQUAL(gw_mp_finish(m), rc);
    }
    gw_mp_free(m);
    return rc;
}

static void rec_init(struct rec *r)
{
    memset(r, 0, sizeof *r);
    gw_buf_init(&r->out, 0);
    r->stop_at_part = -1;
}

/* The body parses to `want` whole, byte by byte, in every two-piece split
 * and in drawn pieces. */
static void check_all_splits(const char *body, size_t len, const char *want, size_t want_len)
{
    static const size_t one[] = {1, 0}, odd[] = {3, 1, 7, 2, 11, 5, 0};
    struct rec r;
    for (size_t at = 0; at <= len; at++) {
        rec_init(&r);
        CU_ASSERT_EQUAL(run(body, len, NULL, at, NULL, &r, NULL, NULL), GW_OK);
        CU_ASSERT_EQUAL(r.out.len, want_len);
        CU_ASSERT(r.out.len == want_len && memcmp(r.out.data, want, want_len) == 0);
        CU_ASSERT_EQUAL(r.parts, r.ends);
        gw_buf_free(&r.out);
    }
    const size_t *lists[] = {one, odd};
    for (size_t l = 0; l < 2; l++) {
        rec_init(&r);
        CU_ASSERT_EQUAL(run(body, len, lists[l], 0, NULL, &r, NULL, NULL), GW_OK);
        CU_ASSERT(r.out.len == want_len && memcmp(r.out.data, want, want_len) == 0);
        gw_buf_free(&r.out);
    }
    uint32_t s = 2463534242u;
    for (int round = 0; round < 20; round++) {
        size_t sizes[33];
        for (int k = 0; k < 32; k++) {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            sizes[k] = 1 + s % 40;
        }
        sizes[32] = 0;
        rec_init(&r);
        CU_ASSERT_EQUAL(run(body, len, sizes, 0, NULL, &r, NULL, NULL), GW_OK);
        CU_ASSERT(r.out.len == want_len && memcmp(r.out.data, want, want_len) == 0);
        gw_buf_free(&r.out);
    }
}

#define CHECK_SPLITS(body, want) check_all_splits(body, sizeof body - 1, want, sizeof want - 1)

static void test_transcription_body(void)
{
    static const char body[] =
        "--XyZ-boundary\r\n"
        "Content-Disposition: form-data; name=\"model\"\r\n"
        "\r\n"
        "whisper-1\r\n"
        "--XyZ-boundary\r\n"
        "content-disposition: form-data; name=\"file\"; filename=\"a b.wav\"\r\n"
        "CONTENT-TYPE:   audio/wav  \r\n"
        "X-Other: ignored\r\n"
        "\r\n"
        "RIFF\r\n--XyZ-bound\r\r\n\r\n-\r\n--XyZ-boundarZ\0\1\2\r\n"
        "\r\n"
        "--XyZ-boundary\r\n"
        "Content-Disposition: form-data; name=\"response_format\"\r\n"
        "\r\n"
        "verbose_json\r\n"
        "--XyZ-boundary--\r\n";
    static const char want[] = "P0|model|-|-\nwhisper-1\nE\n"
                               "P1|file|a b.wav|audio/wav\n"
                               "RIFF\r\n--XyZ-bound\r\r\n\r\n-\r\n--XyZ-boundarZ\0\1\2\r\n"
                               "\nE\n"
                               "P2|response_format|-|-\nverbose_json\nE\n";
    CHECK_SPLITS(body, want);
}

static void test_preamble_epilogue_padding(void)
{
    static const char body[] = "This is the preamble.\r\n--XyZ-boundar\r\n"
                               "--XyZ-boundary \t \r\n"
                               "Content-Disposition: form-data;name=token_name;"
                               " filename*=UTF-8''ignored; other=\"x\";\r\n"
                               "\r\n"
                               "\r\n"
                               "--XyZ-boundary\r\n"
                               "Content-Disposition: FORM-DATA; NAME = \"q\\\"uo\\\\te\"; "
                               "filename=\"\"\r\n"
                               "\r\n"
                               "x\r\n"
                               "--XyZ-boundary--  trailing words\r\nand an epilogue\r\n";
    static const char want[] = "P0|token_name|-|-\n\nE\n"
                               "P1|q\"uo\\te||-\nx\nE\n";
    CHECK_SPLITS(body, want);
}

static void test_utf8_and_empty_parts(void)
{
    static const char body[] = "--XyZ-boundary\r\n"
                               "Content-Disposition: form-data; name=\"f\"; "
                               "filename=\"r\xc3\xa9sum\xc3\xa9.pdf\"\r\n"
                               "\r\n"
                               "\r\n"
                               "--XyZ-boundary\r\n"
                               "Content-Disposition: form-data; name=\"e\"\r\n"
                               "\r\n"
                               "\r\n"
                               "--XyZ-boundary--";
    static const char want[] = "P0|f|r\xc3\xa9sum\xc3\xa9.pdf|-\n\nE\nP1|e|-|-\n\nE\n";
    CHECK_SPLITS(body, want);
}

struct refusal {
    const char *body;
    int rc, status;
    const char *field, *message;
};

static void check_refusal(const struct refusal *t, const struct gw_mp_limits *lim)
{
    static const size_t one[] = {1, 0};
    for (int split = 0; split < 2; split++) {
        struct rec r;
        rec_init(&r);
        struct gw_mp_err e;
        int rc = run(t->body, strlen(t->body), split ? one : NULL, SIZE_MAX, lim, &r, &e, NULL);
        CU_ASSERT_EQUAL(rc, t->rc);
        CU_ASSERT_EQUAL(e.status, t->status);
        CU_ASSERT_STRING_EQUAL(e.field, t->field);
        CU_ASSERT_STRING_EQUAL(e.message, t->message);
        if (strcmp(e.message, t->message) != 0 || strcmp(e.field, t->field) != 0)
            fprintf(stderr, "\n  body %.40s...: got %d [%s] %s\n", t->body, e.status, e.field,
                    e.message);
        gw_buf_free(&r.out);
    }
}

#define HEAD(name) "--XyZ-boundary\r\nContent-Disposition: form-data; name=\"" name "\"\r\n\r\n"

static void test_refusals(void)
{
    static const struct refusal t[] = {
        {"", GW_EINVAL, 400, "body",
         "the multipart body has no parts (no line \"--XyZ-boundary\")"},
        {"--other\r\n\r\n--other--", GW_EINVAL, 400, "body",
         "the multipart body has no parts (no line \"--XyZ-boundary\")"},
        {"--XyZ-boundary--\r\n", GW_EINVAL, 400, "body", "the multipart body has no parts"},
        {HEAD("a") "x", GW_EINVAL, 400, "body",
         "the multipart body is truncated: no closing boundary"},
        {HEAD("a") "x\r\n--XyZ-boundary", GW_EINVAL, 400, "body",
         "the multipart body is truncated: no closing boundary"},
        {HEAD("a") "x\r\n--XyZ-boundary-", GW_EINVAL, 400, "body",
         "the multipart body is truncated: no closing boundary"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=\"a\"\r\n", GW_EINVAL, 400, "body",
         "the multipart body is truncated: no closing boundary"},
        {"--XyZ-boundary\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ-boundary--", GW_EINVAL, 400,
         "", "part 0 has no Content-Disposition header (form-data; name=...)"},
        {"--XyZ-boundary\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\n", GW_EINVAL, 400,
         "", "part 0's Content-Disposition is not form-data"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\n", GW_EINVAL, 400,
         "", "part 0 has no name (Content-Disposition: form-data; name=...)"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=\"\"\r\n\r\n", GW_EINVAL, 400, "",
         "part 0 has no name (Content-Disposition: form-data; name=...)"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=\"a\r\n\r\n", GW_EINVAL, 400, "",
         "part 0's Content-Disposition is malformed"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data name=\"a\"\r\n\r\n", GW_EINVAL, 400, "",
         "part 0's Content-Disposition is malformed"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=a; name=b\r\n\r\n", GW_EINVAL, 400,
         "a", "part 0's Content-Disposition has name twice"},
        {HEAD("a") "\r\n--XyZ-boundary\r\nContent-Disposition: form-data; name=b\r\n"
                   "Content-Disposition: form-data; name=c\r\n\r\n",
         GW_EINVAL, 400, "b", "part 1 has two Content-Disposition headers"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=b\r\nContent-Type: a\r\n"
         "Content-Type: b\r\n\r\n",
         GW_EINVAL, 400, "b", "part 0 has two Content-Type headers"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=b\n\r\n", GW_EINVAL, 400, "",
         "part 0's head has a line ending in a bare LF (lines end in CRLF)"},
        {"--XyZ-boundary\r\nContent-Disposition: form-data; name=b\r\n X: folded\r\n\r\n",
         GW_EINVAL, 400, "b", "part 0's head has a folded line"},
        {"--XyZ-boundary\r\nno colon here\r\n\r\n", GW_EINVAL, 400, "",
         "part 0's head has a line that is not a header"},
        {"--XyZ-boundary\r\nX-A: a\rb\r\n\r\n", GW_EINVAL, 400, "",
         "part 0's head holds a control character"},
        {"--XyZ-boundary\nContent-Disposition: form-data; name=b\n\n", GW_EINVAL, 400, "body",
         "a boundary line ends in a bare LF (lines end in CRLF)"},
        {"--XyZ-boundary\r\r\n", GW_EINVAL, 400, "body", "a boundary line ends in a bare CR"},
        {HEAD("a") "x\r\n--XyZ-boundaryX\r\n", GW_EINVAL, 400, "body",
         "a boundary line has other characters after the boundary (the boundary must not "
         "occur in the content)"},
        {HEAD("a") "x\r\n--XyZ-boundary-x", GW_EINVAL, 400, "body",
         "a boundary line has other characters after the boundary (the boundary must not "
         "occur in the content)"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        check_refusal(&t[i], NULL);
}

static void test_epilogue_bound(void)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, HEAD("a") "x\r\n--XyZ-boundary--"), GW_OK);
    size_t base = b.len;
    for (int i = 0; i < 1024; i++)
        CU_ASSERT_EQUAL(gw_buf_append(&b, "e", 1), GW_OK);
    struct rec r;
    rec_init(&r);
    CU_ASSERT_EQUAL(run(b.data, b.len, NULL, SIZE_MAX, NULL, &r, NULL, NULL), GW_OK);
    gw_buf_free(&r.out);
    CU_ASSERT_EQUAL(gw_buf_append(&b, "e", 1), GW_OK);
    struct refusal t = {b.data, GW_EINVAL, 400, "body",
                        "more than 1024 bytes after the closing boundary"};
    check_refusal(&t, NULL);
    (void)base;
    gw_buf_free(&b);
}

static void test_size_limits(void)
{
    struct gw_mp_limits lim = {.max_field_bytes = 4, .max_file_bytes = 8, .max_header_bytes = 100};
    static const size_t one[] = {1, 0};
    /* at the limits: accepted */
    static const char ok[] = HEAD("f") "1234\r\n"
                                       "--XyZ-boundary\r\nContent-Disposition: form-data; name=g; "
                                       "filename=x\r\n\r\n12345678\r\n--XyZ-boundary--";
    struct rec r;
    rec_init(&r);
    CU_ASSERT_EQUAL(run(ok, sizeof ok - 1, one, 0, &lim, &r, NULL, NULL), GW_OK);
    CU_ASSERT_EQUAL(r.bytes, 12);
    gw_buf_free(&r.out);
    struct refusal t1 = {HEAD("f") "12345\r\n--XyZ-boundary--", GW_EINVAL, 413, "f",
                         "the field \"f\" is larger than 4 bytes"};
    check_refusal(&t1, &lim);
    struct refusal t2 = {"--XyZ-boundary\r\nContent-Disposition: form-data; name=file; "
                         "filename=a.wav\r\n\r\n123456789",
                         GW_EINVAL, 413, "file",
                         "the file in part \"file\" is larger than 8 bytes"};
    check_refusal(&t2, &lim);
    /* the callbacks never saw more than the limit */
    rec_init(&r);
    CU_ASSERT_EQUAL(run(t2.body, strlen(t2.body), one, 0, &lim, &r, NULL, NULL), GW_EINVAL);
    CU_ASSERT_EQUAL(r.bytes, 8);
    gw_buf_free(&r.out);
    /* a held-back partial delimiter that turns out to be data counts too */
    struct refusal t3 = {HEAD("f") "123\r\n--XyQ", GW_EINVAL, 413, "f",
                         "the field \"f\" is larger than 4 bytes"};
    check_refusal(&t3, &lim);
    /* the header block */
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "--XyZ-boundary\r\nContent-Disposition: form-data; "
                                       "name=a\r\nX-Pad: "),
                    GW_OK);
    while (b.len < 16 + 98)
        CU_ASSERT_EQUAL(gw_buf_append(&b, "p", 1), GW_OK);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "\r\n\r\n"), GW_OK); /* 102 header bytes */
    struct refusal t4 = {b.data, GW_EINVAL, 413, "a", "part 0's head is larger than 100 bytes"};
    check_refusal(&t4, &lim);
    gw_buf_free(&b);
    /* the defaults: a 64 KiB field passes, one byte more does not */
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, HEAD("big")), GW_OK);
    for (int i = 0; i < 65536; i++)
        CU_ASSERT_EQUAL(gw_buf_append(&b, "z", 1), GW_OK);
    size_t at = b.len;
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "\r\n--XyZ-boundary--"), GW_OK);
    rec_init(&r);
    CU_ASSERT_EQUAL(run(b.data, b.len, NULL, SIZE_MAX, NULL, &r, NULL, NULL), GW_OK);
    gw_buf_free(&r.out);
    b.len = at;
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "z\r\n--XyZ-boundary--"), GW_OK);
    struct refusal t5 = {b.data, GW_EINVAL, 413, "big",
                         "the field \"big\" is larger than 65536 bytes"};
    check_refusal(&t5, NULL);
    gw_buf_free(&b);
}

static void test_many_parts(void)
{
    static const char part[] = HEAD("p") "v\r\n";
    size_t pl = sizeof part - 1;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    for (int i = 0; i < 10000; i++)
        CU_ASSERT_EQUAL(gw_buf_append(&b, part, pl), GW_OK);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "--XyZ-boundary--\r\n"), GW_OK);
    static const size_t hundred[] = {100, 0};
    struct rec r;
    rec_init(&r);
    struct gw_mp_err e;
    size_t fed = 0;
    CU_ASSERT_EQUAL(run(b.data, b.len, hundred, 0, NULL, &r, &e, &fed), GW_EINVAL);
    CU_ASSERT_EQUAL(e.status, 400);
    CU_ASSERT_STRING_EQUAL(e.field, "body");
    CU_ASSERT_STRING_EQUAL(e.message, "more than 64 parts");
    CU_ASSERT_EQUAL(r.parts, 64);
    CU_ASSERT_EQUAL(r.ends, 64);
    /* it stopped at the piece holding the 65th part's boundary line */
    CU_ASSERT(fed >= 64 * pl + 16 && fed < 64 * pl + 16 + 100);
    gw_buf_free(&r.out);
    /* a raised limit takes them all */
    struct gw_mp_limits lim = {.max_parts = 10000};
    rec_init(&r);
    CU_ASSERT_EQUAL(run(b.data, b.len, NULL, SIZE_MAX, &lim, &r, NULL, NULL), GW_OK);
    CU_ASSERT_EQUAL(r.parts, 10000);
    gw_buf_free(&r.out);
    lim.max_parts = 9999;
    rec_init(&r);
    CU_ASSERT_EQUAL(run(b.data, b.len, NULL, SIZE_MAX, &lim, &r, &e, NULL), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.message, "more than 9999 parts");
    gw_buf_free(&r.out);
    gw_buf_free(&b);
}

static void test_stop(void)
{
    static const char body[] = HEAD("a") "1\r\n" HEAD("b") "2\r\n--XyZ-boundary--";
    struct rec r;
    rec_init(&r);
    r.stop_at_part = 1;
    struct gw_mp_err e;
    CU_ASSERT_EQUAL(run(body, sizeof body - 1, NULL, SIZE_MAX, NULL, &r, &e, NULL), GW_ECLOSED);
    CU_ASSERT_EQUAL(r.parts, 1);
    CU_ASSERT_STRING_EQUAL(e.message, "stopped");
    gw_buf_free(&r.out);
    /* NULL callbacks are fine */
    struct gw_mp *m = gw_mp_new(B, NULL, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(gw_mp_feed(m, body, sizeof body - 1), GW_OK);
    CU_ASSERT_EQUAL(gw_mp_finish(m), GW_OK);
    CU_ASSERT_EQUAL(gw_mp_error(m)->status, 0);
    gw_mp_free(m);
    CU_ASSERT_PTR_NULL(gw_mp_new("", NULL, NULL));
    CU_ASSERT_PTR_NULL(gw_mp_new("a\r\nb", NULL, NULL));
    CU_ASSERT_PTR_NULL(gw_mp_new("0123456789012345678901234567890123456789012345678901234567890"
                                 "1234567890",
                                 NULL, NULL));
}

static void test_boundary(void)
{
    char out[71];
    struct gw_mp_err e;
    memset(&e, 0, sizeof e);
    CU_ASSERT_EQUAL(gw_mp_boundary("multipart/form-data; boundary=abc", out, sizeof out, &e),
                    GW_OK);
    CU_ASSERT_STRING_EQUAL(out, "abc");
    CU_ASSERT_EQUAL(gw_mp_boundary("Multipart/Form-Data;charset=utf-8;BOUNDARY=\"a b'()+_,-./:=?\"",
                                   out, sizeof out, &e),
                    GW_OK);
    CU_ASSERT_STRING_EQUAL(out, "a b'()+_,-./:=?");
    CU_ASSERT_EQUAL(gw_mp_boundary("  multipart/form-data ;  boundary = ----WebKitFormBoundary7MA4 "
                                   "; x=\"y\"",
                                   out, sizeof out, &e),
                    GW_OK);
    CU_ASSERT_STRING_EQUAL(out, "----WebKitFormBoundary7MA4");
    char seventy[80];
    memset(seventy, 'b', 70);
    seventy[70] = '\0';
    char ct[128];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", seventy);
    CU_ASSERT_EQUAL(gw_mp_boundary(ct, out, sizeof out, &e), GW_OK);
    CU_ASSERT_EQUAL(strlen(out), 70);
    CU_ASSERT_EQUAL(gw_mp_boundary(ct, out, 70, &e), GW_EINVAL);
    struct {
        const char *ct, *msg;
    } bad[] = {
        {NULL, "the Content-Type is not multipart/form-data"},
        {"application/json", "the Content-Type is not multipart/form-data"},
        {"multipart/mixed; boundary=a", "the Content-Type is not multipart/form-data"},
        {"multipart/form-dataX; boundary=a", "the Content-Type is not multipart/form-data"},
        {"multipart/form-data", "the Content-Type multipart/form-data has no boundary"},
        {"multipart/form-data; charset=utf-8",
         "the Content-Type multipart/form-data has no boundary"},
        {"multipart/form-data; boundary=", "the Content-Type's parameters are malformed"},
        {"multipart/form-data; boundary=\"\"",
         "the Content-Type's boundary is malformed (1 to 70 characters of RFC 2046)"},
        {"multipart/form-data; boundary=\"ab \"",
         "the Content-Type's boundary is malformed (1 to 70 characters of RFC 2046)"},
        {"multipart/form-data; boundary=a*b",
         "the Content-Type's boundary is malformed (1 to 70 characters of RFC 2046)"},
        {"multipart/form-data; boundary=\"a", "the Content-Type's parameters are malformed"},
        {"multipart/form-data; boundary=a; boundary=b",
         "the Content-Type has two boundary parameters"},
        {"multipart/form-data; boundary", "the Content-Type's parameters are malformed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&e, 0, sizeof e);
        CU_ASSERT_EQUAL(gw_mp_boundary(bad[i].ct, out, sizeof out, &e), GW_EINVAL);
        CU_ASSERT_EQUAL(e.status, 400);
        CU_ASSERT_STRING_EQUAL(e.field, "content-type");
        CU_ASSERT_STRING_EQUAL(e.message, bad[i].msg);
    }
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%sb", seventy);
    CU_ASSERT_EQUAL(gw_mp_boundary(ct, out, sizeof out, &e), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.message,
                           "the Content-Type's boundary is malformed (1 to 70 characters of RFC "
                           "2046)");
}

static void test_parse_all(void)
{
    static const char body[] =
        "pre\r\n--XyZ-boundary\r\nContent-Disposition: form-data; name=\"file\"; "
        "filename=\"x.wav\"\r\nContent-Type: audio/wav\r\n\r\nRIFF\r\n--XyZ\r\n"
        "--XyZ-boundary\r\nContent-Disposition: form-data; name=model\r\n\r\nwhisper-1\r\n"
        "--XyZ-boundary--\r\n";
    struct gw_mp_span sp[4];
    size_t n = 99;
    struct gw_mp_err e;
    CU_ASSERT_EQUAL(gw_mp_parse_all(body, sizeof body - 1, B, NULL, sp, 4, &n, &e), GW_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(sp[0].name, "file");
    CU_ASSERT_STRING_EQUAL(sp[0].filename, "x.wav");
    CU_ASSERT_STRING_EQUAL(sp[0].content_type, "audio/wav");
    CU_ASSERT_EQUAL(sp[0].has_filename, 1);
    CU_ASSERT(sp[0].data > body && sp[0].data < body + sizeof body);
    CU_ASSERT_EQUAL(sp[0].len, 11);
    CU_ASSERT_EQUAL(memcmp(sp[0].data, "RIFF\r\n--XyZ", 11), 0);
    CU_ASSERT_STRING_EQUAL(sp[1].name, "model");
    CU_ASSERT_EQUAL(sp[1].has_filename, 0);
    CU_ASSERT_STRING_EQUAL(sp[1].filename, "");
    CU_ASSERT_STRING_EQUAL(sp[1].content_type, "");
    CU_ASSERT_EQUAL(sp[1].len, 9);
    CU_ASSERT_EQUAL(memcmp(sp[1].data, "whisper-1", 9), 0);
    /* more parts than the array: the part-count error */
    CU_ASSERT_EQUAL(gw_mp_parse_all(body, sizeof body - 1, B, NULL, sp, 1, &n, &e), GW_EINVAL);
    CU_ASSERT_EQUAL(e.status, 400);
    CU_ASSERT_STRING_EQUAL(e.message, "more than 1 parts");
    /* a filename longer than the span's array */
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "--XyZ-boundary\r\nContent-Disposition: form-data; "
                                       "name=file; filename=\""),
                    GW_OK);
    for (int i = 0; i < 256; i++)
        CU_ASSERT_EQUAL(gw_buf_append(&b, "n", 1), GW_OK);
    CU_ASSERT_EQUAL(gw_buf_appends(&b, "\"\r\n\r\nx\r\n--XyZ-boundary--"), GW_OK);
    CU_ASSERT_EQUAL(gw_mp_parse_all(b.data, b.len, B, NULL, sp, 4, &n, &e), GW_EINVAL);
    CU_ASSERT_EQUAL(e.status, 400);
    CU_ASSERT_STRING_EQUAL(e.field, "file");
    CU_ASSERT_STRING_EQUAL(e.message, "part 0's filename is longer than 255 bytes");
    gw_buf_free(&b);
    /* a refusal of the parser comes through */
    CU_ASSERT_EQUAL(gw_mp_parse_all(body, 40, B, NULL, sp, 4, &n, &e), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(e.message, "the multipart body is truncated: no closing boundary");
}

static void test_writer_round_trip(void)
{
    char bd[41];
    gw_mp_new_boundary(bd);
    CU_ASSERT_EQUAL(strlen(bd), 38);
    CU_ASSERT_EQUAL(strncmp(bd, "llmgw-", 6), 0);
    CU_ASSERT_EQUAL(strspn(bd + 6, "0123456789abcdef"), 32);
    char other[41];
    gw_mp_new_boundary(other);
    CU_ASSERT(strcmp(bd, other) != 0);
    char ct[80], got[71];
    snprintf(ct, sizeof ct, "multipart/form-data; boundary=%s", bd);
    CU_ASSERT_EQUAL(gw_mp_boundary(ct, got, sizeof got, NULL), GW_OK);
    CU_ASSERT_STRING_EQUAL(got, bd);

    static const char bin[] = "\0\r\n--llmgw-\r\n\r\n\xff";
    struct gw_buf b;
    gw_buf_init(&b, 0);
    CU_ASSERT_EQUAL(gw_mp_write_field(&b, bd, "model", "gpt-4o-transcribe", 17), GW_OK);
    CU_ASSERT_EQUAL(gw_mp_write_field(&b, bd, "we\"ird\\name", "", 0), GW_OK);
    CU_ASSERT_EQUAL(
        gw_mp_write_file(&b, bd, "file", "a \"b\".wav", "audio/wav", bin, sizeof bin - 1), GW_OK);
    CU_ASSERT_EQUAL(gw_mp_write_file(&b, bd, "image[]", "x.png", NULL, "P", 1), GW_OK);
    size_t before = b.len;
    CU_ASSERT_EQUAL(gw_mp_write_field(&b, bd, "bad\r\nname", "v", 1), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_mp_write_file(&b, bd, "f", "bad\nname", NULL, "v", 1), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_mp_write_file(&b, bd, "f", "a", "text/plain\r\nX: y", "v", 1), GW_EINVAL);
    char evil[64];
    int el = snprintf(evil, sizeof evil, "a\r\n--%s--", bd);
    CU_ASSERT_EQUAL(gw_mp_write_field(&b, bd, "f", evil, (size_t)el), GW_EINVAL);
    CU_ASSERT_EQUAL(b.len, before);
    CU_ASSERT_EQUAL(b.data[b.len], '\0');
    CU_ASSERT_EQUAL(gw_mp_write_end(&b, bd), GW_OK);
    /* a full buffer leaves it as it was */
    struct gw_buf small;
    gw_buf_init(&small, 60);
    CU_ASSERT_EQUAL(gw_mp_write_field(&small, bd, "model", "0123456789", 10), GW_ELIMIT);
    CU_ASSERT_EQUAL(small.len, 0);
    gw_buf_free(&small);

    struct gw_mp_span sp[8];
    size_t n = 0;
    struct gw_mp_err e;
    CU_ASSERT_EQUAL_FATAL(gw_mp_parse_all(b.data, b.len, bd, NULL, sp, 8, &n, &e), GW_OK);
    CU_ASSERT_EQUAL_FATAL(n, 4);
    CU_ASSERT_STRING_EQUAL(sp[0].name, "model");
    CU_ASSERT(sp[0].len == 17 && memcmp(sp[0].data, "gpt-4o-transcribe", 17) == 0);
    CU_ASSERT_STRING_EQUAL(sp[1].name, "we\"ird\\name");
    CU_ASSERT_EQUAL(sp[1].len, 0);
    CU_ASSERT_STRING_EQUAL(sp[2].name, "file");
    CU_ASSERT_STRING_EQUAL(sp[2].filename, "a \"b\".wav");
    CU_ASSERT_STRING_EQUAL(sp[2].content_type, "audio/wav");
    CU_ASSERT(sp[2].len == sizeof bin - 1 && memcmp(sp[2].data, bin, sizeof bin - 1) == 0);
    CU_ASSERT_STRING_EQUAL(sp[3].name, "image[]");
    CU_ASSERT_STRING_EQUAL(sp[3].content_type, "application/octet-stream");
    CU_ASSERT_EQUAL(sp[3].has_filename, 1);
    gw_buf_free(&b);
}

static CU_TestInfo tests[] = {
    {"a transcription body, every split", test_transcription_body},
    {"preamble, epilogue, padding, escapes", test_preamble_epilogue_padding},
    {"utf-8 filenames and empty parts", test_utf8_and_empty_parts},
    {"refusals: status, field, message", test_refusals},
    {"the epilogue's bound", test_epilogue_bound},
    {"size limits", test_size_limits},
    {"10,000 parts: refused after 64", test_many_parts},
    {"a callback stops the parse", test_stop},
    {"the Content-Type's boundary", test_boundary},
    {"gw_mp_parse_all", test_parse_all},
    {"the writer, parsed back", test_writer_round_trip},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
