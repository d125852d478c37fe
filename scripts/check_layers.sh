#!/usr/bin/env bash
# Checks the direction of #includes between tensorctl's folders (docs/architecture.md, "Layout"): each folder
# may include only the folders listed for it, and no backend's folder under kernels/ another's. Prints every
# include that breaks the rule and exits 1 if there is one.
# Run by ctest (the `layering` test) from any directory.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# The run loader (models/run) reads what training wrote and never trains: it runs the network's inference
# graph (models/infer) and reads the run's record (models/record), and includes nothing of models/train (the
# Model, the fit loop, the callbacks, the optimizers); tests/link/run_alone.cpp links it without them.
# predict and evaluate use the loader alone.
# folder (or file): the folders, or single files, its files may include (besides itself)
allowed() {
  case "$1" in
    core) echo "core" ;;
    kernels) echo "core kernels" ;;
    models/io) echo "core models/io" ;;
    models/data) echo "core models/data" ;;
    models/nn) echo "core models/io models/nn" ;;
    models/infer) echo "core models/io models/data models/nn models/infer" ;;
    models/record) echo "core models/io models/data models/nn models/infer models/record" ;;
    models/train) echo "core models/io models/data models/nn models/infer models/record models/train" ;;
    models/run) echo "core models/io models/data models/nn models/infer models/record models/run" ;;
    app) echo "core models app" ;;
    app/predict.cpp | app/evaluate.cpp) echo "core app models/io models/data models/infer models/record models/run" ;;
  esac
}

bad=0
for folder in core kernels models/io models/data models/nn models/infer models/record models/train models/run app app/predict.cpp app/evaluate.cpp; do
  ok="$(allowed "$folder")"
  while IFS= read -r line; do
    file="${line%%:*}"
    target="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")"
    fine=0
    for prefix in $ok; do
      case "$target" in "$prefix" | "$prefix"/*) fine=1 ;; esac
    done
    if [ "$fine" = 0 ]; then
      echo "$file includes $target, outside what $folder may include ($ok)"
      bad=1
    fi
  done < <(grep -rHE '^#include "[^"]+"' --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' "$folder")
done
# Each backend's folder (kernels/cpu, kernels/cuda, kernels/sim) includes no other backend's files: a backend
# is added or dropped as one folder, and the CPU kernels build where nvcc is absent.
while IFS= read -r line; do
  file="${line%%:*}"
  own="$(cut -d/ -f2 <<<"$file")"
  target="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")"
  case "$target" in
    kernels/"$own"/*) ;;
    kernels/*/*)
      echo "$file includes $target, another backend's file (kernels/$own may include only its own folder)"
      bad=1
      ;;
  esac
done < <(grep -rHE '^#include "kernels/[^"]+"' --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' kernels/*/)
# models/ holds nothing but its parts.
stray="$(find models -maxdepth 1 -type f \( -name '*.h' -o -name '*.cpp' \))"
if [ -n "$stray" ]; then
  echo "files directly in models/ (put them in io, data, nn, infer, record, train or run): $stray"
  bad=1
fi
[ "$bad" = 0 ] && echo "layering: every include goes the allowed way"
exit "$bad"
