#!/usr/bin/env bash
# What logging.trace costs.
# 1. The price of one recording point with tracing off and on (`hpctrain bench trace`).
# 2. Tracing on, in one run: the step time of the traced steps (101..200 of 300) against the
#    untraced steps beside them (41..100 and 201..260), per run (metrics.jsonl, logging.every_steps
#    1), median step time inside / outside. The same ratio from a run without tracing, over the same
#    steps, is the yardstick: what the windows differ by anyway. Both runs per round, alternated;
#    the median and range over rounds are printed, for the Fashion-MNIST MLP on 2 ranks (dp) and
#    for a small GPT on dp=1 x tp=2 (tensor-parallel collectives: many more slices per step).
#   scripts/bench_trace_overhead.sh [rounds]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
rounds=${1:-5}
bin=${BUILD_DIR:-build}/bin/hpctrain
data=${DATA_DIR:-data/fashion-mnist}
out=${BENCH_OUT:-/tmp/hpctrain-bench-trace}
rm -rf "$out" && mkdir -p "$out"
fashion_mnist "$data"
text=$out/text
"$bin" -q prepare text --in /usr/share/games/fortunes/science --out "$text" --val-fraction 0.05
mpi_flags --bind-to core
one_thread_per_rank
"$bin" -q bench trace
steps=(--set run.max_steps=300 --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set checkpoint.every_steps=0 --set logging.every_steps=1
  --set logging.progress=off --resume none)
mlp=(-c configs/fmnist-mlp.yaml --set "data.train=$data/train.h5" --set "data.val=$data/test.h5")
gpt=(-c configs/gpt-tiny-tp2.yaml --set "data.train=$text/train.h5" --set "data.val=$text/val.h5"
  --set model.layers=2 --set model.width=64 --set model.seq_len=32 --set data.batch_size=8)
for round in $(seq 1 "$rounds"); do
  for model in mlp gpt; do
    modes=(off on)
    ((round % 2 == 0)) && modes=(on off)
    for mode in "${modes[@]}"; do
      extra=()
      [[ $mode == on ]] && extra=(--set logging.trace.start_step=101 --set logging.trace.steps=100)
      config=("${mlp[@]}")
      [[ $model == gpt ]] && config=("${gpt[@]}")
      mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 -q train "${config[@]}" "${steps[@]}" \
        "${extra[@]}" --set "run.dir=$out/$model-$mode-$round" >"$out/$model-$mode-$round.log" 2>&1
    done
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def ratio(run):
    rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
    t = {r["step"]: r["step_time"] for r in rows if r["type"] == "train"}
    inside = statistics.median(t[s] for s in range(101, 201))
    outside = statistics.median([t[s] for s in range(41, 101)] + [t[s] for s in range(201, 261)])
    return inside, outside
for model in ("mlp", "gpt"):
    print(f"{model}: median step time, traced steps 101..200 / untraced steps 41..100 + 201..260")
    print(f"{'round':>5} {'on: in ms':>10} {'out ms':>8} {'in/out':>7}   {'off: in ms':>10} {'out ms':>8} {'in/out':>7}")
    on_r, off_r, diff = [], [], []
    for k in range(1, rounds + 1):
        (a, b), (c, d) = ratio(f"{out}/{model}-on-{k}"), ratio(f"{out}/{model}-off-{k}")
        on_r.append(a / b); off_r.append(c / d); diff.append(a / b - c / d)
        print(f"{k:5d} {1e3*a:10.3f} {1e3*b:8.3f} {a/b:7.4f}   {1e3*c:10.3f} {1e3*d:8.3f} {c/d:7.4f}")
    trace = json.load(open(f"{out}/{model}-on-1/trace.json"))
    slices = sum(1 for e in trace["traceEvents"] if e["ph"] == "X")
    med = statistics.median
    print(f"  in/out with tracing on: median {med(on_r):.4f} (range {min(on_r):.4f}..{max(on_r):.4f}); "
          f"without tracing: median {med(off_r):.4f} (range {min(off_r):.4f}..{max(off_r):.4f})")
    print(f"  on minus off, per round: median {100*med(diff):+.2f}% (range {100*min(diff):+.2f}%..{100*max(diff):+.2f}%); "
          f"{slices / 100 / 2:.1f} slices per step and rank")
PY
