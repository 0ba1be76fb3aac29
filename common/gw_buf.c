#include "gw_buf.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

void gw_buf_init(struct gw_buf *b, size_t max)
{
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    b->max = max ? max : SIZE_MAX / 2;
}

void gw_buf_free(struct gw_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void gw_buf_reset(struct gw_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

/* Makes room for n more bytes plus the NUL, respecting the ceiling. */
static int reserve(struct gw_buf *b, size_t n)
{
    if (n > b->max - b->len)
        return GW_ELIMIT;
    size_t need = b->len + n + 1;
    if (need <= b->cap)
        return GW_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d)
        return GW_ENOMEM;
    b->data = d;
    b->cap = cap;
    return GW_OK;
}

int gw_buf_reserve(struct gw_buf *b, size_t n)
{
    return reserve(b, n);
}

int gw_buf_append(struct gw_buf *b, const void *p, size_t n)
{
    int rc = reserve(b, n);
    if (rc)
        return rc;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return GW_OK;
}

int gw_buf_appends(struct gw_buf *b, const char *s)
{
    return gw_buf_append(b, s, strlen(s));
}

int gw_buf_append_int(struct gw_buf *b, long long v)
{
    char d[24];
    size_t k = sizeof(d);
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        d[--k] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        d[--k] = '-';
    return gw_buf_append(b, d + k, sizeof(d) - k);
}

int gw_buf_vprintf(struct gw_buf *b, const char *fmt, va_list ap)
{
    /* One formatting pass when the result fits the spare capacity (the
     * common case on hot paths); otherwise size it, grow, and format again. */
    size_t room = b->cap > b->len ? b->cap - b->len : 0; /* includes the NUL */
    va_list cp;
    va_copy(cp, ap);
    int n = vsnprintf(room ? b->data + b->len : NULL, room, fmt, cp);
    va_end(cp);
    if (n < 0 || (size_t)n > b->max - b->len) {
        if (b->data)
            b->data[b->len] = '\0'; /* a truncated attempt wrote there */
        return n < 0 ? GW_EINVAL : GW_ELIMIT;
    }
    if ((size_t)n < room) {
        b->len += (size_t)n;
        return GW_OK;
    }
    int rc = reserve(b, (size_t)n);
    if (rc) {
        if (b->data)
            b->data[b->len] = '\0';
        return rc;
    }
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return GW_OK;
}

int gw_buf_printf(struct gw_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = gw_buf_vprintf(b, fmt, ap);
    va_end(ap);
    return rc;
}

void gw_buf_consume(struct gw_buf *b, size_t n)
{
    if (n >= b->len) {
        gw_buf_reset(b);
        return;
    }
    memmove(b->data, b->data + n, b->len - n);
    b->len -= n;
    b->data[b->len] = '\0';
}
