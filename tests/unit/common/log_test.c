/* Tests for gw_log's access batch (gw_log.h): lines held for one turn of
 * the loop, in order, written when the turn's callbacks are done, at once
 * past the batch's size, and by free. */
#include <CUnit/CUnit.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gw_buf.h"
#include "gw_error.h"
#include "gw_log.h"

static char path[64];

/* The access file's size. */
static long file_size(void)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static char *file_text(void)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *t = calloc(1, 1u << 20);
    size_t n = t ? fread(t, 1, (1u << 20) - 1, f) : 0;
    (void)n;
    fclose(f);
    return t;
}

static int open_file(void)
{
    snprintf(path, sizeof(path), "/tmp/llmgw-logtest-XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    close(fd);
    return gw_log_open_access(path) == GW_OK ? 0 : -1;
}

static void line(struct gw_buf *b, const char *members)
{
    gw_buf_reset(b);
    CU_ASSERT_EQUAL(gw_log_access_line(b, "access", members, strlen(members)), GW_OK);
}

/* A callback of the same turn adds a line: it joins the batch. */
static void add_later(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    line(&b, "\"n\":3");
    gw_log_batch_add(arg, &b);
    gw_buf_free(&b);
}

/* An access file, a loop, a batch on it and a line buffer. */
struct fixture {
    struct event_base *base;
    struct gw_log_batch batch;
    struct gw_buf b;
};

static int fixture_open(struct fixture *f)
{
    gw_buf_init(&f->b, 0);
    f->base = event_base_new();
    return open_file() == 0 && f->base && gw_log_batch_init(&f->batch, f->base) == GW_OK ? 0 : -1;
}

static void fixture_close(struct fixture *f)
{
    gw_log_batch_free(&f->batch);
    gw_buf_free(&f->b);
    event_base_free(f->base);
    CU_ASSERT_EQUAL(gw_log_open_access("-"), GW_OK);
    unlink(path);
}

static void test_one_turn(void)
{
    struct fixture f;
    CU_ASSERT_EQUAL_FATAL(fixture_open(&f), 0);
    line(&f.b, "\"n\":1");
    gw_log_batch_add(&f.batch, &f.b);
    line(&f.b, "\"n\":2");
    gw_log_batch_add(&f.batch, &f.b);
    struct event *later = event_new(f.base, -1, 0, add_later, &f.batch);
    event_active(later, 0, 0);
    /* Held until the loop turns. */
    CU_ASSERT_EQUAL(file_size(), 0);
    CU_ASSERT(event_base_loop(f.base, EVLOOP_NONBLOCK) >= 0);
    char *t = file_text();
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    char *p1 = strstr(t, "\"n\":1}"), *p2 = strstr(t, "\"n\":2}"), *p3 = strstr(t, "\"n\":3}");
    CU_ASSERT(p1 && p2 && p3 && p1 < p2 && p2 < p3);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\"msg\":\"access\""));
    size_t nl = 0;
    for (char *c = t; *c; c++)
        nl += *c == '\n';
    CU_ASSERT_EQUAL(nl, 3);
    free(t);
    /* Nothing held: the next turn writes nothing more. */
    long size = file_size();
    CU_ASSERT(event_base_loop(f.base, EVLOOP_NONBLOCK) >= 0);
    CU_ASSERT_EQUAL(file_size(), size);
    /* Free writes what it holds; again, nothing. */
    line(&f.b, "\"n\":4");
    gw_log_batch_add(&f.batch, &f.b);
    CU_ASSERT_EQUAL(file_size(), size);
    gw_log_batch_free(&f.batch);
    CU_ASSERT(file_size() > size);
    event_free(later);
    fixture_close(&f);
}

static void test_full_batch_goes_at_once(void)
{
    struct fixture f;
    CU_ASSERT_EQUAL_FATAL(fixture_open(&f), 0);
    char members[1100];
    memset(members, 'x', sizeof(members));
    memcpy(members, "\"pad\":\"", 7);
    members[sizeof(members) - 2] = '"';
    members[sizeof(members) - 1] = 0;
    line(&f.b, members);
    size_t added = 0;
    while (added + f.b.len < GW_LOG_BATCH_MAX) {
        gw_log_batch_add(&f.batch, &f.b);
        added += f.b.len;
    }
    CU_ASSERT_EQUAL(file_size(), 0);
    gw_log_batch_add(&f.batch, &f.b); /* past the size: written now, whole lines */
    CU_ASSERT_EQUAL(file_size(), (long)(added + f.b.len));
    CU_ASSERT(event_base_loop(f.base, EVLOOP_NONBLOCK) >= 0);
    CU_ASSERT_EQUAL(file_size(), (long)(added + f.b.len));
    fixture_close(&f);
}

/* No batch (NULL, or never made): each add is written at once. */
static void test_no_batch(void)
{
    CU_ASSERT_EQUAL_FATAL(open_file(), 0);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    line(&b, "\"n\":1");
    gw_log_batch_add(NULL, &b);
    CU_ASSERT_EQUAL(file_size(), (long)b.len);
    struct gw_log_batch none;
    memset(&none, 0, sizeof(none));
    gw_log_batch_add(&none, &b);
    CU_ASSERT_EQUAL(file_size(), (long)(2 * b.len));
    gw_log_batch_free(&none);
    gw_buf_free(&b);
    CU_ASSERT_EQUAL(gw_log_open_access("-"), GW_OK);
    unlink(path);
}

static CU_TestInfo tests[] = {
    {"lines wait one turn of the loop, in order", test_one_turn},
    {"a full batch is written at once", test_full_batch_goes_at_once},
    {"without a batch each line is written at once", test_no_batch},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
