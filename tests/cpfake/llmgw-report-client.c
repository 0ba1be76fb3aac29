/*
 * llmgw-report-client: a test-only Report client, to send a control plane
 * exactly the ReportMessages a test writes (ledger rows, batches,
 * judgements) without a data plane, and see its replies.
 *
 *   llmgw-report-client --target HOST:PORT --messages FILE [--replica-id ID]
 *       [--wait-ms N]
 *
 * FILE holds a JSON array; each element is one ReportMessage in the
 * proto's field names, e.g. {"judgement": {"request_id": "r1", "seq": 1,
 * ...}} or {"ledger_batch": {"rows": [...], "judgements": [...]}}
 * (replica_id is set on each). The translation is generic, by the
 * protobuf-c descriptors: any field of any message, repeated fields as
 * arrays, enums by number or name, bytes as strings.
 *
 * It opens one Report stream (plaintext), sends every message in order,
 * and prints one line per ReportReply: {"msg":"reply","acked_through",
 * "ledger_batch_max","grants"}; once acked_through reaches the highest seq
 * the messages carry (or after --wait-ms, default 10000) it half-closes,
 * prints {"msg":"done","acked_through","expected"} and
 * {"msg":"ended","status"}, and exits 0 when every seq was acknowledged,
 * 1 otherwise, 2 on bad input.
 */
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/time.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_grpc.h"
#include "gw_log.h"
#include "llmgw/v1/control.pb-c.h"

static grpc_completion_queue *cq;

/* Waits for tag up to ms (-1: forever): 1 done and succeeded, 0 done and
 * failed, -1 not done yet. */
static int wait_tag(void *tag, long ms)
{
    gpr_timespec dl =
        ms < 0 ? gpr_inf_future(GPR_CLOCK_REALTIME)
               : gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(ms, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(cq, tag, dl, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT)
        return -1;
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

/* ------------------------------------------------- JSON into protobuf-c */

static int fill(ProtobufCMessage *m, json_t *o, char *err, size_t errlen);

static size_t elem_size(const ProtobufCFieldDescriptor *f)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(void *);
    default:
        return 4;
    }
}

/* One value of field f from v into dst. */
static int set_value(const ProtobufCFieldDescriptor *f, void *dst, json_t *v, char *err,
                     size_t errlen)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_BOOL:
        if (!json_is_boolean(v))
            break;
        *(protobuf_c_boolean *)dst = json_is_true(v);
        return 0;
    case PROTOBUF_C_TYPE_STRING:
        if (!json_is_string(v))
            break;
        *(char **)dst = strdup(json_string_value(v));
        return 0;
    case PROTOBUF_C_TYPE_BYTES: {
        if (!json_is_string(v))
            break;
        ProtobufCBinaryData *b = dst;
        b->len = json_string_length(v);
        b->data = malloc(b->len + 1);
        memcpy(b->data, json_string_value(v), b->len);
        return 0;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        if (!json_is_object(v))
            break;
        const ProtobufCMessageDescriptor *d = f->descriptor;
        ProtobufCMessage *sub = calloc(1, d->sizeof_message);
        d->message_init(sub);
        *(ProtobufCMessage **)dst = sub;
        return fill(sub, v, err, errlen);
    }
    case PROTOBUF_C_TYPE_ENUM: {
        if (json_is_string(v)) {
            const ProtobufCEnumValue *ev =
                protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, json_string_value(v));
            if (!ev)
                break;
            *(int *)dst = ev->value;
            return 0;
        }
        if (!json_is_integer(v))
            break;
        *(int *)dst = (int)json_integer_value(v);
        return 0;
    }
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_DOUBLE:
        if (!json_is_number(v))
            break;
        if (f->type == PROTOBUF_C_TYPE_FLOAT)
            *(float *)dst = (float)json_number_value(v);
        else
            *(double *)dst = json_number_value(v);
        return 0;
    default: /* the integers */
        if (!json_is_integer(v))
            break;
        if (elem_size(f) == 8)
            *(int64_t *)dst = (int64_t)json_integer_value(v);
        else
            *(int32_t *)dst = (int32_t)json_integer_value(v);
        return 0;
    }
    snprintf(err, errlen, "%s: a value of the wrong type", f->name);
    return -1;
}

static int fill(ProtobufCMessage *m, json_t *o, char *err, size_t errlen)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(m->descriptor, key);
        if (!f) {
            snprintf(err, errlen, "%s has no field %s", m->descriptor->name, key);
            return -1;
        }
        char *member = (char *)m + f->offset;
        char *quantifier = (char *)m + f->quantifier_offset;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            if (!json_is_array(v)) {
                snprintf(err, errlen, "%s: an array", key);
                return -1;
            }
            size_t n = json_array_size(v), es = elem_size(f);
            char *arr = calloc(n ? n : 1, es);
            *(void **)member = arr;
            *(size_t *)quantifier = n;
            for (size_t i = 0; i < n; i++)
                if (set_value(f, arr + i * es, json_array_get(v, i), err, errlen) != 0)
                    return -1;
            continue;
        }
        if (set_value(f, member, v, err, errlen) != 0)
            return -1;
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            *(uint32_t *)quantifier = f->id;
        else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
                 f->type != PROTOBUF_C_TYPE_MESSAGE)
            *(protobuf_c_boolean *)quantifier = 1;
    }
    return 0;
}

/* The highest "seq" in the message's rows and judgements. */
static json_int_t max_seq(json_t *msg)
{
    json_int_t best = 0;
    json_t *one[] = {json_object_get(msg, "ledger_row"), json_object_get(msg, "judgement")};
    for (size_t i = 0; i < 2; i++)
        if (json_integer_value(json_object_get(one[i], "seq")) > best)
            best = json_integer_value(json_object_get(one[i], "seq"));
    json_t *b = json_object_get(msg, "ledger_batch");
    const char *lists[] = {"rows", "judgements"};
    for (size_t l = 0; b && l < 2; l++) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(b, lists[l]), i, e)
        {
            if (json_integer_value(json_object_get(e, "seq")) > best)
                best = json_integer_value(json_object_get(e, "seq"));
        }
    }
    return best;
}

/* ------------------------------------------------------------- the call */

struct recv {
    grpc_byte_buffer *in;
    grpc_metadata_array md;
    int first;
};

static int start_recv(grpc_call *call, struct recv *r)
{
    grpc_op ops[2];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    if (r->first) {
        ops[n].op = GRPC_OP_RECV_INITIAL_METADATA;
        ops[n++].data.recv_initial_metadata.recv_initial_metadata = &r->md;
        r->first = 0;
    }
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &r->in;
    return grpc_call_start_batch(call, ops, n, r, NULL) == GRPC_CALL_OK;
}

/* A completed receive: prints the reply; 0 when the stream has ended. */
static int took(struct recv *r, uint64_t *acked)
{
    if (!r->in)
        return 0;
    Llmgw__V1__ReportReply *m = (Llmgw__V1__ReportReply *)gw_grpc_unpack(
        &llmgw__v1__report_reply__descriptor, r->in, 1u << 24);
    grpc_byte_buffer_destroy(r->in);
    r->in = NULL;
    if (!m)
        return 0;
    if (m->acked_through > *acked)
        *acked = m->acked_through;
    gw_log_line_fd(1, json_pack("{s:s,s:I,s:i,s:i}", "msg", "reply", "acked_through",
                                (json_int_t)m->acked_through, "ledger_batch_max",
                                (int)m->ledger_batch_max, "grants", (int)m->n_grants));
    protobuf_c_message_free_unpacked(&m->base, NULL);
    return 1;
}

int main(int argc, char **argv)
{
    const char *target = NULL, *replica = "report-client", *file = NULL;
    long wait_ms = 10000;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
            target = argv[++i];
        else if (strcmp(argv[i], "--replica-id") == 0 && i + 1 < argc)
            replica = argv[++i];
        else if (strcmp(argv[i], "--messages") == 0 && i + 1 < argc)
            file = argv[++i];
        else if (strcmp(argv[i], "--wait-ms") == 0 && i + 1 < argc)
            wait_ms = atol(argv[++i]);
        else
            target = NULL, i = argc;
    }
    if (!target || !file) {
        fprintf(stderr, "usage: llmgw-report-client --target HOST:PORT --messages FILE "
                        "[--replica-id ID] [--wait-ms N]\n");
        return 2;
    }
    json_error_t je;
    json_t *msgs = json_load_file(file, 0, &je);
    if (!json_is_array(msgs)) {
        fprintf(stderr, "llmgw-report-client: %s: not a JSON array (%s)\n", file, je.text);
        return 2;
    }
    /* Every message packed before the stream opens: bad input sends nothing. */
    size_t nmsgs = json_array_size(msgs);
    grpc_byte_buffer **packed = calloc(nmsgs ? nmsgs : 1, sizeof(*packed));
    json_int_t expected = 0;
    for (size_t i = 0; i < nmsgs; i++) {
        json_t *o = json_array_get(msgs, i);
        Llmgw__V1__ReportMessage *m = calloc(1, sizeof(*m));
        llmgw__v1__report_message__init(m);
        char err[256] = "";
        if (!json_is_object(o) || fill(&m->base, o, err, sizeof(err)) != 0) {
            fprintf(stderr, "llmgw-report-client: message %zu: %s\n", i,
                    err[0] ? err : "not an object");
            return 2;
        }
        free(m->replica_id != protobuf_c_empty_string ? m->replica_id : NULL);
        m->replica_id = strdup(replica);
        packed[i] = gw_grpc_pack(&m->base);
        protobuf_c_message_free_unpacked(&m->base, NULL);
        if (max_seq(o) > expected)
            expected = max_seq(o);
    }
    json_decref(msgs);

    grpc_init();
    cq = grpc_completion_queue_create_for_pluck(NULL);
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, cr, NULL);
    grpc_channel_credentials_release(cr);
    grpc_call *call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
                                 grpc_slice_from_static_string("/llmgw.v1.Control/Report"), NULL,
                                 gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_INITIAL_METADATA;
    op.flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    int ok = grpc_call_start_batch(call, &op, 1, (void *)1, NULL) == GRPC_CALL_OK &&
             wait_tag((void *)1, -1) == 1;
    struct recv r = {.first = 1};
    grpc_metadata_array_init(&r.md);
    int receiving = ok && start_recv(call, &r);
    uint64_t acked = 0;
    for (size_t i = 0; ok && i < nmsgs; i++) {
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_SEND_MESSAGE;
        op.data.send_message.send_message = packed[i];
        ok = grpc_call_start_batch(call, &op, 1, (void *)2, NULL) == GRPC_CALL_OK &&
             wait_tag((void *)2, -1) == 1;
    }
    gpr_timespec until =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(wait_ms, GPR_TIMESPAN));
    while (receiving && acked < (uint64_t)expected &&
           gpr_time_cmp(gpr_now(GPR_CLOCK_REALTIME), until) < 0) {
        int w = wait_tag(&r, 50);
        if (w < 0)
            continue;
        receiving = w == 1 && took(&r, &acked) && start_recv(call, &r);
    }
    gw_log_line_fd(1, json_pack("{s:s,s:I,s:I}", "msg", "done", "acked_through", (json_int_t)acked,
                                "expected", expected));
    /* Half-close; the server ends the call once its last reply is sent. */
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    if (grpc_call_start_batch(call, &op, 1, (void *)3, NULL) == GRPC_CALL_OK)
        (void)wait_tag((void *)3, -1);
    until = gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(5000, GPR_TIMESPAN));
    while (receiving) {
        int w = wait_tag(&r, 50);
        if (w < 0 && gpr_time_cmp(gpr_now(GPR_CLOCK_REALTIME), until) >= 0) {
            grpc_call_cancel(call, NULL);
            w = wait_tag(&r, -1);
        }
        if (w >= 0)
            receiving = w == 1 && took(&r, &acked) && start_recv(call, &r);
    }
    grpc_status_code status = GRPC_STATUS_UNKNOWN;
    grpc_slice details;
    grpc_metadata_array trailing;
    grpc_metadata_array_init(&trailing);
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    op.data.recv_status_on_client.trailing_metadata = &trailing;
    op.data.recv_status_on_client.status = &status;
    op.data.recv_status_on_client.status_details = &details;
    if (grpc_call_start_batch(call, &op, 1, (void *)4, NULL) == GRPC_CALL_OK &&
        wait_tag((void *)4, -1) >= 0) {
        gw_log_line_fd(
            1, json_pack("{s:s,s:s}", "msg", "ended", "status", gw_grpc_status_name(status)));
        grpc_slice_unref(details);
    }
    for (size_t i = 0; i < nmsgs; i++)
        grpc_byte_buffer_destroy(packed[i]);
    free(packed);
    grpc_metadata_array_destroy(&r.md);
    grpc_metadata_array_destroy(&trailing);
    grpc_call_unref(call);
    grpc_channel_destroy(ch);
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
    grpc_shutdown();
    return acked >= (uint64_t)expected ? 0 : 1;
}
