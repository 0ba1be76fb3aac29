/*
 * gw_str: case-insensitive (ASCII) substring search, for reading provider
 * error messages and bodies ("context length", "ThrottlingException"),
 * which are not always NUL-terminated. (Hex and base64 digits: gw_codec.h.)
 */
#ifndef GW_STR_H
#define GW_STR_H

#include <stddef.h>

/* 1 when needle occurs in the len bytes at s, ignoring case; 0 otherwise
 * (s NULL: 0). */
int gw_mem_has(const char *s, size_t len, const char *needle);
/* The same in a NUL-terminated string (NULL: 0). */
int gw_str_has(const char *s, const char *needle);

#endif
