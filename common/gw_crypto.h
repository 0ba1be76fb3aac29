/* Hashing and randomness (OpenSSL). */
#ifndef GW_CRYPTO_H
#define GW_CRYPTO_H

#include <stddef.h>

/* out receives 64 lowercase hex digits and a NUL. */
void gw_sha256_hex(const void *data, size_t len, char out[65]);
/* Fills buf with n cryptographically random bytes; 0 or GW_EIO. */
int gw_random_bytes(void *buf, size_t n) __attribute__((warn_unused_result));
/* Constant-time comparison of two equal-length strings; 1 when equal. */
int gw_ct_equal(const char *a, const char *b, size_t n);

#endif
