#!/usr/bin/env bash
# What the collective flight recorder costs (issue 29): gpt-small (configs/gpt-small-tp2.yaml, 2
# ranks x 1 thread) with logging.flight_records 2000 (the default) and 0 (off), side by side in one
# run, the order alternating between rounds, as `hpctrain bench train` times the steps after the
# warm-up; and the bound from below: `hpctrain bench trace`'s nanoseconds per followed collective
# with the recorder on and off, times the operations the recorder saw per step, over the step
# time. Never a test: timings depend on the machine; on a shared machine compare the ratios.
#
#   scripts/bench_flight.sh [ROUNDS]          # STEPS=8 WARMUP=2 by default
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
rounds=${1:-3}
steps=${STEPS:-8}
warmup=${WARMUP:-2}
config=configs/gpt-small-tp2.yaml
py=/usr/bin/python3
require_bin
fortunes_text data/text
mpi_flags --bind-to core
one_thread_per_rank
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_flight.sh $rounds (STEPS=$steps WARMUP=$warmup), $config, 2 ranks x 1 thread"
"$bin" -q bench trace --iterations 2000000 >"$tmp/ops.txt"
cat "$tmp/ops.txt"
for ((round = 1; round <= rounds; round++)); do
  order=(2000 0)
  ((round % 2 == 0)) && order=(0 2000)
  for records in "${order[@]}"; do
    mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" -q --threads 1 bench train -c "$config" \
      --set run.max_steps="$steps" --set run.dir="$tmp/run-$records" \
      --set logging.flight_records="$records" --warmup-steps "$warmup" --json \
      >"$tmp/$records.$round.json"
  done
done
"$py" - "$tmp" "$rounds" <<'PY'
import json, re, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
ops = open(f"{tmp}/ops.txt").read()
on_ns = float(re.search(r"recorder on .*: ([0-9.]+) ns", ops).group(1))
off_ns = float(re.search(r"recorder off:\s+([0-9.]+) ns", ops).group(1))
print(f"{'round':>5} {'on s/step':>10} {'off s/step':>11} {'on/off':>7} {'ops/step':>9}")
ratios, per_step, off_steps = [], [], []
for k in range(1, rounds + 1):
    on = json.load(open(f"{tmp}/2000.{k}.json"))
    off = json.load(open(f"{tmp}/0.{k}.json"))
    r = on["step_time_s"] / off["step_time_s"]
    ratios.append(r)
    per_step.append(on["flight_ops_per_step"])
    print(f"{k:5d} {on['step_time_s']:10.3f} {off['step_time_s']:11.3f} {r:7.4f} {on['flight_ops_per_step']:9.1f}")
    off_steps.append(off["step_time_s"])
step = statistics.median(off_steps)
bound = statistics.median(per_step) * (on_ns - off_ns) * 1e-9 / step
print(f"median on/off step time {statistics.median(ratios):.4f} ({min(ratios):.4f}..{max(ratios):.4f}); "
      f"recording: {on_ns - off_ns:.0f} ns x {statistics.median(per_step):.0f} operations per step = "
      f"{bound * 100:.4f}% of the median {step:.3f} s step (off)")
PY
