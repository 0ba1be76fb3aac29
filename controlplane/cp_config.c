#include "cp_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

static const char usage[] =
    "usage: llmgw-controlplane [serve|migrate|rotate-master-key] --database-url CONNINFO\n"
    "                          [--admin-listen HOST:PORT] [--grpc-listen HOST:PORT]\n"
    "                          (--grpc-tls-cert PEM --grpc-tls-key PEM\n"
    "                           [--grpc-tls-client-ca PEM] | --grpc-insecure)\n"
    "                          [--snapshot-poll-ms N]\n"
    "  serve    (default) apply pending migrations, then serve the admin API and\n"
    "           push snapshots to data planes over gRPC\n"
    "  migrate  apply pending migrations and exit (0 on success, 1 on failure)\n"
    "  rotate-master-key  rewrap every builtin secret from LLMGW_MASTER_KEY (old)\n"
    "           to LLMGW_NEW_MASTER_KEY (new) in one transaction; exit 0 or 1\n"
    "Each flag can also come from the environment: LLMGW_DATABASE_URL,\n"
    "LLMGW_ADMIN_LISTEN (default 127.0.0.1:8081), LLMGW_GRPC_LISTEN (default\n"
    "127.0.0.1:8082), LLMGW_GRPC_TLS_CERT, LLMGW_GRPC_TLS_KEY,\n"
    "LLMGW_GRPC_TLS_CLIENT_CA, LLMGW_GRPC_INSECURE=1, LLMGW_SNAPSHOT_POLL_MS\n"
    "(default 30000). The bootstrap admin token comes from LLMGW_ADMIN_TOKEN\n"
    "only; the master key from LLMGW_MASTER_KEY only.\n";

static int parse_listen(struct cp_listen *l, const char *flag, const char *v)
{
    const char *colon = strrchr(v, ':');
    if (!colon || colon == v || (size_t)(colon - v) >= sizeof(l->host)) {
        fprintf(stderr, "llmgw-controlplane: %s: '%s' is not HOST:PORT\n", flag, v);
        return GW_EINVAL;
    }
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || port < 0 || port > 65535) {
        fprintf(stderr, "llmgw-controlplane: %s: '%s' is not a port from 0 to 65535\n", flag,
                colon + 1);
        return GW_EINVAL;
    }
    size_t hl = (size_t)(colon - v);
    const char *h = v;
    if (h[0] == '[' && hl > 2 && h[hl - 1] == ']') { /* [::1]:8081 */
        h++;
        hl -= 2;
    }
    memcpy(l->host, h, hl);
    l->host[hl] = '\0';
    l->port = (int)port;
    return GW_OK;
}

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

static int apply(struct cp_config *c, const char *flag, const char *v)
{
    if (strcmp(flag, "--database-url") == 0)
        c->database_url = v;
    else if (strcmp(flag, "--grpc-tls-cert") == 0)
        c->grpc_tls_cert = v;
    else if (strcmp(flag, "--grpc-tls-key") == 0)
        c->grpc_tls_key = v;
    else if (strcmp(flag, "--grpc-tls-client-ca") == 0)
        c->grpc_tls_client_ca = v;
    else if (strcmp(flag, "--grpc-insecure") == 0)
        return parse_bool(&c->grpc_insecure, flag, v);
    else if (strcmp(flag, "--snapshot-poll-ms") == 0) {
        char *end;
        errno = 0;
        long ms = strtol(v, &end, 10);
        if (errno || end == v || *end || ms < 100 || ms > 3600000) {
            fprintf(stderr,
                    "llmgw-controlplane: %s: '%s' is not a number of milliseconds from 100 to "
                    "3600000\n",
                    flag, v);
            return GW_EINVAL;
        }
        c->snapshot_poll_ms = ms;
    } else if (strcmp(flag, "--admin-listen") == 0)
        return parse_listen(&c->admin, flag, v);
    else if (strcmp(flag, "--grpc-listen") == 0)
        return parse_listen(&c->grpc, flag, v);
    else {
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
        {"LLMGW_GRPC_INSECURE", "--grpc-insecure"},
        {"LLMGW_SNAPSHOT_POLL_MS", "--snapshot-poll-ms"},
    };
    memset(c, 0, sizeof(*c));
    c->command = CP_CMD_SERVE;
    memcpy(c->admin.host, "127.0.0.1", 10);
    c->admin.port = 8081;
    memcpy(c->grpc.host, "127.0.0.1", 10);
    c->grpc.port = 8082;
    c->snapshot_poll_ms = 30000;
    for (size_t i = 0; i < sizeof(env) / sizeof(env[0]); i++) {
        const char *v = getenv(env[i][0]);
        if (v && *v && apply(c, env[i][1], v))
            return GW_EINVAL;
    }
    const char *tok = getenv("LLMGW_ADMIN_TOKEN");
    c->admin_token = tok && *tok ? tok : NULL;
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        if (strcmp(argv[i], "migrate") == 0)
            c->command = CP_CMD_MIGRATE;
        else if (strcmp(argv[i], "rotate-master-key") == 0)
            c->command = CP_CMD_ROTATE_MASTER_KEY;
        else if (strcmp(argv[i], "serve") != 0) {
            fprintf(stderr, "llmgw-controlplane: unknown command '%s'\n%s", argv[i], usage);
            return GW_EINVAL;
        }
        i++;
    }
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage, stdout);
            return 1;
        }
        const char *flag = argv[i];
        if (strcmp(flag, "--grpc-insecure") == 0) { /* a switch: no value */
            c->grpc_insecure = 1;
            continue;
        }
        const char *eq = strchr(flag, '=');
        char name[64];
        const char *v;
        if (eq && (size_t)(eq - flag) < sizeof(name)) {
            memcpy(name, flag, (size_t)(eq - flag));
            name[eq - flag] = '\0';
            flag = name;
            v = eq + 1;
        } else if (i + 1 < argc) {
            v = argv[++i];
        } else {
            fprintf(stderr, "llmgw-controlplane: %s needs a value\n%s", flag, usage);
            return GW_EINVAL;
        }
        if (strcmp(flag, "--admin-token") == 0) {
            /* A flag would show the token in ps(1) and shell history. */
            fprintf(stderr, "llmgw-controlplane: the admin token is read from LLMGW_ADMIN_TOKEN "
                            "only, never from a flag\n");
            return GW_EINVAL;
        }
        if (apply(c, flag, v))
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
    return GW_OK;
}
