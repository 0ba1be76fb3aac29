/*
 * llmgw-watchload: many light Watch clients against one control plane, for
 * tests/bench/watchload.mjs (docs/BENCHMARKS.md, "Configuration at scale").
 *
 * Each simulated replica does what a data plane's client does on the wire
 * (dataplane/sync/dp_cpclient.c) and nothing else: it opens a Watch with
 * WatchRequest{replica_id, have_version} and a Report stream, and answers
 * every Snapshot with an Ack of its version. It does not parse or build the
 * document: the point is the control plane's cost of fanning a version out,
 * not a data plane's cost of taking it in.
 *
 * One thread drives every stream through one completion queue. Each
 * watcher has a channel of its own (a local subchannel pool), so each is a
 * connection of its own to the control plane, as real replicas are.
 *
 * A Snapshot is read field by field from the wire (version 1, document 2,
 * built_at_ms 3, base_version 4, delta 5), never unpacked whole: the version
 * does not depend on the body, and a message carrying a delta instead of a
 * document (issue 20) is counted as one. The WatchRequest carries
 * accepts_delta (field 3) unless --no-delta; a control plane that does not
 * know the field ignores it and sends whole documents.
 *
 *   llmgw-watchload --target HOST:PORT [--watchers N] [--prefix ID]
 *                   [--no-delta] [--max-seconds S]
 *
 * Prints JSON lines on stdout:
 *   {"msg":"ready","watchers":N,"version":V}        every watcher has a snapshot
 *   {"msg":"fanout","version":V,"watchers":N,"delta":0|1,"bytes":B,
 *    "first_ms":T,"p50_ms":T,"p99_ms":T,"last_ms":T}  every watcher has V
 *   {"msg":"done",...}                               counters, at exit
 * Times are wall-clock Unix milliseconds (with microseconds), so that
 * another process on the machine can subtract its own. A watcher counts
 * as having V when it received any version >= V (a control plane may skip
 * a version for a watcher that is still receiving an older one).
 *
 * Ends on SIGTERM or SIGINT, or after --max-seconds (default 3600):
 * cancels every call, drains the queue, exits 0. Loopback bench tool,
 * plaintext only; not installed.
 */
#include <errno.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gw_grpc.h"
#include "llmgw/v1/control.pb-c.h"

#define MAX_WATCHERS 10000
#define REOPEN_AFTER_MS 500
/* Versions followed at once: a run has a writer that waits for each. */
#define TRACKED 64

struct watcher;

/* One call (the Watch or the Report stream) of a watcher. */
struct wcall {
    struct watcher *w;
    grpc_call *call;
    struct gw_grpc_tag t_status, t_start, t_recv, t_send;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *send_bb, *recv_bb;
    int pending; /* batches in flight */
    int started, sending, ended;
};

struct watcher {
    int idx;
    char id[64];
    grpc_channel *channel;
    struct wcall *watch, *report;
    int64_t have;         /* the newest version received (0: none) */
    int64_t ack_pending;  /* the version to acknowledge next (-1: none) */
    int64_t reopen_at_ms; /* a session to start then (0: none due) */
};

/* A version some watcher received, and when each watcher had it. */
struct vtrack {
    int64_t version;
    int used, printed, delta;
    size_t bytes;
    int count;
    double *at_ms; /* by watcher index; 0: not yet */
};

static struct {
    const char *target, *prefix;
    int n, accepts_delta;
    long max_seconds;
    grpc_completion_queue *cq;
    struct watcher *w;
    struct vtrack track[TRACKED];
    int ready_printed;
    /* counters for the final line */
    uint64_t snapshots, deltas, documents, bytes, acks, stream_ends, reopens, unparsed;
} S;

static volatile sig_atomic_t stop_flag;

static void on_signal(int sig)
{
    (void)sig;
    stop_flag = 1;
}

static double wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ the wire */

/* A varint at *p (below end); 0 when it runs past end or is too long. */
static int get_varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = x;
            return 1;
        }
    }
    return 0;
}

struct snap_head {
    int64_t version, base_version;
    size_t document_len, delta_len;
    int has_delta;
};

/* Reads a Snapshot's numbers and the lengths of its bodies, skipping every
 * other field by its wire type: 0 when the message is not well formed. */
static int scan_snapshot(const uint8_t *p, size_t n, struct snap_head *h)
{
    const uint8_t *end = p + n;
    memset(h, 0, sizeof(*h));
    while (p < end) {
        uint64_t key, v;
        if (!get_varint(&p, end, &key))
            return 0;
        unsigned field = (unsigned)(key >> 3), type = (unsigned)(key & 7);
        switch (type) {
        case 0:
            if (!get_varint(&p, end, &v))
                return 0;
            if (field == 1)
                h->version = (int64_t)v;
            else if (field == 4)
                h->base_version = (int64_t)v;
            break;
        case 1:
            if (end - p < 8)
                return 0;
            p += 8;
            break;
        case 2:
            if (!get_varint(&p, end, &v) || v > (uint64_t)(end - p))
                return 0;
            if (field == 2)
                h->document_len = (size_t)v;
            else if (field == 5) {
                h->delta_len = (size_t)v;
                h->has_delta = v > 0;
            }
            p += v;
            break;
        case 5:
            if (end - p < 4)
                return 0;
            p += 4;
            break;
        default:
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------ versions */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void track_print(struct vtrack *t)
{
    double *v = malloc(sizeof(double) * (size_t)t->count);
    if (!v)
        return;
    int k = 0;
    for (int i = 0; i < S.n; i++)
        if (t->at_ms[i] > 0)
            v[k++] = t->at_ms[i];
    qsort(v, (size_t)k, sizeof(double), cmp_double);
    int i50 = (k * 50 + 99) / 100 - 1, i99 = (k * 99 + 99) / 100 - 1;
    printf("{\"msg\":\"fanout\",\"version\":%lld,\"watchers\":%d,\"of\":%d,\"delta\":%d,"
           "\"bytes\":%zu,\"first_ms\":%.3f,\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"last_ms\":%.3f}\n",
           (long long)t->version, k, S.n, t->delta, t->bytes, v[0], v[i50 < 0 ? 0 : i50],
           v[i99 < 0 ? 0 : i99], v[k - 1]);
    fflush(stdout);
    free(v);
    t->printed = 1;
}

/* The entry of version, made (the oldest replaced) when new. */
static struct vtrack *track_get(int64_t version, int make)
{
    struct vtrack *oldest = NULL;
    for (int i = 0; i < TRACKED; i++) {
        struct vtrack *t = &S.track[i];
        if (t->used && t->version == version)
            return t;
        if (!oldest || !t->used || (oldest->used && t->version < oldest->version))
            oldest = t;
    }
    if (!make)
        return NULL;
    if (oldest->used && !oldest->printed && oldest->count > 0)
        track_print(oldest); /* partial: some watchers never had it */
    double *at = oldest->at_ms;
    memset(at, 0, sizeof(double) * (size_t)S.n);
    memset(oldest, 0, sizeof(*oldest));
    oldest->at_ms = at;
    oldest->used = 1;
    oldest->version = version;
    return oldest;
}

/* Watcher w, which had version `had`, received version v at `now`. */
static void track_received(struct watcher *w, int64_t had, int64_t v, const struct snap_head *h,
                           double now)
{
    struct vtrack *t = track_get(v, 1);
    t->delta = h->has_delta;
    t->bytes = h->has_delta ? h->delta_len : h->document_len;
    for (int i = 0; i < TRACKED; i++) {
        t = &S.track[i];
        if (!t->used || t->version <= had || t->version > v || t->at_ms[w->idx] > 0)
            continue;
        t->at_ms[w->idx] = now;
        if (++t->count == S.n && !t->printed)
            track_print(t);
    }
    if (!S.ready_printed) {
        int all = 1;
        for (int i = 0; i < S.n && all; i++)
            all = S.w[i].have > 0;
        if (all) {
            S.ready_printed = 1;
            printf("{\"msg\":\"ready\",\"watchers\":%d,\"version\":%lld}\n", S.n, (long long)v);
            fflush(stdout);
        }
    }
}

/* ------------------------------------------------------------ calls */

static void session_start(struct watcher *w);

static int batch(struct wcall *k, const grpc_op *ops, size_t n, struct gw_grpc_tag *t)
{
    if (stop_flag) /* ending: every call is cancelled, nothing new starts */
        return -1;
    if (grpc_call_start_batch(k->call, ops, n, t, NULL) != GRPC_CALL_OK) {
        grpc_call_cancel(k->call, NULL);
        return -1;
    }
    k->pending++;
    return 0;
}

static void wcall_maybe_free(struct wcall *k)
{
    if (k->pending > 0)
        return;
    struct watcher *w = k->w;
    if (w->watch == k)
        w->watch = NULL;
    if (w->report == k)
        w->report = NULL;
    grpc_metadata_array_destroy(&k->initial_md);
    grpc_metadata_array_destroy(&k->trailing_md);
    grpc_slice_unref(k->details);
    if (k->send_bb)
        grpc_byte_buffer_destroy(k->send_bb);
    if (k->recv_bb)
        grpc_byte_buffer_destroy(k->recv_bb);
    grpc_call_unref(k->call);
    free(k);
    /* One call gone ends the session; the other follows, then it reopens. */
    if (w->watch)
        grpc_call_cancel(w->watch->call, NULL);
    if (w->report)
        grpc_call_cancel(w->report->call, NULL);
    if (!w->watch && !w->report && !stop_flag)
        w->reopen_at_ms = mono_ms() + REOPEN_AFTER_MS;
}

static void on_status(void *arg, int ok)
{
    (void)ok;
    struct wcall *k = arg;
    k->pending--;
    k->ended = 1;
    if (!stop_flag) {
        S.stream_ends++;
        if (S.stream_ends <= 5) {
            char *d = grpc_slice_to_c_string(k->details);
            fprintf(stderr, "watchload: %s stream of %s ended: %s %s\n",
                    k == k->w->watch ? "Watch" : "Report", k->w->id, gw_grpc_status_name(k->status),
                    d ? d : "");
            gpr_free(d);
        }
    }
    wcall_maybe_free(k);
}

static void recv_next(struct wcall *k)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &k->recv_bb;
    (void)batch(k, &op, 1, &k->t_recv);
}

static struct wcall *wcall_new(struct watcher *w, const char *method)
{
    struct wcall *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->w = w;
    k->details = grpc_empty_slice();
    grpc_metadata_array_init(&k->initial_md);
    grpc_metadata_array_init(&k->trailing_md);
    grpc_slice m = grpc_slice_from_static_string(method);
    k->call = grpc_channel_create_call(w->channel, NULL, GRPC_PROPAGATE_DEFAULTS, S.cq, m, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (!k->call) {
        grpc_metadata_array_destroy(&k->initial_md);
        grpc_metadata_array_destroy(&k->trailing_md);
        free(k);
        return NULL;
    }
    gw_grpc_tag_init(&k->t_status, on_status, k);
    /* The status batch first: it completes last (as dp_cpclient.c). */
    grpc_op op = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    op.data.recv_status_on_client.trailing_metadata = &k->trailing_md;
    op.data.recv_status_on_client.status = &k->status;
    op.data.recv_status_on_client.status_details = &k->details;
    if (batch(k, &op, 1, &k->t_status) != 0) {
        grpc_call_unref(k->call);
        grpc_metadata_array_destroy(&k->initial_md);
        grpc_metadata_array_destroy(&k->trailing_md);
        free(k);
        return NULL;
    }
    return k;
}

/* ------------------------------------------------------------ report */

/* Sends the pending Ack when the Report stream is up and idle. */
static void ack_pump(struct watcher *w)
{
    struct wcall *k = w->report;
    if (!k || !k->started || k->sending || k->ended || w->ack_pending < 0)
        return;
    Llmgw__V1__Ack ack = LLMGW__V1__ACK__INIT;
    Llmgw__V1__ReportMessage m = LLMGW__V1__REPORT_MESSAGE__INIT;
    ack.version = w->ack_pending;
    m.replica_id = w->id;
    m.body_case = LLMGW__V1__REPORT_MESSAGE__BODY_ACK;
    m.ack = &ack;
    k->send_bb = gw_grpc_pack(&m.base);
    if (!k->send_bb)
        return;
    w->ack_pending = -1;
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = k->send_bb;
    if (batch(k, &op, 1, &k->t_send) == 0) {
        k->sending = 1;
        S.acks++;
    }
}

static void on_report_send(void *arg, int ok)
{
    struct wcall *k = arg;
    k->pending--;
    k->sending = 0;
    grpc_byte_buffer_destroy(k->send_bb);
    k->send_bb = NULL;
    if (ok)
        ack_pump(k->w);
    wcall_maybe_free(k);
}

static void on_report_start(void *arg, int ok)
{
    struct wcall *k = arg;
    k->pending--;
    if (ok) {
        k->started = 1;
        recv_next(k);
        ack_pump(k->w);
    }
    wcall_maybe_free(k);
}

/* A ReportReply: nothing in it matters here; it is read so that the
 * control plane's replies never back up. */
static void on_report_recv(void *arg, int ok)
{
    struct wcall *k = arg;
    k->pending--;
    if (k->recv_bb) {
        grpc_byte_buffer_destroy(k->recv_bb);
        k->recv_bb = NULL;
        if (ok)
            recv_next(k);
    }
    wcall_maybe_free(k);
}

/* ------------------------------------------------------------ watch */

static void on_watch_recv(void *arg, int ok)
{
    struct wcall *k = arg;
    struct watcher *w = k->w;
    double now = wall_ms();
    k->pending--;
    grpc_byte_buffer *bb = k->recv_bb;
    k->recv_bb = NULL;
    if (ok && bb) {
        grpc_byte_buffer_reader r;
        struct snap_head h;
        int good = 0;
        if (grpc_byte_buffer_reader_init(&r, bb)) {
            grpc_slice s = grpc_byte_buffer_reader_readall(&r);
            grpc_byte_buffer_reader_destroy(&r);
            good =
                scan_snapshot(GRPC_SLICE_START_PTR(s), GRPC_SLICE_LENGTH(s), &h) && h.version > 0;
            S.bytes += GRPC_SLICE_LENGTH(s);
            grpc_slice_unref(s);
        }
        grpc_byte_buffer_destroy(bb);
        if (good) {
            S.snapshots++;
            if (h.has_delta)
                S.deltas++;
            else
                S.documents++;
            int64_t had = w->have;
            if (h.version > w->have)
                w->have = h.version;
            track_received(w, had, h.version, &h, now);
            w->ack_pending = h.version;
            ack_pump(w);
        } else {
            S.unparsed++;
        }
        recv_next(k);
    } else if (bb) {
        grpc_byte_buffer_destroy(bb);
    }
    wcall_maybe_free(k);
}

static void on_watch_start(void *arg, int ok)
{
    struct wcall *k = arg;
    k->pending--;
    grpc_byte_buffer_destroy(k->send_bb);
    k->send_bb = NULL;
    if (ok) {
        k->started = 1;
        recv_next(k);
    }
    wcall_maybe_free(k);
}

/* The WatchRequest, with accepts_delta = true appended as field 3 when
 * asked: protobuf concatenation, so it needs no generated field. */
static grpc_byte_buffer *watch_request(const struct watcher *w)
{
    Llmgw__V1__WatchRequest req = LLMGW__V1__WATCH_REQUEST__INIT;
    req.replica_id = (char *)w->id;
    req.have_version = w->have;
    size_t n = protobuf_c_message_get_packed_size(&req.base);
    uint8_t *buf = malloc(n + 20);
    if (!buf)
        return NULL;
    protobuf_c_message_pack(&req.base, buf);
    if (S.accepts_delta)
        n += gw_pb_field_varint(buf + n, 3, 1);
    grpc_byte_buffer *bb = gw_grpc_raw(buf, n);
    free(buf);
    return bb;
}

static void session_start(struct watcher *w)
{
    w->reopen_at_ms = 0;
    w->watch = wcall_new(w, "/llmgw.v1.Control/Watch");
    w->report = w->watch ? wcall_new(w, "/llmgw.v1.Control/Report") : NULL;
    if (!w->watch || !w->report) {
        fprintf(stderr, "watchload: %s: cannot create a call\n", w->id);
        if (w->watch)
            grpc_call_cancel(w->watch->call, NULL);
        else
            w->reopen_at_ms = mono_ms() + REOPEN_AFTER_MS;
        return;
    }
    struct wcall *k = w->watch;
    k->send_bb = watch_request(w);
    gw_grpc_tag_init(&k->t_start, on_watch_start, k);
    gw_grpc_tag_init(&k->t_recv, on_watch_recv, k);
    grpc_op ops[4] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                      {.op = GRPC_OP_SEND_MESSAGE},
                      {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT},
                      {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    ops[1].data.send_message.send_message = k->send_bb;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &k->initial_md;
    if (!k->send_bb || batch(k, ops, 4, &k->t_start) != 0)
        grpc_call_cancel(k->call, NULL);

    struct wcall *r = w->report;
    gw_grpc_tag_init(&r->t_start, on_report_start, r);
    gw_grpc_tag_init(&r->t_recv, on_report_recv, r);
    gw_grpc_tag_init(&r->t_send, on_report_send, r);
    grpc_op rops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                       {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    rops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    rops[1].data.recv_initial_metadata.recv_initial_metadata = &r->initial_md;
    if (batch(r, rops, 2, &r->t_start) != 0)
        grpc_call_cancel(r->call, NULL);
}

/* ------------------------------------------------------------ main */

static void usage(void)
{
    fprintf(stderr, "usage: llmgw-watchload --target HOST:PORT [--watchers N] [--prefix ID] "
                    "[--no-delta] [--max-seconds S]\n");
    exit(2);
}

static long number(const char *s, long lo, long hi)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        usage();
    return v;
}

static void parse_args(int argc, char **argv)
{
    S.n = 200;
    S.prefix = "wl";
    S.accepts_delta = 1;
    S.max_seconds = 3600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-delta") == 0) {
            S.accepts_delta = 0;
            continue;
        }
        if (!v)
            usage();
        if (strcmp(a, "--target") == 0)
            S.target = v;
        else if (strcmp(a, "--watchers") == 0)
            S.n = (int)number(v, 1, MAX_WATCHERS);
        else if (strcmp(a, "--prefix") == 0)
            S.prefix = v;
        else if (strcmp(a, "--max-seconds") == 0)
            S.max_seconds = number(v, 1, 86400);
        else
            usage();
        i++;
    }
    if (!S.target)
        usage();
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    grpc_init();
    S.cq = grpc_completion_queue_create_for_next(NULL);
    S.w = calloc((size_t)S.n, sizeof(*S.w));
    for (int i = 0; i < TRACKED && S.w; i++)
        if (!(S.track[i].at_ms = calloc((size_t)S.n, sizeof(double))))
            S.w = NULL;
    if (!S.cq || !S.w) {
        fprintf(stderr, "watchload: out of memory\n");
        return 1;
    }
    /* No limit on what a Snapshot may weigh (a whole document of a large
     * configuration); a subchannel per channel, so a connection each. */
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH, .value.integer = -1},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, .value.integer = 1},
    };
    grpc_channel_args ca = {.num_args = sizeof(args) / sizeof(*args), .args = args};
    grpc_channel_credentials *cr = grpc_insecure_credentials_create();
    for (int i = 0; i < S.n; i++) {
        struct watcher *w = &S.w[i];
        w->idx = i;
        w->ack_pending = -1;
        snprintf(w->id, sizeof(w->id), "%s-%04d", S.prefix, i);
        w->channel = grpc_channel_create(S.target, cr, &ca);
        if (!w->channel) {
            fprintf(stderr, "watchload: cannot create a channel to %s\n", S.target);
            return 1;
        }
        session_start(w);
    }
    grpc_channel_credentials_release(cr);

    int64_t end_at = mono_ms() + S.max_seconds * 1000;
    while (!stop_flag && mono_ms() < end_at) {
        gpr_timespec dl =
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN));
        grpc_event e = grpc_completion_queue_next(S.cq, dl, NULL);
        if (e.type == GRPC_OP_COMPLETE) {
            struct gw_grpc_tag *t = e.tag;
            t->cb(t->ctx, e.success);
            continue;
        }
        int64_t now = mono_ms();
        for (int i = 0; i < S.n; i++) {
            struct watcher *w = &S.w[i];
            if (w->reopen_at_ms && now >= w->reopen_at_ms && !w->watch && !w->report) {
                S.reopens++;
                session_start(w);
            }
        }
    }

    /* Orderly end: cancel every call, run the completions still owed,
     * then shut the queue down. */
    stop_flag = 1;
    for (int i = 0; i < S.n; i++) {
        if (S.w[i].watch)
            grpc_call_cancel(S.w[i].watch->call, NULL);
        if (S.w[i].report)
            grpc_call_cancel(S.w[i].report->call, NULL);
    }
    int64_t drain_until = mono_ms() + 10000;
    for (;;) {
        int open = 0;
        for (int i = 0; i < S.n; i++)
            open += S.w[i].watch != NULL || S.w[i].report != NULL;
        if (!open || mono_ms() > drain_until)
            break;
        gpr_timespec dl =
            gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(100, GPR_TIMESPAN));
        grpc_event e = grpc_completion_queue_next(S.cq, dl, NULL);
        if (e.type == GRPC_OP_COMPLETE) {
            struct gw_grpc_tag *t = e.tag;
            t->cb(t->ctx, e.success);
        }
    }
    for (int i = 0; i < TRACKED; i++)
        if (S.track[i].used && !S.track[i].printed && S.track[i].count > 0)
            track_print(&S.track[i]);
    printf("{\"msg\":\"done\",\"watchers\":%d,\"snapshots\":%llu,\"documents\":%llu,"
           "\"deltas\":%llu,\"bytes\":%llu,\"acks\":%llu,\"stream_ends\":%llu,\"reopens\":%llu,"
           "\"unparsed\":%llu}\n",
           S.n, (unsigned long long)S.snapshots, (unsigned long long)S.documents,
           (unsigned long long)S.deltas, (unsigned long long)S.bytes, (unsigned long long)S.acks,
           (unsigned long long)S.stream_ends, (unsigned long long)S.reopens,
           (unsigned long long)S.unparsed);
    fflush(stdout);
    for (int i = 0; i < S.n; i++)
        grpc_channel_destroy(S.w[i].channel);
    grpc_completion_queue_shutdown(S.cq);
    while (grpc_completion_queue_next(S.cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(S.cq);
    for (int i = 0; i < TRACKED; i++)
        free(S.track[i].at_ms);
    free(S.w);
    grpc_shutdown_blocking();
    return 0;
}
