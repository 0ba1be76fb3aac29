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
#include "dp_snapshot.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_log.h"
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
    int has_master_key;
    struct cp_master_key key;
    struct cp_secret_backend_config backends;
    void (*publish)(void *, int64_t, const char *, size_t, int64_t);
    void *arg;

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
    int64_t good_version;   /* version of the last good build; -1 none */
    int good_unresolved;    /* it left refs unresolved: the poll retries them */
    int last_failed;        /* the last attempt failed: the poll retries */
    int64_t next_expiry_ms; /* the earliest future expires_at of an active key; 0 none */
    char last_hash[65];     /* SHA-256 of the last document handed out */
    struct cached_secret *cache;
    struct last_good *good;
    int64_t fetch_spent_us; /* the build in progress, in external fetches */

    /* Shared, under lock. */
    pthread_mutex_t lock;
    int stopping;
    int requested;
    char *pending;      /* the next document for the daemon's loop (holds credentials) */
    size_t pending_len; /* (strlen) */
    int64_t pending_version, pending_built_ms;
    /* Status. */
    int64_t st_version, st_built_ms, st_error_ms;
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
            "error", msg, "serving_version", (json_int_t)b->good_version);
}

static void set_db_up(struct cp_snapshot *b, int up)
{
    pthread_mutex_lock(&b->lock);
    b->st_db_up = up;
    pthread_mutex_unlock(&b->lock);
}

json_t *cp_snapshot_status(struct cp_snapshot *b)
{
    /* Copies, not references: the builder's thread replaces these arrays,
     * and the answer is freed on another thread. */
    pthread_mutex_lock(&b->lock);
    json_t *j =
        json_pack("{s:I,s:I,s:s?,s:o?,s:o,s:o,s:I,s:I,s:s}", "version", (json_int_t)b->st_version,
                  "built_at_ms", (json_int_t)b->st_built_ms, "last_error",
                  b->st_error[0] ? b->st_error : NULL, "last_error_at_ms",
                  b->st_error_ms ? json_integer(b->st_error_ms) : NULL, "unresolved",
                  json_deep_copy(b->st_unresolved), "skipped_routes", json_deep_copy(b->st_skipped),
                  "builds", (json_int_t)b->st_builds, "failed_builds", (json_int_t)b->st_failed,
                  "database", b->st_db_up ? "ok" : "down");
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
    char *doc = b->pending;
    size_t len = b->pending_len;
    int64_t version = b->pending_version, built = b->pending_built_ms;
    b->pending = NULL;
    pthread_mutex_unlock(&b->lock);
    if (!doc)
        return;
    b->publish(b->arg, version, doc, len, built);
    wipe_free(doc, len);
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

/* Overwrites every "credential" string of doc's providers (jansson owns
 * the storage: it is wiped in place before the document is freed). */
static void wipe_doc(json_t *doc)
{
    json_t *ps = json_object_get(doc, "providers");
    size_t i;
    json_t *p;
    json_array_foreach(ps, i, p)
    {
        json_t *c = json_object_get(p, "credential");
        if (json_is_string(c))
            explicit_bzero((char *)json_string_value(c), json_string_length(c));
    }
}

/* ------------------------------------------------------------------ */
/* Building */

static void lose_connection(struct cp_snapshot *b);

static const char SQL_PROVIDERS[] =
    "SELECT json_build_object('name', name, 'driver', driver, 'base_url', base_url, 'headers', "
    "headers, 'options', options, 'credential_ref', credential_ref, 'enabled', enabled, "
    "'first_byte_timeout_ms', first_byte_timeout_ms, 'idle_timeout_ms', idle_timeout_ms)::text, "
    "credential_ref FROM providers ORDER BY name";
static const char SQL_SECRETS[] =
    "SELECT name, backend, ciphertext, master_key_id, backend_ref FROM secrets WHERE name IN "
    "(SELECT credential_ref FROM providers WHERE credential_ref IS NOT NULL)";
static const char SQL_ROUTES[] =
    "SELECT r.name, json_build_object('name', r.name, 'aliases', r.aliases, 'role', r.role, "
    "'capability', r.capability, 'strategy', r.strategy, 'fallback_timeout_ms', "
    "r.fallback_timeout_ms, 'max_duration_ms', r.max_duration_ms, 'entries', coalesce((SELECT "
    "json_agg(json_build_object('provider', e.provider, 'model', e.model, 'weight', e.weight, "
    "'high_cost', e.high_cost, 'tier', e.tier) ORDER BY e.position) FROM route_entries e WHERE "
    "e.route = r.name), '[]'::json))::text FROM routes r ORDER BY r.name";
/* A key past its expires_at goes out as status "expired": the data plane
 * serves only "active" keys. */
static const char SQL_KEYS[] =
    "SELECT json_build_object('id', id, 'hash', hash, 'status', CASE WHEN status = 'active' AND "
    "expires_at IS NOT NULL AND expires_at <= now() THEN 'expired' ELSE status END, "
    "'expires_at_ms', (extract(epoch FROM expires_at) * 1000)::bigint, 'team', team, 'project', "
    "project, 'allow_routes', allow_routes, 'allow_providers', allow_providers, 'allow_models', "
    "allow_models)::text FROM api_keys ORDER BY id";
/* Teams carry the allowlists their keys' intersect with, and whether a
 * budget is required (docs/budgets.md). */
static const char SQL_TEAMS[] =
    "SELECT json_build_object('name', name, 'allow_routes', allow_routes, 'allow_providers', "
    "allow_providers, 'allow_models', allow_models, 'require_budget', require_budget)::text "
    "FROM teams ORDER BY name";
/* Projects carry allowlists too: a key's target must pass its own, its
 * team's and its project's. */
static const char SQL_PROJECTS[] =
    "SELECT json_build_object('name', name, 'team', team, 'allow_routes', allow_routes, "
    "'allow_providers', allow_providers, 'allow_models', allow_models)::text FROM projects "
    "ORDER BY name";
/* Enabled limits only: a disabled one does not exist for the data plane. */
static const char SQL_LIMITS[] =
    "SELECT json_build_object('id', id, 'scope_kind', scope_kind, 'scope', scope, 'metric', "
    "metric, 'period', period, 'amount', amount, 'reservation', reservation, 'offline', "
    "offline, 'unpriced', unpriced, 'currency', currency)::text FROM limits WHERE enabled "
    "ORDER BY id";
static const char SQL_EXPIRY[] =
    "SELECT (extract(epoch FROM min(expires_at)) * 1000)::bigint FROM api_keys WHERE status = "
    "'active' AND expires_at > now()";
/* The catalog with the price overrides applied (docs/pricing.md): an
 * override wins over the catalog's price for its (provider, model), class by
 * class, while both are in the same currency; an override in another
 * currency brings its own classes only (prices in two currencies are never
 * mixed, nor converted). An override with no catalog row of its own becomes
 * one, taking what a provider-less row of the same model says about context
 * and capabilities (and its prices, by the same rule). */
#define MERGED(row, x)                                                                             \
    "'" x "', CASE WHEN o.currency IS NULL OR o.currency = " row ".currency THEN coalesce(o." x    \
    ", " row "." x ") ELSE o." x " END, "
#define MERGED_PRICES(row)                                                                         \
    MERGED(row, "input_price")                                                                     \
    MERGED(row, "output_price")                                                                    \
    MERGED(row, "cache_read_price")                                                                \
    MERGED(row, "cache_write_5m_price")                                                            \
    MERGED(row, "cache_write_1h_price") MERGED(row, "reasoning_price")
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

/* Hands doc (serialized; ownership taken) to the daemon's loop. */
static void hand_over(struct cp_snapshot *b, char *doc, size_t len, int64_t version, int64_t built)
{
    pthread_mutex_lock(&b->lock);
    if (b->pending) /* not taken yet: the newer one replaces it */
        wipe_free(b->pending, b->pending_len);
    b->pending = doc;
    b->pending_len = len;
    b->pending_version = version;
    b->pending_built_ms = built;
    pthread_mutex_unlock(&b->lock);
    event_active(b->ready_ev, 0, 0);
}

static void build(struct cp_snapshot *b)
{
    if (connection_lost(b)) {
        set_failure(b, "the database is unreachable");
        cp_metrics_build("failed", 0);
        lose_connection(b);
        return;
    }
    int64_t t0 = gw_now_us();
    struct cp_db_err dberr;
    enum { NQUERIES = 9 };
    PGresult *res[NQUERIES] = {0};
    json_t *doc = NULL;
    json_t *unresolved = json_array(), *skipped = json_array();
    struct secret_row *secrets = NULL;
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
                                              SQL_PROJECTS};
    static const char *const steps[NQUERIES] = {"config_state", "providers", "secrets",
                                                "routes",       "api_keys",  "model_catalog",
                                                "teams",        "limits",    "projects"};
    for (int i = 0; i < NQUERIES; i++) {
        step = steps[i];
        res[i] = cp_db_exec(b->db, NULL, sql[i], 0, NULL, &dberr);
        if (!res[i])
            goto dbfail;
    }
    step = "api_keys expiry";
    PGresult *exp = cp_db_exec(b->db, NULL, SQL_EXPIRY, 0, NULL, &dberr);
    if (!exp)
        goto dbfail;
    const char *ev = cp_db_value(exp);
    b->next_expiry_ms = ev ? strtoll(ev, NULL, 10) : 0;
    PQclear(exp);
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
            json_array_append_new(skipped, json_string(PQgetvalue(res[3], i, 0)));
            continue;
        }
        json_array_append_new(routes, o);
    }
    /* Credentials. */
    int nsec = PQntuples(res[2]);
    secrets = calloc((size_t)nsec + 1, sizeof(*secrets));
    if (!secrets) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    for (int i = 0; i < nsec; i++) {
        const char **f[5] = {&secrets[i].name, &secrets[i].backend, &secrets[i].ciphertext,
                             &secrets[i].key_id, &secrets[i].backend_ref};
        for (int k = 0; k < 5; k++)
            *f[k] = PQgetisnull(res[2], i, k) ? NULL : PQgetvalue(res[2], i, k);
    }
    json_t *providers = json_object_get(doc, "providers");
    b->fetch_spent_us = 0;
    for (int i = 0; i < PQntuples(res[1]); i++) {
        if (PQgetisnull(res[1], i, 1))
            continue;
        const char *ref = PQgetvalue(res[1], i, 1);
        json_t *p = json_array_get(providers, (size_t)i);
        char why[400];
        if (resolve_credential(b, p, ref, secrets, nsec, why, sizeof(why)) == GW_OK) {
            json_t *cred = json_object_get(p, "credential");
            good_set(b, ref, json_string_value(cred), json_string_length(cred));
            continue;
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
            gw_logf(GW_LOG_WARN,
                    "credential_ref does not resolve: the provider goes out without one",
                    "{s:s,s:s,s:s}", "provider", name ? name : "?", "credential_ref", ref, "reason",
                    why);
        }
        if (json_array_size(unresolved) < MAX_UNRESOLVED)
            json_array_append_new(unresolved,
                                  json_pack("{s:s,s:s,s:s}", "provider", name ? name : "?",
                                            "credential_ref", ref, "reason", why));
    }
    good_sweep(b);
    /* The data plane's own validator: what it would refuse is never sent. */
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    if (!s)
        goto fail;
    /* (Its credentials are wiped when it is freed.) */
    size_t nprov = s->nproviders, nroutes = s->nroutes, nkeys = s->nkeys;
    dp_snapshot_unref(s);
    char *text = json_dumps(doc, JSON_COMPACT);
    if (!text) {
        snprintf(err, sizeof(err), "out of memory");
        goto fail;
    }
    size_t len = strlen(text);
    char hash[65];
    gw_sha256_hex(text, len, hash);
    int64_t built = gw_wall_ms();
    int changed = strcmp(hash, b->last_hash) != 0;
    b->good_version = version;
    b->good_unresolved = (int)json_array_size(unresolved);
    b->last_failed = 0;
    pthread_mutex_lock(&b->lock);
    b->st_builds++;
    b->st_error[0] = '\0';
    b->st_error_ms = 0;
    if (changed) {
        b->st_version = version;
        b->st_built_ms = built;
    }
    json_decref(b->st_unresolved);
    b->st_unresolved = unresolved;
    json_decref(b->st_skipped);
    b->st_skipped = skipped;
    unresolved = skipped = NULL;
    pthread_mutex_unlock(&b->lock);
    if (changed) {
        memcpy(b->last_hash, hash, sizeof(hash));
        hand_over(b, text, len, version, built);
    } else {
        wipe_free(text, len);
    }
    cp_metrics_build(changed ? "ok" : "unchanged", (double)(gw_now_us() - t0) / 1e6);
    cp_metrics_snapshot_current();
    gw_logf(GW_LOG_INFO, changed ? "snapshot built" : "snapshot unchanged",
            "{s:I,s:i,s:i,s:i,s:i,s:i,s:f}", "version", (json_int_t)version, "providers",
            (int)nprov, "routes", (int)nroutes, "keys", (int)nkeys, "unresolved",
            b->good_unresolved, "skipped_routes", (int)json_array_size(b->st_skipped), "ms",
            (double)(gw_now_us() - t0) / 1000.0);
    if (changed && nprov > 0 && nkeys == 0)
        gw_logf(GW_LOG_WARN,
                "snapshot has providers and no API key: every data plane refuses every request "
                "(401) until a key is created (POST /v1/admin/keys)",
                "{s:I}", "version", (json_int_t)version);
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
        wipe_doc(doc);
        json_decref(doc);
    }
    json_decref(unresolved);
    json_decref(skipped);
    free(secrets);
    cache_sweep(b);
    for (int i = 0; i < NQUERIES; i++)
        PQclear(res[i]);
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
        if (end == n->extra || *end || v > b->good_version || b->last_failed)
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
        if (b->requested)
            b->dirty = 1;
        b->requested = 0;
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
    if (version != b->good_version || b->last_failed || b->good_unresolved > 0 ||
        (b->next_expiry_ms && now >= b->next_expiry_ms))
        b->dirty = 1;
    else if (version == b->good_version && version > 0)
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

void cp_snapshot_request(struct cp_snapshot *b)
{
    pthread_mutex_lock(&b->lock);
    b->requested = 1;
    pthread_mutex_unlock(&b->lock);
    event_active(b->wake_ev, 0, 0);
}

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
    b->good_version = -1;
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
    if (!b->conninfo || !b->st_unresolved || !b->st_skipped || !b->ready_ev || !b->tbase ||
        !b->wake_ev || !b->poll_ev || !b->retry_ev) {
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
    wipe_free(b->pending, b->pending_len);
    cache_free_all(b);
    good_free_all(b);
    cp_master_key_clear(&b->key);
    json_decref(b->st_unresolved);
    json_decref(b->st_skipped);
    free(b->conninfo);
    pthread_mutex_destroy(&b->lock);
    free(b);
}
