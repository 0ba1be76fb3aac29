/*
 * dp_snapshot's field readers: one field of the document each, checked for
 * its type and its range. A wrong field fails the build with an error that
 * names it by its path ("routes[2].entries[0].weight"); the first failure
 * is the one reported. dp_snapshot.c builds the sections with these.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dp_driver_catalog.h"
#include "dp_snapshot_int.h"

__attribute__((format(printf, 2, 3))) void dps_fail(struct build *b, const char *fmt, ...)
{
    if (b->failed)
        return;
    b->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err, b->errlen, fmt, ap);
    va_end(ap);
}

/* A required non-empty string field. */
const char *dps_req_str(struct build *b, const json_t *o, const char *key, const char *where)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) == 0) {
        dps_fail(b, "%s.%s: required, a non-empty string", where, key);
        return NULL;
    }
    return gw_pool_strdup(b->pool, json_string_value(v));
}

const char *dps_opt_str(struct build *b, const json_t *o, const char *key, const char *where,
                        const char *def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_string(v)) {
        dps_fail(b, "%s.%s: must be a string", where, key);
        return def;
    }
    return gw_pool_strdup(b->pool, json_string_value(v));
}

long dps_opt_ms(struct build *b, const json_t *o, const char *key, const char *where, long def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 3600 * 1000) {
        dps_fail(b, "%s.%s: must be an integer from 1 to 3600000 (milliseconds)", where, key);
        return def;
    }
    return (long)json_integer_value(v);
}

int dps_opt_bool(struct build *b, const json_t *o, const char *key, const char *where, int def)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_boolean(v)) {
        dps_fail(b, "%s.%s: must be a boolean", where, key);
        return def;
    }
    return json_is_true(v);
}

/* An optional integer in [min, max]; what says what it counts. */
long long dps_opt_int(struct build *b, const json_t *o, const char *key, const char *where,
                      long long min, long long max, long long def, const char *what)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return def;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        dps_fail(b, "%s.%s: must be an integer from %lld to %lld%s", where, key, min, max, what);
        return def;
    }
    return json_integer_value(v);
}

/* An optional string that must be one of names (NULL-terminated). */
const char *dps_opt_enum(struct build *b, const json_t *o, const char *key, const char *where,
                         const char *const *names, const char *def)
{
    const char *v = dps_opt_str(b, o, key, where, def);
    if (b->failed || !v)
        return v;
    for (const char *const *n = names; *n; n++)
        if (strcmp(*n, v) == 0)
            return *n;
    char list[128] = "";
    size_t off = 0;
    for (const char *const *n = names; *n && off < sizeof(list); n++)
        off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", off ? ", " : "", *n);
    dps_fail(b, "%s.%s: must be one of %s", where, key, list);
    return def;
}

static const struct {
    const char *name;
    unsigned bit;
} cap_names[] = {{"chat", DRV_CAP_CHAT},
                 {"embeddings", DRV_CAP_EMBEDDINGS},
                 {"vision", DRV_CAP_VISION},
                 {"tools", DRV_CAP_TOOLS},
                 {"json_mode", DRV_CAP_JSON_MODE},
                 {"reasoning", DRV_CAP_REASONING},
                 {"transcription", DRV_CAP_TRANSCRIPTION},
                 {"speech", DRV_CAP_SPEECH},
                 {"image", DRV_CAP_IMAGE}};

const char *dp_snapshot_cap_name(unsigned bit)
{
    for (size_t k = 0; k < sizeof(cap_names) / sizeof(*cap_names); k++)
        if (cap_names[k].bit == bit)
            return cap_names[k].name;
    return NULL;
}

/* An array of capability names (where names it) into DRV_CAP_* bits. With
 * drv, a capability the driver does not declare is refused too. */
unsigned dps_parse_caps(struct build *b, const json_t *a, const char *where,
                        const struct dp_driver_info *drv)
{
    unsigned caps = 0;
    size_t i;
    json_t *c;
    if (!json_is_array(a)) {
        dps_fail(b, "%s: must be an array of capability names", where);
        return 0;
    }
    json_array_foreach(a, i, c)
    {
        unsigned bit = 0;
        for (size_t k = 0; k < sizeof(cap_names) / sizeof(*cap_names); k++)
            if (json_is_string(c) && strcmp(json_string_value(c), cap_names[k].name) == 0)
                bit = cap_names[k].bit;
        if (!bit) {
            dps_fail(
                b,
                "%s[%zu]: must be one of chat, embeddings, vision, tools, json_mode, reasoning, "
                "transcription, speech, image",
                where, i);
            return 0;
        }
        if (drv && !(drv->caps & bit)) {
            dps_fail(b, "%s[%zu]: driver '%s' does not support '%s'", where, i, drv->name,
                     json_string_value(c));
            return 0;
        }
        caps |= bit;
    }
    return caps;
}

/* An optional array of non-empty strings into *out / *n; absent leaves
 * *out NULL (any), an empty array is a non-NULL list of none. */
void dps_opt_str_list(struct build *b, const json_t *o, const char *key, const char *where,
                      const char ***out, size_t *n)
{
    json_t *a = json_object_get(o, key);
    if (!a || json_is_null(a))
        return;
    if (!json_is_array(a)) {
        dps_fail(b, "%s.%s: must be an array of non-empty strings", where, key);
        return;
    }
    *out = gw_pool_calloc(b->pool, (json_array_size(a) + 1) * sizeof(char *));
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_string(v) || json_string_length(v) == 0) {
            dps_fail(b, "%s.%s[%zu]: must be a non-empty string", where, key, i);
            return;
        }
        (*out)[(*n)++] = gw_pool_strdup(b->pool, json_string_value(v));
    }
}

/* The index of v in names (v is one of them: dps_opt_enum returned it). */
int dps_enum_index(const char *const *names, const char *v)
{
    int i = 0;
    while (names[i] && names[i] != v)
        i++;
    return i;
}

const char *const dps_guard_policy_names[] = {
    [DP_GUARD_OFF] = "off", [DP_GUARD_LOG] = "log", [DP_GUARD_BLOCK] = "block", NULL};
