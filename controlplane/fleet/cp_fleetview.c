/*
 * The fleet health view's merge and rules (cp_fleetview.h, docs/fleet.md).
 *
 * Data: targets (a small hash), each with its contributions: one per data
 * plane that reported it here (local) and one per data plane another
 * control plane reported it (remote, rebuilt from that replica's blob on
 * every change), each a ring of one-second buckets plus the breaker's
 * latest state and the times of the events the rules look at. Rules run
 * per target over "replica views": the contributions of one data plane
 * merged (it may have moved between control planes inside the window).
 */
#include "cp_fleetview.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "cp_etcd.h"
#include "cp_fleetscore.h"
#include "dp_outcomes.h"
#include "gw_error.h"
#include "gw_hash.h"
#include "gw_target.h"

#define NB DP_OUTCOMES_NBUCKETS
#define HEADS 256
#define MAX_WINDOW 60
#define MAX_REASONS 4
#define REASON_MAX 200
#define MAX_CONTRIBS 256 /* per target, local and remote each */
/* Contributions in all (about 2 KB each with a 10 s window): a fleet of
 * 100 data planes using 160 targets each fits; past it, new ones are
 * dropped (counted in health). */
#define MAX_TOTAL_CONTRIBS 16384
#define MAX_LOCAL_REPS 4096
#define CP_NAME_MAX CP_ETCD_ID_MAX

enum breaker { B_CLOSED, B_HALF_OPEN, B_OPEN };
static const char *const breaker_names[] = {"closed", "half_open", "open"};
enum fstate { S_HEALTHY, S_DEGRADED, S_DOWN };
static const char *const state_names[] = {"healthy", "degraded", "down"};

struct dsum {
    uint64_t count, sum, max;
    uint64_t b[NB];
};

struct bucket {
    int64_t slot; /* wall second; -1: empty */
    uint64_t ok, probe_ok, probe_failed, skipped;
    uint64_t fail[CANON_FAIL_COUNT];
    struct dsum lat, ttfb;
};

/* One data plane's part in one target, as reported to one control plane. */
struct contrib {
    struct contrib *next;
    char id[CP_FLEETVIEW_ID_MAX];
    char via[CP_NAME_MAX]; /* the control plane it reports to */
    struct bucket *win;    /* window_s buckets, by slot % window_s */
    enum breaker breaker;
    int64_t breaker_at_ms; /* when the state was last reported */
    int64_t opened_ms, closed_ms, probe_ok_ms, probe_failed_ms, demand_ms, seen_ms;
};

/* The down latch and the probe (decided by the leader). */
struct latch {
    int down;
    int64_t since_ms, reset_ms;
    char holder[CP_FLEETVIEW_ID_MAX];
    int64_t assigned_ms, hold_until_ms, next_probe_ms, backoff_ms;
    unsigned round;
    char why[REASON_MAX];
};

/* Another control plane's latch for a target, from its blob. */
struct rlatch {
    struct rlatch *next;
    char cp[CP_NAME_MAX];
    int64_t at_ms;
    struct latch l;
};

struct target {
    struct target *next, *hnext;
    uint64_t hash;
    struct gw_target_key tk; /* one malloc'd block, at tk.provider */
    struct contrib *local, *remote;
    unsigned nlocal, nremote;
    struct rlatch *rlatches;
    struct latch latch;
    int local_down; /* a follower's own fresh "down", not (yet) the leader's */
    enum fstate state;
    char reasons[MAX_REASONS][REASON_MAX];
    int nreasons;
    int64_t seen_ms;                  /* newest contribution */
    struct cp_fleetscore *score;      /* this replica's hour of it (NULL: nothing yet) */
    struct cp_fleetscore_sums rscore; /* the other control planes' (their blobs) */
};

/* A data plane: connected here (members), or another replica's (dp blob). */
struct member {
    struct member *next;
    char id[CP_FLEETVIEW_ID_MAX];
    char via[CP_NAME_MAX];
    int64_t snapshot_version, last_seen_ms;
    uint64_t view_version;
    int local;
};

/* Another control plane's outcomes blob: when it was written. */
struct rblob {
    struct rblob *next;
    char cp[CP_NAME_MAX];
    int64_t at_ms;
};

/* A data plane that sent summaries here: the view it applies. */
struct lrep {
    struct lrep *next;
    char id[CP_FLEETVIEW_ID_MAX];
    uint64_t view_version;
    int64_t seen_ms;
};

struct cp_fleetview {
    struct cp_fleetview_cfg cfg;
    char self[CP_NAME_MAX];
    struct target *targets;
    struct target *heads[HEADS];
    unsigned ntargets;
    unsigned ncontribs;        /* local and remote, against MAX_TOTAL_CONTRIBS */
    uint64_t contribs_dropped; /* refused for the cap */
    struct member *members;    /* local ones first in no particular order */
    struct lrep *lreps;
    unsigned nlreps;
    struct rblob *rblobs;
    uint64_t version;
    int64_t computed_ms;
    int mode; /* 0 deciding as leader, 1 following, 2 deciding alone */
    char leader[CP_NAME_MAX];
    int etcd;
};

static const struct cp_fleetview_cfg defaults = {
    .window_s = 10,
    .recent_s = 3,
    .open_horizon_ms = 5000,
    .min_failures = 5,
    .down_pct = 80,
    .degraded_pct = 20,
    .probe_first_ms = 5000,
    .probe_max_ms = 60000,
    .probe_hold_ms = 5000,
    .demand_ms = 60000,
    .member_ttl_ms = 5000,
    .remote_ttl_ms = 15000,
    .leader_fresh_ms = 3500,
    .view_ttl_ms = 5000,
    .max_targets = 1024,
    .report_grace_ms = 1500,
};

static int64_t slot_of(int64_t ms)
{
    return ms >= 0 ? ms / 1000 : 0;
}

static void copy_id(char *dst, size_t n, const char *s)
{
    snprintf(dst, n, "%s", s ? s : "");
}

/* ------------------------------------------------------------ lifecycle */

struct cp_fleetview *cp_fleetview_new(const char *self_id, const struct cp_fleetview_cfg *cfg)
{
    struct cp_fleetview *fv = calloc(1, sizeof(*fv));
    if (!fv)
        return NULL;
    fv->cfg = defaults;
    if (cfg) {
#define TAKE(f)                                                                                    \
    if (cfg->f > 0)                                                                                \
    fv->cfg.f = cfg->f
        TAKE(window_s);
        TAKE(recent_s);
        TAKE(open_horizon_ms);
        TAKE(min_failures);
        TAKE(down_pct);
        TAKE(degraded_pct);
        TAKE(probe_first_ms);
        TAKE(probe_max_ms);
        TAKE(probe_hold_ms);
        TAKE(demand_ms);
        TAKE(member_ttl_ms);
        TAKE(remote_ttl_ms);
        TAKE(leader_fresh_ms);
        TAKE(view_ttl_ms);
        TAKE(max_targets);
        TAKE(report_grace_ms);
#undef TAKE
    }
    if (fv->cfg.window_s > MAX_WINDOW)
        fv->cfg.window_s = MAX_WINDOW;
    if (fv->cfg.recent_s > fv->cfg.window_s)
        fv->cfg.recent_s = fv->cfg.window_s;
    copy_id(fv->self, sizeof(fv->self), self_id);
    fv->etcd = -1;
    return fv;
}

static void contrib_free(struct cp_fleetview *fv, struct contrib *c)
{
    fv->ncontribs--;
    free(c->win);
    free(c);
}

static void contribs_free(struct cp_fleetview *fv, struct contrib *c)
{
    for (struct contrib *next; c; c = next) {
        next = c->next;
        contrib_free(fv, c);
    }
}

static void rlatches_free(struct rlatch *r)
{
    for (struct rlatch *next; r; r = next) {
        next = r->next;
        free(r);
    }
}

static void target_free(struct cp_fleetview *fv, struct target *t)
{
    contribs_free(fv, t->local);
    contribs_free(fv, t->remote);
    rlatches_free(t->rlatches);
    free(t->score);
    free((char *)t->tk.provider);
    free(t);
}

static void rblobs_free(struct rblob *b)
{
    for (struct rblob *next; b; b = next) {
        next = b->next;
        free(b);
    }
}

static void members_free(struct member *m)
{
    for (struct member *next; m; m = next) {
        next = m->next;
        free(m);
    }
}

void cp_fleetview_free(struct cp_fleetview *fv)
{
    if (!fv)
        return;
    for (struct target *t = fv->targets, *next; t; t = next) {
        next = t->next;
        target_free(fv, t);
    }
    members_free(fv->members);
    rblobs_free(fv->rblobs);
    for (struct lrep *r = fv->lreps, *next; r; r = next) {
        next = r->next;
        free(r);
    }
    free(fv);
}

/* -------------------------------------------------------------- targets */

static void target_unlink(struct cp_fleetview *fv, struct target *t);

/* At the cap, a target kept only for its hour of figures (nobody reports
 * it now, no latch) makes room for a new one: the one silent longest.
 * Returns 1 when one went. */
static int evict_one(struct cp_fleetview *fv)
{
    struct target *victim = NULL;
    for (struct target *t = fv->targets; t; t = t->next)
        if (!t->local && !t->remote && !t->latch.down && (!victim || t->seen_ms < victim->seen_ms))
            victim = t;
    if (!victim)
        return 0;
    target_unlink(fv, victim);
    target_free(fv, victim);
    return 1;
}

static struct target *target_find(struct cp_fleetview *fv, const char *provider, const char *model,
                                  int create)
{
    if (!provider || !model || !*provider || !*model)
        return NULL;
    uint64_t h = gw_target_hash(provider, model);
    for (struct target *t = fv->heads[h % HEADS]; t; t = t->hnext)
        if (t->hash == h && gw_target_is(&t->tk, provider, model))
            return t;
    if (!create || (fv->ntargets >= fv->cfg.max_targets && !evict_one(fv)))
        return NULL;
    struct target *t = calloc(1, sizeof(*t));
    char *block = t ? malloc(gw_target_key_size(provider, model)) : NULL;
    if (!block) {
        free(t);
        return NULL;
    }
    gw_target_key_copy(&t->tk, block, provider, model);
    t->hash = h;
    t->hnext = fv->heads[h % HEADS];
    fv->heads[h % HEADS] = t;
    t->next = fv->targets;
    fv->targets = t;
    fv->ntargets++;
    return t;
}

static void target_unlink(struct cp_fleetview *fv, struct target *t)
{
    struct target **pp = &fv->heads[t->hash % HEADS];
    while (*pp != t)
        pp = &(*pp)->hnext;
    *pp = t->hnext;
    for (pp = &fv->targets; *pp != t; pp = &(*pp)->next)
        ;
    *pp = t->next;
    fv->ntargets--;
}

static struct contrib *contrib_new(struct cp_fleetview *fv, const char *id, const char *via)
{
    if (fv->ncontribs >= MAX_TOTAL_CONTRIBS) {
        fv->contribs_dropped++;
        return NULL;
    }
    struct contrib *c = calloc(1, sizeof(*c));
    if (!c || !(c->win = calloc((size_t)fv->cfg.window_s, sizeof(*c->win)))) {
        free(c);
        return NULL;
    }
    fv->ncontribs++;
    for (int i = 0; i < fv->cfg.window_s; i++)
        c->win[i].slot = -1;
    copy_id(c->id, sizeof(c->id), id);
    copy_id(c->via, sizeof(c->via), via);
    return c;
}

/* The bucket for slot, emptied if it held an older second. */
static struct bucket *bucket_at(const struct cp_fleetview *fv, struct contrib *c, int64_t slot)
{
    struct bucket *b = &c->win[slot % fv->cfg.window_s];
    if (b->slot != slot) {
        memset(b, 0, sizeof(*b));
        b->slot = slot;
    }
    return b;
}

static void dsum_merge(struct dsum *d, const struct dsum *s)
{
    d->count += s->count;
    d->sum += s->sum;
    if (s->max > d->max)
        d->max = s->max;
    for (int i = 0; i < NB; i++)
        d->b[i] += s->b[i];
}

static void dsum_from_pb(struct dsum *d, const Llmgw__V1__DurationSummary *m)
{
    if (!m)
        return;
    d->count += m->count;
    d->sum += m->sum_ms;
    if (m->max_ms > d->max)
        d->max = m->max_ms;
    for (size_t i = 0; i < m->n_buckets && i < NB; i++)
        d->b[i] += m->buckets[i];
}

static enum breaker breaker_of(const char *s)
{
    if (s && strcmp(s, "open") == 0)
        return B_OPEN;
    if (s && strcmp(s, "half_open") == 0)
        return B_HALF_OPEN;
    return B_CLOSED;
}

static struct lrep *lrep_get(struct cp_fleetview *fv, const char *id, int *created)
{
    *created = 0;
    for (struct lrep *r = fv->lreps; r; r = r->next)
        if (strcmp(r->id, id) == 0)
            return r;
    if (fv->nlreps >= MAX_LOCAL_REPS)
        return NULL;
    struct lrep *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    copy_id(r->id, sizeof(r->id), id);
    r->next = fv->lreps;
    fv->lreps = r;
    fv->nlreps++;
    *created = 1;
    return r;
}

int cp_fleetview_add(struct cp_fleetview *fv, const char *replica,
                     const Llmgw__V1__OutcomeSummary *s, int64_t now_ms)
{
    if (!fv || !s || !replica || !*replica)
        return 0;
    int news = 0, created;
    struct lrep *r = lrep_get(fv, replica, &created);
    if (r) {
        news |= created || r->seen_ms < now_ms - fv->cfg.member_ttl_ms;
        r->view_version = s->view_version;
        r->seen_ms = now_ms;
    }
    int64_t slot = slot_of(now_ms);
    for (size_t i = 0; i < s->n_targets; i++) {
        const Llmgw__V1__TargetOutcomes *o = s->targets[i];
        struct target *t = target_find(fv, o->provider, o->model, 1);
        if (!t)
            continue;
        struct contrib *c = t->local;
        while (c && strcmp(c->id, replica) != 0)
            c = c->next;
        if (!c) {
            if (t->nlocal >= MAX_CONTRIBS || !(c = contrib_new(fv, replica, fv->self)))
                continue;
            c->next = t->local;
            t->local = c;
            t->nlocal++;
        }
        if (t->score || (t->score = calloc(1, sizeof(*t->score))))
            cp_fleetscore_add(t->score, now_ms, o);
        struct bucket *b = bucket_at(fv, c, slot);
        uint64_t attempts = o->ok;
        b->ok += o->ok;
        for (size_t j = 0; j < o->n_failures; j++) {
            int f = canon_failure_from_name(o->failures[j]->failure_class);
            if (f >= 0) {
                b->fail[f] += o->failures[j]->count;
                attempts += o->failures[j]->count;
            }
        }
        dsum_from_pb(&b->lat, o->latency);
        dsum_from_pb(&b->ttfb, o->ttfb);
        b->probe_ok += o->probe_ok;
        b->probe_failed += o->probe_failed;
        b->skipped += o->fleet_skipped;
        if (o->probe_ok)
            c->probe_ok_ms = now_ms;
        if (o->probe_failed)
            c->probe_failed_ms = now_ms;
        if (attempts || o->fleet_skipped)
            c->demand_ms = now_ms;
        enum breaker was = c->breaker;
        c->breaker = breaker_of(o->breaker);
        c->breaker_at_ms = now_ms;
        for (size_t j = 0; j < o->n_changes; j++) {
            const Llmgw__V1__StateChange *ch = o->changes[j];
            int64_t at = ch->at_ms > 0 && ch->at_ms <= now_ms ? ch->at_ms : now_ms;
            enum breaker to = breaker_of(ch->to);
            if (to == B_OPEN && at > c->opened_ms)
                c->opened_ms = at;
            if (to == B_CLOSED && breaker_of(ch->from) == B_HALF_OPEN && at > c->closed_ms)
                c->closed_ms = at;
        }
        news |= o->n_changes > 0 || o->probe_ok || o->probe_failed || was != c->breaker;
        c->seen_ms = now_ms;
        t->seen_ms = now_ms;
    }
    return news;
}

/* -------------------------------------------------------------- members */

static void members_drop(struct cp_fleetview *fv, int local, const char *via)
{
    for (struct member **pp = &fv->members, *m; (m = *pp);) {
        if (m->local == local && (!via || strcmp(m->via, via) == 0)) {
            *pp = m->next;
            free(m);
        } else {
            pp = &m->next;
        }
    }
}

static struct member *member_add(struct cp_fleetview *fv, const char *id, const char *via,
                                 int local)
{
    struct member *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    copy_id(m->id, sizeof(m->id), id);
    copy_id(m->via, sizeof(m->via), via);
    m->local = local;
    m->next = fv->members;
    fv->members = m;
    return m;
}

void cp_fleetview_set_members(struct cp_fleetview *fv, const struct cp_fleetview_member *m,
                              size_t n, int64_t now_ms)
{
    (void)now_ms;
    members_drop(fv, 1, NULL);
    for (size_t i = 0; i < n && i < MAX_LOCAL_REPS; i++) {
        struct member *x = member_add(fv, m[i].id, fv->self, 1);
        if (!x)
            break;
        x->snapshot_version = m[i].snapshot_version;
        x->last_seen_ms = m[i].last_seen_ms;
        for (struct lrep *r = fv->lreps; r; r = r->next)
            if (strcmp(r->id, m[i].id) == 0)
                x->view_version = r->view_version;
    }
}

/* Whether a data plane is connected: here (local only), or anywhere. */
static int connected(const struct cp_fleetview *fv, const char *id, int local_only, int64_t now_ms)
{
    for (const struct member *m = fv->members; m; m = m->next)
        if ((m->local || !local_only) && strcmp(m->id, id) == 0 &&
            m->last_seen_ms >= now_ms - fv->cfg.member_ttl_ms)
            return 1;
    return 0;
}

/* ------------------------------------------------------------- blobs in */

static int64_t jint(const json_t *o, const char *k)
{
    return (int64_t)json_integer_value(json_object_get(o, k));
}

static const char *jstr(const json_t *o, const char *k)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

void cp_fleetview_remote_begin(struct cp_fleetview *fv, const char *kind)
{
    if (strcmp(kind, "dp") == 0) {
        /* Dropped below; each blob's members are added again. */
        for (struct member **pp = &fv->members, *m; (m = *pp);) {
            if (!m->local) {
                *pp = m->next;
                free(m);
            } else {
                pp = &m->next;
            }
        }
        return;
    }
    rblobs_free(fv->rblobs);
    fv->rblobs = NULL;
    for (struct target *t = fv->targets; t; t = t->next) {
        contribs_free(fv, t->remote);
        t->remote = NULL;
        t->nremote = 0;
        rlatches_free(t->rlatches);
        t->rlatches = NULL;
        memset(&t->rscore, 0, sizeof(t->rscore));
    }
}

void cp_fleetview_remote_end(struct cp_fleetview *fv, const char *kind)
{
    (void)fv;
    (void)kind;
}

static void dsum_from_json(struct dsum *d, const json_t *a)
{
    /* [count, sum, max, b0 .. b9] */
    if (!json_is_array(a) || json_array_size(a) < 3)
        return;
    d->count = (uint64_t)json_integer_value(json_array_get(a, 0));
    d->sum = (uint64_t)json_integer_value(json_array_get(a, 1));
    d->max = (uint64_t)json_integer_value(json_array_get(a, 2));
    for (size_t i = 0; i < NB && i + 3 < json_array_size(a); i++)
        d->b[i] = (uint64_t)json_integer_value(json_array_get(a, i + 3));
}

static void latch_from_json(struct latch *l, const json_t *o)
{
    memset(l, 0, sizeof(*l));
    l->down = json_is_true(json_object_get(o, "down"));
    l->since_ms = jint(o, "since_ms");
    l->reset_ms = jint(o, "reset_ms");
    copy_id(l->holder, sizeof(l->holder), jstr(o, "holder"));
    l->assigned_ms = jint(o, "assigned_ms");
    l->hold_until_ms = jint(o, "hold_until_ms");
    l->next_probe_ms = jint(o, "next_probe_ms");
    l->backoff_ms = jint(o, "backoff_ms");
    l->round = (unsigned)jint(o, "round");
    copy_id(l->why, sizeof(l->why), jstr(o, "why"));
}

static void remote_contrib(struct cp_fleetview *fv, struct target *t, const char *via,
                           const json_t *r, int64_t now_ms)
{
    const char *id = jstr(r, "id");
    if (!*id || t->nremote >= MAX_CONTRIBS)
        return;
    struct contrib *c = contrib_new(fv, id, via);
    if (!c)
        return;
    c->breaker = breaker_of(jstr(r, "breaker"));
    c->breaker_at_ms = jint(r, "breaker_at_ms");
    c->opened_ms = jint(r, "opened_ms");
    c->closed_ms = jint(r, "closed_ms");
    c->probe_ok_ms = jint(r, "probe_ok_ms");
    c->probe_failed_ms = jint(r, "probe_failed_ms");
    c->demand_ms = jint(r, "demand_ms");
    c->seen_ms = jint(r, "seen_ms");
    int64_t oldest = slot_of(now_ms) - fv->cfg.window_s + 1;
    size_t i;
    json_t *jb;
    json_array_foreach(json_object_get(r, "buckets"), i, jb)
    {
        int64_t slot = jint(jb, "s");
        if (slot < oldest || slot > slot_of(now_ms) + 1)
            continue;
        struct bucket *b = bucket_at(fv, c, slot);
        b->ok += (uint64_t)jint(jb, "ok");
        b->probe_ok += (uint64_t)jint(jb, "pok");
        b->probe_failed += (uint64_t)jint(jb, "pf");
        b->skipped += (uint64_t)jint(jb, "sk");
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(jb, "f"), k, v)
        {
            int f = canon_failure_from_name(k);
            if (f >= 0)
                b->fail[f] += (uint64_t)json_integer_value(v);
        }
        struct dsum d = {0};
        dsum_from_json(&d, json_object_get(jb, "lat"));
        dsum_merge(&b->lat, &d);
        memset(&d, 0, sizeof(d));
        dsum_from_json(&d, json_object_get(jb, "ttfb"));
        dsum_merge(&b->ttfb, &d);
    }
    c->next = t->remote;
    t->remote = c;
    t->nremote++;
    if (c->seen_ms > t->seen_ms)
        t->seen_ms = c->seen_ms;
}

int cp_fleetview_remote(struct cp_fleetview *fv, const char *kind, const char *name,
                        const char *json, size_t len, int64_t now_ms)
{
    if (!fv || !kind || !name || strcmp(name, fv->self) == 0)
        return 0;
    json_t *root = json_loadb(json, len, 0, NULL);
    int64_t at = jint(root, "at_ms");
    if (!json_is_object(root) || at < now_ms - fv->cfg.remote_ttl_ms) {
        json_decref(root);
        return 0;
    }
    size_t i;
    json_t *x;
    if (strcmp(kind, "dp") == 0) {
        json_array_foreach(json_object_get(root, "replicas"), i, x)
        {
            struct member *m = member_add(fv, jstr(x, "id"), name, 0);
            if (!m)
                break;
            m->snapshot_version = jint(x, "snapshot_version");
            m->last_seen_ms = jint(x, "last_seen_ms");
            m->view_version = (uint64_t)jint(x, "view_version");
        }
    } else {
        struct rblob *b = calloc(1, sizeof(*b));
        if (b) {
            copy_id(b->cp, sizeof(b->cp), name);
            b->at_ms = at;
            b->next = fv->rblobs;
            fv->rblobs = b;
        }
        json_array_foreach(json_object_get(root, "targets"), i, x)
        {
            struct target *t = target_find(fv, jstr(x, "provider"), jstr(x, "model"), 1);
            if (!t)
                continue;
            size_t j;
            json_t *r;
            json_array_foreach(json_object_get(x, "replicas"), j, r)
                remote_contrib(fv, t, name, r, now_ms);
            cp_fleetscore_from_json(&t->rscore, json_object_get(x, "score"));
            json_t *l = json_object_get(x, "latch");
            struct rlatch *rl = json_is_object(l) ? calloc(1, sizeof(*rl)) : NULL;
            if (at > t->seen_ms)
                t->seen_ms = at; /* another replica knows it: not to be forgotten yet */
            if (rl) {
                copy_id(rl->cp, sizeof(rl->cp), name);
                rl->at_ms = at;
                latch_from_json(&rl->l, l);
                rl->next = t->rlatches;
                t->rlatches = rl;
            }
        }
    }
    json_decref(root);
    return 1;
}

/* ---------------------------------------------------------------- rules */

/* One data plane's contributions to a target, merged. */
struct rview {
    const char *id, *via;
    enum breaker breaker;
    int64_t breaker_at_ms, opened_ms, closed_ms, probe_ok_ms, probe_failed_ms, demand_ms;
    int64_t seen_ms;
    struct contrib *parts[4];
    int nparts;
};

/* Groups a target's contributions by data plane into v (at most cap). */
static size_t rviews(struct target *t, struct rview *v, size_t cap)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (struct contrib *c = pass ? t->remote : t->local; c; c = c->next) {
            size_t i = 0;
            while (i < n && strcmp(v[i].id, c->id) != 0)
                i++;
            if (i == n) {
                if (n == cap)
                    continue;
                memset(&v[n], 0, sizeof(v[n]));
                v[n].id = c->id;
                n++;
            }
            struct rview *r = &v[i];
            if (r->nparts < 4)
                r->parts[r->nparts++] = c;
            if (c->breaker_at_ms >= r->breaker_at_ms) {
                r->breaker = c->breaker;
                r->breaker_at_ms = c->breaker_at_ms;
            }
            if (c->seen_ms >= r->seen_ms) {
                r->seen_ms = c->seen_ms;
                r->via = c->via;
            }
#define MAXOF(f)                                                                                   \
    if (c->f > r->f)                                                                               \
    r->f = c->f
            MAXOF(opened_ms);
            MAXOF(closed_ms);
            MAXOF(probe_ok_ms);
            MAXOF(probe_failed_ms);
            MAXOF(demand_ms);
#undef MAXOF
        }
    return n;
}

/* Sums of buckets with from_slot <= slot <= to_slot. */
struct sums {
    uint64_t ok, fail_h, fail[CANON_FAIL_COUNT], skipped;
    struct dsum lat, ttfb;
};

static void sum_rview(const struct cp_fleetview *fv, const struct rview *r, int64_t from_slot,
                      int64_t to_slot, struct sums *s)
{
    for (int p = 0; p < r->nparts; p++)
        for (int i = 0; i < fv->cfg.window_s; i++) {
            const struct bucket *b = &r->parts[p]->win[i];
            if (b->slot < from_slot || b->slot > to_slot || b->slot < 0)
                continue;
            s->ok += b->ok;
            s->skipped += b->skipped;
            for (int f = 0; f < CANON_FAIL_COUNT; f++) {
                s->fail[f] += b->fail[f];
                if (canon_failure_counts((enum canon_failure)f))
                    s->fail_h += b->fail[f];
            }
            dsum_merge(&s->lat, &b->lat);
            dsum_merge(&s->ttfb, &b->ttfb);
        }
}

static uint64_t percentile(const struct dsum *d, unsigned pct)
{
    if (!d->count)
        return 0;
    uint64_t want = (d->count * pct + 99) / 100, seen = 0;
    for (int i = 0; i < NB; i++) {
        seen += d->b[i];
        if (seen >= want)
            return i < NB - 1 && dp_outcomes_bounds_ms[i] < d->max ? dp_outcomes_bounds_ms[i]
                                                                   : d->max;
    }
    return d->max;
}

/* "provider_5xx 12, timeout 3" (health-relevant classes only). */
static void classes_text(const struct sums *s, char *out, size_t n)
{
    size_t at = 0;
    out[0] = '\0';
    for (int f = 0; f < CANON_FAIL_COUNT && at < n; f++)
        if (s->fail[f] && canon_failure_counts((enum canon_failure)f))
            at += (size_t)snprintf(out + at, n - at, "%s%s %llu", at ? ", " : "",
                                   canon_failure_name((enum canon_failure)f),
                                   (unsigned long long)s->fail[f]);
}

/* What the rules see of a target now. */
struct eval {
    unsigned tried, opened;
    unsigned unheard; /* connected replicas not among those that tried it */
    int64_t first_open_ms;
    struct sums recent, earlier;
    int down, degraded;
    char down_why[REASON_MAX];
    char deg_why[MAX_REASONS][REASON_MAX];
    int ndeg;
};

__attribute__((format(printf, 2, 3))) static void add_deg(struct eval *e, const char *fmt, ...)
{
    if (e->ndeg >= MAX_REASONS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->deg_why[e->ndeg++], REASON_MAX, fmt, ap);
    va_end(ap);
}

/* Data planes connected anywhere in the fleet that are not among ids[n]
 * (each counted once, whichever control plane it was seen through). */
static unsigned unheard(const struct cp_fleetview *fv, const char *const *ids, unsigned n,
                        int64_t now_ms)
{
    unsigned count = 0;
    for (const struct member *m = fv->members; m; m = m->next) {
        if (m->last_seen_ms < now_ms - fv->cfg.member_ttl_ms)
            continue;
        int seen = 0;
        for (unsigned i = 0; i < n && !seen; i++)
            seen = strcmp(ids[i], m->id) == 0;
        for (const struct member *o = fv->members; o != m && !seen; o = o->next)
            seen = strcmp(o->id, m->id) == 0 && o->last_seen_ms >= now_ms - fv->cfg.member_ttl_ms;
        count += !seen;
    }
    return count;
}

static void evaluate(const struct cp_fleetview *fv, const struct rview *v, size_t n,
                     int64_t reset_ms, int64_t now_ms, struct eval *e)
{
    memset(e, 0, sizeof(*e));
    int64_t now_slot = slot_of(now_ms);
    /* Evidence from before the last recovery (the bucket it fell in
     * included) is not evidence any more. */
    int64_t after = reset_ms ? slot_of(reset_ms) + 1 : 0;
    int64_t from = now_slot - fv->cfg.recent_s + 1;
    if (from < after)
        from = after;
    int64_t open_since = now_ms - fv->cfg.open_horizon_ms;
    if (open_since < reset_ms)
        open_since = reset_ms;
    const char *tried_ids[2 * MAX_CONTRIBS];
    for (size_t i = 0; i < n; i++) {
        struct sums s = {0};
        sum_rview(fv, &v[i], from, now_slot, &s);
        int open = v[i].breaker != B_CLOSED && v[i].opened_ms > open_since;
        e->opened += open;
        if (open && (!e->first_open_ms || v[i].opened_ms < e->first_open_ms))
            e->first_open_ms = v[i].opened_ms;
        if (open || s.ok + s.fail_h > 0)
            tried_ids[e->tried++] = v[i].id;
        e->recent.ok += s.ok;
        e->recent.fail_h += s.fail_h;
        for (int f = 0; f < CANON_FAIL_COUNT; f++)
            e->recent.fail[f] += s.fail[f];
        dsum_merge(&e->recent.ttfb, &s.ttfb);
        struct sums o = {0};
        int64_t efrom = now_slot - fv->cfg.window_s + 1;
        sum_rview(fv, &v[i], efrom > after ? efrom : after, from - 1, &o);
        dsum_merge(&e->earlier.ttfb, &o.ttfb);
    }
    /* Only when the breakers' rule would say down (the count walks the
     * fleet's members). */
    if (e->opened && e->opened * 2 > e->tried)
        e->unheard = unheard(fv, tried_ids, e->tried, now_ms);
    uint64_t att = e->recent.ok + e->recent.fail_h, fail = e->recent.fail_h;
    char cls[120];
    classes_text(&e->recent, cls, sizeof(cls));
    /* A breaker's opening reaches the control plane within 100 ms, the
     * other replicas' attempts with their next summary, within a second: a
     * verdict of the breakers that other connected replicas may yet
     * outvote waits for their reports (one replica's own path to a target
     * is not the fleet's). */
    int wait = e->unheard && now_ms < e->first_open_ms + fv->cfg.report_grace_ms &&
               e->opened * 2 <= e->tried + e->unheard;
    if (e->opened && e->opened * 2 > e->tried && wait) {
        add_deg(e,
                "breakers opened on %u of %u replicas that tried it; waiting for %u more "
                "replicas' reports",
                e->opened, e->tried, e->unheard);
    } else if (e->opened && e->opened * 2 > e->tried) {
        e->down = 1;
        snprintf(e->down_why, sizeof(e->down_why),
                 "breakers opened on %u of %u replicas that tried it in the last %lld s", e->opened,
                 e->tried, (long long)(fv->cfg.open_horizon_ms / 1000));
    } else if (fail >= fv->cfg.min_failures && fail * 100 >= (uint64_t)fv->cfg.down_pct * att) {
        e->down = 1;
        snprintf(e->down_why, sizeof(e->down_why),
                 "%llu of %llu attempts failed in the last %d s (%s)", (unsigned long long)fail,
                 (unsigned long long)att, fv->cfg.recent_s, cls);
    }
    if (e->opened)
        add_deg(e, "breaker open on %u of %u replicas that tried it", e->opened, e->tried);
    if (fail >= 3 && fail * 100 >= (uint64_t)fv->cfg.degraded_pct * att)
        add_deg(e, "%llu of %llu attempts failed in the last %d s (%s)", (unsigned long long)fail,
                (unsigned long long)att, fv->cfg.recent_s, cls);
    uint64_t p90 = percentile(&e->recent.ttfb, 90), before = percentile(&e->earlier.ttfb, 90);
    if (e->recent.ttfb.count >= 10 && e->earlier.ttfb.count >= 10 && p90 >= 1000 &&
        p90 > 3 * before)
        add_deg(e, "time to first byte p90 %llu ms in the last %d s, %llu ms before",
                (unsigned long long)p90, fv->cfg.recent_s, (unsigned long long)before);
    e->degraded = e->ndeg > 0;
}

/* The probe's next holder: round robin, in id order, over the data planes
 * that wanted the target lately and are connected (anywhere when deciding
 * for the fleet, here when deciding alone); any connected one when none
 * wanted it. "" when there is none. */
static void pick_holder(const struct cp_fleetview *fv, const struct rview *v, size_t n,
                        int local_only, int64_t now_ms, struct latch *l)
{
    const char *ids[MAX_CONTRIBS];
    size_t k = 0;
    for (size_t i = 0; i < n && k < MAX_CONTRIBS; i++)
        if (v[i].demand_ms >= now_ms - fv->cfg.demand_ms &&
            connected(fv, v[i].id, local_only, now_ms))
            ids[k++] = v[i].id;
    if (!k)
        for (const struct member *m = fv->members; m && k < MAX_CONTRIBS; m = m->next)
            if ((m->local || !local_only) && m->last_seen_ms >= now_ms - fv->cfg.member_ttl_ms) {
                size_t j = 0;
                while (j < k && strcmp(ids[j], m->id) != 0)
                    j++;
                if (j == k)
                    ids[k++] = m->id;
            }
    l->holder[0] = '\0';
    if (!k)
        return;
    /* Sorted: every replica that decides picks the same one. */
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && strcmp(ids[j - 1], ids[j]) > 0; j--) {
            const char *x = ids[j];
            ids[j] = ids[j - 1];
            ids[j - 1] = x;
        }
    copy_id(l->holder, sizeof(l->holder), ids[l->round % k]);
    l->round++;
    l->assigned_ms = now_ms;
    l->hold_until_ms = now_ms + fv->cfg.probe_hold_ms;
}

/* The latch's next step, when this replica decides. */
static void decide(const struct cp_fleetview *fv, struct target *t, const struct rview *v, size_t n,
                   const struct eval *e, int local_only, int64_t now_ms)
{
    struct latch *l = &t->latch;
    if (!l->down) {
        if (!e->down)
            return;
        l->down = 1;
        l->since_ms = now_ms;
        l->holder[0] = '\0';
        l->backoff_ms = fv->cfg.probe_first_ms;
        l->next_probe_ms = now_ms + fv->cfg.probe_first_ms;
        copy_id(l->why, sizeof(l->why), e->down_why);
        return;
    }
    /* Recovery: a probe (or any half-open breaker's probe) that succeeded
     * after the target went down. */
    for (size_t i = 0; i < n; i++)
        if (v[i].probe_ok_ms > l->since_ms || v[i].closed_ms > l->since_ms) {
            int64_t reset = now_ms;
            memset(l, 0, sizeof(*l));
            l->reset_ms = reset;
            return;
        }
    if (l->holder[0]) {
        const struct rview *h = NULL;
        for (size_t i = 0; i < n && !h; i++)
            if (strcmp(v[i].id, l->holder) == 0)
                h = &v[i];
        if (h && h->probe_failed_ms >= l->assigned_ms) {
            /* The probe failed: the next one after a doubled wait. */
            l->backoff_ms =
                l->backoff_ms * 2 > fv->cfg.probe_max_ms ? fv->cfg.probe_max_ms : l->backoff_ms * 2;
            l->next_probe_ms = now_ms + l->backoff_ms;
            l->holder[0] = '\0';
        } else if (now_ms >= l->hold_until_ms) {
            l->holder[0] = '\0'; /* it did not probe: the next replica's turn */
            l->next_probe_ms = now_ms;
        }
    }
    if (!l->holder[0] && now_ms >= l->next_probe_ms)
        pick_holder(fv, v, n, local_only, now_ms, l);
}

static const struct rlatch *leader_latch(const struct target *t, const char *leader)
{
    for (const struct rlatch *r = t->rlatches; r; r = r->next)
        if (strcmp(r->cp, leader) == 0)
            return r;
    return NULL;
}

/* Whether a current blob of the leader's is here: then this replica follows. */
static int leader_blob_fresh(const struct cp_fleetview *fv, const char *leader, int64_t now_ms)
{
    if (!leader || !*leader || strcmp(leader, fv->self) == 0)
        return 0;
    for (const struct rblob *b = fv->rblobs; b; b = b->next)
        if (strcmp(b->cp, leader) == 0)
            return b->at_ms >= now_ms - fv->cfg.leader_fresh_ms;
    return 0;
}

static void set_reasons(struct target *t, const struct eval *e, int64_t now_ms)
{
    t->nreasons = 0;
    const struct latch *l = &t->latch;
    if (t->state == S_DOWN) {
        const char *why = l->down ? l->why : e->down_why;
        snprintf(t->reasons[t->nreasons++], REASON_MAX, "%s", why[0] ? why : "down");
        if (!l->down)
            snprintf(t->reasons[t->nreasons++], REASON_MAX,
                     "seen here first; the leader has not confirmed it yet");
        else if (l->holder[0])
            snprintf(t->reasons[t->nreasons++], REASON_MAX, "probe assigned to %s for %lld ms",
                     l->holder, (long long)(l->hold_until_ms - now_ms));
        else
            snprintf(t->reasons[t->nreasons++], REASON_MAX, "next probe in %lld ms",
                     (long long)(l->next_probe_ms > now_ms ? l->next_probe_ms - now_ms : 0));
        return;
    }
    for (int i = 0; i < e->ndeg && t->nreasons < MAX_REASONS; i++)
        snprintf(t->reasons[t->nreasons++], REASON_MAX, "%s", e->deg_why[i]);
}

int cp_fleetview_compute(struct cp_fleetview *fv, int64_t now_ms, int leader, const char *leader_id,
                         int etcd)
{
    if (!fv)
        return 0;
    int following = !leader && etcd == 1 && leader_blob_fresh(fv, leader_id, now_ms);
    fv->mode = leader ? 0 : following ? 1 : 2;
    copy_id(fv->leader, sizeof(fv->leader), leader_id);
    fv->etcd = etcd;
    fv->computed_ms = now_ms;
    /* Deciding for the whole fleet needs to see it: the leader with etcd
     * up (or none configured). Alone, probes go to this replica's own. */
    int local_only = !(leader && etcd != 0);
    struct rview *v = malloc(2 * MAX_CONTRIBS * sizeof(*v));
    if (!v)
        return 0;
    int any = 0;
    for (struct target **pp = &fv->targets, *t; (t = *pp);) {
        /* Forget what nobody reported for a while (not a latched down). */
        for (struct contrib **cp = &t->local, *c; (c = *cp);) {
            if (c->seen_ms < now_ms - fv->cfg.demand_ms) {
                *cp = c->next;
                t->nlocal--;
                contrib_free(fv, c);
            } else {
                cp = &c->next;
            }
        }
        struct cp_fleetscore_sums own = {0};
        int scored = t->score && cp_fleetscore_sum(t->score, now_ms, &own);
        if (!t->local && !t->remote && !t->latch.down && !scored &&
            t->seen_ms < now_ms - fv->cfg.demand_ms) {
            struct target *dead = t;
            target_unlink(fv, dead);
            target_free(fv, dead);
            continue;
        }
        size_t n = rviews(t, v, 2 * MAX_CONTRIBS);
        if (following) {
            const struct rlatch *r = leader_latch(t, leader_id);
            if (r)
                t->latch = r->l;
            else
                t->latch.down = 0, t->latch.holder[0] = '\0';
        }
        struct eval e;
        evaluate(fv, v, n, t->latch.reset_ms, now_ms, &e);
        t->local_down = 0;
        if (following)
            t->local_down = !t->latch.down && e.down;
        else
            decide(fv, t, v, n, &e, local_only, now_ms);
        t->state = t->latch.down || t->local_down ? S_DOWN : e.degraded ? S_DEGRADED : S_HEALTHY;
        set_reasons(t, &e, now_ms);
        any |= t->state != S_HEALTHY;
        pp = &t->next;
    }
    free(v);
    /* Two replicas may hold the targets in different orders: the version
     * adds per-target hashes, which does not depend on the order. */
    uint64_t ver = 0;
    for (struct target *t = fv->targets; t; t = t->next) {
        if (t->state == S_HEALTHY)
            continue;
        uint64_t x = gw_fnv1a(GW_FNV1A_INIT, t->tk.provider, strlen(t->tk.provider) + 1);
        x = gw_fnv1a(x, t->tk.model, strlen(t->tk.model) + 1);
        x = gw_fnv1a(x, &(unsigned char){(unsigned char)t->state}, 1);
        if (t->state == S_DOWN)
            x = gw_fnv1a(x, t->latch.holder, strlen(t->latch.holder) + 1);
        ver += gw_mix64(x);
    }
    /* 53 bits (exact in JSON numbers); 1 when everything is healthy. */
    ver = any ? (ver & ((UINT64_C(1) << 53) - 1)) | 2 : 1;
    int changed = ver != fv->version;
    fv->version = ver;
    return changed;
}

uint64_t cp_fleetview_version(const struct cp_fleetview *fv)
{
    return fv ? fv->version : 0;
}

/* ------------------------------------------------------------ views out */

static Llmgw__V1__FleetState pb_state(enum fstate s)
{
    return s == S_DOWN       ? LLMGW__V1__FLEET_STATE__FLEET_STATE_DOWN
           : s == S_DEGRADED ? LLMGW__V1__FLEET_STATE__FLEET_STATE_DEGRADED
                             : LLMGW__V1__FLEET_STATE__FLEET_STATE_HEALTHY;
}

/* The fleet's figures for t: this replica's ring and the others' blobs.
 * 0 when there are none. */
static int fleet_score(const struct target *t, int64_t now_ms, struct cp_fleetscore_sums *f)
{
    *f = t->rscore;
    if (t->score)
        cp_fleetscore_sum(t->score, now_ms, f);
    return f->ok + f->failed + f->ttfb_n + f->ttfc_n > 0;
}

int cp_fleetview_pack(const struct cp_fleetview *fv, const char *replica, int64_t now_ms,
                      uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    Llmgw__V1__FleetView m = LLMGW__V1__FLEET_VIEW__INIT;
    m.version = fv->version;
    m.generated_at_ms = now_ms;
    m.ttl_ms = fv->cfg.view_ttl_ms;
    size_t n = 0;
    for (const struct target *t = fv->targets; t; t = t->next)
        n++;
    Llmgw__V1__FleetTarget *ts = calloc(n ? n : 1, sizeof(*ts));
    Llmgw__V1__FleetTarget **tp = calloc(n ? n : 1, sizeof(*tp));
    Llmgw__V1__FleetScore *sc = calloc(n ? n : 1, sizeof(*sc));
    char **rp = calloc(n ? n * MAX_REASONS : 1, sizeof(*rp));
    int rc = GW_ENOMEM;
    if (!ts || !tp || !sc || !rp)
        goto out;
    size_t i = 0;
    for (const struct target *t = fv->targets; t; t = t->next, i++) {
        Llmgw__V1__FleetTarget *x = &ts[i];
        llmgw__v1__fleet_target__init(x);
        x->provider = (char *)t->tk.provider;
        x->model = (char *)t->tk.model;
        x->state = pb_state(t->state);
        for (int r = 0; r < t->nreasons; r++)
            rp[i * MAX_REASONS + (size_t)r] = (char *)t->reasons[r];
        x->reasons = &rp[i * MAX_REASONS];
        x->n_reasons = (size_t)t->nreasons;
        if (t->state == S_DOWN && t->latch.down) {
            x->probe = replica && t->latch.holder[0] && strcmp(t->latch.holder, replica) == 0;
            x->until_ms = t->latch.holder[0] ? t->latch.hold_until_ms : t->latch.next_probe_ms;
        }
        struct cp_fleetscore_sums f;
        if (fleet_score(t, now_ms, &f)) {
            cp_fleetscore_pb(&f, &sc[i]);
            x->score = &sc[i];
        }
        tp[i] = x;
    }
    m.targets = tp;
    m.n_targets = n;
    *len = llmgw__v1__fleet_view__get_packed_size(&m);
    *out = malloc(*len ? *len : 1);
    if (*out) {
        llmgw__v1__fleet_view__pack(&m, *out);
        rc = GW_OK;
    }
out:
    free(ts);
    free(tp);
    free(sc);
    free(rp);
    return rc;
}

static json_t *dsum_json(const struct dsum *d)
{
    json_t *a = json_pack("[I,I,I]", (json_int_t)d->count, (json_int_t)d->sum, (json_int_t)d->max);
    for (int i = 0; a && i < NB; i++)
        json_array_append_new(a, json_integer((json_int_t)d->b[i]));
    return a;
}

static json_t *latch_json(const struct latch *l)
{
    return json_pack("{s:b,s:I,s:I,s:s,s:I,s:I,s:I,s:I,s:I,s:s}", "down", l->down, "since_ms",
                     (json_int_t)l->since_ms, "reset_ms", (json_int_t)l->reset_ms, "holder",
                     l->holder, "assigned_ms", (json_int_t)l->assigned_ms, "hold_until_ms",
                     (json_int_t)l->hold_until_ms, "next_probe_ms", (json_int_t)l->next_probe_ms,
                     "backoff_ms", (json_int_t)l->backoff_ms, "round", (json_int_t)l->round, "why",
                     l->why);
}

static json_t *contrib_json(const struct cp_fleetview *fv, const struct contrib *c, int64_t now_ms,
                            int buckets)
{
    json_t *bs = json_array();
    int64_t oldest = slot_of(now_ms) - fv->cfg.window_s + 1;
    for (int i = 0; bs && buckets && i < fv->cfg.window_s; i++) {
        const struct bucket *b = &c->win[i];
        if (b->slot < oldest)
            continue;
        json_t *f = json_object();
        for (int k = 0; f && k < CANON_FAIL_COUNT; k++)
            if (b->fail[k])
                json_object_set_new(f, canon_failure_name((enum canon_failure)k),
                                    json_integer((json_int_t)b->fail[k]));
        json_array_append_new(bs,
                              json_pack("{s:I,s:I,s:o,s:I,s:I,s:I,s:o,s:o}", "s",
                                        (json_int_t)b->slot, "ok", (json_int_t)b->ok, "f",
                                        f ? f : json_object(), "pok", (json_int_t)b->probe_ok, "pf",
                                        (json_int_t)b->probe_failed, "sk", (json_int_t)b->skipped,
                                        "lat", dsum_json(&b->lat), "ttfb", dsum_json(&b->ttfb)));
    }
    return json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o}", "id", c->id, "breaker",
                     breaker_names[c->breaker], "breaker_at_ms", (json_int_t)c->breaker_at_ms,
                     "opened_ms", (json_int_t)c->opened_ms, "closed_ms", (json_int_t)c->closed_ms,
                     "probe_ok_ms", (json_int_t)c->probe_ok_ms, "probe_failed_ms",
                     (json_int_t)c->probe_failed_ms, "demand_ms", (json_int_t)c->demand_ms,
                     "seen_ms", (json_int_t)c->seen_ms, "buckets", bs ? bs : json_array());
}

static char *dump(json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s;
}

/* level 0: everything; 1: no buckets (breaker states and event times
 * only); 2: the latches only. */
static char *outcomes_blob(const struct cp_fleetview *fv, int64_t now_ms, int level)
{
    json_t *ts = json_array();
    json_t *root =
        json_pack("{s:i,s:s,s:I,s:b,s:i,s:o}", "v", 1, "cp", fv->self, "at_ms", (json_int_t)now_ms,
                  "leader", fv->mode == 0, "trimmed", level, "targets", ts);
    if (!root)
        return NULL;
    for (const struct target *t = fv->targets; t; t = t->next) {
        json_t *rs = json_array();
        for (const struct contrib *c = t->local; rs && level < 2 && c; c = c->next)
            json_array_append_new(rs, contrib_json(fv, c, now_ms, level == 0));
        json_t *x = json_pack("{s:s,s:s,s:o,s:o}", "provider", t->tk.provider, "model", t->tk.model,
                              "latch", latch_json(&t->latch), "replicas", rs ? rs : json_array());
        struct cp_fleetscore_sums own = {0};
        if (x && t->score && cp_fleetscore_sum(t->score, now_ms, &own))
            json_object_set_new(x, "score", cp_fleetscore_json(&own));
        json_array_append_new(ts, x);
    }
    return dump(root);
}

char *cp_fleetview_outcomes_blob(const struct cp_fleetview *fv, int64_t now_ms)
{
    /* etcd refuses a request over 1.5 MiB by default: a fleet too large
     * for the whole window in one blob shares less of it, but always the
     * leader's latch. */
    char *b = NULL;
    for (int level = 0; level < 3; level++) {
        free(b);
        b = outcomes_blob(fv, now_ms, level);
        if (!b || strlen(b) <= CP_FLEETVIEW_BLOB_MAX)
            return b;
    }
    return b;
}

char *cp_fleetview_members_blob(const struct cp_fleetview *fv, int64_t now_ms)
{
    json_t *rs = json_array();
    json_t *root = json_pack("{s:i,s:s,s:I,s:o}", "v", 1, "cp", fv->self, "at_ms",
                             (json_int_t)now_ms, "replicas", rs);
    if (!root)
        return NULL;
    for (const struct member *m = fv->members; m; m = m->next)
        if (m->local)
            json_array_append_new(rs, json_pack("{s:s,s:I,s:I,s:I}", "id", m->id,
                                                "snapshot_version", (json_int_t)m->snapshot_version,
                                                "last_seen_ms", (json_int_t)m->last_seen_ms,
                                                "view_version", (json_int_t)m->view_version));
    return dump(root);
}

/* ---------------------------------------------------------------- health */

static json_t *failures_json(const struct sums *s)
{
    json_t *o = json_object();
    for (int f = 0; o && f < CANON_FAIL_COUNT; f++)
        if (s->fail[f])
            json_object_set_new(o, canon_failure_name((enum canon_failure)f),
                                json_integer((json_int_t)s->fail[f]));
    return o;
}

static json_t *pct_json(const struct dsum *d)
{
    if (!d->count)
        return json_null();
    return json_pack("{s:I,s:I,s:I,s:I,s:I}", "count", (json_int_t)d->count, "p50",
                     (json_int_t)percentile(d, 50), "p90", (json_int_t)percentile(d, 90), "p99",
                     (json_int_t)percentile(d, 99), "max", (json_int_t)d->max);
}

static json_t *sums_json(const struct sums *s)
{
    uint64_t failed = 0;
    for (int f = 0; f < CANON_FAIL_COUNT; f++)
        failed += s->fail[f];
    return json_pack("{s:I,s:I,s:I,s:I,s:o,s:o,s:o}", "attempts", (json_int_t)(s->ok + failed),
                     "ok", (json_int_t)s->ok, "failed", (json_int_t)failed, "fleet_skipped",
                     (json_int_t)s->skipped, "failures", failures_json(s), "latency_ms",
                     pct_json(&s->lat), "ttfb_ms", pct_json(&s->ttfb));
}

static json_t *ms_or_null(int64_t ms)
{
    return ms > 0 ? json_integer((json_int_t)ms) : json_null();
}

static json_t *target_json(const struct cp_fleetview *fv, struct target *t, struct rview *v,
                           int64_t now_ms)
{
    size_t n = rviews(t, v, 2 * MAX_CONTRIBS);
    int64_t now_slot = slot_of(now_ms);
    struct sums all = {0};
    json_t *reps = json_array();
    for (size_t i = 0; i < n; i++) {
        struct sums s = {0};
        sum_rview(fv, &v[i], now_slot - fv->cfg.window_s + 1, now_slot, &s);
        all.ok += s.ok;
        all.skipped += s.skipped;
        for (int f = 0; f < CANON_FAIL_COUNT; f++)
            all.fail[f] += s.fail[f];
        dsum_merge(&all.lat, &s.lat);
        dsum_merge(&all.ttfb, &s.ttfb);
        json_t *r = sums_json(&s);
        if (r)
            json_object_update_new(r, json_pack("{s:s,s:s,s:s,s:o,s:o,s:o}", "replica_id", v[i].id,
                                                "control_plane", v[i].via ? v[i].via : "",
                                                "breaker", breaker_names[v[i].breaker],
                                                "breaker_opened_ms", ms_or_null(v[i].opened_ms),
                                                "last_report_ms", ms_or_null(v[i].seen_ms),
                                                "last_demand_ms", ms_or_null(v[i].demand_ms)));
        json_array_append_new(reps, r);
    }
    json_t *reasons = json_array();
    for (int i = 0; i < t->nreasons; i++)
        json_array_append_new(reasons, json_string(t->reasons[i]));
    const struct latch *l = &t->latch;
    json_t *probe = l->down && l->holder[0]
                        ? json_pack("{s:s,s:I,s:I}", "replica_id", l->holder, "until_ms",
                                    (json_int_t)l->hold_until_ms, "round", (json_int_t)l->round)
                        : json_null();
    struct cp_fleetscore_sums f;
    return json_pack("{s:s,s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "provider", t->tk.provider,
                     "model", t->tk.model, "state", state_names[t->state], "reasons", reasons,
                     "down_since_ms", ms_or_null(l->down ? l->since_ms : 0), "probe", probe,
                     "next_probe_ms", ms_or_null(l->down && !l->holder[0] ? l->next_probe_ms : 0),
                     "window", sums_json(&all), "score",
                     fleet_score(t, now_ms, &f) ? cp_fleetscore_health(&f) : json_null(),
                     "replicas", reps);
}

json_t *cp_fleetview_health(const struct cp_fleetview *fv, int64_t now_ms)
{
    static const char *const modes[] = {"leader", "follower", "alone"};
    json_t *targets = json_array();
    struct rview *v = malloc(2 * MAX_CONTRIBS * sizeof(*v));
    for (struct target *t = fv->targets; v && t; t = t->next)
        json_array_append_new(targets, target_json(fv, t, v, now_ms));
    free(v);
    /* Every data plane connected anywhere: the newest word on each. */
    json_t *reps = json_array();
    for (const struct member *m = fv->members; m; m = m->next) {
        if (m->last_seen_ms < now_ms - fv->cfg.member_ttl_ms)
            continue;
        /* Shadowed by a newer word on the same data plane, or an equal one
         * earlier in the list. */
        int shadowed = 0, earlier = 1;
        for (const struct member *o = fv->members; o && !shadowed; o = o->next) {
            if (o == m) {
                earlier = 0;
                continue;
            }
            if (strcmp(o->id, m->id) != 0 || o->last_seen_ms < now_ms - fv->cfg.member_ttl_ms)
                continue;
            shadowed = o->last_seen_ms > m->last_seen_ms ||
                       (o->last_seen_ms == m->last_seen_ms && earlier);
        }
        if (shadowed)
            continue;
        json_array_append_new(reps, json_pack("{s:s,s:s,s:b,s:I,s:I,s:I}", "replica_id", m->id,
                                              "control_plane", m->via, "connected", 1,
                                              "snapshot_version", (json_int_t)m->snapshot_version,
                                              "view_version", (json_int_t)m->view_version,
                                              "last_seen_ms", (json_int_t)m->last_seen_ms));
    }
    const char *etcd = fv->etcd < 0 ? "off" : fv->etcd ? "up" : "down";
    json_t *fleet = json_pack(
        "{s:I,s:I,s:s,s:s?,s:s,s:i,s:I,s:o}", "version", (json_int_t)fv->version, "computed_at_ms",
        (json_int_t)fv->computed_ms, "decided_by", modes[fv->mode], "leader",
        fv->leader[0] ? fv->leader : NULL, "etcd", etcd, "window_s", fv->cfg.window_s,
        "dropped_contributions", (json_int_t)fv->contribs_dropped, "targets", targets);
    return json_pack("{s:o,s:o}", "fleet", fleet, "replicas", reps);
}

void cp_fleetview_each(const struct cp_fleetview *fv,
                       void (*fn)(void *arg, const char *provider, const char *model, int state),
                       void *arg)
{
    for (const struct target *t = fv->targets; t; t = t->next)
        fn(arg, t->tk.provider, t->tk.model, (int)t->state);
}

size_t cp_fleetview_replicas(const struct cp_fleetview *fv, int64_t now_ms)
{
    size_t n = 0;
    for (const struct member *m = fv->members; m; m = m->next) {
        if (m->last_seen_ms < now_ms - fv->cfg.member_ttl_ms)
            continue;
        int dup = 0;
        for (const struct member *o = fv->members; o != m && !dup; o = o->next)
            dup = strcmp(o->id, m->id) == 0 && o->last_seen_ms >= now_ms - fv->cfg.member_ttl_ms;
        n += !dup;
    }
    return n;
}
