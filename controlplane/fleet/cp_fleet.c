/*
 * The fleet view's glue (cp_fleet.h): Report streams in, views out,
 * blobs both ways, one tick a second.
 */
#include "cp_fleet.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cp_etcd.h"
#include "cp_fleetview.h"
#include "cp_grpc.h"
#include "cp_metrics.h"
#include "dp_fleet.h"
#include "gw_error.h"
#include "gw_log.h"
#include "gw_time.h"

#define TICK_MS 1000
#define REFRESH_MS 2000    /* a view goes out at least this often */
#define PUBLISH_GAP_MS 100 /* news goes to etcd at once, but at most this often */
#define MAX_STREAMS 4096
#define KIND_OUTCOMES "outcomes"
#define KIND_DP "dp"

/* A data plane's Report stream here, and what it was last sent. */
struct fstream {
    struct fstream *next;
    char replica[CP_FLEETVIEW_ID_MAX];
    uint64_t stream_id;
    uint64_t sent_version; /* 0: nothing sent yet */
    int64_t sent_ms;
};

struct cp_fleet {
    struct cp_grpc *grpc;
    struct cp_etcd *etcd;
    struct cp_fleetview *fv;
    struct event *tick, *pub;
    int64_t published_ms;
    struct fstream *streams;
    unsigned nstreams;
    int stopped; /* the daemon is stopping: reports are ignored */
};

static void set_gauge(void *arg, const char *provider, const char *model, int state)
{
    (void)arg;
    cp_metrics_fleet_state(provider, model, state);
}

/* Sends the view to every stream that needs it: a new version, a new
 * stream, or REFRESH_MS since the last (force: all). A stream that ended
 * is forgotten. */
static void push(struct cp_fleet *f, int64_t now_ms, int force)
{
    uint64_t ver = cp_fleetview_version(f->fv);
    for (struct fstream **pp = &f->streams, *st; (st = *pp);) {
        if (!force && st->sent_version == ver && now_ms - st->sent_ms < REFRESH_MS) {
            pp = &st->next;
            continue;
        }
        uint8_t *view;
        size_t len;
        int rc = cp_fleetview_pack(f->fv, st->replica, now_ms, &view, &len);
        if (rc == GW_OK)
            rc = cp_grpc_report_view(f->grpc, st->stream_id, view, len);
        free(view);
        if (rc == GW_ECLOSED) {
            *pp = st->next;
            f->nstreams--;
            free(st);
            continue;
        }
        if (rc == GW_OK) {
            st->sent_version = ver;
            st->sent_ms = now_ms;
        }
        pp = &st->next;
    }
}

static void compute(struct cp_fleet *f, int64_t now_ms)
{
    char leader[CP_ETCD_ID_MAX];
    int changed =
        cp_fleetview_compute(f->fv, now_ms, cp_etcd_is_leader(f->etcd),
                             cp_etcd_leader(f->etcd, leader, sizeof(leader)), cp_etcd_up(f->etcd));
    if (changed)
        gw_logf(GW_LOG_INFO, "fleet view changed", "{s:I}", "version",
                (json_int_t)cp_fleetview_version(f->fv));
    cp_fleetview_each(f->fv, set_gauge, NULL);
    cp_metrics_fleet_replicas(cp_fleetview_replicas(f->fv, now_ms));
    push(f, now_ms, 0);
}

/* This replica's data planes, from the gRPC server's table. */
static void refresh_members(struct cp_fleet *f, int64_t now_ms)
{
    json_t *r = cp_grpc_replicas(f->grpc);
    json_t *a = json_object_get(r, "replicas");
    size_t n = json_array_size(a), k = 0;
    struct cp_fleetview_member *m = calloc(n ? n : 1, sizeof(*m));
    if (m) {
        for (size_t i = 0; i < n; i++) {
            json_t *x = json_array_get(a, i);
            if (!json_is_true(json_object_get(x, "connected")))
                continue;
            m[k].id = json_string_value(json_object_get(x, "replica_id"));
            m[k].snapshot_version = json_integer_value(json_object_get(x, "acked_version"));
            m[k].last_seen_ms = now_ms; /* its Watch is open now */
            if (m[k].id)
                k++;
        }
        cp_fleetview_set_members(f->fv, m, k, now_ms);
    }
    free(m);
    json_decref(r);
}

static void publish(struct cp_fleet *f, int64_t now_ms)
{
    if (cp_etcd_up(f->etcd) < 0)
        return; /* no etcd: nobody to tell */
    f->published_ms = now_ms;
    event_del(f->pub);
    char *o = cp_fleetview_outcomes_blob(f->fv, now_ms);
    char *d = cp_fleetview_members_blob(f->fv, now_ms);
    if (!o || !d || cp_etcd_publish(f->etcd, KIND_OUTCOMES, NULL, o, strlen(o)) != GW_OK ||
        cp_etcd_publish(f->etcd, KIND_DP, NULL, d, strlen(d)) != GW_OK)
        gw_log(GW_LOG_WARN, "fleet view: cannot publish this replica's blobs", NULL);
    free(o);
    free(d);
}

static void on_pub(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    publish(arg, gw_wall_ms());
}

/* News (a breaker opened, a probe ended) goes to the other control planes
 * now rather than at the next tick. */
static void publish_soon(struct cp_fleet *f, int64_t now_ms)
{
    if (cp_etcd_up(f->etcd) < 0 || evtimer_pending(f->pub, NULL))
        return;
    int64_t d = f->published_ms + PUBLISH_GAP_MS - now_ms;
    if (d < 0)
        d = 0;
    struct timeval tv = {(time_t)(d / 1000), (suseconds_t)(d % 1000) * 1000};
    evtimer_add(f->pub, &tv);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct cp_fleet *f = arg;
    int64_t now = gw_wall_ms();
    refresh_members(f, now);
    compute(f, now);
    publish(f, now);
}

/* Another replica's blobs of a kind changed: the whole set. */
static void on_blobs(void *arg, const char *kind, const struct cp_etcd_blob *b, size_t n)
{
    struct cp_fleet *f = arg;
    if (f->stopped)
        return;
    int64_t now = gw_wall_ms();
    cp_fleetview_remote_begin(f->fv, kind);
    for (size_t i = 0; i < n; i++)
        if (!b[i].self)
            (void)cp_fleetview_remote(f->fv, kind, b[i].name, b[i].data, b[i].len, now);
    cp_fleetview_remote_end(f->fv, kind);
    compute(f, now);
}

void cp_fleet_report(struct cp_fleet *f, uint64_t stream_id, const char *replica,
                     const Llmgw__V1__OutcomeSummary *s)
{
    if (!f || f->stopped || !replica || !*replica)
        return;
    int64_t now = gw_wall_ms();
    int news = cp_fleetview_add(f->fv, replica, s, now);
    struct fstream *st = f->streams;
    while (st && strcmp(st->replica, replica) != 0)
        st = st->next;
    if (!st && f->nstreams < MAX_STREAMS && (st = calloc(1, sizeof(*st)))) {
        snprintf(st->replica, sizeof(st->replica), "%s", replica);
        st->next = f->streams;
        f->streams = st;
        f->nstreams++;
    }
    if (st && st->stream_id != stream_id) {
        /* A new stream (a reconnect): it gets the view at once. */
        st->stream_id = stream_id;
        st->sent_version = 0;
        st->sent_ms = 0;
        news = 1;
    }
    if (news) {
        refresh_members(f, now);
        compute(f, now);
        publish_soon(f, now);
    }
}

int cp_fleet_apply_local(struct cp_fleet *f)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    if (!f || cp_fleetview_pack(f->fv, CP_FLEET_PREVIEW_REPLICA, gw_wall_ms(), &buf, &len) != GW_OK)
        return GW_ENOMEM;
    Llmgw__V1__FleetView *v = llmgw__v1__fleet_view__unpack(NULL, len, buf);
    free(buf);
    int rc = v ? dp_fleet_apply(v, gw_now_us()) : GW_ENOMEM;
    if (v)
        llmgw__v1__fleet_view__free_unpacked(v, NULL);
    return rc;
}

json_t *cp_fleet_health(struct cp_fleet *f)
{
    return f ? cp_fleetview_health(f->fv, gw_wall_ms()) : NULL;
}

struct cp_fleet *cp_fleet_new(struct event_base *base, struct cp_grpc *grpc, struct cp_etcd *etcd,
                              char *err, size_t errlen)
{
    struct cp_fleet *f = calloc(1, sizeof(*f));
    if (!f || !(f->fv = cp_fleetview_new(cp_etcd_replica_id(etcd), NULL)) ||
        !(f->tick = event_new(base, -1, EV_PERSIST, on_tick, f)) ||
        !(f->pub = evtimer_new(base, on_pub, f))) {
        snprintf(err, errlen, "out of memory");
        cp_fleet_free(f);
        return NULL;
    }
    f->grpc = grpc;
    f->etcd = etcd;
    if (cp_etcd_up(etcd) >= 0 && (cp_etcd_watch(etcd, KIND_OUTCOMES, on_blobs, f) != GW_OK ||
                                  cp_etcd_watch(etcd, KIND_DP, on_blobs, f) != GW_OK)) {
        snprintf(err, errlen, "cannot watch the fleet view's blobs");
        cp_fleet_free(f);
        return NULL;
    }
    struct timeval tv = {TICK_MS / 1000, (TICK_MS % 1000) * 1000};
    event_add(f->tick, &tv);
    return f;
}

void cp_fleet_stop(struct cp_fleet *f)
{
    if (!f)
        return;
    f->stopped = 1;
    if (f->tick)
        event_del(f->tick);
    if (f->pub)
        event_del(f->pub);
}

void cp_fleet_free(struct cp_fleet *f)
{
    if (!f)
        return;
    if (f->tick)
        event_free(f->tick);
    if (f->pub)
        event_free(f->pub);
    for (struct fstream *st = f->streams, *next; st; st = next) {
        next = st->next;
        free(st);
    }
    cp_fleetview_free(f->fv);
    free(f);
}
