/*
 * Force-included into every translation unit: unbounded string calls do not
 * compile. Use snprintf, memcpy with a checked length, or gw_buf.
 */
#ifndef GW_BANNED_H
#define GW_BANNED_H

#include <stdio.h>
#include <string.h>

#undef strcpy
#define strcpy(...) GW_BANNED_strcpy_use_memcpy_or_snprintf
#undef strcat
#define strcat(...) GW_BANNED_strcat_use_gw_buf
#undef sprintf
#define sprintf(...) GW_BANNED_sprintf_use_snprintf
#undef vsprintf
#define vsprintf(...) GW_BANNED_vsprintf_use_vsnprintf
#undef gets
#define gets(...) GW_BANNED_gets

#endif
