#!/usr/bin/env bash
# Evaluation as its own Slurm jobs on the real local Slurm: jobs/train.sbatch trains (2 tasks,
# a checkpoint every 100 steps) while jobs/eval-watch.sbatch, submitted with
# --dependency=after:<train job>, evaluates each committed checkpoint as it appears and ends when
# training writes its completion marker. Every committed checkpoint gets exactly one result, in
# step order. jobs/eval.sbatch afterwards (--dependency=afterok) finds them all evaluated and
# evaluates nothing again; with CHECKPOINT= it evaluates one checkpoint on the train split.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
run=$TMP/run
train_args=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=600 --set data.batch_size=16 --set eval.every_steps=0
  --set eval.at_end=false --set checkpoint.every_steps=100 --set checkpoint.keep=100
  --set logging.every_steps=100 --set logging.progress=plain --set "run.dir=$run")
submit() {  # submit OUTPUT_NAME ENV... -- SBATCH_ARGS...: prints the job id
  local out=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do
    envs+=("$1")
    shift
  done
  shift
  (cd "$HPCTRAIN_SOURCE_DIR" && env HPCTRAIN="$HPCTRAIN_BIN" "${envs[@]}" timeout 30 sbatch \
    --parsable --time=5 --output="$TMP/$out.out" "$@")
}

train=$(submit train CONFIG="$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" -- \
  jobs/train.sbatch "${train_args[@]}") || fail "sbatch jobs/train.sbatch failed"
watch=$(submit watch RUN="$run" POLL=0.5 TIMEOUT=120 -- --dependency="after:$train" \
  jobs/eval-watch.sbatch --max-samples 1000) || fail "sbatch jobs/eval-watch.sbatch failed"
[[ -n $train && -n $watch ]] || finish

end=$(slurm_wait_job "$train" 200) || fail "training job $train did not finish: $end"
[[ $end == "COMPLETED 0:0" ]] || fail "training job $train ended $end"
end=$(slurm_wait_job "$watch" 200) || fail "watch job $watch did not finish: $end"
[[ $end == "COMPLETED 0:0" ]] || fail "watch job $watch ended $end"
expect_grep "stopped after step 600: completed" "$TMP/train.out"
expect_grep "watch ended: training is complete" "$TMP/watch.out"

$PY - "$run" <<'PY' || fail "results of the watch job"
import json, os, sys
run = sys.argv[1]
committed = sorted(int(d[5:]) for d in os.listdir(f"{run}/checkpoints")
                   if d.startswith("step_") and ".tmp" not in d)
assert committed == [100, 200, 300, 400, 500, 600], committed
lines = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
steps = [r["step"] for r in lines]
assert steps == committed, f"results {steps}, committed {committed}"  # once each, in order
for r in lines:
    assert r["samples"] == 1000 and r["world_size"] == 1, r
    assert json.load(open(f"{run}/eval/step_{r['step']:08d}.max1000.json")) == r, r["step"]
print("watch job: one result per committed checkpoint:", steps)
PY

# Afterwards, as its own job: nothing left to evaluate with the same settings.
again=$(submit again RUN="$run" -- --dependency="afterok:$train" jobs/eval.sbatch \
  --max-samples 1000) || fail "sbatch jobs/eval.sbatch failed"
end=$(slurm_wait_job "$again" 120) || fail "eval job $again did not finish: $end"
[[ $end == "COMPLETED 0:0" ]] || fail "eval job $again ended $end"
expect_grep "0 checkpoint\(s\) evaluated, 6 already evaluated" "$TMP/again.out"
[[ $(wc -l <"$run/eval/results.jsonl") -eq 6 ]] || fail "results.jsonl grew on a rerun"

# One checkpoint on the train split, on the job's 2 tasks.
one=$(submit one CHECKPOINT="$run/checkpoints/step_00000300" -- jobs/eval.sbatch --split train \
  --max-samples 2000) || fail "sbatch jobs/eval.sbatch (CHECKPOINT) failed"
end=$(slurm_wait_job "$one" 120) || fail "eval job $one did not finish: $end"
[[ $end == "COMPLETED 0:0" ]] || fail "eval job $one ended $end"
expect_grep "eval step 300 \(train\): loss [0-9.]+ accuracy [0-9.]+, 2000 samples" "$TMP/one.out"
finish
