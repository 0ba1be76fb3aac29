/*
 * The "anthropic" driver's answer: the SSE events or the whole "message"
 * body into canonical events, and an error answer's failure class (what
 * is read and how: anthropic.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "drv_anthropic_int.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sse.h"

/* ------------------------------------------------------------------ parse */

enum block_kind { BK_NONE, BK_TEXT, BK_THINKING, BK_TOOL, BK_SKIP };

struct an_parser {
    struct drv_parser base;
    struct drv_tools tools;
    struct canon_usage usage;
    enum block_kind block;
    long long block_index;
    int have_stop;
    enum canon_stop stop;
    /* The open text block's citations (citations_delta), emitted as
     * CITATION events when the block ends: a citation follows the text it
     * cites, whole or streamed. */
    json_t *cites;
};

struct drv_parser *drv_anthropic_parser_new(int stream)
{
    struct an_parser *p = drv_parser_new(sizeof(*p), &drv_anthropic, stream);
    return p ? &p->base : NULL;
}

void drv_anthropic_parser_free(struct drv_parser *bp)
{
    if (bp)
        json_decref(((struct an_parser *)bp)->cites);
    drv_parser_free(bp);
}

/* One CITATION per object in arr (others are skipped). */
static int emit_citations(const json_t *arr, const struct canon_sink *s)
{
    size_t i;
    json_t *c;
    json_array_foreach(arr, i, c)
    {
        if (!json_is_object(c))
            continue;
        char *txt = json_dumps(c, JSON_COMPACT);
        if (!txt)
            return 1;
        struct canon_event ev = {.type = CANON_EV_CITATION, .citation = txt};
        int rc = canon_emit(s, &ev);
        free(txt);
        if (rc)
            return rc;
    }
    return 0;
}

/* The held citations of the text block that ends. */
static int flush_citations(struct an_parser *p, const struct canon_sink *s)
{
    json_t *c = p->cites;
    p->cites = NULL;
    int rc = c ? emit_citations(c, s) : 0;
    json_decref(c);
    return rc;
}

static int hold_citation(struct an_parser *p, json_t *c)
{
    if (!json_is_object(c))
        return 0;
    if (!p->cites && !(p->cites = json_array()))
        return 1;
    return json_array_append(p->cites, c) ? 1 : 0;
}

/* An Anthropic error type (and its message) as a failure class. */
static enum canon_failure failure_of(const char *type, int status, const char *msg)
{
    size_t ml = msg ? strlen(msg) : 0;
    if (status == 529)
        return CANON_FAIL_PROVIDER_5XX;
    if (!type)
        return status ? canon_classify_http(status, msg, ml) : CANON_FAIL_PROVIDER_5XX;
    if (strcmp(type, "overloaded_error") == 0 || strcmp(type, "api_error") == 0)
        return CANON_FAIL_PROVIDER_5XX;
    if (strcmp(type, "rate_limit_error") == 0)
        return CANON_FAIL_RATE_LIMITED;
    if (strcmp(type, "billing_error") == 0)
        return CANON_FAIL_QUOTA_EXHAUSTED;
    if (strcmp(type, "authentication_error") == 0 || strcmp(type, "permission_error") == 0)
        return CANON_FAIL_AUTH_FAILED;
    if (strcmp(type, "not_found_error") == 0)
        return canon_classify_http(404, msg, ml);
    if (strcmp(type, "request_too_large") == 0)
        return CANON_FAIL_PAYLOAD_TOO_LARGE;
    if (strcmp(type, "timeout_error") == 0)
        return CANON_FAIL_TIMEOUT;
    if (strcmp(type, "invalid_request_error") == 0)
        return canon_classify_http(status >= 400 && status < 500 ? status : 400, msg, ml);
    return status ? canon_classify_http(status, msg, ml) : CANON_FAIL_PROVIDER_5XX;
}

/* The tier that served, from a usage object's service_tier (standard,
 * priority, batch); NULL when it says none. */
static const char *tier_of(const json_t *u)
{
    return canon_tier_served(gw_json_str(u, "service_tier"));
}

/* Applies an Anthropic usage object (fields it has replace ours) and
 * emits the result. */
static int on_usage(struct an_parser *p, const json_t *u, const struct canon_sink *s)
{
    if (!json_is_object(u))
        return 0;
    struct canon_usage *cu = &p->usage;
    /* Each count within [0, CANON_MAX_TOKENS] (canon_tokens) before any
     * sum: the tiers' e5 + e1 must not overflow. */
    long long v;
    if (gw_json_int(u, "input_tokens", &v) == GW_OK && v >= 0)
        cu->input = canon_tokens(v);
    if (gw_json_int(u, "cache_read_input_tokens", &v) == GW_OK && v >= 0)
        cu->cache_read = canon_tokens(v);
    if (gw_json_int(u, "output_tokens", &v) == GW_OK && v >= 0)
        cu->output = canon_tokens(v);
    long long total = -1, e5 = 0, e1 = 0;
    if (gw_json_int(u, "cache_creation_input_tokens", &v) == GW_OK && v >= 0)
        total = canon_tokens(v);
    json_t *cc = json_object_get(u, "cache_creation");
    if (json_is_object(cc)) {
        if (gw_json_int(cc, "ephemeral_5m_input_tokens", &v) == GW_OK && v >= 0)
            e5 = canon_tokens(v);
        if (gw_json_int(cc, "ephemeral_1h_input_tokens", &v) == GW_OK && v >= 0)
            e1 = canon_tokens(v);
        /* A total above the tiers' sum: the rest is of no stated tier. */
        if (total > e5 + e1)
            e5 = total - e1;
        cu->cache_write_5m = e5;
        cu->cache_write_1h = e1;
    } else if (total >= 0 && total != cu->cache_write_5m + cu->cache_write_1h) {
        cu->cache_write_5m = total;
        cu->cache_write_1h = 0;
    }
    cu->have = 1;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = cu, .service_tier = tier_of(u)};
    return canon_emit(s, &ev);
}

/* A content block: text, thinking, tool_use; others are skipped. In a
 * stream the arguments come in input_json_delta, so a start's input ({})
 * is not used; in a whole message it is the call's arguments. */
static int block_start(struct an_parser *p, long long index, const json_t *cb, int whole,
                       const struct canon_sink *s)
{
    const char *type = gw_json_str(cb, "type");
    if (p->block == BK_TOOL && drv_tools_close(&p->tools, s))
        return 1;
    if (flush_citations(p, s))
        return 1;
    p->block_index = index;
    p->block = BK_SKIP;
    if (!type)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a content block with no type");
    if (strcmp(type, "text") == 0) {
        p->block = BK_TEXT;
        json_t *cites = json_object_get(cb, "citations");
        if (drv_emit_text(s, CANON_EV_CHUNK, gw_json_str(cb, "text")))
            return 1;
        if (whole)
            return json_is_array(cites) ? emit_citations(cites, s) : 0;
        size_t i;
        json_t *c;
        json_array_foreach(cites, i, c) if (hold_citation(p, c)) return 1;
        return 0;
    }
    if (strcmp(type, "thinking") == 0) {
        p->block = BK_THINKING;
        if (drv_emit_text(s, CANON_EV_REASONING, gw_json_str(cb, "thinking")))
            return 1;
        return drv_emit_signature(s, gw_json_str(cb, "signature"));
    }
    if (strcmp(type, "tool_use") == 0) {
        const char *name = gw_json_str(cb, "name");
        if (!name)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent a tool call with no name");
        char *args = NULL;
        if (whole) {
            json_t *in = json_object_get(cb, "input");
            args = json_is_object(in) ? json_dumps(in, JSON_COMPACT) : NULL;
            if (!args)
                return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                                "the provider sent a tool call whose input is not an object");
        }
        p->block = BK_TOOL;
        int rc = drv_tools_delta(&p->tools, index, gw_json_str(cb, "id"), name, args, s);
        free(args);
        return drv_tools_check(&p->base, s, rc,
                               "the provider sent tool calls out of order or too many of them");
    }
    if (strcmp(type, "redacted_thinking") == 0) {
        const char *data = gw_json_str(cb, "data");
        if (!data)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent a redacted thinking block with no data");
        return drv_emit_redacted(s, data);
    }
    return 0; /* server blocks: see the header comment */
}

static int on_block_delta(struct an_parser *p, const json_t *doc, const struct canon_sink *s)
{
    long long index = -1;
    gw_json_int(doc, "index", &index);
    if (p->block == BK_NONE || index != p->block_index)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a delta for a content block that is not open");
    json_t *d = json_object_get(doc, "delta");
    const char *dt = gw_json_str(d, "type");
    if (!dt || p->block == BK_SKIP)
        return 0;
    enum block_kind want = BK_SKIP;
    if (strcmp(dt, "text_delta") == 0)
        want = BK_TEXT;
    else if (strcmp(dt, "thinking_delta") == 0 || strcmp(dt, "signature_delta") == 0)
        want = BK_THINKING;
    else if (strcmp(dt, "input_json_delta") == 0)
        want = BK_TOOL;
    else if (strcmp(dt, "citations_delta") == 0 && p->block == BK_TEXT)
        return hold_citation(p, json_object_get(d, "citation"));
    if (want == BK_SKIP)
        return 0; /* future kinds */
    if (want != p->block)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a delta of the wrong kind for its content block");
    if (strcmp(dt, "text_delta") == 0)
        return drv_emit_text(s, CANON_EV_CHUNK, gw_json_str(d, "text"));
    if (strcmp(dt, "thinking_delta") == 0)
        return drv_emit_text(s, CANON_EV_REASONING, gw_json_str(d, "thinking"));
    if (strcmp(dt, "signature_delta") == 0)
        return drv_emit_signature(s, gw_json_str(d, "signature"));
    const char *pj = gw_json_str(d, "partial_json");
    return drv_tools_delta(&p->tools, index, NULL, NULL, pj, s) ? 1 : 0;
}

static int done(struct an_parser *p, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s) || flush_citations(p, s))
        return 1;
    p->base.terminal = 1;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = p->stop};
    canon_emit(s, &ev);
    return 1;
}

static int on_error_doc(struct an_parser *p, const json_t *doc, int status,
                        const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    const char *type = gw_json_str(e, "type");
    const char *msg = gw_json_str(e, "message");
    p->base.terminal = 1;
    canon_emit_error(s, failure_of(type, status, msg), status,
                     msg ? msg : "the provider reported an error");
    return 1;
}

static int on_start(struct an_parser *p, const json_t *msg, const struct canon_sink *s)
{
    if (p->base.started)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider started its message twice");
    if (drv_start_tier(&p->base, gw_json_str(msg, "id"), gw_json_str(msg, "model"),
                       tier_of(json_object_get(msg, "usage")), s))
        return 1;
    return on_usage(p, json_object_get(msg, "usage"), s);
}

/* One streamed event. */
static int on_event(struct an_parser *p, const char *name, const json_t *doc,
                    const struct canon_sink *s)
{
    const char *type = gw_json_str(doc, "type");
    if (!type)
        type = name;
    if (strcmp(type, "ping") == 0)
        return 0;
    if (strcmp(type, "error") == 0)
        return on_error_doc(p, doc, 0, s);
    if (strcmp(type, "message_start") == 0)
        return on_start(p, json_object_get(doc, "message"), s);
    if (!p->base.started)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider's stream did not begin with message_start");
    if (strcmp(type, "content_block_start") == 0) {
        long long index = -1;
        json_t *cb = json_object_get(doc, "content_block");
        if (gw_json_int(doc, "index", &index) != GW_OK || index < 0 || !json_is_object(cb))
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent a malformed block start");
        return block_start(p, index, cb, 0, s);
    }
    if (strcmp(type, "content_block_delta") == 0)
        return on_block_delta(p, doc, s);
    if (strcmp(type, "content_block_stop") == 0) {
        long long index = -1;
        gw_json_int(doc, "index", &index);
        if (p->block == BK_NONE || index != p->block_index)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider closed a content block that is not open");
        enum block_kind k = p->block;
        p->block = BK_NONE;
        return k == BK_TOOL ? drv_tools_close(&p->tools, s) : flush_citations(p, s);
    }
    if (strcmp(type, "message_delta") == 0) {
        const char *sr = gw_json_str(json_object_get(doc, "delta"), "stop_reason");
        if (sr) {
            p->have_stop = 1;
            p->stop = canon_stop_from_anthropic(sr);
        }
        /* The message's end while a tool_use block is still open (its
         * content_block_stop never came): the call ends here, as it would
         * at message_stop, since usage never comes inside a call (canon.h). */
        if (p->block == BK_TOOL) {
            p->block = BK_NONE;
            if (drv_tools_close(&p->tools, s))
                return 1;
        }
        return on_usage(p, json_object_get(doc, "usage"), s);
    }
    if (strcmp(type, "message_stop") == 0)
        return done(p, s);
    return 0; /* new event types are to be ignored, Anthropic says */
}

static int on_sse(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                  const struct canon_sink *s)
{
    return on_event((struct an_parser *)bp, ev->event, doc, s);
}

int drv_anthropic_parse(struct drv_parser *bp, const char *buf, size_t len,
                        const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, drv_sse_skip_empty, on_sse);
}

/* A whole "message" body → the events a stream would give. */
static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct an_parser *p = (struct an_parser *)bp;
    const char *type = gw_json_str(doc, "type");
    if (type && strcmp(type, "error") == 0) {
        on_error_doc(p, doc, 0, s);
        return;
    }
    json_t *content = json_object_get(doc, "content");
    if ((type && strcmp(type, "message") != 0) || !json_is_array(content)) {
        drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "the provider's answer is not a message");
        return;
    }
    if (drv_start_tier(&p->base, gw_json_str(doc, "id"), gw_json_str(doc, "model"),
                       tier_of(json_object_get(doc, "usage")), s))
        return;
    size_t i;
    json_t *cb;
    json_array_foreach(content, i, cb)
    {
        if (!json_is_object(cb)) {
            drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                     "the provider's content block is not an object");
            return;
        }
        if (block_start(p, (long long)i, cb, 1, s))
            return;
    }
    p->block = BK_NONE;
    p->stop = canon_stop_from_anthropic(gw_json_str(doc, "stop_reason"));
    if (drv_tools_close(&p->tools, s) || on_usage(p, json_object_get(doc, "usage"), s))
        return;
    done(p, s);
}

void drv_anthropic_finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct an_parser *p = (struct an_parser *)bp;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No message_stop: complete only if the provider had said why it
     * stopped and no block was left open. */
    if (p->have_stop && p->block == BK_NONE)
        done(p, s);
    else
        drv_fail(&p->base, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}

/* ---------------------------------------------------------------- classify */

void drv_anthropic_classify(int status, const char *body, size_t len, enum canon_failure *f,
                            char *msg, size_t msglen)
{
    msg[0] = '\0';
    json_t *doc = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(doc, "error");
    const char *type = gw_json_str(e, "type");
    const char *m = gw_json_str(e, "message");
    if (!json_is_object(e)) {
        json_decref(doc);
        drv_classify_default(status, body, len, f, msg, msglen);
        if (status == 529)
            *f = CANON_FAIL_PROVIDER_5XX;
        return;
    }
    *f = failure_of(type, status, m);
    if (m)
        snprintf(msg, msglen, "%s", m);
    json_decref(doc);
}
