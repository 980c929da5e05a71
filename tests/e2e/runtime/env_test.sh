#!/usr/bin/env bash
# hpctrain env: single process without a launcher, and 2 ranks under mpirun, text and JSON.
source "$(dirname "$0")/../lib.sh"

expect_exit 0 "$TMP/single.json" "$HPCTRAIN_BIN" env --json
$PY - "$TMP/single.json" <<'PY' || fail "single-process env JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["world_size"] == 1 and j["nodes"] == 1 and j["launcher"] == "none", j
assert j["grid"] == {"dp": 1, "tp": 1, "tp_groups_within_nodes": True}, j["grid"]
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

expect_exit 0 "$TMP/version.txt" "$HPCTRAIN_BIN" --version
expect_grep "^hpctrain [0-9]+\.[0-9]+" "$TMP/version.txt"
expect_exit 2 "$TMP/usage.txt" "$HPCTRAIN_BIN" env --no-such-flag
expect_grep "no-such-flag" "$TMP/usage.txt"
finish
