/*
 * gw_log: one JSON object per line. Diagnostics go to stderr, access logs to
 * their own stream. A line is written with a single write(2) so lines from
 * several threads never interleave. Callers pass fields, never free text
 * built from request content: prompt and completion text must never reach a
 * log (ARCHITECTURE invariant 7).
 */
#ifndef GW_LOG_H
#define GW_LOG_H

#include <jansson.h>

#include "gw_buf.h"

enum gw_log_level { GW_LOG_DEBUG, GW_LOG_INFO, GW_LOG_WARN, GW_LOG_ERROR };

/* Minimum level written to stderr (default INFO). */
void gw_log_set_level(enum gw_log_level level);
/* Sets it from LLMGW_LOG_LEVEL (debug, info, warn, error) when that is set;
 * returns GW_EINVAL for any other value (the level is left alone). */
int gw_log_level_from_env(void) __attribute__((warn_unused_result));
/* Where access lines go: a path, or "-" for stdout. 0 or GW_EIO. */
int gw_log_open_access(const char *path) __attribute__((warn_unused_result));

/* Writes {"ts":...,"level":...,"msg":msg, ...fields} to stderr and takes
 * ownership of fields (may be NULL). */
void gw_log(enum gw_log_level level, const char *msg, json_t *fields);
/* Writes fields plus ts and "msg":"access" to the access stream; steals fields. */
void gw_log_access(json_t *fields);
/* The same from fields already rendered as JSON members ("a":1,"b":"x",
 * without braces), for hot paths that build their line by hand; msg names
 * the line ("access" for a request, "attempt" for one upstream attempt). */
void gw_log_access_fields(const char *msg, const char *members, size_t len);
/* The same line appended to out (0 or GW_ENOMEM), and lines so gathered
 * written in one write(2): a request's last lines cost one system call. */
struct gw_buf;
int gw_log_access_line(struct gw_buf *out, const char *msg, const char *members, size_t len);
void gw_log_access_write(const struct gw_buf *lines);
/* One event loop's access lines, gathered while its callbacks run and
 * written in one write(2) when they are done. The first line of a batch
 * makes an event active, which libevent runs after the callbacks already
 * due on this turn of the loop: a line waits at most that turn, and a busy
 * loop writes many requests' lines at once. Past GW_LOG_BATCH_MAX bytes the
 * batch goes out at once. Not thread-safe: one loop's. */
#define GW_LOG_BATCH_MAX (64u * 1024)
struct event_base;
struct gw_log_batch {
    struct gw_buf lines;
    struct event *flush; /* NULL: not made (lines are written at once) */
};
/* 0 or GW_ENOMEM. */
int gw_log_batch_init(struct gw_log_batch *b, struct event_base *base)
    __attribute__((warn_unused_result));
/* Appends lines (whole lines, as gw_log_access_line gathers them); b NULL,
 * or out of memory: written at once. */
void gw_log_batch_add(struct gw_log_batch *b, const struct gw_buf *lines);
/* Writes what is held, then frees; safe on a zeroed or half-made batch. */
void gw_log_batch_free(struct gw_log_batch *b);
/* Writes obj as one line to fd; steals obj. Used for the "listening" line. */
void gw_log_line_fd(int fd, json_t *obj);
/* libevent's own messages ("Too many open files", ...) become log lines
 * like ours (level and message), instead of raw stderr text. Idempotent. */
void gw_log_route_libevent(void);

/* Convenience: gw_log(level, msg, json_pack(fmt, ...)). */
#define gw_logf(level, msg, ...) gw_log((level), (msg), json_pack(__VA_ARGS__))

#endif
