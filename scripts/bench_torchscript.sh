#!/usr/bin/env bash
# TorchScript models against the built-in ones: the MLP and CNN written in PyTorch
# (scripts/torchscript_models.py: the same architectures) train in hpctrain next to the built-in
# mlp and cnn with the same data, batch (64 per rank), optimizer (Adam 1e-3), ranks (2) and
# threads (1 per rank), alternating runs in one invocation; samples/s from each run's ledger.
#   scripts/bench_torchscript.sh [mlp|cnn|all] [steps] [repeats]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
which=${1:-all}
steps=${2:-600}
repeats=${3:-2}
build_if_missing
data=${DATA_DIR:-data/fashion-mnist}
fashion_mnist "$data"
mpi_flags --bind-to core
one_thread_per_rank
out=${BENCH_OUT:-/tmp/hpctrain-bench-torchscript}
rm -rf "$out" && mkdir -p "$out"
/usr/bin/python3 scripts/torchscript_models.py "$out/models" >/dev/null
models=(mlp cnn)
[[ $which != all ]] && models=("$which")
common=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set data.batch_size=64
  --set "run.max_steps=$steps" --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set logging.progress=plain --resume none)
for model in "${models[@]}"; do
  for r in $(seq 1 "$repeats"); do
    mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 train -c "configs/fmnist-$model.yaml" \
      "${common[@]}" --set "run.dir=$out/$model-builtin-$r" >"$out/$model-builtin-$r.log" 2>&1
    mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 train -c configs/fmnist-torchscript.yaml \
      "${common[@]}" --set "model.file=$out/models/$model.pt" \
      --set "run.dir=$out/$model-torchscript-$r" >"$out/$model-torchscript-$r.log" 2>&1
  done
done
/usr/bin/python3 - "$out" "$repeats" "${models[@]}" <<'PY'
import json, sys
out, repeats, models = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
print(f"{'model':5s} {'implementation':12s} {'samples/s (each run)':32s} {'best':>8s} {'ts/built-in':>11s}")
for model in models:
    rates = {}
    for kind in ("builtin", "torchscript"):
        rates[kind] = [json.load(open(f"{out}/{model}-{kind}-{r}/ledger.json"))["throughput"]["train_samples_per_s"]
                       for r in range(1, repeats + 1)]
    for kind in ("builtin", "torchscript"):
        runs = ", ".join(f"{v:,.0f}" for v in rates[kind])
        ratio = max(rates[kind]) / max(rates["builtin"])
        print(f"{model:5s} {kind:12s} {runs:32s} {max(rates[kind]):8,.0f} {ratio:11.2f}")
PY
