/*
 * /v1/admin/secrets: credentials a provider's credential_ref names.
 *
 * A builtin secret's value is write-only: the body's "value" is sealed
 * here with the master key (cp_secret_seal, AAD = the name) and only the
 * ciphertext and the key's id are stored. The value is never returned,
 * never in an audit row, never logged and never passed to Postgres as a
 * parameter (only the ciphertext is). A vault or aws secret stores its
 * backend_ref (cp_secret_ref.h syntax) and no value.
 */
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "cp_secret_ref.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_pool.h"

static const char *const backends[] = {"builtin", "vault", "aws", NULL};

static int prepare_secret(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    const char *name = json_string_value(json_object_get(obj, "name"));
    const char *backend = json_string_value(json_object_get(obj, "backend"));
    json_t *value = json_object_get(obj, "value");
    json_t *ref = json_object_get(obj, "backend_ref");
    int has_value = value && !json_is_null(value);
    if (strcmp(backend, "builtin") != 0) {
        char msg[256];
        struct cp_secret_ref parsed;
        if (has_value)
            return cp_verr_set(e, 400, "invalid_value", "value",
                               "value: only a builtin secret stores a value; a %s secret names "
                               "it with backend_ref",
                               backend);
        if (!ref || json_is_null(ref))
            return cp_verr_set(e, 400, "missing_field", "backend_ref",
                               "backend_ref: is required for a %s secret (%s)", backend,
                               strcmp(backend, "vault") == 0 ? "vault:<mount>/<path>#<field>"
                                                             : "awssm:<secret-id>[#<field>]");
        if (cp_secret_ref_parse(json_string_value(ref), &parsed, msg, sizeof(msg)) != GW_OK)
            return cp_verr_set(e, 400, "invalid_value", "backend_ref", "backend_ref: %s", msg);
        enum cp_secret_kind want =
            strcmp(backend, "vault") == 0 ? CP_SECRET_VAULT : CP_SECRET_AWSSM;
        int kind_ok = parsed.kind == want;
        cp_secret_ref_free(&parsed);
        if (!kind_ok)
            return cp_verr_set(e, 400, "invalid_value", "backend_ref",
                               "backend_ref: a %s secret needs a %s ref", backend,
                               want == CP_SECRET_VAULT ? "vault:" : "awssm:");
        /* An external secret holds no ciphertext. */
        json_object_set_new(obj, "ciphertext", json_null());
        json_object_set_new(obj, "master_key_id", json_null());
        return GW_OK;
    }
    if (ref && !json_is_null(ref))
        return cp_verr_set(e, 400, "invalid_value", "backend_ref",
                           "backend_ref: a builtin secret has no backend_ref (it stores its "
                           "value, sealed)");
    if (!has_value) {
        /* An update without a value keeps the sealed one, if there is one. */
        json_t *kid = before ? json_object_get(before, "master_key_id") : NULL;
        if (kid && json_is_string(kid))
            return GW_OK;
        return cp_verr_set(e, 400, "missing_field", "value",
                           "value: is required for a builtin secret (it is sealed with the "
                           "master key and never returned)");
    }
    if (!c->master_key)
        return cp_verr_set(e, 503, "master_key_not_configured", "value",
                           "value: cannot be stored: the master key is not configured (set "
                           "LLMGW_MASTER_KEY on the control plane and restart it)");
    unsigned char *blob = NULL;
    size_t bloblen = 0;
    if (cp_secret_seal(c->master_key, name, json_string_value(value), json_string_length(value),
                       &blob, &bloblen) != GW_OK)
        return cp_verr_set(e, 500, "internal", "value", "value: sealing failed");
    char *hex = cp_db_bytea_hex_in(c->pool, blob, bloblen);
    free(blob);
    if (!hex)
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    json_object_set_new(obj, "ciphertext", json_string(hex));
    json_object_set_new(obj, "master_key_id", json_string(c->master_key->id));
    /* The plaintext leaves the object before anything is written or logged. */
    json_object_del(obj, "value");
    return GW_OK;
}

static int check_value(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    if (json_is_null(v))
        return GW_OK;
    if (json_string_length(v) == 0 || json_string_length(v) > CP_SECRET_MAX_PLAINTEXT ||
        strlen(json_string_value(v)) != json_string_length(v))
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be a non-empty string of at most %d bytes without NUL", field,
                           CP_SECRET_MAX_PLAINTEXT);
    return GW_OK;
}

/* A secret a provider names stays; the refusal names the providers. */
static int secret_in_use(struct cp_call *c, const char *key, struct cp_verr *e)
{
    struct cp_db_err err;
    const char *p[] = {key};
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT string_agg(name, ', ' ORDER BY name) FROM providers "
                             "WHERE credential_ref = $1",
                             1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check providers: %s",
                           err.message);
    const char *names = cp_db_value(r);
    if (names)
        return cp_verr_set(e, 409, "in_use", NULL,
                           "secret '%s' is the credential_ref of provider(s) %s; point them "
                           "elsewhere first",
                           key, names);
    return GW_OK;
}

/* A secret's name is what a credential_ref names, so it must parse as a
 * built-in ref (cp_secret_ref_parse): a name with ':' would be taken for a
 * backend ref ("awssm:x") by the snapshot builder. */
static int check_secret_name(struct cp_call *c, const char *field, const json_t *v,
                             struct cp_verr *e)
{
    (void)c;
    char msg[256];
    struct cp_secret_ref parsed;
    int rc = cp_secret_ref_parse(json_string_value(v), &parsed, msg, sizeof(msg));
    if (rc == GW_ENOMEM)
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    int builtin = rc == GW_OK && parsed.kind == CP_SECRET_BUILTIN;
    if (rc == GW_OK)
        cp_secret_ref_free(&parsed);
    if (!builtin)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be a built-in secret name: 1 to %d characters of A-Z a-z "
                           "0-9 . _ - starting with a letter or digit, with no ':' (a ref with "
                           "':' names a Vault or AWS secret; store those with backend and "
                           "backend_ref)",
                           field, CP_SECRET_NAME_MAX);
    return GW_OK;
}

static const struct cp_field secret_fields[] = {
    {.name = "name",
     .type = CP_T_STRING,
     .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME,
     .check = check_secret_name},
    {.name = "backend",
     .type = CP_T_STRING,
     .def = "\"builtin\"",
     .choices = backends,
     .rule = "one of builtin, vault, aws"},
    {.name = "backend_ref", .type = CP_T_STRING, .flags = CP_F_NULLABLE, .max = CP_SECRET_REF_MAX},
    {.name = "value",
     .type = CP_T_STRING,
     .flags = CP_F_VIRTUAL | CP_F_WRITEONLY | CP_F_NULLABLE,
     .max = CP_SECRET_MAX_PLAINTEXT,
     .check = check_value},
    {.name = "ciphertext", .type = CP_T_STRING, .flags = CP_F_HIDDEN},
    {.name = "master_key_id", .type = CP_T_STRING, .flags = CP_F_SERVER},
};

const struct cp_resource cp_res_secrets = {
    .name = "secrets",
    .singular = "secret",
    .table = "secrets",
    .fields = secret_fields,
    .nfields = sizeof(secret_fields) / sizeof(secret_fields[0]),
    .before_delete = secret_in_use,
    .prepare = prepare_secret,
};
