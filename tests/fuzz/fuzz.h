/*
 * What every libFuzzer target in tests/fuzz/ shares: the entry point's
 * prototype, CHECK (a failed property aborts, which libFuzzer reports as a
 * crash and keeps the input for replay), and the chunker that splits an
 * input into pieces for the resumable parsers' split-invariance checks.
 */
#ifndef LLMGW_FUZZ_H
#define LLMGW_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* The sizes of the pieces: a xorshift stream seeded from the input, or a
 * fixed size. */
struct chunker {
    uint32_t state;
    size_t fixed; /* 0: drawn from state; otherwise every piece is this long */
};

/* The next piece's length, at most left: mostly short, some empty, some
 * long (up to 4 KiB). */
static inline size_t next_size(struct chunker *c, size_t left)
{
    size_t n = c->fixed;
    if (!n) {
        c->state ^= c->state << 13;
        c->state ^= c->state >> 17;
        c->state ^= c->state << 5;
        uint32_t r = c->state % 64;
        n = r < 4 ? 0 : r < 48 ? r - 3 : (size_t)(c->state >> 8) % 4096;
    }
    return n < left ? n : left;
}

#endif
