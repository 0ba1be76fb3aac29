/* Tests for common/gw_eventstream.c: published vectors decode and re-encode
 * byte for byte, a stream decodes the same whole, byte by byte and in random
 * splits, and every corruption is caught. */
#include <CUnit/CUnit.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_eventstream.h"

#ifndef UNIT_DATA_DIR
#error "UNIT_DATA_DIR must name tests/unit/common/data"
#endif

/* ---- helpers ---- */

static void must(int rc)
{
    if (rc != GW_OK)
        abort();
}

static void put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* A frame with the given raw header bytes and payload and correct CRCs, but
 * lengths as given (total 0: the true length), to reach checks past the CRCs. */
static void raw_frame(struct gw_buf *out, const void *hdrs, size_t hlen, const void *payload,
                      size_t plen, uint32_t total, uint32_t hlen_field)
{
    unsigned char pre[12];
    put32(pre, total ? total : (uint32_t)(16 + hlen + plen));
    put32(pre + 4, hlen_field);
    put32(pre + 8, gw_es_crc32(0, pre, 8));
    size_t start = out->len;
    must(gw_buf_append(out, pre, 12));
    must(gw_buf_append(out, hdrs, hlen));
    must(gw_buf_append(out, payload, plen));
    unsigned char crc[4];
    put32(crc, gw_es_crc32(0, out->data + start, out->len - start));
    must(gw_buf_append(out, crc, 4));
}

/* Renders a decoded message as text, so that runs can be compared. */
static void render(struct gw_buf *out, const struct gw_es_message *m)
{
    for (size_t i = 0; i < m->nheaders; i++) {
        const struct gw_es_header *h = &m->headers[i];
        must(gw_buf_printf(out, "%s:%d=", h->name, (int)h->type));
        if (h->type == GW_ES_BYTES || h->type == GW_ES_STRING || h->type == GW_ES_UUID) {
            for (size_t j = 0; j < h->v.b.len; j++)
                must(gw_buf_printf(out, "%02x", (unsigned char)h->v.b.p[j]));
        } else {
            must(gw_buf_printf(out, "%" PRId64, h->v.i));
        }
        must(gw_buf_appends(out, ";"));
    }
    must(gw_buf_appends(out, "|"));
    must(gw_buf_append(out, m->payload, m->payload_len));
    must(gw_buf_appends(out, "\n"));
}

/* Decodes `in` delivered in pieces of the given sizes (0-terminated list,
 * cycling; NULL = whole), rendering each message into out. Returns the last
 * gw_es_next code; *consumed gets how much input was taken. */
static int decode_split(const void *in, size_t len, const size_t *sizes, struct gw_buf *out,
                        size_t max, size_t *consumed)
{
    struct gw_es es;
    gw_es_init(&es, max);
    size_t off = 0, k = 0;
    int rc = GW_EAGAIN;
    while (off < len) {
        size_t n = sizes ? sizes[k] : len;
        if (sizes && sizes[++k] == 0)
            k = 0;
        if (n > len - off)
            n = len - off;
        const char *s = (const char *)in + off;
        size_t left = n;
        struct gw_es_message m;
        while ((rc = gw_es_next(&es, &s, &left, &m)) == GW_OK)
            if (out)
                render(out, &m);
        off += n - left;
        if (rc != GW_EAGAIN)
            break;
        CU_ASSERT_EQUAL(left, 0);
    }
    if (consumed)
        *consumed = off;
    gw_es_free(&es);
    return rc;
}

/* Decodes exactly one message from a whole buffer into *m (kept alive in es). */
static int decode_one(struct gw_es *es, const void *in, size_t len, struct gw_es_message *m)
{
    const char *s = in;
    size_t left = len;
    int rc = gw_es_next(es, &s, &left, m);
    if (rc == GW_OK)
        CU_ASSERT_EQUAL(left, 0);
    return rc;
}

/* The decoder died for the given reason. */
#define ASSERT_WHY(es, text) CU_ASSERT(gw_es_why(es) && strcmp(gw_es_why(es), (text)) == 0)

/* ---- published vectors ---- */

#define MAX_VECTORS 16

struct vector {
    char name[64];
    int success;
    unsigned char *bytes;
    size_t len;
};

static struct vector vectors[MAX_VECTORS];
static size_t nvectors;

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

static int load_vectors(void)
{
    FILE *f = fopen(UNIT_DATA_DIR "/eventstream_vectors.txt", "r");
    if (!f)
        return -1;
    static char line[4096];
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char name[64], expect[16], hex[2048];
        if (nvectors == MAX_VECTORS || sscanf(line, "%63s %15s %2047s", name, expect, hex) != 3)
            break;
        struct vector *v = &vectors[nvectors++];
        memcpy(v->name, name, sizeof(name));
        v->success = strcmp(expect, "success") == 0;
        v->len = strlen(hex) / 2;
        v->bytes = malloc(v->len);
        if (!v->bytes)
            abort();
        for (size_t i = 0; i < v->len; i++)
            v->bytes[i] = (unsigned char)(hexval(hex[2 * i]) << 4 | hexval(hex[2 * i + 1]));
    }
    fclose(f);
    return nvectors == 9 ? 0 : -1;
}

static int free_vectors(void)
{
    for (size_t i = 0; i < nvectors; i++)
        free(vectors[i].bytes);
    nvectors = 0;
    return 0;
}

#define UNIT_SUITE_INIT load_vectors
#define UNIT_SUITE_CLEAN free_vectors

static const struct vector *vec(const char *name)
{
    for (size_t i = 0; i < nvectors; i++)
        if (strcmp(vectors[i].name, name) == 0)
            return &vectors[i];
    CU_FAIL_FATAL("missing vector");
    return NULL;
}

static const char FOO_BAR[] = "{'foo':'bar'}";

static void test_crc32(void)
{
    CU_ASSERT_EQUAL(gw_es_crc32(0, "123456789", 9), 0xCBF43926u);
    CU_ASSERT_EQUAL(gw_es_crc32(0, "", 0), 0);
    CU_ASSERT_EQUAL(gw_es_crc32(0, "a", 1), 0xE8B7BE43u);
    /* Fed in pieces, the same as whole. */
    CU_ASSERT_EQUAL(gw_es_crc32(gw_es_crc32(0, "1234", 4), "56789", 5), 0xCBF43926u);
}

static void test_vectors_all_headers(void)
{
    const struct vector *v = vec("all_headers");
    struct gw_es es;
    struct gw_es_message m;
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL_FATAL(decode_one(&es, v->bytes, v->len, &m), GW_OK);
    CU_ASSERT_EQUAL_FATAL(m.nheaders, 10);
    CU_ASSERT_EQUAL(m.payload_len, strlen(FOO_BAR));
    CU_ASSERT_STRING_EQUAL(m.payload, FOO_BAR);
    const struct gw_es_header *h;
    CU_ASSERT((h = gw_es_find(&m, "event-type")) && h->type == GW_ES_INT32 && h->v.i == 40972);
    CU_ASSERT_STRING_EQUAL(gw_es_header(&m, "content-type"), "application/json");
    CU_ASSERT((h = gw_es_find(&m, "bool false")) && h->type == GW_ES_FALSE && h->v.i == 0);
    CU_ASSERT((h = gw_es_find(&m, "bool true")) && h->type == GW_ES_TRUE && h->v.i == 1);
    CU_ASSERT((h = gw_es_find(&m, "byte")) && h->type == GW_ES_BYTE && h->v.i == -49);
    CU_ASSERT((h = gw_es_find(&m, "byte buf")) && h->type == GW_ES_BYTES && h->v.b.len == 20 &&
              strcmp(h->v.b.p, "I'm a little teapot!") == 0);
    CU_ASSERT((h = gw_es_find(&m, "timestamp")) && h->type == GW_ES_TIMESTAMP && h->v.i == 8675309);
    CU_ASSERT((h = gw_es_find(&m, "int16")) && h->type == GW_ES_INT16 && h->v.i == 42);
    CU_ASSERT((h = gw_es_find(&m, "int64")) && h->type == GW_ES_INT64 && h->v.i == 42424242);
    static const unsigned char uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    CU_ASSERT((h = gw_es_find(&m, "uuid")) && h->type == GW_ES_UUID && h->v.b.len == 16 &&
              memcmp(h->v.b.p, uuid, 16) == 0);
    /* Only string headers come back from gw_es_header. */
    CU_ASSERT_PTR_NULL(gw_es_header(&m, "event-type"));
    CU_ASSERT_PTR_NULL(gw_es_header(&m, "byte buf"));
    CU_ASSERT_PTR_NULL(gw_es_header(&m, "missing"));
    CU_ASSERT_PTR_NULL(gw_es_find(&m, "uuid2"));
    gw_es_free(&es);
}

static void test_vectors_small(void)
{
    struct gw_es es;
    struct gw_es_message m;
    const struct vector *v = vec("empty_message");
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL(decode_one(&es, v->bytes, v->len, &m), GW_OK);
    CU_ASSERT_EQUAL(m.nheaders, 0);
    CU_ASSERT_EQUAL(m.payload_len, 0);
    CU_ASSERT_STRING_EQUAL(m.payload, "");
    gw_es_free(&es);

    v = vec("int32_header");
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL_FATAL(decode_one(&es, v->bytes, v->len, &m), GW_OK);
    CU_ASSERT_EQUAL(m.nheaders, 1);
    CU_ASSERT_STRING_EQUAL(m.headers[0].name, "event-type");
    CU_ASSERT_EQUAL(m.headers[0].type, GW_ES_INT32);
    CU_ASSERT_EQUAL(m.headers[0].v.i, 0xa00c);
    CU_ASSERT_STRING_EQUAL(m.payload, FOO_BAR);
    gw_es_free(&es);

    v = vec("payload_no_headers");
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL_FATAL(decode_one(&es, v->bytes, v->len, &m), GW_OK);
    CU_ASSERT_EQUAL(m.nheaders, 0);
    CU_ASSERT_EQUAL(m.payload_len, 13);
    CU_ASSERT_STRING_EQUAL(m.payload, FOO_BAR);
    gw_es_free(&es);

    v = vec("payload_one_str_header");
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL_FATAL(decode_one(&es, v->bytes, v->len, &m), GW_OK);
    CU_ASSERT_EQUAL(m.nheaders, 1);
    CU_ASSERT_STRING_EQUAL(gw_es_header(&m, "content-type"), "application/json");
    CU_ASSERT_EQUAL(m.headers[0].v.b.len, 16);
    CU_ASSERT_STRING_EQUAL(m.payload, FOO_BAR);
    gw_es_free(&es);
}

static void test_vectors_negative(void)
{
    static const struct {
        const char *name;
        const char *why;
    } cases[] = {
        {"corrupted_headers", "message CRC mismatch"},
        {"corrupted_header_len", "prelude CRC mismatch"},
        {"corrupted_length", "prelude CRC mismatch"},
        {"corrupted_payload", "message CRC mismatch"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct vector *v = vec(cases[i].name);
        CU_ASSERT_FALSE(v->success);
        struct gw_es es;
        struct gw_es_message m;
        gw_es_init(&es, 0);
        const char *s = (const char *)v->bytes;
        size_t left = v->len;
        CU_ASSERT_EQUAL(gw_es_next(&es, &s, &left, &m), GW_EINVAL);
        ASSERT_WHY(&es, cases[i].why);
        gw_es_free(&es);
    }
}

/* Every positive vector decodes the same whole and byte by byte. */
static void test_vectors_byte_by_byte(void)
{
    static const size_t one[] = {1, 0};
    for (size_t i = 0; i < nvectors; i++) {
        if (!vectors[i].success)
            continue;
        struct gw_buf a, b;
        gw_buf_init(&a, 0);
        gw_buf_init(&b, 0);
        CU_ASSERT_EQUAL(decode_split(vectors[i].bytes, vectors[i].len, NULL, &a, 0, NULL),
                        GW_EAGAIN);
        CU_ASSERT_EQUAL(decode_split(vectors[i].bytes, vectors[i].len, one, &b, 0, NULL),
                        GW_EAGAIN);
        CU_ASSERT(a.len > 0);
        CU_ASSERT_STRING_EQUAL(a.data, b.data);
        gw_buf_free(&a);
        gw_buf_free(&b);
    }
}

/* The encoder reproduces the published positive vectors byte for byte. */
static void test_encode_matches_vectors(void)
{
    static const unsigned char uuid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const char *teapot = "I'm a little teapot!";
    struct gw_es_header all[] = {
        {.name = "event-type", .type = GW_ES_INT32, .v.i = 40972},
        GW_ES_HSTR("content-type", "application/json"),
        {.name = "bool false", .type = GW_ES_FALSE},
        {.name = "bool true", .type = GW_ES_TRUE},
        {.name = "byte", .type = GW_ES_BYTE, .v.i = -49},
        {.name = "byte buf", .type = GW_ES_BYTES, .v.b = {teapot, strlen(teapot)}},
        {.name = "timestamp", .type = GW_ES_TIMESTAMP, .v.i = 8675309},
        {.name = "int16", .type = GW_ES_INT16, .v.i = 42},
        {.name = "int64", .type = GW_ES_INT64, .v.i = 42424242},
        {.name = "uuid", .type = GW_ES_UUID, .v.b = {(const char *)uuid, 16}},
    };
    struct {
        const char *vector;
        const struct gw_es_header *h;
        size_t n;
        const char *payload;
    } cases[] = {
        {"all_headers", all, 10, FOO_BAR},
        {"empty_message", NULL, 0, ""},
        {"int32_header", all, 1, FOO_BAR},
        {"payload_no_headers", NULL, 0, FOO_BAR},
        {"payload_one_str_header", all + 1, 1, FOO_BAR},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const struct vector *v = vec(cases[i].vector);
        struct gw_buf out;
        gw_buf_init(&out, 0);
        CU_ASSERT_EQUAL(
            gw_es_encode(&out, cases[i].h, cases[i].n, cases[i].payload, strlen(cases[i].payload)),
            GW_OK);
        CU_ASSERT_EQUAL(out.len, v->len);
        CU_ASSERT(out.len == v->len && memcmp(out.data, v->bytes, v->len) == 0);
        gw_buf_free(&out);
    }
}

/* ---- streams ---- */

/* Several messages in one buffer, every header type, Bedrock-shaped events. */
static void build_stream(struct gw_buf *s)
{
    static const unsigned char uuid[16] = {0xde, 0xad, 0xbe, 0xef, 0, 1, 2,  3,
                                           4,    5,    6,    7,    8, 9, 10, 0xff};
    static const char delta[] = "{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hello\"}}";
    struct gw_es_header ev[] = {
        GW_ES_HSTR(":event-type", "contentBlockDelta"),
        GW_ES_HSTR(":content-type", "application/json"),
        GW_ES_HSTR(":message-type", "event"),
    };
    must(gw_es_encode(s, ev, 3, delta, strlen(delta)));
    struct gw_es_header types[] = {
        {.name = "t", .type = GW_ES_TRUE},
        {.name = "f", .type = GW_ES_FALSE},
        {.name = "b", .type = GW_ES_BYTE, .v.i = -128},
        {.name = "s", .type = GW_ES_INT16, .v.i = -32768},
        {.name = "i", .type = GW_ES_INT32, .v.i = INT32_MIN},
        {.name = "l", .type = GW_ES_INT64, .v.i = INT64_MIN},
        {.name = "L", .type = GW_ES_INT64, .v.i = INT64_MAX},
        {.name = "y", .type = GW_ES_BYTES, .v.b = {"\0\1\2", 3}},
        {.name = "e", .type = GW_ES_STRING, .v.b = {"", 0}},
        {.name = "ts", .type = GW_ES_TIMESTAMP, .v.i = 1714564800123},
        {.name = "u", .type = GW_ES_UUID, .v.b = {(const char *)uuid, 16}},
    };
    must(gw_es_encode(s, types, sizeof(types) / sizeof(types[0]), "x", 1));
    must(gw_es_encode(s, NULL, 0, NULL, 0));
    struct gw_es_header exc[] = {
        GW_ES_HSTR(":exception-type", "throttlingException"),
        GW_ES_HSTR(":content-type", "application/json"),
        GW_ES_HSTR(":message-type", "exception"),
    };
    static const char body[] = "{\"message\":\"Too many requests\"}";
    must(gw_es_encode(s, exc, 3, body, strlen(body)));
    /* A payload large enough to span many pieces. */
    char big[5000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    struct gw_es_header one[] = {GW_ES_HSTR(":event-type", "big")};
    must(gw_es_encode(s, one, 1, big, sizeof(big)));
}

static void test_stream_whole_and_split(void)
{
    struct gw_buf s, whole, bytes;
    gw_buf_init(&s, 0);
    gw_buf_init(&whole, 0);
    gw_buf_init(&bytes, 0);
    build_stream(&s);
    CU_ASSERT_EQUAL(decode_split(s.data, s.len, NULL, &whole, 0, NULL), GW_EAGAIN);
    static const size_t one[] = {1, 0};
    CU_ASSERT_EQUAL(decode_split(s.data, s.len, one, &bytes, 0, NULL), GW_EAGAIN);
    CU_ASSERT_STRING_EQUAL(whole.data, bytes.data);

    /* The rendering says what was decoded: check the first lines outright. */
    const char *expect0 = ":event-type:7=636f6e74656e74426c6f636b44656c7461;"
                          ":content-type:7=6170706c69636174696f6e2f6a736f6e;"
                          ":message-type:7=6576656e74;"
                          "|{\"contentBlockIndex\":0,\"delta\":{\"text\":\"Hello\"}}\n"
                          "t:0=1;f:1=0;b:2=-128;s:3=-32768;i:4=-2147483648;"
                          "l:5=-9223372036854775808;L:5=9223372036854775807;y:6=000102;e:7=;"
                          "ts:8=1714564800123;u:9=deadbeef000102030405060708090aff;|x\n"
                          "|\n";
    CU_ASSERT_NSTRING_EQUAL(whole.data, expect0, strlen(expect0));
    CU_ASSERT_PTR_NOT_NULL(strstr(whole.data, "|{\"message\":\"Too many requests\"}\n"));

    srand(4242);
    for (int round = 0; round < 300; round++) {
        size_t sizes[16];
        for (int i = 0; i < 15; i++)
            sizes[i] = 1 + (size_t)(rand() % 97);
        sizes[15] = 0;
        struct gw_buf out;
        gw_buf_init(&out, 0);
        CU_ASSERT_EQUAL(decode_split(s.data, s.len, sizes, &out, 0, NULL), GW_EAGAIN);
        CU_ASSERT_STRING_EQUAL(out.data, whole.data);
        gw_buf_free(&out);
    }
    gw_buf_free(&s);
    gw_buf_free(&whole);
    gw_buf_free(&bytes);
}

/* Headers and payload are readable until the next call; a call that returns
 * GW_EAGAIN consumes the rest of the piece, and the next message starts
 * clean. */
static void test_message_lifetime_and_headers(void)
{
    struct gw_buf s;
    gw_buf_init(&s, 0);
    struct gw_es_header a[] = {GW_ES_HSTR(":event-type", "messageStart"),
                               GW_ES_HSTR(":message-type", "event")};
    struct gw_es_header b[] = {GW_ES_HSTR(":event-type", "messageStop")};
    must(gw_es_encode(&s, a, 2, "{\"role\":\"assistant\"}", 20));
    must(gw_es_encode(&s, b, 1, "{}", 2));
    struct gw_es es;
    struct gw_es_message m;
    gw_es_init(&es, 0);
    const char *p = s.data;
    size_t n = s.len;
    CU_ASSERT_EQUAL_FATAL(gw_es_next(&es, &p, &n, &m), GW_OK);
    CU_ASSERT_STRING_EQUAL(gw_es_header(&m, ":event-type"), "messageStart");
    CU_ASSERT_STRING_EQUAL(gw_es_header(&m, ":message-type"), "event");
    CU_ASSERT_EQUAL(m.payload_len, 20);
    CU_ASSERT_STRING_EQUAL(m.payload, "{\"role\":\"assistant\"}");
    CU_ASSERT_EQUAL(n, s.len - (size_t)(p - s.data));
    CU_ASSERT_EQUAL_FATAL(gw_es_next(&es, &p, &n, &m), GW_OK);
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(m.nheaders, 1);
    CU_ASSERT_STRING_EQUAL(gw_es_header(&m, ":event-type"), "messageStop");
    CU_ASSERT_PTR_NULL(gw_es_header(&m, ":message-type"));
    CU_ASSERT_STRING_EQUAL(m.payload, "{}");
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_EAGAIN);
    CU_ASSERT_PTR_NULL(gw_es_why(&es));
    gw_es_free(&es);
    gw_buf_free(&s);
}

/* ---- corruption ---- */

/* Any single flipped bit is caught: in the lengths or the prelude CRC by the
 * prelude CRC, elsewhere by the message CRC. */
static void test_every_bit_flip_detected(void)
{
    struct gw_buf s;
    gw_buf_init(&s, 0);
    struct gw_es_header h[] = {GW_ES_HSTR(":event-type", "contentBlockDelta"),
                               {.name = "n", .type = GW_ES_INT32, .v.i = 7}};
    must(gw_es_encode(&s, h, 2, "{\"text\":\"hi\"}", 13));
    unsigned char *b = (unsigned char *)s.data;
    for (size_t bit = 0; bit < s.len * 8; bit++) {
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        struct gw_es es;
        struct gw_es_message m;
        gw_es_init(&es, 0);
        const char *p = s.data;
        size_t n = s.len;
        int rc = gw_es_next(&es, &p, &n, &m);
        CU_ASSERT_EQUAL(rc, GW_EINVAL);
        const char *want = bit < 96 ? "prelude CRC mismatch" : "message CRC mismatch";
        ASSERT_WHY(&es, want);
        gw_es_free(&es);
        b[bit / 8] ^= (unsigned char)(1u << (bit % 8));
    }
    gw_buf_free(&s);
}

/* Lengths that are wrong even though the prelude CRC matches. */
static void test_bad_lengths(void)
{
    struct gw_buf f;
    int rc;

    /* Total below the minimum. */
    gw_buf_init(&f, 0);
    raw_frame(&f, NULL, 0, NULL, 0, 15, 0);
    CU_ASSERT_EQUAL(decode_split(f.data, f.len, NULL, NULL, 0, NULL), GW_EINVAL);
    gw_buf_free(&f);

    /* Headers length past the end of the message. */
    gw_buf_init(&f, 0);
    raw_frame(&f, "\1a\0", 3, NULL, 0, 0, 4);
    CU_ASSERT_EQUAL(decode_split(f.data, f.len, NULL, NULL, 0, NULL), GW_EINVAL);
    gw_buf_free(&f);

    /* Headers length above 128 KiB in a message under the ceiling: refused
     * from the prelude alone. */
    unsigned char pre[12];
    put32(pre, 300000);
    put32(pre + 4, 200000);
    put32(pre + 8, gw_es_crc32(0, pre, 8));
    size_t used = 0;
    struct gw_es es;
    gw_es_init(&es, 0);
    const char *p = (const char *)pre;
    size_t n = sizeof(pre);
    struct gw_es_message m;
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_EINVAL);
    ASSERT_WHY(&es, "headers length above the format's 128 KiB limit");
    gw_es_free(&es);

    /* Total larger than the bytes that follow: just incomplete. */
    gw_buf_init(&f, 0);
    raw_frame(&f, NULL, 0, "abc", 3, 100, 0);
    rc = decode_split(f.data, f.len, NULL, NULL, 0, &used);
    CU_ASSERT_EQUAL(rc, GW_EAGAIN);
    CU_ASSERT_EQUAL(used, f.len);
    gw_buf_free(&f);
}

/* A message over the ceiling is refused from its prelude: the decoder takes
 * 12 bytes of it and buffers no more. */
static void test_oversize_not_buffered(void)
{
    size_t big = 100000;
    char *payload = calloc(1, big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(payload);
    struct gw_buf s;
    gw_buf_init(&s, 0);
    must(gw_es_encode(&s, NULL, 0, payload, big));
    struct gw_es es;
    struct gw_es_message m;
    gw_es_init(&es, 4096);
    const char *p = s.data;
    size_t n = s.len;
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_ELIMIT);
    CU_ASSERT_EQUAL(n, s.len - 12);
    CU_ASSERT_EQUAL(es.msg.len, 12);
    CU_ASSERT(es.msg.cap <= 256);
    ASSERT_WHY(&es, "message longer than the ceiling");
    /* Dead from now on: the same answer, nothing consumed. */
    size_t before = n;
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_ELIMIT);
    CU_ASSERT_EQUAL(n, before);
    gw_es_free(&es);

    /* At exactly the ceiling it passes; one byte over it does not. */
    struct gw_buf t;
    gw_buf_init(&t, 0);
    must(gw_es_encode(&t, NULL, 0, payload, 4096 - 16));
    CU_ASSERT_EQUAL(decode_split(t.data, t.len, NULL, NULL, 4096, NULL), GW_EAGAIN);
    gw_buf_reset(&t);
    must(gw_es_encode(&t, NULL, 0, payload, 4096 - 15));
    CU_ASSERT_EQUAL(decode_split(t.data, t.len, NULL, NULL, 4096, NULL), GW_ELIMIT);
    gw_buf_free(&t);

    /* Ceilings: 0 means 1 MiB, anything above the format's 16 MiB is 16 MiB. */
    gw_es_init(&es, 0);
    CU_ASSERT_EQUAL(es.msg.max, GW_ES_DEFAULT_MAX);
    gw_es_free(&es);
    gw_es_init(&es, SIZE_MAX);
    CU_ASSERT_EQUAL(es.msg.max, GW_ES_HARD_MAX);
    gw_es_free(&es);
    free(payload);
    gw_buf_free(&s);
}

/* Malformed headers inside a message whose CRCs are right. */
static void test_bad_headers(void)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *why;
    } cases[] = {
        {"\5ab", 3, "header name or type truncated"},
        {"\1a", 2, "header name or type truncated"},
        {"\1a\4\0\0", 5, "header value truncated"},            /* int32 with 2 bytes */
        {"\1a\5\0\0\0\0\0\0\0", 10, "header value truncated"}, /* int64 with 7 */
        {"\1a\7\0", 4, "header value length truncated"},
        {"\1a\7\0\5abc", 8, "header value truncated"}, /* string says 5, has 3 */
        {"\1a\6\1\0", 5, "header value truncated"},    /* bytes says 256 */
        {"\1a\11\1\2\3", 6, "header value truncated"}, /* uuid with 3 bytes */
        {"\1a\12", 3, "unknown header value type"},
        {"\1a\377", 3, "unknown header value type"},
        {"\1a\0\1b\1\1", 7, "header name or type truncated"}, /* good, good, then a stray byte */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct gw_buf f;
        gw_buf_init(&f, 0);
        raw_frame(&f, cases[i].bytes, cases[i].len, "{}", 2, 0, (uint32_t)cases[i].len);
        struct gw_es es;
        struct gw_es_message m;
        gw_es_init(&es, 0);
        const char *p = f.data;
        size_t n = f.len;
        CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_EINVAL);
        ASSERT_WHY(&es, cases[i].why);
        gw_es_free(&es);
        gw_buf_free(&f);
    }

    /* A zero-length name and empty values are fine; GW_ES_MAX_HEADERS is the cap. */
    struct gw_buf f, hb;
    gw_buf_init(&f, 0);
    raw_frame(&f, "\0\0\1a\7\0\0", 7, NULL, 0, 0, 7);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(decode_split(f.data, f.len, NULL, &out, 0, NULL), GW_EAGAIN);
    CU_ASSERT_STRING_EQUAL(out.data, ":0=1;a:7=;|\n");
    gw_buf_free(&out);
    gw_buf_free(&f);
    gw_buf_init(&hb, 0);
    for (int i = 0; i < GW_ES_MAX_HEADERS; i++)
        must(gw_buf_append(&hb, "\1h\0", 3));
    gw_buf_init(&f, 0);
    raw_frame(&f, hb.data, hb.len, NULL, 0, 0, (uint32_t)hb.len);
    CU_ASSERT_EQUAL(decode_split(f.data, f.len, NULL, NULL, 0, NULL), GW_EAGAIN);
    gw_buf_reset(&f);
    must(gw_buf_append(&hb, "\1h\0", 3));
    raw_frame(&f, hb.data, hb.len, NULL, 0, 0, (uint32_t)hb.len);
    CU_ASSERT_EQUAL(decode_split(f.data, f.len, NULL, NULL, 0, NULL), GW_EINVAL);
    gw_buf_free(&f);
    gw_buf_free(&hb);
}

/* A corrupt message after good ones: the good ones come out, then the error
 * sticks whatever is fed next. */
static void test_error_is_sticky(void)
{
    struct gw_buf s;
    gw_buf_init(&s, 0);
    struct gw_es_header h[] = {GW_ES_HSTR(":event-type", "messageStart")};
    must(gw_es_encode(&s, h, 1, "{}", 2));
    size_t second = s.len;
    must(gw_es_encode(&s, h, 1, "{}", 2));
    s.data[s.len - 5] ^= 0x20; /* the second message's payload */
    size_t third = s.len;
    must(gw_es_encode(&s, h, 1, "{}", 2));

    struct gw_es es;
    struct gw_es_message m;
    gw_es_init(&es, 0);
    const char *p = s.data;
    size_t n = s.len;
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_OK);
    CU_ASSERT_EQUAL((size_t)(p - s.data), second);
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_EINVAL);
    CU_ASSERT_EQUAL((size_t)(p - s.data), third);
    CU_ASSERT_EQUAL(gw_es_next(&es, &p, &n, &m), GW_EINVAL);
    CU_ASSERT_EQUAL((size_t)(p - s.data), third);
    ASSERT_WHY(&es, "message CRC mismatch");
    gw_es_free(&es);
    gw_buf_free(&s);
}

/* ---- encoder refusals ---- */

static void test_encode_refusals(void)
{
    char name[257];
    memset(name, 'n', sizeof(name) - 1);
    name[256] = '\0';
    char *big = calloc(1, 70000);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    struct gw_es_header bad[] = {
        {.name = "", .type = GW_ES_TRUE},
        {.name = NULL, .type = GW_ES_TRUE},
        {.name = name, .type = GW_ES_TRUE},
        {.name = "s", .type = GW_ES_STRING, .v.b = {big, 65536}},
        {.name = "u", .type = GW_ES_UUID, .v.b = {big, 15}},
        {.name = "x", .type = (enum gw_es_type)10},
    };
    struct gw_buf out;
    gw_buf_init(&out, 0);
    must(gw_buf_appends(&out, "keep"));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        CU_ASSERT_EQUAL(gw_es_encode(&out, &bad[i], 1, NULL, 0), GW_EINVAL);
        CU_ASSERT_EQUAL(out.len, 4);
    }
    /* The longest allowed name and string are fine. */
    name[255] = '\0';
    struct gw_es_header ok[] = {{.name = name, .type = GW_ES_STRING, .v.b = {big, 65535}}};
    gw_buf_reset(&out);
    CU_ASSERT_EQUAL(gw_es_encode(&out, ok, 1, NULL, 0), GW_OK);
    CU_ASSERT_EQUAL(out.len, 16 + 1 + 255 + 1 + 2 + 65535);
    CU_ASSERT_EQUAL(decode_split(out.data, out.len, NULL, NULL, 0, NULL), GW_EAGAIN);
    /* Payload past the format's 16 MiB. */
    CU_ASSERT_EQUAL(gw_es_encode(&out, NULL, 0, big, GW_ES_HARD_MAX), GW_EINVAL);
    gw_buf_free(&out);

    /* A full output buffer: refused and left as it was. */
    gw_buf_init(&out, 40);
    must(gw_buf_appends(&out, "keep"));
    struct gw_es_header h[] = {GW_ES_HSTR(":event-type", "contentBlockDelta")};
    CU_ASSERT_EQUAL(gw_es_encode(&out, h, 1, "{}", 2), GW_ELIMIT);
    CU_ASSERT_EQUAL(out.len, 4);
    CU_ASSERT_STRING_EQUAL(out.data, "keep");
    gw_buf_free(&out);
    free(big);
}

static CU_TestInfo tests[] = {
    {"crc32 check value", test_crc32},
    {"published vector: all_headers", test_vectors_all_headers},
    {"published vectors: small positives", test_vectors_small},
    {"published vectors: negatives", test_vectors_negative},
    {"published vectors byte by byte", test_vectors_byte_by_byte},
    {"encoder reproduces published vectors", test_encode_matches_vectors},
    {"stream whole, byte by byte, random splits", test_stream_whole_and_split},
    {"message lifetime and header lookup", test_message_lifetime_and_headers},
    {"every single-bit flip detected", test_every_bit_flip_detected},
    {"bad lengths under a good prelude CRC", test_bad_lengths},
    {"oversize refused without buffering", test_oversize_not_buffered},
    {"malformed headers", test_bad_headers},
    {"errors are sticky", test_error_is_sticky},
    {"encoder refusals", test_encode_refusals},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
