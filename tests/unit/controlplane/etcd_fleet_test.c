/* Tests for controlplane/fleet/cp_etcd.c without an etcd: a replica alone
 * leads itself and runs its jobs; the blob API (publish, withdraw, collect,
 * watch) gives its own blobs; with an etcd that cannot be reached it is not
 * the leader, says etcd is down and still serves its own blobs. The
 * election against a real etcd: tests/integration/etcd_leader.test.mjs. */
#include <CUnit/CUnit.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <string.h>

#include "cp_etcd.h"
#include "gw_error.h"

struct seen {
    int leader_calls, leader;
    int blob_calls;
    size_t n;
    char first[64];
    int job_runs;
};

static void on_leader(void *arg, int leader)
{
    struct seen *s = arg;
    s->leader_calls++;
    s->leader = leader;
}

static void on_blobs(void *arg, const char *kind, const struct cp_etcd_blob *b, size_t n)
{
    struct seen *s = arg;
    CU_ASSERT_STRING_EQUAL(kind, "health");
    s->blob_calls++;
    s->n = n;
    snprintf(s->first, sizeof(s->first), "%s", n ? b[0].data : "");
}

static int job(void *arg, char *err, size_t errlen)
{
    struct seen *s = arg;
    s->job_runs++;
    snprintf(err, errlen, "the first run fails");
    return s->job_runs == 1 ? GW_EIO : GW_OK;
}

static void spin(struct event_base *base)
{
    for (int i = 0; i < 5; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

static void test_alone(void)
{
    struct event_base *base = event_base_new();
    char err[200];
    struct cp_etcd_opts o = {.replica_id = "cp-1", .member = "{\"admin\":\"127.0.0.1:1\"}"};
    struct cp_etcd *e = cp_etcd_new(base, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    struct seen s = {0};
    cp_etcd_on_leader(e, on_leader, &s);
    CU_ASSERT_EQUAL(cp_etcd_job_add(e, "test_job", 3600000, 1, job, &s), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_job_add(e, "test_job", 1000, 0, job, &s), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_etcd_job_add(e, "", 1000, 0, job, &s), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_etcd_watch(e, "health", on_blobs, &s), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_watch(e, "health", on_blobs, &s), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_etcd_watch(e, "leader", NULL, NULL), GW_EINVAL);
    CU_ASSERT_EQUAL(cp_etcd_watch(e, "Bad/Kind", NULL, NULL), GW_EINVAL);
    CU_ASSERT_TRUE(cp_etcd_is_leader(e));
    CU_ASSERT_EQUAL(cp_etcd_up(e), -1);
    char id[64];
    CU_ASSERT_STRING_EQUAL(cp_etcd_leader(e, id, sizeof(id)), "cp-1");
    spin(base);
    CU_ASSERT_EQUAL(s.leader_calls, 1);
    CU_ASSERT_EQUAL(s.leader, 1);
    CU_ASSERT_EQUAL(s.blob_calls, 1); /* the first delivery: empty */
    CU_ASSERT_EQUAL(s.n, 0);
    /* The job ran on becoming leader, failed, and ran again 1 ms later. */
    struct timeval tv = {0, 20000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    CU_ASSERT_EQUAL(s.job_runs, 2);

    CU_ASSERT_EQUAL(cp_etcd_publish(e, "health", NULL, "{\"a\":1}", 7), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_publish(e, "health", "dp-9", "x", 1), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_publish(e, "health", "bad name", "x", 1), GW_EINVAL);
    spin(base);
    CU_ASSERT_EQUAL(s.blob_calls, 2); /* coalesced */
    CU_ASSERT_EQUAL(s.n, 2);
    CU_ASSERT_STRING_EQUAL(s.first, "{\"a\":1}"); /* "cp-1" sorts first */
    struct cp_etcd_blob *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(cp_etcd_blobs(e, "health", &b, &n), GW_OK);
    CU_ASSERT_EQUAL_FATAL(n, 2);
    CU_ASSERT_STRING_EQUAL(b[0].name, "cp-1");
    CU_ASSERT_STRING_EQUAL(b[1].name, "dp-9");
    CU_ASSERT_EQUAL(b[1].len, 1);
    CU_ASSERT_TRUE(b[0].self && b[1].self);
    cp_etcd_blobs_free(b, n);
    CU_ASSERT_EQUAL(cp_etcd_unpublish(e, "health", "dp-9"), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_unpublish(e, "health", "dp-9"), GW_ENOTFOUND);
    spin(base);
    CU_ASSERT_EQUAL(s.blob_calls, 3);
    CU_ASSERT_EQUAL(s.n, 1);
    CU_ASSERT_EQUAL(cp_etcd_blobs(e, "nobody-watches", &b, &n), GW_EINVAL);

    json_t *st = cp_etcd_status(e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(st);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(st, "replica_id")), "cp-1");
    CU_ASSERT_TRUE(json_is_true(json_object_get(json_object_get(st, "leader"), "self")));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(st, "etcd"), "state")),
                           "off");
    json_t *m = json_array_get(json_object_get(st, "members"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "id")), "cp-1");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "admin")), "127.0.0.1:1");
    json_t *j = json_array_get(json_object_get(st, "jobs"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "name")), "test_job");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "runs")), 2);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "failures")), 1);
    CU_ASSERT_TRUE(json_is_true(json_object_get(j, "last_ok")));
    CU_ASSERT_TRUE(json_is_null(json_object_get(j, "last_error")));
    json_decref(st);
    cp_etcd_free(e);
    event_base_free(base);
}

static void test_unreachable(void)
{
    struct event_base *base = event_base_new();
    char err[200];
    struct cp_etcd_opts o = {
        .endpoints = "http://127.0.0.1:1", .replica_id = "cp-2", .lease_ttl_s = 3};
    struct cp_etcd *e = cp_etcd_new(base, &o, err, sizeof(err));
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(cp_etcd_publish(e, "health", NULL, "mine", 4), GW_OK);
    CU_ASSERT_EQUAL(cp_etcd_watch(e, "health", NULL, NULL), GW_OK);
    struct timeval tv = {0, 300000};
    event_base_loopexit(base, &tv);
    event_base_dispatch(base);
    CU_ASSERT_FALSE(cp_etcd_is_leader(e));
    CU_ASSERT_EQUAL(cp_etcd_up(e), 0);
    struct cp_etcd_blob *b;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(cp_etcd_blobs(e, "health", &b, &n), GW_OK);
    CU_ASSERT_EQUAL_FATAL(n, 1);
    CU_ASSERT_STRING_EQUAL(b[0].data, "mine");
    cp_etcd_blobs_free(b, n);
    json_t *st = cp_etcd_status(e);
    json_t *et = json_object_get(st, "etcd");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(et, "state")), "down");
    CU_ASSERT_PTR_NOT_NULL(
        strstr(json_string_value(json_object_get(et, "last_error")), "unreachable"));
    json_decref(st);
    cp_etcd_free(e);
    event_base_free(base);
    /* Options it refuses. */
    o.replica_id = "no/slash";
    CU_ASSERT_PTR_NULL(cp_etcd_new(base, &o, err, sizeof(err)));
    o.replica_id = "ok";
    o.lease_ttl_s = 1;
    CU_ASSERT_PTR_NULL(cp_etcd_new(base, &o, err, sizeof(err)));
}

static CU_TestInfo tests[] = {
    {"alone: leader of itself, jobs, blobs", test_alone},
    {"etcd unreachable: down, not leader, own blobs", test_unreachable},
    CU_TEST_INFO_NULL,
};

static int suite_init(void)
{
    return evthread_use_pthreads();
}
#define UNIT_SUITE_INIT suite_init

#include "unit_main.h"
