#!/usr/bin/env bash
# Training throughput with and without a sharded optimizer state (parallel.shard_optimizer), the
# two runs alternating in each round (the order flips every round) so that both see the same
# machine load; steady-state tokens/s from `hpctrain bench train` (warm-up steps not timed).
# Prints each round and the median of the per-round ratios sharded / unsharded.
#   scripts/bench_shard.sh [CONFIG] [RANKS]      default configs/gpt-small-tp2.yaml (at tp=1), 2
#   STEPS=12 WARMUP=2 ROUNDS=5 DATA_DIR=data/text scripts/bench_shard.sh
# BASELINE_BIN=path: both runs sharded instead, the baseline binary against this one (a change to
# the sharded path measured against the build before it). SETTINGS="k=v ...": more --set options
# for both runs (parallel.bucket_mb=4, say).
# Never a test: numbers depend on the machine; compare the ratios of one run.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/gpt-small-tp2.yaml}
ranks=${2:-2}
steps=${STEPS:-12}
warmup=${WARMUP:-2}
rounds=${ROUNDS:-5}
data=${DATA_DIR:-data/text}
py=/usr/bin/python3
require_bin
fortunes_text "$data"
mpi_flags --oversubscribe --bind-to none
one_thread_per_rank
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
baseline=${BASELINE_BIN:-}
[[ -z $baseline || -x $baseline ]] || { echo "BASELINE_BIN=$baseline is not an executable" >&2; exit 1; }
extra=()
for kv in ${SETTINGS:-}; do extra+=(--set "$kv"); done
run() {  # run ARM ROUND: arm false = unsharded (or the baseline binary, sharded), true = sharded
  local use=$bin shard=$1
  if [[ -n $baseline ]]; then
    shard=true
    [[ $1 == false ]] && use=$baseline
  fi
  mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$use" -q --threads 1 bench train -c "$config" \
    --set "data.train=$data/train.h5" --set "data.val=$data/val.h5" --set parallel.tp=1 \
    --set "parallel.shard_optimizer=$shard" --set "run.max_steps=$steps" --set "run.dir=$tmp/run" \
    "${extra[@]}" --warmup-steps "$warmup" --json >"$tmp/$1.$2.json"
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# scripts/bench_shard.sh $config $ranks (STEPS=$steps WARMUP=$warmup ROUNDS=$rounds SETTINGS=${SETTINGS:-}), 1 thread per rank"
[[ -n $baseline ]] && echo "# both sharded: unsharded column = $baseline, sharded column = $bin"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then
    run false "$r"
    run true "$r"
  else
    run true "$r"
    run false "$r"
  fi
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$tmp" "$rounds" "$baseline" <<'PY'
import json, statistics, sys
tmp, rounds, baseline = sys.argv[1], int(sys.argv[2]), sys.argv[3]
a, b = ("baseline", "this build") if baseline else ("unsharded", "sharded")
ratios = []
print(f"{'round':>5} {a + ' tok/s':>16} {b + ' tok/s':>16} {'ratio':>6}")
for r in range(1, rounds + 1):
    u = json.load(open(f"{tmp}/false.{r}.json"))["tokens_per_s"]
    s = json.load(open(f"{tmp}/true.{r}.json"))["tokens_per_s"]
    ratios.append(s / u)
    print(f"{r:>5} {u:>16.0f} {s:>16.0f} {s / u:>6.3f}")
print(f"median {b}/{a} {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
PY
