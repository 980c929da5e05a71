#!/usr/bin/env bash
# hpctrain plan --device-memory names the least-communicating layout that fits (docs/PLAN.md,
# "Choosing a layout"): gpt-medium on 64 devices, 8 per node. With room for everything it is the
# plain all-reduce (parallel.shard=none); with memory between the smallest full-sharding peak and
# the smallest peak of every other mode, full sharding; with room for full sharding within a node
# but not for the other modes at the tp and recompute that communicate less, the hybrid group.
# The memory sizes are derived from the plan's own figures, not written in.
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/gpt-medium.yaml" --samples 4096 --eval-samples 64
  --devices 64 --devices-per-node 8)

# Everything fits in 80 GiB: no sharding, no tp, no recomputation.
expect_exit 0 "$TMP/roomy.json" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory 80GiB --json
# Nothing fits in 1 byte: the best of each mode is then its smallest peak.
expect_exit 0 "$TMP/tiny.json" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory 1 --json
between=$($PY - "$TMP/roomy.json" "$TMP/tiny.json" <<'PY'
import json, sys
roomy = json.load(open(sys.argv[1]))["memory"]["layout"]
c = roomy["chosen"]
assert c["settings"] == "parallel.shard=none parallel.tp=1 model.recompute=none", c
assert c["shard"] == "none" and c["bytes_per_parameter"] == 16 and c["fits"], c
# The all-reduce sends 2 x 4 bytes x N x 63/64, the least of every mode's best.
n = c["parameters_per_device"]
assert abs(c["communication_bytes_per_step"]["total"] - 2 * 4 * n * 63 / 64) < 1e-6 * n, c
for mode, best in roomy["best_of_each_shard"].items():
    assert best["fits"] and best["communication_bytes_per_step"]["total"] >= c["communication_bytes_per_step"]["total"], best
tiny = json.load(open(sys.argv[2]))["memory"]["layout"]
assert tiny["chosen"] is None, tiny
peaks = {m: b["peak_bytes"] for m, b in tiny["best_of_each_shard"].items()}
others = min(peaks["none"], peaks["optimizer"], peaks["gradients"])
assert peaks["full"] < others, peaks
print(int((peaks["full"] + others) / 2))
PY
) || fail "roomy and tiny layouts"

# Between the two: only full sharding fits, and the plan says which and why.
expect_exit 0 "$TMP/full.json" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory "$between" --json
$PY - "$TMP/full.json" "$between" <<'PY' || fail "only full fits"
import json, sys
layout = json.load(open(sys.argv[1]))["memory"]["layout"]
memory = float(sys.argv[2])
c = layout["chosen"]
assert c["shard"] == "full" and c["fits"] and c["peak_bytes"] <= memory, c
assert c["settings"].startswith("parallel.shard=full parallel.shard_group="), c
s = c["shard_group"]
assert abs(c["bytes_per_parameter"] - 16 / s) < 1e-12, c
for mode in ("none", "optimizer", "gradients"):
    assert not layout["best_of_each_shard"][mode]["fits"], layout["best_of_each_shard"][mode]
PY
expect_exit 0 "$TMP/full.txt" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory "$between"
expect_grep "^  chosen: +parallel.shard=full parallel.shard_group=" "$TMP/full.txt"
expect_grep "^  its peak .*state \+ .*activations \+ .*gathered units \+ .*their gradients = " "$TMP/full.txt"
expect_grep "^  best with parallel.shard=gradients: .*\(too big\)" "$TMP/full.txt"

# Hybrid: micro-batches of 32 sequences make tp's activation all-reduces dear. Full sharding
# within a node (8 ranks, tp 1, recompute block) is sized by the plain plan of that layout; with
# that much memory the search picks a group smaller than dp, which sends less than the whole group.
big=(--set data.batch_size=32 --set parallel.shard=full --set model.recompute=block)
expect_exit 0 "$TMP/node.json" "$HPCTRAIN_BIN" plan "${common[@]}" "${big[@]}" \
  --set parallel.shard_group=node --json
expect_exit 0 "$TMP/dp.json" "$HPCTRAIN_BIN" plan "${common[@]}" "${big[@]}" --json
room=$($PY - "$TMP/node.json" "$TMP/dp.json" <<'PY'
import json, sys
node = json.load(open(sys.argv[1]))["memory"]
dp = json.load(open(sys.argv[2]))["memory"]
assert node["shard"] == "full" and node["shard_group"] == 8 and dp["shard_group"] == 64, (node, dp)
assert node["bytes_per_parameter"]["total"] == 2 and dp["bytes_per_parameter"]["total"] == 0.25
assert node["communication_bytes_per_step"]["replicas"] > 0 == dp["communication_bytes_per_step"]["replicas"]
assert node["communication_bytes_per_step"]["total"] < dp["communication_bytes_per_step"]["total"]
assert node["total_bytes"] > dp["total_bytes"]
print(int(node["total_bytes"] * 1.001))
PY
) || fail "node and dp groups"
expect_exit 0 "$TMP/hybrid.json" "$HPCTRAIN_BIN" plan "${common[@]}" --set data.batch_size=32 \
  --device-memory "$room" --json
$PY - "$TMP/hybrid.json" "$TMP/node.json" "$TMP/dp.json" <<'PY' || fail "hybrid chosen"
import json, sys
c = json.load(open(sys.argv[1]))["memory"]["layout"]["chosen"]
node = json.load(open(sys.argv[2]))["memory"]
dp = json.load(open(sys.argv[3]))["memory"]
assert c["shard"] == "full" and 1 < c["shard_group"] < c["dp"], c
assert c["communication_bytes_per_step"]["total"] <= node["communication_bytes_per_step"]["total"], c
assert c["communication_bytes_per_step"]["total"] < dp["communication_bytes_per_step"]["total"], c
# The search sizes a layout as the plain plan of that layout does.
assert c["settings"] == "parallel.shard=full parallel.shard_group=8 parallel.tp=1 model.recompute=block", c
assert c["node_group"] and c["peak_bytes"] == node["total_bytes"], (c, node["total_bytes"])
PY

expect_exit 2 "$TMP/bad.txt" "$HPCTRAIN_BIN" plan "${common[@]}" --shard zero3
expect_grep "--shard = 'zero3': expected none, optimizer, gradients or full" "$TMP/bad.txt"
finish
