/*
 * cp_metrics: the control plane's metrics (docs/observability.md,
 * "Control plane"), on one process-wide gw_metrics registry that GET
 * /metrics on the admin port renders. Like dp_metrics, it is process
 * state, and the one piece of it that is not in struct cp_ctx (cp_ctx.h):
 * the loop, the snapshot builder's thread and the ledger writer's count
 * into it through the verbs below with no context at hand, and it exists
 * before the parts it counts. cp_metrics_init creates it at startup and
 * every verb is a no-op before that (unit tests exercise the API without
 * metrics). What the scrape reads from the daemon's parts (the database,
 * the builder, the gRPC server, the ledger writer, the cluster membership)
 * comes from the context cp_metrics_render is given.
 *
 * Label values come from closed sets only: the admin API's route table,
 * a fixed list of methods, HTTP statuses, build results, lease results,
 * and configured names: the replica ids cp_grpc tracks (capped at
 * CP_METRICS_MAX_REPLICAS series), the teams and routes of stored ledger
 * rows, and the limits (at most CP_METRICS_MAX_LIMITS, read at scrape).
 *
 * The limits' gauges (llmgw_limit_amount, llmgw_limit_spent: what each
 * enabled limit allows and has spent in its current window, from
 * limit_windows) live in a registry of their own, built, rendered and
 * freed by each scrape: a gw_metrics series lives as long as its registry,
 * and a deleted or disabled limit must disappear from the exposition.
 *
 * Threading: the counters are updated from the event loop (admin requests),
 * the snapshot builder's thread and the ledger writer's (leases, cost);
 * cp_metrics_render runs on the event loop (its collect step and the
 * limits' read use the admin database connection, the builder's status and
 * the gRPC server's replica table, all owned by that loop).
 */
#ifndef CP_METRICS_H
#define CP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define CP_METRICS_MAX_REPLICAS 1000
/* The limits whose current window the scrape exports (the most used
 * first), and the series cap of the cost-by-team counter. */
#define CP_METRICS_MAX_LIMITS 1000
#define CP_METRICS_MAX_TEAM_ROUTES 5000

struct gw_buf;
struct gw_otel;
struct cp_ctx;

/* 0 or GW_ENOMEM. Once, at startup; cp_metrics_shutdown frees it. */
int cp_metrics_init(void) __attribute__((warn_unused_result));
void cp_metrics_shutdown(void);

/* The exposition (0 or a GW_E code). On the loop. The scrape-time gauges
 * are read first from ctx's parts, each of which may be NULL (its gauges
 * then keep their last value): ctx->db (llmgw_cp_postgres_up), ->builder,
 * ->grpc (the replicas and what the Watches were sent), ->ledger (the
 * writer's counters) and ->membership (llmgw_cp_leader, and
 * llmgw_cp_etcd_up with etcd configured). business: also what a team
 * spent per route (llmgw_cp_ledger_cost_picodollars_total) and every
 * limit's amount and spend (llmgw_limit_amount, llmgw_limit_spent, read
 * from ctx->db at most every 5 s): for a scrape with an admin token
 * only. */
int cp_metrics_render(const struct cp_ctx *ctx, struct gw_buf *out, int business)
    __attribute__((warn_unused_result));

/* One admin request's end: resource from the route table, the request's
 * method (anything outside the usual set counts as "other"). */
void cp_metrics_admin_request(const char *resource, const char *method, int status, double seconds);
/* One snapshot build: result is "ok", "failed" or "unchanged". Any thread. */
void cp_metrics_build(const char *result, double seconds);
/* The builder confirmed the snapshot it serves is current (a good build, or
 * a poll that found nothing newer): resets last_success_age. Any thread. */
void cp_metrics_snapshot_current(void);
/* One singleton job run on the leader (ok 1 or 0); ok -1 only creates the
 * job's series at 0. On the loop. */
void cp_metrics_job(const char *job, int ok);
/* Audit rows committed by the admin API. */
void cp_metrics_audit_rows(unsigned n);
/* One lease request answered by the ledger writer: result is "granted",
 * "renewed" (want 0), or the refusal ("depleted", "unknown_limit",
 * "invalid_window", "unallocated"). Any thread. */
void cp_metrics_lease(const char *result);
/* Ledger rows stored for the first time (a replay counts nothing), summed
 * per team, route and currency: their cost in 10^-12 of the currency.
 * Labels come from the rows, whose team and route are configured names
 * ("" for none). Any thread. */
void cp_metrics_ledger_cost(const char *team, const char *route, const char *currency,
                            uint64_t picodollars);

/* The fleet view (cp_fleet): a target's state (0 healthy, 1 degraded,
 * 2 down), and the data planes connected anywhere in the fleet. On the
 * loop. */
void cp_metrics_fleet_state(const char *provider, const char *model, int state);
void cp_metrics_fleet_replicas(size_t n);

/* Tracing is on (o: the exporter, gw_otel.h): its series
 * (llmgw_otel_spans_total, llmgw_otel_queue_spans,
 * llmgw_otel_export_requests_total, read from it at each scrape) and
 * llmgw_cp_push_spans_dropped_total. Once, at startup. */
void cp_metrics_otel(struct gw_otel *o);
/* Snapshot pushes that got no span (cp_trace.h: the pending table was
 * full). On the loop. */
void cp_metrics_push_spans_dropped(unsigned n);

#endif
