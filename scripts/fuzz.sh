#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz/ with clang-14 (ASan + UBSan) in build-fuzz/ and runs each for
# SECONDS (default 60; 0 runs only the seeds and the regression inputs once). Usage: scripts/fuzz.sh [SECONDS]
#
# Each harness first runs once over every input in tests/fuzz/regressions/<name>/ (findings kept as regression
# inputs), then fuzzes its corpus build-fuzz/corpus/<name>/: the committed seeds of tests/fuzz/corpus/<name>/
# copied in, plus whatever earlier runs here found (tests/fuzz/corpus is never written). Prints one line per
# harness with its execution count, then the total. Any crash, leak, timeout (-timeout=10 s for one input) or
# out-of-memory (-rss_limit_mb=2048) fails the script, naming the input libFuzzer saved to reproduce it:
#   build-fuzz/spec_reader_fuzz build-fuzz/artifacts/spec_reader/crash-...
# The full output of each run is in build-fuzz/logs/<name>.log.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
case "$seconds" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;; esac
"$root/scripts/setup.sh" --fuzz

dir="$root/build-fuzz"
if [ ! -f "$dir/CMakeCache.txt" ]; then
  # -O2 without NDEBUG: TCTL_DCHECK and nlohmann's assertions stay on while fuzzing. A unity build, as for
  # scripts/test.sh's sanitizer builds: the libraries' sources eight to a translation unit.
  CC=clang-14 CXX=clang++-14 cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g" -DTENSORCTL_FUZZ=ON -DTENSORCTL_TESTS=OFF -DTENSORCTL_BENCH=OFF -DTENSORCTL_CUDA=OFF -DTENSORCTL_MPI=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8 >/dev/null
fi
cmake --build "$dir" -j 2 --target fuzzers >"$dir/build.log" 2>&1 || {
  grep -E "error" "$dir/build.log" | head -40 >&2
  echo "fuzz build failed; the full log is $dir/build.log" >&2
  exit 1
}

# The harnesses that take a path write their input under $TMPDIR; a crashed run cannot clean up after itself.
scratch="$(mktemp -d "${TMPDIR:-/tmp}/tctl-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
mkdir -p "$dir/logs"

# Longest input per harness: 64 KB of JSON, 16 KB of CSV or safetensors; far past every seed, short enough to stay
# fast.
declare -A max_len=([spec_reader]=65536 [keras_import]=65536 [train_config]=65536 [run_summary]=65536 [csv]=16384 [safetensors]=16384 [checkpoint]=16384 [predict_input]=16384 [run_history]=16384 [arrays]=16384 [text_vectorize]=16384 [images]=65536)
# keras_file_fuzz is built but not run here: the HDF5 inside a Keras file is parsed by Debian's libhdf5 1.10,
# which a damaged file sends into an endless loop within a minute (H5HG_read under H5Aread of a
# variable-length string); that finding is libhdf5's, and a run here would fail on it every time. Run it by
# hand: build-fuzz/keras_file_fuzz tests/fuzz/corpus/keras_file -max_len=65536.
names=(spec_reader keras_import train_config run_summary csv safetensors checkpoint predict_input run_history arrays text_vectorize images)

# fuzz_one NAME: runs NAME's regression inputs, then fuzzes its corpus; the exit status goes to logs/NAME.status.
fuzz_one() {
  local name="$1"
  local bin="$dir/${name}_fuzz" corpus="$dir/corpus/$name" artifacts="$dir/artifacts/$name/"
  local log="$dir/logs/$name.log" status=0
  : >"$log"  # first: a job that fails below leaves an empty log, not an earlier run's
  mkdir -p "$corpus" "$artifacts"
  for seed in "$root/tests/fuzz/corpus/$name/"*; do
    [ -e "$corpus/${seed##*/}" ] || cp "$seed" "$corpus/"
  done
  local common=(-timeout=10 -rss_limit_mb=2048 -max_len="${max_len[$name]}" -artifact_prefix="$artifacts")
  local dict="$root/tests/fuzz/$name.dict"
  [ -f "$dict" ] && common+=(-dict="$dict")
  local regressions
  mapfile -t regressions < <(find "$root/tests/fuzz/regressions/$name" -type f 2>/dev/null | sort)
  if [ ${#regressions[@]} -gt 0 ]; then
    "$bin" "${common[@]}" "${regressions[@]}" >>"$log" 2>&1 || status=$?
  fi
  if [ "$status" -eq 0 ]; then
    if [ "$seconds" -eq 0 ]; then
      "$bin" "${common[@]}" -runs=0 -print_final_stats=1 "$corpus" >>"$log" 2>&1 || status=$?
    else
      "$bin" "${common[@]}" -max_total_time="$seconds" -print_final_stats=1 "$corpus" >>"$log" 2>&1 || status=$?
    fi
  fi
  echo "$status" >"$dir/logs/$name.status"
}

# One harness per core at a time: each libFuzzer run is one thread, so on CI's two cores the 12 harnesses
# take half the wall time they took one after the other (each still fuzzes SECONDS).
jobs="$(nproc 2>/dev/null || echo 2)"
running=0
rm -f "$dir"/logs/*.status
for name in "${names[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  fuzz_one "$name" &
  running=$((running + 1))
done
wait

failed=()
total=0
for name in "${names[@]}"; do
  bin="$dir/${name}_fuzz"
  corpus="$dir/corpus/$name"
  log="$dir/logs/$name.log"
  status="$(cat "$dir/logs/$name.status" 2>/dev/null || echo 1)"

  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" 2>/dev/null | tail -1 || true)"
  execs="${execs:-0}"
  total=$((total + execs))
  if [ "$status" -eq 0 ]; then
    printf '%-13s %12d executions, corpus of %d inputs\n' "$name" "$execs" "$(find "$corpus" -type f | wc -l)"
  else
    reproducer="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)"
    # A regression input that fails again is its own reproducer: libFuzzer names it as "Running: FILE".
    [ -n "$reproducer" ] || reproducer="$(sed -n 's/^Running: \(.*\)$/\1/p' "$log" | tail -1)"
    printf '%-13s %12d executions, FAILED (exit %d): %s\n' "$name" "$execs" "$status" \
      "$(grep -m1 -oE '(ERROR|SUMMARY): [^(]*|runtime error: .*|==[0-9]+== ?ERROR: libFuzzer: [a-z-]+|terminate called.*|Check failed.*' "$log" || echo "see $log")"
    echo "  reproduce: $bin ${reproducer:-(no input saved; see $log)}"
    echo "  log: $log"
    failed+=("$name")
  fi
done
printf '%-13s %12d executions\n' "total" "$total"
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: no findings"
