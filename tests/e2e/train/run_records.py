"""Reading a finished run for the training tests' checks (imported by the inline Python of
tests/e2e/train/loss_scale_test.sh and tests/e2e/model/llama_train_test.sh)."""
import json

import h5py
import numpy as np


def records(run):
    """{step: train record} of RUN/metrics.jsonl."""
    out = {}
    for line in open(f"{run}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") == "train":
            out[r["step"]] = r
    return out


def params(run, step):
    """{name: array} of the model tensors in RUN's checkpoint of STEP."""
    with h5py.File(f"{run}/checkpoints/step_{step:08d}/model.h5", "r") as f:
        return {k: f[k][()] for k in f}


def same(a, b):
    """The two parameter sets hold the same names and bit-identical values."""
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
