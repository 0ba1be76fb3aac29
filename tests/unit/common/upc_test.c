/*
 * gw_upc against a scripted HTTP server on loopback, on the same event
 * loop: each case says what the server answers (bytes, in pieces, then
 * whether it closes), and checks what the client's callbacks saw and how
 * many connections the server accepted.
 */
#include <CUnit/CUnit.h>
#include <curl/curl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_upc.h"

/* ---- the scripted server ------------------------------------------- */

struct answer {
    const char *pieces[6]; /* written one by one, 5 ms apart */
    int close_after;       /* close the connection after the last piece */
    int early;             /* answer once the head is in, without reading the body */
};

struct server {
    struct event_base *base;
    struct evconnlistener *lis;
    int port;
    int accepts;
    int requests;
    const struct answer *answers; /* one per request, in order */
    size_t nanswers;
    struct gw_buf last_request;
    struct bufferevent *bev; /* the connection being answered */
    const struct answer *cur;
    int piece;
    struct event *tick;
    struct bufferevent *open[16]; /* every connection not yet closed */
};

static struct server S;

static void srv_close(struct server *s, struct bufferevent *bev)
{
    for (size_t i = 0; i < sizeof(s->open) / sizeof(*s->open); i++)
        if (s->open[i] == bev)
            s->open[i] = NULL;
    if (s->bev == bev)
        s->bev = NULL;
    bufferevent_free(bev);
}

/* Pieces go out with send(2) at once, and the close right after the last
 * one, in the same callback: the client sees the bytes and the close
 * together, as from a server that closes a kept connection. */
static void send_next(evutil_socket_t fd, short what, void *arg)
{
    struct server *s = arg;
    const struct answer *a = s->cur;
    if (!a || !s->bev)
        return;
    const char *p = a->pieces[s->piece];
    int sfd = bufferevent_getfd(s->bev);
    if (send(sfd, p, strlen(p), MSG_NOSIGNAL) != (ssize_t)strlen(p))
        abort();
    s->piece++;
    if (a->pieces[s->piece]) {
        struct timeval tv = {0, 5000};
        evtimer_add(s->tick, &tv);
        return;
    }
    s->cur = NULL;
    if (a->close_after) {
        srv_close(s, s->bev);
    }
}

static void srv_read(struct bufferevent *bev, void *arg)
{
    struct server *s = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        size_t n = evbuffer_get_length(in);
        char *all = (char *)evbuffer_pullup(in, -1);
        char *end = all ? memmem(all, n, "\r\n\r\n", 4) : NULL;
        if (!end)
            return;
        size_t hl = (size_t)(end + 4 - all);
        const struct answer *next =
            (size_t)s->requests < s->nanswers ? &s->answers[s->requests] : NULL;
        long cl = 0;
        char *c = memmem(all, hl, "Content-Length: ", 16);
        for (c = c ? c + 16 : NULL; c && c < all + hl && *c >= '0' && *c <= '9'; c++)
            cl = cl * 10 + (*c - '0');
        if (next && next->early)
            cl = 0; /* the body is never read: the answer goes first */
        if (n < hl + (size_t)cl)
            return;
        gw_buf_reset(&s->last_request);
        if (gw_buf_append(&s->last_request, all, hl + (size_t)cl) != GW_OK)
            abort();
        evbuffer_drain(in, hl + (size_t)cl);
        s->bev = bev;
        s->cur = (size_t)s->requests < s->nanswers ? &s->answers[s->requests] : NULL;
        s->requests++;
        s->piece = 0;
        if (!s->cur) { /* nothing scripted: the server hangs up */
            srv_close(s, bev);
            return;
        }
        send_next(-1, 0, s);
    }
}

static void srv_event(struct bufferevent *bev, short what, void *arg)
{
    struct server *s = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
        srv_close(s, bev);
}

static void srv_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int len,
                       void *arg)
{
    struct server *s = arg;
    s->accepts++;
    struct bufferevent *bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    for (size_t i = 0; i < sizeof(s->open) / sizeof(*s->open); i++)
        if (!s->open[i]) {
            s->open[i] = bev;
            break;
        }
    bufferevent_setcb(bev, srv_read, NULL, srv_event, s);
    bufferevent_enable(bev, EV_READ);
}

static void server_start(const struct answer *answers, size_t n)
{
    memset(&S, 0, sizeof(S));
    S.base = event_base_new();
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    S.lis =
        evconnlistener_new_bind(S.base, srv_accept, &S, LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_FREE,
                                16, (struct sockaddr *)&sin, sizeof(sin));
    CU_ASSERT_PTR_NOT_NULL_FATAL(S.lis);
    socklen_t sl = sizeof(sin);
    getsockname(evconnlistener_get_fd(S.lis), (struct sockaddr *)&sin, &sl);
    S.port = ntohs(sin.sin_port);
    S.answers = answers;
    S.nanswers = n;
    S.tick = evtimer_new(S.base, send_next, &S);
    gw_buf_init(&S.last_request, 0);
}

static void server_stop(void)
{
    for (size_t i = 0; i < sizeof(S.open) / sizeof(*S.open); i++)
        if (S.open[i])
            bufferevent_free(S.open[i]);
    event_free(S.tick);
    evconnlistener_free(S.lis);
    event_base_free(S.base);
    gw_buf_free(&S.last_request);
}

/* ---- the client side ----------------------------------------------- */

struct seen {
    struct gw_buf head, body;
    int done;
    enum gw_upc_result result;
    char msg[256];
    int pause_every; /* pause at every nth piece, resumed 10 ms later */
    int pieces;
    struct gw_upc_xfer *xf;
    struct event *resume;
};

static void on_header(const char *line, size_t len, void *arg)
{
    struct seen *z = arg;
    if (gw_buf_append(&z->head, line, len) != GW_OK)
        abort();
}

static void do_resume(evutil_socket_t fd, short what, void *arg)
{
    struct seen *z = arg;
    gw_upc_resume(z->xf);
}

static size_t on_body(const char *buf, size_t len, void *arg)
{
    struct seen *z = arg;
    z->pieces++;
    if (z->pause_every && z->pieces % z->pause_every == 0) {
        struct timeval tv = {0, 10000};
        evtimer_add(z->resume, &tv);
        return GW_UPC_PAUSE;
    }
    if (gw_buf_append(&z->body, buf, len) != GW_OK)
        abort();
    return len;
}

static void on_done(enum gw_upc_result r, const char *msg, void *arg)
{
    struct seen *z = arg;
    z->done = 1;
    z->result = r;
    snprintf(z->msg, sizeof(z->msg), "%s", msg ? msg : "");
    event_base_loopbreak(S.base);
}

static void seen_init(struct seen *z)
{
    memset(z, 0, sizeof(*z));
    gw_buf_init(&z->head, 0);
    gw_buf_init(&z->body, 0);
    z->resume = evtimer_new(S.base, do_resume, z);
}

static void seen_free(struct seen *z)
{
    gw_buf_free(&z->head);
    gw_buf_free(&z->body);
    event_free(z->resume);
}

static void run_port(struct gw_upc *u, struct seen *z, int port, const char *path, const char *body)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    h = curl_slist_append(h, "Expect:");
    struct gw_upc_opts o = {.url = url,
                            .headers = h,
                            .body = body,
                            .body_len = strlen(body),
                            .on_header = on_header,
                            .on_body = on_body,
                            .on_done = on_done,
                            .arg = z};
    z->xf = gw_upc_start(u, &o);
    curl_slist_free_all(h);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z->xf);
    struct timeval limit = {5, 0};
    event_base_loopexit(S.base, &limit);
    event_base_dispatch(S.base);
    CU_ASSERT_TRUE(z->done);
}

static void run(struct gw_upc *u, struct seen *z, const char *path, const char *body)
{
    run_port(u, z, S.port, path, body);
}

static void test_chunked_and_reuse(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n5\r\nhel", "lo\r\n",
          "6\r\n world\r\n0\r\n\r\n"},
         0,
         0},
        {{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"}, 0, 0},
    };
    server_start(a, 2);
    struct gw_upc *u = gw_upc_new(S.base);
    struct seen z;
    seen_init(&z);
    run(u, &z, "/v1/chat?x=1", "{\"q\":1}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_EQUAL(z.body.len, 11);
    CU_ASSERT(z.body.data && memcmp(z.body.data, "hello world", 11) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(z.head.data, "X-A: 1\r\n"));
    /* What was sent: the request line, Host, the given headers (not the
     * dropped Expect), Content-Length, the body. */
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "POST /v1/chat?x=1 HTTP/1.1\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "\r\nHost: 127.0.0.1:"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "\r\nContent-Type: application/json\r\n"));
    CU_ASSERT_PTR_NULL(strstr(S.last_request.data, "Expect"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "Content-Length: 7\r\n\r\n{\"q\":1}"));
    seen_free(&z);
    /* The second goes on the same connection. */
    seen_init(&z);
    run(u, &z, "/v1/chat", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_EQUAL(z.body.len, 3);
    CU_ASSERT_EQUAL(S.accepts, 1);
    CU_ASSERT_EQUAL(gw_upc_connections(u), 1);
    CU_ASSERT_EQUAL(gw_upc_running(u), 0);
    seen_free(&z);
    gw_upc_free(u);
    server_stop();
}

/* A body in pieces (body_iov): sent as one, empty pieces and a large one
 * (several sendmsg calls) included, Content-Length their sum. */
static void test_body_pieces(void)
{
    static const struct answer a[] = {{{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, 0, 0}};
    server_start(a, 1);
    struct gw_upc *u = gw_upc_new(S.base);
    size_t big = 3u << 20;
    char *x = malloc(big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    for (size_t i = 0; i < big; i++)
        x[i] = (char)('a' + i % 26);
    struct iovec v[] = {{"--B\r\n", 5}, {"", 0}, {x, big}, {"\r\n--B--\r\n", 9}};
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/up", S.port);
    struct seen z;
    seen_init(&z);
    struct gw_upc_opts o = {.url = url,
                            .body_iov = v,
                            .body_iovcnt = 4,
                            .on_header = on_header,
                            .on_body = on_body,
                            .on_done = on_done,
                            .arg = &z};
    z.xf = gw_upc_start(u, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z.xf);
    struct timeval limit = {10, 0};
    event_base_loopexit(S.base, &limit);
    event_base_dispatch(S.base);
    CU_ASSERT_TRUE(z.done);
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    char cl[64];
    snprintf(cl, sizeof(cl), "Content-Length: %zu\r\n\r\n--B\r\n", big + 14);
    const char *at = S.last_request.data ? strstr(S.last_request.data, cl) : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    const char *body = at + strlen(cl) - 5;
    CU_ASSERT_EQUAL(S.last_request.len - (size_t)(body - S.last_request.data), big + 14);
    CU_ASSERT(memcmp(body + 5, x, big) == 0);
    CU_ASSERT(memcmp(body + 5 + big, "\r\n--B--\r\n", 9) == 0);
    free(x);
    seen_free(&z);
    gw_upc_free(u);
    server_stop();
}

static void test_pause_resume(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nab", "cd", "efgh", "ijkl"}, 0, 0},
    };
    server_start(a, 1);
    struct gw_upc *u = gw_upc_new(S.base);
    struct seen z;
    seen_init(&z);
    z.pause_every = 2;
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_EQUAL(z.body.len, 12);
    CU_ASSERT(z.body.data && memcmp(z.body.data, "abcdefghijkl", 12) == 0);
    CU_ASSERT(z.pieces > 4); /* each paused piece came again */
    seen_free(&z);
    gw_upc_free(u);
    server_stop();
}

/* The server closes a kept connection between two requests, and the second
 * is started before the loop has seen the close: it goes again on a new
 * connection. */
static void test_stale_retry(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, 1, 0},
        {{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain"}, 0, 0},
    };
    server_start(a, 2);
    struct gw_upc *u = gw_upc_new(S.base);
    struct seen z;
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    /* The server's close has happened (the answer was followed by it), but
     * the client's loop has not run since on_done. */
    usleep(20000);
    CU_ASSERT_EQUAL(gw_upc_connections(u), 1);
    seen_free(&z);
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_EQUAL(z.body.len, 5);
    CU_ASSERT_EQUAL(S.accepts, 2);
    seen_free(&z);
    gw_upc_free(u);
    server_stop();
}

static void test_failures(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"}, 1, 0},
        {{"SPDY/3 200 OK\r\n\r\n"}, 1, 0},
        {{"HTTP/1.1 200 OK\r\n\r\nuntil the close"}, 1, 0},
        {{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"}, 1, 0},
    };
    server_start(a, 4);
    struct gw_upc *u = gw_upc_new(S.base);
    struct seen z;
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_ERECV);
    CU_ASSERT_PTR_NOT_NULL(strstr(z.msg, "before the answer was whole"));
    seen_free(&z);
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_EPROTO);
    seen_free(&z);
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK); /* delimited by the close */
    CU_ASSERT_EQUAL(z.body.len, 15);
    seen_free(&z);
    seen_init(&z);
    run(u, &z, "/", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_EPROTO);
    seen_free(&z);
    CU_ASSERT_EQUAL(gw_upc_running(u), 0);
    CU_ASSERT_EQUAL(gw_upc_connections(u), 0);
    /* Nobody listening: a port bound but not listening refuses. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001)};
    socklen_t sl = sizeof(sin);
    CU_ASSERT_EQUAL_FATAL(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    getsockname(fd, (struct sockaddr *)&sin, &sl);
    seen_init(&z);
    run_port(u, &z, ntohs(sin.sin_port), "/", "{}");
    close(fd);
    CU_ASSERT_EQUAL(z.result, GW_UPC_ECONNECT);
    CU_ASSERT_PTR_NOT_NULL(strstr(z.msg, "could not connect to 127.0.0.1"));
    seen_free(&z);
    /* Not http(s): reported from the loop like any failure. */
    seen_init(&z);
    struct gw_upc_opts o = {
        .url = "ftp://x/", .body = "", .on_body = on_body, .on_done = on_done, .arg = &z};
    z.xf = gw_upc_start(u, &o);
    CU_ASSERT_PTR_NOT_NULL(z.xf);
    CU_ASSERT_FALSE(z.done);
    event_base_dispatch(S.base);
    CU_ASSERT_EQUAL(z.result, GW_UPC_ECONNECT);
    seen_free(&z);
    gw_upc_free(u);
    server_stop();
}

/* Through http_proxy: the absolute form goes to the proxy, with its
 * credentials; loopback targets never use it. */
static void test_proxy(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"}, 0, 0},
        {{"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"}, 0, 0},
    };
    server_start(a, 2);
    char px[64];
    snprintf(px, sizeof(px), "http://user:pw@127.0.0.1:%d", S.port);
    setenv("http_proxy", px, 1);
    setenv("https_proxy", px, 1);
    unsetenv("no_proxy");
    unsetenv("NO_PROXY");
    struct gw_upc *u = gw_upc_new(S.base);
    struct seen z;
    seen_init(&z);
    struct gw_upc_opts o = {.url = "http://api.example.test/v1/x",
                            .body = "{}",
                            .body_len = 2,
                            .on_header = on_header,
                            .on_body = on_body,
                            .on_done = on_done,
                            .arg = &z};
    z.xf = gw_upc_start(u, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z.xf);
    event_base_dispatch(S.base);
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(S.last_request.data, "POST http://api.example.test/v1/x HTTP/1.1"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "Host: api.example.test\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "Proxy-Authorization: Basic dXNlcjpwdw=="));
    seen_free(&z);
    /* https: a CONNECT tunnel, refused here. */
    seen_init(&z);
    o.url = "https://api.example.test/v1/x";
    o.arg = &z;
    z.xf = gw_upc_start(u, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(z.xf);
    event_base_dispatch(S.base);
    CU_ASSERT_EQUAL(z.result, GW_UPC_ECONNECT);
    CU_ASSERT_PTR_NOT_NULL(strstr(z.msg, "refused the tunnel to api.example.test: HTTP 407"));
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "CONNECT api.example.test:443 HTTP/1.1"));
    seen_free(&z);
    /* Loopback never goes through the proxy. */
    seen_init(&z);
    run(u, &z, "/direct", "{}");
    CU_ASSERT_EQUAL(z.result, GW_UPC_ERECV); /* the server has no third answer, and closes */
    CU_ASSERT_PTR_NOT_NULL(strstr(S.last_request.data, "POST /direct HTTP/1.1"));
    CU_ASSERT_EQUAL(S.requests, 3);
    seen_free(&z);
    unsetenv("http_proxy");
    unsetenv("https_proxy");
    unsetenv("no_proxy");
    gw_upc_free(u);
    server_stop();
}

/* A server that answers before it has read the body (a 413, say) and
 * closes: the request's sending breaks, and the answer is still read. */
static void test_early_answer(void)
{
    static const struct answer a[] = {
        {{"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntoo "
          "big!"},
         1,
         1},
    };
    server_start(a, 1);
    struct gw_upc *u = gw_upc_new(S.base);
    size_t big = 32u << 20;
    char *body = malloc(big + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    memset(body, 'x', big);
    body[big] = '\0';
    struct seen z;
    seen_init(&z);
    run(u, &z, "/", body);
    CU_ASSERT_EQUAL(z.result, GW_UPC_OK);
    CU_ASSERT_PTR_NOT_NULL(z.head.data && strstr(z.head.data, "HTTP/1.1 413"));
    CU_ASSERT_EQUAL(z.body.len, 8);
    seen_free(&z);
    free(body);
    gw_upc_free(u);
    server_stop();
}

static CU_TestInfo tests[] = {
    {"a body in pieces: sent whole, its length their sum", test_body_pieces},
    {"chunked answer, then a reused connection", test_chunked_and_reuse},
    {"pause and resume give every byte once, in order", test_pause_resume},
    {"a kept connection the server closed: sent again", test_stale_retry},
    {"short, malformed, close-delimited, refused", test_failures},
    {"the proxy environment", test_proxy},
    {"an early answer while the body is still being sent", test_early_answer},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
