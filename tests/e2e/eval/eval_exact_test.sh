#!/usr/bin/env bash
# hpctrain eval reproduces training's periodic evaluation bit for bit, and is exact at world sizes
# 1, 2 and 3: the tiny MLP trains on 2 ranks with a checkpoint and an evaluation every 20 steps
# (evaluation batch 300 over 2000 samples: 7 batches, the last one short, so ranks get uneven
# shares); each checkpoint evaluated offline gives exactly the loss and accuracy of the periodic
# evaluation of its step. Also: results files and fields, idempotent reruns, repair of a lost
# results.jsonl line, best.json, --batch-size auto, --bf16 --compare-fp32, --data, --split train.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
run=$TMP/run
expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5" \
  --set "data.val=$data/test.h5" --set "run.dir=$run" --set data.batch_size=16 \
  --set eval.every_steps=20 --set eval.batch_size=300 --set checkpoint.every_steps=20 \
  --set checkpoint.keep=10
ckpt60=$run/checkpoints/step_00000060
[[ -d $ckpt60 ]] || fail "no checkpoint at step 60"

# One checkpoint at world sizes 1, 2, 3 (results in separate directories).
for np in 1 2 3; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/np$np.txt" "${launch[@]}" eval --checkpoint "$ckpt60" --results "$TMP/np$np"
  expect_grep "eval step 60 \(val\): loss [0-9.]+ accuracy [0-9.]+, 2000 samples" "$TMP/np$np.txt"
done
# Every committed checkpoint of the run, on 2 ranks, into <run>/eval.
expect_exit 0 "$TMP/all.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoints "$run"
expect_grep "3 checkpoint\(s\) evaluated, 0 already evaluated" "$TMP/all.txt"
expect_grep "^[* ]\+        60 " "$TMP/all.txt"

$PY - "$run" "$TMP" <<'PY' || fail "offline results differ from the periodic evaluation"
import json, os, sys
run, tmp = sys.argv[1:]
periodic = {r["step"]: r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r["type"] == "eval"}
assert sorted(periodic) == [20, 40, 60], periodic
lines = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
assert [r["step"] for r in lines] == [20, 40, 60], lines
for r in lines:
    p = periodic[r["step"]]
    for k in ("loss", "accuracy", "samples", "count"):
        assert r[k] == p[k], (r["step"], k, r[k], p[k])          # exact, not approximately
    step_file = json.load(open(f"{run}/eval/step_{r['step']:08d}.json"))
    assert step_file == r, (step_file, r)
for k in ("checkpoint", "step", "data", "data_xxh3", "split", "world_size", "samples", "loss",
          "accuracy", "eval_seconds", "samples_per_s", "batch_size", "precision", "key"):
    assert k in lines[0], k
assert lines[0]["split"] == "val" and lines[0]["world_size"] == 2 and lines[0]["batch_size"] == 300
assert lines[0]["data"] == os.path.realpath(os.environ["HPCTRAIN_TEST_DATA"] + "/fashion-mnist/test.h5")
assert len(lines[0]["data_xxh3"]) == 16 and lines[0]["eval_seconds"] > 0 and lines[0]["samples_per_s"] > 0
# World sizes 1, 2, 3 on the same checkpoint: identical numbers, equal to the periodic ones.
for np in (1, 2, 3):
    r = json.load(open(f"{tmp}/np{np}/step_00000060.json"))
    assert r["world_size"] == np, r
    for k in ("loss", "accuracy", "samples"):
        assert r[k] == periodic[60][k], (np, k, r[k], periodic[60][k])
best = json.load(open(f"{run}/eval/best.json"))
want = max(lines, key=lambda r: (r["accuracy"], r["step"]))
assert best["metric"] == "accuracy" and best["step"] == want["step"] and best["value"] == want["accuracy"], best
print("offline == periodic at steps 20, 40, 60; world sizes 1, 2, 3 identical; best step", best["step"])
PY

# Idempotent: a rerun evaluates nothing; a results.jsonl line lost in a crash is restored once.
expect_exit 0 "$TMP/again.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoints "$run"
expect_grep "0 checkpoint\(s\) evaluated, 3 already evaluated" "$TMP/again.txt"
sed -i '$d' "$run/eval/results.jsonl"
expect_exit 0 "$TMP/repair.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt60"
expect_grep "already evaluated" "$TMP/repair.txt"
[[ $(grep -c '"step":60' "$run/eval/results.jsonl") == 1 ]] || fail "step 60 should have exactly one line"
[[ $(wc -l <"$run/eval/results.jsonl") == 3 ]] || fail "results.jsonl should have 3 lines"

# --batch-size auto reports what it tried; --bf16 --compare-fp32 records the difference; another
# batch size, split or file goes to tagged files next to the default results.
expect_exit 0 "$TMP/auto.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt60" \
  --batch-size auto --max-samples 4000
expect_grep "batch sizes tried" "$TMP/auto.txt"
expect_grep "chosen: [0-9]+" "$TMP/auto.txt"
expect_exit 0 "$TMP/bf16.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt60" --bf16 \
  --compare-fp32
expect_grep "bf16 - fp32: loss" "$TMP/bf16.txt"
expect_exit 0 "$TMP/train-split.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt60" \
  --split train --max-samples 3000 --batch-size 1000
expect_exit 0 "$TMP/data.txt" "$HPCTRAIN_BIN" eval --checkpoint "$run" --data "$data/test.h5" \
  --max-samples 0
$PY - "$run" <<'PY' || fail "tagged results"
import glob, json, os, sys
ev = sys.argv[1] + "/eval"
auto = json.load(open(f"{ev}/step_00000060.bsauto-max4000.json"))
tried = [t["batch"] for t in auto["batch_search"]["tried"]]
assert tried[0] == 16 and all(b == 2 * a or b == 4000 for a, b in zip(tried, tried[1:])), tried
assert auto["batch_size"] in tried and auto["batch_size_requested"] == "auto" and auto["samples"] == 4000
bf = json.load(open(f"{ev}/step_00000060.bf16.json"))
c = bf["bf16_vs_fp32"]
assert bf["precision"] == "bf16" and abs(c["loss_diff"]) < 0.05 and abs(c["accuracy_diff"]) < 0.05, c
fp32 = json.load(open(f"{ev}/step_00000060.json"))
assert abs(c["fp32_loss"] - fp32["loss"]) < 1e-5, (c, fp32["loss"])
tr = json.load(open(f"{ev}/step_00000060.train-bs1000-max3000.json"))
assert tr["split"] == "train" and tr["samples"] == 3000, tr
files = glob.glob(f"{ev}/step_00000060.test-*-max0.json")
assert len(files) == 1 and json.load(open(files[0]))["samples"] == 10000, files
assert os.path.exists(f"{ev}/best.bf16.json")
PY
finish
