#!/usr/bin/env bash
# Starts the distributed setup on one machine, on loopback, in the background:
# PostgreSQL, etcd, two control-plane replicas (one leads, through etcd),
# three data-plane replicas (each on its own port, each given both control
# planes) and two mock providers. Configures two providers, two routes and an
# API key through the admin API (tools/llmgwctl), sends one chat through each
# data plane, and writes $state/fleet.env. deploy/local/fleet-down.sh stops
# it all by pid.
#
#   LLMGW_FLEET_DIR   the state dir: pids, logs, fleet.env (default .run/fleet);
#                     started afresh each time (an empty database and etcd)
#   LLMGW_FLEET_PORT  the first of the ports (default 18080):
#                     +0..+2 data planes, +10/+11 control-plane admin APIs,
#                     +20/+21 their gRPC, +30/+31 mocks, +40/+41 etcd client/peer,
#                     +50 PostgreSQL
#   LLMGW_BUILD_DIR, LLMGW_SKIP_DEPS: see lib.sh
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
run=${LLMGW_FLEET_DIR:-$here/../../.run/fleet}
source "$here/lib.sh"
base=${LLMGW_FLEET_PORT:-18080}
p_dp=$base p_admin=$((base + 10)) p_grpc=$((base + 20)) p_mock=$((base + 30))
p_etcd=$((base + 40)) p_pg=$((base + 50))

LLMGW_FLEET_DIR=$run bash "$here/fleet-down.sh" >/dev/null 2>&1 || true
rm -rf "$run"
mkdir -p "$run"
run="$(cd "$run" && pwd)"
local_prepare fleet-up
fail() { echo "fleet-up: $*" >&2; exit 1; }

# PostgreSQL, in a fresh directory fleet-down.sh removes.
pgdir=$(mktemp -d /tmp/llmgw-fleet-pg.XXXXXX)
echo "$pgdir" >"$run/pg.dir"
rmdir "$pgdir" # local_pg_start makes it, for the user the server runs as
local_pg_start postgres "$pgdir" "$p_pg" || fail "PostgreSQL did not start"

# etcd, one member.
etcd_url=http://127.0.0.1:$p_etcd
peer=http://127.0.0.1:$((p_etcd + 1))
local_start etcd etcd --name fleet --data-dir "$run/etcd" --listen-client-urls "$etcd_url" \
  --advertise-client-urls "$etcd_url" --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
  --initial-cluster "fleet=$peer" --listen-metrics-urls ''
local_wait_http etcd "$etcd_url/health" || fail "etcd did not start"

for i in 0 1; do
  local_start "mock-$i" "$bin/tests/mockprovider/llmgw-mockprovider" --listen "127.0.0.1:$((p_mock + i))" --threads 1
done
for i in 0 1; do local_wait_listening "mock-$i" || fail "mock-$i did not start"; done

# Two control-plane replicas on one database and one etcd.
(umask 077; echo "llmgw-admin-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$run/admin.token")
token=$(cat "$run/admin.token")
for i in 0 1; do
  id=cp-$((i + 1))
  local_start "$id" env LLMGW_ADMIN_TOKEN="$token" LLMGW_DATABASE_URL="$db" LLMGW_GRPC_INSECURE=1 \
    "$bin/controlplane/llmgw-controlplane" serve --replica-id "$id" --etcd-endpoints "$etcd_url" \
    --admin-listen "127.0.0.1:$((p_admin + i))" --grpc-listen "127.0.0.1:$((p_grpc + i))"
done
for i in 1 2; do local_wait_listening "cp-$i" || fail "cp-$i did not start"; done
admin=http://127.0.0.1:$p_admin
ctl() { LLMGW_ADMIN_URL=$admin LLMGW_ADMIN_TOKEN=$token "$root/tools/llmgwctl" "$@"; }
leader=""
for _ in $(seq 1 100); do
  leader=$(ctl health 2>/dev/null | jq -r '.leader.id // empty' || true)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || fail "no control-plane leader was elected (see $run/cp-*.log)"

# Configuration, through the admin API: two providers (one mock speaking
# OpenAI, the other Anthropic), a route that fails over from one to the
# other, and an API key.
ctl providers create "{\"name\":\"mock-a\",\"driver\":\"openai\",\"base_url\":\"http://127.0.0.1:$p_mock/v1\"}" >/dev/null
ctl providers create "{\"name\":\"mock-b\",\"driver\":\"anthropic\",\"base_url\":\"http://127.0.0.1:$((p_mock + 1))\"}" >/dev/null
ctl routes create '{"name":"fast","aliases":["default"],"entries":[{"provider":"mock-a","model":"mock-gpt"},{"provider":"mock-b","model":"mock-claude"}]}' >/dev/null
ctl routes create '{"name":"smart","entries":[{"provider":"mock-b","model":"mock-claude"}]}' >/dev/null
key=$(ctl keys create '{"name":"fleet-demo"}' | jq -r .key)
[ -n "$key" ] && [ "$key" != null ] || fail "cannot create an API key"
(umask 077; echo "$key" >"$run/api.key")

# Three data planes, each given both control planes: dp-1 and dp-3 start on
# cp-1, dp-2 on cp-2 (the first address listed), and each moves to the other
# when its own goes away.
dps=()
for i in 0 1 2; do
  cps="127.0.0.1:$((p_grpc + i % 2)),127.0.0.1:$((p_grpc + 1 - i % 2))"
  local_start "dp-$((i + 1))" "$bin/dataplane/llmgw-dataplane" --control-plane "$cps" \
    --replica-id "dp-$((i + 1))" --listen "127.0.0.1:$((p_dp + i))" --threads 1 \
    --access-log "$run/dp-$((i + 1)).access.log"
  dps+=("http://127.0.0.1:$((p_dp + i))")
done
for i in 1 2 3; do
  local_wait_http "dp-$i" "${dps[$((i - 1))]}/readyz" || fail "dp-$i is not ready"
done
for u in "${dps[@]}"; do
  local_wait_chat "$u" "$key" || fail "$u is not serving"
done

# Quoted, so `set -a; source fleet.env` gives these values (the conninfo
# has spaces).
local_write_env "$run/fleet.env" "LLMGW_ADMIN_URL=$admin" \
  "LLMGW_ADMIN_URLS=$admin,http://127.0.0.1:$((p_admin + 1))" "LLMGW_ADMIN_TOKEN=$token" \
  "LLMGW_API_KEY=$key" "LLMGW_BASE_URLS=$(IFS=,; echo "${dps[*]}")" "LLMGW_BASE_URL=${dps[0]}" \
  "LLMGW_MODEL=fast" "LLMGW_ETCD_ENDPOINTS=$etcd_url" "LLMGW_DATABASE_URL=$db"
cat <<MSG
fleet-up: the fleet is running (pids and logs in $run).
  data planes:     ${dps[*]}
  control planes:  $admin (cp-1), http://127.0.0.1:$((p_admin + 1)) (cp-2); leader: $leader
  etcd:            $etcd_url    PostgreSQL: 127.0.0.1:$p_pg
  mocks:           http://127.0.0.1:$p_mock (mock-a, OpenAI), http://127.0.0.1:$((p_mock + 1)) (mock-b, Anthropic)
  settings:        $run/fleet.env

Try it:
  set -a; source $run/fleet.env; set +a
  curl -s ${dps[1]}/v1/chat/completions -H "Authorization: Bearer \$LLMGW_API_KEY" \\
    -H 'Content-Type: application/json' -d '{"model":"fast","messages":[{"role":"user","content":"Hi"}]}'
  LLMGW_ADMIN_URL=http://127.0.0.1:$((p_admin + 1)) tools/llmgwctl health   # who leads, etcd state

Stop it: deploy/local/fleet-down.sh
MSG
