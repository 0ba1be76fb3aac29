/*
 * /v1/admin/keys (API keys of the data plane).
 *
 * Creating one returns its plaintext once, in the 201 answer ("key"):
 * "llmgw-" + 64 hex digits (32 random bytes). Only its SHA-256 hex is
 * stored (and a short display prefix); no GET, audit row or log line ever
 * carries the plaintext or the hash. /v1/admin/admin-tokens
 * (cp_res_admin_tokens.c) makes its tokens the same way.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "gw_crypto.h"
#include "gw_error.h"

#define DISPLAY_LEN 14 /* "llmgw-" and 8 hex digits */

static const char *const key_statuses[] = {"active", "disabled", NULL};

static int digits(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return 0;
    return 1;
}

/* RFC 3339: 2030-01-31T23:59:59[.frac](Z|+hh:mm|-hh:mm); a space for the
 * T is accepted too (what Postgres writes). */
static int check_time(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    if (json_is_null(v))
        return GW_OK;
    const char *s = json_string_value(v);
    size_t n = strlen(s);
    int ok = n >= 20 && digits(s, 4) && s[4] == '-' && digits(s + 5, 2) && s[7] == '-' &&
             digits(s + 8, 2) && (s[10] == 'T' || s[10] == ' ') && digits(s + 11, 2) &&
             s[13] == ':' && digits(s + 14, 2) && s[16] == ':' && digits(s + 17, 2);
    const char *p = s + 19;
    if (ok && *p == '.') {
        p++;
        if (!isdigit((unsigned char)*p))
            ok = 0;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (ok) {
        if (*p == 'Z')
            ok = p[1] == '\0';
        else if (*p == '+' || *p == '-')
            ok = strlen(p) == 6 && digits(p + 1, 2) && p[3] == ':' && digits(p + 4, 2);
        else
            ok = 0;
    }
    if (ok) {
        int mo = (s[5] - '0') * 10 + (s[6] - '0'), d = (s[8] - '0') * 10 + (s[9] - '0');
        int h = (s[11] - '0') * 10 + (s[12] - '0'), mi = (s[14] - '0') * 10 + (s[15] - '0');
        int se = (s[17] - '0') * 10 + (s[18] - '0');
        ok = mo >= 1 && mo <= 12 && d >= 1 && d <= 31 && h <= 23 && mi <= 59 && se <= 59;
    }
    if (!ok)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be an RFC 3339 timestamp with a zone, e.g. "
                           "2030-01-31T23:59:59Z (or null: no expiry)",
                           field);
    return GW_OK;
}

static int check_team(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    return cp_res_check_ref(c, "teams", "team", field, v, e);
}

static int check_project(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    return cp_res_check_ref(c, "projects", "project", field, v, e);
}

/* A key's project belongs to its team. */
static int check_key(struct cp_call *c, const json_t *obj, struct cp_verr *e)
{
    json_t *team = json_object_get(obj, "team");
    json_t *project = json_object_get(obj, "project");
    if (!json_is_string(project))
        return GW_OK;
    struct cp_db_err err;
    const char *p[] = {json_string_value(project)};
    PGresult *r =
        cp_db_exec(c->db, c->pool, "SELECT team FROM projects WHERE name = $1", 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", "project", "project: cannot check: %s",
                           err.message);
    const char *owner = cp_db_value(r);
    if (owner && (!json_is_string(team) || strcmp(owner, json_string_value(team)) != 0))
        return cp_verr_set(e, 400, "invalid_value", "project",
                           "project: '%s' belongs to team '%s'; set team to '%s'", p[0], owner,
                           owner);
    return GW_OK;
}

static int prepare_key(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    if (before)
        return GW_OK; /* an update never touches the secret part */
    char *plain = cp_res_new_token(c, CP_RES_TOKEN_PREFIX);
    if (!plain)
        return cp_verr_set(e, 500, "internal", NULL, "the random generator failed");
    char hash[65];
    gw_sha256_hex(plain, strlen(plain), hash);
    json_object_set_new(obj, "hash", json_string(hash));
    json_object_set_new(obj, "prefix", json_stringn(plain, DISPLAY_LEN));
    c->reveal_field = "key";
    c->reveal_value = plain;
    return GW_OK;
}

static const struct cp_field key_fields[] = {
    {.name = "id", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "name", .type = CP_T_STRING, .def = "\"\"", .max = 256},
    {.name = "prefix", .type = CP_T_STRING, .flags = CP_F_SERVER},
    {.name = "hash", .type = CP_T_STRING, .flags = CP_F_HIDDEN},
    {.name = "status",
     .type = CP_T_STRING,
     .def = "\"active\"",
     .choices = key_statuses,
     .rule = "one of active, disabled"},
    {.name = "expires_at", .type = CP_T_STRING, .flags = CP_F_NULLABLE, .check = check_time},
    {.name = "team", .type = CP_T_STRING, .flags = CP_F_NULLABLE | CP_F_NAME, .check = check_team},
    {.name = "project",
     .type = CP_T_STRING,
     .flags = CP_F_NULLABLE | CP_F_NAME,
     .check = check_project},
    CP_RES_ALLOWLIST_FIELDS,
    CP_RES_CACHE_TTL_FIELD,
    CP_RES_GUARD_POLICY_FIELD,
};

const struct cp_resource cp_res_keys = {
    .name = "keys",
    .singular = "key",
    .table = "api_keys",
    .fields = key_fields,
    .nfields = sizeof(key_fields) / sizeof(key_fields[0]),
    .check = check_key,
    .prepare = prepare_key,
    .key_prefix = "key_",
};
