#include "cp_api.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "cp_authfail.h"
#include "cp_call.h"
#include "cp_catalog_api.h"
#include "cp_console.h"
#include "cp_ctx.h"
#include "cp_db.h"
#include "cp_health.h"
#include "cp_judgements_api.h"
#include "cp_metrics.h"
#include "cp_migrate.h"
#include "cp_resource.h"
#include "cp_secrets.h"
#include "cp_snapshot_api.h"
#include "cp_trace.h"
#include "cp_usage.h"
#include "gw_buf.h"
#include "gw_crypto.h"
#include "gw_curlev.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_metrics.h"
#include "gw_pool.h"
#include "gw_query.h"
#include "gw_str.h"
#include "gw_time.h"

#define ADMIN_PREFIX "/v1/admin/"

/* enum cp_scope's names, as admin_tokens.scope spells them. */
static const char *const scope_names[] = {"read", "operator", "admin"};

/* docs/openapi.yaml, embedded at build time (controlplane/embed.cmake). */
extern const char cp_openapi_yaml[];
extern const size_t cp_openapi_yaml_len;

struct cp_api {
    struct gw_http_server *srv;
    const struct cp_ctx *ctx; /* the daemon's: what health, snapshot, plan and /metrics read */
    struct cp_db *db;         /* ctx->db */
    struct event *alive_ev;   /* looks at the idle connection every second */
    int has_bootstrap;
    char bootstrap_hash[65]; /* SHA-256 hex of LLMGW_ADMIN_TOKEN: the token itself is not kept */
    int has_master_key;
    struct cp_master_key master_key;
    int stopping;                /* SIGTERM: /readyz answers 503 */
    struct gw_curlev *curl;      /* transfers the API waits on (a catalog import's URL) */
    struct cp_authfail authfail; /* failed authentications per client address */
    const char *console_dir;     /* --console-dir: the console's assets from disk; NULL: embedded */
};

static void healthz(struct cp_api *api, struct cp_call *c)
{
    struct cp_db_err err;
    int up = cp_db_check(api->db, &err) == GW_OK;
    cp_call_json(c, 200, json_pack("{s:s,s:s}", "status", "ok", "postgres", up ? "ok" : "down"), 0);
}

/*
 * GET /readyz: 200 when this replica can serve: the schema is at this
 * binary's latest migration (which also proves Postgres answers), a first
 * snapshot has been published to the gRPC server, which is listening, and
 * the daemon is not stopping. 503 with the first reason otherwise.
 */
static void readyz(struct cp_api *api, struct cp_call *c)
{
    const char *reason = NULL;
    struct cp_db_err err;
    if (api->stopping)
        reason = "shutting down";
    else if (cp_db_check(api->db, &err) != GW_OK)
        reason = "postgres is unreachable";
    else {
        PGresult *r =
            cp_db_exec(api->db, c->pool, "SELECT coalesce(max(version), 0) FROM schema_migrations",
                       0, NULL, &err);
        const char *v = r ? cp_db_value(r) : NULL;
        if (!v)
            reason = "postgres is unreachable";
        else if (atoi(v) < cp_migrate_latest())
            reason = "migrations are not applied";
        else
            reason = cp_snapshot_api_unready(api->ctx);
    }
    if (reason)
        cp_call_json(c, 503, json_pack("{s:s,s:s}", "status", "unready", "reason", reason), 0);
    else
        cp_call_json(c, 200, json_pack("{s:s}", "status", "ready"), 0);
}

static int authenticate(struct cp_api *api, struct cp_call *c);

/* GET /metrics: the operations' exposition without a token (like
 * /healthz); with an admin token, the business's figures too (what teams
 * spent, every limit's amount and spend). A token that is presented and
 * invalid is a 401. */
static void metrics(struct cp_api *api, struct cp_call *c)
{
    int business = gw_http_req_header(c->req, "Authorization") != NULL;
    if (business && authenticate(api, c) != GW_OK)
        return;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    if (cp_metrics_render(api->ctx, &b, business) == GW_OK) {
        c->status = 200;
        gw_http_respond(c->req, 200, GW_METRICS_CONTENT_TYPE, b.data ? b.data : "", b.len);
    } else
        cp_call_error(c, 500, "internal", NULL, "out of memory");
    gw_buf_free(&b);
}

/* A token that did not authenticate: counted against its address (logged
 * within cp_authfail's bounds; never the token), then the 401. */
static void auth_failed(struct cp_api *api, struct cp_call *c, const char *reason)
{
    const char *peer = gw_http_req_peer(c->req);
    switch (cp_authfail_record(&api->authfail, peer, gw_now_us() / 1000)) {
    case CP_AUTHFAIL_LOG:
        gw_logf(GW_LOG_WARN, "admin authentication failed", "{s:s,s:s,s:s}", "peer", peer, "path",
                gw_http_req_path(c->req), "reason", reason);
        break;
    case CP_AUTHFAIL_LOG_LIMITED:
        gw_logf(GW_LOG_WARN,
                "admin authentication failed; this address is refused (429) for the rest of the "
                "minute",
                "{s:s,s:s,s:i}", "peer", peer, "path", gw_http_req_path(c->req), "failures",
                CP_AUTHFAIL_MAX);
        break;
    case CP_AUTHFAIL_QUIET:
        break;
    }
    (void)gw_http_add_header(c->req, "WWW-Authenticate", "Bearer error=\"invalid_token\"");
    cp_call_error(c, 401, "unauthorized", NULL, "the admin token is not valid");
}

/*
 * Sets c->actor and c->scope from the bearer token, or answers 401 (or 503
 * when the database cannot say, 429 when the address has spent its budget
 * of failures: cp_authfail.h) and returns GW_EINVAL. Tokens are compared
 * as SHA-256 hashes: the bootstrap one in constant time, stored ones
 * through the unique index on admin_tokens.hash (the hash of an unknown
 * token tells an attacker nothing about stored ones).
 */
static int authenticate(struct cp_api *api, struct cp_call *c)
{
    const char *h = gw_http_req_header(c->req, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0 || !h[7]) {
        (void)gw_http_add_header(c->req, "WWW-Authenticate", "Bearer");
        cp_call_error(c, 401, "unauthorized", NULL,
                      "an admin token is required: Authorization: Bearer <token>");
        return GW_EINVAL;
    }
    const char *tok = h + 7;
    char hash[65];
    gw_sha256_hex(tok, strlen(tok), hash);
    if (api->has_bootstrap && gw_ct_equal(hash, api->bootstrap_hash, 64)) {
        c->actor = "bootstrap";
        c->scope = CP_SCOPE_ADMIN;
        return GW_OK;
    }
    int64_t wait_ms =
        cp_authfail_blocked(&api->authfail, gw_http_req_peer(c->req), gw_now_us() / 1000);
    if (wait_ms > 0) {
        char ra[24];
        snprintf(ra, sizeof(ra), "%lld", (long long)((wait_ms + 999) / 1000));
        (void)gw_http_add_header(c->req, "Retry-After", ra);
        cp_call_error(c, 429, "too_many_failed_authentications", NULL,
                      "too many failed admin authentications from this address: retry in %s s", ra);
        return GW_EINVAL;
    }
    struct cp_db_err err;
    if (cp_db_check(api->db, &err) != GW_OK) {
        cp_call_db_error(c, &err);
        return GW_EINVAL;
    }
    const char *p[] = {hash};
    PGresult *r = cp_db_exec(api->db, c->pool,
                             "SELECT name, scope FROM admin_tokens WHERE hash = $1", 1, p, &err);
    if (!r) {
        cp_call_db_error(c, &err);
        return GW_EINVAL;
    }
    if (PQntuples(r) != 1) {
        auth_failed(api, c, "unknown token");
        return GW_EINVAL;
    }
    c->actor = PQgetvalue(r, 0, 0);
    const char *scope = PQgetvalue(r, 0, 1);
    c->scope = !strcmp(scope, "admin")      ? CP_SCOPE_ADMIN
               : !strcmp(scope, "operator") ? CP_SCOPE_OPERATOR
                                            : CP_SCOPE_READ;
    return GW_OK;
}

/* Whether the caller's scope covers the request (rest: the path after
 * /v1/admin/): read is GET and HEAD; operator is everything but admin
 * tokens; admin is everything. 403 naming the scope otherwise. */
static int authorize(struct cp_call *c, const char *rest)
{
    const char *method = gw_http_req_method(c->req);
    int tokens = strncmp(rest, "admin-tokens", 12) == 0 && (rest[12] == '\0' || rest[12] == '/');
    if (c->scope == CP_SCOPE_ADMIN ||
        (!tokens &&
         (c->scope == CP_SCOPE_OPERATOR || !strcmp(method, "GET") || !strcmp(method, "HEAD"))))
        return GW_OK;
    cp_call_error(c, 403, "forbidden", NULL,
                  tokens ? "admin tokens need a token of scope admin (this one's is %s)"
                         : "a token of scope %s may only read (GET)",
                  scope_names[c->scope]);
    return GW_EINVAL;
}

/* GET /v1/admin/audit?limit=&offset=: newest first. */
static void audit(struct cp_api *api, struct cp_call *c)
{
    if (!cp_call_method(c, "GET"))
        return;
    static const char *const names[] = {"limit", "offset", NULL};
    const char *v[3];
    long long limit, offset;
    if (cp_call_query(c, names, v) != 0 ||
        cp_call_query_int(c, "limit", v[0], 100, 1, 1000, &limit) != 0 ||
        cp_call_query_int(c, "offset", v[1], 0, 0, 1LL << 40, &offset) != 0)
        return;
    char l[24], o[24];
    snprintf(l, sizeof(l), "%lld", limit);
    snprintf(o, sizeof(o), "%lld", offset);
    const char *p[] = {l, o};
    struct cp_db_err err;
    PGresult *r = cp_db_exec(api->db, c->pool,
                             "SELECT coalesce(jsonb_agg(to_jsonb(a) ORDER BY a.id DESC), "
                             "'[]'::jsonb) FROM (SELECT * FROM audit_log ORDER BY id DESC "
                             "LIMIT $1 OFFSET $2) a",
                             2, p, &err);
    if (!r)
        return cp_call_db_error(c, &err);
    json_t *rows = json_loads(cp_db_value(r), 0, NULL);
    cp_call_json(c, 200, json_pack("{s:o}", "data", rows ? rows : json_array()), 0);
}

/* GET /v1/admin/whoami: the caller's token name and scope (the console
 * checks a token at sign-in with it, and shows what it may do). */
static void whoami(struct cp_call *c)
{
    if (cp_call_method(c, "GET"))
        cp_call_json(c, 200,
                     json_pack("{s:s,s:s}", "actor", c->actor, "scope", scope_names[c->scope]), 0);
}

/* The metrics label of a path under /v1/admin/ (rest: what follows the
 * prefix): a name from the route table, or "unknown". */
static const char *admin_label(const char *rest)
{
    const char *slash = strchr(rest, '/');
    size_t seg = slash ? (size_t)(slash - rest) : strlen(rest);
    static const char *const fixed[] = {"audit", "health",   "ledger", "limit-windows",
                                        "plan",  "snapshot", "usage",  "whoami"};
    if (strcmp(rest, "catalog/import") == 0)
        return "catalog_import";
    if (strcmp(rest, "judgements") == 0)
        return "judgements";
    if (strcmp(rest, "judgements/summary") == 0)
        return "judgements_summary";
    for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed); i++)
        if (!slash && strlen(fixed[i]) == seg && strncmp(fixed[i], rest, seg) == 0)
            return fixed[i];
    for (const struct cp_resource *const *p = cp_resources; *p; p++)
        if (strlen((*p)->name) == seg && strncmp((*p)->name, rest, seg) == 0)
            return (*p)->name;
    return "unknown";
}

/* The metrics label of a path: a name from the route table, never the
 * path itself. */
static const char *path_label(const char *path)
{
    static const char *const fixed[][2] = {{"/healthz", "healthz"},
                                           {"/readyz", "readyz"},
                                           {"/metrics", "metrics"},
                                           {ADMIN_PREFIX "openapi.yaml", "openapi"},
                                           {"/console", "console"}};
    for (size_t i = 0; i < sizeof(fixed) / sizeof(*fixed); i++)
        if (strcmp(path, fixed[i][0]) == 0)
            return fixed[i][1];
    if (cp_console_path(path))
        return "console";
    if (strncmp(path, ADMIN_PREFIX, sizeof(ADMIN_PREFIX) - 1) != 0)
        return "unknown";
    return admin_label(path + sizeof(ADMIN_PREFIX) - 1);
}

/* The route template of a path under /v1/admin/ (rest: what follows the
 * prefix) into out, as docs/openapi.yaml writes it ("/v1/admin/providers",
 * "/v1/admin/prices/{provider}/{model}"), for a span's name; NULL when the
 * path is none of the API's. */
static const char *route_template(const char *rest, char *out, size_t n)
{
    const char *label = admin_label(rest);
    if (strcmp(label, "unknown") == 0)
        return NULL;
    const struct cp_resource *r = NULL;
    for (const struct cp_resource *const *p = cp_resources; *p && !r; p++)
        if (strcmp((*p)->name, label) == 0)
            r = *p;
    const char *slash = strchr(rest, '/');
    if (!r || !slash || !slash[1]) {
        /* A fixed path, or a collection: the label is the path (but for
         * the two whose label is not). */
        snprintf(out, n, ADMIN_PREFIX "%s",
                 !strcmp(label, "catalog_import")       ? "catalog/import"
                 : !strcmp(label, "judgements_summary") ? "judgements/summary"
                                                        : label);
        return out;
    }
    size_t len = (size_t)snprintf(out, n, ADMIN_PREFIX "%s", r->name);
    for (size_t i = 0; i < r->nfields && len < n; i++)
        if (r->fields[i].flags & CP_F_KEY)
            len += (size_t)snprintf(out + len, n - len, "/{%s}", r->fields[i].name);
    return out;
}

/* Routes the request (labelled before authentication: refusals count under
 * their route). */
static void route(struct cp_api *api, struct cp_call *c)
{
    struct gw_http_req *req = c->req;
    const char *path = gw_http_req_path(req);
    if (strcmp(path, "/healthz") == 0)
        return healthz(api, c);
    if (strcmp(path, "/readyz") == 0)
        return readyz(api, c);
    if (strcmp(path, "/metrics") == 0)
        return metrics(api, c);
    /* The API's description is public: it is in the repository anyway. */
    if (strcmp(path, ADMIN_PREFIX "openapi.yaml") == 0) {
        c->status = 200;
        return gw_http_respond(req, 200, "application/yaml", cp_openapi_yaml, cp_openapi_yaml_len);
    }
    /* The console's assets are public too; what they show needs a token. */
    if (cp_console_path(path))
        return cp_console_serve(c, api->console_dir);
    if (strncmp(path, ADMIN_PREFIX, sizeof(ADMIN_PREFIX) - 1) != 0)
        return cp_call_error(c, 404, "not_found", NULL, "no such path: %s", path);
    /* Authenticated first: an anonymous caller costs no database work and
     * learns nothing of it. (A stored token's lookup checked the
     * connection already.) */
    const char *rest = path + sizeof(ADMIN_PREFIX) - 1;
    if (authenticate(api, c) != GW_OK || authorize(c, rest) != GW_OK)
        return;
    struct cp_db_err err;
    if (strcmp(c->actor, "bootstrap") == 0 && cp_db_check(api->db, &err) != GW_OK)
        return cp_call_db_error(c, &err);
    const char *slash = strchr(rest, '/');
    size_t seg = slash ? (size_t)(slash - rest) : strlen(rest);
    if (seg == 5 && strncmp(rest, "audit", 5) == 0 && !slash)
        return audit(api, c);
    if (strcmp(rest, "whoami") == 0)
        return whoami(c);
    if (strcmp(rest, "plan") == 0)
        return cp_snapshot_api_plan(c, api->ctx);
    if (seg == 6 && strncmp(rest, "health", 6) == 0 && !slash) {
        if (cp_call_method(c, "GET"))
            cp_health_handle(c, api->ctx);
        return;
    }
    if (seg == 8 && strncmp(rest, "snapshot", 8) == 0 && !slash)
        return cp_snapshot_api_handle(c, api->ctx);
    if (seg == 5 && strncmp(rest, "usage", 5) == 0 && !slash)
        return cp_usage_handle(c, api->db);
    if (seg == 6 && strncmp(rest, "ledger", 6) == 0 && !slash)
        return cp_usage_ledger_handle(c, api->db);
    if (strcmp(rest, "limit-windows") == 0)
        return cp_usage_windows_handle(c, api->db);
    if (strcmp(rest, "judgements") == 0)
        return cp_judgements_list(c, api->db);
    if (strcmp(rest, "judgements/summary") == 0)
        return cp_judgements_summary(c, api->db);
    /* Not a catalog row (their keys are numbers): the LiteLLM import. */
    if (strcmp(rest, "catalog/import") == 0)
        return cp_catalog_api_import(c, api->curl, api->ctx->fetch_allow);
    const struct cp_resource *r = NULL;
    for (const struct cp_resource *const *p = cp_resources; *p && !r; p++)
        if (strlen((*p)->name) == seg && strncmp((*p)->name, rest, seg) == 0)
            r = *p;
    if (!r)
        return cp_call_error(c, 404, "not_found", NULL, "no such path: %s", path);
    const char *key = NULL;
    if (slash && slash[1]) {
        /* Only a two-part key (prices: provider/model) holds a '/'. */
        if (strchr(slash + 1, '/') && !r->key_sql)
            return cp_call_error(c, 404, "not_found", NULL, "no such path: %s", path);
        key = gw_unescape(c->pool, slash + 1, strlen(slash + 1));
        if (!key)
            return cp_call_error(c, 400, "invalid_value", NULL,
                                 "the path has a malformed percent-escape");
    }
    cp_resource_handle(c, r, key);
}

/* What the request's metrics and span need, kept past its answer. */
struct served {
    int64_t t0;
    char method[16];
    const char *resource; /* a static label */
    struct cp_trace_admin span;
};

static void record(const struct served *s, const struct cp_call *c)
{
    cp_metrics_admin_request(s->resource, s->method, c->status,
                             (double)(gw_now_us() - s->t0) / 1e6);
    cp_trace_admin_end(c->tracer, &s->span, c->status, c->audit_id, c->config_version);
}

/* A deferred call's answer (cp_call_defer): its metrics and span. */
static void served_done(struct cp_call *c, void *arg)
{
    record(arg, c);
}

static void handle(struct gw_http_req *req, void *arg)
{
    struct cp_api *api = arg;
    struct cp_call c = {.req = req,
                        .pool = gw_http_req_pool(req),
                        .db = api->db,
                        .master_key = api->has_master_key ? &api->master_key : NULL};
    /* Copied now: the request (and the strings it owns) is gone once it is
     * answered. Every handler answers before returning, except one that
     * defers (cp_call_defer): its answer records the metrics then, from
     * the copy in the pool. */
    const char *path = gw_http_req_path(req);
    struct served local = {.t0 = gw_http_req_start_us(req), .resource = path_label(path)};
    snprintf(local.method, sizeof(local.method), "%s", gw_http_req_method(req));
    /* An admin write's span (cp_trace.h): begun now, ended with the answer. */
    char tbuf[96];
    const char *tmpl = api->ctx->trace && strncmp(path, ADMIN_PREFIX, sizeof(ADMIN_PREFIX) - 1) == 0
                           ? route_template(path + sizeof(ADMIN_PREFIX) - 1, tbuf, sizeof(tbuf))
                           : NULL;
    if (cp_trace_admin_begin(api->ctx->trace, &local.span, req, local.resource, tmpl)) {
        c.tracer = api->ctx->trace;
        c.span = local.span.ctx;
    }
    struct served *s = gw_pool_alloc(c.pool, sizeof(*s));
    if (s) {
        *s = local;
        c.done = served_done;
        c.done_arg = s;
    }
    /* After route the pool may be gone (the answer ends the request): only
     * the stack's copies are read. */
    route(api, &c);
    if (!c.deferred)
        record(&local, &c);
}

/* The daemon's main connection (admin API, metrics, singleton jobs) is used
 * on demand, and each use checks it first (cp_db_check reconnects). This
 * tick only notices a loss while nothing uses it, without blocking the loop
 * (cp_db_alive), so that it is logged when it happens. */
static void on_alive(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_api *api = arg;
    (void)cp_db_alive(api->db);
}

struct cp_api *cp_api_new(struct event_base *base, int fd, const struct cp_ctx *ctx,
                          const char *bootstrap_token, const struct cp_master_key *master_key,
                          struct gw_tls *tls)
{
    struct cp_api *api = calloc(1, sizeof(*api));
    if (!api)
        return NULL;
    api->ctx = ctx;
    api->db = ctx->db;
    if (master_key) {
        api->has_master_key = 1;
        api->master_key = *master_key;
    }
    if (bootstrap_token) {
        api->has_bootstrap = 1;
        gw_sha256_hex(bootstrap_token, strlen(bootstrap_token), api->bootstrap_hash);
    }
    struct gw_http_server_opts o = {
        .handler = handle, .arg = api, .max_body_bytes = 1u << 20, .tls = tls};
    api->srv = gw_http_server_new(base, fd, &o);
    api->curl = api->srv ? gw_curlev_new(base) : NULL;
    api->alive_ev = api->curl ? event_new(base, -1, EV_PERSIST, on_alive, api) : NULL;
    struct timeval tick = {1, 0};
    if (!api->alive_ev || event_add(api->alive_ev, &tick)) {
        if (api->alive_ev)
            event_free(api->alive_ev);
        gw_curlev_free(api->curl);
        gw_http_server_free(api->srv);
        cp_master_key_clear(&api->master_key);
        free(api);
        return NULL;
    }
    return api;
}

void cp_api_drain(struct cp_api *api)
{
    api->stopping = 1;
    gw_http_server_drain(api->srv);
}

size_t cp_api_active(const struct cp_api *api)
{
    return gw_http_server_active(api->srv);
}

void cp_api_console_dir(struct cp_api *api, const char *dir)
{
    api->console_dir = dir;
}

void cp_api_free(struct cp_api *api)
{
    if (!api)
        return;
    /* Requests still open (an import waiting on its URL) get their close
     * callback first and cancel their transfers; then the multi goes. */
    event_free(api->alive_ev);
    gw_http_server_free(api->srv);
    gw_curlev_free(api->curl);
    cp_master_key_clear(&api->master_key);
    free(api);
}
