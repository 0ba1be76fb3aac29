/*
 * libFuzzer target for every facade's request parser
 * (dataplane/facades/: OpenAI chat, Anthropic messages, OpenAI Responses,
 * OpenAI embeddings). The first byte chooses the facade; the rest is the
 * client's body, loaded as the exchange loads it (gw_json_bound, then
 * jansson refusing duplicate keys; only an object within the bounds goes
 * on). Checked, from dp_facade.h, fc_util.h and canon.h:
 *  - the answer is GW_OK or a refusal: GW_EINVAL with a 400, GW_ELIMIT with
 *    a 413 (the tool calls' arguments past their bound), each with a
 *    non-empty code and message and a field path (param) that is empty
 *    only for an unknown member named "", all NUL-terminated in their
 *    arrays; never a 5xx for what the client sent;
 *  - what an accepted request holds (struct canon_req's rules): a model
 *    (a string; an empty one is the router's to refuse);
 *    messages with parts of known types whose strings are set (text for
 *    TEXT and THINKING, a URL or a media type with data for IMAGE, id, name
 *    and arguments, one JSON object, for TOOL_CALL, an id and TEXT or IMAGE
 *    content for TOOL_RESULT, one source for DOCUMENT, data and a media
 *    type for AUDIO, neither inside a tool result); system parts are TEXT; tools with valid,
 *    distinct names (1-64 of [A-Za-z0-9_-]); a named tool choice naming one
 *    of them and a forcing one having tools; at most 16 non-empty stop
 *    sequences; a JSON-schema format with a schema object; a reasoning
 *    effort of the closed set; the flags within their values;
 *  - the lenient parse (the pass-through's, for the facades a driver
 *    speaks) against the strict one, on the same body: a body the strict
 *    parse takes, the lenient one takes with nothing opaque and reads the
 *    same; a refusal about something unknown (code unsupported_*) is, when
 *    the lenient parse takes the body, its opaque note, word for word; any
 *    other refusal is the lenient parse's too;
 *  - embeddings: inputs set, each a string, dimensions >= 0;
 *  - media (fc_media.h): speech and image generations from the JSON body,
 *    transcriptions, translations and image edits from the raw bytes as a
 *    multipart body (boundary "B"): an accepted request has its selector,
 *    its parts (at most 64, each with a name, its bytes inside the body),
 *    one file for audio, 1 to 16 images for an edit, n from 1 to 10; a
 *    refusal is a 400 or a 413 with a code, a message and a field;
 *  - no leak, no undefined behaviour.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_facade.h"
#include "fc_embed.h"
#include "fc_media.h"
#include "fuzz.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"

static const struct dp_facade *const facades[] = {&fc_openai_chat, &fc_anthropic, &fc_responses};
#define NFACADES (sizeof(facades) / sizeof(facades[0]))

static void must(int rc)
{
    CHECK(rc == GW_OK);
}

static int terminated(const char *s, size_t size)
{
    return memchr(s, '\0', size) != NULL;
}

/* What a refusal must hold. */
static void check_err(int rc, const struct canon_err *e)
{
    CHECK(rc == GW_EINVAL || rc == GW_ELIMIT);
    CHECK(terminated(e->param, sizeof(e->param)) && terminated(e->code, sizeof(e->code)) &&
          terminated(e->message, sizeof(e->message)));
    CHECK(e->status == (rc == GW_ELIMIT ? 413 : 400));
    /* The param names the field; it is empty only when the field is: a
     * member named "" refused as unknown. */
    CHECK(e->code[0] && e->message[0]);
    CHECK(e->param[0] || strncmp(e->code, "unsupported", 11) == 0);
}

static int same_err(const struct canon_err *a, const struct canon_err *b)
{
    return a->status == b->status && strcmp(a->param, b->param) == 0 &&
           strcmp(a->code, b->code) == 0 && strcmp(a->message, b->message) == 0;
}

/* ------------------------------------------------------------------ a request */

static void put(struct gw_buf *o, const char *what, const char *s)
{
    if (s)
        must(gw_buf_printf(o, "%s%zu:%s;", what, strlen(s), s));
    else
        must(gw_buf_printf(o, "%s-;", what));
}

static int tool_name_ok(const char *n)
{
    size_t len = strlen(n);
    if (len < 1 || len > 64)
        return 0;
    return strspn(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") == len;
}

static void render_part(struct gw_buf *o, const struct canon_part *p, int in_result)
{
    must(gw_buf_printf(o, "part %d c%d ", (int)p->type, (int)p->cache));
    switch (p->type) {
    case CANON_PART_TEXT:
    case CANON_PART_THINKING:
    case CANON_PART_REDACTED_THINKING:
        CHECK(p->text != NULL);
        put(o, "text", p->text);
        put(o, "sig", p->signature);
        break;
    case CANON_PART_IMAGE:
        CHECK(p->url || (p->media_type && p->data));
        put(o, "url", p->url);
        put(o, "type", p->media_type);
        put(o, "data", p->data);
        put(o, "detail", p->detail);
        break;
    case CANON_PART_TOOL_CALL: {
        CHECK(!in_result);
        CHECK(p->id && p->name && p->arguments);
        json_t *a = json_loads(p->arguments, 0, NULL);
        CHECK(json_is_object(a));
        json_decref(a);
        put(o, "id", p->id);
        put(o, "name", p->name);
        put(o, "args", p->arguments);
        break;
    }
    case CANON_PART_TOOL_RESULT:
        CHECK(!in_result);
        CHECK(p->id != NULL);
        CHECK(p->ncontent == 0 || p->content != NULL);
        must(gw_buf_printf(o, "err%d %zu{", p->is_error, p->ncontent));
        for (size_t i = 0; i < p->ncontent; i++) {
            CHECK(p->content[i].type == CANON_PART_TEXT || p->content[i].type == CANON_PART_IMAGE);
            render_part(o, &p->content[i], 1);
        }
        must(gw_buf_append(o, "}", 1));
        put(o, "id", p->id);
        break;
    case CANON_PART_DOCUMENT:
        /* One source: bytes with their type, a URL, or text. */
        CHECK(!in_result);
        CHECK((p->data != NULL) + (p->url != NULL) + (p->text != NULL) == 1);
        CHECK(!p->data || p->media_type);
        CHECK(p->citations == 0 || p->citations == 1);
        put(o, "type", p->media_type);
        put(o, "data", p->data);
        put(o, "url", p->url);
        put(o, "text", p->text);
        put(o, "file", p->filename);
        put(o, "title", p->title);
        put(o, "ctx", p->context);
        must(gw_buf_printf(o, "cite%d", p->citations));
        break;
    case CANON_PART_AUDIO:
        CHECK(!in_result);
        CHECK(p->data && p->media_type);
        put(o, "type", p->media_type);
        put(o, "data", p->data);
        break;
    default:
        CHECK(!"a part type outside the enum");
    }
    must(gw_buf_append(o, "\n", 1));
}

/* Checks an accepted request and renders everything it holds into o. */
static void render_req(struct gw_buf *o, const struct canon_req *r)
{
    CHECK(r->model != NULL); /* "" is the router's to refuse: no route has that name */
    put(o, "model", r->model);
    must(gw_buf_printf(o, "stream%d usage%d\n", r->stream, r->include_usage));
    CHECK(r->nsystem == 0 || r->system != NULL);
    for (size_t i = 0; i < r->nsystem; i++) {
        CHECK(r->system[i].type == CANON_PART_TEXT);
        render_part(o, &r->system[i], 0);
    }
    CHECK(r->nmessages == 0 || r->messages != NULL);
    for (size_t i = 0; i < r->nmessages; i++) {
        const struct canon_message *m = &r->messages[i];
        CHECK(m->role >= CANON_ROLE_USER && m->role <= CANON_ROLE_SYSTEM);
        CHECK(m->nparts == 0 || m->parts != NULL);
        must(gw_buf_printf(o, "message %d %zu\n", (int)m->role, m->nparts));
        for (size_t k = 0; k < m->nparts; k++)
            render_part(o, &m->parts[k], 0);
    }
    CHECK(r->ntools <= 128 && (r->ntools == 0 || r->tools != NULL));
    for (size_t i = 0; i < r->ntools; i++) {
        const struct canon_tool *t = &r->tools[i];
        CHECK(t->name && tool_name_ok(t->name));
        for (size_t k = 0; k < i; k++)
            CHECK(strcmp(r->tools[k].name, t->name) != 0);
        CHECK(t->strict >= -1 && t->strict <= 1);
        put(o, "tool", t->name);
        put(o, "desc", t->description);
        char *schema = t->parameters ? json_dumps(t->parameters, JSON_SORT_KEYS) : NULL;
        put(o, "schema", schema);
        free(schema);
        must(gw_buf_printf(o, "strict%d c%d\n", t->strict, (int)t->cache));
    }
    CHECK(r->tool_choice >= CANON_TC_UNSET && r->tool_choice <= CANON_TC_NAMED);
    if (r->tool_choice == CANON_TC_REQUIRED || r->tool_choice == CANON_TC_NAMED)
        CHECK(r->ntools > 0);
    if (r->tool_choice == CANON_TC_NAMED) {
        CHECK(r->tool_choice_name != NULL);
        int known = 0;
        for (size_t i = 0; i < r->ntools; i++)
            known |= strcmp(r->tools[i].name, r->tool_choice_name) == 0;
        CHECK(known);
    }
    must(gw_buf_printf(o, "tc%d ", (int)r->tool_choice));
    put(o, "tcname", r->tool_choice_name);
    CHECK(r->parallel_tool_calls >= -1 && r->parallel_tool_calls <= 1);
    must(gw_buf_printf(o, "ptc%d\n", r->parallel_tool_calls));
    /* %a: the exact doubles. */
    must(gw_buf_printf(
        o, "t%d:%a p%d:%a k%d:%lld m%d:%lld s%d:%lld pp%d:%a fp%d:%a\n", r->has_temperature,
        r->has_temperature ? r->temperature : 0.0, r->has_top_p, r->has_top_p ? r->top_p : 0.0,
        r->has_top_k, r->has_top_k ? r->top_k : 0, r->has_max_tokens,
        r->has_max_tokens ? r->max_tokens : 0, r->has_seed, r->has_seed ? r->seed : 0,
        r->has_presence_penalty, r->has_presence_penalty ? r->presence_penalty : 0.0,
        r->has_frequency_penalty, r->has_frequency_penalty ? r->frequency_penalty : 0.0));
    CHECK(r->nstop <= 16 && (r->nstop == 0 || r->stop != NULL));
    for (size_t i = 0; i < r->nstop; i++) {
        CHECK(r->stop[i] && r->stop[i][0]);
        put(o, "stop", r->stop[i]);
    }
    CHECK(r->format >= CANON_FMT_UNSET && r->format <= CANON_FMT_JSON_SCHEMA);
    if (r->format == CANON_FMT_JSON_SCHEMA) /* the name may be absent: drivers default it */
        CHECK(json_is_object(r->format_schema));
    CHECK(r->format_strict >= -1 && r->format_strict <= 1);
    must(gw_buf_printf(o, "fmt%d strict%d ", (int)r->format, r->format_strict));
    put(o, "fname", r->format_name);
    if (r->reasoning_effort) {
        static const char *const efforts[] = {"minimal", "low", "medium", "high"};
        int known = 0;
        for (size_t i = 0; i < sizeof(efforts) / sizeof(efforts[0]); i++)
            known |= strcmp(r->reasoning_effort, efforts[i]) == 0;
        CHECK(known);
    }
    CHECK(r->reasoning_budget >= 0);
    put(o, "effort", r->reasoning_effort);
    must(gw_buf_printf(o, "budget%lld off%d ", r->reasoning_budget, r->reasoning_off));
    put(o, "user", r->user);
    must(gw_buf_append(o, "\n", 1));
}

/* One parse of root (a reference is taken) by fc; renders an accepted
 * request into o. */
static int parse(const struct dp_facade *fc, json_t *root, int lenient, struct canon_err *err,
                 struct canon_err *opaque, struct gw_buf *o)
{
    json_incref(root);
    struct canon_req *r = canon_req_new(root);
    CHECK(r != NULL);
    r->lenient = lenient;
    memset(err, 0, sizeof(*err));
    int rc = fc->parse(r, err);
    if (rc == GW_OK) {
        render_req(o, r);
        *opaque = r->opaque;
        if (!lenient)
            CHECK(r->opaque.status == 0);
    } else {
        check_err(rc, err);
    }
    canon_req_free(r);
    return rc;
}

static void chat(const struct dp_facade *fc, json_t *root)
{
    struct canon_err e1, e2, o1, o2;
    struct gw_buf strict, lenient;
    gw_buf_init(&strict, 0);
    gw_buf_init(&lenient, 0);
    /* The body as a facade gets it: json_deep_copy, since a parse may not
     * leave its mark on a document the other parse then reads. */
    json_t *copy = json_deep_copy(root);
    CHECK(copy != NULL);
    int rs = parse(fc, root, 0, &e1, &o1, &strict);
    int rl = parse(fc, copy, 1, &e2, &o2, &lenient);
    json_decref(copy);
    if (rs == GW_OK) {
        CHECK(rl == GW_OK && o2.status == 0);
        if (strict.len != lenient.len || memcmp(strict.data, lenient.data, strict.len) != 0) {
            fprintf(stderr, "fuzz_facades: %s: strict and lenient differ\n%.*s\n---\n%.*s\n",
                    fc->name, (int)strict.len, strict.data, (int)lenient.len, lenient.data);
            abort();
        }
    } else if (e1.status == 400 && strncmp(e1.code, "unsupported", 11) == 0) {
        if (rl == GW_OK)
            CHECK(same_err(&o2, &e1));
    } else {
        CHECK(rl == rs && same_err(&e1, &e2));
    }
    gw_buf_free(&strict);
    gw_buf_free(&lenient);
}

static void embed(json_t *root)
{
    struct canon_embed_req req;
    memset(&req, 0, sizeof(req));
    struct canon_err err;
    memset(&err, 0, sizeof(err));
    int rc = fc_embed_parse(root, &req, &err);
    if (rc == GW_OK) {
        CHECK(req.ninputs > 0 && req.inputs != NULL);
        for (size_t i = 0; i < req.ninputs; i++)
            CHECK(req.inputs[i] != NULL);
        CHECK(req.dimensions >= 0);
        CHECK(req.base64 == 0 || req.base64 == 1);
    } else {
        check_err(rc, &err);
    }
    free(req.inputs);
}

static void media_check(int rc, const struct canon_media_req *r, const struct canon_err *err,
                        const char *body, size_t len)
{
    if (rc != GW_OK) {
        CHECK(rc == GW_EINVAL);
        CHECK(err->status == 400 || err->status == 413);
        CHECK(err->code[0] && err->message[0] && err->param[0]);
        return;
    }
    CHECK(r->selector && r->selector[0]);
    CHECK(r->images >= 0 && r->images <= 10);
    CHECK(r->nfields <= FC_MEDIA_MAX_PARTS);
    size_t files = 0;
    for (size_t i = 0; i < r->nfields; i++) {
        const struct canon_media_field *f = &r->fields[i];
        CHECK(f->name && f->name[0]);
        CHECK(f->data >= body && f->data + f->len <= body + len);
        /* The uploads the operation reads: an audio op's file, an edit's
         * images (other parts pass through, files or not). */
        if (r->op == CANON_MEDIA_IMAGE_EDIT)
            files += f->filename != NULL &&
                     (strcmp(f->name, "image") == 0 || strcmp(f->name, "image[]") == 0);
        else
            files += f->filename != NULL && strcmp(f->name, "file") == 0;
    }
    if (r->op == CANON_MEDIA_TRANSCRIBE || r->op == CANON_MEDIA_TRANSLATE)
        CHECK(files == 1 && r->file_bytes > 0);
    if (r->op == CANON_MEDIA_IMAGE_EDIT)
        CHECK(files >= 1 && files <= FC_MEDIA_MAX_IMAGES && r->images >= 1);
}

static void media_multipart(unsigned sel, const char *body, size_t len)
{
    static const enum canon_media_op ops[] = {CANON_MEDIA_TRANSCRIBE, CANON_MEDIA_TRANSLATE,
                                              CANON_MEDIA_IMAGE_EDIT};
    struct canon_media_req r;
    struct canon_err err;
    memset(&err, 0, sizeof(err));
    void *store = NULL;
    int rc = fc_media_parse_multipart(ops[sel % 3], "multipart/form-data; boundary=B", body, len,
                                      1u << 20, &r, &store, &err);
    if (rc != GW_ENOMEM)
        media_check(rc, &r, &err, body, len);
    free(store);
}

static void media_json(unsigned sel, json_t *root, const char *body, size_t len)
{
    struct canon_media_req r;
    struct canon_err err;
    memset(&err, 0, sizeof(err));
    enum canon_media_op op = sel & 1 ? CANON_MEDIA_SPEECH : CANON_MEDIA_IMAGE;
    int rc = fc_media_parse_json(op, root, body, len, &r, &err);
    media_check(rc, &r, &err, body, len);
    if (rc == GW_OK && op == CANON_MEDIA_SPEECH)
        CHECK(r.characters >= 1 && r.characters <= 4096 && r.stream == 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned which = data[0] % (NFACADES + 3);
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (which == NFACADES + 2) { /* media, multipart: the bytes as they came */
        media_multipart(data[0] / (NFACADES + 3), body, len);
        return 0;
    }
    /* As the exchange loads a body (admit.c, load_body). */
    char lim[256];
    size_t spent = 0;
    struct gw_json_count c;
    if (gw_json_bound(body, len, "the request body", &spent, &c, lim, sizeof(lim)) != GW_OK)
        return 0;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (json_is_object(root)) {
        if (which < NFACADES)
            chat(facades[which], root);
        else if (which == NFACADES)
            embed(root);
        else
            media_json(data[0] / (NFACADES + 3), root, body, len);
    }
    json_decref(root);
    return 0;
}
