#!/usr/bin/env bash
# Pipeline parallelism against data parallelism on 4 ranks, side by side in one run: gpt-medium
# at pp=4 with the 1F1B schedule, at pp=4 interleaved with V=2 chunks per rank, and at pp=1 x dp=4,
# all at the same global batch, sequence length, optimizer, sample order and initial weights.
# Prints a markdown table for docs/BENCHMARKS.md: step time, tokens/s, and for the pipelines the
# bubble measured by the ledger (each rank's waits for its neighbours over the wall time of its
# schedules, every step) against the formula (pp-1)/(V m+pp-1). Never a test: numbers depend on
# the machine; on a shared machine compare within one run.
#
#   scripts/bench_pipeline.sh [CONFIG]            # default configs/gpt-medium.yaml
#   STEPS=6 WARMUP=2 MICRO_BATCH=4 MICRO_BATCHES=8 THREADS=1 scripts/bench_pipeline.sh
#
# The data (data/text/{train,val}.h5) is prepared from Debian's fortunes when missing.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/gpt-medium.yaml}
steps=${STEPS:-6}
warmup=${WARMUP:-2}
micro=${MICRO_BATCH:-4}     # sequences per micro-batch
m=${MICRO_BATCHES:-8}       # micro-batches per step at pp=4 (a multiple of 4 for interleaved)
threads=${THREADS:-1}
ranks=4
py=/usr/bin/python3

require_bin
((m % ranks == 0)) || { echo "MICRO_BATCHES=$m must be a multiple of $ranks" >&2; exit 1; }
train_file=$("$py" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["train"])' "$config")
if [[ ! -f $train_file ]]; then
  echo "# $train_file missing: preparing Debian's fortunes into $(dirname "$train_file")" >&2
  "$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$(dirname "$train_file")"
fi
mpi_flags --bind-to none
(($(nproc) < ranks)) && MPI_FLAGS+=(--oversubscribe)
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The global batch is micro x m sequences in every configuration.
run() {  # run NAME ARGS...
  local name=$1
  shift
  mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q --threads "$threads" bench train -c "$config" \
    --set run.max_steps="$steps" --set run.dir="$tmp/$name" --warmup-steps "$warmup" --json "$@" \
    >"$tmp/$name.json"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores ($cpu), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_pipeline.sh $config (STEPS=$steps WARMUP=$warmup MICRO_BATCH=$micro MICRO_BATCHES=$m THREADS=$threads)"
echo "# $ranks ranks x $threads thread(s), global batch $((micro * m)) sequences, $steps steps of which the first $warmup are not timed"
echo
run pp4-1f1b --set parallel.pp=4 --set data.batch_size="$micro" --set optim.grad_accumulation="$m"
run pp4-interleaved --set parallel.pp=4 --set parallel.pp_schedule=interleaved \
  --set parallel.pp_virtual=2 --set data.batch_size="$micro" --set optim.grad_accumulation="$m"
run dp4 --set data.batch_size="$micro" --set optim.grad_accumulation="$((m / ranks))"
"$py" - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
rows = [("pp=4, 1F1B", "pp4-1f1b"), ("pp=4, interleaved V=2", "pp4-interleaved"), ("pp=1 x dp=4", "dp4")]
print("| configuration | step time (s) | tokens/s | bubble measured | bubble (pp-1)/(V m+pp-1) | per-rank bubble | first -> last loss |")
print("|---|---|---|---|---|---|---|")
for label, name in rows:
    j = json.load(open(f"{tmp}/{name}.json"))
    pl = j.get("pipeline")
    measured = f"{100 * pl['bubble_fraction']:.1f}%" if pl else "-"
    predicted = f"{100 * pl['predicted_bubble_fraction']:.1f}%" if pl else "-"
    per_rank = " / ".join(f"{100 * f:.0f}%" for f in pl["bubble_fraction_per_rank"]) if pl else "-"
    print(f"| {label} | {j['step_time_s']:.2f} | {j['tokens_per_s']:.0f} | {measured} | {predicted} "
          f"| {per_rank} | {j['first_loss']:.4f} -> {j['last_loss']:.4f} |")
PY
