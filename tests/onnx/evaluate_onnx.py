#!/usr/bin/python3
"""An ONNX evaluator of our own, in numpy, for the operators `tensorctl export` writes, so the tests can
check an export against `tensorctl predict` without onnxruntime (the GPU machine has it; the build machine,
Debian 12, has python3-onnx 1.12, whose checker is used here, but no runtime).

    evaluate_onnx.py MODEL.onnx INPUT.csv PREDICTIONS.csv [SUMMARY.json]

Checks the model with onnx.checker (full_check: types and shapes inferred), feeds the first F columns of
INPUT.csv (F = the model's input width) row by row as one batch, and compares the output with the numeric
columns of PREDICTIONS.csv (`tensorctl predict`'s output: probabilities or values). Prints the largest
difference, absolute and relative to max(1, |predicted|) (predict writes six significant digits); exits 1
when the relative one is above 1e-5, 2 on a usage or format problem. With the run's SUMMARY.json, a run
trained on text has INPUT.csv's text column turned into ids by text_vectorize.py, our Python reference, and
one trained on images has the PNG files of INPUT.csv's path column decoded here (8-bit gray or RGB, not
interlaced, already of the run's image size: scripts/make_digit_images.py's).
"""
import csv
import json
import math
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import numpy_helper


def attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def same_pads(size, kernel, stride):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2, out


def windows(x, node, fill):
    """x padded as the node's auto_pad says, and (kernel, strides, output size)."""
    kh, kw = attr(node, "kernel_shape")
    sh, sw = attr(node, "strides", [1, 1])
    pad = attr(node, "auto_pad", b"NOTSET")
    pad = pad.decode() if isinstance(pad, bytes) else pad
    h, w = x.shape[2], x.shape[3]
    if pad == "SAME_UPPER":
        t, b, oh = same_pads(h, kh, sh)
        l, r, ow = same_pads(w, kw, sw)
    elif pad == "VALID":
        t = b = l = r = 0
        oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    else:
        raise SystemExit(f"unsupported auto_pad {pad!r}")
    xp = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=fill)
    return xp, (kh, kw), (sh, sw), (oh, ow)


def patches(xp, kernel, strides, out):
    (kh, kw), (sh, sw), (oh, ow) = kernel, strides, out
    for i in range(kh):
        for j in range(kw):
            yield i, j, xp[:, :, i:i + sh * oh:sh, j:j + sw * ow:sw]


def conv(node, x, w, b=None):
    xp, kernel, strides, out = windows(x, node, 0.0)
    y = np.zeros((x.shape[0], w.shape[0], out[0], out[1]))
    for i, j, p in patches(xp, kernel, strides, out):
        y += np.einsum("nchw,oc->nohw", p, w[:, :, i, j])
    return y if b is None else y + b[None, :, None, None]


def max_pool(node, x):
    xp, kernel, strides, out = windows(x, node, -np.inf)
    return np.max(np.stack([p for _, _, p in patches(xp, kernel, strides, out)]), axis=0)


def average_pool(node, x):
    if attr(node, "count_include_pad", 0) != 0:
        raise SystemExit("unsupported count_include_pad")
    xp, kernel, strides, out = windows(x, node, 0.0)
    ones, _, _, _ = windows(np.ones_like(x), node, 0.0)
    total = sum(p for _, _, p in patches(xp, kernel, strides, out))
    count = sum(p for _, _, p in patches(ones, kernel, strides, out))
    return total / count


def reshape(x, shape):
    shape = [x.shape[i] if d == 0 else int(d) for i, d in enumerate(shape)]
    return x.reshape(shape)


def softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def recurrent(node, x, w, r, b=None, lengths=None):
    """ONNX's RNN, GRU and LSTM on X [steps, batch, features] (layout 0), one forward direction, from zero
    states; returns Y [steps, 1, batch, hidden], in float64. With sequence_lens, a sequence's states stop at
    its length and its outputs past it are zeros."""
    op, hidden = node.op_type, attr(node, "hidden_size")
    if attr(node, "direction", b"forward") not in (b"forward", "forward"):
        raise SystemExit(f"{op}: only the forward direction is in this evaluator")
    x, w, r = x.astype(np.float64), w[0].astype(np.float64), r[0].astype(np.float64)
    gates = w.shape[0] // hidden
    b = np.zeros(2 * gates * hidden) if b is None else b[0].astype(np.float64)
    wb, rb = b[:gates * hidden], b[gates * hidden:]
    h = np.zeros((x.shape[1], hidden))
    c = np.zeros_like(h)
    act = {b"Tanh": np.tanh, b"Relu": lambda v: np.maximum(v, 0.0)}[(attr(node, "activations") or [b"Tanh"])[0]]
    out = []
    for t, xt in enumerate(x):
        h_before, c_before = h, c
        if op == "RNN":
            h = act(xt @ w.T + h @ r.T + wb + rb)
        elif op == "LSTM":
            g = xt @ w.T + h @ r.T + wb + rb
            i, o, f, cc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
            c = sigmoid(f) * c + sigmoid(i) * np.tanh(cc)
            h = sigmoid(o) * np.tanh(c)
        else:
            if attr(node, "linear_before_reset", 0) != 1:
                raise SystemExit("GRU: only linear_before_reset 1 is in this evaluator")
            gx, gh = xt @ w.T + wb, h @ r.T + rb
            z = sigmoid(gx[:, :hidden] + gh[:, :hidden])
            rr = sigmoid(gx[:, hidden:2 * hidden] + gh[:, hidden:2 * hidden])
            hh = np.tanh(gx[:, 2 * hidden:] + rr * gh[:, 2 * hidden:])
            h = (1.0 - z) * hh + z * h
        if lengths is not None:
            live = (np.asarray(lengths) > t)[:, None]
            h, c = np.where(live, h, h_before), np.where(live, c, c_before)
            out.append(np.where(live, h, 0.0))
            continue
        out.append(h)
    return np.stack(out)[:, None, :, :]


def onnx_slice(x, starts, ends, axes=None, steps=None):
    # ONNX: axes default to the first len(starts), steps to 1.
    axes = range(len(starts)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    index = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        d = x.shape[a]
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        index[a] = slice(s, None if e < 0 else e, st)
    return x[tuple(index)]


def run_node(node, v):
    x = [v[name] for name in node.input]
    op = node.op_type
    if op == "Sub": return x[0] - x[1]
    if op == "Div": return x[0] / x[1]
    if op == "Mul": return x[0] * x[1]
    if op == "Add": return x[0] + x[1]
    if op == "Sum": return sum(x)
    if op == "MatMul": return x[0] @ x[1]
    if op == "Reshape": return reshape(x[0], x[1])
    if op == "Flatten": return x[0].reshape(x[0].shape[0], -1)
    if op == "Transpose": return np.transpose(x[0], attr(node, "perm"))
    if op == "Conv": return conv(node, *x)
    if op == "MaxPool": return max_pool(node, x[0])
    if op == "AveragePool": return average_pool(node, x[0])
    if op == "Relu": return np.maximum(x[0], 0.0)
    if op == "LeakyRelu": return np.where(x[0] >= 0, x[0], attr(node, "alpha", 0.01) * x[0])
    if op == "Elu": return np.where(x[0] > 0, x[0], attr(node, "alpha", 1.0) * (np.exp(x[0]) - 1.0))
    if op == "Sigmoid": return 1.0 / (1.0 + np.exp(-x[0]))
    if op == "Tanh": return np.tanh(x[0])
    if op == "Erf": return np.vectorize(math.erf)(x[0])
    if op == "Softmax": return softmax(x[0], attr(node, "axis", -1))
    if op == "Concat": return np.concatenate(x, axis=attr(node, "axis"))
    if op == "Identity": return x[0]
    if op == "LayerNormalization":
        mean = x[0].mean(axis=-1, keepdims=True)
        var = ((x[0] - mean) ** 2).mean(axis=-1, keepdims=True)
        return (x[0] - mean) / np.sqrt(var + attr(node, "epsilon", 1e-5)) * x[1] + x[2]
    if op == "Cast": return x[0].astype({1: np.float64, 6: np.int32, 7: np.int64, 9: bool}[attr(node, "to")])
    if op == "Equal": return x[0] == x[1]
    if op == "Not": return np.logical_not(x[0])
    if op == "Where": return np.where(x[0], x[1], x[2])
    if op == "Max": return np.maximum(x[0], x[1])
    if op == "Min": return np.minimum(x[0], x[1])
    if op == "Shape": return np.array(x[0].shape, dtype=np.int64)
    if op == "Expand": return x[0] * np.ones(tuple(int(d) for d in x[1]), dtype=x[0].dtype)
    if op == "Unsqueeze": return np.expand_dims(x[0], tuple(int(a) for a in x[1]))
    if op == "Squeeze": return np.squeeze(x[0], tuple(int(a) for a in x[1]))
    if op == "CumSum": return np.cumsum(x[0], axis=int(x[1]))
    if op == "ReduceSum":
        return np.sum(x[0], axis=tuple(int(a) for a in x[1]), keepdims=bool(attr(node, "keepdims", 1)))
    if op == "GatherElements": return np.take_along_axis(x[0], x[1], axis=attr(node, "axis", 0))
    if op == "ScatterElements":
        out = np.array(x[0], copy=True)
        np.put_along_axis(out, x[1], x[2], axis=attr(node, "axis", 0))
        return out
    if op == "Gather": return np.take(x[0], x[1], axis=attr(node, "axis", 0))
    if op == "ReduceMean": return np.mean(x[0], axis=tuple(attr(node, "axes")), keepdims=bool(attr(node, "keepdims", 1)))
    if op == "ReduceMax": return np.max(x[0], axis=tuple(attr(node, "axes")), keepdims=bool(attr(node, "keepdims", 1)))
    if op in ("RNN", "GRU", "LSTM"): return recurrent(node, *x)
    if op == "Slice": return onnx_slice(x[0], *x[1:])
    if op == "Pad":
        pads, rank = [int(p) for p in x[1]], x[0].ndim
        return np.pad(x[0], [(pads[i], pads[i + rank]) for i in range(rank)])
    raise SystemExit(f"operator {op} is not in this evaluator")


def numbers(path, first=None):
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    out = []
    # predict's class column holds names, which may be numbers (an image run's folders "0" to "9").
    skip = {i for i, name in enumerate(rows[0]) if name in ("class", "path")}
    for row in rows[1:]:
        cells = row[:first] if first is not None else row
        values = []
        for i, c in enumerate(cells):
            if i in skip:
                continue
            try:
                values.append(float(c))
            except ValueError:
                pass  # class names and kept columns
        out.append(values)
    return np.array(out, dtype=np.float64)


def png_pixels(path, channels):
    """The samples of an 8-bit, non-interlaced gray or RGB PNG file, flattened [height, width, channels]."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG file")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        size = int.from_bytes(data[pos:pos + 4], "big")
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + size]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + size
    width, height = int.from_bytes(header[0:4], "big"), int.from_bytes(header[4:8], "big")
    depth, color, interlace = header[8], header[9], header[12]
    per_pixel = {0: 1, 2: 3}.get(color)
    if depth != 8 or per_pixel is None or interlace != 0:
        raise SystemExit(f"{path}: only 8-bit gray or RGB PNG files without interlacing are read here")
    raw, stride, rows, prior = zlib.decompress(idat), width * per_pixel, [], bytearray(width * per_pixel)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - per_pixel] if i >= per_pixel else 0
            b, c = prior[i], prior[i - per_pixel] if i >= per_pixel else 0
            p = a + b - c
            nearest = a if abs(p - a) <= abs(p - b) and abs(p - a) <= abs(p - c) else b if abs(p - b) <= abs(p - c) else c
            line[i] = (line[i] + [0, a, b, (a + b) // 2, nearest][kind]) & 0xFF
        rows.append(line)
        prior = line
    pixels = np.array([list(r) for r in rows], dtype=np.float64).reshape(height, width, per_pixel)
    if channels == 3 and per_pixel == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    elif channels == 1 and per_pixel == 3:
        pixels = np.rint(pixels @ np.array([0.2989, 0.5870, 0.1140]))[:, :, None]
    return pixels.reshape(-1)


def image_rows(summary, input_path):
    images = summary["preprocessing"]["images"]
    channels = 1 if images["color_mode"] == "grayscale" else 3
    with open(input_path, newline="") as f:
        rows = list(csv.reader(f))
    column = rows[0].index("path")
    base = os.path.dirname(os.path.abspath(input_path))
    out = [png_pixels(os.path.join(base, row[column]), channels) for row in rows[1:]]
    expected = images["image_size"][0] * images["image_size"][1] * channels
    if any(len(r) != expected for r in out):
        raise SystemExit("an image is not of the run's size; resizing is not done here")
    return np.array(out)


def main():
    if len(sys.argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    model = onnx.load(sys.argv[1])
    onnx.checker.check_model(model, full_check=True)
    width = model.graph.input[0].type.tensor_type.shape.dim[1].dim_value
    values = {t.name: numpy_helper.to_array(t).astype(np.float64) if t.data_type == onnx.TensorProto.FLOAT
              else numpy_helper.to_array(t) for t in model.graph.initializer}
    inputs = None
    if len(sys.argv) == 5:
        with open(sys.argv[4], encoding="utf-8") as f:
            summary = json.load(f)
        if "text" in summary["preprocessing"]:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import text_vectorize
            inputs = np.array(text_vectorize.text_ids(sys.argv[4], sys.argv[2]), dtype=np.float64)
        elif "images" in summary["preprocessing"]:
            inputs = image_rows(summary, sys.argv[2])
    values[model.graph.input[0].name] = inputs if inputs is not None else numbers(sys.argv[2], width)
    for node in model.graph.node:
        values[node.output[0]] = run_node(node, values)
    got = values[model.graph.output[0].name]
    expected = numbers(sys.argv[3])
    expected = expected[:, :got.shape[1]] if expected.shape[1] > got.shape[1] else expected
    if got.shape != expected.shape:
        print(f"shapes differ: the model gives {got.shape}, predict wrote {expected.shape}", file=sys.stderr)
        sys.exit(1)
    diff = float(np.max(np.abs(got - expected)))
    # predict writes six significant digits: a regression's value of 150 is written to 1e-4.
    relative = float(np.max(np.abs(got - expected) / np.maximum(1.0, np.abs(expected))))
    print(f"{len(got)} rows, {got.shape[1]} outputs, {len(model.graph.node)} nodes: max |onnx - predict| = "
          f"{diff:.3g}, relative to max(1, |predict|) {relative:.3g}")
    sys.exit(0 if relative <= 1e-5 else 1)


if __name__ == "__main__":
    main()
