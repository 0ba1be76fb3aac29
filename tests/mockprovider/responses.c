/*
 * The OpenAI Responses API: POST /v1/responses, as one "response" object or
 * as the semantic SSE event sequence (every event has an "event:" line, the
 * same "type" in its data, and a sequence_number):
 *
 *   response.created, response.in_progress,
 *   [reasoning item: response.output_item.added,
 *    response.reasoning_summary_part.added,
 *    response.reasoning_summary_text.delta..., response.reasoning_summary_text.done,
 *    response.reasoning_summary_part.done, response.output_item.done]
 *   message item: response.output_item.added, response.content_part.added,
 *    response.output_text.delta..., response.output_text.done,
 *    response.content_part.done, response.output_item.done
 *   or per function call: response.output_item.added,
 *    response.function_call_arguments.delta..., response.function_call_arguments.done,
 *    response.output_item.done
 *   response.completed (or response.incomplete when max_output_tokens cut
 *   the answer), carrying the whole response with its usage.
 *
 * There is no [DONE] terminator. Usage counts output_tokens with the
 * reasoning tokens included (output_tokens_details.reasoning_tokens says
 * how many) and input_tokens with the cached ones included
 * (input_tokens_details.cached_tokens).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

/* What the response object echoes back from the request. */
struct resp_state {
    json_t *instructions;
    json_t *tools;
    json_t *tool_choice;
    json_t *temperature;
    long long max_output_tokens; /* -1: null */
};

/* ---- request ---- */

static int tool_get(json_t *tool, const char **name, json_t **schema)
{
    /* Built-in tools (web_search, file_search, ...) have no name to call. */
    const char *type = json_string_value(json_object_get(tool, "type"));
    if (type == NULL || strcmp(type, "function") != 0)
        return 0;
    *name = json_string_value(json_object_get(tool, "name"));
    *schema = json_object_get(tool, "parameters");
    return *name != NULL;
}

/* One input item. NULL or a 400 message. */
static const char *input_item(struct mock_call *c, json_t *item)
{
    if (!json_is_object(item))
        return "input: each item must be an object";
    const char *type = json_string_value(json_object_get(item, "type"));
    const char *role = json_string_value(json_object_get(item, "role"));
    if (type == NULL && role != NULL)
        type = "message";
    if (type == NULL)
        return "input: an item needs a type (or a role)";
    if (strcmp(type, "message") == 0) {
        if (role == NULL)
            return "input: a message item needs a role";
        json_t *content = json_object_get(item, "content");
        if (!json_is_string(content) && !json_is_array(content))
            return "input: a message's content must be a string or an array";
        c->input_tokens += 1 + mock_count_text(content);
        if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
            c->seen.system = 1;
            return NULL;
        }
        c->seen.messages++;
        size_t i;
        json_t *part;
        json_array_foreach(content, i, part)
        {
            const char *pt = json_string_value(json_object_get(part, "type"));
            if (pt != NULL && strcmp(pt, "input_image") == 0)
                c->seen.images++;
            if (pt != NULL && strcmp(pt, "input_file") == 0)
                c->seen.files++;
        }
    } else if (strcmp(type, "function_call") == 0) {
        if (!json_is_string(json_object_get(item, "call_id")) ||
            !json_is_string(json_object_get(item, "name")))
            return "input: a function_call item needs call_id and name";
        c->seen.messages++;
        c->seen.tool_calls++;
        c->input_tokens += 1;
    } else if (strcmp(type, "function_call_output") == 0) {
        if (!json_is_string(json_object_get(item, "call_id")))
            return "input: a function_call_output item needs call_id";
        c->seen.messages++;
        c->seen.tool_results++;
        c->input_tokens += 1 + mock_count_text(json_object_get(item, "output"));
    }
    /* reasoning, item_reference, ...: carried context, not turns */
    return NULL;
}

static const char *responses_parse(struct mock_call *c, json_t *root)
{
    struct resp_state *st = gw_pool_calloc(c->pool, sizeof(*st));
    if (st == NULL)
        return "mock: out of memory";
    c->api_state = st;

    /* Log probabilities: top_logprobs (0..20) and the include that asks
     * for them on the text (as the real API: without the include, none). */
    long long top = 0;
    if (mock_json_int(root, "top_logprobs", 0, 20, &top) < 0)
        return "top_logprobs: must be an integer from 0 to 20";
    c->top_logprobs = (int)top;
    size_t ii;
    json_t *inc;
    json_array_foreach(json_object_get(root, "include"), ii, inc)
    {
        if (json_is_string(inc) &&
            strcmp(json_string_value(inc), "message.output_text.logprobs") == 0)
            c->logprobs = 1;
    }

    json_t *input = json_object_get(root, "input");
    if (json_is_string(input)) {
        c->seen.messages = 1;
        c->input_tokens +=
            1 + mock_count_words(json_string_value(input), json_string_length(input));
    } else if (json_is_array(input)) {
        size_t i;
        json_t *item;
        json_array_foreach(input, i, item)
        {
            int before = c->seen.tool_results;
            const char *err = input_item(c, item);
            if (err != NULL)
                return err;
            mock_seen_turn(c, before);
        }
    } else {
        return "input: field required (a string or an array of items)";
    }
    json_t *instructions = json_object_get(root, "instructions");
    if (json_is_string(instructions)) {
        st->instructions = instructions;
        c->seen.system = c->seen.system || json_string_length(instructions) > 0;
        c->input_tokens +=
            mock_count_words(json_string_value(instructions), json_string_length(instructions));
    } else if (instructions != NULL && !json_is_null(instructions)) {
        return "instructions: must be a string";
    }
    long long max = -1;
    if (mock_json_int(root, "max_output_tokens", 0, 1 << 30, &max) < 0)
        return "max_output_tokens: must be a non-negative integer";
    st->max_output_tokens = max;
    if (mock_seen_temperature(c, root, "temperature") != 0)
        return "temperature: must be a number";
    st->temperature = json_object_get(root, "temperature");
    mock_plan_answer(c, max);
    json_t *tfmt = json_object_get(json_object_get(root, "text"), "format");
    const char *tft = json_string_value(json_object_get(tfmt, "type"));
    if (tft && strcmp(tft, "json_schema") == 0)
        mock_plan_json(c, json_object_get(tfmt, "schema"));
    mock_plan_role(c, json_is_string(instructions) ? instructions : NULL, input);

    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    if (tools != NULL && !json_is_array(tools) && !json_is_null(tools))
        return "tools: must be an array";
    if (choice != NULL && !json_is_null(choice) && !json_is_string(choice) &&
        !json_is_object(choice))
        return "tool_choice: must be a string or an object";
    st->tools = tools;
    st->tool_choice = choice;
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return NULL;
    c->seen.tools = (int)json_array_size(tools);
    if (json_is_string(choice) && strcmp(json_string_value(choice), "none") == 0)
        return NULL;
    const char *named = NULL;
    if (json_is_object(choice)) {
        named = json_string_value(json_object_get(choice, "name"));
        if (named == NULL)
            return "tool_choice: an object names a function ({\"type\":\"function\",\"name\":...})";
    }
    int forced = json_is_string(choice) && strcmp(json_string_value(choice), "required") == 0;
    return mock_pick_tools(c, tools, named, forced, tool_get);
}

/* ---- shared pieces ---- */

static int incomplete(const struct mock_call *c)
{
    return !c->f.empty && c->ntools == 0 && c->finish == MOCK_FINISH_LENGTH;
}

/* A JSON value from the request, compact, or def when absent. */
static int append_echo(struct gw_buf *b, json_t *v, const char *def)
{
    if (v == NULL)
        return gw_buf_appends(b, def);
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(15));
    if (text == NULL)
        return GW_ENOMEM;
    int rc = gw_buf_appends(b, text);
    free(text);
    return rc;
}

static int append_usage(struct gw_buf *b, const struct mock_call *c, int out, int reasoning)
{
    return gw_buf_printf(b,
                         "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},"
                         "\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":%d},"
                         "\"total_tokens\":%d}",
                         c->input_tokens, c->cache_read, out, reasoning, c->input_tokens + out);
}

/* Output items, complete (done) or as output_item.added shows them. */
static int append_reasoning_item(struct gw_buf *b, const struct mock_call *c, int done)
{
    int rc = gw_buf_printf(b, "{\"id\":\"rs_mock_%llu\",\"type\":\"reasoning\",\"summary\":[",
                           (unsigned long long)c->n);
    if (done) {
        rc |= gw_buf_appends(b, "{\"type\":\"summary_text\",\"text\":\"");
        rc |= mock_append_reasoning(b, 0, c->reasoning);
        rc |= gw_buf_appends(b, "\"}");
    }
    rc |= gw_buf_appends(b, "]}");
    return rc;
}

/* ,"logprobs":[...] of the answer's tokens [from, to) when asked, else []. */
static int append_logprobs(struct gw_buf *b, const struct mock_call *c, int from, int to)
{
    int rc = gw_buf_appends(b, ",\"logprobs\":");
    if (c->logprobs && !c->json_text)
        return rc | mock_append_logprobs_openai(b, c, from, to);
    return rc | gw_buf_appends(b, "[]");
}

static int append_text_part(struct gw_buf *b, const struct mock_call *c, int done)
{
    int rc = gw_buf_appends(b, "{\"type\":\"output_text\",\"annotations\":[]");
    rc |= append_logprobs(b, c, 0, done ? c->ntext : 0);
    rc |= gw_buf_appends(b, ",\"text\":\"");
    if (done)
        rc |= mock_append_answer(b, c, 0, c->ntext);
    rc |= gw_buf_appends(b, "\"}");
    return rc;
}

static int append_message_item(struct gw_buf *b, const struct mock_call *c, int done)
{
    int rc = gw_buf_printf(b,
                           "{\"id\":\"msg_mock_%llu\",\"type\":\"message\",\"status\":\"%s\","
                           "\"content\":[",
                           (unsigned long long)c->n,
                           !done           ? "in_progress"
                           : incomplete(c) ? "incomplete"
                                           : "completed");
    if (done)
        rc |= append_text_part(b, c, 1);
    rc |= gw_buf_appends(b, "],\"role\":\"assistant\"}");
    return rc;
}

static int append_call_item(struct gw_buf *b, const struct mock_call *c, int i, int done)
{
    const struct mock_tool *t = &c->tools[i];
    int rc = gw_buf_printf(b,
                           "{\"id\":\"fc_mock_%llu_%d\",\"type\":\"function_call\","
                           "\"status\":\"%s\",\"arguments\":",
                           (unsigned long long)c->n, i, done ? "completed" : "in_progress");
    rc |= done ? gw_json_escape(b, t->args, t->args_len) : gw_buf_appends(b, "\"\"");
    rc |= gw_buf_printf(b, ",\"call_id\":\"call_mock_%llu_%d\",\"name\":", (unsigned long long)c->n,
                        i);
    rc |= gw_json_escape(b, t->name, strlen(t->name));
    rc |= gw_buf_appends(b, "}");
    return rc;
}

/* The response object. final: with its output and usage (else, as
 * response.created shows it, output [] and usage null). */
static int append_response(struct gw_buf *b, const struct mock_call *c, int final, int out,
                           int reasoning)
{
    const struct resp_state *st = c->api_state;
    const char *status = !final ? "in_progress" : incomplete(c) ? "incomplete" : "completed";
    int rc = gw_buf_printf(b,
                           "{\"id\":\"resp_mock_%llu\",\"object\":\"response\",\"created_at\":%lld,"
                           "\"status\":\"%s\",\"background\":false,\"error\":null,"
                           "\"incomplete_details\":%s,\"instructions\":",
                           (unsigned long long)c->n, c->created, status,
                           final && incomplete(c) ? "{\"reason\":\"max_output_tokens\"}" : "null");
    rc |= append_echo(b, st->instructions, "null");
    rc |= st->max_output_tokens >= 0
              ? gw_buf_printf(b, ",\"max_output_tokens\":%lld", st->max_output_tokens)
              : gw_buf_appends(b, ",\"max_output_tokens\":null");
    rc |= gw_buf_appends(b, ",\"model\":");
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_appends(b, ",\"output\":[");
    if (final && !c->f.empty) {
        if (c->reasoning > 0) {
            rc |= append_reasoning_item(b, c, 1);
            rc |= gw_buf_appends(b, ",");
        }
        if (c->ntools > 0) {
            for (int i = 0; i < c->ntools; i++) {
                rc |= i ? gw_buf_appends(b, ",") : 0;
                rc |= append_call_item(b, c, i, 1);
            }
        } else {
            rc |= append_message_item(b, c, 1);
        }
    }
    rc |= gw_buf_appends(b, "],\"parallel_tool_calls\":true,\"previous_response_id\":null,"
                            "\"reasoning\":{\"effort\":null,\"summary\":null},\"service_tier\":"
                            "\"default\",\"store\":false,\"temperature\":");
    rc |= append_echo(b, st->temperature, "1.0");
    rc |= gw_buf_appends(b, ",\"text\":{\"format\":{\"type\":\"text\"}},\"tool_choice\":");
    rc |= append_echo(b, st->tool_choice, "\"auto\"");
    rc |= gw_buf_appends(b, ",\"tools\":");
    rc |= append_echo(b, st->tools, "[]");
    rc |= gw_buf_appends(b, ",\"top_p\":1.0,\"truncation\":\"disabled\",\"usage\":");
    rc |= final ? append_usage(b, c, out, reasoning) : gw_buf_appends(b, "null");
    rc |= gw_buf_appends(b, ",\"user\":null,\"metadata\":{}}");
    return rc;
}

/* ---- complete answer ---- */

static int responses_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = append_response(b, c, 1, mock_call_output_tokens(c), c->f.empty ? 0 : c->reasoning);
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum {
    R_CREATED,
    R_IN_PROGRESS,
    R_RS_ADDED,
    R_RS_PART_ADDED,
    R_RS_DELTA,
    R_RS_TEXT_DONE,
    R_RS_PART_DONE,
    R_RS_DONE,
    R_MSG_ADDED,
    R_PART_ADDED,
    R_TEXT_DELTA,
    R_TEXT_DONE,
    R_PART_DONE,
    R_MSG_DONE,
    R_FC_ADDED,
    R_FC_DELTA,
    R_FC_ARGS_DONE,
    R_FC_DONE,
    R_COMPLETED,
    R_END
};

/* "event: T\ndata: {"type":"T","sequence_number":N" */
static int event_open(struct mock_call *c, struct gw_buf *b, const char *type)
{
    return gw_buf_printf(b, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type,
                         c->seq++);
}

static int event_close(struct gw_buf *b)
{
    return gw_buf_appends(b, "}\n\n");
}

/* The output index of the message or of function call i. */
static int out_index(const struct mock_call *c, int i)
{
    return (c->reasoning > 0 ? 1 : 0) + i;
}

static enum mock_frame responses_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    enum mock_frame kind = c->emitted == 0 ? MOCK_FRAME_PRE : MOCK_FRAME_MID;
    unsigned long long n = (unsigned long long)c->n;
    for (;;) {
        switch (c->phase) {
        case R_CREATED:
        case R_IN_PROGRESS:
            rc |= event_open(c, out,
                             c->phase == R_CREATED ? "response.created" : "response.in_progress");
            rc |= gw_buf_appends(out, ",\"response\":");
            rc |= append_response(out, c, 0, 0, 0);
            rc |= event_close(out);
            c->phase = c->phase == R_CREATED ? R_IN_PROGRESS
                       : c->f.empty          ? R_COMPLETED
                       : c->reasoning > 0    ? R_RS_ADDED
                       : c->ntools > 0       ? R_FC_ADDED
                                             : R_MSG_ADDED;
            break;
        case R_RS_ADDED:
        case R_RS_DONE:
            rc |= event_open(c, out,
                             c->phase == R_RS_ADDED ? "response.output_item.added"
                                                    : "response.output_item.done");
            rc |= gw_buf_appends(out, ",\"output_index\":0,\"item\":");
            rc |= append_reasoning_item(out, c, c->phase == R_RS_DONE);
            rc |= event_close(out);
            c->off = 0;
            c->phase = c->phase == R_RS_ADDED ? R_RS_PART_ADDED
                       : c->ntools > 0        ? R_FC_ADDED
                                              : R_MSG_ADDED;
            break;
        case R_RS_PART_ADDED:
        case R_RS_PART_DONE:
            rc |= event_open(c, out,
                             c->phase == R_RS_PART_ADDED ? "response.reasoning_summary_part.added"
                                                         : "response.reasoning_summary_part.done");
            rc |=
                gw_buf_printf(out,
                              ",\"item_id\":\"rs_mock_%llu\",\"output_index\":0,"
                              "\"summary_index\":0,\"part\":{\"type\":\"summary_text\",\"text\":\"",
                              n);
            if (c->phase == R_RS_PART_DONE)
                rc |= mock_append_reasoning(out, 0, c->reasoning);
            rc |= gw_buf_appends(out, "\"}");
            rc |= event_close(out);
            c->phase = c->phase == R_RS_PART_ADDED ? R_RS_DELTA : R_RS_DONE;
            break;
        case R_RS_DELTA:
            if (c->off >= (size_t)c->reasoning) {
                c->phase = R_RS_TEXT_DONE;
                continue;
            }
            rc |= event_open(c, out, "response.reasoning_summary_text.delta");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"rs_mock_%llu\",\"output_index\":0,"
                                "\"summary_index\":0,\"delta\":\"",
                                n);
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"");
            rc |= event_close(out);
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case R_RS_TEXT_DONE:
            rc |= event_open(c, out, "response.reasoning_summary_text.done");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"rs_mock_%llu\",\"output_index\":0,"
                                "\"summary_index\":0,\"text\":\"",
                                n);
            rc |= mock_append_reasoning(out, 0, c->reasoning);
            rc |= gw_buf_appends(out, "\"");
            rc |= event_close(out);
            c->phase = R_RS_PART_DONE;
            break;
        case R_MSG_ADDED:
        case R_MSG_DONE:
            rc |= event_open(c, out,
                             c->phase == R_MSG_ADDED ? "response.output_item.added"
                                                     : "response.output_item.done");
            rc |= gw_buf_printf(out, ",\"output_index\":%d,\"item\":", out_index(c, 0));
            rc |= append_message_item(out, c, c->phase == R_MSG_DONE);
            rc |= event_close(out);
            c->off = 0;
            c->phase = c->phase == R_MSG_ADDED ? R_PART_ADDED : R_COMPLETED;
            break;
        case R_PART_ADDED:
        case R_PART_DONE:
            rc |= event_open(c, out,
                             c->phase == R_PART_ADDED ? "response.content_part.added"
                                                      : "response.content_part.done");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"msg_mock_%llu\",\"output_index\":%d,"
                                "\"content_index\":0,\"part\":",
                                n, out_index(c, 0));
            rc |= append_text_part(out, c, c->phase == R_PART_DONE);
            rc |= event_close(out);
            c->phase = c->phase == R_PART_ADDED ? R_TEXT_DELTA : R_MSG_DONE;
            break;
        case R_TEXT_DELTA:
            if (c->off >= (size_t)c->ntext) {
                c->phase = R_TEXT_DONE;
                continue;
            }
            rc |= event_open(c, out, "response.output_text.delta");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"msg_mock_%llu\",\"output_index\":%d,"
                                "\"content_index\":0,\"delta\":\"",
                                n, out_index(c, 0));
            rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"");
            rc |= append_logprobs(out, c, (int)c->off, (int)c->off + 1);
            rc |= event_close(out);
            c->off++;
            kind = MOCK_FRAME_CONTENT;
            break;
        case R_TEXT_DONE:
            rc |= event_open(c, out, "response.output_text.done");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"msg_mock_%llu\",\"output_index\":%d,"
                                "\"content_index\":0,\"text\":\"",
                                n, out_index(c, 0));
            rc |= mock_append_answer(out, c, 0, c->ntext);
            rc |= gw_buf_appends(out, "\"");
            rc |= append_logprobs(out, c, 0, c->ntext);
            rc |= event_close(out);
            c->phase = R_PART_DONE;
            break;
        case R_FC_ADDED:
        case R_FC_DONE:
            rc |= event_open(c, out,
                             c->phase == R_FC_ADDED ? "response.output_item.added"
                                                    : "response.output_item.done");
            rc |= gw_buf_printf(out, ",\"output_index\":%d,\"item\":", out_index(c, c->idx));
            rc |= append_call_item(out, c, c->idx, c->phase == R_FC_DONE);
            rc |= event_close(out);
            if (c->f.interleave) {
                /* Every item is added, then the arguments alternate; an
                 * item is done as its arguments end. */
                if (c->phase == R_FC_ADDED && ++c->idx < c->ntools)
                    break;
                c->idx = c->phase == R_FC_ADDED ? 0 : (c->idx + 1) % c->ntools;
                c->phase = mock_next_interleaved(c) < 0 ? R_COMPLETED : R_FC_DELTA;
            } else if (c->phase == R_FC_ADDED) {
                c->phase = R_FC_DELTA;
            } else {
                c->idx++;
                c->phase = c->idx < c->ntools ? R_FC_ADDED : R_COMPLETED;
            }
            break;
        case R_FC_DELTA: {
            /* The open call's next piece; interleave: the next call's in
             * turn (R_FC_DELTA only while one has bytes left). */
            int i = c->f.interleave ? mock_next_interleaved(c) : c->idx;
            struct mock_tool *t = &c->tools[i];
            if (t->sent >= t->args_len) {
                c->phase = R_FC_ARGS_DONE;
                continue;
            }
            size_t len = t->args_len - t->sent;
            if (len > MOCK_ARG_PIECE)
                len = MOCK_ARG_PIECE;
            rc |= event_open(c, out, "response.function_call_arguments.delta");
            rc |= gw_buf_printf(
                out, ",\"item_id\":\"fc_mock_%llu_%d\",\"output_index\":%d,\"delta\":", n, i,
                out_index(c, i));
            rc |= gw_json_escape(out, t->args + t->sent, len);
            rc |= event_close(out);
            t->sent += len;
            if (c->f.interleave) {
                /* its last piece: its arguments' done and item done follow */
                c->idx = t->sent == t->args_len ? i : (i + 1) % c->ntools;
                if (t->sent == t->args_len)
                    c->phase = R_FC_ARGS_DONE;
            }
            kind = MOCK_FRAME_CONTENT;
            break;
        }
        case R_FC_ARGS_DONE: {
            const struct mock_tool *t = &c->tools[c->idx];
            rc |= event_open(c, out, "response.function_call_arguments.done");
            rc |= gw_buf_printf(out,
                                ",\"item_id\":\"fc_mock_%llu_%d\",\"output_index\":%d,\"name\":", n,
                                c->idx, out_index(c, c->idx));
            rc |= gw_json_escape(out, t->name, strlen(t->name));
            rc |= gw_buf_appends(out, ",\"arguments\":");
            rc |= gw_json_escape(out, t->args, t->args_len);
            rc |= event_close(out);
            c->phase = R_FC_DONE;
            break;
        }
        case R_COMPLETED:
            rc |= event_open(c, out, incomplete(c) ? "response.incomplete" : "response.completed");
            rc |= gw_buf_appends(out, ",\"response\":");
            rc |= append_response(out, c, 1, c->billed, mock_call_reasoning_billed(c));
            rc |= event_close(out);
            c->phase = R_END;
            kind = MOCK_FRAME_POST;
            break;
        default:
            return MOCK_FRAME_END;
        }
        return rc ? MOCK_FRAME_END : kind;
    }
}

const struct mock_api mock_openai_responses = {
    .log_name = "openai.responses",
    .id_prefix = "resp_mock_",
    .stream_mode = MOCK_STREAM_BODY,
    .cache_reads = 1,
    .retry_after_always = 1,
    .parse = responses_parse,
    .body = responses_body,
    .frame = responses_frame,
    .error = mock_openai_call_error,
};
