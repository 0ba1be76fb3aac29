#include "gw_crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>

#include "gw_codec.h"
#include "gw_error.h"

/* SHA-256 fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up
 * in its provider store at every digest, under a lock the workers share
 * (about 370 ns a key here, 160 with the fetched one). Kept for the
 * process's life. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void)
{
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void gw_sha256_hex(const void *data, size_t len, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    pthread_once(&sha256_once, sha256_fetch);
    EVP_Digest(data, len, md, &mdlen, sha256_md ? sha256_md : EVP_sha256(), NULL);
    gw_hex_encode(md, sizeof(md), out);
}

int gw_random_bytes(void *buf, size_t n)
{
    return RAND_bytes(buf, (int)n) == 1 ? GW_OK : GW_EIO;
}

int gw_ct_equal(const char *a, const char *b, size_t n)
{
    return CRYPTO_memcmp(a, b, n) == 0;
}
