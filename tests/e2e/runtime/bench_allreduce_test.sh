#!/usr/bin/env bash
# bench allreduce prints one row per size with consistent bandwidth arithmetic, text and JSON.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # its commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

expect_exit 0 "$TMP/bench.json" mpirun_np 2 "$HPCTRAIN_BIN" bench allreduce --min-bytes 4K \
  --max-bytes 64K --iters 3 --rounds 1 --json
$PY - "$TMP/bench.json" <<'PY' || fail "bench JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["backend"] == "mpi" and j["ranks"] == 2, j
sizes = [r["bytes"] for r in j["rows"]]
assert sizes == [4096, 8192, 16384, 32768, 65536], sizes
for r in j["rows"]:
    algbw = r["bytes"] / (r["time_us"] * 1e-6) / 1e9
    assert abs(algbw - r["algbw_gbs"]) < 1e-6 * max(1, algbw), r
    assert abs(r["busbw_gbs"] - r["algbw_gbs"] * 2 * (2 - 1) / 2) < 1e-9, r
    assert r["baseline_time_us"] > 0 and r["ratio"] > 0, r
PY

expect_exit 0 "$TMP/bench.txt" mpirun_np 2 "$HPCTRAIN_BIN" bench allreduce --min-bytes 1K \
  --max-bytes 2K --iters 2 --rounds 1 --dtype bfloat16 --op avg
expect_grep "busbw" "$TMP/bench.txt"
expect_grep "^ +2048 +1024 " "$TMP/bench.txt"
finish
