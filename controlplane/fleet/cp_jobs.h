/*
 * cp_jobs: the singleton jobs, the work exactly one control-plane replica
 * (the leader, cp_etcd.h) does for the whole fleet. The list is the table
 * in cp_jobs.c: a name (also the metrics label), an interval, a retry
 * delay after a failure, and a function run on the main loop.
 *
 *   ledger_partitions  hourly: the ledger's partitions for this month and
 *                      the next exist (llmgw_ledger_partition, migration 3),
 *                      so no month ever starts without one.
 *   limit_rollover     every 10 s: leases past their expiry (and grace) are
 *                      expired, ended windows and old leases are deleted
 *                      (cp_leases_expire): budget periods roll over.
 *   catalog_sync       with --catalog-sync-url, every
 *                      --catalog-sync-interval-s: the LiteLLM catalog at that
 *                      URL is imported (cp_catalog_import_from), on a thread
 *                      of its own with its own connection, so a slow URL
 *                      never holds the main loop.
 */
#ifndef CP_JOBS_H
#define CP_JOBS_H

struct cp_ctx;
struct cp_jobs;

struct cp_jobs_opts {
    const char *conninfo;         /* for catalog_sync's own connection */
    const char *catalog_sync_url; /* NULL: no catalog_sync */
    long catalog_sync_interval_s;
};

/* Adds every job of the table to ctx->membership (cp_etcd_job_add). The
 * jobs use ctx->db, the main loop's connection (the admin API's), between
 * admin requests, ctx->lease_grace_ms (limit_rollover) and
 * ctx->fetch_allow (catalog_sync); ctx must outlive the jobs, and o's
 * strings too (o itself is copied). NULL when out of memory or when a job
 * could not be added; the jobs added before then stay in ctx->membership
 * and name freed state, so the caller must not run the loop (the daemon
 * exits). */
struct cp_jobs *cp_jobs_new(const struct cp_ctx *ctx, const struct cp_jobs_opts *o)
    __attribute__((warn_unused_result));
/* After the fleet thread is freed (no job runs again): waits for a catalog
 * sync in flight to end, then frees j. NULL: nothing. */
void cp_jobs_free(struct cp_jobs *j);

#endif
