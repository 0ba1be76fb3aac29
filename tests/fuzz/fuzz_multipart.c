/*
 * libFuzzer target for gw_multipart (common/gw_multipart.c), the parser of
 * the multipart/form-data bodies clients upload (audio, images), and for
 * gw_audio_wav_ms (common/gw_audio.c) on the same bytes. The input's first
 * byte picks the boundary and the limits (defaults or small ones); the rest
 * is the body. Checked:
 *  - the parse gives the same parts, bytes and outcome (the same error
 *    status, field and message) whether fed whole, byte by byte or in
 *    pieces drawn from the input (each piece at the end of a heap block of
 *    its own, so AddressSanitizer sees a read past it);
 *  - the limits hold: no more parts than max_parts, no part's bytes past its
 *    limit, every part named; an error's status is 400 or 413;
 *  - gw_mp_parse_all agrees with the streaming parse (its spans lie inside
 *    the body and hold the bytes the callbacks saw);
 *  - the parts written back with the writer parse to the same parts;
 *  - gw_audio_wav_ms does not fail its bounds.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_audio.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_multipart.h"

#define MAXP 16

static const char *const boundaries[] = {"b", "XyZ-boundary", "----WebKitFormBoundary7MA4", "a b"};

struct seen {
    struct gw_buf out; /* the rendering, compared across splits */
    size_t parts, ends;
    size_t bytes[MAXP + 1];
    size_t limit_field, limit_file;
    int file[MAXP + 1];
    int open;
};

static int s_part(const struct gw_mp_part *p, void *arg)
{
    struct seen *s = arg;
    CHECK(!s->open);
    CHECK(p->index == s->parts && p->index < MAXP);
    CHECK(p->name && p->name[0]);
    s->file[s->parts] = p->filename != NULL;
    s->bytes[s->parts] = 0;
    s->parts++;
    s->open = 1;
    /* an absent type renders as an empty one, as a span holds it */
    CHECK(gw_buf_printf(&s->out, "P|%s|%s|%s|", p->name, p->filename ? p->filename : "\x01",
                        p->content_type ? p->content_type : "") == GW_OK);
    return 0;
}

static int s_data(const char *b, size_t n, void *arg)
{
    struct seen *s = arg;
    CHECK(s->open && n > 0);
    size_t i = s->parts - 1;
    s->bytes[i] += n;
    CHECK(s->bytes[i] <= (s->file[i] ? s->limit_file : s->limit_field));
    CHECK(gw_buf_append(&s->out, b, n) == GW_OK);
    return 0;
}

static int s_end(void *arg)
{
    struct seen *s = arg;
    CHECK(s->open);
    s->open = 0;
    s->ends++;
    CHECK(gw_buf_appends(&s->out, "|E|") == GW_OK);
    return 0;
}

static int parse(const char *bd, const struct gw_mp_limits *lim, const uint8_t *d, size_t n,
                 struct chunker *ch, struct seen *s, struct gw_mp_err *err)
{
    struct gw_mp_cbs cbs = {s_part, s_data, s_end, s};
    struct gw_mp *m = gw_mp_new(bd, lim, &cbs);
    CHECK(m != NULL);
    char *block = malloc(n ? n : 1);
    CHECK(block != NULL);
    size_t off = 0;
    int rc = GW_OK;
    while (off < n) {
        size_t len = next_size(ch, n - off);
        char *piece = block + (n - len);
        memcpy(piece, d + off, len);
        rc = gw_mp_feed(m, piece, len);
        off += len;
        if (rc != GW_OK)
            break;
    }
    if (rc == GW_OK)
        rc = gw_mp_finish(m);
    *err = *gw_mp_error(m);
    free(block);
    gw_mp_free(m);
    return rc;
}

static void same(const struct seen *a, int ra, const struct gw_mp_err *ea, const struct seen *b,
                 int rb, const struct gw_mp_err *eb)
{
    CHECK(ra == rb);
    CHECK(a->parts == b->parts && a->ends == b->ends);
    if (ra == GW_OK) {
        CHECK(a->out.len == b->out.len);
        CHECK(a->out.len == 0 || memcmp(a->out.data, b->out.data, a->out.len) == 0);
    } else {
        CHECK(ea->status == eb->status);
        CHECK(strcmp(ea->field, eb->field) == 0 && strcmp(ea->message, eb->message) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *bd = boundaries[data[0] & 3];
    struct gw_mp_limits lim = {MAXP, 0, 0, 0};
    if (data[0] & 4)
        lim = (struct gw_mp_limits){1 + (data[0] >> 5), 64, 16, 48};
    const uint8_t *body = data + 1;
    size_t n = size - 1;

    struct seen s1 = {0}, s2 = {0}, s3 = {0};
    struct seen *all[] = {&s1, &s2, &s3};
    for (int k = 0; k < 3; k++) {
        gw_buf_init(&all[k]->out, 0);
        all[k]->limit_field = (data[0] & 4) ? 16 : 64u << 10;
        all[k]->limit_file = (data[0] & 4) ? 48 : 25u << 20;
    }
    struct chunker whole = {0, n ? n : 1}, one = {0, 1}, drawn = {data[0] | 1u, 0};
    struct gw_mp_err e1, e2, e3;
    int r1 = parse(bd, &lim, body, n, &whole, &s1, &e1);
    int r2 = parse(bd, &lim, body, n, &one, &s2, &e2);
    int r3 = parse(bd, &lim, body, n, &drawn, &s3, &e3);
    same(&s1, r1, &e1, &s2, r2, &e2);
    same(&s1, r1, &e1, &s3, r3, &e3);
    CHECK(r1 == GW_OK || r1 == GW_EINVAL);
    CHECK(s1.parts <= lim.max_parts);
    if (r1 == GW_OK) {
        CHECK(s1.parts >= 1 && s1.parts == s1.ends && !s1.open);
    } else {
        CHECK(e1.status == 400 || e1.status == 413);
        CHECK(e1.message[0]);
    }

    /* the whole-body convenience agrees */
    struct gw_mp_span *sp = malloc(sizeof *sp * MAXP);
    CHECK(sp != NULL);
    size_t np = 0;
    struct gw_mp_err ea;
    int ra = gw_mp_parse_all((const char *)body, n, bd, &lim, sp, MAXP, &np, &ea);
    int fits = 1; /* the names fit the spans' arrays */
    if (ra != GW_OK && r1 == GW_OK) {
        CHECK(strstr(ea.message, "is longer than") != NULL);
        fits = 0;
    } else if (r1 != GW_OK) {
        CHECK(ra == GW_EINVAL);
        if (!strstr(ea.message, "is longer than"))
            CHECK(ea.status == e1.status && strcmp(ea.message, e1.message) == 0);
    }
    if (r1 == GW_OK && fits) {
        CHECK(np == s1.parts);
        struct gw_buf r;
        gw_buf_init(&r, 0);
        for (size_t i = 0; i < np; i++) {
            CHECK(sp[i].len == s1.bytes[i]);
            CHECK(sp[i].len == 0 || (sp[i].data >= (const char *)body &&
                                     sp[i].data + sp[i].len <= (const char *)body + n));
            CHECK(gw_buf_printf(&r, "P|%s|%s|%s|", sp[i].name,
                                sp[i].has_filename ? sp[i].filename : "\x01",
                                sp[i].content_type) == GW_OK);
            CHECK(gw_buf_append(&r, sp[i].data, sp[i].len) == GW_OK);
            CHECK(gw_buf_appends(&r, "|E|") == GW_OK);
        }
        CHECK(r.len == s1.out.len && memcmp(r.data, s1.out.data, r.len) == 0);
        gw_buf_free(&r);

        /* written back and parsed again: the same parts */
        static const char wb[] = "llmgw-0123456789abcdef0123456789abcdef";
        struct gw_buf w;
        gw_buf_init(&w, 0);
        int wrc = GW_OK;
        for (size_t i = 0; i < np && wrc == GW_OK; i++) {
            const char *ct = sp[i].content_type[0] ? sp[i].content_type : NULL;
            if (sp[i].has_filename)
                wrc =
                    gw_mp_write_file(&w, wb, sp[i].name, sp[i].filename, ct, sp[i].data, sp[i].len);
            else
                wrc = gw_mp_write_field(&w, wb, sp[i].name, sp[i].data, sp[i].len);
        }
        if (wrc == GW_OK)
            CHECK(gw_mp_write_end(&w, wb) == GW_OK);
        else
            CHECK(wrc == GW_EINVAL); /* the data held the writer's delimiter */
        if (wrc == GW_OK) {
            struct gw_mp_span *back = malloc(sizeof *back * MAXP);
            CHECK(back != NULL);
            size_t nb = 0;
            struct gw_mp_err eb;
            struct gw_mp_limits wl = {MAXP, 1u << 16, 1u << 20, 1u << 20};
            CHECK(gw_mp_parse_all(w.data, w.len, wb, &wl, back, MAXP, &nb, &eb) == GW_OK);
            CHECK(nb == np);
            for (size_t i = 0; i < np; i++) {
                CHECK(strcmp(back[i].name, sp[i].name) == 0);
                CHECK(back[i].has_filename == sp[i].has_filename);
                if (sp[i].has_filename) {
                    CHECK(strcmp(back[i].filename, sp[i].filename) == 0);
                    CHECK(strcmp(back[i].content_type, sp[i].content_type[0]
                                                           ? sp[i].content_type
                                                           : "application/octet-stream") == 0);
                }
                CHECK(back[i].len == sp[i].len);
                CHECK(sp[i].len == 0 || memcmp(back[i].data, sp[i].data, sp[i].len) == 0);
            }
            free(back);
        }
        gw_buf_free(&w);
    }
    free(sp);

    int64_t ms = -1;
    if (gw_audio_wav_ms((const char *)body, n, &ms) == GW_OK)
        CHECK(ms >= 0 && (uint64_t)ms <= (uint64_t)n * 1000);

    for (int k = 0; k < 3; k++)
        gw_buf_free(&all[k]->out);
    return 0;
}
