/* Failed admin authentications per address (controlplane/api/cp_authfail.h). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_authfail.h"

static struct cp_authfail *fresh(void)
{
    struct cp_authfail *t = calloc(1, sizeof(*t));
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

static void test_budget_then_blocked_until_the_window_ends(void)
{
    struct cp_authfail *t = fresh();
    int64_t now = 1000000;
    int logged = 0, limited = 0;
    for (int i = 0; i < CP_AUTHFAIL_MAX; i++) {
        CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.0.0.1", now), 0);
        enum cp_authfail_log l = cp_authfail_record(t, "10.0.0.1", now + i);
        logged += l == CP_AUTHFAIL_LOG;
        limited += l == CP_AUTHFAIL_LOG_LIMITED;
    }
    CU_ASSERT_EQUAL(logged, CP_AUTHFAIL_LOGGED);
    CU_ASSERT_EQUAL(limited, 1);
    /* Spent: blocked for the rest of the window, and only that address. */
    CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.0.0.1", now + 100), CP_AUTHFAIL_WINDOW_MS - 100);
    CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.0.0.2", now + 100), 0);
    /* Further failures while blocked say nothing more. */
    CU_ASSERT_EQUAL(cp_authfail_record(t, "10.0.0.1", now + 200), CP_AUTHFAIL_QUIET);
    /* A new window: a fresh budget, logged again. */
    int64_t later = now + CP_AUTHFAIL_WINDOW_MS;
    CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.0.0.1", later), 0);
    CU_ASSERT_EQUAL(cp_authfail_record(t, "10.0.0.1", later), CP_AUTHFAIL_LOG);
    CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.0.0.1", later), 0);
    free(t);
}

static void test_table_full_takes_the_oldest_window(void)
{
    struct cp_authfail *t = fresh();
    char a[32];
    for (int i = 0; i < CP_AUTHFAIL_MAX; i++)
        (void)cp_authfail_record(t, "10.9.9.9", 5);
    CU_ASSERT(cp_authfail_blocked(t, "10.9.9.9", 6) > 0);
    /* Every other slot filled later: the spent address is the oldest and
     * goes first; no more than CP_AUTHFAIL_SLOTS are ever kept. */
    for (int i = 0; i < CP_AUTHFAIL_SLOTS; i++) {
        snprintf(a, sizeof(a), "10.1.%d.%d", i / 256, i % 256);
        (void)cp_authfail_record(t, a, 100 + i);
    }
    CU_ASSERT_EQUAL(cp_authfail_blocked(t, "10.9.9.9", 1000), 0);
    snprintf(a, sizeof(a), "10.1.%d.%d", (CP_AUTHFAIL_SLOTS - 1) / 256,
             (CP_AUTHFAIL_SLOTS - 1) % 256);
    CU_ASSERT_EQUAL(cp_authfail_record(t, a, 1000), CP_AUTHFAIL_LOG); /* its second failure */
    free(t);
}

static void test_long_address_is_cut_consistently(void)
{
    struct cp_authfail *t = fresh();
    char longaddr[200];
    memset(longaddr, 'a', sizeof(longaddr) - 1);
    longaddr[sizeof(longaddr) - 1] = '\0';
    for (int i = 0; i < CP_AUTHFAIL_MAX; i++)
        (void)cp_authfail_record(t, longaddr, 10);
    CU_ASSERT(cp_authfail_blocked(t, longaddr, 11) > 0);
    free(t);
}

static CU_TestInfo tests[] = {
    {"an address's budget, then blocked until its window ends",
     test_budget_then_blocked_until_the_window_ends},
    {"a full table gives the oldest window's slot away", test_table_full_takes_the_oldest_window},
    {"a long address is cut the same way each time", test_long_address_is_cut_consistently},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
