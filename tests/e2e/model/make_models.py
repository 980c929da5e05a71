#!/usr/bin/python3
"""make_models.py OUT_DIR: defines and scripts the test's user models in PyTorch and saves them
as TorchScript (OUT_DIR/<name>.pt), as a user of hpctrain would. Nothing binary is committed:
the test writes them every run.

  cnn     conv-BatchNorm-ReLU-pool x2, dropout, linear (Fashion-MNIST 1x28x28 -> 10 logits); the
          convolutions have no bias, as usual before BatchNorm: such a bias gets only rounding
          noise as gradient, which Adam scales up to full steps, so its value would be arbitrary
  resmlp  linear, two pre-norm residual blocks (LayerNorm, linear-ReLU-linear), linear
  linear  one linear map 4 -> 2 (regression)
and, for the error cases:
  traced      the cnn traced with torch.jit.trace in training mode (dropout/BatchNorm frozen)
  two_inputs  forward(x, y) (a signature hpctrain cannot call)
  wrong_shape a classifier returning [B] instead of [B, C]
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, padding=1, bias=False)  # BatchNorm follows
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 8, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(8 * 7 * 7, 10)

    def forward(self, x):
        x = x.reshape(x.shape[0], 1, 28, 28)
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(self.drop(x.flatten(1)))


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(self.norm(x))))


class ResMlp(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        self.inp = nn.Linear(784, width)
        self.blocks = nn.ModuleList([Block(width) for _ in range(2)])
        self.out = nn.Linear(width, 10)

    def forward(self, x):
        x = F.relu(self.inp(x.flatten(1)))
        for block in self.blocks:
            x = block(x)
        return self.out(x)


class Linear(nn.Module):
    def __init__(self):
        super().__init__()
        self.map = nn.Linear(4, 2)

    def forward(self, x):
        return self.map(x)


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x, y):
        return self.fc(x.flatten(1)) + y


class WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(784, 10)

    def forward(self, x):
        return self.fc(x.flatten(1)).sum(1)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    torch.jit.script(Cnn()).save(os.path.join(out, "cnn.pt"))
    torch.jit.script(ResMlp()).save(os.path.join(out, "resmlp.pt"))
    torch.jit.script(Linear()).save(os.path.join(out, "linear.pt"))
    torch.jit.trace(Cnn().train(), torch.zeros(2, 1, 28, 28), check_trace=False).save(os.path.join(out, "traced.pt"))
    torch.jit.script(TwoInputs()).save(os.path.join(out, "two_inputs.pt"))
    torch.jit.script(WrongShape()).save(os.path.join(out, "wrong_shape.pt"))
    print("saved", sorted(os.listdir(out)))


if __name__ == "__main__":
    main()
