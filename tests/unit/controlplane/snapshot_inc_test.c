/*
 * The snapshot builder's incremental path against a real PostgreSQL:
 * random writes to every kind of resource, made as the admin API makes
 * them (the row, then cp_resource_record's version, audit row and
 * notification in the same transaction), and now and then one made with
 * SQL alone (no audit row: the builder must fall back to a full build).
 * After every few writes, once the builder has caught up:
 *  - its whole document (cp_snapshot_document) equals, as JSON, the first
 *    build of a fresh builder (a full build of the same configuration);
 *  - the document the deltas it published rebuild, applied one after the
 *    other to the whole documents it published, equals it too.
 * The builder's periodic full check is off: nothing heals a wrong model.
 *
 * Needs LLMGW_TEST_DATABASE_URL (an empty database it may migrate and
 * write); tests/integration/snapshot_incremental.test.mjs starts one and
 * runs this. Not a ctest test: without a database it exits 77 (skipped).
 * LLMGW_TEST_SEED repeats a run (the seed is printed).
 */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cp_call.h"
#include "cp_db.h"
#include "cp_migrate.h"
#include "cp_resource.h"
#include "cp_secrets.h"
#include "cp_snapshot.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_pool.h"

static const char *url;
static struct cp_db *db;
static struct event_base *base;
static struct cp_master_key key;
static unsigned long long rng;

static unsigned pick(unsigned n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng % n);
}

static void sql(const char *q)
{
    struct cp_db_err err;
    int rc = cp_db_cmd(db, q, 0, NULL, &err);
    if (rc)
        fprintf(stderr, "SQL failed: %s: %s\n", q, err.message);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Statements (several, maybe) with the simple-query protocol. */
static void simple(const char *q)
{
    PGresult *r = PQexec(cp_db_conn(db), q);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
        fprintf(stderr, "SQL failed: %s: %s\n", q, PQerrorMessage(cp_db_conn(db)));
    PQclear(r);
    CU_ASSERT_FATAL(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK);
}

static long long val(const char *q)
{
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, NULL, q, 0, NULL, &err);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r);
    const char *v = cp_db_value(r);
    long long n = v ? strtoll(v, NULL, 10) : -1;
    PQclear(r);
    return n;
}

static int exists(const char *table, const char *col, const char *name)
{
    char q[256];
    snprintf(q, sizeof(q), "SELECT count(*) FROM %s WHERE %s = '%s'", table, col, name);
    return val(q) > 0;
}

/* One write as the admin API makes it: stmt, then the bookkeeping. */
static void write_rec(const char *resource, const char *action, const char *id, const char *stmt)
{
    struct gw_pool *pool = gw_pool_new(0);
    struct cp_call c = {.pool = pool, .db = db, .actor = "snapshot_inc_test"};
    struct cp_db_err err;
    long long version;
    sql("BEGIN");
    simple(stmt);
    int rc = cp_resource_record(&c, resource, action, id, NULL, NULL, &version, &err);
    if (rc)
        fprintf(stderr, "record: %s\n", err.message);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    sql("COMMIT");
    gw_pool_free(pool);
}

/* One write with SQL alone, as the benchmarks and some tests make them. */
static void write_bare(const char *stmt)
{
    char q[2048];
    snprintf(q, sizeof(q),
             "BEGIN; %s; UPDATE config_state SET version = version + 1 WHERE id = 1; SELECT "
             "pg_notify('llmgw_config', version::text) FROM config_state WHERE id = 1; COMMIT",
             stmt);
    simple(q);
}

/* ---- what the builder under test published ---- */

static json_t *mirror;     /* the document its publishes rebuild */
static int deltas, wholes; /* publishes of each kind */
static struct cp_snapshot *builder;

static const char *const kinds[] = {"providers", "routes", "keys", "teams", "projects", "limits"};

static const char *id_of(const char *kind)
{
    return strcmp(kind, "keys") == 0 || strcmp(kind, "limits") == 0 ? "id" : "name";
}

static int by_name(const void *a, const void *b, const char *id)
{
    return strcmp(json_string_value(json_object_get(*(json_t *const *)a, id)),
                  json_string_value(json_object_get(*(json_t *const *)b, id)));
}
static int by_name_n(const void *a, const void *b)
{
    return by_name(a, b, "name");
}
static int by_name_i(const void *a, const void *b)
{
    return by_name(a, b, "id");
}

/* The delta applied to mirror, as a data plane would apply it. */
static void apply(const json_t *delta)
{
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(delta, "base_version")),
                    json_integer_value(json_object_get(mirror, "version")));
    for (size_t k = 0; k < sizeof(kinds) / sizeof(*kinds); k++) {
        json_t *ch = json_object_get(delta, kinds[k]);
        if (!ch)
            continue;
        CU_ASSERT(json_object_size(ch) > 0);
        json_t *arr = json_object_get(mirror, kinds[k]);
        size_t n = json_array_size(arr), m = 0;
        json_t **v = calloc(n + json_object_size(ch) + 1, sizeof(*v));
        for (size_t i = 0; i < n; i++) {
            json_t *o = json_array_get(arr, i);
            if (!json_object_get(ch, json_string_value(json_object_get(o, id_of(kinds[k])))))
                v[m++] = json_incref(o);
        }
        const char *name;
        json_t *o;
        json_object_foreach(ch, name, o)
        {
            if (json_is_null(o))
                continue;
            CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, id_of(kinds[k]))), name);
            v[m++] = json_incref(o);
        }
        qsort(v, m, sizeof(*v), strcmp(id_of(kinds[k]), "id") ? by_name_n : by_name_i);
        json_t *out = json_array();
        for (size_t i = 0; i < m; i++)
            json_array_append_new(out, v[i]);
        free(v);
        json_object_set_new(mirror, kinds[k], out);
    }
    if (json_object_get(delta, "catalog"))
        json_object_set(mirror, "catalog", json_object_get(delta, "catalog"));
    /* The guard rules come whole, as the catalog does. */
    if (json_object_get(delta, "guard_rules"))
        json_object_set(mirror, "guard_rules", json_object_get(delta, "guard_rules"));
    json_object_set(mirror, "version", json_object_get(delta, "version"));
}

static json_t *document(struct cp_snapshot *b)
{
    int64_t v;
    size_t len;
    char *doc = cp_snapshot_document(b, &v, &len);
    json_error_t je;
    json_t *j = doc ? json_loadb(doc, len, 0, &je) : NULL;
    if (doc && !j)
        fprintf(stderr, "not JSON (%s): %.*s\n", je.text, (int)len, doc);
    free(doc);
    CU_ASSERT_PTR_NOT_NULL(j);
    if (j)
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "version")), v);
    return j;
}

static void on_publish(void *arg, const struct cp_snapshot_pub *p)
{
    (void)arg;
    json_int_t have = json_integer_value(json_object_get(mirror, "version"));
    if (p->base_version && mirror && p->version <= have) {
        /* A whole document taken earlier was already past this build (the
         * builder runs on): it holds this delta. */
        CU_ASSERT(p->base_version < have);
        deltas++;
    } else if (p->base_version) {
        json_t *d = json_loadb(p->delta, p->delta_len, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(d);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(d, "version")), p->version);
        CU_ASSERT_EQUAL(json_integer_value(json_object_get(d, "base_version")), p->base_version);
        apply(d);
        json_decref(d);
        deltas++;
    } else {
        CU_ASSERT_PTR_NULL(p->delta);
        json_decref(mirror);
        mirror = document(builder);
        wholes++;
    }
}

static void on_publish_ignore(void *arg, const struct cp_snapshot_pub *p)
{
    (void)arg;
    (void)p;
}

static int checked_wholes; /* whole documents the checking builder published */

static void on_publish_count(void *arg, const struct cp_snapshot_pub *p)
{
    (void)arg;
    if (!p->base_version)
        checked_wholes++;
}

static struct cp_snapshot *start(void (*publish)(void *, const struct cp_snapshot_pub *),
                                 long check_polls)
{
    char err[256];
    struct cp_snapshot_opts o = {.conninfo = url,
                                 .poll_ms = 200,
                                 .master_key = &key,
                                 .publish = publish,
                                 .check_polls = check_polls};
    struct cp_snapshot *b = cp_snapshot_new(base, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    return b;
}

/* Runs the loop until b has read the configuration up to now (and handed
 * out what it built); its status then. */
static json_t *caught_up(struct cp_snapshot *b)
{
    long long want = val("SELECT version FROM config_state WHERE id = 1");
    for (int i = 0; i < 2000; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        json_t *st = cp_snapshot_status(b);
        json_t *e = json_object_get(st, "last_error");
        if (json_is_string(e)) {
            fprintf(stderr, "build failed: %s\n", json_string_value(e));
            CU_FAIL_FATAL("a build failed");
        }
        if (json_integer_value(json_object_get(st, "config_version")) >= want &&
            json_integer_value(json_object_get(st, "built_at_ms")) > 0) {
            for (int k = 0; k < 5; k++) {
                usleep(2000);
                event_base_loop(base, EVLOOP_NONBLOCK);
            }
            return st;
        }
        json_decref(st);
        usleep(5000);
    }
    CU_FAIL_FATAL("the builder did not catch up");
    return NULL;
}

/* Waits while an active key's expiry is near: the builder notices one on
 * its next poll, a fresh build at once. */
static void no_expiry_near(void)
{
    for (int i = 0; i < 100; i++) {
        if (val("SELECT count(*) FROM api_keys WHERE status = 'active' AND expires_at BETWEEN "
                "now() - interval '1 second' AND now() + interval '1 second'") == 0)
            return;
        for (int k = 0; k < 10; k++) {
            usleep(10000);
            event_base_loop(base, EVLOOP_NONBLOCK);
        }
    }
}

static int comparisons;

/* What differs between two documents: the objects of each kind that are
 * not in both alike, the catalogs and the guard rules. */
static void show_diff(const json_t *inc, const json_t *full)
{
    for (size_t k = 0; k < sizeof(kinds) / sizeof(*kinds); k++) {
        const json_t *side[2] = {json_object_get(inc, kinds[k]), json_object_get(full, kinds[k])};
        json_t *by[2] = {json_object(), json_object()};
        for (int s = 0; s < 2; s++) {
            size_t i;
            json_t *o;
            json_array_foreach(side[s], i, o)
                json_object_set(by[s], json_string_value(json_object_get(o, id_of(kinds[k]))), o);
        }
        for (int s = 0; s < 2; s++) {
            const char *n;
            json_t *o;
            json_object_foreach(by[s], n, o)
            {
                json_t *other = json_object_get(by[1 - s], n);
                if (other && json_equal(o, other))
                    continue;
                char *x = json_dumps(o, JSON_SORT_KEYS | JSON_COMPACT);
                fprintf(stderr, "%s['%s'] %s: %s\n", kinds[k], n,
                        s ? "in the full build" : "in the incremental model", x);
                free(x);
            }
        }
        json_decref(by[0]);
        json_decref(by[1]);
    }
    static const char *const wholes_[] = {"catalog", "guard_rules"};
    for (size_t k = 0; k < sizeof(wholes_) / sizeof(*wholes_); k++) {
        if (json_equal(json_object_get(inc, wholes_[k]), json_object_get(full, wholes_[k])))
            continue;
        char *x = json_dumps(json_object_get(inc, wholes_[k]), JSON_COMPACT),
             *y = json_dumps(json_object_get(full, wholes_[k]), JSON_COMPACT);
        fprintf(stderr, "%s in the incremental model: %s\nin the full build: %s\n", wholes_[k], x,
                y);
        free(x);
        free(y);
    }
}

/* The builder's document against a fresh full build and against mirror:
 * 1 when both agree. */
static int agree(int last)
{
    json_t *ist = caught_up(builder);
    json_t *inc = document(builder);
    struct cp_snapshot *fresh = start(on_publish_ignore, -1);
    json_t *fst = caught_up(fresh);
    json_t *full = document(fresh);
    cp_snapshot_free(fresh);
    /* The status's lists too. */
    int lists = json_equal(json_object_get(ist, "skipped_routes"),
                           json_object_get(fst, "skipped_routes")) &&
                json_equal(json_object_get(ist, "unresolved"), json_object_get(fst, "unresolved"));
    if (last && !lists) {
        char *x = json_dumps(ist, JSON_COMPACT), *y = json_dumps(fst, JSON_COMPACT);
        fprintf(stderr, "status: %s\nfresh status: %s\n", x, y);
        free(x);
        free(y);
    }
    json_decref(ist);
    json_decref(fst);
    event_base_loop(base, EVLOOP_NONBLOCK); /* what the builder handed out meanwhile */
    json_t *a = json_deep_copy(inc), *b = json_deep_copy(full);
    json_object_del(a, "version");
    json_object_del(b, "version");
    int same = json_equal(a, b), mirrored = json_equal(mirror, inc);
    if (last && !same)
        show_diff(a, b);
    if (last && !mirrored)
        show_diff(mirror, inc);
    CU_ASSERT(json_integer_value(json_object_get(inc, "version")) <=
              json_integer_value(json_object_get(full, "version")));
    json_decref(a);
    json_decref(b);
    json_decref(inc);
    json_decref(full);
    return same && mirrored && lists;
}

/* Both agree, once the builder is done with what it had to do (an
 * expiry it has not noticed yet, a build it had not handed out): a
 * difference that stays for seconds is a wrong model. */
static void compare(void)
{
    no_expiry_near();
    int ok = 0;
    for (int i = 0; i < 10 && !ok; i++) {
        if (i)
            for (int k = 0; k < 30; k++) {
                usleep(10000);
                event_base_loop(base, EVLOOP_NONBLOCK);
            }
        ok = agree(i == 9);
    }
    CU_ASSERT_FATAL(ok);
    comparisons++;
}

/* ---- random writes ---- */

#define NPROV 5
#define NSEC 3
#define NROUTE 6
#define NKEY 8
#define NTEAM 3
#define NPROJ 3
#define NLIMIT 4
#define NRULE 4

static void w_secret(void)
{
    char name[16], value[32], q[1024];
    snprintf(name, sizeof(name), "s%u", pick(NSEC));
    snprintf(value, sizeof(value), "sk-%u", pick(1000000));
    unsigned char *blob;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(cp_secret_seal(&key, name, value, strlen(value), &blob, &n), 0);
    char hex[512];
    for (size_t i = 0; i < n && 2 * i + 2 < sizeof(hex); i++)
        snprintf(hex + 2 * i, 3, "%02x", blob[i]);
    free(blob);
    int had = exists("secrets", "name", name);
    snprintf(q, sizeof(q),
             "INSERT INTO secrets (name, ciphertext, master_key_id) VALUES ('%s', '\\x%s', '%s') "
             "ON CONFLICT (name) DO UPDATE SET ciphertext = EXCLUDED.ciphertext, version = "
             "secrets.version + 1",
             name, hex, key.id);
    write_rec("secrets", had ? "update" : "create", name, q);
}

static void w_provider(void)
{
    char name[16], ref[24] = "NULL", q[1024];
    snprintf(name, sizeof(name), "p%u", pick(NPROV));
    char s[16];
    snprintf(s, sizeof(s), "s%u", pick(NSEC));
    if (pick(3) && exists("secrets", "name", s))
        snprintf(ref, sizeof(ref), "'%s'", s);
    if (exists("providers", "name", name) && pick(3) == 0) {
        char chk[256];
        snprintf(chk, sizeof(chk), "SELECT count(*) FROM route_entries WHERE provider = '%s'",
                 name);
        if (val(chk))
            return;
        snprintf(q, sizeof(q), "DELETE FROM providers WHERE name = '%s'", name);
        write_rec("providers", "delete", name, q);
        return;
    }
    int had = exists("providers", "name", name);
    snprintf(q, sizeof(q),
             "INSERT INTO providers (name, driver, base_url, credential_ref, enabled, headers, "
             "options) VALUES ('%s', 'openai', 'http://h%u.example/v1', %s, %s, '{\"x-n\": "
             "\"%u\"}', '{}') ON CONFLICT (name) DO UPDATE SET base_url = EXCLUDED.base_url, "
             "credential_ref = EXCLUDED.credential_ref, enabled = EXCLUDED.enabled, headers = "
             "EXCLUDED.headers, version = providers.version + 1",
             name, pick(3), ref, pick(4) ? "true" : "false", pick(3));
    write_rec("providers", had ? "update" : "create", name, q);
}

static void w_route(void)
{
    char name[16], q[2048];
    snprintf(name, sizeof(name), "r%u", pick(NROUTE));
    int had = exists("routes", "name", name);
    if (had && pick(4) == 0) {
        snprintf(q, sizeof(q), "DELETE FROM routes WHERE name = '%s'", name);
        write_rec("routes", "delete", name, q);
        return;
    }
    static const char *const strategies[] = {"ordered", "price", "latency", "auto"};
    static const char *const cache_ttls[] = {"NULL", "NULL", "60", "2592000"};
    static const char *const cache_scopes[] = {"team", "key", "project", "global"};
    /* The columns as the admin API stores them (defaults filled); the
     * builder carries them as they are, only when set. */
    /* The classifier and judge name another route (it may not exist: a
     * data plane counts that as the classifier's or the judge's failure). */
    char other[16], guard[320] = "NULL", judge[320] = "NULL";
    unsigned me = (unsigned)atoi(name + 1);
    snprintf(other, sizeof(other), "r%u", (me + 1 + pick(NROUTE - 1)) % NROUTE);
    unsigned g = pick(4), jd = pick(3);
    if (g == 2)
        snprintf(guard, sizeof(guard),
                 "'{\"policy\": \"block\", \"inspect\": [\"last_user\"], \"rules\": true, "
                 "\"min_severity\": \"low\", \"classifier\": null}'");
    else if (g == 3)
        snprintf(guard, sizeof(guard),
                 "'{\"policy\": \"log\", \"inspect\": [\"user\", \"tool\"], \"rules\": false, "
                 "\"min_severity\": \"high\", \"classifier\": {\"route\": \"%s\", "
                 "\"timeout_ms\": 2000, \"on_error\": \"fail_closed\"}}'",
                 other);
    if (jd == 2)
        snprintf(judge, sizeof(judge),
                 "'{\"sample_rate\": 0.25, \"route\": \"%s\", \"rubric\": {\"template\": "
                 "\"{{prompt}} {{answer}}\", \"scale_min\": 1, \"scale_max\": 5, \"pass_min\": "
                 "4}, \"keep_text\": false}'",
                 other);
    unsigned alias = pick(2), strategy = pick(4);
    const char *ttl = cache_ttls[pick(4)], *scope = cache_scopes[pick(4)];
    const char *det = pick(2) ? "true" : "false";
    int off =
        snprintf(q, sizeof(q),
                 "INSERT INTO routes (name, aliases, strategy, cache_ttl_s, cache_scope, "
                 "cache_deterministic, guard, judge) VALUES ('%s', ARRAY['%s-a%u'], '%s', "
                 "%s, '%s', %s, %s, %s) ON CONFLICT (name) DO UPDATE SET aliases = "
                 "EXCLUDED.aliases, strategy = EXCLUDED.strategy, cache_ttl_s = "
                 "EXCLUDED.cache_ttl_s, cache_scope = EXCLUDED.cache_scope, "
                 "cache_deterministic = EXCLUDED.cache_deterministic, guard = "
                 "EXCLUDED.guard, judge = EXCLUDED.judge, version = routes.version + 1; "
                 "DELETE FROM route_entries WHERE route = '%s'",
                 name, name, alias, strategies[strategy], ttl, scope, det, guard, judge, name);
    unsigned n = pick(4), pos = 0;
    for (unsigned i = 0; i < n; i++) {
        char p[16];
        snprintf(p, sizeof(p), "p%u", (i + pick(NPROV)) % NPROV);
        if (!exists("providers", "name", p))
            continue;
        off += snprintf(q + off, sizeof(q) - (size_t)off,
                        "; INSERT INTO route_entries (route, position, provider, model, weight, "
                        "tier) VALUES ('%s', %u, '%s', 'm%u', %u, %u) ON CONFLICT DO NOTHING",
                        name, pos, p, pos, 1 + pick(3), pick(3));
        pos++;
    }
    write_rec("routes", had ? "update" : "create", name, q);
}

static void w_team(void)
{
    char name[16], q[1024];
    snprintf(name, sizeof(name), "t%u", pick(NTEAM));
    int had = exists("teams", "name", name);
    if (had && pick(3) == 0) {
        snprintf(q, sizeof(q),
                 "SELECT (SELECT count(*) FROM projects WHERE team = '%s') + (SELECT count(*) "
                 "FROM api_keys WHERE team = '%s')",
                 name, name);
        if (val(q))
            return;
        snprintf(q, sizeof(q), "DELETE FROM teams WHERE name = '%s'", name);
        write_rec("teams", "delete", name, q);
        return;
    }
    static const char *const cache_ttls[] = {"NULL", "0", "120"};
    static const char *const policies[] = {"NULL", "NULL", "'off'", "'log'", "'block'"};
    const char *allow = pick(2) ? "NULL" : "ARRAY['r1']";
    const char *budget = pick(2) ? "true" : "false";
    const char *ttl = cache_ttls[pick(3)];
    snprintf(q, sizeof(q),
             "INSERT INTO teams (name, allow_routes, require_budget, cache_ttl_s, guard_policy) "
             "VALUES ('%s', %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET allow_routes = "
             "EXCLUDED.allow_routes, require_budget = EXCLUDED.require_budget, cache_ttl_s = "
             "EXCLUDED.cache_ttl_s, guard_policy = EXCLUDED.guard_policy, version = teams.version "
             "+ 1",
             name, allow, budget, ttl, policies[pick(5)]);
    write_rec("teams", had ? "update" : "create", name, q);
}

static void w_project(void)
{
    char name[16], team[16], q[1024];
    snprintf(name, sizeof(name), "j%u", pick(NPROJ));
    int had = exists("projects", "name", name);
    if (had && pick(3) == 0) {
        snprintf(q, sizeof(q), "SELECT count(*) FROM api_keys WHERE project = '%s'", name);
        if (val(q))
            return;
        snprintf(q, sizeof(q), "DELETE FROM projects WHERE name = '%s'", name);
        write_rec("projects", "delete", name, q);
        return;
    }
    snprintf(team, sizeof(team), "t%u", pick(NTEAM));
    if (!had && !exists("teams", "name", team))
        return;
    /* A project keeps its team (its keys' team must be it). */
    snprintf(q, sizeof(q),
             "INSERT INTO projects (name, team, allow_models) VALUES ('%s', '%s', %s) ON "
             "CONFLICT (name) DO UPDATE SET allow_models = EXCLUDED.allow_models, version = "
             "projects.version + 1",
             name, team, pick(2) ? "NULL" : "ARRAY['m0']");
    write_rec("projects", had ? "update" : "create", name, q);
}

static void w_key(void)
{
    char id[16], q[1024], team[24] = "NULL", project[24] = "NULL";
    snprintf(id, sizeof(id), "k%u", pick(NKEY));
    int had = exists("api_keys", "id", id);
    if (had && pick(4) == 0) {
        snprintf(q, sizeof(q), "DELETE FROM api_keys WHERE id = '%s'", id);
        write_rec("keys", "delete", id, q);
        return;
    }
    char t[16], j[16];
    snprintf(t, sizeof(t), "t%u", pick(NTEAM));
    snprintf(j, sizeof(j), "j%u", pick(NPROJ));
    if (pick(2) && exists("projects", "name", j)) {
        snprintf(q, sizeof(q), "SELECT team FROM projects WHERE name = '%s'", j);
        struct cp_db_err err;
        PGresult *r = cp_db_exec(db, NULL, q, 0, NULL, &err);
        snprintf(team, sizeof(team), "'%s'", cp_db_value(r));
        PQclear(r);
        snprintf(project, sizeof(project), "'%s'", j);
    } else if (pick(2) && exists("teams", "name", t)) {
        snprintf(team, sizeof(team), "'%s'", t);
    }
    static const char *const statuses[] = {"active", "active", "disabled", "revoked"};
    static const char *const expiry[] = {"NULL", "NULL", "now() + interval '1 hour'",
                                         "now() - interval '1 hour'",
                                         "now() + interval '1500 milliseconds'"};
    char hash[65];
    for (int i = 0; i < 64; i++)
        hash[i] = "0123456789abcdef"[pick(16)];
    hash[64] = '\0';
    static const char *const cache_ttls[] = {"NULL", "NULL", "0", "30"};
    static const char *const policies[] = {"NULL", "NULL", "'off'", "'log'", "'block'"};
    const char *status = statuses[pick(4)], *expires = expiry[pick(5)];
    const char *allow = pick(2) ? "NULL" : "ARRAY['r0', 'r2']";
    const char *ttl = cache_ttls[pick(4)];
    snprintf(q, sizeof(q),
             "INSERT INTO api_keys (id, prefix, hash, status, expires_at, team, project, "
             "allow_routes, cache_ttl_s, guard_policy) VALUES ('%s', 'llmgw_', '%s', '%s', %s, %s, "
             "%s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, expires_at "
             "= EXCLUDED.expires_at, team = EXCLUDED.team, project = EXCLUDED.project, "
             "allow_routes = EXCLUDED.allow_routes, cache_ttl_s = EXCLUDED.cache_ttl_s, "
             "guard_policy = EXCLUDED.guard_policy, version = api_keys.version + 1",
             id, hash, status, expires, team, project, allow, ttl, policies[pick(5)]);
    write_rec("keys", had ? "update" : "create", id, q);
}

static void w_limit(void)
{
    char id[16], q[1024];
    snprintf(id, sizeof(id), "l%u", pick(NLIMIT));
    int had = exists("limits", "id", id);
    if (had && pick(4) == 0) {
        snprintf(q, sizeof(q), "DELETE FROM limits WHERE id = '%s'", id);
        write_rec("limits", "delete", id, q);
        return;
    }
    snprintf(q, sizeof(q),
             "INSERT INTO limits (id, scope_kind, scope, metric, period, amount, enabled) VALUES "
             "('%s', 'team', 't%u', 'requests', 'minute', %u, %s) ON CONFLICT (id) DO UPDATE SET "
             "amount = EXCLUDED.amount, enabled = EXCLUDED.enabled, version = limits.version + 1",
             id, pick(NTEAM), 1 + pick(100), pick(4) ? "true" : "false");
    write_rec("limits", had ? "update" : "create", id, q);
}

/* The seeded defaults too: g0.. are new ids, and now and then a default is
 * disabled, enabled or deleted (its row comes back as a g-rule never). */
static void w_guard_rule(void)
{
    char id[16], q[1024];
    snprintf(id, sizeof(id), "g%u", pick(NRULE));
    int had = exists("guard_rules", "id", id);
    if (pick(5) == 0) {
        /* A default: disabled or enabled (a write a snapshot sees), or an
         * edit of a disabled one (one it does not). */
        static const char *const ids[] = {"ignore-previous-instructions", "special-mode"};
        const char *d = ids[pick(2)];
        if (!exists("guard_rules", "id", d))
            return;
        snprintf(q, sizeof(q),
                 "UPDATE guard_rules SET enabled = %s, description = description || '.', version "
                 "= version + 1 WHERE id = '%s'",
                 pick(2) ? "true" : "false", d);
        write_rec("guard-rules", "update", d, q);
        return;
    }
    if (had && pick(4) == 0) {
        snprintf(q, sizeof(q), "DELETE FROM guard_rules WHERE id = '%s'", id);
        write_rec("guard-rules", "delete", id, q);
        return;
    }
    static const char *const severities[] = {"low", "medium", "high"};
    snprintf(q, sizeof(q),
             "INSERT INTO guard_rules (id, severity, kind, pattern, enabled) VALUES ('%s', '%s', "
             "'%s', ' word%u ', %s) ON CONFLICT (id) DO UPDATE SET severity = EXCLUDED.severity, "
             "kind = EXCLUDED.kind, pattern = EXCLUDED.pattern, enabled = EXCLUDED.enabled, "
             "version = guard_rules.version + 1",
             id, severities[pick(3)], pick(2) ? "phrase" : "regex", pick(5),
             pick(3) ? "true" : "false");
    write_rec("guard-rules", had ? "update" : "create", id, q);
}

/* A random image_prices value (SQL): none, one size, or a quality/size and
 * "auto" (the override's object replaces the catalog's whole). */
static const char *image_prices_sql(void)
{
    static const char *const v[] = {"NULL", "'{\"1024x1024\": 40000}'",
                                    "'{\"hd/1024x1024\": 80000, \"auto\": 1}'"};
    return v[pick(3)];
}

/* A random media price (SQL): NULL or picodollars. */
static const char *media_sql(char *buf, size_t n)
{
    if (pick(2) == 0)
        return "NULL";
    snprintf(buf, n, "%u", pick(100000));
    return buf;
}

static void w_price(void)
{
    char p[16], q[1024], id[48];
    snprintf(p, sizeof(p), "p%u", pick(NPROV));
    if (!exists("providers", "name", p))
        return;
    unsigned m = pick(3);
    snprintf(id, sizeof(id), "%s/m%u", p, m);
    if (pick(3) == 0) {
        snprintf(q, sizeof(q),
                 "DELETE FROM price_overrides WHERE provider = '%s' AND model = 'm%u'", p, m);
        write_rec("prices", "delete", id, q);
        return;
    }
    char a[16], i[16], o[16];
    snprintf(q, sizeof(q),
             "INSERT INTO price_overrides (provider, model, input_price, output_price, "
             "audio_second_price, image_price, media_output_price, image_prices) VALUES ('%s', "
             "'m%u', %u, %u, %s, %s, %s, %s) ON CONFLICT (provider, model) DO UPDATE SET "
             "input_price = EXCLUDED.input_price, audio_second_price = "
             "EXCLUDED.audio_second_price, image_price = EXCLUDED.image_price, "
             "media_output_price = EXCLUDED.media_output_price, image_prices = "
             "EXCLUDED.image_prices, version = price_overrides.version + 1",
             p, m, pick(1000), pick(1000), media_sql(a, sizeof(a)), media_sql(i, sizeof(i)),
             media_sql(o, sizeof(o)), image_prices_sql());
    write_rec("prices", "create", id, q);
}

static void w_catalog(void)
{
    char q[1024], c[16], mi[16];
    unsigned m = pick(3);
    snprintf(q, sizeof(q),
             "INSERT INTO model_catalog (provider, model, context_window, input_price, "
             "character_price, media_input_price, image_prices) VALUES (NULL, 'm%u', %u, %u, %s, "
             "%s, %s) ON CONFLICT (provider, model) DO UPDATE SET context_window = "
             "EXCLUDED.context_window, input_price = EXCLUDED.input_price, character_price = "
             "EXCLUDED.character_price, media_input_price = EXCLUDED.media_input_price, "
             "image_prices = EXCLUDED.image_prices",
             m, 1000 + pick(1000), pick(100), media_sql(c, sizeof(c)), media_sql(mi, sizeof(mi)),
             image_prices_sql());
    write_rec("catalog", "create", "catalog-row", q);
}

static void w_admin_token(void)
{
    char q[512], hash[65];
    unsigned n = pick(1000000);
    for (int i = 0; i < 64; i++)
        hash[i] = "0123456789abcdef"[pick(16)];
    hash[64] = '\0';
    snprintf(q, sizeof(q),
             "INSERT INTO admin_tokens (id, name, hash, scope) VALUES ('at%u', 'at%u', '%s', "
             "'read') ON CONFLICT DO NOTHING",
             n, n, hash);
    write_rec("admin-tokens", "create", "at", q);
}

/* Without an audit row: the builder cannot know what changed. */
static void w_bare(void)
{
    char q[256];
    snprintf(q, sizeof(q),
             "UPDATE teams SET require_budget = NOT require_budget WHERE name = 't%u'",
             pick(NTEAM));
    write_bare(q);
}

static void seal_secret(const char *name, const char *value, const char *action)
{
    unsigned char *blob;
    size_t n;
    char hex[512], q[1024];
    CU_ASSERT_EQUAL_FATAL(cp_secret_seal(&key, name, value, strlen(value), &blob, &n), 0);
    for (size_t i = 0; i < n && 2 * i + 2 < sizeof(hex); i++)
        snprintf(hex + 2 * i, 3, "%02x", blob[i]);
    free(blob);
    snprintf(q, sizeof(q),
             "INSERT INTO secrets (name, ciphertext, master_key_id) VALUES ('%s', '\\x%s', '%s') "
             "ON CONFLICT (name) DO UPDATE SET ciphertext = EXCLUDED.ciphertext",
             name, hex, key.id);
    write_rec("secrets", action, name, q);
}

/* Each path once, whatever the random writes below happen to hit. */
static void test_scripted(void)
{
    builder = start(on_publish, -1);
    json_decref(caught_up(builder));
    CU_ASSERT_PTR_NOT_NULL_FATAL(mirror);
    /* LLMGW_TEST_BULK=n: n keys and n/10 routes first (one write without
     * audit: a full build), to compare the builds' "ms" at that size. */
    const char *bulk = getenv("LLMGW_TEST_BULK");
    if (bulk && atoi(bulk) > 0) {
        char q[1024];
        int n = atoi(bulk);
        snprintf(q, sizeof(q),
                 "INSERT INTO providers (name, driver, base_url) VALUES ('bulk', 'openai', "
                 "'http://bulk.example/v1'); INSERT INTO api_keys (id, prefix, hash) SELECT "
                 "'bulk' || i, 'llmgw_', md5(i::text) || md5('k' || i) FROM generate_series(1, "
                 "%d) i; INSERT INTO routes (name) SELECT 'bulk' || i FROM generate_series(1, %d) "
                 "i; INSERT INTO route_entries (route, position, provider, model) SELECT 'bulk' || "
                 "i, 0, 'bulk', 'm' FROM generate_series(1, %d) i",
                 n, n / 10, n / 10);
        write_bare(q);
        compare();
    }
    /* A secret's new value reaches the provider that names it. */
    seal_secret("x-sec", "first-value", "create");
    write_rec("providers", "create", "x-prov",
              "INSERT INTO providers (name, driver, base_url, credential_ref) VALUES ('x-prov', "
              "'openai', 'http://x.example/v1', 'x-sec')");
    compare();
    seal_secret("x-sec", "second-value", "update");
    compare();
    /* A ref that does not open: listed as unresolved, then gone (while it
     * is there every poll makes a full build, which would hide a wrong
     * model). */
    write_rec("secrets", "create", "x-bad",
              "INSERT INTO secrets (name, ciphertext, master_key_id) VALUES ('x-bad', "
              "'\\x0102', 'deadbeef')");
    write_rec("providers", "create", "x-badp",
              "INSERT INTO providers (name, driver, base_url, credential_ref) VALUES ('x-badp', "
              "'openai', 'http://z.example/v1', 'x-bad')");
    compare();
    json_t *st = cp_snapshot_status(builder);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(st, "unresolved")), 1);
    json_decref(st);
    write_rec("providers", "delete", "x-badp", "DELETE FROM providers WHERE name = 'x-badp'");
    compare();
    st = cp_snapshot_status(builder);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(st, "unresolved")), 0);
    json_decref(st);
    /* A deleted provider takes its price overrides with it. */
    write_rec("prices", "create", "x-prov/xm",
              "INSERT INTO price_overrides (provider, model, input_price) VALUES ('x-prov', 'xm', "
              "7)");
    compare();
    write_rec("providers", "delete", "x-prov", "DELETE FROM providers WHERE name = 'x-prov'");
    compare();
    /* A route without entries is skipped, then in, then gone. */
    write_rec("providers", "create", "x-p2",
              "INSERT INTO providers (name, driver, base_url) VALUES ('x-p2', 'openai', "
              "'http://y.example/v1')");
    write_rec("routes", "create", "x-route", "INSERT INTO routes (name) VALUES ('x-route')");
    compare();
    write_rec("routes", "update", "x-route",
              "INSERT INTO route_entries (route, position, provider, model) VALUES ('x-route', 0, "
              "'x-p2', 'm')");
    compare();
    write_rec("routes", "delete", "x-route", "DELETE FROM routes WHERE name = 'x-route'");
    compare();
    /* A key comes, expires, goes. */
    write_rec("keys", "create", "x-key",
              "INSERT INTO api_keys (id, prefix, hash, expires_at) VALUES ('x-key', 'llmgw_', "
              "repeat('ab', 32), now() + interval '1200 milliseconds')");
    compare();
    usleep(1500000);
    compare();
    write_rec("keys", "delete", "x-key", "DELETE FROM api_keys WHERE id = 'x-key'");
    compare();
    /* A team, a limit, a project; nothing seen; a write without audit. */
    write_rec("teams", "create", "x-team", "INSERT INTO teams (name) VALUES ('x-team')");
    write_rec("projects", "create", "x-proj",
              "INSERT INTO projects (name, team) VALUES ('x-proj', 'x-team')");
    write_rec("limits", "create", "x-lim",
              "INSERT INTO limits (id, scope_kind, scope, metric, period, amount) VALUES "
              "('x-lim', 'team', 'x-team', 'requests', 'day', 5)");
    compare();
    write_rec("limits", "update", "x-lim", "UPDATE limits SET enabled = false WHERE id = 'x-lim'");
    compare();
    int before = deltas + wholes;
    write_rec("admin-tokens", "create", "x-at",
              "INSERT INTO admin_tokens (id, name, hash, scope) VALUES ('x-at', 'x-at', "
              "repeat('cd', 32), 'read')");
    compare();
    CU_ASSERT_EQUAL(deltas + wholes, before); /* nothing published */
    write_bare("UPDATE teams SET require_budget = true WHERE name = 'x-team'");
    compare();
    /* Guard rules: a new one, disabled (it leaves the snapshot), edited
     * while disabled (nothing published), enabled, deleted. */
    write_rec("guard-rules", "create", "x-rule",
              "INSERT INTO guard_rules (id, severity, kind, pattern) VALUES ('x-rule', 'high', "
              "'phrase', 'open sesame')");
    compare();
    write_rec("guard-rules", "update", "x-rule",
              "UPDATE guard_rules SET enabled = false WHERE id = 'x-rule'");
    compare();
    before = deltas + wholes;
    write_rec("guard-rules", "update", "x-rule",
              "UPDATE guard_rules SET pattern = 'open barley' WHERE id = 'x-rule'");
    compare();
    CU_ASSERT_EQUAL(deltas + wholes, before); /* nothing published */
    write_rec("guard-rules", "update", "x-rule",
              "UPDATE guard_rules SET enabled = true WHERE id = 'x-rule'");
    compare();
    write_rec("guard-rules", "delete", "x-rule", "DELETE FROM guard_rules WHERE id = 'x-rule'");
    compare();
    /* A route's guard and judge, a key's guard_policy. */
    write_rec("routes", "create", "x-guarded",
              "INSERT INTO routes (name, guard, judge) VALUES ('x-guarded', '{\"policy\": "
              "\"block\", \"inspect\": [\"last_user\"], \"rules\": true, \"min_severity\": "
              "\"low\", \"classifier\": null}', '{\"sample_rate\": 1.0, \"route\": \"gone\", "
              "\"rubric\": {\"template\": \"{{prompt}} {{answer}}\", \"scale_min\": 1, "
              "\"scale_max\": 5, \"pass_min\": 5}, \"keep_text\": false}'); INSERT INTO "
              "route_entries (route, position, provider, model) VALUES ('x-guarded', 0, 'x-p2', "
              "'m')");
    write_rec("keys", "create", "x-gkey",
              "INSERT INTO api_keys (id, prefix, hash, guard_policy) VALUES ('x-gkey', 'llmgw_', "
              "repeat('ef', 32), 'block')");
    compare();
    write_rec("routes", "update", "x-guarded",
              "UPDATE routes SET guard = NULL WHERE name = 'x-guarded'");
    write_rec("keys", "update", "x-gkey",
              "UPDATE api_keys SET guard_policy = NULL WHERE id = 'x-gkey'");
    compare();
    write_rec("routes", "delete", "x-guarded", "DELETE FROM routes WHERE name = 'x-guarded'");
    write_rec("keys", "delete", "x-gkey", "DELETE FROM api_keys WHERE id = 'x-gkey'");
    compare();
}

static void test_random_writes(void)
{
    void (*const ops[])(void) = {w_provider,    w_provider,   w_secret,    w_secret, w_route,
                                 w_route,       w_route,      w_key,       w_key,    w_key,
                                 w_team,        w_project,    w_limit,     w_price,  w_catalog,
                                 w_admin_token, w_guard_rule, w_guard_rule};
    CU_ASSERT_PTR_NOT_NULL_FATAL(builder);
    int writes = 0;
    for (int round = 0; round < 40; round++) {
        int n = 1 + (int)pick(5);
        for (int i = 0; i < n; i++, writes++) {
            if (pick(40) == 0)
                w_bare();
            else
                ops[pick(sizeof(ops) / sizeof(*ops))]();
        }
        compare();
    }
    json_t *st = cp_snapshot_status(builder);
    char *st_text = json_dumps(st, JSON_COMPACT);
    printf("\n%d writes, %d comparisons, %d deltas and %d whole documents published, status %s\n",
           writes, comparisons, deltas, wholes, st_text ? st_text : "?");
    free(st_text);
    json_decref(st);
    /* Most changes went out as deltas. */
    CU_ASSERT(deltas > 3 * wholes);
    cp_snapshot_free(builder);
    builder = NULL;
}

/* A write whose audit row names the wrong resource: the incremental path
 * cannot see it; the periodic full build (every poll here) finds the
 * difference, adopts the full result and publishes it whole. */
static void test_consistency_check(void)
{
    struct cp_snapshot *c = start(on_publish_count, 1);
    json_decref(caught_up(c));
    int before = checked_wholes;
    write_rec("keys", "update", "no-such-key",
              "UPDATE teams SET require_budget = NOT require_budget WHERE name = 'x-team'");
    json_decref(caught_up(c));
    int healed = 0;
    for (int i = 0; i < 200 && !healed; i++) {
        usleep(20000);
        event_base_loop(base, EVLOOP_NONBLOCK);
        if (checked_wholes == before)
            continue;
        json_t *doc = document(c);
        struct cp_snapshot *fresh = start(on_publish_ignore, -1);
        json_decref(caught_up(fresh));
        json_t *full = document(fresh);
        cp_snapshot_free(fresh);
        healed = json_equal(json_object_get(doc, "teams"), json_object_get(full, "teams"));
        json_decref(doc);
        json_decref(full);
    }
    CU_ASSERT(healed);
    cp_snapshot_free(c);
}

static int suite_init(void)
{
    url = getenv("LLMGW_TEST_DATABASE_URL");
    if (!url || !*url) {
        fprintf(stderr, "LLMGW_TEST_DATABASE_URL is not set: skipped\n");
        exit(77);
    }
    if (gw_log_level_from_env() != GW_OK)
        fprintf(stderr, "LLMGW_LOG_LEVEL: not a level\n");
    const char *seed = getenv("LLMGW_TEST_SEED");
    rng = seed && *seed ? strtoull(seed, NULL, 10) : (unsigned long long)time(NULL);
    printf("\nLLMGW_TEST_SEED=%llu\n", rng);
    rng = rng * 2654435761u + 1;
    struct cp_db_err err;
    int applied;
    if (evthread_use_pthreads() || curl_global_init(CURL_GLOBAL_DEFAULT) ||
        !(base = event_base_new()))
        return 1;
    if (cp_master_key_parse("5f2a9c0e7b3d4a1f8e6c2b9d0a7f3e5c1b8d4a6f2e9c0b7d3a5f1e8c6b4d2a90",
                            &key, NULL, 0))
        return 1;
    if (!(db = cp_db_connect(url, "snapshot test", &err))) {
        fprintf(stderr, "connect: %s\n", err.message);
        return 1;
    }
    if (cp_migrate_run(db, &applied, &err)) {
        fprintf(stderr, "migrate: %s\n", err.message);
        return 1;
    }
    return 0;
}

static int suite_clean(void)
{
    json_decref(mirror);
    cp_db_free(db);
    event_base_free(base);
    curl_global_cleanup();
    return 0;
}

static CU_TestInfo tests[] = {
    {"each path: the incremental model equals a full build", test_scripted},
    {"random writes: the incremental model equals a full build", test_random_writes},
    {"the periodic full build repairs a model the audit log misled", test_consistency_check},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
