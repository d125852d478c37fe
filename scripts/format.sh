#!/usr/bin/env bash
# Formats every C++ file git tracks (*.h, *.cpp, *.cu, *.cuh) with clang-format-14 and the repository's
# .clang-format. Usage:
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   change nothing; list each file that is not formatted and exit 1 (CI runs this)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
"$root/scripts/setup.sh" --format
mapfile -t files < <(git ls-files -- '*.h' '*.cpp' '*.cu' '*.cuh')
case "${1:-}" in
  "") clang-format-14 -i --style=file "${files[@]}" ;;
  --check)
    bad=0
    for f in "${files[@]}"; do
      if ! clang-format-14 --style=file --dry-run -Werror "$f" >/dev/null 2>&1; then
        echo "not formatted: $f (scripts/format.sh rewrites it)" >&2
        bad=1
      fi
    done
    [ "$bad" -eq 0 ] && echo "format: ${#files[@]} files formatted"
    exit "$bad"
    ;;
  *) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac
