/* Tests for common/gw_trace and gw_otel's configuration and sampler: W3C
 * Trace Context, the span writer's protobuf (bytes worked by hand), its
 * OTLP/JSON, and the OTEL_* variables. */
#include <CUnit/CUnit.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "gw_error.h"
#include "gw_otel.h"
#include "gw_trace.h"

#define TP "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

static void test_traceparent(void)
{
    struct gw_trace_ctx c;
    CU_ASSERT_EQUAL(gw_traceparent_parse(TP, strlen(TP), &c), 0);
    CU_ASSERT_EQUAL(c.trace_id[0], 0x4b);
    CU_ASSERT_EQUAL(c.trace_id[15], 0x36);
    CU_ASSERT_EQUAL(c.span_id[0], 0x00);
    CU_ASSERT_EQUAL(c.span_id[7], 0xb7);
    CU_ASSERT_EQUAL(c.flags, 1);
    char out[GW_TRACEPARENT_LEN + 1];
    gw_traceparent_format(c.trace_id, c.span_id, c.flags, out);
    CU_ASSERT_STRING_EQUAL(out, TP);
    /* Surrounding whitespace is allowed; a later version may go on. */
    CU_ASSERT_EQUAL(gw_traceparent_parse(" \t" TP " ", strlen(TP) + 3, &c), 0);
    const char *later = "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-follows";
    CU_ASSERT_EQUAL(gw_traceparent_parse(later, strlen(later), &c), 0);
    static const char *const bad[] = {
        "",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    /* short */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x", /* 00 is exact */
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* version ff */
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   /* uppercase */
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",   /* zero trace id */
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",   /* zero span id */
        "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",   /* separator */
        "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",   /* not hex */
        "cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",  /* later, no '-' */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(gw_traceparent_parse(bad[i], strlen(bad[i]), &c), -1);
}

static void test_tracestate(void)
{
    size_t at;
    const char *ok = "  rojo=00f067aa0ba902b7,congo=t61rcWkgMzE, t@sys=1 ";
    size_t n = gw_tracestate_check(ok, strlen(ok), &at);
    CU_ASSERT_EQUAL(at, 2);
    CU_ASSERT_EQUAL(n, strlen(ok) - 3);
    CU_ASSERT_EQUAL(gw_tracestate_check("a=1,,b=2", 8, &at), 8); /* empty members are allowed */
    static const char *const bad[] = {"", "   ", "=1", "A=1", "a=", "a=1 ,b", "a=b=c", "a=\x01"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CU_ASSERT_EQUAL(gw_tracestate_check(bad[i], strlen(bad[i]), &at), 0);
    /* 33 members, or more than 512 characters: dropped. */
    char many[33 * 4 + 1] = "";
    for (int i = 0; i < 33; i++)
        snprintf(many + strlen(many), sizeof(many) - strlen(many), "%s%c=1", i ? "," : "",
                 'a' + i % 26);
    CU_ASSERT_EQUAL(gw_tracestate_check(many, strlen(many), &at), 0);
    many[strlen(many) - 4] = '\0'; /* 32 */
    CU_ASSERT_EQUAL(gw_tracestate_check(many, strlen(many), &at), strlen(many));
    char longv[600];
    memset(longv, 'v', sizeof(longv));
    memcpy(longv, "k=", 2);
    CU_ASSERT_EQUAL(gw_tracestate_check(longv, sizeof(longv), &at), 0);
}

static const uint8_t TID[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t SID[8] = {0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8};
static const uint8_t PID[8] = {0xb1, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8};

static void test_span_bytes(void)
{
    /* A span with one attribute, written field by field by hand:
     * ScopeSpans.spans (0x12, length) around Span's fields. */
    struct gw_span s;
    struct gw_buf batch;
    gw_span_init(&s);
    gw_buf_init(&batch, 0);
    gw_span_begin(&s, TID, SID, PID, "x", GW_SPAN_SERVER, 0x0102);
    gw_span_int(&s, "n", 300);
    CU_ASSERT_EQUAL(gw_span_finish(&s, 0x0203, &batch), GW_OK);
    uint8_t want[128];
    size_t n = 0;
    want[n++] = 0x12;
    size_t lenat = n++;
    want[n++] = 0x0a; /* trace_id */
    want[n++] = 16;
    memcpy(want + n, TID, 16);
    n += 16;
    want[n++] = 0x12; /* span_id */
    want[n++] = 8;
    memcpy(want + n, SID, 8);
    n += 8;
    want[n++] = 0x22; /* parent_span_id */
    want[n++] = 8;
    memcpy(want + n, PID, 8);
    n += 8;
    want[n++] = 0x2a; /* name */
    want[n++] = 1;
    want[n++] = 'x';
    want[n++] = 0x30; /* kind */
    want[n++] = 2;
    want[n++] = 0x39; /* start, fixed64 */
    uint8_t start[8] = {0x02, 0x01};
    memcpy(want + n, start, 8);
    n += 8;
    /* attributes: KeyValue{key "n", value AnyValue{int_value 300}} */
    uint8_t kv[] = {0x4a, 0x08, 0x0a, 0x01, 'n', 0x12, 0x03, 0x18, 0xac, 0x02};
    memcpy(want + n, kv, sizeof(kv));
    n += sizeof(kv);
    want[n++] = 0x41; /* end, fixed64 */
    uint8_t end[8] = {0x03, 0x02};
    memcpy(want + n, end, 8);
    n += 8;
    want[lenat] = (uint8_t)(n - 2);
    CU_ASSERT_EQUAL(batch.len, n);
    CU_ASSERT(batch.len == n && memcmp(batch.data, want, n) == 0);
    gw_span_free(&s);
    gw_buf_free(&batch);
}

static void test_request_head(void)
{
    /* ExportTraceServiceRequest{resource_spans: ResourceSpans{resource,
     * scope_spans: ScopeSpans{scope, <10 bytes of entries follow>}}} */
    struct gw_buf head;
    gw_buf_init(&head, 0);
    const char res[] = {0x0a, 0x01, 'r'}, scope[] = {0x0a, 0x01, 's'};
    CU_ASSERT_EQUAL(gw_trace_request_head(&head, res, 3, scope, 3, 10), GW_OK);
    /* scope_spans: 2 + 3 + 10 = 15; resource_spans: 2 + 3 + 2 + 15 = 22 */
    const uint8_t want[] = {0x0a, 22, 0x0a, 3, 0x0a, 0x01, 'r', 0x12, 15, 0x0a, 3, 0x0a, 0x01, 's'};
    CU_ASSERT_EQUAL(head.len, sizeof(want));
    CU_ASSERT(head.len == sizeof(want) && memcmp(head.data, want, sizeof(want)) == 0);
    gw_buf_free(&head);
}

static void test_json(void)
{
    struct gw_span s;
    struct gw_buf batch, res, scope, out;
    gw_span_init(&s);
    gw_buf_init(&batch, 0);
    gw_buf_init(&res, 0);
    gw_buf_init(&scope, 0);
    gw_buf_init(&out, 0);
    CU_ASSERT_EQUAL(gw_pb_kv_str(&res, 1, "service.name", "svc", 3), GW_OK);
    CU_ASSERT_EQUAL(gw_pb_bytes(&scope, 1, "llmgw", 5), GW_OK);
    gw_span_begin(&s, TID, SID, NULL, "root \"q\"", GW_SPAN_CLIENT, 1000);
    gw_span_tracestate(&s, "a=1", 3);
    gw_span_str(&s, "s", "v");
    gw_span_int(&s, "i", -5);
    gw_span_bool(&s, "b", 1);
    gw_span_double(&s, "d", 1.5);
    const char *arr[] = {"stop", "length"};
    gw_span_strs(&s, "a", arr, 2);
    struct gw_attr ea = {.key = "k", .type = GW_ATTR_INT, .i = 7};
    gw_span_event(&s, "ev", 1500, &ea, 1);
    gw_span_event(&s, "bare", 1600, NULL, 0);
    gw_span_link(&s, TID, PID);
    gw_span_status(&s, GW_SPAN_ERROR, "network");
    CU_ASSERT_EQUAL(gw_span_finish(&s, 2000, &batch), GW_OK);
    gw_span_begin(&s, TID, PID, SID, "child", GW_SPAN_INTERNAL, 1100);
    CU_ASSERT_EQUAL(gw_span_finish(&s, 1200, &batch), GW_OK);
    const void *ents[] = {batch.data};
    size_t lens[] = {batch.len};
    CU_ASSERT_EQUAL(gw_trace_json(&out, res.data, res.len, scope.data, scope.len, ents, lens, 1),
                    GW_OK);
    json_error_t e;
    json_t *j = json_loads(out.data, 0, &e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    json_t *rs = json_array_get(json_object_get(j, "resourceSpans"), 0);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(
            json_object_get(
                json_array_get(json_object_get(json_object_get(rs, "resource"), "attributes"), 0),
                "value"),
            "stringValue")),
        "svc");
    json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_object_get(ss, "scope"), "name")),
                           "llmgw");
    json_t *spans = json_object_get(ss, "spans");
    CU_ASSERT_EQUAL(json_array_size(spans), 2);
    json_t *sp = json_array_get(spans, 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "traceId")),
                           "0102030405060708090a0b0c0d0e0f10");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "spanId")), "a1a2a3a4a5a6a7a8");
    CU_ASSERT_PTR_NULL(json_object_get(sp, "parentSpanId"));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "name")), "root \"q\"");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "traceState")), "a=1");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(sp, "kind")), 3);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "startTimeUnixNano")), "1000");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(sp, "endTimeUnixNano")), "2000");
    json_t *at = json_object_get(sp, "attributes");
    CU_ASSERT_EQUAL(json_array_size(at), 5);
    json_t *v = json_object_get(json_array_get(at, 1), "value");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(v, "intValue")), "-5");
    v = json_object_get(json_array_get(at, 2), "value");
    CU_ASSERT(json_is_true(json_object_get(v, "boolValue")));
    v = json_object_get(json_array_get(at, 3), "value");
    CU_ASSERT_DOUBLE_EQUAL(json_real_value(json_object_get(v, "doubleValue")), 1.5, 1e-12);
    v = json_object_get(json_object_get(json_array_get(at, 4), "value"), "arrayValue");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(
                               json_array_get(json_object_get(v, "values"), 1), "stringValue")),
                           "length");
    json_t *ev = json_object_get(sp, "events");
    CU_ASSERT_EQUAL(json_array_size(ev), 2);
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_array_get(ev, 0), "timeUnixNano")), "1500");
    CU_ASSERT_EQUAL(json_array_size(json_object_get(json_array_get(ev, 0), "attributes")), 1);
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(ev, 1), "attributes"));
    json_t *ln = json_array_get(json_object_get(sp, "links"), 0);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(ln, "spanId")), "b1b2b3b4b5b6b7b8");
    json_t *st = json_object_get(sp, "status");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(st, "code")), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(st, "message")), "network");
    json_t *child = json_array_get(spans, 1);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(child, "parentSpanId")),
                           "a1a2a3a4a5a6a7a8");
    json_decref(j);
    /* Arrays nested past 8 levels are refused (this module writes one). */
    for (int depth = 8; depth <= 10; depth += 2) {
        struct gw_buf nest, w;
        gw_buf_init(&nest, 0);
        CU_ASSERT_EQUAL(gw_pb_bytes(&nest, 1, "x", 1), GW_OK); /* AnyValue{string_value} */
        for (int i = 0; i < depth; i++) {
            gw_buf_init(&w, 0); /* AnyValue{array_value: ArrayValue{values: v}} */
            struct gw_buf wrap;
            gw_buf_init(&wrap, 0);
            CU_ASSERT_EQUAL(gw_pb_bytes(&wrap, 1, nest.data, nest.len), GW_OK);
            CU_ASSERT_EQUAL(gw_pb_bytes(&w, 5, wrap.data, wrap.len), GW_OK);
            gw_buf_free(&wrap);
            gw_buf_free(&nest);
            nest = w;
        }
        struct gw_buf kv, span, entry;
        gw_buf_init(&kv, 0);
        gw_buf_init(&span, 0);
        gw_buf_init(&entry, 0);
        CU_ASSERT_EQUAL(gw_pb_bytes(&kv, 1, "k", 1), GW_OK);
        CU_ASSERT_EQUAL(gw_pb_bytes(&kv, 2, nest.data, nest.len), GW_OK);
        CU_ASSERT_EQUAL(gw_pb_bytes(&span, 9, kv.data, kv.len), GW_OK);
        CU_ASSERT_EQUAL(gw_pb_bytes(&entry, 2, span.data, span.len), GW_OK);
        const void *de[] = {entry.data};
        size_t dl[] = {entry.len};
        gw_buf_reset(&out);
        CU_ASSERT_EQUAL(gw_trace_json(&out, res.data, res.len, scope.data, scope.len, de, dl, 1),
                        depth <= 8 ? GW_OK : GW_EINVAL);
        gw_buf_free(&nest);
        gw_buf_free(&kv);
        gw_buf_free(&span);
        gw_buf_free(&entry);
    }
    /* Bytes this module did not write are refused, not read past. */
    const char junk[] = {0x12, 0x7f, 0x01};
    const void *je[] = {junk};
    size_t jl[] = {sizeof(junk)};
    gw_buf_reset(&out);
    CU_ASSERT_EQUAL(gw_trace_json(&out, res.data, res.len, scope.data, scope.len, je, jl, 1),
                    GW_EINVAL);
    gw_span_free(&s);
    gw_buf_free(&batch);
    gw_buf_free(&res);
    gw_buf_free(&scope);
    gw_buf_free(&out);
}

static const char *const OTEL_VARS[] = {
    "OTEL_SDK_DISABLED",           "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",     "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_BSP_MAX_QUEUE_SIZE",     "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
    "OTEL_RESOURCE_ATTRIBUTES",    NULL};

static void clear_env(void)
{
    for (int i = 0; OTEL_VARS[i]; i++)
        unsetenv(OTEL_VARS[i]);
}

static void test_config(void)
{
    char err[256];
    struct gw_otel *o = (struct gw_otel *)1;
    clear_env();
    /* No endpoint: off, and no error. */
    CU_ASSERT_EQUAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT_PTR_NULL(o);
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", 1);
    setenv("OTEL_SDK_DISABLED", "true", 1);
    CU_ASSERT_EQUAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT_PTR_NULL(o);
    unsetenv("OTEL_SDK_DISABLED");
    setenv("OTEL_TRACES_EXPORTER", "none", 1);
    CU_ASSERT_EQUAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT_PTR_NULL(o);
    unsetenv("OTEL_TRACES_EXPORTER");
    /* Each wrong value names its variable. */
    static const char *const wrong[][2] = {
        {"OTEL_TRACES_EXPORTER", "zipkin"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"},
        {"OTEL_TRACES_SAMPLER", "sometimes"},
        {"OTEL_EXPORTER_OTLP_HEADERS", "novalue"},
        {"OTEL_BSP_MAX_QUEUE_SIZE", "-1"},
        {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "99999"}, /* more than the queue */
        {"OTEL_RESOURCE_ATTRIBUTES", "=x"},
    };
    for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
        setenv(wrong[i][0], wrong[i][1], 1);
        err[0] = '\0';
        CU_ASSERT_EQUAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_EINVAL);
        CU_ASSERT_PTR_NULL(o);
        CU_ASSERT_PTR_NOT_NULL(strstr(err, wrong[i][0]));
        unsetenv(wrong[i][0]);
    }
    setenv("OTEL_TRACES_SAMPLER", "traceidratio", 1);
    setenv("OTEL_TRACES_SAMPLER_ARG", "1.5", 1);
    CU_ASSERT_EQUAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(err, "OTEL_TRACES_SAMPLER_ARG"));
    clear_env();
}

static void test_sampler(void)
{
    char err[256];
    struct gw_otel *o;
    uint8_t low[16] = {0}, high[16] = {0};
    low[15] = 1;
    high[8] = 0x7f;
    high[15] = 0xff;
    struct gw_trace_ctx sampled = {.flags = 1}, unsampled = {.flags = 0};
    clear_env();
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", 1);
    /* The default: parent-based, always on for roots. */
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT(gw_otel_sampled(o, NULL, low));
    CU_ASSERT(gw_otel_sampled(o, &sampled, low));
    CU_ASSERT(!gw_otel_sampled(o, &unsampled, low));
    gw_otel_free(o);
    /* traceidratio 0.5: by the id's low 63 bits, parents ignored. */
    setenv("OTEL_TRACES_SAMPLER", "traceidratio", 1);
    setenv("OTEL_TRACES_SAMPLER_ARG", "0.5", 1);
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT(gw_otel_sampled(o, &unsampled, low));
    CU_ASSERT(!gw_otel_sampled(o, &sampled, high));
    high[8] = 0xbf; /* the top bit is not read: 0x3f.. is below 2^62 */
    CU_ASSERT(gw_otel_sampled(o, NULL, high));
    gw_otel_free(o);
    setenv("OTEL_TRACES_SAMPLER", "parentbased_always_off", 1);
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT(!gw_otel_sampled(o, NULL, low));
    CU_ASSERT(gw_otel_sampled(o, &sampled, low));
    gw_otel_free(o);
    /* Ratio 0 samples nothing, 1 everything. */
    setenv("OTEL_TRACES_SAMPLER", "traceidratio", 1);
    setenv("OTEL_TRACES_SAMPLER_ARG", "0", 1);
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    CU_ASSERT(!gw_otel_sampled(o, NULL, low));
    gw_otel_free(o);
    setenv("OTEL_TRACES_SAMPLER_ARG", "1", 1);
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    uint8_t top[16];
    memset(top, 0xff, sizeof(top));
    CU_ASSERT(gw_otel_sampled(o, NULL, top));
    gw_otel_free(o);
    clear_env();
}

static void test_queue_bound(void)
{
    char err[256];
    struct gw_otel *o;
    clear_env();
    /* A collector that is not there, a queue of 4 spans, a long delay:
     * what does not fit is dropped and counted, never waited for. */
    setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1", 1);
    setenv("OTEL_BSP_MAX_QUEUE_SIZE", "4", 1);
    setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4", 1);
    setenv("OTEL_BSP_SCHEDULE_DELAY", "600000", 1);
    CU_ASSERT_EQUAL_FATAL(gw_otel_from_env("svc", "i", &o, err, sizeof(err)), GW_OK);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    for (int i = 0; i < 3; i++) {
        CU_ASSERT_EQUAL(gw_buf_append(&b, "xx", 2), GW_OK);
        gw_otel_submit(o, &b, 1);
        CU_ASSERT_EQUAL(b.len, 0);
    }
    CU_ASSERT_EQUAL(gw_buf_append(&b, "xx", 2), GW_OK);
    gw_otel_submit(o, &b, 2); /* 3 + 2 > 4 */
    struct gw_otel_stats s;
    gw_otel_stats(o, &s);
    CU_ASSERT_EQUAL(s.dropped, 2);
    CU_ASSERT(s.queued + s.failed + s.exported == 3);
    gw_buf_free(&b);
    gw_otel_free(o);
    clear_env();
}

static CU_TestInfo tests[] = {
    {"traceparent: W3C's examples, versions, and what is ignored", test_traceparent},
    {"tracestate: members, limits, and what is dropped", test_tracestate},
    {"a span's protobuf, byte by byte", test_span_bytes},
    {"the export request's head, byte by byte", test_request_head},
    {"OTLP/JSON: ids in hex, numbers as strings, events, links, status", test_json},
    {"OTEL_* configuration: off, and a wrong value named", test_config},
    {"samplers: parent-based, trace-id ratio, on and off", test_sampler},
    {"the queue: bounded in spans, the excess dropped and counted", test_queue_bound},
    CU_TEST_INFO_NULL,
};

#include "unit_main.h"
