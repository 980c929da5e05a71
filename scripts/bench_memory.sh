#!/usr/bin/env bash
# Memory and throughput of the gpt with and without a sharded optimizer state
# (parallel.shard_optimizer) and activation recomputation (model.recompute), on 2 and 4 ranks,
# alternating the variants in one invocation so that they see the same machine load. For each run:
# peak resident memory per rank (the ledger's peak_rss_bytes_per_rank, the largest rank), the
# plan's prediction (hpctrain plan --json: weights + gradients + optimizer state + one
# micro-batch's activations) plus the process's fixed cost (the peak RSS of the same command with
# a one-layer width-8 gpt, measured first), and tokens/s from the ledger.
#   scripts/bench_memory.sh [config] [steps] [ranks...]     (default configs/gpt-small-tp2.yaml 6 2 4)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-configs/gpt-small-tp2.yaml}
steps=${2:-6}
shift $(($# > 2 ? 2 : $#)) || true
ranks=("$@")
((${#ranks[@]})) || ranks=(2 4)
bin=${BUILD_DIR:-build}/bin/hpctrain
[[ -x $bin ]] || ./scripts/build.sh
data=${DATA_DIR:-data/text}
[[ -f $data/train.h5 ]] || "$bin" prepare text --in /usr/share/games/fortunes/*.u8 --out "$data"
flags=(--oversubscribe --bind-to none)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=${BENCH_OUT:-/tmp/hpctrain-bench-memory}
rm -rf "$out" && mkdir -p "$out"
common=(--set "data.train=$data/train.h5" --set "data.val=$data/val.h5" --set parallel.tp=1
  --set "run.max_steps=$steps" --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set logging.progress=plain --resume none)
variants=("plain:false:none" "sharded:true:none" "block:false:block" "sharded+block:true:block")
for np in "${ranks[@]}"; do
  mpirun "${flags[@]}" -np "$np" "$bin" --threads 1 train -c "$config" "${common[@]}" \
    --set model.layers=1 --set model.width=8 --set model.heads=1 \
    --set "run.dir=$out/base-$np" >"$out/base-$np.log" 2>&1
  for v in "${variants[@]}"; do
    IFS=: read -r name shard recompute <<<"$v"
    run=$out/$name-$np
    sets=(--set "parallel.shard_optimizer=$shard" --set "model.recompute=$recompute")
    mpirun "${flags[@]}" -np "$np" "$bin" --threads 1 train -c "$config" "${common[@]}" \
      "${sets[@]}" --set "run.dir=$run" >"$run.log" 2>&1
    "$bin" plan -c "$config" "${common[@]:0:6}" "${sets[@]}" --devices "$np" --samples 100000 \
      --json >"$run.plan.json"
  done
done
/usr/bin/python3 - "$out" "${ranks[@]}" <<'PY'
import json, sys
out, ranks = sys.argv[1], sys.argv[2:]
names = ["plain", "sharded", "block", "sharded+block"]
MiB = 2 ** 20
print(f"{'ranks':>5s} {'variant':14s} {'peak RSS/rank':>13s} {'predicted':>10s} {'error':>7s} "
      f"{'state':>8s} {'activations':>11s} {'tokens/s':>9s} {'vs plain':>8s}")
for np in ranks:
    base = max(json.load(open(f"{out}/base-{np}/ledger.json"))["peak_rss_bytes_per_rank"])
    plain_tps = None
    for name in names:
        ledger = json.load(open(f"{out}/{name}-{np}/ledger.json"))
        memory = json.load(open(f"{out}/{name}-{np}.plan.json"))["memory"]
        rss = max(ledger["peak_rss_bytes_per_rank"])
        acts = memory["activation_bytes"][memory["recompute"]]
        predicted = base + memory["total_bytes"]
        tps = ledger["throughput"]["train_tokens_per_s"]
        plain_tps = plain_tps or tps
        state = memory["total_bytes"] - acts
        print(f"{np:>5s} {name:14s} {rss / MiB:10.0f} MiB {predicted / MiB:6.0f} MiB "
              f"{(predicted - rss) / rss * 100:+6.1f}% {state / MiB:5.0f} MiB {acts / MiB:7.0f} MiB "
              f"{tps:9.0f} {tps / plain_tps:8.2f}")
    print(f"{'':5s} (fixed cost: peak RSS of a 1-layer width-8 gpt, {base / MiB:.0f} MiB)")
PY
