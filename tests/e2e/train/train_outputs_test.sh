#!/usr/bin/env bash
# A short run of the binary under mpirun writes config.yaml, metrics.jsonl and ledger.json with
# the documented fields; the loss goes down on real Fashion-MNIST data; the evaluation is the same
# at 1 and 2 ranks for the same weights (periodic evaluation, identical seeds and global batch);
# the live progress line on a terminal, plain lines otherwise.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5")

expect_exit 0 "$TMP/np2.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/np2" --set data.batch_size=16 --set logging.progress=auto
expect_grep "training mlp .* on dp=2 x tp=1, 32 samples per step" "$TMP/np2.txt"
expect_grep "eval at step 60: loss" "$TMP/np2.txt"
expect_grep "compute ledger" "$TMP/np2.txt"

$PY - "$TMP/np2" <<'PY' || fail "run directory contents"
import json, sys, yaml
run = sys.argv[1]
cfg = yaml.safe_load(open(f"{run}/config.yaml"))
assert cfg["data"]["batch_size"] == 16 and cfg["optim"]["betas"] == [0.9, 0.999], cfg  # defaults recorded
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
train = [r for r in rows if r["type"] == "train"]
evals = [r for r in rows if r["type"] == "eval"]
for r in train:
    for key in ("step", "epoch", "loss", "lr", "grad_norm", "samples_per_s", "step_time",
                "data_wait", "comm_time"):
        assert key in r, (key, r)
assert [r["step"] for r in train] == [10, 20, 30, 40, 50, 60], train
assert [r["step"] for r in evals] == [30, 60], evals
for r in evals:
    for key in ("loss", "accuracy", "samples", "eval_seconds", "samples_per_s"):
        assert key in r, (key, r)
    assert r["samples"] == 2000, r
assert train[-1]["loss"] < 0.75 * train[0]["loss"], ("loss did not go down", train)
assert evals[-1]["accuracy"] > 0.6, evals
led = json.load(open(f"{run}/ledger.json"))
for key in ("forward", "backward", "optimizer", "comm_wait", "data_wait", "eval", "checkpoint"):
    assert led["rank_seconds"][key] >= 0, key
assert led["rank_seconds"]["forward"] > 0 and led["rank_seconds"]["backward"] > 0, led
assert led["samples_trained"] == 60 * 32 and led["grid"]["world_size"] == 2, led
f = led["flops"]
assert abs(f["train_per_sample"] - 3 * f["eval_per_sample"]) < 1e-6 * f["train_per_sample"], f
# MLP 784-64-10: 2*784*64 + 64 + 2*64*10 + 10 forward FLOPs per sample.
assert f["eval_per_sample"] == 2*784*64 + 64 + 2*64*10 + 10, f
assert led["throughput"]["train_samples_per_s"] > 0 and led["cost_ratio_train_to_eval"]["measured"] > 0
assert len(led["peak_rss_bytes_per_rank"]) == 2 and min(led["peak_rss_bytes_per_rank"]) > 1e6
# 50890 float32 parameters, as many gradients, Adam's two moments; no activation estimate (mlp).
m = led["memory_per_rank"]
assert (m["parameter_bytes"], m["gradient_bytes"], m["optimizer_state_bytes"]) == (
    4 * 50890, 4 * 50890, 8 * 50890), m
assert m["activation_bytes_estimate"] == 0 and m["shard_optimizer"] is False, m
PY

# The same run on one rank (global batch 32 = 32 x 1): same stream, same evaluation.
expect_exit 0 "$TMP/np1.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/np1"
$PY - "$TMP/np1" "$TMP/np2" <<'PY' || fail "1 vs 2 ranks"
import json, sys
def evals(run):
    return [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"eval"' in l]
a, b = evals(sys.argv[1]), evals(sys.argv[2])
for x, y in zip(a, b):
    assert x["step"] == y["step"]
    assert abs(x["loss"] - y["loss"]) < 1e-4 and abs(x["accuracy"] - y["accuracy"]) < 2e-3, (x, y)
PY

# The training rate of every logged interval counts the training steps only (not the evaluations
# and saves between them), as the ledger does: on one rank the intervals' seconds add up to the
# ledger's training-loop time (the loop's time less evaluations and saves).
$PY - "$TMP/np1" <<'PY' || fail "interval samples/s against the ledger"
import json, sys
run = sys.argv[1]
train = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"train"' in l]
assert [r["step"] for r in train] == [10, 20, 30, 40, 50, 60], train
seconds = sum(10 * 32 / r["samples_per_s"] for r in train)
loop = json.load(open(f"{run}/ledger.json"))["wall_seconds"]["train_loop"]
assert abs(seconds - loop) < 1e-6 * loop, (seconds, loop)
for r in train:
    assert abs(r["step_time"] * r["samples_per_s"] - 32) < 1e-6 * 32, r
PY

# Progress output: plain lines when stdout is not a terminal (the mpirun run above writes to a
# file, though OpenMPI gives its ranks a pseudo-terminal), a live line rewritten in place on a
# terminal (logging.progress auto under a pseudo-terminal from script(1)), alone and under mpirun.
if grep -q $'\r' "$TMP/np2.txt"; then fail "a live progress line in output that is not a terminal"; fi
expect_grep "^\[hpctrain\] step 60 \| epoch 0 \| loss" "$TMP/np2.txt"
live=$'\r\033\\[K step 60/60 \\| epoch 0 \\| loss [0-9.]+ \\| lr [0-9.e+-]+ \\| [0-9]+ samples/s \\| mem [0-9.]+ [KMG]iB \\| ETA'
printf -v cmd '%q ' "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/tty" \
  --set logging.progress=auto
expect_exit 0 "$TMP/tty.txt" script -qefc "$cmd" /dev/null
expect_grep "$live" "$TMP/tty.txt"
printf -v cmd '%q ' "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/tty-np2" \
  --set data.batch_size=16 --set logging.progress=auto
expect_exit 0 "$TMP/tty-np2.txt" script -qefc "$HPCTRAIN_MPIEXEC -np 2 $cmd" /dev/null
expect_grep "$live" "$TMP/tty-np2.txt"
finish
