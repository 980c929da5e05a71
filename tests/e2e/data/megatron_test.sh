#!/usr/bin/env bash
# Megatron indexed datasets (docs/DATA.md, "Megatron indexed datasets"): .bin/.idx pairs written by
# make_megatron.py from the published layout train a gpt bitwise like the same tokens in HDF5, at
# 1 and 2 ranks, whatever the dtype or the order of the sequences in the .bin, alone and in a
# mixture with an HDF5 source; damaged indices (magic, version, dtype code, counts, pointers past
# the end, document indices, lengths) and out-of-vocabulary ids are exit 3 naming the field (at 1
# rank; at 2 ranks too for one damaged header, ids and a FIFO: every rank reports one line).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
compare=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py")
"$PY" "$(dirname "$0")/make_megatron.py" "$TMP" >/dev/null || fail "make_megatron.py failed"
common=(-c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set model.seq_len=16 --set model.layers=2
  --set model.width=32 --set model.heads=2 --set data.val= --set run.max_steps=12
  --set run.epochs=5 --set eval.every_steps=0 --set logging.every_steps=4
  --set checkpoint.every_steps=0 --set schedule.warmup_steps=2)
mm=$TMP/mm

for np in 1 2; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  batch=$((8 / np))  # the same global batch at both world sizes
  expect_exit 0 "$TMP/h5_$np.txt" "${launch[@]}" train "${common[@]}" --set data.batch_size=$batch \
    --set "data.train=$TMP/all.h5" --set "run.dir=$TMP/h5_$np"
  for name in web32 web16; do
    expect_exit 0 "$TMP/${name}_$np.txt" "${launch[@]}" train "${common[@]}" \
      --set data.batch_size=$batch --set "data.train={path: \"$mm/$name\", format: megatron}" \
      --set "run.dir=$TMP/${name}_$np"
    "${compare[@]}" "$TMP/h5_$np" "$TMP/${name}_$np" >"$TMP/cmp_${name}_$np.txt" ||
      fail "np=$np: $name (Megatron) trained differently from the same tokens in HDF5"
  done
done
# A mixture: a Megatron source and an HDF5 source against the same halves both in HDF5.
mix_h5="[{path: \"$TMP/a.h5\", weight: 0.6, name: a}, {path: \"$TMP/b.h5\", weight: 0.4, name: b}]"
mix_mm="[{path: \"$mm/half_a\", format: megatron, weight: 0.6, name: a}, {path: \"$TMP/b.h5\", weight: 0.4, name: b}]"
for np in 1 2; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/mixh5_$np.txt" "${launch[@]}" train "${common[@]}" \
    --set data.batch_size=$((8 / np)) --set "data.train=$mix_h5" --set "run.dir=$TMP/mixh5_$np"
  expect_exit 0 "$TMP/mixmm_$np.txt" "${launch[@]}" train "${common[@]}" \
    --set data.batch_size=$((8 / np)) --set "data.train=$mix_mm" --set "run.dir=$TMP/mixmm_$np"
  expect_grep "2 sources" "$TMP/mixmm_$np.txt"
  "${compare[@]}" "$TMP/mixh5_$np" "$TMP/mixmm_$np" >"$TMP/cmp_mix_$np.txt" ||
    fail "np=$np: a mixture with a Megatron source differs from the same in HDF5"
done

# Damaged indices: exit 3, one message naming the field, at 1 and 2 ranks.
check_bad() {  # NAME PATTERN [RANKS]: at 1 rank, and at 2 where RANKS is "1 2"
  local np
  for np in ${3:-1}; do
    local launch=("$HPCTRAIN_BIN")
    ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
    expect_exit 3 "$TMP/bad_$1_$np.txt" "${launch[@]}" train "${common[@]}" --set data.batch_size=4 \
      --set "data.train={path: \"$TMP/bad/$1\", format: megatron}" --set "run.dir=$TMP/bad_$1_$np" &&
      expect_grep "$2" "$TMP/bad_$1_$np.txt"
    [[ $(grep -Ec -- "$2" "$TMP/bad_$1_$np.txt") -eq 1 ]] || fail "$1 np=$np: not one error line"
  done
}
check_bad magic "field magic is 'MMIDIDY" "1 2"
check_bad version "field version is 2"
check_bad float "field dtype code is 7 \(a floating-point type\)"
check_bad unknown "field dtype code is 9 \(unknown"
check_bad truncated_bin "field sequence_pointers\[[0-9]+\] = [0-9]+ with length [0-9]+ .* reaches past the end"
check_bad pointer "field sequence_pointers\[119\] = [0-9]+ .* reaches past the end"
check_bad counts "fields sequence count \(1120\) and document count"
check_bad documents "field document_indices\[120\] = 119"
check_bad negative "field sequence_lengths\[0\] is -3"
check_bad short "shorter than the 34-byte header"
check_bad vocab "token id 300 at position [0-9]+ is outside the vocabulary \[0, 256\)" "1 2"
check_bad missing "missing.idx' does not exist"
mkfifo "$TMP/bad/fifo.idx" && cp "$mm/web32.bin" "$TMP/bad/fifo.bin"
check_bad fifo "fifo.idx' is not a regular file \(a FIFO\)" "1 2"
expect_exit 3 "$TMP/bad_format.txt" "$HPCTRAIN_BIN" train "${common[@]}" \
  --set "data.train={path: \"$mm/web32\", format: arrow}" --set "run.dir=$TMP/bad_format"
expect_grep "format = arrow: must be hdf5 \(the default\) or megatron" "$TMP/bad_format.txt"
finish
