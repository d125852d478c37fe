#!/usr/bin/env bash
# Training speed of tensorctl on cuda:0 against PyTorch (eager) on the same GPU, on the workloads of issue
# 16: the MLP 784-2048-2048-10 at batch 1024, the digits CNN at batch 512 and the digits MLP at batch 32
# (where launch overhead rules), and issue 48's LSTM and transformer text classifiers (PyTorch's LSTM is
# cuDNN's there). Same models, batches fed from host memory every step, Adam (lr 1e-3,
# eps 1e-7; PyTorch's best of its single-tensor, foreach and fused implementations), TF32 off on both.
# Also the GPU's own limits (bench_cuda_limits): the large MLP's products in cuBLAS alone, and copy
# bandwidth against cudaMemcpy from pinned memory. The MLPs and the CNN again with device graphs (each step
# replayed as CUDA graphs; TCTL_CUDA_GRAPHS=1 until the GPU check has shown replays train eager runs' weights).
# Runs on the GPU machine (scripts/gpu-check.sh bench).
#
# Environment: BUILD_DIR (default build-gpu; needs bench/bench_workloads and bench/bench_cuda_limits),
#   ROUNDS (default 3: the processes alternate, tensorctl then PyTorch, ROUNDS times), PYTHON (python3).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build-gpu}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
rounds="${ROUNDS:-3}"
python="${PYTHON:-python3}"
out="$build/compare_pytorch_gpu"
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

"$build/bench/bench_cuda_limits" | tee -a "$results"
for workload in mlp2048_b1024 cnn_digits_b512 mlp_digits_b32 lstm_text_b64 transformer_text_b32; do
  for ((r = 0; r < rounds; ++r)); do
    "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 | tee -a "$results"
    OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_workloads.py" --workload "$workload" --device cuda \
      | tee -a "$results"
  done
done
for workload in mlp_digits_b32 cnn_digits_b512 mlp2048_b1024; do
  for ((r = 0; r < rounds; ++r)); do
    TCTL_CUDA_GRAPHS=1 "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 \
      --device-graphs 1 | tee -a "$results"
  done
done

"$python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gemm = next((r for r in rows if r.get("limit") == "gemm"), None)
print("\n| workload | tensorctl cuda:0 | PyTorch cuda | ratio | note |")
print("|---|---|---|---|---|")
for w, graphs in (("mlp2048_b1024", False), ("cnn_digits_b512", False), ("mlp_digits_b32", False),
                  ("mlp2048_b1024", True), ("cnn_digits_b512", True), ("mlp_digits_b32", True)):
    tc = [r["value"] for r in rows
          if r.get("workload") == w and "torch" not in r and r.get("device_graphs", False) == graphs]
    pt = [r["value"] for r in rows if r.get("workload") == w and "torch" in r]
    name = w + (" (device graphs)" if graphs else "")
    if not tc or not pt:
        print(f"| {name} | missing | missing | | |")
        continue
    a, b = statistics.median(tc), statistics.median(pt)
    note = ""
    if w == "mlp2048_b1024" and gemm:
        note = f"{a / gemm['samples_per_s']:.0%} of cuBLAS alone ({gemm['samples_per_s']:,.0f} samples/s)"
    print(f"| {name} | {a:,.0f} samples/s | {b:,.0f} samples/s | {a / b:.2f}x | {note} |")
for r in rows:
    if r.get("limit") == "update":
        print(f"update phase, Adam over {r['variables']} variables ({r['parameters']:,} parameters): tensorctl"
              f" {r['tensorctl_ms']} ms, reference kernels {r['reference_ms']} ms, bandwidth bound {r['bound_ms']} ms")
for r in rows:
    if r.get("limit") == "copy":
        print(f"copy {r['bytes'] >> 20} MiB: tensorctl h2d {r['tensorctl_h2d_gbs']} GB/s, d2h {r['tensorctl_d2h_gbs']} GB/s;"
              f" cudaMemcpy pinned h2d {r['cudaMemcpy_pinned_h2d_gbs']} GB/s, d2h {r['cudaMemcpy_pinned_d2h_gbs']} GB/s")
PY
