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
 *                          is refused), functionCall{name,args} for the
 *                          assistant's tool calls
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
 * status names (see google_failure).
 *
 * Embeddings: POST {base}/models/{model}:batchEmbedContents with one
 * request per input ({model:"models/<m>", content:{parts[{text}]},
 * outputDimensionality}) → embeddings[{values}]. Gemini reports no usage.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sse.h"
#include "gw_str.h"

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
    static const char hex[] = "0123456789ABCDEF";
    const char *m = bare_model(t->model);
    size_t n = 3 * strlen(m) + strlen(method) + 16;
    char *path = malloc(n);
    if (!path)
        return NULL;
    size_t k = (size_t)snprintf(path, n, "/models/");
    for (const unsigned char *c = (const unsigned char *)m; *c; c++) {
        if ((*c >= 'A' && *c <= 'Z') || (*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') ||
            *c == '-' || *c == '.' || *c == '_' || *c == '~') {
            path[k++] = (char)*c;
        } else {
            path[k++] = '%';
            path[k++] = hex[*c >> 4];
            path[k++] = hex[*c & 15];
        }
    }
    snprintf(path + k, n - k, ":%s", method);
    char *u = drv_url(t, path);
    free(path);
    return u;
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    if (r->parallel_tool_calls == 0) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS),
                      "unsupported_parameter",
                      "%s false is not supported by Gemini, which may always call several tools",
                      canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS));
        return GW_EINVAL;
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

/* ----------------------------------------------------------------- errors */

/* Per-minute or per-second limits, or a retry hint, in a Google error's
 * details: the limit is a rate, not a spent quota. 1 rate, 2 daily quota,
 * 0 unknown. */
static int quota_kind(const json_t *details)
{
    int kind = 0;
    size_t i, j;
    json_t *d, *v;
    json_array_foreach(details, i, d)
    {
        const char *type = gw_json_str(d, "@type");
        if (type && strstr(type, "RetryInfo"))
            kind = kind ? kind : 1;
        json_array_foreach(json_object_get(d, "violations"), j, v)
        {
            const char *q = gw_json_str(v, "quotaId");
            if (!q)
                continue;
            if (strstr(q, "PerDay"))
                return 2;
            if (strstr(q, "PerMinute") || strstr(q, "PerSecond"))
                kind = 1;
        }
    }
    return kind;
}

/* google.rpc.RetryInfo's retryDelay ("30s", "1.5s") as whole seconds,
 * rounded up, so the client's Retry-After says what Google said. */
static int retry_after(const char *body, size_t len, char *out, size_t outlen)
{
    json_t *doc = json_loadb(body ? body : "", len, 0, NULL);
    json_t *details = json_object_get(json_object_get(doc, "error"), "details");
    int rc = 1;
    size_t i;
    json_t *d;
    json_array_foreach(details, i, d)
    {
        const char *type = gw_json_str(d, "@type");
        const char *delay = gw_json_str(d, "retryDelay");
        if (!type || !strstr(type, "RetryInfo") || !delay)
            continue;
        char *end = NULL;
        double secs = strtod(delay, &end);
        if (end == delay || strcmp(end, "s") != 0 || !(secs >= 0) || secs > 86400)
            continue;
        long whole = (long)secs;
        if ((double)whole < secs)
            whole++;
        snprintf(out, outlen, "%ld", whole);
        rc = 0;
        break;
    }
    json_decref(doc);
    return rc;
}

/* A details entry (google.rpc.ErrorInfo) with this reason. */
static int has_reason(const json_t *details, const char *reason)
{
    size_t i;
    json_t *d;
    json_array_foreach(details, i, d)
    {
        const char *r = gw_json_str(d, "reason");
        if (r && strcmp(r, reason) == 0)
            return 1;
    }
    return 0;
}

/*
 * A Google API error → failure class. status is the canonical code name
 * (RESOURCE_EXHAUSTED, INVALID_ARGUMENT, ...); http the HTTP status (0 for
 * an error inside a stream). RESOURCE_EXHAUSTED is a rate limit, unless the
 * details name a daily quota, or, with no details saying it is a rate, the
 * message speaks of quota or billing (Gemini's per-minute 429s say "quota"
 * too, but carry a RetryInfo and a PerMinute quota id).
 */
static enum canon_failure google_failure(int http, const json_t *e, const char *body, size_t len)
{
    const char *st = gw_json_str(e, "status");
    const char *m = gw_json_str(e, "message");
    json_t *details = json_object_get(e, "details");
    if (st) {
        if (strcmp(st, "RESOURCE_EXHAUSTED") == 0) {
            int k = quota_kind(details);
            if (k == 2 || (k == 0 && (gw_str_has(m, "quota") || gw_str_has(m, "billing"))))
                return CANON_FAIL_QUOTA_EXHAUSTED;
            return CANON_FAIL_RATE_LIMITED;
        }
        if (strcmp(st, "UNAUTHENTICATED") == 0 || strcmp(st, "PERMISSION_DENIED") == 0)
            return CANON_FAIL_AUTH_FAILED;
        if (strcmp(st, "INVALID_ARGUMENT") == 0) {
            /* A bad key is a 400 INVALID_ARGUMENT with reason API_KEY_INVALID. */
            if (gw_str_has(m, "API key not valid") || has_reason(details, "API_KEY_INVALID"))
                return CANON_FAIL_AUTH_FAILED;
            if (gw_str_has(m, "exceeds the maximum number of tokens"))
                return CANON_FAIL_CONTEXT_OVERFLOW;
            return canon_classify_http(400, m ? m : "", m ? strlen(m) : 0);
        }
        if (strcmp(st, "NOT_FOUND") == 0)
            return gw_str_has(m, "model") ? CANON_FAIL_MODEL_UNAVAILABLE : CANON_FAIL_NOT_FOUND;
        if (strcmp(st, "FAILED_PRECONDITION") == 0)
            /* "User location is not supported", free tier unavailable in
             * the region: this target cannot serve, another may. */
            return CANON_FAIL_MODEL_UNAVAILABLE;
        if (strcmp(st, "UNAVAILABLE") == 0)
            return gw_str_has(m, "model") || gw_str_has(m, "overloaded")
                       ? CANON_FAIL_MODEL_UNAVAILABLE
                       : CANON_FAIL_PROVIDER_5XX;
        if (strcmp(st, "DEADLINE_EXCEEDED") == 0)
            return CANON_FAIL_TIMEOUT;
        if (strcmp(st, "INTERNAL") == 0 || strcmp(st, "UNKNOWN") == 0)
            return CANON_FAIL_PROVIDER_5XX;
    }
    if (http)
        return canon_classify_http(http, body, len);
    return CANON_FAIL_PROVIDER_5XX;
}

static void classify(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                     size_t msglen)
{
    drv_classify_default(status, body, len, f, msg, msglen);
    json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *e = json_object_get(j, "error");
    /* Some front ends answer with a one-element array of the error. */
    if (!e && json_is_array(j))
        e = json_object_get(json_array_get(j, 0), "error");
    if (json_is_object(e)) {
        *f = google_failure(status, e, body, len);
        const char *m = gw_json_str(e, "message");
        if (m)
            snprintf(msg, msglen, "%s", m);
    }
    json_decref(j);
}

/* ------------------------------------------------------------------ parse */

struct gem_parser {
    struct drv_parser base;
    struct drv_tools tools;
    int content;     /* a content event went out */
    int have_finish; /* a finishReason arrived */
    enum canon_stop stop;
    struct canon_usage sent; /* the last USAGE emitted (have 0: none) */
    struct canon_usage last; /* the latest reported */
};

static struct drv_parser *parser_new(int stream)
{
    struct gem_parser *p = drv_parser_new(sizeof(*p), &drv_gemini, stream);
    return p ? &p->base : NULL;
}

static int emit_usage(const struct canon_usage *u, struct gem_parser *p, const struct canon_sink *s)
{
    p->sent = *u;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = u};
    return canon_emit(s, &ev);
}

static int usage_differs(const struct canon_usage *a, const struct canon_usage *b)
{
    return a->have != b->have || a->input != b->input || a->cache_read != b->cache_read ||
           a->output != b->output || a->reasoning != b->reasoning;
}

/* usageMetadata → canonical. promptTokenCount includes the cached part. */
static int on_usage(struct gem_parser *p, const json_t *um, const struct canon_sink *s)
{
    if (!json_is_object(um))
        return 0;
    long long prompt = 0, cached = 0, cand = 0, thoughts = 0;
    gw_json_int(um, "promptTokenCount", &prompt);
    gw_json_int(um, "cachedContentTokenCount", &cached);
    gw_json_int(um, "candidatesTokenCount", &cand);
    gw_json_int(um, "thoughtsTokenCount", &thoughts);
    if (prompt < 0)
        prompt = 0;
    if (cached < 0 || cached > prompt)
        cached = cached < 0 ? 0 : prompt;
    if (cand < 0)
        cand = 0;
    if (thoughts < 0)
        thoughts = 0;
    struct canon_usage u = {.have = 1};
    u.input = prompt - cached;
    u.cache_read = cached;
    u.output = cand + thoughts;
    u.reasoning = thoughts;
    p->last = u;
    /* Before content: say it now (a facade may need input tokens first);
     * after: once more before DONE, so usage never splits content. */
    if (!p->content && usage_differs(&u, &p->sent))
        return emit_usage(&p->last, p, s);
    return 0;
}

static enum canon_stop stop_of(const char *fr)
{
    if (strcmp(fr, "MAX_TOKENS") == 0)
        return CANON_STOP_MAX_TOKENS;
    if (strcmp(fr, "SAFETY") == 0 || strcmp(fr, "RECITATION") == 0 ||
        strcmp(fr, "BLOCKLIST") == 0 || strcmp(fr, "PROHIBITED_CONTENT") == 0 ||
        strcmp(fr, "SPII") == 0 || strcmp(fr, "IMAGE_SAFETY") == 0)
        return CANON_STOP_CONTENT_FILTER;
    return CANON_STOP_END;
}

static int on_function_call(struct gem_parser *p, const json_t *fc, const struct canon_sink *s)
{
    const char *name = gw_json_str(fc, "name");
    if (!name || !*name)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a function call without a name");
    json_t *args = json_object_get(fc, "args");
    if (args && !json_is_null(args) && !json_is_object(args))
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent function call arguments that are not an object");
    char *a = json_is_object(args) ? json_dumps(args, JSON_COMPACT) : NULL;
    if (json_is_object(args) && !a)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
    /* Every functionCall part is a new call, whole. */
    int rc = drv_tools_whole(&p->base, &p->tools, gw_json_str(fc, "id"), name, a, s);
    free(a);
    return rc;
}

/* One GenerateContentResponse (a streamed chunk or the whole answer). */
static int on_response(struct gem_parser *p, const json_t *doc, const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    if (json_is_object(e)) {
        const char *m = gw_json_str(e, "message");
        return drv_fail(&p->base, s, google_failure(0, e, NULL, 0),
                        m ? m : "the provider reported an error");
    }
    if (drv_start(&p->base, gw_json_str(doc, "responseId"), gw_json_str(doc, "modelVersion"), s))
        return 1;
    if (on_usage(p, json_object_get(doc, "usageMetadata"), s))
        return 1;
    json_t *cands = json_object_get(doc, "candidates");
    json_t *c = json_array_get(cands, 0);
    if (!c) {
        const char *br = gw_json_str(json_object_get(doc, "promptFeedback"), "blockReason");
        if (br)
            return drv_fail(&p->base, s, CANON_FAIL_CONTENT_FILTERED,
                            "the provider blocked the prompt");
        return 0;
    }
    size_t i;
    json_t *part;
    json_array_foreach(json_object_get(json_object_get(c, "content"), "parts"), i, part)
    {
        const char *text = gw_json_str(part, "text");
        json_t *fc = json_object_get(part, "functionCall");
        if (json_is_object(fc)) {
            p->content = 1;
            if (on_function_call(p, fc, s))
                return 1;
        } else if (text && *text) {
            int thought = gw_json_bool(part, "thought", 0, NULL) == 1;
            p->content = 1;
            struct canon_event ev = {.type = thought ? CANON_EV_REASONING : CANON_EV_CHUNK,
                                     .text = text,
                                     .len = strlen(text)};
            if (canon_emit(s, &ev))
                return 1;
        }
    }
    const char *fr = gw_json_str(c, "finishReason");
    if (fr) {
        p->have_finish = 1;
        p->stop = stop_of(fr);
    }
    return 0;
}

static int done(struct gem_parser *p, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s))
        return 1;
    if (p->last.have && usage_differs(&p->last, &p->sent) && emit_usage(&p->last, p, s))
        return 1;
    p->base.terminal = 1;
    enum canon_stop stop = p->stop;
    if (stop == CANON_STOP_END && p->tools.count > 0)
        stop = CANON_STOP_TOOL_USE;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = stop};
    canon_emit(s, &ev);
    return 1;
}

static int on_sse(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                  const struct canon_sink *s)
{
    (void)ev;
    return on_response((struct gem_parser *)bp, doc, s);
}

static int parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, drv_sse_skip_empty, on_sse);
}

static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct gem_parser *p = (struct gem_parser *)bp;
    if (on_response(p, doc, s))
        return;
    if (!json_array_size(json_object_get(doc, "candidates")))
        drv_fail(&p->base, s, CANON_FAIL_EMPTY_OUTPUT, "the provider's answer has no candidates");
    else
        done(p, s);
}

static void finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct gem_parser *p = (struct gem_parser *)bp;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No terminator in this format: complete only after a finishReason. */
    if (p->have_finish)
        done(p, s);
    else
        drv_fail(&p->base, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
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
    .name = "gemini",
    .caps = DRV_CAP_CHAT | DRV_CAP_EMBEDDINGS | DRV_CAP_VISION | DRV_CAP_TOOLS | DRV_CAP_JSON_MODE |
            DRV_CAP_REASONING,
    .build_chat = build_chat,
    .parser_new = parser_new,
    .parse = parse,
    .finish = finish,
    .parser_free = drv_parser_free,
    .classify = classify,
    .retry_after = retry_after,
    .build_embed = build_embed,
    .parse_embed = parse_embed,
};
