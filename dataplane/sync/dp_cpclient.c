/*
 * dp_cpclient's session: one Watch and one Report stream (snapshots built,
 * published and acknowledged; lease messages, ledger rows and outcome
 * summaries sent; grants and fleet views taken in), their restart with
 * backoff, and the client's thread. Reaching the control plane (addresses,
 * channels, TLS, the probe) is dp_cpclient_conn.c.
 */
#include "dp_cpclient.h"

#include <event2/event.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_cpclient_int.h"
#include "dp_fleet.h"
#include "dp_ledger.h"
#include "dp_limits.h"
#include "dp_metrics.h"
#include "dp_outcomes.h"
#include "dp_snapcache.h"
#include "dp_snapshot.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_grpc.h"
#include "gw_log.h"
#include "gw_rand.h"
#include "gw_time.h"
#include "llmgw/v1/control.pb-c.h"

#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define PROBE_EVERY_MS 1000
/* Ledger rows sent and not yet acknowledged, at most (flow control: the
 * control plane's queue is bounded by this per stream). */
#define LEDGER_WINDOW 2048
/* Rows in one LedgerBatch at most, whatever the control plane takes. */
#define LEDGER_BATCH_MAX 256
/* A new Report stream sends no rows until the control plane's first reply
 * says whether it takes batches (it answers the stream's first summary at
 * once), or for this long (an older one): the rows a reconnection
 * replays, thousands after an outage, then go in batches. */
#define LEDGER_FIRST_REPLY_US 1000000
#define LEDGER_SYNC_MS 1000
#define MAX_REPLY_BYTES (4u << 20)
/* The fleet view's input (docs/fleet.md): an OutcomeSummary every second,
 * and sooner (but at most every SUMMARY_MIN_GAP_MS) after a breaker changed
 * state or a fleet probe ended. */
#define SUMMARY_EVERY_MS 1000
#define SUMMARY_MIN_GAP_MS 100

static void session_start(struct dp_cpclient *c);
static void summary_soon(struct dp_cpclient *c);

/* ------------------------------------------------------------ calls */

static struct ccall *ccall_new(struct dp_cpclient *c, const char *method);
static void ccall_maybe_free(struct ccall *k);
static int watch_start(struct dp_cpclient *c);

/* The next session goes to the next address (several --control-plane
 * addresses): a control plane that died, or cannot be reached, is left
 * for another at once. */
static void next_address(struct dp_cpclient *c)
{
    if (c->naddrs < 2)
        return;
    size_t next = (c->cur + 1) % c->naddrs;
    grpc_channel *ch = dpc_channel_for(c, next);
    if (!ch)
        return;
    c->cur = next;
    c->channel = ch;
    gw_logf(GW_LOG_INFO, "control plane: trying the next address", "{s:s}", "control_plane",
            c->addrs[c->cur]);
}

static void maybe_restart(struct dp_cpclient *c)
{
    if (c->watch || c->report || c->stopping)
        return;
    if (c->got_snapshot)
        c->backoff_ms = BACKOFF_MIN_MS;
    next_address(c);
    /* Full jitter over the upper half: replicas do not reconnect in step. */
    long d = c->backoff_ms / 2 + (long)gw_rand_below(&c->rng, (uint64_t)(c->backoff_ms / 2 + 1));
    c->backoff_ms = c->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : c->backoff_ms * 2;
    struct timeval tv = {d / 1000, (d % 1000) * 1000};
    evtimer_add(c->retry_ev, &tv);
}

static void ccall_maybe_free(struct ccall *k)
{
    if (k->pending > 0)
        return;
    struct dp_cpclient *c = k->c;
    int reopen = 0;
    if (c->watch == k) {
        c->watch = NULL;
        reopen = c->rewatch && c->report && !c->stopping;
        c->rewatch = 0;
        if (!reopen)
            dp_metrics_controlplane_connected(0);
    }
    if (c->report == k) {
        c->report = NULL;
        __atomic_store_n(&c->report_up, 0, __ATOMIC_RELEASE);
        dp_limits_on_stream(0);
    }
    grpc_metadata_array_destroy(&k->initial_md);
    grpc_metadata_array_destroy(&k->trailing_md);
    grpc_slice_unref(k->details);
    if (k->recv_bb)
        grpc_byte_buffer_destroy(k->recv_bb);
    if (k->send_bb)
        grpc_byte_buffer_destroy(k->send_bb);
    grpc_call_unref(k->call);
    free(k);
    /* A Watch ended to ask for the whole document: another, at once, beside
     * the same Report stream. */
    if (reopen && watch_start(c) == GW_OK)
        return;
    /* The other call of the session goes too; then the session restarts. */
    if (c->watch)
        grpc_call_cancel(c->watch->call, NULL);
    if (c->report)
        grpc_call_cancel(c->report->call, NULL);
    maybe_restart(c);
}

static int batch(struct ccall *k, const grpc_op *ops, size_t n, struct gw_grpc_tag *t)
{
    if (k->c->stopping)
        return GW_ECLOSED;
    grpc_call_error e = grpc_call_start_batch(k->call, ops, n, t, NULL);
    if (e != GRPC_CALL_OK) {
        gw_logf(GW_LOG_ERROR, "control plane: cannot start a gRPC batch", "{s:i}", "error", (int)e);
        grpc_call_cancel(k->call, NULL);
        return GW_EIO;
    }
    k->pending++;
    return GW_OK;
}

static void on_status(void *arg, int ok)
{
    struct ccall *k = arg;
    k->pending--;
    k->ended = 1;
    struct dp_cpclient *c = k->c;
    if (!c->stopping && !(k == c->watch && c->rewatch)) {
        char *d = grpc_slice_to_c_string(k->details);
        gw_logf(GW_LOG_WARN, "control plane: stream ended; reconnecting", "{s:s,s:s,s:s}", "call",
                k == c->watch ? "Watch" : "Report", "status", gw_grpc_status_name(k->status),
                "detail", d ? d : "");
        gpr_free(d);
    }
    ccall_maybe_free(k);
}

static void ccall_recv(struct ccall *k)
{
    grpc_op op = {.op = GRPC_OP_RECV_MESSAGE};
    op.data.recv_message.recv_message = &k->recv_bb;
    (void)batch(k, &op, 1, &k->t_recv);
}

/* ------------------------------------------------------------ report */

/* Sends a harvested OutcomeSummary, when one waits: 1 when it went (or
 * failed to). */
static int summary_send(struct dp_cpclient *c, struct ccall *k)
{
    if (!c->summary_bb)
        return 0;
    k->send_bb = c->summary_bb;
    c->summary_bb = NULL;
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = k->send_bb;
    if (batch(k, &op, 1, &k->t_send) == GW_OK)
        k->sending = 1;
    return 1;
}

/* The next lease message of dp_limits, packed; NULL: none. */
static grpc_byte_buffer *lease_out(struct dp_cpclient *c)
{
    Llmgw__V1__ReportMessage m = LLMGW__V1__REPORT_MESSAGE__INIT;
    struct dp_limits_out st;
    if (!dp_limits_next_out(&m, &st))
        return NULL;
    m.replica_id = (char *)c->cfg->replica_id;
    return gw_grpc_pack(&m.base);
}

/* Sends the next Report message: an outcome summary when one waits, an
 * Ack, then lease messages (a request may be waiting for a grant), then
 * ledger rows: what is ready, in one LedgerBatch once a reply said the
 * control plane takes them. One send is in flight at a time; each
 * completion pumps again, so rows recorded while a send is out go
 * together in the next. */
void dpc_report_pump(struct dp_cpclient *c)
{
    struct ccall *k = c->report;
    if (!k || !k->started || k->sending || k->ended)
        return;
    if (summary_send(c, k))
        return;
    if (c->ack_pending >= 0) {
        Llmgw__V1__Ack ack = LLMGW__V1__ACK__INIT;
        Llmgw__V1__ReportMessage m = LLMGW__V1__REPORT_MESSAGE__INIT;
        ack.version = c->ack_pending;
        m.replica_id = (char *)c->cfg->replica_id;
        m.body_case = LLMGW__V1__REPORT_MESSAGE__BODY_ACK;
        m.ack = &ack;
        k->send_bb = gw_grpc_pack(&m.base);
        c->ack_pending = -1;
    } else if (!(k->send_bb = lease_out(c))) {
        unsigned char *row;
        size_t n;
        if (!k->replied && gw_now_us() - k->started_us < LEDGER_FIRST_REPLY_US)
            return; /* the sync tick pumps again */
        const char *id = c->cfg->replica_id;
        int got = dp_ledger_next(id, LEDGER_WINDOW, k->ledger_batch_max, &row, &n);
        if (got == 0) {
            /* Nothing (more) to send: the next row recorded wakes this
             * thread again; one recorded just before is found by the
             * second look. */
            __atomic_store_n(&c->ledger_kick, 0, __ATOMIC_SEQ_CST);
            got = dp_ledger_next(id, LEDGER_WINDOW, k->ledger_batch_max, &row, &n);
        }
        if (got <= 0)
            return;
        k->send_bb = gw_grpc_raw(row, n);
        free(row);
    }
    if (!k->send_bb)
        return;
    grpc_op op = {.op = GRPC_OP_SEND_MESSAGE};
    op.data.send_message.send_message = k->send_bb;
    if (batch(k, &op, 1, &k->t_send) == GW_OK)
        k->sending = 1;
}

/* A worker recorded a row (or dp_limits has a lease message). Workers
 * wake this thread only while ledger_kick is clear: it is set from the
 * first row until the pump finds nothing left to send, and while a send
 * is out its completion pumps again, so under load the rows cost no
 * wake-ups of their own. */
static void on_ledger(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dpc_report_pump(arg);
}

static void ledger_notify(void *arg)
{
    struct dp_cpclient *c = arg;
    if (!__atomic_exchange_n(&c->ledger_kick, 1, __ATOMIC_SEQ_CST))
        event_active(c->ledger_ev, 0, 0);
}

static void on_sync(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    dp_ledger_sync();
    dpc_report_pump(arg); /* dp_limits' periodic work: renewals, idle releases */
}

static void on_report_send(void *arg, int ok)
{
    struct ccall *k = arg;
    k->pending--;
    k->sending = 0;
    grpc_byte_buffer_destroy(k->send_bb);
    k->send_bb = NULL;
    if (ok)
        dpc_report_pump(k->c);
    ccall_maybe_free(k);
}

static void on_report_start(void *arg, int ok)
{
    struct ccall *k = arg;
    k->pending--;
    if (ok) {
        k->started = 1;
        k->started_us = gw_now_us();
        __atomic_store_n(&k->c->report_up, 1, __ATOMIC_RELEASE);
        dp_limits_on_stream(1);
        ccall_recv(k);
        /* The control plane learns of this stream, and answers with its view. */
        summary_soon(k->c);
        dpc_report_pump(k->c);
    }
    ccall_maybe_free(k);
}

/* A FleetView from the control plane. */
static void view_apply(const Llmgw__V1__FleetView *v)
{
    if (dp_fleet_apply(v, gw_now_us()) != GW_OK)
        gw_log(GW_LOG_ERROR, "fleet view: out of memory; keeping the last one", NULL);
}

/* A ReportReply: the ledger rows stored so far on this stream. */
static void on_report_recv(void *arg, int ok)
{
    struct ccall *k = arg;
    k->pending--;
    grpc_byte_buffer *bb = k->recv_bb;
    k->recv_bb = NULL;
    if (bb) {
        Llmgw__V1__ReportReply *r = (Llmgw__V1__ReportReply *)gw_grpc_unpack(
            &llmgw__v1__report_reply__descriptor, bb, MAX_REPLY_BYTES);
        grpc_byte_buffer_destroy(bb);
        if (r) {
            k->replied = 1;
            k->ledger_batch_max =
                r->ledger_batch_max < LEDGER_BATCH_MAX ? r->ledger_batch_max : LEDGER_BATCH_MAX;
            if (r->view && k->c->report == k)
                view_apply(r->view);
            if (r->acked_through && k->c->report == k)
                dp_ledger_acked(r->acked_through);
            for (size_t i = 0; i < r->n_grants; i++)
                dp_limits_on_grant(r->grants[i]);
            protobuf_c_message_free_unpacked(&r->base, NULL);
        } else {
            gw_log(GW_LOG_WARN, "control plane: a ReportReply did not parse; ignored", NULL);
        }
        if (ok) {
            ccall_recv(k);
            dpc_report_pump(k->c); /* the window may have opened */
        }
    }
    ccall_maybe_free(k);
}

/* ------------------------------------------------------------ fleet
 *
 * Every SUMMARY_EVERY_MS, while the Report stream is up, what the workers
 * recorded (dp_outcomes) is harvested into one OutcomeSummary and sent
 * ahead of the ledger rows; while the stream is down nothing is harvested,
 * so the next summary covers the whole gap. A breaker change or a fleet
 * probe's verdict wakes the timer early (at most every SUMMARY_MIN_GAP_MS),
 * so the control plane hears of an outage within milliseconds, not a
 * second. The same tick expires a view the control plane stopped
 * refreshing (dp_fleet_tick). */

static void summary_arm(struct dp_cpclient *c, int64_t due_us)
{
    int64_t now = gw_now_us();
    if (due_us < now)
        due_us = now;
    c->summary_due_us = due_us;
    int64_t d = due_us - now;
    struct timeval tv = {(time_t)(d / 1000000), (suseconds_t)(d % 1000000)};
    evtimer_add(c->summary_ev, &tv);
}

static void on_summary(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_cpclient *c = arg;
    int64_t now = gw_now_us();
    dp_fleet_tick(now);
    summary_arm(c, now + SUMMARY_EVERY_MS * 1000);
    if (c->stopping || c->summary_bb || !c->report || !c->report->started || c->report->ended)
        return;
    int64_t wall = gw_wall_ms();
    Llmgw__V1__OutcomeSummary *sum = dp_outcomes_harvest(c->summary_since_ms, wall);
    c->summary_since_ms = wall;
    c->summary_sent_us = now;
    if (!sum)
        return;
    sum->view_version = dp_fleet_version(now);
    Llmgw__V1__ReportMessage m = LLMGW__V1__REPORT_MESSAGE__INIT;
    m.replica_id = (char *)c->cfg->replica_id;
    m.body_case = LLMGW__V1__REPORT_MESSAGE__BODY_OUTCOME_SUMMARY;
    m.outcome_summary = sum;
    c->summary_bb = gw_grpc_pack(&m.base);
    dp_outcomes_summary_free(sum);
    dpc_report_pump(c);
}

/* A summary as soon as the minimum gap allows (cpclient thread). */
static void summary_soon(struct dp_cpclient *c)
{
    int64_t due = c->summary_sent_us + SUMMARY_MIN_GAP_MS * 1000;
    if (due < c->summary_due_us)
        summary_arm(c, due);
}

static void on_summary_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    summary_soon(arg);
}

/* dp_outcomes' notification, on any thread. */
static void summary_notify(void *arg)
{
    struct dp_cpclient *c = arg;
    event_active(c->summary_wake_ev, 0, 0);
}

/* ------------------------------------------------------------ watch */

static void on_watch_recv(void *arg, int ok)
{
    struct ccall *k = arg;
    struct dp_cpclient *c = k->c;
    k->pending--;
    grpc_byte_buffer *bb = k->recv_bb;
    k->recv_bb = NULL;
    if (ok && bb) {
        ProtobufCMessage *m =
            gw_grpc_unpack(&llmgw__v1__snapshot__descriptor, bb, MAX_SNAPSHOT_BYTES);
        grpc_byte_buffer_destroy(bb);
        if (m) {
            Llmgw__V1__Snapshot *snap = (Llmgw__V1__Snapshot *)m;
            dpc_apply_snapshot(c, snap);
            /* The document's text carries the credentials too. */
            if (snap->document.data)
                explicit_bzero(snap->document.data, snap->document.len);
            /* So do a delta's. */
            if (snap->delta.data)
                explicit_bzero(snap->delta.data, snap->delta.len);
            protobuf_c_message_free_unpacked(m, NULL);
        } else {
            gw_log(GW_LOG_ERROR,
                   "pushed snapshot message does not parse; keeping the last good one", NULL);
        }
        if (!c->rewatch)
            ccall_recv(k);
    } else if (bb) {
        grpc_byte_buffer_destroy(bb);
    }
    ccall_maybe_free(k);
}

static void on_watch_start(void *arg, int ok)
{
    struct ccall *k = arg;
    k->pending--;
    grpc_byte_buffer_destroy(k->send_bb);
    k->send_bb = NULL;
    if (ok) {
        dp_metrics_controlplane_connected(1); /* the server's headers arrived */
        k->c->session_up = 1;
        ccall_recv(k);
    }
    ccall_maybe_free(k);
}

/* ------------------------------------------------------------ session */

static struct ccall *ccall_new(struct dp_cpclient *c, const char *method)
{
    struct ccall *k = calloc(1, sizeof(*k));
    if (!k)
        return NULL;
    k->c = c;
    k->details = grpc_empty_slice();
    grpc_metadata_array_init(&k->initial_md);
    grpc_metadata_array_init(&k->trailing_md);
    grpc_slice m = grpc_slice_from_static_string(method);
    k->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq, m, NULL,
                                       gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    if (!k->call) {
        free(k);
        return NULL;
    }
    gw_grpc_tag_init(&k->t_status, on_status, k);
    /* The status batch goes first (STACK.md): it completes last. */
    grpc_op op = {.op = GRPC_OP_RECV_STATUS_ON_CLIENT};
    op.data.recv_status_on_client.trailing_metadata = &k->trailing_md;
    op.data.recv_status_on_client.status = &k->status;
    op.data.recv_status_on_client.status_details = &k->details;
    if (batch(k, &op, 1, &k->t_status) != GW_OK) {
        grpc_call_unref(k->call);
        grpc_metadata_array_destroy(&k->initial_md);
        grpc_metadata_array_destroy(&k->trailing_md);
        free(k);
        return NULL;
    }
    return k;
}

/* Starts a Watch call's request: who this replica is, the version it
 * serves, and that it applies deltas. */
static void watch_send_request(struct ccall *w)
{
    struct dp_cpclient *c = w->c;
    Llmgw__V1__WatchRequest req = LLMGW__V1__WATCH_REQUEST__INIT;
    req.replica_id = (char *)c->cfg->replica_id;
    req.have_version = c->served;
    req.accepts_delta = 1;
    w->send_bb = gw_grpc_pack(&req.base);
    gw_grpc_tag_init(&w->t_start, on_watch_start, w);
    gw_grpc_tag_init(&w->t_recv, on_watch_recv, w);
    /* WAIT_FOR_READY: while the control plane is down the call waits for
     * it instead of failing at once. RECV_INITIAL_METADATA, or a
     * trailers-only answer would never surface (STACK.md pitfall 1). */
    grpc_op ops[4] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                      {.op = GRPC_OP_SEND_MESSAGE},
                      {.op = GRPC_OP_SEND_CLOSE_FROM_CLIENT},
                      {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    dpc_auth_op(c, &ops[0]);
    ops[1].data.send_message.send_message = w->send_bb;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &w->initial_md;
    (void)batch(w, ops, 4, &w->t_start);
}

/* A Watch of its own, beside the session's Report stream (watch_reopen). */
static int watch_start(struct dp_cpclient *c)
{
    c->watch = ccall_new(c, "/llmgw.v1.Control/Watch");
    if (!c->watch)
        return GW_ENOMEM;
    watch_send_request(c->watch);
    return GW_OK;
}

static void session_start(struct dp_cpclient *c)
{
    c->got_snapshot = 0;
    c->session_up = 0;
    c->session_at_us = gw_now_us();
    c->watch = ccall_new(c, "/llmgw.v1.Control/Watch");
    c->report = c->watch ? ccall_new(c, "/llmgw.v1.Control/Report") : NULL;
    if (!c->watch || !c->report) {
        gw_log(GW_LOG_ERROR, "control plane: cannot create a call", NULL);
        if (c->watch)
            grpc_call_cancel(c->watch->call, NULL);
        else
            maybe_restart(c);
        return;
    }
    watch_send_request(c->watch);

    struct ccall *r = c->report;
    /* Rows the last stream did not get acknowledged go again on this one. */
    dp_ledger_stream_reset();
    gw_grpc_tag_init(&r->t_start, on_report_start, r);
    gw_grpc_tag_init(&r->t_recv, on_report_recv, r);
    gw_grpc_tag_init(&r->t_send, on_report_send, r);
    grpc_op rops[2] = {{.op = GRPC_OP_SEND_INITIAL_METADATA},
                       {.op = GRPC_OP_RECV_INITIAL_METADATA}};
    rops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY;
    dpc_auth_op(c, &rops[0]);
    rops[1].data.recv_initial_metadata.recv_initial_metadata = &r->initial_md;
    (void)batch(r, rops, 2, &r->t_start);
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_cpclient *c = arg;
    if (!c->stopping && !c->watch && !c->report)
        session_start(c);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct dp_cpclient *c = arg;
    c->stopping = 1;
    evtimer_del(c->retry_ev);
    evtimer_del(c->summary_ev);
    event_del(c->probe_ev);
    event_del(c->sync_ev);
    evtimer_del(c->cache_ev);
    if (c->cache_dirty) /* what the last deltas changed */
        dpc_cache_write(c);
    dp_ledger_sync();
    if (c->probe)
        grpc_call_cancel(c->probe->call, NULL);
    if (c->watch)
        grpc_call_cancel(c->watch->call, NULL);
    if (c->report)
        grpc_call_cancel(c->report->call, NULL);
    /* The cancelled batches complete during the drain and free the calls. */
    gw_grpc_loop_shutdown(c->loop);
    event_base_loopexit(c->base, NULL);
}

static void *run(void *arg)
{
    struct dp_cpclient *c = arg;
    session_start(c);
    struct timeval tv = {PROBE_EVERY_MS / 1000, (PROBE_EVERY_MS % 1000) * 1000};
    event_add(c->probe_ev, &tv);
    struct timeval st = {LEDGER_SYNC_MS / 1000, (LEDGER_SYNC_MS % 1000) * 1000};
    event_add(c->sync_ev, &st);
    c->summary_since_ms = gw_wall_ms();
    summary_arm(c, gw_now_us() + SUMMARY_EVERY_MS * 1000);
    event_base_dispatch(c->base);
    return NULL;
}

static void client_free(struct dp_cpclient *c)
{
    if (c->stop_ev)
        event_free(c->stop_ev);
    if (c->retry_ev)
        event_free(c->retry_ev);
    if (c->probe_ev)
        event_free(c->probe_ev);
    if (c->ledger_ev)
        event_free(c->ledger_ev);
    if (c->sync_ev)
        event_free(c->sync_ev);
    if (c->cache_ev)
        event_free(c->cache_ev);
    if (c->summary_ev)
        event_free(c->summary_ev);
    if (c->summary_wake_ev)
        event_free(c->summary_wake_ev);
    if (c->summary_bb)
        grpc_byte_buffer_destroy(c->summary_bb);
    for (size_t i = 0; i < c->naddrs; i++) {
        if (c->channels[i])
            grpc_channel_destroy(c->channels[i]);
        free(c->addrs[i]);
    }
    gw_grpc_loop_free(c->loop);
    if (c->base)
        event_base_free(c->base);
    if (c->has_auth)
        grpc_slice_unref(c->auth.value);
    free(c);
}

/* The addresses and their first channel, the summary timer and its
 * wake-up: 1, or 0 when out of memory (or a list too long). */
static int fleet_setup(struct dp_cpclient *c)
{
    if (dpc_split_addrs(c, c->cfg->control_plane) != GW_OK)
        return 0;
    /* The first address first, then round (list them in another order
     * per replica to spread replicas over control planes). */
    c->cur = 0;
    c->channel = dpc_channel_for(c, c->cur);
    c->summary_ev = evtimer_new(c->base, on_summary, c);
    c->summary_wake_ev = event_new(c->base, -1, 0, on_summary_wake, c);
    if (!c->channel || !c->summary_ev || !c->summary_wake_ev)
        return 0;
    dp_outcomes_set_notify(summary_notify, c);
    return 1;
}

struct dp_cpclient *dp_cpclient_start(const struct dp_config *cfg, long long have_version)
{
    struct dp_cpclient *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->cfg = cfg;
    c->served = have_version;
    c->ack_pending = -1;
    c->backoff_ms = BACKOFF_MIN_MS;
    gw_rand_seed(&c->rng);
    c->base = event_base_new();
    c->loop = c->base ? gw_grpc_loop_new(c->base) : NULL;
    if (!c->loop)
        goto fail;
    c->cq = gw_grpc_loop_cq(c->loop);
    if (cfg->fleet_token) {
        char bearer[600];
        snprintf(bearer, sizeof(bearer), "Bearer %s", cfg->fleet_token);
        c->auth.key = grpc_slice_from_static_string("authorization");
        c->auth.value = grpc_slice_from_copied_string(bearer);
        c->has_auth = 1;
        explicit_bzero(bearer, sizeof(bearer));
    }
    if (!fleet_setup(c))
        goto fail;
    c->stop_ev = event_new(c->base, -1, 0, on_stop, c);
    c->retry_ev = evtimer_new(c->base, on_retry, c);
    c->probe_ev = event_new(c->base, -1, EV_PERSIST, dpc_probe_tick, c);
    c->ledger_ev = event_new(c->base, -1, 0, on_ledger, c);
    c->sync_ev = event_new(c->base, -1, EV_PERSIST, on_sync, c);
    c->cache_ev = evtimer_new(c->base, dpc_on_cache, c);
    if (!c->stop_ev || !c->retry_ev || !c->probe_ev || !c->ledger_ev || !c->sync_ev || !c->cache_ev)
        goto fail;
    dp_ledger_set_notify(ledger_notify, c);
    /* Requests wait (a little) for the stream rather than meet their
     * limits' offline policies before it first opens. */
    dp_limits_on_stream(0);
    dp_limits_set_notify(ledger_notify, c);
    if (pthread_create(&c->thread, NULL, run, c) != 0)
        goto fail;
    gw_logf(GW_LOG_INFO, "control plane: watching", "{s:s,s:s,s:s}", "control_plane",
            cfg->control_plane, "first", c->addrs[c->cur], "replica_id", cfg->replica_id);
    return c;
fail:
    gw_log(GW_LOG_ERROR, "control plane: cannot start the client", NULL);
    dp_ledger_set_notify(NULL, NULL);
    dp_limits_set_notify(NULL, NULL);
    dp_outcomes_set_notify(NULL, NULL);
    client_free(c);
    return NULL;
}

void dp_cpclient_flush(struct dp_cpclient *c, long timeout_ms)
{
    if (!c)
        return;
    int64_t end = gw_now_us() + (int64_t)timeout_ms * 1000;
    /* Every lease is retired: its final report (what was given back and
     * charged) goes out, and is waited for like the rows. */
    dp_limits_release_all();
    size_t n = dp_ledger_pending(), leases = dp_limits_pending();
    while ((n > 0 || leases > 0) && __atomic_load_n(&c->report_up, __ATOMIC_ACQUIRE) &&
           gw_now_us() < end) {
        struct timespec ts = {0, 20 * 1000000};
        nanosleep(&ts, NULL);
        n = dp_ledger_pending();
        leases = dp_limits_pending();
    }
    if (n > 0)
        gw_logf(GW_LOG_WARN, "ledger: rows left in the spool at exit; sent at the next start",
                "{s:I}", "rows", (json_int_t)n);
    if (leases > 0)
        gw_logf(GW_LOG_WARN,
                "budgets: leases not settled at exit; the control plane counts them held for its "
                "lease grace",
                "{s:I}", "leases", (json_int_t)leases);
}

void dp_cpclient_stop(struct dp_cpclient *c)
{
    if (!c)
        return;
    dp_outcomes_set_notify(NULL, NULL);
    dp_ledger_set_notify(NULL, NULL);
    dp_limits_set_notify(NULL, NULL);
    event_active(c->stop_ev, 0, 0);
    pthread_join(c->thread, NULL);
    client_free(c);
}
