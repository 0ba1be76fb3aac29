#include "drv_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_json.h"

#define MAX_EMBED_VALUES (16u << 20)

/* ------------------------------------------------------------------ build */

int drv_auth_headers(struct drv_request *out, const struct drv_target *t, const char *prefix)
{
    return drv_auth_headers_as(out, t, prefix, "application/json");
}

int drv_auth_headers_as(struct drv_request *out, const struct drv_target *t, const char *prefix,
                        const char *content_type)
{
    if (drv_common_headers_as(out, t, content_type) != GW_OK)
        return GW_ENOMEM;
    if (t->provider->credential &&
        drv_header(out, "%s%s", prefix, t->provider->credential) != GW_OK)
        return GW_ENOMEM;
    return GW_OK;
}

int drv_json_request(struct drv_request *out, const struct drv_target *t, char *url, json_t *doc,
                     const char *auth)
{
    out->url = url;
    if (!url) {
        json_decref(doc);
        return GW_ENOMEM;
    }
    if (drv_body_json(out, doc) != GW_OK)
        return GW_ENOMEM;
    return drv_auth_headers(out, t, auth);
}

const char *drv_effort_of(const struct canon_req *r)
{
    if (r->reasoning_effort)
        return r->reasoning_effort;
    if (r->reasoning_budget <= 0)
        return NULL;
    if (r->reasoning_budget < 4096)
        return "low";
    if (r->reasoning_budget < 16384)
        return "medium";
    return "high";
}

long long drv_effort_budget(const char *effort, const struct drv_budgets *b)
{
    if (!effort)
        return 0;
    if (strcmp(effort, "minimal") == 0)
        return b->minimal;
    if (strcmp(effort, "low") == 0)
        return b->low;
    if (strcmp(effort, "medium") == 0)
        return b->medium;
    if (strcmp(effort, "high") == 0)
        return b->high;
    return b->other;
}

int drv_refuse_message(const struct canon_req *r, size_t mi, const char *what,
                       struct canon_err *err)
{
    canon_err_set(err, 400, canon_field_name(r, CANON_F_MESSAGES), "unsupported_content",
                  "message %zu: %s", mi, what);
    return GW_EINVAL;
}

int drv_refuse_parallel_off(const struct canon_req *r, const char *who, const char *why,
                            struct canon_err *err)
{
    const char *f = canon_field_name(r, CANON_F_PARALLEL_TOOL_CALLS);
    canon_err_set(err, 400, f, "unsupported_parameter",
                  "%s asks for one tool call per turn, which %s cannot enforce: %s", f, who, why);
    return GW_EINVAL;
}

const char *drv_result_name(const struct canon_req *r, size_t mi, const struct canon_part *p,
                            const char *why, struct canon_err *err)
{
    for (size_t i = mi; p->id && i-- > 0;) {
        const struct canon_message *m = &r->messages[i];
        if (m->role != CANON_ROLE_ASSISTANT)
            continue;
        for (size_t j = m->nparts; j-- > 0;) {
            const struct canon_part *c = &m->parts[j];
            if (c->type == CANON_PART_TOOL_CALL && c->id && strcmp(c->id, p->id) == 0)
                return c->name;
        }
    }
    char what[256];
    snprintf(what, sizeof(what),
             "the tool result for call '%.64s' answers no earlier tool call (%s)",
             p->id ? p->id : "", why);
    drv_refuse_message(r, mi, what, err);
    return NULL;
}

json_t *drv_call_args(const struct canon_part *p, size_t flags)
{
    json_t *a =
        p->arguments && *p->arguments ? json_loads(p->arguments, flags, NULL) : json_object();
    if (!json_is_object(a)) {
        json_decref(a);
        return NULL;
    }
    return a;
}

json_t *drv_image_url(const struct canon_part *p)
{
    if (p->url)
        return json_string(p->url);
    size_t n = strlen(p->media_type) + strlen(p->data) + 16;
    char *s = malloc(n);
    if (!s)
        return NULL;
    snprintf(s, n, "data:%s;base64,%s", p->media_type, p->data);
    json_t *url = json_string(s);
    free(s);
    return url;
}

int drv_result_text(const struct canon_part *p, const char *prefix, struct gw_buf *b)
{
    gw_buf_init(b, 0);
    int rc = prefix ? gw_buf_appends(b, prefix) : GW_OK;
    for (size_t k = 0; rc == GW_OK && k < p->ncontent; k++) {
        if (p->content[k].type != CANON_PART_TEXT)
            return GW_EINVAL;
        rc = gw_buf_appends(b, p->content[k].text);
    }
    return rc == GW_OK ? GW_OK : GW_ENOMEM;
}

json_t *drv_content(const struct canon_req *r, const struct canon_part *parts, size_t n, int images,
                    const char *where, const struct drv_content_fmt *fmt, struct canon_err *err)
{
    if (n == 1 && parts[0].type == CANON_PART_TEXT)
        return json_string(parts[0].text);
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) {
        const struct canon_part *p = &parts[i];
        if (p->type == CANON_PART_TEXT)
            json_array_append_new(a,
                                  json_pack("{s:s,s:s}", "type", fmt->text_type, "text", p->text));
        else if (p->type == CANON_PART_IMAGE && images)
            json_array_append_new(a, fmt->image(p));
        else if ((p->type == CANON_PART_DOCUMENT || p->type == CANON_PART_AUDIO) && images &&
                 fmt->media) {
            json_t *m = fmt->media(r, where, p, err);
            if (!m || json_array_append_new(a, m)) {
                json_decref(a);
                return NULL;
            }
        } else {
            json_decref(a);
            fmt->refuse(r, where, images, err);
            return NULL;
        }
    }
    return a;
}

int drv_user_content(const struct canon_req *r, const struct canon_message *m, size_t mi,
                     const struct drv_content_fmt *fmt, json_t **out, struct canon_err *err)
{
    *out = NULL;
    size_t n = 0;
    for (size_t j = 0; j < m->nparts; j++)
        if (m->parts[j].type != CANON_PART_TOOL_RESULT)
            n++;
    if (n == 0)
        return GW_OK;
    struct canon_part *keep = calloc(n, sizeof(*keep));
    if (!keep)
        return GW_ENOMEM;
    size_t k = 0;
    for (size_t j = 0; j < m->nparts; j++)
        if (m->parts[j].type != CANON_PART_TOOL_RESULT)
            keep[k++] = m->parts[j];
    char where[64];
    snprintf(where, sizeof(where), "message %zu", mi);
    *out = drv_content(r, keep, n, 1, where, fmt, err);
    free(keep);
    if (!*out)
        return err->status ? GW_EINVAL : GW_ENOMEM;
    return GW_OK;
}

json_t *drv_stop_array(const struct canon_req *r)
{
    json_t *st = json_array();
    for (size_t i = 0; st && i < r->nstop; i++)
        if (json_array_append_new(st, json_string(r->stop[i]))) {
            json_decref(st);
            return NULL;
        }
    return st;
}

/* The request's value of a sampling field; *has 0 when it has none. */
static json_t *param_value(const struct canon_req *r, enum canon_field f, int *has)
{
    switch (f) {
    case CANON_F_TEMPERATURE:
        return (*has = r->has_temperature) ? json_real(r->temperature) : NULL;
    case CANON_F_TOP_P:
        return (*has = r->has_top_p) ? json_real(r->top_p) : NULL;
    case CANON_F_TOP_K:
        return (*has = r->has_top_k) ? json_integer(r->top_k) : NULL;
    case CANON_F_MAX_TOKENS:
        return (*has = r->has_max_tokens) ? json_integer(r->max_tokens) : NULL;
    case CANON_F_SEED:
        return (*has = r->has_seed) ? json_integer(r->seed) : NULL;
    case CANON_F_PRESENCE_PENALTY:
        return (*has = r->has_presence_penalty) ? json_real(r->presence_penalty) : NULL;
    case CANON_F_FREQUENCY_PENALTY:
        return (*has = r->has_frequency_penalty) ? json_real(r->frequency_penalty) : NULL;
    case CANON_F_STOP:
        return (*has = r->nstop > 0) ? drv_stop_array(r) : NULL;
    default:
        *has = 0;
        return NULL;
    }
}

int drv_params(json_t *o, const struct canon_req *r, const struct drv_param *ps, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        int has;
        json_t *v = param_value(r, ps[i].field, &has);
        if (has)
            rc |= json_object_set_new(o, ps[i].key, v);
    }
    return rc;
}

json_t *drv_tool_decl(json_t *o, const struct canon_tool *tl, const char *key,
                      enum drv_no_schema none)
{
    if (!o)
        return NULL;
    if (tl->description)
        json_object_set_new(o, "description", json_string(tl->description));
    if (tl->parameters)
        json_object_set(o, key, tl->parameters);
    else if (none == DRV_SCHEMA_NULL)
        json_object_set_new(o, key, json_null());
    else if (none == DRV_SCHEMA_EMPTY)
        json_object_set_new(o, key, json_pack("{s:s,s:{}}", "type", "object", "properties"));
    return o;
}

const char *drv_tool_choice_word(enum canon_tool_choice tc)
{
    switch (tc) {
    case CANON_TC_AUTO:
        return "auto";
    case CANON_TC_NONE:
        return "none";
    case CANON_TC_REQUIRED:
        return "required";
    case CANON_TC_NAMED:
    case CANON_TC_UNSET:
        break;
    }
    return NULL;
}

/* ---------------------------------------------------------------- parsers */

void *drv_parser_new(size_t size, const struct dp_driver *drv, int stream)
{
    struct drv_parser *p = calloc(1, size);
    if (!p)
        return NULL;
    p->drv = drv;
    p->stream = stream;
    gw_buf_init(&p->body, DRV_MAX_BODY);
    gw_sse_init(&p->sse, DRV_MAX_EVENT);
    return p;
}

void drv_parser_free(struct drv_parser *p)
{
    gw_buf_free(&p->body);
    gw_sse_free(&p->sse);
    free(p);
}

int drv_fail(struct drv_parser *p, const struct canon_sink *s, enum canon_failure f,
             const char *msg)
{
    p->terminal = 1;
    canon_emit_error(s, f, 0, msg);
    return 1;
}

int drv_start_tier(struct drv_parser *p, const char *id, const char *name, const char *tier,
                   const struct canon_sink *s)
{
    if (p->started)
        return 0;
    p->started = 1;
    struct canon_event ev = {.type = CANON_EV_START, .id = id, .name = name, .service_tier = tier};
    return canon_emit(s, &ev);
}

int drv_start(struct drv_parser *p, const char *id, const char *name, const struct canon_sink *s)
{
    return drv_start_tier(p, id, name, NULL, s);
}

/* A piece of a whole body. */
static int keep_body(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s)
{
    if (gw_buf_append(&p->body, buf, len) != GW_OK)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, "the provider's answer is too large");
    return 0;
}

int drv_parse(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s,
              drv_stream_fn stream_fn)
{
    if (p->terminal)
        return 1;
    return p->stream ? stream_fn(p, buf, len, s) : keep_body(p, buf, len, s);
}

int drv_finish(struct drv_parser *p, const struct canon_sink *s, drv_whole_fn whole_fn)
{
    if (p->terminal)
        return 1;
    if (p->stream)
        return 0;
    json_t *doc =
        json_loadb(p->body.data ? p->body.data : "", p->body.len, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(doc))
        whole_fn(p, doc, s);
    else
        drv_fail(p, s, p->body.len ? CANON_FAIL_PROVIDER_5XX : CANON_FAIL_EMPTY_OUTPUT,
                 p->body.len ? "the provider's answer is not JSON"
                             : "the provider's answer is empty");
    json_decref(doc);
    return 1;
}

int drv_parse_sse(struct drv_parser *p, const char *buf, size_t len, const struct canon_sink *s,
                  drv_sse_raw_fn raw_fn, drv_sse_doc_fn doc_fn)
{
    if (p->terminal)
        return 1;
    if (!p->stream)
        return keep_body(p, buf, len, s);
    struct gw_sse_event ev;
    int rc;
    while ((rc = gw_sse_next(&p->sse, &buf, &len, &ev)) == GW_OK) {
        enum drv_sse_step step = raw_fn ? raw_fn(p, &ev, s) : DRV_SSE_JSON;
        if (step == DRV_SSE_STOP)
            return 1;
        if (step == DRV_SSE_JSON) {
            json_t *doc = json_loadb(ev.data, ev.data_len, JSON_REJECT_DUPLICATES, NULL);
            if (!json_is_object(doc)) {
                json_decref(doc);
                return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX,
                                "the provider sent a malformed stream event");
            }
            int stop = doc_fn(p, &ev, doc, s);
            json_decref(doc);
            if (stop)
                return 1;
        }
        /* The event was read and found sound: a pass-through relays it. */
        if (s->raw && s->raw(s->arg, &ev))
            return 1;
    }
    if (rc != GW_EAGAIN)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX,
                        "a stream event from the provider is too large");
    return 0;
}

enum drv_sse_step drv_sse_skip_empty(struct drv_parser *p, const struct gw_sse_event *ev,
                                     const struct canon_sink *s)
{
    (void)p;
    (void)s;
    return ev->data_len == 0 ? DRV_SSE_SKIP : DRV_SSE_JSON;
}

int drv_emit_text(const struct canon_sink *s, enum canon_ev_type type, const char *text)
{
    if (!text || !*text)
        return 0;
    struct canon_event ev = {.type = type, .text = text, .len = strlen(text)};
    return canon_emit(s, &ev);
}

int drv_emit_signature(const struct canon_sink *s, const char *sig)
{
    if (!sig || !*sig)
        return 0;
    struct canon_event ev = {.type = CANON_EV_REASONING, .text = "", .len = 0, .signature = sig};
    return canon_emit(s, &ev);
}

int drv_emit_redacted(const struct canon_sink *s, const char *data)
{
    struct canon_event ev = {
        .type = CANON_EV_REASONING, .text = data, .len = strlen(data), .redacted = 1};
    return canon_emit(s, &ev);
}

/* ------------------------------------------------------------- embeddings */

int drv_embed_vectors(const json_t *items, const char *key, struct canon_embed_resp *out, char *msg,
                      size_t msglen)
{
    if (!json_is_array(items) || json_array_size(items) == 0) {
        snprintf(msg, msglen, "the provider's answer has no embeddings");
        return GW_EINVAL;
    }
    size_t nvec = json_array_size(items), dim = 0;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        if (!json_is_array(v) || json_array_size(v) == 0 || (i > 0 && json_array_size(v) != dim)) {
            snprintf(msg, msglen, "the provider's embedding %zu is not a vector of the same size",
                     i);
            return GW_EINVAL;
        }
        dim = json_array_size(v);
        if (dim > MAX_EMBED_VALUES / nvec) {
            snprintf(msg, msglen, "the provider's embeddings are too large");
            return GW_EINVAL;
        }
    }
    double *vals = malloc(nvec * dim * sizeof(double));
    if (!vals)
        return GW_ENOMEM;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        for (size_t j = 0; j < dim; j++) {
            json_t *x = json_array_get(v, j);
            if (!json_is_number(x)) {
                free(vals);
                snprintf(msg, msglen, "the provider's embedding %zu has a non-number", i);
                return GW_EINVAL;
            }
            vals[i * dim + j] = json_number_value(x);
        }
    }
    out->values = vals;
    out->nvec = nvec;
    out->dim = dim;
    return GW_OK;
}

/* ------------------------------------------------------- the pass-through */

int drv_edit_body(struct drv_request *out, const char *src, size_t n, struct drv_edit *e, size_t ne)
{
    /* Stable insertion sort by offset: a handful of edits. */
    for (size_t i = 1; i < ne; i++)
        for (size_t j = i; j > 0 && e[j - 1].at > e[j].at; j--) {
            struct drv_edit t = e[j];
            e[j] = e[j - 1];
            e[j - 1] = t;
        }
    size_t total = n;
    for (size_t i = 0; i < ne; i++)
        total += e[i].ins_len - e[i].cut;
    char *b = malloc(total + 1);
    if (!b)
        return GW_ENOMEM;
    size_t from = 0, o = 0;
    for (size_t i = 0; i < ne; i++) {
        memcpy(b + o, src + from, e[i].at - from);
        o += e[i].at - from;
        memcpy(b + o, e[i].ins, e[i].ins_len);
        o += e[i].ins_len;
        from = e[i].at + e[i].cut;
    }
    memcpy(b + o, src + from, n - from);
    o += n - from;
    b[o] = '\0';
    out->body = b;
    out->body_len = o;
    return GW_OK;
}

/* A relayed request's edit that replaces a member's value (or appends the
 * member when the body has none): the bytes live in buf. */
int drv_edit_member(const char *body, size_t len, const char *key, struct gw_buf *buf,
                    struct drv_edit *e, size_t *ne, struct canon_err *err)
{
    const char *v;
    size_t vn;
    int has = gw_json_span_member(body, len, key, &v, &vn);
    if (has < 0) {
        canon_err_set(err, 400, key, "invalid_request",
                      "'%s' could not be located in the request body (a key spelled with "
                      "escapes?)",
                      key);
        return GW_EINVAL;
    }
    if (has == 1) {
        e[(*ne)++] = (struct drv_edit){(size_t)(v - body), vn, buf->data, buf->len};
        return GW_OK;
    }
    size_t at;
    int comma;
    if (drv_edit_append_at(body, len, &at, &comma) != GW_OK) {
        canon_err_set(err, 400, NULL, "invalid_json", "the request body must be a JSON object");
        return GW_EINVAL;
    }
    /* The member's head goes before the value already in buf. */
    struct gw_buf head;
    gw_buf_init(&head, 0);
    /* The key may come from a provider option (max_tokens_field): escaped. */
    int rc = comma ? gw_buf_append(&head, ",", 1) : GW_OK;
    if (rc == GW_OK)
        rc = gw_json_escape(&head, key, strlen(key));
    if (rc == GW_OK)
        rc = gw_buf_append(&head, ":", 1);
    if (rc == GW_OK)
        rc = gw_buf_append(&head, buf->data, buf->len);
    if (rc != GW_OK) {
        gw_buf_free(&head);
        return GW_ENOMEM;
    }
    gw_buf_free(buf);
    *buf = head;
    e[(*ne)++] = (struct drv_edit){at, 0, buf->data, buf->len};
    return GW_OK;
}

static int json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int drv_edit_append_at(const char *src, size_t n, size_t *at, int *comma)
{
    size_t a = 0, z = n;
    while (a < z && json_space(src[a]))
        a++;
    while (z > a && json_space(src[z - 1]))
        z--;
    if (z - a < 2 || src[a] != '{' || src[z - 1] != '}')
        return GW_EINVAL;
    size_t i = a + 1;
    while (i < z - 1 && json_space(src[i]))
        i++;
    *at = z - 1;
    *comma = i < z - 1;
    return GW_OK;
}

int drv_relay_frame(struct gw_buf *out, const struct gw_sse_event *ev)
{
    int rc = GW_OK;
    if (ev->event_len) {
        rc = gw_buf_append(out, "event: ", 7);
        if (rc == GW_OK)
            rc = gw_buf_append(out, ev->event, ev->event_len);
        if (rc == GW_OK)
            rc = gw_buf_append(out, "\n", 1);
    }
    /* A payload the provider split over several data: lines was joined
     * with LF: it goes out as as many lines again. */
    const char *d = ev->data, *end = ev->data + ev->data_len;
    for (;;) {
        const char *nl = memchr(d, '\n', (size_t)(end - d));
        const char *z = nl ? nl : end;
        if (rc == GW_OK)
            rc = gw_buf_append(out, "data: ", 6);
        if (rc == GW_OK)
            rc = gw_buf_append(out, d, (size_t)(z - d));
        if (rc == GW_OK)
            rc = gw_buf_append(out, "\n", 1);
        if (!nl)
            break;
        d = nl + 1;
    }
    if (rc == GW_OK)
        rc = gw_buf_append(out, "\n", 1);
    return rc;
}

int drv_relay_billed(struct gw_buf *out, const char *event, const struct gw_buf *held,
                     const char *bill_json)
{
    size_t z = held->len;
    while (z > 0 && held->data[z - 1] != '}')
        z--;
    int rc = event ? gw_buf_printf(out, "event: %s\n", event) : GW_OK;
    if (rc == GW_OK)
        rc = gw_buf_append(out, "data: ", 6);
    if (rc == GW_OK && z > 0 && bill_json) {
        rc = gw_buf_append(out, held->data, z - 1);
        if (rc == GW_OK)
            rc = gw_buf_printf(out, ",\"llmgw\":%s}", bill_json);
    } else if (rc == GW_OK) {
        rc = gw_buf_append(out, held->data, held->len);
    }
    if (rc == GW_OK)
        rc = gw_buf_append(out, "\n\n", 2);
    return rc;
}
