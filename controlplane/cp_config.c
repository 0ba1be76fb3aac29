#include "cp_config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cp_etcd.h"
#include "cp_fetch.h"
#include "gw_error.h"
#include "gw_flags.h"

static const char usage[] =
    "usage: llmgw-controlplane [serve|migrate|rotate-master-key] --database-url CONNINFO\n"
    "                          [--admin-listen HOST:PORT] [--grpc-listen HOST:PORT]\n"
    "                          [--admin-tls-cert PEM --admin-tls-key PEM]\n"
    "                          (--grpc-tls-cert PEM --grpc-tls-key PEM\n"
    "                           (--grpc-tls-client-ca PEM | --grpc-tls-no-client-auth)\n"
    "                          | --grpc-insecure)\n"
    "                          [--snapshot-poll-ms N] [--secret-cache-ttl-ms N]\n"
    "                          [--etcd-endpoints URL,...] [--etcd-lease-ttl-s N] [--replica-id "
    "ID]\n"
    "                          [--etcd-ca PEM] [--etcd-cert PEM --etcd-key PEM]\n"
    "                          [--lease-grace-s N] [--catalog-sync-url URL "
    "[--catalog-sync-interval-s N]]\n"
    "                          [--catalog-fetch-allow http,loopback,private,link-local]\n"
    "                          [--console-dir DIR]\n"
    "       llmgw-controlplane import-catalog --database-url CONNINFO (--file PATH | --url URL)\n"
    "       (any command) --check-config: validate the flags and the environment as a start\n"
    "           would, print a summary as one JSON line and exit 0; or exit 2 naming the\n"
    "           flag. It connects to nothing (no database, no etcd)\n"
    "  serve    (default) apply pending migrations, then serve the admin API and\n"
    "           push snapshots to data planes over gRPC\n"
    "  migrate  apply pending migrations and exit (0 on success, 1 on failure)\n"
    "  rotate-master-key  rewrap every builtin secret from LLMGW_MASTER_KEY (old)\n"
    "           to LLMGW_NEW_MASTER_KEY (new) in one transaction; exit 0 or 1\n"
    "  import-catalog  import a LiteLLM model_prices_and_context_window.json (a\n"
    "           file or an https URL) into the model catalog in one transaction;\n"
    "           prints the counts and rejected entries as JSON; exit 0 or 1\n"
    "Each flag can also come from the environment: LLMGW_DATABASE_URL,\n"
    "LLMGW_ADMIN_LISTEN (default 127.0.0.1:8081), LLMGW_GRPC_LISTEN (default\n"
    "127.0.0.1:8082), LLMGW_GRPC_TLS_CERT, LLMGW_GRPC_TLS_KEY,\n"
    "LLMGW_GRPC_TLS_CLIENT_CA, LLMGW_GRPC_TLS_NO_CLIENT_AUTH=1,\n"
    "LLMGW_GRPC_INSECURE=1, LLMGW_SNAPSHOT_POLL_MS (default 30000),\n"
    "LLMGW_SECRET_CACHE_TTL_MS (default 300000), LLMGW_ETCD_ENDPOINTS (none: this\n"
    "replica leads itself), LLMGW_ETCD_LEASE_TTL_S (default 5), LLMGW_REPLICA_ID\n"
    "(default <hostname>-<pid>), LLMGW_LEASE_GRACE_S (default 3600: how long an\n"
    "expired budget lease its replica has not settled still counts as held),\n"
    "LLMGW_CONSOLE_DIR (none: the web console at /console/ serves the assets\n"
    "built into the binary; a folder: the same names from disk, for developing).\n"
    "The bootstrap admin token comes from "
    "LLMGW_ADMIN_TOKEN\n"
    "only; the master key from LLMGW_MASTER_KEY only; the fleet token every data\n"
    "plane presents on the gRPC port from LLMGW_FLEET_TOKEN only (required with\n"
    "--grpc-tls-no-client-auth, optional otherwise).\n";

static int parse_bool(int *out, const char *flag, const char *v)
{
    if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes"))
        *out = 1;
    else if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "no"))
        *out = 0;
    else {
        fprintf(stderr, "llmgw-controlplane: %s: '%s' is not 1/0, true/false or yes/no\n", flag, v);
        return GW_EINVAL;
    }
    return GW_OK;
}

#define PROG "llmgw-controlplane"

/* A secret from the environment only: NULL when unset or empty, GW_EINVAL
 * (after a message) when shorter than CP_MIN_ADMIN_TOKEN. */
static int env_token(const char *var, const char *example, const char **out)
{
    const char *v = getenv(var);
    *out = v && *v ? v : NULL;
    if (*out && strlen(*out) < CP_MIN_ADMIN_TOKEN) {
        fprintf(stderr,
                PROG ": %s must be at least %d characters (e.g. \"%s$(openssl rand -hex 24)\")\n",
                var, CP_MIN_ADMIN_TOKEN, example);
        return GW_EINVAL;
    }
    return GW_OK;
}

static int apply(void *cfg, const char *flag, const char *v)
{
    struct cp_config *c = cfg;
    long long n;
    if (strcmp(flag, "--database-url") == 0)
        c->database_url = v;
    else if (strcmp(flag, "--grpc-tls-cert") == 0)
        c->grpc_tls_cert = v;
    else if (strcmp(flag, "--grpc-tls-key") == 0)
        c->grpc_tls_key = v;
    else if (strcmp(flag, "--grpc-tls-client-ca") == 0)
        c->grpc_tls_client_ca = v;
    else if (strcmp(flag, "--catalog-sync-url") == 0) {
        if (strncmp(v, "http://", 7) != 0 && strncmp(v, "https://", 8) != 0) {
            fprintf(stderr, PROG ": --catalog-sync-url: must be an https:// URL\n");
            return GW_EINVAL;
        }
        c->catalog_sync_url = v;
    } else if (strcmp(flag, "--catalog-fetch-allow") == 0) {
        char why[128];
        if (cp_fetch_parse_allow(v, &c->catalog_fetch_allow, why, sizeof(why)) != GW_OK) {
            fprintf(stderr, PROG ": --catalog-fetch-allow: %s\n", why);
            return GW_EINVAL;
        }
    } else if (strcmp(flag, "--catalog-sync-interval-s") == 0) {
        if (gw_flags_num(PROG, flag, v, 60, 30LL * 86400, &n))
            return GW_EINVAL;
        c->catalog_sync_interval_s = (long)n;
    } else if (strcmp(flag, "--file") == 0 || strcmp(flag, "--url") == 0) {
        if (c->command != CP_CMD_IMPORT_CATALOG) {
            fprintf(stderr, PROG ": %s belongs to the import-catalog command\n%s", flag, usage);
            return GW_EINVAL;
        }
        *(flag[2] == 'f' ? &c->import_file : &c->import_url) = v;
    } else if (strcmp(flag, "--grpc-insecure") == 0)
        return parse_bool(&c->grpc_insecure, flag, v);
    else if (strcmp(flag, "--grpc-tls-no-client-auth") == 0)
        return parse_bool(&c->grpc_tls_no_client_auth, flag, v);
    else if (strcmp(flag, "--check-config") == 0)
        return parse_bool(&c->check_config, flag, v);
    else if (strcmp(flag, "--snapshot-poll-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 100, 3600000, &n))
            return GW_EINVAL;
        c->snapshot_poll_ms = (long)n;
    } else if (strcmp(flag, "--secret-cache-ttl-ms") == 0) {
        if (gw_flags_num(PROG, flag, v, 100, 86400000, &n))
            return GW_EINVAL;
        c->secret_cache_ttl_ms = (long)n;
    } else if (strcmp(flag, "--etcd-endpoints") == 0) {
        c->etcd_endpoints = *v ? v : NULL;
    } else if (strcmp(flag, "--admin-tls-cert") == 0) {
        c->admin_tls_cert = *v ? v : NULL;
    } else if (strcmp(flag, "--admin-tls-key") == 0) {
        c->admin_tls_key = *v ? v : NULL;
    } else if (strcmp(flag, "--etcd-ca") == 0) {
        c->etcd_ca = *v ? v : NULL;
    } else if (strcmp(flag, "--etcd-cert") == 0) {
        c->etcd_cert = *v ? v : NULL;
    } else if (strcmp(flag, "--etcd-key") == 0) {
        c->etcd_key = *v ? v : NULL;
    } else if (strcmp(flag, "--etcd-lease-ttl-s") == 0) {
        if (gw_flags_num(PROG, flag, v, 3, 600, &n))
            return GW_EINVAL;
        c->etcd_lease_ttl_s = (int)n;
    } else if (strcmp(flag, "--lease-grace-s") == 0) {
        if (gw_flags_num(PROG, flag, v, 0, 31LL * 86400, &n))
            return GW_EINVAL;
        c->lease_grace_s = n;
    } else if (strcmp(flag, "--replica-id") == 0) {
        if (!cp_etcd_name_ok(v)) {
            fprintf(stderr, PROG ": --replica-id: 1 to 63 characters of A-Z a-z 0-9 . _ : -\n");
            return GW_EINVAL;
        }
        snprintf(c->replica_id, sizeof(c->replica_id), "%s", v);
    } else if (strcmp(flag, "--console-dir") == 0) {
        struct stat st;
        if (!*v || stat(v, &st) != 0 || !S_ISDIR(st.st_mode)) {
            fprintf(stderr, PROG ": --console-dir: '%s' is not a folder\n", v);
            return GW_EINVAL;
        }
        c->console_dir = v;
    } else if (strcmp(flag, "--admin-listen") == 0)
        return gw_flags_hostport(PROG, flag, v, c->admin.host, sizeof(c->admin.host),
                                 &c->admin.port);
    else if (strcmp(flag, "--grpc-listen") == 0)
        return gw_flags_hostport(PROG, flag, v, c->grpc.host, sizeof(c->grpc.host), &c->grpc.port);
    else if (strcmp(flag, "--admin-token") == 0) {
        /* A flag would show the token in ps(1) and shell history. */
        fprintf(stderr, PROG ": the admin token is read from LLMGW_ADMIN_TOKEN only, never "
                             "from a flag\n");
        return GW_EINVAL;
    } else {
        fprintf(stderr, "llmgw-controlplane: unknown flag '%s'\n%s", flag, usage);
        return GW_EINVAL;
    }
    return GW_OK;
}

int cp_config_parse(struct cp_config *c, int argc, char **argv)
{
    static const char *const env[][2] = {
        {"LLMGW_DATABASE_URL", "--database-url"},
        {"LLMGW_ADMIN_LISTEN", "--admin-listen"},
        {"LLMGW_GRPC_LISTEN", "--grpc-listen"},
        {"LLMGW_GRPC_TLS_CERT", "--grpc-tls-cert"},
        {"LLMGW_GRPC_TLS_KEY", "--grpc-tls-key"},
        {"LLMGW_GRPC_TLS_CLIENT_CA", "--grpc-tls-client-ca"},
        {"LLMGW_GRPC_TLS_NO_CLIENT_AUTH", "--grpc-tls-no-client-auth"},
        {"LLMGW_GRPC_INSECURE", "--grpc-insecure"},
        {"LLMGW_SNAPSHOT_POLL_MS", "--snapshot-poll-ms"},
        {"LLMGW_SECRET_CACHE_TTL_MS", "--secret-cache-ttl-ms"},
        {"LLMGW_ETCD_ENDPOINTS", "--etcd-endpoints"},
        {"LLMGW_ETCD_LEASE_TTL_S", "--etcd-lease-ttl-s"},
        {"LLMGW_ADMIN_TLS_CERT", "--admin-tls-cert"},
        {"LLMGW_ADMIN_TLS_KEY", "--admin-tls-key"},
        {"LLMGW_ETCD_CA", "--etcd-ca"},
        {"LLMGW_ETCD_CERT", "--etcd-cert"},
        {"LLMGW_ETCD_KEY", "--etcd-key"},
        {"LLMGW_CATALOG_SYNC_URL", "--catalog-sync-url"},
        {"LLMGW_CATALOG_SYNC_INTERVAL_S", "--catalog-sync-interval-s"},
        {"LLMGW_CATALOG_FETCH_ALLOW", "--catalog-fetch-allow"},
        {"LLMGW_REPLICA_ID", "--replica-id"},
        {"LLMGW_LEASE_GRACE_S", "--lease-grace-s"},
        {"LLMGW_CONSOLE_DIR", "--console-dir"},
    };
    memset(c, 0, sizeof(*c));
    c->command = CP_CMD_SERVE;
    memcpy(c->admin.host, "127.0.0.1", 10);
    c->admin.port = 8081;
    memcpy(c->grpc.host, "127.0.0.1", 10);
    c->grpc.port = 8082;
    c->snapshot_poll_ms = 30000;
    c->secret_cache_ttl_ms = 300000;
    c->etcd_lease_ttl_s = 5;
    c->lease_grace_s = 3600;
    c->catalog_sync_interval_s = 86400;
    /* The bootstrap token can do anything, from anywhere that reaches the
     * admin port, and the fleet token reads every credential and writes
     * ledger rows: one that can be guessed is refused at start. */
    if (env_token("LLMGW_ADMIN_TOKEN", "llmgw-admin-", &c->admin_token) != GW_OK ||
        env_token("LLMGW_FLEET_TOKEN", "llmgw-fleet-", &c->fleet_token) != GW_OK)
        return GW_EINVAL;
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        if (strcmp(argv[i], "migrate") == 0)
            c->command = CP_CMD_MIGRATE;
        else if (strcmp(argv[i], "rotate-master-key") == 0)
            c->command = CP_CMD_ROTATE_MASTER_KEY;
        else if (strcmp(argv[i], "import-catalog") == 0)
            c->command = CP_CMD_IMPORT_CATALOG;
        else if (strcmp(argv[i], "serve") != 0) {
            fprintf(stderr, PROG ": unknown command '%s'\n%s", argv[i], usage);
            return GW_EINVAL;
        }
        i++;
    }
    static const char *const switches[] = {"--grpc-insecure", "--grpc-tls-no-client-auth",
                                           "--check-config", NULL};
    struct gw_flags f = {.prog = PROG,
                         .usage = usage,
                         .env = env,
                         .nenv = sizeof(env) / sizeof(env[0]),
                         .switches = switches,
                         .apply = apply,
                         .cfg = c};
    int rc = gw_flags_parse(&f, argc, argv, i);
    if (rc)
        return rc;
    if (!c->replica_id[0]) {
        char host[64] = "";
        if (gethostname(host, sizeof(host)) != 0 || !host[0])
            memcpy(host, "cp", 3);
        host[sizeof(host) - 1] = '\0';
        for (char *p = host; *p; p++) /* a hostname may carry what an id may not */
            if (!cp_etcd_name_ok((char[]){*p, 0}))
                *p = '-';
        snprintf(c->replica_id, sizeof(c->replica_id), "%.40s-%ld", host, (long)getpid());
    }
    if (!c->admin_tls_cert != !c->admin_tls_key) {
        fprintf(stderr, PROG ": --admin-tls-cert and --admin-tls-key go together (the admin "
                             "port's certificate chain and its key, PEM)\n");
        return GW_EINVAL;
    }
    if (!c->etcd_cert != !c->etcd_key) {
        fprintf(stderr, PROG ": --etcd-cert and --etcd-key go together (a client certificate "
                             "and its key, PEM)\n");
        return GW_EINVAL;
    }
    if ((c->etcd_ca || c->etcd_cert) &&
        (!c->etcd_endpoints || strstr(c->etcd_endpoints, "http://") ||
         !strstr(c->etcd_endpoints, "https://"))) {
        fprintf(stderr, PROG ": --etcd-ca, --etcd-cert and --etcd-key need every "
                             "--etcd-endpoints URL to be https://\n");
        return GW_EINVAL;
    }
    if (c->catalog_sync_url && strncmp(c->catalog_sync_url, "http://", 7) == 0 &&
        !(c->catalog_fetch_allow & CP_FETCH_ALLOW_HTTP)) {
        fprintf(stderr, PROG ": --catalog-sync-url: must be an https:// URL (plain http only "
                             "with --catalog-fetch-allow http)\n");
        return GW_EINVAL;
    }
    if (c->command == CP_CMD_IMPORT_CATALOG && !c->import_file == !c->import_url) {
        fprintf(stderr, PROG ": import-catalog needs exactly one of --file PATH and --url URL\n%s",
                usage);
        return GW_EINVAL;
    }
    if (!c->database_url) {
        fprintf(stderr,
                "llmgw-controlplane: --database-url (or LLMGW_DATABASE_URL) is required\n%s",
                usage);
        return GW_EINVAL;
    }
    return GW_OK;
}

int cp_config_grpc_check(const struct cp_config *c, char *err, size_t errlen)
{
    if (!c->grpc_tls_cert != !c->grpc_tls_key) {
        snprintf(err, errlen,
                 "--grpc-tls-cert and --grpc-tls-key go together (a certificate "
                 "chain and its private key, PEM)");
        return GW_EINVAL;
    }
    if (c->grpc_tls_client_ca && !c->grpc_tls_cert) {
        snprintf(err, errlen, "--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key");
        return GW_EINVAL;
    }
    if (c->grpc_tls_client_ca && c->grpc_tls_no_client_auth) {
        snprintf(err, errlen,
                 "--grpc-tls-client-ca and --grpc-tls-no-client-auth exclude each other");
        return GW_EINVAL;
    }
    if (c->grpc_tls_no_client_auth && !c->grpc_tls_cert) {
        snprintf(err, errlen, "--grpc-tls-no-client-auth needs --grpc-tls-cert and --grpc-tls-key");
        return GW_EINVAL;
    }
    if (c->grpc_tls_cert && c->grpc_insecure) {
        snprintf(err, errlen, "--grpc-insecure and --grpc-tls-cert exclude each other");
        return GW_EINVAL;
    }
    if (!c->grpc_tls_cert && !c->grpc_insecure) {
        snprintf(err, errlen,
                 "the gRPC server needs TLS (--grpc-tls-cert and --grpc-tls-key, or "
                 "LLMGW_GRPC_TLS_CERT and LLMGW_GRPC_TLS_KEY) or, on a test bench only, "
                 "--grpc-insecure (LLMGW_GRPC_INSECURE=1): pushed snapshots carry provider "
                 "credentials");
        return GW_EINVAL;
    }
    if (c->grpc_tls_no_client_auth && !c->fleet_token) {
        snprintf(err, errlen,
                 "--grpc-tls-no-client-auth needs LLMGW_FLEET_TOKEN (shared with every data "
                 "plane): without client certificates or a token anyone who reaches the gRPC "
                 "port could Watch every provider credential and write ledger rows");
        return GW_EINVAL;
    }
    if (c->grpc_tls_cert && !c->grpc_tls_client_ca && !c->grpc_tls_no_client_auth) {
        snprintf(err, errlen,
                 "TLS without client certificates lets anyone who reaches the gRPC port Watch "
                 "and read every provider credential: give --grpc-tls-client-ca PEM "
                 "(LLMGW_GRPC_TLS_CLIENT_CA), or opt out explicitly with "
                 "--grpc-tls-no-client-auth (LLMGW_GRPC_TLS_NO_CLIENT_AUTH=1)");
        return GW_EINVAL;
    }
    return GW_OK;
}
