/*
 * libFuzzer target for every driver's answer parser (dataplane/drivers/:
 * openai, openai-responses, anthropic, gemini, bedrock, ollama), streamed
 * and whole, through the driver's own table (parser_new, parse, finish,
 * parser_free), as the attempt loop calls it. The first byte chooses the
 * driver, the mode and whether the sink takes the raw SSE events (the
 * pass-through's hook); the second seeds the pieces and where a sink stops.
 * Checked, from dp_driver.h and canon.h:
 *  - split invariance (dp_driver.h: a body split anywhere parses the same as
 *    one delivered whole): the body fed whole, byte by byte and in drawn
 *    pieces (empty ones included, each ending where a heap block ends, so
 *    AddressSanitizer sees a read past a piece) gives the same events, every
 *    field byte for byte, and the same raw events;
 *  - the event channel's grammar: START once and first (or an ERROR
 *    before it), exactly one terminal event after finish and nothing after
 *    it; CHUNK non-empty; TOOL_START with an id and a name, indexes 0, 1, ...
 *    in order, one call open at a time, TOOL_DELTA and TOOL_END only for the
 *    open call, nothing else (USAGE, DONE, text) while a call is open; each
 *    call has arguments ("{}" when the provider gave none); a REASONING event
 *    without text carries a signature; ERROR with a failure class of the
 *    closed set and a message; DONE with a stop of the enum;
 *  - the text of CHUNK, REASONING (not redacted) and TOOL_DELTA is UTF-8;
 *  - usage: every count at least 0 (canon.h: negative counts become 0) and
 *    at most a handful (4) of CANON_MAX_TOKENS (each provider count is
 *    bounded by canon_tokens before a driver adds a few of them), the
 *    reasoning part at most the output;
 *  - parse's answer: nonzero exactly when the call emitted a terminal event
 *    or the sink stopped;
 *  - a sink that stops after the k-th event (k drawn from the whole run's
 *    count): the parser stops there, emitting nothing more, and the events
 *    it gave are the whole run's first k;
 *  - no leak (LeakSanitizer) and no undefined behaviour in the arithmetic
 *    (UndefinedBehaviorSanitizer), whatever the body.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_driver.h"
#include "fuzz.h"
#include "gw_buf.h"
#include "gw_sse.h"

static const struct dp_driver *const drivers[] = {
    &drv_openai, &drv_openai_responses, &drv_anthropic, &drv_gemini, &drv_bedrock, &drv_ollama,
};
#define NDRIVERS (sizeof(drivers) / sizeof(drivers[0]))

static void must(int rc)
{
    CHECK(rc == 0);
}

/* Whether s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points past U+10FFFF). */
static int utf8_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned cp, min;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            k = 1, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            k = 2, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= k)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* ------------------------------------------------------------------ the sink */

struct rec {
    struct gw_buf out; /* every event, each field with its length */
    size_t *ends;      /* out.len after each event */
    size_t nends, cap; /* events seen */
    size_t stop_after; /* the sink stops at this event (0: never) */
    int stopped;       /* the sink returned nonzero */
    int started, terminal, ntools, open_tool;
    struct gw_buf args; /* the open call's arguments so far */
};

static void rec_init(struct rec *r, size_t stop_after)
{
    memset(r, 0, sizeof(*r));
    gw_buf_init(&r->out, 0);
    gw_buf_init(&r->args, 0);
    r->stop_after = stop_after;
    r->open_tool = -1;
}

static void rec_free(struct rec *r)
{
    gw_buf_free(&r->out);
    gw_buf_free(&r->args);
    free(r->ends);
}

static void put(struct rec *r, const char *what, const char *s, size_t n)
{
    if (!s) {
        must(gw_buf_printf(&r->out, "%s-;", what));
        return;
    }
    must(gw_buf_printf(&r->out, "%s%zu:", what, n));
    must(gw_buf_append(&r->out, s, n));
    must(gw_buf_append(&r->out, ";", 1));
}

static void puts0(struct rec *r, const char *what, const char *s)
{
    put(r, what, s, s ? strlen(s) : 0);
}

static int rec_emit(void *arg, const struct canon_event *ev)
{
    struct rec *r = arg;
    CHECK(!r->stopped);  /* a producer told to stop emits nothing more */
    CHECK(!r->terminal); /* nothing after DONE or ERROR */
    CHECK(ev->type == CANON_EV_START || ev->type == CANON_EV_ERROR || r->started);
    if (r->open_tool >= 0) /* an open call: only its deltas and its end, or an ERROR */
        CHECK((ev->type == CANON_EV_TOOL_DELTA || ev->type == CANON_EV_TOOL_END ||
               ev->type == CANON_EV_ERROR));
    must(gw_buf_printf(&r->out, "%d ", (int)ev->type));
    switch (ev->type) {
    case CANON_EV_START:
        CHECK(!r->started);
        r->started = 1;
        puts0(r, "id", ev->id);
        puts0(r, "model", ev->name);
        break;
    case CANON_EV_CHUNK:
        CHECK(ev->text != NULL && ev->len > 0);
        CHECK(utf8_ok((const unsigned char *)ev->text, ev->len));
        put(r, "text", ev->text, ev->len);
        break;
    case CANON_EV_REASONING:
        if (ev->redacted) {
            CHECK(ev->text != NULL);
        } else {
            CHECK(ev->len > 0 || ev->signature != NULL);
            CHECK(ev->len == 0 || ev->text != NULL);
            CHECK(ev->len == 0 || utf8_ok((const unsigned char *)ev->text, ev->len));
        }
        must(gw_buf_printf(&r->out, "r%d ", ev->redacted));
        put(r, "text", ev->text, ev->len);
        puts0(r, "sig", ev->signature);
        break;
    case CANON_EV_TOOL_START:
        CHECK(ev->index == r->ntools);
        CHECK(ev->id != NULL && ev->name != NULL);
        r->open_tool = ev->index;
        r->ntools++;
        gw_buf_reset(&r->args);
        must(gw_buf_printf(&r->out, "%d ", ev->index));
        puts0(r, "id", ev->id);
        puts0(r, "name", ev->name);
        break;
    case CANON_EV_TOOL_DELTA:
        CHECK(ev->index == r->open_tool);
        CHECK(ev->len == 0 || ev->text != NULL);
        CHECK(utf8_ok((const unsigned char *)ev->text, ev->len));
        must(gw_buf_append(&r->args, ev->text, ev->len));
        must(gw_buf_printf(&r->out, "%d ", ev->index));
        put(r, "args", ev->text, ev->len);
        break;
    case CANON_EV_TOOL_END: {
        CHECK(ev->index == r->open_tool);
        /* A call without arguments gets "{}": never none. (Whether the
         * pieces join into an object is the provider's word in a stream:
         * the stream drivers pass its pieces on as they come.) */
        CHECK(r->args.len > 0);
        r->open_tool = -1;
        must(gw_buf_printf(&r->out, "%d", ev->index));
        break;
    }
    case CANON_EV_USAGE: {
        const struct canon_usage *u = ev->usage;
        CHECK(u != NULL);
        const long long most = 4 * CANON_MAX_TOKENS;
        const int64_t f[] = {u->input,          u->cache_read, u->cache_write_5m,
                             u->cache_write_1h, u->output,     u->reasoning};
        for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
            CHECK(f[i] >= 0 && f[i] <= most);
            must(gw_buf_printf(&r->out, "%lld,", (long long)f[i]));
        }
        CHECK(u->reasoning <= u->output);
        break;
    }
    case CANON_EV_DONE:
        CHECK(ev->stop >= CANON_STOP_END && ev->stop <= CANON_STOP_REFUSAL);
        r->terminal = 1;
        must(gw_buf_printf(&r->out, "%d", (int)ev->stop));
        break;
    case CANON_EV_ERROR:
        CHECK(ev->failure >= 0 && ev->failure < CANON_FAIL_COUNT);
        CHECK(ev->message != NULL);
        r->terminal = 1;
        must(gw_buf_printf(&r->out, "%d %d ", (int)ev->failure, ev->status));
        puts0(r, "msg", ev->message);
        puts0(r, "retry", ev->retry_after);
        break;
    case CANON_EV_CITATION:
        CHECK(ev->citation != NULL);
        puts0(r, "citation", ev->citation);
        break;
    default:
        CHECK(!"an event type outside the enum");
    }
    must(gw_buf_append(&r->out, "\n", 1));
    if (r->nends == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 16;
        r->ends = realloc(r->ends, r->cap * sizeof(*r->ends));
        CHECK(r->ends != NULL);
    }
    r->ends[r->nends++] = r->out.len;
    if (r->stop_after && r->nends == r->stop_after)
        r->stopped = 1;
    return r->stopped;
}

/* The pass-through's hook: the upstream event as it came. Recorded in the
 * same transcript (it is not counted as an event: the sink stops on
 * canonical events only). */
static int rec_raw(void *arg, const struct gw_sse_event *ev)
{
    struct rec *r = arg;
    CHECK(!r->stopped);
    CHECK(ev->event != NULL && ev->data != NULL);
    must(gw_buf_append(&r->out, "raw ", 4));
    put(r, "event", ev->event, ev->event_len);
    put(r, "data", ev->data, ev->data_len);
    must(gw_buf_append(&r->out, "\n", 1));
    return 0;
}

/* ------------------------------------------------------------------ a run */

/* Feeds s[0..n) to a fresh parser of d in pieces drawn by ch, then
 * finishes it unless parse said it was over, recording into r. */
static void drive(const struct dp_driver *d, int stream, int raw, const uint8_t *s, size_t n,
                  struct chunker *ch, struct rec *r)
{
    struct drv_parser *p = d->parser_new(stream);
    CHECK(p != NULL);
    struct canon_sink sink = {.emit = rec_emit, .arg = r, .raw = raw ? rec_raw : NULL};
    char *block = malloc(n ? n : 1);
    CHECK(block != NULL);
    size_t off = 0;
    int over = 0;
    do { /* at least one call, so an empty body is fed too */
        size_t len = next_size(ch, n - off);
        char *piece = block + (n - len);
        if (len)
            memcpy(piece, s + off, len);
        int was = r->terminal || r->stopped;
        int rc = d->parse(p, piece, len, &sink);
        CHECK(!was);
        /* Nonzero exactly when this call ended the answer or the sink stopped. */
        CHECK((rc != 0) == (r->terminal || r->stopped));
        over = rc != 0;
        off += len;
    } while (off < n && !over);
    if (!over) {
        d->finish(p, &sink);
        CHECK(r->terminal || r->stopped); /* finish always ends the answer */
    }
    d->parser_free(p);
    free(block);
}

static void same(const char *what, const struct rec *a, const struct rec *b, size_t alen)
{
    if (alen == b->out.len && (alen == 0 || memcmp(a->out.data, b->out.data, alen) == 0))
        return;
    fprintf(stderr, "fuzz_drivers: %s differ\n--- whole:\n%.*s\n--- other:\n%.*s\n", what,
            (int)alen, a->out.data ? a->out.data : "", (int)b->out.len,
            b->out.data ? b->out.data : "");
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int stream = data[0] & 1;
    int raw = (data[0] >> 1) & 1;
    const struct dp_driver *d = drivers[(data[0] >> 2) % NDRIVERS];
    uint32_t seed = data[1] * 2654435761u + 1u;
    const uint8_t *s = data + 2;
    size_t n = size - 2;

    struct rec whole, other;
    rec_init(&whole, 0);
    struct chunker all = {.fixed = SIZE_MAX};
    drive(d, stream, raw, s, n, &all, &whole);
    CHECK(whole.terminal && !whole.stopped);

    rec_init(&other, 0);
    struct chunker one = {.fixed = 1};
    drive(d, stream, raw, s, n, &one, &other);
    same("byte by byte: events", &whole, &other, whole.out.len);
    rec_free(&other);

    rec_init(&other, 0);
    struct chunker drawn = {.state = seed ? seed : 1};
    drive(d, stream, raw, s, n, &drawn, &other);
    same("split: events", &whole, &other, whole.out.len);
    rec_free(&other);

    /* A sink that stops after the k-th event gets the whole run's first k
     * events (and the raw events before the k-th), then nothing. */
    size_t k = 1 + (size_t)(seed >> 8) % whole.nends;
    rec_init(&other, k);
    struct chunker drawn2 = {.state = seed ^ 0x9e3779b9u ? seed ^ 0x9e3779b9u : 1};
    drive(d, stream, raw, s, n, &drawn2, &other);
    CHECK(other.nends == k);
    same("stopped: events", &whole, &other, whole.ends[k - 1]);
    rec_free(&other);

    rec_free(&whole);
    return 0;
}
