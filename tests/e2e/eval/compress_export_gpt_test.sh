#!/usr/bin/env bash
# After training, the GPT (docs/EVAL.md "Compressed evaluation", docs/MODELS.md "Export"): a tiny
# byte-level GPT (2 layers, width 32, context 32, untied output head) trained a few steps with
# tensor parallelism (dp=1 x tp=2) on Debian's fortunes, then
#  - export --format torchscript / onnx through scripts/gpt_torch_reference.py's Gpt: the
#    TorchScript module reproduces hpctrain's evaluation of the same 100 sequences (loss within
#    1e-5, the same token accuracy); the ONNX file passes onnx.checker and has the model's
#    structure and weights (e2e_onnx_runtime runs it in ONNX Runtime);
#  - a --seq-len longer than the context is refused (exit 2, nothing written);
#  - compress --quantize int8 (qkv, attention projection, MLP and the output head; int8 values
#    and scales equal torch.quantization.quantize_dynamic's) and --prune (masks equal
#    torch.nn.utils.prune.l1_unstructured's), both from the tp=2 checkpoint gathered to its
#    logical tensors;
#  - compressed evaluation at 1 and 2 ranks beside float32 (loss, perplexity, token accuracy
#    drop); its int8 loss equals a PyTorch forward of the reference Gpt with the same int8
#    weights through quantized::linear_dynamic; a loss increase past --max-drop (relative for a
#    language model) warns with what to try.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

fortunes=/usr/share/games/fortunes
inputs=("$fortunes/science" "$fortunes/linux" "$fortunes/wisdom")
for f in "${inputs[@]}"; do [[ -f $f ]] || fail "$f missing: apt-get install fortunes (scripts/setup.sh)"; done
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
  --out "$TMP/text" --val-fraction 0.05 || finish
run=$TMP/run
expect_exit 0 "$TMP/train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train \
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny-tp2.yaml" \
  --set data.train="$TMP/text/train.h5" --set data.val="$TMP/text/val.h5" \
  --set run.dir="$run" --set run.max_steps=40 --set data.batch_size=8 \
  --set model.layers=2 --set model.width=32 --set model.heads=2 --set model.seq_len=32 \
  --set model.tied_embeddings=false --set schedule.warmup_steps=5 --set optim.lr=0.005 \
  --set eval.every_steps=0 --set eval.at_end=false --set checkpoint.at_end=true \
  --set logging.every_steps=20 --set logging.progress=plain || finish
expect_grep "on dp=1 x tp=2" "$TMP/train.txt"
ckpt=$run/checkpoints/step_00000040
[[ -d $ckpt ]] || { fail "no checkpoint at step 40"; finish; }

# --- export: torchscript and onnx against hpctrain eval of the first 100 sequences -------------
expect_exit 0 "$TMP/eval100.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --max-samples 100 \
  --batch-size 100 --results "$TMP/eval100"
for fmt in torchscript onnx; do
  expect_exit 0 "$TMP/export_$fmt.txt" "$HPCTRAIN_BIN" export "$ckpt" --format $fmt \
    --out "$TMP/gpt.$fmt"
  expect_grep "wrote $TMP/gpt.$fmt" "$TMP/export_$fmt.txt"
done
expect_grep "int64 tokens \[batch, 32\] -> logits.*run it with ONNX Runtime" \
  "$TMP/export_onnx.txt"
expect_exit 2 "$TMP/bad_seq.txt" "$HPCTRAIN_BIN" export "$ckpt" --format onnx --seq-len 33 \
  --out "$TMP/long.onnx"
expect_grep "--seq-len 33: this gpt reads at most model.seq_len = 32 tokens" "$TMP/bad_seq.txt"
expect_exit 2 "$TMP/bad_seq_pytorch.txt" "$HPCTRAIN_BIN" export "$ckpt" --format pytorch \
  --seq-len 16 --out "$TMP/sd.pt"
for f in long.onnx long.onnx.tmp long.onnx.state.tmp sd.pt; do
  [[ ! -e $TMP/$f ]] || fail "$f written after a refused export"
done

# --- compress the tp=2 checkpoint: int8 (every linear layer) and pruning per layer ---------------
expect_exit 0 "$TMP/int8.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/q8" --quantize int8
for layer in blocks.0.attn.qkv blocks.0.attn.proj blocks.1.mlp.fc blocks.1.mlp.proj lm_head; do
  expect_grep "^ *$layer +linear +[0-9]+ +0.0000 +yes" "$TMP/int8.txt"
done
expect_exit 0 "$TMP/prune.txt" "$HPCTRAIN_BIN" compress "$ckpt" --out "$TMP/p50" --prune 0.5 \
  --prune-scope layer
# An int8 checkpoint is not exported (its float32 source is): exit 2 naming the source.
expect_exit 2 "$TMP/export_q8.txt" "$HPCTRAIN_BIN" export "$TMP/q8" --format pytorch \
  --out "$TMP/q8.pt"
expect_grep "is an int8 checkpoint \(hpctrain compress --quantize int8\): export the float32 checkpoint it came from \($ckpt\)" \
  "$TMP/export_q8.txt"
[[ ! -e $TMP/q8.pt ]] || fail "q8.pt written after a refused export"
for d in q8 p50; do
  expect_exit 0 "$TMP/verify_$d.txt" "$PY" "$HPCTRAIN_SOURCE_DIR/scripts/load_checkpoint.py" \
    "$TMP/$d" --verify --quiet
done
for np in 1 2; do
  launch=("$HPCTRAIN_BIN")
  ((np > 1)) && launch=(mpirun_np "$np" "$HPCTRAIN_BIN")
  expect_exit 0 "$TMP/evq8_$np.txt" "${launch[@]}" eval --checkpoint "$TMP/q8" \
    --max-samples 100 --batch-size 50 --results "$TMP/evq8_$np"
  expect_grep "compressed \(int8\): float32 loss [0-9.]+, perplexity [0-9.]+, token accuracy [0-9.]+; loss drop -?[0-9.]+ \(-?[0-9.]+% relative\)" "$TMP/evq8_$np.txt"
done
expect_exit 0 "$TMP/drop.txt" "$HPCTRAIN_BIN" eval --checkpoint "$ckpt" --prune 0.9 \
  --max-samples 100 --max-drop 0.01 --results "$TMP/drop"
expect_grep "compression cost [0-9.]+% of the loss .*more than --max-drop 0.01: try --prune-scope layer" \
  "$TMP/drop.txt"
expect_exit 2 "$TMP/bad_tp.txt" mpirun_np 2 "$HPCTRAIN_BIN" eval --checkpoint "$TMP/q8" --tp 2
expect_grep "compressed evaluation runs on the whole logical model: use --tp 1" "$TMP/bad_tp.txt"

"$PY" - "$TMP" "$ckpt" "$TMP/text/val.h5" <<'PY' || fail "GPT export / compression against PyTorch"
import glob, json, os, sys, warnings
import h5py, numpy as np, onnx, onnx.numpy_helper, torch, torch.nn as nn, torch.nn.functional as F
import torch.nn.utils.prune as prune
from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "scripts"))
import gpt_torch_reference as ref
import load_checkpoint
sys.path.insert(0, os.path.join(os.environ["HPCTRAIN_SOURCE_DIR"], "tests", "e2e", "eval"))
import lm_eval_data
tmp, ckpt, val = sys.argv[1:]
torch.set_num_threads(1)
sd = load_checkpoint.load_state_dict(ckpt)  # logical tensors, gathered from the tp=2 shards
assert sd["blocks.0.attn.qkv.weight"].shape == (3, 32, 32) and sd["lm_head.weight"].shape == (256, 32)
T = 32
x, y = lm_eval_data.windows(val, 100, T)
def result(d):
    return lm_eval_data.result(d, 40)
def score(logits):
    loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1), reduction="sum").double().item()
    return loss / y.numel(), (logits.argmax(-1) == y).sum().item() / y.numel()
r = result(f"{tmp}/eval100")
with torch.no_grad():
    logits = torch.jit.load(f"{tmp}/gpt.torchscript")(x)
loss, acc = score(logits)
assert logits.shape == (100, T, 256), logits.shape
assert abs(loss - r["loss"]) < 1e-5 and acc == r["accuracy"], (loss, acc, r["loss"], r["accuracy"])
print("torchscript export reproduces hpctrain eval on 100 sequences:", loss, acc)

g = onnx.load(f"{tmp}/gpt.onnx")
onnx.checker.check_model(g)
dims = lambda v: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
assert [i.name for i in g.graph.input] == ["tokens"] and dims(g.graph.input[0]) == ["batch", T], g.graph.input
assert [o.name for o in g.graph.output] == ["logits"] and dims(g.graph.output[0]) == ["batch", T, 256], g.graph.output
ops = [n.op_type for n in g.graph.node]
# Per block: qkv, scores, context, projection, fc, mlp projection; then the output head.
assert ops.count("MatMul") == 6 * 2 + 1 and ops.count("Softmax") == 2 and ops.count("Tanh") == 2, ops
init = [onnx.numpy_helper.to_array(i) for i in g.graph.initializer]
for name, w in sd.items():
    w = w.numpy()
    forms = (w, w.reshape(-1, w.shape[-1]).T, w.reshape(-1))
    assert any(a.shape == b.shape and np.array_equal(a, b) for a in init for b in forms), name
print("onnx: checker passes, tokens [batch, 32] -> logits [batch, 32, 256],", len(ops), "nodes,"
      " every checkpoint tensor among the initializers")

# int8: the weights and scales of quantize_dynamic (per-channel) on the logical weights.
linears = [f"blocks.{i}.{n}" for i in range(2) for n in ("attn.qkv", "attn.proj", "mlp.fc", "mlp.proj")] + ["lm_head"]
def linear(name):
    w = sd[name + ".weight"].reshape(-1, sd[name + ".weight"].shape[-1])
    b = sd.get(name + ".bias")
    l = nn.Linear(w.shape[1], w.shape[0], bias=b is not None)
    l.weight.data.copy_(w)
    if b is not None:
        l.bias.data.copy_(b.reshape(-1))
    return l
man = json.load(open(glob.glob(f"{tmp}/q8/checkpoints/step_*/manifest.json")[0]))
rec = man["trainer_state"]["compression"]
assert sorted(l["layer"] for l in rec["layers"] if l["int8"]) == sorted(linears), rec["layers"]
assert "wte" in rec["kept_float32"] or "embeddings" in rec["kept_float32"], rec
torch.backends.quantized.engine = rec["engine"]
q = quantize_dynamic(nn.ModuleList(linear(n) for n in linears), {nn.Linear: per_channel_dynamic_qconfig},
                     dtype=torch.qint8)
packed = {}
with h5py.File(glob.glob(f"{tmp}/q8/checkpoints/step_*/int8.h5")[0]) as f:
    for n, m in zip(linears, q):
        assert f"model/{n}.weight" not in man["tensors"], n
        assert torch.equal(torch.from_numpy(f[f"/{n}.weight"][()]), m.weight().int_repr()), n
        assert torch.equal(torch.from_numpy(f[f"/{n}.weight_scale"][()]).double(), m.weight().q_per_channel_scales()), n
        packed[n] = m
print("int8 values and scales of the 9 linear layers equal quantize_dynamic's (engine", rec["engine"] + ")")

# The reference Gpt with those int8 layers: F.linear on each linear weight goes through the
# quantized module (quantized::linear_dynamic, activations quantized per batch: the same two
# batches of 50 sequences as hpctrain's evaluation).
model = ref.Gpt(ref.gpt_options(dict(vocab_size=256, seq_len=T, layers=2, heads=2, width=32,
                                     tied_embeddings=False)), 0)
model.load_state_dict(ref.from_hpctrain_state(sd), strict=True)
model.eval()
by_weight = {}
for n in linears:
    p = dict(model.named_parameters())[ref.from_hpctrain_state({n + ".weight": 0}).popitem()[0]]
    by_weight[p.data_ptr()] = packed[n]  # qkv reaches F.linear as a view [3 D, D] of its [3, D, D]
plain = F.linear
def int8_linear(inp, weight, bias=None):
    m = by_weight.get(weight.data_ptr())
    if m is None:
        return plain(inp, weight, bias)
    return m(inp.reshape(-1, inp.shape[-1])).view(*inp.shape[:-1], -1)
q8 = [result(f"{tmp}/evq8_{n}") for n in (1, 2)]
ref.F.linear = int8_linear
try:
    with torch.no_grad():
        qloss, qacc = score(torch.cat([model(x[:50]), model(x[50:])]))
finally:
    ref.F.linear = plain
c = q8[0]["compression"]
assert abs(qloss - q8[0]["loss"]) < 1e-5 * qloss and qacc == q8[0]["accuracy"], (qloss, qacc, q8[0])
print("PyTorch int8 forward loss", qloss, "token accuracy", qacc, "hpctrain int8", q8[0]["loss"],
      q8[0]["accuracy"], "float32", c["float32"]["loss"])
f32 = c["float32"]
assert abs(f32["loss"] - r["loss"]) < 1e-6 and f32["perplexity"] > 1, (f32, r["loss"])
assert abs(f32["drop"]["loss_relative"] - (q8[0]["loss"] - f32["loss"]) / f32["loss"]) < 1e-12, f32
assert abs(f32["drop"]["perplexity"] - (q8[0]["perplexity"] - f32["perplexity"])) < 1e-9, f32
assert c["bytes_after"] < c["bytes_before"], c
# 2 ranks (dp=2, tp=1): a batch of 50 each, the same canonical batches as on 1 rank, so the same
# activation ranges and the same metrics.
for k in ("loss", "accuracy", "perplexity", "samples"):
    assert q8[1][k] == q8[0][k], (k, q8[1][k], q8[0][k])
assert q8[1]["grid"] == {"dp": 2, "tp": 1}, q8[1]["grid"]
print("2 ranks: int8 loss", q8[1]["loss"])

# Pruning per layer at 0.5: masks equal l1_unstructured's on every prunable weight.
with h5py.File(glob.glob(f"{tmp}/p50/checkpoints/step_*/model.h5")[0]) as f:
    for n in linears:
        l = linear(n)
        prune.l1_unstructured(l, "weight", amount=0.5)
        mine = torch.from_numpy(f[f"/{n}.weight"][()]).reshape(l.weight.shape)
        assert torch.equal(mine != 0, l.weight_mask.bool()), n
        assert torch.equal(mine, l.weight.detach()), n
    assert torch.equal(torch.from_numpy(f["/wte.weight"][()]), sd["wte.weight"])  # not pruned
print("pruning masks equal torch.nn.utils.prune.l1_unstructured on the 9 linear weights")
PY
finish
