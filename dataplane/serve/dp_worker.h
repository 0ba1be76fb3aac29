/*
 * dp_worker: one event-loop thread of the data plane. Each worker owns its
 * libevent base, its own listener on the shared port (SO_REUSEPORT, so the
 * kernel spreads connections), its HTTP server and its upstream client (gw_upc);
 * nothing on the request path is shared between workers but the current
 * snapshot.
 */
#ifndef DP_WORKER_H
#define DP_WORKER_H

#include <pthread.h>
#include <stdint.h>

#include "dp_config.h"
#include "dp_exchange.h"
#include "gw_log.h"
#include "gw_otel.h"

struct event_base;
struct event;
struct gw_http_server;
struct gw_http_req;
struct gw_upc;

struct dp_worker {
    int id;
    const struct dp_config *cfg;
    pthread_t thread;
    struct event_base *base;
    struct gw_http_server *http;
    struct gw_upc *upc;
    struct event *drain_ev; /* activated from the main thread */
    struct event *drain_tick;
    int64_t drain_deadline_us;
    int draining;
    struct dp_xloop loop;       /* what the loop's exchanges share (the breakers: main sets them) */
    struct gw_log_batch access; /* the loop's access lines (loop.access) */
    struct gw_otel_batch otel;  /* the loop's trace spans (loop.otel) */
    uint64_t seq;               /* request ids */
};

/* Creates the worker's loop, server (on listen_fd, which it takes) and
 * upstream client. Returns 0 or a GW_E code. */
int dp_worker_init(struct dp_worker *w, int id, const struct dp_config *cfg, int listen_fd)
    __attribute__((warn_unused_result));
/* Runs the loop on a new thread. */
int dp_worker_start(struct dp_worker *w) __attribute__((warn_unused_result));
/* Thread-safe: /readyz answers 503 from now on, on every worker (the first
 * step of a drain). */
void dp_worker_mark_unready(void);
/* Thread-safe: asks the worker to drain and stop. */
void dp_worker_drain(struct dp_worker *w);
void dp_worker_join(struct dp_worker *w);
void dp_worker_destroy(struct dp_worker *w);

#endif
