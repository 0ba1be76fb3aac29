/*
 * dp_worker: one event-loop thread of the data plane. Each worker owns its
 * libevent base, its own listener on the shared port (SO_REUSEPORT, so the
 * kernel spreads connections), its HTTP server and its curl multi handle;
 * nothing on the request path is shared between workers but the current
 * snapshot.
 */
#ifndef DP_WORKER_H
#define DP_WORKER_H

#include <pthread.h>
#include <stdint.h>

#include "dp_config.h"

struct event_base;
struct event;
struct gw_http_server;
struct gw_http_req;
struct gw_curlev;
struct dp_exchange;
struct dp_breakers;

/* Idle curl easy handles a worker keeps for reuse: creating one per
 * request costs an allocation and initialisation on the hot path. */
#define DP_IDLE_EASY 64

struct dp_worker {
    int id;
    const struct dp_config *cfg;
    pthread_t thread;
    struct event_base *base;
    struct gw_http_server *http;
    struct gw_curlev *curl;
    struct event *drain_ev; /* activated from the main thread */
    struct event *drain_tick;
    int64_t drain_deadline_us;
    int draining;
    struct dp_exchange *exchanges; /* in flight, for drain and shutdown */
    struct dp_breakers *breakers;  /* the process's, shared by every worker */
    long retry_base_ms;
    void *idle_easy[DP_IDLE_EASY]; /* reset curl handles, reused */
    int nidle_easy;
    uint64_t rng; /* request ids */
    uint64_t seq;
};

/* Creates the worker's loop, server (on listen_fd, which it takes) and curl
 * multi. Returns 0 or a GW_E code. */
int dp_worker_init(struct dp_worker *w, int id, const struct dp_config *cfg, int listen_fd)
    __attribute__((warn_unused_result));
/* Runs the loop on a new thread. */
int dp_worker_start(struct dp_worker *w) __attribute__((warn_unused_result));
/* A pseudo-random number from the worker's own generator (request ids,
 * backoff jitter): the worker's thread only. */
uint64_t dp_worker_rand(struct dp_worker *w);
/* Thread-safe: /readyz answers 503 from now on, on every worker (the first
 * step of a drain). */
void dp_worker_mark_unready(void);
/* Thread-safe: asks the worker to drain and stop. */
void dp_worker_drain(struct dp_worker *w);
void dp_worker_join(struct dp_worker *w);
void dp_worker_destroy(struct dp_worker *w);

/* Answers with an OpenAI-style error body and ends the request. */
void dp_reply_error(struct gw_http_req *req, int status, const char *type, const char *param,
                    const char *code, const char *message);

struct dp_facade;
/* Writes the access-log line of a request refused before upstream work. */
void dp_log_simple(struct gw_http_req *req, const char *id, int status, const char *code);
/* An error answer in facade fc's format (NULL: OpenAI's), logged. */
void dp_reply_error_fc(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                       int status, const char *type, const char *param, const char *code,
                       const char *msg);

/* The same, after writing the request's access-log line (id, method, path,
 * status, code): for requests refused before any upstream work. */
void dp_reply_error_logged(struct gw_http_req *req, const char *id, int status, const char *type,
                           const char *param, const char *code, const char *message);

#endif
