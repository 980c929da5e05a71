#!/usr/bin/env bash
# Regression data end to end: h5py writes a synthetic dataset (a known linear map 4 -> 2 plus
# noise); `hpctrain inspect data` checks it; a TorchScript linear module trains on it on 2 ranks
# with the mean-squared-error loss, and the learned weights approach the true ones; evaluation
# reports MSE and MAE, the same offline on 1 and 2 ranks as in training. A file with integer
# targets is refused (exit 3).
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
here=$(dirname "$0")
models=$TMP/models
expect_exit 0 "$TMP/make_models.log" "$PY" "$here/make_models.py" "$models" || finish
"$PY" - "$TMP" <<'PY' || fail "writing the regression files"
import sys, h5py, numpy as np
rng = np.random.default_rng(3)
w = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0]])
b = np.array([0.5, -1.0])
for name, n in (("train", 4096), ("val", 1000)):
    x = rng.standard_normal((n, 4))
    y = x @ w.T + b + 0.01 * rng.standard_normal((n, 2))
    with h5py.File(f"{sys.argv[1]}/{name}.h5", "w") as f:
        f["inputs"] = x.astype("float32")
        f["targets"] = y.astype("float32")
with h5py.File(f"{sys.argv[1]}/int_targets.h5", "w") as f:
    f["inputs"] = np.zeros((8, 4), "float32")
    f["targets"] = np.zeros((8, 2), "int64")
PY
expect_exit 0 "$TMP/inspect.log" "$HPCTRAIN_BIN" inspect data "$TMP/train.h5"
expect_grep "^kind +regression" "$TMP/inspect.log"
expect_grep "^samples +4096 x \(4,\) float32 inputs, targets \(2,\) float32" "$TMP/inspect.log"
expect_exit 3 "$TMP/inspect_bad.log" "$HPCTRAIN_BIN" inspect data "$TMP/int_targets.h5"
expect_grep "dataset /targets: expected dtype float32 .*found int64" "$TMP/inspect_bad.log"

run=$TMP/run
expect_exit 0 "$TMP/train.log" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$here/torchscript.yaml" \
  --set "model.file=$models/linear.pt" --set model.task=regression \
  --set "data.train=$TMP/train.h5" --set "data.val=$TMP/val.h5" --set data.batch_size=32 \
  --set run.epochs=10 --set run.max_steps=400 --set optim.lr=0.02 --set logging.every_steps=50 \
  --set eval.every_steps=200 --set "run.dir=$run" || finish
expect_grep "eval at step 400: mse [0-9.e-]+, mae [0-9.e-]+ \(1000 samples" "$TMP/train.log"
"$PY" - "$run" <<'PY' || fail "the learned map is not the true one"
import os, sys, json, numpy as np
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint
s = load_checkpoint.load_state_dict(sys.argv[1])
w = np.array([[1.0, -2.0, 0.5, 3.0], [0.0, 1.0, -1.0, 2.0]])
b = np.array([0.5, -1.0])
dw = np.abs(s["map.weight"].numpy() - w).max()
db = np.abs(s["map.bias"].numpy() - b).max()
print("weight error", dw, "bias error", db)
assert dw < 0.02 and db < 0.02, (s, dw, db)
last = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"type":"eval"' in l][-1]
assert last["mse"] == last["loss"] and last["mse"] < 1e-3 and 0 < last["mae"] < 0.03, last
PY
for np in 1 2; do
  expect_exit 0 "$TMP/eval$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" eval --checkpoint "$run" \
    --results "$TMP/eval$np" || continue
  "$PY" - "$run/metrics.jsonl" "$TMP/eval$np" <<'PY' || fail "offline regression eval on $np ranks"
import glob, json, sys
periodic = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
[path] = glob.glob(sys.argv[2] + "/**/step_00000400.json", recursive=True)
offline = json.load(open(path))
for key in ("mse", "mae", "samples"):
    assert offline[key] == periodic[key], (key, offline[key], periodic[key])
PY
done
finish
