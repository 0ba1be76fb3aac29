/*
 * libcurl multi_socket API on libevent, after curl's multi-event example:
 * curl tells us which sockets to watch (socket callback) and when to call
 * back (timer callback); libevent tells curl which socket is ready. The
 * timer callback only arms a timer: calling socket_action from inside it
 * would re-enter curl.
 *
 * One loop may run several multi handles (shards). libcurl 7.88 walks its
 * whole connection cache more than once per transfer: looking for an idle
 * connection to the host (every busy one is tested on the way), and at each
 * transfer's removal. With thousands of open streams those walks cost more
 * than the streams (docs/BENCHMARKS.md). A shard holds at most
 * SHARD_TRANSFERS transfers; a new transfer goes to the first shard with
 * room, so at low load every transfer shares one cache (and its idle
 * connections), and the walks stay bounded however many streams are open.
 * A shard other than the first that has had no transfer for REAP_MS is
 * closed, with the idle connections it keeps: after a burst, the load
 * returns to the first shard, and nothing else would ever look at them.
 */
#include "gw_curlev.h"

#include <event2/event.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "gw_error.h"
#include "gw_time.h"

#define SHARD_TRANSFERS 256
#define MAX_SHARDS 64
#define REAP_MS 5000

struct gw_curlev;

struct shard {
    struct gw_curlev *m;
    CURLM *multi;
    struct event *timer;
    size_t running;
    int64_t empty_since; /* gw_now_us() when its last transfer ended; 0: busy, or the first */
};

struct transfer {
    gw_curlev_done_cb cb;
    void *arg;
    CURL *easy;
    struct shard *sh;
    struct transfer *prev, *next;
};

struct gw_curlev {
    struct event_base *base;
    struct shard *shards[MAX_SHARDS];
    size_t nshards;
    struct event *reap;         /* closes shards empty for REAP_MS */
    struct transfer *transfers; /* running, for gw_curlev_free */
    size_t running;
    CURL *idle[GW_CURLEV_IDLE_EASY]; /* reset handles, reused */
    size_t nidle;
};

static void unlink_transfer(struct gw_curlev *m, struct transfer *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else
        m->transfers = t->next;
    if (t->next)
        t->next->prev = t->prev;
    m->running--;
    struct shard *sh = t->sh;
    if (--sh->running == 0 && sh != m->shards[0]) {
        sh->empty_since = gw_now_us();
        if (!evtimer_pending(m->reap, NULL)) {
            struct timeval tv = {REAP_MS / 1000, (REAP_MS % 1000) * 1000};
            evtimer_add(m->reap, &tv);
        }
    }
}

static void check_done(struct shard *sh)
{
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(sh->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        CURL *easy = msg->easy_handle;
        CURLcode result = msg->data.result;
        struct transfer *t = NULL;
        curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
        curl_multi_remove_handle(sh->multi, easy);
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        if (t) {
            unlink_transfer(sh->m, t);
            gw_curlev_done_cb cb = t->cb;
            void *arg = t->arg;
            free(t);
            cb(easy, result, arg);
        }
    }
}

static void on_socket_ready(evutil_socket_t fd, short what, void *arg)
{
    struct shard *sh = arg;
    int action =
        ((what & EV_READ) ? CURL_CSELECT_IN : 0) | ((what & EV_WRITE) ? CURL_CSELECT_OUT : 0);
    int still;
    curl_multi_socket_action(sh->multi, fd, action, &still);
    check_done(sh);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct shard *sh = arg;
    int still;
    curl_multi_socket_action(sh->multi, CURL_SOCKET_TIMEOUT, 0, &still);
    check_done(sh);
}

static int socket_cb(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp)
{
    (void)easy;
    struct shard *sh = userp;
    struct event *ev = socketp;
    if (what == CURL_POLL_REMOVE) {
        if (ev) {
            event_free(ev);
            curl_multi_assign(sh->multi, s, NULL);
        }
        return 0;
    }
    short kind = EV_PERSIST | ((what & CURL_POLL_IN) ? EV_READ : 0) |
                 ((what & CURL_POLL_OUT) ? EV_WRITE : 0);
    if (ev) {
        event_del(ev);
        event_assign(ev, sh->m->base, s, kind, on_socket_ready, sh);
    } else {
        ev = event_new(sh->m->base, s, kind, on_socket_ready, sh);
        if (!ev)
            return -1;
        curl_multi_assign(sh->multi, s, ev);
    }
    event_add(ev, NULL);
    return 0;
}

static int timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
    (void)multi;
    struct shard *sh = userp;
    if (timeout_ms < 0) {
        evtimer_del(sh->timer);
        return 0;
    }
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    evtimer_add(sh->timer, &tv);
    return 0;
}

static void shard_free(struct shard *sh)
{
    if (sh->multi)
        curl_multi_cleanup(sh->multi);
    if (sh->timer)
        event_free(sh->timer);
    free(sh);
}

static struct shard *shard_new(struct gw_curlev *m)
{
    struct shard *sh = calloc(1, sizeof(*sh));
    if (!sh)
        return NULL;
    sh->m = m;
    sh->multi = curl_multi_init();
    sh->timer = evtimer_new(m->base, on_timeout, sh);
    if (!sh->multi || !sh->timer) {
        shard_free(sh);
        return NULL;
    }
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETFUNCTION, socket_cb);
    curl_multi_setopt(sh->multi, CURLMOPT_SOCKETDATA, sh);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERFUNCTION, timer_cb);
    curl_multi_setopt(sh->multi, CURLMOPT_TIMERDATA, sh);
    /* The cache is not trimmed by count short of the open-file limit: past
     * its size (idle and busy connections together) libcurl walks it at
     * each transfer's end to close the oldest idle one, a keep-alive
     * connection the next transfer would have reused (a cap of 512 per
     * shard doubled the first-content p99 of 9,000 slow streams). Idle
     * connections close at curl's maximum age (CURLOPT_MAXAGE_CONN, 118 s),
     * when the server closes them, or with their shard (on_reap). */
    struct rlimit rl = {0, 0};
    long cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
                       rl.rlim_cur > 1024 && rl.rlim_cur < (rlim_t)LONG_MAX
                   ? (long)rl.rlim_cur
                   : 1024L;
    curl_multi_setopt(sh->multi, CURLMOPT_MAXCONNECTS, cap);
    return sh;
}

/* Closes the shards past the first that have been empty for REAP_MS
 * (compacting the list: transfers point at their shard, not its place). */
static void on_reap(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_curlev *m = arg;
    int64_t now = gw_now_us(), next = 0;
    size_t k = 1;
    for (size_t i = 1; i < m->nshards; i++) {
        struct shard *sh = m->shards[i];
        int64_t due = sh->empty_since + (int64_t)REAP_MS * 1000;
        if (sh->running == 0 && sh->empty_since && due <= now) {
            shard_free(sh);
            continue;
        }
        if (sh->running == 0 && sh->empty_since && (!next || due < next))
            next = due;
        m->shards[k++] = sh;
    }
    m->nshards = k;
    if (next) {
        int64_t us = next - now;
        struct timeval tv = {(time_t)(us / 1000000), (suseconds_t)(us % 1000000)};
        evtimer_add(m->reap, &tv);
    }
}

struct gw_curlev *gw_curlev_new(struct event_base *base)
{
    struct gw_curlev *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    m->base = base;
    m->reap = evtimer_new(base, on_reap, m);
    m->shards[0] = m->reap ? shard_new(m) : NULL;
    if (!m->shards[0]) {
        if (m->reap)
            event_free(m->reap);
        free(m);
        return NULL;
    }
    m->nshards = 1;
    return m;
}

void gw_curlev_free(struct gw_curlev *m)
{
    if (!m)
        return;
    while (m->transfers)
        gw_curlev_remove(m, m->transfers->easy);
    for (size_t i = 0; i < m->nshards; i++)
        shard_free(m->shards[i]);
    if (m->reap)
        event_free(m->reap);
    while (m->nidle > 0)
        curl_easy_cleanup(m->idle[--m->nidle]);
    free(m);
}

/* The first shard with room (a new one when none has), else the least
 * busy. */
static struct shard *pick_shard(struct gw_curlev *m)
{
    struct shard *least = m->shards[0];
    for (size_t i = 0; i < m->nshards; i++) {
        if (m->shards[i]->running < SHARD_TRANSFERS)
            return m->shards[i];
        if (m->shards[i]->running < least->running)
            least = m->shards[i];
    }
    if (m->nshards < MAX_SHARDS) {
        struct shard *sh = shard_new(m);
        if (sh) {
            m->shards[m->nshards++] = sh;
            return sh;
        }
    }
    return least;
}

int gw_curlev_add(struct gw_curlev *m, CURL *easy, gw_curlev_done_cb cb, void *arg)
{
    struct transfer *t = malloc(sizeof(*t));
    if (!t)
        return GW_ENOMEM;
    t->cb = cb;
    t->arg = arg;
    t->easy = easy;
    t->sh = pick_shard(m);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, t);
    if (curl_multi_add_handle(t->sh->multi, easy) != CURLM_OK) {
        curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
        free(t);
        return GW_EINVAL;
    }
    t->prev = NULL;
    t->next = m->transfers;
    if (m->transfers)
        m->transfers->prev = t;
    m->transfers = t;
    m->running++;
    t->sh->running++;
    t->sh->empty_since = 0;
    return GW_OK;
}

void gw_curlev_remove(struct gw_curlev *m, CURL *easy)
{
    struct transfer *t = NULL;
    curl_easy_getinfo(easy, CURLINFO_PRIVATE, (char **)&t);
    if (!t)
        return;
    curl_multi_remove_handle(t->sh->multi, easy);
    curl_easy_setopt(easy, CURLOPT_PRIVATE, NULL);
    unlink_transfer(m, t);
    free(t);
}

size_t gw_curlev_running(const struct gw_curlev *m)
{
    return m->running;
}

CURL *gw_curlev_easy_get(struct gw_curlev *m)
{
    return m->nidle > 0 ? m->idle[--m->nidle] : curl_easy_init();
}

void gw_curlev_easy_put(struct gw_curlev *m, CURL *easy)
{
    if (m->nidle < GW_CURLEV_IDLE_EASY) {
        curl_easy_reset(easy);
        m->idle[m->nidle++] = easy;
    } else {
        curl_easy_cleanup(easy);
    }
}
