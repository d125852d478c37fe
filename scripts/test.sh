#!/usr/bin/env bash
# The README's second command: set up, build, and run the whole test suite with ctest.
#   scripts/test.sh          Release build in build/, every test; where nvcc and cuBLAS are installed the
#                            build compiles and links the CUDA backend too (its GPU tests skip without a GPU);
#                            a compiler warning fails the build (TENSORCTL_WERROR)
#   scripts/test.sh --tsan   ThreadSanitizer build in build-tsan/: the concurrency tests, a CSV parsed on two
#                            threads, and
#                            `race-check --scenario all` under every locking mode; any report fails it
#   scripts/test.sh --asan   AddressSanitizer + UndefinedBehaviorSanitizer build in build-asan/: every test
#                            suite (core, kernels, models, cli); any report, a leak included, fails it
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
jobs="$(nproc 2>/dev/null || echo 2)"

# sanitizer_build DIR SANITIZERS [TARGET...]: configures DIR once (RelWithDebInfo, no benchmarks) and builds
# the targets, all of them when none is named.
sanitizer_build() {
  local dir="$1" sanitizers="$2"
  shift 2
  if [ ! -f "$dir/CMakeCache.txt" ]; then
    # -fno-sanitize-recover: a UBSan report aborts instead of printing and going on (a no-op for thread).
    # Without CUDA: nvcc takes no sanitizer flags, and these builds show that tensorctl builds without it.
    # -O1 -g1 (line tables only), as the sanitizers' manuals advise: the build is CI's largest cost, and these
    # flags compile it in less than half the time of -O2 -g with the same reports and stack traces.
    # A unity build (eight sources a translation unit) parses the JSON, fmt and CLI11 headers an eighth as often:
    # on a 2-core AMD EPYC the ASan build took 7.9 min against 18.5. Only here: the Release build stays one
    # source a unit, so no inlining across files changes its floating-point contractions.
    # -Werror, as in the Release build: at -O1 g++ warns where -O3 does not (tests/CMakeLists.txt).
    cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTENSORCTL_SANITIZE="$sanitizers" \
      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DTENSORCTL_CUDA=OFF -DTENSORCTL_BENCH=OFF -DCMAKE_CXX_FLAGS="-fno-sanitize-recover=undefined" \
      -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 -DTENSORCTL_WERROR=ON >/dev/null
  fi
  local targets=()
  for t in "$@"; do targets+=(--target "$t"); done
  cmake --build "$dir" -j "$jobs" "${targets[@]}" >"$dir/build.log" 2>&1 || {
    grep -E "error" "$dir/build.log" | head -40 >&2
    echo "$sanitizers build failed; the full log is $dir/build.log" >&2
    exit 1
  }
}

if [ "${1:-}" = "--tsan" ]; then
  dir="$root/build-tsan"
  sanitizer_build "$dir" thread tensorctl core_tests
  # halt_on_error turns the first report into a failing exit status.
  export TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1"
  echo "tsan: core tests"
  "$dir/tests/core_tests"
  echo "tsan: race-check --scenario all, every mode"
  "$dir/tensorctl" race-check --scenario all --modes all --threads 4 --iterations 200 --widen 10 --json >"$dir/race_check.json"
  # The explorer hands the turn from thread to thread through one atomic; hogwild's workers count staleness.
  echo "tsan: race-check --explore, every scenario and mode, and --config"
  "$dir/tensorctl" race-check --explore --threads 3 --json >"$dir/race_explore.json"
  "$dir/tensorctl" race-check --config "$root/configs/digits_mlp.json" --set epochs=1 --json >"$dir/race_config.json"
  # A CSV of 3.5 MB parses in two pieces of whole records on two threads (models/data/csv.h).
  echo "tsan: a CSV read in pieces on two data threads"
  awk 'BEGIN { printf "label"; for (c = 1; c <= 40; c++) printf ",f%d", c; print "";
               for (r = 0; r < 30000; r++) { printf "%d", r % 3; for (c = 1; c <= 40; c++) printf ",%d", (r * c) % 97; print "" } }' \
    >"$dir/pieces.csv"
  cat >"$dir/pieces.json" <<'JSON'
{"model": {"input_shape": [40], "layers": [{"type": "Dense", "units": 3, "activation": "softmax"}]},
 "data": {"csv": "pieces.csv"}, "epochs": 1, "batch_size": 512, "threads": {"data": 2}}
JSON
  "$dir/tensorctl" train "$dir/pieces.json" --quiet --overwrite --output "$dir/pieces_run" >/dev/null
  # Streamed in windows of 4,096 rows (models/data/row_stream.h): each read on the feed's thread while the one
  # before trains, the batches on the prefetch thread, the validation windows on a third.
  echo "tsan: the same CSV streamed a window at a time"
  sed 's/"csv": "pieces.csv"/"csv": "pieces.csv", "stream": true, "shuffle_buffer": 4096/; s/"epochs": 1/"epochs": 2/' \
    "$dir/pieces.json" >"$dir/streamed.json"
  "$dir/tensorctl" train "$dir/streamed.json" --quiet --overwrite --output "$dir/streamed_run" >/dev/null
  # profile reads the windows on a reader thread of its own while the steps gather from the one before.
  echo "tsan: profile of the streamed CSV, its window reader beside the steps"
  "$dir/tensorctl" profile "$dir/streamed.json" --iterations 20 --warmup 0 --batch-size 512 \
    --trace "$dir/streamed_trace.json" >/dev/null
  echo "tsan: clean"
  exit 0
fi

if [ "${1:-}" = "--asan" ]; then
  dir="$root/build-asan"
  sanitizer_build "$dir" "address;undefined"
  # The cli suite runs build-asan/tensorctl, which inherits these: every process stops at its first report.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  echo "asan+ubsan: every test suite"
  cd "$dir"
  ctest --output-on-failure -j "$jobs"
  echo "asan+ubsan: clean"
  exit 0
fi

# TENSORCTL_CUDA=AUTO: the CUDA backend wherever nvcc is installed, also where a first scripts/run.sh configured
# build/ without it for want of a GPU. -Werror: CI fails on a new compiler warning.
"$root/scripts/build.sh" "$root/build" -DTENSORCTL_CUDA=AUTO -DTENSORCTL_WERROR=ON
cd "$root/build"
ctest --output-on-failure -j "$jobs"
