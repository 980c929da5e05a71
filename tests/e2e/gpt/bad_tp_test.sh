#!/usr/bin/env bash
# Bad tensor-parallel sizes for the GPT: a head count tp does not divide, and a world size tp does
# not divide. Every rank finds the problem before any collective; the job prints the message and
# exits 2 without hanging (expect_exit's guard).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

# A small valid token file, so that the run gets as far as building the model.
$PY - "$TMP/tokens.h5" <<'PY' || fail "writing the token file"
import sys
import h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    t = f.create_dataset("tokens", data=(np.arange(4 * 128 + 1) % 256).astype(np.uint16))
    t.attrs["vocab_size"] = 256
PY
config=$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml
common=(--set data.train="$TMP/tokens.h5" --set data.val="$TMP/tokens.h5" --set data.batch_size=2
  --set run.dir="$TMP/run")

expect_exit 2 "$TMP/heads.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$config" "${common[@]}" \
  --set parallel.tp=2 --set model.heads=3
expect_grep "error: .*model.heads = '?3'?: must be divisible by the tensor-parallel size tp = 2" \
  "$TMP/heads.txt"

expect_exit 2 "$TMP/mlp.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$config" "${common[@]}" \
  --set parallel.tp=2 --set model.width=36 --set model.heads=2 --set model.mlp_ratio=0.75
expect_grep "error: .*model.mlp_ratio = .*27 MLP features must be divisible by the tensor-parallel size tp = 2" \
  "$TMP/mlp.txt"

expect_exit 2 "$TMP/world.txt" mpirun_np 3 "$HPCTRAIN_BIN" train -c "$config" "${common[@]}" \
  --set parallel.tp=2
expect_grep "error: world size 3 is not divisible by parallel.tp = 2" "$TMP/world.txt"
finish
