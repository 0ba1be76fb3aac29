/*
 * dp_limits' sizing: how much a request reserves of each limit (learned
 * estimates or the worst case, at the candidates' prices), which
 * candidates a cost limit cannot price, the bounds on input and cost, and
 * the saturating arithmetic all of it counts with.
 */
#include <string.h>

#include "canon.h"
#include "dp_cost.h"
#include "dp_limits_int.h"
#include "dp_router.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_log.h"
#include "gw_target.h"

/* Estimate mode, before a target's answers were seen: output tokens, and
 * the factor on the rough input count (dp_tokens.h: bytes / 4 undercounts dense
 * scripts by half and more; leaning high until the target's own counts are
 * known keeps a cold start from overshooting). */
#define DEFAULT_OUTPUT_ESTIMATE 256
#define COLD_INPUT_FACTOR 2
#define SAT_MAX (INT64_MAX / 4)

/* ---------------------------------------------------------------- arithmetic */

int64_t dpl_add_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_add_overflow(a, b, &r) || r > SAT_MAX ? SAT_MAX : r;
}

int64_t dpl_mul_sat(int64_t a, int64_t b)
{
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) || r > SAT_MAX ? SAT_MAX : r;
}

/* ---------------------------------------------------------------- estimates */

static struct learned *learned_slot(uint64_t target)
{
    return &dpl.learned[gw_mix64(target) % NLEARN];
}

uint64_t dpl_target_hash(const char *provider, const char *model)
{
    return gw_target_hash(provider, model) | 1; /* 0: no target */
}

/* Estimate mode's output tokens for a target. With the request's
 * max_tokens: that cap times the share of their cap this target's answers
 * have used; without: what its answers have been. Before any answer was
 * seen: a default. Never above the request's cap or the catalog's. */
static int64_t output_estimate(uint64_t target, int64_t max_tokens, int64_t catalog_cap)
{
    const struct learned *l = learned_slot(target);
    int known = l->target == target;
    int64_t e;
    if (max_tokens > 0 && known && l->has_share)
        e = (dpl_mul_sat(max_tokens, l->share1024) + 1023) / 1024;
    else if (max_tokens <= 0 && known && l->has_out)
        e = (l->out16 + 15) / 16;
    else
        e = DEFAULT_OUTPUT_ESTIMATE;
    if (max_tokens > 0 && e > max_tokens)
        e = max_tokens;
    if (catalog_cap > 0 && e > catalog_cap)
        e = catalog_cap;
    return e;
}

/* Estimate mode's input tokens for a target: the request's rough count
 * (dp_tokens_request), corrected by how the target's own counts have
 * compared with it (a dense script, a tokenizer of its own). */
static int64_t input_estimate(uint64_t target, int64_t rough)
{
    const struct learned *l = learned_slot(target);
    if (l->target != target || !l->has_in)
        return dpl_mul_sat(rough, COLD_INPUT_FACTOR);
    return (dpl_mul_sat(rough, l->in1024) + 1023) / 1024;
}

static void ewma(int64_t *avg, int *has, int64_t x)
{
    *avg = *has ? *avg + (x - *avg) / 8 : x;
    *has = 1;
}

/* One request's answer: out tokens, under max_tokens (0: none); the
 * provider counted in input tokens where the rough estimate said rough. */
void dpl_learn_answer(uint64_t target, int64_t out, int64_t max_tokens, int64_t in, int64_t rough)
{
    struct learned *l = learned_slot(target);
    if (l->target != target)
        *l = (struct learned){.target = target};
    if (in > 0 && rough > 0) {
        int64_t r = dpl_mul_sat(in, 1024) / rough;
        ewma(&l->in1024, &l->has_in, r < 64 ? 64 : r > 16 * 1024 ? 16 * 1024 : r);
    }
    if (max_tokens > 0)
        ewma(&l->share1024, &l->has_share, out >= max_tokens ? 1024 : out * 1024 / max_tokens);
    else
        ewma(&l->out16, &l->has_out, dpl_mul_sat(out, 16));
}

/* The dearest price p names for any class; -1 when it names none. */
static int64_t dearest(const struct dp_price *p)
{
    long long v[] = {p->input,          p->output,         p->cache_read,
                     p->cache_write_5m, p->cache_write_1h, p->reasoning};
    int64_t m = -1;
    for (size_t i = 0; i < sizeof(v) / sizeof(*v); i++)
        if (v[i] > m)
            m = v[i];
    return m;
}

int dp_limits_price(const struct dp_snapshot *s, const char *provider, const char *model,
                    struct dp_limits_price *p)
{
    const struct dp_catalog_entry *c = dp_snapshot_catalog(s, provider, model);
    p->max_output_tokens = c ? c->max_output_tokens : 0;
    const struct dp_price *pr = dp_snapshot_price(s, provider, model);
    /* Budgets are in USD: a price in another currency cannot count
     * against one (nothing is ever converted). */
    if (!pr || pr->input < 0 || strcmp(pr->currency, "USD") != 0)
        return GW_ENOTFOUND;
    p->input = pr->input;
    if (pr->cache_write_5m > p->input)
        p->input = pr->cache_write_5m;
    if (pr->cache_write_1h > p->input)
        p->input = pr->cache_write_1h;
    if (pr->cache_read > p->input)
        p->input = pr->cache_read;
    p->input_bound = p->input;
    if (pr->cache_read < 0 || pr->cache_write_5m < 0 || pr->cache_write_1h < 0)
        p->input_bound = dearest(pr); /* as dp_limits_cost_bound charges it */
    p->cache_unpriced = (pr->cache_write_5m < 0 ? DP_LIMITS_CACHE_5M : 0) |
                        (pr->cache_write_1h < 0 ? DP_LIMITS_CACHE_1H : 0);
    p->output = pr->output;
    if (pr->output >= 0 && pr->reasoning > p->output)
        p->output = pr->reasoning;
    return GW_OK;
}

int64_t dp_limits_cost_bound(const struct dp_price *p, const struct canon_usage *u)
{
    if (!p || strcmp(p->currency, "USD") != 0)
        return -1;
    int64_t top = dearest(p);
    if (top < 0)
        return -1;
#define RATE(x) ((x) >= 0 ? (int64_t)(x) : top)
    int64_t out_rate = RATE(p->output);
    if (p->reasoning > out_rate)
        out_rate = p->reasoning; /* reasoning is part of output */
    int64_t out = u->output > u->reasoning ? u->output : u->reasoning;
    int64_t c = 0;
    c = dpl_add_sat(c, dpl_mul_sat(u->input > 0 ? u->input : 0, RATE(p->input)));
    c = dpl_add_sat(c, dpl_mul_sat(u->cache_read > 0 ? u->cache_read : 0, RATE(p->cache_read)));
    c = dpl_add_sat(
        c, dpl_mul_sat(u->cache_write_5m > 0 ? u->cache_write_5m : 0, RATE(p->cache_write_5m)));
    c = dpl_add_sat(
        c, dpl_mul_sat(u->cache_write_1h > 0 ? u->cache_write_1h : 0, RATE(p->cache_write_1h)));
    c = dpl_add_sat(c, dpl_mul_sat(out > 0 ? out : 0, out_rate));
#undef RATE
    return c;
}

/* What the body's bytes do not bound: each image, each document by URL. */
static int64_t part_extra(const struct canon_part *p, size_t n)
{
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i].type == CANON_PART_IMAGE)
            k = dpl_add_sat(k, DP_LIMITS_IMAGE_TOKENS);
        else if (p[i].type == CANON_PART_DOCUMENT && p[i].url)
            k = dpl_add_sat(k, DP_LIMITS_URL_DOCUMENT_TOKENS);
        else if (p[i].type == CANON_PART_TOOL_RESULT)
            k = dpl_add_sat(k, part_extra(p[i].content, p[i].ncontent));
    }
    return k;
}

int64_t dp_limits_input_bound(const struct canon_req *r, size_t body_len)
{
    int64_t extra = 0;
    for (size_t i = 0; i < r->nmessages; i++)
        extra = dpl_add_sat(extra, part_extra(r->messages[i].parts, r->messages[i].nparts));
    return dpl_add_sat((int64_t)body_len, extra);
}

static int cache_mark(enum canon_cache c)
{
    return c == CANON_CACHE_5M ? DP_LIMITS_CACHE_5M : c == CANON_CACHE_1H ? DP_LIMITS_CACHE_1H : 0;
}

static int part_marks(const struct canon_part *p, size_t n)
{
    int m = 0;
    for (size_t i = 0; i < n; i++)
        m |= cache_mark(p[i].cache) | part_marks(p[i].content, p[i].ncontent);
    return m;
}

int dp_limits_cache_marks(const struct canon_req *r)
{
    int m = part_marks(r->system, r->nsystem);
    for (size_t i = 0; i < r->nmessages; i++)
        m |= part_marks(r->messages[i].parts, r->messages[i].nparts);
    for (size_t i = 0; i < r->ntools; i++)
        m |= cache_mark(r->tools[i].cache);
    return m;
}

/* Whether a cost limit can hold a request on candidate i to account: it
 * has a USD price for its input and (chat) output, and (*strict) for the
 * cache writes the request asks for. */
static int priced_for(const struct dp_limits_ask *ask, size_t i, struct dp_limits_price *p,
                      int *strict)
{
    const struct dp_candidate *c = &ask->cands[i];
    *p = (struct dp_limits_price){0, 0, -1, 0, 0};
    if (ask->media_cost) {
        const struct dp_price *pr = dp_snapshot_price(ask->snap, c->provider->name, c->model);
        *strict = ask->media_cost[i] >= 0 && pr && strcmp(pr->currency, "USD") == 0;
        return *strict;
    }
    int ok = dp_limits_price(ask->snap, c->provider->name, c->model, p) == GW_OK &&
             (ask->embeddings || p->output >= 0);
    *strict = ok && !(p->cache_unpriced & ask->cache_marks);
    return ok;
}

/* Candidates a cost limit cannot price leave the plan (marked in
 * ask->drop): a gateway that cannot price a request cannot hold it to a
 * budget. Only when every cost limit says "unpriced": "allow" do they stay,
 * with a warning. */
void dpl_drop_unpriced(const struct dp_limits_ask *ask, const struct dp_limit *const *ls, size_t n)
{
    /* Any cost limit that refuses unpriced targets (the default) drops
     * them; limits that all allow them let them through, with a warning. */
    int closed = 0, open = 0;
    for (size_t k = 0; k < n; k++)
        if (ls[k]->metric == DP_LIMIT_COST)
            *(ls[k]->unpriced_allow ? &open : &closed) = 1;
    for (size_t i = 0; i < ask->ncands && (closed || open); i++) {
        if (ask->drop && ask->drop[i])
            continue;
        struct dp_limits_price p;
        int strict;
        int ok = priced_for(ask, i, &p, &strict);
        if (closed && !strict && ask->drop) {
            ask->drop[i] = 1;
        } else if (!ok) {
            int64_t now = dpl.mono();
            if (now - dpl.warned_at > 60000) {
                dpl.warned_at = now;
                gw_logf(GW_LOG_WARN,
                        "cost limit: a target has no price; \"unpriced\": \"allow\" lets it "
                        "through",
                        "{s:s,s:s}", "provider", ask->cands[i].provider->name, "model",
                        ask->cands[i].model);
            }
        }
    }
}

/* The output cap a worst_case limit reserves, and the request will be
 * sent with: the client's, else the smallest catalog max_output_tokens of
 * the candidates left (each of them can take it); 0 when there is none. */
int64_t dpl_worst_output_cap(const struct dp_limits_ask *ask)
{
    if (ask->max_tokens > 0)
        return ask->max_tokens;
    int64_t cap = 0;
    for (size_t i = 0; i < ask->ncands; i++) {
        if (ask->drop && ask->drop[i])
            continue;
        const struct dp_catalog_entry *ce =
            dp_snapshot_catalog(ask->snap, ask->cands[i].provider->name, ask->cands[i].model);
        if (ce && ce->max_output_tokens > 0 && (cap == 0 || ce->max_output_tokens < cap))
            cap = ce->max_output_tokens;
    }
    return cap;
}

/* The need of limit l for the request: 1 request; estimated or worst-case
 * tokens (the worst case's output: out_cap, plus the thinking budget a
 * provider may bill beside it); their cost at the dearest kept
 * candidate's prices (a worst case at input_bound: every class, priced or
 * not, as a charge counts it). */
int64_t dpl_size_need(const struct dp_limits_ask *ask, const struct dp_limit *l, int64_t out_cap)
{
    if (l->metric == DP_LIMIT_REQUESTS)
        return 1;
    int64_t need = 0;
    for (size_t i = 0; i < ask->ncands; i++) {
        const struct dp_candidate *c = &ask->cands[i];
        if (ask->drop && ask->drop[i])
            continue;
        if (ask->media_cost) {
            struct dp_limits_price p;
            int strict;
            int64_t n = l->metric == DP_LIMIT_TOKENS
                            ? dpl_add_sat(ask->max_input_tokens, ask->max_tokens)
                        : priced_for(ask, i, &p, &strict) ? ask->media_cost[i]
                                                          : -1;
            if (n > need)
                need = n;
            continue;
        }
        uint64_t target = dpl_target_hash(c->provider->name, c->model);
        int64_t in =
            l->worst_case ? ask->max_input_tokens : input_estimate(target, ask->est_input_tokens);
        struct dp_limits_price p;
        int strict;
        int priced = priced_for(ask, i, &p, &strict);
        int64_t out = 0;
        if (!ask->embeddings && l->worst_case)
            out = dpl_add_sat(out_cap, ask->reasoning_budget > 0 ? ask->reasoning_budget : 0);
        else if (!ask->embeddings)
            out = output_estimate(target, ask->max_tokens, p.max_output_tokens);
        int64_t n;
        if (l->metric == DP_LIMIT_TOKENS)
            n = dpl_add_sat(in, out);
        else if (priced)
            n = dpl_add_sat(dpl_mul_sat(in, l->worst_case ? p.input_bound : p.input),
                            dpl_mul_sat(out, p.output > 0 ? p.output : 0));
        else
            continue; /* fail_open and unpriced: unmetered by this limit */
        if (n > need)
            need = n;
    }
    return need;
}
