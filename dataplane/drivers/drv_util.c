#include "drv_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"

#define MAX_EMBED_VALUES (16u << 20)

int drv_tools_close(struct drv_tools *t, const struct canon_sink *s)
{
    if (!t->open)
        return 0;
    t->open = 0;
    int idx = t->count - 1;
    if (!t->open_args) {
        struct canon_event d = {.type = CANON_EV_TOOL_DELTA, .index = idx, .text = "{}", .len = 2};
        if (canon_emit(s, &d))
            return 1;
    }
    struct canon_event ev = {.type = CANON_EV_TOOL_END, .index = idx};
    return canon_emit(s, &ev) ? 1 : 0;
}

int drv_tools_delta(struct drv_tools *t, long long key, const char *id, const char *name,
                    const char *args, const struct canon_sink *s)
{
    if (!t->open || key != t->open_key) {
        for (int i = 0; i < t->count; i++)
            if (t->keys[i] == key)
                return GW_EINVAL;
        if (t->count >= DRV_MAX_TOOL_CALLS)
            return GW_EINVAL;
        if (drv_tools_close(t, s))
            return 1;
        char gen[32];
        if (!id || !*id) {
            snprintf(gen, sizeof(gen), "call_%d", t->count);
            id = gen;
        }
        t->keys[t->count] = key;
        struct canon_event ev = {
            .type = CANON_EV_TOOL_START, .index = t->count, .id = id, .name = name ? name : ""};
        t->count++;
        t->open = 1;
        t->open_key = key;
        t->open_args = 0;
        if (canon_emit(s, &ev))
            return 1;
    }
    if (args && *args) {
        t->open_args = 1;
        struct canon_event ev = {
            .type = CANON_EV_TOOL_DELTA, .index = t->count - 1, .text = args, .len = strlen(args)};
        if (canon_emit(s, &ev))
            return 1;
    }
    return 0;
}

int drv_embed_vectors(const json_t *items, const char *key, struct canon_embed_resp *out, char *msg,
                      size_t msglen)
{
    if (!json_is_array(items) || json_array_size(items) == 0) {
        snprintf(msg, msglen, "the provider's answer has no embeddings");
        return GW_EINVAL;
    }
    size_t nvec = json_array_size(items), dim = 0;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        if (!json_is_array(v) || json_array_size(v) == 0 || (i > 0 && json_array_size(v) != dim)) {
            snprintf(msg, msglen, "the provider's embedding %zu is not a vector of the same size",
                     i);
            return GW_EINVAL;
        }
        dim = json_array_size(v);
        if (dim > MAX_EMBED_VALUES / nvec) {
            snprintf(msg, msglen, "the provider's embeddings are too large");
            return GW_EINVAL;
        }
    }
    double *vals = malloc(nvec * dim * sizeof(double));
    if (!vals)
        return GW_ENOMEM;
    for (size_t i = 0; i < nvec; i++) {
        json_t *it = json_array_get(items, i);
        json_t *v = key ? json_object_get(it, key) : it;
        for (size_t j = 0; j < dim; j++) {
            json_t *x = json_array_get(v, j);
            if (!json_is_number(x)) {
                free(vals);
                snprintf(msg, msglen, "the provider's embedding %zu has a non-number", i);
                return GW_EINVAL;
            }
            vals[i * dim + j] = json_number_value(x);
        }
    }
    out->values = vals;
    out->nvec = nvec;
    out->dim = dim;
    return GW_OK;
}
