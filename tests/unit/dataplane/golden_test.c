/*
 * Golden translation tests: every facade x every driver, streaming and not.
 *
 * tests/golden/requests/<facade>.json   the same conversation in each client
 *                                       format (system, an image, a tool call
 *                                       and its result, two tools, sampling)
 * tests/golden/upstream/<driver>.<scenario>.<sse|ndjson|es|json>
 *                                       a provider answer, captured from the
 *                                       mock provider (which is written from
 *                                       the providers' API references)
 * tests/golden/expect/                  what must come out:
 *   request.<driver>.json               the upstream body; every facade's
 *                                       request must build the SAME body
 *   <driver>.<scenario>.<kind>.events   the canonical transcript (the parser
 *                                       fed whole, byte by byte and in
 *                                       random splits must all give it)
 *   <facade>.<driver>.<scenario>.<kind> what the client gets (SSE or JSON)
 *
 * LLMGW_GOLDEN_UPDATE=1 rewrites the expect/ files instead of comparing;
 * the diff is then reviewed like code. Beyond the files, the answers are
 * checked for meaning: the "text" scenario's text, and the "tools"
 * scenario's two parallel calls with arguments that parse to the objects
 * the mock derives from the schemas.
 */
#include <CUnit/CUnit.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canon.h"
#include "canon_record.h"
#include "dp_driver.h"
#include "dp_facade.h"
#include "dp_snapshot.h"
#include "gw_buf.h"
#include "gw_error.h"

#ifndef GOLDEN_DIR
#error GOLDEN_DIR must be defined
#endif

static int updating(void)
{
    const char *u = getenv("LLMGW_GOLDEN_UPDATE");
    return u && *u && strcmp(u, "0") != 0;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct gw_buf b;
    gw_buf_init(&b, 0);
    char tmp[8192];
    size_t n;
    while ((n = fread(tmp, 1, sizeof(tmp), f)) > 0)
        if (gw_buf_append(&b, tmp, n) != GW_OK)
            break;
    fclose(f);
    if (!b.data && gw_buf_append(&b, "", 0) != GW_OK)
        return NULL;
    *len = b.len;
    return b.data;
}

static void spit(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, len, f);
        fclose(f);
    }
}

/* Compares got with the expect/ file (or writes it when updating). */
static void golden(const char *name, const char *got, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/expect/%s", GOLDEN_DIR, name);
    if (updating()) {
        spit(path, got, len);
        return;
    }
    size_t elen = 0;
    char *exp = slurp(path, &elen);
    if (!exp) {
        fprintf(stderr, "\n  missing golden file %s (LLMGW_GOLDEN_UPDATE=1 writes it)\n", path);
        CU_FAIL("missing golden file");
        return;
    }
    int same = elen == len && memcmp(exp, got, len) == 0;
    if (!same) {
        fprintf(stderr, "\n  golden mismatch: %s\n  --- expected\n%.*s\n  --- got\n%.*s\n", name,
                (int)(elen > 4000 ? 4000 : elen), exp, (int)(len > 4000 ? 4000 : len), got);
    }
    CU_ASSERT(same);
    free(exp);
}

/* ------------------------------------------------------------ the matrix */

static const struct dp_facade *const facades[] = {
    &fc_openai_chat,
    &fc_anthropic,
    &fc_responses,
};
#define NFACADES (sizeof(facades) / sizeof(*facades))

static struct dp_provider provider_for(const struct dp_driver *d)
{
    struct dp_provider p = {
        .name = "golden",
        .driver = d->info->name,
        .drv = d->info,
        .base_url = "http://upstream.test/v1",
        .credential = "test-credential",
        .enabled = 1,
        .first_byte_timeout_ms = 1000,
        .idle_timeout_ms = 1000,
    };
    if (strcmp(d->info->name, "anthropic") == 0 || strcmp(d->info->name, "ollama") == 0 ||
        strcmp(d->info->name, "bedrock") == 0)
        p.base_url = "http://upstream.test";
    if (strcmp(d->info->name, "gemini") == 0)
        p.base_url = "http://upstream.test/v1beta";
    if (strcmp(d->info->name, "bedrock") == 0)
        p.credential = "AKIDEXAMPLE:wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    return p;
}

static struct canon_req *parse_fixture(const struct dp_facade *fc)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/requests/%s.json", GOLDEN_DIR, fc->name);
    json_t *body = json_load_file(path, JSON_REJECT_DUPLICATES, NULL);
    CU_ASSERT_PTR_NOT_NULL_FATAL(body);
    struct canon_req *r = canon_req_new(body);
    struct canon_err err = {0};
    int rc = fc->parse(r, &err);
    if (rc != GW_OK)
        fprintf(stderr, "\n  %s: %s (%s)\n", fc->name, err.message, err.param);
    CU_ASSERT_EQUAL_FATAL(rc, GW_OK);
    return r;
}

static void test_every_facade_builds_the_same_upstream_request(void)
{
    struct canon_req *reqs[NFACADES];
    for (size_t f = 0; f < NFACADES; f++)
        reqs[f] = parse_fixture(facades[f]);
    for (const struct dp_driver *const *d = dp_drivers; d < dp_drivers + DRV_ID_COUNT; d++) {
        /* Each driver is its catalog entry's, at its id. */
        CU_ASSERT_PTR_EQUAL((*d)->info, &dp_driver_catalog[d - dp_drivers]);
        struct dp_provider p = provider_for(*d);
        p.options = json_pack("{s:s}", "region", "us-east-1");
        struct drv_target t = {.provider = &p, .model = "golden-model", .request_id = "req_golden"};
        json_t *first = NULL;
        for (size_t f = 0; f < NFACADES; f++) {
            for (int stream = 0; stream <= 1; stream++) {
                reqs[f]->stream = stream;
                struct drv_request out = {0};
                struct canon_err err = {0};
                int rc = (*d)->build_chat(&t, reqs[f], &out, &err);
                if (rc != GW_OK)
                    fprintf(stderr, "\n  %s <- %s: %s\n", (*d)->info->name, facades[f]->name,
                            err.message);
                CU_ASSERT_EQUAL(rc, GW_OK);
                json_t *body = out.body ? json_loadb(out.body, out.body_len, 0, NULL) : NULL;
                CU_ASSERT_PTR_NOT_NULL(body);
                CU_ASSERT_PTR_NOT_NULL(out.url);
                if (body && stream == 0) {
                    if (!first) {
                        first = json_incref(body);
                        char *s = json_dumps(body, JSON_INDENT(2) | JSON_SORT_KEYS |
                                                       JSON_REAL_PRECISION(15));
                        char name[128];
                        snprintf(name, sizeof(name), "request.%s.json", (*d)->info->name);
                        golden(name, s, strlen(s));
                        free(s);
                    } else if (!json_equal(first, body)) {
                        char *a = json_dumps(first, JSON_SORT_KEYS);
                        char *b = json_dumps(body, JSON_SORT_KEYS);
                        fprintf(stderr, "\n  %s: %s builds\n%s\n  but %s builds\n%s\n",
                                (*d)->info->name, facades[0]->name, a, facades[f]->name, b);
                        free(a);
                        free(b);
                        CU_FAIL("facades disagree on the upstream request");
                    }
                }
                json_decref(body);
                drv_request_free(&out);
            }
        }
        json_decref(first);
        json_decref(p.options);
    }
    for (size_t f = 0; f < NFACADES; f++)
        canon_req_free(reqs[f]);
}

/* The events once more, into an accumulator and a facade encoder. */
struct tee {
    struct canon_acc acc;
    const struct dp_facade *fc;
    void *st;
    struct gw_buf sse;
    int failed;
};

static int tee_emit(void *arg, const struct canon_event *ev)
{
    struct tee *t = arg;
    if (ev->type != CANON_EV_ERROR && canon_acc_add(&t->acc, ev) != GW_OK)
        t->failed = 1;
    if (t->fc->stream_event(t->st, ev, &t->sse) != GW_OK)
        t->failed = 1;
    return ev->type == CANON_EV_DONE || ev->type == CANON_EV_ERROR;
}

static void check_meaning(const char *scenario, const struct canon_acc *acc, const char *what)
{
    if (strcmp(scenario, "text") == 0) {
        int ok =
            acc->text && strcmp(acc->text->data, "tok1 tok2 tok3 tok4 tok5 tok6 tok7 tok8") == 0;
        if (!ok)
            fprintf(stderr, "\n  %s: text is '%s'\n", what, acc->text ? acc->text->data : "(none)");
        CU_ASSERT(ok);
        CU_ASSERT_EQUAL(acc->stop, CANON_STOP_END);
    } else if (strcmp(scenario, "tools") == 0) {
        CU_ASSERT_EQUAL_FATAL(acc->ntools, 2);
        json_t *a0 = json_loads(acc->tools[0].args->data, 0, NULL);
        json_t *a1 = json_loads(acc->tools[1].args->data, 0, NULL);
        json_t *e0 = json_pack("{s:s,s:i}", "city", "mock", "days", 42);
        json_t *e1 = json_pack("{s:b}", "verbose", 1);
        int ok = json_equal(a0, e0) && json_equal(a1, e1);
        if (!ok)
            fprintf(stderr, "\n  %s: tool arguments %s / %s\n", what, acc->tools[0].args->data,
                    acc->tools[1].args->data);
        CU_ASSERT(ok);
        CU_ASSERT_STRING_EQUAL(acc->tools[0].name, "get_weather");
        CU_ASSERT_STRING_EQUAL(acc->tools[1].name, "get_time");
        CU_ASSERT_EQUAL(acc->stop, CANON_STOP_TOOL_USE);
        json_decref(a0);
        json_decref(a1);
        json_decref(e0);
        json_decref(e1);
    }
    CU_ASSERT(acc->usage.have);
    CU_ASSERT(acc->usage.output > 0);
}

static void run_fixture(const char *file)
{
    /* <driver>.<scenario>.<kind> */
    char drv[64], scenario[64], kind[16];
    if (sscanf(file, "%63[^.].%63[^.].%15s", drv, scenario, kind) != 3)
        return;
    const struct dp_driver *d = dp_driver_find(drv);
    if (!d) {
        fprintf(stderr, "\n  %s: no driver '%s'\n", file, drv);
        CU_FAIL("fixture for an unknown driver");
        return;
    }
    int stream = strcmp(kind, "json") != 0;
    char path[512];
    snprintf(path, sizeof(path), "%s/upstream/%s", GOLDEN_DIR, file);
    size_t len = 0;
    char *data = slurp(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(data);

    /* Whole, byte by byte and in random splits: one transcript, no
     * VIOLATION. */
    char *whole = canon_record_splits(d, stream, data, len);
    CU_ASSERT_PTR_NULL(strstr(whole, "ERROR"));
    char name[256];
    snprintf(name, sizeof(name), "%s.%s.%s.events", drv, scenario, kind);
    golden(name, whole, strlen(whole));

    for (size_t f = 0; f < NFACADES; f++) {
        struct canon_req *r = parse_fixture(facades[f]);
        r->stream = 1;
        r->include_usage = 1;
        struct fc_ctx ctx = {
            .request_id = "req_golden", .model = "golden-model", .created = 1700000000};
        struct tee t = {.fc = facades[f]};
        canon_acc_init(&t.acc, 0);
        gw_buf_init(&t.sse, 0);
        t.st = facades[f]->stream_new(r, &ctx);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t.st);
        struct canon_sink sink = {.emit = tee_emit, .arg = &t};
        struct drv_parser *p = d->parser_new(stream);
        if (!d->parse(p, data, len, &sink))
            d->finish(p, &sink);
        d->parser_free(p);
        CU_ASSERT(!t.failed);
        CU_ASSERT(t.acc.done);
        char what[512];
        snprintf(what, sizeof(what), "%s <- %s (%s)", facades[f]->name, file, scenario);
        check_meaning(scenario, &t.acc, what);
        /* Streaming client. */
        snprintf(name, sizeof(name), "%s.%s.%s.%s.sse", facades[f]->name, drv, scenario, kind);
        golden(name, t.sse.data ? t.sse.data : "", t.sse.len);
        /* Non-streaming client. */
        struct gw_buf body;
        gw_buf_init(&body, 0);
        r->stream = 0;
        CU_ASSERT_EQUAL(facades[f]->render(r, &ctx, &t.acc, &body), GW_OK);
        json_t *j = json_loadb(body.data ? body.data : "", body.len, 0, NULL);
        CU_ASSERT_PTR_NOT_NULL(j);
        char *pretty = j ? json_dumps(j, JSON_INDENT(2) | JSON_SORT_KEYS) : strdup("");
        snprintf(name, sizeof(name), "%s.%s.%s.%s.json", facades[f]->name, drv, scenario, kind);
        golden(name, pretty, strlen(pretty));
        free(pretty);
        json_decref(j);
        gw_buf_free(&body);
        facades[f]->stream_free(t.st);
        gw_buf_free(&t.sse);
        canon_acc_free(&t.acc);
        canon_req_free(r);
    }
    free(whole);
    free(data);
}

static void test_every_driver_answer_through_every_facade(void)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/upstream", GOLDEN_DIR);
    struct dirent **names = NULL;
    int n = scandir(dir, &names, NULL, alphasort);
    CU_ASSERT_FATAL(n > 0);
    int ran = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.') {
            run_fixture(names[i]->d_name);
            ran++;
        }
        free(names[i]);
    }
    free(names);
    /* Every driver has fixtures: streamed and whole, text and tools. */
    CU_ASSERT(ran >= 4 * DRV_ID_COUNT);
}

static CU_TestInfo tests[] = {
    {"every facade builds the same upstream request",
     test_every_facade_builds_the_same_upstream_request},
    {"every driver's answer through every facade", test_every_driver_answer_through_every_facade},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
