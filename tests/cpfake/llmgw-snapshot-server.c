/*
 * llmgw-snapshot-server: a test-only control plane. It serves one snapshot
 * JSON file over the Watch stream through cp_grpc (the same server module
 * the daemon links), and stands in for llmgw-controlplane in the data
 * plane's integration tests.
 *
 *   llmgw-snapshot-server --snapshot FILE [--listen 127.0.0.1:0]
 *       [--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]
 *
 * With --tls-cert and --tls-key it serves TLS; with --tls-client-ca too,
 * mutual TLS (client certificates required and verified against that CA).
 * Without them it serves plaintext (insecure).
 * Prints {"msg":"listening","port":N} once serving, {"msg":"published",
 * "version":N} per publish and {"msg":"ack","replica_id":...,"version":N}
 * per Ack received, one JSON line each on stdout. SIGHUP re-reads the file
 * and publishes it: its "version" field is the version; a file that is not
 * JSON, or has no integer version, goes out as is as the last version + 1.
 * SIGUSR1 prints {"msg":"replicas",...} (cp_grpc_replicas). SIGTERM stops.
 * The file is not validated: tests push invalid documents on purpose, to
 * see the data plane refuse them.
 */
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_grpc.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

struct fake {
    const char *path;
    struct cp_grpc *srv;
    struct event_base *base;
};

static void on_ack(void *arg, const char *replica_id, int64_t version)
{
    (void)arg;
    gw_log_line_fd(1, json_pack("{s:s,s:s,s:I}", "msg", "ack", "replica_id", replica_id, "version",
                                (json_int_t)version));
}

static int publish_file(struct fake *f)
{
    FILE *fp = fopen(f->path, "rb");
    if (!fp) {
        gw_logf(GW_LOG_ERROR, "cannot open the snapshot file", "{s:s}", "path", f->path);
        return GW_EIO;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0, n;
    char chunk[65536];
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
        if (len + n > cap) {
            cap = (len + n) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return GW_ENOMEM;
            }
            buf = nb;
        }
        memcpy(buf + len, chunk, n);
        len += n;
    }
    fclose(fp);
    json_error_t je;
    json_t *doc = json_loadb(buf ? buf : "", len, 0, &je);
    json_t *v = json_object_get(doc, "version");
    int64_t version = json_is_integer(v) ? json_integer_value(v) : cp_grpc_version(f->srv) + 1;
    int rc = cp_grpc_publish(f->srv, version, buf ? buf : "", len, gw_wall_ms());
    if (rc == GW_OK)
        gw_log_line_fd(1,
                       json_pack("{s:s,s:I}", "msg", "published", "version", (json_int_t)version));
    json_decref(doc);
    free(buf);
    return rc;
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    struct fake *f = arg;
    if (sig == SIGHUP)
        (void)publish_file(f);
    else if (sig == SIGUSR1) {
        json_t *r = cp_grpc_replicas(f->srv);
        if (r) {
            json_object_set_new(r, "msg", json_string("replicas"));
            gw_log_line_fd(1, r);
        }
    } else
        event_base_loopbreak(f->base);
}

int main(int argc, char **argv)
{
    struct fake f = {0};
    struct cp_grpc_opts o = {.listen = "127.0.0.1:0", .on_ack = on_ack};
    int bad = argc % 2 == 0;
    for (int i = 1; i + 1 < argc && !bad; i += 2) {
        if (strcmp(argv[i], "--snapshot") == 0)
            f.path = argv[i + 1];
        else if (strcmp(argv[i], "--listen") == 0)
            o.listen = argv[i + 1];
        else if (strcmp(argv[i], "--tls-cert") == 0)
            o.tls_cert_file = argv[i + 1];
        else if (strcmp(argv[i], "--tls-key") == 0)
            o.tls_key_file = argv[i + 1];
        else if (strcmp(argv[i], "--tls-client-ca") == 0)
            o.tls_client_ca_file = argv[i + 1];
        else
            bad = 1;
    }
    /* A client CA without a certificate and key would silently serve
     * plaintext: refuse it, as cp_grpc refuses a lone cert or key. */
    if (!f.path || bad || (o.tls_client_ca_file && !o.tls_cert_file)) {
        fprintf(stderr, "usage: llmgw-snapshot-server --snapshot FILE [--listen HOST:PORT] "
                        "[--tls-cert PEM --tls-key PEM [--tls-client-ca PEM]]\n");
        return 2;
    }
    o.insecure = !o.tls_cert_file && !o.tls_key_file;
    signal(SIGPIPE, SIG_IGN);
    f.base = event_base_new();
    if (!f.base)
        return 1;
    char err[256];
    f.srv = cp_grpc_new(f.base, &o, err, sizeof(err));
    if (!f.srv) {
        gw_logf(GW_LOG_ERROR, "cannot start", "{s:s}", "error", err);
        return 1;
    }
    if (publish_file(&f) != GW_OK)
        gw_log(GW_LOG_WARN, "no snapshot published yet: send SIGHUP once the file is valid", NULL);
    struct event *sigs[4];
    const int signos[4] = {SIGHUP, SIGUSR1, SIGTERM, SIGINT};
    for (int k = 0; k < 4; k++) {
        sigs[k] = evsignal_new(f.base, signos[k], on_signal, &f);
        if (!sigs[k] || event_add(sigs[k], NULL))
            return 1;
    }
    const char *mode = o.insecure ? "off" : o.tls_client_ca_file ? "mutual" : "server";
    gw_log_line_fd(1, json_pack("{s:s,s:i,s:s}", "msg", "listening", "port", cp_grpc_port(f.srv),
                                "tls", mode));
    event_base_dispatch(f.base);
    cp_grpc_free(f.srv);
    for (int k = 0; k < 4; k++)
        event_free(sigs[k]);
    event_base_free(f.base);
    gw_log(GW_LOG_INFO, "stopped", NULL);
    return 0;
}
