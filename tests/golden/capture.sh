#!/usr/bin/env bash
# Captures the upstream fixtures in tests/golden/upstream/ from the mock
# provider: for every provider wire format, a "text" answer (with reasoning
# and cache usage) and a "tools" answer (two parallel tool calls), streamed
# and whole. Run after changing the mock, then LLMGW_GOLDEN_UPDATE=1 the
# golden test and review the diff.
#   tests/golden/capture.sh [build-dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
out=$here/upstream
mock=$build/tests/mockprovider/llmgw-mockprovider
port=19391
"$mock" --listen 127.0.0.1:$port >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
for _ in $(seq 50); do curl -sf "127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.1; done
base="http://127.0.0.1:$port"

TEXT_FAULT='reasoning=2,cache_read=1,cache_write=1'
TOOLS_FAULT='parallel=2'
SCHEMA_W='{"type":"object","properties":{"city":{"type":"string"},"days":{"type":"integer"}},"required":["city","days"]}'
SCHEMA_T='{"type":"object","properties":{"verbose":{"type":"boolean"}}}'

post() { # file url body [headers...]
  local file=$1 url=$2 body=$3; shift 3
  curl -sS --fail-with-body -o "$out/$file" -H 'content-type: application/json' "$@" --data-binary "$body" "$url"
}

for scen in text tools; do
  if [ $scen = text ]; then fault=$TEXT_FAULT; else fault=$TOOLS_FAULT; fi
  ofault=$(printf '%s' "$fault" | sed 's/#/%23/')
  # OpenAI chat completions
  tools='[{"type":"function","function":{"name":"get_weather","parameters":'$SCHEMA_W'}},{"type":"function","function":{"name":"get_time","parameters":'$SCHEMA_T'}}]'
  [ $scen = text ] && tools='[]'
  for s in true false; do
    ext=sse; [ $s = false ] && ext=json
    post openai.$scen.$ext "$base/v1/chat/completions" \
      '{"model":"mock-gpt#'$fault'","stream":'$s',"stream_options":'$([ $s = true ] && echo '{"include_usage":true}' || echo null)',"messages":[{"role":"user","content":"one two three"}],"tools":'$tools'}'
  done
  # Anthropic messages
  tools='[{"name":"get_weather","input_schema":'$SCHEMA_W'},{"name":"get_time","input_schema":'$SCHEMA_T'}]'
  [ $scen = text ] && tools='[]'
  for s in true false; do
    ext=sse; [ $s = false ] && ext=json
    post anthropic.$scen.$ext "$base/v1/messages" \
      '{"model":"mock-claude#'$fault'","max_tokens":100,"stream":'$s',"messages":[{"role":"user","content":"one two three"}],"tools":'$tools'}' \
      -H 'anthropic-version: 2023-06-01'
  done
  # OpenAI Responses
  tools='[{"type":"function","name":"get_weather","parameters":'$SCHEMA_W'},{"type":"function","name":"get_time","parameters":'$SCHEMA_T'}]'
  [ $scen = text ] && tools='[]'
  for s in true false; do
    ext=sse; [ $s = false ] && ext=json
    post openai-responses.$scen.$ext "$base/v1/responses" \
      '{"model":"mock-gpt#'$fault'","stream":'$s',"input":"one two three","tools":'$tools'}'
  done
  # Gemini
  tools='[{"functionDeclarations":[{"name":"get_weather","parameters":'$SCHEMA_W'},{"name":"get_time","parameters":'$SCHEMA_T'}]}]'
  [ $scen = text ] && tools='[]'
  body='{"contents":[{"role":"user","parts":[{"text":"one two three"}]}],"tools":'$tools'}'
  post gemini.$scen.sse "$base/v1beta/models/mock-gemini%23$ofault:streamGenerateContent?alt=sse" "$body" -H 'x-goog-api-key: k'
  post gemini.$scen.json "$base/v1beta/models/mock-gemini%23$ofault:generateContent" "$body" -H 'x-goog-api-key: k'
  # Ollama
  tools='[{"type":"function","function":{"name":"get_weather","parameters":'$SCHEMA_W'}},{"type":"function","function":{"name":"get_time","parameters":'$SCHEMA_T'}}]'
  [ $scen = text ] && tools='[]'
  for s in true false; do
    ext=ndjson; [ $s = false ] && ext=json
    post ollama.$scen.$ext "$base/api/chat" \
      '{"model":"mock-llama#'$fault'","stream":'$s',"messages":[{"role":"user","content":"one two three"}],"tools":'$tools'}'
  done
  # Bedrock Converse
  tools=',"toolConfig":{"tools":[{"toolSpec":{"name":"get_weather","inputSchema":{"json":'$SCHEMA_W'}}},{"toolSpec":{"name":"get_time","inputSchema":{"json":'$SCHEMA_T'}}}]}'
  [ $scen = text ] && tools=''
  body='{"messages":[{"role":"user","content":[{"text":"one two three"}]}]'$tools'}'
  auth=(-H 'authorization: AWS4-HMAC-SHA256 Credential=AKID/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host, Signature=00' -H 'x-amz-date: 20260101T000000Z')
  post bedrock.$scen.es "$base/model/mock-claude%23$ofault/converse-stream" "$body" "${auth[@]}"
  post bedrock.$scen.json "$base/model/mock-claude%23$ofault/converse" "$body" "${auth[@]}"
done
ls -la "$out"
