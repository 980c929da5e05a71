#!/usr/bin/python3
"""torch_reference.py MODEL.pt TRAIN.h5 --ranks R --batch B --steps S --seed SEED --lr LR
   --out OUT.json [--state OUT_STATE.pt] [--adam torch|hpctrain|hpctrain,torch]

Trains the scripted module MODEL.pt in plain PyTorch the way hpctrain trains it on R
data-parallel ranks: global batch s of the sample order of docs/DATA.md (scripts/data_order.py),
rank r's contiguous slice of B samples, each rank's forward in training mode on its slice only
(its own BatchNorm batch statistics and running statistics; every rank's dropout draws from the
same generator state, as every hpctrain rank seeds LibTorch's generator with run.seed), the mean
over ranks of the per-rank mean-loss gradients, then torch.optim.Adam. Writes the global loss of
every step and, with --state, the state_dict dp rank 0 ends with (what hpctrain saves).

--adam hpctrain replaces torch.optim.Adam by the arithmetic of hpctrain's fused Adam
(src/train/optimizer.cpp: the same float32 operations in the same order, no fused multiply-add),
so that where forward and backward run the same LibTorch kernels the two trainings are equal bit
for bit. torch.optim.Adam computes the same rule with other roundings (m = b1*m then += (1-b1)*g;
sqrt(v)/sqrt(bc2) instead of sqrt(v)*(1/sqrt(bc2))): 1-ulp differences that normally stay at
~1e-7, but that can flip a discrete decision of the network (a ReLU input or a max-pool winner
within an ulp of its rival) and then grow to ~1e-4 in 20 steps, as they do when oneDNN runs its
SSE4.1 kernels (docs/MODELS.md).

A comma-separated --adam trains once per optimizer, each from the module as saved, in one process
(importing torch once); "{adam}" in --out and --state names each one's files.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np
import torch

# Plain kernels, as hpctrain runs the module: PyTorch 2.x's profiling executor would otherwise
# compile fused kernels with LLVM at every new shape (minutes per run with Debian 13's torch).
torch._C._jit_override_can_fuse_on_cpu(False)
torch._C._jit_set_texpr_fuser_enabled(False)
# The same CPU convolution kernels as hpctrain, for a bitwise comparison: without oneDNN on
# PyTorch 2.x unless HPCTRAIN_CPU_ONEDNN says otherwise (include/hpctrain/compat/torch_version.hpp).
_onednn = os.environ.get("HPCTRAIN_CPU_ONEDNN")
torch.backends.mkldnn.enabled = (
    int(torch.__version__.split(".")[0]) < 2 if _onednn is None else _onednn != "0")
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import data_order  # noqa: E402


def read_inputs(f, indices):
    x = f["inputs"]
    rows = np.stack([x[i] for i in indices])
    if x.dtype == np.uint8:
        scale = float(x.attrs.get("scale", f.attrs.get("scale", 1.0 / 255.0)))
        # hpctrain maps each byte through float(v * scale), the product taken in double.
        lut = (np.arange(256, dtype=np.float64) * scale).astype(np.float32)
        return torch.from_numpy(lut[rows])
    return torch.from_numpy(rows.astype(np.float32))


class HpctrainAdam:
    """hpctrain's fused Adam (betas 0.9/0.999, eps 1e-8, no weight decay) in numpy float32, one
    rounding per operation in the order src/train/optimizer.cpp's adam_range computes them."""

    def __init__(self, params, lr):
        self.params, self.lr, self.steps = params, lr, 0
        self.m = [np.zeros(q.shape, np.float32) for q in params]
        self.v = [np.zeros(q.shape, np.float32) for q in params]

    def zero_grad(self):
        for q in self.params:
            q.grad = None

    def step(self):
        self.steps += 1
        beta1, beta2 = 0.9, 0.999
        b1, b2 = np.float32(beta1), np.float32(beta2)
        c1, c2 = np.float32(1) - b1, np.float32(1) - b2
        step = np.float32(self.lr / (1 - beta1 ** self.steps))
        inv = np.float32(1.0 / np.sqrt(1 - beta2 ** self.steps))
        eps = np.float32(1e-8)
        with torch.no_grad():
            for q, m, v in zip(self.params, self.m, self.v):
                g = q.grad.numpy()
                m[...] = b1 * m + c1 * g
                v[...] = b2 * v + c2 * g * g
                q.copy_(torch.from_numpy(q.detach().numpy() - step * m / (np.sqrt(v) * inv + eps)))


def train(a, adam):
    """One training run from the module as saved, with the optimizer `adam`; writes its files."""
    module = torch.jit.load(a.model)
    module.train()
    buffer_names = [n for n, _ in module.named_buffers()]
    # Every rank starts from rank 0's buffers and then keeps its own.
    rank_buffers = [{n: b.clone() for n, b in module.named_buffers()} for _ in range(a.ranks)]
    params = [q for _, q in module.named_parameters()]
    opt = torch.optim.Adam(params, lr=a.lr) if adam == "torch" else HpctrainAdam(params, a.lr)
    torch.manual_seed(a.seed)
    losses = []
    with h5py.File(a.data, "r") as f:
        n = f["labels"].shape[0]
        labels = f["labels"][:]
        batches = data_order.global_batches(n, a.batch * a.ranks, a.seed, True, a.steps)
        for step, batch in enumerate(batches):
            opt.zero_grad()
            rng = torch.get_rng_state()
            total = 0.0
            for r in range(a.ranks):
                idx = batch[r * a.batch:(r + 1) * a.batch]
                x = read_inputs(f, idx)
                y = torch.from_numpy(labels[idx].astype(np.int64))
                with torch.no_grad():
                    for name, value in rank_buffers[r].items():
                        dict(module.named_buffers())[name].copy_(value)
                torch.set_rng_state(rng)
                logits = module(x)
                loss_sum = F.cross_entropy(logits, y, reduction="sum")
                (loss_sum / a.batch / a.ranks).backward()
                total += loss_sum.item()
                rank_buffers[r] = {n: b.clone() for n, b in module.named_buffers()}
            opt.step()
            losses.append(total / (a.batch * a.ranks))
    with torch.no_grad():
        for name, value in rank_buffers[0].items():
            dict(module.named_buffers())[name].copy_(value)
    with open(a.out.replace("{adam}", adam), "w") as out:
        json.dump({"losses": losses, "buffers": buffer_names}, out)
    if a.state:
        torch.save(module.state_dict(), a.state.replace("{adam}", adam))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("data")
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--batch", type=int, required=True, help="samples per rank")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--out", required=True)
    p.add_argument("--state")
    p.add_argument("--adam", default="torch", help="torch, hpctrain, or both comma-separated")
    a = p.parse_args()
    adams = a.adam.split(",")
    if not adams or any(x not in ("torch", "hpctrain") for x in adams):
        p.error(f"--adam {a.adam}: torch, hpctrain or both")
    if len(adams) > 1 and "{adam}" not in a.out:
        p.error("several --adam need {adam} in --out (and --state)")
    torch.set_num_threads(1)
    for adam in adams:
        train(a, adam)


if __name__ == "__main__":
    main()
