/*
 * llmgw-controlplane: the configuration half of llmgw. It owns PostgreSQL
 * (schema by embedded migrations, cp_migrate.h), serves the admin REST API
 * (cp_api.h), builds snapshots of the configuration (cp_snapshot.h, on a
 * thread of its own) and pushes them to data planes over gRPC (cp_grpc.h).
 * See docs/controlplane.md.
 *
 *   llmgw-controlplane migrate   apply pending migrations, exit 0 or 1
 *   llmgw-controlplane [serve]   migrate, then serve until SIGTERM/SIGINT
 *   llmgw-controlplane rotate-master-key
 *                                rewrap every builtin secret from
 *                                LLMGW_MASTER_KEY to LLMGW_NEW_MASTER_KEY
 *   llmgw-controlplane import-catalog --file PATH | --url URL
 *                                a LiteLLM catalog into model_catalog
 *
 * One event loop on the main thread runs the admin API and the gRPC server;
 * the snapshot builder hands each good build to it. The fleet thread
 * (cp_etcd.h) keeps this replica's lease, membership and leadership in etcd
 * (without etcd, the replica leads itself); the singleton jobs (cp_jobs.h)
 * run on the loop while it leads. With OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT
 * set, admin writes, snapshot builds and pushes are trace spans
 * (cp_trace.h, exported by gw_otel.h). SIGTERM/SIGINT stop accepting, let
 * open admin requests finish (they are short), stop the builder, resign in
 * etcd, cancel the open Watch streams, send the spans still queued and
 * exit 0.
 *
 * The parts other modules read (the database connection, the builder, the
 * gRPC server, the ledger writer, the cluster membership, the fleet view,
 * the jobs, the tracing, and two settings) are in one struct cp_ctx
 * (cp_ctx.h), made here and passed to the admin API, the jobs and the
 * ledger writer's lease handlers; what only this file uses (the admin API,
 * the shutdown tick, the admin port's TLS) is beside it in struct
 * main_ctx.
 */
#include <curl/curl.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cp_api.h"
#include "cp_catalog_import.h"
#include "cp_config.h"
#include "cp_ctx.h"
#include "cp_db.h"
#include "cp_etcd.h"
#include "cp_fleet.h"
#include "cp_grpc.h"
#include "cp_jobs.h"
#include "cp_leases.h"
#include "cp_ledger.h"
#include "cp_metrics.h"
#include "cp_migrate.h"
#include "cp_rotate.h"
#include "cp_secrets.h"
#include "cp_snapshot.h"
#include "cp_trace.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_otel.h"
#include "gw_time.h"
#include "gw_tls.h"
#include "llmgw/v1/control.pb-c.h"

struct main_ctx {
    struct cp_ctx cp; /* the process-wide state the modules read */
    struct cp_api *api;
    struct event *tick;
    struct gw_tls *admin_tls; /* NULL: the admin port is plaintext */
    int stopping;
};

/* While stopping: exits the loop once no admin request is open. */
static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct main_ctx *m = arg;
    if (cp_api_active(m->api) == 0)
        event_base_loopexit(m->cp.base, NULL);
}

/* SIGHUP: the admin port's certificate is read again (a renewal). */
static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    struct main_ctx *m = arg;
    if (m->admin_tls)
        (void)gw_tls_reload(m->admin_tls);
    else
        gw_log(GW_LOG_INFO, "SIGHUP ignored: no TLS certificate to reload", NULL);
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

/* On the main loop: an outcome summary goes to the fleet view (cp_fleet),
 * not to the database. 1 when it was one. */
static int fleet_report(struct main_ctx *m, uint64_t stream_id, const char *replica_id,
                        const Llmgw__V1__ReportMessage *msg)
{
    if (msg->body_case != LLMGW__V1__REPORT_MESSAGE__BODY_OUTCOME_SUMMARY)
        return 0;
    cp_fleet_report(m->cp.fleet, stream_id, replica_id, msg->outcome_summary);
    return 1;
}

/* On the main loop: Report messages that need the database go to the
 * ledger writer (rows, judgements, lease requests and releases). */
static int on_report(void *arg, uint64_t stream_id, const char *replica_id,
                     const Llmgw__V1__ReportMessage *msg)
{
    struct main_ctx *m = arg;
    if (fleet_report(m, stream_id, replica_id, msg))
        return 0;
    return cp_ledger_submit(m->cp.ledger, stream_id, replica_id, msg);
}

/* cp_grpc's document source: the builder's newest whole document, asked
 * for only when a Watch needs one (new, lagging, or after a full build). */
static char *builder_document(void *arg, int64_t *version, size_t *len)
{
    struct main_ctx *m = arg;
    return m->cp.builder ? cp_snapshot_document(m->cp.builder, version, len) : NULL;
}

/* On the main loop: each good build goes out to every data plane: its delta,
 * packed once, to every Watch current at its base; the whole document to
 * the others (a full build: to every Watch). A traced build's pushes are
 * spans until each data plane acks (cp_trace.h). */
static void publish(void *arg, const struct cp_snapshot_pub *p)
{
    struct main_ctx *m = arg;
    if (cp_grpc_publish_version(m->cp.grpc, p->version, p->built_at_ms, p->base_version, p->delta,
                                p->delta_len) != GW_OK) {
        gw_logf(GW_LOG_ERROR, "cannot publish the snapshot (out of memory)", "{s:I}", "version",
                (json_int_t)p->version);
        return;
    }
    gw_logf(GW_LOG_INFO, "snapshot published", "{s:I,s:I,s:i}", "version", (json_int_t)p->version,
            "base_version", (json_int_t)p->base_version, "delta_bytes", (int)p->delta_len);
    if (p->traced)
        cp_trace_publish(m->cp.trace, m->cp.grpc, &p->trace, p->version);
}

/* On the main loop: a data plane serves version now (its push span ends). */
static void on_ack(void *arg, const char *replica_id, int64_t version)
{
    struct main_ctx *m = arg;
    cp_trace_ack(m->cp.trace, replica_id, version);
}

/* On the main loop: a data plane's last Watch ended (its push, if any,
 * was not acknowledged). */
static void on_disconnect(void *arg, const char *replica_id)
{
    struct main_ctx *m = arg;
    cp_trace_replica_gone(m->cp.trace, replica_id);
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
    int done, skipped, judgements;
    int rc = cp_rotate_master_key(db, &old_key, &new_key, &done, &skipped, &judgements, msg,
                                  sizeof(msg));
    if (rc == GW_OK)
        gw_logf(GW_LOG_INFO, "master key rotated", "{s:s,s:s,s:i,s:i,s:i}", "old_key_id",
                old_key.id, "new_key_id", new_key.id, "rewrapped", done, "already_rotated", skipped,
                "judgements_rewrapped", judgements);
    else
        gw_logf(GW_LOG_ERROR, "rotation failed, nothing changed", "{s:s}", "error", msg);
    cp_master_key_clear(&old_key);
    cp_master_key_clear(&new_key);
    return rc == GW_OK ? 0 : 1;
}

/* serve and rotate-master-key hold the master key and plaintext
 * credentials: no core file, and no ptrace attach by other processes of
 * the same user. */
static void no_core_dumps(void)
{
    struct rlimit rl = {0, 0};
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0 || setrlimit(RLIMIT_CORE, &rl) != 0)
        gw_log(GW_LOG_WARN, "cannot disable core dumps", NULL);
}

/* A master key from the environment for --check-config: its id, "" when
 * unset, or GW_EINVAL after a message naming the variable. */
static int check_key(const char *var, char id[9], int required)
{
    struct cp_master_key k = {0};
    char msg[512];
    const char *v = getenv(var);
    int rc = GW_ENOTFOUND;
    if (v && *v)
        rc = cp_master_key_parse(v, &k, msg, sizeof(msg));
    else
        snprintf(msg, sizeof(msg), "is not set");
    id[0] = '\0';
    if (rc == GW_OK)
        memcpy(id, k.id, sizeof(k.id));
    cp_master_key_clear(&k);
    if (rc == GW_OK || (rc == GW_ENOTFOUND && !required))
        return GW_OK;
    if (strstr(msg, var)) /* the parser's message names LLMGW_MASTER_KEY */
        fprintf(stderr, "llmgw-controlplane: %s\n", msg);
    else
        fprintf(stderr, "llmgw-controlplane: %s: %s\n", var, msg);
    return GW_EINVAL;
}

/* --check-config: what the command would refuse before it touches the
 * database or the network, then one JSON line that says what it would run
 * with (never the conninfo, a token or a key). 0, or 2 after a message. */
static int check_config(const struct cp_config *c)
{
    static const char *const commands[] = {"serve", "migrate", "rotate-master-key",
                                           "import-catalog"};
    char msg[512], key_id[9] = "", new_key_id[9] = "";
    int rotate = c->command == CP_CMD_ROTATE_MASTER_KEY;
    if (c->command == CP_CMD_SERVE && cp_config_grpc_check(c, msg, sizeof(msg)) != GW_OK) {
        fprintf(stderr, "llmgw-controlplane: %s\n", msg);
        return 2;
    }
    if ((c->command == CP_CMD_SERVE || rotate) &&
        (check_key("LLMGW_MASTER_KEY", key_id, rotate) != GW_OK ||
         (rotate && check_key("LLMGW_NEW_MASTER_KEY", new_key_id, 1) != GW_OK)))
        return 2;
    struct gw_otel *otel = NULL;
    if (c->command == CP_CMD_SERVE &&
        gw_otel_from_env("llmgw-controlplane", c->replica_id, &otel, msg, sizeof(msg)) != GW_OK) {
        fprintf(stderr, "llmgw-controlplane: %s\n", msg);
        return 2;
    }
    int traces = otel != NULL;
    gw_otel_free(otel);
    json_t *o =
        json_pack("{s:s,s:s,s:s,s:s?,s:s?}", "msg", "config ok", "command", commands[c->command],
                  "replica_id", c->replica_id, "master_key_id", key_id[0] ? key_id : NULL,
                  "new_master_key_id", new_key_id[0] ? new_key_id : NULL);
    if (o && c->command == CP_CMD_IMPORT_CATALOG)
        json_object_update_new(
            o, json_pack("{s:s?,s:s?}", "file", c->import_file, "url", c->import_url));
    if (o && c->command == CP_CMD_SERVE) {
        const char *transport = c->grpc_insecure        ? "insecure"
                                : c->grpc_tls_client_ca ? "mtls"
                                                        : "tls";
        char admin[300], grpc[300];
        snprintf(admin, sizeof(admin), strchr(c->admin.host, ':') ? "[%s]:%d" : "%s:%d",
                 c->admin.host, c->admin.port);
        snprintf(grpc, sizeof(grpc), strchr(c->grpc.host, ':') ? "[%s]:%d" : "%s:%d", c->grpc.host,
                 c->grpc.port);
        json_object_update_new(
            o, json_pack("{s:s,s:s,s:s,s:I,s:I,s:s?,s:i,s:b,s:b}", "admin_listen", admin,
                         "grpc_listen", grpc, "grpc_transport", transport, "snapshot_poll_ms",
                         (json_int_t)c->snapshot_poll_ms, "secret_cache_ttl_ms",
                         (json_int_t)c->secret_cache_ttl_ms, "etcd_endpoints", c->etcd_endpoints,
                         "etcd_lease_ttl_s", c->etcd_lease_ttl_s, "admin_token",
                         c->admin_token != NULL, "fleet_token", c->fleet_token != NULL));
        json_object_set_new(o, "etcd_tls", json_boolean(c->etcd_ca || c->etcd_cert));
        json_object_set_new(o, "admin_tls", json_boolean(c->admin_tls_cert != NULL));
        json_object_set_new(o, "traces", json_boolean(traces));
    }
    if (!o)
        return 1;
    gw_log_line_fd(1, o);
    return 0;
}

int main(int argc, char **argv)
{
    struct cp_config cfg;
    int rc = cp_config_parse(&cfg, argc, argv);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (cfg.check_config)
        return check_config(&cfg);
    if (cfg.command != CP_CMD_MIGRATE && cfg.command != CP_CMD_IMPORT_CATALOG)
        no_core_dumps();
    signal(SIGPIPE, SIG_IGN);
    struct cp_db_err err;
    struct cp_db *db = cp_db_connect(cfg.database_url, "admin api", &err);
    if (!db) {
        /* The message is libpq's; it names host and port, never the password. */
        gw_logf(GW_LOG_ERROR, "cannot connect to the database", "{s:s}", "error", err.message);
        return 1;
    }
    if (migrate(db) != GW_OK) {
        cp_db_free(db);
        return 1;
    }
    cp_db_set_reconnect_backoff(db, 1);
    if (cfg.command == CP_CMD_MIGRATE) {
        cp_db_free(db);
        return 0;
    }
    if (cfg.command == CP_CMD_ROTATE_MASTER_KEY) {
        rc = rotate(db);
        cp_db_free(db);
        return rc;
    }
    if (cfg.command == CP_CMD_IMPORT_CATALOG) {
        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
            gw_log(GW_LOG_ERROR, "cannot initialise libcurl", NULL);
            cp_db_free(db);
            return 1;
        }
        rc = cp_catalog_import_cli(db, cfg.import_file, cfg.import_url, cfg.catalog_fetch_allow);
        cp_db_free(db);
        curl_global_cleanup();
        return rc;
    }
    char msg[512];
    if (cp_config_grpc_check(&cfg, msg, sizeof(msg)) != GW_OK) {
        fprintf(stderr, "llmgw-controlplane: %s\n", msg);
        cp_db_free(db);
        return 2;
    }
    if (!cfg.admin_token)
        gw_log(GW_LOG_WARN, "LLMGW_ADMIN_TOKEN is not set: only tokens in admin_tokens work", NULL);
    struct cp_master_key key;
    int have_key = 0;
    int krc = cp_master_key_from_env(&key, msg, sizeof(msg));
    if (krc == GW_OK)
        have_key = 1;
    else if (krc == GW_ENOTFOUND)
        gw_log(GW_LOG_WARN,
               "LLMGW_MASTER_KEY is not set: secret values cannot be stored, and providers "
               "whose credential is a built-in secret go out without one",
               NULL);
    else {
        gw_logf(GW_LOG_ERROR, "LLMGW_MASTER_KEY is not a valid key", "{s:s}", "error", msg);
        cp_db_free(db);
        return 1;
    }
    /* Before any thread: libcurl (secret backends) and libevent's locking
     * (the builder's thread wakes the main loop). */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK || evthread_use_pthreads() != 0) {
        gw_log(GW_LOG_ERROR, "cannot initialise libcurl or libevent threads", NULL);
        cp_master_key_clear(&key);
        cp_db_free(db);
        return 1;
    }

    /* Tracing (OTEL_*; off without an endpoint): a value that is set but
     * wrong stops the daemon here, naming its variable. */
    struct gw_otel *otel = NULL;
    if (gw_otel_from_env("llmgw-controlplane", cfg.replica_id, &otel, msg, sizeof(msg)) != GW_OK) {
        fprintf(stderr, "llmgw-controlplane: %s\n", msg);
        cp_master_key_clear(&key);
        cp_db_free(db);
        return 2;
    }

    if (cp_metrics_init() != GW_OK) {
        gw_log(GW_LOG_ERROR, "out of memory", NULL);
        cp_master_key_clear(&key);
        cp_db_free(db);
        return 1;
    }
    cp_metrics_otel(otel);
    struct main_ctx m = {.cp = {.db = db,
                                .fetch_allow = cfg.catalog_fetch_allow,
                                .lease_grace_ms = cfg.lease_grace_s * 1000,
                                .otel = otel}};
    int port = 0;
    int fd = gw_http_listen(cfg.admin.host, cfg.admin.port, 0, &port);
    if (fd < 0) {
        gw_logf(GW_LOG_ERROR, "cannot listen", "{s:s,s:i}", "host", cfg.admin.host, "port",
                cfg.admin.port);
        cp_db_free(db);
        return 1;
    }
    if (cfg.admin_tls_cert) {
        m.admin_tls = gw_tls_new(cfg.admin_tls_cert, cfg.admin_tls_key, msg, sizeof(msg));
        if (!m.admin_tls) {
            gw_logf(GW_LOG_ERROR, "cannot set up TLS on the admin port", "{s:s}", "error", msg);
            close(fd);
            cp_db_free(db);
            return 1;
        }
        gw_tls_log(m.admin_tls, "TLS on the admin port");
    }
    m.cp.base = event_base_new();
    int trace_failed = 0;
    m.cp.trace = m.cp.base ? cp_trace_new(otel, m.cp.base, &trace_failed) : NULL;
    /* The admin API seals secret values with the key, the builder opens
     * them: each keeps its own copy. */
    m.api = m.cp.base ? cp_api_new(m.cp.base, fd, &m.cp, cfg.admin_token, have_key ? &key : NULL,
                                   m.admin_tls)
                      : NULL;
    if (m.api)
        cp_api_console_dir(m.api, cfg.console_dir);
    struct event *term = m.cp.base ? evsignal_new(m.cp.base, SIGTERM, on_term, &m) : NULL;
    struct event *intr = m.cp.base ? evsignal_new(m.cp.base, SIGINT, on_term, &m) : NULL;
    struct event *hup = m.cp.base ? evsignal_new(m.cp.base, SIGHUP, on_hup, &m) : NULL;
    m.tick = m.cp.base ? event_new(m.cp.base, -1, EV_PERSIST, on_tick, &m) : NULL;
    if (!m.api || !term || !intr || !hup || !m.tick || trace_failed) {
        gw_log(GW_LOG_ERROR, "out of memory", NULL);
        return 1;
    }
    char glisten[300];
    snprintf(glisten, sizeof(glisten), strchr(cfg.grpc.host, ':') ? "[%s]:%d" : "%s:%d",
             cfg.grpc.host, cfg.grpc.port);
    struct cp_grpc_opts go = {.listen = glisten,
                              .insecure = cfg.grpc_insecure,
                              .tls_cert_file = cfg.grpc_tls_cert,
                              .tls_key_file = cfg.grpc_tls_key,
                              .tls_client_ca_file = cfg.grpc_tls_client_ca,
                              .fleet_token = cfg.fleet_token,
                              .on_report = on_report,
                              .on_ack = on_ack,
                              .on_disconnect = on_disconnect,
                              .arg = &m,
                              .ledger_batch_max = CP_LEDGER_BATCH_MAX};
    m.cp.grpc = cp_grpc_new(m.cp.base, &go, msg, sizeof(msg));
    if (!m.cp.grpc) {
        gw_logf(GW_LOG_ERROR, "cannot start the gRPC server", "{s:s}", "error", msg);
        return 1;
    }
    if (cfg.grpc_insecure)
        gw_log(GW_LOG_WARN,
               "the gRPC server is plaintext (--grpc-insecure): pushed snapshots "
               "carry provider credentials; use TLS outside a test bench",
               NULL);
    else if (!cfg.grpc_tls_client_ca)
        gw_log(GW_LOG_WARN,
               "the gRPC server does not ask for client certificates "
               "(--grpc-tls-no-client-auth): whoever holds the fleet token and can reach the gRPC "
               "port can Watch every provider credential; use --grpc-tls-client-ca",
               NULL);
    m.cp.ledger = cp_ledger_new(m.cp.base, cfg.database_url, m.cp.grpc, msg, sizeof(msg));
    if (!m.cp.ledger) {
        gw_logf(GW_LOG_ERROR, "cannot start the ledger writer", "{s:s}", "error", msg);
        return 1;
    }
    /* Budgets and rate limits: the writer answers lease messages in the
     * order they came, ahead of the rows queued (docs/budgets.md), with
     * the context's lease grace. */
    cp_ledger_set_leases(m.cp.ledger, &(struct cp_ledger_leases){.grant = cp_leases_ledger_grant,
                                                                 .release = cp_leases_release,
                                                                 .arg = &m.cp});
    /* The text a judge route keeps is sealed like secrets (its own copy). */
    cp_ledger_set_master_key(m.cp.ledger, have_key ? &key : NULL);
    struct cp_snapshot_opts so = {.conninfo = cfg.database_url,
                                  .poll_ms = cfg.snapshot_poll_ms,
                                  .secret_cache_ttl_ms = cfg.secret_cache_ttl_ms,
                                  .master_key = have_key ? &key : NULL,
                                  .publish = publish,
                                  .arg = &m,
                                  .trace = m.cp.trace};
    cp_grpc_set_document(m.cp.grpc, builder_document, &m);
    /* publish runs on this loop, which is not running yet */
    m.cp.builder = cp_snapshot_new(m.cp.base, &so, msg, sizeof(msg));
    cp_master_key_clear(&key); /* the builder has its own copy */
    if (!m.cp.builder) {
        gw_logf(GW_LOG_ERROR, "cannot start the snapshot builder", "{s:s}", "error", msg);
        return 1;
    }
    /* This replica in the fleet: its member record says where to reach it. */
    char aaddr[300];
    snprintf(aaddr, sizeof(aaddr), strchr(cfg.admin.host, ':') ? "[%s]:%d" : "%s:%d",
             cfg.admin.host, port);
    snprintf(glisten, sizeof(glisten), strchr(cfg.grpc.host, ':') ? "[%s]:%d" : "%s:%d",
             cfg.grpc.host, cp_grpc_port(m.cp.grpc));
    json_t *mj =
        json_pack("{s:s,s:s,s:i,s:I,s:i}", "admin", aaddr, "grpc", glisten, "pid", (int)getpid(),
                  "started_at_ms", (json_int_t)gw_wall_ms(), "schema_version", cp_migrate_latest());
    char *member = mj ? json_dumps(mj, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(mj);
    struct cp_etcd_opts eo = {.endpoints = cfg.etcd_endpoints,
                              .tls_ca = cfg.etcd_ca,
                              .tls_cert = cfg.etcd_cert,
                              .tls_key = cfg.etcd_key,
                              .replica_id = cfg.replica_id,
                              .lease_ttl_s = cfg.etcd_lease_ttl_s,
                              .member = member};
    m.cp.membership = member ? cp_etcd_new(m.cp.base, &eo, msg, sizeof(msg)) : NULL;
    free(member);
    struct cp_jobs_opts jo = {.conninfo = cfg.database_url,
                              .catalog_sync_url = cfg.catalog_sync_url,
                              .catalog_sync_interval_s = cfg.catalog_sync_interval_s};
    if (!m.cp.membership || !(m.cp.jobs = cp_jobs_new(&m.cp, &jo))) {
        gw_logf(GW_LOG_ERROR, "cannot start the fleet thread", "{s:s}", "error",
                m.cp.membership ? "out of memory" : msg);
        return 1;
    }
    /* The fleet health view: data planes' outcomes in, views out. */
    if (!(m.cp.fleet = cp_fleet_new(m.cp.base, m.cp.grpc, m.cp.membership, msg, sizeof(msg)))) {
        gw_logf(GW_LOG_ERROR, "cannot start the fleet view", "{s:s}", "error", msg);
        return 1;
    }
    event_add(term, NULL);
    event_add(intr, NULL);
    event_add(hup, NULL);
    gw_log_line_fd(1, json_pack("{s:s,s:s,s:i,s:i,s:s,s:i,s:b,s:i,s:s,s:b,s:b}", "msg", "listening",
                                "host", cfg.admin.host, "port", port, "admin_port", port,
                                "grpc_host", cfg.grpc.host, "grpc_port", cp_grpc_port(m.cp.grpc),
                                "grpc_tls", !cfg.grpc_insecure, "schema_version",
                                cp_migrate_latest(), "replica_id", cfg.replica_id, "etcd",
                                cfg.etcd_endpoints != NULL, "admin_tls", m.admin_tls != NULL));
    event_base_dispatch(m.cp.base);

    /* The loop has ended: no admin request or scrape reads m.cp again; each
     * part is forgotten as it is freed all the same. */
    cp_fleet_stop(m.cp.fleet);
    cp_etcd_free(m.cp.membership);
    m.cp.membership = NULL;
    cp_jobs_free(m.cp.jobs); /* after the fleet thread: no job runs again */
    m.cp.jobs = NULL;
    cp_snapshot_free(m.cp.builder);
    m.cp.builder = NULL; /* the gRPC server, freed next, may not ask it */
    cp_grpc_free(m.cp.grpc);
    m.cp.grpc = NULL;
    cp_ledger_free(m.cp.ledger);
    m.cp.ledger = NULL;
    cp_fleet_free(m.cp.fleet);
    m.cp.fleet = NULL;
    cp_api_free(m.api);
    /* After the gRPC server (its streams' ends) and the admin API (a
     * deferred answer's span): the pushes still waiting end, and the
     * loop's spans go to the exporter, which sends what is queued. */
    cp_trace_free(m.cp.trace);
    m.cp.trace = NULL;
    event_free(term);
    event_free(intr);
    event_free(hup);
    event_free(m.tick);
    event_base_free(m.cp.base);
    gw_tls_free(m.admin_tls);
    cp_db_free(db);
    m.cp.db = NULL;
    gw_otel_free(otel);
    m.cp.otel = NULL;
    cp_metrics_shutdown();
    curl_global_cleanup();
    gw_log(GW_LOG_INFO, "stopped", NULL);
    return 0;
}
