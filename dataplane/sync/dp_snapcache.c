#include "dp_snapcache.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dp_snapshot.h"
#include "gw_codec.h"
#include "gw_crypto.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

#define NONCE_LEN 12
#define TAG_LEN 16
#define MAX_CREDENTIAL 16384
#define MAX_HEADERS 65536 /* a provider's headers object, as compact JSON */

/* Base64 into out (capacity cap): the byte count, or -1 (empty, not base64,
 * or too long). */
static long b64_decode(const char *in, size_t n, unsigned char *out, size_t cap)
{
    size_t len = 0;
    return n && gw_b64_decode(in, n, out, cap, &len) == GW_OK ? (long)len : -1;
}

/* AES-256-GCM. seal: out gets nonce || ciphertext || tag. open: the
 * plaintext length, or -1 when the tag does not verify. */
static int seal(const unsigned char *key, const char *aad, size_t aadlen, const void *pt, size_t n,
                unsigned char *out)
{
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int len = 0,
        ok = c && gw_random_bytes(out, NONCE_LEN) == GW_OK &&
             EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, out) == 1 &&
             EVP_EncryptUpdate(c, NULL, &len, (const unsigned char *)aad, (int)aadlen) == 1 &&
             EVP_EncryptUpdate(c, out + NONCE_LEN, &len, pt, (int)n) == 1 &&
             EVP_EncryptFinal_ex(c, out + NONCE_LEN + len, &len) == 1 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, out + NONCE_LEN + n) == 1;
    EVP_CIPHER_CTX_free(c);
    return ok ? GW_OK : GW_EIO;
}

static long open_sealed(const unsigned char *key, const char *aad, size_t aadlen,
                        const unsigned char *in, size_t n, unsigned char *out)
{
    if (n < NONCE_LEN + TAG_LEN)
        return -1;
    size_t ctlen = n - NONCE_LEN - TAG_LEN;
    EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
    int len = 0, fin = 0;
    int ok = c && EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, key, in) == 1 &&
             EVP_DecryptUpdate(c, NULL, &len, (const unsigned char *)aad, (int)aadlen) == 1 &&
             EVP_DecryptUpdate(c, out, &len, in + NONCE_LEN, (int)ctlen) == 1 &&
             EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN,
                                 (void *)(in + NONCE_LEN + ctlen)) == 1 &&
             EVP_DecryptFinal_ex(c, out + len, &fin) == 1;
    EVP_CIPHER_CTX_free(c);
    return ok ? (long)(len + fin) : -1;
}

int dp_snapcache_auth_header(const char *name)
{
    static const char *const exact[] = {"authorization", "proxy-authorization", "x-api-key",
                                        "api-key", "x-goog-api-key"};
    static const char *const parts[] = {"auth", "token", "secret", "key", "cookie", "password"};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++)
        if (strcasecmp(name, exact[i]) == 0)
            return 1;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
        if (strcasestr(name, parts[i]))
            return 1;
    return 0;
}

/* The additional authenticated data of a provider's sealed headers:
 * "<name>\0headers", so neither another provider's blob nor its sealed
 * credential opens as these headers. The length, or 0 when it does not fit. */
static size_t headers_aad(const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);
    if (n + sizeof("headers") > cap)
        return 0;
    memcpy(out, name, n);
    out[n] = '\0';
    memcpy(out + n + 1, "headers", sizeof("headers") - 1);
    return n + sizeof("headers");
}

/* Replaces p's "headers" with "headers_sealed" (key) or drops the
 * auth-bearing ones (no key, each logged by name, never by value). 0, or -1
 * with err filled. */
static int encode_headers(json_t *p, size_t i, const char *name, const unsigned char *key,
                          char *err, size_t errlen)
{
    json_t *h = json_object_get(p, "headers");
    if (!json_is_object(h) || json_object_size(h) == 0)
        return 0;
    if (!key) {
        void *it = json_object_iter(h);
        while (it) {
            const char *k = json_object_iter_key(it);
            void *next = json_object_iter_next(h, it);
            if (dp_snapcache_auth_header(k)) {
                gw_logf(GW_LOG_WARN,
                        "snapshot cache: a provider header that may carry a credential is left "
                        "out (LLMGW_CACHE_KEY is not set)",
                        "{s:s,s:s}", "provider", name ? name : "?", "header", k);
                json_object_del(h, k);
            }
            it = next;
        }
        return 0;
    }
    char aad[512];
    size_t aadlen = name ? headers_aad(name, aad, sizeof(aad)) : 0;
    char *text = json_dumps(h, JSON_COMPACT | JSON_SORT_KEYS);
    size_t n = text ? strlen(text) : 0;
    unsigned char *sealed = NULL;
    char *b64 = NULL;
    int rc = -1;
    if (!aadlen || !text || n > MAX_HEADERS) {
        snprintf(err, errlen, "providers[%zu]: cannot cache its headers", i);
        goto out;
    }
    sealed = malloc(NONCE_LEN + n + TAG_LEN);
    b64 = malloc(gw_b64_len(NONCE_LEN + n + TAG_LEN) + 1);
    if (!sealed || !b64 || seal(key, aad, aadlen, text, n, sealed) != GW_OK) {
        snprintf(err, errlen, "providers[%zu]: encryption failed", i);
        goto out;
    }
    gw_b64_encode(sealed, NONCE_LEN + n + TAG_LEN, b64);
    json_object_set_new(p, "headers_sealed", json_string(b64));
    json_object_del(p, "headers");
    rc = 0;
out:
    if (text) {
        OPENSSL_cleanse(text, n);
        free(text);
    }
    if (sealed) {
        OPENSSL_cleanse(sealed, NONCE_LEN + n + TAG_LEN);
        free(sealed);
    }
    free(b64);
    return rc;
}

/* Replaces p's "headers_sealed" with the "headers" it opens to; one that
 * does not open is left out and logged. */
static void decode_headers(json_t *p, const char *name, const unsigned char *key)
{
    json_t *s = json_object_get(p, "headers_sealed");
    if (!s)
        return;
    json_object_del(p, "headers"); /* never alongside a sealed one */
    const char *b64 = json_string_value(s);
    size_t blen = b64 ? strlen(b64) : 0;
    unsigned char *sealed = blen ? malloc(blen / 4 * 3 + 3) : NULL;
    unsigned char *pt = blen ? malloc(blen / 4 * 3 + 1) : NULL;
    char aad[512];
    size_t aadlen = name ? headers_aad(name, aad, sizeof(aad)) : 0;
    long sl = sealed && pt ? b64_decode(b64, blen, sealed, blen / 4 * 3 + 3) : -1;
    long pl = key && aadlen && sl > 0 ? open_sealed(key, aad, aadlen, sealed, (size_t)sl, pt) : -1;
    json_t *h =
        pl >= 0 ? json_loadb((const char *)pt, (size_t)pl, JSON_REJECT_DUPLICATES, NULL) : NULL;
    if (json_is_object(h)) {
        json_object_set_new(p, "headers", h);
    } else {
        json_decref(h);
        gw_logf(GW_LOG_WARN,
                key ? "snapshot cache: a provider's headers do not open with LLMGW_CACHE_KEY; "
                      "the provider has none"
                    : "snapshot cache: provider headers are encrypted and LLMGW_CACHE_KEY is not "
                      "set; the provider has none",
                "{s:s}", "provider", name ? name : "?");
    }
    if (pt) {
        OPENSSL_cleanse(pt, blen / 4 * 3 + 1);
        free(pt);
    }
    if (sealed) {
        OPENSSL_cleanse(sealed, blen / 4 * 3 + 3);
        free(sealed);
    }
    json_object_del(p, "headers_sealed");
}

/* The whole cached document's MAC, base64 into out: HMAC-SHA256 under a
 * key derived from the cache key for this one use, over the document's
 * canonical text (sorted keys, compact) without llmgw_cache.mac itself. So
 * whoever can write the file but has not the key can change nothing in
 * it (a provider's base_url least of all: the credential would follow it). */
#define MAC_B64_LEN 44
static int doc_mac(const json_t *doc, const unsigned char *key, char out[MAC_B64_LEN + 1])
{
    static const char label[] = "llmgw snapshot cache mac v1";
    unsigned char mk[32], tag[32];
    unsigned int mkl = 0, tl = 0;
    json_t *copy = json_deep_copy(doc);
    json_object_del(json_object_get(copy, "llmgw_cache"), "mac");
    char *text = copy ? json_dumps(copy, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(copy);
    int ok =
        text &&
        HMAC(EVP_sha256(), key, DP_CACHE_KEY_LEN, (const unsigned char *)label, sizeof(label) - 1,
             mk, &mkl) &&
        HMAC(EVP_sha256(), mk, (int)mkl, (const unsigned char *)text, strlen(text), tag, &tl) &&
        tl == sizeof(tag);
    free(text);
    OPENSSL_cleanse(mk, sizeof(mk));
    if (!ok)
        return GW_ENOMEM;
    gw_b64_encode(tag, sizeof(tag), out);
    return GW_OK;
}

json_t *dp_snapcache_encode(const json_t *doc, const unsigned char *key, int *omitted, char *err,
                            size_t errlen)
{
    if (omitted)
        *omitted = 0;
    json_t *out = json_deep_copy(doc);
    json_t *provs = json_object_get(out, "providers");
    if (!out || !json_is_object(out)) {
        snprintf(err, errlen, "snapshot: must be a JSON object");
        json_decref(out);
        return NULL;
    }
    size_t i;
    json_t *p;
    json_array_foreach(provs, i, p)
    {
        const char *name = json_string_value(json_object_get(p, "name"));
        if (encode_headers(p, i, name, key, err, errlen) != 0) {
            json_decref(out);
            return NULL;
        }
        json_t *cred = json_object_get(p, "credential");
        if (!json_is_string(cred))
            continue;
        size_t n = json_string_length(cred);
        if (!name || n > MAX_CREDENTIAL) {
            snprintf(err, errlen, "providers[%zu]: cannot cache its credential", i);
            json_decref(out);
            return NULL;
        }
        if (key) {
            unsigned char sealed[NONCE_LEN + MAX_CREDENTIAL + TAG_LEN];
            char b64[(sizeof(sealed) + 2) / 3 * 4 + 1];
            if (seal(key, name, strlen(name), json_string_value(cred), n, sealed) != GW_OK) {
                snprintf(err, errlen, "providers[%zu]: encryption failed", i);
                json_decref(out);
                return NULL;
            }
            gw_b64_encode(sealed, NONCE_LEN + n + TAG_LEN, b64);
            json_object_set_new(p, "credential_sealed", json_string(b64));
            OPENSSL_cleanse(sealed, sizeof(sealed));
        } else {
            json_object_set_new(p, "credential_omitted", json_true());
            if (!json_is_string(json_object_get(p, "credential_ref")))
                json_object_set_new(p, "credential_ref", json_string("cache:omitted"));
            if (omitted)
                (*omitted)++;
        }
        json_object_del(p, "credential");
    }
    json_object_set_new(out, "llmgw_cache",
                        json_pack("{s:i,s:s,s:s,s:I}", "format", 1, "credentials",
                                  key ? "sealed" : "omitted", "headers",
                                  key ? "sealed" : "auth_omitted", "received_ms",
                                  (json_int_t)gw_wall_ms()));
    char mac[MAC_B64_LEN + 1];
    if (key && doc_mac(out, key, mac) != GW_OK) {
        snprintf(err, errlen, "snapshot cache: cannot compute its MAC");
        json_decref(out);
        return NULL;
    }
    if (key)
        json_object_set_new(json_object_get(out, "llmgw_cache"), "mac", json_string(mac));
    return out;
}

int dp_snapcache_verify(const json_t *cached, const unsigned char *key, char *err, size_t errlen)
{
    if (!key)
        return GW_OK;
    const char *want =
        json_string_value(json_object_get(json_object_get(cached, "llmgw_cache"), "mac"));
    char mac[MAC_B64_LEN + 1];
    if (!want || strlen(want) != MAC_B64_LEN || doc_mac(cached, key, mac) != GW_OK ||
        CRYPTO_memcmp(want, mac, MAC_B64_LEN) != 0) {
        snprintf(err, errlen,
                 "snapshot cache: fails its integrity check (llmgw_cache.mac): it was changed, "
                 "or written without LLMGW_CACHE_KEY or under another key");
        return GW_EINVAL;
    }
    return GW_OK;
}

json_t *dp_snapcache_decode(const json_t *cached, const unsigned char *key, char *err,
                            size_t errlen)
{
    json_t *out = json_deep_copy(cached);
    if (!out || !json_is_object(out)) {
        snprintf(err, errlen, "snapshot cache: must be a JSON object");
        json_decref(out);
        return NULL;
    }
    json_object_del(out, "llmgw_cache");
    size_t i;
    json_t *p;
    json_array_foreach(json_object_get(out, "providers"), i, p)
    {
        json_object_del(p, "credential"); /* a cache never holds one in plaintext */
        json_object_del(p, "credential_omitted");
        const char *name = json_string_value(json_object_get(p, "name"));
        decode_headers(p, name, key);
        json_t *s = json_object_get(p, "credential_sealed");
        if (!s)
            continue;
        const char *b64 = json_string_value(s);
        unsigned char sealed[NONCE_LEN + MAX_CREDENTIAL + TAG_LEN];
        unsigned char pt[MAX_CREDENTIAL + 1];
        long sl = b64 ? b64_decode(b64, strlen(b64), sealed, sizeof(sealed)) : -1;
        long pl = key && name && sl > 0
                      ? open_sealed(key, name, strlen(name), sealed, (size_t)sl, pt)
                      : -1;
        if (pl >= 0) {
            json_object_set_new(p, "credential", json_stringn((const char *)pt, (size_t)pl));
            OPENSSL_cleanse(pt, sizeof(pt));
        } else {
            gw_logf(GW_LOG_WARN,
                    key ? "snapshot cache: a credential does not open with LLMGW_CACHE_KEY; the "
                          "provider has none"
                        : "snapshot cache: credentials are encrypted and LLMGW_CACHE_KEY is not "
                          "set; the provider has none",
                    "{s:s}", "provider", name ? name : "?");
            if (!json_is_string(json_object_get(p, "credential_ref")))
                json_object_set_new(p, "credential_ref", json_string("cache:sealed"));
        }
        json_object_del(p, "credential_sealed");
    }
    return out;
}

int dp_snapcache_check_age(const json_t *cached, int64_t now_ms, int64_t max_age_ms, char *err,
                           size_t errlen)
{
    if (max_age_ms <= 0)
        return GW_OK;
    json_t *t = json_object_get(json_object_get(cached, "llmgw_cache"), "received_ms");
    if (!json_is_integer(t) || json_integer_value(t) <= 0) {
        snprintf(err, errlen,
                 "snapshot cache too old: it does not record when it was received "
                 "(llmgw_cache.received_ms)");
        return GW_EINVAL;
    }
    int64_t received = (int64_t)json_integer_value(t);
    if (received > now_ms && received - now_ms > max_age_ms) {
        snprintf(err, errlen,
                 "snapshot cache too old to trust: received %lld ms in the future (clock moved "
                 "back?), more than the maximum age of %lld ms",
                 (long long)(received - now_ms), (long long)max_age_ms);
        return GW_EINVAL;
    }
    if (received < now_ms && now_ms - received > max_age_ms) {
        snprintf(err, errlen,
                 "snapshot cache too old: received %lld ms ago, more than the maximum age of "
                 "%lld ms (--snapshot-cache-max-age-ms)",
                 (long long)(now_ms - received), (long long)max_age_ms);
        return GW_EINVAL;
    }
    return GW_OK;
}

int dp_snapcache_save(const char *path, const json_t *doc, const unsigned char *key, char *err,
                      size_t errlen)
{
    int omitted = 0;
    json_t *c = dp_snapcache_encode(doc, key, &omitted, err, errlen);
    if (!c)
        return GW_EINVAL;
    char *text = json_dumps(c, JSON_COMPACT);
    json_decref(c);
    if (!text) {
        snprintf(err, errlen, "out of memory");
        return GW_ENOMEM;
    }
    char tmp[4096];
    int rc = GW_EIO;
    int fd = -1;
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path) >= sizeof(tmp)) {
        snprintf(err, errlen, "snapshot cache: path too long");
        goto out;
    }
    fd = mkstemp(tmp);
    if (fd < 0) {
        snprintf(err, errlen, "snapshot cache: cannot create a file next to '%s': %s", path,
                 strerror(errno));
        goto out;
    }
    size_t len = strlen(text), off = 0;
    if (fchmod(fd, 0600) != 0)
        goto io;
    while (off < len) {
        ssize_t w = write(fd, text + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            goto io;
        off += (size_t)w;
    }
    /* Closed whatever fsync says: a disk that keeps failing must not leak
     * a descriptor per pushed snapshot. */
    int synced = fsync(fd) == 0;
    int closed = close(fd) == 0;
    fd = -1;
    if (!synced || !closed)
        goto io;
    if (rename(tmp, path) != 0)
        goto io;
    /* The rename itself is durable once the directory is synced. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        (void)fsync(dfd);
        close(dfd);
    }
    rc = GW_OK;
    if (omitted)
        gw_logf(GW_LOG_WARN,
                "snapshot cache written without credentials (LLMGW_CACHE_KEY is not set): a data "
                "plane started from it has none for these providers",
                "{s:i}", "providers_without_credential", omitted);
    goto out;
io:
    snprintf(err, errlen, "snapshot cache: cannot write '%s': %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    unlink(tmp);
out:
    free(text);
    return rc;
}

struct dp_snapshot *dp_snapcache_load(const char *path, const unsigned char *key,
                                      int64_t max_age_ms, int *missing, int *stale, char *err,
                                      size_t errlen)
{
    *missing = 0;
    if (stale)
        *stale = 0;
    json_error_t je;
    json_t *c = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!c) {
        *missing = access(path, F_OK) != 0 && errno == ENOENT;
        /* Not je.text: it can quote the file, and the file holds header
         * values. */
        snprintf(err, errlen, "%s: not a readable snapshot cache (line %d column %d)", path,
                 je.line, je.column);
        return NULL;
    }
    /* Integrity first: nothing of a changed file (its age included) is
     * believed. */
    if (dp_snapcache_verify(c, key, err, errlen) != GW_OK) {
        json_decref(c);
        return NULL;
    }
    if (dp_snapcache_check_age(c, gw_wall_ms(), max_age_ms, err, errlen) != GW_OK) {
        if (stale)
            *stale = 1;
        json_decref(c);
        return NULL;
    }
    json_t *doc = dp_snapcache_decode(c, key, err, errlen);
    json_decref(c);
    if (!doc)
        return NULL;
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, errlen);
    json_decref(doc);
    if (s)
        s->source = "cache";
    return s;
}
