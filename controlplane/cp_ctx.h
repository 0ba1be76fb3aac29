/*
 * cp_ctx: the control plane's process-wide state, in one place. main.c
 * creates it once (on its stack, for the life of the daemon), fills it as
 * it starts each part, and passes it to the modules that need one of them:
 * the admin API (and through it /v1/admin/health, /v1/admin/snapshot,
 * /v1/admin/plan, /readyz and the /metrics scrape), the singleton jobs and
 * the ledger writer's lease handlers. No module keeps a copy of a piece in
 * a file static, so what a module reads is visible in its signature.
 *
 * Lifetime and threads: every member is set on the main thread before the
 * event loop runs and is not changed while it runs; a member may be NULL
 * (a part that is not started, or in a unit test). The objects pointed to
 * keep their own rules (cp_snapshot, cp_etcd and cp_ledger may be called
 * from the loop; cp_fleet is the loop's only). After the loop ends main.c
 * frees them; nothing reads the context then.
 *
 * The one piece that stays a module's own: cp_metrics' registry
 * (cp_metrics.h), which every thread updates and which is needed before the
 * rest exists.
 */
#ifndef CP_CTX_H
#define CP_CTX_H

struct event_base;
struct cp_db;
struct cp_snapshot;
struct cp_grpc;
struct cp_ledger;
struct cp_etcd;
struct cp_fleet;
struct cp_jobs;
struct cp_trace;
struct gw_otel;

struct cp_ctx {
    struct event_base *base;
    /* The main loop's connection: the admin API, the /metrics scrape and
     * the singleton jobs, each between the others. */
    struct cp_db *db;
    struct cp_snapshot *builder; /* the snapshot builder (its own thread) */
    struct cp_grpc *grpc;        /* the Watch/Report server */
    struct cp_ledger *ledger;    /* the ledger writer (its own thread) */
    /* This replica's lease, membership and leadership in etcd (cp_etcd.h);
     * without --etcd-endpoints it leads itself. */
    struct cp_etcd *membership;
    struct cp_fleet *fleet; /* the fleet health view (cp_fleet.h) */
    struct cp_jobs *jobs;   /* the leader's singleton jobs (cp_jobs.h) */
    /* --catalog-fetch-allow: CP_FETCH_ALLOW_* bits, for every catalog
     * fetch (the admin API's and the catalog_sync job's). */
    unsigned fetch_allow;
    /* --lease-grace-s, in ms: how long past its expiry an unsettled budget
     * lease still counts (cp_leases.h). */
    long long lease_grace_ms;
    /* Tracing (OTEL_* environment): the span exporter (gw_otel.h) and the
     * control plane's spans (cp_trace.h); both NULL when tracing is off. */
    struct gw_otel *otel;
    struct cp_trace *trace;
};

#endif
