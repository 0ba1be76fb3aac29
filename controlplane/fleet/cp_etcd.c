#include "cp_etcd.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cp_metrics.h"
#include "gw_error.h"
#include "gw_etcd.h"
#include "gw_log.h"
#include "gw_time.h"

#define MAX_WATCHES 16
/* Blob sets are read this often: the fleet view's blobs cross from one
 * control plane to another within about this long. */
#define POLL_MS 250
/* A follower tries for the key this often: a dead leader's key is taken
 * within this of etcd deleting it (one small txn per follower). */
#define FOLLOWER_ELECT_MS 250
#define LEADER_KEY CP_ETCD_PREFIX "leader"

/* What this replica published: written to etcd while gen != written. A
 * withdrawn entry stays (deleted = 1) until its key is deleted in etcd. */
struct entry {
    char kind[CP_ETCD_KIND_MAX];
    char name[CP_ETCD_ID_MAX];
    char *data;
    size_t len;
    uint64_t gen, written;
    int deleted;
};

struct watch {
    char kind[CP_ETCD_KIND_MAX];
    cp_etcd_blobs_cb cb;
    void *arg;
    struct cp_etcd_blob *set; /* the last range read from etcd */
    size_t n;
    int changed; /* the main loop has not delivered the set yet */
};

struct job {
    char name[32];
    long interval_ms, retry_ms;
    cp_etcd_job_fn fn;
    void *arg;
    struct event *timer;
    struct cp_etcd *e;
    int64_t runs, failures, last_run_ms;
    int last_ok;
    char last_error[200];
};

struct cp_etcd {
    struct event_base *base;
    struct event *notify_ev; /* the thread (or a publish) wakes the main loop */
    char id[CP_ETCD_ID_MAX];
    int ttl_s;   /* --etcd-lease-ttl-s: the bound on a dead leader's replacement */
    int lease_s; /* the etcd lease itself: ttl_s less the sweep and poll slack */
    long ka_ms, elect_ms, retry_ms;
    struct gw_etcd *client; /* NULL: no etcd; else the thread's alone */
    pthread_t thread;
    int thread_started;

    pthread_mutex_t lock; /* everything below, up to "main loop only" */
    pthread_cond_t cond;
    int stopping, wake;
    int up; /* etcd answered the last call */
    int leader;
    char leader_id[CP_ETCD_ID_MAX];
    int64_t leader_since_ms, last_ok_ms, last_error_at_ms;
    char last_error[320];
    struct entry *entries;
    size_t nentries, cap;
    uint64_t gen;
    struct watch watches[MAX_WATCHES];
    size_t nwatches;

    /* main loop only */
    int ml_leader; /* what the jobs and the callback were last told (-1: nothing yet) */
    void (*on_leader)(void *arg, int leader);
    void *on_leader_arg;
    struct job **jobs;
    size_t njobs;
};

int cp_etcd_name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < CP_ETCD_ID_MAX &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") == n;
}

static int kind_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n < CP_ETCD_KIND_MAX && strcmp(s, "leader") != 0 &&
           strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_-") == n;
}

static int64_t mono_ms(void)
{
    return gw_now_us() / 1000;
}

/* ---------------------------------------------------------------------- */
/* State shared with the main loop (called with the lock held) */

static void notify(struct cp_etcd *e)
{
    event_active(e->notify_ev, 0, 0);
}

static struct watch *find_watch(struct cp_etcd *e, const char *kind)
{
    for (size_t i = 0; i < e->nwatches; i++)
        if (strcmp(e->watches[i].kind, kind) == 0)
            return &e->watches[i];
    return NULL;
}

static void set_leader(struct cp_etcd *e, int self, const char *leader_id)
{
    if (self == e->leader && strcmp(leader_id, e->leader_id) == 0)
        return;
    if (self != e->leader)
        e->leader_since_ms = gw_wall_ms();
    e->leader = self;
    snprintf(e->leader_id, sizeof(e->leader_id), "%s", leader_id);
    gw_logf(GW_LOG_INFO,
            self           ? "leadership: this replica leads"
            : leader_id[0] ? "leadership: another replica leads"
                           : "leadership: not the leader (leader unknown)",
            "{s:s,s:s?}", "replica_id", e->id, "leader", leader_id[0] ? leader_id : NULL);
    notify(e);
}

static void reachable(struct cp_etcd *e, const char *endpoint)
{
    pthread_mutex_lock(&e->lock);
    if (!e->up)
        gw_logf(GW_LOG_INFO, "etcd reachable", "{s:s}", "endpoint", endpoint ? endpoint : "");
    e->up = 1;
    e->last_ok_ms = gw_wall_ms();
    pthread_mutex_unlock(&e->lock);
}

/* etcd failed a call: down, and no longer the leader (at once: another
 * replica may take over once the lease expires, and two leaders must never
 * overlap). */
static void unreachable(struct cp_etcd *e, const char *what, const struct gw_etcd_err *err)
{
    char msg[300];
    gw_etcd_strerror(err, msg, sizeof(msg));
    pthread_mutex_lock(&e->lock);
    if (e->up || strcmp(e->last_error, msg) != 0)
        gw_logf(GW_LOG_WARN, "etcd failed: serving on with the local view", "{s:s,s:s}", "call",
                what, "error", msg);
    e->up = 0;
    snprintf(e->last_error, sizeof(e->last_error), "%s: %s", what, msg);
    e->last_error_at_ms = gw_wall_ms();
    set_leader(e, 0, "");
    pthread_mutex_unlock(&e->lock);
}

static void step_down(struct cp_etcd *e)
{
    pthread_mutex_lock(&e->lock);
    set_leader(e, 0, "");
    pthread_mutex_unlock(&e->lock);
}

/* ---------------------------------------------------------------------- */
/* The thread */

static void blob_set_free(struct cp_etcd_blob *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(b[i].data);
    free(b);
}

void cp_etcd_blobs_free(struct cp_etcd_blob *b, size_t n)
{
    blob_set_free(b, n);
}

static int blob_cmp(const void *a, const void *b)
{
    return strcmp(((const struct cp_etcd_blob *)a)->name, ((const struct cp_etcd_blob *)b)->name);
}

static int sets_equal(const struct cp_etcd_blob *a, size_t na, const struct cp_etcd_blob *b,
                      size_t nb)
{
    if (na != nb)
        return 0;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) || a[i].len != b[i].len ||
            memcmp(a[i].data, b[i].data, a[i].len))
            return 0;
    return 1;
}

/* Marks every entry as not yet written: a new lease, or etcd back. */
static void reregister(struct cp_etcd *e)
{
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->nentries; i++)
        e->entries[i].written = 0;
    pthread_mutex_unlock(&e->lock);
}

static void entry_remove(struct cp_etcd *e, size_t i)
{
    free(e->entries[i].data);
    e->entries[i] = e->entries[--e->nentries];
}

/* Writes the entries not yet written: 1 when all went, 0 after a failure
 * (*lease_lost when etcd no longer knows the lease). */
static int write_entries(struct cp_etcd *e, int64_t lease, int *lease_lost)
{
    for (;;) {
        struct entry w = {0};
        pthread_mutex_lock(&e->lock);
        for (size_t i = 0; i < e->nentries; i++)
            if (e->entries[i].gen != e->entries[i].written) {
                w = e->entries[i];
                w.data = w.deleted ? NULL : malloc(w.len + 1);
                if (w.data)
                    memcpy(w.data, e->entries[i].data, w.len + 1);
                break;
            }
        pthread_mutex_unlock(&e->lock);
        if (!w.gen)
            return 1;
        if (!w.deleted && !w.data)
            return 0; /* no memory: next round */
        char key[CP_ETCD_ID_MAX + CP_ETCD_KIND_MAX + 16];
        snprintf(key, sizeof(key), CP_ETCD_PREFIX "%s/%s", w.kind, w.name);
        struct gw_etcd_err err;
        int rc = w.deleted ? gw_etcd_delete(e->client, key, 0, NULL, &err)
                           : gw_etcd_put(e->client, key, w.data, w.len, lease, &err);
        free(w.data);
        if (rc != GW_OK) {
            if (err.kind == GW_ETCD_REFUSED && err.code == 5)
                *lease_lost = 1;
            else
                unreachable(e, w.deleted ? "delete" : "put", &err);
            return 0;
        }
        pthread_mutex_lock(&e->lock);
        for (size_t i = 0; i < e->nentries; i++) {
            struct entry *x = &e->entries[i];
            if (strcmp(x->kind, w.kind) || strcmp(x->name, w.name))
                continue;
            if (x->gen == w.gen && x->deleted)
                entry_remove(e, i);
            else if (x->gen == w.gen)
                x->written = w.gen;
            break;
        }
        pthread_mutex_unlock(&e->lock);
    }
}

static int elect(struct cp_etcd *e, int64_t lease, int *lease_lost)
{
    struct gw_etcd_txn t;
    struct gw_etcd_err err;
    int rc = gw_etcd_create_or_get(e->client, LEADER_KEY, e->id, strlen(e->id), lease, &t, &err);
    if (rc != GW_OK) {
        if (err.kind == GW_ETCD_REFUSED && err.code == 5)
            *lease_lost = 1;
        else
            unreachable(e, "election", &err);
        return 0;
    }
    int self = t.succeeded || (t.found && t.kv.lease == lease && strcmp(t.kv.value, e->id) == 0);
    const char *who = self ? e->id : t.found && cp_etcd_name_ok(t.kv.value) ? t.kv.value : "";
    pthread_mutex_lock(&e->lock);
    set_leader(e, self, who);
    pthread_mutex_unlock(&e->lock);
    gw_etcd_txn_free(&t);
    return 1;
}

/* Reads every watched kind; a set that changed goes to the main loop. */
static int poll_kinds(struct cp_etcd *e)
{
    for (size_t k = 0;; k++) {
        char kind[CP_ETCD_KIND_MAX];
        pthread_mutex_lock(&e->lock);
        int more = k < e->nwatches;
        if (more)
            memcpy(kind, e->watches[k].kind, sizeof(kind));
        pthread_mutex_unlock(&e->lock);
        if (!more)
            return 1;
        char prefix[CP_ETCD_KIND_MAX + 16];
        int plen = snprintf(prefix, sizeof(prefix), CP_ETCD_PREFIX "%s/", kind);
        struct gw_etcd_range r;
        struct gw_etcd_err err;
        if (gw_etcd_get(e->client, prefix, 1, &r, &err) != GW_OK) {
            unreachable(e, "range", &err);
            return 0;
        }
        struct cp_etcd_blob *set = calloc(r.n ? r.n : 1, sizeof(*set));
        size_t n = 0;
        for (size_t i = 0; set && i < r.n; i++) {
            const char *name = r.kvs[i].key + plen;
            if (!cp_etcd_name_ok(name))
                continue; /* not ours to read */
            snprintf(set[n].name, sizeof(set[n].name), "%s", name);
            set[n].data = r.kvs[i].value; /* taken */
            set[n].len = r.kvs[i].value_len;
            set[n].mod_revision = r.kvs[i].mod_revision;
            r.kvs[i].value = NULL;
            n++;
        }
        gw_etcd_range_free(&r);
        if (!set)
            return 0;
        qsort(set, n, sizeof(*set), blob_cmp);
        pthread_mutex_lock(&e->lock);
        struct watch *w = find_watch(e, kind);
        if (w && !sets_equal(w->set, w->n, set, n)) {
            struct cp_etcd_blob *old = w->set;
            size_t on = w->n;
            w->set = set;
            w->n = n;
            set = old;
            n = on;
            w->changed = 1;
            notify(e);
        }
        pthread_mutex_unlock(&e->lock);
        blob_set_free(set, n);
    }
}

/* Waits until at (monotonic ms), a wake or a stop. */
static void wait_until(struct cp_etcd *e, int64_t at)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    if (at <= now)
        return;
    int64_t ns = (int64_t)ts.tv_nsec + (at - now) * 1000000;
    ts.tv_sec += (time_t)(ns / 1000000000);
    ts.tv_nsec = (long)(ns % 1000000000);
    pthread_mutex_lock(&e->lock);
    while (!e->stopping && !e->wake)
        if (pthread_cond_timedwait(&e->cond, &e->lock, &ts) != 0)
            break;
    e->wake = 0;
    pthread_mutex_unlock(&e->lock);
}

static void *thread_main(void *arg)
{
    struct cp_etcd *e = arg;
    int64_t lease = 0, next_ka = 0, next_elect = 0, next_poll = 0;
    for (;;) {
        pthread_mutex_lock(&e->lock);
        int stop = e->stopping;
        pthread_mutex_unlock(&e->lock);
        if (stop)
            break;
        int64_t now = mono_ms();
        struct gw_etcd_err err;
        int ok = 1, lost = 0;
        if (!lease) {
            if (gw_etcd_lease_grant(e->client, e->lease_s, &lease, &err) != GW_OK) {
                lease = 0;
                unreachable(e, "lease grant", &err);
                ok = 0;
            } else {
                reachable(e, err.endpoint);
                reregister(e);
                next_ka = now + e->ka_ms;
                next_elect = 0;
            }
        } else if (now >= next_ka) {
            int64_t ttl = 0;
            if (gw_etcd_lease_keepalive(e->client, lease, &ttl, &err) != GW_OK) {
                unreachable(e, "lease keepalive", &err);
                reregister(e); /* etcd may come back without our keys */
                next_ka = now + e->retry_ms;
                ok = 0;
            } else if (ttl == 0) {
                gw_logf(GW_LOG_WARN, "etcd lease expired: registering again", "{s:s}", "replica_id",
                        e->id);
                lost = 1;
            } else {
                reachable(e, err.endpoint);
                next_ka = now + e->ka_ms;
            }
        }
        if (ok && !lost && lease)
            ok = write_entries(e, lease, &lost);
        if (ok && !lost && lease && now >= next_elect) {
            ok = elect(e, lease, &lost);
            next_elect = now + (cp_etcd_is_leader(e) ? e->elect_ms : FOLLOWER_ELECT_MS);
        }
        if (ok && !lost && now >= next_poll) {
            ok = poll_kinds(e);
            next_poll = now + POLL_MS;
        }
        if (lost) {
            lease = 0;
            step_down(e);
            continue;
        }
        if (!ok) {
            wait_until(e, mono_ms() + e->retry_ms);
            continue;
        }
        int64_t at = next_ka < next_poll ? next_ka : next_poll;
        wait_until(e, at < next_elect ? at : next_elect);
    }
    if (lease) { /* resign: the keys go at once, and a successor takes over */
        struct gw_etcd_err err;
        if (gw_etcd_lease_revoke(e->client, lease, &err) != GW_OK) {
            char msg[300];
            gw_logf(GW_LOG_WARN, "cannot revoke the etcd lease (it expires on its own)", "{s:s}",
                    "error", gw_etcd_strerror(&err, msg, sizeof(msg)));
        }
    }
    return NULL;
}

/* ---------------------------------------------------------------------- */
/* The main loop: leadership, jobs, watchers */

static void job_arm(struct job *j, long ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    event_add(j->timer, &tv);
}

static void on_job(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct job *j = arg;
    if (!cp_etcd_is_leader(j->e))
        return; /* re-armed when this replica leads again */
    char msg[200] = "";
    int64_t t0 = gw_now_us();
    int rc = j->fn(j->arg, msg, sizeof(msg));
    j->runs++;
    j->last_run_ms = gw_wall_ms();
    j->last_ok = rc == GW_OK;
    snprintf(j->last_error, sizeof(j->last_error), "%s", rc == GW_OK ? "" : msg);
    if (rc != GW_OK)
        j->failures++;
    cp_metrics_job(j->name, rc == GW_OK);
    gw_logf(rc == GW_OK ? GW_LOG_INFO : GW_LOG_WARN,
            rc == GW_OK ? "singleton job done" : "singleton job failed", "{s:s,s:f,s:s?}", "job",
            j->name, "seconds", (double)(gw_now_us() - t0) / 1e6, "error",
            rc == GW_OK ? NULL : msg);
    job_arm(j, rc == GW_OK ? j->interval_ms : j->retry_ms);
}

static void on_notify(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_etcd *e = arg;
    size_t changed[MAX_WATCHES], nc = 0;
    pthread_mutex_lock(&e->lock);
    int leader = e->leader;
    for (size_t i = 0; i < e->nwatches; i++)
        if (e->watches[i].changed) {
            e->watches[i].changed = 0;
            changed[nc++] = i;
        }
    pthread_mutex_unlock(&e->lock);
    if (leader != e->ml_leader) {
        e->ml_leader = leader;
        for (size_t i = 0; i < e->njobs; i++) {
            if (leader)
                job_arm(e->jobs[i], 0);
            else
                event_del(e->jobs[i]->timer);
        }
        if (e->on_leader)
            e->on_leader(e->on_leader_arg, leader);
    }
    for (size_t i = 0; i < nc; i++) {
        struct watch *w = &e->watches[changed[i]]; /* watches never move */
        struct cp_etcd_blob *b;
        size_t n;
        if (w->cb && cp_etcd_blobs(e, w->kind, &b, &n) == GW_OK) {
            w->cb(w->arg, w->kind, b, n);
            cp_etcd_blobs_free(b, n);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* The API */

struct cp_etcd *cp_etcd_new(struct event_base *base, const struct cp_etcd_opts *o, char *err,
                            size_t errlen)
{
    if (!cp_etcd_name_ok(o->replica_id)) {
        snprintf(err, errlen, "the replica id must be 1 to %d characters of A-Z a-z 0-9 . _ : -",
                 CP_ETCD_ID_MAX - 1);
        return NULL;
    }
    int ttl = o->lease_ttl_s > 0 ? o->lease_ttl_s : 5;
    if (ttl < 3) {
        snprintf(err, errlen, "the etcd lease TTL must be at least 3 s");
        return NULL;
    }
    struct cp_etcd *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    e->base = base;
    e->ml_leader = -1;
    snprintf(e->id, sizeof(e->id), "%s", o->replica_id);
    /* The TTL an operator sets is the promise: a dead leader is replaced
     * within it. A lease outlives its holder by up to its own length, then
     * etcd's expiry sweep (every 0.5 s) and a follower's next try (every
     * 250 ms) come on top; so the lease is 2 s shorter (etcd's minimum is
     * 2 s, hence the flag's 3). */
    e->ttl_s = ttl;
    e->lease_s = ttl - 2 > 2 ? ttl - 2 : 2;
    e->ka_ms = e->lease_s * 1000L / 3;
    e->elect_ms = e->ka_ms < 1000 ? e->ka_ms : 1000;
    e->retry_ms = e->elect_ms;
    e->notify_ev = event_new(base, -1, 0, on_notify, e);
    if (!e->notify_ev) {
        snprintf(err, errlen, "out of memory");
        cp_etcd_free(e);
        return NULL;
    }
    if (o->endpoints && *o->endpoints) {
        /* A call may take a fifth of the TTL per endpoint: a renewal that
         * times out still leaves time for the next before the lease ends. */
        long t = ttl * 1000L / 5;
        e->client = gw_etcd_new(o->endpoints, t < 300 ? 300 : t > 2000 ? 2000 : t, err, errlen);
        int tls_ok =
            e->client && gw_etcd_set_tls(e->client, o->tls_ca, o->tls_cert, o->tls_key) == GW_OK;
        if (e->client && !tls_ok)
            snprintf(err, errlen,
                     "etcd: a client certificate needs its key, and a key its "
                     "certificate");
        if (!tls_ok) {
            cp_etcd_free(e);
            return NULL;
        }
        snprintf(e->last_error, sizeof(e->last_error), "not contacted yet");
    } else {
        e->leader = 1; /* of itself */
        snprintf(e->leader_id, sizeof(e->leader_id), "%s", e->id);
        e->leader_since_ms = gw_wall_ms();
    }
    const char *m = o->member ? o->member : "{}";
    if (cp_etcd_watch(e, "cp", NULL, NULL) != GW_OK ||
        cp_etcd_publish(e, "cp", NULL, m, strlen(m)) != GW_OK) {
        snprintf(err, errlen, "out of memory");
        cp_etcd_free(e);
        return NULL;
    }
    notify(e); /* the first leadership state, jobs, watchers */
    if (e->client) {
        if (pthread_create(&e->thread, NULL, thread_main, e) != 0) {
            snprintf(err, errlen, "cannot start the etcd thread");
            cp_etcd_free(e);
            return NULL;
        }
        e->thread_started = 1;
    }
    return e;
}

void cp_etcd_free(struct cp_etcd *e)
{
    if (!e)
        return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->lock);
        e->stopping = 1;
        pthread_cond_signal(&e->cond);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    for (size_t i = 0; i < e->njobs; i++) {
        event_free(e->jobs[i]->timer);
        free(e->jobs[i]);
    }
    free(e->jobs);
    if (e->notify_ev)
        event_free(e->notify_ev);
    for (size_t i = 0; i < e->nentries; i++)
        free(e->entries[i].data);
    free(e->entries);
    for (size_t i = 0; i < e->nwatches; i++)
        blob_set_free(e->watches[i].set, e->watches[i].n);
    gw_etcd_free(e->client);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

int cp_etcd_is_leader(struct cp_etcd *e)
{
    pthread_mutex_lock(&e->lock);
    int l = e->leader;
    pthread_mutex_unlock(&e->lock);
    return l;
}

int cp_etcd_up(struct cp_etcd *e)
{
    if (!e->client)
        return -1;
    pthread_mutex_lock(&e->lock);
    int up = e->up;
    pthread_mutex_unlock(&e->lock);
    return up;
}

const char *cp_etcd_leader(struct cp_etcd *e, char *buf, size_t len)
{
    pthread_mutex_lock(&e->lock);
    snprintf(buf, len, "%s", e->leader_id);
    pthread_mutex_unlock(&e->lock);
    return buf;
}

const char *cp_etcd_replica_id(const struct cp_etcd *e)
{
    return e->id;
}

void cp_etcd_on_leader(struct cp_etcd *e, void (*cb)(void *arg, int leader), void *arg)
{
    e->on_leader = cb;
    e->on_leader_arg = arg;
    if (cb && e->ml_leader >= 0) /* else the first notice tells it */
        cb(arg, e->ml_leader);
}

int cp_etcd_job_add(struct cp_etcd *e, const char *name, long interval_ms, long retry_ms,
                    cp_etcd_job_fn fn, void *arg)
{
    if (!name || !*name || strlen(name) >= sizeof(((struct job *)0)->name) || interval_ms <= 0 ||
        !fn)
        return GW_EINVAL;
    for (size_t i = 0; i < e->njobs; i++)
        if (strcmp(e->jobs[i]->name, name) == 0)
            return GW_EINVAL;
    struct job **js = realloc(e->jobs, (e->njobs + 1) * sizeof(*js));
    if (!js)
        return GW_ENOMEM;
    e->jobs = js;
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return GW_ENOMEM;
    snprintf(j->name, sizeof(j->name), "%s", name);
    j->interval_ms = interval_ms;
    j->retry_ms = retry_ms > 0 ? retry_ms : interval_ms;
    j->fn = fn;
    j->arg = arg;
    j->e = e;
    j->timer = event_new(e->base, -1, 0, on_job, j);
    if (!j->timer) {
        free(j);
        return GW_ENOMEM;
    }
    js[e->njobs++] = j;
    cp_metrics_job(j->name, -1);
    if (e->ml_leader == 1)
        job_arm(j, 0);
    return GW_OK;
}

int cp_etcd_publish(struct cp_etcd *e, const char *kind, const char *name, const void *data,
                    size_t len)
{
    if (!name)
        name = e->id;
    if (!kind_ok(kind) || !cp_etcd_name_ok(name))
        return GW_EINVAL;
    char *copy = malloc(len + 1);
    if (!copy)
        return GW_ENOMEM;
    memcpy(copy, data, len);
    copy[len] = '\0';
    pthread_mutex_lock(&e->lock);
    struct entry *x = NULL;
    for (size_t i = 0; i < e->nentries && !x; i++)
        if (!strcmp(e->entries[i].kind, kind) && !strcmp(e->entries[i].name, name))
            x = &e->entries[i];
    if (!x) {
        if (e->nentries == e->cap) {
            size_t cap = e->cap ? e->cap * 2 : 8;
            struct entry *n = realloc(e->entries, cap * sizeof(*n));
            if (!n) {
                pthread_mutex_unlock(&e->lock);
                free(copy);
                return GW_ENOMEM;
            }
            e->entries = n;
            e->cap = cap;
        }
        x = &e->entries[e->nentries++];
        memset(x, 0, sizeof(*x));
        snprintf(x->kind, sizeof(x->kind), "%s", kind);
        snprintf(x->name, sizeof(x->name), "%s", name);
    }
    free(x->data);
    x->data = copy;
    x->len = len;
    x->deleted = 0;
    x->gen = ++e->gen;
    struct watch *w = find_watch(e, kind);
    if (w)
        w->changed = 1;
    e->wake = 1;
    pthread_cond_signal(&e->cond);
    notify(e);
    pthread_mutex_unlock(&e->lock);
    return GW_OK;
}

int cp_etcd_unpublish(struct cp_etcd *e, const char *kind, const char *name)
{
    if (!name)
        name = e->id;
    if (!kind_ok(kind) || !cp_etcd_name_ok(name))
        return GW_EINVAL;
    int rc = GW_ENOTFOUND;
    pthread_mutex_lock(&e->lock);
    for (size_t i = 0; i < e->nentries; i++) {
        struct entry *x = &e->entries[i];
        if (strcmp(x->kind, kind) || strcmp(x->name, name) || x->deleted)
            continue;
        if (!e->client) {
            entry_remove(e, i);
        } else {
            x->deleted = 1;
            x->gen = ++e->gen;
        }
        struct watch *w = find_watch(e, kind);
        if (w)
            w->changed = 1;
        e->wake = 1;
        pthread_cond_signal(&e->cond);
        notify(e);
        rc = GW_OK;
        break;
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int cp_etcd_watch(struct cp_etcd *e, const char *kind, cp_etcd_blobs_cb cb, void *arg)
{
    if (!kind_ok(kind))
        return GW_EINVAL;
    pthread_mutex_lock(&e->lock);
    int rc = GW_OK;
    if (find_watch(e, kind) || e->nwatches == MAX_WATCHES) {
        rc = GW_EINVAL;
    } else {
        struct watch *w = &e->watches[e->nwatches++];
        memset(w, 0, sizeof(*w));
        snprintf(w->kind, sizeof(w->kind), "%s", kind);
        w->cb = cb;
        w->arg = arg;
        w->changed = 1; /* the first delivery */
        e->wake = 1;
        pthread_cond_signal(&e->cond);
        notify(e);
    }
    pthread_mutex_unlock(&e->lock);
    return rc;
}

static int blob_copy(struct cp_etcd_blob *dst, const char *name, const char *data, size_t len,
                     int self, int64_t rev)
{
    memset(dst, 0, sizeof(*dst));
    snprintf(dst->name, sizeof(dst->name), "%s", name);
    dst->data = malloc(len + 1);
    if (!dst->data)
        return GW_ENOMEM;
    memcpy(dst->data, data, len);
    dst->data[len] = '\0';
    dst->len = len;
    dst->self = self;
    dst->mod_revision = rev;
    return GW_OK;
}

int cp_etcd_blobs(struct cp_etcd *e, const char *kind, struct cp_etcd_blob **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&e->lock);
    struct watch *w = kind_ok(kind) ? find_watch(e, kind) : NULL;
    if (!w) {
        pthread_mutex_unlock(&e->lock);
        return GW_EINVAL;
    }
    size_t max = w->n + e->nentries, k = 0;
    struct cp_etcd_blob *b = calloc(max ? max : 1, sizeof(*b));
    int rc = b ? GW_OK : GW_ENOMEM;
    /* This replica's own entries (current, also while etcd is down), then
     * the others' from the last read (ours there are older or withdrawn). */
    for (size_t i = 0; rc == GW_OK && i < e->nentries; i++) {
        const struct entry *x = &e->entries[i];
        if (strcmp(x->kind, kind) == 0 && !x->deleted &&
            (rc = blob_copy(&b[k], x->name, x->data, x->len, 1, 0)) == GW_OK)
            k++;
    }
    for (size_t i = 0; rc == GW_OK && i < w->n; i++) {
        int ours = 0;
        for (size_t j = 0; j < e->nentries && !ours; j++)
            ours = !strcmp(e->entries[j].kind, kind) && !strcmp(e->entries[j].name, w->set[i].name);
        if (!ours && (rc = blob_copy(&b[k], w->set[i].name, w->set[i].data, w->set[i].len, 0,
                                     w->set[i].mod_revision)) == GW_OK)
            k++;
    }
    pthread_mutex_unlock(&e->lock);
    if (rc != GW_OK) {
        blob_set_free(b, k);
        return rc;
    }
    qsort(b, k, sizeof(*b), blob_cmp);
    *out = b;
    *n = k;
    return GW_OK;
}

json_t *cp_etcd_status(struct cp_etcd *e)
{
    json_t *eps = json_array();
    for (size_t i = 0; e->client && i < gw_etcd_endpoint_count(e->client); i++)
        json_array_append_new(eps, json_string(gw_etcd_endpoint(e->client, i)));
    pthread_mutex_lock(&e->lock);
    const char *state = !e->client ? "off" : e->up ? "up" : "down";
    json_t *leader =
        json_pack("{s:b,s:s?,s:I}", "self", e->leader, "id", e->leader_id[0] ? e->leader_id : NULL,
                  "since_ms", (json_int_t)e->leader_since_ms);
    json_t *etcd = json_pack("{s:b,s:s,s:o,s:i,s:I,s:s?,s:I}", "configured", e->client != NULL,
                             "state", state, "endpoints", eps, "lease_ttl_s", e->ttl_s,
                             "last_ok_ms", (json_int_t)e->last_ok_ms, "last_error",
                             e->client && !e->up && e->last_error[0] ? e->last_error : NULL,
                             "last_error_at_ms", (json_int_t)e->last_error_at_ms);
    pthread_mutex_unlock(&e->lock);
    json_t *members = json_array(), *jobs = json_array();
    struct cp_etcd_blob *b;
    size_t n;
    if (cp_etcd_blobs(e, "cp", &b, &n) == GW_OK) {
        for (size_t i = 0; i < n; i++) {
            json_t *m = json_loadb(b[i].data, b[i].len, 0, NULL);
            if (!json_is_object(m)) {
                json_decref(m);
                m = json_object();
            }
            json_object_set_new(m, "id", json_string(b[i].name));
            json_array_append_new(members, m);
        }
        cp_etcd_blobs_free(b, n);
    }
    for (size_t i = 0; i < e->njobs; i++) {
        const struct job *j = e->jobs[i];
        json_array_append_new(
            jobs,
            json_pack("{s:s,s:I,s:I,s:I,s:I,s:b,s:s?}", "name", j->name, "interval_ms",
                      (json_int_t)j->interval_ms, "runs", (json_int_t)j->runs, "failures",
                      (json_int_t)j->failures, "last_run_ms", (json_int_t)j->last_run_ms, "last_ok",
                      j->last_ok, "last_error", j->last_error[0] ? j->last_error : NULL));
    }
    return json_pack("{s:s,s:o,s:o,s:o,s:o}", "replica_id", e->id, "leader", leader, "etcd", etcd,
                     "members", members, "jobs", jobs);
}
