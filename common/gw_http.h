/*
 * gw_http: a small HTTP/1.1 server on libevent bufferevents.
 *
 * Every llmgw daemon and the mock provider serve HTTP through this module.
 * It is written for a proxy's needs rather than a web server's: bounded
 * header and body sizes (an oversized body is refused before it is read),
 * keep-alive, Expect: 100-continue, responses that are either complete
 * (Content-Length) or streamed (chunked), early notice when the client goes
 * away, and write-side backpressure so a slow client can pause an upstream.
 *
 * One gw_http_server lives on one event loop and is used from that loop's
 * thread only. Several servers (one per thread) may share a port through
 * SO_REUSEPORT: see gw_http_listen().
 *
 * Request lifetime: the server parses a request, then calls the handler.
 * From then on the caller owns the request and must end it exactly once with
 * gw_http_respond(), gw_http_finish() or gw_http_abort(); each of those
 * releases the request (the pointer is invalid afterwards). If the client
 * disconnects first, the close callback set with gw_http_req_on_close() runs
 * once (never from inside a gw_http_* call made by the owner); the owner then
 * still ends the request, and writes in between fail with GW_ECLOSED.
 */
#ifndef GW_HTTP_H
#define GW_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "gw_error.h"
#include "gw_pool.h"

struct gw_tls;

struct event_base;
struct gw_http_server;
struct gw_http_req;

typedef void (*gw_http_handler_cb)(struct gw_http_req *req, void *arg);
typedef void (*gw_http_req_cb)(struct gw_http_req *req, void *arg);

/*
 * Called when a request is refused before the handler sees it (oversized
 * body: 413, malformed request line or headers: 400, unsupported transfer
 * encoding: 411/501). The callback must answer with gw_http_respond(); the
 * connection is closed after that answer. NULL gives a plain JSON body.
 */
typedef void (*gw_http_reject_cb)(struct gw_http_req *req, int status, const char *code,
                                  const char *message, void *arg);

/*
 * Called when n connections were refused at the open-file limit: accept(2)
 * failed with EMFILE or ENFILE, so each waiting connection was accepted on
 * the server's reserve descriptor (a /dev/null it holds), answered 503
 * (code too_many_connections, Retry-After: 1) and closed, rather than left
 * waiting while the listener retried at full CPU. Such refusals are logged
 * at most once a second per server; this callback sees every one (a
 * metric). When not even the reserve can be had, or accept fails otherwise,
 * the listener rests 100 ms.
 */
typedef void (*gw_http_refused_cb)(uint64_t n, void *arg);

struct gw_http_server_opts {
    gw_http_handler_cb handler;
    gw_http_reject_cb reject;   /* may be NULL */
    gw_http_refused_cb refused; /* may be NULL */
    void *arg;                  /* passed to handler, reject and refused */
    size_t max_header_bytes;    /* 0: 32 KiB */
    size_t max_body_bytes;      /* 0: 4 MiB */
    /* A request's own body limit, decided from its head (an upload
     * endpoint's, say): 0 keeps max_body_bytes. NULL: max_body_bytes for
     * every request. Called with the request whose head was just parsed. */
    size_t (*body_limit)(const struct gw_http_req *req, void *arg);
    int idle_timeout_ms; /* keep-alive idle close; 0: 60 s */
    /* A request head must be complete this long after its first byte
     * arrived, however the bytes trickle in (a 408 then); a head that
     * stops coming is closed after as long. 0: 10 s. */
    int head_timeout_ms;
    /* At most this many connections at once; past it a new one gets a
     * prompt 503 and is closed (counted with refused). 0: no cap. */
    size_t max_connections;
    /* TLS on every connection (gw_tls.h; not owned, outlives the server);
     * NULL: plaintext. */
    struct gw_tls *tls;
    /* A client that closes its sending side (a TCP half-close) while its
     * request is being answered: 0 (the default) takes it as gone and the
     * request is closed (gw_http_req_on_close), as a client that cancels
     * does; 1 keeps answering it (that one request: the connection closes
     * after it), and only a failed write ends it early. */
    int half_close_answers;
};

/*
 * Opens a listening TCP socket on host:port (port 0 picks one), non-blocking,
 * with SO_REUSEADDR and, when reuseport is set, SO_REUSEPORT. Returns the fd
 * (>= 0) or a negative GW_E code. *bound_port receives the actual port.
 */
int gw_http_listen(const char *host, int port, int reuseport, int *bound_port)
    __attribute__((warn_unused_result));

/*
 * Creates a server accepting on the listening fd `fd` (the server owns and
 * closes it), holding one more descriptor in reserve for the open-file
 * limit (gw_http_refused_cb). Returns NULL on allocation failure (fd is
 * then left open).
 */
struct gw_http_server *gw_http_server_new(struct event_base *base, int fd,
                                          const struct gw_http_server_opts *o);

/*
 * Drain mode: close the listener, close idle keep-alive connections, and
 * close each remaining connection when its current response ends.
 */
void gw_http_server_drain(struct gw_http_server *srv);

/* Requests handed to the handler and not yet ended. */
size_t gw_http_server_active(const struct gw_http_server *srv);

/* Open client connections (idle ones included). */
size_t gw_http_server_connections(const struct gw_http_server *srv);

/* Closes every connection at once and frees the server. Active requests
 * get their close callback first, so owners can release upstream work; an
 * owner may end its request later, but must not use the server then. */
void gw_http_server_free(struct gw_http_server *srv);

/* ---- request accessors (valid until the request is ended) ---- */

const char *gw_http_req_method(const struct gw_http_req *req);
/* The path without the query string. */
const char *gw_http_req_path(const struct gw_http_req *req);
/* The query string without '?', or "" */
const char *gw_http_req_query(const struct gw_http_req *req);
/* Case-insensitive lookup; NULL when absent. */
const char *gw_http_req_header(const struct gw_http_req *req, const char *name);
/* The body (NUL-terminated for convenience; len excludes the NUL). */
const char *gw_http_req_body(const struct gw_http_req *req, size_t *len);
/* The request's pool: freed when the request ends. */
struct gw_pool *gw_http_req_pool(struct gw_http_req *req);
/* Microseconds (CLOCK_MONOTONIC) when the request's headers were complete. */
int64_t gw_http_req_start_us(const struct gw_http_req *req);
/* An id for the client connection the request came on, unique among the
 * connections this process accepted (so a peer can tell reuse from new
 * connections, and logs can group requests by connection). */
uint64_t gw_http_req_conn_id(const struct gw_http_req *req);
/* Peer address as text ("127.0.0.1"). */
const char *gw_http_req_peer(const struct gw_http_req *req);

/* The client went away before the request ended. Runs at most once. */
void gw_http_req_on_close(struct gw_http_req *req, gw_http_req_cb cb, void *arg);

/* ---- responses ---- */

/* Adds a response header (before the response starts). Both strings are
 * copied. Returns GW_EINVAL after the response started. */
int gw_http_add_header(struct gw_http_req *req, const char *name, const char *value);

/* A complete response with Content-Length. Ends the request. */
void gw_http_respond(struct gw_http_req *req, int status, const char *content_type,
                     const char *body, size_t len);

/* Starts a chunked response. Returns 0 or GW_ECLOSED. */
int gw_http_start(struct gw_http_req *req, int status, const char *content_type)
    __attribute__((warn_unused_result));

/* Appends one chunk (len 0 is a no-op). Returns 0 or GW_ECLOSED. */
int gw_http_write(struct gw_http_req *req, const void *data, size_t len)
    __attribute__((warn_unused_result));

/* Bytes queued for the client and not yet written to the socket. */
size_t gw_http_pending(const struct gw_http_req *req);

/* Calls cb once, when pending output falls to low_water or below (at once,
 * from the event loop, if it already is). Backpressure for streaming. */
void gw_http_on_drain(struct gw_http_req *req, size_t low_water, gw_http_req_cb cb, void *arg);

/* Ends a chunked response with the terminating chunk. Ends the request. */
void gw_http_finish(struct gw_http_req *req);
/* gw_http_write(data) then gw_http_finish, in one sendmsg when nothing is
 * queued: a stream's last events and its end. GW_OK, or the write's error
 * (the request is ended either way: cut when the write failed). */
int gw_http_finish_with(struct gw_http_req *req, const void *data, size_t len);

/* Ends the request and closes the connection once what is already queued
 * has been sent: a chunked response is left without its terminator, which
 * clients see as an error. */
void gw_http_abort(struct gw_http_req *req);

const char *gw_http_reason(int status);

/* ---- local requests ----
 *
 * A request made inside the process, with no connection: an owner (the
 * data plane's exchange, say) serves it with the same calls as any other,
 * and the answer is collected and handed to on_answer on a later turn of
 * the loop, never from inside the owner's call. The gateway's own calls
 * (its guard's classifier, its judge) are made this way, so they take the
 * same path as a client's: routing, failover, limits, ledger. */

struct gw_http_answer {
    int status;       /* 0 when aborted before any head */
    int aborted;      /* cut (gw_http_abort, or a stream without its end) */
    int overflow;     /* the body passed max_answer: cut there */
    const char *body; /* NUL-terminated */
    size_t len;
    const char *headers; /* the owner's headers, "name: value\r\n" lines */
    size_t headers_len;
};
typedef void (*gw_http_answer_cb)(const struct gw_http_answer *a, void *arg);

/* headers: name, value pairs, NULL-terminated (copied, as are the rest).
 * on_answer runs exactly once unless gw_http_local_cancel comes first.
 * NULL when out of memory. */
struct gw_http_req *gw_http_local_new(struct event_base *base, const char *method, const char *path,
                                      const char *const *headers, const char *body, size_t len,
                                      size_t max_answer, gw_http_answer_cb on_answer, void *arg);
/* The maker no longer wants the answer (a timeout, its own end): as a
 * client that leaves, the owner's close callback runs now (the owner then
 * ends the request as usual), and on_answer never runs. Not from inside
 * on_answer. */
void gw_http_local_cancel(struct gw_http_req *req);

#endif
