#!/usr/bin/env bash
# Training throughput and memory of each sharding mode (parallel.shard: none, optimizer,
# gradients, full), the runs of a round one after another (the order rotates every round) so
# that all see the same machine load; steady-state tokens/s from `hpctrain bench train` (warm-up
# steps not timed), the peak of live tensors and the exposed data-parallel wait per step from
# each run's ledger. Prints each round and the median over rounds of each mode's tokens/s over
# none's in the same round.
#   scripts/bench_shard.sh [CONFIG] [RANKS]      default configs/gpt-small-tp2.yaml (at tp=1), 2
#   STEPS=12 WARMUP=2 ROUNDS=5 MODES="none optimizer gradients full" DATA_DIR=data/text
# SETTINGS="k=v ...": more --set options for every run (parallel.bucket_mb=4, say).
# Never a test: numbers depend on the machine; compare the ratios of one run.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/gpt-small-tp2.yaml}
ranks=${2:-2}
steps=${STEPS:-12}
warmup=${WARMUP:-2}
rounds=${ROUNDS:-5}
read -r -a modes <<<"${MODES:-none optimizer gradients full}"
data=${DATA_DIR:-data/text}
py=/usr/bin/python3
require_bin
fortunes_text "$data"
mpi_flags --oversubscribe --bind-to none
one_thread_per_rank
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
extra=()
for kv in ${SETTINGS:-}; do extra+=(--set "$kv"); done
run() {  # run MODE ROUND
  mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q --threads 1 bench train -c "$config" \
    --set "data.train=$data/train.h5" --set "data.val=$data/val.h5" --set parallel.tp=1 \
    --set "parallel.shard=$1" --set "run.max_steps=$steps" --set "run.dir=$tmp/run-$1-$2" \
    "${extra[@]}" --warmup-steps "$warmup" --json >"$tmp/$1.$2.json"
}
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# scripts/bench_shard.sh $config $ranks (STEPS=$steps WARMUP=$warmup ROUNDS=$rounds SETTINGS=${SETTINGS:-}), 1 thread per rank"
n=${#modes[@]}
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < n; k++)); do run "${modes[$(((k + r - 1) % n))]}" "$r"; done
done
echo "# load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$tmp" "$rounds" "${modes[@]}" <<'PY'
import json, statistics, sys
tmp, rounds, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
MiB = 2 ** 20
tps = {m: [] for m in modes}
print(f"{'round':>5} " + " ".join(f"{m + ' tok/s':>16}" for m in modes))
for r in range(1, rounds + 1):
    row = []
    for m in modes:
        tps[m].append(json.load(open(f"{tmp}/{m}.{r}.json"))["tokens_per_s"])
        row.append(f"{tps[m][-1]:>16.0f}")
    print(f"{r:>5} " + " ".join(row))
print(f"{'mode':>10} {'tok/s vs none (median, min-max)':>32} {'peak tensors':>13} {'exposed dp wait/step':>21}"
      f" {'dp bytes/step':>14}")
for m in modes:
    ratios = [a / b for a, b in zip(tps[m], tps[modes[0]])]
    ledger = json.load(open(f"{tmp}/run-{m}-{rounds}/ledger.json"))
    peak = max(ledger["peak_tensor_bytes_per_rank"])
    wait = ledger["rank_seconds"]["comm_wait"] / ledger["grid"]["world_size"] / ledger["steps"]
    comm = sum(ledger["dp_communication_bytes_per_step"].values())
    print(f"{m:>10} {statistics.median(ratios):>14.3f} ({min(ratios):.3f}-{max(ratios):.3f}) "
          f"{peak / MiB:>9.0f} MiB {wait * 1000:>17.1f} ms {comm / MiB:>10.1f} MiB")
PY
