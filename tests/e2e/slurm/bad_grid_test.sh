#!/usr/bin/env bash
# A grid that does not divide the world under srun: every rank reports it, the step ends with
# hpctrain's exit code 2 (srun returns the highest task exit code) and nothing hangs.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up

name=e2e-bad-grid-$$
start=$SECONDS
expect_exit 2 "$TMP/np3.txt" "${SRUN[@]}" --job-name="$name" -n 3 --overcommit --mpi=pmix "$HPCTRAIN_BIN" env --tp 2
elapsed=$((SECONDS - start))
expect_grep "world size 3 is not divisible by parallel.tp = 2" "$TMP/np3.txt"
((elapsed < 60)) || fail "the failing step took ${elapsed}s to end"
# The job leaves the queue (after a moment in COMPLETING): no rank is left running.
for _ in $(seq 40); do
  left=$(squeue -h --name="$name" -o '%i %T' 2>&1)
  [[ -z $left ]] && break
  sleep 0.5
done
[[ -z $left ]] || fail "the job is still in the queue: $left"
finish
