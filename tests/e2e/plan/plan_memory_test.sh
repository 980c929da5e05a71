#!/usr/bin/env bash
# hpctrain plan's memory section: bytes per parameter with and without a sharded optimizer state
# (Megatron-LM's table), the gpt's activations per micro-batch with and without recomputation,
# whether --device-memory holds the run, and a bad --device-memory.
source "$(dirname "$0")/../lib.sh"
fork_server_start
configs=$HPCTRAIN_SOURCE_DIR/configs
# The config's data files need not exist: the epoch size is given.
common=(-c "$configs/gpt-tiny.yaml" --samples 4096 --eval-samples 64 --devices 4)

expect_exit 0 "$TMP/plain.json" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory 80GiB --json
expect_exit 0 "$TMP/sharded.json" "$HPCTRAIN_BIN" plan "${common[@]}" \
  --set parallel.shard_optimizer=true --set model.recompute=block --device-memory 1MiB \
  --host-base 100MiB --json
$PY - "$TMP/plain.json" "$TMP/sharded.json" <<'PY' || fail "memory figures"
import json, sys
plain = json.load(open(sys.argv[1]))["memory"]
sharded = json.load(open(sys.argv[2]))["memory"]
params = json.load(open(sys.argv[1]))["model"]["parameters"]
b = plain["bytes_per_parameter"]
assert (b["weights"], b["gradients"], b["optimizer_state"], b["total"]) == (4, 4, 8, 16), b
assert b["sharded"] == 8 + 8 / 4 and b["bf16_weights_float32_master"] == 18, b
s = sharded["bytes_per_parameter"]
assert s["total"] == 10 and s["unsharded"] == 16 and s["bf16_weights_float32_master"] == 6 + 12 / 4, s
assert sharded["shard_optimizer"] and not plain["shard_optimizer"]
assert plain["optimizer_state_bytes"] == 8 * params and sharded["optimizer_state_bytes"] == 2 * params
a = plain["activation_bytes"]
assert a["block"] < a["attention"] < a["none"], a
assert plain["recompute"] == "none" and sharded["recompute"] == "block"
assert plain["total_bytes"] == 16 * params + a["none"], plain
assert sharded["total_bytes"] == 10 * params + a["block"], sharded
assert plain["fits"] is True and sharded["fits"] is False
# A CPU host's peak RSS: the tensors, glibc's heap slack and the process base (default or given).
h, hp = sharded["host"], plain["host"]
assert h["process_base_bytes"] == 100 * 2**20 and h["process_base"] == "--host-base", h
assert hp["process_base_bytes"] == 203 * 2**20, hp
assert h["tensor_bytes"] == sharded["total_bytes"] and h["heap_slack_bytes"] > 1.5 * params * 4, h
assert h["peak_rss_bytes"] == h["tensor_bytes"] + h["heap_slack_bytes"] + h["process_base_bytes"], h
# The slack follows the recompute mode (docs/MEMORY.md): block's share of the dense temporaries is
# the larger, and the same weights are counted in both.
assert hp["heap_slack_bytes"] < h["heap_slack_bytes"], (hp, h)
t = h["heap_slack_terms"]
assert t["weight_bytes"] == params * 4 and t["block_dense_bytes"] > 0 and t["probabilities_bytes"] > 0, t
assert t == hp["heap_slack_terms"], (t, hp)  # what the model multiplies, whatever the mode
PY

expect_exit 0 "$TMP/table.txt" "$HPCTRAIN_BIN" plan "${common[@]}" --set parallel.shard_optimizer=true \
  --device-memory 1MiB
expect_grep "^memory per device \(adamw, dp=4 x tp=1, optimizer state sharded\)" "$TMP/table.txt"
expect_grep "^  bytes per parameter +10 +B +\(weights 4 \+ gradients 4 \+ optimizer state 2\)" \
  "$TMP/table.txt"
expect_grep "activations per micro-batch, recompute none .*this run" "$TMP/table.txt"
expect_grep "fits: no: .*parallel.shard: optimizer, gradients or full.*model.recompute" "$TMP/table.txt"
expect_grep "peak resident memory on a CPU host .*heap slack .*a typical rank: leave ~15%" "$TMP/table.txt"

expect_exit 2 "$TMP/bad.txt" "$HPCTRAIN_BIN" plan "${common[@]}" --device-memory 80gallons
expect_grep "--device-memory = '80gallons': expected a positive size such as 80GiB" "$TMP/bad.txt"
finish
