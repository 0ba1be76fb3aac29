/*
 * Shared main() for the CUnit executables: each test file defines
 * `static CU_TestInfo tests[]` and includes this last. The exit status
 * reflects failures (CU_basic_run_tests alone returns success even when
 * assertions fail), so ctest sees them.
 */
#ifndef UNIT_MAIN_H
#define UNIT_MAIN_H

#include <CUnit/Basic.h>
#include <CUnit/CUnit.h>

#ifndef UNIT_SUITE_NAME
#define UNIT_SUITE_NAME __FILE__
#endif
/* Optional suite set-up and tear-down functions (CU_InitializeFunc). */
#ifndef UNIT_SUITE_INIT
#define UNIT_SUITE_INIT NULL
#endif
#ifndef UNIT_SUITE_CLEAN
#define UNIT_SUITE_CLEAN NULL
#endif

int main(void)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    CU_SuiteInfo suites[] = {
        {UNIT_SUITE_NAME, UNIT_SUITE_INIT, UNIT_SUITE_CLEAN, NULL, NULL, tests},
        CU_SUITE_INFO_NULL};
    if (CU_register_suites(suites) != CUE_SUCCESS)
        return 2;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failures = CU_get_number_of_failures();
    unsigned ran = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    return failures ? 1 : (ran ? 0 : 3);
}

#endif
