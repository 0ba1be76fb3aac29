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
 * URLs), toolUse, toolResult (status "error" for an error result),
 * reasoningContent (reasoningText with signature, or redactedContent);
 * consecutive messages of one role are merged into one (Converse wants the
 * roles to alternate). system[{text}]. A cache marker on a system block, a
 * message part or a tool becomes a {cachePoint:{type:"default"}} block after
 * it (ttl "1h" for the one-hour tier). inferenceConfig {maxTokens,
 * temperature, topP, stopSequences}. toolConfig {tools[{toolSpec{name,
 * description, inputSchema{json}, strict}}], toolChoice auto|any|tool}.
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
 *
 * Refused with a 400 naming the client's field (Converse has no equivalent):
 * seed, presence_penalty, frequency_penalty, a JSON response_format,
 * parallel_tool_calls false, tool_choice none while tools are given, a
 * system message in the middle of the conversation, image URLs.
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
 */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_eventstream.h"
#include "gw_json.h"
#include "gw_sigv4.h"
#include "gw_str.h"

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
        canon_err_set(err, 400, canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS),
                      "unsupported_parameter",
                      "%s false is not supported by Bedrock: Converse cannot forbid parallel "
                      "tool calls",
                      canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS));
        return GW_EINVAL;
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
    if (r->format == CANON_FMT_JSON_OBJECT || r->format == CANON_FMT_JSON_SCHEMA) {
        const char *fn = canon_field_name(r, CANON_F_RESPONSE_FORMAT);
        canon_err_set(err, 400, fn, "unsupported_parameter",
                      "%s: the bedrock driver has no JSON mode; only text answers", fn);
        return GW_EINVAL;
    }
    if (r->user && !metadata_ok(r->user)) {
        const char *fn = canon_field_name(r, CANON_F_USER);
        canon_err_set(err, 400, fn, "invalid_request",
                      "%s goes to Bedrock's requestMetadata, which takes at most 256 of the "
                      "characters A-Z a-z 0-9, whitespace and :_@$#=/+,-.",
                      fn);
        return GW_EINVAL;
    }
    return GW_OK;
}

static int misconfigured(const struct drv_target *t, struct canon_err *err, const char *what)
{
    canon_err_set(err, 500, NULL, "provider_misconfigured", "provider '%s' (driver bedrock): %s",
                  t->provider->name, what);
    return GW_EINVAL;
}

/* The host ("name[:port]") and the path prefix of base_url. */
static int split_base(const char *base, const char **host, size_t *hostlen, const char **prefix)
{
    const char *u = base;
    if (strncmp(u, "https://", 8) == 0)
        u += 8;
    else if (strncmp(u, "http://", 7) == 0)
        u += 7;
    else
        return GW_EINVAL;
    if (strpbrk(u, "?#"))
        return GW_EINVAL;
    const char *end = u + strcspn(u, "/");
    const char *at = NULL;
    for (const char *c = u; c < end; c++)
        if (*c == '@')
            at = c;
    if (at)
        u = at + 1;
    if (end == u)
        return GW_EINVAL;
    *host = u;
    *hostlen = (size_t)(end - u);
    *prefix = end;
    return GW_OK;
}

/* The region from a bedrock-runtime[-fips].<region>.amazonaws.com[.cn]
 * host; 0 and region filled, or GW_ENOTFOUND. */
static int region_from_host(const char *host, size_t n, char *region, size_t cap)
{
    const char *colon = memchr(host, ':', n);
    if (colon)
        n = (size_t)(colon - host);
    const char *p = host, *end = host + n;
    while (p < end) {
        const char *dot = memchr(p, '.', (size_t)(end - p));
        if (!dot)
            break;
        size_t l = (size_t)(dot - p);
        if ((l == 15 && strncmp(p, "bedrock-runtime", 15) == 0) ||
            (l == 20 && strncmp(p, "bedrock-runtime-fips", 20) == 0)) {
            const char *r = dot + 1;
            const char *rd = memchr(r, '.', (size_t)(end - r));
            if (!rd || rd == r || (size_t)(rd - r) >= cap)
                return GW_ENOTFOUND;
            const char *rest = rd + 1;
            size_t rl = (size_t)(end - rest);
            /* amazonaws.com, amazonaws.com.cn, vpce.amazonaws.com, ... */
            if (!(rl >= 13 && strncmp(rest, "amazonaws.com", 13) == 0) &&
                !strstr(rest, ".amazonaws.com"))
                return GW_ENOTFOUND;
            for (const char *c = r; c < rd; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-'))
                    return GW_ENOTFOUND;
            memcpy(region, r, (size_t)(rd - r));
            region[rd - r] = '\0';
            return GW_OK;
        }
        p = dot + 1;
    }
    return GW_ENOTFOUND;
}

/* "Name: value" without drv_header's line limit: session tokens and API
 * keys can be long. */
static int add_header(struct drv_request *out, const char *name, const char *prefix,
                      const char *value)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = gw_buf_printf(&b, "%s: %s%s", name, prefix, value);
    if (rc == GW_OK) {
        struct curl_slist *l = curl_slist_append(out->headers, b.data);
        if (l)
            out->headers = l;
        else
            rc = GW_ENOMEM;
    }
    gw_buf_free(&b);
    return rc;
}

/* Signs out (url, body already set) with SigV4 and adds the headers. */
static int sign_request(const struct drv_target *t, const char *host, const char *path,
                        struct drv_request *out, struct canon_err *err)
{
    const char *cred = t->provider->credential;
    if (!cred || !*cred)
        return misconfigured(t, err,
                             "no credential: credential_ref must resolve to "
                             "ACCESS_KEY_ID:SECRET_ACCESS_KEY[:SESSION_TOKEN]");
    char *c = strdup(cred);
    if (!c)
        return GW_ENOMEM;
    char *secret = strchr(c, ':');
    char *token = secret ? strchr(secret + 1, ':') : NULL;
    if (secret)
        *secret++ = '\0';
    if (token)
        *token++ = '\0';
    if (!secret || !*c || !*secret) {
        free(c);
        return misconfigured(t, err,
                             "the credential is not ACCESS_KEY_ID:SECRET_ACCESS_KEY"
                             "[:SESSION_TOKEN]");
    }
    char region[64];
    const char *opt_region = drv_opt_str(t, "region", NULL);
    if (opt_region) {
        size_t n = strlen(opt_region);
        if (n == 0 || n >= sizeof(region) ||
            strspn(opt_region, "abcdefghijklmnopqrstuvwxyz"
                               "0123456789-") != n) {
            free(c);
            return misconfigured(t, err, "option 'region' must be an AWS region such as us-east-1");
        }
        memcpy(region, opt_region, n + 1);
    } else if (region_from_host(host, strlen(host), region, sizeof(region)) != GW_OK) {
        free(c);
        return misconfigured(t, err,
                             "option 'region' is not set and base_url's host is not "
                             "bedrock-runtime.<region>.amazonaws.com");
    }
    struct gw_sigv4_params sp = {.access_key = c,
                                 .secret_key = secret,
                                 .session_token = token,
                                 .region = region,
                                 .service = "bedrock"};
    struct gw_sigv4_header hs[] = {{"host", host}, {"content-type", "application/json"}};
    struct gw_sigv4_result res;
    gw_sigv4_result_init(&res);
    int rc = gw_sigv4_sign(&sp, "POST", path, "", hs, 2, out->body, out->body_len, &res);
    if (rc == GW_EINVAL) {
        rc = misconfigured(t, err,
                           "the request cannot be signed: check the credential's format and "
                           "option 'region'");
    }
    for (size_t i = 0; rc == GW_OK && i < res.nadd; i++)
        rc = add_header(out, res.add[i].name, "", res.add[i].value);
    gw_sigv4_result_free(&res);
    /* The secret does not linger in freed memory. */
    memset(c, 0, strlen(cred));
    free(c);
    return rc;
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
    if (rc == GW_OK && r->user &&
        json_object_set_new(doc, "requestMetadata", json_pack("{s:s}", "user", r->user)))
        rc = GW_ENOMEM;
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }

    const char *auth = drv_opt_str(t, "auth", "sigv4");
    int bearer = strcmp(auth, "bearer") == 0;
    if (!bearer && strcmp(auth, "sigv4") != 0) {
        json_decref(doc);
        return misconfigured(t, err, "option 'auth' must be \"sigv4\" or \"bearer\"");
    }
    const char *host, *prefix;
    size_t hostlen;
    if (split_base(t->provider->base_url, &host, &hostlen, &prefix) != GW_OK) {
        json_decref(doc);
        return misconfigured(t, err, "base_url must be http(s)://host[/path], without a query");
    }

    /* The body first: the signature covers these exact bytes. */
    if (drv_body_json(out, doc) != GW_OK)
        return GW_ENOMEM;
    /* The path as it goes on the wire, and the URL. */
    struct gw_buf path;
    gw_buf_init(&path, 0);
    rc = gw_buf_printf(&path, "%s/model/", prefix);
    if (rc == GW_OK)
        rc = gw_sigv4_uri_encode(&path, t->model, strlen(t->model), 0);
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
        add_header(out, "Host", "", hostz) != GW_OK ||
        add_header(out, "Accept", "",
                   r->stream ? "application/vnd.amazon.eventstream" : "application/json") !=
            GW_OK) {
        rc = GW_ENOMEM;
    } else if (bearer) {
        const char *cred = t->provider->credential;
        if (!cred || !*cred)
            rc = misconfigured(t, err, "option auth \"bearer\" needs a credential (an API key)");
        else
            rc = add_header(out, "Authorization", "Bearer ", cred);
    } else {
        rc = sign_request(t, hostz, path.data, out, err);
    }
    free(hostz);
    gw_buf_free(&path);
    return rc;
}

/* ------------------------------------------------------------------ parse */

struct br_parser {
    struct drv_parser base;
    struct gw_es es;
    struct drv_tools tools;
    int have_stop;
    enum canon_stop stop;
};

static struct drv_parser *parser_new(int stream)
{
    struct br_parser *p = drv_parser_new(sizeof(*p), &drv_bedrock, stream);
    if (!p)
        return NULL;
    gw_es_init(&p->es, DRV_MAX_EVENT);
    return &p->base;
}

static void parser_free(struct drv_parser *bp)
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
static int emit_usage(const json_t *u, const struct canon_sink *s)
{
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
            d1 += n;
        else
            d5 += n;
    }
    cu.input = in;
    cu.output = out;
    cu.cache_read = cr;
    if (d5 + d1 > 0) {
        cu.cache_write_5m = d5;
        cu.cache_write_1h = d1;
    } else {
        cu.cache_write_5m = cw;
    }
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &cu};
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
        if (emit_start(p, s) || emit_usage(json_object_get(doc, "usage"), s))
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

static int parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
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
        emit_usage(json_object_get(doc, "usage"), s))
        return;
    done(p, s);
}

static void finish(struct drv_parser *bp, const struct canon_sink *s)
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
static void classify(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                     size_t msglen)
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

const struct dp_driver drv_bedrock = {
    .name = "bedrock",
    .caps = DRV_CAP_CHAT | DRV_CAP_VISION | DRV_CAP_TOOLS | DRV_CAP_REASONING,
    .build_chat = build_chat,
    .parser_new = parser_new,
    .parse = parse,
    .finish = finish,
    .parser_free = parser_free,
    .classify = classify,
};
