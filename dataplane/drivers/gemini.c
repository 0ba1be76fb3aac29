/*
 * The "gemini" driver: Google's Gemini API (generativelanguage), native
 * format. base_url is the API root with its version, e.g.
 * https://generativelanguage.googleapis.com/v1beta ; the model is the bare
 * id ("gemini-2.5-flash"; a "models/" prefix is accepted and stripped).
 *
 * Upstream request: POST {base}/models/{model}:generateContent, or
 * {base}/models/{model}:streamGenerateContent?alt=sse when the client
 * streams; auth header x-goog-api-key. The canonical request maps to:
 *   system                 systemInstruction{parts[{text}]}
 *   user / assistant       contents[] role "user" / "model"; parts text,
 *                          inlineData{mimeType,data} (base64 images only:
 *                          an image by URL would need the Files API, so it
 *                          is refused), documents and audio as
 *                          inlineData (bytes; a text document as text/plain
 *                          bytes) or fileData{mimeType,fileUri} (by URL;
 *                          the filename is not sent, a title, context or
 *                          citations flag is refused), functionCall{name,
 *                          args} for the assistant's tool calls
 *   tool results           functionResponse{name, response} in a user turn.
 *                          Gemini matches results by function NAME, so the
 *                          result's call id is mapped back to the name of
 *                          the earlier call with that id (refused when none
 *                          has it). response is {"output": text}, or
 *                          {"error": text} for an error result: the keys the
 *                          API reference documents for a function's output
 *                          and its error. Text only (images refused).
 *   a mid-conversation     refused: Gemini has no system turn
 *   system message
 *   thinking from earlier  omitted, as the openai driver does: Gemini keeps
 *   turns                  no reasoning text in history
 *   tools                  tools[{functionDeclarations[{name, description,
 *                          parametersJsonSchema}]}]: parametersJsonSchema
 *                          takes plain JSON Schema, so the client's schema is
 *                          passed whole instead of being cut down to the
 *                          OpenAPI subset "parameters" takes. A tool's
 *                          "strict" has no Gemini switch (the declaration's
 *                          schema is all there is) and is not sent.
 *   tool_choice            toolConfig.functionCallingConfig.mode AUTO, NONE,
 *                          ANY (required), ANY + allowedFunctionNames (named)
 *   parallel_tool_calls    Gemini has no switch: true is what it does anyway,
 *                          false is refused
 *   service tier           serviceTier (standard, flex, priority; scale refused);
 *                          the tier that served is in the answer's
 *                          x-gemini-service-tier header (tier_header)
 *   log probabilities      generationConfig responseLogprobs, logprobs; the
 *                          answer's candidates[0].logprobsResult on CHUNKs
 *   sampling               generationConfig maxOutputTokens, temperature,
 *                          topP, topK, stopSequences, seed, presencePenalty,
 *                          frequencyPenalty
 *   response_format        responseMimeType "text/plain" / "application/json"
 *                          (+ responseJsonSchema, plain JSON Schema)
 *   reasoning              thinkingConfig{thinkingBudget, includeThoughts}:
 *                          effort minimal 512, low 1024, medium 8192, high
 *                          24576 tokens (inside every 2.5 model's range: Pro
 *                          128-32768, Flash 0-24576, Flash-Lite 512-24576); a
 *                          budget is sent as is; "no reasoning" is budget 0
 *                          (models that cannot stop thinking answer 400)
 *   user                   Gemini has no end-user field; it is not sent
 *
 * Options (providers[].options):
 *   thinking  "budget" (default) as above, or "level": send
 *             thinkingConfig.thinkingLevel = the effort (Gemini 3 models; a
 *             budget maps to low/medium/high as in the openai driver) and
 *             refuse "no reasoning", which those models cannot do
 *   thought_signature  "auto" (default), "always" or "never". Gemini 3
 *             refuses a replayed functionCall part without its
 *             thoughtSignature; the canonical model does not carry those
 *             signatures, so the driver marks replayed calls with the
 *             sentinel Google documents for history it did not produce
 *             ("skip_thought_signature_validator"). "auto" does it for model
 *             ids gemini-3 and later.
 *
 * Upstream answer: SSE "data:" events, one GenerateContentResponse each
 * (no [DONE]: the stream ends after the chunk with a finishReason), or one
 * GenerateContentResponse JSON. responseId and modelVersion give START;
 * candidates[0].content.parts: text (REASONING when "thought": true), and
 * functionCall{id?, name, args}, which arrives whole and becomes TOOL_START
 * (id "call_<n>" unless the part has one), one TOOL_DELTA with the args
 * serialized, TOOL_END. Parts the canonical model has no event for
 * (executable code, generated media) are not relayed; thoughtSignature is
 * not kept (see above). usageMetadata is cumulative: input =
 * promptTokenCount - cachedContentTokenCount, cache_read =
 * cachedContentTokenCount, output = candidatesTokenCount +
 * thoughtsTokenCount, reasoning = thoughtsTokenCount. A USAGE goes out as
 * soon as the first one arrives and, when it changed, once more before
 * DONE. finishReason STOP (tool_use when calls were made), MAX_TOKENS,
 * SAFETY/RECITATION/BLOCKLIST/PROHIBITED_CONTENT/SPII/IMAGE_SAFETY
 * (content_filter), anything else end. A prompt blocked before any
 * candidate (promptFeedback.blockReason) is ERROR content_filtered.
 *
 * Errors: {"error":{"code","message","status"}} with Google's canonical
 * status names (see google_failure, in gemini_parse.c).
 *
 * Embeddings: POST {base}/models/{model}:batchEmbedContents with one
 * request per input ({model:"models/<m>", content:{parts[{text}]},
 * outputDimensionality}) → embeddings[{values}]. Gemini reports no usage.
 *
 * This file builds the upstream requests (chat and embeddings) and reads
 * embeddings answers; the chat answer is parsed in gemini_parse.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_docs.h"
#include "drv_gemini_int.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"
#include "gw_json.h"

#define SIG_SENTINEL "skip_thought_signature_validator"

/* ------------------------------------------------------------------ build */

/* The model id without a "models/" prefix. */
static const char *bare_model(const char *m)
{
    return strncmp(m, "models/", 7) == 0 ? m + 7 : m;
}

/* "gemini-<major>..." with major >= 3. */
static int model_wants_signatures(const char *model)
{
    const char *m = bare_model(model);
    if (strncmp(m, "gemini-", 7) != 0)
        return 0;
    m += 7;
    if (*m < '0' || *m > '9')
        return 0;
    return strtol(m, NULL, 10) >= 3;
}

static json_t *text_part(const char *text)
{
    return json_pack("{s:s}", "text", text);
}

static json_t *image_part(const struct canon_part *p)
{
    return json_pack("{s:{s:s,s:s}}", "inlineData", "mimeType", p->media_type, "data", p->data);
}

/* A document or audio as a file part: bytes as inlineData, a URL as
 * fileData{mimeType, fileUri}, text as inlineData text/plain (Gemini reads
 * inline text files; a text part would make the document part of the
 * prompt). The filename is not sent (mimeType says what the file is);
 * a title, context or citations flag has no Gemini field and is refused. */
static json_t *media_part(const struct canon_req *r, const char *where, const struct canon_part *p,
                          struct canon_err *err)
{
    if (drv_doc_members(r, where, p, 0, "gemini", err))
        return NULL;
    if (p->text) {
        json_t *d = drv_b64_string(p->text);
        return d ? json_pack("{s:{s:s,s:o}}", "inlineData", "mimeType", "text/plain", "data", d)
                 : NULL;
    }
    if (p->url && !p->media_type) {
        drv_refuse_doc(r, where, p, "gemini",
                       "fileData needs the file's media type, which the request does not say", err);
        return NULL;
    }
    if (p->url)
        return json_pack("{s:{s:s,s:s}}", "fileData", "mimeType", p->media_type, "fileUri", p->url);
    return image_part(p);
}

static int add_tool_result(const struct canon_req *r, json_t *parts, const struct canon_part *p,
                           size_t mi, struct canon_err *err)
{
    const char *name =
        drv_result_name(r, mi, p, "Gemini matches results to calls by function name", err);
    if (!name)
        return GW_EINVAL;
    /* Several text blocks are one output: joined as the text they are. */
    struct gw_buf b;
    int rc = drv_result_text(p, NULL, &b);
    if (rc == GW_EINVAL) {
        gw_buf_free(&b);
        return drv_refuse_message(r, mi, "Gemini takes only text in tool results", err);
    }
    json_t *resp = rc == GW_OK ? json_pack("{s:s%}", p->is_error ? "error" : "output",
                                           b.data ? b.data : "", b.len)
                               : NULL;
    gw_buf_free(&b);
    if (!resp)
        return GW_ENOMEM;
    return json_array_append_new(parts, json_pack("{s:{s:s,s:o}}", "functionResponse", "name", name,
                                                  "response", resp))
               ? GW_ENOMEM
               : GW_OK;
}

static int add_message(const struct canon_req *r, json_t *contents, size_t mi, int sentinel,
                       struct canon_err *err)
{
    const struct canon_message *m = &r->messages[mi];
    if (m->role == CANON_ROLE_SYSTEM)
        return drv_refuse_message(
            r, mi, "Gemini takes system text only at the start of the conversation", err);
    int model = m->role == CANON_ROLE_ASSISTANT;
    json_t *parts = json_array();
    if (!parts)
        return GW_ENOMEM;
    int rc = GW_OK;
    /* Tool results first: they answer the calls of the turn before. */
    for (size_t j = 0; rc == GW_OK && j < m->nparts; j++)
        if (m->parts[j].type == CANON_PART_TOOL_RESULT) {
            if (model)
                rc = drv_refuse_message(r, mi, "an assistant message cannot carry tool results",
                                        err);
            else
                rc = add_tool_result(r, parts, &m->parts[j], mi, err);
        }
    for (size_t j = 0; rc == GW_OK && j < m->nparts; j++) {
        const struct canon_part *p = &m->parts[j];
        switch (p->type) {
        case CANON_PART_TEXT:
            /* Gemini refuses empty text parts; an empty one says nothing. */
            if (p->text && *p->text && json_array_append_new(parts, text_part(p->text)))
                rc = GW_ENOMEM;
            break;
        case CANON_PART_IMAGE:
            if (model)
                rc = drv_refuse_message(r, mi, "Gemini takes no images in assistant messages", err);
            else if (p->url)
                rc = drv_refuse_message(r, mi,
                                        "Gemini takes images only as base64 data (data: URLs), "
                                        "not by http(s) URL",
                                        err);
            else if (json_array_append_new(parts, image_part(p)))
                rc = GW_ENOMEM;
            break;
        case CANON_PART_TOOL_CALL: {
            if (!model) {
                rc = drv_refuse_message(r, mi, "tool calls belong in assistant messages", err);
                break;
            }
            json_t *args = drv_call_args(p, 0);
            if (!args) {
                rc =
                    drv_refuse_message(r, mi, "a tool call's arguments must be a JSON object", err);
                break;
            }
            json_t *part =
                json_pack("{s:{s:s,s:o}}", "functionCall", "name", p->name, "args", args);
            if (part && sentinel)
                json_object_set_new(part, "thoughtSignature", json_string(SIG_SENTINEL));
            if (!part || json_array_append_new(parts, part))
                rc = GW_ENOMEM;
            break;
        }
        case CANON_PART_THINKING:
        case CANON_PART_REDACTED_THINKING:
            /* Earlier turns' reasoning is not replayed (see the header). */
            break;
        case CANON_PART_TOOL_RESULT:
            break; /* done above */
        case CANON_PART_DOCUMENT:
        case CANON_PART_AUDIO: {
            char where[64];
            snprintf(where, sizeof(where), "message %zu part %zu", mi, j);
            json_t *part = NULL;
            if (model)
                rc = drv_refuse_message(r, mi, "Gemini takes no files in assistant messages", err);
            else if (!(part = media_part(r, where, p, err)))
                rc = err->status ? GW_EINVAL : GW_ENOMEM;
            else if (json_array_append_new(parts, part))
                rc = GW_ENOMEM;
            break;
        }
        }
    }
    if (rc != GW_OK || json_array_size(parts) == 0) {
        /* A turn left empty (only earlier reasoning) is not sent: Gemini
         * refuses a content without parts. */
        json_decref(parts);
        return rc;
    }
    return json_array_append_new(
               contents, json_pack("{s:s,s:o}", "role", model ? "model" : "user", "parts", parts))
               ? GW_ENOMEM
               : GW_OK;
}

/* The thinking budget asked for (an effort's, see the header); -1 none. */
static long long budget_of(const struct canon_req *r)
{
    static const struct drv_budgets budgets = {
        .minimal = 512, .low = 1024, .medium = 8192, .high = 24576, .other = 24576};
    if (r->reasoning_budget > 0)
        return r->reasoning_budget;
    return r->reasoning_effort ? drv_effort_budget(r->reasoning_effort, &budgets) : -1;
}

static int add_thinking(const struct drv_target *t, const struct canon_req *r, json_t *gc,
                        struct canon_err *err)
{
    int level = strcmp(drv_opt_str(t, "thinking", "budget"), "level") == 0;
    json_t *tc = NULL;
    if (r->reasoning_off) {
        if (level) {
            canon_err_set(err, 400, canon_field_name(r, CANON_F_REASONING), "unsupported_parameter",
                          "%s: this provider's models cannot turn reasoning off",
                          canon_field_name(r, CANON_F_REASONING));
            return GW_EINVAL;
        }
        tc = json_pack("{s:i}", "thinkingBudget", 0);
    } else if (level && drv_effort_of(r)) {
        tc = json_pack("{s:s,s:b}", "thinkingLevel", drv_effort_of(r), "includeThoughts", 1);
    } else if (!level && budget_of(r) >= 0) {
        tc = json_pack("{s:I,s:b}", "thinkingBudget", (json_int_t)budget_of(r), "includeThoughts",
                       1);
    } else {
        return GW_OK;
    }
    return tc && json_object_set_new(gc, "thinkingConfig", tc) == 0 ? GW_OK : GW_ENOMEM;
}

static json_t *generation_config(const struct drv_target *t, const struct canon_req *r,
                                 struct canon_err *err, int *rc)
{
    json_t *gc = json_object();
    *rc = GW_ENOMEM;
    if (!gc)
        return NULL;
    static const struct drv_param params[] = {
        {CANON_F_MAX_TOKENS, "maxOutputTokens"},
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "topP"},
        {CANON_F_TOP_K, "topK"},
        {CANON_F_STOP, "stopSequences"},
        {CANON_F_SEED, "seed"},
        {CANON_F_PRESENCE_PENALTY, "presencePenalty"},
        {CANON_F_FREQUENCY_PENALTY, "frequencyPenalty"},
    };
    drv_params(gc, r, params, DRV_NPARAMS(params));
    if (r->format == CANON_FMT_TEXT)
        json_object_set_new(gc, "responseMimeType", json_string("text/plain"));
    else if (r->format == CANON_FMT_JSON_OBJECT)
        json_object_set_new(gc, "responseMimeType", json_string("application/json"));
    else if (r->format == CANON_FMT_JSON_SCHEMA) {
        json_object_set_new(gc, "responseMimeType", json_string("application/json"));
        if (r->format_schema)
            json_object_set(gc, "responseJsonSchema", r->format_schema);
    }
    *rc = add_thinking(t, r, gc, err);
    if (*rc != GW_OK) {
        json_decref(gc);
        return NULL;
    }
    return gc;
}

static json_t *tool_config(const struct canon_req *r)
{
    const char *mode = NULL;
    switch (r->tool_choice) {
    case CANON_TC_AUTO:
        mode = "AUTO";
        break;
    case CANON_TC_NONE:
        mode = "NONE";
        break;
    case CANON_TC_REQUIRED:
    case CANON_TC_NAMED:
        mode = "ANY";
        break;
    case CANON_TC_UNSET:
        return NULL;
    }
    json_t *fcc = json_pack("{s:s}", "mode", mode);
    if (fcc && r->tool_choice == CANON_TC_NAMED)
        json_object_set_new(fcc, "allowedFunctionNames",
                            json_pack("[s]", r->tool_choice_name ? r->tool_choice_name : ""));
    return fcc ? json_pack("{s:o}", "functionCallingConfig", fcc) : NULL;
}

static json_t *tools_of(const struct canon_req *r)
{
    json_t *decls = json_array();
    for (size_t i = 0; decls && i < r->ntools; i++) {
        const struct canon_tool *tl = &r->tools[i];
        json_t *fd = drv_tool_decl(json_pack("{s:s}", "name", tl->name), tl, "parametersJsonSchema",
                                   DRV_SCHEMA_OMIT);
        if (!fd) {
            json_decref(decls);
            return NULL;
        }
        json_array_append_new(decls, fd);
    }
    return decls ? json_pack("[{s:o}]", "functionDeclarations", decls) : NULL;
}

static int wants_sentinel(const struct drv_target *t)
{
    const char *o = drv_opt_str(t, "thought_signature", "auto");
    if (strcmp(o, "always") == 0)
        return 1;
    if (strcmp(o, "never") == 0)
        return 0;
    return model_wants_signatures(t->model);
}

/* {base}/models/{model}:{method}, the model id percent-encoded (anything
 * but RFC 3986 unreserved characters) since it is a path segment. */
static char *model_url(const struct drv_target *t, const char *method)
{
    const char *m = bare_model(t->model);
    struct gw_buf path;
    gw_buf_init(&path, 0);
    int rc = gw_buf_appends(&path, "/models/");
    if (rc == GW_OK)
        rc = gw_pct_encode(&path, m, strlen(m), 0);
    if (rc == GW_OK)
        rc = gw_buf_printf(&path, ":%s", method);
    char *u = rc == GW_OK ? drv_url(t, path.data) : NULL;
    gw_buf_free(&path);
    return u;
}

/* serviceTier (standard, flex, priority; "auto" left out: Gemini's
 * default is standard) on the request, and responseLogprobs with logprobs
 * (the alternatives per token) in generationConfig. */
static int tier_and_logprobs(const struct canon_req *r, json_t *doc, json_t *gc,
                             struct canon_err *err)
{
    static const struct drv_tier_map tiers = {
        {"", "standard", "flex", "priority", NULL},
        "Gemini's tiers are standard, flex and priority; OpenAI's Scale Tier has no counterpart"};
    const char *tier;
    if (drv_tier_word(r, "gemini", &tiers, &tier, err) != GW_OK)
        return GW_EINVAL;
    if (tier)
        json_object_set_new(doc, "serviceTier", json_string(tier));
    if (r->logprobs)
        json_object_set_new(gc, "responseLogprobs", json_true());
    if (r->logprobs && r->top_logprobs >= 0)
        json_object_set_new(gc, "logprobs", json_integer(r->top_logprobs));
    return GW_OK;
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    if (r->parallel_tool_calls == 0) {
        return drv_refuse_parallel_off(r, "Gemini", "it may always call several tools", err);
    }
    json_t *doc = json_object();
    json_t *contents = json_array();
    if (!doc || !contents) {
        json_decref(doc);
        json_decref(contents);
        return GW_ENOMEM;
    }
    json_object_set_new(doc, "contents", contents);
    int rc = GW_OK;
    if (r->nsystem) {
        json_t *sp = json_array();
        for (size_t i = 0; sp && rc == GW_OK && i < r->nsystem; i++) {
            if (r->system[i].type != CANON_PART_TEXT) {
                canon_err_set(err, 400, canon_field_name(r, CANON_F_SYSTEM), "unsupported_content",
                              "Gemini takes only text as system instructions");
                rc = GW_EINVAL;
            } else if (r->system[i].text && *r->system[i].text) {
                json_array_append_new(sp, text_part(r->system[i].text));
            }
        }
        if (!sp)
            rc = GW_ENOMEM;
        else if (rc == GW_OK && json_array_size(sp))
            json_object_set_new(doc, "systemInstruction", json_pack("{s:o}", "parts", sp));
        else
            json_decref(sp);
    }
    int sentinel = wants_sentinel(t);
    for (size_t i = 0; rc == GW_OK && i < r->nmessages; i++)
        rc = add_message(r, contents, i, sentinel, err);
    if (rc == GW_OK && r->ntools) {
        json_t *tools = tools_of(r);
        if (!tools)
            rc = GW_ENOMEM;
        else
            json_object_set_new(doc, "tools", tools);
    }
    if (rc == GW_OK && r->tool_choice != CANON_TC_UNSET) {
        json_t *tc = tool_config(r);
        if (!tc)
            rc = GW_ENOMEM;
        else
            json_object_set_new(doc, "toolConfig", tc);
    }
    if (rc == GW_OK) {
        json_t *gc = generation_config(t, r, err, &rc);
        if (gc && rc == GW_OK)
            rc = tier_and_logprobs(r, doc, gc, err);
        if (gc && json_object_size(gc))
            json_object_set_new(doc, "generationConfig", gc);
        else
            json_decref(gc);
    }
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }
    out->stream = r->stream;
    return drv_json_request(
        out, t, model_url(t, r->stream ? "streamGenerateContent?alt=sse" : "generateContent"), doc,
        "x-goog-api-key: ");
}

/* -------------------------------------------------------------- embeddings */

static int build_embed(const struct drv_target *t, const struct canon_embed_req *r,
                       struct drv_request *out, struct canon_err *err)
{
    (void)err;
    const char *m = bare_model(t->model);
    size_t n = strlen(m) + 8;
    char *full = malloc(n);
    if (!full)
        return GW_ENOMEM;
    snprintf(full, n, "models/%s", m);
    json_t *reqs = json_array();
    for (size_t i = 0; reqs && i < r->ninputs; i++) {
        json_t *q = json_pack("{s:s,s:{s:[{s:s}]}}", "model", full, "content", "parts", "text",
                              r->inputs[i]);
        if (q && r->dimensions)
            json_object_set_new(q, "outputDimensionality", json_integer(r->dimensions));
        if (!q || json_array_append_new(reqs, q)) {
            json_decref(reqs);
            reqs = NULL;
        }
    }
    free(full);
    json_t *doc = reqs ? json_pack("{s:o}", "requests", reqs) : NULL;
    return drv_json_request(out, t, model_url(t, "batchEmbedContents"), doc, "x-goog-api-key: ");
}

static int parse_embed(const char *body, size_t len, struct canon_embed_resp *out, char *msg,
                       size_t msglen)
{
    json_t *doc = json_loadb(body, len, 0, NULL);
    int rc = drv_embed_vectors(json_object_get(doc, "embeddings"), "values", out, msg, msglen);
    /* Gemini reports no usage for embeddings: usage.have stays 0. */
    json_decref(doc);
    return rc;
}

const struct dp_driver drv_gemini = {
    .info = &dp_driver_catalog[DRV_ID_GEMINI],
    .build_chat = build_chat,
    .parser_new = drv_gemini_parser_new,
    .parse = drv_gemini_parse,
    .finish = drv_gemini_finish,
    .parser_free = drv_parser_free,
    .classify = drv_gemini_classify,
    .retry_after = drv_gemini_retry_after,
    .tier_header = "x-gemini-service-tier",
    .build_embed = build_embed,
    .parse_embed = parse_embed,
};
