#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite with ctest.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build"
cd "$root/build"
ctest --output-on-failure -j "$(nproc 2>/dev/null || echo 2)"
