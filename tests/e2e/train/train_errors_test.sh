#!/usr/bin/env bash
# Bad configuration and a NaN loss: each gives its message and exit code on every rank, no hang.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set eval.every_steps=0 --set run.max_steps=8)

expect_exit 2 "$TMP/unknown.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/r" --set optim.lrr=0.1
expect_grep "unknown key 'optim.lrr' \(did you mean 'optim.lr'\?\)" "$TMP/unknown.txt"

expect_exit 2 "$TMP/type.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/r" --set data.batch_size=lots
expect_grep "data.batch_size = 'lots': expected an integer" "$TMP/type.txt"

expect_exit 2 "$TMP/value.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "run.dir=$TMP/r" \
  --set optim.name=lion
expect_grep "optim.name = 'lion': must be one of sgd, adam, adamw" "$TMP/value.txt"

expect_exit 2 "$TMP/missing.txt" "$HPCTRAIN_BIN" train -c /nonexistent.yaml
expect_exit 3 "$TMP/nodata.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/r" --set data.train=$TMP/none.h5
expect_grep "none.h5" "$TMP/nodata.txt"

expect_exit 3 "$TMP/shape.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/r" --set model.in_features=100
expect_grep "\(784 values\) do not fit model.in_features = 100: set model.in_features = 784" "$TMP/shape.txt"

# NaN injected into rank 1's loss at step 3: stop with exit 6 before the update.
expect_exit 6 "$TMP/nan.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/nan" --set debug.nan_step=3 --set debug.nan_rank=1
expect_grep "non-finite gradient norm at step 3" "$TMP/nan.txt"
# Every rank sees the same norm: one message, world rank 0's, naming the rank whose loss was NaN.
expect_grep "r0/.*non-finite gradient norm at step 3 \(the loss was nan on rank 1, the lowest such rank\)" "$TMP/nan.txt"
n=$(grep -c "error:" "$TMP/nan.txt")
[[ $n == 1 ]] || fail "NaN at 2 ranks: $n error lines, not 1: $(cat "$TMP/nan.txt")"
if grep -qE "ORTE_ERROR_LOG|received outside the training step loop|MPI_ABORT" "$TMP/nan.txt"; then
  fail "NaN at 2 ranks: launcher noise or a stop-signal line: $(cat "$TMP/nan.txt")"
fi

# ... or skip such steps when configured to.
expect_exit 0 "$TMP/skip.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/skip" --set debug.nan_step=3 --set debug.nan_rank=0 \
  --set optim.on_nonfinite=skip
expect_grep "skipping step 3: non-finite gradient norm" "$TMP/skip.txt"
expect_grep "stopped after step 8: completed" "$TMP/skip.txt"

# A new run (--resume none) over a run directory that holds checkpoints is refused: nothing lost.
expect_exit 2 "$TMP/over.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "run.dir=$TMP/skip" --resume none
expect_grep "already holds checkpoints" "$TMP/over.txt"
[[ -d $TMP/skip/checkpoints/step_00000008 ]] || fail "the existing checkpoint was touched"
# One error, one message (issue 32): a config typo, a missing data file and a bad checkpoint
# option at 2 ranks print exactly one error line, from world rank 0, and no rank reports a stop
# signal (the launcher is not made to kill them); the exit status stays the documented one.
for case in "2 --set optim.lrr=3" "3 --set data.train=$TMP/nowhere.h5" "2 --set run.precision=fp8"; do
  read -r want args <<<"$case"
  # shellcheck disable=SC2086  # args holds the --set pair
  expect_exit "$want" "$TMP/once.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
    --set "run.dir=$TMP/once" $args
  n=$(grep -c "error:" "$TMP/once.txt")
  [[ $n == 1 ]] || fail "$args: $n error lines, not 1: $(cat "$TMP/once.txt")"
  grep -q "r0/.*error:" "$TMP/once.txt" || fail "$args: the error line is not world rank 0's"
  if grep -qE "ORTE_ERROR_LOG|received outside the training step loop|MPI_ABORT" "$TMP/once.txt"; then
    fail "$args: launcher noise or a stop-signal line: $(cat "$TMP/once.txt")"
  fi
done

# A rank that fails alone (debug.fail_step: a rank-local fault) ends the job through MPI_Abort: its
# message is the only error line, and the rank the launcher then stops says why, naming the failed
# rank and its code (before the step loop), or says nothing (in the loop, where a stop signal only
# sets a flag), never that it was asked to stop with nothing to save.
for when in 0 3; do
  expect_exit 1 "$TMP/alone-$when.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${common[@]}" \
    --set "run.dir=$TMP/alone-$when" --set debug.fail_step=$when --set debug.fail_rank=1
  expect_grep "r1/.*error: debug.fail_step: rank 1 fails alone" "$TMP/alone-$when.txt"
  n=$(grep -c "error:" "$TMP/alone-$when.txt")
  [[ $n == 1 ]] || fail "rank 1 failing at step $when: $n error lines, not 1: $(cat "$TMP/alone-$when.txt")"
  if grep -q "received outside the training step loop" "$TMP/alone-$when.txt"; then
    fail "rank 1 failing at step $when: a stop-signal line: $(cat "$TMP/alone-$when.txt")"
  fi
done
expect_grep "train: ended by the launcher after rank 1's error \(exit 1, reported above\)" "$TMP/alone-0.txt"
finish
