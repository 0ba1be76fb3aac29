/*
 * /v1/admin/providers: an upstream API a route's entries point at, with
 * its driver (one of the driver catalog's, dp_driver_info_find), base URL,
 * headers, options and credential_ref (a row of the secrets table).
 */
#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "cp_secret_ref.h"
#include "dp_driver_catalog.h"
#include "dp_snapshot.h"
#include "gw_error.h"

/* The driver catalog both planes share decides: the control plane accepts
 * exactly the drivers its data planes can run. */
static int check_driver(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    const char *d = json_string_value(v);
    if (dp_driver_info_find(d))
        return GW_OK;
    char names[256];
    dp_driver_catalog_names(names, sizeof(names));
    return cp_verr_set(e, 400, "unknown_driver", field, "%s: unknown driver '%s' (supported: %s)",
                       field, d, names);
}

static int check_url(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    const char *u = json_string_value(v);
    size_t scheme = strncmp(u, "http://", 7) == 0 ? 7 : strncmp(u, "https://", 8) == 0 ? 8 : 0;
    if (!scheme || !u[scheme] || u[scheme] == '/' || strpbrk(u, " \t\r\n"))
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be an http:// or https:// URL with a host and no spaces",
                           field);
    return GW_OK;
}

/* The same rule the data plane's snapshot loader applies to headers. */
static int check_headers(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    const char *k;
    json_t *hv;
    json_object_foreach((json_t *)v, k, hv)
    {
        const char *sv = json_string_value(hv);
        if (!sv || !*k || strpbrk(k, "\r\n: ") || strpbrk(sv, "\r\n"))
            return cp_verr_set(e, 400, "invalid_value", field,
                               "%s.%s: must be a single-line string with a valid header name",
                               field, k);
    }
    return GW_OK;
}

/* A credential_ref names a row of the secrets table; the foreign key
 * enforces it too, but this says why and what to do. */
static int check_credential_ref(struct cp_call *c, const char *field, const json_t *v,
                                struct cp_verr *e)
{
    /* The snapshot builder parses it the same way (cp_secret_ref_parse): it
     * must be a built-in name, the name of a row. */
    char msg[256];
    struct cp_secret_ref parsed;
    int rc = cp_secret_ref_parse(json_string_value(v), &parsed, msg, sizeof(msg));
    if (rc == GW_ENOMEM)
        return cp_verr_set(e, 500, "internal", NULL, "out of memory");
    if (rc != GW_OK)
        return cp_verr_set(e, 400, "invalid_value", field, "%s: %s", field, msg);
    int builtin = parsed.kind == CP_SECRET_BUILTIN;
    cp_secret_ref_free(&parsed);
    if (!builtin)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must name a row of the secrets table, not a backend ref; store "
                           "a secret with backend vault or aws and this backend_ref, and name "
                           "that secret here",
                           field);
    struct cp_db_err err;
    const char *p[] = {json_string_value(v)};
    PGresult *r = cp_db_exec(c->db, c->pool, "SELECT 1 FROM secrets WHERE name = $1", 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", field, "%s: cannot check: %s", field,
                           err.message);
    if (PQntuples(r) == 0)
        return cp_verr_set(e, 400, "dangling_reference", field,
                           "%s: no secret named '%s': a credential_ref must name an existing "
                           "secret in the secrets table; store the secret first",
                           field, p[0]);
    return GW_OK;
}

/* options.capabilities narrows what the driver declares (docs/dataplane.md). */
static int check_provider(struct cp_call *c, const json_t *obj, struct cp_verr *e)
{
    (void)c;
    const struct dp_driver_info *drv =
        dp_driver_info_find(json_string_value(json_object_get(obj, "driver")));
    json_t *caps = json_object_get(json_object_get(obj, "options"), "capabilities");
    if (!caps || !drv)
        return GW_OK;
    size_t i;
    json_t *cap;
    if (!json_is_array(caps))
        return cp_verr_set(e, 400, "invalid_type", "options.capabilities",
                           "options.capabilities: must be an array of capability names");
    json_array_foreach(caps, i, cap)
    {
        unsigned bit = 0;
        for (unsigned b = 1; b && !bit; b <<= 1) {
            const char *n = dp_snapshot_cap_name(b);
            if (n && json_is_string(cap) && strcmp(n, json_string_value(cap)) == 0)
                bit = b;
        }
        if (!bit)
            return cp_verr_set(e, 400, "invalid_value", "options.capabilities",
                               "options.capabilities[%zu]: must be one of chat, embeddings, "
                               "vision, tools, json_mode, reasoning, transcription, speech, image",
                               i);
        if (!(drv->caps & bit))
            return cp_verr_set(e, 400, "invalid_value", "options.capabilities",
                               "options.capabilities[%zu]: driver '%s' does not support '%s'", i,
                               drv->name, json_string_value(cap));
    }
    return GW_OK;
}

/* A provider a route entry points at stays: the route would lose a target
 * silently. The refusal names the routes. */
static int provider_in_use(struct cp_call *c, const char *key, struct cp_verr *e)
{
    struct cp_db_err err;
    const char *p[] = {key};
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT string_agg(DISTINCT route, ', ' ORDER BY route) "
                             "FROM route_entries WHERE provider = $1",
                             1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check routes: %s",
                           err.message);
    const char *routes = cp_db_value(r);
    if (routes)
        return cp_verr_set(e, 409, "in_use", NULL,
                           "provider '%s' is used by route(s) %s; remove it from their entries "
                           "first",
                           key, routes);
    return GW_OK;
}

static const struct cp_field provider_fields[] = {
    {.name = "name", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "driver", .type = CP_T_STRING, .flags = CP_F_REQUIRED, .check = check_driver},
    {.name = "base_url", .type = CP_T_STRING, .flags = CP_F_REQUIRED, .check = check_url},
    {.name = "headers", .type = CP_T_OBJECT, .def = "{}", .check = check_headers},
    {.name = "options", .type = CP_T_OBJECT, .def = "{}"},
    {.name = "credential_ref",
     .type = CP_T_STRING,
     .flags = CP_F_NULLABLE | CP_F_NAME,
     .check = check_credential_ref},
    {.name = "enabled", .type = CP_T_BOOL, .def = "true"},
    {.name = "first_byte_timeout_ms", .type = CP_T_INT, .def = "60000", .min = 1, .max = 3600000},
    {.name = "idle_timeout_ms", .type = CP_T_INT, .def = "60000", .min = 1, .max = 3600000},
};

const struct cp_resource cp_res_providers = {
    .name = "providers",
    .singular = "provider",
    .table = "providers",
    .fields = provider_fields,
    .nfields = sizeof(provider_fields) / sizeof(provider_fields[0]),
    .check = check_provider,
    .before_delete = provider_in_use,
};
