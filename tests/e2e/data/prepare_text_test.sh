#!/usr/bin/env bash
# prepare text on a real corpus (Debian's fortunes): byte tokens equal the files' bytes, split
# into train and val, readable by h5py and by hpctrain inspect.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

fortunes=/usr/share/games/fortunes
inputs=("$fortunes/computers" "$fortunes/science" "$fortunes/linux")
for f in "${inputs[@]}"; do [[ -f $f ]] || fail "$f missing: apt-get install fortunes (scripts/setup.sh)"; done

expect_exit 0 "$TMP/prepare.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
  --out "$TMP/txt" --val-fraction 0.1
expect_grep "wrote $TMP/txt/train.h5: [0-9]+ byte tokens, vocab_size 256" "$TMP/prepare.txt"
expect_grep "wrote $TMP/txt/val.h5: [0-9]+ byte tokens" "$TMP/prepare.txt"

expect_exit 0 "$TMP/inspect.txt" "$HPCTRAIN_BIN" inspect data "$TMP/txt/val.h5" --seq-len 32 --samples 2
expect_grep "^kind +language_model" "$TMP/inspect.txt"
expect_grep "/tokens +uint16" "$TMP/inspect.txt"
expect_grep "@vocab_size = 256" "$TMP/inspect.txt"
expect_grep "@tokenizer = bytes" "$TMP/inspect.txt"
expect_grep "windows of seq_len 32" "$TMP/inspect.txt"

$PY - "$TMP/txt" "${inputs[@]}" <<'PY' || fail "token files do not hold the text's bytes"
import sys
import h5py, numpy as np
out, files = sys.argv[1], sys.argv[2:]
text = b"".join(open(f, "rb").read() for f in files)
with h5py.File(f"{out}/train.h5") as t, h5py.File(f"{out}/val.h5") as v:
    train, val = t["tokens"][:], v["tokens"][:]
    assert train.dtype == np.uint16 and t["tokens"].attrs["vocab_size"] == 256
    assert len(train) + len(val) == len(text), (len(train), len(val), len(text))
    assert 0.05 < len(val) / len(text) < 0.15, len(val) / len(text)
    # Each file's tail went to val; together they are a permutation of the text's lines.
    assert sorted(bytes(train.astype(np.uint8)).split(b"\n") + bytes(val.astype(np.uint8)).split(b"\n")) \
        == sorted(text.split(b"\n") + [b""]), "lines differ"
    assert bytes(val.astype(np.uint8)).decode("utf-8")
print("text tokens ok", len(train), len(val))
PY
finish
