/*
 * gw_grpc: the one thin wrapper over the gRPC C core (STACK.md, "gRPC C
 * core"). Both planes speak gRPC through it: the control plane's Watch and
 * Report server (controlplane/grpc/cp_grpc.c) and the data plane's client
 * (dataplane/sync/dp_cpclient.c).
 *
 * A gw_grpc_loop joins one completion queue to one libevent loop: a thread
 * blocks in grpc_completion_queue_next and hands every (tag, ok) to the
 * loop through an eventfd, so every callback, and therefore all call state,
 * lives on the loop's thread. A tag is a small struct {callback, context}
 * that the caller embeds in its own objects.
 *
 * Shutdown is ordered: the owner cancels its calls (and shuts its server
 * down), then gw_grpc_loop_shutdown shuts the queue down, drains it to
 * GRPC_QUEUE_SHUTDOWN and runs the callbacks still owed (with their ok), so
 * that every context is released; only then gw_grpc_loop_free destroys the
 * queue. Callbacks run during the drain must start no new batch: owners keep
 * a "closing" flag for that.
 */
#ifndef GW_GRPC_H
#define GW_GRPC_H

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

struct event_base;

typedef void (*gw_grpc_cb)(void *ctx, int ok);

struct gw_grpc_tag {
    gw_grpc_cb cb;
    void *ctx;
};

static inline void gw_grpc_tag_init(struct gw_grpc_tag *t, gw_grpc_cb cb, void *ctx)
{
    t->cb = cb;
    t->ctx = ctx;
}

struct gw_grpc_loop;

/* Initialises gRPC (grpc_init), creates a completion queue for next and its
 * thread, and an event on base that runs the callbacks. NULL on failure. */
struct gw_grpc_loop *gw_grpc_loop_new(struct event_base *base);
grpc_completion_queue *gw_grpc_loop_cq(struct gw_grpc_loop *l);
/* Runs callbacks on the calling thread (the loop's), blocking, until *flag
 * becomes non-zero: for a step of an orderly shutdown that must complete
 * before the next (a server's shutdown notification). */
void gw_grpc_loop_run_until(struct gw_grpc_loop *l, const int *flag);
/* Shuts the queue down, waits for GRPC_QUEUE_SHUTDOWN and runs every
 * callback still owed, on the calling thread (the loop's). Idempotent. */
void gw_grpc_loop_shutdown(struct gw_grpc_loop *l);
/* Shuts down if needed, destroys the queue and releases gRPC (grpc_shutdown). */
void gw_grpc_loop_free(struct gw_grpc_loop *l);

/* A protobuf-c message packed into a new byte buffer (the caller owns it,
 * grpc_byte_buffer_destroy), or NULL when out of memory. */
grpc_byte_buffer *gw_grpc_pack(const ProtobufCMessage *m);
/* Unpacks a received byte buffer (not consumed) into a message of type d,
 * freed with protobuf_c_message_free_unpacked; NULL when it does not parse
 * or is larger than max bytes. */
ProtobufCMessage *gw_grpc_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                                 size_t max);

/* Raw bytes (an already encoded message) in a new byte buffer, or NULL. */
grpc_byte_buffer *gw_grpc_raw(const void *data, size_t len);

/* Protobuf wire encoding, for messages assembled from parts that are
 * already encoded (a spooled ledger row, a queued grant): appends to a
 * buffer of at least the room asked for (each returns the bytes written).
 * A varint takes at most 10 bytes; a tag and a length, 20. */
size_t gw_pb_varint(unsigned char *out, uint64_t v);
/* field's key (wire type 0) and v */
size_t gw_pb_field_varint(unsigned char *out, unsigned field, uint64_t v);
/* field's key (wire type 2) and len; the len bytes follow */
size_t gw_pb_field_len(unsigned char *out, unsigned field, size_t len);

/* A status code's name ("UNAVAILABLE"), for logs. */
const char *gw_grpc_status_name(grpc_status_code code);

#endif
