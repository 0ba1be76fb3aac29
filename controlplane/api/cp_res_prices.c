/*
 * /v1/admin/prices (price_overrides, addressed as <provider>/<model>) and
 * /v1/admin/catalog (model_catalog, addressed by its id).
 *
 * Money is integer picodollars (10^-12 USD) per token, 0..10^12. A decimal
 * string of USD per token ("0.000002", "2e-6") is accepted only when it is
 * an exact number of picodollars; it is parsed as digits, never through a
 * double (gw_money_parse, through cp_resource.c's CP_T_MONEY).
 */
#include <string.h>

#include "cp_res.h"
#include "dp_snapshot.h"
#include "gw_error.h"

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
                               "json_mode, reasoning",
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

#define MONEY(n)                                                                                   \
    {                                                                                              \
        .name = n, .type = CP_T_MONEY, .flags = CP_F_NULLABLE                                      \
    }
#define CURRENCY                                                                                   \
    {                                                                                              \
        .name = "currency", .type = CP_T_STRING, .def = "\"USD\"", .check = check_currency         \
    }
/* A price per token class, and its currency: the same in overrides and in
 * the catalog. */
#define PRICES                                                                                     \
    MONEY("input_price"), MONEY("output_price"), MONEY("cache_read_price"),                        \
        MONEY("cache_write_5m_price"), MONEY("cache_write_1h_price"), MONEY("reasoning_price"),    \
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
    (void)c;
    (void)before;
    (void)e;
    json_object_set_new(obj, "source", json_string("admin"));
    return GW_OK;
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
