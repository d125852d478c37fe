#!/usr/bin/env bash
# Data-parallel training of the MLP 784-512-512-10 at global batch 256 (Adam), tensorctl against PyTorch on
# this machine, alternating: one process (all cores to one replica), 2 replicas in one process
# (tensorctl's mirrored strategy), and 2 processes (tensorctl's multi-worker over Open MPI under mpirun;
# PyTorch's DistributedDataParallel over Gloo). Then the all-reduce of the MLP's gradients (2,672,680
# bytes) alone: MPI_Allreduce, tensorctl's MPI all-reduce, Gloo's. See bench/README.md.
#
# Usage: bench/compare_data_parallel.sh
# Environment:
#   BUILD_DIR  tensorctl's build directory (default build); it must hold bench/bench_data_parallel
#   ROUNDS     how many times every process is run, interleaved (default 3); a figure is the median over
#              the rounds of each process's own median
#   PYTHON     the Python that has Debian's torch (default /usr/bin/python3)
# The per-replica thread count is the machine's cores divided by the replicas. PyTorch's one-process figure
# is the best of its (torch threads x OpenBLAS threads) settings up to the cores.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
rounds="${ROUNDS:-3}"
python="${PYTHON:-/usr/bin/python3}"
bin="$build/bench/bench_data_parallel"
[ -x "$bin" ] || { echo "compare_data_parallel.sh: $bin is missing; build with scripts/build.sh" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "compare_data_parallel.sh: mpirun is missing (scripts/setup.sh)" >&2; exit 1; }
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "installing python3-torch with apt-get (a large download)..." >&2
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-torch >/dev/null
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores="$(nproc)"
half=$(( cores / 2 > 0 ? cores / 2 : 1 ))
results="$(mktemp)"
trap 'rm -f "$results"' EXIT

run() {  # label, command...
  local label="$1"; shift
  local line
  line="$("$@" 2>/dev/null | tail -n 1)" || { echo "compare_data_parallel.sh: $label failed" >&2; return; }
  echo "{\"label\": \"$label\", \"result\": $line}" >>"$results"
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $cores cores; $rounds rounds" >&2
for ((r = 1; r <= rounds; r++)); do
  echo "round $r/$rounds..." >&2
  run "tensorctl 1 process" "$bin" --replicas 1 --threads "$cores"
  run "tensorctl mirrored 2" "$bin" --replicas 2 --threads "$half"
  run "tensorctl mpirun 2" mpirun --oversubscribe -np 2 "$bin" --workers --threads "$half"
  for t in $(seq 1 "$cores"); do
    for b in $(seq 1 "$cores"); do
      [ "$t" -eq "$cores" ] || [ "$b" -eq "$cores" ] || continue
      run "pytorch 1 process" env OPENBLAS_NUM_THREADS="$b" "$python" "$root/bench/pytorch_ddp.py" --world 1 --threads "$t"
    done
  done
  run "pytorch ddp 2" env OPENBLAS_NUM_THREADS="$half" "$python" "$root/bench/pytorch_ddp.py" --world 2 --threads "$half"
  run "allreduce mpi+tensorctl" mpirun --oversubscribe -np 2 "$bin" --allreduce 2672680
  run "allreduce gloo" env OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_ddp.py" --world 2 --allreduce 2672680
done

"$python" - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(label, key):
    v = [r["result"][key] for r in rows if r["label"] == label]
    return statistics.median(v) if v else float("nan")
# PyTorch's one process: per round, the best setting; then the median over rounds.
torch_single = []
per_round = len([r for r in rows if r["label"] == "tensorctl 1 process"])
vals = [r["result"]["step_ms"] for r in rows if r["label"] == "pytorch 1 process"]
k = len(vals) // max(per_round, 1)
for i in range(per_round):
    torch_single.append(min(vals[i * k:(i + 1) * k]))
step = {
    "tensorctl 1 process": med("tensorctl 1 process", "step_ms"),
    "tensorctl mirrored 2": med("tensorctl mirrored 2", "step_ms"),
    "tensorctl mpirun 2": med("tensorctl mpirun 2", "step_ms"),
    "pytorch 1 process": statistics.median(torch_single),
    "pytorch ddp 2": med("pytorch ddp 2", "step_ms"),
}
print("MLP 784-512-512-10, Adam, global batch 256: ms per step (median), samples/s")
for label, ms in step.items():
    extra = ""
    if label.startswith("tensorctl") and label != "tensorctl 1 process":
        extra = "  all-reduce %.3f ms/step (%.0f%%)" % (med(label, "allreduce_ms"), 100 * med(label, "allreduce_ms") / ms)
    print("  %-22s %8.3f ms  %9.0f samples/s%s" % (label, ms, 256 / ms * 1e3, extra))
print("scaling 1 -> 2 replicas (throughput ratio): tensorctl mirrored %.2f, tensorctl mpirun %.2f, pytorch ddp %.2f"
      % (step["tensorctl 1 process"] / step["tensorctl mirrored 2"], step["tensorctl 1 process"] / step["tensorctl mpirun 2"],
         step["pytorch 1 process"] / step["pytorch ddp 2"]))
print("tensorctl vs pytorch (throughput ratio): 1 process %.2fx, 2 processes (mpirun vs ddp) %.2fx, mirrored vs ddp %.2fx"
      % (step["pytorch 1 process"] / step["tensorctl 1 process"], step["pytorch ddp 2"] / step["tensorctl mpirun 2"],
         step["pytorch ddp 2"] / step["tensorctl mirrored 2"]))
mpi_us, tc_us, gloo_us = med("allreduce mpi+tensorctl", "mpi_us"), med("allreduce mpi+tensorctl", "tensorctl_us"), med("allreduce gloo", "gloo_us")
print("all-reduce of 2,672,680 bytes on 2 ranks (median us, bus GB/s): MPI_Allreduce %.0f (%.2f), tensorctl over MPI %.0f (%.2f), Gloo %.0f (%.2f)"
      % (mpi_us, 2672680 / mpi_us / 1e3, tc_us, 2672680 / tc_us / 1e3, gloo_us, 2672680 / gloo_us / 1e3))
EOF
