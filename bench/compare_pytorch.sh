#!/usr/bin/env bash
# Training and inference speed of tensorctl against PyTorch (Python, eager) and libtorch (C++) on the same
# workloads: same models, batch shapes, Adam (lr 1e-3, eps 1e-7) and thread counts. See bench/README.md.
#
# Usage: bench/compare_pytorch.sh
# Environment:
#   BUILD_DIR  tensorctl's build directory, relative to the repository root or absolute (default build);
#              it must hold bench/bench_workloads (scripts/build.sh builds it). libtorch_workloads is
#              compiled into $BUILD_DIR/compare_pytorch/, where the raw results (results.jsonl) also go.
#   WORKLOADS  space-separated subset (default: all six)
#   THREADS    space-separated thread counts (default "1 2")
#   ROUNDS     how many times every process is run, interleaved (default 3); a setting's value is the
#              median over the rounds of each process's own median of 5 repetitions
#   PYTHON     the Python that has Debian's torch (default /usr/bin/python3)
#   JOB_TIMEOUT  seconds after which one process is stopped and counted as failed (default 600)
#   LIBTORCH   0 leaves libtorch out (its harness has only the first six workloads; default 1)
#
# PyTorch and libtorch get the best of a grid of (torch threads x OpenBLAS threads) settings per thread
# count T: (1,1) for T=1; (1,2), (2,1), (2,2) for T=2 (generally every pair with both factors <= T). Each
# setting runs in its own process, OPENBLAS_NUM_THREADS being read when OpenBLAS loads.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
workloads="${WORKLOADS:-mlp_digits_b32 mlp_digits_b256 mlp784_b128 cnn_digits_b64 cnn32_b64 infer_b1}"
threads="${THREADS:-1 2}"
rounds="${ROUNDS:-3}"
python="${PYTHON:-/usr/bin/python3}"
job_timeout="${JOB_TIMEOUT:-600}"

tc_bin="$build/bench/bench_workloads"
if [ ! -x "$tc_bin" ]; then
  echo "compare_pytorch.sh: $tc_bin is missing; build tensorctl first with scripts/build.sh" \
       "(or point BUILD_DIR at a build directory that has it)" >&2
  exit 1
fi

# --- PyTorch and libtorch from Debian, installed if missing ---------------------------------------------
if ! "$python" -c 'import torch' 2>/dev/null || ! dpkg -s libtorch-dev >/dev/null 2>&1; then
  echo "installing python3-torch and libtorch-dev with apt-get (a large download)..." >&2
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    python3-torch libtorch-dev >/dev/null
fi
if ! "$python" -c 'import torch' 2>/dev/null; then
  echo "compare_pytorch.sh: $python cannot import torch (Debian's python3-torch is for /usr/bin/python3;" \
       "set PYTHON)" >&2
  exit 1
fi

out_dir="$build/compare_pytorch"
mkdir -p "$out_dir"
results="$out_dir/results.jsonl"
errlog="$out_dir/errors.log"
: >"$results"
: >"$errlog"

# --- libtorch_workloads, compiled against libtorch-dev (n/a in the table if that fails) -----------------
lt_src="$root/bench/libtorch_workloads.cpp"
lt_bin="$out_dir/libtorch_workloads"
have_lt="${LIBTORCH:-1}"
if [ "$have_lt" -eq 1 ] && { [ ! -x "$lt_bin" ] || [ "$lt_src" -nt "$lt_bin" ]; }; then
  echo "compiling $lt_bin (about half a minute)..." >&2
  if ! g++ -O2 -std=c++17 -w -I/usr/include/torch/csrc/api/include "$lt_src" -o "$lt_bin" \
       -ltorch -ltorch_cpu -lc10 >"$out_dir/libtorch_build.log" 2>&1; then
    echo "compare_pytorch.sh: libtorch_workloads did not build (see $out_dir/libtorch_build.log);" \
         "the libtorch column will be n/a" >&2
    rm -f "$lt_bin"
    have_lt=0
  fi
fi

# --- the runs ---------------------------------------------------------------------------------------------
# One job is "tc", "py A B" or "lt A B" (A torch/ATen threads, B OpenBLAS threads). Every round runs every
# job of every workload and thread count once, the order of the jobs rotated from round to round.
run_job() {  # run_job ROUND WORKLOAD T JOB...
  local round="$1" w="$2" t="$3" impl="$4" a="${5:-}" b="${6:-}" line rc=0
  case "$impl" in
    tc) line="$(timeout "$job_timeout" "$tc_bin" --workload "$w" --threads "$t" 2>>"$errlog")" || rc=$? ;;
    py) line="$(OPENBLAS_NUM_THREADS="$b" timeout "$job_timeout" "$python" "$root/bench/pytorch_workloads.py" \
                 --workload "$w" --threads "$a" 2>>"$errlog")" || rc=$? ;;
    lt) line="$(OPENBLAS_NUM_THREADS="$b" timeout "$job_timeout" "$lt_bin" --workload "$w" --threads "$a" 2>>"$errlog")" || rc=$? ;;
  esac
  line="$(printf '%s\n' "$line" | grep '^{' | tail -n 1 || true)"
  if [ "$rc" -ne 0 ] || [ -z "$line" ]; then
    echo "  $impl $a $b failed (exit $rc); see $errlog" >&2
    line="{\"failed\": true}"
  fi
  printf '{"round": %d, "impl": "%s", "T": %d, "wl": "%s", "job": "%s", "out": %s}\n' \
    "$round" "$impl" "$t" "$w" "$impl${a:+ $a $b}" "$line" >>"$results"
}

start=$(date +%s)
for round in $(seq 1 "$rounds"); do
  for w in $workloads; do
    for t in $threads; do
      jobs=("tc")
      for a in $(seq 1 "$t"); do
        for b in $(seq 1 "$t"); do
          [ "$a" -eq "$t" ] || [ "$b" -eq "$t" ] || continue  # pairs new at T; smaller ones belong to T-1
          jobs+=("py $a $b")
          [ "$have_lt" -eq 0 ] || jobs+=("lt $a $b")
        done
      done
      n=${#jobs[@]}
      echo "round $round/$rounds: $w, T=$t ($n processes, $(( $(date +%s) - start )) s so far)" >&2
      for i in $(seq 0 $((n - 1))); do
        # shellcheck disable=SC2086
        run_job "$round" "$w" "$t" ${jobs[$(( (i + round - 1) % n ))]}
      done
    done
  done
done
echo "done in $(( $(date +%s) - start )) s; raw results in $results" >&2

# --- the table --------------------------------------------------------------------------------------------
"$python" - "$results" "$have_lt" <<'PY'
import collections, json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
have_lt = sys.argv[2] == "1"
# (workload, T, impl) -> setting -> per-round values
vals = collections.defaultdict(lambda: collections.defaultdict(list))
units, order = {}, []
for r in rows:
    key = (r["wl"], r["T"])
    if key not in order:
        order.append(key)
    o = r["out"]
    if o.get("failed"):
        continue
    units[r["wl"]] = o["unit"]
    setting = o.get("setting", "")
    if r["impl"] != "tc":  # the winning variant (foreach, jit.trace) may change between rounds
        setting = r["job"]
    vals[key + (r["impl"],)][setting].append(o["value"])

def best(key):
    """(value, setting, rounds) of the best setting, or None."""
    per = vals.get(key)
    if not per:
        return None
    lower_better = units.get(key[0]) == "us/call"
    meds = {s: statistics.median(v) for s, v in per.items()}
    s = (min if lower_better else max)(meds, key=meds.get)
    return meds[s], s, per[s]

def variant_note(key, job):
    """Which variant (Adam foreach or not, eager or jit.trace) won most rounds of a PyTorch job."""
    names = [r["out"]["setting"].split(", ", 1)[1] for r in rows
             if (r["wl"], r["T"], r["impl"]) == key and r["job"] == job and not r["out"].get("failed")
             and ", " in r["out"].get("setting", "")]
    if not names:
        return ""
    c = collections.Counter(names).most_common()
    return ", " + "/".join(f"{n}" + (f" {k}x" if len(c) > 1 else "") for n, k in c)

def fmt(x):
    return "fail" if x is None else (f"{x:,.0f}" if x >= 1000 else f"{x:.3g}" if x < 100 else f"{x:.1f}")

def ratio(tc, other, unit):
    if tc is None or other is None:
        return "-"
    return f"{(other / tc if unit == 'us/call' else tc / other):.2f}"

head = ["workload", "T", "unit", "tensorctl", "PyTorch", "libtorch", "tctl/PyTorch", "tctl/libtorch",
        "PyTorch setting", "libtorch setting", "tensorctl setting"]

def setting(key, b):
    """How a PyTorch/libtorch job is labelled: its thread setting, plus for PyTorch the variant that won."""
    if b is None:
        return "-"
    impl, a, c = b[1].split()
    if impl == "lt":
        return f"at {a} x openblas {c}"
    return f"torch {a} x openblas {c}" + variant_note(key, b[1])

table = []
for wl, t in order:
    unit = units.get(wl, "?")
    tc, py, lt = (best((wl, t, i)) for i in ("tc", "py", "lt"))
    v = lambda b: None if b is None else b[0]
    table.append([wl, str(t), unit, fmt(v(tc)), fmt(v(py)), fmt(v(lt)) if have_lt else "n/a",
                  ratio(v(tc), v(py), unit), ratio(v(tc), v(lt), unit) if have_lt else "n/a",
                  setting((wl, t, "py"), py), setting((wl, t, "lt"), lt) if have_lt else "n/a",
                  tc[1] if tc else "-"])
widths = [max(len(r[i]) for r in table + [head]) for i in range(len(head))]
line = lambda r: "| " + " | ".join(c.ljust(widths[i]) for i, c in enumerate(r)) + " |"
print(line(head))
print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
for r in table:
    print(line(r))
print()
print("Values: samples/s of training (higher is better), or us per call for infer_b1 (lower is better).")
print("Ratios are speed ratios, > 1 means tensorctl is faster (for infer_b1: PyTorch us / tensorctl us).")
print("PyTorch and libtorch: the best (torch threads x OpenBLAS threads) setting for that T, each setting's")
print("value being the median over rounds of its per-process median of 5 repetitions.")

# The MLPs' sgemm limit, measured by bench_workloads in its own process after each repetition.
limits = collections.defaultdict(list)
for r in rows:
    o = r["out"]
    if r["impl"] == "tc" and not o.get("failed") and "of_limit" in o:
        limits[(r["wl"], r["T"])].append((o["of_limit"], o["limit"]))
if limits:
    print()
    print("tensorctl against the sgemm limit of its step (OpenBLAS alone on the step's GEMMs, T threads, measured")
    print("in the same process after each repetition; median over rounds of each process's median ratio):")
    for (wl, t), vals in limits.items():
        ratio = statistics.median(v[0] for v in vals)
        limit = statistics.median(v[1] for v in vals)
        print(f"  {wl} T={t}: {ratio:.0%} of the limit ({limit:,.0f} samples/s)")
PY
