/*
 * The OpenAI Responses facade: POST /v1/responses, stateless.
 *
 * Accepted: model, input (a string, or an array of items: messages with
 * role user/assistant/system/developer and content as a string or parts
 * input_text, input_image (user), output_text and refusal (assistant);
 * function_call; function_call_output; reasoning), instructions, tools
 * (flat {type:"function", name, description, parameters, strict}),
 * tool_choice, parallel_tool_calls, temperature, top_p, max_output_tokens,
 * stream, text.format (text, json_object, json_schema), reasoning.effort and
 * reasoning.summary "auto", user, safety_identifier (the end-user id, like
 * user), truncation "disabled", store false, background false, and include
 * ["reasoning.encrypted_content"].
 *
 * The gateway stores nothing, so everything that needs server-side state is
 * refused with a message saying so: store true, previous_response_id,
 * conversation, prompt, background true, item_reference items and other
 * include values. Other tool types (web_search, file_search, ...), file
 * inputs and anything else unknown are refused with a 400 naming the field:
 * nothing the client asked for is dropped.
 *
 * Consecutive assistant-side items (assistant messages, function_call and
 * reasoning items) become one canonical assistant message, consecutive
 * function_call_output items one user message of tool results: that is how
 * a turn's output, echoed back as input, reads in every other format.
 *
 * Reasoning. A REASONING event stream becomes a "reasoning" output item
 * whose text is streamed as a summary part (response.reasoning_summary_*
 * events): every Responses SDK version that streams understands those,
 * while the newer reasoning_text events are not known to older ones. A
 * block signature (Anthropic's, or OpenAI's own encrypted reasoning) rides
 * in the item's encrypted_content, so a client that echoes its output back
 * as input returns the reasoning with it; an input reasoning item becomes a
 * THINKING part (its reasoning_text content, else its summary texts joined
 * by blank lines, with encrypted_content as the signature) or, when it has
 * only encrypted_content, a REDACTED_THINKING part.
 *
 * Streams: response.created, response.in_progress, then per output item
 * response.output_item.added ... response.output_item.done with the
 * content_part / output_text / reasoning_summary / function_call_arguments
 * events between, and response.completed (response.incomplete when the
 * output limit or the content filter ended it). Every frame is
 * "event: <type>" plus data carrying the same type and a sequence_number
 * from 0. An error after the answer started ends the stream with
 * response.failed, whose response has status "failed" and error {code,
 * message}; this is the event the official SDKs fold into the response
 * snapshot (stream.finalResponse() resolves with that failed response).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_facade.h"
#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

/* Ceiling on the text of one output item kept for its done events. */
#define MAX_ITEM_TEXT (32u << 20)
/* Echoed sampling settings read as the client wrote them (0.3, not
 * 0.29999999999999999). */
#define DUMP_FLAGS (JSON_COMPACT | JSON_REAL_PRECISION(15))

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
};

static const char STATELESS[] =
    "the gateway is stateless: it stores no responses or conversations, so send the whole "
    "conversation in input (with store false or absent)";

/* ------------------------------------------------------------------ parse */

/* The role of a message item. */
enum mrole { MR_USER, MR_ASSISTANT, MR_SYSTEM };

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

static int parse(struct canon_req *r, struct canon_err *err)
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
    const char *sid = NULL;
    if (fc_string(b, "user", 0, &r->user, err) || fc_string(b, "safety_identifier", 0, &sid, err))
        return GW_EINVAL;
    if (sid && r->user && strcmp(sid, r->user) != 0)
        return fc_bad(err, "safety_identifier", "",
                      "and 'user' both name the end user and must agree when both are sent");
    if (!r->user)
        r->user = sid;
    return GW_OK;
}

/* ------------------------------------------------------ the response object */

/* A JSON string of n bytes; invalid UTF-8 becomes U+FFFD rather than
 * failing (jansson refuses it). NULL only when out of memory. */
static json_t *jstr(const char *s, size_t n)
{
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j)
        return j;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    if (gw_json_escape(&b, s, n) == GW_OK)
        j = json_loadb(b.data, b.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    gw_buf_free(&b);
    return j;
}

static json_t *num_or_null(int has, double v)
{
    return has ? json_real(v) : json_null();
}

static json_t *copy_or(const json_t *body, const char *key, json_t *def)
{
    json_t *v = fc_get(body, key);
    if (v) {
        json_decref(def);
        return json_deep_copy(v);
    }
    return def;
}

/* The request settings every response object repeats (what the API echoes
 * back: the client's own values, null where it sent none). */
static json_t *echo_of(const struct canon_req *r)
{
    const json_t *b = r->body;
    json_t *e = json_object();
    if (!e)
        return NULL;
    json_t *rs = json_pack("{s:o,s:o}", "effort",
                           r->reasoning_effort ? json_string(r->reasoning_effort)
                           : r->reasoning_off  ? json_string("none")
                                               : json_null(),
                           "summary", copy_or(fc_get(b, "reasoning"), "summary", json_null()));
    json_t *tx = fc_get(fc_get(b, "text"), "format")
                     ? json_pack("{s:O}", "format", fc_get(fc_get(b, "text"), "format"))
                     : json_pack("{s:{s:s}}", "format", "type", "text");
    json_object_set_new(e, "instructions", copy_or(b, "instructions", json_null()));
    json_object_set_new(e, "max_output_tokens",
                        r->has_max_tokens ? json_integer(r->max_tokens) : json_null());
    json_object_set_new(e, "parallel_tool_calls", json_boolean(r->parallel_tool_calls != 0));
    json_object_set_new(e, "previous_response_id", json_null());
    json_object_set_new(e, "reasoning", rs);
    json_object_set_new(e, "store", json_false());
    json_object_set_new(e, "temperature", num_or_null(r->has_temperature, r->temperature));
    json_object_set_new(e, "text", tx);
    json_object_set_new(e, "tool_choice", copy_or(b, "tool_choice", json_string("auto")));
    json_object_set_new(e, "tools", copy_or(b, "tools", json_array()));
    json_object_set_new(e, "top_p", num_or_null(r->has_top_p, r->top_p));
    json_object_set_new(e, "truncation", json_string("disabled"));
    json_object_set_new(e, "user", r->user ? json_string(r->user) : json_null());
    if (fc_get(b, "safety_identifier"))
        json_object_set_new(e, "safety_identifier", copy_or(b, "safety_identifier", NULL));
    json_object_set_new(e, "metadata", json_object());
    return e;
}

static json_t *usage_of(const struct canon_usage *u)
{
    if (!u->have)
        return json_null();
    int64_t in = canon_usage_prompt(u);
    return json_pack("{s:I,s:{s:I,s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)in,
                     "input_tokens_details", "cached_tokens", (json_int_t)u->cache_read,
                     "cache_write_tokens", (json_int_t)(u->cache_write_5m + u->cache_write_1h),
                     "output_tokens", (json_int_t)u->output, "output_tokens_details",
                     "reasoning_tokens", (json_int_t)u->reasoning, "total_tokens",
                     (json_int_t)(in + u->output));
}

/* The response object. output is stolen; usage NULL renders null. */
static json_t *response_of(const char *id, long long created, const char *model, const json_t *echo,
                           const char *status, json_t *output, const struct canon_usage *u,
                           const char *incomplete, const char *err_code, const char *err_msg)
{
    json_t *o = json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object", "response", "created_at",
                          (json_int_t)created, "status", status);
    if (!o || !output) {
        json_decref(o);
        json_decref(output);
        return NULL;
    }
    json_object_set_new(o, "error",
                        err_code ? json_pack("{s:s,s:o}", "code", err_code, "message",
                                             jstr(err_msg, strlen(err_msg)))
                                 : json_null());
    json_object_set_new(o, "incomplete_details",
                        incomplete ? json_pack("{s:s}", "reason", incomplete) : json_null());
    json_object_set_new(o, "model", json_string(model ? model : ""));
    json_object_set_new(o, "output", output);
    json_object_set_new(o, "usage", u ? usage_of(u) : json_null());
    json_object_update_missing(o, (json_t *)echo);
    return o;
}

/* Why an answer stopped short, as incomplete_details.reason; NULL when it
 * completed. */
static const char *incomplete_reason(enum canon_stop s)
{
    if (s == CANON_STOP_MAX_TOKENS)
        return "max_output_tokens";
    if (s == CANON_STOP_CONTENT_FILTER)
        return "content_filter";
    return NULL;
}

/* ------------------------------------------------------------ output items */

static json_t *message_item(const char *id, const char *status, const char *text, size_t len,
                            int with_content)
{
    json_t *content = json_array();
    if (with_content && content)
        json_array_append_new(content,
                              json_pack("{s:s,s:[],s:[],s:o}", "type", "output_text", "annotations",
                                        "logprobs", "text", jstr(text, len)));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "id", id, "type", "message", "status", status, "role",
                     "assistant", "content", content);
}

static json_t *reasoning_item(const char *id, const char *text, size_t len, int with_summary,
                              const char *sig)
{
    json_t *summary = json_array();
    if (with_summary && summary)
        json_array_append_new(
            summary, json_pack("{s:s,s:o}", "type", "summary_text", "text", jstr(text, len)));
    json_t *it = json_pack("{s:s,s:s,s:o}", "id", id, "type", "reasoning", "summary", summary);
    if (it && sig)
        json_object_set_new(it, "encrypted_content", json_string(sig));
    return it;
}

static json_t *call_item(const char *id, const char *status, const char *call_id, const char *name,
                         const char *args, size_t len)
{
    return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "id", id, "type", "function_call", "status",
                     status, "arguments", jstr(args, len), "call_id", call_id, "name", name);
}

/* ----------------------------------------------------------------- stream */

enum item_kind { IT_NONE, IT_MESSAGE, IT_REASONING, IT_CALL };

struct rs_stream {
    char *resp_id;
    char *model;
    char *rid; /* request id, for item ids */
    long long created;
    json_t *echo;
    long long seq;
    int started;
    json_t *output; /* finished items */
    struct canon_usage usage;
    const struct fc_bill *bill;
    /* the open item */
    enum item_kind kind;
    int oi; /* its output_index */
    char item_id[224];
    struct gw_buf text; /* message text, reasoning text or call arguments */
    int summary_open;   /* reasoning: the summary part was announced */
    char *call_id, *name, *sig;
};

static void clear_item(struct rs_stream *st)
{
    free(st->call_id);
    free(st->name);
    free(st->sig);
    st->call_id = st->name = st->sig = NULL;
    gw_buf_reset(&st->text);
    st->summary_open = 0;
    st->kind = IT_NONE;
}

static void stream_free(void *p)
{
    struct rs_stream *st = p;
    if (!st)
        return;
    clear_item(st);
    gw_buf_free(&st->text);
    free(st->resp_id);
    free(st->rid);
    free(st->model);
    json_decref(st->echo);
    json_decref(st->output);
    free(st);
}

static void *stream_new(const struct canon_req *r, const struct fc_ctx *ctx)
{
    struct rs_stream *st = calloc(1, sizeof(*st));
    if (!st)
        return NULL;
    size_t n = strlen(ctx->request_id) + 8;
    st->resp_id = malloc(n);
    if (st->resp_id)
        snprintf(st->resp_id, n, "resp_%s", ctx->request_id);
    st->rid = strdup(ctx->request_id);
    st->model = strdup(ctx->model ? ctx->model : "");
    st->created = ctx->created;
    st->bill = ctx->bill;
    st->echo = echo_of(r);
    st->output = json_array();
    gw_buf_init(&st->text, MAX_ITEM_TEXT);
    if (!st->resp_id || !st->rid || !st->model || !st->echo || !st->output) {
        stream_free(st);
        return NULL;
    }
    return st;
}

/* One frame: "event: <type>" and the document (whose first member is the
 * type) with the next sequence_number. Releases doc. */
static int emit(struct rs_stream *st, struct gw_buf *out, json_t *doc)
{
    if (!doc)
        return GW_ENOMEM;
    char type[64];
    snprintf(type, sizeof(type), "%s", gw_json_str(doc, "type") ? gw_json_str(doc, "type") : "");
    if (json_object_set_new(doc, "sequence_number", json_integer(st->seq++))) {
        json_decref(doc);
        return GW_ENOMEM;
    }
    return fc_sse_dump(out, type, doc, DUMP_FLAGS);
}

static json_t *stream_response(struct rs_stream *st, const char *status, json_t *output,
                               const char *incomplete, const char *code, const char *msg)
{
    return response_of(st->resp_id, st->created, st->model, st->echo, status, output,
                       st->usage.have ? &st->usage : NULL, incomplete, code, msg);
}

static int start(struct rs_stream *st, struct gw_buf *out)
{
    if (st->started)
        return GW_OK;
    st->started = 1;
    int rc = emit(st, out,
                  json_pack("{s:s,s:o}", "type", "response.created", "response",
                            stream_response(st, "in_progress", json_array(), NULL, NULL, NULL)));
    if (rc == GW_OK)
        rc = emit(st, out,
                  json_pack("{s:s,s:o}", "type", "response.in_progress", "response",
                            stream_response(st, "in_progress", json_array(), NULL, NULL, NULL)));
    return rc;
}

/* The open item as it stands (status for messages and calls). */
static json_t *open_item_json(struct rs_stream *st, const char *status)
{
    switch (st->kind) {
    case IT_MESSAGE:
        return message_item(st->item_id, status, st->text.data, st->text.len, 1);
    case IT_REASONING:
        return reasoning_item(st->item_id, st->text.data, st->text.len, st->summary_open, st->sig);
    case IT_CALL:
        return call_item(st->item_id, status, st->call_id, st->name, st->text.data, st->text.len);
    case IT_NONE:
        break;
    }
    return NULL;
}

static int open_item(struct rs_stream *st, struct gw_buf *out, enum item_kind kind,
                     const char *call_id, const char *name)
{
    static const char *const prefix[] = {"", "msg", "rs", "fc"};
    clear_item(st);
    st->kind = kind;
    st->oi = (int)json_array_size(st->output);
    snprintf(st->item_id, sizeof(st->item_id), "%s_%s_%d", prefix[kind], st->rid, st->oi);
    json_t *item;
    if (kind == IT_CALL) {
        st->call_id = strdup(call_id ? call_id : "");
        st->name = strdup(name ? name : "");
        if (!st->call_id || !st->name)
            return GW_ENOMEM;
        item = call_item(st->item_id, "in_progress", st->call_id, st->name, "", 0);
    } else if (kind == IT_MESSAGE) {
        item = message_item(st->item_id, "in_progress", NULL, 0, 0);
    } else {
        item = reasoning_item(st->item_id, NULL, 0, 0, NULL);
    }
    int rc = emit(st, out,
                  json_pack("{s:s,s:i,s:o}", "type", "response.output_item.added", "output_index",
                            st->oi, "item", item));
    if (rc == GW_OK && kind == IT_MESSAGE)
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:[],s:[],s:s}}", "type",
                            "response.content_part.added", "item_id", st->item_id, "output_index",
                            st->oi, "content_index", 0, "part", "type", "output_text",
                            "annotations", "logprobs", "text", ""));
    return rc;
}

/* Closes the open item: its done events, then it joins the output. */
static int close_item(struct rs_stream *st, struct gw_buf *out, const char *status)
{
    int rc = GW_OK;
    const char *id = st->item_id;
    json_t *text = NULL;
    switch (st->kind) {
    case IT_NONE:
        return GW_OK;
    case IT_MESSAGE:
        text = jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:O,s:[]}", "type", "response.output_text.done",
                            "item_id", id, "output_index", st->oi, "content_index", 0, "text", text,
                            "logprobs"));
        if (rc == GW_OK)
            rc = emit(st, out,
                      json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:[],s:[],s:O}}", "type",
                                "response.content_part.done", "item_id", id, "output_index", st->oi,
                                "content_index", 0, "part", "type", "output_text", "annotations",
                                "logprobs", "text", text));
        break;
    case IT_REASONING:
        if (!st->summary_open)
            break;
        text = jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:i,s:O}", "type", "response.reasoning_summary_text.done",
                            "item_id", id, "output_index", st->oi, "summary_index", 0, "text",
                            text));
        if (rc == GW_OK)
            rc = emit(st, out,
                      json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:O}}", "type",
                                "response.reasoning_summary_part.done", "item_id", id,
                                "output_index", st->oi, "summary_index", 0, "part", "type",
                                "summary_text", "text", text));
        break;
    case IT_CALL:
        text = jstr(st->text.data, st->text.len);
        rc = emit(st, out,
                  json_pack("{s:s,s:s,s:i,s:O,s:s}", "type",
                            "response.function_call_arguments.done", "item_id", id, "output_index",
                            st->oi, "arguments", text, "name", st->name));
        break;
    }
    json_decref(text);
    json_t *item = rc == GW_OK ? open_item_json(st, status) : NULL;
    if (rc == GW_OK)
        rc = item ? emit(st, out,
                         json_pack("{s:s,s:i,s:O}", "type", "response.output_item.done",
                                   "output_index", st->oi, "item", item))
                  : GW_ENOMEM;
    if (rc == GW_OK && json_array_append(st->output, item))
        rc = GW_ENOMEM;
    json_decref(item);
    clear_item(st);
    return rc;
}

/* A delta event for the open item: {type, item_id, output_index, <index
 * member>: 0, delta}. */
static int delta(struct rs_stream *st, struct gw_buf *out, const char *type, const char *index_key,
                 const char *text, size_t len)
{
    json_t *d = jstr(text, len);
    json_t *doc =
        d ? json_pack("{s:s,s:s,s:i}", "type", type, "item_id", st->item_id, "output_index", st->oi)
          : NULL;
    if (doc && index_key)
        json_object_set_new(doc, index_key, json_integer(0));
    if (doc)
        json_object_set(doc, "delta", d);
    if (doc && strcmp(type, "response.output_text.delta") == 0)
        json_object_set_new(doc, "logprobs", json_array());
    json_decref(d);
    int rc = emit(st, out, doc);
    if (rc == GW_OK)
        rc = gw_buf_append(&st->text, text, len);
    return rc;
}

static int stream_event(void *p, const struct canon_event *ev, struct gw_buf *out)
{
    struct rs_stream *st = p;
    int rc = start(st, out);
    if (rc != GW_OK)
        return rc;
    switch (ev->type) {
    case CANON_EV_START:
        return GW_OK;
    case CANON_EV_CHUNK:
        if (st->kind != IT_MESSAGE) {
            if ((rc = close_item(st, out, "completed")) ||
                (rc = open_item(st, out, IT_MESSAGE, NULL, NULL)))
                return rc;
        }
        return delta(st, out, "response.output_text.delta", "content_index", ev->text, ev->len);
    case CANON_EV_REASONING:
        if ((ev->len == 0 && !ev->signature) || ev->redacted)
            return GW_OK; /* redacted data is no summary text */
        /* A signature closes its block: what follows is a new item. */
        if (st->kind != IT_REASONING || st->sig) {
            if ((rc = close_item(st, out, "completed")) ||
                (rc = open_item(st, out, IT_REASONING, NULL, NULL)))
                return rc;
        }
        if (ev->len) {
            if (!st->summary_open) {
                st->summary_open = 1;
                rc = emit(st, out,
                          json_pack("{s:s,s:s,s:i,s:i,s:{s:s,s:s}}", "type",
                                    "response.reasoning_summary_part.added", "item_id", st->item_id,
                                    "output_index", st->oi, "summary_index", 0, "part", "type",
                                    "summary_text", "text", ""));
                if (rc)
                    return rc;
            }
            if ((rc = delta(st, out, "response.reasoning_summary_text.delta", "summary_index",
                            ev->text, ev->len)))
                return rc;
        }
        if (ev->signature) {
            if (!(st->sig = strdup(ev->signature)))
                return GW_ENOMEM;
            return close_item(st, out, "completed");
        }
        return GW_OK;
    case CANON_EV_TOOL_START:
        if ((rc = close_item(st, out, "completed")))
            return rc;
        return open_item(st, out, IT_CALL, ev->id, ev->name);
    case CANON_EV_TOOL_DELTA:
        if (st->kind != IT_CALL)
            return GW_EINVAL;
        return delta(st, out, "response.function_call_arguments.delta", NULL, ev->text, ev->len);
    case CANON_EV_TOOL_END:
        return st->kind == IT_CALL ? close_item(st, out, "completed") : GW_EINVAL;
    case CANON_EV_USAGE:
        st->usage = *ev->usage;
        return GW_OK;
    case CANON_EV_DONE: {
        const char *why = incomplete_reason(ev->stop);
        if ((rc = close_item(st, out, why ? "incomplete" : "completed")))
            return rc;
        json_t *resp = stream_response(st, why ? "incomplete" : "completed",
                                       json_deep_copy(st->output), why, NULL, NULL);
        const char *type = why ? "response.incomplete" : "response.completed";
        json_t *bill = fc_bill_json(st->bill);
        if (resp && bill)
            json_object_set_new(resp, "llmgw", bill);
        else
            json_decref(bill);
        return emit(st, out, json_pack("{s:s,s:o}", "type", type, "response", resp));
    }
    case CANON_EV_ERROR: {
        /* The items so far, the open one cut short. */
        json_t *output = json_deep_copy(st->output);
        json_t *open = open_item_json(st, "incomplete");
        if (output && open)
            json_array_append(output, open);
        json_decref(open);
        json_t *resp = stream_response(st, "failed", output, NULL, canon_failure_name(ev->failure),
                                       ev->message ? ev->message : "the upstream failed");
        return emit(st, out, json_pack("{s:s,s:o}", "type", "response.failed", "response", resp));
    }
    }
    return GW_OK;
}

/* ----------------------------------------------------------------- render */

static int render(const struct canon_req *r, const struct fc_ctx *ctx, const struct canon_acc *acc,
                  struct gw_buf *out)
{
    const char *why = incomplete_reason(acc->stop);
    const char *rid = ctx->request_id;
    json_t *output = json_array();
    json_t *echo = echo_of(r);
    char id[224];
    if (!output || !echo) {
        json_decref(output);
        json_decref(echo);
        return GW_ENOMEM;
    }
    /* One reasoning item per block, each with its own signature (as the
     * stream does); redacted blocks carry no readable text and are not
     * shown. */
    for (size_t i = 0; i < acc->nthinks; i++) {
        const struct canon_acc_think *t = &acc->thinks[i];
        if (t->redacted)
            continue;
        size_t len = t->text ? t->text->len : 0;
        snprintf(id, sizeof(id), "rs_%s_%zu", rid, json_array_size(output));
        json_array_append_new(output,
                              reasoning_item(id, t->text && t->text->data ? t->text->data : "", len,
                                             len > 0, t->signature));
    }
    if (acc->nthinks == 0 && (acc->reasoning || acc->signature)) {
        snprintf(id, sizeof(id), "rs_%s_%zu", rid, json_array_size(output));
        size_t len = acc->reasoning ? acc->reasoning->len : 0;
        json_array_append_new(output, reasoning_item(id, acc->reasoning ? acc->reasoning->data : "",
                                                     len, len > 0, acc->signature));
    }
    if (acc->text && acc->text->len) {
        snprintf(id, sizeof(id), "msg_%s_%zu", rid, json_array_size(output));
        json_array_append_new(output, message_item(id, why ? "incomplete" : "completed",
                                                   acc->text->data, acc->text->len, 1));
    }
    for (size_t i = 0; i < acc->ntools; i++) {
        const struct canon_acc_tool *t = &acc->tools[i];
        snprintf(id, sizeof(id), "fc_%s_%zu", rid, json_array_size(output));
        json_array_append_new(output, call_item(id, "completed", t->id, t->name,
                                                t->args->data ? t->args->data : "", t->args->len));
    }
    char rsid[200];
    snprintf(rsid, sizeof(rsid), "resp_%s", rid);
    json_t *doc =
        response_of(rsid, ctx->created, ctx->model, echo, why ? "incomplete" : "completed", output,
                    &acc->usage, why, NULL, NULL);
    json_decref(echo);
    return fc_json_append(out, doc, DUMP_FLAGS);
}

const struct dp_facade fc_responses = {
    .name = "openai.responses",
    .parse = parse,
    .stream_new = stream_new,
    .stream_event = stream_event,
    .stream_free = stream_free,
    .render = render,
    .error_body = fc_openai_error_body,
};
