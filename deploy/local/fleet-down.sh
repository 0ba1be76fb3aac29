#!/usr/bin/env bash
# Stops what deploy/local/fleet-up.sh started, by the pids it recorded in its
# state dir (LLMGW_FLEET_DIR, default .run/fleet): data planes first (they
# drain), then control planes (the leader resigns in etcd), mocks, etcd and
# PostgreSQL (fast shutdown); SIGKILL for any that outlives its grace.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run=${LLMGW_FLEET_DIR:-$here/../../.run/fleet}
source "$here/lib.sh"
[ -d "$run" ] || exit 0
local_stop TERM 35 dp-1 dp-2 dp-3
local_stop TERM 15 cp-1 cp-2 mock-0 mock-1
local_stop TERM 15 etcd
local_pg_stop postgres
if [ -f "$run/pg.dir" ]; then
  rm -rf "$(cat "$run/pg.dir")"
  rm -f "$run/pg.dir"
fi
