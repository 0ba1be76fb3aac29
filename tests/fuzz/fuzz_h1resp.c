/*
 * libFuzzer target for gw_h1resp (common/gw_h1resp.c), the framing of the
 * upstream answers the data plane reads: the input is what a provider
 * sends on one connection. Checked:
 *  - gw_h1_head_end finds an end inside the input, after an LF;
 *  - gw_h1_parse_head on that head (in a heap block of exactly its size, so
 *    AddressSanitizer sees a read past it) either refuses with a reason or
 *    gives a status of three digits, and hands the line callback the head's
 *    bytes exactly, line by line, each ending in LF; a body delimited by the
 *    close never leaves the connection reusable;
 *  - the chunked decoder, run on the bytes after the head, reads the same
 *    data, stops at the same byte and ends the same way (done, refused or
 *    wanting more) whether fed whole, byte by byte or in pieces drawn from
 *    the input (each piece at the end of a heap block); every span it
 *    returns lies inside the piece it was given.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_h1resp.h"

struct lines {
    struct gw_buf all;
    int bad;
};

static void on_line(const char *l, size_t len, void *arg)
{
    struct lines *ls = arg;
    if (len == 0 || l[len - 1] != '\n' || memchr(l, '\n', len - 1))
        ls->bad = 1;
    CHECK(gw_buf_append(&ls->all, l, len) == GW_OK);
}

enum end { END_DONE, END_REFUSED, END_MORE };

/* Decodes s[0..n) in pieces; the data into out, the bytes consumed into
 * *used. */
static enum end dechunk(const uint8_t *s, size_t n, struct chunker *ch, struct gw_buf *out,
                        size_t *used)
{
    struct gw_h1_chunked c = {0};
    char *block = malloc(n ? n : 1);
    CHECK(block != NULL);
    size_t off = 0;
    enum end e = END_MORE;
    while (off < n) {
        size_t len = next_size(ch, n - off);
        if (!len)
            continue;
        char *piece = block + (n - len);
        memcpy(piece, s + off, len);
        size_t at = 0;
        while (at < len && !c.done) {
            const char *d;
            size_t dl;
            long r = gw_h1_chunked_feed(&c, piece + at, len - at, &d, &dl);
            if (r < 0) {
                e = END_REFUSED;
                goto out;
            }
            CHECK((size_t)r <= len - at);
            if (dl) {
                CHECK(d >= piece + at && d + dl <= piece + at + r);
                CHECK(gw_buf_append(out, d, dl) == GW_OK);
            }
            CHECK(r > 0 || c.done);
            at += (size_t)r;
        }
        off += at;
        if (c.done) {
            e = END_DONE;
            break;
        }
    }
out:
    *used = off;
    free(block);
    return e;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t end = gw_h1_head_end((const char *)data, size);
    CHECK(end <= size);
    size_t body_at = 0;
    if (end) {
        CHECK(data[end - 1] == '\n');
        char *head = malloc(end);
        CHECK(head != NULL);
        memcpy(head, data, end);
        struct gw_h1_head h;
        struct lines ls = {0};
        gw_buf_init(&ls.all, 0);
        const char *why = NULL;
        int rc = gw_h1_parse_head(head, end, &h, on_line, &ls, &why);
        if (rc == GW_OK) {
            CHECK(h.status >= 100 && h.status <= 999);
            CHECK(!ls.bad);
            CHECK(ls.all.len == end && memcmp(ls.all.data, data, end) == 0);
            CHECK(h.framing != GW_H1_CLOSE || !h.keep_alive);
            CHECK(h.framing != GW_H1_LENGTH || h.length < 1000000000000000000ull);
        } else {
            CHECK(rc == GW_EINVAL && why != NULL && ls.all.len == 0);
        }
        gw_buf_free(&ls.all);
        free(head);
        body_at = end;
    }
    const uint8_t *b = data + body_at;
    size_t bn = size - body_at;
    struct gw_buf whole, bytes, pieces;
    gw_buf_init(&whole, 0);
    gw_buf_init(&bytes, 0);
    gw_buf_init(&pieces, 0);
    size_t u1, u2, u3;
    struct chunker all = {0, bn ? bn : 1}, one = {0, 1}, drawn = {size ? data[0] | 1u : 1, 0};
    enum end e1 = dechunk(b, bn, &all, &whole, &u1);
    enum end e2 = dechunk(b, bn, &one, &bytes, &u2);
    enum end e3 = dechunk(b, bn, &drawn, &pieces, &u3);
    CHECK(e1 == e2 && e2 == e3);
    CHECK(whole.len <= bn);
    if (e1 != END_REFUSED) {
        CHECK(u1 == u2 && u2 == u3);
        CHECK(whole.len == bytes.len && bytes.len == pieces.len);
        CHECK(whole.len == 0 || (memcmp(whole.data, bytes.data, whole.len) == 0 &&
                                 memcmp(whole.data, pieces.data, whole.len) == 0));
    }
    if (e1 == END_MORE)
        CHECK(u1 == bn);
    gw_buf_free(&whole);
    gw_buf_free(&bytes);
    gw_buf_free(&pieces);
    return 0;
}
