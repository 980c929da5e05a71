#!/usr/bin/env bash
# GPT training throughput on 2 ranks: hpctrain at (dp=2, tp=1) and (dp=1, tp=2), and PyTorch
# running the same model unsharded with DDP (gloo, 2 processes), side by side in one run, all at
# the same global batch, sequence length, optimizer, sample order and initial weights, 1 thread
# per rank. Prints a markdown table for docs/BENCHMARKS.md: step time, tokens/s, achieved FLOP/s
# (3 x Gpt::forward_flops_per_sample = 6 N T + 6 layers T^2 width per sequence, the same formula
# for both), the ratio to PyTorch, and hpctrain's tensor-parallel communication time per step.
# Never a test: numbers depend on the machine; on a shared machine compare the ratios.
#
#   scripts/bench_gpt.sh [CONFIG]          # default configs/gpt-small-tp2.yaml
#   STEPS=12 WARMUP=2 GLOBAL_BATCH=32 ROUNDS=1 scripts/bench_gpt.sh
#
# The data (data/text/{train,val}.h5) is prepared from Debian's fortunes when missing.
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
config=${1:-configs/gpt-small-tp2.yaml}
steps=${STEPS:-12}
warmup=${WARMUP:-2}
global_batch=${GLOBAL_BATCH:-32}
rounds=${ROUNDS:-1}
py=/usr/bin/python3

require_bin
train_file=$("$py" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["train"])' "$config")
if [[ ! -f $train_file ]]; then
  echo "# $train_file missing: preparing Debian's fortunes into $(dirname "$train_file")" >&2
  "$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$(dirname "$train_file")"
fi
mpi_flags --bind-to core
# One thread per rank everywhere; large activations reuse memory instead of fresh mmap'ed pages
# (docs/PLATFORM notes: page faults are expensive on these VMs). Both sides get the same.
one_thread_per_rank
export MALLOC_MMAP_THRESHOLD_=4294967296 MALLOC_TRIM_THRESHOLD_=4294967296
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

common=(--set run.max_steps="$steps" --set run.dir="$tmp/run")
hpctrain_run() {  # hpctrain_run OUT DP TP
  local out=$1 dp=$2 tp=$3
  mpirun "${MPI_FLAGS[@]}" -np 2 "$bin" -q --threads 1 bench train -c "$config" "${common[@]}" \
    --set parallel.tp="$tp" --set data.batch_size="$((global_batch / dp))" \
    --warmup-steps "$warmup" --json >"$out"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc --all) cores ($cpu), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# command: scripts/bench_gpt.sh $config (STEPS=$steps WARMUP=$warmup GLOBAL_BATCH=$global_batch ROUNDS=$rounds)"
echo "# 2 ranks x 1 thread, global batch $global_batch sequences, $steps steps of which the first $warmup are not timed"
echo
for ((round = 1; round <= rounds; round++)); do
  hpctrain_run "$tmp/dp2.$round.json" 2 1
  hpctrain_run "$tmp/tp2.$round.json" 1 2
  "$py" scripts/gpt_torch_reference.py -c "$config" "${common[@]}" \
    --set data.batch_size="$((global_batch / 2))" --nproc 2 --threads 1 \
    --warmup-steps "$warmup" --json >"$tmp/torch.$round.json"
done
"$py" - "$tmp" "$rounds" <<'PY'
import json, statistics, sys
tmp, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{tmp}/{name}.{r}.json")) for r in range(1, rounds + 1)]
runs = {"hpctrain dp=2 x tp=1": load("dp2"), "hpctrain dp=1 x tp=2": load("tp2"),
        "PyTorch DDP (gloo), unsharded": load("torch")}
torch_tps = [r["tokens_per_s"] for r in runs["PyTorch DDP (gloo), unsharded"]]
print("| run | grid | step time (s) | tokens/s | achieved GFLOP/s | GFLOP/s per rank | vs PyTorch "
      "(same round) | tp comm / step (s) | tp comm share | loss step 1 -> last |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
for name, rs in runs.items():
    med = lambda key: statistics.median(r[key] for r in rs)
    ratio = statistics.median(r["tokens_per_s"] / t for r, t in zip(rs, torch_tps))
    r0 = rs[0]
    grid = f"dp={r0['dp']} x tp={r0['tp']}"
    comm = med("tp_comm_s_per_step") if "tp_comm_s_per_step" in r0 else None
    comm_txt = f"{comm:.3f}" if comm is not None else "-"
    share = f"{100 * comm / med('step_time_s'):.0f}%" if comm else "-"
    print(f"| {name} | {grid} | {med('step_time_s'):.3f} | {med('tokens_per_s'):.0f} | "
          f"{med('flops_per_s') / 1e9:.2f} | {med('flops_per_s') / 1e9 / r0['world_size']:.2f} | "
          f"{ratio:.2f} | {comm_txt} | {share} | {r0['first_loss']:.4f} -> {r0['last_loss']:.4f} |")
h, t = runs["hpctrain dp=2 x tp=1"][0], runs["PyTorch DDP (gloo), unsharded"][0]
print()
print(f"FLOPs per trained sequence: hpctrain {h['train_flops_per_sample']:.4g}, "
      f"PyTorch {t['train_flops_per_sample']:.4g}; parameters {h['parameters']} / {t['parameters']}; "
      f"{rounds} round(s), medians shown")
PY
