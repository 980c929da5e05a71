#!/usr/bin/env bash
# The checkpoint format is open: a checkpoint C++ saved on 2 ranks (tp = 2, then dp = 2) loads
# into a PyTorch state_dict with scripts/load_checkpoint.py (h5py + torch only), with the exact
# values and dtypes (bfloat16, float16 included), and verifies with its checksums; a damaged file
# fails --verify. `hpctrain inspect checkpoint` describes and verifies the same checkpoint.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
DRIVER=$1
SCRIPT=$HPCTRAIN_SOURCE_DIR/scripts/load_checkpoint.py

for tp in 2 1; do
  run=$TMP/run_tp$tp
  expect_exit 0 "$TMP/export_tp$tp.log" mpirun_np 2 "$DRIVER" export "$run" "$TMP/expected_tp$tp.json" --tp "$tp" || continue
  ckpt=$run/checkpoints/step_00000042
  expect_exit 0 "$TMP/load_tp$tp.log" "$PY" "$SCRIPT" "$run" --verify --optimizer --save "$TMP/model_tp$tp.pt"
  expect_grep "step 42, epoch 0, .*dp=$((2 / tp)) x tp=$tp" "$TMP/load_tp$tp.log"
  expect_grep "checking sizes and xxh3 checksums" "$TMP/load_tp$tp.log"
  expect_grep "^# verified" "$TMP/load_tp$tp.log"
  expect_grep "^head.weight +torch.bfloat16 +\(5, 4\)" "$TMP/load_tp$tp.log"
  expect_grep "^norm.weight +torch.float16 +\(6,\)" "$TMP/load_tp$tp.log"
  expect_grep "^# 5 model tensors, 156 parameters" "$TMP/load_tp$tp.log"
  expect_exit 0 "$TMP/compare_tp$tp.log" "$PY" "$(dirname "$0")/compare_export.py" "$ckpt" \
    "$TMP/expected_tp$tp.json" "$TMP/model_tp$tp.pt"
  expect_grep "8 tensors compared, 0 failure" "$TMP/compare_tp$tp.log"
  expect_grep "torch.load of .*: the same 5 tensors" "$TMP/compare_tp$tp.log"
done

# hpctrain inspect checkpoint: manifest, tensors, verification.
ckpt=$TMP/run_tp2/checkpoints/step_00000042
expect_exit 0 "$TMP/inspect.log" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/run_tp2"
expect_grep "step_00000042" "$TMP/inspect.log"
expect_grep "model/head.weight +bfloat16 +\(5, 4\) +split dim 0" "$TMP/inspect.log"
expect_grep "verified" "$TMP/inspect.log"

# Damage: one flipped byte in model.h5 fails both verifications, naming the file.
size=$(stat -c %s "$ckpt/model.h5")
printf '\x55' | dd of="$ckpt/model.h5" bs=1 seek=$((size - 8)) conv=notrunc status=none
expect_exit 1 "$TMP/load_bad.log" "$PY" "$SCRIPT" "$ckpt" --verify
expect_grep "model.h5: xxh3 [0-9a-f]+ but the manifest says" "$TMP/load_bad.log"
expect_exit 4 "$TMP/inspect_bad.log" "$HPCTRAIN_BIN" inspect checkpoint "$ckpt"
expect_grep "model.h5: checksum mismatch" "$TMP/inspect_bad.log"
finish
