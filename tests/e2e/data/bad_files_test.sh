#!/usr/bin/env bash
# Every kind of bad data file is an error with file, dataset, expected and found, exit code 3, on
# 2 ranks, without hanging: each rank validates before any collective.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

$PY "$(dirname "$0")/make_test_files.py" "$TMP/files" >/dev/null || fail "make_test_files.py"
f=$TMP/files

# bad RANKS FILE BATCH PATTERN...: `bench data` (which opens the file as training does) fails
# with exit 3 and the message; on 2 ranks, the job ends although no rank waits for another.
bad() {
  local ranks=$1 file=$2 batch=$3 log
  log=$TMP/$(basename "$file").log
  shift 3
  local launch=()
  ((ranks > 1)) && launch=(mpirun_np "$ranks")
  expect_exit 3 "$log" "${launch[@]}" "$HPCTRAIN_BIN" bench data --file "$f/$file" \
    --batch "$batch" --steps 1 --warmup 0 --seq-len 4 || return
  expect_grep "^\[hpctrain r[01]/.*\] error: --file file '$f/$file'" "$log"
  for pattern in "$@"; do expect_grep "$pattern" "$log"; done
}
# Every message is checked in the unit tests (Dataset.BadFilesAreClearErrors); here the CLI path:
# exit code 3, the message on 1 and 2 ranks.
bad 2 missing.h5 2 "does not exist: check --file, or create it"
bad 1 bad_not_hdf5.h5 2 "is not an HDF5 file"
bad 1 bad_missing_labels.h5 2 "missing dataset /labels"
bad 1 bad_inputs_dtype.h5 2 "dataset /inputs: expected dtype uint8 .* found float64"
bad 2 bad_label_range.h5 2 "dataset /labels: label 10 at index 9 is outside \\[0, 10\\)"
bad 2 bad_token_vocab.h5 1 "dataset /tokens: token id 300 at position 3 is outside the vocabulary \\[0, 256\\)"
# 10 samples, 2 ranks x 8 per rank: fewer than one global batch.
bad 2 tiny_classification.h5 8 "holds 10 samples, fewer than one global batch of 16"

expect_exit 3 "$TMP/inspect.log" "$HPCTRAIN_BIN" inspect data "$f/bad_label_negative.h5"
expect_grep "label -1 at index 4 is outside" "$TMP/inspect.log"
expect_exit 0 "$TMP/inspect_ok.log" "$HPCTRAIN_BIN" inspect data "$f/h5py_classification.h5"
expect_grep "^samples +50 x \(1, 4, 4\) uint8" "$TMP/inspect_ok.log"
finish
