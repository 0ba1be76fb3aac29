/*
 * fc_tier: service tier words and log probabilities in the clients'
 * formats (what each is: fc_tier.h; the mapping tables: docs/canonical.md).
 */
#include "fc_tier.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_util.h"
#include "gw_error.h"
#include "gw_json.h"

const struct fc_tier_words fc_tier_openai = {
    {"auto", "default", "flex", "priority", "scale"},
    "\"auto\", \"default\", \"flex\", \"priority\" or \"scale\""};
const struct fc_tier_words fc_tier_anthropic = {{"auto", "standard_only", NULL, NULL, NULL},
                                                "\"auto\" or \"standard_only\""};

int fc_service_tier(struct canon_req *r, const json_t *body, const struct fc_tier_words *w,
                    struct canon_err *err)
{
    json_t *v = fc_get(body, "service_tier");
    if (!v)
        return GW_OK;
    const char *s = json_string_value(v);
    for (int i = 0; s && i < CANON_TIER_COUNT; i++)
        if (w->words[i] && strcmp(s, w->words[i]) == 0) {
            r->service_tier = canon_tier_words[i];
            return GW_OK;
        }
    canon_err_set(err, 400, "service_tier", "invalid_request", "'service_tier' must be %s",
                  w->list);
    return GW_EINVAL;
}

const char *fc_tier_served_openai(const char *tier)
{
    return tier && strcmp(tier, "standard") == 0 ? "default" : tier;
}

/* ------------------------------------------------------------- logprobs */

static json_t *bytes_of(const char *t, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        if (json_array_append_new(a, json_integer((unsigned char)t[i])))
            json_decref(a), a = NULL;
    return a;
}

static json_t *item_of(const char *t, size_t n, double lp, json_t *top)
{
    json_t *o = json_pack("{s:s%,s:f,s:o}", "token", t ? t : "", t ? n : 0, "logprob", lp, "bytes",
                          bytes_of(t ? t : "", t ? n : 0));
    if (o && top)
        json_object_set_new(o, "top_logprobs", top);
    else
        json_decref(top);
    return o;
}

json_t *fc_logprobs_responses_of(const struct canon_logprob *lp, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *top = json_array();
        for (size_t j = 0; top && j < lp[i].ntop; j++)
            if (json_array_append_new(
                    top, item_of(lp[i].top[j].token, lp[i].top[j].len, lp[i].top[j].logprob, NULL)))
                json_decref(top), top = NULL;
        json_t *o = top ? item_of(lp[i].token, lp[i].len, lp[i].logprob, top) : NULL;
        if (!o || json_array_append_new(arr, o))
            json_decref(arr), arr = NULL;
    }
    return arr;
}

/* canon_acc's {"token", "logprob", "top"} into {token, logprob, bytes}. */
static json_t *item_of_acc(const json_t *e, int with_top)
{
    json_t *tok = json_object_get(e, "token");
    json_t *top = NULL;
    if (with_top) {
        top = json_array();
        size_t j;
        json_t *t;
        json_array_foreach(json_object_get(e, "top"), j, t)
        {
            if (top && json_array_append_new(top, item_of_acc(t, 0)))
                json_decref(top), top = NULL;
        }
        if (!top)
            return NULL;
    }
    return item_of(json_string_value(tok), json_string_length(tok),
                   json_real_value(json_object_get(e, "logprob")), top);
}

json_t *fc_logprobs_responses_json(const json_t *acc)
{
    if (!acc)
        return NULL;
    json_t *arr = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(acc, i, e)
    {
        json_t *o = arr ? item_of_acc(e, 1) : NULL;
        if (!o || json_array_append_new(arr, o))
            json_decref(arr), arr = NULL;
    }
    return arr;
}

json_t *fc_logprobs_openai_json(const json_t *acc)
{
    json_t *arr = fc_logprobs_responses_json(acc);
    return arr ? json_pack("{s:o}", "content", arr) : NULL;
}

int fc_logprobs_openai_text(struct gw_buf *out, const struct canon_logprob *lp, size_t n)
{
    json_t *arr = fc_logprobs_responses_of(lp, n);
    json_t *o = arr ? json_pack("{s:o}", "content", arr) : NULL;
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s)
        return GW_ENOMEM;
    int rc = gw_buf_appends(out, s);
    free(s);
    return rc;
}
