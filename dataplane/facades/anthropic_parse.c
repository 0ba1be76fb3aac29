/*
 * The Anthropic Messages facade's request parse: a POST /v1/messages body
 * into a canonical request, or a 400 naming the field (what is accepted:
 * anthropic.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_anthropic_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

static const char *const top_keys[] = {"model",    "max_tokens",   "messages",       "system",
                                       "tools",    "tool_choice",  "temperature",    "top_p",
                                       "top_k",    "stream",       "stop_sequences", "metadata",
                                       "thinking", "service_tier", "output_config",  NULL};

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
    [CANON_F_RESPONSE_FORMAT] = "output_config.format",
    [CANON_F_REASONING] = "thinking",
    [CANON_F_USER] = "metadata.user_id",
    [CANON_F_SERVICE_TIER] = "service_tier",
    [CANON_F_LOGPROBS] = "logprobs",
};

/* cache_control: {"type":"ephemeral"} with an optional ttl "5m" or "1h". */
static int parse_cache(const json_t *blk, const char *path, enum canon_cache *out,
                       struct canon_err *err)
{
    *out = CANON_CACHE_NONE;
    json_t *cc = fc_get(blk, "cache_control");
    if (!cc)
        return GW_OK;
    char p[200];
    fc_anthropic_pathf(p, sizeof(p), "%s.cache_control", path);
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

/* An image or document block's members (only keys) and its source object,
 * whose path goes to sp and type to *type; NULL after the 400. */
static const json_t *block_source(const json_t *b, const char *p, const char *const *keys, char *sp,
                                  size_t n, const char **type, struct canon_err *err)
{
    if (fc_only(b, keys, p, err))
        return NULL;
    json_t *src = fc_get(b, "source");
    fc_anthropic_pathf(sp, n, "%s.source", p);
    if (!json_is_object(src)) {
        fc_bad(err, sp, "", "must be an object");
        return NULL;
    }
    *type = gw_json_str(src, "type");
    return src;
}

static int parse_image(const json_t *b, const char *p, struct canon_part *pt, struct canon_err *err)
{
    static const char *const keys[] = {"type", "source", "cache_control", NULL};
    char sp[200];
    const char *type;
    const json_t *src = block_source(b, p, keys, sp, sizeof(sp), &type, err);
    if (!src)
        return GW_EINVAL;
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

/* A document block: a base64, url or text source (content and file
 * sources, which only Anthropic reads, are unsupported_content: opaque in
 * the lenient parse, so an Anthropic provider still gets them), title,
 * context, citations.enabled, cache_control. */
static int parse_document(const json_t *b, const char *p, struct canon_part *pt,
                          struct canon_err *err)
{
    static const char *const keys[] = {"type",      "source",        "title", "context",
                                       "citations", "cache_control", NULL};
    char sp[200];
    const char *type;
    const json_t *src = block_source(b, p, keys, sp, sizeof(sp), &type, err);
    if (!src)
        return GW_EINVAL;
    pt->type = CANON_PART_DOCUMENT;
    if (type && strcmp(type, "base64") == 0) {
        static const char *const skeys[] = {"type", "media_type", "data", NULL};
        if (fc_only(src, skeys, sp, err))
            return GW_EINVAL;
        pt->media_type = gw_json_str(src, "media_type");
        pt->data = gw_json_str(src, "data");
        if (!pt->media_type || !*pt->media_type)
            return fc_bad(err, sp, ".media_type", "must be a media type (application/pdf)");
        if (!pt->data || !*pt->data)
            return fc_bad(err, sp, ".data", "must be a non-empty base64 string");
    } else if (type && strcmp(type, "url") == 0) {
        static const char *const ukeys[] = {"type", "url", NULL};
        if (fc_only(src, ukeys, sp, err))
            return GW_EINVAL;
        pt->url = gw_json_str(src, "url");
        if (!pt->url || (strncmp(pt->url, "https://", 8) != 0 && strncmp(pt->url, "http://", 7)))
            return fc_bad(err, sp, ".url", "must be an http(s) URL");
        pt->media_type = "application/pdf"; /* Anthropic's URL documents are PDFs */
    } else if (type && strcmp(type, "text") == 0) {
        static const char *const tkeys[] = {"type", "media_type", "data", NULL};
        if (fc_only(src, tkeys, sp, err))
            return GW_EINVAL;
        const char *mt = gw_json_str(src, "media_type");
        if (!mt || strcmp(mt, "text/plain") != 0)
            return fc_bad(err, sp, ".media_type", "must be \"text/plain\"");
        pt->text = gw_json_str(src, "data");
        pt->media_type = "text/plain";
        if (!pt->text)
            return fc_bad(err, sp, ".data", "must be a string");
    } else {
        char why[160];
        fc_anthropic_pathf(why, sizeof(why),
                           "document source type '%.40s' is not supported by this gateway "
                           "(base64, url and text are)",
                           type ? type : "");
        return fc_unsupported(err, sp, "unsupported_content", why);
    }
    if (fc_member_string(b, "title", p, &pt->title, err) ||
        fc_member_string(b, "context", p, &pt->context, err))
        return GW_EINVAL;
    json_t *cit = fc_get(b, "citations");
    if (cit) {
        static const char *const ckeys[] = {"enabled", NULL};
        char cp[220];
        fc_anthropic_pathf(cp, sizeof(cp), "%s.citations", p);
        if (!json_is_object(cit))
            return fc_bad(err, cp, "", "must be an object");
        if (fc_only(cit, ckeys, cp, err) || fc_member_bool(cit, "enabled", cp, &pt->citations, err))
            return GW_EINVAL;
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
    fc_anthropic_pathf(cp, sizeof(cp), "%s.content", p);
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
            fc_anthropic_pathf(ip, sizeof(ip), "%s[%zu]", cp, i);
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
    if (user && strcmp(type, "document") == 0)
        return parse_document(b, p, pt, err);
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
    fc_anthropic_pathf(msg, sizeof(msg),
                       "content block type '%.40s' is not supported in %s messages", type,
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
        fc_anthropic_pathf(p, sizeof(p), "messages[%zu]", i);
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
        fc_anthropic_pathf(cp, sizeof(cp), "%s.content", p);
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
            fc_anthropic_pathf(bp, sizeof(bp), "%s[%zu]", cp, j);
            struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, &pcap);
            if (!pt)
                return GW_ENOMEM;
            int rc = parse_block(r, b, bp, user, pt, err);
            if (rc == GW_EINVAL && fc_opaque(r, err) == GW_OK) {
                /* A document the gateway cannot carry (content or file
                 * source), a server tool's block, a field newer than the
                 * gateway: an Anthropic provider gets it as written. */
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
        fc_anthropic_pathf(p, sizeof(p), "system[%zu]", i);
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
        fc_anthropic_pathf(tp, sizeof(tp), "%s.type", p);
        char why[256];
        snprintf(why, sizeof(why),
                 "server tool '%.64s' runs on Anthropic's servers: only an anthropic provider "
                 "given the client's request as written has it; a target that translates the "
                 "request has no server tools",
                 json_is_string(type) ? json_string_value(type) : "?");
        return fc_unsupported(err, tp, "unsupported_parameter", why);
    }
    static const char *const keys[] = {"type",   "name",          "description", "input_schema",
                                       "strict", "cache_control", NULL};
    if (fc_only(t, keys, p, err))
        return GW_EINVAL;
    if (fc_tool_head(r, i, t, p, tl, err))
        return GW_EINVAL;
    json_t *schema = fc_get(t, "input_schema");
    char np[96];
    fc_anthropic_pathf(np, sizeof(np), "%s.input_schema", p);
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

/* output_config: format {type: json_schema, schema} (structured output)
 * and effort (low, medium, high) are mapped; anything else under it is
 * opaque (an anthropic provider gets it as written). */
static int parse_output_config(struct canon_req *r, const json_t *oc, struct canon_err *err)
{
    if (!json_is_object(oc))
        return fc_bad(err, "output_config", "", "must be an object");
    static const char *const keys[] = {"format", "effort", NULL};
    if (fc_only(oc, keys, "output_config", err) && fc_opaque(r, err))
        return GW_EINVAL;
    json_t *f = fc_get(oc, "format");
    if (f && !json_is_null(f)) {
        static const char *const fkeys[] = {"type", "schema", NULL};
        const char *type = gw_json_str(f, "type");
        if (!json_is_object(f) || !type)
            return fc_bad(err, "output_config.format", ".type", "is required");
        if (strcmp(type, "json_schema") != 0) {
            if (fc_unsupported(err, "output_config.format.type", "unsupported_parameter",
                               "only \"json_schema\" is mapped to other formats") &&
                fc_opaque(r, err))
                return GW_EINVAL;
        } else {
            if (fc_only(f, fkeys, "output_config.format", err) && fc_opaque(r, err))
                return GW_EINVAL;
            json_t *schema = fc_get(f, "schema");
            if (!json_is_object(schema))
                return fc_bad(err, "output_config.format", ".schema", "must be an object");
            r->format = CANON_FMT_JSON_SCHEMA;
            r->format_schema = schema;
        }
    }
    json_t *e = fc_get(oc, "effort");
    if (e && !json_is_null(e)) {
        const char *v = json_string_value(e);
        if (v && (!strcmp(v, "low") || !strcmp(v, "medium") || !strcmp(v, "high"))) {
            r->reasoning_effort = v; /* a thinking budget, when given, wins */
        } else if (fc_unsupported(err, "output_config.effort", "unsupported_parameter",
                                  "only low, medium and high map to other formats' efforts") &&
                   fc_opaque(r, err)) {
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

int fc_anthropic_parse(struct canon_req *r, struct canon_err *err)
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
        if (fc_member_string(md, "user_id", "metadata", &r->safety_identifier, err))
            return GW_EINVAL;
    }
    json_t *th = fc_get(b, "thinking");
    if (th && (rc = parse_thinking(r, th, err)))
        return rc;
    json_t *oc = fc_get(b, "output_config");
    if (oc && (rc = parse_output_config(r, oc, err)))
        return rc;
    return fc_service_tier(r, b, &fc_tier_anthropic, err);
}
