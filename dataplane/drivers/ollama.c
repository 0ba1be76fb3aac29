/*
 * The "ollama" driver: Ollama's native chat API. base_url is the server
 * root, e.g. http://localhost:11434 (no /api, no /v1: for Ollama's
 * OpenAI-compatible endpoint use the openai driver with base .../v1).
 * A credential, when configured, is sent as a Bearer token (Ollama's hosted
 * API; a local server needs none).
 *
 * Upstream request: POST {base}/api/chat with "stream" always set (Ollama
 * streams unless told otherwise). The canonical request maps to:
 *   messages       role system/user/assistant/tool; "content" is one
 *                  string per message, so a message's text parts are
 *                  joined with a blank line ("\n\n") between them; images
 *                  go in "images" as base64 (an image by URL is refused:
 *                  Ollama fetches nothing); the assistant's tool calls in
 *                  tool_calls[{function{name, arguments: object}}] and its
 *                  earlier reasoning in "thinking"; each tool result is a
 *                  role "tool" message with "tool_name", the name of the
 *                  call it answers (found by the call id in the
 *                  conversation; refused when no call has it), text only.
 *                  Ollama has no error flag on tool results: an error
 *                  result's text is prefixed "[tool error] ", as the openai
 *                  driver does. Redacted thinking (another provider's
 *                  opaque data) is not sent.
 *   tools          OpenAI-style function tools; "strict" has no Ollama
 *                  counterpart and is not sent
 *   tool_choice    Ollama has none: auto (or unset) is its behaviour, and
 *                  "none" is honoured by offering no tools (a model cannot
 *                  call what it is not offered); required or a named tool
 *                  cannot be forced and are refused
 *   parallel_tool_calls  false is refused (no switch either)
 *   service_tier         auto and standard need nothing (one tier); flex,
 *                        priority and scale are refused, and so are logprobs
 *   sampling       options{num_predict, temperature, top_p, top_k, stop,
 *                  seed, presence_penalty, frequency_penalty}
 *   response_format  format "json" (json_object) or the schema object
 *                  (json_schema); "text" is what Ollama does anyway
 *   reasoning      think true when reasoning is asked for (an effort or a
 *                  budget: Ollama takes no budget, so it means "think"),
 *                  false for "no reasoning". Option think_levels true: send
 *                  the effort itself ("low"/"medium"/"high", what gpt-oss
 *                  models take) instead of true.
 *   user           Ollama has no end-user field; it is not sent
 *
 * Upstream answer: NDJSON, one object per line (or one object when not
 * streamed): model → START (Ollama gives no response id); message.thinking
 * → REASONING; message.content → CHUNK; message.tool_calls[] arrive whole,
 * each → TOOL_START (its "id" when the server gives one, else "call_<n>"),
 * one TOOL_DELTA with the arguments object serialized, TOOL_END; an "error"
 * member → ERROR; the final "done": true line carries usage (input =
 * prompt_eval_count, output = eval_count: Ollama reports neither cache use
 * nor a separate reasoning count) and done_reason: stop → end (tool_use
 * when calls were made), length → max_tokens, others end. A stream that
 * ends without its done line is ERROR network.
 *
 * Errors: {"error":"..."}; 404 "model ... not found" is model_unavailable.
 *
 * Embeddings: POST {base}/api/embed {model, input[], dimensions?} →
 * embeddings[[...]], prompt_eval_count → usage input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_docs.h"
#include "drv_tier.h"
#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_str.h"

/* ------------------------------------------------------------------ build */

/* Joins text with a blank line between pieces. */
static int join(struct gw_buf *b, const char *text)
{
    if (!text || !*text)
        return GW_OK;
    if (b->len && gw_buf_appends(b, "\n\n") != GW_OK)
        return GW_ENOMEM;
    return gw_buf_appends(b, text) == GW_OK ? GW_OK : GW_ENOMEM;
}

static json_t *buf_string(const struct gw_buf *b)
{
    return json_stringn(b->data ? b->data : "", b->len);
}

static int add_tool_result(const struct canon_req *r, json_t *msgs, const struct canon_part *p,
                           size_t mi, struct canon_err *err)
{
    const char *name = drv_result_name(r, mi, p, "Ollama names the tool a result is for", err);
    if (!name)
        return GW_EINVAL;
    struct gw_buf b;
    int rc = drv_result_text(p, p->is_error ? "[tool error] " : NULL, &b);
    if (rc == GW_EINVAL) {
        gw_buf_free(&b);
        return drv_refuse_message(r, mi, "Ollama takes only text in tool results", err);
    }
    json_t *m = rc == GW_OK ? json_pack("{s:s,s:s,s:o}", "role", "tool", "tool_name", name,
                                        "content", buf_string(&b))
                            : NULL;
    gw_buf_free(&b);
    return m && json_array_append_new(msgs, m) == 0 ? GW_OK : GW_ENOMEM;
}

static int add_message(const struct canon_req *r, json_t *msgs, size_t mi, struct canon_err *err)
{
    const struct canon_message *m = &r->messages[mi];
    const char *role = m->role == CANON_ROLE_ASSISTANT ? "assistant"
                       : m->role == CANON_ROLE_SYSTEM  ? "system"
                                                       : "user";
    int rc = GW_OK;
    /* Tool results first, each its own message: they answer the calls of
     * the assistant turn before. */
    size_t rest = 0;
    for (size_t j = 0; rc == GW_OK && j < m->nparts; j++) {
        if (m->parts[j].type != CANON_PART_TOOL_RESULT) {
            rest++;
            continue;
        }
        if (m->role != CANON_ROLE_USER)
            return drv_refuse_message(r, mi, "only a user message can carry tool results", err);
        rc = add_tool_result(r, msgs, &m->parts[j], mi, err);
    }
    if (rc != GW_OK || rest == 0)
        return rc;
    struct gw_buf text, thinking;
    gw_buf_init(&text, 0);
    gw_buf_init(&thinking, 0);
    json_t *images = json_array();
    json_t *calls = json_array();
    if (!images || !calls)
        rc = GW_ENOMEM;
    for (size_t j = 0; rc == GW_OK && j < m->nparts; j++) {
        const struct canon_part *p = &m->parts[j];
        switch (p->type) {
        case CANON_PART_TEXT:
            rc = join(&text, p->text);
            break;
        case CANON_PART_IMAGE:
            if (m->role != CANON_ROLE_USER)
                rc = drv_refuse_message(r, mi, "Ollama takes images only in user messages", err);
            else if (p->url)
                rc = drv_refuse_message(r, mi,
                                        "Ollama takes images only as base64 data (data: URLs), not "
                                        "by http(s) URL",
                                        err);
            else if (json_array_append_new(images, json_string(p->data)))
                rc = GW_ENOMEM;
            break;
        case CANON_PART_TOOL_CALL: {
            if (m->role != CANON_ROLE_ASSISTANT) {
                rc = drv_refuse_message(r, mi, "tool calls belong in assistant messages", err);
                break;
            }
            json_t *args = drv_call_args(p, 0);
            if (!args) {
                rc =
                    drv_refuse_message(r, mi, "a tool call's arguments must be a JSON object", err);
                break;
            }
            if (json_array_append_new(calls, json_pack("{s:{s:s,s:o}}", "function", "name", p->name,
                                                       "arguments", args)))
                rc = GW_ENOMEM;
            break;
        }
        case CANON_PART_THINKING:
            if (m->role == CANON_ROLE_ASSISTANT)
                rc = join(&thinking, p->text);
            break;
        case CANON_PART_REDACTED_THINKING:
        case CANON_PART_TOOL_RESULT:
            break;
        case CANON_PART_DOCUMENT:
        case CANON_PART_AUDIO: {
            char where[64];
            snprintf(where, sizeof(where), "message %zu part %zu", mi, j);
            rc = drv_refuse_doc(r, where, p, "ollama", "its chat API takes text and images only",
                                err);
            break;
        }
        }
    }
    json_t *msg = NULL;
    if (rc == GW_OK) {
        msg = json_pack("{s:s,s:o}", "role", role, "content", buf_string(&text));
        if (!msg)
            rc = GW_ENOMEM;
    }
    if (rc == GW_OK) {
        if (json_array_size(images))
            json_object_set(msg, "images", images);
        if (json_array_size(calls))
            json_object_set(msg, "tool_calls", calls);
        if (thinking.len)
            json_object_set_new(msg, "thinking", buf_string(&thinking));
        if (json_array_append_new(msgs, msg))
            rc = GW_ENOMEM;
    }
    json_decref(images);
    json_decref(calls);
    gw_buf_free(&text);
    gw_buf_free(&thinking);
    return rc;
}

static json_t *options_of(const struct canon_req *r)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    static const struct drv_param params[] = {
        {CANON_F_MAX_TOKENS, "num_predict"},
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "top_p"},
        {CANON_F_TOP_K, "top_k"},
        {CANON_F_STOP, "stop"},
        {CANON_F_SEED, "seed"},
        {CANON_F_PRESENCE_PENALTY, "presence_penalty"},
        {CANON_F_FREQUENCY_PENALTY, "frequency_penalty"},
    };
    drv_params(o, r, params, DRV_NPARAMS(params));
    return o;
}

/* Ollama serves one tier (auto and standard need nothing) and gives no
 * log probabilities. */
static int tier_and_logprobs(const struct canon_req *r, struct canon_err *err)
{
    static const struct drv_tier_map tiers = {
        {"", "", NULL, NULL, NULL}, "Ollama serves every request alike: it has no service tiers"};
    const char *tier;
    if (drv_tier_word(r, "ollama", &tiers, &tier, err) != GW_OK)
        return GW_EINVAL;
    return drv_refuse_logprobs(r, "ollama", "Ollama's chat API gives no log probabilities", err);
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    if (tier_and_logprobs(r, err) != GW_OK)
        return GW_EINVAL;
    if (r->tool_choice != CANON_TC_UNSET && r->tool_choice != CANON_TC_AUTO &&
        r->tool_choice != CANON_TC_NONE) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_TOOL_CHOICE), "unsupported_parameter",
                      "%s: Ollama cannot force a tool call; only auto and none are supported",
                      canon_field_name(r, CANON_F_TOOL_CHOICE));
        return GW_EINVAL;
    }
    if (r->parallel_tool_calls == 0) {
        return drv_refuse_parallel_off(r, "Ollama", "it may always call several tools", err);
    }
    json_t *doc = json_pack("{s:s,s:b}", "model", t->model, "stream", r->stream);
    json_t *msgs = json_array();
    if (!doc || !msgs) {
        json_decref(doc);
        json_decref(msgs);
        return GW_ENOMEM;
    }
    json_object_set_new(doc, "messages", msgs);
    int rc = GW_OK;
    if (r->nsystem) {
        struct gw_buf b;
        gw_buf_init(&b, 0);
        for (size_t i = 0; rc == GW_OK && i < r->nsystem; i++) {
            if (r->system[i].type != CANON_PART_TEXT) {
                canon_err_set(err, 400, canon_field_name(r, CANON_F_SYSTEM), "unsupported_content",
                              "Ollama takes only text as the system message");
                rc = GW_EINVAL;
            } else {
                rc = join(&b, r->system[i].text);
            }
        }
        if (rc == GW_OK && json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system",
                                                                 "content", buf_string(&b))))
            rc = GW_ENOMEM;
        gw_buf_free(&b);
    }
    for (size_t i = 0; rc == GW_OK && i < r->nmessages; i++)
        rc = add_message(r, msgs, i, err);
    if (rc == GW_OK && r->ntools && r->tool_choice != CANON_TC_NONE) {
        json_t *tools = json_array();
        for (size_t i = 0; tools && i < r->ntools; i++) {
            const struct canon_tool *tl = &r->tools[i];
            json_t *fn = drv_tool_decl(json_pack("{s:s}", "name", tl->name), tl, "parameters",
                                       DRV_SCHEMA_EMPTY);
            if (!fn)
                break;
            json_array_append_new(tools,
                                  json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (!tools)
            rc = GW_ENOMEM;
        else
            json_object_set_new(doc, "tools", tools);
    }
    if (rc == GW_OK) {
        json_t *o = options_of(r);
        if (!o)
            rc = GW_ENOMEM;
        else if (json_object_size(o))
            json_object_set_new(doc, "options", o);
        else
            json_decref(o);
    }
    if (r->format == CANON_FMT_JSON_OBJECT)
        json_object_set_new(doc, "format", json_string("json"));
    else if (r->format == CANON_FMT_JSON_SCHEMA && r->format_schema)
        json_object_set(doc, "format", r->format_schema);
    else if (r->format == CANON_FMT_JSON_SCHEMA)
        json_object_set_new(doc, "format", json_string("json"));
    if (r->reasoning_off)
        json_object_set_new(doc, "think", json_false());
    else if (r->reasoning_effort || r->reasoning_budget > 0) {
        long long levels = drv_opt_int(t, "think_levels", 0);
        if (!levels && json_is_true(json_object_get(t->provider->options, "think_levels")))
            levels = 1;
        json_object_set_new(doc, "think", levels ? json_string(drv_effort_of(r)) : json_true());
    }
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }
    out->stream = r->stream;
    return drv_json_request(out, t, drv_url(t, "/api/chat"), doc, "Authorization: Bearer ");
}

/* ----------------------------------------------------------------- errors */

/* An Ollama error message (from a body or a stream line) → class. */
static enum canon_failure message_failure(int status, const char *m)
{
    if (gw_str_has(m, "model") && gw_str_has(m, "not found"))
        return CANON_FAIL_MODEL_UNAVAILABLE;
    if (status)
        return canon_classify_http(status, m ? m : "", m ? strlen(m) : 0);
    if (gw_str_has(m, "context length") || gw_str_has(m, "context window"))
        return CANON_FAIL_CONTEXT_OVERFLOW;
    return CANON_FAIL_PROVIDER_5XX;
}

static void classify(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                     size_t msglen)
{
    drv_classify_default(status, body, len, f, msg, msglen);
    if (msg[0] && gw_str_has(msg, "model") && gw_str_has(msg, "not found"))
        *f = CANON_FAIL_MODEL_UNAVAILABLE;
}

/* ------------------------------------------------------------------ parse */

struct ol_parser {
    struct drv_parser base;
    struct gw_buf line; /* stream: the line so far */
    struct drv_tools tools;
};

static struct drv_parser *parser_new(int stream)
{
    struct ol_parser *p = drv_parser_new(sizeof(*p), &drv_ollama, stream);
    if (!p)
        return NULL;
    gw_buf_init(&p->line, DRV_MAX_EVENT);
    return &p->base;
}

static void parser_free(struct drv_parser *bp)
{
    struct ol_parser *p = (struct ol_parser *)bp;
    gw_buf_free(&p->line);
    drv_parser_free(bp);
}

static int on_tool_call(struct ol_parser *p, const json_t *tc, const struct canon_sink *s)
{
    json_t *fn = json_object_get(tc, "function");
    const char *name = gw_json_str(fn, "name");
    if (!name || !*name)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a tool call without a name");
    json_t *args = json_object_get(fn, "arguments");
    char *a = NULL;
    if (json_is_object(args)) {
        if (!(a = json_dumps(args, JSON_COMPACT)))
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
    } else if (json_is_string(args)) {
        /* Not what the API documents, but an object in a string is the
         * same call. */
        json_t *o = json_loads(json_string_value(args), 0, NULL);
        if (json_is_object(o))
            a = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        if (!a)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent tool call arguments that are not an object");
    } else if (args && !json_is_null(args)) {
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent tool call arguments that are not an object");
    }
    int rc = drv_tools_whole(&p->base, &p->tools, gw_json_str(tc, "id"), name, a, s);
    free(a);
    return rc;
}

static int done(struct ol_parser *p, const json_t *doc, const struct canon_sink *s)
{
    long long in = 0, out = 0;
    int have = gw_json_int(doc, "prompt_eval_count", &in) == GW_OK;
    have |= gw_json_int(doc, "eval_count", &out) == GW_OK;
    if (have) {
        struct canon_usage u = {.have = 1, .input = canon_tokens(in), .output = canon_tokens(out)};
        struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &u};
        if (canon_emit(s, &ev))
            return 1;
    }
    p->base.terminal = 1;
    const char *dr = gw_json_str(doc, "done_reason");
    enum canon_stop stop = dr && strcmp(dr, "length") == 0 ? CANON_STOP_MAX_TOKENS : CANON_STOP_END;
    if (stop == CANON_STOP_END && p->tools.count > 0)
        stop = CANON_STOP_TOOL_USE;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = stop};
    canon_emit(s, &ev);
    return 1;
}

/* One response object (a streamed line or the whole answer). */
static int on_object(struct ol_parser *p, const json_t *doc, const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    if (e && !json_is_null(e)) {
        const char *m = json_is_string(e) ? json_string_value(e) : gw_json_str(e, "message");
        return drv_fail(&p->base, s, message_failure(0, m),
                        m ? m : "the provider reported an error");
    }
    if (drv_start(&p->base, NULL, gw_json_str(doc, "model"), s))
        return 1;
    json_t *msg = json_object_get(doc, "message");
    if (drv_emit_text(s, CANON_EV_REASONING, gw_json_str(msg, "thinking")) ||
        drv_emit_text(s, CANON_EV_CHUNK, gw_json_str(msg, "content")))
        return 1;
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc)
    {
        if (on_tool_call(p, tc, s))
            return 1;
    }
    if (gw_json_bool(doc, "done", 0, NULL) == 1)
        return done(p, doc, s);
    return 0;
}

static int on_line(struct ol_parser *p, const char *l, size_t n, const struct canon_sink *s)
{
    while (n && (l[n - 1] == '\r' || l[n - 1] == ' ' || l[n - 1] == '\t'))
        n--;
    while (n && (*l == ' ' || *l == '\t')) {
        l++;
        n--;
    }
    if (n == 0)
        return 0;
    json_t *doc = json_loadb(l, n, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a malformed stream line");
    }
    int stop = on_object(p, doc, s);
    json_decref(doc);
    return stop;
}

/* NDJSON: lines end in LF (a CR before it is dropped); a line is bounded by
 * DRV_MAX_EVENT. A line that arrives whole in one piece is parsed in
 * place; the rest goes through p->line. */
static int parse_stream(struct drv_parser *bp, const char *buf, size_t len,
                        const struct canon_sink *s)
{
    struct ol_parser *p = (struct ol_parser *)bp;
    while (len) {
        const char *nl = memchr(buf, '\n', len);
        size_t take = nl ? (size_t)(nl - buf) : len;
        if (!nl) {
            if (gw_buf_append(&p->line, buf, take) != GW_OK)
                return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                                "a stream line from the provider is too large");
            return 0;
        }
        int stop;
        if (p->line.len == 0) {
            if (take > DRV_MAX_EVENT)
                return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                                "a stream line from the provider is too large");
            stop = on_line(p, buf, take, s);
        } else {
            if (gw_buf_append(&p->line, buf, take) != GW_OK)
                return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                                "a stream line from the provider is too large");
            stop = on_line(p, p->line.data, p->line.len, s);
            gw_buf_reset(&p->line);
        }
        if (stop)
            return 1;
        buf += take + 1;
        len -= take + 1;
    }
    return 0;
}

static int parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse(bp, buf, len, s, parse_stream);
}

static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    if (!on_object((struct ol_parser *)bp, doc, s))
        drv_fail(bp, s, CANON_FAIL_PROVIDER_5XX, "the provider's answer is not done");
}

static void finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct ol_parser *p = (struct ol_parser *)bp;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* A last line without its newline: complete JSON is a line like any
     * other; anything else is a line the connection cut. */
    if (p->line.len) {
        json_t *doc = json_loadb(p->line.data, p->line.len, JSON_REJECT_DUPLICATES, NULL);
        int stop = json_is_object(doc) ? on_object(p, doc, s) : 0;
        json_decref(doc);
        gw_buf_reset(&p->line);
        if (stop)
            return;
    }
    drv_fail(&p->base, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}

/* -------------------------------------------------------------- embeddings */

static int build_embed(const struct drv_target *t, const struct canon_embed_req *r,
                       struct drv_request *out, struct canon_err *err)
{
    (void)err;
    json_t *in = json_array();
    for (size_t i = 0; in && i < r->ninputs; i++)
        json_array_append_new(in, json_string(r->inputs[i]));
    json_t *doc = in ? json_pack("{s:s,s:o}", "model", t->model, "input", in) : NULL;
    if (doc && r->dimensions)
        json_object_set_new(doc, "dimensions", json_integer(r->dimensions));
    return drv_json_request(out, t, drv_url(t, "/api/embed"), doc, "Authorization: Bearer ");
}

static int parse_embed(const char *body, size_t len, struct canon_embed_resp *out, char *msg,
                       size_t msglen)
{
    json_t *doc = json_loadb(body, len, 0, NULL);
    int rc = drv_embed_vectors(json_object_get(doc, "embeddings"), NULL, out, msg, msglen);
    if (rc == GW_OK) {
        long long pt = 0;
        if (gw_json_int(doc, "prompt_eval_count", &pt) == GW_OK) {
            out->usage.input = pt;
            out->usage.have = 1;
        }
        snprintf(out->model, sizeof(out->model), "%s",
                 gw_json_str(doc, "model") ? gw_json_str(doc, "model") : "");
    }
    json_decref(doc);
    return rc;
}

const struct dp_driver drv_ollama = {
    .info = &dp_driver_catalog[DRV_ID_OLLAMA],
    .build_chat = build_chat,
    .parser_new = parser_new,
    .parse = parse,
    .finish = finish,
    .parser_free = parser_free,
    .classify = classify,
    .build_embed = build_embed,
    .parse_embed = parse_embed,
};
