/*
 * llmgw-controlplane: the configuration half of llmgw. It owns PostgreSQL
 * (schema by embedded migrations, cp_migrate.h) and serves the admin REST
 * API (cp_api.h). See docs/controlplane.md.
 *
 *   llmgw-controlplane migrate   apply pending migrations, exit 0 or 1
 *   llmgw-controlplane [serve]   migrate, then serve until SIGTERM/SIGINT
 *   llmgw-controlplane rotate-master-key
 *                                rewrap every builtin secret from
 *                                LLMGW_MASTER_KEY to LLMGW_NEW_MASTER_KEY
 *
 * One event loop on the main thread. SIGTERM/SIGINT stop accepting, let
 * open admin requests finish (they are short), and exit 0.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "cp_api.h"
#include "cp_config.h"
#include "cp_db.h"
#include "cp_migrate.h"
#include "cp_rotate.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"

struct main_ctx {
    struct event_base *base;
    struct cp_api *api;
    struct event *tick;
    int stopping;
};

/* While stopping: exits the loop once no admin request is open. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct main_ctx *m = arg;
    if (cp_api_active(m->api) == 0)
        event_base_loopexit(m->base, NULL);
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct main_ctx *m = arg;
    if (m->stopping)
        return;
    m->stopping = 1;
    gw_logf(GW_LOG_INFO, "stopping", "{s:i}", "signal", (int)sig);
    cp_api_drain(m->api);
    struct timeval tv = {0, 20 * 1000};
    event_add(m->tick, &tv);
}

static int migrate(struct cp_db *db)
{
    struct cp_db_err err;
    int applied;
    if (cp_migrate_run(db, &applied, &err) != GW_OK) {
        gw_logf(GW_LOG_ERROR, "migrations failed", "{s:s,s:s}", "sqlstate", err.sqlstate, "error",
                err.message);
        return GW_EIO;
    }
    gw_logf(GW_LOG_INFO, "schema up to date", "{s:i,s:i}", "schema_version", cp_migrate_latest(),
            "applied", applied);
    return GW_OK;
}

/* rotate-master-key: both keys from the environment, one transaction. */
static int rotate(struct cp_db *db)
{
    struct cp_master_key old_key, new_key;
    char msg[512];
    const char *nk = getenv("LLMGW_NEW_MASTER_KEY");
    if (cp_master_key_from_env(&old_key, msg, sizeof(msg)) != GW_OK) {
        gw_logf(GW_LOG_ERROR, "rotation refused: the old key", "{s:s}", "error", msg);
        return 1;
    }
    if (!nk || !*nk || cp_master_key_parse(nk, &new_key, msg, sizeof(msg)) != GW_OK) {
        gw_logf(GW_LOG_ERROR, "rotation refused: the new key", "{s:s}", "error",
                nk && *nk ? msg : "LLMGW_NEW_MASTER_KEY is not set");
        cp_master_key_clear(&old_key);
        return 1;
    }
    int done, skipped;
    int rc = cp_rotate_master_key(db, &old_key, &new_key, &done, &skipped, msg, sizeof(msg));
    if (rc == GW_OK)
        gw_logf(GW_LOG_INFO, "master key rotated", "{s:s,s:s,s:i,s:i}", "old_key_id", old_key.id,
                "new_key_id", new_key.id, "rewrapped", done, "already_rotated", skipped);
    else
        gw_logf(GW_LOG_ERROR, "rotation failed, nothing changed", "{s:s}", "error", msg);
    cp_master_key_clear(&old_key);
    cp_master_key_clear(&new_key);
    return rc == GW_OK ? 0 : 1;
}

int main(int argc, char **argv)
{
    struct cp_config cfg;
    int rc = cp_config_parse(&cfg, argc, argv);
    if (rc)
        return rc > 0 ? 0 : 2;
    signal(SIGPIPE, SIG_IGN);
    struct cp_db_err err;
    struct cp_db *db = cp_db_connect(cfg.database_url, &err);
    if (!db) {
        /* The message is libpq's; it names host and port, never the password. */
        gw_logf(GW_LOG_ERROR, "cannot connect to the database", "{s:s}", "error", err.message);
        return 1;
    }
    if (migrate(db) != GW_OK) {
        cp_db_free(db);
        return 1;
    }
    if (cfg.command == CP_CMD_MIGRATE) {
        cp_db_free(db);
        return 0;
    }
    if (cfg.command == CP_CMD_ROTATE_MASTER_KEY) {
        rc = rotate(db);
        cp_db_free(db);
        return rc;
    }
    /* The master key seals secret values; without it the daemon serves
     * everything else and secret writes answer 503. A malformed one is
     * fatal: it would seal nothing anyone can open. */
    struct cp_master_key mk;
    char mkerr[256];
    int mkrc = cp_master_key_from_env(&mk, mkerr, sizeof(mkerr));
    if (mkrc == GW_ENOTFOUND) {
        gw_log(GW_LOG_WARN, "LLMGW_MASTER_KEY is not set: secret values cannot be stored", NULL);
    } else if (mkrc != GW_OK) {
        gw_logf(GW_LOG_ERROR, "LLMGW_MASTER_KEY is not usable", "{s:s}", "error", mkerr);
        cp_db_free(db);
        return 1;
    }
    if (!cfg.admin_token)
        gw_log(GW_LOG_WARN, "LLMGW_ADMIN_TOKEN is not set: only tokens in admin_tokens work", NULL);

    struct main_ctx m = {0};
    int port = 0;
    int fd = gw_http_listen(cfg.admin.host, cfg.admin.port, 0, &port);
    if (fd < 0) {
        gw_logf(GW_LOG_ERROR, "cannot listen", "{s:s,s:i}", "host", cfg.admin.host, "port",
                cfg.admin.port);
        cp_db_free(db);
        return 1;
    }
    m.base = event_base_new();
    m.api = m.base ? cp_api_new(m.base, fd, db, cfg.admin_token, mkrc == GW_OK ? &mk : NULL) : NULL;
    cp_master_key_clear(&mk);
    struct event *term = m.base ? evsignal_new(m.base, SIGTERM, on_term, &m) : NULL;
    struct event *intr = m.base ? evsignal_new(m.base, SIGINT, on_term, &m) : NULL;
    m.tick = m.base ? event_new(m.base, -1, EV_PERSIST, on_tick, &m) : NULL;
    if (!m.api || !term || !intr || !m.tick) {
        gw_log(GW_LOG_ERROR, "out of memory", NULL);
        return 1;
    }
    event_add(term, NULL);
    event_add(intr, NULL);
    gw_log_line_fd(1, json_pack("{s:s,s:s,s:i,s:i,s:s,s:i,s:i}", "msg", "listening", "host",
                                cfg.admin.host, "port", port, "admin_port", port, "grpc_host",
                                cfg.grpc.host, "grpc_port", cfg.grpc.port, "schema_version",
                                cp_migrate_latest()));
    event_base_dispatch(m.base);

    cp_api_free(m.api);
    event_free(term);
    event_free(intr);
    event_free(m.tick);
    event_base_free(m.base);
    cp_db_free(db);
    gw_log(GW_LOG_INFO, "stopped", NULL);
    return 0;
}
