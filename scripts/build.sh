#!/usr/bin/env bash
# Configures and builds tensorctl. Usage: scripts/build.sh [--target NAME]... [BUILD_DIR] [cmake -D options...]
# The default is build/, a Release build of every target (the binary, the test suites, the benchmarks);
# --target builds only the targets named (tensorctl: the binary alone). The -D options are applied whether or
# not BUILD_DIR was configured before. Rebuilding only compiles what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
targets=()
while [ "${1:-}" = "--target" ]; do
  targets+=(--target "$2")
  shift 2
done
dir="${1:-$root/build}"
shift || true
# cached NAME: the value BUILD_DIR's CMake cache holds for NAME, empty if none.
cached() { sed -n "s/^$1:[A-Z]*=//p" "$dir/CMakeCache.txt"; }
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
else
  # Configure again only for an option the cache does not hold already (a configure takes seconds).
  for option in "$@"; do
    setting="${option#-D}"
    name="${setting%%=*}"
    if [ "$(cached "${name%%:*}")" != "${setting#*=}" ]; then
      cmake -S "$root" -B "$dir" "$@" >/dev/null
      break
    fi
  done
fi
log="$dir/build.log"
if ! cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)" "${targets[@]}" >"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -40 >&2
  echo "build failed; the full log is $log" >&2
  exit 1
fi
grep -E "warning:" "$log" | head -20 >&2 || true
