/*
 * What dp_guard_rules.c takes from the normalizer (dp_guard_fold.c). Not
 * for use outside the guard's two files.
 */
#ifndef DP_GUARD_INT_H
#define DP_GUARD_INT_H

#include <stddef.h>
#include <stdint.h>

/* What dpg_utf8_next says of a byte that does not start a well-formed
 * sequence. */
#define BAD_CP 0xFFFFFFFFu

/* One UTF-8 sequence at s (n > 0 bytes): the bytes it takes and *cp, or 1
 * and BAD_CP for a byte that does not start a well-formed one (overlong
 * forms, surrogates and code points past U+10FFFF included). */
size_t dpg_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);

/* The normalized form of n bytes at s into d (room for n + 3 bytes: the
 * form is at most n + 2, and a NUL). Returns its length. The second form
 * (hidden_sep) takes format characters for separators, not for nothing
 * (*hidden, when not NULL, says whether there were any). */
size_t dpg_normalize_form(const char *s, size_t n, char *d, int hidden_sep, int *hidden);
/* The first form. */
size_t dpg_normalize_into(const char *s, size_t n, char *d);

#endif
