/*
 * gw_sse: a resumable Server-Sent Events parser (WHATWG "event stream
 * interpretation"). Upstream bodies arrive in arbitrary pieces; the parser
 * keeps its state between calls, so an event split anywhere (inside "data:",
 * between CR and LF) parses the same as one delivered whole.
 *
 * Pull-style, no callbacks: the caller feeds a piece and takes events out
 * one at a time:
 *
 *     const char *p = piece; size_t n = len; struct gw_sse_event ev; int rc;
 *     while ((rc = gw_sse_next(&sse, &p, &n, &ev)) == GW_OK)
 *         use(&ev);          // valid until the next gw_sse_next call
 *     if (rc != GW_EAGAIN)   // GW_ELIMIT: an event passed the ceiling
 *         fail();
 *
 * Lines end in CRLF, LF or CR. Multi-line data joins with LF. Comments
 * (":ping") and unknown fields are skipped; "retry" is ignored.
 */
#ifndef GW_SSE_H
#define GW_SSE_H

#include <stddef.h>

#include "gw_buf.h"

struct gw_sse_event {
    const char *event; /* "" when no event: field; NUL-terminated */
    size_t event_len;
    const char *data; /* NUL-terminated */
    size_t data_len;
    const char *id; /* NULL when the stream never set one */
};

struct gw_sse {
    struct gw_buf line;
    struct gw_buf data;
    struct gw_buf event;
    struct gw_buf id;
    int have_id;
    int data_seen;  /* a data field arrived for the pending event */
    int skip_lf;    /* the previous byte was CR */
    int dispatched; /* buffers hold an event handed out last call */
};

/* max_event_bytes bounds one line and one event's data (0: 1 MiB). */
void gw_sse_init(struct gw_sse *p, size_t max_event_bytes);
void gw_sse_free(struct gw_sse *p);
/* Consumes input from buf and len (advancing both) until an event is complete
 * (GW_OK, *ev filled) or the input is used up (GW_EAGAIN). GW_ELIMIT when a
 * line or event passes the ceiling: the parser must then be discarded. */
int gw_sse_next(struct gw_sse *p, const char **buf, size_t *len, struct gw_sse_event *ev)
    __attribute__((warn_unused_result));

#endif
