/*
 * The "bedrock" driver's answer: the event stream or one Converse body
 * into canonical events, and an error answer's failure class (what is
 * read and how: bedrock.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_driver.h"
#include "drv_bedrock_int.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_error.h"
#include "gw_eventstream.h"
#include "gw_json.h"
#include "gw_str.h"

/* ------------------------------------------------------------------ parse */

struct br_parser {
    struct drv_parser base;
    struct gw_es es;
    struct drv_tools tools;
    int have_stop;
    enum canon_stop stop;
};

struct drv_parser *drv_bedrock_parser_new(int stream)
{
    struct br_parser *p = drv_parser_new(sizeof(*p), &drv_bedrock, stream);
    if (!p)
        return NULL;
    gw_es_init(&p->es, DRV_MAX_EVENT);
    return &p->base;
}

void drv_bedrock_parser_free(struct drv_parser *bp)
{
    struct br_parser *p = (struct br_parser *)bp;
    gw_es_free(&p->es);
    drv_parser_free(bp);
}

/* Bedrock gives no response id and no model name. */
static int emit_start(struct br_parser *p, const struct canon_sink *s)
{
    return drv_start(&p->base, NULL, NULL, s);
}

/* Bedrock's phrases for a prompt beyond the model's context. */
static int context_overflow(const char *m, size_t len)
{
    return gw_mem_has(m, len, "too many input tokens") || gw_mem_has(m, len, "input is too long") ||
           gw_mem_has(m, len, "prompt is too long") || gw_mem_has(m, len, "context window") ||
           gw_mem_has(m, len, "context length") || gw_mem_has(m, len, "maximum context") ||
           gw_mem_has(m, len, "context limit");
}

/* The failure class of a Bedrock exception by its type name (case-insensitive:
 * the event stream says "throttlingException", an error body
 * "ThrottlingException"). */
static enum canon_failure exception_class(const char *type, const char *msg)
{
    size_t ml = msg ? strlen(msg) : 0;
    if (!type)
        return CANON_FAIL_PROVIDER_5XX;
    if (strcasecmp(type, "throttlingException") == 0)
        return CANON_FAIL_RATE_LIMITED;
    if (strcasecmp(type, "validationException") == 0)
        return context_overflow(msg, ml) ? CANON_FAIL_CONTEXT_OVERFLOW : CANON_FAIL_BAD_REQUEST;
    if (strcasecmp(type, "accessDeniedException") == 0)
        return CANON_FAIL_AUTH_FAILED;
    if (strcasecmp(type, "resourceNotFoundException") == 0 ||
        strcasecmp(type, "modelNotReadyException") == 0)
        return CANON_FAIL_MODEL_UNAVAILABLE;
    if (strcasecmp(type, "modelTimeoutException") == 0)
        return CANON_FAIL_TIMEOUT;
    if (strcasecmp(type, "serviceQuotaExceededException") == 0)
        return CANON_FAIL_RATE_LIMITED;
    /* modelStreamErrorException, internalServerException,
     * serviceUnavailableException, modelErrorException, and anything new. */
    return CANON_FAIL_PROVIDER_5XX;
}

static const char *message_of(const json_t *doc)
{
    const char *m = gw_json_str(doc, "message");
    return m ? m : gw_json_str(doc, "Message");
}

/* Bedrock usage → canonical (see the header comment). */
/* The usage of doc (a whole answer or the metadata event), with the tier
 * that served (serviceTier.type) when Bedrock says it. */
static int emit_usage(const json_t *doc, const struct canon_sink *s)
{
    const json_t *u = json_object_get(doc, "usage");
    const char *tier = canon_tier_served(gw_json_str(json_object_get(doc, "serviceTier"), "type"));
    if (!json_is_object(u))
        return 0;
    struct canon_usage cu = {.have = 1};
    long long in = 0, out = 0, cr = 0, cw = 0;
    gw_json_int(u, "inputTokens", &in);
    gw_json_int(u, "outputTokens", &out);
    gw_json_int(u, "cacheReadInputTokens", &cr);
    gw_json_int(u, "cacheWriteInputTokens", &cw);
    long long d5 = 0, d1 = 0;
    size_t i;
    json_t *d;
    json_array_foreach(json_object_get(u, "cacheDetails"), i, d)
    {
        long long n = 0;
        const char *ttl = gw_json_str(d, "ttl");
        if (gw_json_int(d, "inputTokens", &n) != GW_OK || n < 0 || !ttl)
            continue;
        if (strcmp(ttl, "1h") == 0)
            d1 = canon_tokens(d1 + canon_tokens(n));
        else
            d5 = canon_tokens(d5 + canon_tokens(n));
    }
    cw = canon_tokens(cw);
    cu.input = canon_tokens(in);
    cu.output = canon_tokens(out);
    cu.cache_read = canon_tokens(cr);
    if (d5 + d1 > 0) {
        cu.cache_write_5m = d5;
        cu.cache_write_1h = d1;
    } else {
        cu.cache_write_5m = cw;
    }
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &cu, .service_tier = tier};
    return canon_emit(s, &ev);
}

/* A stopReason; 0, or 1 after failing the answer (a malformed output is a
 * provider failure, not an ending). */
static int take_stop(struct br_parser *p, const char *sr, const struct canon_sink *s)
{
    if (!sr)
        sr = "end_turn";
    if (strcmp(sr, "malformed_model_output") == 0 || strcmp(sr, "malformed_tool_use") == 0) {
        char msg[128];
        snprintf(msg, sizeof(msg), "the model's output was malformed (stopReason %s)", sr);
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, msg);
    }
    if (strcmp(sr, "guardrail_intervened") == 0 || strcmp(sr, "content_filtered") == 0)
        p->stop = CANON_STOP_CONTENT_FILTER;
    else if (strcmp(sr, "model_context_window_exceeded") == 0)
        p->stop = CANON_STOP_MAX_TOKENS;
    else
        p->stop = canon_stop_from_anthropic(sr); /* end_turn, tool_use, max_tokens, stop_sequence */
    p->have_stop = 1;
    return 0;
}

static int done(struct br_parser *p, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s))
        return 1;
    p->base.terminal = 1;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = p->stop};
    canon_emit(s, &ev);
    return 1;
}

/* A signature, even an empty one (it ends the reasoning block). */
static int emit_signature(const char *sig, const struct canon_sink *s)
{
    struct canon_event ev = {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = sig};
    return canon_emit(s, &ev);
}

static int on_delta(struct br_parser *p, const json_t *doc, const struct canon_sink *s)
{
    long long idx = -1;
    if (gw_json_int(doc, "contentBlockIndex", &idx) != GW_OK)
        idx = p->tools.open_key; /* no index: the open block's */
    json_t *d = json_object_get(doc, "delta");
    const char *text = gw_json_str(d, "text");
    if (text && *text) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        return drv_emit_text(s, CANON_EV_CHUNK, text);
    }
    json_t *tu = json_object_get(d, "toolUse");
    if (tu) {
        const char *in = gw_json_str(tu, "input");
        if (!p->tools.open || p->tools.open_key != idx)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent tool input outside its tool block");
        if (in && *in)
            return drv_tools_check(&p->base, s, drv_tools_delta(&p->tools, idx, NULL, NULL, in, s),
                                   "the provider interleaved tool calls");
        return 0;
    }
    json_t *reas = json_object_get(d, "reasoningContent");
    if (reas) {
        const char *rt = gw_json_str(reas, "text");
        const char *sig = gw_json_str(reas, "signature");
        if ((rt && *rt) || sig) {
            if (drv_tools_close(&p->tools, s))
                return 1;
        }
        if (drv_emit_text(s, CANON_EV_REASONING, rt) || (sig && emit_signature(sig, s)))
            return 1;
        const char *rd = gw_json_str(reas, "redactedContent");
        if (rd && *rd) {
            if (drv_tools_close(&p->tools, s))
                return 1;
            if (drv_emit_redacted(s, rd))
                return 1;
        }
    }
    return 0;
}

static int on_event_msg(struct br_parser *p, const char *type, const json_t *doc,
                        const struct canon_sink *s)
{
    if (strcmp(type, "messageStart") == 0)
        return emit_start(p, s);
    if (strcmp(type, "metadata") == 0) {
        if (emit_start(p, s) || emit_usage(doc, s))
            return 1;
        /* metadata is the last event; DONE once the stop is known. */
        return p->have_stop ? done(p, s) : 0;
    }
    if (emit_start(p, s))
        return 1;
    if (strcmp(type, "contentBlockStart") == 0) {
        json_t *tu = json_object_get(json_object_get(doc, "start"), "toolUse");
        if (!tu)
            return 0;
        long long idx = -1;
        if (gw_json_int(doc, "contentBlockIndex", &idx) != GW_OK)
            idx = -2 - p->tools.count; /* no index: a key of its own */
        const char *name = gw_json_str(tu, "name");
        if (!name || !*name)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent a tool call without "
                            "a name");
        return drv_tools_check(
            &p->base, s,
            drv_tools_delta(&p->tools, idx, gw_json_str(tu, "toolUseId"), name, NULL, s),
            "the provider interleaved tool calls");
    }
    if (strcmp(type, "contentBlockDelta") == 0)
        return on_delta(p, doc, s);
    if (strcmp(type, "contentBlockStop") == 0) {
        long long idx = -1;
        int has_idx = gw_json_int(doc, "contentBlockIndex", &idx) == GW_OK;
        if (p->tools.open && (!has_idx || idx == p->tools.open_key))
            return drv_tools_close(&p->tools, s);
        return 0;
    }
    if (strcmp(type, "messageStop") == 0) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        return take_stop(p, gw_json_str(doc, "stopReason"), s);
    }
    return 0; /* an event this driver does not know: nothing to say */
}

static int on_message(struct br_parser *p, const struct gw_es_message *m,
                      const struct canon_sink *s)
{
    const char *mt = gw_es_header(m, ":message-type");
    if (mt && strcmp(mt, "error") == 0) {
        /* An event-stream level error: code and message in headers. */
        const char *em = gw_es_header(m, ":error-message");
        char msg[384];
        snprintf(msg, sizeof(msg), "the provider's stream failed: %.160s%s%.160s",
                 gw_es_header(m, ":error-code") ? gw_es_header(m, ":error-code") : "error",
                 em ? ": " : "", em ? em : "");
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, msg);
    }
    json_t *doc = m->payload_len ? json_loadb(m->payload, m->payload_len, 0, NULL) : json_object();
    if (!json_is_object(doc)) {
        json_decref(doc);
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a malformed stream event");
    }
    int stop = 0;
    if (mt && strcmp(mt, "exception") == 0) {
        const char *type = gw_es_header(m, ":exception-type");
        const char *msg = message_of(doc);
        char buf[384];
        snprintf(buf, sizeof(buf), "%s: %s", type ? type : "exception",
                 msg ? msg : "the provider reported an error");
        stop = drv_fail(&p->base, s, exception_class(type, msg), buf);
    } else if (!mt || strcmp(mt, "event") == 0) {
        const char *type = gw_es_header(m, ":event-type");
        if (type)
            stop = on_event_msg(p, type, doc, s);
    }
    json_decref(doc);
    return stop;
}

static int parse_stream(struct drv_parser *bp, const char *buf, size_t len,
                        const struct canon_sink *s)
{
    struct br_parser *p = (struct br_parser *)bp;
    struct gw_es_message m;
    int rc;
    while ((rc = gw_es_next(&p->es, &buf, &len, &m)) == GW_OK)
        if (on_message(p, &m, s))
            return 1;
    if (rc != GW_EAGAIN) {
        char msg[160];
        snprintf(msg, sizeof(msg), "the provider's event stream is corrupt: %s",
                 gw_es_why(&p->es) ? gw_es_why(&p->es) : "unreadable");
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, msg);
    }
    return 0;
}

int drv_bedrock_parse(struct drv_parser *bp, const char *buf, size_t len,
                      const struct canon_sink *s)
{
    return drv_parse(bp, buf, len, s, parse_stream);
}

/* One content block of a whole Converse answer. */
static int whole_block(struct br_parser *p, const json_t *b, long long i,
                       const struct canon_sink *s)
{
    const char *text = gw_json_str(b, "text");
    if (text) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        return drv_emit_text(s, CANON_EV_CHUNK, text);
    }
    json_t *tu = json_object_get(b, "toolUse");
    if (tu) {
        json_t *in = json_object_get(tu, "input");
        if (in && !json_is_object(in))
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider's tool call input is not an object");
        char *args = in ? json_dumps(in, JSON_COMPACT) : NULL;
        if (in && !args)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
        const char *name = gw_json_str(tu, "name");
        int rc =
            drv_tools_delta(&p->tools, i, gw_json_str(tu, "toolUseId"), name ? name : "", args, s);
        free(args);
        return drv_tools_check(&p->base, s, rc, "the provider's tool calls are malformed");
    }
    const char *rd = gw_json_str(json_object_get(b, "reasoningContent"), "redactedContent");
    if (rd && *rd) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        return drv_emit_redacted(s, rd) ? 1 : 0;
    }
    const json_t *rt = json_object_get(json_object_get(b, "reasoningContent"), "reasoningText");
    if (rt) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        const char *t = gw_json_str(rt, "text");
        const char *sig = gw_json_str(rt, "signature");
        if (drv_emit_text(s, CANON_EV_REASONING, t) || (sig && emit_signature(sig, s)))
            return 1;
    }
    return 0;
}

/* A whole Converse body → the same events a stream would give. */
static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct br_parser *p = (struct br_parser *)bp;
    json_t *content =
        json_object_get(json_object_get(json_object_get(doc, "output"), "message"), "content");
    if (!json_is_array(content)) {
        const char *m = message_of(doc);
        drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                 m ? m : "the provider's answer has no output.message.content");
        return;
    }
    if (emit_start(p, s))
        return;
    size_t i;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        if (whole_block(p, b, (long long)i, s))
            return;
    }
    if (drv_tools_close(&p->tools, s) || take_stop(p, gw_json_str(doc, "stopReason"), s) ||
        emit_usage(doc, s))
        return;
    done(p, s);
}

void drv_bedrock_finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct br_parser *p = (struct br_parser *)bp;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No metadata: complete only if the provider had said why it stopped. */
    if (p->have_stop)
        done(p, s);
    else
        drv_fail(&p->base, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}

/* ---------------------------------------------------------------- classify */

/*
 * A Bedrock error answer. The exception's name travels in the
 * x-amzn-ErrorType header, which classify does not see; the status says
 * most of it (400 ValidationException, 403 AccessDenied, 404
 * ResourceNotFound, 408 ModelTimeout, 424 ModelError, 429 Throttling or
 * ModelNotReady, 500 InternalServer, 503 ServiceUnavailable) and the body's
 * {"message"} the rest.
 */
void drv_bedrock_classify(int status, const char *body, size_t len, enum canon_failure *f,
                          char *msg, size_t msglen)
{
    drv_classify_default(status, body, len, f, msg, msglen);
    if (len > 65536)
        len = 65536;
    if (gw_mem_has(body, len, "ThrottlingException"))
        *f = CANON_FAIL_RATE_LIMITED;
    else if (status == 400 && context_overflow(body, len))
        *f = CANON_FAIL_CONTEXT_OVERFLOW;
    else if (status == 400 && (gw_mem_has(body, len, "model identifier is invalid") ||
                               gw_mem_has(body, len, "on-demand throughput")))
        /* The target's model id is wrong for this account or region. */
        *f = CANON_FAIL_MODEL_UNAVAILABLE;
    else if (status == 401 || status == 403)
        *f = CANON_FAIL_AUTH_FAILED;
    else if (status == 404)
        *f = CANON_FAIL_MODEL_UNAVAILABLE;
    else if (status == 408)
        *f = CANON_FAIL_TIMEOUT;
    else if (status == 424 || gw_mem_has(body, len, "ModelErrorException"))
        *f = CANON_FAIL_PROVIDER_5XX;
    else if (status == 429 && gw_mem_has(body, len, "not ready"))
        *f = CANON_FAIL_MODEL_UNAVAILABLE;
    else if (status == 429 && gw_mem_has(body, len, "per day"))
        /* "Too many tokens per day": a daily quota, no retry outlives it. */
        *f = CANON_FAIL_QUOTA_EXHAUSTED;
    else if (status == 429)
        *f = CANON_FAIL_RATE_LIMITED;
}
