#!/usr/bin/env bash
# Preemption on the real local Slurm: jobs/train.sbatch runs a training; the job is signalled
# (scancel --signal=USR1, as --signal=USR1@T does before a time limit) or requeued
# (scontrol requeue: SIGTERM, as preemption does). hpctrain saves and exits 75, the job is requeued,
# resumes from the checkpoint and finishes with parameters bit-identical to an uninterrupted run.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
compare=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py")
train_args=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set model.dropout=0.1 --set run.max_steps=4000 --set run.epochs=3 --set eval.every_steps=0 --set eval.at_end=false
  --set data.batch_size=16 --set logging.every_steps=50 --set logging.progress=plain)
config=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml

# The uninterrupted reference, same world size (2 ranks).
expect_exit 0 "$TMP/reference.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$config" "${train_args[@]}" \
  --set "run.dir=$TMP/reference"

# preempt KIND: submit, wait for training to run, interrupt with KIND, release the requeued job.
preempt() {
  local kind=$1 run=$TMP/$1 job
  job=$(cd "$HPCTRAIN_SOURCE_DIR" && HPCTRAIN=$HPCTRAIN_BIN CONFIG=$config timeout 30 sbatch \
    --parsable --time=5 --output="$TMP/$kind.out" jobs/train.sbatch "${train_args[@]}" \
    --set "run.dir=$run") || {
    fail "sbatch failed"
    return
  }
  for _ in $(seq 1 300); do  # until the first train record (the job started and trains)
    grep -q '"type":"train"' "$run/metrics.jsonl" 2>/dev/null && break
    sleep 0.2
  done
  sleep "0.$((RANDOM % 10))"
  if [[ $kind == usr1 ]]; then
    timeout 10 scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
  else
    timeout 10 scontrol requeue "$job" || fail "scontrol requeue $job"
  fi
  # The job comes back PENDING (Slurm holds requeued jobs ~2 min by BeginTime): release it.
  local state=""
  for _ in $(seq 1 120); do
    state=$(timeout 10 scontrol show job "$job" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2)
    restarts=$(timeout 10 scontrol show job "$job" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
    [[ $state == PENDING && ${restarts:-0} -ge 1 ]] && break
    [[ $state == COMPLETED ]] && break
    sleep 0.5
  done
  if [[ $state == COMPLETED ]]; then
    echo "note ($kind): the job finished before the interruption took effect"
  else
    [[ $state == PENDING ]] || fail "$kind: job $job not requeued (state $state)"
    # Released at once, the job may be scheduled while its previous run's credential is still
    # being revoked ("Killing non-startable batch job"): give the node a moment to finish.
    sleep 3
    timeout 10 scontrol update JobId="$job" StartTime=now
  fi
  local end
  end=$(slurm_wait_job "$job" 150) || fail "$kind: job $job did not finish: $end"
  [[ $end == "COMPLETED 0:0" ]] || fail "$kind: job $job ended $end"
  if [[ $state != COMPLETED ]]; then
    expect_grep "stopped after step [0-9]+: SIG(USR1|TERM) received: saved, requeue to resume" "$TMP/$kind.out"
    expect_grep "start 2 on" "$TMP/$kind.out"
    expect_grep "resumed from .*step_[0-9]{8} at step [0-9]+" "$TMP/$kind.out"
  fi
  expect_grep "stopped after step 4000: completed" "$TMP/$kind.out"
  "${compare[@]}" "$TMP/reference" "$run" || fail "$kind: resumed run differs from the reference"
}

preempt usr1
preempt requeue
finish
