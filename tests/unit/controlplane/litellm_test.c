/* Tests for controlplane/catalog/cp_litellm.c: LiteLLM's catalog format into
 * model_catalog rows, money read exactly from the numbers' source text. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_litellm.h"
#include "gw_error.h"

static json_t *row_of(const struct cp_litellm *l, const char *model)
{
    size_t i;
    json_t *r;
    json_array_foreach(l->rows, i, r) if (strcmp(json_string_value(json_object_get(r, "model")),
                                                 model) == 0) return r;
    return NULL;
}

static long long num(const json_t *row, const char *k)
{
    json_t *v = json_object_get(row, k);
    CU_ASSERT_TRUE(json_is_integer(v));
    return json_integer_value(v);
}

static int is_null(const json_t *row, const char *k)
{
    json_t *v = json_object_get(row, k);
    return v && json_is_null(v);
}

static char *caps_of(const json_t *row)
{
    return json_dumps(json_object_get(row, "capabilities"), JSON_COMPACT | JSON_ENCODE_ANY);
}

static void expect_caps(const json_t *row, const char *want)
{
    char *s = caps_of(row);
    CU_ASSERT_STRING_EQUAL(s, want);
    free(s);
}

static int parse(const char *doc, struct cp_litellm *l)
{
    char msg[256];
    return cp_litellm_parse(doc, strlen(doc), l, msg, sizeof(msg));
}

static void test_sample_file(void)
{
    FILE *f = fopen(UNIT_DATA_DIR "/model_prices_sample.json", "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    CU_ASSERT_TRUE_FATAL(n > 0 && n < sizeof(buf));
    struct cp_litellm l;
    char msg[256];
    CU_ASSERT_EQUAL_FATAL(cp_litellm_parse(buf, n, &l, msg, sizeof(msg)), GW_OK);
    /* Two entries are rejected: a price per second that is not an exact
     * number of picodollars, and two different media input prices. */
    CU_ASSERT_EQUAL(json_array_size(l.rows), 216);
    CU_ASSERT_EQUAL_FATAL(json_array_size(l.rejected), 2);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(l.rejected, 0), "message")),
        "gemini-3.1-flash-live-preview: input_cost_per_image_token: 1e-06 differs from "
        "input_cost_per_audio_token: one media input price a model");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(l.rejected, 1), "message")),
        "gpt-realtime-whisper: input_cost_per_second: 0.0002833333333333333 is not an exact "
        "number of picodollars");
    CU_ASSERT_EQUAL(l.ignored, 0);
    json_t *c = row_of(&l, "claude-3-7-sonnet-20250219");
    CU_ASSERT_PTR_NOT_NULL_FATAL(c);
    CU_ASSERT_EQUAL(num(c, "input_price"), 3000000);          /* 3e-06 */
    CU_ASSERT_EQUAL(num(c, "output_price"), 15000000);        /* 1.5e-05 */
    CU_ASSERT_EQUAL(num(c, "cache_read_price"), 300000);      /* 3e-07 */
    CU_ASSERT_EQUAL(num(c, "cache_write_5m_price"), 3750000); /* 3.75e-06 */
    CU_ASSERT_EQUAL(num(c, "cache_write_1h_price"), 6000000); /* 6e-06 */
    CU_ASSERT_TRUE(is_null(c, "reasoning_price"));
    CU_ASSERT_EQUAL(num(c, "context_window"), 200000);
    CU_ASSERT_EQUAL(num(c, "max_output_tokens"), 64000);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c, "mode")), "chat");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c, "litellm_provider")), "anthropic");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c, "currency")), "USD");
    expect_caps(c, "[\"chat\",\"vision\",\"tools\",\"json_mode\",\"reasoning\"]");
    json_t *g = row_of(&l, "gemini-2.5-flash");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(num(g, "input_price"), 300000);      /* 3e-07 */
    CU_ASSERT_EQUAL(num(g, "reasoning_price"), 2500000); /* 2.5e-06 */
    CU_ASSERT_EQUAL(num(g, "context_window"), 1048576);
    json_t *o = row_of(&l, "gpt-4o");
    CU_ASSERT_EQUAL(num(o, "input_price"), 2500000); /* 2.5e-06 */
    CU_ASSERT_EQUAL(num(o, "output_price"), 10000000);
    CU_ASSERT_TRUE(is_null(o, "cache_write_1h_price"));
    /* "responses" mode is a chat model served by the Responses API. */
    json_t *pro = row_of(&l, "o1-pro");
    CU_ASSERT_EQUAL(num(pro, "input_price"), 150000000); /* 0.00015 */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(pro, "mode")), "responses");
    char *pc = caps_of(pro);
    CU_ASSERT_PTR_NOT_NULL(strstr(pc, "\"chat\""));
    free(pc);
    json_t *e = row_of(&l, "gemini-embedding-001");
    expect_caps(e, "[\"embeddings\"]");
    CU_ASSERT_EQUAL(num(e, "output_price"), 0);
    CU_ASSERT_PTR_NULL(row_of(&l, "gpt-realtime-whisper"));
    /* Media: audio tokens in (1.25e-06), the transcription mode. */
    json_t *t = row_of(&l, "gpt-4o-mini-transcribe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(num(t, "media_input_price"), 1250000);
    CU_ASSERT_TRUE(is_null(t, "media_output_price"));
    CU_ASSERT_TRUE(is_null(t, "audio_second_price"));
    expect_caps(t, "[\"transcription\"]");
    /* Speech: audio tokens out (1.2e-05); output_cost_per_second ignored. */
    json_t *sp = row_of(&l, "gpt-4o-mini-tts");
    CU_ASSERT_EQUAL(num(sp, "media_output_price"), 12000000);
    CU_ASSERT_TRUE(is_null(sp, "audio_second_price"));
    expect_caps(sp, "[\"speech\"]");
    /* Images: per image (0.039), audio in and image tokens out. */
    json_t *im = row_of(&l, "gemini-2.5-flash-image");
    CU_ASSERT_EQUAL(num(im, "image_price"), 39000000000LL);
    CU_ASSERT_EQUAL(num(im, "media_input_price"), 1000000);   /* 1e-06 */
    CU_ASSERT_EQUAL(num(im, "media_output_price"), 30000000); /* 3e-05 */
    char *ic = caps_of(im);
    CU_ASSERT_PTR_NOT_NULL(strstr(ic, "\"image\""));
    free(ic);
    json_t *gi = row_of(&l, "gpt-image-1");
    CU_ASSERT_EQUAL(num(gi, "media_input_price"), 10000000);  /* 1e-05 */
    CU_ASSERT_EQUAL(num(gi, "media_output_price"), 40000000); /* 4e-05 */
    CU_ASSERT_TRUE(is_null(gi, "image_price"));
    /* Audio in and out on a chat model. */
    json_t *au = row_of(&l, "gpt-4o-audio-preview");
    CU_ASSERT_EQUAL(num(au, "media_input_price"), 40000000);
    CU_ASSERT_EQUAL(num(au, "media_output_price"), 80000000);
    /* A character price of 0 is a price. */
    CU_ASSERT_EQUAL(num(row_of(&l, "gemini-flash-experimental"), "character_price"), 0);
    cp_litellm_free(&l);
}

static void test_inexact_rejected_whole(void)
{
    struct cp_litellm l;
    CU_ASSERT_EQUAL_FATAL(parse("{\"gpt-x\": {\"input_cost_per_token\": 1.234567891234567e-07, "
                                "\"output_cost_per_token\": 2e-06, \"mode\": \"chat\"},"
                                " \"ok-model\": {\"input_cost_per_token\": 1.5E-5, "
                                "\"output_cost_per_token\": 0.000002},"
                                " \"cache-y\": {\"input_cost_per_token\": 1e-06, "
                                "\"cache_creation_input_token_cost_above_1hr\": 0.0000000000001}}",
                                &l),
                          GW_OK);
    CU_ASSERT_EQUAL(json_array_size(l.rows), 1);
    json_t *ok = row_of(&l, "ok-model");
    CU_ASSERT_EQUAL(num(ok, "input_price"), 15000000);
    CU_ASSERT_EQUAL(num(ok, "output_price"), 2000000);
    CU_ASSERT_TRUE(is_null(ok, "capabilities")); /* the entry says nothing about them */
    CU_ASSERT_EQUAL_FATAL(json_array_size(l.rejected), 2);
    json_t *r0 = json_array_get(l.rejected, 0), *r1 = json_array_get(l.rejected, 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r0, "model")), "gpt-x");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r0, "field")), "input_cost_per_token");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(r0, "message")),
        "gpt-x: input_cost_per_token: 1.234567891234567e-07 is not an exact number of picodollars");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(r1, "message")),
                           "cache-y: cache_creation_input_token_cost_above_1hr: 0.0000000000001 "
                           "is not an exact number of picodollars");
    cp_litellm_free(&l);
}

static void expect_rejection(const char *entry, const char *message)
{
    char doc[1024];
    snprintf(doc, sizeof(doc), "{\"m\": %s}", entry);
    struct cp_litellm l;
    CU_ASSERT_EQUAL_FATAL(parse(doc, &l), GW_OK);
    CU_ASSERT_EQUAL(json_array_size(l.rows), 0);
    if (json_array_size(l.rejected) != 1)
        fprintf(stderr, "\n  not rejected: %s\n", entry);
    CU_ASSERT_EQUAL_FATAL(json_array_size(l.rejected), 1);
    const char *got = json_string_value(json_object_get(json_array_get(l.rejected, 0), "message"));
    CU_ASSERT_STRING_EQUAL(got, message);
    if (strcmp(got, message) != 0)
        fprintf(stderr, "\n  got: %s\n", got);
    cp_litellm_free(&l);
}

static void test_field_rules(void)
{
    expect_rejection("{\"input_cost_per_token\": -1e-06}",
                     "m: input_cost_per_token: -1e-06 is negative");
    expect_rejection("{\"output_cost_per_token\": 2}",
                     "m: output_cost_per_token: 2 is above the ceiling of 1 USD per token");
    expect_rejection("{\"output_cost_per_token\": 1e400}",
                     "m: output_cost_per_token: 1e400 is out of range (more than "
                     "9223372.036854775807)");
    expect_rejection("{\"input_cost_per_token\": true}",
                     "m: input_cost_per_token: must be a number (USD per token)");
    expect_rejection("{\"input_cost_per_token\": \"cheap\"}",
                     "m: input_cost_per_token: cheap is not a decimal number");
    expect_rejection("{\"cache_read_input_token_cost\": 5e-7, \"supports_vision\": \"yes\"}",
                     "m: supports_vision: must be true or false");
    expect_rejection("{\"max_input_tokens\": 12.5}",
                     "m: max_input_tokens: 12.5 is not a whole number of tokens from 1 to "
                     "2147483647");
    expect_rejection("{\"max_output_tokens\": 0}",
                     "m: max_output_tokens: 0 is not a whole number of tokens from 1 to "
                     "2147483647");
    expect_rejection("{\"max_output_tokens\": 99999999999}",
                     "m: max_output_tokens: 99999999999 is not a whole number of tokens from 1 "
                     "to 2147483647");
    expect_rejection("{\"mode\": \"\"}", "m: mode: must be a non-empty string of at most 64 bytes");
    /* (A number where a string is expected reads as its text: the
     * document's numbers all arrive as strings.) */
    expect_rejection("{\"litellm_provider\": [\"openai\"]}",
                     "m: litellm_provider: must be a non-empty string of at most 128 bytes");
    /* The first problem is the one named. */
    expect_rejection("{\"input_cost_per_token\": 1e-13, \"output_cost_per_token\": -1}",
                     "m: input_cost_per_token: 1e-13 is not an exact number of picodollars");
    /* A price written as a string is read the same way. */
    struct cp_litellm l;
    CU_ASSERT_EQUAL_FATAL(parse("{\"s\": {\"input_cost_per_token\": \"3e-06\", "
                                "\"output_cost_per_token\": null, \"mode\": \"image_generation\", "
                                "\"supports_vision\": false, \"max_input_tokens\": 4096}}",
                                &l),
                          GW_OK);
    json_t *s = row_of(&l, "s");
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_EQUAL(num(s, "input_price"), 3000000);
    CU_ASSERT_TRUE(is_null(s, "output_price"));
    CU_ASSERT_EQUAL(num(s, "context_window"), 4096);
    expect_caps(s, "[\"image\"]"); /* the mode grants image, the false flag nothing */
    cp_litellm_free(&l);
}

static void test_media_prices(void)
{
    struct cp_litellm l;
    CU_ASSERT_EQUAL_FATAL(
        parse("{\"w\": {\"input_cost_per_second\": 0.0001, \"mode\": \"audio_transcription\"},"
              " \"t\": {\"input_cost_per_character\": 1.5e-05, \"mode\": \"audio_speech\"},"
              " \"d\": {\"output_cost_per_image\": 0.04, \"mode\": \"image_edit\"},"
              " \"same\": {\"input_cost_per_audio_token\": 1e-06, \"input_cost_per_image_token\": "
              "0.000001, \"output_cost_per_image_token\": 4e-05, \"mode\": \"chat\"},"
              " \"img\": {\"input_cost_per_image_token\": 5e-06, \"output_cost_per_audio_token\": "
              "null, \"mode\": \"image_generation\"}}",
              &l),
        GW_OK);
    CU_ASSERT_EQUAL(json_array_size(l.rejected), 0);
    json_t *w = row_of(&l, "w"), *t = row_of(&l, "t"), *d = row_of(&l, "d");
    json_t *same = row_of(&l, "same"), *img = row_of(&l, "img");
    CU_ASSERT_FATAL(w && t && d && same && img);
    CU_ASSERT_EQUAL(num(w, "audio_second_price"), 100000000);
    expect_caps(w, "[\"transcription\"]");
    CU_ASSERT_EQUAL(num(t, "character_price"), 15000000);
    expect_caps(t, "[\"speech\"]");
    CU_ASSERT_EQUAL(num(d, "image_price"), 40000000000LL);
    expect_caps(d, "[\"image\"]");
    /* The same price written two ways is one price. */
    CU_ASSERT_EQUAL(num(same, "media_input_price"), 1000000);
    CU_ASSERT_EQUAL(num(same, "media_output_price"), 40000000);
    expect_caps(same, "[\"chat\"]");
    CU_ASSERT_EQUAL(num(img, "media_input_price"), 5000000);
    CU_ASSERT_TRUE(is_null(img, "media_output_price"));
    CU_ASSERT_TRUE(is_null(img, "audio_second_price"));
    CU_ASSERT_TRUE(is_null(img, "character_price"));
    CU_ASSERT_TRUE(is_null(img, "image_price"));
    cp_litellm_free(&l);
    /* One media price a side: the second field is named. */
    expect_rejection(
        "{\"input_cost_per_audio_token\": 1e-06, \"input_cost_per_image_token\": 2e-06}",
        "m: input_cost_per_image_token: 2e-06 differs from input_cost_per_audio_token: "
        "one media input price a model");
    expect_rejection("{\"output_cost_per_audio_token\": 1e-06, \"output_cost_per_image_token\": "
                     "0}",
                     "m: output_cost_per_image_token: 0 differs from output_cost_per_audio_token: "
                     "one media output price a model");
    /* Exact, and below the ceiling of a unit per unit, as the token prices. */
    expect_rejection("{\"input_cost_per_second\": 0.0002833333333333333}",
                     "m: input_cost_per_second: 0.0002833333333333333 is not an exact number of "
                     "picodollars");
    expect_rejection("{\"output_cost_per_image\": 1.5}",
                     "m: output_cost_per_image: 1.5 is above the ceiling of 1 USD per image");
    expect_rejection("{\"input_cost_per_character\": -1e-06}",
                     "m: input_cost_per_character: -1e-06 is negative");
    expect_rejection("{\"input_cost_per_second\": false}",
                     "m: input_cost_per_second: must be a number (USD per second)");
    expect_rejection("{\"input_cost_per_image_token\": 1e-13}",
                     "m: input_cost_per_image_token: 1e-13 is not an exact number of "
                     "picodollars");
    /* Per-pixel and per-input-image prices stay ignored. */
    CU_ASSERT_EQUAL_FATAL(parse("{\"p\": {\"input_cost_per_pixel\": 1.9e-08, "
                                "\"input_cost_per_image\": 0.0000000000000001, \"mode\": "
                                "\"image_generation\"}}",
                                &l),
                          GW_OK);
    CU_ASSERT_EQUAL(json_array_size(l.rows), 1);
    CU_ASSERT_TRUE(is_null(row_of(&l, "p"), "image_price"));
    cp_litellm_free(&l);
}

static void test_document_shape(void)
{
    struct cp_litellm l;
    char msg[256];
    /* sample_spec and entries that are not objects are ignored. */
    CU_ASSERT_EQUAL_FATAL(parse("{\"sample_spec\": {\"input_cost_per_token\": 0.1234567891234567},"
                                " \"note\": \"x\", \"n\": 5, \"a\": {\"mode\": \"chat\"}}",
                                &l),
                          GW_OK);
    CU_ASSERT_EQUAL(l.ignored, 3);
    CU_ASSERT_EQUAL(json_array_size(l.rows), 1);
    CU_ASSERT_EQUAL(json_array_size(l.rejected), 0);
    expect_caps(row_of(&l, "a"), "[\"chat\"]");
    cp_litellm_free(&l);
    /* Model ids are bounded and printable. */
    char big[400];
    snprintf(big, sizeof(big), "{\"%0300d\": {}}", 7);
    CU_ASSERT_EQUAL_FATAL(parse(big, &l), GW_OK);
    CU_ASSERT_EQUAL(json_array_size(l.rejected), 1);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(l.rejected, 0), "field")), "model");
    cp_litellm_free(&l);
    /* Not a catalog: the message gives a position, not the text. */
    const char *bad = "{\"a\": {\"input_cost_per_token\": 1e-6,}}";
    CU_ASSERT_EQUAL(cp_litellm_parse(bad, strlen(bad), &l, msg, sizeof(msg)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "line 1, column"));
    CU_ASSERT_PTR_NULL(l.rows);
    const char *dup = "{\"a\": {},\n \"a\": {}}";
    CU_ASSERT_EQUAL(cp_litellm_parse(dup, strlen(dup), &l, msg, sizeof(msg)), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(msg, "the document is not valid JSON: a duplicate key at line 2");
    CU_ASSERT_EQUAL(cp_litellm_parse("[1]", 3, &l, msg, sizeof(msg)), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(msg, "the document must be a JSON object of model entries");
    CU_ASSERT_EQUAL(cp_litellm_parse("", 0, &l, msg, sizeof(msg)), GW_EINVAL);
    char deep[140];
    memset(deep, '[', 70);
    memset(deep + 70, ']', 70);
    CU_ASSERT_EQUAL(cp_litellm_parse(deep, sizeof(deep), &l, msg, sizeof(msg)), GW_EINVAL);
    CU_ASSERT_STRING_EQUAL(msg, "the document is nested deeper than 64 levels");
}

static CU_TestInfo tests[] = {
    {"the sample catalog: exact prices, limits, capabilities", test_sample_file},
    {"an inexact price rejects its entry whole, naming model and field",
     test_inexact_rejected_whole},
    {"field rules, each refusal naming the field", test_field_rules},
    {"the document: ignored keys, model ids, malformed text", test_document_shape},
    {"media prices and modes: exact, one media price a side", test_media_prices},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
