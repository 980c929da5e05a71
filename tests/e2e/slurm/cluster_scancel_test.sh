#!/usr/bin/env bash
# What stops jobs/train.sbatch on a real two-node Slurm (scripts/slurm-sandbox.sh --nodes 2), and whether it
# comes back: a user's `scancel` saves a checkpoint and ends the job (CANCELLED, never requeued);
# the time-limit warning (SIGUSR1, here sent by `scancel --signal=USR1` at a known moment) and
# Slurm's preemption (a job in the higher-priority partition `urgent`) save and requeue it, and
# the requeued job resumes from the checkpoint and finishes.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/cluster_lib.sh"
cluster_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
config=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml
train_args=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=100000 --set run.epochs=30 --set data.batch_size=16 --set eval.every_steps=0
  --set eval.at_end=false --set logging.every_steps=20)
renice -n -10 -p $$ >/dev/null 2>&1 || true

# submit NAME [TRAIN ARGS...]: jobs/train.sbatch on 2 nodes x 2 ranks for run NAME; prints the id
# once the job trains (its first train record).
submit() {
  local name=$1 job
  shift
  job=$(cd "$HPCTRAIN_SOURCE_DIR" && HPCTRAIN=$HPCTRAIN_BIN CONFIG=$config RANKS_PER_NODE=2 \
    timeout 30 sbatch --parsable -N 2 --time=10 --output="$TMP/$name.out" jobs/train.sbatch \
    "${train_args[@]}" --set "run.dir=$TMP/$name" "$@") || return 1
  wait_for '"type":"train"' "$TMP/$name/metrics.jsonl" 90 || {
    echo "job $job ($name) did not start training: $(job_field "$job" JobState)" >&2
    return 1
  }
  echo "$job"
}

# 1. scancel: saved, CANCELLED, not requeued.
if job=$(submit cancel); then
  timeout 10 scancel "$job" || fail "scancel $job"
  end=$(cluster_wait_job "$job" 60) || fail "scancel: job $job did not end: $end"
  [[ $end == CANCELLED* ]] || fail "scancel: job $job ended $end, not CANCELLED"
  sleep 4 # a requeue would show by now (the script's own comes within a second)
  state=$(job_field "$job" JobState)
  restarts=$(job_field "$job" Restarts)
  [[ $state == CANCELLED && $restarts == 0 ]] ||
    fail "scancel: job $job was requeued (state $state, restarts $restarts)"
  expect_grep "stopped after step [0-9]+: SIGTERM received: saved" "$TMP/cancel.out"
  expect_grep "stopped by scancel \(exit 75\): hpctrain saved a checkpoint; the job ends without requeue" "$TMP/cancel.out"
  if grep -q "requeueing job" "$TMP/cancel.out"; then fail "scancel: the job script requeued"; fi
  "$HPCTRAIN_BIN" inspect checkpoint "$TMP/cancel" >"$TMP/cancel-inspect.txt" 2>&1 ||
    fail "scancel: the saved checkpoint does not verify: $(tail -3 "$TMP/cancel-inspect.txt")"
else
  fail "scancel: submit"
fi

# stop_and_resume NAME HOW JOB: after HOW stopped JOB, it is requeued (Restarts 1), released, and
# its second start resumes from the saved checkpoint and runs to the end.
stop_and_resume() {
  local name=$1 how=$2 job=$3 end
  wait_requeued "$job" 1 90 || {
    fail "$how: job $job not requeued"
    return
  }
  wait_for "resumed from .*step_[0-9]{8} at step" "$TMP/$name.out" 90 ||
    fail "$how: the requeued job did not resume from the checkpoint"
  expect_grep "start 2 on n\[1-2\]" "$TMP/$name.out"
  timeout 10 scancel "$job" # the rest of the long run is not needed
  end=$(cluster_wait_job "$job" 60) || fail "$how: job $job did not end after the final scancel"
}

# 2. The time-limit warning: SIGUSR1 to the ranks, saved, requeued by the script.
if job=$(submit usr1); then
  timeout 10 scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
  wait_for "stopped to be resumed \(exit 75\): requeueing job $job" "$TMP/usr1.out" 60 ||
    fail "USR1: the job script did not requeue"
  expect_grep "stopped after step [0-9]+: SIGUSR1 received: saved, requeue to resume" "$TMP/usr1.out"
  stop_and_resume usr1 USR1 "$job"
else
  fail "USR1: submit"
fi

# 3. Preemption: a job in partition urgent needs both nodes; Slurm requeues the training job
# (SIGTERM), which saves; the urgent job runs, then the training job resumes.
if job=$(submit preempt); then
  urgent=$(timeout 30 sbatch --parsable -p urgent -N 2 --time=2 --output="$TMP/urgent.out" \
    --wrap "srun hostname") || fail "sbatch -p urgent"
  wait_for "Slurm has requeued job $job \(preemption" "$TMP/preempt.out" 60 ||
    fail "preemption: the job script did not report Slurm's requeue"
  expect_grep "stopped after step [0-9]+: SIGTERM received: saved" "$TMP/preempt.out"
  if grep -q "stopped by scancel" "$TMP/preempt.out"; then fail "preemption taken for a scancel"; fi
  end=$(cluster_wait_job "$urgent" 60) || fail "urgent job did not finish: $end"
  stop_and_resume preempt preemption "$job"
else
  fail "preemption: submit"
fi
finish
