/*
 * The OpenAI chat completions facade: POST /v1/chat/completions.
 *
 * Accepted: model, messages (system/developer, user with text, image_url,
 * file (file_data as a base64 data: URL, filename; a file_id is opaque:
 * only an OpenAI provider can read it) and input_audio (wav, mp3) parts,
 * assistant with content, tool_calls and reasoning_content, tool),
 * stream, stream_options.include_usage, tools (type function), tool_choice,
 * parallel_tool_calls, temperature, top_p, max_tokens and
 * max_completion_tokens, seed, presence_penalty, frequency_penalty, stop,
 * response_format (text, json_object, json_schema), reasoning_effort, user,
 * safety_identifier, service_tier (auto, default, flex, priority, scale),
 * logprobs and top_logprobs (0..20), n (only 1) (openai_chat_parse.c).
 * Anything else is refused with a 400 naming it: the gateway never drops
 * what the client asked for. In the lenient parse (canon_req.lenient) such
 * a field or content part is noted in canon_req.opaque instead: an OpenAI
 * provider gets the client's body as written (the pass-through), and any
 * other target refuses with it.
 *
 * Streams: a role chunk, then content / reasoning_content / tool_calls
 * deltas (content with its logprobs when asked for; URL citations as
 * annotations), a finish chunk, a usage chunk (choices: []) when the client
 * asked for include_usage, and "data: [DONE]". The tier that served
 * (service_tier) is on every chunk from when the provider said it. An
 * error after the answer started is an in-band {"error":{...}} event
 * before [DONE].
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_cite.h"
#include "fc_openai_chat_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

/* ----------------------------------------------------------------- stream */

struct oc_stream {
    struct fc_ctx ctx;
    char *model;
    int include_usage;
    struct canon_usage usage;
    struct gw_buf head; /* '{"id":...,"model":...,"choices":[{"index":0,"delta":' */
    char *rid;          /* the request id */
    char *tier;         /* the served tier, once reported */
    size_t chars;       /* characters of content sent so far */
    size_t cite_from;   /* where the text the next citation cites starts */
    int cited;          /* a citation came since the last text */
};

/* The head every chunk starts with, service_tier in it once known. */
static int head_build(struct oc_stream *st, const char *tier)
{
    gw_buf_reset(&st->head);
    int rc = gw_buf_appends(&st->head, "{\"id\":\"chatcmpl-");
    if (rc == GW_OK)
        rc = gw_buf_appends(&st->head, st->rid);
    if (rc == GW_OK)
        rc = gw_buf_printf(
            &st->head,
            "\",\"object\":\"chat.completion.chunk\",\"created\":%lld,\"model\":", st->ctx.created);
    if (rc == GW_OK)
        rc = gw_json_escape(&st->head, st->model, strlen(st->model));
    if (rc == GW_OK && tier)
        rc = gw_buf_printf(&st->head, ",\"service_tier\":\"%s\"", fc_tier_served_openai(tier));
    if (rc == GW_OK)
        rc = gw_buf_appends(&st->head, ",\"choices\":[{\"index\":0,\"delta\":");
    return rc;
}

/* A served tier reported (START, USAGE): the chunks from now on say it. */
static int on_tier(struct oc_stream *st, const char *tier)
{
    if (!tier || (st->tier && strcmp(st->tier, tier) == 0))
        return GW_OK;
    free(st->tier);
    if (!(st->tier = strdup(tier)))
        return GW_ENOMEM;
    return head_build(st, st->tier);
}

static void *stream_new(const struct canon_req *r, const struct fc_ctx *ctx)
{
    struct oc_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    st->ctx = *ctx;
    st->include_usage = r->include_usage;
    gw_buf_init(&st->head, 4096);
    st->model = strdup(ctx->model ? ctx->model : "");
    st->rid = strdup(ctx->request_id);
    st->ctx.model = st->model;
    st->ctx.request_id = NULL;
    if (!st->model || !st->rid || head_build(st, NULL) != GW_OK) {
        gw_buf_free(&st->head);
        free(st->model);
        free(st->rid);
        free(st);
        return NULL;
    }
    return st;
}

static void stream_free(void *p)
{
    struct oc_stream *st = p;
    if (!st)
        return;
    gw_buf_free(&st->head);
    free(st->model);
    free(st->rid);
    free(st->tier);
    free(st);
}

/* data: <head><delta>,"finish_reason":<fr>}]}\n\n */
static int frame(struct oc_stream *st, struct gw_buf *out, const char *delta_prefix,
                 const char *text, size_t len, const char *delta_suffix, const char *finish)
{
    int rc = gw_buf_append(out, "data: ", 6);
    if (rc == GW_OK)
        rc = gw_buf_append(out, st->head.data, st->head.len);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, delta_prefix);
    if (rc == GW_OK && text)
        rc = gw_json_escape(out, text, len);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, delta_suffix);
    if (rc == GW_OK)
        rc = gw_buf_printf(out, ",\"finish_reason\":%s%s%s}]}\n\n", finish ? "\"" : "",
                           finish ? finish : "null", finish ? "\"" : "");
    return rc;
}

/* A chunk whose delta is the JSON d (taken). */
static int frame_json(struct oc_stream *st, struct gw_buf *out, json_t *d)
{
    char *s = d ? json_dumps(d, JSON_COMPACT) : NULL;
    json_decref(d);
    if (!s)
        return GW_ENOMEM;
    int rc = frame(st, out, s, NULL, 0, "", NULL);
    free(s);
    return rc;
}

/* A URL citation of the text sent since the last cited passage: a delta
 * with the url_citation annotation (fc_cite.h); other kinds have no form. */
static int stream_citation(struct oc_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    json_t *c = ev->citation ? json_loads(ev->citation, 0, NULL) : NULL;
    st->cited = 1;
    json_t *a = fc_cite_url_annotation(c, st->cite_from, st->chars, 0);
    json_decref(c);
    return a ? frame_json(st, out, json_pack("{s:[o]}", "annotations", a)) : GW_OK;
}

/* A text delta with its tokens' log probabilities beside the delta. */
static int chunk_logprobs(struct oc_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    struct gw_buf suffix;
    gw_buf_init(&suffix, 0);
    int rc = gw_buf_appends(&suffix, "},\"logprobs\":");
    if (rc == GW_OK)
        rc = fc_logprobs_openai_text(&suffix, ev->logprobs, ev->nlogprobs);
    if (rc == GW_OK)
        rc = frame(st, out, "{\"content\":", ev->text, ev->len, suffix.data, NULL);
    gw_buf_free(&suffix);
    return rc;
}

static int stream_event(void *p, const struct canon_event *ev, struct gw_buf *out)
{
    struct oc_stream *st = p;
    char pre[96];
    switch (ev->type) {
    case CANON_EV_START:
        if (on_tier(st, ev->service_tier) != GW_OK)
            return GW_ENOMEM;
        return frame(st, out, "{\"role\":\"assistant\",\"content\":\"\"}", NULL, 0, "", NULL);
    case CANON_EV_CHUNK:
        if (st->cited)
            st->cite_from = st->chars, st->cited = 0;
        st->chars += fc_cite_chars(ev->text, ev->len);
        return ev->nlogprobs ? chunk_logprobs(st, ev, out)
                             : frame(st, out, "{\"content\":", ev->text, ev->len, "}", NULL);
    case CANON_EV_REASONING:
        if (ev->len == 0 || ev->redacted) /* opaque data is not reasoning text */
            return GW_OK;
        return frame(st, out, "{\"reasoning_content\":", ev->text, ev->len, "}", NULL);
    case CANON_EV_TOOL_START:
        return frame_json(st, out,
                          json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index",
                                    ev->index, "id", ev->id, "type", "function", "function", "name",
                                    ev->name, "arguments", ""));
    case CANON_EV_TOOL_DELTA:
        snprintf(pre, sizeof(pre),
                 "{\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", ev->index);
        return frame(st, out, pre, ev->text, ev->len, "}}]}", NULL);
    case CANON_EV_CITATION:
        return stream_citation(st, ev, out);
    case CANON_EV_TOOL_END:
        return GW_OK;
    case CANON_EV_USAGE:
        st->usage = *ev->usage;
        return on_tier(st, ev->service_tier);
    case CANON_EV_DONE: {
        int rc = frame(st, out, "{}", NULL, 0, "", canon_stop_to_openai(ev->stop));
        if (rc == GW_OK && st->include_usage) {
            /* The usage chunk: the same head with an empty choices list. */
            size_t cut = st->head.len - strlen("[{\"index\":0,\"delta\":");
            rc = gw_buf_append(out, "data: ", 6);
            if (rc == GW_OK)
                rc = gw_buf_append(out, st->head.data, cut);
            if (rc == GW_OK)
                rc = gw_buf_appends(out, "[],\"usage\":");
            if (rc == GW_OK)
                rc = fc_openai_usage(out, &st->usage);
            json_t *bill = fc_bill_json(st->ctx.bill);
            if (rc == GW_OK && bill) {
                char *b = json_dumps(bill, JSON_COMPACT);
                rc = b ? gw_buf_printf(out, ",\"llmgw\":%s", b) : GW_ENOMEM;
                free(b);
            }
            json_decref(bill);
            if (rc == GW_OK)
                rc = gw_buf_appends(out, "}\n\n");
        }
        if (rc == GW_OK)
            rc = gw_buf_appends(out, "data: [DONE]\n\n");
        return rc;
    }
    case CANON_EV_ERROR: {
        json_t *e = json_pack("{s:{s:s,s:s,s:s}}", "error", "message",
                              ev->message ? ev->message : "the upstream failed", "type",
                              "api_error", "code", canon_failure_name(ev->failure));
        int rc = fc_sse_json(out, NULL, e);
        if (rc == GW_OK)
            rc = gw_buf_appends(out, "data: [DONE]\n\n");
        return rc;
    }
    }
    return GW_OK;
}

/* ----------------------------------------------------------------- render */

/* The choice's "},"logprobs":..." (null when none came). */
static int render_logprobs(const struct canon_acc *acc, struct gw_buf *out)
{
    if (!acc->logprobs)
        return gw_buf_appends(out, "},\"logprobs\":null");
    json_t *lp = fc_logprobs_openai_json(acc->logprobs);
    char *s = lp ? json_dumps(lp, JSON_COMPACT) : NULL;
    json_decref(lp);
    int rc = s ? gw_buf_appends(out, "},\"logprobs\":") : GW_ENOMEM;
    if (rc == GW_OK)
        rc = gw_buf_appends(out, s);
    free(s);
    return rc;
}

/* ,"annotations":[...] : the answer's URL citations (fc_cite.h). */
static int render_annotations(const struct canon_acc *acc, struct gw_buf *out)
{
    json_t *a = fc_cite_annotations(acc, 0);
    if (!a)
        return GW_ENOMEM;
    int rc = GW_OK;
    if (json_array_size(a)) {
        rc = gw_buf_appends(out, ",\"annotations\":");
        if (rc == GW_OK)
            rc = fc_json_append(out, a, JSON_COMPACT);
        else
            json_decref(a);
    } else {
        json_decref(a);
    }
    return rc;
}

static int render(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out)
{
    /* Written by hand, as the stream frames are: every request pays for it.
     * Every string goes through gw_json_escape. */
    (void)r;
    const char *model = ctx->model ? ctx->model : "";
    int rc = gw_buf_appends(out, "{\"id\":\"chatcmpl-");
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ctx->request_id);
    if (rc == GW_OK)
        rc = gw_buf_printf(
            out, "\",\"object\":\"chat.completion\",\"created\":%lld,\"model\":", ctx->created);
    if (rc == GW_OK)
        rc = gw_json_escape(out, model, strlen(model));
    if (rc == GW_OK && acc->service_tier)
        rc = gw_buf_printf(out, ",\"service_tier\":\"%s\"",
                           fc_tier_served_openai(acc->service_tier));
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                                 "\"content\":");
    if (rc == GW_OK)
        rc = acc->text ? gw_json_escape(out, acc->text->data ? acc->text->data : "", acc->text->len)
                       : gw_buf_appends(out, "null");
    if (rc == GW_OK && acc->reasoning && acc->reasoning->len) {
        rc = gw_buf_appends(out, ",\"reasoning_content\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, acc->reasoning->data, acc->reasoning->len);
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ",\"refusal\":null");
    if (rc == GW_OK && acc->citations)
        rc = render_annotations(acc, out);
    for (size_t i = 0; rc == GW_OK && i < acc->ntools; i++) {
        const struct canon_acc_tool *t = &acc->tools[i];
        rc = gw_buf_appends(out, i ? ",{\"id\":" : ",\"tool_calls\":[{\"id\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, t->id, strlen(t->id));
        if (rc == GW_OK)
            rc = gw_buf_appends(out, ",\"type\":\"function\",\"function\":{\"name\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, t->name, strlen(t->name));
        if (rc == GW_OK)
            rc = gw_buf_appends(out, ",\"arguments\":");
        if (rc == GW_OK)
            rc = gw_json_escape(out, t->args->data ? t->args->data : "", t->args->len);
        if (rc == GW_OK)
            rc = gw_buf_appends(out, i + 1 == acc->ntools ? "}}]" : "}}");
    }
    if (rc == GW_OK)
        rc = render_logprobs(acc, out);
    if (rc == GW_OK)
        rc = gw_buf_printf(
            out, ",\"finish_reason\":\"%s\"}],\"usage\":", canon_stop_to_openai(acc->stop));
    if (rc == GW_OK)
        rc = fc_openai_usage(out, &acc->usage);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "}");
    return rc;
}

const struct dp_facade fc_openai_chat = {
    .name = "openai.chat",
    .wire = "openai.chat",
    .parse = fc_openai_chat_parse,
    .stream_new = stream_new,
    .stream_event = stream_event,
    .stream_free = stream_free,
    .render = render,
    .error_body = fc_openai_error_body,
};
