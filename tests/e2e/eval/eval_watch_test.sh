#!/usr/bin/env bash
# Watch mode beside a running training job (two mpirun jobs at the same time): the watcher
# evaluates every committed checkpoint exactly once, in step order, and stops once training has
# written its completion marker. A watcher killed with SIGKILL in the middle and started again
# resumes: every checkpoint ends up with exactly one result, none missing, none duplicated.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
train_args=(train -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set data.batch_size=16 --set run.max_steps=1200
  --set eval.every_steps=0 --set eval.at_end=false --set checkpoint.every_steps=75
  --set checkpoint.keep=100 --set logging.every_steps=100)
watch_args=(eval --poll 0.3 --timeout 60 --max-samples 1000)

# check_results RUN: one results.jsonl line per committed checkpoint, in step order.
check_results() {
  $PY - "$1" <<'PY'
import json, os, sys
run = sys.argv[1]
committed = sorted(int(d[5:]) for d in os.listdir(f"{run}/checkpoints") if d.startswith("step_") and ".tmp" not in d)
lines = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
steps = [r["step"] for r in lines]
assert committed == list(range(75, 1201, 75)), committed
assert sorted(steps) == committed, ("duplicates or missing", steps, committed)
for r in lines:
    assert os.path.exists(f"{run}/eval/step_{r['step']:08d}.max1000.json"), r["step"]
print(f"{len(steps)} checkpoints, {len(steps)} results, each once")
PY
}

# 1. Training (2 ranks) and a watcher (2 ranks), started together.
run=$TMP/run
mpirun_np 2 "$HPCTRAIN_BIN" "${train_args[@]}" --set "run.dir=$run" >"$TMP/train.txt" 2>&1 &
train_pid=$!
mpirun_np 2 "$HPCTRAIN_BIN" "${watch_args[@]}" --watch "$run" >"$TMP/watch.txt" 2>&1 &
watch_pid=$!
wait "$train_pid" || fail "training failed: $(tail -5 "$TMP/train.txt")"
timeout 90 tail --pid="$watch_pid" -f /dev/null
wait "$watch_pid" || fail "watcher exited non-zero"
expect_grep "watch ended: training is complete" "$TMP/watch.txt"
expect_grep "16 checkpoint\(s\) evaluated, 0 already evaluated" "$TMP/watch.txt"
check_results "$run" || fail "watch: results do not match the checkpoints"
# Evaluations happened while training ran, not all at the end (training lasts seconds here).
$PY - "$run/eval/step_00000075.max1000.json" "$run/training_complete.json" <<'PY' \
  || fail "the first checkpoint was evaluated only after training ended"
import os, sys
first, marker = (os.stat(p).st_mtime for p in sys.argv[1:])
print(f"first result {marker - first:.2f} s before the training's completion marker")
sys.exit(0 if first < marker else 1)
PY

# 2. A watcher killed with SIGKILL after its first results, then started again.
run=$TMP/run-kill
mpirun_np 2 "$HPCTRAIN_BIN" "${train_args[@]}" --set "run.dir=$run" >"$TMP/train2.txt" 2>&1 &
train_pid=$!
mpirun_np 2 "$HPCTRAIN_BIN" "${watch_args[@]}" --watch "$run" >"$TMP/watch2.txt" 2>&1 &
watch_pid=$!
for _ in $(seq 1 600); do
  [[ -s $run/eval/results.jsonl ]] && break
  sleep 0.05
done
ranks=$(pgrep -P "$watch_pid" -d ' ')
[[ -n $ranks ]] || fail "no watcher ranks found under mpirun $watch_pid"
# shellcheck disable=SC2086  # a list of pids
kill -9 $ranks
wait "$watch_pid"
echo "watcher killed after $(wc -l <"$run/eval/results.jsonl") result(s)"
mpirun_np 2 "$HPCTRAIN_BIN" "${watch_args[@]}" --watch "$run" >"$TMP/watch3.txt" 2>&1 ||
  fail "restarted watcher exited non-zero: $(tail -5 "$TMP/watch3.txt")"
wait "$train_pid" || fail "training failed: $(tail -5 "$TMP/train2.txt")"
expect_grep "watch ended: training is complete" "$TMP/watch3.txt"
expect_grep "already evaluated" "$TMP/watch3.txt"
check_results "$run" || fail "kill and restart: results do not match the checkpoints"
finish
