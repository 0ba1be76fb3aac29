# shellcheck shell=bash
# What the local scripts share (up.sh, down.sh, fleet-up.sh, fleet-down.sh):
# the build, starting a daemon in the background with its pid, output and log
# in a state dir, waiting for it, and stopping daemons by the pids recorded.
# Source it after setting $run (the state dir); it sets $root and $bin.
#
#   LLMGW_BUILD_DIR   use this build as it is (no cmake run); default: build
#                     the tree into build/ (RelWithDebInfo)
#   LLMGW_SKIP_DEPS=1 do not run deploy/deps.sh first
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bin=${LLMGW_BUILD_DIR:-$root/build}

# Dependencies, then the build (unless LLMGW_BUILD_DIR names one).
local_prepare() { # script name, for messages
  [ "${LLMGW_SKIP_DEPS:-}" = 1 ] || bash "$root/deploy/deps.sh"
  if [ -z "${LLMGW_BUILD_DIR:-}" ]; then
    echo "$1: building ($bin)"
    cmake -S "$root" -B "$bin" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build "$bin" -j"$(nproc 2>/dev/null || echo 2)" >/dev/null
  fi
}

# Starts a command in the background: $run/NAME.pid, NAME.out (stdout),
# NAME.log (stderr).
local_start() { # name, then the command
  local name=$1
  shift
  "$@" >"$run/$name.out" 2>"$run/$name.log" &
  echo $! >"$run/$name.pid"
}

# Waits for NAME's {"msg":"listening"} line (llmgw daemons print one).
local_wait_listening() { # name
  for _ in $(seq 1 200); do
    grep -q '"msg":"listening"' "$run/$1.out" 2>/dev/null && return 0
    kill -0 "$(cat "$run/$1.pid")" 2>/dev/null || { echo "$1 exited:"; tail -5 "$run/$1.log"; return 1; }
    sleep 0.1
  done
  echo "$1 did not start (see $run/$1.log)"
  return 1
}

# Waits until URL answers 200 (GET); NAME's pid must stay alive meanwhile.
local_wait_http() { # name, url, [tries of 0.1 s, default 200]
  for _ in $(seq 1 "${3:-200}"); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$2" 2>/dev/null)" = 200 ] && return 0
    kill -0 "$(cat "$run/$1.pid")" 2>/dev/null || { echo "$1 exited:"; tail -5 "$run/$1.log"; return 1; }
    sleep 0.1
  done
  echo "$1: $2 did not answer 200 (see $run/$1.log)"
  return 1
}

# Stops the named daemons by their recorded pids, all at once: SIGNAL to
# each, then SIGKILL to any still there after GRACE seconds (a data plane
# drains its open streams first).
local_stop() { # signal, grace (s), name...
  local sig=$1 grace=$2 name pid
  shift 2
  local names=() pids=()
  for name in "$@"; do
    [ -f "$run/$name.pid" ] || continue
    pid=$(cat "$run/$name.pid")
    rm -f "$run/$name.pid"
    kill -0 "$pid" 2>/dev/null || continue
    kill -"$sig" "$pid" 2>/dev/null || continue
    names+=("$name") pids+=("$pid")
  done
  for _ in $(seq 1 $((grace * 10))); do
    local alive=0
    for pid in ${pids[@]+"${pids[@]}"}; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 1 ] || break
    sleep 0.1
  done
  for i in ${pids[@]+"${!pids[@]}"}; do
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      kill -KILL "${pids[$i]}" 2>/dev/null
      echo "killed ${names[$i]} (${pids[$i]}) after ${grace} s"
    else
      echo "stopped ${names[$i]} (${pids[$i]})"
    fi
  done
}
