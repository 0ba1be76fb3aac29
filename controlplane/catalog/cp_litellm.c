#include "cp_litellm.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_money.h"

#define MAX_DEPTH 64
#define MAX_MODEL 256 /* the admin API's bound on a catalog model id */

/* LiteLLM's price fields and the model_catalog columns they fill (USD per
 * unit, as decimals): per token, per second of input audio, per input
 * character, per output image. The other cost fields (batch, priority,
 * flex, tiers above N tokens, per pixel, per input image, per second of
 * output audio or video, audio cache prices) have no column and are
 * ignored (docs/pricing.md). */
static const struct {
    const char *field, *column, *unit;
} prices[] = {
    {"input_cost_per_token", "input_price", "token"},
    {"output_cost_per_token", "output_price", "token"},
    {"cache_read_input_token_cost", "cache_read_price", "token"},
    {"cache_creation_input_token_cost", "cache_write_5m_price", "token"},
    {"cache_creation_input_token_cost_above_1hr", "cache_write_1h_price", "token"},
    {"output_cost_per_reasoning_token", "reasoning_price", "token"},
    {"input_cost_per_second", "audio_second_price", "second"},
    {"input_cost_per_character", "character_price", "character"},
    {"output_cost_per_image", "image_price", "image"},
};

/* The media token prices: LiteLLM prices audio and image tokens apart, a
 * model has one media price a side (the data plane cannot tell an audio
 * token from an image token in a provider's usage). Both fields of a side
 * present and different: the entry is rejected, naming the second. */
static const struct {
    const char *audio, *image, *column, *side;
} media[] = {
    {"input_cost_per_audio_token", "input_cost_per_image_token", "media_input_price", "input"},
    {"output_cost_per_audio_token", "output_cost_per_image_token", "media_output_price", "output"},
};

/* Flags and the capability each one grants (docs/pricing.md). */
static const struct {
    const char *field, *cap;
} flags[] = {
    {"supports_vision", "vision"},
    {"supports_function_calling", "tools"},
    {"supports_response_schema", "json_mode"},
    {"supports_reasoning", "reasoning"},
};

/* LiteLLM's modes and the capability each grants: chat ("responses":
 * served by the Responses API only), embeddings, and the media endpoints.
 * Other modes (completion, moderation, rerank, realtime, video, ...) grant
 * none. */
static const char *mode_cap(const char *mode)
{
    static const struct {
        const char *mode, *cap;
    } modes[] = {
        {"chat", "chat"},
        {"responses", "chat"},
        {"embedding", "embeddings"},
        {"audio_transcription", "transcription"},
        {"audio_speech", "speech"},
        {"image_generation", "image"},
        {"image_edit", "image"},
    };
    for (size_t i = 0; i < sizeof(modes) / sizeof(*modes); i++)
        if (strcmp(mode, modes[i].mode) == 0)
            return modes[i].cap;
    return NULL;
}

struct entry {
    const char *model;
    json_t *rejected;
    int failed;
};

/* Rejects the entry: one message naming model and field. */
__attribute__((format(printf, 3, 4))) static void reject(struct entry *en, const char *field,
                                                         const char *fmt, ...)
{
    if (en->failed)
        return;
    en->failed = 1;
    char detail[256], msg[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(msg, sizeof(msg), "%s: %s: %s", en->model, field, detail);
    json_array_append_new(en->rejected, json_pack("{s:s,s:s,s:s}", "model", en->model, "field",
                                                  field, "message", msg));
}

/* A value's source text: numbers arrive as strings (gw_json_quote_numbers),
 * and a string is taken the same way. NULL for other types. */
static const char *text_of(const json_t *v)
{
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static json_t *price(struct entry *en, const json_t *o, const char *field, const char *unit)
{
    json_t *v = json_object_get(o, field);
    if (!v || json_is_null(v))
        return json_null();
    const char *t = text_of(v);
    const char *why = "is not a decimal number";
    int64_t pico;
    if (!t) {
        reject(en, field, "must be a number (USD per %s)", unit);
        return NULL;
    }
    if (gw_money_parse(t, json_string_length(v), &pico, &why) != GW_OK) {
        reject(en, field, "%.64s %s", t, why);
        return NULL;
    }
    if (pico < 0) {
        reject(en, field, "%.64s is negative", t);
        return NULL;
    }
    if (pico > GW_PICO_PER_UNIT) {
        reject(en, field, "%.64s is above the ceiling of 1 USD per %s", t, unit);
        return NULL;
    }
    return json_integer(pico);
}

/* A count of tokens: digits only, 1 to 2^31 - 1 (an integer column). */
static json_t *tokens(struct entry *en, const json_t *o, const char *field)
{
    json_t *v = json_object_get(o, field);
    if (!v || json_is_null(v))
        return json_null();
    const char *t = text_of(v);
    long long n = 0;
    size_t i = 0;
    for (; t && t[i] >= '0' && t[i] <= '9' && n <= 2147483647LL; i++)
        n = n * 10 + (t[i] - '0');
    if (!t || i == 0 || t[i] || n < 1 || n > 2147483647LL) {
        reject(en, field, "%.64s is not a whole number of tokens from 1 to 2147483647",
               t ? t : "the value");
        return NULL;
    }
    return json_integer(n);
}

/* A short name: a non-empty string of at most max bytes, or absent. */
static json_t *name(struct entry *en, const json_t *o, const char *field, size_t max)
{
    json_t *v = json_object_get(o, field);
    if (!v || json_is_null(v))
        return json_null();
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max) {
        reject(en, field, "must be a non-empty string of at most %zu bytes", max);
        return NULL;
    }
    return json_incref(v);
}

static int model_id_ok(const char *m)
{
    size_t n = strlen(m);
    if (n == 0 || n > MAX_MODEL)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)m[i] < 0x20 || m[i] == 0x7f)
            return 0;
    return 1;
}

/* The row for one entry, or NULL (rejected, with its message appended). */
static json_t *entry_row(const char *model, const json_t *o, json_t *rejected)
{
    struct entry en = {.model = model, .rejected = rejected};
    if (!model_id_ok(model)) {
        reject(&en, "model", "the model id must be 1 to %d bytes without control characters",
               MAX_MODEL);
        return NULL;
    }
    json_t *row = json_pack("{s:s,s:s}", "model", model, "currency", "USD");
    if (!row)
        return NULL;
    for (size_t i = 0; i < sizeof(prices) / sizeof(*prices); i++) {
        json_t *p = price(&en, o, prices[i].field, prices[i].unit);
        if (p)
            json_object_set_new(row, prices[i].column, p);
    }
    for (size_t i = 0; i < sizeof(media) / sizeof(*media); i++) {
        json_t *a = price(&en, o, media[i].audio, "token");
        json_t *im = price(&en, o, media[i].image, "token");
        if (a && im && !json_is_null(a) && !json_is_null(im) && !json_equal(a, im))
            reject(&en, media[i].image, "%.64s differs from %s: one media %s price a model",
                   text_of(json_object_get(o, media[i].image)), media[i].audio, media[i].side);
        if (a && im)
            json_object_set_new(row, media[i].column, json_incref(json_is_null(a) ? im : a));
        json_decref(a);
        json_decref(im);
    }
    json_t *mode = name(&en, o, "mode", 64);
    json_t *prov = name(&en, o, "litellm_provider", 128);
    json_t *ctx = tokens(&en, o, "max_input_tokens");
    json_t *out = tokens(&en, o, "max_output_tokens");
    /* Capabilities in the snapshot's order: chat, embeddings, then flags. */
    json_t *caps = json_array();
    const char *mc = json_is_string(mode) ? mode_cap(json_string_value(mode)) : NULL;
    int said = json_is_string(mode); /* does the entry say anything about capabilities? */
    if (mc)
        json_array_append_new(caps, json_string(mc));
    for (size_t i = 0; i < sizeof(flags) / sizeof(*flags); i++) {
        json_t *v = json_object_get(o, flags[i].field);
        if (!v || json_is_null(v))
            continue;
        said = 1;
        if (!json_is_boolean(v))
            reject(&en, flags[i].field, "must be true or false");
        else if (json_is_true(v))
            json_array_append_new(caps, json_string(flags[i].cap));
    }
    if (!said) {
        json_decref(caps);
        caps = json_null(); /* unknown, not "none" */
    }
    if (mode)
        json_object_set_new(row, "mode", mode);
    if (prov)
        json_object_set_new(row, "litellm_provider", prov);
    if (ctx)
        json_object_set_new(row, "context_window", ctx);
    if (out)
        json_object_set_new(row, "max_output_tokens", out);
    json_object_set_new(row, "capabilities", caps);
    if (en.failed) {
        json_decref(row);
        return NULL;
    }
    return row;
}

int cp_litellm_parse(const char *text, size_t n, struct cp_litellm *out, char *msg, size_t msglen)
{
    memset(out, 0, sizeof(*out));
    struct gw_buf q;
    gw_buf_init(&q, 0);
    int rc = gw_json_quote_numbers(text, n, MAX_DEPTH, &q);
    if (rc == GW_ENOMEM || rc == GW_ELIMIT) {
        gw_buf_free(&q);
        snprintf(msg, msglen, "out of memory");
        return GW_ENOMEM;
    }
    json_error_t je;
    if (rc != GW_OK) {
        /* Only jansson knows where: ask it about the original text (its
         * message may quote the text; only the position is given). */
        json_t *j = json_loadb(text, n, JSON_DECODE_ANY, &je);
        if (j)
            snprintf(msg, msglen, "the document is nested deeper than %d levels", MAX_DEPTH);
        else
            snprintf(msg, msglen, "the document is not valid JSON: malformed at line %d, column %d",
                     je.line, je.column);
        json_decref(j);
        gw_buf_free(&q);
        return GW_EINVAL;
    }
    /* Quoting adds no newline: jansson's lines are the document's. */
    json_t *doc = json_loadb(q.data, q.len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
    gw_buf_free(&q);
    if (!doc) {
        snprintf(msg, msglen, "the document is not valid JSON: %s at line %d",
                 strstr(je.text, "duplicate") ? "a duplicate key" : "malformed", je.line);
        return GW_EINVAL;
    }
    if (!json_is_object(doc)) {
        json_decref(doc);
        snprintf(msg, msglen, "the document must be a JSON object of model entries");
        return GW_EINVAL;
    }
    out->rows = json_array();
    out->rejected = json_array();
    if (!out->rows || !out->rejected) {
        json_decref(doc);
        cp_litellm_free(out);
        snprintf(msg, msglen, "out of memory");
        return GW_ENOMEM;
    }
    /* Document order (jansson keeps insertion order when iterating). */
    const char *model;
    json_t *o;
    json_object_foreach(doc, model, o)
    {
        if (strcmp(model, "sample_spec") == 0 || !json_is_object(o)) {
            out->ignored++;
            continue;
        }
        json_t *row = entry_row(model, o, out->rejected);
        if (row)
            json_array_append_new(out->rows, row);
    }
    json_decref(doc);
    return GW_OK;
}

void cp_litellm_free(struct cp_litellm *l)
{
    json_decref(l->rows);
    json_decref(l->rejected);
    l->rows = l->rejected = NULL;
}
