/*
 * drv_tier: service tiers, the end user and log probabilities on the
 * providers' side (what each helper is: drv_tier.h).
 */
#include "drv_tier.h"

#include <stdlib.h>
#include <string.h>

#include "drv_util.h"
#include "gw_error.h"
#include "gw_json.h"

const struct drv_tier_map drv_tier_openai = {{"auto", "default", "flex", "priority", "scale"}, ""};

int drv_tier_word(const struct canon_req *r, const char *driver, const struct drv_tier_map *m,
                  const char **word, struct canon_err *err)
{
    *word = NULL;
    if (!r->service_tier)
        return GW_OK;
    for (int i = 0; i < CANON_TIER_COUNT; i++) {
        if (strcmp(r->service_tier, canon_tier_words[i]) != 0)
            continue;
        if (m->words[i]) {
            *word = *m->words[i] ? m->words[i] : NULL;
            return GW_OK;
        }
        break;
    }
    const char *f = canon_field_name(r, CANON_F_SERVICE_TIER);
    canon_err_set(err, 400, f, "unsupported_parameter",
                  "%s \"%s\" cannot be sent to %s %s provider: %s", f, r->service_tier,
                  drv_a(driver), driver, m->why);
    return GW_EINVAL;
}

const char *drv_end_user(const struct canon_req *r)
{
    return r->safety_identifier ? r->safety_identifier : r->user;
}

int drv_refuse_logprobs(const struct canon_req *r, const char *driver, const char *why,
                        struct canon_err *err)
{
    if (!r->logprobs)
        return GW_OK;
    const char *f = canon_field_name(r, CANON_F_LOGPROBS);
    canon_err_set(err, 400, f, "unsupported_parameter", "%s cannot be sent to %s %s provider: %s",
                  f, drv_a(driver), driver, why);
    return GW_EINVAL;
}

/* ------------------------------------------------------------- logprobs */

static void one(struct canon_logprob *lp, const json_t *o, const char *tk, const char *lk)
{
    json_t *t = json_object_get(o, tk);
    lp->token = json_string_value(t) ? json_string_value(t) : "";
    lp->len = json_string_value(t) ? json_string_length(t) : 0;
    lp->logprob = json_number_value(json_object_get(o, lk));
}

/* n tokens, with room for ntops alternatives in all. */
static int alloc(struct drv_logprobs *out, size_t n, size_t ntops)
{
    memset(out, 0, sizeof(*out));
    if (n == 0)
        return GW_OK;
    out->lp = calloc(n, sizeof(*out->lp));
    out->tops = ntops ? calloc(ntops, sizeof(*out->tops)) : NULL;
    if (!out->lp || (ntops && !out->tops)) {
        drv_logprobs_free(out);
        return GW_ENOMEM;
    }
    out->n = n;
    return GW_OK;
}

/* Token i's alternatives from the array alts (each {tk, lk}), into tops
 * from *used on. */
static void alternatives(struct drv_logprobs *out, size_t i, const json_t *alts, const char *tk,
                         const char *lk, size_t *used)
{
    out->lp[i].top = out->tops ? out->tops + *used : NULL;
    size_t j;
    json_t *a;
    json_array_foreach(alts, j, a)
    {
        if (!json_is_object(a))
            continue;
        one(&out->tops[*used], a, tk, lk);
        (*used)++;
        out->lp[i].ntop++;
    }
}

static size_t count_alts(const json_t *arr, const char *key)
{
    size_t total = 0, i;
    json_t *e;
    json_array_foreach(arr, i, e) total += json_array_size(key ? json_object_get(e, key) : e);
    return total;
}

int drv_logprobs_openai(const json_t *content, struct drv_logprobs *out)
{
    if (alloc(out, json_array_size(content), count_alts(content, "top_logprobs")) != GW_OK)
        return GW_ENOMEM;
    size_t i, used = 0;
    json_t *e;
    json_array_foreach(content, i, e)
    {
        one(&out->lp[i], e, "token", "logprob");
        alternatives(out, i, json_object_get(e, "top_logprobs"), "token", "logprob", &used);
    }
    return GW_OK;
}

int drv_logprobs_gemini(const json_t *result, struct drv_logprobs *out)
{
    const json_t *chosen = json_object_get(result, "chosenCandidates");
    const json_t *top = json_object_get(result, "topCandidates");
    size_t ntops = 0, i;
    json_t *e;
    json_array_foreach(top, i, e) ntops += json_array_size(json_object_get(e, "candidates"));
    if (alloc(out, json_array_size(chosen), ntops) != GW_OK)
        return GW_ENOMEM;
    size_t used = 0;
    json_array_foreach(chosen, i, e)
    {
        one(&out->lp[i], e, "token", "logProbability");
        alternatives(out, i, json_object_get(json_array_get(top, i), "candidates"), "token",
                     "logProbability", &used);
    }
    return GW_OK;
}

void drv_logprobs_free(struct drv_logprobs *l)
{
    free(l->lp);
    free(l->tops);
    memset(l, 0, sizeof(*l));
}

int drv_emit_text_lp(struct drv_parser *p, const struct canon_sink *s, const char *text,
                     const json_t *lp)
{
    if (!text || !*text)
        return 0;
    if (!json_array_size(lp))
        return drv_emit_text(s, CANON_EV_CHUNK, text);
    struct drv_logprobs l;
    if (drv_logprobs_openai(lp, &l) != GW_OK)
        return drv_fail(p, s, CANON_FAIL_PROVIDER_5XX, "out of memory");
    struct canon_event ev = {.type = CANON_EV_CHUNK,
                             .text = text,
                             .len = strlen(text),
                             .logprobs = l.lp,
                             .nlogprobs = l.n};
    int rc = canon_emit(s, &ev);
    drv_logprobs_free(&l);
    return rc;
}
