/*
 * gw_upc: the data plane's upstream HTTP/1.1 client, on one libevent loop.
 *
 * It sends one POST per transfer and hands the answer over as it arrives:
 * each head line to on_header, each piece of body (chunked coding removed)
 * to on_body, then one on_done. It exists because the request path's cost
 * is per event: a provider's stream is a few hundred bytes every few tens
 * of milliseconds, and each one should cost one read, the caller's scan
 * and one write. So:
 *  - a connection's socket is registered with the loop once, when it
 *    connects, and stays registered while it waits in the pool (its close
 *    is seen there); pausing for a slow client is the only other change;
 *  - bytes are read into one buffer per loop (a paused transfer keeps only
 *    what it was given and did not take), so an open stream holds no read
 *    buffer of its own;
 *  - the request's head and body leave in one writev.
 *
 * Connections are kept per (scheme, host, port, proxy) for reuse, most
 * recently used first, and closed after GW_UPC_IDLE_MS idle. A transfer on
 * a reused connection that the server had closed before answering (no byte
 * of the answer read) is sent once more on a new connection, as libcurl
 * did. Names are resolved with libevent's evdns (resolv.conf, the hosts
 * file); https verifies the server's certificate against the system's CA
 * store (OpenSSL's default paths: SSL_CERT_FILE and SSL_CERT_DIR override
 * them) and its name or IP. The proxy environment is honored the way
 * libcurl read it (https_proxy / HTTPS_PROXY for https, http_proxy for
 * http, ALL_PROXY, NO_PROXY), http:// proxies only; loopback never goes
 * through a proxy. The environment is read once, by gw_upc_new.
 *
 * Callbacks run from the loop, never from inside a gw_upc_* call. A
 * callback may call gw_upc_cancel on its own transfer (the transfer then
 * ends there, without on_done).
 */
#ifndef GW_UPC_H
#define GW_UPC_H

#include <stddef.h>
#include <sys/uio.h>

struct event_base;
struct curl_slist;
struct gw_upc;
struct gw_upc_xfer;

#define GW_UPC_IDLE_MS 55000 /* an idle connection is closed after this */
#define GW_UPC_PAUSE ((size_t)-1)
#define GW_UPC_MAX_PIECES 512

enum gw_upc_result {
    GW_UPC_OK = 0,
    GW_UPC_ERESOLVE, /* the name did not resolve */
    GW_UPC_ECONNECT, /* no connection (refused, unreachable, the proxy refused) */
    GW_UPC_ETIMEOUT, /* the connect timeout passed */
    GW_UPC_ETLS,     /* the TLS handshake failed (certificate, name, protocol) */
    GW_UPC_ESEND,    /* the request could not be sent */
    GW_UPC_ERECV,    /* the connection failed or closed before the answer was whole */
    GW_UPC_EPROTO,   /* the answer is not HTTP/1.1 as it should be */
    GW_UPC_EABORTED, /* on_body refused a piece (returned 0) */
    GW_UPC_ENOMEM,
};

struct gw_upc_opts {
    const char *url;                  /* http:// or https:// */
    const struct curl_slist *headers; /* "Name: value" lines; "Name:" drops a default */
    const char *body;                 /* not copied: it must live until on_done or cancel */
    size_t body_len;
    /* Or the body in pieces (a multipart upload: the gateway's part heads
     * between the client's own bytes), not copied either; when set, body
     * and body_len are ignored. At most GW_UPC_MAX_PIECES. */
    const struct iovec *body_iov;
    size_t body_iovcnt;
    long connect_timeout_ms; /* 0: 10 s */
    /* A head line with its line ending (the status line first, the blank
     * line last, per head: an interim 1xx head comes before the final). */
    void (*on_header)(const char *line, size_t len, void *arg);
    /* A piece of the body. Returns len when taken, GW_UPC_PAUSE to be given
     * the same piece again after gw_upc_resume (nothing is read meanwhile),
     * anything else to stop the transfer (on_done: GW_UPC_EABORTED). */
    size_t (*on_body)(const char *buf, size_t len, void *arg);
    /* The transfer is over; msg says why when result is not GW_UPC_OK. The
     * transfer is freed after this returns. */
    void (*on_done)(enum gw_upc_result result, const char *msg, void *arg);
    void *arg;
};

/* NULL when out of memory. */
struct gw_upc *gw_upc_new(struct event_base *base);
/* Cancels every transfer without callbacks and closes every connection. */
void gw_upc_free(struct gw_upc *u);

/* Starts a transfer: NULL when out of memory (no callback is called then).
 * A URL that is not http(s), or a proxy environment naming an unsupported
 * proxy, fails the transfer like any other failure: on_done, from the
 * loop. */
struct gw_upc_xfer *gw_upc_start(struct gw_upc *u, const struct gw_upc_opts *o)
    __attribute__((warn_unused_result));
/* Ends a transfer that has not had its on_done; no callback is called. */
void gw_upc_cancel(struct gw_upc_xfer *x);
/* After on_body returned GW_UPC_PAUSE: gives the piece again, from the
 * loop, then reads on. */
void gw_upc_resume(struct gw_upc_xfer *x);

/* Transfers running; connections open (idle ones included). */
size_t gw_upc_running(const struct gw_upc *u);
size_t gw_upc_connections(const struct gw_upc *u);

const char *gw_upc_strerror(enum gw_upc_result r);

#endif
