/*
 * llmgw-dataplane: the serving half of llmgw. Applications send OpenAI-format
 * requests here; each worker thread answers them from the current snapshot
 * by calling the selected provider. See docs/dataplane.md.
 *
 * The main thread only starts workers and handles signals: SIGTERM/SIGINT
 * turn /readyz 503 at once, keep serving for --drain-delay-ms (so load
 * balancers see the change before new connections are refused; a second
 * signal ends the delay), then drain (stop accepting, let open requests
 * finish up to the drain timeout, exit 0), SIGHUP reloads the snapshot file (a bad file keeps the
 * last good snapshot).
 *
 * The snapshot comes from a file (--snapshot) or from the control plane
 * (--control-plane: dp_cpclient keeps a Watch open and publishes what it
 * pushes; until the first push, the snapshot cache serves).
 */
#include <curl/curl.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dp_breaker.h"
#include "dp_cache.h"
#include "dp_config.h"
#include "dp_cpclient.h"
#include "dp_ledger.h"
#include "dp_metrics.h"
#include "dp_outcomes.h"
#include "dp_snapcache.h"
#include "dp_snapshot.h"
#include "dp_worker.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_log.h"
#include "gw_otel.h"
#include "gw_tls.h"

struct main_ctx {
    struct dp_config cfg;
    struct dp_worker *workers;
    int nworkers;
    int unready;  /* a signal arrived: /readyz answers 503 */
    int draining; /* the listeners are closing */
    struct event *delay;
};

static void start_drain(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct main_ctx *m = arg;
    if (m->draining)
        return;
    m->draining = 1;
    gw_logf(GW_LOG_INFO, "draining", "{s:I}", "drain_timeout_ms",
            (json_int_t)m->cfg.drain_timeout_ms);
    for (int i = 0; i < m->nworkers; i++)
        dp_worker_drain(&m->workers[i]);
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct main_ctx *m = arg;
    if (m->draining)
        return;
    if (m->unready || m->cfg.drain_delay_ms <= 0) {
        /* No delay, or a second signal: drain now. */
        if (!m->unready)
            dp_worker_mark_unready();
        m->unready = 1;
        gw_logf(GW_LOG_INFO, "signal: not ready", "{s:i}", "signal", (int)sig);
        start_drain(-1, 0, m);
        return;
    }
    m->unready = 1;
    dp_worker_mark_unready();
    gw_logf(GW_LOG_INFO, "signal: not ready; serving on until the drain delay ends", "{s:i,s:I}",
            "signal", (int)sig, "drain_delay_ms", (json_int_t)m->cfg.drain_delay_ms);
    struct timeval tv = {m->cfg.drain_delay_ms / 1000, (m->cfg.drain_delay_ms % 1000) * 1000};
    evtimer_add(m->delay, &tv);
}

static void on_hup(evutil_socket_t sig, short what, void *arg)
{
    (void)sig;
    (void)what;
    struct main_ctx *m = arg;
    char err[512];
    if (m->cfg.tls)
        (void)gw_tls_reload(m->cfg.tls);
    if (!m->cfg.snapshot_path) {
        if (!m->cfg.tls)
            gw_log(GW_LOG_INFO, "SIGHUP ignored: snapshots come from the control plane", NULL);
        return;
    }
    struct dp_snapshot *s = dp_snapshot_load(m->cfg.snapshot_path, err, sizeof(err));
    if (!s) {
        gw_logf(GW_LOG_ERROR, "snapshot reload failed; keeping the last good one", "{s:s}", "error",
                err);
        return;
    }
    long long v = s->version;
    dp_snapshot_publish(s);
    gw_logf(GW_LOG_INFO, "snapshot loaded", "{s:I}", "version", (json_int_t)v);
}

/* --check-config: what a start would refuse before it listens or dials,
 * then one JSON line that says what it would run with (never a key).
 * 0, or 2 after a message naming the flag. */
static int check_config(const struct dp_config *c)
{
    long long version = 0;
    char oerr[512];
    struct gw_otel *otel;
    if (gw_otel_from_env("llmgw-dataplane", NULL, &otel, oerr, sizeof(oerr)) != GW_OK) {
        fprintf(stderr, "llmgw-dataplane: %s\n", oerr);
        return 2;
    }
    int traces = otel != NULL;
    gw_otel_free(otel);
    if (c->snapshot_path) {
        char err[512];
        struct dp_snapshot *s = dp_snapshot_load(c->snapshot_path, err, sizeof(err));
        if (!s) {
            fprintf(stderr, "llmgw-dataplane: --snapshot: %s\n", err);
            return 2;
        }
        version = s->version;
        dp_snapshot_unref(s);
    }
    const char *tls = !c->control_plane_ca ? "plaintext" : c->control_plane_cert ? "mtls" : "tls";
    char listen[300];
    snprintf(listen, sizeof(listen), strchr(c->host, ':') ? "[%s]:%d" : "%s:%d", c->host, c->port);
    json_t *o = json_pack(
        "{s:s,s:s,s:s?,s:I,s:s?,s:s?,s:s,s:s?,s:b,s:s,s:i,s:I,s:I,s:s?,s:I,s:I,s:s}", "msg",
        "config ok", "mode", c->snapshot_path ? "file" : "control_plane", "snapshot",
        c->snapshot_path, "snapshot_version", (json_int_t)version, "control_plane",
        c->control_plane, "control_plane_tls", c->control_plane ? tls : NULL, "replica_id",
        c->replica_id, "snapshot_cache", c->snapshot_cache, "cache_key", c->has_cache_key, "listen",
        listen, "threads", c->threads, "drain_delay_ms", (json_int_t)c->drain_delay_ms,
        "drain_timeout_ms", (json_int_t)c->drain_timeout_ms, "ledger_spool", c->ledger_spool,
        "ledger_spool_max_mb", (json_int_t)(c->ledger_spool_max_bytes >> 20),
        "ledger_flush_timeout_ms", (json_int_t)c->ledger_flush_timeout_ms, "access_log",
        c->access_log);
    if (o && c->control_plane)
        json_object_set_new(o, "fleet_token", json_boolean(c->fleet_token != NULL));
    if (o)
        json_object_set_new(o, "tls", json_boolean(c->tls_cert != NULL));
    if (o)
        json_object_set_new(o, "traces", json_boolean(traces));
    if (!o)
        return 1;
    gw_log_line_fd(1, o);
    return 0;
}

/* A breaker state change: its log line and gauges (dp_metrics), and the
 * fleet view's next summary (dp_outcomes). */
static void on_breaker_change(void *arg, const char *provider, const char *model,
                              enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us)
{
    dp_metrics_breaker_change(arg, provider, model, from, to, at_us);
    dp_outcomes_change(provider, model, from, to, at_us);
}

/* Every client connection, upstream connection and spool file is a
 * descriptor, and the soft limit a shell hands down is often 1024, far
 * below what the hard limit allows: the soft limit is raised to the hard
 * one, and the result logged once, as the ceiling operators must know
 * (nothing here uses select(2), so descriptors past 1024 are fine). At the
 * limit, gw_http refuses new connections with a 503. */
static void raise_nofile(struct dp_config *cfg)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        gw_logf(GW_LOG_WARN, "open files limit unknown", "{s:s}", "error", strerror(errno));
        return;
    }
    rlim_t was = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
            gw_logf(GW_LOG_WARN, "open files limit: could not raise the soft limit to the hard one",
                    "{s:s,s:I,s:I}", "error", strerror(errno), "nofile", (json_int_t)was, "hard",
                    (json_int_t)rl.rlim_max);
            rl.rlim_cur = was;
        }
    }
    /* Unless set, client connections may take half of what is left after
     * a margin for the rest (files, the control plane): each one can hold
     * an upstream connection too. */
    if (!cfg->max_connections)
        cfg->max_connections = rl.rlim_cur > 384 ? (size_t)(rl.rlim_cur - 256) / 2 : 64;
    gw_logf(GW_LOG_INFO, "open files limit", "{s:I,s:I,s:I}", "nofile", (json_int_t)rl.rlim_cur,
            "was", (json_int_t)was, "max_connections", (json_int_t)cfg->max_connections);
}

int main(int argc, char **argv)
{
    struct main_ctx m = {0};
    /* The process holds provider credentials in memory: no core dump, and
     * no ptrace attach by same-uid processes (PR_SET_DUMPABLE 0). */
    struct rlimit nocore = {0, 0};
    if (setrlimit(RLIMIT_CORE, &nocore) != 0 || prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("llmgw-dataplane: disabling core dumps");
        return 1;
    }
    int rc = dp_config_parse(&m.cfg, argc, argv);
    if (rc)
        return rc > 0 ? 0 : 2;
    if (gw_log_level_from_env() != GW_OK) {
        fprintf(stderr, "llmgw-dataplane: LLMGW_LOG_LEVEL: use debug, info, warn or error\n");
        return 2;
    }
    if (m.cfg.check_config)
        return check_config(&m.cfg);
    raise_nofile(&m.cfg);
    signal(SIGPIPE, SIG_IGN);
    if (evthread_use_pthreads() != 0 || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "llmgw-dataplane: library initialisation failed\n");
        return 1;
    }
    if (gw_log_open_access(m.cfg.access_log) != GW_OK) {
        fprintf(stderr, "llmgw-dataplane: --access-log: cannot open '%s'\n", m.cfg.access_log);
        return 2;
    }
    if (dp_metrics_init() != GW_OK) {
        fprintf(stderr, "llmgw-dataplane: out of memory\n");
        return 1;
    }
    char err[512];
    /* Traces (OTEL_*): a variable set wrong stops the start. */
    if (gw_otel_from_env("llmgw-dataplane", m.cfg.replica_id[0] ? m.cfg.replica_id : NULL,
                         &m.cfg.otel, err, sizeof(err)) != GW_OK) {
        fprintf(stderr, "llmgw-dataplane: %s\n", err);
        return 2;
    }
    dp_metrics_otel(m.cfg.otel);
    long long version = 0;
    const char *source = "none";
    struct dp_cpclient *cp = NULL;
    /* First: a certificate that does not load stops the start before
     * anything else is made. */
    if (m.cfg.tls_cert) {
        m.cfg.tls = gw_tls_new(m.cfg.tls_cert, m.cfg.tls_key, err, sizeof(err));
        if (!m.cfg.tls) {
            gw_logf(GW_LOG_ERROR, "cannot set up TLS", "{s:s}", "error", err);
            return 1;
        }
        gw_tls_log(m.cfg.tls, "TLS on the listener");
    }
    if (m.cfg.snapshot_path) {
        struct dp_snapshot *snap = dp_snapshot_load(m.cfg.snapshot_path, err, sizeof(err));
        if (!snap) {
            gw_logf(GW_LOG_ERROR, "invalid snapshot", "{s:s}", "error", err);
            gw_tls_free(m.cfg.tls);
            return 2;
        }
        version = snap->version;
        source = snap->source;
        dp_snapshot_publish(snap);
    } else if (m.cfg.snapshot_cache) {
        /* Serve the last good snapshot at once; the Watch replaces it. */
        int missing = 0, stale = 0;
        struct dp_snapshot *snap = dp_snapcache_load(
            m.cfg.snapshot_cache, m.cfg.has_cache_key ? m.cfg.cache_key : NULL,
            (int64_t)m.cfg.snapshot_cache_max_age_ms, &missing, &stale, err, sizeof(err));
        if (snap) {
            version = snap->version;
            source = snap->source;
            dp_snapshot_publish(snap);
            gw_logf(GW_LOG_INFO, "snapshot loaded", "{s:I,s:s}", "version", (json_int_t)version,
                    "source", source);
        } else if (stale) {
            gw_logf(GW_LOG_WARN,
                    "snapshot cache too old; not serving it, waiting for the control plane",
                    "{s:s,s:I}", "error", err, "max_age_ms",
                    (json_int_t)m.cfg.snapshot_cache_max_age_ms);
        } else if (missing) {
            gw_log(GW_LOG_INFO,
                   "no snapshot cache yet: not ready until the control plane pushes one", NULL);
        } else {
            gw_logf(GW_LOG_WARN, "snapshot cache unusable; waiting for the control plane", "{s:s}",
                    "error", err);
        }
    }
    dp_metrics_controlplane(m.cfg.control_plane != NULL);
    if (m.cfg.control_plane) {
        /* The ledger travels to the control plane; in file mode there is
         * none to take it, and the attempt log lines are the record. */
        if (!m.cfg.ledger_spool)
            gw_log(GW_LOG_WARN,
                   "ledger: no --ledger-spool: rows not yet acknowledged are held in memory and "
                   "lost if the process dies",
                   NULL);
        if (dp_ledger_init(m.cfg.ledger_spool, m.cfg.ledger_spool_max_bytes) != GW_OK)
            gw_log(GW_LOG_ERROR, "ledger: the spool is unusable; rows are held in memory", NULL);
        if (!(cp = dp_cpclient_start(&m.cfg, version)))
            return 1;
    }

    m.nworkers = m.cfg.threads;
    m.workers = calloc((size_t)m.nworkers, sizeof(*m.workers));
    if (!m.workers)
        return 1;
    /* One breaker per target for the whole process: every worker's
     * outcomes count toward the same verdict. */
    struct dp_breaker_cfg bc = {.open_us = (int64_t)m.cfg.breaker_open_ms * 1000, .jitter_pct = 20};
    struct dp_breakers *breakers = dp_breakers_new(&bc);
    if (!breakers)
        return 1;
    /* Each state change is logged (as by default), sets the gauges and goes
     * to the control plane in the next outcome summary (the fleet view). */
    dp_breakers_on_change(breakers, on_breaker_change, NULL);
    /* One response cache for the process, shared by every worker (sharded
     * locks); off with --cache-max-mb 0, and used only by routes that turn
     * it on. */
    struct dp_cache *cache = NULL;
    if (m.cfg.cache_max_bytes) {
        struct dp_cache_cfg cc = {.max_bytes = m.cfg.cache_max_bytes,
                                  .max_entry_bytes =
                                      m.cfg.cache_max_entry_bytes + DP_CACHE_ENTRY_OVERHEAD};
        if (!(cache = dp_cache_new(&cc)))
            return 1;
        dp_metrics_set_cache(cache);
    }
    int port = m.cfg.port;
    for (int i = 0; i < m.nworkers; i++) {
        /* The first socket resolves port 0; the rest join it. */
        int fd = gw_http_listen(m.cfg.host, port, 1, &port);
        if (fd < 0) {
            gw_logf(GW_LOG_ERROR, "cannot listen", "{s:s,s:i}", "host", m.cfg.host, "port",
                    m.cfg.port);
            return 1;
        }
        if (dp_worker_init(&m.workers[i], i, &m.cfg, fd) != GW_OK) {
            gw_logf(GW_LOG_ERROR, "cannot start worker", "{s:i}", "worker", i);
            return 1;
        }
        m.workers[i].loop.breakers = breakers;
        m.workers[i].loop.cache = cache;
        m.workers[i].loop.cache_max_entry = m.cfg.cache_max_entry_bytes;
        /* The judge's queue, split between the workers (at least one each). */
        m.workers[i].loop.judge_queue_max =
            m.cfg.judge_queue ? (m.cfg.judge_queue + (size_t)m.nworkers - 1) / (size_t)m.nworkers
                              : 0;
        m.workers[i].loop.judge_concurrency =
            (m.cfg.judge_concurrency + (size_t)m.nworkers - 1) / (size_t)m.nworkers;
    }
    for (int i = 0; i < m.nworkers; i++)
        if (dp_worker_start(&m.workers[i]) != GW_OK) {
            gw_logf(GW_LOG_ERROR, "cannot start worker thread", "{s:i}", "worker", i);
            return 1;
        }

    struct event_base *base = event_base_new();
    struct event *term = evsignal_new(base, SIGTERM, on_term, &m);
    struct event *intr = evsignal_new(base, SIGINT, on_term, &m);
    struct event *hup = evsignal_new(base, SIGHUP, on_hup, &m);
    m.delay = evtimer_new(base, start_drain, &m);
    if (!base || !term || !intr || !hup || !m.delay)
        return 1;
    event_add(term, NULL);
    event_add(intr, NULL);
    event_add(hup, NULL);
    gw_log_line_fd(1, json_pack("{s:s,s:s,s:i,s:i,s:I,s:s,s:b}", "msg", "listening", "host",
                                m.cfg.host, "port", port, "threads", m.nworkers, "snapshot_version",
                                (json_int_t)version, "source", source, "tls", m.cfg.tls != NULL));

    /* The signal loop runs until every worker has drained and exited. */
    while (!m.draining)
        event_base_loop(base, EVLOOP_ONCE);
    for (int i = 0; i < m.nworkers; i++)
        dp_worker_join(&m.workers[i]);
    dp_cpclient_flush(cp, m.cfg.ledger_flush_timeout_ms);
    dp_cpclient_stop(cp);
    dp_ledger_shutdown();
    for (int i = 0; i < m.nworkers; i++)
        dp_worker_destroy(&m.workers[i]);
    free(m.workers);
    gw_otel_free(m.cfg.otel); /* what the workers handed over is exported first */
    dp_breakers_free(breakers);
    dp_metrics_set_cache(NULL);
    dp_cache_free(cache);
    event_free(term);
    event_free(intr);
    event_free(hup);
    event_free(m.delay);
    event_base_free(base);
    dp_snapshot_publish(NULL);
    gw_tls_free(m.cfg.tls);
    dp_metrics_shutdown();
    curl_global_cleanup();
    gw_log(GW_LOG_INFO, "stopped", NULL);
    return 0;
}
