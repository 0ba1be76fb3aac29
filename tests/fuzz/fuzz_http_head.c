/*
 * libFuzzer target for the HTTP/1.1 request head parser of common/gw_http.c
 * (head_bytes_ok, parse_head, content_length: statics, reached by including
 * the .c as the unit tests do). The input is what a client sends on one
 * connection; the target frames it as read_head and read_body do, without
 * a socket: each head up to the first blank line (blank lines before a
 * request skipped), its body skipped by its Content-Length, until a
 * request is refused or the input ends. Each head sits in a heap block of
 * exactly its size (plus the NUL read_head adds), so AddressSanitizer sees
 * any read past it. Checked for every head the parser accepts:
 *  - the request line is the method, the target (path, '?', query) and the
 *    version as sent, split at its two spaces: a method of token bytes,
 *    a target of visible ASCII, HTTP/1.1 or HTTP/1.0;
 *  - the headers are the head's lines, in order, at most MAX_HEADERS: each
 *    a non-empty token name, a colon, and the value as sent without the
 *    whitespace around it; no value holds CR, LF, NUL or another control
 *    byte but HTAB; gw_http_req_header finds the first of a name, in any
 *    case;
 *  - keep-alive as the version and the Connection header say;
 *  - content_length as a plain reading of RFC 9110's rule (digits only,
 *    every copy equal, at most 18 digits) gives it.
 * A refused head is refused with 400, 431 or 505 and a reason; a head with
 * a bare CR or LF, or a control byte, never reaches parse_head.
 */
#include "fuzz.h"
#include "gw_http.c"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_REQUESTS 32 /* heads parsed per input */

static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && memchr("!#$%&'*+-.^_`|~", c, 15));
}

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

/* Content-Length read plainly: -2 absent, -1 invalid or copies unequal. */
static long long ref_content_length(const struct gw_http_req *r)
{
    long long cl = -2;
    for (size_t i = 0; i < r->nhdrs; i++) {
        if (strcasecmp(r->hdrs[i].name, "Content-Length") != 0)
            continue;
        const char *v = r->hdrs[i].value;
        size_t n = strlen(v);
        if (n == 0 || n > 18 || strspn(v, "0123456789") != n)
            return -1;
        long long x = strtoll(v, NULL, 10);
        if (cl != -2 && x != cl)
            return -1;
        cl = x;
    }
    return cl;
}

/* Checks an accepted head: orig is the head as sent (its request line
 * first, ending in the blank line), r what parse_head made of it. */
static void check_accepted(const char *orig, const struct gw_http_req *r)
{
    /* The request line. */
    const char *eol = strstr(orig, "\r\n");
    CHECK(eol != NULL);
    size_t ml = strlen(r->method), pl = strlen(r->path), ql = strlen(r->query);
    CHECK(ml > 0);
    for (size_t i = 0; i < ml; i++)
        CHECK(tchar((unsigned char)r->method[i]));
    CHECK(memcmp(orig, r->method, ml) == 0 && orig[ml] == ' ');
    const char *t = orig + ml + 1;
    CHECK(memcmp(t, r->path, pl) == 0);
    CHECK(!strchr(r->path, '?'));
    const char *after = t + pl;
    if (*after == '?') {
        CHECK(memcmp(after + 1, r->query, ql) == 0);
        after += 1 + ql;
    } else {
        CHECK(ql == 0);
    }
    for (const char *p = t; p < after; p++)
        CHECK(*p >= 0x21 && *p <= 0x7e);
    CHECK(after > t); /* a target of at least one byte */
    CHECK(*after == ' ');
    const char *ver = after + 1;
    size_t vl = (size_t)(eol - ver);
    int http11 = vl == 8 && memcmp(ver, "HTTP/1.1", 8) == 0;
    CHECK(http11 || (vl == 8 && memcmp(ver, "HTTP/1.0", 8) == 0));
    CHECK(r->http10 == !http11);
    CHECK(r->head_only == (strcmp(r->method, "HEAD") == 0));

    /* The headers, line by line. */
    size_t i = 0;
    for (const char *line = eol + 2; !(line[0] == '\r' && line[1] == '\n'); i++) {
        const char *end = strstr(line, "\r\n");
        CHECK(end != NULL && i < r->nhdrs);
        const char *name = r->hdrs[i].name, *value = r->hdrs[i].value;
        size_t nl = strlen(name), vn = strlen(value);
        CHECK(nl > 0);
        for (size_t j = 0; j < nl; j++)
            CHECK(tchar((unsigned char)name[j]));
        CHECK(memcmp(line, name, nl) == 0 && line[nl] == ':');
        const char *v = line + nl + 1, *ve = end;
        while (v < ve && ows(*v))
            v++;
        while (ve > v && ows(ve[-1]))
            ve--;
        CHECK((size_t)(ve - v) == vn && memcmp(v, value, vn) == 0);
        for (size_t j = 0; j < vn; j++)
            CHECK((unsigned char)value[j] >= 0x20 ? value[j] != 0x7f : value[j] == '\t');
        CHECK(vn == 0 || (!ows(value[0]) && !ows(value[vn - 1])));
        /* The first header of the name, in any case. */
        const char *first = NULL;
        for (size_t j = 0; j < r->nhdrs && !first; j++)
            if (strcasecmp(r->hdrs[j].name, name) == 0)
                first = r->hdrs[j].value;
        CHECK(gw_http_req_header(r, name) == first);
        line = end + 2;
    }
    CHECK(i == r->nhdrs && r->nhdrs <= MAX_HEADERS);

    const char *conn = gw_http_req_header(r, "Connection");
    int ka = http11;
    if (conn && strcasestr(conn, "close"))
        ka = 0;
    else if (conn && !http11 && strcasestr(conn, "keep-alive"))
        ka = 1;
    CHECK(r->keepalive == ka);
    CHECK(content_length(r) == ref_content_length(r));
}

/* A request head and what follows: returns the bytes it took (head and
 * body), 0 when the input ends before the head does or the request is
 * refused (the connection would close). */
static size_t one_request(const uint8_t *data, size_t size)
{
    const uint8_t *end = memmem(data, size, "\r\n\r\n", 4);
    if (!end)
        return 0; /* read_head waits for more, or refuses past max_header_bytes */
    size_t hlen = (size_t)(end - data) + 4;
    char *head = malloc(hlen + 1);
    char *orig = malloc(hlen + 1);
    CHECK(head && orig);
    memcpy(head, data, hlen);
    head[hlen] = '\0';
    char *start = head;
    while (start[0] == '\r' && start[1] == '\n')
        start += 2;
    size_t took = hlen;
    if (!*start)
        goto out; /* only blank lines: read_head reads on */
    size_t n = hlen - (size_t)(start - head);
    memcpy(orig, start, n + 1);
    /* Refused exactly when a CR is not followed by LF, an LF not preceded
     * by CR, or a control byte other than HTAB appears. */
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)start[i];
        int lone_cr = c == '\r' && start[i + 1] != '\n';
        int lone_lf = c == '\n' && (i == 0 || start[i - 1] != '\r');
        bad |= lone_cr || lone_lf || (c < 0x20 && c != '\t' && c != '\r' && c != '\n') || c == 0x7f;
    }
    int bytes_ok = head_bytes_ok(start, n);
    CHECK(bytes_ok == !bad);
    if (!bytes_ok) {
        took = 0;
        goto out;
    }
    struct gw_http_req r;
    memset(&r, 0, sizeof(r));
    r.keepalive = 1; /* as req_new leaves it */
    const char *why = NULL;
    int st = parse_head(&r, start, &why);
    if (st) {
        CHECK(st == 400 || st == 431 || st == 505);
        CHECK(why != NULL && *why);
        took = 0;
        goto out;
    }
    check_accepted(orig, &r);
    long long cl = content_length(&r);
    if (gw_http_req_header(&r, "transfer-encoding") || cl == -1) {
        took = 0; /* refused: 411, 400 */
        goto out;
    }
    if (cl > 0) {
        if ((unsigned long long)cl > size - hlen) {
            took = 0; /* the body is still to come */
            goto out;
        }
        took += (size_t)cl;
    }
out:
    free(head);
    free(orig);
    return took;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int i = 0; i < MAX_REQUESTS && size > 0; i++) {
        size_t took = one_request(data, size);
        if (!took)
            break;
        data += took;
        size -= took;
    }
    return 0;
}
