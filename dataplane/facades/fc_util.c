#include "fc_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_pool.h"

json_t *fc_get(const json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    return json_is_null(v) ? NULL : v;
}

int fc_bad(struct canon_err *err, const char *path, const char *suffix, const char *rule)
{
    char p[200];
    snprintf(p, sizeof(p), "%s%s", path, suffix);
    canon_err_set(err, 400, p, "invalid_request", "'%s' %s", p, rule);
    return GW_EINVAL;
}

int fc_unsupported(struct canon_err *err, const char *path, const char *code, const char *why)
{
    canon_err_set(err, 400, path, code, "'%s': %s", path, why);
    return GW_EINVAL;
}

int fc_member_string(const json_t *o, const char *key, const char *path, const char **out,
                     struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    char suffix[64];
    snprintf(suffix, sizeof(suffix), ".%s", key);
    if (v && !json_is_string(v))
        return fc_bad(err, path, suffix, "must be a string");
    *out = json_string_value(v);
    return GW_OK;
}

int fc_member_bool(const json_t *o, const char *key, const char *path, int *out,
                   struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    char suffix[64];
    snprintf(suffix, sizeof(suffix), ".%s", key);
    if (v && !json_is_boolean(v))
        return fc_bad(err, path, suffix, "must be a boolean");
    if (v)
        *out = json_is_true(v);
    return GW_OK;
}

static const char *joined(char *buf, size_t n, const char *path, const char *key)
{
    if (path && *path)
        snprintf(buf, n, "%s.%s", path, key);
    else
        snprintf(buf, n, "%s", key);
    return buf;
}

int fc_opaque(struct canon_req *r, struct canon_err *err)
{
    /* What the gateway does not know (a field, a content or tool type) is
     * the provider's to judge; a known field with a bad value is still the
     * gateway's 400, whatever the target. */
    if (!r->lenient || err->status != 400 || strncmp(err->code, "unsupported", 11) != 0)
        return GW_EINVAL;
    if (!r->opaque.status)
        r->opaque = *err;
    memset(err, 0, sizeof(*err));
    return GW_OK;
}

int fc_only(const json_t *o, const char *const *allowed, const char *path, struct canon_err *err)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        if (json_is_null(v))
            continue;
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = strcmp(*a, k) == 0;
        if (!ok) {
            char name[128];
            joined(name, sizeof(name), path, k);
            canon_err_set(err, 400, name, "unsupported_parameter",
                          "'%s' is not supported by this gateway; it is refused rather than "
                          "silently dropped",
                          name);
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

int fc_number(const json_t *o, const char *key, double lo, double hi, double *out, int *has,
              struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    *has = 0;
    if (!v)
        return GW_OK;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < lo ||
        json_number_value(v) > hi) {
        canon_err_set(err, 400, key, "invalid_request", "'%s' must be a number from %g to %g", key,
                      lo, hi);
        return GW_EINVAL;
    }
    *out = json_number_value(v);
    *has = 1;
    return GW_OK;
}

int fc_integer(const json_t *o, const char *key, long long lo, long long hi, long long *out,
               int *has, struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    *has = 0;
    if (!v)
        return GW_OK;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        canon_err_set(err, 400, key, "invalid_request", "'%s' must be an integer from %lld to %lld",
                      key, lo, hi);
        return GW_EINVAL;
    }
    *out = json_integer_value(v);
    *has = 1;
    return GW_OK;
}

int fc_boolean(const json_t *o, const char *key, int *out, struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    if (!v)
        return GW_OK;
    if (!json_is_boolean(v)) {
        canon_err_set(err, 400, key, "invalid_request", "'%s' must be a boolean", key);
        return GW_EINVAL;
    }
    *out = json_is_true(v);
    return GW_OK;
}

int fc_string(const json_t *o, const char *key, int required, const char **out,
              struct canon_err *err)
{
    json_t *v = fc_get(o, key);
    if (!v) {
        if (required) {
            canon_err_set(err, 400, key, "invalid_request", "'%s' is required", key);
            return GW_EINVAL;
        }
        return GW_OK;
    }
    if (!json_is_string(v)) {
        canon_err_set(err, 400, key, "invalid_request", "'%s' must be a string", key);
        return GW_EINVAL;
    }
    *out = json_string_value(v);
    return GW_OK;
}

int fc_stop(struct canon_req *r, const json_t *v, const char *name, struct canon_err *err)
{
    if (!v || json_is_null(v))
        return GW_OK;
    size_t n = json_is_string(v) ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if ((!json_is_string(v) && !json_is_array(v)) || n > 16) {
        canon_err_set(err, 400, name, "invalid_request",
                      "'%s' must be a string or an array of up to 16 strings", name);
        return GW_EINVAL;
    }
    r->stop = gw_pool_calloc(r->pool, (n ? n : 1) * sizeof(char *));
    if (!r->stop)
        return GW_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
        if (!json_is_string(s) || json_string_length(s) == 0) {
            canon_err_set(err, 400, name, "invalid_request", "'%s' must hold non-empty strings",
                          name);
            return GW_EINVAL;
        }
        r->stop[r->nstop++] = json_string_value(s);
    }
    return GW_OK;
}

static int tools_array(struct canon_req *r, const json_t *tools, fc_tool_fn one,
                       struct canon_err *err)
{
    if (!json_is_array(tools))
        return fc_bad(err, "tools", "", "must be an array");
    size_t n = json_array_size(tools);
    if (n > 128)
        return fc_bad(err, "tools", "", "may hold at most 128 tools");
    r->tools = gw_pool_calloc(r->pool, (n ? n : 1) * sizeof(*r->tools));
    if (!r->tools)
        return GW_ENOMEM;
    size_t i, k = 0;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        char p[64];
        snprintf(p, sizeof(p), "tools[%zu]", i);
        int rc = one(r, k, t, p, &r->tools[k], err);
        if (rc == GW_EINVAL && fc_opaque(r, err) == GW_OK) {
            /* A server tool, or one newer than the gateway: left to a
             * provider of the client's own format (canon_req.opaque). */
            memset(&r->tools[k], 0, sizeof(r->tools[k]));
            continue;
        }
        if (rc)
            return rc;
        k++;
    }
    r->ntools = k;
    return GW_OK;
}

int fc_tools(struct canon_req *r, const json_t *body, fc_tool_fn one, fc_choice_fn choice,
             struct canon_err *err)
{
    json_t *tools = fc_get(body, "tools");
    int rc = tools ? tools_array(r, tools, one, err) : GW_OK;
    json_t *tc = fc_get(body, "tool_choice");
    if (rc == GW_OK && tc && (rc = choice(r, tc, err)) == GW_EINVAL && fc_opaque(r, err) == GW_OK) {
        /* It names a tool only the provider knows: none in the canonical
         * request, not the half that choice read before it refused. */
        r->tool_choice = CANON_TC_UNSET;
        r->tool_choice_name = NULL;
        rc = GW_OK;
    }
    return rc;
}

int fc_tool_new_name(const struct canon_req *r, size_t i, const char *name, const char *np,
                     struct canon_err *err)
{
    if (fc_tool_name(name, np, err))
        return GW_EINVAL;
    for (size_t k = 0; k < i; k++)
        if (strcmp(r->tools[k].name, name) == 0)
            return fc_bad(err, np, "", "must be unique among tool names");
    return GW_OK;
}

int fc_tool_head(const struct canon_req *r, size_t i, const json_t *t, const char *path,
                 struct canon_tool *tl, struct canon_err *err)
{
    char np[96];
    snprintf(np, sizeof(np), "%s.name", path);
    tl->name = gw_json_str(t, "name");
    if (fc_tool_new_name(r, i, tl->name, np, err) ||
        fc_member_string(t, "description", path, &tl->description, err))
        return GW_EINVAL;
    return GW_OK;
}

int fc_tool_known(const struct canon_req *r, const char *name)
{
    for (size_t i = 0; i < r->ntools; i++)
        if (strcmp(r->tools[i].name, name) == 0)
            return 1;
    return 0;
}

int fc_tool_choice_word(const char *s, enum canon_tool_choice *tc)
{
    if (s && strcmp(s, "auto") == 0)
        *tc = CANON_TC_AUTO;
    else if (s && strcmp(s, "none") == 0)
        *tc = CANON_TC_NONE;
    else if (s && strcmp(s, "required") == 0)
        *tc = CANON_TC_REQUIRED;
    else
        return 0;
    return 1;
}

int fc_tool_choice_check(const struct canon_req *r, struct canon_err *err)
{
    if ((r->tool_choice == CANON_TC_REQUIRED || r->tool_choice == CANON_TC_NAMED) && r->ntools == 0)
        return fc_bad(err, "tool_choice", "", "requires tools");
    return GW_OK;
}

int fc_effort(struct canon_req *r, const char *effort, const char *name, struct canon_err *err)
{
    if (effort && strcmp(effort, "none") == 0)
        r->reasoning_off = 1;
    else if (!effort || (strcmp(effort, "minimal") && strcmp(effort, "low") &&
                         strcmp(effort, "medium") && strcmp(effort, "high")))
        return fc_bad(err, name, "", "must be none, minimal, low, medium or high");
    else
        r->reasoning_effort = effort;
    return GW_OK;
}

int fc_args_check(struct canon_req *r, const char *args, const char *path, struct canon_err *err)
{
    char msg[256];
    if (gw_json_bound(args, strlen(args), "the tool call arguments (all calls together)",
                      &r->args_values, NULL, msg, sizeof(msg)) == GW_ELIMIT) {
        canon_err_set(err, 413, path, "request_too_complex", "%s", msg);
        return GW_ELIMIT;
    }
    json_t *a = *args ? json_loads(args, 0, NULL) : json_object();
    int obj = json_is_object(a);
    json_decref(a);
    return obj ? GW_OK : GW_EINVAL;
}

int fc_tool_schema(const json_t *schema, const char *path, struct canon_err *err)
{
    if (!json_is_object(schema)) {
        canon_err_set(err, 400, path, "invalid_tool_schema", "'%s' must be a JSON schema object",
                      path);
        return GW_EINVAL;
    }
    json_t *type = json_object_get(schema, "type");
    if (type && !(json_is_string(type) && strcmp(json_string_value(type), "object") == 0)) {
        canon_err_set(err, 400, path, "invalid_tool_schema",
                      "'%s.type' must be \"object\": tool arguments are a JSON object", path);
        return GW_EINVAL;
    }
    json_t *props = json_object_get(schema, "properties");
    if (props && !json_is_object(props)) {
        canon_err_set(err, 400, path, "invalid_tool_schema", "'%s.properties' must be an object",
                      path);
        return GW_EINVAL;
    }
    json_t *req = json_object_get(schema, "required");
    if (req) {
        size_t i;
        json_t *x;
        int ok = json_is_array(req);
        json_array_foreach(req, i, x) ok &= json_is_string(x);
        if (!ok) {
            canon_err_set(err, 400, path, "invalid_tool_schema",
                          "'%s.required' must be an array of strings", path);
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

int fc_tool_name(const char *name, const char *path, struct canon_err *err)
{
    size_t n = name ? strlen(name) : 0;
    int ok = n >= 1 && n <= 64;
    for (size_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-';
    }
    if (!ok) {
        canon_err_set(err, 400, path, "invalid_request",
                      "'%s' must be 1 to 64 letters, digits, '_' or '-'", path);
        return GW_EINVAL;
    }
    return GW_OK;
}

struct canon_part *fc_parts_add(struct canon_req *r, struct canon_part **parts, size_t *n,
                                size_t *cap)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 4;
        struct canon_part *np = gw_pool_calloc(r->pool, nc * sizeof(*np));
        if (!np)
            return NULL;
        if (*n)
            memcpy(np, *parts, *n * sizeof(*np));
        *parts = np;
        *cap = nc;
    }
    struct canon_part *p = &(*parts)[(*n)++];
    memset(p, 0, sizeof(*p));
    return p;
}

struct canon_message *fc_message_add(struct canon_req *r, size_t *cap)
{
    if (r->nmessages == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        struct canon_message *nm = gw_pool_calloc(r->pool, nc * sizeof(*nm));
        if (!nm)
            return NULL;
        if (r->nmessages)
            memcpy(nm, r->messages, r->nmessages * sizeof(*nm));
        r->messages = nm;
        *cap = nc;
    }
    struct canon_message *m = &r->messages[r->nmessages++];
    memset(m, 0, sizeof(*m));
    return m;
}

int fc_text_part(const json_t *o, const char *p, const char *const *keys, const char *key,
                 struct canon_part *pt, struct canon_err *err)
{
    if (fc_only(o, keys, p, err))
        return GW_EINVAL;
    pt->type = CANON_PART_TEXT;
    if ((pt->text = gw_json_str(o, key)))
        return GW_OK;
    char suffix[16];
    snprintf(suffix, sizeof(suffix), ".%s", key);
    return fc_bad(err, p, suffix, "must be a string");
}

int fc_text_add(struct canon_req *r, struct canon_part **parts, size_t *n, size_t *cap,
                const char *text)
{
    struct canon_part *pt = fc_parts_add(r, parts, n, cap);
    if (!pt)
        return GW_ENOMEM;
    pt->type = CANON_PART_TEXT;
    pt->text = text;
    return GW_OK;
}

int fc_call_add(struct canon_req *r, struct canon_message *m, size_t *cap, const char *id,
                const char *name, const char *args)
{
    struct canon_part *pt = fc_parts_add(r, &m->parts, &m->nparts, cap);
    if (!pt)
        return GW_ENOMEM;
    pt->type = CANON_PART_TOOL_CALL;
    pt->id = id;
    pt->name = name;
    pt->arguments = *args ? args : "{}";
    return GW_OK;
}

int fc_image_url(struct canon_req *r, struct canon_part *p, const char *url, const char *path,
                 struct canon_err *err)
{
    p->type = CANON_PART_IMAGE;
    if (strncmp(url, "https://", 8) == 0 || strncmp(url, "http://", 7) == 0) {
        p->url = url;
        return GW_OK;
    }
    int rc = canon_parse_data_url(r->pool, url, &p->media_type, &p->data);
    if (rc == GW_EINVAL)
        canon_err_set(err, 400, path, "invalid_image",
                      "'%s' must be an http(s) URL or a base64 data: URL", path);
    return rc;
}

int fc_openai_usage(struct gw_buf *out, const struct canon_usage *u)
{
    long long prompt = (long long)canon_usage_prompt(u);
    return gw_buf_printf(out,
                         "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                         "\"prompt_tokens_details\":{\"cached_tokens\":%lld},"
                         "\"completion_tokens_details\":{\"reasoning_tokens\":%lld}}",
                         prompt, (long long)u->output, prompt + (long long)u->output,
                         (long long)u->cache_read, (long long)u->reasoning);
}

json_t *fc_bill_json(const struct fc_bill *b)
{
    if (!b || !b->set)
        return NULL;
    struct gw_buf t;
    gw_buf_init(&t, 0);
    json_t *o = fc_bill_text(b, &t) == GW_OK ? json_loadb(t.data, t.len, 0, NULL) : NULL;
    gw_buf_free(&t);
    return o;
}

int fc_bill_text(const struct fc_bill *b, struct gw_buf *out)
{
    if (!b || !b->set)
        return GW_OK;
    const char *cur = b->currency ? b->currency : "USD";
    int rc = gw_buf_appends(out, "{\"cost_picodollars\":");
    if (rc == GW_OK)
        rc = b->has_cost ? gw_buf_append_int(out, (long long)b->cost_picodollars)
                         : gw_buf_appends(out, "null");
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ",\"currency\":");
    if (rc == GW_OK)
        rc = gw_json_escape(out, cur, strlen(cur));
    if (rc == GW_OK && b->ledger_id)
        rc = gw_buf_appends(out, ",\"ledger_id\":");
    if (rc == GW_OK && b->ledger_id)
        rc = gw_json_escape(out, b->ledger_id, strlen(b->ledger_id));
    if (rc == GW_OK && b->cache_hit)
        rc = gw_buf_appends(out, ",\"cache\":\"hit\",\"saved_picodollars\":");
    if (rc == GW_OK && b->cache_hit)
        rc = b->has_saved ? gw_buf_append_int(out, b->saved_picodollars)
                          : gw_buf_appends(out, "null");
    return rc == GW_OK ? gw_buf_appends(out, "}") : rc;
}

int fc_sse(struct gw_buf *out, const char *event, const char *json, size_t len)
{
    int rc = GW_OK;
    if (event)
        rc = gw_buf_printf(out, "event: %s\n", event);
    if (rc == GW_OK)
        rc = gw_buf_append(out, "data: ", 6);
    if (rc == GW_OK)
        rc = gw_buf_append(out, json, len);
    if (rc == GW_OK)
        rc = gw_buf_append(out, "\n\n", 2);
    return rc;
}

/* doc dumped with flags, released; NULL when doc is or out of memory. */
static char *dump(json_t *doc, size_t flags)
{
    char *s = doc ? json_dumps(doc, flags) : NULL;
    json_decref(doc);
    return s;
}

int fc_sse_dump(struct gw_buf *out, const char *event, json_t *doc, size_t flags)
{
    char *s = dump(doc, flags);
    if (!s)
        return GW_ENOMEM;
    int rc = fc_sse(out, event, s, strlen(s));
    free(s);
    return rc;
}

int fc_sse_json(struct gw_buf *out, const char *event, json_t *doc)
{
    return fc_sse_dump(out, event, doc, JSON_COMPACT);
}

int fc_json_append(struct gw_buf *out, json_t *doc, size_t flags)
{
    char *s = dump(doc, flags);
    if (!s)
        return GW_ENOMEM;
    int rc = gw_buf_appends(out, s);
    free(s);
    return rc;
}

char *fc_openai_error_body(int status, const char *type, const char *param, const char *code,
                           const char *message, size_t *len)
{
    (void)status;
    return gw_json_error_body(message, type, param, code, len);
}
