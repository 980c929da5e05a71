#!/usr/bin/env bash
# TorchScript models end to end. Two modules defined and scripted in Python by this test (a CNN
# with BatchNorm and dropout, a residual MLP with LayerNorm) train in hpctrain on 1, 2 and 4
# ranks for 20 steps; the loss at every step equals PyTorch training the same scripted module
# on the same batches (tests/e2e/model/torch_reference.py: the sample order of docs/DATA.md,
# per-rank slices, averaged gradients, Adam) within 1e-5. The residual MLP has no batch
# statistics, so 2 and 4 ranks also equal 1 rank with the same global batch; the CNN's
# BatchNorm normalises each rank's slice, so it is compared with PyTorch run the same way.
# The checkpoints load into the Python module with load_state_dict(strict=True) and equal what
# PyTorch reached (BatchNorm statistics: dp rank 0's).
source "$(dirname "$0")/../lib.sh"
here=$(dirname "$0")
data=$HPCTRAIN_TEST_DATA/fashion-mnist
models=$TMP/models
expect_exit 0 "$TMP/make_models.log" "$PY" "$here/make_models.py" "$models" || finish

for model in resmlp cnn; do
  for np in 1 2 4; do
    batch=$((32 / np))
    run=$TMP/$model-np$np
    expect_exit 0 "$TMP/$model-np$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" train \
      -c "$here/torchscript.yaml" --set "model.file=$models/$model.pt" \
      --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" \
      --set data.batch_size=$batch --set "run.dir=$run" || continue
    expect_grep "training torchscript" "$TMP/$model-np$np.log"
    expect_exit 0 "$TMP/ref-$model-np$np.log" "$PY" "$here/torch_reference.py" "$models/$model.pt" \
      "$data/train.h5" --ranks "$np" --batch "$batch" --steps 20 --seed 7 --lr 0.001 \
      --out "$TMP/ref-$model-np$np.json" --state "$TMP/ref-$model-np$np.pt" || continue
    expect_exit 0 "$TMP/cmp-$model-np$np.log" "$PY" "$here/compare_losses.py" "$run/metrics.jsonl" \
      "$TMP/ref-$model-np$np.json" --tol 1e-5 --steps 20
    expect_exit 0 "$TMP/state-$model-np$np.log" "$PY" "$here/check_state_dict.py" "$run" \
      "$models/$model.pt" "$TMP/ref-$model-np$np.pt" --tol 1e-5
    expect_grep "strict=True\): [0-9]+ tensors, 0 differ" "$TMP/state-$model-np$np.log"
    if ((np > 1)) && [[ $model == resmlp ]]; then
      expect_exit 0 "$TMP/cmp-$model-np$np-np1.log" "$PY" "$here/compare_losses.py" \
        "$run/metrics.jsonl" "$TMP/$model-np1/metrics.jsonl" --tol 1e-5 --steps 20
    fi
  done
done
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
