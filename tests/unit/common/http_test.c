/*
 * Tests for common/gw_http.c over real loopback sockets: the server runs on
 * its own event-loop thread, the test is a blocking client that writes raw
 * bytes, so framing edge cases are exercised exactly.
 */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_http.h"

static struct event_base *base;
static struct gw_http_server *srv;
static pthread_t loop_thread;
static int port;
static volatile int closed_seen;
static struct gw_http_req *held;

static void on_close(struct gw_http_req *req, void *arg)
{
    (void)arg;
    held = NULL;
    gw_http_abort(req);
    __atomic_store_n(&closed_seen, 1, __ATOMIC_SEQ_CST);
}

static void handler(struct gw_http_req *req, void *arg)
{
    (void)arg;
    const char *path = gw_http_req_path(req);
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    if (strcmp(path, "/hold") == 0) {
        held = req;
        gw_http_req_on_close(req, on_close, NULL);
        return;
    }
    if (strcmp(path, "/stream") == 0) {
        if (gw_http_start(req, 200, "text/plain") == GW_OK &&
            gw_http_write(req, "hello ", 6) == GW_OK && gw_http_write(req, "world", 5) == GW_OK)
            gw_http_finish(req);
        else
            gw_http_abort(req);
        return;
    }
    char out[256];
    const char *h = gw_http_req_header(req, "X-Test");
    int n =
        snprintf(out, sizeof(out), "%s %s q=%s body=%zu:%.*s h=%s", gw_http_req_method(req), path,
                 gw_http_req_query(req), len, (int)(len > 32 ? 32 : len), body, h ? h : "-");
    gw_http_respond(req, 200, "text/plain", out, (size_t)n);
}

static void *loop(void *arg)
{
    (void)arg;
    event_base_dispatch(base);
    return NULL;
}

static int init_suite(void)
{
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    base = event_base_new();
    int fd = gw_http_listen("127.0.0.1", 0, 0, &port);
    if (fd < 0)
        return -1;
    struct gw_http_server_opts o = {.handler = handler, .max_body_bytes = 1024};
    srv = gw_http_server_new(base, fd, &o);
    return pthread_create(&loop_thread, NULL, loop, NULL);
}

static int clean_suite(void)
{
    event_base_loopexit(base, NULL);
    pthread_join(loop_thread, NULL);
    gw_http_server_free(srv);
    event_base_free(base);
    return 0;
}

static int connect_client(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static void send_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0)
            return;
        s += w;
        n -= (size_t)w;
    }
}

/* Reads until `want` responses are complete (by counting occurrences of
 * marker) or EOF/timeout. */
static void read_until(int fd, struct gw_buf *out, const char *marker, int want)
{
    char buf[4096];
    for (;;) {
        int have = 0;
        for (const char *p = out->data ? out->data : ""; (p = strstr(p, marker)); p++)
            have++;
        if (have >= want)
            return;
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0)
            return;
        if (gw_buf_append(out, buf, (size_t)n))
            return;
    }
}

static void send_str(int fd, const char *s)
{
    send_all(fd, s, strlen(s));
}

struct writer_args {
    int fd;
    struct gw_buf *b;
};

static void *writer_main(void *arg)
{
    struct writer_args *w = arg;
    send_all(w->fd, w->b->data, w->b->len);
    return NULL;
}

static void test_keepalive_and_pipelining(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    send_str(fd, "GET /a?x=1 HTTP/1.1\r\nHost: t\r\nX-Test: one\r\n\r\n");
    read_until(fd, &out, "h=one", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "HTTP/1.1 200 OK\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "GET /a q=x=1 body=0: h=one"));
    gw_buf_reset(&out);
    /* Two pipelined requests in one write, one with a body. */
    static const char two[] = "POST /b HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                              "GET /c HTTP/1.1\r\nx-test: two\r\n\r\n";
    send_all(fd, two, strlen(two));
    read_until(fd, &out, "HTTP/1.1 200", 2);
    read_until(fd, &out, "h=two", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "POST /b q= body=5:hello h=-"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "GET /c q= body=0: h=two"));
    gw_buf_free(&out);
    close(fd);
}

static void test_byte_by_byte(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    static const char req[] = "POST /slow HTTP/1.1\r\nContent-Length: 3\r\nX-Test: b\r\n\r\nabc";
    for (size_t i = 0; i < strlen(req); i++) {
        send_all(fd, req + i, 1);
        usleep(200);
    }
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "h=b", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "POST /slow q= body=3:abc h=b"));
    gw_buf_free(&out);
    close(fd);
}

static void test_chunked_response(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_str(fd, "GET /stream HTTP/1.1\r\n\r\n");
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "0\r\n\r\n", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "Transfer-Encoding: chunked\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n"));
    gw_buf_free(&out);
    close(fd);
}

static void test_oversized_body_refused(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    /* The client sends the whole body at once, as most SDKs do: the answer
     * must still arrive (lingering close, no reset). */
    char req[8192];
    int n = snprintf(req, sizeof(req), "POST /big HTTP/1.1\r\nContent-Length: 6000\r\n\r\n");
    memset(req + n, 'x', 6000);
    send_all(fd, req, (size_t)n + 6000);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "}}", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "HTTP/1.1 413 Payload Too Large\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "Connection: close\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "\"code\":\"request_too_large\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "6000 bytes exceeds the limit of 1024"));
    /* Then the server closes. */
    char b[16];
    CU_ASSERT_EQUAL(read(fd, b, sizeof(b)), 0);
    gw_buf_free(&out);
    close(fd);
}

static void test_expect_continue(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_str(fd, "POST /e HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n");
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "100 Continue\r\n\r\n", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "HTTP/1.1 100 Continue\r\n\r\n"));
    send_str(fd, "ok");
    read_until(fd, &out, "h=-", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "body=2:ok"));
    gw_buf_free(&out);
    close(fd);
}

static void refused(const char *req, const char *status_line, const char *code)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_all(fd, req, strlen(req));
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "}}", 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, status_line));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, code));
    gw_buf_free(&out);
    close(fd);
}

static void test_malformed(void)
{
    refused("NONSENSE\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    refused("GET / HTTP/2.0\r\n\r\n", "HTTP/1.1 505 ", "invalid_http");
    refused("GET / HTTP/1.1\r\nBad Header\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    refused("GET / HTTP/1.1\r\n folded\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    refused("POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    refused("POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "HTTP/1.1 400 ",
            "invalid_http");
    refused("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 411 ",
            "length_required");
    refused("GET /a\xff HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    /* Smuggling shapes: a bare LF inside a value would hide a header from
     * some front proxies; a NUL used to crash the parser. */
    refused("POST /h HTTP/1.1\r\nX-Foo: a\nContent-Length: 28\r\n\r\n", "HTTP/1.1 400 ",
            "invalid_http");
    refused("GET /h HTTP/1.1\r\nX: a\rb\r\n\r\n", "HTTP/1.1 400 ", "invalid_http");
    static const char nul[] = "GET /healthz HTTP/1.1\r\nX: a\0b\r\n\r\n";
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_all(fd, nul, sizeof(nul) - 1);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "}}", 1);
    CU_ASSERT_PTR_NOT_NULL(out.data ? strstr(out.data, "HTTP/1.1 400 ") : NULL);
    gw_buf_free(&out);
    close(fd);
    char big[40000];
    memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
    memset(big + 19, 'a', sizeof(big) - 20);
    big[sizeof(big) - 1] = '\0';
    refused(big, "HTTP/1.1 431 ", "headers_too_large");
}

static void test_client_close_notifies(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    __atomic_store_n(&closed_seen, 0, __ATOMIC_SEQ_CST);
    send_str(fd, "GET /hold HTTP/1.1\r\n\r\n");
    usleep(100000);
    close(fd);
    for (int i = 0; i < 200 && !__atomic_load_n(&closed_seen, __ATOMIC_SEQ_CST); i++)
        usleep(10000);
    CU_ASSERT_EQUAL(__atomic_load_n(&closed_seen, __ATOMIC_SEQ_CST), 1);
}

static void test_http10_closes(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_str(fd, "GET /old HTTP/1.0\r\n\r\n");
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "never-present", 1); /* reads to EOF */
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "Connection: close\r\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "GET /old"));
    gw_buf_free(&out);
    close(fd);
}

static void test_head_and_http10_streaming(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    /* HEAD: the length of the body, never the body; keep-alive intact. */
    send_str(fd, "HEAD /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n");
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(fd, &out, "h=-", 1);
    const char *second = strstr(out.data, "HTTP/1.1 200 OK\r\n");
    CU_ASSERT_PTR_NOT_NULL_FATAL(second);
    second = strstr(second + 1, "HTTP/1.1 200 OK\r\n");
    CU_ASSERT_PTR_NOT_NULL(second);
    CU_ASSERT_PTR_NULL(strstr(out.data, "HEAD /x"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "GET /y q= body=0: h=-"));
    gw_buf_free(&out);
    close(fd);
    /* HTTP/1.0 has no chunked encoding: the close ends a streamed body. */
    fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    send_str(fd, "GET /stream HTTP/1.0\r\n\r\n");
    gw_buf_init(&out, 0);
    read_until(fd, &out, "never-present", 1);
    CU_ASSERT_PTR_NULL(strstr(out.data, "Transfer-Encoding"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, "Connection: close\r\n\r\nhello world"));
    gw_buf_free(&out);
    close(fd);
}

/* A client that pipelines many requests before reading any answer: the
 * server stops reading while answers pile up, and resumes as the client
 * reads, so every request is still answered, in order. */
static void test_pipelining_flood(void)
{
    int fd = connect_client();
    CU_ASSERT_FATAL(fd >= 0);
    enum { N = 3000 };
    struct gw_buf req;
    gw_buf_init(&req, 0);
    for (int i = 0; i < N; i++)
        CU_ASSERT_EQUAL_FATAL(gw_buf_printf(&req, "GET /p%d HTTP/1.1\r\n\r\n", i), GW_OK);
    /* Write from a helper thread: the server stops reading while we do not
     * read, so a single blocking write here could wait forever. */
    struct gw_buf out;
    gw_buf_init(&out, 0);
    pthread_t t;
    struct writer_args wr = {fd, &req};
    CU_ASSERT_EQUAL_FATAL(pthread_create(&t, NULL, writer_main, &wr), 0);
    read_until(fd, &out, "h=-", N);
    pthread_join(t, NULL);
    char last[32];
    snprintf(last, sizeof(last), "GET /p%d q=", N - 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out.data, last));
    int count = 0;
    for (const char *p = out.data; (p = strstr(p, "HTTP/1.1 200")); p++)
        count++;
    CU_ASSERT_EQUAL(count, N);
    gw_buf_free(&out);
    gw_buf_free(&req);
    close(fd);
}

/* ------------------------------------------------- the open-file limit */

static uint64_t refused_total;

static void count_refused(uint64_t n, void *arg)
{
    (void)arg;
    refused_total += n;
}

static int connect_to(int p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Runs b on this thread for ms milliseconds. */
static void run_for(struct event_base *b, int ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_base_loopexit(b, &tv);
    event_base_dispatch(b);
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* A server on this thread's own loop: with no descriptor free, waiting
 * connections are answered 503 on the reserve; with not even the reserve,
 * the listener rests instead of spinning, and accepts again once
 * descriptors are back. */
static void test_fd_limit(void)
{
    struct event_base *b = event_base_new();
    int p = 0;
    int lfd = gw_http_listen("127.0.0.1", 0, 0, &p);
    CU_ASSERT_FATAL(b && lfd >= 0);
    struct gw_http_server_opts o = {.handler = handler, .refused = count_refused};
    struct gw_http_server *s = gw_http_server_new(b, lfd, &o);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    struct rlimit old;
    CU_ASSERT_FATAL(getrlimit(RLIMIT_NOFILE, &old) == 0);

    /* Three connections wait in the backlog; then the soft limit is set
     * at the lowest free descriptor number, so no new one can be had. */
    int cl[3];
    for (int i = 0; i < 3; i++)
        CU_ASSERT_FATAL((cl[i] = connect_to(p)) >= 0);
    int lowest = dup(0);
    close(lowest);
    struct rlimit none = {(rlim_t)lowest, old.rlim_max};
    refused_total = 0;
    CU_ASSERT_FATAL(setrlimit(RLIMIT_NOFILE, &none) == 0);
    run_for(b, 100);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_NOFILE, &old) == 0);
    CU_ASSERT_EQUAL(refused_total, 3);
    for (int i = 0; i < 3; i++) {
        struct gw_buf out;
        gw_buf_init(&out, 0);
        read_until(cl[i], &out, "}}", 1);
        CU_ASSERT(out.len > 12 && memcmp(out.data, "HTTP/1.1 503 ", 13) == 0);
        CU_ASSERT(out.data && strstr(out.data, "\"code\":\"too_many_connections\"") != NULL);
        CU_ASSERT(out.data && strstr(out.data, "Retry-After: 1\r\n") != NULL);
        /* Then the server closed it. */
        char c;
        CU_ASSERT_EQUAL(read(cl[i], &c, 1), 0);
        gw_buf_free(&out);
        close(cl[i]);
    }

    /* Not even the reserve (every number from 3 up is past the limit): the
     * listener rests 100 ms at a time; the clients wait, and the loop idles. */
    int c = connect_to(p);
    CU_ASSERT_FATAL(c >= 0);
    send_str(c, "GET /after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    struct rlimit nothing = {3, old.rlim_max};
    double cpu0 = cpu_s();
    CU_ASSERT_FATAL(setrlimit(RLIMIT_NOFILE, &nothing) == 0);
    run_for(b, 400);
    CU_ASSERT_FATAL(setrlimit(RLIMIT_NOFILE, &old) == 0);
    double cpu = cpu_s() - cpu0;
    if (cpu >= 0.2)
        fprintf(stderr, "\n  %.3f s of CPU in 0.4 s at the limit\n", cpu);
    CU_ASSERT(cpu < 0.2);
    CU_ASSERT_EQUAL(refused_total, 3);
    /* Descriptors are back: the waiting client is served, not refused. */
    run_for(b, 300);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    read_until(c, &out, "GET /after", 1);
    CU_ASSERT(out.len > 12 && memcmp(out.data, "HTTP/1.1 200 ", 13) == 0);
    gw_buf_free(&out);
    close(c);
    gw_http_server_free(s);
    event_base_free(b);
}

static CU_TestInfo tests[] = {
    {"open-file limit: 503 on the reserve, rest without it", test_fd_limit},
    {"HEAD and HTTP/1.0 streaming", test_head_and_http10_streaming},
    {"pipelining flood is answered in full", test_pipelining_flood},
    {"keep-alive and pipelining", test_keepalive_and_pipelining},
    {"request written byte by byte", test_byte_by_byte},
    {"chunked response framing", test_chunked_response},
    {"oversized body: 413 JSON, answer survives", test_oversized_body_refused},
    {"Expect: 100-continue", test_expect_continue},
    {"malformed requests refused", test_malformed},
    {"client close reaches the owner", test_client_close_notifies},
    {"HTTP/1.0 closes after the answer", test_http10_closes},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT init_suite
#define UNIT_SUITE_CLEAN clean_suite
#include "unit_main.h"
