/*
 * One model call, from the parsed body to the usage-log line.
 *
 * The flow is the same for every API: parse the body, resolve the fault
 * SPEC (header, then "model#spec", then --fault), then either answer at
 * once (the benchmark path: no timer, no allocation beyond the request's
 * pool and a jansson tree) or go asynchronous for ttfb_ms, hang and
 * streams. The asynchronous state lives in the request's pool, so it dies
 * exactly when gw_http ends the request; every path that ends the request
 * writes the usage line first, and the timer is freed by a pool cleanup so
 * it can never fire into freed memory.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "gw_error.h"
#include "gw_json.h"
#include "mock.h"

/* Streams stop generating while this much output waits for the client and
 * resume below the low mark, so a slow reader cannot make us buffer an
 * arbitrarily long answer. */
#define STREAM_HIGH_WATER (256u * 1024u)
#define STREAM_LOW_WATER (64u * 1024u)

static const char *const SSE_TYPE = "text/event-stream; charset=utf-8";
static const char *const JSON_TYPE = "application/json";

int mock_next_interleaved(const struct mock_call *c)
{
    for (int k = 0; k < c->ntools; k++) {
        int i = (c->idx + k) % c->ntools;
        if (c->tools[i].sent < c->tools[i].args_len)
            return i;
    }
    return -1;
}

int mock_tool_tokens(const struct mock_tool *t)
{
    return (int)((t->args_len + MOCK_ARG_PIECE - 1) / MOCK_ARG_PIECE);
}

int mock_call_output_tokens(const struct mock_call *c)
{
    if (c->f.empty)
        return 0;
    if (c->ntools == 0)
        return c->reasoning + c->ntext;
    int pieces = 0;
    for (int i = 0; i < c->ntools; i++)
        pieces += mock_tool_tokens(&c->tools[i]);
    return c->reasoning + pieces;
}

int mock_call_reasoning_billed(const struct mock_call *c)
{
    if (c->f.empty)
        return 0;
    return c->billed < c->reasoning ? c->billed : c->reasoning;
}

void mock_plan_answer(struct mock_call *c, long long max)
{
    int chunks = c->f.chunks >= 0 ? c->f.chunks : c->th->sh->cfg->chunks;
    c->reasoning = c->f.reasoning;
    c->ntext = chunks;
    c->finish = MOCK_FINISH_STOP;
    if (max >= 0 && max < chunks) {
        c->ntext = (int)max;
        c->finish = MOCK_FINISH_LENGTH;
    }
    c->seen.max_tokens = max;
}

int mock_seen_temperature(struct mock_call *c, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (v == NULL || json_is_null(v))
        return 0;
    if (!json_is_number(v))
        return -1;
    c->seen.has_temperature = 1;
    c->seen.temperature = json_number_value(v);
    return 0;
}

/* ---- usage log ---- */

static int log_seen(struct gw_buf *b, const struct mock_seen *s)
{
    int rc = gw_buf_printf(b,
                           ",\"seen\":{\"messages\":%d,\"system\":%s,\"images\":%d,"
                           "\"files\":%d,\"tool_results\":%d,\"tool_calls\":%d,\"tools\":%d,"
                           "\"max_tokens\":",
                           s->messages, s->system ? "true" : "false", s->images, s->files,
                           s->tool_results, s->tool_calls, s->tools);
    rc |= s->max_tokens >= 0 ? gw_buf_printf(b, "%lld", s->max_tokens) : gw_buf_appends(b, "null");
    rc |= gw_buf_appends(b, ",\"temperature\":");
    rc |=
        s->has_temperature ? gw_buf_printf(b, "%.15g", s->temperature) : gw_buf_appends(b, "null");
    rc |= gw_buf_appends(b, "}");
    return rc;
}

static void usage_log(struct mock_call *c, const char *outcome, int output_tokens,
                      int reasoning_tokens)
{
    int fd = c->th->sh->usage_fd;
    if (fd < 0)
        return;
    struct gw_buf *b = &c->th->line;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    /* The log records what the provider reported: an API with no wire
     * field for cache reads or writes says 0 there. */
    int cache_read = c->api->cache_reads ? c->cache_read : 0;
    int cache_write = c->api->cache_writes ? c->cache_write + c->cache_write_1h : 0;
    int cache_write_1h = c->api->cache_writes ? c->cache_write_1h : 0;
    int rc = 0;
    gw_buf_reset(b);
    rc |= gw_buf_printf(b, "{\"ts_ms\":%lld,\"id\":", ms);
    if (c->api->id_prefix != NULL)
        rc |= gw_buf_printf(b, "\"%s%llu\"", c->api->id_prefix, (unsigned long long)c->n);
    else
        rc |= gw_buf_appends(b, "null");
    rc |= gw_buf_appends(b, ",\"x_request_id\":");
    if (c->x_request_id != NULL)
        rc |= gw_json_escape(b, c->x_request_id, strlen(c->x_request_id));
    else
        rc |= gw_buf_appends(b, "null");
    rc |= gw_buf_printf(b, ",\"conn\":%llu", (unsigned long long)c->conn_id);
    rc |= gw_buf_printf(b, ",\"api\":\"%s\",\"model\":", c->api->log_name);
    if (c->model != NULL)
        rc |= gw_json_escape(b, c->model, strlen(c->model));
    else
        rc |= gw_buf_appends(b, "null");
    rc |= gw_buf_printf(b, ",\"stream\":%s,\"status\":%d,\"outcome\":\"%s\",\"fault\":",
                        c->stream ? "true" : "false", c->status, outcome);
    rc |= gw_json_escape(b, c->fault_spec, strlen(c->fault_spec));
    rc |= gw_buf_printf(b,
                        ",\"usage\":{\"input_tokens\":%d,\"output_tokens\":%d,"
                        "\"cache_read_tokens\":%d,\"cache_write_tokens\":%d,"
                        "\"cache_write_1h_tokens\":%d,\"reasoning_tokens\":%d}",
                        c->input_tokens, output_tokens, cache_read, cache_write, cache_write_1h,
                        reasoning_tokens);
    rc |= log_seen(b, &c->seen);
    if (c->api->log_extra != NULL)
        rc |= c->api->log_extra(c, b);
    rc |= gw_buf_appends(b, "}\n");
    if (rc != 0)
        return;
    /* One write(2) on an O_APPEND fd: lines from several threads never
     * interleave. A failed write is dropped: the log must not stall calls. */
    ssize_t w = write(fd, b->data, b->len);
    (void)w;
}

/* ---- ending a call: log first, then release the request ---- */

static void respond(struct mock_call *c, int status, const char *body, size_t len,
                    const char *outcome, int output_tokens)
{
    c->status = status;
    usage_log(c, outcome, output_tokens, output_tokens > 0 && !c->f.empty ? c->reasoning : 0);
    gw_http_respond(c->req, status, status == 200 && c->body_type ? c->body_type : JSON_TYPE, body,
                    len);
}

static void end_abort(struct mock_call *c, const char *outcome)
{
    /* A stream bills what it sent; a complete answer bills everything once
     * its head went out, nothing before. */
    if (c->stream) {
        usage_log(c, outcome, c->billed, mock_call_reasoning_billed(c));
    } else {
        int out = c->status != 0 ? mock_call_output_tokens(c) : 0;
        usage_log(c, outcome, out, out > 0 ? c->reasoning : 0);
    }
    gw_http_abort(c->req);
}

static void end_closed(struct mock_call *c)
{
    end_abort(c, "client_closed");
}

/* drop_after: gw_http_abort() sends what is already queued, then closes
 * without the terminator, so the client gets the chunks and then the cut. */
static void drop(struct mock_call *c)
{
    end_abort(c, "dropped");
}

static void on_client_close(struct gw_http_req *req, void *arg)
{
    (void)req;
    end_closed(arg);
}

static void watch_close(struct mock_call *c)
{
    if (!c->watching) {
        c->watching = 1;
        gw_http_req_on_close(c->req, on_client_close, c);
    }
}

static void free_timer(void *data)
{
    event_free(data);
}

/* One timer per call, re-armed for each wait; what the wait was for is in
 * c->waiting, so the event is never re-assigned while libevent holds it. */
static void on_timer(evutil_socket_t fd, short what, void *arg);

static int arm_timer(struct mock_call *c, int ms, enum mock_wait why)
{
    if (c->timer == NULL) {
        c->timer = event_new(c->th->base, -1, 0, on_timer, c);
        if (c->timer == NULL)
            return GW_ENOMEM;
        if (gw_pool_cleanup(c->pool, free_timer, c->timer) != 0) {
            event_free(c->timer);
            c->timer = NULL;
            return GW_ENOMEM;
        }
    }
    c->waiting = why;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    return evtimer_add(c->timer, &tv) == 0 ? 0 : GW_EIO;
}

/* ---- errors ---- */

static void respond_error(struct mock_call *c, int status, const char *message)
{
    struct gw_buf *b = &c->th->out;
    gw_buf_reset(b);
    int rc = c->api->error(c, b, status, message);
    if ((status == 429 && c->api->retry_after_always) || c->f.retry_after >= 0) {
        char secs[16];
        snprintf(secs, sizeof(secs), "%d", c->f.retry_after >= 0 ? c->f.retry_after : 1);
        (void)gw_http_add_header(c->req, "Retry-After", secs);
    }
    if (rc != 0)
        respond(c, status, "{}", 2, "error", 0);
    else
        respond(c, status, b->data, b->len, "error", 0);
}

/* ---- streaming ---- */

static void pump(struct mock_call *c);

static void on_drain(struct gw_http_req *req, void *arg)
{
    (void)req;
    pump(arg);
}

/* Cuts the JSON of the frame's last "data: " line in half: the Nth content
 * chunk arrives as an SSE event whose payload does not parse. */
static void malform_sse(struct gw_buf *f)
{
    const char *data = NULL;
    for (const char *p = f->data; (p = strstr(p, "data: ")) != NULL; p += 6)
        data = p + 6;
    if (data == NULL)
        return;
    size_t start = (size_t)(data - f->data);
    size_t json_len = f->len - start;
    while (json_len > 0 &&
           (f->data[start + json_len - 1] == '\n' || f->data[start + json_len - 1] == '\r'))
        json_len--;
    /* The frame shrinks, so the two bytes always fit. */
    f->len = start + json_len / 2;
    f->data[f->len] = '\0';
    if (gw_buf_appends(f, "\n\n") != 0)
        f->len = 0;
}

static void end_stream(struct mock_call *c)
{
    const char *outcome = c->malformed_sent ? "malformed" : c->f.empty ? "empty" : "completed";
    usage_log(c, outcome, c->billed, mock_call_reasoning_billed(c));
    gw_http_finish(c->req);
}

/* Rewrites a frame the way some providers frame SSE, all valid: each JSON
 * payload split after its first comma into two data: lines (multiline),
 * and an empty event plus a comment before it (blank_events). */
static int reshape(const struct mock_call *c, struct gw_buf *f)
{
    if (!c->sse || (!c->f.multiline && !c->f.blank_events))
        return 0;
    struct gw_buf out;
    gw_buf_init(&out, MOCK_OUT_MAX);
    int rc = c->f.blank_events ? gw_buf_appends(&out, "data:\n\n: keepalive\n\n") : 0;
    const char *p = f->data;
    const char *end = f->data + f->len;
    while (!rc && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) + 1 : (size_t)(end - p);
        const char *comma = n > 7 && memcmp(p, "data: {", 7) == 0 ? memchr(p, ',', n) : NULL;
        if (c->f.multiline && comma) {
            rc = gw_buf_append(&out, p, (size_t)(comma - p) + 1);
            rc = rc ? rc : gw_buf_appends(&out, "\ndata: ");
            rc = rc ? rc : gw_buf_append(&out, comma + 1, n - (size_t)(comma - p) - 1);
        } else {
            rc = gw_buf_append(&out, p, n);
        }
        p += n;
    }
    if (!rc) {
        gw_buf_reset(f);
        rc = gw_buf_append(f, out.data, out.len);
    }
    gw_buf_free(&out);
    return rc;
}

/* Writes frames until the stream ends, a chunk delay is due, the client
 * lags (backpressure) or a drop_after fault fires. Re-entered from the
 * delay timer and the drain callback. */
static void pump(struct mock_call *c)
{
    for (;;) {
        if (!c->have_frame) {
            gw_buf_reset(&c->frame);
            c->frame_tokens = 1;
            c->frame_kind = c->api->frame(c, &c->frame);
            if (c->frame_kind == MOCK_FRAME_END) {
                /* tail_ms: the last event is out, the response is not over. */
                if (c->f.tail_ms > 0 && !c->tail_done) {
                    if (arm_timer(c, c->f.tail_ms, MOCK_WAIT_TAIL) != 0)
                        end_stream(c);
                    return;
                }
                end_stream(c);
                return;
            }
            c->have_frame = 1;
            c->delayed = 0;
        }
        if (c->f.drop_after >= 0 && c->emitted >= c->f.drop_after &&
            c->frame_kind != MOCK_FRAME_PRE) {
            drop(c);
            return;
        }
        if (c->frame_kind == MOCK_FRAME_CONTENT && c->emitted > 0 && c->delay_ms > 0 &&
            !c->delayed) {
            /* Without a timer the stream cannot go on: cut it. */
            if (arm_timer(c, c->delay_ms, MOCK_WAIT_DELAY) != 0)
                end_abort(c, "dropped");
            return;
        }
        if (gw_http_pending(c->req) > STREAM_HIGH_WATER) {
            gw_http_on_drain(c->req, STREAM_LOW_WATER, on_drain, c);
            return;
        }
        if (c->frame_kind == MOCK_FRAME_CONTENT && c->f.malformed > 0 &&
            c->emitted + 1 == c->f.malformed) {
            if (c->api->malform != NULL)
                c->api->malform(c, &c->frame);
            else
                malform_sse(&c->frame);
            c->malformed_sent = 1;
        }
        c->have_frame = 0;
        if (reshape(c, &c->frame) != 0) {
            end_abort(c, "dropped");
            return;
        }
        if (gw_http_write(c->req, c->frame.data, c->frame.len) != 0) {
            end_closed(c);
            return;
        }
        if (c->frame_kind == MOCK_FRAME_CONTENT) {
            c->emitted++;
            c->billed += c->frame_tokens;
        }
    }
}

static void free_frame(void *data)
{
    gw_buf_free(data);
}

static void start_stream(struct mock_call *c)
{
    gw_buf_init(&c->frame, MOCK_OUT_MAX);
    if (gw_pool_cleanup(c->pool, free_frame, &c->frame) != 0) {
        respond_error(c, 500, "mock: out of memory");
        return;
    }
    watch_close(c);
    if (gw_http_start(c->req, 200, c->stream_type) != 0) {
        end_closed(c);
        return;
    }
    c->status = 200;
    if (c->f.no_body) {
        usage_log(c, "empty", 0, 0);
        gw_http_finish(c->req);
        return;
    }
    pump(c);
}

/* ---- complete answers ---- */

static void respond_body(struct mock_call *c)
{
    struct gw_buf *b = &c->th->out;
    gw_buf_reset(b);
    if (c->api->body(c, b) != 0) {
        respond_error(c, 500, "mock: answer too large");
        return;
    }
    int out = mock_call_output_tokens(c);
    if (c->f.drop_after >= 0) {
        /* The head and part of the body, then the connection closes: the
         * client sees a response cut short. */
        if (gw_http_start(c->req, 200, c->body_type ? c->body_type : JSON_TYPE) != 0) {
            end_closed(c);
            return;
        }
        c->status = 200;
        if (gw_http_write(c->req, b->data, b->len / 2) != 0) {
            end_closed(c);
            return;
        }
        drop(c);
    } else if (c->f.no_body) {
        respond(c, 200, "", 0, "empty", 0);
    } else if (c->f.malformed > 0) {
        respond(c, 200, b->data, b->len / 2, "malformed", out);
    } else {
        respond(c, 200, b->data, b->len, c->f.empty ? "empty" : "completed", out);
    }
}

/* The answer proper, once any ttfb delay is over. */
static void answer(struct mock_call *c)
{
    if (c->f.status != 0) {
        respond_error(c, c->f.status, NULL);
    } else if (c->f.error != 0) {
        const struct mock_error_text *t = mock_error_text(c->f.error, c->api->family);
        respond_error(c, t != NULL ? t->status : 400, NULL);
    } else if (c->stream)
        start_stream(c);
    else
        respond_body(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct mock_call *c = arg;
    if (c->waiting == MOCK_WAIT_TTFB) {
        answer(c);
    } else if (c->waiting == MOCK_WAIT_TAIL) {
        c->tail_done = 1;
        pump(c);
    } else {
        c->delayed = 1;
        pump(c);
    }
}

/* ---- parsing ---- */

/* Picks the fault SPEC: header, then the model's "#..." suffix, then
 * --fault. The first one present wins as a whole. */
static const char *resolve_fault(struct mock_call *c, const char *model_spec, char *err,
                                 size_t errlen)
{
    const char *h = gw_http_req_header(c->req, "x-mock-fault");
    const char *spec = NULL;
    if (h != NULL && h[0] != '\0')
        spec = h;
    else if (model_spec != NULL && model_spec[0] != '\0')
        spec = model_spec;
    if (spec == NULL) {
        c->fault_spec = c->th->sh->cfg->fault_spec;
        c->f = c->th->sh->cfg->fault;
        return NULL;
    }
    c->fault_spec = spec;
    if (mock_fault_parse(spec, strlen(spec), &c->f, err, errlen) != 0)
        return err;
    return NULL;
}

static void free_json(void *data)
{
    json_decref(data);
}

/* The model: from the URL for some APIs (already decoded), else the body's
 * "model". A "#SPEC" suffix is split off into *spec. */
static const char *parse_model(struct mock_call *c, json_t *root, const char **spec)
{
    const char *m = c->path_model;
    if (m == NULL) {
        json_t *model = json_object_get(root, "model");
        if (!json_is_string(model))
            return "model: field required (a string)";
        m = json_string_value(model);
    }
    const char *hash = strchr(m, '#');
    c->model = hash ? gw_pool_strndup(c->pool, m, (size_t)(hash - m)) : m;
    if (c->model == NULL)
        return "mock: out of memory";
    *spec = hash ? hash + 1 : NULL;
    return NULL;
}

static int clamp(int want, int room)
{
    return want < room ? want : room > 0 ? room : 0;
}

/* Returns NULL or an error message for a 400 (or c->err_status). */
static const char *parse(struct mock_call *c, char *err, size_t errlen)
{
    const char *spec = NULL;
    if (c->path_model != NULL) {
        /* Known before the body: auth refusals and the log can name it. */
        const char *merr = parse_model(c, NULL, &spec);
        if (merr != NULL)
            return merr;
    }
    if (c->api->auth != NULL) {
        const char *aerr = c->api->auth(c);
        if (aerr != NULL)
            return aerr;
    }
    size_t len;
    const char *body = gw_http_req_body(c->req, &len);
    json_t *root = NULL;
    if (c->api->parse_body != NULL) {
        /* Multipart: the API reads the body and names the model. */
        const char *m = NULL;
        const char *berr = c->api->parse_body(c, body ? body : "", body ? len : 0, &m);
        if (berr != NULL)
            return berr;
        const char *hash = strchr(m, '#');
        c->model = hash ? gw_pool_strndup(c->pool, m, (size_t)(hash - m)) : m;
        if (c->model == NULL)
            return "mock: out of memory";
        spec = hash ? hash + 1 : NULL;
    } else {
        json_error_t jerr;
        root = json_loadb(body, len, 0, &jerr);
        if (root == NULL)
            return "mock: the body is not valid JSON";
        /* Tool names point into the tree: it lives as long as the request. */
        if (gw_pool_cleanup(c->pool, free_json, root) != 0) {
            json_decref(root);
            return "mock: out of memory";
        }
        if (!json_is_object(root))
            return "mock: the body is not a JSON object";
    }
    /* A real API refuses an argument it does not know (OpenAI: "Unrecognized
     * request argument supplied"; Anthropic: "Extra inputs are not
     * permitted"). The mock accepts other unknown members (the
     * pass-through tests send some), so it refuses only the gateway's own,
     * which must never reach a provider. */
    if (json_object_get(root, "fallback_timeout_ms") != NULL)
        return "Unrecognized request argument supplied: fallback_timeout_ms";
    if (c->path_model == NULL && root != NULL) {
        const char *merr = parse_model(c, root, &spec);
        if (merr != NULL)
            return merr;
    }
    json_t *stream = json_object_get(root, "stream");
    switch (c->api->stream_mode) {
    case MOCK_STREAM_BODY:
    case MOCK_STREAM_BODY_DEFAULT:
        if (stream != NULL && !json_is_boolean(stream) && !json_is_null(stream))
            return "stream: must be a boolean";
        c->stream = stream == NULL || json_is_null(stream)
                        ? c->api->stream_mode == MOCK_STREAM_BODY_DEFAULT
                        : json_is_true(stream);
        break;
    case MOCK_STREAM_NEVER:
        c->stream = 0;
        break;
    case MOCK_STREAM_ALWAYS:
        c->stream = 1;
        break;
    }
    c->stream = c->stream && c->api->frame != NULL;
    const char *ferr = resolve_fault(c, spec, err, errlen);
    if (ferr != NULL)
        return ferr;
    if (c->f.only_id[0] &&
        (!c->x_request_id || strncmp(c->x_request_id, c->f.only_id, strlen(c->f.only_id)) != 0))
        mock_fault_clear(&c->f);
    if (c->f.times > 0 || c->f.after > 0) {
        /* after=N: the first N requests of this SPEC text are answered as
         * if they carried none; times=M: the faults apply to M requests
         * (after the first N), and later ones again carry none. */
        long long seen = mock_times_take(c->th->sh->times, c->fault_spec);
        if (seen < 0) {
            c->err_status = 500;
            return "mock: too many distinct times= fault specs";
        }
        if (seen <= c->f.after || (c->f.times > 0 && seen > (long long)c->f.after + c->f.times))
            mock_fault_clear(&c->f);
    }
    c->delay_ms = c->f.chunk_delay_ms >= 0 ? c->f.chunk_delay_ms : c->th->sh->cfg->chunk_delay_ms;
    const char *aerr = c->api->parse(c, root);
    if (aerr != NULL)
        return aerr;
    /* Cache reads, then 5-minute writes, then 1-hour writes: portions of
     * the prompt, never more than it. */
    int room = c->input_tokens;
    c->cache_read = clamp(c->f.cache_read, room);
    room -= c->cache_read;
    c->cache_write = clamp(c->f.cache_write, room);
    room -= c->cache_write;
    c->cache_write_1h = clamp(c->f.cache_write_1h, room);
    return NULL;
}

void mock_call_start(struct mock_thread *th, struct gw_http_req *req, const struct mock_api *api,
                     const char *model, size_t model_len)
{
    struct gw_pool *pool = gw_http_req_pool(req);
    struct mock_call *c = gw_pool_calloc(pool, sizeof(*c));
    if (c == NULL) {
        static const char oom[] = "{\"error\":{\"message\":\"mock: out of memory\"}}";
        gw_http_respond(req, 500, JSON_TYPE, oom, sizeof(oom) - 1);
        return;
    }
    c->req = req;
    c->th = th;
    c->api = api;
    c->pool = pool;
    c->fault_spec = "";
    mock_fault_clear(&c->f);
    c->x_request_id = gw_http_req_header(req, "x-request-id");
    c->conn_id = gw_http_req_conn_id(req);
    c->n = atomic_fetch_add_explicit(&th->sh->next_id, 1, memory_order_relaxed) + 1;
    c->created = (long long)time(NULL);
    c->seen.max_tokens = -1;
    c->stream_type = api->stream_type != NULL ? api->stream_type : SSE_TYPE;
    c->sse = api->stream_type == NULL;

    char err[160];
    const char *msg = NULL;
    if (model != NULL) {
        c->path_model = mock_url_decode(pool, model, model_len);
        if (c->path_model == NULL || c->path_model[0] == '\0')
            msg = "mock: the model in the URL is empty or badly encoded";
    }
    if (msg == NULL)
        msg = parse(c, err, sizeof(err));
    if (msg != NULL) {
        /* A bad request is answered at once, whatever its fault says. */
        c->f.retry_after = -1;
        respond_error(c, c->err_status ? c->err_status : 400, msg);
        return;
    }
    if (c->f.hang) {
        /* Never answer; the close callback logs and releases the request. */
        watch_close(c);
        return;
    }
    if (c->f.ttfb_ms > 0) {
        watch_close(c);
        if (arm_timer(c, c->f.ttfb_ms, MOCK_WAIT_TTFB) != 0)
            respond_error(c, 500, "mock: cannot arm a timer");
        return;
    }
    answer(c);
}
