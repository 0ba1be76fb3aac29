#include "gw_grpc.h"

#include <errno.h>
#include <event2/event.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* One completed operation on its way from the queue's thread to the loop. */
struct done {
    struct done *next;
    struct gw_grpc_tag *tag;
    int ok;
};

struct gw_grpc_loop {
    grpc_completion_queue *cq;
    pthread_t thread;
    int thread_started;
    int efd;
    struct event *ev;
    pthread_mutex_t lock;
    struct done *head, *tail; /* under lock */
    int shut;
};

static void push(struct gw_grpc_loop *l, struct done *d)
{
    pthread_mutex_lock(&l->lock);
    if (l->tail)
        l->tail->next = d;
    else
        l->head = d;
    l->tail = d;
    pthread_mutex_unlock(&l->lock);
}

static void *cq_thread(void *arg)
{
    struct gw_grpc_loop *l = arg;
    for (;;) {
        grpc_event e = grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (e.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (e.type != GRPC_OP_COMPLETE)
            continue;
        struct done *d = malloc(sizeof(*d));
        if (!d)
            abort(); /* a lost completion would leak a call forever */
        d->next = NULL;
        d->tag = e.tag;
        d->ok = e.success;
        push(l, d);
        uint64_t one = 1;
        while (write(l->efd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
    }
    return NULL;
}

/* Runs every completion queued so far. A callback may start new batches,
 * whose completions land on the list again and run on a later pass. */
static void run_done(struct gw_grpc_loop *l)
{
    pthread_mutex_lock(&l->lock);
    struct done *d = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->lock);
    while (d) {
        struct done *next = d->next;
        d->tag->cb(d->tag->ctx, d->ok);
        free(d);
        d = next;
    }
}

static void on_efd(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    uint64_t n;
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN && errno != EINTR)
        return;
    run_done(arg);
}

struct gw_grpc_loop *gw_grpc_loop_new(struct event_base *base)
{
    struct gw_grpc_loop *l = calloc(1, sizeof(*l));
    if (!l)
        return NULL;
    grpc_init();
    pthread_mutex_init(&l->lock, NULL);
    l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->cq = grpc_completion_queue_create_for_next(NULL);
    if (l->efd < 0 || !l->cq)
        goto fail;
    l->ev = event_new(base, l->efd, EV_READ | EV_PERSIST, on_efd, l);
    if (!l->ev || event_add(l->ev, NULL) != 0)
        goto fail;
    if (pthread_create(&l->thread, NULL, cq_thread, l) != 0)
        goto fail;
    l->thread_started = 1;
    return l;
fail:
    gw_grpc_loop_free(l);
    return NULL;
}

grpc_completion_queue *gw_grpc_loop_cq(struct gw_grpc_loop *l)
{
    return l->cq;
}

void gw_grpc_loop_run_until(struct gw_grpc_loop *l, const int *flag)
{
    while (!*flag) {
        struct pollfd p = {.fd = l->efd, .events = POLLIN};
        if (poll(&p, 1, 1000) > 0) {
            uint64_t n;
            if (read(l->efd, &n, sizeof(n)) < 0 && errno != EAGAIN && errno != EINTR)
                return;
        }
        run_done(l);
    }
}

void gw_grpc_loop_shutdown(struct gw_grpc_loop *l)
{
    if (!l || l->shut)
        return;
    l->shut = 1;
    if (l->cq)
        grpc_completion_queue_shutdown(l->cq);
    if (l->thread_started) {
        pthread_join(l->thread, NULL);
        l->thread_started = 0;
    }
    /* The thread saw GRPC_QUEUE_SHUTDOWN: every completion is on the list. */
    run_done(l);
}

void gw_grpc_loop_free(struct gw_grpc_loop *l)
{
    if (!l)
        return;
    if (l->cq && !l->thread_started && !l->shut) {
        /* Never started: nothing was queued, but the queue must still be
         * shut down and drained before it is destroyed. */
        l->shut = 1;
        grpc_completion_queue_shutdown(l->cq);
        while (grpc_completion_queue_next(l->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
               GRPC_QUEUE_SHUTDOWN)
            ;
    }
    gw_grpc_loop_shutdown(l);
    if (l->ev)
        event_free(l->ev);
    if (l->cq)
        grpc_completion_queue_destroy(l->cq);
    if (l->efd >= 0)
        close(l->efd);
    pthread_mutex_destroy(&l->lock);
    free(l);
    /* grpc_shutdown() only starts the library's clean-up, on a thread of
     * its own: a process that exits right after it leaves gRPC's TLS state
     * half freed (LeakSanitizer saw a handshake's OpenSSL objects after a
     * data plane that trusted the wrong CA stopped). The loop is released
     * from our own threads, never from one of gRPC's, as the blocking form
     * requires. */
    grpc_shutdown_blocking();
}

grpc_byte_buffer *gw_grpc_pack(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(m, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

grpc_byte_buffer *gw_grpc_raw(const void *data, size_t len)
{
    grpc_slice s = grpc_slice_from_copied_buffer(data, len);
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    return bb;
}

size_t gw_pb_varint(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

size_t gw_pb_field_varint(unsigned char *out, unsigned field, uint64_t v)
{
    size_t n = gw_pb_varint(out, (uint64_t)field << 3);
    return n + gw_pb_varint(out + n, v);
}

size_t gw_pb_field_len(unsigned char *out, unsigned field, size_t len)
{
    size_t n = gw_pb_varint(out, ((uint64_t)field << 3) | 2);
    return n + gw_pb_varint(out + n, len);
}

ProtobufCMessage *gw_grpc_unpack(const ProtobufCMessageDescriptor *d, grpc_byte_buffer *bb,
                                 size_t max)
{
    if (!bb || grpc_byte_buffer_length(bb) > max)
        return NULL;
    grpc_byte_buffer_reader r;
    if (!grpc_byte_buffer_reader_init(&r, bb))
        return NULL;
    grpc_slice s = grpc_byte_buffer_reader_readall(&r);
    grpc_byte_buffer_reader_destroy(&r);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(d, NULL, GRPC_SLICE_LENGTH(s), GRPC_SLICE_START_PTR(s));
    grpc_slice_unref(s);
    return m;
}

const char *gw_grpc_status_name(grpc_status_code code)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    if ((int)code >= 0 && (size_t)code < sizeof(names) / sizeof(*names))
        return names[code];
    return "UNKNOWN";
}
