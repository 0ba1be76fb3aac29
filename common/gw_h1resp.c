#include "gw_h1resp.h"

#include <string.h>
#include <strings.h>

#include "gw_codec.h"
#include "gw_error.h"

#define MAX_CHUNK_LINE 4096 /* a chunk size line with its extensions, a trailer line */
#define MAX_CHUNK ((uint64_t)1 << 60)

size_t gw_h1_head_end(const char *buf, size_t n)
{
    const char *p = buf, *end = buf + n;
    while ((p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        p++;
        if (p < end && *p == '\n')
            return (size_t)(p + 1 - buf);
        if (p + 1 < end && p[0] == '\r' && p[1] == '\n')
            return (size_t)(p + 2 - buf);
    }
    return 0;
}

static int tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && memchr("!#$%&'*+-.^_`|~", c, 15));
}

static int ows(char c)
{
    return c == ' ' || c == '\t';
}

/* The value of a header line (after the colon) without the whitespace
 * around it and the line ending. */
static void trim(const char **v, size_t *vl)
{
    while (*vl && ows(**v)) {
        (*v)++;
        (*vl)--;
    }
    while (*vl && ((*v)[*vl - 1] == '\r' || (*v)[*vl - 1] == '\n' || ows((*v)[*vl - 1])))
        (*vl)--;
}

/* Whether the comma-separated list v holds token tok (any case). */
static int list_has(const char *v, size_t vl, const char *tok)
{
    size_t tl = strlen(tok);
    size_t i = 0;
    while (i < vl) {
        size_t j = i;
        while (j < vl && v[j] != ',')
            j++;
        const char *e = v + i;
        size_t el = j - i;
        trim(&e, &el);
        if (el == tl && strncasecmp(e, tok, tl) == 0)
            return 1;
        i = j + 1;
    }
    return 0;
}

/* The last element of the comma-separated list v. */
static void list_last(const char *v, size_t vl, const char **e, size_t *el)
{
    size_t i = vl;
    while (i && v[i - 1] != ',')
        i--;
    *e = v + i;
    *el = vl - i;
    trim(e, el);
}

static int status_line(const char *l, size_t n, int *status, int *minor)
{
    /* HTTP/1.x SP 3DIGIT [SP reason] */
    if (n < 12 || memcmp(l, "HTTP/1.", 7) != 0 || (l[7] != '0' && l[7] != '1') || l[8] != ' ')
        return GW_EINVAL;
    for (int i = 9; i < 12; i++)
        if (l[i] < '0' || l[i] > '9')
            return GW_EINVAL;
    if (n > 12 && l[12] != ' ' && l[12] != '\r' && l[12] != '\n')
        return GW_EINVAL;
    *status = (l[9] - '0') * 100 + (l[10] - '0') * 10 + (l[11] - '0');
    *minor = l[7] - '0';
    return *status >= 100 ? GW_OK : GW_EINVAL;
}

int gw_h1_parse_head(const char *buf, size_t n, struct gw_h1_head *h, gw_h1_line_cb line_cb,
                     void *arg, const char **why)
{
    memset(h, 0, sizeof(*h));
    h->head_len = n;
    const char *end = buf + n;
    const char *nl = memchr(buf, '\n', n);
    int minor = 0;
    if (!nl || status_line(buf, (size_t)(nl + 1 - buf), &h->status, &minor) != GW_OK) {
        *why = "the status line is not HTTP/1.x NNN";
        return GW_EINVAL;
    }
    int have_cl = 0, have_te = 0, chunked = 0, conn_close = 0, conn_keep = 0;
    uint64_t cl = 0;
    for (const char *l = nl + 1; l < end;) {
        const char *le = memchr(l, '\n', (size_t)(end - l));
        if (!le) {
            *why = "the head does not end with a blank line";
            return GW_EINVAL;
        }
        size_t ll = (size_t)(le + 1 - l);
        if (ll == 1 || (ll == 2 && l[0] == '\r'))
            break; /* the blank line */
        if (ows(l[0])) {
            *why = "a header line is folded (obsolete line folding)";
            return GW_EINVAL;
        }
        size_t nlen = 0;
        while (nlen < ll && tchar((unsigned char)l[nlen]))
            nlen++;
        if (nlen == 0 || l[nlen] != ':') {
            *why = "a header line is not a name, a colon and a value";
            return GW_EINVAL;
        }
        const char *v = l + nlen + 1;
        size_t vl = ll - nlen - 1;
        trim(&v, &vl);
        for (size_t i = 0; i < vl; i++) {
            unsigned char c = (unsigned char)v[i];
            if ((c < 0x20 && c != '\t') || c == 0x7f) {
                *why = "a header value holds a control byte";
                return GW_EINVAL;
            }
        }
        if (nlen == 14 && strncasecmp(l, "Content-Length", 14) == 0) {
            uint64_t x = 0;
            if (vl == 0 || vl > 18) {
                *why = "Content-Length is not a number of bytes";
                return GW_EINVAL;
            }
            for (size_t i = 0; i < vl; i++) {
                if (v[i] < '0' || v[i] > '9') {
                    *why = "Content-Length is not a number of bytes";
                    return GW_EINVAL;
                }
                x = x * 10 + (uint64_t)(v[i] - '0');
            }
            if (have_cl && x != cl) {
                *why = "Content-Length is given twice, differently";
                return GW_EINVAL;
            }
            have_cl = 1;
            cl = x;
        } else if (nlen == 17 && strncasecmp(l, "Transfer-Encoding", 17) == 0) {
            const char *e;
            size_t el;
            list_last(v, vl, &e, &el);
            have_te = 1;
            chunked = el == 7 && strncasecmp(e, "chunked", 7) == 0;
        } else if (nlen == 10 && strncasecmp(l, "Connection", 10) == 0) {
            conn_close |= list_has(v, vl, "close");
            conn_keep |= list_has(v, vl, "keep-alive");
        }
        l = le + 1;
    }
    h->keep_alive = !conn_close && (minor == 1 || conn_keep);
    if (h->status < 200 || h->status == 204 || h->status == 304) {
        h->framing = GW_H1_EMPTY;
    } else if (have_te) {
        /* Transfer-Encoding overrides Content-Length (RFC 9112 6.3); a
         * coding other than chunked last is delimited by the close. */
        h->framing = chunked ? GW_H1_CHUNKED : GW_H1_CLOSE;
        if (!chunked || have_cl)
            h->keep_alive = 0; /* both framings given: not reused (RFC 9112 6.3) */
    } else if (have_cl) {
        h->framing = GW_H1_LENGTH;
        h->length = cl;
    } else {
        h->framing = GW_H1_CLOSE;
        h->keep_alive = 0;
    }
    if (line_cb) {
        for (const char *l = buf; l < end;) {
            const char *le = memchr(l, '\n', (size_t)(end - l));
            size_t ll = (size_t)(le + 1 - l);
            line_cb(l, ll, arg);
            l = le + 1;
        }
    }
    return GW_OK;
}

enum {
    C_SIZE,     /* hex digits of a chunk size */
    C_EXT,      /* a chunk extension, up to the LF */
    C_SIZE_LF,  /* the LF after the size line's CR */
    C_DATA,     /* chunk data */
    C_DATA_CR,  /* the CR (or bare LF) after chunk data */
    C_DATA_LF,  /* the LF after it */
    C_TRAILER0, /* the start of a trailer line or of the final blank line */
    C_TRAILER,  /* inside a trailer line */
    C_END_LF,   /* the LF of the final blank line */
};

/* The size line ended (its LF consumed). */
static int size_line_over(struct gw_h1_chunked *c)
{
    c->line = 0;
    c->state = c->left ? C_DATA : C_TRAILER0;
    return GW_OK;
}

long gw_h1_chunked_feed(struct gw_h1_chunked *c, const char *in, size_t n, const char **data,
                        size_t *dlen)
{
    *dlen = 0;
    *data = NULL;
    size_t i = 0;
    while (i < n && !c->done) {
        char ch = in[i];
        switch (c->state) {
        case C_SIZE: {
            int v = gw_hex_digit((unsigned char)ch);
            if (v >= 0) {
                if (c->left >= MAX_CHUNK >> 4)
                    return GW_EINVAL;
                c->left = (c->left << 4) | (uint64_t)v;
                c->line++;
                i++;
                break;
            }
            if (c->line == 0)
                return GW_EINVAL; /* no digit */
            if (ch == ';' || ows(ch)) {
                c->state = C_EXT;
            } else if (ch == '\r') {
                c->state = C_SIZE_LF;
            } else if (ch == '\n') {
                size_line_over(c);
            } else {
                return GW_EINVAL;
            }
            i++;
            break;
        }
        case C_EXT:
            if (++c->line > MAX_CHUNK_LINE)
                return GW_EINVAL;
            if (ch == '\n')
                size_line_over(c);
            i++;
            break;
        case C_SIZE_LF:
            if (ch != '\n')
                return GW_EINVAL;
            size_line_over(c);
            i++;
            break;
        case C_DATA: {
            size_t take = n - i;
            if ((uint64_t)take > c->left)
                take = (size_t)c->left;
            c->left -= take;
            if (!c->left)
                c->state = C_DATA_CR;
            *data = in + i;
            *dlen = take;
            return (long)(i + take);
        }
        case C_DATA_CR:
            if (ch == '\r')
                c->state = C_DATA_LF;
            else if (ch == '\n')
                c->state = C_SIZE;
            else
                return GW_EINVAL;
            i++;
            break;
        case C_DATA_LF:
            if (ch != '\n')
                return GW_EINVAL;
            c->state = C_SIZE;
            i++;
            break;
        case C_TRAILER0:
            if (ch == '\r') {
                c->state = C_END_LF;
            } else if (ch == '\n') {
                c->done = 1;
            } else {
                c->state = C_TRAILER;
                c->line = 1;
            }
            i++;
            break;
        case C_TRAILER:
            if (++c->line > MAX_CHUNK_LINE)
                return GW_EINVAL;
            if (ch == '\n')
                c->state = C_TRAILER0;
            i++;
            break;
        case C_END_LF:
            if (ch != '\n')
                return GW_EINVAL;
            c->done = 1;
            i++;
            break;
        default:
            return GW_EINVAL;
        }
    }
    return (long)i;
}
