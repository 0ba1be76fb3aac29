/*
 * libFuzzer target for gw_trace (common/gw_trace.c): the W3C headers every
 * request may carry (traceparent, tracestate) and the OTLP/JSON transcoder's
 * reader. The first byte picks what the rest is:
 *  0: a traceparent. Accepted: its ids are not zero, formatting it gives a
 *     header that parses to the same context, and a version-00 header is
 *     exactly what formatting gives (trimmed).
 *  1: a tracestate. Kept: at most 512 bytes inside the input, and the kept
 *     text checks again as all of itself.
 *  2: span entries, as gw_otel queues them, given to the JSON transcoder:
 *     refused, or valid JSON.
 *  3: a span written with the rest as printable names and values: the
 *     transcoder takes it, and its JSON parses.
 */
#include <jansson.h>
#include <stdint.h>
#include <string.h>

#include "fuzz.h"
#include "gw_error.h"
#include "gw_trace.h"

static void traceparent(const char *s, size_t n)
{
    struct gw_trace_ctx c, d;
    if (gw_traceparent_parse(s, n, &c) != 0)
        return;
    static const uint8_t zero[16];
    CHECK(memcmp(c.trace_id, zero, 16) != 0 && memcmp(c.span_id, zero, 8) != 0);
    char out[GW_TRACEPARENT_LEN + 1];
    gw_traceparent_format(c.trace_id, c.span_id, c.flags, out);
    CHECK(strlen(out) == GW_TRACEPARENT_LEN);
    CHECK(gw_traceparent_parse(out, GW_TRACEPARENT_LEN, &d) == 0);
    CHECK(memcmp(&c, &d, sizeof(c)) == 0);
    while (n && (*s == ' ' || *s == '\t'))
        s++, n--;
    if (n >= 2 && s[0] == '0' && s[1] == '0')
        CHECK(memcmp(s, out, GW_TRACEPARENT_LEN) == 0);
}

static void tracestate(const char *s, size_t n)
{
    size_t at, at2;
    size_t k = gw_tracestate_check(s, n, &at);
    if (!k)
        return;
    CHECK(k <= GW_TRACESTATE_MAX && at + k <= n);
    CHECK(gw_tracestate_check(s + at, k, &at2) == k && at2 == 0);
}

static void check_json(const struct gw_buf *out)
{
    json_error_t e;
    /* An escaped NUL in a string is JSON (jansson refuses it unless told). */
    json_t *j = json_loadb(out->data, out->len, JSON_ALLOW_NUL, &e);
    CHECK(j != NULL);
    json_decref(j);
}

static void entries(const uint8_t *p, size_t n)
{
    struct gw_buf out;
    gw_buf_init(&out, 0);
    const void *ents[] = {p};
    size_t lens[] = {n};
    if (gw_trace_json(&out, "", 0, "", 0, ents, lens, 1) == GW_OK)
        check_json(&out);
    gw_buf_free(&out);
}

static void written(const uint8_t *p, size_t n)
{
    /* Printable pieces split at '|': names, keys and values. */
    char text[4096];
    n = n < sizeof(text) - 1 ? n : sizeof(text) - 1;
    for (size_t i = 0; i < n; i++)
        text[i] = (char)(p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?');
    text[n] = '\0';
    const char *piece[8] = {"", "", "", "", "", "", "", ""};
    size_t np = 0;
    for (char *t = text, *bar; np < 8; t = bar + 1) {
        piece[np++] = t;
        if (!(bar = strchr(t, '|')))
            break;
        *bar = '\0';
    }
    static const uint8_t tid[16] = {1}, sid[8] = {2};
    struct gw_span s;
    struct gw_buf batch, out;
    gw_span_init(&s);
    gw_buf_init(&batch, 0);
    gw_buf_init(&out, 0);
    gw_span_begin(&s, tid, sid, n & 1 ? sid : NULL, piece[0], GW_SPAN_CLIENT, n);
    gw_span_str(&s, piece[1], piece[2]);
    gw_span_int(&s, piece[3], (int64_t)n * -7);
    gw_span_strs(&s, piece[4], piece + 5, 3);
    struct gw_attr a = {.key = piece[6], .type = GW_ATTR_STR, .s = piece[7]};
    gw_span_event(&s, piece[5], n, &a, 1);
    gw_span_status(&s, GW_SPAN_ERROR, piece[7]);
    CHECK(gw_span_finish(&s, n + 1, &batch) == GW_OK);
    const void *ents[] = {batch.data};
    size_t lens[] = {batch.len};
    CHECK(gw_trace_json(&out, "", 0, "", 0, ents, lens, 1) == GW_OK);
    check_json(&out);
    gw_span_free(&s);
    gw_buf_free(&batch);
    gw_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    switch (data[0] & 3) {
    case 0:
        traceparent((const char *)p, n);
        break;
    case 1:
        tracestate((const char *)p, n);
        break;
    case 2:
        entries(p, n);
        break;
    default:
        written(p, n);
        break;
    }
    return 0;
}
