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

static int append_usage(struct gw_buf *b, const struct mock_call *c, int out)
{
    return gw_buf_printf(b,
                         "{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":%d,\"audio_tokens\":0},"
                         "\"completion_tokens_details\":{\"reasoning_tokens\":0,\"audio_tokens\":0,"
                         "\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}",
                         c->input_tokens, out, c->input_tokens + out, c->cache_read);
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

static const char *chat_parse(struct mock_call *c, json_t *root)
{
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return "messages: field required (an array)";
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        c->input_tokens += 1 + mock_count_text(json_object_get(msg, "content"));
    }
    long long max = -1;
    if (mock_json_int(root, "max_completion_tokens", 0, 1 << 30, &max) < 0 ||
        (max < 0 && mock_json_int(root, "max_tokens", 0, 1 << 30, &max) < 0))
        return "max_tokens: must be a non-negative integer";
    json_t *so = json_object_get(root, "stream_options");
    c->include_usage = json_is_true(json_object_get(so, "include_usage"));

    int chunks = c->f.chunks >= 0 ? c->f.chunks : c->th->sh->cfg->chunks;
    c->ntext = chunks;
    c->finish = MOCK_FINISH_STOP;
    if (max >= 0 && max < chunks) {
        c->ntext = (int)max;
        c->finish = MOCK_FINISH_LENGTH;
    }

    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    const char *named = NULL;
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return NULL;
    if (json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0)
        return NULL;
    if (json_is_object(choice)) {
        named = json_string_value(json_object_get(json_object_get(choice, "function"), "name"));
    }
    return mock_pick_tools(c, tools, named, tool_get);
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
                            "\"assistant\",\"content\":");
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
            rc |= mock_append_tokens(b, 0, c->ntext);
        rc |= gw_buf_appends(b, "\"");
    }
    rc |= gw_buf_printf(b,
                        ",\"refusal\":null,\"annotations\":[]},\"logprobs\":null,"
                        "\"finish_reason\":\"%s\"}],\"usage\":",
                        finish_name(c));
    rc |= append_usage(b, c, mock_call_output_tokens(c));
    rc |= gw_buf_appends(b, ",\"service_tier\":\"default\",\"system_fingerprint\":null}");
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum { P_ROLE, P_TOOL_HEAD, P_CONTENT, P_FINISH, P_USAGE, P_DONE, P_END };

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
            c->phase = c->f.empty ? P_FINISH : c->ntools > 0 ? P_TOOL_HEAD : P_CONTENT;
            kind = MOCK_FRAME_PRE;
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
            c->off = 0;
            kind = c->idx == 0 ? MOCK_FRAME_PRE : MOCK_FRAME_MID;
            break;
        }
        case P_CONTENT:
            if (c->ntools > 0) {
                const struct mock_tool *t = &c->tools[c->idx];
                if (c->off >= t->args_len) {
                    c->idx++;
                    c->phase = c->idx < c->ntools ? P_TOOL_HEAD : P_FINISH;
                    continue;
                }
                size_t n = t->args_len - c->off;
                if (n > MOCK_ARG_PIECE)
                    n = MOCK_ARG_PIECE;
                rc |= chunk_open(c, out);
                rc |= gw_buf_printf(out,
                                    "{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":%d,"
                                    "\"function\":{\"arguments\":",
                                    c->idx);
                rc |= gw_json_escape(out, t->args + c->off, n);
                rc |= gw_buf_appends(out, "}}]");
                rc |= chunk_close(out, NULL);
                c->off += n;
            } else {
                if (c->off >= (size_t)c->ntext) {
                    c->phase = P_FINISH;
                    continue;
                }
                rc |= chunk_open(c, out);
                rc |= gw_buf_appends(out, "{\"index\":0,\"delta\":{\"content\":\"");
                rc |= mock_append_tokens(out, (int)c->off, (int)c->off + 1);
                rc |= gw_buf_appends(out, "\"");
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
            rc |= gw_buf_appends(out, ",\"choices\":[],\"usage\":");
            rc |= append_usage(out, c, c->emitted);
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

const struct mock_api mock_openai_chat = {
    .log_name = "openai.chat",
    .id_prefix = "chatcmpl-mock-",
    .anthropic_errors = 0,
    .parse = chat_parse,
    .body = chat_body,
    .frame = chat_frame,
};

/* ---- embeddings ---- */

static uint64_t fnv1a(const void *p, size_t len, uint64_t h)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < len; i++) {
        h ^= s[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

#define FNV_SEED 0xcbf29ce484222325ULL

/* One input: a string, or an array of token ids. Sets *hash and adds its
 * tokens to c->input_tokens. */
static int embed_input(struct mock_call *c, json_t *v, uint64_t *hash)
{
    if (json_is_string(v)) {
        *hash = fnv1a(json_string_value(v), json_string_length(v), FNV_SEED);
        c->input_tokens += mock_count_words(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v) || json_array_size(v) == 0)
        return -1;
    uint64_t h = FNV_SEED;
    size_t i;
    json_t *tok;
    json_array_foreach(v, i, tok)
    {
        if (!json_is_integer(tok))
            return -1;
        long long t = json_integer_value(tok);
        h = fnv1a(&t, sizeof(t), h);
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
    if (single)
        return embed_input(c, input, &c->hashes[0]) == 0 ? NULL : bad_input;
    for (size_t i = 0; i < n; i++) {
        if (embed_input(c, json_array_get(input, i), &c->hashes[i]) != 0)
            return bad_input;
    }
    return NULL;
}

static int base64_append(struct gw_buf *b, const unsigned char *p, size_t len)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char tmp[256];
    size_t t = 0;
    for (size_t i = 0; i < len; i += 3) {
        if (t > sizeof(tmp) - 4) {
            if (gw_buf_append(b, tmp, t) != 0)
                return GW_ELIMIT;
            t = 0;
        }
        unsigned v = (unsigned)p[i] << 16;
        if (i + 1 < len)
            v |= (unsigned)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        tmp[t++] = tbl[(v >> 18) & 63];
        tmp[t++] = tbl[(v >> 12) & 63];
        tmp[t++] = i + 1 < len ? tbl[(v >> 6) & 63] : '=';
        tmp[t++] = i + 2 < len ? tbl[v & 63] : '=';
    }
    return gw_buf_append(b, tmp, t);
}

/* Newton's method: enough for normalizing, and it keeps the mock off libm. */
static double root2(double x)
{
    if (x <= 0)
        return 0;
    double r = x > 1 ? x : 1;
    for (int i = 0; i < 64; i++) {
        double next = 0.5 * (r + x / r);
        if (next >= r)
            break;
        r = next;
    }
    return r;
}

/* A unit vector derived from the input's hash: equal inputs get equal
 * vectors, and the SDK's base64 decoding sees little-endian float32s. */
static int append_vector(struct gw_buf *b, const struct mock_call *c, uint64_t h)
{
    float v[MOCK_MAX_DIMENSIONS];
    double norm = 0;
    for (int j = 0; j < c->dimensions; j++) {
        uint64_t r = splitmix64(h + (uint64_t)j);
        v[j] = (float)((double)(r >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
        norm += (double)v[j] * v[j];
    }
    norm = norm > 0 ? root2(norm) : 1;
    for (int j = 0; j < c->dimensions; j++)
        v[j] = (float)(v[j] / norm);
    if (c->base64) {
        unsigned char bytes[MOCK_MAX_DIMENSIONS * 4];
        for (int j = 0; j < c->dimensions; j++) {
            uint32_t u;
            memcpy(&u, &v[j], 4);
            bytes[4 * j] = (unsigned char)u;
            bytes[4 * j + 1] = (unsigned char)(u >> 8);
            bytes[4 * j + 2] = (unsigned char)(u >> 16);
            bytes[4 * j + 3] = (unsigned char)(u >> 24);
        }
        int rc = gw_buf_appends(b, "\"");
        rc |= base64_append(b, bytes, (size_t)c->dimensions * 4);
        rc |= gw_buf_appends(b, "\"");
        return rc;
    }
    int rc = gw_buf_appends(b, "[");
    for (int j = 0; j < c->dimensions; j++)
        rc |= gw_buf_printf(b, j ? ",%.8g" : "%.8g", (double)v[j]);
    rc |= gw_buf_appends(b, "]");
    return rc;
}

static int embed_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < c->ninputs && rc == 0; i++) {
        rc |= gw_buf_printf(
            b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        rc |= append_vector(b, c, c->hashes[i]);
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
    .anthropic_errors = 0,
    .parse = embed_parse,
    .body = embed_body,
    .frame = NULL,
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
