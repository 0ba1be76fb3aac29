/*
 * /v1/admin/prices (price_overrides, addressed as <provider>/<model>) and
 * /v1/admin/catalog (model_catalog, addressed by its id).
 *
 * Money is integer picodollars (10^-12 USD) per unit, 0..10^12: per token,
 * and for media per second of input audio, per input character, per image
 * (docs/pricing.md). A decimal string of USD per unit ("0.000002", "2e-6")
 * is accepted only when it is an exact number of picodollars; it is parsed
 * as digits, never through a double (gw_money_parse, through
 * cp_resource.c's CP_T_MONEY). image_prices, an object of prices per image
 * by size or by quality and size, is checked here as the data plane checks
 * it (dp_snapshot.c's opt_image_prices), and stored with its decimal
 * strings turned into integers.
 */
#include <stdio.h>
#include <string.h>

#include "cp_res.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_money.h"

static const char *const currencies_rule = "three capital letters (ISO 4217), e.g. USD";

static int check_currency(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    const char *s = json_string_value(v);
    if (strlen(s) != 3 || s[0] < 'A' || s[0] > 'Z' || s[1] < 'A' || s[1] > 'Z' || s[2] < 'A' ||
        s[2] > 'Z')
        return cp_verr_set(e, 400, "invalid_value", field, "%s: must be %s", field,
                           currencies_rule);
    return GW_OK;
}

static int check_provider(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    return cp_res_check_ref(c, "providers", "provider", field, v, e);
}

static int check_caps(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    if (json_is_null(v))
        return GW_OK;
    size_t i;
    json_t *cap;
    json_array_foreach(v, i, cap)
    {
        int known = 0;
        for (unsigned b = 1; b && !known; b <<= 1) {
            const char *n = dp_snapshot_cap_name(b);
            known = n && strcmp(n, json_string_value(cap)) == 0;
        }
        if (!known)
            return cp_verr_set(e, 400, "invalid_value", field,
                               "%s[%zu]: must be one of chat, embeddings, vision, tools, "
                               "json_mode, reasoning, transcription, speech, image",
                               field, i);
    }
    return GW_OK;
}

static int check_mode(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    if (json_is_string(v) && json_string_length(v) == 0)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be a non-empty string (LiteLLM's mode: chat, embedding, ...)",
                           field);
    return GW_OK;
}

static int check_image_prices(struct cp_call *c, const char *field, const json_t *v,
                              struct cp_verr *e)
{
    (void)c;
    if (json_is_null(v))
        return GW_OK;
    if (json_object_size(v) > DP_MAX_IMAGE_PRICES)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: at most %d prices (by size, or by quality and size)", field,
                           DP_MAX_IMAGE_PRICES);
    const char *k;
    json_t *pv;
    json_object_foreach((json_t *)v, k, pv)
    {
        char param[96];
        long long pico;
        snprintf(param, sizeof(param), "%s.%.40s", field, k);
        if (!dp_snapshot_image_key_ok(k))
            return cp_verr_set(e, 400, "invalid_value", param,
                               "%s: not a size (\"1024x1024\", \"auto\") or a quality and a "
                               "size (\"hd/1024x1024\")",
                               param);
        if (cp_money_value(pv, &pico) != GW_OK)
            return cp_verr_set(
                e, 400,
                json_is_integer(pv) || json_is_string(pv) ? "invalid_value" : "invalid_type", param,
                "%s: must be an integer number of picodollars per image from 0 "
                "to 10^12, or a decimal string of USD per image that is an exact "
                "number of picodollars (\"0.04\"); floats are refused",
                param);
    }
    return GW_OK;
}

/* Stores image_prices as integers (a decimal string, checked above, is
 * the integer it names exactly). */
static int image_prices_prepare(struct cp_call *c, json_t *obj, const json_t *before,
                                struct cp_verr *e)
{
    (void)c;
    (void)before;
    json_t *ip = json_object_get(obj, "image_prices");
    if (!json_is_object(ip))
        return GW_OK;
    json_t *copy = json_object();
    const char *k;
    json_t *pv;
    long long pico;
    json_object_foreach(ip, k, pv)
    {
        if (!copy || cp_money_value(pv, &pico) != GW_OK ||
            json_object_set_new(copy, k, json_integer(pico))) {
            json_decref(copy);
            return cp_verr_set(e, 500, "internal", NULL, "out of memory");
        }
    }
    json_object_set_new(obj, "image_prices", copy);
    return GW_OK;
}

#define MONEY(n)                                                                                   \
    {                                                                                              \
        .name = n, .type = CP_T_MONEY, .flags = CP_F_NULLABLE                                      \
    }
/* A price of another unit than a token (the rule names the unit). */
#define MONEY_PER(n, unit)                                                                         \
    {                                                                                              \
        .name = n, .type = CP_T_MONEY, .flags = CP_F_NULLABLE, .rule = unit                        \
    }
#define CURRENCY                                                                                   \
    {                                                                                              \
        .name = "currency", .type = CP_T_STRING, .def = "\"USD\"", .check = check_currency         \
    }
/* A price per token class, the media prices, and their currency: the
 * same in overrides and in the catalog. */
#define PRICES                                                                                     \
    MONEY("input_price"), MONEY("output_price"), MONEY("cache_read_price"),                        \
        MONEY("cache_write_5m_price"), MONEY("cache_write_1h_price"), MONEY("reasoning_price"),    \
        MONEY_PER("audio_second_price", "second of input audio"),                                  \
        MONEY_PER("character_price", "character"), MONEY_PER("image_price", "image"),              \
        MONEY("media_input_price"), MONEY("media_output_price"),                                   \
        {.name = "image_prices",                                                                   \
         .type = CP_T_OBJECT,                                                                      \
         .flags = CP_F_NULLABLE,                                                                   \
         .check = check_image_prices},                                                             \
        CURRENCY

static const struct cp_field price_fields[] = {
    {.name = "provider",
     .type = CP_T_STRING,
     .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME,
     .check = check_provider},
    {.name = "model", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED, .max = 256},
    PRICES,
};

const struct cp_resource cp_res_prices = {
    .name = "prices",
    .singular = "price override",
    .table = "price_overrides",
    .fields = price_fields,
    .nfields = sizeof(price_fields) / sizeof(price_fields[0]),
    .key_sql = "t.provider || '/' || t.model",
    .prepare = image_prices_prepare,
};

static const struct cp_field catalog_fields[] = {
    {.name = "id", .type = CP_T_INT, .flags = CP_F_KEY | CP_F_SERVER},
    {.name = "provider",
     .type = CP_T_STRING,
     .flags = CP_F_NULLABLE | CP_F_NAME,
     .check = check_provider},
    {.name = "model", .type = CP_T_STRING, .flags = CP_F_REQUIRED, .max = 256},
    {.name = "context_window",
     .type = CP_T_INT,
     .flags = CP_F_NULLABLE,
     .min = 1,
     .max = 2147483647},
    {.name = "max_output_tokens",
     .type = CP_T_INT,
     .flags = CP_F_NULLABLE,
     .min = 1,
     .max = 2147483647},
    {.name = "capabilities", .type = CP_T_STRLIST, .flags = CP_F_NULLABLE, .check = check_caps},
    PRICES,
    {.name = "mode", .type = CP_T_STRING, .flags = CP_F_NULLABLE, .max = 64, .check = check_mode},
    /* Who last wrote the row: "admin" (this API) or "litellm" (the import,
     * which also records LiteLLM's provider name). */
    {.name = "source", .type = CP_T_STRING, .flags = CP_F_SERVER},
    {.name = "litellm_provider", .type = CP_T_STRING, .flags = CP_F_SERVER},
};

/* A write through the API makes the row the operator's. */
static int catalog_prepare(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    json_object_set_new(obj, "source", json_string("admin"));
    return image_prices_prepare(c, obj, before, e);
}

const struct cp_resource cp_res_catalog = {
    .name = "catalog",
    .singular = "catalog entry",
    .table = "model_catalog",
    .fields = catalog_fields,
    .nfields = sizeof(catalog_fields) / sizeof(catalog_fields[0]),
    .key_sql = "t.id::text",
    .prepare = catalog_prepare,
};
