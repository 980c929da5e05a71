#!/usr/bin/env bash
# prepare tokens (raw uint16, llm.c .bin with its header, .npy) and prepare numpy round-trip
# exactly against numpy, also sharded under mpirun (every rank writes its share); truncated,
# wrong-magic and wrong-dtype inputs are exit 3 naming the byte offset; kill -9 during a
# conversion leaves no file under the final name.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
in=$TMP/in
"$PY" - "$in" <<'PY' || fail "writing the inputs failed"
import os, sys
import numpy as np
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(5)
t = rng.integers(0, 300, 1000).astype(np.uint16)
t.tofile(f"{d}/raw.bin")                       # nanoGPT-style raw uint16
header = np.zeros(256, np.int32)
header[:3] = [20240520, 1, 700]
u = rng.integers(0, 300, 700).astype(np.uint16)
with open(f"{d}/llmc.bin", "wb") as f:         # llm.c's format
    f.write(header.tobytes()); f.write(u.tobytes())
np.save(f"{d}/big.npy", rng.integers(0, 70000, 500).astype(np.uint32))
np.save(f"{d}/x.npy", rng.standard_normal((50, 3, 4)))          # float64 -> float32
np.save(f"{d}/y.npy", rng.integers(0, 7, 50).astype(np.int32))
np.save(f"{d}/t.npy", rng.standard_normal((50, 2)).astype(np.float32))
# bad inputs
open(f"{d}/odd.bin", "wb").write(t.tobytes()[:-1])              # a token cut short
bad = header.copy(); bad[0] = 12345
open(f"{d}/magic.bin", "wb").write(bad.tobytes() + u.tobytes())
short = header.copy(); short[2] = 800
open(f"{d}/short.bin", "wb").write(short.tobytes() + u.tobytes())
np.save(f"{d}/float_tokens.npy", rng.standard_normal(100).astype(np.float32))
big = t.copy(); big[123] = 400
big.tofile(f"{d}/vocab.bin")
PY

expect_exit 0 "$TMP/raw.txt" "$HPCTRAIN_BIN" prepare tokens "$in/raw.bin" --vocab 300 --out "$TMP/raw"
expect_exit 0 "$TMP/llmc.txt" "$HPCTRAIN_BIN" prepare tokens "$in/llmc.bin" --vocab 300 \
  --out "$TMP/llmc" --val-fraction 0.1
expect_exit 0 "$TMP/npy.txt" "$HPCTRAIN_BIN" prepare tokens "$in/big.npy" --vocab 70000 --out "$TMP/npy"
expect_exit 0 "$TMP/shards.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare tokens "$in/raw.bin" "$in/llmc.bin" \
  --vocab 300 --out "$TMP/shards" --shard-size 300 --val-fraction 0.1
expect_grep "files written by 2 ranks" "$TMP/shards.txt"
expect_exit 0 "$TMP/numpy.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare numpy --inputs "$in/x.npy" \
  --labels "$in/y.npy" --out "$TMP/cls" --shard-size 20 --val-fraction 0.2
expect_exit 0 "$TMP/reg.txt" "$HPCTRAIN_BIN" prepare numpy --inputs "$in/x.npy" \
  --targets "$in/t.npy" --out "$TMP/reg"
"$PY" - "$in" "$TMP" <<'PY' || fail "converted files differ from numpy"
import glob, sys
import h5py, numpy as np
d, out = sys.argv[1], sys.argv[2]
def tokens(path):
    with h5py.File(path) as f:
        return f["tokens"][:], f["tokens"].attrs["vocab_size"], f["tokens"].dtype
raw = np.fromfile(f"{d}/raw.bin", np.uint16)
u = np.fromfile(f"{d}/llmc.bin", np.uint16, offset=1024)
got, vocab, dtype = tokens(f"{out}/raw/train.h5")
assert (got == raw).all() and vocab == 300 and dtype == np.uint16
got, _, _ = tokens(f"{out}/llmc/train.h5")
val, _, _ = tokens(f"{out}/llmc/val.h5")
assert (np.concatenate([got, val]) == u).all() and len(val) == 70
got, vocab, dtype = tokens(f"{out}/npy/train.h5")
assert (got == np.load(f"{d}/big.npy")).all() and dtype == np.int32 and vocab == 70000
train = np.concatenate([tokens(p)[0] for p in sorted(glob.glob(f"{out}/shards/train-*.h5"))])
val = np.concatenate([tokens(p)[0] for p in sorted(glob.glob(f"{out}/shards/val-*.h5"))])
assert len(glob.glob(f"{out}/shards/train-*.h5")) == 6, glob.glob(f"{out}/shards/*")
assert (train == np.concatenate([raw[:900], u[:630]])).all()
assert (val == np.concatenate([raw[900:], u[630:]])).all()
x, y = np.load(f"{d}/x.npy").astype(np.float32), np.load(f"{d}/y.npy")
parts = sorted(glob.glob(f"{out}/cls/train-*.h5")) + sorted(glob.glob(f"{out}/cls/val-*.h5"))
xs, ys = [], []
for p in parts:
    with h5py.File(p) as f:
        xs.append(f["inputs"][:]); ys.append(f["labels"][:])
        assert f["labels"].attrs["num_classes"] == y.max() + 1
assert len(parts) == 3 and (np.concatenate(xs) == x).all() and (np.concatenate(ys) == y).all()
with h5py.File(f"{out}/reg/train.h5") as f:
    assert (f["inputs"][:] == x).all() and (f["targets"][:] == np.load(f"{d}/t.npy")).all()
print("round trips exact")
PY
# The converted files train (a language model on the sharded tokens).
expect_exit 0 "$TMP/train.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" \
  --set "data.train=$TMP/shards/train-*.h5" --set "data.val=$TMP/shards/val-*.h5" \
  --set model.vocab_size=300 --set model.seq_len=16 --set run.max_steps=3 --set data.batch_size=4 \
  --set "run.dir=$TMP/run" --set eval.every_steps=0

# Bad inputs: exit 3, the byte offset and what was expected.
expect_exit 3 "$TMP/e-odd.txt" "$HPCTRAIN_BIN" prepare tokens "$in/odd.bin" --vocab 300 --out "$TMP/e1"
expect_grep "odd.bin' is truncated: 1999 bytes is not a whole number of uint16 tokens .* at byte offset 1998" "$TMP/e-odd.txt"
expect_exit 3 "$TMP/e-magic.txt" "$HPCTRAIN_BIN" prepare tokens "$in/magic.bin" --format llmc --vocab 300 --out "$TMP/e2"
expect_grep "byte offset 0 holds 12345, expected llm.c's magic number 20240520" "$TMP/e-magic.txt"
# --format auto (the default) must not read a damaged llm.c header as 512 raw tokens.
expect_exit 3 "$TMP/e-magic-auto.txt" "$HPCTRAIN_BIN" prepare tokens "$in/magic.bin" --vocab 300 --out "$TMP/e7"
expect_grep "magic.bin': byte offset 0 holds 12345, expected llm.c's magic number 20240520, but byte offsets 4 and 8 \(version 1, 700 tokens\) describe an llm.c .bin file of exactly this size" "$TMP/e-magic-auto.txt"
# A FIFO as input ends at once (it is never opened), whatever the format.
mkfifo "$in/fifo.bin"
for format in auto raw llmc npy; do
  expect_exit 3 "$TMP/e-fifo-$format.txt" timeout 20 "$HPCTRAIN_BIN" prepare tokens "$in/fifo.bin" \
    --format "$format" --vocab 300 --out "$TMP/e8"
  expect_grep "token file '$in/fifo.bin' is not a regular file" "$TMP/e-fifo-$format.txt"
done
expect_exit 3 "$TMP/e-short.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare tokens "$in/short.bin" --vocab 300 --out "$TMP/e3"
expect_grep "short.bin' is truncated: its header promises 800 uint16 values .* the file ends at byte offset 2424" "$TMP/e-short.txt"
[[ $(grep -c "is truncated" "$TMP/e-short.txt") -eq 1 ]] || fail "the error is not printed once"
expect_exit 3 "$TMP/e-dtype.txt" "$HPCTRAIN_BIN" prepare tokens "$in/float_tokens.npy" --vocab 300 --out "$TMP/e4"
expect_grep "float_tokens.npy': .*float32, expected integer token ids" "$TMP/e-dtype.txt"
expect_exit 3 "$TMP/e-vocab.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare tokens "$in/vocab.bin" --vocab 300 \
  --out "$TMP/e5" --shard-size 100
expect_grep "token id 400 at byte offset 246 \(token 123\) is outside the vocabulary \[0, 300\)" "$TMP/e-vocab.txt"
expect_exit 3 "$TMP/e-x.txt" "$HPCTRAIN_BIN" prepare numpy --inputs "$in/y.npy" --labels "$in/y.npy" --out "$TMP/e6"
expect_grep "dtype int32 .*expected uint8, float32 or float64" "$TMP/e-x.txt"
for d in e1 e2 e3 e4 e6 e7 e8; do
  [[ -z $(ls -A "$TMP/$d" 2>/dev/null) ]] || fail "$d: a refused conversion left files: $(ls "$TMP/$d")"
done

# kill -9 in the middle of a conversion: no file under the final name.
"$PY" -c "import numpy as np; np.zeros(60_000_000, np.uint16).tofile('$in/huge.bin')"
"$HPCTRAIN_BIN" prepare tokens "$in/huge.bin" --vocab 300 --out "$TMP/killed" >"$TMP/kill.txt" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  compgen -G "$TMP/killed/train.h5.tmp.*" >/dev/null && break
  sleep 0.02
done
kill -9 "$pid"
wait "$pid" 2>/dev/null
compgen -G "$TMP/killed/train.h5.tmp.*" >/dev/null || echo "note: the temporary file was not seen before the kill"
[[ ! -e $TMP/killed/train.h5 ]] || fail "kill -9 left $TMP/killed/train.h5"
finish
