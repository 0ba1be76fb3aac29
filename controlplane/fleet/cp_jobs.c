#include "cp_jobs.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "cp_catalog_import.h"
#include "cp_ctx.h"
#include "cp_db.h"
#include "cp_etcd.h"
#include "cp_leases.h"
#include "gw_error.h"
#include "gw_log.h"

/* The jobs' state: what they read from the daemon's context, and the
 * catalog sync's thread. */
struct cp_jobs {
    const struct cp_ctx *ctx;
    struct cp_jobs_opts o;
    /* The catalog sync runs on a thread of its own (a blocking, bounded
     * fetch and one import transaction on its own connection); the job only
     * starts it, and a sync still running when the next is due is left to
     * finish. */
    pthread_mutex_t sync_mu;
    pthread_t sync_thread;
    int sync_running, sync_started;
};

/* The current month's partition normally exists (made a month ago as "the
 * next"); asking for it too costs one lookup and covers a fleet that was
 * down across a month's start. */
static int ledger_partitions(void *arg, char *err, size_t errlen)
{
    struct cp_jobs *j = arg;
    struct cp_db *db = j->ctx->db;
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

/* Budget periods roll over: expired leases give back what they held, and
 * what ended long ago is deleted. Idempotent, so a takeover that runs it
 * twice does no harm. */
static int limit_rollover(void *arg, char *err, size_t errlen)
{
    struct cp_jobs *j = arg;
    struct cp_db_err e;
    if (cp_db_check(j->ctx->db, &e) != GW_OK) {
        snprintf(err, errlen, "%s", e.message);
        return GW_EIO;
    }
    if (cp_leases_expire(j->ctx->db, j->ctx->lease_grace_ms) < 0) {
        snprintf(err, errlen, "the lease expiry sweep failed (logged)");
        return GW_EIO;
    }
    return GW_OK;
}

static void *sync_run(void *arg)
{
    struct cp_jobs *j = arg;
    const struct cp_jobs_opts *o = &j->o;
    struct cp_db_err e;
    char err[1024] = "";
    json_t *answer = NULL;
    struct cp_db *db = cp_db_connect(o->conninfo, "catalog sync", &e);
    int rc = db ? cp_catalog_import_from(db, NULL, o->catalog_sync_url, j->ctx->fetch_allow,
                                         "catalog-sync", &answer, err, sizeof(err))
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
    pthread_mutex_lock(&j->sync_mu);
    j->sync_running = 0;
    pthread_mutex_unlock(&j->sync_mu);
    return NULL;
}

static int catalog_sync(void *arg, char *err, size_t errlen)
{
    struct cp_jobs *j = arg;
    pthread_mutex_lock(&j->sync_mu);
    int rc = GW_OK;
    if (!j->sync_running) {
        if (j->sync_started)
            pthread_join(j->sync_thread, NULL);
        j->sync_started = j->sync_running = pthread_create(&j->sync_thread, NULL, sync_run, j) == 0;
        if (!j->sync_started) {
            snprintf(err, errlen, "cannot start the sync thread");
            rc = GW_ENOMEM;
        }
    }
    pthread_mutex_unlock(&j->sync_mu);
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

struct cp_jobs *cp_jobs_new(const struct cp_ctx *ctx, const struct cp_jobs_opts *o)
{
    struct cp_jobs *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->ctx = ctx;
    if (o)
        j->o = *o;
    pthread_mutex_init(&j->sync_mu, NULL);
    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        long every = jobs[i].interval_ms;
        if (jobs[i].fn == catalog_sync) {
            if (!j->o.catalog_sync_url)
                continue;
            every = j->o.catalog_sync_interval_s * 1000L;
        }
        if (cp_etcd_job_add(ctx->membership, jobs[i].name, every, jobs[i].retry_ms, jobs[i].fn,
                            j) != GW_OK) {
            cp_jobs_free(j);
            return NULL;
        }
    }
    return j;
}

void cp_jobs_free(struct cp_jobs *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->sync_mu);
    int started = j->sync_started;
    j->sync_started = 0;
    pthread_mutex_unlock(&j->sync_mu);
    if (started)
        pthread_join(j->sync_thread, NULL);
    pthread_mutex_destroy(&j->sync_mu);
    free(j);
}
