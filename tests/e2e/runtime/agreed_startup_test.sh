#!/usr/bin/env bash
# Checks that every rank makes alike end in the startup agreement (issue 44, item 4): a bad
# parallel section, a grid that does not fit the world and a plugin that does not load print one
# error line, from rank 0, and every rank exits with the code by itself: no MPI_ABORT box, no
# launcher help lines, and no neighbour reporting a rank that exited with its announced code as
# lost. Each case at 2 and 4 ranks. Nothing here reads data: the checks come first.
source "$(dirname "$0")/../lib.sh"
configs=$HPCTRAIN_SOURCE_DIR/configs
fork_server_start mpi

# one_line CASE LOG: exactly one error line, from rank 0, no MPI_ABORT box (with its help lines)
# and no false loss, nor a stop line from a rank the launcher ended after a faster rank exited
# (it exits with the agreed code, silently). OpenMPI's own two-line note that a process exited non-zero ("Primary job
# terminated normally, but 1 process returned a non-zero exit code") follows every failed job,
# config typos included, and is not hpctrain's to remove.
one_line() {
  local n
  n=$(grep -c "error:" "$2")
  ((n == 1)) || fail "$1: $n error lines, expected 1: $(cat "$2")"
  if grep -qiE "MPI_ABORT|ORTE_ERROR|You may or may not see output|lost rank|lost contact|ended by the launcher|received outside the training step loop|unexpected failure" "$2"; then
    fail "$1: launcher noise or a false loss: $(cat "$2")"
  fi
}

# NAME|CONFIG|OVERRIDES (space-separated)|what the message says
cases=(
  "zero3|tiny-mlp.yaml|parallel.shard=zero3|parallel.shard = 'zero3': must be one of none, optimizer, gradients, full"
  "virtual|tiny-mlp.yaml|parallel.pp_virtual=4|parallel.pp_virtual = '4': is 4 but only parallel.pp_schedule: interleaved runs several chunks per rank"
  "float16|tiny-mlp.yaml|parallel.shard=full parallel.param_dtype=float16|parallel.param_dtype = 'float16': must be one of float32, bfloat16"
  "group3|tiny-mlp.yaml|parallel.shard=full parallel.shard_group=3|parallel.shard_group = 3 does not divide the [24] ranks of the data-parallel group"
  "ppfull|gpt-tiny.yaml|parallel.pp=2 parallel.shard=full|parallel.shard = 'full': is full but parallel.pp is 2"
  "grid|tiny-mlp.yaml|parallel.tp=3|world size [24] is not divisible by parallel.tp = 3"
)
for np in 2 4; do
  for spec in "${cases[@]}"; do
    IFS='|' read -r name config overrides message <<<"$spec"
    sets=()
    for o in $overrides; do sets+=(--set "$o"); done
    log=$TMP/$name-np$np.txt
    expect_exit 2 "$log" mpirun_np "$np" "$HPCTRAIN_BIN" train -c "$configs/$config" "${sets[@]}" \
      --set "run.dir=$TMP/run-$name-$np"
    expect_grep "error: $message" "$log"
    one_line "$name at $np ranks" "$log"
    echo "--- $name, $np ranks:"
    cat "$log"
  done
  # The grid of commands without a config, and a plugin every rank fails to load.
  expect_exit 2 "$TMP/env-np$np.txt" mpirun_np "$np" "$HPCTRAIN_BIN" env --tp 3
  expect_grep "error: world size $np is not divisible by parallel.tp = 3" "$TMP/env-np$np.txt"
  one_line "env --tp 3 at $np ranks" "$TMP/env-np$np.txt"
  expect_exit 2 "$TMP/plugin-np$np.txt" mpirun_np "$np" "$HPCTRAIN_BIN" --plugin "$TMP/none.so" env
  expect_grep "error: --plugin" "$TMP/plugin-np$np.txt"
  one_line "a missing plugin at $np ranks" "$TMP/plugin-np$np.txt"
done
finish
