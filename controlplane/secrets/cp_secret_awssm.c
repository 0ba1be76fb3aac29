/*
 * The AWS Secrets Manager backend: GetSecretValue over the JSON 1.1
 * protocol, signed with SigV4 (common/gw_sigv4).
 *
 *   POST / (the endpoint)  X-Amz-Target: secretsmanager.GetSecretValue
 *   Content-Type: application/x-amz-json-1.1     {"SecretId":"<id>"}
 *   200 {"ARN":...,"Name":...,"SecretString":"<value>",...}
 *   4xx {"__type":"ResourceNotFoundException","message":"..."}
 *
 * The endpoint is https://secretsmanager.<region>.amazonaws.com/ unless
 * LLMGW_AWSSM_ENDPOINT names another (a VPC endpoint, a test fake). The
 * Host header is set explicitly, so what is signed is what is sent.
 */
#include <openssl/crypto.h>
#include <stdio.h>
#include <string.h>

#include "cp_secret_backend.h"
#include "gw_error.h"
#include "gw_json.h"
#include "gw_sigv4.h"

static int valid_region(const char *r)
{
    size_t n = strlen(r);
    return n > 0 && n < 64 && strspn(r, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

/* The endpoint split into what gets signed: host[:port], path, and the
 * URL rebuilt by curl from the same parse (so curl sends that path). */
struct endpoint {
    char *url, *host, *port, *path;
};

static void endpoint_free(struct endpoint *ep)
{
    curl_free(ep->url);
    curl_free(ep->host);
    curl_free(ep->port);
    curl_free(ep->path);
}

static int endpoint_parse(const char *text, struct endpoint *ep)
{
    memset(ep, 0, sizeof(*ep));
    CURLU *u = curl_url();
    if (!u)
        return GW_ENOMEM;
    int ok = curl_url_set(u, CURLUPART_URL, text, 0) == CURLUE_OK &&
             curl_url_set(u, CURLUPART_QUERY, NULL, 0) == CURLUE_OK &&
             curl_url_set(u, CURLUPART_FRAGMENT, NULL, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &ep->host, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_PATH, &ep->path, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_URL, &ep->url, 0) == CURLUE_OK;
    char *scheme = NULL;
    ok = ok && curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
         (strcmp(scheme, "https") == 0 || strcmp(scheme, "http") == 0);
    curl_free(scheme);
    if (ok && curl_url_get(u, CURLUPART_PORT, &ep->port, 0) != CURLUE_OK)
        ep->port = NULL; /* no explicit port */
    curl_url_cleanup(u);
    if (!ok) {
        endpoint_free(ep);
        memset(ep, 0, sizeof(*ep));
        return GW_EINVAL;
    }
    return GW_OK;
}

/* "com.amazonaws...#ResourceNotFoundException" -> "ResourceNotFoundException". */
static void aws_error(const struct gw_buf *a, char *type, size_t typelen, char *msg, size_t msglen)
{
    type[0] = msg[0] = '\0';
    const char *vp;
    size_t vn;
    if (!a->data || !gw_json_valid(a->data, a->len, 16))
        return;
    if (gw_json_span_member(a->data, a->len, "__type", &vp, &vn) == 1 && vn >= 2 && vp[0] == '"') {
        const char *s = vp + 1, *e = vp + vn - 1, *h = memchr(s, '#', (size_t)(e - s));
        if (h)
            s = h + 1;
        cp_secret_excerpt(type, typelen, s, (size_t)(e - s));
    }
    if ((gw_json_span_member(a->data, a->len, "message", &vp, &vn) == 1 ||
         gw_json_span_member(a->data, a->len, "Message", &vp, &vn) == 1) &&
        vn >= 2 && vp[0] == '"')
        cp_secret_excerpt(msg, msglen, vp + 1, vn - 2);
}

static int append_header(struct curl_slist **hs, const char *name, const char *value)
{
    char line[4096];
    int n = snprintf(line, sizeof(line), "%s: %s", name, value);
    if (n < 0 || (size_t)n >= sizeof(line))
        return GW_EINVAL;
    struct curl_slist *t = curl_slist_append(*hs, line);
    OPENSSL_cleanse(line, (size_t)n);
    if (!t)
        return GW_ENOMEM;
    *hs = t;
    return GW_OK;
}

static int answer_error(const struct cp_secret_ref *ref, long status, const struct gw_buf *a,
                        char *err, size_t errlen)
{
    char type[96], msg[200];
    aws_error(a, type, sizeof(type), msg, sizeof(msg));
    const char *sep = msg[0] ? ": " : "";
    if (strcmp(type, "ResourceNotFoundException") == 0)
        return cp_secret_fail(err, errlen, ref, GW_ENOTFOUND,
                              "AWS Secrets Manager has no secret '%s' (%s%s%s)", ref->secret_id,
                              type, sep, msg);
    if (strcmp(type, "AccessDeniedException") == 0 ||
        strcmp(type, "UnrecognizedClientException") == 0 ||
        strcmp(type, "InvalidSignatureException") == 0 ||
        strcmp(type, "ExpiredTokenException") == 0 || strcmp(type, "IncompleteSignature") == 0 ||
        status == 403)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "AWS Secrets Manager refused the credentials (%ld %s%s%s): check "
                              "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, "
                              "AWS_REGION and the IAM policy",
                              status, type[0] ? type : "no error type", sep, msg);
    if (status >= 500)
        return cp_secret_fail(err, errlen, ref, GW_EIO, "AWS Secrets Manager answered %ld (%s%s%s)",
                              status, type[0] ? type : "no error type", sep, msg);
    return cp_secret_fail(err, errlen, ref, GW_EINVAL, "AWS Secrets Manager answered %ld (%s%s%s)",
                          status, type[0] ? type : "no error type", sep, msg);
}

/* The answer's SecretString, or its member ref->field. */
static int take_value(const struct cp_secret_ref *ref, const struct gw_buf *a, struct gw_buf *value,
                      char *err, size_t errlen)
{
    static const char *const ss[] = {"SecretString"};
    int rc = cp_secret_json_string(a->data ? a->data : "", a->len, ss, 1, value);
    if (rc == GW_ENOTFOUND)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "the secret has no SecretString (binary secrets are not supported)");
    if (rc == GW_EINVAL)
        return cp_secret_fail(err, errlen, ref, rc,
                              "AWS Secrets Manager's answer is not GetSecretValue JSON");
    if (rc != GW_OK || !ref->field)
        return rc == GW_OK ? rc : cp_secret_fail(err, errlen, ref, rc, "out of memory");
    struct gw_buf field;
    gw_buf_init(&field, CP_SECRET_ANSWER_MAX);
    const char *k[1] = {ref->field};
    rc = cp_secret_json_string(value->data ? value->data : "", value->len, k, 1, &field);
    /* value held the whole SecretString: wipe it, keep the field only. */
    cp_secret_buf_wipe(value);
    gw_buf_init(value, CP_SECRET_ANSWER_MAX);
    if (rc == GW_OK) {
        *value = field;
        return GW_OK;
    }
    cp_secret_buf_wipe(&field);
    if (rc == GW_ENOTFOUND)
        return cp_secret_fail(err, errlen, ref, rc, "the SecretString has no member '%s'",
                              ref->field);
    if (rc == GW_EINVAL)
        return cp_secret_fail(err, errlen, ref, rc,
                              "the SecretString is not a JSON object with a string member '%s'",
                              ref->field);
    return cp_secret_fail(err, errlen, ref, rc, "out of memory");
}

int cp_secret_awssm_fetch(const struct cp_secret_backend_config *c, const struct cp_secret_ref *ref,
                          struct gw_buf *value, char *err, size_t errlen)
{
    if (!c->aws_region || !valid_region(c->aws_region))
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "AWS_REGION is not set or is not a region such as us-east-1");
    if (!c->aws_access_key_id || !c->aws_secret_access_key)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set");
    char defurl[128];
    const char *url = c->awssm_endpoint;
    if (!url) {
        snprintf(defurl, sizeof(defurl), "https://secretsmanager.%s.amazonaws.com/", c->aws_region);
        url = defurl;
    }
    struct endpoint ep;
    if (endpoint_parse(url, &ep) != GW_OK)
        return cp_secret_fail(err, errlen, ref, GW_EINVAL,
                              "the AWS Secrets Manager endpoint '%s' is not an http(s) URL", url);
    char host[512];
    int hn = ep.port ? snprintf(host, sizeof(host), "%s:%s", ep.host, ep.port)
                     : snprintf(host, sizeof(host), "%s", ep.host);
    struct gw_buf body, answer;
    gw_buf_init(&body, 8192);
    gw_buf_init(&answer, CP_SECRET_ANSWER_MAX);
    struct curl_slist *hs = NULL;
    int rc = hn > 0 && (size_t)hn < sizeof(host) ? GW_OK : GW_EINVAL;
    if (rc == GW_OK)
        rc = gw_buf_appends(&body, "{\"SecretId\":");
    if (rc == GW_OK)
        rc = gw_json_escape(&body, ref->secret_id, strlen(ref->secret_id));
    if (rc == GW_OK)
        rc = gw_buf_appends(&body, "}");
    struct gw_sigv4_header sh[] = {{"host", host},
                                   {"content-type", "application/x-amz-json-1.1"},
                                   {"x-amz-target", "secretsmanager.GetSecretValue"}};
    struct gw_sigv4_params sp = {.access_key = c->aws_access_key_id,
                                 .secret_key = c->aws_secret_access_key,
                                 .session_token = c->aws_session_token,
                                 .region = c->aws_region,
                                 .service = "secretsmanager"};
    struct gw_sigv4_result sig;
    gw_sigv4_result_init(&sig);
    if (rc == GW_OK)
        rc = gw_sigv4_sign(&sp, "POST", ep.path, "", sh, 3, body.data, body.len, &sig);
    for (size_t i = 0; rc == GW_OK && i < 3; i++)
        rc = append_header(&hs,
                           i == 0   ? "Host"
                           : i == 1 ? "Content-Type"
                                    : "X-Amz-Target",
                           sh[i].value);
    for (size_t i = 0; rc == GW_OK && i < sig.nadd; i++)
        rc = append_header(&hs, sig.add[i].name, sig.add[i].value);
    /* No "Expect: 100-continue" round trip for a small body. */
    struct curl_slist *t = rc == GW_OK ? curl_slist_append(hs, "Expect:") : hs;
    if (!t)
        rc = GW_ENOMEM;
    else
        hs = t;
    gw_sigv4_result_free(&sig);
    long status = 0;
    if (rc != GW_OK)
        rc = cp_secret_fail(err, errlen, ref, rc,
                            rc == GW_EINVAL ? "the request cannot be signed: check "
                                              "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and "
                                              "AWS_SESSION_TOKEN"
                                            : "out of memory building the request");
    else
        rc = cp_secret_http(c, ref, "AWS Secrets Manager", "POST", ep.url, hs, body.data, body.len,
                            &status, &answer, err, errlen);
    cp_secret_slist_wipe(hs);
    if (rc == GW_OK && status != 200)
        rc = answer_error(ref, status, &answer, err, errlen);
    if (rc == GW_OK)
        rc = take_value(ref, &answer, value, err, errlen);
    cp_secret_buf_wipe(&answer);
    gw_buf_free(&body);
    endpoint_free(&ep);
    return rc;
}
