#!/usr/bin/python3
"""tensorctl's recurrent layers and TransformerEncoder against PyTorch's (Debian's python3-torch), forward and
gradients.

    recurrent_vs_torch.py TENSORCTL WORKDIR

For each case, writes a small sequence data set and a model (a recurrent layer, or a Bidirectional one, then
a Dense softmax; or a TransformerEncoder, against torch's TransformerEncoderLayer), trains it one epoch with tensorctl (SGD, the whole set as one batch), then resumes it for a
second epoch. The first epoch's weights W1 go into the matching torch modules, with Keras' layout converted
(transposed kernels; GRU gates z, r, h to torch's r, z, n; the LSTM's i, f, c, o are torch's i, f, g, o):
  - forward: `tensorctl predict` on the rows against torch's softmax, in float64;
  - gradients: (W1 - W2) / learning rate, tensorctl's gradient at W1 recovered from its SGD step, against
    torch's gradient of the mean cross-entropy at W1.
Prints the largest difference of each, relative to max(1, |torch|) for the outputs and to the largest
gradient element of the tensor for the gradients; exits 1 above 1e-5, 77 when torch is missing.
"""
import csv
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("recurrent_vs_torch.py: no torch module (Debian's python3-torch); skipped")
    sys.exit(77)

ROWS, STEPS, FEATURES, CLASSES = 12, 5, 3, 3  # a TransformerEncoder's width: FEATURES
# Large, so W1 - W2 holds the gradient to many digits; a TransformerEncoder's first step at 100 saturates its
# softmax output, so it takes 1 (W1 - W2 still within 3e-6 of the gradient: ulp(0.3) over gradients of 1e-2).
def learning_rate(layer):
    return 1.0 if layer["type"] == "TransformerEncoder" else 100.0
CASES = [
    {"type": "LSTM", "units": 4},
    {"type": "LSTM", "units": 3, "go_backwards": True},
    {"type": "GRU", "units": 4},
    {"type": "GRU", "units": 3, "go_backwards": True},
    {"type": "SimpleRNN", "units": 4},
    {"type": "SimpleRNN", "units": 3, "activation": "relu", "go_backwards": True},
    {"type": "Bidirectional", "layer": {"type": "LSTM", "units": 3, "return_sequences": True}, "merge_mode": "sum"},
    {"type": "Bidirectional", "layer": {"type": "GRU", "units": 3}, "merge_mode": "concat"},
    {"type": "TransformerEncoder", "intermediate_dim": 6, "num_heads": 3},
    {"type": "TransformerEncoder", "intermediate_dim": 5, "num_heads": 1, "normalize_first": True,
     "activation": "gelu"},
]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        raw = np.frombuffer(data[8 + size + begin:8 + size + end], dtype=np.float32)
        out[name] = raw.reshape(info["shape"]).astype(np.float64)
    return out


STEMS = {"LSTM": "lstm", "GRU": "gru", "SimpleRNN": "simple_rnn"}


def run(tensorctl, args, cwd):
    r = subprocess.run([tensorctl] + args, cwd=cwd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tensorctl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def torch_gate_order(cell, columns, units):
    """Torch's gate order as indices into Keras' columns: GRU r, z, n from Keras' z, r, h."""
    if cell != "GRU":
        return np.arange(columns)
    return np.concatenate([np.arange(units, 2 * units), np.arange(0, units), np.arange(2 * units, 3 * units)])


class Direction(torch.nn.Module):
    """One recurrent layer in Keras' semantics from its Keras weights; returns every step's output in the
    order it ran them (the last input first with go_backwards)."""

    def __init__(self, spec, weights, prefix):
        super().__init__()
        self.spec, cell, units = spec, spec["type"], spec["units"]
        kernel, recurrent = weights[prefix + "kernel"], weights[prefix + "recurrent_kernel"]
        bias = weights[prefix + "bias"]
        order = torch_gate_order(cell, kernel.shape[1], units)
        if cell == "LSTM":
            self.rnn = torch.nn.LSTM(kernel.shape[0], units, batch_first=True)
        elif cell == "GRU":
            self.rnn = torch.nn.GRU(kernel.shape[0], units, batch_first=True)
        else:
            self.rnn = torch.nn.RNN(kernel.shape[0], units, batch_first=True,
                                    nonlinearity=spec.get("activation", "tanh"))
        self.rnn.double()
        input_bias = bias[0] if cell == "GRU" else bias
        recurrent_bias = bias[1] if cell == "GRU" else np.zeros_like(bias)
        with torch.no_grad():
            for name, value in (("weight_ih_l0", kernel.T[order]), ("weight_hh_l0", recurrent.T[order]),
                                ("bias_ih_l0", input_bias[order]), ("bias_hh_l0", recurrent_bias[order])):
                getattr(self.rnn, name).copy_(torch.tensor(value))
        self.names = {"weight_ih_l0": prefix + "kernel", "weight_hh_l0": prefix + "recurrent_kernel",
                      "bias_ih_l0": prefix + "bias", "bias_hh_l0": prefix + "bias"}
        self.order = order

    def forward(self, x):
        if self.spec.get("go_backwards"):
            x = torch.flip(x, [1])
        return self.rnn(x)[0]

    def keras_grads(self):
        """The torch gradients in Keras' layout, by variable name."""
        inverse = np.argsort(self.order)
        g = {n: getattr(self.rnn, n).grad.numpy() for n in self.names}
        out = {self.names["weight_ih_l0"]: g["weight_ih_l0"][inverse].T,
               self.names["weight_hh_l0"]: g["weight_hh_l0"][inverse].T}
        if self.spec["type"] == "GRU":
            out[self.names["bias_ih_l0"]] = np.stack([g["bias_ih_l0"][inverse], g["bias_hh_l0"][inverse]])
        else:
            # Keras' one bias is torch's input bias (its recurrent bias, held at zero, gets the same gradient).
            out[self.names["bias_ih_l0"]] = g["bias_ih_l0"][inverse]
        return out


class Encoder(torch.nn.Module):
    """torch's TransformerEncoderLayer with tensorctl's TransformerEncoder weights (x W where torch computes
    x W^T: every kernel transposed; the query, key and value kernels stacked as torch's in_proj)."""

    def __init__(self, spec, weights):
        super().__init__()
        width = weights["transformer_encoder/query/kernel"].shape[0]
        self.layer = torch.nn.TransformerEncoderLayer(
            width, spec["num_heads"], spec["intermediate_dim"], dropout=0.0, activation=spec.get("activation", "relu"),
            layer_norm_eps=1e-5, batch_first=True, norm_first=spec.get("normalize_first", False))
        w = {k[len("transformer_encoder/"):]: v for k, v in weights.items() if k.startswith("transformer_encoder/")}
        self.sources = {
            "self_attn.in_proj_weight": (["query/kernel", "key/kernel", "value/kernel"], True),
            "self_attn.in_proj_bias": (["query/bias", "key/bias", "value/bias"], False),
            "self_attn.out_proj.weight": (["attention_output/kernel"], True),
            "self_attn.out_proj.bias": (["attention_output/bias"], False),
            "norm1.weight": (["self_attention_layer_norm/gamma"], False),
            "norm1.bias": (["self_attention_layer_norm/beta"], False),
            "norm2.weight": (["feedforward_layer_norm/gamma"], False),
            "norm2.bias": (["feedforward_layer_norm/beta"], False),
            "linear1.weight": (["feedforward_intermediate_dense/kernel"], True),
            "linear1.bias": (["feedforward_intermediate_dense/bias"], False),
            "linear2.weight": (["feedforward_output_dense/kernel"], True),
            "linear2.bias": (["feedforward_output_dense/bias"], False),
        }
        params = dict(self.layer.named_parameters())
        with torch.no_grad():
            for name, (parts, transposed) in self.sources.items():
                value = np.concatenate([w[p].T if transposed else w[p] for p in parts], axis=0)
                params[name].copy_(torch.tensor(value))

    def forward(self, x):
        return self.layer(x)

    def keras_grads(self):
        params, out = dict(self.layer.named_parameters()), {}
        for name, (parts, transposed) in self.sources.items():
            g = params[name].grad.numpy()
            for i, part in enumerate(np.split(g, len(parts), axis=0)):
                out["transformer_encoder/" + parts[i]] = part.T if transposed else part
        return out


class Model(torch.nn.Module):
    def __init__(self, layer, weights):
        super().__init__()
        self.layer = layer
        if layer["type"] == "TransformerEncoder":
            self.directions = torch.nn.ModuleList([Encoder(layer, weights)])
            self.sequences = True
        elif layer["type"] == "Bidirectional":
            inner, name = dict(layer["layer"]), STEMS[layer["layer"]["type"]]
            backward = dict(inner, go_backwards=not inner.get("go_backwards", False))
            self.directions = torch.nn.ModuleList([
                Direction(inner, weights, f"bidirectional/forward_{name}/"),
                Direction(backward, weights, f"bidirectional/backward_{name}/")])
            self.sequences = inner.get("return_sequences", False)
        else:
            self.directions = torch.nn.ModuleList([Direction(layer, weights, STEMS[layer["type"]] + "/")])
            self.sequences = layer.get("return_sequences", False)
        self.dense_kernel = torch.tensor(weights["dense/kernel"], requires_grad=True)
        self.dense_bias = torch.tensor(weights["dense/bias"], requires_grad=True)

    def forward(self, x):
        outs = [d(x) for d in self.directions]
        if self.layer["type"] == "TransformerEncoder":
            return outs[0].reshape(outs[0].shape[0], -1) @ self.dense_kernel + self.dense_bias
        if len(outs) == 2 and self.sequences:
            outs[1] = torch.flip(outs[1], [1])  # the backward layer's outputs back in input order
        outs = [o if self.sequences else o[:, -1] for o in outs]
        if len(outs) == 2:
            merge = self.layer.get("merge_mode", "concat")
            y = torch.cat(outs, -1) if merge == "concat" else outs[0] + outs[1]
        else:
            y = outs[0]
        if self.sequences:
            y = y.reshape(y.shape[0], -1)
        return y @ self.dense_kernel + self.dense_bias

    def keras_grads(self):
        out = {"dense/kernel": self.dense_kernel.grad.numpy(), "dense/bias": self.dense_bias.grad.numpy()}
        for d in self.directions:
            out.update(d.keras_grads())
        return out


def check_case(tensorctl, work, index, layer):
    case = os.path.join(work, f"case{index}")
    shutil.rmtree(case, ignore_errors=True)
    os.makedirs(case)
    rng = np.random.default_rng(100 + index)
    x = rng.uniform(-2, 2, (ROWS, STEPS, FEATURES))
    labels = np.arange(ROWS) % CLASSES
    columns = [f"x{i}" for i in range(STEPS * FEATURES)]
    with open(os.path.join(case, "data.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns + ["label"])
        for r in range(ROWS):
            w.writerow([repr(float(v)) for v in x[r].reshape(-1)] + [int(labels[r])])
    layers = [layer]
    sequences = layer["type"] == "TransformerEncoder" or layer.get(
        "return_sequences", layer.get("layer", {}).get("return_sequences", False))
    if sequences:
        layers.append({"type": "Flatten"})
    layers.append({"type": "Dense", "units": CLASSES, "activation": "softmax"})
    spec = {"name": "vs_torch", "input_shape": [STEPS, FEATURES], "layers": layers}
    config = {"model": "model.json",
              "data": {"csv": "data.csv", "test_split": 0, "validation_split": 0, "shuffle": False,
                       "standardize": False},
              "loss": "sparse_categorical_crossentropy", "optimizer": {"type": "sgd", "learning_rate": learning_rate(layer)},
              "epochs": 1, "batch_size": ROWS, "seed": 3}
    json.dump(spec, open(os.path.join(case, "model.json"), "w"))
    json.dump(config, open(os.path.join(case, "config.json"), "w"))
    run(tensorctl, ["train", "config.json", "--quiet", "--output", "one"], case)
    shutil.copytree(os.path.join(case, "one"), os.path.join(case, "two"))
    run(tensorctl, ["train", "config.json", "--quiet", "--resume", "two", "--epochs", "2"], case)
    w1 = read_safetensors(os.path.join(case, "one", "weights.safetensors"))
    w2 = read_safetensors(os.path.join(case, "two", "weights.safetensors"))
    with open(os.path.join(case, "rows.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(columns)
        for r in range(ROWS):
            w.writerow([repr(float(v)) for v in x[r].reshape(-1)])
    run(tensorctl, ["predict", "--run", "one", "--input", "rows.csv", "--output", "predictions.csv"], case)
    with open(os.path.join(case, "predictions.csv")) as f:
        rows = list(csv.reader(f))
    probability_columns = [i for i, name in enumerate(rows[0]) if name.startswith("prob_")]
    predicted = np.array([[float(row[i]) for i in probability_columns] for row in rows[1:]])

    model = Model(layer, w1)
    logits = model(torch.tensor(x))
    probabilities = torch.softmax(logits, -1).detach().numpy()
    torch.nn.functional.cross_entropy(logits, torch.tensor(labels)).backward()
    forward = np.max(np.abs(predicted - probabilities) / np.maximum(1.0, np.abs(probabilities)))
    grads = model.keras_grads()
    largest = max(np.max(np.abs(g)) for g in grads.values())
    worst = ("", 0.0)
    for name, g in grads.items():
        ours = (w1[name] - w2[name]) / learning_rate(layer)
        # Relative to the tensor's largest element, but not below 1e-2 of the model's largest: a key bias's
        # true gradient is zero (adding the same to every key moves no softmax), and ours its rounding.
        error = np.max(np.abs(ours - g)) / max(np.max(np.abs(g)), 1e-2 * largest)
        worst = max(worst, (name, error), key=lambda t: t[1])
    print(f"{json.dumps(layer)}: outputs {forward:.2e}, gradients {worst[1]:.2e} (worst {worst[0]})")
    return forward <= 1e-5 and worst[1] <= 1e-5


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tensorctl, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    torch.set_default_dtype(torch.float64)
    ok = all([check_case(tensorctl, work, i, layer) for i, layer in enumerate(CASES)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
