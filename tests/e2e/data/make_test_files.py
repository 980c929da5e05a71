#!/usr/bin/env python3
"""Writes dataset files with h5py into OUTDIR: good files in the documented layout (docs/DATA.md),
written the way a user would with h5py, and one bad file per kind of bad input. Used by the data
unit tests (tests/unit/data) and the end-to-end tests (tests/e2e/data).

    /usr/bin/python3 make_test_files.py OUTDIR
"""
import os
import sys

import h5py
import numpy as np

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def path(name):
    return os.path.join(out, name)


# --- good files -------------------------------------------------------------------------------
# uint8 images 50 x 1 x 4 x 4, pixel (i, j) = (7 i + j) mod 256, label i mod 5, chunked like
# hpctrain's writer, attributes as documented.
n = 50
inputs = ((7 * np.arange(n)[:, None] + np.arange(16)[None, :]) % 256).astype(np.uint8)
with h5py.File(path("h5py_classification.h5"), "w") as f:
    f.attrs["schema_version"] = 1
    f.attrs["kind"] = "classification"
    f.attrs["source"] = "synthetic, written by h5py"
    f.attrs["created_by"] = "make_test_files.py"
    d = f.create_dataset("inputs", data=inputs.reshape(n, 1, 4, 4), chunks=(8, 1, 4, 4))
    d.attrs["scale"] = 1.0 / 255.0
    y = f.create_dataset("labels", data=np.arange(n, dtype=np.int64) % 5, chunks=(16,))
    y.attrs["num_classes"] = 5

# float32 inputs 20 x 3 (value 10 i + j), contiguous (h5py's default), labels int32 i mod 3,
# no attributes at all: the reader takes scale 1 and num_classes = max label + 1.
with h5py.File(path("h5py_float.h5"), "w") as f:
    f["inputs"] = (10 * np.arange(20)[:, None] + np.arange(3)[None, :]).astype(np.float32)
    f["labels"] = (np.arange(20) % 3).astype(np.int32)

# Byte-level token streams: token t = t mod 256 (uint16) and (3 t) mod 1000 (int32).
with h5py.File(path("h5py_tokens_uint16.h5"), "w") as f:
    f.attrs["schema_version"] = 1
    t = f.create_dataset("tokens", data=(np.arange(1000) % 256).astype(np.uint16), chunks=(128,))
    t.attrs["vocab_size"] = 256
    t.attrs["tokenizer"] = "bytes"
with h5py.File(path("h5py_tokens_int32.h5"), "w") as f:
    f["tokens"] = ((3 * np.arange(500)) % 1000).astype(np.int32)
    f.attrs["vocab_size"] = 1000  # on the root group: also accepted

# --- bad files: one problem each --------------------------------------------------------------
def classification(name, inputs, labels, **attrs):
    with h5py.File(path(name), "w") as f:
        if inputs is not None:
            f["inputs"] = inputs
        if labels is not None:
            f["labels"] = labels
        for k, v in attrs.items():
            f["labels"].attrs[k] = v


good_x = np.zeros((10, 1, 4, 4), np.uint8)
good_y = np.arange(10, dtype=np.int64) % 10
classification("bad_missing_labels.h5", good_x, None)
classification("bad_missing_inputs.h5", None, good_y)
classification("bad_inputs_rank.h5", np.zeros(10, np.uint8), good_y)
classification("bad_inputs_dtype.h5", good_x.astype(np.float64), good_y)
classification("bad_labels_dtype.h5", good_x, good_y.astype(np.float32))
classification("bad_labels_rank.h5", good_x, np.eye(10, dtype=np.int64))
classification("bad_label_range.h5", good_x, np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 10]),
               num_classes=10)
classification("bad_label_negative.h5", good_x, np.array([0, 1, 2, 3, -1, 5, 6, 7, 8, 9]))
classification("bad_count_mismatch.h5", good_x, good_y[:9])
classification("tiny_classification.h5", good_x, good_y, num_classes=10)

with h5py.File(path("bad_token_vocab.h5"), "w") as f:
    t = f.create_dataset("tokens", data=np.array([1, 2, 3, 300, 4, 5, 6, 7, 8, 9], np.uint16))
    t.attrs["vocab_size"] = 256
with h5py.File(path("bad_token_rank.h5"), "w") as f:
    f.create_dataset("tokens", data=np.zeros((10, 10), np.uint16)).attrs["vocab_size"] = 256
with h5py.File(path("bad_token_dtype.h5"), "w") as f:
    f.create_dataset("tokens", data=np.zeros(100, np.float32)).attrs["vocab_size"] = 256
with h5py.File(path("bad_token_no_vocab.h5"), "w") as f:
    f["tokens"] = np.zeros(100, np.uint16)
with h5py.File(path("bad_no_datasets.h5"), "w") as f:
    f["images"] = np.zeros((4, 4), np.uint8)
with h5py.File(path("bad_schema_version.h5"), "w") as f:
    f.attrs["schema_version"] = 99
    f["inputs"] = good_x
    f["labels"] = good_y
with open(path("bad_not_hdf5.h5"), "w") as f:
    f.write("this is a text file, not HDF5\n")
print("wrote test files to", out)
