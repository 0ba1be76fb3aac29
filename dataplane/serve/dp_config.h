/* Data-plane settings from the command line and the environment. */
#ifndef DP_CONFIG_H
#define DP_CONFIG_H

#include <stddef.h>

#include "dp_snapcache.h"

struct gw_tls;
struct gw_otel;

struct dp_config {
    const char *snapshot_path;      /* file mode */
    const char *control_plane;      /* HOST:PORT of the control plane's gRPC (Watch) */
    const char *snapshot_cache;     /* the last good pushed snapshot, on disk */
    const char *control_plane_ca;   /* PEM roots: TLS to the control plane (else plaintext) */
    const char *control_plane_cert; /* PEM client certificate chain (with a CA) */
    const char *control_plane_key;  /* and its key */
    const char *fleet_token;        /* LLMGW_FLEET_TOKEN (environment only): sent on every call */
    const char *tls_cert, *tls_key; /* TLS on the listener (PEM); NULL: plaintext */
    struct gw_tls *tls;             /* built from them by main (reloaded on SIGHUP) */
    struct gw_otel *otel;           /* the trace exporter (OTEL_*, main), or NULL: off */
    char replica_id[128];           /* how the control plane names this replica */
    unsigned char cache_key[DP_CACHE_KEY_LEN]; /* LLMGW_CACHE_KEY */
    int has_cache_key;
    char host[256];
    int port;
    int threads;
    size_t max_body_bytes;
    /* A media upload's file part (docs/media.md): transcriptions and
     * translations, image edits (each image); their bodies may be this
     * plus 1 MiB of other fields. */
    size_t max_audio_upload, max_image_upload;
    long drain_timeout_ms;
    int head_timeout_ms;        /* a request head's deadline from its first byte */
    int client_idle_timeout_ms; /* keep-alive idle close; answers not taken */
    int half_close_answers;     /* --client-half-close answer (default: cancel) */
    size_t max_connections;     /* client connections per process; 0: from the open-file limit */
    long drain_delay_ms;        /* on SIGTERM: unready but still serving, before the drain */
    const char *access_log;
    long retry_base_ms;   /* first retry's backoff; doubles per retry, jittered */
    long breaker_open_ms; /* a breaker's first open interval */
    /* The response cache (docs/cache.md): its whole size (0: off) and its
     * largest entry. */
    size_t cache_max_bytes, cache_max_entry_bytes;
    /* Sampled answers waiting for their judge (docs/guardrails.md), across
     * the workers; past it a sample is dropped and counted. 0: no judge. */
    size_t judge_queue;
    /* Judge calls in flight at once, across the workers (at least one each). */
    size_t judge_concurrency;

    /* The ledger's spool (docs/ledger.md): rows not yet acknowledged by the
     * control plane, on disk. NULL: held in memory only (lost on restart). */
    const char *ledger_spool;
    size_t ledger_spool_max_bytes;
    long ledger_flush_timeout_ms; /* at exit, the wait for acknowledgements */

    /* A snapshot cache received longer ago is not served at start; 0: no limit. */
    long long snapshot_cache_max_age_ms;

    /* --check-config: validate what a start would, print a summary, exit
     * (main.c); nothing is opened but a --snapshot file, nothing is dialled. */
    int check_config;
};

/* Fills cfg from defaults, then LLMGW_* variables, then argv. Returns 0, or
 * GW_EINVAL after printing a message naming the flag; 1 after --help. */
int dp_config_parse(struct dp_config *cfg, int argc, char **argv);

#endif
