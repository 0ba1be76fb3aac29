#!/usr/bin/env bash
# Builds every libFuzzer target in tests/fuzz/ with clang
# (-fsanitize=fuzzer,address,undefined) against the common/ and dataplane/
# sources and pkg-config packages it needs (the maps below), and runs each
# in turn for a bounded time (thirteen targets: 260 s at the default). Exits
# non-zero when a target fails to build or finds a crash, a sanitizer report
# or a failed check; the input that did it is kept in the artifacts
# directory for replay:
#
#   build-fuzz/fuzz_json_scan build-fuzz/artifacts/crash-<sha1>
#
#   tests/fuzz/run.sh [target...]       all targets by default
#   LLMGW_FUZZ_SECONDS=20               run time per target
#   LLMGW_FUZZ_DIR=<dir>                binaries, corpus and artifacts
#                                       (default: build-fuzz/ in the repo)
#
# The checked-in seeds are tests/fuzz/corpus/<target>/; what a run learns
# goes to $LLMGW_FUZZ_DIR/corpus/<target>/, so later runs start from it.
# Needs clang and its fuzzer runtime (deploy/deps.sh: clang, libclang-rt-dev).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
secs="${LLMGW_FUZZ_SECONDS:-20}"
out="${LLMGW_FUZZ_DIR:-$root/build-fuzz}"
cc="${LLMGW_FUZZ_CC:-clang}"

# Each target and the sources it links (the module under test and what that
# module calls; a target that #includes its module's .c to reach its statics
# lists only the rest), and the pkg-config packages it needs beyond jansson.
# The drivers: every driver's table (dp_driver.c lists them all), the
# catalog they name themselves by, what they call, and the SigV4 signing
# Bedrock's requests need.
drivers="contract/canon/canon.c contract/catalog/dp_driver_catalog.c
  $(cd "$root" && echo dataplane/drivers/*.c)
  common/gw_buf.c common/gw_json.c common/gw_sse.c common/gw_eventstream.c common/gw_str.c
  common/gw_error.c common/gw_pool.c common/gw_sigv4.c common/gw_crypto.c common/gw_multipart.c
  common/gw_codec.c"
declare -A sources=(
  [fuzz_drivers]="$drivers"
  [fuzz_eventstream]="common/gw_eventstream.c common/gw_buf.c"
  [fuzz_facades]="contract/canon/canon.c $(cd "$root" && echo dataplane/facades/*.c) common/gw_buf.c
    common/gw_multipart.c common/gw_audio.c common/gw_crypto.c common/gw_codec.c
    common/gw_json.c common/gw_str.c common/gw_error.c common/gw_pool.c"
  [fuzz_guard_rules]="contract/guard/dp_guard_fold.c common/gw_buf.c"
  [fuzz_h1resp]="common/gw_h1resp.c common/gw_buf.c"
  [fuzz_http_head]="common/gw_pool.c common/gw_buf.c common/gw_json.c common/gw_log.c common/gw_tls.c"
  [fuzz_json_scan]="common/gw_json.c common/gw_buf.c"
  [fuzz_json_span]="common/gw_json.c common/gw_buf.c"
  [fuzz_money]="common/gw_money.c"
  [fuzz_multipart]="common/gw_multipart.c common/gw_audio.c common/gw_buf.c common/gw_crypto.c
    common/gw_codec.c"
  [fuzz_query]="common/gw_query.c common/gw_pool.c common/gw_json.c common/gw_buf.c common/gw_codec.c"
  [fuzz_snapshot]="$(cd "$root" && echo contract/snapshot/dp_snapshot*.c) common/gw_pmap.c
    contract/guard/dp_guard_rules.c contract/guard/dp_guard_fold.c common/gw_log.c $drivers"
  [fuzz_sse]="common/gw_sse.c common/gw_buf.c"
  [fuzz_trace]="common/gw_trace.c common/gw_json.c common/gw_buf.c common/gw_codec.c"
)
# Files a target has compiled in, as the build embeds them (NAME=file, with
# controlplane/embed.cmake): generated into $out/ before the target builds.
declare -A embeds=(
  [fuzz_guard_rules]="dp_guard_rules_json=common/guard_rules.json"
  [fuzz_snapshot]="dp_guard_rules_json=common/guard_rules.json"
)
declare -A packages=(
  [fuzz_drivers]="libcurl openssl"
  [fuzz_facades]="openssl"
  [fuzz_http_head]="libevent libevent_openssl openssl"
  [fuzz_multipart]="openssl"
  [fuzz_query]="openssl"
  [fuzz_trace]="openssl"
  [fuzz_snapshot]="libcurl openssl libevent"
)

command -v "$cc" >/dev/null 2>&1 || { echo "fuzz: $cc not found (deploy/deps.sh installs clang)" >&2; exit 2; }
targets=("$@")
((${#targets[@]})) || targets=($(printf '%s\n' "${!sources[@]}" | sort))
mkdir -p "$out/artifacts"
# The project's own warnings and banned calls, plus the sanitizers; any UB
# report aborts, so libFuzzer counts it as a crash.
cflags=(-std=gnu11 -g -O1 -fno-omit-frame-pointer -D_GNU_SOURCE -Wall -Wextra -Werror
        -Wno-unused-parameter -include "$root/common/gw_banned.h" -I "$root/common"
        $(for d in "$root"/contract/*/ "$root"/dataplane/*/; do printf -- '-I %s ' "${d%/}"; done)
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
read -r -a jcflags <<<"$(pkg-config --cflags jansson)"
read -r -a jlibs <<<"$(pkg-config --libs jansson)"

fail=0
for t in "${targets[@]}"; do
  [ -n "${sources[$t]:-}" ] || { echo "fuzz: no target $t" >&2; exit 2; }
  read -r -d '' -a srcs <<<"${sources[$t]}" || true
  pcflags=() plibs=()
  if [ -n "${packages[$t]:-}" ]; then
    read -r -a pcflags <<<"$(pkg-config --cflags ${packages[$t]})"
    read -r -a plibs <<<"$(pkg-config --libs ${packages[$t]})"
  fi
  gen=()
  for e in ${embeds[$t]:-}; do
    cmake -DIN="$root/${e#*=}" -DOUT="$out/${e%%=*}.c" -DNAME="${e%%=*}" \
      -P "$root/controlplane/embed.cmake"
    gen+=("$out/${e%%=*}.c")
  done
  echo "fuzz: building $t"
  "$cc" "${cflags[@]}" ${jcflags[@]+"${jcflags[@]}"} ${pcflags[@]+"${pcflags[@]}"} -o "$out/$t" \
    "$root/tests/fuzz/$t.c" "${srcs[@]/#/$root/}" ${gen[@]+"${gen[@]}"} ${jlibs[@]+"${jlibs[@]}"} \
    ${plibs[@]+"${plibs[@]}"}
  mkdir -p "$out/corpus/$t"
  seeds=()
  [ -d "$root/tests/fuzz/corpus/$t" ] && seeds=("$root/tests/fuzz/corpus/$t")
  echo "fuzz: running $t for ${secs}s"
  # -timeout: one input taking 10 s is a hang; -rss_limit_mb bounds memory.
  if ! "$out/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
      -print_final_stats=1 -artifact_prefix="$out/artifacts/" \
      "$out/corpus/$t" ${seeds[@]+"${seeds[@]}"} >"$out/$t.log" 2>&1; then
    echo "fuzz: $t FAILED; the log's tail ($out/$t.log):" >&2
    tail -n 40 "$out/$t.log" >&2
    fail=1
  else
    grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb)|^#[0-9]+.*DONE' "$out/$t.log" | sed "s/^/fuzz: $t: /" || true
  fi
done
exit $fail
