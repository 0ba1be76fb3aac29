#!/usr/bin/env bash
# Stops what deploy/local/up.sh started, by the pids it recorded: SIGTERM
# (the data plane drains its open streams), then SIGKILL after 35 s.
set -uo pipefail
run="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.run"
for name in dataplane mock; do
  f="$run/$name.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 1 350); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
    echo "down: stopped $name ($pid)"
  fi
  rm -f "$f"
done
