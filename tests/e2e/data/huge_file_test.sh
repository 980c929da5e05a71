#!/usr/bin/env bash
# A token file of 10^9 samples (h5py, chunks left unallocated) opens, reports its sampler memory
# (a keyed order: no per-sample memory), and trains 10 steps at 2 ranks with a peak resident
# memory per rank within 64 MiB of the same run on a 10^5-sample file (a held order of 10^9
# samples would take 8 GB per rank). `inspect data` states the reader's and the sampler's memory.
# A classification file that declares samples of 10^12 bytes each (issue 32, item 5) is refused
# before anything is allocated by `inspect data` and `train` (exit 3, with the figure), where it
# used to pass inspection and die with "out of memory".
source "$(dirname "$0")/../lib.sh"
"$PY" - "$TMP" <<'PY' || fail "writing the files failed"
import sys
import h5py, numpy as np
for name, n in (("huge.h5", 10**9 + 1), ("small.h5", 10**5 + 1)):
    with h5py.File(f"{sys.argv[1]}/{name}", "w") as f:
        t = f.create_dataset("tokens", shape=(n,), dtype=np.uint16, chunks=(65536,))
        t[:65536] = (np.arange(65536) % 256).astype(np.uint16)  # the rest stays unallocated
        if n < 10**6:
            t[:] = (np.arange(n) % 256).astype(np.uint16)
        t.attrs["vocab_size"] = 256
PY
run=(-c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set data.val= --set model.seq_len=1
  --set model.layers=1 --set model.width=32 --set model.heads=2 --set run.max_steps=10
  --set data.batch_size=4 --set eval.every_steps=0 --set eval.at_end=false --set logging.every_steps=5
  --set checkpoint.every_steps=0)
for f in small huge; do
  expect_exit 0 "$TMP/$f.txt" mpirun_np 2 "$HPCTRAIN_BIN" train "${run[@]}" \
    --set "data.train=$TMP/$f.h5" --set "run.dir=$TMP/$f"
done
expect_grep "data.train: 1000000000 samples in 1 file; sample order keyed, sampler memory 64 B per rank" "$TMP/huge.txt"
expect_grep "data.train: 100000 samples in 1 file; sample order held, sampler memory 781.3 KiB per rank" "$TMP/small.txt"
"$PY" - "$TMP/small" "$TMP/huge" <<'PY' || fail "the 10^9-sample run takes more memory"
import json, sys
peaks = [json.load(open(f"{d}/ledger.json"))["peak_rss_bytes_per_rank"] for d in sys.argv[1:]]
rise = [(h - s) / 2**20 for s, h in zip(*peaks)]
print("peak RSS per rank (MiB): 10^5 samples", [p / 2**20 for p in peaks[0]],
      "10^9 samples", [p / 2**20 for p in peaks[1]], "difference", rise)
assert len(rise) == 2 and all(r < 64 for r in rise), rise
PY
expect_exit 0 "$TMP/inspect-huge.txt" timeout 60 "$HPCTRAIN_BIN" inspect data "$TMP/huge.h5" --seq-len 1 --samples 2
expect_grep "^memory    reader .* per rank at data.batch_size 64 \(64 samples x .* x 6 batches \(data.prefetch 4 \+ 2\).*; sampler 512 B per rank \(order keyed\)" "$TMP/inspect-huge.txt"

"$PY" - "$TMP" <<'PY' || fail "writing the wide file failed"
import sys
import h5py, numpy as np
with h5py.File(f"{sys.argv[1]}/wide.h5", "w") as f:
    f.create_dataset("inputs", shape=(100, 10**12), dtype=np.uint8, chunks=(1, 2**20))
    f.create_dataset("labels", data=np.zeros(100, np.int64)).attrs["num_classes"] = 2
PY
expect_exit 3 "$TMP/inspect-wide.txt" timeout 60 "$HPCTRAIN_BIN" inspect data "$TMP/wide.h5"
expect_grep "data: reading .*wide.h5 \(100 samples of \(1000000000000,\) uint8\) takes [0-9.]+ PiB per rank \(64 samples x 4.5 TiB x 6 batches .*more than half of this machine's memory" "$TMP/inspect-wide.txt"
if grep -q "^valid" "$TMP/inspect-wide.txt"; then fail "inspect data called the wide file valid"; fi
expect_exit 3 "$TMP/train-wide.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml" --set "data.train=$TMP/wide.h5" --set data.val= \
  --set data.batch_size=2 --set "run.dir=$TMP/wide"
expect_grep "data.train: reading .*wide.h5 .* takes [0-9.]+ TiB per rank \(2 samples x 4.5 TiB x 4 batches \(data.prefetch 2 \+ 2\)" "$TMP/train-wide.txt"
n=$(grep -c "error:" "$TMP/train-wide.txt")
[[ $n == 1 ]] || fail "train on the wide file: $n error lines at 2 ranks, not 1"
if grep -qiE "out of memory|bad_alloc" "$TMP/train-wide.txt"; then fail "the wide file was allocated"; fi
finish
