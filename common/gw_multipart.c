#include "gw_multipart.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_rand.h"

#define MAX_PADDING 256

enum mp_state {
    S_PREAMBLE,    /* looking for the first delimiter; bytes dropped */
    S_AFTER_DELIM, /* a delimiter matched: "--", padding or CRLF next */
    S_DASH2,       /* one '-' after the delimiter */
    S_PAD,         /* transport padding */
    S_LF,          /* the CR of the boundary line was read */
    S_HEADERS,     /* a part's head, line by line */
    S_DATA,        /* a part's bytes, looking for the delimiter */
    S_EPILOGUE,    /* after the close delimiter */
};

struct gw_mp {
    struct gw_mp_limits lim;
    struct gw_mp_cbs cbs;
    char delim[5 + GW_MP_MAX_BOUNDARY]; /* CRLF "--" boundary */
    size_t dlen;
    enum mp_state state;
    size_t match; /* bytes of delim matched so far (held back, not handed out) */
    size_t pad;
    size_t nparts; /* parts begun */
    int rc;        /* sticky: the first error */
    struct gw_mp_err err;
    /* the part's head */
    struct gw_buf line;
    size_t head_bytes;
    struct gw_buf name, filename, ctype;
    int has_cd, has_ct, has_name, has_filename;
    /* the part's data */
    size_t part_bytes, part_limit;
    size_t epilogue;
    /* absolute offsets in the body (for gw_mp_parse_all) */
    size_t pos; /* bytes fed before the current piece */
    size_t data_start, data_end;
};

static const struct gw_mp_limits defaults = {64, 8u << 10, 64u << 10, 25u << 20};

static int fail(struct gw_mp *m, int status, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int fail(struct gw_mp *m, int status, const char *field, const char *fmt, ...)
{
    m->rc = GW_EINVAL;
    m->err.status = status;
    snprintf(m->err.field, sizeof m->err.field, "%s", field ? field : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err.message, sizeof m->err.message, fmt, ap);
    va_end(ap);
    return m->rc;
}

static int stop(struct gw_mp *m)
{
    m->rc = GW_ECLOSED;
    m->err.status = 400;
    m->err.field[0] = '\0';
    snprintf(m->err.message, sizeof m->err.message, "stopped");
    return m->rc;
}

/* The part's name for an error, "" before it is known. */
static const char *part_name(const struct gw_mp *m)
{
    return m->has_name && m->name.data ? m->name.data : "";
}

struct gw_mp *gw_mp_new(const char *boundary, const struct gw_mp_limits *lim,
                        const struct gw_mp_cbs *cbs)
{
    size_t bl = boundary ? strlen(boundary) : 0;
    if (bl == 0 || bl > GW_MP_MAX_BOUNDARY || strpbrk(boundary, "\r\n"))
        return NULL;
    struct gw_mp *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->lim = defaults;
    if (lim) {
        if (lim->max_parts)
            m->lim.max_parts = lim->max_parts;
        if (lim->max_header_bytes)
            m->lim.max_header_bytes = lim->max_header_bytes;
        if (lim->max_field_bytes)
            m->lim.max_field_bytes = lim->max_field_bytes;
        if (lim->max_file_bytes)
            m->lim.max_file_bytes = lim->max_file_bytes;
    }
    if (cbs)
        m->cbs = *cbs;
    memcpy(m->delim, "\r\n--", 4);
    memcpy(m->delim + 4, boundary, bl);
    m->dlen = 4 + bl;
    /* The first delimiter may open the body: as if a CRLF came before it. */
    m->state = S_PREAMBLE;
    m->match = 2;
    size_t hb = m->lim.max_header_bytes;
    gw_buf_init(&m->line, hb);
    gw_buf_init(&m->name, hb);
    gw_buf_init(&m->filename, hb);
    gw_buf_init(&m->ctype, hb);
    return m;
}

void gw_mp_free(struct gw_mp *m)
{
    if (!m)
        return;
    gw_buf_free(&m->line);
    gw_buf_free(&m->name);
    gw_buf_free(&m->filename);
    gw_buf_free(&m->ctype);
    free(m);
}

const struct gw_mp_err *gw_mp_error(const struct gw_mp *m)
{
    return &m->err;
}

static int is_tchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static int is_ows(char c)
{
    return c == ' ' || c == '\t';
}

/* A parameter value at s[*i..n): a quoted-string (unescaped into out when out
 * is not NULL) or a token. GW_OK or GW_EINVAL. */
static int param_value(const char *s, size_t n, size_t *i, struct gw_buf *out)
{
    size_t k = *i;
    if (k < n && s[k] == '"') {
        k++;
        for (;;) {
            if (k >= n)
                return GW_EINVAL; /* no closing quote */
            char c = s[k];
            if (c == '"')
                break;
            if (c == '\\') {
                if (++k >= n)
                    return GW_EINVAL;
                c = s[k];
            }
            if (out && gw_buf_append(out, &c, 1) != GW_OK)
                return GW_EINVAL;
            k++;
        }
        *i = k + 1;
        return GW_OK;
    }
    size_t start = k;
    while (k < n && is_tchar((unsigned char)s[k]))
        k++;
    if (k == start)
        return GW_EINVAL;
    if (out && gw_buf_append(out, s + start, k - start) != GW_OK)
        return GW_EINVAL;
    *i = k;
    return GW_OK;
}

/* Content-Disposition: form-data; name="..."[; filename="..."] */
static int content_disposition(struct gw_mp *m, const char *v, size_t n)
{
    size_t idx = m->nparts - 1;
    if (m->has_cd)
        return fail(m, 400, part_name(m), "part %zu has two Content-Disposition headers", idx);
    m->has_cd = 1;
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)v[i]))
        i++;
    if (i != 9 || strncasecmp(v, "form-data", 9) != 0)
        return fail(m, 400, "", "part %zu's Content-Disposition is not form-data", idx);
    for (;;) {
        while (i < n && is_ows(v[i]))
            i++;
        if (i == n)
            break;
        if (v[i] != ';')
            return fail(m, 400, "", "part %zu's Content-Disposition is malformed", idx);
        i++;
        while (i < n && is_ows(v[i]))
            i++;
        if (i == n)
            break; /* a trailing ';' */
        size_t ps = i;
        while (i < n && is_tchar((unsigned char)v[i]))
            i++;
        size_t pl = i - ps;
        while (i < n && is_ows(v[i]))
            i++;
        if (pl == 0 || i == n || v[i] != '=')
            return fail(m, 400, "", "part %zu's Content-Disposition is malformed", idx);
        i++;
        while (i < n && is_ows(v[i]))
            i++;
        struct gw_buf *out = NULL;
        int *seen = NULL;
        if (pl == 4 && strncasecmp(v + ps, "name", 4) == 0) {
            out = &m->name;
            seen = &m->has_name;
        } else if (pl == 8 && strncasecmp(v + ps, "filename", 8) == 0) {
            out = &m->filename;
            seen = &m->has_filename;
        }
        if (seen && *seen)
            return fail(m, 400, part_name(m), "part %zu's Content-Disposition has %.*s twice", idx,
                        (int)pl, v + ps);
        if (param_value(v, n, &i, out) != GW_OK)
            return fail(m, 400, "", "part %zu's Content-Disposition is malformed", idx);
        if (seen)
            *seen = 1;
    }
    if (!m->has_name || m->name.len == 0)
        return fail(m, 400, "", "part %zu has no name (Content-Disposition: form-data; name=...)",
                    idx);
    if (memchr(m->name.data, '\0', m->name.len) ||
        (m->has_filename && m->filename.len && memchr(m->filename.data, '\0', m->filename.len)))
        return fail(m, 400, "", "part %zu's name or filename holds a NUL byte", idx);
    return GW_OK;
}

static int end_of_head(struct gw_mp *m)
{
    size_t idx = m->nparts - 1;
    if (!m->has_cd)
        return fail(m, 400, "", "part %zu has no Content-Disposition header (form-data; name=...)",
                    idx);
    m->part_limit = m->has_filename ? m->lim.max_file_bytes : m->lim.max_field_bytes;
    m->part_bytes = 0;
    m->state = S_DATA;
    m->match = 0;
    if (m->cbs.on_part) {
        struct gw_mp_part p = {
            .name = m->name.data,
            .filename = m->has_filename ? (m->filename.data ? m->filename.data : "") : NULL,
            .content_type = m->has_ct ? (m->ctype.data ? m->ctype.data : "") : NULL,
            .index = idx,
        };
        if (m->cbs.on_part(&p, m->cbs.arg))
            return stop(m);
    }
    return GW_OK;
}

/* One complete line of a part's head (in m->line, with its LF). */
static int head_line(struct gw_mp *m)
{
    const char *s = m->line.data;
    size_t n = m->line.len;
    size_t idx = m->nparts - 1;
    if (n < 2 || s[n - 2] != '\r')
        return fail(m, 400, part_name(m),
                    "part %zu's head has a line ending in a bare LF (lines end in CRLF)", idx);
    n -= 2;
    if (n == 0) {
        gw_buf_reset(&m->line);
        return end_of_head(m);
    }
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)s[k];
        if ((c < 0x20 && c != '\t') || c == 0x7f)
            return fail(m, 400, part_name(m), "part %zu's head holds a control character", idx);
    }
    if (is_ows(s[0]))
        return fail(m, 400, part_name(m), "part %zu's head has a folded line", idx);
    const char *colon = memchr(s, ':', n);
    size_t nl = colon ? (size_t)(colon - s) : 0;
    for (size_t k = 0; k < nl; k++)
        if (!is_tchar((unsigned char)s[k]))
            nl = 0;
    if (nl == 0)
        return fail(m, 400, part_name(m), "part %zu's head has a line that is not a header", idx);
    const char *v = colon + 1;
    size_t vl = n - nl - 1;
    while (vl && is_ows(*v)) {
        v++;
        vl--;
    }
    while (vl && is_ows(v[vl - 1]))
        vl--;
    int rc = GW_OK;
    if (nl == 19 && strncasecmp(s, "content-disposition", 19) == 0) {
        rc = content_disposition(m, v, vl);
    } else if (nl == 12 && strncasecmp(s, "content-type", 12) == 0) {
        if (m->has_ct)
            return fail(m, 400, part_name(m), "part %zu has two Content-Type headers", idx);
        m->has_ct = 1;
        if (gw_buf_append(&m->ctype, v, vl) != GW_OK)
            return fail(m, 413, part_name(m), "part %zu's head is larger than %zu bytes", idx,
                        m->lim.max_header_bytes);
    }
    gw_buf_reset(&m->line);
    return rc;
}

/* A new part begins (its boundary line was read). */
static int begin_part(struct gw_mp *m)
{
    if (m->nparts >= m->lim.max_parts)
        return fail(m, 400, "body", "more than %zu parts", m->lim.max_parts);
    m->nparts++;
    m->state = S_HEADERS;
    m->head_bytes = 0;
    gw_buf_reset(&m->line);
    gw_buf_reset(&m->name);
    gw_buf_reset(&m->filename);
    gw_buf_reset(&m->ctype);
    m->has_cd = m->has_ct = m->has_name = m->has_filename = 0;
    return GW_OK;
}

static int emit(struct gw_mp *m, const char *p, size_t n)
{
    if (!n)
        return GW_OK;
    if (n > m->part_limit - m->part_bytes) {
        if (m->has_filename)
            return fail(m, 413, part_name(m), "the file in part \"%s\" is larger than %zu bytes",
                        part_name(m), m->part_limit);
        return fail(m, 413, part_name(m), "the field \"%s\" is larger than %zu bytes", part_name(m),
                    m->part_limit);
    }
    m->part_bytes += n;
    if (m->cbs.on_data && m->cbs.on_data(p, n, m->cbs.arg))
        return stop(m);
    return GW_OK;
}

static int bad_boundary_line(struct gw_mp *m, char c)
{
    if (c == '\n')
        return fail(m, 400, "body", "a boundary line ends in a bare LF (lines end in CRLF)");
    return fail(m, 400, "body",
                "a boundary line has other characters after the boundary (the boundary must "
                "not occur in the content)");
}

int gw_mp_feed(struct gw_mp *m, const char *buf, size_t len)
{
    if (m->rc)
        return m->rc;
    size_t i = 0;
    int rc = GW_OK;
    while (i < len) {
        char c = buf[i];
        switch (m->state) {
        case S_PREAMBLE:
        case S_DATA: {
            int data = m->state == S_DATA;
            if (m->match == 0) {
                const char *cr = memchr(buf + i, '\r', len - i);
                size_t end = cr ? (size_t)(cr - buf) : len;
                if (data && (rc = emit(m, buf + i, end - i)) != GW_OK)
                    return rc;
                i = end;
                if (cr) {
                    m->match = 1;
                    i++;
                }
                break;
            }
            if (c != m->delim[m->match]) {
                /* The held bytes are the delimiter's own; none but the
                 * first is a CR, so no delimiter starts inside them. */
                if (data && (rc = emit(m, m->delim, m->match)) != GW_OK)
                    return rc;
                m->match = 0;
                break; /* c is looked at again */
            }
            i++;
            if (++m->match < m->dlen)
                break;
            m->match = 0;
            m->state = S_AFTER_DELIM;
            if (data) {
                m->data_end = m->pos + i - m->dlen;
                if (m->cbs.on_part_end && m->cbs.on_part_end(m->cbs.arg))
                    return stop(m);
            }
            break;
        }
        case S_AFTER_DELIM:
            i++;
            if (c == '-')
                m->state = S_DASH2;
            else if (is_ows(c)) {
                m->state = S_PAD;
                m->pad = 1;
            } else if (c == '\r')
                m->state = S_LF;
            else
                return bad_boundary_line(m, c);
            break;
        case S_DASH2:
            i++;
            if (c != '-')
                return bad_boundary_line(m, c);
            if (m->nparts == 0)
                return fail(m, 400, "body", "the multipart body has no parts");
            m->state = S_EPILOGUE;
            m->epilogue = 0;
            break;
        case S_PAD:
            i++;
            if (is_ows(c)) {
                if (++m->pad > MAX_PADDING)
                    return fail(m, 400, "body", "a boundary line has too many trailing spaces");
            } else if (c == '\r') {
                m->state = S_LF;
            } else {
                return bad_boundary_line(m, c);
            }
            break;
        case S_LF:
            i++;
            if (c != '\n')
                return fail(m, 400, "body", "a boundary line ends in a bare CR");
            if ((rc = begin_part(m)) != GW_OK)
                return rc;
            break;
        case S_HEADERS: {
            const char *lf = memchr(buf + i, '\n', len - i);
            size_t end = lf ? (size_t)(lf - buf) + 1 : len;
            size_t n = end - i;
            if (n > m->lim.max_header_bytes - m->head_bytes)
                return fail(m, 413, part_name(m), "part %zu's head is larger than %zu bytes",
                            m->nparts - 1, m->lim.max_header_bytes);
            m->head_bytes += n;
            if (gw_buf_append(&m->line, buf + i, n) != GW_OK)
                return fail(m, 413, part_name(m), "part %zu's head is larger than %zu bytes",
                            m->nparts - 1, m->lim.max_header_bytes);
            i = end;
            if (lf) {
                if ((rc = head_line(m)) != GW_OK)
                    return rc;
                if (m->state == S_DATA)
                    m->data_start = m->pos + i;
            }
            break;
        }
        case S_EPILOGUE:
            if (len - i > GW_MP_MAX_EPILOGUE - m->epilogue)
                return fail(m, 400, "body", "more than %d bytes after the closing boundary",
                            GW_MP_MAX_EPILOGUE);
            m->epilogue += len - i;
            i = len;
            break;
        }
    }
    m->pos += len;
    return GW_OK;
}

int gw_mp_finish(struct gw_mp *m)
{
    if (m->rc)
        return m->rc;
    if (m->state == S_EPILOGUE)
        return GW_OK;
    if (m->nparts == 0)
        return fail(m, 400, "body", "the multipart body has no parts (no line \"--%s\")",
                    m->delim + 4);
    return fail(m, 400, "body", "the multipart body is truncated: no closing boundary");
}

/* ---- the Content-Type's boundary ---- */

static int ct_fail(struct gw_mp_err *err, const char *msg)
{
    if (err) {
        err->status = 400;
        snprintf(err->field, sizeof err->field, "content-type");
        snprintf(err->message, sizeof err->message, "%s", msg);
    }
    return GW_EINVAL;
}

static int is_bchar(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
        return 1;
    return c && strchr("'()+_,-./:=? ", c) != NULL;
}

int gw_mp_boundary(const char *ct, char *out, size_t outlen, struct gw_mp_err *err)
{
    static const char want[] = "multipart/form-data";
    const char *notmp = "the Content-Type is not multipart/form-data";
    const char *bad = "the Content-Type's boundary is malformed (1 to 70 characters of RFC 2046)";
    if (!ct)
        return ct_fail(err, notmp);
    size_t n = strlen(ct), i = 0;
    while (i < n && is_ows(ct[i]))
        i++;
    if (n - i < sizeof want - 1 || strncasecmp(ct + i, want, sizeof want - 1) != 0)
        return ct_fail(err, notmp);
    i += sizeof want - 1;
    if (i < n && !is_ows(ct[i]) && ct[i] != ';')
        return ct_fail(err, notmp);
    int found = 0;
    size_t blen = 0;
    char b[GW_MP_MAX_BOUNDARY + 1];
    for (;;) {
        while (i < n && is_ows(ct[i]))
            i++;
        if (i == n)
            break;
        if (ct[i] != ';')
            return ct_fail(err, "the Content-Type's parameters are malformed");
        i++;
        while (i < n && is_ows(ct[i]))
            i++;
        if (i == n)
            break;
        size_t ps = i;
        while (i < n && is_tchar((unsigned char)ct[i]))
            i++;
        size_t pl = i - ps;
        while (i < n && is_ows(ct[i]))
            i++;
        if (pl == 0 || i == n || ct[i] != '=')
            return ct_fail(err, "the Content-Type's parameters are malformed");
        i++;
        while (i < n && is_ows(ct[i]))
            i++;
        int is_b = pl == 8 && strncasecmp(ct + ps, "boundary", 8) == 0;
        if (is_b && found)
            return ct_fail(err, "the Content-Type has two boundary parameters");
        if (i < n && ct[i] == '"') {
            i++;
            size_t k = 0;
            for (;;) {
                if (i >= n)
                    return ct_fail(err, "the Content-Type's parameters are malformed");
                char c = ct[i++];
                if (c == '"')
                    break;
                if (c == '\\') {
                    if (i >= n)
                        return ct_fail(err, "the Content-Type's parameters are malformed");
                    c = ct[i++];
                }
                if (is_b) {
                    if (k >= GW_MP_MAX_BOUNDARY)
                        return ct_fail(err, bad);
                    b[k++] = c;
                }
            }
            if (is_b)
                blen = k;
        } else {
            size_t vs = i;
            while (i < n && ct[i] != ';' && !is_ows(ct[i]))
                i++;
            if (i == vs)
                return ct_fail(err, "the Content-Type's parameters are malformed");
            if (is_b) {
                if (i - vs > GW_MP_MAX_BOUNDARY)
                    return ct_fail(err, bad);
                memcpy(b, ct + vs, i - vs);
                blen = i - vs;
            }
        }
        if (is_b)
            found = 1;
    }
    if (!found)
        return ct_fail(err, "the Content-Type multipart/form-data has no boundary");
    if (blen == 0 || b[blen - 1] == ' ')
        return ct_fail(err, bad);
    for (size_t k = 0; k < blen; k++)
        if (!is_bchar((unsigned char)b[k]))
            return ct_fail(err, bad);
    if (!out || outlen <= blen)
        return ct_fail(err, "the Content-Type's boundary is too long");
    memcpy(out, b, blen);
    out[blen] = '\0';
    return GW_OK;
}

/* ---- the whole-body convenience ---- */

struct parse_all {
    struct gw_mp *m;
    const char *body;
    struct gw_mp_span *parts;
    size_t n;
    size_t seen; /* the current part's bytes handed out */
    struct gw_mp_err err;
};

static int pa_copy(struct parse_all *pa, char *dst, size_t cap, const char *src, const char *what,
                   const char *name)
{
    size_t l = strlen(src);
    if (l >= cap) {
        pa->err.status = 400;
        snprintf(pa->err.field, sizeof pa->err.field, "%s", name);
        snprintf(pa->err.message, sizeof pa->err.message, "part %zu's %s is longer than %zu bytes",
                 pa->n, what, cap - 1);
        return 1;
    }
    memcpy(dst, src, l + 1);
    return 0;
}

static int pa_part(const struct gw_mp_part *p, void *arg)
{
    struct parse_all *pa = arg;
    struct gw_mp_span *s = &pa->parts[pa->n];
    memset(s, 0, sizeof *s);
    if (pa_copy(pa, s->name, sizeof s->name, p->name, "name", p->name) ||
        (p->filename &&
         pa_copy(pa, s->filename, sizeof s->filename, p->filename, "filename", p->name)) ||
        (p->content_type && pa_copy(pa, s->content_type, sizeof s->content_type, p->content_type,
                                    "content type", p->name)))
        return 1;
    s->has_filename = p->filename != NULL;
    pa->seen = 0;
    return 0;
}

static int pa_data(const char *buf, size_t len, void *arg)
{
    (void)buf;
    ((struct parse_all *)arg)->seen += len;
    return 0;
}

static int pa_end(void *arg)
{
    struct parse_all *pa = arg;
    struct gw_mp_span *s = &pa->parts[pa->n++];
    s->data = pa->body + pa->m->data_start;
    s->len = pa->m->data_end - pa->m->data_start;
    if (s->len != pa->seen) { /* cannot happen: the spans are what was handed out */
        pa->err.status = 400;
        snprintf(pa->err.message, sizeof pa->err.message, "internal: part length mismatch");
        return 1;
    }
    return 0;
}

int gw_mp_parse_all(const char *body, size_t len, const char *boundary,
                    const struct gw_mp_limits *lim, struct gw_mp_span *parts, size_t max, size_t *n,
                    struct gw_mp_err *err)
{
    struct parse_all pa = {.body = body, .parts = parts};
    struct gw_mp_cbs cbs = {pa_part, pa_data, pa_end, &pa};
    *n = 0;
    struct gw_mp *m = gw_mp_new(boundary, lim, &cbs);
    if (!m) {
        if (err) {
            err->status = 400;
            snprintf(err->field, sizeof err->field, "content-type");
            snprintf(err->message, sizeof err->message,
                     "the boundary is not 1 to 70 characters without CR or LF");
        }
        return GW_EINVAL;
    }
    pa.m = m;
    if (m->lim.max_parts > max)
        m->lim.max_parts = max;
    int rc = gw_mp_feed(m, body ? body : "", len);
    if (rc == GW_OK)
        rc = gw_mp_finish(m);
    if (rc != GW_OK && err)
        *err = rc == GW_ECLOSED ? pa.err : m->err;
    *n = pa.n;
    gw_mp_free(m);
    return rc == GW_OK ? GW_OK : GW_EINVAL;
}

/* ---- the writer ---- */

void gw_mp_new_boundary(char out[41])
{
    unsigned char r[16];
    if (gw_random_bytes(r, sizeof r) != GW_OK) {
        /* No randomness: a boundary unlikely to be in the content still. */
        static _Atomic uint64_t counter;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t x = ((uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^
                      ((uint64_t)getpid() << 32) ^ ++counter * 0x9e3779b97f4a7c15ull) |
                     1;
        for (size_t k = 0; k < sizeof r; k++)
            r[k] = (unsigned char)(gw_rand_next(&x) >> 56);
    }
    memcpy(out, "llmgw-", 6);
    gw_hex_encode(r, sizeof r, out + 6);
}

static int put_quoted(struct gw_buf *b, const char *s)
{
    int rc = gw_buf_append(b, "\"", 1);
    for (const char *p = s; rc == GW_OK && *p; p++) {
        if (*p == '\r' || *p == '\n')
            return GW_EINVAL;
        if (*p == '"' || *p == '\\')
            rc = gw_buf_append(b, "\\", 1);
        if (rc == GW_OK)
            rc = gw_buf_append(b, p, 1);
    }
    if (rc == GW_OK)
        rc = gw_buf_append(b, "\"", 1);
    return rc;
}

static int holds_delimiter(const char *boundary, const char *data, size_t len)
{
    char d[5 + GW_MP_MAX_BOUNDARY];
    size_t bl = strlen(boundary);
    if (bl > GW_MP_MAX_BOUNDARY)
        return 1;
    memcpy(d, "\r\n--", 4);
    memcpy(d + 4, boundary, bl);
    return len && memmem(data, len, d, 4 + bl) != NULL;
}

/* A writer that failed leaves the buffer as it was. */
static int undo_on_error(struct gw_buf *b, size_t start, int rc)
{
    if (rc != GW_OK) {
        b->len = start;
        if (b->data)
            b->data[start] = '\0';
    }
    return rc;
}

int gw_mp_write_head(struct gw_buf *b, const char *boundary, const char *name, const char *filename,
                     const char *content_type, const char *data, size_t len)
{
    if (!boundary || !*boundary || strpbrk(boundary, "\r\n") || !name ||
        (content_type && strpbrk(content_type, "\r\n")) || (len && !data) ||
        holds_delimiter(boundary, data, len))
        return GW_EINVAL;
    size_t start = b->len;
    int rc = gw_buf_append(b, "--", 2);
    if (rc == GW_OK)
        rc = gw_buf_appends(b, boundary);
    if (rc == GW_OK)
        rc = gw_buf_appends(b, "\r\nContent-Disposition: form-data; name=");
    if (rc == GW_OK)
        rc = put_quoted(b, name);
    if (rc == GW_OK && filename) {
        rc = gw_buf_appends(b, "; filename=");
        if (rc == GW_OK)
            rc = put_quoted(b, filename);
        if (rc == GW_OK)
            rc = gw_buf_appends(b, "\r\nContent-Type: ");
        if (rc == GW_OK)
            rc = gw_buf_appends(b, content_type ? content_type : "application/octet-stream");
    }
    if (rc == GW_OK)
        rc = gw_buf_append(b, "\r\n\r\n", 4);
    return undo_on_error(b, start, rc);
}

static int write_part(struct gw_buf *b, const char *boundary, const char *name,
                      const char *filename, const char *content_type, const char *data, size_t len)
{
    size_t start = b->len;
    int rc = gw_mp_write_head(b, boundary, name, filename, content_type, data, len);
    if (rc == GW_OK && len)
        rc = gw_buf_append(b, data, len);
    if (rc == GW_OK)
        rc = gw_buf_append(b, "\r\n", 2);
    return undo_on_error(b, start, rc);
}

int gw_mp_write_field(struct gw_buf *b, const char *boundary, const char *name, const char *value,
                      size_t len)
{
    return write_part(b, boundary, name, NULL, NULL, value, len);
}

int gw_mp_write_file(struct gw_buf *b, const char *boundary, const char *name, const char *filename,
                     const char *content_type, const char *data, size_t len)
{
    return write_part(b, boundary, name, filename ? filename : "", content_type, data, len);
}

int gw_mp_write_end(struct gw_buf *b, const char *boundary)
{
    if (!boundary || !*boundary || strpbrk(boundary, "\r\n"))
        return GW_EINVAL;
    size_t start = b->len;
    int rc = gw_buf_append(b, "--", 2);
    if (rc == GW_OK)
        rc = gw_buf_appends(b, boundary);
    if (rc == GW_OK)
        rc = gw_buf_append(b, "--\r\n", 4);
    return undo_on_error(b, start, rc);
}
