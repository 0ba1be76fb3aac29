/*
 * /v1/admin/projects: a project of one team, with the allowlists its keys
 * inherit. Keys name a project and its team together, so a project moves
 * to another team only without keys of its current one.
 */
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "gw_error.h"

static int check_project_team(struct cp_call *c, const char *field, const json_t *v,
                              struct cp_verr *e)
{
    return cp_res_check_ref(c, "teams", "team", field, v, e);
}

/* Keys name a project and its team together (cp_res_keys.c): a project
 * whose keys belong to its team cannot move to another team under them. */
static int prepare_project(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    if (!before || json_equal(json_object_get(obj, "team"), json_object_get(before, "team")))
        return GW_OK;
    struct cp_db_err err;
    const char *p[] = {json_string_value(json_object_get(obj, "name"))};
    PGresult *r =
        cp_db_exec(c->db, c->pool, "SELECT count(*) FROM api_keys WHERE project = $1", 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", "team", "team: cannot check: %s",
                           err.message);
    const char *n = cp_db_value(r);
    if (n && strcmp(n, "0") != 0)
        return cp_verr_set(e, 409, "in_use", "team",
                           "team: project '%s' has %s key(s) of its current team; move them "
                           "first",
                           p[0], n);
    return GW_OK;
}

static int project_in_use(struct cp_call *c, const char *key, struct cp_verr *e)
{
    return cp_res_in_use(c,
                         "SELECT (SELECT count(*) FROM api_keys WHERE project = $1) + "
                         "(SELECT count(*) FROM limits WHERE scope_kind = 'project' AND "
                         "scope = $1)",
                         "project", key, "key(s) or limit(s)", e);
}

static const struct cp_field project_fields[] = {
    {.name = "name", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "team",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED | CP_F_NAME,
     .check = check_project_team},
    {.name = "description", .type = CP_T_STRING, .def = "\"\"", .max = 1024},
    CP_RES_ALLOWLIST_FIELDS,
};

const struct cp_resource cp_res_projects = {
    .name = "projects",
    .singular = "project",
    .table = "projects",
    .fields = project_fields,
    .nfields = sizeof(project_fields) / sizeof(project_fields[0]),
    .prepare = prepare_project,
    .before_delete = project_in_use,
};
