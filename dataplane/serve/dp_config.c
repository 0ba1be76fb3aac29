#include "dp_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gw_codec.h"
#include "gw_error.h"
#include "gw_flags.h"

static const char usage[] =
    "usage: llmgw-dataplane (--snapshot FILE | --control-plane HOST:PORT[,HOST:PORT...]\n"
    "                       [--snapshot-cache FILE] [--snapshot-cache-max-age-ms N]\n"
    "                       [--replica-id ID] [--control-plane-ca "
    "PEM [--control-plane-cert PEM\n"
    "                       --control-plane-key PEM]]) [--listen HOST:PORT] [--threads N]\n"
    "                       [--tls-cert PEM --tls-key PEM]\n"
    "                       [--max-body-bytes N] [--head-timeout-ms N] [--drain-timeout-ms N]\n"
    "                       [--max-audio-upload-bytes N] [--max-image-upload-bytes N]\n"
    "                       [--client-idle-timeout-ms N] [--max-connections N]\n"
    "                       [--client-half-close answer|cancel]\n"
    "                       [--drain-delay-ms N]\n"
    "                       [--access-log FILE|-]\n"
    "                       [--retry-base-ms N] [--breaker-open-ms N]\n"
    "                       [--cache-max-mb N] [--cache-max-entry-kb N]\n"
    "                       [--judge-queue N] [--judge-concurrency N]\n"
    "                       [--ledger-spool DIR] [--ledger-spool-max-mb N] "
    "[--ledger-flush-timeout-ms N]\n"
    "                       [--check-config]\n"
    "Each flag can also come from the environment: LLMGW_SNAPSHOT, LLMGW_CONTROL_PLANE,\n"
    "LLMGW_SNAPSHOT_CACHE, LLMGW_SNAPSHOT_CACHE_MAX_AGE_MS, LLMGW_REPLICA_ID, "
    "LLMGW_CONTROL_PLANE_CA, LLMGW_CONTROL_PLANE_CERT,\n"
    "LLMGW_CONTROL_PLANE_KEY, LLMGW_TLS_CERT, LLMGW_TLS_KEY, LLMGW_LISTEN, LLMGW_THREADS,\n"
    "LLMGW_MAX_BODY_BYTES, LLMGW_MAX_AUDIO_UPLOAD_BYTES, LLMGW_MAX_IMAGE_UPLOAD_BYTES,\n"
    "LLMGW_DRAIN_TIMEOUT_MS, LLMGW_ACCESS_LOG, LLMGW_RETRY_BASE_MS, LLMGW_BREAKER_OPEN_MS,\n"
    "LLMGW_LEDGER_SPOOL, LLMGW_LEDGER_SPOOL_MAX_MB, LLMGW_LEDGER_FLUSH_TIMEOUT_MS.\n"
    "LLMGW_CACHE_KEY (environment only: 64 hex digits or base64 of 32 bytes) encrypts the\n"
    "credentials in the snapshot cache; without it they are left out of it.\n"
    "LLMGW_FLEET_TOKEN (environment only) is presented to the control plane on every call\n"
    "(\"authorization: Bearer\"); the control plane may require it.\n"
    "--check-config validates the flags and the environment as a start would (and the\n"
    "--snapshot file), prints a summary as one JSON line and exits 0; or exits 2 naming\n"
    "the flag. It connects nowhere.\n";

#define PROG "llmgw-dataplane"

/* --control-plane: HOST:PORT, or several separated by commas (at most 16),
 * tried in turn when one cannot be reached (docs/dataplane.md). */
static int check_control_plane(const char *v)
{
    int n = 0;
    const char *p = v;
    do {
        size_t len = strcspn(p, ",");
        const char *colon = NULL;
        for (const char *q = p; q < p + len; q++)
            if (*q == ':')
                colon = q;
        if (!colon || colon == p || colon + 1 == p + len || ++n > 16) {
            fprintf(stderr,
                    "llmgw-dataplane: --control-plane: '%s' is not HOST:PORT or a comma-separated "
                    "list of at most 16 of them\n",
                    v);
            return GW_EINVAL;
        }
        p += len;
    } while (*p++ == ',');
    return GW_OK;
}

static int apply(void *cfg, const char *flag, const char *v)
{
    struct dp_config *c = cfg;
    long long n;
    if (strcmp(flag, "--snapshot") == 0)
        c->snapshot_path = v;
    else if (strcmp(flag, "--control-plane") == 0) {
        if (check_control_plane(v) != GW_OK)
            return GW_EINVAL;
        c->control_plane = v;
    } else if (strcmp(flag, "--snapshot-cache") == 0)
        c->snapshot_cache = v;
    else if (strcmp(flag, "--snapshot-cache-max-age-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 100LL * 365 * 86400 * 1000, &n))
            return GW_EINVAL;
        c->snapshot_cache_max_age_ms = n;
    } else if (strcmp(flag, "--control-plane-ca") == 0)
        c->control_plane_ca = v;
    else if (strcmp(flag, "--control-plane-cert") == 0)
        c->control_plane_cert = v;
    else if (strcmp(flag, "--control-plane-key") == 0)
        c->control_plane_key = v;
    else if (strcmp(flag, "--tls-cert") == 0)
        c->tls_cert = *v ? v : NULL;
    else if (strcmp(flag, "--tls-key") == 0)
        c->tls_key = *v ? v : NULL;
    else if (strcmp(flag, "--replica-id") == 0) {
        size_t idlen = strlen(v);
        if (idlen == 0 || idlen >= sizeof(c->replica_id) || v[strcspn(v, " \t\r\n")]) {
            fprintf(stderr, "llmgw-dataplane: --replica-id: 1 to %zu characters, no spaces\n",
                    sizeof(c->replica_id) - 1);
            return GW_EINVAL;
        }
        memcpy(c->replica_id, v, idlen + 1);
    } else if (strcmp(flag, "--listen") == 0)
        return gw_flags_hostport(PROG, flag, v, c->host, sizeof(c->host), &c->port);
    else if (strcmp(flag, "--threads") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 256, &n))
            return GW_EINVAL;
        c->threads = (int)n;
    } else if (strcmp(flag, "--max-body-bytes") == 0) {
        if (gw_flags_num(PROG, flag, v, 1024, 1LL << 30, &n))
            return GW_EINVAL;
        c->max_body_bytes = (size_t)n;
    } else if (strcmp(flag, "--max-audio-upload-bytes") == 0 ||
               strcmp(flag, "--max-image-upload-bytes") == 0) {
        if (gw_flags_num(PROG, flag, v, 1024, 1LL << 30, &n))
            return GW_EINVAL;
        *(flag[6] == 'a' ? &c->max_audio_upload : &c->max_image_upload) = (size_t)n;
    } else if (strcmp(flag, "--client-half-close") == 0) {
        if (strcmp(v, "answer") != 0 && strcmp(v, "cancel") != 0) {
            fprintf(stderr, PROG ": --client-half-close: 'answer' or 'cancel'\n");
            return GW_EINVAL;
        }
        c->half_close_answers = v[0] == 'a';
    } else if (strcmp(flag, "--max-connections") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 100000000, &n))
            return GW_EINVAL;
        c->max_connections = (size_t)n;
    } else if (strcmp(flag, "--client-idle-timeout-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 100, 3600000, &n))
            return GW_EINVAL;
        c->client_idle_timeout_ms = (int)n;
    } else if (strcmp(flag, "--head-timeout-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 100, 600000, &n))
            return GW_EINVAL;
        c->head_timeout_ms = (int)n;
    } else if (strcmp(flag, "--drain-timeout-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 3600 * 1000, &n))
            return GW_EINVAL;
        c->drain_timeout_ms = (long)n;
    } else if (strcmp(flag, "--drain-delay-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 3600 * 1000, &n))
            return GW_EINVAL;
        c->drain_delay_ms = (long)n;
    } else if (strcmp(flag, "--retry-base-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 60000, &n))
            return GW_EINVAL;
        c->retry_base_ms = (long)n;
    } else if (strcmp(flag, "--breaker-open-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 10, 3600 * 1000, &n))
            return GW_EINVAL;
        c->breaker_open_ms = (long)n;
    } else if (strcmp(flag, "--ledger-spool") == 0)
        c->ledger_spool = v;
    else if (strcmp(flag, "--ledger-spool-max-mb") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 1LL << 20, &n))
            return GW_EINVAL;
        c->ledger_spool_max_bytes = (size_t)n << 20;
    } else if (strcmp(flag, "--ledger-flush-timeout-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 600 * 1000, &n))
            return GW_EINVAL;
        c->ledger_flush_timeout_ms = (long)n;
    } else if (strcmp(flag, "--cache-max-mb") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 1LL << 20, &n))
            return GW_EINVAL;
        c->cache_max_bytes = (size_t)n << 20;
    } else if (strcmp(flag, "--cache-max-entry-kb") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 1LL << 20, &n))
            return GW_EINVAL;
        c->cache_max_entry_bytes = (size_t)n << 10;
    } else if (strcmp(flag, "--judge-queue") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 1000000, &n))
            return GW_EINVAL;
        c->judge_queue = (size_t)n;
    } else if (strcmp(flag, "--judge-concurrency") == 0) {
        if (gw_flags_num(PROG, flag, v, 1, 10000, &n))
            return GW_EINVAL;
        c->judge_concurrency = (size_t)n;
    } else if (strcmp(flag, "--access-log") == 0)
        c->access_log = v;
    else if (strcmp(flag, "--check-config") == 0)
        c->check_config = strcmp(v, "0") != 0;
    else {
        fprintf(stderr, "llmgw-dataplane: unknown flag '%s'\n%s", flag, usage);
        return GW_EINVAL;
    }
    return GW_OK;
}

int dp_config_parse(struct dp_config *c, int argc, char **argv)
{
    static const char *const env[][2] = {
        {"LLMGW_SNAPSHOT", "--snapshot"},
        {"LLMGW_CONTROL_PLANE", "--control-plane"},
        {"LLMGW_SNAPSHOT_CACHE", "--snapshot-cache"},
        {"LLMGW_SNAPSHOT_CACHE_MAX_AGE_MS", "--snapshot-cache-max-age-ms"},
        {"LLMGW_REPLICA_ID", "--replica-id"},
        {"LLMGW_CONTROL_PLANE_CA", "--control-plane-ca"},
        {"LLMGW_CONTROL_PLANE_CERT", "--control-plane-cert"},
        {"LLMGW_CONTROL_PLANE_KEY", "--control-plane-key"},
        {"LLMGW_TLS_CERT", "--tls-cert"},
        {"LLMGW_TLS_KEY", "--tls-key"},
        {"LLMGW_LISTEN", "--listen"},
        {"LLMGW_THREADS", "--threads"},
        {"LLMGW_MAX_BODY_BYTES", "--max-body-bytes"},
        {"LLMGW_MAX_AUDIO_UPLOAD_BYTES", "--max-audio-upload-bytes"},
        {"LLMGW_MAX_IMAGE_UPLOAD_BYTES", "--max-image-upload-bytes"},
        {"LLMGW_HEAD_TIMEOUT_MS", "--head-timeout-ms"},
        {"LLMGW_CLIENT_IDLE_TIMEOUT_MS", "--client-idle-timeout-ms"},
        {"LLMGW_MAX_CONNECTIONS", "--max-connections"},
        {"LLMGW_CLIENT_HALF_CLOSE", "--client-half-close"},
        {"LLMGW_DRAIN_TIMEOUT_MS", "--drain-timeout-ms"},
        {"LLMGW_DRAIN_DELAY_MS", "--drain-delay-ms"},
        {"LLMGW_ACCESS_LOG", "--access-log"},
        {"LLMGW_RETRY_BASE_MS", "--retry-base-ms"},
        {"LLMGW_BREAKER_OPEN_MS", "--breaker-open-ms"},
        {"LLMGW_LEDGER_SPOOL", "--ledger-spool"},
        {"LLMGW_LEDGER_SPOOL_MAX_MB", "--ledger-spool-max-mb"},
        {"LLMGW_LEDGER_FLUSH_TIMEOUT_MS", "--ledger-flush-timeout-ms"},
        {"LLMGW_CACHE_MAX_MB", "--cache-max-mb"},
        {"LLMGW_CACHE_MAX_ENTRY_KB", "--cache-max-entry-kb"},
        {"LLMGW_JUDGE_QUEUE", "--judge-queue"},
        {"LLMGW_JUDGE_CONCURRENCY", "--judge-concurrency"},
    };
    memset(c, 0, sizeof(*c));
    memcpy(c->host, "127.0.0.1", 10);
    c->port = 8080;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    c->threads = cores > 0 ? (int)cores : 1;
    c->max_body_bytes = 4u << 20;
    c->max_audio_upload = c->max_image_upload = (size_t)25 << 20;
    c->drain_timeout_ms = 30000;
    c->head_timeout_ms = 10000;
    c->client_idle_timeout_ms = 60000;
    c->access_log = "-";
    c->retry_base_ms = 200;
    c->breaker_open_ms = 5000;
    c->snapshot_cache_max_age_ms = 7LL * 24 * 3600 * 1000;
    c->ledger_spool_max_bytes = (size_t)256 << 20;
    c->ledger_flush_timeout_ms = 5000;
    c->cache_max_bytes = (size_t)64 << 20;
    c->cache_max_entry_bytes = (size_t)1 << 20;
    c->judge_queue = 1000;
    c->judge_concurrency = 16;
    static const char *const switches[] = {"--check-config", NULL};
    struct gw_flags f = {.prog = PROG,
                         .usage = usage,
                         .env = env,
                         .nenv = sizeof(env) / sizeof(env[0]),
                         .switches = switches,
                         .apply = apply,
                         .cfg = c};
    int rc = gw_flags_parse(&f, argc, argv, 1);
    if (rc)
        return rc;
    if (c->snapshot_path && c->control_plane) {
        fprintf(stderr,
                "llmgw-dataplane: --snapshot (LLMGW_SNAPSHOT) and --control-plane "
                "(LLMGW_CONTROL_PLANE) are mutually exclusive: a snapshot comes from a file or "
                "from the control plane, not both\n");
        return GW_EINVAL;
    }
    if (!c->snapshot_path && !c->control_plane) {
        fprintf(stderr,
                "llmgw-dataplane: --snapshot FILE or --control-plane HOST:PORT is "
                "required\n%s",
                usage);
        return GW_EINVAL;
    }
    if (c->snapshot_path && c->snapshot_cache) {
        fprintf(stderr, "llmgw-dataplane: --snapshot-cache only applies with --control-plane\n");
        return GW_EINVAL;
    }
    if ((c->control_plane_cert != NULL) != (c->control_plane_key != NULL) ||
        (c->control_plane_cert && !c->control_plane_ca)) {
        fprintf(stderr, "llmgw-dataplane: --control-plane-cert and --control-plane-key go "
                        "together, with --control-plane-ca\n");
        return GW_EINVAL;
    }
    if (!c->tls_cert != !c->tls_key) {
        fprintf(stderr, "llmgw-dataplane: --tls-cert and --tls-key go together (the listener's "
                        "certificate chain and its key, PEM)\n");
        return GW_EINVAL;
    }
    const char *ft = getenv("LLMGW_FLEET_TOKEN");
    c->fleet_token = ft && *ft ? ft : NULL;
    if (c->fleet_token && (strlen(c->fleet_token) > 512 || strpbrk(c->fleet_token, "\r\n"))) {
        fprintf(stderr, "llmgw-dataplane: LLMGW_FLEET_TOKEN: at most 512 characters, one line\n");
        return GW_EINVAL;
    }
    const char *ck = getenv("LLMGW_CACHE_KEY");
    if (ck && *ck) {
        if (gw_key32_parse(ck, c->cache_key) != GW_OK) {
            fprintf(stderr, "llmgw-dataplane: LLMGW_CACHE_KEY: must be 32 bytes written as 64 hex "
                            "digits or as 44 characters of standard base64\n");
            return GW_EINVAL;
        }
        c->has_cache_key = 1;
    }
    if (!c->replica_id[0]) {
        char host[64] = "dataplane";
        if (gethostname(host, sizeof(host)) != 0)
            memcpy(host, "dataplane", 10);
        host[sizeof(host) - 1] = '\0';
        snprintf(c->replica_id, sizeof(c->replica_id), "%s-%ld", host, (long)getpid());
    }
    return GW_OK;
}
