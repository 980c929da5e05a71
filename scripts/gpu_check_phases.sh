# shellcheck shell=bash
# shellcheck disable=SC2154  # the settings come from gpu_check.sh, which sources this file
# The phases of scripts/gpu_check.sh, sourced by it (the driver and every phase process). Each
# phase runs as `GPU_CHECK_PHASE=NAME scripts/gpu_check.sh` under its timeout, writes its result
# (one JSON object) to $result and returns 0 when ok. They use the settings and helpers of
# gpu_check.sh: $repo, $out, $build, $work, $logs, $runs, $data, $kit_dir, $bin, $py, $dev,
# $backend, with_kit, mpi_run, pyjson.

phase_preflight() {
  if [[ $kit_dir == none ]]; then
    # Whether this machine's mpirun starts one process: a note, not a failure (one-rank phases run
    # without it).
    local launcher=(mpirun) mpirun_np1=ok
    [[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
    timeout 20 "${launcher[@]}" -np 1 true >"$logs/mpirun-np1.log" 2>&1 ||
      mpirun_np1="failed (exit $?): $(head -c 300 "$logs/mpirun-np1.log" | tr '\n' ' ')"
    pyjson phase=preflight ok=true kit="none: this machine's libraries" \
      glibc="$(getconf GNU_LIBC_VERSION | awk '{print $2}')" mpirun_np1="$mpirun_np1" >"$result"
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
  local args=(-DCMAKE_BUILD_TYPE=Release -DHPCTRAIN_WERROR=OFF)
  [[ -d $torch_prefix/Torch ]] && args+=(-DTorch_DIR="$torch_prefix/Torch")
  # On the GPU the NCCL backend must build; the CPU plumbing mode takes what the machine has.
  args+=(-DHPCTRAIN_WITH_NCCL="$([[ $dev == cuda ]] && echo ON || echo AUTO)")
  # The CUDA toolkit: nvcc on PATH, else /usr/local/cuda (not whichever CMake would find first).
  local nvcc
  nvcc=$(command -v nvcc || true)
  [[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
  if [[ -n $nvcc ]]; then
    args+=(-DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$(realpath "$nvcc")")")")
  fi
  if [[ -n $nccl_dir && -f $nccl_dir/include/nccl.h ]]; then
    args+=(-DNCCL_INCLUDE_DIR="$nccl_dir/include"
      -DNCCL_LIBRARY="$(find "$nccl_dir/lib" -name 'libnccl.so*' | sort | head -1)")
  fi
  local extra
  read -r -a extra <<<"${GPU_CHECK_CMAKE_ARGS:-}"
  args+=("${extra[@]}")
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
  rm -f "$out/build_errors.txt"
  PATH=$path cmake -S "$repo" -B "$build" -G Ninja "${args[@]}" >"$logs/configure.log" 2>&1 || rc=$?
  : >"$logs/build.log"
  if ((rc == 0)); then
    # -k 0: every file that can compile does, so one run shows every error, not the first.
    PATH=$path cmake --build "$build" -j "${GPU_CHECK_BUILD_JOBS:-$(nproc)}" --target hpctrain \
      -- -k 0 >"$logs/build.log" 2>&1 || rc=$?
  fi
  # The first 40 compiler errors come back on their own (the logs' archive may be cut).
  grep -h -m 40 'error:' "$logs/configure.log" "$logs/build.log" | head -n 40 >"$work/build_errors.txt"
  [[ -s $work/build_errors.txt ]] && cp "$work/build_errors.txt" "$out/build_errors.txt"
  local missing=""
  [[ -x $bin ]] && missing=$(with_kit ldd "$bin" 2>&1 | grep "not found" | tr -s ' \t' ' ' | paste -sd ';' -)
  "$py" - "$rc" "$((SECONDS - t))" "$logs/configure.log" "$logs/build.log" "$missing" \
    "$work/build_errors.txt" >"$result" <<'PY'
import json, re, sys
rc, seconds, configure, build, missing, errors = int(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:]
res = {"phase": "build", "ok": rc == 0 and not missing, "seconds": seconds}
def lines(path):
    try:
        return open(path, errors="replace").read().splitlines()
    except OSError:
        return []
log = lines(build) or lines(configure)
res["build_log_tail"] = [l[:300] for l in log[-25:]]
if rc != 0:
    first = lines(errors)
    res["errors"] = len(first)
    if not first:  # no compiler error: CMake's or the linker's words
        first = [l for l in log if re.search(r"error|Error|FAILED|not found", l)][-15:] or log[-15:]
    res["error_lines"] = [l[:300] for l in first[:15]]
    res["reason"] = f"build exit {rc}: " + (first[0][:300] if first else "no output")
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
    doc = json.load(open(ledger))
    peaks = doc.get("peak_device_memory_bytes_per_rank") or [None]
    res["peak_device_memory_bytes"] = max(peaks) if None not in peaks else None
    res["kernels"] = doc.get("kernels")  # fused Adam, LibTorch's cross entropy
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
      --data "$data/fashion-mnist/test.h5" --max-samples "${GPU_CHECK_EVAL_SAMPLES:-0}" \
      --results "$work/eval-$d" --force >"$logs/eval-$d.log" 2>&1
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
    ref = torch.load(f"{work}/cnn-outputs.pt", weights_only=False).numpy()
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
