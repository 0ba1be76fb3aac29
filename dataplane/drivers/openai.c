/*
 * The "openai" driver: any OpenAI-compatible chat completions endpoint
 * (OpenAI, xAI, Z.AI, OpenRouter, DeepSeek, Mistral, vLLM, LM Studio).
 *
 * Upstream request: POST {base_url}/chat/completions, Bearer auth, usage
 * requested with stream_options.include_usage when streaming. Options:
 *   max_tokens_field  "max_tokens" (default) or "max_completion_tokens"
 *                     (OpenAI's reasoning models accept only the latter)
 *
 * Upstream answer: SSE chunks (delta.content, delta.reasoning_content or
 * delta.reasoning, delta.tool_calls[] by index, finish_reason, a usage
 * chunk, "data: [DONE]"), or one chat.completion JSON.
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

/* ------------------------------------------------------------------ build */

static json_t *image_part(const struct canon_part *p)
{
    json_t *url = drv_image_url(p);
    if (!url)
        return NULL;
    json_t *iu = json_pack("{s:o}", "url", url);
    if (iu && p->detail)
        json_object_set_new(iu, "detail", json_string(p->detail));
    return json_pack("{s:s,s:o}", "type", "image_url", "image_url", iu);
}

static json_t *text_part(const char *text)
{
    return json_pack("{s:s,s:s}", "type", "text", "text", text);
}

static void refuse_content(const struct canon_req *r, const char *where, int images,
                           struct canon_err *err)
{
    canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                  "%s: an OpenAI-compatible provider takes only text%s here", where,
                  images ? " and images" : "");
}

/* Message content: a string when it is one text part, else an array. */
static const struct drv_content_fmt content_fmt = {
    .text_type = "text", .image = image_part, .refuse = refuse_content};

static int add_user(const struct canon_req *r, json_t *msgs, const struct canon_message *m,
                    size_t mi, struct canon_err *err)
{
    char where[64];
    /* Tool results first: they must follow the assistant's tool calls. */
    for (size_t j = 0; j < m->nparts; j++) {
        const struct canon_part *p = &m->parts[j];
        if (p->type != CANON_PART_TOOL_RESULT)
            continue;
        snprintf(where, sizeof(where), "message %zu tool result %zu", mi, j);
        json_t *c;
        if (p->is_error) {
            /* OpenAI has no error flag on tool results: the flag is kept as
             * a marker in front of the text rather than dropped. */
            struct gw_buf b;
            int rc = drv_result_text(p, "[tool error] ", &b);
            c = rc == GW_OK ? json_string(b.data ? b.data : "") : NULL;
            gw_buf_free(&b);
            if (rc == GW_EINVAL) {
                canon_err_set(
                    err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                    "%s: an OpenAI-compatible provider takes only text in tool results", where);
                return GW_EINVAL;
            }
        } else if (p->ncontent == 0) {
            c = json_string("");
        } else {
            c = drv_content(r, p->content, p->ncontent, 0, where, &content_fmt, err);
            if (!c && err->status)
                return GW_EINVAL;
        }
        if (!c || json_array_append_new(msgs, json_pack("{s:s,s:s,s:o}", "role", "tool",
                                                        "tool_call_id", p->id, "content", c)))
            return GW_ENOMEM;
    }
    json_t *c;
    int rc = drv_user_content(r, m, mi, &content_fmt, &c, err);
    if (rc != GW_OK || !c)
        return rc;
    return json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "user", "content", c))
               ? GW_ENOMEM
               : GW_OK;
}

static int add_assistant(const struct canon_req *r, json_t *msgs, const struct canon_message *m,
                         size_t mi, struct canon_err *err)
{
    json_t *msg = json_pack("{s:s}", "role", "assistant");
    json_t *text = json_array();
    json_t *calls = json_array();
    if (!msg || !text || !calls)
        goto oom;
    for (size_t j = 0; j < m->nparts; j++) {
        const struct canon_part *p = &m->parts[j];
        switch (p->type) {
        case CANON_PART_TEXT:
            json_array_append_new(text, text_part(p->text));
            break;
        case CANON_PART_TOOL_CALL:
            json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", p->id, "type",
                                                   "function", "function", "name", p->name,
                                                   "arguments", p->arguments));
            break;
        case CANON_PART_THINKING:
        case CANON_PART_REDACTED_THINKING:
            /* Chat completions takes no reasoning back; earlier turns'
             * thinking is context the provider would discard anyway. */
            break;
        default:
            canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                          "message %zu: an assistant message to an OpenAI-compatible provider "
                          "takes only text and tool calls",
                          mi);
            json_decref(msg);
            json_decref(text);
            json_decref(calls);
            return GW_EINVAL;
        }
    }
    if (json_array_size(text) == 1)
        json_object_set(msg, "content", json_object_get(json_array_get(text, 0), "text"));
    else if (json_array_size(text) > 1)
        json_object_set(msg, "content", text);
    else
        json_object_set_new(msg, "content", json_null());
    if (json_array_size(calls))
        json_object_set(msg, "tool_calls", calls);
    json_decref(text);
    json_decref(calls);
    return json_array_append_new(msgs, msg) ? GW_ENOMEM : GW_OK;
oom:
    json_decref(msg);
    json_decref(text);
    json_decref(calls);
    return GW_ENOMEM;
}

static int build_chat(const struct drv_target *t, const struct canon_req *r,
                      struct drv_request *out, struct canon_err *err)
{
    if (r->has_top_k) {
        canon_err_set(err, 400, canon_field_name(r, CANON_F_TOP_K), "unsupported_parameter",
                      "%s is not supported by OpenAI-compatible providers",
                      canon_field_name(r, CANON_F_TOP_K));
        return GW_EINVAL;
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
        json_t *c = drv_content(r, r->system, r->nsystem, 0, "system", &content_fmt, err);
        if (!c)
            rc = err->status ? GW_EINVAL : GW_ENOMEM;
        else
            json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", c));
    }
    for (size_t i = 0; rc == GW_OK && i < r->nmessages; i++) {
        const struct canon_message *m = &r->messages[i];
        if (m->role == CANON_ROLE_USER)
            rc = add_user(r, msgs, m, i, err);
        else if (m->role == CANON_ROLE_ASSISTANT)
            rc = add_assistant(r, msgs, m, i, err);
        else {
            json_t *c = drv_content(r, m->parts, m->nparts, 0, "system message", &content_fmt, err);
            if (!c)
                rc = err->status ? GW_EINVAL : GW_ENOMEM;
            else
                json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", c));
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
            json_t *fn = drv_tool_decl(json_pack("{s:s}", "name", tl->name), tl, "parameters",
                                       DRV_SCHEMA_OMIT);
            if (!fn)
                break;
            if (tl->strict >= 0)
                json_object_set_new(fn, "strict", json_boolean(tl->strict));
            json_array_append_new(tools,
                                  json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(doc, "tools", tools);
    }
    if (drv_tool_choice_word(r->tool_choice))
        json_object_set_new(doc, "tool_choice", json_string(drv_tool_choice_word(r->tool_choice)));
    else if (r->tool_choice == CANON_TC_NAMED)
        json_object_set_new(doc, "tool_choice",
                            json_pack("{s:s,s:{s:s}}", "type", "function", "function", "name",
                                      r->tool_choice_name));
    if (r->parallel_tool_calls >= 0)
        json_object_set_new(doc, "parallel_tool_calls", json_boolean(r->parallel_tool_calls));
    const struct drv_param params[] = {
        {CANON_F_TEMPERATURE, "temperature"},
        {CANON_F_TOP_P, "top_p"},
        {CANON_F_MAX_TOKENS, drv_opt_str(t, "max_tokens_field", "max_tokens")},
        {CANON_F_SEED, "seed"},
        {CANON_F_PRESENCE_PENALTY, "presence_penalty"},
        {CANON_F_FREQUENCY_PENALTY, "frequency_penalty"},
        {CANON_F_STOP, "stop"},
    };
    drv_params(doc, r, params, DRV_NPARAMS(params));
    if (r->format == CANON_FMT_TEXT)
        json_object_set_new(doc, "response_format", json_pack("{s:s}", "type", "text"));
    else if (r->format == CANON_FMT_JSON_OBJECT)
        json_object_set_new(doc, "response_format", json_pack("{s:s}", "type", "json_object"));
    else if (r->format == CANON_FMT_JSON_SCHEMA) {
        json_t *js = json_pack("{s:s,s:O}", "name", r->format_name ? r->format_name : "response",
                               "schema", r->format_schema);
        if (js && r->format_strict >= 0)
            json_object_set_new(js, "strict", json_boolean(r->format_strict));
        json_object_set_new(doc, "response_format",
                            json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    }
    const char *effort = r->reasoning_off ? NULL : drv_effort_of(r);
    if (effort)
        json_object_set_new(doc, "reasoning_effort", json_string(effort));
    if (r->user)
        json_object_set_new(doc, "user", json_string(r->user));
    if (r->stream)
        json_object_set_new(doc, "stream_options", json_pack("{s:b}", "include_usage", 1));

    out->stream = r->stream;
    return drv_json_request(out, t, drv_url(t, "/chat/completions"), doc, "Authorization: Bearer ");
}

/* ------------------------------------------------------------------ parse */

struct oa_parser {
    struct drv_parser base;
    struct gw_buf tmp, tmp2, tmp3, tmp4, tmp5, tmp6; /* decoded strings of the fast paths */
    struct drv_tools tools;
    struct canon_usage pending_usage; /* arrived while a tool call was open */
    int have_finish;
    enum canon_stop stop;
};

static struct drv_parser *parser_new(int stream)
{
    struct oa_parser *p = drv_parser_new(sizeof(*p), &drv_openai, stream);
    if (!p)
        return NULL;
    gw_buf_init(&p->tmp, DRV_MAX_EVENT);
    gw_buf_init(&p->tmp2, DRV_MAX_EVENT);
    gw_buf_init(&p->tmp3, 256);
    gw_buf_init(&p->tmp4, 1024);
    gw_buf_init(&p->tmp5, 1024);
    gw_buf_init(&p->tmp6, DRV_MAX_BODY);
    return &p->base;
}

static void parser_free(struct drv_parser *bp)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    gw_buf_free(&p->tmp);
    gw_buf_free(&p->tmp2);
    gw_buf_free(&p->tmp3);
    gw_buf_free(&p->tmp4);
    gw_buf_free(&p->tmp5);
    gw_buf_free(&p->tmp6);
    drv_parser_free(bp);
}

/* A provider's token count, kept within [0, 2^53]: a negative or absurd
 * number must not overflow the sums done on it (nor reach the ledger). */
static long long tokens(const json_t *o, const char *key)
{
    long long v = 0;
    if (gw_json_int(o, key, &v) != GW_OK || v < 0)
        return 0;
    return v > (1LL << 53) ? (1LL << 53) : v;
}

/* OpenAI usage → canonical. Usage may not arrive inside an open tool call
 * (canon.h): then it waits for the call to close (done()); a later usage
 * replaces a waiting one. */
/* OpenAI's counts → canonical: the prompt includes its cached part, the
 * completion its reasoning. */
static struct canon_usage usage_of(long long prompt, long long completion, long long cached,
                                   long long reasoning)
{
    struct canon_usage cu = {.have = 1};
    if (cached > prompt)
        cached = prompt;
    cu.input = prompt - cached;
    cu.cache_read = cached;
    cu.output = completion;
    cu.reasoning = reasoning > completion ? completion : reasoning;
    return cu;
}

/* Usage waits while a tool call is open (canon.h): done() emits it then. */
static int put_usage(struct oa_parser *p, struct canon_usage cu, const struct canon_sink *s)
{
    p->pending_usage = cu;
    if (p->tools.open)
        return 0;
    p->pending_usage.have = 0;
    struct canon_event ev = {.type = CANON_EV_USAGE, .usage = &cu};
    return canon_emit(s, &ev);
}

static int emit_usage(struct oa_parser *p, const json_t *u, const struct canon_sink *s)
{
    if (!json_is_object(u))
        return 0;
    long long prompt = tokens(u, "prompt_tokens"), completion = tokens(u, "completion_tokens");
    const json_t *pd = json_object_get(u, "prompt_tokens_details");
    long long cached = json_object_get(pd, "cached_tokens") ? tokens(pd, "cached_tokens")
                                                            : tokens(u, "prompt_cache_hit_tokens");
    long long reasoning =
        tokens(json_object_get(u, "completion_tokens_details"), "reasoning_tokens");
    return put_usage(p, usage_of(prompt, completion, cached, reasoning), s);
}

static int emit_start(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    return drv_start(&p->base, gw_json_str(doc, "id"), gw_json_str(doc, "model"), s);
}

/* An "error" member (an object with a message, or a string) fails the
 * answer; 0 when there is none. */
static int fail_on_error(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    json_t *e = json_object_get(doc, "error");
    if (!e || json_is_null(e))
        return 0;
    const char *m = json_is_object(e) ? gw_json_str(e, "message") : json_string_value(e);
    return drv_fail(&p->base, s, CANON_FAIL_PROVIDER_5XX, m ? m : "the provider reported an error");
}

/* One streamed chunk. */
static int on_chunk(struct oa_parser *p, const json_t *doc, const struct canon_sink *s)
{
    if (fail_on_error(p, doc, s) || emit_start(p, doc, s))
        return 1;
    json_t *ch = json_array_get(json_object_get(doc, "choices"), 0);
    json_t *delta = json_object_get(ch, "delta");
    if (json_is_object(delta)) {
        const char *rs = gw_json_str(delta, "reasoning_content");
        if (!rs)
            rs = gw_json_str(delta, "reasoning");
        if (rs && *rs &&
            (drv_tools_close(&p->tools, s) || drv_emit_text(s, CANON_EV_REASONING, rs)))
            return 1;
        const char *c = gw_json_str(delta, "content");
        if (!c)
            c = gw_json_str(delta, "refusal");
        if (c && *c && (drv_tools_close(&p->tools, s) || drv_emit_text(s, CANON_EV_CHUNK, c)))
            return 1;
        if (gw_json_str(delta, "refusal"))
            p->stop = CANON_STOP_REFUSAL;
        json_t *tcs = json_object_get(delta, "tool_calls");
        size_t i;
        json_t *tc;
        json_array_foreach(tcs, i, tc)
        {
            long long idx = 0;
            if (gw_json_int(tc, "index", &idx) != GW_OK)
                idx = (long long)i;
            json_t *fn = json_object_get(tc, "function");
            int rc = drv_tools_delta(&p->tools, idx, gw_json_str(tc, "id"), gw_json_str(fn, "name"),
                                     gw_json_str(fn, "arguments"), s);
            if (rc)
                return drv_tools_check(&p->base, s, rc, "the provider interleaved tool calls");
        }
    }
    const char *fr = gw_json_str(ch, "finish_reason");
    if (fr) {
        if (drv_tools_close(&p->tools, s))
            return 1;
        p->have_finish = 1;
        if (p->stop != CANON_STOP_REFUSAL)
            p->stop = canon_stop_from_openai(fr);
    }
    json_t *u = json_object_get(doc, "usage");
    if (u && !json_is_null(u) && emit_usage(p, u, s))
        return 1;
    return 0;
}

static int done(struct oa_parser *p, const struct canon_sink *s)
{
    if (drv_tools_close(&p->tools, s))
        return 1;
    if (p->pending_usage.have) {
        struct canon_usage cu = p->pending_usage;
        struct canon_event u = {.type = CANON_EV_USAGE, .usage = &cu};
        p->pending_usage.have = 0;
        if (canon_emit(s, &u))
            return 1;
    }
    p->base.terminal = 1;
    struct canon_event ev = {.type = CANON_EV_DONE, .stop = p->stop};
    canon_emit(s, &ev);
    return 1;
}

static int present(const struct gw_json_span *v)
{
    return v->p && !gw_json_span_is_null(v->p, v->n);
}

/* A string member's value decoded into buf; NULL when absent, null or not
 * a string (what jansson would refuse sets *unsure). */
static const char *span_text(struct gw_buf *buf, const struct gw_json_span *v, size_t *len,
                             int *unsure)
{
    if (!v->p || v->n < 2 || v->p[0] != '"')
        return NULL;
    gw_buf_reset(buf);
    if (gw_json_span_string(v->p, v->n, buf) != GW_OK) {
        *unsure = 1;
        return NULL;
    }
    *len = buf->len;
    return buf->data ? buf->data : "";
}

/* A token count as tokens() reads it from jansson: a plain integer (a
 * real, or anything else, is 0); *unsure past 18 digits, where jansson may
 * refuse the whole document. */
static long long span_tokens(const struct gw_json_span *v, int *unsure)
{
    if (!v->p)
        return 0;
    size_t i = v->p[0] == '-';
    if (i >= v->n || v->p[i] < '0' || v->p[i] > '9')
        return 0;
    long long n = 0;
    for (size_t k = i; k < v->n; k++) {
        char c = v->p[k];
        if (c == '.' || c == 'e' || c == 'E')
            return 0;
        if (k - i >= 18) {
            *unsure = 1;
            return 0;
        }
        n = n * 10 + (c - '0');
    }
    return i ? 0 : n > (1LL << 53) ? (1LL << 53) : n;
}

/* A usage object read by spans as emit_usage reads it from jansson.
 * 1: cu filled; 0: not an object, or in doubt (the full parser's). */
static int span_usage(const struct gw_json_span *u, struct canon_usage *cu)
{
    static const char *const u_keys[] = {"prompt_tokens", "completion_tokens",
                                         "prompt_tokens_details", "completion_tokens_details",
                                         "prompt_cache_hit_tokens"};
    static const char *const cached_key[] = {"cached_tokens"};
    static const char *const reasoning_key[] = {"reasoning_tokens"};
    enum { U_PROMPT, U_COMPLETION, U_PD, U_CD, U_HIT };
    struct gw_json_span m[5], cached = {0}, rt = {0};
    if (!u->p || u->p[0] != '{' || gw_json_span_members(u->p, u->n, u_keys, 5, m) != 1)
        return 0;
    if (m[U_PD].p && m[U_PD].p[0] == '{' &&
        gw_json_span_members(m[U_PD].p, m[U_PD].n, cached_key, 1, &cached) != 1)
        return 0;
    if (m[U_CD].p && m[U_CD].p[0] == '{' &&
        gw_json_span_members(m[U_CD].p, m[U_CD].n, reasoning_key, 1, &rt) != 1)
        return 0;
    int unsure = 0;
    long long prompt = span_tokens(&m[U_PROMPT], &unsure);
    long long completion = span_tokens(&m[U_COMPLETION], &unsure);
    long long cache = cached.p ? span_tokens(&cached, &unsure) : span_tokens(&m[U_HIT], &unsure);
    long long reasoning = span_tokens(&rt, &unsure);
    if (unsure)
        return 0;
    *cu = usage_of(prompt, completion, cache, reasoning);
    return 1;
}

/*
 * The common streamed chunk (the first one with its id and model, a text
 * or reasoning delta, a finish reason) read without building a document:
 * most of a stream is such chunks. Each object is read once (its members
 * in one pass). Returns 0 when the chunk needs the full path (usage,
 * errors, tool calls, refusals, escaped keys, anything unusual), else 1
 * with *stop set when the sink stopped. Nothing is emitted before the
 * chunk is known to be a simple one.
 */
static int fast_chunk(struct oa_parser *p, const char *d, size_t n, const struct canon_sink *s,
                      int *stop)
{
    static const char *const top_keys[] = {"usage", "error", "choices", "id", "model"};
    static const char *const ch_keys[] = {"delta", "finish_reason"};
    static const char *const d_keys[] = {"tool_calls", "refusal",   "function_call",
                                         "content",    "reasoning", "reasoning_content"};
    enum { T_USAGE, T_ERROR, T_CHOICES, T_ID, T_MODEL };
    enum { C_DELTA, C_FINISH };
    enum { D_TOOLS, D_REFUSAL, D_FUNCTION, D_CONTENT, D_REASONING, D_REASONING_CONTENT };
    struct gw_json_span t[5], c[2], dl[6];
    const char *ch, *x;
    size_t chn, xn;
    *stop = 0;
    if (!gw_json_valid(d, n, 64) || gw_json_span_members(d, n, top_keys, 5, t) != 1 ||
        present(&t[T_ERROR]) || !t[T_CHOICES].p)
        return 0;
    if (present(&t[T_USAGE])) {
        /* The usage chunk, with no choice beside it (the stream's last). */
        struct canon_usage cu;
        if (!p->base.started || t[T_CHOICES].p[0] != '[' ||
            gw_json_span_index(t[T_CHOICES].p, t[T_CHOICES].n, 0, &x, &xn) ||
            !span_usage(&t[T_USAGE], &cu))
            return 0;
        *stop = put_usage(p, cu, s);
        return 1;
    }
    if (!gw_json_span_index(t[T_CHOICES].p, t[T_CHOICES].n, 0, &ch, &chn) ||
        gw_json_span_index(t[T_CHOICES].p, t[T_CHOICES].n, 1, &x, &xn) ||
        gw_json_span_members(ch, chn, ch_keys, 2, c) != 1 || !c[C_DELTA].p ||
        c[C_DELTA].p[0] != '{' ||
        gw_json_span_members(c[C_DELTA].p, c[C_DELTA].n, d_keys, 6, dl) != 1 ||
        present(&dl[D_TOOLS]) || present(&dl[D_REFUSAL]) || present(&dl[D_FUNCTION]))
        return 0;
    /* Decode everything before emitting anything: any doubt on the way
     * sends the whole chunk to the full parser. */
    int unsure = 0;
    size_t rlen = 0, clen = 0, len = 0, idn = 0, mn = 0;
    const char *rs = span_text(
        &p->tmp, present(&dl[D_REASONING_CONTENT]) ? &dl[D_REASONING_CONTENT] : &dl[D_REASONING],
        &rlen, &unsure);
    const char *ct = span_text(&p->tmp2, &dl[D_CONTENT], &clen, &unsure);
    const char *fr = span_text(&p->tmp3, &c[C_FINISH], &len, &unsure);
    const char *id = NULL, *model = NULL;
    if (!p->base.started) {
        id = span_text(&p->tmp4, &t[T_ID], &idn, &unsure);
        model = span_text(&p->tmp5, &t[T_MODEL], &mn, &unsure);
    }
    if (unsure)
        return 0;
    if (!p->base.started && (*stop = drv_start(&p->base, id, model, s)))
        return 1;
    if (rs && rlen) {
        struct canon_event ev = {.type = CANON_EV_REASONING, .text = rs, .len = rlen};
        if ((*stop = drv_tools_close(&p->tools, s) || canon_emit(s, &ev)))
            return 1;
    }
    if (ct && clen) {
        struct canon_event ev = {.type = CANON_EV_CHUNK, .text = ct, .len = clen};
        if ((*stop = drv_tools_close(&p->tools, s) || canon_emit(s, &ev)))
            return 1;
    }
    if (fr) {
        if ((*stop = drv_tools_close(&p->tools, s)))
            return 1;
        p->have_finish = 1;
        if (p->stop != CANON_STOP_REFUSAL)
            p->stop = canon_stop_from_openai(fr);
    }
    return 1;
}

/* [DONE] ends the stream; the common chunk takes the fast path. */
static enum drv_sse_step raw_event(struct drv_parser *bp, const struct gw_sse_event *ev,
                                   const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0)
        return done(p, s) ? DRV_SSE_STOP : DRV_SSE_SKIP;
    int stop;
    if (fast_chunk(p, ev->data, ev->data_len, s, &stop))
        return stop ? DRV_SSE_STOP : DRV_SSE_SKIP;
    return DRV_SSE_JSON;
}

static int on_event(struct drv_parser *bp, const struct gw_sse_event *ev, const json_t *doc,
                    const struct canon_sink *s)
{
    (void)ev;
    return on_chunk((struct oa_parser *)bp, doc, s);
}

static int parse(struct drv_parser *bp, const char *buf, size_t len, const struct canon_sink *s)
{
    return drv_parse_sse(bp, buf, len, s, raw_event, on_event);
}

/* A whole chat.completion body → the same events a stream would give. */
static void parse_whole(struct drv_parser *bp, const json_t *doc, const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (fail_on_error(p, doc, s) || emit_start(p, doc, s))
        return;
    json_t *ch = json_array_get(json_object_get(doc, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    const char *rs = gw_json_str(msg, "reasoning_content");
    if (!rs)
        rs = gw_json_str(msg, "reasoning");
    const char *c = gw_json_str(msg, "content");
    const char *refusal = gw_json_str(msg, "refusal");
    if (!c || !*c)
        c = refusal;
    if (drv_emit_text(s, CANON_EV_REASONING, rs) || drv_emit_text(s, CANON_EV_CHUNK, c))
        return;
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, tc)
    {
        json_t *fn = json_object_get(tc, "function");
        const char *args = gw_json_str(fn, "arguments");
        if (drv_tools_delta(&p->tools, (long long)i, gw_json_str(tc, "id"), gw_json_str(fn, "name"),
                            args && *args ? args : "{}", s))
            return;
    }
    p->stop =
        refusal ? CANON_STOP_REFUSAL : canon_stop_from_openai(gw_json_str(ch, "finish_reason"));
    if (emit_usage(p, json_object_get(doc, "usage"), s))
        return;
    done(p, s);
}

/*
 * The common whole chat.completion (text, reasoning or a refusal; a finish
 * reason; usage) read without building a document, as parse_whole would
 * read it: the events, the stop and the usage are the same. Anything else
 * (an error member, tool calls, a string jansson would refuse, a shape in
 * doubt) returns 0 for the full parser. As for streamed chunks, a key
 * repeated in a member it does not read is not its concern (jansson, which
 * refuses duplicates anywhere, would call the answer malformed).
 */
static int fast_whole(struct oa_parser *p, const char *d, size_t n, const struct canon_sink *s)
{
    static const char *const top_keys[] = {"usage", "error", "choices", "id", "model"};
    static const char *const ch_keys[] = {"message", "finish_reason"};
    static const char *const m_keys[] = {"tool_calls", "refusal", "content", "reasoning",
                                         "reasoning_content"};
    enum { T_USAGE, T_ERROR, T_CHOICES, T_ID, T_MODEL };
    enum { C_MESSAGE, C_FINISH };
    enum { M_TOOLS, M_REFUSAL, M_CONTENT, M_REASONING, M_REASONING_CONTENT };
    struct gw_json_span t[5], c[2] = {{0}}, m[5] = {{0}};
    struct canon_usage cu;
    const char *ch = NULL;
    size_t chn = 0;
    if (!gw_json_valid(d, n, 64) || gw_json_span_members(d, n, top_keys, 5, t) != 1 ||
        present(&t[T_ERROR]))
        return 0;
    int has_ch = t[T_CHOICES].p && t[T_CHOICES].p[0] == '[' &&
                 gw_json_span_index(t[T_CHOICES].p, t[T_CHOICES].n, 0, &ch, &chn);
    if (has_ch && ch[0] == '{' && gw_json_span_members(ch, chn, ch_keys, 2, c) != 1)
        return 0;
    if (c[C_MESSAGE].p && c[C_MESSAGE].p[0] == '{' &&
        gw_json_span_members(c[C_MESSAGE].p, c[C_MESSAGE].n, m_keys, 5, m) != 1)
        return 0;
    int has_u = t[T_USAGE].p && t[T_USAGE].p[0] == '{';
    if (has_u && !span_usage(&t[T_USAGE], &cu))
        return 0;
    if (m[M_TOOLS].p && m[M_TOOLS].p[0] == '[' && m[M_TOOLS].n > 2)
        return 0; /* tool calls: the full parser's (a [] has none) */
    /* Decode everything before emitting anything. */
    int unsure = 0;
    size_t l = 0;
    const char *rs = span_text(&p->tmp, &m[M_REASONING_CONTENT], &l, &unsure);
    struct gw_buf *rb = &p->tmp;
    if (!rs) {
        rs = span_text(&p->tmp2, &m[M_REASONING], &l, &unsure);
        rb = &p->tmp2;
    }
    const char *ct = span_text(&p->tmp6, &m[M_CONTENT], &l, &unsure);
    const char *refusal = span_text(&p->tmp3, &m[M_REFUSAL], &l, &unsure);
    const char *fr = span_text(&p->tmp4, &c[C_FINISH], &l, &unsure);
    enum canon_stop st = refusal ? CANON_STOP_REFUSAL : canon_stop_from_openai(fr);
    const char *id = span_text(&p->tmp5, &t[T_ID], &l, &unsure);
    const char *mo = span_text(&p->tmp4, &t[T_MODEL], &l, &unsure); /* fr is read */
    if (unsure)
        return 0;
    /* Decoded strings are C strings, as jansson's are (gw_buf keeps a NUL
     * after its bytes, and gw_json_span_string refuses \u0000, as jansson
     * does). */
    if (drv_start(&p->base, id, mo, s))
        return 1;
    const char *text = ct && p->tmp6.len ? ct : refusal;
    size_t tlen = ct && p->tmp6.len ? p->tmp6.len : refusal ? p->tmp3.len : 0;
    if (rs && rb->len) {
        struct canon_event ev = {.type = CANON_EV_REASONING, .text = rs, .len = rb->len};
        if (canon_emit(s, &ev))
            return 1;
    }
    if (text && tlen) {
        struct canon_event ev = {.type = CANON_EV_CHUNK, .text = text, .len = tlen};
        if (canon_emit(s, &ev))
            return 1;
    }
    p->stop = st;
    if (has_u && put_usage(p, cu, s))
        return 1;
    done(p, s);
    return 1;
}

static void finish(struct drv_parser *bp, const struct canon_sink *s)
{
    struct oa_parser *p = (struct oa_parser *)bp;
    if (!bp->stream && !bp->terminal && bp->body.len &&
        fast_whole(p, bp->body.data, bp->body.len, s))
        return;
    if (drv_finish(bp, s, parse_whole))
        return;
    /* No [DONE]: complete only if the provider had said why it stopped. */
    if (p->have_finish)
        done(p, s);
    else
        drv_fail(bp, s, CANON_FAIL_NETWORK, "the provider's stream ended before it finished");
}

/* --------------------------------------------------------- the pass-through */

/*
 * The client's own chat request, forwarded: every member as the client
 * wrote it (fields and content types the gateway has never heard of
 * included: the provider is the judge of its own API), but for what the
 * gateway owns: the model (the route's target), stream_options.include_usage
 * when streaming (the ledger needs the usage; a client that did not ask
 * for it does not get the usage chunk), and the output cap of a worst-case
 * reservation.
 */
static int relay_build(const struct drv_target *t, const char *body, size_t len,
                       const struct drv_relay_edits *ed, struct drv_request *out,
                       struct canon_err *err)
{
    enum { B_MODEL, B_SO, B_MAX, B_MAX2, NB };
    struct gw_buf b[NB];
    for (int i = 0; i < NB; i++)
        gw_buf_init(&b[i], 0);
    struct drv_edit e[NB];
    size_t ne = 0;
    int rc = gw_json_escape(&b[B_MODEL], t->model, strlen(t->model));
    if (rc == GW_OK)
        rc = drv_edit_member(body, len, "model", &b[B_MODEL], e, &ne, err);
    const char *so = NULL;
    size_t son = 0;
    int has_so = ed->stream ? gw_json_span_member(body, len, "stream_options", &so, &son) : 0;
    const char *iu = NULL;
    size_t iun = 0;
    int usage_on = has_so == 1 && so[0] == '{' &&
                   gw_json_span_member(so, son, "include_usage", &iu, &iun) == 1 && iun == 4 &&
                   memcmp(iu, "true", 4) == 0;
    if (rc == GW_OK && ed->stream && !usage_on) {
        /* Its other members (options newer than the gateway) stay. */
        json_t *o = has_so == 1 && so[0] == '{' ? json_loadb(so, son, 0, NULL) : json_object();
        char *s = o && json_object_set_new(o, "include_usage", json_true()) == 0
                      ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER)
                      : NULL;
        json_decref(o);
        rc = s ? gw_buf_appends(&b[B_SO], s) : GW_ENOMEM;
        free(s);
        if (rc == GW_OK)
            rc = drv_edit_member(body, len, "stream_options", &b[B_SO], e, &ne, err);
    }
    if (rc == GW_OK && ed->max_tokens > 0) {
        /* The client's own field(s) get the cap; else the provider's. */
        const char *v;
        size_t vn;
        int a = gw_json_span_member(body, len, "max_tokens", &v, &vn) == 1;
        int c = gw_json_span_member(body, len, "max_completion_tokens", &v, &vn) == 1;
        rc = gw_buf_printf(&b[B_MAX], "%lld", ed->max_tokens);
        if (rc == GW_OK)
            rc = gw_buf_printf(&b[B_MAX2], "%lld", ed->max_tokens);
        if (rc == GW_OK && (a || !c))
            rc = drv_edit_member(
                body, len, a ? "max_tokens" : drv_opt_str(t, "max_tokens_field", "max_tokens"),
                &b[B_MAX], e, &ne, err);
        if (rc == GW_OK && c)
            rc = drv_edit_member(body, len, "max_completion_tokens", &b[B_MAX2], e, &ne, err);
    }
    if (rc == GW_OK)
        rc = drv_edit_body(out, body, len, e, ne);
    for (int i = 0; i < NB; i++)
        gw_buf_free(&b[i]);
    if (rc != GW_OK)
        return rc == GW_EINVAL ? GW_EINVAL : GW_ENOMEM;
    out->stream = ed->stream;
    out->url = drv_url(t, "/chat/completions");
    if (!out->url)
        return GW_ENOMEM;
    return drv_auth_headers(out, t, "Authorization: Bearer ");
}

/* A chunk that carries usage and no choice: the stream's usage chunk. */
static int usage_only(const char *d, size_t n)
{
    const char *v, *x;
    size_t vn, xn;
    /* Most chunks say "usage":null (or nothing): told apart without a scan. */
    const char *u = memmem(d, n, "\"usage\"", 7);
    if (!u)
        return 0;
    const char *e = d + n;
    for (u += 7; u < e && (*u == ' ' || *u == ':' || *u == '\t' || *u == '\n' || *u == '\r'); u++)
        ;
    if (u < e && *u == 'n')
        return 0;
    if (!gw_json_valid(d, n, 64) || gw_json_span_member(d, n, "usage", &v, &vn) != 1 ||
        gw_json_span_is_null(v, vn))
        return 0;
    int c = gw_json_span_member(d, n, "choices", &v, &vn);
    return c == 0 || (c == 1 && !gw_json_span_index(v, vn, 0, &x, &xn));
}

static int relay_event(const struct gw_sse_event *ev, struct gw_buf *out, struct gw_buf *held)
{
    if (ev->data_len == 0 || (ev->data_len == 6 && memcmp(ev->data, "[DONE]", 6) == 0))
        return GW_OK; /* the end writes the terminator */
    if (usage_only(ev->data, ev->data_len)) {
        gw_buf_reset(held);
        return gw_buf_append(held, ev->data, ev->data_len);
    }
    return drv_relay_frame(out, ev);
}

static int relay_end(const struct gw_buf *held, const char *bill_json, int with_usage,
                     struct gw_buf *out)
{
    int rc = with_usage && held->len ? drv_relay_billed(out, NULL, held, bill_json) : GW_OK;
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "data: [DONE]\n\n");
    return rc;
}

/* -------------------------------------------------------------- embeddings */

int drv_openai_build_embed(const struct drv_target *t, const struct canon_embed_req *r,
                           struct drv_request *out, struct canon_err *err)
{
    json_t *in = json_array();
    for (size_t i = 0; in && i < r->ninputs; i++)
        json_array_append_new(in, json_string(r->inputs[i]));
    json_t *doc =
        json_pack("{s:s,s:o,s:s}", "model", t->model, "input", in, "encoding_format", "float");
    if (doc && r->dimensions)
        json_object_set_new(doc, "dimensions", json_integer(r->dimensions));
    if (doc && r->user)
        json_object_set_new(doc, "user", json_string(r->user));
    return drv_json_request(out, t, drv_url(t, "/embeddings"), doc, "Authorization: Bearer ");
}

int drv_openai_parse_embed(const char *body, size_t len, struct canon_embed_resp *out, char *msg,
                           size_t msglen)
{
    json_t *doc = json_loadb(body, len, 0, NULL);
    json_t *data = json_object_get(doc, "data");
    int rc = drv_embed_vectors(data, "embedding", out, msg, msglen);
    if (rc == GW_OK) {
        long long pt = 0;
        gw_json_int(json_object_get(doc, "usage"), "prompt_tokens", &pt);
        out->usage.input = pt;
        out->usage.have = 1;
        snprintf(out->model, sizeof(out->model), "%s",
                 gw_json_str(doc, "model") ? gw_json_str(doc, "model") : "");
    }
    json_decref(doc);
    return rc;
}

const struct dp_driver drv_openai = {
    .name = "openai",
    .caps = DRV_CAP_CHAT | DRV_CAP_EMBEDDINGS | DRV_CAP_VISION | DRV_CAP_TOOLS | DRV_CAP_JSON_MODE |
            DRV_CAP_REASONING,
    .wire = "openai.chat",
    .relay_build = relay_build,
    .relay_event = relay_event,
    .relay_end = relay_end,
    .build_chat = build_chat,
    .parser_new = parser_new,
    .parse = parse,
    .finish = finish,
    .parser_free = parser_free,
    .build_embed = drv_openai_build_embed,
    .parse_embed = drv_openai_parse_embed,
};
