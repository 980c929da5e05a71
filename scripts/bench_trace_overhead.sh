#!/usr/bin/env bash
# What logging.trace costs: the price of one recording point with tracing off and on
# (`hpctrain bench trace`), and, in the same run, the Fashion-MNIST MLP on 2 ranks with tracing
# off and on (window: steps 101..200 of 300), alternated, comparing the mean step time of steps
# 101..200 (metrics.jsonl, logging.every_steps 1) and the slices recorded per step.
#   scripts/bench_trace_overhead.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
bin=${BUILD_DIR:-build}/bin/hpctrain
data=${DATA_DIR:-data/fashion-mnist}
[[ -f $data/train.h5 ]] || "$bin" prepare fashion-mnist --out "$data"
flags=(--bind-to core)
[[ $(id -u) -eq 0 ]] && flags+=(--allow-run-as-root)
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
out=${BENCH_OUT:-/tmp/hpctrain-bench-trace}
rm -rf "$out" && mkdir -p "$out"
"$bin" -q bench trace
common=(-c configs/fmnist-mlp.yaml --set "data.train=$data/train.h5" --set "data.val=$data/test.h5"
  --set run.max_steps=300 --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set logging.every_steps=1 --set logging.progress=off)
for round in $(seq 1 "$rounds"); do
  for mode in off on; do
    extra=()
    [[ $mode == on ]] && extra=(--set logging.trace.start_step=101 --set logging.trace.steps=100)
    mpirun "${flags[@]}" -np 2 "$bin" --threads 1 -q train "${common[@]}" "${extra[@]}" \
      --set "run.dir=$out/$mode-$round" --resume none >"$out/$mode-$round.log" 2>&1
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def window_ms(run):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    return 1000 * statistics.mean(r["step_time"] for r in rows
                                  if r["type"] == "train" and 101 <= r["step"] <= 200)
print(f"{'round':>5} {'off ms/step':>12} {'on ms/step':>11} {'on/off':>7}")
ratios = []
for k in range(1, rounds + 1):
    off, on = window_ms(f"{out}/off-{k}"), window_ms(f"{out}/on-{k}")
    ratios.append(on / off)
    print(f"{k:5d} {off:12.4f} {on:11.4f} {on / off:7.3f}")
trace = json.load(open(f"{out}/on-1/trace.json"))
slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
print(f"median on/off {statistics.median(ratios):.3f}; {slices / 100 / 2:.1f} slices per step and rank")
PY
