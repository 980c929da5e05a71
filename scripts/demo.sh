#!/usr/bin/env bash
# The demo: installs what is missing, builds, shows the 2-rank environment and a short all-reduce
# table, prepares Fashion-MNIST, and trains the CNN of
# configs/fmnist-cnn.yaml data-parallel on 2 ranks for one epoch with evaluation, ending with the
# summary (test accuracy, throughput, compute ledger). Extra arguments go to `hpctrain train`
# (e.g. ./scripts/demo.sh --set run.epochs=2, or -c configs/fmnist-mlp.yaml).
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
./scripts/setup.sh
HPCTRAIN_BUILD_TARGET=hpctrain ./scripts/build.sh  # the executable only: the demo runs no test
mpi_flags --bind-to core
(($(nproc) < 2)) && MPI_FLAGS+=(--oversubscribe)
one_thread_per_rank

echo "== hpctrain env (2 ranks)"
mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" env
echo "== hpctrain bench allreduce (2 ranks, against plain MPI_Allreduce)"
mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" bench allreduce --min-bytes 64K --max-bytes 4M --factor 4
if [[ ! -f data/fashion-mnist/train.h5 || ! -f data/fashion-mnist/test.h5 ]]; then
  echo "== hpctrain prepare fashion-mnist"
  "$bin" prepare fashion-mnist --out data/fashion-mnist
fi
echo "== hpctrain train: Fashion-MNIST CNN, 2 ranks, 1 epoch"
config=configs/fmnist-cnn.yaml
if [[ ${1:-} == -c || ${1:-} == --config ]]; then
  config=$2
  shift 2
fi
run_dir=runs/demo-$(basename "$config" .yaml)
rm -rf "$run_dir"  # the demo starts afresh each time (its own directory only)
mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 train -c "$config" --set "run.dir=$run_dir" \
  --resume none "$@"
echo "== results in $run_dir: config.yaml, metrics.jsonl, ledger.json, checkpoints/"
