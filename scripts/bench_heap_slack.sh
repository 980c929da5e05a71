#!/usr/bin/env bash
# The CPU heap slack of the gpt (docs/MEMORY.md, "Peak resident memory on a CPU host") over many
# shapes: for each shape a base run (one layer of width 8, the process base) and one 2-step run
# per recompute mode, repeated; then every rank's peak RSS against `hpctrain plan`'s prediction,
# per shape and mode, and the least-squares coefficients of the slack model refitted on the
# shapes not marked held out (the ones in plan::gpt_heap_slack_bytes came from this script).
#   scripts/bench_heap_slack.sh [repeats] [ranks]     (default 3 2)
# BENCH_OUT (default /tmp/hpctrain-bench-heap-slack) keeps the runs; BENCH_REUSE=1 prints the
# tables of the runs already there; SHAPES (names from the list below, comma-separated) picks some.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
repeats=${1:-3}
np=${2:-2}
# shellcheck source=scripts/bench_gpt_env.sh
source scripts/bench_gpt_env.sh
out=${BENCH_OUT:-/tmp/hpctrain-bench-heap-slack}
mkdir -p "$out"
# name: layers width heads seq_len batch dropout tied; "held" shapes are left out of the fit.
shapes=(
  "long:4 256 4 512 8 0.1 false" "small:6 384 8 256 16 0.0 true" "medium:8 512 8 256 8 0.0 true"
  "long0:4 256 4 512 8 0.0 false" "smalld:6 384 8 256 8 0.1 true" "wide:2 768 12 128 16 0.0 true"
  "deep:8 256 8 384 8 0.1 true" "ctx:4 512 4 512 4 0.0 true"
  "held1:6 320 5 320 12 0.1 true" "held2:3 640 10 192 12 0.0 false"
  "held3:5 448 7 288 10 0.05 false" "held4:10 192 6 448 6 0.1 true")
pick=",${SHAPES:-},"
common=(-c configs/gpt-long.yaml --set "data.train=$data/train.h5" --set "data.val=$data/val.h5"
  --set parallel.tp=1)
train=(--set run.max_steps=2 --set eval.every_steps=0 --set eval.at_end=false
  --set checkpoint.at_end=false --set logging.progress=plain --resume none)
for s in "${shapes[@]}"; do
  name=${s%%:*}
  [[ $pick == ",," || $pick == *",$name,"* ]] || continue
  read -r layers width heads seq batch dropout tied <<<"${s#*:}"
  sets=(--set "model.seq_len=$seq" --set "data.batch_size=$batch" --set "model.dropout=$dropout"
    --set "model.tied_embeddings=$tied")
  shape=(--set "model.layers=$layers" --set "model.width=$width" --set "model.heads=$heads")
  for mode in none block attention; do
    "$bin" -q plan "${common[@]}" "${sets[@]}" "${shape[@]}" --set "model.recompute=$mode" \
      --devices "$np" --samples 100000 --eval-samples 500 --json >"$out/$name-$mode.plan.json"
  done
  [[ ${BENCH_REUSE:-0} == 1 ]] && continue
  echo "$(date +%T) $name ($layers layers, width $width, $heads heads, context $seq, batch $batch," \
    "dropout $dropout) on $np ranks; load: $(cut -d' ' -f1-3 /proc/loadavg)"
  for ((r = 0; r < repeats; ++r)); do
    for mode in base none block attention; do
      run=$out/$name-$mode-r$r
      rm -rf "$run"
      if [[ $mode == base ]]; then
        extra=(--set model.layers=1 --set model.width=8 --set model.heads=1)
      else
        extra=("${shape[@]}" --set "model.recompute=$mode")
      fi
      mpirun "${MPI_FLAGS[@]}" -np "$np" "$bin" --threads 1 train "${common[@]}" "${train[@]}" \
        "${sets[@]}" "${extra[@]}" --set "run.dir=$run" >"$run.log" 2>&1
    done
  done
done
/usr/bin/python3 - "$out" <<'PY'
import glob, json, os, re, sys
from collections import defaultdict
import numpy as np
out = sys.argv[1]
MiB = 2 ** 20
runs = defaultdict(list)  # (shape, mode) -> ledgers
for path in sorted(glob.glob(f"{out}/*-r*/ledger.json")):
    shape, mode = re.match(r"(.+)-(base|none|block|attention)-r\d+$", os.path.basename(os.path.dirname(path))).groups()
    runs[shape, mode].append(json.load(open(path)))
shapes = sorted({s for s, _ in runs}, key=lambda s: (s.startswith("held"), s))
rows, within = [], defaultdict(lambda: [0, 0])
print(f"{'shape':8s} {'mode':9s} {'peak RSS, MiB (every rank)':34s} {'predicted':>9s} {'errors':>16s} {'slack':>5s} {'model':>5s}")
for shape in shapes:
    # The process base: peak RSS less the tensor peak of the one-layer width-8 runs (their largest).
    base = max(r - t for l in runs[shape, "base"]
               for r, t in zip(l["peak_rss_bytes_per_rank"], l["peak_tensor_bytes_per_rank"]))
    for mode in ("none", "block", "attention"):
        if not runs[shape, mode]:
            continue
        host = json.load(open(f"{out}/{shape}-{mode}.plan.json"))["memory"]["host"]
        predicted = host["tensor_bytes"] + host["heap_slack_bytes"] + base
        rss = [r for l in runs[shape, mode] for r in l["peak_rss_bytes_per_rank"]]
        tensors = max(t for l in runs[shape, mode] for t in l["peak_tensor_bytes_per_rank"])
        errors = [(predicted - r) / r for r in rss]
        held = shape.startswith("held")
        within["held out" if held else "fitted"][0] += sum(abs(e) <= 0.10 for e in errors)
        within["held out" if held else "fitted"][1] += len(errors)
        slack = [r - tensors - base for r in rss]
        print(f"{shape:8s} {mode:9s} {' '.join(f'{r / MiB:.0f}' for r in rss):34s} {predicted / MiB:9.0f} "
              f"{min(errors) * 100:+6.1f}..{max(errors) * 100:+5.1f}% {np.mean(slack) / MiB:5.0f} "
              f"{host['heap_slack_bytes'] / MiB:5.0f}")
        plan = json.load(open(f"{out}/{shape}-{mode}.plan.json"))
        rows.append((held, mode, plan, slack))
for part, (ok, n) in within.items():
    print(f"{part}: {ok} of {n} ranks within 10% of the plan")
# Refit: slack = a * dense + b * layers * probabilities + c * weights, per mode, on the fitted shapes.
for mode in ("none", "block", "attention"):
    A, y = [], []
    for held, m, plan, slack in rows:
        if held or m != mode:
            continue
        t = plan["memory"]["host"]["heap_slack_terms"]
        f = [t["block_dense_bytes"], t["probabilities_bytes"], t["weight_bytes"]]
        A += [f] * len(slack)
        y += slack
    if A:
        c = np.linalg.lstsq(np.array(A, float), np.array(y, float), rcond=None)[0]
        print(f"least squares, {mode}: dense {c[0]:.2f}, probabilities {c[1]:.2f}, weights {c[2]:.2f}")
PY
