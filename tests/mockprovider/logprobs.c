/*
 * Log probabilities the mock gives when asked: for answer token k (the
 * text mock_append_tokens writes for it), logprob -(k % 4 + 1) / 10, and
 * alternatives "alt1", "alt2", ... each 1 lower than the one before.
 */
#include <stdio.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_json.h"
#include "mock.h"

static double logprob_of(int k)
{
    return -(double)(k % 4 + 1) / 10.0;
}

/* Token k's text, escaped for a JSON string, and its bytes. */
static int token(struct gw_buf *b, int k, int bytes)
{
    char t[32];
    int n = snprintf(t, sizeof(t), "%stok%d", k > 0 ? " " : "", k + 1);
    int rc = gw_buf_appends(b, "\"");
    rc |= gw_buf_append(b, t, (size_t)n);
    rc |= gw_buf_appends(b, "\"");
    if (bytes) {
        rc |= gw_buf_appends(b, ",\"bytes\":[");
        for (int i = 0; i < n; i++)
            rc |= gw_buf_printf(b, "%s%d", i ? "," : "", (unsigned char)t[i]);
        rc |= gw_buf_appends(b, "]");
    }
    return rc;
}

int mock_append_logprobs_openai(struct gw_buf *b, const struct mock_call *c, int from, int to)
{
    int rc = gw_buf_appends(b, "[");
    for (int k = from; k < to; k++) {
        rc |= gw_buf_appends(b, k > from ? ",{\"token\":" : "{\"token\":");
        rc |= token(b, k, 1);
        rc |= gw_buf_printf(b, ",\"logprob\":%.2f,\"top_logprobs\":[", logprob_of(k));
        for (int j = 0; j < c->top_logprobs; j++)
            rc |= gw_buf_printf(b, "%s{\"token\":\"alt%d\",\"logprob\":%.2f,\"bytes\":null}",
                                j ? "," : "", j + 1, logprob_of(k) - (j + 1));
        rc |= gw_buf_appends(b, "]}");
    }
    rc |= gw_buf_appends(b, "]");
    return rc ? GW_ELIMIT : 0;
}

int mock_append_logprobs_gemini(struct gw_buf *b, const struct mock_call *c, int from, int to)
{
    int rc = gw_buf_appends(b, "{\"topCandidates\":[");
    for (int k = from; k < to; k++) {
        rc |= gw_buf_appends(b, k > from ? ",{\"candidates\":[" : "{\"candidates\":[");
        for (int j = 0; j < c->top_logprobs; j++)
            rc |= gw_buf_printf(b, "%s{\"token\":\"alt%d\",\"logProbability\":%.2f}", j ? "," : "",
                                j + 1, logprob_of(k) - (j + 1));
        rc |= gw_buf_appends(b, "]}");
    }
    rc |= gw_buf_appends(b, "],\"chosenCandidates\":[");
    for (int k = from; k < to; k++) {
        rc |= gw_buf_appends(b, k > from ? ",{\"token\":" : "{\"token\":");
        rc |= token(b, k, 0);
        rc |= gw_buf_printf(b, ",\"logProbability\":%.2f}", logprob_of(k));
    }
    rc |= gw_buf_appends(b, "]}");
    return rc ? GW_ELIMIT : 0;
}
