/*
 * gw_buf: a growable byte buffer with a ceiling. An append that would pass
 * the ceiling fails with GW_ELIMIT and leaves the buffer as it was, so every
 * buffer fed by a peer (request bodies, SSE lines, accumulated upstream
 * bodies) is bounded. The data is always NUL-terminated (not counted in len).
 */
#ifndef GW_BUF_H
#define GW_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct gw_buf {
    char *data; /* NULL until the first append */
    size_t len;
    size_t cap;
    size_t max; /* ceiling on len; 0 means SIZE_MAX/2 */
};

void gw_buf_init(struct gw_buf *b, size_t max);
void gw_buf_free(struct gw_buf *b);
void gw_buf_reset(struct gw_buf *b); /* len = 0, keeps memory */
int gw_buf_append(struct gw_buf *b, const void *p, size_t n) __attribute__((warn_unused_result));
/* Room for n more bytes (and the NUL) at data + len, for a writer that
 * fills them itself and then sets len (and the NUL): GW_OK, or GW_ENOMEM /
 * GW_ELIMIT with the buffer as it was. */
int gw_buf_reserve(struct gw_buf *b, size_t n) __attribute__((warn_unused_result));
int gw_buf_appends(struct gw_buf *b, const char *s) __attribute__((warn_unused_result));
/* v in decimal: what "%lld" gives, without the formatter. */
int gw_buf_append_int(struct gw_buf *b, long long v) __attribute__((warn_unused_result));
int gw_buf_printf(struct gw_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), warn_unused_result));
int gw_buf_vprintf(struct gw_buf *b, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0), warn_unused_result));
/* Drops the first n bytes. */
void gw_buf_consume(struct gw_buf *b, size_t n);

#endif
