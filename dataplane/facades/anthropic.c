/*
 * The Anthropic Messages facade: POST /v1/messages (and, through
 * dp_exchange_count_tokens, POST /v1/messages/count_tokens).
 *
 * Accepted: model, max_tokens (required, >= 1), messages (user and
 * assistant; content a string or blocks: text, image with a base64 or url
 * source, document with a base64, url or text source (title, context,
 * citations.enabled), tool_use, tool_result with string or block content
 * and is_error, thinking with its signature, redacted_thinking;
 * cache_control on text, image, document, tool_use and tool_result blocks),
 * system (a string or text blocks
 * with cache_control), tools (custom tools: name, description, input_schema,
 * strict, cache_control), tool_choice (auto, any, tool, none;
 * disable_parallel_tool_use), temperature (0..1), top_p, top_k,
 * stop_sequences, stream, metadata.user_id, thinking ({type: enabled,
 * budget_tokens >= 1024} or {type: disabled}), output_config (format
 * {type: json_schema, schema}: structured output; effort low / medium /
 * high: the reasoning effort), service_tier (auto, standard_only). The tier
 * that served is usage.service_tier (in message_start once known,
 * message_delta and the whole body). Anything else is refused
 * with a 400 naming it: server tools (a tool "type" other than "custom"),
 * documents with a content or file source and other block kinds, adaptive
 * thinking, unknown members.
 *
 * Streams follow Anthropic's event sequence, each event with an "event:"
 * line and the same "type" in its data:
 *   message_start   (sent lazily, at the first event after START that is not
 *                    USAGE, so input usage reported right after START, as
 *                    Anthropic and Bedrock upstreams do, lands in it), ping,
 *   content_block_start / content_block_delta / content_block_stop per
 *                    block (text, thinking with thinking_delta and
 *                    signature_delta, tool_use with input_json_delta; index
 *                    0, 1, ...; a new block closes the open one),
 *   message_delta   (stop_reason, cumulative usage), message_stop.
 * Citations (CITATION, after the text they cite) are citations_delta events
 * on the open text block; the next text opens a new block. A whole answer's
 * text is cut into blocks at the citations' offsets, each cited block with
 * its "citations" (the provider's objects as they came).
 * An error after the stream started is an "event: error" with
 * {"type":"error","error":{"type","message"}} and the stream then ends, as
 * Anthropic's own streams do (no message_delta or message_stop follows).
 * Error types follow Anthropic's table by HTTP status (400
 * invalid_request_error, 401 authentication_error, 402 billing_error, 403
 * permission_error, 404 not_found_error, 413 request_too_large, 429
 * rate_limit_error, 503/529 overloaded_error, 504 timeout_error, other 4xx
 * invalid_request_error, else api_error); Anthropic's error body has no
 * "param", so the field leads the message ("max_tokens: ...").
 * Tool arguments stream as the provider sent them; a non-streamed answer
 * renders each tool_use input as the parsed arguments object, and when the
 * provider's arguments are not a JSON object the answer fails (the exchange
 * turns a render failure into a 500) rather than invent an input the model
 * did not produce.
 *
 * This file holds the stream encoder, the whole-body render and the
 * error body; the request is parsed in anthropic_parse.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_anthropic_int.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"

/* snprintf for field paths and messages, cut to fit (a path only names a
 * field in an error message). */
void fc_anthropic_pathf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* ----------------------------------------------------------------- shared */

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 402:
        return "billing_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    case 504:
        return "timeout_error";
    default:
        /* Anthropic uses invalid_request_error for the 4xx it does not
         * list; 499 is the gateway's own "canceled", not the client's. */
        return status >= 400 && status < 500 && status != 499 ? "invalid_request_error"
                                                              : "api_error";
    }
}

/* Anthropic's usage object. */
static json_t *usage_json(const struct canon_usage *u, int cache_detail, long long output)
{
    json_t *o = json_pack("{s:I,s:I,s:I}", "input_tokens", (json_int_t)u->input,
                          "cache_creation_input_tokens",
                          (json_int_t)(u->cache_write_5m + u->cache_write_1h),
                          "cache_read_input_tokens", (json_int_t)u->cache_read);
    if (o && cache_detail)
        json_object_set_new(o, "cache_creation",
                            json_pack("{s:I,s:I}", "ephemeral_5m_input_tokens",
                                      (json_int_t)u->cache_write_5m, "ephemeral_1h_input_tokens",
                                      (json_int_t)u->cache_write_1h));
    if (o)
        json_object_set_new(o, "output_tokens", json_integer(output));
    return o;
}

/* usage.service_tier, the tier that served, when the provider said it
 * (canonical words are Anthropic's: standard, priority, batch; flex and
 * scale from OpenAI upstreams as they are). Returns u. */
static json_t *with_tier(json_t *u, const char *tier)
{
    if (u && tier)
        json_object_set_new(u, "service_tier", json_string(tier));
    return u;
}

/* ----------------------------------------------------------------- stream */

enum blk { BLK_NONE, BLK_TEXT, BLK_THINKING, BLK_TOOL };

struct an_stream {
    char *id;
    char *model;
    int started;  /* message_start sent */
    enum blk blk; /* the open block */
    int signed_;  /* the open thinking block has its signature */
    int index;    /* the open block's index; the next is index + 1 */
    int cited;    /* the open text block got citations: more text opens a new one */
    struct canon_usage usage;
    const struct fc_bill *bill;
    char *tier; /* the served tier, once reported */
};

static void *stream_new(const struct canon_req *r, const struct fc_ctx *ctx)
{
    (void)r;
    struct an_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    size_t n = strlen(ctx->request_id) + 8;
    st->id = malloc(n);
    st->model = strdup(ctx->model ? ctx->model : "");
    if (!st->id || !st->model) {
        free(st->id);
        free(st->model);
        free(st);
        return NULL;
    }
    fc_anthropic_pathf(st->id, n, "msg_%s", ctx->request_id);
    st->index = -1;
    st->bill = ctx->bill;
    return st;
}

static void stream_free(void *p)
{
    struct an_stream *st = p;
    if (!st)
        return;
    free(st->id);
    free(st->model);
    free(st->tier);
    free(st);
}

static int ensure_started(struct an_stream *st, struct gw_buf *out)
{
    if (st->started)
        return GW_OK;
    st->started = 1;
    json_t *msg = json_pack(
        "{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", st->id, "type", "message", "role", "assistant",
        "model", st->model, "content", "stop_reason", "stop_sequence", "usage",
        with_tier(usage_json(&st->usage, 1, st->usage.output > 0 ? 1 : 0), st->tier));
    int rc =
        fc_sse_json(out, "message_start",
                    msg ? json_pack("{s:s,s:o}", "type", "message_start", "message", msg) : NULL);
    if (rc == GW_OK)
        rc = fc_sse(out, "ping", "{\"type\":\"ping\"}", 15);
    return rc;
}

static int close_block(struct an_stream *st, struct gw_buf *out)
{
    if (st->blk == BLK_NONE)
        return GW_OK;
    st->blk = BLK_NONE;
    return gw_buf_printf(out,
                         "event: content_block_stop\ndata: "
                         "{\"type\":\"content_block_stop\",\"index\":%d}\n\n",
                         st->index);
}

/* Closes the open block and opens the next with content_block (stolen). */
static int open_block(struct an_stream *st, struct gw_buf *out, enum blk kind, json_t *cb)
{
    int rc = close_block(st, out);
    if (rc != GW_OK) {
        json_decref(cb);
        return rc;
    }
    st->blk = kind;
    st->signed_ = 0;
    st->index++;
    return fc_sse_json(out, "content_block_start",
                       cb ? json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                      st->index, "content_block", cb)
                          : NULL);
}

/* event: content_block_delta with {"type":<dtype>,<field>:<text>}. */
static int delta(struct an_stream *st, struct gw_buf *out, const char *dtype, const char *field,
                 const char *text, size_t len)
{
    int rc = gw_buf_printf(out,
                           "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                           "\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":",
                           st->index, dtype, field);
    if (rc == GW_OK)
        rc = gw_json_escape(out, text, len);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "}}\n\n");
    return rc;
}

static int on_reasoning(struct an_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    int rc = GW_OK;
    if (ev->redacted) {
        /* One whole block, as Anthropic streams it: start with its data,
         * then stop. */
        rc = open_block(
            st, out, BLK_THINKING,
            json_pack("{s:s,s:s%}", "type", "redacted_thinking", "data", ev->text, ev->len));
        st->signed_ = 1; /* nothing may be appended to it */
        return rc == GW_OK ? close_block(st, out) : rc;
    }
    int need_open = st->blk != BLK_THINKING || st->signed_;
    if ((ev->len || ev->signature) && need_open)
        rc = open_block(
            st, out, BLK_THINKING,
            json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", ""));
    if (rc == GW_OK && ev->len)
        rc = delta(st, out, "thinking_delta", "thinking", ev->text, ev->len);
    if (rc == GW_OK && ev->signature) {
        rc = delta(st, out, "signature_delta", "signature", ev->signature, strlen(ev->signature));
        st->signed_ = 1;
    }
    return rc;
}

/* A citation of the text just streamed: a citations_delta on its block
 * (the provider's citation object as it came). */
static int on_citation(struct an_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    int rc = GW_OK;
    if (!ev->citation)
        return GW_OK;
    if (st->blk != BLK_TEXT)
        rc = open_block(st, out, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
    st->cited = 1;
    if (rc == GW_OK)
        rc = gw_buf_printf(out,
                           "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                           "\"index\":%d,\"delta\":{\"type\":\"citations_delta\",\"citation\":",
                           st->index);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ev->citation);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "}}\n\n");
    return rc;
}

static int on_done(struct an_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    int rc = close_block(st, out);
    if (rc == GW_OK) {
        json_t *u = with_tier(usage_json(&st->usage, 0, st->usage.output), st->tier);
        json_t *d =
            u ? json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta", "stop_reason",
                          canon_stop_to_anthropic(ev->stop), "stop_sequence", "usage", u)
              : NULL;
        json_t *bill = fc_bill_json(st->bill);
        if (d && bill)
            json_object_set_new(d, "llmgw", bill);
        else
            json_decref(bill);
        rc = fc_sse_json(out, "message_delta", d);
    }
    if (rc == GW_OK)
        rc = fc_sse(out, "message_stop", "{\"type\":\"message_stop\"}", 23);
    return rc;
}

static int keep_tier(struct an_stream *st, const char *tier)
{
    if (!tier || (st->tier && strcmp(st->tier, tier) == 0))
        return GW_OK;
    free(st->tier);
    return (st->tier = strdup(tier)) ? GW_OK : GW_ENOMEM;
}

static int stream_event(void *p, const struct canon_event *ev, struct gw_buf *out)
{
    struct an_stream *st = p;
    if ((ev->type == CANON_EV_START || ev->type == CANON_EV_USAGE) &&
        keep_tier(st, ev->service_tier) != GW_OK)
        return GW_ENOMEM;
    switch (ev->type) {
    case CANON_EV_START:
        if (ev->name && *ev->name && strcmp(ev->name, st->model) != 0) {
            char *m = strdup(ev->name);
            if (!m)
                return GW_ENOMEM;
            free(st->model);
            st->model = m;
        }
        return GW_OK;
    case CANON_EV_USAGE:
        st->usage = *ev->usage;
        return GW_OK;
    case CANON_EV_ERROR: {
        json_t *e = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                              error_type(canon_failure_status(ev->failure)), "message",
                              ev->message && *ev->message ? ev->message : "the upstream failed");
        return fc_sse_json(out, "error", e);
    }
    default:
        break;
    }
    int rc = ensure_started(st, out);
    if (rc != GW_OK)
        return rc;
    switch (ev->type) {
    case CANON_EV_CHUNK:
        if (st->blk != BLK_TEXT || st->cited) {
            st->cited = 0;
            rc = open_block(st, out, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        }
        return rc == GW_OK ? delta(st, out, "text_delta", "text", ev->text, ev->len) : rc;
    case CANON_EV_CITATION:
        return on_citation(st, ev, out);
    case CANON_EV_REASONING:
        return on_reasoning(st, ev, out);
    case CANON_EV_TOOL_START:
        return open_block(st, out, BLK_TOOL,
                          json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
                                    ev->id ? ev->id : "", "name", ev->name ? ev->name : "",
                                    "input"));
    case CANON_EV_TOOL_DELTA:
        if (st->blk != BLK_TOOL)
            return GW_EINVAL;
        return delta(st, out, "input_json_delta", "partial_json", ev->text, ev->len);
    case CANON_EV_TOOL_END:
        return st->blk == BLK_TOOL ? close_block(st, out) : GW_EINVAL;
    case CANON_EV_DONE:
        return on_done(st, ev, out);
    default:
        return GW_OK;
    }
}

/* ----------------------------------------------------------------- render */

/* The answer's text as text blocks: one block per cited passage (the text
 * from the previous citation's offset to this one's, with every citation at
 * that offset), then the rest uncited. */
static int text_blocks(const struct canon_acc *acc, json_t *content)
{
    const char *t = acc->text->data;
    size_t from = 0, n = json_array_size(acc->citations);
    json_t *blk = NULL;
    for (size_t i = 0; i < n; i++) {
        json_t *c = json_array_get(acc->citations, i);
        json_int_t at = json_integer_value(json_object_get(c, "at"));
        if (at < (json_int_t)from || at > (json_int_t)acc->text->len)
            continue;
        if (!blk || (size_t)at > from) {
            blk = json_pack("{s:s,s:s%,s:[]}", "type", "text", "text", t + from, (size_t)at - from,
                            "citations");
            if (!blk || json_array_append_new(content, blk))
                return GW_ENOMEM;
            from = (size_t)at;
        }
        if (json_array_append(json_object_get(blk, "citations"), json_object_get(c, "citation")))
            return GW_ENOMEM;
    }
    if (from < acc->text->len &&
        json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text", t + from,
                                                 acc->text->len - from)))
        return GW_ENOMEM;
    return GW_OK;
}

static int render(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out)
{
    (void)r;
    json_t *content = json_array();
    if (!content)
        return GW_ENOMEM;
    for (size_t i = 0; i < acc->nthinks; i++) {
        const struct canon_acc_think *t = &acc->thinks[i];
        const char *d = t->text && t->text->data ? t->text->data : "";
        size_t dl = t->text ? t->text->len : 0;
        json_array_append_new(
            content, t->redacted
                         ? json_pack("{s:s,s:s%}", "type", "redacted_thinking", "data", d, dl)
                         : json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", d, dl,
                                     "signature", t->signature ? t->signature : ""));
    }
    if (acc->nthinks == 0 && (acc->reasoning || acc->signature))
        json_array_append_new(
            content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking",
                               acc->reasoning && acc->reasoning->data ? acc->reasoning->data : "",
                               acc->reasoning ? acc->reasoning->len : 0, "signature",
                               acc->signature ? acc->signature : ""));
    if (acc->text && acc->text->len && text_blocks(acc, content) != GW_OK) {
        json_decref(content);
        return GW_ENOMEM;
    }
    for (size_t i = 0; i < acc->ntools; i++) {
        const struct canon_acc_tool *t = &acc->tools[i];
        json_t *input = json_loadb(t->args->data ? t->args->data : "", t->args->len, 0, NULL);
        if (!json_is_object(input)) {
            /* See the header comment: no invented input. */
            json_decref(input);
            json_decref(content);
            return GW_EINVAL;
        }
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                 t->id, "name", t->name, "input", input));
    }
    char id[200];
    fc_anthropic_pathf(id, sizeof(id), "msg_%s", ctx->request_id);
    json_t *doc =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:o}", "id", id, "type", "message", "role",
                  "assistant", "model", ctx->model ? ctx->model : "", "content", content,
                  "stop_reason", canon_stop_to_anthropic(acc->stop), "stop_sequence", "usage",
                  with_tier(usage_json(&acc->usage, 1, acc->usage.output), acc->service_tier));
    return fc_json_append(out, doc, JSON_COMPACT);
}

/* Anthropic's error shape has no param: the param leads the message. */
static char *error_body(int status, const char *type, const char *param, const char *code,
                        const char *message, size_t *len)
{
    (void)type;
    (void)code;
    char msg[640];
    const char *m = message ? message : "";
    if (param && *param)
        fc_anthropic_pathf(msg, sizeof(msg), "%s: %s", param, m);
    else
        fc_anthropic_pathf(msg, sizeof(msg), "%s", m);
    json_t *doc = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                            error_type(status), "message", msg);
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (s && len)
        *len = strlen(s);
    return s;
}

const struct dp_facade fc_anthropic = {
    .name = "anthropic.messages",
    .wire = "anthropic.messages",
    .parse = fc_anthropic_parse,
    .stream_new = stream_new,
    .stream_event = stream_event,
    .stream_free = stream_free,
    .render = render,
    .error_body = error_body,
};
