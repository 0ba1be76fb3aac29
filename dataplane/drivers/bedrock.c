/*
 * The "bedrock" driver: Amazon Bedrock's Converse API, the one request shape
 * Bedrock offers for every chat model it hosts.
 *
 * Upstream request:
 *   POST {base_url}/model/{modelId}/converse          (whole JSON answer)
 *   POST {base_url}/model/{modelId}/converse-stream   (application/vnd.amazon.eventstream)
 * base_url is the regional runtime endpoint, for example
 * "https://bedrock-runtime.us-east-1.amazonaws.com" (a path prefix, for a
 * proxy, is kept and signed). The model id (a base model id, an inference
 * profile id or an ARN) goes into the path percent-encoded once, every byte
 * outside A-Z a-z 0-9 - . _ ~ as %XX ("...-v1:0" → "...-v1%3A0", an ARN's
 * '/' → "%2F"), as the AWS SDKs send it.
 *
 * Authentication, by provider option "auth":
 *   "sigv4" (default)  AWS Signature Version 4, service "bedrock". The
 *                      provider's credential (credential_ref) is
 *                      "ACCESS_KEY_ID:SECRET_ACCESS_KEY" or
 *                      "ACCESS_KEY_ID:SECRET_ACCESS_KEY:SESSION_TOKEN".
 *                      Every request is signed over POST, its path, no
 *                      query, the headers host and content-type, and the
 *                      exact body bytes sent; the Host header is sent
 *                      explicitly with the value signed.
 *   "bearer"           a Bedrock API key: "Authorization: Bearer <credential>".
 * Other options:
 *   region             the signing region; default: read from a base_url host
 *                      of the form bedrock-runtime[-fips].<region>.amazonaws.com[.cn].
 * A provider that cannot sign (no credential, no region, a malformed
 * credential, an unknown auth) fails build_chat with status 500 and code
 * "provider_misconfigured", naming the option.
 *
 * Request body (Converse): messages[{role, content[...]}] with text, image
 * ({format png|jpeg|gif|webp, source.bytes base64}: Bedrock takes bytes, not
 * URLs), document ({format pdf|csv|doc|docx|xls|xlsx|html|txt|md, name
 * from the title or file name cut to Bedrock's characters, source.bytes or
 * source.text, context, citations.enabled}; bytes, not URLs), toolUse,
 * toolResult (status "error" for an error result),
 * reasoningContent (reasoningText with signature, or redactedContent);
 * consecutive messages of one role are merged into one (Converse wants the
 * roles to alternate). system[{text}]. A cache marker on a system block, a
 * message part or a tool becomes a {cachePoint:{type:"default"}} block after
 * it (ttl "1h" for the one-hour tier). inferenceConfig {maxTokens,
 * temperature, topP, stopSequences}. toolConfig {tools[{toolSpec{name,
 * description, inputSchema{json}, strict}}], toolChoice auto|any|tool}.
 * serviceTier {type: default|flex|priority} ("auto" left out, scale and
 * log probabilities refused); requestMetadata {user: safety_identifier,
 * else user}. The served tier is read from serviceTier.type.
 * additionalModelRequestFields carries what Converse has no field for, in
 * the shape Anthropic's models on Bedrock read (other model families may
 * refuse them):
 *   top_k      {"top_k": N}
 *   reasoning  {"thinking": {"type": "enabled", "budget_tokens": N}}, N the
 *              client's budget or, from an effort, minimal 1024, low 2048,
 *              medium 8192, high 24576. Without max_tokens, maxTokens is set
 *              to the budget + 4096, since Anthropic wants it above the
 *              budget and the model's default may not be.
 * The client's user id goes into requestMetadata {"user": ...} (recorded in
 * Bedrock's invocation logs), when it fits the characters Bedrock allows.
 * A json_schema response format becomes outputConfig {textFormat {type
 * json_schema, structure {jsonSchema {schema: the schema as a JSON string,
 * name}}}} (Converse's structured output; the answer is the JSON as text).
 *
 * Refused with a 400 naming the client's field (Converse has no equivalent):
 * seed, presence_penalty, frequency_penalty, a json_object response_format
 * (structured output needs a schema),
 * parallel_tool_calls false, tool_choice none while tools are given, a
 * system message in the middle of the conversation, image and document
 * URLs, other document formats, audio input.
 *
 * Upstream answer, streamed: event-stream messages (common/gw_eventstream.h)
 * whose ":event-type" is messageStart, contentBlockStart (a tool call's id
 * and name), contentBlockDelta (text, toolUse.input pieces, reasoningContent
 * text or signature), contentBlockStop, messageStop (stopReason), then
 * metadata (usage); or ":message-type" exception (throttlingException, ...).
 * Whole: {output.message.content[...], stopReason, usage}. Bedrock gives no
 * response id and no model name: START carries neither. Redacted reasoning
 * (reasoningContent.redactedContent) is passed on whole (REASONING with
 * redacted set). stopReason malformed_model_output / malformed_tool_use
 * end the answer with an ERROR (provider_5xx), not a DONE.
 *
 * Usage: Bedrock's inputTokens counts only the prompt tokens that were
 * neither read from nor written to the cache (the AWS prompt-caching guide:
 * total input = inputTokens + cacheReadInputTokens + cacheWriteInputTokens),
 * which is canon's input as it is. Cache writes are split by TTL from
 * cacheDetails when Bedrock gives it, else counted as 5-minute writes.
 *
 * This file builds the Converse body and the request; the request is
 * signed in bedrock_sign.c, the answer parsed in bedrock_parse.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_bedrock_int.h"
#include "drv_docs.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sigv4.h"

/* Token budgets for reasoning efforts (Anthropic's minimum is 1024). */
#define BUDGET_MINIMAL 1024
#define BUDGET_LOW 2048
#define BUDGET_MEDIUM 8192
#define BUDGET_HIGH 24576
/* Room for the answer above the thinking budget when the client set no
 * max_tokens. */
#define BUDGET_ANSWER_ROOM 4096

/* ------------------------------------------------------------------ build */

static int oom(json_t *a, json_t *b)
{
    json_decref(a);
    json_decref(b);
    return GW_ENOMEM;
}

/* Appends v (stolen) to arr; GW_ENOMEM when v is NULL or the append fails. */
static int push(json_t *arr, json_t *v)
{
    if (!v)
        return GW_ENOMEM;
    return json_array_append_new(arr, v) ? GW_ENOMEM : GW_OK;
}

/* The cachePoint block for a cache marker. */
static json_t *cache_point(enum canon_cache c)
{
    if (c == CANON_CACHE_1H)
        return json_pack("{s:{s:s,s:s}}", "cachePoint", "type", "default", "ttl", "1h");
    return json_pack("{s:{s:s}}", "cachePoint", "type", "default");
}

static const char *image_format(const char *media_type)
{
    static const struct {
        const char *mt, *fmt;
    } map[] = {{"image/png", "png"},
               {"image/jpeg", "jpeg"},
               {"image/jpg", "jpeg"},
               {"image/gif", "gif"},
               {"image/webp", "webp"}};
    for (size_t i = 0; media_type && i < sizeof(map) / sizeof(map[0]); i++)
        if (strcasecmp(media_type, map[i].mt) == 0)
            return map[i].fmt;
    return NULL;
}

static int image_block(const struct canon_req *r, const struct canon_part *p, const char *where,
                       json_t *content, struct canon_err *err)
{
    if (p->url || !p->data) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                      "%s: Bedrock takes images as base64 data only, not by URL; send a data: URL",
                      where);
        return GW_EINVAL;
    }
    const char *fmt = image_format(p->media_type);
    if (!fmt) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                      "%s: Bedrock takes png, jpeg, gif and webp images, not '%.64s'", where,
                      p->media_type ? p->media_type : "");
        return GW_EINVAL;
    }
    return push(content,
                json_pack("{s:{s:s,s:{s:s}}}", "image", "format", fmt, "source", "bytes", p->data));
}

/* A document block: {format, name, source {bytes} or {text}, context,
 * citations}. Converse takes a document's bytes (or an S3 location), not
 * an http(s) URL, and these formats only; name is required (drv_doc_name). */
static int document_block(const struct canon_req *r, const struct canon_part *p, const char *where,
                          json_t *content, struct canon_err *err)
{
    if (p->url)
        return drv_refuse_doc(r, where, p, "bedrock",
                              "Converse takes a document's bytes, not a URL; send it as base64",
                              err);
    const char *fmt = p->text ? "txt" : drv_doc_ext(p->media_type);
    if (!fmt || strcmp(fmt, "json") == 0)
        return drv_refuse_doc(r, where, p, "bedrock",
                              "Converse takes pdf, csv, doc, docx, xls, xlsx, html, txt and md "
                              "documents",
                              err);
    char name[208];
    drv_doc_name(p, name, sizeof(name));
    json_t *src =
        p->text ? json_pack("{s:s}", "text", p->text) : json_pack("{s:s}", "bytes", p->data);
    json_t *d = src ? json_pack("{s:s,s:s,s:o}", "format", fmt, "name", name, "source", src) : NULL;
    if (d && p->context)
        json_object_set_new(d, "context", json_string(p->context));
    if (d && p->citations)
        json_object_set_new(d, "citations", json_pack("{s:b}", "enabled", 1));
    return push(content, d ? json_pack("{s:o}", "document", d) : NULL);
}

static int tool_result_block(const struct canon_req *r, const struct canon_part *p,
                             const char *where, json_t *content, struct canon_err *err)
{
    json_t *c = json_array();
    if (!c)
        return GW_ENOMEM;
    for (size_t k = 0; k < p->ncontent; k++) {
        const struct canon_part *q = &p->content[k];
        int rc = GW_OK;
        if (q->type == CANON_PART_TEXT) {
            /* Bedrock refuses blank text blocks; an empty one says nothing. */
            if (q->text && *q->text)
                rc = push(c, json_pack("{s:s}", "text", q->text));
        } else if (q->type == CANON_PART_IMAGE) {
            rc = image_block(r, q, where, c, err);
        } else {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                          "%s: a tool result to Bedrock holds only text and images", where);
            rc = GW_EINVAL;
        }
        if (rc != GW_OK) {
            json_decref(c);
            return rc;
        }
    }
    json_t *tr = json_pack("{s:s,s:o}", "toolUseId", p->id ? p->id : "", "content", c);
    if (tr && p->is_error && json_object_set_new(tr, "status", json_string("error"))) {
        json_decref(tr);
        return GW_ENOMEM;
    }
    return push(content, tr ? json_pack("{s:o}", "toolResult", tr) : NULL);
}

static int tool_use_block(const struct canon_req *r, const struct canon_part *p, const char *where,
                          json_t *content, struct canon_err *err)
{
    json_t *input = drv_call_args(p, JSON_REJECT_DUPLICATES);
    if (!input) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "invalid_request",
                      "%s: the tool call's arguments must be a JSON object", where);
        return GW_EINVAL;
    }
    return push(content, json_pack("{s:{s:s,s:s,s:o}}", "toolUse", "toolUseId", p->id ? p->id : "",
                                   "name", p->name ? p->name : "", "input", input));
}

/* One canonical part as Converse content block(s), appended to content. */
static int add_part(const struct canon_req *r, const struct canon_part *p, const char *where,
                    json_t *content, struct canon_err *err)
{
    int rc = GW_OK;
    switch (p->type) {
    case CANON_PART_TEXT:
        /* Bedrock refuses blank text blocks; an empty one says nothing. */
        if (p->text && *p->text)
            rc = push(content, json_pack("{s:s}", "text", p->text));
        break;
    case CANON_PART_IMAGE:
        rc = image_block(r, p, where, content, err);
        break;
    case CANON_PART_TOOL_CALL:
        rc = tool_use_block(r, p, where, content, err);
        break;
    case CANON_PART_TOOL_RESULT:
        rc = tool_result_block(r, p, where, content, err);
        break;
    case CANON_PART_THINKING: {
        json_t *rt = json_pack("{s:s}", "text", p->text ? p->text : "");
        if (rt && p->signature && json_object_set_new(rt, "signature", json_string(p->signature))) {
            json_decref(rt);
            return GW_ENOMEM;
        }
        rc = push(content,
                  rt ? json_pack("{s:{s:o}}", "reasoningContent", "reasoningText", rt) : NULL);
        break;
    }
    case CANON_PART_REDACTED_THINKING:
        /* The opaque data as Converse's redactedContent blob (base64 in
         * JSON, as Anthropic's redacted_thinking data is). */
        rc = push(content, json_pack("{s:{s:s}}", "reasoningContent", "redactedContent",
                                     p->text ? p->text : ""));
        break;
    case CANON_PART_DOCUMENT:
        rc = document_block(r, p, where, content, err);
        break;
    case CANON_PART_AUDIO:
        return drv_refuse_doc(r, where, p, "bedrock", "Converse takes no audio input", err);
    }
    if (rc == GW_OK && p->cache != CANON_CACHE_NONE)
        rc = push(content, cache_point(p->cache));
    return rc;
}

static int add_messages(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    json_t *msgs = json_array();
    if (!msgs || json_object_set_new(doc, "messages", msgs))
        return GW_ENOMEM;
    json_t *content = NULL; /* the open Bedrock message's content */
    enum canon_role last = CANON_ROLE_SYSTEM;
    char where[96];
    for (size_t i = 0; i < r->nmessages; i++) {
        const struct canon_message *m = &r->messages[i];
        if (m->role == CANON_ROLE_SYSTEM) {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                          "message %zu: Bedrock takes system text only before the conversation, "
                          "not a system message in the middle of it",
                          i);
            return GW_EINVAL;
        }
        if (!content || m->role != last) {
            content = json_array();
            json_t *msg =
                json_pack("{s:s,s:o}", "role", m->role == CANON_ROLE_USER ? "user" : "assistant",
                          "content", content);
            if (push(msgs, msg) != GW_OK)
                return GW_ENOMEM;
            last = m->role;
        }
        for (size_t j = 0; j < m->nparts; j++) {
            snprintf(where, sizeof(where), "message %zu part %zu", i, j);
            int rc = add_part(r, &m->parts[j], where, content, err);
            if (rc != GW_OK)
                return rc;
        }
    }
    return GW_OK;
}

static int add_system(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    if (!r->nsystem)
        return GW_OK;
    json_t *sys = json_array();
    if (!sys || json_object_set_new(doc, "system", sys))
        return GW_ENOMEM;
    for (size_t i = 0; i < r->nsystem; i++) {
        const struct canon_part *p = &r->system[i];
        if (p->type != CANON_PART_TEXT) {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_SYSTEM), "unsupported_content",
                          "system part %zu: Bedrock takes only text in the system prompt", i);
            return GW_EINVAL;
        }
        if (p->text && *p->text && push(sys, json_pack("{s:s}", "text", p->text)) != GW_OK)
            return GW_ENOMEM;
        if (p->cache != CANON_CACHE_NONE && push(sys, cache_point(p->cache)) != GW_OK)
            return GW_ENOMEM;
    }
    return GW_OK;
}

static int add_tools(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    const char *tc_field = canon_field_name(r, CANON_F_TOOL_CHOICE);
    if (r->parallel_tool_calls == 0) {
        return drv_refuse_parallel_off(r, "Bedrock", "Converse has no switch for it", err);
    }
    if (!r->ntools) {
        /* No tools: "auto" and "none" are what happens anyway. */
        if (r->tool_choice == CANON_TC_REQUIRED || r->tool_choice == CANON_TC_NAMED) {
            canon_err_set(err, 400, tc_field, "invalid_request",
                          "%s requires a tool call, and the request defines no tools", tc_field);
            return GW_EINVAL;
        }
        return GW_OK;
    }
    if (r->tool_choice == CANON_TC_NONE) {
        canon_err_set(err, 400, tc_field, "unsupported_parameter",
                      "%s none is not supported by Bedrock: Converse has no way to offer tools "
                      "and forbid calling them; leave the tools out instead",
                      tc_field);
        return GW_EINVAL;
    }
    json_t *tools = json_array();
    json_t *cfg = json_pack("{s:o}", "tools", tools);
    if (!cfg || json_object_set_new(doc, "toolConfig", cfg))
        return GW_ENOMEM;
    for (size_t i = 0; i < r->ntools; i++) {
        const struct canon_tool *tl = &r->tools[i];
        json_t *schema = tl->parameters ? json_incref(tl->parameters)
                                        : json_pack("{s:s,s:{}}", "type", "object", "properties");
        json_t *spec = json_pack("{s:s,s:{s:o}}", "name", tl->name, "inputSchema", "json", schema);
        if (!spec)
            return GW_ENOMEM;
        /* Bedrock wants a description of at least one character, or none. */
        if (tl->description && *tl->description &&
            json_object_set_new(spec, "description", json_string(tl->description)))
            return oom(spec, NULL);
        if (tl->strict >= 0 && json_object_set_new(spec, "strict", json_boolean(tl->strict)))
            return oom(spec, NULL);
        if (push(tools, json_pack("{s:o}", "toolSpec", spec)) != GW_OK)
            return GW_ENOMEM;
        if (tl->cache != CANON_CACHE_NONE && push(tools, cache_point(tl->cache)) != GW_OK)
            return GW_ENOMEM;
    }
    json_t *choice = NULL;
    switch (r->tool_choice) {
    case CANON_TC_AUTO:
        choice = json_pack("{s:{}}", "auto");
        break;
    case CANON_TC_REQUIRED:
        choice = json_pack("{s:{}}", "any");
        break;
    case CANON_TC_NAMED:
        choice =
            json_pack("{s:{s:s}}", "tool", "name", r->tool_choice_name ? r->tool_choice_name : "");
        break;
    case CANON_TC_UNSET:
    case CANON_TC_NONE:
        return GW_OK;
    }
    if (!choice || json_object_set_new(cfg, "toolChoice", choice))
        return GW_ENOMEM;
    return GW_OK;
}

static long long budget_of(const struct canon_req *r)
{
    static const struct drv_budgets budgets = {.minimal = BUDGET_MINIMAL,
                                               .low = BUDGET_LOW,
                                               .medium = BUDGET_MEDIUM,
                                               .high = BUDGET_HIGH,
                                               .other = BUDGET_MEDIUM};
    if (r->reasoning_off)
        return 0;
    if (r->reasoning_budget > 0)
        return r->reasoning_budget;
    return drv_effort_budget(r->reasoning_effort, &budgets);
}

static int add_inference(const struct canon_req *r, json_t *doc)
{
    json_t *ic = json_object();
    if (!ic)
        return GW_ENOMEM;
    long long budget = budget_of(r);
    int rc = 0;
    if (r->has_max_tokens)
        rc |= json_object_set_new(ic, "maxTokens", json_integer(r->max_tokens));
    else if (budget)
        rc |= json_object_set_new(ic, "maxTokens", json_integer(budget + BUDGET_ANSWER_ROOM));
    static const struct drv_param params[] = {
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "topP"},
        {CANON_F_STOP, "stopSequences"},
    };
    rc |= drv_params(ic, r, params, DRV_NPARAMS(params));
    if (rc)
        return oom(ic, NULL);
    if (json_object_size(ic) == 0) {
        json_decref(ic);
    } else if (json_object_set_new(doc, "inferenceConfig", ic)) {
        return GW_ENOMEM;
    }

    json_t *extra = json_object();
    if (!extra)
        return GW_ENOMEM;
    if (r->has_top_k)
        rc |= json_object_set_new(extra, "top_k", json_integer(r->top_k));
    if (budget)
        rc |= json_object_set_new(
            extra, "thinking",
            json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens", (json_int_t)budget));
    if (rc)
        return oom(extra, NULL);
    if (json_object_size(extra) == 0) {
        json_decref(extra);
        return GW_OK;
    }
    return json_object_set_new(doc, "additionalModelRequestFields", extra) ? GW_ENOMEM : GW_OK;
}

/* Bedrock's requestMetadata values: [a-zA-Z0-9\s:_@$#=/+,-.]{0,256}. */
static int metadata_ok(const char *s)
{
    size_t n = 0;
    for (; *s; s++, n++) {
        unsigned char c = (unsigned char)*s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              strchr(" \t\n\r\f\v:_@$#=/+,-.", c)))
            return 0;
    }
    return n <= 256;
}

/* What Converse has no field for is refused, never dropped. */
static int refuse_unsupported(const struct canon_req *r, struct canon_err *err)
{
    enum canon_field f = CANON_F_COUNT;
    if (r->has_seed)
        f = CANON_F_SEED;
    else if (r->has_presence_penalty)
        f = CANON_F_PRESENCE_PENALTY;
    else if (r->has_frequency_penalty)
        f = CANON_F_FREQUENCY_PENALTY;
    if (f != CANON_F_COUNT) {
        canon_err_set(err, 400, canon_field_name(r, f), "unsupported_parameter",
                      "%s is not supported by Bedrock's Converse API", canon_field_name(r, f));
        return GW_EINVAL;
    }
    if (r->format == CANON_FMT_JSON_OBJECT) {
        const char *fn = canon_field_name(r, CANON_F_RESPONSE_FORMAT);
        canon_err_set(err, 400, fn, "unsupported_parameter",
                      "%s: the bedrock driver has JSON output only with a schema (json_schema); "
                      "Converse has no schema-less JSON mode",
                      fn);
        return GW_EINVAL;
    }
    if (drv_end_user(r) && !metadata_ok(drv_end_user(r))) {
        const char *fn = canon_field_name(r, CANON_F_USER);
        canon_err_set(err, 400, fn, "invalid_request",
                      "%s goes to Bedrock's requestMetadata, which takes at most 256 of the "
                      "characters A-Z a-z 0-9, whitespace and :_@$#=/+,-.",
                      fn);
        return GW_EINVAL;
    }
    return GW_OK;
}

/* serviceTier {type: default, priority, flex} ("auto": Bedrock's own
 * default, left out); no log probabilities. */
static int tier_and_logprobs(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    static const struct drv_tier_map tiers = {
        {"", "default", "flex", "priority", NULL},
        "Bedrock's tiers are default, priority and flex (reserved is capacity bought ahead); "
        "OpenAI's Scale Tier has no counterpart"};
    const char *tier;
    if (drv_tier_word(r, "bedrock", &tiers, &tier, err) != GW_OK)
        return GW_EINVAL;
    if (tier && json_object_set_new(doc, "serviceTier", json_pack("{s:s}", "type", tier)))
        return GW_ENOMEM;
    return drv_refuse_logprobs(r, "bedrock", "the Converse API gives no log probabilities", err);
}

/* A json_schema response format as Converse's structured output:
 * outputConfig.textFormat, the schema as a JSON string. */
static int add_output_config(const struct canon_req *r, json_t *doc)
{
    if (r->format != CANON_FMT_JSON_SCHEMA || !r->format_schema)
        return GW_OK;
    char *schema = json_dumps(r->format_schema, JSON_COMPACT);
    json_t *oc = schema ? json_pack("{s:{s:s,s:{s:{s:s,s:s}}}}", "textFormat", "type",
                                    "json_schema", "structure", "jsonSchema", "schema", schema,
                                    "name", r->format_name ? r->format_name : "response")
                        : NULL;
    free(schema);
    return oc && json_object_set_new(doc, "outputConfig", oc) == 0 ? GW_OK : GW_ENOMEM;
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    int rc = refuse_unsupported(r, err);
    if (rc != GW_OK)
        return rc;
    json_t *doc = json_object();
    if (!doc)
        return GW_ENOMEM;
    rc = add_system(r, doc, err);
    if (rc == GW_OK)
        rc = add_messages(r, doc, err);
    if (rc == GW_OK)
        rc = add_tools(r, doc, err);
    if (rc == GW_OK)
        rc = add_inference(r, doc);
    if (rc == GW_OK)
        rc = add_output_config(r, doc);
    if (rc == GW_OK && drv_end_user(r) &&
        json_object_set_new(doc, "requestMetadata", json_pack("{s:s}", "user", drv_end_user(r))))
        rc = GW_ENOMEM;
    if (rc == GW_OK)
        rc = tier_and_logprobs(r, doc, err);
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }

    const char *auth = drv_opt_str(t, "auth", "sigv4");
    int bearer = strcmp(auth, "bearer") == 0;
    if (!bearer && strcmp(auth, "sigv4") != 0) {
        json_decref(doc);
        return drv_bedrock_misconfigured(t, err, "option 'auth' must be \"sigv4\" or \"bearer\"");
    }
    const char *host, *prefix;
    size_t hostlen;
    if (drv_bedrock_split_base(t->provider->base_url, &host, &hostlen, &prefix) != GW_OK) {
        json_decref(doc);
        return drv_bedrock_misconfigured(t, err,
                                         "base_url must be http(s)://host[/path], without a query");
    }

    /* The body first: the signature covers these exact bytes. */
    if (drv_body_json(out, doc) != GW_OK)
        return GW_ENOMEM;
    /* The path as it goes on the wire, and the URL. */
    struct gw_buf path;
    gw_buf_init(&path, 0);
    rc = gw_buf_printf(&path, "%s/model/", prefix);
    if (rc == GW_OK)
        rc = gw_pct_encode(&path, t->model, strlen(t->model), 0);
    if (rc == GW_OK)
        rc = gw_buf_appends(&path, r->stream ? "/converse-stream" : "/converse");
    char *hostz = rc == GW_OK ? strndup(host, hostlen) : NULL;
    if (rc == GW_OK && hostz) {
        size_t n = (size_t)(prefix - t->provider->base_url) + path.len + 1;
        out->url = malloc(n);
        if (out->url)
            snprintf(out->url, n, "%.*s%s", (int)(prefix - t->provider->base_url),
                     t->provider->base_url, path.data);
    }
    out->stream = r->stream;
    if (rc != GW_OK || !hostz || !out->url || drv_common_headers(out, t) != GW_OK ||
        drv_bedrock_add_header(out, "Host", "", hostz) != GW_OK ||
        drv_bedrock_add_header(out, "Accept", "",
                               r->stream ? "application/vnd.amazon.eventstream"
                                         : "application/json") != GW_OK) {
        rc = GW_ENOMEM;
    } else if (bearer) {
        const char *cred = t->provider->credential;
        if (!cred || !*cred)
            rc = drv_bedrock_misconfigured(
                t, err, "option auth \"bearer\" needs a credential (an API key)");
        else
            rc = drv_bedrock_add_header(out, "Authorization", "Bearer ", cred);
    } else {
        rc = drv_bedrock_sign_request(t, hostz, path.data, out, err);
    }
    free(hostz);
    gw_buf_free(&path);
    return rc;
}

const struct dp_driver drv_bedrock = {
    .info = &dp_driver_catalog[DRV_ID_BEDROCK],
    .build_chat = build_chat,
    .parser_new = drv_bedrock_parser_new,
    .parse = drv_bedrock_parse,
    .finish = drv_bedrock_finish,
    .parser_free = drv_bedrock_parser_free,
    .classify = drv_bedrock_classify,
};
