#!/usr/bin/env bash
# One command that verifies and measures hpctrain on a machine with one NVIDIA GPU, PyTorch (a
# CUDA LibTorch inside pip's torch), nvcc, CMake and ninja, and no network or package manager.
# Its other dependencies and data come from the kit that scripts/gpu_kit.sh prepares on Debian
# (carry the kit folder with the working tree: gpu_kit.sh prints what to carry).
#   scripts/gpu_check.sh [OUT_DIR]     default: $OUT, else gpu-check-out
# What comes back: OUT_DIR holds only gpu_check.json (rewritten after every phase), gpu_check.log
# and logs.tar.gz (text logs, metrics, ledgers, results; no checkpoints), each under 16 MiB.
# Everything else is written in a scratch folder (GPU_CHECK_WORK, default BUILD_DIR/gpu-check).
# Each phase runs under its own timeout (timeout -k), the whole check under a deadline
# (GPU_CHECK_DEADLINE_S, default 510 s): a phase that fails or hangs is recorded with its reason
# and the next one runs; past the deadline the remaining phases are recorded as skipped. The exit
# status is 1 when any phase failed, else 0. Phases, in order (the headline numbers first):
#   preflight  glibc, driver, GPU, nvcc, ldd of the kit's MPI, HDF5, yaml-cpp (stops on a problem)
#   torch      PyTorch's version, CUDA, prefix (one machine-readable line), the GPU's bf16 peak
#   build      hpctrain against the kit and pip's CUDA LibTorch, all cores (stops on failure)
#   gpt_hpctrain, matmul_roof, gpt_pytorch   gpt2-124m bf16: tokens/s, MFU against the dense
#              peak and a measured 8192^3 bf16 matrix product; the same step in PyTorch
#   cnn_curves fmnist-cnn GPU fp32 (run.tf32 false), bf16, fp16 against CPU fp32
#   nccl_allreduce, ctest_gpu, eval_cpu_vs_gpu, cnn_bench (samples/s after warm-up steps),
#   onnxruntime (the exported ONNX CNN against hpctrain eval --save-outputs), transformers
# Environment: HPCTRAIN_GPU_KIT (default gpu-kit; "none": this machine's MPI and libraries),
#   GPU_CHECK_DATA (default KIT/data), BUILD_DIR (default build-gpu), GPU_CHECK_STEPS (CNN steps,
#   default 200), GPU_CHECK_GPT_STEPS (default 30), GPU_CHECK_GPT_SET (extra --set for the gpt),
#   PYTHON (the python with torch; default python3), GPU_CHECK_PEAK_TFLOPS (dense bf16 peak;
#   default from the GPU name), GPU_CHECK_ONLY=phase,... (the others are recorded as skipped:
#   a rerun on a warm machine), GPU_CHECK_TIMEOUT_<phase>=S (one phase's timeout).
# CPU plumbing mode (tests/e2e/runtime/gpu_check_plumbing_test.sh): GPU_CHECK_DEVICE=cpu
#   GPU_CHECK_SKIP_BUILD=1 BUILD_DIR=build HPCTRAIN_GPU_KIT=none; GPU_CHECK_FAIL=phase,... and
#   GPU_CHECK_HANG=phase,... make phases fail or hang on purpose; GPU_CHECK_CTEST_REGEX and
#   GPU_CHECK_ALLREDUCE_SET narrow ctest_gpu and the all-reduce sizes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$(pwd)
self=$repo/scripts/gpu_check.sh

# ---- settings: the same in the driver and in every phase process (which is this script again)
out=$(realpath -m "${1:-${OUT:-gpu-check-out}}")
build=$(realpath -m "${BUILD_DIR:-build-gpu}")
work=$(realpath -m "${GPU_CHECK_WORK:-$build/gpu-check}")
kit_dir=${HPCTRAIN_GPU_KIT:-gpu-kit}
[[ $kit_dir != none ]] && kit_dir=$(realpath -m "$kit_dir")
data=$(realpath -m "${GPU_CHECK_DATA:-$kit_dir/data}")
bin=$build/bin/hpctrain
steps=${GPU_CHECK_STEPS:-200}
gpt_steps=${GPU_CHECK_GPT_STEPS:-30}
py=${PYTHON:-$(command -v python3 || echo python3)}
dev=${GPU_CHECK_DEVICE:-cuda}
backend=nccl
[[ $dev == cpu ]] && backend=mpi
runs=$work/runs
logs=$work/logs
export HPCTRAIN_COLLECTIVE_TIMEOUT=${HPCTRAIN_COLLECTIVE_TIMEOUT:-120}

phases=(preflight torch build gpt_hpctrain matmul_roof gpt_pytorch cnn_curves nccl_allreduce
  ctest_gpu eval_cpu_vs_gpu cnn_bench onnxruntime transformers)
declare -A limit=([preflight]=30 [torch]=90 [build]=330 [gpt_hpctrain]=120 [matmul_roof]=60
  [gpt_pytorch]=120 [cnn_curves]=150 [nccl_allreduce]=60 [ctest_gpu]=150 [eval_cpu_vs_gpu]=60
  [cnn_bench]=90 [onnxruntime]=90 [transformers]=30)

# The kit's libraries are on LD_LIBRARY_PATH only for the processes that need them (mpirun, the
# ranks, hpctrain, ctest, the compiler wrappers); python, cmake and nvcc never see bookworm's
# libssl, libcurl or libffi. The driver writes the values once into $work/kit.env.
with_kit() {
  if [[ -n ${kit_ld:-} ]]; then
    LD_LIBRARY_PATH=$kit_ld OPAL_PREFIX=$kit_prefix OMPI_MCA_mca_base_component_show_load_errors=0 "$@"
  else
    "$@"
  fi
}
mpi_run() {  # mpi_run NP CMD...: one node, shared memory, ranks get the kit's environment
  local np=$1
  shift
  local launcher=(mpirun)
  [[ -n ${kit_prefix:-} ]] && launcher=("$kit_prefix/bin/mpirun.openmpi" -x LD_LIBRARY_PATH -x OPAL_PREFIX)
  [[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
  with_kit "${launcher[@]}" --oversubscribe --bind-to none -np "$np" "$@"
}
# pyjson KEY=VALUE...: one JSON object (true/false/null and numbers typed, the rest strings).
pyjson() {
  "$py" -c '
import json, sys
def v(s):
    if s in ("true", "false"): return s == "true"
    if s == "null": return None
    try: return int(s)
    except ValueError: pass
    try: return float(s)
    except ValueError: return s
print(json.dumps({k: v(x) for k, x in (a.split("=", 1) for a in sys.argv[1:])}))' "$@"
}
in_list() { [[ ,$2, == *,$1,* ]]; }

# =====================================================================================  phases
# Each runs as `GPU_CHECK_PHASE=NAME scripts/gpu_check.sh` under timeout, writes its result (one
# JSON object) to $result and exits 0 when ok.

phase_preflight() {
  if [[ $kit_dir == none ]]; then
    pyjson phase=preflight ok=true kit="none: this machine's libraries" \
      glibc="$(getconf GNU_LIBC_VERSION | awk '{print $2}')" >"$result"
    return 0
  fi
  [[ -f $kit_dir/env.sh ]] || {
    pyjson phase=preflight ok=false reason="no kit at $kit_dir: run scripts/gpu_kit.sh on Debian and carry its folder" >"$result"
    return 1
  }
  GPU_CHECK_DEVICE=$dev bash "$repo/scripts/gpu_preflight.sh" "$kit_dir" "$result"
}

phase_torch() {
  # One line, marked, taken exactly: a warning printed while importing torch cannot shift it.
  "$py" - >"$work/torch.out" 2>"$logs/torch.err" <<'PY'
import json, os
import torch
info = {"torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(), "prefix": torch.utils.cmake_prefix_path,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "gpus": torch.cuda.device_count()}
try:
    import nvidia.nccl
    info["nccl_dir"] = list(nvidia.nccl.__path__)[0]
except Exception:
    info["nccl_dir"] = None
for mod in ("onnxruntime", "transformers", "h5py", "yaml", "numpy", "onnx"):
    try:
        __import__(mod)
        info["has_" + mod] = True
    except Exception:
        info["has_" + mod] = False
print("HPCTRAIN_TORCH_INFO " + json.dumps(info))
PY
  local line
  line=$(grep -m1 '^HPCTRAIN_TORCH_INFO ' "$work/torch.out" | cut -d' ' -f2-)
  "$py" - "$line" "$dev" "${GPU_CHECK_PEAK_TFLOPS:-}" "$work/torch.env" "$(nproc)" >"$result" <<'PY'
import json, shlex, sys
line, dev, peak, env_file, cores = sys.argv[1:]
if not line:
    print(json.dumps({"phase": "torch", "ok": False, "reason": "python could not import torch (see logs/torch.err)"}))
    sys.exit(1)
info = json.loads(line)
if not peak:
    name = info.get("gpu") or ""
    # Dense bf16 tensor-core peaks (no sparsity), TFLOP/s.
    table = [("H200", 989), ("H100 80GB HBM3", 989), ("H100 SXM", 989), ("H100", 756),
             ("A100", 312), ("L40S", 362)]
    peak = next((p for key, p in table if key in name), 0)
res = {"phase": "torch", **info, "peak_bf16_tflops": float(peak), "cores": int(cores)}
res["ok"] = dev == "cpu" or bool(info["cuda_available"])
if not res["ok"]:
    res["reason"] = "torch.cuda.is_available() is False: no usable GPU for PyTorch"
with open(env_file, "w") as f:
    f.write(f"torch_prefix={shlex.quote(info['prefix'])}\n")
    f.write(f"nccl_dir={shlex.quote(info['nccl_dir'] or '')}\n")
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_build() {
  if [[ -n ${GPU_CHECK_SKIP_BUILD:-} ]]; then
    [[ -x $bin ]] || {
      pyjson phase=build ok=false reason="GPU_CHECK_SKIP_BUILD but no $bin" >"$result"
      return 1
    }
    pyjson phase=build ok=true skipped_build=true binary="$bin" >"$result"
    return 0
  fi
  # shellcheck disable=SC1091
  source "$work/torch.env"
  local args=(-DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_WERROR=OFF -DTorch_DIR="$torch_prefix/Torch"
    -DHPCTRAIN_WITH_NCCL=ON)
  local nvcc
  nvcc=$(command -v nvcc || true)
  if [[ -n $nvcc ]]; then  # the toolkit on PATH, not whichever CMake would find first
    args+=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$(realpath "$nvcc")")")")
  fi
  if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h ]]; then
    args+=(-DNCCL_INCLUDE_DIR="$nccl_dir/include"
      -DNCCL_LIBRARY="$(find "$nccl_dir/lib" -name 'libnccl.so*' | sort | head -1)")
  fi
  local path=$PATH
  if [[ $kit_dir != none ]]; then
    # The kit's CMake hints; its compiler wrappers (binaries linked against the kit's libraries)
    # run through wrappers that give only them the kit's LD_LIBRARY_PATH.
    local saved_ld=${LD_LIBRARY_PATH-} hpctrain_kit_cmake_args=()
    # shellcheck disable=SC1091
    source "$kit_dir/env.sh"
    export LD_LIBRARY_PATH=$saved_ld PATH=$path
    [[ -z $saved_ld ]] && unset LD_LIBRARY_PATH
    mkdir -p "$work/bin"
    local w real
    for w in mpicc mpicxx mpicc.openmpi mpicxx.openmpi mpirun mpiexec mpirun.openmpi; do
      real=$kit_prefix/bin/$w
      [[ -e $real ]] || continue
      printf '#!/bin/sh\nLD_LIBRARY_PATH=%q OPAL_PREFIX=%q exec %q "$@"\n' "$kit_ld" "$kit_prefix" \
        "$(realpath "$real")" >"$work/bin/$w"
      chmod +x "$work/bin/$w"
    done
    args+=("${hpctrain_kit_cmake_args[@]}" -DMPI_C_COMPILER="$work/bin/mpicc.openmpi"
      -DMPI_CXX_COMPILER="$work/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$work/bin/mpirun.openmpi")
    path=$work/bin:$kit_prefix/bin:$PATH
  fi
  local t=$SECONDS rc=0
  PATH=$path cmake -S "$repo" -B "$build" -G Ninja "${args[@]}" >"$logs/configure.log" 2>&1 || rc=$?
  if ((rc == 0)); then
    PATH=$path cmake --build "$build" -j "$(nproc)" --target hpctrain >"$logs/build.log" 2>&1 || rc=$?
  fi
  local missing=""
  [[ -x $bin ]] && missing=$(with_kit ldd "$bin" 2>&1 | grep "not found" | tr -s ' \t' ' ' | paste -sd ';' -)
  "$py" - "$rc" "$((SECONDS - t))" "$logs/configure.log" "$logs/build.log" "$missing" >"$result" <<'PY'
import json, re, sys
rc, seconds, configure, build, missing = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
res = {"phase": "build", "ok": rc == 0 and not missing, "seconds": seconds}
if rc != 0:
    lines = []
    for path in (configure, build):
        try:
            lines = open(path, errors="replace").read().splitlines() or lines
        except OSError:
            pass
    errors = [l for l in lines if re.search(r"error|Error|FAILED|not found", l)]
    res["error_lines"] = (errors[-15:] or lines[-15:])
    res["reason"] = f"build exit {rc}: " + (res["error_lines"][0] if res["error_lines"] else "no output")
if missing:
    res["ldd_not_found"] = missing.split(";")
    res.setdefault("reason", "libraries not found: " + missing)
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

gpt_args() {
  gpt=(-c "$repo/configs/gpt2-124m.yaml" --set "data.train=$data/text/train.h5"
    --set "data.val=$data/text/val.h5" --set "run.max_steps=$gpt_steps" --set run.precision=bf16)
  local extra
  read -r -a extra <<<"${GPU_CHECK_GPT_SET:-}"
  gpt+=("${extra[@]}")
}

phase_gpt_hpctrain() {
  gpt_args
  mpi_run 1 "$bin" --device "$dev" --comm-backend "$backend" bench train "${gpt[@]}" \
    --set "run.dir=$runs/gpt2" --warmup-steps 5 --json >"$logs/gpt-hpctrain.json" 2>"$logs/gpt-hpctrain.err"
  local rc=$?
  "$py" - "$logs/gpt-hpctrain.json" "$rc" "$runs/gpt2/ledger.json" >"$result" <<'PY'
import json, sys
path, rc, ledger = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    h = json.loads(open(path).read().strip().splitlines()[-1])
except (OSError, IndexError, ValueError):
    print(json.dumps({"phase": "gpt_hpctrain", "ok": False, "reason": f"bench train exit {rc}, no JSON (logs/gpt-hpctrain.err)"}))
    sys.exit(1)
res = {"phase": "gpt_hpctrain", "ok": rc == 0}
res.update({k: h.get(k) for k in ("tokens_per_s", "flops_per_s", "step_time_s", "parameters",
                                  "global_batch", "steps", "warmup_steps", "first_loss", "last_loss")})
try:
    res["peak_device_memory_bytes"] = json.load(open(ledger)).get("memory", {}).get("peak_device_bytes")
except (OSError, ValueError):
    pass
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_matmul_roof() {
  "$py" - "$dev" >"$result" 2>"$logs/matmul.err" <<'PY'
import json, sys, time
import torch
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
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    sec = (time.perf_counter() - t) / reps
print(json.dumps({"phase": "matmul_roof", "ok": True, "n": n, "seconds": sec,
                  "tflops": 2 * n ** 3 / sec / 1e12}))
PY
}

phase_gpt_pytorch() {
  gpt_args
  "$py" "$repo/scripts/gpt_torch_reference.py" "${gpt[@]}" --device "$dev" --precision bf16 \
    --attention "$([[ $dev == cuda ]] && echo sdpa || echo explicit)" --nproc 1 --warmup-steps 5 \
    --json >"$logs/gpt-pytorch.json" 2>"$logs/gpt-pytorch.err"
  local rc=$?
  "$py" - "$logs/gpt-pytorch.json" "$rc" >"$result" <<'PY'
import json, sys
try:
    p = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
except (OSError, IndexError, ValueError):
    print(json.dumps({"phase": "gpt_pytorch", "ok": False, "reason": f"exit {sys.argv[2]}, no JSON (logs/gpt-pytorch.err)"}))
    sys.exit(1)
res = {"phase": "gpt_pytorch", "ok": True}
res.update({k: p.get(k) for k in ("tokens_per_s", "flops_per_s", "step_time_s", "impl", "first_loss", "last_loss")})
print(json.dumps(res))
PY
}

cnn_args() {  # the CNN run of `train` (cnn) and of `bench train` (cnn_bench: no --resume there)
  cnn=(-c "$repo/configs/fmnist-cnn.yaml" --set "data.train=$data/fashion-mnist/train.h5"
    --set "data.val=$data/fashion-mnist/test.h5" --set "run.max_steps=$steps"
    --set eval.every_steps=0 --set eval.at_end=false --set logging.every_steps=10
    --set logging.progress=plain)
}
gpu_precisions() {
  precisions=(fp32 bf16)
  [[ $dev == cuda ]] && precisions+=(fp16)  # CPU autocast has no float16: skipped in plumbing mode
}

phase_cnn_curves() {
  cnn_args
  gpu_precisions
  rm -rf "$runs"/cnn-*
  # fp32 is IEEE float32 on both sides: run.tf32 false (cuDNN convolutions default to TF32).
  mpi_run 1 "$bin" --device cpu train "${cnn[@]}" --resume none --set run.tf32=false \
    --set "run.dir=$runs/cnn-cpu-fp32" >"$logs/cnn-cpu-fp32.log" 2>&1
  local p
  for p in "${precisions[@]}"; do
    mpi_run 1 "$bin" --device "$dev" --comm-backend "$backend" train "${cnn[@]}" --resume none \
      --set "run.precision=$p" --set run.tf32=false --set "run.dir=$runs/cnn-gpu-$p" \
      >"$logs/cnn-gpu-$p.log" 2>&1
  done
  "$py" - "$runs" "$dev" >"$result" <<'PY'
import json, sys
runs, dev = sys.argv[1], sys.argv[2]
# Loss curves diverge slowly (another summation order, bf16/fp16 rounding): the mean relative
# difference over the logged steps is compared, per precision; fp32 also at step 10.
tolerance = {"fp32": 0.02, "bf16": 0.05, "fp16": 0.05}
def curve(run):
    out = {}
    try:
        for line in open(f"{runs}/{run}/metrics.jsonl"):
            r = json.loads(line)
            if r.get("type") == "train":
                out[r["step"]] = r["loss"]
    except (OSError, ValueError):
        pass
    return out
def ledger(run):
    try:
        return json.load(open(f"{runs}/{run}/ledger.json"))
    except (OSError, ValueError):
        return {}
cpu = curve("cnn-cpu-fp32")
res = {"phase": "cnn_curves", "steps": max(cpu) if cpu else 0, "ok": bool(cpu), "runs": {},
       "cpu_final_loss": cpu[max(cpu)] if cpu else None}
if not cpu:
    res["reason"] = "the CPU fp32 run wrote no losses (logs/cnn-cpu-fp32.log)"
for p, tol in tolerance.items():
    if p == "fp16" and dev == "cpu":
        res["runs"][p] = {"skipped": True, "reason": "CPU autocast has no float16"}
        continue
    g = curve(f"cnn-gpu-{p}")
    common = sorted(set(cpu) & set(g))
    rel = [abs(g[s] - cpu[s]) / abs(cpu[s]) for s in common]
    mean = sum(rel) / len(rel) if rel else None
    ok = bool(rel) and len(common) == len(cpu) and mean <= tol
    l = ledger(f"cnn-gpu-{p}")
    res["runs"][p] = {"ok": ok, "mean_rel_diff": mean, "max_rel_diff": max(rel) if rel else None,
                      "first_rel_diff": rel[0] if rel else None, "tolerance": tol,
                      "final_loss": g[max(g)] if g else None, "tf32": l.get("tf32"),
                      "skipped_steps": l.get("skipped_steps"), "loss_scale": l.get("loss_scale")}
    if not ok:
        res.setdefault("reason", f"{p}: mean relative loss difference {mean} (tolerance {tol}) over {len(common)} of {len(cpu)} steps")
    res["ok"] = res["ok"] and ok
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_nccl_allreduce() {
  local extra
  read -r -a extra <<<"${GPU_CHECK_ALLREDUCE_SET:-}"  # plumbing mode: fewer sizes
  mpi_run 1 "$bin" --device "$dev" --comm-backend "$backend" bench allreduce --dtype float32 \
    "${extra[@]}" --json >"$logs/allreduce.json" 2>"$logs/allreduce.err"
  local rc=$?
  "$py" - "$logs/allreduce.json" "$rc" "$backend" >"$result" <<'PY'
import json, sys
try:
    rows = json.loads(open(sys.argv[1]).read())
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    best = max(rows, key=lambda r: r.get("busbw_gbs", r.get("busbw", 0)))
except Exception as e:
    print(json.dumps({"phase": "nccl_allreduce", "ok": False, "reason": f"exit {sys.argv[2]}: {e} (logs/allreduce.err)"}))
    sys.exit(1)
print(json.dumps({"phase": "nccl_allreduce", "ok": sys.argv[2] == "0", "backend": sys.argv[3],
                  "ranks": 1, "largest": rows[-1], "best": best, "rows": rows}))
PY
}

phase_ctest_gpu() {
  if [[ -z ${GPU_CHECK_SKIP_BUILD:-} ]]; then
    cmake --build "$build" -j "$(nproc)" --target nccl_gpu_test >"$logs/build-tests.log" 2>&1 || {
      pyjson phase=ctest_gpu ok=false reason="building nccl_gpu_test failed: $(grep -m1 -E 'error' "$logs/build-tests.log")" >"$result"
      return 1
    }
  fi
  # The fixture that prepares Fashion-MNIST finds the kit's copy already there.
  if [[ ! -e $build/test-data/fashion-mnist/train.h5 ]]; then
    mkdir -p "$build/test-data"
    ln -sfn "$data/fashion-mnist" "$build/test-data/fashion-mnist"
  fi
  local select=()
  [[ -n ${GPU_CHECK_CTEST_REGEX:-} ]] && select=(-R "$GPU_CHECK_CTEST_REGEX")
  (cd "$build" && with_kit ctest -L gpu "${select[@]}" --output-on-failure) >"$logs/ctest_gpu.log" 2>&1
  local rc=$?
  local summary skipped
  summary=$(grep -E "tests passed|tests failed" "$logs/ctest_gpu.log" | tail -1)
  skipped=$(grep -cE "\*\*\*Skipped|Skipped " "$logs/ctest_gpu.log")
  pyjson phase=ctest_gpu ok="$([[ $rc == 0 ]] && echo true || echo false)" summary="$summary" \
    skipped="$skipped" skip_reasons="$(grep -hoE '(SKIP|Skipped)[^"]*' "$logs/ctest_gpu.log" | sort -u | head -5 | paste -sd ';' -)" \
    reason="$([[ $rc == 0 ]] || grep -E 'Failed|\*\*\*' "$logs/ctest_gpu.log" | head -3 | paste -sd ';' -)" >"$result"
  return "$rc"
}

phase_eval_cpu_vs_gpu() {
  local d
  for d in cpu "$dev"; do
    mpi_run 1 "$bin" --device "$d" eval --checkpoint "$runs/cnn-gpu-fp32" --fp32 \
      --data "$data/fashion-mnist/test.h5" --results "$work/eval-$d" --force >"$logs/eval-$d.log" 2>&1
  done
  "$py" - "$work" "$dev" >"$result" <<'PY'
import json, sys
work, dev = sys.argv[1], sys.argv[2]
def result(d):
    try:
        return json.loads(open(f"{work}/eval-{d}/results.jsonl").read().splitlines()[-1])
    except (OSError, IndexError, ValueError):
        return None
c, g = result("cpu"), result(dev)
keys = ("loss", "accuracy", "samples")
res = {"phase": "eval_cpu_vs_gpu", "ok": False, "tf32": False, "cpu": c and {k: c.get(k) for k in keys},
       "gpu": g and {k: g.get(k) for k in keys}}
if c and g:
    # Within float32 tolerance (TF32 off: the checkpoint's run.tf32 is false): the loss to 1e-4
    # relative, at most 2 of the predictions changed.
    res["loss_rel_diff"] = abs(c["loss"] - g["loss"]) / abs(c["loss"])
    res["accuracy_diff"] = abs(c["accuracy"] - g["accuracy"])
    res["ok"] = res["loss_rel_diff"] <= 1e-4 and res["accuracy_diff"] * c["samples"] <= 2
    if not res["ok"]:
        res["reason"] = f"loss relative difference {res['loss_rel_diff']:.3g} (1e-4), accuracy difference {res['accuracy_diff']}"
else:
    res["reason"] = "no result from " + ("the CPU" if not c else "the GPU") + " evaluation (logs/eval-*.log; needs cnn_curves' checkpoint)"
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_cnn_bench() {
  cnn_args
  gpu_precisions
  local p bench_steps=$((steps < 60 ? steps : 60))
  for p in "${precisions[@]}"; do
    mpi_run 1 "$bin" --device "$dev" --comm-backend "$backend" bench train "${cnn[@]}" \
      --set "run.max_steps=$bench_steps" --set "run.precision=$p" --set run.tf32=false \
      --set "run.dir=$runs/cnn-bench-$p" --warmup-steps "$((bench_steps / 4))" --json \
      >"$logs/cnn-bench-$p.json" 2>"$logs/cnn-bench-$p.err"
  done
  "$py" - "$logs" "${precisions[*]}" >"$result" <<'PY'
import json, sys
logs, precisions = sys.argv[1], sys.argv[2].split()
res = {"phase": "cnn_bench", "ok": True, "runs": {}}
for p in precisions:
    try:
        b = json.loads(open(f"{logs}/cnn-bench-{p}.json").read().strip().splitlines()[-1])
        res["runs"][p] = {k: b.get(k) for k in ("samples_per_s", "step_time_s", "steps", "warmup_steps", "global_batch")}
    except (OSError, IndexError, ValueError):
        res["ok"] = False
        res["reason"] = f"{p}: no JSON from bench train (logs/cnn-bench-{p}.err)"
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_onnxruntime() {
  if ! "$py" -c "import onnxruntime" 2>/dev/null; then
    pyjson phase=onnxruntime ok=true skipped=true reason="onnxruntime is not installed in $py" >"$result"
    return 0
  fi
  # hpctrain export runs python for the ONNX exporter: that python must not inherit the kit's
  # LD_LIBRARY_PATH (hpctrain itself runs with it).
  mkdir -p "$work/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%q exec %q "$@"\n' "${LD_LIBRARY_PATH-}" "$(command -v "$py")" >"$work/bin/python-clean"
  chmod +x "$work/bin/python-clean"
  rm -f "$work/cnn.onnx" "$work/cnn-outputs.pt"
  HPCTRAIN_PYTHON=$work/bin/python-clean with_kit "$bin" export "$runs/cnn-gpu-fp32" --format onnx \
    --out "$work/cnn.onnx" >"$logs/export-onnx.log" 2>&1
  local n=256
  mpi_run 1 "$bin" --device cpu eval --checkpoint "$runs/cnn-gpu-fp32" --fp32 \
    --data "$data/fashion-mnist/test.h5" --max-samples "$n" --save-outputs "$work/cnn-outputs.pt" \
    --results "$work/eval-onnx" >"$logs/eval-outputs.log" 2>&1
  "$py" - "$work" "$data/fashion-mnist/test-inputs-256.npy" "$n" >"$result" <<'PY'
import json, sys
import numpy as np
work, inputs, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
res = {"phase": "onnxruntime", "ok": False, "samples": n, "tolerance": 1e-4}
try:
    import onnxruntime as ort
    import torch
    ref = torch.load(f"{work}/cnn-outputs.pt").numpy()
    raw = np.load(inputs)[:n]
    x = (np.arange(256) / 255.0).astype(np.float32)[raw]  # hpctrain's uint8 -> [0, 1] table
    s = ort.InferenceSession(f"{work}/cnn.onnx", providers=["CPUExecutionProvider"])
    x = x.reshape((n,) + tuple(s.get_inputs()[0].shape[1:]))  # [batch, 1, 28, 28]
    got = s.run(None, {s.get_inputs()[0].name: x})[0]
    scale = float(np.abs(ref).max())
    res["onnxruntime"] = ort.__version__
    res["max_abs_diff"] = float(np.abs(got - ref).max())
    res["max_rel_diff"] = res["max_abs_diff"] / scale
    res["ok"] = got.shape == ref.shape and res["max_rel_diff"] <= 1e-4
    if not res["ok"]:
        res["reason"] = f"ONNX logits {got.shape} differ from hpctrain's {ref.shape} by {res['max_rel_diff']:.3g} of the largest"
except Exception as e:
    res["reason"] = f"{type(e).__name__}: {e} (logs/export-onnx.log, logs/eval-outputs.log)"
print(json.dumps(res))
sys.exit(0 if res["ok"] else 1)
PY
}

phase_transformers() {
  # hpctrain export writes pytorch, torchscript and onnx; a safetensors export for transformers'
  # GPT-2 does not exist yet, so there is nothing to load.
  pyjson phase=transformers ok=true skipped=true \
    reason="hpctrain export has no safetensors format yet (pytorch, torchscript, onnx)" >"$result"
}

if [[ -n ${GPU_CHECK_PHASE:-} ]]; then
  phase=$GPU_CHECK_PHASE
  result=$work/phases/$phase.json
  # shellcheck disable=SC1091
  [[ -f $work/kit.env ]] && source "$work/kit.env"
  if in_list "$phase" "${GPU_CHECK_HANG:-}"; then
    echo "GPU_CHECK_HANG: phase $phase sleeps past its timeout"
    sleep 100000
  fi
  if in_list "$phase" "${GPU_CHECK_FAIL:-}"; then
    pyjson phase="$phase" ok=false reason="forced failure (GPU_CHECK_FAIL)" >"$result"
    exit 1
  fi
  "phase_$phase"
  exit $?
fi

# =====================================================================================  driver
mkdir -p "$out" "$work"
rm -rf "$work/phases" "$work/history" "$logs"
mkdir -p "$work/phases" "$work/history" "$logs" "$runs"
# $OUT holds only what comes back (this script's own files from an earlier run are replaced).
rm -f "$out/gpu_check.json" "$out/logs.tar.gz" "$out"/*.tmp
log=$out/gpu_check.log
: >"$log"
start=$SECONDS
deadline=${GPU_CHECK_DEADLINE_S:-510}
say() { echo "[gpu_check $((SECONDS - start))s] $*" | tee -a "$log"; }

if [[ $kit_dir != none && -f $kit_dir/env.sh ]]; then
  # shellcheck disable=SC2016  # expanded by the inner shell, after sourcing env.sh
  mapfile -t kv < <(bash -c 'source "$1/env.sh" && printf "%s\n%s\n" "$kit_prefix" "$LD_LIBRARY_PATH"' _ "$kit_dir")
  printf 'kit_prefix=%q\nkit_ld=%q\n' "${kv[0]}" "${kv[1]}" >"$work/kit.env"
else
  : >"$work/kit.env"
fi

# gpu_check.json from the phases so far (the rest pending), with the headline numbers; a copy
# per phase in $work/history; logs.tar.gz with the text files. Both written atomically.
assemble() {
  local n=$1 name=$2
  "$py" - "$work/phases" "$out/gpu_check.json" "$((SECONDS - start))" "$deadline" "$dev" "${phases[@]}" <<'PY' >>"$log" 2>&1
import json, os, sys
phase_dir, target, seconds, deadline, dev = sys.argv[1:6]
names = sys.argv[6:]
P = {}
for n in names:
    try:
        P[n] = json.load(open(f"{phase_dir}/{n}.json"))
    except (OSError, ValueError):
        P[n] = {"phase": n, "status": "pending"}
for n, p in P.items():
    if "status" not in p:
        p["status"] = "skipped" if p.get("skipped") else ("ok" if p.get("ok") else "failed")
doc = {"seconds": int(seconds), "deadline_s": int(deadline), "device": dev,
       "ok": not any(p["status"] == "failed" for p in P.values()),
       "failed": [n for n, p in P.items() if p["status"] == "failed"],
       "skipped": [n for n, p in P.items() if p["status"] == "skipped"],
       "pending": [n for n, p in P.items() if p["status"] == "pending"]}
t, h, m, pt = P["torch"], P["gpt_hpctrain"], P["matmul_roof"], P["gpt_pytorch"]
s = {"gpu": t.get("gpu"), "torch": t.get("torch"), "peak_bf16_tflops": t.get("peak_bf16_tflops")}
if h.get("flops_per_s"):
    tf = h["flops_per_s"] / 1e12
    s["gpt2_124m_bf16"] = {"tokens_per_s": h.get("tokens_per_s"), "tflops": tf,
                           "mfu_peak": tf / t["peak_bf16_tflops"] if t.get("peak_bf16_tflops") else None,
                           "matmul_tflops": m.get("tflops"),
                           "mfu_matmul": tf / m["tflops"] if m.get("tflops") else None,
                           "pytorch_tokens_per_s": pt.get("tokens_per_s"),
                           "hpctrain_over_pytorch": h["tokens_per_s"] / pt["tokens_per_s"] if pt.get("tokens_per_s") else None}
b = P["nccl_allreduce"].get("best")
if b:
    s["nccl_busbw_gbs_1rank"] = b.get("busbw_gbs", b.get("busbw"))
c = P["cnn_curves"].get("runs")
if c:
    s["cnn_loss_agreement"] = {p: r.get("mean_rel_diff") for p, r in c.items()}
    s["fp32_tf32"] = "off (run.tf32: false) for the fp32 runs and the CPU-vs-GPU evaluation"
doc["summary"] = s
doc["phases"] = P
tmp = target + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
os.replace(tmp, target)
PY
  cp "$out/gpu_check.json" "$work/history/$(printf %02d "$n")-$name.json"
  (cd "$work" && find . -type f \( -name '*.log' -o -name '*.err' -o -name '*.json' \
    -o -name '*.jsonl' -o -name '*.txt' -o -name '*.yaml' -o -name '*.out' \) -size -4M \
    ! -path './history/*' ! -path '*/step_*' ! -path '*/checkpoints/*' -print |
    sort >"$work/logs.list")
  tar -czf "$out/logs.tar.gz.tmp" -C "$work" -T "$work/logs.list" 2>>"$log" &&
    mv "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
  if (($(stat -c %s "$out/logs.tar.gz" 2>/dev/null || echo 0) > 15 * 1024 * 1024)); then
    tar -czf "$out/logs.tar.gz" -C "$work" logs 2>>"$log"  # only the logs, if it grew too large
  fi
}

stop_reason=""
i=0
for name in "${phases[@]}"; do
  i=$((i + 1))
  result=$work/phases/$name.json
  if [[ -n ${GPU_CHECK_ONLY:-} ]] && ! in_list "$name" "$GPU_CHECK_ONLY"; then
    pyjson phase="$name" skipped=true reason="not in GPU_CHECK_ONLY" >"$result"
    assemble "$i" "$name"
    continue
  fi
  left=$((deadline - (SECONDS - start)))
  if [[ -n $stop_reason ]] || ((left < 5)); then
    why=${stop_reason:-"deadline: $((SECONDS - start)) s of $deadline s used"}
    pyjson phase="$name" skipped=true reason="$why" >"$result"
    say "$name: skipped ($why)"
    assemble "$i" "$name"
    continue
  fi
  var=GPU_CHECK_TIMEOUT_$name
  t=${!var:-${limit[$name]}}
  cut=""
  if ((t > left)); then
    t=$left
    cut=" (cut to the deadline's remainder)"
  fi
  say "$name (timeout ${t} s)"
  t0=$SECONDS
  GPU_CHECK_PHASE=$name GPU_CHECK_WORK=$work timeout -k 10 "$t" "$self" "$out" >"$logs/phase-$name.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  if [[ ! -s $result ]] || ! "$py" -c 'import json,sys; json.load(open(sys.argv[1]))' "$result" 2>/dev/null; then
    if ((rc == 124 || rc == 137)); then
      reason="timed out after $t s$cut"
    else
      reason="exit $rc without a result: $(tail -3 "$logs/phase-$name.log" | tr '\n' ' ' | cut -c1-300)"
    fi
    pyjson phase="$name" ok=false reason="$reason" >"$result"
  fi
  "$py" - "$result" "$took" "$rc" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["seconds"] = int(sys.argv[2])
r["exit"] = int(sys.argv[3])
json.dump(r, open(sys.argv[1], "w"))
PY
  status=$("$py" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("skipped" if r.get("skipped") else "ok" if r.get("ok") else "FAILED: " + str(r.get("reason", "")))' "$result")
  say "$name: $status (${took} s)"
  if [[ $status == FAILED* ]]; then
    case $name in
    preflight | torch | build) stop_reason="$name failed: ${status#FAILED: }" ;;
    esac
  fi
  assemble "$i" "$name"
done

"$py" - "$out/gpu_check.json" <<'PY' | tee -a "$log"
import json, sys
doc = json.load(open(sys.argv[1]))
P, s = doc["phases"], doc["summary"]
def f(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"
print(f"{'phase':18s} {'status':8s} {'s':>4s}  note")
for n, p in P.items():
    note = p.get("reason", "") if p["status"] != "ok" else ""
    print(f"{n:18s} {p['status']:8s} {p.get('seconds', 0):4d}  {note[:90]}")
g = s.get("gpt2_124m_bf16") or {}
print(f"gpt2-124m bf16: {f(g.get('tokens_per_s'), ',.0f')} tokens/s, {f(g.get('tflops'), '.1f')} TFLOP/s, "
      f"MFU {f(g.get('mfu_peak'), '.1%')} of {s.get('peak_bf16_tflops')} peak, {f(g.get('mfu_matmul'), '.1%')} of the "
      f"{f(g.get('matmul_tflops'), '.0f')} TFLOP/s matmul; PyTorch {f(g.get('pytorch_tokens_per_s'), ',.0f')} tokens/s "
      f"(hpctrain / PyTorch {f(g.get('hpctrain_over_pytorch'), '.2f')})")
print(f"NCCL busbw (1 rank): {f(s.get('nccl_busbw_gbs_1rank'), '.1f')} GB/s; CNN mean rel. loss diff vs CPU fp32: "
      + ", ".join(f"{p} {f(v, '.2e')}" for p, v in (s.get("cnn_loss_agreement") or {}).items()))
print(f"total {doc['seconds']} s (deadline {doc['deadline_s']} s): "
      + ("all ok" if doc["ok"] else "FAILED: " + ", ".join(doc["failed"]))
      + (f"; skipped: {', '.join(doc['skipped'])}" if doc["skipped"] else ""))
PY
"$py" -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["ok"] else 1)' "$out/gpu_check.json"
