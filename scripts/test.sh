#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite with ctest.
#   scripts/test.sh          Release build in build/, every test
#   scripts/test.sh --tsan   ThreadSanitizer build in build-tsan/: the concurrency tests and
#                            `race-check --scenario all` under every locking mode; any report fails it
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
jobs="$(nproc 2>/dev/null || echo 2)"

if [ "${1:-}" = "--tsan" ]; then
  dir="$root/build-tsan"
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORCTL_SANITIZE=thread -DTENSORCTL_BENCH=OFF >/dev/null
  fi
  cmake --build "$dir" -j "$jobs" --target tensorctl core_tests >"$dir/build.log" 2>&1 || {
    grep -E "error" "$dir/build.log" | head -40 >&2
    echo "tsan build failed; the full log is $dir/build.log" >&2
    exit 1
  }
  # halt_on_error turns the first report into a failing exit status.
  export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
  echo "tsan: core tests"
  "$dir/tests/core_tests"
  echo "tsan: race-check --scenario all, every mode"
  "$dir/tensorctl" race-check --scenario all --modes all --threads 4 --iterations 200 --widen 10 --json >"$dir/race_check.json"
  echo "tsan: clean"
  exit 0
fi

"$root/scripts/build.sh" "$root/build"
cd "$root/build"
ctest --output-on-failure -j "$jobs"
