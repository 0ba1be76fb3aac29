#include "gw_metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_hash.h"

/* Hash buckets per family: with the default cap, chains of about ten. */
#define NBUCKETS 1024
#define DROPPED_NAME "llmgw_metrics_series_dropped_total"

enum type { T_COUNTER, T_GAUGE, T_HISTOGRAM };

struct gw_series {
    struct gw_series *next;     /* hash chain: set before publication, never changed */
    struct gw_series *next_all; /* every series of the family (under its lock) */
    const struct gw_metric *family;
    uint64_t hash;
    _Atomic uint64_t value;    /* counter: the count; gauge: the double's bits */
    _Atomic uint64_t sum;      /* histogram: the double's bits */
    _Atomic uint64_t *buckets; /* histogram: nbounds + 1 counts, not cumulative */
    size_t nvalues;
    const char *values[GW_METRICS_MAX_LABELS];
    size_t lens[GW_METRICS_MAX_LABELS];
};

struct gw_metric {
    struct gw_metrics *reg;
    struct gw_metric *next; /* registration order */
    enum type type;
    char *name;
    char *help;
    size_t nlabels;
    char *labels[GW_METRICS_MAX_LABELS];
    double *bounds;
    size_t nbounds;
    size_t cap;
    int private_;           /* gw_metric_set_private */
    _Atomic size_t nseries; /* not counting the overflow series */
    pthread_mutex_t lock;   /* creating a series */
    _Atomic(struct gw_series *) table[NBUCKETS];
    struct gw_series *all;
    _Atomic(struct gw_series *) other; /* the overflow series, once needed */
    struct gw_series *dropped;         /* this family's series of the dropped counter */
};

struct gw_metrics {
    pthread_mutex_t lock; /* registration */
    struct gw_metric *families;
    struct gw_metric *dropped; /* llmgw_metrics_series_dropped_total{metric} */
    gw_metrics_collect_cb collect;
    void *collect_arg;
};

/* ------------------------------------------------------------ doubles */

static uint64_t bits_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof(u));
    return u;
}

static double double_of(uint64_t u)
{
    double v;
    memcpy(&v, &u, sizeof(v));
    return v;
}

static void atomic_add_double(_Atomic uint64_t *a, double v)
{
    uint64_t old = atomic_load_explicit(a, memory_order_relaxed);
    while (!atomic_compare_exchange_weak_explicit(a, &old, bits_of(double_of(old) + v),
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

/* The shortest of %.15g and %.17g that reads back as v; Prometheus's
 * spellings of the specials. */
static void fmt_double(char *buf, size_t n, double v)
{
    if (isnan(v)) {
        snprintf(buf, n, "NaN");
    } else if (isinf(v)) {
        snprintf(buf, n, v > 0 ? "+Inf" : "-Inf");
    } else {
        snprintf(buf, n, "%.15g", v);
        if (strtod(buf, NULL) != v)
            snprintf(buf, n, "%.17g", v);
    }
}

/* ------------------------------------------------------------ registration */

static int valid_name(const char *s, int colons)
{
    if (!s || !*s || (*s >= '0' && *s <= '9'))
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || (colons && *s == ':')))
            return 0;
    return 1;
}

static void family_free(struct gw_metric *f)
{
    struct gw_series *s = f->all;
    while (s) {
        struct gw_series *n = s->next_all;
        free(s);
        s = n;
    }
    free(f->name);
    free(f->help);
    for (size_t i = 0; i < f->nlabels; i++)
        free(f->labels[i]);
    free(f->bounds);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static struct gw_series *series_get(struct gw_metric *f, const char *const *values, int capped);

static struct gw_metric *reg_family(struct gw_metrics *m, enum type type, const char *name,
                                    const char *help, const char *const *labels,
                                    const double *bounds, size_t nbounds)
{
    if (!m || !valid_name(name, 1) || !help)
        return NULL;
    size_t nl = 0;
    while (labels && labels[nl]) {
        if (nl == GW_METRICS_MAX_LABELS || !valid_name(labels[nl], 0) ||
            strncmp(labels[nl], "__", 2) == 0 || (type == T_HISTOGRAM && !strcmp(labels[nl], "le")))
            return NULL;
        nl++;
    }
    for (size_t i = 0; i < nbounds; i++)
        if (!isfinite(bounds[i]) || (i && bounds[i] <= bounds[i - 1]))
            return NULL;
    struct gw_metric *f = calloc(1, sizeof(*f));
    if (!f)
        return NULL;
    f->reg = m;
    f->type = type;
    f->cap = GW_METRICS_DEFAULT_CAP;
    pthread_mutex_init(&f->lock, NULL);
    f->name = strdup(name);
    f->help = strdup(help);
    int ok = f->name && f->help;
    for (size_t i = 0; ok && i < nl; i++, f->nlabels++)
        ok = (f->labels[i] = strdup(labels[i])) != NULL;
    if (ok && nbounds) {
        f->bounds = malloc(nbounds * sizeof(double));
        ok = f->bounds != NULL;
        if (ok) {
            memcpy(f->bounds, bounds, nbounds * sizeof(double));
            f->nbounds = nbounds;
        }
    }
    pthread_mutex_lock(&m->lock);
    for (struct gw_metric *g = m->families; ok && g; g = g->next)
        ok = strcmp(g->name, name) != 0;
    if (ok) {
        /* appended: registration order */
        struct gw_metric **p = &m->families;
        while (*p)
            p = &(*p)->next;
        *p = f;
    }
    pthread_mutex_unlock(&m->lock);
    if (!ok) {
        family_free(f);
        return NULL;
    }
    if (m->dropped) {
        const char *v[] = {name};
        f->dropped = series_get(m->dropped, v, 0);
    }
    if (nl == 0)
        (void)series_get(f, NULL, 0);
    return f;
}

struct gw_metrics *gw_metrics_new(void)
{
    struct gw_metrics *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    static const char *const lbl[] = {"metric", NULL};
    m->dropped = reg_family(m, T_COUNTER, DROPPED_NAME,
                            "Lookups of a new label set past the metric's series cap, "
                            "folded into its series whose labels are all \"other\".",
                            lbl, NULL, 0);
    if (!m->dropped) {
        gw_metrics_free(m);
        return NULL;
    }
    return m;
}

void gw_metrics_free(struct gw_metrics *m)
{
    if (!m)
        return;
    struct gw_metric *f = m->families;
    while (f) {
        struct gw_metric *n = f->next;
        family_free(f);
        f = n;
    }
    pthread_mutex_destroy(&m->lock);
    free(m);
}

void gw_metrics_on_collect(struct gw_metrics *m, gw_metrics_collect_cb cb, void *arg)
{
    if (!m)
        return;
    m->collect = cb;
    m->collect_arg = arg;
}

struct gw_metric *gw_metrics_counter(struct gw_metrics *m, const char *name, const char *help,
                                     const char *const *labels)
{
    return reg_family(m, T_COUNTER, name, help, labels, NULL, 0);
}

struct gw_metric *gw_metrics_gauge(struct gw_metrics *m, const char *name, const char *help,
                                   const char *const *labels)
{
    return reg_family(m, T_GAUGE, name, help, labels, NULL, 0);
}

struct gw_metric *gw_metrics_histogram(struct gw_metrics *m, const char *name, const char *help,
                                       const char *const *labels, const double *bounds,
                                       size_t nbounds)
{
    if (!bounds || !nbounds)
        return NULL;
    return reg_family(m, T_HISTOGRAM, name, help, labels, bounds, nbounds);
}

void gw_metric_set_cap(struct gw_metric *f, size_t cap)
{
    if (f)
        f->cap = cap ? cap : 1;
}

/* ------------------------------------------------------------ series */

static size_t value_len(const char *v)
{
    return v ? strnlen(v, GW_METRICS_MAX_VALUE) : 0;
}

static uint64_t hash_values(const struct gw_metric *f, const char *const *values)
{
    uint64_t h = GW_FNV1A_INIT;
    static const unsigned char sep = 0xff; /* never in a valid UTF-8 value */
    for (size_t i = 0; i < f->nlabels; i++) {
        if (values[i])
            h = gw_fnv1a(h, values[i], value_len(values[i]));
        h = gw_fnv1a(h, &sep, 1);
    }
    return gw_mix64(h);
}

static int same(const struct gw_series *s, uint64_t h, const char *const *values)
{
    if (s->hash != h)
        return 0;
    for (size_t i = 0; i < s->nvalues; i++) {
        size_t n = value_len(values[i]);
        if (n != s->lens[i] || (n && memcmp(s->values[i], values[i], n) != 0))
            return 0;
    }
    return 1;
}

static struct gw_series *chain_find(struct gw_series *s, uint64_t h, const char *const *values)
{
    for (; s; s = s->next)
        if (same(s, h, values))
            return s;
    return NULL;
}

/* One allocation: the series, its buckets, its values. */
static struct gw_series *series_new(const struct gw_metric *f, uint64_t h,
                                    const char *const *values)
{
    size_t nb = f->type == T_HISTOGRAM ? f->nbounds + 1 : 0;
    size_t strs = 0;
    for (size_t i = 0; i < f->nlabels; i++)
        strs += value_len(values[i]) + 1;
    size_t size = sizeof(struct gw_series) + nb * sizeof(_Atomic uint64_t) + strs;
    struct gw_series *s = calloc(1, size);
    if (!s)
        return NULL;
    s->family = f;
    s->hash = h;
    char *p = (char *)(s + 1);
    if (nb) {
        s->buckets = (_Atomic uint64_t *)p;
        p += nb * sizeof(_Atomic uint64_t);
    }
    s->nvalues = f->nlabels;
    for (size_t i = 0; i < f->nlabels; i++) {
        size_t n = value_len(values[i]);
        if (n)
            memcpy(p, values[i], n);
        p[n] = '\0';
        s->values[i] = p;
        s->lens[i] = n;
        p += n + 1;
    }
    return s;
}

/* The series of values; with capped, past the cap, NULL (the caller takes
 * the overflow series). */
static struct gw_series *series_get(struct gw_metric *f, const char *const *values, int capped)
{
    uint64_t h = hash_values(f, values);
    _Atomic(struct gw_series *) *slot = &f->table[h & (NBUCKETS - 1)];
    struct gw_series *s = chain_find(atomic_load_explicit(slot, memory_order_acquire), h, values);
    if (s)
        return s;
    if (capped && atomic_load_explicit(&f->nseries, memory_order_relaxed) >= f->cap)
        return NULL;
    pthread_mutex_lock(&f->lock);
    struct gw_series *head = atomic_load_explicit(slot, memory_order_relaxed);
    s = chain_find(head, h, values);
    if (!s && (!capped || atomic_load_explicit(&f->nseries, memory_order_relaxed) < f->cap)) {
        s = series_new(f, h, values);
        if (s) {
            s->next = head;
            s->next_all = f->all;
            f->all = s;
            atomic_store_explicit(slot, s, memory_order_release);
            if (capped)
                atomic_fetch_add_explicit(&f->nseries, 1, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&f->lock);
    return s;
}

struct gw_series *gw_metric_series(struct gw_metric *f, const char *const *values)
{
    if (!f)
        return NULL;
    static const char *const none[GW_METRICS_MAX_LABELS] = {0};
    struct gw_series *s = series_get(f, values ? values : none, 1);
    if (s)
        return s;
    if (atomic_load_explicit(&f->nseries, memory_order_relaxed) < f->cap)
        return NULL; /* out of memory, not over the cap */
    gw_counter_add(f->dropped, 1);
    s = atomic_load_explicit(&f->other, memory_order_acquire);
    if (!s) {
        /* Through the table, so that a real lookup of all-"other" values
         * finds the same series: one label set, one series. */
        const char *other[GW_METRICS_MAX_LABELS];
        for (size_t i = 0; i < f->nlabels; i++)
            other[i] = "other";
        s = series_get(f, other, 0);
        atomic_store_explicit(&f->other, s, memory_order_release);
    }
    return s;
}

void gw_counter_add(struct gw_series *s, uint64_t n)
{
    if (s)
        atomic_fetch_add_explicit(&s->value, n, memory_order_relaxed);
}

void gw_gauge_set(struct gw_series *s, double v)
{
    if (s)
        atomic_store_explicit(&s->value, bits_of(v), memory_order_relaxed);
}

void gw_gauge_add(struct gw_series *s, double v)
{
    if (s)
        atomic_add_double(&s->value, v);
}

static void hist_observe(const struct gw_metric *f, struct gw_series *s, double v)
{
    size_t i = 0;
    while (i < f->nbounds && v > f->bounds[i])
        i++;
    atomic_fetch_add_explicit(&s->buckets[i], 1, memory_order_relaxed);
    atomic_add_double(&s->sum, v);
}

void gw_metric_inc(struct gw_metric *f, const char *const *values, uint64_t n)
{
    if (f && f->type == T_COUNTER)
        gw_counter_add(gw_metric_series(f, values), n);
}

void gw_metric_set(struct gw_metric *f, const char *const *values, double v)
{
    if (f && f->type == T_GAUGE)
        gw_gauge_set(gw_metric_series(f, values), v);
}

void gw_metric_observe(struct gw_metric *f, const char *const *values, double v)
{
    struct gw_series *s = f && f->type == T_HISTOGRAM ? gw_metric_series(f, values) : NULL;
    if (s)
        hist_observe(f, s, v);
}

static uint64_t hist_count(const struct gw_series *s, size_t nb)
{
    uint64_t c = 0;
    for (size_t i = 0; i < nb; i++)
        c += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
    return c;
}

double gw_series_value(const struct gw_series *s)
{
    if (!s)
        return 0;
    if (s->buckets)
        return (double)hist_count(s, s->family->nbounds + 1);
    uint64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
    return s->family->type == T_GAUGE ? double_of(v) : (double)v;
}

/* ------------------------------------------------------------ rendering */

static int escape(struct gw_buf *o, const char *s, size_t n, int quotes)
{
    int rc = GW_OK;
    size_t run = 0;
    for (size_t i = 0; rc == GW_OK && i < n; i++) {
        const char *rep = s[i] == '\\'            ? "\\\\"
                          : s[i] == '\n'          ? "\\n"
                          : quotes && s[i] == '"' ? "\\\""
                                                  : NULL;
        if (!rep)
            continue;
        rc = gw_buf_append(o, s + run, i - run);
        if (rc == GW_OK)
            rc = gw_buf_appends(o, rep);
        run = i + 1;
    }
    return rc == GW_OK ? gw_buf_append(o, s + run, n - run) : rc;
}

/* {a="x",b="y"[,le="0.5"]}; nothing at all without labels. */
static int labels(struct gw_buf *o, const struct gw_metric *f, const struct gw_series *s,
                  const char *le)
{
    if (!f->nlabels && !le)
        return GW_OK;
    int rc = gw_buf_appends(o, "{");
    for (size_t i = 0; rc == GW_OK && i < f->nlabels; i++) {
        rc = gw_buf_printf(o, "%s%s=\"", i ? "," : "", f->labels[i]);
        if (rc == GW_OK)
            rc = escape(o, s->values[i], s->lens[i], 1);
        if (rc == GW_OK)
            rc = gw_buf_appends(o, "\"");
    }
    if (rc == GW_OK && le)
        rc = gw_buf_printf(o, "%sle=\"%s\"", f->nlabels ? "," : "", le);
    return rc == GW_OK ? gw_buf_appends(o, "}") : rc;
}

static int cmp_series(const void *a, const void *b)
{
    const struct gw_series *x = *(struct gw_series *const *)a;
    const struct gw_series *y = *(struct gw_series *const *)b;
    for (size_t i = 0; i < x->nvalues; i++) {
        int c = strcmp(x->values[i], y->values[i]);
        if (c)
            return c;
    }
    return 0;
}

static int cmp_family(const void *a, const void *b)
{
    return strcmp((*(struct gw_metric *const *)a)->name, (*(struct gw_metric *const *)b)->name);
}

static int render_series(struct gw_buf *o, const struct gw_metric *f, const struct gw_series *s)
{
    char num[40];
    int rc = GW_OK;
    if (f->type == T_COUNTER) {
        rc = gw_buf_appends(o, f->name);
        if (rc == GW_OK)
            rc = labels(o, f, s, NULL);
        if (rc == GW_OK)
            rc = gw_buf_printf(
                o, " %llu\n",
                (unsigned long long)atomic_load_explicit(&s->value, memory_order_relaxed));
        return rc;
    }
    if (f->type == T_GAUGE) {
        fmt_double(num, sizeof(num),
                   double_of(atomic_load_explicit(&s->value, memory_order_relaxed)));
        rc = gw_buf_appends(o, f->name);
        if (rc == GW_OK)
            rc = labels(o, f, s, NULL);
        return rc == GW_OK ? gw_buf_printf(o, " %s\n", num) : rc;
    }
    /* Cumulative buckets, and a count equal to the +Inf bucket's even while
     * other threads observe: both come from the same reads. */
    uint64_t cum = 0;
    for (size_t i = 0; rc == GW_OK && i <= f->nbounds; i++) {
        cum += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        if (i < f->nbounds)
            fmt_double(num, sizeof(num), f->bounds[i]);
        else
            snprintf(num, sizeof(num), "+Inf");
        rc = gw_buf_printf(o, "%s_bucket", f->name);
        if (rc == GW_OK)
            rc = labels(o, f, s, num);
        if (rc == GW_OK)
            rc = gw_buf_printf(o, " %llu\n", (unsigned long long)cum);
    }
    fmt_double(num, sizeof(num), double_of(atomic_load_explicit(&s->sum, memory_order_relaxed)));
    if (rc == GW_OK)
        rc = gw_buf_printf(o, "%s_sum", f->name);
    if (rc == GW_OK)
        rc = labels(o, f, s, NULL);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, " %s\n%s_count", num, f->name);
    if (rc == GW_OK)
        rc = labels(o, f, s, NULL);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, " %llu\n", (unsigned long long)cum);
    return rc;
}

static int render_family(struct gw_buf *o, struct gw_metric *f)
{
    static const char *const types[] = {"counter", "gauge", "histogram"};
    pthread_mutex_lock(&f->lock);
    size_t n = 0;
    for (struct gw_series *s = f->all; s; s = s->next_all)
        n++;
    struct gw_series **v = malloc((n ? n : 1) * sizeof(*v));
    n = 0;
    for (struct gw_series *s = f->all; v && s; s = s->next_all)
        v[n++] = s;
    pthread_mutex_unlock(&f->lock);
    if (!v)
        return GW_ENOMEM;
    qsort(v, n, sizeof(*v), cmp_series);
    int rc = gw_buf_printf(o, "# HELP %s ", f->name);
    if (rc == GW_OK)
        rc = escape(o, f->help, strlen(f->help), 0);
    if (rc == GW_OK)
        rc = gw_buf_printf(o, "\n# TYPE %s %s\n", f->name, types[f->type]);
    for (size_t i = 0; rc == GW_OK && i < n; i++)
        rc = render_series(o, f, v[i]);
    free(v);
    return rc;
}

void gw_metric_set_private(struct gw_metric *f)
{
    if (f)
        f->private_ = 1;
}

int gw_metrics_render(struct gw_metrics *m, struct gw_buf *out)
{
    return gw_metrics_render_ex(m, out, 1);
}

int gw_metrics_render_ex(struct gw_metrics *m, struct gw_buf *out, int with_private)
{
    if (!m)
        return GW_OK;
    if (m->collect)
        m->collect(m, m->collect_arg);
    pthread_mutex_lock(&m->lock);
    size_t n = 0;
    for (struct gw_metric *f = m->families; f; f = f->next)
        n++;
    struct gw_metric **v = malloc((n ? n : 1) * sizeof(*v));
    n = 0;
    for (struct gw_metric *f = m->families; v && f; f = f->next)
        v[n++] = f;
    pthread_mutex_unlock(&m->lock);
    if (!v)
        return GW_ENOMEM;
    qsort(v, n, sizeof(*v), cmp_family);
    int rc = GW_OK;
    for (size_t i = 0; rc == GW_OK && i < n; i++)
        if (with_private || !v[i]->private_)
            rc = render_family(out, v[i]);
    free(v);
    return rc;
}

int gw_metric_render(struct gw_metric *f, struct gw_buf *out)
{
    return f ? render_family(out, f) : GW_OK;
}
