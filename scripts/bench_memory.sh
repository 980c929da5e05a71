#!/usr/bin/env bash
# Memory and throughput of the gpt in each sharding mode (parallel.shard: none, optimizer,
# gradients, full) with and without activation recomputation (model.recompute), on each rank count,
# the variants one after another in one invocation so that they see the same machine load.
# For each run, from its ledger.json: peak resident memory (VmHWM, the largest rank), the peak
# bytes of live host tensors (the counting CPU allocator) and tokens/s; from `hpctrain plan
# --json`: the predicted tensor peak (memory.host.tensor_bytes: state + activations as a CPU holds them) and the predicted peak RSS
# (memory.host.peak_rss_bytes: that plus glibc's heap slack plus the process base, measured
# first as the peak RSS less the tensor peak of the same command with a one-layer width-8 gpt),
# and how many ranks' peaks are within 10% of it.
#   scripts/bench_memory.sh [config] [steps] [ranks...]   (default configs/gpt-small-tp2.yaml 2 2 4)
# BENCH_OUT (default /tmp/hpctrain-bench-memory) keeps the runs; BENCH_REUSE=1 prints the table
# of the runs already there (after a change to the plan) without training again.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/gpt-small-tp2.yaml}
steps=${2:-2}
shift $(($# > 2 ? 2 : $#)) || true
ranks=("$@")
((${#ranks[@]})) || ranks=(2 4)
# shellcheck source=scripts/bench_gpt_env.sh
source scripts/bench_gpt_env.sh
out=${BENCH_OUT:-/tmp/hpctrain-bench-memory}
name=$(basename "$config" .yaml)
common=(--set "data.train=$data/train.h5" --set "data.val=$data/val.h5" --set parallel.tp=1
  --set "run.max_steps=$steps" --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set logging.progress=plain --resume none)
variants=("plain:none:none" "sharded:optimizer:none" "gradients:gradients:none" "full:full:none"
  "block:none:block" "sharded+block:optimizer:block" "full+block:full:block")
if [[ ${BENCH_REUSE:-0} != 1 ]]; then
  mkdir -p "$out"
  for np in "${ranks[@]}"; do
    echo "$(date +%T) $name on $np ranks; load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
    rm -rf "$out/$name-base-$np"
    mpirun "${MPI_FLAGS[@]}" -np "$np" "$bin" --threads 1 train -c "$config" "${common[@]}" \
      --set model.layers=1 --set model.width=8 --set model.heads=1 \
      --set "run.dir=$out/$name-base-$np" >"$out/$name-base-$np.log" 2>&1
    for v in "${variants[@]}"; do
      IFS=: read -r variant shard recompute <<<"$v"
      run=$out/$name-$variant-$np
      rm -rf "$run"
      mpirun "${MPI_FLAGS[@]}" -np "$np" "$bin" --threads 1 train -c "$config" "${common[@]}" \
        --set "parallel.shard=$shard" --set "model.recompute=$recompute" \
        --set "run.dir=$run" >"$run.log" 2>&1
    done
  done
  echo "$(date +%T) done; load: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
fi
for np in "${ranks[@]}"; do
  base=$(/usr/bin/python3 -c "import json,sys; l=json.load(open(sys.argv[1]))
print(max(r - t for r, t in zip(l['peak_rss_bytes_per_rank'], l['peak_tensor_bytes_per_rank'])))" \
    "$out/$name-base-$np/ledger.json")
  for v in "${variants[@]}"; do
    IFS=: read -r variant shard recompute <<<"$v"
    "$bin" plan -c "$config" "${common[@]:0:6}" --set "parallel.shard=$shard" \
      --set "model.recompute=$recompute" --devices "$np" --samples 100000 --host-base "$base" \
      --json >"$out/$name-$variant-$np.plan.json"
  done
done
/usr/bin/python3 - "$out" "$name" "${ranks[@]}" <<'PY'
import json, sys
out, name, ranks = sys.argv[1], sys.argv[2], sys.argv[3:]
variants = ["plain", "sharded", "gradients", "full", "block", "sharded+block", "full+block"]
MiB = 2 ** 20
print(f"{'config':14s} {'ranks':>5s} {'variant':14s} {'peak RSS':>9s} {'predicted':>9s} {'error':>6s} "
      f"{'in 10%':>6s} {'tensors':>8s} {'predicted':>9s} {'error':>6s} {'tokens/s':>8s} {'vs plain':>8s}")
within = [0, 0]
for np in ranks:
    plain_tps = None
    for v in variants:
        ledger = json.load(open(f"{out}/{name}-{v}-{np}/ledger.json"))
        memory = json.load(open(f"{out}/{name}-{v}-{np}.plan.json"))["memory"]
        rss = max(ledger["peak_rss_bytes_per_rank"])
        tensors = max(ledger["peak_tensor_bytes_per_rank"])
        rss_pred = memory["host"]["peak_rss_bytes"]
        close = sum(abs(rss_pred - r) <= 0.1 * r for r in ledger["peak_rss_bytes_per_rank"])
        within = [within[0] + close, within[1] + len(ledger["peak_rss_bytes_per_rank"])]
        tensor_pred = memory["host"]["tensor_bytes"]
        tps = ledger["throughput"]["train_tokens_per_s"]
        plain_tps = plain_tps or tps
        print(f"{name:14s} {np:>5s} {v:14s} {rss / MiB:5.0f} MiB {rss_pred / MiB:5.0f} MiB "
              f"{(rss_pred - rss) / rss * 100:+5.1f}% {close:>3d}/{np:<2s} {tensors / MiB:4.0f} MiB {tensor_pred / MiB:5.0f} MiB "
              f"{(tensor_pred - tensors) / tensors * 100:+5.1f}% {tps:8.0f} {tps / plain_tps:8.2f}")
    print(f"{'':14s} {np:>5s} process base {memory['host']['process_base_bytes'] / MiB:.0f} MiB, "
          f"heap slack {memory['host']['heap_slack_bytes'] / MiB:.0f} MiB ({v})")
print(f"{within[0]} of {within[1]} ranks' peak RSS within 10% of the plan's")
PY
