/* Tests for controlplane/cp_config.c: defaults, the environment, flags over
 * the environment, the subcommand, and the admin token refused as a flag. */
#include <CUnit/CUnit.h>
#include <stdlib.h>
#include <string.h>

#include "cp_config.h"
#include "gw_error.h"

static void clear_env(void)
{
    unsetenv("LLMGW_DATABASE_URL");
    unsetenv("LLMGW_ADMIN_LISTEN");
    unsetenv("LLMGW_GRPC_LISTEN");
    unsetenv("LLMGW_ADMIN_TOKEN");
}

static int parse(struct cp_config *c, int argc, const char **argv)
{
    return cp_config_parse(c, argc, (char **)argv);
}

static void test_defaults(void)
{
    clear_env();
    struct cp_config c;
    const char *argv[] = {"cp", "--database-url", "dbname=x"};
    CU_ASSERT_EQUAL(parse(&c, 3, argv), GW_OK);
    CU_ASSERT_EQUAL(c.command, CP_CMD_SERVE);
    CU_ASSERT_STRING_EQUAL(c.database_url, "dbname=x");
    CU_ASSERT_STRING_EQUAL(c.admin.host, "127.0.0.1");
    CU_ASSERT_EQUAL(c.admin.port, 8081);
    CU_ASSERT_EQUAL(c.grpc.port, 8082);
    CU_ASSERT_PTR_NULL(c.admin_token);
}

static void test_env_and_flags(void)
{
    clear_env();
    setenv("LLMGW_DATABASE_URL", "dbname=env", 1);
    setenv("LLMGW_ADMIN_LISTEN", "0.0.0.0:9000", 1);
    setenv("LLMGW_ADMIN_TOKEN", "tok", 1);
    struct cp_config c;
    const char *argv[] = {"cp", "migrate", "--admin-listen=[::1]:0", "--grpc-listen", "h:1"};
    CU_ASSERT_EQUAL(parse(&c, 5, argv), GW_OK);
    CU_ASSERT_EQUAL(c.command, CP_CMD_MIGRATE);
    CU_ASSERT_STRING_EQUAL(c.database_url, "dbname=env");
    CU_ASSERT_STRING_EQUAL(c.admin.host, "::1");
    CU_ASSERT_EQUAL(c.admin.port, 0);
    CU_ASSERT_STRING_EQUAL(c.grpc.host, "h");
    CU_ASSERT_EQUAL(c.grpc.port, 1);
    CU_ASSERT_STRING_EQUAL(c.admin_token, "tok");
    clear_env();
}

static void test_refusals(void)
{
    clear_env();
    struct cp_config c;
    const char *none[] = {"cp"};
    CU_ASSERT_EQUAL(parse(&c, 1, none), GW_EINVAL); /* --database-url is required */
    const char *tok[] = {"cp", "--database-url", "x", "--admin-token", "t"};
    CU_ASSERT_EQUAL(parse(&c, 5, tok), GW_EINVAL);
    const char *cmd[] = {"cp", "frobnicate", "--database-url", "x"};
    CU_ASSERT_EQUAL(parse(&c, 4, cmd), GW_EINVAL);
    const char *port[] = {"cp", "--database-url", "x", "--admin-listen", "h:70000"};
    CU_ASSERT_EQUAL(parse(&c, 5, port), GW_EINVAL);
    const char *hp[] = {"cp", "--database-url", "x", "--admin-listen", "8081"};
    CU_ASSERT_EQUAL(parse(&c, 5, hp), GW_EINVAL);
    const char *flag[] = {"cp", "--database-url", "x", "--nope", "1"};
    CU_ASSERT_EQUAL(parse(&c, 5, flag), GW_EINVAL);
}

static CU_TestInfo tests[] = {
    {"defaults", test_defaults},
    {"environment, then flags, subcommand", test_env_and_flags},
    {"refusals name the flag", test_refusals},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
