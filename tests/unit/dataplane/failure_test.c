/* Tests for the failure taxonomy (contract/canon/canon.c) and how upstream
 * errors reach it: the policy table against ARCHITECTURE.md "Failure
 * classes", canon_classify_http status by status and phrase by phrase, and
 * every driver's classify (its hook, or drv_classify_default as the
 * exchange falls back to) on error bodies as each provider writes them. */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "dp_driver.h"
#include "drv_util.h"
#include "gw_upc.h"

/* ----------------------------------------------------------- the policy */

/* ARCHITECTURE.md, "Failure classes", as written there. */
static const struct {
    const char *name;
    int advances, counts, retries;
} policy[] = {
    {"timeout", 1, 1, 1},           {"network", 1, 1, 1},           {"provider_5xx", 1, 1, 1},
    {"rate_limited", 1, 1, 1},      {"model_unavailable", 1, 1, 1}, {"quota_exhausted", 1, 1, 0},
    {"auth_failed", 1, 1, 0},       {"empty_output", 1, 1, 1},      {"context_overflow", 1, 0, 0},
    {"unsupported_input", 1, 0, 0}, {"bad_request", 0, 0, 0},       {"not_found", 0, 0, 0},
    {"payload_too_large", 0, 0, 0}, {"content_filtered", 0, 0, 0},  {"canceled", 0, 0, 0},
};

static enum canon_failure by_name(const char *name)
{
    for (int f = 0; f < CANON_FAIL_COUNT; f++)
        if (strcmp(canon_failure_name(f), name) == 0)
            return f;
    return CANON_FAIL_COUNT;
}

static void test_policy_table(void)
{
    /* The table is the closed set: every class once, nothing else. */
    CU_ASSERT_EQUAL(sizeof(policy) / sizeof(*policy), CANON_FAIL_COUNT);
    int seen[CANON_FAIL_COUNT] = {0};
    for (size_t i = 0; i < sizeof(policy) / sizeof(*policy); i++) {
        enum canon_failure f = by_name(policy[i].name);
        CU_ASSERT_NOT_EQUAL_FATAL(f, CANON_FAIL_COUNT);
        seen[f]++;
        CU_ASSERT_EQUAL(canon_failure_advances(f), policy[i].advances);
        CU_ASSERT_EQUAL(canon_failure_counts(f), policy[i].counts);
        CU_ASSERT_EQUAL(canon_failure_retries(f), policy[i].retries);
        if (canon_failure_advances(f) != policy[i].advances ||
            canon_failure_counts(f) != policy[i].counts ||
            canon_failure_retries(f) != policy[i].retries)
            fprintf(stderr, "\nclass %s\n", policy[i].name);
    }
    for (int f = 0; f < CANON_FAIL_COUNT; f++)
        CU_ASSERT_EQUAL(seen[f], 1);
    /* What counts against health always advances the chain. */
    for (int f = 0; f < CANON_FAIL_COUNT; f++)
        if (canon_failure_counts(f))
            CU_ASSERT(canon_failure_advances(f));
    /* Out of range: no verdict, no retry. */
    CU_ASSERT_FALSE(canon_failure_counts(CANON_FAIL_COUNT));
    CU_ASSERT_FALSE(canon_failure_advances(CANON_FAIL_COUNT));
    CU_ASSERT_FALSE(canon_failure_retries(-1));
}

/* ------------------------------------------------- canon_classify_http */

struct http_case {
    int status;
    const char *body;
    const char *want;
};

static void check_http(const struct http_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        size_t len = c[i].body ? strlen(c[i].body) : 0;
        const char *got = canon_failure_name(canon_classify_http(c[i].status, c[i].body, len));
        CU_ASSERT_STRING_EQUAL(got, c[i].want);
        if (strcmp(got, c[i].want) != 0)
            fprintf(stderr, "\n%d %s: %s, want %s\n", c[i].status, c[i].body ? c[i].body : "-", got,
                    c[i].want);
    }
}

static void test_http_4xx(void)
{
    static const struct http_case cases[] = {
        /* 400/422/413: context phrases first. */
        {400, "This model's maximum context length is 8192 tokens.", "context_overflow"},
        {400, "{\"code\":\"context_length_exceeded\"}", "context_overflow"},
        {400, "Your input exceeds the context window of this model.", "context_overflow"},
        {400, "too many tokens in the prompt", "context_overflow"},
        {400, "prompt is too long: 208310 tokens > 200000 maximum", "context_overflow"},
        {400, "Input is too long for requested model.", "context_overflow"},
        {400, "exceeds the MAXIMUM CONTEXT of the model", "context_overflow"},
        {400, "input length and `max_tokens` exceed context limit: 1 + 2 > 2", "context_overflow"},
        {422, "context length exceeded", "context_overflow"},
        {413, "context length exceeded", "context_overflow"},
        /* 413 otherwise: the body is too big for anyone. */
        {413, "Request Entity Too Large", "payload_too_large"},
        {413, NULL, "payload_too_large"},
        /* A spent prepaid balance. */
        {400, "Your credit balance is too low to access the API.", "quota_exhausted"},
        /* What this model cannot take. */
        {400, "model x does not support tools", "unsupported_input"},
        {400, "images are not supported", "unsupported_input"},
        {400, "Unsupported parameter: 'max_tokens'", "unsupported_input"},
        {400, "This model doesn't support tool use.", "unsupported_input"},
        {400, "image_url is only supported by certain models.", "unsupported_input"},
        {422, "unsupported content type", "unsupported_input"},
        /* The provider's filter. */
        {400, "blocked by the content filter", "content_filtered"},
        {400, "{\"code\":\"content_filter\"}", "content_filtered"},
        {400, "triggering Azure OpenAI's content management policy", "content_filtered"},
        /* Anything else in the body is the request's own fault. */
        {400, "messages: roles must alternate", "bad_request"},
        {400, NULL, "bad_request"},
        {422, "{\"detail\":[{\"msg\":\"field required\"}]}", "bad_request"},
        /* Credentials and money. */
        {401, "invalid api key", "auth_failed"},
        {403, "forbidden", "auth_failed"},
        {403, NULL, "auth_failed"},
        {402, "Insufficient Balance", "quota_exhausted"},
        /* 404: about the model, or not. */
        {404, "The model `gpt-9` does not exist", "model_unavailable"},
        {404, "{\"error\":\"MODEL not found\"}", "model_unavailable"},
        {404, "404 page not found", "not_found"},
        {404, NULL, "not_found"},
        {408, "Request Timeout", "timeout"},
        /* 429: a rate, unless a quota is spent. */
        {429, "slow down", "rate_limited"},
        {429, NULL, "rate_limited"},
        {429, "{\"code\":\"insufficient_quota\"}", "quota_exhausted"},
        {429, "Quota exceeded for billing account.", "quota_exhausted"},
        {429, "please check your plan and billing details", "quota_exhausted"},
        {429, "Rate limit reached on requests per day (RPD)", "quota_exhausted"},
        {429, "Rate limit reached ... Visit https://x/account/billing", "rate_limited"},
        {429, "Quota exceeded for requests_per_minute_per_project", "rate_limited"},
        {429, "Quota exceeded for requests_per_day_per_project", "quota_exhausted"},
        /* Other 4xx: the request. */
        {409, "conflict", "bad_request"},
        {418, "teapot", "bad_request"},
    };
    check_http(cases, sizeof(cases) / sizeof(*cases));
}

static void test_http_5xx(void)
{
    static const struct http_case cases[] = {
        {500, "internal error", "provider_5xx"},
        {500, "the model crashed", "provider_5xx"},
        {501, NULL, "provider_5xx"},
        {502, "<html>Bad Gateway</html>", "provider_5xx"},
        /* 503/529: the model, or the service. */
        {503, "Service Unavailable", "provider_5xx"},
        {503, NULL, "provider_5xx"},
        {503, "The model is overloaded.", "model_unavailable"},
        {529, "Overloaded", "provider_5xx"},
        {529, "model overloaded", "model_unavailable"},
        /* Gateway timeouts (Cloudflare's 524 too). */
        {504, "Gateway Timeout", "timeout"},
        {524, "A timeout occurred", "timeout"},
        {599, NULL, "provider_5xx"},
    };
    check_http(cases, sizeof(cases) / sizeof(*cases));
}

/* Only the first 64 KiB of a body are read for phrases. */
static void test_http_bound(void)
{
    size_t n = 70000;
    char *body = malloc(n + 32);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    memset(body, 'x', n);
    memcpy(body + n, "context length", 15);
    CU_ASSERT_EQUAL(canon_classify_http(400, body, n + 14), CANON_FAIL_BAD_REQUEST);
    memcpy(body + 100, "context length", 14);
    CU_ASSERT_EQUAL(canon_classify_http(400, body, n + 14), CANON_FAIL_CONTEXT_OVERFLOW);
    free(body);
}

/* ------------------------------------------------------------- drivers */

struct drv_case {
    const struct dp_driver *d;
    int status;
    const char *body;
    const char *want;
    const char *msg; /* the extracted message, or NULL not to check */
};

/* As the exchange does: the driver's hook, else the default rules. */
static void check_drivers(const struct drv_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        enum canon_failure f = CANON_FAIL_COUNT;
        char msg[384];
        (c[i].d->classify ? c[i].d->classify : drv_classify_default)(
            c[i].status, c[i].body, strlen(c[i].body), &f, msg, sizeof(msg));
        const char *got = canon_failure_name(f);
        CU_ASSERT_STRING_EQUAL(got, c[i].want);
        if (strcmp(got, c[i].want) != 0)
            fprintf(stderr, "\n%s case %zu (%d): %s, want %s\n", c[i].d->info->name, i, c[i].status,
                    got, c[i].want);
        if (c[i].msg)
            CU_ASSERT_STRING_EQUAL(msg, c[i].msg);
    }
}

static void test_openai(void)
{
    CU_ASSERT_PTR_NULL(drv_openai.classify); /* the default rules */
    CU_ASSERT_PTR_NULL(drv_openai_responses.classify);
    static const struct drv_case cases[] = {
        {&drv_openai, 400,
         "{\"error\":{\"message\":\"This model's maximum context length is 128000 tokens. "
         "However, your messages resulted in 130419 tokens. Please reduce the length of the "
         "messages.\",\"type\":\"invalid_request_error\",\"param\":\"messages\",\"code\":"
         "\"context_length_exceeded\"}}",
         "context_overflow", NULL},
        {&drv_openai, 429,
         "{\"error\":{\"message\":\"You exceeded your current quota, please check your plan and "
         "billing details. For more information on this error, read the docs: "
         "https://platform.openai.com/docs/guides/error-codes/api-errors.\",\"type\":"
         "\"insufficient_quota\",\"param\":null,\"code\":\"insufficient_quota\"}}",
         "quota_exhausted", NULL},
        {&drv_openai, 429,
         "{\"error\":{\"message\":\"Rate limit reached for gpt-4o in organization org-abc on "
         "tokens per min (TPM): Limit 30000, Used 29734, Requested 1200. Please try again in "
         "1.868s. Visit https://platform.openai.com/account/rate-limits to learn more.\","
         "\"type\":\"tokens\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}",
         "rate_limited",
         "Rate limit reached for gpt-4o in organization org-abc on tokens per min "
         "(TPM): Limit 30000, Used 29734, Requested 1200. Please try again in "
         "1.868s. Visit https://platform.openai.com/account/rate-limits to learn "
         "more."},
        /* A free-tier rate limit points at billing: still a rate limit. */
        {&drv_openai, 429,
         "{\"error\":{\"message\":\"Rate limit reached for gpt-4o-mini in organization org-abc "
         "on requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in 20s. "
         "Visit https://platform.openai.com/account/rate-limits to learn more. You can increase "
         "your rate limit by adding a payment method to your account at "
         "https://platform.openai.com/account/billing.\",\"type\":\"requests\",\"param\":null,"
         "\"code\":\"rate_limit_exceeded\"}}",
         "rate_limited", NULL},
        /* A daily limit: no retry within the request outlives it. */
        {&drv_openai, 429,
         "{\"error\":{\"message\":\"Rate limit reached for gpt-4o-mini in organization org-abc "
         "on requests per day (RPD): Limit 200, Used 200, Requested 1. Please try again in "
         "7m12s.\",\"type\":\"requests\",\"param\":null,\"code\":\"rate_limit_exceeded\"}}",
         "quota_exhausted", NULL},
        /* Groq (OpenAI wire format) links its billing page from a rate limit. */
        {&drv_openai, 429,
         "{\"error\":{\"message\":\"Rate limit reached for model `llama-3.3-70b-versatile` in "
         "organization `org_01` service tier `on_demand` on tokens per minute (TPM): Limit "
         "6000, Used 5800, Requested 900. Please try again in 7s. Need more tokens? Upgrade to "
         "Dev Tier today at https://console.groq.com/settings/billing\",\"type\":\"tokens\","
         "\"code\":\"rate_limit_exceeded\"}}",
         "rate_limited", NULL},
        /* Vertex AI's OpenAI-compatible endpoint, a per-minute quota. */
        {&drv_openai, 429,
         "{\"error\":{\"code\":429,\"message\":\"Quota exceeded for "
         "aiplatform.googleapis.com/generate_content_requests_per_minute_per_project_per_base_"
         "model with base model: gemini-2.0-flash. Please submit a quota increase request.\","
         "\"status\":\"RESOURCE_EXHAUSTED\"}}",
         "rate_limited", NULL},
        {&drv_openai, 404,
         "{\"error\":{\"message\":\"The model `gpt-9` does not exist or you do not have access "
         "to it.\",\"type\":\"invalid_request_error\",\"param\":null,\"code\":"
         "\"model_not_found\"}}",
         "model_unavailable", NULL},
        {&drv_openai, 401,
         "{\"error\":{\"message\":\"Incorrect API key provided: sk-abc***xyz.\",\"type\":"
         "\"invalid_request_error\",\"param\":null,\"code\":\"invalid_api_key\"}}",
         "auth_failed", "Incorrect API key provided: sk-abc***xyz."},
        {&drv_openai, 400,
         "{\"error\":{\"message\":\"Invalid content type. image_url is only supported by certain "
         "models.\",\"type\":\"invalid_request_error\",\"param\":\"messages.[0].content.[1]."
         "type\",\"code\":null}}",
         "unsupported_input", NULL},
        {&drv_openai, 400,
         "{\"error\":{\"message\":\"Unsupported parameter: 'max_tokens' is not supported with "
         "this model. Use 'max_completion_tokens' instead.\",\"type\":\"invalid_request_error\","
         "\"param\":\"max_tokens\",\"code\":\"unsupported_parameter\"}}",
         "unsupported_input", NULL},
        {&drv_openai, 400,
         "{\"error\":{\"message\":\"'messages' must contain the word 'json' in some form, to "
         "use 'response_format' of type 'json_object'.\",\"type\":\"invalid_request_error\","
         "\"param\":\"messages\",\"code\":null}}",
         "bad_request", NULL},
        /* Azure OpenAI's filter on the prompt. */
        {&drv_openai, 400,
         "{\"error\":{\"message\":\"The response was filtered due to the prompt triggering "
         "Azure OpenAI's content management policy. Please modify your prompt and retry.\","
         "\"type\":null,\"param\":\"prompt\",\"code\":\"content_filter\",\"status\":400}}",
         "content_filtered", NULL},
        {&drv_openai, 500,
         "{\"error\":{\"message\":\"The server had an error while processing your request. "
         "Sorry about that!\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
         "provider_5xx", NULL},
        {&drv_openai, 503,
         "{\"error\":{\"message\":\"The engine is currently overloaded, please try again "
         "later\",\"type\":\"server_error\",\"param\":null,\"code\":null}}",
         "provider_5xx", NULL},
        {&drv_openai_responses, 400,
         "{\"error\":{\"message\":\"Your input exceeds the context window of this model. Please "
         "adjust your input and try again.\",\"type\":\"invalid_request_error\",\"param\":"
         "\"input\",\"code\":\"context_length_exceeded\"}}",
         "context_overflow", NULL},
        {&drv_openai_responses, 429,
         "{\"error\":{\"message\":\"You exceeded your current quota.\",\"type\":"
         "\"insufficient_quota\",\"param\":null,\"code\":\"insufficient_quota\"}}",
         "quota_exhausted", NULL},
    };
    check_drivers(cases, sizeof(cases) / sizeof(*cases));
}

#define ANTHROPIC_ERR(type, message)                                                               \
    "{\"type\":\"error\",\"error\":{\"type\":\"" type "\",\"message\":\"" message "\"},"           \
    "\"request_id\":\"req_011CSHoEeqs5C35K2UUqR7Fy\"}"

static void test_anthropic(void)
{
    CU_ASSERT_PTR_NOT_NULL(drv_anthropic.classify);
    static const struct drv_case cases[] = {
        {&drv_anthropic, 529, ANTHROPIC_ERR("overloaded_error", "Overloaded"), "provider_5xx",
         "Overloaded"},
        {&drv_anthropic, 400,
         ANTHROPIC_ERR("invalid_request_error", "prompt is too long: 208310 tokens > 200000 "
                                                "maximum"),
         "context_overflow", NULL},
        {&drv_anthropic, 400,
         ANTHROPIC_ERR("invalid_request_error",
                       "input length and `max_tokens` exceed context limit: 187254 + 20000 > "
                       "204658, decrease input length or `max_tokens` and try again"),
         "context_overflow", NULL},
        {&drv_anthropic, 400,
         ANTHROPIC_ERR("invalid_request_error",
                       "Your credit balance is too low to access the Anthropic API. Please go to "
                       "Plans & Billing to upgrade or purchase credits."),
         "quota_exhausted", NULL},
        {&drv_anthropic, 400,
         ANTHROPIC_ERR("invalid_request_error",
                       "messages.1.content.0.image.source.base64.data: Image does not match the "
                       "provided media type image/png"),
         "bad_request", NULL},
        {&drv_anthropic, 401, ANTHROPIC_ERR("authentication_error", "invalid x-api-key"),
         "auth_failed", "invalid x-api-key"},
        {&drv_anthropic, 403,
         ANTHROPIC_ERR("permission_error", "Your API key does not have permission to use the "
                                           "specified resource."),
         "auth_failed", NULL},
        {&drv_anthropic, 402, ANTHROPIC_ERR("billing_error", "Payment required."),
         "quota_exhausted", NULL},
        {&drv_anthropic, 404, ANTHROPIC_ERR("not_found_error", "model: claude-opus-9"),
         "model_unavailable", NULL},
        {&drv_anthropic, 413,
         ANTHROPIC_ERR("request_too_large", "Request exceeds the maximum allowed number of "
                                            "bytes."),
         "payload_too_large", NULL},
        {&drv_anthropic, 429,
         ANTHROPIC_ERR("rate_limit_error", "This request would exceed the rate limit for your "
                                           "organization of 50,000 input tokens per minute."),
         "rate_limited", NULL},
        {&drv_anthropic, 500, ANTHROPIC_ERR("api_error", "Internal server error"), "provider_5xx",
         NULL},
        {&drv_anthropic, 504, ANTHROPIC_ERR("timeout_error", "Request timed out"), "timeout", NULL},
        /* Not Anthropic's JSON (a proxy's page). */
        {&drv_anthropic, 529, "<html>overloaded</html>", "provider_5xx", ""},
        {&drv_anthropic, 502, "<html>Bad Gateway</html>", "provider_5xx", ""},
    };
    check_drivers(cases, sizeof(cases) / sizeof(*cases));
}

#define GOOGLE_ERR(code, status, message, details)                                                 \
    "{\"error\":{\"code\":" #code ",\"message\":\"" message "\",\"status\":\"" status "\""         \
    "" details "}}"

static void test_gemini(void)
{
    CU_ASSERT_PTR_NOT_NULL(drv_gemini.classify);
    static const struct drv_case cases[] = {
        /* Per minute: "quota" in the message, but a rate. */
        {&drv_gemini, 429,
         GOOGLE_ERR(429, "RESOURCE_EXHAUSTED",
                    "You exceeded your current quota, please check your plan and billing "
                    "details.",
                    ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
                    "\"violations\":[{\"quotaMetric\":\"generativelanguage.googleapis.com/"
                    "generate_content_free_tier_input_token_count\",\"quotaId\":"
                    "\"GenerateContentInputTokensPerModelPerMinute-FreeTier\"}]},{\"@type\":"
                    "\"type.googleapis.com/google.rpc.RetryInfo\",\"retryDelay\":\"21s\"}]"),
         "rate_limited", NULL},
        {&drv_gemini, 429,
         GOOGLE_ERR(429, "RESOURCE_EXHAUSTED", "You exceeded your current quota.",
                    ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.QuotaFailure\","
                    "\"violations\":[{\"quotaId\":"
                    "\"GenerateRequestsPerDayPerProjectPerModel-FreeTier\"}]}]"),
         "quota_exhausted", NULL},
        {&drv_gemini, 429, GOOGLE_ERR(429, "RESOURCE_EXHAUSTED", "Resource exhausted.", ""),
         "rate_limited", "Resource exhausted."},
        {&drv_gemini, 400,
         GOOGLE_ERR(400, "INVALID_ARGUMENT",
                    "The input token count (1196265) exceeds the maximum number of tokens "
                    "allowed (1048575).",
                    ""),
         "context_overflow", NULL},
        {&drv_gemini, 400,
         GOOGLE_ERR(400, "INVALID_ARGUMENT", "API key not valid. Please pass a valid API key.",
                    ",\"details\":[{\"@type\":\"type.googleapis.com/google.rpc.ErrorInfo\","
                    "\"reason\":\"API_KEY_INVALID\",\"domain\":\"googleapis.com\"}]"),
         "auth_failed", NULL},
        {&drv_gemini, 400,
         GOOGLE_ERR(400, "INVALID_ARGUMENT",
                    "* GenerateContentRequest.contents: contents is not specified\\n", ""),
         "bad_request", NULL},
        {&drv_gemini, 400,
         GOOGLE_ERR(400, "FAILED_PRECONDITION", "User location is not supported for the API use.",
                    ""),
         "model_unavailable", NULL},
        {&drv_gemini, 403,
         GOOGLE_ERR(403, "PERMISSION_DENIED", "Method doesn't allow unregistered callers.", ""),
         "auth_failed", NULL},
        {&drv_gemini, 404,
         GOOGLE_ERR(404, "NOT_FOUND",
                    "models/gemini-9-pro is not found for API version v1beta, or is not "
                    "supported for generateContent.",
                    ""),
         "model_unavailable", NULL},
        {&drv_gemini, 503,
         GOOGLE_ERR(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", ""),
         "model_unavailable", NULL},
        {&drv_gemini, 503,
         GOOGLE_ERR(503, "UNAVAILABLE", "The service is currently unavailable.", ""),
         "provider_5xx", NULL},
        {&drv_gemini, 500,
         GOOGLE_ERR(500, "INTERNAL", "An internal error has occurred. Please retry.", ""),
         "provider_5xx", NULL},
        {&drv_gemini, 504,
         GOOGLE_ERR(504, "DEADLINE_EXCEEDED", "The request timed out. Please try again.", ""),
         "timeout", NULL},
    };
    check_drivers(cases, sizeof(cases) / sizeof(*cases));
}

static void test_bedrock(void)
{
    CU_ASSERT_PTR_NOT_NULL(drv_bedrock.classify);
    static const struct drv_case cases[] = {
        /* ThrottlingException. */
        {&drv_bedrock, 429, "{\"message\":\"Too many requests, please wait before trying again.\"}",
         "rate_limited", "Too many requests, please wait before trying again."},
        {&drv_bedrock, 429,
         "{\"message\":\"Too many tokens per day, please wait before trying again.\"}",
         "quota_exhausted", NULL},
        /* ValidationException. */
        {&drv_bedrock, 400, "{\"message\":\"Input is too long for requested model.\"}",
         "context_overflow", NULL},
        {&drv_bedrock, 400,
         "{\"message\":\"input length and `max_tokens` exceed context limit: 195000 + 8192 > "
         "200000, decrease input length or `max_tokens` and try again\"}",
         "context_overflow", NULL},
        {&drv_bedrock, 400, "{\"message\":\"This model doesn't support tool use.\"}",
         "unsupported_input", NULL},
        {&drv_bedrock, 400,
         "{\"message\":\"The model returned the following errors: messages: text content "
         "blocks must be non-empty\"}",
         "bad_request", NULL},
        /* ModelTimeoutException. */
        {&drv_bedrock, 408,
         "{\"message\":\"Model has timed out in processing the request. Try your request "
         "again.\"}",
         "timeout", NULL},
        /* ServiceUnavailableException, InternalServerException, ModelErrorException. */
        {&drv_bedrock, 503, "{\"message\":\"Bedrock is unable to process your request.\"}",
         "provider_5xx", NULL},
        {&drv_bedrock, 500,
         "{\"message\":\"The system encountered an unexpected error during processing. Try your "
         "request again.\"}",
         "provider_5xx", NULL},
        {&drv_bedrock, 424, "{\"message\":\"Received error from model\"}", "provider_5xx", NULL},
        /* AccessDeniedException, ResourceNotFoundException, ModelNotReadyException. */
        {&drv_bedrock, 403,
         "{\"message\":\"You don't have access to the model with the specified model ID.\"}",
         "auth_failed", NULL},
        {&drv_bedrock, 404, "{\"message\":\"Model not found\"}", "model_unavailable", NULL},
        {&drv_bedrock, 429,
         "{\"message\":\"Model is not ready for inference. Wait and try your request again.\"}",
         "model_unavailable", NULL},
    };
    check_drivers(cases, sizeof(cases) / sizeof(*cases));
}

static void test_ollama(void)
{
    CU_ASSERT_PTR_NOT_NULL(drv_ollama.classify);
    static const struct drv_case cases[] = {
        {&drv_ollama, 404, "{\"error\":\"model 'x' not found\"}", "model_unavailable",
         "model 'x' not found"},
        {&drv_ollama, 400, "{\"error\":\"model \\\"llama9\\\" not found, try pulling it first\"}",
         "model_unavailable", NULL},
        {&drv_ollama, 400, "{\"error\":\"gemma:2b does not support tools\"}", "unsupported_input",
         NULL},
        {&drv_ollama, 500,
         "{\"error\":\"model requires more system memory (9.5 GiB) than is available (4.1 "
         "GiB)\"}",
         "provider_5xx", NULL},
        {&drv_ollama, 400, "{\"error\":\"invalid character 'x' looking for beginning of value\"}",
         "bad_request", NULL},
        {&drv_ollama, 404, "404 page not found", "not_found", ""},
    };
    check_drivers(cases, sizeof(cases) / sizeof(*cases));
}

/* A transfer that ended without a whole answer: connection refused, reset,
 * DNS, TLS, a body cut short. Only the connect timeout is a timeout. */
static void test_transport(void)
{
    static const struct {
        int code;
        const char *cls;
    } cases[] = {
        {GW_UPC_ETIMEOUT, "timeout"}, {GW_UPC_ECONNECT, "network"}, {GW_UPC_ERESOLVE, "network"},
        {GW_UPC_ERECV, "network"},    {GW_UPC_ESEND, "network"},    {GW_UPC_EPROTO, "network"},
        {GW_UPC_ETLS, "network"},     {GW_UPC_EABORTED, "network"}, {GW_UPC_ENOMEM, "network"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
        const char *got = canon_failure_name(canon_classify_transport(cases[i].code));
        if (strcmp(got, cases[i].cls) != 0)
            fprintf(stderr, "transport result %d: want %s, got %s\n", cases[i].code, cases[i].cls,
                    got);
        CU_ASSERT_STRING_EQUAL(got, cases[i].cls);
    }
}

static CU_TestInfo tests[] = {
    {"transport: upstream client results", test_transport},
    {"policy table matches ARCHITECTURE.md", test_policy_table},
    {"http: 4xx statuses and body phrases", test_http_4xx},
    {"http: 5xx statuses", test_http_5xx},
    {"http: only the first 64 KiB are read", test_http_bound},
    {"openai and responses (default rules)", test_openai},
    {"anthropic", test_anthropic},
    {"gemini", test_gemini},
    {"bedrock", test_bedrock},
    {"ollama", test_ollama},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
