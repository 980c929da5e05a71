#!/usr/bin/env bash
# Training throughput of hpctrain against PyTorch's DistributedDataParallel (gloo) on the same
# model, data, batch size (64 per rank), optimizer (Adam 1e-3), ranks (2) and threads (1 per rank),
# one epoch of Fashion-MNIST, measured in the same run; plus hpctrain's scaling from 1 to 2 ranks.
#   scripts/bench_train.sh [mlp|cnn|all] [epochs]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
which=${1:-all}
epochs=${2:-1}
build_if_missing
data=${DATA_DIR:-data/fashion-mnist}
fashion_mnist "$data"
mpi_flags --bind-to core
one_thread_per_rank
out=${BENCH_OUT:-/tmp/hpctrain-bench-train}
rm -rf "$out" && mkdir -p "$out"
models=(mlp cnn)
[[ $which != all ]] && models=("$which")
printf '%-5s %-26s %5s %14s %10s %9s\n' model implementation ranks samples/s accuracy vs-torch
for model in "${models[@]}"; do
  # PyTorch DDP first, then hpctrain on 2 and 1 ranks, back to back.
  torch_json=$(/usr/bin/python3 scripts/bench_train_torch.py --model "$model" --ranks 2 \
    --data "$data" --epochs "$epochs")
  for ranks in 2 1; do
    mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" --threads 1 train -c "configs/fmnist-$model.yaml" \
      --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set "run.epochs=$epochs" \
      --set "data.batch_size=$((64 * 2 / ranks))" --set eval.every_steps=0 \
      --set "run.dir=$out/$model-np$ranks" --set logging.progress=plain --resume none \
      >"$out/$model-np$ranks.log" 2>&1
  done
  /usr/bin/python3 - "$model" "$torch_json" "$out" <<'PY'
import json, sys
model, torch_result, out = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
def ours(ranks):
    led = json.load(open(f"{out}/{model}-np{ranks}/ledger.json"))
    evals = [json.loads(l) for l in open(f"{out}/{model}-np{ranks}/metrics.jsonl") if '"eval"' in l]
    return led["throughput"]["train_samples_per_s"], evals[-1]["accuracy"]
t = torch_result["train_samples_per_s"]
print(f"{model:5s} {'pytorch DDP (gloo)':26s} {2:5d} {t:14.0f} {torch_result['test_accuracy']:10.4f} {1.0:9.2f}")
two, acc2 = ours(2)
print(f"{model:5s} {'hpctrain':26s} {2:5d} {two:14.0f} {acc2:10.4f} {two / t:9.2f}")
one, acc1 = ours(1)
print(f"{model:5s} {'hpctrain (global batch 128)':26s} {1:5d} {one:14.0f} {acc1:10.4f} {one / t:9.2f}")
print(f"{model:5s} scaling 1 -> 2 ranks: {two / one:.2f}x (efficiency {two / one / 2:.0%})")
PY
done
