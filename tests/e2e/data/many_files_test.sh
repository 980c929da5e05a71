#!/usr/bin/env bash
# A dataset of many files (docs/DATA.md, "Many files and mixtures"): 50 shard files written by
# h5py train bitwise the same as the same samples in one file, at 1, 2 and 3 ranks, given as a
# glob, a directory or a list; a shard with another sample shape is exit 3 naming it (found by
# whichever rank validated it); a changed file list on resume is refused with the difference
# named, and accepted with data.allow_changed_files.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
compare=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py")
total=$("$PY" "$(dirname "$0")/make_shards.py" "$TMP") || fail "make_shards.py failed"
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set model.in_features=16
  --set "model.hidden=[8]" --set data.val= --set run.max_steps=70 --set run.epochs=3
  --set logging.every_steps=10 --set checkpoint.every_steps=0)

for np in 1 2 3; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  batch=$((12 / np))  # the same global batch of 12 at every world size
  expect_exit 0 "$TMP/one$np.txt" "${launch[@]}" train "${common[@]}" \
    --set "data.train=$TMP/all.h5" --set data.batch_size=$batch --set "run.dir=$TMP/one$np"
  expect_exit 0 "$TMP/glob$np.txt" "${launch[@]}" train "${common[@]}" \
    --set "data.train=$TMP/shards/shard-*.h5" --set data.batch_size=$batch \
    --set "run.dir=$TMP/glob$np"
  expect_grep "data.train: $total samples in 50 files" "$TMP/glob$np.txt"
  "${compare[@]}" "$TMP/one$np" "$TMP/glob$np" || fail "np=$np: 50 shards differ from one file"
done
# A directory, and a list (in another order: the files are taken in name order).
expect_exit 0 "$TMP/dir.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set "data.train=$TMP/shards" \
  --set data.batch_size=12 --set "run.dir=$TMP/dir"
"${compare[@]}" "$TMP/one1" "$TMP/dir" || fail "a directory of shards differs from one file"
list=
for i in $(seq 49 -1 25); do list+=$(printf '%s/shards/shard-%03d.h5, ' "$TMP" "$i"); done
expect_exit 0 "$TMP/list.txt" "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "data.train=[${list}\"$TMP/shards/shard-0[01]*.h5\", \"$TMP/shards/shard-02[0-4].h5\"]" \
  --set data.batch_size=12 --set "run.dir=$TMP/list"
"${compare[@]}" "$TMP/one1" "$TMP/list" || fail "a list of shards differs from one file"

# A shard with another sample shape: exit 3 naming it and the field, on every world size.
for np in 1 3; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 3 "$TMP/bad$np.txt" "${launch[@]}" train "${common[@]}" \
    --set "data.train=$TMP/bad/*.h5" --set data.batch_size=4 --set "run.dir=$TMP/bad$np"
  expect_grep "shard-031.h5' differs from '.*shard-000.h5' in its sample shape \(\(16,?\) against \(17,?\)\)" \
    "$TMP/bad$np.txt"
  [[ $(grep -c "differs from" "$TMP/bad$np.txt") -eq 1 ]] || fail "np=$np: the error is not printed once"
done
expect_exit 3 "$TMP/nomatch.txt" "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "data.train=$TMP/nothing-*.h5" --set "run.dir=$TMP/nomatch"
expect_grep "pattern '.*nothing-\*.h5' matches no file" "$TMP/nomatch.txt"

# Resume with a changed file list: refused, naming the difference; allowed on request.
mkdir -p "$TMP/moving" && cp "$TMP"/shards/*.h5 "$TMP/moving/"
resume=("${common[@]}" --set "data.train=$TMP/moving/*.h5" --set data.batch_size=6
  --set "run.dir=$TMP/changed")
expect_exit 75 "$TMP/stop.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${resume[@]}" --set debug.stop_step=20
rm "$TMP/moving/shard-049.h5"
expect_exit 3 "$TMP/refused.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${resume[@]}"
expect_grep "data.train differs from the files the checkpoint was trained on \(50 files then, 49 now\): 'shard-049.h5' is missing" \
  "$TMP/refused.txt"
[[ $(grep -c "differs from the files" "$TMP/refused.txt") -eq 1 ]] || fail "the refusal is not printed once"
expect_exit 0 "$TMP/allowed.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${resume[@]}" \
  --set data.allow_changed_files=true
expect_grep "resumed from .*step_00000020" "$TMP/allowed.txt"
# The same files moved elsewhere resume (names below the glob's directory are compared).
expect_exit 75 "$TMP/stop2.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set data.batch_size=12 \
  --set "data.train=$TMP/shards/*.h5" --set "run.dir=$TMP/moved" --set debug.stop_step=20
mv "$TMP/shards" "$TMP/elsewhere"
expect_exit 0 "$TMP/moved.txt" "$HPCTRAIN_BIN" train "${common[@]}" --set data.batch_size=12 \
  --set "data.train=$TMP/elsewhere/*.h5" --set "run.dir=$TMP/moved"
"${compare[@]}" "$TMP/one1" "$TMP/moved" || fail "a resume on moved files differs"
finish
