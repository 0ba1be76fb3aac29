/* The catalog fetch's address policy (controlplane/catalog/cp_fetch.h). */
#include <CUnit/CUnit.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "cp_fetch.h"
#include "gw_error.h"

static enum cp_fetch_addr of(const char *ip)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1)
        v4->sin_family = AF_INET;
    else if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1)
        v6->sin6_family = AF_INET6;
    else
        CU_FAIL_FATAL("not an address");
    return cp_fetch_addr_class((struct sockaddr *)&ss);
}

static void test_classes(void)
{
    static const struct {
        const char *ip;
        enum cp_fetch_addr k;
    } cases[] = {
        {"8.8.8.8", CP_ADDR_PUBLIC},
        {"1.1.1.1", CP_ADDR_PUBLIC},
        {"172.15.255.255", CP_ADDR_PUBLIC},
        {"172.32.0.1", CP_ADDR_PUBLIC},
        {"100.63.255.255", CP_ADDR_PUBLIC},
        {"100.128.0.1", CP_ADDR_PUBLIC},
        {"223.255.255.255", CP_ADDR_PUBLIC},
        {"127.0.0.1", CP_ADDR_LOOPBACK},
        {"127.255.1.2", CP_ADDR_LOOPBACK},
        {"0.0.0.0", CP_ADDR_LOOPBACK},
        {"10.0.0.1", CP_ADDR_PRIVATE},
        {"172.16.0.1", CP_ADDR_PRIVATE},
        {"172.31.255.254", CP_ADDR_PRIVATE},
        {"192.168.1.1", CP_ADDR_PRIVATE},
        {"100.64.0.1", CP_ADDR_PRIVATE},
        {"169.254.169.254", CP_ADDR_LINK_LOCAL},
        {"224.0.0.1", CP_ADDR_NEVER},
        {"255.255.255.255", CP_ADDR_NEVER},
        {"240.0.0.1", CP_ADDR_NEVER},
        {"2606:4700::1111", CP_ADDR_PUBLIC},
        {"::1", CP_ADDR_LOOPBACK},
        {"::", CP_ADDR_LOOPBACK},
        {"fd00:ec2::254", CP_ADDR_PRIVATE},
        {"fc00::1", CP_ADDR_PRIVATE},
        {"fe80::1", CP_ADDR_LINK_LOCAL},
        {"febf::1", CP_ADDR_LINK_LOCAL},
        {"fec0::1", CP_ADDR_PUBLIC},
        {"ff02::1", CP_ADDR_NEVER},
        {"::ffff:127.0.0.1", CP_ADDR_LOOPBACK},
        {"::ffff:169.254.169.254", CP_ADDR_LINK_LOCAL},
        {"::ffff:8.8.8.8", CP_ADDR_PUBLIC},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        enum cp_fetch_addr k = of(cases[i].ip);
        if (k != cases[i].k)
            fprintf(stderr, "%s: class %d, want %d\n", cases[i].ip, (int)k, (int)cases[i].k);
        CU_ASSERT_EQUAL(k, cases[i].k);
    }
}

static void test_parse_allow(void)
{
    unsigned a = 99;
    char err[128];
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("", &a, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(a, 0);
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("http,loopback", &a, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(a, CP_FETCH_ALLOW_HTTP | CP_FETCH_ALLOW_LOOPBACK);
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("private,link-local", &a, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(a, CP_FETCH_ALLOW_PRIVATE | CP_FETCH_ALLOW_LINK_LOCAL);
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("none", &a, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(a, 0);
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("http,metadata", &a, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "'metadata'"));
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("http,", &a, err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(cp_fetch_parse_allow("loop", &a, err, sizeof(err)), GW_EINVAL);
}

static void test_https_only_by_default(void)
{
    struct cp_fetch f;
    char err[256];
    CU_ASSERT_EQUAL(cp_fetch_init(&f, "http://example.com/x.json", 0, 0, 0, err, sizeof(err)),
                    GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "--catalog-fetch-allow http"));
    CU_ASSERT_EQUAL(cp_fetch_init(&f, "https://example.com/x.json", 0, 0, 0, err, sizeof(err)),
                    GW_OK);
    CU_ASSERT_EQUAL(f.allow, 0);
    cp_fetch_cleanup(&f);
    CU_ASSERT_EQUAL(
        cp_fetch_init(&f, "http://example.com/x.json", CP_FETCH_ALLOW_HTTP, 0, 0, err, sizeof(err)),
        GW_OK);
    CU_ASSERT_EQUAL(f.allow, CP_FETCH_ALLOW_HTTP); /* what its socket check keeps */
    cp_fetch_cleanup(&f);
}

static CU_TestInfo tests[] = {
    {"each address's class", test_classes},
    {"--catalog-fetch-allow's words", test_parse_allow},
    {"https only unless http is allowed", test_https_only_by_default},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
