/*
 * The "openai-responses" driver: OpenAI's Responses API (and services that
 * speak it), stateless.
 *
 * Upstream request: POST {base_url}/responses (base_url like
 * https://api.openai.com/v1), Bearer auth, store false. The canonical
 * request becomes: instructions (the system text, parts joined by blank
 * lines), input items (user and system messages with input_text and
 * input_image parts, documents as input_file parts (file_data with a
 * filename, or file_url); assistant text as output_text messages; tool calls as
 * function_call items; tool results as function_call_output items, an error
 * result marked "[tool error] " as the openai driver does; signed thinking
 * as reasoning items carrying the signature as encrypted_content, redacted
 * thinking as a reasoning item with only encrypted_content), flat function
 * tools (strict false unless the client said otherwise: the Responses API
 * would default to strict, the other formats do not), tool_choice,
 * parallel_tool_calls, temperature, top_p, max_output_tokens, text.format,
 * reasoning.effort (a token budget becomes an effort as in the openai
 * driver), user, safety_identifier and service_tier (standard as
 * "default"). Thinking without a signature is not sent back: the API
 * takes earlier reasoning only as its own encrypted items. The served tier
 * is read from the response object's service_tier. Log probabilities:
 * top_logprobs and include "message.output_text.logprobs"; each
 * output_text's (or text delta's) logprobs go on its CHUNK.
 *
 * Refused (the API has no such parameters): top_k, seed, stop sequences,
 * presence_penalty and frequency_penalty, each named in the client's terms;
 * audio input and documents given as text, a document's context and its
 * citations flag (the API has no such input).
 *
 * Options (snapshot providers[].options):
 *   reasoning_summary    "auto", "concise" or "detailed": asks for reasoning
 *                        summaries (reasoning.summary), the only reasoning
 *                        text OpenAI's models show. Off by default: OpenAI
 *                        requires a verified organization for it.
 *   encrypted_reasoning  1: always include "reasoning.encrypted_content";
 *                        0: never; default: when the request sets a
 *                        reasoning effort or budget or carries signed
 *                        reasoning back (non-reasoning models refuse it).
 *
 * Upstream answer: the Responses event stream (response.created, output
 * items, output_text / refusal / reasoning_summary_text / reasoning_text /
 * function_call_arguments deltas, response.completed | response.incomplete
 * | response.failed, error), or one response object. Reasoning summary parts
 * after the first are separated by a blank line; a reasoning item's
 * encrypted_content becomes the block's signature. The stop reason is
 * tool_use when the answer called functions, refusal when it refused, and
 * from incomplete_details.reason for an incomplete response.
 *
 * Embeddings: POST {base_url}/embeddings, as the openai driver (the
 * Responses API has no embeddings of its own; OpenAI serves them beside it).
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
#include "gw_sse.h"

/* ------------------------------------------------------------------ build */

static int refuse(const struct canon_req *r, enum canon_field f, struct canon_err *err)
{
    const char *name = canon_field_name(r, f);
    canon_err_set(err, 400, name, "unsupported_parameter",
                  "%s is not supported by the OpenAI Responses API", name);
    return GW_EINVAL;
}

static int content_err(const struct canon_req *r, struct canon_err *err, const char *where,
                       const char *what)
{
    const char *field = canon_field_name(r, CANON_F_MESSAGES);
    canon_err_set(err, 400, field, "unsupported_content",
                  "%s, %s: the OpenAI Responses API takes only %s here", field, where, what);
    return GW_EINVAL;
}

static json_t *image_part(const struct canon_part *p)
{
    json_t *url = drv_image_url(p);
    if (!url)
        return NULL;
    return json_pack("{s:s,s:o,s:s}", "type", "input_image", "image_url", url, "detail",
                     p->detail ? p->detail : "auto");
}

static void refuse_content(const struct canon_req *r, const char *where, int images,
                           struct canon_err *err)
{
    content_err(r, err, where, images ? "text and images" : "text");
}

/* A document as an input_file: its bytes as a data: URL with a file name,
 * or its URL. The API takes no audio input. */
static json_t *media_part(const struct canon_req *r, const char *where, const struct canon_part *p,
                          struct canon_err *err)
{
    if (p->type == CANON_PART_AUDIO) {
        drv_refuse_doc(r, where, p, "openai-responses", "the Responses API takes no audio input",
                       err);
        return NULL;
    }
    if (p->text) {
        drv_refuse_doc(r, where, p, "openai-responses",
                       "its input_file parts take the file's bytes (file_data) or a file_url, "
                       "not text",
                       err);
        return NULL;
    }
    if (drv_doc_members(r, where, p, DRV_DOC_TITLE, "openai-responses", err))
        return NULL;
    json_t *f = json_pack("{s:s}", "type", "input_file");
    if (f && p->url) {
        json_object_set_new(f, "file_url", json_string(p->url));
        if (p->filename)
            json_object_set_new(f, "filename", json_string(p->filename));
    } else if (f) {
        char *name = drv_doc_filename(p);
        if (!name || json_object_set_new(f, "filename", json_string(name)) ||
            json_object_set_new(f, "file_data", drv_image_url(p))) {
            json_decref(f);
            f = NULL;
        }
        free(name);
    }
    return f;
}

/* Input content: a string for one text part, else input_text / input_image
 * / input_file parts. */
static const struct drv_content_fmt content_fmt = {
    .text_type = "input_text", .image = image_part, .media = media_part, .refuse = refuse_content};

static int add(json_t *input, json_t *item)
{
    return item && json_array_append_new(input, item) == 0 ? GW_OK : GW_ENOMEM;
}

static int add_result(const struct canon_req *r, json_t *input, const struct canon_part *p,
                      const char *where, struct canon_err *err)
{
    json_t *out;
    if (p->is_error) {
        /* The API has no error flag on a function's output: the flag is
         * kept as a marker in front of the text rather than dropped. */
        struct gw_buf b;
        int rc = drv_result_text(p, "[tool error] ", &b);
        out = rc == GW_OK ? json_string(b.data ? b.data : "") : NULL;
        gw_buf_free(&b);
        if (rc == GW_EINVAL)
            return content_err(r, err, where, "text in an error result");
    } else if (p->ncontent == 0) {
        out = json_string("");
    } else {
        out = drv_content(r, p->content, p->ncontent, 1, where, &content_fmt, err);
        if (!out && err->status)
            return GW_EINVAL;
    }
    if (!out)
        return GW_ENOMEM;
    return add(input, json_pack("{s:s,s:s,s:o}", "type", "function_call_output", "call_id", p->id,
                                "output", out));
}

static int add_user(const struct canon_req *r, json_t *input, const struct canon_message *m,
                    size_t mi, struct canon_err *err)
{
    char where[64];
    /* Function outputs first: they answer the calls just before them. */
    for (size_t j = 0; j < m->nparts; j++) {
        if (m->parts[j].type != CANON_PART_TOOL_RESULT)
            continue;
        snprintf(where, sizeof(where), "message %zu tool result %zu", mi, j);
        int rc = add_result(r, input, &m->parts[j], where, err);
        if (rc)
            return rc;
    }
    json_t *c;
    int rc = drv_user_content(r, m, mi, &content_fmt, &c, err);
    if (rc != GW_OK || !c)
        return rc;
    return add(input, json_pack("{s:s,s:s,s:o}", "type", "message", "role", "user", "content", c));
}

static int add_assistant(const struct canon_req *r, json_t *input, const struct canon_message *m,
                         size_t mi, struct canon_err *err)
{
    json_t *text = NULL; /* the open run of output_text parts */
    int rc = GW_OK;
    for (size_t j = 0; rc == GW_OK && j < m->nparts; j++) {
        const struct canon_part *p = &m->parts[j];
        if (p->type == CANON_PART_TEXT) {
            if (!text && !(text = json_array()))
                return GW_ENOMEM;
            json_array_append_new(text, json_pack("{s:s,s:s,s:[]}", "type", "output_text", "text",
                                                  p->text, "annotations"));
            continue;
        }
        if (text) {
            rc = add(input, json_pack("{s:s,s:s,s:o}", "type", "message", "role", "assistant",
                                      "content", text));
            text = NULL;
            if (rc)
                return rc;
        }
        switch (p->type) {
        case CANON_PART_TOOL_CALL:
            rc = add(input, json_pack("{s:s,s:s,s:s,s:s}", "type", "function_call", "call_id",
                                      p->id, "name", p->name, "arguments", p->arguments));
            break;
        case CANON_PART_THINKING:
            /* Only the API's own (encrypted) reasoning goes back; unsigned
             * reasoning is context it would not take. */
            if (p->signature)
                rc = add(input, json_pack("{s:s,s:[{s:s,s:s}],s:s}", "type", "reasoning", "summary",
                                          "type", "summary_text", "text", p->text,
                                          "encrypted_content", p->signature));
            break;
        case CANON_PART_REDACTED_THINKING:
            rc = add(input, json_pack("{s:s,s:[],s:s}", "type", "reasoning", "summary",
                                      "encrypted_content", p->text));
            break;
        default: {
            char where[64];
            snprintf(where, sizeof(where), "message %zu", mi);
            return content_err(r, err, where, "text, tool calls and reasoning");
        }
        }
    }
    if (text && rc == GW_OK)
        rc = add(input, json_pack("{s:s,s:s,s:o}", "type", "message", "role", "assistant",
                                  "content", text));
    else
        json_decref(text);
    return rc;
}

static int carries_reasoning(const struct canon_req *r)
{
    for (size_t i = 0; i < r->nmessages; i++)
        for (size_t j = 0; j < r->messages[i].nparts; j++) {
            const struct canon_part *p = &r->messages[i].parts[j];
            if ((p->type == CANON_PART_THINKING && p->signature) ||
                p->type == CANON_PART_REDACTED_THINKING)
                return 1;
        }
    return 0;
}

static json_t *instructions_of(const struct canon_req *r, struct canon_err *err)
{
    if (r->nsystem == 1 && r->system[0].type == CANON_PART_TEXT)
        return json_string(r->system[0].text);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = GW_OK;
    for (size_t i = 0; rc == GW_OK && i < r->nsystem; i++) {
        if (r->system[i].type != CANON_PART_TEXT) {
            gw_buf_free(&b);
            content_err(r, err, "system", "text");
            return NULL;
        }
        if (i)
            rc = gw_buf_appends(&b, "\n\n");
        if (rc == GW_OK)
            rc = gw_buf_appends(&b, r->system[i].text);
    }
    json_t *s = rc == GW_OK ? json_string(b.data ? b.data : "") : NULL;
    gw_buf_free(&b);
    return s;
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    if (r->has_top_k)
        return refuse(r, CANON_F_TOP_K, err);
    if (r->has_seed)
        return refuse(r, CANON_F_SEED, err);
    if (r->nstop)
        return refuse(r, CANON_F_STOP, err);
    if (r->has_presence_penalty)
        return refuse(r, CANON_F_PRESENCE_PENALTY, err);
    if (r->has_frequency_penalty)
        return refuse(r, CANON_F_FREQUENCY_PENALTY, err);
    json_t *doc = json_pack("{s:s,s:b,s:b}", "model", t->model, "stream", r->stream, "store", 0);
    json_t *input = json_array();
    if (!doc || !input) {
        json_decref(doc);
        json_decref(input);
        return GW_ENOMEM;
    }
    int rc = GW_OK;
    if (r->nsystem) {
        json_t *ins = instructions_of(r, err);
        if (!ins)
            rc = err->status ? GW_EINVAL : GW_ENOMEM;
        else
            json_object_set_new(doc, "instructions", ins);
    }
    json_object_set_new(doc, "input", input);
    for (size_t i = 0; rc == GW_OK && i < r->nmessages; i++) {
        const struct canon_message *m = &r->messages[i];
        if (m->role == CANON_ROLE_USER)
            rc = add_user(r, input, m, i, err);
        else if (m->role == CANON_ROLE_ASSISTANT)
            rc = add_assistant(r, input, m, i, err);
        else {
            json_t *c = drv_content(r, m->parts, m->nparts, 0, "system message", &content_fmt, err);
            rc = c ? add(input, json_pack("{s:s,s:s,s:o}", "type", "message", "role", "system",
                                          "content", c))
                 : err->status ? GW_EINVAL
                               : GW_ENOMEM;
        }
    }
    if (rc != GW_OK) {
        json_decref(doc);
        return rc;
    }
    if (r->ntools) {
        json_t *tools = json_array();
        for (size_t i = 0; tools && i < r->ntools; i++) {
            const struct canon_tool *tl = &r->tools[i];
            json_t *fn = drv_tool_decl(json_pack("{s:s,s:s}", "type", "function", "name", tl->name),
                                       tl, "parameters", DRV_SCHEMA_NULL);
            if (!fn)
                break;
            json_object_set_new(fn, "strict", json_boolean(tl->strict > 0));
            json_array_append_new(tools, fn);
        }
        json_object_set_new(doc, "tools", tools);
    }
    if (drv_tool_choice_word(r->tool_choice))
        json_object_set_new(doc, "tool_choice", json_string(drv_tool_choice_word(r->tool_choice)));
    else if (r->tool_choice == CANON_TC_NAMED)
        json_object_set_new(
            doc, "tool_choice",
            json_pack("{s:s,s:s}", "type", "function", "name", r->tool_choice_name));
    if (r->parallel_tool_calls >= 0)
        json_object_set_new(doc, "parallel_tool_calls", json_boolean(r->parallel_tool_calls));
    static const struct drv_param params[] = {
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "top_p"},
        {CANON_F_MAX_TOKENS, "max_output_tokens"},
    };
    drv_params(doc, r, params, DRV_NPARAMS(params));
    json_t *fmt = NULL;
    if (r->format == CANON_FMT_TEXT)
        fmt = json_pack("{s:s}", "type", "text");
    else if (r->format == CANON_FMT_JSON_OBJECT)
        fmt = json_pack("{s:s}", "type", "json_object");
    else if (r->format == CANON_FMT_JSON_SCHEMA) {
        fmt = json_pack("{s:s,s:s,s:O}", "type", "json_schema", "name",
                        r->format_name ? r->format_name : "response", "schema", r->format_schema);
        if (fmt && r->format_strict >= 0)
            json_object_set_new(fmt, "strict", json_boolean(r->format_strict));
    }
    if (fmt)
        json_object_set_new(doc, "text", json_pack("{s:o}", "format", fmt));
    const char *effort = r->reasoning_off ? NULL : drv_effort_of(r);
    const char *summary = drv_opt_str(t, "reasoning_summary", NULL);
    if (effort || summary) {
        json_t *rs = json_object();
        if (rs && effort)
            json_object_set_new(rs, "effort", json_string(effort));
        if (rs && summary)
            json_object_set_new(rs, "summary", json_string(summary));
        json_object_set_new(doc, "reasoning", rs);
    }
    /* include: the encrypted reasoning to hand back, the text's logprobs. */
    long long enc = drv_opt_int(t, "encrypted_reasoning", -1);
    json_t *inc = json_array();
    if (inc && (enc == 1 || (enc < 0 && (effort || carries_reasoning(r)))))
        json_array_append_new(inc, json_string("reasoning.encrypted_content"));
    if (inc && r->logprobs) {
        json_array_append_new(inc, json_string("message.output_text.logprobs"));
        json_object_set_new(doc, "top_logprobs",
                            json_integer(r->top_logprobs > 0 ? r->top_logprobs : 0));
    }
    if (json_array_size(inc))
        json_object_set_new(doc, "include", inc);
    else
        json_decref(inc);
    if (r->user)
        json_object_set_new(doc, "user", json_string(r->user));
    if (r->safety_identifier)
        json_object_set_new(doc, "safety_identifier", json_string(r->safety_identifier));
    const char *tier;
    if (drv_tier_word(r, "openai-responses", &drv_tier_openai, &tier, err) != GW_OK) {
        json_decref(doc);
        return GW_EINVAL;
    }
    if (tier)
        json_object_set_new(doc, "service_tier", json_string(tier));

    out->stream = r->stream;
    return drv_json_request(out, t, drv_url(t, "/responses"), doc, "Authorization: Bearer ");
}

/* ------------------------------------------------------------------ parse */

struct rp_parser {
    struct drv_parser base;
    struct drv_tools tools;
    int called;  /* the answer called functions */
    int refused; /* the answer is a refusal */
    /* reasoning text: the part it last came from, for separators */
    int rs_any;
    long long rs_item, rs_part;
    int item_text; /* the current output item streamed text or reasoning */
};

static struct drv_parser *parser_new(int stream)
{
    struct rp_parser *p = drv_parser_new(sizeof(*p), &drv_openai_responses, stream);
    if (!p)
        return NULL;
    p->tools.interleave = 1; /* each event names its item (output_index) */
    return &p->base;
}

static void parser_free(struct drv_parser *bp)
{
    drv_tools_free(&((struct rp_parser *)bp)->tools);
    drv_parser_free(bp);
}

/* An error code of the Responses API (or a gateway's failure class) as a
 * failure class. */
static enum canon_failure failure_of(const char *code)
{
    if (!code)
        return CANON_FAIL_PROVIDER_5XX;
    /* Another llmgw in front of this one names its classes. */
    int named = canon_failure_from_name(code);
    if (named >= 0)
        return (enum canon_failure)named;
    if (strcmp(code, "rate_limit_exceeded") == 0)
        return CANON_FAIL_RATE_LIMITED;
    if (strcmp(code, "insufficient_quota") == 0)
        return CANON_FAIL_QUOTA_EXHAUSTED;
    if (strcmp(code, "context_length_exceeded") == 0)
        return CANON_FAIL_CONTEXT_OVERFLOW;
    if (strcmp(code, "invalid_prompt") == 0 || strstr(code, "content_policy"))
        return CANON_FAIL_CONTENT_FILTERED;
    if (strstr(code, "image"))
        return CANON_FAIL_UNSUPPORTED_INPUT;
    if (strcmp(code, "model_not_found") == 0)
        return CANON_FAIL_MODEL_UNAVAILABLE;
    return CANON_FAIL_PROVIDER_5XX;
}

/* An error object ({code, message}, or an event carrying them at the top
 * level) → ERROR. */
static int fail_with(struct rp_parser *p, const json_t *e, const struct canon_sink *s)
{
    const json_t *inner = json_object_get(e, "error");
    if (json_is_object(inner))
        e = inner;
    const char *msg = gw_json_str(e, "message");
    return drv_fail(&p->base, s, failure_of(gw_json_str(e, "code")),
                    msg ? msg : "the provider reported an error");
}

static int emit_start(struct rp_parser *p, const json_t *resp, const struct canon_sink *s)
{
    return drv_start_tier(&p->base, gw_json_str(resp, "id"), gw_json_str(resp, "model"),
                          canon_tier_served(gw_json_str(resp, "service_tier")), s);
}

/* Responses usage → canonical: input_tokens_details breaks input_tokens
 * down, so input_tokens includes cached_tokens (reads) and
 * cache_write_tokens (writes, whose TTL the API does not say: 5m). */
static int emit_usage(const json_t *u, const char *tier, const struct canon_sink *s)
{
    if (!json_is_object(u))
        return 0;
    struct canon_usage cu = {.have = 1};
    long long in = 0, out = 0, cached = 0, written = 0, reasoning = 0;
    const json_t *det = json_object_get(u, "input_tokens_details");
    gw_json_int(u, "input_tokens", &in);
    gw_json_int(u, "output_tokens", &out);
    gw_json_int(det, "cached_tokens", &cached);
    gw_json_int(det, "cache_write_tokens", &written);
    gw_json_int(json_object_get(u, "output_tokens_details"), "reasoning_tokens", &reasoning);
    in = canon_tokens(in);
    out = canon_tokens(out);
    cached = canon_tokens(cached);
    written = canon_tokens(written);
    reasoning = canon_tokens(reasoning);
    if (cached > in)
        cached = in;
    if (written > in - cached)
        written = in - cached;
    cu.input = in - cached - written;
    cu.cache_read = cached;
    cu.cache_write_5m = written;
    cu.output = out;
    cu.reasoning = reasoning > out ? out : reasoning;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &cu, .service_tier = tier};
    return canon_emit(s, &ev);
}

/* Text, with its log probabilities lp (an output_text's or a delta's
 * "logprobs" array) when the request asked for them. */
static int text(struct rp_parser *p, const char *t, const json_t *lp, const struct canon_sink *s)
{
    if (!t || !*t)
        return 0;
    if (drv_tools_close(&p->tools, s))
        return 1;
    p->item_text = 1;
    return drv_emit_text_lp(&p->base, s, t, lp);
}

/* Reasoning text from part (item, part): a blank line between parts. */
static int reasoning(struct rp_parser *p, long long item, long long part, const char *t,
                     const struct canon_sink *s)
{
    if (!t || !*t)
        return 0;
    if (drv_tools_close(&p->tools, s))
        return 1;
    p->item_text = 1;
    if (p->rs_any && (item != p->rs_item || part != p->rs_part)) {
        struct canon_event sep = {.type = CANON_EV_REASONING, .text = "\n\n", .len = 2};
        if (canon_emit(s, &sep))
            return 1;
    }
    p->rs_any = 1;
    p->rs_item = item;
    p->rs_part = part;
    struct canon_event ev = {.type = CANON_EV_REASONING, .text = t, .len = strlen(t)};
    return canon_emit(s, &ev);
}

static int signature(struct rp_parser *p, const char *sig, const struct canon_sink *s)
{
    if (!sig || !*sig)
        return 0;
    if (drv_tools_close(&p->tools, s))
        return 1;
    /* The next reasoning text is a new block. */
    p->rs_any = 0;
    return drv_emit_signature(s, sig);
}

static int call(struct rp_parser *p, long long key, const char *id, const char *name,
                const char *args, const struct canon_sink *s)
{
    p->called = 1;
    return drv_tools_check(&p->base, s, drv_tools_delta(&p->tools, key, id, name, args, s),
                           "the provider sent more of a function call it had ended");
}

/* A whole output item (non-stream answers, and a stream's done item whose
 * content was not streamed): its content as events. */
static int item_content(struct rp_parser *p, long long oi, const json_t *item,
                        const struct canon_sink *s)
{
    const char *type = gw_json_str(item, "type");
    size_t i;
    json_t *c;
    if (!type)
        return 0;
    if (strcmp(type, "message") == 0) {
        json_array_foreach(json_object_get(item, "content"), i, c)
        {
            const char *ct = gw_json_str(c, "type");
            if (ct && strcmp(ct, "output_text") == 0 &&
                text(p, gw_json_str(c, "text"), json_object_get(c, "logprobs"), s))
                return 1;
            if (ct && strcmp(ct, "refusal") == 0) {
                p->refused = 1;
                if (text(p, gw_json_str(c, "refusal"), NULL, s))
                    return 1;
            }
        }
    } else if (strcmp(type, "reasoning") == 0) {
        json_t *content = json_object_get(item, "content");
        int raw = json_array_size(content) > 0;
        json_array_foreach(raw ? content : json_object_get(item, "summary"), i, c)
        {
            if (reasoning(p, oi, (long long)i, gw_json_str(c, "text"), s))
                return 1;
        }
    } else if (strcmp(type, "function_call") == 0) {
        const char *args = gw_json_str(item, "arguments");
        if (call(p, oi, gw_json_str(item, "call_id"), gw_json_str(item, "name"),
                 args && *args ? args : "{}", s))
            return 1;
    }
    return 0;
}

static int done(struct rp_parser *p, const json_t *resp, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s))
        return 1;
    if (emit_usage(json_object_get(resp, "usage"),
                   canon_tier_served(gw_json_str(resp, "service_tier")), s))
        return 1;
    enum canon_stop stop = CANON_STOP_END;
    if (strcmp(gw_json_str(resp, "status") ? gw_json_str(resp, "status") : "", "incomplete") == 0) {
        const char *why = gw_json_str(json_object_get(resp, "incomplete_details"), "reason");
        stop = why && strcmp(why, "content_filter") == 0 ? CANON_STOP_CONTENT_FILTER
                                                         : CANON_STOP_MAX_TOKENS;
    } else if (p->called)
        stop = CANON_STOP_TOOL_USE;
    else if (p->refused)
        stop = CANON_STOP_REFUSAL;
    p->base.terminal = 1;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = stop};
    canon_emit(s, &ev);
    return 1;
}

static long long index_of(const json_t *doc, const char *key)
{
    long long v = 0;
    gw_json_int(doc, key, &v);
    return v;
}

/* One streamed event. */
static int on_event(struct rp_parser *p, const char *type, const json_t *doc,
                    const struct canon_sink *s)
{
    if (strcmp(type, "error") == 0)
        return fail_with(p, doc, s);
    if (strcmp(type, "response.failed") == 0) {
        const json_t *e = json_object_get(json_object_get(doc, "response"), "error");
        return json_is_object(e)
                   ? fail_with(p, e, s)
                   : drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "the provider failed");
    }
    const json_t *resp = json_object_get(doc, "response");
    if (emit_start(p, json_is_object(resp) ? resp : NULL, s))
        return 1;
    if (strcmp(type, "response.completed") == 0 || strcmp(type, "response.incomplete") == 0)
        return done(p, resp, s);
    long long oi = index_of(doc, "output_index");
    if (strcmp(type, "response.output_text.delta") == 0)
        return text(p, gw_json_str(doc, "delta"), json_object_get(doc, "logprobs"), s);
    if (strcmp(type, "response.refusal.delta") == 0) {
        p->refused = 1;
        return text(p, gw_json_str(doc, "delta"), NULL, s);
    }
    if (strcmp(type, "response.reasoning_summary_text.delta") == 0)
        return reasoning(p, oi, index_of(doc, "summary_index"), gw_json_str(doc, "delta"), s);
    if (strcmp(type, "response.reasoning_text.delta") == 0)
        return reasoning(p, oi, index_of(doc, "content_index"), gw_json_str(doc, "delta"), s);
    const json_t *item = json_object_get(doc, "item");
    const char *itype = gw_json_str(item, "type");
    int is_call = itype && strcmp(itype, "function_call") == 0;
    if (strcmp(type, "response.output_item.added") == 0) {
        p->item_text = 0;
        if (!is_call)
            return 0;
        const char *args = gw_json_str(item, "arguments");
        return call(p, oi, gw_json_str(item, "call_id"), gw_json_str(item, "name"), args, s);
    }
    /* Calls may interleave (each event names its item): a call is live
     * from its item's added to its done, and ends there. */
    int live = drv_tools_live(&p->tools, oi);
    if (strcmp(type, "response.function_call_arguments.delta") == 0) {
        if (!live)
            return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                            "the provider sent arguments for a function call it had not started");
        return call(p, oi, NULL, NULL, gw_json_str(doc, "delta"), s);
    }
    if (strcmp(type, "response.function_call_arguments.done") == 0) {
        /* Arguments given whole rather than streamed. */
        if (live && !drv_tools_has_args(&p->tools, oi))
            return call(p, oi, NULL, NULL, gw_json_str(doc, "arguments"), s);
        return 0;
    }
    if (strcmp(type, "response.output_item.done") == 0) {
        if (is_call) {
            if (!live)
                return item_content(p, oi, item, s) || drv_tools_end(&p->tools, oi, s);
            if (!drv_tools_has_args(&p->tools, oi) &&
                call(p, oi, NULL, NULL, gw_json_str(item, "arguments"), s))
                return 1;
            return drv_tools_end(&p->tools, oi, s);
        }
        /* Content a provider put only in the finished item. */
        if (!p->item_text && item_content(p, oi, item, s))
            return 1;
        p->item_text = 0;
        if (itype && strcmp(itype, "reasoning") == 0)
            return signature(p, gw_json_str(item, "encrypted_content"), s);
        return 0;
    }
    /* response.created, in_progress, content_part.*, *.done text events
     * and the rest carry nothing new. */
    return 0;
}

/* [DONE] is not the API's, but some compatible servers add it. */
static enum drv_sse_step raw_event(struct drv_parser *bp, const struct gw_sse_event *ev,
                                   const struct canon_sink *s)
{
    (void)bp;
    (void)s;
    return ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0 ? DRV_SSE_SKIP : DRV_SSE_JSON;
}

/* The event's type: its data's, else its SSE event name. */
static int on_sse(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                  const struct canon_sink *s)
{
    struct rp_parser *p = (struct rp_parser *)bp;
    const char *type = gw_json_str(doc, "type");
    if (!type && ev->event_len)
        type = ev->event;
    if (!type)
        return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                        "the provider sent a malformed stream event");
    return on_event(p, type, doc, s);
}

static int parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, raw_event, on_sse);
}

/* A whole response object → the same events a stream would give. */
static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct rp_parser *p = (struct rp_parser *)bp;
    json_t *e = json_object_get(doc, "error");
    const char *status = gw_json_str(doc, "status");
    if ((e && !json_is_null(e)) || (status && strcmp(status, "failed") == 0)) {
        if (json_is_object(e))
            fail_with(p, e, s);
        else
            drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX,
                     json_is_string(e) ? json_string_value(e) : "the provider failed");
        return;
    }
    if (!json_is_array(json_object_get(doc, "output"))) {
        drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, "the provider's answer has no output");
        return;
    }
    if (emit_start(p, doc, s))
        return;
    size_t i;
    json_t *item;
    json_array_foreach(json_object_get(doc, "output"), i, item)
    {
        const char *type = gw_json_str(item, "type");
        if (!type || strcmp(type, "function_call") != 0)
            if (drv_tools_close(&p->tools, s))
                return;
        if (item_content(p, (long long)i, item, s))
            return;
        if (type && strcmp(type, "reasoning") == 0 &&
            signature(p, gw_json_str(item, "encrypted_content"), s))
            return;
    }
    done(p, doc, s);
}

static void finish(struct drv_parser *bp, const struct canon_sink *s)
{
    if (!drv_finish(bp, s, parse_whole))
        drv_fail(bp, s, CANON_FAIL_NETWORK,
                 "the provider's stream ended before the response completed");
}

const struct dp_driver drv_openai_responses = {
    .info = &dp_driver_catalog[DRV_ID_OPENAI_RESPONSES],
    .build_chat = build_chat,
    .parser_new = parser_new,
    .parse = parse,
    .finish = finish,
    .parser_free = parser_free,
    /* The Responses API has no embeddings of its own: OpenAI's beside it. */
    .build_embed = drv_openai_build_embed,
    .parse_embed = drv_openai_parse_embed,
    .build_media = drv_openai_build_media,
    .media_usage = drv_openai_media_usage,
};
