#!/usr/bin/env bash
# Llama training throughput on 2 ranks: hpctrain (dp = 2) against PyTorch DDP (gloo, 2 processes)
# running scripts/llama_torch_reference.py, both starting from the same random Hugging Face folder
# (model.init_from), at the same global batch, sequence length, AdamW, clipping and sample order,
# 1 thread per rank, in alternating rounds. Prints a markdown table for docs/BENCHMARKS.md: step
# time, tokens/s, the ratio to PyTorch in the same round (median over rounds), and both runs'
# losses (equal within float32 rounding). Never a test: on a shared machine compare the ratios.
#
#   scripts/bench_llama.sh [CONFIG]     # default configs/llama-bench.yaml
#   STEPS=10 WARMUP=2 GLOBAL_BATCH=16 ROUNDS=3 scripts/bench_llama.sh
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/llama-bench.yaml}
steps=${STEPS:-10}
warmup=${WARMUP:-2}
global_batch=${GLOBAL_BATCH:-16}
rounds=${ROUNDS:-3}
py=/usr/bin/python3

require_bin
train_file=$("$py" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["train"])' "$config")
if [[ ! -f $train_file ]]; then
  echo "# $train_file missing: preparing Debian's fortunes into $(dirname "$train_file")" >&2
  "$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$(dirname "$train_file")"
fi
mpi_flags --bind-to core
one_thread_per_rank
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" scripts/llama_torch_reference.py --make-folder "$tmp/folder" --from-config "$config"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores ($cpu), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_llama.sh $config (STEPS=$steps WARMUP=$warmup GLOBAL_BATCH=$global_batch ROUNDS=$rounds)"
echo "# 2 ranks x 1 thread, global batch $global_batch sequences, $steps steps of which the first $warmup are not timed"
echo
for ((round = 1; round <= rounds; round++)); do
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" -q --threads 1 bench train -c "$config" \
    --set run.max_steps="$steps" --set run.dir="$tmp/run$round" \
    --set model.init_from="$tmp/folder" --set data.batch_size="$((global_batch / 2))" \
    --warmup-steps "$warmup" --json >"$tmp/hpctrain.$round.json"
  "$py" scripts/llama_torch_reference.py --train "$tmp/folder" -c "$config" --nproc 2 \
    --threads 1 --global-batch "$global_batch" --steps "$steps" --warmup-steps "$warmup" \
    >"$tmp/torch.$round.json"
done
"$py" - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{tmp}/{name}.{r}.json")) for r in range(1, rounds + 1)]
h, t = load("hpctrain"), load("torch")
ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(h, t)]
print("| run | parameters | step time (s) | tokens/s | vs PyTorch (same round) | loss step 1 -> last |")
print("|---|---:|---:|---:|---:|---|")
for name, rs in (("hpctrain dp=2", h), ("PyTorch DDP (gloo), reference", t)):
    med = lambda key: statistics.median(r[key] for r in rs)
    first = rs[0].get("first_loss", rs[0].get("losses", [0])[0])
    last = rs[0].get("last_loss", rs[0].get("losses", [0])[-1])
    ratio = statistics.median(ratios) if rs is h else 1.0
    print(f"| {name} | {rs[0]['parameters']} | {med('step_time_s'):.3f} | {med('tokens_per_s'):.0f} | "
          f"{ratio:.2f} | {first:.4f} -> {last:.4f} |")
print()
print(f"hpctrain / PyTorch tokens/s per round: {', '.join(f'{r:.2f}' for r in ratios)} "
      f"(median {statistics.median(ratios):.2f}, {rounds} rounds)")
PY
