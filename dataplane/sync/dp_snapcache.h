/*
 * dp_snapcache: the data plane's last good pushed snapshot on local disk,
 * so that a data plane that starts while the control plane is unreachable
 * still serves (docs/dataplane.md, "Control plane").
 *
 * A pushed document carries plaintext credentials, which must never reach
 * the disk (ARCHITECTURE invariant 8). The cached form replaces each
 * provider's "credential" with "credential_sealed": base64 of nonce (12) ||
 * AES-256-GCM ciphertext || tag (16) under LLMGW_CACHE_KEY, the provider's
 * name as additional authenticated data (a value moved onto another
 * provider does not open). Without a key the credential is left out
 * ("credential_omitted": true, and a credential_ref so the router reports
 * the provider as having no credential rather than calling it without one).
 * Provider "headers" may carry credentials too (authorization, x-api-key,
 * ...): with a key the whole object is sealed the same way into
 * "headers_sealed" (compact JSON; additional authenticated data
 * "<name>\0headers", distinct from the credential's), without one each
 * header whose name is auth-bearing (dp_snapcache_auth_header) is left out
 * and logged by provider and header name, never by value.
 * A top-level "llmgw_cache" object says which, and "received_ms": when
 * (wall clock, ms since the epoch) the cached snapshot was received, so a
 * cache too old to trust is not served (dp_snapcache_check_age).
 */
#ifndef DP_SNAPCACHE_H
#define DP_SNAPCACHE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

struct dp_snapshot;

#define DP_CACHE_KEY_LEN 32 /* parsed by gw_key32_parse (gw_codec.h) */

/* 1 when a header name may carry a credential: authorization,
 * proxy-authorization, x-api-key, api-key, x-goog-api-key, or any name
 * containing "auth", "token", "secret", "key", "cookie" or "password"
 * (case-insensitive). */
int dp_snapcache_auth_header(const char *name);

/* The cached form of a pushed document (a new reference), or NULL with err
 * filled. key NULL: credentials are left out; *omitted (may be NULL)
 * counts them. */
json_t *dp_snapcache_encode(const json_t *doc, const unsigned char *key, int *omitted, char *err,
                            size_t errlen);
/* With a key, whether the whole cached document is as that key wrote it
 * (llmgw_cache.mac: HMAC-SHA256 under a key derived from it, over the
 * document's canonical text): GW_OK, or GW_EINVAL with err filled when it
 * was changed, has no MAC (written without a key) or was written under
 * another key. Without a key there is nothing to check it with (GW_OK): the
 * cache then holds no credential, and its file's mode (0600) guards it.
 * dp_snapcache_load serves nothing that fails it. */
int dp_snapcache_verify(const json_t *cached, const unsigned char *key, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* The pushed form of a cached document: sealed credentials opened with key
 * (dp_snapcache_verify not included: dp_snapcache_load calls both).
 * A credential that cannot be opened (no key, another key, tampered) is
 * left out and logged, never fatal. New reference, or NULL with err. */
json_t *dp_snapcache_decode(const json_t *cached, const unsigned char *key, char *err,
                            size_t errlen);

/* Whether a cached document (its "llmgw_cache" object) may be served at
 * now_ms under max_age_ms (0: no limit). GW_OK, or GW_EINVAL with err
 * filled when the timestamp is missing or invalid, older than max_age_ms,
 * or further than max_age_ms in the future (a clock that moved back that far
 * says nothing about its age). */
int dp_snapcache_check_age(const json_t *cached, int64_t now_ms, int64_t max_age_ms, char *err,
                           size_t errlen) __attribute__((warn_unused_result));

/* Writes the cached form of doc to path atomically: a temporary file in the
 * same directory, mode 0600, fsync, rename, fsync of the directory. 0 or a
 * GW_E code with err filled; a failure leaves the previous file intact. */
int dp_snapcache_save(const char *path, const json_t *doc, const unsigned char *key, char *err,
                      size_t errlen) __attribute__((warn_unused_result));
/* Reads, checks the age of (dp_snapcache_check_age, max_age_ms 0: no
 * limit), decodes and builds the cached snapshot (source "cache"); NULL
 * with err filled (GW_ENOTFOUND-like: *missing set when there is no file;
 * *stale, may be NULL, set when it is too old). */
struct dp_snapshot *dp_snapcache_load(const char *path, const unsigned char *key,
                                      int64_t max_age_ms, int *missing, int *stale, char *err,
                                      size_t errlen);

#endif
