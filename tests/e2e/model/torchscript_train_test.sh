#!/usr/bin/env bash
# TorchScript models end to end. Two modules defined and scripted in Python by this test (a CNN
# with BatchNorm and dropout, a residual MLP with LayerNorm) train in hpctrain on 1, 2 and 4
# ranks for 20 steps, compared with PyTorch training the same scripted module on the same batches
# (tests/e2e/model/torch_reference.py: the sample order of docs/DATA.md, per-rank slices,
# averaged gradients):
# - with the reference doing hpctrain's Adam arithmetic (--adam hpctrain), every loss and every
#   tensor of the checkpoint is equal bit for bit (tolerance 0; 1e-5 on 4 ranks, whose all-reduce
#   adds the ranks' gradients in another order than the reference): forward and backward run the same
#   LibTorch kernels on one thread; also with oneDNN held to its SSE4.1 kernels, the path that made
#   a 1e-5 tolerance fail on another x86-64 machine (docs/MODELS.md);
# - with torch.optim.Adam, the losses agree within 1e-5 (its other roundings stay at ~1e-7 in the
#   loss; in the weights they can grow to ~1e-4, so the weights are compared bitwise above).
# The residual MLP has no batch statistics, so 2 and 4 ranks also equal 1 rank with the same
# global batch within 1e-5 (the gradient mean is summed in another order); the CNN's BatchNorm
# normalises each rank's slice, so it is compared with PyTorch run the same way. The checkpoints
# load into the Python module with load_state_dict(strict=True) (BatchNorm statistics: dp rank
# 0's). A fully sharded run (parallel.shard: full) of the residual MLP on 2 ranks is compared the
# same way.
source "$(dirname "$0")/../lib.sh"
here=$(dirname "$0")
data=$HPCTRAIN_TEST_DATA/fashion-mnist
models=$TMP/models
expect_exit 0 "$TMP/make_models.log" "$PY" "$here/make_models.py" "$models" || finish

fork_server_start mpi
export HPCTRAIN_THREADS=1 # the reference runs on one thread: the same reduction orders
case_sets=() # more --set options of the hpctrain run (below: full sharding)
# reference_case NAME MODEL NP ENV...: trains MODEL on NP ranks (ENV: extra environment for both
# hpctrain and the reference), then compares with both references.
reference_case() {
  local name=$1 model=$2 np=$3
  shift 3
  local batch=$((32 / np)) run=$TMP/$name
  # 4 ranks sum the gradients in the all-reduce's order, the reference in rank order: ~1e-7 apart.
  local tol=0
  ((np > 2)) && tol=1e-5
  # Its ranks are forks of the test's loaded hpctrain, but where ENV sets what LibTorch's
  # libraries may read once (ONEDNN_MAX_CPU_ISA): processes of their own there.
  local launch=(mpirun_np "$np")
  (($# > 0)) && launch=(env "$@" $HPCTRAIN_MPIEXEC -np "$np")
  expect_exit 0 "$TMP/$name.log" "${launch[@]}" "$HPCTRAIN_BIN" train \
    -c "$here/torchscript.yaml" --set "model.file=$models/$model.pt" \
    --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" \
    --set data.batch_size=$batch --set "run.dir=$run" "${case_sets[@]}" || return 0
  expect_grep "training torchscript" "$TMP/$name.log"
  # Both references (hpctrain's Adam arithmetic, torch.optim.Adam) in one process.
  expect_exit 0 "$TMP/ref-$name.log" env "$@" "$PY" "$here/torch_reference.py" \
    "$models/$model.pt" "$data/train.h5" --ranks "$np" --batch "$batch" --steps 20 --seed 7 \
    --lr 0.001 --adam hpctrain,torch --out "$TMP/ref-$name-{adam}.json" \
    --state "$TMP/ref-$name-{adam}.pt" || return 0
  expect_exit 0 "$TMP/cmp-$name.log" "$PY" "$here/compare_losses.py" "$run/metrics.jsonl" \
    "$TMP/ref-$name-hpctrain.json" --tol $tol --steps 20
  expect_exit 0 "$TMP/state-$name.log" "$PY" "$here/check_state_dict.py" "$run" \
    "$models/$model.pt" "$TMP/ref-$name-hpctrain.pt" --tol $tol
  expect_grep "strict=True\): [0-9]+ tensors, 0 differ" "$TMP/state-$name.log"
  expect_exit 0 "$TMP/cmp-$name-torch.log" "$PY" "$here/compare_losses.py" "$run/metrics.jsonl" \
    "$TMP/ref-$name-torch.json" --tol 1e-5 --steps 20
}
# Fully sharded (parallel.shard: full): a TorchScript module names no units, so it is gathered
# whole for forward and backward, which a warning says; the results are those of PyTorch, bit for
# bit, and its checkpoint loads into the Python module like any other.
case_sets=(--set parallel.shard=full)
reference_case resmlp-np2-full resmlp 2
expect_grep "names no units .*parallel.shard: full gathers the whole model" "$TMP/resmlp-np2-full.log"
case_sets=()
for model in resmlp cnn; do
  for np in 1 2 4; do
    reference_case "$model-np$np" $model $np
    if ((np > 1)) && [[ $model == resmlp ]]; then
      expect_exit 0 "$TMP/cmp-$model-np$np-np1.log" "$PY" "$here/compare_losses.py" \
        "$TMP/$model-np$np/metrics.jsonl" "$TMP/$model-np1/metrics.jsonl" --tol 1e-5 --steps 20
    fi
  done
done
reference_case cnn-np1-sse41 cnn 1 ONEDNN_MAX_CPU_ISA=SSE41
# The CNN's checkpoint holds its BatchNorm buffers under their state_dict names.
expect_exit 0 "$TMP/inspect.log" "$HPCTRAIN_BIN" inspect checkpoint "$TMP/cnn-np2"
expect_grep "model/bn1.running_mean +float32 +\(4,\)" "$TMP/inspect.log"
expect_grep "model/bn2.num_batches_tracked +int64" "$TMP/inspect.log"
# The ledger counts FLOPs with the profiler: 2 x (conv1 + conv2 + fc) multiply-adds per sample.
"$PY" - "$TMP/cnn-np1/ledger.json" <<'PY' || fail "ledger FLOPs of the cnn"
import json, sys
f = json.load(open(sys.argv[1]))["flops"]
want = 2 * (1 * 9 * 4 * 28 * 28 + 4 * 9 * 8 * 14 * 14 + 8 * 7 * 7 * 10)
assert f["source"].startswith("profiler"), f
assert f["forward_per_sample"] == want, (f, want)
PY
finish
