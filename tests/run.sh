#!/usr/bin/env bash
# Runs the whole llmgw test suite, twice: on a normal build and on an
# AddressSanitizer + UndefinedBehaviorSanitizer build. Each pass runs the
# CUnit unit tests through ctest and the integration tests (real processes on
# loopback, official SDKs as clients) with node's test runner.
#
#   tests/run.sh            both passes
#   tests/run.sh normal     one pass (or: asan)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash deploy/deps.sh

if (($#)); then passes=("$@"); else passes=(normal asan); fi
jobs=$(nproc 2>/dev/null || echo 2)
total_passed=0
total_failed=0
summary=()

# The C sources follow the checked-in .clang-format.
echo "=== format (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))"
# (Captured, not piped into grep: under pipefail clang-format's own failure
# status would make a pipeline with findings read as a pass.)
fmt=$(clang-format --dry-run --Werror $(git ls-files '*.c' '*.h') 2>&1 || true)
if [ -n "$fmt" ]; then
  printf '%s\n' "$fmt" | head -20 || true
  summary+=("format: FAILED (run: clang-format -i \$(git ls-files '*.c' '*.h'))")
  total_failed=$((total_failed + 1))
else
  total_passed=$((total_passed + 1))
fi

# libFuzzer targets (tests/fuzz/): built with clang, each run for a bounded time.
echo "=== fuzz (tests/fuzz/run.sh, ${LLMGW_FUZZ_SECONDS:-20} s a target)"
if tests/fuzz/run.sh; then
  total_passed=$((total_passed + 1))
else
  summary+=("fuzz: FAILED (replay: build-fuzz/<target> build-fuzz/artifacts/crash-*)")
  total_failed=$((total_failed + 1))
fi

for pass in "${passes[@]}"; do
  case "$pass" in
    normal) dir=build; flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMGW_SANITIZE=OFF) ;;
    asan)   dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DLLMGW_SANITIZE=ON) ;;
    *) echo "unknown pass '$pass' (normal, asan)"; exit 2 ;;
  esac
  echo "=== $pass: build ($dir)"
  cmake -S . -B "$dir" "${flags[@]}" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null

  if [ "$pass" = asan ]; then
    export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  else
    unset ASAN_OPTIONS UBSAN_OPTIONS
  fi

  echo "=== $pass: unit tests (ctest)"
  log=$(mktemp)
  if (cd "$dir" && ctest --output-on-failure -j"$jobs") >"$log" 2>&1; then rc=0; else rc=1; fi
  cat "$log"
  # ctest closes with "N% tests passed, F tests failed out of T".
  read -r uf ut < <(sed -nE 's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+)/\1 \2/p' "$log" | tail -1)
  uf=${uf:-1}; ut=${ut:-1}
  total_passed=$((total_passed + ut - uf)); total_failed=$((total_failed + uf))
  [ $rc -eq 0 ] || summary+=("$pass unit: FAILED")

  echo "=== $pass: integration tests (node --test)"
  if LLMGW_BUILD_DIR="$root/$dir" node --test --test-concurrency=1 tests/integration/ >"$log" 2>&1; then rc=0; else rc=1; fi
  cat "$log"
  # node's TAP reporter closes with "# pass N" and "# fail N".
  ip=$(awk '/^# pass /{s+=$3} END{print s+0}' "$log")
  if_=$(awk '/^# fail /{s+=$3} END{print s+0}' "$log")
  total_passed=$((total_passed + ip)); total_failed=$((total_failed + if_))
  [ $rc -eq 0 ] || summary+=("$pass integration: FAILED")
  rm -f "$log"
done

echo
for s in "${summary[@]}"; do echo "$s"; done
echo "llmgw: $total_passed passed, $total_failed failed"
[ ${#summary[@]} -eq 0 ] && [ "$total_failed" -eq 0 ]
