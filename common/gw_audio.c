#include "gw_audio.h"

#include <string.h>

#include "gw_error.h"

#define MAX_CHUNKS 64

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int gw_audio_wav_ms(const char *buf, size_t len, int64_t *ms)
{
    const unsigned char *b = (const unsigned char *)buf;
    if (!b || len < 12 || memcmp(b, "RIFF", 4) != 0 || memcmp(b + 8, "WAVE", 4) != 0)
        return GW_EINVAL;
    uint32_t rate = 0;
    int have_fmt = 0, have_data = 0;
    uint64_t bytes = 0;
    size_t off = 12;
    for (int k = 0; k < MAX_CHUNKS && len - off >= 8; k++) {
        const unsigned char *h = b + off;
        uint32_t size = le32(h + 4);
        size_t body = off + 8, present = len - body;
        if (memcmp(h, "fmt ", 4) == 0) {
            if (have_fmt || size < 16 || present < 16)
                return GW_EINVAL;
            rate = le32(b + body + 8); /* after format (2), channels (2), sample rate (4) */
            have_fmt = 1;
        } else if (memcmp(h, "data", 4) == 0 && !have_data) {
            have_data = 1;
            if (size == 0 || size == 0xFFFFFFFFu || size > present) {
                bytes = present; /* to the end of the file */
                break;
            }
            bytes = size;
        }
        if (have_fmt && have_data)
            break;
        if (size > present)
            break;
        off = body + size + (size & 1);
        if (off > len)
            break;
    }
    if (!have_fmt || !have_data || rate == 0)
        return GW_EINVAL;
    uint64_t whole = bytes / rate, rest = bytes % rate;
    *ms = (int64_t)(whole * 1000 + (rest * 1000 + rate - 1) / rate);
    return GW_OK;
}
