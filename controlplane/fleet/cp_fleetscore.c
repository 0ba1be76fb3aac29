/*
 * A target's hour of fleet figures (cp_fleetscore.h).
 */
#include "cp_fleetscore.h"

#include <string.h>

#include "canon.h"

static int64_t minute_of(int64_t ms)
{
    return ms >= 0 ? ms / 60000 + 1 : 1; /* 0 marks an empty bucket */
}

void cp_fleetscore_add(struct cp_fleetscore *f, int64_t now_ms, const Llmgw__V1__TargetOutcomes *o)
{
    int64_t minute = minute_of(now_ms);
    struct cp_fleetscore_minute *b = &f->m[minute % CP_FLEETSCORE_MINUTES];
    if (b->minute != minute) {
        memset(b, 0, sizeof(*b));
        b->minute = minute;
    }
    b->s.ok += o->ok;
    for (size_t j = 0; j < o->n_failures; j++) {
        int k = canon_failure_from_name(o->failures[j]->failure_class);
        if (k >= 0 && canon_failure_counts((enum canon_failure)k))
            b->s.failed += o->failures[j]->count;
    }
    if (o->ttfb) {
        b->s.ttfb_n += o->ttfb->count;
        b->s.ttfb_ms += o->ttfb->sum_ms;
    }
    if (o->ttfc) {
        b->s.ttfc_n += o->ttfc->count;
        b->s.ttfc_ms += o->ttfc->sum_ms;
    }
}

int cp_fleetscore_sum(const struct cp_fleetscore *f, int64_t now_ms, struct cp_fleetscore_sums *out)
{
    int64_t minute = minute_of(now_ms);
    int any = 0;
    for (int i = 0; i < CP_FLEETSCORE_MINUTES; i++) {
        const struct cp_fleetscore_minute *b = &f->m[i];
        if (!b->minute || b->minute > minute || b->minute <= minute - CP_FLEETSCORE_MINUTES)
            continue;
        any = 1;
        out->ok += b->s.ok;
        out->failed += b->s.failed;
        if (b->minute > minute - CP_FLEETSCORE_RECENT) {
            out->ttfb_n += b->s.ttfb_n;
            out->ttfb_ms += b->s.ttfb_ms;
            out->ttfc_n += b->s.ttfc_n;
            out->ttfc_ms += b->s.ttfc_ms;
        }
    }
    return any;
}

json_t *cp_fleetscore_json(const struct cp_fleetscore_sums *s)
{
    return json_pack("[I,I,I,I,I,I]", (json_int_t)s->ok, (json_int_t)s->failed,
                     (json_int_t)s->ttfb_n, (json_int_t)s->ttfb_ms, (json_int_t)s->ttfc_n,
                     (json_int_t)s->ttfc_ms);
}

void cp_fleetscore_from_json(struct cp_fleetscore_sums *out, const json_t *j)
{
    uint64_t v[6];
    if (json_array_size(j) != 6)
        return;
    for (size_t i = 0; i < 6; i++) {
        json_int_t x = json_integer_value(json_array_get(j, i));
        if (!json_is_integer(json_array_get(j, i)) || x < 0)
            return;
        v[i] = (uint64_t)x;
    }
    out->ok += v[0];
    out->failed += v[1];
    out->ttfb_n += v[2];
    out->ttfb_ms += v[3];
    out->ttfc_n += v[4];
    out->ttfc_ms += v[5];
}

static uint64_t mean_us(uint64_t sum_ms, uint64_t n)
{
    return n ? sum_ms * 1000 / n : 0;
}

static uint32_t success_permil(const struct cp_fleetscore_sums *s)
{
    uint64_t attempts = s->ok + s->failed;
    return attempts ? (uint32_t)(s->ok * 1000 / attempts) : 1000;
}

void cp_fleetscore_pb(const struct cp_fleetscore_sums *s, Llmgw__V1__FleetScore *out)
{
    llmgw__v1__fleet_score__init(out);
    out->attempts = s->ok + s->failed;
    out->success_permil = success_permil(s);
    out->ttfb_samples = s->ttfb_n;
    out->ttfb_mean_us = mean_us(s->ttfb_ms, s->ttfb_n);
    out->ttfc_samples = s->ttfc_n;
    out->ttfc_mean_us = mean_us(s->ttfc_ms, s->ttfc_n);
}

json_t *cp_fleetscore_health(const struct cp_fleetscore_sums *s)
{
    return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "attempts_1h", (json_int_t)(s->ok + s->failed),
                     "success_permil_1h", (json_int_t)success_permil(s), "ttfb_samples_5m",
                     (json_int_t)s->ttfb_n, "ttfb_mean_us_5m",
                     (json_int_t)mean_us(s->ttfb_ms, s->ttfb_n), "ttfc_samples_5m",
                     (json_int_t)s->ttfc_n, "ttfc_mean_us_5m",
                     (json_int_t)mean_us(s->ttfc_ms, s->ttfc_n));
}
