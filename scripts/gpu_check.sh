#!/usr/bin/env bash
# One command that verifies and measures hpctrain on a machine with one NVIDIA GPU, PyTorch (a
# CUDA LibTorch inside pip's torch), nvcc, CMake and ninja, and no network or package manager.
# Its other dependencies and data come from the kit that scripts/gpu_kit.sh prepares on Debian
# (carry the kit folder with the working tree).
#   scripts/gpu_check.sh [OUT_DIR]     default: $OUT, else gpu-check-out
# Environment: HPCTRAIN_GPU_KIT (default gpu-kit), BUILD_DIR (default build-gpu),
#   GPU_CHECK_STEPS (CNN steps, default 200), GPU_CHECK_GPT_STEPS (default 30),
#   PYTHON (the python with torch; default python3), GPU_CHECK_PEAK_TFLOPS (dense bf16 peak,
#   default from the GPU name). For trying the script's
#   plumbing on a machine without a GPU: GPU_CHECK_DEVICE=cpu GPU_CHECK_SKIP_BUILD=1 BUILD_DIR=build
#   GPU_CHECK_GPT_SET="--set model.layers=1 ..." (every number is then a CPU number).
# Phases, each recorded in OUT_DIR/gpu_check.json (a failed phase is recorded and the next runs):
#   build (all cores) -> ctest -L gpu -> NCCL all-reduce bandwidth at 1 rank -> fmnist-cnn for
#   GPU_CHECK_STEPS steps on the GPU in fp32, bf16 and fp16 against a CPU fp32 run of the same
#   steps -> the GPU checkpoint evaluated on CPU and on GPU -> gpt2-124m in bf16 (tokens/s, FLOP/s,
#   MFU against the peak and against a measured bf16 matrix product) -> the same GPT step in
#   PyTorch (scripts/gpt_torch_reference.py) for the ratio. Prints a short table at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-${OUT:-gpu-check-out}}")
mkdir -p "$out"
log=$out/gpu_check.log
json=$out/gpu_check.json
: >"$log"
exec 3>&1
exec >>"$log" 2>&1
start=$SECONDS
say() { echo "[gpu_check $((SECONDS - start))s] $*" | tee /dev/fd/3; }
results=$out/phases.jsonl
: >"$results"
record() { echo "$1" >>"$results"; }  # one JSON object per phase

kit=$(realpath -m "${HPCTRAIN_GPU_KIT:-gpu-kit}")
build=${BUILD_DIR:-build-gpu}
steps=${GPU_CHECK_STEPS:-200}
gpt_steps=${GPU_CHECK_GPT_STEPS:-30}
py=${PYTHON:-$(command -v python3)}
dev=${GPU_CHECK_DEVICE:-cuda}
backend=nccl
[[ $dev == cpu ]] && backend=mpi
read -r -a gpt_set <<<"${GPU_CHECK_GPT_SET:-}"
[[ -f $kit/env.sh ]] || {
  say "no kit at $kit: run scripts/gpu_kit.sh on a Debian machine and carry its folder"
  exit 1
}
# shellcheck disable=SC1091
source "$kit/env.sh"
data=$kit/data
export HPCTRAIN_COLLECTIVE_TIMEOUT=120
mpi=("$kit_prefix/bin/mpirun.openmpi" --oversubscribe --bind-to none -x LD_LIBRARY_PATH -x OPAL_PREFIX)
[[ $(id -u) -eq 0 ]] && mpi+=(--allow-run-as-root)

# ---- machine
say "GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
torch_info=$("$py" -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.utils.cmake_prefix_path)' 2>&1)
say "PyTorch: $torch_info"
read -r torch_version torch_cuda torch_gpu torch_prefix <<<"$torch_info"
if [[ -n ${GPU_CHECK_PEAK_TFLOPS:-} ]]; then
  peak=$GPU_CHECK_PEAK_TFLOPS
else
  case $gpu_name in  # dense bf16 tensor-core peaks (no sparsity), TFLOP/s
  *H200* | *H100*SXM* | *"H100 80GB HBM3"*) peak=989 ;;
  *H100*) peak=756 ;;
  *A100*) peak=312 ;;
  *L40S*) peak=362 ;;
  *) peak=0 ;;
  esac
fi
record "$("$py" -c 'import json,sys; print(json.dumps({"phase":"machine","gpu":sys.argv[1],"torch":sys.argv[2],"torch_cuda":sys.argv[3],"cuda_available":sys.argv[4]=="True","peak_bf16_tflops":float(sys.argv[5]),"cores":int(sys.argv[6])}))' "$gpu_name" "$torch_version" "$torch_cuda" "$torch_gpu" "$peak" "$(nproc)")"

# ---- build with all cores against the kit and pip's CUDA LibTorch
nccl_dir=$("$py" -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null || true)
nccl_args=()
if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h ]]; then
  nccl_lib=$(find "$nccl_dir/lib" -name 'libnccl.so*' | head -1)
  nccl_args=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_lib")
fi
say "building in $build ($(nproc) cores; NCCL from ${nccl_dir:-the CUDA toolkit})"
t=$SECONDS
if [[ -n ${GPU_CHECK_SKIP_BUILD:-} ]]; then
  record "{\"phase\":\"build\",\"ok\":true,\"seconds\":0,\"skipped\":true}"
elif cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_WERROR=OFF \
  -DTorch_DIR="$torch_prefix/Torch" -DHPCTRAIN_WITH_NCCL=ON "${nccl_args[@]}" \
  "${hpctrain_kit_cmake_args[@]}" >"$out/configure.log" 2>&1 &&
  cmake --build "$build" -j "$(nproc)" --target hpctrain nccl_gpu_test >"$out/build.log" 2>&1; then
  record "{\"phase\":\"build\",\"ok\":true,\"seconds\":$((SECONDS - t))}"
else
  tail -40 "$out/configure.log" "$out/build.log" >&3
  record "{\"phase\":\"build\",\"ok\":false,\"seconds\":$((SECONDS - t))}"
  say "build failed: see $out/build.log"
  exit 1
fi
bin=$build/bin/hpctrain
"$bin" --device "$dev" env >"$out/env.txt" 2>&1
say "hpctrain env: $(grep -E 'libtorch_version|cuda_devices|nccl ' "$out/env.txt" | tr -s ' ' | tr '\n' ';')"

# ---- ctest -L gpu
say "ctest -L gpu"
mkdir -p "$build/test-data"
ln -sfn "$data/fashion-mnist" "$build/test-data/fashion-mnist"
t=$SECONDS
(cd "$build" && ctest -L gpu --output-on-failure) >"$out/ctest_gpu.log" 2>&1
rc=$?
summary=$(grep -E "tests passed|tests failed" "$out/ctest_gpu.log" | tail -1)
skipped=$(grep -c "Skipped" "$out/ctest_gpu.log")
record "{\"phase\":\"ctest_gpu\",\"ok\":$([[ $rc == 0 ]] && echo true || echo false),\"summary\":\"$summary\",\"skipped\":$skipped,\"seconds\":$((SECONDS - t))}"
say "ctest -L gpu: $summary ($skipped skipped)"

# ---- NCCL all-reduce bandwidth at 1 rank
say "NCCL all-reduce bandwidth (1 rank)"
"${mpi[@]}" -np 1 "$bin" --device "$dev" --comm-backend "$backend" bench allreduce --dtype float32 \
  --json >"$out/allreduce.json" 2>"$out/allreduce.err"
record "$("$py" - "$out/allreduce.json" <<'PY'
import json, sys
try:
    rows = json.load(open(sys.argv[1]))
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    best = max(rows, key=lambda r: r.get("busbw_gbs", r.get("busbw", 0)))
    print(json.dumps({"phase": "nccl_allreduce", "ok": True, "rows": rows, "largest": rows[-1], "best": best}))
except Exception as e:
    print(json.dumps({"phase": "nccl_allreduce", "ok": False, "error": str(e)}))
PY
)"

# ---- fmnist-cnn: CPU fp32 against GPU fp32, bf16, fp16
cnn=(-c configs/fmnist-cnn.yaml --set "data.train=$data/fashion-mnist/train.h5"
  --set "data.val=$data/fashion-mnist/test.h5" --set "run.max_steps=$steps" --set eval.every_steps=0
  --set eval.at_end=false --set logging.every_steps=10 --set logging.progress=plain --resume none)
runs=$out/runs
rm -rf "$runs"
mkdir -p "$runs"
say "fmnist-cnn $steps steps: CPU fp32"
"${mpi[@]}" -np 1 "$bin" --device cpu train "${cnn[@]}" --set "run.dir=$runs/cnn-cpu-fp32" \
  >"$out/cnn-cpu-fp32.log" 2>&1
for p in fp32 bf16 fp16; do
  say "fmnist-cnn $steps steps: GPU $p"
  "${mpi[@]}" -np 1 "$bin" --device "$dev" --comm-backend "$backend" train "${cnn[@]}" \
    --set "run.precision=$p" --set "run.dir=$runs/cnn-gpu-$p" >"$out/cnn-gpu-$p.log" 2>&1
done
record "$("$py" - "$runs" <<'PY'
import json, sys
runs = sys.argv[1]
# Loss curves diverge slowly (another summation order, TF32 convolutions in cuDNN, bf16/fp16
# rounding): the mean relative difference over the logged steps is compared, per precision.
tolerance = {"fp32": 0.02, "bf16": 0.05, "fp16": 0.05}
def curve(run):
    out = {}
    try:
        for line in open(f"{runs}/{run}/metrics.jsonl"):
            r = json.loads(line)
            if r.get("type") == "train":
                out[r["step"]] = r["loss"]
    except OSError:
        pass
    return out
def ledger(run):
    try:
        return json.load(open(f"{runs}/{run}/ledger.json"))
    except OSError:
        return {}
cpu = curve("cnn-cpu-fp32")
res = {"phase": "cnn_loss_curves", "steps": max(cpu) if cpu else 0, "ok": bool(cpu), "runs": {}}
for p, tol in tolerance.items():
    g = curve(f"cnn-gpu-{p}")
    common = sorted(set(cpu) & set(g))
    rel = [abs(g[s] - cpu[s]) / abs(cpu[s]) for s in common]
    mean = sum(rel) / len(rel) if rel else None
    ok = bool(rel) and len(common) == len(cpu) and mean <= tol
    l = ledger(f"cnn-gpu-{p}")
    res["runs"][p] = {"ok": ok, "mean_rel_diff": mean, "max_rel_diff": max(rel) if rel else None,
                      "tolerance": tol, "final_loss": g.get(max(g)) if g else None,
                      "samples_per_s": l.get("throughput", {}).get("train_samples_per_s"),
                      "skipped_steps": l.get("skipped_steps"), "loss_scale": l.get("loss_scale")}
    res["ok"] = res["ok"] and ok
res["cpu_final_loss"] = cpu.get(max(cpu)) if cpu else None
res["cpu_samples_per_s"] = ledger("cnn-cpu-fp32").get("throughput", {}).get("train_samples_per_s")
print(json.dumps(res))
PY
)"

# ---- the GPU checkpoint evaluated on CPU and on GPU
say "evaluating the GPU fp32 checkpoint on CPU and on GPU"
for d in cpu "$dev"; do
  "${mpi[@]}" -np 1 "$bin" --device "$d" eval --checkpoint "$runs/cnn-gpu-fp32" --fp32 \
    --data "$data/fashion-mnist/test.h5" --results "$out/eval-$d" --force >"$out/eval-$d.log" 2>&1
done
record "$("$py" - "$out" "$dev" <<'PY'
import json, sys
out = sys.argv[1]
def result(d):
    try:
        lines = open(f"{out}/eval-{d}/results.jsonl").read().splitlines()
        return json.loads(lines[-1])
    except (OSError, IndexError, ValueError):
        return None
c, g = result("cpu"), result(sys.argv[2])
res = {"phase": "eval_cpu_vs_gpu", "ok": False, "cpu": c and {k: c.get(k) for k in ("loss", "accuracy", "samples")},
       "gpu": g and {k: g.get(k) for k in ("loss", "accuracy", "samples")}}
if c and g:
    # Within float32 tolerance: the loss to 1e-4 relative, at most 2 of the predictions changed.
    res["loss_rel_diff"] = abs(c["loss"] - g["loss"]) / abs(c["loss"])
    res["accuracy_diff"] = abs(c["accuracy"] - g["accuracy"])
    res["ok"] = res["loss_rel_diff"] <= 1e-4 and res["accuracy_diff"] * c["samples"] <= 2
print(json.dumps(res))
PY
)"

# ---- gpt2-124m bf16: hpctrain, the matrix-product roof, PyTorch
gpt=(-c configs/gpt2-124m.yaml --set "data.train=$data/text/train.h5" --set "data.val=$data/text/val.h5"
  --set "run.max_steps=$gpt_steps" --set run.precision=bf16 "${gpt_set[@]}")
say "gpt2-124m bf16, $gpt_steps steps: hpctrain"
"${mpi[@]}" -np 1 "$bin" --device "$dev" --comm-backend "$backend" bench train "${gpt[@]}" \
  --set "run.dir=$runs/gpt2" --warmup-steps 5 --json >"$out/gpt-hpctrain.json" 2>"$out/gpt-hpctrain.err"
say "bf16 8192^3 matrix product (the roof)"
"$py" - "$dev" >"$out/matmul.json" 2>&1 <<'PY'
import json, sys, torch
dev = sys.argv[1]
n, reps = (8192, 20) if dev == "cuda" else (512, 3)
a = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
b = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
for _ in range(3):
    a @ b
if dev == "cuda":
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        a @ b
    e.record()
    torch.cuda.synchronize()
    sec = s.elapsed_time(e) / 1000 / reps
else:
    import time
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sec = (time.perf_counter() - t) / reps
print(json.dumps({"n": n, "seconds": sec, "tflops": 2 * n ** 3 / sec / 1e12}))
PY
say "gpt2-124m bf16, $gpt_steps steps: PyTorch"
"$py" scripts/gpt_torch_reference.py "${gpt[@]}" --device "$dev" --precision bf16 \
  --attention "$([[ $dev == cuda ]] && echo sdpa || echo explicit)" \
  --nproc 1 --warmup-steps 5 --json >"$out/gpt-pytorch.json" 2>"$out/gpt-pytorch.err"
record "$("$py" - "$out" "$peak" <<'PY'
import json, sys
out, peak = sys.argv[1], float(sys.argv[2])
def load(name):
    try:
        text = open(f"{out}/{name}").read().strip().splitlines()
        return json.loads(text[-1])
    except (OSError, IndexError, ValueError):
        return None
h, p, m = load("gpt-hpctrain.json"), load("gpt-pytorch.json"), load("matmul.json")
res = {"phase": "gpt2_124m_bf16", "ok": bool(h), "hpctrain": h and {k: h.get(k) for k in ("tokens_per_s", "flops_per_s", "step_time_s", "parameters", "global_batch")},
       "pytorch": p and {k: p.get(k) for k in ("tokens_per_s", "flops_per_s", "step_time_s", "impl")},
       "matmul_tflops": m and m.get("tflops"), "peak_tflops": peak}
if h:
    f = h["flops_per_s"] / 1e12
    res["hpctrain"]["tflops"] = f
    res["hpctrain"]["mfu_peak"] = f / peak if peak else None
    res["hpctrain"]["mfu_matmul"] = f / m["tflops"] if m else None
if h and p:
    res["hpctrain_over_pytorch_tokens"] = h["tokens_per_s"] / p["tokens_per_s"]
print(json.dumps(res))
PY
)"

# ---- one JSON, one table
"$py" - "$results" "$json" "$((SECONDS - start))" <<'PY' | tee /dev/fd/3
import json, sys
phases = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
doc = {"seconds": int(sys.argv[3]), "phases": {p["phase"]: p for p in phases}}
doc["ok"] = all(p.get("ok", True) for p in phases)
json.dump(doc, open(sys.argv[2], "w"), indent=1)
P = doc["phases"]
def f(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"
print(f"{'check':34s} {'result':>14s}  note")
print(f"{'build':34s} {('ok' if P.get('build', {}).get('ok') else 'FAILED'):>14s}  {P.get('build', {}).get('seconds', '-')} s")
c = P.get("ctest_gpu", {})
print(f"{'ctest -L gpu':34s} {('ok' if c.get('ok') else 'FAILED'):>14s}  {c.get('summary', '')}")
a = P.get("nccl_allreduce", {})
best = a.get("best") or {}
print(f"{'NCCL all-reduce busbw, 1 rank':34s} {f(best.get('busbw_gbs', best.get('busbw')), '.1f'):>14s}  GB/s (trivial at 1 rank: a copy)")
for p, r in P.get("cnn_loss_curves", {}).get("runs", {}).items():
    print(f"{'fmnist-cnn GPU ' + p + ' vs CPU fp32':34s} {f(r.get('mean_rel_diff'), '.2e'):>14s}  mean rel. loss diff (tol {r['tolerance']}) {'ok' if r['ok'] else 'FAILED'}, {f(r.get('samples_per_s'), ',.0f')} samples/s")
e = P.get("eval_cpu_vs_gpu", {})
print(f"{'eval of GPU checkpoint CPU vs GPU':34s} {f(e.get('loss_rel_diff'), '.2e'):>14s}  rel. loss diff, accuracy diff {f(e.get('accuracy_diff'), '.4f')} {'ok' if e.get('ok') else 'FAILED'}")
g = P.get("gpt2_124m_bf16", {})
h = g.get("hpctrain") or {}
py = g.get("pytorch") or {}
print(f"{'gpt2-124m bf16 hpctrain tokens/s':34s} {f(h.get('tokens_per_s'), ',.0f'):>14s}  {f(h.get('tflops'), '.0f')} TFLOP/s, MFU {f(h.get('mfu_peak'), '.1%')} of {g.get('peak_tflops')} peak, {f(h.get('mfu_matmul'), '.1%')} of the {f(g.get('matmul_tflops'), '.0f')} TFLOP/s matmul")
print(f"{'gpt2-124m bf16 PyTorch tokens/s':34s} {f(py.get('tokens_per_s'), ',.0f'):>14s}  hpctrain / PyTorch {f(g.get('hpctrain_over_pytorch_tokens'), '.2f')}")
print(f"{'total':34s} {doc['seconds']:>12d} s  {'all ok' if doc['ok'] else 'SOME CHECKS FAILED'}; {sys.argv[2]}")
PY
