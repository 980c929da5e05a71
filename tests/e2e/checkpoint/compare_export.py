"""Compares what scripts/load_checkpoint.py loads with the logical values the driver saved, and
(optionally) with the state_dict its --save wrote, read back with torch.load.

    compare_export.py CHECKPOINT EXPECTED_JSON [SAVED_PT]
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint  # noqa: E402

ckpt, expected_path = sys.argv[1], sys.argv[2]
expected = json.load(open(expected_path))
loaded = {"model/" + k: v for k, v in load_checkpoint.load_state_dict(ckpt).items()}
for group, tensors in load_checkpoint.load_optimizer_state(ckpt).items():
    for name, t in tensors.items():
        loaded["optimizer/" + (group + "/" + name if name != group else group)] = t
failures = 0
if sorted(loaded) != sorted(expected):
    print(f"FAIL: names {sorted(loaded)} != {sorted(expected)}")
    failures += 1
for name, e in expected.items():
    t = loaded.get(name)
    if t is None:
        continue
    dtype = getattr(torch, {"Float": "float32", "Double": "float64", "Half": "float16",
                            "BFloat16": "bfloat16", "Long": "int64"}[e["dtype"]])
    want = torch.tensor(e["values"], dtype=torch.float64).view(e["shape"]).to(dtype)
    if t.dtype != dtype or list(t.shape) != e["shape"] or not torch.equal(t, want):
        print(f"FAIL: {name}: loaded {t.dtype} {list(t.shape)}\n{t}\nexpected {dtype}\n{want}")
        failures += 1
if len(sys.argv) > 3:
    saved = torch.load(sys.argv[3], weights_only=False)["model"]
    model = load_checkpoint.load_state_dict(ckpt)
    if list(saved) != list(model) or not all(torch.equal(saved[k], model[k]) for k in saved):
        print(f"FAIL: torch.load({sys.argv[3]}) differs from the checkpoint's state_dict")
        failures += 1
    else:
        print(f"torch.load of {sys.argv[3]}: the same {len(saved)} tensors")
print(f"{len(expected)} tensors compared, {failures} failure(s)")
sys.exit(1 if failures else 0)
