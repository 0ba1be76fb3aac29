/*
 * libFuzzer target for gw_eventstream (common/gw_eventstream.c), the
 * decoder of AWS event-stream bodies (Bedrock streams) and its encoder.
 * Checked:
 *  - split invariance: the input decodes to the same messages (headers,
 *    values, payload, byte for byte) and the same end (GW_EAGAIN, or the
 *    same error with the same gw_es_why) whole, byte by byte and in pieces
 *    of sizes drawn from the input, each piece ending where a heap block
 *    ends, so AddressSanitizer sees a read past a piece; an error is
 *    sticky; GW_EAGAIN means the piece was used up;
 *  - the ceiling: the decoder never holds more than it, and GW_ELIMIT comes
 *    exactly when a prelude's total length passes it, with nothing but the
 *    prelude buffered;
 *  - where and why it ends: a plain reading of the whole input by the
 *    format's description (ref_decode) finds the same number of messages
 *    and the same end, error and gw_es_why;
 *  - each message decoded is what the input held: encoded again with
 *    gw_es_encode (when its header names can be: non-empty, no NUL) it is
 *    the input's bytes at that place;
 *  - a round trip: a message built from the input's bytes (headers of
 *    every type, a payload) encodes, decodes in pieces to the same message,
 *    and nothing more; names the encoder must refuse are refused, out left
 *    as it was.
 * Random bytes rarely carry a right CRC: unless the first byte's low bit is
 * set, the target writes both CRCs of each message into the input before
 * decoding, so the fuzzer reaches the lengths and headers behind them. The
 * second byte chooses the ceiling (clamped to 16 bytes at least).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_eventstream.h"

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static void must(int rc)
{
    CHECK(rc == GW_OK);
}

/* A message rendered into out: every header's name, type and value, then
 * the payload, each with its length, so two renderings are equal exactly
 * when the messages are. */
static void render(struct gw_buf *out, const struct gw_es_message *m)
{
    must(gw_buf_printf(out, "%zu{", m->nheaders));
    for (size_t i = 0; i < m->nheaders; i++) {
        const struct gw_es_header *h = &m->headers[i];
        must(gw_buf_printf(out, "%zu:", h->name_len));
        must(gw_buf_append(out, h->name, h->name_len));
        must(gw_buf_printf(out, "/%d=", (int)h->type));
        if (h->type == GW_ES_BYTES || h->type == GW_ES_STRING || h->type == GW_ES_UUID) {
            must(gw_buf_printf(out, "%zu:", h->v.b.len));
            must(gw_buf_append(out, h->v.b.p, h->v.b.len));
        } else {
            must(gw_buf_printf(out, "%lld", (long long)h->v.i));
        }
        must(gw_buf_append(out, ";", 1));
    }
    must(gw_buf_printf(out, "}%zu:", m->payload_len));
    must(gw_buf_append(out, m->payload, m->payload_len));
    must(gw_buf_append(out, "\n", 1));
}

/* What the decoder promises of a message it hands out. */
static void check_message(const struct gw_es_message *m)
{
    CHECK(m->nheaders <= GW_ES_MAX_HEADERS);
    CHECK(m->payload[m->payload_len] == '\0');
    for (size_t i = 0; i < m->nheaders; i++) {
        const struct gw_es_header *h = &m->headers[i];
        CHECK(h->name[h->name_len] == '\0' && h->name_len <= 255);
        CHECK((unsigned)h->type <= GW_ES_UUID);
        if (h->type == GW_ES_BYTES || h->type == GW_ES_STRING)
            CHECK(h->v.b.len <= 0xffff && h->v.b.p[h->v.b.len] == '\0');
        if (h->type == GW_ES_UUID)
            CHECK(h->v.b.len == 16);
        if (h->type == GW_ES_TRUE || h->type == GW_ES_FALSE)
            CHECK(h->v.i == (h->type == GW_ES_TRUE));
        if (h->type == GW_ES_BYTE)
            CHECK(h->v.i >= INT8_MIN && h->v.i <= INT8_MAX);
        if (h->type == GW_ES_INT16)
            CHECK(h->v.i >= INT16_MIN && h->v.i <= INT16_MAX);
        if (h->type == GW_ES_INT32)
            CHECK(h->v.i >= INT32_MIN && h->v.i <= INT32_MAX);
    }
}

/* ------------------------------------------------------------------ pieces */

struct run {
    int rc;          /* GW_EAGAIN, or the error the decoder died of */
    const char *why; /* gw_es_why at the end */
    size_t used;     /* input bytes the messages handed out took */
    size_t count;
};

/* The ceiling gw_es_init makes of max. */
static size_t ceiling(size_t max)
{
    if (!max)
        return GW_ES_DEFAULT_MAX;
    if (max > GW_ES_HARD_MAX)
        return GW_ES_HARD_MAX;
    return max < GW_ES_MIN_MESSAGE ? GW_ES_MIN_MESSAGE : max;
}

/* Decodes s[0..n) in pieces, rendering each message into out; when check
 * is set, each message is also encoded again and compared with the input
 * bytes it came from. */
static struct run drive(const uint8_t *s, size_t n, size_t max, struct chunker *ch,
                        struct gw_buf *out, int check)
{
    size_t cap = ceiling(max);
    struct gw_es es;
    gw_es_init(&es, max);
    struct run run = {.rc = GW_EAGAIN};
    char *block = malloc(n ? n : 1);
    CHECK(block != NULL);
    size_t off = 0;
    do { /* at least one call, so an empty input is fed too */
        size_t len = next_size(ch, n - off);
        char *piece = block + (n - len);
        if (len)
            memcpy(piece, s + off, len);
        const char *b = piece;
        size_t left = len;
        struct gw_es_message m;
        int rc;
        while ((rc = gw_es_next(&es, &b, &left, &m)) == GW_OK) {
            CHECK(b + left == piece + len && left <= len);
            CHECK(es.msg.len == es.total && es.total >= GW_ES_MIN_MESSAGE && es.total <= cap);
            check_message(&m);
            CHECK(es.headers_len <= es.total - GW_ES_MIN_MESSAGE &&
                  m.payload_len == es.total - GW_ES_MIN_MESSAGE - es.headers_len);
            render(out, &m);
            if (check) {
                /* The message's bytes are the input's, from where the last
                 * one ended. */
                size_t total = es.total;
                CHECK(run.used + total <= n);
                int encodable = 1;
                for (size_t i = 0; i < m.nheaders; i++)
                    encodable &= m.headers[i].name_len > 0 &&
                                 strlen(m.headers[i].name) == m.headers[i].name_len;
                if (encodable) {
                    struct gw_buf re;
                    gw_buf_init(&re, 0);
                    must(gw_es_encode(&re, m.headers, m.nheaders, m.payload, m.payload_len));
                    CHECK(re.len == total && memcmp(re.data, s + run.used, total) == 0);
                    gw_buf_free(&re);
                }
            }
            run.used += es.total;
            run.count++;
        }
        CHECK(b + left == piece + len && left <= len);
        CHECK(es.msg.len <= cap);
        run.rc = rc;
        if (rc != GW_EAGAIN) {
            CHECK(rc == GW_EINVAL || rc == GW_ELIMIT);
            CHECK(gw_es_why(&es) != NULL);
            const uint8_t *pre = (const uint8_t *)es.msg.data;
            if (rc == GW_ELIMIT) /* refused on the prelude alone */
                CHECK(es.msg.len == GW_ES_PRELUDE_LEN && get32(pre) > cap);
            else if (es.msg.len == GW_ES_PRELUDE_LEN && !es.total &&
                     gw_es_crc32(0, pre, 8) == get32(pre + 8) && get32(pre) >= GW_ES_MIN_MESSAGE)
                CHECK(get32(pre) <= cap); /* a prelude past the ceiling is GW_ELIMIT */
            /* Dead for good, whatever comes next. */
            CHECK(gw_es_next(&es, &b, &left, &m) == rc);
            break;
        }
        CHECK(gw_es_why(&es) == NULL);
        CHECK(left == 0);
        off += len;
    } while (off < n);
    run.why = gw_es_why(&es);
    free(block);
    gw_es_free(&es);
    return run;
}

/* Writes both CRCs of each message into s, as far as the lengths reach. */
static void fix_crcs(uint8_t *s, size_t n)
{
    size_t o = 0;
    while (n - o >= GW_ES_PRELUDE_LEN) {
        put32(s + o + 8, gw_es_crc32(0, s + o, 8));
        uint32_t total = get32(s + o);
        if (total < GW_ES_MIN_MESSAGE || total > n - o)
            return;
        put32(s + o + total - 4, gw_es_crc32(0, s + o, total - 4));
        o += total;
    }
}

/* ------------------------------------------------------------------ reference */

/* Whether the headers section h[0..n) holds well-formed headers, at most
 * GW_ES_MAX_HEADERS of them; NULL, or why not (gw_es_why's words). */
static const char *ref_headers(const uint8_t *h, size_t n)
{
    size_t o = 0, k = 0;
    while (o < n) {
        if (k++ == GW_ES_MAX_HEADERS)
            return "more headers than the decoder keeps";
        size_t nl = h[o];
        if (n - o < 2 + nl)
            return "header name or type truncated";
        uint8_t type = h[o + 1 + nl];
        o += 2 + nl;
        size_t need;
        if (type <= GW_ES_FALSE) {
            need = 0;
        } else if (type == GW_ES_BYTE) {
            need = 1;
        } else if (type == GW_ES_INT16) {
            need = 2;
        } else if (type == GW_ES_INT32) {
            need = 4;
        } else if (type == GW_ES_INT64 || type == GW_ES_TIMESTAMP) {
            need = 8;
        } else if (type == GW_ES_UUID) {
            need = 16;
        } else if (type == GW_ES_BYTES || type == GW_ES_STRING) {
            if (n - o < 2)
                return "header value length truncated";
            need = 2 + ((size_t)h[o] << 8 | h[o + 1]);
        } else {
            return "unknown header value type";
        }
        if (n - o < need)
            return "header value truncated";
        o += need;
    }
    return NULL;
}

/* The whole input read message by message, from the format's description
 * in gw_eventstream.h: how the decoder must end, and where. */
static struct run ref_decode(const uint8_t *s, size_t n, size_t cap)
{
    struct run r = {.rc = GW_EAGAIN};
    size_t o = 0;
    for (;;) {
        const uint8_t *m = s + o;
        if (n - o < GW_ES_PRELUDE_LEN)
            return r;
        uint32_t total = get32(m), hlen = get32(m + 4);
        r.rc = GW_EINVAL;
        if (gw_es_crc32(0, m, 8) != get32(m + 8))
            r.why = "prelude CRC mismatch";
        else if (total < GW_ES_MIN_MESSAGE)
            r.why = "total length below the 16-byte minimum";
        else if (total > cap) {
            r.rc = GW_ELIMIT;
            r.why = "message longer than the ceiling";
        } else if (hlen > total - GW_ES_MIN_MESSAGE)
            r.why = "headers length beyond the message";
        else if (hlen > GW_ES_MAX_HEADERS_LEN)
            r.why = "headers length above the format's 128 KiB limit";
        else if (n - o < total)
            r.rc = GW_EAGAIN; /* the rest is yet to come */
        else if (gw_es_crc32(0, m, total - 4) != get32(m + total - 4))
            r.why = "message CRC mismatch";
        else
            r.why = ref_headers(m + GW_ES_PRELUDE_LEN, hlen);
        if (r.why || r.rc == GW_EAGAIN)
            return r;
        r.rc = GW_EAGAIN;
        r.count++;
        r.used += total;
        o += total;
    }
}

/* ------------------------------------------------------------------ round trip */

struct src {
    const uint8_t *p;
    size_t n;
};

static uint8_t take(struct src *s)
{
    if (!s->n)
        return 0;
    s->n--;
    return *s->p++;
}

static void round_trip(const uint8_t *data, size_t size, uint32_t seed)
{
    struct src src = {data, size};
    struct gw_es_header h[GW_ES_MAX_HEADERS];
    char names[GW_ES_MAX_HEADERS][33];
    uint8_t uuid[GW_ES_MAX_HEADERS][16];
    size_t nh = take(&src) % (GW_ES_MAX_HEADERS + 1);
    for (size_t i = 0; i < nh; i++) {
        size_t nl = 1 + take(&src) % 32;
        for (size_t j = 0; j < nl; j++) {
            uint8_t c = take(&src);
            names[i][j] = (char)(c ? c : ':'); /* the encoder takes names as C strings */
        }
        names[i][nl] = '\0';
        memset(&h[i], 0, sizeof(h[i]));
        h[i].name = names[i];
        h[i].type = (enum gw_es_type)(take(&src) % 10);
        if (h[i].type == GW_ES_BYTES || h[i].type == GW_ES_STRING) {
            size_t vl = take(&src) % 64;
            vl = vl < src.n ? vl : src.n;
            h[i].v.b.p = (const char *)src.p;
            h[i].v.b.len = vl;
            src.p += vl;
            src.n -= vl;
        } else if (h[i].type == GW_ES_UUID) {
            for (size_t j = 0; j < 16; j++)
                uuid[i][j] = take(&src);
            h[i].v.b.p = (const char *)uuid[i];
            h[i].v.b.len = 16;
        } else {
            uint64_t u = 0;
            for (int j = 0; j < 8; j++)
                u = u << 8 | take(&src);
            h[i].v.i = (int64_t)u;
        }
    }
    struct gw_buf enc;
    gw_buf_init(&enc, 0);
    must(gw_buf_append(&enc, "x", 1)); /* something before: the encoder appends */
    must(gw_es_encode(&enc, h, nh, src.p, src.n));
    CHECK(enc.len >= 1 + GW_ES_MIN_MESSAGE && enc.data[0] == 'x');

    /* The message as the decoder must give it back: integers cut to their
     * width and sign-extended, booleans 1 and 0. */
    struct gw_es_header want[GW_ES_MAX_HEADERS];
    for (size_t i = 0; i < nh; i++) {
        want[i] = h[i];
        want[i].name_len = strlen(h[i].name);
        int64_t v = h[i].v.i;
        switch (h[i].type) {
        case GW_ES_TRUE:
            want[i].v.i = 1;
            break;
        case GW_ES_FALSE:
            want[i].v.i = 0;
            break;
        case GW_ES_BYTE:
            want[i].v.i = (int8_t)(uint8_t)v;
            break;
        case GW_ES_INT16:
            want[i].v.i = (int16_t)(uint16_t)v;
            break;
        case GW_ES_INT32:
            want[i].v.i = (int32_t)(uint32_t)v;
            break;
        default:
            break;
        }
    }
    struct gw_es_message wm = {want, nh, (const char *)src.p, src.n};
    struct gw_buf expect, got;
    gw_buf_init(&expect, 0);
    gw_buf_init(&got, 0);
    render(&expect, &wm);
    struct chunker ch = {.state = seed ? seed : 1};
    struct run r = drive((const uint8_t *)enc.data + 1, enc.len - 1, GW_ES_HARD_MAX, &ch, &got, 1);
    CHECK(r.rc == GW_EAGAIN && r.count == 1 && r.used == enc.len - 1);
    CHECK(got.len == expect.len && memcmp(got.data, expect.data, got.len) == 0);

    /* Names the encoder must refuse: empty, and longer than 255 bytes. */
    if (nh) {
        size_t before = enc.len;
        const char *saved = enc.data;
        struct gw_es_header bad = h[0];
        bad.name = "";
        CHECK(gw_es_encode(&enc, &bad, 1, NULL, 0) == GW_EINVAL);
        char longname[257];
        memset(longname, 'n', 256);
        longname[256] = '\0';
        bad.name = longname;
        CHECK(gw_es_encode(&enc, &bad, 1, NULL, 0) == GW_EINVAL);
        CHECK(enc.len == before && enc.data == saved);
    }
    gw_buf_free(&expect);
    gw_buf_free(&got);
    gw_buf_free(&enc);
}

/* ------------------------------------------------------------------ the target */

static void same(const char *what, const struct run *a, const struct gw_buf *ra,
                 const struct run *b, const struct gw_buf *rb)
{
    int why_same = a->why == b->why || (a->why && b->why && strcmp(a->why, b->why) == 0);
    if (a->rc == b->rc && why_same && a->count == b->count && a->used == b->used &&
        ra->len == rb->len && (ra->len == 0 || memcmp(ra->data, rb->data, ra->len) == 0))
        return;
    fprintf(stderr, "fuzz_eventstream: %s differ: rc %d (%s) vs %d (%s), %zu vs %zu messages\n",
            what, a->rc, a->why ? a->why : "-", b->rc, b->why ? b->why : "-", a->count, b->count);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int keep_crcs = data[0] & 1;
    uint32_t seed = data[0] * 2654435761u + 1u;
    size_t max = data[1] == 255 ? 0 : data[1] < 32 ? data[1] : (size_t)data[1] * 64;
    size_t n = size - 2;
    uint8_t *s = malloc(n ? n : 1);
    CHECK(s != NULL);
    if (n)
        memcpy(s, data + 2, n);
    if (!keep_crcs)
        fix_crcs(s, n);

    struct gw_buf whole, other;
    gw_buf_init(&whole, 0);
    gw_buf_init(&other, 0);
    struct chunker all = {.fixed = SIZE_MAX};
    struct run rw = drive(s, n, max, &all, &whole, 1);
    struct run ref = ref_decode(s, n, ceiling(max));
    same("reference: ends", &rw, &whole, &ref, &whole);

    struct chunker one = {.fixed = 1};
    struct run r = drive(s, n, max, &one, &other, 0);
    same("byte by byte: messages", &rw, &whole, &r, &other);

    gw_buf_reset(&other);
    struct chunker drawn = {.state = seed ? seed : 1};
    r = drive(s, n, max, &drawn, &other, 0);
    same("split: messages", &rw, &whole, &r, &other);

    gw_buf_free(&whole);
    gw_buf_free(&other);
    free(s);

    round_trip(data + 2, size - 2, seed);
    return 0;
}
