#!/usr/bin/python3
"""PyTorch reference for scripts/bench_eval.sh: evaluates the weights of an hpctrain checkpoint
(loaded with h5py through scripts/load_checkpoint.py) on an HDF5 data file read with h5py, the
way `hpctrain eval` does it: the same canonical batches [i*B, (i+1)*B), rank r of R takes the
contiguous block of batches [r*nb/R, (r+1)*nb/R), one process per rank pinned to its own core,
one thread each, inference mode, loss and correct counts summed in double precision in batch
order.

    /usr/bin/python3 scripts/bench_eval_torch.py --checkpoint CKPT --data test.h5 --batch 1000 --ranks 2

Prints one JSON line: samples, loss, accuracy, seconds (slowest rank, the evaluation loop with its
reads), samples/s.
"""
import argparse
import json
import os
import sys
import time

import h5py
import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import load_checkpoint  # noqa: E402


class Mlp(nn.Module):
    def __init__(self, m):
        super().__init__()
        sizes = [m.get("in_features", 784)] + list(m.get("hidden", [256, 128, 100])) + \
            [m.get("num_classes", 10)]
        for i in range(len(sizes) - 1):
            self.add_module(f"fc{i + 1}", nn.Linear(sizes[i], sizes[i + 1]))
        self.n = len(sizes) - 1

    def forward(self, x):
        x = x.flatten(1)
        for i in range(self.n):
            x = getattr(self, f"fc{i + 1}")(x)
            if i + 1 < self.n:
                x = F.relu(x)
        return x


class Cnn(nn.Module):
    def __init__(self, m):
        super().__init__()
        c, h, w = m.get("input_shape", [1, 28, 28])
        k = m.get("kernel", 5)
        self.shape = (c, h, w)
        self.channels = list(m.get("channels", [32, 64]))
        for i, out in enumerate(self.channels):
            self.add_module(f"conv{i + 1}", nn.Conv2d(c, out, k, padding=k // 2))
            c, h, w = out, h // 2, w // 2
        self.fc1 = nn.Linear(c * h * w, m.get("fc", 1024))
        self.fc2 = nn.Linear(m.get("fc", 1024), m.get("num_classes", 10))

    def forward(self, x):
        x = x.reshape(x.shape[0], *self.shape)
        for i in range(len(self.channels)):
            x = F.max_pool2d(F.relu(getattr(self, f"conv{i + 1}")(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def build(ckpt):
    with open(os.path.join(ckpt, "config.yaml")) as f:
        model = yaml.safe_load(f)["model"]
    net = {"mlp": Mlp, "cnn": Cnn}[model["name"]](model)
    net.load_state_dict(load_checkpoint.load_state_dict(ckpt))
    return net.eval()


def worker(rank, args, queue):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    net = build(args.checkpoint)
    with h5py.File(args.data, "r", rdcc_nbytes=256 << 20) as f:
        inputs, labels = f["inputs"], f["labels"]
        scale = float(inputs.attrs.get("scale", 1 / 255 if inputs.dtype == np.uint8 else 1.0))
        n = inputs.shape[0] if args.max_samples <= 0 else min(args.max_samples, inputs.shape[0])
        nb = (n + args.batch - 1) // args.batch
        first, last = nb * rank // args.ranks, nb * (rank + 1) // args.ranks
        rows = []
        start = time.perf_counter()
        with torch.inference_mode():
            for b in range(first, last):
                lo, hi = b * args.batch, min(n, (b + 1) * args.batch)
                x = torch.from_numpy((inputs[lo:hi] * scale).astype(np.float32))
                y = torch.from_numpy(labels[lo:hi].astype(np.int64))
                logits = net(x)
                loss = F.cross_entropy(logits, y, reduction="sum")
                rows.append((b, float(loss), int((logits.argmax(1) == y).sum()), hi - lo))
        seconds = time.perf_counter() - start
    queue.put((rank, seconds, rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-samples", type=int, default=0)
    args = parser.parse_args()
    args.checkpoint = load_checkpoint.checkpoint_dir(args.checkpoint)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    rows = sorted(row for _, _, rs in results for row in rs)
    seconds = max(s for _, s, _ in results)
    loss = sum(r[1] for r in rows)
    correct = sum(r[2] for r in rows)
    samples = sum(r[3] for r in rows)
    print(json.dumps({"samples": samples, "loss": loss / samples, "accuracy": correct / samples,
                      "seconds": seconds, "samples_per_s": samples / seconds}))


if __name__ == "__main__":
    main()
