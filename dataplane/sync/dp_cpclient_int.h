/*
 * dp_cpclient's private part: the client, its calls and its probe, shared
 * by the session (dp_cpclient.c) and the connection (dp_cpclient_conn.c).
 * Not for other modules.
 */
#ifndef DP_CPCLIENT_INT_H
#define DP_CPCLIENT_INT_H

#include <event2/event.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "dp_cpclient.h"
#include "gw_grpc.h"

struct Llmgw__V1__Snapshot;

#define MAX_SNAPSHOT_BYTES (64u << 20)
#define MAX_ADDRS 16

/* One client call: its status batch plus whatever else is in flight. */
struct ccall {
    struct dp_cpclient *c;
    grpc_call *call;
    int pending; /* batches in flight */
    int ended;   /* status received */
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    grpc_byte_buffer *recv_bb, *send_bb;
    int sending, started;
    /* Report: rows a message the control plane takes (0: one), learned
     * from its first reply; when the stream started. */
    size_t ledger_batch_max;
    int replied;
    int64_t started_us;
    struct gw_grpc_tag t_status, t_start, t_recv, t_send;
};

/* A connection probe (see dpc_probe_tick). */
struct probe {
    struct dp_cpclient *c;
    grpc_call *call;
    int pending;
    grpc_metadata_array initial_md, trailing_md;
    grpc_status_code status;
    grpc_slice details;
    struct gw_grpc_tag t_status, t_start;
};

struct dp_cpclient {
    const struct dp_config *cfg;
    pthread_t thread;
    struct event_base *base;
    struct gw_grpc_loop *loop;
    grpc_completion_queue *cq;
    grpc_channel *channel;
    struct event *stop_ev, *retry_ev, *probe_ev;
    struct event *ledger_ev, *sync_ev; /* a row was recorded; the spool's sync tick */
    int ledger_kick;                   /* atomic: this thread knows rows wait (on_ledger) */
    int report_up;                     /* atomic: the Report stream is open */
    struct probe *probe;               /* in flight, or NULL */
    int64_t probe_logged_ms;           /* when a connection failure was last logged */
    int probe_suppressed;              /* failures not logged since */
    int stopping;
    struct ccall *watch, *report;
    long long served;      /* version served from the control plane or the cache */
    long long ack_pending; /* newest version to acknowledge; -1 none */
    int got_snapshot;      /* this session delivered one */
    long backoff_ms;
    uint64_t rng;

    /* --control-plane's addresses, a channel each (made on first use); the
     * session uses addrs[cur] and moves to the next when it ends. */
    char *addrs[MAX_ADDRS];
    grpc_channel *channels[MAX_ADDRS];
    size_t naddrs, cur;
    int session_up;        /* this session's Watch got the server's headers */
    int64_t session_at_us; /* when this session started */

    /* The fleet health view's summaries (dp_outcomes), sent on the Report
     * stream; views come back in ReportReplies (dp_fleet). */
    struct event *summary_ev, *summary_wake_ev;
    grpc_byte_buffer *summary_bb; /* packed, waiting for report_pump */
    int64_t summary_since_ms;     /* the next summary's interval start */
    int64_t summary_sent_us;      /* when the last one was harvested */
    int64_t summary_due_us;       /* when summary_ev fires */

    /* The Watch is being ended to open another at once (watch_reopen): a
     * delta could not be applied, and a new Watch gets the whole document. */
    int rewatch;
    /* The snapshot cache: a delta changed what it should hold (written by
     * cache_ev, at most every CACHE_EVERY_MS, and at exit), and when it was
     * last written (monotonic us; 0: never). */
    struct event *cache_ev;
    int cache_dirty;
    int64_t cache_saved_us;

    /* "authorization: Bearer <LLMGW_FLEET_TOKEN>" on every call, when set. */
    grpc_metadata auth;
    int has_auth;
};

/* Puts the fleet token (if any) on a SEND_INITIAL_METADATA op. */
static inline void dpc_auth_op(struct dp_cpclient *c, grpc_op *op)
{
    if (c->has_auth) {
        op->data.send_initial_metadata.count = 1;
        op->data.send_initial_metadata.metadata = &c->auth;
    }
}

/* The connection (dp_cpclient_conn.c): --control-plane's addresses into
 * c->addrs; the channel to c->addrs[i], made on first use (NULL when its
 * credentials cannot be had); the probe_ev tick. */
int dpc_split_addrs(struct dp_cpclient *c, const char *list);
grpc_channel *dpc_channel_for(struct dp_cpclient *c, size_t i);
void dpc_probe_tick(evutil_socket_t fd, short what, void *arg);

/* The Report stream's sender (dp_cpclient.c): sends what is due (acks,
 * ledger rows, lease messages, summaries) when no send is in flight. */
void dpc_report_pump(struct dp_cpclient *c);
/* A pushed Snapshot (dp_cpclient_snapshot.c): a whole document or a delta,
 * served and acknowledged, or refused (a delta that does not apply makes
 * the Watch open again). */
void dpc_apply_snapshot(struct dp_cpclient *c, const struct Llmgw__V1__Snapshot *m);
/* The snapshot cache written from the snapshot served now, and the timer
 * that writes it after deltas (cache_ev). */
void dpc_cache_write(struct dp_cpclient *c);
void dpc_on_cache(evutil_socket_t fd, short what, void *arg);

#endif
