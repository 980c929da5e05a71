#!/usr/bin/env bash
# Offline evaluation throughput (docs/BENCHMARKS.md, "Offline evaluation"): for the Fashion-MNIST
# MLP and CNN, a short training run on 2 ranks x 1 thread gives a checkpoint and the training
# samples/s (ledger.json); then, on the same 2 ranks x 1 thread and in the same run, alternating
# REPEAT times: `hpctrain eval` of that checkpoint on the test split (10,000 images, batch 1000),
# and PyTorch evaluating the same weights loaded with h5py (scripts/bench_eval_torch.py: 2
# processes pinned to one core each, same canonical batches, h5py reads). Also --batch-size auto
# and bf16 with the fp32 difference. Prints medians and ratios.
# Then ONNX Runtime against LibTorch (docs/BENCHMARKS.md, "ONNX Runtime"): for the mlp, the cnn
# and a gpt (byte-level, width 128, 4 layers, context 128, trained briefly on Debian's fortunes),
# the checkpoint exported with `hpctrain export --format onnx` and run by npm's onnxruntime-node
# (scripts/onnx_runtime.js; scripts/setup.sh installs it) on the same samples in the same batches
# as `hpctrain eval` (one process, one thread each), alternating REPEAT times. ONNX Runtime's
# samples/s counts its session runs on samples already in memory; hpctrain's its evaluation
# loop with the reads. Prints medians and ratios.
#   scripts/bench_eval.sh [mlp|cnn|gpt|all] [REPEAT]
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
[[ $which == gpt ]] && models=()
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

# --- ONNX Runtime against LibTorch, one process x one thread, the same samples and batches ------
export HPCTRAIN_NPM=${HPCTRAIN_NPM:-$PWD/${BUILD_DIR:-build}/npm}
[[ -d $HPCTRAIN_NPM/node_modules/onnxruntime-node ]] || ./scripts/setup.sh >/dev/null
ort_models=(mlp cnn gpt)
[[ $which != all ]] && ort_models=("$which")
declare -A ort_batch=([mlp]=1000 [cnn]=1000 [gpt]=64) ort_samples=([mlp]=10000 [cnn]=10000 [gpt]=512)
for model in "${ort_models[@]}"; do
  run=$out/$model
  if [[ $model == gpt ]]; then
    text=${TEXT_DIR:-data/text}
    fortunes_text "$text"
    "$bin" --threads 1 train -c configs/gpt-tiny.yaml --set "data.train=$text/train.h5" \
      --set "data.val=$text/val.h5" --set run.max_steps=20 --set eval.every_steps=0 \
      --set eval.at_end=false --set checkpoint.at_end=true --set "run.dir=$run" \
      --set logging.progress=plain --resume none >"$out/gpt-train.log" 2>&1
    eval_data=$text/val.h5
  elif [[ ! -d $run ]]; then
    "$bin" --threads 1 train -c "configs/fmnist-$model.yaml" --set "data.train=$data/train.h5" \
      --set "data.val=$data/test.h5" --set "run.max_steps=${steps[$model]}" --set eval.every_steps=0 \
      --set eval.at_end=false --set "run.dir=$run" --set logging.progress=plain --resume none \
      >"$out/$model-train.log" 2>&1
    eval_data=$data/test.h5
  else
    eval_data=$data/test.h5
  fi
  "$bin" -q export "$run" --format onnx --out "$out/$model.onnx" >"$out/$model-export.log" 2>&1
  batch=${ort_batch[$model]}
  n=${ort_samples[$model]}
  /usr/bin/python3 - "$model" "$eval_data" "$n" "$out" <<'PY'
import sys, h5py, numpy as np
model, data, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with h5py.File(data) as f:
    if model == "gpt":
        t = f["tokens"][: n * 128 + 1].astype(np.int64)
        x = np.stack([t[i * 128:(i + 1) * 128] for i in range(n)])
    else:
        x = (np.arange(256) / 255.0).astype(np.float32)[f["inputs"][:n]]
        # The exported graph's input rank decides the layout: the mlp takes flat rows.
        import onnx
        rank = len(onnx.load(f"{out}/{model}.onnx").graph.input[0].type.tensor_type.shape.dim)
        x = x.reshape(n, -1) if rank == 2 else x
x.tofile(f"{out}/{model}.ort-in")
open(f"{out}/{model}.ort-shape", "w").write(",".join(map(str, x.shape)))
PY
  dtype=float32
  [[ $model == gpt ]] && dtype=int64
  for ((i = 1; i <= repeat; i++)); do
    "$bin" --threads 1 eval --checkpoint "$run" --fp32 --batch-size "$batch" --max-samples "$n" \
      --results "$out/$model-ort-libtorch$i" >"$out/$model-ort-libtorch$i.log" 2>&1
    node scripts/onnx_runtime.js --model "$out/$model.onnx" --input "$out/$model.ort-in" \
      --dtype $dtype --shape "$(cat "$out/$model.ort-shape")" --batch "$batch" --threads 1 \
      >"$out/$model-ort$i.json"
  done
  /usr/bin/python3 - "$model" "$out" "$repeat" "$batch" "$n" <<'PY'
import glob, json, statistics, sys
model, out, repeat, batch, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
ours = [json.load(open(glob.glob(f"{out}/{model}-ort-libtorch{i}/step_*.json")[0]))["samples_per_s"]
        for i in range(1, repeat + 1)]
theirs = [json.load(open(f"{out}/{model}-ort{i}.json")) for i in range(1, repeat + 1)]
o = statistics.median(ours)
t = statistics.median(r["samples_per_s"] for r in theirs)
runs = lambda xs: ", ".join(f"{x:,.0f}" for x in xs)
print(f"{model}: LibTorch (hpctrain eval, 1 x 1 thread, batch {batch}, {n} samples) {o:,.0f} samples/s "
      f"(runs: {runs(ours)}); {theirs[0]['runtime']} {t:,.0f} samples/s "
      f"(runs: {runs(r['samples_per_s'] for r in theirs)}); ONNX Runtime / LibTorch = {t / o:.2f}x")
PY
done
