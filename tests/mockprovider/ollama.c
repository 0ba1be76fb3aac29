/*
 * Ollama: POST /api/chat and POST /api/embed.
 *
 * /api/chat streams unless the body says "stream": false (Ollama's default
 * is true): NDJSON (application/x-ndjson), one object per line,
 *
 *   {"model":..,"created_at":..,"message":{"role":"assistant","content":"tok1"},"done":false}
 *
 * with "thinking" instead of content for reasoning tokens, whole tool calls
 * ("tool_calls":[{"id":..,"function":{"index":0,"name":..,"arguments":{...}}}],
 * arguments an object, not a string) one per line, and a last line with
 * "done":true, "done_reason" (stop, length), prompt_eval_count, eval_count
 * and the durations. Without streaming, one object with the whole message.
 * Errors are {"error":"..."}.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

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

static const char *message(struct mock_call *c, json_t *msg)
{
    if (!json_is_object(msg))
        return "invalid message: each message must be an object";
    const char *role = json_string_value(json_object_get(msg, "role"));
    json_t *content = json_object_get(msg, "content");
    json_t *images = json_object_get(msg, "images");
    json_t *calls = json_object_get(msg, "tool_calls");
    if (role == NULL)
        return "invalid message: role is required";
    if (content != NULL && !json_is_string(content) && !json_is_null(content))
        return "invalid message: content must be a string";
    if (images != NULL && !json_is_array(images) && !json_is_null(images))
        return "invalid message: images must be an array of base64 strings";
    if (calls != NULL && !json_is_array(calls) && !json_is_null(calls))
        return "invalid message: tool_calls must be an array";
    c->input_tokens += 1 + mock_count_text(content);
    if (strcmp(role, "system") == 0) {
        c->seen.system = 1;
        return NULL;
    }
    c->seen.messages++;
    if (strcmp(role, "tool") == 0)
        c->seen.tool_results++;
    c->seen.images += (int)json_array_size(images);
    c->seen.tool_calls += (int)json_array_size(calls);
    return NULL;
}

static const char *chat_parse(struct mock_call *c, json_t *root)
{
    json_t *messages = json_object_get(root, "messages");
    if (messages != NULL && !json_is_array(messages) && !json_is_null(messages))
        return "messages must be an array";
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        int before = c->seen.tool_results;
        const char *err = message(c, msg);
        if (err != NULL)
            return err;
        mock_seen_turn(c, before);
    }
    json_t *opts = json_object_get(root, "options");
    if (opts != NULL && !json_is_object(opts) && !json_is_null(opts))
        return "options must be an object";
    long long max = -1, v;
    /* num_predict: -1 (unbounded) and -2 (fill the context) are no limit */
    if (mock_json_int(opts, "num_predict", -2, 1 << 30, &max) < 0)
        return "option \"num_predict\" must be of type integer";
    if (max < 0)
        max = -1;
    if (mock_json_int(opts, "top_k", 0, 1 << 30, &v) < 0)
        return "option \"top_k\" must be of type integer";
    if (mock_json_int(opts, "seed", -(1LL << 62), 1LL << 62, &v) < 0)
        return "option \"seed\" must be of type integer";
    if (mock_seen_temperature(c, opts, "temperature") != 0)
        return "option \"temperature\" must be of type float32";
    json_t *stop = json_object_get(opts, "stop");
    if (stop != NULL && !json_is_array(stop) && !json_is_null(stop))
        return "option \"stop\" must be of type array";
    json_t *format = json_object_get(root, "format");
    if (format != NULL && !json_is_null(format) && !json_is_string(format) &&
        !json_is_object(format))
        return "invalid format: expected \"json\" or a JSON schema";
    json_t *think = json_object_get(root, "think");
    if (think != NULL && !json_is_null(think) && !json_is_boolean(think) && !json_is_string(think))
        return "invalid think value: expected a boolean or \"low\", \"medium\", \"high\"";
    mock_plan_answer(c, max);
    /* Structured output: a schema's smallest object; "json" an object. */
    if (json_is_object(format)) {
        mock_plan_json(c, format);
    } else if (json_is_string(format) && strcmp(json_string_value(format), "json") == 0) {
        json_t *any = json_pack("{s:s}", "type", "object");
        mock_plan_json(c, any);
        json_decref(any);
    }
    mock_plan_role(c, NULL, messages);

    json_t *tools = json_object_get(root, "tools");
    if (tools != NULL && !json_is_array(tools) && !json_is_null(tools))
        return "tools must be an array";
    if (!json_is_array(tools) || json_array_size(tools) == 0)
        return NULL;
    c->seen.tools = (int)json_array_size(tools);
    return mock_pick_tools(c, tools, NULL, 0, tool_get);
}

/* ---- shared pieces ---- */

/* {"model":..,"created_at":"...Z","message":{"role":"assistant", */
static int line_open(struct gw_buf *b, const struct mock_call *c)
{
    time_t t = (time_t)c->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    char when[32];
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
    int rc = gw_buf_appends(b, "{\"model\":");
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_printf(b, ",\"created_at\":\"%s.%06lluZ\",\"message\":{\"role\":\"assistant\",",
                        when, (unsigned long long)(c->n % 1000000));
    return rc;
}

static int append_call(struct gw_buf *b, const struct mock_call *c, int i)
{
    const struct mock_tool *t = &c->tools[i];
    int rc = gw_buf_printf(b, "{\"id\":\"call_mock_%llu_%d\",\"function\":{\"index\":%d,\"name\":",
                           (unsigned long long)c->n, i, i);
    rc |= gw_json_escape(b, t->name, strlen(t->name));
    rc |= gw_buf_appends(b, ",\"arguments\":");
    rc |= gw_buf_append(b, t->args, t->args_len);
    rc |= gw_buf_appends(b, "}}");
    return rc;
}

/* "done":true and the metrics; durations in ns, deterministic. */
static int append_done(struct gw_buf *b, const struct mock_call *c, int out)
{
    const char *reason = !c->f.empty && c->finish == MOCK_FINISH_LENGTH ? "length" : "stop";
    long long prompt_ns = 1000000LL * c->input_tokens, eval_ns = 10000000LL * out;
    return gw_buf_printf(b,
                         "\"done_reason\":\"%s\",\"done\":true,\"total_duration\":%lld,"
                         "\"load_duration\":1000000,\"prompt_eval_count\":%d,"
                         "\"prompt_eval_duration\":%lld,\"eval_count\":%d,\"eval_duration\":%lld}",
                         reason, 1000000 + prompt_ns + eval_ns, c->input_tokens, prompt_ns, out,
                         eval_ns);
}

/* ---- complete answer ---- */

static int chat_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = line_open(b, c);
    rc |= gw_buf_appends(b, "\"content\":\"");
    if (!c->f.empty && c->ntools == 0)
        rc |= mock_append_answer(b, c, 0, c->ntext);
    rc |= gw_buf_appends(b, "\"");
    if (!c->f.empty && c->reasoning > 0) {
        rc |= gw_buf_appends(b, ",\"thinking\":\"");
        rc |= mock_append_reasoning(b, 0, c->reasoning);
        rc |= gw_buf_appends(b, "\"");
    }
    if (!c->f.empty && c->ntools > 0) {
        rc |= gw_buf_appends(b, ",\"tool_calls\":[");
        for (int i = 0; i < c->ntools; i++) {
            rc |= i ? gw_buf_appends(b, ",") : 0;
            rc |= append_call(b, c, i);
        }
        rc |= gw_buf_appends(b, "]");
    }
    rc |= gw_buf_appends(b, "},");
    rc |= append_done(b, c, mock_call_output_tokens(c));
    return rc ? GW_ELIMIT : 0;
}

/* ---- stream ---- */

enum { O_REASON, O_ANSWER, O_DONE, O_END };

static enum mock_frame chat_frame(struct mock_call *c, struct gw_buf *out)
{
    int rc = 0;
    int total = c->f.empty ? 0 : c->ntools > 0 ? c->ntools : c->ntext;
    for (;;) {
        switch (c->phase) {
        case O_REASON:
            if (c->f.empty || c->off >= (size_t)c->reasoning) {
                c->off = 0;
                c->phase = O_ANSWER;
                continue;
            }
            rc |= line_open(out, c);
            rc |= gw_buf_appends(out, "\"content\":\"\",\"thinking\":\"");
            rc |= mock_append_reasoning(out, (int)c->off, (int)c->off + 1);
            rc |= gw_buf_appends(out, "\"},\"done\":false}\n");
            c->off++;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_CONTENT;
        case O_ANSWER:
            if ((int)c->off >= total) {
                c->phase = O_DONE;
                continue;
            }
            rc |= line_open(out, c);
            if (c->ntools > 0) {
                rc |= gw_buf_appends(out, "\"content\":\"\",\"tool_calls\":[");
                rc |= append_call(out, c, (int)c->off);
                rc |= gw_buf_appends(out, "]");
                c->frame_tokens = mock_tool_tokens(&c->tools[c->off]);
            } else {
                rc |= gw_buf_appends(out, "\"content\":\"");
                rc |= mock_append_answer(out, c, (int)c->off, (int)c->off + 1);
                rc |= gw_buf_appends(out, "\"");
            }
            rc |= gw_buf_appends(out, "},\"done\":false}\n");
            c->off++;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_CONTENT;
        case O_DONE:
            rc |= line_open(out, c);
            rc |= gw_buf_appends(out, "\"content\":\"\"},");
            rc |= append_done(out, c, c->billed);
            rc |= gw_buf_appends(out, "\n");
            c->phase = O_END;
            return rc ? MOCK_FRAME_END : MOCK_FRAME_POST;
        default:
            return MOCK_FRAME_END;
        }
    }
}

/* The Nth line is cut in half: not JSON, but still a line. */
static void chat_malform(struct mock_call *c, struct gw_buf *f)
{
    (void)c;
    size_t keep = f->len / 2;
    f->len = keep;
    f->data[keep] = '\0';
    if (gw_buf_appends(f, "\n") != 0)
        f->len = 0;
}

/* ---- embed ---- */

static const char *embed_parse(struct mock_call *c, json_t *root)
{
    static const char bad_input[] = "invalid input type: a string or an array of strings";
    json_t *input = json_object_get(root, "input");
    long long dims = 8;
    if (mock_json_int(root, "dimensions", 1, MOCK_MAX_DIMENSIONS, &dims) < 0)
        return "dimensions: an integer in [1, 4096]";
    c->dimensions = (int)dims;
    json_t *truncate = json_object_get(root, "truncate");
    if (truncate != NULL && !json_is_boolean(truncate) && !json_is_null(truncate))
        return "truncate must be a boolean";
    size_t n = json_is_string(input) ? 1 : json_array_size(input);
    if ((!json_is_string(input) && !json_is_array(input)) || n > MOCK_MAX_EMBED_INPUTS)
        return bad_input;
    c->hashes = gw_pool_alloc(c->pool, (n ? n : 1) * sizeof(uint64_t));
    if (c->hashes == NULL)
        return "mock: out of memory";
    c->ninputs = (int)n;
    c->seen.messages = (int)n;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_is_string(input) ? input : json_array_get(input, i);
        if (!json_is_string(v))
            return bad_input;
        c->hashes[i] = mock_embed_hash(json_string_value(v), json_string_length(v));
        c->input_tokens += mock_count_words(json_string_value(v), json_string_length(v));
    }
    return NULL;
}

static int embed_body(struct mock_call *c, struct gw_buf *b)
{
    int rc = gw_buf_appends(b, "{\"model\":");
    rc |= gw_json_escape(b, c->model, strlen(c->model));
    rc |= gw_buf_appends(b, ",\"embeddings\":[");
    for (int i = 0; i < c->ninputs && rc == 0; i++) {
        rc |= i ? gw_buf_appends(b, ",") : 0;
        rc |= mock_append_vector(b, c->dimensions, c->hashes[i], 0);
    }
    rc |= gw_buf_printf(b,
                        "],\"total_duration\":%lld,\"load_duration\":1000000,"
                        "\"prompt_eval_count\":%d}",
                        1000000LL + 1000000LL * c->input_tokens, c->input_tokens);
    return rc ? GW_ELIMIT : 0;
}

/* ---- errors ---- */

int mock_ollama_error_body(struct gw_buf *b, int status, const char *message)
{
    const char *dflt = "mock fault";
    switch (status) {
    case 400:
        dflt = "invalid request (mock fault)";
        break;
    case 401:
        dflt = "unauthorized (mock fault)";
        break;
    case 404:
        dflt = "model not found, try pulling it first (mock fault)";
        break;
    case 429:
        dflt = "too many requests (mock fault)";
        break;
    case 503:
        dflt = "server busy, please try again. maximum pending requests exceeded (mock fault)";
        break;
    default:
        if (status >= 500)
            dflt = "an error was encountered while running the model (mock fault)";
        break;
    }
    if (message == NULL)
        message = dflt;
    int rc = gw_buf_appends(b, "{\"error\":");
    rc |= gw_json_escape(b, message, strlen(message));
    rc |= gw_buf_appends(b, "}");
    return rc ? GW_ELIMIT : 0;
}

static int ollama_error(struct mock_call *c, struct gw_buf *b, int status, const char *msg)
{
    const struct mock_error_text *t =
        msg == NULL ? mock_error_text(c->f.error, MOCK_FAM_OLLAMA) : NULL;
    return mock_ollama_error_body(b, status, t ? mock_error_message(c, t) : msg);
}

const struct mock_api mock_ollama_chat = {
    .family = MOCK_FAM_OLLAMA,
    .log_name = "ollama.chat",
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_BODY_DEFAULT,
    .stream_type = "application/x-ndjson",
    .parse = chat_parse,
    .body = chat_body,
    .frame = chat_frame,
    .malform = chat_malform,
    .error = ollama_error,
};

const struct mock_api mock_ollama_embed = {
    .family = MOCK_FAM_OLLAMA,
    .log_name = "ollama.embed",
    .id_prefix = NULL,
    .stream_mode = MOCK_STREAM_NEVER,
    .parse = embed_parse,
    .body = embed_body,
    .frame = NULL,
    .error = ollama_error,
};
