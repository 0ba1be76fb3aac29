#include "cp_jobs.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>

#include "cp_catalog_import.h"
#include "cp_db.h"
#include "cp_etcd.h"
#include "cp_leases.h"
#include "gw_error.h"
#include "gw_log.h"

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

struct ctx {
    struct cp_db *db;
    const struct cp_jobs_opts *o;
};
static struct ctx the;

/* Budget periods roll over: expired leases give back what they held, and
 * what ended long ago is deleted. Idempotent, so a takeover that runs it
 * twice does no harm. */
static int limit_rollover(void *arg, char *err, size_t errlen)
{
    struct ctx *c = arg;
    struct cp_db_err e;
    if (cp_db_check(c->db, &e) != GW_OK) {
        snprintf(err, errlen, "%s", e.message);
        return GW_EIO;
    }
    if (cp_leases_expire(c->db) < 0) {
        snprintf(err, errlen, "the lease expiry sweep failed (logged)");
        return GW_EIO;
    }
    return GW_OK;
}

/* The catalog sync runs on a thread of its own (a blocking, bounded fetch
 * and one import transaction on its own connection); the job only starts
 * it, and a sync still running when the next is due is left to finish. */
static pthread_mutex_t sync_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_t sync_thread;
static int sync_running, sync_started;

static void *sync_run(void *arg)
{
    const struct cp_jobs_opts *o = arg;
    struct cp_db_err e;
    char err[1024] = "";
    json_t *answer = NULL;
    struct cp_db *db = cp_db_connect(o->conninfo, "catalog sync", &e);
    int rc = db ? cp_catalog_import_from(db, NULL, o->catalog_sync_url, "catalog-sync", &answer,
                                         err, sizeof(err))
                : GW_EIO;
    if (rc == GW_OK)
        gw_logf(GW_LOG_INFO, "catalog sync: imported", "{s:O?,s:O?,s:O?}", "imported",
                json_object_get(answer, "imported"), "unchanged",
                json_object_get(answer, "unchanged"), "rejected",
                json_object_get(answer, "rejected"));
    else
        gw_logf(GW_LOG_ERROR, "catalog sync failed; nothing was written", "{s:s}", "error",
                db ? err : e.message);
    json_decref(answer);
    if (db)
        cp_db_free(db);
    pthread_mutex_lock(&sync_mu);
    sync_running = 0;
    pthread_mutex_unlock(&sync_mu);
    return NULL;
}

static int catalog_sync(void *arg, char *err, size_t errlen)
{
    struct ctx *c = arg;
    pthread_mutex_lock(&sync_mu);
    int rc = GW_OK;
    if (!sync_running) {
        if (sync_started)
            pthread_join(sync_thread, NULL);
        sync_started = sync_running =
            pthread_create(&sync_thread, NULL, sync_run, (void *)c->o) == 0;
        if (!sync_started) {
            snprintf(err, errlen, "cannot start the sync thread");
            rc = GW_ENOMEM;
        }
    }
    pthread_mutex_unlock(&sync_mu);
    return rc;
}

static const struct {
    const char *name;
    long interval_ms, retry_ms;
    cp_etcd_job_fn fn;
} jobs[] = {
    {"ledger_partitions", 3600 * 1000L, 60 * 1000L, ledger_partitions},
    {"limit_rollover", 10 * 1000L, 10 * 1000L, limit_rollover},
    {"catalog_sync", 0, 60 * 1000L, catalog_sync}, /* interval: the option */
};

int cp_jobs_register(struct cp_etcd *e, struct cp_db *db, const struct cp_jobs_opts *o)
{
    the.db = db;
    the.o = o;
    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        long every = jobs[i].interval_ms;
        void *arg = &the;
        if (jobs[i].fn == ledger_partitions)
            arg = db;
        if (jobs[i].fn == catalog_sync) {
            if (!o || !o->catalog_sync_url)
                continue;
            every = o->catalog_sync_interval_s * 1000L;
        }
        int rc = cp_etcd_job_add(e, jobs[i].name, every, jobs[i].retry_ms, jobs[i].fn, arg);
        if (rc != GW_OK)
            return rc;
    }
    return GW_OK;
}

void cp_jobs_shutdown(void)
{
    pthread_mutex_lock(&sync_mu);
    int started = sync_started;
    sync_started = 0;
    pthread_mutex_unlock(&sync_mu);
    if (started)
        pthread_join(sync_thread, NULL);
}
