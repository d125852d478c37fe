#!/usr/bin/env bash
# Configures (once) and builds tensorctl. Usage: scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
# The default is build/, a Release build. Rebuilding only compiles what changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="${1:-$root/build}"
shift || true
if [ ! -f "$dir/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
fi
log="$dir/build.log"
if ! cmake --build "$dir" -j "$(nproc 2>/dev/null || echo 2)" >"$log" 2>&1; then
  grep -E "error|Error" "$log" | head -40 >&2
  echo "build failed; the full log is $log" >&2
  exit 1
fi
grep -E "warning:" "$log" | head -20 >&2 || true
