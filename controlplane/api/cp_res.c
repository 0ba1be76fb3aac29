/*
 * The admin API's resources (cp_resource.h), the list cp_api routes by,
 * and the checks their declarations (cp_res_<name>.c, one per resource)
 * share (cp_res.h).
 */
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_pool.h"

const struct cp_resource *const cp_resources[] = {
    &cp_res_providers, &cp_res_secrets, &cp_res_routes,      &cp_res_keys,
    &cp_res_teams,     &cp_res_prices,  &cp_res_catalog,     &cp_res_admin_tokens,
    &cp_res_projects,  &cp_res_limits,  &cp_res_guard_rules, NULL};

char *cp_res_new_token(struct cp_call *c, const char *prefix)
{
    unsigned char rnd[32];
    char hex[65];
    if (gw_random_bytes(rnd, sizeof(rnd)) != GW_OK)
        return NULL;
    gw_hex_encode(rnd, sizeof(rnd), hex);
    return gw_pool_printf(c->pool, "%s%s", prefix, hex);
}

int cp_res_check_ref(struct cp_call *c, const char *table, const char *what, const char *field,
                     const json_t *v, struct cp_verr *e)
{
    if (json_is_null(v))
        return GW_OK;
    struct cp_db_err err;
    const char *p[] = {json_string_value(v)};
    const char *sql = gw_pool_printf(c->pool, "SELECT 1 FROM %s WHERE name = $1", table);
    PGresult *r = sql ? cp_db_exec(c->db, c->pool, sql, 1, p, &err) : NULL;
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", field, "%s: cannot check: %s", field,
                           sql ? err.message : "out of memory");
    if (PQntuples(r) == 0)
        return cp_verr_set(e, 400, "dangling_reference", field,
                           "%s: no %s named '%s'; create it first", field, what, p[0]);
    return GW_OK;
}

int cp_res_in_use(struct cp_call *c, const char *sql, const char *what, const char *key,
                  const char *holders, struct cp_verr *e)
{
    struct cp_db_err err;
    const char *p[] = {key};
    PGresult *r = cp_db_exec(c->db, c->pool, sql, 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check: %s", err.message);
    const char *n = cp_db_value(r);
    if (n && strcmp(n, "0") != 0)
        return cp_verr_set(e, 409, "in_use", NULL,
                           "%s '%s' still has %s %s; move or delete them first", what, key, n,
                           holders);
    return GW_OK;
}
