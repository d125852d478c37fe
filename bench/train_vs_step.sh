#!/usr/bin/env bash
# What a user sees against what the step can do: `tensorctl train`'s own samples/s (summary.json, the epochs'
# time without validation) beside the unprofiled step time of `tensorctl profile` on the same config, its own
# data batches, batch size and threads. The two alternate, ROUNDS times per setting; each prints the median
# and the ratio train / step (issue 19's bar: at least 0.90).
#
#   bench/train_vs_step.sh                       digits MLP and digits CNN, 1 and 2 intra-op threads
#   CONFIGS="configs/digits_mlp.json" THREADS=1 ROUNDS=3 bench/train_vs_step.sh
#
# BUILD_DIR (default build) must hold tensorctl (scripts/build.sh). EPOCHS (default 100) sets the length of
# each training run; the step figure comes from 2000 profiled iterations.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${BUILD_DIR:-build}"
[[ "$build_dir" = /* ]] || build_dir="$root/$build_dir"
bin="$build_dir/tensorctl"
[ -x "$bin" ] || { echo "no $bin: run scripts/build.sh first" >&2; exit 2; }
configs="${CONFIGS:-configs/digits_mlp.json configs/digits_cnn.json}"
threads="${THREADS:-1 2}"
rounds="${ROUNDS:-5}"
epochs="${EPOCHS:-100}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
json_number() { /usr/bin/python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print($2)" "$1"; }

printf '%-26s %3s %12s %12s %7s\n' config T train step ratio
for config in $configs; do
  for t in $threads; do
    : >"$scratch/train" && : >"$scratch/step"
    for _ in $(seq "$rounds"); do
      (cd "$root" && "$bin" train "$config" --epochs "$epochs" --inter-op-threads 1 --intra-op-threads "$t" \
        --output "$scratch/run" --overwrite --quiet >/dev/null)
      json_number "$scratch/run/summary.json" 'd["samples_per_second"]' >>"$scratch/train"
      batch="$(json_number "$scratch/run/summary.json" 'd["config"]["batch_size"]')"
      (cd "$root" && "$bin" profile "$config" --batch-size "$batch" --iterations 2000 --warmup 100 \
        --inter-op-threads 1 --intra-op-threads "$t" --json >"$scratch/profile.json")
      json_number "$scratch/profile.json" 'd["runs"][0]["samples_per_second"]' >>"$scratch/step"
    done
    train="$(median <"$scratch/train")"
    step="$(median <"$scratch/step")"
    printf '%-26s %3s %12.0f %12.0f %7.2f\n' "$config" "$t" "$train" "$step" "$(echo "$train / $step" | bc -l)"
  done
done
echo "($rounds rounds, train $epochs epochs, step 2000 iterations; $(lscpu | sed -n 's/^Model name: *//p'))"
