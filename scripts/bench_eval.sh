#!/usr/bin/env bash
# Offline evaluation throughput (docs/BENCHMARKS.md, "Offline evaluation"): for the Fashion-MNIST
# MLP and CNN, a short training run on 2 ranks x 1 thread gives a checkpoint and the training
# samples/s (ledger.json); then, on the same 2 ranks x 1 thread and in the same run, alternating
# REPEAT times: `hpctrain eval` of that checkpoint on the test split (10,000 images, batch 1000),
# and PyTorch evaluating the same weights loaded with h5py (scripts/bench_eval_torch.py: 2
# processes pinned to one core each, same canonical batches, h5py reads). Also --batch-size auto
# and bf16 with the fp32 difference. Prints medians and ratios.
#   scripts/bench_eval.sh [mlp|cnn|all] [REPEAT]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
which=${1:-all}
repeat=${2:-3}
build_if_missing
data=${DATA_DIR:-data/fashion-mnist}
fashion_mnist "$data"
mpi_flags --bind-to core
one_thread_per_rank
out=${BENCH_OUT:-/tmp/hpctrain-bench-eval}
rm -rf "$out" && mkdir -p "$out"
models=(mlp cnn)
[[ $which != all ]] && models=("$which")
declare -A steps=([mlp]=400 [cnn]=100)

for model in "${models[@]}"; do
  run=$out/$model
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 train -c "configs/fmnist-$model.yaml" \
    --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" \
    --set "run.max_steps=${steps[$model]}" --set data.batch_size=64 --set eval.every_steps=0 \
    --set eval.at_end=false --set "run.dir=$run" --set logging.progress=plain --resume none \
    >"$out/$model-train.log" 2>&1
  for ((i = 1; i <= repeat; i++)); do
    mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 eval --checkpoint "$run" --fp32 \
      --batch-size 1000 --max-samples 0 --results "$out/$model-eval$i" >"$out/$model-eval$i.log" 2>&1
    /usr/bin/python3 scripts/bench_eval_torch.py --checkpoint "$run" --data "$data/test.h5" \
      --batch 1000 --ranks 2 >"$out/$model-torch$i.json"
  done
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 eval --checkpoint "$run" --fp32 \
    --batch-size auto --max-samples 0 --results "$out/$model-auto" >"$out/$model-auto.log" 2>&1
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 eval --checkpoint "$run" --bf16 --compare-fp32 \
    --batch-size 1000 --max-samples 0 --results "$out/$model-bf16" >"$out/$model-bf16.log" 2>&1
  /usr/bin/python3 - "$model" "$out" "$repeat" <<'PY'
import glob, json, statistics, sys
model, out, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
def one(pattern):
    files = glob.glob(pattern)
    assert len(files) == 1, (pattern, files)
    return json.load(open(files[0]))
train = json.load(open(f"{out}/{model}/ledger.json"))["throughput"]["train_samples_per_s"]
ours = [one(f"{out}/{model}-eval{i}/step_*.json") for i in range(1, repeat + 1)]
theirs = [json.load(open(f"{out}/{model}-torch{i}.json")) for i in range(1, repeat + 1)]
e = statistics.median(r["samples_per_s"] for r in ours)
t = statistics.median(r["samples_per_s"] for r in theirs)
auto = one(f"{out}/{model}-auto/step_*.json")
bf = one(f"{out}/{model}-bf16/step_*.json")
dl = abs(ours[0]["loss"] - theirs[0]["loss"])
print(f"{model}: train {train:,.0f} samples/s (2 ranks x 1 thread, batch 64/rank)")
def runs(rs):
    return ", ".join("{:,.0f}".format(r["samples_per_s"]) for r in rs)
print(f"{model}: hpctrain eval {e:,.0f} samples/s (batch 1000; runs: {runs(ours)})"
      f"  = {e / train:.2f}x training")
print(f"{model}: pytorch eval  {t:,.0f} samples/s (runs: {runs(theirs)})"
      f"  hpctrain / pytorch = {e / t:.2f}x")
print(f"{model}: same metrics: loss {ours[0]['loss']:.6f} vs {theirs[0]['loss']:.6f} (|diff| {dl:.1e}), "
      f"accuracy {ours[0]['accuracy']:.4f} vs {theirs[0]['accuracy']:.4f}")
tried = ", ".join("{}: {:,.0f}".format(x["batch"], x["samples_per_s"]) for x in auto["batch_search"]["tried"])
print(f"{model}: --batch-size auto chose {auto['batch_size']} -> {auto['samples_per_s']:,.0f} samples/s "
      f"(tried {tried})")
c = bf["bf16_vs_fp32"]
print(f"{model}: bf16 {bf['samples_per_s']:,.0f} samples/s vs fp32 {c['fp32_samples_per_s']:,.0f}; "
      f"loss diff {c['loss_diff']:+.2e}, accuracy diff {c['accuracy_diff']:+.4f}")
PY
done
