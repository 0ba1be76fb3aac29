/* Tests for controlplane/cp_config.c: defaults, the environment, flags over
 * the environment, the subcommand, the admin token refused as a flag, and
 * the gRPC transport (TLS or insecure, never neither). */
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
    unsetenv("LLMGW_FLEET_TOKEN");
    unsetenv("LLMGW_GRPC_TLS_CERT");
    unsetenv("LLMGW_GRPC_TLS_KEY");
    unsetenv("LLMGW_GRPC_TLS_CLIENT_CA");
    unsetenv("LLMGW_GRPC_TLS_NO_CLIENT_AUTH");
    unsetenv("LLMGW_GRPC_INSECURE");
    unsetenv("LLMGW_SNAPSHOT_POLL_MS");
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
    CU_ASSERT_EQUAL(c.snapshot_poll_ms, 30000);
    CU_ASSERT_EQUAL(c.grpc_insecure, 0);
    char err[256];
    /* Neither TLS nor insecure: serve refuses, naming both ways. */
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--grpc-tls-cert"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--grpc-insecure"));
}

static void test_grpc_transport(void)
{
    clear_env();
    struct cp_config c;
    char err[256];
    const char *ins[] = {"cp", "--database-url", "x", "--grpc-insecure", "--snapshot-poll-ms",
                         "500"};
    CU_ASSERT_EQUAL(parse(&c, 6, ins), GW_OK);
    CU_ASSERT_EQUAL(c.grpc_insecure, 1);
    CU_ASSERT_EQUAL(c.snapshot_poll_ms, 500);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_OK);

    setenv("LLMGW_GRPC_INSECURE", "1", 1);
    setenv("LLMGW_SNAPSHOT_POLL_MS", "1000", 1);
    const char *envonly[] = {"cp", "--database-url", "x"};
    CU_ASSERT_EQUAL(parse(&c, 3, envonly), GW_OK);
    CU_ASSERT_EQUAL(c.grpc_insecure, 1);
    CU_ASSERT_EQUAL(c.snapshot_poll_ms, 1000);
    const char *off[] = {"cp", "--database-url", "x", "--grpc-insecure=0"};
    CU_ASSERT_EQUAL(parse(&c, 4, off), GW_OK);
    CU_ASSERT_EQUAL(c.grpc_insecure, 0);
    clear_env();

    const char *tls[] = {"cp",    "--database-url", "x",     "--grpc-tls-cert",
                         "c.pem", "--grpc-tls-key", "k.pem", "--grpc-tls-client-ca",
                         "ca.pem"};
    CU_ASSERT_EQUAL(parse(&c, 9, tls), GW_OK);
    CU_ASSERT_STRING_EQUAL(c.grpc_tls_cert, "c.pem");
    CU_ASSERT_STRING_EQUAL(c.grpc_tls_key, "k.pem");
    CU_ASSERT_STRING_EQUAL(c.grpc_tls_client_ca, "ca.pem");
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_OK);

    const char *nokey[] = {"cp", "--database-url", "x", "--grpc-tls-cert", "c.pem"};
    CU_ASSERT_EQUAL(parse(&c, 5, nokey), GW_OK);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    const char *both[] = {"cp",    "--database-url", "x",     "--grpc-tls-cert",
                          "c.pem", "--grpc-tls-key", "k.pem", "--grpc-insecure"};
    CU_ASSERT_EQUAL(parse(&c, 8, both), GW_OK);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    /* TLS without a client CA: refused unless opted out of explicitly. */
    const char *noca[] = {"cp",    "--database-url", "x",    "--grpc-tls-cert",
                          "c.pem", "--grpc-tls-key", "k.pem"};
    CU_ASSERT_EQUAL(parse(&c, 7, noca), GW_OK);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--grpc-tls-client-ca"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--grpc-tls-no-client-auth"));
    const char *optout[] = {"cp",    "--database-url", "x",     "--grpc-tls-cert",
                            "c.pem", "--grpc-tls-key", "k.pem", "--grpc-tls-no-client-auth"};
    CU_ASSERT_EQUAL(parse(&c, 8, optout), GW_OK);
    CU_ASSERT_EQUAL(c.grpc_tls_no_client_auth, 1);
    /* ... and only with a fleet token, which callers must then present. */
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "LLMGW_FLEET_TOKEN"));
    setenv("LLMGW_FLEET_TOKEN", "short", 1);
    CU_ASSERT_EQUAL(parse(&c, 8, optout), GW_EINVAL);
    setenv("LLMGW_FLEET_TOKEN", "llmgw-fleet-0123456789abcdef0123", 1);
    CU_ASSERT_EQUAL(parse(&c, 8, optout), GW_OK);
    CU_ASSERT_STRING_EQUAL(c.fleet_token, "llmgw-fleet-0123456789abcdef0123");
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_OK);
    setenv("LLMGW_GRPC_TLS_NO_CLIENT_AUTH", "1", 1);
    CU_ASSERT_EQUAL(parse(&c, 7, noca), GW_OK);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(parse(&c, 9, tls), GW_OK); /* and a client CA: contradictory */
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);
    clear_env();
    const char *cacert[] = {
        "cp", "--database-url", "x", "--grpc-insecure", "--grpc-tls-client-ca", "ca.pem"};
    CU_ASSERT_EQUAL(parse(&c, 6, cacert), GW_OK);
    CU_ASSERT_EQUAL(cp_config_grpc_check(&c, err, sizeof(err)), GW_EINVAL);

    const char *badpoll[] = {"cp", "--database-url", "x", "--snapshot-poll-ms", "5"};
    CU_ASSERT_EQUAL(parse(&c, 5, badpoll), GW_EINVAL);
    const char *badbool[] = {"cp", "--database-url", "x", "--grpc-insecure=maybe"};
    CU_ASSERT_EQUAL(parse(&c, 4, badbool), GW_EINVAL);
}

static void test_env_and_flags(void)
{
    clear_env();
    setenv("LLMGW_DATABASE_URL", "dbname=env", 1);
    setenv("LLMGW_ADMIN_LISTEN", "0.0.0.0:9000", 1);
    setenv("LLMGW_ADMIN_TOKEN", "tok-0123456789abcdef0123456789", 1);
    struct cp_config c;
    const char *argv[] = {"cp", "migrate", "--admin-listen=[::1]:0", "--grpc-listen", "h:1"};
    CU_ASSERT_EQUAL(parse(&c, 5, argv), GW_OK);
    CU_ASSERT_EQUAL(c.command, CP_CMD_MIGRATE);
    CU_ASSERT_STRING_EQUAL(c.database_url, "dbname=env");
    CU_ASSERT_STRING_EQUAL(c.admin.host, "::1");
    CU_ASSERT_EQUAL(c.admin.port, 0);
    CU_ASSERT_STRING_EQUAL(c.grpc.host, "h");
    CU_ASSERT_EQUAL(c.grpc.port, 1);
    CU_ASSERT_STRING_EQUAL(c.admin_token, "tok-0123456789abcdef0123456789");
    CU_ASSERT_EQUAL(c.check_config, 0);
    /* --check-config is a switch of any command, never a variable. */
    const char *check[] = {"cp", "migrate", "--check-config"};
    CU_ASSERT_EQUAL(parse(&c, 3, check), GW_OK);
    CU_ASSERT_EQUAL(c.check_config, 1);
    CU_ASSERT_EQUAL(c.command, CP_CMD_MIGRATE);
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
    /* A bootstrap token short enough to guess. */
    setenv("LLMGW_ADMIN_TOKEN", "admin12345678901234567", 1); /* 22 */
    const char *ok[] = {"cp", "--database-url", "x"};
    CU_ASSERT_EQUAL(parse(&c, 3, ok), GW_EINVAL);
    setenv("LLMGW_ADMIN_TOKEN", "admin1234567890123456789", 1); /* 24 */
    CU_ASSERT_EQUAL(parse(&c, 3, ok), GW_OK);
    clear_env();
}

static void test_import_catalog(void)
{
    clear_env();
    struct cp_config c;
    const char *f[] = {"cp",       "import-catalog", "--database-url",
                       "dbname=x", "--file",         "/tmp/p.json"};
    CU_ASSERT_EQUAL(parse(&c, 6, f), GW_OK);
    CU_ASSERT_EQUAL(c.command, CP_CMD_IMPORT_CATALOG);
    CU_ASSERT_STRING_EQUAL(c.import_file, "/tmp/p.json");
    CU_ASSERT_PTR_NULL(c.import_url);
    const char *u[] = {"cp", "import-catalog", "--url=http://127.0.0.1:9/p.json", "--database-url",
                       "dbname=x"};
    CU_ASSERT_EQUAL(parse(&c, 5, u), GW_OK);
    CU_ASSERT_STRING_EQUAL(c.import_url, "http://127.0.0.1:9/p.json");
    /* Exactly one source; the flags belong to import-catalog only. */
    const char *none[] = {"cp", "import-catalog", "--database-url", "dbname=x"};
    CU_ASSERT_EQUAL(parse(&c, 4, none), GW_EINVAL);
    const char *both[] = {"cp", "import-catalog", "--database-url", "dbname=x", "--file",
                          "a",  "--url",          "http://h/"};
    CU_ASSERT_EQUAL(parse(&c, 8, both), GW_EINVAL);
    const char *serve[] = {"cp", "serve", "--database-url", "dbname=x", "--file", "a"};
    CU_ASSERT_EQUAL(parse(&c, 6, serve), GW_EINVAL);
}

static CU_TestInfo tests[] = {
    {"import-catalog: --file or --url, exactly one", test_import_catalog},
    {"defaults", test_defaults},
    {"environment, then flags, subcommand", test_env_and_flags},
    {"refusals name the flag", test_refusals},
    {"gRPC transport: TLS or insecure", test_grpc_transport},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
