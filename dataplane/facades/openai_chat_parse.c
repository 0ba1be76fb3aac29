/*
 * The OpenAI chat completions facade's request parse (openai_chat.c has
 * the facade: what it accepts, and its stream and whole answers).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_openai_chat_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

static const char *const top_keys[] = {"model",
                                       "messages",
                                       "stream",
                                       "stream_options",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "temperature",
                                       "top_p",
                                       "max_tokens",
                                       "max_completion_tokens",
                                       "seed",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "stop",
                                       "response_format",
                                       "reasoning_effort",
                                       "user",
                                       "n",
                                       "logprobs",
                                       "top_logprobs",
                                       "service_tier",
                                       "safety_identifier",
                                       NULL};

/* A 400 about path (plus a member suffix): "'messages[2].role' is required". */
static int bad(struct canon_err *err, const char *path, const char *suffix, const char *rule)
{
    canon_err_set(err, 400, path, "invalid_request", "'%s%s' %s", path, suffix, rule);
    return GW_EINVAL;
}

/* A user message's file or input_audio part into pt (DOCUMENT, AUDIO). What
 * cannot be translated (a file by id names a file in OpenAI's file store;
 * bytes not given as a data: URL; an audio format other than wav and mp3)
 * is refused as unsupported_content, which the lenient parse notes as
 * opaque: an OpenAI provider still gets the part as the client wrote it. */
static int parse_media(struct canon_req *r, const json_t *it, const char *p, const char *type,
                       struct canon_part *pt, struct canon_err *err)
{
    char mp[160];
    if (strcmp(type, "input_audio") == 0) {
        json_t *a = json_object_get(it, "input_audio");
        const char *data = gw_json_str(a, "data"), *fmt = gw_json_str(a, "format");
        snprintf(mp, sizeof(mp), "%s.input_audio", p);
        if (!data || !*data || !fmt)
            return fc_unsupported(err, mp, "unsupported_content",
                                  "input_audio must have data (base64) and format strings");
        if (strcmp(fmt, "wav") && strcmp(fmt, "mp3"))
            return fc_unsupported(err, mp, "unsupported_content",
                                  "only wav and mp3 audio can be translated");
        pt->type = CANON_PART_AUDIO;
        pt->data = data;
        pt->media_type = strcmp(fmt, "wav") == 0 ? "audio/wav" : "audio/mp3";
        return GW_OK;
    }
    json_t *f = json_object_get(it, "file");
    snprintf(mp, sizeof(mp), "%s.file", p);
    if (fc_get(f, "file_id")) {
        snprintf(mp, sizeof(mp), "%s.file.file_id", p);
        return fc_unsupported(err, mp, "unsupported_content",
                              "a file id names a file in OpenAI's file store, which only an "
                              "OpenAI provider can read; send the bytes as file_data");
    }
    const char *url = gw_json_str(f, "file_data");
    pt->type = CANON_PART_DOCUMENT;
    pt->filename = gw_json_str(f, "filename");
    int rc = url ? canon_parse_data_url(r->pool, url, &pt->media_type, &pt->data) : GW_EINVAL;
    if (rc == GW_ENOMEM)
        return rc;
    if (rc) {
        snprintf(mp, sizeof(mp), "%s.file.file_data", p);
        return fc_unsupported(err, mp, "unsupported_content",
                              "file_data must be a base64 data: URL (data:<media type>;base64,...) "
                              "to be translated");
    }
    return GW_OK;
}

/* A content value (string or array of parts) into parts. images: whether
 * image_url parts are allowed (user messages only). */
static int parse_content(struct canon_req *r, const json_t *c, const char *path, int images,
                         struct canon_part **parts, size_t *n, size_t *cap, struct canon_err *err)
{
    char p[128];
    if (json_is_string(c))
        return fc_text_add(r, parts, n, cap, json_string_value(c));
    if (!json_is_array(c))
        return bad(err, path, "", "must be a string or an array of content parts");
    size_t i;
    json_t *it;
    json_array_foreach(c, i, it)
    {
        snprintf(p, sizeof(p), "%s[%zu]", path, i);
        const char *type = gw_json_str(it, "type");
        if (!type)
            return bad(err, p, ".type", "is required");
        if (images && (strcmp(type, "file") == 0 || strcmp(type, "input_audio") == 0)) {
            struct canon_part *pt = fc_parts_add(r, parts, n, cap);
            if (!pt)
                return GW_ENOMEM;
            int rc = parse_media(r, it, p, type, pt, err);
            if (rc == GW_EINVAL && fc_opaque(r, err) == GW_OK) {
                memset(pt, 0, sizeof(*pt));
                (*n)--;
                continue;
            }
            if (rc)
                return rc;
            continue;
        }
        if (strcmp(type, "text") && strcmp(type, "refusal") &&
            (strcmp(type, "image_url") || !images)) {
            /* A newer part: an OpenAI provider takes it as written (the
             * pass-through); a translation cannot. */
            canon_err_set(err, 400, p, "unsupported_content",
                          "'%s': content part type '%s' is not supported here", p, type);
            if (fc_opaque(r, err))
                return GW_EINVAL;
            continue;
        }
        struct canon_part *pt = fc_parts_add(r, parts, n, cap);
        if (!pt)
            return GW_ENOMEM;
        if (strcmp(type, "text") == 0 || strcmp(type, "refusal") == 0) {
            const char *t = gw_json_str(it, strcmp(type, "text") == 0 ? "text" : "refusal");
            if (!t)
                return bad(err, p, ".text", "must be a string");
            pt->type = CANON_PART_TEXT;
            pt->text = t;
        } else if (strcmp(type, "image_url") == 0 && images) {
            json_t *iu = json_object_get(it, "image_url");
            const char *url = json_is_string(iu) ? json_string_value(iu) : gw_json_str(iu, "url");
            if (!url)
                return bad(err, p, ".image_url.url", "must be a string");
            char ip[160];
            snprintf(ip, sizeof(ip), "%s.image_url.url", p);
            int rc = fc_image_url(r, pt, url, ip, err);
            if (rc)
                return rc;
            pt->detail = gw_json_str(iu, "detail");
        }
    }
    return GW_OK;
}

static int parse_tool_calls(struct canon_req *r, const json_t *tcs, const char *path,
                            struct canon_message *m, size_t *cap, struct canon_err *err)
{
    if (!json_is_array(tcs))
        return bad(err, path, "", "must be an array");
    size_t i;
    json_t *tc;
    json_array_foreach(tcs, i, tc)
    {
        char p[160];
        snprintf(p, sizeof(p), "%s[%zu]", path, i);
        json_t *fn = json_object_get(tc, "function");
        const char *id = gw_json_str(tc, "id");
        const char *name = gw_json_str(fn, "name");
        const char *args = gw_json_str(fn, "arguments");
        if (!id || !name || !args)
            return bad(err, p, "", "must have id, function.name and function.arguments strings");
        char ap[200];
        snprintf(ap, sizeof(ap), "%s.function.arguments", p);
        int rc = fc_args_check(r, args, ap, err);
        if (rc == GW_EINVAL)
            return bad(err, p, ".function.arguments", "must be a JSON object in a string");
        if (rc)
            return rc;
        rc = fc_call_add(r, m, cap, id, name, args);
        if (rc)
            return rc;
    }
    return GW_OK;
}

static int parse_messages(struct canon_req *r, const json_t *msgs, struct canon_err *err)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return bad(err, "messages", "", "must be a non-empty array");
    size_t mcap = 0, scap = 0, pcap = 0;
    int leading = 1;
    struct canon_message *prev_tool = NULL; /* a user message holding tool results */
    size_t i;
    json_t *mj;
    json_array_foreach(msgs, i, mj)
    {
        char p[64];
        snprintf(p, sizeof(p), "messages[%zu]", i);
        if (!json_is_object(mj))
            return bad(err, p, "", "must be an object");
        /* annotations (an answer's citations, echoed back with it) carry
         * nothing a model reads: accepted, and left out of a translation. */
        static const char *const mkeys[] = {
            "role",    "content",     "tool_calls", "tool_call_id", "reasoning_content",
            "refusal", "annotations", NULL};
        if (fc_only(mj, mkeys, p, err) && fc_opaque(r, err))
            return GW_EINVAL;
        const char *role = gw_json_str(mj, "role");
        if (!role)
            return bad(err, p, ".role", "is required");
        json_t *c = fc_get(mj, "content");
        char cp[80];
        snprintf(cp, sizeof(cp), "%s.content", p);
        int rc;
        if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
            if (!c)
                return bad(err, cp, "", "is required");
            if (leading) {
                rc = parse_content(r, c, cp, 0, &r->system, &r->nsystem, &scap, err);
            } else {
                struct canon_message *m = fc_message_add(r, &mcap);
                if (!m)
                    return GW_ENOMEM;
                m->role = CANON_ROLE_SYSTEM;
                pcap = 0;
                rc = parse_content(r, c, cp, 0, &m->parts, &m->nparts, &pcap, err);
            }
            prev_tool = NULL;
            if (rc)
                return rc;
            continue;
        }
        leading = 0;
        if (strcmp(role, "tool") == 0) {
            const char *id = gw_json_str(mj, "tool_call_id");
            if (!id)
                return bad(err, p, ".tool_call_id", "is required");
            if (!prev_tool) {
                prev_tool = fc_message_add(r, &mcap);
                if (!prev_tool)
                    return GW_ENOMEM;
                prev_tool->role = CANON_ROLE_USER;
                pcap = 0;
            }
            struct canon_part *pt = fc_parts_add(r, &prev_tool->parts, &prev_tool->nparts, &pcap);
            if (!pt)
                return GW_ENOMEM;
            pt->type = CANON_PART_TOOL_RESULT;
            pt->id = id;
            size_t ccap = 0;
            if (c && (rc = parse_content(r, c, cp, 0, &pt->content, &pt->ncontent, &ccap, err)))
                return rc;
            continue;
        }
        prev_tool = NULL;
        struct canon_message *m = fc_message_add(r, &mcap);
        if (!m)
            return GW_ENOMEM;
        pcap = 0;
        if (strcmp(role, "user") == 0) {
            m->role = CANON_ROLE_USER;
            if (!c)
                return bad(err, cp, "", "is required");
            if ((rc = parse_content(r, c, cp, 1, &m->parts, &m->nparts, &pcap, err)))
                return rc;
        } else if (strcmp(role, "assistant") == 0) {
            m->role = CANON_ROLE_ASSISTANT;
            const char *rs = gw_json_str(mj, "reasoning_content");
            if (rs && *rs) {
                struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, &pcap);
                if (!pt)
                    return GW_ENOMEM;
                pt->type = CANON_PART_THINKING;
                pt->text = rs;
            }
            if (c && !(json_is_string(c) && json_string_length(c) == 0) &&
                (rc = parse_content(r, c, cp, 0, &m->parts, &m->nparts, &pcap, err)))
                return rc;
            json_t *tcs = fc_get(mj, "tool_calls");
            char tp[80];
            snprintf(tp, sizeof(tp), "%s.tool_calls", p);
            if (tcs && (rc = parse_tool_calls(r, tcs, tp, m, &pcap, err)))
                return rc;
            if (m->nparts == 0)
                return bad(err, p, "", "has neither content nor tool_calls");
        } else {
            canon_err_set(err, 400, p, "invalid_request",
                          "'%s.role' must be system, developer, user, assistant or tool", p);
            return GW_EINVAL;
        }
    }
    if (r->nmessages == 0)
        return bad(err, "messages", "", "must hold at least one non-system message");
    return GW_OK;
}

/* One tools[i]: {type: "function", function: {name, ...}}. */
static int parse_tool(struct canon_req *r, size_t i, const json_t *t, const char *p,
                      struct canon_tool *tl, struct canon_err *err)
{
    const char *type = gw_json_str(t, "type");
    if (!type || strcmp(type, "function") != 0) {
        canon_err_set(err, 400, p, "unsupported_parameter",
                      "'%s.type' must be \"function\" (other tool types are not supported)", p);
        return GW_EINVAL;
    }
    json_t *fn = json_object_get(t, "function");
    char fp[96];
    snprintf(fp, sizeof(fp), "%s.function", p);
    if (!json_is_object(fn))
        return bad(err, fp, "", "must be an object");
    static const char *const fkeys[] = {"name", "description", "parameters", "strict", NULL};
    if (fc_only(fn, fkeys, fp, err) && fc_opaque(r, err))
        return GW_EINVAL;
    tl->name = gw_json_str(fn, "name");
    char np[128];
    snprintf(np, sizeof(np), "%s.name", fp);
    if (fc_tool_new_name(r, i, tl->name, np, err))
        return GW_EINVAL;
    tl->description = gw_json_str(fn, "description");
    json_t *params = fc_get(fn, "parameters");
    snprintf(np, sizeof(np), "%s.parameters", fp);
    if (params && fc_tool_schema(params, np, err))
        return GW_EINVAL;
    tl->parameters = params;
    tl->strict = -1;
    json_t *st = fc_get(fn, "strict");
    if (st && !json_is_boolean(st))
        return bad(err, fp, ".strict", "must be a boolean");
    if (st)
        tl->strict = json_is_true(st);
    return GW_OK;
}

static int parse_tool_choice(struct canon_req *r, const json_t *tc, struct canon_err *err)
{
    if (!fc_tool_choice_word(json_string_value(tc), &r->tool_choice)) {
        const char *name = gw_json_str(json_object_get(tc, "function"), "name");
        if (!json_is_object(tc) || !name)
            return bad(err, "tool_choice", "",
                       "must be \"auto\", \"none\", \"required\" or "
                       "{\"type\":\"function\",\"function\":{\"name\":...}}");
        r->tool_choice = CANON_TC_NAMED;
        r->tool_choice_name = name;
        if (!fc_tool_known(r, name))
            return bad(err, "tool_choice", "", "names a function that is not in tools");
    }
    return fc_tool_choice_check(r, err);
}

static int parse_format(struct canon_req *r, const json_t *rf, struct canon_err *err)
{
    const char *type = gw_json_str(rf, "type");
    if (!type)
        return bad(err, "response_format", ".type", "is required");
    if (strcmp(type, "text") == 0)
        r->format = CANON_FMT_TEXT;
    else if (strcmp(type, "json_object") == 0)
        r->format = CANON_FMT_JSON_OBJECT;
    else if (strcmp(type, "json_schema") == 0) {
        json_t *js = json_object_get(rf, "json_schema");
        json_t *schema = json_object_get(js, "schema");
        if (!json_is_object(schema))
            return bad(err, "response_format.json_schema.schema", "", "must be an object");
        r->format = CANON_FMT_JSON_SCHEMA;
        r->format_schema = schema;
        r->format_name = gw_json_str(js, "name");
        json_t *st = fc_get(js, "strict");
        r->format_strict = st ? json_is_true(st) : -1;
    } else
        return bad(err, "response_format.type", "", "must be text, json_object or json_schema");
    return GW_OK;
}

/* logprobs (a boolean) and top_logprobs (0..20, which needs logprobs). */
static int parse_logprobs(struct canon_req *r, const json_t *b, struct canon_err *err)
{
    int has;
    long long top = -1;
    if (fc_boolean(b, "logprobs", &r->logprobs, err) ||
        fc_integer(b, "top_logprobs", 0, 20, &top, &has, err))
        return GW_EINVAL;
    if (has && !r->logprobs)
        return bad(err, "top_logprobs", "", "needs 'logprobs' true");
    r->top_logprobs = has ? (int)top : -1;
    return GW_OK;
}

int fc_openai_chat_parse(struct canon_req *r, struct canon_err *err)
{
    const json_t *b = r->body;
    json_t *ws = fc_get(b, "web_search_options");
    if (ws && !json_is_null(ws) &&
        fc_unsupported(err, "web_search_options", "unsupported_parameter",
                       "web search runs on OpenAI's servers: only an openai provider given the "
                       "client's request as written has it; a target that translates the "
                       "request has no web search") &&
        fc_opaque(r, err))
        return GW_EINVAL;
    if (fc_only(b, top_keys, "", err) && fc_opaque(r, err))
        return GW_EINVAL;
    if (fc_string(b, "model", 1, &r->model, err))
        return GW_EINVAL;
    int has;
    long long n;
    if (fc_integer(b, "n", 1, 1, &n, &has, err)) {
        canon_err_set(err, 400, "n", "unsupported_parameter",
                      "'n' must be 1: one answer per request (several would come from one "
                      "provider attempt each)");
        return GW_EINVAL;
    }
    if (parse_logprobs(r, b, err) || fc_service_tier(r, b, &fc_tier_openai, err))
        return GW_EINVAL;
    if (fc_boolean(b, "stream", &r->stream, err))
        return GW_EINVAL;
    json_t *so = fc_get(b, "stream_options");
    if (so) {
        static const char *const sokeys[] = {"include_usage", NULL};
        if (!json_is_object(so))
            return bad(err, "stream_options", "", "must be an object");
        if ((fc_only(so, sokeys, "stream_options", err) && fc_opaque(r, err)) ||
            fc_boolean(so, "include_usage", &r->include_usage, err))
            return GW_EINVAL;
    }
    int rc = parse_messages(r, fc_get(b, "messages"), err);
    if (rc)
        return rc;
    if ((rc = fc_tools(r, b, parse_tool, parse_tool_choice, err)))
        return rc;
    if (fc_boolean(b, "parallel_tool_calls", &r->parallel_tool_calls, err) ||
        fc_number(b, "temperature", 0, 2, &r->temperature, &r->has_temperature, err) ||
        fc_number(b, "top_p", 0, 1, &r->top_p, &r->has_top_p, err) ||
        fc_number(b, "presence_penalty", -2, 2, &r->presence_penalty, &r->has_presence_penalty,
                  err) ||
        fc_number(b, "frequency_penalty", -2, 2, &r->frequency_penalty, &r->has_frequency_penalty,
                  err) ||
        fc_integer(b, "seed", -(1LL << 62), 1LL << 62, &r->seed, &r->has_seed, err) ||
        fc_integer(b, "max_tokens", 1, 1LL << 31, &r->max_tokens, &r->has_max_tokens, err))
        return GW_EINVAL;
    if (!r->has_max_tokens && fc_integer(b, "max_completion_tokens", 1, 1LL << 31, &r->max_tokens,
                                         &r->has_max_tokens, err))
        return GW_EINVAL;
    if ((rc = fc_stop(r, fc_get(b, "stop"), "stop", err)))
        return rc;
    json_t *rf = fc_get(b, "response_format");
    if (rf && (rc = parse_format(r, rf, err)))
        return rc;
    const char *effort = NULL;
    if (fc_string(b, "reasoning_effort", 0, &effort, err))
        return GW_EINVAL;
    if (effort && (rc = fc_effort(r, effort, "reasoning_effort", err)))
        return rc;
    if (fc_string(b, "user", 0, &r->user, err) ||
        fc_string(b, "safety_identifier", 0, &r->safety_identifier, err))
        return GW_EINVAL;
    return GW_OK;
}
