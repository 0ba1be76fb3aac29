/* The gRPC server's bounded replica table (controlplane/grpc/cp_replicas.h). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <string.h>

#include "cp_replicas.h"

static void test_found_again(void)
{
    struct cp_replicas t;
    cp_replicas_init(&t, 3);
    struct cp_replica *a = cp_replicas_get(&t, "a", 10);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_EQUAL(cp_replicas_get(&t, "a", 20), a);
    CU_ASSERT_EQUAL(a->seen_ms, 20);
    CU_ASSERT_EQUAL(t.n, 1);
    cp_replicas_clear(&t);
}

static void test_full_evicts_oldest_disconnected(void)
{
    struct cp_replicas t;
    cp_replicas_init(&t, 3);
    struct cp_replica *a = cp_replicas_get(&t, "a", 10);
    struct cp_replica *b = cp_replicas_get(&t, "b", 5);
    struct cp_replica *c = cp_replicas_get(&t, "c", 1);
    CU_ASSERT_FATAL(a && b && c);
    c->streams = 1; /* oldest, but connected: kept */
    struct cp_replica *d = cp_replicas_get(&t, "d", 30);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    CU_ASSERT_EQUAL(t.n, 3);
    int have_a = 0, have_b = 0, have_c = 0;
    for (struct cp_replica *r = t.head; r; r = r->next) {
        have_a |= !strcmp(r->id, "a");
        have_b |= !strcmp(r->id, "b");
        have_c |= !strcmp(r->id, "c");
    }
    CU_ASSERT(have_a && !have_b && have_c);
    cp_replicas_clear(&t);
}

static void test_full_all_connected_refuses(void)
{
    struct cp_replicas t;
    cp_replicas_init(&t, 2);
    struct cp_replica *a = cp_replicas_get(&t, "a", 1);
    struct cp_replica *b = cp_replicas_get(&t, "b", 2);
    CU_ASSERT_FATAL(a && b);
    a->streams = b->streams = 1;
    CU_ASSERT_PTR_NULL(cp_replicas_get(&t, "c", 3));
    CU_ASSERT_PTR_NULL(cp_replicas_get(&t, "d", 4));
    CU_ASSERT_EQUAL(t.n, 2);
    CU_ASSERT_PTR_EQUAL(cp_replicas_get(&t, "a", 5), a); /* known ones still found */
    b->streams = 0;
    CU_ASSERT_PTR_NOT_NULL(cp_replicas_get(&t, "c", 6));
    CU_ASSERT_EQUAL(t.n, 2);
    cp_replicas_clear(&t);
}

static void test_many_ids_stay_bounded(void)
{
    struct cp_replicas t;
    cp_replicas_init(&t, CP_REPLICAS_CAP);
    char id[32];
    for (int i = 0; i < 3 * CP_REPLICAS_CAP; i++) {
        snprintf(id, sizeof(id), "r%d", i);
        CU_ASSERT_PTR_NOT_NULL(cp_replicas_get(&t, id, i));
    }
    CU_ASSERT_EQUAL(t.n, CP_REPLICAS_CAP);
    cp_replicas_clear(&t);
}

static void test_peer_name_drops_port(void)
{
    char out[CP_REPLICA_ID_MAX + 1];
    cp_replicas_peer_name("ipv4:10.0.0.1:5000", out, sizeof(out));
    CU_ASSERT_STRING_EQUAL(out, "peer:ipv4:10.0.0.1");
    cp_replicas_peer_name("ipv6:[::1]:41234", out, sizeof(out));
    CU_ASSERT_STRING_EQUAL(out, "peer:ipv6:[::1]");
    cp_replicas_peer_name("unix:/run/x.sock", out, sizeof(out));
    CU_ASSERT_STRING_EQUAL(out, "peer:unix:/run/x.sock");
    cp_replicas_peer_name(NULL, out, sizeof(out));
    CU_ASSERT_STRING_EQUAL(out, "peer:?");
}

static CU_TestInfo tests[] = {
    {"a known id is found again", test_found_again},
    {"full: the oldest entry without streams is evicted", test_full_evicts_oldest_disconnected},
    {"full, every entry connected: not tracked", test_full_all_connected_refuses},
    {"3x the cap of ids: the table stays at the cap", test_many_ids_stay_bounded},
    {"a peer's name drops the port", test_peer_name_drops_port},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
