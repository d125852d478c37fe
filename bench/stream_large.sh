#!/usr/bin/env bash
# A numeric CSV of GB gigabytes (a label and 100 features written as 0.dddd, about 0.7 KB a row; 20,000
# distinct rows repeated), generated here and deleted after, trained for two epochs of Dense(256) -> Dense(10)
# at batch 128 under a memory limit of LIMIT in a control group of its own (cgroup v1's
# memory.limit_in_bytes, or v2's memory.max; root only), where tensorctl finds the data does not fit and
# streams it (models/data/row_stream.h). The same model trains in memory on the file's first 200 MB in the same
# script, for 8 epochs: the streamed samples/s against that rate, the streamed run's peak resident memory, and the group's
# own peak (which counts the page cache it was allowed, up to the limit).
#   bench/stream_large.sh [BUILD_DIR [GB [LIMIT]]]   default build, 10, 1G
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
gb="${2:-10}"
limit="${3:-1G}"
dir="$(mktemp -d -p "${TMPDIR:-/var/tmp}")"
group=""
cleanup() {
  rm -rf "$dir"
  if [ -n "$group" ]; then rmdir "$group" 2>/dev/null || true; fi
}
trap cleanup EXIT

# The rows: 20,000 written by awk, then repeated to the size asked for.
awk 'BEGIN { printf "label"; for (c = 0; c < 100; c++) printf ",f%d", c; print "" }' >"$dir/data.csv"
awk 'BEGIN { for (r = 0; r < 20000; r++) { printf "%d", r % 10;
               for (c = 0; c < 100; c++) printf ",0.%d", 1000 + (r * 7 + c * 13 + r * c) % 9000; print "" } }' \
  >"$dir/block.csv"
target=$((gb * 1024 * 1024 * 1024))
while [ "$(stat -c %s "$dir/data.csv")" -lt "$target" ]; do cat "$dir/block.csv" >>"$dir/data.csv"; done
head -c $((200 * 1024 * 1024)) "$dir/data.csv" | head -n -1 >"$dir/small.csv"
rm "$dir/block.csv"

cat >"$dir/model.json" <<'JSON'
{"input_shape": [100], "layers": [{"type": "Dense", "units": 256, "activation": "relu"},
                                  {"type": "Dense", "units": 10, "activation": "softmax"}]}
JSON
config() {
  printf '{"model": "model.json", "data": {"csv": "%s", "test_split": 0.01, "validation_split": 0.01%s},
 "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "adam"}, "metrics": ["accuracy"],
 "epochs": 2, "batch_size": 128, "seed": 1}\n' "$1" "$2"
}
config small.csv ', "stream": false' >"$dir/memory.json"
config data.csv "" >"$dir/stream.json"

# The streamed run in a memory control group of its own.
if [ -d /sys/fs/cgroup/memory ]; then
  group=/sys/fs/cgroup/memory/tensorctl_bench_$$
  mkdir "$group"
  echo "$limit" >"$group/memory.limit_in_bytes"
  peak_file="$group/memory.max_usage_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
  group=/sys/fs/cgroup/tensorctl_bench_$$
  mkdir "$group"
  echo "$limit" >"$group/memory.max"
  peak_file="$group/memory.peak"
else
  echo "no memory cgroup to limit the run in (needs root and cgroup v1 or v2)" >&2
  exit 1
fi
start=$(date +%s.%N)
sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$group" \
  "$build/tensorctl" train "$dir/stream.json" --output "$dir/stream" >"$dir/stream.txt" 2>&1 || {
  cat "$dir/stream.txt"
  exit 1
}
end=$(date +%s.%N)
group_peak=$(cat "$peak_file" 2>/dev/null || echo 0)
# The in-memory rate after the streamed run, when the disk has written the generated file back, over 8 epochs
# (two of 285,000 rows took under 2 s, and varied by 1.7x run to run).
"$build/tensorctl" train "$dir/memory.json" --output "$dir/memory" --epochs 8 --quiet >/dev/null
grep -i "stream" "$dir/stream.txt" | head -2
/usr/bin/python3 - "$dir" "$start" "$end" "$group_peak" "$limit" <<'PY'
import json, os, sys
d, start, end, group_peak, limit = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
m = json.load(open(f"{d}/memory/summary.json"))
s = json.load(open(f"{d}/stream/summary.json"))
gb = os.path.getsize(f"{d}/data.csv") / 2**30
print(f"{gb:.1f} GB CSV, {s['rows']['train']:,} training rows, limit {limit}: streamed in "
      f"{s['input']['windows']} windows of {s['input']['window_rows']:,} rows")
print(f"wall {end - start:.0f} s, of which 2 epochs {s['train_seconds']:.0f} s and reading the CSV into its "
      f"cache, checking and scaling {end - start - s['train_seconds']:.0f} s ({gb * 1024 / (end - start - s['train_seconds']):.0f} MB/s)")
print(f"samples/s streamed {s['samples_per_second']:,.0f}, in memory {m['samples_per_second']:,.0f} "
      f"({s['samples_per_second'] / m['samples_per_second']:.2f}x); input wait {s['input']['wait_share'] * 100:.1f}% "
      f"of the epochs, {s['input']['wait_ms_per_step']:.3f} ms a step")
print(f"peak resident {s['peak_resident_bytes'] / 2**20:.0f} MiB; the group's peak, page cache included, "
      f"{group_peak / 2**20:.0f} MiB; test accuracy {s['test']['accuracy']:.4f}")
PY
