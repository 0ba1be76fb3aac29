#include "gw_str.h"

#include <string.h>
#include <strings.h>

int gw_mem_has(const char *s, size_t len, const char *needle)
{
    size_t n = strlen(needle);
    if (!s || n > len)
        return 0;
    for (size_t i = 0; i + n <= len; i++)
        if (strncasecmp(s + i, needle, n) == 0)
            return 1;
    return 0;
}

int gw_str_has(const char *s, const char *needle)
{
    return s ? gw_mem_has(s, strlen(s), needle) : 0;
}
