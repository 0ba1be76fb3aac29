/*
 * dp_cpclient's connection: --control-plane's addresses, a channel to each
 * (its TLS credentials, keepalive and reconnect backoff), and the probe
 * that says why a control plane cannot be connected to. The session on
 * top (the Watch and Report streams) is dp_cpclient.c.
 */
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_cpclient_int.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

#define PROBE_DEADLINE_MS 2000
#define PROBE_LOG_EVERY_MS 5000
/* --control-plane may list several addresses: a session that cannot reach
 * its address within this long moves on to the next. */
#define CONNECT_WAIT_MS 3000

/* ------------------------------------------------------------ probe
 *
 * The session's calls wait for a connection (WAIT_FOR_READY), so a control
 * plane that cannot be connected to (refused, TLS handshake failure,
 * certificate rejected) leaves them waiting in silence. Every second, while
 * the channel is in TRANSIENT_FAILURE, a probe call without WAIT_FOR_READY
 * fails at once with the channel's last connection error, which is logged
 * (at most once per PROBE_LOG_EVERY_MS, with the count of failures not
 * logged since). A probe that reaches the server after all sends no request
 * and ends at its deadline, unlogged. */

static void probe_maybe_free(struct probe *p)
{
    if (p->pending > 0)
        return;
    if (p->c->probe == p)
        p->c->probe = NULL;
    grpc_metadata_array_destroy(&p->initial_md);
    grpc_metadata_array_destroy(&p->trailing_md);
    grpc_slice_unref(p->details);
    grpc_call_unref(p->call);
    free(p);
}

static void on_probe_status(void *arg, int ok)
{
    (void)ok;
    struct probe *p = arg;
    struct dp_cpclient *c = p->c;
    p->pending--;
    if (!c->stopping && p->status == GRPC_STATUS_UNAVAILABLE) {
        int64_t now = gw_now_us() / 1000;
        if (c->probe_logged_ms && now - c->probe_logged_ms < PROBE_LOG_EVERY_MS) {
            c->probe_suppressed++;
        } else {
            char *d = grpc_slice_to_c_string(p->details);
            gw_logf(GW_LOG_WARN, "control plane: cannot connect; retrying", "{s:s,s:s,s:s,s:i}",
                    "control_plane", c->addrs[c->cur], "status", gw_grpc_status_name(p->status),
                    "detail", d ? d : "", "not_logged_since", c->probe_suppressed);
            gpr_free(d);
            c->probe_logged_ms = now;
            c->probe_suppressed = 0;
        }
    }
    probe_maybe_free(p);
}

static void on_probe_start(void *arg, int ok)
{
    (void)ok;
    struct probe *p = arg;
    p->pending--;
    probe_maybe_free(p);
}

static void probe_start(struct dp_cpclient *c)
{
    struct probe *p = calloc(1, sizeof(*p));
    if (!p)
        return;
    p->c = c;
    p->details = grpc_empty_slice();
    grpc_metadata_array_init(&p->initial_md);
    grpc_metadata_array_init(&p->trailing_md);
    gw_grpc_tag_init(&p->t_status, on_probe_status, p);
    gw_grpc_tag_init(&p->t_start, on_probe_start, p);
    grpc_slice m = grpc_slice_from_static_string("/llmgw.v1.Control/Watch");
    gpr_timespec dl = gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                                   gpr_time_from_millis(PROBE_DEADLINE_MS, GPR_TIMESPAN));
    p->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, m, NULL,
                                       dl, NULL);
    if (!p->call) {
        grpc_metadata_array_destroy(&p->initial_md);
        grpc_metadata_array_destroy(&p->trailing_md);
        free(p);
        return;
    }
    c->probe = p;
    grpc_op op = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    op.data.recv_status_on_client.trailing_metadata = &p->trailing_md;
    op.data.recv_status_on_client.status = &p->status;
    op.data.recv_status_on_client.status_details = &p->details;
    if (grpc_call_start_batch(p->call, &op, 1, &p->t_status, NULL) == GRPC_CALL_OK)
        p->pending++;
    /* No WAIT_FOR_READY: in TRANSIENT_FAILURE the call fails at once. */
    grpc_op ops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA}, {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    dpc_auth_op(c, &ops[0]);
    ops[1].data.recv_initial_metadata.recv_initial_metadata = &p->initial_md;
    if (grpc_call_start_batch(p->call, ops, 2, &p->t_start, NULL) == GRPC_CALL_OK)
        p->pending++;
    else
        grpc_call_cancel(p->call, NULL);
    probe_maybe_free(p);
}

void dpc_probe_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_cpclient *c = arg;
    if (c->stopping)
        return;
    grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->channel, 0);
    /* With more addresses to try, a session that cannot connect is given
     * up (its calls end, and the next one goes to the next address). */
    if (c->naddrs > 1 && c->watch && !c->session_up &&
        (st == GRPC_CHANNEL_TRANSIENT_FAILURE ||
         gw_now_us() - c->session_at_us >= CONNECT_WAIT_MS * INT64_C(1000))) {
        grpc_call_cancel(c->watch->call, NULL);
        if (c->report)
            grpc_call_cancel(c->report->call, NULL);
    }
    if (!c->probe && st == GRPC_CHANNEL_TRANSIENT_FAILURE)
        probe_start(c);
}

/* ------------------------------------------------------------ channels */

static grpc_channel_credentials *channel_creds(const struct dp_config *cfg)
{
    if (!cfg->control_plane_ca) {
        gw_logf(GW_LOG_WARN,
                "control plane: plaintext gRPC (no --control-plane-ca): pushed credentials cross "
                "the network unencrypted; use TLS outside a test bench",
                "{s:s}", "control_plane", cfg->control_plane);
        return grpc_insecure_credentials_create();
    }
    char *pem[3] = {0};
    const char *paths[3] = {cfg->control_plane_ca, cfg->control_plane_cert, cfg->control_plane_key};
    for (int i = 0; i < 3; i++) {
        if (!paths[i])
            continue;
        FILE *f = fopen(paths[i], "rb");
        long n = -1;
        if (f && fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n < (1 << 20) &&
            fseek(f, 0, SEEK_SET) == 0 && (pem[i] = calloc(1, (size_t)n + 1)) &&
            fread(pem[i], 1, (size_t)n, f) == (size_t)n) {
            fclose(f);
            continue;
        }
        if (f)
            fclose(f);
        gw_logf(GW_LOG_ERROR, "control plane: cannot read a TLS file", "{s:s}", "path", paths[i]);
        for (int j = 0; j < 3; j++)
            free(pem[j]);
        return NULL;
    }
    grpc_ssl_pem_key_cert_pair pair = {.private_key = pem[2], .cert_chain = pem[1]};
    grpc_channel_credentials *cr =
        grpc_ssl_credentials_create(pem[0], pem[1] ? &pair : NULL, NULL, NULL);
    for (int j = 0; j < 3; j++)
        free(pem[j]);
    return cr;
}

/* The channel to addrs[i], made on first use with the same credentials
 * and arguments for every address. */
grpc_channel *dpc_channel_for(struct dp_cpclient *c, size_t i)
{
    if (c->channels[i])
        return c->channels[i];
    grpc_channel_credentials *cr = channel_creds(c->cfg);
    if (!cr)
        return NULL;
    /* Keepalive every 10 s (the server allows 5 s: cp_grpc.c), even with no
     * call open; reconnect attempts back off from 100 ms to 5 s. */
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIME_MS, .value.integer = 10000},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS, .value.integer = 5000},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
         .value.integer = 1},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA,
         .value.integer = 0},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = 100},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, .value.integer = 100},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, .value.integer = 5000},
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = (int)MAX_SNAPSHOT_BYTES},
    };
    grpc_channel_args ca = {.num_args = sizeof(args) / sizeof(*args), .args = args};
    c->channels[i] = grpc_channel_create(c->addrs[i], cr, &ca);
    grpc_channel_credentials_release(cr);
    return c->channels[i];
}

/* --control-plane: one address, or several separated by commas (each
 * HOST:PORT, checked by dp_config). */
int dpc_split_addrs(struct dp_cpclient *c, const char *list)
{
    const char *p = list;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            if (c->naddrs == MAX_ADDRS)
                return GW_EINVAL;
            if (!(c->addrs[c->naddrs] = strndup(p, n)))
                return GW_ENOMEM;
            c->naddrs++;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return c->naddrs ? GW_OK : GW_EINVAL;
}
