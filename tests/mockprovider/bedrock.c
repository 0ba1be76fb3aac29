/*
 * AWS Bedrock Runtime: POST /model/{modelId}/converse (one JSON answer) and
 * POST /model/{modelId}/converse-stream, which answers
 * application/vnd.amazon.eventstream: binary messages, each
 *
 *   total length (4 bytes, big-endian), headers length (4),
 *   CRC-32 of those 8 bytes (4),
 *   headers: name length (1), name, value type (1; 7 = string),
 *            value length (2, big-endian), value,
 *   payload (the event's JSON),
 *   CRC-32 of everything before it (4).
 *
 * Headers are :event-type, :content-type (application/json) and
 * :message-type (event). The events: messageStart; for reasoning, text and
 * each tool use a content block (contentBlockStart only for tool uses, as
 * Bedrock sends it; contentBlockDelta...; contentBlockStop); messageStop
 * with the stopReason; metadata with usage and metrics. Each payload also
 * carries a "p" padding member, as AWS adds one to hide lengths; readers
 * ignore it.
 *
 * Requests must be SigV4-signed: the mock does not check the signature,
 * but refuses (403) a request whose Authorization header is not
 * "AWS4-HMAC-SHA256 ...", and logs what it saw. Errors are {"message":...}
 * with the exception name in x-amzn-ErrorType. Usage is Anthropic-like:
 * inputTokens excludes the cache reads and writes, totalTokens includes
 * them; outputTokens includes reasoning.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

enum { AUTH_HEADER = 1, AUTH_SIGV4 = 2, AUTH_DATE = 4 };

static const char *const ERROR_NS = ":http://internal.amazon.com/coral/com.amazon.bedrock/";

/* ---- auth ---- */

static void request_id(struct mock_call *c)
{
    char rid[48];
    snprintf(rid, sizeof(rid), "00000000-0000-4000-8000-%012llu",
             (unsigned long long)(c->n % 1000000000000ULL));
    (void)gw_http_add_header(c->req, "x-amzn-RequestId", rid);
}

static const char *bedrock_auth(struct mock_call *c)
{
    static const char sigv4[] = "AWS4-HMAC-SHA256 ";
    const char *a = gw_http_req_header(c->req, "authorization");
    request_id(c);
    c->auth_flags = (a != NULL ? AUTH_HEADER : 0) |
                    (gw_http_req_header(c->req, "x-amz-date") != NULL ? AUTH_DATE : 0);
    if (a != NULL && strncmp(a, sigv4, sizeof(sigv4) - 1) == 0)
        c->auth_flags |= AUTH_SIGV4;
    if (c->auth_flags & AUTH_SIGV4)
        return NULL;
    c->err_status = 403;
    return a == NULL ? "Missing Authentication Token"
                     : "Authorization header requires 'Credential', 'Signature' and "
                       "'SignedHeaders' parameters (AWS4-HMAC-SHA256).";
}

static int bedrock_log_extra(const struct mock_call *c, struct gw_buf *b)
{
    return gw_buf_printf(b, ",\"auth\":{\"authorization\":%s,\"sigv4\":%s,\"x_amz_date\":%s}",
                         c->auth_flags & AUTH_HEADER ? "true" : "false",
                         c->auth_flags & AUTH_SIGV4 ? "true" : "false",
                         c->auth_flags & AUTH_DATE ? "true" : "false");
}

/* ---- request ---- */

static int tool_get(json_t *tool, const char **name, json_t **schema)
{
    /* {"cachePoint":...} entries are not tools */
    json_t *spec = json_object_get(tool, "toolSpec");
    if (!json_is_object(spec))
        return 0;
    *name = json_string_value(json_object_get(spec, "name"));
    *schema = json_object_get(json_object_get(spec, "inputSchema"), "json");
    return *name != NULL;
}

/* Words of {text} blocks (a tool result's content included). */
static int block_words(json_t *block)
{
    json_t *text = json_object_get(block, "text");
    if (json_is_string(text))
        return mock_count_words(json_string_value(text), json_string_length(text));
    json_t *tr = json_object_get(block, "toolResult");
    int n = 0;
    size_t i;
    json_t *inner;
    json_array_foreach(json_object_get(tr, "content"), i, inner)
    {
        json_t *t = json_object_get(inner, "text");
        if (json_is_string(t))
            n += mock_count_words(json_string_value(t), json_string_length(t));
    }
    return n;
}

static const char *message_blocks(struct mock_call *c, json_t *content)
{
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block)
    {
        if (!json_is_object(block))
            return "messages.content: each block must be an object";
        c->input_tokens += block_words(block);
        if (json_object_get(block, "image") != NULL)
            c->seen.images++;
        json_t *doc = json_object_get(block, "document");
        if (doc != NULL) {
            /* Converse requires a name and a source (ValidationException). */
            if (!json_is_string(json_object_get(doc, "name")) ||
                !json_is_object(json_object_get(doc, "source")))
                return "messages.content.document: name and source are required";
            c->seen.files++;
        }
        if (json_object_get(block, "toolUse") != NULL)
            c->seen.tool_calls++;
        json_t *tr = json_object_get(block, "toolResult");
        if (tr != NULL) {
            if (!json_is_object(tr) || !json_is_string(json_object_get(tr, "toolUseId")))
                return "messages.content.toolResult: toolUseId is required";
            c->seen.tool_results++;
            size_t j;
            json_t *inner;
            json_array_foreach(json_object_get(tr, "content"), j, inner)
            {
                if (json_object_get(inner, "image") != NULL)
                    c->seen.images++;
            }
        }
    }
    return NULL;
}

static const char *converse_parse(struct mock_call *c, json_t *root)
{
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return "1 validation error detected: Value at 'messages' failed to satisfy constraint: "
               "Member must not be null";
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        json_t *content = json_object_get(msg, "content");
        if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "role")) ||
            !json_is_array(content))
            return "messages: each message needs a role and a content array";
        c->input_tokens += 1;
        c->seen.messages++;
        int before = c->seen.tool_results;
        const char *err = message_blocks(c, content);
        if (err != NULL)
            return err;
        mock_seen_turn(c, before);
    }
    json_t *system = json_object_get(root, "system");
    if (system != NULL && !json_is_array(system))
        return "system: must be an array of blocks";
    json_array_foreach(system, i, msg)
    {
        json_t *text = json_object_get(msg, "text");
        if (json_is_string(text)) {
            c->seen.system = 1;
            c->input_tokens += mock_count_words(json_string_value(text), json_string_length(text));
        }
    }
    /* serviceTier {type}: the answer says the tier that served it. */
    json_t *st = json_object_get(root, "serviceTier");
    if (st != NULL) {
        const char *ty = json_string_value(json_object_get(st, "type"));
        if (!ty || (strcmp(ty, "default") && strcmp(ty, "priority") && strcmp(ty, "flex") &&
                    strcmp(ty, "reserved")))
            return "serviceTier.type: must be default, priority, flex or reserved";
        c->tier = ty;
    }
    json_t *inf = json_object_get(root, "inferenceConfig");
    if (inf != NULL && !json_is_object(inf))
        return "inferenceConfig: must be an object";
    long long max = -1;
    if (mock_json_int(inf, "maxTokens", 1, 1 << 30, &max) < 0)
        return "inferenceConfig.maxTokens: must be an integer of at least 1";
    if (mock_seen_temperature(c, inf, "temperature") != 0)
        return "inferenceConfig.temperature: must be a number";
    json_t *stops = json_object_get(inf, "stopSequences");
    if (stops != NULL && !json_is_array(stops))
        return "inferenceConfig.stopSequences: must be an array";
    mock_plan_answer(c, max);
    /* Structured output: outputConfig.textFormat, the schema a JSON string. */
    json_t *tf = json_object_get(json_object_get(root, "outputConfig"), "textFormat");
    if (tf != NULL) {
        json_t *js = json_object_get(json_object_get(tf, "structure"), "jsonSchema");
        const char *ft = json_string_value(json_object_get(tf, "type"));
        json_t *schema = json_loads(json_string_value(json_object_get(js, "schema"))
                                        ? json_string_value(json_object_get(js, "schema"))
                                        : "",
                                    0, NULL);
        if (!ft || strcmp(ft, "json_schema") != 0 || !json_is_object(schema)) {
            json_decref(schema);
            return "outputConfig.textFormat: type must be json_schema, with "
                   "structure.jsonSchema.schema a JSON schema as a string";
        }
        mock_plan_json(c, schema);
        json_decref(schema);
    }
    mock_plan_role(c, system, messages);

    json_t *tc = json_object_get(root, "toolConfig");
    if (tc == NULL || json_is_null(tc))
        return NULL;
    json_t *tools = json_object_get(tc, "tools");
    if (!json_is_object(tc) || !json_is_array(tools))
        return "toolConfig.tools: must be an array";
    json_array_foreach(tools, i, msg)
    {
        if (json_object_get(msg, "toolSpec") != NULL)
            c->seen.tools++;
    }
    json_t *choice = json_object_get(tc, "toolChoice");
    const char *named = NULL;
    if (json_object_get(choice, "tool") != NULL) {
        named = json_string_value(json_object_get(json_object_get(choice, "tool"), "name"));
        if (named == NULL)
            return "toolConfig.toolChoice.tool.name: required";
    }
    return mock_pick_tools(c, tools, named, json_object_get(choice, "any") != NULL, tool_get);
}

/* ---- shared pieces ---- */

static long long latency_ms(const struct mock_call *c)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now_us = (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
    long long d = (now_us - gw_http_req_start_us(c->req)) / 1000;
    return d > 0 ? d : 0;
}

static int append_usage(struct gw_buf *b, const struct mock_call *c, int out)
{
    int writes = c->cache_write + c->cache_write_1h;
    int uncached = c->input_tokens - c->cache_read - writes;
    return gw_buf_printf(b,
                         "{\"inputTokens\":%d,\"outputTokens\":%d,\"totalTokens\":%d,"
                         "\"cacheReadInputTokens\":%d,\"cacheWriteInputTokens\":%d}",
                         uncached, out, uncached + out + c->cache_read + writes, c->cache_read,
                         writes);
}

static int tool_use_id(struct gw_buf *b, const struct mock_call *c, int i)
{
    return gw_buf_printf(b, "\"tooluse_mock_%llu_%d\"", (unsigned long long)c->n, i);
}

/* ---- complete answer ---- */

static int converse_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, "{\"output\":{\"message\":{\"role\":\"assistant\",\"content\":[");
    int first = 1;
    if (!c->f.empty && c->reasoning > 0) {
        rc |= gw_buf_appends(b, "{\"reasoningContent\":{\"reasoningText\":{\"text\":\"");
        rc |= mock_append_reasoning(b, 0, c->reasoning);
        rc |= gw_buf_appends(b, "\",\"signature\":\"" MOCK_SIGNATURE "\"}}}");
        first = 0;
    }
    if (c->f.empty) {
        /* no content */
    } else if (c->ntools > 0) {
        for (int i = 0; i < c->ntools; i++) {
            const struct mock_tool *t = &c->tools[i];
            rc |= gw_buf_appends(b, first ? "{\"toolUse\":{\"toolUseId\":"
                                          : ",{\"toolUse\":{"
                                            "\"toolUseId\":");
            rc |= tool_use_id(b, c, i);
            rc |= gw_buf_appends(b, ",\"name\":");
            rc |= gw_json_escape(b, t->name, strlen(t->name));
            rc |= gw_buf_appends(b, ",\"input\":");
            rc |= gw_buf_append(b, t->args, t->args_len);
            rc |= gw_buf_appends(b, "}}");
            first = 0;
        }
    } else if (c->ntext > 0 || first) {
        rc |= gw_buf_appends(b, first ? "{\"text\":\"" : ",{\"text\":\"");
        rc |= mock_append_answer(b, c, 0, c->ntext);
        rc |= gw_buf_appends(b, "\"}");
    }
    rc |= gw_buf_printf(b, "]}},\"stopReason\":\"%s\",\"usage\":", mock_anthropic_stop_reason(c));
    rc |= append_usage(b, c, mock_call_output_tokens(c));
    if (c->tier)
        rc |= gw_buf_printf(b, ",\"serviceTier\":{\"type\":\"%s\"}", c->tier);
    rc |= gw_buf_printf(b, ",\"metrics\":{\"latencyMs\":%lld}}", latency_ms(c));
    return rc ? GW_ELIMIT : 0;
}

/* ---- event-stream messages ---- */

static void put_be32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static int string_header(struct gw_buf *b, const char *name, const char *value)
{
    size_t nl = strlen(name), vl = strlen(value);
    char head[4];
    head[0] = (char)nl;
    int rc = gw_buf_append(b, head, 1);
    rc |= gw_buf_append(b, name, nl);
    head[0] = 7; /* string */
    head[1] = (char)(vl >> 8);
    head[2] = (char)vl;
    rc |= gw_buf_append(b, head, 3);
    rc |= gw_buf_append(b, value, vl);
    return rc;
}

/* Starts a message: the prelude (filled in by es_end) and the headers. The
 * caller then appends the payload's JSON. Returns where the message starts
 * through *start and the headers' length through *hlen. */
static int es_begin(struct gw_buf *b, const char *event, size_t *start, size_t *hlen)
{
    static const char zeros[12] = {0};
    *start = b->len;
    int rc = gw_buf_append(b, zeros, sizeof(zeros));
    size_t h0 = b->len;
    rc |= string_header(b, ":event-type", event);
    rc |= string_header(b, ":content-type", "application/json");
    rc |= string_header(b, ":message-type", "event");
    *hlen = b->len - h0;
    return rc;
}

/* Pads the payload (before its closing brace), fills in the prelude and
 * appends the message CRC. */
static int es_end(struct mock_call *c, struct gw_buf *b, size_t start, size_t hlen)
{
    static const char pad[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0";
    int rc =
        gw_buf_printf(b, ",\"p\":\"%.*s\"}", (int)(1 + (c->seq++ * 7) % (sizeof(pad) - 2)), pad);
    if (rc != 0)
        return rc;
    size_t total = b->len + 4 - start;
    char *m = b->data + start;
    put_be32(m, (uint32_t)total);
    put_be32(m + 4, (uint32_t)hlen);
    put_be32(m + 8, mock_crc32(0, m, 8));
    char crc[4];
    put_be32(crc, mock_crc32(0, m, total - 4));
    return gw_buf_append(b, crc, 4);
}

/* A corrupt message CRC: the Nth content event fails its checksum. */
static void bedrock_malform(struct mock_call *c, struct gw_buf *f)
{
    (void)c;
    if (f->len > 0)
        f->data[f->len - 1] ^= 0x5a;
}

enum {
    B_START,
    B_REASON,
    B_SIG,
    B_RSTOP,
    B_TEXT,
    B_TSTOP,
    B_TOOL_START,
    B_TOOL_DELTA,
    B_TOOL_STOP,
    B_MSG_STOP,
    B_META,
    B_END
};

static enum mock_frame converse_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    enum mock_frame kind = c->emitted == 0 ? MOCK_FRAME_PRE : MOCK_FRAME_MID;
    int base = c->reasoning > 0 ? 1 : 0;
    size_t start = 0, hlen = 0;
    for (;;) {
        switch (c->phase) {
        case B_START:
            rc |= es_begin(out, "messageStart", &start, &hlen);
            rc |= gw_buf_appends(out, "{\"role\":\"assistant\"");
            c->phase = c->f.empty         ? B_MSG_STOP
                       : c->reasoning > 0 ? B_REASON
                       : c->ntools > 0    ? B_TOOL_START
                       : c->ntext > 0     ? B_TEXT
                                          : B_MSG_STOP;
            break;
        case B_REASON:
            if (c->off >= (size_t)c->reasoning) {
                c->phase = B_SIG;
                continue;
            }
            rc |= es_begin(out, "contentBlockDelta", &start, &hlen);
            rc |= gw_buf_appends(out, "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":"
                                      "{\"text\":\"");
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"}}");
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case B_SIG:
            rc |= es_begin(out, "contentBlockDelta", &start, &hlen);
            rc |= gw_buf_appends(out, "{\"contentBlockIndex\":0,\"delta\":{\"reasoningContent\":"
                                      "{\"signature\":\"" MOCK_SIGNATURE "\"}}");
            c->phase = B_RSTOP;
            break;
        case B_RSTOP:
            rc |= es_begin(out, "contentBlockStop", &start, &hlen);
            rc |= gw_buf_appends(out, "{\"contentBlockIndex\":0");
            c->off = 0;
            c->phase = c->ntools > 0 ? B_TOOL_START : c->ntext > 0 ? B_TEXT : B_MSG_STOP;
            break;
        case B_TEXT:
            if (c->off >= (size_t)c->ntext) {
                c->phase = B_TSTOP;
                continue;
            }
            rc |= es_begin(out, "contentBlockDelta", &start, &hlen);
            rc |= gw_buf_printf(out, "{\"contentBlockIndex\":%d,\"delta\":{\"text\":\"", base);
            rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"}");
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case B_TSTOP:
            rc |= es_begin(out, "contentBlockStop", &start, &hlen);
            rc |= gw_buf_printf(out, "{\"contentBlockIndex\":%d", base);
            c->phase = B_MSG_STOP;
            kind = MOCK_FRAME_POST;
            break;
        case B_TOOL_START: {
            const struct mock_tool *t = &c->tools[c->idx];
            rc |= es_begin(out, "contentBlockStart", &start, &hlen);
            rc |= gw_buf_printf(out,
                                "{\"contentBlockIndex\":%d,\"start\":{\"toolUse\":{"
                                "\"toolUseId\":",
                                base + c->idx);
            rc |= tool_use_id(out, c, c->idx);
            rc |= gw_buf_appends(out, ",\"name\":");
            rc |= gw_json_escape(out, t->name, strlen(t->name));
            rc |= gw_buf_appends(out, "}}");
            c->off = 0;
            c->phase = B_TOOL_DELTA;
            break;
        }
        case B_TOOL_DELTA: {
            const struct mock_tool *t = &c->tools[c->idx];
            if (c->off >= t->args_len) {
                c->phase = B_TOOL_STOP;
                continue;
            }
            size_t len = t->args_len - c->off;
            if (len > MOCK_ARG_PIECE)
                len = MOCK_ARG_PIECE;
            rc |= es_begin(out, "contentBlockDelta", &start, &hlen);
            rc |= gw_buf_printf(
                out, "{\"contentBlockIndex\":%d,\"delta\":{\"toolUse\":{\"input\":", base + c->idx);
            rc |= gw_json_escape(out, t->args + c->off, len);
            rc |= gw_buf_appends(out, "}}");
            c->off += len;
            kind = MOCK_FRAME_CONTENT;
            break;
        }
        case B_TOOL_STOP:
            rc |= es_begin(out, "contentBlockStop", &start, &hlen);
            rc |= gw_buf_printf(out, "{\"contentBlockIndex\":%d", base + c->idx);
            c->idx++;
            c->phase = c->idx < c->ntools ? B_TOOL_START : B_MSG_STOP;
            kind = c->idx < c->ntools ? MOCK_FRAME_MID : MOCK_FRAME_POST;
            break;
        case B_MSG_STOP:
            rc |= es_begin(out, "messageStop", &start, &hlen);
            rc |= gw_buf_printf(out, "{\"stopReason\":\"%s\"", mock_anthropic_stop_reason(c));
            c->phase = B_META;
            kind = MOCK_FRAME_POST;
            break;
        case B_META:
            rc |= es_begin(out, "metadata", &start, &hlen);
            rc |= gw_buf_appends(out, "{\"usage\":");
            rc |= append_usage(out, c, c->billed);
            if (c->tier)
                rc |= gw_buf_printf(out, ",\"serviceTier\":{\"type\":\"%s\"}", c->tier);
            rc |= gw_buf_printf(out, ",\"metrics\":{\"latencyMs\":%lld}", latency_ms(c));
            c->phase = B_END;
            kind = MOCK_FRAME_POST;
            break;
        default:
            return MOCK_FRAME_END;
        }
        rc |= rc ? 0 : es_end(c, out, start, hlen);
        return rc ? MOCK_FRAME_END : kind;
    }
}

/* ---- errors ---- */

int mock_bedrock_error_body(struct gw_buf *b, int status, const char *message, const char **type)
{
    const char *t = "ValidationException";
    const char *dflt = "Malformed input request (mock fault).";
    switch (status) {
    case 401:
    case 403:
        t = "AccessDeniedException";
        dflt = "You don't have access to the model with the specified model ID. (mock fault)";
        break;
    case 404:
        t = "ResourceNotFoundException";
        dflt = "Could not resolve the foundation model from the provided model identifier. "
               "(mock fault)";
        break;
    case 408:
        t = "ModelTimeoutException";
        dflt = "Model has timed out in processing the request. (mock fault)";
        break;
    case 424:
        t = "ModelErrorException";
        dflt = "The model returned an error. (mock fault)";
        break;
    case 429:
        t = "ThrottlingException";
        dflt = "Too many requests, please wait before trying again. (mock fault)";
        break;
    case 503:
        t = "ServiceUnavailableException";
        dflt = "Bedrock is unable to process your request. (mock fault)";
        break;
    default:
        if (status >= 500) {
            t = "InternalServerException";
            dflt = "The system encountered an unexpected error during processing. Try your "
                   "request again. (mock fault)";
        }
        break;
    }
    if (message == NULL)
        message = dflt;
    *type = t;
    int rc = gw_buf_appends(b, "{\"message\":");
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_appends(b, "}");
    return rc ? GW_ELIMIT : 0;
}

static int converse_error(struct mock_call *c, struct gw_buf *b, int status, const char *message)
{
    const char *type = NULL;
    const struct mock_error_text *t =
        message == NULL ? mock_error_text(c->f.error, MOCK_FAM_BEDROCK) : NULL;
    int rc = mock_bedrock_error_body(b, status, t ? mock_error_message(c, t) : message, &type);
    if (t != NULL)
        type = t->type;
    if (status == 403 && (c->auth_flags & AUTH_SIGV4) == 0 && c->err_status == 403)
        type = c->auth_flags & AUTH_HEADER ? "IncompleteSignatureException"
                                           : "MissingAuthenticationTokenException";
    char value[160];
    snprintf(value, sizeof(value), "%s%s", type, ERROR_NS);
    (void)gw_http_add_header(c->req, "x-amzn-ErrorType", value);
    return rc;
}

const struct mock_api mock_bedrock_converse = {
    .log_name = "bedrock.converse",
    .family = MOCK_FAM_BEDROCK,
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_NEVER,
    .cache_reads = 1,
    .cache_writes = 1,
    .auth = bedrock_auth,
    .parse = converse_parse,
    .body = converse_body,
    .frame = NULL,
    .error = converse_error,
    .log_extra = bedrock_log_extra,
};

const struct mock_api mock_bedrock_converse_stream = {
    .log_name = "bedrock.converse",
    .family = MOCK_FAM_BEDROCK,
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_ALWAYS,
    .cache_reads = 1,
    .cache_writes = 1,
    .stream_type = "application/vnd.amazon.eventstream",
    .auth = bedrock_auth,
    .parse = converse_parse,
    .body = converse_body,
    .frame = converse_frame,
    .malform = bedrock_malform,
    .error = converse_error,
    .log_extra = bedrock_log_extra,
};
