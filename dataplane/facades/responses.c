/*
 * The OpenAI Responses facade: POST /v1/responses, stateless.
 *
 * Accepted: model, input (a string, or an array of items: messages with
 * role user/assistant/system/developer and content as a string or parts
 * input_text, input_image, input_file (user: file_data as a base64 data:
 * URL with filename, or file_url), output_text and refusal (assistant);
 * function_call; function_call_output; reasoning), instructions, tools
 * (flat {type:"function", name, description, parameters, strict}),
 * tool_choice, parallel_tool_calls, temperature, top_p, max_output_tokens,
 * stream, text.format (text, json_object, json_schema), reasoning.effort and
 * reasoning.summary "auto", user, safety_identifier (the end-user id, the
 * successor of user), service_tier, top_logprobs, truncation "disabled",
 * store false, background false, and include
 * ["reasoning.encrypted_content", "message.output_text.logprobs"]. The
 * response object says the tier that served (service_tier) when the
 * provider did; output_text parts carry the tokens' logprobs when asked.
 *
 * The gateway stores nothing, so everything that needs server-side state is
 * refused with a message saying so: store true, previous_response_id,
 * conversation, prompt, background true, item_reference items and other
 * include values, file_id references. Other tool types (web_search,
 * file_search, ...) and anything else unknown are refused with a 400 naming the field:
 * nothing the client asked for is dropped.
 *
 * Consecutive assistant-side items (assistant messages, function_call and
 * reasoning items) become one canonical assistant message, consecutive
 * function_call_output items one user message of tool results: that is how
 * a turn's output, echoed back as input, reads in every other format.
 *
 * Reasoning. A REASONING event stream becomes a "reasoning" output item
 * whose text is streamed as a summary part (response.reasoning_summary_*
 * events): every Responses SDK version that streams understands those,
 * while the newer reasoning_text events are not known to older ones. A
 * block signature (Anthropic's, or OpenAI's own encrypted reasoning) rides
 * in the item's encrypted_content, so a client that echoes its output back
 * as input returns the reasoning with it; an input reasoning item becomes a
 * THINKING part (its reasoning_text content, else its summary texts joined
 * by blank lines, with encrypted_content as the signature) or, when it has
 * only encrypted_content, a REDACTED_THINKING part.
 *
 * Streams: response.created, response.in_progress, then per output item
 * response.output_item.added ... response.output_item.done with the
 * content_part / output_text / reasoning_summary / function_call_arguments
 * events between, and response.completed (response.incomplete when the
 * output limit or the content filter ended it). Every frame is
 * "event: <type>" plus data carrying the same type and a sequence_number
 * from 0. An error after the answer started ends the stream with
 * response.failed, whose response has status "failed" and error {code,
 * message}; this is the event the official SDKs fold into the response
 * snapshot (stream.finalResponse() resolves with that failed response).
 *
 * This file holds what both answers are made of (the response object and
 * its output items), the whole-body render and the facade's table; the
 * request is parsed in responses_parse.c, streams are encoded in
 * responses_stream.c.
 */
#include <stdio.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_cite.h"
#include "fc_responses_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"

/* ------------------------------------------------------ the response object */

/* A JSON string of n bytes; invalid UTF-8 becomes U+FFFD rather than
 * failing (jansson refuses it). NULL only when out of memory. */
json_t *fc_responses_jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j)
        return j;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    if (gw_json_escape(&b, s, n) == GW_OK)
        j = json_loadb(b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    gw_buf_free(&b);
    return j;
}

static json_t *num_or_null(int has, double v)
{
    return has ? json_real(v) : json_null();
}

static json_t *copy_or(const json_t *body, const char *key, json_t *def)
{
    json_t *v = fc_get(body, key);
    if (v) {
        json_decref(def);
        return json_deep_copy(v);
    }
    return def;
}

/* The request settings every response object repeats (what the API echoes
 * back: the client's own values, null where it sent none). */
json_t *fc_responses_echo_of(const struct canon_req *r)
{
    const json_t *b = r->body;
    json_t *e = json_object();
    if (!e)
        return NULL;
    json_t *rs = json_pack("{s:o,s:o}", "effort",
                           r->reasoning_effort ? json_string(r->reasoning_effort)
                           : r->reasoning_off  ? json_string("none")
                                               : json_null(),
                           "summary", copy_or(fc_get(b, "reasoning"), "summary", json_null()));
    json_t *tx = fc_get(fc_get(b, "text"), "format")
                     ? json_pack("{s:O}", "format", fc_get(fc_get(b, "text"), "format"))
                     : json_pack("{s:{s:s}}", "format", "type", "text");
    json_object_set_new(e, "instructions", copy_or(b, "instructions", json_null()));
    json_object_set_new(e, "max_output_tokens",
                        r->has_max_tokens ? json_integer(r->max_tokens) : json_null());
    json_object_set_new(e, "parallel_tool_calls", json_boolean(r->parallel_tool_calls != 0));
    json_object_set_new(e, "previous_response_id", json_null());
    json_object_set_new(e, "reasoning", rs);
    json_object_set_new(e, "store", json_false());
    json_object_set_new(e, "temperature", num_or_null(r->has_temperature, r->temperature));
    json_object_set_new(e, "text", tx);
    json_object_set_new(e, "tool_choice", copy_or(b, "tool_choice", json_string("auto")));
    json_object_set_new(e, "tools", copy_or(b, "tools", json_array()));
    json_object_set_new(e, "top_p", num_or_null(r->has_top_p, r->top_p));
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "user", r->user ? json_string(r->user) : json_null());
    if (fc_get(b, "safety_identifier"))
        json_object_set_new(e, "safety_identifier", copy_or(b, "safety_identifier", NULL));
    json_object_set_new(e, "metadata", json_object());
    return e;
}

static json_t *usage_of(const struct canon_usage *u)
{
    if (!u->have)
        return json_null();
    int64_t in = canon_usage_prompt(u);
    return json_pack("{s:I,s:{s:I,s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)in,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cache_read,
                     "cache_write_tokens", (json_int_t)(u->cache_write_5m + u->cache_write_1h),
                     "output_tokens", (json_int_t)u->output, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)u->reasoning, "total_tokens",
                     (json_int_t)(in + u->output));
}

/* The response object. output is stolen; usage NULL renders null. */
json_t *fc_responses_response_of(const char *id, long long created, const char *model,
                                 const json_t *echo, const char *status, json_t *output,
                                 const struct canon_usage *u, const char *incomplete,
                                 const char *err_code, const char *err_msg)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "response", "created_at",
                          (json_int_t)created, "status", status);
    if (!o || !output) {
        json_decref(o);
        json_decref(output);
        return NULL;
    }
    json_object_set_new(o, "error",
                        err_code ? json_pack("{s:s,s:o}", "code", err_code, "message",
                                             fc_responses_jstr(err_msg, strlen(err_msg)))
                                 : json_null());
    json_object_set_new(o, "incomplete_details",
                        incomplete ? json_pack("{s:s}", "reason", incomplete) : json_null());
    json_object_set_new(o, "model", json_string(model ? model : ""));
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "usage", u ? usage_of(u) : json_null());
    json_object_update_missing(o, (json_t *)echo);
    return o;
}

/* Why an answer stopped short, as incomplete_details.reason; NULL when it
 * completed. */
const char *fc_responses_incomplete_reason(enum canon_stop s)
{
    if (s == CANON_STOP_MAX_TOKENS)
        return "max_output_tokens";
    if (s == CANON_STOP_CONTENT_FILTER)
        return "content_filter";
    return NULL;
}

/* ------------------------------------------------------------ output items */

json_t *fc_responses_message_item(const char *id, const char *status, const char *text, size_t len,
                                  int with_content)
{
    json_t *content = json_array();
    if (with_content && content)
        json_array_append_new(content,
                              json_pack("{s:s,s:[],s:[],s:o}", "type", "output_text", "annotations",
                                        "logprobs", "text", fc_responses_jstr(text, len)));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

void fc_responses_set_logprobs(json_t *item, json_t *lp)
{
    json_t *part = json_array_get(json_object_get(item, "content"), 0);
    if (part && lp)
        json_object_set_new(part, "logprobs", lp);
    else
        json_decref(lp);
}

json_t *fc_responses_reasoning_item(const char *id, const char *text, size_t len, int with_summary,
                                    const char *sig)
{
    json_t *summary = json_array();
    if (with_summary && summary)
        json_array_append_new(summary, json_pack("{s:s,s:o}", "type", "summary_text", "text",
                                                 fc_responses_jstr(text, len)));
    json_t *it = json_pack("{s:s,s:s,s:o}", "id", id, "type", "reasoning", "summary", summary);
    if (it && sig)
        json_object_set_new(it, "encrypted_content", json_string(sig));
    return it;
}

json_t *fc_responses_call_item(const char *id, const char *status, const char *call_id,
                               const char *name, const char *args, size_t len)
{
    return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "id", id, "type", "function_call", "status",
                     status, "arguments", fc_responses_jstr(args, len), "call_id", call_id, "name",
                     name);
}

/* ----------------------------------------------------------------- render */

static int render(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out)
{
    const char *why = fc_responses_incomplete_reason(acc->stop);
    const char *rid = ctx->request_id;
    json_t *output = json_array();
    json_t *echo = fc_responses_echo_of(r);
    char id[224];
    if (!output || !echo) {
        json_decref(output);
        json_decref(echo);
        return GW_ENOMEM;
    }
    /* One reasoning item per block, each with its own signature (as the
     * stream does); redacted blocks carry no readable text and are not
     * shown. */
    for (size_t i = 0; i < acc->nthinks; i++) {
        const struct canon_acc_think *t = &acc->thinks[i];
        if (t->redacted)
            continue;
        size_t len = t->text ? t->text->len : 0;
        snprintf(id, sizeof(id), "rs_%s_%zu", rid, json_array_size(output));
        json_array_append_new(
            output, fc_responses_reasoning_item(id, t->text && t->text->data ? t->text->data : "",
                                                len, len > 0, t->signature));
    }
    if (acc->nthinks == 0 && (acc->reasoning || acc->signature)) {
        snprintf(id, sizeof(id), "rs_%s_%zu", rid, json_array_size(output));
        size_t len = acc->reasoning ? acc->reasoning->len : 0;
        json_array_append_new(
            output, fc_responses_reasoning_item(id, acc->reasoning ? acc->reasoning->data : "", len,
                                                len > 0, acc->signature));
    }
    if (acc->text && acc->text->len) {
        snprintf(id, sizeof(id), "msg_%s_%zu", rid, json_array_size(output));
        json_t *item = fc_responses_message_item(id, why ? "incomplete" : "completed",
                                                 acc->text->data, acc->text->len, 1);
        fc_responses_set_logprobs(item, fc_logprobs_responses_json(acc->logprobs));
        /* URL citations as output_text annotations (fc_cite.h). */
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        if (part && acc->citations)
            json_object_set_new(part, "annotations", fc_cite_annotations(acc, 1));
        json_array_append_new(output, item);
    }
    for (size_t i = 0; i < acc->ntools; i++) {
        const struct canon_acc_tool *t = &acc->tools[i];
        snprintf(id, sizeof(id), "fc_%s_%zu", rid, json_array_size(output));
        json_array_append_new(output, fc_responses_call_item(id, "completed", t->id, t->name,
                                                             t->args->data ? t->args->data : "",
                                                             t->args->len));
    }
    char rsid[200];
    snprintf(rsid, sizeof(rsid), "resp_%s", rid);
    json_t *doc = fc_responses_response_of(rsid, ctx->created, ctx->model, echo,
                                           why ? "incomplete" : "completed", output, &acc->usage,
                                           why, NULL, NULL);
    json_decref(echo);
    if (doc && acc->service_tier)
        json_object_set_new(doc, "service_tier",
                            json_string(fc_tier_served_openai(acc->service_tier)));
    return fc_json_append(out, doc, DUMP_FLAGS);
}

const struct dp_facade fc_responses = {
    .name = "openai.responses",
    .parse = fc_responses_parse,
    .stream_new = fc_responses_stream_new,
    .stream_event = fc_responses_stream_event,
    .stream_free = fc_responses_stream_free,
    .render = render,
    .error_body = fc_openai_error_body,
};
