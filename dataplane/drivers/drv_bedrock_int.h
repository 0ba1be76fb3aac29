/*
 * The "bedrock" driver's own pieces, shared by its files and by nothing
 * else: the request signing (bedrock_sign.c) that build_chat (bedrock.c)
 * calls, and the answer parser (bedrock_parse.c) for the driver's table.
 */
#ifndef DRV_BEDROCK_INT_H
#define DRV_BEDROCK_INT_H

#include <stddef.h>

#include "canon.h"
#include "dp_driver.h"

/* bedrock_sign.c */

/* A 500 provider_misconfigured naming the provider; GW_EINVAL. */
int drv_bedrock_misconfigured(const struct drv_target *t, struct canon_err *err, const char *what);
/* The host ("name[:port]") and the path prefix of base_url. */
int drv_bedrock_split_base(const char *base, const char **host, size_t *hostlen,
                           const char **prefix);
/* "Name: value" without drv_header's line limit. */
int drv_bedrock_add_header(struct drv_request *out, const char *name, const char *prefix,
                           const char *value);
/* Signs out (url, body already set) with SigV4 and adds the headers. */
int drv_bedrock_sign_request(const struct drv_target *t, const char *host, const char *path,
                             struct drv_request *out, struct canon_err *err);

/* bedrock_parse.c: the driver's parser_new, parse, finish, parser_free and
 * classify. */
struct drv_parser *drv_bedrock_parser_new(int stream);
int drv_bedrock_parse(struct drv_parser *bp, const char *buf, size_t len,
                      const struct canon_sink *s);
void drv_bedrock_finish(struct drv_parser *bp, const struct canon_sink *s);
void drv_bedrock_parser_free(struct drv_parser *bp);
void drv_bedrock_classify(int status, const char *body, size_t len, enum canon_failure *f,
                          char *msg, size_t msglen);

#endif
