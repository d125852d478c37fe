#!/usr/bin/env bash
# Streaming beyond CSV (models/data/row_cache.h's sources): one-epoch `tensorctl train` runs, in memory and
# streamed (cache built, cache reused, in windows), timed with their peak resident memory (/usr/bin/time -v)
# and the share of the epoch the loop waited for its batches:
#   arrays  an MNIST-shaped uint8 .npy file [ROWS, 28, 28] and IDX labels, generated here and not kept;
#           Dense(256) -> Dense(10) at batch 128
#   images  configs/digit_images_cnn.json (scripts/make_digit_images.py writes its PNG files), 3 epochs
#   texts   configs/fortunes_lstm.json, 3 epochs
#   bench/stream_sources.sh [BUILD_DIR [ROWS]]   default build, 60000
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ -d "$root/configs/data/digit_images" ] || /usr/bin/python3 "$root/scripts/make_digit_images.py" >/dev/null
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
build="${1:-$root/build}"
rows="${2:-60000}"
/usr/bin/python3 - "$rows" "$dir" <<'PY'
import sys
import numpy as np
rows, out = int(sys.argv[1]), sys.argv[2]
rng = np.random.default_rng(0)
x = (rng.integers(0, 256, (rows, 28, 28)) * (rng.random((rows, 28, 28)) < 0.2)).astype(np.uint8)
np.save(out + "/x.npy", x)
y = rng.integers(0, 10, rows).astype(np.uint8)
with open(out + "/y.idx1", "wb") as f:
    f.write(bytes([0, 0, 8, 1]) + rows.to_bytes(4, "big") + y.tobytes())
PY
cat >"$dir/arrays.json" <<JSON
{"model": {"input_shape": [784], "layers": [{"type": "Dense", "units": 256, "activation": "relu"},
                                            {"type": "Dense", "units": 10, "activation": "softmax"}]},
 "data": {"x": "x.npy", "y": "y.idx1"}, "loss": "sparse_categorical_crossentropy",
 "optimizer": {"type": "adam"}, "metrics": ["accuracy"], "epochs": 1, "batch_size": 128, "seed": 1}
JSON
/usr/bin/python3 - "$build/tensorctl" "$dir" "$root" "$rows" <<'PY'
import json, os, subprocess, sys, time
tensorctl, dir, root, rows = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

def config(path, data_keys, epochs=None):
    c = json.load(open(path))
    base = os.path.dirname(os.path.abspath(path))
    if isinstance(c["model"], str):
        c["model"] = os.path.join(base, c["model"])
    for key in ("csv", "x", "y"):
        if key in c["data"]:
            c["data"][key] = os.path.join(base, c["data"][key])
    if "images" in c["data"]:
        c["data"]["images"]["directory"] = os.path.join(base, c["data"]["images"]["directory"])
    c["data"].update(data_keys)
    if epochs:
        c["epochs"] = epochs
    out = os.path.join(dir, "m.json")
    json.dump(c, open(out, "w"))
    return out

def measure(label, path, data_keys, epochs=None, data_mb=None):
    run = os.path.join(dir, "run")
    subprocess.run(["rm", "-rf", run], check=True)
    cfg = config(path, data_keys, epochs)
    start = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", tensorctl, "train", cfg, "--output", run, "--quiet"],
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    if r.returncode != 0:
        sys.exit(r.stderr)
    rss = next(int(l.split()[-1]) for l in r.stderr.splitlines() if "Maximum resident" in l) / 1024
    s = json.load(open(os.path.join(run, "summary.json")))
    i = s["input"]
    extra = f" = {rss / data_mb:.2f}x the float32 data" if data_mb else ""
    print(f"{label}: outside the epochs {wall - s['train_seconds']:.2f} s, {s['samples_per_second']:,.0f} samples/s, "
          f"input wait {i['wait_share'] * 100:.2f}% of the epochs, peak resident {rss:.0f} MiB{extra}, "
          f"{i['mode']}" + (f", {i['windows']} windows" if i["mode"] == "stream" else ""))

cache = {"stream": True, "cache": os.path.join(dir, "cache")}
data_mb = rows * 784 * 4 / 2**20
print(f"arrays: {rows} x 28 x 28 uint8 .npy ({os.path.getsize(dir + '/x.npy') / 2**20:.0f} MiB), {data_mb:.0f} MiB as float32")
arrays = os.path.join(dir, "arrays.json")
measure("  in memory            ", arrays, {"stream": False}, data_mb=data_mb)
measure("  streamed, cache built", arrays, cache, data_mb=data_mb)
measure("  streamed, reused     ", arrays, cache, data_mb=data_mb)
measure("  windows of 6,784 rows", arrays, dict(cache, shuffle_buffer=6784), data_mb=data_mb)
print("images: configs/digit_images_cnn.json, 3 epochs")
images = os.path.join(root, "configs/digit_images_cnn.json")
subprocess.run(["rm", "-rf", os.path.join(dir, "cache")], check=True)
measure("  in memory            ", images, {"stream": False}, 3)
measure("  streamed, cache built", images, cache, 3)
measure("  windows of 320 rows  ", images, dict(cache, shuffle_buffer=320), 3)
print("texts: configs/fortunes_lstm.json, 3 epochs")
texts = os.path.join(root, "configs/fortunes_lstm.json")
measure("  in memory            ", texts, {"stream": False}, 3)
measure("  streamed, cache built", texts, cache, 3)
measure("  windows of 480 rows  ", texts, dict(cache, shuffle_buffer=480), 3)
PY
