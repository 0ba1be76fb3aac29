/*
 * cp_jobs: the singleton jobs, the work exactly one control-plane replica
 * (the leader, cp_etcd.h) does for the whole fleet. The list is the table
 * in cp_jobs.c: a name (also the metrics label), an interval, a retry
 * delay after a failure, and a function run on the main loop.
 *
 *   ledger_partitions  hourly: the ledger's partitions for this month and
 *                      the next exist (llmgw_ledger_partition, migration 3),
 *                      so no month ever starts without one.
 */
#ifndef CP_JOBS_H
#define CP_JOBS_H

struct cp_etcd;
struct cp_db;

/* Adds every job of the table to e. db: the main loop's connection (the
 * admin API's), which the jobs use between admin requests. 0 or a GW_E
 * code. */
int cp_jobs_register(struct cp_etcd *e, struct cp_db *db) __attribute__((warn_unused_result));

#endif
