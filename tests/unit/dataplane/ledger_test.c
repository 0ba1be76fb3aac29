/* Tests for dataplane/quota/dp_ledger.c's sending side: how held rows become
 * Report messages (one LedgerRow, or a LedgerBatch once the control plane
 * takes them), their seqs, the window of rows in flight, the cumulative
 * ack, and a new stream sending everything unacknowledged again. Rows are
 * held in memory (no spool directory). */
#include <CUnit/CUnit.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dp_ledger.h"
#include "gw_error.h"
#include "llmgw/v1/control.pb-c.h"

static int suite_init(void)
{
    return dp_ledger_init(NULL, 1u << 20) == GW_OK ? 0 : 1;
}

static int suite_clean(void)
{
    dp_ledger_shutdown();
    return 0;
}

static void record(int i)
{
    struct dp_ledger_row r;
    memset(&r, 0, sizeof(r));
    snprintf(r.request_id, sizeof(r.request_id), "req-%d", i);
    snprintf(r.attempt_id, sizeof(r.attempt_id), "req-%d.1", i);
    snprintf(r.provider, sizeof(r.provider), "mock");
    snprintf(r.model, sizeof(r.model), "m1");
    r.attempt = 1;
    r.status = 200;
    r.at_ms = 1767225600000LL + i;
    r.output_tokens = i;
    CU_ASSERT_EQUAL(dp_ledger_record(&r), GW_OK);
}

/* The next message, unpacked; NULL when none. *rows: what next said. */
static Llmgw__V1__ReportMessage *next(size_t window, size_t max_rows, int *rows)
{
    unsigned char *b = NULL;
    size_t n = 0;
    *rows = dp_ledger_next("dp-1", window, max_rows, &b, &n);
    if (*rows <= 0)
        return NULL;
    Llmgw__V1__ReportMessage *m = llmgw__v1__report_message__unpack(NULL, n, b);
    free(b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_STRING_EQUAL(m->replica_id, "dp-1");
    return m;
}

/* The row at i of m (a LedgerRow or a LedgerBatch). */
static const Llmgw__V1__LedgerRow *row_at(const Llmgw__V1__ReportMessage *m, size_t i)
{
    if (m->body_case == LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW)
        return i == 0 ? m->ledger_row : NULL;
    CU_ASSERT_EQUAL_FATAL(m->body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_BATCH);
    return i < m->ledger_batch->n_rows ? m->ledger_batch->rows[i] : NULL;
}

static void test_single_batch_window_ack(void)
{
    for (int i = 1; i <= 10; i++)
        record(i);
    int k;
    /* An older control plane (max 0): one LedgerRow a message. */
    Llmgw__V1__ReportMessage *m = next(2048, 0, &k);
    CU_ASSERT_EQUAL(k, 1);
    CU_ASSERT_EQUAL(m->body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW);
    CU_ASSERT_EQUAL(m->ledger_row->seq, 1);
    CU_ASSERT_STRING_EQUAL(m->ledger_row->attempt_id, "req-1.1");
    llmgw__v1__report_message__free_unpacked(m, NULL);
    /* A batch of up to 4, in order, seqs following on. */
    m = next(2048, 4, &k);
    CU_ASSERT_EQUAL(k, 4);
    CU_ASSERT_EQUAL(m->body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_BATCH);
    CU_ASSERT_EQUAL(m->ledger_batch->n_rows, 4);
    for (size_t i = 0; i < 4; i++) {
        const Llmgw__V1__LedgerRow *r = row_at(m, i);
        char want[32];
        snprintf(want, sizeof(want), "req-%zu.1", i + 2);
        CU_ASSERT_EQUAL(r->seq, i + 2);
        CU_ASSERT_STRING_EQUAL(r->attempt_id, want);
        CU_ASSERT_EQUAL(r->output_tokens, (int64_t)i + 2);
    }
    llmgw__v1__report_message__free_unpacked(m, NULL);
    /* The window: 5 in flight, at most 7 → 2 more, then nothing. */
    m = next(7, 100, &k);
    CU_ASSERT_EQUAL(k, 2);
    CU_ASSERT_EQUAL(row_at(m, 0)->seq, 6);
    CU_ASSERT_EQUAL(row_at(m, 1)->seq, 7);
    llmgw__v1__report_message__free_unpacked(m, NULL);
    CU_ASSERT_PTR_NULL(next(7, 100, &k));
    CU_ASSERT_EQUAL(k, 0);
    /* Acked through 5: the window opens; what is left goes. */
    dp_ledger_acked(5);
    struct dp_ledger_stats st;
    dp_ledger_stats(&st);
    CU_ASSERT_EQUAL(st.pending_rows, 5);
    CU_ASSERT_EQUAL(st.acked_rows, 5);
    m = next(7, 100, &k);
    CU_ASSERT_EQUAL(k, 3);
    CU_ASSERT_EQUAL(row_at(m, 0)->seq, 8);
    CU_ASSERT_STRING_EQUAL(row_at(m, 2)->attempt_id, "req-10.1");
    llmgw__v1__report_message__free_unpacked(m, NULL);
    /* A batch of one row is a LedgerRow. */
    record(11);
    m = next(2048, 100, &k);
    CU_ASSERT_EQUAL(k, 1);
    CU_ASSERT_EQUAL(m->body_case, LLMGW__V1__REPORT_MESSAGE__BODY_LEDGER_ROW);
    CU_ASSERT_EQUAL(m->ledger_row->seq, 11);
    llmgw__v1__report_message__free_unpacked(m, NULL);
    /* A new stream: the 6 unacknowledged rows again, seqs from 1. */
    dp_ledger_stream_reset();
    m = next(2048, 100, &k);
    CU_ASSERT_EQUAL(k, 6);
    CU_ASSERT_EQUAL(row_at(m, 0)->seq, 1);
    CU_ASSERT_STRING_EQUAL(row_at(m, 0)->attempt_id, "req-6.1");
    CU_ASSERT_EQUAL(row_at(m, 5)->seq, 6);
    CU_ASSERT_STRING_EQUAL(row_at(m, 5)->attempt_id, "req-11.1");
    llmgw__v1__report_message__free_unpacked(m, NULL);
    dp_ledger_acked(6);
    dp_ledger_stats(&st);
    CU_ASSERT_EQUAL(st.pending_rows, 0);
    CU_ASSERT_EQUAL(st.inflight_rows, 0);
}

/* A cache hit's row carries the flag and the saved cost; has_saved says
 * the saved cost is known, and only a hit saves anything. */
static void test_cache_hit_fields(void)
{
    static const struct {
        int hit, has_saved;
        int64_t saved;
        int want_has;
        int64_t want_saved;
    } rows[] = {
        {1, 1, 123456789012345LL, 1, 123456789012345LL},
        {1, 0, 777, 0, 0}, /* the original's cost was unknown */
        {0, 1, 555, 0, 0}, /* not a hit: nothing saved */
        {0, 0, 0, 0, 0},
    };
    size_t n = sizeof(rows) / sizeof(rows[0]);
    for (size_t i = 0; i < n; i++) {
        struct dp_ledger_row r;
        memset(&r, 0, sizeof(r));
        snprintf(r.request_id, sizeof(r.request_id), "hit-%zu", i);
        snprintf(r.attempt_id, sizeof(r.attempt_id), "hit-%zu.1", i);
        snprintf(r.provider, sizeof(r.provider), "mock");
        snprintf(r.model, sizeof(r.model), "m1");
        r.attempt = 1;
        r.status = 200;
        r.at_ms = 1767225600000LL;
        r.cache_hit = rows[i].hit;
        r.has_saved = rows[i].has_saved;
        r.saved_picodollars = rows[i].saved;
        CU_ASSERT_EQUAL(dp_ledger_record(&r), GW_OK);
    }
    int k;
    Llmgw__V1__ReportMessage *m = next(2048, 100, &k);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(k, (int)n);
    uint64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        const Llmgw__V1__LedgerRow *r = row_at(m, i);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        CU_ASSERT_EQUAL(r->cache_hit, rows[i].hit);
        CU_ASSERT_EQUAL(r->has_saved, rows[i].want_has);
        CU_ASSERT_EQUAL(r->saved_picodollars, rows[i].want_saved);
        last = r->seq;
    }
    llmgw__v1__report_message__free_unpacked(m, NULL);
    dp_ledger_acked(last);
    struct dp_ledger_stats st;
    dp_ledger_stats(&st);
    CU_ASSERT_EQUAL(st.pending_rows, 0);
}

static CU_TestInfo tests[] = {
    {"one row, batches, the window, the ack, a new stream", test_single_batch_window_ack},
    {"a cache hit's flag and saved cost", test_cache_hit_fields},
    CU_TEST_INFO_NULL,
};

#define UNIT_SUITE_INIT suite_init
#define UNIT_SUITE_CLEAN suite_clean
#include "unit_main.h"
