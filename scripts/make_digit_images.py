#!/usr/bin/python3
"""Writes the digits of configs/data/digits.csv as PNG files in class folders, the layout Keras'
image_dataset_from_directory reads and `"data": {"images": {"directory": ...}}` trains on:

    make_digit_images.py [OUT_DIR]     default configs/data/digit_images (ignored by git)

OUT_DIR/0/0000.png ... OUT_DIR/9/1796.png: each row an 8x8 8-bit grayscale PNG, its pixel counts 0..16
scaled to 0..255 (round(v * 255 / 16)), named after its row. Python's standard library only (zlib); the same
bytes on every run. An existing OUT_DIR is replaced whole (written beside it, then renamed).
"""
import csv
import os
import shutil
import struct
import sys
import zlib


def png(width, height, rows):
    """An 8-bit grayscale PNG of `rows` (lists of 0..255)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    raw = b"".join(b"\x00" + bytes(r) for r in rows)  # filter type 0 (none) on each row
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "configs", "data", "digit_images")
    tmp = f"{out.rstrip('/')}.tmp.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    with open(os.path.join(root, "configs", "data", "digits.csv"), newline="") as f:
        rows = list(csv.reader(f))[1:]
    for i, row in enumerate(rows):
        pixels = [round(int(v) * 255 / 16) for v in row[:64]]
        folder = os.path.join(tmp, row[64])
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{i:04d}.png"), "wb") as f:
            f.write(png(8, 8, [pixels[8 * r:8 * r + 8] for r in range(8)]))
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    print(f"make_digit_images: {len(rows)} images in {out}")


if __name__ == "__main__":
    main()
