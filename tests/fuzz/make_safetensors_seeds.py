#!/usr/bin/env python3
"""Writes the safetensors seeds in corpus/safetensors/ (committed; rerun only to change them).

Run from tests/fuzz/. Written by hand with struct rather than the safetensors package, so that the seeds can
also be ones the reference writer would not produce (no header padding, an unsupported dtype).
"""
import json
import struct


def safetensors(tensors, metadata=None, pad=True):
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    data = b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - (8 + len(text)) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*v):
    return struct.pack("<%df" % len(v), *v)


def i32(*v):
    return struct.pack("<%di" % len(v), *v)


def i64(*v):
    return struct.pack("<%dq" % len(v), *v)


SEEDS = {
    "dense_weights.safetensors": safetensors([("dense/kernel", "F32", [3, 2], f32(.1, -.2, .3, -.4, .5, -.6)),
                                              ("dense/bias", "F32", [2], f32(0, 1))]),
    "checkpoint_mixed.safetensors": safetensors(
        [("step", "I64", [], i64(120)), ("labels", "I32", [4], i32(0, 1, 2, 1)),
         ("adam/m", "F32", [2, 2], f32(1, 2, 3, 4)), ("empty", "F32", [0, 3], b"")],
        {"format": "tensorctl", "epoch": "3", "config": "{\"batch_size\": 32}"}),
    "empty_tensor_and_rank6.safetensors": safetensors([("a", "F32", [0], b""),
                                                       ("b", "F32", [1, 1, 1, 1, 1, 2], f32(7, 8))]),
    "no_padding_metadata_only.safetensors": safetensors([], {"k": "v"}, pad=False),
    "unsupported_dtype.safetensors": safetensors([("h", "F16", [2], b"\0\0\0\0")]),
}

if __name__ == "__main__":
    for name, data in SEEDS.items():
        with open("corpus/safetensors/" + name, "wb") as f:
            f.write(data)
