/*
 * cp_secrets: AES-256-GCM sealing of built-in secrets under the master key.
 * See cp_secrets.h for the blob format and the ownership rules.
 */
#include "cp_secrets.h"

#include "cp_secret_ref.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

int cp_master_key_parse(const char *text, struct cp_master_key *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof(*out));
    if (!text) {
        set_err(err, errlen, "%s is not set", CP_MASTER_KEY_ENV);
        return GW_EINVAL;
    }
    int rc = gw_key32_parse(text, out->key);
    if (rc != GW_OK) {
        cp_master_key_clear(out);
        /* The length is safe to say; the text is not. */
        set_err(err, errlen,
                "%s must be 32 bytes written as 64 hex digits or as 44 characters of standard "
                "base64 (e.g. the output of 'openssl rand -hex 32' or 'openssl rand -base64 32'); "
                "the value given (%zu characters) is neither",
                CP_MASTER_KEY_ENV, strlen(text));
        return GW_EINVAL;
    }
    static const unsigned char zero[CP_MASTER_KEY_LEN];
    if (CRYPTO_memcmp(out->key, zero, CP_MASTER_KEY_LEN) == 0) {
        cp_master_key_clear(out);
        set_err(err, errlen,
                "%s is all zero bytes: a placeholder, not a key (generate one with "
                "'openssl rand -hex 32')",
                CP_MASTER_KEY_ENV);
        return GW_EINVAL;
    }
    char hex[65];
    gw_sha256_hex(out->key, CP_MASTER_KEY_LEN, hex);
    memcpy(out->id, hex, 8);
    out->id[8] = '\0';
    OPENSSL_cleanse(hex, sizeof(hex));
    return GW_OK;
}

int cp_master_key_from_env(struct cp_master_key *out, char *err, size_t errlen)
{
    const char *v = getenv(CP_MASTER_KEY_ENV);
    if (!v || !*v) {
        memset(out, 0, sizeof(*out));
        set_err(err, errlen, "%s is not set: the control plane needs a 32-byte master key",
                CP_MASTER_KEY_ENV);
        return GW_ENOTFOUND;
    }
    return cp_master_key_parse(v, out, err, errlen);
}

void cp_master_key_clear(struct cp_master_key *k)
{
    if (k)
        OPENSSL_cleanse(k, sizeof(*k));
}

void cp_secret_free(void *p, size_t len)
{
    if (!p)
        return;
    OPENSSL_cleanse(p, len + 1);
    free(p);
}

static int valid_ref(const char *ref, size_t *rlen)
{
    if (!ref)
        return 0;
    *rlen = strnlen(ref, CP_SECRET_REF_MAX + 1);
    return *rlen > 0 && *rlen <= CP_SECRET_REF_MAX;
}

/* AAD = version byte | ref. */
static int add_aad(EVP_CIPHER_CTX *c, unsigned char version, const char *ref, size_t rlen)
{
    int outl;
    return EVP_CipherUpdate(c, NULL, &outl, &version, 1) == 1 &&
           EVP_CipherUpdate(c, NULL, &outl, (const unsigned char *)ref, (int)rlen) == 1;
}

int cp_secret_seal(const struct cp_master_key *key, const char *ref, const void *plaintext,
                   size_t len, unsigned char **blob, size_t *bloblen)
{
    *blob = NULL;
    *bloblen = 0;
    size_t rlen;
    if (!valid_ref(ref, &rlen) || len > CP_SECRET_MAX_PLAINTEXT || (!plaintext && len))
        return GW_EINVAL;
    size_t total = len + CP_SECRET_OVERHEAD;
    unsigned char *b = malloc(total);
    if (!b)
        return GW_ENOMEM;
    b[0] = CP_SECRET_BLOB_V1;
    unsigned char *nonce = b + 1, *ct = nonce + CP_SECRET_NONCE_LEN, *tag = ct + len;
    if (gw_random_bytes(nonce, CP_SECRET_NONCE_LEN) != GW_OK) {
        free(b);
        return GW_EIO;
    }
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) {
        free(b);
        return GW_ENOMEM;
    }
    int outl = 0, finl = 0;
    int ok = EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, CP_SECRET_NONCE_LEN, NULL) == 1 &&
             EVP_EncryptInit_ex(c, NULL, NULL, key->key, nonce) == 1 &&
             add_aad(c, CP_SECRET_BLOB_V1, ref, rlen) &&
             (len == 0 || EVP_EncryptUpdate(c, ct, &outl, plaintext, (int)len) == 1) &&
             EVP_EncryptFinal_ex(c, ct + outl, &finl) == 1 && (size_t)(outl + finl) == len &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, CP_SECRET_TAG_LEN, tag) == 1;
    EVP_CIPHER_CTX_free(c);
    if (!ok) {
        OPENSSL_cleanse(b, total);
        free(b);
        return GW_EIO;
    }
    *blob = b;
    *bloblen = total;
    return GW_OK;
}

int cp_secret_open(const struct cp_master_key *key, const char *ref, const unsigned char *blob,
                   size_t bloblen, char **plaintext, size_t *len)
{
    *plaintext = NULL;
    *len = 0;
    size_t rlen;
    if (!valid_ref(ref, &rlen) || !blob || bloblen < CP_SECRET_OVERHEAD ||
        bloblen - CP_SECRET_OVERHEAD > CP_SECRET_MAX_PLAINTEXT || blob[0] != CP_SECRET_BLOB_V1)
        return GW_EINVAL;
    size_t ptlen = bloblen - CP_SECRET_OVERHEAD;
    const unsigned char *nonce = blob + 1, *ct = nonce + CP_SECRET_NONCE_LEN, *tag = ct + ptlen;
    unsigned char *pt = malloc(ptlen + 1);
    if (!pt)
        return GW_ENOMEM;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    if (!c) {
        free(pt);
        return GW_ENOMEM;
    }
    int outl = 0, finl = 0;
    int setup = EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL) == 1 &&
                EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, CP_SECRET_NONCE_LEN, NULL) == 1 &&
                EVP_DecryptInit_ex(c, NULL, NULL, key->key, nonce) == 1 &&
                add_aad(c, blob[0], ref, rlen) &&
                (ptlen == 0 || EVP_DecryptUpdate(c, pt, &outl, ct, (int)ptlen) == 1) &&
                EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, CP_SECRET_TAG_LEN, (void *)tag) == 1;
    /* Only the final step checks the tag: a failure there is an
     * authentication failure, not a cipher error. */
    int authentic = setup && EVP_DecryptFinal_ex(c, pt + outl, &finl) == 1;
    EVP_CIPHER_CTX_free(c);
    if (!setup || !authentic) {
        OPENSSL_cleanse(pt, ptlen + 1);
        free(pt);
        return setup ? GW_EINVAL : GW_EIO;
    }
    pt[ptlen] = '\0';
    *plaintext = (char *)pt;
    *len = ptlen;
    return GW_OK;
}

int cp_secret_rewrap(const struct cp_master_key *old_key, const struct cp_master_key *new_key,
                     const char *ref, const unsigned char *blob, size_t bloblen,
                     unsigned char **newblob, size_t *newlen)
{
    *newblob = NULL;
    *newlen = 0;
    char *pt;
    size_t ptlen;
    int rc = cp_secret_open(old_key, ref, blob, bloblen, &pt, &ptlen);
    if (rc != GW_OK)
        return rc;
    rc = cp_secret_seal(new_key, ref, pt, ptlen, newblob, newlen);
    cp_secret_free(pt, ptlen);
    return rc;
}
