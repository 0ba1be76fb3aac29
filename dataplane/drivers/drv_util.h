/*
 * drv_util: pieces every driver needs: keeping tool calls in the canonical
 * order (one open call at a time, indexes 0, 1, ... in order of appearance)
 * whatever indexes or ids the provider uses, and reading embedding vectors.
 */
#ifndef DRV_UTIL_H
#define DRV_UTIL_H

#include <jansson.h>

#include "canon.h"

#define DRV_MAX_TOOL_CALLS 128

struct drv_tools {
    int open;           /* 1 while a call is open */
    long long open_key; /* the provider's key of the open call */
    int open_args;      /* the open call has had argument bytes */
    int count;          /* calls started */
    long long keys[DRV_MAX_TOOL_CALLS];
};

/*
 * A piece of the tool call the provider identifies by key (its index). A
 * new key closes the open call and starts the next (id: the provider's, or
 * "call_<n>"); args, when non-empty, is emitted as a TOOL_DELTA. Returns 0,
 * 1 when the sink stopped, or GW_EINVAL when the key belongs to a call
 * already closed (interleaving) or there are too many calls.
 */
int drv_tools_delta(struct drv_tools *t, long long key, const char *id, const char *name,
                    const char *args, const struct canon_sink *s);
/* Ends the open call, if any (a call that had no arguments gets "{}").
 * Returns nonzero when the sink stopped. */
int drv_tools_close(struct drv_tools *t, const struct canon_sink *s);

/* Reads an array of vectors: each element is an object whose member key is
 * an array of numbers (or, with key NULL, the array itself). All must have
 * the same length. Fills out->values/nvec/dim. 0 or GW_EINVAL (msg says
 * why) or GW_ENOMEM. */
int drv_embed_vectors(const json_t *items, const char *key, struct canon_embed_resp *out, char *msg,
                      size_t msglen);

#endif
