#!/usr/bin/env bash
# hpctrain under srun on the local one-machine Slurm: PMIx starts the ranks directly (no mpirun),
# hpctrain sees the srun launcher, and --tp builds the dp x tp grid.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/slurm_lib.sh"
slurm_up

expect_exit 0 "$TMP/np2.json" "${SRUN[@]}" -n 2 --mpi=pmix "$HPCTRAIN_BIN" env --json || finish
$PY - "$TMP/np2.json" <<'PY' || fail "srun -n 2 env JSON"
import json, sys
text = open(sys.argv[1]).read()
assert text.count('"hpctrain_version"') == 1, "only rank 0 prints"
j = json.loads(text[text.index("{"):text.rindex("}") + 1])  # srun may add lines on stderr
assert j["launcher"] == "srun", j
assert j["world_size"] == 2 and j["nodes"] == 1 and j["ranks_per_node"] == "2", j
assert j["grid"]["dp"] == 2 and j["grid"]["tp"] == 1, j["grid"]
PY

# --overcommit: 4 ranks on a 2-core node (Slurm otherwise queues the job for 4 CPUs forever).
expect_exit 0 "$TMP/np4.json" "${SRUN[@]}" -n 4 --overcommit --mpi=pmix "$HPCTRAIN_BIN" env --tp 2 --json || finish
$PY - "$TMP/np4.json" <<'PY' || fail "srun -n 4 env --tp 2 JSON"
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index("{"):text.rindex("}") + 1])
assert j["launcher"] == "srun" and j["world_size"] == 4 and j["nodes"] == 1, j
assert j["grid"]["dp"] == 2 and j["grid"]["tp"] == 2, j["grid"]
PY

expect_exit 0 "$TMP/text.txt" "${SRUN[@]}" -n 2 --mpi=pmix "$HPCTRAIN_BIN" env
expect_grep "launcher +srun" "$TMP/text.txt"
expect_grep "world_size +2" "$TMP/text.txt"
finish
