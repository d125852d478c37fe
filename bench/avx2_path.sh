#!/usr/bin/env bash
# tensorctl against PyTorch on the AVX2 path, measured on a processor that has AVX-512: tensorctl built with
# -DTENSORCTL_AS_AVX2=ON (AVX2 and FMA code, and the products chosen as on a processor without AVX-512),
# PyTorch with ATEN_CPU_CAPABILITY=avx2, OpenBLAS on its Haswell kernels for both. The build machines change
# processor from session to session; this keeps the AVX2 figures of issue 48's sequence workloads measurable
# on any of them (bench/README.md, "The AVX2 path on an AVX-512 machine"). Still a Zen 5 core, not a Zen 3
# one: its caches, clock and latencies are its own, so the figures are the AVX2 code's, not Zen 3's.
#
# Usage: bench/avx2_path.sh
# Environment: BUILD_DIR (default build-avx2), and WORKLOADS, THREADS, ROUNDS, PYTHON as bench/compare_pytorch.sh
# takes them (WORKLOADS defaults to the sequence ones here).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build-avx2}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTENSORCTL_AS_AVX2=ON -DTENSORCTL_TESTS=OFF \
  -DTENSORCTL_CUDA=OFF -DTENSORCTL_MPI=OFF >/dev/null
echo "building bench_workloads and bench_sgemm_limit in $build (a few minutes the first time)..." >&2
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target bench_workloads bench_sgemm_limit >"$build/avx2_build.log" 2>&1 || {
  echo "avx2_path.sh: the build failed; see $build/avx2_build.log" >&2
  exit 1
}

export ATEN_CPU_CAPABILITY=avx2 OPENBLAS_CORETYPE=Haswell
export LIBTORCH="${LIBTORCH:-0}" BUILD_DIR="$build" WORKLOADS="${WORKLOADS:-lstm_text_b64 lstm_infer_b1 transformer_text_b32}"
echo "one core's multiply-add peak at AVX2's 8 floats (bench_sgemm_limit --fma-peak):"
"$build/bench/bench_sgemm_limit" --fma-peak
"$root/bench/compare_pytorch.sh"
