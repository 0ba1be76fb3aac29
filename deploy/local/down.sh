#!/usr/bin/env bash
# Stops what deploy/local/up.sh started, by the pids it recorded: SIGTERM
# (the data plane drains its open streams and flushes its ledger rows), then
# SIGKILL after 35 s; then PostgreSQL (a fast shutdown). The data stays in
# .run/pg for the next up.sh.
set -uo pipefail
run=${LLMGW_RUN_DIR:-"$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.run"}
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
local_stop TERM 35 dataplane
local_stop TERM 15 controlplane mock
local_pg_stop postgres
