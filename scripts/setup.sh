#!/usr/bin/env bash
# Installs the Debian packages tensorctl builds with, only those missing. Quiet when nothing is to do.
#   scripts/setup.sh          what the build and the tests need
#   scripts/setup.sh --fuzz   also clang-14 and its runtimes (libFuzzer, sanitizers; llvm-14 for the symbolizer)
#                             for scripts/fuzz.sh
#   scripts/setup.sh --format also clang-format-14, for scripts/format.sh
set -euo pipefail

packages=(build-essential cmake pkg-config libcli11-dev nlohmann-json3-dev libeigen3-dev libopenblas-dev libfmt-dev doctest-dev
  libopenmpi-dev openmpi-bin graphviz libonnx-dev libprotobuf-dev python3-onnx libpng-dev libjpeg62-turbo-dev libgif-dev libzip-dev libhdf5-dev python3-h5py)
case "${1:-}" in
  --fuzz) packages+=(clang-14 libclang-rt-14-dev llvm-14) ;;
  --format) packages+=(clang-format-14) ;;
esac
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
