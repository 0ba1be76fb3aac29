/*
 * The process-wide fleet view (dp_fleet.h): one immutable sorted array of
 * targets behind a mutex, plus two atomics that let the router skip the
 * mutex entirely while nothing is down.
 */
#include "dp_fleet.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_outcomes.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_target.h"

/* A probe slot not given back within this long is taken back (a lost
 * verdict cannot stop this replica from probing for good). */
#define PROBE_LEASE_US (60 * INT64_C(1000000))
#define MIN_TTL_MS 1000
#define MAX_TTL_MS 60000

struct ftarget {
    char *provider, *model; /* provider in its own block, model after it */
    enum dp_fleet_state state;
    int probe;
    unsigned probe_out;
    int64_t probe_at_us;
    int scored;
    struct dp_fleet_score score;
    char reason[160];
};

struct view {
    uint64_t version;
    int64_t expires_us;
    size_t n;
    struct ftarget *t; /* sorted by (provider, model) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct view *cur;
static int live_down;           /* atomic: cur holds a down target */
static int live_scored;         /* atomic: cur scores a target */
static int64_t live_until_us;   /* atomic: cur's expiry */
static int gauges_set;          /* the gauges show cur (not reset for staleness) */
static dp_fleet_gauge_fn gauge; /* set at start (dp_fleet_set_gauge) */

void dp_fleet_set_gauge(dp_fleet_gauge_fn fn)
{
    pthread_mutex_lock(&lock);
    gauge = fn;
    pthread_mutex_unlock(&lock);
}

const char *dp_fleet_state_name(enum dp_fleet_state s)
{
    switch (s) {
    case DP_FLEET_DEGRADED:
        return "degraded";
    case DP_FLEET_DOWN:
        return "down";
    default:
        return "healthy";
    }
}

/* An ftarget's names as a target key. */
static struct gw_target_key key_of(const struct ftarget *t)
{
    return (struct gw_target_key){t->provider, t->model};
}

static int cmp_target(const void *a, const void *b)
{
    struct gw_target_key x = key_of(a), y = key_of(b);
    return gw_target_cmp(&x, &y);
}

static struct ftarget *find(struct view *v, const char *provider, const char *model)
{
    if (!v)
        return NULL;
    const struct gw_target_key k = {provider, model};
    size_t lo = 0, hi = v->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        struct gw_target_key m = key_of(&v->t[mid]);
        int c = gw_target_cmp(&k, &m);
        if (c == 0)
            return &v->t[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

static void view_free(struct view *v)
{
    if (!v)
        return;
    for (size_t i = 0; i < v->n; i++)
        free(v->t[i].provider);
    free(v->t);
    free(v);
}

static enum dp_fleet_state state_of(Llmgw__V1__FleetState s)
{
    return s == LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN       ? DP_FLEET_DOWN
           : s == LLMGW__V1__FLEET_STATE__FLEET_STATE_DEGRADED ? DP_FLEET_DEGRADED
                                                               : DP_FLEET_HEALTHY;
}

static struct view *view_copy(const Llmgw__V1__FleetView *m, int64_t now_us)
{
    struct view *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    v->version = m->version;
    int64_t ttl = m->ttl_ms < MIN_TTL_MS   ? MIN_TTL_MS
                  : m->ttl_ms > MAX_TTL_MS ? MAX_TTL_MS
                                           : m->ttl_ms;
    v->expires_us = now_us + ttl * 1000;
    v->t = calloc(m->n_targets ? m->n_targets : 1, sizeof(*v->t));
    if (!v->t) {
        free(v);
        return NULL;
    }
    for (size_t i = 0; i < m->n_targets; i++) {
        const Llmgw__V1__FleetTarget *s = m->targets[i];
        if (!s->provider || !s->model || !*s->provider || !*s->model)
            continue;
        struct ftarget *t = &v->t[v->n];
        char *block = malloc(gw_target_key_size(s->provider, s->model));
        if (!block) {
            view_free(v);
            return NULL;
        }
        struct gw_target_key k;
        gw_target_key_copy(&k, block, s->provider, s->model);
        t->provider = block;
        t->model = block + (k.model - k.provider);
        t->state = state_of(s->state);
        t->probe = s->probe;
        if (s->n_reasons && s->reasons[0])
            snprintf(t->reason, sizeof(t->reason), "%s", s->reasons[0]);
        const Llmgw__V1__FleetScore *sc = s->score;
        if (sc && sc->success_permil <= 1000 && sc->ttfb_mean_us <= INT64_MAX &&
            sc->ttfc_mean_us <= INT64_MAX) {
            t->scored = 1;
            t->score = (struct dp_fleet_score){
                .attempts = sc->attempts,
                .success_permil = sc->success_permil,
                .ttfb_samples = sc->ttfb_samples,
                .ttfb_mean_us = (int64_t)sc->ttfb_mean_us,
                .ttfc_samples = sc->ttfc_samples,
                .ttfc_mean_us = (int64_t)sc->ttfc_mean_us,
            };
        }
        v->n++;
    }
    qsort(v->t, v->n, sizeof(*v->t), cmp_target);
    /* A duplicate (a control plane's bug) keeps the first: no target is
     * ambiguous for find(). */
    size_t w = 0;
    for (size_t i = 0; i < v->n; i++) {
        if (w && cmp_target(&v->t[w - 1], &v->t[i]) == 0) {
            free(v->t[i].provider);
            continue;
        }
        v->t[w++] = v->t[i];
    }
    v->n = w;
    return v;
}

/* The gauges for what the view says; targets that left it read healthy. */
static void set_gauges(const struct view *old, const struct view *v)
{
    if (!gauge)
        return;
    for (size_t i = 0; old && i < old->n; i++)
        if (!find((struct view *)v, old->t[i].provider, old->t[i].model))
            gauge(old->t[i].provider, old->t[i].model, DP_FLEET_HEALTHY);
    for (size_t i = 0; v && i < v->n; i++)
        gauge(v->t[i].provider, v->t[i].model, v->t[i].state);
}

/* One log line per change of a target's state or probe: from (NULL: not
 * in the view) to (NULL: left it). */
static void log_change(const struct ftarget *from, const struct ftarget *to)
{
    enum dp_fleet_state a = from ? from->state : DP_FLEET_HEALTHY;
    enum dp_fleet_state b = to ? to->state : DP_FLEET_HEALTHY;
    int pa = from && from->probe, pb = to && to->probe;
    if (a == b && pa == pb)
        return;
    const struct ftarget *t = to ? to : from;
    gw_logf(b == DP_FLEET_DOWN && a != DP_FLEET_DOWN ? GW_LOG_WARN : GW_LOG_INFO,
            "fleet view: target state", "{s:s,s:s,s:s,s:s,s:b,s:s}", "provider", t->provider,
            "model", t->model, "from", dp_fleet_state_name(a), "to", dp_fleet_state_name(b),
            "probe", pb, "reason", to ? to->reason : "");
}

int dp_fleet_apply(const Llmgw__V1__FleetView *m, int64_t now_us)
{
    struct view *v = m ? view_copy(m, now_us) : NULL;
    if (m && !v)
        return GW_ENOMEM;
    int down = 0, scored = 0;
    pthread_mutex_lock(&lock);
    struct view *old = cur;
    for (size_t i = 0; v && i < v->n; i++) {
        struct ftarget *t = &v->t[i];
        down |= t->state == DP_FLEET_DOWN;
        scored |= t->scored;
        struct ftarget *o = find(old, t->provider, t->model);
        if (o && o->probe && t->probe) {
            t->probe_out = o->probe_out;
            t->probe_at_us = o->probe_at_us;
        }
        log_change(o, t);
    }
    for (size_t i = 0; old && i < old->n; i++)
        if (!find(v, old->t[i].provider, old->t[i].model))
            log_change(&old->t[i], NULL);
    cur = v;
    __atomic_store_n(&live_until_us, v ? v->expires_us : 0, __ATOMIC_RELEASE);
    __atomic_store_n(&live_down, down, __ATOMIC_RELEASE);
    __atomic_store_n(&live_scored, scored, __ATOMIC_RELEASE);
    set_gauges(gauges_set ? old : NULL, v);
    gauges_set = v != NULL;
    pthread_mutex_unlock(&lock);
    view_free(old);
    return GW_OK;
}

/* Whether the mutex is worth taking at all: a live view with a down target. */
static int maybe_down(int64_t now_us)
{
    return __atomic_load_n(&live_down, __ATOMIC_ACQUIRE) &&
           now_us < __atomic_load_n(&live_until_us, __ATOMIC_ACQUIRE);
}

/* The target when the live view says it is down (lock held). */
static struct ftarget *down_target(const char *provider, const char *model, int64_t now_us)
{
    if (!cur || now_us >= cur->expires_us)
        return NULL;
    struct ftarget *t = find(cur, provider, model);
    return t && t->state == DP_FLEET_DOWN ? t : NULL;
}

static int probe_free(const struct ftarget *t, int64_t now_us)
{
    return t->probe && (!t->probe_out || now_us - t->probe_at_us >= PROBE_LEASE_US);
}

int dp_fleet_skip(const char *provider, const char *model, int64_t now_us, char *reason, size_t len)
{
    if (!provider || !model || !maybe_down(now_us))
        return 0;
    int skip = 0;
    pthread_mutex_lock(&lock);
    struct ftarget *t = down_target(provider, model, now_us);
    if (t && !probe_free(t, now_us)) {
        skip = 1;
        if (reason && len)
            snprintf(reason, len, "%s", t->reason);
    }
    pthread_mutex_unlock(&lock);
    if (skip)
        dp_outcomes_skip(provider, model);
    return skip;
}

int dp_fleet_score(const char *provider, const char *model, int64_t now_us,
                   struct dp_fleet_score *out)
{
    if (!provider || !model || !__atomic_load_n(&live_scored, __ATOMIC_ACQUIRE) ||
        now_us >= __atomic_load_n(&live_until_us, __ATOMIC_ACQUIRE))
        return 0;
    int found = 0;
    pthread_mutex_lock(&lock);
    const struct ftarget *t = cur && now_us < cur->expires_us ? find(cur, provider, model) : NULL;
    if (t && t->scored) {
        *out = t->score;
        found = 1;
    }
    pthread_mutex_unlock(&lock);
    return found;
}

enum dp_admit dp_fleet_admit(const char *provider, const char *model, int64_t now_us)
{
    if (!provider || !model || !maybe_down(now_us))
        return DP_ADMIT_YES;
    enum dp_admit r = DP_ADMIT_YES;
    pthread_mutex_lock(&lock);
    struct ftarget *t = down_target(provider, model, now_us);
    if (t) {
        r = DP_ADMIT_NO;
        if (probe_free(t, now_us)) {
            t->probe_out = 1;
            t->probe_at_us = now_us;
            r = DP_ADMIT_PROBE;
        }
    }
    pthread_mutex_unlock(&lock);
    if (r == DP_ADMIT_PROBE)
        gw_logf(GW_LOG_INFO, "fleet probe admitted", "{s:s,s:s}", "provider", provider, "model",
                model);
    return r;
}

void dp_fleet_unadmit(const char *provider, const char *model)
{
    if (!provider || !model)
        return;
    pthread_mutex_lock(&lock);
    struct ftarget *t = find(cur, provider, model);
    if (t)
        t->probe_out = 0;
    pthread_mutex_unlock(&lock);
}

void dp_fleet_record(const struct dp_outcome *o, int probe)
{
    if (!o)
        return;
    if (probe)
        dp_fleet_unadmit(o->provider, o->model);
    dp_outcomes_record(o, probe);
}

uint64_t dp_fleet_version(int64_t now_us)
{
    pthread_mutex_lock(&lock);
    uint64_t v = cur && now_us < cur->expires_us ? cur->version : 0;
    pthread_mutex_unlock(&lock);
    return v;
}

void dp_fleet_tick(int64_t now_us)
{
    pthread_mutex_lock(&lock);
    if (cur && gauges_set && now_us >= cur->expires_us) {
        set_gauges(cur, NULL);
        gauges_set = 0;
        gw_logf(GW_LOG_WARN, "fleet view expired: the local breakers alone decide until a new one",
                "{s:I}", "version", (json_int_t)cur->version);
    }
    pthread_mutex_unlock(&lock);
}
