/*
 * JSON-lines logging. Each line is rendered into memory and written with
 * one write(2): on pipes lines up to PIPE_BUF never interleave, and on
 * O_APPEND files the kernel serializes whole writes.
 */
#include "gw_log.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_error.h"

static enum gw_log_level min_level = GW_LOG_INFO;
static int access_fd = 1;

static const char *level_name(enum gw_log_level l)
{
    switch (l) {
    case GW_LOG_DEBUG:
        return "debug";
    case GW_LOG_INFO:
        return "info";
    case GW_LOG_WARN:
        return "warn";
    default:
        return "error";
    }
}

int gw_log_level_from_env(void)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};
    const char *v = getenv("LLMGW_LOG_LEVEL");
    if (!v || !*v)
        return GW_OK;
    for (int i = 0; i < 4; i++)
        if (strcasecmp(v, names[i]) == 0) {
            min_level = (enum gw_log_level)i;
            return GW_OK;
        }
    return GW_EINVAL;
}

void gw_log_set_level(enum gw_log_level level)
{
    min_level = level;
}

int gw_log_open_access(const char *path)
{
    if (!path || strcmp(path, "-") == 0) {
        access_fd = 1;
        return GW_OK;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
    if (fd < 0)
        return GW_EIO;
    access_fd = fd;
    return GW_OK;
}

/* RFC 3339 UTC with milliseconds: sortable, and readable at 3 a.m. */
static void now_rfc3339(char out[32])
{
    /* The date and time to the second are formatted once a second per
     * thread: every request writes a line or two. */
    static __thread time_t sec = -1;
    static __thread char head[24];
    static __thread size_t n;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    if (tv.tv_sec != sec) {
        struct tm tm;
        gmtime_r(&tv.tv_sec, &tm);
        n = strftime(head, sizeof(head), "%Y-%m-%dT%H:%M:%S", &tm);
        sec = tv.tv_sec;
    }
    memcpy(out, head, n);
    int ms = (int)(tv.tv_usec / 1000);
    out[n] = '.';
    out[n + 1] = (char)('0' + ms / 100);
    out[n + 2] = (char)('0' + ms / 10 % 10);
    out[n + 3] = (char)('0' + ms % 10);
    out[n + 4] = 'Z';
    out[n + 5] = '\0';
}

static void write_all(int fd, const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, s, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

void gw_log_line_fd(int fd, json_t *obj)
{
    if (!obj)
        return;
    /* 10 significant digits: milliseconds with three decimals stay exact
     * enough without binary noise (1.769, not 1.7689999999999999). */
    char *s = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(obj);
    if (!s)
        return;
    size_t n = strlen(s);
    s[n] = '\n'; /* replaces the NUL; length passed explicitly */
    write_all(fd, s, n + 1);
    free(s);
}

static json_t *with_head(json_t *fields, const char *level, const char *msg)
{
    json_t *o = json_object();
    if (!o) {
        json_decref(fields);
        return NULL;
    }
    char ts[32];
    now_rfc3339(ts);
    json_object_set_new(o, "ts", json_string(ts));
    if (level)
        json_object_set_new(o, "level", json_string(level));
    json_object_set_new(o, "msg", json_string(msg));
    if (json_is_object(fields))
        json_object_update(o, fields);
    json_decref(fields);
    return o;
}

void gw_log(enum gw_log_level level, const char *msg, json_t *fields)
{
    if (level < min_level) {
        json_decref(fields);
        return;
    }
    gw_log_line_fd(2, with_head(fields, level_name(level), msg));
}

int gw_log_access_line(struct gw_buf *out, const char *msg, const char *members, size_t len)
{
    char ts[32];
    now_rfc3339(ts);
    int rc = gw_buf_appends(out, "{\"ts\":\"");
    if (rc == GW_OK)
        rc = gw_buf_appends(out, ts);
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "\",\"msg\":\"");
    if (rc == GW_OK)
        rc = gw_buf_append(out, msg, strnlen(msg, 16));
    if (rc == GW_OK)
        rc = gw_buf_appends(out, "\",");
    if (rc == GW_OK)
        rc = gw_buf_append(out, members, len);
    return rc == GW_OK ? gw_buf_appends(out, "}\n") : rc;
}

void gw_log_access_write(const struct gw_buf *lines)
{
    if (lines->len)
        write_all(access_fd, lines->data, lines->len);
}

static void batch_flush(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_log_batch *b = arg;
    gw_log_access_write(&b->lines);
    gw_buf_reset(&b->lines);
}

int gw_log_batch_init(struct gw_log_batch *b, struct event_base *base)
{
    gw_buf_init(&b->lines, 0);
    b->flush = event_new(base, -1, 0, batch_flush, b);
    return b->flush ? GW_OK : GW_ENOMEM;
}

void gw_log_batch_add(struct gw_log_batch *b, const struct gw_buf *lines)
{
    if (!lines->len)
        return;
    if (!b || !b->flush) {
        gw_log_access_write(lines);
        return;
    }
    int first = b->lines.len == 0;
    if (gw_buf_append(&b->lines, lines->data, lines->len) != GW_OK) {
        batch_flush(-1, 0, b); /* what is held first: lines stay in order */
        gw_log_access_write(lines);
        return;
    }
    if (b->lines.len >= GW_LOG_BATCH_MAX)
        batch_flush(-1, 0, b); /* the active event then finds nothing */
    else if (first)
        event_active(b->flush, 0, 0);
}

void gw_log_batch_free(struct gw_log_batch *b)
{
    if (!b->flush)
        return;
    gw_log_access_write(&b->lines);
    gw_buf_free(&b->lines);
    event_free(b->flush);
    b->flush = NULL;
}

void gw_log_access_fields(const char *msg, const char *members, size_t len)
{
    struct gw_buf line;
    gw_buf_init(&line, 0);
    if (gw_log_access_line(&line, msg, members, len) == GW_OK)
        gw_log_access_write(&line);
    gw_buf_free(&line);
}

void gw_log_access(json_t *fields)
{
    gw_log_line_fd(access_fd, with_head(fields, NULL, "access"));
}

/* libevent calls this from any thread that runs into trouble (an accept
 * at the descriptor limit, a failed epoll_ctl): one line of ours each. */
static void libevent_log(int severity, const char *msg)
{
    enum gw_log_level level = severity == EVENT_LOG_DEBUG  ? GW_LOG_DEBUG
                              : severity == EVENT_LOG_MSG  ? GW_LOG_INFO
                              : severity == EVENT_LOG_WARN ? GW_LOG_WARN
                                                           : GW_LOG_ERROR;
    gw_logf(level, "libevent", "{s:s}", "detail", msg ? msg : "");
}

void gw_log_route_libevent(void)
{
    event_set_log_callback(libevent_log);
}
