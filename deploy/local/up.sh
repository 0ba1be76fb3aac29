#!/usr/bin/env bash
# Starts llmgw locally in the background: installs dependencies, builds, then
# runs the mock provider and one data plane on loopback. Real providers join
# when their keys are in the environment (OPENAI_API_KEY, ANTHROPIC_API_KEY).
# Writes .run/demo.env (LLMGW_BASE_URL, LLMGW_API_KEY, LLMGW_MODEL) and prints
# a working curl line. deploy/local/down.sh stops what this started.
#
# Ports: LLMGW_PORT (default 8080) for the gateway, LLMGW_MOCK_PORT (9090).
set -euo pipefail
run="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/.run"
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$root"
mkdir -p "$run"
port=${LLMGW_PORT:-8080}
mock_port=${LLMGW_MOCK_PORT:-9090}

bash deploy/local/down.sh >/dev/null 2>&1 || true
local_prepare up

# A demo API key, made once and kept: only its SHA-256 goes into the snapshot.
if [ ! -f "$run/demo.key" ]; then
  (umask 077; echo "sk-llmgw-$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')" >"$run/demo.key")
fi
key=$(cat "$run/demo.key")
key_hash=$(printf '%s' "$key" | sha256sum | cut -d' ' -f1)

# The snapshot the control plane will push later; for now a file. Provider
# keys stay in the environment (credential_ref env:NAME), never in the file.
mock_root="http://127.0.0.1:$mock_port"
providers=$(jq -n --arg root "$mock_root" '[
  {name:"mock", driver:"openai", base_url:($root + "/v1")},
  {name:"mock-anthropic", driver:"anthropic", base_url:$root},
  {name:"mock-gemini", driver:"gemini", base_url:($root + "/v1beta"), credential_ref:"env:LLMGW_MOCK_KEY"},
  {name:"mock-ollama", driver:"ollama", base_url:$root}]')
smart='[{"provider":"mock","model":"mock-gpt-large"}]'
if [ -n "${OPENAI_API_KEY:-}" ]; then
  providers=$(jq '. + [{name:"openai", driver:"openai", base_url:"https://api.openai.com/v1",
                        credential_ref:"env:OPENAI_API_KEY"}]' <<<"$providers")
  smart='[{"provider":"openai","model":"gpt-4o-mini"}]'
  echo "up: OPENAI_API_KEY found: provider 'openai' added, route 'smart' uses it"
fi
if [ -n "${ANTHROPIC_API_KEY:-}" ]; then
  providers=$(jq '. + [{name:"anthropic", driver:"anthropic", base_url:"https://api.anthropic.com",
                        credential_ref:"env:ANTHROPIC_API_KEY"}]' <<<"$providers")
  echo "up: ANTHROPIC_API_KEY found: provider 'anthropic' added (use model anthropic/MODEL)"
fi
jq -n --argjson providers "$providers" --argjson smart "$smart" --arg hash "$key_hash" '{
  version: 1,
  providers: $providers,
  routes: [
    {name:"fast", aliases:["default"], capability:"chat", strategy:"ordered",
     entries:[{provider:"mock", model:"mock-gpt"}]},
    {name:"smart", capability:"chat", strategy:"ordered", entries:$smart}
  ],
  keys: [{id:"key_demo", hash:$hash, status:"active", team:"demo"}]
}' >"$run/snapshot.json"

local_start mock "$bin/tests/mockprovider/llmgw-mockprovider" --listen "127.0.0.1:$mock_port" \
  --threads 1 --usage-log "$run/mock-usage.log"
local_wait_listening mock
# The mock's Gemini endpoint wants a key, like the real one (any value).
local_start dataplane env LLMGW_MOCK_KEY=mock-key "$bin/dataplane/llmgw-dataplane" --snapshot "$run/snapshot.json" \
  --listen "127.0.0.1:$port" --access-log "$run/access.log"
local_wait_listening dataplane

cat >"$run/demo.env" <<ENV
LLMGW_BASE_URL=http://127.0.0.1:$port
LLMGW_API_KEY=$key
LLMGW_MODEL=fast
ENV
cat <<MSG
up: llmgw is running (pids in .run/*.pid, logs in .run/).
  gateway:  http://127.0.0.1:$port   (OpenAI SDKs: base URL http://127.0.0.1:$port/v1)
  mock:     http://127.0.0.1:$mock_port
  settings: .run/demo.env

Try it:
  curl -s http://127.0.0.1:$port/v1/chat/completions -H "Authorization: Bearer $key" \\
    -H 'Content-Type: application/json' \\
    -d '{"model":"fast","messages":[{"role":"user","content":"Hello!"}]}'

Stop it: deploy/local/down.sh
MSG
