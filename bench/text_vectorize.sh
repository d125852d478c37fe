#!/usr/bin/env bash
# Text vectorization, rows per second on one thread: tensorctl's (bench_text_vectorize) against the Python
# reference (tests/onnx/text_vectorize.py: str.translate and str.split, a dict lookup per token) on the same
# rows, the same standardization, split, vocabulary size (20,000) and length (64).
#   bench/text_vectorize.sh [BUILD_DIR [CSV [COLUMN]]]   default build, configs/data/fortunes.csv, "text"
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
csv="${2:-$root/configs/data/fortunes.csv}"
column="${3:-text}"
"$build/bench/bench_text_vectorize" "$csv" "$column"
/usr/bin/python3 "$root/tests/onnx/text_vectorize.py" bench "$csv" "$column"
