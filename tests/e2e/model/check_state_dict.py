#!/usr/bin/python3
"""check_state_dict.py CHECKPOINT MODEL.pt REFERENCE_STATE.pt [--tol T]: scripts/load_checkpoint.py
loads the hpctrain checkpoint of a TorchScript run into the Python module MODEL.pt with
load_state_dict(strict=True) (every parameter and buffer, nothing missing or extra), and the
result equals REFERENCE_STATE.pt (what PyTorch training reached) within T (default 1e-5)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "scripts"))
import load_checkpoint  # noqa: E402

args = sys.argv[1:]
tol = 1e-5
if "--tol" in args:
    i = args.index("--tol")
    tol = float(args[i + 1])
    del args[i:i + 2]
module = torch.jit.load(args[1])
state = load_checkpoint.load_state_dict(args[0])
module.load_state_dict(state, strict=True)
reference = torch.load(args[2], weights_only=False)
loaded = module.state_dict()
assert sorted(loaded) == sorted(reference), (sorted(loaded), sorted(reference))
bad = []
for name in sorted(reference):
    a, b = loaded[name], reference[name]
    if a.dtype != b.dtype or a.shape != b.shape:
        bad.append((name, f"{a.dtype} {tuple(a.shape)} vs {b.dtype} {tuple(b.shape)}"))
        continue
    diff = (a.double() - b.double()).abs().max().item() if a.numel() else 0.0
    if diff > tol:
        bad.append((name, f"max abs difference {diff:.3g}"))
for name, why in bad:
    print(f"{name}: {why}")
print(f"load_state_dict(strict=True): {len(reference)} tensors, {len(bad)} differ beyond {tol}")
sys.exit(1 if bad else 0)
