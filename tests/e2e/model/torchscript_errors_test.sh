#!/usr/bin/env bash
# TorchScript models that cannot be trained: each a clear message and exit 2 before anything is
# written (no config.yaml, no checkpoint), on 1 and 2 ranks; a traced module whose dropout and
# BatchNorm modes are frozen trains with a warning.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
here=$(dirname "$0")
data=$HPCTRAIN_TEST_DATA/fashion-mnist
models=$TMP/models
expect_exit 0 "$TMP/make_models.log" "$PY" "$here/make_models.py" "$models" || finish
printf 'not a module\n' >"$TMP/text.pt"

# bad_case NAME PATTERN ARGS...: training fails with exit 2, PATTERN in the log, run dir empty.
bad_case() {
  local name=$1 pattern=$2
  shift 2
  for np in 1 2; do
    local run=$TMP/run-$name-np$np
    expect_exit 2 "$TMP/$name-np$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" train \
      -c "$here/torchscript.yaml" --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" \
      --set data.batch_size=16 --set "run.dir=$run" "$@"
    expect_grep "$pattern" "$TMP/$name-np$np.log"
    [[ ! -e $run ]] || fail "$name (np=$np): $run was created: $(ls -A "$run")"
  done
}

bad_case missing "model.file = .?$TMP/nope.pt.?: no such file" --set "model.file=$TMP/nope.pt"
bad_case no_file "model.file.*needs the module file.*torch.jit.script" --set model.task=classification
bad_case text "model.file = $TMP/text.pt is not a TorchScript module .*torch.jit.script\(model\).save" \
  --set "model.file=$TMP/text.pt"
bad_case signature "forward is forward\(.*self, Tensor x, Tensor y\) -> Tensor but hpctrain calls forward\(inputs: Tensor\) -> Tensor" \
  --set "model.file=$models/two_inputs.pt"
bad_case shape "forward\(inputs \[1, 1, 28, 28\] Float\) from data.train returned \[1\] Float, but a classification model returns logits \[1, C\] with C >= 10 classes" \
  --set "model.file=$models/wrong_shape.pt"
bad_case task "model.task = .?segmentation.?: must be one of classification, language_model, regression" \
  --set "model.file=$models/cnn.pt" --set model.task=segmentation
# Data of another task is a data error (exit 3), also before anything is written.
expect_exit 3 "$TMP/task_data.log" "$HPCTRAIN_BIN" train -c "$here/torchscript.yaml" \
  --set "model.file=$models/cnn.pt" --set model.task=regression --set "data.train=$data/train.h5" \
  --set "run.dir=$TMP/run-task-data"
expect_grep "holds classification data, but the model is a regression model" "$TMP/task_data.log"
[[ ! -e $TMP/run-task-data ]] || fail "task/data mismatch: run dir was created"
# Tensor parallelism: the grid is dp=1 x tp=2 on 2 ranks.
expect_exit 2 "$TMP/tp.log" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$here/torchscript.yaml" \
  --set "model.file=$models/cnn.pt" --set "data.train=$data/train.h5" --set parallel.tp=2 \
  --set "run.dir=$TMP/run-tp"
expect_grep "torchscript model is data parallel only .*parallel.tp = 2: set parallel.tp=1" "$TMP/tp.log"
[[ ! -e $TMP/run-tp ]] || fail "tp: run dir was created"

# A traced module trains, with a warning naming the frozen operations.
expect_exit 0 "$TMP/traced.log" "$HPCTRAIN_BIN" train -c "$here/torchscript.yaml" \
  --set "model.file=$models/traced.pt" --set "data.train=$data/train.h5" --set run.max_steps=2 \
  --set "run.dir=$TMP/run-traced"
expect_grep "warning.*forward has aten::batch_norm\(training=True\), .*aten::dropout\(training=True\) fixed at a constant \(a traced module\?\)" "$TMP/traced.log"
# A scripted one does not warn.
expect_exit 0 "$TMP/scripted.log" "$HPCTRAIN_BIN" train -c "$here/torchscript.yaml" \
  --set "model.file=$models/cnn.pt" --set "data.train=$data/train.h5" --set run.max_steps=2 \
  --set "run.dir=$TMP/run-scripted"
if grep -q "fixed at a constant" "$TMP/scripted.log"; then fail "a scripted module was warned about"; fi
finish
