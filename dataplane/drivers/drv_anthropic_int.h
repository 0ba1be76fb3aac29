/*
 * The "anthropic" driver's answer parser (anthropic_parse.c), for the
 * driver's table in anthropic.c and nothing else.
 */
#ifndef DRV_ANTHROPIC_INT_H
#define DRV_ANTHROPIC_INT_H

#include <stddef.h>

#include "canon.h"
#include "dp_driver.h"

struct drv_parser *drv_anthropic_parser_new(int stream);
void drv_anthropic_parser_free(struct drv_parser *bp);
int drv_anthropic_parse(struct drv_parser *bp, const char *buf, size_t len,
                        const struct canon_sink *s);
void drv_anthropic_finish(struct drv_parser *bp, const struct canon_sink *s);
void drv_anthropic_classify(int status, const char *body, size_t len, enum canon_failure *f,
                            char *msg, size_t msglen);

#endif
