/*
 * The Responses facade's request parse: a POST /v1/responses body into a
 * canonical request, or a 400 naming the field (what is accepted and what
 * is refused, and why: responses.c).
 */
#include <stdio.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_responses_int.h"
#include "fc_tier.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

static const char *const top_keys[] = {"model",
                                       "input",
                                       "instructions",
                                       "tools",
                                       "tool_choice",
                                       "parallel_tool_calls",
                                       "temperature",
                                       "top_p",
                                       "max_output_tokens",
                                       "stream",
                                       "text",
                                       "reasoning",
                                       "user",
                                       "safety_identifier",
                                       "store",
                                       "background",
                                       "include",
                                       "truncation",
                                       "service_tier",
                                       "top_logprobs",
                                       NULL};

/* The client's names for the canonical fields, for drivers' refusals. */
static const char *const field_names[CANON_F_COUNT] = {
    [CANON_F_MESSAGES] = "input",
    [CANON_F_SYSTEM] = "instructions",
    [CANON_F_TOOLS] = "tools",
    [CANON_F_TOOL_CHOICE] = "tool_choice",
    [CANON_F_PARALLEL_TOOL_CALLS] = "parallel_tool_calls",
    [CANON_F_TEMPERATURE] = "temperature",
    [CANON_F_TOP_P] = "top_p",
    [CANON_F_TOP_K] = "top_k",
    [CANON_F_MAX_TOKENS] = "max_output_tokens",
    [CANON_F_SEED] = "seed",
    [CANON_F_PRESENCE_PENALTY] = "presence_penalty",
    [CANON_F_FREQUENCY_PENALTY] = "frequency_penalty",
    [CANON_F_STOP] = "stop",
    [CANON_F_RESPONSE_FORMAT] = "text.format",
    [CANON_F_REASONING] = "reasoning.effort",
    [CANON_F_USER] = "user",
    [CANON_F_SERVICE_TIER] = "service_tier",
    [CANON_F_LOGPROBS] = "top_logprobs",
};

static const char STATELESS[] =
    "the gateway is stateless: it stores no responses or conversations, so send the whole "
    "conversation in input (with store false or absent)";

/* ------------------------------------------------------------------ parse */

/* include "message.output_text.logprobs": the answer's log probabilities. */
static int fc_responses_include_logprobs(struct canon_req *r, const json_t *v)
{
    if (!json_is_string(v) || strcmp(json_string_value(v), "message.output_text.logprobs") != 0)
        return 0;
    r->logprobs = 1;
    return 1;
}

/* service_tier (OpenAI's words) and top_logprobs (0..20, which asks for
 * log probabilities as the include value does). */
static int fc_responses_tier_logprobs(struct canon_req *r, const json_t *b, struct canon_err *err)
{
    int has;
    long long top;
    if (fc_service_tier(r, b, &fc_tier_openai, err) ||
        fc_integer(b, "top_logprobs", 0, 20, &top, &has, err))
        return GW_EINVAL;
    if (has) {
        r->top_logprobs = (int)top;
        r->logprobs = 1;
    }
    return GW_OK;
}

/* The role of a message item. */
enum mrole { MR_USER, MR_ASSISTANT, MR_SYSTEM };

/* An input_file part into a DOCUMENT: file_data (a base64 data: URL) with
 * its filename, or file_url. A file_id is refused: the gateway stores no
 * files, and a translation cannot read OpenAI's. */
static int parse_file(struct canon_req *r, const json_t *it, const char *p, struct canon_part *pt,
                      struct canon_err *err)
{
    char fp[192];
    if (fc_get(it, "file_id")) {
        snprintf(fp, sizeof(fp), "%s.file_id", p);
        return fc_unsupported(err, fp, "unsupported_parameter",
                              "file references are not supported (the gateway stores no files); "
                              "send the file as file_data or file_url");
    }
    static const char *const k[] = {"type", "file_data", "file_url", "filename", NULL};
    if (fc_only(it, k, p, err) || fc_member_string(it, "filename", p, &pt->filename, err))
        return GW_EINVAL;
    pt->type = CANON_PART_DOCUMENT;
    const char *data = gw_json_str(it, "file_data"), *url = gw_json_str(it, "file_url");
    if (!data == !url)
        return fc_bad(err, p, "", "must have one of file_data and file_url");
    if (url) {
        if (strncmp(url, "https://", 8) != 0 && strncmp(url, "http://", 7) != 0)
            return fc_bad(err, p, ".file_url", "must be an http(s) URL");
        pt->url = url;
        return GW_OK;
    }
    int rc = canon_parse_data_url(r->pool, data, &pt->media_type, &pt->data);
    if (rc == GW_EINVAL)
        return fc_bad(err, p, ".file_data",
                      "must be a base64 data: URL (data:<media type>;base64,...)");
    return rc;
}

/* Content parts of a message item into parts. */
static int parse_content(struct canon_req *r, const json_t *c, const char *path, enum mrole role,
                         struct canon_part **parts, size_t *n, size_t *cap, struct canon_err *err)
{
    if (json_is_string(c)) {
        /* An assistant's empty string is "no text" (function-call turns). */
        if (role == MR_ASSISTANT && json_string_length(c) == 0)
            return GW_OK;
        return fc_text_add(r, parts, n, cap, json_string_value(c));
    }
    if (!json_is_array(c))
        return fc_bad(err, path, "", "must be a string or an array of content parts");
    size_t i;
    json_t *it;
    json_array_foreach(c, i, it)
    {
        char p[160];
        snprintf(p, sizeof(p), "%s[%zu]", path, i);
        if (!json_is_object(it))
            return fc_bad(err, p, "", "must be an object");
        const char *type = gw_json_str(it, "type");
        if (!type)
            return fc_bad(err, p, ".type", "is required");
        struct canon_part *pt = fc_parts_add(r, parts, n, cap);
        if (!pt)
            return GW_ENOMEM;
        if (role != MR_ASSISTANT && strcmp(type, "input_text") == 0) {
            static const char *const k[] = {"type", "text", NULL};
            if (fc_text_part(it, p, k, "text", pt, err))
                return GW_EINVAL;
        } else if (role == MR_USER && strcmp(type, "input_image") == 0) {
            if (fc_get(it, "file_id")) {
                char fp[192];
                snprintf(fp, sizeof(fp), "%s.file_id", p);
                return fc_unsupported(err, fp, "unsupported_parameter",
                                      "file references are not supported (the gateway stores no "
                                      "files); send the image as image_url");
            }
            static const char *const k[] = {"type", "image_url", "detail", NULL};
            if (fc_only(it, k, p, err))
                return GW_EINVAL;
            const char *url = gw_json_str(it, "image_url");
            if (!url)
                return fc_bad(err, p, ".image_url", "must be a string (an http(s) or data: URL)");
            char ip[192];
            snprintf(ip, sizeof(ip), "%s.image_url", p);
            int rc = fc_image_url(r, pt, url, ip, err);
            if (rc)
                return rc;
            if (fc_member_string(it, "detail", p, &pt->detail, err))
                return GW_EINVAL;
        } else if (role == MR_USER && strcmp(type, "input_file") == 0) {
            int rc = parse_file(r, it, p, pt, err);
            if (rc)
                return rc;
        } else if (role == MR_ASSISTANT && strcmp(type, "output_text") == 0) {
            /* annotations and logprobs describe an earlier answer; they are
             * not instructions to the model. */
            static const char *const k[] = {"type", "text", "annotations", "logprobs", NULL};
            if (fc_text_part(it, p, k, "text", pt, err))
                return GW_EINVAL;
        } else if (role == MR_ASSISTANT && strcmp(type, "refusal") == 0) {
            static const char *const k[] = {"type", "refusal", NULL};
            if (fc_text_part(it, p, k, "refusal", pt, err))
                return GW_EINVAL;
        } else {
            canon_err_set(err, 400, p, "unsupported_content",
                          "'%s': content part type '%s' is not supported in a%s message", p, type,
                          role == MR_USER        ? " user"
                          : role == MR_ASSISTANT ? "n assistant"
                                                 : " system");
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

/* Joins the text of an array of {type: want, text} parts (sep between). */
static const char *join_texts(struct canon_req *r, const json_t *arr, const char *want,
                              const char *path, const char *sep, struct canon_err *err)
{
    size_t total = 0, i;
    json_t *it;
    json_array_foreach(arr, i, it)
    {
        const char *type = gw_json_str(it, "type");
        const char *t = gw_json_str(it, "text");
        if (!type || strcmp(type, want) != 0 || !t) {
            char p[160];
            snprintf(p, sizeof(p), "%s[%zu]", path, i);
            canon_err_set(err, 400, p, "invalid_request",
                          "'%s' must be a {\"type\":\"%s\",\"text\":...} part", p, want);
            return NULL;
        }
        total += strlen(t) + strlen(sep);
    }
    char *s = gw_pool_alloc(r->pool, total + 1);
    if (!s)
        return NULL;
    size_t at = 0;
    json_array_foreach(arr, i, it)
    {
        const char *t = gw_json_str(it, "text");
        if (i) {
            memcpy(s + at, sep, strlen(sep));
            at += strlen(sep);
        }
        memcpy(s + at, t, strlen(t));
        at += strlen(t);
    }
    s[at] = '\0';
    return s;
}

/* A reasoning item into a THINKING (or REDACTED_THINKING) part. */
static int parse_reasoning(struct canon_req *r, const json_t *it, const char *p,
                           struct canon_message *m, size_t *cap, struct canon_err *err)
{
    static const char *const k[] = {"type",   "id", "summary", "content", "encrypted_content",
                                    "status", NULL};
    if (fc_only(it, k, p, err))
        return GW_EINVAL;
    json_t *summary = fc_get(it, "summary");
    json_t *content = fc_get(it, "content");
    json_t *enc = fc_get(it, "encrypted_content");
    char sp[160];
    if (summary && !json_is_array(summary))
        return fc_bad(err, p, ".summary", "must be an array");
    if (content && !json_is_array(content))
        return fc_bad(err, p, ".content", "must be an array");
    if (enc && (!json_is_string(enc) || json_string_length(enc) == 0))
        return fc_bad(err, p, ".encrypted_content", "must be a non-empty string");
    const char *text = NULL;
    if (json_array_size(content)) {
        snprintf(sp, sizeof(sp), "%s.content", p);
        text = join_texts(r, content, "reasoning_text", sp, "", err);
    } else if (json_array_size(summary)) {
        snprintf(sp, sizeof(sp), "%s.summary", p);
        text = join_texts(r, summary, "summary_text", sp, "\n\n", err);
    } else {
        text = "";
    }
    if (!text)
        return err->status ? GW_EINVAL : GW_ENOMEM;
    if (!*text && !enc)
        return GW_OK; /* an empty item carries nothing */
    struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, cap);
    if (!pt)
        return GW_ENOMEM;
    if (*text) {
        pt->type = CANON_PART_THINKING;
        pt->text = text;
        pt->signature = json_string_value(enc);
    } else {
        pt->type = CANON_PART_REDACTED_THINKING;
        pt->text = json_string_value(enc);
    }
    return GW_OK;
}

static int parse_call_output(struct canon_req *r, const json_t *it, const char *p,
                             struct canon_part *pt, struct canon_err *err)
{
    static const char *const k[] = {"type", "call_id", "output", "id", "status", NULL};
    if (fc_only(it, k, p, err))
        return GW_EINVAL;
    pt->type = CANON_PART_TOOL_RESULT;
    if (!(pt->id = gw_json_str(it, "call_id")))
        return fc_bad(err, p, ".call_id", "is required");
    json_t *out = fc_get(it, "output");
    char op[160];
    snprintf(op, sizeof(op), "%s.output", p);
    if (!out)
        return fc_bad(err, op, "", "is required");
    if (json_is_string(out) && json_string_length(out) == 0)
        return GW_OK; /* an empty result: no content */
    size_t cap = 0;
    return parse_content(r, out, op, MR_USER, &pt->content, &pt->ncontent, &cap, err);
}

/* What the last canonical message holds, for merging the next item. */
enum last { L_NONE, L_ASSISTANT, L_RESULTS, L_OTHER };

/* A new canonical message of role (its parts' capacity *pcap restarts). */
static struct canon_message *turn(struct canon_req *r, size_t *mcap, size_t *pcap,
                                  enum canon_role role)
{
    struct canon_message *m = fc_message_add(r, mcap);
    if (m) {
        m->role = role;
        *pcap = 0;
    }
    return m;
}

/* The message an item of kind want goes into: the last one when it holds
 * that kind, else a new one of role. */
static struct canon_message *merge(struct canon_req *r, size_t *mcap, size_t *pcap, enum last *last,
                                   enum last want, enum canon_role role)
{
    if (*last == want)
        return &r->messages[r->nmessages - 1];
    *last = want;
    return turn(r, mcap, pcap, role);
}

static int parse_input(struct canon_req *r, const json_t *in, size_t *scap, struct canon_err *err)
{
    size_t mcap = 0, pcap = 0;
    if (json_is_string(in)) {
        struct canon_message *m = turn(r, &mcap, &pcap, CANON_ROLE_USER);
        return m ? fc_text_add(r, &m->parts, &m->nparts, &pcap, json_string_value(in)) : GW_ENOMEM;
    }
    if (!json_is_array(in) || json_array_size(in) == 0)
        return fc_bad(err, "input", "", "must be a string or a non-empty array of items");
    enum last last = L_NONE;
    int leading = 1;
    size_t i;
    json_t *it;
    json_array_foreach(in, i, it)
    {
        char p[64];
        snprintf(p, sizeof(p), "input[%zu]", i);
        if (!json_is_object(it))
            return fc_bad(err, p, "", "must be an object");
        const char *type = gw_json_str(it, "type");
        json_t *tj = fc_get(it, "type");
        if (tj && !type)
            return fc_bad(err, p, ".type", "must be a string");
        if (!type || strcmp(type, "message") == 0) {
            static const char *const k[] = {"type", "role", "content", "id", "status", NULL};
            if (fc_only(it, k, p, err))
                return GW_EINVAL;
            const char *role = gw_json_str(it, "role");
            json_t *c = fc_get(it, "content");
            char cp[80];
            snprintf(cp, sizeof(cp), "%s.content", p);
            if (!role)
                return fc_bad(err, p, ".role", "is required");
            if (!c)
                return fc_bad(err, cp, "", "is required");
            int rc;
            if (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0) {
                if (leading) {
                    rc = parse_content(r, c, cp, MR_SYSTEM, &r->system, &r->nsystem, scap, err);
                } else {
                    struct canon_message *m = turn(r, &mcap, &pcap, CANON_ROLE_SYSTEM);
                    if (!m)
                        return GW_ENOMEM;
                    rc = parse_content(r, c, cp, MR_SYSTEM, &m->parts, &m->nparts, &pcap, err);
                    if (rc == GW_OK && m->nparts == 0)
                        return fc_bad(err, cp, "", "must not be empty");
                    last = L_OTHER;
                }
                if (rc)
                    return rc;
                continue;
            }
            leading = 0;
            if (strcmp(role, "user") == 0) {
                struct canon_message *m = turn(r, &mcap, &pcap, CANON_ROLE_USER);
                if (!m)
                    return GW_ENOMEM;
                if ((rc = parse_content(r, c, cp, MR_USER, &m->parts, &m->nparts, &pcap, err)))
                    return rc;
                if (m->nparts == 0)
                    return fc_bad(err, cp, "", "must not be empty");
                last = L_OTHER;
            } else if (strcmp(role, "assistant") == 0) {
                struct canon_message *m =
                    merge(r, &mcap, &pcap, &last, L_ASSISTANT, CANON_ROLE_ASSISTANT);
                if (!m)
                    return GW_ENOMEM;
                if ((rc = parse_content(r, c, cp, MR_ASSISTANT, &m->parts, &m->nparts, &pcap, err)))
                    return rc;
            } else {
                canon_err_set(err, 400, p, "invalid_request",
                              "'%s.role' must be user, assistant, system or developer", p);
                return GW_EINVAL;
            }
            continue;
        }
        leading = 0;
        if (strcmp(type, "function_call") == 0 || strcmp(type, "reasoning") == 0) {
            struct canon_message *m =
                merge(r, &mcap, &pcap, &last, L_ASSISTANT, CANON_ROLE_ASSISTANT);
            if (!m)
                return GW_ENOMEM;
            if (strcmp(type, "reasoning") == 0) {
                int rc = parse_reasoning(r, it, p, m, &pcap, err);
                if (rc)
                    return rc;
                continue;
            }
            static const char *const k[] = {"type", "call_id", "name", "arguments",
                                            "id",   "status",  NULL};
            if (fc_only(it, k, p, err))
                return GW_EINVAL;
            const char *id = gw_json_str(it, "call_id");
            const char *name = gw_json_str(it, "name");
            const char *args = gw_json_str(it, "arguments");
            if (!id)
                return fc_bad(err, p, ".call_id", "is required");
            if (!name)
                return fc_bad(err, p, ".name", "is required");
            if (!args)
                return fc_bad(err, p, ".arguments", "must be a string");
            char ap[200];
            snprintf(ap, sizeof(ap), "%s.arguments", p);
            int rc = fc_args_check(r, args, ap, err);
            if (rc == GW_EINVAL)
                return fc_bad(err, p, ".arguments", "must be a JSON object in a string");
            if (rc)
                return rc;
            rc = fc_call_add(r, m, &pcap, id, name, args);
            if (rc)
                return rc;
        } else if (strcmp(type, "function_call_output") == 0) {
            struct canon_message *m = merge(r, &mcap, &pcap, &last, L_RESULTS, CANON_ROLE_USER);
            if (!m)
                return GW_ENOMEM;
            struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, &pcap);
            if (!pt)
                return GW_ENOMEM;
            int rc = parse_call_output(r, it, p, pt, err);
            if (rc)
                return rc;
        } else if (strcmp(type, "item_reference") == 0) {
            return fc_unsupported(err, p, "unsupported_parameter", STATELESS);
        } else {
            canon_err_set(err, 400, p, "unsupported_parameter",
                          "'%s.type' '%s' is not supported: only message, function_call, "
                          "function_call_output and reasoning items can be sent through the "
                          "gateway",
                          p, type);
            return GW_EINVAL;
        }
    }
    for (size_t j = 0; j < r->nmessages; j++)
        if (r->messages[j].nparts == 0)
            return fc_bad(err, "input", "",
                          "has an assistant turn with no content (an empty message and no "
                          "function_call)");
    if (r->nmessages == 0)
        return fc_bad(err, "input", "", "must hold at least one item that is not a system message");
    return GW_OK;
}

/* One tools[i]: a flat {type: "function", name, ...}. */
static int parse_tool(struct canon_req *r, size_t i, const json_t *t, const char *p,
                      struct canon_tool *tl, struct canon_err *err)
{
    if (!json_is_object(t))
        return fc_bad(err, p, "", "must be an object");
    const char *type = gw_json_str(t, "type");
    if (!type || strcmp(type, "function") != 0) {
        char tp[80];
        snprintf(tp, sizeof(tp), "%s.type", p);
        canon_err_set(err, 400, tp, "unsupported_parameter",
                      "'%s' is '%s': only \"function\" tools are supported (hosted tools "
                      "such as web_search or file_search run on OpenAI's servers, which the "
                      "gateway does not stand in for)",
                      tp, type ? type : "(missing)");
        return GW_EINVAL;
    }
    static const char *const k[] = {"type", "name", "description", "parameters", "strict", NULL};
    if (fc_only(t, k, p, err))
        return GW_EINVAL;
    if (fc_tool_head(r, i, t, p, tl, err))
        return GW_EINVAL;
    json_t *params = fc_get(t, "parameters");
    char np[96];
    snprintf(np, sizeof(np), "%s.parameters", p);
    if (params && fc_tool_schema(params, np, err))
        return GW_EINVAL;
    tl->parameters = params;
    tl->strict = -1;
    return fc_member_bool(t, "strict", p, &tl->strict, err);
}

static int parse_tool_choice(struct canon_req *r, const json_t *tc, struct canon_err *err)
{
    if (fc_tool_choice_word(json_string_value(tc), &r->tool_choice))
        return fc_tool_choice_check(r, err);
    if (!json_is_object(tc))
        return fc_bad(err, "tool_choice", "",
                      "must be \"auto\", \"none\", \"required\" or "
                      "{\"type\":\"function\",\"name\":...}");
    const char *type = gw_json_str(tc, "type");
    if (!type || strcmp(type, "function") != 0)
        return fc_unsupported(err, "tool_choice.type", "unsupported_parameter",
                              "only {\"type\":\"function\",\"name\":...} is supported");
    static const char *const k[] = {"type", "name", NULL};
    if (fc_only(tc, k, "tool_choice", err))
        return GW_EINVAL;
    r->tool_choice = CANON_TC_NAMED;
    r->tool_choice_name = gw_json_str(tc, "name");
    if (!r->tool_choice_name)
        return fc_bad(err, "tool_choice", ".name", "is required");
    if (!fc_tool_known(r, r->tool_choice_name))
        return fc_bad(err, "tool_choice", ".name", "names a function that is not in tools");
    return fc_tool_choice_check(r, err);
}

static int parse_text(struct canon_req *r, const json_t *text, struct canon_err *err)
{
    if (!json_is_object(text))
        return fc_bad(err, "text", "", "must be an object");
    static const char *const k[] = {"format", NULL};
    if (fc_only(text, k, "text", err))
        return GW_EINVAL;
    json_t *f = fc_get(text, "format");
    if (!f)
        return GW_OK;
    const char *type = gw_json_str(f, "type");
    if (!type)
        return fc_bad(err, "text.format", ".type", "is required");
    if (strcmp(type, "text") == 0 || strcmp(type, "json_object") == 0) {
        static const char *const fk[] = {"type", NULL};
        if (fc_only(f, fk, "text.format", err))
            return GW_EINVAL;
        r->format = type[0] == 't' ? CANON_FMT_TEXT : CANON_FMT_JSON_OBJECT;
        return GW_OK;
    }
    if (strcmp(type, "json_schema") != 0)
        return fc_bad(err, "text.format", ".type", "must be text, json_object or json_schema");
    static const char *const fk[] = {"type", "name", "schema", "strict", NULL};
    if (fc_only(f, fk, "text.format", err))
        return GW_EINVAL;
    json_t *schema = fc_get(f, "schema");
    if (!json_is_object(schema))
        return fc_bad(err, "text.format", ".schema", "must be an object");
    if (!(r->format_name = gw_json_str(f, "name")))
        return fc_bad(err, "text.format", ".name", "is required");
    r->format_strict = -1;
    if (fc_member_bool(f, "strict", "text.format", &r->format_strict, err))
        return GW_EINVAL;
    r->format = CANON_FMT_JSON_SCHEMA;
    r->format_schema = schema;
    return GW_OK;
}

static int parse_reasoning_opts(struct canon_req *r, const json_t *rs, struct canon_err *err)
{
    if (!json_is_object(rs))
        return fc_bad(err, "reasoning", "", "must be an object");
    static const char *const k[] = {"effort", "summary", NULL};
    if (fc_only(rs, k, "reasoning", err))
        return GW_EINVAL;
    json_t *e = fc_get(rs, "effort");
    if (e && fc_effort(r, json_string_value(e), "reasoning.effort", err))
        return GW_EINVAL;
    json_t *s = fc_get(rs, "summary");
    if (s && !(json_is_string(s) && strcmp(json_string_value(s), "auto") == 0))
        return fc_unsupported(err, "reasoning.summary", "unsupported_parameter",
                              "only \"auto\" is supported: the gateway streams the reasoning text "
                              "the provider gives and cannot choose its detail");
    return GW_OK;
}

int fc_responses_parse(struct canon_req *r, struct canon_err *err)
{
    const json_t *b = r->body;
    r->field_names = field_names;
    static const char *const state_keys[] = {"previous_response_id", "conversation", "prompt",
                                             NULL};
    for (const char *const *k = state_keys; *k; k++)
        if (fc_get(b, *k))
            return fc_unsupported(err, *k, "unsupported_parameter", STATELESS);
    json_t *store = fc_get(b, "store");
    if (store && !json_is_false(store))
        return json_is_true(store)
                   ? fc_unsupported(err, "store", "unsupported_parameter", STATELESS)
                   : fc_bad(err, "store", "", "must be a boolean");
    json_t *bg = fc_get(b, "background");
    if (bg && !json_is_false(bg))
        return json_is_true(bg)
                   ? fc_unsupported(err, "background", "unsupported_parameter",
                                    "background responses are kept on the server to be "
                                    "polled, and the gateway is stateless")
                   : fc_bad(err, "background", "", "must be a boolean");
    json_t *inc = fc_get(b, "include");
    if (inc) {
        if (!json_is_array(inc))
            return fc_bad(err, "include", "", "must be an array");
        size_t i;
        json_t *v;
        json_array_foreach(inc, i, v)
        {
            /* Reasoning signatures are always returned as encrypted_content. */
            if (json_is_string(v) &&
                strcmp(json_string_value(v), "reasoning.encrypted_content") == 0)
                continue;
            if (fc_responses_include_logprobs(r, v))
                continue;
            char p[32];
            snprintf(p, sizeof(p), "include[%zu]", i);
            return fc_unsupported(err, p, "unsupported_parameter",
                                  "only \"reasoning.encrypted_content\" can be included (the other "
                                  "values are outputs of hosted tools or stored state the gateway "
                                  "does not have)");
        }
    }
    json_t *tr = fc_get(b, "truncation");
    if (tr && !(json_is_string(tr) && strcmp(json_string_value(tr), "disabled") == 0))
        return fc_unsupported(err, "truncation", "unsupported_parameter",
                              "only \"disabled\" is supported: the gateway does not drop input to "
                              "fit the context window");
    if (fc_only(b, top_keys, "", err))
        return GW_EINVAL;
    if (fc_string(b, "model", 1, &r->model, err) || fc_boolean(b, "stream", &r->stream, err))
        return GW_EINVAL;
    size_t scap = 0;
    const char *instructions = NULL;
    if (fc_string(b, "instructions", 0, &instructions, err))
        return GW_EINVAL;
    if (instructions && fc_text_add(r, &r->system, &r->nsystem, &scap, instructions))
        return GW_ENOMEM;
    json_t *in = fc_get(b, "input");
    if (!in)
        return fc_bad(err, "input", "", "is required");
    int rc = parse_input(r, in, &scap, err);
    if (rc)
        return rc;
    if ((rc = fc_tools(r, b, parse_tool, parse_tool_choice, err)))
        return rc;
    if (fc_boolean(b, "parallel_tool_calls", &r->parallel_tool_calls, err) ||
        fc_number(b, "temperature", 0, 2, &r->temperature, &r->has_temperature, err) ||
        fc_number(b, "top_p", 0, 1, &r->top_p, &r->has_top_p, err) ||
        fc_integer(b, "max_output_tokens", 1, 1LL << 31, &r->max_tokens, &r->has_max_tokens, err))
        return GW_EINVAL;
    json_t *text = fc_get(b, "text");
    if (text && (rc = parse_text(r, text, err)))
        return rc;
    json_t *rs = fc_get(b, "reasoning");
    if (rs && (rc = parse_reasoning_opts(r, rs, err)))
        return rc;
    if (fc_string(b, "user", 0, &r->user, err) ||
        fc_string(b, "safety_identifier", 0, &r->safety_identifier, err))
        return GW_EINVAL;
    return fc_responses_tier_logprobs(r, b, err);
}
