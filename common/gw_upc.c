/*
 * gw_upc: see gw_upc.h. The pieces, in the order a transfer meets them:
 * the target (URL, proxy), the pool, a new connection (resolve, connect,
 * the proxy's tunnel, TLS), sending the request, reading the answer, the
 * end of a transfer (its connection back to the pool or closed, on_done
 * from the loop).
 */
#include "gw_upc.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_codec.h"
#include "gw_error.h"
#include "gw_h1resp.h"
#include "gw_time.h"

#define RBUF_SIZE 16384       /* the loop's read buffer: one TLS record */
#define MAX_IDLE_PER_POOL 512 /* idle connections kept per destination */
#define SWEEP_MS 5000
#define READS_PER_WAKE 8

/* ---- the target ---------------------------------------------------- */

struct upc_target {
    char *mem;          /* one allocation holding the strings below */
    const char *host;   /* as in the URL, without brackets */
    const char *path;   /* from the first '/' ('/' when none), query included */
    char hostport[300]; /* for the Host header and CONNECT: [v6]:port or name[:port] */
    int port;
    int tls;
    int numeric; /* host is an IP literal */
    /* The proxy, when one applies (an http:// proxy only). */
    char *proxy_mem;
    const char *proxy_host;
    int proxy_port;
    char *proxy_auth; /* "Basic ..." or NULL */
};

static void target_free(struct upc_target *t)
{
    free(t->mem);
    free(t->proxy_mem);
    free(t->proxy_auth);
    memset(t, 0, sizeof(*t));
}

static int is_ip_literal(const char *h)
{
    unsigned char b[16];
    return inet_pton(AF_INET, h, b) == 1 || inet_pton(AF_INET6, h, b) == 1;
}

/* scheme://[userinfo@]host[:port][/path]: host, port and path into t->mem.
 * want_path 0 for a proxy URL (any path ignored). */
static int split_url(const char *url, char **mem, const char **host, int *port, const char **path,
                     int *tls, int want_path)
{
    const char *p;
    if (strncasecmp(url, "http://", 7) == 0) {
        *tls = 0;
        p = url + 7;
    } else if (strncasecmp(url, "https://", 8) == 0) {
        *tls = 1;
        p = url + 8;
    } else {
        return GW_EINVAL;
    }
    size_t alen = strcspn(p, "/?#");
    const char *at = NULL; /* the userinfo ends at the authority's last '@' */
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            at = q;
    const char *auth = at ? at + 1 : p;
    size_t hl = alen - (size_t)(auth - p);
    const char *rest = p + alen;
    size_t pl = strlen(rest);
    *mem = malloc(hl + pl + 3);
    if (!*mem)
        return GW_ENOMEM;
    char *h = *mem;
    const char *hp = auth, *he = auth + hl, *colon;
    if (hl && auth[0] == '[') {
        const char *rb = memchr(auth, ']', hl);
        if (!rb)
            return GW_EINVAL;
        memcpy(h, auth + 1, (size_t)(rb - auth - 1));
        h[rb - auth - 1] = '\0';
        colon = rb + 1 < he && rb[1] == ':' ? rb + 1 : NULL;
        if (!colon && rb + 1 != he)
            return GW_EINVAL;
    } else {
        colon = memchr(hp, ':', hl);
        size_t n = colon ? (size_t)(colon - hp) : hl;
        memcpy(h, hp, n);
        h[n] = '\0';
    }
    if (!h[0])
        return GW_EINVAL;
    /* A proxy's default port is 1080, as libcurl had it. */
    *port = *tls ? 443 : want_path ? 80 : 1080;
    if (colon) {
        long v = 0;
        const char *d = colon + 1;
        if (d == he)
            return GW_EINVAL;
        for (; d < he; d++) {
            if (*d < '0' || *d > '9' || (v = v * 10 + (*d - '0')) > 65535)
                return GW_EINVAL;
        }
        if (v == 0)
            return GW_EINVAL;
        *port = (int)v;
    }
    *host = h;
    char *pa = h + strlen(h) + 1;
    if (want_path) {
        size_t frag = strcspn(rest, "#");
        if (frag == 0 || rest[0] != '/') {
            pa[0] = '/';
            memcpy(pa + 1, rest, frag);
            pa[frag + 1] = '\0';
        } else {
            memcpy(pa, rest, frag);
            pa[frag] = '\0';
        }
        *path = pa;
    }
    return GW_OK;
}

static int is_loopback(const char *h)
{
    if (strcasecmp(h, "localhost") == 0 || strcmp(h, "::1") == 0)
        return 1;
    struct in_addr a;
    return inet_pton(AF_INET, h, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* NO_PROXY as libcurl read it: "*", or names that match the host or a
 * domain it is in (a leading dot optional). */
static int no_proxy_match(const char *list, const char *host)
{
    size_t hl = strlen(host);
    while (*list) {
        list += strspn(list, ", \t");
        size_t n = strcspn(list, ", \t");
        if (n == 0)
            break;
        const char *e = list;
        size_t el = n;
        if (el == 1 && e[0] == '*')
            return 1;
        if (e[0] == '.') {
            e++;
            el--;
        }
        if (el && el <= hl && strncasecmp(host + hl - el, e, el) == 0 &&
            (el == hl || host[hl - el - 1] == '.'))
            return 1;
        list += n;
    }
    return 0;
}

static const char *env2(const char *a, const char *b)
{
    const char *v = getenv(a);
    if ((!v || !*v) && b)
        v = getenv(b);
    return v && *v ? v : NULL;
}

/* Base64 of user:pass from a proxy URL's userinfo. */
static char *proxy_basic(const char *url)
{
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t alen = strcspn(p, "/?#");
    const char *at = NULL;
    for (const char *q = p; q < p + alen; q++)
        if (*q == '@')
            at = q;
    if (!at)
        return NULL;
    /* user:password, each percent-decoded, as libcurl sent them. */
    size_t ul = (size_t)(at - p);
    unsigned char *plain = malloc(ul + 1);
    if (!plain)
        return NULL;
    size_t n = (size_t)gw_pct_decode(p, ul, (char *)plain, 0);
    size_t cap = 6 + 4 * ((n + 2) / 3) + 1;
    char *out = malloc(cap);
    if (out) {
        memcpy(out, "Basic ", 6);
        gw_b64_encode(plain, n, out + 6);
    }
    free(plain);
    return out;
}

/* The proxy environment, read once per client (gw_upc_new), not per
 * transfer. */
struct upc_env {
    char *no_proxy, *https_proxy, *http_proxy, *all_proxy;
};

static char *env_dup(const char *a, const char *b)
{
    const char *v = env2(a, b);
    return v ? strdup(v) : NULL;
}

static void env_load(struct upc_env *e)
{
    e->no_proxy = env_dup("no_proxy", "NO_PROXY");
    e->https_proxy = env_dup("https_proxy", "HTTPS_PROXY");
    e->http_proxy = env_dup("http_proxy", NULL);
    e->all_proxy = env_dup("all_proxy", "ALL_PROXY");
}

static void env_free(struct upc_env *e)
{
    free(e->no_proxy);
    free(e->https_proxy);
    free(e->http_proxy);
    free(e->all_proxy);
}

static int target_init(struct upc_target *t, const char *url, const struct upc_env *env)
{
    memset(t, 0, sizeof(*t));
    int rc = split_url(url, &t->mem, &t->host, &t->port, &t->path, &t->tls, 1);
    if (rc != GW_OK)
        return rc;
    t->numeric = is_ip_literal(t->host);
    int v6 = strchr(t->host, ':') != NULL;
    int dflt = t->port == (t->tls ? 443 : 80);
    int n = dflt ? snprintf(t->hostport, sizeof(t->hostport), v6 ? "[%s]" : "%s", t->host)
                 : snprintf(t->hostport, sizeof(t->hostport), v6 ? "[%s]:%d" : "%s:%d", t->host,
                            t->port);
    if (n < 0 || (size_t)n >= sizeof(t->hostport))
        return GW_EINVAL;
    if (is_loopback(t->host))
        return GW_OK;
    const char *np = env->no_proxy;
    if (np && no_proxy_match(np, t->host))
        return GW_OK;
    const char *px = t->tls ? env->https_proxy : env->http_proxy;
    if (!px)
        px = env->all_proxy;
    if (!px)
        return GW_OK;
    int ptls = 0;
    const char *ph, *pp;
    if (!strstr(px, "://")) {
        /* A bare host:port means http://, as libcurl read it. */
        size_t l = strlen(px) + 8;
        char *u = malloc(l);
        if (!u)
            return GW_ENOMEM;
        snprintf(u, l, "http://%s", px);
        rc = split_url(u, &t->proxy_mem, &ph, &t->proxy_port, &pp, &ptls, 0);
        if (rc == GW_OK)
            t->proxy_auth = proxy_basic(u);
        free(u);
    } else {
        rc = split_url(px, &t->proxy_mem, &ph, &t->proxy_port, &pp, &ptls, 0);
        if (rc == GW_OK)
            t->proxy_auth = proxy_basic(px);
    }
    if (rc != GW_OK || ptls)
        return GW_EINVAL; /* https:// and socks proxies are not supported */
    t->proxy_host = ph;
    return GW_OK;
}

/* ---- the client, its pools and connections -------------------------- */

struct upc_pool;
struct upc_conn;

enum conn_state {
    CS_RESOLVE,
    CS_CONNECT,
    CS_TUNNEL, /* the proxy's answer to CONNECT */
    CS_TLS,    /* the handshake */
    CS_READY,  /* carrying a transfer */
    CS_IDLE,   /* in the pool */
};

struct upc_conn {
    struct gw_upc *u;
    struct upc_pool *pool;
    struct gw_upc_xfer *x; /* the transfer it carries (or is set up for) */
    int fd;
    SSL *ssl;
    enum conn_state state;
    int served; /* an answer was read on it: it is a reused one next time */
    int wev_on; /* wev is added */
    int tls_read_wants_write;
    int tls_write_wants_read;
    struct event rev, wev, tmo;
    int events_set;
    struct evutil_addrinfo *ai, *ai_next;
    struct evdns_getaddrinfo_request *dnsreq;
    struct gw_buf tunnel; /* the proxy's answer to CONNECT */
    int64_t idle_since;
    char err[384];
    struct upc_conn *inext, *iprev; /* the pool's idle list */
    struct upc_conn *anext, *aprev; /* every connection */
};

struct upc_pool {
    struct upc_pool *next;
    struct upc_conn *idle, *idle_tail;
    size_t nidle;
    char key[];
};

enum xfer_phase { XF_CONNECT, XF_SEND, XF_HEAD, XF_BODY, XF_DONE };

struct gw_upc_xfer {
    struct gw_upc *u;
    struct gw_upc_opts o;
    struct upc_target t;
    struct upc_pool *pool;
    struct upc_conn *c;
    enum xfer_phase phase;
    struct gw_buf req; /* the request head */
    /* The body's pieces (o.body_iov, or one: o.body) and their length. */
    const struct iovec *body;
    size_t nbody, body_len;
    struct iovec one;
    size_t sent; /* of head and body */
    int sent_all;
    struct gw_buf rhead; /* the answer's head while it arrives in pieces */
    struct gw_h1_head h;
    struct gw_h1_chunked ch;
    uint64_t body_left;
    /* Paused: the piece on_body did not take, then raw bytes not parsed. */
    char *held;
    size_t held_data, held_raw;
    int paused;
    int got_bytes;   /* a byte of the answer arrived */
    int send_broken; /* sending failed (c->err): only an answer already sent may be read */
    int retried;
    int in_cb;
    int canceled;
    int finished;
    enum gw_upc_result result;
    char msg[224];
    struct event defer;
    struct gw_upc_xfer *next, *prev;
};

struct gw_upc {
    struct event_base *base;
    struct evdns_base *dns;
    struct upc_pool *pools;
    struct upc_conn *conns;
    struct gw_upc_xfer *xfers;
    size_t nrunning, nconns;
    struct event sweep;
    struct upc_env env;
    char rbuf[RBUF_SIZE];
};

static SSL_CTX *g_ctx;
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;

static void ctx_init(void)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx)
        return;
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    /* A close without close_notify reads as the end of the stream, as on
     * plain TCP: the framing (length, chunks) says whether it was whole. */
    SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        SSL_CTX_free(ctx);
        return;
    }
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                              SSL_MODE_RELEASE_BUFFERS);
    static const unsigned char alpn[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn));
    g_ctx = ctx;
}

static void on_read(evutil_socket_t fd, short what, void *arg);
static void on_write(evutil_socket_t fd, short what, void *arg);
static void on_connect_timeout(evutil_socket_t fd, short what, void *arg);
static void on_defer(evutil_socket_t fd, short what, void *arg);
static void conn_connect_next(struct upc_conn *c);
enum { GO_ON, STOP };

static int xfer_send(struct gw_upc_xfer *x);
static void xfer_fail(struct gw_upc_xfer *x, enum gw_upc_result r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int conn_open(struct gw_upc_xfer *x);

/* Takes an idle connection out of its pool's list. */
static void idle_unlink(struct upc_conn *c)
{
    struct upc_pool *p = c->pool;
    if (c->iprev)
        c->iprev->inext = c->inext;
    else
        p->idle = c->inext;
    if (c->inext)
        c->inext->iprev = c->iprev;
    else
        p->idle_tail = c->iprev;
    c->inext = c->iprev = NULL;
    p->nidle--;
}

static void conn_close(struct upc_conn *c)
{
    struct gw_upc *u = c->u;
    if (c->dnsreq) {
        struct evdns_getaddrinfo_request *r = c->dnsreq;
        c->dnsreq = NULL;
        evdns_getaddrinfo_cancel(r); /* runs on_resolved with EVUTIL_EAI_CANCEL */
    }
    if (c->state == CS_IDLE)
        idle_unlink(c);
    if (c->events_set) {
        event_del(&c->rev);
        event_del(&c->wev);
        event_del(&c->tmo);
    }
    if (c->ssl)
        SSL_free(c->ssl);
    if (c->fd >= 0)
        close(c->fd);
    if (c->ai)
        evutil_freeaddrinfo(c->ai);
    gw_buf_free(&c->tunnel);
    if (c->aprev)
        c->aprev->anext = c->anext;
    else
        u->conns = c->anext;
    if (c->anext)
        c->anext->aprev = c->aprev;
    u->nconns--;
    if (c->x)
        c->x->c = NULL;
    free(c);
}

static void wev_set(struct upc_conn *c, int on)
{
    if (on == c->wev_on)
        return;
    c->wev_on = on;
    if (on)
        event_add(&c->wev, NULL);
    else
        event_del(&c->wev);
}

/* The connection is set up: the transfer it was opened for is sent. */
static void conn_ready(struct upc_conn *c)
{
    c->state = CS_READY;
    event_del(&c->tmo);
    (void)xfer_send(c->x);
}

static void ssl_err(struct upc_conn *c, const char *what)
{
    unsigned long e = ERR_get_error();
    long v = c->ssl ? SSL_get_verify_result(c->ssl) : X509_V_OK;
    if (v != X509_V_OK)
        snprintf(c->err, sizeof(c->err), "%s: certificate verify failed: %s", what,
                 X509_verify_cert_error_string(v));
    else if (e)
        snprintf(c->err, sizeof(c->err), "%s: %s", what, ERR_reason_error_string(e));
    else
        snprintf(c->err, sizeof(c->err), "%s: %s", what, errno ? strerror(errno) : "closed");
    ERR_clear_error();
}

static void tls_handshake(struct upc_conn *c)
{
    ERR_clear_error();
    int r = SSL_connect(c->ssl);
    if (r == 1) {
        wev_set(c, 0);
        conn_ready(c);
        return;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ) {
        wev_set(c, 0);
        return;
    }
    if (e == SSL_ERROR_WANT_WRITE) {
        wev_set(c, 1);
        return;
    }
    ssl_err(c, "TLS handshake failed");
    xfer_fail(c->x, GW_UPC_ETLS, "%s with %s", c->err, c->x->t.hostport);
}

static void tls_start(struct upc_conn *c)
{
    struct gw_upc_xfer *x = c->x;
    pthread_once(&g_ctx_once, ctx_init);
    c->ssl = g_ctx ? SSL_new(g_ctx) : NULL;
    if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) {
        xfer_fail(x, GW_UPC_ETLS, "TLS could not be set up");
        return;
    }
    if (x->t.numeric) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c->ssl), x->t.host);
    } else {
        SSL_set_tlsext_host_name(c->ssl, x->t.host);
        SSL_set1_host(c->ssl, x->t.host);
    }
    c->state = CS_TLS;
    tls_handshake(c);
}

/* After the proxy tunnel (or the TCP connect when there is none). */
static void conn_secure(struct upc_conn *c)
{
    if (c->x->t.tls)
        tls_start(c);
    else
        conn_ready(c);
}

static void tunnel_start(struct upc_conn *c)
{
    struct gw_upc_xfer *x = c->x;
    char auth[300], line[768];
    int v6 = strchr(x->t.host, ':') != NULL;
    snprintf(auth, sizeof(auth), v6 ? "[%s]:%d" : "%s:%d", x->t.host, x->t.port);
    const char *pa = x->t.proxy_auth;
    int n = snprintf(line, sizeof(line), "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", auth,
                     auth, pa ? "Proxy-Authorization: " : "", pa ? pa : "", pa ? "\r\n" : "");
    if (n < 0 || (size_t)n >= sizeof(line)) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy request for %s is too long", x->t.hostport);
        return;
    }
    /* A few hundred bytes on a new socket: sent whole or not at all. */
    ssize_t w = send(c->fd, line, (size_t)n, MSG_NOSIGNAL);
    if (w != n) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy %s:%d did not take the tunnel request: %s",
                  x->t.proxy_host, x->t.proxy_port, w < 0 ? strerror(errno) : "short write");
        return;
    }
    gw_buf_init(&c->tunnel, GW_H1_MAX_HEAD);
    c->state = CS_TUNNEL;
}

static void tunnel_read(struct upc_conn *c)
{
    struct gw_upc_xfer *x = c->x;
    char b[2048];
    /* Only up to the end of the proxy's head: what follows is TLS. */
    ssize_t n = recv(c->fd, b, sizeof(b), MSG_PEEK);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n <= 0) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy %s:%d closed the tunnel: %s", x->t.proxy_host,
                  x->t.proxy_port, n < 0 ? strerror(errno) : "closed");
        return;
    }
    size_t old = c->tunnel.len;
    if (gw_buf_append(&c->tunnel, b, (size_t)n) != GW_OK) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy's answer to CONNECT is too large");
        return;
    }
    size_t end = gw_h1_head_end(c->tunnel.data, c->tunnel.len);
    size_t take = end ? end - old : (size_t)n;
    if (recv(c->fd, b, take, 0) != (ssize_t)take) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy connection failed: %s", strerror(errno));
        return;
    }
    if (!end)
        return;
    struct gw_h1_head h;
    const char *why = NULL;
    if (gw_h1_parse_head(c->tunnel.data, end, &h, NULL, NULL, &why) != GW_OK) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy's answer to CONNECT is not HTTP: %s", why);
        return;
    }
    if (h.status / 100 != 2) {
        xfer_fail(x, GW_UPC_ECONNECT, "the proxy %s:%d refused the tunnel to %s: HTTP %d",
                  x->t.proxy_host, x->t.proxy_port, x->t.hostport, h.status);
        return;
    }
    gw_buf_free(&c->tunnel);
    conn_secure(c);
}

static void conn_connected(struct upc_conn *c)
{
    evutil_freeaddrinfo(c->ai);
    c->ai = c->ai_next = NULL;
    event_add(&c->rev, NULL);
    if (c->x->t.proxy_host && c->x->t.tls)
        tunnel_start(c);
    else
        conn_secure(c);
}

static void conn_connect_next(struct upc_conn *c)
{
    struct gw_upc_xfer *x = c->x;
    while (c->ai_next) {
        struct evutil_addrinfo *a = c->ai_next;
        c->ai_next = a->ai_next;
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            snprintf(c->err, sizeof(c->err), "%s", strerror(errno));
            continue;
        }
        int one = 1, idle = 60;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof(idle));
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
            snprintf(c->err, sizeof(c->err), "%s", strerror(errno));
            close(fd);
            continue;
        }
        if (c->events_set) {
            event_del(&c->rev);
            event_del(&c->wev);
        }
        c->fd = fd;
        c->wev_on = 0;
        event_assign(&c->rev, c->u->base, fd, EV_READ | EV_PERSIST, on_read, c);
        event_assign(&c->wev, c->u->base, fd, EV_WRITE | EV_PERSIST, on_write, c);
        c->events_set = 1;
        c->state = CS_CONNECT;
        wev_set(c, 1); /* writable: connected, or failed */
        return;
    }
    const char *h = x->t.proxy_host ? x->t.proxy_host : x->t.host;
    int port = x->t.proxy_host ? x->t.proxy_port : x->t.port;
    xfer_fail(x, GW_UPC_ECONNECT, "could not connect to %s%s:%d: %s",
              x->t.proxy_host ? "the proxy " : "", h, port, c->err[0] ? c->err : "no address");
}

static void on_resolved(int result, struct evutil_addrinfo *res, void *arg)
{
    if (result == EVUTIL_EAI_CANCEL)
        return; /* conn_close cancelled it, or the client is being freed */
    struct upc_conn *c = arg;
    c->dnsreq = NULL;
    struct gw_upc_xfer *x = c->x;
    if (result != 0 || !res) {
        if (res)
            evutil_freeaddrinfo(res);
        xfer_fail(x, GW_UPC_ERESOLVE, "could not resolve %s: %s",
                  x->t.proxy_host ? x->t.proxy_host : x->t.host, evutil_gai_strerror(result));
        return;
    }
    c->ai = c->ai_next = res;
    conn_connect_next(c);
}

static struct upc_pool *pool_get(struct gw_upc *u, const struct upc_target *t)
{
    /* On the stack: a key per transfer, allocated only when it is long
     * (long proxy credentials). */
    char small[512];
    char *key = small;
    const char *ph = t->proxy_host ? t->proxy_host : "", *pa = t->proxy_auth ? t->proxy_auth : "";
    int n = snprintf(small, sizeof(small), "%d|%s|%d|%s|%d|%s", t->tls, t->host, t->port, ph,
                     t->proxy_port, pa);
    if (n < 0)
        return NULL;
    if ((size_t)n >= sizeof(small)) {
        if (!(key = malloc((size_t)n + 1)))
            return NULL;
        snprintf(key, (size_t)n + 1, "%d|%s|%d|%s|%d|%s", t->tls, t->host, t->port, ph,
                 t->proxy_port, pa);
    }
    struct upc_pool *p;
    for (p = u->pools; p; p = p->next)
        if (strcmp(p->key, key) == 0)
            break;
    if (!p && (p = calloc(1, sizeof(*p) + (size_t)n + 1)) != NULL) {
        memcpy(p->key, key, (size_t)n + 1);
        p->next = u->pools;
        u->pools = p;
    }
    if (key != small)
        free(key);
    return p;
}

static int conn_open(struct gw_upc_xfer *x)
{
    struct gw_upc *u = x->u;
    struct upc_conn *c = calloc(1, sizeof(*c));
    if (!c)
        return GW_ENOMEM;
    c->u = u;
    c->fd = -1;
    c->pool = x->pool;
    c->x = x;
    x->c = c;
    c->state = CS_RESOLVE;
    c->anext = u->conns;
    if (u->conns)
        u->conns->aprev = c;
    u->conns = c;
    u->nconns++;
    evtimer_assign(&c->tmo, u->base, on_connect_timeout, c);
    long ms = x->o.connect_timeout_ms > 0 ? x->o.connect_timeout_ms : 10000;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(&c->tmo, &tv);
    c->events_set = 1;
    event_assign(&c->rev, u->base, -1, 0, on_read, c);
    event_assign(&c->wev, u->base, -1, 0, on_write, c);
    const char *host = x->t.proxy_host ? x->t.proxy_host : x->t.host;
    int port = x->t.proxy_host ? x->t.proxy_port : x->t.port;
    char ps[8];
    snprintf(ps, sizeof(ps), "%d", port);
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (is_ip_literal(host)) {
        hints.ai_flags = EVUTIL_AI_NUMERICHOST | EVUTIL_AI_NUMERICSERV;
        struct evutil_addrinfo *res = NULL;
        int r = evutil_getaddrinfo(host, ps, &hints, &res);
        on_resolved(r, res, c);
        return GW_OK;
    }
    if (!u->dns) {
        u->dns = evdns_base_new(u->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
                                             EVDNS_BASE_DISABLE_WHEN_INACTIVE);
        if (!u->dns) {
            xfer_fail(x, GW_UPC_ERESOLVE, "could not resolve %s: no resolver", host);
            return GW_OK;
        }
    }
    hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
    struct evdns_getaddrinfo_request *r =
        evdns_getaddrinfo(u->dns, host, ps, &hints, on_resolved, c);
    /* NULL: answered (or failed) already, from the hosts file or a cache. */
    if (r)
        c->dnsreq = r;
    return GW_OK;
}

static void on_connect_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct upc_conn *c = arg;
    struct gw_upc_xfer *x = c->x;
    long ms = x->o.connect_timeout_ms > 0 ? x->o.connect_timeout_ms : 10000;
    if (c->state == CS_CONNECT && c->ai_next) {
        /* This address does not answer: the next one gets the same time
         * (the attempt's own watchdog bounds the whole). */
        snprintf(c->err, sizeof(c->err), "no answer within %ld ms", ms);
        wev_set(c, 0);
        close(c->fd);
        c->fd = -1;
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        evtimer_add(&c->tmo, &tv);
        conn_connect_next(c);
        return;
    }
    xfer_fail(x, GW_UPC_ETIMEOUT, "no connection to %s within %ld ms", x->t.hostport, ms);
}

/* ---- sending ------------------------------------------------------- */

static int header_named(const char *line, const char *name)
{
    size_t n = strlen(name);
    return strncasecmp(line, name, n) == 0 && line[n] == ':';
}

static int build_head(struct gw_upc_xfer *x)
{
    struct gw_buf *b = &x->req;
    int own_host = 0, own_accept = 0;
    for (const struct curl_slist *h = x->o.headers; h; h = h->next) {
        own_host |= header_named(h->data, "Host");
        own_accept |= header_named(h->data, "Accept");
    }
    int rc = gw_buf_appends(b, "POST ");
    if (rc == GW_OK && x->t.proxy_host && !x->t.tls)
        rc = gw_buf_printf(b, "http://%s", x->t.hostport); /* absolute form, to the proxy */
    if (rc == GW_OK)
        rc = gw_buf_appends(b, x->t.path);
    if (rc == GW_OK)
        rc = gw_buf_appends(b, " HTTP/1.1\r\n");
    if (rc == GW_OK && !own_host)
        rc = gw_buf_append(b, "Host: ", 6);
    if (rc == GW_OK && !own_host)
        rc = gw_buf_appends(b, x->t.hostport);
    if (rc == GW_OK && !own_host)
        rc = gw_buf_append(b, "\r\n", 2);
    if (rc == GW_OK && x->t.proxy_host && !x->t.tls && x->t.proxy_auth)
        rc = gw_buf_printf(b, "Proxy-Authorization: %s\r\n", x->t.proxy_auth);
    if (rc == GW_OK && !own_accept)
        rc = gw_buf_appends(b, "Accept: */*\r\n");
    for (const struct curl_slist *h = x->o.headers; rc == GW_OK && h; h = h->next) {
        const char *l = h->data;
        const char *colon = strchr(l, ':');
        if (!colon || colon == l || strpbrk(l, "\r\n"))
            continue;
        const char *v = colon + 1;
        while (*v == ' ' || *v == '\t')
            v++;
        /* "Name:" drops the header (libcurl's convention); the framing
         * headers are the client's own. */
        if (!*v || header_named(l, "Content-Length") || header_named(l, "Transfer-Encoding") ||
            header_named(l, "Connection") || header_named(l, "Expect"))
            continue;
        rc = gw_buf_appends(b, l);
        if (rc == GW_OK)
            rc = gw_buf_appends(b, "\r\n");
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(b, "Content-Length: ");
    if (rc == GW_OK)
        rc = gw_buf_append_int(b, (long long)x->body_len);
    if (rc == GW_OK)
        rc = gw_buf_appends(b, "\r\n\r\n");
    return rc;
}

/* Whether a failure on the connection is the stale-reuse case: a kept
 * connection the server had closed, nothing of the answer read. */
static int stale(const struct gw_upc_xfer *x)
{
    return x->c && x->c->served && !x->got_bytes && !x->retried;
}

static void xfer_retry(struct gw_upc_xfer *x)
{
    conn_close(x->c);
    x->retried = 1;
    x->sent = 0;
    x->sent_all = 0;
    x->phase = XF_CONNECT;
    gw_buf_reset(&x->rhead);
    if (conn_open(x) != GW_OK)
        xfer_fail(x, GW_UPC_ENOMEM, "out of memory");
}

/* Sending failed: a stale kept connection is replaced; otherwise the read
 * side decides (an early answer, a 413 say, may be waiting in it). */
static int send_broke(struct gw_upc_xfer *x)
{
    struct upc_conn *c = x->c;
    if (stale(x)) {
        xfer_retry(x);
        return STOP;
    }
    x->send_broken = 1;
    wev_set(c, 0);
    event_active(&c->rev, EV_READ, 1);
    return STOP;
}

/* STOP when the transfer left this connection: sent again on another, or
 * sending broke (its answer may still be read: a server may answer early
 * and close). */
static int xfer_send(struct gw_upc_xfer *x)
{
    struct upc_conn *c = x->c;
    if (x->phase < XF_SEND)
        x->phase = XF_SEND;
    size_t hl = x->req.len, total = hl + x->body_len;
    while (x->sent < total) {
        ssize_t n;
        /* What is left from x->sent on: the head's rest, then the body's
         * pieces from the one it is in. */
        struct iovec iov[GW_UPC_MAX_PIECES + 1];
        int k = 0;
        if (x->sent < hl)
            iov[k++] = (struct iovec){x->req.data + x->sent, hl - x->sent};
        size_t boff = x->sent > hl ? x->sent - hl : 0;
        for (size_t i = 0; i < x->nbody; i++) {
            const struct iovec *v = &x->body[i];
            if (boff >= v->iov_len) {
                boff -= v->iov_len;
                continue;
            }
            iov[k++] = (struct iovec){(char *)v->iov_base + boff, v->iov_len - boff};
            boff = 0;
        }
        if (c->ssl) {
            const char *p = iov[0].iov_base;
            size_t len = iov[0].iov_len;
            ERR_clear_error();
            int r = SSL_write(c->ssl, p, (int)(len > (1u << 30) ? (1u << 30) : len));
            if (r <= 0) {
                int e = SSL_get_error(c->ssl, r);
                c->tls_write_wants_read = e == SSL_ERROR_WANT_READ;
                if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
                    wev_set(c, e == SSL_ERROR_WANT_WRITE);
                    return GO_ON;
                }
                ssl_err(c, "sending the request failed");
                return send_broke(x);
            }
            n = r;
        } else {
            struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
            n = sendmsg(c->fd, &mh, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
                    wev_set(c, 1);
                    return GO_ON;
                }
                snprintf(c->err, sizeof(c->err), "sending the request to %s failed: %s",
                         x->t.hostport, strerror(errno));
                return send_broke(x);
            }
        }
        x->sent += (size_t)n;
    }
    wev_set(c, 0);
    c->tls_write_wants_read = 0;
    x->sent_all = 1;
    if (x->got_bytes)
        gw_buf_free(&x->req);
    if (x->phase == XF_SEND)
        x->phase = XF_HEAD;
    return GO_ON;
}

/* ---- the end of a transfer ----------------------------------------- */

static void xfer_destroy(struct gw_upc_xfer *x)
{
    struct gw_upc *u = x->u;
    if (x->c)
        conn_close(x->c);
    event_del(&x->defer);
    gw_buf_free(&x->req);
    gw_buf_free(&x->rhead);
    free(x->held);
    target_free(&x->t);
    if (x->prev)
        x->prev->next = x->next;
    else
        u->xfers = x->next;
    if (x->next)
        x->next->prev = x->prev;
    u->nrunning--;
    free(x);
}

static void conn_to_pool(struct upc_conn *c)
{
    struct upc_pool *p = c->pool;
    c->x->c = NULL;
    c->x = NULL;
    c->served = 1;
    if (p->nidle >= MAX_IDLE_PER_POOL) {
        conn_close(c);
        return;
    }
    wev_set(c, 0);
    c->tls_read_wants_write = c->tls_write_wants_read = 0;
    c->state = CS_IDLE;
    c->idle_since = gw_now_us();
    c->iprev = NULL;
    c->inext = p->idle;
    if (p->idle)
        p->idle->iprev = c;
    else
        p->idle_tail = c;
    p->idle = c;
    p->nidle++;
}

static void xfer_end(struct gw_upc_xfer *x, enum gw_upc_result r, int reusable)
{
    x->phase = XF_DONE;
    x->finished = 1;
    x->result = r;
    if (x->c) {
        if (reusable)
            conn_to_pool(x->c);
        else
            conn_close(x->c);
    }
    event_active(&x->defer, EV_TIMEOUT, 1);
}

static void xfer_fail(struct gw_upc_xfer *x, enum gw_upc_result r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->msg, sizeof(x->msg), fmt, ap);
    va_end(ap);
    xfer_end(x, r, 0);
}

/* ---- reading the answer -------------------------------------------- */

static void call_header(const char *line, size_t len, void *arg)
{
    struct gw_upc_xfer *x = arg;
    if (x->canceled || !x->o.on_header)
        return;
    x->in_cb++;
    x->o.on_header(line, len, x->o.arg);
    x->in_cb--;
}

/* The answer is whole: bytes after it mean the connection cannot be reused. */
static void complete(struct gw_upc_xfer *x, size_t extra)
{
    xfer_end(x, GW_UPC_OK, x->h.keep_alive && x->sent_all && extra == 0);
}

/* Gives a piece of body to on_body; rest[0..rest_len) are the raw bytes
 * after it, kept with it when on_body pauses. */
static int deliver(struct gw_upc_xfer *x, const char *d, size_t dl, const char *rest,
                   size_t rest_len)
{
    if (!dl)
        return GO_ON;
    x->in_cb++;
    size_t r = x->o.on_body(d, dl, x->o.arg);
    x->in_cb--;
    if (x->canceled) {
        xfer_destroy(x);
        return STOP;
    }
    if (r == dl)
        return GO_ON;
    if (r == GW_UPC_PAUSE) {
        char *h = malloc(dl + rest_len + 1);
        if (!h) {
            xfer_fail(x, GW_UPC_ENOMEM, "out of memory");
            return STOP;
        }
        memcpy(h, d, dl);
        if (rest_len)
            memcpy(h + dl, rest, rest_len);
        free(x->held);
        x->held = h;
        x->held_data = dl;
        x->held_raw = rest_len;
        x->paused = 1;
        if (x->c)
            event_del(&x->c->rev);
        return STOP;
    }
    xfer_fail(x, GW_UPC_EABORTED, "the receiver stopped the transfer");
    return STOP;
}

/* The answer's bytes, as they arrive: the head, then the body. */
static int feed(struct gw_upc_xfer *x, const char *p, size_t n)
{
    while (n || x->phase == XF_BODY) {
        if (x->phase == XF_SEND || x->phase == XF_HEAD) {
            const char *head = p;
            size_t hn, take;
            size_t end = x->rhead.len ? 0 : gw_h1_head_end(p, n);
            if (end) {
                hn = end;
                take = end;
            } else {
                /* Only the head counts against its bound: bytes after it
                 * in the same read are the body's. */
                size_t old = x->rhead.len;
                size_t room = GW_H1_MAX_HEAD - old, add = n < room ? n : room;
                size_t from = old > 3 ? old - 3 : 0, e = 0;
                if (add && gw_buf_append(&x->rhead, p, add) == GW_OK)
                    e = gw_h1_head_end(x->rhead.data + from, x->rhead.len - from);
                if (!e && (add < n || x->rhead.len >= GW_H1_MAX_HEAD)) {
                    xfer_fail(x, GW_UPC_EPROTO, "the answer's head passes %u bytes",
                              GW_H1_MAX_HEAD);
                    return STOP;
                }
                if (!e)
                    return GO_ON;
                hn = from + e;
                take = hn - old;
                head = x->rhead.data;
            }
            const char *why = NULL;
            if (gw_h1_parse_head(head, hn, &x->h, call_header, x, &why) != GW_OK) {
                xfer_fail(x, GW_UPC_EPROTO, "the answer from %s is not HTTP/1.1: %s", x->t.hostport,
                          why);
                return STOP;
            }
            if (x->canceled) {
                xfer_destroy(x);
                return STOP;
            }
            gw_buf_reset(&x->rhead);
            p += take;
            n -= take;
            if (x->h.status == 101) {
                xfer_fail(x, GW_UPC_EPROTO, "%s switched protocols", x->t.hostport);
                return STOP;
            }
            if (x->h.status < 200)
                continue; /* an interim answer: the final head follows */
            gw_buf_free(&x->rhead);
            x->phase = XF_BODY;
            x->body_left = x->h.length;
            memset(&x->ch, 0, sizeof(x->ch));
            if (x->h.framing == GW_H1_EMPTY || (x->h.framing == GW_H1_LENGTH && x->h.length == 0)) {
                complete(x, n);
                return STOP;
            }
            continue;
        }
        if (x->h.framing == GW_H1_LENGTH && !x->body_left) {
            complete(x, n); /* the last piece was taken after a pause */
            return STOP;
        }
        if (!n)
            return GO_ON;
        switch (x->h.framing) {
        case GW_H1_LENGTH: {
            size_t take = (uint64_t)n > x->body_left ? (size_t)x->body_left : n;
            x->body_left -= take;
            if (deliver(x, p, take, p + take, n - take) == STOP)
                return STOP;
            p += take;
            n -= take;
            if (!x->body_left) {
                complete(x, n);
                return STOP;
            }
            break;
        }
        case GW_H1_CHUNKED: {
            const char *d;
            size_t dl;
            long r = gw_h1_chunked_feed(&x->ch, p, n, &d, &dl);
            if (r < 0) {
                xfer_fail(x, GW_UPC_EPROTO, "the answer from %s has a malformed chunk",
                          x->t.hostport);
                return STOP;
            }
            p += r;
            n -= (size_t)r;
            if (deliver(x, d, dl, p, n) == STOP)
                return STOP;
            if (x->ch.done) {
                complete(x, n);
                return STOP;
            }
            break;
        }
        default: /* GW_H1_CLOSE */
            if (deliver(x, p, n, NULL, 0) == STOP)
                return STOP;
            n = 0;
            break;
        }
    }
    return GO_ON;
}

/* The connection closed (n == 0) or failed while a transfer was on it. */
static void read_broke(struct gw_upc_xfer *x, const char *why)
{
    if (stale(x)) {
        xfer_retry(x);
        return;
    }
    if (x->phase == XF_BODY && x->h.framing == GW_H1_CLOSE && !why) {
        complete(x, 1); /* delimited by the close: whole, not reusable */
        return;
    }
    if (x->send_broken && !x->got_bytes) {
        xfer_fail(x, GW_UPC_ESEND, "%s", x->c->err);
        return;
    }
    const char *what = x->got_bytes ? "closed the connection before the answer was whole"
                                    : "closed the connection without answering";
    if (why)
        xfer_fail(x, GW_UPC_ERECV, "the connection to %s failed: %s", x->t.hostport, why);
    else
        xfer_fail(x, GW_UPC_ERECV, "%s %s", x->t.hostport, what);
}

/* One read: > 0 bytes, 0 closed, -1 nothing yet, -2 failed (c->err). */
static ssize_t conn_read(struct upc_conn *c, char *buf, size_t cap)
{
    if (!c->ssl) {
        ssize_t n = recv(c->fd, buf, cap, 0);
        if (n >= 0)
            return n;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return -1;
        snprintf(c->err, sizeof(c->err), "%s", strerror(errno));
        return -2;
    }
    ERR_clear_error();
    int r = SSL_read(c->ssl, buf, (int)cap);
    if (r > 0) {
        if (c->tls_read_wants_write) {
            c->tls_read_wants_write = 0;
            wev_set(c, c->x && !c->x->sent_all && !c->x->send_broken);
        }
        return r;
    }
    int e = SSL_get_error(c->ssl, r);
    if (e == SSL_ERROR_WANT_READ)
        return -1;
    if (e == SSL_ERROR_WANT_WRITE) {
        c->tls_read_wants_write = 1;
        wev_set(c, 1);
        return -1;
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return 0;
    if (e == SSL_ERROR_SYSCALL && ERR_peek_error() == 0 && errno == 0)
        return 0; /* closed without close_notify: as plain TCP would */
    ssl_err(c, "TLS");
    return -2;
}

/* STOP when the transfer ended or paused (x may be gone). */
static int read_answer(struct gw_upc_xfer *x)
{
    struct upc_conn *c = x->c;
    char *buf = x->u->rbuf;
    for (int i = 0; i < READS_PER_WAKE; i++) {
        ssize_t n = conn_read(c, buf, RBUF_SIZE);
        if (n == -1)
            return GO_ON;
        if (n <= 0) {
            read_broke(x, n == 0 ? NULL : c->err);
            return STOP;
        }
        if (!x->got_bytes) {
            /* No second sending now (stale): once sent, the head can go. */
            x->got_bytes = 1;
            if (x->sent_all)
                gw_buf_free(&x->req);
        }
        if (feed(x, buf, (size_t)n) == STOP)
            return STOP;
        if ((size_t)n < RBUF_SIZE && !(c->ssl && SSL_pending(c->ssl)))
            return GO_ON;
    }
    if (c->ssl && SSL_pending(c->ssl))
        event_active(&c->rev, EV_READ, 1);
    return GO_ON;
}

/* An idle connection became readable: the server closed it, or sent what
 * it should not have. Either way it is done (a TLS record that carries no
 * data, a session ticket, leaves it be). */
static void idle_readable(struct upc_conn *c)
{
    char b[64];
    if (c->ssl) {
        ERR_clear_error();
        int r = SSL_read(c->ssl, b, sizeof(b));
        if (r <= 0 && SSL_get_error(c->ssl, r) == SSL_ERROR_WANT_READ)
            return;
    } else {
        ssize_t n = recv(c->fd, b, sizeof(b), MSG_PEEK);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
    }
    conn_close(c);
}

static void on_read(evutil_socket_t fd, short what, void *arg)
{
    struct upc_conn *c = arg;
    switch (c->state) {
    case CS_IDLE:
        idle_readable(c);
        return;
    case CS_TUNNEL:
        tunnel_read(c);
        return;
    case CS_TLS:
        tls_handshake(c);
        return;
    case CS_READY: {
        struct gw_upc_xfer *x = c->x;
        if (!x->sent_all && !x->send_broken && c->tls_write_wants_read && xfer_send(x) == STOP &&
            !x->send_broken)
            return; /* sent again on another connection */
        if (!x->paused && !x->held)
            (void)read_answer(x);
        return;
    }
    default:
        return;
    }
}

static void on_write(evutil_socket_t fd, short what, void *arg)
{
    struct upc_conn *c = arg;
    if (c->state == CS_CONNECT) {
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0)
            err = errno;
        if (err) {
            snprintf(c->err, sizeof(c->err), "%s", strerror(err));
            wev_set(c, 0);
            close(c->fd);
            c->fd = -1;
            conn_connect_next(c);
            return;
        }
        wev_set(c, 0);
        conn_connected(c);
        return;
    }
    if (c->state == CS_TLS) {
        tls_handshake(c);
        return;
    }
    if (c->state != CS_READY)
        return;
    struct gw_upc_xfer *x = c->x;
    if (c->tls_read_wants_write) {
        c->tls_read_wants_write = 0;
        wev_set(c, 0);
        if (!x->paused && !x->held && read_answer(x) == STOP)
            return;
    }
    if (!x->sent_all && !x->send_broken)
        (void)xfer_send(x);
}

/* On the loop: on_done for a finished transfer, or the piece a paused one
 * kept, once resumed. */
static void on_defer(evutil_socket_t fd, short what, void *arg)
{
    struct gw_upc_xfer *x = arg;
    if (x->finished) {
        x->in_cb++;
        x->o.on_done(x->result, x->result == GW_UPC_OK ? NULL : x->msg, x->o.arg);
        x->in_cb--;
        xfer_destroy(x);
        return;
    }
    if (x->paused || !x->held)
        return;
    char *h = x->held;
    size_t dl = x->held_data, rl = x->held_raw;
    x->held = NULL;
    x->held_data = x->held_raw = 0;
    /* The kept piece, then the raw bytes after it; a pause, the end or a
     * cancel on the way keeps what it needs of them (deliver copies). */
    if (deliver(x, h, dl, h + dl, rl) == GO_ON)
        (void)feed(x, h + dl, rl);
    free(h);
}

void gw_upc_resume(struct gw_upc_xfer *x)
{
    if (!x->paused || x->finished)
        return;
    x->paused = 0;
    if (x->c)
        event_add(&x->c->rev, NULL);
    if (x->held)
        event_active(&x->defer, EV_TIMEOUT, 1);
}

/* ---- the client ---------------------------------------------------- */

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    struct gw_upc *u = arg;
    int64_t old = gw_now_us() - (int64_t)GW_UPC_IDLE_MS * 1000;
    for (struct upc_pool *p = u->pools; p; p = p->next)
        while (p->idle_tail && p->idle_tail->idle_since < old)
            conn_close(p->idle_tail);
}

struct gw_upc *gw_upc_new(struct event_base *base)
{
    struct gw_upc *u = calloc(1, sizeof(*u));
    if (!u)
        return NULL;
    u->base = base;
    env_load(&u->env);
    event_assign(&u->sweep, base, -1, EV_PERSIST, on_sweep, u);
    struct timeval tv = {SWEEP_MS / 1000, 0};
    event_add(&u->sweep, &tv);
    return u;
}

void gw_upc_free(struct gw_upc *u)
{
    if (!u)
        return;
    while (u->xfers)
        xfer_destroy(u->xfers);
    while (u->conns)
        conn_close(u->conns);
    while (u->pools) {
        struct upc_pool *p = u->pools;
        u->pools = p->next;
        free(p);
    }
    event_del(&u->sweep);
    if (u->dns)
        evdns_base_free(u->dns, 0);
    env_free(&u->env);
    free(u);
}

struct gw_upc_xfer *gw_upc_start(struct gw_upc *u, const struct gw_upc_opts *o)
{
    struct gw_upc_xfer *x = calloc(1, sizeof(*x));
    if (!x)
        return NULL;
    x->u = u;
    x->o = *o;
    if (o->body_iov) {
        x->body = o->body_iov;
        x->nbody = o->body_iovcnt > GW_UPC_MAX_PIECES ? GW_UPC_MAX_PIECES : o->body_iovcnt;
    } else {
        x->one = (struct iovec){(void *)o->body, o->body_len};
        x->body = &x->one;
        x->nbody = 1;
    }
    for (size_t i = 0; i < x->nbody; i++)
        x->body_len += x->body[i].iov_len;
    gw_buf_init(&x->req, 0);
    gw_buf_init(&x->rhead, GW_H1_MAX_HEAD);
    event_assign(&x->defer, u->base, -1, 0, on_defer, x);
    x->next = u->xfers;
    if (u->xfers)
        u->xfers->prev = x;
    u->xfers = x;
    u->nrunning++;
    int rc = target_init(&x->t, o->url, &u->env);
    if (rc == GW_EINVAL) {
        /* The caller hears of it as of any failure, from the loop. */
        xfer_fail(x, GW_UPC_ECONNECT,
                  "the URL is not http(s)://host[:port]/path, or the proxy environment names "
                  "a proxy other than http://");
        return x;
    }
    if (rc != GW_OK || build_head(x) != GW_OK || !(x->pool = pool_get(u, &x->t))) {
        xfer_destroy(x);
        return NULL;
    }
    struct upc_conn *c = x->pool->idle;
    if (c) {
        /* The most recently used: the least likely to have been closed. */
        idle_unlink(c);
        c->state = CS_READY;
        c->x = x;
        x->c = c;
        (void)xfer_send(x);
        return x;
    }
    x->phase = XF_CONNECT;
    if (conn_open(x) != GW_OK) {
        xfer_destroy(x);
        return NULL;
    }
    return x;
}

void gw_upc_cancel(struct gw_upc_xfer *x)
{
    if (!x)
        return;
    if (x->in_cb) {
        x->canceled = 1;
        return;
    }
    xfer_destroy(x);
}

size_t gw_upc_running(const struct gw_upc *u)
{
    return u->nrunning;
}

size_t gw_upc_connections(const struct gw_upc *u)
{
    return u->nconns;
}

const char *gw_upc_strerror(enum gw_upc_result r)
{
    switch (r) {
    case GW_UPC_OK:
        return "ok";
    case GW_UPC_ERESOLVE:
        return "could not resolve the host";
    case GW_UPC_ECONNECT:
        return "could not connect";
    case GW_UPC_ETIMEOUT:
        return "the connect timeout passed";
    case GW_UPC_ETLS:
        return "the TLS handshake failed";
    case GW_UPC_ESEND:
        return "the request could not be sent";
    case GW_UPC_ERECV:
        return "the connection broke off";
    case GW_UPC_EPROTO:
        return "the answer is not valid HTTP/1.1";
    case GW_UPC_EABORTED:
        return "the transfer was stopped";
    case GW_UPC_ENOMEM:
        return "out of memory";
    }
    return "unknown";
}
