/*
 * fc_util: request-parsing helpers shared by the facades. Every check names
 * the field in the client's own terms ("messages[3].content[1].image_url")
 * and every refusal is a 400 with code "invalid_request" or
 * "unsupported_parameter".
 */
#ifndef FC_UTIL_H
#define FC_UTIL_H

#include <jansson.h>

#include "canon.h"
#include "dp_facade.h"

/* The member, or NULL when absent or JSON null (null means "not given"). */
json_t *fc_get(const json_t *o, const char *key);

/* A 400 invalid_request about path plus a member suffix ("" or ".role"):
 * param "<path><suffix>", message "'<path><suffix>' <rule>". GW_EINVAL. */
int fc_bad(struct canon_err *err, const char *path, const char *suffix, const char *rule);
/* A 400 with code (unsupported_parameter, unsupported_content) about path:
 * "'<path>': <why>". GW_EINVAL. */
int fc_unsupported(struct canon_err *err, const char *path, const char *code, const char *why);

/* Typed optional members of an object at path, refused with fc_bad
 * ("'<path>.<key>' must be a string"): absent or null leaves *out as it
 * was, except that a string's *out becomes NULL. */
int fc_member_string(const json_t *o, const char *key, const char *path, const char **out,
                     struct canon_err *err);
int fc_member_bool(const json_t *o, const char *key, const char *path, int *out,
                   struct canon_err *err);

/* Every member of o must be in the NULL-terminated allowed list; the first
 * that is not (and is not null) is refused as an unsupported parameter
 * (path prefixes the name, "" at top level). */
/* After a refusal was written to err: under the lenient parse, when it is
 * about something unknown (code "unsupported_*", not a bad value), it moves
 * to r->opaque (the first one is kept), err is cleared and 0 returned, so
 * the parse goes on; else GW_EINVAL. */
int fc_opaque(struct canon_req *r, struct canon_err *err);
int fc_only(const json_t *o, const char *const *allowed, const char *path, struct canon_err *err);

/* Typed optional members: absent/null → 0 and *has = 0; wrong type or out of
 * [lo, hi] → GW_EINVAL with err set. */
int fc_number(const json_t *o, const char *key, double lo, double hi, double *out, int *has,
              struct canon_err *err);
int fc_integer(const json_t *o, const char *key, long long lo, long long hi, long long *out,
               int *has, struct canon_err *err);
int fc_boolean(const json_t *o, const char *key, int *out, struct canon_err *err);
/* A string member; required → error when absent. */
int fc_string(const json_t *o, const char *key, int required, const char **out,
              struct canon_err *err);

/* Stop sequences: a string or an array of up to 16 non-empty strings. */
int fc_stop(struct canon_req *r, const json_t *v, const char *name, struct canon_err *err);

/* The body's "tools", when given: an array of at most 128 definitions into
 * r->tools and r->ntools, each read by one (path "tools[<i>]", tl zeroed) in
 * the client's format; then its "tool_choice", when given, read by choice. */
typedef int (*fc_tool_fn)(struct canon_req *r, size_t i, const json_t *t, const char *path,
                          struct canon_tool *tl, struct canon_err *err);
typedef int (*fc_choice_fn)(struct canon_req *r, const json_t *tc, struct canon_err *err);
int fc_tools(struct canon_req *r, const json_t *body, fc_tool_fn one, fc_choice_fn choice,
             struct canon_err *err);
/* A new tool's name at path np: valid (fc_tool_name) and not the name of one
 * of the i tools before it. */
int fc_tool_new_name(const struct canon_req *r, size_t i, const char *name, const char *np,
                     struct canon_err *err);
/* The name (fc_tool_new_name) and description (a string, or absent) of a
 * flat tool object t at path. */
int fc_tool_head(const struct canon_req *r, size_t i, const json_t *t, const char *path,
                 struct canon_tool *tl, struct canon_err *err);
/* 1 when name is one of r's tools. */
int fc_tool_known(const struct canon_req *r, const char *name);
/* OpenAI's tool choice words "auto", "none" and "required": 1 and *tc set,
 * else 0. */
int fc_tool_choice_word(const char *s, enum canon_tool_choice *tc);
/* A choice that forces a call (required, named) needs tools: else a 400
 * about "tool_choice". */
int fc_tool_choice_check(const struct canon_req *r, struct canon_err *err);

/* A reasoning effort named by field name: "none" turns reasoning off;
 * minimal, low, medium and high are taken; anything else (NULL: not a
 * string) is refused. */
int fc_effort(struct canon_req *r, const char *effort, const char *name, struct canon_err *err);

/* A tool call's arguments, which travel as text: GW_OK when they are a
 * JSON object ("" counts as {}), which every other format needs; GW_EINVAL
 * when not (err untouched: the caller names its field); GW_ELIMIT, with a
 * 413 in err naming path, when they pass what the request's arguments may
 * hold in all (gw_json_bound, counted in r->args_values): a client cannot
 * hide a huge tree in a string, where the body's bound does not look. */
int fc_args_check(struct canon_req *r, const char *args, const char *path, struct canon_err *err);

/* A tool's JSON schema: an object whose "type", when present, is "object",
 * with "properties" an object and "required" an array of strings. */
int fc_tool_schema(const json_t *schema, const char *path, struct canon_err *err);
/* A function name: 1-64 of [A-Za-z0-9_-]. */
int fc_tool_name(const char *name, const char *path, struct canon_err *err);

/* Parts arrays grow through these (pool memory). */
struct canon_part *fc_parts_add(struct canon_req *r, struct canon_part **parts, size_t *n,
                                size_t *cap);
struct canon_message *fc_message_add(struct canon_req *r, size_t *cap);
/* A content block at path p into a TEXT part: its text is member key (a
 * string), its members are only keys. */
int fc_text_part(const json_t *o, const char *p, const char *const *keys, const char *key,
                 struct canon_part *pt, struct canon_err *err);
/* Appends a TEXT part; GW_OK or GW_ENOMEM. */
int fc_text_add(struct canon_req *r, struct canon_part **parts, size_t *n, size_t *cap,
                const char *text);
/* Appends a TOOL_CALL part to m (arguments "" become "{}"). */
int fc_call_add(struct canon_req *r, struct canon_message *m, size_t *cap, const char *id,
                const char *name, const char *args);

/* "data:" URL or http(s) URL into an IMAGE part; anything else refused. */
int fc_image_url(struct canon_req *r, struct canon_part *p, const char *url, const char *path,
                 struct canon_err *err);

/* Renders usage in OpenAI's shape (prompt/completion/total + details). */
int fc_openai_usage(struct gw_buf *out, const struct canon_usage *u)
    __attribute__((warn_unused_result));

/* The bill (struct fc_bill) as {"ledger_id":..., "cost_picodollars": N or
 * null, "currency": ...}: the "llmgw" member of a stream's final usage
 * event. NULL when there is nothing to say. */
json_t *fc_bill_json(const struct fc_bill *b);
/* The same object as text appended to out, without building a document
 * (the relayed stream's end); nothing when there is nothing to say. */
int fc_bill_text(const struct fc_bill *b, struct gw_buf *out) __attribute__((warn_unused_result));

/* Appends "event: <name>\ndata: <json>\n\n" (name NULL: no event line). */
int fc_sse(struct gw_buf *out, const char *event, const char *json, size_t len);
/* Dumps doc (json_dumps flags) as one SSE frame and releases it; NULL doc:
 * GW_ENOMEM. */
int fc_sse_dump(struct gw_buf *out, const char *event, json_t *doc, size_t flags);
/* The same, compact. */
int fc_sse_json(struct gw_buf *out, const char *event, json_t *doc);
/* Appends doc dumped with flags (a whole answer) and releases it; NULL doc:
 * GW_ENOMEM. */
int fc_json_append(struct gw_buf *out, json_t *doc, size_t flags);

/* An error answer in OpenAI's shape ({"error":{message, type, param,
 * code}}), for the OpenAI facades' error_body. */
char *fc_openai_error_body(int status, const char *type, const char *param, const char *code,
                           const char *message, size_t *len);

#endif
