#!/usr/bin/env bash
# Stops and restarts that must not lose anything:
# 1. a stop request seen by one rank only (debug.stop_rank, and a real SIGUSR1 to one rank's
#    process) stops every rank at the same step: one checkpoint, exit 75 from the whole job;
# 2. a job that died after its final checkpoint committed but before its completion marker and
#    ledger: the restart says "already complete", exits 0 and writes both;
# 3. an evaluation interrupted by a stop signal: the stop checkpoint owes it, the resumed run
#    evaluates that step first (metrics.jsonl gets its record, the checkpoint its metric) and
#    early stopping counts it.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=40 --set data.batch_size=16
  --set eval.every_steps=20 --set eval.max_samples=500 --set logging.every_steps=5)

# 1a. Only world rank 1 asks to stop at step 13.
expect_exit 75 "$TMP/one.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/one" --set debug.stop_step=13 --set debug.stop_rank=1
expect_grep "stopped after step 13: SIGUSR1 received: saved, requeue to resume" "$TMP/one.txt"
ls "$TMP/one/checkpoints" | grep -c '^step_' >"$TMP/count.txt"
[[ $(cat "$TMP/count.txt") == 1 ]] || fail "expected one checkpoint, found: $(ls "$TMP/one/checkpoints")"
[[ -d $TMP/one/checkpoints/step_00000013 ]] || fail "no checkpoint at step 13"

# 1b. A real SIGUSR1 to one rank's process (not to mpirun) at a moment of a long run.
long=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=3000 --set data.batch_size=16
  --set eval.every_steps=0 --set eval.at_end=false --set logging.every_steps=25)
interrupted=0
for attempt in 1 2 3; do
  dir=$TMP/signal-$attempt
  # shellcheck disable=SC2086
  nice -n 10 $HPCTRAIN_MPIEXEC -np 2 "$HPCTRAIN_BIN" train "${long[@]}" --set "run.dir=$dir" \
    >"$TMP/signal-$attempt.txt" 2>&1 &
  pid=$!
  for _ in $(seq 1 400); do
    grep -q '"type":"train"' "$dir/metrics.jsonl" 2>/dev/null && break
    sleep 0.05
  done
  # The rank processes are mpirun's children; signal only the second one.
  ranks=$(pgrep -P "$pid" -f "hpctrain train" | sort -n)
  target=$(sed -n 2p <<<"$ranks")
  # Signal it only once its handler is installed (SigCgt has SIGUSR1's bit, 1 << 9): under load a
  # rank can lag the one that logged.
  for _ in $(seq 1 100); do
    caught=$(awk '/^SigCgt/ {print $2}' "/proc/$target/status" 2>/dev/null)
    [[ -n $caught ]] && (((16#$caught >> 9) & 1)) && break
    sleep 0.05
  done
  [[ -n $target ]] && kill -USR1 "$target"
  wait "$pid"
  code=$?
  if [[ $code == 75 ]]; then
    interrupted=1
    step=$(sed -nE 's/.*stopped after step ([0-9]+): SIGUSR1 received.*/\1/p' "$TMP/signal-$attempt.txt")
    [[ -n $step ]] || fail "no 'stopped after step N: SIGUSR1' line"
    names=$(ls "$dir/checkpoints" | grep '^step_')
    [[ $names == "step_$(printf %08d "$step")" ]] || fail "checkpoints after one-rank SIGUSR1: $names (step $step)"
    break
  fi
  [[ $code == 0 ]] || { fail "one-rank SIGUSR1 attempt $attempt: exit $code"; sed 's/^/    | /' "$TMP/signal-$attempt.txt" | tail -20 >&2; break; }
  echo "note: attempt $attempt finished before the signal arrived; retrying" >&2
done
((interrupted)) || fail "no attempt was interrupted by the one-rank SIGUSR1"

# 2. The final checkpoint committed, then the job died before its bookkeeping.
expect_exit 0 "$TMP/done.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/done"
[[ -f $TMP/done/training_complete.json && -f $TMP/done/ledger.json ]] || fail "a completed run lacks its marker or ledger"
rm -f "$TMP/done/training_complete.json" "$TMP/done/ledger.json"
expect_exit 0 "$TMP/again.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/done"
expect_grep "already complete at step 40" "$TMP/again.txt"
"$PY" - "$TMP/done" <<'PY' || fail "restart did not finish the bookkeeping"
import json, sys
d = sys.argv[1]
m = json.load(open(d + "/training_complete.json"))
assert m["step"] == 40 and m["last_checkpoint"].endswith("step_00000040"), m
l = json.load(open(d + "/ledger.json"))
assert l["steps"] == 40 and l["samples_trained"] == 40 * 32 and "reconstructed" in l, l
PY

# 3. A stop arrives as the evaluation of step 20 starts (on rank 0 only).
expect_exit 75 "$TMP/evstop.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/ev" --set debug.stop_eval_step=20 --set debug.stop_rank=0 \
  --set eval.patience=5
expect_grep "evaluation at step 20 interrupted by SIGUSR1" "$TMP/evstop.txt"
"$PY" - "$TMP/ev" <<'PY' || fail "the stop checkpoint does not owe the evaluation"
import json, sys
m = json.load(open(sys.argv[1] + "/checkpoints/step_00000020/manifest.json"))
assert m["metric"] is None and m["trainer_state"]["interrupted_eval_step"] == 20, m["trainer_state"]
PY
expect_exit 0 "$TMP/evresume.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/ev" --set eval.patience=5
expect_grep "evaluating step 20, whose evaluation a stop interrupted" "$TMP/evresume.txt"
expect_grep "eval at step 20: loss" "$TMP/evresume.txt"
"$PY" - "$TMP/ev" <<'PY' || fail "the resumed run did not record the owed evaluation"
import json, sys
d = sys.argv[1]
recs = [json.loads(l) for l in open(d + "/metrics.jsonl")]
evals = [r["step"] for r in recs if r["type"] == "eval"]
assert evals == [20, 40], evals
m = json.load(open(d + "/checkpoints/step_00000020/manifest.json"))
assert isinstance(m["metric"], float) and "interrupted_eval_step" not in m["trainer_state"], m
ts = json.load(open(d + "/checkpoints/step_00000040/manifest.json"))["trainer_state"]
assert ts["best_step"] in (20, 40), ts
PY
finish
