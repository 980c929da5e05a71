#!/usr/bin/env bash
# Data reader benchmark: `hpctrain bench data` on 1 and 2 ranks, and h5py reading the very same
# batches (same file, same indices, same warm-up) in the same run. Prints a markdown table for
# docs/BENCHMARKS.md. Never a test: numbers depend on the machine.
#
#   scripts/bench_data.sh [FILE]      # default: data/fashion-mnist/train.h5 (prepared if missing)
#   BATCH=64 STEPS=500 WARMUP=50 RANKS="1 2" PREFETCH=4 COMPUTE_MS=2 scripts/bench_data.sh
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
file=${1:-data/fashion-mnist/train.h5}
batch=${BATCH:-64}
steps=${STEPS:-500}
warmup=${WARMUP:-50}
ranks_list=${RANKS:-1 2}
prefetch=${PREFETCH:-4}
compute_ms=${COMPUTE_MS:-2}
py=/usr/bin/python3

require_bin
if [[ ! -f $file ]]; then
  echo "# $file missing: preparing Fashion-MNIST into $(dirname "$file")" >&2
  "$bin" -q prepare fashion-mnist --out "$(dirname "$file")"
fi
mpi_flags --oversubscribe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc) cores; file $file; batch $batch per rank; $steps timed steps after $warmup warm-up; shuffled, seed 0"
echo "# command: scripts/bench_data.sh $file (BATCH=$batch STEPS=$steps WARMUP=$warmup PREFETCH=$prefetch COMPUTE_MS=$compute_ms)"
echo
echo "| ranks | hpctrain reader samples/s | MB/s | h5py read samples/s | h5py read+float32 samples/s | hpctrain / h5py read | wait/step, prefetch 0 (ms) | wait/step, prefetch $prefetch (ms) |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|"
for ranks in $ranks_list; do
  mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q bench data --file "$file" --batch "$batch" \
    --steps "$steps" --warmup "$warmup" --prefetch "$prefetch" --compute-ms "$compute_ms" --json \
    --indices-out "$tmp/idx.$ranks" >"$tmp/hpctrain.$ranks.json"
  mkdir -p "$tmp/ready.$ranks"
  pids=()
  for ((r = 0; r < ranks; r++)); do
    pin=()
    command -v taskset >/dev/null && pin=(taskset -c "$((r % $(nproc)))")
    "${pin[@]}" "$py" scripts/bench_data_h5py.py --file "$file" --indices "$tmp/idx.$ranks" \
      --batch "$batch" --ranks "$ranks" --rank "$r" --warmup "$warmup" \
      --ready-dir "$tmp/ready.$ranks" >"$tmp/h5py.$ranks.$r.json" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  "$py" - "$tmp" "$ranks" <<'PY'
import glob, json, sys
tmp, ranks = sys.argv[1], int(sys.argv[2])
h = json.load(open(f"{tmp}/hpctrain.{ranks}.json"))
rows = {r["prefetch"]: r for r in h["rows"]}
py = [json.load(open(p)) for p in sorted(glob.glob(f"{tmp}/h5py.{ranks}.*.json"))]
samples = sum(p["samples"] for p in py)
h5_read = samples / max(p["seconds"]["read"] for p in py)
h5_float = samples / max(p["seconds"]["read+float32"] for p in py)
reader = rows[-1]["samples_per_s"]
prefetched = [r for k, r in rows.items() if k > 0]
print(f"| {ranks} | {reader:,.0f} | {rows[-1]['mb_per_s']:.1f} | {h5_read:,.0f} | {h5_float:,.0f} | "
      f"{reader / h5_read:.2f}x | {rows[0]['wait_ms_per_step']:.3f} | "
      f"{prefetched[0]['wait_ms_per_step'] if prefetched else float('nan'):.3f} |")
PY
done
