#!/usr/bin/python3
"""compare_losses.py METRICS.jsonl REFERENCE.json [--tol T] [--steps S]: the training loss
hpctrain logged at every step (logging.every_steps = 1) equals the reference's loss at that step
within T (default 1e-5). REFERENCE.json is torch_reference.py's output or another run's
metrics.jsonl. Exit 0 when all S steps match, 1 otherwise."""
import json
import sys


def losses(path):
    if path.endswith(".jsonl"):
        out = {}
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("type") == "train":
                    out[r["step"]] = r["loss"]
        return [out[s] for s in sorted(out)]
    with open(path) as f:
        return json.load(f)["losses"]


args = sys.argv[1:]
tol = 1e-5
steps = None
if "--tol" in args:
    i = args.index("--tol")
    tol = float(args[i + 1])
    del args[i:i + 2]
if "--steps" in args:
    i = args.index("--steps")
    steps = int(args[i + 1])
    del args[i:i + 2]
got, want = losses(args[0]), losses(args[1])
if steps is not None and (len(got) != steps or len(want) != steps):
    print(f"expected {steps} steps, got {len(got)} and {len(want)}")
    sys.exit(1)
worst = max(abs(g - w) for g, w in zip(got, want))
bad = [(s + 1, g, w) for s, (g, w) in enumerate(zip(got, want)) if abs(g - w) > tol]
for step, g, w in bad[:5]:
    print(f"step {step}: {g:.8f} vs {w:.8f} (difference {abs(g - w):.3g})")
print(f"{len(got)} steps compared, largest difference {worst:.3g}, {len(bad)} beyond {tol}")
sys.exit(1 if bad or len(got) != len(want) else 0)
