#include "cp_jobs.h"

#include <stdio.h>

#include "cp_db.h"
#include "cp_etcd.h"
#include "gw_error.h"

/* The current month's partition normally exists (made a month ago as "the
 * next"); asking for it too costs one lookup and covers a fleet that was
 * down across a month's start. */
static int ledger_partitions(void *arg, char *err, size_t errlen)
{
    struct cp_db *db = arg;
    struct cp_db_err e;
    if (cp_db_check(db, &e) != GW_OK ||
        cp_db_cmd(db,
                  "SELECT llmgw_ledger_partition(now()), "
                  "llmgw_ledger_partition(now() + interval '1 month')",
                  0, NULL, &e) != GW_OK) {
        snprintf(err, errlen, "%s%s%s", e.sqlstate, e.sqlstate[0] ? ": " : "", e.message);
        return GW_EIO;
    }
    return GW_OK;
}

static const struct {
    const char *name;
    long interval_ms, retry_ms;
    cp_etcd_job_fn fn;
} jobs[] = {
    {"ledger_partitions", 3600 * 1000L, 60 * 1000L, ledger_partitions},
};

int cp_jobs_register(struct cp_etcd *e, struct cp_db *db)
{
    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        int rc =
            cp_etcd_job_add(e, jobs[i].name, jobs[i].interval_ms, jobs[i].retry_ms, jobs[i].fn, db);
        if (rc != GW_OK)
            return rc;
    }
    return GW_OK;
}
