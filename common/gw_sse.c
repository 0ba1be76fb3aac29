#include "gw_sse.h"

#include <string.h>

#include "gw_error.h"

void gw_sse_init(struct gw_sse *p, size_t max)
{
    if (!max)
        max = 1u << 20;
    gw_buf_init(&p->line, max);
    gw_buf_init(&p->data, max);
    gw_buf_init(&p->event, 256);
    gw_buf_init(&p->id, 256);
    p->have_id = 0;
    p->data_seen = 0;
    p->skip_lf = 0;
    p->dispatched = 0;
}

void gw_sse_free(struct gw_sse *p)
{
    gw_buf_free(&p->line);
    gw_buf_free(&p->data);
    gw_buf_free(&p->event);
    gw_buf_free(&p->id);
}

/* Applies one complete line. Returns 1 when it dispatches an event. */
static int process_line(struct gw_sse *p, struct gw_sse_event *ev, int *err)
{
    const char *s = p->line.data ? p->line.data : "";
    size_t n = p->line.len;
    if (n == 0) {
        /* An event whose data is empty is not dispatched (WHATWG 9.2.6). */
        if (!p->data_seen || p->data.len == 0) {
            gw_buf_reset(&p->event);
            gw_buf_reset(&p->data);
            p->data_seen = 0;
            return 0;
        }
        ev->event = p->event.data ? p->event.data : "";
        ev->event_len = p->event.len;
        ev->data = p->data.data ? p->data.data : "";
        ev->data_len = p->data.len;
        ev->id = p->have_id ? (p->id.data ? p->id.data : "") : NULL;
        p->dispatched = 1;
        return 1;
    }
    if (s[0] == ':')
        return 0;
    const char *colon = memchr(s, ':', n);
    size_t flen = colon ? (size_t)(colon - s) : n;
    const char *v = colon ? colon + 1 : s + n;
    size_t vlen = colon ? n - flen - 1 : 0;
    if (vlen && *v == ' ') {
        v++;
        vlen--;
    }
    int rc = 0;
    if (flen == 4 && memcmp(s, "data", 4) == 0) {
        if (p->data_seen)
            rc = gw_buf_append(&p->data, "\n", 1);
        if (!rc)
            rc = gw_buf_append(&p->data, v, vlen);
        p->data_seen = 1;
    } else if (flen == 5 && memcmp(s, "event", 5) == 0) {
        gw_buf_reset(&p->event);
        rc = gw_buf_append(&p->event, v, vlen);
    } else if (flen == 2 && memcmp(s, "id", 2) == 0) {
        if (!memchr(v, '\0', vlen)) {
            gw_buf_reset(&p->id);
            rc = gw_buf_append(&p->id, v, vlen);
            p->have_id = 1;
        }
    }
    if (rc)
        *err = rc;
    return 0;
}

int gw_sse_next(struct gw_sse *p, const char **buf, size_t *len, struct gw_sse_event *ev)
{
    if (p->dispatched) {
        /* The caller is done with the last event: clear it (id persists). */
        gw_buf_reset(&p->data);
        gw_buf_reset(&p->event);
        p->data_seen = 0;
        p->dispatched = 0;
    }
    const char *s = *buf;
    size_t n = *len;
    while (n > 0) {
        if (p->skip_lf) {
            p->skip_lf = 0;
            if (*s == '\n') {
                s++;
                n--;
                continue;
            }
        }
        /* Take the run up to the next line end in one append. */
        size_t i = 0;
        while (i < n && s[i] != '\n' && s[i] != '\r')
            i++;
        if (i > 0 && gw_buf_append(&p->line, s, i) != GW_OK) {
            *buf = s + i;
            *len = n - i;
            return GW_ELIMIT;
        }
        if (i == n) {
            s += i;
            n = 0;
            break;
        }
        p->skip_lf = s[i] == '\r';
        s += i + 1;
        n -= i + 1;
        int err = 0;
        int got = process_line(p, ev, &err);
        gw_buf_reset(&p->line);
        if (err) {
            *buf = s;
            *len = n;
            return GW_ELIMIT;
        }
        if (got) {
            *buf = s;
            *len = n;
            return GW_OK;
        }
    }
    *buf = s;
    *len = n;
    return GW_EAGAIN;
}
