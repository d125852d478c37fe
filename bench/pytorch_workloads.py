#!/usr/bin/env python3
"""PyTorch (eager) side of bench/compare_pytorch.sh (CPU) and bench/compare_pytorch_gpu.sh (--device cuda).

Runs one benchmark workload and prints ONE line of JSON on stdout, in the same format as tensorctl's
build/bench/bench_workloads:

  {"workload": "mlp_digits_b32", "threads": 2, "value": 12345.6, "unit": "samples/s",
   "setting": "torch 2 x openblas 1", "reps": [...]}

Usage: pytorch_workloads.py --workload NAME --threads T

--threads sets torch's intra-op threads (torch.set_num_threads). Debian's PyTorch does its matrix products
in OpenBLAS, whose thread count torch does not control: it is read from OPENBLAS_NUM_THREADS, which has to be
set in the environment before this process starts (compare_pytorch.sh does that). The JSON "threads" field is
the larger of torch threads and OpenBLAS threads (the thread count T of compare_pytorch.sh's grid).

Training workloads report samples/s; infer_b1 reports microseconds per forward call (the better of eager
under torch.no_grad() and a torch.jit.trace'd module, named in "setting"). Training is likewise measured with
both of Adam's CPU implementations (the per-parameter loop and foreach=True, the multi-tensor one), the
better is reported; the two variants run in alternating repetitions within the process. Warm-up steps are
not timed; the value is the median of --reps repetitions (default 5) of the winning variant, all of which are
listed in "reps"; "variants" holds each variant's median.

With --device cuda the model lives on the GPU; each step's batch is copied there from host memory (as
tensorctl's bench_workloads --device cuda:0 feeds it), TF32 is off for matrix products and convolutions
(tensorctl's default), Adam's fused CUDA implementation joins the variants, and the clock stops after
torch.cuda.synchronize().
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time

import torch
from torch import nn

# name -> (kind, batch, steps per repetition, warm-up steps)
WORKLOADS = {
    "mlp_digits_b32": ("mlp64", 32, 200, 30),
    "mlp_digits_b256": ("mlp64", 256, 200, 30),
    "mlp784_b128": ("mlp784", 128, 30, 5),
    "cnn_digits_b64": ("cnn", 64, 200, 30),
    "infer_b1": ("infer", 1, 5000, 500),
    "mlp2048_b1024": ("mlp2048", 1024, 30, 5),
    "cnn_digits_b512": ("cnn", 512, 100, 10),
    "cnn32_b64": ("cnn32", 64, 10, 2),
    "cnn32_b256": ("cnn32", 256, 20, 3),
    "lstm_text_b64": ("lstm", 64, 5, 2),
    "lstm_infer_b1": ("lstm_infer", 1, 200, 20),
    "transformer_text_b32": ("transformer", 32, 5, 2),
}


def parametric_mlp(name):
    """mlp_W0-W1-...-Wn_bB (bench/scaling.sh): the widths, the batch, and steps for about 5 GFLOP each
    repetition, as tensorctl's bench_workloads picks them."""
    widths_text, batch_text = name[len("mlp_"):].rsplit("_b", 1)
    widths, batch = [int(w) for w in widths_text.split("-")], int(batch_text)
    step_flops = 6.0 * batch * sum(a * b for a, b in zip(widths, widths[1:]))
    steps = int(min(max(5e9 / step_flops, 5), 2000))
    return ("mlp:" + widths_text, batch, steps, max(1, steps // 5))
N_BATCHES = 16  # distinct random batches, cycled through


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(nn.ReLU())
    # No softmax layer: CrossEntropyLoss on the logits is softmax + sparse categorical cross-entropy.
    return nn.Sequential(*layers)


def cnn():
    # Input NCHW [batch, 1, 8, 8]; "same" padding for 3x3 is padding=1.
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),  # 32 x 2 x 2 = 128
        nn.Linear(128, 64), nn.ReLU(),
        nn.Linear(64, 10),
    )


def cnn32():
    # Input NCHW [batch, 3, 32, 32]; every convolution 3x3 "same" (padding=1).
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),  # 64 x 8 x 8 = 4096
        nn.Linear(4096, 256), nn.ReLU(),
        nn.Linear(256, 10),
    )


class TextLstm(nn.Module):
    """Embedding(20000, 128) - LSTM(128), its last output - Linear(128, 10): bench_workloads' lstm_text_b64."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(20000, 128)
        self.lstm = nn.LSTM(128, 128, batch_first=True)
        self.dense = nn.Linear(128, 10)

    def forward(self, ids):
        out, _ = self.lstm(self.embedding(ids))
        return self.dense(out[:, -1])


class TextTransformer(nn.Module):
    """Token and learned position embeddings (20000 x 128, 128 x 128) - two post-norm encoder layers (4 heads,
    feedforward 512, relu, no dropout) - the mean over the steps - Linear(128, 10): transformer_text_b32."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(20000, 128)
        self.positions = nn.Parameter(torch.zeros(128, 128).uniform_(-0.05, 0.05))
        layer = nn.TransformerEncoderLayer(128, 4, 512, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.dense = nn.Linear(128, 10)

    def forward(self, ids):
        return self.dense(self.encoder(self.tokens(ids) + self.positions).mean(1))


def make_model(kind):
    if kind.startswith("lstm"):
        return TextLstm(), (200,)
    if kind == "transformer":
        return TextTransformer(), (128,)
    if kind.startswith("mlp:"):
        widths = [int(w) for w in kind[len("mlp:"):].split("-")]
        return mlp(widths), (widths[0],)
    if kind == "cnn32":
        return cnn32(), (3, 32, 32)
    if kind in ("mlp64", "infer"):
        return mlp([64, 128, 64, 10]), (64,)
    if kind == "mlp784":
        return mlp([784, 512, 512, 10]), (784,)
    if kind == "mlp2048":
        return mlp([784, 2048, 2048, 10]), (784,)
    return cnn(), (1, 8, 8)


def random_batches(batch, example_shape, gen, token_ids=0):
    if token_ids:
        xs = [torch.randint(0, token_ids, (batch,) + example_shape, generator=gen) for _ in range(N_BATCHES)]
    else:
        xs = [torch.rand((batch,) + example_shape, generator=gen) * 2 - 1 for _ in range(N_BATCHES)]
    ys = [torch.randint(0, 10, (batch,), generator=gen) for _ in range(N_BATCHES)]
    return xs, ys


def bench_train(kind, batch, steps, warmup, reps, device="cpu", precision="float32", graphed=False):
    """Samples/s per repetition for each Adam implementation (single-tensor loop and multi-tensor foreach,
    and on a GPU the fused kernel), independent models trained in alternating repetitions. `precision`
    bfloat16 or float16 runs forward and loss under autocast (float16 with a GradScaler), and a CNN in
    channels_last; `graphed` captures the model's forward and backward with make_graphed_callables."""
    amp = {"bfloat16": torch.bfloat16, "float16": torch.float16}.get(precision)
    channels_last = amp is not None and kind.startswith("cnn")
    variants = {}
    kinds = [("adam single-tensor", {"foreach": False}), ("adam foreach", {"foreach": True})]
    if device != "cpu":
        kinds.append(("adam fused", {"fused": True}))
    for name, how in kinds:
        torch.manual_seed(1)
        gen = torch.Generator().manual_seed(1)
        model, shape = make_model(kind)
        model.to(device)
        if channels_last:
            model.to(memory_format=torch.channels_last)
        xs, ys = random_batches(batch, shape, gen, 20000 if kind.startswith(("lstm", "transformer")) else 0)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, **how)
        if graphed:
            model = torch.cuda.make_graphed_callables(model, (xs[0].to(device),))
        scaler = torch.amp.GradScaler("cuda") if amp is torch.float16 else None
        variants[name] = (model, opt, xs, ys, scaler)
    loss_fn = nn.CrossEntropyLoss()

    def run(name, n):
        model, opt, xs, ys, scaler = variants[name]
        for i in range(n):
            x, y = xs[i % N_BATCHES].to(device), ys[i % N_BATCHES].to(device)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            opt.zero_grad(set_to_none=True)
            with torch.autocast(torch.device(device).type, dtype=amp) if amp is not None else contextlib.nullcontext():
                loss = loss_fn(model(x), y)
            if scaler is None:
                loss.backward()
                opt.step()
            else:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
        return loss.item()  # waits for the GPU's queued work; eager CPU ops have finished already

    for name in variants:
        run(name, warmup)
    results = {name: [] for name in variants}
    for r in range(reps):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            t = time.perf_counter()
            run(name, steps)
            results[name].append(steps * batch / (time.perf_counter() - t))
    return results


def bench_infer(calls, warmup, reps, kind="infer"):
    gen = torch.Generator().manual_seed(1)
    model, shape = make_model(kind)
    model.eval()
    if kind == "lstm_infer":
        x = torch.randint(0, 20000, (1,) + shape, generator=gen)
    else:
        x = torch.rand((1,) + shape, generator=gen) * 2 - 1
    with torch.no_grad():
        traced = torch.jit.trace(model, (x,))
    fns = {"eager no_grad": model, "jit.trace": traced}
    results = {name: [] for name in fns}
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(warmup):
                fn(x)
        for r in range(reps):
            order = list(fns) if r % 2 == 0 else list(reversed(fns))
            for name in order:
                fn = fns[name]
                t = time.perf_counter()
                for _ in range(calls):
                    fn(x)
                results[name].append((time.perf_counter() - t) / calls * 1e6)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", required=True,
                    help="one of " + ", ".join(sorted(WORKLOADS)) + ", or mlp_W0-W1-...-Wn_bB")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for the GPU workloads")
    ap.add_argument("--precision", default="float32", choices=["float32", "bfloat16", "float16"],
                    help="autocast type (bench/compare_pytorch_gpu.sh's mixed-precision rows; bench/cpu_bf16.sh on the CPU)")
    ap.add_argument("--graphed", action="store_true",
                    help="forward and backward as CUDA graphs (torch.cuda.make_graphed_callables)")
    args = ap.parse_args()
    if args.device != "cpu":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    blas = os.environ.get("OPENBLAS_NUM_THREADS")
    if blas is None:
        print("pytorch_workloads.py: set OPENBLAS_NUM_THREADS before starting (OpenBLAS reads it at load)",
              file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(1)

    if args.workload in WORKLOADS:
        kind, batch, steps, warmup = WORKLOADS[args.workload]
    elif args.workload.startswith("mlp_") and "-" in args.workload:
        kind, batch, steps, warmup = parametric_mlp(args.workload)
    else:
        print(f"pytorch_workloads.py: unknown workload {args.workload}", file=sys.stderr)
        return 2
    if kind in ("infer", "lstm_infer"):
        results, unit = bench_infer(steps, warmup, args.reps, kind), "us/call"
        best = min(results, key=lambda k: statistics.median(results[k]))
    else:
        results, unit = bench_train(kind, batch, steps, warmup, args.reps, args.device, args.precision,
                                    args.graphed), "samples/s"
        best = max(results, key=lambda k: statistics.median(results[k]))
    values = results[best]
    setting = f"torch {args.threads} x openblas {blas}, {best}"
    if args.device != "cpu":
        setting = f"{torch.cuda.get_device_name()}, {best}"
    out = {
        "workload": args.workload,
        "threads": max(args.threads, int(blas)),
        "value": round(statistics.median(values), 3),
        "unit": unit,
        "setting": setting,
        "reps": [round(v, 3) for v in values],
        "torch": torch.__version__,
        "device": args.device,
        "precision": args.precision,
        "graphed": args.graphed,
    }
    out["variants"] = {k: round(statistics.median(v), 3) for k, v in results.items()}
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
