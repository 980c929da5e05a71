#!/usr/bin/python3
"""compare_checkpoints.py A B [--tol T]: the model tensors of two checkpoints (directories or run
directories, whose latest checkpoint is used) are bitwise identical, or within T when given.
Exit 0 when they match, 1 otherwise (printing the largest differences)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint  # noqa: E402

args = sys.argv[1:]
tol = None
if "--tol" in args:
    i = args.index("--tol")
    tol = float(args[i + 1])
    del args[i:i + 2]
# numpy arrays (bfloat16 widened exactly to float32): no torch import, for a check tests make often.
a = load_checkpoint.load_arrays(args[0])
b = load_checkpoint.load_arrays(args[1])
assert sorted(a) == sorted(b), (sorted(a), sorted(b))
bad = []
for name in sorted(a):
    x, y = a[name], b[name]
    assert x.shape == y.shape and x.dtype == y.dtype, (name, x.shape, x.dtype, y.shape, y.dtype)
    diff = float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) if x.size else 0.0
    same = diff <= tol if tol is not None else bool((x == y).all())
    if not same:
        bad.append((name, diff))
for name, diff in bad:
    print(f"{name}: max abs difference {diff:.3g}")
print(f"{len(a)} tensors compared, {len(bad)} differ" + (f" beyond {tol}" if tol else " bitwise"))
sys.exit(1 if bad else 0)
