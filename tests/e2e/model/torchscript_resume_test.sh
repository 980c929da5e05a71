#!/usr/bin/env bash
# A TorchScript run (the CNN with BatchNorm and dropout) stopped by a stop request and resumed
# ends bit-identical to an uninterrupted run on 1 and 2 ranks: parameters, optimizer state,
# BatchNorm buffers, and the dropout generator state. Offline `hpctrain eval` of its checkpoint
# reproduces the periodic evaluation, and `hpctrain export --format torchscript` writes a module
# that torch.jit.load serves with the trained weights and the same outputs.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
here=$(dirname "$0")
data=$HPCTRAIN_TEST_DATA/fashion-mnist
models=$TMP/models
expect_exit 0 "$TMP/make_models.log" "$PY" "$here/make_models.py" "$models" || finish
compare=("$PY" "$HPCTRAIN_SOURCE_DIR/tests/e2e/train/compare_checkpoints.py")
common=(-c "$here/torchscript.yaml" --set "model.file=$models/cnn.pt" --set "data.train=$data/train.h5"
  --set "data.val=$data/test.h5" --set logging.every_steps=5)

for np in 1 2; do
  batch=$((32 / np))
  expect_exit 0 "$TMP/full$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" train "${common[@]}" \
    --set data.batch_size=$batch --set "run.dir=$TMP/full$np" || continue
  stop=$((3 + RANDOM % 14))
  expect_exit 75 "$TMP/stop$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" train "${common[@]}" \
    --set data.batch_size=$batch --set "run.dir=$TMP/part$np" --set debug.stop_step=$stop
  expect_grep "stopped after step $stop: SIGUSR1 received" "$TMP/stop$np.log"
  expect_exit 0 "$TMP/resume$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" train "${common[@]}" \
    --set data.batch_size=$batch --set "run.dir=$TMP/part$np"
  expect_grep "resumed from .*step_$(printf %08d $stop) at step $stop" "$TMP/resume$np.log"
  "${compare[@]}" "$TMP/full$np" "$TMP/part$np" || fail "np=$np: resumed run (stop at $stop) differs"
done

# Offline evaluation of the 2-rank run's last checkpoint, on 1 and 2 ranks, equals the periodic
# evaluation of step 20 (which used dp rank 0's BatchNorm statistics, the ones saved).
ckpt=$TMP/full2/checkpoints/step_00000020
for np in 1 2; do
  expect_exit 0 "$TMP/eval$np.log" mpirun_np "$np" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" \
    --results "$TMP/eval$np" || continue
  "$PY" - "$TMP/full2/metrics.jsonl" "$TMP/eval$np" <<'PY' || fail "offline eval on $np ranks differs"
import glob, json, sys
periodic = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
[path] = glob.glob(sys.argv[2] + "/**/step_00000020.json", recursive=True)
offline = json.load(open(path))
for key in ("loss", "accuracy", "samples"):
    assert offline[key] == periodic[key], (key, offline[key], periodic[key])
print("offline eval equals periodic eval:", offline["loss"], offline["accuracy"])
PY
done

# Export: the trained module for torch.jit.load; its outputs give hpctrain's evaluation.
expect_exit 0 "$TMP/export.log" "$HPCTRAIN_BIN" export "$ckpt" --format torchscript \
  --out "$TMP/exported.pt"
expect_grep "wrote $TMP/exported.pt" "$TMP/export.log"
"$PY" - "$TMP/exported.pt" "$models/cnn.pt" "$ckpt" "$data/test.h5" "$TMP/eval1" <<'PY' || fail "exported module"
import glob, json, os, sys
import h5py, numpy as np, torch, torch.nn.functional as F
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint
torch.set_num_threads(1)
exported = torch.jit.load(sys.argv[1])
assert not exported.training, "exported in training mode"
original = torch.jit.load(sys.argv[2])
state = load_checkpoint.load_state_dict(sys.argv[3])
for name, value in exported.state_dict().items():
    assert torch.equal(value, state[name]), name
assert not torch.equal(original.state_dict()["fc.weight"], state["fc.weight"]), "weights not trained"
with h5py.File(sys.argv[4]) as f:
    x = torch.from_numpy((np.arange(256) / 255.0).astype(np.float32)[f["inputs"][:1000]])
    y = torch.from_numpy(f["labels"][:1000].astype(np.int64))
loss_sum, correct = 0.0, 0
with torch.no_grad():
    for b in range(0, 1000, 250):  # eval.batch_size canonical batches, summed in double
        logits = exported(x[b:b + 250])
        loss_sum += F.cross_entropy(logits, y[b:b + 250], reduction="sum").double().item()
        correct += (logits.argmax(1) == y[b:b + 250]).sum().item()
[path] = glob.glob(sys.argv[5] + "/**/step_00000020.json", recursive=True)
r = json.load(open(path))
assert abs(loss_sum / 1000 - r["loss"]) < 1e-6 and correct / 1000 == r["accuracy"], (loss_sum / 1000, correct, r)
print("exported module reproduces hpctrain eval:", loss_sum / 1000, correct / 1000)
PY
finish
