/* Tests for common/gw_metrics.c: series, the cap, the exposition, threads. */
#include <CUnit/CUnit.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_metrics.h"

static char *render(struct gw_metrics *m, struct gw_buf *b)
{
    gw_buf_reset(b);
    CU_ASSERT_EQUAL(gw_metrics_render(m, b), GW_OK);
    return b->data ? b->data : "";
}

static void test_exposition(void)
{
    struct gw_metrics *m = gw_metrics_new();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const char *const rl[] = {"route", "status", NULL};
    struct gw_metric *req = gw_metrics_counter(m, "t_requests_total", "Requests.\nAll.", rl);
    struct gw_metric *g = gw_metrics_gauge(m, "t_open", "Open \\ things.", NULL);
    static const double b[] = {0.1, 0.5, 2.5};
    static const char *const hl[] = {"route", NULL};
    struct gw_metric *h = gw_metrics_histogram(m, "t_seconds", "Seconds.", hl, b, 3);
    CU_ASSERT_PTR_NOT_NULL_FATAL(req);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_PTR_NOT_NULL_FATAL(h);
    /* a duplicate name, a bad name, a histogram with le, unsorted bounds */
    CU_ASSERT_PTR_NULL(gw_metrics_gauge(m, "t_open", "x", NULL));
    CU_ASSERT_PTR_NULL(gw_metrics_gauge(m, "9bad", "x", NULL));
    static const char *const le[] = {"le", NULL};
    CU_ASSERT_PTR_NULL(gw_metrics_histogram(m, "t_h2", "x", le, b, 3));
    static const double bad[] = {1, 1};
    CU_ASSERT_PTR_NULL(gw_metrics_histogram(m, "t_h3", "x", NULL, bad, 2));

    gw_metric_inc(req, (const char *const[]){"fast", "200"}, 2);
    gw_metric_inc(req, (const char *const[]){"fast", "200"}, 1);
    gw_metric_inc(req, (const char *const[]){"a\"b\\c\nd", "502"}, 1);
    gw_gauge_set(gw_metric_series(g, NULL), 3);
    gw_gauge_add(gw_metric_series(g, NULL), -0.5);
    gw_metric_observe(h, (const char *const[]){"fast"}, 0.1); /* le is inclusive */
    gw_metric_observe(h, (const char *const[]){"fast"}, 1.0);
    gw_metric_observe(h, (const char *const[]){"fast"}, 100);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    const char *want =
        "# HELP llmgw_metrics_series_dropped_total Lookups of a new label set past the "
        "metric's series cap, folded into its series whose labels are all \"other\".\n"
        "# TYPE llmgw_metrics_series_dropped_total counter\n"
        "llmgw_metrics_series_dropped_total{metric=\"t_open\"} 0\n"
        "llmgw_metrics_series_dropped_total{metric=\"t_requests_total\"} 0\n"
        "llmgw_metrics_series_dropped_total{metric=\"t_seconds\"} 0\n"
        "# HELP t_open Open \\\\ things.\n"
        "# TYPE t_open gauge\n"
        "t_open 2.5\n"
        "# HELP t_requests_total Requests.\\nAll.\n"
        "# TYPE t_requests_total counter\n"
        "t_requests_total{route=\"a\\\"b\\\\c\\nd\",status=\"502\"} 1\n"
        "t_requests_total{route=\"fast\",status=\"200\"} 3\n"
        "# HELP t_seconds Seconds.\n"
        "# TYPE t_seconds histogram\n"
        "t_seconds_bucket{route=\"fast\",le=\"0.1\"} 1\n"
        "t_seconds_bucket{route=\"fast\",le=\"0.5\"} 1\n"
        "t_seconds_bucket{route=\"fast\",le=\"2.5\"} 2\n"
        "t_seconds_bucket{route=\"fast\",le=\"+Inf\"} 3\n"
        "t_seconds_sum{route=\"fast\"} 101.1\n"
        "t_seconds_count{route=\"fast\"} 3\n";
    CU_ASSERT_STRING_EQUAL(render(m, &out), want);
    /* the same twice: deterministic */
    CU_ASSERT_STRING_EQUAL(render(m, &out), want);
    CU_ASSERT_EQUAL(gw_series_value(gw_metric_series(h, (const char *const[]){"fast"})), 3);
    CU_ASSERT_EQUAL(gw_series_value(gw_metric_series(g, NULL)), 2.5);
    gw_buf_free(&out);
    gw_metrics_free(m);
}

static void test_cap(void)
{
    struct gw_metrics *m = gw_metrics_new();
    static const char *const l[] = {"model", "class", NULL};
    struct gw_metric *c = gw_metrics_counter(m, "t_total", "T.", l);
    gw_metric_set_cap(c, 3);
    char name[32];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        gw_metric_inc(c, (const char *const[]){name, "x"}, 1);
    }
    /* m0..m2 are series; m3..m9 went to the one "other" series */
    gw_metric_inc(c, (const char *const[]){"m1", "x"}, 1);
    CU_ASSERT_EQUAL(gw_series_value(gw_metric_series(c, (const char *const[]){"m1", "x"})), 2);
    struct gw_series *o = gw_metric_series(c, (const char *const[]){"other", "other"});
    CU_ASSERT_EQUAL(gw_series_value(o), 7);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    const char *r = render(m, &out);
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "t_total{model=\"other\",class=\"other\"} 7\n"));
    /* 7 folded; looking up the other series itself is no drop */
    CU_ASSERT_PTR_NOT_NULL(strstr(r, "llmgw_metrics_series_dropped_total{metric=\"t_total\"} 7\n"));
    /* one line for the other series, never two */
    CU_ASSERT_PTR_NULL(strstr(strstr(r, "class=\"other\"") + 1, "class=\"other\""));
    gw_buf_free(&out);
    gw_metrics_free(m);
}

#define NTHREADS 4
#define NOPS 20000

struct thr {
    struct gw_metric *c, *h;
    int id;
};

static void *hammer(void *arg)
{
    struct thr *t = arg;
    char v[16];
    for (int i = 0; i < NOPS; i++) {
        snprintf(v, sizeof(v), "v%d", i % 50);
        gw_metric_inc(t->c, (const char *const[]){v}, 1);
        gw_metric_observe(t->h, NULL, (double)(i % 4));
    }
    return NULL;
}

static void test_threads(void)
{
    struct gw_metrics *m = gw_metrics_new();
    static const char *const l[] = {"v", NULL};
    static const double b[] = {1, 2};
    struct thr t[NTHREADS];
    pthread_t th[NTHREADS];
    struct gw_metric *c = gw_metrics_counter(m, "t_total", "T.", l);
    struct gw_metric *h = gw_metrics_histogram(m, "t_h", "H.", NULL, b, 2);
    for (int i = 0; i < NTHREADS; i++) {
        t[i] = (struct thr){c, h, i};
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, hammer, &t[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(th[i], NULL);
    double total = 0;
    char v[16];
    for (int i = 0; i < 50; i++) {
        snprintf(v, sizeof(v), "v%d", i);
        total += gw_series_value(gw_metric_series(c, (const char *const[]){v}));
    }
    CU_ASSERT_EQUAL(total, (double)NTHREADS * NOPS);
    CU_ASSERT_EQUAL(gw_series_value(gw_metric_series(h, NULL)), (double)NTHREADS * NOPS);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    /* sum of 0,1,2,3 repeated: 1.5 per observation */
    char want[80];
    snprintf(want, sizeof(want), "t_h_sum %d\n", NTHREADS * NOPS * 3 / 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(render(m, &out), want));
    gw_buf_free(&out);
    gw_metrics_free(m);
}

static void test_null_safe(void)
{
    gw_metric_inc(NULL, NULL, 1);
    gw_metric_observe(NULL, NULL, 1);
    gw_gauge_set(NULL, 1);
    gw_counter_add(gw_metric_series(NULL, NULL), 1);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(gw_metrics_render(NULL, &out), GW_OK);
    CU_ASSERT_EQUAL(out.len, 0);
    gw_buf_free(&out);
}

/* One family alone: its HELP, TYPE and series, without the registry's
 * dropped counter or its collect callback. */
static int collected;
static void count_collect(struct gw_metrics *m, void *arg)
{
    (void)m;
    (void)arg;
    collected++;
}

static void test_one_family(void)
{
    struct gw_metrics *m = gw_metrics_new();
    gw_metrics_on_collect(m, count_collect, NULL);
    static const char *const l[] = {"limit", NULL};
    struct gw_metric *g = gw_metrics_gauge(m, "t_amount", "Amounts.", l);
    gw_metric_set(g, (const char *const[]){"b"}, 2);
    gw_metric_set(g, (const char *const[]){"a"}, 5e12);
    struct gw_buf out;
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL_FATAL(gw_metric_render(g, &out), GW_OK);
    CU_ASSERT_STRING_EQUAL(out.data, "# HELP t_amount Amounts.\n# TYPE t_amount gauge\n"
                                     "t_amount{limit=\"a\"} 5000000000000\n"
                                     "t_amount{limit=\"b\"} 2\n");
    CU_ASSERT_EQUAL(collected, 0);
    CU_ASSERT_EQUAL(gw_metric_render(NULL, &out), GW_OK);
    gw_buf_free(&out);
    gw_metrics_free(m);
}

static CU_TestInfo tests[] = {
    {"exposition: help, type, escaping, buckets, order", test_exposition},
    {"series cap: one other series and the dropped counter", test_cap},
    {"concurrent updates and series creation", test_threads},
    {"NULL families and series are no-ops", test_null_safe},
    {"one family's exposition alone", test_one_family},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
