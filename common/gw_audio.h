/*
 * gw_audio: what the gateway reads of an audio upload without decoding it.
 * Pure, no allocation.
 */
#ifndef GW_AUDIO_H
#define GW_AUDIO_H

#include <stddef.h>
#include <stdint.h>

/*
 * The duration of a WAV file (RIFF/WAVE) in buf[0..len), in milliseconds
 * rounded up: the data chunk's bytes over the fmt chunk's byte rate. A data
 * chunk whose size is 0 or 0xFFFFFFFF (a stream written before its length
 * was known), or larger than what is present, counts the bytes present.
 * The chunks are walked in order, at most 64 of them (odd sizes padded).
 * GW_OK, or GW_EINVAL: not a WAV, no fmt or data chunk within that walk, a
 * fmt chunk shorter than 16 bytes or a byte rate of 0.
 */
int gw_audio_wav_ms(const char *buf, size_t len, int64_t *ms) __attribute__((warn_unused_result));

#endif
