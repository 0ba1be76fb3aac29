/*
 * The "gemini" driver's answer parser and error reading (gemini_parse.c),
 * for the driver's table in gemini.c and nothing else.
 */
#ifndef DRV_GEMINI_INT_H
#define DRV_GEMINI_INT_H

#include <stddef.h>

#include "canon.h"
#include "dp_driver.h"

struct drv_parser *drv_gemini_parser_new(int stream);
int drv_gemini_parse(struct drv_parser *bp, const char *buf, size_t len,
                     const struct canon_sink *s);
void drv_gemini_finish(struct drv_parser *bp, const struct canon_sink *s);
void drv_gemini_classify(int status, const char *body, size_t len, enum canon_failure *f, char *msg,
                         size_t msglen);
/* google.rpc.RetryInfo's retryDelay as whole seconds; 0 when out is set. */
int drv_gemini_retry_after(const char *body, size_t len, char *out, size_t outlen);

#endif
