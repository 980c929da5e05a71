// The reference side of the tokenizer tests and benchmark: Hugging Face's tokenizers (the Rust
// library through @anush008/tokenizers) and js-tiktoken encode the same corpus as hpctrain.
//
// usage: node tokenizer_reference.mjs NODE_MODULES COMMAND ...
//   tiktoken-file NAME OUT.tiktoken      write js-tiktoken's ranks of NAME as a tiktoken file
//   encode LIBRARY VOCAB CORPUS_DIR OUT.ids [ROUNDS]
//       LIBRARY: hf-json (VOCAB = tokenizer.json), hf-gpt2 (VOCAB = folder with encoder.json and
//       vocab.bpe), tiktoken (VOCAB = encoding name). Encodes each document of CORPUS_DIR
//       (corpus.txt, docs.txt) without adding special tokens, writes the ids as uint32
//       little-endian to OUT.ids and, for hf-json, the decoded text to OUT.ids.text; prints one JSON
//       line: {"library", "bytes", "tokens", "seconds"} (the best of ROUNDS timed passes).
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [modules, command, ...args] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(modules), "x.js"));

function tiktokenRanks(name) {
  return require(`js-tiktoken/ranks/${name}`);
}

function writeTiktokenFile(name, out) {
  // js-tiktoken's bpe_ranks: lines "<label> <first rank> <base64 token> <base64 token> ...".
  const ranks = tiktokenRanks(name);
  const lines = [];
  for (const row of ranks.bpe_ranks.split("\n")) {
    if (!row) continue;
    const [, offset, ...tokens] = row.split(" ");
    tokens.forEach((t, i) => lines.push(`${t} ${Number.parseInt(offset, 10) + i}`));
  }
  fs.writeFileSync(out, lines.join("\n") + "\n");
}

async function makeEncoder(library, vocab) {
  if (library === "tiktoken") {
    const { Tiktoken } = require("js-tiktoken/lite");
    const enc = new Tiktoken(tiktokenRanks(vocab));
    return { encode: async (text) => enc.encode(text, "all"), decode: null };
  }
  const hf = require("@anush008/tokenizers");
  let tok;
  let decodes = true;
  if (library === "hf-json") {
    tok = hf.Tokenizer.fromFile(vocab);
  } else {
    // The binding has no ByteLevel decoder to set: ids are compared, decoding is hpctrain's own.
    decodes = false;
    const model = await hf.BPE.fromFile(path.join(vocab, "encoder.json"),
                                        path.join(vocab, "vocab.bpe"));
    tok = new hf.Tokenizer(model);
    tok.setPreTokenizer(hf.byteLevelPreTokenizer(false, true));
    tok.addSpecialTokens(["<|endoftext|>"]);
  }
  return {
    encode: async (text) => (await tok.encode(text, null, { addSpecialTokens: false })).getIds(),
    decode: decodes ? async (ids) => tok.decode(ids, false) : null,
  };
}

async function encodeCorpus(library, vocab, corpusDir, out, rounds) {
  const corpus = fs.readFileSync(path.join(corpusDir, "corpus.txt"));
  const lengths = fs.readFileSync(path.join(corpusDir, "docs.txt"), "utf8").split("\n")
    .filter(Boolean).map(Number);
  const docs = [];
  let offset = 0;
  for (const n of lengths) {
    docs.push(corpus.subarray(offset, offset + n).toString("utf8"));
    offset += n;
  }
  const encoder = await makeEncoder(library, vocab);
  let best = Infinity;
  let ids = [];
  for (let r = 0; r < rounds; ++r) {
    const start = process.hrtime.bigint();
    const all = [];
    for (const doc of docs) all.push(await encoder.encode(doc));
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    best = Math.min(best, seconds);
    ids = all;
  }
  const flat = new Uint32Array(ids.reduce((n, a) => n + a.length, 0));
  let at = 0;
  for (const a of ids) {
    flat.set(a, at);
    at += a.length;
  }
  fs.writeFileSync(out, Buffer.from(flat.buffer));
  if (encoder.decode) {
    const texts = [];
    for (const a of ids) texts.push(await encoder.decode(Array.from(a)));
    fs.writeFileSync(out + ".text", texts.join(""));
  }
  console.log(JSON.stringify({ library, bytes: corpus.length, tokens: flat.length, seconds: best }));
}

if (command === "tiktoken-file") {
  writeTiktokenFile(args[0], args[1]);
} else if (command === "encode") {
  await encodeCorpus(args[0], args[1], args[2], args[3], Number(args[4] || 1));
} else {
  console.error("usage: node tokenizer_reference.mjs NODE_MODULES tiktoken-file|encode ...");
  process.exit(2);
}
