#!/usr/bin/env bash
# hpctrain on a real two-node Slurm (scripts/slurm-sandbox.sh --nodes 2): srun -N 2 places two ranks on each
# node, with distinct host names and local ranks 0 and 1 on each; under block placement each
# tensor-parallel group lies inside a node, with -m cyclic the groups span the nodes and hpctrain
# warns; mpirun across the nodes through the cluster's launcher agent places ranks the same way.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/cluster_lib.sh"
cluster_up

# check_placement FILE HOSTS LOCAL_RANKS WITHIN LAUNCHER: the env --json of FILE shows these
# per-rank hosts and local ranks ("n1 n1 n2 n2", "0 1 0 1"), tp groups within nodes or not.
check_placement() {
  $PY - "$@" <<'PY'
import json, sys
path, hosts, local, within, launcher = sys.argv[1:]
text = open(path).read()
j = json.loads(text[text.index("{"):text.rindex("}") + 1])
got_hosts = " ".join(r["host"] for r in j["ranks"])
got_local = " ".join(str(r["local_rank"]) for r in j["ranks"])
assert j["launcher"] == launcher, j["launcher"]
assert j["world_size"] == 4 and j["nodes"] == 2, (j["world_size"], j["nodes"])
assert got_hosts == hosts, f"hosts {got_hosts!r}, expected {hosts!r}"
assert got_local == local, f"local ranks {got_local!r}, expected {local!r}"
assert j["grid"]["tp"] == 2 and j["grid"]["dp"] == 2, j["grid"]
assert str(j["grid"]["tp_groups_within_nodes"]).lower() == within, j["grid"]
assert j["peer_monitor"] == "on", j["peer_monitor"]
print(f"{path}: {j['placement']}, tp groups within nodes: {within}")
PY
}

# Block placement (srun's default): ranks 0,1 on n1 and 2,3 on n2; tp groups {0,1} and {2,3}.
if expect_exit 0 "$TMP/block.json" "${CSRUN[@]}" -N 2 -n 4 --mpi=pmix "$HPCTRAIN_BIN" env --tp 2 --json; then
  check_placement "$TMP/block.json" "n1 n1 n2 n2" "0 1 0 1" true srun || fail "block placement"
  if grep -q "span nodes" "$TMP/block.json"; then fail "block placement: a warning about tp groups spanning nodes"; fi
fi

# Cyclic: ranks alternate between the nodes, so each tp group {0,1} spans n1 and n2.
if expect_exit 0 "$TMP/cyclic.json" "${CSRUN[@]}" -N 2 -n 4 -m cyclic --mpi=pmix "$HPCTRAIN_BIN" env --tp 2 --json; then
  check_placement "$TMP/cyclic.json" "n1 n2 n1 n2" "0 0 1 1" false srun || fail "cyclic placement"
  expect_grep "warning: tensor-parallel groups span nodes \(dp=2 x tp=2\)" "$TMP/cyclic.json"
fi

# mpirun without ssh: the agent enters each node's namespaces to start OpenMPI's daemons there.
# shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
if expect_exit 0 "$TMP/mpirun.json" timeout 90 $HPCTRAIN_MPIEXEC --mca plm_rsh_agent "$HPCTRAIN_CLUSTER_AGENT" \
  -H n1:2,n2:2 -np 4 "$HPCTRAIN_BIN" env --tp 2 --json; then
  check_placement "$TMP/mpirun.json" "n1 n1 n2 n2" "0 1 0 1" true mpirun || fail "mpirun placement"
fi
finish
