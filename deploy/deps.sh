#!/usr/bin/env bash
# Installs everything llmgw needs to build, test, benchmark and run locally:
# Debian packages, then the npm packages of the client checks. Idempotent and
# quick when all is already there (no apt-get update unless a package is
# missing). Used by deploy/local/up.sh and tests/run.sh.
#
#   deploy/deps.sh --build-only   only what compiling the daemons needs (the
#                                 container images' build stage, deploy/docker/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_only=0
[ "${1:-}" = --build-only ] && build_only=1

pkgs=(
  build-essential cmake pkg-config
  libevent-dev libcurl4-openssl-dev libjansson-dev libssl-dev libcunit1-dev zlib1g-dev
  libgrpc-dev protobuf-compiler libprotobuf-c-dev protobuf-c-compiler libpq-dev
)
if [ $build_only = 0 ]; then
  pkgs+=(postgresql etcd-server etcd-client curl jq wrk nginx-light clang-format prometheus)
  # tests/fuzz/run.sh: clang with its libFuzzer and sanitizer runtimes.
  pkgs+=(clang libclang-rt-dev)
  # tests/integration/console.test.mjs: the web console in a real browser
  # (puppeteer-core drives Debian's chromium; no browser is downloaded).
  pkgs+=(chromium fonts-liberation)
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

[ $build_only = 1 ] && exit 0

# Client SDKs for the integration tests, pinned by the lock file.
it="$root/tests/integration"
if [ ! -f "$it/node_modules/.package-lock.json" ] || [ "$it/package-lock.json" -nt "$it/node_modules/.package-lock.json" ]; then
  echo "deps: npm ci in tests/integration"
  (cd "$it" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
