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
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build "$dir" -j "$jobs" 2>&1 | grep -E "error|warning|Error" || true
[ "${PIPESTATUS[0]}" -eq 0 ] || { echo "build failed; rerun: cmake --build $dir" >&2; exit 1; }
