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
# (GPU_CHECK_DEADLINE_S, default 480 s): a phase that fails or hangs is recorded with its reason
# and the next one runs; past the deadline the remaining phases are recorded as skipped. The exit
# status is 1 when any phase failed, else 0. Phases, in order, with their planned seconds on the
# GPU machine (16 cores, one H200; estimates, docs/BENCHMARKS.md "First contact") and timeouts:
#   torch         15 /  60  PyTorch's version, CUDA, prefix (one machine-readable line), bf16 peak
#   preflight      5 /  30  glibc, driver, GPU, nvcc, ldd of the kit's MPI, HDF5, yaml-cpp; whether
#                           the kit's `mpirun -np 1 true` works (a note: one rank needs no mpirun)
#   matmul_roof   15 /  45  a measured 8192^3 bf16 matrix product (PyTorch)
#   gpt_pytorch   35 /  90  gpt2-124m bf16 in PyTorch: tokens/s
#   build        220 / 300  hpctrain against the kit and pip's CUDA LibTorch, `ninja -k 0`; started
#                           in the background when preflight passes (nice, all cores but two), so
#                           it runs while matmul_roof and gpt_pytorch use the GPU; the first 40
#                           `error:` lines come back in build_errors.txt
#   gpt_hpctrain  40 / 100  gpt2-124m bf16 in hpctrain: tokens/s, MFU (headline numbers by ~280 s)
#   cnn_curves    50 / 120  fmnist-cnn GPU fp32 (run.tf32 false), bf16, fp16 against CPU fp32
#   nccl_allreduce 15 / 45, ctest_gpu 50 / 120, eval_cpu_vs_gpu 15 / 45, cnn_bench 25 / 60
#   (samples/s after warm-up steps), onnxruntime 15 / 60 (the exported ONNX CNN against hpctrain
#   eval --save-outputs), transformers 1 / 30: 451 s planned in all.
# torch, matmul_roof and gpt_pytorch need neither the kit nor the build: a failed preflight or
# build skips only the phases that run hpctrain; a failed torch skips everything after it. At one
# rank hpctrain runs without mpirun (a singleton: MPI_Init alone), so the kit's mpirun matters
# only for multi-rank runs (ctest_gpu's 2-rank tests).
# Environment: HPCTRAIN_GPU_KIT (default gpu-kit; "none": this machine's MPI and libraries),
#   GPU_CHECK_DATA (default KIT/data), BUILD_DIR (default build-gpu), GPU_CHECK_STEPS (CNN steps,
#   default 200), GPU_CHECK_GPT_STEPS (default 30), GPU_CHECK_GPT_SET (extra --set for the gpt),
#   PYTHON (the python with torch; default python3), GPU_CHECK_PEAK_TFLOPS (dense bf16 peak;
#   default from the GPU name), GPU_CHECK_ONLY=phase,... (the others are recorded as skipped:
#   a rerun on a warm machine), GPU_CHECK_TIMEOUT_<phase>=S (one phase's timeout),
#   GPU_CHECK_CMAKE_ARGS (more configure arguments for the build).
# CPU plumbing mode (tests/e2e/runtime/gpu_check_plumbing_test.sh): GPU_CHECK_DEVICE=cpu
#   GPU_CHECK_SKIP_BUILD=1 BUILD_DIR=build HPCTRAIN_GPU_KIT=none; GPU_CHECK_FAIL=phase,... and
#   GPU_CHECK_HANG=phase,... make phases fail or hang on purpose; GPU_CHECK_CTEST_REGEX,
#   GPU_CHECK_ALLREDUCE_SET and GPU_CHECK_EVAL_SAMPLES narrow ctest_gpu, the all-reduce sizes and
#   the evaluated test samples (default 0: all 10,000).
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

phases=(torch preflight matmul_roof gpt_pytorch build gpt_hpctrain cnn_curves nccl_allreduce
  ctest_gpu eval_cpu_vs_gpu cnn_bench onnxruntime transformers)
declare -A limit=([torch]=60 [preflight]=30 [matmul_roof]=45 [gpt_pytorch]=90 [build]=300
  [gpt_hpctrain]=100 [cnn_curves]=120 [nccl_allreduce]=45 [ctest_gpu]=120 [eval_cpu_vs_gpu]=45
  [cnn_bench]=60 [onnxruntime]=60 [transformers]=30)
# The phases that run what the build makes: a failed preflight or build skips these only.
hpctrain_phases=build,gpt_hpctrain,cnn_curves,nccl_allreduce,ctest_gpu,eval_cpu_vs_gpu,cnn_bench,onnxruntime,transformers

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
  if ((np == 1)); then
    # A singleton: MPI_Init without a launcher (OpenMPI starts its own runtime daemon), so a kit
    # whose relocated mpirun fails on this machine still runs every one-rank phase.
    echo "singleton (no mpirun): $*" >>"$logs/launch.log"
    with_kit "$@"
    return
  fi
  local launcher=(mpirun)
  [[ -n ${kit_prefix:-} ]] && launcher=("$kit_prefix/bin/mpirun.openmpi" -x LD_LIBRARY_PATH -x OPAL_PREFIX)
  [[ $(id -u) -eq 0 ]] && launcher+=(--allow-run-as-root)
  echo "mpirun -np $np: $*" >>"$logs/launch.log"
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

# shellcheck source=scripts/gpu_check_phases.sh
source "$repo/scripts/gpu_check_phases.sh"

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
rm -f "$out/gpu_check.json" "$out/logs.tar.gz" "$out/build_errors.txt" "$out"/*.tmp
log=$out/gpu_check.log
: >"$log"
start=$SECONDS
deadline=${GPU_CHECK_DEADLINE_S:-480}
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

# The timeout of phase $1 now: its limit (or GPU_CHECK_TIMEOUT_<phase>), cut to what is left of
# the deadline. Sets t and cut.
phase_timeout() {
  local var=GPU_CHECK_TIMEOUT_$1 left=$((deadline - (SECONDS - start)))
  t=${!var:-${limit[$1]}}
  cut=""
  if ((t > left)); then
    t=$left
    cut=" (cut to the deadline's remainder)"
  fi
}
# The build starts as soon as preflight passes and runs in the background (niced, all cores but
# two) while matmul_roof and gpt_pytorch use the GPU; its slot in the order waits for it.
build_pid=""
start_build() {
  [[ -n ${GPU_CHECK_ONLY:-} ]] && ! in_list build "$GPU_CHECK_ONLY" && return
  phase_timeout build
  ((t >= 5)) || return
  build_t=$t build_cut=$cut build_t0=$SECONDS
  local cores
  cores=$(nproc)
  say "build (timeout ${t} s$cut): started in the background, beside matmul_roof and gpt_pytorch"
  GPU_CHECK_BUILD_JOBS=$((cores > 4 ? cores - 2 : cores)) GPU_CHECK_PHASE=build \
    GPU_CHECK_WORK=$work nice -n 10 timeout -k 10 "$t" "$self" "$out" >"$logs/phase-build.log" 2>&1 &
  build_pid=$!
}
trap '[[ -n $build_pid ]] && kill "$build_pid" 2>/dev/null' EXIT

skip_all=""       # torch failed: nothing after it can run
skip_hpctrain=""  # preflight or build failed: the phases that run hpctrain are skipped
i=0
for name in "${phases[@]}"; do
  i=$((i + 1))
  result=$work/phases/$name.json
  if [[ -n ${GPU_CHECK_ONLY:-} ]] && ! in_list "$name" "$GPU_CHECK_ONLY"; then
    pyjson phase="$name" skipped=true reason="not in GPU_CHECK_ONLY" >"$result"
    assemble "$i" "$name"
    continue
  fi
  why=$skip_all
  [[ -z $why ]] && in_list "$name" "$hpctrain_phases" && why=$skip_hpctrain
  running=""  # the build started earlier: its slot waits for it, whatever the time
  [[ $name == build && -n $build_pid ]] && running=1
  if [[ -z $why && -z $running ]] && (((SECONDS - start) > deadline - 5)); then
    why="deadline: $((SECONDS - start)) s of $deadline s used"
  fi
  if [[ -n $why ]]; then
    pyjson phase="$name" skipped=true reason="$why" >"$result"
    say "$name: skipped ($why)"
    assemble "$i" "$name"
    continue
  fi
  if [[ -n $running ]]; then
    wait "$build_pid"
    rc=$?
    build_pid=""
    t=$build_t cut=$build_cut t0=$build_t0
  else
    phase_timeout "$name"
    say "$name (timeout ${t} s$cut)"
    t0=$SECONDS
    GPU_CHECK_PHASE=$name GPU_CHECK_WORK=$work timeout -k 10 "$t" "$self" "$out" >"$logs/phase-$name.log" 2>&1
    rc=$?
  fi
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
    torch) skip_all="torch failed: ${status#FAILED: }" ;;
    preflight | build) skip_hpctrain="$name failed: ${status#FAILED: }" ;;
    esac
  fi
  assemble "$i" "$name"
  [[ $name == preflight && $status != FAILED* ]] && start_build
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
