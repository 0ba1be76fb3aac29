/*
 * The gateway's own model calls (issue 23, guardrails), played by the mock
 * in every chat format: a request whose system prompt starts with
 * "llmgw prompt-injection classifier" is answered with a verdict, one whose
 * system prompt starts with "llmgw answer judge" with a score, as the whole
 * text of the answer (one text token, finish "stop"). The markers that
 * steer them are looked for in every text part of the request (system
 * prompt and conversation), in any case:
 *   classifier: MOCK-CLASSIFIER-GARBAGE -> "maybe?", else MOCK-INJECT ->
 *               "INJECTION", else "SAFE";
 *   judge:      MOCK-JUDGE-GARBAGE -> "not json", else
 *               {"score": S, "label": "good"|"poor"} with S the integer
 *               after the first MOCK-SCORE= that has one (default 4), the
 *               label "good" when S >= 4.
 * Faults (status, ttfb_ms, hang, ...) still apply, as to any answer.
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_pool.h"
#include "mock.h"

#define CLASSIFIER_PREFIX "llmgw prompt-injection classifier"
#define JUDGE_PREFIX "llmgw answer judge"
#define JUDGE_DEFAULT_SCORE 4

/* Appends every text under v: a string, an array of parts, a part's
 * "text", a block's nested "content" (tool results), a Gemini content's
 * "parts". Depth-limited like mock_count_text. */
static int collect(json_t *v, struct gw_buf *b, int depth)
{
    if (v == NULL || depth > 16)
        return GW_OK;
    if (json_is_string(v)) {
        int rc = gw_buf_append(b, json_string_value(v), json_string_length(v));
        return rc ? rc : gw_buf_append(b, "\n", 1);
    }
    int rc = GW_OK;
    size_t i;
    json_t *part;
    if (json_is_array(v)) {
        json_array_foreach(v, i, part)
        {
            if (rc == GW_OK)
                rc = collect(part, b, depth + 1);
        }
        return rc;
    }
    if (!json_is_object(v))
        return GW_OK;
    rc = collect(json_object_get(v, "text"), b, depth + 1);
    if (rc == GW_OK)
        rc = collect(json_object_get(v, "content"), b, depth + 1);
    if (rc == GW_OK)
        rc = collect(json_object_get(v, "parts"), b, depth + 1);
    return rc;
}

/* The system prompt of a message list: the content of its first
 * system/developer message, or NULL. */
static json_t *system_message(json_t *messages)
{
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg)
    {
        const char *role = json_string_value(json_object_get(msg, "role"));
        if (role && (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0))
            return json_object_get(msg, "content");
    }
    return NULL;
}

/* needle (lower-case ASCII) in hay[0..n), ignoring case; its offset or -1. */
static long find_ci(const char *hay, size_t n, size_t from, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = from; m <= n && i <= n - m; i++) {
        size_t k = 0;
        while (k < m && tolower((unsigned char)hay[i + k]) == needle[k])
            k++;
        if (k == m)
            return (long)i;
    }
    return -1;
}

/* The integer after the first "MOCK-SCORE=" followed by one (an optional
 * minus, 1..9 digits); def when there is none. */
static long long judge_score(const char *s, size_t n, long long def)
{
    static const char key[] = "mock-score=";
    long at = -1;
    size_t from = 0;
    while ((at = find_ci(s, n, from, key)) >= 0) {
        size_t i = (size_t)at + sizeof key - 1;
        int neg = 0;
        if (i < n && s[i] == '-') {
            neg = 1;
            i++;
        }
        long long v = 0;
        size_t digits = 0;
        while (i < n && digits < 9 && isdigit((unsigned char)s[i])) {
            v = v * 10 + (s[i] - '0');
            i++;
            digits++;
        }
        if (digits > 0)
            return neg ? -v : v;
        from = (size_t)at + 1;
    }
    return def;
}

void mock_plan_role(struct mock_call *c, json_t *system, json_t *conversation)
{
    if (c->ntext == 0)
        return; /* no text asked for (chunks=0, a zero output limit) */
    if (system == NULL && json_is_array(conversation))
        system = system_message(conversation);
    if (system == NULL)
        return;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    if (collect(system, &b, 0) != GW_OK) {
        gw_buf_free(&b);
        return;
    }
    const char *p = b.data ? b.data : "";
    size_t n = b.len;
    while (n > 0 && isspace((unsigned char)*p)) {
        p++;
        n--;
    }
    int classifier = n >= sizeof CLASSIFIER_PREFIX - 1 &&
                     memcmp(p, CLASSIFIER_PREFIX, sizeof CLASSIFIER_PREFIX - 1) == 0;
    int judge =
        n >= sizeof JUDGE_PREFIX - 1 && memcmp(p, JUDGE_PREFIX, sizeof JUDGE_PREFIX - 1) == 0;
    if (!classifier && !judge) {
        gw_buf_free(&b);
        return;
    }
    if (collect(conversation, &b, 0) != GW_OK) { /* the whole request's text */
        gw_buf_free(&b);
        return;
    }
    const char *text = b.data ? b.data : "";
    char answer[64];
    if (classifier) {
        const char *v = "SAFE";
        if (find_ci(text, b.len, 0, "mock-classifier-garbage") >= 0)
            v = "maybe?";
        else if (find_ci(text, b.len, 0, "mock-inject") >= 0)
            v = "INJECTION";
        snprintf(answer, sizeof answer, "%s", v);
    } else if (find_ci(text, b.len, 0, "mock-judge-garbage") >= 0) {
        snprintf(answer, sizeof answer, "not json");
    } else {
        long long s = judge_score(text, b.len, JUDGE_DEFAULT_SCORE);
        snprintf(answer, sizeof answer, "{\"score\": %lld, \"label\": \"%s\"}", s,
                 s >= 4 ? "good" : "poor");
    }
    gw_buf_free(&b);
    const char *copy = gw_pool_strdup(c->pool, answer);
    if (copy == NULL)
        return;
    c->json_text = copy; /* the whole answer as one text token */
    c->ntext = 1;
    c->finish = MOCK_FINISH_STOP; /* whatever output limit was asked, it fits */
}
