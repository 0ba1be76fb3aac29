#include "cp_metrics.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_ctx.h"
#include "cp_db.h"
#include "cp_etcd.h"
#include "cp_grpc.h"
#include "cp_leases.h"
#include "cp_ledger.h"
#include "cp_snapshot.h"
#include "gw_buf.h"
#include "gw_error.h"
#include "gw_metrics.h"
#include "gw_otel.h"
#include "gw_time.h"

static const double ADMIN_S[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                 0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
static const double BUILD_S[] = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                 1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
#define N(a) (sizeof(a) / sizeof(*(a)))
#define STR(x) #x
#define XSTR(x) STR(x)

struct cp_metrics {
    struct gw_metrics *reg;
    struct gw_metric *admin_requests, *admin_duration, *builds, *build_duration;
    struct gw_metric *snapshot_version, *last_success_age, *unresolved, *replicas_connected;
    struct gw_metric *replica_acked, *postgres_up, *audit_rows;
    struct gw_metric *leader, *etcd_up, *job_runs;
    struct gw_metric *ledger_rows, *ledger_errors, *ledger_queue, *ledger_cost, *lease_grants;
    struct gw_metric *ledger_msgs, *judgements, *judgement_texts_dropped;
    /* What a team spent, per route (a private family), and every limit's
     * amount and spend: the business's figures, for an admin token only. */
    struct gw_buf limits_text; /* the limits' gauges, as last read */
    int64_t limits_at_us;      /* when (monotonic; 0: never) */
    int db_ok;                 /* collect: the check passed, so the scrape may read the limits */
    struct cp_ledger_stats ledger_seen; /* collect: what the counters already have */
    struct gw_metric *fleet_state, *fleet_replicas;
    /* What the Watches were sent (collect: what the counter already has). */
    struct gw_metric *watch_sends;
    struct cp_grpc_stats grpc_seen;
    /* With tracing on (cp_metrics_otel): push spans not started. */
    struct gw_metric *push_spans_dropped;
    _Atomic int64_t last_current_ms; /* wall ms; 0: never */
};

/* The registry is this module's own, not a member of struct cp_ctx: every
 * thread updates it (the loop, the snapshot builder, the ledger writer)
 * through the verbs below, without a context to hand, and it exists before
 * the parts whose figures it holds. NULL until cp_metrics_init. */
static struct cp_metrics *metrics;

/* The scrape-time gauges, read from the daemon's parts in ctx (on the
 * loop, before each exposition). */
static void collect(struct cp_metrics *m, const struct cp_ctx *ctx)
{
    m->db_ok = 0;
    if (ctx->db) {
        struct cp_db_err err;
        m->db_ok = cp_db_check(ctx->db, &err) == GW_OK;
        gw_metric_set(m->postgres_up, NULL, m->db_ok ? 1.0 : 0.0);
    }
    if (ctx->builder) {
        json_t *st = cp_snapshot_status(ctx->builder);
        if (st) {
            gw_metric_set(m->snapshot_version, NULL,
                          (double)json_integer_value(json_object_get(st, "version")));
            gw_metric_set(m->unresolved, NULL,
                          (double)json_array_size(json_object_get(st, "unresolved")));
            json_decref(st);
        }
    }
    if (ctx->membership) {
        gw_metric_set(m->leader, NULL, cp_etcd_is_leader(ctx->membership) ? 1.0 : 0.0);
        int up = cp_etcd_up(ctx->membership);
        /* Registered only with etcd configured (up >= 0): a family without
         * labels is always exposed, and "0" would read as an outage. */
        if (up >= 0 && !m->etcd_up)
            m->etcd_up = gw_metrics_gauge(m->reg, "llmgw_cp_etcd_up",
                                          "1 when etcd answered this replica's last call, 0 when "
                                          "not. Absent without --etcd-endpoints.",
                                          NULL);
        if (up >= 0)
            gw_metric_set(m->etcd_up, NULL, up ? 1.0 : 0.0);
    }
    int64_t at = atomic_load(&m->last_current_ms);
    if (at)
        gw_metric_set(m->last_success_age, NULL, (double)(gw_wall_ms() - at) / 1000.0);
    if (ctx->grpc) {
        json_t *reps = cp_grpc_replicas(ctx->grpc);
        size_t i, connected = 0;
        json_t *r;
        json_array_foreach(json_object_get(reps, "replicas"), i, r)
        {
            if (json_is_true(json_object_get(r, "connected")))
                connected++;
            const char *v[] = {json_string_value(json_object_get(r, "replica_id"))};
            gw_metric_set(m->replica_acked, v,
                          (double)json_integer_value(json_object_get(r, "acked_version")));
        }
        gw_metric_set(m->replicas_connected, NULL, (double)connected);
        json_decref(reps);
        struct cp_grpc_stats gs;
        cp_grpc_stats(ctx->grpc, &gs);
        const char *d[] = {"delta"}, *w[] = {"document"};
        gw_metric_inc(m->watch_sends, d, gs.deltas_sent - m->grpc_seen.deltas_sent);
        gw_metric_inc(m->watch_sends, w, gs.documents_sent - m->grpc_seen.documents_sent);
        m->grpc_seen = gs;
    }
    if (ctx->ledger) {
        struct cp_ledger_stats st;
        cp_ledger_stats(ctx->ledger, &st);
        const char *ins[] = {"inserted"}, *dup[] = {"duplicate"};
        gw_metric_inc(m->ledger_rows, ins, st.inserted - m->ledger_seen.inserted);
        gw_metric_inc(m->ledger_rows, dup, st.duplicates - m->ledger_seen.duplicates);
        const char *rej[] = {"rejected"};
        gw_metric_inc(m->ledger_rows, rej, st.rejected - m->ledger_seen.rejected);
        gw_metric_inc(m->ledger_errors, NULL, st.errors - m->ledger_seen.errors);
        const char *one[] = {"ledger_row"}, *many[] = {"ledger_batch"}, *jm[] = {"judgement"};
        gw_metric_inc(m->ledger_msgs, one, st.row_msgs - m->ledger_seen.row_msgs);
        gw_metric_inc(m->ledger_msgs, many, st.batch_msgs - m->ledger_seen.batch_msgs);
        gw_metric_inc(m->ledger_msgs, jm, st.judgement_msgs - m->ledger_seen.judgement_msgs);
        gw_metric_inc(m->judgements, ins,
                      st.judgements_inserted - m->ledger_seen.judgements_inserted);
        gw_metric_inc(m->judgements, dup,
                      st.judgements_duplicate - m->ledger_seen.judgements_duplicate);
        gw_metric_inc(m->judgements, rej,
                      st.judgements_rejected - m->ledger_seen.judgements_rejected);
        gw_metric_inc(m->judgement_texts_dropped, NULL,
                      st.judgement_texts_dropped - m->ledger_seen.judgement_texts_dropped);
        gw_metric_set(m->ledger_queue, NULL, (double)st.queued);
        m->ledger_seen = st;
    }
}

int cp_metrics_init(void)
{
    struct cp_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return GW_ENOMEM;
    m->reg = gw_metrics_new();
    if (!m->reg) {
        free(m);
        return GW_ENOMEM;
    }
    gw_buf_init(&m->limits_text, 0);
    struct gw_metrics *r = m->reg;
    static const char *const req[] = {"resource", "method", "status", NULL};
    static const char *const res[] = {"resource", NULL};
    static const char *const result[] = {"result", NULL};
    static const char *const replica[] = {"replica", NULL};
    m->admin_requests = gw_metrics_counter(
        r, "llmgw_cp_admin_requests_total",
        "Admin API requests answered, by resource (route), method and HTTP status.", req);
    m->admin_duration =
        gw_metrics_histogram(r, "llmgw_cp_admin_request_duration_seconds",
                             "Admin API request duration, by resource.", res, ADMIN_S, N(ADMIN_S));
    m->builds = gw_metrics_counter(r, "llmgw_cp_snapshot_builds_total",
                                   "Snapshot builds, by result (ok: a new document was handed "
                                   "out; unchanged: same document; failed: the last good one "
                                   "stays; mismatch: a consistency check found the incremental "
                                   "model differing from a full build).",
                                   result);
    m->build_duration =
        gw_metrics_histogram(r, "llmgw_cp_snapshot_build_duration_seconds",
                             "Snapshot build duration (every result).", NULL, BUILD_S, N(BUILD_S));
    m->snapshot_version = gw_metrics_gauge(
        r, "llmgw_cp_snapshot_version", "Version of the last good snapshot (0 before it).", NULL);
    m->last_success_age = gw_metrics_gauge(
        r, "llmgw_cp_snapshot_last_success_age_seconds",
        "Seconds since the builder last confirmed its snapshot is current (a good build, or a "
        "poll finding no newer configuration). Absent before the first.",
        NULL);
    m->unresolved = gw_metrics_gauge(
        r, "llmgw_cp_unresolved_credentials",
        "Providers whose credential_ref did not resolve in the last good build.", NULL);
    m->replicas_connected = gw_metrics_gauge(r, "llmgw_cp_replicas_connected",
                                             "Data planes with a Watch stream open.", NULL);
    m->replica_acked = gw_metrics_gauge(r, "llmgw_cp_replica_acked_version",
                                        "Snapshot version each data plane acknowledged serving "
                                        "(every replica seen since start).",
                                        replica);
    m->postgres_up = gw_metrics_gauge(
        r, "llmgw_cp_postgres_up",
        "1 when the admin API's database connection works (checked at scrape).", NULL);
    m->audit_rows = gw_metrics_counter(r, "llmgw_cp_audit_rows_total",
                                       "Audit rows committed by the admin API.", NULL);
    m->ledger_rows = gw_metrics_counter(
        r, "llmgw_cp_ledger_rows_total",
        "Ledger rows the writer handled, by result (inserted; duplicate: already stored, a "
        "replay; rejected: refused by the table, kept in ledger_rejects).",
        result);
    m->ledger_errors = gw_metrics_counter(r, "llmgw_cp_ledger_batch_errors_total",
                                          "Ledger batches that failed (each is retried).", NULL);
    m->ledger_queue = gw_metrics_gauge(r, "llmgw_cp_ledger_queue",
                                       "Ledger rows and lease messages waiting for the ledger "
                                       "writer.",
                                       NULL);
    static const char *const body[] = {"body", NULL};
    m->ledger_msgs = gw_metrics_counter(
        r, "llmgw_cp_ledger_messages_total",
        "Report messages that carried ledger rows or judgements, by body (ledger_row: one row; "
        "ledger_batch: several, from data planes that learned this control plane takes them, "
        "and their judgements; judgement: one judgement).",
        body);
    m->judgements = gw_metrics_counter(
        r, "llmgw_cp_judgements_total",
        "Judgements (sampled answers' scores) the ledger writer handled, by result (inserted; "
        "duplicate: already stored, a replay; rejected: refused, logged by request id).",
        result);
    m->judgement_texts_dropped = gw_metrics_counter(
        r, "llmgw_cp_judgement_texts_dropped_total",
        "Judgements whose route keeps the judged text, stored without it because "
        "LLMGW_MASTER_KEY is not set.",
        NULL);
    static const char *const team_route[] = {"team", "route", "currency", NULL};
    m->ledger_cost = gw_metrics_counter(
        r, "llmgw_cp_ledger_cost_picodollars_total",
        "Cost of the ledger rows this replica stored (replays count nothing), by team, route "
        "and currency, in 10^-12 of the currency (picodollars for USD).",
        team_route);
    m->lease_grants = gw_metrics_counter(
        r, "llmgw_cp_lease_grants_total",
        "Lease requests answered, by result (granted, renewed, or the refusal: depleted, "
        "unknown_limit, invalid_window, unallocated).",
        result);
    static const char *const jobres[] = {"job", "result", NULL};
    m->leader = gw_metrics_gauge(r, "llmgw_cp_leader",
                                 "1 while this replica is the fleet's leader (runs the singleton "
                                 "jobs); always 1 without etcd.",
                                 NULL);
    m->job_runs = gw_metrics_counter(r, "llmgw_cp_singleton_job_runs_total",
                                     "Singleton job runs on this replica (as leader), by job and "
                                     "result (ok, failed).",
                                     jobres);
    if (!m->ledger_cost || !m->lease_grants || !m->leader || !m->job_runs || !m->ledger_rows ||
        !m->ledger_msgs || !m->judgements || !m->judgement_texts_dropped || !m->ledger_errors ||
        !m->ledger_queue || !m->admin_requests || !m->admin_duration || !m->builds ||
        !m->build_duration || !m->snapshot_version || !m->last_success_age || !m->unresolved ||
        !m->replicas_connected || !m->replica_acked || !m->postgres_up || !m->audit_rows) {
        gw_metrics_free(m->reg);
        free(m);
        return GW_ENOMEM;
    }
    static const char *const target[] = {"provider", "model", NULL};
    m->fleet_state = gw_metrics_gauge(r, "llmgw_fleet_target_state",
                                      "The fleet health view's state per target: 0 healthy, 1 "
                                      "degraded, 2 down (docs/fleet.md).",
                                      target);
    m->fleet_replicas = gw_metrics_gauge(
        r, "llmgw_cp_fleet_replicas",
        "Data planes connected anywhere in the fleet, as the fleet view knows them.", NULL);
    static const char *const kind[] = {"kind", NULL};
    m->watch_sends = gw_metrics_counter(
        r, "llmgw_cp_watch_snapshots_sent_total",
        "Snapshot messages sent on Watch streams, by kind (delta: only what changed, to a data "
        "plane current at the delta's base; document: the whole document, to a new, older or "
        "lagging one).",
        kind);
    if (!m->fleet_state || !m->fleet_replicas || !m->watch_sends) {
        gw_metrics_free(m->reg);
        free(m);
        return GW_ENOMEM;
    }
    gw_metric_set_cap(m->replica_acked, CP_METRICS_MAX_REPLICAS);
    gw_metric_set_cap(m->admin_requests, 2000);
    static const char *const results[] = {"ok", "unchanged", "failed", "mismatch"};
    for (size_t i = 0; i < N(results); i++) {
        const char *v[] = {results[i]};
        gw_metric_inc(m->builds, v, 0);
    }
    gw_metric_inc(m->audit_rows, NULL, 0);
    static const char *const lresults[] = {"inserted", "duplicate", "rejected"};
    for (size_t i = 0; i < N(lresults); i++) {
        const char *v[] = {lresults[i]};
        gw_metric_inc(m->ledger_rows, v, 0);
        gw_metric_inc(m->judgements, v, 0);
    }
    gw_metric_inc(m->judgement_texts_dropped, NULL, 0);
    gw_metric_inc(m->ledger_errors, NULL, 0);
    static const char *const bodies[] = {"ledger_row", "ledger_batch", "judgement"};
    for (size_t i = 0; i < N(bodies); i++) {
        const char *v[] = {bodies[i]};
        gw_metric_inc(m->ledger_msgs, v, 0);
    }
    gw_metric_set_cap(m->ledger_cost, CP_METRICS_MAX_TEAM_ROUTES);
    gw_metric_set_private(m->ledger_cost);
    static const char *const gresults[] = {"granted",       "renewed",        "depleted",
                                           "unknown_limit", "invalid_window", "unallocated"};
    for (size_t i = 0; i < N(gresults); i++) {
        const char *v[] = {gresults[i]};
        gw_metric_inc(m->lease_grants, v, 0);
    }
    static const char *const kinds[] = {"delta", "document"};
    for (size_t i = 0; i < N(kinds); i++) {
        const char *v[] = {kinds[i]};
        gw_metric_inc(m->watch_sends, v, 0);
    }
    gw_metric_set(m->snapshot_version, NULL, 0);
    gw_metric_set(m->unresolved, NULL, 0);
    gw_metric_set(m->replicas_connected, NULL, 0);
    metrics = m;
    return GW_OK;
}

void cp_metrics_shutdown(void)
{
    struct cp_metrics *m = metrics;
    if (!m)
        return;
    metrics = NULL;
    gw_metrics_free(m->reg);
    gw_buf_free(&m->limits_text);
    free(m);
}

void cp_metrics_job(const char *job, int ok)
{
    if (!metrics)
        return;
    const char *v[] = {job, "ok"}, *f[] = {job, "failed"};
    gw_metric_inc(metrics->job_runs, v, ok == 1);
    gw_metric_inc(metrics->job_runs, f, ok == 0);
}

/* Every enabled limit's amount and what its current window has spent
 * (limit_windows; the window's start as cp_leases computes it), the most
 * used first, at most CP_METRICS_MAX_LIMITS. One indexed read per limit on
 * the admin connection, which collect has just checked. */
static const char SQL_LIMITS[] =
    "SELECT l.id, l.scope_kind, l.scope, l.metric, l.period, l.amount, coalesce(w.spent, 0) "
    "FROM limits l LEFT JOIN limit_windows w ON w.limit_id = l.id AND w.window_start "
    "= " CP_WINDOW_NOW_SQL(
        "l.period") " "
                    "WHERE l.enabled ORDER BY coalesce(w.spent, 0)::numeric / l.amount DESC, l.id "
                    "LIMIT " XSTR(CP_METRICS_MAX_LIMITS);

static double column(const PGresult *r, int row, int col)
{
    return strtod(PQgetvalue(r, row, col), NULL);
}

/* The limits' gauges, in a registry of this scrape's own (cp_metrics.h):
 * appended to out, or nothing when the database does not answer. */
static int render_limits(struct cp_db *db, struct gw_buf *out)
{
    struct cp_db_err err;
    PGresult *r = cp_db_exec(db, NULL, SQL_LIMITS, 0, NULL, &err);
    if (!r)
        return GW_OK; /* llmgw_cp_postgres_up says why on the next scrape */
    struct gw_metrics *reg = gw_metrics_new();
    static const char *const labels[] = {"limit", "scope_kind", "scope", "metric", "period", NULL};
    struct gw_metric *amount = gw_metrics_gauge(
        reg, "llmgw_limit_amount",
        "Each enabled limit's cap per window, in its metric's unit (picodollars of USD, "
        "requests, tokens).",
        labels);
    struct gw_metric *spent = gw_metrics_gauge(
        reg, "llmgw_limit_spent",
        "What each enabled limit's current window has spent (the charges of stored ledger "
        "rows), in its metric's unit.",
        labels);
    int rc = GW_OK;
    if (!reg || !amount || !spent) {
        rc = GW_ENOMEM;
    } else {
        for (int i = 0; i < PQntuples(r); i++) {
            const char *v[] = {PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
                               PQgetvalue(r, i, 3), PQgetvalue(r, i, 4)};
            gw_metric_set(amount, v, column(r, i, 5));
            gw_metric_set(spent, v, column(r, i, 6));
        }
        rc = gw_metric_render(amount, out);
        if (rc == GW_OK)
            rc = gw_metric_render(spent, out);
    }
    gw_metrics_free(reg);
    PQclear(r);
    return rc;
}

/* How long the limits' gauges are served from the last read: a scrape
 * every few seconds from several Prometheus replicas costs one query. */
#define LIMITS_CACHE_US (5 * INT64_C(1000000))

int cp_metrics_render(const struct cp_ctx *ctx, struct gw_buf *out, int business)
{
    struct cp_metrics *m = metrics;
    if (!m)
        return GW_OK;
    collect(m, ctx);
    int rc = gw_metrics_render_ex(m->reg, out, business);
    if (rc != GW_OK || !business || !ctx->db)
        return rc;
    int64_t now = gw_now_us();
    if (m->db_ok && (!m->limits_at_us || now - m->limits_at_us >= LIMITS_CACHE_US)) {
        gw_buf_reset(&m->limits_text);
        if (render_limits(ctx->db, &m->limits_text) == GW_OK)
            m->limits_at_us = now;
    }
    /* With the database away, none: absent gauges say "unknown" better
     * than stale ones (llmgw_cp_postgres_up says why). */
    if (m->db_ok && m->limits_at_us && now - m->limits_at_us < LIMITS_CACHE_US &&
        m->limits_text.len)
        rc = gw_buf_append(out, m->limits_text.data, m->limits_text.len);
    return rc;
}

void cp_metrics_lease(const char *result)
{
    if (!metrics)
        return;
    const char *v[] = {result};
    gw_metric_inc(metrics->lease_grants, v, 1);
}

void cp_metrics_ledger_cost(const char *team, const char *route, const char *currency,
                            uint64_t picodollars)
{
    if (!metrics)
        return;
    const char *v[] = {team, route, currency};
    gw_metric_inc(metrics->ledger_cost, v, picodollars);
}

static const char *method_label(const char *method)
{
    static const char *const known[] = {"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"};
    for (size_t i = 0; method && i < N(known); i++)
        if (strcmp(method, known[i]) == 0)
            return known[i];
    return "other";
}

void cp_metrics_admin_request(const char *resource, const char *method, int status, double seconds)
{
    if (!metrics)
        return;
    char st[16];
    snprintf(st, sizeof(st), "%d", status);
    const char *v[] = {resource ? resource : "", method_label(method), st};
    gw_metric_inc(metrics->admin_requests, v, 1);
    const char *rv[] = {resource ? resource : ""};
    if (seconds >= 0)
        gw_metric_observe(metrics->admin_duration, rv, seconds);
}

void cp_metrics_build(const char *result, double seconds)
{
    if (!metrics)
        return;
    const char *v[] = {result};
    gw_metric_inc(metrics->builds, v, 1);
    if (seconds >= 0)
        gw_metric_observe(metrics->build_duration, NULL, seconds);
}

void cp_metrics_snapshot_current(void)
{
    if (metrics)
        atomic_store(&metrics->last_current_ms, gw_wall_ms());
}

void cp_metrics_audit_rows(unsigned n)
{
    if (metrics)
        gw_metric_inc(metrics->audit_rows, NULL, n);
}

void cp_metrics_fleet_state(const char *provider, const char *model, int state)
{
    if (!metrics)
        return;
    const char *v[] = {provider, model};
    gw_metric_set(metrics->fleet_state, v, state);
}

void cp_metrics_fleet_replicas(size_t n)
{
    if (metrics)
        gw_metric_set(metrics->fleet_replicas, NULL, (double)n);
}

void cp_metrics_otel(struct gw_otel *o)
{
    if (!metrics || !o)
        return;
    gw_otel_metrics(metrics->reg, o);
    metrics->push_spans_dropped = gw_metrics_counter(
        metrics->reg, "llmgw_cp_push_spans_dropped_total",
        "Snapshot pushes traced without a span: the table of pushes waiting for their data "
        "plane's Ack was full.",
        NULL);
}

void cp_metrics_push_spans_dropped(unsigned n)
{
    if (metrics)
        gw_metric_inc(metrics->push_spans_dropped, NULL, n);
}
