/*
 * cp_secrets: sealing for the built-in secret backend.
 *
 * The control plane stores provider credentials in Postgres as AES-256-GCM
 * ciphertext under one master key, LLMGW_MASTER_KEY, the only credential in
 * its environment. This module owns that cryptography and nothing else: the
 * store reads and writes the rows, the snapshot builder opens them.
 *
 * A sealed blob is
 *
 *     version (1 byte, CP_SECRET_BLOB_V1) | nonce (12) | ciphertext | tag (16)
 *
 * with a fresh random nonce per seal and, as additional authenticated data,
 * the version byte followed by the ref name. A blob therefore opens only
 * under the key that sealed it AND under the ref it was sealed for: a
 * ciphertext copied onto another row, a wrong key, or any changed bit makes
 * cp_secret_open() fail with GW_EINVAL. docs/secrets.md has the threat model.
 *
 * Every plaintext this module hands out is freed with cp_secret_free(),
 * which overwrites it first; key material is overwritten by
 * cp_master_key_clear(). Nothing here logs, and no error message ever
 * contains key or secret bytes.
 */
#ifndef CP_SECRETS_H
#define CP_SECRETS_H

#include <stddef.h>

#define CP_MASTER_KEY_LEN 32
#define CP_MASTER_KEY_ENV "LLMGW_MASTER_KEY"

#define CP_SECRET_BLOB_V1 0x01
#define CP_SECRET_NONCE_LEN 12
#define CP_SECRET_TAG_LEN 16
/* Bytes a blob adds to its plaintext. */
#define CP_SECRET_OVERHEAD (1 + CP_SECRET_NONCE_LEN + CP_SECRET_TAG_LEN)
/* Largest plaintext sealed (a credential, not a document). */
#define CP_SECRET_MAX_PLAINTEXT (64 * 1024)

struct cp_master_key {
    unsigned char key[CP_MASTER_KEY_LEN];
    /* First 8 hex digits of SHA-256(key), NUL-terminated: stored next to each
     * row so an operator can tell which key sealed it. Not secret. */
    char id[9];
};

/*
 * Parses a master key given as 64 hex digits (either case) or as 44
 * characters of standard base64 (RFC 4648 alphabet, '=' padding, canonical
 * trailing bits); surrounding whitespace is ignored. Anything else, and a
 * key of 32 zero bytes (a placeholder, not a key), is GW_EINVAL with a message in err (when err is
 * not NULL) that says what was expected and never quotes the text. On failure *out is zeroed.
 */
int cp_master_key_parse(const char *text, struct cp_master_key *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* cp_master_key_parse(getenv(LLMGW_MASTER_KEY)); GW_ENOTFOUND with a message
 * when the variable is unset or empty. */
int cp_master_key_from_env(struct cp_master_key *out, char *err, size_t errlen)
    __attribute__((warn_unused_result));

/* Overwrites the key (OPENSSL_cleanse). */
void cp_master_key_clear(struct cp_master_key *k);

/*
 * Seals plaintext[0..len) for ref. On success *blob is a malloc'd buffer of
 * *bloblen = len + CP_SECRET_OVERHEAD bytes owned by the caller (free() it:
 * it holds no plaintext). The plaintext is the caller's and is not changed.
 * GW_EINVAL for an empty ref or one over CP_SECRET_REF_MAX (cp_secret_ref.h),
 * or a plaintext over CP_SECRET_MAX_PLAINTEXT; GW_EIO when the random generator or the cipher
 * fails, GW_ENOMEM; on failure *blob is NULL.
 */
int cp_secret_seal(const struct cp_master_key *key, const char *ref, const void *plaintext,
                   size_t len, unsigned char **blob, size_t *bloblen)
    __attribute__((warn_unused_result));

/*
 * Opens a blob sealed for ref. On success *plaintext is a malloc'd buffer
 * of *len bytes plus a NUL (not counted), owned by the caller, to be
 * released with cp_secret_free(*plaintext, *len). GW_EINVAL when the blob
 * does not authenticate (wrong key, another ref, any changed bit), is
 * truncated or has an unknown version; GW_ENOMEM when memory runs out (so
 * a caller can tell a tampered row from a transient failure); GW_EIO when
 * the cipher fails. On failure *plaintext is NULL and no partial
 * plaintext survives in memory.
 */
int cp_secret_open(const struct cp_master_key *key, const char *ref, const unsigned char *blob,
                   size_t bloblen, char **plaintext, size_t *len)
    __attribute__((warn_unused_result));

/*
 * Master-key rotation for one row: opens blob with old_key and seals the
 * plaintext again for the same ref under new_key, with a fresh nonce.
 * *newblob is malloc'd and owned by the caller (free()). Errors as
 * cp_secret_open() and cp_secret_seal(); the input blob is never changed,
 * so a store that rewraps every row inside one transaction can roll back.
 */
int cp_secret_rewrap(const struct cp_master_key *old_key, const struct cp_master_key *new_key,
                     const char *ref, const unsigned char *blob, size_t bloblen,
                     unsigned char **newblob, size_t *newlen) __attribute__((warn_unused_result));

/* Overwrites p[0..len] (the NUL too) and frees it; NULL is a no-op. For
 * every plaintext returned by this module and by cp_secret_resolve(). */
void cp_secret_free(void *p, size_t len);

#endif
