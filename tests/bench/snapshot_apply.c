/*
 * The data plane's side of a configuration write, alone: a whole build of a
 * document against applying one write's delta to the snapshot built from
 * it (dp_snapshot_apply), at growing sizes. Not a test: it prints figures
 * (docs/BENCHMARKS.md, "Configuration at scale").
 *
 *   build/tests/bench/bench_snapshot_apply [keys...]   (default 1000 10000 100000)
 *
 * Per size: KEYS keys (a third with a team), KEYS/10 routes of two entries
 * over 500 providers, 20 teams; the whole build's time; then 200 deltas of
 * one key each (alternately a new key and a revoked one) and 200 of one
 * route each (its entries changed), timed one by one (median and p99, in
 * microseconds, CPU time of this thread); and the process's RSS after the
 * build and after the 400 generations (each older one released, as the
 * data plane does when no request holds it).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dp_snapshot.h"
#include "gw_crypto.h"
#include "gw_log.h"

static double cpu_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            v = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    return v;
}

static json_t *key(int i, int with_team)
{
    char id[32], plain[48], hex[65];
    snprintf(id, sizeof(id), "key_%07d", i);
    snprintf(plain, sizeof(plain), "sk-bench-%d", i);
    gw_sha256_hex(plain, strlen(plain), hex);
    json_t *k = json_pack("{s:s,s:s,s:s}", "id", id, "hash", hex, "status", "active");
    if (with_team) {
        char t[16];
        snprintf(t, sizeof(t), "team_%d", i % 20);
        json_object_set_new(k, "team", json_string(t));
    }
    return k;
}

static json_t *route(int i, int variant)
{
    char name[32], p1[16], p2[16];
    snprintf(name, sizeof(name), "route_%06d", i);
    snprintf(p1, sizeof(p1), "prov_%03d", (i + variant) % 500);
    snprintf(p2, sizeof(p2), "prov_%03d", (i + variant + 1) % 500);
    return json_pack("{s:s,s:[{s:s,s:s},{s:s,s:s}]}", "name", name, "entries", "provider", p1,
                     "model", "model-a", "provider", p2, "model", "model-b");
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void run(int nkeys)
{
    int nroutes = nkeys / 10;
    json_t *doc = json_pack("{s:i,s:[],s:[],s:[],s:[],s:[],s:[],s:[]}", "version", 1, "providers",
                            "routes", "keys", "teams", "projects", "limits", "catalog");
    json_t *a = json_object_get(doc, "providers");
    for (int i = 0; i < 500; i++) {
        char n[16];
        snprintf(n, sizeof(n), "prov_%03d", i);
        json_array_append_new(a, json_pack("{s:s,s:s,s:s,s:s}", "name", n, "driver", "openai",
                                           "base_url", "http://127.0.0.1:9/v1", "credential",
                                           "sk-provider"));
    }
    for (int i = 0; i < 20; i++) {
        char n[16];
        snprintf(n, sizeof(n), "team_%d", i);
        json_array_append_new(json_object_get(doc, "teams"), json_pack("{s:s}", "name", n));
    }
    for (int i = 0; i < nroutes; i++)
        json_array_append_new(json_object_get(doc, "routes"), route(i, 0));
    for (int i = 0; i < nkeys; i++)
        json_array_append_new(json_object_get(doc, "keys"), key(i, i % 3 == 0));
    long rss0 = rss_kib();
    char err[512];
    double t0 = cpu_us();
    struct dp_snapshot *s = dp_snapshot_build_ex(doc, DP_SNAPSHOT_PUSHED, err, sizeof(err));
    double build_us = cpu_us() - t0;
    json_decref(doc);
    if (!s) {
        fprintf(stderr, "build: %s\n", err);
        exit(1);
    }
    long rss_built = rss_kib();
    enum { N = 200 };
    double kd[N], rd[N];
    long long version = 1;
    for (int i = 0; i < 2 * N; i++) {
        json_t *d = json_pack("{s:I,s:I}", "version", (json_int_t)(version + 1), "base_version",
                              (json_int_t)version);
        if (i % 2 == 0) { /* a key: a new one, or one revoked */
            int k = i / 2;
            json_t *sec = json_object();
            char id[32];
            if (k % 2 == 0) {
                json_t *o = key(nkeys + k, 1);
                snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(o, "id")));
                json_object_set_new(sec, id, o);
            } else {
                snprintf(id, sizeof(id), "key_%07d", k);
                json_object_set_new(sec, id, json_null());
            }
            json_object_set_new(d, "keys", sec);
        } else { /* a route's entries */
            int r = (i / 2 * 7919) % nroutes;
            json_t *o = route(r, 1 + i);
            json_t *sec = json_object();
            json_object_set_new(sec, json_string_value(json_object_get(o, "name")), o);
            json_object_set_new(d, "routes", sec);
        }
        t0 = cpu_us();
        struct dp_snapshot *n = dp_snapshot_apply(s, d, DP_SNAPSHOT_PUSHED, err, sizeof(err));
        double us = cpu_us() - t0;
        json_decref(d);
        if (!n) {
            fprintf(stderr, "apply: %s\n", err);
            exit(1);
        }
        dp_snapshot_unref(s); /* the older generation goes */
        s = n;
        version++;
        (i % 2 == 0 ? kd : rd)[i / 2] = us;
    }
    qsort(kd, N, sizeof(double), cmp);
    qsort(rd, N, sizeof(double), cmp);
    long rss_end = rss_kib();
    printf("%7d keys %6d routes | build %8.1f ms | key delta p50 %6.1f us p99 %6.1f us | route "
           "delta p50 %6.1f us p99 %6.1f us | RSS %ld MiB held, %+ld KiB over %d writes\n",
           nkeys, nroutes, build_us / 1000, kd[N / 2], kd[N * 99 / 100], rd[N / 2],
           rd[N * 99 / 100], (rss_built - rss0) / 1024, rss_end - rss_built, 2 * N);
    dp_snapshot_unref(s);
}

int main(int argc, char **argv)
{
    gw_log_set_level(GW_LOG_ERROR);
    if (argc > 1)
        for (int i = 1; i < argc; i++)
            run(atoi(argv[i]));
    else
        for (int n = 1000; n <= 100000; n *= 10)
            run(n);
    return 0;
}
