#!/usr/bin/python3
"""PyTorch reference for scripts/bench_train.sh: the same model, data file, batch size, optimizer,
ranks and threads as `hpctrain train`, trained with torch.nn.parallel.DistributedDataParallel
(gloo backend), one process per rank, one thread each.

    /usr/bin/python3 scripts/bench_train_torch.py --model mlp|cnn --ranks 2 --data DIR [--epochs 1]

Prints one JSON line: train samples/s (training loop only, like hpctrain's ledger), test accuracy.
"""
import argparse
import json
import os
import socket
import time

import h5py
import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 256), nn.Linear(256, 128)
        self.fc3, self.fc4 = nn.Linear(128, 100), nn.Linear(100, 10)

    def forward(self, x):
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = F.relu(self.fc3(x))
        return self.fc4(x)


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1, self.fc2 = nn.Linear(64 * 7 * 7, 1024), nn.Linear(1024, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load(path):
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(f["inputs"][...].astype(np.float32) / 255.0)
        y = torch.from_numpy(f["labels"][...].astype(np.int64))
    return x, y


def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    # TCPStore without libuv: its default since PyTorch 2.4, absent from Debian 13's build
    # (PyTorch 1.13 ignores the variable).
    os.environ.setdefault("USE_LIBUV", "0")
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    torch.manual_seed(args.seed)
    model = Mlp() if args.model == "mlp" else Cnn()
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    x, y = load(os.path.join(args.data, "train.h5"))
    dataset = torch.utils.data.TensorDataset(x, y)
    sampler = torch.utils.data.distributed.DistributedSampler(dataset, shuffle=True, seed=args.seed,
                                                              drop_last=True)
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, sampler=sampler,
                                         drop_last=True)
    samples = 0
    dist.barrier()
    start = time.perf_counter()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            opt.zero_grad()
            loss = F.cross_entropy(ddp(xb), yb)
            loss.backward()
            opt.step()
            samples += xb.shape[0] * args.ranks
    dist.barrier()
    seconds = time.perf_counter() - start
    # Test accuracy on rank 0 (batch 1000, no autograd).
    if rank == 0:
        xt, yt = load(os.path.join(args.data, "test.h5"))
        model.eval()
        correct = 0
        eval_start = time.perf_counter()
        with torch.no_grad():
            for i in range(0, len(yt), 1000):
                correct += (model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
        eval_seconds = time.perf_counter() - eval_start
        queue.put({"impl": "pytorch-ddp-gloo", "model": args.model, "ranks": args.ranks,
                   "train_samples_per_s": samples / seconds, "train_seconds": seconds,
                   "test_accuracy": correct / len(yt),
                   "eval_samples_per_s_1rank": len(yt) / eval_seconds})
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--data", default="data/fashion-mnist")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(args, port, queue), nprocs=args.ranks)
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    main()
