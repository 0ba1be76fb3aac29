#!/usr/bin/env bash
# llmgw benchmark rig: the mock provider directly, nginx -> mock, and
# llmgw -> mock, measured with wrk in one run, targets interleaved round by
# round. See docs/BENCHMARKS.md.
#
# Usage: tests/bench/run.sh            (from any directory)
#        tests/bench/run.sh --propagation
#            runs the control-plane propagation benchmark instead
#            (tests/bench/propagation.mjs: Postgres, llmgw-controlplane, two
#            data planes; PROP_WRITES, PROP_GAP_MS, PROP_OUT)
#        tests/bench/run.sh --config-scale
#            a generated configuration at scale, writes through the admin
#            API, propagation to three data planes, CPU and RSS per write
#            (tests/bench/config_scale.mjs; SCALE_KEYS, SCALE_ROUTES,
#            SCALE_PROVIDERS, SCALE_WRITES, SCALE_CPS, SCALE_OUT)
#        tests/bench/run.sh --watchload
#            one control plane fanning writes out to WATCHERS simulated
#            replicas (tests/bench/watchload.mjs and llmgw-watchload, built
#            in the build tree; WATCHERS, SCALE_KEYS, SCALE_WRITES, SCALE_OUT)
#        tests/bench/run.sh --cache
#            the response cache (tests/bench/cache.mjs): cold and warm
#            passes of CACHE_PROMPTS distinct prompts against an instant and
#            a slow mock, then one cached prompt's throughput on llmgw
#            against nginx -> mock (BENCH_WORKERS, BENCH_CONNS,
#            BENCH_SECONDS, BENCH_ROUNDS, BENCH_WARMUP, BENCH_OUT, CACHE_*:
#            see the script's head)
#        tests/bench/run.sh --judge
#            the LLM-as-judge (tests/bench/judge.mjs): the client's latency
#            with the judge sampling every request against the same route
#            sampling none, open loop at JUDGE_RATE, legs interleaved, and
#            the judge's counts from /metrics (BENCH_WORKERS, BENCH_ROUNDS,
#            BENCH_WARMUP, BENCH_OUT, JUDGE_*: see the script's head)
#
# Environment:
#   LLMGW_BUILD_DIR      build tree (default: <repo>/build, a Release build)
#   LLMGW_MOCK_BIN       mock provider binary (default: from LLMGW_BUILD_DIR)
#   LLMGW_DATAPLANE_BIN  data plane binary   (default: from LLMGW_BUILD_DIR)
#   NGINX_BIN            nginx (default /usr/sbin/nginx)
#   WRK_BIN              wrk (default: wrk on PATH)
#   BENCH_CONNS          wrk connections (default 64)
#   BENCH_SECONDS        seconds per measured run (default 5)
#   BENCH_ROUNDS         rounds (default 3)
#   BENCH_WARMUP         seconds of unrecorded warm-up per target and mode
#                        before round 1 (default 1; 0 = none)
#   BENCH_WRK_THREADS    wrk threads (default 1)
#   BENCH_WORKERS        llmgw --threads and nginx worker_processes, equal
#                        (default 2: compare at equal worker counts)
#   BENCH_MOCK_THREADS   mock provider threads (default 1)
#   BENCH_GW_ACCESS_LOG  llmgw --access-log (default /dev/null; nginx runs
#                        with access_log off)
#   BENCH_GOVERNANCE     1 (default): llmgw runs governed, as in production:
#                        PostgreSQL and llmgw-controlplane (tests/bench/
#                        governed.mjs) push its snapshot, a key is checked on
#                        every request, a cost budget on the key is reserved
#                        against a leased allowance, and every attempt's
#                        ledger row is spooled (--ledger-spool) and stored;
#                        the rows stored are counted at the end. 0: a file
#                        snapshot with the key only.
#   BENCH_TRACES         1: one more target, "traced": a second llmgw data
#                        plane, the same as "llmgw" but exporting OpenTelemetry
#                        traces (OTLP/HTTP protobuf) to a sink that answers 200
#                        (a server block of the same nginx); the report adds
#                        traced/llmgw throughput and CPU per request, and the
#                        spans exported and dropped. Default 0.
#   BENCH_TRACES_SAMPLER OTEL_TRACES_SAMPLER of the traced data plane (default
#                        always_on: every request's spans); BENCH_TRACES_ARG its
#                        OTEL_TRACES_SAMPLER_ARG
#   BENCH_OUT            also write the results as a markdown fragment here
#   BENCH_KEEP_TMP=1     keep the temp dir (logs, configs, raw wrk output);
#                        it is always kept when the run fails
#
# Exit status: 0 when every run finished without errors, 2 when some
# response was an error or a server died (the table is printed anyway),
# 1 when the rig itself could not run.
set -euo pipefail

if [[ ${1:-} == --propagation ]]; then
    exec node "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/propagation.mjs"
fi
if [[ ${1:-} == --config-scale ]]; then
    exec node "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/config_scale.mjs"
fi
if [[ ${1:-} == --watchload ]]; then
    exec node "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/watchload.mjs"
fi
if [[ ${1:-} == --cache ]]; then
    exec node "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/cache.mjs"
fi
if [[ ${1:-} == --judge ]]; then
    exec node "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)/judge.mjs"
fi
# --open-loop: the same targets at fixed request rates (tests/bench/openloop.c:
# latency from each request's due time, so a stall cannot hide the requests
# queued behind it), instead of wrk's closed loop. OPEN_RATES (default
# "1000 5000 10000"), OPEN_CONNS (default 128), BENCH_SECONDS per run.
OPEN_LOOP=0
[[ ${1:-} == --open-loop ]] && OPEN_LOOP=1

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd -- "$SCRIPT_DIR/../.." && pwd)
BUILD_DIR=${LLMGW_BUILD_DIR:-$REPO_DIR/build}
MOCK_BIN=${LLMGW_MOCK_BIN:-$BUILD_DIR/tests/mockprovider/llmgw-mockprovider}
DP_BIN=${LLMGW_DATAPLANE_BIN:-$BUILD_DIR/dataplane/llmgw-dataplane}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
WRK_BIN=${WRK_BIN:-wrk}
LUA_SCRIPT=$SCRIPT_DIR/chat.lua

CONNS=${BENCH_CONNS:-64}
DURATION=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
WARMUP=${BENCH_WARMUP:-1}
WRK_THREADS=${BENCH_WRK_THREADS:-1}
WORKERS=${BENCH_WORKERS:-2}
MOCK_THREADS=${BENCH_MOCK_THREADS:-1}
GW_ACCESS_LOG=${BENCH_GW_ACCESS_LOG:-/dev/null}
OUT=${BENCH_OUT:-}
KEEP_TMP=${BENCH_KEEP_TMP:-0}
GOVERNANCE=${BENCH_GOVERNANCE:-1}
TRACES=${BENCH_TRACES:-0}
TRACES_SAMPLER=${BENCH_TRACES_SAMPLER:-always_on}
TRACES_ARG=${BENCH_TRACES_ARG:-}

MOCK_CHUNKS=8          # the mock's default; one content chunk per token
API_KEY=sk-llmgw-bench-demo
UPSTREAM_KEY=sk-mock-bench
# llmgw: the same-protocol pass-through (an OpenAI client, an openai
# provider); xlate: the same gateway and mock through a provider with
# options.passthrough false, i.e. the translating path (canonical request,
# driver, facade re-encoding).
TARGETS=(direct nginx llmgw xlate)
[[ $TRACES == 1 ]] && TARGETS=(direct nginx llmgw traced xlate)
MODES=(chat stream)

log() { printf '[bench] %s\n' "$*" >&2; }
die() { printf '[bench] ERROR: %s\n' "$*" >&2; exit 1; }

check_int() { # NAME VALUE MIN MAX
    [[ $2 =~ ^[0-9]+$ ]] || die "$1 must be an integer, got '$2'"
    (( 10#$2 >= $3 && 10#$2 <= $4 )) || die "$1 must be in $3..$4, got $2"
}
check_int BENCH_CONNS "$CONNS" 1 10000
check_int BENCH_SECONDS "$DURATION" 1 600
check_int BENCH_ROUNDS "$ROUNDS" 1 50
check_int BENCH_WARMUP "$WARMUP" 0 60
check_int BENCH_WRK_THREADS "$WRK_THREADS" 1 64
check_int BENCH_WORKERS "$WORKERS" 1 64
check_int BENCH_MOCK_THREADS "$MOCK_THREADS" 1 64
CONNS=$((10#$CONNS)) DURATION=$((10#$DURATION)) ROUNDS=$((10#$ROUNDS))
WARMUP=$((10#$WARMUP)) WRK_THREADS=$((10#$WRK_THREADS))
(( CONNS >= WRK_THREADS )) || die "BENCH_CONNS must be >= BENCH_WRK_THREADS"

for tool in "$WRK_BIN" jq curl ss ps sha256sum timeout awk sort; do
    command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (apt-get install wrk jq curl iproute2)"
done
[[ -x $NGINX_BIN ]] || die "nginx not found at $NGINX_BIN (apt-get install nginx-light)"
[[ -x $MOCK_BIN ]] || die "mock provider not built: $MOCK_BIN (set LLMGW_BUILD_DIR)"
[[ -x $DP_BIN ]] || die "data plane not built: $DP_BIN (set LLMGW_BUILD_DIR)"
[[ -r $LUA_SCRIPT ]] || die "missing $LUA_SCRIPT"

TMP=$(mktemp -d "${TMPDIR:-/tmp}/llmgw-bench.XXXXXX")
# nginx workers run as 'nobody' when started as root: let them traverse.
chmod 0711 "$TMP"

# ---------------------------------------------------------------- processes
# Every process this script starts is recorded here and stopped by pid.
PROC_NAMES=()
PROC_PIDS=()

stop_pid() { # PID: TERM, up to 5 s, then KILL; reap
    local pid=$1 n=0
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
    kill -TERM "$pid" 2>/dev/null
    while kill -0 "$pid" 2>/dev/null && (( n < 50 )); do
        sleep 0.1
        n=$((n + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "pid $pid did not stop on SIGTERM within 5 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null
    fi
    wait "$pid" 2>/dev/null
    return 0
}

# shellcheck disable=SC2317  # invoked from the EXIT trap
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    local i pid kid kids=()
    for i in "${!PROC_PIDS[@]}"; do
        pid=${PROC_PIDS[$i]}
        if [[ ${PROC_NAMES[$i]} == nginx ]] && kill -0 "$pid" 2>/dev/null; then
            # the master's workers, so none outlives a master that had to be killed
            mapfile -t -O "${#kids[@]}" kids < <(ps -o pid= --ppid "$pid" 2>/dev/null | tr -d ' ')
        fi
    done
    for (( i = ${#PROC_PIDS[@]} - 1; i >= 0; i-- )); do
        stop_pid "${PROC_PIDS[$i]}"
    done
    for kid in "${kids[@]}"; do
        if kill -0 "$kid" 2>/dev/null \
            && [[ $(cat "/proc/$kid/comm" 2>/dev/null) == nginx ]]; then
            kill -KILL "$kid" 2>/dev/null
        fi
    done
    if (( rc != 0 )) || [[ $KEEP_TMP == 1 ]]; then
        log "logs, configs and raw wrk output kept in $TMP"
    else
        rm -rf -- "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

register() { PROC_NAMES+=("$1"); PROC_PIDS+=("$2"); }

pid_of() { # NAME
    local i
    for i in "${!PROC_NAMES[@]}"; do
        [[ ${PROC_NAMES[$i]} == "$1" ]] && { echo "${PROC_PIDS[$i]}"; return 0; }
    done
    return 1
}

# Wait (up to TIMEOUT s) for the {"msg":"listening",...,"port":N} line on a
# process's stdout and print the port.
wait_listening() { # NAME PID STDOUT_FILE STDERR_FILE TIMEOUT_S
    local n=0 max=$(( $5 * 10 )) line port
    while (( n < max )); do
        if ! kill -0 "$2" 2>/dev/null; then
            log "$1 exited during start-up; stderr:"
            tail -n 20 "$4" >&2 || true
            return 1
        fi
        line=$(grep -m1 -E '"msg" *: *"listening"' "$3" 2>/dev/null || true)
        if [[ -n $line ]]; then
            port=$(jq -r '.port // empty' <<<"$line" 2>/dev/null || true)
            if ! [[ $port =~ ^[0-9]+$ ]] || (( port == 0 )); then
                log "$1: cannot read the port from: $line"
                return 1
            fi
            echo "$port"
            return 0
        fi
        sleep 0.1
        n=$((n + 1))
    done
    log "$1 did not print its listening line within $5 s; stderr:"
    tail -n 20 "$4" >&2 || true
    return 1
}

# A free loopback port below the kernel's ephemeral range (so no outgoing
# connection of wrk or the proxies can be holding it).
pick_port() {
    local lo=20000 hi eph_lo n p
    eph_lo=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    hi=$(( eph_lo - 1 ))
    (( hi - lo >= 1000 )) || { lo=10000; hi=19999; }
    for (( n = 0; n < 50; n++ )); do
        p=$(( lo + (RANDOM * 32768 + RANDOM) % (hi - lo + 1) ))
        if [[ -z $(ss -Hltn "sport = :$p" 2>/dev/null) ]]; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

http_code() { # URL [curl args...]: prints the status (000 when unreachable)
    local url=$1
    shift
    curl -sS -o /dev/null -w '%{http_code}' --max-time 5 "$@" "$url" 2>/dev/null || true
}

# ---------------------------------------------------------------- start-up
log "temp dir $TMP"

"$MOCK_BIN" --listen 127.0.0.1:0 --threads "$MOCK_THREADS" --chunks "$MOCK_CHUNKS" \
    --chunk-delay-ms 0 >"$TMP/mock.stdout" 2>"$TMP/mock.stderr" &
register mock $!
MOCK_PORT=$(wait_listening mock "$(pid_of mock)" "$TMP/mock.stdout" "$TMP/mock.stderr" 10) \
    || die "the mock provider did not start"
log "mock provider (pid $(pid_of mock)) on 127.0.0.1:$MOCK_PORT"

if [[ $GOVERNANCE == 1 ]]; then
    command -v node >/dev/null 2>&1 || die "node not found (BENCH_GOVERNANCE=1 needs it; tests/run.sh installs it)"
    LLMGW_BUILD_DIR=$BUILD_DIR BENCH_MOCK_V1="http://127.0.0.1:$MOCK_PORT/v1" \
        BENCH_GOV_OUT="$TMP/governance.json" \
        node "$SCRIPT_DIR/governed.mjs" >"$TMP/governance.stdout" 2>"$TMP/governance.stderr" &
    register governance $!
    n=0
    while [[ ! -s $TMP/governance.json ]] && (( n < 600 )); do
        kill -0 "$(pid_of governance)" 2>/dev/null \
            || { tail -n 20 "$TMP/governance.stderr" >&2; die "the governance side did not start"; }
        sleep 0.1
        n=$((n + 1))
    done
    [[ -s $TMP/governance.json ]] || die "the governance side did not start within 60 s"
    CP_TARGET=$(jq -r .grpc "$TMP/governance.json")
    API_KEY=$(jq -r .key "$TMP/governance.json")
    log "governance: PostgreSQL + llmgw-controlplane (gRPC $CP_TARGET), a key and a cost budget"
    # A data plane's command, by name (its replica id and spool differ).
    dp_cmd() { # NAME
        mkdir -p "$TMP/spool.$1"
        DP_CMD=("$DP_BIN" --control-plane "$CP_TARGET" --replica-id "bench-$1"
                --ledger-spool "$TMP/spool.$1" --listen 127.0.0.1:0 --threads "$WORKERS"
                --access-log "$GW_ACCESS_LOG" --drain-timeout-ms 2000)
    }
    DP_ENV=()
else
    KEY_HASH=$(printf '%s' "$API_KEY" | sha256sum | awk '{print $1}')
    jq -n --arg base "http://127.0.0.1:$MOCK_PORT/v1" --arg hash "$KEY_HASH" '{
      version: 1,
      providers: [{name: "mock", driver: "openai", base_url: $base,
                   credential_ref: "env:LLMGW_BENCH_MOCK_KEY", enabled: true,
                   first_byte_timeout_ms: 10000, idle_timeout_ms: 10000},
                  {name: "mock-xlate", driver: "openai", base_url: $base,
                   credential_ref: "env:LLMGW_BENCH_MOCK_KEY", enabled: true,
                   first_byte_timeout_ms: 10000, idle_timeout_ms: 10000,
                   options: {passthrough: false}}],
      routes: [{name: "fast", aliases: ["default"], capability: "chat",
                strategy: "ordered",
                entries: [{provider: "mock", model: "mock-gpt"}]},
               {name: "xlate", capability: "chat", strategy: "ordered",
                entries: [{provider: "mock-xlate", model: "mock-gpt"}]}],
      keys: [{id: "key_bench", hash: $hash, status: "active", team: "bench"}]
    }' >"$TMP/snapshot.json"

    dp_cmd() { # NAME
        DP_CMD=("$DP_BIN" --snapshot "$TMP/snapshot.json" --listen 127.0.0.1:0
                --threads "$WORKERS" --access-log "$GW_ACCESS_LOG" --drain-timeout-ms 2000)
    }
    DP_ENV=("LLMGW_BENCH_MOCK_KEY=$UPSTREAM_KEY")
fi
# Starts a data plane (NAME: llmgw or traced, with extra environment) and
# sets DP_PORT once it serves a snapshot. Not in a subshell: it registers
# the process for the cleanup.
start_dp() { # NAME [VAR=VALUE...]
    local name=$1 n=0
    shift
    dp_cmd "$name"
    env -u OTEL_EXPORTER_OTLP_ENDPOINT -u OTEL_EXPORTER_OTLP_TRACES_ENDPOINT \
        ${DP_ENV[@]+"${DP_ENV[@]}"} "$@" "${DP_CMD[@]}" >"$TMP/$name.stdout" 2>"$TMP/$name.stderr" &
    register "$name" $!
    DP_PORT=$(wait_listening "$name" "$(pid_of "$name")" "$TMP/$name.stdout" "$TMP/$name.stderr" 10) \
        || return 1
    until [[ $(http_code "http://127.0.0.1:$DP_PORT/readyz") == 200 ]]; do
        (( n++ < 100 )) || { log "$name did not become ready"; return 1; }
        sleep 0.1
    done
}
start_dp llmgw || die "the data plane did not start"
GW_PORT=$DP_PORT
log "llmgw data plane (pid $(pid_of llmgw)) on 127.0.0.1:$GW_PORT"

# nginx: a plain keepalive reverse proxy to the mock, everything in $TMP.
NGX_DIR=$TMP/nginx
mkdir -p "$NGX_DIR"
chmod 0755 "$NGX_DIR"
NGX_VERSION_INFO=$("$NGINX_BIN" -V 2>&1 || true)
write_nginx_conf() { # PORT [SINK_PORT]
    local extra_temp="" m sink=""
    [[ -n ${2:-} ]] && sink="    server {
        listen 127.0.0.1:$2;
        client_max_body_size 64m;
        location / { return 200; }
    }"
    for m in fastcgi uwsgi scgi; do
        if ! grep -q -- "--without-http_${m}_module" <<<"$NGX_VERSION_INFO"; then
            extra_temp+="    ${m}_temp_path $NGX_DIR/${m}_temp;"$'\n'
        fi
    done
    cat >"$NGX_DIR/nginx.conf" <<EOF
# generated by tests/bench/run.sh
daemon off;
master_process on;
worker_processes $WORKERS;
pid $NGX_DIR/nginx.pid;
error_log $NGX_DIR/error.log warn;
events {
    worker_connections 4096;
}
http {
    access_log off;
    client_body_temp_path $NGX_DIR/client_body_temp;
    proxy_temp_path $NGX_DIR/proxy_temp;
$extra_temp
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    upstream mock {
        server 127.0.0.1:$MOCK_PORT;
        keepalive 64;
        keepalive_requests 1000000;
    }
    server {
        listen 127.0.0.1:$1;
        location / {
            proxy_pass http://mock;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
$sink
}
EOF
}

NGX_PORT=""
for (( attempt = 1; attempt <= 5; attempt++ )); do
    port=$(pick_port) || die "no free port found for nginx"
    SINK_PORT=""
    if [[ $TRACES == 1 ]]; then
        SINK_PORT=$(pick_port) || die "no free port found for the trace sink"
    fi
    write_nginx_conf "$port" "$SINK_PORT"
    "$NGINX_BIN" -t -q -p "$NGX_DIR/" -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" \
        >"$NGX_DIR/configtest.log" 2>&1 \
        || { cat "$NGX_DIR/configtest.log" >&2; die "nginx rejected the generated config"; }
    "$NGINX_BIN" -p "$NGX_DIR/" -c "$NGX_DIR/nginx.conf" -e "$NGX_DIR/error.log" \
        >"$NGX_DIR/stdout.log" 2>&1 &
    ngx_pid=$!
    register nginx "$ngx_pid"
    n=0
    while (( n < 50 )) && kill -0 "$ngx_pid" 2>/dev/null; do
        [[ $(http_code "http://127.0.0.1:$port/healthz") == 200 ]] && { NGX_PORT=$port; break; }
        sleep 0.1
        n=$((n + 1))
    done
    [[ -n $NGX_PORT ]] && break
    log "nginx did not come up on port $port (attempt $attempt); error log:"
    tail -n 5 "$NGX_DIR/error.log" >&2 2>/dev/null || true
    stop_pid "$ngx_pid"
done
[[ -n $NGX_PORT ]] || die "nginx did not start"
NGX_PID=$ngx_pid
log "nginx (master pid $NGX_PID) on 127.0.0.1:$NGX_PORT -> mock"
TR_PORT=""
if [[ $TRACES == 1 ]]; then
    # The same data plane, exporting every sampled request's spans to the
    # sink (a batch at most every 200 ms, a queue large enough to drop none
    # at this rate: the cost measured is the whole export's).
    tr_env=("OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:$SINK_PORT"
            "OTEL_TRACES_SAMPLER=$TRACES_SAMPLER" "OTEL_BSP_SCHEDULE_DELAY=200"
            "OTEL_BSP_MAX_QUEUE_SIZE=${BENCH_TRACES_QUEUE:-262144}"
            "OTEL_BSP_MAX_EXPORT_BATCH_SIZE=4096")
    [[ -n $TRACES_ARG ]] && tr_env+=("OTEL_TRACES_SAMPLER_ARG=$TRACES_ARG")
    start_dp traced "${tr_env[@]}" || die "the traced data plane did not start"
    TR_PORT=$DP_PORT
    log "traced llmgw data plane (pid $(pid_of traced)) on 127.0.0.1:$TR_PORT, spans to the sink on :$SINK_PORT (sampler $TRACES_SAMPLER${TRACES_ARG:+ $TRACES_ARG})"
fi

declare -A URL=(
    [direct]="http://127.0.0.1:$MOCK_PORT/v1/chat/completions"
    [nginx]="http://127.0.0.1:$NGX_PORT/v1/chat/completions"
    [llmgw]="http://127.0.0.1:$GW_PORT/v1/chat/completions"
    [xlate]="http://127.0.0.1:$GW_PORT/v1/chat/completions"
)
[[ -n $TR_PORT ]] && URL[traced]="http://127.0.0.1:$TR_PORT/v1/chat/completions"
# Only the gateway resolves routes: direct and nginx get the upstream name.
body_for() { # TARGET MODE
    local model=mock-gpt
    [[ $1 == llmgw || $1 == traced ]] && model=fast
    [[ $1 == xlate ]] && model=xlate
    if [[ $2 == stream ]]; then
        printf '{"model":"%s","messages":[{"role":"user","content":"hello there"}],"stream":true,"stream_options":{"include_usage":true}}' "$model"
    else
        printf '{"model":"%s","messages":[{"role":"user","content":"hello there"}]}' "$model"
    fi
}

# Which of our processes a target needs alive.
deps_of() {
    case $1 in
        direct) echo "mock" ;;
        nginx) echo "mock nginx" ;;
        llmgw|xlate) echo "mock llmgw" ;;
        traced) echo "mock traced nginx" ;;
    esac
}
declare -A DEAD_REPORTED=()
proc_alive() { # NAME (nginx: the master that is serving)
    local pid
    if [[ $1 == nginx ]]; then pid=$NGX_PID; else pid=$(pid_of "$1"); fi
    kill -0 "$pid" 2>/dev/null
}
target_alive() {
    local p ok=0
    for p in $(deps_of "$1"); do
        if ! proc_alive "$p"; then
            ok=1
            if [[ -z ${DEAD_REPORTED[$p]:-} ]]; then
                DEAD_REPORTED[$p]=1
                local pid st=0
                if [[ $p == nginx ]]; then pid=$NGX_PID; else pid=$(pid_of "$p"); fi
                wait "$pid" 2>/dev/null || st=$?
                if (( st > 128 )); then
                    st="$st (signal $(kill -l $((st - 128)) 2>/dev/null || echo $((st - 128))))"
                fi
                log "PROBLEM: $p (pid $pid) has died, exit status $st; last lines of its stderr:"
                case $p in
                    nginx) tail -n 20 "$NGX_DIR/error.log" >&2 2>/dev/null || true ;;
                    *) tail -n 20 "$TMP/$p.stderr" >&2 2>/dev/null || true ;;
                esac
            fi
        fi
    done
    return $ok
}

# ---------------------------------------------------------------- smoke test
# One request per target and mode before measuring, so a broken path shows
# up with its response rather than only as a count.
for t in "${TARGETS[@]}"; do
    for m in "${MODES[@]}"; do
        f=$TMP/smoke.$t.$m.body
        code=$(curl -sS -o "$f" -w '%{http_code}' --max-time 10 \
            -H 'Content-Type: application/json' -H "Authorization: Bearer $API_KEY" \
            --data-binary "$(body_for "$t" "$m")" "${URL[$t]}" 2>"$TMP/smoke.$t.$m.err" || true)
        if [[ $code != 200 ]]; then
            log "WARNING: smoke test $t/$m answered HTTP $code: $(head -c 300 "$f" 2>/dev/null | tr '\n' ' ') $(head -c 200 "$TMP/smoke.$t.$m.err" | tr '\n' ' ')"
        elif [[ $m == stream ]] && ! grep -q 'data: \[DONE\]' "$f"; then
            log "WARNING: smoke test $t/$m: the stream has no 'data: [DONE]': $(head -c 300 "$f" | tr '\n' ' ')"
        else
            log "smoke test $t/$m: HTTP 200, $(wc -c <"$f") bytes"
        fi
    done
done

fmt_ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }

# ---------------------------------------------------------------- open loop
if (( OPEN_LOOP )); then
    OL_BIN=$TMP/openloop
    cc -O2 -D_GNU_SOURCE -Wall -Wextra -Werror -include "$REPO_DIR/common/gw_banned.h" \
        -o "$OL_BIN" "$SCRIPT_DIR/openloop.c" || die "cannot build openloop"
    declare -A OL=()
    OL_ROWS=()
    RUN_FAILURES=0
    for rate in ${OPEN_RATES:-1000 5000 10000}; do
        for m in "${MODES[@]}"; do
            for t in "${TARGETS[@]}"; do
                target_alive "$t" || continue
                u=${URL[$t]#http://127.0.0.1:}
                body_for "$t" "$m" >"$TMP/ol.$t.$m.json"
                sflag=()
                [[ $m == stream ]] && sflag=(-s)
                line=$("$OL_BIN" -p "${u%%/*}" -u "/${u#*/}" -r "$rate" -d "$DURATION" \
                    -c "${OPEN_CONNS:-128}" -b "$TMP/ol.$t.$m.json" "${sflag[@]}" \
                    -H "Authorization: Bearer $API_KEY" 2>&1 | grep '^OPENLOOP' || true)
                [[ -n $line ]] || { log "open loop $t/$m at $rate/s: no result"; RUN_FAILURES=$((RUN_FAILURES + 1)); continue; }
                declare -A R=()
                for kv in ${line#OPENLOOP }; do R[${kv%%=*}]=${kv#*=}; done
                OL[$t|$m|$rate|p50]=${R[p50_us]}
                OL[$t|$m|$rate|p99]=${R[p99_us]}
                (( ${R[errors]} > 0 )) && RUN_FAILURES=$((RUN_FAILURES + 1))
                log "open loop $m $t at $rate/s: done ${R[done]}/${R[due]}, errors ${R[errors]}, p50 $(fmt_ms "${R[p50_us]}") ms, p99 $(fmt_ms "${R[p99_us]}") ms, max queue ${R[max_queue]}"
                OL_ROWS+=("$rate"$'\t'"$m"$'\t'"$t"$'\t'"${R[done]}/${R[due]}"$'\t'"${R[errors]}"$'\t'"${R[p50_us]}"$'\t'"${R[p99_us]}"$'\t'"${R[max_us]}")
            done
        done
    done
    echo
    echo "llmgw open-loop benchmark, $(date -u '+%Y-%m-%d %H:%M UTC'), rev $(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "llmgw --threads ${WORKERS}; nginx worker_processes ${WORKERS}; ${OPEN_CONNS:-128} connections; ${DURATION}s per run; latency from each request's due time"
    echo
    echo "| rate/s | mode | target | done/due | errors | p50 ms | p99 ms | max ms | added p50 over direct (ms) | added p99 over direct (ms) |"
    echo "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for row in "${OL_ROWS[@]}"; do
        IFS=$'\t' read -r rate m t dd e p50 p99 mx <<<"$row"
        d50=${OL[direct|$m|$rate|p50]:-}
        d99=${OL[direct|$m|$rate|p99]:-}
        a50=-; a99=-
        [[ -n $d50 && $t != direct ]] && a50=$(awk -v a="$p50" -v b="$d50" 'BEGIN { printf "%.2f", (a - b) / 1000 }')
        [[ -n $d99 && $t != direct ]] && a99=$(awk -v a="$p99" -v b="$d99" 'BEGIN { printf "%.2f", (a - b) / 1000 }')
        echo "| $rate | $m | $t | $dd | $e | $(fmt_ms "$p50") | $(fmt_ms "$p99") | $(fmt_ms "$mx") | $a50 | $a99 |"
    done
    (( RUN_FAILURES == 0 )) && exit 0
    exit 2
fi

# ---------------------------------------------------------------- measuring
declare -A RPS=() P50=() P99=() NON2XX=() BAD=() SOCK=() FIRST_BAD=() MCPU=() PCPU=()
RUN_FAILURES=0

# CPU use of the servers during a run, from /proc/PID/stat (utime + stime).
CLK_TCK=$(getconf CLK_TCK 2>/dev/null || echo 100)
cpu_ticks() { # PID...: prints the summed utime+stime ticks of those alive
    local pid total=0 t
    for pid in "$@"; do
        t=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$pid/stat" 2>/dev/null || true)
        [[ $t =~ ^[0-9]+$ ]] && total=$((total + t))
    done
    echo "$total"
}
proxy_pids() { # TARGET: the pids doing the proxy's work (none for direct)
    case $1 in
        nginx) ps -o pid= --ppid "$NGX_PID" 2>/dev/null | tr -d ' ' ;;
        llmgw|xlate) pid_of llmgw ;;
        traced) pid_of traced ;;
    esac
}
now_ns() { date +%s%N; }
cpu_pct() { # TICKS WALL_NS
    awk -v t="$1" -v w="$2" -v hz="$CLK_TCK" 'BEGIN { if (w <= 0) print "-"; else printf "%.0f", 100 * t / hz / (w / 1e9) }'
}

# Run wrk once; on success fills the global associative array R.
declare -A R=()
run_wrk() { # TARGET MODE SECONDS OUTFILE
    local t=$1 m=$2 secs=$3 out=$4 stream=0 rc=0 line kv
    local -a ppids
    local mock_pid mock0 mock1 prox0 prox1 w0 w1
    [[ $m == stream ]] && stream=1
    R=()
    mock_pid=$(pid_of mock)
    mapfile -t ppids < <(proxy_pids "$t")
    mock0=$(cpu_ticks "$mock_pid")
    prox0=$(cpu_ticks "${ppids[@]}")
    w0=$(now_ns)
    BENCH_BODY=$(body_for "$t" "$m") BENCH_KEY=$API_KEY BENCH_STREAM=$stream \
        timeout -k 5 $(( secs + 60 )) \
        "$WRK_BIN" -t"$WRK_THREADS" -c"$CONNS" -d"${secs}s" --timeout 5s \
        -s "$LUA_SCRIPT" "${URL[$t]}" >"$out" 2>&1 || rc=$?
    w1=$(now_ns)
    mock1=$(cpu_ticks "$mock_pid")
    prox1=$(cpu_ticks "${ppids[@]}")
    line=$(grep -m1 '^BENCH_RESULT ' "$out" || true)
    if (( rc != 0 )) || [[ -z $line ]]; then
        log "PROBLEM: wrk $t/$m exited $rc without a result; its output:"
        tail -n 20 "$out" >&2 || true
        return 1
    fi
    for kv in ${line#BENCH_RESULT }; do
        R[${kv%%=*}]=${kv#*=}
    done
    R[first_bad]=$(grep -m1 '^BENCH_FIRST_BAD ' "$out" | cut -c17- || true)
    R[mock_cpu]=$(cpu_pct $((mock1 - mock0)) $((w1 - w0)))
    R[proxy_cpu]=-
    (( ${#ppids[@]} > 0 )) && R[proxy_cpu]=$(cpu_pct $((prox1 - prox0)) $((w1 - w0)))
    return 0
}


if (( WARMUP > 0 )); then
    for m in "${MODES[@]}"; do
        for t in "${TARGETS[@]}"; do
            target_alive "$t" || continue
            if run_wrk "$t" "$m" "$WARMUP" "$TMP/wrk.warmup.$t.$m.txt"; then
                log "warm-up $t/$m: ${R[rps]} req/s"
            fi
        done
    done
fi

for (( r = 1; r <= ROUNDS; r++ )); do
    for m in "${MODES[@]}"; do
        for t in "${TARGETS[@]}"; do
            k="$t|$m|$r"
            target_alive "$t" || { log "round $r $t/$m: skipped (a process it needs is dead)"; continue; }
            if ! run_wrk "$t" "$m" "$DURATION" "$TMP/wrk.r$r.$t.$m.txt"; then
                RUN_FAILURES=$((RUN_FAILURES + 1))
                continue
            fi
            RPS[$k]=${R[rps]}
            P50[$k]=${R[p50_us]}
            P99[$k]=${R[p99_us]}
            NON2XX[$k]=${R[non2xx]}
            BAD[$k]=${R[bad]}
            MCPU[$k]=${R[mock_cpu]}
            PCPU[$k]=${R[proxy_cpu]}
            # shellcheck disable=SC2004  # keys of an associative array
            SOCK[$k]=$(( ${R[connect]} + ${R[read]} + ${R[write]} + ${R[timeout]} ))
            if [[ -n ${R[first_bad]} && -z ${FIRST_BAD[$t|$m]:-} ]]; then
                FIRST_BAD[$t|$m]=${R[first_bad]}
            fi
            log "round $r/$ROUNDS $m $t: ${R[rps]} req/s, p50 $(fmt_ms "${R[p50_us]}") ms, p99 $(fmt_ms "${R[p99_us]}") ms, non-2xx ${R[non2xx]}, bad ${R[bad]}, socket errors ${SOCK[$k]} (connect ${R[connect]} read ${R[read]} write ${R[write]} timeout ${R[timeout]}), CPU mock ${R[mock_cpu]}% proxy ${R[proxy_cpu]}%"
        done
    done
    for t in "${TARGETS[@]}"; do target_alive "$t" || true; done
done

# ---------------------------------------------------------------- report
TM=""
if [[ $TRACES == 1 ]]; then
    sleep 1 # the last batch's export
    TM=$(curl -sS --max-time 5 "http://127.0.0.1:$TR_PORT/metrics" 2>/dev/null || true)
fi
median() { # numbers...: prints the median, or "-" for none
    (( $# > 0 )) || { echo "-"; return 0; }
    printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 }
        END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
ratio() { # A B: A/B with two decimals, "-" when either is missing
    [[ $1 == - || $2 == - ]] && { echo "-"; return 0; }
    awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "-"; else printf "%.2f", a / b }'
}

declare -A MED_RPS=() MED_P50=() MED_P99=() ERRS=() NRUNS=()
ROWS=()       # tab-separated: target mode per-round median p50 p99 non2xx bad sock
TOTAL_ERRORS=0
for m in "${MODES[@]}"; do
    for t in "${TARGETS[@]}"; do
        rps_list=() p50_list=() p99_list=() per_round=() mcpu_list=() pcpu_list=() n2=0 nb=0 ns=0
        for (( r = 1; r <= ROUNDS; r++ )); do
            k="$t|$m|$r"
            if [[ -n ${RPS[$k]:-} ]]; then
                rps_list+=("${RPS[$k]}")
                p50_list+=("${P50[$k]}")
                p99_list+=("${P99[$k]}")
                [[ ${MCPU[$k]} != - ]] && mcpu_list+=("${MCPU[$k]}")
                [[ ${PCPU[$k]} != - ]] && pcpu_list+=("${PCPU[$k]}")
                per_round+=("$(printf '%.0f' "${RPS[$k]}")")
                n2=$((n2 + ${NON2XX[$k]}))
                nb=$((nb + ${BAD[$k]}))
                ns=$((ns + ${SOCK[$k]}))
            else
                per_round+=("-")
            fi
        done
        TOTAL_ERRORS=$((TOTAL_ERRORS + n2 + nb + ns))
        ERRS[$t|$m]=$((n2 + nb + ns))
        NRUNS[$t|$m]=${#rps_list[@]}
        MED_RPS[$t|$m]=$(median "${rps_list[@]}")
        MED_P50[$t|$m]=$(median "${p50_list[@]}")
        MED_P99[$t|$m]=$(median "${p99_list[@]}")
        med_rps=${MED_RPS[$t|$m]}
        [[ $med_rps != - ]] && med_rps=$(printf '%.0f' "$med_rps")
        p50=${MED_P50[$t|$m]}
        [[ $p50 != - ]] && p50=$(fmt_ms "$p50")
        p99=${MED_P99[$t|$m]}
        [[ $p99 != - ]] && p99=$(fmt_ms "$p99")
        mcpu=$(median "${mcpu_list[@]}")
        [[ $mcpu != - ]] && mcpu=$(printf '%.0f%%' "$mcpu")
        pcpu=$(median "${pcpu_list[@]}")
        [[ $pcpu != - ]] && pcpu=$(printf '%.0f%%' "$pcpu")
        joined=$(printf '%s / ' "${per_round[@]}")
        joined=${joined% / }
        ROWS+=("$t"$'\t'"$m"$'\t'"$joined"$'\t'"$med_rps"$'\t'"$p50"$'\t'"$p99"$'\t'"$n2"$'\t'"$nb"$'\t'"$ns"$'\t'"$pcpu"$'\t'"$mcpu")
    done
done

CPU_MODEL=$(grep -m1 '^model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true)
MACHINE="nproc $(nproc), CPU ${CPU_MODEL:-unknown}, kernel $(uname -r)"
GIT_REV=$(git -C "$REPO_DIR" rev-parse --short HEAD 2>/dev/null || echo "uncommitted")
NGX_VER=$("$NGINX_BIN" -v 2>&1 | sed 's/^nginx version: //')
WRK_VER=$("$WRK_BIN" -v 2>&1 | head -n 1 | awk '{print $2}' || true)
STAMP=$(date -u '+%Y-%m-%d %H:%M UTC')
BUILD_TYPE=$(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
TABLE_NOTE="p50/p99: median over rounds of each round's wrk percentile; errors: totals over all rounds; CPU: median over rounds of the process's CPU time / wall time of the run (100% = one core; proxy = the nginx worker or llmgw)."
SETUP1="mock provider --threads ${MOCK_THREADS} (${MOCK_CHUNKS} chunks per answer, chunk delay 0); llmgw --threads ${WORKERS}; nginx ${NGX_VER} worker_processes ${WORKERS} (upstream keepalive 64, proxy_buffering off, access_log off); llmgw access log: ${GW_ACCESS_LOG}; build ${BUILD_TYPE:-unknown type} in ${BUILD_DIR}"
SETUP2="wrk ${WRK_VER} -t${WRK_THREADS} -c${CONNS} -d${DURATION}s, ${ROUNDS} rounds, targets interleaved within each round ($(IFS=,; echo "${TARGETS[*]}" | sed 's/,/, /g')), ${WARMUP}s warm-up per target and mode"
SETUP3="llmgw and nginx get the same number of workers (BENCH_WORKERS); on a 2-core machine wrk, the proxy and the mock share $(nproc) cores, so every ratio is of equally constrained runs."
# Governed: the ledger rows the control plane stored, counted once the data
# plane's spool has drained (llmgw stopped first, then the governance side).
if [[ $GOVERNANCE == 1 ]]; then
    sleep 2
    stop_pid "$(pid_of llmgw)" || true
    [[ $TRACES == 1 ]] && { stop_pid "$(pid_of traced)" || true; }
    stop_pid "$(pid_of governance)" || true
    ROWS_STORED=$(grep -F '"msg":"ledger"' "$TMP/governance.stdout" 2>/dev/null | tail -1 | jq -r .rows 2>/dev/null || true)
    SETUP3+=" Governed (BENCH_GOVERNANCE=1): snapshot from llmgw-controlplane over gRPC, key auth, a cost budget on the key (leased allowance), ledger rows spooled by the data plane and stored by the control plane in PostgreSQL, which run on the same 2 cores: ${ROWS_STORED:-?} ledger rows stored."
else
    SETUP3+=" Not governed (BENCH_GOVERNANCE=0): a file snapshot with a key, no budget, no ledger."
fi

# Ratio lines
RATIO_LINES=()
for m in "${MODES[@]}"; do
    rr=$(ratio "${MED_RPS[llmgw|$m]}" "${MED_RPS[nginx|$m]}")
    r50=$(ratio "${MED_P50[llmgw|$m]}" "${MED_P50[nginx|$m]}")
    r99=$(ratio "${MED_P99[llmgw|$m]}" "${MED_P99[nginx|$m]}")
    nd=$(ratio "${MED_RPS[nginx|$m]}" "${MED_RPS[direct|$m]}")
    gd=$(ratio "${MED_RPS[llmgw|$m]}" "${MED_RPS[direct|$m]}")
    xr=$(ratio "${MED_RPS[xlate|$m]}" "${MED_RPS[nginx|$m]}")
    verdict="-"
    if [[ $rr != - ]]; then
        verdict=$(awk -v x="$rr" 'BEGIN { print (x >= 0.8) ? "meets the >= 0.8x target" : "below the >= 0.8x target" }')
    fi
    verdict="translated path ${xr}x nginx; ${verdict}"
    if (( ${ERRS[llmgw|$m]} + ${ERRS[nginx|$m]} > 0 )); then
        verdict="not valid: errors in the llmgw or nginx runs"
    elif (( ${NRUNS[llmgw|$m]} < ROUNDS || ${NRUNS[nginx|$m]} < ROUNDS )); then
        verdict="not valid: missing runs"
    fi
    RATIO_LINES+=("$m"$'\t'"$rr"$'\t'"$r50"$'\t'"$r99"$'\t'"$nd"$'\t'"$gd"$'\t'"$verdict")
done

# Traces: the traced data plane against the same one untraced, and what
# its exporter did (from its /metrics, read before it stops).
TRACE_LINES=()
TRACE_NOTE=""
cpu_us() { # CPU% RPS: CPU microseconds per request
    [[ $1 == - || $2 == - ]] && { echo "-"; return 0; }
    awk -v c="${1%%%}" -v r="$2" 'BEGIN { if (r + 0 == 0) print "-"; else printf "%.1f", c * 10000 / r }'
}
if [[ $TRACES == 1 ]]; then
    for m in "${MODES[@]}"; do
        pl=$(printf '%s\n' "${ROWS[@]}" | awk -F'\t' -v m="$m" '$1 == "llmgw" && $2 == m { print $10 }')
        pt=$(printf '%s\n' "${ROWS[@]}" | awk -F'\t' -v m="$m" '$1 == "traced" && $2 == m { print $10 }')
        TRACE_LINES+=("$m"$'\t'"$(ratio "${MED_RPS[traced|$m]}" "${MED_RPS[llmgw|$m]}")"$'\t'"$(cpu_us "$pl" "${MED_RPS[llmgw|$m]}")"$'\t'"$(cpu_us "$pt" "${MED_RPS[traced|$m]}")")
    done
    span_count() { awk -v k="llmgw_otel_spans_total{result=\"$1\"}" '$1 == k { n = $2 } END { printf "%.0f", n }' <<<"$TM"; }
    TRACE_NOTE="traced: sampler ${TRACES_SAMPLER}${TRACES_ARG:+ ${TRACES_ARG}}, OTLP/HTTP protobuf to a sink on the same machine (nginx 'return 200'); spans exported $(span_count exported), dropped $(span_count dropped), failed $(span_count failed); export requests $(awk '$1 == "llmgw_otel_export_requests_total" { printf "%.0f", $2 }' <<<"$TM")."
fi

print_text() {
    echo
    echo "llmgw benchmark, ${STAMP}, rev ${GIT_REV}"
    echo "machine: ${MACHINE}"
    echo "setup:   ${SETUP1}"
    echo "load:    ${SETUP2}"
    echo "note:    ${SETUP3}"
    echo
    printf '%-7s %-7s %-28s %10s %9s %9s %8s %6s %8s %9s %8s\n' \
        target mode "req/s per round" "req/s med" "p50 ms" "p99 ms" "non-2xx" "bad" "sock-err" "proxy cpu" "mock cpu"
    local row
    for row in "${ROWS[@]}"; do
        IFS=$'\t' read -r a b c d e f g h i j k <<<"$row"
        printf '%-7s %-7s %-28s %10s %9s %9s %8s %6s %8s %9s %8s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i" "$j" "$k"
    done
    echo
    echo "${TABLE_NOTE}"
    echo
    printf '%-7s %16s %12s %12s %14s %14s  %s\n' mode "llmgw/nginx rps" "p50 ratio" "p99 ratio" "nginx/direct" "llmgw/direct" ""
    for row in "${RATIO_LINES[@]}"; do
        IFS=$'\t' read -r a b c d e f g <<<"$row"
        printf '%-7s %15sx %11sx %11sx %13sx %13sx  %s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g"
    done
    echo "(latency ratios are llmgw/nginx: above 1 means llmgw is slower)"
    if [[ $TRACES == 1 ]]; then
        echo
        printf '%-7s %18s %22s %22s\n' mode "traced/llmgw rps" "llmgw CPU us/req" "traced CPU us/req"
        for row in "${TRACE_LINES[@]}"; do
            IFS=$'\t' read -r a b c d <<<"$row"
            printf '%-7s %17sx %22s %22s\n' "$a" "$b" "$c" "$d"
        done
        echo "${TRACE_NOTE}"
    fi
}

print_markdown() {
    echo "Run ${STAMP}, rev \`${GIT_REV}\`; machine: ${MACHINE}."
    echo
    echo "- ${SETUP1}"
    echo "- ${SETUP2}"
    echo "- ${SETUP3}"
    echo
    echo "| target | mode | req/s per round | req/s median | p50 ms | p99 ms | non-2xx | bad | socket errors | proxy CPU | mock CPU |"
    echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    local row
    for row in "${ROWS[@]}"; do
        IFS=$'\t' read -r a b c d e f g h i j k <<<"$row"
        echo "| $a | $b | $c | $d | $e | $f | $g | $h | $i | $j | $k |"
    done
    echo
    echo "${TABLE_NOTE}"
    echo
    echo "| mode | llmgw/nginx req/s | llmgw/nginx p50 | llmgw/nginx p99 | nginx/direct req/s | llmgw/direct req/s | verdict (pass-through llmgw >= 0.8x nginx req/s; the translated path for reference) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | --- |"
    for row in "${RATIO_LINES[@]}"; do
        IFS=$'\t' read -r a b c d e f g <<<"$row"
        echo "| $a | ${b}x | ${c}x | ${d}x | ${e}x | ${f}x | $g |"
    done
    if [[ $TRACES == 1 ]]; then
        echo
        echo "| mode | traced/llmgw req/s | llmgw CPU µs/request | traced CPU µs/request |"
        echo "| --- | ---: | ---: | ---: |"
        for row in "${TRACE_LINES[@]}"; do
            IFS=$'\t' read -r a b c d <<<"$row"
            echo "| $a | ${b}x | $c | $d |"
        done
        echo
        echo "${TRACE_NOTE}"
    fi
}

print_text
if [[ -n $OUT ]]; then
    print_markdown >"$OUT"
    log "markdown fragment written to $OUT"
fi

for t in "${TARGETS[@]}"; do
    for m in "${MODES[@]}"; do
        if [[ -n ${FIRST_BAD[$t|$m]:-} ]]; then
            log "first bad response $t/$m: ${FIRST_BAD[$t|$m]}"
        fi
    done
done
if (( ${#DEAD_REPORTED[@]} > 0 )); then
    log "PROBLEM: process(es) died during the run: ${!DEAD_REPORTED[*]}"
    exit 2
fi
if (( TOTAL_ERRORS > 0 || RUN_FAILURES > 0 )); then
    log "PROBLEM: $TOTAL_ERRORS error responses/socket errors, $RUN_FAILURES failed wrk runs"
    exit 2
fi
exit 0
