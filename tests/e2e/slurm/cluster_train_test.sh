#!/usr/bin/env bash
# Training across two nodes of a real two-node Slurm (scripts/slurm-sandbox.sh --nodes 2) gives bitwise the
# same metrics and final checkpoint as on one node with the same world size: fmnist on 2 nodes x
# 2 ranks under srun (the cross-node traffic on OpenMPI's TCP transport, which the test shows from
# OpenMPI's own report) and under mpirun through the cluster's launcher agent, against 1 node x 4
# ranks.
source "$(dirname "$0")/../lib.sh"
source "$(dirname "$0")/cluster_lib.sh"
cluster_up
data=$HPCTRAIN_TEST_DATA/fashion-mnist
train=("$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/tiny-mlp.yaml"
  --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set run.max_steps=40
  --set data.batch_size=16 --set eval.every_steps=20 --set eval.max_samples=1000)

# 1 node x 4 ranks (--overcommit: 4 ranks on the node's 2 CPUs): the reference.
expect_exit 0 "$TMP/one-node.txt" "${CSRUN[@]}" -N 1 -n 4 -O -w n1 --mpi=pmix "${train[@]}" \
  --set "run.dir=$TMP/one-node" || finish
expect_grep "on dp=4 x tp=1" "$TMP/one-node.txt"

# 2 nodes x 2 ranks under srun. OpenMPI reports each TCP connection it makes (btl_base_verbose).
OMPI_MCA_btl_base_verbose=100 expect_exit 0 "$TMP/two-nodes.txt" "${CSRUN[@]}" -N 2 -n 4 \
  --mpi=pmix "${train[@]}" --set "run.dir=$TMP/two-nodes"
# 2 nodes x 2 ranks under mpirun, started through the launcher agent instead of ssh.
# shellcheck disable=SC2086  # HPCTRAIN_MPIEXEC holds mpirun and its flags
expect_exit 0 "$TMP/mpirun.txt" timeout 120 $HPCTRAIN_MPIEXEC --mca plm_rsh_agent \
  "$HPCTRAIN_CLUSTER_AGENT" -H n1:2,n2:2 -np 4 "${train[@]}" --set "run.dir=$TMP/mpirun"

# Cross-node traffic went over TCP between the nodes' addresses (n1 is 10.200.0.2, n2 10.200.0.3);
# ranks on one node never connected over TCP (they use shared memory).
if ! grep -Eq "^\[n1:[0-9]+\] btl:tcp: now connected to 10\.200\.0\.3," "$TMP/two-nodes.txt" &&
  ! grep -Eq "^\[n2:[0-9]+\] btl:tcp: now connected to 10\.200\.0\.2," "$TMP/two-nodes.txt"; then
  fail "OpenMPI reported no TCP connection from one node to the other"
  grep -i "tcp" "$TMP/two-nodes.txt" | head -10 | sed 's/^/    | /' >&2
fi
if grep -Eq "^\[n1:[0-9]+\] btl:tcp: now connected to 10\.200\.0\.2,|^\[n2:[0-9]+\] btl:tcp: now connected to 10\.200\.0\.3," "$TMP/two-nodes.txt"; then
  fail "ranks on the same node connected over TCP"
fi
echo "OpenMPI's TCP connections: $(grep -Eo "^\[n[12]:[0-9]+\] btl:tcp: now connected to [0-9.]+" "$TMP/two-nodes.txt" |
  sed -E 's/^\[(n[12]):[0-9]+\] btl:tcp: now connected to /\1->/' | sort | uniq -c | tr -s ' \n' ' ')"


# same_run A B: the same metrics (every train and eval record, timing fields aside) and bitwise
# the same final checkpoint.
same_run() {
  $PY - "$1" "$2" <<'PY' || fail "$2: metrics differ from $1"
import json, sys
# Measurements of the machine (timings, rates derived from them, the resource monitor) differ by run.
timing = {"samples_per_s", "step_time", "data_wait", "comm_time", "time", "seconds", "wall_s",
          "model_flops_per_s", "tokens_per_s", "mfu", "resources"}
def records(run):
    out = []
    for line in open(f"{run}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("type") in ("train", "eval"):
            out.append({k: v for k, v in r.items() if k not in timing and not k.endswith(("_s", "_seconds"))})
    return out
a, b = records(sys.argv[1]), records(sys.argv[2])
assert len(a) == len(b) and len(a) >= 4, (len(a), len(b))
for x, y in zip(a, b):
    assert x == y, f"{x} != {y}"
print(f"{sys.argv[2]}: {len(a)} records equal to {sys.argv[1]}")
PY
  "$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py" "$1" "$2" ||
    fail "$2: final checkpoint differs from $1"
}
same_run "$TMP/one-node" "$TMP/two-nodes"
same_run "$TMP/one-node" "$TMP/mpirun"
finish
