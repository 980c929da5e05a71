#!/usr/bin/python3
"""Writes TorchScript versions of hpctrain's built-in Fashion-MNIST models, for
configs/fmnist-torchscript.yaml and scripts/bench_torchscript.sh:

    /usr/bin/python3 scripts/torchscript_models.py OUT_DIR     # OUT_DIR/mlp.pt, OUT_DIR/cnn.pt

mlp: 784-256-128-100-10 with ReLU (the built-in `mlp` defaults); cnn: conv5x5x32-pool-
conv5x5x64-pool-fc1024-fc10 with ReLU (the built-in `cnn` defaults). Same layer names as the
built-in models (fc1..., conv1...), so their checkpoints read the same way.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, 100)
        self.fc4 = nn.Linear(100, 10)

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
        self.fc1 = nn.Linear(64 * 7 * 7, 1024)
        self.fc2 = nn.Linear(1024, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    os.makedirs(sys.argv[1], exist_ok=True)
    torch.manual_seed(0)
    for name, module in (("mlp", Mlp()), ("cnn", Cnn())):
        path = os.path.join(sys.argv[1], f"{name}.pt")
        torch.jit.script(module).save(path)
        print("wrote", path)
