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

# Sends one chat (model fast) through the gateway at URL with KEY until it
# answers 200 (the snapshot with the key may still be on its way), for at
# most 10 s; 1 with the last answer when it never does.
local_wait_chat() { # url, key
  local code=000
  for _ in $(seq 1 100); do
    code=$(curl -s -o "$run/smoke.json" -w '%{http_code}' --max-time 5 "$1/v1/chat/completions" \
      -H "Authorization: Bearer $2" -H 'Content-Type: application/json' \
      -d '{"model":"fast","messages":[{"role":"user","content":"Hello!"}]}' || true)
    [ "$code" = 200 ] && return 0
    sleep 0.1
  done
  echo "a chat through $1 answered $code: $(cat "$run/smoke.json" 2>/dev/null)"
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

# Starts a throwaway PostgreSQL server on 127.0.0.1:PORT with its data in
# DIR (made with initdb when DIR has no data yet, kept otherwise), and sets
# $db to its conninfo. As root the server runs as the postgres user, which
# must reach DIR: when it cannot (a parent directory closed to others, as a
# mktemp dir is), the data lives under /var/tmp and DIR is a link to it.
# Records the postmaster's pid as $run/NAME.pid. Stop it with
# local_pg_stop NAME.
local_pg_start() { # name, dir, port
  local name=$1 dir=$2 port=$3 pgbin
  pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  [ -x "$pgbin/pg_ctl" ] || { echo "PostgreSQL server binaries not found (deploy/deps.sh installs them)"; return 1; }
  local as_pg=()
  if [ "$(id -u)" -eq 0 ]; then
    as_pg=(runuser -u postgres --)
    if [ ! -e "$dir" ]; then
      mkdir -p "$dir"
      chown postgres: "$dir"
      if ! runuser -u postgres -- test -w "$dir"; then
        rmdir "$dir"
        local far
        far=/var/tmp/llmgw-pg-$(printf '%s' "$dir" | sha256sum | cut -c1-12)
        mkdir -p "$far"
        chown postgres: "$far"
        ln -s "$far" "$dir"
      fi
    fi
  fi
  mkdir -p "$dir"
  local real
  real=$(readlink -f "$dir") # the server is given paths it can walk
  chmod 700 "$real"
  if [ ! -f "$real/data/PG_VERSION" ]; then
    "${as_pg[@]}" "$pgbin/initdb" -D "$real/data" -U postgres -A trust -E UTF8 --no-locale --no-sync \
      >"$run/$name-initdb.log" 2>&1 || { echo "initdb failed (see $run/$name-initdb.log)"; return 1; }
  fi
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$real/data" -l "$real/log" -w -t 30 \
    -o "-p $port -k $real -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null \
    || { echo "PostgreSQL did not start (see $real/log)"; return 1; }
  head -1 "$real/data/postmaster.pid" >"$run/$name.pid"
  db="host=127.0.0.1 port=$port user=postgres dbname=postgres connect_timeout=5"
}

# Stops the PostgreSQL server NAME (fast shutdown: SIGINT) by its pid.
local_pg_stop() { # name
  local_stop INT 30 "$1"
}

# Writes NAME='VALUE' lines (a ' inside a value escaped), so the file can be
# sourced, `set -a` first to export what it sets. Arguments: the file, then
# NAME=VALUE pairs.
local_write_env() { # file, NAME=VALUE...
  local file=$1 kv name value
  shift
  (umask 077
   for kv in "$@"; do
     name=${kv%%=*}
     value=${kv#*=}
     printf "%s='%s'\n" "$name" "${value//\'/\'\\\'\'}"
   done >"$file")
}
