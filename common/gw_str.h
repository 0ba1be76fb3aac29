/*
 * gw_str: case-insensitive (ASCII) substring search, for reading provider
 * error messages and bodies ("context length", "ThrottlingException"),
 * which are not always NUL-terminated; and the one hex-digit reader.
 */
#ifndef GW_STR_H
#define GW_STR_H

#include <stddef.h>

/* 1 when needle occurs in the len bytes at s, ignoring case; 0 otherwise
 * (s NULL: 0). */
int gw_mem_has(const char *s, size_t len, const char *needle);
/* The same in a NUL-terminated string (NULL: 0). */
int gw_str_has(const char *s, const char *needle);

/* The value of one hex digit (either case), or -1. */
static inline int gw_hex_digit(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The value of one symbol of standard base64 (A-Z a-z 0-9 + /), or -1. */
static inline int gw_b64_digit(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

#endif
