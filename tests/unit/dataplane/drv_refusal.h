/*
 * drv_refusal: a driver test's check that build_chat refuses a request it
 * cannot honor: GW_EINVAL, no body, a 400 naming the client's field
 * (param), and a message that says why (contains needle).
 */
#ifndef DRV_REFUSAL_H
#define DRV_REFUSAL_H

#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "canon.h"
#include "dp_driver.h"
#include "gw_error.h"

static inline void expect_refusal(const struct dp_driver *d, const struct drv_target *t,
                                  const struct canon_req *r, const char *param, const char *needle)
{
    struct drv_request q;
    struct canon_err err;
    memset(&q, 0, sizeof(q));
    memset(&err, 0, sizeof(err));
    int rc = d->build_chat(t, r, &q, &err);
    json_t *doc = rc == GW_OK ? json_loadb(q.body, q.body_len, 0, NULL) : NULL;
    CU_ASSERT_PTR_NULL(doc);
    json_decref(doc);
    CU_ASSERT_EQUAL(rc, GW_EINVAL);
    CU_ASSERT_EQUAL(err.status, 400);
    CU_ASSERT_STRING_EQUAL(err.param, param);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.message, needle));
    if (!strstr(err.message, needle))
        fprintf(stderr, "\nmessage: %s\n", err.message);
    drv_request_free(&q);
}

#endif
