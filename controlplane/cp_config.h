/* Control-plane settings from the command line and the environment. */
#ifndef CP_CONFIG_H
#define CP_CONFIG_H

/* The shortest LLMGW_ADMIN_TOKEN (and LLMGW_FLEET_TOKEN) accepted at start. */
#define CP_MIN_ADMIN_TOKEN 24

#include <stddef.h>

enum cp_command { CP_CMD_SERVE, CP_CMD_MIGRATE, CP_CMD_ROTATE_MASTER_KEY, CP_CMD_IMPORT_CATALOG };

struct cp_listen {
    char host[256];
    int port;
};

struct cp_config {
    enum cp_command command;
    const char *database_url; /* a libpq conninfo string or URI; may hold a password:
                                 never logged */
    struct cp_listen admin;   /* the admin REST API */
    /* TLS on the admin port (PEM; both or neither; reloaded on SIGHUP). */
    const char *admin_tls_cert, *admin_tls_key;
    struct cp_listen grpc;   /* the Watch/Report server */
    const char *admin_token; /* LLMGW_ADMIN_TOKEN (environment only); NULL when unset */
    /* LLMGW_FLEET_TOKEN (environment only; NULL when unset): every Watch and
     * Report call must carry it. Required with --grpc-tls-no-client-auth. */
    const char *fleet_token;
    /* The gRPC server's transport: TLS with a certificate chain and key (and,
     * with a client CA, required client certificates), or plaintext when
     * grpc_insecure is set. serve refuses to start with neither
     * (cp_config_grpc_check). */
    const char *grpc_tls_cert;
    const char *grpc_tls_key;
    const char *grpc_tls_client_ca;
    int grpc_tls_no_client_auth; /* TLS without client certificates, explicitly */
    int grpc_insecure;
    long snapshot_poll_ms;    /* the snapshot builder's slow poll (default 30000) */
    long secret_cache_ttl_ms; /* how long a fetched Vault/AWS value is reused (default 300000) */
    /* The fleet (cp_etcd.h): etcd's endpoints (NULL: none, this replica
     * leads itself), the lease TTL, and this replica's id (default
     * <hostname>-<pid>). */
    const char *etcd_endpoints;
    const char *etcd_ca, *etcd_cert, *etcd_key; /* TLS to https:// endpoints */
    int etcd_lease_ttl_s;
    char replica_id[64];
    /* Budgets: how long past its expiry a lease its replica has not settled
     * still counts as held (docs/budgets.md; default 3600). */
    long long lease_grace_s;
    /* serve: the web console's assets from this folder, read on every
     * request, instead of the embedded copy (a developer's; NULL: embedded). */
    const char *console_dir;
    /* serve: a LiteLLM catalog URL the leader imports every
     * catalog_sync_interval_s (NULL: no sync; default interval 86400). */
    const char *catalog_sync_url;
    long catalog_sync_interval_s;
    /* What a catalog fetch (sync or import by URL) may reach beyond https
     * to public addresses: CP_FETCH_ALLOW_* bits (cp_fetch.h), from
     * --catalog-fetch-allow. */
    unsigned catalog_fetch_allow;
    /* import-catalog: exactly one of them (a LiteLLM catalog file or URL). */
    const char *import_file;
    const char *import_url;
    /* --check-config: validate what a start would, print a summary, exit
     * (main.c); no network, no database. */
    int check_config;
};

/* Fills cfg from defaults, then LLMGW_* variables, then argv (an optional
 * subcommand: serve, migrate, rotate-master-key or import-catalog, then
 * flags; --file and --url belong to import-catalog, which needs one). The strings point into
 * argv or the environment. Returns 0, or GW_EINVAL after printing a message
 * naming the flag; 1 after --help. */
int cp_config_parse(struct cp_config *cfg, int argc, char **argv);

/* For serve: 0 when the gRPC transport is configured (TLS with both a
 * certificate and a key and either a client CA or the explicit no-client-auth
 * opt-out, or insecure), else GW_EINVAL with a message in err
 * naming the flags. */
int cp_config_grpc_check(const struct cp_config *cfg, char *err, size_t errlen);

#endif
