/*
 * libFuzzer target for gw_sse (common/gw_sse.c), the resumable parser of
 * upstream Server-Sent Events. It checks what its header promises:
 *  - any split of the input parses to the same events (event name, data and
 *    id, byte for byte) and the same end (GW_EAGAIN or GW_ELIMIT) as the
 *    whole input delivered at once: the input is fed whole, byte by byte,
 *    and in pieces of sizes drawn from the input's first byte (empty pieces
 *    included), each piece ending where a heap block ends, so
 *    AddressSanitizer sees a read past a piece;
 *  - GW_EAGAIN means the piece was used up; the returned cursor never runs
 *    past the piece's end;
 *  - the ceiling: no line, event data, event name or id ever exceeds its
 *    bound (the buffers are checked after every call), and the parser
 *    returns GW_ELIMIT exactly where a line or an event passes one, as a
 *    plain, non-resumable reading of the whole input (ref_parse below,
 *    written from the WHATWG algorithm) says; up to there the two read
 *    the same events.
 * The second byte chooses the ceiling (1 to 763 bytes, or the default), so
 * short inputs reach it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_sse.h"

#define NAME_MAX_BYTES 256 /* gw_sse_init's bound on the event name and the id */

/* An event rendered into out: each field as its length and its bytes, so two
 * renderings are equal exactly when the events are. */
static void put_field(struct gw_buf *out, const char *s, size_t n)
{
    CHECK(gw_buf_printf(out, "%zu:", n) == GW_OK);
    CHECK(gw_buf_append(out, s, n) == GW_OK);
}

static void put_event(struct gw_buf *out, const char *event, size_t en, const char *data, size_t dn,
                      const char *id, size_t idn)
{
    put_field(out, event, en);
    put_field(out, data, dn);
    if (id)
        put_field(out, id, idn);
    else
        CHECK(gw_buf_append(out, "-", 1) == GW_OK);
    CHECK(gw_buf_append(out, "\n", 1) == GW_OK);
}

/* Feeds s[0..n) to a fresh parser in pieces and renders its events into out.
 * Returns how the parse ended: GW_EAGAIN (all input taken) or GW_ELIMIT. */
static int drive(const uint8_t *s, size_t n, size_t max, struct chunker *ch, struct gw_buf *out)
{
    size_t eff = max ? max : 1u << 20;
    struct gw_sse p;
    gw_sse_init(&p, max);
    int rc = GW_EAGAIN;
    /* Each piece is copied to the end of one block of the input's size, so
     * a read past the piece is a read past the block. (A block per piece
     * would do the same, but fill ASan's quarantine byte by byte.) */
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
        struct gw_sse_event ev;
        while ((rc = gw_sse_next(&p, &b, &left, &ev)) == GW_OK) {
            CHECK(b + left == piece + len && left <= len);
            CHECK(ev.event != NULL && ev.data != NULL);
            CHECK(ev.data_len > 0 && ev.data_len <= eff && ev.data[ev.data_len] == '\0');
            CHECK(ev.event_len <= NAME_MAX_BYTES && ev.event[ev.event_len] == '\0');
            size_t idn = ev.id ? strlen(ev.id) : 0;
            CHECK(idn <= NAME_MAX_BYTES);
            put_event(out, ev.event, ev.event_len, ev.data, ev.data_len, ev.id, idn);
        }
        CHECK(b + left == piece + len && left <= len);
        CHECK(p.line.len <= eff && p.data.len <= eff);
        CHECK(p.event.len <= NAME_MAX_BYTES && p.id.len <= NAME_MAX_BYTES);
        CHECK(rc == GW_EAGAIN || rc == GW_ELIMIT);
        if (rc == GW_ELIMIT)
            break;
        CHECK(left == 0);
        off += len;
    } while (off < n);
    free(block);
    gw_sse_free(&p);
    return rc;
}

/* ------------------------------------------------------------------ reference */

struct ref {
    struct gw_buf data; /* WHATWG's data buffer: each value followed by LF */
    struct gw_buf event, id;
    int have_id;
};

/* Applies one line; GW_ELIMIT where the parser's bounds would be passed. */
static int ref_line(struct ref *r, const uint8_t *s, size_t n, size_t eff, struct gw_buf *out)
{
    if (n == 0) {
        /* Dispatch. WHATWG dispatches an event whose data is "" (one empty
         * data line); gw_sse does not, by design (its header: empty data is
         * not dispatched). */
        if (r->data.len > 1)
            put_event(out, r->event.data ? r->event.data : "", r->event.len, r->data.data,
                      r->data.len - 1, r->have_id ? (r->id.data ? r->id.data : "") : NULL,
                      r->id.len);
        gw_buf_reset(&r->data);
        gw_buf_reset(&r->event);
        return GW_EAGAIN;
    }
    if (s[0] == ':')
        return GW_EAGAIN;
    size_t f = 0;
    while (f < n && s[f] != ':')
        f++;
    const uint8_t *v = f < n ? s + f + 1 : s + n;
    size_t vn = f < n ? n - f - 1 : 0;
    if (vn > 0 && v[0] == ' ') {
        v++;
        vn--;
    }
    if (f == 4 && memcmp(s, "data", 4) == 0) {
        /* The data joined so far, then LF and this value, past the ceiling? */
        size_t joined = r->data.len ? r->data.len - 1 + 1 + vn : vn;
        if (joined > eff)
            return GW_ELIMIT;
        CHECK(gw_buf_append(&r->data, v, vn) == GW_OK);
        CHECK(gw_buf_append(&r->data, "\n", 1) == GW_OK);
    } else if (f == 5 && memcmp(s, "event", 5) == 0) {
        if (vn > NAME_MAX_BYTES)
            return GW_ELIMIT;
        gw_buf_reset(&r->event);
        CHECK(gw_buf_append(&r->event, v, vn) == GW_OK);
    } else if (f == 2 && memcmp(s, "id", 2) == 0 && !memchr(v, '\0', vn)) {
        if (vn > NAME_MAX_BYTES)
            return GW_ELIMIT;
        gw_buf_reset(&r->id);
        CHECK(gw_buf_append(&r->id, v, vn) == GW_OK);
        r->have_id = 1;
    }
    return GW_EAGAIN;
}

/* Reads the whole input line by line (CRLF, LF or CR ends a line). */
static int ref_parse(const uint8_t *s, size_t n, size_t max, struct gw_buf *out)
{
    size_t eff = max ? max : 1u << 20;
    struct ref r = {.have_id = 0};
    gw_buf_init(&r.data, 0);
    gw_buf_init(&r.event, 0);
    gw_buf_init(&r.id, 0);
    int rc = GW_EAGAIN;
    size_t i = 0;
    while (i < n && rc == GW_EAGAIN) {
        size_t j = i;
        while (j < n && s[j] != '\r' && s[j] != '\n')
            j++;
        if (j - i > eff) {
            rc = GW_ELIMIT; /* a line past the ceiling, ended or not */
            break;
        }
        if (j == n)
            break; /* an unfinished line waits for more input */
        rc = ref_line(&r, s + i, j - i, eff, out);
        i = j + 1;
        if (s[j] == '\r' && i < n && s[i] == '\n')
            i++;
    }
    gw_buf_free(&r.data);
    gw_buf_free(&r.event);
    gw_buf_free(&r.id);
    return rc;
}

/* ------------------------------------------------------------------ the target */

static void same(const char *what, int rc_a, const struct gw_buf *a, int rc_b,
                 const struct gw_buf *b)
{
    if (rc_a == rc_b && a->len == b->len && (a->len == 0 || memcmp(a->data, b->data, a->len) == 0))
        return;
    fprintf(stderr, "fuzz_sse: %s differ: rc %d vs %d\n--- whole:\n%.*s\n--- other:\n%.*s\n", what,
            rc_a, rc_b, (int)a->len, a->data ? a->data : "", (int)b->len, b->data ? b->data : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t seed = data[0];
    size_t max = data[1] == 255 ? 0 : 1 + (size_t)data[1] * 3;
    const uint8_t *s = data + 2;
    size_t n = size - 2;

    struct gw_buf whole, other, ref;
    gw_buf_init(&whole, 0);
    gw_buf_init(&other, 0);
    gw_buf_init(&ref, 0);

    struct chunker all = {.fixed = SIZE_MAX};
    int rc_whole = drive(s, n, max, &all, &whole);

    struct chunker one = {.fixed = 1};
    int rc = drive(s, n, max, &one, &other);
    same("byte by byte: events", rc_whole, &whole, rc, &other);

    gw_buf_reset(&other);
    struct chunker drawn = {.state = seed * 2654435761u + 1u};
    if (!drawn.state)
        drawn.state = 1; /* xorshift stays at 0 for ever */
    rc = drive(s, n, max, &drawn, &other);
    same("split: events", rc_whole, &whole, rc, &other);

    rc = ref_parse(s, n, max, &ref);
    same("reference: events", rc_whole, &whole, rc, &ref);

    gw_buf_free(&whole);
    gw_buf_free(&other);
    gw_buf_free(&ref);
    return 0;
}
