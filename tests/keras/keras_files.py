#!/usr/bin/python3
"""Keras model files with weights, written with h5py in the layout Keras' own saving code writes (Keras is not
installable here), and the predictions PyTorch computes with the same weights.

    keras_files.py MODEL.json OUT_DIR [SEED]

MODEL.json is a Sequential model's to_json() (Keras 3 layout, tests/data/keras/*_keras3.json). Writes in
OUT_DIR:
  model.keras   a Keras 3 archive (keras/src/saving/saving_lib.py): metadata.json, config.json (MODEL.json)
                and model.weights.h5, each layer's variables under layers/<class in snake_case>[_N]/..., a
                recurrent layer's in its cell/, Bidirectional's in forward_layer/ and backward_layer/,
                KerasHub's sub-layers under their attribute names (query_dense kernels [hidden, heads, head])
  model.h5      the legacy whole-model file (legacy_h5_format.py): root attributes model_config,
                keras_version and backend; model_weights/<layer name> with its weight_names (Keras 2 names,
                "dense/kernel:0") and the datasets under them; not for KerasHub's layers
  x.npy, y.npy  64 input rows (token ids 1.. for a model that starts with an embedding) and zero labels
  reference.csv the probabilities PyTorch computes for the rows with the weights, in float64, when
                /usr/bin/python3 has torch; otherwise not written
The weights are random (numpy's default_rng(SEED)), scaled so every activation stays in range.

    keras_files.py compare REFERENCE.csv PREDICTIONS.csv

Prints the largest difference between the reference and predict's probability columns; exits 1 above 1e-4.
"""
import csv
import json
import os
import re
import sys
import zipfile

import h5py
import numpy as np


def snake(name):
    name = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub(r"([a-z])([A-Z])", r"\1_\2", name).lower()


def layers_of(model):
    return [l for l in model["config"]["layers"] if l["class_name"] != "InputLayer"]


def input_shape(model):
    first = model["config"]["layers"][0]
    return first["config"]["batch_shape"][1:]


class Weights:
    """Each layer's variables in Keras' order, as {relative path: array}, and the Keras 2 names."""

    def __init__(self, rng):
        self.rng = rng
        self.layers = []  # (layer, {path: array}, [keras 2 names])

    def normal(self, shape, scale):
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)


def recurrent_vars(w, cls, units, features, prefix, name):
    gates = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}[cls]
    kernel = w.normal((features, gates * units), 0.5 / np.sqrt(features))
    recurrent = w.normal((units, gates * units), 0.5 / np.sqrt(units))
    bias = w.normal((2, 3 * units) if cls == "GRU" else (gates * units,), 0.1)
    cell = f"{name}/{name}_cell" if cls != "SimpleRNN" else f"{name}/simple_rnn_cell"
    paths = {f"{prefix}cell/vars/0": kernel, f"{prefix}cell/vars/1": recurrent, f"{prefix}cell/vars/2": bias}
    names = [f"{cell}/kernel:0", f"{cell}/recurrent_kernel:0", f"{cell}/bias:0"]
    return paths, names


def make_weights(model, seed):
    """Walks the layers with their input shapes; returns Weights and the output's width."""
    w = Weights(np.random.default_rng(seed))
    shape = list(input_shape(model))
    for layer in layers_of(model):
        cls, c, name = layer["class_name"], layer["config"], layer["config"]["name"]
        paths, names = {}, []
        if cls == "Dense":
            paths = {"vars/0": w.normal((shape[-1], c["units"]), 1.0 / np.sqrt(shape[-1])),
                     "vars/1": w.normal((c["units"],), 0.1)}
            names = [f"{name}/kernel:0", f"{name}/bias:0"]
            shape = shape[:-1] + [c["units"]]
        elif cls == "Conv2D":
            kh, kw = c["kernel_size"]
            paths = {"vars/0": w.normal((kh, kw, shape[-1], c["filters"]), 1.0 / np.sqrt(kh * kw * shape[-1])),
                     "vars/1": w.normal((c["filters"],), 0.1)}
            names = [f"{name}/kernel:0", f"{name}/bias:0"]
            same = c.get("padding", "valid") == "same"
            shape = [shape[0] if same else shape[0] - kh + 1, shape[1] if same else shape[1] - kw + 1, c["filters"]]
        elif cls == "BatchNormalization":
            n = shape[-1]
            paths = {"vars/0": (1 + w.normal((n,), 0.2)), "vars/1": w.normal((n,), 0.2),
                     "vars/2": w.normal((n,), 0.5), "vars/3": (0.5 + np.abs(w.normal((n,), 0.5)))}
            names = [f"{name}/{v}:0" for v in ("gamma", "beta", "moving_mean", "moving_variance")]
        elif cls == "Conv1D":
            k = c["kernel_size"][0]
            paths = {"vars/0": w.normal((k, shape[-1], c["filters"]), 1.0 / np.sqrt(k * shape[-1])),
                     "vars/1": w.normal((c["filters"],), 0.1)}
            names = [f"{name}/kernel:0", f"{name}/bias:0"]
            shape = [shape[0] if c["padding"] == "same" else shape[0] - k + 1, c["filters"]]
        elif cls == "LayerNormalization":
            paths = {"vars/0": 1 + w.normal((shape[-1],), 0.2), "vars/1": w.normal((shape[-1],), 0.2)}
            names = [f"{name}/gamma:0", f"{name}/beta:0"]
        elif cls in ("MaxPooling1D", "AveragePooling1D"):
            shape = [shape[0] // c["pool_size"][0], shape[1]]
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            p = c["pool_size"]
            shape = [shape[0] // p[0], shape[1] // p[1], shape[2]]
        elif cls == "Flatten":
            shape = [int(np.prod(shape))]
        elif cls == "Reshape":
            shape = list(c["target_shape"])
        elif cls in ("GlobalMaxPooling1D", "GlobalAveragePooling2D", "GlobalMaxPooling2D"):
            shape = shape[-1:]
        elif cls == "Embedding":
            paths = {"vars/0": w.normal((c["input_dim"], c["output_dim"]), 0.5)}
            names = [f"{name}/embeddings:0"]
            shape = shape + [c["output_dim"]]
        elif cls in ("LSTM", "GRU", "SimpleRNN"):
            paths, names = recurrent_vars(w, cls, c["units"], shape[-1], "", name)
            shape = shape[:-1] + [c["units"]] if c["return_sequences"] else [c["units"]]
        elif cls == "Bidirectional":
            inner = c["layer"]
            icls, ic = inner["class_name"], inner["config"]
            for direction in ("forward", "backward"):
                p, n = recurrent_vars(w, icls, ic["units"], shape[-1], f"{direction}_layer/",
                                      f"{direction}_{ic['name']}")
                paths.update(p)
                names += [f"{name}/{x}" for x in n]
            units = ic["units"] * 2
            shape = shape[:-1] + [units] if ic["return_sequences"] else [units]
        elif cls == "TokenAndPositionEmbedding":
            d = c["embedding_dim"]
            paths = {"token_embedding/vars/0": w.normal((c["vocabulary_size"], d), 0.5),
                     "position_embedding/vars/0": w.normal((c["sequence_length"], d), 0.5)}
            shape = shape + [d]
        elif cls == "TransformerEncoder":
            hidden, heads, inter = shape[-1], c["num_heads"], c["intermediate_dim"]
            head = hidden // heads
            attention = "_self_attention_layer/"
            for proj in ("query_dense", "key_dense", "value_dense"):
                paths[f"{attention}{proj}/vars/0"] = w.normal((hidden, heads, head), 1.0 / np.sqrt(hidden))
                paths[f"{attention}{proj}/vars/1"] = w.normal((heads, head), 0.1)
            paths[f"{attention}output_dense/vars/0"] = w.normal((heads, head, hidden), 1.0 / np.sqrt(hidden))
            paths[f"{attention}output_dense/vars/1"] = w.normal((hidden,), 0.1)
            for norm in ("_self_attention_layer_norm", "_feedforward_layer_norm"):
                paths[f"{norm}/vars/0"] = 1 + w.normal((hidden,), 0.2)
                paths[f"{norm}/vars/1"] = w.normal((hidden,), 0.2)
            paths["_feedforward_intermediate_dense/vars/0"] = w.normal((hidden, inter), 1.0 / np.sqrt(hidden))
            paths["_feedforward_intermediate_dense/vars/1"] = w.normal((inter,), 0.1)
            paths["_feedforward_output_dense/vars/0"] = w.normal((inter, hidden), 1.0 / np.sqrt(inter))
            paths["_feedforward_output_dense/vars/1"] = w.normal((hidden,), 0.1)
        elif cls == "GlobalAveragePooling1D":
            shape = shape[1:]
        elif cls not in ("Dropout", "Activation", "Rescaling"):
            raise SystemExit(f"keras_files.py: no weights writer for {cls}")
        w.layers.append((layer, {k: np.asarray(v, np.float32) for k, v in paths.items()}, names))
    return w, shape[-1]


def write_keras(model, w, path):
    weights = path + ".weights.h5"
    counts = {}
    with h5py.File(weights, "w") as f:
        f.create_group("vars")
        for layer, paths, _ in w.layers:
            base = snake(layer["class_name"])
            n = counts.get(base, 0)
            counts[base] = n + 1
            group = f"layers/{base}" + (f"_{n}" if n else "")
            f.require_group(group + "/vars")
            for rel, value in paths.items():
                f.create_dataset(f"{group}/{rel}", data=value)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.3.3", "date_saved": "2026-11-29@10:00:00"}))
        z.writestr("config.json", json.dumps(model))
        z.write(weights, "model.weights.h5")
    os.remove(weights)


def write_h5(model, w, path):
    with h5py.File(path, "w") as f:
        f.attrs["model_config"] = json.dumps(model).encode("utf8")
        f.attrs["keras_version"] = "2.15.0"
        f.attrs["backend"] = "tensorflow"
        top = f.create_group("model_weights")
        top.attrs["layer_names"] = [l["config"]["name"].encode("utf8") for l, _, _ in w.layers]
        for layer, paths, names in w.layers:
            g = top.create_group(layer["config"]["name"])
            g.attrs["weight_names"] = [n.encode("utf8") for n in names]
            for n, value in zip(names, paths.values()):
                g.create_dataset(n, data=value)


def reference(model, w, x):
    """The model's output for x, in float64, with torch's functional ops and the weights above."""
    import torch
    import torch.nn.functional as F
    t = lambda a: torch.tensor(np.asarray(a, np.float64))
    act = {"relu": torch.relu, "tanh": torch.tanh, "softmax": lambda v: torch.softmax(v, -1),
           "sigmoid": torch.sigmoid, "linear": lambda v: v}
    h = torch.tensor(x)
    name = lambda a: a["config"] if isinstance(a, dict) else a  # Keras 3 may write an activation as an object

    def run_rnn(cls, v, xs, reverse):
        steps = range(xs.shape[1] - 1, -1, -1) if reverse else range(xs.shape[1])
        units = v["cell/vars/1"].shape[0]
        k, r, b = t(v["cell/vars/0"]), t(v["cell/vars/1"]), t(v["cell/vars/2"])
        hs, c = torch.zeros(xs.shape[0], units, dtype=torch.float64), torch.zeros(xs.shape[0], units, dtype=torch.float64)
        out = [None] * xs.shape[1]
        for s in steps:
            if cls == "LSTM":
                z = xs[:, s] @ k + hs @ r + b
                i, f, g, o = z.split(units, -1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                hs = torch.sigmoid(o) * torch.tanh(c)
            elif cls == "GRU":
                mx, mh = xs[:, s] @ k + b[0], hs @ r + b[1]
                xz, xr, xh = mx.split(units, -1)
                rz, rr, rh = mh.split(units, -1)
                z, rg = torch.sigmoid(xz + rz), torch.sigmoid(xr + rr)
                hs = z * hs + (1 - z) * torch.tanh(xh + rg * rh)
            else:
                hs = torch.tanh(xs[:, s] @ k + hs @ r + b)
            out[s] = hs
        return torch.stack(out, 1), hs

    def layer_norm(v, g, b, eps):
        mean, var = v.mean(-1, keepdim=True), v.var(-1, unbiased=False, keepdim=True)
        return (v - mean) / torch.sqrt(var + eps) * g + b

    for layer, v, _ in w.layers:
        cls, c = layer["class_name"], layer["config"]
        if cls == "Dense":
            h = act[name(c["activation"])](h @ t(v["vars/0"]) + t(v["vars/1"]))
        elif cls == "Activation":
            h = act[name(c["activation"])](h)
        elif cls == "Rescaling":
            h = h * c["scale"] + c.get("offset", 0.0)
        elif cls == "Conv2D":
            y = F.conv2d(h.permute(0, 3, 1, 2), t(v["vars/0"]).permute(3, 2, 0, 1), t(v["vars/1"]),
                         padding=c.get("padding", "valid"))
            h = act[name(c["activation"])](y.permute(0, 2, 3, 1))
        elif cls == "BatchNormalization":
            g, b, m, var = (t(v[f"vars/{i}"]) for i in range(4))
            h = (h - m) / torch.sqrt(var + c.get("epsilon", 1e-3)) * g + b
        elif cls == "Conv1D":
            y = F.conv1d(h.permute(0, 2, 1), t(v["vars/0"]).permute(2, 1, 0), t(v["vars/1"]), padding=c["padding"])
            h = act[name(c["activation"])](y.permute(0, 2, 1))
        elif cls == "LayerNormalization":
            h = layer_norm(h, t(v["vars/0"]), t(v["vars/1"]), c["epsilon"])
        elif cls in ("MaxPooling1D", "AveragePooling1D"):
            pool = F.max_pool1d if cls == "MaxPooling1D" else F.avg_pool1d
            h = pool(h.permute(0, 2, 1), c["pool_size"][0]).permute(0, 2, 1)
        elif cls in ("MaxPooling2D", "AveragePooling2D"):
            pool = F.max_pool2d if cls == "MaxPooling2D" else F.avg_pool2d
            h = pool(h.permute(0, 3, 1, 2), c["pool_size"]).permute(0, 2, 3, 1)
        elif cls == "Flatten":
            h = h.reshape(h.shape[0], -1)
        elif cls == "Reshape":
            h = h.reshape([h.shape[0]] + list(c["target_shape"]))
        elif cls == "GlobalMaxPooling1D":
            h = h.amax(1)
        elif cls in ("GlobalAveragePooling2D", "GlobalMaxPooling2D"):
            h = h.mean((1, 2)) if cls == "GlobalAveragePooling2D" else h.amax((1, 2))
        elif cls == "Embedding":
            h = t(v["vars/0"])[h.long()]
        elif cls in ("LSTM", "GRU", "SimpleRNN"):
            seq, last = run_rnn(cls, v, h, False)
            h = seq if c["return_sequences"] else last
        elif cls == "Bidirectional":
            icls, ic = c["layer"]["class_name"], c["layer"]["config"]
            fv = {k[len("forward_layer/"):]: a for k, a in v.items() if k.startswith("forward_layer/")}
            bv = {k[len("backward_layer/"):]: a for k, a in v.items() if k.startswith("backward_layer/")}
            fs, fl = run_rnn(icls, fv, h, False)
            bs, bl = run_rnn(icls, bv, h, True)
            h = torch.cat([fs, bs], -1) if ic["return_sequences"] else torch.cat([fl, bl], -1)
        elif cls == "TokenAndPositionEmbedding":
            ids = h.long()
            h = t(v["token_embedding/vars/0"])[ids] + t(v["position_embedding/vars/0"])[: ids.shape[1]]
        elif cls == "TransformerEncoder":
            a = "_self_attention_layer/"
            q, k_, val = (torch.einsum("bsh,hnd->bnsd", h, t(v[f"{a}{p}/vars/0"])) + t(v[f"{a}{p}/vars/1"])[None, :, None]
                          for p in ("query_dense", "key_dense", "value_dense"))
            scores = torch.softmax(q @ k_.transpose(-1, -2) / np.sqrt(q.shape[-1]), -1)
            attended = torch.einsum("bnsd,ndh->bsh", scores @ val, t(v[f"{a}output_dense/vars/0"]))
            attended = attended + t(v[f"{a}output_dense/vars/1"])
            eps = c.get("layer_norm_epsilon", 1e-5)
            h = layer_norm(h + attended, t(v["_self_attention_layer_norm/vars/0"]),
                           t(v["_self_attention_layer_norm/vars/1"]), eps)
            ff = act[name(c["activation"])](h @ t(v["_feedforward_intermediate_dense/vars/0"]) +
                                      t(v["_feedforward_intermediate_dense/vars/1"]))
            ff = ff @ t(v["_feedforward_output_dense/vars/0"]) + t(v["_feedforward_output_dense/vars/1"])
            h = layer_norm(h + ff, t(v["_feedforward_layer_norm/vars/0"]), t(v["_feedforward_layer_norm/vars/1"]), eps)
        elif cls == "GlobalAveragePooling1D":
            h = h.mean(1)
    return h.numpy()


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "compare":
        ref = np.loadtxt(sys.argv[2], delimiter=",", ndmin=2)
        with open(sys.argv[3], newline="") as f:
            rows = list(csv.reader(f))
        cols = [i for i, n in enumerate(rows[0]) if n.startswith("prob_")]
        got = np.array([[float(r[i]) for i in cols] for r in rows[1:]])
        diff = float(np.max(np.abs(got - ref)))
        print(f"{len(got)} rows, {got.shape[1]} outputs: max |predict - torch| = {diff:.3g}")
        sys.exit(0 if diff <= 1e-4 else 1)
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    with open(sys.argv[1]) as f:
        model = json.load(f)
    out = sys.argv[2]
    seed = int(sys.argv[3]) if len(sys.argv) == 4 else 7
    w, outputs = make_weights(model, seed)
    write_keras(model, w, os.path.join(out, "model.keras"))
    if not any(l["class_name"] in ("TokenAndPositionEmbedding", "TransformerEncoder") for l, _, _ in w.layers):
        write_h5(model, w, os.path.join(out, "model.h5"))
    rng = np.random.default_rng(seed + 1)
    shape = [64] + list(input_shape(model))
    first = layers_of(model)[0]
    ids = first["class_name"] in ("Embedding", "TokenAndPositionEmbedding")
    if ids:
        top = first["config"].get("input_dim", first["config"].get("vocabulary_size"))
        x = rng.integers(1, top, size=shape).astype(np.float32)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
    np.save(os.path.join(out, "x.npy"), x)
    np.save(os.path.join(out, "y.npy"), np.zeros(64, np.int64))
    try:
        import torch  # noqa: F401
    except ImportError:
        print("keras_files.py: no torch module (python3-torch): no reference written")
        return
    np.savetxt(os.path.join(out, "reference.csv"), reference(model, w, x.astype(np.float64)), delimiter=",")


if __name__ == "__main__":
    main()
