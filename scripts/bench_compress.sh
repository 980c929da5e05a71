#!/usr/bin/env bash
# Compressed evaluation (docs/BENCHMARKS.md, "Compressed evaluation"): the Fashion-MNIST MLP and
# CNN trained one epoch on 2 ranks x 1 thread, then on 1 and 2 ranks x 1 thread, in the same run:
# `hpctrain eval --quantize int8` (float32 and int8 of the same checkpoint, same batches, one
# process), and `--prune 0.5` / `--prune 0.9` (global). Test split, 10,000 images, batch 1000.
# Prints samples/s float32 and compressed, model bytes, accuracy drop.
# gpt: configs/gpt-tiny.yaml (width 128, 4 layers, context 128) trained GPT_STEPS (default 60)
# steps of GPT_BATCH (default 8) sequences per rank on 2 ranks x 1 thread on Debian's fortunes
# (`prepare text`), then --quantize int8 (and the pruning rows with GPT_PRUNE=1) on GPT_SAMPLES
# (default 128) validation sequences, batch 32: tokens/s, model bytes, loss and perplexity drop.
#   scripts/bench_compress.sh [mlp|cnn|gpt|all] [REPEAT]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
which=${1:-all}
repeat=${2:-3}
build_if_missing
data=${DATA_DIR:-data/fashion-mnist}
mpi_flags --bind-to core
one_thread_per_rank
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
out=${BENCH_OUT:-/tmp/hpctrain-bench-compress}
rm -rf "$out" && mkdir -p "$out"
models=(mlp cnn gpt)
[[ $which != all ]] && models=("$which")
declare -A steps=([mlp]=938 [cnn]=300 [gpt]=${GPT_STEPS:-60})
if [[ " ${models[*]} " == *" mlp "* || " ${models[*]} " == *" cnn "* ]]; then
  fashion_mnist "$data"
fi
text=${TEXT_DIR:-data/text}
if [[ " ${models[*]} " == *" gpt "* && ! -f $text/val.h5 ]]; then
  "$bin" prepare text --in /usr/share/games/fortunes/*.u8 --out "$text"
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

for model in "${models[@]}"; do
  run=$out/$model
  if [[ $model == gpt ]]; then
    config=configs/gpt-tiny.yaml
    split=(--set "data.train=$text/train.h5" --set "data.val=$text/val.h5"
      --set "data.batch_size=${GPT_BATCH:-8}" --set schedule.warmup_steps=10)
    evalset=(--batch-size 32 --max-samples "${GPT_SAMPLES:-128}")
    whats=("--quantize int8")
    [[ ${GPT_PRUNE:-0} == 1 ]] && whats+=("--prune 0.5" "--prune 0.9")
  else
    config=configs/fmnist-$model.yaml
    split=(--set "data.train=$data/train.h5" --set "data.val=$data/test.h5")
    evalset=(--batch-size 1000 --max-samples 0)
    whats=("--quantize int8" "--prune 0.5" "--prune 0.9")
  fi
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 train -c "$config" "${split[@]}" \
    --set "run.max_steps=${steps[$model]}" --set eval.every_steps=0 --set eval.at_end=false \
    --set "run.dir=$run" --set logging.progress=plain --resume none >"$out/$model-train.log" 2>&1
  for ((i = 1; i <= repeat; i++)); do
    for np in 1 2; do
      for what in "${whats[@]}"; do
        tag=$(echo "$what" | tr -d ' -')
        # shellcheck disable=SC2086  # $what is two words on purpose
        mpirun "${MPI_FLAGS[@]}" -np $np "$bin" --threads 1 eval --checkpoint "$run" --fp32 \
          "${evalset[@]}" $what --max-drop 1 \
          --results "$out/$model-np$np-$tag-$i" >"$out/$model-np$np-$tag-$i.log" 2>&1
      done
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$out" "${models[@]}" <<'PY'
import glob, json, statistics, sys
out, models = sys.argv[1], sys.argv[2:]
print(f"{'model':<5} {'ranks':>5} {'compression':<12} {'fp32 samples/s':>14} {'compressed':>11} "
      f"{'x':>5} {'bytes fp32':>11} {'compressed':>11} {'acc fp32':>8} {'acc drop':>8}")
for model in models:
    if model == "gpt":
        continue
    for np in (1, 2):
        for tag in ("quantizeint8", "prune0.5", "prune0.9"):
            rs = [json.load(open(p)) for p in glob.glob(f"{out}/{model}-np{np}-{tag}-*/step_*.json")]
            if not rs:
                continue
            fp32 = statistics.median(r["compression"]["float32"]["samples_per_s"] for r in rs)
            comp = statistics.median(r["samples_per_s"] for r in rs)
            c = rs[0]["compression"]
            print(f"{model:<5} {np:>5} {tag:<12} {fp32:>14.0f} {comp:>11.0f} {comp / fp32:>5.2f} "
                  f"{c['bytes_before']:>11} {c['bytes_after']:>11} {c['float32']['accuracy']:>8.4f} "
                  f"{c['float32']['drop']['accuracy']:>8.4f}")
if "gpt" in models:
    print(f"{'model':<5} {'ranks':>5} {'compression':<12} {'fp32 tokens/s':>13} {'compressed':>11} "
          f"{'x':>5} {'bytes fp32':>11} {'compressed':>11} {'loss fp32':>9} {'loss drop':>9} "
          f"{'rel %':>6} {'ppl fp32':>8} {'ppl drop':>8}")
    for np in (1, 2):
        for tag in ("quantizeint8", "prune0.5", "prune0.9"):
            rs = [json.load(open(p)) for p in glob.glob(f"{out}/gpt-np{np}-{tag}-*/step_*.json")]
            if not rs:
                continue
            t = rs[0]["count"] / rs[0]["samples"]  # tokens per sequence
            fp32 = statistics.median(r["compression"]["float32"]["samples_per_s"] for r in rs) * t
            comp = statistics.median(r["samples_per_s"] for r in rs) * t
            c = rs[0]["compression"]
            f, d = c["float32"], c["float32"]["drop"]
            print(f"{'gpt':<5} {np:>5} {tag:<12} {fp32:>13.0f} {comp:>11.0f} {comp / fp32:>5.2f} "
                  f"{c['bytes_before']:>11} {c['bytes_after']:>11} {f['loss']:>9.4f} "
                  f"{d['loss']:>9.4f} {100 * d['loss_relative']:>6.2f} {f['perplexity']:>8.3f} "
                  f"{d['perplexity']:>8.3f}")
PY
