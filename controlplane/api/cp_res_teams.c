/*
 * /v1/admin/teams: a team of keys and projects, with the allowlists, the
 * budget requirement, the cache TTL and the guard policy its keys inherit.
 */
#include "cp_res.h"

/* A team's allowlists intersect with each of its keys' (docs/budgets.md):
 * null allows anything, [] nothing. require_budget: a key of the team with
 * no cost limit applying to it (its own, the team's or its project's) is
 * refused (402 budget_not_configured). cache_ttl_s: the response cache for
 * the team's keys (a key's own wins); guard_policy: the prompt-injection
 * guard's for them (the same). */
static const struct cp_field team_fields[] = {
    {.name = "name", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME},
    {.name = "description", .type = CP_T_STRING, .def = "\"\"", .max = 1024},
    CP_RES_ALLOWLIST_FIELDS,
    {.name = "require_budget", .type = CP_T_BOOL, .def = "false"},
    CP_RES_CACHE_TTL_FIELD,
    CP_RES_GUARD_POLICY_FIELD,
};

static int team_in_use(struct cp_call *c, const char *key, struct cp_verr *e)
{
    return cp_res_in_use(c,
                         "SELECT (SELECT count(*) FROM projects WHERE team = $1) + "
                         "(SELECT count(*) FROM api_keys WHERE team = $1) + "
                         "(SELECT count(*) FROM limits WHERE scope_kind = 'team' AND scope = $1)",
                         "team", key, "project(s), key(s) or limit(s)", e);
}

const struct cp_resource cp_res_teams = {
    .name = "teams",
    .singular = "team",
    .table = "teams",
    .fields = team_fields,
    .nfields = sizeof(team_fields) / sizeof(team_fields[0]),
    .before_delete = team_in_use,
};
