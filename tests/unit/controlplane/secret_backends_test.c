/*
 * Tests for the external secret backends (controlplane/secrets/
 * cp_secret_vault.c, cp_secret_awssm.c, cp_secret_http.c) against in-process
 * fakes of their HTTP APIs, served by gw_http on 127.0.0.1 from a thread
 * with its own event base. The AWS fake recomputes the SigV4 signature from
 * what it received and refuses a mismatch, so a wrong secret key fails
 * exactly as it would against AWS.
 */
#include <CUnit/CUnit.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <jansson.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cp_secret_ref.h"
#include "cp_secrets.h"
#include "gw_error.h"
#include "gw_http.h"
#include "gw_sigv4.h"

#define VAULT_TOKEN "hvs.test-token"
#define AWS_AKID "AKIDFAKE0000EXAMPLE"
#define AWS_SECRET "fake/secret+key0123456789abcdefghijklmn"
#define AWS_TOKEN "FwoGZXIvYXdzEXAMPLEsessiontoken"

static struct event_base *base;
static struct gw_http_server *srv;
static pthread_t loop_thread;
static int port;
static char base_url[64];

/* What the fakes saw; written on the server thread while the test thread
 * waits in curl. */
static char seen_path[256];
static char seen_namespace[64];
static int aws_verified;      /* requests whose signature checked out */
static int aws_saw_session;   /* ... that carried the expected session token */
static const char *aws_token; /* the session token the fake expects, or NULL */

static void answer_json(struct gw_http_req *req, int status, const char *body)
{
    gw_http_respond(req, status, "application/json", body, strlen(body));
}

/* ---- the Vault fake: KV v2 under mount "secret" ---- */

static void vault(struct gw_http_req *req, const char *path)
{
    const char *tok = gw_http_req_header(req, "X-Vault-Token");
    const char *ns = gw_http_req_header(req, "X-Vault-Namespace");
    snprintf(seen_namespace, sizeof(seen_namespace), "%s", ns ? ns : "");
    if (strcmp(gw_http_req_method(req), "GET") != 0)
        return answer_json(req, 405, "{\"errors\":[\"method\"]}");
    if (!tok || strcmp(tok, VAULT_TOKEN) != 0)
        return answer_json(req, 403, "{\"errors\":[\"permission denied\"]}");
    if (strcmp(path, "/v1/secret/data/llm/openai") == 0)
        return answer_json(req, 200,
                           "{\"request_id\":\"r1\",\"lease_id\":\"\",\"data\":{\"data\":"
                           "{\"api_key\":\"sk-vault-123\",\"n\":5,\"html\":\"a\\u0026b\"},"
                           "\"metadata\":{\"created_time\":\"2024-01-01T00:00:00Z\","
                           "\"version\":3}},\"warnings\":null}");
    if (strcmp(path, "/v1/secret/data/a%3Ab/c") == 0)
        return answer_json(req, 200, "{\"data\":{\"data\":{\"k\":\"encoded\"},\"metadata\":{}}}");
    if (strcmp(path, "/v1/secret/data/escaped") == 0)
        /* A key spelled with an escape: the span lookup defers to jansson. */
        return answer_json(req, 200,
                           "{\"data\":{\"data\":{\"api\\u005fkey\":\"sk-esc\"},\"metadata\":{}}}");
    if (strcmp(path, "/v1/secret/data/ns") == 0 && ns && strcmp(ns, "team-a") == 0)
        return answer_json(req, 200, "{\"data\":{\"data\":{\"k\":\"in-ns\"},\"metadata\":{}}}");
    if (strcmp(path, "/v1/secret/data/deleted") == 0)
        return answer_json(req, 200, "{\"data\":{\"data\":null,\"metadata\":{\"version\":2}}}");
    if (strcmp(path, "/v1/secret/data/boom") == 0)
        return answer_json(req, 503, "{\"errors\":[\"Vault is sealed\"]}");
    if (strcmp(path, "/v1/secret/data/big") == 0) {
        size_t n = 100 * 1024;
        char *b = malloc(n);
        memset(b, ' ', n);
        memcpy(b, "{\"data\":{\"data\":{\"k\":\"v\"}}}", 26);
        gw_http_respond(req, 200, "application/json", b, n);
        free(b);
        return;
    }
    if (strcmp(path, "/v1/secret/data/notjson") == 0)
        return answer_json(req, 200, "<html>proxy</html>");
    answer_json(req, 404, "{\"errors\":[]}");
}

/* ---- the AWS Secrets Manager fake ---- */

/* Copies the text between key and the next ',' (or the end) of an
 * Authorization value into out. */
static int authz_part(const char *authz, const char *key, char *out, size_t outlen)
{
    const char *p = strstr(authz, key);
    if (!p)
        return -1;
    p += strlen(key);
    size_t n = strcspn(p, ",");
    if (n >= outlen)
        return -1;
    memcpy(out, p, n);
    out[n] = '\0';
    return 0;
}

/* Recomputes the signature over what arrived; 1 when it matches. */
static int verify_sigv4(struct gw_http_req *req)
{
    const char *authz = gw_http_req_header(req, "Authorization");
    const char *date = gw_http_req_header(req, "X-Amz-Date");
    char cred[256], signed_h[256];
    if (!authz || !date || authz_part(authz, "Credential=", cred, sizeof(cred)) ||
        authz_part(authz, "SignedHeaders=", signed_h, sizeof(signed_h)))
        return 0;
    char akid[64], day[16], region[32], service[32];
    if (sscanf(cred, "%63[^/]/%15[^/]/%31[^/]/%31[^/]/aws4_request", akid, day, region, service) !=
            4 ||
        strcmp(service, "secretsmanager") != 0 || strcmp(region, "us-east-1") != 0 ||
        strncmp(day, date, 8) != 0)
        return 0;
    if (strcmp(akid, AWS_AKID) != 0)
        return -1; /* unknown access key */
    /* Every signed header but those the signer adds itself, as received. */
    struct gw_sigv4_header hs[8];
    char names[8][64];
    size_t nh = 0;
    const char *tok = NULL;
    for (char *save = NULL, *name = strtok_r(signed_h, ";", &save); name;
         name = strtok_r(NULL, ";", &save)) {
        if (strcmp(name, "x-amz-date") == 0)
            continue;
        if (strcmp(name, "x-amz-security-token") == 0) {
            tok = gw_http_req_header(req, name);
            continue;
        }
        const char *v = gw_http_req_header(req, name);
        if (!v || nh == 8 || strlen(name) >= 64)
            return 0;
        snprintf(names[nh], sizeof(names[nh]), "%s", name);
        hs[nh].name = names[nh];
        hs[nh].value = v;
        nh++;
    }
    if (aws_token && (!tok || strcmp(tok, aws_token) != 0))
        return 0;
    aws_saw_session += tok != NULL;
    struct gw_sigv4_params p = {.access_key = AWS_AKID,
                                .secret_key = AWS_SECRET,
                                .session_token = tok,
                                .region = region,
                                .service = "secretsmanager",
                                .amz_date = date};
    size_t blen;
    const char *body = gw_http_req_body(req, &blen);
    struct gw_sigv4_result r;
    gw_sigv4_result_init(&r);
    int ok = gw_sigv4_sign(&p, gw_http_req_method(req), gw_http_req_path(req),
                           gw_http_req_query(req), hs, nh, body, blen, &r) == GW_OK &&
             strcmp(r.authorization.data, authz) == 0;
    gw_sigv4_result_free(&r);
    return ok;
}

static void awssm(struct gw_http_req *req)
{
    const char *target = gw_http_req_header(req, "X-Amz-Target");
    const char *ctype = gw_http_req_header(req, "Content-Type");
    if (strcmp(gw_http_req_method(req), "POST") != 0 || !target ||
        strcmp(target, "secretsmanager.GetSecretValue") != 0 || !ctype ||
        strcmp(ctype, "application/x-amz-json-1.1") != 0)
        return answer_json(req, 400,
                           "{\"__type\":\"UnknownOperationException\",\"message\":\"target\"}");
    int v = verify_sigv4(req);
    if (v < 0)
        return answer_json(req, 400,
                           "{\"__type\":\"UnrecognizedClientException\",\"message\":\"The "
                           "security token included in the request is invalid.\"}");
    if (v == 0)
        return answer_json(req, 400,
                           "{\"__type\":\"InvalidSignatureException\",\"message\":\"The request "
                           "signature we calculated does not match the signature you "
                           "provided.\"}");
    aws_verified++;
    size_t blen;
    const char *body = gw_http_req_body(req, &blen);
    json_t *doc = json_loadb(body, blen, 0, NULL);
    const char *id = json_string_value(json_object_get(doc, "SecretId"));
    if (!id)
        answer_json(req, 400, "{\"__type\":\"ValidationException\",\"message\":\"SecretId\"}");
    else if (strcmp(id, "prod/openai") == 0)
        answer_json(req, 200,
                    "{\"ARN\":\"arn:aws:secretsmanager:us-east-1:123456789012:secret:prod/"
                    "openai-AbCdEf\",\"Name\":\"prod/openai\",\"SecretString\":\"sk-aws-456\","
                    "\"VersionId\":\"v1\",\"VersionStages\":[\"AWSCURRENT\"],"
                    "\"CreatedDate\":1.7e9}");
    else if (strcmp(id, "prod/json") == 0)
        answer_json(req, 200,
                    "{\"Name\":\"prod/json\",\"SecretString\":\"{\\\"api_key\\\":\\\"sk-json-"
                    "789\\\",\\\"org\\\":\\\"o-1\\\",\\\"n\\\":1}\"}");
    else if (strcmp(id, "arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf") == 0)
        answer_json(req, 200, "{\"SecretString\":\"by-arn\"}");
    else if (strcmp(id, "binary") == 0)
        answer_json(req, 200, "{\"Name\":\"binary\",\"SecretBinary\":\"AAEC\"}");
    else if (strcmp(id, "boom") == 0)
        answer_json(req, 500, "{\"__type\":\"InternalServiceError\",\"message\":\"oops\"}");
    else
        answer_json(req, 400,
                    "{\"__type\":\"com.amazonaws.secretsmanager#ResourceNotFoundException\","
                    "\"message\":\"Secrets Manager can't find the specified secret.\"}");
    json_decref(doc);
}

static void handler(struct gw_http_req *req, void *arg)
{
    (void)arg;
    const char *path = gw_http_req_path(req);
    snprintf(seen_path, sizeof(seen_path), "%s", path);
    if (strncmp(path, "/v1/", 4) == 0)
        vault(req, path);
    else if (strcmp(path, "/") == 0)
        awssm(req);
    else
        answer_json(req, 404, "{}");
}

static void *loop(void *arg)
{
    (void)arg;
    event_base_dispatch(base);
    return NULL;
}

static int init_suite(void)
{
    signal(SIGPIPE, SIG_IGN);
    evthread_use_pthreads();
    base = event_base_new();
    int fd = gw_http_listen("127.0.0.1", 0, 0, &port);
    if (!base || fd < 0)
        return -1;
    snprintf(base_url, sizeof(base_url), "http://127.0.0.1:%d", port);
    struct gw_http_server_opts o = {.handler = handler};
    srv = gw_http_server_new(base, fd, &o);
    if (!srv)
        return -1;
    return pthread_create(&loop_thread, NULL, loop, NULL);
}

static int clean_suite(void)
{
    event_base_loopexit(base, NULL);
    pthread_join(loop_thread, NULL);
    gw_http_server_free(srv);
    event_base_free(base);
    return 0;
}

#define UNIT_SUITE_INIT init_suite
#define UNIT_SUITE_CLEAN clean_suite

/* ---- helpers ---- */

static struct cp_secret_backend_config vault_cfg(void)
{
    struct cp_secret_backend_config c = {.vault_addr = base_url, .vault_token = VAULT_TOKEN};
    return c;
}

static struct cp_secret_backend_config aws_cfg(void)
{
    static char ep[80];
    snprintf(ep, sizeof(ep), "%s/", base_url);
    struct cp_secret_backend_config c = {.aws_region = "us-east-1",
                                         .aws_access_key_id = AWS_AKID,
                                         .aws_secret_access_key = AWS_SECRET,
                                         .awssm_endpoint = ep};
    return c;
}

/* Resolves text; on success compares the value with want. Returns the code
 * and leaves the message in err. */
static int resolve(const struct cp_secret_backend_config *c, const char *text, const char *want,
                   char *err, size_t errlen)
{
    struct cp_secret_ref r;
    err[0] = '\0';
    int rc = cp_secret_ref_parse(text, &r, err, errlen);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    char *v = (char *)1;
    size_t n = 99;
    rc = cp_secret_resolve(c, &r, &v, &n, err, errlen);
    if (rc == GW_OK) {
        CU_ASSERT_PTR_NOT_NULL(v);
        if (want) {
            CU_ASSERT_EQUAL(n, strlen(want));
            CU_ASSERT_STRING_EQUAL(v, want);
        }
        cp_secret_free(v, n);
    } else {
        CU_ASSERT_PTR_NULL(v);
        CU_ASSERT_EQUAL(n, 0);
        /* Every failure names the ref. */
        CU_ASSERT_PTR_NOT_NULL(strstr(err, text));
    }
    cp_secret_ref_free(&r);
    return rc;
}

static void expect_msg(const char *err, const char *part)
{
    if (!strstr(err, part)) {
        fprintf(stderr, "\nmessage '%s' lacks '%s'\n", err, part);
        CU_FAIL("message");
    }
}

/* ---- Vault ---- */

static void test_vault_ok(void)
{
    struct cp_secret_backend_config c = vault_cfg();
    char err[512];
    CU_ASSERT_EQUAL(
        resolve(&c, "vault:secret/llm/openai#api_key", "sk-vault-123", err, sizeof(err)), GW_OK);
    CU_ASSERT_STRING_EQUAL(seen_path, "/v1/secret/data/llm/openai");
    CU_ASSERT_STRING_EQUAL(seen_namespace, "");
    /* Escapes in the value are decoded. */
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#html", "a&b", err, sizeof(err)), GW_OK);
    /* A trailing slash on VAULT_ADDR is harmless; segments are encoded. */
    char addr[80];
    snprintf(addr, sizeof(addr), "%s/", base_url);
    c.vault_addr = addr;
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/a:b/c#k", "encoded", err, sizeof(err)), GW_OK);
    CU_ASSERT_STRING_EQUAL(seen_path, "/v1/secret/data/a%3Ab/c");
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/escaped#api_key", "sk-esc", err, sizeof(err)), GW_OK);
    c.vault_namespace = "team-a";
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/ns#k", "in-ns", err, sizeof(err)), GW_OK);
    CU_ASSERT_STRING_EQUAL(seen_namespace, "team-a");
}

static void test_vault_field_errors(void)
{
    struct cp_secret_backend_config c = vault_cfg();
    char err[512];
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#nope", NULL, err, sizeof(err)),
                    GW_ENOTFOUND);
    expect_msg(err, "no field 'nope'");
    CU_ASSERT_PTR_NULL(strstr(err, "sk-vault-123"));
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#n", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "not a string");
    CU_ASSERT_PTR_NULL(strstr(err, "sk-vault-123"));
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/deleted#k", NULL, err, sizeof(err)), GW_ENOTFOUND);
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/notjson#k", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "not KV v2 JSON");
}

static void test_vault_http_errors(void)
{
    struct cp_secret_backend_config c = vault_cfg();
    char err[512];
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/missing#k", NULL, err, sizeof(err)), GW_ENOTFOUND);
    expect_msg(err, "404");
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/boom#k", NULL, err, sizeof(err)), GW_EIO);
    expect_msg(err, "503");
    expect_msg(err, "Vault is sealed");
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/big#k", NULL, err, sizeof(err)), GW_ELIMIT);
    expect_msg(err, "more than");
    c.vault_token = "hvs.wrong";
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#api_key", NULL, err, sizeof(err)),
                    GW_EINVAL);
    expect_msg(err, "403");
    expect_msg(err, "permission denied");
    CU_ASSERT_PTR_NULL(strstr(err, "hvs.wrong"));
}

static void test_vault_config(void)
{
    struct cp_secret_backend_config c = vault_cfg();
    char err[512];
    c.vault_token = NULL;
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#api_key", NULL, err, sizeof(err)),
                    GW_EINVAL);
    expect_msg(err, "VAULT_TOKEN is not set");
    c = vault_cfg();
    c.vault_addr = NULL;
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#api_key", NULL, err, sizeof(err)),
                    GW_EINVAL);
    expect_msg(err, "VAULT_ADDR is not set");
    c = vault_cfg();
    c.vault_token = "a\r\nX-Injected: 1";
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#api_key", NULL, err, sizeof(err)),
                    GW_EINVAL);
    /* Nobody listens on a port we just closed: a transport error, quickly. */
    int p2;
    int fd = gw_http_listen("127.0.0.1", 0, 0, &p2);
    CU_ASSERT_FATAL(fd >= 0);
    close(fd);
    char addr[64];
    snprintf(addr, sizeof(addr), "http://127.0.0.1:%d", p2);
    c = vault_cfg();
    c.vault_addr = addr;
    c.connect_timeout_ms = 1000;
    c.timeout_ms = 2000;
    CU_ASSERT_EQUAL(resolve(&c, "vault:secret/llm/openai#api_key", NULL, err, sizeof(err)), GW_EIO);
    expect_msg(err, "cannot be reached");
}

/* ---- AWS Secrets Manager ---- */

static void test_awssm_ok(void)
{
    struct cp_secret_backend_config c = aws_cfg();
    char err[512];
    int before = aws_verified;
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", "sk-aws-456", err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(aws_verified, before + 1);
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/json#api_key", "sk-json-789", err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/json#org", "o-1", err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/json",
                            "{\"api_key\":\"sk-json-789\",\"org\":\"o-1\","
                            "\"n\":1}",
                            err, sizeof(err)),
                    GW_OK);
    CU_ASSERT_EQUAL(resolve(&c,
                            "awssm:arn:aws:secretsmanager:us-east-1:123456789012:secret:x-AbCdEf",
                            "by-arn", err, sizeof(err)),
                    GW_OK);
    CU_ASSERT_EQUAL(aws_verified, before + 5);
}

static void test_awssm_session_token(void)
{
    struct cp_secret_backend_config c = aws_cfg();
    char err[512];
    c.aws_session_token = AWS_TOKEN;
    aws_token = AWS_TOKEN;
    int saw = aws_saw_session;
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", "sk-aws-456", err, sizeof(err)), GW_OK);
    CU_ASSERT_EQUAL(aws_saw_session, saw + 1);
    /* The fake wants the token: a request without it does not verify. */
    c.aws_session_token = NULL;
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    aws_token = NULL;
}

static void test_awssm_wrong_secret_key(void)
{
    struct cp_secret_backend_config c = aws_cfg();
    char err[512];
    int before = aws_verified;
    c.aws_secret_access_key = "fake/secret+key0123456789abcdefghijklmX";
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "InvalidSignatureException");
    expect_msg(err, "refused the credentials");
    CU_ASSERT_PTR_NULL(strstr(err, "abcdefghijklmX"));
    CU_ASSERT_EQUAL(aws_verified, before);
    /* The region is part of the signed scope: the fake is us-east-1. */
    c = aws_cfg();
    c.aws_region = "eu-west-1";
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    /* An unknown access key id is refused as such. */
    c = aws_cfg();
    c.aws_access_key_id = "AKIDUNKNOWN";
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "UnrecognizedClientException");
}

static void test_awssm_errors(void)
{
    struct cp_secret_backend_config c = aws_cfg();
    char err[512];
    CU_ASSERT_EQUAL(resolve(&c, "awssm:nope/missing", NULL, err, sizeof(err)), GW_ENOTFOUND);
    expect_msg(err, "ResourceNotFoundException");
    expect_msg(err, "can't find");
    CU_ASSERT_EQUAL(resolve(&c, "awssm:boom", NULL, err, sizeof(err)), GW_EIO);
    expect_msg(err, "500");
    CU_ASSERT_EQUAL(resolve(&c, "awssm:binary", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "binary");
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/json#missing", NULL, err, sizeof(err)), GW_ENOTFOUND);
    expect_msg(err, "no member 'missing'");
    CU_ASSERT_PTR_NULL(strstr(err, "sk-json"));
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/json#n", NULL, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NULL(strstr(err, "sk-json"));
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai#field", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "not a JSON object");
    CU_ASSERT_PTR_NULL(strstr(err, "sk-aws-456"));
}

static void test_awssm_config(void)
{
    struct cp_secret_backend_config c = aws_cfg();
    char err[512];
    c.aws_region = NULL;
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "AWS_REGION");
    c = aws_cfg();
    c.aws_region = "us-east-1/../x";
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    c = aws_cfg();
    c.aws_secret_access_key = NULL;
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "AWS_SECRET_ACCESS_KEY");
    c = aws_cfg();
    c.awssm_endpoint = "ftp://127.0.0.1/";
    CU_ASSERT_EQUAL(resolve(&c, "awssm:prod/openai", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "not an http(s) URL");
}

static void test_builtin_not_resolved(void)
{
    struct cp_secret_backend_config c = vault_cfg();
    char err[512];
    CU_ASSERT_EQUAL(resolve(&c, "openai-prod", NULL, err, sizeof(err)), GW_EINVAL);
    expect_msg(err, "read from the store");
}

static void test_config_from_env(void)
{
    setenv("VAULT_ADDR", "http://v:8200", 1);
    setenv("VAULT_TOKEN", "t", 1);
    unsetenv("AWS_REGION");
    setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
    setenv("AWS_SESSION_TOKEN", "", 1);
    struct cp_secret_backend_config c;
    cp_secret_backend_config_from_env(&c);
    CU_ASSERT_STRING_EQUAL(c.vault_addr, "http://v:8200");
    CU_ASSERT_STRING_EQUAL(c.vault_token, "t");
    CU_ASSERT_STRING_EQUAL(c.aws_region, "ap-south-1");
    CU_ASSERT_PTR_NULL(c.aws_session_token); /* empty counts as unset */
    CU_ASSERT_EQUAL(c.timeout_ms, 0);
    setenv("AWS_REGION", "us-west-2", 1);
    cp_secret_backend_config_from_env(&c);
    CU_ASSERT_STRING_EQUAL(c.aws_region, "us-west-2");
}

static CU_TestInfo tests[] = {
    {"vault: KV v2 read", test_vault_ok},
    {"vault: field errors", test_vault_field_errors},
    {"vault: 403, 404, 5xx, oversized", test_vault_http_errors},
    {"vault: configuration and transport", test_vault_config},
    {"awssm: GetSecretValue, signature verified", test_awssm_ok},
    {"awssm: session token", test_awssm_session_token},
    {"awssm: wrong secret key refused by the fake", test_awssm_wrong_secret_key},
    {"awssm: not found, 5xx, binary, fields", test_awssm_errors},
    {"awssm: configuration", test_awssm_config},
    {"built-in refs are not resolved here", test_builtin_not_resolved},
    {"configuration from the environment", test_config_from_env},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
