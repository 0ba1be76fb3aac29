/*
 * OpenAI's media endpoints (docs/mockprovider.md, "Media"):
 *
 *   POST /v1/audio/transcriptions, /v1/audio/translations (multipart): a
 *        deterministic text from the file's byte length, in each
 *        response_format, usage by tokens (models named gpt-4o*) or by
 *        duration (the others); a stream of transcript.text.delta events
 *        (gpt-4o* transcriptions only)
 *   POST /v1/audio/speech (JSON): a short audio file derived from the
 *        input, sent in 8 pieces of a chunked answer
 *   POST /v1/images/generations (JSON), /v1/images/edits (multipart): the
 *        1x1 PNG, as b64_json or a URL this mock serves
 *
 * Multipart bodies are read with common/gw_multipart (gw_mp_parse_all);
 * a WAV's duration with common/gw_audio. Faults, the usage log and the body
 * record work as for every other call (call.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_audio.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_multipart.h"
#include "mock.h"

/* A 1x1 transparent RGBA PNG. */
const unsigned char mock_png[] = {
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48,
    0x44, 0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00,
    0x00, 0x1f, 0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0b, 0x49, 0x44, 0x41, 0x54, 0x78,
    0x9c, 0x63, 0x60, 0x00, 0x02, 0x00, 0x00, 0x05, 0x00, 0x01, 0x7a, 0x5e, 0xab, 0x3f,
    0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82};
const size_t mock_png_len = sizeof mock_png;

#define MAX_PARTS 64
#define SPEECH_RATE 8000         /* samples a second */
#define SPEECH_PER_CHAR 160      /* 20 ms a character */
#define SPEECH_MAX_SAMPLES 40000 /* 5 s */
#define SPEECH_PIECES 8
#define MP3_FRAME 144             /* MPEG-1 Layer III, 32 kbps, 32 kHz, mono */
#define MP3_FRAME_MS 36           /* 1152 samples at 32 kHz */
#define IMAGE_TOKENS_PER_INPUT 65 /* an edit's input image */

enum kind { K_TRANSCRIBE, K_TRANSLATE, K_SPEECH, K_GENERATE, K_EDIT };
enum afmt { F_JSON, F_TEXT, F_SRT, F_VERBOSE, F_VTT };

struct media {
    enum kind kind;
    /* audio in */
    size_t file_len;
    int64_t ms;
    int wav;
    size_t prompt_len;
    enum afmt fmt;
    int words_ts;
    int tokens; /* gpt-4o*: usage in tokens; else in seconds */
    int stream;
    char text[96];
    int nwords;
    int A, T, O;
    /* speech */
    unsigned char *audio;
    size_t audio_len;
    const char *format;
    size_t chars;
    /* images */
    const char *prompt;
    int n;
    int b64;
    const char *response_format; /* NULL: not given */
    int gpt_image;
    int images_in;
    int per_image;
    int text_tokens;
    const char *size, *quality;
};

static const char *in_list(const char *v, const char *const *list)
{
    for (; *list; list++)
        if (strcmp(v, *list) == 0)
            return *list;
    return NULL;
}

/* ---- multipart ---- */

static const char *mp_read(struct mock_call *c, const char *body, size_t len,
                           struct gw_mp_span **sp, size_t *n)
{
    const char *ct = gw_http_req_header(c->req, "content-type");
    char boundary[GW_MP_MAX_BOUNDARY + 1];
    struct gw_mp_err err;
    if (gw_mp_boundary(ct, boundary, sizeof boundary, &err) != GW_OK) {
        c->err_status = err.status;
        return gw_pool_strdup(c->pool, err.message);
    }
    *sp = gw_pool_alloc(c->pool, MAX_PARTS * sizeof **sp);
    if (*sp == NULL)
        return "mock: out of memory";
    /* The body bound (64 MiB in main.c) is the only size limit. */
    struct gw_mp_limits lim = {.max_parts = MAX_PARTS, .max_file_bytes = 64u << 20};
    if (gw_mp_parse_all(body, len, boundary, &lim, *sp, MAX_PARTS, n, &err) != GW_OK) {
        c->err_status = err.status;
        return gw_pool_strdup(c->pool, err.message);
    }
    return NULL;
}

/* A text part's value into *slot (pool memory); a field given twice is refused. */
static const char *field(struct mock_call *c, const struct gw_mp_span *s, const char **slot)
{
    if (*slot != NULL)
        return gw_pool_printf(c->pool, "%s: given twice", s->name);
    *slot = gw_pool_strndup(c->pool, s->data ? s->data : "", s->len);
    return *slot ? NULL : "mock: out of memory";
}

static const char *unknown(struct mock_call *c, const char *name)
{
    return gw_pool_printf(c->pool, "Unrecognized request argument supplied: %s", name);
}

static int is_png(const struct gw_mp_span *s)
{
    return s->len >= 8 && memcmp(s->data, "\x89PNG\r\n\x1a\n", 8) == 0;
}

/* ---- audio in: transcriptions and translations ---- */

static const char *audio_parse_body(struct mock_call *c, const char *body, size_t len,
                                    const char **model, enum kind kind)
{
    struct media *m = gw_pool_calloc(c->pool, sizeof *m);
    if (m == NULL)
        return "mock: out of memory";
    m->kind = kind;
    c->api_state = m;
    struct gw_mp_span *sp;
    size_t n = 0;
    const char *err = mp_read(c, body, len, &sp, &n);
    if (err != NULL)
        return err;
    const struct gw_mp_span *file = NULL;
    const char *mdl = NULL, *fmt = NULL, *temp = NULL, *stream = NULL, *lang = NULL, *prompt = NULL;
    int translate = kind == K_TRANSLATE;
    for (size_t i = 0; i < n && err == NULL; i++) {
        const struct gw_mp_span *s = &sp[i];
        const char *name = s->name;
        if (strcmp(name, "file") == 0) {
            if (file != NULL)
                err = "file: given twice";
            file = s;
        } else if (strcmp(name, "model") == 0) {
            err = field(c, s, &mdl);
        } else if (strcmp(name, "prompt") == 0) {
            err = field(c, s, &prompt);
        } else if (strcmp(name, "response_format") == 0) {
            err = field(c, s, &fmt);
        } else if (strcmp(name, "temperature") == 0) {
            err = field(c, s, &temp);
        } else if (!translate && strcmp(name, "language") == 0) {
            err = field(c, s, &lang);
        } else if (!translate && strcmp(name, "stream") == 0) {
            err = field(c, s, &stream);
        } else if (!translate && strcmp(name, "timestamp_granularities[]") == 0) {
            if (s->len == 4 && memcmp(s->data, "word", 4) == 0)
                m->words_ts = 1;
            else if (!(s->len == 7 && memcmp(s->data, "segment", 7) == 0))
                err = "timestamp_granularities[]: 'word' or 'segment'";
        } else {
            err = unknown(c, name);
        }
    }
    if (err != NULL)
        return err;
    if (file == NULL)
        return "file: field required";
    if (mdl == NULL || mdl[0] == '\0')
        return "model: field required";
    static const char *const fmts[] = {"json", "text", "srt", "verbose_json", "vtt", NULL};
    if (fmt != NULL) {
        const char *f = in_list(fmt, fmts);
        if (f == NULL)
            return "response_format: one of json, text, srt, verbose_json, vtt";
        m->fmt = (enum afmt)(f == fmts[0]   ? F_JSON
                             : f == fmts[1] ? F_TEXT
                             : f == fmts[2] ? F_SRT
                             : f == fmts[3] ? F_VERBOSE
                                            : F_VTT);
    }
    if (temp != NULL) {
        char *end;
        double t = strtod(temp, &end);
        if (end == temp || *end != '\0' || !(t >= 0 && t <= 1))
            return "temperature: a number between 0 and 1";
        c->seen.has_temperature = 1;
        c->seen.temperature = t;
    }
    if (stream != NULL) {
        if (strcmp(stream, "true") != 0 && strcmp(stream, "false") != 0)
            return "stream: 'true' or 'false'";
        m->stream = strcmp(stream, "true") == 0;
    }
    m->file_len = file->len;
    m->prompt_len = prompt ? strlen(prompt) : 0;
    int64_t ms;
    if (gw_audio_wav_ms(file->data, file->len, &ms) == GW_OK) {
        m->wav = 1;
    } else {
        ms = (int64_t)((file->len + 3) / 4); /* 32 kbps: 4 bytes a millisecond */
    }
    m->ms = ms < 1 ? 1 : ms;
    c->seen.files = 1;
    c->seen.messages = 1;
    c->seen.system = prompt != NULL;
    *model = mdl;
    return NULL;
}

static const char *transcribe_parse_body(struct mock_call *c, const char *body, size_t len,
                                         const char **model)
{
    return audio_parse_body(c, body, len, model, K_TRANSCRIBE);
}

static const char *translate_parse_body(struct mock_call *c, const char *body, size_t len,
                                        const char **model)
{
    return audio_parse_body(c, body, len, model, K_TRANSLATE);
}

/* After the fault is resolved: what depends on the model. */
static const char *audio_parse(struct mock_call *c, json_t *root)
{
    (void)root;
    struct media *m = c->api_state;
    m->tokens = strstr(c->model, "gpt-4o") != NULL;
    if (m->stream && !m->tokens)
        return gw_pool_printf(c->pool, "streaming is not supported for %s", c->model);
    c->stream = m->stream;
    snprintf(m->text, sizeof m->text, "Mock %s of a %zu-byte recording.",
             m->kind == K_TRANSLATE ? "translation" : "transcript", m->file_len);
    m->nwords = mock_count_words(m->text, strlen(m->text));
    m->A = (int)((m->ms + 99) / 100);
    m->T = (int)(m->prompt_len / 4);
    m->O = m->nwords;
    c->input_tokens = m->tokens ? m->A + m->T : 0;
    c->ntext = m->tokens ? m->O : 0;
    c->reasoning = 0;
    c->finish = MOCK_FINISH_STOP;
    if (m->fmt == F_TEXT || m->fmt == F_SRT || m->fmt == F_VTT)
        c->body_type = "text/plain; charset=utf-8";
    return NULL;
}

static int append_seconds(struct gw_buf *b, int64_t ms)
{
    return gw_buf_printf(b, "%lld.%03lld", (long long)(ms / 1000), (long long)(ms % 1000));
}

/* HH:MM:SS<sep>mmm */
static int append_stamp(struct gw_buf *b, int64_t ms, char sep)
{
    long long s = (long long)(ms / 1000);
    return gw_buf_printf(b, "%02lld:%02lld:%02lld%c%03lld", s / 3600, s / 60 % 60, s % 60, sep,
                         (long long)(ms % 1000));
}

static int append_audio_usage(struct gw_buf *b, const struct media *m, int tokens)
{
    if (tokens)
        return gw_buf_printf(b,
                             "{\"type\":\"tokens\",\"input_tokens\":%d,\"input_token_details\":"
                             "{\"text_tokens\":%d,\"audio_tokens\":%d},\"output_tokens\":%d,"
                             "\"total_tokens\":%d}",
                             m->A + m->T, m->T, m->A, m->O, m->A + m->T + m->O);
    return gw_buf_printf(b, "{\"type\":\"duration\",\"seconds\":%lld}",
                         (long long)((m->ms + 999) / 1000));
}

/* The i-th word of the text (its start and length). */
static const char *word_at(const struct media *m, int i, size_t *len)
{
    const char *p = m->text;
    for (int k = 0;; k++) {
        while (*p == ' ')
            p++;
        const char *e = strchr(p, ' ');
        size_t l = e ? (size_t)(e - p) : strlen(p);
        if (k == i) {
            *len = l;
            return p;
        }
        p += l;
    }
}

static int verbose_body(struct mock_call *c, struct gw_buf *b)
{
    struct media *m = c->api_state;
    int rc = gw_buf_printf(b, "{\"task\":\"%s\",\"language\":\"english\",\"duration\":",
                           m->kind == K_TRANSLATE ? "translate" : "transcribe");
    rc |= append_seconds(b, m->ms);
    rc |= gw_buf_appends(b, ",\"text\":");
    rc |= gw_json_escape(b, m->text, strlen(m->text));
    rc |= gw_buf_appends(b, ",\"segments\":[{\"id\":0,\"seek\":0,\"start\":0.0,\"end\":");
    rc |= append_seconds(b, m->ms);
    rc |= gw_buf_appends(b, ",\"text\":");
    rc |= gw_json_escape(b, m->text, strlen(m->text));
    rc |= gw_buf_appends(b, ",\"tokens\":[],\"temperature\":0.0,\"avg_logprob\":-0.1,"
                            "\"compression_ratio\":1.0,\"no_speech_prob\":0.0}]");
    if (m->words_ts) {
        rc |= gw_buf_appends(b, ",\"words\":[");
        for (int i = 0; i < m->nwords; i++) {
            size_t wl;
            const char *w = word_at(m, i, &wl);
            rc |= gw_buf_appends(b, i ? ",{\"word\":" : "{\"word\":");
            rc |= gw_json_escape(b, w, wl);
            rc |= gw_buf_appends(b, ",\"start\":");
            rc |= append_seconds(b, m->ms * i / m->nwords);
            rc |= gw_buf_appends(b, ",\"end\":");
            rc |= append_seconds(b, m->ms * (i + 1) / m->nwords);
            rc |= gw_buf_appends(b, "}");
        }
        rc |= gw_buf_appends(b, "]");
    }
    rc |= gw_buf_appends(b, ",\"usage\":");
    rc |= append_audio_usage(b, m, 0);
    rc |= gw_buf_appends(b, "}");
    return rc;
}

static int audio_body(struct mock_call *c, struct gw_buf *b)
{
    struct media *m = c->api_state;
    size_t tl = strlen(m->text);
    int rc = 0;
    switch (m->fmt) {
    case F_JSON:
        rc |= gw_buf_appends(b, "{\"text\":");
        rc |= gw_json_escape(b, m->text, tl);
        rc |= gw_buf_appends(b, ",\"usage\":");
        rc |= append_audio_usage(b, m, m->tokens);
        rc |= gw_buf_appends(b, "}");
        break;
    case F_TEXT:
        rc |= gw_buf_append(b, m->text, tl);
        rc |= gw_buf_appends(b, "\n");
        break;
    case F_SRT:
        rc |= gw_buf_appends(b, "1\n00:00:00,000 --> ");
        rc |= append_stamp(b, m->ms, ',');
        rc |= gw_buf_printf(b, "\n%s\n\n", m->text);
        break;
    case F_VTT:
        rc |= gw_buf_appends(b, "WEBVTT\n\n00:00:00.000 --> ");
        rc |= append_stamp(b, m->ms, '.');
        rc |= gw_buf_printf(b, "\n%s\n\n", m->text);
        break;
    case F_VERBOSE:
        rc |= verbose_body(c, b);
        break;
    }
    return rc ? GW_ELIMIT : 0;
}

/* The stream: a delta event a word (the deltas join to the text), then the
 * done event with the usage; no [DONE]. */
static enum mock_frame audio_frame(struct mock_call *c, struct gw_buf *out)
{
    struct media *m = c->api_state;
    int i = c->phase;
    int rc = 0;
    if (i < m->nwords) {
        size_t wl;
        const char *w = word_at(m, i, &wl);
        /* the word and the space after it (none after the last) */
        if (i + 1 < m->nwords)
            wl++;
        rc |= gw_buf_appends(out, "data: {\"type\":\"transcript.text.delta\",\"delta\":");
        rc |= gw_json_escape(out, w, wl);
        rc |= gw_buf_appends(out, "}\n\n");
        c->phase++;
        return rc ? MOCK_FRAME_END : MOCK_FRAME_CONTENT;
    }
    if (i == m->nwords) {
        rc |= gw_buf_appends(out, "data: {\"type\":\"transcript.text.done\",\"text\":");
        rc |= gw_json_escape(out, m->text, strlen(m->text));
        rc |= gw_buf_appends(out, ",\"usage\":");
        rc |= append_audio_usage(out, m, 1);
        rc |= gw_buf_appends(out, "}\n\n");
        c->phase++;
        return rc ? MOCK_FRAME_END : MOCK_FRAME_POST;
    }
    return MOCK_FRAME_END;
}

static int audio_log_extra(const struct mock_call *c, struct gw_buf *out)
{
    const struct media *m = c->api_state;
    if (m == NULL)
        return 0;
    return gw_buf_printf(out,
                         ",\"media\":{\"bytes\":%zu,\"wav\":%s,\"audio_ms\":%lld,"
                         "\"seconds\":%lld}",
                         m->file_len, m->wav ? "true" : "false", (long long)m->ms,
                         (long long)((m->ms + 999) / 1000));
}

const struct mock_api mock_openai_transcriptions = {
    .log_name = "openai.audio.transcriptions",
    .stream_mode = MOCK_STREAM_NEVER,
    .retry_after_always = 1,
    .parse_body = transcribe_parse_body,
    .parse = audio_parse,
    .body = audio_body,
    .frame = audio_frame,
    .error = mock_openai_call_error,
    .log_extra = audio_log_extra,
};

const struct mock_api mock_openai_translations = {
    .log_name = "openai.audio.translations",
    .stream_mode = MOCK_STREAM_NEVER,
    .retry_after_always = 1,
    .parse_body = translate_parse_body,
    .parse = audio_parse,
    .body = audio_body,
    .frame = NULL,
    .error = mock_openai_call_error,
    .log_extra = audio_log_extra,
};

/* ---- speech ---- */

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* The next code point of s (UTF-8; a bad byte counts as itself). */
static unsigned next_cp(const unsigned char **s)
{
    const unsigned char *p = *s;
    unsigned c = *p++;
    int more = c >= 0xf0 ? 3 : c >= 0xe0 ? 2 : c >= 0xc0 ? 1 : 0;
    if (more)
        c &= 0x3f >> more;
    for (; more && (*p & 0xc0) == 0x80; more--)
        c = c << 6 | (*p++ & 0x3f);
    *s = p;
    return c;
}

/* 16-bit mono samples at 8 kHz: 20 ms of a square wave a character, its
 * pitch from the character (300 + (code point mod 64) x 20 Hz), at most
 * 5 s. Into buf at off (room for the samples). */
static void speech_samples(const char *input, unsigned char *out, size_t nsamples)
{
    const unsigned char *p = (const unsigned char *)input;
    size_t k = 0;
    while (*p && k < nsamples) {
        unsigned cp = next_cp(&p);
        unsigned freq = 300 + cp % 64 * 20;
        for (unsigned j = 0; j < SPEECH_PER_CHAR && k < nsamples; j++, k++) {
            /* the half periods elapsed at sample j */
            int v = (j * 2 * freq / SPEECH_RATE) % 2 ? -6000 : 6000;
            put16(out + 2 * k, (unsigned)(v & 0xffff));
        }
    }
}

static const char *speech_parse(struct mock_call *c, json_t *root)
{
    struct media *m = gw_pool_calloc(c->pool, sizeof *m);
    if (m == NULL)
        return "mock: out of memory";
    m->kind = K_SPEECH;
    c->api_state = m;
    const char *input = json_string_value(json_object_get(root, "input"));
    if (input == NULL || input[0] == '\0')
        return "input: field required (a non-empty string)";
    for (const unsigned char *p = (const unsigned char *)input; *p; next_cp(&p))
        m->chars++;
    if (m->chars > 4096)
        return "input: at most 4096 characters";
    json_t *voice = json_object_get(root, "voice");
    if (!json_is_string(voice) &&
        !(json_is_object(voice) && json_is_string(json_object_get(voice, "id"))))
        return "voice: field required (a voice name, or an object with an id)";
    static const char *const fmts[] = {"mp3", "opus", "aac", "flac", "wav", "pcm", NULL};
    static const char *const types[] = {"audio/mpeg", "audio/opus", "audio/aac",
                                        "audio/flac", "audio/wav",  "audio/pcm"};
    m->format = "mp3";
    json_t *rf = json_object_get(root, "response_format");
    if (rf != NULL && !json_is_null(rf)) {
        m->format = json_is_string(rf) ? in_list(json_string_value(rf), fmts) : NULL;
        if (m->format == NULL)
            return "response_format: one of mp3, opus, aac, flac, wav, pcm";
    }
    json_t *speed = json_object_get(root, "speed");
    if (speed != NULL && !json_is_null(speed) &&
        (!json_is_number(speed) || json_number_value(speed) < 0.25 ||
         json_number_value(speed) > 4.0))
        return "speed: a number between 0.25 and 4.0";
    json_t *instr = json_object_get(root, "instructions");
    if (instr != NULL && !json_is_null(instr) && !json_is_string(instr))
        return "instructions: a string";
    size_t nsamples = m->chars * SPEECH_PER_CHAR;
    if (nsamples > SPEECH_MAX_SAMPLES)
        nsamples = SPEECH_MAX_SAMPLES;
    m->ms = (int64_t)(nsamples * 1000 / SPEECH_RATE);
    int fi = 0;
    while (fmts[fi] != m->format)
        fi++;
    c->stream_type = types[fi];
    if (strcmp(m->format, "mp3") == 0) {
        size_t frames = (size_t)((m->ms + MP3_FRAME_MS - 1) / MP3_FRAME_MS);
        m->audio_len = frames * MP3_FRAME;
        m->audio = gw_pool_calloc(c->pool, m->audio_len);
        if (m->audio == NULL)
            return "mock: out of memory";
        for (size_t f = 0; f < frames; f++) {
            /* sync, MPEG-1 Layer III without CRC; 32 kbps, 32 kHz, no
             * padding; mono. Side info and main data zero: silence. */
            static const unsigned char head[4] = {0xff, 0xfb, 0x18, 0xc0};
            memcpy(m->audio + f * MP3_FRAME, head, 4);
        }
    } else {
        int pcm = strcmp(m->format, "pcm") == 0;
        size_t hdr = pcm ? 0 : 44, data = nsamples * 2;
        m->audio_len = hdr + data;
        m->audio = gw_pool_alloc(c->pool, m->audio_len);
        if (m->audio == NULL)
            return "mock: out of memory";
        if (!pcm) {
            unsigned char *h = m->audio;
            memcpy(h, "RIFF", 4);
            put32(h + 4, (uint32_t)(36 + data));
            memcpy(h + 8, "WAVEfmt ", 8);
            put32(h + 16, 16);
            put16(h + 20, 1); /* PCM */
            put16(h + 22, 1); /* mono */
            put32(h + 24, SPEECH_RATE);
            put32(h + 28, SPEECH_RATE * 2);
            put16(h + 32, 2);
            put16(h + 34, 16);
            memcpy(h + 36, "data", 4);
            put32(h + 40, (uint32_t)data);
        }
        speech_samples(input, m->audio + hdr, nsamples);
    }
    c->input_tokens = mock_count_words(input, strlen(input));
    c->ntext = 0;
    c->seen.messages = 1;
    c->seen.system = json_is_string(instr);
    return NULL;
}

/* Never used (speech always streams), but a complete answer would be the
 * audio itself. */
static int speech_body(struct mock_call *c, struct gw_buf *b)
{
    struct media *m = c->api_state;
    return gw_buf_append(b, m->audio, m->audio_len);
}

/* 8 pieces of the audio, --chunk-delay-ms apart; no output tokens. */
static enum mock_frame speech_frame(struct mock_call *c, struct gw_buf *out)
{
    struct media *m = c->api_state;
    int i = c->phase;
    if (i >= SPEECH_PIECES)
        return MOCK_FRAME_END;
    size_t from = m->audio_len * (size_t)i / SPEECH_PIECES;
    size_t to = m->audio_len * (size_t)(i + 1) / SPEECH_PIECES;
    c->phase++;
    c->frame_tokens = 0;
    if (gw_buf_append(out, m->audio + from, to - from) != 0)
        return MOCK_FRAME_END;
    return MOCK_FRAME_CONTENT;
}

/* malformed=N: the Nth piece arrives with its bytes inverted. */
static void speech_malform(struct mock_call *c, struct gw_buf *frame)
{
    (void)c;
    for (size_t i = 0; i < frame->len; i++)
        frame->data[i] = (char)~frame->data[i];
}

static int speech_log_extra(const struct mock_call *c, struct gw_buf *out)
{
    const struct media *m = c->api_state;
    if (m == NULL || m->format == NULL)
        return 0;
    return gw_buf_printf(out,
                         ",\"media\":{\"characters\":%zu,\"format\":\"%s\",\"audio_ms\":%lld,"
                         "\"bytes\":%zu}",
                         m->chars, m->format, (long long)m->ms, m->audio_len);
}

const struct mock_api mock_openai_speech = {
    .log_name = "openai.audio.speech",
    .stream_mode = MOCK_STREAM_ALWAYS,
    .retry_after_always = 1,
    .stream_type = "audio/mpeg",
    .parse = speech_parse,
    .body = speech_body,
    .frame = speech_frame,
    .malform = speech_malform,
    .error = mock_openai_call_error,
    .log_extra = speech_log_extra,
};

/* ---- images ---- */

static const char *const SIZES[] = {"auto",      "256x256",   "512x512",   "1024x1024", "1536x1024",
                                    "1024x1536", "1792x1024", "1024x1792", NULL};
static const char *const QUALITIES[] = {"auto", "standard", "hd", "low", "medium", "high", NULL};

/* The fields generations and edits share, as strings (JSON values already
 * checked to be strings, or multipart parts). */
struct image_req {
    const char *prompt, *n, *size, *quality, *response_format;
    long long n_value; /* from JSON */
};

static const char *image_common(struct mock_call *c, struct media *m, const struct image_req *r)
{
    if (r->prompt == NULL || r->prompt[0] == '\0')
        return "prompt: field required (a non-empty string)";
    m->prompt = r->prompt;
    m->n = 1;
    if (r->n != NULL) {
        char *end;
        long v = strtol(r->n, &end, 10);
        if (end == r->n || *end != '\0' || v < 1 || v > 10)
            return "n: an integer in [1, 10]";
        m->n = (int)v;
    } else if (r->n_value > 0) {
        m->n = (int)r->n_value;
    }
    m->size = "auto";
    if (r->size != NULL && (m->size = in_list(r->size, SIZES)) == NULL)
        return "size: one of auto, 256x256, 512x512, 1024x1024, 1536x1024, 1024x1536, "
               "1792x1024, 1024x1792";
    m->quality = "auto";
    if (r->quality != NULL && (m->quality = in_list(r->quality, QUALITIES)) == NULL)
        return "quality: one of auto, standard, hd, low, medium, high";
    if (r->response_format != NULL) {
        if (strcmp(r->response_format, "url") != 0 && strcmp(r->response_format, "b64_json") != 0)
            return "response_format: 'url' or 'b64_json'";
        m->response_format = r->response_format;
    }
    m->text_tokens = mock_count_words(m->prompt, strlen(m->prompt));
    c->seen.messages = 1;
    c->seen.images = m->images_in;
    return NULL;
}

/* After the fault is resolved: what depends on the model. */
static const char *image_model(struct mock_call *c)
{
    struct media *m = c->api_state;
    m->gpt_image = strncmp(c->model, "gpt-image", 9) == 0;
    if (m->gpt_image && m->response_format != NULL && strcmp(m->response_format, "url") == 0)
        return gw_pool_printf(c->pool,
                              "response_format: 'url' is not supported for %s (it always "
                              "answers b64_json)",
                              c->model);
    m->b64 = m->gpt_image || (m->response_format && strcmp(m->response_format, "b64_json") == 0);
    m->per_image = strcmp(m->quality, "high") == 0 || strcmp(m->quality, "hd") == 0 ? 4160
                   : strcmp(m->quality, "medium") == 0                              ? 1056
                                                                                    : 272;
    c->input_tokens = m->gpt_image ? m->text_tokens + IMAGE_TOKENS_PER_INPUT * m->images_in : 0;
    c->ntext = m->gpt_image ? m->n * m->per_image : 0;
    c->reasoning = 0;
    c->finish = MOCK_FINISH_STOP;
    return NULL;
}

static const char *json_opt_string(json_t *root, const char *key, const char **out,
                                   const char *const *allowed)
{
    json_t *v = json_object_get(root, key);
    *out = NULL;
    if (v == NULL || json_is_null(v))
        return NULL;
    if (!json_is_string(v) || (allowed && !in_list(json_string_value(v), allowed)))
        return "bad";
    *out = json_string_value(v);
    return NULL;
}

static const char *generate_parse(struct mock_call *c, json_t *root)
{
    struct media *m = gw_pool_calloc(c->pool, sizeof *m);
    if (m == NULL)
        return "mock: out of memory";
    m->kind = K_GENERATE;
    c->api_state = m;
    struct image_req r = {0};
    const char *ignored;
    if (json_opt_string(root, "prompt", &r.prompt, NULL))
        return "prompt: field required (a non-empty string)";
    if (mock_json_int(root, "n", 1, 10, &r.n_value) < 0)
        return "n: an integer in [1, 10]";
    if (json_opt_string(root, "size", &r.size, NULL))
        return "size: a string";
    if (json_opt_string(root, "quality", &r.quality, NULL))
        return "quality: a string";
    if (json_opt_string(root, "response_format", &r.response_format, NULL))
        return "response_format: 'url' or 'b64_json'";
    static const char *const styles[] = {"vivid", "natural", NULL};
    static const char *const backgrounds[] = {"transparent", "opaque", "auto", NULL};
    static const char *const formats[] = {"png", "jpeg", "webp", NULL};
    if (json_opt_string(root, "style", &ignored, styles))
        return "style: 'vivid' or 'natural'";
    if (json_opt_string(root, "background", &ignored, backgrounds))
        return "background: one of transparent, opaque, auto";
    if (json_opt_string(root, "output_format", &ignored, formats))
        return "output_format: one of png, jpeg, webp";
    if (json_opt_string(root, "user", &ignored, NULL))
        return "user: a string";
    const char *err = image_common(c, m, &r);
    return err ? err : image_model(c);
}

static const char *edit_parse_body(struct mock_call *c, const char *body, size_t len,
                                   const char **model)
{
    struct media *m = gw_pool_calloc(c->pool, sizeof *m);
    if (m == NULL)
        return "mock: out of memory";
    m->kind = K_EDIT;
    c->api_state = m;
    struct gw_mp_span *sp;
    size_t n = 0;
    const char *err = mp_read(c, body, len, &sp, &n);
    if (err != NULL)
        return err;
    struct image_req r = {0};
    const char *mdl = NULL, *user = NULL;
    int mask = 0;
    for (size_t i = 0; i < n && err == NULL; i++) {
        const struct gw_mp_span *s = &sp[i];
        const char *name = s->name;
        if (strcmp(name, "image") == 0 || strcmp(name, "image[]") == 0) {
            if (!is_png(s))
                err = gw_pool_printf(c->pool, "%s: not a PNG file", name);
            m->images_in++;
        } else if (strcmp(name, "mask") == 0) {
            if (mask++)
                err = "mask: given twice";
            else if (!is_png(s))
                err = "mask: not a PNG file";
        } else if (strcmp(name, "prompt") == 0) {
            err = field(c, s, &r.prompt);
        } else if (strcmp(name, "model") == 0) {
            err = field(c, s, &mdl);
        } else if (strcmp(name, "n") == 0) {
            err = field(c, s, &r.n);
        } else if (strcmp(name, "size") == 0) {
            err = field(c, s, &r.size);
        } else if (strcmp(name, "quality") == 0) {
            err = field(c, s, &r.quality);
        } else if (strcmp(name, "response_format") == 0) {
            err = field(c, s, &r.response_format);
        } else if (strcmp(name, "user") == 0) {
            err = field(c, s, &user);
        } else {
            err = unknown(c, name);
        }
    }
    if (err != NULL)
        return err;
    if (m->images_in == 0)
        return "image: field required";
    if (mdl == NULL || mdl[0] == '\0')
        return "model: field required";
    if ((err = image_common(c, m, &r)) != NULL)
        return err;
    c->seen.files = mask;
    *model = mdl;
    return NULL;
}

static const char *edit_parse(struct mock_call *c, json_t *root)
{
    (void)root;
    return image_model(c);
}

static int image_body(struct mock_call *c, struct gw_buf *b)
{
    struct media *m = c->api_state;
    int rc = gw_buf_printf(b, "{\"created\":%lld,\"data\":[", c->created);
    const char *host = gw_http_req_header(c->req, "host");
    for (int i = 0; i < m->n; i++) {
        rc |= gw_buf_appends(b, i ? ",{" : "{");
        if (m->b64) {
            rc |= gw_buf_appends(b, "\"b64_json\":\"");
            rc |= mock_base64_append(b, mock_png, mock_png_len);
            rc |= gw_buf_appends(b, "\"");
        } else if (host != NULL) {
            rc |= gw_buf_appends(b, "\"url\":");
            char *url = gw_pool_printf(c->pool, "http://%s/v1/mock/images/%llu-%d.png", host,
                                       (unsigned long long)c->n, i);
            rc |= url ? gw_json_escape(b, url, strlen(url)) : GW_ENOMEM;
        } else {
            const struct mock_config *cfg = c->th->sh->cfg;
            rc |= gw_buf_printf(b, "\"url\":\"http://%s:%d/v1/mock/images/%llu-%d.png\"", cfg->host,
                                cfg->port, (unsigned long long)c->n, i);
        }
        rc |= gw_buf_appends(b, ",\"revised_prompt\":");
        rc |= gw_json_escape(b, m->prompt, strlen(m->prompt));
        rc |= gw_buf_appends(b, "}");
    }
    rc |= gw_buf_appends(b, "]");
    if (m->gpt_image) {
        int in = c->input_tokens, out = m->n * m->per_image;
        rc |= gw_buf_printf(b,
                            ",\"usage\":{\"input_tokens\":%d,\"input_tokens_details\":"
                            "{\"text_tokens\":%d,\"image_tokens\":%d},\"output_tokens\":%d,"
                            "\"total_tokens\":%d}",
                            in, m->text_tokens, in - m->text_tokens, out, in + out);
    }
    rc |= gw_buf_appends(b, "}");
    return rc ? GW_ELIMIT : 0;
}

static int image_log_extra(const struct mock_call *c, struct gw_buf *out)
{
    const struct media *m = c->api_state;
    if (m == NULL || m->size == NULL)
        return 0;
    return gw_buf_printf(out,
                         ",\"media\":{\"images\":%d,\"size\":\"%s\",\"quality\":\"%s\","
                         "\"input_images\":%d}",
                         m->n, m->size, m->quality, m->images_in);
}

const struct mock_api mock_openai_images_generations = {
    .log_name = "openai.images.generations",
    .stream_mode = MOCK_STREAM_NEVER,
    .retry_after_always = 1,
    .parse = generate_parse,
    .body = image_body,
    .error = mock_openai_call_error,
    .log_extra = image_log_extra,
};

const struct mock_api mock_openai_images_edits = {
    .log_name = "openai.images.edits",
    .stream_mode = MOCK_STREAM_NEVER,
    .retry_after_always = 1,
    .parse_body = edit_parse_body,
    .parse = edit_parse,
    .body = image_body,
    .error = mock_openai_call_error,
    .log_extra = image_log_extra,
};
