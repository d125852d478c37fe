#!/usr/bin/env bash
# Training speed of tensorctl on cuda:0 against PyTorch (eager) on the same GPU, on the workloads of issue
# 16: the MLP 784-2048-2048-10 at batch 1024, the digits CNN at batch 512 and the digits MLP at batch 32
# (where launch overhead rules), and issue 48's LSTM and transformer text classifiers (PyTorch's LSTM is
# cuDNN's there). Same models, batches fed from host memory every step, Adam (lr 1e-3,
# eps 1e-7; PyTorch's best of its single-tensor, foreach and fused implementations), TF32 off on both.
# Also the GPU's own limits (bench_cuda_limits): the large MLP's products in cuBLAS alone, and copy
# bandwidth against cudaMemcpy from pinned memory. The MLPs and the CNN again with device graphs (each step
# replayed as CUDA graphs; TCTL_CUDA_GRAPHS=1 until the GPU check has shown replays train eager runs' weights),
# the digits MLP against PyTorch with CUDA graphs too, and the 784-2048-2048-10 MLP and the 32x32x3 CNN at
# batch 256 under mixed_bfloat16 against PyTorch's bfloat16 autocast (issue 51), and the CNNs with cuDNN's
# convolutions (TCTL_CUDA_CUDNN=1).
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
# Issue 51's rows first: under the lease's one round a stage may run out of time, and these are the ones
# not yet measured.
for workload in mlp_digits_b32 cnn_digits_b512 mlp2048_b1024; do
  for ((r = 0; r < rounds; ++r)); do
    TCTL_CUDA_GRAPHS=1 "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 \
      --device-graphs 1 | tee -a "$results"
  done
done
# PyTorch with CUDA graphs (make_graphed_callables) for the launch-bound digits MLP, and issue 51's
# mixed-precision rows: tensorctl under mixed_bfloat16 against PyTorch's bfloat16 autocast (channels_last
# for the CNN).
for ((r = 0; r < rounds; ++r)); do
  OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_workloads.py" --workload mlp_digits_b32 --device cuda \
    --graphed | tee -a "$results"
  for workload in mlp2048_b1024 cnn32_b256; do
    "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 \
      --precision mixed_bfloat16 | tee -a "$results"
    OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_workloads.py" --workload "$workload" --device cuda \
      --precision bfloat16 | tee -a "$results"
  done
  # The CNNs again with cuDNN's convolutions (TCTL_CUDA_CUDNN=1 until this check has compared them with the
  # own kernels): rows marked "cudnn".
  for run in "cnn32_b256 mixed_bfloat16" "cnn_digits_b512 float32"; do
    read -r workload precision <<<"$run"
    TCTL_CUDA_CUDNN=1 "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 \
      --precision "$precision" | sed 's/^{/{"cudnn": true, /' | tee -a "$results"
  done
done

for workload in mlp2048_b1024 cnn_digits_b512 mlp_digits_b32 lstm_text_b64 transformer_text_b32; do
  for ((r = 0; r < rounds; ++r)); do
    "$build/bench/bench_workloads" --workload "$workload" --threads 1 --device cuda:0 | tee -a "$results"
    OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_workloads.py" --workload "$workload" --device cuda \
      | tee -a "$results"
  done
done

"$python" - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
gemms = {r.get("precision", "float32"): r for r in rows if r.get("limit") == "gemm"}
print("\n| workload | tensorctl cuda:0 | PyTorch cuda | ratio | note |")
print("|---|---|---|---|---|")
# (workload, tensorctl's device graphs, precision (tensorctl's policy, PyTorch's autocast type), PyTorch graphed,
# tensorctl's convolutions by cuDNN)
table = [(w, False, "float32", False, False) for w in ("mlp2048_b1024", "cnn_digits_b512", "mlp_digits_b32")]
table += [(w, True, "float32", False, False) for w in ("mlp2048_b1024", "cnn_digits_b512")]
table += [("mlp_digits_b32", True, "float32", False, False), ("mlp_digits_b32", True, "float32", True, False)]
table += [("mlp2048_b1024", False, "bfloat16", False, False), ("cnn32_b256", False, "bfloat16", False, False)]
table += [("cnn32_b256", False, "bfloat16", False, True), ("cnn_digits_b512", False, "float32", False, True)]
policy = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
for w, graphs, precision, graphed, cudnn in table:
    tc = [r["value"] for r in rows
          if r.get("workload") == w and "torch" not in r and r.get("device_graphs", False) == graphs
          and r.get("precision", "float32") == policy[precision] and r.get("cudnn", False) == cudnn]
    pt = [r["value"] for r in rows
          if r.get("workload") == w and "torch" in r and r.get("precision", "float32") == precision
          and r.get("graphed", False) == graphed]
    name = w + (" (device graphs)" if graphs else "") + (f" {policy[precision]}" if precision != "float32" else "")
    if graphed:
        name += " vs PyTorch CUDA graphs"
    if cudnn:
        name += " (cuDNN)"
    if not tc or not pt:
        print(f"| {name} | missing | missing | | |")
        continue
    a, b = statistics.median(tc), statistics.median(pt)
    note = ""
    gemm = gemms.get(precision)
    if w == "mlp2048_b1024" and gemm:
        note = f"{a / gemm['samples_per_s']:.0%} of cuBLAS {precision} alone ({gemm['samples_per_s']:,.0f} samples/s)"
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
