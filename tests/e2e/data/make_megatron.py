#!/usr/bin/python3
"""make_megatron.py DIR: writes Megatron indexed datasets (PREFIX.bin + PREFIX.idx) and the same
tokens as HDF5 token files, for tests/e2e/data/megatron_test.sh.

The writer follows the published MMIDIDX layout (docs/DATA.md, "Megatron indexed datasets"):
the 9-byte magic b"MMIDIDX\\0\\0", version (uint64 1), dtype code (uint8: 1 uint8, 2 int8,
3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), sequence count and document count
(uint64 each), then the sequence lengths (int32), the sequences' byte offsets into .bin (int64)
and the document indices (int64: 0, then the sequence count at each document's end), all little
endian. It is written here from that description; hpctrain's reader is tested against it.

DIR/stream.npy   the token stream (documents, each ending with the end-of-text id 0)
DIR/all.h5       the stream as /tokens (uint16, vocab_size 256)
DIR/a.h5, b.h5   its first and second half
DIR/mm/web32     the stream, int32, one sequence per document
DIR/mm/web16     the stream, uint16, its sequences stored in the .bin in reverse order
                 (the pointers say where each is), two sequences per document
DIR/mm/half_a    the first half (int64), for mixtures
DIR/bad/*        damaged copies of web32 (see DAMAGE below)
"""
import os
import struct
import sys

import h5py
import numpy as np

CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6,
         np.float32: 7, np.uint16: 8}


def write_index(path, dtype_code, lengths, pointers, doc_indices, magic=b"MMIDIDX\x00\x00",
                version=1, counts=None):
    seq_count, doc_count = counts if counts else (len(lengths), len(doc_indices))
    with open(path, "wb") as f:
        f.write(magic)
        f.write(struct.pack("<Q", version))
        f.write(struct.pack("<B", dtype_code))
        f.write(struct.pack("<Q", seq_count))
        f.write(struct.pack("<Q", doc_count))
        f.write(np.asarray(lengths, dtype="<i4").tobytes())
        f.write(np.asarray(pointers, dtype="<i8").tobytes())
        f.write(np.asarray(doc_indices, dtype="<i8").tobytes())


def write_dataset(prefix, sequences, docs_per_seq, dtype, order=None):
    """Writes sequences (lists of ids) to prefix.bin in `order` (default: as given) and the index
    in sequence order; every `docs_per_seq` sequences form a document."""
    order = list(range(len(sequences))) if order is None else order
    itemsize = np.dtype(dtype).itemsize
    pointers = [0] * len(sequences)
    offset = 0
    with open(prefix + ".bin", "wb") as f:
        for s in order:
            pointers[s] = offset
            data = np.asarray(sequences[s], dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
            f.write(data)
            offset += len(data)
    assert offset == sum(len(s) for s in sequences) * itemsize
    lengths = [len(s) for s in sequences]
    docs = [0] + [min(i + docs_per_seq, len(sequences))
                  for i in range(0, len(sequences), docs_per_seq)]
    write_index(prefix + ".idx", CODES[dtype], lengths, pointers, docs)
    return lengths, pointers, docs


def write_h5(path, tokens):
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=np.asarray(tokens, dtype=np.uint16))
        f["tokens"].attrs["vocab_size"] = 256


def main():
    out = sys.argv[1]
    rng = np.random.default_rng(7)
    documents = []
    for _ in range(120):
        n = int(rng.integers(5, 60))
        documents.append(list(rng.integers(1, 256, n)) + [0])  # 0 ends a document
    stream = [t for d in documents for t in d]
    os.makedirs(os.path.join(out, "mm"), exist_ok=True)
    os.makedirs(os.path.join(out, "bad"), exist_ok=True)
    np.save(os.path.join(out, "stream.npy"), np.asarray(stream, dtype=np.int64))
    write_h5(os.path.join(out, "all.h5"), stream)
    half = len(documents) // 2
    a = [t for d in documents[:half] for t in d]
    b = [t for d in documents[half:] for t in d]
    write_h5(os.path.join(out, "a.h5"), a)
    write_h5(os.path.join(out, "b.h5"), b)

    lengths, pointers, docs = write_dataset(os.path.join(out, "mm", "web32"), documents, 1,
                                            np.int32)
    halves = []  # each document split in two sequences
    for d in documents:
        cut = len(d) // 2
        halves += [d[:cut], d[cut:]]
    write_dataset(os.path.join(out, "mm", "web16"), halves, 2, np.uint16,
                  order=list(reversed(range(len(halves)))))
    write_dataset(os.path.join(out, "mm", "half_a"), documents[:half], 1, np.int64)

    # Damaged copies of web32: each shares its .bin, or a truncated one.
    bad = os.path.join(out, "bad")
    bin_bytes = open(os.path.join(out, "mm", "web32.bin"), "rb").read()

    def bad_copy(name, bin_data=bin_bytes, **kw):
        with open(os.path.join(bad, name + ".bin"), "wb") as f:
            f.write(bin_data)
        args = dict(dtype_code=4, lengths=lengths, pointers=pointers, doc_indices=docs)
        args.update(kw)
        write_index(os.path.join(bad, name + ".idx"), **args)

    bad_copy("magic", magic=b"MMIDIDY\x00\x00")
    bad_copy("version", version=2)
    bad_copy("float", dtype_code=7)
    bad_copy("unknown", dtype_code=9)
    bad_copy("truncated_bin", bin_data=bin_bytes[:-40])
    bad_copy("pointer", pointers=pointers[:-1] + [len(bin_bytes)])
    bad_copy("counts", counts=(len(lengths) + 1000, len(docs)))
    bad_copy("documents", doc_indices=docs[:-1] + [len(lengths) - 1])
    bad_copy("negative", lengths=[-3] + lengths[1:])
    with open(os.path.join(bad, "short.idx"), "wb") as f:
        f.write(b"MMIDIDX\x00\x00\x01")
    with open(os.path.join(bad, "short.bin"), "wb") as f:
        f.write(bin_bytes)
    # Token ids beyond a vocabulary of 256.
    big = [list(d) for d in documents]
    big[3][1] = 300
    write_dataset(os.path.join(bad, "vocab"), big, 1, np.int32)
    print(len(stream))


if __name__ == "__main__":
    main()
