#!/usr/bin/env bash
# Run features end to end: a wall-time budget saves and stops with exit 75 (and the run resumes),
# time-based checkpoints with retention, early stopping, bfloat16 autocast.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.max_samples=500)

# Time limit: 6 s budget, 2 s margin, checkpoints every 0.02 min (1.2 s), keep 2.
expect_exit 75 "$TMP/limit.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set run.max_steps=100000 --set run.epochs=100 --set eval.every_steps=0 --set eval.at_end=false \
  --set run.time_limit=6s --set run.time_margin_s=2 --set checkpoint.every_minutes=0.02 \
  --set data.batch_size=16 --set "run.dir=$TMP/limit"
expect_grep "wall-time budget: 6.0 s \(run.time_limit\)" "$TMP/limit.txt"
expect_grep "stopped after step [0-9]+: time limit \(run.time_limit\): saved, requeue to resume" "$TMP/limit.txt"
$PY - "$TMP/limit" <<'PY' || fail "time-based checkpoints and retention"
import json, os, sys
run = sys.argv[1]
ckpts = sorted(d for d in os.listdir(f"{run}/checkpoints") if d.startswith("step_"))
assert 1 <= len(ckpts) <= 2, ckpts                  # keep 2 (no eval: no best to keep)
assert not [d for d in os.listdir(f"{run}/checkpoints") if ".tmp" in d]
saves = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"checkpoint"' in l]
assert saves, "no checkpoint record"
last = open(f"{run}/checkpoints/latest").read().strip()
assert last == ckpts[-1], (last, ckpts)
PY
logged=$(grep -c "checkpoint step_" "$TMP/limit.txt")
((logged >= 2)) || fail "expected several time-based checkpoints, saw $logged"

# Early stopping: a learning rate too small to change any weight, so the metric never improves.
expect_exit 0 "$TMP/early.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set optim.lr=1e-12 \
  --set optim.name=sgd --set eval.every_steps=5 --set eval.patience=2 --set eval.metric=loss \
  --set run.max_steps=60 --set "run.dir=$TMP/early"
expect_grep "stopped after step 15: early stopping: loss did not improve for 2 evaluations \(best .* at step 5\)" "$TMP/early.txt"
[[ -f $TMP/early/training_complete.json ]] || fail "no completion marker after early stopping"

# bfloat16 autocast trains too (loss falls, evaluation in bf16 close to fp32's on the same data).
expect_exit 0 "$TMP/bf16.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set run.precision=bf16 --set data.batch_size=16 --set "run.dir=$TMP/bf16"
$PY - "$TMP/bf16" <<'PY' || fail "bf16 run"
import json, math, sys
rows = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
train = [r for r in rows if r["type"] == "train"]
evals = [r for r in rows if r["type"] == "eval"]
assert all(math.isfinite(r["loss"]) for r in train), train
assert train[-1]["loss"] < 0.8 * train[0]["loss"], train
assert evals[-1]["accuracy"] > 0.6, evals
PY
finish
