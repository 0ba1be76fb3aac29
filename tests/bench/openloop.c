/*
 * openloop: a fixed-rate HTTP/1.1 load generator for tests/bench/run.sh
 * --open-loop. Request i is due at start + i / rate, whatever happened to
 * the ones before it, and its latency is measured from that due time: a
 * target that stalls cannot hide the requests that queued behind the stall
 * (no coordinated omission). Requests go out on a fixed pool of keep-alive
 * connections; one that is due while every connection is busy waits, and
 * that wait is part of its latency.
 *
 *   openloop -p PORT -u PATH -r RATE -d SECONDS -c CONNS -b BODYFILE
 *            [-H 'Name: value']... [-s]
 *
 * -s: the answer is a stream, complete only with "data: [DONE]" and the
 * chunked terminator. Prints one line:
 *   OPENLOOP due=N done=N errors=N rate=X p50_us=N p90_us=N p99_us=N
 *            max_us=N max_queue=N
 * errors: a non-2xx status, an incomplete answer (no [DONE] in a stream), a
 * connection failure, or no answer within 10 s of the schedule's end.
 * Loopback only (127.0.0.1), bounded by -d and that 10 s.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum { C_IDLE, C_BUSY, C_DEAD };
enum { R_HEAD, R_LEN, R_CHUNK_SIZE, R_CHUNK_DATA, R_CHUNK_CRLF, R_DONE };

struct conn {
    int fd, state;
    size_t woff;    /* bytes of the request written */
    int64_t due;    /* the request's due time, ns */
    char in[65536]; /* the head, or the current unparsed bytes */
    size_t inlen;
    int rs, status, chunked;
    long long left; /* body bytes (R_LEN) or chunk bytes left */
    char tail[8];   /* the last bytes of the body, to find [DONE] across reads */
    int seen_done;
};

static int port, nconns, stream_mode;
static const char *path = "/";
static char *req;
static size_t reqlen;
static int64_t *lat;
static size_t nlat, ndone, nerr;
static int ep;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int connect_one(struct conn *c)
{
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        return -1;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) {
        close(c->fd);
        c->fd = -1;
        return -1;
    }
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT | EPOLLET, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    c->state = C_IDLE;
    return 0;
}

static void fail(struct conn *c)
{
    if (c->state == C_BUSY)
        nerr++;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->state = C_DEAD;
}

static void finish(struct conn *c)
{
    int ok = c->status >= 200 && c->status < 300 && (!stream_mode || c->seen_done);
    if (ok) {
        lat[nlat++] = now_ns() - c->due;
        ndone++;
    } else {
        nerr++;
    }
    c->state = C_IDLE;
}

static void body_bytes(struct conn *c, const char *p, size_t n)
{
    char win[8 + 4096];
    size_t t = strlen(c->tail);
    /* Search the carried tail and the new bytes' start together. */
    size_t k = n < 4096 ? n : 4096;
    memcpy(win, c->tail, t);
    memcpy(win + t, p, k);
    if (memmem(win, t + k, "[DONE]", 6) || memmem(p, n, "[DONE]", 6))
        c->seen_done = 1;
    size_t keep = n < 6 ? n : 6;
    memcpy(c->tail, p + n - keep, keep);
    c->tail[keep] = '\0';
}

/* Consumes c->in; returns 0 to go on, -1 on a malformed answer. */
static int parse(struct conn *c)
{
    size_t off = 0;
    while (off < c->inlen && c->rs != R_DONE) {
        char *p = c->in + off;
        size_t n = c->inlen - off;
        if (c->rs == R_HEAD) {
            char *e = memmem(p, n, "\r\n\r\n", 4);
            if (!e)
                break;
            c->status = atoi(p + 9);
            c->chunked = memmem(p, (size_t)(e - p), "hunked", 6) != NULL;
            char *cl = memmem(p, (size_t)(e - p), "ontent-Length:", 14);
            if (!cl)
                cl = memmem(p, (size_t)(e - p), "ontent-length:", 14);
            c->left = cl ? atoll(cl + 14) : 0;
            c->rs = c->chunked ? R_CHUNK_SIZE : R_LEN;
            off += (size_t)(e - p) + 4;
            if (c->rs == R_LEN && c->left == 0)
                c->rs = R_DONE;
        } else if (c->rs == R_LEN || c->rs == R_CHUNK_DATA) {
            size_t k = (size_t)c->left < n ? (size_t)c->left : n;
            body_bytes(c, p, k);
            c->left -= (long long)k;
            off += k;
            if (c->left == 0)
                c->rs = c->rs == R_LEN ? R_DONE : R_CHUNK_CRLF;
        } else if (c->rs == R_CHUNK_CRLF) {
            if (n < 2)
                break;
            off += 2;
            c->rs = R_CHUNK_SIZE;
        } else { /* R_CHUNK_SIZE */
            char *e = memmem(p, n, "\r\n", 2);
            if (!e)
                break;
            c->left = strtoll(p, NULL, 16);
            off += (size_t)(e - p) + 2;
            if (c->left == 0) {
                /* no trailers: the final CRLF */
                if (c->inlen - off < 2) {
                    off -= (size_t)(e - p) + 2;
                    break;
                }
                off += 2;
                c->rs = R_DONE;
            } else {
                c->rs = R_CHUNK_DATA;
            }
        }
    }
    memmove(c->in, c->in + off, c->inlen - off);
    c->inlen -= off;
    if (c->rs == R_DONE)
        finish(c);
    return 0;
}

static void on_io(struct conn *c, uint32_t evs)
{
    if (evs & (EPOLLERR | EPOLLHUP)) {
        fail(c);
        return;
    }
    if (c->state == C_BUSY && c->woff < reqlen) {
        ssize_t w = write(c->fd, req + c->woff, reqlen - c->woff);
        if (w > 0)
            c->woff += (size_t)w;
        else if (w < 0 && errno != EAGAIN) {
            fail(c);
            return;
        }
    }
    for (;;) {
        if (c->inlen == sizeof(c->in)) {
            fail(c);
            return;
        }
        ssize_t r = read(c->fd, c->in + c->inlen, sizeof(c->in) - c->inlen);
        if (r > 0) {
            c->inlen += (size_t)r;
            if (c->state == C_BUSY)
                parse(c);
            continue;
        }
        if (r == 0 || errno != EAGAIN)
            fail(c);
        return;
    }
}

static void start(struct conn *c, int64_t due)
{
    c->state = C_BUSY;
    c->due = due;
    c->woff = 0;
    c->rs = R_HEAD;
    c->status = 0;
    c->seen_done = 0;
    c->tail[0] = '\0';
    on_io(c, 0);
}

int main(int argc, char **argv)
{
    double rate = 1000, secs = 5;
    const char *bodyfile = NULL;
    char headers[4096] = "";
    int opt;
    while ((opt = getopt(argc, argv, "p:u:r:d:c:b:H:s")) != -1) {
        if (opt == 'p')
            port = atoi(optarg);
        else if (opt == 'u')
            path = optarg;
        else if (opt == 'r')
            rate = atof(optarg);
        else if (opt == 'd')
            secs = atof(optarg);
        else if (opt == 'c')
            nconns = atoi(optarg);
        else if (opt == 'b')
            bodyfile = optarg;
        else if (opt == 'H' && strlen(headers) + strlen(optarg) + 3 < sizeof(headers)) {
            strncat(headers, optarg, sizeof(headers) - strlen(headers) - 1);
            strncat(headers, "\r\n", sizeof(headers) - strlen(headers) - 1);
        } else if (opt == 's')
            stream_mode = 1;
        else {
            fprintf(stderr, "usage: openloop -p PORT -u PATH -r RATE -d SECS -c CONNS -b BODY "
                            "[-H 'N: v']... [-s]\n");
            return 2;
        }
    }
    if (!port || !bodyfile || nconns < 1 || rate <= 0 || secs <= 0 || secs > 600)
        return 2;
    FILE *f = fopen(bodyfile, "rb");
    if (!f)
        return 2;
    char body[65536];
    size_t blen = fread(body, 1, sizeof(body), f);
    fclose(f);
    req = malloc(blen + 8192);
    int n = snprintf(req, 8192,
                     "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n%s\r\n",
                     path, blen, headers);
    memcpy(req + n, body, blen);
    reqlen = (size_t)n + blen;

    size_t total = (size_t)(rate * secs);
    lat = malloc((total + 1) * sizeof(*lat));
    int64_t *queue = malloc((total + 1) * sizeof(*queue));
    struct conn *cs = calloc((size_t)nconns, sizeof(*cs));
    ep = epoll_create1(EPOLL_CLOEXEC);
    for (int i = 0; i < nconns; i++)
        if (connect_one(&cs[i]) < 0)
            cs[i].state = C_DEAD;
    size_t qh = 0, qt = 0, next = 0, maxq = 0;
    int64_t t0 = now_ns() + 100000000; /* connections settle for 100 ms */
    int64_t gap = (int64_t)(1e9 / rate);
    int64_t end_by = t0 + (int64_t)(secs * 1e9) + 10000000000LL;
    struct epoll_event evs[256];
    for (;;) {
        int64_t now = now_ns();
        while (next < total && t0 + (int64_t)next * gap <= now)
            queue[qt++] = t0 + (int64_t)(next++) * gap;
        if (qt - qh > maxq)
            maxq = qt - qh;
        for (int i = 0; i < nconns && qh < qt; i++) {
            if (cs[i].state == C_DEAD && connect_one(&cs[i]) < 0)
                continue;
            if (cs[i].state == C_IDLE)
                start(&cs[i], queue[qh++]);
        }
        int busy = 0;
        for (int i = 0; i < nconns; i++)
            busy += cs[i].state == C_BUSY;
        if (next >= total && qh == qt && !busy)
            break;
        if (now > end_by)
            break;
        int64_t wait_ns = next < total ? t0 + (int64_t)next * gap - now : 1000000;
        int ms = wait_ns > 1000000 ? (int)(wait_ns / 1000000) : 0;
        if (ms > 10)
            ms = 10;
        int k = epoll_wait(ep, evs, 256, qh < qt ? 1 : ms);
        for (int i = 0; i < k; i++)
            on_io(evs[i].data.ptr, evs[i].events);
    }
    for (int i = 0; i < nconns; i++)
        if (cs[i].state == C_BUSY)
            nerr++;
    nerr += qt - qh; /* never sent */
    qsort(lat, nlat, sizeof(*lat), cmp64);
#define PCT(q) (nlat ? lat[(size_t)((double)(nlat - 1) * (q))] / 1000 : 0)
    printf("OPENLOOP due=%zu done=%zu errors=%zu rate=%.1f p50_us=%lld p90_us=%lld p99_us=%lld "
           "max_us=%lld max_queue=%zu\n",
           total, ndone, nerr, (double)ndone / secs, (long long)PCT(0.5), (long long)PCT(0.9),
           (long long)PCT(0.99), (long long)(nlat ? lat[nlat - 1] / 1000 : 0), maxq);
    return nerr ? 1 : 0;
}
