#include "cp_snapshot.h"

#include <event2/event.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_db.h"
#include "cp_metrics.h"
#include "cp_snapshot_model.h"
#include "cp_trace.h"
#include "dp_snapshot.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_otel.h"
#include "gw_time.h"

#define CHANNEL "llmgw_config"
#define BACKOFF_MIN_MS 100
/* A lost connection is retried at most a second apart: a restarted database
 * is heard again, and the writes made meanwhile built, within about a
 * second of its coming back. One refused connect a second costs nothing. */
#define BACKOFF_MAX_MS 1000
/* An idle connection is looked at this often (cp_db_alive: no round trip),
 * so a loss is noticed even when no notification or poll is due. */
#define ALIVE_TICK_MS 1000
#define DEFAULT_POLL_MS 30000
#define DEFAULT_CACHE_TTL_MS 300000
#define MAX_UNRESOLVED 256
#define FAILURE_TTL_MS 30000     /* a failed fetch is not retried sooner */
#define FETCH_BUDGET_US 20000000 /* one build's total time in external fetches */
/* The slow poll checks the incremental model against a full build every
 * CHECK_POLLS polls (cp_snapshot_opts.check_polls), and at least every
 * CHECK_MAX_MS. */
#define CHECK_POLLS 10
#define CHECK_MAX_MS 300000

/* An external ref's last fetch: its value, reused for a TTL so that a
 * rebuild does not call Vault or AWS for every provider every time, and
 * wiped by the sweep at the end of the first build after the TTL; or its
 * failure, not retried for FAILURE_TTL_MS. */
struct cached_secret {
    struct cached_secret *next;
    char *ref;
    char *value; /* NULL: none (never fetched, or expired and wiped) */
    size_t len;
    int64_t fetched_ms;
    int64_t failed_ms; /* 0: the last fetch succeeded */
    char *error;       /* the last failure's message (never a secret) */
};

/* A provider credential_ref's last value that resolved, used when it stops
 * resolving (a replica still on the old master key, a backend outage), so
 * data planes keep the provider. Dropped (wiped) at the end of a build that
 * no longer references the ref. */
struct last_good {
    struct last_good *next;
    char *ref;
    char *value;
    size_t len;
    int used; /* referenced by the build in progress */
};

struct cp_snapshot {
    /* Set at creation, read-only afterwards. */
    char *conninfo;
    long poll_ms;
    long cache_ttl_ms;
    long check_polls; /* <0: never */
    int has_master_key;
    struct cp_master_key key;
    struct cp_secret_backend_config backends;
    void (*publish)(void *, const struct cp_snapshot_pub *);
    void *arg;
    struct cp_trace *trace;

    /* The daemon's loop: the publish callback runs there. */
    struct event *ready_ev;

    /* The builder's thread and everything only it touches. */
    pthread_t thread;
    int thread_started;
    struct event_base *tbase;
    struct event *wake_ev, *poll_ev, *retry_ev;
    /* The connection's socket, read for notifications and looked at every
     * ALIVE_TICK_MS. Non-NULL exactly while the connection is up and
     * LISTENing: everything that uses the connection checks it first. */
    struct event *conn_ev;
    struct cp_db *db; /* NULL until the first connect; then reconnected in place */
    long backoff_ms;
    int connect_logged; /* the first connect's failure was logged */
    int dirty;
    /* The configuration version the model reflects: every write up to it
     * is in the model (or changed nothing the data planes see). -1 none. */
    int64_t seen_version;
    int good_unresolved;       /* it left refs unresolved: the poll retries them */
    int last_failed;           /* the last attempt failed: the poll retries */
    int64_t next_expiry_ms;    /* the earliest future expires_at of an active key; 0 none */
    int64_t expiry_checked_ms; /* keys that expired up to this time are in the model */
    const char *full_why;      /* the next build must be a full one, because */
    int check_due, expiry_due; /* the next build checks the model / re-reads expired keys */
    long polls;
    int64_t last_full_ms;
    int lists_dirty; /* the status's lists are to be made again from the sets */
    /* The last good build: the model (documents and deltas are made from
     * it; under mlock, as other threads read it), the data plane's snapshot
     * of it (the next delta is validated by applying it to this one), and
     * the status's sets: provider -> unresolved record, skipped route ->
     * true. */
    pthread_mutex_t mlock;
    struct cp_model model;
    struct dp_snapshot *snap;
    json_t *unresolved, *skipped;
    struct cached_secret *cache;
    struct last_good *good;
    int64_t fetch_spent_us; /* the build in progress, in external fetches */

    /* Shared, under lock. */
    pthread_mutex_t lock;
    int stopping;
    int has_pending; /* a build for the daemon's loop: */
    json_t *pending; /* its delta (holds credentials), NULL: whole */
    int64_t pending_version, pending_built_ms;
    int pending_traced; /* its build's span: pending_trace */
    struct gw_trace_ctx pending_trace;
    /* Status. */
    int64_t st_version, st_built_ms, st_error_ms, st_config_version;
    long long st_builds, st_failed;
    char st_error[512]; /* "" when the last attempt succeeded */
    int st_db_up;
    json_t *st_unresolved; /* array */
    json_t *st_skipped;    /* array of route names */
};

static void wipe_free(char *p, size_t len)
{
    if (!p)
        return;
    explicit_bzero(p, len);
    free(p);
}

static void cache_entry_free(struct cached_secret *c)
{
    cp_secret_free(c->value, c->len);
    free(c->error);
    free(c->ref);
    free(c);
}

static void cache_free_all(struct cp_snapshot *b)
{
    while (b->cache) {
        struct cached_secret *c = b->cache;
        b->cache = c->next;
        cache_entry_free(c);
    }
}

/* Wipes the values past their TTL and drops entries that hold neither a
 * value nor a failure still in force. */
static void cache_sweep(struct cp_snapshot *b)
{
    int64_t now = gw_wall_ms();
    struct cached_secret **pp = &b->cache;
    while (*pp) {
        struct cached_secret *c = *pp;
        if (c->value && (b->cache_ttl_ms <= 0 || now - c->fetched_ms >= b->cache_ttl_ms)) {
            cp_secret_free(c->value, c->len);
            c->value = NULL;
            c->len = 0;
        }
        if (!c->value && (!c->failed_ms || now - c->failed_ms >= FAILURE_TTL_MS)) {
            *pp = c->next;
            cache_entry_free(c);
            continue;
        }
        pp = &c->next;
    }
}

static void good_entry_free(struct last_good *g)
{
    cp_secret_free(g->value, g->len);
    free(g->ref);
    free(g);
}

static struct last_good *good_find(struct cp_snapshot *b, const char *ref)
{
    for (struct last_good *g = b->good; g; g = g->next)
        if (strcmp(g->ref, ref) == 0)
            return g;
    return NULL;
}

/* Records v as ref's last resolved value (copied). */
static void good_set(struct cp_snapshot *b, const char *ref, const char *v, size_t n)
{
    struct last_good *g = good_find(b, ref);
    if (g && g->len == n && memcmp(g->value, v, n) == 0) {
        g->used = 1;
        return;
    }
    char *copy = malloc(n + 1);
    if (!copy)
        return; /* the previous value, if any, stays */
    memcpy(copy, v, n);
    copy[n] = '\0';
    if (!g) {
        g = calloc(1, sizeof(*g));
        char *r = strdup(ref);
        if (!g || !r) {
            free(g);
            free(r);
            cp_secret_free(copy, n);
            return;
        }
        g->ref = r;
        g->next = b->good;
        b->good = g;
    } else {
        cp_secret_free(g->value, g->len);
    }
    g->value = copy;
    g->len = n;
    g->used = 1;
}

/* Drops (wipes) the refs the build just made no longer references. */
static void good_sweep(struct cp_snapshot *b)
{
    struct last_good **pp = &b->good;
    while (*pp) {
        struct last_good *g = *pp;
        if (!g->used) {
            *pp = g->next;
            good_entry_free(g);
            continue;
        }
        g->used = 0;
        pp = &g->next;
    }
}

static void good_free_all(struct cp_snapshot *b)
{
    while (b->good) {
        struct last_good *g = b->good;
        b->good = g->next;
        good_entry_free(g);
    }
}

/* ------------------------------------------------------------------ */
/* Status */

static void set_failure(struct cp_snapshot *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void set_failure(struct cp_snapshot *b, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    b->last_failed = 1;
    pthread_mutex_lock(&b->lock);
    snprintf(b->st_error, sizeof(b->st_error), "%s", msg);
    b->st_error_ms = gw_wall_ms();
    b->st_failed++;
    pthread_mutex_unlock(&b->lock);
    /* The last good snapshot keeps being served. Messages never hold a
     * credential: they name fields and rows, and Postgres never sees one. */
    gw_logf(GW_LOG_WARN, "snapshot build failed: the last good snapshot stays", "{s:s,s:I}",
            "error", msg, "serving_version", (json_int_t)b->model.version);
}

static void set_db_up(struct cp_snapshot *b, int up)
{
    pthread_mutex_lock(&b->lock);
    b->st_db_up = up;
    pthread_mutex_unlock(&b->lock);
}

struct dp_snapshot *cp_snapshot_acquire(struct cp_snapshot *b)
{
    pthread_mutex_lock(&b->mlock);
    struct dp_snapshot *s = b->snap;
    if (s)
        dp_snapshot_ref(s);
    pthread_mutex_unlock(&b->mlock);
    return s;
}

json_t *cp_snapshot_status(struct cp_snapshot *b)
{
    /* Copies, not references: the builder's thread replaces these arrays,
     * and the answer is freed on another thread. */
    pthread_mutex_lock(&b->lock);
    json_t *j = json_pack(
        "{s:I,s:I,s:I,s:s?,s:o?,s:o,s:o,s:I,s:I,s:s}", "version", (json_int_t)b->st_version,
        "config_version", (json_int_t)b->st_config_version, "built_at_ms",
        (json_int_t)b->st_built_ms, "last_error", b->st_error[0] ? b->st_error : NULL,
        "last_error_at_ms", b->st_error_ms ? json_integer(b->st_error_ms) : NULL, "unresolved",
        json_deep_copy(b->st_unresolved), "skipped_routes", json_deep_copy(b->st_skipped), "builds",
        (json_int_t)b->st_builds, "failed_builds", (json_int_t)b->st_failed, "database",
        b->st_db_up ? "ok" : "down");
    pthread_mutex_unlock(&b->lock);
    return j;
}

/* ------------------------------------------------------------------ */
/* Hand-off to the daemon's loop */

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_snapshot *b = arg;
    pthread_mutex_lock(&b->lock);
    int have = b->has_pending;
    json_t *delta = b->pending;
    struct cp_snapshot_pub p = {.version = b->pending_version,
                                .built_at_ms = b->pending_built_ms,
                                .traced = b->pending_traced,
                                .trace = b->pending_trace};
    b->has_pending = 0;
    b->pending = NULL;
    pthread_mutex_unlock(&b->lock);
    if (!have)
        return;
    /* Serialized here: the builds made meanwhile were merged into it. */
    size_t len = 0;
    char *text = delta ? dp_snapshot_dump(delta, JSON_COMPACT, &len) : NULL;
    if (text) {
        p.base_version = json_integer_value(json_object_get(delta, "base_version"));
        p.delta = text;
        p.delta_len = len;
    }
    b->publish(b->arg, &p);
    wipe_free(text, p.delta_len);
    dp_snapshot_wipe_json(delta);
    json_decref(delta);
}

char *cp_snapshot_document(struct cp_snapshot *b, int64_t *version, size_t *len)
{
    char *doc = NULL;
    pthread_mutex_lock(&b->mlock);
    if (b->model.version >= 0) {
        doc = cp_model_document(&b->model, len);
        *version = b->model.version;
    }
    pthread_mutex_unlock(&b->mlock);
    return doc;
}

/* ------------------------------------------------------------------ */
/* Credentials */

/* The plaintext an external ref names, from the cache or its backend. On
 * success *value is the cache's copy (not to be freed). A failure is cached
 * for FAILURE_TTL_MS, and no fetch starts once the build has spent
 * FETCH_BUDGET_US in fetches; an expired value stays in its entry until the
 * sweep at the end of the build. */
static int resolve_external(struct cp_snapshot *b, const char *text, const char **value,
                            size_t *len, char *err, size_t errlen)
{
    int64_t now = gw_wall_ms();
    struct cached_secret *c = b->cache;
    while (c && strcmp(c->ref, text) != 0)
        c = c->next;
    if (c && c->value && b->cache_ttl_ms > 0 && now - c->fetched_ms < b->cache_ttl_ms) {
        *value = c->value;
        *len = c->len;
        return GW_OK;
    }
    if (c && c->failed_ms && now - c->failed_ms < FAILURE_TTL_MS) {
        snprintf(err, errlen, "%s (failed %lld s ago; retried after %d s)",
                 c->error ? c->error : "the fetch failed", (long long)(now - c->failed_ms) / 1000,
                 FAILURE_TTL_MS / 1000);
        return GW_EIO;
    }
    if (b->fetch_spent_us >= FETCH_BUDGET_US) {
        snprintf(err, errlen,
                 "'%s' not fetched: this build spent its %d s budget for external fetches", text,
                 FETCH_BUDGET_US / 1000000);
        return GW_EIO;
    }
    struct cp_secret_ref ref;
    if (cp_secret_ref_parse(text, &ref, err, errlen) != GW_OK)
        return GW_EINVAL;
    char *v = NULL;
    size_t n = 0;
    int64_t t0 = gw_now_us();
    int rc = cp_secret_resolve(&b->backends, &ref, &v, &n, err, errlen);
    b->fetch_spent_us += gw_now_us() - t0;
    cp_secret_ref_free(&ref);
    if (!c) {
        c = calloc(1, sizeof(*c));
        char *r = strdup(text);
        if (!c || !r) {
            free(c);
            free(r);
            cp_secret_free(v, n);
            snprintf(err, errlen, "out of memory");
            return GW_ENOMEM;
        }
        c->ref = r;
        c->next = b->cache;
        b->cache = c;
    }
    if (rc != GW_OK) {
        free(c->error);
        c->error = strdup(err);
        c->failed_ms = gw_wall_ms();
        return rc;
    }
    cp_secret_free(c->value, c->len);
    free(c->error);
    c->error = NULL;
    c->failed_ms = 0;
    c->value = v;
    c->len = n;
    c->fetched_ms = now;
    *value = v;
    *len = n;
    return GW_OK;
}

/* One secrets row, as read in the build's transaction. */
struct secret_row {
    const char *name, *backend, *ciphertext /* bytea text form */, *key_id, *backend_ref;
};

static const struct secret_row *find_secret(const struct secret_row *rows, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].name, name) == 0)
            return &rows[i];
    return NULL;
}

/* Sets p's "credential" from ref, or returns GW_ENOTFOUND with the reason
 * in why. */
static int resolve_credential(struct cp_snapshot *b, json_t *p, const char *ref,
                              const struct secret_row *rows, int nrows, char *why, size_t whylen)
{
    const char *ext = NULL;
    const struct secret_row *row = NULL;
    if (strchr(ref, ':')) {
        ext = ref; /* a backend ref written on the provider itself */
    } else {
        row = find_secret(rows, nrows, ref);
        if (!row) {
            snprintf(why, whylen, "no secret named '%s'", ref);
            return GW_ENOTFOUND;
        }
        if (strcmp(row->backend, "builtin") != 0) {
            if (!row->backend_ref) {
                snprintf(why, whylen, "the %s secret '%s' has no backend_ref", row->backend, ref);
                return GW_ENOTFOUND;
            }
            ext = row->backend_ref;
        }
    }
    if (ext) {
        const char *v;
        size_t n;
        char err[400];
        if (resolve_external(b, ext, &v, &n, err, sizeof(err)) != GW_OK) {
            snprintf(why, whylen, "%s", err);
            return GW_ENOTFOUND;
        }
        if (n == 0 || json_object_set_new(p, "credential", json_stringn(v, n))) {
            snprintf(why, whylen, "the value of '%s' is empty or not UTF-8", ext);
            return GW_ENOTFOUND;
        }
        return GW_OK;
    }
    if (!b->has_master_key) {
        snprintf(why, whylen, "LLMGW_MASTER_KEY is not set: built-in secrets cannot be opened");
        return GW_ENOTFOUND;
    }
    if (!row->ciphertext) {
        snprintf(why, whylen, "the secret '%s' has no value", ref);
        return GW_ENOTFOUND;
    }
    size_t bloblen = 0;
    unsigned char *blob = PQunescapeBytea((const unsigned char *)row->ciphertext, &bloblen);
    if (!blob) {
        snprintf(why, whylen, "out of memory");
        return GW_ENOTFOUND;
    }
    char *plain = NULL;
    size_t n = 0;
    int rc = cp_secret_open(&b->key, row->name, blob, bloblen, &plain, &n);
    PQfreemem(blob);
    if (rc == GW_EINVAL) {
        snprintf(why, whylen,
                 "the secret '%s' does not open under the master key %s (sealed under %s, or "
                 "altered)",
                 ref, b->key.id, row->key_id ? row->key_id : "an unknown key");
        return GW_ENOTFOUND;
    }
    if (rc != GW_OK) {
        snprintf(why, whylen, "the secret '%s' could not be opened (%s)", ref, gw_strerror(rc));
        return GW_ENOTFOUND;
    }
    int bad = n == 0 || json_object_set_new(p, "credential", json_stringn(plain, n)) != 0;
    cp_secret_free(plain, n);
    if (bad) {
        snprintf(why, whylen, "the value of '%s' is empty or not UTF-8", ref);
        return GW_ENOTFOUND;
    }
    return GW_OK;
}

/* ------------------------------------------------------------------ */
/* Building */

static void lose_connection(struct cp_snapshot *b);

/* Each query exists whole (a full build) and for some rows only (an
 * incremental one): the same object, so that the two agree byte for byte.
 * A row set is a JSON array of names in $1 (and $2). */
#define ANY_1 "ANY (ARRAY(SELECT json_array_elements_text($1::json)))"
#define ANY_2 "ANY (ARRAY(SELECT json_array_elements_text($2::json)))"
#define PROVIDERS_FROM                                                                             \
    "SELECT json_build_object('name', name, 'driver', driver, 'base_url', base_url, 'headers', "   \
    "headers, 'options', options, 'credential_ref', credential_ref, 'enabled', enabled, "          \
    "'first_byte_timeout_ms', first_byte_timeout_ms, 'idle_timeout_ms', idle_timeout_ms)::text, "  \
    "credential_ref FROM providers "
static const char SQL_PROVIDERS[] = PROVIDERS_FROM "ORDER BY name";
#define ANY_3 "ANY (ARRAY(SELECT json_array_elements_text($3::json)))"
/* The providers named ($1), those whose credential_ref names a secret
 * written ($2), and those whose credential is an external ref in $3 (its
 * cached value expired): a secret row's backend_ref, or the ref itself. */
#define PROVIDERS_SOME                                                                             \
    "name = " ANY_1 " OR credential_ref = " ANY_2 " OR credential_ref = " ANY_3                    \
    " OR credential_ref IN (SELECT name FROM secrets WHERE backend_ref = " ANY_3 ")"
static const char SQL_PROVIDERS_SOME[] = PROVIDERS_FROM "WHERE " PROVIDERS_SOME;
#define SECRETS_FROM "SELECT name, backend, ciphertext, master_key_id, backend_ref FROM secrets "
static const char SQL_SECRETS[] =
    SECRETS_FROM "WHERE name IN (SELECT credential_ref FROM providers WHERE credential_ref IS NOT "
                 "NULL)";
static const char SQL_SECRETS_SOME[] =
    SECRETS_FROM "WHERE name IN (SELECT credential_ref FROM providers WHERE " PROVIDERS_SOME ")";
/* The object text obj with the member name: expr (json or jsonb) appended
 * when expr is not NULL: an optional member, without a CASE per
 * combination of the optional members present. */
#define PLUS_MEMBER(name, expr) " || coalesce(',\"" name "\":' || (" expr ")::text, '')"
#define WITH_MEMBERS(obj, members) "left(" obj ", -1)" members " || '}'"
/* A route carries "cache" only when its cache is on (cache_ttl_s set), and
 * "guard" and "judge" only when set (docs/guardrails.md): a route without
 * them is the same object it was before them. */
#define ROUTE_MEMBERS                                                                              \
    "'name', r.name, 'aliases', r.aliases, 'role', r.role, "                                       \
    "'capability', r.capability, 'strategy', r.strategy, 'fallback_timeout_ms', "                  \
    "r.fallback_timeout_ms, 'max_duration_ms', r.max_duration_ms, 'entries', coalesce((SELECT "    \
    "json_agg(json_build_object('provider', e.provider, 'model', e.model, 'weight', e.weight, "    \
    "'high_cost', e.high_cost, 'tier', e.tier) ORDER BY e.position) FROM route_entries e WHERE "   \
    "e.route = r.name), '[]'::json)"
#define ROUTE_OBJECT                                                                               \
    "CASE WHEN r.cache_ttl_s IS NULL THEN json_build_object(" ROUTE_MEMBERS                        \
    ") ELSE json_build_object(" ROUTE_MEMBERS ", 'cache', json_build_object('ttl_s', "             \
    "r.cache_ttl_s, 'scope', r.cache_scope, 'deterministic', r.cache_deterministic)) END::text"
#define ROUTE_OPTIONAL PLUS_MEMBER("guard", "r.guard") PLUS_MEMBER("judge", "r.judge")
#define ROUTES_FROM "SELECT r.name, " WITH_MEMBERS(ROUTE_OBJECT, ROUTE_OPTIONAL) " FROM routes r "
static const char SQL_ROUTES[] = ROUTES_FROM "ORDER BY r.name";
static const char SQL_ROUTES_SOME[] = ROUTES_FROM "WHERE r.name = " ANY_1;
/* A key past its expires_at goes out as status "expired": the data plane
 * serves only "active" keys. */
/* A key and a team carry "cache_ttl_s" and "guard_policy" only when set
 * (null: the routes decide, the same as absent). */
#define KEY_MEMBERS                                                                                \
    "'id', id, 'hash', hash, 'status', CASE WHEN status = 'active' AND "                           \
    "expires_at IS NOT NULL AND expires_at <= now() THEN 'expired' ELSE status END, "              \
    "'expires_at_ms', (extract(epoch FROM expires_at) * 1000)::bigint, 'team', team, 'project', "  \
    "project, 'allow_routes', allow_routes, 'allow_providers', allow_providers, 'allow_models', "  \
    "allow_models"
#define KEY_OBJECT                                                                                 \
    "CASE WHEN cache_ttl_s IS NULL THEN json_build_object(" KEY_MEMBERS                            \
    ") ELSE json_build_object(" KEY_MEMBERS ", 'cache_ttl_s', cache_ttl_s) END::text"
#define GUARD_POLICY PLUS_MEMBER("guard_policy", "to_json(guard_policy)")
#define KEYS_FROM "SELECT " WITH_MEMBERS(KEY_OBJECT, GUARD_POLICY) " FROM api_keys "
static const char SQL_KEYS[] = KEYS_FROM "ORDER BY id";
static const char SQL_KEYS_SOME[] = KEYS_FROM "WHERE id = " ANY_1;
/* The active keys that expired after $1 (Unix ms), up to now: the only ones
 * whose object changed since then without a write (api_keys_expiry). */
static const char SQL_KEYS_EXPIRED[] =
    KEYS_FROM "WHERE status = 'active' AND expires_at > to_timestamp($1::double precision / "
              "1000) AND expires_at <= now()";
/* Teams carry the allowlists their keys' intersect with, and whether a
 * budget is required (docs/budgets.md). */
#define TEAM_MEMBERS                                                                               \
    "'name', name, 'allow_routes', allow_routes, 'allow_providers', "                              \
    "allow_providers, 'allow_models', allow_models, 'require_budget', require_budget"
#define TEAM_OBJECT                                                                                \
    "CASE WHEN cache_ttl_s IS NULL THEN json_build_object(" TEAM_MEMBERS                           \
    ") ELSE json_build_object(" TEAM_MEMBERS ", 'cache_ttl_s', cache_ttl_s) END::text"
#define TEAMS_FROM "SELECT " WITH_MEMBERS(TEAM_OBJECT, GUARD_POLICY) " FROM teams "
static const char SQL_TEAMS[] = TEAMS_FROM "ORDER BY name";
static const char SQL_TEAMS_SOME[] = TEAMS_FROM "WHERE name = " ANY_1;
/* Projects carry allowlists too: a key's target must pass its own, its
 * team's and its project's. */
#define PROJECTS_FROM                                                                              \
    "SELECT json_build_object('name', name, 'team', team, 'allow_routes', allow_routes, "          \
    "'allow_providers', allow_providers, 'allow_models', allow_models)::text FROM projects "
static const char SQL_PROJECTS[] = PROJECTS_FROM "ORDER BY name";
static const char SQL_PROJECTS_SOME[] = PROJECTS_FROM "WHERE name = " ANY_1;
/* Enabled limits only: a disabled one does not exist for the data plane. */
#define LIMITS_FROM                                                                                \
    "SELECT json_build_object('id', id, 'scope_kind', scope_kind, 'scope', scope, 'metric', "      \
    "metric, 'period', period, 'amount', amount, 'reservation', reservation, 'offline', "          \
    "offline, 'unpriced', unpriced, 'currency', currency)::text FROM limits WHERE enabled "
static const char SQL_LIMITS[] = LIMITS_FROM "ORDER BY id";
static const char SQL_LIMITS_SOME[] = LIMITS_FROM "AND id = " ANY_1;
/* The enabled guard rules (docs/guardrails.md), one array, in byte order
 * of their ids (strcmp's, whatever the database's collation). */
static const char SQL_GUARD_RULES[] =
    "SELECT coalesce(json_agg(json_build_object('id', id, 'severity', severity, 'description', "
    "description, 'kind', kind, 'pattern', pattern) ORDER BY id COLLATE \"C\"), '[]'::json)::text "
    "FROM guard_rules WHERE enabled";
/* The earliest future expiry, and the transaction's now() (Unix ms). */
#define EXPIRY(after)                                                                              \
    "SELECT (SELECT (extract(epoch FROM min(expires_at)) * 1000)::bigint FROM api_keys WHERE "     \
    "status = 'active' AND expires_at > " after "), (extract(epoch FROM now()) * 1000)::bigint"
static const char SQL_EXPIRY[] = EXPIRY("now()");
/* The same after the last expiry check ($1, Unix ms), not after now: a key
 * that expired since then and is not re-read yet keeps the next expiry in
 * the past, so the poll re-reads it. */
static const char SQL_EXPIRY_SINCE[] = EXPIRY("to_timestamp($1::double precision / 1000)");
/* What the writes after version $1 up to $2 touched (cp_resource_record). */
static const char SQL_AUDIT[] =
    "SELECT config_version, resource, resource_id, action FROM audit_log WHERE config_version > "
    "$1 AND config_version <= $2 ORDER BY config_version";
/* The catalog with the price overrides applied (docs/pricing.md): an
 * override wins over the catalog's price for its (provider, model), class by
 * class, while both are in the same currency; an override in another
 * currency brings its own classes only (prices in two currencies are never
 * mixed, nor converted). An override with no catalog row of its own becomes
 * one, taking what a provider-less row of the same model says about context
 * and capabilities (and its prices, by the same rule). image_prices is one
 * class: an override's object, when it has one, replaces the catalog's
 * whole (its sizes are not merged key by key). */
#define MERGED(row, x)                                                                             \
    "'" x "', CASE WHEN o.currency IS NULL OR o.currency = " row ".currency THEN coalesce(o." x    \
    ", " row "." x ") ELSE o." x " END, "
#define MERGED_PRICES(row)                                                                         \
    MERGED(row, "input_price")                                                                     \
    MERGED(row, "output_price")                                                                    \
    MERGED(row, "cache_read_price")                                                                \
    MERGED(row, "cache_write_5m_price")                                                            \
    MERGED(row, "cache_write_1h_price")                                                            \
    MERGED(row, "reasoning_price")                                                                 \
    MERGED(row, "audio_second_price")                                                              \
    MERGED(row, "character_price")                                                                 \
    MERGED(row, "image_price")                                                                     \
    MERGED(row, "media_input_price")                                                               \
    MERGED(row, "media_output_price") MERGED(row, "image_prices")
#define CATALOG_PRICES MERGED_PRICES("c")
#define FALLBACK_PRICES MERGED_PRICES("a")
/* Every catalog row, an override applied. */
#define CATALOG_ROWS                                                                               \
    "SELECT json_strip_nulls(json_build_object('provider', c.provider, 'model', c.model, "         \
    "'context_window', c.context_window, 'max_output_tokens', c.max_output_tokens, "               \
    "'capabilities', c.capabilities, " CATALOG_PRICES                                              \
    "'currency', coalesce(o.currency, c.currency)))::text, c.provider IS NULL, c.provider, "       \
    "c.model FROM model_catalog c LEFT JOIN price_overrides o ON o.provider = c.provider AND "     \
    "o.model = c.model "
/* Every override without a catalog row of its own. */
#define OVERRIDE_ROWS                                                                              \
    "SELECT json_strip_nulls(json_build_object('provider', o.provider, 'model', o.model, "         \
    "'context_window', a.context_window, 'max_output_tokens', a.max_output_tokens, "               \
    "'capabilities', a.capabilities, " FALLBACK_PRICES                                             \
    "'currency', o.currency))::text, false, o.provider, o.model FROM price_overrides o LEFT "      \
    "JOIN model_catalog a ON a.provider IS NULL AND a.model = o.model WHERE NOT EXISTS (SELECT "   \
    "1 FROM model_catalog c WHERE c.provider = o.provider AND c.model = o.model) "
static const char SQL_CATALOG[] = CATALOG_ROWS "UNION ALL " OVERRIDE_ROWS "ORDER BY 2 DESC, 3, 4";

/* Each row's first column parsed as JSON and appended to arr. */
static int append_rows(json_t *arr, const PGresult *r, int col, char *err, size_t errlen)
{
    for (int i = 0; i < PQntuples(r); i++) {
        json_error_t je;
        json_t *o = json_loads(PQgetvalue(r, i, col), 0, &je);
        if (!o || json_array_append_new(arr, o)) {
            snprintf(err, errlen, "a row did not render as JSON: %s", je.text);
            return GW_EINVAL;
        }
    }
    return GW_OK;
}

static int connection_lost(struct cp_snapshot *b)
{
    return !b->conn_ev || PQstatus(cp_db_conn(b->db)) != CONNECTION_OK;
}

/* Hands a build to the daemon's loop: its delta (taken; NULL for a whole
 * document) and its span (NULL: none). A build the loop has not taken yet
 * is merged with it: the later delta's resources replace the earlier's
 * (base_version stays the earlier's); with a whole document on either
 * side, the watchers get a whole one. The later build's span is the
 * publish's. */
static void hand_over(struct cp_snapshot *b, json_t *delta, int64_t version, int64_t built,
                      const struct gw_trace_ctx *span)
{
    pthread_mutex_lock(&b->lock);
    if (b->has_pending && (!b->pending || !delta)) {
        dp_snapshot_wipe_json(b->pending);
        json_decref(b->pending);
        b->pending = NULL;
        dp_snapshot_wipe_json(delta);
        json_decref(delta);
    } else if (b->has_pending) {
        const char *k;
        json_t *v;
        json_object_foreach(delta, k, v)
        {
            json_t *have = json_object_get(b->pending, k);
            if (json_is_object(v) && json_is_object(have)) {
                /* A provider the newer build replaces goes with its
                 * credential wiped (jansson frees it unwiped). */
                if (strcmp(k, "providers") == 0) {
                    const char *name;
                    json_t *old;
                    json_t *gone = json_object();
                    json_object_foreach(have, name, old)
                    {
                        if (json_object_get(v, name))
                            json_object_set(gone, name, old);
                    }
                    json_t *holder = json_pack("{s:o}", "providers", gone);
                    json_object_update(have, v);
                    dp_snapshot_wipe_json(holder);
                    json_decref(holder);
                } else {
                    json_object_update(have, v);
                }
            } else if (strcmp(k, "base_version") != 0)
                json_object_set(b->pending, k, v);
        }
        json_decref(delta); /* its members are the pending one's now */
    } else {
        b->pending = delta;
    }
    b->has_pending = 1;
    b->pending_version = version;
    b->pending_built_ms = built;
    b->pending_traced = span != NULL;
    if (span)
        b->pending_trace = *span;
    pthread_mutex_unlock(&b->lock);
    event_active(b->ready_ev, 0, 0);
}

/* Sets the provider p's "credential" from ref. NULL when it resolved;
 * otherwise the status's record of why not (new reference), p keeping the
 * last value ref resolved to in this process, if any. */
static json_t *provider_credential(struct cp_snapshot *b, json_t *p, const char *ref,
                                   const struct secret_row *secrets, int nsec)
{
    char why[400];
    if (resolve_credential(b, p, ref, secrets, nsec, why, sizeof(why)) == GW_OK) {
        json_t *cred = json_object_get(p, "credential");
        good_set(b, ref, json_string_value(cred), json_string_length(cred));
        return NULL;
    }
    const char *name = json_string_value(json_object_get(p, "name"));
    struct last_good *g = good_find(b, ref);
    if (g && json_object_set_new(p, "credential", json_stringn(g->value, g->len)) == 0) {
        /* The last good value stays in service; the ref is still listed
         * (and the poll keeps retrying it). */
        g->used = 1;
        char cause[400];
        memcpy(cause, why, sizeof(cause));
        snprintf(why, sizeof(why), "using the last resolved value: %.360s", cause);
        gw_logf(GW_LOG_WARN,
                "credential_ref does not resolve: the provider keeps its last resolved value",
                "{s:s,s:s,s:s}", "provider", name ? name : "?", "credential_ref", ref, "reason",
                why);
    } else {
        gw_logf(GW_LOG_WARN, "credential_ref does not resolve: the provider goes out without one",
                "{s:s,s:s,s:s}", "provider", name ? name : "?", "credential_ref", ref, "reason",
                why);
    }
    return json_pack("{s:s,s:s,s:s}", "provider", name ? name : "?", "credential_ref", ref,
                     "reason", why);
}

/* The secrets rows of r, pointing into r (calloc'd; free only the array). */
static struct secret_row *secret_rows(const PGresult *r, int *n)
{
    *n = PQntuples(r);
    struct secret_row *rows = calloc((size_t)*n + 1, sizeof(*rows));
    for (int i = 0; rows && i < *n; i++) {
        const char **f[5] = {&rows[i].name, &rows[i].backend, &rows[i].ciphertext, &rows[i].key_id,
                             &rows[i].backend_ref};
        for (int k = 0; k < 5; k++)
            *f[k] = PQgetisnull(r, i, k) ? NULL : PQgetvalue(r, i, k);
    }
    return rows;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The object set's members (name -> value) as an array sorted by name: of
 * the names (values 0) or of the values (values 1). At most max. */
static json_t *sorted(const json_t *set, int values, size_t max)
{
    size_t n = json_object_size(set), i = 0;
    const char **names = calloc(n + 1, sizeof(*names));
    json_t *a = json_array();
    if (!names || !a) {
        free(names);
        json_decref(a);
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)set, k, v) names[i++] = k;
    qsort(names, n, sizeof(*names), cmp_str);
    for (i = 0; i < n && i < max; i++)
        if (values)
            json_array_append(a, json_object_get(set, names[i]));
        else
            json_array_append_new(a, json_string(names[i]));
    free(names);
    return a;
}

/* The status's lists from the model's sets. */
static void status_lists(struct cp_snapshot *b)
{
    json_t *u = sorted(b->unresolved, 1, MAX_UNRESOLVED), *s = sorted(b->skipped, 0, (size_t)-1);
    pthread_mutex_lock(&b->lock);
    if (u) {
        json_decref(b->st_unresolved);
        b->st_unresolved = u;
        u = NULL;
    }
    if (s) {
        json_decref(b->st_skipped);
        b->st_skipped = s;
        s = NULL;
    }
    pthread_mutex_unlock(&b->lock);
    json_decref(u);
    json_decref(s);
}

/* A published build's span (cp_trace.h): the configuration versions it
 * took in were (from, b->seen_version]. 1 with *span set, 0 untraced. */
static int build_span(struct cp_snapshot *b, const json_t *delta, int64_t from, int64_t t0,
                      struct gw_trace_ctx *span)
{
    if (!b->trace)
        return 0;
    uint64_t end = gw_otel_now_ns();
    int64_t took_us = gw_now_us() - t0;
    struct cp_trace_build tb = {
        .version = b->model.version,
        .base_version = delta ? json_integer_value(json_object_get(delta, "base_version")) : 0,
        .kind = delta ? "delta" : "full",
        .result = "ok",
        .from_config = from,
        .to_config = b->seen_version,
        .start_ns = end - (uint64_t)(took_us > 0 ? took_us : 0) * 1000u,
        .end_ns = end};
    return cp_trace_build(b->trace, &tb, span);
}

/* A good build: status, metrics, the log line, and the hand-off (delta:
 * serialized, taken; NULL with changed: the whole document). from: the
 * configuration version the model reflected before it. */
static void build_done(struct cp_snapshot *b, int incremental, int changed, size_t nchanged,
                       json_t *delta, int64_t t0, int64_t from)
{
    int64_t built = gw_wall_ms();
    int64_t version = b->model.version;
    b->good_unresolved = (int)json_object_size(b->unresolved);
    b->last_failed = 0;
    if (b->lists_dirty)
        status_lists(b);
    b->lists_dirty = 0;
    pthread_mutex_lock(&b->lock);
    b->st_builds++;
    b->st_error[0] = '\0';
    b->st_error_ms = 0;
    b->st_config_version = b->seen_version;
    if (changed) {
        b->st_version = version;
        b->st_built_ms = built;
    }
    pthread_mutex_unlock(&b->lock);
    if (changed) {
        struct gw_trace_ctx span;
        int traced = build_span(b, delta, from, t0, &span);
        hand_over(b, delta, version, built, traced ? &span : NULL);
    } else {
        dp_snapshot_wipe_json(delta);
        json_decref(delta);
    }
    size_t nprov = b->model.count[CP_K_PROVIDERS], nkeys = b->model.count[CP_K_KEYS];
    cp_metrics_build(changed ? "ok" : "unchanged", (double)(gw_now_us() - t0) / 1e6);
    cp_metrics_snapshot_current();
    gw_logf(GW_LOG_INFO, changed ? "snapshot built" : "snapshot unchanged",
            "{s:I,s:I,s:i,s:i,s:i,s:i,s:i,s:b,s:i,s:f}", "version", (json_int_t)version,
            "config_version", (json_int_t)b->seen_version, "providers", (int)nprov, "routes",
            (int)b->model.count[CP_K_ROUTES], "keys", (int)nkeys, "unresolved", b->good_unresolved,
            "skipped_routes", (int)json_object_size(b->skipped), "incremental", incremental,
            "changed", (int)nchanged, "ms", (double)(gw_now_us() - t0) / 1000.0);
    if (changed && nprov > 0 && nkeys == 0)
        gw_logf(GW_LOG_WARN,
                "snapshot has providers and no API key: every data plane refuses every request "
                "(401) until a key is created (POST /v1/admin/keys)",
                "{s:I}", "version", (json_int_t)version);
}

/* Runs sql with up to three parameters in the open transaction; NULL
 * after filling dberr. */
static PGresult *query3(struct cp_snapshot *b, const char *sql, const char *p1, const char *p2,
                        const char *p3, struct cp_db_err *dberr)
{
    const char *p[] = {p1, p2, p3};
    return cp_db_exec(b->db, NULL, sql, p3 ? 3 : p2 ? 2 : p1 ? 1 : 0, p, dberr);
}

static PGresult *query(struct cp_snapshot *b, const char *sql, const char *p1, const char *p2,
                       struct cp_db_err *dberr)
{
    return query3(b, sql, p1, p2, NULL, dberr);
}

/* Notes the transaction's next expiry and now() (SQL_EXPIRY's row). */
static void note_expiry(struct cp_snapshot *b, const PGresult *r, int checked)
{
    b->next_expiry_ms =
        PQntuples(r) && !PQgetisnull(r, 0, 0) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : 0;
    if (checked && PQntuples(r))
        b->expiry_checked_ms = strtoll(PQgetvalue(r, 0, 1), NULL, 10);
}

/*
 * The full build: every table in one REPEATABLE READ READ ONLY transaction,
 * validated whole, and made the model. It is published whole when it
 * differs from the model (or there was none). check: the model claims to
 * be this configuration (a consistency check): a difference is an error of
 * the incremental path, logged and counted, and the full result wins.
 */
/* The builder's thread replaces its snapshot under mlock, so that
 * cp_snapshot_acquire (another thread) never sees one being freed. */
static void set_snap(struct cp_snapshot *b, struct dp_snapshot *s)
{
    pthread_mutex_lock(&b->mlock);
    struct dp_snapshot *old = b->snap;
    b->snap = s;
    pthread_mutex_unlock(&b->mlock);
    dp_snapshot_unref(old);
}

static void build_full(struct cp_snapshot *b, const char *why, int check)
{
    int64_t t0 = gw_now_us();
    struct cp_db_err dberr;
    enum { NQUERIES = 11 };
    PGresult *res[NQUERIES] = {0};
    json_t *doc = NULL;
    json_t *unresolved = json_object(), *skipped = json_object();
    struct secret_row *secrets = NULL;
    struct dp_snapshot *s = NULL;
    struct cp_model m;
    cp_model_init(&m);
    char err[512] = "";
    const char *step = "BEGIN";
    if (cp_db_cmd(b->db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, &dberr))
        goto dbfail;
    static const char *const sql[NQUERIES] = {"SELECT version FROM config_state WHERE id = 1",
                                              SQL_PROVIDERS,
                                              SQL_SECRETS,
                                              SQL_ROUTES,
                                              SQL_KEYS,
                                              SQL_CATALOG,
                                              SQL_TEAMS,
                                              SQL_LIMITS,
                                              SQL_PROJECTS,
                                              SQL_EXPIRY,
                                              SQL_GUARD_RULES};
    static const char *const steps[NQUERIES] = {
        "config_state", "providers", "secrets",  "routes",          "api_keys",   "model_catalog",
        "teams",        "limits",    "projects", "api_keys expiry", "guard_rules"};
    for (int i = 0; i < NQUERIES; i++) {
        step = steps[i];
        res[i] = cp_db_exec(b->db, NULL, sql[i], 0, NULL, &dberr);
        if (!res[i])
            goto dbfail;
    }
    note_expiry(b, res[9], 1);
    step = "COMMIT";
    if (cp_db_commit(b->db, &dberr))
        goto dbfail;

    const char *vs = cp_db_value(res[0]);
    if (!vs) {
        snprintf(err, sizeof(err), "config_state has no row: is the schema migrated?");
        goto fail;
    }
    int64_t version = strtoll(vs, NULL, 10);
    doc = json_pack("{s:I,s:[],s:[],s:[],s:[],s:[],s:[],s:[]}", "version", (json_int_t)version,
                    "providers", "routes", "keys", "catalog", "teams", "limits", "projects");
    if (!doc || !unresolved || !skipped) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    json_t *rules = json_loads(cp_db_value(res[10]) ? cp_db_value(res[10]) : "", 0, NULL);
    if (!json_is_array(rules)) {
        json_decref(rules);
        snprintf(err, sizeof(err), "the guard rules did not render as a JSON array");
        goto fail;
    }
    if (json_object_set_new(doc, "guard_rules", rules)) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    if (append_rows(json_object_get(doc, "providers"), res[1], 0, err, sizeof(err)) ||
        append_rows(json_object_get(doc, "keys"), res[4], 0, err, sizeof(err)) ||
        append_rows(json_object_get(doc, "catalog"), res[5], 0, err, sizeof(err)) ||
        append_rows(json_object_get(doc, "teams"), res[6], 0, err, sizeof(err)) ||
        append_rows(json_object_get(doc, "limits"), res[7], 0, err, sizeof(err)) ||
        append_rows(json_object_get(doc, "projects"), res[8], 0, err, sizeof(err)))
        goto fail;
    /* Routes without entries are left out (the data plane needs one); the
     * status lists them. */
    json_t *routes = json_object_get(doc, "routes");
    for (int i = 0; i < PQntuples(res[3]); i++) {
        json_t *o = json_loads(PQgetvalue(res[3], i, 1), 0, NULL);
        if (!o) {
            snprintf(err, sizeof(err), "route '%s' did not render as JSON",
                     PQgetvalue(res[3], i, 0));
            goto fail;
        }
        if (json_array_size(json_object_get(o, "entries")) == 0) {
            json_decref(o);
            json_object_set_new(skipped, PQgetvalue(res[3], i, 0), json_true());
            continue;
        }
        json_array_append_new(routes, o);
    }
    /* Credentials. */
    int nsec;
    secrets = secret_rows(res[2], &nsec);
    if (!secrets) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    json_t *providers = json_object_get(doc, "providers");
    b->fetch_spent_us = 0;
    for (int i = 0; i < PQntuples(res[1]); i++) {
        if (PQgetisnull(res[1], i, 1))
            continue;
        json_t *p = json_array_get(providers, (size_t)i);
        json_t *u = provider_credential(b, p, PQgetvalue(res[1], i, 1), secrets, nsec);
        if (u)
            json_object_set_new(unresolved, json_string_value(json_object_get(p, "name")), u);
    }
    good_sweep(b);
    /* The data plane's own validator: what it would refuse is never sent.
     * The snapshot it builds is the one the next delta is applied to. */
    s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    if (!s)
        goto fail;
    int rc = cp_model_from_doc(&m, doc);
    if (rc != GW_OK) {
        snprintf(err, sizeof(err), "%s",
                 rc == GW_ENOMEM ? "out of memory" : "an object without its name");
        goto fail;
    }
    int had = b->model.version >= 0;
    unsigned diff = had ? cp_model_diff(&m, &b->model) : ~0u;
    int changed = diff != 0;
    if (check && had && changed && version == b->seen_version) {
        /* A provider may differ without a write: an external secret's value
         * changed since it was fetched. Anything else is the incremental
         * path's error. */
        int providers_only = diff == 1u << CP_K_PROVIDERS;
        gw_logf(providers_only ? GW_LOG_WARN : GW_LOG_ERROR,
                providers_only ? "snapshot consistency check: a provider changed without a write "
                                 "(an external secret's value?); the full build is published"
                               : "snapshot consistency check: the incremental model differs from "
                                 "a full build; the full build is published",
                "{s:I,s:I,s:i}", "version", (json_int_t)version, "model_version",
                (json_int_t)b->model.version, "differs", (int)diff);
        if (!providers_only)
            cp_metrics_build("mismatch", -1);
    }
    if (!changed) {
        /* The same document: nothing to publish, and the model and its
         * snapshot keep their version (the data planes have it). */
        m.version = b->model.version;
        dp_snapshot_unref(s);
        s = NULL;
    }
    pthread_mutex_lock(&b->mlock);
    struct cp_model old = b->model;
    b->model = m;
    pthread_mutex_unlock(&b->mlock);
    cp_model_init(&m); /* moved */
    cp_model_clear(&old);
    if (s) {
        set_snap(b, s);
        s = NULL;
    }
    int64_t from = b->seen_version;
    b->seen_version = version;
    b->last_full_ms = gw_wall_ms();
    json_decref(b->unresolved);
    b->unresolved = unresolved;
    json_decref(b->skipped);
    b->skipped = skipped;
    unresolved = skipped = NULL;
    b->lists_dirty = 1;
    gw_logf(GW_LOG_DEBUG, "full snapshot build", "{s:s}", "reason", why);
    /* "changed": how many kinds (and the catalog) differ from the model. */
    build_done(b, 0, changed, had ? (size_t)__builtin_popcount(diff) : 1, NULL, t0, from);
    goto out;

dbfail:
    cp_db_rollback(b->db);
    snprintf(err, sizeof(err), "database (%s): %.400s", step, dberr.message);
fail:
    set_failure(b, "%s", err);
    cp_metrics_build("failed", (double)(gw_now_us() - t0) / 1e6);
    if (connection_lost(b))
        lose_connection(b);
out:
    if (doc) {
        dp_snapshot_wipe_json(doc);
        json_decref(doc);
    }
    cp_model_clear(&m);
    if (s) {
        dp_snapshot_unref(s);
    }
    json_decref(unresolved);
    json_decref(skipped);
    free(secrets);
    cache_sweep(b);
    for (int i = 0; i < NQUERIES; i++)
        PQclear(res[i]);
}

/* One resource an incremental build re-read: its new text (NULL: gone). */
struct change {
    int kind;
    char *name;
    char *text;
    size_t len;
};

/* What an incremental build collects. */
struct inc {
    json_t *names[CP_NKINDS]; /* sets (name -> true) to re-read */
    json_t *secrets;          /* secrets written: their providers are re-read */
    json_t *stale;            /* external refs whose cached value expired: likewise */
    int catalog;              /* the catalog is re-read */
    int guard_rules;          /* the guard rules are re-read */
    json_t *delta;
    json_t *unresolved; /* provider -> record, or null: resolved now */
    json_t *skipped;    /* route -> true (skipped now) or false (not any more) */
    struct change *ch;
    size_t nch, cap;
    char *catalog_text;
    size_t catalog_len;
    char *rules_text; /* the guard rules, when they changed */
    size_t rules_len;
};

static void inc_free(struct inc *c)
{
    for (int k = 0; k < CP_NKINDS; k++)
        json_decref(c->names[k]);
    json_decref(c->secrets);
    json_decref(c->stale);
    dp_snapshot_wipe_json(c->delta);
    json_decref(c->delta);
    json_decref(c->unresolved);
    json_decref(c->skipped);
    for (size_t i = 0; i < c->nch; i++) {
        wipe_free(c->ch[i].text, c->ch[i].len);
        free(c->ch[i].name);
    }
    free(c->ch);
    wipe_free(c->catalog_text, c->catalog_len);
    wipe_free(c->rules_text, c->rules_len);
}

/* Records that kind's name becomes o (NULL: goes) unless the model already
 * says exactly that; o is taken. GW_OK or GW_ENOMEM. */
static int inc_change(struct cp_snapshot *b, struct inc *c, int kind, const char *name, json_t *o)
{
    size_t len = 0, have_len;
    char *text = o ? dp_snapshot_dump(o, JSON_COMPACT, &len) : NULL;
    const char *have = cp_model_get(&b->model, kind, name, &have_len);
    int rc = GW_ENOMEM;
    if (o && !text)
        goto out;
    if ((!o && !have) || (o && have && have_len == len && memcmp(have, text, len) == 0)) {
        rc = GW_OK; /* no change */
        goto out;
    }
    if (c->nch == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 16;
        struct change *ch = realloc(c->ch, cap * sizeof(*ch));
        if (!ch)
            goto out;
        c->ch = ch;
        c->cap = cap;
    }
    json_t *kindobj = json_object_get(c->delta, cp_kind_names[kind]);
    if (!kindobj) {
        kindobj = json_object();
        if (!kindobj || json_object_set_new(c->delta, cp_kind_names[kind], kindobj))
            goto out;
    }
    char *n = strdup(name);
    if (!n || json_object_set(kindobj, name, o ? o : json_null())) {
        free(n);
        goto out;
    }
    c->ch[c->nch++] = (struct change){kind, n, text, len};
    text = NULL;
    json_decref(o); /* the delta holds it */
    return GW_OK;
out:
    wipe_free(text, len);
    json_t *cred = json_object_get(o, "credential"); /* a provider's, not kept */
    if (json_is_string(cred))
        explicit_bzero((char *)json_string_value(cred), json_string_length(cred));
    json_decref(o);
    return rc;
}

/* The set's names as a JSON array (serialized, malloc'd) for ANY_1/2. */
static char *names_param(const json_t *set)
{
    json_t *a = sorted(set, 0, (size_t)-1);
    char *s = a ? json_dumps(a, JSON_COMPACT) : NULL;
    json_decref(a);
    return s;
}

/* Re-reads kind's rows named in the set (sql: SQL_*_SOME) into the delta. */
static int inc_read(struct cp_snapshot *b, struct inc *c, int kind, const char *sql,
                    struct cp_db_err *dberr, char *err, size_t errlen, PGresult **out)
{
    char *p = names_param(c->names[kind]);
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return GW_ENOMEM;
    }
    *out = query(b, sql, p, NULL, dberr);
    free(p);
    return *out ? GW_OK : GW_EIO;
}

/* Each row's object into the delta (routes: column 1, a route without
 * entries leaves the document), then null for each name asked that is gone. */
static int inc_rows(struct cp_snapshot *b, struct inc *c, int kind, const PGresult *r, int col,
                    char *err, size_t errlen)
{
    json_t *seen = json_object();
    if (!seen)
        goto oom;
    for (int i = 0; i < PQntuples(r); i++) {
        json_t *o = json_loads(PQgetvalue(r, i, col), 0, NULL);
        const char *name = json_string_value(json_object_get(o, cp_kind_ids[kind]));
        if (!name) {
            json_decref(o);
            json_decref(seen);
            snprintf(err, errlen, "a %s row did not render as JSON", cp_kind_names[kind]);
            return GW_EINVAL;
        }
        json_object_set_new(seen, name, json_true());
        if (kind == CP_K_ROUTES) {
            int empty = json_array_size(json_object_get(o, "entries")) == 0;
            json_object_set_new(c->skipped, name, json_boolean(empty));
            if (empty) {
                if (inc_change(b, c, kind, name, NULL) != GW_OK) {
                    json_decref(o);
                    goto oom;
                }
                json_decref(o);
                continue;
            }
        }
        char *n = strdup(name); /* o goes in inc_change */
        int rc = n ? inc_change(b, c, kind, n, o) : (json_decref(o), GW_ENOMEM);
        free(n);
        if (rc != GW_OK)
            goto oom;
    }
    const char *name;
    json_t *v;
    json_object_foreach(c->names[kind], name, v)
    {
        if (json_object_get(seen, name))
            continue;
        if (kind == CP_K_ROUTES)
            json_object_set_new(c->skipped, name, json_false());
        if (inc_change(b, c, kind, name, NULL) != GW_OK)
            goto oom;
    }
    json_decref(seen);
    return GW_OK;
oom:
    json_decref(seen);
    snprintf(err, errlen, "out of memory");
    return GW_ENOMEM;
}

/* The providers re-read (SQL_PROVIDERS_SOME's rows, sr the secrets they
 * name), their credentials resolved, into the delta; null for each named
 * provider that is gone. */
static int inc_providers(struct cp_snapshot *b, struct inc *c, const PGresult *r,
                         const PGresult *sr, char *err, size_t errlen)
{
    int nsec;
    struct secret_row *secrets = secret_rows(sr, &nsec);
    json_t *seen = json_object();
    int rc = secrets && seen ? GW_OK : GW_ENOMEM;
    for (int i = 0; rc == GW_OK && i < PQntuples(r); i++) {
        json_t *p = json_loads(PQgetvalue(r, i, 0), 0, NULL);
        const char *name = json_string_value(json_object_get(p, "name"));
        char *n = name ? strdup(name) : NULL;
        if (!n) {
            json_decref(p);
            rc = name ? GW_ENOMEM : GW_EINVAL;
            break;
        }
        json_t *u = PQgetisnull(r, i, 1)
                        ? NULL
                        : provider_credential(b, p, PQgetvalue(r, i, 1), secrets, nsec);
        json_object_set_new(c->unresolved, n, u ? u : json_null());
        json_object_set_new(seen, n, json_true());
        rc = inc_change(b, c, CP_K_PROVIDERS, n, p);
        free(n);
    }
    const char *name;
    json_t *v;
    json_object_foreach(c->names[CP_K_PROVIDERS], name, v)
    {
        if (rc != GW_OK || json_object_get(seen, name))
            continue;
        json_object_set_new(c->unresolved, name, json_null());
        rc = inc_change(b, c, CP_K_PROVIDERS, name, NULL);
    }
    json_decref(seen);
    free(secrets);
    if (rc != GW_OK)
        snprintf(err, errlen, "%s",
                 rc == GW_EINVAL ? "a providers row did not render as JSON" : "out of memory");
    return rc;
}

/* The guard rules re-read (SQL_GUARD_RULES's row) into the delta, whole,
 * when they differ from the model's. */
static int inc_guard_rules(struct cp_snapshot *b, struct inc *c, const PGresult *r, char *err,
                           size_t errlen)
{
    json_t *rules = json_loads(cp_db_value(r) ? cp_db_value(r) : "", 0, NULL);
    char *text = json_is_array(rules) ? json_dumps(rules, JSON_COMPACT) : NULL;
    if (!text) {
        json_decref(rules);
        snprintf(err, errlen, "the guard rules did not render as a JSON array");
        return GW_EINVAL;
    }
    const char *have = b->model.guard_rules ? b->model.guard_rules : "[]";
    if (strcmp(text, have) == 0) {
        free(text);
        json_decref(rules);
        return GW_OK;
    }
    c->rules_text = text;
    c->rules_len = strlen(text);
    json_object_set_new(c->delta, "guard_rules", rules);
    return GW_OK;
}

/* The status's sets (unresolved credentials, skipped routes) follow what
 * the build re-read. */
static void inc_status(struct cp_snapshot *b, const struct inc *c)
{
    const char *name;
    json_t *v;
    json_object_foreach(c->unresolved, name, v)
    {
        json_t *have = json_object_get(b->unresolved, name);
        if (json_is_null(v) ? !have : json_equal(have, v))
            continue;
        if (json_is_null(v))
            json_object_del(b->unresolved, name);
        else
            json_object_set(b->unresolved, name, v);
        b->lists_dirty = 1;
    }
    json_object_foreach(c->skipped, name, v)
    {
        if (json_is_true(v) == (json_object_get(b->skipped, name) != NULL))
            continue;
        if (json_is_true(v))
            json_object_set_new(b->skipped, name, json_true());
        else
            json_object_del(b->skipped, name);
        b->lists_dirty = 1;
    }
}

/* Sorts the audit rows into what to re-read; a reason for a full build
 * instead, or NULL. */
static const char *inc_classify(struct inc *c, const PGresult *r, int64_t from, int64_t to)
{
    int64_t versions = 0, last = from;
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t v = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        const char *res = PQgetvalue(r, i, 1), *id = PQgetvalue(r, i, 2);
        const char *action = PQgetvalue(r, i, 3);
        if (v != last)
            versions++;
        last = v;
        int kind = -1;
        for (int k = 0; k < CP_NKINDS; k++)
            if (strcmp(res, cp_kind_names[k]) == 0)
                kind = k;
        if (kind >= 0) {
            json_object_set_new(c->names[kind], id, json_true());
            /* A provider's catalog rows and price overrides go with it (ON
             * DELETE CASCADE). */
            if (kind == CP_K_PROVIDERS && strcmp(action, "delete") == 0)
                c->catalog = 1;
        } else if (strcmp(res, "secrets") == 0) {
            /* The master key's rotation rewrapped every secret. */
            if (strcmp(id, "*master-key*") == 0)
                return "master key rotated";
            json_object_set_new(c->secrets, id, json_true());
        } else if (strcmp(res, "prices") == 0 || strcmp(res, "catalog") == 0) {
            c->catalog = 1;
        } else if (strcmp(res, "guard-rules") == 0) {
            c->guard_rules = 1;
        } else if (strcmp(res, "admin-tokens") != 0) {
            return "a write to a resource the builder does not know";
        }
    }
    /* A version without an audit row was written some other way (SQL):
     * what it changed is unknown. */
    if (versions != to - from)
        return "a configuration version without an audit row";
    return NULL;
}

/*
 * The incremental build: what the audit log says the writes since the
 * model's configuration version touched, re-read in one REPEATABLE READ
 * READ ONLY transaction, validated by applying it to the model's snapshot,
 * and published as a delta. 0 when done (built, nothing to do, or failed
 * and recorded); 1 when a full build must do it instead (*why says why).
 * expiry: also re-read the keys that expired since the last check (then the
 * result is published whole: the version may not have moved).
 */
static int build_incremental(struct cp_snapshot *b, int expiry, const char **why)
{
    int64_t t0 = gw_now_us();
    struct cp_db_err dberr;
    struct inc c = {0};
    PGresult *vr = NULL, *ar = NULL, *er = NULL, *rr[CP_NKINDS] = {0}, *sr = NULL, *cr = NULL,
             *xr = NULL, *gr = NULL;
    char err[512] = "";
    const char *step = "BEGIN";
    int full = 0;
    for (int k = 0; k < CP_NKINDS; k++)
        c.names[k] = json_object();
    c.secrets = json_object();
    c.stale = json_object();
    c.unresolved = json_object();
    c.skipped = json_object();
    c.delta = json_object();
    int ok = c.secrets && c.stale && c.unresolved && c.skipped && c.delta;
    for (int k = 0; k < CP_NKINDS; k++)
        ok = ok && c.names[k];
    if (!ok || !c.unresolved || !c.skipped || !c.delta) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    if (cp_db_cmd(b->db, "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", 0, NULL, &dberr))
        goto dbfail;
    step = "config_state";
    if (!(vr = query(b, "SELECT version FROM config_state WHERE id = 1", NULL, NULL, &dberr)))
        goto dbfail;
    const char *vs = cp_db_value(vr);
    int64_t version = vs ? strtoll(vs, NULL, 10) : -1;
    if (version < b->seen_version) {
        *why = "the configuration version went back";
        full = 1;
        goto rollback;
    }
    if (version == b->seen_version && !expiry) {
        cp_db_rollback(b->db);
        goto out; /* nothing new */
    }
    char from[24], to[24];
    snprintf(from, sizeof(from), "%lld", (long long)b->seen_version);
    snprintf(to, sizeof(to), "%lld", (long long)version);
    step = "audit_log";
    if (!(ar = query(b, SQL_AUDIT, from, to, &dberr)))
        goto dbfail;
    if ((*why = inc_classify(&c, ar, b->seen_version, version))) {
        full = 1;
        goto rollback;
    }
    if (expiry) {
        char since[24];
        snprintf(since, sizeof(since), "%lld", (long long)b->expiry_checked_ms);
        step = "api_keys expired";
        if (!(xr = query(b, SQL_KEYS_EXPIRED, since, NULL, &dberr)))
            goto dbfail;
        for (int i = 0; i < PQntuples(xr); i++) {
            json_t *o = json_loads(PQgetvalue(xr, i, 0), 0, NULL);
            const char *id = json_string_value(json_object_get(o, "id"));
            if (id)
                json_object_set_new(c.names[CP_K_KEYS], id, json_true());
            json_decref(o);
        }
    }
    static const char *const some[CP_NKINDS] = {SQL_PROVIDERS_SOME, SQL_ROUTES_SOME,
                                                SQL_KEYS_SOME,      SQL_TEAMS_SOME,
                                                SQL_PROJECTS_SOME,  SQL_LIMITS_SOME};
    /* An external value past its TTL is fetched again by the next build, as
     * a full build would (the providers using it are re-read). */
    int64_t now = gw_wall_ms();
    for (struct cached_secret *cs = b->cache; cs; cs = cs->next)
        if (cs->value && (b->cache_ttl_ms <= 0 || now - cs->fetched_ms >= b->cache_ttl_ms))
            json_object_set_new(c.stale, cs->ref, json_true());
    for (int k = 0; k < CP_NKINDS; k++) {
        if (!json_object_size(c.names[k]) &&
            !(k == CP_K_PROVIDERS && (json_object_size(c.secrets) || json_object_size(c.stale))))
            continue;
        step = cp_kind_names[k];
        if (k == CP_K_PROVIDERS) {
            char *p1 = names_param(c.names[k]), *p2 = names_param(c.secrets),
                 *p3 = names_param(c.stale);
            if (p1 && p2 && p3) {
                rr[k] = query3(b, SQL_PROVIDERS_SOME, p1, p2, p3, &dberr);
                sr = rr[k] ? query3(b, SQL_SECRETS_SOME, p1, p2, p3, &dberr) : NULL;
            }
            free(p1);
            free(p2);
            free(p3);
            if (!p1 || !p2 || !p3) {
                snprintf(err, sizeof(err), "out of memory");
                cp_db_rollback(b->db);
                goto fail;
            }
            if (!rr[k] || !sr)
                goto dbfail;
            continue;
        }
        int rc = inc_read(b, &c, k, some[k], &dberr, err, sizeof(err), &rr[k]);
        if (rc == GW_ENOMEM) {
            cp_db_rollback(b->db);
            goto fail;
        }
        if (rc)
            goto dbfail;
    }
    if (c.catalog) {
        step = "model_catalog";
        if (!(cr = query(b, SQL_CATALOG, NULL, NULL, &dberr)))
            goto dbfail;
    }
    if (c.guard_rules) {
        step = "guard_rules";
        if (!(gr = query(b, SQL_GUARD_RULES, NULL, NULL, &dberr)))
            goto dbfail;
    }
    step = "api_keys expiry";
    char checked[24];
    snprintf(checked, sizeof(checked), "%lld", (long long)b->expiry_checked_ms);
    if (!(er = query(b, expiry ? SQL_EXPIRY : SQL_EXPIRY_SINCE, expiry ? NULL : checked, NULL,
                     &dberr)))
        goto dbfail;
    step = "COMMIT";
    if (cp_db_commit(b->db, &dberr))
        goto dbfail;
    note_expiry(b, er, expiry);

    /* The rows re-read, against the model. */
    b->fetch_spent_us = 0;
    for (int k = 0; k < CP_NKINDS; k++) {
        if (!rr[k])
            continue;
        if (k == CP_K_PROVIDERS) {
            if (inc_providers(b, &c, rr[k], sr, err, sizeof(err)))
                goto fail;
            continue;
        }
        if (inc_rows(b, &c, k, rr[k], k == CP_K_ROUTES ? 1 : 0, err, sizeof(err)))
            goto fail;
    }
    if (cr) {
        json_t *cat = json_array();
        if (!cat || append_rows(cat, cr, 0, err, sizeof(err))) {
            json_decref(cat);
            if (!err[0])
                snprintf(err, sizeof(err), "out of memory");
            goto fail;
        }
        char *text = json_dumps(cat, JSON_COMPACT);
        const char *have = b->model.catalog ? b->model.catalog : "[]";
        if (!text) {
            json_decref(cat);
            snprintf(err, sizeof(err), "out of memory");
            goto fail;
        }
        if (strcmp(text, have) != 0) {
            c.catalog_text = text;
            c.catalog_len = strlen(text);
            json_object_set_new(c.delta, "catalog", cat);
        } else {
            free(text);
            json_decref(cat);
        }
    }

    /* The guard rules go whole, like the catalog: a delta's "guard_rules"
     * is the new array. */
    if (gr && inc_guard_rules(b, &c, gr, err, sizeof(err)))
        goto fail;

    size_t nchanged = c.nch + (c.catalog_text ? 1 : 0) + (c.rules_text ? 1 : 0);
    int64_t from_version = b->seen_version;
    if (nchanged == 0) {
        b->seen_version = version;
        /* Nothing the data planes see changed (an admin token, a secret no
         * provider uses): no delta is published. */
        inc_status(b, &c);
        build_done(b, 1, 0, 0, NULL, t0, from_version);
        goto out;
    }
    /* The data plane's own validator, on the change only. */
    int64_t base_version = b->model.version;
    int64_t new_version = version > base_version ? version : base_version;
    json_object_set_new(c.delta, "version", json_integer(new_version));
    json_object_set_new(c.delta, "base_version", json_integer(base_version));
    struct dp_snapshot *s =
        dp_snapshot_apply(b->snap, c.delta, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    if (!s && expiry && new_version == base_version) {
        /* Keys expired and nothing was written: a change at the same
         * version, which is never a delta (a delta's version passes its
         * base). A full build, and every data plane gets the whole
         * document, as every write did before deltas; expiry as a
         * versioned change would make it a delta. */
        *why = "keys expired";
        full = 1;
        goto out;
    }
    if (!s)
        goto fail; /* seen_version stays: the next build reads the same writes again */
    /* A delta from version 0 would read as a whole document, and one at
     * the same version (keys expired) is not a delta: whole documents. */
    json_t *delta = NULL;
    if (base_version > 0 && new_version > base_version) {
        delta = c.delta;
        c.delta = NULL;
    }
    /* The model follows. */
    pthread_mutex_lock(&b->mlock);
    int rc = GW_OK;
    for (size_t i = 0; i < c.nch; i++) {
        struct change *ch = &c.ch[i];
        if (ch->text) {
            if (cp_model_put(&b->model, ch->kind, ch->name, ch->text, ch->len) != GW_OK)
                rc = GW_ENOMEM;
            ch->text = NULL;
        } else {
            cp_model_del(&b->model, ch->kind, ch->name);
        }
    }
    if (c.catalog_text) {
        cp_model_set_catalog(&b->model, c.catalog_text, c.catalog_len);
        c.catalog_text = NULL;
    }
    if (c.rules_text) {
        cp_model_set_guard_rules(&b->model, c.rules_text, c.rules_len);
        c.rules_text = NULL;
    }
    b->model.version = new_version;
    pthread_mutex_unlock(&b->mlock);
    /* A provider's credential is wiped when the last snapshot holding its
     * item lets go (dp_snapshot_unref), not before: s may share it. */
    set_snap(b, s);
    b->seen_version = version;
    inc_status(b, &c);
    if (rc != GW_OK) {
        /* The model lost an entry: a full build next, at once (the
         * whole document it serves meanwhile lacks that entry). */
        b->full_why = "out of memory";
        b->dirty = 1;
    }
    /* Without a delta (expiry at the same version) the watchers get the
     * whole document. */
    build_done(b, 1, 1, nchanged, delta, t0, from_version);
    goto out;

rollback:
    cp_db_rollback(b->db);
    goto out;
dbfail:
    cp_db_rollback(b->db);
    snprintf(err, sizeof(err), "database (%s): %.400s", step, dberr.message);
fail:
    set_failure(b, "%s", err);
    cp_metrics_build("failed", (double)(gw_now_us() - t0) / 1e6);
    if (connection_lost(b))
        lose_connection(b);
out:
    inc_free(&c);
    cache_sweep(b);
    PQclear(vr);
    PQclear(ar);
    PQclear(er);
    PQclear(sr);
    PQclear(cr);
    PQclear(xr);
    PQclear(gr);
    for (int k = 0; k < CP_NKINDS; k++)
        PQclear(rr[k]);
    return full;
}

/* One build, incremental when it can be. */
static void build(struct cp_snapshot *b)
{
    if (connection_lost(b)) {
        set_failure(b, "the database is unreachable");
        cp_metrics_build("failed", 0);
        lose_connection(b);
        return;
    }
    const char *why = b->full_why;
    int check = b->check_due, expiry = b->expiry_due;
    b->full_why = NULL;
    b->check_due = b->expiry_due = 0;
    if (b->model.version < 0 || !b->snap)
        why = "first build";
    if (!why && build_incremental(b, expiry, &why) == 0) {
        if (!check || b->last_failed || !b->conn_ev)
            return;
        why = "consistency check";
    }
    build_full(b, why ? why : "consistency check", check);
}

/* Reads what arrived on the connection and notes the notifications that
 * call for a build: those carrying a version newer than the last good
 * build (or a payload that is not a version). 0, or -1 when the connection
 * turned out to be gone (then lost: the retry timer is on it). Every read of
 * the socket goes through here: libpq closes the socket when it reads EOF,
 * and a read whose failure went unseen would leave the event on a closed
 * descriptor that epoll has silently forgotten, and the builder deaf. */
static int drain_notifies(struct cp_snapshot *b)
{
    if (!b->conn_ev)
        return -1;
    if (!cp_db_alive(b->db)) {
        lose_connection(b);
        return -1;
    }
    PGnotify *n;
    while ((n = PQnotifies(cp_db_conn(b->db))) != NULL) {
        char *end;
        long long v = strtoll(n->extra, &end, 10);
        if (end == n->extra || *end || v > b->seen_version || b->last_failed)
            b->dirty = 1;
        PQfreemem(n);
    }
    return 0;
}

/* Builds while something asks for it: notifications that arrive during a
 * build make exactly one more. */
static void build_loop(struct cp_snapshot *b)
{
    for (;;) {
        pthread_mutex_lock(&b->lock);
        int stop = b->stopping;
        pthread_mutex_unlock(&b->lock);
        if (stop || !b->dirty || !b->conn_ev)
            return;
        b->dirty = 0;
        build(b);
        if (drain_notifies(b))
            return;
    }
}

/* ------------------------------------------------------------------ */
/* Connection */

static void schedule_retry(struct cp_snapshot *b)
{
    struct timeval tv = {b->backoff_ms / 1000, (b->backoff_ms % 1000) * 1000};
    event_add(b->retry_ev, &tv);
    b->backoff_ms = b->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : b->backoff_ms * 2;
}

/* The connection broke (cp_db logged it once): stop watching its socket,
 * say so in the status, and reconnect after the backoff. Idempotent. */
static void lose_connection(struct cp_snapshot *b)
{
    if (!b->conn_ev)
        return;
    event_free(b->conn_ev);
    b->conn_ev = NULL;
    set_db_up(b, 0);
    schedule_retry(b);
}

/* The socket is readable (a notification, or the server closing it), or
 * ALIVE_TICK_MS passed without either. */
static void on_conn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_snapshot *b = arg;
    if (drain_notifies(b) == 0)
        build_loop(b);
}

/* Connects (or reconnects in place), LISTENs, and builds: writes made while
 * disconnected sent notifications nobody heard. */
static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_snapshot *b = arg;
    struct cp_db_err err;
    int rc;
    if (!b->db) {
        b->db = cp_db_connect(b->conninfo, "snapshot builder", &err);
        rc = b->db ? GW_OK : GW_EIO;
        if (!b->db && !b->connect_logged) {
            b->connect_logged = 1;
            gw_logf(GW_LOG_WARN, "snapshot builder: cannot connect to the database; retrying",
                    "{s:s,s:i}", "error", err.message, "retry_max_ms", BACKOFF_MAX_MS);
        }
    } else {
        rc = cp_db_check(b->db, &err); /* a loss was logged when it was noticed */
    }
    if (rc == GW_OK && cp_db_cmd(b->db, "LISTEN " CHANNEL, 0, NULL, &err) != GW_OK) {
        gw_logf(GW_LOG_WARN, "snapshot builder: LISTEN failed", "{s:s}", "error", err.message);
        rc = GW_EIO;
    }
    if (rc == GW_OK) {
        struct timeval tick = {ALIVE_TICK_MS / 1000, (ALIVE_TICK_MS % 1000) * 1000};
        b->conn_ev =
            event_new(b->tbase, PQsocket(cp_db_conn(b->db)), EV_READ | EV_PERSIST, on_conn, b);
        if (!b->conn_ev || event_add(b->conn_ev, &tick)) {
            if (b->conn_ev)
                event_free(b->conn_ev);
            b->conn_ev = NULL;
            rc = GW_ENOMEM;
        }
    }
    if (rc != GW_OK) {
        set_db_up(b, 0);
        schedule_retry(b);
        return;
    }
    b->backoff_ms = BACKOFF_MIN_MS;
    if (b->connect_logged) {
        b->connect_logged = 0;
        gw_log(GW_LOG_INFO, "snapshot builder: connected to the database", NULL);
    }
    set_db_up(b, 1);
    /* Writes made while disconnected may be in no audit row the builder
     * would read (a restored database): a full build. */
    b->full_why = "connected to the database";
    b->dirty = 1;
    build_loop(b);
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_snapshot *b = arg;
    if (!b->conn_ev)
        return; /* the retry timer is on it */
    struct cp_db_err err;
    PGresult *r =
        cp_db_exec(b->db, NULL, "SELECT version FROM config_state WHERE id = 1", 0, NULL, &err);
    if (!r) {
        if (connection_lost(b))
            lose_connection(b);
        return;
    }
    const char *v = cp_db_value(r);
    long long version = v ? strtoll(v, NULL, 10) : -1;
    PQclear(r);
    int64_t now = gw_wall_ms();
    /* A failed build, or refs left unresolved, are retried by a full build
     * (as the first build was); now and then a full build checks the
     * incremental model; a key's expiry re-reads the keys that expired. */
    if (b->last_failed)
        b->full_why = "retrying a failed build";
    else if (b->good_unresolved > 0)
        b->full_why = "retrying unresolved credentials";
    if (b->check_polls > 0 &&
        (++b->polls % b->check_polls == 0 || now - b->last_full_ms >= CHECK_MAX_MS))
        b->check_due = 1;
    if (b->next_expiry_ms && now >= b->next_expiry_ms)
        b->expiry_due = 1;
    if (version != b->seen_version || b->full_why || b->check_due || b->expiry_due)
        b->dirty = 1;
    else if (version == b->seen_version && version > 0)
        cp_metrics_snapshot_current(); /* nothing newer: the snapshot is current */
    if (drain_notifies(b) == 0)
        build_loop(b);
}

/* At stop, on whichever thread is last. */
static void close_connection(struct cp_snapshot *b)
{
    if (b->conn_ev)
        event_free(b->conn_ev);
    b->conn_ev = NULL;
    cp_db_free(b->db);
    b->db = NULL;
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_snapshot *b = arg;
    pthread_mutex_lock(&b->lock);
    int stop = b->stopping;
    pthread_mutex_unlock(&b->lock);
    if (stop) {
        event_base_loopbreak(b->tbase);
        return;
    }
    build_loop(b);
}

static void *thread_main(void *arg)
{
    struct cp_snapshot *b = arg;
    event_base_dispatch(b->tbase);
    close_connection(b);
    return NULL;
}

/* ------------------------------------------------------------------ */

struct cp_snapshot *cp_snapshot_new(struct event_base *base, const struct cp_snapshot_opts *o,
                                    char *err, size_t errlen)
{
    struct cp_snapshot *b = calloc(1, sizeof(*b));
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    b->conninfo = strdup(o->conninfo);
    b->poll_ms = o->poll_ms > 0 ? o->poll_ms : DEFAULT_POLL_MS;
    b->cache_ttl_ms = o->secret_cache_ttl_ms ? o->secret_cache_ttl_ms : DEFAULT_CACHE_TTL_MS;
    b->check_polls = o->check_polls ? o->check_polls : CHECK_POLLS;
    if (o->master_key) {
        b->key = *o->master_key;
        b->has_master_key = 1;
    }
    if (o->backends)
        b->backends = *o->backends;
    else
        cp_secret_backend_config_from_env(&b->backends);
    b->publish = o->publish;
    b->arg = o->arg;
    b->trace = o->trace;
    b->seen_version = -1;
    pthread_mutex_init(&b->mlock, NULL);
    cp_model_init(&b->model);
    b->unresolved = json_object();
    b->skipped = json_object();
    b->backoff_ms = BACKOFF_MIN_MS;
    b->st_unresolved = json_array();
    b->st_skipped = json_array();
    b->ready_ev = event_new(base, -1, 0, on_ready, b);
    b->tbase = event_base_new();
    if (b->tbase) {
        b->wake_ev = event_new(b->tbase, -1, 0, on_wake, b);
        b->poll_ev = event_new(b->tbase, -1, EV_PERSIST, on_poll, b);
        b->retry_ev = event_new(b->tbase, -1, 0, on_retry, b);
    }
    if (!b->conninfo || !b->st_unresolved || !b->st_skipped || !b->unresolved || !b->skipped ||
        !b->ready_ev || !b->tbase || !b->wake_ev || !b->poll_ev || !b->retry_ev) {
        snprintf(err, errlen, "out of memory");
        cp_snapshot_free(b);
        return NULL;
    }
    struct timeval poll = {b->poll_ms / 1000, (b->poll_ms % 1000) * 1000};
    struct timeval now = {0, 0};
    event_add(b->poll_ev, &poll);
    event_add(b->retry_ev, &now); /* connect, LISTEN and build from the thread */
    if (pthread_create(&b->thread, NULL, thread_main, b) != 0) {
        snprintf(err, errlen, "cannot start the snapshot builder thread");
        cp_snapshot_free(b);
        return NULL;
    }
    b->thread_started = 1;
    return b;
}

void cp_snapshot_free(struct cp_snapshot *b)
{
    if (!b)
        return;
    if (b->thread_started) {
        pthread_mutex_lock(&b->lock);
        b->stopping = 1;
        pthread_mutex_unlock(&b->lock);
        event_active(b->wake_ev, 0, 0);
        pthread_join(b->thread, NULL);
    }
    close_connection(b);
    if (b->wake_ev)
        event_free(b->wake_ev);
    if (b->poll_ev)
        event_free(b->poll_ev);
    if (b->retry_ev)
        event_free(b->retry_ev);
    if (b->tbase)
        event_base_free(b->tbase);
    if (b->ready_ev)
        event_free(b->ready_ev);
    dp_snapshot_wipe_json(b->pending);
    json_decref(b->pending);
    cache_free_all(b);
    good_free_all(b);
    cp_master_key_clear(&b->key);
    json_decref(b->st_unresolved);
    json_decref(b->st_skipped);
    json_decref(b->unresolved);
    json_decref(b->skipped);
    cp_model_clear(&b->model);
    dp_snapshot_unref(b->snap);
    free(b->conninfo);
    pthread_mutex_destroy(&b->mlock);
    pthread_mutex_destroy(&b->lock);
    free(b);
}
