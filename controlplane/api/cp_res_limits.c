/*
 * /v1/admin/limits (budgets and rate limits, docs/budgets.md).
 *
 * A limit caps one metric (cost in picodollars, requests, or tokens) of one
 * scope (a key, a team or a project) per UTC period (minute, day, month).
 * What a limit counts is fixed at its creation: scope, metric and period
 * cannot change (the spent amounts of its windows would stop meaning
 * anything); amount, reservation, offline policy and enabled can.
 */
#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "gw_error.h"

/* Four million dollars a period in picodollars: far from int64's end, so
 * amount - spent - outstanding never overflows even after an overshoot. */
#define MAX_AMOUNT 4000000000000000000LL

static const char *const scope_kinds[] = {"key", "team", "project", NULL};
static const char *const metrics[] = {"cost", "requests", "tokens", NULL};
static const char *const periods[] = {"minute", "day", "month", NULL};
static const char *const reservations[] = {"estimate", "worst_case", NULL};
static const char *const offline_policies[] = {"fail_open", "fail_closed", NULL};
static const char *const unpriced_policies[] = {"refuse", "allow", NULL};
static const char *const currencies[] = {"USD", NULL};

/* The scope names an existing key (by id), team or project. */
static int check_limit(struct cp_call *c, const json_t *obj, struct cp_verr *e)
{
    const char *kind = json_string_value(json_object_get(obj, "scope_kind"));
    const char *scope = json_string_value(json_object_get(obj, "scope"));
    if (!kind || !scope)
        return GW_OK;
    const char *sql = strcmp(kind, "key") == 0    ? "SELECT 1 FROM api_keys WHERE id = $1"
                      : strcmp(kind, "team") == 0 ? "SELECT 1 FROM teams WHERE name = $1"
                                                  : "SELECT 1 FROM projects WHERE name = $1";
    struct cp_db_err err;
    const char *p[] = {scope};
    PGresult *r = cp_db_exec(c->db, c->pool, sql, 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", "scope", "scope: cannot check: %s",
                           err.message);
    if (PQntuples(r) == 0)
        return cp_verr_set(e, 400, "dangling_reference", "scope",
                           "scope: no %s named '%s'; create it first", kind, scope);
    const char *metric = json_string_value(json_object_get(obj, "metric"));
    const char *cur = json_string_value(json_object_get(obj, "currency"));
    if (metric && cur && strcmp(metric, "cost") != 0 && strcmp(cur, "USD") != 0)
        return cp_verr_set(e, 400, "invalid_value", "currency",
                           "currency: only a cost limit has a currency (leave it USD)");
    return GW_OK;
}

/* What a limit counts never changes: its windows' spent amounts would be
 * read against another scope, metric or period. */
static int prepare_limit(struct cp_call *c, json_t *obj, const json_t *before, struct cp_verr *e)
{
    (void)c;
    static const char *const fixed[] = {"scope_kind", "scope", "metric", "period"};
    if (!before)
        return GW_OK;
    for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed); i++)
        if (!json_equal(json_object_get(obj, fixed[i]), json_object_get(before, fixed[i])))
            return cp_verr_set(e, 400, "immutable_field", fixed[i],
                               "%s: cannot be changed (what a limit counts is fixed; create a "
                               "new limit and delete this one)",
                               fixed[i]);
    return GW_OK;
}

static const struct cp_field limit_fields[] = {
    {.name = "id", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED | CP_F_NAME, .max = 63},
    {.name = "scope_kind",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = scope_kinds,
     .rule = "one of key, team, project"},
    {.name = "scope", .type = CP_T_STRING, .flags = CP_F_REQUIRED | CP_F_NAME},
    {.name = "metric",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = metrics,
     .rule = "one of cost (picodollars), requests, tokens"},
    {.name = "period",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = periods,
     .rule = "one of minute, day, month (UTC)"},
    {.name = "amount", .type = CP_T_INT, .flags = CP_F_REQUIRED, .min = 1, .max = MAX_AMOUNT},
    {.name = "reservation",
     .type = CP_T_STRING,
     .def = "\"estimate\"",
     .choices = reservations,
     .rule = "one of estimate, worst_case"},
    {.name = "offline",
     .type = CP_T_STRING,
     .def = "\"fail_open\"",
     .choices = offline_policies,
     .rule = "one of fail_open, fail_closed"},
    {.name = "unpriced",
     .type = CP_T_STRING,
     .def = "\"refuse\"",
     .choices = unpriced_policies,
     .rule = "one of refuse (a cost limit keeps targets it cannot price out), allow"},
    {.name = "currency",
     .type = CP_T_STRING,
     .def = "\"USD\"",
     .choices = currencies,
     .rule = "USD (money is picodollars of USD)"},
    {.name = "enabled", .type = CP_T_BOOL, .def = "true"},
    {.name = "description", .type = CP_T_STRING, .def = "\"\"", .max = 1024},
};

const struct cp_resource cp_res_limits = {
    .name = "limits",
    .singular = "limit",
    .table = "limits",
    .fields = limit_fields,
    .nfields = sizeof(limit_fields) / sizeof(limit_fields[0]),
    .check = check_limit,
    .prepare = prepare_limit,
    .key_prefix = "lim_",
};
