#!/usr/bin/env bash
# mixed_bfloat16 on the CPU (kernels/cpu/bf16_product.h): tensorctl's training step with bfloat16 dense
# products against its own float32 step and against PyTorch's bfloat16 autocast on the CPU (Debian's
# python3-torch), same workloads, batches, Adam and thread counts. Meaningful on a processor with AVX-512
# BF16 (lscpu's avx512_bf16; a mixed_bfloat16 run says so in its first line); elsewhere tensorctl's
# mixed_bfloat16 computes float32, and the script says so. See bench/README.md, "bfloat16 products on the CPU".
#
# Usage: bench/cpu_bf16.sh
# Environment:
#   BUILD_DIR  tensorctl's build directory holding bench/bench_workloads (default build)
#   WORKLOADS  space-separated (default "mlp784_b128 mlp2048_b1024 transformer_text_b32")
#   THREADS    space-separated thread counts (default "1 2")
#   ROUNDS     rounds, interleaved; a value is the median over the rounds (default 3)
#   PYTHON     the Python that has Debian's torch (default /usr/bin/python3)
#   RESULTS    a file to append the raw JSON lines to and summarize with what it held (default a temporary
#              one): rounds run apart add up
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build}"
[[ "$build" = /* ]] || build="$root/$build"
bench="$build/bench/bench_workloads"
python="${PYTHON:-/usr/bin/python3}"
workloads="${WORKLOADS:-mlp784_b128 mlp2048_b1024 transformer_text_b32}"
threads="${THREADS:-1 2}"
rounds="${ROUNDS:-3}"
[ -x "$bench" ] || { echo "cpu_bf16.sh: $bench is missing (build with -DTENSORCTL_BENCH=ON)" >&2; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { echo "cpu_bf16.sh: $python cannot import torch (apt-get install python3-torch)" >&2; exit 1; }
grep -q avx512_bf16 /proc/cpuinfo || echo "cpu_bf16.sh: this processor has no AVX-512 BF16: tensorctl's mixed_bfloat16 runs float32" >&2

if [ -n "${RESULTS:-}" ]; then
  results="$RESULTS"
else
  results="$(mktemp)"
  trap 'rm -f "$results"' EXIT
fi
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}"
"$build/bench/bench_bf16_products"
for ((r = 1; r <= rounds; r++)); do
  for w in $workloads; do
    for t in $threads; do
      for p in float32 mixed_bfloat16; do
        "$bench" --workload "$w" --threads "$t" --precision "$p" | sed "s/^{/{\"impl\": \"tensorctl\", /" >>"$results"
      done
      for p in float32 bfloat16; do
        OPENBLAS_NUM_THREADS=1 "$python" "$root/bench/pytorch_workloads.py" --workload "$w" --threads "$t" \
          --precision "$p" | sed "s/^{/{\"impl\": \"pytorch\", /" >>"$results"
      done
    done
  done
done

"$python" - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
def value(impl, w, t, p):
    v = [r["value"] for r in rows if r["impl"] == impl and r["workload"] == w and r["threads"] == t and r["precision"] == p]
    return statistics.median(v) if v else float("nan")
print(f"{'workload':22} {'T':>2} {'tctl f32':>10} {'tctl bf16':>10} {'torch f32':>10} {'torch bf16':>10} {'bf16/f32':>8} {'vs torch bf16':>13}")
seen = []
for r in rows:
    key = (r["workload"], r["threads"])
    if key in seen:
        continue
    seen.append(key)
    w, t = key
    tf, tb = value("tensorctl", w, t, "float32"), value("tensorctl", w, t, "mixed_bfloat16")
    pf, pb = value("pytorch", w, t, "float32"), value("pytorch", w, t, "bfloat16")
    print(f"{w:22} {t:>2} {tf:>10.0f} {tb:>10.0f} {pf:>10.0f} {pb:>10.0f} {tb / tf:>7.2f}x {tb / pb:>12.2f}x")
print("samples/s, medians of the rounds; bf16/f32: tensorctl mixed_bfloat16 over its float32; vs torch bf16: "
      "over PyTorch's bfloat16 autocast")
EOF
