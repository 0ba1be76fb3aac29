/*
 * The Anthropic wire format: POST /v1/messages, as JSON or as the SSE event
 * sequence message_start, content_block_start, ping, content_block_delta...,
 * content_block_stop, message_delta, message_stop. Each SSE event carries
 * both an "event:" line and the same "type" in its data, as Anthropic's do;
 * the SDK's MessageStream rebuilds the message from them, so usage must be
 * complete in message_start (input side) and message_delta (output side).
 *
 * Anthropic counts input_tokens without the cached part: input_tokens +
 * cache_read_input_tokens + cache_creation_input_tokens is the whole
 * prompt, and cache_creation splits the writes into the 5-minute and
 * 1-hour tiers. The mock's own accounting (c->input_tokens) is the whole
 * prompt. Thinking (reasoning=N) is a first "thinking" block, streamed as
 * thinking_delta events and one signature_delta; its tokens are part of
 * output_tokens, as Anthropic bills them.
 */
#include <stdio.h>
#include <string.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

const char *mock_anthropic_stop_reason(const struct mock_call *c)
{
    if (c->f.empty)
        return "end_turn";
    switch (c->finish) {
    case MOCK_FINISH_LENGTH:
        return "max_tokens";
    case MOCK_FINISH_TOOLS:
        return "tool_use";
    default:
        return "end_turn";
    }
}

static int uncached_input(const struct mock_call *c)
{
    return c->input_tokens - c->cache_read - c->cache_write - c->cache_write_1h;
}

/* The usage object of a complete message (and of message_start). */
static int append_usage(struct gw_buf *b, const struct mock_call *c, int out)
{
    return gw_buf_printf(b,
                         "{\"input_tokens\":%d,\"cache_creation_input_tokens\":%d,"
                         "\"cache_read_input_tokens\":%d,\"cache_creation\":"
                         "{\"ephemeral_5m_input_tokens\":%d,\"ephemeral_1h_input_tokens\":%d},"
                         "\"output_tokens\":%d,\"service_tier\":\"standard\"}",
                         uncached_input(c), c->cache_write + c->cache_write_1h, c->cache_read,
                         c->cache_write, c->cache_write_1h, out);
}

/* ---- request ---- */

static int tool_get(json_t *tool, const char **name, json_t **schema)
{
    /* Server tools (web search, ...) have no input_schema: the mock cannot
     * "call" them, so they are skipped. */
    *schema = json_object_get(tool, "input_schema");
    *name = json_string_value(json_object_get(tool, "name"));
    return *name != NULL && json_is_object(*schema);
}

/* Blocks of one message (or of a tool_result's content) for the seen
 * summary; depth-limited like every walk over request JSON. */
static void blocks_seen(struct mock_call *c, json_t *content, int depth)
{
    if (!json_is_array(content) || depth > 4)
        return;
    size_t i;
    json_t *block;
    json_array_foreach(content, i, block)
    {
        const char *type = json_string_value(json_object_get(block, "type"));
        if (type == NULL)
            continue;
        if (strcmp(type, "image") == 0) {
            c->seen.images++;
        } else if (strcmp(type, "document") == 0) {
            c->seen.files++;
        } else if (strcmp(type, "tool_use") == 0) {
            c->seen.tool_calls++;
        } else if (strcmp(type, "tool_result") == 0) {
            c->seen.tool_results++;
            blocks_seen(c, json_object_get(block, "content"), depth + 1);
        }
    }
}

/* Citations, as Anthropic gives them: a document block with
 * citations.enabled (char_location), or a web_search server tool
 * (web_search_result_location). The mock's own hook: "[cite]" in the
 * last message's text asks for a web citation too, so a test can get one
 * through a translation that carries neither. */
static void plan_citations(struct mock_call *c, json_t *root)
{
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(root, "tools"), i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (type && strncmp(type, "web_search_", 11) == 0)
            c->cite = MOCK_CITE_WEB;
    }
    json_t *msgs = json_object_get(root, "messages");
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *content = json_object_get(last, "content");
    if (json_is_string(content) && strstr(json_string_value(content), "[cite]"))
        c->cite = MOCK_CITE_WEB;
    json_t *b;
    json_array_foreach(content, i, b)
    {
        const char *type = json_string_value(json_object_get(b, "type"));
        const char *text = json_string_value(json_object_get(b, "text"));
        if (type && strcmp(type, "text") == 0 && text && strstr(text, "[cite]"))
            c->cite = MOCK_CITE_WEB;
        if (type && strcmp(type, "document") == 0 &&
            json_is_true(json_object_get(json_object_get(b, "citations"), "enabled")))
            c->cite = c->cite ? c->cite : MOCK_CITE_DOCUMENT;
    }
}

static const char *messages_parse(struct mock_call *c, json_t *root)
{
    json_t *messages = json_object_get(root, "messages");
    if (!json_is_array(messages))
        return "messages: Field required";
    long long max;
    if (mock_json_int(root, "max_tokens", 0, 1 << 30, &max) != 1)
        return "max_tokens: Field required";
    if (mock_seen_temperature(c, root, "temperature") != 0)
        return "temperature: Input should be a valid number";
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        if (!json_is_object(msg))
            return "messages: Input should be a valid dictionary";
        c->input_tokens += 1 + mock_count_text(json_object_get(msg, "content"));
        c->seen.messages++;
        int before = c->seen.tool_results;
        blocks_seen(c, json_object_get(msg, "content"), 0);
        mock_seen_turn(c, before);
    }
    json_t *system = json_object_get(root, "system");
    c->input_tokens += mock_count_text(system);
    c->seen.system = (json_is_string(system) && json_string_length(system) > 0) ||
                     (json_is_array(system) && json_array_size(system) > 0);

    mock_plan_answer(c, max);
    json_t *oc = json_object_get(root, "output_config");
    json_t *fmt = json_object_get(oc, "format");
    if (oc && !json_is_object(oc))
        return "output_config: Input should be a valid dictionary";
    if (fmt && !json_is_null(fmt)) {
        const char *ft = json_string_value(json_object_get(fmt, "type"));
        if (!ft || strcmp(ft, "json_schema") != 0)
            return "output_config.format.type: Input should be 'json_schema'";
        if (!json_is_object(json_object_get(fmt, "schema")))
            return "output_config.format.schema: Field required";
        mock_plan_json(c, json_object_get(fmt, "schema"));
    }
    mock_plan_role(c, system, messages);
    plan_citations(c, root);

    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return NULL;
    c->seen.tools = (int)json_array_size(tools);
    const char *type = json_string_value(json_object_get(choice, "type"));
    if (type != NULL && strcmp(type, "none") == 0)
        return NULL;
    const char *named = NULL;
    if (type != NULL && strcmp(type, "tool") == 0) {
        named = json_string_value(json_object_get(choice, "name"));
        if (named == NULL)
            return "tool_choice.name: Field required";
    }
    return mock_pick_tools(c, tools, named, type != NULL && strcmp(type, "any") == 0, tool_get);
}

/* ---- complete answer ---- */

static int append_tool_use(struct gw_buf *b, const struct mock_call *c, int i, int with_input)
{
    const struct mock_tool *t = &c->tools[i];
    int rc = gw_buf_printf(b, "{\"type\":\"tool_use\",\"id\":\"toolu_mock_%llu_%d\",\"name\":",
                           (unsigned long long)c->n, i);
    rc |= gw_json_escape(b, t->name, strlen(t->name));
    rc |= gw_buf_appends(b, ",\"input\":");
    rc |= with_input ? gw_buf_append(b, t->args, t->args_len) : gw_buf_appends(b, "{}");
    rc |= gw_buf_appends(b, "}");
    return rc;
}

static int message_head(struct gw_buf *b, const struct mock_call *c)
{
    int rc = gw_buf_printf(b,
                           "{\"id\":\"msg_mock_%llu\",\"type\":\"message\","
                           "\"role\":\"assistant\",\"model\":",
                           (unsigned long long)c->n);
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    return rc;
}

static int messages_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = message_head(b, c);
    rc |= gw_buf_appends(b, ",\"content\":[");
    if (c->reasoning > 0 && !c->f.empty) {
        rc |= gw_buf_appends(b, "{\"type\":\"thinking\",\"thinking\":\"");
        rc |= mock_append_reasoning(b, 0, c->reasoning);
        rc |= gw_buf_appends(b, "\",\"signature\":\"" MOCK_SIGNATURE "\"}");
        if (c->ntools > 0 || c->ntext > 0)
            rc |= gw_buf_appends(b, ",");
    }
    if (c->f.empty) {
        /* no content blocks at all */
    } else if (c->ntools > 0) {
        for (int i = 0; i < c->ntools; i++) {
            if (i)
                rc |= gw_buf_appends(b, ",");
            rc |= append_tool_use(b, c, i, 1);
        }
    } else if (c->ntext == 0 && c->reasoning > 0) {
        /* max_tokens=0 after thinking: the thinking block alone */
    } else {
        rc |= gw_buf_appends(b, "{\"type\":\"text\",\"text\":\"");
        rc |= mock_append_answer(b, c, 0, c->ntext);
        if (mock_citation_json(c))
            rc |= gw_buf_printf(b, "\",\"citations\":[%s]}", mock_citation_json(c));
        else
            rc |= gw_buf_appends(b, "\"}");
    }
    rc |= gw_buf_printf(b, "],\"stop_reason\":\"%s\",\"stop_sequence\":null,\"usage\":",
                        mock_anthropic_stop_reason(c));
    rc |= append_usage(b, c, mock_call_output_tokens(c));
    rc |= gw_buf_appends(b, "}");
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum {
    A_START,
    A_THINK_START,
    A_THINK_DELTA,
    A_THINK_SIG,
    A_THINK_STOP,
    A_BLOCK_START,
    A_PING,
    A_DELTA,
    A_BLOCK_STOP,
    A_MSG_DELTA,
    A_MSG_STOP,
    A_END
};

static int event_open(struct gw_buf *b, const char *type)
{
    return gw_buf_printf(b, "event: %s\ndata: {\"type\":\"%s\"", type, type);
}

/* The ping follows the first content_block_start, as Anthropic's does. */
static int ping(struct gw_buf *b)
{
    int rc = event_open(b, "ping");
    rc |= gw_buf_appends(b, "}\n\n");
    return rc;
}

static enum mock_frame messages_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    enum mock_frame kind = MOCK_FRAME_PRE;
    /* content blocks: [thinking], then text or the tool_use blocks */
    int base = c->reasoning > 0 ? 1 : 0;
    for (;;) {
        switch (c->phase) {
        case A_START: {
            int out_tokens = mock_call_output_tokens(c);
            rc |= event_open(out, "message_start");
            rc |= gw_buf_appends(out, ",\"message\":");
            rc |= message_head(out, c);
            rc |= gw_buf_appends(out, ",\"content\":[],\"stop_reason\":null,"
                                      "\"stop_sequence\":null,\"usage\":");
            /* Like Anthropic, an early output count of 1: the final count
             * comes in message_delta and replaces it. */
            rc |= append_usage(out, c, out_tokens > 0 ? 1 : 0);
            rc |= gw_buf_appends(out, "}}\n\n");
            c->phase = c->f.empty ? A_MSG_DELTA : c->reasoning > 0 ? A_THINK_START : A_BLOCK_START;
            kind = MOCK_FRAME_PRE;
            break;
        }
        case A_THINK_START:
            rc |= event_open(out, "content_block_start");
            rc |= gw_buf_appends(out, ",\"index\":0,\"content_block\":{\"type\":\"thinking\","
                                      "\"thinking\":\"\",\"signature\":\"\"}}\n\n");
            rc |= ping(out);
            c->off = 0;
            c->phase = A_THINK_DELTA;
            kind = MOCK_FRAME_PRE;
            break;
        case A_THINK_DELTA:
            if (c->off >= (size_t)c->reasoning) {
                c->phase = A_THINK_SIG;
                continue;
            }
            rc |= event_open(out, "content_block_delta");
            rc |= gw_buf_appends(out, ",\"index\":0,\"delta\":{\"type\":"
                                      "\"thinking_delta\",\"thinking\":\"");
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"}}\n\n");
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case A_THINK_SIG:
            rc |= event_open(out, "content_block_delta");
            rc |= gw_buf_appends(out, ",\"index\":0,\"delta\":{\"type\":\"signature_delta\","
                                      "\"signature\":\"" MOCK_SIGNATURE "\"}}\n\n");
            c->phase = A_THINK_STOP;
            kind = MOCK_FRAME_MID;
            break;
        case A_THINK_STOP:
            rc |= event_open(out, "content_block_stop");
            rc |= gw_buf_appends(out, ",\"index\":0}\n\n");
            c->idx = 0;
            /* max_tokens=0: the thinking block is the whole answer */
            c->phase = c->ntools == 0 && c->ntext == 0 ? A_MSG_DELTA : A_BLOCK_START;
            kind = MOCK_FRAME_MID;
            break;
        case A_BLOCK_START:
            rc |= event_open(out, "content_block_start");
            rc |= gw_buf_printf(out, ",\"index\":%d,\"content_block\":", base + c->idx);
            if (c->ntools > 0)
                rc |= append_tool_use(out, c, c->idx, 0);
            else
                rc |= gw_buf_appends(out, "{\"type\":\"text\",\"text\":\"\"}");
            rc |= gw_buf_appends(out, "}\n\n");
            if (c->ntools == 0 && mock_citation_json(c)) {
                /* Like Anthropic: the citation opens the cited text. */
                rc |= event_open(out, "content_block_delta");
                rc |= gw_buf_printf(out,
                                    ",\"index\":%d,\"delta\":{\"type\":\"citations_delta\","
                                    "\"citation\":%s}}\n\n",
                                    base, mock_citation_json(c));
            }
            c->off = 0;
            c->phase = c->idx == 0 && base == 0 ? A_PING : A_DELTA;
            kind = c->emitted == 0 ? MOCK_FRAME_PRE : MOCK_FRAME_MID;
            break;
        case A_PING:
            rc |= ping(out);
            c->phase = A_DELTA;
            kind = MOCK_FRAME_PRE;
            break;
        case A_DELTA:
            if (c->ntools > 0) {
                const struct mock_tool *t = &c->tools[c->idx];
                if (c->off >= t->args_len) {
                    c->phase = A_BLOCK_STOP;
                    continue;
                }
                size_t n = t->args_len - c->off;
                if (n > MOCK_ARG_PIECE)
                    n = MOCK_ARG_PIECE;
                rc |= event_open(out, "content_block_delta");
                rc |= gw_buf_printf(out,
                                    ",\"index\":%d,\"delta\":{\"type\":"
                                    "\"input_json_delta\",\"partial_json\":",
                                    base + c->idx);
                rc |= gw_json_escape(out, t->args + c->off, n);
                rc |= gw_buf_appends(out, "}}\n\n");
                c->off += n;
            } else {
                if (c->off >= (size_t)c->ntext) {
                    c->phase = A_BLOCK_STOP;
                    continue;
                }
                rc |= event_open(out, "content_block_delta");
                rc |= gw_buf_printf(out,
                                    ",\"index\":%d,\"delta\":{\"type\":"
                                    "\"text_delta\",\"text\":\"",
                                    base);
                rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
                rc |= gw_buf_appends(out, "\"}}\n\n");
                c->off++;
            }
            kind = MOCK_FRAME_CONTENT;
            break;
        case A_BLOCK_STOP:
            rc |= event_open(out, "content_block_stop");
            rc |= gw_buf_printf(out, ",\"index\":%d}\n\n", base + c->idx);
            c->idx++;
            if (c->ntools > 0 && c->idx < c->ntools) {
                c->phase = A_BLOCK_START;
                kind = MOCK_FRAME_MID;
            } else {
                c->phase = A_MSG_DELTA;
                kind = MOCK_FRAME_POST;
            }
            break;
        case A_MSG_DELTA:
            /* Like the current API: the final output count, and the input
             * side again, cumulative. */
            rc |= event_open(out, "message_delta");
            rc |= gw_buf_printf(out,
                                ",\"delta\":{\"stop_reason\":\"%s\",\"stop_sequence\":null},"
                                "\"usage\":{\"input_tokens\":%d,"
                                "\"cache_creation_input_tokens\":%d,"
                                "\"cache_read_input_tokens\":%d,\"output_tokens\":%d}}\n\n",
                                mock_anthropic_stop_reason(c), uncached_input(c),
                                c->cache_write + c->cache_write_1h, c->cache_read, c->billed);
            c->phase = A_MSG_STOP;
            kind = MOCK_FRAME_POST;
            break;
        case A_MSG_STOP:
            rc |= event_open(out, "message_stop");
            rc |= gw_buf_appends(out, "}\n\n");
            c->phase = A_END;
            kind = MOCK_FRAME_POST;
            break;
        default:
            return MOCK_FRAME_END;
        }
        return rc ? MOCK_FRAME_END : kind;
    }
}

static int messages_error(struct mock_call *c, struct gw_buf *b, int status, const char *message)
{
    char rid[40];
    snprintf(rid, sizeof(rid), "req_mock_%llu", (unsigned long long)c->n);
    (void)gw_http_add_header(c->req, "request-id", rid);
    const struct mock_error_text *t =
        message == NULL ? mock_error_text(c->f.error, MOCK_FAM_ANTHROPIC) : NULL;
    if (t == NULL)
        return mock_anthropic_error_body(b, status, message, c->n);
    message = mock_error_message(c, t);
    int rc =
        gw_buf_printf(b, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", t->type);
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, "},\"request_id\":\"%s\"}", rid);
    return rc ? GW_ELIMIT : 0;
}

const struct mock_api mock_anthropic_messages = {
    .log_name = "anthropic.messages",
    .family = MOCK_FAM_ANTHROPIC,
    .id_prefix = "msg_mock_",
    .stream_mode = MOCK_STREAM_BODY,
    .cache_reads = 1,
    .cache_writes = 1,
    .retry_after_always = 1,
    .parse = messages_parse,
    .body = messages_body,
    .frame = messages_frame,
    .error = messages_error,
};

/* ---- errors ---- */

int mock_anthropic_error_body(struct gw_buf *b, int status, const char *message, uint64_t n)
{
    const char *type = status >= 500 ? "api_error" : "invalid_request_error";
    const char *dflt =
        status >= 500 ? "Internal server error (mock fault)" : "Invalid request (mock fault)";
    switch (status) {
    case 401:
        type = "authentication_error";
        dflt = "invalid x-api-key (mock fault)";
        break;
    case 402:
        type = "billing_error";
        dflt = "Billing issue (mock fault)";
        break;
    case 403:
        type = "permission_error";
        dflt = "Permission denied (mock fault)";
        break;
    case 404:
        type = "not_found_error";
        dflt = "Not found (mock fault)";
        break;
    case 413:
        type = "request_too_large";
        dflt = "Request exceeds the maximum allowed number of bytes (mock fault)";
        break;
    case 429:
        type = "rate_limit_error";
        dflt = "Number of requests has exceeded your rate limit (mock fault)";
        break;
    case 504:
        type = "timeout_error";
        dflt = "Request timed out (mock fault)";
        break;
    case 529:
        type = "overloaded_error";
        dflt = "Overloaded (mock fault)";
        break;
    default:
        break;
    }
    if (message == NULL)
        message = dflt;
    int rc = gw_buf_printf(b, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", type);
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_printf(b, "},\"request_id\":\"req_mock_%llu\"}", (unsigned long long)n);
    return rc ? GW_ELIMIT : 0;
}
