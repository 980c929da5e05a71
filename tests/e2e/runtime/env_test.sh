#!/usr/bin/env bash
# hpctrain env: single process without a launcher, and 2 ranks under mpirun, text and JSON.
source "$(dirname "$0")/../lib.sh"

expect_exit 0 "$TMP/single.json" "$HPCTRAIN_BIN" env --json
$PY - "$TMP/single.json" <<'PY' || fail "single-process env JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world_size"] == 1 and j["nodes"] == 1 and j["launcher"] == "none", j
assert j["grid"] == {"dp": 1, "pp": 1, "tp": 1, "tp_groups_within_nodes": True}, j["grid"]
assert j["mpi_thread_level"] == "MPI_THREAD_MULTIPLE", j
assert j["libtorch_version"].count(".") >= 1 and j["hdf5_parallel"] is True, j
PY

expect_exit 0 "$TMP/two.json" mpirun_np 2 "$HPCTRAIN_BIN" env --json --tp 2
$PY - "$TMP/two.json" <<'PY' || fail "2-rank env JSON"
import json, sys
text = open(sys.argv[1]).read()
assert text.count('"hpctrain_version"') == 1, "only rank 0 prints"
j = json.loads(text)
assert j["world_size"] == 2 and j["ranks_per_node"] == "2" and j["launcher"] == "mpirun", j
assert j["grid"]["dp"] == 1 and j["grid"]["tp"] == 2, j
assert j["threads_per_rank"] == "1" and j["threads_source_rank0"] == "HPCTRAIN_THREADS", j
PY

expect_exit 0 "$TMP/text.txt" mpirun_np 2 "$HPCTRAIN_BIN" env --threads 2
expect_grep "world_size +2" "$TMP/text.txt"
expect_grep "threads_per_rank +2" "$TMP/text.txt"
expect_grep "mpi_library +Open MPI" "$TMP/text.txt"

# dp x pp x tp: tp innermost, then pp, then dp (docs/PIPELINE.md, "Grid").
expect_exit 0 "$TMP/grid.json" mpirun_np 4 "$HPCTRAIN_BIN" env --json --pp 2
$PY - "$TMP/grid.json" <<'PY' || fail "4-rank pp=2 env JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["grid"]["dp"] == 2 and j["grid"]["pp"] == 2 and j["grid"]["tp"] == 1, j["grid"]
got = [(r["dp_rank"], r["pp_rank"], r["tp_rank"]) for r in j["ranks"]]
assert got == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)], got
PY
expect_exit 0 "$TMP/grid.txt" mpirun_np 4 "$HPCTRAIN_BIN" env --tp 2 --pp 2
expect_grep "^grid dp=1 x pp=2 x tp=2" "$TMP/grid.txt"
expect_grep "rank 3 +dp 0  pp 1  tp 1" "$TMP/grid.txt"
expect_exit 2 "$TMP/grid_bad.txt" mpirun_np 2 "$HPCTRAIN_BIN" env --tp 2 --pp 2
expect_grep "world size 2 is not divisible by parallel.pp x parallel.tp = 2 x 2 = 4" "$TMP/grid_bad.txt"
expect_grep "mpirun -np 4" "$TMP/grid_bad.txt"

expect_exit 0 "$TMP/version.txt" "$HPCTRAIN_BIN" --version
expect_grep "^hpctrain [0-9]+\.[0-9]+" "$TMP/version.txt"
expect_exit 2 "$TMP/usage.txt" "$HPCTRAIN_BIN" env --no-such-flag
expect_grep "no-such-flag" "$TMP/usage.txt"
finish
