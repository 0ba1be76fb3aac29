/*
 * The Anthropic Messages facade's own pieces, shared by its files and by
 * nothing else: the request parse (anthropic_parse.c) and the helper both
 * halves write paths and messages with (anthropic.c).
 */
#ifndef FC_ANTHROPIC_INT_H
#define FC_ANTHROPIC_INT_H

#include <stddef.h>

#include "canon.h"

/* anthropic_parse.c: the facade's parse. */
int fc_anthropic_parse(struct canon_req *r, struct canon_err *err);

/* anthropic.c: snprintf for field paths and messages, cut to fit. */
void fc_anthropic_pathf(char *buf, size_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
