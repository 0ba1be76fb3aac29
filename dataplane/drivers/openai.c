/*
 * The "openai" driver: any OpenAI-compatible chat completions endpoint
 * (OpenAI, xAI, Z.AI, OpenRouter, DeepSeek, Mistral, vLLM, LM Studio).
 *
 * Upstream request: POST {base_url}/chat/completions, Bearer auth, usage
 * requested with stream_options.include_usage when streaming. Options:
 *   max_tokens_field  "max_tokens" (default) or "max_completion_tokens"
 *                     (OpenAI's reasoning models accept only the latter)
 *
 * Upstream request also carries service_tier (standard as "default"),
 * safety_identifier, user, logprobs and top_logprobs as asked.
 *
 * Documents go as file parts ({file_data: a data: URL, filename}: the
 * filename, else the title with its extension, else "document.<ext>");
 * audio as input_audio (wav, mp3). Refused: documents by URL or as text
 * (file parts take bytes), a document's context and citations flag, other
 * audio formats.
 *
 * Upstream answer: SSE chunks (delta.content with choices[0].logprobs,
 * delta.reasoning_content or delta.reasoning, delta.tool_calls[] by index,
 * finish_reason, a usage chunk, service_tier, "data: [DONE]"), or one
 * chat.completion JSON.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_driver.h"
#include "dp_snapshot.h"
#include "drv_docs.h"
#include "drv_openai_int.h"
#include "drv_tier.h"
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

/* A document as a file part (bytes only: chat completions file parts take
 * file_data or an OpenAI file id), audio as input_audio (wav or mp3). */
static json_t *media_part(const struct canon_req *r, const char *where, const struct canon_part *p,
                          struct canon_err *err)
{
    if (p->type == CANON_PART_AUDIO) {
        const char *f = drv_audio_format(p->media_type);
        if (!f) {
            drv_refuse_doc(r, where, p, "openai", "its input_audio parts take wav or mp3", err);
            return NULL;
        }
        return json_pack("{s:s,s:{s:s,s:s}}", "type", "input_audio", "input_audio", "data", p->data,
                         "format", f);
    }
    if (!p->data) {
        drv_refuse_doc(r, where, p, "openai",
                       "its file parts take the file's bytes (file_data), not a URL or text", err);
        return NULL;
    }
    /* A title becomes the file name when there is none (see drv_doc_filename). */
    if (drv_doc_members(r, where, p, DRV_DOC_TITLE, "openai", err))
        return NULL;
    json_t *url = drv_image_url(p);
    char *name = drv_doc_filename(p);
    json_t *f = url && name ? json_pack("{s:o,s:s}", "file_data", url, "filename", name) : NULL;
    if (!f)
        json_decref(url);
    free(name);
    return f ? json_pack("{s:s,s:o}", "type", "file", "file", f) : NULL;
}

/* Message content: a string when it is one text part, else an array. */
static const struct drv_content_fmt content_fmt = {
    .text_type = "text", .image = image_part, .media = media_part, .refuse = refuse_content};

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

/* service_tier, safety_identifier, logprobs and top_logprobs: OpenAI has
 * each as the canonical model does (standard is "default"). */
static int drv_openai_tier_ids(const struct canon_req *r, json_t *doc, struct canon_err *err)
{
    const char *tier;
    if (drv_tier_word(r, "openai", &drv_tier_openai, &tier, err) != GW_OK)
        return GW_EINVAL;
    if (tier)
        json_object_set_new(doc, "service_tier", json_string(tier));
    if (r->safety_identifier)
        json_object_set_new(doc, "safety_identifier", json_string(r->safety_identifier));
    if (r->logprobs)
        json_object_set_new(doc, "logprobs", json_true());
    if (r->logprobs && r->top_logprobs >= 0)
        json_object_set_new(doc, "top_logprobs", json_integer(r->top_logprobs));
    return GW_OK;
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
    if ((rc = drv_openai_tier_ids(r, doc, err)) != GW_OK) {
        json_decref(doc);
        return rc;
    }

    out->stream = r->stream;
    return drv_json_request(out, t, drv_url(t, "/chat/completions"), doc, "Authorization: Bearer ");
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
    const char *x;
    size_t xn;
    /* Most chunks say "usage":null (or nothing): told apart without a scan. */
    const char *u = memmem(d, n, "\"usage\"", 7);
    if (!u)
        return 0;
    const char *e = d + n;
    for (u += 7; u < e && (*u == ' ' || *u == ':' || *u == '\t' || *u == '\n' || *u == '\r'); u++)
        ;
    if (u < e && *u == 'n')
        return 0;
    static const char *const keys[] = {"usage", "choices"};
    struct gw_json_span m[2];
    if (gw_json_span_doc(d, n, keys, 2, m) != 1 || !m[0].p || gw_json_span_is_null(m[0].p, m[0].n))
        return 0;
    return !m[1].p || gw_json_span_first(m[1].p, m[1].n, &x, &xn) == 0;
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
    .info = &dp_driver_catalog[DRV_ID_OPENAI],
    .relay_build = relay_build,
    .relay_event = relay_event,
    .relay_end = relay_end,
    .build_chat = build_chat,
    .parser_new = drv_openai_parser_new,
    .parse = drv_openai_parse,
    .finish = drv_openai_finish,
    .parser_free = drv_openai_parser_free,
    .build_embed = drv_openai_build_embed,
    .parse_embed = drv_openai_parse_embed,
    .build_media = drv_openai_build_media,
    .media_usage = drv_openai_media_usage,
};
