/*
 * gw_metrics: counters, gauges and histograms with fixed label schemas, and
 * their Prometheus text exposition (format 0.0.4). Both planes keep one
 * registry per process; the data plane's worker threads update it
 * concurrently.
 *
 * A family (one metric name) has a fixed list of label names, given at
 * registration. A series is one set of label values; it is created by its
 * first lookup and lives as long as the registry. Lookups of an existing
 * series take no lock and allocate nothing (a hash table whose chains are
 * only ever prepended to, published with release stores); creating a series
 * takes the family's mutex. Updates are atomic operations on the series.
 *
 * Cardinality is bounded twice: callers pass label values from
 * configuration (routes, providers, models, failure classes, statuses), and
 * every family has a series cap (GW_METRICS_DEFAULT_CAP unless set). Past
 * the cap, a lookup of a new label set returns the family's overflow series,
 * whose every label is "other", and counts one in
 * llmgw_metrics_series_dropped_total{metric="<family>"}.
 *
 * Rendering is deterministic: families by name, series by label values.
 * Every verb takes NULL (a registry, a family or a series that could not be
 * allocated) as "do nothing", so instrumentation never has to check.
 */
#ifndef GW_METRICS_H
#define GW_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define GW_METRICS_DEFAULT_CAP 10000
/* Label names per family, and the length a label value is cut to. */
#define GW_METRICS_MAX_LABELS 8
#define GW_METRICS_MAX_VALUE 256

struct gw_buf;
struct gw_metrics;
struct gw_metric; /* a family */
struct gw_series; /* one label set of a family */

struct gw_metrics *gw_metrics_new(void);
void gw_metrics_free(struct gw_metrics *m);

/* Called at the start of every render, on the rendering thread: the place
 * to set gauges that are computed at scrape time. One per registry. */
typedef void (*gw_metrics_collect_cb)(struct gw_metrics *m, void *arg);
void gw_metrics_on_collect(struct gw_metrics *m, gw_metrics_collect_cb cb, void *arg);

/*
 * Registration: name and help are copied; labels is a NULL-terminated list
 * of label names (NULL: none), copied. A histogram's bounds are its buckets'
 * upper bounds, strictly increasing and finite (+Inf is implied), copied.
 * Returns NULL on a bad argument, a duplicate name or no memory. A family
 * without labels has its one series from the start. Not for the hot path:
 * register everything at startup.
 */
struct gw_metric *gw_metrics_counter(struct gw_metrics *m, const char *name, const char *help,
                                     const char *const *labels);
struct gw_metric *gw_metrics_gauge(struct gw_metrics *m, const char *name, const char *help,
                                   const char *const *labels);
struct gw_metric *gw_metrics_histogram(struct gw_metrics *m, const char *name, const char *help,
                                       const char *const *labels, const double *bounds,
                                       size_t nbounds);
/* The family's series cap (default GW_METRICS_DEFAULT_CAP; at least 1). */
void gw_metric_set_cap(struct gw_metric *f, size_t cap);

/*
 * The series for values (one per label name, in the schema's order; NULL
 * values read as ""; values longer than GW_METRICS_MAX_VALUE are cut). The
 * result is owned by the registry and valid until gw_metrics_free. Past the
 * cap it is the overflow series; NULL only when memory ran out (or f is
 * NULL). Thread-safe.
 */
struct gw_series *gw_metric_series(struct gw_metric *f, const char *const *values);

/* Counters only go up. */
void gw_counter_add(struct gw_series *s, uint64_t n);
void gw_gauge_set(struct gw_series *s, double v);
void gw_gauge_add(struct gw_series *s, double v);

/* Lookup and update in one call, for the common case. */
void gw_metric_inc(struct gw_metric *f, const char *const *values, uint64_t n);
void gw_metric_set(struct gw_metric *f, const char *const *values, double v);
void gw_metric_observe(struct gw_metric *f, const char *const *values, double v);

/* Reads, for tests and collect callbacks: a counter's or gauge's value, a
 * histogram's count. */
double gw_series_value(const struct gw_series *s);

/* Appends the whole exposition to out (0, or GW_ENOMEM/GW_ELIMIT from out:
 * what was appended so far stays). The content type to serve it with: */
#define GW_METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"
int gw_metrics_render(struct gw_metrics *m, struct gw_buf *out) __attribute__((warn_unused_result));
/* A family some scrapes may not see (a business figure behind a token). */
void gw_metric_set_private(struct gw_metric *f);
/* gw_metrics_render, leaving the private families out unless with_private. */
int gw_metrics_render_ex(struct gw_metrics *m, struct gw_buf *out, int with_private)
    __attribute__((warn_unused_result));
/* One family's exposition, appended to out (same results), without the
 * registry's collect callback: for a registry built for one scrape, whose
 * own llmgw_metrics_series_dropped_total would repeat the process's. */
int gw_metric_render(struct gw_metric *f, struct gw_buf *out) __attribute__((warn_unused_result));

#endif
