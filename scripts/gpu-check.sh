#!/usr/bin/env bash
# The whole GPU check, for a machine with an NVIDIA GPU, nvcc and CMake but none of Debian's packages and no
# network (the `device` machine of the brief). Two halves:
#
#   scripts/gpu-check.sh pack   on the build machine: downloads the .deb files of the build's Debian
#                               dependencies (headers, OpenBLAS and its Fortran runtime, fmt, ONNX and
#                               protobuf) into gpu-deps/
#                               (ignored by git, about 14 MB), to travel with the tree
#   scripts/gpu-check.sh [STAGE] on the GPU machine, from the repository root, gpu-deps/ beside it: unpacks
#                               them (python3 reads the .deb archives), then the stages, all of them by default
#                               or one (each needs the ones before it to have run on the same machine):
#                                 build     TENSORCTL_CUDA=ON in build-gpu/ (Release), `tensorctl devices`
#                                 test      every test, then the GPU ones (ctest -L gpu) with their output
#                                 sanitize  compute-sanitizer memcheck and racecheck on the GPU op tests
#                                 bench     bench/compare_pytorch_gpu.sh (PyTorch on the same GPU)
#                               The device tool gives a command 10 minutes: run the stages one call each.
# Results go to stdout and, when $OUT is set (the device tool's folder), to $OUT/gpu-check.log.
#
# From the build machine, with the device tool:  scripts/gpu-check.sh pack, then run
#   `bash scripts/gpu-check.sh` with carry ["gpu-deps"].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$root/gpu-deps"
packages=(libcli11-dev nlohmann-json3-dev libfmt-dev libfmt9 libopenblas-dev libopenblas0 libopenblas0-pthread
          libopenblas-pthread-dev libgfortran5 libquadmath0 doctest-dev libeigen3-dev libonnx-dev libonnx1 libonnxifi
          libprotobuf-dev libprotobuf32)

if [ "${1:-}" = "pack" ]; then
  mkdir -p "$deps"
  (cd "$deps" && rm -f ./*.deb && apt-get download "${packages[@]}" 2>&1 | grep -v "unsandboxed" || true)
  ls "$deps"/*.deb >/dev/null
  echo "gpu-check: $(ls "$deps"/*.deb | wc -l) packages in gpu-deps/ ($(du -sh "$deps" | cut -f1))"
  exit 0
fi
stage="${1:-all}"
case "$stage" in all | build | test | sanitize | bench) ;; *)
  echo "usage: scripts/gpu-check.sh [pack|build|test|sanitize|bench]" >&2
  exit 2
  ;;
esac
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
export LD_LIBRARY_PATH="$blas_lib:$arch_lib:${LD_LIBRARY_PATH:-}"

# --- the build --------------------------------------------------------------------------------------------
build="$root/build-gpu"
nvidia-smi -L || true
jobs="$(nproc)"
if { runs build || runs test; } && [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTENSORCTL_CUDA=ON \
    -DCLI11_DIR="$sysroot/usr/share/cmake/CLI11" -Dnlohmann_json_DIR="$sysroot/usr/share/cmake/nlohmann_json" \
    -Dfmt_DIR="$arch_lib/cmake/fmt" -Ddoctest_DIR="$sysroot/usr/lib/cmake/doctest" \
    -DEigen3_DIR="$sysroot/usr/share/eigen3/cmake" \
    -DOPENBLAS_INCLUDE_DIR="$sysroot/usr/include/x86_64-linux-gnu/openblas-pthread" \
    -DOPENBLAS_LIBRARY="$blas_lib/libopenblas.so" -DONNX_DIR="$arch_lib/cmake/ONNX" \
    -DProtobuf_INCLUDE_DIR="$sysroot/usr/include" -DProtobuf_LIBRARY="$arch_lib/libprotobuf.so"
fi
status=0
if runs build; then
  cmake --build "$build" -j "$jobs" >"$build/build.log" 2>&1 || {
    grep -E "error" "$build/build.log" | head -40
    [ -z "${OUT:-}" ] || cp "$build/build.log" "$OUT/"
    exit 1
  }
  echo "gpu-check: built in $build"
  "$build/tensorctl" devices
  if [ -n "${OUT:-}" ]; then
    # The binaries, for a later call on a fresh machine to carry as build-gpu/ instead of building again
    # (sanitize and bench run them directly; test needs the CMake tree).
    (cd "$build" && tar czf "$OUT/build-gpu-bin.tgz" tensorctl tests/*_tests bench/bench_workloads bench/bench_cuda_limits)
    echo "gpu-check: binaries in \$OUT/build-gpu-bin.tgz ($(du -h "$OUT/build-gpu-bin.tgz" | cut -f1))"
  fi
fi
if runs test; then
  # The GPU suites first, one at a time and verbose: their messages (accuracies, skips) belong in the log.
  (cd "$build" && ctest -L gpu -V) || status=1
  (cd "$build" && ctest --output-on-failure -j "$jobs" -LE gpu) || status=1
fi
if runs sanitize; then
  if command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      echo "gpu-check: compute-sanitizer --tool $tool on the op tests on cuda:0"
      TCTL_TEST_DEVICE=cuda:0 compute-sanitizer --tool "$tool" --error-exitcode 3 "$build/tests/kernels_tests" || status=1
    done
  else
    echo "gpu-check: compute-sanitizer is not installed; sanitize skipped"
  fi
fi
if runs bench; then
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    BUILD_DIR="$build" bash "$root/bench/compare_pytorch_gpu.sh" || status=1
  else
    echo "gpu-check: python3 has no CUDA-enabled torch; bench skipped"
  fi
fi
echo "gpu-check $stage: $([ $status -eq 0 ] && echo passed || echo FAILED)"
exit $status
