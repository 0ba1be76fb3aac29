/*
 * gw_multipart: multipart/form-data (RFC 7578 over RFC 2046 framing), a
 * streaming parser and a writer.
 *
 * The parser is push-style and resumable: the caller feeds the body in any
 * pieces and gets callbacks (a part's head, its bytes, its end); any split
 * of the input parses the same (the bytes of a part may be handed out in
 * other pieces, their concatenation is the same). Memory is bounded
 * independently of the input: the parser holds at most one part's header
 * block (max_header_bytes) and the boundary; a part's bytes are handed out as
 * they are scanned, keeping back only the part of a possible delimiter that a
 * piece ended inside (which is the delimiter's own bytes, not a copy).
 *
 *     struct gw_mp *m = gw_mp_new(boundary, &lim, &cbs);
 *     rc = gw_mp_feed(m, piece, n);        // as pieces arrive
 *     rc = gw_mp_finish(m);                // the body ended
 *     if (rc) answer(gw_mp_error(m)->status, gw_mp_error(m)->message);
 *
 * Rules:
 *  - Lines of the framing and of the part heads end in CRLF, strictly: a bare
 *    LF there is refused (400). Inside a part's data any bytes go, since only
 *    CRLF "--" boundary ends it.
 *  - A preamble before the first boundary line is skipped (not held); an
 *    epilogue after the closing boundary is skipped up to 1 KiB
 *    (GW_MP_MAX_EPILOGUE), more is refused. A boundary line may carry
 *    spaces or tabs before its CRLF (RFC 2046 transport padding, up to 256).
 *    A delimiter followed by anything else (neither "--", padding nor CRLF)
 *    is refused: RFC 2046 forbids the boundary inside the content.
 *  - Header names are case-insensitive. Content-Disposition must be
 *    "form-data" with a non-empty "name" parameter; "filename" is optional;
 *    parameter values are tokens or quoted-strings with backslash escapes
 *    ("\x" is x). "filename*" (RFC 5987) and other parameters are ignored
 *    (RFC 7578 4.2: senders do not use it). A name or filename given twice,
 *    a second Content-Disposition or Content-Type, a folded header line or
 *    a line without a colon is refused. Content-Type's value is kept as sent
 *    (spaces around it trimmed). Other headers are ignored, but count in
 *    max_header_bytes.
 *  - Refusals (gw_mp_feed / gw_mp_finish return GW_EINVAL, gw_mp_error says
 *    what, in words a client can act on): a body with no part, a body that
 *    ends before its closing boundary ("the multipart body is truncated: no
 *    closing boundary"), more than max_parts parts ("more than 64 parts",
 *    found when the part after the last allowed one starts, before its head
 *    is read); status 413 for a part whose data passes its limit (named) or a
 *    header block past max_header_bytes. After a refusal every call returns
 *    it again.
 *  - A callback that returns nonzero stops the parse: gw_mp_feed returns
 *    GW_ECLOSED (and keeps returning it); gw_mp_error then says "stopped".
 */
#ifndef GW_MULTIPART_H
#define GW_MULTIPART_H

#include <stddef.h>

#include "gw_buf.h"

#define GW_MP_MAX_BOUNDARY 70
#define GW_MP_MAX_EPILOGUE 1024

/* Limits (0 in a field: its default). */
struct gw_mp_limits {
    size_t max_parts;        /* default 64 */
    size_t max_header_bytes; /* one part's header block, default 8 KiB */
    size_t max_field_bytes;  /* a part without filename, default 64 KiB */
    size_t max_file_bytes;   /* a part with a filename, default 25 MiB */
};

struct gw_mp_err {
    int status;        /* 400, or 413 when a size limit was passed; 0: no error */
    char field[64];    /* the part's name when known ("file"), else ""; or "body"/"content-type" */
    char message[200]; /* what is wrong, in words a client can act on */
};

/* The boundary from a Content-Type value ("multipart/form-data; boundary=..."), quoted or
 * not, 1..70 chars per RFC 2046 bchars (a space allowed, not last). GW_OK, or GW_EINVAL
 * with err (status 400, field "content-type"): not multipart/form-data, no boundary, bad
 * boundary, or out too small (outlen 71 always suffices). */
int gw_mp_boundary(const char *content_type, char *out, size_t outlen, struct gw_mp_err *err)
    __attribute__((warn_unused_result));

struct gw_mp_part {           /* valid during the callbacks of that part */
    const char *name;         /* Content-Disposition name (required: a part without is 400) */
    const char *filename;     /* NULL when none */
    const char *content_type; /* NULL when none */
    size_t index;             /* 0-based */
};

struct gw_mp_cbs {
    /* each returns 0 to go on, nonzero to stop (gw_mp_feed then returns GW_ECLOSED) */
    int (*on_part)(const struct gw_mp_part *p, void *arg);
    int (*on_data)(const char *buf, size_t len, void *arg); /* the part's bytes, any split */
    int (*on_part_end)(void *arg);
    void *arg;
};

struct gw_mp;

/* boundary: 1..70 bytes without CR or LF (what gw_mp_boundary gives). NULL: out of memory
 * or a boundary outside those bounds. Any callback may be NULL. */
struct gw_mp *gw_mp_new(const char *boundary, const struct gw_mp_limits *lim,
                        const struct gw_mp_cbs *cbs);
/* GW_OK, or GW_EINVAL (err filled) or GW_ECLOSED (a callback stopped the parse). */
int gw_mp_feed(struct gw_mp *m, const char *buf, size_t len) __attribute__((warn_unused_result));
/* The body ended: GW_OK only after the close delimiter. */
int gw_mp_finish(struct gw_mp *m) __attribute__((warn_unused_result));
const struct gw_mp_err *gw_mp_error(const struct gw_mp *m);
void gw_mp_free(struct gw_mp *m);

/* A convenience for a body already whole in memory (the data plane's case). */
struct gw_mp_span {
    char name[64];
    char filename[256];
    char content_type[128];
    int has_filename;
    const char *data;
    size_t len;
};

/* Parses body[0..len) and fills up to max spans (data points into body). GW_OK, or
 * GW_EINVAL with err; more parts than max is the max_parts error (the smaller of the two
 * bounds is named). A name, filename or content type longer than its array is a 400 naming
 * the part. */
int gw_mp_parse_all(const char *body, size_t len, const char *boundary,
                    const struct gw_mp_limits *lim, struct gw_mp_span *parts, size_t max, size_t *n,
                    struct gw_mp_err *err) __attribute__((warn_unused_result));

/*
 * The writer (upstream bodies), appending to b: each part is "--B CRLF, its
 * head, CRLF, its data, CRLF"; gw_mp_write_end adds "--B-- CRLF". Names and
 * filenames are written as quoted-strings with '"' and '\' escaped; a name,
 * filename or content type with CR or LF is refused (GW_EINVAL), and so is
 * data that holds the delimiter (CRLF "--" boundary), which would cut the
 * part. A file without content_type is sent as application/octet-stream.
 * GW_OK, GW_EINVAL or GW_ELIMIT / GW_ENOMEM from the buffer; on an error the
 * buffer is left as it was.
 */
void gw_mp_new_boundary(char out[41]); /* "llmgw-" + 32 hex random (gw_crypto random) */
int gw_mp_write_field(struct gw_buf *b, const char *boundary, const char *name, const char *value,
                      size_t len) __attribute__((warn_unused_result));
int gw_mp_write_file(struct gw_buf *b, const char *boundary, const char *name, const char *filename,
                     const char *content_type, const char *data, size_t len)
    __attribute__((warn_unused_result));
int gw_mp_write_end(struct gw_buf *b, const char *boundary) __attribute__((warn_unused_result));
/* A part's head only, for a body sent in pieces: the caller sends data
 * itself (checked here as gw_mp_write_file checks it), then CRLF before the
 * next head or the end. filename NULL: a plain field. */
int gw_mp_write_head(struct gw_buf *b, const char *boundary, const char *name, const char *filename,
                     const char *content_type, const char *data, size_t len)
    __attribute__((warn_unused_result));

#endif
