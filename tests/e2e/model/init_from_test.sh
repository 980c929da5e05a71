#!/usr/bin/env bash
# model.init_from and `hpctrain export --format safetensors` (docs/MODELS.md, "Pretrained
# weights"), for a tiny gpt, against scripts/gpt_torch_reference.py and a GPT-2 forward written
# from GPT-2's definition (pretrained.py):
#   1. GPT-2-named weights written by Python (safetensors with f16/bf16/f64 tensors and mask
#      buffers, 60 vocabulary rows for vocab_size 64 and 20 positions for seq_len 16; the same as a
#      torch.save OrderedDict with a tied lm_head and a strided tensor; a nanoGPT-style training
#      checkpoint) give the reference's logits within 1e-5 at tp = 1 and tp = 2, tied and untied
#   2. `hpctrain train` from them at tp = 2: the first step's loss is the reference's, the
#      optimizer starts fresh at step 0, a resumed run ignores init_from; an hpctrain checkpoint
#      as init_from gives the reference's logits too
#   3. the export reads back in Python (names, shapes, F32, config.json, values), runs in the
#      GPT-2 forward, and loads through init_from with the checkpoint's logits
#   4. damaged files, a missing tensor, a shape mismatch, the old torch.save format and a FIFO:
#      exit 4 with one error line at 2 ranks, no hang
# Argument: the init_from_driver binary.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
DRIVER=${1:?usage: init_from_test.sh INIT_FROM_DRIVER}
HERE=$(cd "$(dirname "$0")" && pwd)
REF=$HPCTRAIN_SOURCE_DIR/scripts/gpt_torch_reference.py
W=$TMP/w

cat >"$TMP/tied.yaml" <<'EOF'
run: {seed: 1234}
model: {name: gpt, vocab_size: 64, seq_len: 16, layers: 2, heads: 4, width: 32, mlp_ratio: 4,
        tied_embeddings: true}
data: {batch_size: 4, shuffle: false}
optim: {name: adamw, lr: 0.001, weight_decay: 0.0, grad_clip: 0.0}
schedule: {name: constant, warmup_steps: 0}
parallel: {tp: 2}
eval: {every_steps: 0}
checkpoint: {every_steps: 0, at_end: true}
logging: {every_steps: 1, progress: plain}
EOF
# Untied, with a vocabulary (63) that tp = 2 pads: lm_head starts as a copy of wte.
sed -e 's/vocab_size: 64/vocab_size: 63/' -e 's/tied_embeddings: true/tied_embeddings: false/' \
  "$TMP/tied.yaml" >"$TMP/untied.yaml"

$PY "$HERE/pretrained.py" write "$TMP/tied.yaml" "$W" || { fail "pretrained.py write failed"; finish; }

# logits NAME CONFIG WEIGHTS NP: the driver's gathered logits at tp = NP into $TMP/NAME.bin.
logits() {
  local name=$1 config=$2 weights=$3 np=$4
  expect_exit 0 "$TMP/$name.txt" mpirun_np "$np" "$DRIVER" "$config" "$weights" "$W/tokens.bin" \
    "$TMP/$name.bin" --batch 2 --seq 16
}
reference() {  # reference NAME CONFIG WEIGHTS: the reference's logits into $TMP/NAME.npy
  $PY "$REF" -c "$2" --logits "$3" --tokens "$W/tokens.npy" --out "$TMP/$1.npy" ||
    fail "reference logits of $3 failed"
}
compare() {  # compare A.npy B[.bin|.npy] TOL [--cols N]
  $PY "$HERE/pretrained.py" compare "$@" || fail "logits differ: $*"
}

# --- 1. Files written by Python, at tp = 1 and 2 ---------------------------------------------------
reference ref_tied "$TMP/tied.yaml" "$W/gpt2.safetensors"
reference ref_untied "$TMP/untied.yaml" "$W/gpt2.safetensors"
$PY "$HERE/pretrained.py" gpt2-forward "$W/gpt2.safetensors" "$W/tokens.npy" "$TMP/gpt2_fwd.npy" \
  --config "$TMP/tied.yaml" || fail "GPT-2 forward failed"
# The reference's reading of GPT-2's names is GPT-2's own (the file's 60 vocabulary columns; the 4
# padded ones are zero).
# (Within 3e-5: the two compute in other orders; 4e-6 measured.)
compare "$TMP/gpt2_fwd.npy" "$TMP/ref_tied.npy" 3e-5 --cols 60
for np in 1 2; do
  logits "st_tied_tp$np" "$TMP/tied.yaml" "$W/gpt2.safetensors" "$np"
  compare "$TMP/ref_tied.npy" "$TMP/st_tied_tp$np.bin" 1e-5
  logits "pt_tied_tp$np" "$TMP/tied.yaml" "$W/gpt2.pt" "$np"
  compare "$TMP/ref_tied.npy" "$TMP/pt_tied_tp$np.bin" 1e-5
  logits "st_untied_tp$np" "$TMP/untied.yaml" "$W/gpt2.safetensors" "$np"
  compare "$TMP/ref_untied.npy" "$TMP/st_untied_tp$np.bin" 1e-5
done
expect_grep "safetensors file '.*gpt2.safetensors' \(GPT-2 names, Conv1D\)" "$TMP/st_tied_tp2.txt"
expect_grep "transformer.wte.weight -> wte.weight: the file's 60 rows are padded with zero rows to model.vocab_size = 64" \
  "$TMP/st_tied_tp2.txt"
expect_grep "the first 16 of the file's 20 positions are used" "$TMP/st_tied_tp2.txt"
expect_grep "4 GPT-2 attention-mask buffers" "$TMP/st_tied_tp2.txt"
expect_grep "lm_head.weight equals the token embedding" "$TMP/pt_tied_tp1.txt"
expect_grep "lm_head.weight starts as a copy of wte" "$TMP/st_untied_tp2.txt"
expect_grep "transformer.wte.weight -> lm_head.weight: the file's 60 rows are padded with zero rows to model.vocab_size = 63" \
  "$TMP/st_untied_tp2.txt"
# nanoGPT's layout: nn.Linear weights, "_orig_mod.", the state_dict under "model": the same values.
logits nano_tp2 "$TMP/tied.yaml" "$W/nano.pt" 2
compare "$TMP/ref_tied.npy" "$TMP/nano_tp2.bin" 1e-5
expect_grep "under key 'model'" "$TMP/nano_tp2.txt"
expect_grep "stored as nn.Linear does" "$TMP/nano_tp2.txt"
expect_grep "prefix '_orig_mod.'" "$TMP/nano_tp2.txt"

# --- 2. Training from them -----------------------------------------------------------------------
$PY - "$TMP/tokens.h5" <<'PY' || fail "writing the token file failed"
import sys, h5py, numpy as np
tokens = np.random.default_rng(5).integers(0, 60, 64 * 16 + 1).astype(np.uint16)
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("tokens", data=tokens).attrs["vocab_size"] = 60
PY
train=(mpirun_np 2 "$HPCTRAIN_BIN" train -c "$TMP/tied.yaml" --set "data.train=$TMP/tokens.h5")
expect_exit 0 "$TMP/train_a.txt" "${train[@]}" --set "run.dir=$TMP/run_a" \
  --set "model.init_from=$W/gpt2.safetensors" --set run.max_steps=2
expect_grep "model.init_from: initialised 28 parameters from safetensors file .*; the optimizer starts fresh at step 0" \
  "$TMP/train_a.txt"
expect_grep "padded with zero rows" "$TMP/train_a.txt"
$PY - "$TMP/run_a" "$TMP/tied.yaml" "$W/gpt2.safetensors" "$REF" "$TMP/tokens.h5" <<'PY' ||
import json, os, sys, h5py, numpy as np, torch, torch.nn.functional as F
run, config, weights, ref_path, data = sys.argv[1:]
sys.path.insert(0, os.path.dirname(ref_path))
import gpt_torch_reference as ref
cfg, o = ref.load_config(config, [])
tokens = torch.from_numpy(h5py.File(data)["tokens"][:].astype(np.int64))
rows = torch.stack([tokens[i * 16 : i * 16 + 17] for i in range(4)])  # shuffle off: samples 0-3
logits = ref.pretrained_logits(cfg, o, weights, rows[:, :-1])
want = F.cross_entropy(logits.reshape(-1, 64), rows[:, 1:].reshape(-1)).item()
got = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r["type"] == "train"][0]
assert got["step"] == 1, got
print(f"first step's loss {got['loss']!r}, the reference's {want!r} (ln 64 = {np.log(64):.4f})")
assert abs(got["loss"] - want) <= 1e-5 * want, (got["loss"], want)
PY
  fail "the first step's loss is not the reference's"
# A resumed run continues from its checkpoint and does not read init_from (the file is gone).
mv "$W/gpt2.safetensors" "$W/gone.safetensors"
expect_exit 0 "$TMP/train_resume.txt" "${train[@]}" --set "run.dir=$TMP/run_a" \
  --set "model.init_from=$W/gpt2.safetensors" --set run.max_steps=3
expect_grep "resumed from .*step_00000002 at step 2" "$TMP/train_resume.txt"
grep -q "initialised" "$TMP/train_resume.txt" && fail "a resumed run initialised from model.init_from"
mv "$W/gone.safetensors" "$W/gpt2.safetensors"
# The hpctrain checkpoint (step 3) as init_from: the reference's logits (h5py + load_checkpoint.py).
reference ref_ckpt "$TMP/tied.yaml" "$TMP/run_a"
for np in 1 2; do
  logits "ckpt_tp$np" "$TMP/tied.yaml" "$TMP/run_a" "$np"
  compare "$TMP/ref_ckpt.npy" "$TMP/ckpt_tp$np.bin" 1e-5
done
expect_grep "hpctrain checkpoint '.*step_00000003' \(step 3\)" "$TMP/ckpt_tp2.txt"
# A run started from that checkpoint: step 1 first, a fresh AdamW (its first update moves every
# weight with a clear gradient by lr exactly: g / (|g| + eps)), step count 1 at the end.
expect_exit 0 "$TMP/train_c.txt" "${train[@]}" --set "run.dir=$TMP/run_c" \
  --set "model.init_from=$TMP/run_a" --set run.max_steps=1
$PY - "$TMP/run_a" "$TMP/run_c" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' || fail "the optimizer did not start fresh at step 0"
import json, sys, torch
run_a, run_c, scripts = sys.argv[1:]
sys.path.insert(0, scripts)
import load_checkpoint
before = load_checkpoint.load_state_dict(run_a)
after = load_checkpoint.load_state_dict(run_c)
manifest = json.load(open(f"{run_c}/checkpoints/step_00000001/manifest.json"))
assert manifest["step"] == 1, manifest["step"]
steps = [r["step"] for r in map(json.loads, open(f"{run_c}/metrics.jsonl")) if r["type"] == "train"]
assert steps == [1], steps
ratios = torch.cat([((after[k] - before[k]).abs() / 1e-3).flatten() for k in before])
moved = ratios[ratios > 0.5]
near = ((moved - 1).abs() < 1e-2).double().mean().item()
print(f"{near:.4f} of {moved.numel()} moved weights moved by lr (a fresh Adam's first step)")
assert near > 0.95, near
PY

# Full sharding with bfloat16 gathered copies (issue 44, item 8): the weights reach the float32
# master chunks as the file holds them, not rounded through the bfloat16 copies. A learning rate of
# 1e-30 leaves float32 weights as they were: the step-1 checkpoint (float32, logical) of dp = 2 x
# full x bfloat16 equals that of dp = 2 x none, tensor for tensor.
for mode in none bf16; do
  shard=()
  [[ $mode == bf16 ]] && shard=(--set parallel.shard=full --set parallel.param_dtype=bfloat16)
  expect_exit 0 "$TMP/init_$mode.txt" "${train[@]}" --set parallel.tp=1 "${shard[@]}" \
    --set "run.dir=$TMP/run_init_$mode" --set "model.init_from=$W/gpt2.safetensors" \
    --set run.max_steps=1 --set optim.lr=1e-30 --set checkpoint.at_end=true
done
$PY - "$TMP/run_init_none" "$TMP/run_init_bf16" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' ||
import sys, torch
none, bf16, scripts = sys.argv[1:]
sys.path.insert(0, scripts)
import load_checkpoint
want = load_checkpoint.load_state_dict(none)
got = load_checkpoint.load_state_dict(bf16)
assert set(got) == set(want), (sorted(got), sorted(want))
# lr 1e-30 moves only weights within ~1e-23 of zero (by ~1e-30, in directions the two runs'
# gradients may set differently); a rounding through bfloat16 moves every weight by ~1e-3 of it.
rounded = [(k, (got[k] - want[k]).abs().max().item()) for k in want
           if not torch.allclose(got[k], want[k], rtol=0, atol=1e-20)]
assert not rounded, f"differ from the file's float32 values: {rounded}"
print(f"full x bfloat16: the {len(want)} float32 tensors equal shard none's after init_from")
PY
  fail "model.init_from under parallel.param_dtype: bfloat16 rounded the weights"

# The key is known to every command that reads a model section: plan, and eval of a run that used
# it (its stored config holds it).
expect_exit 0 "$TMP/plan.txt" "$HPCTRAIN_BIN" plan -c "$TMP/tied.yaml" --devices 2 \
  --set "model.init_from=$W/gpt2.safetensors" --set "data.train=$TMP/tokens.h5"
expect_exit 0 "$TMP/eval.txt" "$HPCTRAIN_BIN" eval --checkpoint "$TMP/run_a" --split train \
  --results "$TMP/eval_a"

# Any model whose names match: an mlp from a torch.save state_dict of the same PyTorch module, at
# dp = 2. A learning rate of 1e-30 leaves float32 weights as they were, so the checkpoint after one
# step holds exactly what was loaded.
$PY - "$TMP" <<'PY' || fail "writing the mlp files failed"
import collections, sys, h5py, numpy as np, torch
tmp = sys.argv[1]
model = torch.nn.Sequential(collections.OrderedDict(fc1=torch.nn.Linear(8, 6), act=torch.nn.ReLU(),
                                                    fc2=torch.nn.Linear(6, 3)))
torch.save(model.state_dict(), f"{tmp}/mlp.pt")
rng = np.random.default_rng(1)
with h5py.File(f"{tmp}/cls.h5", "w") as f:
    f["inputs"] = rng.standard_normal((64, 8)).astype(np.float32)
    f.create_dataset("labels", data=rng.integers(0, 3, 64)).attrs["num_classes"] = 3
PY
cat >"$TMP/mlp.yaml" <<EOF
model: {name: mlp, in_features: 8, hidden: [6], num_classes: 3, init_from: $TMP/mlp.pt}
data: {train: $TMP/cls.h5, batch_size: 4}
optim: {name: adam, lr: 1.0e-30}
run: {dir: $TMP/run_mlp, max_steps: 1}
checkpoint: {at_end: true}
EOF
expect_exit 0 "$TMP/mlp.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$TMP/mlp.yaml"
expect_grep "model.init_from: initialised 4 parameters from torch.save file" "$TMP/mlp.txt"
$PY - "$TMP" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' || fail "the mlp did not start from the file"
import sys, torch
tmp, scripts = sys.argv[1:]
sys.path.insert(0, scripts)
import load_checkpoint
want = torch.load(f"{tmp}/mlp.pt", weights_only=False)
got = load_checkpoint.load_state_dict(f"{tmp}/run_mlp")
assert set(got) == set(want), (sorted(got), sorted(want))
for k in want:
    assert torch.equal(got[k], want[k]), k
print(f"mlp: the checkpoint holds the torch.save file's {len(want)} tensors exactly")
PY

# --- 3. Export ---------------------------------------------------------------------------------
expect_exit 0 "$TMP/export.txt" "$HPCTRAIN_BIN" export "$TMP/run_a" --format safetensors \
  --out "$TMP/export"
expect_grep "under GPT-2's names, with config.json" "$TMP/export.txt"
$PY "$HERE/pretrained.py" check-export "$TMP/export" "$TMP/run_a" "$TMP/tied.yaml" ||
  fail "the export does not read back as the checkpoint"
$PY "$HERE/pretrained.py" gpt2-forward "$TMP/export" "$W/tokens.npy" "$TMP/export_fwd.npy" ||
  fail "the GPT-2 forward of the export failed"
compare "$TMP/ref_ckpt.npy" "$TMP/export_fwd.npy" 3e-5
logits export_tp2 "$TMP/tied.yaml" "$TMP/export" 2
compare "$TMP/ref_ckpt.npy" "$TMP/export_tp2.bin" 1e-5
cmp -s "$TMP/export_tp2.bin" "$TMP/ckpt_tp2.bin" ||
  fail "init_from of the export and of its checkpoint give different logits"
# Exporting again over the folder replaces it; a folder holding other files is refused.
expect_exit 0 "$TMP/export2.txt" "$HPCTRAIN_BIN" export "$TMP/run_a" --format safetensors \
  --out "$TMP/export"
touch "$TMP/export/README"
expect_exit 2 "$TMP/export3.txt" "$HPCTRAIN_BIN" export "$TMP/run_a" --format safetensors \
  --out "$TMP/export"
expect_grep "holds README, which an export did not write" "$TMP/export3.txt"

# --- 4. Bad files at 2 ranks: exit 4, one error line ---------------------------------------------
mkfifo "$W/fifo.safetensors"
bad() {  # bad NAME FILE PATTERN
  expect_exit 4 "$TMP/bad_$1.txt" "${train[@]}" --set "run.dir=$TMP/bad_$1" \
    --set "model.init_from=$2" --set run.max_steps=1 || return
  expect_grep "$3" "$TMP/bad_$1.txt"
  local n
  n=$(grep -c "error:" "$TMP/bad_$1.txt")
  [[ $n == 1 ]] || fail "$1: $n error lines, not 1"
}
bad truncated "$W/truncated.safetensors" "field 'data_offsets' .* past the end of the file .*the file is truncated"
bad overlap "$W/overlap.safetensors" "header entry 'transformer.h.1.ln_1.(weight|bias)': field 'data_offsets' \[[0-9]+, [0-9]+\] overlaps"
bad dtype "$W/dtype.safetensors" "header entry 'transformer.ln_f.bias': field 'dtype' is 'F31', not a safetensors dtype"
bad length "$W/length.safetensors" "the header length at bytes 0-7 is [0-9]+ bytes, past the end of the file"
bad missing "$W/missing.safetensors" "transformer.h.1.mlp.c_fc.bias: missing from the file \(blocks.1.mlp.fc.bias needs shape \(128,\)\)"
bad shape "$W/shape.safetensors" "transformer.h.0.attn.c_proj.weight: shape \(32, 34\) in the file, but blocks.0.attn.proj.weight needs \(32, 32\)"
bad extra "$W/extra.safetensors" "transformer.h.2.ln_1.weight: in the file \(shape \(32,\)\), but the model has no parameter it maps to"
bad head "$W/head.safetensors" "lm_head.weight differs from the token embedding, but the model ties its head to wte: set model.tied_embeddings: false"
bad legacy "$W/legacy.pt" "torch.save's format from before PyTorch 1.6"
bad truncated_pt "$W/truncated.pt" "torch.save file '.*truncated.pt' is not a readable zip archive .*the file is truncated or damaged"
bad fifo "$W/fifo.safetensors" "is not a regular file \(a FIFO\)"
bad nowhere "$W/nowhere.safetensors" "does not exist"
finish
