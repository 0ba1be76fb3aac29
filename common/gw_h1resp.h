/*
 * gw_h1resp: the framing of an HTTP/1.1 response, as pure functions over
 * bytes (no socket, no allocation): where the head ends, what the head
 * says (status, how the body is delimited, whether the connection may be
 * reused), and a chunked-coding decoder that finds the data spans inside
 * whatever pieces arrive. The upstream client (gw_upc.c) frames every
 * provider answer with it; tests/fuzz/fuzz_h1resp.c fuzzes it.
 *
 * Leniency follows what providers and their proxies send and what libcurl
 * accepted before it: a bare LF ends a line as CRLF does; a reason phrase
 * may be absent. Refused (GW_EINVAL): a status line that is not
 * "HTTP/1.x NNN", a header line without a token name and a colon, an
 * obsolete line fold, Content-Length copies that differ or are not digits,
 * a chunk size that is not hex or passes 2^60, bytes after a chunk that
 * are not its CRLF.
 */
#ifndef GW_H1RESP_H
#define GW_H1RESP_H

#include <stddef.h>
#include <stdint.h>

/* Heads longer than this are refused (libcurl's bound is 100 KiB; real
 * provider heads are 1-2 KiB). */
#define GW_H1_MAX_HEAD (64u << 10)

enum gw_h1_framing {
    GW_H1_EMPTY,   /* no body: 1xx, 204, 304 */
    GW_H1_LENGTH,  /* Content-Length bytes */
    GW_H1_CHUNKED, /* Transfer-Encoding whose last coding is chunked */
    GW_H1_CLOSE,   /* until the server closes the connection */
};

struct gw_h1_head {
    int status;
    enum gw_h1_framing framing;
    uint64_t length; /* GW_H1_LENGTH */
    int keep_alive;  /* the connection may carry another request after this one */
    size_t head_len; /* bytes of the head, the blank line included */
};

/* Where the head in buf[0..n) ends: its length, the final blank line
 * included; 0 when it has not ended yet. */
size_t gw_h1_head_end(const char *buf, size_t n);

/* Each line of the head (the status line first, then every header line),
 * with its line ending, as it arrived. */
typedef void (*gw_h1_line_cb)(const char *line, size_t len, void *arg);

/* Parses the head buf[0..n) (n from gw_h1_head_end). line_cb, when not
 * NULL, sees each line once the whole head is known to be valid. GW_OK or
 * GW_EINVAL (*why says what). */
int gw_h1_parse_head(const char *buf, size_t n, struct gw_h1_head *h, gw_h1_line_cb line_cb,
                     void *arg, const char **why) __attribute__((warn_unused_result));

/* The chunked decoder. Zero it to start. */
struct gw_h1_chunked {
    int state;
    uint64_t left; /* data bytes left in the current chunk */
    unsigned line; /* bytes of the current size or trailer line */
    int done;      /* the last chunk and its trailers were read */
};

/*
 * Decodes from in[0..n). Returns the bytes consumed (which may be fewer
 * than n: call again with the rest) or GW_EINVAL. When the consumed bytes
 * end with chunk data, *data and *dlen give it (a span inside in) and the
 * caller delivers it before calling again; otherwise *dlen is 0. Once
 * c->done is set, nothing more is consumed (bytes after the message are
 * the caller's to judge).
 */
long gw_h1_chunked_feed(struct gw_h1_chunked *c, const char *in, size_t n, const char **data,
                        size_t *dlen);

#endif
