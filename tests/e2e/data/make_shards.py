#!/usr/bin/python3
"""make_shards.py OUTDIR: a classification dataset written by h5py as 50 shard files of uneven
sizes (OUTDIR/shards/shard-NNN.h5), the same samples in one file (OUTDIR/all.h5, the shards
concatenated in name order), a second source (OUTDIR/other/part-N.h5), and a broken set
(OUTDIR/bad/) whose shard-031.h5 has another sample shape."""
import os
import shutil
import sys

import h5py
import numpy as np

out = sys.argv[1]
rng = np.random.default_rng(31)
sizes = [10 + (7 * i) % 9 for i in range(50)]
os.makedirs(f"{out}/shards", exist_ok=True)
xs, ys = [], []
for i, n in enumerate(sizes):
    x = rng.standard_normal((n, 16)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    xs.append(x)
    ys.append(y)
    with h5py.File(f"{out}/shards/shard-{i:03d}.h5", "w") as f:
        f["inputs"] = x
        f.create_dataset("labels", data=y).attrs["num_classes"] = 10
with h5py.File(f"{out}/all.h5", "w") as f:
    f["inputs"] = np.concatenate(xs)
    f.create_dataset("labels", data=np.concatenate(ys)).attrs["num_classes"] = 10
os.makedirs(f"{out}/other", exist_ok=True)
for i in range(3):
    with h5py.File(f"{out}/other/part-{i}.h5", "w") as f:
        f["inputs"] = rng.standard_normal((40, 16)).astype(np.float32)
        f.create_dataset("labels", data=rng.integers(0, 10, 40)).attrs["num_classes"] = 10
shutil.copytree(f"{out}/shards", f"{out}/bad")
with h5py.File(f"{out}/bad/shard-031.h5", "w") as f:
    f["inputs"] = np.zeros((12, 17), np.float32)
    f.create_dataset("labels", data=np.zeros(12, np.int64)).attrs["num_classes"] = 10
print(sum(sizes))
