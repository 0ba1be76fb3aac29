/*
 * HTTP/1.1 server on bufferevents. See gw_http.h for the contract.
 *
 * A connection moves HEAD -> BODY -> ACTIVE -> HEAD ... A request becomes
 * ACTIVE when its body is complete; the owner then ends it. While a request
 * is active the connection keeps reading (so a client that goes away is
 * noticed at once) but does not parse further requests; pipelined bytes
 * wait in the input buffer, bounded by a read high-watermark.
 *
 * Frees are deferred while the connection is inside its own processing
 * loop (the handler may end the request synchronously, or abort it), so no
 * frame ever touches a freed connection.
 *
 * At the open-file limit accept(2) fails with EMFILE while the connection
 * stays queued, so the listener stays readable: retrying it is a loop at
 * 100 % CPU, with the clients waiting for ever. Each server holds a reserve
 * descriptor instead, gives it up to accept each waiting connection, answers
 * it 503 and closes it, and takes the reserve back (shed_waiting()).
 */
#include "gw_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/listener.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_json.h"
#include "gw_log.h"
#include "gw_time.h"
#include "gw_tls.h"

#define MAX_HEADERS 100
/* Answers queued for a pipelining client before we stop reading from it. */
#define PIPELINE_OUT_MAX (64u << 10)
/* How long a closing connection may take to flush what is queued. */
#define CLOSE_FLUSH_MS 10000
/* At the open-file limit: connections refused per listener wake-up (the
 * rest wait for the next turn of the loop, so other work is not starved),
 * how long the listener rests when not even the reserve descriptor can be
 * had, and at most one log line per this long per server. */
#define SHED_BATCH 64
#define ACCEPT_PAUSE_MS 100
#define REFUSED_LOG_US 1000000

enum conn_state { C_HEAD, C_BODY, C_ACTIVE };

struct header {
    char *name;
    char *value;
};

struct conn;
struct local;

struct gw_http_req {
    struct conn *conn; /* NULL once the client connection is gone */
    struct gw_http_server *srv;
    struct gw_pool *pool;
    char *method;
    char *path;
    char *query;
    struct header hdrs[MAX_HEADERS];
    size_t nhdrs;
    char *body;
    size_t body_len;
    int64_t start_us;
    uint64_t conn_id;
    int keepalive;
    int http10;    /* no chunked encoding: the close ends the body */
    int head_only; /* HEAD: headers, never a body */
    int started;
    int gone; /* the client left; writes fail */
    gw_http_req_cb close_cb;
    void *close_arg;
    gw_http_req_cb drain_cb;
    void *drain_arg;
    size_t low_water;
    struct gw_buf extra; /* response headers added by the owner */
    char peer[INET6_ADDRSTRLEN];
    struct local *local; /* a local request (gw_http_local_new), else NULL */
};

struct conn {
    struct gw_http_server *srv;
    struct bufferevent *bev;
    struct conn *prev, *next;
    enum conn_state state;
    uint64_t id;
    struct gw_http_req *req; /* parsing (HEAD/BODY) or owned (ACTIVE) */
    size_t body_need;
    size_t head_scanned; /* input bytes already searched for the head's end */
    int in_process;
    int doomed;      /* free at the end of processing */
    int closing;     /* close once output is flushed */
    int rejecting;   /* the current request is a refusal */
    int lingering;   /* refusal sent: discard input until EOF */
    int read_paused; /* too many unread answers queued */
    int peer_eof;    /* the client half-closed while its request was active */
    size_t discarded;
    int64_t head_from_us;    /* the current head's first byte (0: none yet) */
    int64_t linger_until_us; /* a lingering connection closes then, whatever comes */
    struct gw_buf head;      /* the response head being built (kept for the next) */
    /* What a streamed response wrote in this turn of the loop: sent as one
     * sendmsg when the turn's callbacks are done (flush_ev). */
    struct gw_buf pend;
    struct event flush_ev;
    int flush_armed;
    int tls; /* bev is a bufferevent_openssl: writes go through it, never sendmsg */
    char peer[INET6_ADDRSTRLEN];
};

struct gw_http_server {
    struct event_base *base;
    struct evconnlistener *listener;
    struct gw_http_server_opts o;
    struct conn *conns;
    size_t nconns;
    size_t active;
    int draining;
    int freeing;
    int reserve_fd;       /* /dev/null, given up to refuse a connection at the limit; -1 */
    struct event *resume; /* re-enables the listener after ACCEPT_PAUSE_MS */
    uint64_t unlogged;    /* refusals since the last log line */
    int64_t logged_us;    /* when that line was written (0: never) */
};

static void conn_process(struct conn *c);
static void conn_free(struct conn *c);

/* ---------------------------------------------------------------- listen */

int gw_http_listen(const char *host, int port, int reuseport, int *bound_port)
{
    struct addrinfo hints = {0}, *res = NULL;
    char portstr[16];
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(portstr, sizeof(portstr), "%d", port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || !res)
        return GW_EINVAL;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(res);
        return GW_EIO;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport)
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 1024) < 0) {
        freeaddrinfo(res);
        close(fd);
        return GW_EIO;
    }
    freeaddrinfo(res);
    if (bound_port) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
            if (ss.ss_family == AF_INET)
                *bound_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            else
                *bound_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    return fd;
}

/* ---------------------------------------------------------------- requests */

static struct gw_http_req *req_new(struct conn *c)
{
    struct gw_pool *pool = gw_pool_new(4096);
    if (!pool)
        return NULL;
    struct gw_http_req *r = gw_pool_calloc(pool, sizeof(*r));
    if (!r) {
        gw_pool_free(pool);
        return NULL;
    }
    r->pool = pool;
    r->conn = c;
    r->srv = c->srv;
    r->keepalive = 1;
    r->conn_id = c->id;
    gw_buf_init(&r->extra, 16384);
    memcpy(r->peer, c->peer, sizeof(r->peer));
    return r;
}

static void req_free(struct gw_http_req *r)
{
    gw_buf_free(&r->extra);
    gw_pool_free(r->pool);
}

const char *gw_http_req_method(const struct gw_http_req *r)
{
    return r->method;
}
const char *gw_http_req_path(const struct gw_http_req *r)
{
    return r->path;
}
const char *gw_http_req_query(const struct gw_http_req *r)
{
    return r->query;
}
struct gw_pool *gw_http_req_pool(struct gw_http_req *r)
{
    return r->pool;
}
int64_t gw_http_req_start_us(const struct gw_http_req *r)
{
    return r->start_us;
}
uint64_t gw_http_req_conn_id(const struct gw_http_req *r)
{
    return r->conn_id;
}
const char *gw_http_req_peer(const struct gw_http_req *r)
{
    return r->peer;
}

const char *gw_http_req_header(const struct gw_http_req *r, const char *name)
{
    for (size_t i = 0; i < r->nhdrs; i++)
        if (strcasecmp(r->hdrs[i].name, name) == 0)
            return r->hdrs[i].value;
    return NULL;
}

const char *gw_http_req_body(const struct gw_http_req *r, size_t *len)
{
    if (len)
        *len = r->body_len;
    return r->body ? r->body : "";
}

void gw_http_req_on_close(struct gw_http_req *r, gw_http_req_cb cb, void *arg)
{
    r->close_cb = cb;
    r->close_arg = arg;
}

/* ---------------------------------------------------------------- parsing */

static int is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           strchr("!#$%&'*+-.^_`|~", ch);
}

/* Parses the request line and headers in place (buf is pool memory ending
 * in "\r\n\r\n" plus a NUL). Returns 0 or a status code to refuse with. */
/* Every line of a head ends in CRLF; no NUL, no bare CR or LF, no control
 * byte but HTAB anywhere. A bare LF is a line end to some parsers and not
 * to others: accepting it lets a client hide a header from a proxy in front
 * of us (request smuggling), so it is refused outright. */
static int head_bytes_ok(const char *h, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c == '\r') {
            if (i + 1 >= n || h[i + 1] != '\n')
                return 0;
            i++;
        } else if ((c < 0x20 && c != '\t') || c == 0x7f) {
            return 0;
        }
    }
    return 1;
}

/* Parses the request line and headers in place (buf is pool memory that
 * passed head_bytes_ok and ends in "\r\n\r\n" plus a NUL). Returns 0 or a
 * status code to refuse with. */
static int parse_head(struct gw_http_req *r, char *buf, const char **why)
{
    char *line = buf;
    char *eol = strstr(line, "\r\n");
    *eol = '\0';
    char *sp1 = strchr(line, ' ');
    char *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
    if (!sp1 || !sp2 || sp1 == line || sp2 == sp1 + 1) {
        *why = "malformed request line";
        return 400;
    }
    *sp1 = *sp2 = '\0';
    for (char *m = line; *m; m++)
        if (!is_tchar((unsigned char)*m)) {
            *why = "malformed method";
            return 400;
        }
    /* The target is visible ASCII (RFC 9112 3.2): no spaces, no raw UTF-8. */
    for (const unsigned char *t = (const unsigned char *)sp1 + 1; *t; t++)
        if (*t < 0x21 || *t > 0x7e) {
            *why = "malformed request target";
            return 400;
        }
    r->method = line;
    r->head_only = strcmp(line, "HEAD") == 0;
    const char *ver = sp2 + 1;
    if (strcmp(ver, "HTTP/1.1") == 0)
        r->keepalive = 1;
    else if (strcmp(ver, "HTTP/1.0") == 0)
        r->keepalive = 0;
    else {
        *why = "unsupported HTTP version";
        return 505;
    }
    int http10 = !r->keepalive;
    r->http10 = http10;
    r->path = sp1 + 1;
    char *q = strchr(r->path, '?');
    if (q) {
        *q = '\0';
        r->query = q + 1;
    } else {
        r->query = "";
    }
    for (line = eol + 2; *line && !(line[0] == '\r' && line[1] == '\n');) {
        eol = strstr(line, "\r\n");
        *eol = '\0';
        if (*line == ' ' || *line == '\t') {
            *why = "obsolete header folding";
            return 400;
        }
        char *colon = strchr(line, ':');
        if (!colon || colon == line) {
            *why = "malformed header line";
            return 400;
        }
        *colon = '\0';
        for (char *n = line; *n; n++)
            if (!is_tchar((unsigned char)*n)) {
                *why = "malformed header name";
                return 400;
            }
        char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        char *end = v + strlen(v);
        while (end > v && (end[-1] == ' ' || end[-1] == '\t'))
            *--end = '\0';
        if (r->nhdrs == MAX_HEADERS) {
            *why = "too many headers";
            return 431;
        }
        r->hdrs[r->nhdrs].name = line;
        r->hdrs[r->nhdrs].value = v;
        r->nhdrs++;
        line = eol + 2;
    }
    const char *conn = gw_http_req_header(r, "connection");
    if (conn) {
        if (strcasestr(conn, "close"))
            r->keepalive = 0;
        else if (http10 && strcasestr(conn, "keep-alive"))
            r->keepalive = 1;
    }
    return 0;
}

/* Strict Content-Length: digits only, every copy equal. -1 when invalid,
 * -2 when absent. */
static long long content_length(const struct gw_http_req *r)
{
    long long cl = -2;
    for (size_t i = 0; i < r->nhdrs; i++) {
        if (strcasecmp(r->hdrs[i].name, "content-length") != 0)
            continue;
        const char *v = r->hdrs[i].value;
        if (!*v || strlen(v) > 18)
            return -1;
        long long n = 0;
        for (; *v; v++) {
            if (*v < '0' || *v > '9')
                return -1;
            n = n * 10 + (*v - '0');
        }
        if (cl != -2 && cl != n)
            return -1;
        cl = n;
    }
    return cl;
}

/* ---------------------------------------------------------------- responses */

const char *gw_http_reason(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 202:
        return "Accepted";
    case 204:
        return "No Content";
    case 304:
        return "Not Modified";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 402:
        return "Payment Required";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 412:
        return "Precondition Failed";
    case 413:
        return "Payload Too Large";
    case 415:
        return "Unsupported Media Type";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 499:
        return "Client Closed Request";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    case 505:
        return "HTTP Version Not Supported";
    case 529:
        return "Overloaded";
    default:
        return "Unknown";
    }
}

int gw_http_add_header(struct gw_http_req *r, const char *name, const char *value)
{
    if (r->started)
        return GW_EINVAL;
    /* Refuse CR/LF so a value taken from upstream cannot split the head. */
    if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
        return GW_EINVAL;
    size_t old = r->extra.len;
    int rc = gw_buf_appends(&r->extra, name);
    if (rc == GW_OK)
        rc = gw_buf_append(&r->extra, ": ", 2);
    if (rc == GW_OK)
        rc = gw_buf_appends(&r->extra, value);
    if (rc == GW_OK)
        rc = gw_buf_append(&r->extra, "\r\n", 2);
    if (rc != GW_OK)
        r->extra.len = old; /* all of the line or none of it */
    return rc;
}

static int no_body_status(int status)
{
    return status < 200 || status == 204 || status == 304;
}

/* The response head into the connection's head buffer (no formatter: a
 * head per response). clen < 0 starts a streamed body: chunked for
 * HTTP/1.1, delimited by the connection's close for HTTP/1.0 (which has no
 * chunked encoding). */
static int write_head(struct gw_http_req *r, int status, const char *ctype, long long clen)
{
    struct conn *c = r->conn;
    struct gw_buf *h = &c->head;
    if (c->srv->draining || (clen < 0 && r->http10))
        r->keepalive = 0;
    gw_buf_reset(h);
    int rc = gw_buf_append(h, "HTTP/1.1 ", 9);
    if (rc == GW_OK)
        rc = gw_buf_append_int(h, status);
    if (rc == GW_OK)
        rc = gw_buf_append(h, " ", 1);
    if (rc == GW_OK)
        rc = gw_buf_appends(h, gw_http_reason(status));
    if (rc == GW_OK)
        rc = gw_buf_append(h, "\r\n", 2);
    if (rc == GW_OK && ctype) {
        rc = gw_buf_append(h, "Content-Type: ", 14);
        if (rc == GW_OK)
            rc = gw_buf_appends(h, ctype);
        if (rc == GW_OK)
            rc = gw_buf_append(h, "\r\n", 2);
    }
    if (rc != GW_OK || no_body_status(status)) {
        /* RFC 9110 8.6: no Content-Length on 1xx, 204 and 304 */
    } else if (clen >= 0) {
        rc = gw_buf_append(h, "Content-Length: ", 16);
        if (rc == GW_OK)
            rc = gw_buf_append_int(h, clen);
        if (rc == GW_OK)
            rc = gw_buf_append(h, "\r\n", 2);
    } else if (!r->http10) {
        rc = gw_buf_append(h, "Transfer-Encoding: chunked\r\n", 28);
    }
    if (rc == GW_OK && r->extra.len)
        rc = gw_buf_append(h, r->extra.data, r->extra.len);
    if (rc == GW_OK && !r->keepalive)
        rc = gw_buf_append(h, "Connection: close\r\n", 19);
    if (rc == GW_OK)
        rc = gw_buf_append(h, "\r\n", 2);
    r->started = 1;
    return rc;
}

static int send_or_queue(struct conn *c, struct iovec *iov, int n);

/* The turn's writes, out: straight to the socket when nothing is queued
 * before them. */
static int pend_flush(struct conn *c)
{
    if (!c->pend.len)
        return GW_OK;
    struct iovec iov = {c->pend.data, c->pend.len};
    int rc = send_or_queue(c, &iov, 1);
    if (c->pend.cap > (16u << 10))
        gw_buf_free(&c->pend); /* a burst's buffer is not kept by an idle stream */
    else
        gw_buf_reset(&c->pend);
    /* An owner waiting for the output to drain (gw_http_on_drain) counted
     * these bytes; if the socket took them, no write event will tell it. */
    struct gw_http_req *r = c->req;
    if (r && r->drain_cb && c->state == C_ACTIVE &&
        evbuffer_get_length(bufferevent_get_output(c->bev)) <= r->low_water)
        bufferevent_trigger(c->bev, EV_WRITE,
                            BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
    return rc;
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct conn *c = arg;
    c->flush_armed = 0;
    (void)pend_flush(c);
}

/* Adds iov to the turn's writes, and arms their flush for the end of the
 * turn: every chunk an upstream read produced (or a whole stream written
 * at once) leaves in one sendmsg, with no write event armed for it. */
static int pend_add(struct conn *c, const struct iovec *iov, int n)
{
    for (int i = 0; i < n; i++)
        if (gw_buf_append(&c->pend, iov[i].iov_base, iov[i].iov_len) != GW_OK)
            return GW_ENOMEM;
    if (!c->flush_armed) {
        c->flush_armed = 1;
        event_active(&c->flush_ev, EV_TIMEOUT, 1);
    }
    return GW_OK;
}

static void set_read_timeout(struct conn *c, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    bufferevent_set_timeouts(c->bev, &tv, NULL);
}

/* Ends the request: frees it, and moves its connection on (next request,
 * or close once flushed). */
static void end_request(struct gw_http_req *r, int abort_conn)
{
    struct conn *c = r->conn;
    struct gw_http_server *srv = r->srv;
    int was_active = c ? (c->state == C_ACTIVE && c->req == r) : 1;
    int keepalive = r->keepalive && !abort_conn;
    /* What was written goes out, an aborted answer's too (the connection
     * is cut after it, as after queued bytes). */
    if (c)
        (void)pend_flush(c);
    if (srv && was_active && srv->active > 0)
        srv->active--;
    req_free(r);
    if (!c)
        return;
    c->req = NULL;
    if (abort_conn || !keepalive || c->rejecting || srv->draining || c->peer_eof) {
        c->closing = 1;
        /* A peer that never reads must not hold a closing connection open. */
        struct timeval wt = {CLOSE_FLUSH_MS / 1000, (CLOSE_FLUSH_MS % 1000) * 1000};
        bufferevent_set_timeouts(c->bev, NULL, &wt);
        /* After a refusal the client may still be sending the body we
         * refused; closing with unread input would reset the connection
         * and lose our answer, so read and discard it for a while. */
        c->lingering = c->rejecting && !c->peer_eof;
        if (!c->lingering)
            bufferevent_disable(c->bev, EV_READ);
        bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
        bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            bufferevent_trigger(c->bev, EV_WRITE,
                                BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
        return;
    }
    c->state = C_HEAD;
    c->head_from_us = 0;
    bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
    bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
    set_read_timeout(c, srv->o.idle_timeout_ms);
    bufferevent_enable(c->bev, EV_READ);
    /* A pipelined request may already be buffered: run the read callback
     * from the loop, never from inside the owner's call. */
    if (evbuffer_get_length(bufferevent_get_input(c->bev)) > 0)
        bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
}

/* ---------------------------------------------------------------- local */

/* A local request's answer, collected (gw_http.h). */
struct local {
    struct event *ev; /* delivers the answer on a later turn of the loop */
    gw_http_answer_cb cb;
    void *arg;
    struct gw_buf body; /* bounded by max_answer */
    int status;
    int aborted, overflow;
    int canceled; /* the maker left: freed when the owner ends it */
    int ended;    /* the owner ended it: the answer is on its way */
};

static void local_free(struct gw_http_req *r)
{
    struct local *l = r->local;
    if (l->ev)
        event_free(l->ev);
    gw_buf_free(&l->body);
    free(l);
    req_free(r);
}

static void local_deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_http_req *r = arg;
    struct local *l = r->local;
    struct gw_http_answer a = {.status = l->status,
                               .aborted = l->aborted,
                               .overflow = l->overflow,
                               .body = l->body.data ? l->body.data : "",
                               .len = l->body.len,
                               .headers = r->extra.data ? r->extra.data : "",
                               .headers_len = r->extra.len};
    l->cb(&a, l->arg);
    local_free(r);
}

/* Appends to the collected body; past the bound the answer is cut there
 * and every later write fails, as to a client that left. */
static int local_append(struct gw_http_req *r, const void *data, size_t len)
{
    struct local *l = r->local;
    if (l->overflow || r->gone)
        return GW_ECLOSED;
    if (gw_buf_append(&l->body, data, len) != GW_OK) {
        l->overflow = 1;
        return GW_ECLOSED;
    }
    return GW_OK;
}

static void local_end(struct gw_http_req *r, int aborted)
{
    struct local *l = r->local;
    if (l->canceled) {
        local_free(r);
        return;
    }
    l->ended = 1;
    l->aborted |= aborted || l->overflow;
    event_active(l->ev, EV_TIMEOUT, 1);
}

struct gw_http_req *gw_http_local_new(struct event_base *base, const char *method, const char *path,
                                      const char *const *headers, const char *body, size_t len,
                                      size_t max_answer, gw_http_answer_cb on_answer, void *arg)
{
    struct gw_pool *pool = gw_pool_new(4096);
    struct gw_http_req *r = pool ? gw_pool_calloc(pool, sizeof(*r)) : NULL;
    struct local *l = r ? calloc(1, sizeof(*l)) : NULL;
    if (!l) {
        gw_pool_free(pool);
        return NULL;
    }
    r->pool = pool;
    r->local = l;
    gw_buf_init(&r->extra, 16384);
    gw_buf_init(&l->body, max_answer);
    l->cb = on_answer;
    l->arg = arg;
    l->ev = event_new(base, -1, 0, local_deliver, r);
    r->method = gw_pool_strdup(pool, method);
    r->path = gw_pool_strdup(pool, path);
    r->query = gw_pool_strdup(pool, "");
    r->body = gw_pool_strndup(pool, body ? body : "", len);
    r->body_len = len;
    r->start_us = gw_now_us();
    r->keepalive = 1;
    snprintf(r->peer, sizeof(r->peer), "local");
    int ok = l->ev && r->method && r->path && r->query && r->body;
    for (size_t i = 0; ok && headers && headers[i] && headers[i + 1]; i += 2) {
        if (r->nhdrs == MAX_HEADERS) {
            ok = 0;
            break;
        }
        r->hdrs[r->nhdrs].name = gw_pool_strdup(pool, headers[i]);
        r->hdrs[r->nhdrs].value = gw_pool_strdup(pool, headers[i + 1]);
        ok = r->hdrs[r->nhdrs].name && r->hdrs[r->nhdrs].value;
        r->nhdrs++;
    }
    if (!ok) {
        local_free(r);
        return NULL;
    }
    return r;
}

void gw_http_local_cancel(struct gw_http_req *r)
{
    struct local *l = r->local;
    if (l->ended) { /* answered, not yet delivered: dropped */
        local_free(r);
        return;
    }
    l->canceled = 1;
    r->gone = 1;
    gw_http_req_cb cb = r->close_cb;
    r->close_cb = NULL;
    if (cb)
        cb(r, r->close_arg); /* the owner ends it: freed then */
}

void gw_http_respond(struct gw_http_req *r, int status, const char *ctype, const char *body,
                     size_t len)
{
    /* Answering a request whose chunked response already started is a
     * caller bug: the only safe end is to cut the connection. */
    int misuse = r->started && !r->gone;
    if (r->local) {
        if (!r->started) {
            r->local->status = status;
            r->started = 1;
            (void)local_append(r, body, len);
        }
        local_end(r, misuse);
        return;
    }
    if (r->conn && !r->gone && !r->started) {
        int rc = write_head(r, status, ctype, (long long)len);
        struct iovec iov[2] = {{r->conn->head.data, r->conn->head.len}, {(void *)body, len}};
        int n = len && !r->head_only && !no_body_status(status) ? 2 : 1;
        if (rc != GW_OK || pend_flush(r->conn) != GW_OK || send_or_queue(r->conn, iov, n) != GW_OK)
            misuse = 1; /* out of memory: the connection is cut */
    }
    end_request(r, misuse);
}

int gw_http_start(struct gw_http_req *r, int status, const char *ctype)
{
    if (r->local && !r->gone && !r->started) {
        r->local->status = status;
        r->started = 1;
        return GW_OK;
    }
    if (!r->conn || r->gone)
        return GW_ECLOSED;
    if (r->started)
        return GW_EINVAL;
    if (write_head(r, status, ctype, -1) != GW_OK)
        return GW_ENOMEM;
    /* With the turn's first chunks, in one sendmsg. */
    struct iovec iov = {r->conn->head.data, r->conn->head.len};
    return pend_add(r->conn, &iov, 1);
}

/* Sends iov now when nothing is queued before it, and queues what the
 * socket did not take. A stream's chunk then costs one sendmsg: queued
 * bytes wait for the socket's write event, which costs two epoll changes
 * and a loop turn per chunk. An error is left for the bufferevent's own
 * write to find, as if the bytes had been queued. */
static int send_or_queue(struct conn *c, struct iovec *iov, int n)
{
    struct evbuffer *out = bufferevent_get_output(c->bev);
    size_t sent = 0;
    if (evbuffer_get_length(out) == 0 && !c->tls) {
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(bufferevent_getfd(c->bev), &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        sent = w > 0 ? (size_t)w : 0;
    }
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        size_t skip = sent < iov[i].iov_len ? sent : iov[i].iov_len;
        sent -= skip;
        if (skip < iov[i].iov_len)
            rc = evbuffer_add(out, (const char *)iov[i].iov_base + skip, iov[i].iov_len - skip);
    }
    return rc == 0 ? GW_OK : GW_ENOMEM;
}

/* A chunk's pieces into iov (3 entries at most; size holds its size
 * line): returns how many. */
static int chunk_iov(struct gw_http_req *r, const void *data, size_t len, struct iovec *iov,
                     char *size, size_t size_cap)
{
    int n = 0;
    if (!len || r->head_only)
        return n;
    if (!r->http10) { /* a chunk: its size in hex, CRLF, the bytes, CRLF */
        size_t k = size_cap;
        size[--k] = '\n';
        size[--k] = '\r';
        size_t v = len;
        do {
            size[--k] = "0123456789abcdef"[v & 15];
            v >>= 4;
        } while (v);
        iov[n++] = (struct iovec){size + k, size_cap - k};
    }
    iov[n++] = (struct iovec){(void *)data, len};
    if (!r->http10)
        iov[n++] = (struct iovec){"\r\n", 2};
    return n;
}

int gw_http_write(struct gw_http_req *r, const void *data, size_t len)
{
    if (r->local)
        return !r->started ? GW_EINVAL : local_append(r, data, len);
    if (!r->conn || r->gone)
        return GW_ECLOSED;
    if (!r->started)
        return GW_EINVAL;
    if (len == 0 || r->head_only)
        return GW_OK;
    struct iovec iov[3];
    char size[2 * sizeof(size_t) + 2];
    int n = chunk_iov(r, data, len, iov, size, sizeof(size));
    return pend_add(r->conn, iov, n);
}

size_t gw_http_pending(const struct gw_http_req *r)
{
    if (!r->conn || r->gone)
        return 0;
    return evbuffer_get_length(bufferevent_get_output(r->conn->bev)) + r->conn->pend.len;
}

void gw_http_on_drain(struct gw_http_req *r, size_t low_water, gw_http_req_cb cb, void *arg)
{
    r->drain_cb = cb;
    r->drain_arg = arg;
    r->low_water = low_water;
    if (r->conn && !r->gone) {
        bufferevent_setwatermark(r->conn->bev, EV_WRITE, low_water, 0);
        if (gw_http_pending(r) <= low_water)
            bufferevent_trigger(r->conn->bev, EV_WRITE,
                                BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
    }
}

int gw_http_finish_with(struct gw_http_req *r, const void *data, size_t len)
{
    int rc = GW_OK;
    if (r->local) {
        if (r->started)
            rc = local_append(r, data, len);
        local_end(r, !r->started || rc != GW_OK);
        return rc;
    }
    if (r->conn && !r->gone && r->started) {
        struct iovec iov[4];
        char size[2 * sizeof(size_t) + 2];
        int n = chunk_iov(r, data, len, iov, size, sizeof(size));
        if (!r->http10 && !r->head_only)
            iov[n++] = (struct iovec){"0\r\n\r\n", 5};
        if (n)
            rc = pend_add(r->conn, iov, n); /* end_request flushes it */
    }
    end_request(r, r->started && rc == GW_OK ? 0 : 1);
    return rc;
}

void gw_http_finish(struct gw_http_req *r)
{
    (void)gw_http_finish_with(r, NULL, 0);
}

void gw_http_abort(struct gw_http_req *r)
{
    if (r->local) {
        local_end(r, 1);
        return;
    }
    end_request(r, 1);
}

/* ---------------------------------------------------------------- refusals */

static void default_reject(struct gw_http_req *r, int status, const char *code, const char *message,
                           void *arg)
{
    (void)arg;
    size_t n = 0;
    char *body = gw_json_error_body(message, "invalid_request_error", NULL, code, &n);
    gw_http_respond(r, status, "application/json", body ? body : "", body ? n : 0);
    free(body);
}

/* Refuses the request being parsed; the connection closes after the answer
 * because the rest of the input can no longer be framed. */
static void reject(struct conn *c, int status, const char *code, const char *msg)
{
    struct gw_http_req *r = c->req;
    if (!r->method)
        r->method = "";
    if (!r->path)
        r->path = "";
    if (!r->query)
        r->query = "";
    r->keepalive = 0;
    c->rejecting = 1;
    c->state = C_ACTIVE;
    c->srv->active++;
    gw_http_reject_cb cb = c->srv->o.reject ? c->srv->o.reject : default_reject;
    cb(r, status, code, msg, c->srv->o.arg);
}

/* ---------------------------------------------------------------- connection */

static int read_head(struct conn *c, struct evbuffer *in)
{
    struct gw_http_server *srv = c->srv;
    /* A head's first byte starts its deadline: bytes that trickle in
     * (slowloris) re-arm no timer of it. */
    if (!c->head_from_us && evbuffer_get_length(in) > 0) {
        c->head_from_us = gw_now_us();
        set_read_timeout(c, srv->o.head_timeout_ms);
    }
    if (c->head_from_us && gw_now_us() - c->head_from_us > (int64_t)srv->o.head_timeout_ms * 1000) {
        if (!(c->req = req_new(c)))
            return -1;
        reject(c, 408, "request_timeout", "the request head took too long to arrive");
        return -1;
    }
    /* Resume the search where the last one stopped (less the 3 bytes a
     * terminator could straddle), so a head sent byte by byte costs O(n). */
    struct evbuffer_ptr from;
    evbuffer_ptr_set(in, &from, c->head_scanned > 3 ? c->head_scanned - 3 : 0, EVBUFFER_PTR_SET);
    struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, &from);
    if (end.pos < 0) {
        c->head_scanned = evbuffer_get_length(in);
        if (evbuffer_get_length(in) > srv->o.max_header_bytes) {
            if (!(c->req = req_new(c)))
                return -1;
            reject(c, 431, "headers_too_large", "request headers too large");
            return -1;
        }
        return 0;
    }
    /* Tolerate stray CRLFs between pipelined requests (RFC 9112 2.2). */
    size_t hlen = (size_t)end.pos + 4;
    if (hlen > srv->o.max_header_bytes + 4) {
        if (!(c->req = req_new(c)))
            return -1;
        reject(c, 431, "headers_too_large", "request headers too large");
        return -1;
    }
    c->head_scanned = 0;
    c->head_from_us = 0;
    if (!(c->req = req_new(c)))
        return -1;
    struct gw_http_req *r = c->req;
    char *head = gw_pool_alloc(r->pool, hlen + 1);
    if (!head)
        return -1;
    evbuffer_remove(in, head, hlen);
    head[hlen] = '\0';
    char *start = head;
    while (start[0] == '\r' && start[1] == '\n')
        start += 2;
    if (!*start) {
        req_free(r);
        c->req = NULL;
        return 1; /* only blank lines: keep reading */
    }
    r->start_us = gw_now_us();
    const char *why = NULL;
    if (!head_bytes_ok(start, hlen - (size_t)(start - head))) {
        reject(c, 400, "invalid_http", "control characters or bare CR/LF in the request head");
        return -1;
    }
    int st = parse_head(r, start, &why);
    if (st) {
        reject(c, st, "invalid_http", why);
        return -1;
    }
    if (gw_http_req_header(r, "transfer-encoding")) {
        reject(c, 411, "length_required",
               "chunked request bodies are not supported: send Content-Length");
        return -1;
    }
    long long cl = content_length(r);
    if (cl == -1) {
        reject(c, 400, "invalid_http", "invalid Content-Length");
        return -1;
    }
    if (cl < 0)
        cl = 0;
    size_t limit = srv->o.body_limit ? srv->o.body_limit(r, srv->o.arg) : 0;
    if (!limit)
        limit = srv->o.max_body_bytes;
    if ((unsigned long long)cl > limit) {
        char *msg = gw_pool_printf(
            r->pool, "request body of %lld bytes exceeds the limit of %zu bytes", cl, limit);
        reject(c, 413, "request_too_large", msg ? msg : "request body too large");
        return -1;
    }
    c->body_need = (size_t)cl;
    const char *expect = gw_http_req_header(r, "expect");
    if (expect && strcasecmp(expect, "100-continue") == 0 && evbuffer_get_length(in) < c->body_need)
        evbuffer_add(bufferevent_get_output(c->bev), "HTTP/1.1 100 Continue\r\n\r\n", 25);
    c->state = C_BODY;
    return 1;
}

static int read_body(struct conn *c, struct evbuffer *in)
{
    if (evbuffer_get_length(in) < c->body_need)
        return 0;
    struct gw_http_req *r = c->req;
    r->body = gw_pool_alloc(r->pool, c->body_need + 1);
    if (!r->body)
        return -1;
    evbuffer_remove(in, r->body, c->body_need);
    r->body[c->body_need] = '\0';
    r->body_len = c->body_need;
    c->state = C_ACTIVE;
    c->srv->active++;
    /* While the owner works, stop the idle timer; bound pipelined input. */
    bufferevent_set_timeouts(c->bev, NULL, NULL);
    bufferevent_setwatermark(c->bev, EV_READ, 0, c->srv->o.max_header_bytes);
    c->srv->o.handler(r, c->srv->o.arg);
    return 1;
}

static void conn_process(struct conn *c)
{
    c->in_process = 1;
    struct evbuffer *in = bufferevent_get_input(c->bev);
    int rc = 1;
    while (rc > 0 && !c->doomed && !c->closing) {
        if (c->state == C_HEAD &&
            evbuffer_get_length(bufferevent_get_output(c->bev)) > PIPELINE_OUT_MAX) {
            /* A client that pipelines without reading its answers: stop
             * reading until it has taken them (on_write resumes), and give
             * it the idle timeout to take them: with reading off, no read
             * timer runs, and it would hold the connection for ever. */
            bufferevent_disable(c->bev, EV_READ);
            c->read_paused = 1;
            struct timeval wt = {c->srv->o.idle_timeout_ms / 1000,
                                 (c->srv->o.idle_timeout_ms % 1000) * 1000};
            bufferevent_set_timeouts(c->bev, NULL, &wt);
            break;
        }
        if (c->state == C_HEAD)
            rc = read_head(c, in);
        else if (c->state == C_BODY)
            rc = read_body(c, in);
        else
            break;
    }
    c->in_process = 0;
    if (rc < 0 && !c->doomed && c->state != C_ACTIVE && !c->closing)
        c->doomed = 1; /* allocation failure: nothing else to do */
    if (c->doomed)
        conn_free(c);
}

static void conn_free(struct conn *c)
{
    if (c->in_process) {
        c->doomed = 1;
        return;
    }
    struct gw_http_server *srv = c->srv;
    struct gw_http_req *r = c->req;
    c->req = NULL;
    if (r) {
        if (c->state == C_ACTIVE) {
            /* The owner still holds it: detach and tell it. When the server
             * itself is going away, the request must not point at it. */
            r->conn = NULL;
            r->gone = 1;
            if (srv->freeing)
                r->srv = NULL;
        } else {
            req_free(r);
            r = NULL;
        }
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        srv->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    srv->nconns--;
    bufferevent_free(c->bev);
    gw_buf_free(&c->head);
    event_del(&c->flush_ev);
    gw_buf_free(&c->pend);
    free(c);
    if (r && r->close_cb) {
        gw_http_req_cb cb = r->close_cb;
        r->close_cb = NULL;
        cb(r, r->close_arg);
    }
}

#define LINGER_MAX_BYTES (64u << 20)
#define LINGER_MS 2000

static void on_read(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    if (c->lingering) {
        struct evbuffer *in = bufferevent_get_input(bev);
        c->discarded += evbuffer_get_length(in);
        evbuffer_drain(in, evbuffer_get_length(in));
        /* The linger is one deadline, not a timer each byte re-arms. */
        if (c->discarded > LINGER_MAX_BYTES ||
            (c->linger_until_us && gw_now_us() >= c->linger_until_us))
            conn_free(c);
        return;
    }
    if (c->state != C_ACTIVE && !c->closing)
        conn_process(c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
    struct conn *c = arg;
    if (c->closing) {
        if (evbuffer_get_length(bufferevent_get_output(bev)) != 0)
            return;
        if (!c->lingering) {
            conn_free(c);
            return;
        }
        /* Answer flushed: half-close, then wait for the client's EOF. */
        shutdown(bufferevent_getfd(bev), SHUT_WR);
        c->linger_until_us = gw_now_us() + (int64_t)LINGER_MS * 1000;
        set_read_timeout(c, LINGER_MS);
        bufferevent_enable(bev, EV_READ);
        return;
    }
    if (c->read_paused && evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
        c->read_paused = 0;
        set_read_timeout(c, c->srv->o.idle_timeout_ms);
        bufferevent_enable(bev, EV_READ);
        if (c->state == C_HEAD)
            conn_process(c);
        return;
    }
    struct gw_http_req *r = c->req;
    if (r && c->state == C_ACTIVE && r->drain_cb &&
        evbuffer_get_length(bufferevent_get_output(bev)) <= r->low_water) {
        gw_http_req_cb cb = r->drain_cb;
        r->drain_cb = NULL;
        bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
        cb(r, r->drain_arg);
    }
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
    struct conn *c = arg;
    /* A half-close while the answer is being made: reading has stopped
     * (libevent disables it at EOF); answer on when so configured. */
    if ((what & BEV_EVENT_EOF) && (what & BEV_EVENT_READING) && c->srv->o.half_close_answers &&
        c->state == C_ACTIVE && c->req && !c->closing) {
        c->peer_eof = 1;
        bufferevent_disable(bev, EV_READ);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))
        conn_free(c);
}

static void refuse(int fd);

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
                      void *arg)
{
    (void)l;
    (void)salen;
    struct gw_http_server *srv = arg;
    if (srv->o.max_connections && srv->nconns >= srv->o.max_connections) {
        /* At the cap: a prompt 503 and a close, as at the open-file limit. */
        refuse(fd);
        if (srv->o.refused)
            srv->o.refused(1, srv->o.arg);
        return;
    }
    struct conn *c = calloc(1, sizeof(*c));
    if (!c) {
        close(fd);
        return;
    }
    gw_buf_init(&c->head, 32768);
    gw_buf_init(&c->pend, 0);
    event_assign(&c->flush_ev, srv->base, -1, 0, on_flush, c);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)sa)->sin_addr, c->peer, sizeof(c->peer));
    else if (sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)sa)->sin6_addr, c->peer, sizeof(c->peer));
    if (srv->o.tls) {
        /* The handshake runs inside the bufferevent; the head deadline
         * (the read timeout) bounds it like the head it precedes. */
        SSL *ssl = gw_tls_ssl_new(srv->o.tls);
        c->bev = ssl ? bufferevent_openssl_socket_new(srv->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING,
                                                      BEV_OPT_CLOSE_ON_FREE)
                     : NULL;
        /* (A failed bufferevent_openssl_socket_new frees ssl itself, as
         * BEV_OPT_CLOSE_ON_FREE asks; libevent 2.1.9 and later.) */
        if (c->bev) {
            /* A client that closes without close_notify is an EOF. */
            bufferevent_openssl_set_allow_dirty_shutdown(c->bev, 1);
            c->tls = 1;
        }
    } else {
        c->bev = bufferevent_socket_new(srv->base, fd, BEV_OPT_CLOSE_ON_FREE);
    }
    if (!c->bev) {
        close(fd);
        free(c);
        return;
    }
    /* Process-wide so ids stay unique across servers on other threads. */
    static uint64_t next_conn_id;
    c->id = __atomic_add_fetch(&next_conn_id, 1, __ATOMIC_RELAXED);
    c->srv = srv;
    c->state = C_HEAD;
    c->next = srv->conns;
    if (srv->conns)
        srv->conns->prev = c;
    srv->conns = c;
    srv->nconns++;
    bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
    set_read_timeout(c, srv->o.idle_timeout_ms);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* ------------------------------------------------- the open-file limit */

#define REFUSAL_BODY                                                                               \
    "{\"error\":{\"message\":\"the server is at its connection or open-file limit; retry "         \
    "shortly\","                                                                                   \
    "\"type\":\"api_error\",\"param\":null,\"code\":\"too_many_connections\"}}"
static const char refusal[] = "HTTP/1.1 503 Service Unavailable\r\n"
                              "Content-Type: application/json\r\n"
                              "Retry-After: 1\r\n"
                              "Connection: close\r\n"
                              "Content-Length: 151\r\n\r\n" REFUSAL_BODY;
_Static_assert(sizeof(REFUSAL_BODY) - 1 == 151, "the refusal's Content-Length");

static int open_reserve(void)
{
    return open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Answers a connection accepted only to be refused, and closes it. The
 * request, when it has arrived, is read first: closing a socket with
 * unread input resets the connection, and the client could lose the 503.
 * Nothing here blocks; what does not fit is dropped. */
static void refuse(int fd)
{
    char sink[4096];
    for (int i = 0; i < 16 && recv(fd, sink, sizeof(sink), MSG_DONTWAIT) > 0; i++)
        ;
    (void)send(fd, refusal, sizeof(refusal) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    close(fd);
}

/* Refuses up to SHED_BATCH waiting connections, each accepted on the
 * reserve descriptor. GW_OK: none is waiting now; GW_EAGAIN: the batch ran
 * out (the listener, still readable, calls again); GW_EIO: no descriptor
 * could be had, not even the reserve (another thread took it), or accept
 * failed otherwise. *n counts the refused. */
static int shed_waiting(struct gw_http_server *srv, uint64_t *n)
{
    evutil_socket_t lfd = evconnlistener_get_fd(srv->listener);
    for (int i = 0; i < SHED_BATCH; i++) {
        if (srv->reserve_fd < 0 && (srv->reserve_fd = open_reserve()) < 0)
            return GW_EIO;
        close(srv->reserve_fd);
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        int err = errno;
        if (fd >= 0) {
            refuse(fd);
            (*n)++;
        }
        /* After the close, so the number just freed is the one taken. */
        srv->reserve_fd = open_reserve();
        if (fd < 0 && (err == EAGAIN || err == EWOULDBLOCK))
            return GW_OK;
        if (fd < 0 && err != ECONNABORTED && err != EINTR)
            return GW_EIO;
    }
    return GW_EAGAIN;
}

static void resume_accepting(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_http_server *srv = arg;
    if (srv->reserve_fd < 0)
        srv->reserve_fd = open_reserve();
    if (srv->listener)
        evconnlistener_enable(srv->listener);
}

/* libevent calls this when accept(2) fails with anything but "try again";
 * without it, it would log and retry at once, for ever. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
    struct gw_http_server *srv = arg;
    int err = EVUTIL_SOCKET_ERROR();
    uint64_t n = 0;
    int rc = err == EMFILE || err == ENFILE ? shed_waiting(srv, &n) : GW_EIO;
    if (rc == GW_EIO) {
        /* Rest rather than spin; the waiting clients wait a little. */
        struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
        evconnlistener_disable(l);
        evtimer_add(srv->resume, &tv);
    }
    if (n && srv->o.refused)
        srv->o.refused(n, srv->o.arg);
    srv->unlogged += n;
    int64_t now = gw_now_us();
    if (srv->logged_us && now - srv->logged_us < REFUSED_LOG_US)
        return;
    srv->logged_us = now;
    struct rlimit rl = {0, 0};
    (void)getrlimit(RLIMIT_NOFILE, &rl);
    gw_logf(GW_LOG_WARN, "accept failed; refusing connections", "{s:s,s:I,s:I,s:b}", "error",
            strerror(err), "refused", (json_int_t)srv->unlogged, "nofile", (json_int_t)rl.rlim_cur,
            "paused", rc == GW_EIO);
    srv->unlogged = 0;
}

/* ---------------------------------------------------------------- server */

struct gw_http_server *gw_http_server_new(struct event_base *base, int fd,
                                          const struct gw_http_server_opts *o)
{
    struct gw_http_server *srv = calloc(1, sizeof(*srv));
    if (!srv)
        return NULL;
    srv->base = base;
    srv->o = *o;
    if (!srv->o.max_header_bytes)
        srv->o.max_header_bytes = 32 * 1024;
    if (!srv->o.max_body_bytes)
        srv->o.max_body_bytes = 4 * 1024 * 1024;
    if (!srv->o.idle_timeout_ms)
        srv->o.idle_timeout_ms = 60000;
    if (!srv->o.head_timeout_ms)
        srv->o.head_timeout_ms = 10000;
    gw_log_route_libevent();
    /* Without a reserve (no /dev/null) the server still serves; at the
     * limit it can then only pause its listener. */
    srv->reserve_fd = open_reserve();
    srv->resume = evtimer_new(base, resume_accepting, srv);
    if (srv->resume)
        srv->listener = evconnlistener_new(base, on_accept, srv, LEV_OPT_CLOSE_ON_FREE, -1, fd);
    if (!srv->listener) {
        if (srv->resume)
            event_free(srv->resume);
        if (srv->reserve_fd >= 0)
            close(srv->reserve_fd);
        free(srv);
        return NULL;
    }
    evconnlistener_set_error_cb(srv->listener, on_accept_error);
    return srv;
}

void gw_http_server_drain(struct gw_http_server *srv)
{
    if (srv->draining)
        return;
    srv->draining = 1;
    if (srv->listener) {
        evconnlistener_free(srv->listener);
        srv->listener = NULL;
    }
    evtimer_del(srv->resume);
    struct conn *c = srv->conns;
    while (c) {
        struct conn *next = c->next;
        if (c->state != C_ACTIVE && !c->closing)
            conn_free(c);
        c = next;
    }
}

size_t gw_http_server_active(const struct gw_http_server *srv)
{
    return srv->active;
}
size_t gw_http_server_connections(const struct gw_http_server *srv)
{
    return srv->nconns;
}

void gw_http_server_free(struct gw_http_server *srv)
{
    if (!srv)
        return;
    srv->freeing = 1;
    if (srv->listener)
        evconnlistener_free(srv->listener);
    while (srv->conns)
        conn_free(srv->conns);
    event_free(srv->resume);
    if (srv->reserve_fd >= 0)
        close(srv->reserve_fd);
    free(srv);
}
