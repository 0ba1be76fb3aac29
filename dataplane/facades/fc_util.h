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

/* The member, or NULL when absent or JSON null (null means "not given"). */
json_t *fc_get(const json_t *o, const char *key);

/* Every member of o must be in the NULL-terminated allowed list; the first
 * that is not (and is not null) is refused as an unsupported parameter
 * (path prefixes the name, "" at top level). */
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

/* A tool's JSON schema: an object whose "type", when present, is "object",
 * with "properties" an object and "required" an array of strings. */
int fc_tool_schema(const json_t *schema, const char *path, struct canon_err *err);
/* A function name: 1-64 of [A-Za-z0-9_-]. */
int fc_tool_name(const char *name, const char *path, struct canon_err *err);

/* Parts arrays grow through these (pool memory). */
struct canon_part *fc_parts_add(struct canon_req *r, struct canon_part **parts, size_t *n,
                                size_t *cap);
struct canon_message *fc_message_add(struct canon_req *r, size_t *cap);

/* "data:" URL or http(s) URL into an IMAGE part; anything else refused. */
int fc_image_url(struct canon_req *r, struct canon_part *p, const char *url, const char *path,
                 struct canon_err *err);

/* Renders usage in OpenAI's shape (prompt/completion/total + details). */
json_t *fc_openai_usage(const struct canon_usage *u);

/* Appends "event: <name>\ndata: <json>\n\n" (name NULL: no event line). */
int fc_sse(struct gw_buf *out, const char *event, const char *json, size_t len);
/* Dumps doc compactly as one SSE frame and releases it. */
int fc_sse_json(struct gw_buf *out, const char *event, json_t *doc);

#endif
