/*
 * OpenAI's media endpoints as clients send them (the official SDK's
 * shapes): transcriptions and translations (multipart: file, model,
 * language, prompt, response_format, temperature, timestamp_granularities[],
 * stream), speech (JSON: model, input, voice, response_format, speed,
 * instructions, stream_format), image generations (JSON: prompt, model, n,
 * size, quality, response_format, stream, ...) and image edits (multipart:
 * image or image[] one or more, mask, prompt, model, n, size, quality,
 * response_format, stream, ...).
 *
 * The gateway reads the fields it acts on (the model is its selector; the
 * upload, the text and n bound the reservation; stream and the answer's
 * shape decide how it is relayed) and checks them as the provider would;
 * a field it does not act on goes upstream untouched (the provider speaks
 * this same format, and judges it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_media.h"
#include "gw_audio.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_multipart.h"

const char *fc_media_api(enum canon_media_op op)
{
    switch (op) {
    case CANON_MEDIA_TRANSCRIBE:
        return "openai.audio.transcriptions";
    case CANON_MEDIA_TRANSLATE:
        return "openai.audio.translations";
    case CANON_MEDIA_SPEECH:
        return "openai.audio.speech";
    case CANON_MEDIA_IMAGE:
        return "openai.images.generations";
    case CANON_MEDIA_IMAGE_EDIT:
        return "openai.images.edits";
    }
    return "openai.media";
}

static int is_audio_op(enum canon_media_op op)
{
    return op == CANON_MEDIA_TRANSCRIBE || op == CANON_MEDIA_TRANSLATE;
}

/* ------------------------------------------------------------- multipart */

struct store {
    struct gw_mp_span spans[FC_MEDIA_MAX_PARTS];
    struct canon_media_field fields[FC_MEDIA_MAX_PARTS];
    char selector[257];
    char text[4][32]; /* response_format, size, quality, and n as read */
};

static int field_is(const struct canon_media_field *f, const char *v)
{
    return f->len == strlen(v) && memcmp(f->data, v, f->len) == 0;
}

/* A plain field's value as a short string (into buf); GW_EINVAL when it is
 * a file or longer than the buffer. */
static int short_value(const struct canon_media_field *f, char *buf, size_t n,
                       struct canon_err *err)
{
    if (f->filename || f->len >= n || memchr(f->data, '\0', f->len)) {
        canon_err_set(err, 400, f->name, "invalid_value",
                      "'%s' must be a short text field (at most %zu bytes), not a file", f->name,
                      n - 1);
        return GW_EINVAL;
    }
    memcpy(buf, f->data, f->len);
    buf[f->len] = '\0';
    return GW_OK;
}

static int one_of(const char *v, const char *const *set)
{
    for (; *set; set++)
        if (strcmp(v, *set) == 0)
            return 1;
    return 0;
}

/* "true" or "false", as the SDK writes a boolean in a form. */
static int form_bool(const struct canon_media_field *f, int *out, struct canon_err *err)
{
    if (field_is(f, "true") || field_is(f, "false")) {
        *out = field_is(f, "true");
        return GW_OK;
    }
    canon_err_set(err, 400, f->name, "invalid_value", "'%s' must be true or false", f->name);
    return GW_EINVAL;
}

/* n: 1 to 10 images. */
static int read_n(long long v, int present, struct canon_media_req *r, struct canon_err *err)
{
    if (!present) {
        r->images = 1;
        return GW_OK;
    }
    if (v < 1 || v > 10) {
        canon_err_set(err, 400, "n", "invalid_value", "'n' must be an integer from 1 to 10");
        return GW_EINVAL;
    }
    r->images = v;
    return GW_OK;
}

static const char *const audio_formats[] = {"json", "text",          "srt", "verbose_json",
                                            "vtt",  "diarized_json", NULL};
static const char *const image_formats[] = {"url", "b64_json", NULL};

/* The fields every multipart operation reads, checked and noted in r. */
static int read_fields(enum canon_media_op op, struct store *st, struct canon_media_req *r,
                       struct canon_err *err)
{
    int have_model = 0, have_prompt = 0, have_n = 0, masks = 0;
    long long n = 0;
    size_t files = 0;
    for (size_t i = 0; i < r->nfields; i++) {
        const struct canon_media_field *f = &r->fields[i];
        /* A field the gateway reads appears once; "name[]" fields repeat. */
        size_t nl = strlen(f->name);
        int array = nl > 2 && strcmp(f->name + nl - 2, "[]") == 0;
        for (size_t j = 0; j < i && !array; j++)
            if (strcmp(r->fields[j].name, f->name) == 0 && strcmp(f->name, "image") != 0) {
                canon_err_set(err, 400, f->name, "invalid_request", "'%s' appears more than once",
                              f->name);
                return GW_EINVAL;
            }
        if (strcmp(f->name, "model") == 0) {
            if (short_value(f, st->selector, sizeof(st->selector), err) != GW_OK)
                return GW_EINVAL;
            have_model = st->selector[0] != '\0';
        } else if (strcmp(f->name, "response_format") == 0) {
            if (short_value(f, st->text[0], sizeof(st->text[0]), err) != GW_OK)
                return GW_EINVAL;
            if (!one_of(st->text[0], is_audio_op(op) ? audio_formats : image_formats)) {
                canon_err_set(err, 400, "response_format", "invalid_value",
                              is_audio_op(op) ? "'response_format' must be one of json, text, "
                                                "srt, verbose_json, vtt, diarized_json"
                                              : "'response_format' must be url or b64_json");
                return GW_EINVAL;
            }
            r->response_format = st->text[0];
        } else if (strcmp(f->name, "stream") == 0) {
            if (op == CANON_MEDIA_TRANSLATE) {
                canon_err_set(err, 400, "stream", "unsupported_parameter",
                              "'stream' is not supported for translations");
                return GW_EINVAL;
            }
            if (form_bool(f, &r->stream, err) != GW_OK)
                return GW_EINVAL;
        } else if (strcmp(f->name, "prompt") == 0) {
            if (f->filename) {
                canon_err_set(err, 400, "prompt", "invalid_value", "'prompt' must be text");
                return GW_EINVAL;
            }
            r->prompt_bytes = (int64_t)f->len;
            have_prompt = f->len > 0;
        } else if (is_audio_op(op) && strcmp(f->name, "file") == 0) {
            if (!f->filename || f->len == 0) {
                canon_err_set(err, 400, "file", "invalid_value",
                              "'file' must be an uploaded audio file (a part with a filename)");
                return GW_EINVAL;
            }
            files++;
            r->file_bytes = (int64_t)f->len;
            int64_t ms;
            if (gw_audio_wav_ms(f->data, f->len, &ms) == GW_OK)
                r->audio_ms = ms;
        } else if (op == CANON_MEDIA_IMAGE_EDIT &&
                   (strcmp(f->name, "image") == 0 || strcmp(f->name, "image[]") == 0 ||
                    strcmp(f->name, "mask") == 0)) {
            if (!f->filename || f->len == 0) {
                canon_err_set(err, 400, f->name, "invalid_value",
                              "'%s' must be an uploaded image (a part with a filename)", f->name);
                return GW_EINVAL;
            }
            r->file_bytes += (int64_t)f->len;
            if (f->name[0] == 'm')
                masks++;
            else
                files++;
        } else if (op == CANON_MEDIA_IMAGE_EDIT && strcmp(f->name, "n") == 0) {
            char *end;
            if (short_value(f, st->text[3], sizeof(st->text[3]), err) != GW_OK)
                return GW_EINVAL;
            n = strtoll(st->text[3], &end, 10);
            have_n = 1;
            if (*end || end == st->text[3])
                n = 0;
        } else if (op == CANON_MEDIA_IMAGE_EDIT &&
                   (strcmp(f->name, "size") == 0 || strcmp(f->name, "quality") == 0)) {
            char *v = st->text[f->name[0] == 's' ? 1 : 2];
            if (short_value(f, v, sizeof(st->text[1]), err) != GW_OK)
                return GW_EINVAL;
            *(f->name[0] == 's' ? &r->size : &r->quality) = v;
        }
    }
    if (!have_model) {
        canon_err_set(err, 400, "model", "missing_required_parameter",
                      "you must provide a model parameter");
        return GW_EINVAL;
    }
    r->selector = st->selector;
    if (is_audio_op(op) && files != 1) {
        canon_err_set(err, 400, "file", files ? "invalid_request" : "missing_required_parameter",
                      files ? "send one 'file'" : "you must provide a file parameter");
        return GW_EINVAL;
    }
    if (op == CANON_MEDIA_IMAGE_EDIT) {
        if (files == 0 || files > FC_MEDIA_MAX_IMAGES) {
            canon_err_set(err, 400, "image",
                          files ? "invalid_request" : "missing_required_parameter",
                          files ? "send at most %d images" : "you must provide an image parameter",
                          FC_MEDIA_MAX_IMAGES);
            return GW_EINVAL;
        }
        if (masks > 1) {
            canon_err_set(err, 400, "mask", "invalid_request", "send at most one 'mask'");
            return GW_EINVAL;
        }
        if (!have_prompt) {
            canon_err_set(err, 400, "prompt", "missing_required_parameter",
                          "you must provide a prompt parameter");
            return GW_EINVAL;
        }
        r->input_images = (int64_t)files;
        if (read_n(n, have_n, r, err) != GW_OK)
            return GW_EINVAL;
    }
    return GW_OK;
}

int fc_media_parse_multipart(enum canon_media_op op, const char *content_type, const char *body,
                             size_t len, size_t max_file, struct canon_media_req *r, void **store,
                             struct canon_err *err)
{
    *store = NULL;
    char boundary[80];
    struct gw_mp_err me = {0};
    if (!content_type) {
        canon_err_set(err, 400, "content-type", "invalid_request",
                      "this endpoint takes multipart/form-data (the Content-Type header is "
                      "missing)");
        return GW_EINVAL;
    }
    if (gw_mp_boundary(content_type, boundary, sizeof(boundary), &me) != GW_OK) {
        canon_err_set(err, me.status ? me.status : 400, me.field[0] ? me.field : "content-type",
                      "invalid_multipart", "%s", me.message);
        return GW_EINVAL;
    }
    struct store *st = calloc(1, sizeof(*st));
    if (!st)
        return GW_ENOMEM;
    struct gw_mp_limits lim = {.max_parts = FC_MEDIA_MAX_PARTS, .max_file_bytes = max_file};
    size_t n = 0;
    int rc = gw_mp_parse_all(body, len, boundary, &lim, st->spans, FC_MEDIA_MAX_PARTS, &n, &me);
    if (rc != GW_OK) {
        free(st);
        if (rc == GW_ENOMEM)
            return GW_ENOMEM;
        canon_err_set(err, me.status ? me.status : 400, me.field[0] ? me.field : "body",
                      me.status == 413 ? "request_too_large" : "invalid_multipart", "%s",
                      me.message);
        return GW_EINVAL;
    }
    for (size_t i = 0; i < n; i++) {
        const struct gw_mp_span *s = &st->spans[i];
        st->fields[i] =
            (struct canon_media_field){.name = s->name,
                                       .filename = s->has_filename ? s->filename : NULL,
                                       .content_type = s->content_type[0] ? s->content_type : NULL,
                                       .data = s->data,
                                       .len = s->len};
    }
    *r = (struct canon_media_req){.op = op, .fields = st->fields, .nfields = n};
    rc = read_fields(op, st, r, err);
    if (rc != GW_OK) {
        free(st);
        return rc;
    }
    *store = st;
    return GW_OK;
}

/* ------------------------------------------------------------------ JSON */

static const char *const speech_formats[] = {"mp3", "opus", "aac", "flac", "wav", "pcm", NULL};

/* Characters of UTF-8 text (its bytes that begin one). */
static int64_t utf8_chars(const char *s, size_t n)
{
    int64_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

static int opt_enum(const json_t *root, const char *key, const char *const *set, const char *what,
                    const char **out, struct canon_err *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return GW_OK;
    if (!json_is_string(v) || !one_of(json_string_value(v), set)) {
        canon_err_set(err, 400, key, "invalid_value", "'%s' must be one of %s", key, what);
        return GW_EINVAL;
    }
    *out = json_string_value(v);
    return GW_OK;
}

static int opt_short_string(const json_t *root, const char *key, const char **out,
                            struct canon_err *err)
{
    const json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v))
        return GW_OK;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 31) {
        canon_err_set(err, 400, key, "invalid_value", "'%s' must be a short string", key);
        return GW_EINVAL;
    }
    *out = json_string_value(v);
    return GW_OK;
}

static int speech(const json_t *root, struct canon_media_req *r, struct canon_err *err)
{
    const json_t *in = json_object_get(root, "input");
    if (!json_is_string(in) || json_string_length(in) == 0) {
        canon_err_set(err, 400, "input", "invalid_value",
                      "'input' is required: the text to speak, a non-empty string");
        return GW_EINVAL;
    }
    r->characters = utf8_chars(json_string_value(in), json_string_length(in));
    r->prompt_bytes = (int64_t)json_string_length(in);
    if (r->characters > 4096) {
        canon_err_set(err, 400, "input", "invalid_value",
                      "'input' may hold at most 4096 characters (it has %lld)",
                      (long long)r->characters);
        return GW_EINVAL;
    }
    const json_t *voice = json_object_get(root, "voice");
    if (!(json_is_string(voice) && json_string_length(voice)) && !json_is_object(voice)) {
        canon_err_set(err, 400, "voice", "invalid_value",
                      "'voice' is required: a voice name, or an object naming a custom voice");
        return GW_EINVAL;
    }
    const json_t *sp = json_object_get(root, "speed");
    if (sp && !json_is_null(sp) &&
        (!json_is_number(sp) || json_number_value(sp) < 0.25 || json_number_value(sp) > 4.0)) {
        canon_err_set(err, 400, "speed", "invalid_value",
                      "'speed' must be a number from 0.25 to 4");
        return GW_EINVAL;
    }
    const char *sf = NULL;
    static const char *const stream_formats[] = {"audio", "sse", NULL};
    if (opt_enum(root, "response_format", speech_formats, "mp3, opus, aac, flac, wav, pcm",
                 &r->response_format, err) != GW_OK ||
        opt_enum(root, "stream_format", stream_formats, "audio, sse", &sf, err) != GW_OK)
        return GW_EINVAL;
    r->stream = 1; /* audio goes out as it arrives */
    return GW_OK;
}

static int image(const json_t *root, struct canon_media_req *r, struct canon_err *err)
{
    const json_t *p = json_object_get(root, "prompt");
    if (!json_is_string(p) || json_string_length(p) == 0) {
        canon_err_set(err, 400, "prompt", "missing_required_parameter",
                      "you must provide a prompt parameter (a non-empty string)");
        return GW_EINVAL;
    }
    r->prompt_bytes = (int64_t)json_string_length(p);
    const json_t *n = json_object_get(root, "n");
    int has_n = n && !json_is_null(n);
    if (has_n && !json_is_integer(n)) {
        canon_err_set(err, 400, "n", "invalid_value", "'n' must be an integer from 1 to 10");
        return GW_EINVAL;
    }
    if (read_n(has_n ? json_integer_value(n) : 0, has_n, r, err) != GW_OK)
        return GW_EINVAL;
    const json_t *s = json_object_get(root, "stream");
    if (s && !json_is_null(s) && !json_is_boolean(s)) {
        canon_err_set(err, 400, "stream", "invalid_value", "'stream' must be true or false");
        return GW_EINVAL;
    }
    r->stream = json_is_true(s);
    if (opt_enum(root, "response_format", image_formats, "url, b64_json", &r->response_format,
                 err) != GW_OK ||
        opt_short_string(root, "size", &r->size, err) != GW_OK ||
        opt_short_string(root, "quality", &r->quality, err) != GW_OK)
        return GW_EINVAL;
    return GW_OK;
}

int fc_media_parse_json(enum canon_media_op op, const json_t *root, const char *body, size_t len,
                        struct canon_media_req *r, struct canon_err *err)
{
    *r = (struct canon_media_req){.op = op, .json = body, .json_len = len};
    const json_t *m = json_object_get(root, "model");
    if (!json_is_string(m) || json_string_length(m) == 0) {
        canon_err_set(err, 400, "model", "missing_required_parameter",
                      "you must provide a model parameter");
        return GW_EINVAL;
    }
    r->selector = json_string_value(m);
    return op == CANON_MEDIA_SPEECH ? speech(root, r, err) : image(root, r, err);
}
