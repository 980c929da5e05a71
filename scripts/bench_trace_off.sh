#!/usr/bin/env bash
# What logging.trace's recording points cost with tracing off: the Fashion-MNIST MLP
# (configs/fmnist-mlp.yaml, 2 ranks x 1 thread, batch 64 per rank, one epoch, as
# scripts/bench_train.sh trains it) with the recording points compiled in (BUILD_DIR, the normal
# build) and compiled out (OFF_BUILD_DIR, configured with -DHPCTRAIN_TRACE_HOOKS=OFF, otherwise the
# same source and flags), each as a ratio to PyTorch DDP (scripts/bench_train_torch.py) run in the
# same round; the three run back to back, the hpctrain order alternating between rounds.
#   OFF_BUILD_DIR=build-notrace scripts/bench_trace_off.sh [rounds]
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
rounds=${1:-5}
on_bin=${BUILD_DIR:-build}/bin/hpctrain
off_bin=${OFF_BUILD_DIR:?configure a build with -DHPCTRAIN_TRACE_HOOKS=OFF and name it}/bin/hpctrain
grep -q "HPCTRAIN_TRACE_HOOKS 0" "${OFF_BUILD_DIR}/generated/hpctrain/build_config.hpp" ||
  { echo "$OFF_BUILD_DIR was not configured with -DHPCTRAIN_TRACE_HOOKS=OFF" >&2; exit 2; }
data=${DATA_DIR:-data/fashion-mnist}
[[ -f $data/train.h5 ]] || "$on_bin" prepare fashion-mnist --out "$data"
mpi_flags --bind-to core
one_thread_per_rank
out=${BENCH_OUT:-/tmp/hpctrain-bench-trace-off}
rm -rf "$out" && mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  /usr/bin/python3 scripts/bench_train_torch.py --model mlp --ranks 2 --data "$data" \
    --epochs 1 >"$out/torch-$round.json"
  order=(in out)
  ((round % 2 == 0)) && order=(out in)
  for hooks in "${order[@]}"; do
    bin=$on_bin
    [[ $hooks == out ]] && bin=$off_bin
    mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" --threads 1 -q train -c configs/fmnist-mlp.yaml \
      --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set run.epochs=1 \
      --set data.batch_size=64 --set eval.every_steps=0 --set "run.dir=$out/$hooks-$round" \
      --set logging.progress=off --resume none >"$out/$hooks-$round.log" 2>&1
  done
done
/usr/bin/python3 - "$out" "$rounds" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def ours(run):
    return json.load(open(f"{out}/{run}/ledger.json"))["throughput"]["train_samples_per_s"]
print(f"{'round':>5} {'torch/s':>9} {'in/s':>9} {'out/s':>9} {'in/torch':>9} {'out/torch':>10} {'in/out':>7}")
r_in, r_out, r_io = [], [], []
for k in range(1, rounds + 1):
    t = json.load(open(f"{out}/torch-{k}.json"))["train_samples_per_s"]
    a, b = ours(f"in-{k}"), ours(f"out-{k}")
    r_in.append(a / t); r_out.append(b / t); r_io.append(a / b)
    print(f"{k:5d} {t:9.0f} {a:9.0f} {b:9.0f} {a/t:9.3f} {b/t:10.3f} {a/b:7.3f}")
med = statistics.median
print(f"median vs torch: hooks in {med(r_in):.3f} ({min(r_in):.3f}..{max(r_in):.3f}), "
      f"hooks out {med(r_out):.3f} ({min(r_out):.3f}..{max(r_out):.3f}); "
      f"in/out median {med(r_io):.3f} ({min(r_io):.3f}..{max(r_io):.3f})")
PY
