#!/usr/bin/python3
"""Pillow on the files bench_image_decode wrote: decode (Image.open, convert("RGB"), load) from memory, and
decode plus resize to 224 x 224 (Image.BILINEAR, which filters with a triangle as wide as the downscale, where
tf.image.resize samples four pixels) into a float32 array, one thread, images/s, best of 3.

    image_decode.py DIR
"""
import glob
import io
import os
import sys
import time

import numpy as np
from PIL import Image, __version__


def best_rate(n, run):
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return n / best


def main():
    print(f"Pillow {__version__}: 256 x 256 RGB files, images/s, best of 3")
    print(f"{'format':>6} {'decode 1 thr':>14} {'decode+resize 1 thr':>22}")
    for fmt in ("png", "jpeg", "bmp", "gif"):
        paths = sorted(glob.glob(os.path.join(sys.argv[1], fmt, "*")))
        data = [open(p, "rb").read() for p in paths]

        def decode():
            for d in data:
                Image.open(io.BytesIO(d)).convert("RGB").load()

        def decode_resize():
            for p in paths:
                img = Image.open(p).convert("RGB").resize((224, 224), Image.BILINEAR)
                np.asarray(img, dtype=np.float32)
        print(f"{fmt:>6} {best_rate(len(paths), decode):>14.0f} {best_rate(len(paths), decode_resize):>22.0f}")


if __name__ == "__main__":
    main()
