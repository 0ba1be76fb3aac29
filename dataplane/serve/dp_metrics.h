/*
 * dp_metrics: the data plane's metrics (docs/observability.md), on one
 * process-wide gw_metrics registry that every worker thread updates and
 * GET /metrics renders. Like the breakers table, it is process state by
 * nature: a count of the process's requests. dp_metrics_init creates it
 * before the workers start; every verb is a no-op before that (unit tests
 * exercise the exchange without metrics).
 *
 * Label values come from configuration and from the code's own closed sets
 * (routes, providers, configured models, failure classes, statuses, error
 * codes), never from request content; each family also has gw_metrics'
 * series cap. Verbs take NULL strings as "".
 */
#ifndef DP_METRICS_H
#define DP_METRICS_H

#include <stdint.h>

#include "dp_breaker.h"
#include "dp_fleet.h"

struct gw_buf;
struct canon_usage;

/* Creates the registry (0 or GW_ENOMEM). Not thread-safe: call once, at
 * startup. dp_metrics_shutdown frees it once the workers are gone. */
int dp_metrics_init(void) __attribute__((warn_unused_result));
void dp_metrics_shutdown(void);
/* The trace exporter's counters (gw_otel_metrics); NULL: none. */
struct gw_otel;
void dp_metrics_otel(struct gw_otel *o);

/* The exposition, for GET /metrics (0 or a GW_E code). */
int dp_metrics_render(struct gw_buf *out) __attribute__((warn_unused_result));

/* The OpenTelemetry gen_ai.provider.name of a driver ("aws.bedrock" for
 * "bedrock"; "" for NULL): the metrics' label and the traces' attribute. */
const char *dp_metrics_genai_provider(const char *driver);

/* The labels an upstream attempt or a request is counted under. */
struct dp_metrics_target {
    const char *route;     /* "" for an exact or bare-model selector */
    const char *provider;  /* the provider's configured name */
    const char *driver;    /* its driver (the GenAI provider name is derived from it) */
    const char *model;     /* a configured model, or "other" */
    const char *operation; /* "chat" or "embeddings" */
};

/* One upstream attempt's end: outcome is "ok", "failed", "broke" or
 * "canceled"; error_class NULL when there is none. usage may be NULL. */
void dp_metrics_attempt(const struct dp_metrics_target *t, const char *outcome,
                        const char *error_class, const struct canon_usage *usage);
void dp_metrics_retry(const struct dp_metrics_target *t);
/* An attempt's cost, once its usage arrived and dp_cost priced it:
 * llmgw_cost_picodollars_total{route,provider,model,currency}, in 10^-12 of
 * the price's currency (picodollars for USD; the currency label keeps
 * currencies apart, none is converted). A negative cost is not counted. */
void dp_metrics_cost(const struct dp_metrics_target *t, const char *currency, int64_t picodollars);
/* An attempt's usage that has no cost (dp_cost answered GW_ENOENT or
 * GW_ERANGE; the ledger row's cost is NULL): llmgw_unpriced_usage_total
 * {provider,model}, and a warning line naming the target and why (the token
 * class dp_cost_unpriced_class names, or "overflow"): the first time for a
 * target, then every 1000th, so an unpriced model cannot flood the log. */
void dp_metrics_unpriced(const struct dp_metrics_target *t, const char *why);
void dp_metrics_failover(const char *route);
/* The response cache: the process's (its stats are read at each scrape),
 * a request's result ("hit", "miss", "bypass"), a wait joined. */
struct dp_cache;
void dp_metrics_set_cache(struct dp_cache *c);
void dp_metrics_cache(const char *route, const char *result);
void dp_metrics_cache_joined(const char *route);
void dp_metrics_cache_too_large(void); /* an answer not kept for its size */

/* The guard and the judge (docs/guardrails.md). */
void dp_metrics_guard(const char *route, const char *action);
void dp_metrics_guard_match(const char *route, const char *rule, const char *action);
void dp_metrics_guard_classifier(const char *route, const char *result);
void dp_metrics_judge(const char *route, const char *result);
void dp_metrics_judge_queue(int delta);
void dp_metrics_judge_score(const char *route, double normalized, int pass);
/* A refusal of the quota step (dp_limits_reserve, docs/budgets.md):
 * llmgw_limit_refusals_total{cause,metric,period}. cause is the refusal's
 * code (budget_exceeded, rate_limited, budget_unallocated,
 * budget_not_configured, budget_unpriced, max_tokens_required,
 * internal_error), except that a rate limit refused because no allowance
 * could be had is "rate_unallocated": its code is rate_limited, as for a
 * depleted one, but to an operator it is an outage, not a client's excess.
 * metric and period are the limit's, "" when the refusal names none. Every
 * value comes from a closed set. */
struct dp_limits_refusal;
void dp_metrics_limit_refusal(const struct dp_limits_refusal *r);

/* One request's end, after the exchange (times in seconds; a negative one
 * is not observed). t NULL: the request never had a target. */
struct dp_metrics_request {
    int status;
    const char *error_class; /* NULL: none */
    double duration_s;
    double ttft_s;
    double tpot_s;
    double overhead_s;
};
void dp_metrics_request(const struct dp_metrics_target *t, const struct dp_metrics_request *r);
/* A request answered before any routing or upstream work (refusals, the
 * /v1/models list, count_tokens, no route): counted in requests_total with
 * empty route, provider and model; code is its error code (NULL: none). */
void dp_metrics_request_simple(int status, const char *code);
/* No candidate for a request: cause is the no-route code. */
void dp_metrics_no_route(const char *cause);
/* Whether snapshots come from a control plane (the stale-snapshot alert
 * applies only then). */
void dp_metrics_controlplane(int configured);
/* Whether the Watch stream to the control plane is open (dp_cpclient). */
void dp_metrics_controlplane_connected(int connected);
/* A streaming answer's head went out (+1), or its request ended (-1). */
void dp_metrics_open_streams(int delta);
/* n client connections refused at the open-file limit (gw_http_refused_cb):
 * llmgw_connections_refused_total. */
void dp_metrics_connections_refused(uint64_t n);

/* model as a label value: itself when the snapshot configures it for
 * provider (a route entry or the catalog), else "other": an exact
 * provider/model selector names any model id it likes. */
struct dp_snapshot;
const char *dp_metrics_model(const struct dp_snapshot *s, const char *provider, const char *model);

/* A dp_breaker_change_fn: the default's log line, and the breaker gauges. */
void dp_metrics_breaker_change(void *arg, const char *provider, const char *model,
                               enum dp_breaker_state from, enum dp_breaker_state to, int64_t at_us);

/* A dp_fleet_gauge_fn (dp_metrics_init sets it): the fleet view's state
 * of a target as a gauge (0 healthy, 1 degraded, 2 down), its model mapped
 * by dp_metrics_model on the snapshot served. */
void dp_metrics_fleet_gauge(const char *provider, const char *model, enum dp_fleet_state state);

#endif
