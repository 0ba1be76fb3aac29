/*
 * dp_cache_key: what the response cache may keep, under which key, and in
 * which form (docs/cache.md; the store itself is dp_cache.h).
 *
 * Three decisions, all pure functions of their arguments:
 *
 *   dp_cache_cacheable   whether a chat request (chat, Messages, stateless
 *                        Responses) may be answered from the cache: only a
 *                        deterministic one. Embeddings are always
 *                        deterministic and have their own key function.
 *   dp_cache_key         the 32-byte SHA-256 key of a request as one tenant
 *                        scope, one route (and its fingerprint) and one
 *                        target would send it. Every field that can change
 *                        the answer is in it, each prefixed with its length
 *                        (every list with its count, an absent string told
 *                        from an empty one), so two different requests never
 *                        share a key by shifting a boundary.
 *   dp_cache_encode      the canonical answer (struct canon_acc) as a
 *   dp_cache_replay      compact blob, and the blob back as the canonical
 *                        events (canon.h's grammar), so any facade renders a
 *                        cached answer as a live one, streamed or whole.
 *
 * What the key leaves out, on purpose: how the answer is delivered (stream,
 * include_usage), the model selector as the client wrote it (the route and
 * the target that answered say what it meant), the end-user ids (user,
 * safety_identifier: the scope is the tenancy boundary) and the facade's
 * field names.
 *
 * The blob (version 2), little-endian, every length bounded by the blob:
 *
 *   "LGWC" u8 version=2
 *   i64 created_ms, i64 cost_picodollars,    (struct dp_cache_meta: what
 *   u8 has_cost, str currency                 the original answer cost)
 *   str model, str service_tier              (str: u32 len + bytes;
 *   u8 stop                                   len 0xffffffff is NULL)
 *   u8 usage.have, 6 x i64 usage              (input, cache_read,
 *                                              cache_write_5m, cache_write_1h,
 *                                              output, reasoning)
 *   str text
 *   u32 nthinks, each: u8 redacted, str text, str signature
 *   u32 ntools,  each: str id, str name, str arguments
 *   u32 ncitations, each: u64 at (bytes of text before it), str citation
 *   u64 FNV-1a of every byte before it
 *
 * The checksum makes any changed byte a refusal (FNV-1a maps two inputs
 * that differ in one byte to different sums), so a blob damaged in memory is
 * never replayed as a different answer; the lengths are checked anyway, and
 * a blob is checked whole before its first event is emitted.
 */
#ifndef DP_CACHE_KEY_H
#define DP_CACHE_KEY_H

#include <stddef.h>

#include "canon.h"
#include "dp_cache.h"    /* DP_CACHE_KEY_BYTES: the key's size, a SHA-256 */
#include "dp_snapshot.h" /* enum dp_cache_scope */

/* Where a request goes, as the key sees it. Strings may be NULL (told from
 * ""); route_fp is any byte string that changes when the route is edited. */
struct dp_cache_where {
    enum dp_cache_scope scope;
    const char *scope_id;
    const char *route;
    const void *route_fp;
    size_t route_fp_len;
    const char *provider; /* the target that answers */
    const char *model;
};

/* 1 when r may be answered from the cache, else 0 with *why (a static
 * string, may be NULL) saying why not. Deterministic only: temperature 0,
 * or temperature absent on a route the operator marked deterministic;
 * never when log probabilities are asked (they vary) or when the lenient
 * parse left something out of r (the key could not see it). */
int dp_cache_cacheable(const struct canon_req *r, int route_deterministic, const char **why);

/* The key in two steps, so a request planned over several targets hashes
 * its content once: the digest of what is asked (no scope, route or
 * target), then the key of that digest sent to w. */
int dp_cache_digest(const struct canon_req *r, unsigned char out[DP_CACHE_KEY_BYTES])
    __attribute__((warn_unused_result));
int dp_cache_digest_embed(const struct canon_embed_req *r, unsigned char out[DP_CACHE_KEY_BYTES])
    __attribute__((warn_unused_result));
int dp_cache_key_at(const struct dp_cache_where *w, const unsigned char digest[DP_CACHE_KEY_BYTES],
                    unsigned char out[DP_CACHE_KEY_BYTES]) __attribute__((warn_unused_result));

/* The key of r sent to w into out (the digest, then dp_cache_key_at). 0, GW_ENOMEM, or GW_EINVAL (a
 * tool's parameters or the format schema cannot be serialized). */
int dp_cache_key(const struct dp_cache_where *w, const struct canon_req *r,
                 unsigned char out[DP_CACHE_KEY_BYTES]) __attribute__((warn_unused_result));
/* The key of an embeddings request (a key of its own domain: never equal to
 * a chat key). */
int dp_cache_key_embed(const struct dp_cache_where *w, const struct canon_embed_req *r,
                       unsigned char out[DP_CACHE_KEY_BYTES]) __attribute__((warn_unused_result));

/* What a blob says of the answer besides its events: when it was made
 * (wall-clock ms, for Age) and what its attempt cost (for the ledger's
 * saved cost). */
struct dp_cache_meta {
    int64_t created_ms;
    int64_t cost_picodollars;
    int has_cost;
    char currency[4];
};

/* The meta-data of a blob (either kind), after checking its frame and
 * checksum: 0 or GW_EINVAL. */
int dp_cache_meta_read(const unsigned char *blob, size_t len, struct dp_cache_meta *m)
    __attribute__((warn_unused_result));

/* The answer in acc (done: DONE was applied), with meta (NULL: zeros), as a blob of at most max
 * bytes (0: no bound but the format's), malloc'd into *blob / *len, owned by the caller. The
 * upstream response id is not kept: a replay is a new response, and its START carries no id
 * (facades mint one). GW_EINVAL when acc is not done or carries log probabilities (never
 * cacheable), GW_ELIMIT past max, GW_ENOMEM. On failure *blob is NULL. */
int dp_cache_encode(const struct canon_acc *acc, const struct dp_cache_meta *meta, size_t max,
                    unsigned char **blob, size_t *len) __attribute__((warn_unused_result));

/* An answer kept as the client's bytes (embeddings: their rendering is
 * fixed by the request, base64 or not, which is in the key): the blob
 * "LGWB" u8 version=1, the meta as above, str body, u64 FNV-1a. */
int dp_cache_encode_body(const void *body, size_t n, const struct dp_cache_meta *meta, size_t max,
                         unsigned char **blob, size_t *len) __attribute__((warn_unused_result));
/* The body of such a blob (pointing into it), after checking it whole: 0
 * or GW_EINVAL. */
int dp_cache_body(const unsigned char *blob, size_t len, const char **body, size_t *n)
    __attribute__((warn_unused_result));

/* Emits the answer in blob as canonical events to s: START (model, tier),
 * USAGE (when any), each reasoning block (text, then its signature; a
 * redacted block whole), the text (one CHUNK, split at citations), each
 * tool call (TOOL_START, one TOOL_DELTA, TOOL_END), USAGE, DONE. The blob
 * is checked whole first: GW_EINVAL for a malformed one, and then nothing
 * was emitted. GW_ECLOSED when the sink stopped before DONE, else 0. The
 * blob is only read, and only within len. */
int dp_cache_replay(const unsigned char *blob, size_t len, const struct canon_sink *s)
    __attribute__((warn_unused_result));

#endif
