/*
 * dp_snapshot's private part: what the build (dp_snapshot.c), the field
 * readers (dp_snapshot_fields.c) and the lookups (dp_snapshot_lookup.c)
 * share. Not for other modules.
 */
#ifndef DP_SNAPSHOT_INT_H
#define DP_SNAPSHOT_INT_H

#include <jansson.h>
#include <stddef.h>

#include "dp_snapshot.h"

struct build {
    struct gw_pool *pool;
    unsigned flags; /* DP_SNAPSHOT_* */
    char *err;
    size_t errlen;
    int failed;
};

/* The field readers (dp_snapshot_fields.c). A wrong field fails the build
 * with an error naming it; the first failure is the one kept. */
__attribute__((format(printf, 2, 3))) void dps_fail(struct build *b, const char *fmt, ...);
const char *dps_req_str(struct build *b, const json_t *o, const char *key, const char *where);
const char *dps_opt_str(struct build *b, const json_t *o, const char *key, const char *where,
                        const char *def);
long dps_opt_ms(struct build *b, const json_t *o, const char *key, const char *where, long def);
int dps_opt_bool(struct build *b, const json_t *o, const char *key, const char *where, int def);
long long dps_opt_int(struct build *b, const json_t *o, const char *key, const char *where,
                      long long min, long long max, long long def, const char *what);
const char *dps_opt_enum(struct build *b, const json_t *o, const char *key, const char *where,
                         const char *const *names, const char *def);
unsigned dps_parse_caps(struct build *b, const json_t *a, const char *where,
                        const struct dp_driver *drv);
void dps_opt_str_list(struct build *b, const json_t *o, const char *key, const char *where,
                      const char ***out, size_t *n);

/* Finds by name (dp_snapshot_lookup.c), for the build as for the lookups:
 * a provider by the first len bytes of name; a route by name or alias. */
const struct dp_provider *dps_find_provider(const struct dp_snapshot *s, const char *name,
                                            size_t len);
const struct dp_route *dps_find_route(const struct dp_snapshot *s, const char *name);
/* The first 64 bits of a key hash (64 lowercase hex digits): its slot in
 * the snapshot's key index. */
uint64_t dps_key_slot(const char *hex);
/* Zeroes the providers' credentials and header lines in place (explicit_bzero),
 * so that freeing the pool leaves none in freed memory. */
void dps_wipe_secrets(struct dp_snapshot *s);

#endif
