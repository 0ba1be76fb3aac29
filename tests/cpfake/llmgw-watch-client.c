/*
 * llmgw-watch-client: a test-only Watch client, to see what a control plane
 * sends a watcher that the data plane does not cover: one of the previous
 * version (no accepts_delta), or one that lags.
 *
 *   llmgw-watch-client --target HOST:PORT [--replica-id ID] [--accepts-delta]
 *       [--gate FILE] [--dump DIR]
 *
 * Plaintext only. Prints {"msg":"listening","port":N} (the target's port)
 * once the call is open, so the harness can wait for it, then one line per message received:
 * {"msg":"snapshot","version","base_version","delta","document_bytes",
 * "delta_bytes"}, and {"msg":"ended","status"} when the call ends. With
 * --gate it reads nothing until FILE exists: its messages wait in the
 * transport's flow control and the server's send stays in flight (a
 * watcher that lags). With --dump, each document received is written to
 * DIR/<version>.json and each delta to DIR/<version>.delta.json (for tests
 * that read what the control plane sent). SIGTERM ends it.
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gw_grpc.h"
#include "gw_log.h"
#include "llmgw/v1/control.pb-c.h"

static grpc_completion_queue *cq;

/* Writes n bytes to dir/<version><suffix> (a temporary name, then renamed:
 * a reader never sees half a file). */
static void dump(const char *dir, int64_t version, const char *suffix, const void *p, size_t n)
{
    char path[4096], tmp[4200];
    snprintf(path, sizeof(path), "%s/%lld%s", dir, (long long)version, suffix);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0 || rename(tmp, path) != 0)
        fprintf(stderr, "llmgw-watch-client: cannot write %s\n", path);
}

/* Runs one batch to its completion: its success. */
static int run(grpc_call *call, const grpc_op *ops, size_t n, void *tag)
{
    if (grpc_call_start_batch(call, ops, n, tag, NULL) != GRPC_CALL_OK)
        return 0;
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

int main(int argc, char **argv)
{
    const char *target = NULL, *replica = "watch-client", *gate = NULL, *dir = NULL;
    int delta = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
            target = argv[++i];
        else if (strcmp(argv[i], "--replica-id") == 0 && i + 1 < argc)
            replica = argv[++i];
        else if (strcmp(argv[i], "--gate") == 0 && i + 1 < argc)
            gate = argv[++i];
        else if (strcmp(argv[i], "--dump") == 0 && i + 1 < argc)
            dir = argv[++i];
        else if (strcmp(argv[i], "--accepts-delta") == 0)
            delta = 1;
        else
            target = NULL, i = argc;
    }
    if (!target) {
        fprintf(stderr, "usage: llmgw-watch-client --target HOST:PORT [--replica-id ID] "
                        "[--accepts-delta] [--gate FILE] [--dump DIR]\n");
        return 2;
    }
    grpc_init();
    cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_arg args[] = {{.type = GRPC_ARG_INTEGER,
                        .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
                        .value.integer = -1}};
    grpc_channel_args ca = {.num_args = 1, .args = args};
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, &ca);
    grpc_channel_credentials_release(cr);
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 grpc_slice_from_static_string("/llmgw.v1.Control/Watch"), NULL,
                                 gpr_inf_future(GPR_CLOCK_REALTIME), NULL);

    Llmgw__V1__WatchRequest req = LLMGW__V1__WATCH_REQUEST__INIT;
    req.replica_id = (char *)replica;
    req.accepts_delta = delta;
    grpc_byte_buffer *bb = gw_grpc_pack(&req.base);
    grpc_metadata_array md, trailing;
    grpc_metadata_array_init(&md);
    grpc_metadata_array_init(&trailing);
    grpc_op ops[4] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                      {.op = GRPC_OP_SEND_MESSAGE},
                      {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT},
                      {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    ops[1].data.send_message.send_message = bb;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md;
    int ok = run(call, ops, 4, (void *)1);
    grpc_byte_buffer_destroy(bb);
    if (ok)
        gw_log_line_fd(1, json_pack("{s:s,s:i}", "msg", "listening", "port",
                                    atoi(strrchr(target, ':') ? strrchr(target, ':') + 1 : "0")));
    while (ok && gate && access(gate, F_OK) != 0) {
        struct timespec ts = {0, 10 * 1000000};
        nanosleep(&ts, NULL);
    }
    while (ok) {
        grpc_byte_buffer *in = NULL;
        grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
        op.data.recv_message.recv_message = &in;
        if (!run(call, &op, 1, (void *)2) || !in)
            break;
        Llmgw__V1__Snapshot *m =
            (Llmgw__V1__Snapshot *)gw_grpc_unpack(&llmgw__v1__snapshot__descriptor, in, 1u << 30);
        grpc_byte_buffer_destroy(in);
        if (!m)
            break;
        gw_log_line_fd(1, json_pack("{s:s,s:I,s:I,s:b,s:I,s:I}", "msg", "snapshot", "version",
                                    (json_int_t)m->version, "base_version",
                                    (json_int_t)m->base_version, "delta", m->delta.len > 0,
                                    "document_bytes", (json_int_t)m->document.len, "delta_bytes",
                                    (json_int_t)m->delta.len));
        if (dir && m->document.len)
            dump(dir, m->version, ".json", m->document.data, m->document.len);
        if (dir && m->delta.len)
            dump(dir, m->version, ".delta.json", m->delta.data, m->delta.len);
        protobuf_c_message_free_unpacked(&m->base, NULL);
    }
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details;
    grpc_op st = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    st.data.recv_status_on_client.trailing_metadata = &trailing;
    st.data.recv_status_on_client.status = &status;
    st.data.recv_status_on_client.status_details = &details;
    if (run(call, &st, 1, (void *)3)) {
        gw_log_line_fd(
            1, json_pack("{s:s,s:s}", "msg", "ended", "status", gw_grpc_status_name(status)));
        grpc_slice_unref(details);
    }
    grpc_metadata_array_destroy(&md);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return 0;
}
