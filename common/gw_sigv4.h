/*
 * gw_sigv4: AWS Signature Version 4 signing of one HTTP request, in the
 * Authorization-header form (not presigned URLs). Own implementation on
 * OpenSSL's SHA-256 and HMAC, checked against the AWS SigV4 test suite (the
 * cases that need no path normalisation, which this signer does not do).
 *
 * The signature covers bytes the server will see, so what the caller passes
 * must be exactly what it sends:
 *
 *   method   as sent, uppercase: "POST".
 *   path     the request-target path as it goes on the wire, already
 *            percent-encoded, without the query. Build it with
 *            gw_pct_encode (gw_codec.h: the encoding AWS wants), one segment at a time: the Bedrock
 * model id "anthropic.claude-3-haiku-20240307-v1:0" goes out as
 *            "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse-stream".
 *            The signer does not normalise it ("." and ".." segments and
 *            repeated slashes are signed as they are): pass a clean path.
 *   query    the query string as sent, without the '?'; NULL or "" for none.
 *            Parameters may be raw or percent-encoded ("%XX" is decoded and
 *            every name and value re-encoded, RFC 3986 unreserved characters
 *            kept); a '+' is a plus sign, so write spaces as %20.
 *   headers  every header to sign, "host" included (required); any case.
 *            Values are trimmed and runs of spaces and tabs collapsed for the
 *            signature; send them as given. A name given twice is signed as
 *            one header with the values joined by ',' in the order given.
 *            Not allowed here, because the signer adds them: authorization,
 *            x-amz-date, x-amz-security-token, and x-amz-content-sha256 when
 *            GW_SIGV4_CONTENT_SHA256 is set.
 *   payload  the body, NULL with length 0 for none.
 *
 * The canonical URI: for every service but S3 the signer URI-encodes the
 * path once more, each byte outside the unreserved set and '/', as botocore
 * and the other AWS SDKs do. A '%' becomes "%25", so the model id above is
 * "v1%253A0" in the canonical request; that double encoding is what Bedrock
 * verifies. With GW_SIGV4_S3 the path is used as it is.
 *
 * The caller then sends the headers in out->add: Authorization, X-Amz-Date,
 * X-Amz-Security-Token when a session token is set, X-Amz-Content-SHA256
 * when GW_SIGV4_CONTENT_SHA256 is set.
 */
#ifndef GW_SIGV4_H
#define GW_SIGV4_H

#include <stddef.h>

#include "gw_buf.h"

#define GW_SIGV4_S3 1u             /* canonical URI = path, not encoded again (S3) */
#define GW_SIGV4_CONTENT_SHA256 2u /* sign and send x-amz-content-sha256 */

/* Longest secret key accepted (AWS secrets are 40 characters). */
#define GW_SIGV4_MAX_SECRET 128

struct gw_sigv4_params {
    const char *access_key;
    const char *secret_key;
    const char *session_token; /* NULL or "": long-term credentials */
    const char *region;        /* "us-east-1" */
    const char *service;       /* signing name: "bedrock" for bedrock-runtime */
    const char *amz_date;      /* "YYYYMMDDTHHMMSSZ" (UTC); NULL: now */
    unsigned flags;            /* GW_SIGV4_* */
};

struct gw_sigv4_header {
    const char *name;
    const char *value; /* NUL-terminated, no CR or LF */
};

struct gw_sigv4_result {
    char amz_date[17];               /* the X-Amz-Date value */
    char payload_sha256[65];         /* lowercase hex SHA-256 of the payload */
    char signature[65];              /* lowercase hex */
    struct gw_buf authorization;     /* the Authorization value */
    struct gw_buf canonical_request; /* kept for tests and debugging */
    struct gw_buf string_to_sign;    /* likewise */
    /* Headers the caller adds to the request, Authorization first. Values
     * point into this result or into the params' session token. */
    struct gw_sigv4_header add[4];
    size_t nadd;
};

void gw_sigv4_result_init(struct gw_sigv4_result *r);
void gw_sigv4_result_free(struct gw_sigv4_result *r);

/* Signs the request into *out (initialised with gw_sigv4_result_init; it can
 * be reused, earlier contents are replaced). GW_EINVAL for a missing or
 * malformed credential, region, service, date, method or path, a header
 * name that is not an HTTP token, a value with a control byte, no host
 * header, or a header the signer adds itself; GW_ENOMEM. */
int gw_sigv4_sign(const struct gw_sigv4_params *p, const char *method, const char *path,
                  const char *query, const struct gw_sigv4_header *headers, size_t nheaders,
                  const void *payload, size_t payload_len, struct gw_sigv4_result *out)
    __attribute__((warn_unused_result));

#endif
