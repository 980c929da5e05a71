#!/usr/bin/env bash
# After training (docs/EVAL.md "Compressed evaluation", docs/MODELS.md "Export"): the Fashion-MNIST
# MLP 784-256-128-100-10 trained briefly on 2 ranks, then
#  - export --format pytorch / torchscript / onnx, each loaded in Python and compared with
#    hpctrain's evaluation of the same 100 samples (float32 within 1e-5; ONNX structurally);
#  - compress --prune (masks equal torch.nn.utils.prune's) and --quantize int8 (int8 weights equal
#    torch.quantization.quantize_dynamic's; its accuracy within 0.003 of hpctrain's int8 eval,
#    its per-sample logits within the int8 tolerance of hpctrain's (eval --save-outputs));
#  - the compressed checkpoint verifies, loads in h5py, evaluates alike at 1, 2 and 3 ranks
#    beside float32, and is detected when corrupted (exit 4);
#  - bad input: exit 2 with the reason, nothing written.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
data=$HPCTRAIN_TEST_DATA/fashion-mnist
run=$TMP/run
expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/fmnist-mlp.yaml" --set "data.train=$data/train.h5" \
  --set "data.val=$data/test.h5" --set "run.dir=$run" --set run.max_steps=300 \
  --set eval.every_steps=300 --set eval.max_samples=2000 --set checkpoint.every_steps=300 \
  --set logging.every_steps=100 || finish
ckpt=$run/checkpoints/step_00000300
[[ -d $ckpt ]] || { fail "no checkpoint at step 300"; finish; }

# --- export: the three formats, against hpctrain eval of the first 100 samples -----------------
expect_exit 0 "$TMP/eval100.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --max-samples 100 \
  --batch-size 100 --results "$TMP/eval100"
for fmt in pytorch torchscript onnx; do
  expect_exit 0 "$TMP/export_$fmt.txt" "$HPCTRAIN_BIN" export "$ckpt" --format $fmt \
    --out "$TMP/model.$fmt"
  expect_grep "wrote $TMP/model.$fmt" "$TMP/export_$fmt.txt"
done
expect_grep "cost: training to this checkpoint [0-9.e+-]+ rank-s" "$TMP/eval100.txt"
expect_grep "run it with ONNX Runtime" "$TMP/export_onnx.txt"
"$PY" - "$TMP" "$ckpt" "$data/test.h5" <<'PY' || fail "exports do not reproduce hpctrain eval"
import glob, json, os, sys
import h5py, numpy as np, onnx, onnx.numpy_helper, torch, torch.nn.functional as F
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint
tmp, ckpt, test = sys.argv[1:]
torch.set_num_threads(1)
state = load_checkpoint.load_state_dict(ckpt)
exported = torch.load(f"{tmp}/model.pytorch", weights_only=False)
assert isinstance(exported, dict) and sorted(exported) == sorted(state), (list(exported), list(state))
assert list(exported)[:2] == ["fc1.weight", "fc1.bias"], list(exported)  # the model's order
for k in state:
    assert torch.equal(exported[k], state[k]), k
with h5py.File(test) as f:
    x = torch.from_numpy((np.arange(256) / 255.0).astype(np.float32)[f["inputs"][:100]])
    y = torch.from_numpy(f["labels"][:100].astype(np.int64))
[path] = glob.glob(f"{tmp}/eval100/**/step_00000300*.json", recursive=True)
r = json.load(open(path))

def score(logits):
    loss = F.cross_entropy(logits, y, reduction="sum").double().item() / 100
    return loss, (logits.argmax(1) == y).sum().item() / 100

def mlp(sd, x):  # the state_dict by hand: hpctrain's mlp forward
    x = x.flatten(1)
    for i in range(1, 5):
        x = F.linear(x, sd[f"fc{i}.weight"], sd[f"fc{i}.bias"])
        x = F.relu(x) if i < 4 else x
    return x
with torch.no_grad():
    for what, logits in (("pytorch", mlp(exported, x)),
                         ("torchscript", torch.jit.load(f"{tmp}/model.torchscript")(x))):
        loss, acc = score(logits)
        assert abs(loss - r["loss"]) < 1e-5 and acc == r["accuracy"], (what, loss, acc, r)
        print(what, "export reproduces hpctrain eval on 100 samples:", loss, acc)
model = onnx.load(f"{tmp}/model.onnx")
onnx.checker.check_model(model)
ops = [n.op_type for n in model.graph.node]
assert ops.count("Gemm") + ops.count("MatMul") == 4 and ops.count("Relu") == 3, ops
assert [i.name for i in model.graph.input] == ["inputs"], model.graph.input
weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
assert sorted(weights) == sorted(state), (sorted(weights), sorted(state))
for k, v in state.items():
    assert np.array_equal(weights[k], v.numpy()), k
# What the checkpoint cost: training FLOPs 3 x forward x samples consumed (300 steps x 2 ranks x
# 32), rank-seconds from metrics.jsonl's train records, against this evaluation's.
forward = sum(2 * a * b + b for a, b in ((784, 256), (256, 128), (128, 100), (100, 10)))
cost = r["cost"]
assert cost["training"]["flops"] == 3 * forward * 300 * 64, cost
assert cost["evaluation"]["flops"] == forward * 100, cost
train = [json.loads(l) for l in open(os.path.dirname(os.path.dirname(ckpt)) + "/metrics.jsonl")]
train = [t for t in train if t["type"] == "train"]
prev, wall = 0, 0.0
for t in train:
    wall += t["step_time"] * (t["step"] - prev); prev = t["step"]
assert prev == 300 and abs(cost["training"]["rank_seconds"] - 2 * wall) < 1e-9 * wall, (cost, wall)
assert abs(cost["evaluation"]["rank_seconds"] - r["eval_seconds"]) < 1e-12, cost
assert abs(cost["ratio"]["flops"] - 3 * 300 * 64 / 100) < 1e-9, cost
[best] = glob.glob(f"{tmp}/eval100/best*.json")
assert json.load(open(best))["cost"] == cost, best
print("cost:", cost["training"]["rank_seconds"], "rank-s to train,", cost["evaluation"]["rank_seconds"], "to evaluate")
print("onnx: checker passes, 4 linear layers, 3 ReLU, the checkpoint's weights as initializers")
PY

# --- compress: pruning at both scopes, int8, int8 + pruning --------------------------------------
expect_exit 0 "$TMP/prune.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/p50" --prune 0.5
expect_grep "fc1 +linear +200704 +0.5" "$TMP/prune.txt"
expect_exit 0 "$TMP/prune_layer.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/p90l" \
  --prune 0.9 --prune-scope layer
expect_exit 0 "$TMP/int8.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/q8" --quantize int8
expect_grep "convolutions stay float32" "$TMP/int8.txt"
expect_exit 0 "$TMP/both.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/q8p50" \
  --quantize int8 --prune 0.5
for d in p50 p90l q8 q8p50; do
  expect_exit 0 "$TMP/verify_$d.txt" "$PY" "$HPCTRAIN_SOURCE_DIR/scripts/load_checkpoint.py" \
    "$TMP/$d" --verify --quiet
done
"$PY" - "$ckpt" "$TMP" <<'PY' || fail "compressed weights differ from PyTorch's pruning/quantization"
import json, os, sys
import h5py, torch, torch.nn as nn
import torch.nn.utils.prune as prune
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint
ckpt, tmp = sys.argv[1:]
sd = load_checkpoint.load_state_dict(ckpt)
names = [f"fc{i}" for i in range(1, 5)]
def linears():
    layers = []
    for n in names:
        w = sd[n + ".weight"]
        l = nn.Linear(w.shape[1], w.shape[0])
        l.weight.data.copy_(w); l.bias.data.copy_(sd[n + ".bias"])
        layers.append(l)
    return layers
def stored(run, name):
    [step] = [s for s in os.listdir(f"{run}/checkpoints") if s.startswith("step_")]
    with h5py.File(f"{run}/checkpoints/{step}/model.h5") as f:   # plain h5py
        return torch.from_numpy(f["/" + name][()])
# Global pruning: one threshold over the four weights, as global_unstructured.
layers = linears()
prune.global_unstructured([(l, "weight") for l in layers], pruning_method=prune.L1Unstructured, amount=0.5)
for n, l in zip(names, layers):
    mine = stored(f"{tmp}/p50", n + ".weight")
    assert torch.equal(mine != 0, l.weight_mask.bool()), n
    assert torch.equal(mine, l.weight.detach()), n
# Per-layer pruning at 0.9, as l1_unstructured.
for n, l in zip(names, linears()):
    prune.l1_unstructured(l, "weight", amount=0.9)
    mine = stored(f"{tmp}/p90l", n + ".weight")
    assert torch.equal(mine != 0, l.weight_mask.bool()), n
print("pruning masks equal torch.nn.utils.prune (global 0.5, per layer 0.9)")
# int8: the weights and scales of quantize_dynamic with per-channel weights.
rec = json.load(open(f"{tmp}/q8/checkpoints/step_00000300/manifest.json"))["trainer_state"]["compression"]
torch.backends.quantized.engine = rec["engine"]
q = quantize_dynamic(nn.Sequential(*linears()), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
assert "model/fc1.weight" not in json.load(open(f"{tmp}/q8/checkpoints/step_00000300/manifest.json"))["tensors"]
with h5py.File(f"{tmp}/q8/checkpoints/step_00000300/int8.h5") as f:
    for i, n in enumerate(names):
        w = q[i].weight()
        assert f[f"/{n}.weight"].dtype == "int8"
        assert torch.equal(torch.from_numpy(f[f"/{n}.weight"][()]), w.int_repr()), n
        assert torch.allclose(torch.from_numpy(f[f"/{n}.weight_scale"][()]).double(),
                              w.q_per_channel_scales(), rtol=0, atol=0), n
print("int8 values and scales equal quantize_dynamic's (engine", rec["engine"] + ")")
PY

# --- compressed evaluation at 1, 2, 3 ranks, beside float32 --------------------------------------
for np in 1 2 3; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/evq8_$np.txt" "${launch[@]}" eval --checkpoint "$TMP/q8" \
    --results "$TMP/evq8_$np"
  expect_grep "compressed \(int8\): float32 accuracy [0-9.]+" "$TMP/evq8_$np.txt"
done
# The int8 logits of every sample, for the comparison with quantize_dynamic below (batches of
# 1000 as there: the activations are quantized per batch).
expect_exit 0 "$TMP/evq8_out.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/q8" --batch-size 1000 \
  --max-samples 2000 --save-outputs "$TMP/q8_logits.pt" --results "$TMP/evq8_out"
expect_grep "wrote the outputs \[2000, 10\] of the evaluated samples to $TMP/q8_logits.pt" \
  "$TMP/evq8_out.txt"
expect_exit 2 "$TMP/bad_outputs.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$TMP/q8" \
  --save-outputs "$TMP/x4.pt"
expect_grep "--save-outputs runs as one process" "$TMP/bad_outputs.txt"
expect_exit 0 "$TMP/fly.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" \
  --quantize int8 --prune 0.5
expect_exit 0 "$TMP/drop.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --prune 0.97 \
  --max-drop 0.001 --results "$TMP/drop"
expect_grep "more than --max-drop 0.001: try --prune-scope layer" "$TMP/drop.txt"
"$PY" - "$ckpt" "$TMP" "$data/test.h5" "$run" <<'PY' || fail "compressed evaluation"
import glob, json, os, sys
import h5py, numpy as np, torch, torch.nn as nn, torch.nn.functional as F
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import load_checkpoint
ckpt, tmp, test, run = sys.argv[1:]
torch.set_num_threads(1)
res = [json.load(open(glob.glob(f"{tmp}/evq8_{n}/**/step_00000300.json", recursive=True)[0])) for n in (1, 2, 3)]
for r in res[1:]:
    for k in ("loss", "accuracy", "samples"):
        assert r[k] == res[0][k], (k, r[k], res[0][k])
c = res[0]["compression"]
assert c["quantize"] == "int8" and c["bytes_after"] < c["bytes_before"] / 3, c
f32 = c["float32"]
assert f32["checkpoint"] == os.path.realpath(ckpt) and f32["samples_per_s"] > 0
# It cost what its source cost: trained on 2 ranks.
forward = sum(2 * a * b + b for a, b in ((784, 256), (256, 128), (128, 100), (100, 10)))
assert res[0]["cost"]["training"]["world_size"] == 2, res[0]["cost"]
assert res[0]["cost"]["training"]["flops"] == 3 * forward * 300 * 64, res[0]["cost"]
assert abs(f32["drop"]["accuracy"] - (f32["accuracy"] - res[0]["accuracy"])) < 1e-12
# The PyTorch reference: quantize_dynamic of the same weights, on the same 2000 samples.
sd = load_checkpoint.load_state_dict(ckpt)
layers = []
for i in range(1, 5):
    w = sd[f"fc{i}.weight"]; l = nn.Linear(w.shape[1], w.shape[0])
    l.weight.data.copy_(w); l.bias.data.copy_(sd[f"fc{i}.bias"]); layers += [l, nn.ReLU()]
torch.backends.quantized.engine = c["engine"]
model = quantize_dynamic(nn.Sequential(nn.Flatten(1), *layers[:-1]), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)
with h5py.File(test) as f:
    x = torch.from_numpy((np.arange(256) / 255.0).astype(np.float32)[f["inputs"][:2000]])
    y = torch.from_numpy(f["labels"][:2000].astype(np.int64))
with torch.no_grad():
    theirs = torch.cat([model(x[b:b + 1000]) for b in (0, 1000)])
correct = (theirs.argmax(1) == y).sum().item()
assert abs(correct / 2000 - res[0]["accuracy"]) <= 0.003, (correct / 2000, res[0]["accuracy"])
print("PyTorch quantize_dynamic accuracy", correct / 2000, "hpctrain int8", res[0]["accuracy"],
      "float32", f32["accuracy"])
# Per sample: hpctrain's int8 logits against quantize_dynamic's. INT8_TOL: the same int8 weights
# and activation ranges, so the two differ only where float rounding (bias, accumulation order of
# the kernels) moves a hidden activation across an int8 rounding boundary: one activation step
# (scale = batch range / 127, reduce_range) times a weight row, about 1e-3 of the logit range.
mine = torch.load(f"{tmp}/q8_logits.pt", weights_only=False)
assert mine.shape == (2000, 10) and mine.dtype == torch.float32, (mine.shape, mine.dtype)
INT8_TOL = 1e-3 * theirs.abs().max().item()
diff = (mine - theirs).abs().max().item()
assert diff <= INT8_TOL, (diff, INT8_TOL)
assert (mine.argmax(1) == theirs.argmax(1)).float().mean().item() >= 0.997
print("per-sample int8 logits: max |hpctrain - quantize_dynamic|", diff, "<=", INT8_TOL)
# In one go (--quantize int8 --prune 0.5): results.jsonl of the run holds it beside float32.
lines = [json.loads(l) for l in open(f"{run}/eval/results.jsonl")]
fly = [l for l in lines if "compression" in l]
assert len(fly) == 1 and fly[0]["key"]["tag"] == "int8-prune0.5", fly
assert fly[0]["compression"]["float32"]["accuracy"] >= 0.7, fly[0]
assert 0.49 < fly[0]["compression"]["sparsity"] < 0.51
PY

# --- plan: the evaluation side of a deployment, from the int8/float32 speed measured on the run --
expect_exit 2 "$TMP/plan_none.txt" "$HPCTRAIN_BIN" plan --calibrate "$run" --compress int8 \
  --eval-samples 10000 --evals 1
expect_grep "has no int8 result with its float32 evaluation" "$TMP/plan_none.txt"
expect_exit 0 "$TMP/ev_int8.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --quantize int8
expect_exit 0 "$TMP/plan.json" "$HPCTRAIN_BIN" plan --calibrate "$run" --compress int8 \
  --eval-samples 10000 --evals 1 --json
expect_exit 0 "$TMP/plan.txt" "$HPCTRAIN_BIN" plan --calibrate "$run" --compress int8 \
  --eval-samples 10000 --evals 1
expect_grep "int8 evaluation wall time per pass" "$TMP/plan.txt"
"$PY" - "$TMP/plan.json" "$run" <<'PY' || fail "plan --compress int8"
import json, sys
plan = json.load(open(sys.argv[1]))
lines = [json.loads(l) for l in open(sys.argv[2] + "/eval/results.jsonl")]
[measured] = [l for l in lines if l["key"]["tag"] == "int8"]
speedup = measured["compression"]["float32"]["speedup"]
c = plan["compress_int8"]
assert c["speedup"] == speedup and c["step"] == 300, (c, speedup)
assert abs(c["eval_wall_s"] * speedup - plan["time"]["eval_wall_s"]) < 1e-9 * plan["time"]["eval_wall_s"], (c, plan["time"])
print("plan: int8 evaluation", c["eval_wall_s"], "s against float32", plan["time"]["eval_wall_s"], "s")
PY

# --- damage and bad input ------------------------------------------------------------------------
cp -r "$TMP/q8" "$TMP/q8bad"
printf 'X' | dd of="$TMP/q8bad/checkpoints/step_00000300/int8.h5" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_exit 4 "$TMP/bad_eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/q8bad/checkpoints/step_00000300"
expect_grep "int8.h5" "$TMP/bad_eval.txt"
expect_exit 2 "$TMP/bad_prune.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/x1" --prune 1.5
expect_grep "--prune 1.5: the sparsity is the fraction of weights set to zero, in \(0, 1\)" "$TMP/bad_prune.txt"
expect_exit 2 "$TMP/bad_q.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/x2" --quantize int4
expect_grep "--quantize int4: hpctrain quantizes linear layers to int8 only" "$TMP/bad_q.txt"
expect_exit 2 "$TMP/bad_twice.txt" "$HPCTRAIN_BIN" compress "$TMP/q8" --out "$TMP/x3" --prune 0.5
expect_grep "is already compressed \(int8\)" "$TMP/bad_twice.txt"
expect_exit 2 "$TMP/bad_evtwice.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/q8" --prune 0.5
expect_exit 2 "$TMP/bad_ev.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --prune 1.5
for d in x1 x2 x3 x4.pt; do [[ ! -e $TMP/$d ]] || fail "$d written after bad input"; done
finish
