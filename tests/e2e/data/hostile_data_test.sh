#!/usr/bin/env bash
# Hostile data files (issues 18, 32): a FIFO or a device as a data file is refused at once (it would
# block the open forever), uint64 labels above 2^63-1 and labels or num_classes far beyond any
# class count are exit 3 with the file, dataset and value named, and `inspect data` never
# allocates by a count it read from the file (no std::bad_alloc, no "vector larger than
# max_size").
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
f=$TMP/files
mkdir -p "$f"

# A FIFO nobody writes to: before the fix, open(2) blocked forever (timeout guards the test).
mkfifo "$f/fifo.h5"
expect_exit 3 "$TMP/fifo-inspect.txt" timeout 20 "$HPCTRAIN_BIN" inspect data "$f/fifo.h5"
expect_grep "data file '$f/fifo.h5' is not a regular file \(a FIFO\)" "$TMP/fifo-inspect.txt"
expect_exit 3 "$TMP/fifo-bench.txt" mpirun_np 2 "$HPCTRAIN_BIN" bench data \
  --file "$f/fifo.h5" --batch 2 --steps 1 --warmup 0
expect_grep "is not a regular file \(a FIFO\)" "$TMP/fifo-bench.txt"
expect_exit 3 "$TMP/devnull.txt" timeout 20 "$HPCTRAIN_BIN" inspect data /dev/null
expect_grep "is not a regular file \(a character device\)" "$TMP/devnull.txt"

$PY - "$f" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
def write(name, labels, attrs=None, dtype=None):
    with h5py.File(f"{d}/{name}", "w") as h:
        h.create_dataset("inputs", data=np.zeros((len(labels), 1, 4, 4), np.uint8))
        lab = h.create_dataset("labels", data=np.array(labels, dtype=dtype or np.int64))
        for k, v in (attrs or {}).items():
            lab.attrs[k] = v
# uint64 labels, one above INT64_MAX: HDF5's conversion to int64 saturates it.
write("u64_huge.h5", [0, 1, 2**63 + 5, 3], dtype=np.uint64)
write("u64_huge_classes.h5", [0, 1, 2**64 - 1, 3], {"num_classes": 10}, dtype=np.uint64)
write("label_2p40.h5", [0, 1, 2**40, 3])
write("classes_2p62.h5", [0, 1, 2, 3], {"num_classes": float(2**62)})
write("ok_u64.h5", [0, 1, 2, 3], dtype=np.uint64)
PY

expect_exit 3 "$TMP/u64.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/u64_huge.h5"
expect_grep "dataset /labels: label 9223372036854775807 at index 2 \(or beyond: an unsigned label above 2\^63-1\) is outside" "$TMP/u64.txt"
expect_exit 3 "$TMP/u64c.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/u64_huge_classes.h5"
expect_grep "label 9223372036854775807 at index 2 .* is outside \[0, 10\) \(attribute num_classes\)" "$TMP/u64c.txt"
expect_exit 3 "$TMP/2p40.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/label_2p40.h5"
expect_grep "label 1099511627776 at index 2 is outside \[0, 16777216\) \(the most classes hpctrain supports\)" "$TMP/2p40.txt"
expect_exit 3 "$TMP/2p62.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/classes_2p62.h5"
expect_grep "attribute num_classes = .* is more than hpctrain supports \(16777216\)" "$TMP/2p62.txt"
for log in "$TMP"/u64.txt "$TMP"/u64c.txt "$TMP"/2p40.txt "$TMP"/2p62.txt; do
  if grep -Eq "bad_alloc|max_size|unexpected failure|c10::" "$log"; then
    fail "$log: an allocation failure or exception text instead of a data error"
  fi
done
# uint64 labels in range are fine, and so is the histogram of a file with few labels.
expect_exit 0 "$TMP/ok.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/ok_u64.h5"
expect_grep "^labels    0:1 1:1 2:1 3:1" "$TMP/ok.txt"
# Training reads the same checks (on 2 ranks: exit 3 on every rank, no hang).
expect_exit 3 "$TMP/u64-train.txt" mpirun_np 2 "$HPCTRAIN_BIN" bench data \
  --file "$f/u64_huge.h5" --batch 2 --steps 1 --warmup 0
expect_grep "or beyond: an unsigned label above 2\^63-1" "$TMP/u64-train.txt"

# Samples of zero values (issue 32): a zero sample dimension is exit 3 naming the dataset and
# its shape, in inspect and in training (before: LibTorch's "min(): Expected reduction dim",
# exit 1, and training advised "set model.in_features = 0").
$PY - "$f" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
for name, shape in [("zero_width.h5", (3000, 0)), ("zero_height.h5", (3000, 1, 0, 28))]:
    with h5py.File(f"{d}/{name}", "w") as h:
        h.create_dataset("inputs", data=np.zeros(shape, np.float32))
        h.create_dataset("labels", data=np.zeros(shape[0], np.int64))
with h5py.File(f"{d}/zero_targets.h5", "w") as h:
    h.create_dataset("inputs", data=np.zeros((100, 4), np.float32))
    h.create_dataset("targets", data=np.zeros((100, 0), np.float32))
PY
expect_exit 3 "$TMP/zw.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/zero_width.h5"
expect_grep "zero_width.h5', dataset /inputs: shape \(3000, 0\): each sample \(shape \(0,\)\) holds no values" "$TMP/zw.txt"
expect_exit 3 "$TMP/zh.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/zero_height.h5"
expect_grep "dataset /inputs: shape \(3000, 1, 0, 28\): each sample \(shape \(1, 0, 28\)\) holds no values \(dimension 2 is 0\)" "$TMP/zh.txt"
expect_exit 3 "$TMP/zt.txt" timeout 30 "$HPCTRAIN_BIN" inspect data "$f/zero_targets.h5"
expect_grep "dataset /targets: shape \(100, 0\): each sample" "$TMP/zt.txt"
expect_exit 3 "$TMP/zw-train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$f/zero_width.h5" \
  --set "data.val=$f/zero_width.h5" --set "run.dir=$TMP/zw-run"
expect_grep "data.train file '$f/zero_width.h5', dataset /inputs: shape \(3000, 0\)" "$TMP/zw-train.txt"
for log in "$TMP"/zw.txt "$TMP"/zh.txt "$TMP"/zt.txt "$TMP"/zw-train.txt; do
  grep -Eq "unexpected failure|in_features = 0" "$log" && fail "$log: $(grep -Em1 "unexpected failure|in_features = 0" "$log")"
done
finish
