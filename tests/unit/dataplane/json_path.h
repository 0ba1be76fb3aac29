/*
 * json_path: looking into a JSON document by a dotted path in tests.
 *
 *   jget(doc, "a.b.2.c")   objects by key, arrays by index; NULL when any
 *                          step is missing (paths up to 255 bytes)
 *   jstr, jint             the string or integer there (NULL, 0 if none)
 *   expect_json(doc, path, "<json>")
 *                          asserts the value there equals the JSON text
 *                          (any JSON value), showing both when it does not
 */
#ifndef JSON_PATH_H
#define JSON_PATH_H

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline json_t *jget(json_t *doc, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", path);
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && doc; k = strtok_r(NULL, ".", &save))
        doc = json_is_array(doc) ? json_array_get(doc, strtoul(k, NULL, 10))
                                 : json_object_get(doc, k);
    return doc;
}

static inline const char *jstr(json_t *doc, const char *path)
{
    return json_string_value(jget(doc, path));
}

static inline long long jint(json_t *doc, const char *path)
{
    return json_integer_value(jget(doc, path));
}

static inline void expect_json(json_t *doc, const char *path, const char *want)
{
    json_t *w = json_loads(want, JSON_DECODE_ANY, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    json_t *got = jget(doc, path);
    int eq = json_equal(got, w);
    CU_ASSERT(eq);
    if (!eq) {
        char *g = got ? json_dumps(got, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        fprintf(stderr, "\n%s: got %s, want %s\n", path, g ? g : "(absent)", want);
        free(g);
    }
    json_decref(w);
}

#endif
