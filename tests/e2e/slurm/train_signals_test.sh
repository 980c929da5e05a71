#!/usr/bin/env bash
# Stop signals under srun on the real local Slurm, read from the outcome file (issue 32, item 2):
#  - `scancel --signal=TERM` of a job whose ranks srun started directly (no job script): the ranks
#    save and exit 75, srun ends with 75, and the outcome file says exit 75, SIGTERM, the step;
#  - the time-limit warning itself (`sbatch --time=2 --signal=USR1@90`, sent by slurmctld, about
#    every 30 s): jobs/train.sbatch's start saves, the outcome file says 75 and SIGUSR1, and the
#    job is requeued (then cancelled here).
# The runs would last hours (run.epochs=5000; a tiny MLP trains ~1,600 steps/s): only a signal
# ends them.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
config=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml
train_args=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=100000000 --set run.epochs=5000 --set eval.every_steps=0 --set eval.at_end=false
  --set data.batch_size=16 --set logging.every_steps=20)
renice -n -10 -p $$ >/dev/null 2>&1 || true

wait_for() {  # wait_for PATTERN FILE SECONDS
  local deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    grep -Eq -- "$1" "$2" 2>/dev/null && return 0
    sleep 0.2
  done
  return 1
}
check_outcome() {  # check_outcome FILE CODE REASON-PATTERN
  grep -Eq "\"exit_code\": $2, \"reason\": \"$3[^\"]*\", \"step\": [1-9][0-9]*" "$1" ||
    fail "outcome file $1: want exit $2 and '$3': $(cat "$1" 2>&1)"
}

# 1. srun directly, scancel --signal=TERM.
name=hpctrain-sig-$$
timeout 150 srun --immediate=20 --time=3 -J "$name" -n 2 --mpi=pmix "$HPCTRAIN_BIN" train \
  -c "$config" "${train_args[@]}" --set "run.dir=$TMP/srun" --outcome-file "$TMP/srun.outcome.json" \
  >"$TMP/srun.txt" 2>&1 &
step=$!
if wait_for '"type":"train"' "$TMP/srun/metrics.jsonl" 90; then
  job=$(timeout 10 squeue -h -n "$name" -o %i | head -1)
  for try in 1 2 3; do
    timeout 10 scancel --signal=TERM "$job" && break
    # A busy controller drops a request now and then ("Socket timed out on send/recv"): ask
    # again while the ranks have not received the signal.
    sleep 2
    grep -q "SIGTERM received" "$TMP/srun.txt" && break
    ((try < 3)) || fail "scancel --signal=TERM $job"
  done
  wait "$step"
  rc=$?
  [[ $rc == 75 ]] || fail "srun after scancel --signal=TERM ended with $rc, not 75: $(tail -5 "$TMP/srun.txt")"
  expect_grep "SIGTERM received: saved, requeue to resume" "$TMP/srun.txt"
  check_outcome "$TMP/srun.outcome.json" 75 "SIGTERM received"
  expect_exit 0 "$TMP/srun-inspect.txt" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/srun"
else
  fail "the srun job never trained: $(tail -5 "$TMP/srun.txt")"
  kill "$step" 2>/dev/null
  wait "$step"
fi

# 2. The time-limit warning, from slurmctld: jobs/train.sbatch with a two-minute limit. hpctrain
# also reads the job's end time and stops by itself before it (run.time_limit); a margin of 0
# keeps that for the last seconds, so that the signal, due 30 s into the job and sent at the
# controller's next check (every 30 s, later on a busy machine), comes first. A one-minute limit
# left too little room: once the busy controller sent nothing before the end.
job=$(cd "$HPCTRAIN_SOURCE_DIR" && HPCTRAIN=$HPCTRAIN_BIN CONFIG=$config \
  OUTCOME_FILE=$TMP/limit.outcome.json timeout 30 sbatch --parsable --time=2 --signal=USR1@90 \
  --output="$TMP/limit.out" jobs/train.sbatch "${train_args[@]}" --set "run.dir=$TMP/limit" \
  --set run.time_margin_s=0) ||
  fail "sbatch failed"
if [[ -n $job ]]; then
  # Up to the limit (120 s) plus the controller's check period; the start logs and then requeues.
  wait_for "SIGUSR1 received: saved, requeue to resume" "$TMP/limit.out" 160 ||
    fail "no SIGUSR1 before the time limit: $(tail -5 "$TMP/limit.out")"
  wait_for "requeue" "$TMP/limit.out" 30
  check_outcome "$TMP/limit.outcome.json" 75 "SIGUSR1 received"
  timeout 10 scancel "$job"
  slurm_wait_job "$job" 60 >/dev/null || fail "job $job did not end after scancel"
fi
finish
