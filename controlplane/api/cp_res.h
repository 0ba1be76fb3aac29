/*
 * The admin API's resource declarations (one file each, cp_res_<name>.c;
 * prices and the catalog share cp_res_prices.c, and their price fields)
 * and the checks they share (cp_res.c, which also has cp_resources[], the
 * list of them all).
 */
#ifndef CP_RES_H
#define CP_RES_H

#include "cp_resource.h"

extern const struct cp_resource cp_res_providers;
extern const struct cp_resource cp_res_teams;
extern const struct cp_resource cp_res_secrets;
extern const struct cp_resource cp_res_routes;
extern const struct cp_resource cp_res_keys;
extern const struct cp_resource cp_res_admin_tokens;
extern const struct cp_resource cp_res_prices;
extern const struct cp_resource cp_res_catalog;
extern const struct cp_resource cp_res_limits;
extern const struct cp_resource cp_res_projects;
extern const struct cp_resource cp_res_guard_rules;

/* The allowlists a key, a team and a project each carry (docs/router.md):
 * null allows anything, [] nothing; a target must pass all three. */
#define CP_RES_ALLOWLIST_FIELDS                                                                    \
    {.name = "allow_routes", .type = CP_T_STRLIST, .flags = CP_F_NULLABLE},                        \
        {.name = "allow_providers", .type = CP_T_STRLIST, .flags = CP_F_NULLABLE},                 \
    {                                                                                              \
        .name = "allow_models", .type = CP_T_STRLIST, .flags = CP_F_NULLABLE                       \
    }

/* A key's and a team's response-cache override (docs/cache.md): null
 * follows the routes, 0 turns the cache off, 1 to 2592000 (the data
 * plane's bound, 30 days) turns it on with that TTL on every route. */
#define CP_RES_CACHE_TTL_FIELD                                                                     \
    {                                                                                              \
        .name = "cache_ttl_s", .type = CP_T_INT, .flags = CP_F_NULLABLE, .min = 0, .max = 2592000  \
    }

/* A key's and a team's guard policy (docs/guardrails.md): null follows the
 * route's guard; off, log or block wins over it (a key's over its team's). */
#define CP_RES_GUARD_POLICY_FIELD                                                                  \
    {                                                                                              \
        .name = "guard_policy", .type = CP_T_STRING, .flags = CP_F_NULLABLE,                       \
        .choices = (const char *const[]){"off", "log", "block", NULL},                             \
        .rule = "one of off, log, block (or null: the route's)"                                    \
    }

/* A route's guard and judge (cp_res_guard.c): the field checks (the
 * members' shapes, each refusal naming its member, e.g.
 * "guard.classifier.timeout_ms"); the routes they name, checked against
 * the table once the route's name is known (the object check); a delete's
 * guard (409 while another route names the route); and the stored forms,
 * every default filled in (new references; JSON null when v is not an
 * object). */
int cp_res_check_guard(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e);
int cp_res_check_judge(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e);
int cp_res_guard_refs(struct cp_call *c, const json_t *route, struct cp_verr *e);
int cp_res_guard_route_in_use(struct cp_call *c, const char *key, struct cp_verr *e);
json_t *cp_res_guard_normalize(const json_t *v);
json_t *cp_res_judge_normalize(const json_t *v);

/* 0 when table has a row whose name is v (a string, or JSON null: no
 * reference); else a 400 dangling_reference naming field (or a 503). */
int cp_res_check_ref(struct cp_call *c, const char *table, const char *what, const char *field,
                     const json_t *v, struct cp_verr *e);

/* A delete's guard: 0 when sql (one parameter, key) counts no rows that
 * still refer to the `what` named key; else a 409 in_use saying how many
 * holders ("key(s) or limit(s)") are left (or a 503). */
int cp_res_in_use(struct cp_call *c, const char *sql, const char *what, const char *key,
                  const char *holders, struct cp_verr *e);

/* What every key and admin token starts with (an admin token then says
 * "admin-"). */
#define CP_RES_TOKEN_PREFIX "llmgw-"

/* A new random token: prefix + 64 hex digits (32 random bytes), in the
 * request's pool; NULL when the random generator fails. */
char *cp_res_new_token(struct cp_call *c, const char *prefix);

#endif
