#!/usr/bin/env bash
# Images decoded per second per thread: tensorctl's data path (bench_image_decode) against Pillow
# (bench/image_decode.py, python3-pil) on the same 256 x 256 PNG, JPEG, BMP and GIF files.
#   bench/image_decode.sh [BUILD_DIR [DIR]]   default build, /tmp/tctl_image_bench (filled on first use)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
dir="${2:-/tmp/tctl_image_bench}"
"$build/bench/bench_image_decode" "$dir"
if /usr/bin/python3 -c "import PIL, numpy" 2>/dev/null; then
  /usr/bin/python3 "$root/bench/image_decode.py" "$dir"
else
  echo "image_decode: no Pillow for /usr/bin/python3 (apt-get install python3-pil): the comparison is skipped"
fi
