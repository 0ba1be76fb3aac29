/*
 * The OpenAI wire format: POST /v1/chat/completions (JSON, or SSE with
 * "data: {chunk}" events, an optional usage chunk with "choices":[] and
 * "data: [DONE]") and POST /v1/embeddings. Shapes follow what the official
 * openai SDK reads, so the SDK's stream helpers accept a mock stream exactly
 * as they would a real one: a role chunk first, each tool call introduced
 * by a delta carrying index, id, type and function.name, then argument
 * pieces under the same index, then a finish chunk.
 */
#include <stdio.h>
#include <string.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

/* ---- shared pieces ---- */

/* out includes the reasoning tokens, as OpenAI's completion_tokens does. */
static int append_usage(struct gw_buf *b, const struct mock_call *c, int out, int reasoning)
{
    return gw_buf_printf(
        b,
        "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
        "\"prompt_tokens_details\":{\"cached_tokens\":%d,\"audio_tokens\":0},"
        "\"completion_tokens_details\":{\"reasoning_tokens\":%d,\"audio_tokens\":0,"
        "\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}",
        c->input_tokens, out, c->input_tokens + out, c->cache_read, reasoning);
}

static const char *finish_name(const struct mock_call *c)
{
    if (c->f.empty)
        return "stop";
    switch (c->finish) {
    case MOCK_FINISH_LENGTH:
        return "length";
    case MOCK_FINISH_TOOLS:
        return "tool_calls";
    default:
        return "stop";
    }
}

/* ---- request ---- */

static int tool_get(json_t *tool, const char **name, json_t **schema)
{
    json_t *fn = json_object_get(tool, "function");
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (!json_is_object(fn) || (type != NULL && strcmp(type, "function") != 0))
        return 0;
    *name = json_string_value(json_object_get(fn, "name"));
    *schema = json_object_get(fn, "parameters");
    return *name != NULL;
}

/* One message's share of the seen summary. */
static void chat_seen(struct mock_call *c, json_t *msg)
{
    const char *role = json_string_value(json_object_get(msg, "role"));
    if (role != NULL && (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0)) {
        c->seen.system = 1;
        return;
    }
    c->seen.messages++;
    if (role != NULL && (strcmp(role, "tool") == 0 || strcmp(role, "function") == 0))
        c->seen.tool_results++;
    json_t *calls = json_object_get(msg, "tool_calls");
    if (json_is_array(calls))
        c->seen.tool_calls += (int)json_array_size(calls);
    else if (json_is_object(json_object_get(msg, "function_call")))
        c->seen.tool_calls++;
    json_t *content = json_object_get(msg, "content");
    size_t i;
    json_t *part;
    if (json_is_array(content)) {
        json_array_foreach(content, i, part)
        {
            const char *type = json_string_value(json_object_get(part, "type"));
            if (type != NULL && strcmp(type, "image_url") == 0)
                c->seen.images++;
            if (type != NULL && (strcmp(type, "file") == 0 || strcmp(type, "input_audio") == 0))
                c->seen.files++;
        }
    }
}

static const char *chat_parse(struct mock_call *c, json_t *root)
{
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return "messages: field required (an array)";
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        if (!json_is_object(msg))
            return "messages: each message must be an object";
        c->input_tokens += 1 + mock_count_text(json_object_get(msg, "content"));
        int before = c->seen.tool_results;
        chat_seen(c, msg);
        mock_seen_turn(c, before);
    }
    long long max = -1;
    if (mock_json_int(root, "max_completion_tokens", 0, 1 << 30, &max) < 0 ||
        (max < 0 && mock_json_int(root, "max_tokens", 0, 1 << 30, &max) < 0))
        return "max_tokens: must be a non-negative integer";
    if (mock_seen_temperature(c, root, "temperature") != 0)
        return "temperature: must be a number";
    json_t *so = json_object_get(root, "stream_options");
    c->include_usage = json_is_true(json_object_get(so, "include_usage"));
    /* The tier that serves: the one asked for ("auto" is the project's
     * default, "default"); log probabilities when asked. */
    const char *tier = json_string_value(json_object_get(root, "service_tier"));
    if (tier && strcmp(tier, "auto") && strcmp(tier, "default") && strcmp(tier, "flex") &&
        strcmp(tier, "priority") && strcmp(tier, "scale"))
        return "service_tier: must be auto, default, flex, priority or scale";
    c->tier = tier && strcmp(tier, "auto") ? tier : "default";
    c->logprobs = json_is_true(json_object_get(root, "logprobs"));
    long long top = 0;
    if (mock_json_int(root, "top_logprobs", 0, 20, &top) < 0)
        return "top_logprobs: must be an integer from 0 to 20";
    c->top_logprobs = (int)top;

    mock_plan_answer(c, max);
    json_t *rf = json_object_get(root, "response_format");
    const char *rft = json_string_value(json_object_get(rf, "type"));
    if (rft && strcmp(rft, "json_schema") == 0) {
        json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!json_is_object(schema))
            return "response_format.json_schema.schema: must be an object";
        mock_plan_json(c, schema);
    }
    mock_plan_role(c, NULL, messages);

    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    const char *named = NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return NULL;
    c->seen.tools = (int)json_array_size(tools);
    if (json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0)
        return NULL;
    if (json_is_object(choice)) {
        named = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    }
    int forced = json_is_string(choice) && strcmp(json_string_value(choice), "required") == 0;
    return mock_pick_tools(c, tools, named, forced, tool_get);
}

/* ---- complete answer ---- */

static int chat_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = 0;
    rc |= gw_buf_printf(b,
                        "{\"id\":\"chatcmpl-mock-%llu\",\"object\":\"chat.completion\","
                        "\"created\":%lld,\"model\":",
                        (unsigned long long)c->n, c->created);
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_appends(b, ",\"choices\":[{\"index\":0,\"message\":{\"role\":"
                            "\"assistant\",");
    if (c->reasoning > 0 && !c->f.empty) {
        /* DeepSeek's field, which OpenAI-compatible reasoning models share. */
        rc |= gw_buf_appends(b, "\"reasoning_content\":\"");
        rc |= mock_append_reasoning(b, 0, c->reasoning);
        rc |= gw_buf_appends(b, "\",");
    }
    rc |= gw_buf_appends(b, "\"content\":");
    if (c->ntools > 0 && !c->f.empty) {
        rc |= gw_buf_appends(b, "null,\"tool_calls\":[");
        for (int i = 0; i < c->ntools; i++) {
            const struct mock_tool *t = &c->tools[i];
            rc |= gw_buf_printf(b,
                                "%s{\"id\":\"call_mock_%llu_%d\",\"type\":\"function\","
                                "\"function\":{\"name\":",
                                i ? "," : "", (unsigned long long)c->n, i);
            rc |= gw_json_escape(b, t->name, strlen(t->name));
            rc |= gw_buf_appends(b, ",\"arguments\":");
            rc |= gw_json_escape(b, t->args, t->args_len);
            rc |= gw_buf_appends(b, "}}");
        }
        rc |= gw_buf_appends(b, "]");
    } else {
        rc |= gw_buf_appends(b, "\"");
        if (!c->f.empty)
            rc |= mock_append_answer(b, c, 0, c->ntext);
        rc |= gw_buf_appends(b, "\"");
    }
    rc |= gw_buf_appends(b, ",\"refusal\":null,\"annotations\":[]},\"logprobs\":");
    if (c->logprobs && c->ntools == 0 && !c->f.empty) {
        rc |= gw_buf_appends(b, "{\"content\":");
        rc |= mock_append_logprobs_openai(b, c, 0, c->ntext);
        rc |= gw_buf_appends(b, "}");
    } else
        rc |= gw_buf_appends(b, "null");
    rc |= gw_buf_printf(b, ",\"finish_reason\":\"%s\"}],\"usage\":", finish_name(c));
    rc |= append_usage(b, c, mock_call_output_tokens(c), c->f.empty ? 0 : c->reasoning);
    rc |= gw_buf_printf(b, ",\"service_tier\":\"%s\",\"system_fingerprint\":null}", c->tier);
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum { P_ROLE, P_REASON, P_TOOL_HEAD, P_CONTENT, P_FINISH, P_USAGE, P_DONE, P_END };

/* "data: {...,"choices":[" is the same for every chunk of a stream, so it
 * is rendered once. Chunks carry "usage":null when usage was asked for,
 * as OpenAI's do. */
static int chunk_open(struct mock_call *c, struct gw_buf *out)
{
    if (c->prefix == NULL) {
        struct gw_buf p;
        gw_buf_init(&p, MOCK_OUT_MAX);
        int rc = gw_buf_printf(&p,
                               "data: {\"id\":\"chatcmpl-mock-%llu\","
                               "\"object\":\"chat.completion.chunk\",\"created\":%lld,"
                               "\"model\":",
                               (unsigned long long)c->n, c->created);
        rc |= gw_json_escape(&p, c->model, strlen(c->model));
        rc |= gw_buf_printf(&p, ",\"service_tier\":\"%s\"", c->tier);
        rc |= gw_buf_appends(&p,
                             c->include_usage ? ",\"usage\":null,\"choices\":[" : ",\"choices\":[");
        if (rc == 0)
            c->prefix = gw_pool_strndup(c->pool, p.data, p.len);
        c->prefix_len = p.len;
        gw_buf_free(&p);
        if (c->prefix == NULL)
            return GW_ENOMEM;
    }
    return gw_buf_append(out, c->prefix, c->prefix_len);
}

static int chunk_close(struct gw_buf *out, const char *finish)
{
    if (finish == NULL)
        return gw_buf_appends(out, "},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    return gw_buf_printf(out, "},\"logprobs\":null,\"finish_reason\":\"%s\"}]}\n\n", finish);
}

/* The next piece (at most MOCK_ARG_PIECE bytes) of call i's arguments. */
static int args_piece(struct mock_call *c, struct gw_buf *out, int i)
{
    struct mock_tool *t = &c->tools[i];
    size_t n = t->args_len - t->sent;
    if (n > MOCK_ARG_PIECE)
        n = MOCK_ARG_PIECE;
    int rc = chunk_open(c, out);
    rc |= gw_buf_printf(out,
                        "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":%d,"
                        "\"function\":{\"arguments\":",
                        i);
    rc |= gw_json_escape(out, t->args + t->sent, n);
    rc |= gw_buf_appends(out, "}}]");
    rc |= chunk_close(out, NULL);
    t->sent += n;
    return rc;
}

static enum mock_frame chat_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    enum mock_frame kind = MOCK_FRAME_POST;
    for (;;) {
        switch (c->phase) {
        case P_ROLE:
            rc |= chunk_open(c, out);
            rc |= gw_buf_appends(out, c->ntools > 0 && !c->f.empty
                                          ? "{\"index\":0,\"delta\":{\"role\":\"assistant\","
                                            "\"content\":null,\"refusal\":null"
                                          : "{\"index\":0,\"delta\":{\"role\":\"assistant\","
                                            "\"content\":\"\",\"refusal\":null");
            rc |= chunk_close(out, NULL);
            c->phase = c->f.empty         ? P_FINISH
                       : c->reasoning > 0 ? P_REASON
                       : c->ntools > 0    ? P_TOOL_HEAD
                                          : P_CONTENT;
            kind = MOCK_FRAME_PRE;
            break;
        case P_REASON:
            if (c->off >= (size_t)c->reasoning) {
                c->off = 0;
                c->phase = c->ntools > 0 ? P_TOOL_HEAD : P_CONTENT;
                continue;
            }
            rc |= chunk_open(c, out);
            rc |= gw_buf_appends(out, "{\"index\":0,\"delta\":{\"reasoning_content\":\"");
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"");
            rc |= chunk_close(out, NULL);
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case P_TOOL_HEAD: {
            const struct mock_tool *t = &c->tools[c->idx];
            rc |= chunk_open(c, out);
            rc |= gw_buf_printf(out,
                                "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":%d,"
                                "\"id\":\"call_mock_%llu_%d\",\"type\":\"function\","
                                "\"function\":{\"name\":",
                                c->idx, (unsigned long long)c->n, c->idx);
            rc |= gw_json_escape(out, t->name, strlen(t->name));
            rc |= gw_buf_appends(out, ",\"arguments\":\"\"}}]");
            rc |= chunk_close(out, NULL);
            c->phase = P_CONTENT;
            /* interleave: every call starts, then their arguments alternate */
            if (c->f.interleave && ++c->idx < c->ntools)
                c->phase = P_TOOL_HEAD;
            else if (c->f.interleave)
                c->idx = 0;
            kind = c->emitted == 0 ? MOCK_FRAME_PRE : MOCK_FRAME_MID;
            break;
        }
        case P_CONTENT:
            if (c->ntools > 0) {
                /* The open call's next piece; interleave: the next call's
                 * in turn. */
                int i = c->f.interleave ? mock_next_interleaved(c) : c->idx;
                if (i < 0) { /* interleave: every call's arguments sent */
                    c->phase = P_FINISH;
                    continue;
                }
                if (c->tools[i].sent >= c->tools[i].args_len) {
                    c->idx++;
                    c->phase = c->idx < c->ntools ? P_TOOL_HEAD : P_FINISH;
                    continue;
                }
                rc |= args_piece(c, out, i);
                if (c->f.interleave)
                    c->idx = (i + 1) % c->ntools;
            } else {
                if (c->off >= (size_t)c->ntext) {
                    c->phase = P_FINISH;
                    continue;
                }
                rc |= chunk_open(c, out);
                rc |= gw_buf_appends(out, "{\"index\":0,\"delta\":{\"content\":\"");
                rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
                rc |= gw_buf_appends(out, "\"");
                if (c->logprobs) {
                    rc |= gw_buf_appends(out, "},\"logprobs\":{\"content\":");
                    rc |= mock_append_logprobs_openai(out, c, (int)c->off, (int)c->off + 1);
                    rc |= gw_buf_appends(out, "},\"finish_reason\":null}]}\n\n");
                } else
                    rc |= chunk_close(out, NULL);
                c->off++;
            }
            kind = MOCK_FRAME_CONTENT;
            break;
        case P_FINISH:
            rc |= chunk_open(c, out);
            rc |= gw_buf_appends(out, "{\"index\":0,\"delta\":{");
            rc |= chunk_close(out, finish_name(c));
            c->phase = c->include_usage ? P_USAGE : P_DONE;
            break;
        case P_USAGE:
            rc |= gw_buf_printf(out,
                                "data: {\"id\":\"chatcmpl-mock-%llu\","
                                "\"object\":\"chat.completion.chunk\",\"created\":%lld,"
                                "\"model\":",
                                (unsigned long long)c->n, c->created);
            rc |= gw_json_escape(out, c->model, strlen(c->model));
            rc |= gw_buf_printf(out, ",\"service_tier\":\"%s\"", c->tier);
            rc |= gw_buf_appends(out, ",\"choices\":[],\"usage\":");
            rc |= append_usage(out, c, c->billed, mock_call_reasoning_billed(c));
            rc |= gw_buf_appends(out, "}\n\n");
            c->phase = P_DONE;
            break;
        case P_DONE:
            rc |= gw_buf_appends(out, "data: [DONE]\n\n");
            c->phase = P_END;
            break;
        default:
            return MOCK_FRAME_END;
        }
        /* A frame that does not fit its ceiling ends the stream early
         * rather than sending half an event. */
        return rc ? MOCK_FRAME_END : kind;
    }
}

static int chat_error(struct mock_call *c, struct gw_buf *b, int status, const char *message)
{
    char rid[40];
    snprintf(rid, sizeof(rid), "req_mock_%llu", (unsigned long long)c->n);
    (void)gw_http_add_header(c->req, "x-request-id", rid);
    const struct mock_error_text *t =
        message == NULL ? mock_error_text(c->f.error, MOCK_FAM_OPENAI) : NULL;
    if (t == NULL)
        return mock_openai_error_body(b, status, message, NULL);
    message = mock_error_message(c, t);
    int rc = gw_buf_appends(b, "{\"error\":{\"message\":");
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, ",\"type\":\"%s\",\"param\":", t->type);
    rc |= t->param ? gw_buf_printf(b, "\"%s\"", t->param) : gw_buf_appends(b, "null");
    rc |= gw_buf_appends(b, ",\"code\":");
    rc |= t->code ? gw_buf_printf(b, "\"%s\"}}", t->code) : gw_buf_appends(b, "null}}");
    return rc ? GW_ELIMIT : 0;
}

const struct mock_api mock_openai_chat = {
    .log_name = "openai.chat",
    .id_prefix = "chatcmpl-mock-",
    .stream_mode = MOCK_STREAM_BODY,
    .cache_reads = 1,
    .retry_after_always = 1,
    .parse = chat_parse,
    .body = chat_body,
    .frame = chat_frame,
    .error = chat_error,
};

/* The Responses API shares OpenAI's error shape and request-id header. */
int mock_openai_call_error(struct mock_call *c, struct gw_buf *b, int status, const char *message)
{
    return chat_error(c, b, status, message);
}

/* ---- embeddings ---- */

/* One input: a string, or an array of token ids. Sets *hash and adds its
 * tokens to c->input_tokens. */
static int embed_input(struct mock_call *c, json_t *v, uint64_t *hash)
{
    if (json_is_string(v)) {
        *hash = mock_embed_hash(json_string_value(v), json_string_length(v));
        c->input_tokens += mock_count_words(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return -1;
    uint64_t h = mock_embed_hash("", 0);
    size_t i;
    json_t *tok;
    json_array_foreach(v, i, tok)
    {
        if (!json_is_integer(tok))
            return -1;
        long long t = json_integer_value(tok);
        h = mock_embed_hash_more(&t, sizeof(t), h);
    }
    *hash = h;
    c->input_tokens += (int)json_array_size(v);
    return 0;
}

static const char *embed_parse(struct mock_call *c, json_t *root)
{
    static const char bad_input[] =
        "input: a string, an array of strings, or token arrays (at most 2048)";
    json_t *input = json_object_get(root, "input");
    long long dims = 8;
    if (mock_json_int(root, "dimensions", 1, MOCK_MAX_DIMENSIONS, &dims) < 0)
        return "dimensions: an integer in [1, 4096]";
    c->dimensions = (int)dims;
    json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt != NULL && !json_is_null(fmt)) {
        const char *f = json_string_value(fmt);
        if (f == NULL || (strcmp(f, "float") != 0 && strcmp(f, "base64") != 0))
            return "encoding_format: 'float' or 'base64'";
        c->base64 = strcmp(f, "base64") == 0;
    }
    /* A flat array of integers is one tokenized input; any other array is a
     * list of inputs. */
    int single = json_is_string(input) || (json_is_array(input) && json_array_size(input) > 0 &&
                                           json_is_integer(json_array_get(input, 0)));
    size_t n = single ? 1 : json_array_size(input);
    if ((!single && !json_is_array(input)) || n == 0 || n > MOCK_MAX_EMBED_INPUTS)
        return bad_input;
    c->hashes = gw_pool_alloc(c->pool, n * sizeof(uint64_t));
    if (c->hashes == NULL)
        return "mock: out of memory";
    c->ninputs = (int)n;
    c->seen.messages = (int)n;
    if (single)
        return embed_input(c, input, &c->hashes[0]) == 0 ? NULL : bad_input;
    for (size_t i = 0; i < n; i++) {
        if (embed_input(c, json_array_get(input, i), &c->hashes[i]) != 0)
            return bad_input;
    }
    return NULL;
}

static int embed_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < c->ninputs && rc == 0; i++) {
        rc |= gw_buf_printf(
            b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        rc |= mock_append_vector(b, c->dimensions, c->hashes[i], c->base64);
        rc |= gw_buf_appends(b, "}");
    }
    rc |= gw_buf_appends(b, "],\"model\":");
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_printf(b, ",\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}",
                        c->input_tokens, c->input_tokens);
    return rc ? GW_ELIMIT : 0;
}

const struct mock_api mock_openai_embeddings = {
    .log_name = "openai.embeddings",
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_NEVER,
    .retry_after_always = 1,
    .parse = embed_parse,
    .body = embed_body,
    .frame = NULL,
    .error = chat_error,
};

/* ---- errors ---- */

int mock_openai_error_body(struct gw_buf *b, int status, const char *message,
                           const char *given_code)
{
    const char *type = "invalid_request_error", *code = NULL;
    const char *dflt = "Invalid request (mock fault).";
    switch (status) {
    case 401:
        code = "invalid_api_key";
        dflt = "Incorrect API key provided (mock fault).";
        break;
    case 403:
        code = "unsupported_country_region_territory";
        dflt = "Country, region, or territory not supported (mock fault).";
        break;
    case 404:
        code = "model_not_found";
        dflt = "The model does not exist or you do not have access to it (mock fault).";
        break;
    case 413:
        code = "request_too_large";
        dflt = "Request too large (mock fault).";
        break;
    case 429:
        type = "requests";
        code = "rate_limit_exceeded";
        dflt = "Rate limit reached for requests (mock fault).";
        break;
    default:
        if (status >= 500) {
            type = "server_error";
            dflt = status == 503 ? "The engine is currently overloaded, please try "
                                   "again later. (mock fault)"
                                 : "The server had an error while processing your "
                                   "request. Sorry about that! (mock fault)";
        }
        break;
    }
    if (message == NULL)
        message = dflt;
    else
        code = given_code;
    int rc = gw_buf_appends(b, "{\"error\":{\"message\":");
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, ",\"type\":\"%s\",\"param\":null,\"code\":", type);
    rc |= code ? gw_buf_printf(b, "\"%s\"}}", code) : gw_buf_appends(b, "null}}");
    return rc ? GW_ELIMIT : 0;
}
