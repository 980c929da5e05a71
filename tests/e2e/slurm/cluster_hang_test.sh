#!/usr/bin/env bash
# Which rank, which operation across two nodes of a real two-node Slurm (scripts/slurm-sandbox.sh --nodes 2;
# issue 29): rank 3, on node n2, stops in backward. Under srun the job ends with 7 and one message
# for the job names rank 3, its node as Slurm calls it (n2) and its phase; every rank on both nodes
# writes its flight file and `hpctrain trace flight` names the same rank. Under jobs/train.sbatch
# the job fails with 7 (no requeue) and the script says where the flight files are.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/cluster_lib.sh"
cluster_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
config=$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml
train_args=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=100000 --set run.epochs=30 --set data.batch_size=16 --set eval.every_steps=0
  --set eval.at_end=false --set logging.every_steps=20 --set debug.hang_step=40
  --set debug.hang_rank=3)
export HPCTRAIN_COLLECTIVE_TIMEOUT=5 HPCTRAIN_PEER_TIMEOUT=60

# 1. srun, 2 nodes x 2 ranks (ranks 2 and 3 on n2).
"${CSRUN[@]}" -N 2 -n 4 --mpi=pmix "$HPCTRAIN_BIN" train -c "$config" "${train_args[@]}" \
  --set "run.dir=$TMP/srun" --outcome-file "$TMP/srun-outcome.json" >"$TMP/srun.txt" 2>&1
echo "srun exited with $?"
grep -q '"exit_code": 7' "$TMP/srun-outcome.json" 2>/dev/null ||
  fail "srun: the outcome is not exit 7: $(cat "$TMP/srun-outcome.json" 2>&1)"
n=$(grep -c "error: collective .* has not completed after" "$TMP/srun.txt")
((n == 1)) || fail "srun: $n hang reports, expected one for the job"
expect_grep "error: collective .*: waiting [0-9.]+ [mu]?s for rank 3 on n2, which is in backward at step 40" "$TMP/srun.txt"
for r in 0 1 2 3; do
  [[ -f $TMP/srun/flight/rank-$r.json ]] || fail "srun: no flight file of rank $r"
done
grep -q '"host": "n2"' "$TMP/srun/flight/rank-3.json" 2>/dev/null || fail "srun: rank 3's file does not say n2"
expect_exit 0 "$TMP/srun-flight.txt" "$HPCTRAIN_BIN" trace flight "$TMP/srun"
expect_grep "^hang: .*for rank 3 on n2, which is in backward at step 40" "$TMP/srun-flight.txt"

# 2. jobs/train.sbatch on 2 nodes: FAILED with 7, not requeued, the flight files named.
job=$(cd "$HPCTRAIN_SOURCE_DIR" && HPCTRAIN=$HPCTRAIN_BIN CONFIG=$config RANKS_PER_NODE=2 \
  timeout 30 sbatch --parsable -N 2 --time=10 --output="$TMP/sbatch.out" jobs/train.sbatch \
  "${train_args[@]}" --set "run.dir=$TMP/sbatch")
if [[ -z $job ]]; then
  fail "sbatch: no job"
else
  end=$(cluster_wait_job "$job" 150) || fail "sbatch: job $job did not end: $end"
  [[ $end == "FAILED 7:0" ]] || fail "sbatch: job $job ended '$end', expected FAILED 7:0"
  n=$(grep -c "error: collective .* has not completed after" "$TMP/sbatch.out")
  ((n == 1)) || fail "sbatch: $n hang reports, expected one for the job"
  expect_grep "error: collective .* for rank 3 on n2, which is in backward" "$TMP/sbatch.out"
  expect_grep "flight recorder files of the ranks \(exit 7\): $TMP/sbatch/flight/rank-\*\.json; merge them with: .*trace flight $TMP/sbatch" "$TMP/sbatch.out"
  if grep -q "requeueing job" "$TMP/sbatch.out"; then fail "sbatch: the hung job was requeued"; fi
fi
finish
