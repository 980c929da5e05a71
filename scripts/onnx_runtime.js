#!/usr/bin/env node
// Runs an ONNX file written by `hpctrain export --format onnx` in ONNX Runtime (npm's
// onnxruntime-node, CPU), a test and benchmark reference only (scripts/setup.sh installs it into
// build/npm; HPCTRAIN_NPM names another folder holding node_modules). docs/EVAL.md, "ONNX Runtime".
//
//   node scripts/onnx_runtime.js --model M.onnx --input X.bin --dtype float32|int64 \
//       --shape N,784 [--out Y.bin] [--batch B] [--repeat R] [--threads T]
//
// X.bin holds N samples (little-endian, row-major, shape --shape); they run in batches of B (the
// canonical batches [i*B, (i+1)*B), default all N at once), R times (default 1; the outputs of the
// last pass are written), each ONNX Runtime session with T intra-op threads (default 1). --out
// receives the model's first output as float32, row-major, in sample order. Prints one JSON line:
// samples, batch, seconds (the fastest pass), samples_per_s, output_shape, runtime version.
"use strict";
const fs = require("fs");
const path = require("path");

function args() {
  const out = { batch: 0, repeat: 1, threads: 1 };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i].replace(/^--/, "");
    if (argv[i + 1] === undefined) throw new Error(`${argv[i]} needs a value`);
    out[key] = ["batch", "repeat", "threads"].includes(key) ? Number(argv[i + 1]) : argv[i + 1];
  }
  for (const need of ["model", "input", "dtype", "shape"]) {
    if (!out[need]) throw new Error(`--${need} is required (see the top of this file)`);
  }
  out.shape = out.shape.split(",").map(Number);
  return out;
}

function runtime() {
  const dir = process.env.HPCTRAIN_NPM ||
    path.join(__dirname, "..", process.env.BUILD_DIR || "build", "npm");
  const where = path.join(dir, "node_modules", "onnxruntime-node");
  if (!fs.existsSync(where)) {
    throw new Error(`onnxruntime-node is not installed in ${dir}: run scripts/setup.sh`);
  }
  return require(where);
}

async function main() {
  const a = args();
  const ort = runtime();
  const raw = fs.readFileSync(a.input);
  const n = a.shape[0];
  const per = a.shape.slice(1).reduce((x, y) => x * y, 1);
  const Typed = a.dtype === "int64" ? BigInt64Array : Float32Array;
  if (!["int64", "float32"].includes(a.dtype)) throw new Error(`--dtype ${a.dtype}: float32 or int64`);
  const all = new Typed(raw.buffer, raw.byteOffset, raw.length / Typed.BYTES_PER_ELEMENT);
  if (all.length !== n * per) {
    throw new Error(`${a.input}: ${all.length} values, --shape ${a.shape} needs ${n * per}`);
  }
  const session = await ort.InferenceSession.create(a.model, {
    intraOpNumThreads: a.threads, interOpNumThreads: 1, graphOptimizationLevel: "all",
    executionMode: "sequential",
  });
  const input = session.inputNames[0];
  const output = session.outputNames[0];
  const batch = a.batch > 0 ? a.batch : n;
  let best = Infinity;
  let chunks = [];
  let outShape = null;
  for (let r = 0; r < a.repeat; ++r) {
    chunks = [];
    const start = process.hrtime.bigint();
    for (let first = 0; first < n; first += batch) {
      const rows = Math.min(batch, n - first);
      const x = new ort.Tensor(a.dtype, all.subarray(first * per, (first + rows) * per),
                               [rows, ...a.shape.slice(1)]);
      const y = (await session.run({ [input]: x }))[output];
      chunks.push(y.data);
      outShape = y.dims;
    }
    best = Math.min(best, Number(process.hrtime.bigint() - start) / 1e9);
  }
  if (a.out) {
    const fd = fs.openSync(a.out, "w");
    for (const c of chunks) {
      fs.writeSync(fd, Buffer.from(c.buffer, c.byteOffset, c.byteLength));
    }
    fs.closeSync(fd);
  }
  console.log(JSON.stringify({
    samples: n, batch, seconds: best, samples_per_s: n / best,
    output_shape: [n, ...outShape.slice(1)], threads: a.threads,
    runtime: `onnxruntime-node ${ort.env.versions.node}`,
  }));
}

main().catch((e) => {
  console.error(`onnx_runtime.js: ${e.message}`);
  process.exit(1);
});
