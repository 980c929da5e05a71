#!/usr/bin/env bash
# Bad input to hpctrain eval gets a clear message, a non-zero exit code (README "Exit codes") and
# writes nothing to the results: a checkpoint that does not verify (one flipped byte), one that
# does not exist, a data file of another kind (tokens for an MLP), inputs of the wrong shape, an
# unknown split and a split the run's config does not define, contradictory options.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
run=$TMP/run
expect_exit 0 "$TMP/train.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" \
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set "run.dir=$run" \
  --set run.max_steps=20 --set eval.every_steps=0 --set checkpoint.every_steps=10
ckpt=$run/checkpoints/step_00000020
no_results() {
  [[ ! -e $run/eval ]] || fail "$1: something was written to $run/eval: $(ls "$run/eval")"
}

# A corrupted checkpoint: one byte of model.h5 flipped (the size stays the same), in a copy of
# the run.
cp -r "$run" "$TMP/run2"
bad=$TMP/run2/checkpoints/step_00000020
$PY - "$bad/model.h5" <<'PY'
import os, sys
path = sys.argv[1]
with open(path, "r+b") as f:
    f.seek(os.path.getsize(path) - 100)
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
PY
expect_exit 4 "$TMP/corrupt.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$bad"
expect_grep "does not verify: model.h5: checksum mismatch" "$TMP/corrupt.txt"
[[ ! -e $TMP/run2/eval ]] || fail "corrupt checkpoint: results were written"
# In a run, the corrupted one is reported and skipped, the good one evaluated, and the exit is 4.
expect_exit 4 "$TMP/run-corrupt.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoints "$TMP/run2"
expect_grep "skipped: checkpoint '.*step_00000020' does not verify" "$TMP/run-corrupt.txt"
expect_grep "1 checkpoint\(s\) evaluated, 0 already evaluated, 1 did not verify" "$TMP/run-corrupt.txt"
[[ $(wc -l <"$TMP/run2/eval/results.jsonl") == 1 ]] || fail "expected one result line (step 10)"
grep -q '"step":10' "$TMP/run2/eval/results.jsonl" || fail "step 10 should have been evaluated"

expect_exit 4 "$TMP/missing.txt" "$HPCTRAIN_BIN" eval --checkpoint "$run/checkpoints/step_00000099"
expect_grep "checkpoint '.*step_00000099' does not exist" "$TMP/missing.txt"

# A token file (prepare text) for a classification model.
printf 'hello world\nthe quick brown fox\njumps over the lazy dog\n%.0s' {1..50} >"$TMP/corpus.txt"
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$TMP/corpus.txt" \
  --out "$TMP/text" --val-fraction 0.2
expect_exit 3 "$TMP/tokens.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" \
  --data "$TMP/text/val.h5"
expect_grep "val.h5. holds a token stream \\(/tokens, language modelling\\)" "$TMP/tokens.txt"
no_results "token file"

# Images of the wrong shape (20 x 20 instead of 28 x 28).
$PY - "$TMP/small.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("inputs", data=np.zeros((50, 1, 20, 20), np.uint8))
    f.create_dataset("labels", data=np.zeros(50, np.int64))
PY
expect_exit 3 "$TMP/shape.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --data "$TMP/small.h5"
expect_grep "samples of shape 1 x 20 x 20 do not fit the checkpoint's model" "$TMP/shape.txt"
no_results "wrong shape"

expect_exit 3 "$TMP/nofile.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --data "$TMP/nope.h5"
expect_grep "nope.h5 does not exist" "$TMP/nofile.txt"

# Splits: test is not in this run's config; bogus is no split at all.
expect_exit 2 "$TMP/test-split.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --split test
expect_grep "unknown split 'test': the run's config .* defines the splits train, val" "$TMP/test-split.txt"
expect_exit 2 "$TMP/bogus.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --split bogus
expect_grep "unknown split 'bogus'" "$TMP/bogus.txt"
expect_exit 2 "$TMP/modes.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --checkpoints "$run"
expect_grep "exactly one of --checkpoint" "$TMP/modes.txt"
expect_exit 2 "$TMP/batch.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --batch-size lots
expect_grep "expected a positive integer or auto" "$TMP/batch.txt"
expect_exit 2 "$TMP/tp.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --tp 2
expect_grep "data-parallel only" "$TMP/tp.txt"
no_results "bad options"
finish
