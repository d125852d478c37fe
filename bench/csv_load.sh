#!/usr/bin/env bash
# A numeric CSV the size of MNIST (ROWS x 785: a label and 784 pixel columns, about 110 MB at 60,000 rows),
# generated here and not kept: a one-epoch `tensorctl train` of Dense(256) -> Dense(10) at batch 128, timed
# and its peak resident memory taken (/usr/bin/time -v); the time outside the epoch is the reading,
# splitting, scaling and the run's files. numpy's loadtxt and Python's csv module read the same file in the
# same script, for MB/s against one Python thread. Then the same run streamed (models/data/row_stream.h): its
# cache built, reused, and in eight windows.
#   bench/csv_load.sh [BUILD_DIR [ROWS]]   default build, 60000
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
rows="${2:-60000}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
/usr/bin/python3 - "$rows" "$dir/data.csv" <<'PY'
import sys
import numpy as np
rows, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
with open(out, "w") as f:
    f.write("label," + ",".join(f"p{i}" for i in range(784)) + "\n")
    for start in range(0, rows, 5000):
        n = min(5000, rows - start)
        y = rng.integers(0, 10, n)
        x = rng.integers(0, 256, (n, 784)) * (rng.random((n, 784)) < 0.2)
        f.write("\n".join(str(y[i]) + "," + ",".join(map(str, x[i])) for i in range(n)) + "\n")
PY
cat > "$dir/model.json" <<'JSON'
{"input_shape": [784], "layers": [{"type": "Dense", "units": 256, "activation": "relu"},
                                  {"type": "Dense", "units": 10, "activation": "softmax"}]}
JSON
cat > "$dir/c.json" <<'JSON'
{"model": "model.json", "data": {"csv": "data.csv", "label": "label"}, "loss": "sparse_categorical_crossentropy",
 "optimizer": {"type": "adam"}, "metrics": ["accuracy"], "epochs": 1, "batch_size": 128, "seed": 1}
JSON
mb=$(du -m "$dir/data.csv" | cut -f1)
data_mb=$(/usr/bin/python3 -c "print(f'{$rows * 784 * 4 / 2**20:.1f}')")
# One run of `tensorctl train` with the extra flags and "data" keys given; prints its line.
measure() {
  local label="$1" flags="$2" data="$3"
  sed "s|\"label\": \"label\"}|\"label\": \"label\"$data}|" "$dir/c.json" >"$dir/m.json"
  rm -rf "$dir/run"
  local start end
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  /usr/bin/time -v "$build/tensorctl" train "$dir/m.json" --output "$dir/run" --quiet $flags 2>"$dir/time.txt" >/dev/null
  end=$(date +%s.%N)
  local rss_kb
  rss_kb=$(grep "Maximum resident" "$dir/time.txt" | awk '{print $NF}')
  /usr/bin/python3 - "$dir/run/summary.json" "$start" "$end" "$rss_kb" "$data_mb" "$mb" "$label" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
wall = float(sys.argv[3]) - float(sys.argv[2])
rss = int(sys.argv[4]) / 1024
data, mb = float(sys.argv[5]), float(sys.argv[6])
outside = wall - s['train_seconds']
print(f"{sys.argv[7]}: {wall:.2f} s, of which the epoch {s['train_seconds']:.2f} s "
      f"({s['samples_per_second']:,.0f} samples/s) and outside it {outside:.2f} s ({mb / outside:.0f} MB/s of CSV); "
      f"peak resident {rss:.0f} MiB = {rss / data:.2f}x the float32 data ({data:.1f} MiB); "
      f"input wait {s['input']['wait_share'] * 100:.1f}% of the epoch")
PY
}
measure "in memory, 2 data threads" "--data-threads 2" ""
measure "in memory, 1 data thread " "--data-threads 1" ""
measure "streamed, cache built    " "--data-threads 2" ', "stream": true, "cache": "cache"'
measure "streamed, cache reused   " "--data-threads 2" ', "stream": true, "cache": "cache"'
measure "streamed, 8 windows      " "--data-threads 2" ', "stream": true, "cache": "cache", "shuffle_buffer": 6784'
/usr/bin/python3 - "$dir/data.csv" "$mb" <<'PY'
import csv, sys, time
import numpy as np
path, mb = sys.argv[1], float(sys.argv[2])
t = time.perf_counter()
np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float32)
loadtxt = time.perf_counter() - t
t = time.perf_counter()
with open(path, newline="") as f:
    rows = csv.reader(f)
    next(rows)
    for row in rows:
        [float(v) for v in row]
module = time.perf_counter() - t
print(f"numpy loadtxt {loadtxt:.2f} s ({mb / loadtxt:.0f} MB/s); Python csv module and float() {module:.2f} s "
      f"({mb / module:.0f} MB/s)")
PY
