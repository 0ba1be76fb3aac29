#include "dp_metrics.h"

#include "dp_cache.h"

#include <stdio.h>
#include <string.h>

#include "canon.h"
#include "dp_cache.h"
#include "dp_ledger.h"
#include "dp_limits.h"
#include "dp_snapshot.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_metrics.h"
#include "gw_otel.h"
#include "gw_time.h"

/* Bucket bounds. The GenAI ones are the OpenTelemetry semantic
 * conventions' advice; the overhead's are ours (a gateway's own time is
 * counted in microseconds to milliseconds). */
static const double DURATION_S[] = {0.01, 0.02, 0.04, 0.08,  0.16,  0.32,  0.64,
                                    1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92};
static const double TTFT_S[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0};
static const double TPOT_S[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                0.3,  0.4,   0.5,  0.75,  1.0, 2.5};
static const double TOKENS[] = {1,     4,     16,     64,      256,     1024,     4096,
                                16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864};
static const double OVERHEAD_S[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                    0.025,  0.05,    0.1,    0.25,  0.5,    1.0};
#define N(a) (sizeof(a) / sizeof(*(a)))

struct dp_metrics {
    struct gw_metrics *reg;
    struct gw_metric *duration, *ttft, *tpot, *token_usage;
    struct gw_metric *requests, *attempts, *failovers, *retries, *tokens, *cache_hits;
    struct gw_metric *breaker_state, *breaker_transitions, *no_route, *overhead;
    struct gw_metric *open_streams, *snapshot_version, *snapshot_age, *cp_configured, *auth_open;
    struct gw_metric *cp_connected, *cost, *unpriced, *limit_refusals;
    struct gw_metric *ledger_pending, *ledger_spooled, *ledger_spool_bytes, *ledger_dropped;
    uint64_t ledger_dropped_seen; /* collect: what the counter already has */
    struct gw_metric *fleet_state, *conns_refused;
    /* the response cache (docs/cache.md) */
    struct dp_cache *rcache; /* NULL: off */
    struct gw_metric *rc_requests, *rc_joined, *rc_evictions, *rc_expired, *rc_too_large;
    struct gw_metric *rc_bytes, *rc_entries, *rc_flights;
    uint64_t rc_evictions_seen, rc_expired_seen;
    /* the guard and the judge (docs/guardrails.md) */
    struct gw_metric *guard_checks, *guard_matches, *guard_classifier;
    struct gw_metric *judge, *judge_queue, *judge_score, *judge_pass;
};

/* A judge's score, normalized to 0..1 over its rubric's scale. */
static const double SCORE01[] = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};

static struct dp_metrics the;
static struct dp_metrics *M; /* NULL until dp_metrics_init */

static const char *or_empty(const char *s)
{
    return s ? s : "";
}

const char *dp_metrics_genai_provider(const char *driver)
{
    if (!driver)
        return "";
    if (strcmp(driver, "openai-responses") == 0)
        return "openai";
    if (strcmp(driver, "bedrock") == 0)
        return "aws.bedrock";
    if (strcmp(driver, "gemini") == 0)
        return "gcp.gemini";
    return driver;
}

static void collect(struct gw_metrics *reg, void *arg)
{
    (void)reg;
    struct dp_metrics *m = arg;
    struct dp_snapshot *s = dp_snapshot_acquire();
    int64_t at = dp_snapshot_published_ms();
    if (s) {
        gw_metric_set(m->snapshot_version, NULL, (double)s->version);
        gw_metric_set(m->auth_open, NULL, s->auth_open ? 1 : 0);
        dp_snapshot_unref(s);
    }
    if (at)
        gw_metric_set(m->snapshot_age, NULL, (double)(gw_wall_ms() - at) / 1000.0);
    if (m->rcache) {
        struct dp_cache_stats cs;
        dp_cache_stats(m->rcache, &cs);
        gw_metric_set(m->rc_bytes, NULL, (double)cs.bytes);
        gw_metric_set(m->rc_entries, NULL, (double)cs.entries);
        gw_metric_set(m->rc_flights, NULL, (double)cs.flights);
        /* The store counts; the counters take what is new since. */
        struct {
            struct gw_metric *c;
            uint64_t now, *seen;
        } d[] = {{m->rc_evictions, cs.evictions, &m->rc_evictions_seen},
                 {m->rc_expired, cs.expired, &m->rc_expired_seen}};
        for (size_t i = 0; i < N(d); i++)
            if (d[i].now > *d[i].seen) {
                gw_metric_inc(d[i].c, NULL, d[i].now - *d[i].seen);
                *d[i].seen = d[i].now;
            }
    }
    struct dp_ledger_stats ls;
    dp_ledger_stats(&ls);
    gw_metric_set(m->ledger_pending, NULL, (double)ls.pending_rows);
    gw_metric_set(m->ledger_spooled, NULL, (double)ls.spooled_rows);
    gw_metric_set(m->ledger_spool_bytes, NULL, (double)ls.spool_bytes);
    if (ls.dropped_rows > m->ledger_dropped_seen) {
        gw_metric_inc(m->ledger_dropped, NULL, ls.dropped_rows - m->ledger_dropped_seen);
        m->ledger_dropped_seen = ls.dropped_rows;
    }
}

void dp_metrics_otel(struct gw_otel *o)
{
    if (M)
        gw_otel_metrics(M->reg, o);
}

int dp_metrics_init(void)
{
    struct dp_metrics *m = &the;
    memset(m, 0, sizeof(*m));
    m->reg = gw_metrics_new();
    if (!m->reg)
        return GW_ENOMEM;
    struct gw_metrics *r = m->reg;
    static const char *const genai[] = {"gen_ai_operation_name", "gen_ai_provider_name",
                                        "gen_ai_request_model", "error_type", NULL};
    static const char *const genai_ok[] = {"gen_ai_operation_name", "gen_ai_provider_name",
                                           "gen_ai_request_model", NULL};
    static const char *const genai_tok[] = {"gen_ai_operation_name", "gen_ai_provider_name",
                                            "gen_ai_request_model", "gen_ai_token_type", NULL};
    static const char *const req[] = {"route", "provider", "model", "status", "error_class", NULL};
    static const char *const att[] = {"route", "provider", "model", "outcome", "error_class", NULL};
    static const char *const rpm[] = {"route", "provider", "model", NULL};
    static const char *const tok[] = {"route", "provider", "model", "type", NULL};
    static const char *const money[] = {"route", "provider", "model", "currency", NULL};
    static const char *const route[] = {"route", NULL};
    static const char *const target[] = {"provider", "model", NULL};
    static const char *const trans[] = {"provider", "model", "to", NULL};
    static const char *const cause[] = {"cause", NULL};
    static const char *const refusal[] = {"cause", "metric", "period", NULL};
    m->duration = gw_metrics_histogram(
        r, "gen_ai_server_request_duration_seconds",
        "GenAI operation duration: a request's arrival to the end of its answer.", genai,
        DURATION_S, N(DURATION_S));
    m->ttft = gw_metrics_histogram(
        r, "gen_ai_server_time_to_first_token_seconds",
        "Time from a request's arrival to its first content (text, reasoning or tool call).",
        genai_ok, TTFT_S, N(TTFT_S));
    m->tpot = gw_metrics_histogram(r, "gen_ai_server_time_per_output_token_seconds",
                                   "Time per output token after the first, of whole answers.",
                                   genai_ok, TPOT_S, N(TPOT_S));
    m->token_usage = gw_metrics_histogram(
        r, "gen_ai_client_token_usage",
        "Tokens per upstream attempt that reported usage, by type (input includes cached).",
        genai_tok, TOKENS, N(TOKENS));
    m->requests = gw_metrics_counter(
        r, "llmgw_requests_total",
        "Requests answered, by route, last target, status to the client and failure class.", req);
    m->attempts = gw_metrics_counter(
        r, "llmgw_attempts_total", "Upstream attempts, by target, outcome and failure class.", att);
    m->failovers = gw_metrics_counter(r, "llmgw_failovers_total",
                                      "Moves to the next candidate target after a failure.", route);
    m->retries = gw_metrics_counter(r, "llmgw_retries_total",
                                    "Retries of the same target after a failure.", rpm);
    m->cache_hits = gw_metrics_counter(
        r, "llmgw_cache_hits_total",
        "Attempts whose usage reports prompt-cache reads (the provider's prompt cache hit; "
        "llmgw's own response cache is llmgw_response_cache_*).",
        rpm);
    static const char *const rcres[] = {"route", "result", NULL};
    m->rc_requests = gw_metrics_counter(
        r, "llmgw_response_cache_requests_total",
        "Requests on routes with the response cache on, by result: hit (answered from the "
        "cache), miss (went upstream), bypass (not cacheable, or the client said no-cache).",
        rcres);
    m->rc_joined = gw_metrics_counter(
        r, "llmgw_response_cache_joined_total",
        "Requests that waited for an identical request already upstream (single flight).", route);
    m->rc_evictions = gw_metrics_counter(r, "llmgw_response_cache_evictions_total",
                                         "Entries evicted to stay under --cache-max-mb.", NULL);
    m->rc_expired = gw_metrics_counter(r, "llmgw_response_cache_expired_total",
                                       "Entries found past their TTL and removed.", NULL);
    m->rc_too_large =
        gw_metrics_counter(r, "llmgw_response_cache_too_large_total",
                           "Answers not stored for their size (--cache-max-entry-kb).", NULL);
    m->rc_bytes =
        gw_metrics_gauge(r, "llmgw_response_cache_bytes",
                         "Bytes the response cache holds, entry overhead included.", NULL);
    m->rc_entries = gw_metrics_gauge(r, "llmgw_response_cache_entries",
                                     "Entries the response cache holds.", NULL);
    m->rc_flights =
        gw_metrics_gauge(r, "llmgw_response_cache_flights",
                         "Answers being fetched with identical requests waiting.", NULL);
    static const char *const gact[] = {"route", "action", NULL};
    static const char *const grule[] = {"route", "rule", "action", NULL};
    static const char *const gres[] = {"route", "result", NULL};
    static const char *const gpass[] = {"route", "pass", NULL};
    m->guard_checks = gw_metrics_counter(
        r, "llmgw_guard_checks_total",
        "Requests the prompt-injection guard read, by what it did: pass, log (served, "
        "recorded), block, error (the classifier failed and the request was served).",
        gact);
    m->guard_matches = gw_metrics_counter(
        r, "llmgw_guard_matches_total",
        "Guard findings by rule (a rule id, or classifier) and the action taken.", grule);
    m->guard_classifier = gw_metrics_counter(
        r, "llmgw_guard_classifier_total",
        "Classifier verdicts: safe, injection, error (no usable verdict), timeout.", gres);
    m->judge = gw_metrics_counter(
        r, "llmgw_judge_total",
        "Answers sampled for the judge, and what became of them: sampled, dropped (the queue "
        "was full, or the answer too long), scored, invalid (no usable score), failed.",
        gres);
    m->judge_queue = gw_metrics_gauge(r, "llmgw_judge_queue_depth",
                                      "Sampled answers waiting for, or with, their judge.", NULL);
    m->judge_score = gw_metrics_histogram(
        r, "llmgw_judge_score",
        "Judge scores, normalized to 0..1 over the rubric's scale (_sum / _count: the mean).",
        route, SCORE01, N(SCORE01));
    m->judge_pass =
        gw_metrics_counter(r, "llmgw_judge_pass_total",
                           "Judged answers by whether they reached the rubric's pass_min.", gpass);
    m->tokens = gw_metrics_counter(r, "llmgw_tokens_total",
                                   "Tokens reported by providers, by normalized type.", tok);
    m->breaker_state =
        gw_metrics_gauge(r, "llmgw_breaker_state",
                         "Circuit breaker state per target: 0 closed, 1 half-open, 2 open "
                         "(a target appears at its first change).",
                         target);
    m->breaker_transitions =
        gw_metrics_counter(r, "llmgw_breaker_transitions_total",
                           "Circuit breaker state changes, by new state.", trans);
    m->no_route = gw_metrics_counter(r, "llmgw_no_route_total",
                                     "Requests with no candidate target, by cause.", cause);
    m->overhead = gw_metrics_histogram(
        r, "llmgw_gateway_overhead_seconds",
        "Time a request spent in the gateway: its duration less its attempts' upstream "
        "time and its retry backoffs.",
        route, OVERHEAD_S, N(OVERHEAD_S));
    m->open_streams = gw_metrics_gauge(r, "llmgw_open_streams",
                                       "Streaming answers whose head went out and whose request "
                                       "has not ended.",
                                       NULL);
    m->snapshot_version =
        gw_metrics_gauge(r, "llmgw_snapshot_version", "Version of the snapshot in use.", NULL);
    m->snapshot_age = gw_metrics_gauge(r, "llmgw_snapshot_age_seconds",
                                       "Seconds since the snapshot in use was published.", NULL);
    m->auth_open = gw_metrics_gauge(r, "llmgw_auth_open",
                                    "1 when the snapshot in use serves requests without an API key "
                                    "(\"auth\": \"none\"), 0 when every request needs one.",
                                    NULL);
    m->cp_configured = gw_metrics_gauge(
        r, "llmgw_controlplane_configured",
        "1 when snapshots come from a control plane (--control-plane), 0 in file mode.", NULL);
    m->cp_connected = gw_metrics_gauge(
        r, "llmgw_controlplane_connected",
        "1 while the Watch stream to the control plane is open (0 in file mode).", NULL);
    m->ledger_pending = gw_metrics_gauge(
        r, "llmgw_ledger_pending_rows",
        "Ledger rows recorded and not yet acknowledged stored by the control plane.", NULL);
    m->ledger_spooled =
        gw_metrics_gauge(r, "llmgw_ledger_spooled_rows",
                         "Of the pending ledger rows, those in the on-disk spool.", NULL);
    m->ledger_spool_bytes = gw_metrics_gauge(
        r, "llmgw_ledger_spool_bytes", "Bytes the ledger spool holds (--ledger-spool).", NULL);
    m->ledger_dropped = gw_metrics_counter(
        r, "llmgw_ledger_rows_dropped_total",
        "Ledger rows dropped because the spool was full (each one is logged).", NULL);
    m->cost = gw_metrics_counter(r, "llmgw_cost_picodollars_total",
                                 "Cost of upstream attempts from the prices in their snapshot, in "
                                 "10^-12 of the currency (picodollars for USD).",
                                 money);
    m->unpriced = gw_metrics_counter(
        r, "llmgw_unpriced_usage_total",
        "Upstream attempts whose usage could not be priced (no price for a token class they "
        "used, or an overflow): their cost is unknown.",
        target);
    m->limit_refusals = gw_metrics_counter(
        r, "llmgw_limit_refusals_total",
        "Requests the quota step refused (budgets and rate limits), by cause and by the "
        "limit's metric and period.",
        refusal);
    if (!m->rc_requests || !m->rc_joined || !m->rc_evictions || !m->rc_expired ||
        !m->rc_too_large || !m->rc_bytes || !m->rc_entries || !m->rc_flights || !m->cache_hits ||
        !m->limit_refusals || !m->cost || !m->unpriced || !m->ledger_pending ||
        !m->ledger_spooled || !m->ledger_spool_bytes || !m->ledger_dropped || !m->cp_connected ||
        !m->duration || !m->ttft || !m->tpot || !m->token_usage || !m->requests || !m->attempts ||
        !m->failovers || !m->retries || !m->tokens || !m->breaker_state ||
        !m->breaker_transitions || !m->no_route || !m->overhead || !m->open_streams ||
        !m->snapshot_version || !m->snapshot_age || !m->cp_configured || !m->auth_open) {
        gw_metrics_free(m->reg);
        m->reg = NULL;
        return GW_ENOMEM;
    }
    m->fleet_state = gw_metrics_gauge(
        r, "llmgw_fleet_target_state",
        "The fleet health view's state per target, as pushed by the control plane: 0 healthy, "
        "1 degraded, 2 down (a target that leaves the view, or a view that expired, reads 0).",
        target);
    m->conns_refused = gw_metrics_counter(
        r, "llmgw_connections_refused_total",
        "Client connections answered 503 and closed at once because the process was at its "
        "connection cap (--max-connections) or its open-file limit.",
        NULL);
    if (!m->fleet_state || !m->conns_refused) {
        gw_metrics_free(m->reg);
        m->reg = NULL;
        return GW_ENOMEM;
    }
    gw_metrics_on_collect(r, collect, m);
    M = m;
    dp_fleet_set_gauge(dp_metrics_fleet_gauge);
    return GW_OK;
}

void dp_metrics_shutdown(void)
{
    if (!M)
        return;
    M = NULL;
    gw_metrics_free(the.reg);
    the.reg = NULL;
}

int dp_metrics_render(struct gw_buf *out)
{
    return M ? gw_metrics_render(M->reg, out) : GW_OK;
}

void dp_metrics_attempt(const struct dp_metrics_target *t, const char *outcome,
                        const char *error_class, const struct canon_usage *u)
{
    if (!M)
        return;
    const char *v[] = {or_empty(t->route), or_empty(t->provider), or_empty(t->model),
                       or_empty(outcome), error_class ? error_class : "none"};
    gw_metric_inc(M->attempts, v, 1);
    if (!u || !u->have)
        return;
    if (u->cache_read > 0) {
        const char *cv[] = {or_empty(t->route), or_empty(t->provider), or_empty(t->model)};
        gw_metric_inc(M->cache_hits, cv, 1);
    }
    static const char *const types[] = {"input",          "cache_read", "cache_write_5m",
                                        "cache_write_1h", "output",     "reasoning"};
    const int64_t n[] = {u->input,          u->cache_read, u->cache_write_5m,
                         u->cache_write_1h, u->output,     u->reasoning};
    for (size_t i = 0; i < N(types); i++) {
        if (n[i] <= 0)
            continue;
        const char *tv[] = {or_empty(t->route), or_empty(t->provider), or_empty(t->model),
                            types[i]};
        gw_metric_inc(M->tokens, tv, (uint64_t)n[i]);
    }
    const char *in[] = {or_empty(t->operation), dp_metrics_genai_provider(t->driver),
                        or_empty(t->model), "input"};
    gw_metric_observe(M->token_usage, in, (double)canon_usage_prompt(u));
    if (strcmp(or_empty(t->operation), "embeddings") != 0) {
        const char *out[] = {or_empty(t->operation), dp_metrics_genai_provider(t->driver),
                             or_empty(t->model), "output"};
        gw_metric_observe(M->token_usage, out, (double)u->output);
    }
}

void dp_metrics_retry(const struct dp_metrics_target *t)
{
    if (!M)
        return;
    const char *v[] = {or_empty(t->route), or_empty(t->provider), or_empty(t->model)};
    gw_metric_inc(M->retries, v, 1);
}

void dp_metrics_cost(const struct dp_metrics_target *t, const char *currency, int64_t picodollars)
{
    if (!M || picodollars < 0)
        return;
    const char *v[] = {or_empty(t->route), or_empty(t->provider), or_empty(t->model),
                       or_empty(currency)};
    gw_metric_inc(M->cost, v, (uint64_t)picodollars);
}

void dp_metrics_unpriced(const struct dp_metrics_target *t, const char *why)
{
    uint64_t n = 1;
    if (M) {
        const char *v[] = {or_empty(t->provider), or_empty(t->model)};
        struct gw_series *s = gw_metric_series(M->unpriced, v);
        gw_counter_add(s, 1);
        /* Racing threads may both log or both skip one: a log line's
         * count is approximate, the counter is not. */
        n = (uint64_t)gw_series_value(s);
    }
    if (n == 1 || n % 1000 == 0)
        gw_logf(GW_LOG_WARN, "usage without a price: its cost is unknown", "{s:s,s:s,s:s,s:s,s:I}",
                "route", or_empty(t->route), "provider", or_empty(t->provider), "model",
                or_empty(t->model), "why", or_empty(why), "count", (json_int_t)n);
}

void dp_metrics_failover(const char *route)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route)};
    gw_metric_inc(M->failovers, v, 1);
}

void dp_metrics_set_cache(struct dp_cache *c)
{
    if (M)
        M->rcache = c;
}

void dp_metrics_cache(const char *route, const char *result)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route), result};
    gw_metric_inc(M->rc_requests, v, 1);
}

void dp_metrics_cache_too_large(void)
{
    if (M)
        gw_metric_inc(M->rc_too_large, NULL, 1);
}

void dp_metrics_guard(const char *route, const char *action)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route), action};
    gw_metric_inc(M->guard_checks, v, 1);
}

void dp_metrics_guard_match(const char *route, const char *rule, const char *action)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route), rule, action};
    gw_metric_inc(M->guard_matches, v, 1);
}

void dp_metrics_guard_classifier(const char *route, const char *result)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route), result};
    gw_metric_inc(M->guard_classifier, v, 1);
}

void dp_metrics_judge(const char *route, const char *result)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route), result};
    gw_metric_inc(M->judge, v, 1);
}

void dp_metrics_judge_queue(int delta)
{
    if (M)
        gw_gauge_add(gw_metric_series(M->judge_queue, NULL), delta);
}

void dp_metrics_judge_score(const char *route, double normalized, int pass)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route)};
    gw_metric_observe(M->judge_score, v, normalized);
    const char *p[] = {or_empty(route), pass ? "true" : "false"};
    gw_metric_inc(M->judge_pass, p, 1);
}

void dp_metrics_cache_joined(const char *route)
{
    if (!M)
        return;
    const char *v[] = {or_empty(route)};
    gw_metric_inc(M->rc_joined, v, 1);
}

void dp_metrics_limit_refusal(const struct dp_limits_refusal *r)
{
    if (!M || !r)
        return;
    const char *cause = or_empty(r->code);
    if (strcmp(cause, "rate_limited") == 0 && r->state && strcmp(r->state, "unallocated") == 0)
        cause = "rate_unallocated";
    const char *v[] = {cause, r->has_limit ? dp_limit_metric_name(r->metric) : "",
                       r->has_limit && r->has_period ? dp_limit_period_name(r->period) : ""};
    gw_metric_inc(M->limit_refusals, v, 1);
}

static void count_request(const char *route, const char *provider, const char *model, int status,
                          const char *cls)
{
    char st[16];
    snprintf(st, sizeof(st), "%d", status);
    const char *v[] = {or_empty(route), or_empty(provider), or_empty(model), st,
                       cls ? cls : "none"};
    gw_metric_inc(M->requests, v, 1);
}

void dp_metrics_request(const struct dp_metrics_target *t, const struct dp_metrics_request *r)
{
    if (!M)
        return;
    static const struct dp_metrics_target none = {0};
    if (!t)
        t = &none;
    count_request(t->route, t->provider, t->model, r->status, r->error_class);
    const char *rv[] = {or_empty(t->route)};
    if (r->overhead_s >= 0)
        gw_metric_observe(M->overhead, rv, r->overhead_s);
    if (!t->provider)
        return; /* no target: no GenAI operation happened */
    const char *gp = dp_metrics_genai_provider(t->driver);
    /* error.type is absent on success (semantic conventions): "" here. */
    const char *dv[] = {or_empty(t->operation), gp, or_empty(t->model), or_empty(r->error_class)};
    if (r->duration_s >= 0)
        gw_metric_observe(M->duration, dv, r->duration_s);
    const char *ov[] = {or_empty(t->operation), gp, or_empty(t->model)};
    if (r->ttft_s >= 0)
        gw_metric_observe(M->ttft, ov, r->ttft_s);
    if (r->tpot_s >= 0)
        gw_metric_observe(M->tpot, ov, r->tpot_s);
}

void dp_metrics_request_simple(int status, const char *code)
{
    if (M)
        count_request("", "", "", status, code);
}

void dp_metrics_no_route(const char *cause)
{
    if (!M)
        return;
    const char *v[] = {or_empty(cause)};
    gw_metric_inc(M->no_route, v, 1);
}

void dp_metrics_controlplane(int configured)
{
    if (M)
        gw_metric_set(M->cp_configured, NULL, configured ? 1.0 : 0.0);
}

void dp_metrics_controlplane_connected(int connected)
{
    if (M)
        gw_metric_set(M->cp_connected, NULL, connected ? 1.0 : 0.0);
}

void dp_metrics_open_streams(int delta)
{
    if (M)
        gw_gauge_add(gw_metric_series(M->open_streams, NULL), delta);
}

void dp_metrics_connections_refused(uint64_t n)
{
    if (M)
        gw_metric_inc(M->conns_refused, NULL, n);
}

void dp_metrics_breaker_change(void *arg, const char *provider, const char *model,
                               enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us)
{
    dp_breaker_log_change(arg, provider, model, from, to, at_us);
    if (!M)
        return;
    /* The target may be an exact selector's: a model nobody configured. */
    struct dp_snapshot *s = dp_snapshot_acquire();
    model = dp_metrics_model(s, provider, model);
    const char *v[] = {or_empty(provider), model};
    gw_metric_set(M->breaker_state, v,
                  to == DP_BREAKER_OPEN        ? 2
                  : to == DP_BREAKER_HALF_OPEN ? 1
                                               : 0);
    const char *tv[] = {or_empty(provider), model, dp_breaker_state_name(to)};
    gw_metric_inc(M->breaker_transitions, tv, 1);
    dp_snapshot_unref(s);
}

const char *dp_metrics_model(const struct dp_snapshot *s, const char *provider, const char *model)
{
    if (!model)
        return "";
    if (!s || !provider)
        return "other";
    struct gw_pmap_iter it;
    const struct dp_route *r;
    for (dp_snapshot_iter(&s->routes, &it); (r = dp_snapshot_next(&it)) != NULL;)
        for (size_t j = 0; j < r->nentries; j++) {
            const struct dp_route_entry *e = &r->entries[j];
            if (strcmp(e->model, model) == 0 && strcmp(e->provider->name, provider) == 0)
                return model;
        }
    return dp_snapshot_catalog(s, provider, model) ? model : "other";
}

void dp_metrics_fleet_gauge(const char *provider, const char *model, enum dp_fleet_state state)
{
    if (!M)
        return;
    struct dp_snapshot *snap = dp_snapshot_acquire();
    const char *v[] = {or_empty(provider), or_empty(dp_metrics_model(snap, provider, model))};
    gw_metric_set(M->fleet_state, v, (double)state);
    dp_snapshot_unref(snap);
}
