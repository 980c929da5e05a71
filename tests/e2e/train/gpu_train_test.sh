#!/usr/bin/env bash
# Two training steps on a GPU with NCCL as the data-plane backend (issues 11, 12): host agreements
# go over the MPI control plane, so the run must get past step 1; the step-1 loss equals the CPU
# run's (float32, no TF32 for matrix products). Skips (exit 77) where no CUDA device is visible.
source "$(dirname "$0")/../lib.sh"
"$HPCTRAIN_BIN" env >"$TMP/env.txt" 2>&1 || fail "hpctrain env failed"
if ! grep -qE "^\s*cuda_available\s+true" "$TMP/env.txt"; then
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
  skip_test "no CUDA device visible to this hpctrain (LibTorch $(awk '/libtorch_version/ {print $2}' "$TMP/env.txt"), cuda_available false; nvidia-smi lists $gpus GPU(s)$( ((gpus > 0)) && echo ': build against a CUDA LibTorch to test them'))"
fi
grep -qE "^\s*nccl_compiled\s+true" "$TMP/env.txt" || fail "a CUDA LibTorch but hpctrain was built without NCCL"
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set run.max_steps=2
  --set logging.every_steps=1)
expect_exit 0 "$TMP/cpu.txt" mpirun_np 1 "$HPCTRAIN_BIN" --device cpu train "${common[@]}" \
  --set "run.dir=$TMP/cpu"
expect_exit 0 "$TMP/gpu.txt" mpirun_np 1 "$HPCTRAIN_BIN" --device cuda --comm-backend nccl train \
  "${common[@]}" --set "run.dir=$TMP/gpu"
expect_grep "stopped after step 2: completed" "$TMP/gpu.txt"
expect_exit 0 "$TMP/bf16.txt" mpirun_np 1 "$HPCTRAIN_BIN" --device cuda --comm-backend nccl train \
  "${common[@]}" --set "run.dir=$TMP/bf16" --set run.precision=bf16
expect_exit 0 "$TMP/fp16.txt" mpirun_np 1 "$HPCTRAIN_BIN" --device cuda --comm-backend nccl train \
  "${common[@]}" --set "run.dir=$TMP/fp16" --set run.precision=fp16
/usr/bin/env python3 - "$TMP" <<'PY' || fail "GPU losses differ from the CPU run's"
import json, math, sys
tmp = sys.argv[1]
def loss(run, step):
    for line in open(f"{tmp}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") == "train" and r["step"] == step:
            return r["loss"]
cpu, gpu = loss("cpu", 1), loss("gpu", 1)
bad = []
if abs(cpu - gpu) > 1e-4 * abs(cpu):
    bad.append(f"fp32 step-1 loss {gpu} on GPU, {cpu} on CPU")
for run, tol in (("bf16", 2e-2), ("fp16", 5e-3)):
    l = loss(run, 1)
    if not math.isfinite(l) or abs(l - cpu) > tol * abs(cpu):
        bad.append(f"{run} step-1 loss {l}, CPU fp32 {cpu} (tolerance {tol} relative)")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
finish
