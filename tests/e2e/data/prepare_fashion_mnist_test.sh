#!/usr/bin/env bash
# prepare fashion-mnist on 2 ranks (rank 0 writes, rank 1 waits), inspect the result, and check
# with h5py that counts, labels, pixels and attributes equal the IDX source.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

idx=/usr/share/datasets/fashion-mnist
[[ -f $idx/train-images-idx3-ubyte.gz ]] || fail "Fashion-MNIST missing: apt-get install dataset-fashion-mnist (scripts/setup.sh)"

expect_exit 0 "$TMP/prepare.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare fashion-mnist --out "$TMP/fm"
expect_grep "wrote $TMP/fm/train.h5: 60000 images 1x28x28 uint8, 10 classes" "$TMP/prepare.txt"
expect_grep "wrote $TMP/fm/test.h5: 10000 images" "$TMP/prepare.txt"
[[ $(ls "$TMP/fm") == $'test.h5\ntrain.h5' ]] || fail "unexpected files in $TMP/fm: $(ls "$TMP/fm")"

expect_exit 0 "$TMP/inspect.txt" "$HPCTRAIN_BIN" inspect data "$TMP/fm/train.h5" --samples 3
expect_grep "^kind +classification" "$TMP/inspect.txt"
expect_grep "schema_version +1" "$TMP/inspect.txt"
expect_grep "created_by +hpctrain .*prepare fashion-mnist --from $idx --out $TMP/fm" "$TMP/inspect.txt"
expect_grep "/inputs +uint8 +shape \(60000, 1, 28, 28\) +chunks \(128, 1, 28, 28\)" "$TMP/inspect.txt"
expect_grep "/labels +int64 +shape \(60000,\)" "$TMP/inspect.txt"
expect_grep "@scale = 0.00392157" "$TMP/inspect.txt"
expect_grep "@num_classes = 10" "$TMP/inspect.txt"
expect_grep "^samples +60000 x \(1, 28, 28\) uint8" "$TMP/inspect.txt"
expect_grep "^labels +0:6000 1:6000 2:6000" "$TMP/inspect.txt"
expect_grep "^ +0 +9 " "$TMP/inspect.txt" # the first training image is an ankle boot (class 9)

$PY - "$TMP/fm" "$idx" <<'PY' || fail "h5py round trip"
import gzip, sys
import h5py, numpy as np
out, idx = sys.argv[1], sys.argv[2]
def idx_array(path, rank):
    raw = gzip.open(path).read()
    assert int.from_bytes(raw[:4], "big") == 0x800 + rank
    dims = [int.from_bytes(raw[4 + 4 * d:8 + 4 * d], "big") for d in range(rank)]
    return np.frombuffer(raw[4 + 4 * rank:], np.uint8).reshape(dims)
for split, prefix, n in [("train", "train", 60000), ("test", "t10k", 10000)]:
    images = idx_array(f"{idx}/{prefix}-images-idx3-ubyte.gz", 3)
    labels = idx_array(f"{idx}/{prefix}-labels-idx1-ubyte.gz", 1)
    with h5py.File(f"{out}/{split}.h5", "r") as f:
        x, y = f["inputs"], f["labels"]
        assert x.shape == (n, 1, 28, 28) and x.dtype == np.uint8, (x.shape, x.dtype)
        assert y.shape == (n,) and y.dtype == np.int64, (y.shape, y.dtype)
        assert x.chunks == (128, 1, 28, 28), x.chunks
        assert np.array_equal(x[:, 0], images), split
        assert np.array_equal(y[:], labels.astype(np.int64)), split
        assert abs(x.attrs["scale"] - 1 / 255) < 1e-15
        assert y.attrs["num_classes"] == 10
        assert f.attrs["schema_version"] == 1 and f.attrs["kind"] == "classification"
        assert "Fashion-MNIST" in f.attrs["source"] and "hpctrain" in f.attrs["created_by"]
print("h5py round trip ok")
PY
finish
