/*
 * Google Gemini (Generative Language API, v1beta and v1):
 *
 *   POST /v1beta/models/{model}:generateContent         one GenerateContentResponse
 *   POST /v1beta/models/{model}:streamGenerateContent   with ?alt=sse: SSE,
 *        "data: {GenerateContentResponse}" per chunk, events ended by CRLF
 *        CRLF as Google's are, no [DONE]; without alt=sse: one JSON array
 *        of the same chunks, written as they come
 *   POST /v1beta/models/{model}:embedContent, :batchEmbedContents
 *
 * The model is in the URL (percent-decoded, so "%23status=429" carries a
 * fault). Every chunk carries usageMetadata, cumulative; the last content
 * chunk carries finishReason (STOP, MAX_TOKENS). Function calls arrive
 * whole, one per chunk, with args as an object. Reasoning (reasoning=N) is
 * parts with "thought": true; thoughtsTokenCount counts them and
 * candidatesTokenCount does not (Gemini bills them apart), and the first
 * part after the thoughts carries a thoughtSignature.
 *
 * Auth is an API key in x-goog-api-key (or ?key=); without one the answer
 * is Google's 403 PERMISSION_DENIED. Errors are
 * {"error":{"code":N,"message":...,"status":"RESOURCE_EXHAUSTED"}}.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

enum { KEY_HEADER = 1, KEY_QUERY = 2 };

/* ---- auth ---- */

static const char *gemini_auth(struct mock_call *c)
{
    size_t len = 0;
    const char *h = gw_http_req_header(c->req, "x-goog-api-key");
    const char *q = mock_query_param(gw_http_req_query(c->req), "key", &len);
    if (h != NULL && h[0] != '\0')
        c->auth_flags = KEY_HEADER;
    else if (q != NULL && len > 0)
        c->auth_flags = KEY_QUERY;
    if (c->auth_flags != 0)
        return NULL;
    c->err_status = 403;
    return "Method doesn't allow unregistered callers (callers without established identity). "
           "Please use API Key or other form of API consumer identity to call this API.";
}

static int gemini_log_extra(const struct mock_call *c, struct gw_buf *b)
{
    const char *how = c->auth_flags == KEY_HEADER  ? "\"header\""
                      : c->auth_flags == KEY_QUERY ? "\"query\""
                                                   : "null";
    return gw_buf_printf(b, ",\"auth\":{\"api_key\":%s}", how);
}

/* ---- request ---- */

static int decl_get(json_t *decl, const char **name, json_t **schema)
{
    *name = json_string_value(json_object_get(decl, "name"));
    *schema = json_object_get(decl, "parameters");
    if (*schema == NULL)
        *schema = json_object_get(decl, "parametersJsonSchema");
    return *name != NULL;
}

static int is_image(json_t *blob)
{
    const char *mime = json_string_value(json_object_get(blob, "mimeType"));
    return mime != NULL && strncasecmp(mime, "image/", 6) == 0;
}

/* The parts of one Content. NULL or a 400 message. */
static const char *content_parts(struct mock_call *c, json_t *content, int count)
{
    json_t *parts = json_object_get(content, "parts");
    if (!json_is_array(parts))
        return "* GenerateContentRequest.contents: parts must be an array";
    size_t i;
    json_t *part;
    json_array_foreach(parts, i, part)
    {
        if (!json_is_object(part))
            return "* GenerateContentRequest.contents.parts: each part must be an object";
        json_t *text = json_object_get(part, "text");
        if (json_is_string(text))
            c->input_tokens += mock_count_words(json_string_value(text), json_string_length(text));
        if (!count)
            continue;
        if (is_image(json_object_get(part, "inlineData")) ||
            is_image(json_object_get(part, "fileData")))
            c->seen.images++;
        else if (json_object_get(part, "inlineData") || json_object_get(part, "fileData"))
            c->seen.files++; /* a document or audio */
        if (json_object_get(part, "functionCall") != NULL)
            c->seen.tool_calls++;
        if (json_object_get(part, "functionResponse") != NULL)
            c->seen.tool_results++;
    }
    return NULL;
}

static void free_json(void *data)
{
    json_decref(data);
}

/* Function declarations of every tools entry, flattened into one array
 * (owned by the pool), for mock_pick_tools. */
static json_t *declarations(struct mock_call *c, json_t *tools)
{
    json_t *flat = json_array();
    if (flat == NULL || gw_pool_cleanup(c->pool, free_json, flat) != 0) {
        json_decref(flat);
        return NULL;
    }
    size_t i, j;
    json_t *tool, *decl;
    json_array_foreach(tools, i, tool)
    {
        json_t *decls = json_object_get(tool, "functionDeclarations");
        if (decls == NULL)
            decls = json_object_get(tool, "function_declarations");
        json_array_foreach(decls, j, decl)
        {
            if (json_array_append(flat, decl) != 0)
                return NULL;
        }
    }
    return flat;
}

static const char *generate_parse(struct mock_call *c, json_t *root)
{
    /* streamGenerateContent without ?alt=sse streams one JSON array. */
    if (c->stream) {
        size_t len = 0;
        const char *alt = mock_query_param(gw_http_req_query(c->req), "alt", &len);
        c->sse = alt != NULL && len == 3 && memcmp(alt, "sse", 3) == 0;
        if (!c->sse)
            c->stream_type = "application/json; charset=UTF-8";
    }
    /* The tier asked for serves, and is said in a header only, as the
     * real API does (x-gemini-service-tier). */
    json_t *tier = json_object_get(root, "serviceTier");
    if (tier != NULL) {
        const char *t = json_string_value(tier);
        if (t == NULL || (strcmp(t, "standard") && strcmp(t, "flex") && strcmp(t, "priority")))
            return "* GenerateContentRequest.service_tier: must be standard, flex or priority";
        (void)gw_http_add_header(c->req, "x-gemini-service-tier", t);
    }
    json_t *contents = json_object_get(root, "contents");
    if (!json_is_array(contents) || json_array_size(contents) == 0)
        return "* GenerateContentRequest.contents: contents is not specified";
    size_t i;
    json_t *content;
    json_array_foreach(contents, i, content)
    {
        if (!json_is_object(content))
            return "* GenerateContentRequest.contents: each content must be an object";
        json_t *role = json_object_get(content, "role");
        if (role != NULL && !json_is_string(role))
            return "* GenerateContentRequest.contents.role: must be a string";
        c->input_tokens += 1;
        c->seen.messages++;
        int before = c->seen.tool_results;
        const char *err = content_parts(c, content, 1);
        if (err != NULL)
            return err;
        mock_seen_turn(c, before);
    }
    json_t *sys = json_object_get(root, "systemInstruction");
    if (sys == NULL)
        sys = json_object_get(root, "system_instruction");
    if (sys != NULL && !json_is_null(sys)) {
        if (!json_is_object(sys))
            return "* GenerateContentRequest.system_instruction: must be a Content object";
        int before = c->input_tokens;
        const char *err = content_parts(c, sys, 0);
        if (err != NULL)
            return err;
        c->seen.system =
            c->input_tokens > before || json_array_size(json_object_get(sys, "parts")) > 0;
    }
    json_t *gen = json_object_get(root, "generationConfig");
    if (gen != NULL && !json_is_object(gen) && !json_is_null(gen))
        return "* GenerateContentRequest.generation_config: must be an object";
    long long max = -1, topk;
    if (mock_json_int(gen, "maxOutputTokens", 0, 1 << 30, &max) < 0)
        return "* GenerateContentRequest.generation_config.max_output_tokens: must be an integer";
    if (mock_json_int(gen, "topK", 0, 1 << 30, &topk) < 0)
        return "* GenerateContentRequest.generation_config.top_k: must be an integer";
    c->logprobs = json_is_true(json_object_get(gen, "responseLogprobs"));
    long long top = 0;
    if (mock_json_int(gen, "logprobs", 0, 20, &top) < 0)
        return "* GenerateContentRequest.generation_config.logprobs: must be an integer";
    c->top_logprobs = (int)top;
    if (mock_seen_temperature(c, gen, "temperature") != 0)
        return "* GenerateContentRequest.generation_config.temperature: must be a number";
    json_t *v = json_object_get(gen, "stopSequences");
    if (v != NULL && !json_is_array(v))
        return "* GenerateContentRequest.generation_config.stop_sequences: must be an array";
    v = json_object_get(gen, "responseMimeType");
    if (v != NULL && !json_is_string(v))
        return "* GenerateContentRequest.generation_config.response_mime_type: must be a string";
    v = json_object_get(gen, "thinkingConfig");
    if (v != NULL && !json_is_object(v))
        return "* GenerateContentRequest.generation_config.thinking_config: must be an object";
    mock_plan_answer(c, max);
    if (json_is_object(json_object_get(gen, "responseJsonSchema")))
        mock_plan_json(c, json_object_get(gen, "responseJsonSchema"));
    mock_plan_role(c, sys, contents);

    json_t *tools = json_object_get(root, "tools");
    if (tools == NULL || json_is_null(tools))
        return NULL;
    if (!json_is_array(tools))
        return "* GenerateContentRequest.tools: must be an array";
    json_t *decls = declarations(c, tools);
    if (decls == NULL)
        return "mock: out of memory";
    c->seen.tools = (int)json_array_size(decls);
    json_t *fcc = json_object_get(json_object_get(root, "toolConfig"), "functionCallingConfig");
    const char *mode = json_string_value(json_object_get(fcc, "mode"));
    if (mode != NULL && strcmp(mode, "NONE") == 0)
        return NULL;
    const char *named = NULL;
    json_t *allowed = json_object_get(fcc, "allowedFunctionNames");
    if (json_is_array(allowed) && json_array_size(allowed) > 0)
        named = json_string_value(json_array_get(allowed, 0));
    return mock_pick_tools(c, decls, named, mode != NULL && strcmp(mode, "ANY") == 0, decl_get);
}

/* ---- shared pieces ---- */

static const char *finish_reason(const struct mock_call *c)
{
    return !c->f.empty && c->finish == MOCK_FINISH_LENGTH ? "MAX_TOKENS" : "STOP";
}

/* answer: output tokens other than thoughts; thoughts: thought tokens. */
static int append_usage(struct gw_buf *b, const struct mock_call *c, int answer, int thoughts)
{
    int rc = gw_buf_printf(b, ",\"usageMetadata\":{\"promptTokenCount\":%d", c->input_tokens);
    if (answer > 0)
        rc |= gw_buf_printf(b, ",\"candidatesTokenCount\":%d", answer);
    rc |= gw_buf_printf(b, ",\"totalTokenCount\":%d", c->input_tokens + answer + thoughts);
    if (c->cache_read > 0)
        rc |= gw_buf_printf(b, ",\"cachedContentTokenCount\":%d", c->cache_read);
    if (thoughts > 0)
        rc |= gw_buf_printf(b, ",\"thoughtsTokenCount\":%d", thoughts);
    rc |= gw_buf_printf(b, ",\"promptTokensDetails\":[{\"modality\":\"TEXT\",\"tokenCount\":%d}]}",
                        c->input_tokens);
    return rc;
}

static int append_tail(struct gw_buf *b, const struct mock_call *c)
{
    int rc = gw_buf_appends(b, ",\"modelVersion\":");
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_printf(b, ",\"responseId\":\"mockresp%llu\"}", (unsigned long long)c->n);
    return rc;
}

/* The signature on the first part after the thoughts. */
static int signature(struct gw_buf *b, const struct mock_call *c)
{
    return c->reasoning > 0 ? gw_buf_appends(b, ",\"thoughtSignature\":\"" MOCK_SIGNATURE "\"") : 0;
}

static int append_call_part(struct gw_buf *b, const struct mock_call *c, int i)
{
    const struct mock_tool *t = &c->tools[i];
    int rc = gw_buf_appends(b, "{\"functionCall\":{\"name\":");
    rc |= gw_json_escape(b, t->name, strlen(t->name));
    rc |= gw_buf_appends(b, ",\"args\":");
    rc |= gw_buf_append(b, t->args, t->args_len);
    rc |= gw_buf_appends(b, "}");
    if (i == 0)
        rc |= signature(b, c);
    rc |= gw_buf_appends(b, "}");
    return rc;
}

/* ---- complete answer ---- */

static int generate_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, "{\"candidates\":[{\"content\":{");
    if (!c->f.empty) {
        rc |= gw_buf_appends(b, "\"parts\":[");
        if (c->reasoning > 0) {
            rc |= gw_buf_appends(b, "{\"text\":\"");
            rc |= mock_append_reasoning(b, 0, c->reasoning);
            rc |= gw_buf_appends(b, "\",\"thought\":true},");
        }
        if (c->ntools > 0) {
            for (int i = 0; i < c->ntools; i++) {
                rc |= i ? gw_buf_appends(b, ",") : 0;
                rc |= append_call_part(b, c, i);
            }
        } else {
            rc |= gw_buf_appends(b, "{\"text\":\"");
            rc |= mock_append_answer(b, c, 0, c->ntext);
            rc |= gw_buf_appends(b, "\"");
            rc |= signature(b, c);
            rc |= gw_buf_appends(b, "}");
        }
        rc |= gw_buf_appends(b, "],");
    }
    rc |= gw_buf_appends(b, "\"role\":\"model\"}");
    if (c->logprobs && !c->f.empty && c->ntools == 0) {
        rc |= gw_buf_appends(b, ",\"logprobsResult\":");
        rc |= mock_append_logprobs_gemini(b, c, 0, c->ntext);
    }
    rc |= gw_buf_printf(b, ",\"finishReason\":\"%s\",\"index\":0}]", finish_reason(c));
    int out = mock_call_output_tokens(c);
    int thoughts = c->f.empty ? 0 : c->reasoning;
    rc |= append_usage(b, c, out - thoughts, thoughts);
    rc |= append_tail(b, c);
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum { G_REASON, G_ANSWER, G_ARRAY_END, G_END };

/* Starts a chunk: the SSE prefix, or the array's "[" / ",". */
static int chunk_open(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, c->sse ? "data: {" : c->seq == 0 ? "[{" : ",\r\n{");
    rc |= gw_buf_appends(b, "\"candidates\":[{\"content\":{");
    c->seq++;
    return rc;
}

/* Ends a chunk; last: with the finishReason. answer/thoughts: the usage so
 * far, this chunk's tokens included. */
static int chunk_close(struct mock_call *c, struct gw_buf *b, int last, int answer, int thoughts)
{
    int rc = gw_buf_appends(b, "\"role\":\"model\"}");
    if (c->logprobs && c->lp_to > c->lp_from) {
        rc |= gw_buf_appends(b, ",\"logprobsResult\":");
        rc |= mock_append_logprobs_gemini(b, c, c->lp_from, c->lp_to);
        c->lp_from = c->lp_to = 0;
    }
    if (last)
        rc |= gw_buf_printf(b, ",\"finishReason\":\"%s\"", finish_reason(c));
    rc |= gw_buf_appends(b, ",\"index\":0}]");
    rc |= append_usage(b, c, answer, thoughts);
    rc |= append_tail(b, c);
    rc |= gw_buf_appends(b, c->sse ? "\r\n\r\n" : "\n");
    return rc;
}

static enum mock_frame generate_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    int thoughts = mock_call_reasoning_billed(c);
    int answer = c->billed - thoughts;
    int total = c->f.empty ? 0 : c->ntools > 0 ? c->ntools : c->ntext;
    for (;;) {
        switch (c->phase) {
        case G_REASON:
            if (c->f.empty || c->off >= (size_t)c->reasoning) {
                c->off = 0;
                c->phase = G_ANSWER;
                continue;
            }
            rc |= chunk_open(c, out);
            rc |= gw_buf_appends(out, "\"parts\":[{\"text\":\"");
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\",\"thought\":true}],");
            rc |= chunk_close(c, out, 0, answer, thoughts + 1);
            c->off++;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_CONTENT;
        case G_ANSWER:
            if (total == 0) {
                /* nothing (more) to say: one chunk with the finish reason */
                rc |= chunk_open(c, out);
                rc |= chunk_close(c, out, 1, answer, thoughts);
                c->phase = c->sse ? G_END : G_ARRAY_END;
                return rc ? MOCK_FRAME_END : MOCK_FRAME_POST;
            }
            if ((int)c->off >= total) {
                c->phase = c->sse ? G_END : G_ARRAY_END;
                continue;
            }
            rc |= chunk_open(c, out);
            rc |= gw_buf_appends(out, "\"parts\":[");
            if (c->ntools > 0) {
                rc |= append_call_part(out, c, (int)c->off);
                c->frame_tokens = mock_tool_tokens(&c->tools[c->off]);
            } else {
                rc |= gw_buf_appends(out, "{\"text\":\"");
                c->lp_from = (int)c->off;
                c->lp_to = (int)c->off + 1;
                rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
                rc |= gw_buf_appends(out, "\"");
                rc |= c->off == 0 ? signature(out, c) : 0;
                rc |= gw_buf_appends(out, "}");
            }
            rc |= gw_buf_appends(out, "],");
            rc |= chunk_close(c, out, (int)c->off + 1 >= total, answer + c->frame_tokens, thoughts);
            c->off++;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_CONTENT;
        case G_ARRAY_END:
            rc |= gw_buf_appends(out, "]");
            c->phase = G_END;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_POST;
        default:
            return MOCK_FRAME_END;
        }
    }
}

/* The chunk's JSON cut in half. */
static void generate_malform(struct mock_call *c, struct gw_buf *f)
{
    size_t keep = f->len / 2;
    f->len = keep;
    f->data[keep] = '\0';
    if (gw_buf_appends(f, c->sse ? "\r\n\r\n" : "\n") != 0)
        f->len = 0;
}

/* ---- embeddings ---- */

struct embed_state {
    int n;
    int dims[MOCK_MAX_EMBED_INPUTS];
};

/* One EmbedContentRequest: words and a hash of its text parts. */
static const char *embed_one(struct mock_call *c, json_t *req, int i, struct embed_state *st)
{
    json_t *content = json_object_get(req, "content");
    if (!json_is_object(content) || !json_is_array(json_object_get(content, "parts")))
        return "* EmbedContentRequest.content: content is not specified";
    long long dims = 8;
    if (mock_json_int(req, "outputDimensionality", 1, MOCK_MAX_DIMENSIONS, &dims) < 0)
        return "* EmbedContentRequest.output_dimensionality: an integer in [1, 4096]";
    uint64_t h = mock_embed_hash("", 0);
    size_t j;
    json_t *part;
    json_array_foreach(json_object_get(content, "parts"), j, part)
    {
        json_t *text = json_object_get(part, "text");
        if (json_is_string(text)) {
            h = mock_embed_hash_more(json_string_value(text), json_string_length(text), h);
            c->input_tokens += mock_count_words(json_string_value(text), json_string_length(text));
        }
    }
    c->hashes[i] = h;
    st->dims[i] = (int)dims;
    return NULL;
}

static const char *embed_setup(struct mock_call *c, size_t n, struct embed_state **st)
{
    if (n == 0 || n > MOCK_MAX_EMBED_INPUTS)
        return "* BatchEmbedContentsRequest.requests: between 1 and 2048 requests";
    *st = gw_pool_calloc(c->pool, sizeof(**st));
    c->hashes = gw_pool_alloc(c->pool, n * sizeof(uint64_t));
    if (*st == NULL || c->hashes == NULL)
        return "mock: out of memory";
    (*st)->n = (int)n;
    c->ninputs = (int)n;
    c->seen.messages = (int)n;
    c->api_state = *st;
    return NULL;
}

static const char *embed_parse(struct mock_call *c, json_t *root)
{
    struct embed_state *st;
    const char *err = embed_setup(c, 1, &st);
    return err != NULL ? err : embed_one(c, root, 0, st);
}

static const char *batch_parse(struct mock_call *c, json_t *root)
{
    json_t *reqs = json_object_get(root, "requests");
    if (!json_is_array(reqs))
        return "* BatchEmbedContentsRequest.requests: requests is not specified";
    struct embed_state *st;
    const char *err = embed_setup(c, json_array_size(reqs), &st);
    for (size_t i = 0; err == NULL && i < json_array_size(reqs); i++)
        err = embed_one(c, json_array_get(reqs, i), (int)i, st);
    return err;
}

static int embed_body(struct mock_call *c, struct gw_buf *b)
{
    const struct embed_state *st = c->api_state;
    int rc = gw_buf_appends(b, "{\"embedding\":{\"values\":");
    rc |= mock_append_vector(b, st->dims[0], c->hashes[0], 0);
    rc |= gw_buf_appends(b, "}}");
    return rc ? GW_ELIMIT : 0;
}

static int batch_body(struct mock_call *c, struct gw_buf *b)
{
    const struct embed_state *st = c->api_state;
    int rc = gw_buf_appends(b, "{\"embeddings\":[");
    for (int i = 0; i < st->n && rc == 0; i++) {
        rc |= gw_buf_appends(b, i ? ",{\"values\":" : "{\"values\":");
        rc |= mock_append_vector(b, st->dims[i], c->hashes[i], 0);
        rc |= gw_buf_appends(b, "}");
    }
    rc |= gw_buf_appends(b, "]}");
    return rc ? GW_ELIMIT : 0;
}

/* ---- errors ---- */

int mock_gemini_error_body(struct gw_buf *b, int status, const char *message, int retry_after)
{
    const char *st = "INVALID_ARGUMENT";
    const char *dflt = "Request contains an invalid argument. (mock fault)";
    switch (status) {
    case 401:
        st = "UNAUTHENTICATED";
        dflt = "Request had invalid authentication credentials. (mock fault)";
        break;
    case 403:
        st = "PERMISSION_DENIED";
        dflt = "The caller does not have permission. (mock fault)";
        break;
    case 404:
        st = "NOT_FOUND";
        dflt = "models/mock is not found for API version v1beta, or is not supported for "
               "generateContent. (mock fault)";
        break;
    case 409:
        st = "ABORTED";
        dflt = "The operation was aborted. (mock fault)";
        break;
    case 429:
        st = "RESOURCE_EXHAUSTED";
        dflt = "You exceeded your current quota, please check your plan and billing details. "
               "(mock fault)";
        break;
    case 499:
        st = "CANCELLED";
        dflt = "The operation was cancelled. (mock fault)";
        break;
    case 500:
        st = "INTERNAL";
        dflt = "An internal error has occurred. Please retry or report in "
               "https://developers.generativeai.google/guide/troubleshooting (mock fault)";
        break;
    case 503:
        st = "UNAVAILABLE";
        dflt = "The model is overloaded. Please try again later. (mock fault)";
        break;
    case 504:
        st = "DEADLINE_EXCEEDED";
        dflt = "The request timed out. Please try again. (mock fault)";
        break;
    default:
        if (status >= 500) {
            st = "INTERNAL";
            dflt = "An internal error has occurred. (mock fault)";
        }
        break;
    }
    if (message == NULL)
        message = dflt;
    int rc = gw_buf_printf(b, "{\"error\":{\"code\":%d,\"message\":", status);
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, ",\"status\":\"%s\"", st);
    if (status == 429 && retry_after >= 0)
        rc |= gw_buf_printf(b,
                            ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
                            "\"retryDelay\":\"%ds\"}]",
                            retry_after);
    rc |= gw_buf_appends(b, "}}");
    return rc ? GW_ELIMIT : 0;
}

/* error=KIND: Google's status word for the kind, and for a daily quota a
 * QuotaFailure naming it (as Google does), with the usual RetryInfo. */
static int gemini_kind_error(struct mock_call *c, struct gw_buf *b, int status,
                             const struct mock_error_text *t)
{
    const char *message = mock_error_message(c, t);
    int rc = gw_buf_printf(b, "{\"error\":{\"code\":%d,\"message\":", status);
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, ",\"status\":\"%s\"", t->type);
    if (t->code != NULL)
        rc |= gw_buf_printf(
            b,
            ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
            "\"violations\":[{\"quotaMetric\":\"generativelanguage.googleapis.com/"
            "generate_content_free_tier_requests\",\"quotaId\":\"%s\"}]},"
            "{\"@type\":\"type.googleapis.com/google.rpc.RetryInfo\","
            "\"retryDelay\":\"%ds\"}]",
            t->code, c->f.retry_after >= 0 ? c->f.retry_after : 1);
    rc |= gw_buf_appends(b, "}}");
    return rc ? GW_ELIMIT : 0;
}

static int gemini_error(struct mock_call *c, struct gw_buf *b, int status, const char *message)
{
    const struct mock_error_text *t =
        message == NULL ? mock_error_text(c->f.error, MOCK_FAM_GEMINI) : NULL;
    if (t != NULL)
        return gemini_kind_error(c, b, status, t);
    return mock_gemini_error_body(b, status, message, c->f.retry_after >= 0 ? c->f.retry_after : 1);
}

const struct mock_api mock_gemini_generate = {
    .family = MOCK_FAM_GEMINI,
    .log_name = "gemini.generate",
    .id_prefix = "mockresp",
    .stream_mode = MOCK_STREAM_NEVER,
    .cache_reads = 1,
    .auth = gemini_auth,
    .parse = generate_parse,
    .body = generate_body,
    .frame = NULL,
    .error = gemini_error,
    .log_extra = gemini_log_extra,
};

const struct mock_api mock_gemini_stream = {
    .family = MOCK_FAM_GEMINI,
    .log_name = "gemini.generate",
    .id_prefix = "mockresp",
    .stream_mode = MOCK_STREAM_ALWAYS,
    .cache_reads = 1,
    .auth = gemini_auth,
    .parse = generate_parse,
    .body = generate_body,
    .frame = generate_frame,
    .malform = generate_malform,
    .error = gemini_error,
    .log_extra = gemini_log_extra,
};

const struct mock_api mock_gemini_embed = {
    .family = MOCK_FAM_GEMINI,
    .log_name = "gemini.embed",
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_NEVER,
    .auth = gemini_auth,
    .parse = embed_parse,
    .body = embed_body,
    .frame = NULL,
    .error = gemini_error,
    .log_extra = gemini_log_extra,
};

const struct mock_api mock_gemini_batch_embed = {
    .family = MOCK_FAM_GEMINI,
    .log_name = "gemini.batch_embed",
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_NEVER,
    .auth = gemini_auth,
    .parse = batch_parse,
    .body = batch_body,
    .frame = NULL,
    .error = gemini_error,
    .log_extra = gemini_log_extra,
};
