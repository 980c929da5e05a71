#!/usr/bin/env bash
# GPT on one GPU: builds hpctrain against a CUDA LibTorch (the one inside pip's `torch` by
# default) with the NCCL backend in its own build directory, trains configs/gpt-small-tp2.yaml at
# tp = 1 in bfloat16 autocast for a fixed number of steps, and reports tokens/s, achieved FLOP/s
# (ledger.json: 3 x Gpt::forward_flops_per_sample per sequence) and MFU against the device's
# dense bfloat16 peak. Never a test; needs a GPU, the CUDA toolkit and NCCL.
#
#   scripts/bench_gpu.sh                         # peak detected from nvidia-smi's GPU name
#   scripts/bench_gpu.sh --peak-flops 989e12     # or given (FLOP/s, dense bf16)
#   STEPS=300 WARMUP=50 BATCH=32 BUILD_DIR=build-cuda scripts/bench_gpu.sh
#
# Environment: TORCH_DIR (a LibTorch cmake prefix; default from python's torch.utils), NCCL_ROOT
# (default: pip's nvidia-nccl wheel if present), PYTHON (default python3), CONFIG, STEPS, WARMUP,
# BATCH (sequences per step), BUILD_DIR (default build-cuda), SKIP_BUILD=1 (reuse the build).
set -euo pipefail
cd "$(dirname "$0")/.."
peak=""
while (($#)); do
  case $1 in
    --peak-flops) peak=$2; shift 2 ;;
    --peak-flops=*) peak=${1#*=}; shift ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench_gpu.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
config=${CONFIG:-configs/gpt-small-tp2.yaml}
steps=${STEPS:-300}
warmup=${WARMUP:-50}
batch=${BATCH:-32}
build_dir=${BUILD_DIR:-build-cuda}

command -v nvidia-smi >/dev/null || { echo "bench_gpu.sh: nvidia-smi not found: this needs a machine with an NVIDIA GPU" >&2; exit 1; }
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | head -1)
[[ -n $gpu ]] || { echo "bench_gpu.sh: nvidia-smi lists no GPU" >&2; exit 1; }

# Dense bfloat16 tensor-core peaks (FLOP/s, without sparsity) from the vendor data sheets.
if [[ -z $peak ]]; then
  case $gpu in
    *GH200*) peak=989e12 ;;
    *H200*) peak=989e12 ;;          # H200 SXM (NVL: 835e12; pass --peak-flops)
    *H100*PCIe*) peak=756e12 ;;
    *H100*) peak=989e12 ;;          # SXM
    *B200*) peak=2250e12 ;;
    *A100*) peak=312e12 ;;
    *A10G*) peak=70e12 ;;
    *L40S*) peak=362e12 ;;
    *L4*) peak=121e12 ;;
    *RTX\ 4090*) peak=165e12 ;;
    *V100*) peak=0 ;;               # no bfloat16 tensor cores
    *) echo "bench_gpu.sh: no peak known for '$gpu': pass --peak-flops (dense bf16 FLOP/s)" >&2; exit 2 ;;
  esac
fi
[[ $peak != 0 ]] || { echo "bench_gpu.sh: $gpu has no bfloat16 tensor cores; pass --peak-flops to compare anyway" >&2; exit 2; }

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  torch_dir=${TORCH_DIR:-$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')}
  [[ -d $torch_dir ]] || { echo "bench_gpu.sh: no LibTorch cmake prefix at '$torch_dir' (pip install torch, or set TORCH_DIR)" >&2; exit 1; }
  # NCCL: NCCL_ROOT if set, else the nvidia-nccl wheel that pip's torch depends on, else the
  # CUDA toolkit's default prefix (CMake's search).
  nccl_root=${NCCL_ROOT:-$("$python" -c 'import os, nvidia.nccl as n; print(os.path.dirname(n.__file__))' 2>/dev/null || true)}
  nccl_args=()
  if [[ -n $nccl_root ]]; then
    nccl_args=(-DNCCL_ROOT="$nccl_root")
    # The wheel ships only libnccl.so.2, which find_library(NAMES nccl) does not match.
    nccl_lib=$(find "$nccl_root/lib" -maxdepth 1 -name 'libnccl.so*' 2>/dev/null | sort | head -1)
    [[ -n $nccl_lib ]] && nccl_args+=(-DNCCL_LIBRARY="$nccl_lib" -DNCCL_INCLUDE_DIR="$nccl_root/include")
  fi
  echo "# building $build_dir against $torch_dir (CUDA LibTorch), NCCL on${nccl_root:+ ($nccl_root)}" >&2
  BUILD_DIR=$build_dir ./scripts/build.sh -DCMAKE_PREFIX_PATH="$torch_dir" -DTorch_DIR="$torch_dir/Torch" \
    -DHPCTRAIN_WITH_NCCL=ON -DHPCTRAIN_BUILD_TESTS=OFF "${nccl_args[@]}" >&2
fi
bin=$build_dir/bin/hpctrain
[[ -x $bin ]] || { echo "bench_gpu.sh: no binary at $bin" >&2; exit 1; }

train_file=$("$python" -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["data"]["train"])' "$config" 2>/dev/null || echo data/text/train.h5)
if [[ ! -f $train_file ]]; then
  echo "# $train_file missing: preparing Debian's fortunes into $(dirname "$train_file")" >&2
  "$bin" -q prepare text --in /usr/share/games/fortunes/*.u8 --out "$(dirname "$train_file")"
fi

run_dir=$(mktemp -d)
trap 'rm -rf "$run_dir"' EXIT
"$bin" --device cuda train -c "$config" --set parallel.tp=1 --set run.precision=bf16 \
  --set run.max_steps="$steps" --set data.batch_size="$batch" --set run.dir="$run_dir" \
  --set eval.every_steps=0 --set eval.at_end=false --set checkpoint.at_end=false \
  --set logging.every_steps=10 --set logging.progress=plain --resume none >&2

"$python" - "$run_dir" "$peak" "$gpu" "$warmup" "$config" "$steps" "$batch" <<'PY'
import json, sys
run, peak, gpu, warmup, config, steps, batch = sys.argv[1:8]
peak, warmup = float(peak), int(warmup)
ledger = json.load(open(f"{run}/ledger.json"))
records = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
train = [r for r in records if r["type"] == "train"]
# Steady state: logged intervals after the warm-up steps (each record covers the steps since the
# previous one), so start-up and autotuning are left out.
prev, seconds, counted = 0, 0.0, 0
for r in train:
    n = r["step"] - prev
    if prev >= warmup:
        seconds += r["step_time"] * n
        counted += n
    prev = r["step"]
if counted == 0:
    sys.exit(f"no logged steps after the {warmup} warm-up steps: raise STEPS")
samples = ledger["samples_trained"] / ledger["steps"]
tokens = samples * ledger["model"]["tokens_per_sample"]
flops_per_step = samples * ledger["flops"]["train_per_sample"]
step_time = seconds / counted
achieved = flops_per_step / step_time
print(f"# {gpu}: {config}, tp=1, bf16 autocast, {batch} sequences per step, {steps} steps "
      f"({counted} timed after {warmup} warm-up)")
print("| GPU | tokens/s | achieved TFLOP/s | peak bf16 TFLOP/s | MFU | step time (s) | whole-run ledger TFLOP/s |")
print("|---|---:|---:|---:|---:|---:|---:|")
print(f"| {gpu} | {tokens / step_time:.0f} | {achieved / 1e12:.1f} | {peak / 1e12:.0f} | "
      f"{100 * achieved / peak:.1f}% | {step_time:.4f} | {ledger['throughput']['train_flops_per_s'] / 1e12:.1f} |")
PY
