#!/usr/bin/env bash
# bench data runs on 1 and 2 ranks, prints consistent numbers, and the batches it reads are the
# ones the Python reference of the sampler (scripts/data_order.py) computes. No timing checks.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

$PY "$(dirname "$0")/make_test_files.py" "$TMP/files" >/dev/null || fail "make_test_files.py"
file=$TMP/files/h5py_classification.h5

expect_exit 0 "$TMP/np2.json" mpirun_np 2 "$HPCTRAIN_BIN" bench data --file "$file" --batch 4 \
  --steps 9 --warmup 3 --prefetch 2 --compute-ms 0.5 --seed 17 --json --indices-out "$TMP/idx.bin"
$PY - "$TMP/np2.json" "$TMP/idx.bin" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' || fail "bench JSON / indices"
import json, sys
import numpy as np
j = json.load(open(sys.argv[1]))
sys.path.insert(0, sys.argv[3])
import data_order
assert j["world_size"] == 2 and j["dp"] == 2 and j["global_batch"] == 8, j
assert j["num_samples"] == 50 and j["sample_bytes"] == 16 and j["chunk_shape"] == [8, 1, 4, 4], j
assert [r["prefetch"] for r in j["rows"]] == [-1, 0, 2], j["rows"]
for r in j["rows"]:
    assert r["seconds"] > 0 and r["wait_ms_per_step"] >= 0, r
    assert abs(r["samples_per_s"] - 9 * 8 / r["seconds"]) < 1e-6 * r["samples_per_s"], r
    assert abs(r["mb_per_s"] - r["samples_per_s"] * 16 / 1e6) < 1e-6 * r["mb_per_s"], r
got = np.fromfile(sys.argv[2], dtype="<i8").reshape(12, 8).tolist()
want = data_order.global_batches(50, 8, 17, True, 12)
assert got == want, (got, want)
print("bench data ok")
PY

expect_exit 0 "$TMP/np1.txt" "$HPCTRAIN_BIN" bench data --file "$file" --batch 5 --steps 4 --warmup 1
expect_grep "^# 1 ranks \(dp=1 x tp=1\), batch 5 per rank \(global 5\)" "$TMP/np1.txt"
expect_grep "^reader \(no prefetch, no compute\) +[0-9]+ +[0-9.]+ +[0-9.]+$" "$TMP/np1.txt"
expect_grep "^loop: prefetch 4, compute 2 ms/step" "$TMP/np1.txt"
finish
