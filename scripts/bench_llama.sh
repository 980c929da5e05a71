#!/usr/bin/env bash
# Llama training throughput on 2 ranks: hpctrain (dp = 2) against PyTorch DDP (gloo, 2 processes)
# running scripts/llama_torch_reference.py, both starting from the same random Hugging Face folder
# (model.init_from), at the same global batch, sequence length, AdamW, clipping and sample order,
# 1 thread per rank, in alternating rounds. Prints a markdown table for docs/BENCHMARKS.md: step
# time, tokens/s, the ratio to PyTorch in the same round (median over rounds), CPU seconds per step
# and rank (user + system; other processes on a shared machine inflate it far less than the wall
# time), and both runs' losses (equal within float32 rounding). Never a test: on a shared
# machine compare the ratios.
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
# Open MPI's ranks poll while they wait (gloo's sleep): on a shared machine a polling rank pinned to
# its core keeps other processes off it and slows its partner (docs/BENCHMARKS.md, "Llama training
# on CPU, 2 ranks"). Yield while waiting unless told otherwise (OMPI_MCA_mpi_yield_when_idle=0).
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" scripts/llama_torch_reference.py --make-folder "$tmp/folder" --from-config "$config"

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores ($cpu), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_llama.sh $config (STEPS=$steps WARMUP=$warmup GLOBAL_BATCH=$global_batch ROUNDS=$rounds OMPI_MCA_mpi_yield_when_idle=$OMPI_MCA_mpi_yield_when_idle)"
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
"$py" - "$tmp" "$rounds" "$warmup" <<'PY'
import json, statistics, sys
tmp, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
load = lambda name: [json.load(open(f"{tmp}/{name}.{r}.json")) for r in range(1, rounds + 1)]
h, t = load("hpctrain"), load("torch")
# hpctrain's CPU seconds per timed step and rank: each logged step's wall time times its CPU
# share (metrics.jsonl: getrusage user + system of the process, mean over ranks).
for r, run in enumerate(h, 1):
    steps = [json.loads(l) for l in open(f"{tmp}/run{r}/metrics.jsonl")]
    steps = [s for s in steps if s.get("type") == "train" and s["step"] > warmup]
    run["cpu_s_per_step_per_rank"] = statistics.mean(
        s["step_time"] * s["resources"]["cpu_percent"]["mean"] / 100 for s in steps)
ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(h, t)]
cpu_ratios = [b["cpu_s_per_step_per_rank"] / a["cpu_s_per_step_per_rank"] for a, b in zip(h, t)]
print("| run | parameters | step time (s) | tokens/s | vs PyTorch (same round) | CPU s / step / rank | PyTorch CPU / this CPU | loss step 1 -> last |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
for name, rs in (("hpctrain dp=2", h), ("PyTorch DDP (gloo), reference", t)):
    med = lambda key: statistics.median(r[key] for r in rs)
    first = rs[0].get("first_loss", rs[0].get("losses", [0])[0])
    last = rs[0].get("last_loss", rs[0].get("losses", [0])[-1])
    ratio = statistics.median(ratios) if rs is h else 1.0
    cpu_ratio = statistics.median(cpu_ratios) if rs is h else 1.0
    print(f"| {name} | {rs[0]['parameters']} | {med('step_time_s'):.3f} | {med('tokens_per_s'):.0f} | "
          f"{ratio:.2f} | {med('cpu_s_per_step_per_rank'):.3f} | {cpu_ratio:.2f} | {first:.4f} -> {last:.4f} |")
print()
print(f"hpctrain / PyTorch tokens/s per round: {', '.join(f'{r:.2f}' for r in ratios)} "
      f"(median {statistics.median(ratios):.2f}, {rounds} rounds)")
print(f"PyTorch / hpctrain CPU seconds per step per round: {', '.join(f'{r:.2f}' for r in cpu_ratios)} "
      f"(median {statistics.median(cpu_ratios):.2f})")
times = lambda rs: ", ".join(f"{r['step_time_s']:.3f}" for r in rs)
print(f"step times (s) per round, hpctrain: {times(h)}; PyTorch: {times(t)}")
PY
