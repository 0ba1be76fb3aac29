/*
 * llmgw-snapshot-server: a test-only control plane. It serves one snapshot
 * JSON file over the Watch stream through cp_grpc (the same server module
 * the daemon links), and stands in for llmgw-controlplane in the data
 * plane's integration tests.
 *
 *   llmgw-snapshot-server --snapshot FILE [--delta FILE] [--listen 127.0.0.1:0]
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
 * SIGUSR1 prints {"msg":"replicas",...} (cp_grpc_replicas) and
 * {"msg":"stats","deltas_sent","documents_sent","documents_packed"}
 * (cp_grpc_stats). SIGTERM stops.
 * With --delta, a SIGHUP that finds that file there and not empty publishes
 * it as a delta (cp_grpc_publish_version with its "version" and
 * "base_version"), the snapshot file being the whole document of that
 * version for the watches that need one; otherwise it is a full build.
 * Whole documents come from the document source, as in the daemon. The
 * files are not validated: tests push invalid documents on purpose, to see
 * the data plane refuse them, and deltas that do not match.
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
    const char *path, *delta_path;
    char *doc; /* the whole document, as last read */
    size_t doc_len;
    int64_t doc_version;
    struct cp_grpc *srv;
    struct event_base *base;
};

static void on_ack(void *arg, const char *replica_id, int64_t version)
{
    (void)arg;
    gw_log_line_fd(1, json_pack("{s:s,s:s,s:I}", "msg", "ack", "replica_id", replica_id, "version",
                                (json_int_t)version));
}

/* The file's text (malloc'd, NUL-terminated), or NULL: missing (*missing
 * set) or unreadable. */
static char *read_file(const char *path, size_t *len, int *missing)
{
    FILE *fp = fopen(path, "rb");
    *missing = !fp;
    if (!fp)
        return NULL;
    char *buf = NULL;
    size_t n, cap = 0;
    char chunk[65536];
    *len = 0;
    while ((n = fread(chunk, 1, sizeof(chunk), fp)) > 0) {
        if (*len + n + 1 > cap) {
            cap = (*len + n + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
        }
        memcpy(buf + *len, chunk, n);
        *len += n;
    }
    fclose(fp);
    if (!buf)
        buf = calloc(1, 1);
    else
        buf[*len] = '\0';
    return buf;
}

/* cp_grpc's document source: a copy of the whole document. */
static char *document(void *arg, int64_t *version, size_t *len)
{
    struct fake *f = arg;
    char *c = f->doc ? malloc(f->doc_len + 1) : NULL;
    if (!c)
        return NULL;
    memcpy(c, f->doc, f->doc_len + 1);
    *version = f->doc_version;
    *len = f->doc_len;
    return c;
}

static int64_t json_version(const char *text, size_t len, const char *field, int64_t dflt)
{
    json_error_t je;
    json_t *j = json_loadb(text, len, 0, &je);
    json_t *v = json_object_get(j, field);
    int64_t r = json_is_integer(v) ? json_integer_value(v) : dflt;
    json_decref(j);
    return r;
}

static int publish_file(struct fake *f)
{
    size_t len = 0, dlen = 0;
    int missing;
    char *buf = read_file(f->path, &len, &missing);
    if (!buf) {
        gw_logf(GW_LOG_ERROR, "cannot read the snapshot file", "{s:s}", "path", f->path);
        return GW_EIO;
    }
    char *delta = f->delta_path ? read_file(f->delta_path, &dlen, &missing) : NULL;
    if (delta && dlen == 0) {
        free(delta);
        delta = NULL;
    }
    int64_t next = cp_grpc_version(f->srv) + 1;
    int64_t version = json_version(buf, len, "version", next), base = 0;
    if (delta) {
        version = json_version(delta, dlen, "version", next);
        base = json_version(delta, dlen, "base_version", 0);
    }
    free(f->doc);
    f->doc = buf;
    f->doc_len = len;
    f->doc_version = version;
    int rc = cp_grpc_publish_version(f->srv, version, gw_wall_ms(), base, delta, dlen);
    if (rc == GW_OK)
        gw_log_line_fd(1, json_pack("{s:s,s:I,s:I}", "msg", "published", "version",
                                    (json_int_t)version, "base_version", (json_int_t)base));
    free(delta);
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
        struct cp_grpc_stats st;
        cp_grpc_stats(f->srv, &st);
        gw_log_line_fd(1, json_pack("{s:s,s:I,s:I,s:I}", "msg", "stats", "deltas_sent",
                                    (json_int_t)st.deltas_sent, "documents_sent",
                                    (json_int_t)st.documents_sent, "documents_packed",
                                    (json_int_t)st.documents_packed));
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
        else if (strcmp(argv[i], "--delta") == 0)
            f.delta_path = argv[i + 1];
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
        fprintf(stderr, "usage: llmgw-snapshot-server --snapshot FILE [--delta FILE] "
                        "[--listen HOST:PORT] [--tls-cert PEM --tls-key PEM [--tls-client-ca "
                        "PEM]]\n");
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
    cp_grpc_set_document(f.srv, document, &f);
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
    free(f.doc);
    for (int k = 0; k < 4; k++)
        event_free(sigs[k]);
    event_base_free(f.base);
    gw_log(GW_LOG_INFO, "stopped", NULL);
    return 0;
}
