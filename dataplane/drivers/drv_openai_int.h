/*
 * The "openai" driver's answer parser (openai_parse.c), for the driver's
 * table in openai.c and nothing else.
 */
#ifndef DRV_OPENAI_INT_H
#define DRV_OPENAI_INT_H

#include <stddef.h>

#include "canon.h"
#include "dp_driver.h"

struct drv_parser *drv_openai_parser_new(int stream);
void drv_openai_parser_free(struct drv_parser *bp);
int drv_openai_parse(struct drv_parser *bp, const char *buf, size_t len,
                     const struct canon_sink *s);
void drv_openai_finish(struct drv_parser *bp, const struct canon_sink *s);

#endif
