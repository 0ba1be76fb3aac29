/*
 * llmgw-mockprovider: the one fake in the llmgw project.
 *
 * Tests and benchmarks point the gateway at this program instead of a real
 * LLM provider. It speaks the OpenAI (chat completions, responses,
 * embeddings, models, audio, images), Anthropic (messages), AWS Bedrock (Converse,
 * ConverseStream), Google Gemini (generateContent, streamGenerateContent,
 * embedContent) and Ollama (chat, embed) wire formats closely enough that
 * the official SDKs accept it, answers deterministically (so a test can predict every
 * token and every usage count), fails on command through fault SPECs
 * (status codes, delays, drops, hangs, malformed chunks, ...), and writes a
 * usage log that a gateway's ledger can be reconciled against. The contract
 * is docs/mockprovider.md.
 *
 * It must never be the bottleneck of a benchmark, so it serves on the
 * project's own HTTP server (common/gw_http.h) with one libevent loop per
 * thread, all threads sharing the port through SO_REUSEPORT, and the
 * non-streaming answer is built into a per-thread buffer without
 * allocations of its own.
 *
 * This file: the command line, the threads and their shutdown, and the
 * endpoints that are not model calls.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pipe2 */
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "gw_error.h"
#include "gw_http.h"
#include "gw_json.h"
#include "gw_log.h"
#include "mock.h"

#define MAX_THREADS 64

static const char usage_text[] =
    "usage: llmgw-mockprovider [--listen HOST:PORT] [--threads N]\n"
    "                          [--usage-log FILE] [--record-bodies FILE]\n"
    "                          [--fault SPEC]\n"
    "                          [--chunks N] [--chunk-delay-ms MS]\n"
    "see docs/mockprovider.md\n";

/* ---- simple endpoints ---- */

static void respond_json(struct gw_http_req *req, int status, const char *body)
{
    gw_http_respond(req, status, "application/json", body, strlen(body));
}

/* The API family a path belongs to, for errors outside a model call. */
enum family { FAM_OPENAI, FAM_ANTHROPIC, FAM_BEDROCK, FAM_GEMINI, FAM_OLLAMA };

static enum family path_family(const char *path)
{
    if (path == NULL)
        return FAM_OPENAI;
    if (strncmp(path, "/v1/messages", 12) == 0)
        return FAM_ANTHROPIC;
    if (strncmp(path, "/model/", 7) == 0)
        return FAM_BEDROCK;
    if (strncmp(path, "/v1beta/", 8) == 0 ||
        (strncmp(path, "/v1/models/", 11) == 0 && strchr(path, ':') != NULL))
        return FAM_GEMINI;
    if (strncmp(path, "/api/", 5) == 0)
        return FAM_OLLAMA;
    return FAM_OPENAI;
}

/* Errors outside a model call, shaped like the API the path belongs to. */
static void respond_plain_error(struct gw_http_req *req, int status, const char *code,
                                const char *message)
{
    struct gw_buf b;
    gw_buf_init(&b, 64 * 1024);
    int rc;
    const char *type = NULL;
    switch (path_family(gw_http_req_path(req))) {
    case FAM_ANTHROPIC:
        rc = mock_anthropic_error_body(&b, status, message, 0);
        break;
    case FAM_BEDROCK:
        rc = mock_bedrock_error_body(&b, status, message, &type);
        if (type != NULL)
            (void)gw_http_add_header(req, "x-amzn-ErrorType", type);
        break;
    case FAM_GEMINI:
        rc = mock_gemini_error_body(&b, status, message, -1);
        break;
    case FAM_OLLAMA:
        rc = mock_ollama_error_body(&b, status, message);
        break;
    default:
        rc = mock_openai_error_body(&b, status, message, code);
        break;
    }
    if (rc == 0)
        gw_http_respond(req, status, "application/json", b.data, b.len);
    else
        respond_json(req, status, "{}");
    gw_buf_free(&b);
}

static const char openai_models[] =
    "{\"object\":\"list\",\"data\":["
    "{\"id\":\"mock-gpt\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"llmgw-mock\"},"
    "{\"id\":\"mock-gpt-large\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"llmgw-"
    "mock\"},"
    "{\"id\":\"mock-claude\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"llmgw-"
    "mock\"},"
    "{\"id\":\"mock-embed\",\"object\":\"model\",\"created\":1700000000,\"owned_by\":\"llmgw-"
    "mock\"}]}";

/* Gemini's list (GET /v1beta/models). */
static const char gemini_models[] =
    "{\"models\":["
    "{\"name\":\"models/mock-gemini\",\"version\":\"001\",\"displayName\":\"Mock Gemini\","
    "\"inputTokenLimit\":1048576,\"outputTokenLimit\":65536,\"supportedGenerationMethods\":"
    "[\"generateContent\",\"streamGenerateContent\",\"countTokens\"]},"
    "{\"name\":\"models/mock-embed\",\"version\":\"001\",\"displayName\":\"Mock Embed\","
    "\"inputTokenLimit\":2048,\"outputTokenLimit\":1,\"supportedGenerationMethods\":"
    "[\"embedContent\",\"batchEmbedContents\"]}]}";

/* Ollama's list (GET /api/tags) and version. */
static const char ollama_tags[] =
    "{\"models\":["
    "{\"name\":\"mock-llama:latest\",\"model\":\"mock-llama:latest\","
    "\"modified_at\":\"2023-11-14T22:13:20Z\",\"size\":1000000,\"digest\":"
    "\"0000000000000000000000000000000000000000000000000000000000000000\",\"details\":"
    "{\"parent_model\":\"\",\"format\":\"gguf\",\"family\":\"llama\",\"families\":"
    "[\"llama\"],\"parameter_size\":\"1B\",\"quantization_level\":\"Q8_0\"}}]}";
static const char ollama_version[] = "{\"version\":\"0.12.0\"}";

/* Anthropic clients (they send anthropic-version) get Anthropic's list shape. */
static const char anthropic_models[] =
    "{\"data\":["
    "{\"type\":\"model\",\"id\":\"mock-gpt\",\"display_name\":\"Mock "
    "GPT\",\"created_at\":\"2023-11-14T22:13:20Z\"},"
    "{\"type\":\"model\",\"id\":\"mock-gpt-large\",\"display_name\":\"Mock GPT "
    "Large\",\"created_at\":\"2023-11-14T22:13:20Z\"},"
    "{\"type\":\"model\",\"id\":\"mock-claude\",\"display_name\":\"Mock "
    "Claude\",\"created_at\":\"2023-11-14T22:13:20Z\"},"
    "{\"type\":\"model\",\"id\":\"mock-embed\",\"display_name\":\"Mock "
    "Embed\",\"created_at\":\"2023-11-14T22:13:20Z\"}],"
    "\"has_more\":false,\"first_id\":\"mock-gpt\",\"last_id\":\"mock-embed\"}";

/* The simple GET endpoints: NULL when path is not one. */
static const char *simple_body(struct gw_http_req *req, const char *path)
{
    if (strcmp(path, "/healthz") == 0)
        return "{\"status\":\"ok\"}";
    if (strcmp(path, "/v1/models") == 0)
        return gw_http_req_header(req, "anthropic-version") != NULL ? anthropic_models
                                                                    : openai_models;
    if (strcmp(path, "/v1beta/models") == 0)
        return gemini_models;
    if (strcmp(path, "/api/tags") == 0)
        return ollama_tags;
    if (strcmp(path, "/api/version") == 0)
        return ollama_version;
    return NULL;
}

/* /model/{modelId}/converse and /model/{modelId}/converse-stream. */
static const struct mock_api *bedrock_route(const char *path, const char **model, size_t *mlen)
{
    const char *id = path + 7;
    const char *slash = strchr(id, '/');
    if (slash == NULL || slash == id)
        return NULL;
    *model = id;
    *mlen = (size_t)(slash - id);
    if (strcmp(slash, "/converse") == 0)
        return &mock_bedrock_converse;
    if (strcmp(slash, "/converse-stream") == 0)
        return &mock_bedrock_converse_stream;
    return NULL;
}

/* /v1beta/models/{model}:{method} (or /v1/models/...). The model ends at
 * the last ':' of the raw path, so an encoded "%3A" inside it survives. */
static const struct mock_api *gemini_route(const char *path, const char **model, size_t *mlen)
{
    const char *m = strncmp(path, "/v1beta/models/", 15) == 0 ? path + 15
                    : strncmp(path, "/v1/models/", 11) == 0   ? path + 11
                                                              : NULL;
    if (m == NULL)
        return NULL;
    const char *colon = strrchr(m, ':');
    if (colon == NULL || colon == m || memchr(m, '/', (size_t)(colon - m)) != NULL)
        return NULL;
    *model = m;
    *mlen = (size_t)(colon - m);
    const char *method = colon + 1;
    if (strcmp(method, "generateContent") == 0)
        return &mock_gemini_generate;
    if (strcmp(method, "streamGenerateContent") == 0)
        return &mock_gemini_stream;
    if (strcmp(method, "embedContent") == 0)
        return &mock_gemini_embed;
    if (strcmp(method, "batchEmbedContents") == 0)
        return &mock_gemini_batch_embed;
    return NULL;
}

/* --record-bodies: one JSON line per model call, {"path","body"} with the
 * body exactly as received (as a JSON string), so a test can compare what
 * reached the provider with what the client sent, and the W3C trace
 * headers it came with ("traceparent", "tracestate"); a multipart body (binary)
 * as {"path","content_type","body_b64"} instead. One write: lines from
 * several threads never interleave. */
static void record_body(const struct mock_thread *th, struct gw_http_req *req, const char *path)
{
    if (th->sh->record_fd < 0)
        return;
    size_t len;
    const char *body = gw_http_req_body(req, &len);
    struct gw_buf b;
    gw_buf_init(&b, 0);
    const char *ct = gw_http_req_header(req, "content-type");
    int multipart = ct != NULL && strncasecmp(ct, "multipart/", 10) == 0;
    int rc = gw_buf_appends(&b, "{\"path\":");
    if (rc == GW_OK)
        rc = gw_json_escape(&b, path, strlen(path));
    static const char *const trace_headers[] = {"traceparent", "tracestate"};
    for (size_t i = 0; i < 2 && rc == GW_OK; i++) {
        const char *v = gw_http_req_header(req, trace_headers[i]);
        if (!v)
            continue;
        rc = gw_buf_printf(&b, ",\"%s\":", trace_headers[i]);
        if (rc == GW_OK)
            rc = gw_json_escape(&b, v, strlen(v));
    }
    if (rc == GW_OK && multipart) {
        rc = gw_buf_appends(&b, ",\"content_type\":");
        if (rc == GW_OK)
            rc = gw_json_escape(&b, ct, strlen(ct));
        if (rc == GW_OK)
            rc = gw_buf_appends(&b, ",\"body_b64\":\"");
        if (rc == GW_OK)
            rc = mock_base64_append(&b, (const unsigned char *)(body ? body : ""), body ? len : 0);
        if (rc == GW_OK)
            rc = gw_buf_appends(&b, "\"");
    } else {
        if (rc == GW_OK)
            rc = gw_buf_appends(&b, ",\"body\":");
        if (rc == GW_OK)
            rc = gw_json_escape(&b, body ? body : "", body ? len : 0);
    }
    if (rc == GW_OK)
        rc = gw_buf_appends(&b, "}\n");
    if (rc == GW_OK && write(th->sh->record_fd, b.data, b.len) != (ssize_t)b.len)
        gw_log(GW_LOG_WARN, "body record: short write", NULL);
    gw_buf_free(&b);
}

/* GET /v1/mock/images/<name>.png */
static int is_image_url(const char *path)
{
    size_t n = strlen(path);
    return n > 20 && strncmp(path, "/v1/mock/images/", 16) == 0 &&
           strcmp(path + n - 4, ".png") == 0 && strchr(path + 16, '/') == NULL;
}

static void on_request(struct gw_http_req *req, void *arg)
{
    struct mock_thread *th = arg;
    const char *path = gw_http_req_path(req);
    const char *method = gw_http_req_method(req);
    int post = strcmp(method, "POST") == 0, get = strcmp(method, "GET") == 0;
    const struct mock_api *api = NULL;
    const char *model = NULL, *simple = NULL;
    size_t mlen = 0;

    if (strcmp(path, "/v1/chat/completions") == 0)
        api = &mock_openai_chat;
    else if (strcmp(path, "/v1/responses") == 0)
        api = &mock_openai_responses;
    else if (strcmp(path, "/v1/messages") == 0)
        api = &mock_anthropic_messages;
    else if (strcmp(path, "/v1/embeddings") == 0)
        api = &mock_openai_embeddings;
    else if (strcmp(path, "/v1/audio/transcriptions") == 0)
        api = &mock_openai_transcriptions;
    else if (strcmp(path, "/v1/audio/translations") == 0)
        api = &mock_openai_translations;
    else if (strcmp(path, "/v1/audio/speech") == 0)
        api = &mock_openai_speech;
    else if (strcmp(path, "/v1/images/generations") == 0)
        api = &mock_openai_images_generations;
    else if (strcmp(path, "/v1/images/edits") == 0)
        api = &mock_openai_images_edits;
    else if (strcmp(path, "/api/chat") == 0)
        api = &mock_ollama_chat;
    else if (strcmp(path, "/api/embed") == 0)
        api = &mock_ollama_embed;
    else if (strncmp(path, "/model/", 7) == 0)
        api = bedrock_route(path, &model, &mlen);
    else if (strchr(path, ':') != NULL)
        api = gemini_route(path, &model, &mlen);
    else
        simple = simple_body(req, path);

    if (api == NULL && simple == NULL && get && is_image_url(path)) {
        /* The images a url answer points at (media.c): the mock's PNG. */
        gw_http_respond(req, 200, "image/png", (const char *)mock_png, mock_png_len);
        return;
    }
    if (api == NULL && simple == NULL) {
        /* Each provider's wording for a path it does not serve. */
        char msg[160];
        switch (path_family(path)) {
        case FAM_OPENAI:
            snprintf(msg, sizeof(msg), "Invalid URL (%.16s %.100s)", method, path);
            break;
        case FAM_OLLAMA:
            snprintf(msg, sizeof(msg), "404 page not found");
            break;
        default:
            snprintf(msg, sizeof(msg), "mock: no such endpoint (%.16s %.100s)", method, path);
            break;
        }
        respond_plain_error(req, 404, NULL, msg);
        return;
    }
    if (api != NULL ? !post : !get) {
        (void)gw_http_add_header(req, "Allow", api != NULL ? "POST" : "GET");
        respond_plain_error(req, 405, "method_not_allowed", "mock: method not allowed");
        return;
    }
    if (api != NULL) {
        record_body(th, req, path);
        mock_call_start(th, req, api, model, mlen);
    } else
        respond_json(req, 200, simple);
}

static void on_reject(struct gw_http_req *req, int status, const char *code, const char *message,
                      void *arg)
{
    (void)arg;
    respond_plain_error(req, status, code, message);
}

/* ---- command line ---- */

static int parse_int(const char *s, long lo, long hi, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        return GW_EINVAL;
    *out = (int)v;
    return 0;
}

/* HOST:PORT, or [V6ADDR]:PORT. host receives a copy. */
static int parse_listen(const char *arg, char *host, size_t hostlen, int *port)
{
    const char *colon = strrchr(arg, ':');
    if (colon == NULL)
        return GW_EINVAL;
    const char *h = arg;
    size_t hl = (size_t)(colon - arg);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl == 0 || hl >= hostlen)
        return GW_EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    return parse_int(colon + 1, 0, 65535, port);
}

static int die_usage(const char *why, const char *arg)
{
    fprintf(stderr, "llmgw-mockprovider: %s%s%s\n%s", why, arg ? ": " : "", arg ? arg : "",
            usage_text);
    return 2;
}

/* Fills cfg from argv. Returns 0, or an exit status (2) after a message. */
static int parse_args(int argc, char **argv, struct mock_config *cfg, char *host, size_t hostlen)
{
    snprintf(host, hostlen, "127.0.0.1");
    cfg->host = host;
    cfg->port = 9090;
    cfg->threads = 1;
    cfg->usage_log = NULL;
    cfg->record_log = NULL;
    cfg->fault_spec = "";
    cfg->chunks = 8;
    cfg->chunk_delay_ms = 0;
    mock_fault_clear(&cfg->fault);

    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i], *val = NULL;
        char name[32];
        const char *eq = strchr(flag, '=');
        size_t nl = eq ? (size_t)(eq - flag) : strlen(flag);
        if (nl >= sizeof(name))
            return die_usage("unknown flag", flag);
        memcpy(name, flag, nl);
        name[nl] = '\0';
        if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
            fputs(usage_text, stdout);
            exit(0);
        }
        if (eq != NULL)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else
            return die_usage("missing value for", flag);

        if (strcmp(name, "--listen") == 0) {
            if (parse_listen(val, host, hostlen, &cfg->port) != 0)
                return die_usage("bad --listen (want HOST:PORT)", val);
        } else if (strcmp(name, "--threads") == 0) {
            if (parse_int(val, 1, MAX_THREADS, &cfg->threads) != 0)
                return die_usage("bad --threads (1-64)", val);
        } else if (strcmp(name, "--usage-log") == 0) {
            cfg->usage_log = val;
        } else if (strcmp(name, "--record-bodies") == 0) {
            cfg->record_log = val;
        } else if (strcmp(name, "--fault") == 0) {
            char err[160];
            if (mock_fault_parse(val, strlen(val), &cfg->fault, err, sizeof(err)) != 0)
                return die_usage(err, val);
            cfg->fault_spec = val;
        } else if (strcmp(name, "--chunks") == 0) {
            if (parse_int(val, 0, MOCK_MAX_CHUNKS, &cfg->chunks) != 0)
                return die_usage("bad --chunks", val);
        } else if (strcmp(name, "--chunk-delay-ms") == 0) {
            if (parse_int(val, 0, MOCK_MAX_MS, &cfg->chunk_delay_ms) != 0)
                return die_usage("bad --chunk-delay-ms", val);
        } else {
            return die_usage("unknown flag", flag);
        }
    }
    return 0;
}

/* ---- threads ---- */

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    char byte;
    while (read(fd, &byte, 1) > 0) {
    }
    event_base_loopbreak(arg);
}

static void *thread_main(void *arg)
{
    struct mock_thread *th = arg;
    event_base_dispatch(th->base);
    /* Requests still open (hangs, slow streams) get their close callback
     * here and are logged as client_closed. */
    gw_http_server_free(th->srv);
    th->srv = NULL;
    event_free(th->wake_ev);
    th->wake_ev = NULL;
    event_base_free(th->base);
    th->base = NULL;
    return NULL;
}

static int thread_init(struct mock_thread *th, struct mock_shared *sh, int fd)
{
    memset(th, 0, sizeof(*th));
    th->sh = sh;
    th->listen_fd = fd;
    th->wake_fd[0] = th->wake_fd[1] = -1;
    gw_buf_init(&th->out, MOCK_OUT_MAX);
    gw_buf_init(&th->line, 1u << 20);
    struct gw_http_server_opts opts = {
        .handler = on_request,
        .reject = on_reject,
        .arg = th,
        /* Uploads to the media endpoints (audio files and images up to
         * 32 MiB, in multipart) fit; gw_http's default is 4 MiB. */
        .max_body_bytes = 64u << 20,
    };
    /* No locking (each base is used by its own thread only), and epoll's
     * changelist: every response arms and disarms EV_WRITE, and coalescing
     * those within a loop iteration saves an epoll_ctl per request. */
    struct event_config *ec = event_config_new();
    if (ec == NULL)
        return GW_ENOMEM;
    event_config_set_flag(ec, EVENT_BASE_FLAG_NOLOCK | EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
    th->base = event_base_new_with_config(ec);
    event_config_free(ec);
    if (th->base == NULL || pipe2(th->wake_fd, O_CLOEXEC | O_NONBLOCK) != 0)
        return GW_EIO;
    th->wake_ev = event_new(th->base, th->wake_fd[0], EV_READ | EV_PERSIST, on_wake, th->base);
    if (th->wake_ev == NULL || event_add(th->wake_ev, NULL) != 0)
        return GW_ENOMEM;
    th->srv = gw_http_server_new(th->base, fd, &opts);
    return th->srv != NULL ? 0 : GW_ENOMEM;
}

int main(int argc, char **argv)
{
    struct mock_config cfg;
    char host[256];
    int rc = parse_args(argc, argv, &cfg, host, sizeof(host));
    if (rc != 0)
        return rc;

    /* Seed jansson's hash once, before threads parse concurrently. */
    json_object_seed(0);
    signal(SIGPIPE, SIG_IGN);

    struct mock_shared sh = {.cfg = &cfg, .usage_fd = -1, .record_fd = -1};
    if (cfg.record_log != NULL &&
        (sh.record_fd = open(cfg.record_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)) <
            0) {
        gw_logf(GW_LOG_ERROR, "cannot open the body record", "{s:s,s:s}", "path", cfg.record_log,
                "error", strerror(errno));
        return 1;
    }
    atomic_init(&sh.next_id, 0);
    if (cfg.usage_log != NULL) {
        sh.usage_fd = open(cfg.usage_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (sh.usage_fd < 0) {
            gw_logf(GW_LOG_ERROR, "cannot open usage log", "{s:s,s:s}", "path", cfg.usage_log,
                    "error", strerror(errno));
            return 1;
        }
    }
    sh.times = mock_times_new();
    if (sh.times == NULL)
        return 1;

    struct mock_thread *threads = calloc((size_t)cfg.threads, sizeof(*threads));
    if (threads == NULL) {
        mock_times_free(sh.times);
        return 1;
    }

    /* The first socket learns the port (port 0 picks one); the others bind
     * the same port, and the kernel spreads connections among them. */
    int fds[MAX_THREADS];
    int nfds = 0, port = cfg.port;
    for (; nfds < cfg.threads; nfds++) {
        int bound = 0;
        fds[nfds] = gw_http_listen(cfg.host, port, 1, &bound);
        if (fds[nfds] < 0) {
            gw_logf(GW_LOG_ERROR, "cannot listen", "{s:s,s:i,s:s}", "host", cfg.host, "port", port,
                    "error", gw_strerror(fds[nfds]));
            rc = 1;
            break;
        }
        port = bound;
    }

    /* Only the main thread takes SIGTERM/SIGINT (sigwait below); the event
     * loops inherit the blocked mask and are stopped through their pipe. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);

    int inited = 0, started = 0;
    for (int i = 0; rc == 0 && i < cfg.threads; i++) {
        int irc = thread_init(&threads[i], &sh, fds[i]);
        inited++;
        if (irc != 0 || pthread_create(&threads[i].tid, NULL, thread_main, &threads[i]) != 0) {
            gw_log(GW_LOG_ERROR, "cannot start an event-loop thread", NULL);
            rc = 1;
            break;
        }
        started++;
    }

    if (rc == 0) {
        gw_log_line_fd(
            1, json_pack("{s:s,s:s,s:i}", "msg", "listening", "host", cfg.host, "port", port));
        int sig = 0;
        while (sigwait(&stop, &sig) != 0) {
        }
    }

    for (int i = 0; i < started; i++) {
        ssize_t w = write(threads[i].wake_fd[1], "x", 1);
        (void)w;
    }
    for (int i = 0; i < started; i++)
        pthread_join(threads[i].tid, NULL);
    for (int i = 0; i < inited; i++) {
        struct mock_thread *th = &threads[i];
        if (i >= started) {
            /* Never ran: free what thread_init built (the server owns the
             * listening fd once it exists). */
            if (th->srv != NULL)
                gw_http_server_free(th->srv);
            else
                close(fds[i]);
            if (th->wake_ev != NULL)
                event_free(th->wake_ev);
            if (th->base != NULL)
                event_base_free(th->base);
        }
        if (th->wake_fd[0] >= 0)
            close(th->wake_fd[0]);
        if (th->wake_fd[1] >= 0)
            close(th->wake_fd[1]);
        gw_buf_free(&th->out);
        gw_buf_free(&th->line);
    }
    for (int i = inited; i < nfds; i++)
        close(fds[i]);
    free(threads);
    if (sh.usage_fd >= 0)
        close(sh.usage_fd);
    if (sh.record_fd >= 0)
        close(sh.record_fd);
    mock_times_free(sh.times);
    return rc;
}
