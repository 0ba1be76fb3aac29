/*
 * Guardrails' configuration (docs/guardrails.md), as the admin API keeps it:
 *
 * - /v1/admin/guard-rules: the prompt-injection rules as data,
 *
 *     {id, severity, description, kind, pattern, enabled}
 *
 *   seeded by migration 17 from common/guard_rules.json; the enabled ones
 *   go to every data plane as the snapshot's guard_rules;
 * - the checks of a route's guard and judge objects (cp_res_routes.c
 *   stores each in a jsonb column, the defaults filled in, so what the API
 *   shows is what a data plane applies).
 *
 * The rules here are the data plane's, or stricter: a configuration the API
 * accepts must load in every data plane, or no snapshot would build. A
 * classifier or judge route must exist, be a chat route and not be the
 * route itself when the route is written, and a route another one names
 * cannot be deleted (409 in_use) nor turned into an embeddings route; one
 * that dangles anyway (SQL) still
 * builds: the data plane counts an unknown classifier route as a
 * classifier error, an unknown judge route as a judge failure.
 */
#include <stdio.h>
#include <string.h>

#include "cp_db.h"
#include "cp_res.h"
#include "dp_guard_rules.h"
#include "dp_snapshot.h"
#include "gw_error.h"

static const char *const severities[] = {"low", "medium", "high", NULL};
static const char *const rule_kinds[] = {"phrase", "regex", NULL};
static const char *const policies[] = {"off", "log", "block", NULL};
static const char *const inspect_parts[] = {"last_user", "user", "tool", "system", NULL};
static const char *const on_errors[] = {"fail_open", "fail_closed", NULL};

#define MAX_PATTERN DP_GUARD_MAX_PATTERN
#define MAX_TEMPLATE DP_JUDGE_MAX_TEMPLATE
#define MIN_CLASSIFIER_TIMEOUT_MS 1
#define MAX_CLASSIFIER_TIMEOUT_MS DP_GUARD_MAX_CLASSIFIER_MS
#define DEFAULT_CLASSIFIER_TIMEOUT_MS 2000
#define MAX_SCALE 100

static int one_of(const char *const *set, const json_t *v)
{
    for (; json_is_string(v) && *set; set++)
        if (strcmp(*set, json_string_value(v)) == 0)
            return 1;
    return 0;
}

/* ---- /v1/admin/guard-rules ---- */

/* [a-z0-9][a-z0-9_-]{0,62}: a rule's id is a metric label and a word in a
 * 400 prompt_blocked, so it stays short and plain. */
static int check_rule_id(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    const char *s = json_string_value(v);
    if (strlen(s) != json_string_length(v) || !dp_guard_rule_id_valid(s))
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be 1 to 63 characters of a-z, 0-9, '_' and '-', starting "
                           "with a letter or a digit",
                           field);
    return GW_OK;
}

static int check_pattern(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    size_t n = json_string_length(v);
    if (n == 0 || strlen(json_string_value(v)) != n)
        return cp_verr_set(e, 400, "invalid_value", field,
                           "%s: must be 1 to %d bytes, without NUL characters", field, MAX_PATTERN);
    return GW_OK;
}

/* The pattern is checked as every data plane compiles it
 * (dp_guard_pattern_check): a phrase needs a letter or a digit; a regex
 * compiles, holds no back-reference and stays small once its repetitions
 * are expanded. One check, so no rule the API takes makes the data planes
 * refuse the snapshot. */
static int check_rule(struct cp_call *c, const json_t *obj, struct cp_verr *e)
{
    (void)c;
    char why[256];
    if (dp_guard_pattern_check(json_string_value(json_object_get(obj, "kind")),
                               json_string_value(json_object_get(obj, "pattern")), why,
                               sizeof(why)) != 0)
        return cp_verr_set(e, 400, "invalid_value", "pattern", "pattern: %s", why);
    return GW_OK;
}

static const struct cp_field rule_fields[] = {
    {.name = "id", .type = CP_T_STRING, .flags = CP_F_KEY | CP_F_REQUIRED, .check = check_rule_id},
    {.name = "severity",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = severities,
     .rule = "one of low, medium, high"},
    {.name = "description", .type = CP_T_STRING, .def = "\"\"", .max = 500},
    {.name = "kind",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .choices = rule_kinds,
     .rule = "phrase (a run of words) or regex (POSIX extended)"},
    {.name = "pattern",
     .type = CP_T_STRING,
     .flags = CP_F_REQUIRED,
     .max = MAX_PATTERN,
     .check = check_pattern},
    {.name = "enabled", .type = CP_T_BOOL, .def = "true"},
};

const struct cp_resource cp_res_guard_rules = {
    .name = "guard-rules",
    .singular = "guard rule",
    .table = "guard_rules",
    .fields = rule_fields,
    .nfields = sizeof(rule_fields) / sizeof(rule_fields[0]),
    .check = check_rule,
};

/* ---- a route's guard and judge ---- */

/* A refusal naming the member at path (e.g. "guard.classifier.route"). */
static int member_err(struct cp_verr *e, const char *code, const char *path, const char *rule)
{
    return cp_verr_set(e, 400, code, path, "%s: %s", path, rule);
}

/* Refuses a member of o not in known (path: o's own, e.g. "guard"). */
static int known_members(const json_t *o, const char *path, const char *const *known,
                         const char *list, struct cp_verr *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v)
    {
        const char *const *m = known;
        while (*m && strcmp(*m, k) != 0)
            m++;
        if (!*m) {
            char p[96];
            snprintf(p, sizeof(p), "%s.%.40s", path, k);
            return cp_verr_set(e, 400, "unknown_field", p, "%s: unknown field (%s: %s)", p, path,
                               list);
        }
    }
    return GW_OK;
}

/* An optional member: absent or null, 0; else 1. */
static int given(const json_t *v)
{
    return v && !json_is_null(v);
}

/* An optional string member from set. */
static int opt_enum(const json_t *o, const char *name, const char *path, const char *const *set,
                    const char *rule, struct cp_verr *e)
{
    json_t *v = json_object_get(o, name);
    if (!given(v) || one_of(set, v))
        return GW_OK;
    char p[96];
    snprintf(p, sizeof(p), "%s.%s", path, name);
    return member_err(e, json_is_string(v) ? "invalid_value" : "invalid_type", p, rule);
}

/* An optional integer member in [min, max]. */
static int opt_int(const json_t *o, const char *name, const char *path, long long min,
                   long long max, struct cp_verr *e)
{
    json_t *v = json_object_get(o, name);
    if (!given(v) ||
        (json_is_integer(v) && json_integer_value(v) >= min && json_integer_value(v) <= max))
        return GW_OK;
    char p[96], rule[96];
    snprintf(p, sizeof(p), "%s.%s", path, name);
    snprintf(rule, sizeof(rule), "must be an integer from %lld to %lld", min, max);
    return member_err(e, json_is_integer(v) ? "invalid_value" : "invalid_type", p, rule);
}

static int opt_bool(const json_t *o, const char *name, const char *path, struct cp_verr *e)
{
    json_t *v = json_object_get(o, name);
    if (!given(v) || json_is_boolean(v))
        return GW_OK;
    char p[96];
    snprintf(p, sizeof(p), "%s.%s", path, name);
    return member_err(e, "invalid_type", p, "must be true or false");
}

/* A required route name (checked against the table in cp_res_guard_refs). */
static int req_route(const json_t *o, const char *path, struct cp_verr *e)
{
    json_t *v = json_object_get(o, "route");
    char p[96];
    snprintf(p, sizeof(p), "%s.route", path);
    if (!given(v))
        return member_err(e, "missing_field", p, "is required: the name of a chat route");
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 128)
        return member_err(e, json_is_string(v) ? "invalid_value" : "invalid_type", p,
                          "must be the name of a chat route");
    return GW_OK;
}

static int check_classifier(const json_t *v, struct cp_verr *e)
{
    static const char *const known[] = {"route", "timeout_ms", "on_error", NULL};
    const char *path = "guard.classifier";
    if (!json_is_object(v))
        return member_err(e, "invalid_type", path,
                          "must be null or an object {route, timeout_ms, on_error}");
    if (known_members(v, path, known, "route, timeout_ms, on_error", e) || req_route(v, path, e) ||
        opt_int(v, "timeout_ms", path, MIN_CLASSIFIER_TIMEOUT_MS, MAX_CLASSIFIER_TIMEOUT_MS, e) ||
        opt_enum(v, "on_error", path, on_errors, "must be fail_open or fail_closed", e))
        return GW_EINVAL;
    return GW_OK;
}

/* inspect: a non-empty set of what the guard reads. */
static int check_inspect(const json_t *v, struct cp_verr *e)
{
    const char *p = "guard.inspect";
    if (!json_is_array(v))
        return member_err(e, "invalid_type", p,
                          "must be an array of last_user, user, tool, system");
    if (json_array_size(v) == 0)
        return member_err(e, "invalid_value", p,
                          "must name at least one of last_user, user, tool, system (\"policy\": "
                          "\"off\" turns the guard off)");
    size_t i, k;
    json_t *a, *b;
    json_array_foreach(v, i, a)
    {
        if (!one_of(inspect_parts, a))
            return member_err(e, json_is_string(a) ? "invalid_value" : "invalid_type", p,
                              "each must be one of last_user, user, tool, system");
        json_array_foreach(v, k, b)
        {
            if (k < i && strcmp(json_string_value(a), json_string_value(b)) == 0)
                return cp_verr_set(e, 400, "invalid_value", p, "%s: '%s' is listed twice", p,
                                   json_string_value(a));
        }
    }
    return GW_OK;
}

int cp_res_check_guard(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    (void)field;
    static const char *const known[] = {"policy",       "inspect",    "rules",
                                        "min_severity", "classifier", NULL};
    if (json_is_null(v))
        return GW_OK;
    if (known_members(v, "guard", known, "policy, inspect, rules, min_severity, classifier", e))
        return GW_EINVAL;
    json_t *policy = json_object_get(v, "policy");
    if (!given(policy))
        return member_err(e, "missing_field", "guard.policy",
                          "is required: off, log or block (\"guard\": null turns the guard off)");
    if (!one_of(policies, policy))
        return member_err(e, json_is_string(policy) ? "invalid_value" : "invalid_type",
                          "guard.policy", "must be one of off, log, block");
    json_t *inspect = json_object_get(v, "inspect");
    json_t *cl = json_object_get(v, "classifier");
    if ((given(inspect) && check_inspect(inspect, e)) || opt_bool(v, "rules", "guard", e) ||
        opt_enum(v, "min_severity", "guard", severities, "must be one of low, medium, high", e) ||
        (given(cl) && check_classifier(cl, e)))
        return GW_EINVAL;
    return GW_OK;
}

static int check_rubric(const json_t *r, struct cp_verr *e)
{
    static const char *const known[] = {"template", "scale_min", "scale_max", "pass_min", NULL};
    const char *path = "judge.rubric";
    if (!given(r))
        return member_err(e, "missing_field", path,
                          "is required: {template, scale_min, scale_max, pass_min}");
    if (!json_is_object(r))
        return member_err(e, "invalid_type", path,
                          "must be an object {template, scale_min, scale_max, pass_min}");
    if (known_members(r, path, known, "template, scale_min, scale_max, pass_min", e))
        return GW_EINVAL;
    json_t *t = json_object_get(r, "template");
    const char *tp = "judge.rubric.template";
    if (!given(t))
        return member_err(e, "missing_field", tp,
                          "is required: the judge's prompt, with {{prompt}} and {{answer}}");
    if (!json_is_string(t))
        return member_err(e, "invalid_type", tp, "must be a string");
    const char *s = json_string_value(t);
    size_t n = json_string_length(t);
    if (n == 0 || n > MAX_TEMPLATE || strlen(s) != n)
        return member_err(e, "invalid_value", tp,
                          "must be 1 to 8192 bytes (8 KiB), without NUL characters");
    if (!strstr(s, "{{prompt}}") || !strstr(s, "{{answer}}"))
        return member_err(e, "invalid_value", tp,
                          "must hold both placeholders, {{prompt}} and {{answer}}");
    if (opt_int(r, "scale_min", path, 0, MAX_SCALE - 1, e))
        return GW_EINVAL;
    json_t *mn = json_object_get(r, "scale_min"), *mx = json_object_get(r, "scale_max");
    long long lo = given(mn) ? json_integer_value(mn) : 1;
    if (given(mx) && !json_is_integer(mx))
        return member_err(e, "invalid_type", "judge.rubric.scale_max", "must be an integer");
    long long hi = given(mx) ? json_integer_value(mx) : 5;
    if (hi <= lo || hi > MAX_SCALE)
        return cp_verr_set(e, 400, "invalid_value", "judge.rubric.scale_max",
                           "judge.rubric.scale_max: must be an integer above scale_min (%lld) and "
                           "at most %d",
                           lo, MAX_SCALE);
    if (opt_int(r, "pass_min", path, lo, hi, e))
        return GW_EINVAL;
    return GW_OK;
}

int cp_res_check_judge(struct cp_call *c, const char *field, const json_t *v, struct cp_verr *e)
{
    (void)c;
    (void)field;
    static const char *const known[] = {"sample_rate", "route", "rubric", "keep_text", NULL};
    if (json_is_null(v))
        return GW_OK;
    if (known_members(v, "judge", known, "sample_rate, route, rubric, keep_text", e))
        return GW_EINVAL;
    json_t *rate = json_object_get(v, "sample_rate");
    if (!given(rate))
        return member_err(e, "missing_field", "judge.sample_rate",
                          "is required: the share of requests judged, 0 to 1 (\"judge\": null "
                          "turns the judge off)");
    if (!json_is_number(rate) || json_number_value(rate) < 0 || json_number_value(rate) > 1)
        return member_err(e, json_is_number(rate) ? "invalid_value" : "invalid_type",
                          "judge.sample_rate", "must be a number from 0 to 1");
    if (req_route(v, "judge", e) || check_rubric(json_object_get(v, "rubric"), e) ||
        opt_bool(v, "keep_text", "judge", e))
        return GW_EINVAL;
    return GW_OK;
}

/* A route capability that serves chat requests (vision is chat with
 * images); embeddings and the media capabilities do not. */
static int chat_cap(const char *cap)
{
    return cap && (strcmp(cap, "chat") == 0 || strcmp(cap, "vision") == 0);
}

/* The route a guard's classifier or a judge names exists, serves chat and
 * is not the route itself (self). */
static int check_ref(struct cp_call *c, const char *self, const json_t *route, const char *path,
                     struct cp_verr *e)
{
    const char *name = json_string_value(route);
    if (strcmp(name, self) == 0)
        return cp_verr_set(e, 400, "invalid_value", path,
                           "%s: '%s' is the route itself; name another route", path, name);
    struct cp_db_err err;
    const char *p[] = {name};
    PGresult *r =
        cp_db_exec(c->db, c->pool, "SELECT capability FROM routes WHERE name = $1", 1, p, &err);
    if (!r)
        return cp_verr_set(e, 503, "database_unavailable", path, "%s: cannot check: %s", path,
                           err.message);
    const char *cap = cp_db_value(r);
    if (!cap)
        return cp_verr_set(e, 400, "dangling_reference", path,
                           "%s: no route named '%s' (a route's name, not an alias); create it "
                           "first",
                           path, name);
    if (!chat_cap(cap))
        return cp_verr_set(e, 400, "invalid_value", path,
                           "%s: route '%s' serves %s; name a chat route", path, name, cap);
    return GW_OK;
}

/* The routes (other than name) whose guard classifier or judge is name, as
 * "a, b" in the request's pool; NULL for none, or after filling e (503). */
static const char *referrers(struct cp_call *c, const char *name, struct cp_verr *e)
{
    struct cp_db_err err;
    const char *p[] = {name};
    PGresult *r = cp_db_exec(c->db, c->pool,
                             "SELECT string_agg(name, ', ' ORDER BY name) FROM routes WHERE name "
                             "<> $1 AND (guard->'classifier'->>'route' = $1 OR judge->>'route' = "
                             "$1)",
                             1, p, &err);
    if (!r)
        cp_verr_set(e, 503, "database_unavailable", NULL, "cannot check routes: %s", err.message);
    return r ? cp_db_value(r) : NULL;
}

int cp_res_guard_refs(struct cp_call *c, const json_t *route, struct cp_verr *e)
{
    const char *self = json_string_value(json_object_get(route, "name"));
    json_t *cl = json_object_get(json_object_get(route, "guard"), "classifier");
    json_t *judge = json_object_get(route, "judge");
    if (json_is_object(cl) &&
        check_ref(c, self, json_object_get(cl, "route"), "guard.classifier.route", e))
        return GW_EINVAL;
    if (json_is_object(judge) &&
        check_ref(c, self, json_object_get(judge, "route"), "judge.route", e))
        return GW_EINVAL;
    /* A classifier or judge route stays a chat route. */
    if (chat_cap(json_string_value(json_object_get(route, "capability"))))
        return GW_OK;
    e->status = 0;
    const char *users = referrers(c, self, e);
    if (users)
        return cp_verr_set(e, 400, "invalid_value", "capability",
                           "capability: route '%s' is the guard classifier or the judge of "
                           "route(s) %s, which need a chat route",
                           self, users);
    return e->status ? GW_EINVAL : GW_OK;
}

int cp_res_guard_route_in_use(struct cp_call *c, const char *key, struct cp_verr *e)
{
    e->status = 0;
    const char *users = referrers(c, key, e);
    if (users)
        return cp_verr_set(e, 409, "in_use", NULL,
                           "route '%s' is the guard classifier or the judge of route(s) %s; "
                           "change their guard or judge first",
                           key, users);
    return e->status ? GW_EINVAL : GW_OK;
}

/* o's member name if given, else def (a new reference either way). */
static json_t *or_default(const json_t *o, const char *name, json_t *def)
{
    json_t *v = json_object_get(o, name);
    if (!given(v))
        return def;
    json_decref(def);
    return json_incref(v);
}

json_t *cp_res_guard_normalize(const json_t *g)
{
    if (!json_is_object(g))
        return json_null();
    json_t *cl = json_object_get(g, "classifier");
    json_t *classifier = json_null();
    if (json_is_object(cl))
        classifier =
            json_pack("{s:O,s:o,s:o}", "route", json_object_get(cl, "route"), "timeout_ms",
                      or_default(cl, "timeout_ms", json_integer(DEFAULT_CLASSIFIER_TIMEOUT_MS)),
                      "on_error", or_default(cl, "on_error", json_string("fail_open")));
    return json_pack("{s:O,s:o,s:o,s:o,s:o}", "policy", json_object_get(g, "policy"), "inspect",
                     or_default(g, "inspect", json_pack("[s]", "last_user")), "rules",
                     or_default(g, "rules", json_true()), "min_severity",
                     or_default(g, "min_severity", json_string("low")), "classifier", classifier);
}

json_t *cp_res_judge_normalize(const json_t *j)
{
    if (!json_is_object(j))
        return json_null();
    json_t *r = json_object_get(j, "rubric");
    json_t *mx = or_default(r, "scale_max", json_integer(5));
    json_t *rubric =
        json_pack("{s:O,s:o,s:o,s:o}", "template", json_object_get(r, "template"), "scale_min",
                  or_default(r, "scale_min", json_integer(1)), "scale_max", mx, "pass_min",
                  or_default(r, "pass_min", json_incref(mx)));
    /* A real, whatever was sent ("1" or "1.0"): a data plane reads one kind. */
    return json_pack("{s:f,s:O,s:o,s:o}", "sample_rate",
                     json_number_value(json_object_get(j, "sample_rate")), "route",
                     json_object_get(j, "route"), "rubric", rubric, "keep_text",
                     or_default(j, "keep_text", json_false()));
}
