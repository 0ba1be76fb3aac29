/*
 * The "anthropic" driver: Anthropic's Messages API.
 *
 * Provider configuration: base_url is the API root, e.g.
 * "https://api.anthropic.com" (NOT ".../v1", unlike the openai driver);
 * a base_url that already ends in "/v1" is accepted too and not doubled.
 * The upstream request is POST {base_url}/v1/messages with
 *   x-api-key          the provider's credential
 *   anthropic-version  option "anthropic_version" (default "2023-06-01")
 *   anthropic-beta     option "anthropic_beta", only when set
 * Options:
 *   anthropic_version   see above
 *   anthropic_beta      see above (comma-separated beta names)
 *   default_max_tokens  max_tokens when the client gave none (default
 *                       4096): Anthropic requires max_tokens; when thinking
 *                       is on and its budget does not fit below it, the
 *                       default becomes budget + default_max_tokens.
 *
 * Request mapping:
 *   system            array of text blocks, cache_control from cache markers
 *                     ({"type":"ephemeral"} or {"type":"ephemeral","ttl":"1h"})
 *   messages          user: text, image (base64 or url source), document
 *                     (PDF as base64 or url source, text as a text source, a
 *                     text/plain file's bytes decoded to one; title, else
 *                     the file name; context, citations), tool_result
 *                     (tool results first, as Anthropic requires); assistant:
 *                     text, tool_use (input = the parsed arguments object),
 *                     thinking (only with its signature: Anthropic rejects an
 *                     unsigned thinking block, and one without a signature
 *                     came from a provider whose reasoning Anthropic cannot
 *                     verify; it is left out, like the openai driver leaves
 *                     out reasoning), redacted_thinking. Consecutive messages
 *                     of one role are sent as they are (Anthropic merges them).
 *   tools             name, description, input_schema, strict, cache_control
 *   tool_choice       auto / any / tool / none; parallel_tool_calls=0 becomes
 *                     disable_parallel_tool_use
 *   thinking          {type:enabled, budget_tokens} from the reasoning budget,
 *                     or from an effort: minimal and low 2048, medium 8192,
 *                     high 24576 tokens. An effort-derived budget that does not
 *                     fit below the client's max_tokens is cut to
 *                     max_tokens - 1 (as with OpenAI's reasoning models,
 *                     max_tokens then bounds thinking and answer together);
 *                     an explicit budget that does not fit is refused.
 *                     Anthropic's minimum budget is 1024. reasoning_off: no
 *                     thinking member.
 *   output_config     {format: {type: json_schema, schema}} from a json_schema
 *                     response format (structured outputs, GA: no beta
 *                     header); the answer is the JSON as plain text. The
 *                     schema's name and strict flag have no field there.
 *   temperature (0..1), top_p, top_k, stop_sequences, stream,
 *   metadata.user_id (safety_identifier, else user), service_tier ("auto",
 *   "standard_only"; flex, priority and scale refused: drv_tier.h), the
 *   served tier read from usage.service_tier; log probabilities refused
 * Refused (400 naming the client's field): seed, presence_penalty,
 * frequency_penalty, response_format json_object (Anthropic's structured
 * output needs a schema, and a permissive one is not what json_object
 * promises), a system message in the middle of the conversation,
 * temperature above 1, image detail "low" (Anthropic always looks at the
 * whole image; "auto" and "high" are what it does anyway), audio input,
 * documents of other media types.
 *
 * Answer: SSE events (message_start, content_block_start / _delta / _stop,
 * message_delta, message_stop, ping, error) or one "message" JSON body.
 * Usage: input_tokens excludes cache reads and writes, as canon does; cache
 * writes are split by usage.cache_creation.ephemeral_5m/1h_input_tokens when
 * present, else counted as 5-minute writes. Fields a message_delta carries
 * replace the ones message_start gave (they are cumulative).
 * redacted_thinking blocks in an answer are relayed whole (REASONING with
 * redacted set); server-side blocks (server_tool_use, ...) are never asked for
 * and are skipped. A text block's citations (its "citations" in a whole
 * body, citations_delta in a stream) become CITATION events, each the
 * provider's citation object, right after the block's text (a stream's are
 * held until content_block_stop), so a citation's offset is where the text
 * it cites ends.
 *
 * This file builds the upstream request and holds the pass-through; the
 * answer is parsed in anthropic_parse.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_anthropic_int.h"
#include "drv_docs.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sse.h"

#define DEFAULT_VERSION "2023-06-01"
#define DEFAULT_MAX_TOKENS 4096
#define MIN_THINKING_BUDGET 1024

/* ------------------------------------------------------------------ build */

static char *messages_url(const struct drv_target *t)
{
    const char *b = t->provider->base_url;
    size_t n = strlen(b);
    while (n && b[n - 1] == '/')
        n--;
    const char *path = n >= 3 && memcmp(b + n - 3, "/v1", 3) == 0 ? "/messages" : "/v1/messages";
    size_t len = n + strlen(path) + 1;
    char *u = malloc(len);
    if (u)
        snprintf(u, len, "%.*s%s", (int)n, b, path);
    return u;
}

/* A 400 refusal naming the client's field; evaluates to GW_EINVAL. */
#define REFUSE(err, param, ...)                                                                    \
    (canon_err_set((err), 400, (param), "unsupported_parameter", __VA_ARGS__), GW_EINVAL)

/* Adds cache_control to a block when the part carries a cache marker. */
static void set_cache(json_t *block, enum canon_cache c)
{
    if (!block || c == CANON_CACHE_NONE)
        return;
    json_t *cc = c == CANON_CACHE_1H ? json_pack("{s:s,s:s}", "type", "ephemeral", "ttl", "1h")
                                     : json_pack("{s:s}", "type", "ephemeral");
    json_object_set_new(block, "cache_control", cc);
}

static json_t *text_block(const struct canon_part *p)
{
    json_t *b = json_pack("{s:s,s:s}", "type", "text", "text", p->text ? p->text : "");
    set_cache(b, p->cache);
    return b;
}

static json_t *image_block(const struct canon_req *r, const struct canon_part *p, const char *where,
                           struct canon_err *err)
{
    if (p->detail && strcmp(p->detail, "auto") != 0 && strcmp(p->detail, "high") != 0) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_parameter",
                      "%s: image detail '%s' is not supported by Anthropic, which always reads the "
                      "whole image",
                      where, p->detail);
        return NULL;
    }
    json_t *src =
        p->url ? json_pack("{s:s,s:s}", "type", "url", "url", p->url)
               : json_pack("{s:s,s:s,s:s}", "type", "base64", "media_type",
                           p->media_type ? p->media_type : "", "data", p->data ? p->data : "");
    json_t *b = json_pack("{s:s,s:o}", "type", "image", "source", src);
    set_cache(b, p->cache);
    return b;
}

/* A document block: a PDF as base64 or by URL, text as a text source (a
 * text/plain file sent as bytes is decoded to one: Anthropic's base64
 * source takes PDFs only); the title (else the file name), context,
 * citations and cache_control as Anthropic has them. */
static json_t *document_block(const struct canon_req *r, const struct canon_part *p,
                              const char *where, struct canon_err *err)
{
    json_t *src = NULL;
    const char *mt = p->media_type;
    if (p->text) {
        src =
            json_pack("{s:s,s:s,s:s}", "type", "text", "media_type", "text/plain", "data", p->text);
    } else if (p->url) {
        if (mt && strcmp(mt, "application/pdf") != 0) {
            drv_refuse_doc(r, where, p, "anthropic", "it takes PDFs only by URL", err);
            return NULL;
        }
        src = json_pack("{s:s,s:s}", "type", "url", "url", p->url);
    } else if (mt && strcmp(mt, "application/pdf") == 0) {
        src = json_pack("{s:s,s:s,s:s}", "type", "base64", "media_type", mt, "data", p->data);
    } else if (mt && strcmp(mt, "text/plain") == 0) {
        json_t *text = drv_b64_text(p->data);
        if (!text) {
            drv_refuse_doc(r, where, p, "anthropic", "the data is not base64 of UTF-8 text", err);
            return NULL;
        }
        src = json_pack("{s:s,s:s,s:o}", "type", "text", "media_type", "text/plain", "data", text);
    } else {
        drv_refuse_doc(r, where, p, "anthropic",
                       "it takes PDF (application/pdf) and plain text (text/plain) documents", err);
        return NULL;
    }
    json_t *b = src ? json_pack("{s:s,s:o}", "type", "document", "source", src) : NULL;
    const char *title = p->title ? p->title : p->filename;
    if (b && title)
        json_object_set_new(b, "title", json_string(title));
    if (b && p->context)
        json_object_set_new(b, "context", json_string(p->context));
    if (b && p->citations)
        json_object_set_new(b, "citations", json_pack("{s:b}", "enabled", 1));
    set_cache(b, p->cache);
    return b;
}

/* A TEXT or IMAGE part (user content, tool result content). */
static json_t *plain_block(const struct canon_req *r, const struct canon_part *p, const char *where,
                           struct canon_err *err)
{
    if (p->type == CANON_PART_TEXT)
        return text_block(p);
    if (p->type == CANON_PART_IMAGE)
        return image_block(r, p, where, err);
    canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                  "%s: only text and images may appear here", where);
    return NULL;
}

static json_t *tool_result_block(const struct canon_req *r, const struct canon_part *p,
                                 const char *where, struct canon_err *err)
{
    json_t *b = json_pack("{s:s,s:s}", "type", "tool_result", "tool_use_id", p->id ? p->id : "");
    if (!b)
        return NULL;
    if (p->ncontent) {
        json_t *c = json_array();
        json_object_set_new(b, "content", c);
        for (size_t k = 0; c && k < p->ncontent; k++) {
            json_t *x = plain_block(r, &p->content[k], where, err);
            if (!x) {
                json_decref(b);
                return NULL;
            }
            json_array_append_new(c, x);
        }
    }
    if (p->is_error)
        json_object_set_new(b, "is_error", json_true());
    set_cache(b, p->cache);
    return b;
}

static json_t *tool_use_block(const struct canon_req *r, const struct canon_part *p,
                              const char *where, struct canon_err *err)
{
    json_t *input = drv_call_args(p, 0);
    if (!input) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "invalid_request",
                      "%s: the tool call's arguments must be a JSON object", where);
        return NULL;
    }
    json_t *b = json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", p->id ? p->id : "", "name",
                          p->name ? p->name : "", "input", input);
    set_cache(b, p->cache);
    return b;
}

/* One canonical message as Anthropic content blocks (appended to arr).
 * Returns GW_OK, GW_EINVAL (err set) or GW_ENOMEM. */
static int message_blocks(const struct canon_req *r, const struct canon_message *m, size_t mi,
                          json_t *arr, struct canon_err *err)
{
    char where[80];
    /* Tool results first: Anthropic wants them at the head of the turn. */
    for (int pass = 0; pass < 2; pass++) {
        for (size_t j = 0; j < m->nparts; j++) {
            const struct canon_part *p = &m->parts[j];
            int is_result = p->type == CANON_PART_TOOL_RESULT;
            if ((pass == 0) != is_result)
                continue;
            snprintf(where, sizeof(where), "message %zu part %zu", mi, j);
            json_t *b = NULL;
            int user = m->role == CANON_ROLE_USER;
            switch (p->type) {
            case CANON_PART_TEXT:
                b = text_block(p);
                break;
            case CANON_PART_IMAGE:
                if (!user)
                    goto wrong_role;
                b = image_block(r, p, where, err);
                break;
            case CANON_PART_TOOL_RESULT:
                if (!user)
                    goto wrong_role;
                b = tool_result_block(r, p, where, err);
                break;
            case CANON_PART_TOOL_CALL:
                if (user)
                    goto wrong_role;
                b = tool_use_block(r, p, where, err);
                break;
            case CANON_PART_THINKING:
                if (user)
                    goto wrong_role;
                if (!p->signature || !*p->signature)
                    continue; /* see the header comment */
                b = json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                              p->text ? p->text : "", "signature", p->signature);
                break;
            case CANON_PART_REDACTED_THINKING:
                if (user)
                    goto wrong_role;
                b = json_pack("{s:s,s:s}", "type", "redacted_thinking", "data",
                              p->text ? p->text : "");
                break;
            case CANON_PART_DOCUMENT:
                if (!user)
                    goto wrong_role;
                b = document_block(r, p, where, err);
                break;
            case CANON_PART_AUDIO:
                return drv_refuse_doc(r, where, p, "anthropic",
                                      "the Messages API takes no audio input", err);
            }
            if (!b)
                return err->status ? GW_EINVAL : GW_ENOMEM;
            if (json_array_append_new(arr, b))
                return GW_ENOMEM;
            continue;
        wrong_role:
            canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                          "%s: this kind of content cannot appear in a%s message", where,
                          user ? " user" : "n assistant");
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

static json_t *tools_json(const struct canon_req *r)
{
    json_t *tools = json_array();
    for (size_t i = 0; tools && i < r->ntools; i++) {
        const struct canon_tool *tl = &r->tools[i];
        json_t *t = drv_tool_decl(json_pack("{s:s}", "name", tl->name), tl, "input_schema",
                                  DRV_SCHEMA_EMPTY);
        if (!t) {
            json_decref(tools);
            return NULL;
        }
        if (tl->strict == 1)
            json_object_set_new(t, "strict", json_true());
        set_cache(t, tl->cache);
        json_array_append_new(tools, t);
    }
    return tools;
}

static int tool_choice_json(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    const char *type = NULL;
    switch (r->tool_choice) {
    case CANON_TC_UNSET:
        type = r->parallel_tool_calls == 0 ? "auto" : NULL;
        break;
    case CANON_TC_AUTO:
        type = "auto";
        break;
    case CANON_TC_NONE:
        type = "none";
        break;
    case CANON_TC_REQUIRED:
        type = "any";
        break;
    case CANON_TC_NAMED:
        type = "tool";
        break;
    }
    if (!type)
        return GW_OK;
    if (r->ntools == 0) {
        /* Without tools, "auto" and "none" already hold; forcing a call
         * cannot be honored. */
        if (r->tool_choice == CANON_TC_REQUIRED || r->tool_choice == CANON_TC_NAMED)
            return REFUSE(err, canon_field_name(r, CANON_F_TOOL_CHOICE),
                          "'%s' asks for a tool call but the request has no tools",
                          canon_field_name(r, CANON_F_TOOL_CHOICE));
        return GW_OK;
    }
    json_t *tc = json_pack("{s:s}", "type", type);
    if (!tc)
        return GW_ENOMEM;
    if (r->tool_choice == CANON_TC_NAMED)
        json_object_set_new(tc, "name",
                            json_string(r->tool_choice_name ? r->tool_choice_name : ""));
    /* "none" takes no parallel flag: no calls, none in parallel. */
    if (r->parallel_tool_calls == 0 && r->tool_choice != CANON_TC_NONE)
        json_object_set_new(tc, "disable_parallel_tool_use", json_true());
    json_object_set_new(doc, "tool_choice", tc);
    return GW_OK;
}

/* Thinking budgets for the efforts; 0 refuses any other. */
static const struct drv_budgets budgets = {
    .minimal = 2048, .low = 2048, .medium = 8192, .high = 24576, .other = 0};

/* max_tokens and the thinking budget (0: no thinking), made consistent. */
static int budget_and_max(const struct drv_target *t, const struct canon_req *r,
                          long long *max_tokens, long long *budget, struct canon_err *err)
{
    const char *field = canon_field_name(r, CANON_F_REASONING);
    int explicit_budget = r->reasoning_budget > 0;
    *budget = 0;
    if (!r->reasoning_off)
        *budget = explicit_budget ? r->reasoning_budget
                                  : drv_effort_budget(r->reasoning_effort, &budgets);
    if (r->reasoning_effort && !explicit_budget && !r->reasoning_off && *budget == 0)
        return REFUSE(err, field, "'%s' must be minimal, low, medium or high", field);
    long long def = drv_opt_int(t, "default_max_tokens", DEFAULT_MAX_TOKENS);
    if (def < 1)
        def = DEFAULT_MAX_TOKENS;
    if (r->has_max_tokens)
        *max_tokens = r->max_tokens;
    else
        *max_tokens = *budget >= def ? *budget + def : def;
    if (!*budget)
        return GW_OK;
    if (*budget < MIN_THINKING_BUDGET) {
        canon_err_set(err, 400, field, "unsupported_parameter",
                      "'%s': Anthropic's thinking budget must be at least %d tokens (got %lld)",
                      field, MIN_THINKING_BUDGET, *budget);
        return GW_EINVAL;
    }
    /* With interleaved thinking the budget may pass max_tokens. */
    const char *beta = drv_opt_str(t, "anthropic_beta", NULL);
    if (*budget < *max_tokens || (beta && strstr(beta, "interleaved-thinking")))
        return GW_OK;
    if (!explicit_budget && *max_tokens > MIN_THINKING_BUDGET) {
        *budget = *max_tokens - 1;
        return GW_OK;
    }
    canon_err_set(err, 400, field, "unsupported_parameter",
                  "'%s': Anthropic's thinking budget (%lld tokens) must be below %s (%lld) and at "
                  "least %d",
                  field, *budget, canon_field_name(r, CANON_F_MAX_TOKENS), *max_tokens,
                  MIN_THINKING_BUDGET);
    return GW_EINVAL;
}

/* Parameters Anthropic cannot take: refused, never dropped. */
static int check_params(const struct canon_req *r, struct canon_err *err)
{
    static const char fmt[] = "'%s' is not supported by Anthropic";
    if (r->has_seed)
        return REFUSE(err, canon_field_name(r, CANON_F_SEED), fmt,
                      canon_field_name(r, CANON_F_SEED));
    if (r->has_presence_penalty)
        return REFUSE(err, canon_field_name(r, CANON_F_PRESENCE_PENALTY), fmt,
                      canon_field_name(r, CANON_F_PRESENCE_PENALTY));
    if (r->has_frequency_penalty)
        return REFUSE(err, canon_field_name(r, CANON_F_FREQUENCY_PENALTY), fmt,
                      canon_field_name(r, CANON_F_FREQUENCY_PENALTY));
    if (r->format == CANON_FMT_JSON_OBJECT)
        return REFUSE(err, canon_field_name(r, CANON_F_RESPONSE_FORMAT),
                      "'%s': the anthropic driver has JSON output only with a schema "
                      "(json_schema); Anthropic has no schema-less JSON mode",
                      canon_field_name(r, CANON_F_RESPONSE_FORMAT));
    if (r->has_temperature && r->temperature > 1.0)
        return REFUSE(err, canon_field_name(r, CANON_F_TEMPERATURE),
                      "'%s' must be from 0 to 1 for Anthropic",
                      canon_field_name(r, CANON_F_TEMPERATURE));
    for (size_t i = 0; i < r->nmessages; i++)
        if (r->messages[i].role == CANON_ROLE_SYSTEM) {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_parameter",
                          "message %zu: Anthropic takes a system prompt only at the start of the "
                          "conversation, not in the middle of it",
                          i);
            return GW_EINVAL;
        }
    for (size_t i = 0; i < r->nsystem; i++)
        if (r->system[i].type != CANON_PART_TEXT) {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_SYSTEM), "unsupported_content",
                          "'%s': Anthropic's system prompt takes only text",
                          canon_field_name(r, CANON_F_SYSTEM));
            return GW_EINVAL;
        }
    return GW_OK;
}

/* The headers every request to the provider carries; beta: the client's own
 * anthropic-beta (the pass-through), joined to the provider's option. */
static int version_headers(struct drv_request *out, const struct drv_target *t, const char *beta)
{
    if (drv_header(out, "anthropic-version: %s",
                   drv_opt_str(t, "anthropic_version", DEFAULT_VERSION)) != GW_OK)
        return GW_ENOMEM;
    const char *opt = drv_opt_str(t, "anthropic_beta", NULL);
    int o = opt && *opt, c = beta && *beta;
    if ((o || c) && drv_header(out, "anthropic-beta: %s%s%s", o ? opt : "", o && c ? "," : "",
                               c ? beta : "") != GW_OK)
        return GW_ENOMEM;
    return GW_OK;
}

/* service_tier per request is "auto" or "standard_only"; no logprobs. */
static int tier_and_logprobs(const struct canon_req *r, const char **tier, struct canon_err *err)
{
    static const struct drv_tier_map tiers = {
        {"auto", "standard_only", NULL, NULL, NULL},
        "a request to Anthropic chooses only \"auto\" or \"standard_only\"; its Priority Tier "
        "is capacity the organisation commits to buy, which \"auto\" already uses when there is "
        "some, and it has no flex or scale tier"};
    if (drv_tier_word(r, "anthropic", &tiers, tier, err) != GW_OK)
        return GW_EINVAL;
    return drv_refuse_logprobs(r, "anthropic",
                               "Anthropic's Messages API gives no log probabilities", err);
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    long long max_tokens, budget;
    const char *tier = NULL;
    int rc = check_params(r, err);
    if (rc == GW_OK)
        rc = tier_and_logprobs(r, &tier, err);
    if (rc == GW_OK)
        rc = budget_and_max(t, r, &max_tokens, &budget, err);
    if (rc != GW_OK)
        return rc;
    json_t *doc = json_pack("{s:s,s:I}", "model", t->model, "max_tokens", (json_int_t)max_tokens);
    json_t *msgs = json_array();
    if (!doc || !msgs) {
        json_decref(doc);
        json_decref(msgs);
        return GW_ENOMEM;
    }
    if (r->nsystem) {
        json_t *sys = json_array();
        for (size_t i = 0; sys && i < r->nsystem; i++)
            json_array_append_new(sys, text_block(&r->system[i]));
        json_object_set_new(doc, "system", sys);
    }
    json_object_set_new(doc, "messages", msgs);
    for (size_t i = 0; rc == GW_OK && i < r->nmessages; i++) {
        const struct canon_message *m = &r->messages[i];
        json_t *content = json_array();
        if (!content) {
            rc = GW_ENOMEM;
            break;
        }
        rc = message_blocks(r, m, i, content, err);
        if (rc == GW_OK && json_array_size(content))
            rc = json_array_append_new(msgs,
                                       json_pack("{s:s,s:o}", "role",
                                                 m->role == CANON_ROLE_USER ? "user" : "assistant",
                                                 "content", content))
                     ? GW_ENOMEM
                     : GW_OK;
        else
            json_decref(content); /* an assistant turn of unsigned thinking only */
    }
    if (rc == GW_OK && r->ntools) {
        json_t *tools = tools_json(r);
        rc = tools ? json_object_set_new(doc, "tools", tools) : GW_ENOMEM;
    }
    if (rc == GW_OK)
        rc = tool_choice_json(r, doc, err);
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }
    static const struct drv_param params[] = {
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "top_p"},
        {CANON_F_TOP_K, "top_k"},
        {CANON_F_STOP, "stop_sequences"},
    };
    drv_params(doc, r, params, DRV_NPARAMS(params));
    if (budget)
        json_object_set_new(
            doc, "thinking",
            json_pack("{s:s,s:I}", "type", "enabled", "budget_tokens", (json_int_t)budget));
    if (drv_end_user(r))
        json_object_set_new(doc, "metadata", json_pack("{s:s}", "user_id", drv_end_user(r)));
    if (tier)
        json_object_set_new(doc, "service_tier", json_string(tier));
    if (r->format == CANON_FMT_JSON_SCHEMA && r->format_schema)
        json_object_set_new(doc, "output_config",
                            json_pack("{s:{s:s,s:O}}", "format", "type", "json_schema", "schema",
                                      r->format_schema));
    if (r->stream)
        json_object_set_new(doc, "stream", json_true());

    out->stream = r->stream;
    if (drv_json_request(out, t, messages_url(t), doc, "x-api-key: ") != GW_OK)
        return GW_ENOMEM;
    return version_headers(out, t, NULL);
}

/* --------------------------------------------------------- the pass-through */

/*
 * The client's own Messages request, forwarded: every member as written
 * (documents, server tools, context management, MCP servers: the provider
 * is the judge of its own API) but the model, and max_tokens when a
 * worst-case reservation caps it. Usage is always in Anthropic's stream.
 */
static int relay_build(const struct drv_target *t, const char *body, size_t len,
                       const struct drv_relay_edits *ed, struct drv_request *out,
                       struct canon_err *err)
{
    struct gw_buf b[2];
    gw_buf_init(&b[0], 0);
    gw_buf_init(&b[1], 0);
    struct drv_edit e[2];
    size_t ne = 0;
    int rc = gw_json_escape(&b[0], t->model, strlen(t->model));
    if (rc == GW_OK)
        rc = drv_edit_member(body, len, "model", &b[0], e, &ne, err);
    if (rc == GW_OK && ed->max_tokens > 0 &&
        (rc = gw_buf_printf(&b[1], "%lld", ed->max_tokens)) == GW_OK)
        rc = drv_edit_member(body, len, "max_tokens", &b[1], e, &ne, err);
    if (rc == GW_OK)
        rc = drv_edit_body(out, body, len, e, ne);
    gw_buf_free(&b[0]);
    gw_buf_free(&b[1]);
    if (rc != GW_OK)
        return rc == GW_EINVAL ? GW_EINVAL : GW_ENOMEM;
    out->stream = ed->stream;
    out->url = messages_url(t);
    if (!out->url || drv_auth_headers(out, t, "x-api-key: ") != GW_OK)
        return GW_ENOMEM;
    return version_headers(out, t, t->client_beta);
}

static int named(const struct gw_sse_event *ev, const char *name)
{
    return ev->event_len == strlen(name) && memcmp(ev->event, name, ev->event_len) == 0;
}

/* message_delta carries the final usage: it waits for the end, where the
 * gateway's bill joins it; message_stop is the end's to write. */
static int relay_event(const struct gw_sse_event *ev, struct gw_buf *out, struct gw_buf *held)
{
    if (named(ev, "message_stop"))
        return GW_OK;
    if (named(ev, "message_delta")) {
        gw_buf_reset(held);
        return gw_buf_append(held, ev->data, ev->data_len);
    }
    return drv_relay_frame(out, ev);
}

static int relay_end(const struct gw_buf *held, const char *bill_json, int with_usage,
                     struct gw_buf *out)
{
    (void)with_usage; /* always: Anthropic's stream carries usage */
    int rc = held->len ? drv_relay_billed(out, "message_delta", held, bill_json) : GW_OK;
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
    return rc;
}

const struct dp_driver drv_anthropic = {
    .info = &dp_driver_catalog[DRV_ID_ANTHROPIC],
    .relay_build = relay_build,
    .relay_event = relay_event,
    .relay_end = relay_end,
    .build_chat = build_chat,
    .parser_new = drv_anthropic_parser_new,
    .parse = drv_anthropic_parse,
    .finish = drv_anthropic_finish,
    .parser_free = drv_anthropic_parser_free,
    .classify = drv_anthropic_classify,
};
