#!/usr/bin/python3
"""Files and checks for tests/e2e/model/init_from_test.sh (model.init_from, export --format
safetensors).

    pretrained.py write CONFIG OUTDIR        GPT-2-named weights for the config's gpt, in every
                                             form the test loads, plus damaged copies and tokens
    pretrained.py gpt2-forward WEIGHTS TOKENS OUT [--config CONFIG]
                                             logits of a GPT-2 forward that reads the tensors by
                                             their Hugging Face names (config.json beside WEIGHTS,
                                             else the sizes of CONFIG's model section)
    pretrained.py check-export FOLDER CHECKPOINT CONFIG
                                             the exported folder against the checkpoint
    pretrained.py compare A B TOL [--cols N] max |A - B| <= TOL (.npy or raw float32 of B's shape)

The GPT-2 forward is written from GPT-2's definition (Conv1D: x @ W + b with W [in, out]; c_attn
split into q, k, v; heads; causal softmax scaled by 1/sqrt(head_dim); tanh GELU "gelu_new";
LayerNorm eps from config.json), not from hpctrain's or the reference's code, so that it checks the
names, shapes, dtypes and Conv1D orientation a Hugging Face GPT-2 would load.
"""
import argparse
import collections
import json
import math
import os
import struct
import sys

import numpy as np
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
# torch (and safetensors_io, which needs it) are imported by main() for the commands that use
# them: `compare` reads numpy arrays only, and the tests call it dozens of times.
torch = F = safetensors_io = None


def import_torch():
    global torch, F, safetensors_io
    import torch as torch_module
    import torch.nn.functional as functional
    import safetensors_io as io_module
    torch, F, safetensors_io = torch_module, functional, io_module

VOCAB_ROWS = 60  # rows of the file's embedding: fewer than model.vocab_size (padded on load)
POSITIONS = 20   # rows of the file's position table: more than model.seq_len (cut on load)
BATCH = 2


def model_section(path):
    return yaml.safe_load(open(path))["model"]


def gpt2_state(m, seed=7):
    """A GPT-2 state_dict (GPT2LMHeadModel names, Conv1D layouts) with random weights large
    enough that every layer changes the logits."""
    g = torch.Generator().manual_seed(seed)
    d, f, layers = m["width"], int(round(m["width"] * m.get("mlp_ratio", 4))), m["layers"]

    def rnd(*shape, scale=0.2, shift=0.0):
        return torch.randn(*shape, generator=g) * scale + shift

    sd = collections.OrderedDict()
    sd["transformer.wte.weight"] = rnd(VOCAB_ROWS, d, scale=0.5)
    sd["transformer.wpe.weight"] = rnd(POSITIONS, d, scale=0.3)
    seq = m["seq_len"]
    for i in range(layers):
        h = f"transformer.h.{i}."
        sd[h + "ln_1.weight"] = rnd(d, shift=1.0)
        sd[h + "ln_1.bias"] = rnd(d, scale=0.1)
        sd[h + "attn.bias"] = torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq)  # mask buffer
        sd[h + "attn.masked_bias"] = torch.tensor(-1e4)
        sd[h + "attn.c_attn.weight"] = rnd(d, 3 * d)
        sd[h + "attn.c_attn.bias"] = rnd(3 * d, scale=0.1)
        sd[h + "attn.c_proj.weight"] = rnd(d, d)
        sd[h + "attn.c_proj.bias"] = rnd(d, scale=0.1)
        sd[h + "ln_2.weight"] = rnd(d, shift=1.0)
        sd[h + "ln_2.bias"] = rnd(d, scale=0.1)
        sd[h + "mlp.c_fc.weight"] = rnd(d, f)
        sd[h + "mlp.c_fc.bias"] = rnd(f, scale=0.1)
        sd[h + "mlp.c_proj.weight"] = rnd(f, d)
        sd[h + "mlp.c_proj.bias"] = rnd(d, scale=0.1)
    sd["transformer.ln_f.weight"] = rnd(d, shift=1.0)
    sd["transformer.ln_f.bias"] = rnd(d, scale=0.1)
    return sd


def write_damaged(path, out_dir):
    """Damaged copies of the safetensors file at `path`."""
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]

    def write(name, hdr, body, length=None):
        text = json.dumps(hdr).encode()
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(struct.pack("<Q", len(text) if length is None else length) + text + body)

    with open(os.path.join(out_dir, "truncated.safetensors"), "wb") as f:
        f.write(raw[: len(raw) - 100])
    # Two tensors of the same size claim the same bytes: only the overlap is wrong (their sizes
    # fit, every offset lies within the file).
    h = json.loads(json.dumps(header))
    h["transformer.h.1.ln_1.bias"]["data_offsets"] = h["transformer.h.1.ln_1.weight"]["data_offsets"]
    write("overlap.safetensors", h, data)
    h = json.loads(json.dumps(header))
    h["transformer.ln_f.bias"]["dtype"] = "F31"
    write("dtype.safetensors", h, data)
    write("length.safetensors", header, data, length=len(raw) * 4)


def write(args):
    m = model_section(args.config)
    os.makedirs(args.out, exist_ok=True)
    sd = gpt2_state(m)
    # safetensors with mixed dtypes: every width converts to the model's float32 on load.
    mixed = collections.OrderedDict(sd)
    mixed["transformer.h.0.ln_1.weight"] = sd["transformer.h.0.ln_1.weight"].half()
    mixed["transformer.ln_f.weight"] = sd["transformer.ln_f.weight"].bfloat16()
    mixed["transformer.wpe.weight"] = sd["transformer.wpe.weight"].double()
    st = os.path.join(args.out, "gpt2.safetensors")
    safetensors_io.save(st, mixed, metadata={"format": "pt"})
    # torch.save of the same values as float32: an OrderedDict with _metadata, lm_head sharing
    # wte's storage (tied, as GPT2LMHeadModel's), and a non-contiguous tensor.
    same = collections.OrderedDict((k, v.to(torch.float32)) for k, v in mixed.items())
    same["transformer.h.1.attn.c_attn.weight"] = same["transformer.h.1.attn.c_attn.weight"].t().contiguous().t()
    assert not same["transformer.h.1.attn.c_attn.weight"].is_contiguous()
    same["lm_head.weight"] = same["transformer.wte.weight"]
    same._metadata = collections.OrderedDict({"": {"version": 1}})
    torch.save(same, os.path.join(args.out, "gpt2.pt"))
    # A training checkpoint as nanoGPT writes one: nn.Linear layouts, torch.compile's
    # "_orig_mod." prefix, the state_dict under "model" beside optimizer state and other values.
    nano = collections.OrderedDict()
    for k, v in same.items():
        if k.endswith((".attn.bias", ".attn.masked_bias")) or k == "lm_head.weight":
            continue
        v = v.clone()
        if k.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            v = v.t().contiguous()
        nano["_orig_mod." + k] = v
    torch.save({"model": nano, "optimizer": {"state": {0: {"step": torch.tensor(3.0)}},
                                             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.95),
                                                               "params": [0, 1]}]},
                "model_args": {"n_layer": m["layers"]}, "iter_num": 5, "best_val_loss": 2.5,
                "config": {"dataset": "x", "compile": True}},
               os.path.join(args.out, "nano.pt"))
    torch.save(dict(same), os.path.join(args.out, "legacy.pt"), _use_new_zipfile_serialization=False)
    raw = open(os.path.join(args.out, "gpt2.pt"), "rb").read()
    open(os.path.join(args.out, "truncated.pt"), "wb").write(raw[: len(raw) - 1000])
    write_damaged(st, args.out)
    missing = collections.OrderedDict(sd)
    del missing["transformer.h.1.mlp.c_fc.bias"]
    safetensors_io.save(os.path.join(args.out, "missing.safetensors"), missing)
    extra = collections.OrderedDict(sd)  # a third block for a two-block model
    extra["transformer.h.2.ln_1.weight"] = torch.ones(m["width"])
    safetensors_io.save(os.path.join(args.out, "extra.safetensors"), extra)
    head = collections.OrderedDict(sd)  # an untied head for a tied model
    head["lm_head.weight"] = sd["transformer.wte.weight"] * 2
    safetensors_io.save(os.path.join(args.out, "head.safetensors"), head)
    shape = collections.OrderedDict(sd)
    shape["transformer.h.0.attn.c_proj.weight"] = torch.zeros(m["width"], m["width"] + 2)
    safetensors_io.save(os.path.join(args.out, "shape.safetensors"), shape)
    tokens = torch.randint(0, VOCAB_ROWS, (BATCH, m["seq_len"]),
                           generator=torch.Generator().manual_seed(3))
    np.save(os.path.join(args.out, "tokens.npy"), tokens.numpy())
    tokens.numpy().astype("<i8").tofile(os.path.join(args.out, "tokens.bin"))
    print(f"wrote {args.out}: {len(sd)} GPT-2 tensors, vocab rows {VOCAB_ROWS}, positions {POSITIONS}")


def gpt2_forward(sd, cfg, ids):
    """GPT-2 as Hugging Face defines it, reading tensors by their names."""
    assert cfg.get("activation_function", "gelu_new") == "gelu_new", cfg
    d, heads, layers = cfg["n_embd"], cfg["n_head"], cfg["n_layer"]
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    p = "transformer." if "transformer.wte.weight" in sd else ""
    sd = {k: v.to(torch.float32) for k, v in sd.items()}
    b, t = ids.shape
    h = sd[p + "wte.weight"][ids] + sd[p + "wpe.weight"][torch.arange(t)]

    def conv1d(x, name):  # transformers.pytorch_utils.Conv1D: x @ weight + bias, weight [in, out]
        return x @ sd[name + ".weight"] + sd[name + ".bias"]

    def split_heads(x):
        return x.view(b, t, heads, d // heads).permute(0, 2, 1, 3)

    causal = torch.tril(torch.ones(t, t, dtype=torch.bool))
    for i in range(layers):
        q = f"{p}h.{i}."
        a = F.layer_norm(h, (d,), sd[q + "ln_1.weight"], sd[q + "ln_1.bias"], eps)
        query, key, value = conv1d(a, q + "attn.c_attn").split(d, dim=2)
        query, key, value = split_heads(query), split_heads(key), split_heads(value)
        w = query @ key.transpose(-1, -2) / math.sqrt(value.size(-1))
        w = torch.where(causal, w, torch.tensor(torch.finfo(w.dtype).min))
        o = (torch.softmax(w, dim=-1) @ value).permute(0, 2, 1, 3).reshape(b, t, d)
        h = h + conv1d(o, q + "attn.c_proj")
        m = conv1d(F.layer_norm(h, (d,), sd[q + "ln_2.weight"], sd[q + "ln_2.bias"], eps), q + "mlp.c_fc")
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (m + 0.044715 * m.pow(3))))
        h = h + conv1d(m, q + "mlp.c_proj")
    h = F.layer_norm(h, (d,), sd[p + "ln_f.weight"], sd[p + "ln_f.bias"], eps)
    tied = cfg.get("tie_word_embeddings", True)
    head = sd[p + "wte.weight"] if tied or "lm_head.weight" not in sd else sd["lm_head.weight"]
    return h @ head.t()


def gpt2_forward_cmd(args):
    path = args.weights
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")
    config_json = os.path.join(folder, "config.json")
    if os.path.exists(config_json) and not args.config:
        cfg = json.load(open(config_json))
        assert cfg["model_type"] == "gpt2" and cfg["architectures"] == ["GPT2LMHeadModel"], cfg
    else:
        m = model_section(args.config)
        cfg = {"n_embd": m["width"], "n_head": m["heads"], "n_layer": m["layers"],
               "tie_word_embeddings": m.get("tied_embeddings", True)}
    sd = safetensors_io.load(path)
    ids = torch.from_numpy(np.load(args.tokens).astype(np.int64))
    with torch.no_grad():
        np.save(args.out, gpt2_forward(sd, cfg, ids).numpy())


def check_export(args):
    sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "scripts"))
    import gpt_torch_reference as ref
    import load_checkpoint
    m = model_section(args.config)
    o = ref.gpt_options(m)
    folder = args.folder
    cfg = json.load(open(os.path.join(folder, "config.json")))
    want_cfg = {"model_type": "gpt2", "vocab_size": o["vocab_size"], "n_positions": o["seq_len"],
                "n_embd": o["width"], "n_layer": o["layers"], "n_head": o["heads"],
                "n_inner": o["mlp_width"], "activation_function": "gelu_new",
                "layer_norm_epsilon": 1e-5, "tie_word_embeddings": o["tied_embeddings"]}
    for k, v in want_cfg.items():
        assert cfg[k] == v, (k, cfg[k], v)
    header = safetensors_io.read_header(os.path.join(folder, "model.safetensors"))
    assert header["__metadata__"]["format"] == "pt", header["__metadata__"]
    d, f = o["width"], o["mlp_width"]
    want = {"transformer.wte.weight": [o["vocab_size"], d], "transformer.wpe.weight": [o["seq_len"], d]}
    for i in range(o["layers"]):
        h = f"transformer.h.{i}."
        want.update({h + "ln_1.weight": [d], h + "ln_1.bias": [d], h + "attn.c_attn.weight": [d, 3 * d],
                     h + "attn.c_attn.bias": [3 * d], h + "attn.c_proj.weight": [d, d],
                     h + "attn.c_proj.bias": [d], h + "ln_2.weight": [d], h + "ln_2.bias": [d],
                     h + "mlp.c_fc.weight": [d, f], h + "mlp.c_fc.bias": [f],
                     h + "mlp.c_proj.weight": [f, d], h + "mlp.c_proj.bias": [d]})
    want.update({"transformer.ln_f.weight": [d], "transformer.ln_f.bias": [d]})
    if not o["tied_embeddings"]:
        want["lm_head.weight"] = [o["vocab_size"], d]
    got = {k: v["shape"] for k, v in header.items() if k != "__metadata__"}
    assert got == want, (sorted(set(got) ^ set(want)), [(k, got.get(k), want[k]) for k in want if got.get(k) != want[k]])
    assert all(v["dtype"] == "F32" for k, v in header.items() if k != "__metadata__")
    # The values: GPT-2's layouts mapped back (the reference's own mapping) are the checkpoint's.
    exported = ref.from_gpt2_state(safetensors_io.load(os.path.join(folder, "model.safetensors")), o)
    saved = load_checkpoint.load_state_dict(args.checkpoint)
    assert set(exported) == set(saved), sorted(set(exported) ^ set(saved))
    for k, v in saved.items():
        assert exported[k].shape == v.shape and torch.equal(exported[k], v), k
    print(f"export {folder}: {len(got)} tensors under GPT-2's names, shapes, F32, config.json and "
          f"values equal to {args.checkpoint}")


def compare(args):
    a = np.load(args.a)
    b = np.load(args.b) if args.b.endswith(".npy") else np.fromfile(args.b, "<f4").reshape(a.shape)
    if args.cols:
        if a.shape[-1] > args.cols:
            assert np.all(a[..., args.cols:] == 0), "padded vocabulary columns are not 0"
            a = a[..., : args.cols]
        if b.shape[-1] > args.cols:
            assert np.all(b[..., args.cols:] == 0), "padded vocabulary columns are not 0"
            b = b[..., : args.cols]
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = float(np.abs(a.astype(np.float64) - b).max())
    scale = float(np.abs(a).max())
    print(f"max |difference| {diff:.3g} (logits up to {scale:.3g}): {args.a} vs {args.b}")
    assert diff <= args.tol, f"{diff} > {args.tol}"


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("config")
    w.add_argument("out")
    g = sub.add_parser("gpt2-forward")
    g.add_argument("weights")
    g.add_argument("tokens")
    g.add_argument("out")
    g.add_argument("--config")
    c = sub.add_parser("check-export")
    c.add_argument("folder")
    c.add_argument("checkpoint")
    c.add_argument("config")
    k = sub.add_parser("compare")
    k.add_argument("a")
    k.add_argument("b")
    k.add_argument("tol", type=float)
    k.add_argument("--cols", type=int, default=0)
    args = p.parse_args()
    if args.cmd != "compare":
        import_torch()
    {"write": write, "gpt2-forward": gpt2_forward_cmd, "check-export": check_export,
     "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
