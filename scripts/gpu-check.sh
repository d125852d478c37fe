#!/usr/bin/env bash
# The whole GPU check, for a machine with an NVIDIA GPU, nvcc and CMake but none of Debian's packages and no
# network (the `device` machine of the brief). Two halves:
#
#   scripts/gpu-check.sh pack   on the build machine: downloads the .deb files of the build's Debian
#                               dependencies (headers, OpenBLAS and its Fortran runtime, fmt, ONNX and
#                               protobuf) into gpu-deps/ (ignored by git, about 18 MB), builds the CUDA variant
#                               in build-gpu/ (Release, portable x86-64-v3 since the GPU machine's processor
#                               is another, and without MPI, which that machine lacks) and packs its binaries
#                               into gpu-deps/build-gpu-bin.tgz, all to travel with the tree. `pack --no-build`
#                               leaves the binaries out (the GPU machine then builds, which costs its time:
#                               minutes of a 15-minute lease). `pack --gpu-only` builds and packs only what
#                               every stage but `suites` runs (tensorctl, the two GPU suites, the two GPU
#                               benchmarks), leaving out the four other test suites.
#   scripts/gpu-check.sh [STAGE] on the GPU machine, from the repository root, gpu-deps/ beside it: unpacks
#                               them (python3 reads the .deb archives), then the stages, all of them by default
#                               or one (each needs the ones before it to have run on the same machine):
#                                 build     the carried binaries unpacked into build-gpu/ (or, without them,
#                                           TENSORCTL_CUDA=ON built there), `tensorctl devices`
#                                 test      the GPU suites (op tests on cuda:0, GPU training), in full,
#                                           and race-check --device cuda:0
#                                 cudnn     cuDNN's convolutions (TCTL_CUDA_CUDNN): the convolution op
#                                           tests, under memcheck too, and the CNN's GPU trainings
#                                 bench     bench/compare_pytorch_gpu.sh (PyTorch on the same GPU)
#                                 sanitize  compute-sanitizer memcheck and racecheck on the GPU op tests
#                                           (about 4 minutes each on an H100, under 1 on an H200;
#                                           TCTL_GPU_SANITIZE_FILES=*optimizers*, a
#                                           doctest file filter, narrows them to the ops a change touched)
#                                           and on the GPU suite's own-stream test
#                                 failures  a real device out of memory: another process holds all but
#                                           1.5 GiB of the GPU while tensorctl resumes, then starts, a
#                                           run whose weights and Adam's slots need 3 GiB there
#                                 profile   `tensorctl profile --ops` of the MLP 784-2048-2048-10 at batch
#                                           1024 and the digits MLP at batch 32, every layer on cuda:0
#                                 pipeline  `tensorctl train` of the MLP 784-2048-2048-10 at batch 1024 on
#                                           cuda:0 (16,384 synthetic rows), prefetch 0 against 2, and 2
#                                           on a copy stream: what moving the batches to the GPU on the
#                                           producer thread buys (the three must train the same weights)
#                                 suites    every other suite, side by side
#                               or `lease`: build, test, cudnn, sanitize, bench, pipeline and profile, each cut off
#                               at its share of about 9 minutes, which one call of the device tool can hold
#                               (set TCTL_GPU_SANITIZE_FILES to the op tests a change touched).
#                               Each step stops after TCTL_GPU_STEP_LIMIT seconds (240; the bench after
#                               TCTL_GPU_BENCH_LIMIT, 300): the device tool gives a command 10 minutes.
# Results go to stdout and, when $OUT is set (the device tool's folder), to $OUT/gpu-check-STAGE.log.
#
# From the build machine, with the device tool:  scripts/gpu-check.sh pack, then run
#   `bash scripts/gpu-check.sh` with carry ["gpu-deps"].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/gpu-deps"
packages=(libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 libopenblas-dev libopenblas0 libopenblas0-pthread
          libopenblas-pthread-dev libgfortran5 libquadmath0 doctest-dev libeigen3-dev libonnx-dev libonnx1 libonnxifi
          libprotobuf-dev libprotobuf32 libpng-dev libpng16-16 libjpeg62-turbo-dev libjpeg62-turbo libgif-dev libgif7 zlib1g-dev zlib1g libzip-dev libzip4 libssl3
          libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libaec0 libsz2)

build="$root/build-gpu"
if [ "${1:-}" = "pack" ]; then
  mkdir -p "$deps"
  rm -rf "$deps/root"
  (cd "$deps" && rm -f ./*.deb && apt-get download "${packages[@]}" 2>&1 | grep -v "unsandboxed" || true)
  ls "$deps"/*.deb >/dev/null
  rm -f "$deps/build-gpu-bin.tgz" "$deps/built-at"
  if [ "${2:-}" != "--no-build" ]; then
    [ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTENSORCTL_CUDA=ON \
      -DTENSORCTL_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DTENSORCTL_MPI=OFF >/dev/null
    targets=()
    [ "${2:-}" != "--gpu-only" ] || targets=(--target tensorctl kernels_tests gpu_tests bench_workloads bench_cuda_limits)
    cmake --build "$build" -j "$(nproc)" "${targets[@]}" >"$build/build.log" 2>&1 || {
      grep -E "error" "$build/build.log" | head -40
      exit 1
    }
    if [ "${2:-}" = "--gpu-only" ]; then
      tests=(tests/kernels_tests tests/gpu_tests)
    else
      tests=("$build"/tests/*_tests)
      tests=("${tests[@]#"$build/"}")  # the archive names them from build-gpu/
    fi
    (cd "$build" && tar czf "$deps/build-gpu-bin.tgz" tensorctl "${tests[@]}" bench/bench_workloads bench/bench_cuda_limits)
    echo "$root" >"$deps/built-at"  # the tests name the binary and the configs by this path
  fi
  echo "gpu-check: $(ls "$deps"/*.deb | wc -l) packages and $(ls "$deps"/*.tgz 2>/dev/null | wc -l) binary archive in gpu-deps/ ($(du -sh "$deps" | cut -f1))"
  exit 0
fi
stage="${1:-all}"
case "$stage" in all | lease | build | test | cudnn | bench | sanitize | failures | profile | pipeline | suites) ;; *)
  echo "usage: scripts/gpu-check.sh [pack [--no-build|--gpu-only]|lease|build|test|cudnn|bench|sanitize|failures|profile|pipeline|suites]" >&2
  exit 2
  ;;
esac
if [ "$stage" = lease ]; then
  # What one device call can hold (10 minutes, of a 15-minute lease with its start-up): the stages in the
  # order of what they prove, each with its share of 560 seconds (seconds, then the steps it runs, each given
  # an equal part as its TCTL_GPU_STEP_LIMIT), one round of the bench. A stage still running at the end of
  # its share is stopped, and whatever it started from build-gpu/ (a step's own `timeout` runs it in a
  # process group of its own) with it. Each stage's log is $OUT/gpu-check-STAGE.log; this prints a line a
  # stage, and a failed stage's last log line.
  [ -f "$deps/build-gpu-bin.tgz" ] || {
    echo "gpu-check lease: gpu-deps/build-gpu-bin.tgz is missing (run scripts/gpu-check.sh pack --gpu-only here)" >&2
    exit 2
  }
  export ROUNDS="${ROUNDS:-1}"
  lease_status=0
  for share in build:40:1 test:180:3 cudnn:75:3 sanitize:55:2 bench:140:1 pipeline:50:3 profile:20:2; do
    IFS=: read -r name seconds steps <<<"$share"
    start=$SECONDS
    rc=0
    TCTL_GPU_STEP_LIMIT=$((seconds / steps - 2)) TCTL_GPU_BENCH_LIMIT=$((seconds - 5)) \
      timeout --kill-after=5 "$seconds" bash "$0" "$name" >/dev/null 2>&1 || rc=$?
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
      pkill -KILL -f "$build/" 2>/dev/null || true
      pkill -KILL -f "pytorch_workloads.py" 2>/dev/null || true
    fi
    [ $rc -eq 0 ] || lease_status=1
    echo "gpu-check lease: $name exit $rc after $((SECONDS - start)) s$( ([ $rc -eq 124 ] || [ $rc -eq 137 ]) && echo " (its share ran out)")"
    [ $rc -eq 0 ] || echo "  last line: $(tail -1 "${OUT:-/tmp}/gpu-check-$name.log" 2>/dev/null)"
  done
  exit $lease_status
fi
runs() { [ "$stage" = all ] || [ "$stage" = "$1" ]; }
[ -d "$deps" ] || { echo "gpu-check: gpu-deps/ is missing; run scripts/gpu-check.sh pack on the build machine" >&2; exit 2; }

log="${OUT:-/tmp}/gpu-check-$stage.log"
exec > >(tee "$log") 2>&1

# --- the dependencies, unpacked without dpkg ------------------------------------------------------------
sysroot="$deps/root"
if [ ! -d "$sysroot/usr" ]; then
  python3 - "$deps" "$sysroot" <<'PY'
import io, lzma, os, sys, tarfile
deps, root = sys.argv[1], sys.argv[2]
for name in sorted(os.listdir(deps)):
    if not name.endswith(".deb"):
        continue
    data = open(os.path.join(deps, name), "rb").read()
    assert data[:8] == b"!<arch>\n", name
    pos = 8
    while pos < len(data):  # ar members: a 60-byte header, then the body, padded to an even length
        member, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58].decode())
        body = data[pos + 60:pos + 60 + size]
        if member.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                tar.extractall(root)
        pos += 60 + size + (size & 1)
PY
fi
arch_lib="$sysroot/usr/lib/x86_64-linux-gnu"
blas_lib="$arch_lib/openblas-pthread"
export LD_LIBRARY_PATH="$blas_lib:$arch_lib:${LD_LIBRARY_PATH:-}:$sysroot/lib/x86_64-linux-gnu"

# --- the build, or the carried binaries ------------------------------------------------------------------
if command -v nvidia-smi >/dev/null; then nvidia-smi -L || true; else echo "gpu-check: no nvidia-smi on this machine"; fi
jobs="$(nproc)"
status=0
# Runs a step under a time limit, so that one that hangs or crawls leaves time for the others.
step() {
  local limit="$1"
  shift
  timeout --signal=TERM --kill-after=10 "$limit" "$@" || {
    local rc=$?
    [ $rc -ne 124 ] || echo "gpu-check: stopped after ${limit}s: $*"
    return $rc
  }
}
carried=0
if [ -f "$deps/build-gpu-bin.tgz" ] && [ ! -f "$build/CMakeCache.txt" ]; then
  carried=1
  if runs build; then
    mkdir -p "$build"
    tar xzf "$deps/build-gpu-bin.tgz" -C "$build"
    # The tests find the binary and the configs by the path the build had; give that path to this tree.
    built_at="$(cat "$deps/built-at")"
    if [ "$built_at" != "$root" ] && [ ! -e "$built_at" ]; then
      mkdir -p "$(dirname "$built_at")" && ln -s "$root" "$built_at"
    fi
  fi
  # The CUDA libraries the binaries were linked against, from this machine's toolkit or its Python wheels, and
  # cuBLAS of the same major version, which tensorctl opens on first use (kernels/cuda/cublas_loader.cpp), so
  # ldd does not list it.
  cuda_major="$(ldd "$build/tensorctl" | sed -n 's/.*libcudart\.so\.\([0-9]*\).*/\1/p' | head -1)"
  needed="$(LD_LIBRARY_PATH="$LD_LIBRARY_PATH" ldd "$build/tensorctl" | awk '/not found/ {print $1}' | sort -u)"
  if [ -n "$cuda_major" ] && ! ldconfig -p 2>/dev/null | grep -q "libcublas\.so\.$cuda_major "; then
    needed="$needed libcublas.so.$cuda_major"
  fi
  # NCCL too, opened when a worker all-reduces on the GPU (kernels/cuda/nccl_loader.cpp; tests/gpu/nccl_test.cpp):
  # 218 MB, too large to carry, so this machine's own, from its toolkit or from PyTorch's wheels.
  ldconfig -p 2>/dev/null | grep -q "libnccl\.so\.2 " || needed="$needed libnccl.so.2"
  # cuDNN likewise, opened for convolutions with TCTL_CUDA_CUDNN=1 (kernels/cuda/cudnn_loader.cpp): its engines
  # (over 300 MB) are too large to carry.
  ldconfig -p 2>/dev/null | grep -q "libcudnn\.so\.9 " || needed="$needed libcudnn.so.9"
  for lib in $needed; do
    found="$(find /usr/local /usr/lib /opt -name "$lib" 2>/dev/null | head -1)"
    if [ -n "$found" ]; then
      export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$found")"
    else
      echo "gpu-check: $lib (needed by tensorctl) is not on this machine"
    fi
  done
elif { runs build || runs test; } && [ ! -f "$build/CMakeCache.txt" ]; then
  # jpeglib.h includes jconfig.h, which Debian keeps in the multiarch folder: both in one folder of their own,
  # since that folder's glibc headers must not shadow the GPU machine's.
  mkdir -p "$build/jpeg-include"
  cp "$sysroot"/usr/include/{jpeglib,jmorecfg,jerror}.h "$sysroot/usr/include/x86_64-linux-gnu/jconfig.h" \
    "$build/jpeg-include/"
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTENSORCTL_CUDA=ON \
    -DCLI11_DIR="$sysroot/usr/share/cmake/CLI11" -Dnlohmann_json_DIR="$sysroot/usr/share/cmake/nlohmann_json" \
    -Dfmt_DIR="$arch_lib/cmake/fmt" -Ddoctest_DIR="$sysroot/usr/lib/cmake/doctest" \
    -DEigen3_DIR="$sysroot/usr/share/eigen3/cmake" \
    -DOPENBLAS_INCLUDE_DIR="$sysroot/usr/include/x86_64-linux-gnu/openblas-pthread" \
    -DOPENBLAS_LIBRARY="$blas_lib/libopenblas.so" -DONNX_DIR="$arch_lib/cmake/ONNX" \
    -DProtobuf_INCLUDE_DIR="$sysroot/usr/include" -DProtobuf_LIBRARY="$arch_lib/libprotobuf.so" \
    -DPNG_PNG_INCLUDE_DIR="$sysroot/usr/include" -DPNG_LIBRARY="$arch_lib/libpng16.so" \
    -DZLIB_INCLUDE_DIR="$sysroot/usr/include" -DZLIB_LIBRARY="$sysroot/lib/x86_64-linux-gnu/libz.so.1" \
    -DJPEG_INCLUDE_DIR="$build/jpeg-include" -DJPEG_LIBRARY="$arch_lib/libjpeg.so" \
    -DGIF_INCLUDE_DIR="$sysroot/usr/include" -DGIF_LIBRARY="$arch_lib/libgif.so" \
    -DLIBZIP_INCLUDE_DIR="$sysroot/usr/include" -DLIBZIP_LIBRARY="$arch_lib/libzip.so" \
    -DHDF5_SERIAL_INCLUDE_DIR="$sysroot/usr/include/hdf5/serial" -DHDF5_SERIAL_LIBRARY="$arch_lib/libhdf5_serial.so" \
    -DHDF5_SERIAL_HL_LIBRARY="$arch_lib/libhdf5_serial_hl.so"
fi
if runs build; then
  if [ $carried -eq 0 ]; then
    cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || {
      grep -E "error" "$build/build.log" | head -40
      [ -z "${OUT:-}" ] || cp "$build/build.log" "$OUT/"
      exit 1
    }
    echo "gpu-check: built in $build"
  fi
  "$build/tensorctl" devices || status=1
fi
export PATH="$PATH:/usr/local/cuda/bin"  # compute-sanitizer, for the cudnn and sanitize stages
if runs test; then
  # The GPU suites, one at a time and in full: their messages (accuracies, skips) belong in the log.
  # tests/gpu/training_test.cpp turns on TCTL_CUDA_GRAPHS itself for its device-graph case.
  # FusedUpdate's CUDA kernel is used only when asked for until this run has compared it with the CPU's
  # (kernels/cuda/cuda_device.cpp, CudaDevice::supports): the op tests ask.
  echo "gpu-check: the op tests on cuda:0"
  TCTL_CUDA_FUSED_UPDATES=1 TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tests/kernels_tests" ||
    status=1
  echo "gpu-check: training on cuda:0"
  # Twice a step's share: about 20 trainings (the digits models under each precision, with device graphs),
  # where the op tests and race-check take a fraction of theirs; the stage's own limit still holds.
  TCTL_TEST_DEVICE=cuda:0 step $((2 * ${TCTL_GPU_STEP_LIMIT:-240})) "$build/tests/gpu_tests" || status=1
  echo "gpu-check: race-check with the shared variables on cuda:0"
  COLUMNS=160 step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tensorctl" race-check --device cuda:0 --threads 4 \
    --iterations 200 || status=1
fi
if runs cudnn; then
  # cuDNN's convolutions, used only when asked for until this stage has compared them (kernels/cuda/conv.cu):
  # the convolution op tests against the CPU (naming each shape's algorithm), the same under compute-sanitizer's
  # memcheck, then the CNN's trainings, twice the same bits and each precision within 0.005 of float32.
  echo "gpu-check: the convolution op tests with cuDNN on cuda:0"
  TCTL_CUDA_CUDNN=log TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tests/kernels_tests" \
    "-sf=*conv_test*" || status=1
  if command -v compute-sanitizer >/dev/null; then
    echo "gpu-check: compute-sanitizer --tool memcheck on them"
    TCTL_CUDA_CUDNN=1 TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" compute-sanitizer --tool memcheck \
      --error-exitcode 3 "$build/tests/kernels_tests" "-sf=*conv_test*" || status=1
  fi
  echo "gpu-check: training with cuDNN's convolutions on cuda:0"
  TCTL_CUDA_CUDNN=1 TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tests/gpu_tests" \
    "-tc=two runs on cuda:0*,mixed precisions on cuda:0*" || status=1
fi
if runs bench; then
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    BUILD_DIR="$build" step "${TCTL_GPU_BENCH_LIMIT:-300}" bash "$root/bench/compare_pytorch_gpu.sh" || status=1
  else
    echo "gpu-check: python3 has no CUDA-enabled torch; bench skipped"
  fi
fi
if runs sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      echo "gpu-check: compute-sanitizer --tool $tool on the op tests on cuda:0"
      TCTL_CUDA_FUSED_UPDATES=1 TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" \
        compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$build/tests/kernels_tests" ${TCTL_GPU_SANITIZE_FILES:+"-sf=$TCTL_GPU_SANITIZE_FILES"} || status=1
      # The GPU suite's own-stream test too (race-check's path, seconds); its training cases would take the
      # sanitizer many minutes, and the launch-failure case's bad launch is an API error it reports on purpose.
      echo "gpu-check: compute-sanitizer --tool $tool on the own-stream test on cuda:0"
      TCTL_TEST_DEVICE=cuda:0 step "${TCTL_GPU_STEP_LIMIT:-240}" compute-sanitizer --tool "$tool" --error-exitcode 3 \
        "$build/tests/gpu_tests" "-tc=*own cuda:0 stream*" || status=1
    done
  else
    echo "gpu-check: compute-sanitizer is not installed; sanitize skipped"
  fi
fi
if runs failures; then
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    fail_dir="$(mktemp -d)"
    cat >"$fail_dir/wide.json" <<'JSON'
{"name": "wide", "input_shape": [64], "layers": [{"type": "Dense", "units": 16384, "activation": "relu"},
 {"type": "Dense", "units": 16384, "activation": "relu"}, {"type": "Dense", "units": 10, "activation": "softmax"}]}
JSON
    sed -e 's|"models/digits_mlp.json"|"wide.json"|' -e 's|"epochs": 20|"epochs": 1|' "$root/configs/digits_mlp.json" \
      >"$fail_dir/train.json"
    echo "gpu-check: a device out of memory (wide.json: 2 x Dense 16384 on cuda:0, Adam)"
    step 120 "$build/tensorctl" train "$fail_dir/train.json" --device cuda:0 --output "$fail_dir/run" --quiet || status=1
    before="$(sha256sum "$fail_dir/run/checkpoint.safetensors" | cut -c1-16)"
    # The other process keeps 1.5 GiB free; tensorctl's own context takes part of that.
    step 180 python3 - "$build/tensorctl" "$fail_dir" <<'PY' || status=1
import subprocess, sys, torch
tensorctl, d = sys.argv[1], sys.argv[2]
free, total = torch.cuda.mem_get_info()
hog = torch.empty(free - (3 << 29), dtype=torch.uint8, device="cuda")
print(f"gpu-check: another process holds {hog.numel() / 2**30:.1f} GiB of {total / 2**30:.1f} GiB")
ok = True
for what, args in (("resume", ["--resume", f"{d}/run", "--epochs", "2", "--device", "cuda:0"]), ("fresh", ["--output", f"{d}/fresh", "--device", "cuda:0"])):
    r = subprocess.run([tensorctl, "train", f"{d}/train.json", "--quiet", *args], capture_output=True, text=True)
    lines = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    print(f"gpu-check: {what}: exit {r.returncode}, {len(lines)} line(s):")
    for l in lines[:10]:
        print("  " + l)
    ok = ok and r.returncode == 1 and len(lines) == 1 and "out of memory" in lines[0]
sys.exit(0 if ok else 1)
PY
    after="$(sha256sum "$fail_dir/run/checkpoint.safetensors" | cut -c1-16)"
    echo "gpu-check: checkpoint before $before, after $after: $([ "$before" = "$after" ] && echo intact || echo CHANGED)"
    [ "$before" = "$after" ] || status=1
    rm -rf "$fail_dir"
  else
    echo "gpu-check: python3 has no CUDA-enabled torch to hold the GPU's memory; failures skipped"
  fi
fi
if runs profile; then
  prof_dir="$(mktemp -d)"
  for model in "mlp2048 784 2048,2048 1024" "digits_mlp 64 128,64 32"; do
    read -r name inputs widths batch <<<"$model"
    layers=""
    for w in ${widths//,/ }; do layers+="{\"type\": \"Dense\", \"units\": $w, \"activation\": \"relu\", \"device\": \"cuda:0\"}, "; done
    echo "{\"name\": \"$name\", \"input_shape\": [$inputs], \"layers\": [$layers{\"type\": \"Dense\", \"units\": 10, \"device\": \"cuda:0\"}]}" \
      >"$prof_dir/$name.json"
    echo "gpu-check: profile of $name at batch $batch on cuda:0"
    step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tensorctl" profile "$prof_dir/$name.json" --batch-size "$batch" --ops \
      --loss sparse_categorical_crossentropy --iterations 50 --trace "${OUT:-$prof_dir}/trace-$name.json" || status=1
  done
  rm -rf "$prof_dir"
fi
if runs pipeline; then
  pipe_dir="$(mktemp -d)"
  python3 - "$pipe_dir/rows.csv" <<'PY'
import random, sys
random.seed(7)
with open(sys.argv[1], "w") as f:
    f.write(",".join(f"f{i}" for i in range(784)) + ",label\n")
    for _ in range(16384):
        f.write(",".join(f"{random.random():.3f}" for _ in range(784)) + f",{random.randrange(10)}\n")
PY
  layers=""
  for w in 2048 2048; do layers+="{\"type\": \"Dense\", \"units\": $w, \"activation\": \"relu\"}, "; done
  echo "{\"name\": \"mlp2048\", \"input_shape\": [784], \"layers\": [$layers{\"type\": \"Dense\", \"units\": 10, \"activation\": \"softmax\"}]}" \
    >"$pipe_dir/mlp2048.json"
  # prefetch 2 twice: moving batches on the device's stream, then on a copy stream of the producer's
  # (TCTL_CUDA_COPY_STREAM=1 until this check has run it); every run must train the same weights.
  weights=""
  for run in 0 2 2-copy-stream; do
    prefetch="${run%%-*}"
    copy_stream=0
    [ "$run" = 2-copy-stream ] && copy_stream=1
    echo "{\"model\": \"mlp2048.json\", \"data\": {\"csv\": \"rows.csv\", \"test_split\": 0.1, \"validation_split\": 0.0}, \"loss\": \"sparse_categorical_crossentropy\", \"optimizer\": {\"type\": \"adam\", \"learning_rate\": 0.001}, \"epochs\": 4, \"batch_size\": 1024, \"prefetch\": $prefetch, \"device\": \"cuda:0\", \"seed\": 1}" \
      >"$pipe_dir/train.json"
    rm -rf "$pipe_dir/run"
    if TCTL_CUDA_COPY_STREAM=$copy_stream step "${TCTL_GPU_STEP_LIMIT:-120}" "$build/tensorctl" train \
      "$pipe_dir/train.json" --output "$pipe_dir/run" --quiet --strict-placement --inter-op-threads 1 \
      --intra-op-threads 1; then
      echo "gpu-check: train, prefetch $run: $(python3 -c "import json; d = json.load(open('$pipe_dir/run/summary.json')); print(round(d['samples_per_second']), 'samples/s, test', d['test'])")"
      weights+="$(sha256sum "$pipe_dir/run/weights.safetensors" | cut -c1-16) "
    else
      echo "gpu-check: train, prefetch $run: failed"
      status=1
    fi
  done
  if [ "$(tr ' ' '\n' <<<"$weights" | sort -u | grep -c .)" -ne 1 ]; then
    echo "gpu-check: the prefetch runs trained different weights: $weights"
    status=1
  fi
  rm -rf "$pipe_dir"
fi
if runs suites; then
  # Every other suite, side by side: they need no GPU, but with one present devices and placement list it.
  # The README's samples are left out: some need Graphviz and Debian's numpy, which that machine lacks (CI
  # runs them).
  pids=()
  for suite in core models app cli; do
    step "${TCTL_GPU_STEP_LIMIT:-240}" "$build/tests/${suite}_tests" --test-case-exclude="every sample in the README*" \
      >"$build/${suite}_tests.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  for suite in core models app cli; do
    echo "gpu-check: ${suite}_tests"
    grep -v "^$" "$build/${suite}_tests.log" | tail -n 30
  done
fi
echo "gpu-check $stage: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
