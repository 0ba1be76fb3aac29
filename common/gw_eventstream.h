/*
 * gw_eventstream: AWS event stream framing (application/vnd.amazon.eventstream),
 * the binary format of Bedrock ConverseStream / InvokeModelWithResponseStream
 * bodies. A decoder that is resumable like gw_sse (a message split anywhere
 * decodes the same as one delivered whole) and an encoder for the mock
 * provider.
 *
 * One message on the wire, all integers big-endian:
 *
 *     total length    4   the whole message, these 4 bytes and the CRC included
 *     headers length  4
 *     prelude CRC     4   CRC-32 (IEEE, as zlib's crc32) of the 8 bytes above
 *     headers         headers length bytes
 *     payload         total - headers length - 16 bytes
 *     message CRC     4   CRC-32 of every byte before it
 *
 * A header is a 1-byte name length, the name, a 1-byte value type and the
 * value (enum gw_es_type). Headers that matter to Bedrock are strings:
 * ":message-type" ("event" or "exception"), ":event-type" (for example
 * "contentBlockDelta"), ":exception-type" and ":content-type".
 *
 * Pull-style, no callbacks:
 *
 *     const char *p = piece; size_t n = len; struct gw_es_message m; int rc;
 *     while ((rc = gw_es_next(&es, &p, &n, &m)) == GW_OK)
 *         use(gw_es_header(&m, ":event-type"), m.payload, m.payload_len);
 *     if (rc != GW_EAGAIN)   // corrupt or oversize: the stream is unusable
 *         fail(gw_es_why(&es));
 *
 * The decoder checks the prelude CRC as soon as the first 12 bytes of a
 * message are in, before it trusts the lengths: a message longer than the
 * ceiling is refused right there, without buffering any of it. The payload
 * is returned only once the message CRC has matched.
 */
#ifndef GW_EVENTSTREAM_H
#define GW_EVENTSTREAM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gw_buf.h"

#define GW_ES_PRELUDE_LEN 12
#define GW_ES_MIN_MESSAGE 16               /* prelude + message CRC */
#define GW_ES_DEFAULT_MAX (1u << 20)       /* gw_es_init ceiling when given 0 */
#define GW_ES_HARD_MAX (16u << 20)         /* the format's own limit; ceilings clamp to it */
#define GW_ES_MAX_HEADERS_LEN (128u << 10) /* the format's limit on the headers section */
#define GW_ES_MAX_HEADERS 32               /* headers the decoder keeps per message */

/* Value types; the numbers are the wire codes. */
enum gw_es_type {
    GW_ES_TRUE = 0,      /* no value bytes; v.i = 1 */
    GW_ES_FALSE = 1,     /* no value bytes; v.i = 0 */
    GW_ES_BYTE = 2,      /* v.i, signed 8-bit */
    GW_ES_INT16 = 3,     /* v.i */
    GW_ES_INT32 = 4,     /* v.i */
    GW_ES_INT64 = 5,     /* v.i */
    GW_ES_BYTES = 6,     /* v.b, 2-byte length on the wire */
    GW_ES_STRING = 7,    /* v.b, UTF-8, 2-byte length on the wire */
    GW_ES_TIMESTAMP = 8, /* v.i, milliseconds since the epoch */
    GW_ES_UUID = 9,      /* v.b, exactly 16 bytes */
};

struct gw_es_header {
    const char *name; /* NUL-terminated */
    size_t name_len;  /* set by the decoder; the encoder uses strlen(name) */
    enum gw_es_type type;
    union {
        int64_t i;
        struct {
            const char *p; /* decoded BYTES and STRING values are NUL-terminated */
            size_t len;
        } b;
    } v;
};

/* A string header for gw_es_encode's array (not for static initialisers). */
#define GW_ES_HSTR(n, s)                                                                           \
    {                                                                                              \
        .name = (n), .type = GW_ES_STRING, .v.b = {(s), strlen(s) }                                \
    }

struct gw_es_message {
    const struct gw_es_header *headers; /* in wire order */
    size_t nheaders;
    const char *payload; /* NUL-terminated (not counted in payload_len) */
    size_t payload_len;
};

struct gw_es {
    struct gw_buf msg;  /* the message being assembled, at most its total length */
    size_t total;       /* from the prelude; 0 until the prelude is in */
    size_t headers_len; /* from the prelude */
    int err;            /* sticky: once set, every call returns it */
    const char *why;    /* static text for err, NULL while healthy */
    int dispatched;     /* msg holds the message handed out last call */
    struct gw_es_header hdr[GW_ES_MAX_HEADERS];
};

/* max_message_bytes bounds one message (0: GW_ES_DEFAULT_MAX; values above
 * GW_ES_HARD_MAX, or below GW_ES_MIN_MESSAGE, are clamped). */
void gw_es_init(struct gw_es *p, size_t max_message_bytes);
void gw_es_free(struct gw_es *p);

/* Consumes input from buf and len (advancing both) until a message is
 * complete and verified (GW_OK, *msg filled; its pointers stay valid until
 * the next call or gw_es_free) or the input is used up (GW_EAGAIN). Errors,
 * after which the decoder is dead and returns the same code forever:
 *   GW_EINVAL  prelude or message CRC mismatch, total length below 16,
 *              headers length beyond the message or the format's limit, a
 *              header truncated, of an unknown type, or past GW_ES_MAX_HEADERS;
 *   GW_ELIMIT  total length above the ceiling (nothing of it is buffered);
 *   GW_ENOMEM  allocation failed.
 * gw_es_why says which check failed. */
int gw_es_next(struct gw_es *p, const char **buf, size_t *len, struct gw_es_message *msg)
    __attribute__((warn_unused_result));

/* Why the decoder died ("prelude CRC mismatch", ...); NULL while healthy. */
const char *gw_es_why(const struct gw_es *p);

/* The first header named `name`, or NULL. */
const struct gw_es_header *gw_es_find(const struct gw_es_message *m, const char *name);
/* The value of the first header named `name` when it is a string, else NULL. */
const char *gw_es_header(const struct gw_es_message *m, const char *name);

/* Appends one encoded message to out. GW_EINVAL when a name is empty or
 * longer than 255 bytes, a BYTES/STRING value is longer than 65535 bytes, a
 * UUID is not 16 bytes, a type is unknown, or the message would pass
 * GW_ES_HARD_MAX (or the headers GW_ES_MAX_HEADERS_LEN); GW_ELIMIT/GW_ENOMEM
 * from out. On error out is left as it was. */
int gw_es_encode(struct gw_buf *out, const struct gw_es_header *headers, size_t nheaders,
                 const void *payload, size_t payload_len) __attribute__((warn_unused_result));

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): start with crc = 0 and
 * feed pieces in order. */
uint32_t gw_es_crc32(uint32_t crc, const void *data, size_t len);

#endif
