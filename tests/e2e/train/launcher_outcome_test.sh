#!/usr/bin/env bash
# The outcome file (issue 32): a signal to mpirun itself (SIGTERM, SIGINT) and a rank killed with
# SIGKILL. OpenMPI's mpirun returns 1 and 137 there, not the ranks' 75 and 5; RUN_DIR/outcome.json
# holds the ranks' code, reason and step, written atomically, and each start removes the last one.
source "$(dirname "$0")/../lib.sh"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.epochs=1000 --set run.max_steps=0
  --set eval.every_steps=0 --set logging.every_steps=50)

# outcome_of RUN: "CODE STEP REASON" from RUN/outcome.json, or nothing.
outcome_of() {
  "$PY" -c 'import json,sys; o=json.load(open(sys.argv[1])); print(o["exit_code"], o["step"], o["reason"])' \
    "$1/outcome.json" 2>/dev/null
}
# start RUN: the job in its own session, in the background; waits for its first logged step.
start() {
  # shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds the launcher and its flags
  setsid $HPCTRAIN_MPIEXEC -np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/$1" \
    >"$TMP/$1.txt" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do
    grep -q "step 50 |" "$TMP/$1.txt" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "$1: no step 50 within 30 s: $(tail -3 "$TMP/$1.txt")"
}
finish_job() {  # finish_job: waits for the launcher (bounded) and sets rc
  local _
  for _ in $(seq 1 600); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$job" 2>/dev/null; then
    kill -KILL -- -"$job" 2>/dev/null
    fail "the job did not end within 60 s"
  fi
  wait "$job"
  rc=$?
}

for sig in TERM INT; do
  start "sig-$sig"
  kill -"$sig" "$job"
  finish_job
  [[ $rc == 1 || $rc == 75 ]] || fail "SIG$sig to mpirun: exit $rc, neither mpirun's 1 nor 75"
  read -r code step reason <<<"$(outcome_of "$TMP/sig-$sig")"
  [[ $code == 75 ]] || fail "SIG$sig to mpirun: outcome.json says '$code' (mpirun returned $rc), not 75"
  [[ $reason == *"received: saved, requeue to resume"* && $step -gt 0 ]] ||
    fail "SIG$sig: outcome reason '$reason', step '$step'"
  [[ -d $TMP/sig-$sig/checkpoints/step_$(printf %08d "$step") ]] ||
    fail "SIG$sig: no checkpoint of the outcome's step $step"
done

# A rank killed: the survivor writes exit 5, naming the lost rank.
start lost
rank=$(pgrep -P "$job" -f "run.dir=$TMP/lost" | tail -1)  # a rank: a child of mpirun
[[ -n $rank ]] && kill -KILL "$rank"
finish_job
read -r code step reason <<<"$(outcome_of "$TMP/lost")"
[[ $code == 5 && $reason == "lost rank"* ]] ||
  fail "a killed rank: outcome '$code $reason' (mpirun returned $rc), not 5 naming the lost rank"

# The next start removes the old outcome before it writes its own (here: completed, exit 0).
expect_exit 0 "$TMP/done.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/lost" --set run.epochs=1 --set run.max_steps=10 --resume none \
  --set "run.dir=$TMP/fresh" --outcome-file "$TMP/lost/outcome.json"
read -r code step reason <<<"$(outcome_of "$TMP/lost")"
[[ $code == 0 && $step == 10 && $reason == completed ]] || fail "a completed run's outcome: '$code $step $reason'"
finish
