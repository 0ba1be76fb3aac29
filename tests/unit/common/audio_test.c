/* Tests for common/gw_audio.c: WAV durations, the tolerated data sizes and
 * the refusals. */
#include <CUnit/CUnit.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gw_audio.h"
#include "gw_error.h"

static size_t put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
    return 4;
}

/* A WAV in buf: optional LIST chunk of list_len bytes first, fmt with
 * byte_rate, data declaring data_size and holding present bytes. */
static size_t wav(unsigned char *buf, uint32_t byte_rate, uint32_t data_size, size_t present,
                  size_t list_len)
{
    size_t o = 0;
    memcpy(buf, "RIFF", 4);
    o += 4;
    o += put32(buf + o, 0); /* the RIFF size is not read */
    memcpy(buf + o, "WAVE", 4);
    o += 4;
    if (list_len) {
        memcpy(buf + o, "LIST", 4);
        o += 4;
        o += put32(buf + o, (uint32_t)list_len);
        memset(buf + o, 'l', list_len + (list_len & 1));
        o += list_len + (list_len & 1);
    }
    memcpy(buf + o, "fmt ", 4);
    o += 4;
    o += put32(buf + o, 16);
    static const unsigned char fmt[16] = {1, 0, 1, 0, 0x40, 0x1f, 0, 0, 0, 0, 0, 0, 2, 0, 16, 0};
    memcpy(buf + o, fmt, 16);
    put32(buf + o + 8, byte_rate);
    o += 16;
    memcpy(buf + o, "data", 4);
    o += 4;
    o += put32(buf + o, data_size);
    memset(buf + o, 0, present);
    return o + present;
}

static void test_durations(void)
{
    unsigned char *b = malloc(64 * 1024);
    int64_t ms = -1;
    size_t n = wav(b, 16000, 16000, 16000, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 1000);
    n = wav(b, 16000, 16001, 16001, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 1001); /* rounded up */
    n = wav(b, 16000, 16, 16, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 1);
    /* a LIST chunk of odd length (padded) before fmt */
    n = wav(b, 32000, 8000, 8000, 7);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 250);
    /* "to the end of the file": 0, 0xFFFFFFFF, or more than is present */
    n = wav(b, 16000, 0, 8000, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 500);
    n = wav(b, 16000, 0xFFFFFFFFu, 4000, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 250);
    n = wav(b, 16000, 1u << 30, 1600, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 100);
    /* bytes after the data chunk are not counted */
    n = wav(b, 16000, 1600, 1600, 0);
    memcpy(b + n, "junkjunkjunk", 12);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n + 12, &ms), GW_OK);
    CU_ASSERT_EQUAL(ms, 100);
    free(b);
}

static void test_refusals(void)
{
    unsigned char b[256];
    int64_t ms = -1;
    size_t n = wav(b, 16000, 16, 16, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms(NULL, 0, &ms), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_audio_wav_ms("ID3\x04", 4, &ms), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, 11, &ms), GW_EINVAL);
    /* every truncation before the data chunk's header is complete */
    for (size_t k = 0; k < 44; k++)
        CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, k, &ms), GW_EINVAL);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, 44, &ms), GW_OK); /* data present: 0 bytes */
    CU_ASSERT_EQUAL(ms, 0);
    memcpy(b + 8, "AVI ", 4);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_EINVAL);
    n = wav(b, 0, 16, 16, 0);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_EINVAL); /* byte rate 0 */
    n = wav(b, 16000, 16, 16, 0);
    memcpy(b + 12, "fmtx", 4);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_EINVAL); /* no fmt */
    n = wav(b, 16000, 16, 16, 0);
    put32(b + 16, 8);
    CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)b, n, &ms), GW_EINVAL); /* fmt too short */
    /* more than 64 chunks before fmt: the walk stops; 60 do not */
    static unsigned char big[12 + 70 * 8 + 64];
    for (int chunks = 60; chunks <= 70; chunks += 10) {
        memcpy(big, "RIFF\0\0\0\0WAVE", 12);
        for (int k = 0; k < chunks; k++) {
            memcpy(big + 12 + 8 * k, "junk", 4);
            put32(big + 12 + 8 * k + 4, 0);
        }
        n = wav(b, 16000, 16, 16, 0);
        memcpy(big + 12 + 8 * chunks, b + 12, n - 12);
        CU_ASSERT_EQUAL(gw_audio_wav_ms((char *)big, 8 * (size_t)chunks + n, &ms),
                        chunks == 60 ? GW_OK : GW_EINVAL);
    }
}

static CU_TestInfo tests[] = {
    {"WAV durations", test_durations},
    {"refusals", test_refusals},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
