/*
 * The openai driver's media endpoints (docs/media.md), for OpenAI and every
 * server that speaks its API:
 *
 *   transcriptions  POST {base}/audio/transcriptions  multipart
 *   translations    POST {base}/audio/translations    multipart
 *   speech          POST {base}/audio/speech          JSON → audio bytes
 *   images          POST {base}/images/generations    JSON
 *   image edits     POST {base}/images/edits          multipart
 *
 * The client's request is OpenAI's own, so it goes upstream as it came but
 * for the model, which becomes the target's: a JSON body with that one
 * member edited, a multipart body written again part by part under a
 * boundary of ours (every part's bytes as the client sent them). The
 * answer is the client's as the provider sent it; this file only reads
 * what it used:
 *
 *   "usage": {"type": "duration", "seconds": S}          (whisper-1)
 *   "usage": {"type": "tokens", "input_tokens", "output_tokens",
 *             "input_token_details": {"audio_tokens", "text_tokens"}}
 *   "usage": {"input_tokens", "output_tokens",
 *             "input_tokens_details": {"image_tokens", "text_tokens"},
 *             "output_tokens_details": {"image_tokens", "text_tokens"}}
 *   "duration": S (verbose_json), "data": [...] (images)
 *
 * For images the output tokens are image tokens unless the answer splits
 * them; for speech (a streamed answer's speech.audio.done) they are audio.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drv_util.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_multipart.h"

static const char *media_path(enum canon_media_op op)
{
    switch (op) {
    case CANON_MEDIA_TRANSCRIBE:
        return "/audio/transcriptions";
    case CANON_MEDIA_TRANSLATE:
        return "/audio/translations";
    case CANON_MEDIA_SPEECH:
        return "/audio/speech";
    case CANON_MEDIA_IMAGE:
        return "/images/generations";
    case CANON_MEDIA_IMAGE_EDIT:
        return "/images/edits";
    }
    return "/";
}

/* The client's parts under our boundary, the model part the target's: the
 * part heads are ours (out->body), each part's bytes the client's own,
 * borrowed (a 25 MiB upload is not copied). */
static int multipart_body(const struct drv_target *t, const struct canon_media_req *r,
                          struct drv_request *out, char *ctype, size_t ctlen)
{
    char boundary[41];
    gw_mp_new_boundary(boundary);
    /* Where each piece is: ours as an offset into b (it may move while it
     * grows), theirs as a pointer. */
    struct piece {
        size_t at, len;
        const char *data;
    } *pc = calloc(2 * r->nfields + 1, sizeof(*pc));
    out->iov = calloc(2 * r->nfields + 1, sizeof(*out->iov));
    if (!pc || !out->iov) {
        free(pc);
        return GW_ENOMEM;
    }
    struct gw_buf b;
    gw_buf_init(&b, 0);
    int rc = GW_OK;
    size_t n = 0, at = 0;
    for (size_t i = 0; rc == GW_OK && i < r->nfields; i++) {
        const struct canon_media_field *f = &r->fields[i];
        int model = strcmp(f->name, "model") == 0;
        const char *data = model ? t->model : f->data;
        size_t len = model ? strlen(t->model) : f->len;
        /* The CRLF that ends the previous part's bytes starts this head. */
        if (i > 0)
            rc = gw_buf_append(&b, "\r\n", 2);
        if (rc == GW_OK)
            rc = gw_mp_write_head(&b, boundary, f->name, model ? NULL : f->filename,
                                  f->filename && !model ? f->content_type : NULL, data, len);
        pc[n++] = (struct piece){at, b.len - at, NULL};
        at = b.len;
        if (len)
            pc[n++] = (struct piece){0, len, data};
    }
    if (rc == GW_OK && r->nfields)
        rc = gw_buf_append(&b, "\r\n", 2);
    if (rc == GW_OK)
        rc = gw_mp_write_end(&b, boundary);
    if (rc == GW_OK)
        pc[n++] = (struct piece){at, b.len - at, NULL};
    if (rc != GW_OK) {
        free(pc);
        gw_buf_free(&b);
        return rc == GW_EINVAL ? GW_EINVAL : GW_ENOMEM;
    }
    out->body = b.data; /* handed over: gw_buf's storage is malloc'd */
    for (size_t k = 0; k < n; k++) {
        const char *p = pc[k].data ? pc[k].data : out->body + pc[k].at;
        out->iov[k] = (struct iovec){(void *)p, pc[k].len};
        out->body_len += pc[k].len;
    }
    out->niov = n;
    free(pc);
    snprintf(ctype, ctlen, "multipart/form-data; boundary=%s", boundary);
    return GW_OK;
}

int drv_openai_build_media(const struct drv_target *t, const struct canon_media_req *r,
                           struct drv_request *out, struct canon_err *err)
{
    out->url = drv_url(t, media_path(r->op));
    if (!out->url)
        return GW_ENOMEM;
    out->stream = r->stream || r->op == CANON_MEDIA_SPEECH;
    if (r->json) {
        struct gw_buf mb;
        gw_buf_init(&mb, 0);
        struct drv_edit e[1];
        size_t ne = 0;
        int rc = gw_json_escape(&mb, t->model, strlen(t->model));
        if (rc == GW_OK)
            rc = drv_edit_member(r->json, r->json_len, "model", &mb, e, &ne, err);
        if (rc == GW_OK)
            rc = drv_edit_body(out, r->json, r->json_len, e, ne);
        gw_buf_free(&mb);
        if (rc != GW_OK)
            return rc;
        return drv_auth_headers(out, t, "Authorization: Bearer ");
    }
    char ctype[96];
    int rc = multipart_body(t, r, out, ctype, sizeof(ctype));
    if (rc == GW_EINVAL) {
        canon_err_set(err, 400, "file", "invalid_request",
                      "a part's name or filename cannot be sent on (a line break in it)");
        return GW_EINVAL;
    }
    if (rc != GW_OK)
        return rc;
    return drv_auth_headers_as(out, t, "Authorization: Bearer ", ctype);
}

static int64_t count(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_integer(v) ? canon_tokens(json_integer_value(v)) : 0;
}

/* A duration in seconds (an integer or a decimal) as whole milliseconds,
 * rounded up; 0 when it is none. */
static int64_t seconds_ms(const json_t *v)
{
    double s = json_is_integer(v) ? (double)json_integer_value(v)
               : json_is_real(v)  ? json_real_value(v)
                                  : 0;
    if (!(s > 0) || s > 1e9)
        return 0;
    return (int64_t)ceil(s * 1000.0 - 1e-6);
}

void drv_openai_media_usage(const struct canon_media_req *r, const char *body, size_t len,
                            struct canon_media_usage *u)
{
    json_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(doc)) {
        json_decref(doc);
        return;
    }
    /* A streamed answer's last event nests nothing else: its usage is
     * at the top, as in a whole body. */
    const json_t *us = json_object_get(doc, "usage");
    const char *type = gw_json_str(us, "type");
    if (json_is_object(us) && type && strcmp(type, "duration") == 0) {
        u->audio_ms = seconds_ms(json_object_get(us, "seconds"));
    } else if (json_is_object(us) &&
               (json_object_get(us, "input_tokens") || json_object_get(us, "output_tokens"))) {
        u->tokens.have = 1;
        u->tokens.input = count(us, "input_tokens");
        u->tokens.output = count(us, "output_tokens");
        const json_t *in = json_object_get(us, "input_token_details");
        if (!in)
            in = json_object_get(us, "input_tokens_details");
        u->media_in = count(in, "audio_tokens") + count(in, "image_tokens");
        const json_t *od = json_object_get(us, "output_tokens_details");
        if (json_is_object(od) &&
            (json_object_get(od, "image_tokens") || json_object_get(od, "audio_tokens")))
            u->media_out = count(od, "image_tokens") + count(od, "audio_tokens");
        else if (r->op == CANON_MEDIA_IMAGE || r->op == CANON_MEDIA_IMAGE_EDIT ||
                 r->op == CANON_MEDIA_SPEECH)
            u->media_out = u->tokens.output;
        if (u->media_in > u->tokens.input)
            u->media_in = u->tokens.input;
        if (u->media_out > u->tokens.output)
            u->media_out = u->tokens.output;
    }
    if (!u->audio_ms)
        u->audio_ms = seconds_ms(json_object_get(doc, "duration"));
    const json_t *data = json_object_get(doc, "data");
    if (json_is_array(data))
        u->images = (int64_t)json_array_size(data);
    json_decref(doc);
}
