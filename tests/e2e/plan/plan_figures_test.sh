#!/usr/bin/env bash
# hpctrain plan without a training run: the published GPT-3 figure from size arguments, times at a
# preset peak, the Young/Daly interval, plans of the shipped configs, the table, and usage errors.
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
configs=$HPCTRAIN_SOURCE_DIR/configs

# GPT-3 (Brown et al. 2020): 175e9 parameters, 300e9 tokens: 6 N D = 3.15e23 FLOPs. On 1024
# A100s (bf16 dense 312e12) at 50% utilisation; Adam checkpoints at 20 GB/s; MTBF 12 h.
expect_exit 0 "$TMP/gpt3.json" "$HPCTRAIN_BIN" plan --params 175e9 --tokens 300e9 \
  --eval-tokens 1e9 --devices 1024 --peak-flops a100-sxm-bf16 --utilization 0.5 \
  --ckpt-bandwidth 20e9 --mtbf 12 --json
$PY - "$TMP/gpt3.json" <<'PY' || fail "GPT-3 plan"
import json, math, sys
j = json.load(open(sys.argv[1]))
close = lambda a, b: abs(a - b) <= 1e-9 * abs(b)
assert j["flops"]["train"] == 3.15e23, j["flops"]
assert close(j["flops"]["eval_per_pass"], 2 * 175e9 * 1e9), j["flops"]
wall = 3.15e23 / (1024 * 312e12 * 0.5)
t = j["time"]
assert close(t["train_wall_s"], wall), t
assert close(t["train_device_hours"], wall * 1024 / 3600), t
c = j["checkpoint"]
assert c["bytes"] == 175e9 * 12 and close(c["write_s"], 175e9 * 12 / 20e9), c
assert close(c["young_daly_interval_s"], math.sqrt(2 * c["write_s"] * 12 * 3600)), c
assert close(c["waste_fraction"], math.sqrt(2 * c["write_s"] / (12 * 3600))), c
assert j["devices"]["rate_source"] == "peak x utilization", j["devices"]
PY

# The same as a table; without a peak there are FLOPs but no times, and a note says what to give.
expect_exit 0 "$TMP/gpt3.txt" "$HPCTRAIN_BIN" plan --params 175e9 --tokens 300e9
expect_grep "^  training +3\.15e\+23 +FLOP" "$TMP/gpt3.txt"
expect_grep "wall time: unknown: give --peak-flops or --calibrate" "$TMP/gpt3.txt"
expect_grep "^note: no times: give --peak-flops" "$TMP/gpt3.txt"
expect_grep "Young/Daly interval: give --mtbf HOURS" "$TMP/gpt3.txt"

# A shaped transformer adds the attention FLOPs 6 layers T width D and, with a vocabulary, the
# output head's 6 width V D, and counts its parameters.
expect_exit 0 "$TMP/shaped.json" "$HPCTRAIN_BIN" plan --layers 4 --width 128 --seq-len 128 \
  --vocab 256 --tokens 1e6 --json
$PY - "$TMP/shaped.json" <<'PY' || fail "shaped transformer"
import json, sys
j = json.load(open(sys.argv[1]))
L, d, T, V = 4, 128, 128, 256
n = L * (12 * d * d + 13 * d) + 2 * d
assert j["model"]["non_embedding_parameters"] == n, j["model"]
assert j["model"]["parameters"] == n + V * d + T * d, j["model"]
want = 6 * n * 1e6 + 6 * L * T * d * 1e6 + 6 * d * V * 1e6
assert abs(j["flops"]["train"] - want) <= 1e-9 * want, (j["flops"], want)
PY

# A shipped GPT config (no data needed with --samples): the same count, from the config; the
# sample is a sequence of seq_len tokens. 2 ranks at tp=2 are one data-parallel rank.
expect_exit 0 "$TMP/gpt-tiny.json" "$HPCTRAIN_BIN" plan -c "$configs/gpt-tiny-tp2.yaml" \
  --samples 10000 --eval-samples 1000 --devices 2 --json
$PY - "$TMP/gpt-tiny.json" <<'PY' || fail "gpt-tiny-tp2 plan"
import json, sys
j = json.load(open(sys.argv[1]))
L, d, T, V = 4, 128, 128, 256
n = L * (12 * d * d + 13 * d) + 2 * d
m, w = j["model"], j["workload"]
assert m["name"] == "gpt" and m["tokens_per_sample"] == T, m
assert m["parameters"] == n + V * d + T * d, m
assert m["forward_flops_per_sample"] == 2 * n * T + 2 * L * T * T * d + 2 * d * V * T, m
assert w["global_batch"] == 32 and w["steps"] == 10000 // 32, w  # batch 32 x dp 1
assert w["eval_passes"] == 2, w  # every 200 steps: 200, then the end (312)
assert j["checkpoint"]["optimizer"] == "adamw", j["checkpoint"]
PY

# The MLP config, built and counted: 495,038 forward FLOPs per image; with --set as in train.
expect_exit 0 "$TMP/mlp.json" "$HPCTRAIN_BIN" plan -c "$configs/fmnist-mlp.yaml" --samples 60000 \
  --eval-samples 10000 --set run.epochs=2 --set data.batch_size=64 --peak-flops 1e11 --json
$PY - "$TMP/mlp.json" <<'PY' || fail "fmnist-mlp plan"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["model"]["forward_flops_per_sample"] == 495038 and j["model"]["parameters"] == 247766, j
w = j["workload"]
assert w["epochs"] == 2 and w["steps"] == 2 * (60000 // 64), w
assert w["train_samples"] == 2 * 937 * 64, w
assert j["flops"]["train"] == 3 * 495038 * w["train_samples"], j["flops"]
assert w["eval_passes"] == 1874 // 200 + 1, w
assert abs(j["time"]["train_wall_s"] - j["flops"]["train"] / (1e11 * 0.4)) < 1e-6, j["time"]
PY

# Usage errors: exit 2 with a message that says what to give.
expect_exit 2 "$TMP/nothing.txt" "$HPCTRAIN_BIN" plan
expect_grep "nothing to plan: give --config FILE" "$TMP/nothing.txt"
expect_exit 2 "$TMP/preset.txt" "$HPCTRAIN_BIN" plan --params 1e9 --tokens 1e9 --peak-flops fast
expect_grep "--peak-flops = 'fast'.*h200-sxm-bf16" "$TMP/preset.txt"
expect_exit 2 "$TMP/util.txt" "$HPCTRAIN_BIN" plan --params 1e9 --tokens 1e9 --peak-flops 1e12 \
  --utilization 2
expect_grep "utilization = 2: must be in \(0, 1\]" "$TMP/util.txt"
expect_exit 2 "$TMP/tp.txt" "$HPCTRAIN_BIN" plan -c "$configs/gpt-tiny-tp2.yaml" --samples 1000 \
  --devices 3
expect_grep "--devices 3 is not divisible by parallel.tp = 2" "$TMP/tp.txt"
mkdir -p "$TMP/empty_run"
expect_exit 2 "$TMP/noledger.txt" "$HPCTRAIN_BIN" plan --calibrate "$TMP/empty_run"
expect_grep "cannot read .*empty_run/ledger.json" "$TMP/noledger.txt"
expect_exit 3 "$TMP/nodata.txt" "$HPCTRAIN_BIN" plan -c "$configs/fmnist-mlp.yaml" \
  --set data.train="$TMP/missing.h5"
expect_grep "data.train file .*missing.h5. does not exist.*--samples N" "$TMP/nodata.txt"
finish
