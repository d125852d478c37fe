#!/bin/sh
# The limits tensorctl's speed is measured against: the sgemm limit of an MLP training step (OpenBLAS alone,
# 1 and 2 threads) and the executor's overhead per node. Builds the benchmarks if needed.
# Usage: bench/limits.sh   (from the repository root; BUILD_DIR defaults to build)
set -eu
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build}
if [ ! -x "$build/bench/bench_sgemm_limit" ] || [ ! -x "$build/bench/bench_executor_overhead" ]; then
  scripts/build.sh "$build" >/dev/null
fi
"$build/bench/bench_sgemm_limit"
echo
"$build/bench/bench_executor_overhead"
