#!/usr/bin/env bash
# Batch jobs on the local Slurm: mpirun and srun inside an sbatch script take their ranks from the
# allocation, the output file holds hpctrain's env summary, and Slurm records each job's exit code.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up

cat >"$TMP/mpirun.sbatch" <<'SH'
#!/bin/bash
#SBATCH --job-name=e2e-sbatch-mpirun
#SBATCH --ntasks=2
#SBATCH --time=1
set -euo pipefail
# OpenMPI refuses root without these; srun-launched ranks do not need them.
if [[ $(id -u) -eq 0 ]]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
echo "job $SLURM_JOB_ID: $SLURM_NTASKS tasks on $SLURM_JOB_NODELIST"
mpirun "$1" env   # no -np: mpirun takes the rank count and hosts from the allocation
SH

cat >"$TMP/srun.sbatch" <<'SH'
#!/bin/bash
#SBATCH --job-name=e2e-sbatch-srun
#SBATCH --ntasks=2
#SBATCH --time=1
set -euo pipefail
echo "job $SLURM_JOB_ID: $SLURM_NTASKS tasks on $SLURM_JOB_NODELIST"
srun --mpi=pmix "$1" env
SH

cat >"$TMP/fail.sbatch" <<'SH'
#!/bin/bash
#SBATCH --job-name=e2e-sbatch-fail
#SBATCH --ntasks=1
#SBATCH --time=1
exit 3
SH

# expect_jobcomp ID STATE EXIT: the completion log has the job's line (written as the job ends).
expect_jobcomp() {
  local pattern="^JobId=$1 .*JobState=$2 .* ExitCode=$3 " log=$SLURM_LOCAL_DIR/jobcomp.log
  for _ in $(seq 20); do
    grep -Eq -- "$pattern" "$log" 2>/dev/null && return 0
    sleep 0.25
  done
  expect_grep "$pattern" "$log"
}

# Submit all three, then wait: they share the node (OverSubscribe=FORCE), so they run together.
declare -A job
for kind in mpirun srun fail; do
  if ! job[$kind]=$(timeout 30 sbatch --parsable --chdir="$TMP" --output="$TMP/$kind.out" \
    "$TMP/$kind.sbatch" "$HPCTRAIN_BIN" 2>"$TMP/$kind.submit"); then
    fail "sbatch $kind.sbatch: $(cat "$TMP/$kind.submit")"
    finish
  fi
done

# The jobs run at the same time, so the later waits are short.
declare -A wait_s=([mpirun]=60 [srun]=30 [fail]=20)
for kind in mpirun srun; do
  result=$(slurm_wait_job "${job[$kind]}" "${wait_s[$kind]}")
  [[ $result == "COMPLETED 0:0" ]] || fail "$kind job ${job[$kind]} ended as '$result' (want COMPLETED 0:0)"
  expect_grep "^job ${job[$kind]}: 2 tasks on " "$TMP/$kind.out"
  expect_grep "hpctrain environment" "$TMP/$kind.out"
  expect_grep "launcher +$kind" "$TMP/$kind.out"
  expect_grep "world_size +2" "$TMP/$kind.out"
  expect_jobcomp "${job[$kind]}" COMPLETED 0:0
done

# A failing job: Slurm reports the script's exit status as ExitCode=<status>:<signal>.
result=$(slurm_wait_job "${job[fail]}" "${wait_s[fail]}")
[[ $result == "FAILED 3:0" ]] || fail "fail job ${job[fail]} ended as '$result' (want FAILED 3:0)"
expect_jobcomp "${job[fail]}" FAILED 3:0
finish
