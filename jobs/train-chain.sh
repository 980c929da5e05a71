#!/usr/bin/env bash
# For clusters that do not allow requeue: submits N copies of jobs/train.sbatch, each depending on
# the previous one (afterany: it starts when the previous ends, however it ended). Each job
# resumes from the run's latest checkpoint; a job that finds the run complete exits at once.
# Each job decides from hpctrain's outcome file as well as srun's status (jobs/train.sbatch).
#
#   jobs/train-chain.sh 5 [sbatch options...] -- [train arguments...]
#   CONFIG=configs/gpt-small-tp2.yaml jobs/train-chain.sh 10 --time=04:00:00
set -euo pipefail
n=${1:?usage: train-chain.sh N [sbatch options...] [-- train arguments...]}
shift
sbatch_opts=()
while (($#)) && [[ $1 != -- ]]; do
  sbatch_opts+=("$1")
  shift
done
[[ ${1:-} == -- ]] && shift
script=$(dirname "$0")/train.sbatch
previous=""
for ((i = 1; i <= n; i++)); do
  dependency=()
  [[ -n $previous ]] && dependency=(--dependency="afterany:$previous")
  # --no-requeue: in a chain the next job resumes; HPCTRAIN_NO_REQUEUE makes the script exit 0.
  previous=$(HPCTRAIN_NO_REQUEUE=1 sbatch --parsable --no-requeue --export=ALL \
    "${dependency[@]}" "${sbatch_opts[@]}" "$script" "$@")
  echo "submitted job $previous ($i of $n)"
done
