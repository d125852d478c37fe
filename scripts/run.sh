#!/usr/bin/env bash
# The README's first command: set up, build if stale, then run tensorctl with the given arguments.
# With no arguments it trains the default config, configs/digits_mlp.json, into runs/digits_mlp, replacing the
# run a previous call left there (--overwrite), so it can be run again and again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh" "$root/build"
if [ $# -eq 0 ]; then
  set -- train "$root/configs/digits_mlp.json" --overwrite
fi
exec "$root/build/tensorctl" "$@"
