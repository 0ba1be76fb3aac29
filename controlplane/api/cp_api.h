/*
 * cp_api: the admin REST API server (JSON over HTTP on --admin-listen).
 *
 * Routes: GET /healthz, GET /readyz and GET /metrics (no authentication;
 * cp_metrics.h), GET /v1/admin/audit, and the
 * resources of cp_resource.h under /v1/admin/<resource>[/<key>]. Every
 * /v1/admin/ request needs Authorization: Bearer <token>: the bootstrap
 * token from LLMGW_ADMIN_TOKEN, or a token whose SHA-256 is in
 * admin_tokens. Runs on one event loop; database calls are synchronous
 * (cp_db.h says why that is acceptable here).
 */
#ifndef CP_API_H
#define CP_API_H

#include <stddef.h>

struct event_base;
struct cp_ctx;
struct cp_api;
struct cp_master_key;
struct gw_tls;

/* Serves on the listening socket fd (owned from now on), with the daemon's
 * context (cp_ctx.h, not owned, outliving api): its database connection,
 * and what /v1/admin/health, /v1/admin/snapshot, /v1/admin/plan, /readyz,
 * /metrics and the catalog import read. bootstrap_token
 * may be NULL (then only admin_tokens rows authenticate); it is hashed at
 * once and not kept. master_key (copied; NULL when LLMGW_MASTER_KEY is
 * unset) seals secret values; without it secret writes answer 503. tls
 * (not owned; NULL: plaintext) serves the port over TLS.
 * Returns NULL on allocation failure. */
struct cp_api *cp_api_new(struct event_base *base, int fd, const struct cp_ctx *ctx,
                          const char *bootstrap_token, const struct cp_master_key *master_key,
                          struct gw_tls *tls);
/* Serves the web console's assets from dir (which must outlive api)
 * instead of the embedded copy (cp_console.h); NULL: embedded. */
void cp_api_console_dir(struct cp_api *api, const char *dir);
/* Stops accepting; open requests finish. */
void cp_api_drain(struct cp_api *api);
/* Requests being served. */
size_t cp_api_active(const struct cp_api *api);
void cp_api_free(struct cp_api *api);

#endif
