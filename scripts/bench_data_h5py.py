#!/usr/bin/env python3
"""The h5py side of scripts/bench_data.sh: reads the same batches hpctrain's `bench data` read
(its --indices-out file: int64 global batches, warm-up steps first) from the same file, as one
data-parallel rank, and prints JSON timings.

Each batch is read the way h5py users do it fast: sorted indices, one fancy-indexing read of
/inputs and /labels, a 64 MiB chunk cache; "read+float32" also converts to scaled float32 as
hpctrain's reader returns it.
"""
import argparse
import json
import os
import time

import h5py
import numpy as np

p = argparse.ArgumentParser()
p.add_argument("--file", required=True)
p.add_argument("--indices", required=True)
p.add_argument("--batch", type=int, required=True, help="samples per rank")
p.add_argument("--ranks", type=int, default=1)
p.add_argument("--rank", type=int, default=0)
p.add_argument("--warmup", type=int, default=0)
p.add_argument("--cache-mb", type=int, default=64)
p.add_argument("--ready-dir", help="wait until every rank wrote its ready file here")
a = p.parse_args()

global_batch = a.batch * a.ranks
batches = np.fromfile(a.indices, dtype="<i8").reshape(-1, global_batch)
mine = [np.sort(b[a.rank * a.batch:(a.rank + 1) * a.batch]) for b in batches]
warm, timed = mine[:a.warmup], mine[a.warmup:]

f = h5py.File(a.file, "r", rdcc_nbytes=a.cache_mb << 20, rdcc_nslots=100003)
x, y = f["inputs"], f["labels"]
scale = float(x.attrs.get("scale", 1 / 255 if x.dtype == np.uint8 else 1.0))
for idx in warm:
    x[idx], y[idx]

if a.ready_dir:
    open(os.path.join(a.ready_dir, f"ready.{a.rank}"), "w").close()
    while len([n for n in os.listdir(a.ready_dir) if n.startswith("ready.")]) < a.ranks:
        time.sleep(0.001)

results = {}
for mode in ("read", "read+float32"):
    start = time.perf_counter()
    for idx in timed:
        inputs, labels = x[idx], y[idx]
        if mode == "read+float32":
            inputs = inputs.astype(np.float32) * np.float32(scale)
    results[mode] = time.perf_counter() - start
sample_bytes = int(np.prod(x.shape[1:])) * x.dtype.itemsize
print(json.dumps({"rank": a.rank, "steps": len(timed), "samples": len(timed) * a.batch,
                  "sample_bytes": sample_bytes, "seconds": results, "h5py": h5py.version.version,
                  "hdf5": h5py.version.hdf5_version}))
