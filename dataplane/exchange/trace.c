/*
 * The trace of a request (docs/observability.md, "Traces"): a SERVER span
 * for the request, a span for each phase that can take time (plan, guard,
 * limits, cache) and a CLIENT span per upstream attempt, with the
 * OpenTelemetry GenAI attributes and ours under llmgw.*. Spans are written
 * when they end, from what the exchange already keeps (its times, ids and
 * record), into the loop's batch (gw_otel_batch); ids are drawn at the
 * start so an attempt's traceparent can go upstream before its span ends.
 *
 * No span or event carries text of a request or an answer: names, ids,
 * numbers and classes only (the logs' rule).
 */
#include <stdio.h>
#include <string.h>

#include "dp_metrics.h"
#include "dp_snapshot.h"
#include "exchange.h"
#include "gw_http.h"
#include "gw_otel.h"
#include "gw_time.h"

/* Wall-clock nanoseconds of a monotonic microsecond time of the request. */
static uint64_t ns(const struct dp_exchange *x, int64_t us)
{
    return (uint64_t)(us * 1000 + x->tr.wall_off_ns);
}

static struct gw_otel_batch *batch(const struct dp_exchange *x)
{
    return x->tr.sampled ? x->l->otel : NULL;
}

void x_trace_start(struct dp_exchange *x)
{
    struct xtrace *t = &x->tr;
    if (!x->l->otel)
        return;
    t->on = 1;
    const char *ts = gw_http_req_header(x->req, "tracestate");
    struct gw_trace_in in;
    gw_otel_continue(x->l->otel->o, &x->l->rng, gw_http_req_header(x->req, "traceparent"), ts, &in);
    memcpy(t->trace_id, in.ctx.trace_id, sizeof(t->trace_id));
    memcpy(t->span_id, in.ctx.span_id, sizeof(t->span_id));
    memcpy(t->parent_id, in.parent, sizeof(t->parent_id));
    t->has_parent = (uint8_t)in.has_parent;
    t->sampled = (uint8_t)(in.ctx.flags & GW_TRACE_SAMPLED);
    if (in.tracestate_len) /* NULL when out of memory: not passed on */
        t->tracestate = strndup(ts + in.tracestate_at, in.tracestate_len);
    /* Both clocks read now: the request's monotonic times map to the wall. */
    int64_t mono = gw_now_us();
    t->wall_off_ns = (int64_t)gw_otel_now_ns() - mono * 1000;
    t->phase_from = mono;
    t->max_tokens = -1;
}

/* ---------------------------------------------------------------- phases */

static const char *phase_span_name(enum xphase p)
{
    switch (p) {
    case XP_PLAN:
        return "llmgw.plan";
    case XP_GUARD:
        return "llmgw.guard";
    case XP_RESERVE:
        return "llmgw.limits";
    case XP_CACHE:
        return "llmgw.cache";
    default:
        return NULL;
    }
}

void x_trace_phase(struct dp_exchange *x, enum xphase to)
{
    struct xtrace *t = &x->tr;
    struct gw_otel_batch *b = batch(x);
    if (!b)
        return;
    int64_t now = gw_now_us();
    const char *name = phase_span_name(x->phase);
    if (x->phase == XP_CACHE && !x->cache && !x->cache_hit)
        name = NULL; /* the route does not use the cache: nothing was done */
    if (name) {
        struct gw_span *s = &b->span;
        gw_span_begin(s, t->trace_id, t->phase_id, t->span_id, name, GW_SPAN_INTERNAL,
                      ns(x, t->phase_from));
        if (x->phase == XP_PLAN) {
            if (x->plan.route)
                gw_span_str(s, "llmgw.route", x->plan.route->name);
            gw_span_int(s, "llmgw.candidates", (int64_t)x->plan.ncands);
            if (x->plan.scored_by)
                gw_span_str(s, "llmgw.scored_by", x->plan.scored_by);
        } else if (x->phase == XP_CACHE) {
            gw_span_bool(s, "llmgw.cache.hit", x->cache_hit);
        }
        if (to == XP_DONE && x->error_class)
            gw_span_status(s, GW_SPAN_ERROR, x->error_class);
        gw_otel_batch_end(b, ns(x, now));
    }
    /* The next phase's span id now: a guard's classifier call is its child. */
    if (phase_span_name(to))
        gw_trace_ids(&x->l->rng, t->phase_id, sizeof(t->phase_id));
    t->phase_from = now;
}

/* The traceparent of one of the request's spans (the request's when the
 * other is not recorded: an unsampled trace writes no phase span). */
static int parent_of(const struct dp_exchange *x, const uint8_t *span_id,
                     char out[GW_TRACEPARENT_LEN + 1])
{
    if (!x->tr.on)
        return 0;
    gw_traceparent_format(x->tr.trace_id, x->tr.sampled ? span_id : x->tr.span_id,
                          x->tr.sampled ? GW_TRACE_SAMPLED : 0, out);
    return 1;
}

int x_trace_phase_parent(const struct dp_exchange *x, char out[GW_TRACEPARENT_LEN + 1])
{
    return parent_of(x, x->tr.phase_id, out);
}

int x_trace_request_parent(const struct dp_exchange *x, char out[GW_TRACEPARENT_LEN + 1])
{
    return parent_of(x, x->tr.span_id, out);
}

/* -------------------------------------------------------------- attempts */

const char *x_trace_attempt_begin(struct dp_exchange *x)
{
    struct xtrace *t = &x->tr;
    if (!t->on)
        return NULL;
    gw_trace_ids(&x->l->rng, t->attempt_id, sizeof(t->attempt_id));
    gw_traceparent_format(t->trace_id, t->attempt_id, t->sampled ? GW_TRACE_SAMPLED : 0,
                          t->traceparent);
    if (x->creq) /* a stream's request is given back at its bright line */
        t->max_tokens = x->creq->has_max_tokens ? x->creq->max_tokens : -1;
    return t->traceparent;
}

const char *x_trace_tracestate(const struct dp_exchange *x)
{
    return x->tr.tracestate;
}

/* The cost attributes: the picodollars (an integer), the currency, and
 * whether the cost is exact, estimated (usage partly the gateway's) or
 * unknown (no price). */
static void cost_attrs(struct gw_span *s, const struct fc_bill *bill, int estimated)
{
    if (bill->has_cost) {
        gw_span_int(s, "llmgw.cost.picodollars", bill->cost_picodollars);
        if (bill->currency)
            gw_span_str(s, "llmgw.cost.currency", bill->currency);
    }
    gw_span_str(s, "llmgw.cost.kind",
                !bill->has_cost ? "unknown"
                : estimated     ? "estimated"
                                : "exact");
}

void x_trace_attempt(struct dp_exchange *x, const char *failure_class, int64_t end)
{
    struct xtrace *t = &x->tr;
    struct gw_otel_batch *b = batch(x);
    if (!b)
        return;
    struct gw_span *s = &b->span;
    const char *op = x_operation(x);
    gw_span_begin2(s, t->trace_id, t->attempt_id, t->span_id, op, x->model, GW_SPAN_CLIENT,
                   ns(x, x->ta0));
    gw_span_str(s, "gen_ai.operation.name", op);
    gw_span_str(s, "gen_ai.provider.name", dp_metrics_genai_provider(x->prov->driver));
    gw_span_str(s, "gen_ai.request.model", x->model);
    if (x->answer_model)
        gw_span_str(s, "gen_ai.response.model", x->answer_model);
    if (x->kind == KIND_CHAT && t->max_tokens >= 0)
        gw_span_int(s, "gen_ai.request.max_tokens", t->max_tokens);
    if (x->usage.have) {
        gw_span_int(s, "gen_ai.usage.input_tokens", x->usage.input);
        gw_span_int(s, "gen_ai.usage.output_tokens", x->usage.output);
        gw_span_int(s, "gen_ai.usage.cache_read.input_tokens", x->usage.cache_read);
        gw_span_int(s, "gen_ai.usage.cache_creation.input_tokens",
                    x->usage.cache_write_5m + x->usage.cache_write_1h);
    }
    if (x->have_stop) {
        const char *why[] = {canon_stop_name(x->stop)};
        gw_span_strs(s, "gen_ai.response.finish_reasons", why, 1);
    }
    if (x->status)
        gw_span_int(s, "http.response.status_code", x->status);
    gw_span_str(s, "llmgw.provider", x->prov->name);
    gw_span_int(s, "llmgw.attempt", x->nattempts);
    gw_span_bool(s, "llmgw.retry", x->tries > 1);
    gw_span_bool(s, "llmgw.failover", x->tries == 1 && x->nattempts > 1);
    gw_span_str(s, "llmgw.breaker.state", x->probe || x->fleet_probe ? "half_open" : "closed");
    gw_span_str(s, "llmgw.ledger.id", x->attempt_id);
    if (x->t_first_content)
        gw_span_double(s, "llmgw.time_to_first_content_ms",
                       (double)(x->t_first_content - x->ta0) / 1000.0);
    cost_attrs(s, &x->bill, x->usage_estimated);
    if (x->t_first_byte)
        gw_span_event(s, "llmgw.first_byte", ns(x, x->t_first_byte), NULL, 0);
    if (x->t_first_content) {
        /* The first content arrived, and with it the answer became this
         * attempt's: the bright line (docs/dataplane.md). */
        gw_span_event(s, "llmgw.first_content", ns(x, x->t_first_content), NULL, 0);
        struct gw_attr a = {.key = "llmgw.attempt", .type = GW_ATTR_INT, .i = x->nattempts};
        gw_span_event(s, "llmgw.bright_line", ns(x, x->t_first_content), &a, 1);
    }
    if (failure_class) {
        gw_span_str(s, "error.type", failure_class);
        gw_span_status(s, GW_SPAN_ERROR, failure_class);
    } else if (x->verdict == V_CANCELED) {
        gw_span_str(s, "error.type", "canceled");
    }
    gw_otel_batch_end(b, ns(x, end));
    t->last_end = end;
}

/* --------------------------------------------------------------- request */

void x_trace_request(struct dp_exchange *x)
{
    struct xtrace *t = &x->tr;
    struct gw_otel_batch *b = batch(x);
    if (!b)
        return;
    /* Its end: the answer's, or the last attempt's when that was later
     * (an attempt is recorded once its answer has gone). */
    int64_t end = x->t_client_end ? x->t_client_end : gw_now_us();
    if (t->last_end > end)
        end = t->last_end;
    struct gw_span *s = &b->span;
    gw_span_begin2(s, t->trace_id, t->span_id, t->has_parent ? t->parent_id : NULL, "POST", x->path,
                   x->internal ? GW_SPAN_INTERNAL : GW_SPAN_SERVER, ns(x, x->t0));
    if (t->tracestate)
        gw_span_tracestate(s, t->tracestate, strlen(t->tracestate));
    gw_span_str(s, "http.request.method", "POST");
    gw_span_str(s, "url.path", x->path);
    gw_span_str(s, "http.route", x->path);
    if (x->final_status)
        gw_span_int(s, "http.response.status_code", x->final_status);
    gw_span_str(s, "gen_ai.operation.name", x_operation(x));
    gw_span_str(s, "llmgw.request_id", x->request_id);
    if (x->plan.route)
        gw_span_str(s, "llmgw.route", x->plan.route->name);
    /* The selector as the client wrote it only when it named a configured
     * route or alias; an exact target as the logs name it; else nothing (a
     * model field may hold anything: the logs' rule). */
    if (x->plan.route && x->selector[0]) {
        gw_span_str(s, "llmgw.selector", x->selector);
    } else if (x->prov && x->model) {
        char sel[DP_MAX_MODEL_ID + 160];
        snprintf(sel, sizeof(sel), "%s/%s", x->prov->name, x->model);
        gw_span_str(s, "llmgw.selector", sel);
    }
    gw_span_str(s, "llmgw.outcome", x->outcome ? x->outcome : "ok");
    if (x->error_class)
        gw_span_str(s, "error.type", x->error_class);
    gw_span_int(s, "llmgw.attempts", x->nattempts);
    gw_span_int(s, "llmgw.retries", x->nretries);
    gw_span_int(s, "llmgw.failovers", x->nfailovers);
    if (x->cache_hit)
        gw_span_bool(s, "llmgw.cache.hit", 1);
    if (x->bill.ledger_id)
        gw_span_str(s, "llmgw.ledger.id", x->bill.ledger_id);
    if (x->cost_known && x->cost_currency[0]) {
        gw_span_int(s, "llmgw.cost.picodollars", x->cost_total);
        gw_span_str(s, "llmgw.cost.currency", x->cost_currency);
    }
    if (x->key) {
        gw_span_str(s, "llmgw.key.id", x->key->id);
        if (x->key->team)
            gw_span_str(s, "llmgw.team", x->key->team);
        if (x->key->project)
            gw_span_str(s, "llmgw.project", x->key->project);
    }
    if (x->snap)
        gw_span_int(s, "llmgw.snapshot.version", x->snap->version);
    if (x->final_status >= 500 || (x->committed && x->error_class))
        gw_span_status(s, GW_SPAN_ERROR, x->error_class ? x->error_class : "http 5xx");
    gw_otel_batch_end(b, ns(x, end));
}
