#!/usr/bin/env bash
# prepare with bad inputs: wrong magic, truncated files, count mismatches, a missing directory,
# text that is not UTF-8. Each names the file and exits 3 (bad data), on 1 or 2 ranks.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

$PY - "$TMP" <<'PY' || fail "writing bad IDX files"
import gzip, os, sys
tmp = sys.argv[1]
def idx(rank, dims, data, magic=None):
    head = (magic if magic is not None else 0x800 + rank).to_bytes(4, "big")
    return head + b"".join(d.to_bytes(4, "big") for d in dims) + bytes(data)
def release(name, train_images=None, train_labels=None):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    files = {
        "train-images-idx3-ubyte.gz": train_images or idx(3, [4, 28, 28], [0] * 4 * 784),
        "train-labels-idx1-ubyte.gz": train_labels or idx(1, [4], [1, 2, 3, 4]),
        "t10k-images-idx3-ubyte.gz": idx(3, [2, 28, 28], [0] * 2 * 784),
        "t10k-labels-idx1-ubyte.gz": idx(1, [2], [5, 6]),
    }
    for f, data in files.items():
        with gzip.open(os.path.join(d, f), "wb") as out:
            out.write(data)
release("good")
release("magic", train_labels=idx(1, [4], [1, 2, 3, 4], magic=0x803))
release("truncated", train_images=idx(3, [4, 28, 28], [0] * 3 * 784))
release("mismatch", train_labels=idx(1, [3], [1, 2, 3]))
with open(os.path.join(tmp, "latin1.txt"), "wb") as f:
    f.write(b"fine\nna\xefve\n")
PY

expect_exit 0 "$TMP/good.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/good" --out "$TMP/out"
expect_grep "wrote $TMP/out/train.h5: 4 images" "$TMP/good.txt"

expect_exit 3 "$TMP/magic.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/magic" --out "$TMP/o1"
expect_grep "error: IDX file '$TMP/magic/train-labels-idx1-ubyte.gz' has magic number 0x00000803, expected 0x00000801" "$TMP/magic.txt"

expect_exit 3 "$TMP/truncated.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/truncated" --out "$TMP/o2"
expect_grep "IDX file '$TMP/truncated/train-images-idx3-ubyte.gz' is truncated: its header promises 4 x 28 x 28 = 3136 bytes of data, the file holds 2352" "$TMP/truncated.txt"
[[ ! -e $TMP/o2/train.h5 ]] || fail "a failed prepare left $TMP/o2/train.h5"

expect_exit 3 "$TMP/mismatch.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/mismatch" --out "$TMP/o3"
expect_grep "disagree: 4 images but 3 labels" "$TMP/mismatch.txt"

expect_exit 3 "$TMP/nodir.txt" "$HPCTRAIN_BIN" prepare fashion-mnist --from "$TMP/nowhere" --out "$TMP/o4"
expect_grep "IDX file '$TMP/nowhere/train-images-idx3-ubyte.gz' does not exist" "$TMP/nodir.txt"

expect_exit 3 "$TMP/latin1.txt.log" "$HPCTRAIN_BIN" prepare text --in "$TMP/latin1.txt" --out "$TMP/o5"
expect_grep "text file '$TMP/latin1.txt' is not UTF-8 text: invalid byte 0xef at offset 7" "$TMP/latin1.txt.log"

expect_exit 2 "$TMP/noout.txt" "$HPCTRAIN_BIN" prepare fashion-mnist
expect_grep "\-\-out is required" "$TMP/noout.txt"
expect_exit 2 "$TMP/fraction.txt" "$HPCTRAIN_BIN" prepare text --in "$TMP/latin1.txt" --out "$TMP/o6" --val-fraction 2
expect_grep "\-\-val-fraction 2 must lie in \[0, 1\)" "$TMP/fraction.txt"
finish
