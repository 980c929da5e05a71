#!/usr/bin/env bash
# The llama family and Hugging Face folders (docs/MODELS.md, "The llama family"), against
# scripts/llama_torch_reference.py (written from the published equations; it rotates adjacent
# pairs and reorders the folder's q/k rows, so a wrong reading of the half-split layout shows):
#   1. tiny random folders of each architecture (Llama-3 with 3.1 rope scaling, Qwen2 with q/k/v
#      bias, Qwen3 with q/k norm and head_dim * heads != width, Mistral with kv_heads = heads, MQA
#      with a tied head, bf16 weights in a 3-shard index) give the reference's logits within 1e-5
#      at tp = 1, tp = 2 and pp = 2 (llama_hf_driver: init_model_from, as `hpctrain train` calls it)
#   2. `hpctrain train` from a folder: 10 AdamW steps' losses within 1e-5 of the reference's at
#      1 rank, dp = 2, tp = 2 (kv heads replicated: kv_heads 1) and pp = 2
#   3. `hpctrain export --format hf`, sharded: the tensors of the checkpoint under Hugging Face's
#      names bit for bit, config.json, and init_from of the export gives the checkpoint's logits
#      bit for bit
#   4. a missing tensor, a misshapen tensor, an inconsistent index, an unknown architecture: exit
#      4 naming it; a config.json that disagrees with the model section: exit 2 naming the key; an
#      unused tensor: one warning line naming it
# Argument: the llama_hf_driver binary.
source "$(dirname "$0")/../lib.sh"
DRIVER=${1:?usage: llama_hf_test.sh LLAMA_HF_DRIVER}
HERE=$(cd "$(dirname "$0")" && pwd)
REF=$HPCTRAIN_SOURCE_DIR/scripts/llama_torch_reference.py
export OMP_NUM_THREADS=1
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

# The folders, in one reference process (--each: one line per call).
cat >"$TMP/folders.args" <<EOF
--make-folder $TMP/llama3 --arch llama3 --kv-heads 2
--make-folder $TMP/qwen2 --arch qwen2 --kv-heads 2
--make-folder $TMP/qwen3 --arch qwen3 --kv-heads 2
--make-folder $TMP/mistral --arch mistral --kv-heads 4
--make-folder $TMP/mqa --arch llama3 --kv-heads 1 --tied
--make-folder $TMP/sharded --arch llama3 --kv-heads 2 --dtype bf16 --shards 3
EOF
$PY "$REF" --each "$TMP/folders.args" || fail "writing the folders failed"
ls "$TMP/sharded" | grep -c '^model-0000[1-3]-of-00003.safetensors$' | grep -qx 3 ||
  fail "the 3-shard folder does not have 3 shards"

$PY - "$TMP" <<'PY' || fail "writing the tokens failed"
import sys, numpy as np
tokens = np.random.default_rng(3).integers(0, 96, (2, 32)).astype(np.int64)
np.save(f"{sys.argv[1]}/tokens.npy", tokens)
tokens.astype("<i8").tofile(f"{sys.argv[1]}/tokens.bin")
PY

config() {  # config NAME FOLDER [EXTRA]: a model section that only names the folder
  printf 'model: {name: llama, seq_len: 32, attention: explicit, init_from: %s%s}\n' "$2" "${3:-}" \
    >"$TMP/$1.yaml"
}
logits() {  # logits NAME CONFIG TP PP: the driver's logits into $TMP/NAME.bin
  expect_exit 0 "$TMP/$1.txt" mpirun_np $(($3 * $4)) "$DRIVER" "$2" "$TMP/tokens.bin" \
    "$TMP/$1.bin" --batch 2 --seq 32 --tp "$3" --pp "$4"
}
compare() {  # compare A.npy B.bin|B.npy TOL
  $PY "$HERE/pretrained.py" compare "$@" || fail "logits differ: $*"
}

# --- 1. Logits of every architecture at tp = 1, tp = 2, pp = 2 ---------------------------------
archs=(llama3 qwen2 qwen3 mistral mqa sharded)
for arch in "${archs[@]}"; do
  echo "--logits $TMP/$arch --tokens $TMP/tokens.npy --out $TMP/ref_$arch.npy"
done >"$TMP/logits.args"
$PY "$REF" --each "$TMP/logits.args" || fail "reference logits failed"
for arch in "${archs[@]}"; do
  config "$arch" "$TMP/$arch"
  for layout in "1 1" "2 1" "1 2"; do
    read -r tp pp <<<"$layout"
    logits "${arch}_tp${tp}_pp${pp}" "$TMP/$arch.yaml" "$tp" "$pp"
    compare "$TMP/ref_$arch.npy" "$TMP/${arch}_tp${tp}_pp${pp}.bin" 1e-5
  done
done
expect_grep "Hugging Face folder '.*sharded' \(3 safetensors shard\(s\)" "$TMP/sharded_tp1_pp1.txt"
expect_grep "initialised 35 parameters from .*model.safetensors' \(Hugging Face names\)" \
  "$TMP/llama3_tp1_pp1.txt"
expect_grep "k and v projections are replicated on every tp rank" "$TMP/mqa_tp2_pp1.txt"
expect_grep "lm_head.weight equals|initialised" "$TMP/mqa_tp1_pp1.txt"

# --- 2. Training from a folder: 10 AdamW steps against the reference ------------------------------
$PY - "$TMP/tokens.h5" <<'PY' || fail "writing the token file failed"
import sys, h5py, numpy as np
tokens = np.random.default_rng(5).integers(0, 96, 160 * 32 + 1).astype(np.uint16)
with h5py.File(sys.argv[1], "w") as f:
    f.create_dataset("tokens", data=tokens).attrs["vocab_size"] = 96
PY
cat >"$TMP/train.yaml" <<EOF
run: {seed: 1234, max_steps: 10}
model: {name: llama, seq_len: 32, attention: explicit, init_from: $TMP/qwen2}
data: {train: $TMP/tokens.h5, batch_size: 8}
optim: {name: adamw, lr: 0.002, weight_decay: 0.1, grad_clip: 1.0}
schedule: {name: constant, warmup_steps: 0}
eval: {every_steps: 0}
checkpoint: {every_steps: 0, at_end: true}
logging: {every_steps: 1, progress: plain}
EOF
sed -e "s|init_from: $TMP/qwen2|init_from: $TMP/mqa|" "$TMP/train.yaml" >"$TMP/train_mqa.yaml"
$PY "$REF" --train "$TMP/qwen2" -c "$TMP/train.yaml" --global-batch 8 >"$TMP/ref_train.json" ||
  fail "reference training failed"
$PY "$REF" --train "$TMP/mqa" -c "$TMP/train_mqa.yaml" --global-batch 8 >"$TMP/ref_train_mqa.json" ||
  fail "reference training (mqa) failed"
train() {  # train NAME CONFIG NP [--set ...]
  local name=$1 cfg=$2 np=$3
  shift 3
  expect_exit 0 "$TMP/$name.txt" mpirun_np "$np" "$HPCTRAIN_BIN" train -c "$cfg" \
    --set "run.dir=$TMP/run_$name" "$@"
}
losses() {  # losses RUN REFERENCE_JSON: 10 losses within 1e-5
  $PY - "$TMP/run_$1" "$2" <<'PY' || fail "losses of $1 differ from the reference's"
import json, sys
run, ref = sys.argv[1:]
want = json.load(open(ref))["losses"]
got = [r["loss"] for r in map(json.loads, open(f"{run}/metrics.jsonl")) if r["type"] == "train"]
assert len(got) == 10 == len(want), (len(got), len(want))
diff = max(abs(a - b) for a, b in zip(got, want))
print(f"{run}: 10 losses {got[0]:.6f} -> {got[-1]:.6f}, max |difference| from the reference {diff:.2e}")
assert diff <= 1e-5, (got, want)
PY
}
train one "$TMP/train.yaml" 1
losses one "$TMP/ref_train.json"
expect_grep "model.init_from: initialised .* from Hugging Face folder|model.init_from: initialised .* from safetensors file" \
  "$TMP/one.txt"
train dp2 "$TMP/train.yaml" 2 --set data.batch_size=4
losses dp2 "$TMP/ref_train.json"
train tp2 "$TMP/train_mqa.yaml" 2 --set parallel.tp=2
losses tp2 "$TMP/ref_train_mqa.json"
train pp2 "$TMP/train.yaml" 2 --set parallel.pp=2 --set optim.grad_accumulation=2 \
  --set data.batch_size=4
losses pp2 "$TMP/ref_train.json"

# --- 3. Export, sharded, and back --------------------------------------------------------------
expect_exit 0 "$TMP/export.txt" "$HPCTRAIN_BIN" export "$TMP/run_one" --format hf \
  --out "$TMP/export" --max-shard-size 100KB
expect_grep "safetensors shards of at most 100000 bytes with model.safetensors.index.json" \
  "$TMP/export.txt"
expect_grep "a Qwen2ForCausalLM folder" "$TMP/export.txt"
$PY - "$TMP/export" "$TMP/run_one" "$TMP/qwen2" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' ||
import json, os, sys, torch
export, run, original, scripts = sys.argv[1:]
sys.path.insert(0, scripts)
import load_checkpoint, llama_torch_reference as ref
cfg, state = ref.read_folder(export)
ckpt = load_checkpoint.load_state_dict(run)
index = json.load(open(f"{export}/model.safetensors.index.json"))
assert len(set(index["weight_map"].values())) > 1, "not sharded"
names = set(ref.read_folder(original)[1])
assert set(state) == names, sorted(set(state) ^ names)
n = 0
for i in range(cfg["num_hidden_layers"]):
    gate_up = ckpt[f"blocks.{i}.mlp.gate_up.weight"]
    assert torch.equal(state[f"model.layers.{i}.mlp.gate_proj.weight"], gate_up[0])
    assert torch.equal(state[f"model.layers.{i}.mlp.up_proj.weight"], gate_up[1])
    for p in "qkv":
        assert torch.equal(state[f"model.layers.{i}.self_attn.{p}_proj.weight"], ckpt[f"blocks.{i}.attn.{p}.weight"])
        assert torch.equal(state[f"model.layers.{i}.self_attn.{p}_proj.bias"], ckpt[f"blocks.{i}.attn.{p}.bias"])
    n += 8
assert torch.equal(state["model.embed_tokens.weight"], ckpt["wte.weight"])
assert torch.equal(state["lm_head.weight"], ckpt["lm_head.weight"])
assert all(t.dtype == torch.float32 for t in state.values())
mine, theirs = json.load(open(f"{export}/config.json")), json.load(open(f"{original}/config.json"))
for key in ("architectures", "model_type", "vocab_size", "hidden_size", "intermediate_size",
            "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "rms_norm_eps",
            "rope_theta", "tie_word_embeddings", "max_position_embeddings"):
    assert mine[key] == theirs[key], (key, mine[key], theirs[key])
assert os.path.exists(f"{export}/generation_config.json")
print(f"export: {len(state)} tensors in {len(set(index['weight_map'].values()))} shards equal the checkpoint's; config.json as the original's")
PY
  fail "the export does not hold the checkpoint"
config ckpt "$TMP/run_one"
printf 'model: {name: llama, seq_len: 32, attention: explicit, init_from: %s, architecture: qwen2, vocab_size: 96, layers: 4, width: 64, heads: 4, kv_heads: 2, ffn_width: 96, rope_theta: 10000.0, norm_eps: 1.0e-5, max_positions: 64}\n' \
  "$TMP/run_one" >"$TMP/ckpt.yaml"
config back "$TMP/export"
for layout in "1 1" "2 1"; do
  read -r tp pp <<<"$layout"
  logits "ckpt_tp$tp" "$TMP/ckpt.yaml" "$tp" "$pp"
  logits "back_tp$tp" "$TMP/back.yaml" "$tp" "$pp"
  cmp -s "$TMP/ckpt_tp$tp.bin" "$TMP/back_tp$tp.bin" ||
    fail "init_from of the export does not give the checkpoint's logits bit for bit (tp = $tp)"
done
$PY "$REF" --logits "$TMP/export" --tokens "$TMP/tokens.npy" --out "$TMP/ref_export.npy" ||
  fail "reference logits of the export failed"
compare "$TMP/ref_export.npy" "$TMP/back_tp1.bin" 1e-5

# --- 4. Folders that do not fit -----------------------------------------------------------------
$PY - "$TMP" "$HPCTRAIN_SOURCE_DIR/scripts" <<'PY' || fail "writing the damaged folders failed"
import json, shutil, sys, torch
tmp, scripts = sys.argv[1:]
sys.path.insert(0, scripts)
import llama_torch_reference as ref, safetensors_io
cfg, state = ref.read_folder(f"{tmp}/llama3")
def write(name, state, cfg=cfg, shards=1):
    ref.write_folder(f"{tmp}/{name}", cfg, state, shards)
write("missing", {k: v for k, v in state.items() if k != "model.layers.1.mlp.up_proj.weight"})
write("misshapen", {**state, "model.layers.0.self_attn.k_proj.weight": torch.zeros(16, 64)})
write("extra", {**state, "model.layers.0.self_attn.rotary_emb.inv_freq": torch.zeros(8)})
write("unknown", state, {**cfg, "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox"})
write("badindex", state, shards=3)
index = json.load(open(f"{tmp}/badindex/model.safetensors.index.json"))
index["weight_map"]["model.norm.weight"] = "model-00001-of-00003.safetensors"
json.dump(index, open(f"{tmp}/badindex/model.safetensors.index.json", "w"))
PY
for name in missing misshapen unknown badindex; do
  config "$name" "$TMP/$name"
  expect_exit 4 "$TMP/err_$name.txt" mpirun_np 2 "$DRIVER" "$TMP/$name.yaml" "$TMP/tokens.bin" \
    "$TMP/err.bin" --batch 2 --seq 32 --tp 2 --pp 1
done
expect_grep "model.layers.1.mlp.up_proj.weight: missing from the file \(blocks.1.mlp.gate_up.weight needs shape \(96, 64\)\)" \
  "$TMP/err_missing.txt"
expect_grep "model.layers.0.self_attn.k_proj.weight: shape \(16, 64\) in the file, but blocks.0.attn.k.weight needs \(32, 64\)" \
  "$TMP/err_misshapen.txt"
expect_grep "config.json: architectures: \[GPTNeoXForCausalLM\] is not an architecture hpctrain's llama family reads" \
  "$TMP/err_unknown.txt"
expect_grep "holds tensor 'model.norm.weight', which .*model.safetensors.index.json puts in 'model-00001-of-00003.safetensors'" \
  "$TMP/err_badindex.txt"
config extra "$TMP/extra"
logits extra "$TMP/extra.yaml" 1 1
expect_grep "warning: .*: 1 tensor\(s\) of the file are used by no parameter and were not read: model.layers.0.self_attn.rotary_emb.inv_freq" \
  "$TMP/extra.txt"
compare "$TMP/ref_llama3.npy" "$TMP/extra.bin" 1e-5
# A config.json that disagrees with the model section: exit 2 naming the key, in `hpctrain train`
# at 2 ranks (one message), and the unknown architecture there too (exit 4).
expect_exit 2 "$TMP/disagree.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$TMP/train.yaml" \
  --set "run.dir=$TMP/run_disagree" --set model.layers=3
expect_grep "model.layers = '3': disagrees with .*qwen2/config.json: num_hidden_layers = 4" \
  "$TMP/disagree.txt"
expect_exit 4 "$TMP/unknown_train.txt" mpirun_np 2 "$HPCTRAIN_BIN" train -c "$TMP/train.yaml" \
  --set "run.dir=$TMP/run_unknown" --set "model.init_from=$TMP/unknown"
expect_grep "GPTNeoXForCausalLM" "$TMP/unknown_train.txt"
finish
