#!/usr/bin/env bash
# Exports run in ONNX Runtime (docs/EVAL.md, "ONNX Runtime"): the Fashion-MNIST mlp and cnn, a
# tiny byte-level gpt (untied head, and tied to the embedding) and a TorchScript module, each
# trained a few steps, exported with `hpctrain export --format onnx` and run by npm's
# onnxruntime-node (scripts/onnx_runtime.js, a test reference installed by scripts/setup.sh) on the
# samples `hpctrain eval --save-outputs` evaluated: every output within 1e-4 of hpctrain's,
# relative to the largest logit.
source "$(dirname "$0")/../lib.sh"
fork_server_start  # its one-process commands as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
npm_dir=${HPCTRAIN_NPM:-$HPCTRAIN_BUILD_DIR/npm}
[[ -d $npm_dir/node_modules/onnxruntime-node ]] ||
  fail "onnxruntime-node is not installed in $npm_dir: run scripts/setup.sh (it installs the npm test references)"
command -v node >/dev/null || fail "node is missing: apt-get install nodejs (scripts/setup.sh)"
((FAILURES == 0)) || finish
export HPCTRAIN_NPM=$npm_dir

# check NAME ONNX INPUT_KIND DATA N SAVED: runs the ONNX file on the first N samples of DATA in ONNX
# Runtime (image: /inputs scaled to [0, 1]; tokens: windows of /tokens) and compares with SAVED.
check() {
  "$PY" - "$@" <<'PY' || fail "$1: ONNX Runtime does not reproduce hpctrain eval"
import json, os, subprocess, sys
import h5py, numpy as np, onnx, torch
name, onnx_file, kind, data, n, saved, seq = sys.argv[1:8]
n, seq = int(n), int(seq)
with h5py.File(data) as f:
    if kind == "tokens":
        t = f["tokens"][: n * seq + 1].astype(np.int64)
        x = np.stack([t[i * seq:(i + 1) * seq] for i in range(n)])
    else:
        x = (np.arange(256) / 255.0).astype(np.float32)[f["inputs"][:n]]
        # The export's input rank: the mlp reads flat [batch, 784] rows, the cnn images.
        rank = len(onnx.load(onnx_file).graph.input[0].type.tensor_type.shape.dim)
        x = x.reshape(n, -1) if rank == 2 else x
tmp = os.environ["HPCTRAIN_TEST_TMP"]
x.tofile(f"{tmp}/{name}.in")
run = subprocess.run(["node", os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts/onnx_runtime.js"),
                      "--model", onnx_file, "--input", f"{tmp}/{name}.in",
                      "--dtype", "int64" if kind == "tokens" else "float32",
                      "--shape", ",".join(map(str, x.shape)), "--out", f"{tmp}/{name}.out",
                      "--batch", "7"], capture_output=True, text=True)
assert run.returncode == 0, run.stderr
info = json.loads(run.stdout)
ours = torch.load(saved, weights_only=False).numpy()
theirs = np.fromfile(f"{tmp}/{name}.out", dtype=np.float32).reshape(info["output_shape"])
assert theirs.shape == ours.shape, (theirs.shape, ours.shape)
scale = np.abs(ours).max()
err = np.abs(theirs - ours).max() / scale
print(f"{name}: {info['runtime']}, {n} samples {list(x.shape)} -> {list(theirs.shape)}, "
      f"max |ort - hpctrain| / max |logit| = {err:.2e} (largest logit {scale:.3g})")
assert err <= 1e-4, err
PY
}

# --- mlp and cnn on Fashion-MNIST ---------------------------------------------------------------
for model in mlp cnn; do
  run=$TMP/$model
  expect_exit 0 "$TMP/train_$model.txt" "$HPCTRAIN_BIN" train \
    -c "$HPCTRAIN_SOURCE_DIR/configs/fmnist-$model.yaml" --set "data.train=$data/train.h5" \
    --set "data.val=$data/test.h5" --set "run.dir=$run" --set run.max_steps=20 \
    --set eval.every_steps=0 --set eval.at_end=false --set checkpoint.at_end=true \
    --set logging.progress=plain || continue
  expect_exit 0 "$TMP/export_$model.txt" "$HPCTRAIN_BIN" export "$run" --format onnx \
    --out "$TMP/$model.onnx" || continue
  expect_exit 0 "$TMP/eval_$model.txt" "$HPCTRAIN_BIN" eval --checkpoint "$run" --max-samples 100 \
    --batch-size 50 --save-outputs "$TMP/$model.pt" --results "$TMP/eval_$model" || continue
  check "$model" "$TMP/$model.onnx" image "$data/test.h5" 100 "$TMP/$model.pt" 0
done

# --- a TorchScript module (the cnn of tests/e2e/model/make_models.py) ---------------------------
"$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/model/make_models.py" "$TMP/ts" >/dev/null ||
  fail "make_models.py failed"
if [[ -f $TMP/ts/cnn.pt ]]; then
  expect_exit 0 "$TMP/train_ts.txt" "$HPCTRAIN_BIN" train \
    -c "$HPCTRAIN_SOURCE_DIR/tests/e2e/model/torchscript.yaml" --set "model.file=$TMP/ts/cnn.pt" \
    --set "data.train=$data/train.h5" --set "data.val=$data/test.h5" --set "run.dir=$TMP/tsrun" \
    --set run.max_steps=10 --set eval.at_end=false --set checkpoint.at_end=true &&
    expect_exit 0 "$TMP/export_ts.txt" "$HPCTRAIN_BIN" export "$TMP/tsrun" --format onnx \
      --out "$TMP/ts.onnx" &&
    expect_exit 0 "$TMP/eval_ts.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/tsrun" \
      --max-samples 100 --batch-size 50 --save-outputs "$TMP/ts.pt" --results "$TMP/eval_ts" &&
    check torchscript "$TMP/ts.onnx" image "$data/test.h5" 100 "$TMP/ts.pt" 0
else
  fail "make_models.py wrote no cnn.pt"
fi

# --- a tiny gpt on fortunes ---------------------------------------------------------------------
fortunes=/usr/share/games/fortunes
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  "$fortunes/wisdom" --out "$TMP/text" --val-fraction 0.1 || finish
# Untied (its own head) and tied (configs/gpt-tiny.yaml's default: the head is the embedding).
for tied in false true; do
  gpt=gpt_tied_$tied
  expect_exit 0 "$TMP/train_$gpt.txt" "$HPCTRAIN_BIN" train \
    -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set "data.train=$TMP/text/train.h5" \
    --set "data.val=$TMP/text/val.h5" --set "run.dir=$TMP/$gpt" --set run.max_steps=20 \
    --set data.batch_size=8 --set model.layers=2 --set model.width=32 --set model.heads=2 \
    --set model.seq_len=32 --set model.tied_embeddings=$tied --set eval.every_steps=0 \
    --set eval.at_end=false --set checkpoint.at_end=true --set logging.progress=plain || continue
  expect_exit 0 "$TMP/export_$gpt.txt" "$HPCTRAIN_BIN" export "$TMP/$gpt" --format onnx \
    --out "$TMP/$gpt.onnx" || continue
  expect_exit 0 "$TMP/eval_$gpt.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/$gpt" \
    --max-samples 20 --batch-size 10 --save-outputs "$TMP/$gpt.pt" --results "$TMP/eval_$gpt" ||
    continue
  check "$gpt" "$TMP/$gpt.onnx" tokens "$TMP/text/val.h5" 20 "$TMP/$gpt.pt" 32
done
finish
