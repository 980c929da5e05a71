#!/usr/bin/env bash
# scripts/gpu_check.sh in its CPU plumbing mode (issues 26, 43): a tiny gpt and CNN for a few
# steps, this machine's MPI (no kit), the existing build. Checks: exit 0 when nothing failed; every
# phase recorded in the order torch, preflight, matmul_roof, gpt_pytorch, build, ...,
# gpu_check.json valid after every phase (the per-phase copies), at most 8 files and no folders in
# $OUT, each under 16 MiB, no checkpoint in logs.tar.gz, the fp32 runs with TF32 off in their
# ledgers, fp16 skipped on CPU; every one-rank phase runs hpctrain as a singleton (an mpirun on
# PATH that fails is met only by preflight's `mpirun -np 1 true`, which records it); a build that
# fails (every compile refused) leaves torch, matmul_roof and gpt_pytorch recorded, brings its
# first error lines back in build_errors.txt and its log's tail in the JSON, and skips only the
# hpctrain phases (exit 1); a phase forced to fail and one forced to hang are recorded with their
# reasons and the later phases still run (exit 1); past the deadline the remaining phases are
# skipped and the JSON is still written.
source "$(dirname "$0")/../lib.sh"
script=$HPCTRAIN_SOURCE_DIR/scripts/gpu_check.sh
data=$TMP/data
mkdir -p "$data/fashion-mnist"
ln -s "$HPCTRAIN_TEST_DATA/fashion-mnist/train.h5" "$HPCTRAIN_TEST_DATA/fashion-mnist/test.h5" \
  "$data/fashion-mnist/"
"$PY" - "$data/fashion-mnist" <<'PY' || fail "could not write the test inputs"
import sys
import h5py
import numpy as np
with h5py.File(f"{sys.argv[1]}/test.h5", "r") as f:
    np.save(f"{sys.argv[1]}/test-inputs-256.npy", f["inputs"][:256])
PY
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" -q prepare text \
  --in /usr/share/games/fortunes/fortunes.u8 --out "$data/text"

# The mode: no GPU, no kit, no build; tiny models and few steps.
run_check() {  # run_check NAME [VAR=VALUE...]: one check into $TMP/NAME/{out,work}
  local name=$1
  shift
  env GPU_CHECK_DEVICE=cpu GPU_CHECK_SKIP_BUILD=1 HPCTRAIN_GPU_KIT=none PYTHON="$PY" \
    BUILD_DIR="$HPCTRAIN_BUILD_DIR" GPU_CHECK_DATA="$data" GPU_CHECK_WORK="$TMP/$name/work" \
    GPU_CHECK_STEPS=20 GPU_CHECK_GPT_STEPS=8 GPU_CHECK_CTEST_REGEX=nccl_gpu_test \
    GPU_CHECK_GPT_SET="--set model.layers=1 --set model.width=32 --set model.heads=2 --set model.seq_len=32 --set model.vocab_size=256 --set data.batch_size=2" \
    GPU_CHECK_ALLREDUCE_SET="--max-bytes 1M --iters 2 --rounds 1" GPU_CHECK_EVAL_SAMPLES=1000 \
    "$@" timeout 600 bash "$script" "$TMP/$name/out" >"$TMP/$name.txt" 2>&1
}

# An mpirun that fails and says so: one-rank phases must not need it (they run as singletons).
mkdir -p "$TMP/fake-bin"
cat >"$TMP/fake-bin/mpirun" <<EOF
#!/bin/sh
echo "\$*" >>"$TMP/fake-mpirun.calls"
echo "fake mpirun of the plumbing test: refusing" >&2
exit 1
EOF
chmod +x "$TMP/fake-bin/mpirun"

# --- everything, nothing forced: exit 0 -------------------------------------------------------
run_check all PATH="$TMP/fake-bin:$PATH"
rc=$?
[[ $rc == 0 ]] || fail "the plumbing check exited $rc, not 0 (see $TMP/all.txt)"
"$PY" - "$TMP/all" <<'PY' || fail "the plumbing check's outputs"
import json, os, sys, tarfile
root = sys.argv[1]
out, work = f"{root}/out", f"{root}/work"
bad = []
entries = sorted(os.listdir(out))
if entries != ["gpu_check.json", "gpu_check.log", "logs.tar.gz"]:
    bad.append(f"$OUT holds {entries}, not gpu_check.json, gpu_check.log, logs.tar.gz")
for e in entries:
    p = f"{out}/{e}"
    if not os.path.isfile(p) or os.path.getsize(p) >= 16 << 20:
        bad.append(f"{e}: not a file under 16 MiB")
doc = json.load(open(f"{out}/gpu_check.json"))
phases = list(doc["phases"])
expected = ["torch", "preflight", "matmul_roof", "gpt_pytorch", "build", "gpt_hpctrain", "cnn_curves",
            "nccl_allreduce", "ctest_gpu", "eval_cpu_vs_gpu", "cnn_bench", "onnxruntime", "transformers"]
if phases != expected:
    bad.append(f"phases {phases}")
if not doc["ok"] or doc["failed"] or doc["pending"]:
    bad.append(f"ok {doc['ok']}, failed {doc['failed']}, pending {doc['pending']}")
# A valid JSON after every phase, each with one more phase done than the one before: the
# foreground phases in their order, the build (in the background from the start) whenever it ends.
history = sorted(os.listdir(f"{work}/history"))
if len(history) != len(expected):
    bad.append(f"{len(history)} per-phase copies of gpu_check.json, not {len(expected)}")
foreground = [e for e in expected if e != "build"]
before = 0
for i, name in enumerate(history):
    d = json.load(open(f"{work}/history/{name}"))
    done = [n for n, p in d["phases"].items() if p["status"] != "pending"]
    in_order = [n for n in done if n != "build"]
    phase = name.split("-", 1)[1].rsplit(".", 1)[0]  # NN-PHASE.json: the phase that wrote it
    if phase not in done or in_order != foreground[: len(in_order)] or len(done) < before:
        bad.append(f"after phase {i + 1} ({name}) the JSON records {done} as done")
    before = len(done)
P = doc["phases"]
for n in ("gpt_hpctrain", "gpt_pytorch", "matmul_roof", "cnn_curves", "nccl_allreduce", "ctest_gpu",
          "eval_cpu_vs_gpu", "cnn_bench"):
    if P[n]["status"] != "ok":
        bad.append(f"{n}: {P[n]}")
if any((P["eval_cpu_vs_gpu"].get(d) or {}).get("samples") != 1000 for d in ("cpu", "gpu")):
    bad.append(f"eval_cpu_vs_gpu did not evaluate GPU_CHECK_EVAL_SAMPLES=1000: {P['eval_cpu_vs_gpu']}")
if not P["gpt_hpctrain"].get("tokens_per_s") or not doc["summary"].get("gpt2_124m_bf16", {}).get("hpctrain_over_pytorch"):
    bad.append(f"no gpt numbers: {doc['summary']}")
runs = P["cnn_curves"]["runs"]
if not runs["fp16"].get("skipped") or runs["fp32"].get("tf32") != {"matmul": False, "cudnn": False, "source": "run.tf32"}:
    bad.append(f"cnn_curves runs {runs}")
if set(P["cnn_bench"]["runs"]) != {"fp32", "bf16"}:
    bad.append(f"cnn_bench {P['cnn_bench']}")
for n in ("onnxruntime", "transformers"):
    if P[n]["status"] != "skipped" or not P[n].get("reason"):
        bad.append(f"{n} is {P[n]['status']} ({P[n].get('reason')}); expected skipped with its reason")
with tarfile.open(f"{out}/logs.tar.gz") as t:
    names = t.getnames()
if any("step_" in n or n.endswith(".h5") for n in names):
    bad.append("logs.tar.gz holds checkpoint files: " + ", ".join(n for n in names if "step_" in n)[:200])
for want in ("./logs/phase-cnn_curves.log", "./runs/cnn-gpu-fp32/ledger.json", "./runs/cnn-gpu-fp32/metrics.jsonl"):
    if want not in names:
        bad.append(f"logs.tar.gz lacks {want}")
# The kernels the gpt ran, from its ledger (on a GPU: "fused" and "libtorch").
if P["gpt_hpctrain"].get("kernels") != {"optimizer": "host loop", "cross_entropy": "vocab parallel"}:
    bad.append(f"gpt_hpctrain kernels {P['gpt_hpctrain'].get('kernels')}")
# One-rank phases ran hpctrain without mpirun; preflight recorded the failing mpirun.
launches = open(f"{work}/logs/launch.log").read().splitlines()
if not launches or any(not l.startswith("singleton (no mpirun): ") for l in launches):
    bad.append(f"launches {launches[:5]}")
if not str(P["preflight"].get("mpirun_np1", "")).startswith("failed (exit 1)"):
    bad.append(f"preflight's mpirun_np1: {P['preflight'].get('mpirun_np1')}")
calls = open(f"{root}/../fake-mpirun.calls").read().splitlines()
if calls not in (["--allow-run-as-root -np 1 true"], ["-np 1 true"]):
    bad.append(f"mpirun was called as {calls}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY

# --- the build fails: the PyTorch phases are recorded, the errors come back, hpctrain's skipped --
cat >"$TMP/broken-compiler" <<'EOF'
#!/bin/sh
# Every compilation fails at once, with a compiler's error line naming the source.
for a; do case $a in *.cpp | *.cxx | *.c) src=$a ;; esac; done
echo "${src:-?}:1:1: error: forced compile failure (gpu_check plumbing test)" >&2
exit 1
EOF
chmod +x "$TMP/broken-compiler"
run_check buildfail GPU_CHECK_SKIP_BUILD= BUILD_DIR="$TMP/broken-build" \
  GPU_CHECK_CMAKE_ARGS="-DCMAKE_CXX_COMPILER_LAUNCHER=$TMP/broken-compiler" \
  GPU_CHECK_ONLY=torch,preflight,matmul_roof,gpt_pytorch,build,gpt_hpctrain,cnn_bench
rc=$?
[[ $rc == 1 ]] || fail "a failed build: exit $rc, not 1 (see $TMP/buildfail.txt)"
"$PY" - "$TMP/buildfail" <<'PY' || fail "the failed build"
import json, os, sys
root = sys.argv[1]
doc = json.load(open(f"{root}/out/gpu_check.json"))
P = doc["phases"]
bad = []
for n in ("torch", "matmul_roof", "gpt_pytorch", "preflight"):
    if P[n]["status"] != "ok":
        bad.append(f"{n} did not run to the end: {P[n]}")
if not P["gpt_pytorch"].get("tokens_per_s") or not P["matmul_roof"].get("tflops"):
    bad.append(f"no PyTorch numbers: {P['gpt_pytorch']}, {P['matmul_roof']}")
b = P["build"]
if b["status"] != "failed" or "error: forced compile failure" not in b.get("reason", ""):
    bad.append(f"build {b}")
if not b.get("build_log_tail") or not any("FAILED" in l for l in b["build_log_tail"]):
    bad.append(f"build.log's tail is not in the JSON: {b.get('build_log_tail')}")
for n in ("gpt_hpctrain", "cnn_bench"):
    if P[n]["status"] != "skipped" or not P[n]["reason"].startswith("build failed: "):
        bad.append(f"{n} {P[n]}")
if doc["failed"] != ["build"]:
    bad.append(f"failed {doc['failed']}")
entries = sorted(os.listdir(f"{root}/out"))
if entries != ["build_errors.txt", "gpu_check.json", "gpu_check.log", "logs.tar.gz"]:
    bad.append(f"$OUT holds {entries}")
else:
    errors = open(f"{root}/out/build_errors.txt").read().splitlines()
    if not 1 <= len(errors) <= 40 or not all("error:" in l for l in errors):
        bad.append(f"build_errors.txt: {len(errors)} lines: {errors[:3]}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY

# --- a phase forced to fail, one forced to hang: recorded, the later phase still runs ---------
run_check forced GPU_CHECK_ONLY=preflight,torch,build,gpt_hpctrain,matmul_roof,nccl_allreduce \
  GPU_CHECK_FAIL=gpt_hpctrain GPU_CHECK_HANG=matmul_roof GPU_CHECK_TIMEOUT_matmul_roof=3
rc=$?
[[ $rc == 1 ]] || fail "a failed and a hung phase: exit $rc, not 1"
"$PY" - "$TMP/forced/out/gpu_check.json" <<'PY' || fail "the forced failure and hang"
import json, sys
doc = json.load(open(sys.argv[1]))
P = doc["phases"]
bad = []
if doc["ok"] or doc["failed"] != ["matmul_roof", "gpt_hpctrain"]:
    bad.append(f"failed {doc['failed']}")
if "forced failure" not in P["gpt_hpctrain"].get("reason", ""):
    bad.append(f"gpt_hpctrain {P['gpt_hpctrain']}")
if "timed out after 3 s" not in P["matmul_roof"].get("reason", "") or P["matmul_roof"]["seconds"] > 20:
    bad.append(f"matmul_roof {P['matmul_roof']}")
if P["nccl_allreduce"]["status"] != "ok":
    bad.append(f"the phase after them did not run: {P['nccl_allreduce']}")
if P["cnn_curves"]["status"] != "skipped" or P["cnn_curves"]["reason"] != "not in GPU_CHECK_ONLY":
    bad.append(f"cnn_curves {P['cnn_curves']}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY

# --- the deadline: a hang cut to the remainder, the rest skipped, the JSON written -------------
run_check deadline GPU_CHECK_DEADLINE_S=20 GPU_CHECK_ONLY=preflight,matmul_roof,nccl_allreduce,cnn_bench \
  GPU_CHECK_HANG=matmul_roof
rc=$?
[[ $rc == 1 ]] || fail "past the deadline with a hung phase: exit $rc, not 1"
"$PY" - "$TMP/deadline/out/gpu_check.json" <<'PY' || fail "the deadline"
import json, sys
doc = json.load(open(sys.argv[1]))
P = doc["phases"]
bad = []
if "cut to the deadline" not in P["matmul_roof"].get("reason", ""):
    bad.append(f"matmul_roof {P['matmul_roof']}")
for n in ("nccl_allreduce", "cnn_bench"):
    if P[n]["status"] != "skipped" or not P[n]["reason"].startswith("deadline"):
        bad.append(f"{n} {P[n]}")
if doc["seconds"] > 40 or doc["pending"]:
    bad.append(f"{doc['seconds']} s, pending {doc['pending']}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
finish
