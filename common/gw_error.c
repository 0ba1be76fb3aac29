#include "gw_error.h"

const char *gw_strerror(int code)
{
    switch (code) {
    case GW_OK:
        return "ok";
    case GW_EAGAIN:
        return "again";
    case GW_ENOMEM:
        return "out of memory";
    case GW_EINVAL:
        return "invalid argument";
    case GW_ELIMIT:
        return "limit exceeded";
    case GW_ECLOSED:
        return "closed";
    case GW_EIO:
        return "i/o error";
    case GW_ENOTFOUND:
        return "not found";
    case GW_ERANGE:
        return "out of range";
    default:
        return "unknown error";
    }
}
