#!/usr/bin/env bash
# The outcome file (issue 32): a signal to mpirun itself (SIGTERM, SIGINT) and a rank killed with
# SIGKILL. OpenMPI's mpirun returns 1 and 137 there, not the ranks' 75 and 5; RUN_DIR/outcome.json
# holds the ranks' code, reason and step, written atomically, and each start removes the last one.
# SIGUSR1 mpirun forwards without aborting: it returns the ranks' 75, and jobs/mpirun-stop.sh turns
# a TERM or INT it receives into that USR1, so its caller sees 75.
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
# start RUN [WRAPPER]: the job in its own session, in the background (through WRAPPER, which takes
# mpirun's arguments, if given); waits for its first logged step.
start() {
  local launch
  read -ra launch <<<"$HPCTRAIN_MPIEXEC"
  # A background command of a script starts with SIGINT ignored, and a shell cannot trap what it
  # started with ignored: the wrapper gets SIGINT's default back, as from a terminal or `timeout`.
  [[ -n ${2:-} ]] && launch=("$PY" -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])' env "HPCTRAIN_MPIRUN=${launch[0]}" "$2" "${launch[@]:1}")
  setsid "${launch[@]}" -np 2 "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/$1" \
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

# SIGUSR1 to mpirun, and TERM or INT to jobs/mpirun-stop.sh: the caller sees the ranks' 75.
check_75() {  # check_75 NAME WHAT
  finish_job
  [[ $rc == 75 ]] || fail "$2: exit $rc, not 75: $(tail -3 "$TMP/$1.txt")"
  read -r code step reason <<<"$(outcome_of "$TMP/$1")"
  [[ $code == 75 && $reason == *"received: saved, requeue to resume"* ]] ||
    fail "$2: outcome '$code $reason'"
}
start usr1
kill -USR1 "$job"
check_75 usr1 "SIGUSR1 to mpirun"
for sig in TERM INT; do
  start "wrapped-$sig" "$HPCTRAIN_SOURCE_DIR/jobs/mpirun-stop.sh"
  kill -"$sig" "$job"
  check_75 "wrapped-$sig" "SIG$sig to jobs/mpirun-stop.sh"
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
