/*
 * dp_reply: error answers, in the client's format, and the access-log line
 * of a request refused before any upstream work. Both the worker (a bad
 * path, a bad key) and the exchange (a bad body, no route, a limit, every
 * attempt failed) answer through these.
 */
#ifndef DP_REPLY_H
#define DP_REPLY_H

#include <stddef.h>

struct gw_http_req;
struct gw_buf;
struct dp_facade;

/* Answers with an OpenAI-style error body and ends the request. */
void dp_reply_error(struct gw_http_req *req, int status, const char *type, const char *param,
                    const char *code, const char *message);
/* Writes the access-log line of a request refused before upstream work. */
void dp_log_simple(struct gw_http_req *req, const char *id, int status, const char *code);
/* The same, after writing the request's access-log line (id, method, path,
 * status, code): for requests refused before any upstream work. */
void dp_reply_error_logged(struct gw_http_req *req, const char *id, int status, const char *type,
                           const char *param, const char *code, const char *message);
/* An error answer in facade fc's format (NULL: OpenAI's), logged. */
void dp_reply_error_fc(struct gw_http_req *req, const struct dp_facade *fc, const char *id,
                       int status, const char *type, const char *param, const char *code,
                       const char *msg);

/* The OpenAI-style error type of an HTTP status. */
const char *dp_error_type(int status);
/* dp_reply_error_fc with the type that follows from the status. */
void dp_reply_fc(struct gw_http_req *req, const struct dp_facade *fc, const char *id, int status,
                 const char *param, const char *code, const char *msg);

/* An error answer in fc's format (NULL: OpenAI's), not logged; extra (a
 * JSON value, when given) goes into the error object as extra_name: the
 * attempts a request made, or the candidates a router skipped. Error
 * answers are rare enough to take a second pass through jansson. */
void dp_respond_error(struct gw_http_req *req, const struct dp_facade *fc, int status,
                      const char *type, const char *param, const char *code, const char *msg,
                      const char *extra_name, const struct gw_buf *extra);

#endif
