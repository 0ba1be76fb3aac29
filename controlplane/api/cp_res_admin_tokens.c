/*
 * /v1/admin/admin-tokens: the admin API's scoped tokens (read, operator,
 * admin; cp_api.c checks them).
 *
 * Creating one returns its plaintext once, in the 201 answer ("token"):
 * "llmgw-admin-" + 64 hex digits (32 random bytes). Only its SHA-256 hex is
 * stored; no GET, audit row or log line ever carries the plaintext or the
 * hash.
 */
#include <string.h>

#include "cp_res.h"
#include "gw_crypto.h"
#include "gw_error.h"

static int check_token_name(struct cp_call *c, const char *field, const json_t *v,
                            struct cp_verr *e)
{
    (void)c;
    if (strcmp(json_string_value(v), "bootstrap") == 0)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: 'bootstrap' is reserved (the audit actor of LLMGW_ADMIN_TOKEN)",
                           field);
    return GW_OK;
}

static int prepare_token(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    if (before)
        return GW_OK;
    char *plain = cp_res_new_token(c, CP_RES_TOKEN_PREFIX "admin-");
    if (!plain)
        return cp_verr_set(e, 500, "internal", NULL, "the random generator failed");
    char hash[65];
    gw_sha256_hex(plain, strlen(plain), hash);
    json_object_set_new(obj, "hash", json_string(hash));
    c->reveal_field = "token";
    c->reveal_value = plain;
    return GW_OK;
}

static const struct cp_field token_fields[] = {
    {.name = "id", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "name",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED | CP_F_NAME,
     .check = check_token_name},
    {.name = "scope",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = (const char *const[]){"read", "operator", "admin", NULL},
     .rule = "read (GET only), operator (everything but admin tokens) or admin"},
    {.name = "hash", .type = CP_T_STRING, .flags = CP_F_HIDDEN},
};

const struct cp_resource cp_res_admin_tokens = {
    .name = "admin-tokens",
    .singular = "admin token",
    .table = "admin_tokens",
    .fields = token_fields,
    .nfields = sizeof(token_fields) / sizeof(token_fields[0]),
    .prepare = prepare_token,
    .key_prefix = "adm_",
};
