#include "dp_worker.h"

#include <event2/event.h>
#include <event2/thread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dp_exchange.h"
#include "dp_facade.h"
#include "dp_metrics.h"
#include "dp_reply.h"
#include "dp_router.h"
#include "dp_snapshot.h"
#include "fc_media.h"
#include "gw_buf.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_metrics.h"
#include "gw_otel.h"
#include "gw_rand.h"
#include "gw_time.h"
#include "gw_upc.h"

#define DRAIN_TICK_MS 50

/* A client's X-Request-Id is echoed only when it is short and plain, so it
 * can go into headers and logs as is. */
static int valid_request_id(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && n <= 128 &&
           s[strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-")] ==
               '\0';
}

static const char *request_id(struct dp_worker *w, struct gw_http_req *req)
{
    const char *given = gw_http_req_header(req, "x-request-id");
    if (given && valid_request_id(given))
        return given;
    return gw_pool_printf(gw_http_req_pool(req), "req_%016llx%04x",
                          (unsigned long long)gw_rand_next(&w->loop.rng),
                          (unsigned)(++w->seq & 0xffff));
}

/* The endpoints. A facade's errors are answered in its own format. */
enum ep_kind { EP_CHAT, EP_EMBED, EP_COUNT, EP_MODELS, EP_MEDIA };
static const struct endpoint {
    const char *path;
    const char *method;
    enum ep_kind kind;
    const struct dp_facade *fc;
    enum canon_media_op op; /* EP_MEDIA */
} endpoints[] = {
    {"/v1/chat/completions", "POST", EP_CHAT, &fc_openai_chat, 0},
    {"/v1/messages", "POST", EP_CHAT, &fc_anthropic, 0},
    {"/v1/messages/count_tokens", "POST", EP_COUNT, &fc_anthropic, 0},
    {"/v1/responses", "POST", EP_CHAT, &fc_responses, 0},
    {"/v1/embeddings", "POST", EP_EMBED, NULL, 0},
    {"/v1/audio/transcriptions", "POST", EP_MEDIA, NULL, CANON_MEDIA_TRANSCRIBE},
    {"/v1/audio/translations", "POST", EP_MEDIA, NULL, CANON_MEDIA_TRANSLATE},
    {"/v1/audio/speech", "POST", EP_MEDIA, NULL, CANON_MEDIA_SPEECH},
    {"/v1/images/generations", "POST", EP_MEDIA, NULL, CANON_MEDIA_IMAGE},
    {"/v1/images/edits", "POST", EP_MEDIA, NULL, CANON_MEDIA_IMAGE_EDIT},
    {"/v1/models", "GET", EP_MODELS, NULL, 0},
};

/* A media upload's file bound (docs/media.md). */
static size_t upload_limit(const struct dp_config *cfg, enum canon_media_op op)
{
    return op == CANON_MEDIA_IMAGE_EDIT ? cfg->max_image_upload : cfg->max_audio_upload;
}

/* The API key from "Authorization: Bearer K" or "x-api-key: K". */
static const char *presented_key(struct gw_http_req *req)
{
    const char *auth = gw_http_req_header(req, "authorization");
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0) {
        auth += 7;
        while (*auth == ' ')
            auth++;
        return *auth ? auth : NULL;
    }
    const char *k = gw_http_req_header(req, "x-api-key");
    return k && *k ? k : NULL;
}

static void add_model(json_t *data, const char *id, const char *owner)
{
    size_t k;
    json_t *m;
    json_array_foreach(data, k, m) if (strcmp(gw_json_str(m, "id"), id) == 0) return;
    json_array_append_new(data, json_pack("{s:s,s:s,s:i,s:s}", "id", id, "object", "model",
                                          "created", 0, "owned_by", owner));
}

/* What this key may name: the routes (names, aliases, roles) with at least
 * one entry its allowlists let through, and the exact provider/model
 * targets it may use directly. */
static void serve_models(struct gw_http_req *req, const struct dp_snapshot *s,
                         const struct dp_key *key)
{
    json_t *data = json_array();
    struct gw_pmap_iter it;
    const struct dp_route *r;
    for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL;) {
        int usable = 0;
        for (size_t j = 0; j < r->nentries && !usable; j++)
            usable = dp_router_allows(s, key, r, r->entries[j].provider, r->entries[j].model);
        if (!usable)
            continue;
        add_model(data, r->name, "llmgw");
        for (size_t j = 0; j < r->naliases; j++)
            add_model(data, r->aliases[j], "llmgw");
        if (r->role)
            add_model(data, r->role, "llmgw");
    }
    for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL;)
        for (size_t j = 0; j < r->nentries; j++) {
            const struct dp_route_entry *e = &r->entries[j];
            if (!e->provider->enabled || !dp_router_allows(s, key, NULL, e->provider, e->model))
                continue;
            char id[512];
            snprintf(id, sizeof(id), "%s/%s", e->provider->name, e->model);
            add_model(data, id, e->provider->name);
        }
    json_t *o = json_pack("{s:s,s:o}", "object", "list", "data", data);
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    gw_http_respond(req, 200, "application/json", body ? body : "{}", body ? strlen(body) : 2);
    free(body);
}

/* Set once the process starts draining: /readyz turns 503 on every worker
 * before any of them stops accepting. */
static int process_draining;

void dp_worker_mark_unready(void)
{
    __atomic_store_n(&process_draining, 1, __ATOMIC_RELEASE);
}

/* Ready while a snapshot is loaded and the process is not draining. */
static void serve_readyz(struct dp_worker *w, struct gw_http_req *req)
{
    struct dp_snapshot *s = dp_snapshot_acquire();
    int draining = w->draining || __atomic_load_n(&process_draining, __ATOMIC_ACQUIRE);
    json_t *o;
    if (s && !draining)
        o = json_pack("{s:s,s:I,s:s,s:s,s:I}", "status", "ready", "snapshot_version",
                      (json_int_t)s->version, "source", s->source ? s->source : "file", "auth",
                      s->auth_open ? "none" : "keys", "keys", (json_int_t)s->nkeys);
    else
        o = json_pack("{s:s,s:s}", "status", "not_ready", "reason",
                      draining ? "draining" : "no snapshot loaded");
    char *body = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    dp_snapshot_unref(s);
    gw_http_respond(req, s && !draining ? 200 : 503, "application/json", body ? body : "{}",
                    body ? strlen(body) : 2);
    free(body);
}

/* The Prometheus exposition, on the serving port and without a key, like
 * /healthz (docs/observability.md: keep the port off the public network,
 * or filter the path). Rendered per scrape: not on the request path. */
static void serve_metrics(struct gw_http_req *req)
{
    struct gw_buf b;
    gw_buf_init(&b, 0);
    if (dp_metrics_render(&b) == GW_OK)
        gw_http_respond(req, 200, GW_METRICS_CONTENT_TYPE, b.data ? b.data : "", b.len);
    else
        dp_reply_error(req, 500, "api_error", NULL, "internal_error", "out of memory");
    gw_buf_free(&b);
}

static void handle(struct gw_http_req *req, void *arg)
{
    struct dp_worker *w = arg;
    const char *id = request_id(w, req);
    (void)gw_http_add_header(req, "x-request-id", id);
    const char *path = gw_http_req_path(req);
    const char *method = gw_http_req_method(req);

    if (strcmp(path, "/healthz") == 0) {
        gw_http_respond(req, 200, "application/json", "{\"status\":\"ok\"}", 15);
        return;
    }
    if (strcmp(path, "/readyz") == 0) {
        serve_readyz(w, req);
        return;
    }
    if (strcmp(path, "/metrics") == 0 && strcmp(method, "GET") == 0) {
        serve_metrics(req);
        return;
    }
    const struct endpoint *ep = NULL;
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(*endpoints) && !ep; i++)
        if (strcmp(path, endpoints[i].path) == 0)
            ep = &endpoints[i];
    if (!ep) {
        dp_reply_error_logged(req, id, 404, "invalid_request_error", NULL, "not_found",
                              "no such endpoint: see the README for the API");
        return;
    }
    if (strcmp(method, ep->method) != 0) {
        (void)gw_http_add_header(req, "allow", ep->method);
        char m[64];
        snprintf(m, sizeof(m), "use %s for this endpoint", ep->method);
        dp_reply_error_fc(req, ep->fc, id, 405, "invalid_request_error", NULL, "method_not_allowed",
                          m);
        return;
    }
    struct dp_snapshot *snap = dp_snapshot_acquire();
    if (!snap) {
        dp_reply_error_fc(req, ep->fc, id, 503, "api_error", NULL, "not_ready",
                          "no configuration loaded yet");
        return;
    }
    /* Closed by default: without "auth": "none" in the snapshot every
     * request needs an active key, also (above all) when there is none. */
    const struct dp_key *key = NULL;
    if (!snap->auth_open) {
        const char *k = presented_key(req);
        key = k ? dp_snapshot_find_key(snap, k, strlen(k)) : NULL;
        /* Status, then expiry to the millisecond (the control plane marks
         * a key expired only at its next build). */
        int expired = key && key->expires_at_ms && gw_wall_ms() >= key->expires_at_ms;
        if (!key || strcmp(key->status, "active") != 0 || expired) {
            int none = snap->nkeys == 0;
            dp_snapshot_unref(snap);
            dp_reply_error_fc(req, ep->fc, id, 401, "authentication_error", NULL, "invalid_api_key",
                              none ? "this gateway has no API keys yet: it serves no request "
                                     "until one is created"
                              : !k ? "missing API key: send Authorization: Bearer KEY or x-api-key"
                              : !key    ? "invalid API key"
                              : expired ? "this API key has expired"
                                        : "this API key is not active");
            return;
        }
    }
    switch (ep->kind) {
    case EP_MODELS:
        dp_log_simple(req, id, 200, NULL);
        serve_models(req, snap, key);
        dp_snapshot_unref(snap);
        return;
    case EP_CHAT:
        dp_exchange_chat(&w->loop, req, snap, key, id, ep->fc);
        return;
    case EP_EMBED:
        dp_exchange_embed(&w->loop, req, snap, key, id);
        return;
    case EP_COUNT:
        dp_exchange_count_tokens(req, snap, key, id, ep->fc);
        return;
    case EP_MEDIA:
        dp_exchange_media(&w->loop, req, snap, key, id, ep->op, upload_limit(w->cfg, ep->op));
        return;
    }
}

/* An upload endpoint's body: its file bound (an edit's images and mask
 * together), and 1 MiB for the other fields. */
static size_t body_limit(const struct gw_http_req *req, void *arg)
{
    const struct dp_worker *w = arg;
    const char *path = gw_http_req_path(req);
    for (size_t i = 0; i < sizeof(endpoints) / sizeof(*endpoints); i++)
        if (endpoints[i].kind == EP_MEDIA && strcmp(endpoints[i].path, path) == 0) {
            return upload_limit(w->cfg, endpoints[i].op) + ((size_t)1 << 20);
        }
    return 0;
}

static void reject(struct gw_http_req *req, int status, const char *code, const char *msg,
                   void *arg)
{
    struct dp_worker *w = arg;
    const char *id = request_id(w, req);
    (void)gw_http_add_header(req, "x-request-id", id);
    dp_reply_error_logged(req, id, status, "invalid_request_error", NULL, code, msg);
}

static void refused(uint64_t n, void *arg)
{
    (void)arg;
    dp_metrics_connections_refused(n);
}

/* ---------------------------------------------------------------- drain */

static void drain_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_worker *w = arg;
    if (gw_now_us() >= w->drain_deadline_us && w->loop.exchanges) {
        gw_logf(GW_LOG_WARN, "drain timeout: ending open requests", "{s:i}", "worker", w->id);
        dp_exchange_shutdown_all(&w->loop);
    }
    if (gw_http_server_active(w->http) == 0 && gw_http_server_connections(w->http) == 0) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    /* Connections still flushing their last bytes get a little longer. */
    if (gw_now_us() >= w->drain_deadline_us + 2000000) {
        event_base_loopexit(w->base, NULL);
        return;
    }
    struct timeval tv = {0, DRAIN_TICK_MS * 1000};
    evtimer_add(w->drain_tick, &tv);
}

static void on_drain(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_worker *w = arg;
    if (w->draining)
        return;
    w->draining = 1;
    w->drain_deadline_us = gw_now_us() + (int64_t)w->cfg->drain_timeout_ms * 1000;
    gw_http_server_drain(w->http);
    drain_tick(-1, 0, w);
}

/* ---------------------------------------------------------------- lifecycle */

int dp_worker_init(struct dp_worker *w, int id, const struct dp_config *cfg, int listen_fd)
{
    memset(w, 0, sizeof(*w));
    w->id = id;
    w->cfg = cfg;
    w->loop.retry_base_ms = cfg->retry_base_ms;
    gw_rand_seed(&w->loop.rng);
    /* The epoll changelist folds the add/delete pairs that every response
     * (and a paused upstream's resume) make into one epoll_ctl, or none. The
     * base keeps its lock: the main thread activates drain_ev. */
    struct event_config *ec = event_config_new();
    if (!ec)
        return GW_ENOMEM;
    event_config_set_flag(ec, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    w->base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (!w->base)
        return GW_ENOMEM;
    struct gw_http_server_opts o = {
        .handler = handle,
        .reject = reject,
        .refused = refused,
        .arg = w,
        .max_body_bytes = cfg->max_body_bytes,
        .body_limit = body_limit,
        .head_timeout_ms = cfg->head_timeout_ms,
        .idle_timeout_ms = cfg->client_idle_timeout_ms,
        /* The process's cap, shared out: each worker accepts on its own. */
        .max_connections = (cfg->max_connections + (size_t)cfg->threads - 1) / (size_t)cfg->threads,
        .tls = cfg->tls,
        .half_close_answers = cfg->half_close_answers,
    };
    w->http = gw_http_server_new(w->base, listen_fd, &o);
    w->upc = gw_upc_new(w->base);
    w->loop.base = w->base;
    w->loop.upc = w->upc;
    if (gw_log_batch_init(&w->access, w->base) == GW_OK)
        w->loop.access = &w->access;
    if (gw_otel_batch_init(&w->otel, cfg->otel, w->base) != GW_OK)
        return GW_ENOMEM;
    w->loop.otel = cfg->otel ? &w->otel : NULL;
    w->drain_ev = event_new(w->base, -1, 0, on_drain, w);
    w->drain_tick = evtimer_new(w->base, drain_tick, w);
    if (!w->http || !w->upc || !w->drain_ev || !w->drain_tick)
        return GW_ENOMEM;
    return GW_OK;
}

static void *run(void *arg)
{
    struct dp_worker *w = arg;
    event_base_dispatch(w->base);
    return NULL;
}

int dp_worker_start(struct dp_worker *w)
{
    return pthread_create(&w->thread, NULL, run, w) == 0 ? GW_OK : GW_EIO;
}

void dp_worker_drain(struct dp_worker *w)
{
    event_active(w->drain_ev, 0, 0);
}

void dp_worker_join(struct dp_worker *w)
{
    pthread_join(w->thread, NULL);
}

void dp_worker_destroy(struct dp_worker *w)
{
    dp_exchange_shutdown_all(&w->loop);
    gw_log_batch_free(&w->access); /* the lines of the requests it ended */
    w->loop.access = NULL;
    gw_otel_batch_free(&w->otel); /* and their spans, to the exporter's queue */
    w->loop.otel = NULL;
    gw_http_server_free(w->http);
    gw_upc_free(w->upc);
    if (w->drain_ev)
        event_free(w->drain_ev);
    if (w->drain_tick)
        event_free(w->drain_tick);
    if (w->base)
        event_base_free(w->base);
}
