/*
 * The Anthropic Messages facade: POST /v1/messages (and, through
 * dp_exchange_count_tokens, POST /v1/messages/count_tokens).
 *
 * Accepted: model, max_tokens (required, >= 1), messages (user and
 * assistant; content a string or blocks: text, image with a base64 or url
 * source, tool_use, tool_result with string or block content and is_error,
 * thinking with its signature, redacted_thinking; cache_control on text,
 * image, tool_use and tool_result blocks), system (a string or text blocks
 * with cache_control), tools (custom tools: name, description, input_schema,
 * strict, cache_control), tool_choice (auto, any, tool, none;
 * disable_parallel_tool_use), temperature (0..1), top_p, top_k,
 * stop_sequences, stream, metadata.user_id, thinking ({type: enabled,
 * budget_tokens >= 1024} or {type: disabled}). Anything else is refused
 * with a 400 naming it: server tools (a tool "type" other than "custom"),
 * document and other block kinds, adaptive thinking, unknown members.
 *
 * Streams follow Anthropic's event sequence, each event with an "event:"
 * line and the same "type" in its data:
 *   message_start   (sent lazily, at the first event after START that is not
 *                    USAGE, so input usage reported right after START, as
 *                    Anthropic and Bedrock upstreams do, lands in it), ping,
 *   content_block_start / content_block_delta / content_block_stop per
 *                    block (text, thinking with thinking_delta and
 *                    signature_delta, tool_use with input_json_delta; index
 *                    0, 1, ...; a new block closes the open one),
 *   message_delta   (stop_reason, cumulative usage), message_stop.
 * An error after the stream started is an "event: error" with
 * {"type":"error","error":{"type","message"}} and the stream then ends, as
 * Anthropic's own streams do (no message_delta or message_stop follows).
 * Error types follow Anthropic's table by HTTP status (400
 * invalid_request_error, 401 authentication_error, 402 billing_error, 403
 * permission_error, 404 not_found_error, 413 request_too_large, 429
 * rate_limit_error, 503/529 overloaded_error, 504 timeout_error, other 4xx
 * invalid_request_error, else api_error); Anthropic's error body has no
 * "param", so the field leads the message ("max_tokens: ...").
 * Tool arguments stream as the provider sent them; a non-streamed answer
 * renders each tool_use input as the parsed arguments object, and when the
 * provider's arguments are not a JSON object the answer fails (the exchange
 * turns a render failure into a 500) rather than invent an input the model
 * did not produce.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

static const char *const top_keys[] = {
    "model", "max_tokens", "messages", "system",         "tools",    "tool_choice", "temperature",
    "top_p", "top_k",      "stream",   "stop_sequences", "metadata", "thinking",    NULL};

/* Refusals by drivers name the client's own fields. */
static const char *const field_names[CANON_F_COUNT] = {
    [CANON_F_MESSAGES] = "messages",
    [CANON_F_SYSTEM] = "system",
    [CANON_F_TOOLS] = "tools",
    [CANON_F_TOOL_CHOICE] = "tool_choice",
    [CANON_F_PARALLEL_TOOL_CALLS] = "tool_choice.disable_parallel_tool_use",
    [CANON_F_TEMPERATURE] = "temperature",
    [CANON_F_TOP_P] = "top_p",
    [CANON_F_TOP_K] = "top_k",
    [CANON_F_MAX_TOKENS] = "max_tokens",
    [CANON_F_SEED] = "seed",
    [CANON_F_PRESENCE_PENALTY] = "presence_penalty",
    [CANON_F_FREQUENCY_PENALTY] = "frequency_penalty",
    [CANON_F_STOP] = "stop_sequences",
    [CANON_F_RESPONSE_FORMAT] = "response_format",
    [CANON_F_REASONING] = "thinking",
    [CANON_F_USER] = "metadata.user_id",
};

/* snprintf for field paths and messages, cut to fit (a path only names a
 * field in an error message). */
static void pathf(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void pathf(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, n, fmt, ap);
    va_end(ap);
}

/* cache_control: {"type":"ephemeral"} with an optional ttl "5m" or "1h". */
static int parse_cache(const json_t *blk, const char *path, enum canon_cache *out,
                       struct canon_err *err)
{
    *out = CANON_CACHE_NONE;
    json_t *cc = fc_get(blk, "cache_control");
    if (!cc)
        return GW_OK;
    char p[200];
    pathf(p, sizeof(p), "%s.cache_control", path);
    static const char *const keys[] = {"type", "ttl", NULL};
    if (!json_is_object(cc))
        return fc_bad(err, p, "", "must be an object");
    if (fc_only(cc, keys, p, err))
        return GW_EINVAL;
    const char *type = gw_json_str(cc, "type");
    if (!type || strcmp(type, "ephemeral") != 0)
        return fc_bad(err, p, ".type", "must be \"ephemeral\"");
    json_t *ttl = fc_get(cc, "ttl");
    const char *t = json_string_value(ttl);
    if (!ttl || (t && strcmp(t, "5m") == 0))
        *out = CANON_CACHE_5M;
    else if (t && strcmp(t, "1h") == 0)
        *out = CANON_CACHE_1H;
    else
        return fc_bad(err, p, ".ttl", "must be \"5m\" or \"1h\"");
    return GW_OK;
}

static int parse_text(const json_t *b, const char *p, struct canon_part *pt, struct canon_err *err)
{
    static const char *const keys[] = {"type", "text", "cache_control", NULL};
    if (fc_text_part(b, p, keys, "text", pt, err))
        return GW_EINVAL;
    return parse_cache(b, p, &pt->cache, err);
}

static int parse_image(const json_t *b, const char *p, struct canon_part *pt, struct canon_err *err)
{
    static const char *const keys[] = {"type", "source", "cache_control", NULL};
    if (fc_only(b, keys, p, err))
        return GW_EINVAL;
    json_t *src = fc_get(b, "source");
    char sp[200];
    pathf(sp, sizeof(sp), "%s.source", p);
    if (!json_is_object(src))
        return fc_bad(err, sp, "", "must be an object");
    const char *type = gw_json_str(src, "type");
    pt->type = CANON_PART_IMAGE;
    if (type && strcmp(type, "base64") == 0) {
        static const char *const skeys[] = {"type", "media_type", "data", NULL};
        if (fc_only(src, skeys, sp, err))
            return GW_EINVAL;
        const char *mt = gw_json_str(src, "media_type");
        const char *data = gw_json_str(src, "data");
        if (!mt || (strcmp(mt, "image/jpeg") && strcmp(mt, "image/png") &&
                    strcmp(mt, "image/gif") && strcmp(mt, "image/webp")))
            return fc_bad(err, sp, ".media_type",
                          "must be image/jpeg, image/png, image/gif or image/webp");
        if (!data || !*data)
            return fc_bad(err, sp, ".data", "must be a non-empty base64 string");
        pt->media_type = mt;
        pt->data = data;
    } else if (type && strcmp(type, "url") == 0) {
        static const char *const ukeys[] = {"type", "url", NULL};
        if (fc_only(src, ukeys, sp, err))
            return GW_EINVAL;
        const char *url = gw_json_str(src, "url");
        if (!url || (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0))
            return fc_bad(err, sp, ".url", "must be an http(s) URL");
        pt->url = url;
    } else if (type && strcmp(type, "file") == 0) {
        return fc_unsupported(err, sp, "unsupported_content",
                              "file sources (the Files API) are not supported by this gateway");
    } else {
        return fc_bad(err, sp, ".type", "must be \"base64\" or \"url\"");
    }
    return parse_cache(b, p, &pt->cache, err);
}

static int parse_tool_result(struct canon_req *r, const json_t *b, const char *p,
                             struct canon_part *pt, struct canon_err *err)
{
    static const char *const keys[] = {"type",     "tool_use_id",   "content",
                                       "is_error", "cache_control", NULL};
    if (fc_only(b, keys, p, err))
        return GW_EINVAL;
    pt->type = CANON_PART_TOOL_RESULT;
    pt->id = gw_json_str(b, "tool_use_id");
    if (!pt->id || !*pt->id)
        return fc_bad(err, p, ".tool_use_id", "must be a non-empty string");
    if (fc_member_bool(b, "is_error", p, &pt->is_error, err))
        return GW_EINVAL;
    json_t *c = fc_get(b, "content");
    char cp[200];
    pathf(cp, sizeof(cp), "%s.content", p);
    size_t cap = 0;
    if (!c || (json_is_string(c) && json_string_length(c) == 0)) {
        /* no content */
    } else if (json_is_string(c)) {
        if (fc_text_add(r, &pt->content, &pt->ncontent, &cap, json_string_value(c)))
            return GW_ENOMEM;
    } else if (json_is_array(c)) {
        size_t i;
        json_t *it;
        json_array_foreach(c, i, it)
        {
            char ip[220];
            pathf(ip, sizeof(ip), "%s[%zu]", cp, i);
            const char *type = gw_json_str(it, "type");
            if (!json_is_object(it) || !type)
                return fc_bad(err, ip, ".type", "is required");
            struct canon_part *x = fc_parts_add(r, &pt->content, &pt->ncontent, &cap);
            if (!x)
                return GW_ENOMEM;
            int rc;
            if (strcmp(type, "text") == 0)
                rc = parse_text(it, ip, x, err);
            else if (strcmp(type, "image") == 0)
                rc = parse_image(it, ip, x, err);
            else
                return fc_unsupported(err, ip, "unsupported_content",
                                      "only text and image blocks are supported in tool results");
            if (rc)
                return rc;
        }
    } else {
        return fc_bad(err, cp, "", "must be a string or an array of content blocks");
    }
    return parse_cache(b, p, &pt->cache, err);
}

static int parse_tool_use(struct canon_req *r, const json_t *b, const char *p,
                          struct canon_part *pt, struct canon_err *err)
{
    static const char *const keys[] = {"type", "id", "name", "input", "cache_control", NULL};
    if (fc_only(b, keys, p, err))
        return GW_EINVAL;
    pt->type = CANON_PART_TOOL_CALL;
    pt->id = gw_json_str(b, "id");
    pt->name = gw_json_str(b, "name");
    if (!pt->id || !*pt->id)
        return fc_bad(err, p, ".id", "must be a non-empty string");
    if (!pt->name || !*pt->name)
        return fc_bad(err, p, ".name", "must be a non-empty string");
    json_t *in = fc_get(b, "input");
    if (!json_is_object(in))
        return fc_bad(err, p, ".input", "must be an object");
    char *s = json_dumps(in, JSON_COMPACT);
    if (!s)
        return GW_ENOMEM;
    pt->arguments = gw_pool_strdup(r->pool, s);
    free(s);
    if (!pt->arguments)
        return GW_ENOMEM;
    return parse_cache(b, p, &pt->cache, err);
}

static int parse_block(struct canon_req *r, const json_t *b, const char *p, int user,
                       struct canon_part *pt, struct canon_err *err)
{
    const char *type = gw_json_str(b, "type");
    if (!json_is_object(b) || !type)
        return fc_bad(err, p, ".type", "is required");
    if (strcmp(type, "text") == 0)
        return parse_text(b, p, pt, err);
    if (user && strcmp(type, "image") == 0)
        return parse_image(b, p, pt, err);
    if (user && strcmp(type, "tool_result") == 0)
        return parse_tool_result(r, b, p, pt, err);
    if (!user && strcmp(type, "tool_use") == 0)
        return parse_tool_use(r, b, p, pt, err);
    if (!user && strcmp(type, "thinking") == 0) {
        static const char *const keys[] = {"type", "thinking", "signature", NULL};
        if (fc_only(b, keys, p, err))
            return GW_EINVAL;
        pt->type = CANON_PART_THINKING;
        pt->text = gw_json_str(b, "thinking");
        pt->signature = gw_json_str(b, "signature");
        if (!pt->text)
            return fc_bad(err, p, ".thinking", "must be a string");
        if (!pt->signature)
            return fc_bad(err, p, ".signature", "must be a string");
        return GW_OK;
    }
    if (!user && strcmp(type, "redacted_thinking") == 0) {
        static const char *const keys[] = {"type", "data", NULL};
        if (fc_only(b, keys, p, err))
            return GW_EINVAL;
        pt->type = CANON_PART_REDACTED_THINKING;
        pt->text = gw_json_str(b, "data");
        if (!pt->text)
            return fc_bad(err, p, ".data", "must be a string");
        return GW_OK;
    }
    char msg[160];
    pathf(msg, sizeof(msg), "content block type '%.40s' is not supported in %s messages", type,
          user ? "user" : "assistant");
    return fc_unsupported(err, p, "unsupported_content", msg);
}

static int parse_messages(struct canon_req *r, const json_t *msgs, struct canon_err *err)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return fc_bad(err, "messages", "", "must be a non-empty array");
    size_t mcap = 0;
    size_t i;
    json_t *mj;
    json_array_foreach(msgs, i, mj)
    {
        char p[64];
        pathf(p, sizeof(p), "messages[%zu]", i);
        if (!json_is_object(mj))
            return fc_bad(err, p, "", "must be an object");
        static const char *const mkeys[] = {"role", "content", NULL};
        if (fc_only(mj, mkeys, p, err) && fc_opaque(r, err))
            return GW_EINVAL;
        const char *role = gw_json_str(mj, "role");
        if (!role)
            return fc_bad(err, p, ".role", "is required");
        int user = strcmp(role, "user") == 0;
        if (!user && strcmp(role, "assistant") != 0)
            return fc_bad(err, p, ".role",
                          "must be \"user\" or \"assistant\" (the system prompt is the top-level "
                          "'system')");
        struct canon_message *m = fc_message_add(r, &mcap);
        if (!m)
            return GW_ENOMEM;
        m->role = user ? CANON_ROLE_USER : CANON_ROLE_ASSISTANT;
        size_t pcap = 0;
        json_t *c = fc_get(mj, "content");
        char cp[80];
        pathf(cp, sizeof(cp), "%s.content", p);
        if (json_is_string(c)) {
            if (fc_text_add(r, &m->parts, &m->nparts, &pcap, json_string_value(c)))
                return GW_ENOMEM;
            continue;
        }
        if (!json_is_array(c) || json_array_size(c) == 0)
            return fc_bad(err, cp, "", "must be a string or a non-empty array of content blocks");
        size_t j;
        json_t *b;
        json_array_foreach(c, j, b)
        {
            char bp[100];
            pathf(bp, sizeof(bp), "%s[%zu]", cp, j);
            struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, &pcap);
            if (!pt)
                return GW_ENOMEM;
            int rc = parse_block(r, b, bp, user, pt, err);
            if (rc == GW_EINVAL && fc_opaque(r, err) == GW_OK) {
                /* A document, a server tool's block, a field newer than
                 * the gateway: an Anthropic provider gets it as written. */
                memset(pt, 0, sizeof(*pt));
                m->nparts--;
                continue;
            }
            if (rc)
                return rc;
        }
    }
    return GW_OK;
}

static int parse_system(struct canon_req *r, const json_t *sys, struct canon_err *err)
{
    size_t cap = 0;
    if (json_is_string(sys)) {
        if (json_string_length(sys) == 0)
            return GW_OK;
        return fc_text_add(r, &r->system, &r->nsystem, &cap, json_string_value(sys));
    }
    if (!json_is_array(sys))
        return fc_bad(err, "system", "", "must be a string or an array of text blocks");
    size_t i;
    json_t *b;
    json_array_foreach(sys, i, b)
    {
        char p[64];
        pathf(p, sizeof(p), "system[%zu]", i);
        const char *type = gw_json_str(b, "type");
        if (!type || strcmp(type, "text") != 0)
            return fc_bad(err, p, ".type", "must be \"text\"");
        struct canon_part *pt = fc_parts_add(r, &r->system, &r->nsystem, &cap);
        if (!pt)
            return GW_ENOMEM;
        int rc = parse_text(b, p, pt, err);
        if (rc)
            return rc;
    }
    return GW_OK;
}

/* One tools[i]: a custom tool {name, description, input_schema, ...}. */
static int parse_tool(struct canon_req *r, size_t i, const json_t *t, const char *p,
                      struct canon_tool *tl, struct canon_err *err)
{
    if (!json_is_object(t))
        return fc_bad(err, p, "", "must be an object");
    json_t *type = fc_get(t, "type");
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "custom") == 0)) {
        char tp[80];
        pathf(tp, sizeof(tp), "%s.type", p);
        return fc_unsupported(err, tp, "unsupported_parameter",
                              "server tools (a type other than \"custom\") are not supported by "
                              "this gateway; define the tool with name and input_schema");
    }
    static const char *const keys[] = {"type",   "name",          "description", "input_schema",
                                       "strict", "cache_control", NULL};
    if (fc_only(t, keys, p, err))
        return GW_EINVAL;
    if (fc_tool_head(r, i, t, p, tl, err))
        return GW_EINVAL;
    json_t *schema = fc_get(t, "input_schema");
    char np[96];
    pathf(np, sizeof(np), "%s.input_schema", p);
    if (!schema)
        return fc_bad(err, np, "", "is required");
    if (fc_tool_schema(schema, np, err))
        return GW_EINVAL;
    tl->parameters = schema;
    tl->strict = -1;
    if (fc_member_bool(t, "strict", p, &tl->strict, err) || parse_cache(t, p, &tl->cache, err))
        return GW_EINVAL;
    return GW_OK;
}

static int parse_tool_choice(struct canon_req *r, const json_t *tc, struct canon_err *err)
{
    const char *type = gw_json_str(tc, "type");
    if (!json_is_object(tc) || !type)
        return fc_bad(err, "tool_choice", ".type", "is required");
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    static const char *const none_keys[] = {"type", NULL};
    if (strcmp(type, "auto") == 0)
        r->tool_choice = CANON_TC_AUTO;
    else if (strcmp(type, "any") == 0)
        r->tool_choice = CANON_TC_REQUIRED;
    else if (strcmp(type, "tool") == 0)
        r->tool_choice = CANON_TC_NAMED;
    else if (strcmp(type, "none") == 0)
        r->tool_choice = CANON_TC_NONE;
    else
        return fc_bad(err, "tool_choice", ".type", "must be auto, any, tool or none");
    if (fc_only(tc, r->tool_choice == CANON_TC_NONE ? none_keys : keys, "tool_choice", err))
        return GW_EINVAL;
    if (r->tool_choice == CANON_TC_NAMED) {
        r->tool_choice_name = gw_json_str(tc, "name");
        if (!r->tool_choice_name)
            return fc_bad(err, "tool_choice", ".name", "is required for type \"tool\"");
        if (!fc_tool_known(r, r->tool_choice_name))
            return fc_bad(err, "tool_choice", ".name", "names a tool that is not in tools");
    } else if (fc_get(tc, "name")) {
        return fc_bad(err, "tool_choice", ".name", "is only for type \"tool\"");
    }
    int disable = -1;
    if (fc_tool_choice_check(r, err) ||
        fc_member_bool(tc, "disable_parallel_tool_use", "tool_choice", &disable, err))
        return GW_EINVAL;
    if (disable >= 0)
        r->parallel_tool_calls = !disable;
    return GW_OK;
}

static int parse_thinking(struct canon_req *r, const json_t *th, struct canon_err *err)
{
    const char *type = gw_json_str(th, "type");
    if (!json_is_object(th) || !type)
        return fc_bad(err, "thinking", ".type", "is required");
    if (strcmp(type, "disabled") == 0) {
        static const char *const keys[] = {"type", NULL};
        if (fc_only(th, keys, "thinking", err))
            return GW_EINVAL;
        r->reasoning_off = 1;
        return GW_OK;
    }
    if (strcmp(type, "enabled") != 0)
        return fc_unsupported(err, "thinking.type", "unsupported_parameter",
                              "must be \"enabled\" (with budget_tokens) or \"disabled\"");
    static const char *const keys[] = {"type", "budget_tokens", NULL};
    if (fc_only(th, keys, "thinking", err))
        return GW_EINVAL;
    json_t *bt = fc_get(th, "budget_tokens");
    if (!json_is_integer(bt) || json_integer_value(bt) < 1024 ||
        json_integer_value(bt) > (1LL << 31))
        return fc_bad(err, "thinking", ".budget_tokens", "must be an integer of at least 1024");
    r->reasoning_budget = json_integer_value(bt);
    return GW_OK;
}

static int parse(struct canon_req *r, struct canon_err *err)
{
    const json_t *b = r->body;
    r->field_names = field_names;
    if (fc_only(b, top_keys, "", err) && fc_opaque(r, err))
        return GW_EINVAL;
    if (fc_string(b, "model", 1, &r->model, err))
        return GW_EINVAL;
    if (fc_integer(b, "max_tokens", 1, 1LL << 31, &r->max_tokens, &r->has_max_tokens, err))
        return GW_EINVAL;
    if (!r->has_max_tokens)
        return fc_bad(err, "max_tokens", "", "is required");
    if (fc_boolean(b, "stream", &r->stream, err))
        return GW_EINVAL;
    int rc = parse_messages(r, fc_get(b, "messages"), err);
    if (rc)
        return rc;
    json_t *sys = fc_get(b, "system");
    if (sys && (rc = parse_system(r, sys, err)))
        return rc;
    if ((rc = fc_tools(r, b, parse_tool, parse_tool_choice, err)))
        return rc;
    if (fc_number(b, "temperature", 0, 1, &r->temperature, &r->has_temperature, err) ||
        fc_number(b, "top_p", 0, 1, &r->top_p, &r->has_top_p, err) ||
        fc_integer(b, "top_k", 0, 1LL << 31, &r->top_k, &r->has_top_k, err))
        return GW_EINVAL;
    json_t *stop = fc_get(b, "stop_sequences");
    if (stop && !json_is_array(stop))
        return fc_bad(err, "stop_sequences", "", "must be an array of strings");
    if ((rc = fc_stop(r, stop, "stop_sequences", err)))
        return rc;
    json_t *md = fc_get(b, "metadata");
    if (md) {
        static const char *const keys[] = {"user_id", NULL};
        if (!json_is_object(md))
            return fc_bad(err, "metadata", "", "must be an object");
        if (fc_only(md, keys, "metadata", err) && fc_opaque(r, err))
            return GW_EINVAL;
        if (fc_member_string(md, "user_id", "metadata", &r->user, err))
            return GW_EINVAL;
    }
    json_t *th = fc_get(b, "thinking");
    if (th && (rc = parse_thinking(r, th, err)))
        return rc;
    return GW_OK;
}

/* ----------------------------------------------------------------- shared */

/* Anthropic's error type for an HTTP status. */
static const char *error_type(int status)
{
    switch (status) {
    case 400:
        return "invalid_request_error";
    case 401:
        return "authentication_error";
    case 402:
        return "billing_error";
    case 403:
        return "permission_error";
    case 404:
        return "not_found_error";
    case 413:
        return "request_too_large";
    case 429:
        return "rate_limit_error";
    case 503:
    case 529:
        return "overloaded_error";
    case 504:
        return "timeout_error";
    default:
        /* Anthropic uses invalid_request_error for the 4xx it does not
         * list; 499 is the gateway's own "canceled", not the client's. */
        return status >= 400 && status < 500 && status != 499 ? "invalid_request_error"
                                                              : "api_error";
    }
}

/* Anthropic's usage object. */
static json_t *usage_json(const struct canon_usage *u, int cache_detail, long long output)
{
    json_t *o = json_pack("{s:I,s:I,s:I}", "input_tokens", (json_int_t)u->input,
                          "cache_creation_input_tokens",
                          (json_int_t)(u->cache_write_5m + u->cache_write_1h),
                          "cache_read_input_tokens", (json_int_t)u->cache_read);
    if (o && cache_detail)
        json_object_set_new(o, "cache_creation",
                            json_pack("{s:I,s:I}", "ephemeral_5m_input_tokens",
                                      (json_int_t)u->cache_write_5m, "ephemeral_1h_input_tokens",
                                      (json_int_t)u->cache_write_1h));
    if (o)
        json_object_set_new(o, "output_tokens", json_integer(output));
    return o;
}

/* ----------------------------------------------------------------- stream */

enum blk { BLK_NONE, BLK_TEXT, BLK_THINKING, BLK_TOOL };

struct an_stream {
    char *id;
    char *model;
    int started;  /* message_start sent */
    enum blk blk; /* the open block */
    int signed_;  /* the open thinking block has its signature */
    int index;    /* the open block's index; the next is index + 1 */
    struct canon_usage usage;
    const struct fc_bill *bill;
};

static void *stream_new(const struct canon_req *r, const struct fc_ctx *ctx)
{
    (void)r;
    struct an_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    size_t n = strlen(ctx->request_id) + 8;
    st->id = malloc(n);
    st->model = strdup(ctx->model ? ctx->model : "");
    if (!st->id || !st->model) {
        free(st->id);
        free(st->model);
        free(st);
        return NULL;
    }
    pathf(st->id, n, "msg_%s", ctx->request_id);
    st->index = -1;
    st->bill = ctx->bill;
    return st;
}

static void stream_free(void *p)
{
    struct an_stream *st = p;
    if (!st)
        return;
    free(st->id);
    free(st->model);
    free(st);
}

static int ensure_started(struct an_stream *st, struct gw_buf *out)
{
    if (st->started)
        return GW_OK;
    st->started = 1;
    json_t *msg =
        json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", st->id, "type", "message", "role",
                  "assistant", "model", st->model, "content", "stop_reason", "stop_sequence",
                  "usage", usage_json(&st->usage, 1, st->usage.output > 0 ? 1 : 0));
    int rc =
        fc_sse_json(out, "message_start",
                    msg ? json_pack("{s:s,s:o}", "type", "message_start", "message", msg) : NULL);
    if (rc == GW_OK)
        rc = fc_sse(out, "ping", "{\"type\":\"ping\"}", 15);
    return rc;
}

static int close_block(struct an_stream *st, struct gw_buf *out)
{
    if (st->blk == BLK_NONE)
        return GW_OK;
    st->blk = BLK_NONE;
    return gw_buf_printf(out,
                         "event: content_block_stop\ndata: "
                         "{\"type\":\"content_block_stop\",\"index\":%d}\n\n",
                         st->index);
}

/* Closes the open block and opens the next with content_block (stolen). */
static int open_block(struct an_stream *st, struct gw_buf *out, enum blk kind, json_t *cb)
{
    int rc = close_block(st, out);
    if (rc != GW_OK) {
        json_decref(cb);
        return rc;
    }
    st->blk = kind;
    st->signed_ = 0;
    st->index++;
    return fc_sse_json(out, "content_block_start",
                       cb ? json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index",
                                      st->index, "content_block", cb)
                          : NULL);
}

/* event: content_block_delta with {"type":<dtype>,<field>:<text>}. */
static int delta(struct an_stream *st, struct gw_buf *out, const char *dtype, const char *field,
                 const char *text, size_t len)
{
    int rc = gw_buf_printf(out,
                           "event: content_block_delta\ndata: {\"type\":\"content_block_delta\","
                           "\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":",
                           st->index, dtype, field);
    if (rc == GW_OK)
        rc = gw_json_escape(out, text, len);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "}}\n\n");
    return rc;
}

static int on_reasoning(struct an_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    int rc = GW_OK;
    if (ev->redacted) {
        /* One whole block, as Anthropic streams it: start with its data,
         * then stop. */
        rc = open_block(
            st, out, BLK_THINKING,
            json_pack("{s:s,s:s%}", "type", "redacted_thinking", "data", ev->text, ev->len));
        st->signed_ = 1; /* nothing may be appended to it */
        return rc == GW_OK ? close_block(st, out) : rc;
    }
    int need_open = st->blk != BLK_THINKING || st->signed_;
    if ((ev->len || ev->signature) && need_open)
        rc = open_block(
            st, out, BLK_THINKING,
            json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "", "signature", ""));
    if (rc == GW_OK && ev->len)
        rc = delta(st, out, "thinking_delta", "thinking", ev->text, ev->len);
    if (rc == GW_OK && ev->signature) {
        rc = delta(st, out, "signature_delta", "signature", ev->signature, strlen(ev->signature));
        st->signed_ = 1;
    }
    return rc;
}

static int on_done(struct an_stream *st, const struct canon_event *ev, struct gw_buf *out)
{
    int rc = close_block(st, out);
    if (rc == GW_OK) {
        json_t *u = usage_json(&st->usage, 0, st->usage.output);
        json_t *d =
            u ? json_pack("{s:s,s:{s:s,s:n},s:o}", "type", "message_delta", "delta", "stop_reason",
                          canon_stop_to_anthropic(ev->stop), "stop_sequence", "usage", u)
              : NULL;
        json_t *bill = fc_bill_json(st->bill);
        if (d && bill)
            json_object_set_new(d, "llmgw", bill);
        else
            json_decref(bill);
        rc = fc_sse_json(out, "message_delta", d);
    }
    if (rc == GW_OK)
        rc = fc_sse(out, "message_stop", "{\"type\":\"message_stop\"}", 23);
    return rc;
}

static int stream_event(void *p, const struct canon_event *ev, struct gw_buf *out)
{
    struct an_stream *st = p;
    switch (ev->type) {
    case CANON_EV_START:
        if (ev->name && *ev->name && strcmp(ev->name, st->model) != 0) {
            char *m = strdup(ev->name);
            if (!m)
                return GW_ENOMEM;
            free(st->model);
            st->model = m;
        }
        return GW_OK;
    case CANON_EV_USAGE:
        st->usage = *ev->usage;
        return GW_OK;
    case CANON_EV_ERROR: {
        json_t *e = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                              error_type(canon_failure_status(ev->failure)), "message",
                              ev->message && *ev->message ? ev->message : "the upstream failed");
        return fc_sse_json(out, "error", e);
    }
    default:
        break;
    }
    int rc = ensure_started(st, out);
    if (rc != GW_OK)
        return rc;
    switch (ev->type) {
    case CANON_EV_CHUNK:
        if (st->blk != BLK_TEXT)
            rc = open_block(st, out, BLK_TEXT, json_pack("{s:s,s:s}", "type", "text", "text", ""));
        return rc == GW_OK ? delta(st, out, "text_delta", "text", ev->text, ev->len) : rc;
    case CANON_EV_REASONING:
        return on_reasoning(st, ev, out);
    case CANON_EV_TOOL_START:
        return open_block(st, out, BLK_TOOL,
                          json_pack("{s:s,s:s,s:s,s:{}}", "type", "tool_use", "id",
                                    ev->id ? ev->id : "", "name", ev->name ? ev->name : "",
                                    "input"));
    case CANON_EV_TOOL_DELTA:
        if (st->blk != BLK_TOOL)
            return GW_EINVAL;
        return delta(st, out, "input_json_delta", "partial_json", ev->text, ev->len);
    case CANON_EV_TOOL_END:
        return st->blk == BLK_TOOL ? close_block(st, out) : GW_EINVAL;
    case CANON_EV_DONE:
        return on_done(st, ev, out);
    default:
        return GW_OK;
    }
}

/* ----------------------------------------------------------------- render */

static int render(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out)
{
    (void)r;
    json_t *content = json_array();
    if (!content)
        return GW_ENOMEM;
    for (size_t i = 0; i < acc->nthinks; i++) {
        const struct canon_acc_think *t = &acc->thinks[i];
        const char *d = t->text && t->text->data ? t->text->data : "";
        size_t dl = t->text ? t->text->len : 0;
        json_array_append_new(
            content, t->redacted
                         ? json_pack("{s:s,s:s%}", "type", "redacted_thinking", "data", d, dl)
                         : json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking", d, dl,
                                     "signature", t->signature ? t->signature : ""));
    }
    if (acc->nthinks == 0 && (acc->reasoning || acc->signature))
        json_array_append_new(
            content, json_pack("{s:s,s:s%,s:s}", "type", "thinking", "thinking",
                               acc->reasoning && acc->reasoning->data ? acc->reasoning->data : "",
                               acc->reasoning ? acc->reasoning->len : 0, "signature",
                               acc->signature ? acc->signature : ""));
    if (acc->text && acc->text->len)
        json_array_append_new(content, json_pack("{s:s,s:s%}", "type", "text", "text",
                                                 acc->text->data, acc->text->len));
    for (size_t i = 0; i < acc->ntools; i++) {
        const struct canon_acc_tool *t = &acc->tools[i];
        json_t *input = json_loadb(t->args->data ? t->args->data : "", t->args->len, 0, NULL);
        if (!json_is_object(input)) {
            /* See the header comment: no invented input. */
            json_decref(input);
            json_decref(content);
            return GW_EINVAL;
        }
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id",
                                                 t->id, "name", t->name, "input", input));
    }
    char id[200];
    pathf(id, sizeof(id), "msg_%s", ctx->request_id);
    json_t *doc =
        json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:n,s:o}", "id", id, "type", "message", "role",
                  "assistant", "model", ctx->model ? ctx->model : "", "content", content,
                  "stop_reason", canon_stop_to_anthropic(acc->stop), "stop_sequence", "usage",
                  usage_json(&acc->usage, 1, acc->usage.output));
    return fc_json_append(out, doc, JSON_COMPACT);
}

/* Anthropic's error shape has no param: the param leads the message. */
static char *error_body(int status, const char *type, const char *param, const char *code,
                        const char *message, size_t *len)
{
    (void)type;
    (void)code;
    char msg[640];
    const char *m = message ? message : "";
    if (param && *param)
        pathf(msg, sizeof(msg), "%s: %s", param, m);
    else
        pathf(msg, sizeof(msg), "%s", m);
    json_t *doc = json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                            error_type(status), "message", msg);
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (s && len)
        *len = strlen(s);
    return s;
}

const struct dp_facade fc_anthropic = {
    .name = "anthropic.messages",
    .wire = "anthropic.messages",
    .parse = parse,
    .stream_new = stream_new,
    .stream_event = stream_event,
    .stream_free = stream_free,
    .render = render,
    .error_body = error_body,
};
