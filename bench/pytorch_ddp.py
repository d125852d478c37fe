#!/usr/bin/env python3
"""PyTorch side of bench/compare_data_parallel.sh: the MLP 784-512-512-10 trained with Adam (lr 1e-3,
eps 1e-7) at one global batch, on one process or on N processes with DistributedDataParallel over Gloo
(started with torch.multiprocessing on this machine), each process taking its 1/N of every batch; or Gloo's
all-reduce alone on a buffer of a given size.

Prints ONE line of JSON on stdout, in the format of tensorctl's bench_data_parallel:

  {"impl": "pytorch", "mode": "ddp", "replicas": 2, "batch": 256, "threads_per_replica": 1,
   "step_ms": 7.1, "samples_per_s": 36000.0}
  {"impl": "gloo", "ranks": 2, "bytes": 2672680, "gloo_us": 1800.0, "gloo_busbw_gbs": 1.48}

Usage: pytorch_ddp.py --world N [--threads T] [--batch 256] [--steps 20] [--rounds 5]
       pytorch_ddp.py --world N --allreduce BYTES [--reps 200]

A figure is the median over rounds of `steps` steps each (after 5 warm-up steps) of the time per step, as
rank 0 measures it. Debian's torch multiplies matrices in OpenBLAS, whose threads come from
OPENBLAS_NUM_THREADS (the calling script sets it equal to --threads).
"""
import argparse
import json
import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(rank, args, queue):
    torch.set_num_threads(args.threads)
    world = args.world
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(3)
    local = args.batch // world
    batches = []
    for _ in range(8):
        x = torch.randn(args.batch, 784, generator=g)
        y = torch.randint(0, 10, (args.batch,), generator=g)
        batches.append((x[rank * local:(rank + 1) * local].contiguous(), y[rank * local:(rank + 1) * local].contiguous()))

    step = 0

    def run(n):
        nonlocal step
        for _ in range(n):
            x, y = batches[step % 8]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            opt.step()
            step += 1

    run(5)
    times = []
    for _ in range(args.rounds):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        run(args.steps)
        times.append((time.perf_counter() - t0) / args.steps)
    if rank == 0:
        s = statistics.median(times)
        queue.put({"impl": "pytorch", "mode": "ddp" if world > 1 else "single", "replicas": world,
                   "batch": args.batch, "threads_per_replica": args.threads, "step_ms": round(s * 1e3, 4),
                   "samples_per_s": round(args.batch / s, 1)})
    if world > 1:
        dist.destroy_process_group()


def allreduce(rank, args, queue):
    torch.set_num_threads(args.threads)
    dist.init_process_group("gloo", rank=rank, world_size=args.world)
    t = torch.ones(args.allreduce // 4)
    for _ in range(10):
        dist.all_reduce(t)
    us = []
    for _ in range(args.reps):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        us.append((time.perf_counter() - t0) * 1e6)
    if rank == 0:
        m = statistics.median(us)
        factor = 2.0 * (args.world - 1) / args.world
        queue.put({"impl": "gloo", "ranks": args.world, "bytes": args.allreduce, "gloo_us": round(m, 2),
                   "gloo_busbw_gbs": round(args.allreduce * factor / m / 1e3, 3)})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--allreduce", type=int, default=0)
    p.add_argument("--reps", type=int, default=200)
    args = p.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    fn = allreduce if args.allreduce > 0 else train
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    if args.world == 1 and fn is train:
        train(0, args, queue)
    else:
        mp.spawn(fn, args=(args, queue), nprocs=args.world, join=True)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    main()
