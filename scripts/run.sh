#!/usr/bin/env bash
# The README's first command: set up, build the binary if stale, then run tensorctl with the given arguments.
# With no arguments it trains the default config, configs/digits_mlp.json, into runs/digits_mlp, replacing the
# run a previous call left there (--overwrite), so it can be run again and again.
# It builds build/tensorctl alone, not the test suites or the benchmarks (scripts/test.sh builds those in the
# same folder). A first configure leaves the CUDA backend out unless `nvidia-smi -L` sees a GPU: compiling its
# kernels takes minutes, and without a GPU every cuda device falls back to the CPU. scripts/test.sh turns it
# back on (TENSORCTL_CUDA=AUTO) where nvcc is installed; once build/ is configured, run.sh keeps its settings.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
options=()
if [ ! -f "$root/build/CMakeCache.txt" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  options+=(-DTENSORCTL_CUDA=OFF)
fi
"$root/scripts/build.sh" --target tensorctl "$root/build" "${options[@]}"
if [ $# -eq 0 ]; then
  set -- train "$root/configs/digits_mlp.json" --overwrite
fi
exec "$root/build/tensorctl" "$@"
