#!/usr/bin/env bash
# train --keep-global-batch: a run saved at dp=2 x batch 16 (global batch 32) and resumed on other
# world sizes keeps 32 samples per step: on 1 rank by accumulating 2 micro-batches, on 4 ranks by
# a per-rank batch of 8; where 32 cannot be split (3 ranks) it fails with exit 2 naming the sizes,
# before touching the run. Without a checkpoint, or at the same size, it changes nothing.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set run.max_steps=30 --set eval.every_steps=0
  --set eval.at_end=false --set logging.every_steps=5 --set data.batch_size=16)

# A fresh run: nothing to keep, the config's 16 x 2 = 32 stands.
expect_exit 75 "$TMP/first.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --set debug.stop_step=10 --keep-global-batch
expect_grep "32 samples per step \(16 per rank x 2 dp ranks x 1 micro-batches\)" "$TMP/first.txt"
if grep -q "keep-global-batch:" "$TMP/first.txt"; then fail "fresh run: --keep-global-batch changed something"; fi
cp -a "$TMP/run" "$TMP/run-at-10"

# 3 ranks: 32 is neither a multiple of 16 x 3 nor of 3.
expect_exit 2 "$TMP/three.txt" mpirun_np 3 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --keep-global-batch
expect_grep "keep-global-batch: the checkpoint's global batch 32 cannot be split over dp = 3" "$TMP/three.txt"
cmp -s "$TMP/run/metrics.jsonl" "$TMP/run-at-10/metrics.jsonl" || fail "the refused resume wrote to the run"

# 1 rank: accumulation 2 (16 x 1 x 2).
expect_exit 0 "$TMP/one.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/run" \
  --keep-global-batch
expect_grep "keep-global-batch: optim.grad_accumulation = 2, so the global batch stays the checkpoint's 32" "$TMP/one.txt"
expect_grep "32 samples per step \(16 per rank x 1 dp ranks x 2 micro-batches\)" "$TMP/one.txt"
expect_grep "resumed from .*step_00000010 at step 10" "$TMP/one.txt"

# 4 ranks: per-rank batch 8 (8 x 4 x 1).
rm -rf "$TMP/run" && cp -a "$TMP/run-at-10" "$TMP/run"
expect_exit 0 "$TMP/four.txt" mpirun_np 4 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --keep-global-batch
expect_grep "keep-global-batch: data.batch_size = 8 and optim.grad_accumulation = 1" "$TMP/four.txt"
expect_grep "32 samples per step \(8 per rank x 4 dp ranks x 1 micro-batches\)" "$TMP/four.txt"

# Same size again (2 ranks): nothing to change.
rm -rf "$TMP/run" && cp -a "$TMP/run-at-10" "$TMP/run"
expect_exit 0 "$TMP/same.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/run" --keep-global-batch
if grep -q "keep-global-batch:" "$TMP/same.txt"; then fail "same size: --keep-global-batch changed something"; fi
finish
