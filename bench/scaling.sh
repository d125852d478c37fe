#!/usr/bin/env bash
# How cost grows with work (issue 19): training samples/s of tensorctl, PyTorch (Debian's, eager) and the
# sgemm limit (OpenBLAS alone doing the step's matrix products, measured in tensorctl's process) along two
# sweeps, printed as a table and drawn as a chart:
#   width  MLP 784-W-W-10 at batch 128, W = 64 ... 4096
#   batch  the digits MLP 64-128-64-10 at batch 1 ... 1024
# Each point runs bench_workloads and pytorch_workloads.py once per round (ROUNDS, default 1; the median is
# kept), at THREADS threads (default 1; PyTorch gets torch and OpenBLAS threads both at THREADS).
#
#   bench/scaling.sh                      the table, and the chart in bench/scaling.png
#   THREADS=2 ROUNDS=3 CHART=/tmp/s.png bench/scaling.sh
#
# BUILD_DIR (default build) must hold bench/bench_workloads (scripts/build.sh); the chart needs Debian's
# python3-matplotlib, and PyTorch Debian's python3-torch (bench/compare_pytorch.sh installs it).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
threads="${THREADS:-1}"
rounds="${ROUNDS:-1}"
chart="${CHART:-$root/bench/scaling.png}"
python=/usr/bin/python3
[ -x "$build/bench/bench_workloads" ] || { echo "scaling.sh: no $build/bench/bench_workloads; run scripts/build.sh" >&2; exit 2; }
"$python" -c "import torch, matplotlib" 2>/dev/null ||
  { echo "scaling.sh: $python needs torch and matplotlib (apt-get install python3-torch python3-matplotlib)" >&2; exit 2; }
results="$(mktemp)"
trap 'rm -f "$results"' EXIT

points=()
for w in 64 128 256 512 1024 2048 4096; do points+=("width $w mlp_784-$w-$w-10_b128"); done
for b in 1 2 4 8 16 32 64 128 256 512 1024; do points+=("batch $b mlp_64-128-64-10_b$b"); done
for ((r = 0; r < rounds; ++r)); do
  for p in "${points[@]}"; do
    read -r sweep x workload <<<"$p"
    echo "[round $((r + 1))/$rounds] $workload" >&2
    tc="$("$build/bench/bench_workloads" --workload "$workload" --threads "$threads")"
    py="$(OPENBLAS_NUM_THREADS="$threads" "$python" "$root/bench/pytorch_workloads.py" --workload "$workload" \
      --threads "$threads" --reps 3)"
    echo "{\"sweep\": \"$sweep\", \"x\": $x, \"tensorctl\": $tc, \"pytorch\": $py}" >>"$results"
  done
done

"$python" - "$results" "$chart" "$threads" <<'PY'
import json, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = [json.loads(line) for line in open(sys.argv[1])]
chart, threads = sys.argv[2], sys.argv[3]
series = {}
for r in rows:
    p = series.setdefault((r["sweep"], r["x"]), {"tc": [], "py": [], "limit": []})
    p["tc"].append(r["tensorctl"]["value"])
    p["py"].append(r["pytorch"]["value"])
    p["limit"].append(r["tensorctl"]["limit"])
print(f"| sweep | size | tensorctl samples/s | PyTorch samples/s | sgemm limit | tensorctl / PyTorch | tensorctl / limit |")
print("|---|---|---|---|---|---|---|")
fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
for ax, sweep, label in ((axes[0], "width", "hidden width W (MLP 784-W-W-10, batch 128)"),
                         (axes[1], "batch", "batch size (digits MLP 64-128-64-10)")):
    xs = sorted(x for s, x in series if s == sweep)
    med = {k: [statistics.median(series[(sweep, x)][k]) for x in xs] for k in ("tc", "py", "limit")}
    for x, tc, py, lim in zip(xs, med["tc"], med["py"], med["limit"]):
        print(f"| {sweep} | {x} | {tc:,.0f} | {py:,.0f} | {lim:,.0f} | {tc / py:.2f}x | {tc / lim:.0%} |")
    ax.plot(xs, med["limit"], "k--", label="sgemm limit (OpenBLAS alone)")
    ax.plot(xs, med["tc"], "o-", color="tab:blue", label="tensorctl")
    ax.plot(xs, med["py"], "s-", color="tab:orange", label="PyTorch (eager)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(label)
    ax.set_ylabel("training samples/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.suptitle(f"Training throughput as the work grows ({threads} thread{'s' if threads != '1' else ''})")
fig.tight_layout()
tmp = chart + ".tmp.png"
fig.savefig(tmp, dpi=90)
import os
os.replace(tmp, chart)
print(f"\nchart: {chart}")
PY
