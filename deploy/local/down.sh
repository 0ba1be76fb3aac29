#!/usr/bin/env bash
# Stops what deploy/local/up.sh started, by the pids it recorded: SIGTERM
# (the data plane drains its open streams), then SIGKILL after 35 s.
set -uo pipefail
run="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.run"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
local_stop TERM 35 dataplane mock
