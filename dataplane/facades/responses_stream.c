/*
 * The Responses facade's stream encoder: canonical events into the
 * response.* SSE events, one output item open at a time (the sequence and
 * the failed-stream shape: responses.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_cite.h"
#include "fc_responses_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

/* Ceiling on the text of one output item kept for its done events. */
#define MAX_ITEM_TEXT (32u << 20)

/* ----------------------------------------------------------------- stream */

enum item_kind { IT_NONE, IT_MESSAGE, IT_REASONING, IT_CALL };

struct rs_stream {
    char *resp_id;
    char *model;
    char *rid; /* request id, for item ids */
    long long created;
    json_t *echo;
    long long seq;
    int started;
    json_t *output; /* finished items */
    struct canon_usage usage;
    const struct fc_bill *bill;
    /* the open item */
    enum item_kind kind;
    int oi; /* its output_index */
    char item_id[224];
    struct gw_buf text; /* message text, reasoning text or call arguments */
    int summary_open;   /* reasoning: the summary part was announced */
    char *call_id, *name, *sig;
    json_t *lp;      /* message: its tokens' logprobs so far, or NULL */
    json_t *lp_next; /* the logprobs of the delta being written, or NULL */
    char *tier;      /* the served tier, once reported */
    /* message: its URL citations as annotations (fc_cite.h), or NULL; the
     * characters of text so far, where the next citation's text starts,
     * and whether a citation came since the last text */
    json_t *annots;
    size_t chars, cite_from;
    int cited;
};

static void clear_item(struct rs_stream *st)
{
    free(st->call_id);
    free(st->name);
    free(st->sig);
    st->call_id = st->name = st->sig = NULL;
    json_decref(st->lp);
    st->lp = NULL;
    json_decref(st->annots);
    st->annots = NULL;
    st->chars = st->cite_from = 0;
    st->cited = 0;
    gw_buf_reset(&st->text);
    st->summary_open = 0;
    st->kind = IT_NONE;
}

void fc_responses_stream_free(void *p)
{
    struct rs_stream *st = p;
    if (!st)
        return;
    clear_item(st);
    gw_buf_free(&st->text);
    free(st->resp_id);
    free(st->rid);
    free(st->model);
    free(st->tier);
    json_decref(st->echo);
    json_decref(st->output);
    free(st);
}

void *fc_responses_stream_new(const struct canon_req *r, const struct fc_ctx *ctx)
{
    struct rs_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    size_t n = strlen(ctx->request_id) + 8;
    st->resp_id = malloc(n);
    if (st->resp_id)
        snprintf(st->resp_id, n, "resp_%s", ctx->request_id);
    st->rid = strdup(ctx->request_id);
    st->model = strdup(ctx->model ? ctx->model : "");
    st->created = ctx->created;
    st->bill = ctx->bill;
    st->echo = fc_responses_echo_of(r);
    st->output = json_array();
    gw_buf_init(&st->text, MAX_ITEM_TEXT);
    if (!st->resp_id || !st->rid || !st->model || !st->echo || !st->output) {
        fc_responses_stream_free(st);
        return NULL;
    }
    return st;
}

/* One frame: "event: <type>" and the document (whose first member is the
 * type) with the next sequence_number. Releases doc. */
static int emit(struct rs_stream *st, struct gw_buf *out, json_t *doc)
{
    if (!doc)
        return GW_ENOMEM;
    char type[64];
    snprintf(type, sizeof(type), "%s", gw_json_str(doc, "type") ? gw_json_str(doc, "type") : "");
    if (json_object_set_new(doc, "sequence_number", json_integer(st->seq++))) {
        json_decref(doc);
        return GW_ENOMEM;
    }
    return fc_sse_dump(out, type, doc, DUMP_FLAGS);
}

static json_t *stream_response(struct rs_stream *st, const char *status, json_t *output,
                               const char *incomplete, const char *code, const char *msg)
{
    json_t *o =
        fc_responses_response_of(st->resp_id, st->created, st->model, st->echo, status, output,
                                 st->usage.have ? &st->usage : NULL, incomplete, code, msg);
    if (o && st->tier)
        json_object_set_new(o, "service_tier", json_string(fc_tier_served_openai(st->tier)));
    return o;
}

/* The open message's logprobs so far (a new array). */
static json_t *lp_copy(const struct rs_stream *st)
{
    return st->lp ? json_deep_copy(st->lp) : json_array();
}

/* The open message's annotations so far (a new array). */
static json_t *annots_copy(const struct rs_stream *st)
{
    return st->annots ? json_deep_copy(st->annots) : json_array();
}

static int start(struct rs_stream *st, struct gw_buf *out)
{
    if (st->started)
        return GW_OK;
    st->started = 1;
    int rc = emit(st, out,
                  json_pack("{s:s,s:o}", "type", "response.created", "response",
                            stream_response(st, "in_progress", json_array(), NULL, NULL, NULL)));
    if (rc == GW_OK)
        rc = emit(st, out,
                  json_pack("{s:s,s:o}", "type", "response.in_progress", "response",
                            stream_response(st, "in_progress", json_array(), NULL, NULL, NULL)));
    return rc;
}

/* The open item as it stands (status for messages and calls). */
static json_t *open_item_json(struct rs_stream *st, const char *status)
{
    switch (st->kind) {
    case IT_MESSAGE: {
        json_t *it = fc_responses_message_item(st->item_id, status, st->text.data, st->text.len, 1);
        fc_responses_set_logprobs(it, st->lp ? json_deep_copy(st->lp) : NULL);
        json_t *part = json_array_get(json_object_get(it, "content"), 0);
        if (part && st->annots)
            json_object_set_new(part, "annotations", annots_copy(st));
        return it;
    }
    case IT_REASONING:
        return fc_responses_reasoning_item(st->item_id, st->text.data, st->text.len,
                                           st->summary_open, st->sig);
    case IT_CALL:
        return fc_responses_call_item(st->item_id, status, st->call_id, st->name, st->text.data,
                                      st->text.len);
    case IT_NONE:
        break;
    }
    return NULL;
}

static int open_item(struct rs_stream *st, struct gw_buf *out, enum item_kind kind,
                     const char *call_id, const char *name)
{
    static const char *const prefix[] = {"", "msg", "rs", "fc"};
    clear_item(st);
    st->kind = kind;
    st->oi = (int)json_array_size(st->output);
    snprintf(st->item_id, sizeof(st->item_id), "%s_%s_%d", prefix[kind], st->rid, st->oi);
    json_t *item;
    if (kind == IT_CALL) {
        st->call_id = strdup(call_id ? call_id : "");
        st->name = strdup(name ? name : "");
        if (!st->call_id || !st->name)
            return GW_ENOMEM;
        item = fc_responses_call_item(st->item_id, "in_progress", st->call_id, st->name, "", 0);
    } else if (kind == IT_MESSAGE) {
        item = fc_responses_message_item(st->item_id, "in_progress", NULL, 0, 0);
    } else {
        item = fc_responses_reasoning_item(st->item_id, NULL, 0, 0, NULL);
    }
    int rc = emit(st, out,
                  json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index",
                            st->oi, "item", item));
    if (rc == GW_OK && kind == IT_MESSAGE)
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:[],s:[],s:s}}", "type",
                            "response.content_part.added", "item_id", st->item_id, "output_index",
                            st->oi, "content_index", 0, "part", "type", "output_text",
                            "annotations", "logprobs", "text", ""));
    return rc;
}

/* Closes the open item: its done events, then it joins the output. */
static int close_item(struct rs_stream *st, struct gw_buf *out, const char *status)
{
    int rc = GW_OK;
    const char *id = st->item_id;
    json_t *text = NULL;
    switch (st->kind) {
    case IT_NONE:
        return GW_OK;
    case IT_MESSAGE:
        text = fc_responses_jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:O,s:o}", "type", "response.output_text.done",
                            "item_id", id, "output_index", st->oi, "content_index", 0, "text", text,
                            "logprobs", lp_copy(st)));
        if (rc == GW_OK)
            rc = emit(st, out,
                      json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:o,s:o,s:O}}", "type",
                                "response.content_part.done", "item_id", id, "output_index", st->oi,
                                "content_index", 0, "part", "type", "output_text", "annotations",
                                annots_copy(st), "logprobs", lp_copy(st), "text", text));
        break;
    case IT_REASONING:
        if (!st->summary_open)
            break;
        text = fc_responses_jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:O}", "type", "response.reasoning_summary_text.done",
                            "item_id", id, "output_index", st->oi, "summary_index", 0, "text",
                            text));
        if (rc == GW_OK)
            rc = emit(st, out,
                      json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:O}}", "type",
                                "response.reasoning_summary_part.done", "item_id", id,
                                "output_index", st->oi, "summary_index", 0, "part", "type",
                                "summary_text", "text", text));
        break;
    case IT_CALL:
        text = fc_responses_jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:O,s:s}", "type",
                            "response.function_call_arguments.done", "item_id", id, "output_index",
                            st->oi, "arguments", text, "name", st->name));
        break;
    }
    json_decref(text);
    json_t *item = rc == GW_OK ? open_item_json(st, status) : NULL;
    if (rc == GW_OK)
        rc = item ? emit(st, out,
                         json_pack("{s:s,s:i,s:O}", "type", "response.output_item.done",
                                   "output_index", st->oi, "item", item))
                  : GW_ENOMEM;
    if (rc == GW_OK && json_array_append(st->output, item))
        rc = GW_ENOMEM;
    json_decref(item);
    clear_item(st);
    return rc;
}

/* A delta event for the open item: {type, item_id, output_index, <index
 * member>: 0, delta}. */
static int delta(struct rs_stream *st, struct gw_buf *out, const char *type, const char *index_key,
                 const char *text, size_t len)
{
    json_t *d = fc_responses_jstr(text, len);
    json_t *doc =
        d ? json_pack("{s:s,s:s,s:i}", "type", type, "item_id", st->item_id, "output_index", st->oi)
          : NULL;
    if (doc && index_key)
        json_object_set_new(doc, index_key, json_integer(0));
    if (doc)
        json_object_set(doc, "delta", d);
    if (doc && strcmp(type, "response.output_text.delta") == 0)
        json_object_set_new(doc, "logprobs", st->lp_next ? st->lp_next : json_array());
    st->lp_next = NULL;
    json_decref(d);
    int rc = emit(st, out, doc);
    if (rc == GW_OK)
        rc = gw_buf_append(&st->text, text, len);
    return rc;
}

/* A CHUNK's logprobs: for its delta event (lp_next) and the message's. */
static int keep_logprobs(struct rs_stream *st, const struct canon_event *ev)
{
    json_t *lp = fc_logprobs_responses_of(ev->logprobs, ev->nlogprobs);
    if (!lp || (!st->lp && !(st->lp = json_array())) || json_array_extend(st->lp, lp)) {
        json_decref(lp);
        return GW_ENOMEM;
    }
    st->lp_next = lp;
    return GW_OK;
}

static int keep_tier(struct rs_stream *st, const char *tier)
{
    if (!tier || (st->tier && strcmp(st->tier, tier) == 0))
        return GW_OK;
    free(st->tier);
    return (st->tier = strdup(tier)) ? GW_OK : GW_ENOMEM;
}

/* A URL citation of the message's text since the last cited passage:
 * response.output_text.annotation.added, and the annotation kept for the
 * part's done events (fc_cite.h; other kinds have no Responses form). */
static int stream_citation(struct rs_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    json_t *c = ev->citation ? json_loads(ev->citation, 0, NULL) : NULL;
    st->cited = 1;
    json_t *a = fc_cite_url_annotation(c, st->cite_from, st->chars, 1);
    json_decref(c);
    if (!a)
        return GW_OK;
    if ((!st->annots && !(st->annots = json_array())) || json_array_append(st->annots, a)) {
        json_decref(a);
        return GW_ENOMEM;
    }
    return emit(st, out,
                json_pack("{s:s,s:s,s:i,s:i,s:I,s:o}", "type",
                          "response.output_text.annotation.added", "item_id", st->item_id,
                          "output_index", st->oi, "content_index", 0, "annotation_index",
                          (json_int_t)json_array_size(st->annots) - 1, "annotation", a));
}

int fc_responses_stream_event(void *p, const struct canon_event *ev, struct gw_buf *out)
{
    struct rs_stream *st = p;
    if ((ev->type == CANON_EV_START || ev->type == CANON_EV_USAGE) &&
        keep_tier(st, ev->service_tier) != GW_OK)
        return GW_ENOMEM;
    int rc = start(st, out);
    if (rc != GW_OK)
        return rc;
    switch (ev->type) {
    case CANON_EV_START:
        return GW_OK;
    case CANON_EV_CHUNK:
        if (st->kind != IT_MESSAGE) {
            if ((rc = close_item(st, out, "completed")) ||
                (rc = open_item(st, out, IT_MESSAGE, NULL, NULL)))
                return rc;
        }
        if (ev->nlogprobs && (rc = keep_logprobs(st, ev)))
            return rc;
        if (st->cited)
            st->cite_from = st->chars, st->cited = 0;
        st->chars += fc_cite_chars(ev->text, ev->len);
        return delta(st, out, "response.output_text.delta", "content_index", ev->text, ev->len);
    case CANON_EV_REASONING:
        if ((ev->len == 0 && !ev->signature) || ev->redacted)
            return GW_OK; /* redacted data is no summary text */
        /* A signature closes its block: what follows is a new item. */
        if (st->kind != IT_REASONING || st->sig) {
            if ((rc = close_item(st, out, "completed")) ||
                (rc = open_item(st, out, IT_REASONING, NULL, NULL)))
                return rc;
        }
        if (ev->len) {
            if (!st->summary_open) {
                st->summary_open = 1;
                rc = emit(st, out,
                          json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:s}}", "type",
                                    "response.reasoning_summary_part.added", "item_id", st->item_id,
                                    "output_index", st->oi, "summary_index", 0, "part", "type",
                                    "summary_text", "text", ""));
                if (rc)
                    return rc;
            }
            if ((rc = delta(st, out, "response.reasoning_summary_text.delta", "summary_index",
                            ev->text, ev->len)))
                return rc;
        }
        if (ev->signature) {
            if (!(st->sig = strdup(ev->signature)))
                return GW_ENOMEM;
            return close_item(st, out, "completed");
        }
        return GW_OK;
    case CANON_EV_TOOL_START:
        if ((rc = close_item(st, out, "completed")))
            return rc;
        return open_item(st, out, IT_CALL, ev->id, ev->name);
    case CANON_EV_TOOL_DELTA:
        if (st->kind != IT_CALL)
            return GW_EINVAL;
        return delta(st, out, "response.function_call_arguments.delta", NULL, ev->text, ev->len);
    case CANON_EV_TOOL_END:
        return st->kind == IT_CALL ? close_item(st, out, "completed") : GW_EINVAL;
    case CANON_EV_USAGE:
        st->usage = *ev->usage;
        return GW_OK;
    case CANON_EV_CITATION:
        return st->kind == IT_MESSAGE ? stream_citation(st, ev, out) : GW_OK;
    case CANON_EV_DONE: {
        const char *why = fc_responses_incomplete_reason(ev->stop);
        if ((rc = close_item(st, out, why ? "incomplete" : "completed")))
            return rc;
        json_t *resp = stream_response(st, why ? "incomplete" : "completed",
                                       json_deep_copy(st->output), why, NULL, NULL);
        const char *type = why ? "response.incomplete" : "response.completed";
        json_t *bill = fc_bill_json(st->bill);
        if (resp && bill)
            json_object_set_new(resp, "llmgw", bill);
        else
            json_decref(bill);
        return emit(st, out, json_pack("{s:s,s:o}", "type", type, "response", resp));
    }
    case CANON_EV_ERROR: {
        /* The items so far, the open one cut short. */
        json_t *output = json_deep_copy(st->output);
        json_t *open = open_item_json(st, "incomplete");
        if (output && open)
            json_array_append(output, open);
        json_decref(open);
        json_t *resp = stream_response(st, "failed", output, NULL, canon_failure_name(ev->failure),
                                       ev->message ? ev->message : "the upstream failed");
        return emit(st, out, json_pack("{s:s,s:o}", "type", "response.failed", "response", resp));
    }
    }
    return GW_OK;
}
