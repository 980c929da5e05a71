#!/usr/bin/env bash
# Straggler detection (issue 29) on 4 real ranks: rank 2 made slow (debug.slow_ms: a sleep in
# every forward) is named within 3 logging intervals, in a warning (rank, host, which time, how
# much slower), a metrics.jsonl record of type straggler, TensorBoard, the ledger and the report
# page's per-rank chart; an unslowed run of 200 steps (2,048 hidden units) at the default
# threshold names nobody (the
# spread it saw is printed: docs/OBSERVABILITY.md states it for this machine).
source "$(dirname "$0")/../lib.sh"
export PYTHONDONTWRITEBYTECODE=1 # the reader is imported from the source tree
data=$HPCTRAIN_TEST_DATA/fashion-mnist
reader=$HPCTRAIN_SOURCE_DIR/tests/e2e/train/tensorboard_reader.py
host=$(hostname)
# An MLP with a few milliseconds of compute per step (the unslowed run: about 4x that): a step's
# timing noise stays under the threshold of 1.2x (tiny-mlp's 64 hidden units compute in well
# under a millisecond).
train=("$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml"
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set eval.every_steps=0
  --set eval.at_end=false --set data.batch_size=64 --set "model.hidden=[512]")

# 1. Rank 2 sleeps 60 ms in every forward; logging every 5 steps.
expect_exit 0 "$TMP/slow.txt" mpirun_np 4 "${train[@]}" --set "run.dir=$TMP/slow" \
  --set run.max_steps=30 --set logging.every_steps=5 --set logging.tensorboard=true \
  --set debug.slow_rank=2 --set debug.slow_ms=60
expect_grep "warning: straggler: rank 2 \(host $host\) spent [0-9.]+ m?s per step in compute, [0-9.]+x the median of the ranks \([0-9.]+ m?s\), for 3 logging intervals in a row \(logging.straggler_threshold 1.2, logging.straggler_intervals 3\)" "$TMP/slow.txt"
$PY - "$reader" "$TMP/slow" <<'PY' || fail "slowed run: records, ledger, TensorBoard"
import glob, json, sys
sys.path.insert(0, __import__("os").path.dirname(sys.argv[1]))
import tensorboard_reader as tb
run = sys.argv[2]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
named = [r for r in rows if r["type"] == "straggler"]
assert named and all(r["rank"] == 2 and r["which"] == "compute" for r in named), named
assert named[0]["step"] <= 15 and named[0]["intervals"] == 3, named[0]  # within 3 intervals of 5
assert named[0]["ratio"] > 1.2 and named[0]["host"], named[0]
train = [r for r in rows if r["type"] == "train"]
for r in train:
    times = r["rank_compute_s"]
    assert len(times) == 4 and len(r["rank_data_wait_s"]) == 4, r
    assert max(range(4), key=lambda k: times[k]) == 2, times
ledger = json.load(open(f"{run}/ledger.json"))["stragglers"]
assert [(n["rank"], n["which"]) for n in ledger["named"]] == [(2, "compute")], ledger
assert ledger["threshold"] == 1.2 and ledger["intervals"] == 3, ledger
assert ledger["compute_spread"]["max"] > 1.2, ledger
scalars = {}
for f in glob.glob(f"{run}/tensorboard/events.out.tfevents.*"):
    for e in tb.events(f):
        for tag, v in e.get("values", {}).items():
            scalars[(tag, e["step"])] = v
for r in named:
    got = scalars.get(("straggler/rank_2/compute", r["step"]))
    assert got is not None and abs(got - r["ratio"]) < 1e-5 * r["ratio"], (r, got)
print(f"named rank 2 at step {named[0]['step']}, {named[0]['ratio']:.1f}x the median")
PY
expect_exit 0 "$TMP/report.txt" "$HPCTRAIN_BIN" report "$TMP/slow"
expect_grep '<figure class="chart" id="rank_compute">' "$TMP/slow/report.html"
for r in 0 1 2 3; do expect_grep "data-name=\"rank $r\"" "$TMP/slow/report.html"; done
expect_grep 'data-name="named straggler"' "$TMP/slow/report.html"

# 2. No rank slowed, 200 steps at the default threshold and intervals: nobody is named. 2,048
# hidden units (about 4x the compute of 512): 4 ranks on 2 cores, idle, showed a per-interval
# compute spread of up to 1.18-1.22 at 512 units (the threshold is 1.2; two CI runs named a rank
# at 1.29 and 1.32), 1.05-1.11 at 2,048.
expect_exit 0 "$TMP/even.txt" mpirun_np 4 "${train[@]}" --set "run.dir=$TMP/even" \
  --set "model.hidden=[2048]" --set run.max_steps=200 --set logging.every_steps=10
expect_grep "training mlp \(1[0-9]{6} parameters\)" "$TMP/even.txt"
if grep -q "straggler:" "$TMP/even.txt"; then
  fail "an unslowed run named a straggler:"
  grep "straggler:" "$TMP/even.txt" | sed 's/^/    | /' >&2
fi
$PY - "$TMP/even" <<'PY' || fail "unslowed run: records, ledger"
import json, sys
run = sys.argv[1]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert not [r for r in rows if r["type"] == "straggler"]
s = json.load(open(f"{run}/ledger.json"))["stragglers"]
assert s["named"] == [] and s["logged_intervals"] == 20, s
print(f"unslowed, 4 ranks, 200 steps: compute spread (slowest rank over the median, per "
      f"interval) median {s['compute_spread']['median']:.2f}, max {s['compute_spread']['max']:.2f}; "
      f"data wait excess max {s['data_wait_excess_s']['max'] * 1e3:.1f} ms")
PY
finish
