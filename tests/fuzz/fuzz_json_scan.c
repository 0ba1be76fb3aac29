/*
 * libFuzzer target for gw_json_count_values (common/gw_json.c), the scan
 * that bounds a client's JSON before jansson builds it. It checks what the
 * data plane relies on:
 *  - the scan never reads outside the input (the input is copied to a heap
 *    block of exactly its size, so AddressSanitizer sees any overread);
 *  - GW_ELIMIT means one bound was passed by exactly one, anything else
 *    stays within both bounds;
 *  - its verdict on validity is gw_json_valid's;
 *  - whatever jansson parses, the scan counted: the same values and depth
 *    when within the bounds (jansson never builds more than was counted),
 *    past a bound when the scan stopped;
 *  - where the scan refuses the input, jansson given it only up to the
 *    byte the scan stopped at (as the data plane gives it) refuses it too.
 *    Given all of it, jansson may accept: it skips a NUL after a number or
 *    a literal (jansson 2.14), which is why the data plane cuts the input;
 *  - gw_json_bound agrees with the scan at the real limits.
 * Small bounds here, so short inputs reach both limits.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "gw_error.h"
#include "gw_json.h"

#define MAX_VALUES 200
#define MAX_DEPTH 12

static void tree(const json_t *j, int level, size_t *values, int *depth)
{
    size_t i;
    const char *k;
    json_t *v;
    (*values)++;
    if (!json_is_array(j) && !json_is_object(j))
        return;
    if (level + 1 > *depth)
        *depth = level + 1;
    if (json_is_array(j))
        json_array_foreach(j, i, v) tree(v, level + 1, values, depth);
    else
        json_object_foreach((json_t *)j, k, v) tree(v, level + 1, values, depth);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);

    struct gw_json_count c = {0};
    int rc = gw_json_count_values(buf, size, MAX_VALUES, MAX_DEPTH, &c);
    CHECK(rc == GW_OK || rc == GW_EINVAL || rc == GW_ELIMIT);
    if (rc == GW_ELIMIT)
        CHECK((c.values == MAX_VALUES + 1 && c.depth <= MAX_DEPTH) ||
              (c.values <= MAX_VALUES && c.depth == MAX_DEPTH + 1));
    else
        CHECK(c.values <= MAX_VALUES && c.depth <= MAX_DEPTH);

    /* Validity is the validator's; unbounded, the count is at least as far. */
    if (rc != GW_ELIMIT)
        CHECK((rc == GW_OK) == (gw_json_valid(buf, size, MAX_DEPTH) != 0));
    struct gw_json_count u = {0};
    int urc = gw_json_count_values(buf, size, SIZE_MAX, MAX_DEPTH, &u);
    CHECK(urc != GW_ELIMIT || u.depth == MAX_DEPTH + 1);
    if (rc == GW_OK)
        CHECK(urc == GW_OK && u.values == c.values && u.depth == c.depth);

    /* jansson is the stricter parser: whatever it builds, the scan accepted
     * or stopped at a bound, and counted the same. */
    json_t *j =
        json_loadb(buf, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, NULL);
    if (j) {
        size_t values = 0;
        int depth = 0;
        tree(j, 0, &values, &depth);
        CHECK(rc != GW_EINVAL || memchr(buf, '\0', size) != NULL);
        if (rc == GW_OK)
            CHECK(values == c.values && depth == c.depth);
        else if (rc == GW_ELIMIT)
            CHECK(values > MAX_VALUES || depth > MAX_DEPTH);
        json_decref(j);
    }
    if (rc == GW_EINVAL) {
        CHECK(c.stop <= size);
        size_t cut = c.stop < size ? c.stop + 1 : size;
        /* The data plane's flags: an object or an array, no duplicates. */
        j = json_loadb(buf, cut, JSON_REJECT_DUPLICATES, NULL);
        CHECK(j == NULL);
    }

    /* The real limits: the inputs are far below the value limit. */
    size_t spent = 0;
    char msg[256];
    int brc = gw_json_bound(buf, size, "the input", &spent, NULL, msg, sizeof(msg));
    struct gw_json_count r = {0};
    int rrc = gw_json_count_values(buf, size, GW_JSON_MAX_VALUES, GW_JSON_MAX_DEPTH, &r);
    CHECK(brc == rrc);
    CHECK(spent == (brc == GW_OK ? r.values : 0));
    if (brc == GW_ELIMIT)
        CHECK(strstr(msg, "the input") != NULL);

    free(buf);
    return 0;
}
